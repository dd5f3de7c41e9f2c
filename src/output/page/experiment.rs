//! One experiment's sections: the decision, the traffic split, the drawn metrics' curves and
//! figures, every metric's figures, interleaving, judged figures and notes.

use std::fmt::Write;

use super::chart::{self, line_chart, Series};
use super::text::{
    cell, count, element, escape, figure, interval, number, p_figure, p_text, path_segment, percent, signed, thousands,
};
use super::PageData;
use crate::experiments::history::{ExperimentHistory, HistoryPoint};
use crate::experiments::interleaving::InterleavingReport;
use crate::experiments::judged::JudgedReport;
use crate::experiments::ExperimentReport;
use crate::stats::Comparison;

/// Where a comparison stands on one metric, as the anytime-valid figures say (the ones that
/// may be watched): the adjusted always-valid p-value (what the shipped alert reads) below
/// 1 − confidence and the sequence wholly on one side of 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    Better,
    Worse,
    /// The looks' sequences have no value in common: the effect changed over time.
    Changed,
    Undecided,
}

pub(super) fn verdict(cmp: &Comparison, lower_is_better: bool, confidence: f64) -> Verdict {
    if cmp.difference_cs_empty {
        return Verdict::Changed;
    }
    let p = cmp.adjusted_always_valid_p_value.or(cmp.always_valid_p_value);
    match (p, cmp.difference_cs) {
        (Some(p), Some([low, high])) if p < 1.0 - confidence && (low > 0.0 || high < 0.0) => {
            if (low > 0.0) != lower_is_better {
                Verdict::Better
            } else {
                Verdict::Worse
            }
        }
        _ => Verdict::Undecided,
    }
}

fn verdict_text(v: Verdict) -> &'static str {
    match v {
        Verdict::Better => r#"<span class="better">better</span>"#,
        Verdict::Worse => r#"<span class="worse">worse</span>"#,
        Verdict::Changed => "changed over time",
        Verdict::Undecided => "not decided",
    }
}

