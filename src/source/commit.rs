//! Snapshot, then commit: the one path by which offsets reach the consumer group.
//!
//! A partition's snapshot holds its state and its [`Positions`], taken together on the consumer
//! thread (the only writer of both), so they always agree. Offsets are committed only after the
//! brokers acknowledged the changelog snapshot that covers them: a commit never runs ahead of
//! the state that would resume from it, whichever replica resumes it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use rdkafka::consumer::{CommitMode, Consumer, ConsumerContext};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use super::changelog::{Chain, Changelog, ChangelogError, RecordKind, Sent};
use super::positions::Positions;
use super::rebalance::TaskInputs;
use super::record::{self, RecordRef};
use super::standby::Standby;
use crate::engine::{AggregatesOut, Engine, SharedEngine};
use crate::event::EventKind;

/// Encodes one partition's state and the positions it covers as a changelog snapshot record
/// of this build's format (`None` if the engine holds no task for it): what the fuzz targets
/// and tests decode with [`record::decode_snapshot`], as a restore reads it.
pub fn encode_partition(engine: &Engine, positions: &Positions, partition: i32) -> Option<Vec<u8>> {
    let task = engine.snapshot_partition(partition)?;
    let positions = positions.of(partition).unwrap_or([None; 2]);
    Some(record::encode::<_, ()>(&RecordRef::Snapshot { positions, task }))
}

/// One partition's record of format 6: its delta when its chain can go on and its task records
/// changes, else its snapshot (from which its task records changes). `None` if the engine holds
/// no task for it.
pub(super) fn encode_record(
    engine: &mut Engine,
    chain: Option<Chain>,
    positions: &Positions,
    partition: i32,
) -> Option<(RecordKind, Vec<u8>)> {
    let positions = positions.of(partition).unwrap_or([None; 2]);
    if let Some(chain) = chain {
        if let Some(task) = engine.delta_partition(partition) {
            let delta = RecordRef::<(), _>::Delta { base: chain.base, previous: chain.tip, positions, task };
            return Some((RecordKind::Delta, record::encode(&delta)));
        }
    }
    let task = engine.snapshot_partition_for_deltas(partition)?;
    Some((RecordKind::Snapshot, record::encode(&RecordRef::<_, ()>::Snapshot { positions, task })))
}

/// What the consumer thread keeps besides the engine: shared between the poll loop and the
/// rebalance callbacks (which run inside `poll`, on the same thread).
pub(super) struct SourceState {
    /// Where every partition in the engine's state resumes.
    pub positions: Positions,
    /// Partitions assigned to this consumer now: only their offsets may be committed (a
    /// revoked partition may already belong to someone else).
    pub assigned: BTreeSet<i32>,
    /// Every task the group's assignment brought, with its input partitions: what a revoke
    /// unassigns. Unlike `assigned`, kept through the final snapshot at shutdown, whose
    /// unsubscribe revokes them.
    pub tasks: BTreeMap<i32, TaskInputs>,
    /// Both input topics' partition counts, as last read at an assignment (0 when unknown).
    pub counts: [usize; 2],
    /// Where snapshots go; `None` in the demo, which only commits.
    pub changelog: Option<Changelog>,
    /// The checkpoint sent and not yet acknowledged, if any.
    pub in_flight: Option<InFlight>,
    /// The warm standby's copies of the changelog (`state.warm_standby`).
    pub standby: Option<Standby>,
    /// A failure the source cannot go on after (the changelog unreadable, or its state written
    /// with another configuration): the poll loop stops with it.
    pub fatal: Option<ChangelogError>,
}

/// Whether a checkpoint waits for the brokers' acknowledgment (and commits) before returning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Acknowledgment {
    /// The poll loop's rounds: the consumer thread goes on consuming while the brokers
    /// acknowledge, and [`commit_if_acknowledged`] commits once they did.
    Later,
    /// A revoke (the next owner restores from what it writes) and shutdown.
    Wait,
}

