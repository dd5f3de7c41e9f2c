//! The read-out beyond the fixed-horizon test, per comparison and metric: CUPED, the Bayesian
//! read-out, the multiple-comparison adjustments, power and guardrails (the math is
//! [`crate::stats`]; this module decides which sums feed which figure).

use crate::accumulate::{CovariateTable, GroupStats, GroupTable, Groups};
use crate::config::{AbConfig, DifferenceScale};
use crate::ids::GroupId;
use crate::metrics::{MetricKind, MetricLayout};
use crate::stats::bayes::{self, Arm, Prior};
use crate::stats::cuped::{self, CupedMoments};
use crate::stats::multiple::{benjamini_hochberg, holm};
use crate::stats::sequential::MixtureBoundary;
use crate::stats::{guardrail_p_value, power, Comparison, Estimate, GuardrailTest};

use super::ComparisonReport;

/// What the read-out needs besides a report's own sums. The default leaves the read-out out
/// (the sequential looks, which only fold p-values and sequences, take reports that way).
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadoutSources<'a> {
    /// Whether to compute the read-out at all.
    pub enabled: bool,
    /// The pre-period sums of the units that entered each group (`ab.cuped`), for a
    /// cumulative report over the same partitions; `None` leaves CUPED out.
    pub covariates: Option<&'a CovariateTable>,
    /// The newest complete window of the first configured size and its length in seconds:
    /// the current traffic, for the power report's ETA.
    pub traffic: Option<(&'a GroupTable, f64)>,
}

/// One experiment's groups, as the read-out needs them.
pub(super) struct ExperimentArms<'a> {
    pub experiment: &'a str,
    /// Variant names and sums, control first when it has traffic.
    pub variants: &'a [(&'a str, &'a GroupStats)],
    /// Per variant (same order), per metric slot, the estimate.
    pub estimates: &'a [Vec<(String, Estimate)>],
    /// The report's anytime-valid boundary, for CUPED's sequential figures.
    pub boundary: &'a MixtureBoundary,
}

/// Fills the read-out fields of every comparison of one experiment, adding notes for what is
/// left out.
pub(super) fn fill(
    layout: &MetricLayout,
    ab: &AbConfig,
    groups: &Groups,
    arms: &ExperimentArms<'_>,
    sources: ReadoutSources<'_>,
    comparisons: &mut [ComparisonReport],
    notes: &mut Vec<String>,
) {
    if !sources.enabled {
        return;
    }
    let Some(((control_name, control_stats), control_estimates)) = arms.variants.first().zip(arms.estimates.first())
    else {
        return;
    };
    let id = |variant: &str| groups.id_of(arms.experiment, variant);
    // The current traffic of the two arms compared: what the impressions still needed come from.
    let rate = |variant: &str| {
        let (table, seconds) = sources.traffic.filter(|(_, seconds)| *seconds > 0.0)?;
        let now = |name: &str| id(name).and_then(|g| table.get(g)).map_or(0, |s| s.impressions);
        Some((now(control_name) + now(variant)) as f64 / seconds)
    };
    let cuped_slots: Vec<(usize, usize)> = ab
        .cuped
        .metrics
        .iter()
        .enumerate()
        .filter_map(|(i, name)| layout.keys().iter().position(|k| k.name() == *name).map(|slot| (slot, i)))
        .collect();
    let prior = Prior {
        mean: ab.bayesian.prior_mean,
        variance: ab.bayesian.prior_stddev * ab.bayesian.prior_stddev,
        proper: ab.bayesian.prior_proper,
    };
    let relative = ab.bayesian.difference == DifferenceScale::Relative;
    for comparison in comparisons.iter_mut() {
        let Some(((_, treatment_stats), treatment_estimates)) =
            arms.variants.iter().zip(arms.estimates).find(|((name, _), _)| *name == comparison.variant)
        else {
            continue;
        };
        for (slot, (key, cmp)) in comparison.metrics.iter_mut().enumerate() {
            let (Some((_, t)), Some((_, c))) = (treatment_estimates.get(slot), control_estimates.get(slot)) else {
                continue;
            };
            let lower_is_better = layout.keys().get(slot).is_some_and(|k| k.kind == MetricKind::Abandonment);
            let adjusted_metric = cuped_slots.iter().find(|(s, _)| *s == slot).map(|&(_, i)| i);
            if let (Some(i), Some(covariates)) = (adjusted_metric, sources.covariates) {
                let control = moments(control_stats, id(control_name), covariates, slot, i);
                let treatment = moments(treatment_stats, id(&comparison.variant), covariates, slot, i);
                cmp.cuped = adjusted(&control, &treatment, t, c, ab.confidence, arms.boundary);
            }
            cmp.bayesian = bayes::readout(
                bayes_arm(c, cmp.cuped.as_ref().map(|a| &a.arms[0])),
                bayes_arm(t, cmp.cuped.as_ref().map(|a| &a.arms[1])),
                prior,
                relative,
                lower_is_better,
                ab.confidence,
            );
            let se = match &cmp.cuped {
                Some(adjusted) => Some(adjusted.difference.se),
                None => t.se.zip(c.se).map(|(a, b)| (a * a + b * b).sqrt()),
            };
            cmp.power = se.filter(|se| *se > 0.0).map(|se| {
                let impressions = (t.n + c.n) as f64;
                power::report(
                    se,
                    impressions,
                    c.mean,
                    ab.confidence,
                    ab.power,
                    ab.target_mde,
                    rate(&comparison.variant),
                )
            });
            if ab.guardrails.contains(key) {
                cmp.guardrail = guardrail_p_value(cmp, lower_is_better).map(|p_value| GuardrailTest {
                    worse_when: if lower_is_better { "higher" } else { "lower" },
                    p_value,
                    failed: p_value < 1.0 - ab.confidence,
                });
            }
        }
    }
    adjust_for_multiplicity(ab, comparisons);
    let cuped_adjusted: Vec<_> =
        comparisons.iter().flat_map(|c| c.metrics.iter().filter_map(|(_, m)| m.cuped.as_ref())).collect();
    if !cuped_adjusted.is_empty() && cuped_adjusted.iter().all(|c| c.units_with_pre_period == [0, 0]) {
        notes.push(format!(
            "CUPED adjusted nothing: no unit of {} had impressions in the ab.cuped.lookback_days before the experiment's first impression (on its partition)",
            arms.experiment
        ));
    }
    if sources.covariates.is_none() && !ab.cuped.metrics.is_empty() && !comparisons.is_empty() {
        notes.push(
            "no CUPED figures: they are in the cumulative report of the partitions this process holds (a window's units entered before it)"
                .to_string(),
        );
    }
}