/// One experiment; `heading`: an `h2` (the report file) or none (its own page has the `h1`).
pub(super) fn section(data: &PageData, i: usize, heading: bool) -> String {
    let report = &data.reports[i];
    let history = data.histories.get(i).and_then(Option::as_ref).filter(|h| !h.points.is_empty());
    let name = &report.experiment;
    let mut out = format!(
        r#"<section class="experiment" id="experiment-{id}" data-experiment="{}" data-b="{id}">"#,
        escape(name),
        id = path_segment(name),
    );
    if heading {
        let _ = write!(out, "<h2>{}</h2>", escape(name));
    }
    let looks = match &report.sequential.look_window {
        Some(window) => format!("{} looks, one per complete {} window", report.sequential.looks, escape(window)),
        None => format!("{} looks", report.sequential.looks),
    };
    let _ = write!(
        out,
        r#"<p class="meta">control <b>{}</b> · unit {} · {}% intervals · {looks} · multiple comparisons: {}</p>"#,
        escape(&report.control),
        report.unit,
        percent(report.confidence),
        report.correction
    );
    out.push_str(&split_alert(report));
    out.push_str("<h3>Decision</h3>");
    out.push_str(&decisions(report, data));
    out.push_str(&traffic(report, history));
    out.push_str("<h3>Metrics over time</h3>");
    if history.is_none() {
        out.push_str(r#"<p class="meta">The curves start at the first look: the first complete window of the first configured size.</p>"#);
    }
    for key in &data.drawn_metrics {
        out.push_str(&drawn_metric(data, report, history, key));
    }
    out.push_str(&all_metrics(data, report));
    for il in &report.interleaving {
        out.push_str(&interleaving(name, il, history));
    }
    if let Some(judged) = &report.judged {
        out.push_str(&judged_table(judged));
    }
    out.push_str(&super::breakdown::block(data, data.breakdowns.get(i).and_then(Option::as_ref)));
    if !report.notes.is_empty() {
        out.push_str("<h3>Notes</h3><ul>");
        for note in &report.notes {
            let _ = write!(out, "<li>{}</li>", escape(note));
        }
        out.push_str("</ul>");
    }
    out.push_str("</section>");
    out
}

/// Metrics named in a decision line beyond the drawn ones, before "and N more".
const NAMED_IN_DECISION: usize = 6;

/// The metrics decided one way, for a decision line: the drawn ones first with when the
/// decision was reached, then a few others by name, then how many more.
fn decided_list(decided: &[(&str, &Comparison)], drawn: &[String]) -> String {
    let mut named: Vec<String> = Vec::new();
    for (key, cmp) in decided.iter().filter(|(k, _)| drawn.iter().any(|d| d == k)) {
        let when = cmp.always_valid_significant_at.as_ref().map_or(String::new(), |at| {
            format!(
                " (reached at look {}, through {}, {} impressions)",
                at.look,
                escape(&at.through),
                thousands(at.impressions as i64)
            )
        });
        named.push(format!("{}{when}", escape(key)));
    }
    let others: Vec<&str> = decided.iter().map(|(k, _)| *k).filter(|k| !drawn.iter().any(|d| d == k)).collect();
    named.extend(others.iter().take(NAMED_IN_DECISION).map(|k| escape(k)));
    if others.len() > NAMED_IN_DECISION {
        named.push(format!("{} more", others.len() - NAMED_IN_DECISION));
    }
    named.join(", ")
}

/// One line per comparison: the metrics decided each way, and a failed guardrail.
fn decisions(report: &ExperimentReport, data: &PageData) -> String {
    let mut out = String::from(r#"<ul class="decisions">"#);
    if report.comparisons.is_empty() {
        out.push_str("<li>No comparison yet: the control has no finalized impressions.</li>");
    }
    for comparison in &report.comparisons {
        let mut better = Vec::new();
        let mut worse = Vec::new();
        let mut changed = Vec::new();
        let mut undecided = 0;
        for (key, cmp) in &comparison.metrics {
            match verdict(cmp, data.lower_is_better.contains(key), report.confidence) {
                Verdict::Better => better.push((key.as_str(), cmp)),
                Verdict::Worse => worse.push((key.as_str(), cmp)),
                Verdict::Changed => changed.push((key.as_str(), cmp)),
                Verdict::Undecided => undecided += 1,
            }
        }
        let _ = write!(out, "<li><b>{}</b> against {}: ", escape(&comparison.variant), escape(&comparison.control));
        let mut parts = Vec::new();
        if !better.is_empty() {
            parts.push(format!(
                r#"<span class="better">better</span> on {}"#,
                decided_list(&better, &data.drawn_metrics)
            ));
        }
        if !worse.is_empty() {
            parts.push(format!(r#"<span class="worse">worse</span> on {}"#, decided_list(&worse, &data.drawn_metrics)));
        }
        if !changed.is_empty() {
            parts.push(format!(
                "changed over time (the looks' sequences do not meet) on {}",
                decided_list(&changed, &data.drawn_metrics)
            ));
        }
        if parts.is_empty() {
            parts.push("no metric decided yet".into());
        } else if undecided > 0 {
            parts.push(format!("{undecided} not decided"));
        }
        for (key, cmp) in &comparison.metrics {
            if let Some(g) = cmp.guardrail.filter(|g| g.failed) {
                parts.push(format!(
                    r#"<span class="worse">guardrail {} failed</span> (p = {})"#,
                    escape(key),
                    p_text(g.p_value)
                ));
            }
        }
        out.push_str(&parts.join("; "));
        out.push_str("</li>");
    }
    out.push_str("</ul>");
    out
}

/// A warning when the split test says the traffic is not split as configured.
fn split_alert(report: &ExperimentReport) -> String {
    let Some(srm) = &report.sample_ratio else { return String::new() };
    let sequential = srm.sequential_p_value.is_some_and(|p| p < 1.0 - report.confidence);
    if srm.p_value < 0.001 || sequential {
        return r#"<p class="alert">The traffic split is not what was configured (a sample-ratio mismatch): the comparisons are not to be trusted until its cause is found.</p>"#.to_string();
    }
    String::new()
}

/// A variant's style: its place in the report (control first), so it keeps its colour in
/// every chart of the experiment; a variant of the history no longer reported comes after.
fn style_of(report: &ExperimentReport, variant: &str, history_index: usize) -> usize {
    report.variants.iter().position(|v| v.variant == variant).unwrap_or(report.variants.len() + history_index)
}

/// One series per name in `names` (a history's variants, comparisons or pairs), styled by
/// `style(name, index)`, its point at each look `at(point, index)`: the value and its band
/// (NaN bounds: no band), or none for a gap.
fn series_over<'a>(
    h: &ExperimentHistory,
    names: &'a [String],
    style: impl Fn(&str, usize) -> usize,
    at: impl Fn(&HistoryPoint, usize) -> Option<[f32; 3]>,
) -> Vec<Series<'a>> {
    names
        .iter()
        .enumerate()
        .map(|(i, name)| Series {
            name,
            style: style(name, i),
            points: h
                .points
                .iter()
                .map(|p| match at(p, i) {
                    Some([value, low, high]) => {
                        (p.through, value, (low.is_finite() && high.is_finite()).then_some([low, high]))
                    }
                    None => (p.through, f32::NAN, None),
                })
                .collect(),
            outline: Vec::new(),
        })
        .collect()
}

/// A legend: each variant's line sample and name.
fn legend(report: &ExperimentReport) -> String {
    let mut out = String::from(r#"<ul class="legend">"#);
    for (style, v) in report.variants.iter().enumerate() {
        let dash = match chart::dash(style) {
            "" => String::new(),
            d => format!(r#" stroke-dasharray="{d}""#),
        };
        let _ = write!(
            out,
            r#"<li><svg width="30" height="10" aria-hidden="true"><line x1="1" y1="5" x2="29" y2="5" stroke="{}" stroke-width="2.5"{dash}/></svg>{}</li>"#,
            chart::colour(style),
            escape(&v.variant)
        );
    }
    out.push_str("</ul>");
    out
}

/// The split: a bar of the shares, the counts and the tests, impressions over time.
fn traffic(report: &ExperimentReport, history: Option<&ExperimentHistory>) -> String {
    let mut out = String::from("<h3>Traffic split</h3>");
    let total: u64 = report.variants.iter().map(|v| v.impressions).sum();
    if total > 0 {
        out.push_str(r#"<div class="bar" role="img" aria-label="share of impressions per variant">"#);
        for (s, v) in report.variants.iter().enumerate() {
            let _ = write!(
                out,
                r#"<span style="width:{:.2}%;background:{}" title="{}"></span>"#,
                v.impressions as f64 * 100.0 / total as f64,
                chart::colour(s),
                escape(&v.variant)
            );
        }
        out.push_str("</div>");
    }
    let srm = report.sample_ratio.as_ref();
    let counted = srm.map_or("units", |s| s.counted);
    let _ = write!(
        out,
        r#"<div class="scroll"><table><thead><tr><th>variant</th><th>impressions</th><th>share</th><th>engaged</th><th>{counted} tested</th><th>expected share</th></tr></thead><tbody>"#
    );
    for v in &report.variants {
        let share =
            if total > 0 { format!("{:.1}%", v.impressions as f64 * 100.0 / total as f64) } else { "–".into() };
        let observed = srm
            .and_then(|s| s.observed.get(&v.variant))
            .map_or("–".into(), |&n| count(&format!("sample_ratio|observed|{}", path_segment(&v.variant)), n));
        let expected = srm.and_then(|s| s.expected_share.get(&v.variant)).map_or("–".into(), |&e| {
            figure(
                &format!("sample_ratio|expected_share|{}", path_segment(&v.variant)),
                e,
                &format!("{:.1}%", e * 100.0),
            )
        });
        let _ = write!(
            out,
            r#"<tr><td>{}</td><td {base}>{}</td><td>{share}</td><td {base}>{}</td><td>{observed}</td><td>{expected}</td></tr>"#,
            escape(&v.variant),
            count("impressions", v.impressions),
            count("engaged", v.engaged),
            base = format_args!(r#"data-b="{}""#, escape(&element("variants", &[("variant", &v.variant)]))),
        );
    }
    out.push_str("</tbody></table></div>");
    if let Some(s) = srm {
        let unexpected = if s.unexpected_variants.is_empty() {
            String::new()
        } else {
            format!(" · variants outside the configured split: {}", escape(&s.unexpected_variants.join(", ")))
        };
        let _ = write!(
            out,
            r#"<p class="meta">Split test (chi-square, {} df): p = {} · sequential split test (safe to watch): p = {}{unexpected}</p>"#,
            s.df,
            figure("sample_ratio|p_value", s.p_value, &p_text(s.p_value)),
            p_figure("sample_ratio|sequential_p_value", s.sequential_p_value),
        );
    }
    if let Some(h) = history {
        let series = series_over(
            h,
            &h.variants,
            |name, v| style_of(report, name, v),
            |p, v| p.impressions.get(v).map(|&n| [n as f32, f32::NAN, f32::NAN]),
        );
        let chart = line_chart(&format!("{}: impressions per variant over time", report.experiment), &series, false);
        let _ = write!(
            out,
            r#"<div class="charts"><figure data-chart="traffic">{chart}<figcaption>Impressions per variant, cumulative, at each look</figcaption>{}</figure></div>"#,
            legend(report)
        );
    }
    out
}

/// A drawn metric: the value per variant and the difference per comparison over the looks,
/// and today's figures beside them.
fn drawn_metric(data: &PageData, report: &ExperimentReport, history: Option<&ExperimentHistory>, key: &str) -> String {
    let name = &report.experiment;
    let lower = data.lower_is_better.iter().any(|k| k == key);
    let mut out = format!(
        r#"<div class="metric" data-metric="{}"><h4>{}{}</h4>"#,
        escape(key),
        escape(key),
        if lower { " (lower is better)" } else { "" }
    );
    if let Some((h, m)) = history.and_then(|h| h.metrics.iter().position(|k| k == key).map(|m| (h, m))) {
        let values = series_over(h, &h.variants, |name, v| style_of(report, name, v), |p, v| h.mean(p, v, m));
        let mut differences =
            series_over(h, &h.comparisons, |name, c| style_of(report, name, c + 1), |p, c| h.sequence(p, c, m));
        for (c, series) in differences.iter_mut().enumerate() {
            series.outline = h
                .points
                .iter()
                .filter_map(|p| h.difference(p, c, m).map(|b| (p.through, [b[1], b[2]])))
                .filter(|(_, b)| b[0].is_finite() && b[1].is_finite())
                .collect();
        }
        let _ = write!(
            out,
            r#"<div class="charts"><figure data-chart="value">{}<figcaption>{} per variant, cumulative, with its {}% interval (band)</figcaption>{}</figure>"#,
            line_chart(&format!("{name}: {key} per variant over time"), &values, false),
            escape(key),
            percent(report.confidence),
            legend(report),
        );
        let difference = line_chart(&format!("{name}: {key} difference from control over time"), &differences, true);
        if !difference.is_empty() {
            let _ = write!(
                out,
                r#"<figure data-chart="difference">{difference}<figcaption>Difference from {}: anytime-valid sequence (band) and fixed-horizon interval (dotted)</figcaption></figure>"#,
                escape(&report.control),
            );
        }
        out.push_str("</div>");
    }
    out.push_str(r#"<div class="scroll"><table><thead><tr><th>variant</th><th>impressions</th><th>mean [interval]</th><th>difference [interval]</th><th>anytime-valid</th><th>p</th><th>always-valid p</th><th>adjusted</th></tr></thead><tbody>"#);
    for variant in &report.variants {
        let v = &variant.variant;
        let estimate = variant.metrics.iter().find(|(k, _)| k == key).map(|(_, e)| e);
        let base =
            format!(r#"data-b="{}|metrics|{}""#, escape(&element("variants", &[("variant", v)])), path_segment(key));
        let _ = write!(out, "<tr><td>{}</td>", escape(v));
        match estimate {
            Some(e) => {
                let _ = write!(
                    out,
                    "<td {base}>{}</td><td {base}>{} {}</td>",
                    count("n", e.n),
                    figure("mean", e.mean, &number(e.mean)),
                    interval("ci", e.ci, number)
                );
            }
            None => out.push_str("<td>–</td><td>–</td>"),
        }
        match comparison(report, v, key) {
            Some(cmp) => {
                let base = format!(
                    r#"data-b="{}|metrics|{}""#,
                    escape(&element("comparisons", &[("variant", v)])),
                    path_segment(key)
                );
                let difference = format!(
                    "{} {}",
                    figure("difference", cmp.difference, &signed(cmp.difference)),
                    interval("difference_ci", cmp.difference_ci, signed)
                );
                for cell in [
                    difference,
                    sequence(cmp),
                    p_figure("p_value", cmp.p_value),
                    p_figure("always_valid_p_value", cmp.always_valid_p_value),
                    p_figure("adjusted_always_valid_p_value", cmp.adjusted_always_valid_p_value),
                ] {
                    let _ = write!(out, "<td {base}>{cell}</td>");
                }
                out.push_str("</tr>");
            }
            None => out.push_str(r#"<td colspan="5">control</td></tr>"#),
        }
    }
    out.push_str("</tbody></table></div></div>");
    out
}

/// `variant`'s comparison on `key`, unless it is the control.
fn comparison<'a>(report: &'a ExperimentReport, variant: &str, key: &str) -> Option<&'a Comparison> {
    let c = report.comparisons.iter().find(|c| c.variant == variant)?;
    c.metrics.iter().find(|(k, _)| k == key).map(|(_, cmp)| cmp)
}

/// The anytime-valid sequence of a comparison's difference, as figures.
fn sequence(cmp: &Comparison) -> String {
    match cmp.difference_cs {
        Some(cs) => interval("difference_cs", Some(cs), signed),
        None if cmp.difference_cs_empty => "empty".into(),
        None => "–".into(),
    }
}

/// Every metric in one table: each variant's mean, each comparison's difference, always-valid
/// p-value and verdict (the intervals of the drawn metrics are beside their curves, every
/// one's in the API). Folded, as it is long. The table is the page's bulk with many
/// experiments, so a cell carries only its value: where it is in the API's report is its
/// column's `data-col` with the row's metric for `{row}`.
fn all_metrics(data: &PageData, report: &ExperimentReport) -> String {
    let keys: Vec<&str> =
        report.variants.first().map_or(Vec::new(), |v| v.metrics.iter().map(|(k, _)| k.as_str()).collect());
    let mut out = format!(
        r#"<details class="all"><summary>Every metric ({}): means, differences, always-valid p-values</summary><div class="scroll"><table><thead><tr><th>metric</th>"#,
        keys.len()
    );
    for v in &report.variants {
        let _ = write!(
            out,
            r#"<th data-col="{}|metrics|{{row}}|mean">{}</th>"#,
            escape(&element("variants", &[("variant", &v.variant)])),
            escape(&v.variant)
        );
    }
    for c in &report.comparisons {
        let base = format!("{}|metrics|{{row}}", escape(&element("comparisons", &[("variant", &c.variant)])));
        let _ = write!(
            out,
            r#"<th data-col="{base}|difference">{v} − {control}</th><th data-col="{base}|always_valid_p_value">always-valid p</th><th>verdict</th>"#,
            v = escape(&c.variant),
            control = escape(&c.control),
        );
    }
    out.push_str("</tr></thead><tbody>");
    for key in keys {
        let _ = write!(out, r#"<tr data-row="{}"><td>{}</td>"#, path_segment(key), escape(key));
        for v in &report.variants {
            out.push_str(
                &v.metrics
                    .iter()
                    .find(|(k, _)| k == key)
                    .map_or("<td>–</td>".into(), |(_, e)| cell(e.mean, &number(e.mean))),
            );
        }
        for c in &report.comparisons {
            let Some((_, cmp)) = c.metrics.iter().find(|(k, _)| k == key) else {
                out.push_str("<td>–</td><td>–</td><td>–</td>");
                continue;
            };
            let lower = data.lower_is_better.iter().any(|k| k == key);
            out.push_str(&cell(cmp.difference, &signed(cmp.difference)));
            out.push_str(&cmp.always_valid_p_value.map_or("<td>–</td>".into(), |p| cell(p, &p_text(p))));
            let _ = write!(out, "<td>{}</td>", verdict_text(verdict(cmp, lower, report.confidence)));
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table></div></details>");
    out
}

/// An interleaved group: each pair's preference over the looks and its figures.
fn interleaving(name: &str, il: &InterleavingReport, history: Option<&ExperimentHistory>) -> String {
    let mut out = format!(
        r#"<div data-b="{}"><h3>Interleaving: {}</h3><p class="meta">{} interleaved impressions, {} with an engagement; rankers {}</p>"#,
        escape(&element("interleaving", &[("variant", &il.variant)])),
        escape(&il.variant),
        count("impressions", il.impressions),
        count("engaged", il.engaged),
        escape(&il.rankers.join(", "))
    );
    if let Some(h) = history {
        let own = format!("{}: ", il.variant);
        // The group's own pairs, styled by their place in the history.
        let pairs: Vec<String> = h.pairs.iter().filter(|pair| pair.starts_with(&own)).cloned().collect();
        let index = |pair: &str| h.pairs.iter().position(|p| p == pair).unwrap_or(0);
        let series = series_over(
            h,
            &pairs,
            |pair, _| index(pair),
            |p, i| p.preferences.get(index(&pairs[i])).copied().filter(|b| b[0].is_finite()),
        );
        let chart = line_chart(&format!("{name}: {} preference over time", il.variant), &series, true);
        if !chart.is_empty() {
            let _ = write!(
                out,
                r#"<div class="charts"><figure data-chart="preference">{chart}<figcaption>Preference with its anytime-valid sequence (band): above 0, the first ranker of the pair is preferred</figcaption></figure></div>"#
            );
        }
    }
    out.push_str(r#"<div class="scroll"><table><thead><tr><th>ranker</th><th>opponent</th><th>wins</th><th>losses</th><th>ties</th><th>preference</th><th>interval</th><th>anytime-valid</th><th>sign test p</th><th>always-valid p</th></tr></thead><tbody>"#);
    for pair in &il.pairs {
        let f = &pair.figures;
        let sequence = match f.preference_cs {
            Some(cs) => interval("preference_cs", Some(cs), signed),
            None if f.preference_cs_empty => "empty".into(),
            None => "–".into(),
        };
        let _ = write!(
            out,
            r#"<tr data-b="{}"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{sequence}</td><td>{}</td><td>{}</td></tr>"#,
            escape(&element("pairs", &[("ranker", &pair.ranker), ("opponent", &pair.opponent)])),
            escape(&pair.ranker),
            escape(&pair.opponent),
            count("wins", pair.wins),
            count("losses", pair.losses),
            count("ties", pair.ties),
            figure("preference", f.preference, &signed(f.preference)),
            interval("preference_ci", f.preference_ci, signed),
            p_figure("sign_test_p_value", f.sign_test_p_value),
            p_figure("always_valid_p_value", f.always_valid_p_value),
        );
    }
    out.push_str("</tbody></table></div></div>");
    out
}

/// The judged figures: the share of traffic the list covers and each judged metric per variant.
fn judged_table(judged: &JudgedReport) -> String {
    let mut out = format!(
        r#"<div data-b="judged"><h3>Against the judgment list</h3><p class="meta">Impressions of judged queries; relevant from grade {}</p><div class="scroll"><table><thead><tr><th>metric</th>"#,
        judged.relevance_threshold
    );
    for v in &judged.variants {
        let _ = write!(out, "<th>{}</th>", escape(&v.variant));
    }
    out.push_str("</tr></thead><tbody><tr><td>judged impressions</td>");
    for v in &judged.variants {
        let _ = write!(
            out,
            r#"<td data-b="{}">{}</td>"#,
            escape(&element("variants", &[("variant", &v.variant)])),
            count("impressions", v.impressions)
        );
    }
    out.push_str("</tr><tr><td>share of traffic judged</td>");
    for v in &judged.variants {
        let share = v.share.map_or("–".into(), |s| figure("share", s, &format!("{:.1}%", s * 100.0)));
        let _ =
            write!(out, r#"<td data-b="{}">{share}</td>"#, escape(&element("variants", &[("variant", &v.variant)])));
    }
    out.push_str("</tr>");
    let keys: Vec<&str> =
        judged.variants.first().map_or(Vec::new(), |v| v.metrics.iter().map(|(k, _)| k.as_str()).collect());
    for key in keys {
        let _ = write!(out, "<tr><td>{}</td>", escape(key));
        for v in &judged.variants {
            let cell = v.metrics.iter().find(|(k, _)| k == key).map_or("–".into(), |(_, e)| {
                format!("{} {}", figure("mean", e.mean, &number(e.mean)), interval("ci", e.ci, number))
            });
            let _ = write!(
                out,
                r#"<td data-b="{}|metrics|{}">{cell}</td>"#,
                escape(&element("variants", &[("variant", &v.variant)])),
                path_segment(key)
            );
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table></div></div>");
    out
}
