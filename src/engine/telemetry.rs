//! What the engine reports about itself besides metric values: event counts, latency
//! distributions and checkpoint health.

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::checkpoint::Inconsistency;
use crate::event::RejectReason;
use crate::time::{EventTime, WallClock};

/// Counts of everything the engine saw that is not a metric value.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Counters {
    /// Messages consumed, per input kind.
    pub consumed: [u64; 2],
    /// Messages rejected, per input kind and [`RejectReason`].
    pub rejected: RejectCounts,
    /// Impressions whose query was already pending.
    pub impressions_duplicate: u64,
    /// Impressions whose attribution window had already closed when they arrived.
    pub impressions_late: u64,
    /// Impressions finalized before their deadline because `join.max_pending_impressions` was reached.
    pub impressions_evicted: u64,
    /// De-duplication keys forgotten early because `join.max_dedup_keys` was reached.
    pub dedup_keys_evicted: u64,
    /// Impressions without the field `ab.unit` names; each counts as its own cluster.
    pub impressions_without_unit: u64,
    /// Impressions carrying a `client_id` while `ab.unit` is `impression`: if variants are
    /// assigned per client, the statistics then treat correlated impressions as independent,
    /// and `replay` warns.
    pub impressions_with_unused_client_id: u64,
    /// Impressions whose experiment / variant value the `[labels]` guard folded, by
    /// [`crate::accumulate::FoldedLabel`].
    pub labels_folded: [u64; 2],
}

impl Counters {
    /// Checks counts read from a snapshot (see [`crate::checkpoint::MAX_COUNT`]).
    pub fn check(&self) -> Result<(), Inconsistency> {
        let singles = [
            self.impressions_duplicate,
            self.impressions_late,
            self.impressions_evicted,
            self.dedup_keys_evicted,
            self.impressions_without_unit,
            self.impressions_with_unused_client_id,
        ];
        let mut all =
            self.consumed.iter().chain(self.rejected.iter().flatten()).chain(&singles).chain(&self.labels_folded);
        all.try_for_each(|&count| crate::checkpoint::check_count("a message or impression count", count))
    }

    /// Adds another partition's counts.
    pub fn merge(&mut self, other: &Counters) {
        let add = |a: &mut [u64], b: &[u64]| a.iter_mut().zip(b).for_each(|(a, b)| *a += b);
        add(&mut self.consumed, &other.consumed);
        for (a, b) in self.rejected.iter_mut().zip(other.rejected.iter()) {
            add(a, b);
        }
        self.impressions_duplicate += other.impressions_duplicate;
        self.impressions_late += other.impressions_late;
        self.impressions_evicted += other.impressions_evicted;
        self.dedup_keys_evicted += other.dedup_keys_evicted;
        self.impressions_without_unit += other.impressions_without_unit;
        self.impressions_with_unused_client_id += other.impressions_with_unused_client_id;
        add(&mut self.labels_folded, &other.labels_folded);
    }
}

/// Messages rejected, per input kind (`[kind.index()]`) and [`RejectReason`]
/// (`[reason.index()]`).
///
/// Snapshot layout: the reasons of format 5 ([`RejectReason::LEGACY`]) are written where they
/// always were, as fixed arrays in the counters; the later ones follow the whole task as a
/// trailing [`LaterRejections`], which an older rankpulse leaves unread and which a snapshot of
/// an older one lacks (read as zeros). So replicas of either version read each other's
/// snapshots, and a rolling upgrade keeps its state.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RejectCounts([[u64; RejectReason::ALL.len()]; 2]);

impl RejectCounts {
    pub fn iter(&self) -> std::slice::Iter<'_, [u64; RejectReason::ALL.len()]> {
        self.0.iter()
    }
    pub fn iter_mut(&mut self) -> std::slice::IterMut<'_, [u64; RejectReason::ALL.len()]> {
        self.0.iter_mut()
    }
    /// The counts of the reasons after [`RejectReason::LEGACY`], for the snapshot's tail.
    pub fn later(&self) -> LaterRejections {
        LaterRejections(self.0.map(|kind| kind.get(RejectReason::LEGACY..).unwrap_or_default().to_vec()))
    }
    /// Puts back the counts [`RejectCounts::later`] wrote (checked by
    /// [`LaterRejections::check`] first); reasons this version does not know
    /// (a newer writer's) are left out.
    pub fn set_later(&mut self, later: &LaterRejections) {
        for (counts, written) in self.0.iter_mut().zip(&later.0) {
            for (count, &value) in counts.iter_mut().skip(RejectReason::LEGACY).zip(written) {
                *count = value;
            }
        }
    }
}

