//! The text report's breakdown of each experiment by dimension (`replay --breakdown`): per
//! dimension and compared variant, for MRR, abandonment and nDCG, the heterogeneity test and
//! each value's difference with its interval, p-value and q-value (the figures are
//! `crate::experiments::breakdown`'s).

use crate::experiments::breakdown::{DimensionReport, DimensionsReport};

fn p(p: Option<f64>) -> String {
    p.map_or("-".to_string(), |p| format!("{p:.2e}"))
}

/// Every experiment's breakdown, one block per dimension.
pub(super) fn breakdown_summary(reports: &[DimensionsReport]) -> String {
    let mut out = String::new();
    // An experiment without a comparison (one variant, or no control traffic) has nothing to
    // break down.
    let compared = |r: &&DimensionsReport| r.dimensions.iter().chain(&r.queries).any(|d| !d.heterogeneity.is_empty());
    for report in reports.iter().filter(compared) {
        for dimension in &report.dimensions {
            out.push_str(&dimension_block(report, dimension));
        }
        if let Some(queries) = &report.queries {
            out.push_str(&query_block(report, queries));
        }
    }
    out
}

fn dimension_block(report: &DimensionsReport, dimension: &DimensionReport) -> String {
    let alpha = 1.0 - report.confidence;
    let level = format!("{:.0}%", report.confidence * 100.0);
    let mut out = format!(
        "\n== breakdown of {} by {} (cumulative; {} values, {} impressions{}) ==\n",
        report.experiment,
        dimension.dimension,
        dimension.values.len(),
        dimension.impressions,
        match dimension.other_impressions {
            0 => String::new(),
            n => format!(", {n} under `other` beyond ab.max_dimension_values"),
        }
    );
    let headline = |key: &str| key == "mrr" || key == "abandonment_rate" || key.starts_with("ndcg@");
    for h in dimension.heterogeneity.iter().filter(|h| headline(&h.metric)) {
        let test = match &h.test {
            Some(t) => format!(
                "Cochran's Q {:.2}, df {}, p = {:.2e}, I² {:.0}%{}",
                t.q,
                t.df,
                t.p_value,
                100.0 * t.i_squared,
                if h.differs { "  << the effect differs between values" } else { "" }
            ),
            None => "no heterogeneity test (fewer than two values with a difference)".to_string(),
        };
        out.push_str(&format!("{} - {} {}: {test}\n", h.variant, report.control, h.metric));
        out.push_str(&format!(
            "  {:<20} {:>11} {:>7} {:>10} {:>24} {:>10} {:>10}\n",
            "value",
            "impressions",
            "share",
            "difference",
            format!("{level} interval"),
            "p",
            "q"
        ));
        for value in &dimension.values {
            let comparison = value.report.comparisons.iter().find(|c| c.variant == h.variant);
            let cmp = comparison.and_then(|c| c.metrics.iter().find(|(k, _)| *k == h.metric)).map(|(_, c)| c);
            let q =
                value.q_values.get(&h.variant).and_then(|q| q.0.iter().find(|(k, _)| *k == h.metric)).map(|(_, q)| *q);
            let interval =
                cmp.and_then(|c| c.difference_ci).map_or("-".to_string(), |[lo, hi]| format!("[{lo:+.4}, {hi:+.4}]"));
            out.push_str(&format!(
                "  {:<20} {:>11} {:>6.1}% {:>10} {:>24} {:>10} {:>10}{}\n",
                value.value,
                value.impressions,
                100.0 * value.share,
                cmp.map_or("-".to_string(), |c| format!("{:+.4}", c.difference)),
                interval,
                p(cmp.and_then(|c| c.p_value)),
                p(q),
                if q.is_some_and(|q| q <= alpha) { "  *" } else { "" }
            ));
        }
    }
    out.push_str(&format!(
        "(* q <= {}: Benjamini-Hochberg across the values keeps false discoveries at or under {:.0}% of those flagged)\n",
        format!("{alpha:.4}").trim_end_matches('0'),
        100.0 * alpha
    ));
    out
}

/// How many queries each list of the text report shows (`--format json` has them all).
const SHOWN_QUERIES: usize = 10;

/// The per-query block: per headline metric the queries flagged worse and better, and the
/// queries that lost the most engaged impressions.
fn query_block(report: &DimensionsReport, queries: &DimensionReport) -> String {
    let alpha = 1.0 - report.confidence;
    let mut out = format!(
        "\n== queries of {} (cumulative; {} tracked, {} impressions{}) ==\n",
        report.experiment,
        match queries.values.len() {
            1 => "1 query".to_string(),
            n => format!("{n} queries"),
        },
        queries.impressions,
        match queries.other_impressions {
            0 => String::new(),
            n => format!(", {n} of queries beyond ab.max_queries under `other`"),
        }
    );
    let headline = |key: &str| key == "mrr" || key == "abandonment_rate" || key == "ndcg@10";
    for h in queries.heterogeneity.iter().filter(|h| headline(&h.metric)) {
        let tested = queries.values.len() - h.left_out.len();
        out.push_str(&format!(
            "{} - {} {}: {} worse, {} better at q <= {} of {tested} queries with ab.min_dimension_impressions\n",
            h.variant,
            report.control,
            h.metric,
            h.worse.len(),
            h.better.len(),
            format!("{alpha:.4}").trim_end_matches('0'),
        ));
        for (label, list) in [("worse", &h.worse), ("better", &h.better)] {
            for f in list.iter().take(SHOWN_QUERIES) {
                out.push_str(&format!("  {label:<7} {:<40} {:>+10.4}  q {:.2e}\n", f.value, f.difference, f.q_value));
            }
        }
    }
    for lost in queries.engagement_lost.iter().take(SHOWN_QUERIES) {
        out.push_str(&format!(
            "lost engagement: {} {:<40} {:>8.1} engaged impressions of {}\n",
            lost.variant, lost.value, lost.engaged_impressions_lost, lost.impressions
        ));
    }
    out
}
