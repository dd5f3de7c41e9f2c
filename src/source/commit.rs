//! Snapshot, then commit: the one path by which offsets reach the consumer group.
//!
//! A partition's snapshot holds its state and its [`Positions`], taken together on the consumer
//! thread (the only writer of both), so they always agree. Offsets are committed only after the
//! brokers acknowledged the changelog snapshot that covers them: a commit never runs ahead of
//! the state that would resume from it, whichever replica resumes it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use rdkafka::consumer::{CommitMode, Consumer, ConsumerContext};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use serde::Serialize;

use super::changelog::{Chain, Changelog, ChangelogError, RecordKind};
use super::positions::Positions;
use super::rebalance::TaskInputs;
use super::record::{self, RecordRef};
use super::standby::Standby;
use crate::checkpoint;
use crate::engine::{AggregatesOut, Engine, SharedEngine};
use crate::event::EventKind;

/// One partition's snapshot as format 5 wrote it (borrowed, no copy).
#[derive(Serialize)]
struct SnapshotRef<T: Serialize> {
    /// Where the partition's inputs resume: the next offset of each, if any was consumed.
    positions: [Option<i64>; 2],
    /// [`Engine::snapshot_partition`].
    task: T,
}

/// Encodes one partition's state and the positions it covers as a changelog record of format
/// 5, a snapshot, which this build still reads (`None` if the engine holds no task for it):
/// what the fuzz targets and tests decode with [`checkpoint::decode`].
pub fn encode_partition(engine: &Engine, positions: &Positions, partition: i32) -> Option<Vec<u8>> {
    let task = engine.snapshot_partition(partition)?;
    Some(checkpoint::encode(&SnapshotRef { positions: positions.of(partition).unwrap_or([None; 2]), task }))
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
    /// The warm standby's copies of the changelog (`state.warm_standby`).
    pub standby: Option<Standby>,
    /// A failure the source cannot go on after (the changelog unreadable, or its state written
    /// with another configuration): the poll loop stops with it.
    pub fatal: Option<ChangelogError>,
}

/// Snapshots `partitions` (assigned ones) to the changelog, then commits the offsets the
/// snapshots cover. A failed write commits nothing (the previous snapshots stand, and so do
/// the offsets committed with them); `occasion` names the moment in the log.
pub(super) fn checkpoint_and_commit<C: Consumer<X>, X: ConsumerContext>(
    consumer: &C,
    engine: &SharedEngine,
    state: &mut SourceState,
    partitions: &BTreeSet<i32>,
    topics: &[String; 2],
    mode: CommitMode,
    occasion: &str,
) {
    if partitions.is_empty() {
        return;
    }
    if let Some(changelog) = state.changelog.as_mut() {
        let started = Instant::now();
        // With each aggregates record, how many closed windows it is the first to carry.
        let (records, aggregates, carried) = {
            let mut engine = engine.lock();
            let records: Vec<(i32, RecordKind, Vec<u8>)> = partitions
                .iter()
                .filter_map(|&p| {
                    let (kind, bytes) = encode_record(&mut engine, changelog.chain(p), &state.positions, p)?;
                    Some((p, kind, bytes))
                })
                .collect();
            let aggregates: Vec<AggregatesOut> =
                partitions.iter().filter_map(|&p| engine.aggregates_record(p)).collect();
            let carried: Vec<(i32, usize)> = partitions.iter().map(|&p| (p, engine.unwritten_windows(p))).collect();
            (records, aggregates, carried)
        };
        let written = changelog.write(&records, &aggregates);
        let ok = written.is_ok();
        let bytes = match written {
            Ok(bytes) => bytes,
            Err(e) => {
                tracing::error!(error = %e, occasion, "changelog snapshot failed; offsets not committed (the previous snapshots stand)");
                0
            }
        };
        let mut engine = engine.lock();
        engine.record_checkpoint(bytes, started.elapsed(), ok, started);
        engine.record_state_bytes_sent(changelog.sent_bytes());
        if ok {
            let of = |kind: RecordKind| {
                let of_kind = records.iter().filter(|(_, k, _)| *k == kind);
                (of_kind.clone().count() as u64, of_kind.map(|(_, _, b)| b.len() as u64).sum())
            };
            engine.record_changelog_records(of(RecordKind::Snapshot), of(RecordKind::Delta));
            let of = |base: bool| {
                let of_kind = aggregates.iter().filter(|a| a.base == base);
                (of_kind.clone().count() as u64, of_kind.map(|a| a.bytes.len() as u64).sum())
            };
            engine.record_aggregates_records(of(true), of(false));
        }
        if !ok {
            engine.aggregates_not_written();
            return;
        }
        engine.aggregates_written(&carried);
        drop(engine);
    }
    commit_positions(consumer, topics, &state.positions.of_partitions(partitions), mode);
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
