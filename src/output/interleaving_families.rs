//! The interleaving series of the Prometheus exposition: outcome counters per partition (they
//! add up across replicas like every other total) and the preference gauges of the reports.

use prometheus::proto::{LabelPair, Metric, MetricFamily, MetricType};

use super::prometheus::{counter, family, group_labels, label, with_partition};
use super::window_families::push_finite;
use crate::engine::Engine;
use crate::experiments::ExperimentReport;
use crate::interleaving::rankers_of;

/// Outcome counters per interleaved group and partition, cumulative.
pub(super) fn counters(engine: &Engine) -> Vec<MetricFamily> {
    let Some((slots, _)) = engine.layout().interleaving() else { return Vec::new() };
    let groups = engine.groups();
    let (mut impressions, mut engaged, mut wins, mut ties, mut pair_wins) = Default::default();
    let add = |into: &mut Vec<Metric>, labels: Vec<LabelPair>, value: f64| into.push(counter(labels, value.round()));
    for (partition, totals, _) in engine.partition_totals() {
        for (group, stats) in totals.accumulators.cumulative.iter().filter(|&(g, _)| !groups.is_breakdown(g)) {
            let interleaved = stats.sum(slots.interleaved());
            let Some(rankers) = rankers_of(groups.name(group).1, slots.rankers) else { continue };
            if interleaved < 0.5 {
                continue;
            }
            let base = group_labels(groups, group);
            let with = |extra: &[(&str, &str)]| {
                let mut labels = base.clone();
                labels.extend(extra.iter().map(|(k, v)| label(k, v)));
                with_partition(labels, partition)
            };
            add(&mut impressions, with(&[]), interleaved);
            let engaged_count = stats.sum(slots.engaged());
            add(&mut engaged, with(&[]), engaged_count);
            let mut won = 0.0;
            for (k, ranker) in rankers.iter().enumerate() {
                won += stats.sum(slots.wins(k));
                add(&mut wins, with(&[("ranker", ranker)]), stats.sum(slots.wins(k)));
                for (j, opponent) in rankers.iter().enumerate().filter(|(j, _)| *j != k) {
                    add(
                        &mut pair_wins,
                        with(&[("ranker", ranker), ("opponent", opponent)]),
                        stats.sum(slots.beats(k, j)),
                    );
                }
            }
            add(&mut ties, with(&[]), (engaged_count - won).max(0.0));
        }
    }
    vec![
        family(
            "rankpulse_interleaved_impressions_total",
            "Finalized interleaved impressions (variant: the rankers, baseline first, joined by \" vs \").",
            MetricType::COUNTER,
            impressions,
        ),
        family(
            "rankpulse_interleaving_engaged_total",
            "Interleaved impressions in which some ranker earned credit (an engaged result of its team).",
            MetricType::COUNTER,
            engaged,
        ),
        family(
            "rankpulse_interleaving_wins_total",
            "Interleaved impressions the ranker won outright: strictly the most credit.",
            MetricType::COUNTER,
            wins,
        ),
        family(
            "rankpulse_interleaving_ties_total",
            "Engaged interleaved impressions whose top credit was shared.",
            MetricType::COUNTER,
            ties,
        ),
        family(
            "rankpulse_interleaving_pair_wins_total",
            "Interleaved impressions in which the ranker earned more credit than the opponent.",
            MetricType::COUNTER,
            pair_wins,
        ),
    ]
}

/// Each pair's preference, its interval and its p-values, over the newest closed window of
/// each size and cumulatively (`window="cumulative"`).
pub(super) fn gauges(engine: &Engine, reports_per_window: &[(&str, Vec<ExperimentReport>)]) -> Vec<MetricFamily> {
    if engine.layout().interleaving().is_none() {
        return Vec::new();
    }
    let (mut preference, mut lower, mut upper, mut p_values, mut always_valid) = Default::default();
    let push = push_finite;
    for (window, reports) in reports_per_window {
        for report in reports {
            for comparison in &report.interleaving {
                for pair in &comparison.pairs {
                    let labels = [
                        label("experiment", &report.experiment),
                        label("variant", &comparison.variant),
                        label("ranker", &pair.ranker),
                        label("opponent", &pair.opponent),
                        label("window", window),
                    ];
                    let f = &pair.figures;
                    push(&mut preference, &labels, Some(f.preference));
                    push(&mut lower, &labels, f.preference_ci.map(|ci| ci[0]));
                    push(&mut upper, &labels, f.preference_ci.map(|ci| ci[1]));
                    push(&mut p_values, &labels, f.sign_test_p_value);
                    push(&mut always_valid, &labels, f.always_valid_p_value);
                }
            }
        }
    }
    vec![
        family(
            "rankpulse_interleaving_preference",
            "(ranker's wins - opponent's wins) / engaged interleaved impressions: > 0 means users preferred the ranker's results. Newest closed window of each size, and window=\"cumulative\".",
            MetricType::GAUGE,
            preference,
        ),
        family(
            "rankpulse_interleaving_preference_ci_lower",
            "Lower bound of the confidence interval (ab.confidence, Student's t; cluster-robust when ab.unit is a user or session) of rankpulse_interleaving_preference.",
            MetricType::GAUGE,
            lower,
        ),
        family(
            "rankpulse_interleaving_preference_ci_upper",
            "Upper bound of the confidence interval of rankpulse_interleaving_preference.",
            MetricType::GAUGE,
            upper,
        ),
        family(
            "rankpulse_interleaving_p_value",
            "Two-sided p-value of the sign test of no preference (exact binomial on decided impressions; cluster-robust z when ab.unit is a user or session). Fixed-horizon: watching it inflates false positives.",
            MetricType::GAUGE,
            p_values,
        ),
        family(
            "rankpulse_interleaving_always_valid_p_value",
            "Always-valid p-value (mixture SPRT, tuned by ab.sequential_sample_size) of no preference: safe to watch continuously.",
            MetricType::GAUGE,
            always_valid,
        ),
    ]
}
