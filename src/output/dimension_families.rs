//! The exposition's breakdown families: per experiment, compared variant, dimension value and
//! metric, the cumulative difference from the control with its interval, its q-value across
//! the dimension's values, each value's impressions, and per dimension the heterogeneity
//! test's p-value (`crate::experiments::breakdown`). Like the A/B families they describe the
//! replica's experiment-wide view (no `partition` label).
//!
//! Bounded by the configuration: values per dimension by `ab.max_dimension_values` (with
//! `other`), metrics by [`exported_metrics`]. The `query` dimension stays off `/metrics` (one
//! series per query would be label cardinality no Prometheus should hold): its figures are the
//! A/B API's `/queries`.

use prometheus::proto::{Metric, MetricFamily, MetricType};

use super::prometheus::{family, label};
use super::window_families::push_finite;
use crate::config::AbConfig;
use crate::engine::Engine;
use crate::experiments::breakdown::Which;
use crate::experiments::ExperimentReport;
use crate::metrics::MetricLayout;

/// The metric keys of the breakdown gauges: `ab.correction_metrics` when it names any (the
/// family the experiment is decided on), else MRR, abandonment and every nDCG cutoff.
pub(super) fn exported_metrics(layout: &MetricLayout, ab: &AbConfig) -> Vec<String> {
    let keys = layout.keys().iter().map(|k| k.name());
    if !ab.correction_metrics.is_empty() {
        return keys.filter(|k| ab.correction_metrics.contains(k)).collect();
    }
    keys.filter(|k| k == "mrr" || k == "abandonment_rate" || k.starts_with("ndcg@")).collect()
}

