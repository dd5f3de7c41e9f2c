//! The Kafka source: consumes both topics and feeds the engine.
//!
//! Offset discipline: the engine records each message's offset once the message is in its state,
//! so a checkpoint of the engine is the state *and* the position of every partition. Offsets are
//! committed to the group only after the checkpoint that covers them is on disk (periodically,
//! on revoke, and at shutdown). On assignment, a partition resumes from its checkpointed offsets,
//! not the group's: every message is in the state exactly once, whatever happened in between.
//! If the group committed past our checkpoint, another consumer owned the partition meanwhile;
//! our stale state for it is finalized and we continue from the group's offsets.
//!
//! Rebalance callbacks run inside `poll`, between two messages, so they never see a
//! half-processed message.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::ClientContext;

use crate::checkpoint::{self, CheckpointStore};
use crate::config::KafkaConfig;
use crate::engine::SharedEngine;
use crate::event::EventKind;
use crate::health::Health;
use crate::shutdown::Shutdown;

/// How often watermarks are recomputed when messages keep arriving, and when they do not.
const ADVANCE_INTERVAL: Duration = Duration::from_millis(50);
const IDLE_TICK: Duration = Duration::from_millis(200);
/// The longest one poll waits for a message: bounds how late shutdown, the idle tick and a
/// checkpoint can be when nothing arrives.
const POLL_TIMEOUT: Duration = Duration::from_millis(100);
/// Messages between two shutdown checks while messages keep arriving (about a millisecond).
const SHUTDOWN_CHECK_EVERY: u32 = 1024;
/// The pause after a consume error, so a broken connection recovers without spinning.
const ERROR_BACKOFF: Duration = Duration::from_millis(100);
/// How long an assignment may wait for the group's committed offsets.
const COMMITTED_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("creating the Kafka consumer: {0}")]
    Create(#[source] KafkaError),
    #[error("subscribing to {topics:?}: {source}")]
    Subscribe { topics: [String; 2], source: KafkaError },
    #[error("the consumer thread stopped without its final checkpoint (it panicked); a restart resumes from the last checkpoint")]
    ConsumerThread,
}

/// Where and how often state is checkpointed; `None` in the demo, which has nothing to resume.
pub struct Durability {
    pub store: CheckpointStore,
    pub interval: Duration,
}

type Store = Arc<Mutex<CheckpointStore>>;

/// Consumer callbacks: positions partitions on assignment, checkpoints and commits on revoke,
/// tracks readiness.
struct SourceContext {
    engine: SharedEngine,
    health: Arc<Health>,
    topics: [String; 2],
    store: Option<Store>,
}