impl std::ops::Index<usize> for RejectCounts {
    type Output = [u64; RejectReason::ALL.len()];
    fn index(&self, kind: usize) -> &Self::Output {
        &self.0[kind]
    }
}

impl std::ops::IndexMut<usize> for RejectCounts {
    fn index_mut(&mut self, kind: usize) -> &mut Self::Output {
        &mut self.0[kind]
    }
}

impl Serialize for RejectCounts {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let legacy = self.0.map(|kind| {
            let mut first = [0u64; RejectReason::LEGACY];
            first.iter_mut().zip(kind).for_each(|(to, from)| *to = from);
            first
        });
        legacy.serialize(s)
    }
}

impl<'de> Deserialize<'de> for RejectCounts {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let legacy = <[[u64; RejectReason::LEGACY]; 2]>::deserialize(d)?;
        let mut counts = RejectCounts::default();
        for (to, from) in counts.0.iter_mut().zip(legacy) {
            to.iter_mut().zip(from).for_each(|(to, from)| *to = from);
        }
        Ok(counts)
    }
}

/// The counts of the reject reasons after [`RejectReason::LEGACY`], per input kind: the
/// snapshot's trailing field (see [`RejectCounts`]). Lists, so that later reasons extend them.
/// (A format 5 snapshot may end before it: `super::compat` reads it as none.)
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaterRejections([Vec<u64>; 2]);

impl LaterRejections {
    /// Counts as a snapshot's tail holds them, per kind of message.
    #[cfg(test)]
    pub(super) fn new(counts: [Vec<u64>; 2]) -> Self {
        LaterRejections(counts)
    }

    /// Checks counts read from a snapshot, as [`Counters::check`] checks the others: a count
    /// past [`crate::checkpoint::MAX_COUNT`] would overflow when the next rejection adds one.
    pub fn check(&self) -> Result<(), Inconsistency> {
        let mut all = self.0.iter().flatten();
        all.try_for_each(|&count| crate::checkpoint::check_count("a message or impression count", count))
    }
}

/// A latency distribution: hdrhistogram for quantiles plus an exact sum for the `_sum` series.
/// Checkpointed as its recorded buckets (see [`DistributionState`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(into = "DistributionState", try_from = "DistributionState")]
pub struct Distribution {
    /// Recorded values, for the exported quantiles.
    pub histogram: Histogram<u64>,
    /// Sum of recorded values, in the histogram's unit: the histogram's own sum is rounded.
    pub sum: u128,
}

impl Distribution {
    pub(super) fn new(max_value: u64) -> Self {
        Distribution { histogram: Histogram::new_with_bounds(1, max_value, 3).expect("valid histogram bounds"), sum: 0 }
    }

    pub(super) fn record(&mut self, value: u64) {
        self.histogram.saturating_record(value.max(1));
        self.sum += u128::from(value);
    }

    /// Adds another partition's distribution.
    pub fn merge(&mut self, other: &Distribution) {
        // Both have the same bounds (one constructor per distribution), so adding cannot fail;
        // a failure would only lose quantile detail, never the exact sum and count.
        let _ = self.histogram.add(&other.histogram);
        self.sum += other.sum;
    }
}

/// A [`Distribution`] as checkpoints hold it: the histogram's bounds and its recorded buckets
/// (a few hundred pairs), not its full counts array.
#[derive(Serialize, Deserialize)]
struct DistributionState {
    /// The histogram's highest trackable value.
    high: u64,
    /// (value, count) of every recorded bucket.
    recorded: Vec<(u64, u64)>,
    /// [`Distribution::sum`].
    sum: u128,
}

impl From<Distribution> for DistributionState {
    fn from(d: Distribution) -> Self {
        let recorded = d.histogram.iter_recorded().map(|v| (v.value_iterated_to(), v.count_at_value())).collect();
        DistributionState { high: d.histogram.high(), recorded, sum: d.sum }
    }
}

impl TryFrom<DistributionState> for Distribution {
    type Error = Inconsistency;
    fn try_from(state: DistributionState) -> Result<Self, Inconsistency> {
        // Read from a snapshot: what recording or merging adds to must not overflow.
        crate::checkpoint::check_total("a distribution's sum", state.sum)?;
        // With a lowest value of 1 and 3 significant figures, only a highest value the
        // histogram's counts array cannot be sized for fails.
        let mut histogram = Histogram::new_with_bounds(1, state.high.max(2), 3).map_err(|_| Inconsistency::Value {
            what: "a distribution's highest trackable value",
            expected: "one a histogram can track",
        })?;
        for (value, count) in state.recorded {
            crate::checkpoint::check_count("a distribution's count", count)?;
            // Auto-resize is off: a value beyond the highest trackable one fails.
            histogram.record_n(value, count).map_err(|_| Inconsistency::Value {
                what: "a distribution's recorded value",
                expected: "within its highest trackable value",
            })?;
        }
        Ok(Distribution { histogram, sum: state.sum })
    }
}

