//! The judged series of the Prometheus exposition (only with a judgment list, so that no
//! series is added otherwise): the judged sums per partition (they add up across replicas like
//! every other total), the newest closed windows' judged means, the judged A/B comparisons of
//! the reports, and what the judgment list's loads found.
//!
//! Judged figures are families of their own (`rankpulse_judged_*`) rather than a label on the
//! engagement families, so that every existing query, recording rule and alert keeps meaning
//! engagement-based relevance.

use prometheus::proto::{MetricFamily, MetricType};

use super::prometheus::{counter, family, gauge, group_labels, label, summary, with_partition};
use super::window_families::{comparison_labels, push_finite};
use crate::engine::Engine;
use crate::experiments::{ExperimentReport, CUMULATIVE};

/// Judged impressions and judged metric sums per group and partition, cumulative; each
/// closed window's judged means.
pub(super) fn sums(engine: &Engine) -> Vec<MetricFamily> {
    let Some(block) = engine.layout().judged() else { return Vec::new() };
    let slots = block.named_slots();
    let groups = engine.groups();
    let (mut impressions, mut metrics) = (Vec::new(), Vec::new());
    for (partition, totals, _) in engine.partition_totals() {
        for (group, stats) in totals.accumulators.cumulative.iter().filter(|&(g, _)| !groups.is_breakdown(g)) {
            let judged = stats.sum(block.count_slot()).round();
            if judged < 0.5 {
                continue;
            }
            let labels = with_partition(group_labels(groups, group), partition);
            impressions.push(counter(labels.clone(), judged));
            for (name, slot) in &slots {
                // The incomplete measures count their own impressions (fewer after an upgrade).
                let count = stats.sum(block.count_slot_of(*slot)).round();
                if count < 0.5 {
                    continue;
                }
                let mut labels = labels.clone();
                labels.push(label("metric", name));
                metrics.push(summary(labels, stats.sum(*slot), count as u64, vec![]));
            }
        }
    }
    let (mut means, mut window_impressions) = (Vec::new(), Vec::new());
    for closed in engine.newest_closed() {
        let window = engine.window_label(closed.size_index);
        for (group, stats) in closed.groups.iter().filter(|&(g, _)| !groups.is_breakdown(g)) {
            let judged = stats.sum(block.count_slot()).round();
            if judged < 0.5 {
                continue;
            }
            let (experiment, variant) = groups.name(group);
            let base = [label("window", window), label("experiment", experiment), label("variant", variant)];
            window_impressions.push(gauge(base.to_vec(), judged));
            for (name, slot) in &slots {
                let count = stats.sum(block.count_slot_of(*slot)).round();
                if count < 0.5 {
                    continue;
                }
                let mut labels = base.to_vec();
                labels.push(label("metric", name));
                means.push(gauge(labels, stats.sum(*slot) / count));
            }
        }
    }
    vec![
        family(
            "rankpulse_judged_impressions_total",
            "Impressions whose query has judgments (counted when they arrive), scored against the judgment list.",
            MetricType::COUNTER,
            impressions,
        ),
        family(
            "rankpulse_judged_metric",
            "Per-impression metric against the judgment list (metric: the engagement metrics' keys; coverage@k, the share of the top k shown results that are judged; bpref, map_condensed@k and ndcg_condensed@k, the measures for incomplete judgments); _sum/_count is the mean over judged impressions.",
            MetricType::SUMMARY,
            metrics,
        ),
        family(
            "rankpulse_judged_window_mean",
            "Mean of each judged metric over the judged impressions of the newest closed event-time window of each size.",
            MetricType::GAUGE,
            means,
        ),
        family(
            "rankpulse_judged_window_impressions",
            "Judged impressions in the newest closed window of each size.",
            MetricType::GAUGE,
            window_impressions,
        ),
    ]
}

