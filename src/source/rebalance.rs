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

use super::changelog::ChangelogError;
use super::commit::{checkpoint_and_commit, PartitionSnapshot, SourceState};
use super::handoff::Handoff;
use crate::checkpoint;
use crate::engine::SharedEngine;
use crate::event::EventKind;
use crate::health::Health;
use crate::kafka_log::KafkaLog;
use crate::shutdown::Shutdown;

/// How long an assignment may wait for the topics' metadata.
const COMMITTED_TIMEOUT: Duration = Duration::from_secs(10);

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
        let cooperative = matches!(consumer.rebalance_protocol(), RebalanceProtocol::Cooperative);
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                self.position_assignment(consumer, tpl);
                let assigned = if cooperative { consumer.incremental_assign(tpl) } else { consumer.assign(tpl) };
                if let Err(e) = assigned {
                    tracing::error!(error = %e, "assigning partitions failed");
                }
                self.health.set_ready(tpl.count() > 0);
                // The group coordinator answered: the cluster is back, even on idle topics.
                self.log.recovered("partitions were assigned");
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                self.release(consumer, tpl);
                let released = if cooperative { consumer.incremental_unassign(tpl) } else { consumer.unassign() };
                if let Err(e) = released {
                    tracing::error!(error = %e, "unassigning partitions failed");
                }
                self.health.set_ready(false);
            }
            other => tracing::error!(error = ?other, "rebalance error"),
        }
    }
}

fn partitions_of(tpl: &TopicPartitionList) -> BTreeSet<i32> {
    tpl.elements().iter().map(|e| e.partition()).collect()
}

impl SourceContext {
    /// Restores each assigned partition from its newest changelog snapshot and starts it at
    /// that snapshot's offsets; a partition without one starts empty from the group's offsets.
    fn position_assignment(&self, consumer: &BaseConsumer<Self>, tpl: &mut TopicPartitionList) {
        let partitions = partitions_of(tpl);
        tracing::debug!(?partitions, "assignment: restoring the partitions");
        let mut state = self.state();
        if let Some(changelog) = state.changelog.as_mut() {
            let needed = input_partitions(consumer, &self.topics).max(partitions.last().map_or(0, |&p| p as usize + 1));
            if let Err(e) = changelog.ensure_topics(needed) {
                return self.fail(&mut state, e);
            }
        }
        for &p in &partitions {
            let started = Instant::now();
            let restored = match state.changelog.as_mut() {
                None => None,
                Some(changelog) => match changelog.read_newest(p, |recovered| {
                    let mut snapshot: PartitionSnapshot =
                        checkpoint::decode(&recovered.bytes).map_err(|e| e.to_string())?;
                    self.engine.lock().check_compatible(p, &mut snapshot.task).map_err(|e| e.to_string())?;
                    Ok(snapshot)
                }) {
                    Ok(found) => found,
                    Err(e) => return self.fail(&mut state, e),
                },
            };
            let mut engine = self.engine.lock();
            match restored {
                Some((recovered, snapshot)) => {
                    let pending = snapshot.task.pending_impressions();
                    let positions = snapshot.positions;
                    if let Err(e) = engine.restore_partition(p, snapshot.task, Instant::now()) {
                        // Checked while reading: only a bug gets here.
                        tracing::error!(partition = p, error = %e, "restoring the partition failed");
                    }
                    for kind in EventKind::ALL {
                        if let Some(offset) = positions[kind.index()] {
                            let _ = tpl.set_partition_offset(&self.topics[kind.index()], p, Offset::Offset(offset));
                        }
                    }
                    state.positions.set(p, positions);
                    tracing::info!(
                        partition = p,
                        snapshot = recovered.id.sequence,
                        changelog_offset = recovered.offset,
                        bytes = recovered.bytes.len(),
                        pending,
                        took_ms = started.elapsed().as_millis() as u64,
                        ?positions,
                        "partition restored from the changelog"
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
            state.assigned.insert(p);
        }
        tracing::info!(?partitions, "partitions assigned");
    }

    /// Revoke: snapshots the revoked partitions, commits exactly what the snapshots cover and,
    /// with a changelog, drops their state: the next owner restores it from there.
    fn release(&self, consumer: &BaseConsumer<Self>, tpl: &TopicPartitionList) {
        let mut state = self.state();
        let partitions: BTreeSet<i32> = partitions_of(tpl).intersection(&state.assigned).copied().collect();
        if consumer.assignment_lost() {
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
            checkpoint_and_commit(consumer, engine, &mut state, &partitions, topics, CommitMode::Sync, "revoke");
        }
        let mut engine = self.engine.lock();
        for &p in &partitions {
            if state.changelog.is_some() {
                engine.remove_partition(p);
                state.positions.forget(p);
            }
            state.assigned.remove(&p);
        }
    }

    /// Stops the source with an error it cannot go on after.
    fn fail(&self, state: &mut SourceState, error: ChangelogError) {
        tracing::error!(error = %error, "stopping: the partitions' state cannot be restored");
        state.fatal = Some(error);
        self.shutdown.trigger();
    }
}

/// The most partitions either input topic has (0 if the metadata cannot be read).
fn input_partitions(consumer: &BaseConsumer<SourceContext>, topics: &[String; 2]) -> usize {
    let mut most = 0;
    let mut counts = Vec::new();
    for topic in topics {
        if let Ok(metadata) = consumer.fetch_metadata(Some(topic), COMMITTED_TIMEOUT) {
            let n = metadata.topics().iter().find(|t| t.name() == topic).map_or(0, |t| t.partitions().len());
            counts.push(n);
            most = most.max(n);
        }
    }
    if counts.len() == 2 && counts[0] != counts[1] {
        tracing::warn!(impressions = counts[0], engagements = counts[1], "the input topics have different partition counts: partition n of both must be one partition's state; give them the same count, or let rankpulse re-key them (repartition.mode = \"auto\")");
    }
    most
}