/// A checkpoint sent and not yet acknowledged: what finishing it needs. At most one is in
/// flight, and only for assigned partitions: a checkpoint or a revoke finishes it first.
pub(super) struct InFlight {
    /// The changelog's part: the records sent, and how their chains move on.
    sent: Sent,
    /// The offsets it covers, as they were when its records were encoded (the consumer has
    /// gone on since): what is committed once it is acknowledged.
    positions: Vec<(EventKind, i32, i64)>,
    /// With each aggregates record, how many closed windows it is the first to carry.
    carried: Vec<(i32, usize)>,
    /// The changelog records sent, `(count, bytes)`: snapshots, deltas.
    records: [(u64, u64); 2],
    /// The aggregates records sent, `(count, bytes)`: bases, increments.
    aggregates: [(u64, u64); 2],
    /// When the round started.
    started: Instant,
    /// How long the round kept the consumer thread (encoding and sending).
    on_thread: Duration,
    /// Whether it was written early for windows held open for its aggregates records: they
    /// close as soon as it is acknowledged rather than at the next tick.
    records_due: bool,
    /// The moment that started it, for the log.
    occasion: &'static str,
}

/// Snapshots `partitions` (assigned ones) to the changelog, and commits the offsets the
/// snapshots cover once the brokers acknowledged them: before returning with
/// [`Acknowledgment::Wait`], else when [`commit_if_acknowledged`] finds them acknowledged. A
/// checkpoint still in flight is finished (and committed) first. A failed write commits nothing
/// (the previous snapshots stand, and so do the offsets committed with them); `occasion` names
/// the moment in the log.
#[allow(clippy::too_many_arguments)]
pub(super) fn checkpoint_and_commit<C: Consumer<X>, X: ConsumerContext>(
    consumer: &C,
    engine: &SharedEngine,
    state: &mut SourceState,
    partitions: &BTreeSet<i32>,
    topics: &[String; 2],
    mode: CommitMode,
    acknowledgment: Acknowledgment,
    occasion: &'static str,
) {
    if let Some(positions) = finish_in_flight(engine, state, true) {
        commit_positions(consumer, topics, &positions, mode);
    }
    if partitions.is_empty() {
        return;
    }
    let Some(changelog) = state.changelog.as_mut() else {
        // The demo keeps no snapshots: only commits.
        commit_positions(consumer, topics, &state.positions.of_partitions(partitions), mode);
        return;
    };
    let started = Instant::now();
    let mut engine_guard = engine.lock();
    let records: Vec<(i32, RecordKind, Vec<u8>)> = partitions
        .iter()
        .filter_map(|&p| {
            let (kind, bytes) = encode_record(&mut engine_guard, changelog.chain(p), &state.positions, p)?;
            Some((p, kind, bytes))
        })
        .collect();
    let aggregates: Vec<AggregatesOut> = partitions.iter().filter_map(|&p| engine_guard.aggregates_record(p)).collect();
    let carried: Vec<(i32, usize)> = partitions.iter().map(|&p| (p, engine_guard.unwritten_windows(p))).collect();
    drop(engine_guard);
    match changelog.send(&records, &aggregates) {
        Ok(sent) => {
            let of = |kind: RecordKind| {
                let of_kind = records.iter().filter(|(_, k, _)| *k == kind);
                (of_kind.clone().count() as u64, of_kind.map(|(_, _, b)| b.len() as u64).sum())
            };
            let of_aggregates = |base: bool| {
                let of_kind = aggregates.iter().filter(|a| a.base == base);
                (of_kind.clone().count() as u64, of_kind.map(|a| a.bytes.len() as u64).sum())
            };
            state.in_flight = Some(InFlight {
                sent,
                positions: state.positions.of_partitions(partitions),
                carried,
                records: [of(RecordKind::Snapshot), of(RecordKind::Delta)],
                aggregates: [of_aggregates(true), of_aggregates(false)],
                started,
                on_thread: started.elapsed(),
                records_due: occasion == RECORDS_DUE,
                occasion,
            });
        }
        Err(e) => {
            tracing::error!(error = %e, occasion, "changelog snapshot failed; offsets not committed (the previous snapshots stand)");
            let mut engine = engine.lock();
            engine.telemetry_mut().record_checkpoint(0, started.elapsed(), Duration::ZERO, false, started);
            engine.aggregates_not_written();
            return;
        }
    }
    if acknowledgment == Acknowledgment::Wait {
        if let Some(positions) = finish_in_flight(engine, state, true) {
            commit_positions(consumer, topics, &positions, mode);
        }
    }
}

