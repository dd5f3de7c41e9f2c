//! The page's documents: the index, an experiment's page, the replay file, and the
//! data-quality panel they share. Written as strings, with no template engine: the pages are
//! small, and every value from events passes through [`escape`].

use std::fmt::Write;

use super::experiment::{section, verdict, Verdict};
use super::text::{count, element, escape, figure, p_text, path_segment, thousands};
use super::{DataQuality, Origin, PageData};
use crate::time::EventTime;

/// The page's only style. `content-visibility: auto` lets the browser skip laying out the
/// experiments out of view: a report of 50 experiments loaded in 0.86 to 1.1 s without it and
/// 0.27 to 0.58 s with it (chromium headless, the same file, on the 2-core machine).
const STYLE: &str = r#"
:root{color-scheme:light}
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:0;color:#1a1a1a;background:#fff}
main{max-width:1120px;margin:0 auto;padding:12px 14px 40px}
section.experiment{content-visibility:auto;contain-intrinsic-size:auto 1800px}
h1{font-size:1.45em;margin:.3em 0}h2{font-size:1.25em;margin:1.4em 0 .3em;border-bottom:2px solid #0072B2}
h3{font-size:1.05em;margin:1.1em 0 .3em}
a{color:#005a8c}
.meta{color:#444;font-size:.92em;margin:.2em 0}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;font-variant-numeric:tabular-nums;margin:.3em 0}
th,td{padding:3px 6px;border-bottom:1px solid #ddd;text-align:right;white-space:nowrap}
table{font-size:.94em}
th:first-child,td:first-child{text-align:left}
th{font-weight:600;background:#f4f4f4}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(100%,440px),1fr));gap:8px 24px}
.charts figure{margin:0}.charts figcaption{font-size:.88em;color:#333}
svg.chart{width:100%;height:auto;display:block}
svg.chart .grid{stroke:#e2e2e2}svg.chart .zero{stroke:#444;stroke-width:1}
svg.chart .tick{font-size:13px;fill:#444}
svg.chart .band{fill-opacity:.18;stroke:none}
svg.chart .outline{fill:none;stroke-width:1;stroke-dasharray:2 2}
svg.chart .line{fill:none;stroke-width:2.2}
.legend{list-style:none;padding:0;margin:.2em 0;display:flex;flex-wrap:wrap;gap:4px 16px;font-size:.9em}
.legend svg{vertical-align:middle;margin-right:4px}
details.all>summary{cursor:pointer;font-weight:600;padding:.4em 0}
.tabs>input{position:absolute;opacity:0}.tabs>label{display:inline-block;padding:.2em .8em;margin:.3em .3em .3em 0;border:1px solid #bbb;border-radius:4px;cursor:pointer}
.tabs>input:checked+label{font-weight:600;background:#e8eef8}.tabs>input:focus-visible+label{outline:2px solid #0072b2}.tabs .tab{display:none}
.tabs>input:nth-of-type(1):checked~.tab.traffic,.tabs>input:nth-of-type(2):checked~.tab.flagged,.tabs>input:nth-of-type(3):checked~.tab.lost{display:block}
td.flagged{font-weight:600}td.flagged::after{content:" ✱"}
.better{color:#00603f;font-weight:600}.worse{color:#a33b00;font-weight:600}
.alert{background:#fff4e0;border-left:4px solid #D55E00;padding:.4em .7em;margin:.5em 0}
ul.decisions{padding-left:1.2em;margin:.3em 0}
div.metric{margin:.4em 0 1em}div.metric h4{margin:.6em 0 .2em}
.bar{display:flex;height:14px;border-radius:3px;overflow:hidden;max-width:520px;margin:.3em 0}
"#;

/// The document around `body`: `refresh` reloads it every so many seconds.
fn document(title: &str, refresh: Option<u32>, body: &str) -> String {
    let refresh = refresh.map_or(String::new(), |s| format!(r#"<meta http-equiv="refresh" content="{s}">"#));
    format!(
        r#"<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><meta http-equiv="Content-Security-Policy" content="{policy}">{refresh}<title>{}</title><style>{STYLE}</style></head><body><main>{body}</main></body></html>"#,
        escape(title),
        policy = super::DOCUMENT_POLICY,
    )
}

/// When the figures are from, and how they refresh.
fn provenance(data: &PageData) -> String {
    let watermark = match data.quality.watermark {
        None => "none yet".to_string(),
        // A replay's inputs end: every partition idle, the watermark at the end of time.
        Some(EventTime::MAX) => "the end of the input".to_string(),
        Some(ms) => crate::time::format_rfc3339_ms(ms),
    };
    match &data.origin {
        Origin::Live { refresh_seconds, .. } => format!(
            r#"<p class="meta">Made at {} · final through {watermark} (the watermark) · reloads every {refresh_seconds} s</p>"#,
            data.generated
        ),
        Origin::Replay { inputs } => format!(
            r#"<p class="meta">Replay of {} · final through {watermark} · made at {}</p>"#,
            escape(&inputs.join(", ")),
            data.generated
        ),
    }
}

/// `/`: every experiment in a table, and the data's quality.
pub fn index_page(data: &PageData) -> String {
    let refresh = match data.origin {
        Origin::Live { refresh_seconds, .. } => Some(refresh_seconds),
        Origin::Replay { .. } => None,
    };
    let mut body = String::from("<h1>rankpulse: experiments</h1>");
    body.push_str(&provenance(data));
    body.push_str(&experiment_table(data, |name| format!("experiments/{}", path_segment(name))));
    body.push_str(&quality_panel(&data.quality, &data.origin));
    document("rankpulse: experiments", refresh, &body)
}

/// `/experiments/<name>`: one experiment; `None` when it has no report.
pub fn experiment_page(data: &PageData, name: &str) -> Option<String> {
    let i = data.reports.iter().position(|r| r.experiment == name)?;
    let refresh = match data.origin {
        Origin::Live { refresh_seconds, .. } => Some(refresh_seconds),
        Origin::Replay { .. } => None,
    };
    let mut body = format!(r#"<p class="meta"><a href="../">← all experiments</a></p><h1>{}</h1>"#, escape(name));
    body.push_str(&provenance(data));
    body.push_str(&section(data, i, false));
    body.push_str(&quality_panel(&data.quality, &data.origin));
    Some(document(&format!("rankpulse: {name}"), refresh, &body))
}

/// The page of an experiment without a report: it may be unknown, or have no finalized
/// impression yet.
pub fn not_found(name: &str, refresh_seconds: u32) -> String {
    let body = format!(
        r#"<p class="meta"><a href="../">← all experiments</a></p><h1>{}</h1><p>No finalized impressions of this experiment (yet): it may be unknown, or its impressions may still be within their attribution window.</p>"#,
        escape(name)
    );
    document(&format!("rankpulse: {name}"), Some(refresh_seconds), &body)
}

/// `replay --html`: the index, every experiment and the data's quality in one file.
pub fn report_file(data: &PageData) -> String {
    let mut body = String::from("<h1>rankpulse: replay report</h1>");
    body.push_str(&provenance(data));
    body.push_str(&experiment_table(data, |name| format!("#experiment-{}", path_segment(name))));
    for i in 0..data.reports.len() {
        body.push_str(&section(data, i, true));
    }
    body.push_str(&quality_panel(&data.quality, &data.origin));
    document("rankpulse: replay report", None, &body)
}

/// The experiments as a table, each linked by `link(name)`.
fn experiment_table(data: &PageData, link: impl Fn(&str) -> String) -> String {
    if data.reports.is_empty() {
        return r#"<p>No experiment has finalized impressions yet: an impression is final once its attribution window has passed.</p>"#.to_string();
    }
    let mut out = String::from(
        r#"<div class="scroll"><table class="experiments"><thead><tr><th>experiment</th><th>variants (impressions)</th><th>split p</th><th>looks</th><th>decided (anytime-valid)</th></tr></thead><tbody>"#,
    );
    for report in &data.reports {
        let name = &report.experiment;
        let variants: Vec<String> = report
            .variants
            .iter()
            .map(|v| {
                format!(
                    r#"<span data-b="{}">{} {}</span>"#,
                    escape(&element("variants", &[("variant", &v.variant)])),
                    escape(&v.variant),
                    count("impressions", v.impressions)
                )
            })
            .collect();
        let split = report
            .sample_ratio
            .as_ref()
            .map_or("–".into(), |s| figure("sample_ratio|p_value", s.p_value, &p_text(s.p_value)));
        let mut decided = Vec::new();
        for comparison in &report.comparisons {
            let verdicts: Vec<Verdict> = comparison
                .metrics
                .iter()
                .map(|(key, cmp)| verdict(cmp, data.lower_is_better.contains(key), report.confidence))
                .collect();
            let better = verdicts.iter().filter(|v| **v == Verdict::Better).count();
            let worse = verdicts.iter().filter(|v| **v == Verdict::Worse).count();
            decided.push(format!(
                "{}: {} better, {} worse",
                escape(&comparison.variant),
                if better > 0 { format!(r#"<span class="better">{better}</span>"#) } else { "0".into() },
                if worse > 0 { format!(r#"<span class="worse">{worse}</span>"#) } else { "0".into() },
            ));
        }
        let _ = write!(
            out,
            r#"<tr data-experiment="{}" data-b="{}"><td><a href="{}">{}</a></td><td>{}</td><td>{split}</td><td>{}</td><td>{}</td></tr>"#,
            escape(name),
            path_segment(name),
            escape(&link(name)),
            escape(name),
            variants.join(" · "),
            report.sequential.looks,
            if decided.is_empty() { "–".into() } else { decided.join("; ") },
        );
    }
    out.push_str("</tbody></table></div>");
    out
}

/// Rejections by reason, the engagements that found no impression, the watermark's lag.
fn quality_panel(q: &DataQuality, origin: &Origin) -> String {
    let mut out = String::from(r#"<section class="quality"><h2>Data quality</h2><div class="scroll"><table><tbody>"#);
    let row = |out: &mut String, label: &str, value: String| {
        let _ = write!(out, "<tr><td>{label}</td><td>{value}</td></tr>");
    };
    row(&mut out, "impressions consumed", thousands(q.consumed[0] as i64));
    row(&mut out, "engagements consumed", thousands(q.consumed[1] as i64));
    let e = &q.engagements;
    row(&mut out, "engagements attributed", thousands(e.attributed as i64));
    row(&mut out, "engagements late (after their impression was final)", thousands(e.late as i64));
    row(&mut out, "engagements orphaned (no impression arrived)", thousands(e.orphaned as i64));
    row(&mut out, "engagements on a result not shown", thousands(e.not_shown as i64));
    row(&mut out, "engagements before their impression", thousands(e.outside_window as i64));
    row(&mut out, "engagements duplicated", thousands(e.duplicate as i64));
    row(&mut out, "impressions late (window closed on arrival)", thousands(q.impressions_late as i64));
    row(&mut out, "impressions duplicated", thousands(q.impressions_duplicate as i64));
    row(&mut out, "impressions final after their window closed", thousands(q.window_late_impressions as i64));
    if let Origin::Live { watermark_lag_ms, .. } = origin {
        let lag = watermark_lag_ms.map_or("no watermark yet".to_string(), |ms| format!("{:.1} s", ms as f64 / 1000.0));
        row(&mut out, "watermark lag (behind the wall clock)", lag);
    }
    out.push_str("</tbody></table></div>");
    if q.rejected.is_empty() {
        out.push_str("<p>No message was rejected.</p>");
    } else {
        out.push_str(r#"<h3>Rejected messages</h3><div class="scroll"><table><thead><tr><th>input</th><th>reason</th><th>messages</th></tr></thead><tbody>"#);
        for (input, reason, n) in &q.rejected {
            let _ = write!(out, "<tr><td>{input}</td><td>{reason}</td><td>{}</td></tr>", thousands(*n as i64));
        }
        out.push_str("</tbody></table></div>");
    }
    out.push_str("</section>");
    out
}