impl ClientContext for SourceContext {
    fn error(&self, error: KafkaError, reason: &str) {
        if matches!(error.rdkafka_error_code(), Some(RDKafkaErrorCode::AllBrokersDown)) {
            self.health.set_ready(false);
        }
        tracing::warn!(%error, reason, "kafka client error");
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
    /// elsewhere meanwhile) and un-parks it in the engine.
    fn position_assignment(&self, consumer: &BaseConsumer<Self>, tpl: &mut TopicPartitionList) {
        let committed: HashMap<(String, i32), i64> = match consumer.committed_offsets(tpl.clone(), COMMITTED_TIMEOUT) {
            Ok(list) => {
                let map = list
                    .elements()
                    .iter()
                    .filter_map(|e| match e.offset() {
                        Offset::Offset(o) => Some(((e.topic().to_string(), e.partition()), o)),
                        _ => None,
                    })
                    .collect();
                drop(list);
                map
            }
            Err(e) => {
                tracing::warn!(error = %e, "reading the group's committed offsets failed; resuming from checkpoints");
                HashMap::new()
            }
        };
        let now = Instant::now();
        let mut engine = self.engine.lock();
        let partitions = partitions_of(tpl);
        for &p in &partitions {
            if let Some(ours) = engine.position(p) {
                let consumed_elsewhere = EventKind::ALL.iter().any(|&k| {
                    let theirs = committed.get(&(self.topics[k.index()].clone(), p));
                    matches!((ours[k.index()], theirs), (Some(o), Some(&t)) if t > o)
                });
                if consumed_elsewhere {
                    tracing::warn!(partition = p, "partition was consumed elsewhere since our checkpoint: finalizing its open impressions, continuing from the group's offsets");
                    engine.take_over(p);
                } else {
                    for kind in EventKind::ALL {
                        if let Some(offset) = ours[kind.index()] {
                            let _ = tpl.set_partition_offset(&self.topics[kind.index()], p, Offset::Offset(offset));
                        }
                    }
                }
            }
            engine.assign(p, now);
        }
        tracing::info!(?partitions, "partitions assigned");
    }

    /// Checkpoints, commits exactly what the checkpoint covers, and parks the revoked partitions.
    fn release(&self, consumer: &BaseConsumer<Self>, tpl: &TopicPartitionList) {
        let partitions = partitions_of(tpl);
        tracing::info!(?partitions, "partitions revoked: checkpointing and committing");
        let (encoded, positions) = {
            let engine = self.engine.lock();
            (self.store.as_ref().map(|_| checkpoint::encode(&engine)), engine.positions(false))
        };
        if let (Some(store), Some(encoded)) = (&self.store, encoded) {
            let started = std::time::Instant::now();
            let written = store.lock().unwrap_or_else(|p| p.into_inner()).write(&encoded);
            let ok = written.is_ok();
            if let Err(e) = written {
                tracing::error!(error = %e, "checkpoint on revoke failed; offsets not committed (the previous checkpoint stands)");
            }
            self.engine.lock().record_checkpoint(encoded.len() as u64, started.elapsed(), ok, started);
            if !ok {
                return self.park(&partitions);
            }
        }
        commit_positions(consumer, &self.topics, &positions, CommitMode::Sync);
        self.park(&partitions);
    }

    fn park(&self, partitions: &BTreeSet<i32>) {
        let now = Instant::now();
        let mut engine = self.engine.lock();
        for &p in partitions {
            engine.park(p, now);
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
        tracing::warn!(error = %e, "offset commit failed; the next checkpoint commits again");
    }
}

fn client_config(cfg: &KafkaConfig) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("auto.offset.reset", "earliest");
    // User properties first, so that the settings offset handling depends on always win
    // (validation refuses them in the file anyway).
    for (k, v) in &cfg.properties {
        c.set(k, v);
    }
    c.set("bootstrap.servers", &cfg.brokers)
        .set("group.id", &cfg.group_id)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false");
    c
}

/// Checkpoints the engine (when durable) and then commits the offsets it covers.
fn checkpoint_and_commit(
    consumer: &BaseConsumer<SourceContext>,
    engine: &SharedEngine,
    store: Option<&Store>,
    topics: &[String; 2],
    mode: CommitMode,
) {
    let (encoded, positions) = {
        let engine = engine.lock();
        (store.map(|_| checkpoint::encode(&engine)), engine.positions(false))
    };
    if let (Some(store), Some(encoded)) = (store, encoded) {
        let started = Instant::now();
        let written = store.lock().unwrap_or_else(|p| p.into_inner()).write(&encoded);
        let ok = written.is_ok();
        if let Err(e) = written {
            tracing::error!(error = %e, "checkpoint failed; offsets not committed (the previous checkpoint stands)");
        }
        engine.lock().record_checkpoint(encoded.len() as u64, started.elapsed(), ok, started);
        if !ok {
            return;
        }
    }
    commit_positions(consumer, topics, &positions, mode);
}

/// Consumes until shutdown; checkpoints and commits before returning.
///
/// The consumer runs on a thread of its own: polling librdkafka is a blocking call, and a
/// dedicated thread polls it directly, without an async wake-up, a `select!` over timers and a
/// shutdown future per message.
pub async fn run(
    cfg: &KafkaConfig,
    engine: SharedEngine,
    health: Arc<Health>,
    shutdown: Shutdown,
    durability: Option<Durability>,
    commit_interval: Duration,
) -> Result<(), SourceError> {
    let topics = [cfg.impressions_topic.clone(), cfg.engagements_topic.clone()];
    let (store, checkpoint_interval) = match durability {
        Some(d) => (Some(Arc::new(Mutex::new(d.store))), d.interval),
        None => (None, commit_interval),
    };
    let context =
        SourceContext { engine: engine.clone(), health: health.clone(), topics: topics.clone(), store: store.clone() };
    let consumer: BaseConsumer<SourceContext> =
        client_config(cfg).create_with_context(context).map_err(SourceError::Create)?;
    consumer
        .subscribe(&[topics[0].as_str(), topics[1].as_str()])
        .map_err(|source| SourceError::Subscribe { topics: topics.clone(), source })?;
    tracing::info!(brokers = %cfg.brokers, group = %cfg.group_id, ?topics, "consuming");

    let (finished, done) = tokio::sync::oneshot::channel();
    let consume = ConsumeLoop { consumer, engine, health, shutdown, store, topics, checkpoint_interval };
    std::thread::Builder::new()
        .name("rankpulse-source".into())
        .spawn(move || {
            consume.run();
            let _ = finished.send(());
        })
        .map_err(|e| SourceError::Create(KafkaError::ClientCreation(format!("starting the consumer thread: {e}"))))?;
    // The thread reports when it has checkpointed and stopped; a dropped sender means it panicked.
    done.await.map_err(|_| SourceError::ConsumerThread)
}

/// Everything the consumer thread owns.
struct ConsumeLoop {
    /// Polled only by this thread, which is also where its rebalance callbacks run.
    consumer: BaseConsumer<SourceContext>,
    /// Locked per message, never across a poll (the rebalance callback locks it too).
    engine: SharedEngine,
    /// Readiness: lost on consume errors, regained with the next message.
    health: Arc<Health>,
    /// Checked between messages; the loop then checkpoints and commits one last time.
    shutdown: Shutdown,
    /// Where checkpoints go; `None` in the demo, which only commits.
    store: Option<Store>,
    /// Impressions topic, engagements topic: a message's kind is the index of its topic.
    topics: [String; 2],
    /// How often the state is checkpointed and the offsets it covers committed.
    checkpoint_interval: Duration,
}

impl ConsumeLoop {
    fn run(self) {
        let ConsumeLoop { consumer, engine, health, shutdown, store, topics, checkpoint_interval } = &self;
        let mut last_advance = Instant::now();
        let mut next_checkpoint = last_advance + *checkpoint_interval;
        let mut consecutive_errors = 0u32;
        // Shutdown is checked before every poll that may wait, and every `SHUTDOWN_CHECK_EVERY`
        // messages while they keep arriving.
        let mut until_shutdown_check = 0u32;
        loop {
            if until_shutdown_check == 0 {
                if shutdown.is_triggered() {
                    break;
                }
                until_shutdown_check = SHUTDOWN_CHECK_EVERY;
            }
            let now = match consumer.poll(POLL_TIMEOUT) {
                Some(Ok(message)) => {
                    until_shutdown_check -= 1;
                    if consecutive_errors > 0 {
                        consecutive_errors = 0;
                        health.set_ready(true);
                    }
                    let topic = message.topic();
                    let kind = if topic == topics[0] {
                        EventKind::Impression
                    } else if topic == topics[1] {
                        EventKind::Engagement
                    } else {
                        continue;
                    };
                    let started = Instant::now();
                    let mut engine = engine.lock();
                    let _ = engine.process(kind, message.partition(), message.payload().unwrap_or(&[]), started);
                    // Only now is the message's effect in the state.
                    engine.consumed(kind, message.partition(), message.offset());
                    let finished = Instant::now();
                    engine.record_processing_time(finished - started);
                    if finished - last_advance >= ADVANCE_INTERVAL {
                        engine.advance(finished);
                        last_advance = finished;
                    }
                    finished
                }
                Some(Err(e)) => {
                    until_shutdown_check = 0;
                    consecutive_errors += 1;
                    if consecutive_errors == 1 || consecutive_errors.is_power_of_two() {
                        tracing::warn!(error = %e, consecutive_errors, "consume error");
                    }
                    health.set_ready(false);
                    // Let a broken connection recover without spinning.
                    std::thread::sleep(ERROR_BACKOFF);
                    Instant::now()
                }
                None => {
                    until_shutdown_check = 0;
                    Instant::now()
                }
            };
            if now - last_advance >= IDLE_TICK {
                engine.lock().advance(now);
                last_advance = now;
            }
            if now >= next_checkpoint {
                checkpoint_and_commit(consumer, engine, store.as_ref(), topics, CommitMode::Async);
                next_checkpoint = Instant::now() + *checkpoint_interval;
            }
        }

        tracing::info!("stopping the consumer: final checkpoint and commit");
        checkpoint_and_commit(consumer, engine, store.as_ref(), topics, CommitMode::Sync);
        consumer.unsubscribe();
        health.set_ready(false);
    }
}