/// The occasion of a checkpoint written early for windows held open for its aggregates
/// records.
pub(super) const RECORDS_DUE: &str = "records due";

/// Commits (asynchronously) the offsets of the checkpoint in flight if the brokers have
/// acknowledged it, without waiting for them. Returns whether one is still in flight.
pub(super) fn commit_if_acknowledged<C: Consumer<X>, X: ConsumerContext>(
    consumer: &C,
    engine: &SharedEngine,
    state: &mut SourceState,
    topics: &[String; 2],
) -> bool {
    if let Some(positions) = finish_in_flight(engine, state, false) {
        commit_positions(consumer, topics, &positions, CommitMode::Async);
    }
    state.in_flight.is_some()
}

/// Finishes the checkpoint in flight without committing its offsets: for partitions lost to
/// an expulsion from the group, whose new owner may have committed since.
pub(super) fn finish_uncommitted(engine: &SharedEngine, state: &mut SourceState) {
    let _ = finish_in_flight(engine, state, true);
}

/// Finishes the checkpoint in flight, if there is one and (unless `wait`) the brokers answered
/// for all of it: records the outcome, and returns the offsets it covers if it was
/// acknowledged, to commit.
fn finish_in_flight(engine: &SharedEngine, state: &mut SourceState, wait: bool) -> Option<Vec<(EventKind, i32, i64)>> {
    let changelog = state.changelog.as_mut()?;
    if !wait && !state.in_flight.as_ref().is_some_and(|f| changelog.answered(&f.sent)) {
        return None;
    }
    let InFlight { sent, positions, carried, records, aggregates, started, on_thread, records_due, occasion } =
        state.in_flight.take()?;
    let finished = changelog.finish(sent);
    let sent_bytes = changelog.sent_bytes();
    let mut engine = engine.lock();
    engine.telemetry_mut().record_state_bytes_sent(sent_bytes);
    match finished {
        Ok(bytes) => {
            engine.telemetry_mut().record_checkpoint(bytes, on_thread, started.elapsed(), true, started);
            engine.telemetry_mut().record_changelog_records(records[0], records[1]);
            engine.telemetry_mut().record_aggregates_records(aggregates[0], aggregates[1]);
            engine.aggregates_written(&carried);
            if records_due {
                // The windows held for these records close now, not at the next tick.
                engine.advance(Instant::now());
            }
            Some(positions)
        }
        Err(e) => {
            tracing::error!(error = %e, occasion, "changelog snapshot failed; offsets not committed (the previous snapshots stand)");
            engine.telemetry_mut().record_checkpoint(0, on_thread, started.elapsed(), false, started);
            engine.aggregates_not_written();
            None
        }
    }
}

/// Commits next offsets (of partitions this consumer owns) to the group.
fn commit_positions<C: Consumer<X>, X: ConsumerContext>(
    consumer: &C,
    topics: &[String; 2],
    positions: &[(EventKind, i32, i64)],
    mode: CommitMode,
) {
    if positions.is_empty() {
        return;
    }
    let mut tpl = TopicPartitionList::with_capacity(positions.len());
    for &(kind, partition, next) in positions {
        let _ = tpl.add_partition_offset(&topics[kind.index()], partition, Offset::Offset(next));
    }
    if let Err(e) = consumer.commit(&tpl, mode) {
        tracing::warn!(error = %e, "offset commit failed; the next snapshot commits again");
    }
}