/// Checkpoint health, exported next to the evaluation state.
#[derive(Debug, Default, Clone, Copy)]
pub struct CheckpointStats {
    /// Checkpoints written successfully.
    pub written: u64,
    /// Checkpoints that failed (their offsets were not committed).
    pub failed: u64,
    /// Size of the last successful checkpoint.
    pub last_bytes: u64,
    /// How long the last successful checkpoint kept the consumer thread (encoding and sending
    /// its records): the share of the thread's time state costs.
    pub last_duration: Duration,
    /// From the start of the last successful checkpoint until the brokers acknowledged all of
    /// it (and its offsets could be committed); the consumer went on consuming meanwhile.
    pub last_acknowledged: Duration,
    /// Wall-clock milliseconds of the last successful checkpoint.
    pub last_success_ms: Option<EventTime>,
    /// Changelog records acknowledged: snapshots, deltas (see `source::record`).
    pub records: [u64; 2],
    /// Their payload bytes: snapshots, deltas.
    pub record_bytes: [u64; 2],
    /// Aggregates records acknowledged: bases, increments (see `super::increments`).
    pub aggregates_records: [u64; 2],
    /// Their payload bytes: bases, increments.
    pub aggregates_bytes: [u64; 2],
    /// Bytes the state topics' producer sent to the brokers, compressed and framed (its
    /// librdkafka statistics).
    pub state_bytes_sent: u64,
}

/// How a rebalance changed this replica's partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RebalanceKind {
    /// Partitions were assigned (and restored).
    Assign,
    /// Partitions were revoked (snapshotted, then handed on).
    Revoke,
    /// Partitions were lost: this member was expelled from the group, nothing was written.
    Lost,
}

impl RebalanceKind {
    pub const ALL: [RebalanceKind; 3] = [RebalanceKind::Assign, RebalanceKind::Revoke, RebalanceKind::Lost];

    /// The `kind` label.
    pub fn label(self) -> &'static str {
        match self {
            RebalanceKind::Assign => "assign",
            RebalanceKind::Revoke => "revoke",
            RebalanceKind::Lost => "lost",
        }
    }
}

/// Where a restored partition's snapshot came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestoreSource {
    /// Read from the changelog topic on assignment.
    Changelog,
    /// The copy a warm standby kept while another replica owned the partition.
    Standby,
}

impl RestoreSource {
    /// The `source` label.
    pub fn label(self) -> &'static str {
        match self {
            RestoreSource::Changelog => "changelog",
            RestoreSource::Standby => "standby",
        }
    }
}

/// One partition's last restore.
#[derive(Debug, Clone, Copy)]
pub struct Restore {
    /// How long reading, decoding and restoring the snapshot took.
    pub took: Duration,
    /// Where the snapshot came from.
    pub source: RestoreSource,
    /// From the restored snapshot's write (its previous owner's last act on it, at a revoke
    /// or an interval) to the restore's end: how long no replica processed the partition, as
    /// far as this one can tell (the brokers' clocks and this host's are compared).
    pub unowned: Option<Duration>,
}

/// What rebalances did to this replica's partitions, for operators.
#[derive(Debug, Default, Clone)]
pub struct RebalanceStats {
    /// Rebalance callbacks that changed something, per [`RebalanceKind`] (`ALL`'s order).
    pub rebalances: [u64; 3],
    /// Restores per [`RestoreSource`] (changelog, standby).
    pub restores: [u64; 2],
    /// Each partition's last restore, kept while this replica owns it.
    pub last_restore: std::collections::BTreeMap<i32, Restore>,
}

/// What the callers timed and what rebalances did, recorded beside the engine's state (which
/// they do not change) for the exposition.
#[derive(Debug)]
pub struct Telemetry {
    /// Time to process one message, in nanoseconds.
    processing_time: Distribution,
    /// Health of the checkpoints taken of the engine, for the gauges.
    checkpoints: CheckpointStats,
    /// What rebalances did to the partitions.
    rebalances: RebalanceStats,
    /// The engine's wall clock: a checkpoint's success is stamped with it.
    wall_clock: WallClock,
}

impl Telemetry {
    /// Nothing recorded yet; `wall_clock` is the engine's.
    pub fn new(wall_clock: WallClock) -> Self {
        Telemetry {
            processing_time: Distribution::new(60_000_000_000),
            checkpoints: CheckpointStats::default(),
            rebalances: RebalanceStats::default(),
            wall_clock,
        }
    }