/// Every variant against its control on the judged metrics, over the newest closed window of
/// each size and cumulatively (`window="cumulative"`: the difference and the always-valid
/// p-value only, as for the engagement metrics).
pub(super) fn comparisons(engine: &Engine, reports_per_window: &[(&str, Vec<ExperimentReport>)]) -> Vec<MetricFamily> {
    if engine.layout().judged().is_none() {
        return Vec::new();
    }
    let (mut difference, mut lower, mut upper, mut p_values, mut always_valid) = Default::default();
    let push = push_finite;
    for (window, reports) in reports_per_window {
        let fixed_horizon = *window != CUMULATIVE;
        for report in reports {
            let Some(judged) = &report.judged else { continue };
            for comparison in &judged.comparisons {
                for (metric, c) in &comparison.metrics {
                    let labels = comparison_labels(&report.experiment, &comparison.variant, metric, window);
                    push(&mut difference, &labels, Some(c.difference));
                    if fixed_horizon {
                        push(&mut lower, &labels, c.difference_ci.map(|ci| ci[0]));
                        push(&mut upper, &labels, c.difference_ci.map(|ci| ci[1]));
                        push(&mut p_values, &labels, c.p_value);
                    }
                    push(&mut always_valid, &labels, c.always_valid_p_value);
                }
            }
        }
    }
    vec![
        family(
            "rankpulse_judged_ab_difference",
            "Judged mean of the metric in the variant minus in the experiment's control (over judged impressions), per newest closed window and window=\"cumulative\".",
            MetricType::GAUGE,
            difference,
        ),
        family(
            "rankpulse_judged_ab_difference_lower",
            "Lower bound of the confidence interval (ab.confidence, Welch; cluster-robust when ab.unit is a user or session) of rankpulse_judged_ab_difference, closed windows.",
            MetricType::GAUGE,
            lower,
        ),
        family(
            "rankpulse_judged_ab_difference_upper",
            "Upper bound of the confidence interval of rankpulse_judged_ab_difference, closed windows.",
            MetricType::GAUGE,
            upper,
        ),
        family(
            "rankpulse_judged_ab_p_value",
            "Two-sided p-value of Welch's t-test of the judged metric, variant against control, closed windows.",
            MetricType::GAUGE,
            p_values,
        ),
        family(
            "rankpulse_judged_ab_always_valid_p_value",
            "Always-valid p-value (mixture SPRT) of no difference in the judged metric, the window's own sums as one look (window=\"cumulative\": all judged impressions so far).",
            MetricType::GAUGE,
            always_valid,
        ),
    ]
}

/// What the judgment list's loads found: the list in use, the reloads and refusals.
pub(super) fn source(engine: &Engine) -> Vec<MetricFamily> {
    let Some(source) = engine.judgments() else { return Vec::new() };
    let status = source.status();
    let one = |value: f64| vec![gauge(vec![], value)];
    let rejected =
        status.loaded.rejected.iter().map(|(reason, n)| gauge(vec![label("reason", reason)], *n as f64)).collect();
    vec![
        family("rankpulse_judgments", "Judgments in the list in use.", MetricType::GAUGE, one(status.loaded.judgments as f64)),
        family(
            "rankpulse_judgments_queries",
            "Queries with judgments in the list in use.",
            MetricType::GAUGE,
            one(status.loaded.queries as f64),
        ),
        family(
            "rankpulse_judgments_rejected_lines",
            "Lines of the list in use that were rejected, by reason (fields, json, grade, grade_above_max, empty_id, duplicate).",
            MetricType::GAUGE,
            rejected,
        ),
        family("rankpulse_judgments_bytes", "Memory the judgment list in use holds.", MetricType::GAUGE, one(status.bytes as f64)),
        family(
            "rankpulse_judgments_loads_total",
            "Loads of the judgment file that replaced the list in use (the one at start included).",
            MetricType::COUNTER,
            vec![counter(vec![], status.reloads as f64)],
        ),
        family(
            "rankpulse_judgments_load_failures_total",
            "Changes of the judgment file that were refused (unreadable, or too many bad lines): the previous list stays in use.",
            MetricType::COUNTER,
            vec![counter(vec![], status.failures as f64)],
        ),
        family(
            "rankpulse_judgments_last_load_timestamp_seconds",
            "When the list in use was loaded.",
            MetricType::GAUGE,
            one(status.loaded_at),
        ),
    ]
}