/// The breakdown gauges of every experiment with a cumulative report.
pub(super) fn families(engine: &Engine, reports_per_window: &[(&str, Vec<ExperimentReport>)]) -> Vec<MetricFamily> {
    let mut g: [Vec<Metric>; 6] = Default::default();
    if engine.ab().dimensions.is_empty() {
        return Vec::new();
    }
    let metrics = exported_metrics(engine.layout(), engine.ab());
    let cumulative = reports_per_window.iter().filter(|(w, _)| *w == crate::experiments::CUMULATIVE);
    for report in cumulative.flat_map(|(_, reports)| reports) {
        let Some(breakdown) = engine.dimensions_report(&report.experiment, Which::Dimensions) else { continue };
        for dimension in &breakdown.dimensions {
            for value in &dimension.values {
                for variant in &value.report.variants {
                    let labels = [
                        label("experiment", &breakdown.experiment),
                        label("variant", &variant.variant),
                        label("dimension", &dimension.dimension),
                        label("value", &value.value),
                    ];
                    push_finite(&mut g[0], &labels, Some(variant.impressions as f64));
                }
                for comparison in &value.report.comparisons {
                    for (metric, c) in comparison.metrics.iter().filter(|(m, _)| metrics.contains(m)) {
                        let labels = [
                            label("experiment", &breakdown.experiment),
                            label("variant", &comparison.variant),
                            label("dimension", &dimension.dimension),
                            label("value", &value.value),
                            label("metric", metric),
                        ];
                        push_finite(&mut g[1], &labels, Some(c.difference));
                        push_finite(&mut g[2], &labels, c.difference_ci.map(|ci| ci[0]));
                        push_finite(&mut g[3], &labels, c.difference_ci.map(|ci| ci[1]));
                        let q =
                            value.q_values.get(&comparison.variant).and_then(|q| q.0.iter().find(|(m, _)| m == metric));
                        push_finite(&mut g[4], &labels, q.map(|(_, q)| *q));
                    }
                }
            }
            for h in dimension.heterogeneity.iter().filter(|h| metrics.contains(&h.metric)) {
                let labels = [
                    label("experiment", &breakdown.experiment),
                    label("variant", &h.variant),
                    label("dimension", &dimension.dimension),
                    label("metric", &h.metric),
                ];
                push_finite(&mut g[5], &labels, h.test.map(|t| t.p_value));
            }
        }
    }
    let [impressions, difference, low, high, q, heterogeneity] = g;
    vec![
        family(
            "rankpulse_dimension_impressions",
            "Finalized impressions per dimension value (ab.dimensions) and variant, cumulative.",
            MetricType::GAUGE,
            impressions,
        ),
        family(
            "rankpulse_dimension_difference",
            "Treatment minus control over one dimension value's impressions, cumulative.",
            MetricType::GAUGE,
            difference,
        ),
        family(
            "rankpulse_dimension_difference_ci_low",
            "Lower bound of rankpulse_dimension_difference's Welch interval (ab.confidence).",
            MetricType::GAUGE,
            low,
        ),
        family(
            "rankpulse_dimension_difference_ci_high",
            "Upper bound of rankpulse_dimension_difference's Welch interval (ab.confidence).",
            MetricType::GAUGE,
            high,
        ),
        family(
            "rankpulse_dimension_q_value",
            "The value's Welch p-value adjusted by Benjamini-Hochberg across the dimension's values.",
            MetricType::GAUGE,
            q,
        ),
        family(
            "rankpulse_dimension_heterogeneity_p_value",
            "Cochran's Q test that the effect differs between the dimension's values.",
            MetricType::GAUGE,
            heterogeneity,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use crate::config::Config;
    use crate::engine::Engine;
    use crate::event::EventKind;

    #[test]
    fn dimension_values_are_exported_and_queries_are_not() {
        let toml = "[metrics]\nwindows = [\"1m\"]\n[ab]\ndimensions = [\"segment\", \"query\"]\nmin_dimension_impressions = 2\n";
        let mut e =
            Engine::new(&Config::from_toml_with_env(toml, "test", std::iter::empty()).unwrap()).without_past_limit();
        let now = Instant::now();
        for i in 0..80 {
            let (variant, segment) = (["control", "treatment"][i % 2], ["mobile", "desktop"][(i / 2) % 2]);
            let impression = format!(
                r#"{{"query_id":"q{i}","timestamp":{},"results":["a","b"],"experiment":"x","variant":"{variant}","segment":"{segment}","query":"q {}"}}"#,
                1_000 + i * 10,
                i % 7
            );
            e.process(EventKind::Impression, 0, impression.as_bytes(), now).unwrap();
            if i % 3 != 0 {
                let click =
                    format!(r#"{{"query_id":"q{i}","timestamp":{},"doc_id":"{}"}}"#, 1_500 + i * 10, ["a", "b"][i % 2]);
                e.process(EventKind::Engagement, 0, click.as_bytes(), now).unwrap();
            }
        }
        e.finish();
        let families = crate::output::prometheus::gather(&e);
        let family = |name: &str| families.iter().find(|f| f.name() == name).unwrap_or_else(|| panic!("{name}"));
        let values = |name: &str| -> Vec<String> {
            family(name)
                .get_metric()
                .iter()
                .flat_map(|m| m.get_label().iter().filter(|l| l.name() == "value").map(|l| l.value().to_string()))
                .collect()
        };
        let impressions = values("rankpulse_dimension_impressions");
        assert_eq!(impressions.len(), 4, "two segments by two variants: {impressions:?}");
        assert!(
            impressions.iter().all(|v| v == "mobile" || v == "desktop"),
            "no query is a label value: {impressions:?}"
        );
        let differences = family("rankpulse_dimension_difference").get_metric().len();
        assert_eq!(differences, 2 * 6, "two segments by mrr, abandonment and four nDCG cutoffs");
        assert!(!family("rankpulse_dimension_heterogeneity_p_value").get_metric().is_empty());
        // The experiment's own series are the same as without dimensions.
        let series = family("rankpulse_impressions_total").get_metric().len();
        assert_eq!(series, 2, "one per variant, no breakdown group among them");
    }
}
