//! The judged part of an experiment's report: each variant's metrics against the judgment
//! list (over its judged impressions only), its judged coverage, and every variant against
//! the control on them.
//!
//! A judged mean is a ratio over the impressions of judged queries, a subset of the group's:
//! its count is the judged block's count slot (see [`crate::metrics::judged`]), per unit
//! bucket too, so the cluster-robust error treats it as the ratio metric it is.

use serde::Serialize;

use super::{as_map, this_look, ComparisonReport};
use crate::accumulate::GroupStats;
use crate::config::AbConfig;
use crate::metrics::JudgedBlock;
use crate::stats::sequential::MixtureBoundary;
use crate::stats::{self, Estimate};

/// What an experiment's report says about its judged impressions.
#[derive(Debug, Serialize)]
pub struct JudgedReport {
    /// `judgments.relevance_threshold`: a grade at least this is relevant.
    pub relevance_threshold: u8,
    /// Per variant (control first, as the report's), its judged impressions and metrics.
    pub variants: Vec<JudgedVariantReport>,
    /// Every non-control variant against the control, per judged metric and coverage. The
    /// anytime-valid figures are this report's own sums as one look, for the cumulative report
    /// too (valid at any look, as Ville's inequality gives; not the running minimum).
    pub comparisons: Vec<ComparisonReport>,
}

/// One variant's judged figures.
#[derive(Debug, Serialize)]
pub struct JudgedVariantReport {
    /// The variant.
    pub variant: String,
    /// Its impressions whose query has judgments.
    pub impressions: u64,
    /// Those over all its impressions: the share of its traffic the list covers. Absent
    /// while it has no finalized impression.
    pub share: Option<f64>,
    /// Per metric key (`mrr`, `ndcg@10`, ...), `coverage@k` and the measures for incomplete
    /// judgments (`bpref`, `map_condensed@k`, `ndcg_condensed@k`), over its judged impressions.
    #[serde(serialize_with = "as_map")]
    pub metrics: Vec<(String, Estimate)>,
}

/// The judged figures of `variants` (sorted as the report's, control first when it has
/// traffic); `None` when none of them has a judged impression.
pub(super) fn report(
    block: &JudgedBlock,
    ab: &AbConfig,
    variants: &[(&str, &GroupStats)],
    has_control: bool,
    boundary: &MixtureBoundary,
) -> Option<JudgedReport> {
    let count_slot = block.count_slot();
    let judged = |stats: &GroupStats| stats.sum(count_slot).round() as u64;
    if variants.iter().all(|(_, stats)| judged(stats) == 0) {
        return None;
    }
    // The incomplete measures' count starts at 0 in state written before them: until every
    // variant with judged impressions has some they were computed for, they are left out.
    let counted = |stats: &GroupStats, slot: usize| stats.sum(block.count_slot_of(slot)).round() > 0.0;
    let slots: Vec<(String, usize)> = block
        .named_slots()
        .into_iter()
        .filter(|(_, slot)| variants.iter().all(|(_, stats)| judged(stats) == 0 || counted(stats, *slot)))
        .collect();
    let clustered = ab.unit != crate::config::AbUnit::Impression;
    let estimates: Vec<Vec<(String, Estimate)>> = variants
        .iter()
        .map(|(_, stats)| {
            slots
                .iter()
                .map(|(name, slot)| {
                    let count_slot = block.count_slot_of(*slot);
                    let clusters = if clustered { stats.cluster_moments_over(*slot, count_slot) } else { None };
                    let moments = stats.moments_over(*slot, count_slot);
                    (name.clone(), stats::estimate(moments, clusters.as_ref(), ab.confidence))
                })
                .collect()
        })
        .collect();
    let comparisons = match (has_control, variants.first(), estimates.first()) {
        (true, Some((control, _)), Some(control_estimates)) => variants
            .iter()
            .zip(&estimates)
            .skip(1)
            .map(|((variant, _), treatment)| ComparisonReport {
                variant: variant.to_string(),
                control: control.to_string(),
                metrics: treatment
                    .iter()
                    .zip(control_estimates)
                    .map(|((name, t), (_, c))| {
                        let mut cmp = stats::compare(t, c, ab.confidence);
                        this_look(&mut cmp, t, c, boundary);
                        (name.clone(), cmp)
                    })
                    .collect(),
            })
            .collect(),
        _ => Vec::new(),
    };
    Some(JudgedReport {
        relevance_threshold: block.layout.relevance_threshold(),
        variants: variants
            .iter()
            .zip(estimates)
            .map(|((variant, stats), metrics)| JudgedVariantReport {
                variant: variant.to_string(),
                impressions: judged(stats),
                share: (stats.impressions > 0).then(|| judged(stats) as f64 / stats.impressions as f64),
                metrics,
            })
            .collect(),
        comparisons,
    })
}
