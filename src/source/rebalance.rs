//! The consumer's callbacks: restores and positions partitions on assignment, snapshots and
//! commits on revoke, tracks readiness. They run inside `poll`, between two messages, and first
//! wait for the engine thread to have everything polled before (`handoff`), so they never see a
//! half-processed message.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::ClientContext;

use super::changelog::{ChangelogError, RecoveredChain};
use super::chunks::SnapshotId;
use super::commit::{checkpoint_and_commit, finish_uncommitted, Acknowledgment, SourceState};
use super::handoff::Handoff;
use super::record::{self, PartitionSnapshot, Record};
use super::standby::{Applied, Unheld};
use crate::checkpoint;
use crate::engine::{RebalanceKind, Restore, RestoreError, RestoreSource, SharedEngine};
use crate::event::EventKind;
use crate::health::Health;
use crate::kafka_log::KafkaLog;
use crate::shutdown::Shutdown;

/// How long an assignment may wait for the topics' metadata.
const COMMITTED_TIMEOUT: Duration = Duration::from_secs(10);
/// How long an assignment waits for the warm standby to have read a changelog partition to its
/// end before reading it itself: the previous owner's last snapshot was acknowledged before
/// the rebalance, so a tailing standby normally has it already.
const STANDBY_CATCH_UP: Duration = Duration::from_millis(500);