    /// The checkpoints' health.
    pub fn checkpoint_stats(&self) -> CheckpointStats {
        self.checkpoints
    }

    /// What rebalances did to this replica's partitions.
    pub fn rebalance_stats(&self) -> &RebalanceStats {
        &self.rebalances
    }

    /// The distribution of per-message processing time (nanoseconds).
    pub fn processing_time(&self) -> &Distribution {
        &self.processing_time
    }

    /// Records the wall time one message took, for the processing-time distribution.
    pub fn record_processing_time(&mut self, elapsed: Duration) {
        self.processing_time.record(u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX));
    }

    /// Records a checkpoint attempt: its bytes, the consumer thread's time on it, the time
    /// until the brokers acknowledged it, whether they did.
    pub fn record_checkpoint(&mut self, bytes: u64, took: Duration, acknowledged: Duration, ok: bool, now: Instant) {
        let wall_clock = self.wall_clock.ms(now);
        let stats = &mut self.checkpoints;
        if ok {
            stats.written += 1;
            stats.last_bytes = bytes;
            stats.last_duration = took;
            stats.last_acknowledged = acknowledged;
            stats.last_success_ms = Some(wall_clock);
        } else {
            stats.failed += 1;
        }
    }

    /// Records changelog records acknowledged in a round: `(count, bytes)` of snapshots and of
    /// deltas.
    pub fn record_changelog_records(&mut self, snapshots: (u64, u64), deltas: (u64, u64)) {
        let stats = &mut self.checkpoints;
        for (i, (count, bytes)) in [snapshots, deltas].into_iter().enumerate() {
            if let (Some(c), Some(b)) = (stats.records.get_mut(i), stats.record_bytes.get_mut(i)) {
                *c += count;
                *b += bytes;
            }
        }
    }

    /// Records aggregates records acknowledged in a round: `(count, bytes)` of bases and of
    /// increments.
    pub fn record_aggregates_records(&mut self, bases: (u64, u64), increments: (u64, u64)) {
        let stats = &mut self.checkpoints;
        for (i, (count, bytes)) in [bases, increments].into_iter().enumerate() {
            if let (Some(c), Some(b)) = (stats.aggregates_records.get_mut(i), stats.aggregates_bytes.get_mut(i)) {
                *c += count;
                *b += bytes;
            }
        }
    }

    /// Records the state producer's bytes sent so far (a total, not an increment).
    pub fn record_state_bytes_sent(&mut self, total: u64) {
        let stats = &mut self.checkpoints;
        stats.state_bytes_sent = stats.state_bytes_sent.max(total);
    }

    /// Records a rebalance callback that assigned, revoked or lost `partitions`.
    pub fn record_rebalance(&mut self, kind: RebalanceKind, partitions: &[i32]) {
        if partitions.is_empty() {
            return;
        }
        let stats = &mut self.rebalances;
        if let Some(i) = RebalanceKind::ALL.iter().position(|&k| k == kind) {
            stats.rebalances[i] += 1;
        }
        if kind != RebalanceKind::Assign {
            for p in partitions {
                stats.last_restore.remove(p);
            }
        }
    }

    /// Records a partition's restore from a snapshot.
    pub fn record_restore(&mut self, partition: i32, restore: Restore) {
        let stats = &mut self.rebalances;
        stats.restores[usize::from(restore.source == RestoreSource::Standby)] += 1;
        stats.last_restore.insert(partition, restore);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_distribution_read_back_must_leave_room_to_record() {
        let mut d = Distribution::new(1000);
        d.record(10);
        let state = DistributionState::from(d.clone());
        let back = Distribution::try_from(state).unwrap();
        assert_eq!((back.sum, back.histogram.len()), (10, 1));
        // Found reviewing restore for the snapshot fuzz target: a sum or a count at the top of its
        // type overflowed on the next record or merge.
        let huge_sum = DistributionState { high: 1000, recorded: vec![], sum: u128::MAX };
        let err = Distribution::try_from(huge_sum).err();
        assert_eq!(err, Some(Inconsistency::Total { what: "a distribution's sum", value: u128::MAX }));
        let huge_count = DistributionState { high: 1000, recorded: vec![(10, u64::MAX)], sum: 0 };
        let err = Distribution::try_from(huge_count).err();
        assert_eq!(err, Some(Inconsistency::Count { what: "a distribution's count", value: u64::MAX }));
        // A value beyond the histogram's bounds, which recording it would have grown.
        let beyond = DistributionState { high: 1000, recorded: vec![(1 << 40, 1)], sum: 0 };
        let err = Distribution::try_from(beyond).err();
        assert!(matches!(err, Some(Inconsistency::Value { what: "a distribution's recorded value", .. })), "{err:?}");
    }
}
