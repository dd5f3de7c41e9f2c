//! The interleaving part of an experiment's report: per interleaved group (its variant names
//! the rankers, `"baseline vs candidate"`), the outcomes and every pair's preference.

use serde::Serialize;

use super::as_map;
use crate::accumulate::GroupStats;
use crate::config::{AbConfig, AbUnit};
use crate::interleaving::{rankers_of, Slots};
use crate::stats::preference::{preference, PairClusters, PairCounts, Preference};
use crate::stats::sequential::{MixtureBoundary, RunningFigures, SequentialLook};
use crate::stats::ClusterMoments;

/// One interleaved comparison in one window.
#[derive(Debug, Serialize)]
pub struct InterleavingReport {
    /// The group's variant: the rankers' names joined by `" vs "`.
    pub variant: String,
    /// The rankers, baseline first: the order of the impressions' `interleaving` lists.
    pub rankers: Vec<String>,
    /// Interleaved impressions finalized.
    pub impressions: u64,
    /// Of those, impressions in which some ranker earned credit.
    pub engaged: u64,
    /// Per ranker, the impressions it won outright (strictly the most credit).
    #[serde(serialize_with = "as_map")]
    pub wins: Vec<(String, u64)>,
    /// Engaged impressions whose top credit was shared.
    pub ties: u64,
    /// Non-empty unit buckets, when the unit is a user or session.
    pub unit_buckets: Option<usize>,
    /// Every pair of rankers, the later-listed (`ranker`) against the earlier (`opponent`):
    /// with two rankers, the one comparison of candidate against baseline.
    pub pairs: Vec<PairReport>,
}

/// One ranker against another over the engaged impressions.
#[derive(Debug, Serialize)]
pub struct PairReport {
    /// The later-listed ranker: a positive preference is for it.
    pub ranker: String,
    /// The earlier-listed ranker.
    pub opponent: String,
    /// Impressions where `ranker` earned more credit than `opponent`.
    pub wins: u64,
    /// Impressions where `opponent` earned more.
    pub losses: u64,
    /// Engaged impressions where neither earned more (both may have earned nothing, when a
    /// third ranker did).
    pub ties: u64,
    /// The preference, its intervals and its tests.
    #[serde(flatten)]
    pub figures: Preference,
}

/// A count kept as a sum of ones.
fn count(stats: &GroupStats, slot: usize) -> u64 {
    stats.sum(slot).round().max(0.0) as u64
}

/// The interleaving report of a group, `None` when it holds no interleaved impression or its
/// variant names no rankers (a folded `other`, an A/B arm).
pub fn report(
    slots: &Slots,
    ab: &AbConfig,
    variant: &str,
    stats: &GroupStats,
    boundary: &MixtureBoundary,
) -> Option<InterleavingReport> {
    let impressions = count(stats, slots.interleaved());
    let rankers = rankers_of(variant, slots.rankers)?;
    if impressions == 0 {
        return None;
    }
    let engaged = count(stats, slots.engaged());
    let wins: Vec<(String, u64)> =
        rankers.iter().enumerate().map(|(k, name)| (name.to_string(), count(stats, slots.wins(k)))).collect();
    let ties = engaged.saturating_sub(wins.iter().map(|(_, n)| n).sum());
    let clustered = ab.unit != AbUnit::Impression;
    let mut pairs = Vec::new();
    for j in 1..rankers.len() {
        for i in 0..j {
            let (beats, beaten) = (slots.beats(j, i), slots.beats(i, j));
            let counts = PairCounts { engaged, wins: count(stats, beats), losses: count(stats, beaten) };
            let clusters = clustered.then(|| {
                let mut moments = ClusterMoments::default();
                for bucket in stats.buckets() {
                    moments.add_bucket(bucket.sum(slots.engaged()), bucket.sum(beats) - bucket.sum(beaten));
                }
                PairClusters { moments }
            });
            pairs.push(PairReport {
                ranker: rankers[j].to_string(),
                opponent: rankers[i].to_string(),
                wins: counts.wins,
                losses: counts.losses,
                ties: engaged.saturating_sub(counts.wins + counts.losses),
                figures: preference(counts, clusters.as_ref(), ab.confidence, boundary),
            });
        }
    }
    Some(InterleavingReport {
        variant: variant.to_string(),
        rankers: rankers.iter().map(|r| r.to_string()).collect(),
        impressions,
        engaged,
        wins,
        ties,
        unit_buckets: clustered.then(|| stats.bucket_count()),
        pairs,
    })
}

/// This look's anytime-valid figures of a pair, to fold into the running ones; `None` when the
/// look has none (no decided impression, no standard error).
pub fn sequential_look(figures: &Preference) -> Option<SequentialLook> {
    Some(SequentialLook {
        difference_cs: figures.preference_cs?,
        relative_difference_cs: None,
        p_value: figures.always_valid_p_value?,
    })
}

/// A cumulative report's anytime-valid figures of a pair from the looks so far, as the A/B
/// comparisons' (see [`super::sequential`]): the running intersection and minimum, none before
/// a look had figures.
pub(super) fn from_looks(figures: &mut Preference, running: Option<&RunningFigures>) {
    let running = running.filter(|r| r.looks > 0);
    figures.preference_cs = running.and_then(RunningFigures::difference_cs);
    figures.preference_cs_empty = running.is_some_and(RunningFigures::difference_cs_empty);
    figures.always_valid_p_value = running.map(|r| r.p_value);
}
