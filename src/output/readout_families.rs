//! The exposition's read-out families, per experiment, variant and metric: CUPED's adjusted
//! difference, interval and p-value with its variance reduction, the Bayesian chance to beat
//! control and risks, the adjusted p-values, the minimum detectable effect and ETA, and the
//! guardrails' one-sided p-values (see `crate::experiments::readout`). Like the A/B families
//! they describe the replica's experiment-wide view (no `partition` label).

use prometheus::proto::{Metric, MetricFamily, MetricType};

use super::prometheus::{counter, family, gauge, label, with_partition};
use super::window_families::{comparison_labels, push_finite};
use crate::engine::Engine;
use crate::experiments::ExperimentReport;

/// The read-out gauges of every report, and CUPED's state counters per partition.
pub(super) fn families(engine: &Engine, reports_per_window: &[(&str, Vec<ExperimentReport>)]) -> Vec<MetricFamily> {
    let mut g: [Vec<Metric>; 16] = Default::default();
    let push = push_finite;
    for (window, reports) in reports_per_window {
        for report in reports {
            for comparison in &report.comparisons {
                for (metric, c) in &comparison.metrics {
                    let labels = comparison_labels(&report.experiment, &comparison.variant, metric, window);
                    push(&mut g[0], &labels, c.adjusted_p_value);
                    push(&mut g[15], &labels, c.adjusted_always_valid_p_value);
                    if let Some(b) = &c.bayesian {
                        push(&mut g[1], &labels, Some(b.chance_to_win));
                        push(&mut g[2], &labels, Some(b.risk_control));
                        push(&mut g[3], &labels, Some(b.risk_treatment));
                    }
                    if let Some(p) = &c.power {
                        push(&mut g[4], &labels, Some(p.mde));
                        push(&mut g[5], &labels, p.relative_mde);
                        push(&mut g[6], &labels, p.eta_seconds);
                    }
                    if let Some(cuped) = &c.cuped {
                        push(&mut g[7], &labels, Some(cuped.difference.estimate));
                        push(&mut g[8], &labels, Some(cuped.difference.ci[0]));
                        push(&mut g[9], &labels, Some(cuped.difference.ci[1]));
                        push(&mut g[10], &labels, Some(cuped.difference.p_value));
                        push(&mut g[11], &labels, Some(cuped.variance_reduction));
                    }
                    if let Some(guardrail) = &c.guardrail {
                        let mut labels = labels.to_vec();
                        labels.push(label("worse_when", guardrail.worse_when));
                        push(&mut g[12], &labels, Some(guardrail.p_value));
                    }
                }
            }
        }
    }
    for (partition, totals, _) in engine.partition_totals() {
        if let Some(state) = &totals.cuped {
            let counts = state.counts;
            for (outcome, value) in [
                ("entered_with_pre_period", counts.entered_with_pre_period),
                ("untracked_impressions", counts.untracked_impressions),
                ("dropped_idle", counts.units_dropped),
            ] {
                g[13].push(counter(with_partition(vec![label("outcome", outcome)], partition), value as f64));
            }
            for (kind, value) in [("tracked", state.tracked_units()), ("awaiting_entry", state.frozen_units())] {
                g[14].push(gauge(with_partition(vec![label("kind", kind)], partition), value as f64));
            }
        }
    }
    let [adjusted, chance, risk_control, risk_treatment, mde, relative_mde, eta, cuped_difference, cuped_lower, cuped_upper, cuped_p, reduction, guardrail, cuped_units, cuped_state, adjusted_always_valid] =
        g;
    vec![
        family(
            "rankpulse_ab_adjusted_p_value",
            "rankpulse_ab_p_value adjusted by ab.correction (holm, benjamini-hochberg; equal to it with none) over the experiment's metrics and variants: what the shipped significance alert reads.",
            MetricType::GAUGE,
            adjusted,
        ),
        family(
            "rankpulse_ab_adjusted_always_valid_p_value",
            "rankpulse_ab_always_valid_p_value adjusted by ab.correction over the experiment's metrics and variants (equal to it with none): what the shipped harm alert reads.",
            MetricType::GAUGE,
            adjusted_always_valid,
        ),
        family(
            "rankpulse_ab_chance_to_win",
            "Bayesian posterior probability that the variant beats the control on the metric (GrowthBook's read-out; lower abandonment wins).",
            MetricType::GAUGE,
            chance,
        ),
        family(
            "rankpulse_ab_risk_control",
            "Expected loss of keeping the control (ab.bayesian.difference scale): the effect forgone if the variant is better.",
            MetricType::GAUGE,
            risk_control,
        ),
        family(
            "rankpulse_ab_risk_treatment",
            "Expected loss of shipping the variant (ab.bayesian.difference scale): the effect lost if it is worse.",
            MetricType::GAUGE,
            risk_treatment,
        ),
        family(
            "rankpulse_ab_mde",
            "Minimum detectable absolute effect at ab.power and ab.confidence with the sample so far (CUPED-adjusted where available).",
            MetricType::GAUGE,
            mde,
        ),
        family(
            "rankpulse_ab_relative_mde",
            "rankpulse_ab_mde over the control's mean.",
            MetricType::GAUGE,
            relative_mde,
        ),
        family(
            "rankpulse_ab_eta_seconds",
            "Event-time seconds until the relative MDE reaches ab.target_mde at the traffic of the newest closed window of the first size (0 once reached).",
            MetricType::GAUGE,
            eta,
        ),
        family(
            "rankpulse_ab_cuped_difference",
            "CUPED-adjusted mean of the metric in the variant minus in the control (ab.cuped, cumulative).",
            MetricType::GAUGE,
            cuped_difference,
        ),
        family(
            "rankpulse_ab_cuped_difference_lower",
            "Lower bound of the confidence interval of rankpulse_ab_cuped_difference.",
            MetricType::GAUGE,
            cuped_lower,
        ),
        family(
            "rankpulse_ab_cuped_difference_upper",
            "Upper bound of the confidence interval of rankpulse_ab_cuped_difference.",
            MetricType::GAUGE,
            cuped_upper,
        ),
        family(
            "rankpulse_ab_cuped_p_value",
            "Two-sided Welch p-value of rankpulse_ab_cuped_difference.",
            MetricType::GAUGE,
            cuped_p,
        ),
        family(
            "rankpulse_ab_cuped_variance_reduction",
            "Share of the difference's variance the units' pre-period explains (1 - adjusted / unadjusted variance).",
            MetricType::GAUGE,
            reduction,
        ),
        family(
            "rankpulse_ab_guardrail_p_value",
            "One-sided Welch p-value that the variant is not worse than the control on a guardrail metric (ab.guardrails), worse_when=\"higher\" or \"lower\"; below 1 - ab.confidence it is worse.",
            MetricType::GAUGE,
            guardrail,
        ),
        family(
            "rankpulse_cuped_units_total",
            "CUPED's units per partition: entered an experiment with a pre-period, impressions of units the full table could not track, units dropped after idling past the look-back.",
            MetricType::COUNTER,
            cuped_units,
        ),
        family(
            "rankpulse_cuped_units",
            "Units in CUPED's state per partition: tracked (recent history) and awaiting entry into an experiment that started (frozen pre-periods).",
            MetricType::GAUGE,
            cuped_state,
        ),
    ]
}