/// Why a recovered snapshot is not restored: the warm standby's copy is then read from the
/// changelog instead, and a changelog snapshot is skipped for the one before.
#[derive(Debug, thiserror::Error)]
enum Unusable {
    #[error(transparent)]
    Decode(#[from] checkpoint::DecodeError),
    #[error(transparent)]
    Restore(#[from] RestoreError),
    #[error("the record a chain starts from is not a snapshot")]
    NotASnapshot,
    #[error("delta {n} of {of} after it (offset {offset}): {why}")]
    Delta { n: usize, of: usize, offset: i64, why: DeltaUnusable },
    #[error(transparent)]
    Standby(#[from] Unheld),
}

/// Where a restored partition's state came from: a chain read from the changelog, or the warm
/// standby's copy of one.
struct Origin {
    /// The chain's snapshot, and the offset of its first chunk.
    base: SnapshotId,
    base_offset: i64,
    /// Deltas applied after it.
    deltas: usize,
    /// Bytes read for it.
    bytes: usize,
    /// When the newest record was written, if the brokers kept its timestamp: when the
    /// previous owner last wrote the partition's state.
    written_ms: Option<i64>,
}

impl Origin {
    fn of(chain: &RecoveredChain) -> Origin {
        Origin {
            base: chain.base.id,
            base_offset: chain.base.offset,
            deltas: chain.deltas.len(),
            bytes: chain.bytes(),
            written_ms: chain.newest().written_ms,
        }
    }
}

/// Why a delta of a chain cannot be applied (the chain's snapshot is then unusable with it).
#[derive(Debug, thiserror::Error)]
enum DeltaUnusable {
    #[error(transparent)]
    Decode(#[from] checkpoint::DecodeError),
    #[error(transparent)]
    Restore(#[from] RestoreError),
    #[error("not a delta")]
    NotADelta,
    #[error("it does not follow the record before it")]
    Unlinked,
}

/// The consumer's context: what its callbacks need, and the source state they share with the
/// poll loop.
pub(super) struct SourceContext {
    /// The engine whose partitions are assigned, parked and taken over.
    pub engine: SharedEngine,
    /// Readiness: lost while nothing is assigned or the brokers are down.
    pub health: Arc<Health>,
    /// Impressions topic, engagements topic: a message's kind is the index of its topic.
    pub topics: [String; 2],
    /// Positions, assignment and checkpoint store. Only the consumer thread locks it (the loop
    /// and these callbacks, which run inside its `poll`), so it is never contended; the lock is
    /// what lets the context be `Sync`, as librdkafka's callbacks require.
    pub state: Mutex<SourceState>,
    /// The consumer's log: outages and repeated errors limited, recovery said once. Shared with
    /// the state clients (changelog, aggregates), so an outage is reported once.
    pub log: Arc<KafkaLog>,
    /// Triggered when a partition's state cannot be restored (see [`SourceState::fatal`]).
    pub shutdown: Shutdown,
    /// The engine thread and the batch being decoded for it. Locked before the source state
    /// where both are needed, and only by the consumer thread (the loop and these callbacks).
    pub handoff: Mutex<Handoff>,
}

impl SourceContext {
    /// The source state. Poisoning can only come from a panic on the consumer thread itself,
    /// which ends the thread and `serve` with it; taking the lock anyway keeps the remaining
    /// callbacks of that unwinding consumer from panicking a second time.
    pub fn state(&self) -> MutexGuard<'_, SourceState> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The hand-off to the engine thread (poisoning as for [`SourceContext::state`]).
    pub fn handoff(&self) -> MutexGuard<'_, Handoff> {
        self.handoff.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Waits until the engine has everything polled so far and the positions record it (see
    /// [`Handoff::barrier`]). False when the engine thread is gone: then nothing may be
    /// snapshotted or committed, and the process stops.
    pub fn barrier(&self) -> bool {
        let mut handoff = self.handoff();
        let mut state = self.state();
        match handoff.barrier(&mut state.positions) {
            Ok(()) => true,
            Err(stopped) => {
                tracing::error!(error = %stopped, "stopping: nothing more is consumed, snapshotted or committed");
                self.shutdown.trigger();
                false
            }
        }
    }
}

impl ClientContext for SourceContext {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        self.log.librdkafka(level, facility, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        if matches!(error.rdkafka_error_code(), Some(RDKafkaErrorCode::AllBrokersDown)) {
            self.health.set_ready(false);
        }
        self.log.client_error(&error, reason);
    }
}

impl ConsumerContext for SourceContext {
    fn rebalance(&self, consumer: &BaseConsumer<Self>, err: RDKafkaRespErr, tpl: &mut TopicPartitionList) {
        // Everything polled before is in the state and its positions before the assignment
        // changes; with the engine thread gone, nothing is snapshotted or positioned.
        if !self.barrier() {
            return;
        }
        // The group assigns impressions partitions; each brings its tasks' engagements
        // partitions, which this callback assigns beside them (module documentation).
        let cooperative = matches!(consumer.rebalance_protocol(), RebalanceProtocol::Cooperative);
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                let inputs = self.position_assignment(consumer, &partitions_of(tpl));
                // Eager (not configured, but librdkafka decides): every partition was revoked
                // first, so the new assignment is the whole one.
                let assigned =
                    if cooperative { consumer.incremental_assign(&inputs) } else { consumer.assign(&inputs) };
                if let Err(e) = assigned {
                    tracing::error!(error = %e, "assigning partitions failed");
                }
                drop(inputs);
                let owned = !self.state().assigned.is_empty();
                self.health.set_ready(owned);
                // The group coordinator answered: the cluster is back, even on idle topics.
                self.log.recovered("partitions were assigned");
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                let inputs = self.release(consumer, &partitions_of(tpl));
                let released = if cooperative { consumer.incremental_unassign(&inputs) } else { consumer.unassign() };
                if let Err(e) = released {
                    tracing::error!(error = %e, "unassigning partitions failed");
                }
                drop(inputs);
                let owned = !self.state().assigned.is_empty();
                self.health.set_ready(owned);
            }
            other => tracing::error!(error = ?other, "rebalance error"),
        }
    }
}

/// What a task was assigned with.
pub(super) struct TaskInputs {
    /// The impressions partition whose assignment by the group brought the task: revoking it
    /// revokes the task.
    pub via: i32,
    /// Whether each input (impressions, engagements) has the task's partition number, and so
    /// was assigned for it.
    pub inputs: [bool; 2],
}

fn partitions_of(tpl: &TopicPartitionList) -> BTreeSet<i32> {
    tpl.elements().iter().map(|e| e.partition()).collect()
}

/// The tasks (engine partitions) that come with a set of impressions partitions, given both
/// topics' partition counts: task *t* for every partition number *t* of either topic whose
/// impressions partition `t % impressions` is in the set. With equal counts that is the set
/// itself; an engagements partition beyond the impressions topic's count has no impressions
/// partition of its own, and goes with the one its number wraps to, so it is still consumed
/// (its engagements are orphans: no impression can share its partition). With a count unknown
/// (0), the set itself.
pub(super) fn tasks_of(impressions: &BTreeSet<i32>, counts: [usize; 2]) -> BTreeSet<i32> {
    let [imp, eng] = counts;
    if imp == 0 {
        return impressions.clone();
    }
    let all = i32::try_from(imp.max(eng)).unwrap_or(i32::MAX);
    let imp = i32::try_from(imp).unwrap_or(i32::MAX);
    (0..all).filter(|t| impressions.contains(&(t % imp))).collect()
}

impl SourceContext {
    /// The input partitions of these tasks (as assigned with them), without offsets.
    fn input_partitions_of(&self, tasks: &BTreeSet<i32>) -> TopicPartitionList {
        let state = self.state();
        let mut tpl = TopicPartitionList::new();
        for t in tasks {
            if let Some(task) = state.tasks.get(t) {
                for kind in EventKind::ALL.into_iter().filter(|k| task.inputs[k.index()]) {
                    tpl.add_partition(&self.topics[kind.index()], *t);
                }
            }
        }
        tpl
    }

    /// Takes on the tasks that come with newly assigned impressions partitions: restores each
    /// from its newest changelog snapshot, and returns their input partitions (both topics) to
    /// assign, at that snapshot's offsets; a task without one starts empty from the group's
    /// offsets.
    fn position_assignment(&self, consumer: &BaseConsumer<Self>, impressions: &BTreeSet<i32>) -> TopicPartitionList {
        let mut state = self.state();
        if let Some(counts) = input_counts(consumer, &self.topics) {
            state.counts = counts;
        }
        let counts = state.counts;
        let partitions = tasks_of(impressions, counts);
        let mut inputs = TopicPartitionList::new();
        tracing::debug!(?impressions, tasks = ?partitions, "assignment: restoring the partitions");
        if let Some(changelog) = state.changelog.as_mut() {
            let needed = counts[0].max(counts[1]).max(partitions.last().map_or(0, |&p| p as usize + 1));
            if let Err(e) = changelog.ensure_topics(needed) {
                self.fail(&mut state, e);
                return inputs;
            }
        }
        for &p in &partitions {
            let started = Instant::now();
            let restored = match self.newest_snapshot(&mut state, p) {
                Ok(found) => found,
                Err(e) => {
                    self.fail(&mut state, e);
                    return inputs;
                }
            };
            // Which inputs have partition p: both, unless a count is known and smaller.
            let has = |kind: EventKind| counts[kind.index()] == 0 || (p as usize) < counts[kind.index()];
            let task_inputs = [has(EventKind::Impression), has(EventKind::Engagement)];
            let mut engine = self.engine.lock();
            let mut resume = [None; 2];
            match restored {
                Some((chain, snapshot, source)) => {
                    let pending = snapshot.task.pending_impressions();
                    let positions = snapshot.positions;
                    if let Err(e) = engine.restore_partition(p, snapshot.task, Instant::now()) {
                        // Checked while reading: only a bug gets here.
                        tracing::error!(partition = p, error = %e, "restoring the partition failed");
                    }
                    if let Some(changelog) = state.changelog.as_mut() {
                        changelog.restored_from(p, chain.base);
                    }
                    resume = positions;
                    state.positions.set(p, positions);
                    let took = started.elapsed();
                    let unowned = chain.written_ms.and_then(|written| {
                        let now = chrono::Utc::now().timestamp_millis();
                        Some(Duration::from_millis(u64::try_from(now.checked_sub(written)?).ok()?))
                    });
                    engine.telemetry_mut().record_restore(p, Restore { took, source, unowned });
                    tracing::info!(
                        partition = p,
                        snapshot = chain.base.sequence,
                        changelog_offset = chain.base_offset,
                        deltas = chain.deltas,
                        bytes = chain.bytes,
                        pending,
                        took_ms = took.as_millis() as u64,
                        unowned_ms = unowned.map(|d| d.as_millis() as u64),
                        source = source.label(),
                        ?positions,
                        "partition restored"
                    );
                }
                None => {
                    engine.assign(p, Instant::now());
                    if state.changelog.is_some() {
                        state.positions.forget(p);
                        tracing::info!(
                            partition = p,
                            "no snapshot in the changelog: the partition starts empty from the group's offsets"
                        );
                    }
                }
            }
            for kind in EventKind::ALL.into_iter().filter(|k| task_inputs[k.index()]) {
                let offset = resume[kind.index()].map_or(Offset::Invalid, Offset::Offset);
                let _ = inputs.add_partition_offset(&self.topics[kind.index()], p, offset);
            }
            let via = match i32::try_from(counts[0]) {
                Ok(imp) if imp > 0 => p % imp,
                _ => p,
            };
            state.tasks.insert(p, TaskInputs { via, inputs: task_inputs });
            state.assigned.insert(p);
        }
        let assigned: Vec<i32> = partitions.iter().copied().collect();
        self.engine.lock().telemetry_mut().record_rebalance(RebalanceKind::Assign, &assigned);
        tracing::info!(?partitions, "partitions assigned");
        if state.changelog.is_some() && !partitions.is_empty() {
            // A restore reads and decodes a snapshot and its deltas, and frees them: the state
            // is what stays.
            crate::memory::release_free_heap("partitions restored");
        }
        inputs
    }

    /// A partition's newest snapshot that decodes and fits the configuration: the warm
    /// standby's copy if it has read the whole changelog partition, else read from the
    /// changelog. `None` without a changelog, or when the partition has no snapshot.
    fn newest_snapshot(
        &self,
        state: &mut SourceState,
        partition: i32,
    ) -> Result<Option<(Origin, PartitionSnapshot, RestoreSource)>, ChangelogError> {
        // The snapshot with its deltas applied, in order: the partition's state as of the last.
        let usable = |chain: &RecoveredChain| -> Result<PartitionSnapshot, Unusable> {
            let Record::Snapshot(mut snapshot) = record::decode(&chain.base.bytes)? else {
                return Err(Unusable::NotASnapshot);
            };
            let mut previous = chain.base.id;
            // The deltas' operations run through this engine's evaluation.
            let engine = self.engine.lock();
            for (n, read) in chain.deltas.iter().enumerate() {
                let failed =
                    |why: DeltaUnusable| Unusable::Delta { n: n + 1, of: chain.deltas.len(), offset: read.offset, why };
                let Record::Delta(delta) = record::decode(&read.bytes).map_err(|e| failed(e.into()))? else {
                    return Err(failed(DeltaUnusable::NotADelta));
                };
                // What its first chunk said, now checked against its whole verified bytes.
                if delta.base != chain.base.id || delta.previous != previous {
                    return Err(failed(DeltaUnusable::Unlinked));
                }
                previous = read.id;
                engine.apply_delta(&mut snapshot.task, delta.task).map_err(|e| failed(e.into()))?;
                snapshot.positions = delta.positions;
            }
            engine.check_compatible(partition, &mut snapshot.task)?;
            Ok(*snapshot)
        };
        let SourceState { changelog, standby, .. } = state;
        let Some(changelog) = changelog.as_mut() else { return Ok(None) };
        if let Some(standby) = standby.as_ref() {
            let end = changelog.end_offset(partition)?;
            if let Some(warm) = standby.take_current(partition, end, STANDBY_CATCH_UP) {
                changelog.continue_sequence(partition, warm.next_sequence);
                let checked = warm.held.map_err(Unusable::Standby).and_then(|mut applied| {
                    let engine = self.engine.lock();
                    engine.check_compatible(partition, &mut applied.snapshot.task)?;
                    Ok(applied)
                });
                match checked {
                    Ok(applied) => {
                        let Applied { snapshot, base, deltas, bytes, written_ms, .. } = *applied;
                        let origin = Origin { base: base.0, base_offset: base.1, deltas, bytes, written_ms };
                        return Ok(Some((origin, snapshot, RestoreSource::Standby)));
                    }
                    Err(why) => {
                        tracing::warn!(partition, reason = %why, "the warm standby's copy is unusable: reading the changelog")
                    }
                }
            } else {
                tracing::debug!(partition, end, "no current standby copy: reading the changelog");
            }
        }
        let found = changelog.read_newest(partition, usable)?;
        Ok(found.map(|(recovered, snapshot)| (Origin::of(&recovered), snapshot, RestoreSource::Changelog)))
    }

    /// Revoke: snapshots the tasks that came with the revoked impressions partitions, commits
    /// exactly what the snapshots cover and, with a changelog, drops their state: the next
    /// owner restores it from there. Returns their input partitions, to unassign.
    fn release(&self, consumer: &BaseConsumer<Self>, impressions: &BTreeSet<i32>) -> TopicPartitionList {
        let tasks: BTreeSet<i32> =
            self.state().tasks.iter().filter(|(_, t)| impressions.contains(&t.via)).map(|(&p, _)| p).collect();
        let inputs = self.input_partitions_of(&tasks);
        let mut state = self.state();
        // At shutdown the final snapshot is already written, and nothing is `assigned` any more.
        let partitions: BTreeSet<i32> = tasks.intersection(&state.assigned).copied().collect();
        let lost = consumer.assignment_lost();
        let kind = if lost { RebalanceKind::Lost } else { RebalanceKind::Revoke };
        self.engine.lock().telemetry_mut().record_rebalance(kind, &partitions.iter().copied().collect::<Vec<_>>());
        if partitions.is_empty() {
            // Nothing of ours to write (the shutdown's final snapshot is already written).
        } else if lost {
            // A checkpoint in flight is finished (the chains move on), its offsets uncommitted.
            finish_uncommitted(&self.engine, &mut state);
            // Expelled from the group (a session timeout while this process stalled): another
            // member may already own these partitions and have written newer snapshots, which a
            // snapshot written now would supersede. Drop them unwritten; their next owner
            // re-reads from the last snapshot written while they were ours.
            tracing::warn!(
                ?partitions,
                "partitions lost (this member was expelled from the group): dropped without a snapshot"
            );
        } else {
            tracing::info!(?partitions, "partitions revoked: snapshotting and committing");
            let (engine, topics) = (&self.engine, &self.topics);
            let (mode, acknowledgment) = (CommitMode::Sync, Acknowledgment::Wait);
            checkpoint_and_commit(consumer, engine, &mut state, &partitions, topics, mode, acknowledgment, "revoke");
        }
        let mut engine = self.engine.lock();
        for &p in &tasks {
            if state.changelog.is_some() && state.assigned.contains(&p) {
                engine.remove_partition(p);
                state.positions.forget(p);
            }
            state.assigned.remove(&p);
            state.tasks.remove(&p);
        }
        inputs
    }

    /// Stops the source with an error it cannot go on after.
    fn fail(&self, state: &mut SourceState, error: ChangelogError) {
        tracing::error!(error = %error, "stopping: the partitions' state cannot be restored");
        state.fatal = Some(error);
        self.shutdown.trigger();
    }
}

/// Both input topics' partition counts, `None` if either's metadata cannot be read.
fn input_counts(consumer: &BaseConsumer<SourceContext>, topics: &[String; 2]) -> Option<[usize; 2]> {
    let mut counts = [0; 2];
    for (count, topic) in counts.iter_mut().zip(topics) {
        let metadata = consumer.fetch_metadata(Some(topic), COMMITTED_TIMEOUT).ok()?;
        *count = metadata.topics().iter().find(|t| t.name() == topic).map_or(0, |t| t.partitions().len());
    }
    if counts[0] != counts[1] && counts[0] != 0 && counts[1] != 0 {
        tracing::warn!(impressions = counts[0], engagements = counts[1], "the input topics have different partition counts: partition n of both must be one partition's state; give them the same count, or let rankpulse re-key them (repartition.mode = \"auto\")");
    }
    Some(counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(items: &[i32]) -> BTreeSet<i32> {
        items.iter().copied().collect()
    }

    #[test]
    fn tasks_follow_their_impressions_partition() {
        // Co-partitioned: the assigned impressions partitions themselves.
        assert_eq!(tasks_of(&set(&[0, 2]), [4, 4]), set(&[0, 2]));
        // More engagements partitions: 4 and 5 wrap to 0 and 1, so every one is consumed.
        assert_eq!(tasks_of(&set(&[0]), [4, 6]), set(&[0, 4]));
        assert_eq!(tasks_of(&set(&[1, 3]), [4, 6]), set(&[1, 3, 5]));
        let every: BTreeSet<i32> = (0..4).flat_map(|p| tasks_of(&set(&[p]), [4, 9])).collect();
        assert_eq!(every, (0..9).collect());
        // More impressions partitions: each is its own task.
        assert_eq!(tasks_of(&set(&[5]), [6, 4]), set(&[5]));
        // Counts unknown: the set itself.
        assert_eq!(tasks_of(&set(&[7]), [0, 0]), set(&[7]));
    }
}