/// One arm's per-bucket sums of `slot`, joined with its covariates of adjusted metric `i`.
/// Also the units that brought a pre-period.
fn moments(
    stats: &GroupStats,
    id: Option<GroupId>,
    covariates: &CovariateTable,
    slot: usize,
    i: usize,
) -> (CupedMoments, u64) {
    let pre = id.and_then(|id| covariates.group(id));
    let (mut moments, mut units) = (CupedMoments::default(), 0);
    for (number, bucket) in stats.buckets_by_number().filter(|(_, b)| b.impressions > 0) {
        let covariate = pre.and_then(|p| p.get(&number));
        units += covariate.map_or(0, |c| c.units);
        let (x, e) = covariate.map_or((0.0, 0.0), |c| (c.sum(i), c.impressions as f64));
        moments.add_bucket(bucket.sum(slot), bucket.impressions as f64, x, e);
    }
    (moments, units)
}

/// The CUPED comparison with its anytime-valid figures at this look.
fn adjusted(
    (control, control_units): &(CupedMoments, u64),
    (treatment, treatment_units): &(CupedMoments, u64),
    t: &Estimate,
    c: &Estimate,
    confidence: f64,
    boundary: &MixtureBoundary,
) -> Option<cuped::CupedComparison> {
    let mut out = cuped::compare(control, treatment, confidence)?;
    // The same boundary as every sequential figure, in impressions of both arms.
    if let Some(look) = cuped::sequential(&out, [c.n, t.n], boundary) {
        out.difference_cs = Some(look.difference_cs);
        out.always_valid_p_value = Some(look.p_value);
    }
    out.units_with_pre_period = [*control_units, *treatment_units];
    Some(out)
}

/// A read-out arm from an estimate (units are its degrees of freedom + 1: impressions, or
/// buckets when clustered) or from its CUPED arm.
fn bayes_arm(estimate: &Estimate, adjusted: Option<&cuped::CupedArm>) -> Arm {
    match adjusted {
        Some(a) => Arm { n: a.n as f64, mean: a.adjusted_mean, unadjusted_mean: a.mean, variance: a.variance },
        None => {
            let units = estimate.df.map_or(0.0, |df| df + 1.0);
            let variance = estimate.se.map_or(0.0, |se| se * se * units);
            Arm { n: units, mean: estimate.mean, unadjusted_mean: estimate.mean, variance }
        }
    }
}

/// Holm's and Benjamini and Hochberg's p-values over the experiment's family (every metric of
/// `ab.correction_metrics`, or all, of every comparison with a p-value), and the configured
/// one; the always-valid p-values adjusted alike, over the comparisons that have one.
fn adjust_for_multiplicity(ab: &AbConfig, comparisons: &mut [ComparisonReport]) {
    let in_family = |key: &str| ab.correction_metrics.is_empty() || ab.correction_metrics.iter().any(|m| m == key);
    let family = |comparisons: &[ComparisonReport], p_of: fn(&Comparison) -> Option<f64>| -> Vec<(usize, usize, f64)> {
        comparisons
            .iter()
            .enumerate()
            .flat_map(|(i, c)| {
                c.metrics
                    .iter()
                    .enumerate()
                    .filter(|(_, (key, _))| in_family(key))
                    .filter_map(move |(j, (_, cmp))| Some((i, j, p_of(cmp)?)))
            })
            .collect()
    };
    let fixed = family(comparisons, |c| c.p_value);
    let p: Vec<f64> = fixed.iter().map(|(_, _, p)| *p).collect();
    let (by_holm, by_bh, configured) = (holm(&p), benjamini_hochberg(&p), ab.correction.adjust(&p));
    for (k, &(i, j, _)) in fixed.iter().enumerate() {
        let cmp: &mut Comparison = &mut comparisons[i].metrics[j].1;
        cmp.holm_p_value = Some(by_holm[k]);
        cmp.bh_p_value = Some(by_bh[k]);
        cmp.adjusted_p_value = Some(configured[k]);
    }
    let anytime = family(comparisons, |c| c.always_valid_p_value);
    let p: Vec<f64> = anytime.iter().map(|(_, _, p)| *p).collect();
    for (&(i, j, _), adjusted) in anytime.iter().zip(ab.correction.adjust(&p)) {
        comparisons[i].metrics[j].1.adjusted_always_valid_p_value = Some(adjusted);
    }
}
