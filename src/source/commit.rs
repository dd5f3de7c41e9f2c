//! Checkpoint, then commit: the one path by which offsets reach the consumer group.
//!
//! A checkpoint holds the engine's state and the [`Positions`] it covers, taken together on the
//! consumer thread (the only writer of both), so they always agree. Offsets are committed only
//! after that checkpoint is on disk: a commit never runs ahead of the state that would resume
//! from it.

use std::collections::BTreeSet;
use std::time::Instant;

use rdkafka::consumer::{CommitMode, Consumer, ConsumerContext};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};

use super::positions::Positions;
use crate::checkpoint::{self, CheckpointStore};
use crate::engine::{EngineSnapshot, SharedEngine};
use crate::event::EventKind;

/// What a checkpoint of the source holds, as written (borrowed, no copy).
#[derive(Serialize)]
struct CheckpointRef<'a, E: Serialize> {
    /// [`crate::engine::Engine::snapshot`].
    engine: E,
    /// Where each partition in that state resumes.
    positions: &'a Positions,
}

/// What a checkpoint of the source holds, as read back on start.
#[derive(Deserialize)]
pub struct Checkpoint {
    /// The engine's state, for [`crate::engine::Engine::restore`].
    pub engine: EngineSnapshot,
    /// Where each partition in that state resumes.
    pub positions: Positions,
}

/// Encodes the engine's state and the positions it covers into one checkpoint.
pub fn encode_checkpoint(engine: &crate::engine::Engine, positions: &Positions) -> Vec<u8> {
    checkpoint::encode(&CheckpointRef { engine: engine.snapshot(), positions })
}

/// What the consumer thread keeps besides the engine: shared between the poll loop and the
/// rebalance callbacks (which run inside `poll`, on the same thread).
pub(super) struct SourceState {
    /// Where every partition in the engine's state resumes.
    pub positions: Positions,
    /// Partitions assigned to this consumer now: only their offsets may be committed (a
    /// revoked partition may already belong to someone else).
    pub assigned: BTreeSet<i32>,
    /// Where checkpoints go; `None` in the demo, which only commits.
    pub store: Option<CheckpointStore>,
}

/// Checkpoints the engine and positions (when durable), then commits the offsets the
/// checkpoint covers for the assigned partitions. A failed checkpoint commits nothing (the
/// previous checkpoint stands); `occasion` names the moment in the log.
pub(super) fn checkpoint_and_commit<C: Consumer<X>, X: ConsumerContext>(
    consumer: &C,
    engine: &SharedEngine,
    state: &mut SourceState,
    topics: &[String; 2],
    mode: CommitMode,
    occasion: &str,
) {
    let encoded = state.store.as_ref().map(|_| encode_checkpoint(&engine.lock(), &state.positions));
    if let (Some(store), Some(encoded)) = (state.store.as_mut(), encoded) {
        let started = Instant::now();
        let written = store.write(&encoded);
        let ok = written.is_ok();
        if let Err(e) = written {
            tracing::error!(error = %e, occasion, "checkpoint failed; offsets not committed (the previous checkpoint stands)");
        }
        engine.lock().record_checkpoint(encoded.len() as u64, started.elapsed(), ok, started);
        if !ok {
            return;
        }
    }
    commit_positions(consumer, topics, &state.positions.of_partitions(&state.assigned), mode);
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
        tracing::warn!(error = %e, "offset commit failed; the next checkpoint commits again");
    }
}
