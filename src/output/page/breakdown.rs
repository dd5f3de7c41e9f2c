//! One experiment's breakdowns on its page (`ab.dimensions`): per dimension, whether each drawn
//! metric's effect differs between the values (Cochran's Q) and a table of the values (traffic,
//! and per compared variant the difference and its q-value); per query, the same table in
//! three orders (by traffic, the queries flagged worse or better, the engagement lost), chosen
//! with CSS tabs: the page runs no script.
//!
//! Every number is a figure of the A/B API's `/dimensions` and `/queries` documents, placed
//! under `breakdown` in the experiment's report (`tests/experiment_page/browser.py` fetches
//! them and the browser test compares).

use std::fmt::Write;

use super::text::{cell, element, escape, figure, number, p_text, path_segment, signed, thousands};
use super::PageData;
use crate::experiments::breakdown::{DimensionReport, DimensionsReport, HeterogeneityReport};

/// Queries shown per order of the query table (the API has them all).
const SHOWN_QUERIES: usize = 50;

/// The breakdown block of an experiment's section; empty without a breakdown, or without a
/// comparison in it (an experiment of one variant, or whose control has no traffic).
pub(super) fn block(data: &PageData, breakdown: Option<&DimensionsReport>) -> String {
    let Some(breakdown) = breakdown else { return String::new() };
    if breakdown.dimensions.iter().chain(&breakdown.queries).all(|d| d.heterogeneity.is_empty()) {
        return String::new();
    }
    let mut out = String::from(r#"<div class="breakdown" data-b="breakdown"><h3>Where it changed</h3>"#);
    let _ = write!(
        out,
        r#"<p class="meta">Per value: the experiment's comparison over its impressions, and its q-value (Benjamini-Hochberg across the values; ✱ at most {}). A value is tested with ab.min_dimension_impressions impressions in each arm.</p>"#,
        format!("{:.4}", 1.0 - breakdown.confidence).trim_end_matches('0'),
    );
    for dimension in &breakdown.dimensions {
        out.push_str(&dimension_table(data, breakdown, dimension));
    }
    if let Some(queries) = &breakdown.queries {
        out.push_str(&query_tables(data, breakdown, queries));
    }
    out.push_str("</div>");
    out
}

/// The drawn metrics' heterogeneity verdicts of a dimension, one line per compared variant and
/// metric.
fn verdicts(data: &PageData, breakdown: &DimensionsReport, dimension: &DimensionReport) -> String {
    let mut out = String::from("<ul class=\"verdicts\">");
    for h in dimension.heterogeneity.iter().filter(|h| data.drawn_metrics.contains(&h.metric)) {
        let path =
            format!("{}|test|p_value", element("heterogeneity", &[("variant", &h.variant), ("metric", &h.metric)]));
        let said = match (&h.test, h.differs) {
            (Some(t), true) => format!(
                r#"<b class="worse">differs between values</b> (Cochran's Q p = {}, I² {:.0}%)"#,
                figure(&path, t.p_value, &p_text(t.p_value)),
                100.0 * t.i_squared
            ),
            (Some(t), false) => {
                format!(
                    "no evidence that it differs between values (Cochran's Q p = {})",
                    figure(&path, t.p_value, &p_text(t.p_value))
                )
            }
            (None, _) => "not tested: fewer than two values with enough impressions".to_string(),
        };
        let _ = write!(
            out,
            "<li>{} − {} on {}: {said}{}</li>",
            escape(&h.variant),
            escape(&breakdown.control),
            escape(&h.metric),
            flagged_text(h)
        );
    }
    out.push_str("</ul>");
    out
}

/// "; worse on mobile, better on desktop" for the values flagged.
fn flagged_text(h: &HeterogeneityReport) -> String {
    let names = |list: &[crate::experiments::breakdown::FlaggedValue]| {
        list.iter().take(5).map(|f| escape(&f.value)).collect::<Vec<_>>().join(", ")
    };
    let mut parts = Vec::new();
    if !h.worse.is_empty() {
        parts.push(format!(r#"<span class="worse">worse</span> on {}"#, names(&h.worse)));
    }
    if !h.better.is_empty() {
        parts.push(format!(r#"<span class="better">better</span> on {}"#, names(&h.better)));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("; {}", parts.join(", "))
    }
}

/// The header cells of a value table's comparison columns: per compared variant and drawn
/// metric, the difference and the q-value.
fn comparison_headers(data: &PageData, dimension: &DimensionReport, control: &str) -> (String, Vec<(String, String)>) {
    let mut variants: Vec<&str> = Vec::new();
    for h in &dimension.heterogeneity {
        if !variants.contains(&h.variant.as_str()) {
            variants.push(&h.variant);
        }
    }
    let mut head = String::new();
    let mut columns = Vec::new();
    for variant in variants {
        for metric in data.drawn_metrics.iter().filter(|m| dimension.heterogeneity.iter().any(|h| h.metric == **m)) {
            let comparison = element("comparisons", &[("variant", variant)]);
            let _ = write!(
                head,
                r#"<th data-col="values|{{row}}|report|{}|metrics|{}|difference">{} − {} {}</th><th data-col="values|{{row}}|q_values|{}|{}">q</th>"#,
                escape(&comparison),
                path_segment(metric),
                escape(variant),
                escape(control),
                escape(metric),
                path_segment(variant),
                path_segment(metric),
            );
            columns.push((variant.to_string(), metric.clone()));
        }
    }
    (head, columns)
}

/// One row's comparison cells.
fn comparison_cells(
    value: &crate::experiments::breakdown::ValueReport,
    columns: &[(String, String)],
    confidence: f64,
) -> String {
    let mut out = String::new();
    for (variant, metric) in columns {
        let cmp = value
            .report
            .comparisons
            .iter()
            .find(|c| &c.variant == variant)
            .and_then(|c| c.metrics.iter().find(|(m, _)| m == metric))
            .map(|(_, c)| c);
        out.push_str(&cmp.map_or("<td>–</td>".into(), |c| cell(c.difference, &signed(c.difference))));
        let q = value.q_values.get(variant).and_then(|q| q.0.iter().find(|(m, _)| m == metric)).map(|(_, q)| *q);
        match q {
            Some(q) if q <= 1.0 - confidence => {
                // The mark is the style's (`td.flagged::after`): the cell's text stays the figure.
                let _ = write!(out, r#"<td data-v="{q}" class="flagged">{}</td>"#, escape(&p_text(q)));
            }
            Some(q) => out.push_str(&cell(q, &p_text(q))),
            None => out.push_str("<td>–</td>"),
        }
    }
    out
}

/// A dimension's verdicts and its table of values, busiest first.
fn dimension_table(data: &PageData, breakdown: &DimensionsReport, dimension: &DimensionReport) -> String {
    let name = &dimension.dimension;
    let mut out = format!(
        r#"<div data-b="{}"><h4>By {}: {}, {} impressions</h4>"#,
        escape(&element("dimensions", &[("dimension", name)])),
        escape(name),
        plural(dimension.values.len(), "value", "values"),
        thousands(dimension.impressions as i64)
    );
    out.push_str(&verdicts(data, breakdown, dimension));
    out.push_str(r#"<div class="scroll">"#);
    out.push_str(&value_table(data, breakdown, dimension, name, usize::MAX));
    out.push_str("</div></div>");
    out
}

/// A table of a dimension's values, the busiest `shown` of them: each one's traffic and its
/// comparisons on the drawn metrics, `heading` over the values' column.
fn value_table(
    data: &PageData,
    breakdown: &DimensionsReport,
    dimension: &DimensionReport,
    heading: &str,
    shown: usize,
) -> String {
    let (head, columns) = comparison_headers(data, dimension, &breakdown.control);
    let mut out = format!(
        r#"<table class="values"><thead><tr><th>{}</th><th data-col="values|{{row}}|impressions">impressions</th><th data-col="values|{{row}}|share">share</th>{head}</tr></thead><tbody>"#,
        escape(heading)
    );
    for value in dimension.values.iter().take(shown) {
        let _ = write!(
            out,
            r#"<tr data-row="value={}"><td>{}</td>{}{}{}</tr>"#,
            path_segment(&value.value),
            escape(&value.value),
            cell(value.impressions as f64, &thousands(value.impressions as i64)),
            cell(value.share, &format!("{}%", number(100.0 * value.share))),
            comparison_cells(value, &columns, breakdown.confidence)
        );
    }
    out.push_str("</tbody></table>");
    out
}

/// The query tables: by traffic, the flagged queries of the first drawn metric, and the
/// engagement lost, one shown at a time (radio buttons styled as tabs).
fn query_tables(data: &PageData, breakdown: &DimensionsReport, queries: &DimensionReport) -> String {
    let mut out = format!(
        r#"<div data-b="queries"><h4>Per query: {} tracked, {} impressions</h4>"#,
        plural(queries.values.len(), "query", "queries"),
        thousands(queries.impressions as i64)
    );
    out.push_str(&verdicts(data, breakdown, queries));
    let id = path_segment(&breakdown.experiment);
    let _ = write!(
        out,
        r#"<div class="tabs"><input type="radio" name="q-{id}" id="q-{id}-traffic" checked><label for="q-{id}-traffic">by traffic</label><input type="radio" name="q-{id}" id="q-{id}-flagged"><label for="q-{id}-flagged">flagged</label><input type="radio" name="q-{id}" id="q-{id}-lost"><label for="q-{id}-lost">engagement lost</label>"#
    );
    // By traffic: the busiest queries with their comparisons.
    out.push_str(r#"<div class="tab traffic scroll">"#);
    out.push_str(&value_table(data, breakdown, queries, "query", SHOWN_QUERIES));
    out.push_str("</div>");
    // Flagged: worse, then better, on each drawn metric.
    out.push_str(r#"<div class="tab flagged scroll"><table class="values"><thead><tr><th>query</th><th>metric</th><th>direction</th><th>difference</th><th>q</th></tr></thead><tbody>"#);
    for h in queries.heterogeneity.iter().filter(|h| data.drawn_metrics.contains(&h.metric)) {
        let base = element("heterogeneity", &[("variant", &h.variant), ("metric", &h.metric)]);
        for (direction, list) in [("worse", &h.worse), ("better", &h.better)] {
            for f in list.iter().take(SHOWN_QUERIES) {
                let at = format!("{base}|{}", element(direction, &[("value", &f.value)]));
                let _ = write!(
                    out,
                    r#"<tr><td>{}</td><td>{} − {} {}</td><td class="{direction}">{direction}</td><td>{}</td><td>{}</td></tr>"#,
                    escape(&f.value),
                    escape(&h.variant),
                    escape(&breakdown.control),
                    escape(&h.metric),
                    figure(&format!("{at}|difference"), f.difference, &signed(f.difference)),
                    figure(&format!("{at}|q_value"), f.q_value, &p_text(f.q_value)),
                );
            }
        }
    }
    out.push_str("</tbody></table></div>");
    // Engagement lost: the traffic-weighted view.
    out.push_str(r#"<div class="tab lost scroll"><table class="values"><thead><tr><th>query</th><th>variant</th><th>engaged impressions lost</th><th>its impressions</th></tr></thead><tbody>"#);
    for lost in &queries.engagement_lost {
        let at = element("engagement_lost", &[("variant", &lost.variant), ("value", &lost.value)]);
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&lost.value),
            escape(&lost.variant),
            figure(
                &format!("{at}|engaged_impressions_lost"),
                lost.engaged_impressions_lost,
                &number(lost.engaged_impressions_lost)
            ),
            figure(&format!("{at}|impressions"), lost.impressions as f64, &thousands(lost.impressions as i64)),
        );
    }
    out.push_str("</tbody></table></div></div></div>");
    out
}

/// `1 query`, `2 queries`.
fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{} {}", thousands(n as i64), if n == 1 { one } else { many })
}
