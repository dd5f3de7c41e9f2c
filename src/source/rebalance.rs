//! The consumer's callbacks: positions partitions on assignment, checkpoints and commits on
//! revoke, tracks readiness. They run inside `poll`, between two messages, so they never see a
//! half-processed message.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::ClientContext;

use super::commit::{checkpoint_and_commit, SourceState};
use crate::engine::SharedEngine;
use crate::event::EventKind;
use crate::health::Health;
use crate::kafka_log::KafkaLog;

/// How long an assignment may wait for the group's committed offsets.
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
    /// The consumer's log: outages and repeated errors limited, recovery said once.
    pub log: KafkaLog,
}

impl SourceContext {
    /// The source state. Poisoning can only come from a panic on the consumer thread itself,
    /// which ends the thread and `serve` with it; taking the lock anyway keeps the remaining
    /// callbacks of that unwinding consumer from panicking a second time.
    pub fn state(&self) -> MutexGuard<'_, SourceState> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
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
    /// Sets each assigned partition's start to its checkpointed offset (unless it was consumed
    /// elsewhere meanwhile, then its stale state is finalized) and un-parks it in the engine.
    fn position_assignment(&self, consumer: &BaseConsumer<Self>, tpl: &mut TopicPartitionList) {
        let committed = committed_offsets(consumer, tpl);
        let now = Instant::now();
        let mut state = self.state();
        let mut engine = self.engine.lock();
        let partitions = partitions_of(tpl);
        for &p in &partitions {
            if let Some(ours) = state.positions.of(p) {
                let consumed_elsewhere = EventKind::ALL.iter().any(|&k| {
                    let theirs = committed.get(&(self.topics[k.index()].clone(), p));
                    matches!((ours[k.index()], theirs), (Some(o), Some(&t)) if t > o)
                });
                if consumed_elsewhere {
                    tracing::warn!(partition = p, "partition was consumed elsewhere since our checkpoint: finalizing its open impressions, continuing from the group's offsets");
                    engine.take_over(p);
                    state.positions.forget(p);
                } else {
                    for kind in EventKind::ALL {
                        if let Some(offset) = ours[kind.index()] {
                            let _ = tpl.set_partition_offset(&self.topics[kind.index()], p, Offset::Offset(offset));
                        }
                    }
                }
            }
            engine.assign(p, now);
            state.assigned.insert(p);
        }
        tracing::info!(?partitions, "partitions assigned");
    }

    /// Revoke: checkpoints, commits exactly what the checkpoint covers, and parks the revoked
    /// partitions (their state stays, frozen, in case they come back here).
    fn release(&self, consumer: &BaseConsumer<Self>, tpl: &TopicPartitionList) {
        let partitions = partitions_of(tpl);
        tracing::info!(?partitions, "partitions revoked: checkpointing and committing");
        let mut state = self.state();
        checkpoint_and_commit(consumer, &self.engine, &mut state, &self.topics, CommitMode::Sync, "revoke");
        let now = Instant::now();
        let mut engine = self.engine.lock();
        for &p in &partitions {
            engine.park(p, now);
            state.assigned.remove(&p);
        }
    }
}

/// The group's committed offsets of the assigned partitions; empty (resume from our own
/// checkpoints) when the group cannot be asked.
fn committed_offsets(consumer: &BaseConsumer<SourceContext>, tpl: &TopicPartitionList) -> HashMap<(String, i32), i64> {
    match consumer.committed_offsets(tpl.clone(), COMMITTED_TIMEOUT) {
        Ok(list) => {
            let map = list
                .elements()
                .iter()
                .filter_map(|e| match e.offset() {
                    Offset::Offset(o) => Some(((e.topic().to_string(), e.partition()), o)),
                    _ => None,
                })
                .collect();
            // A list the consumer returned must not outlive it (rd_kafka_destroy can hang on
            // one): dropped here, at once.
            drop(list);
            map
        }
        Err(e) => {
            tracing::warn!(error = %e, "reading the group's committed offsets failed; resuming from checkpoints");
            HashMap::new()
        }
    }
}
