//! The Kafka source: consumes both topics on a thread of its own and feeds the engine, whose
//! work runs on another; decoding goes to whichever of the two would wait (`handoff`).
//!
//! Offset discipline: a message's offset is recorded in [`Positions`] once the message is in the
//! engine's state, and a partition's snapshot holds its state *and* its positions. Snapshots go
//! to the changelog topic (periodically, on revoke, and at shutdown), and offsets are committed
//! to the group only after the brokers acknowledged the snapshot that covers them. On
//! assignment, a partition is restored from its newest snapshot and resumes from that
//! snapshot's offsets, not the group's: every message is in the state exactly once, whichever
//! replica owned the partition before and however it stopped.
//!
//! Partition n of both topics must be one replica's, and a rebalance should stop only the
//! partitions that move. librdkafka's cooperative-sticky assignor rebalances incrementally but
//! does not keep partition n of two topics together; the range assignor does, but only eagerly
//! (every member revokes everything at every join and leave). So, as Kafka Streams assigns
//! tasks rather than partitions, the group assigns only the impressions topic's partitions,
//! with cooperative-sticky, and each brings its *task*: the engine partition of that number,
//! whose engagements partition the rebalance callback assigns beside it by hand (an
//! engagements partition beyond the impressions topic's count goes with the one its number
//! wraps to, `rebalance::tasks_of`). Offsets of both are committed to the group as before.
//! Static membership (`kafka.group_instance_id`) keeps a restarted replica's partitions from
//! moving at all; without it, stopping sends a LeaveGroup after the final snapshot, so the
//! group rebalances at once rather than after the session timeout.
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | the consumer thread's poll loop, the client configuration |
//! | `handoff` | decoding on whichever of the consumer and engine threads would wait, the engine's work on a thread of its own, the key check; the barrier before anything reads the positions |
//! | [`changelog`] | the changelog topic: snapshots written in chunks, acknowledged, read back from the end |
//! | [`chunks`] | the chunk records of the changelog and aggregates topics and their reassembly, pure (no client), so they are fuzzed |
//! | `caught_up` | which silent inputs the brokers confirm have nothing unread: only those go idle |
//! | `aggregates` | the aggregates topic's reader: every partition's A/B sums into the experiment-wide view |
//! | [`positions`] | the next offset of every input partition in the state |
//! | [`commit`] | snapshot, then commit: the only path by which offsets reach the group |
//! | `record` | the changelog's records (a partition's snapshot, or its delta since one) and the chain of deltas a partition's state is made of |
//! | `rebalance` | assignment (restore from the changelog or the standby's copy) and revoke (snapshot, commit, drop); which tasks come with an impressions partition |
//! | `standby` | the warm standby: the changelog tailed, every partition's newest snapshot kept |

mod aggregates;
mod caught_up;
mod changelog;
pub mod chunks;
mod commit;
mod handoff;
mod positions;
mod rebalance;
pub mod record;
mod standby;
#[cfg(test)]
mod volume;

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, Message};

use crate::config::{ClientRole, KafkaClientError, KafkaConfig, StateConfig};
use crate::engine::SharedEngine;
use crate::event::{EventKind, RawMessage};
use crate::health::Health;
use crate::kafka_log::KafkaLog;
use crate::shutdown::Shutdown;
use caught_up::CaughtUp;
use changelog::Changelog;
use commit::{checkpoint_and_commit, commit_if_acknowledged, Acknowledgment, SourceState, RECORDS_DUE};
use rebalance::SourceContext;
use standby::Standby;

pub use changelog::ChangelogError;
pub use commit::encode_partition;
pub use positions::Positions;
pub use record::PartitionSnapshot;

/// How often watermarks are recomputed when messages keep arriving, and when they do not.
const ADVANCE_INTERVAL: Duration = Duration::from_millis(50);
const IDLE_TICK: Duration = Duration::from_millis(200);
/// The longest one poll waits for a message: bounds how late shutdown, the idle tick and a
/// checkpoint can be when nothing arrives.
const POLL_TIMEOUT: Duration = Duration::from_millis(100);
/// How often the consumer thread looks whether the brokers acknowledged a checkpoint in flight
/// (then commits the offsets it covers).
const ACKNOWLEDGMENT_CHECK: Duration = Duration::from_millis(10);
/// Messages between two shutdown checks while messages keep arriving (about a millisecond).
const SHUTDOWN_CHECK_EVERY: u32 = 1024;
/// The pause after a consume error, so a broken connection recovers without spinning.
const ERROR_BACKOFF: Duration = Duration::from_millis(100);

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    // The client library's error is in each message and deliberately not a `source()`: `main`
    // prints the whole chain, which would repeat it (and rdkafka's own chain repeats its code).
    #[error("creating the Kafka consumer: {0}")]
    Create(KafkaError),
    #[error("subscribing to {topics:?}: {error}")]
    Subscribe { topics: [String; 2], error: KafkaError },
    #[error("the consumer thread stopped without its final snapshot (it panicked); a restart resumes from the last snapshots")]
    ConsumerThread,
    #[error(transparent)]
    Changelog(#[from] ChangelogError),
    #[error(transparent)]
    Config(#[from] KafkaClientError),
}

/// Where and how often partitions are snapshotted; `None` in the demo, which has nothing to
/// resume and only commits.
pub struct Durability {
    /// `[state]`: the changelog topic and the snapshot interval.
    pub state: StateConfig,
}

fn client_config(cfg: &KafkaConfig) -> Result<ClientConfig, KafkaClientError> {
    let mut c = cfg.client_config(ClientRole::Consumer)?;
    // After the user's properties, so that the settings offset handling depends on always win
    // (validation refuses them in the file anyway); `auto.offset.reset` is the user's to change.
    if c.get("auto.offset.reset").is_none() {
        c.set("auto.offset.reset", "earliest");
    }
    c.set("group.id", &cfg.group_id)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        // Incremental: a rebalance revokes only the partitions that move (module documentation).
        .set("partition.assignment.strategy", "cooperative-sticky");
    if !cfg.group_instance_id.is_empty() {
        c.set("group.instance.id", &cfg.group_instance_id);
    }
    Ok(c)
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
    let log = Arc::new(KafkaLog::new("consumer", &cfg.brokers));
    let (changelog, standby, checkpoint_interval) = match durability {
        Some(Durability { state }) => {
            let (topic, aggregates_topic) =
                (state.changelog_topic(&cfg.group_id), state.aggregates_topic(&cfg.group_id));
            let runtime = tokio::runtime::Handle::current();
            let changelog = Changelog::new(
                cfg,
                (&topic, &aggregates_topic),
                state.changelog_replication_factor,
                state.compression,
                runtime,
                log.clone(),
            )?;
            // On before the first window closes: every partition's closed windows are kept for
            // the aggregates topic, and nothing but complete windows is ever published.
            engine.lock().enable_global_view(0);
            aggregates::spawn(cfg, aggregates_topic, engine.clone(), shutdown.clone(), log.clone())?;
            let standby = match state.warm_standby {
                true => Some(Standby::spawn(cfg, topic, engine.clone(), shutdown.clone(), log.clone())?),
                false => None,
            };
            (Some(changelog), standby, state.checkpoint_interval.as_duration())
        }
        None => (None, None, commit_interval),
    };
    let state = SourceState {
        positions: Positions::default(),
        assigned: BTreeSet::new(),
        tasks: Default::default(),
        counts: [0; 2],
        changelog,
        in_flight: None,
        standby,
        fatal: None,
    };
    let handoff = handoff::Handoff::start(engine.clone(), topics.clone())
        .map_err(|e| SourceError::Create(KafkaError::ClientCreation(format!("starting the engine thread: {e}"))))?;
    let context = SourceContext {
        handoff: Mutex::new(handoff),
        engine: engine.clone(),
        health: health.clone(),
        topics: topics.clone(),
        state: Mutex::new(state),
        log,
        shutdown: shutdown.clone(),
    };
    let client_config = client_config(cfg)?;
    let from_earliest = crate::config::reads_from_earliest(&client_config);
    let consumer: BaseConsumer<SourceContext> =
        client_config.create_with_context(context).map_err(SourceError::Create)?;
    // Only the impressions topic: the group assigns its partitions, and each brings the
    // engagements partition of its number (`rebalance`).
    consumer
        .subscribe(&[topics[0].as_str()])
        .map_err(|error| SourceError::Subscribe { topics: topics.clone(), error })?;
    tracing::info!(brokers = %cfg.brokers, group = %cfg.group_id, ?topics, "consuming");

    let (finished, done) = tokio::sync::oneshot::channel();
    let (left, goodbye) = tokio::sync::oneshot::channel();
    let consume = ConsumeLoop { consumer, engine, health, shutdown, topics, checkpoint_interval, from_earliest };
    std::thread::Builder::new()
        .name("rankpulse-source".into())
        .spawn(move || {
            let _ = finished.send(consume.run());
            // Closing the consumer: the last commit's reply, the revoke, the LeaveGroup.
            drop(consume);
            let _ = left.send(());
        })
        .map_err(|e| SourceError::Create(KafkaError::ClientCreation(format!("starting the consumer thread: {e}"))))?;
    // The thread reports when it has snapshotted and stopped; a dropped sender means it panicked.
    let stopped = match done.await {
        Ok(None) => Ok(()),
        Ok(Some(fatal)) => Err(fatal.into()),
        Err(_) => Err(SourceError::ConsumerThread),
    };
    if tokio::time::timeout(GOODBYE_LIMIT, goodbye).await.is_err() {
        tracing::warn!(
            limit_s = GOODBYE_LIMIT.as_secs(),
            "the consumer group did not answer the last commit and this replica's leave in time (a rebalance in \
             progress holds the coordinator's replies, or it is unreachable); stopping without waiting: the \
             changelog snapshots hold every partition's position, so nothing is lost"
        );
    }
    stopped
}

/// How long stopping waits for the consumer group's goodbye: the reply to the last commit and
/// the LeaveGroup. Both queue behind a JoinGroup the coordinator holds while a rebalance waits
/// for the other members (on librdkafka's mock cluster, for the session timeout less a
/// second), and a stop must not wait that long: the final snapshot, written before, is what a
/// partition resumes from.
const GOODBYE_LIMIT: Duration = Duration::from_secs(5);

/// Everything the consumer thread owns.
struct ConsumeLoop {
    /// Polled only by this thread, which is also where its rebalance callbacks run.
    consumer: BaseConsumer<SourceContext>,
    /// Locked here for the idle tick and the checkpoints, never across a poll (the rebalance
    /// callback locks it too); the engine thread locks it per batch.
    engine: SharedEngine,
    /// Readiness: lost on consume errors, regained with the next message.
    health: Arc<Health>,
    /// Checked between messages; the loop then checkpoints and commits one last time.
    shutdown: Shutdown,
    /// Impressions topic, engagements topic: a message's kind is the index of its topic.
    topics: [String; 2],
    /// How often the state is checkpointed and the offsets it covers committed.
    checkpoint_interval: Duration,
    /// Whether a partition without a committed offset is read from its start
    /// (`auto.offset.reset`): where an input nothing was consumed of resumes, for
    /// [`caught_up`].
    from_earliest: bool,
}

impl ConsumeLoop {
    /// Consumes until shutdown; returns the error that stopped it, if one did. Dropping the loop
    /// afterwards closes the consumer.
    fn run(&self) -> Option<ChangelogError> {
        let ConsumeLoop { consumer, engine, health, shutdown, topics, checkpoint_interval, from_earliest } = self;
        let context = consumer.context();
        let mut last_advance = Instant::now();
        let mut caught_up = CaughtUp::start(engine, *from_earliest, last_advance);
        let mut next_checkpoint = last_advance + *checkpoint_interval;
        // Set by the engine when a partition holds a record's worth of closed windows no
        // aggregates record carried yet and more wait, open, behind them (a backlog): then the
        // checkpoint, which writes the records, comes now rather than at the interval.
        let aggregates_due = engine.lock().aggregates_due();
        // A checkpoint's records were sent and their acknowledgment not yet seen: looked for
        // every `ACKNOWLEDGMENT_CHECK` (a rebalance callback may have finished it meanwhile).
        let mut awaiting_acknowledgment = false;
        let mut next_acknowledgment_check = last_advance;
        let mut consecutive_errors = 0u32;
        // Shutdown is checked before every poll that may wait, and every `SHUTDOWN_CHECK_EVERY`
        // messages while they keep arriving.
        let mut until_shutdown_check = 0u32;
        // Whether polled messages wait to be sent, as of this thread's last push or send: read
        // here rather than under the hand-off's lock before every poll. A rebalance callback's
        // barrier (which runs inside a poll) may have sent them since; then one poll that does
        // not wait comes before the next that may.
        let mut batched = false;
        // The engine thread is gone (it panicked): stop without a snapshot or commit.
        let stopped = |e: handoff::EngineStopped| {
            tracing::error!(error = %e, "stopping the consumer without a final snapshot");
            std::panic::panic_any(e)
        };
        loop {
            if until_shutdown_check == 0 {
                if shutdown.is_triggered() {
                    break;
                }
                until_shutdown_check = SHUTDOWN_CHECK_EVERY;
            }
            // With messages batched, only what is already there is taken before sending them.
            let now = match consumer.poll(if batched { Duration::ZERO } else { POLL_TIMEOUT }) {
                Some(Ok(message)) => {
                    until_shutdown_check -= 1;
                    if consecutive_errors > 0 {
                        consecutive_errors = 0;
                        health.set_ready(true);
                    }
                    // One atomic load unless an outage is being reported.
                    context.log.recovered("a message was consumed");
                    let topic = message.topic();
                    let kind = if topic == topics[0] {
                        EventKind::Impression
                    } else if topic == topics[1] {
                        EventKind::Engagement
                    } else {
                        continue;
                    };
                    let mut handoff = context.handoff();
                    let payload = message.payload().unwrap_or(&[]);
                    // Headers are looked at (a call into librdkafka) and collected only for a
                    // mapping that reads one.
                    let headers: Vec<(&str, &[u8])> = match handoff.reads_envelope().then(|| message.headers()) {
                        Some(Some(headers)) => headers.iter().filter_map(|h| Some((h.key, h.value?))).collect(),
                        _ => Vec::new(),
                    };
                    let raw = RawMessage { payload, key: message.key(), headers: &headers };
                    let pushed = handoff.push(kind, message.partition(), message.offset(), raw);
                    batched = !pushed.full;
                    if pushed.full {
                        // Offsets are recorded as the engine thread hands batches back.
                        handoff.send(&mut context.state().positions).unwrap_or_else(stopped);
                        Some(pushed.at.unwrap_or_else(Instant::now))
                    } else {
                        // A carried message reads no clock: the ticks below wait for the next reading.
                        pushed.at
                    }
                }
                Some(Err(e)) => {
                    until_shutdown_check = 0;
                    consecutive_errors += 1;
                    context.log.consume_error(&e);
                    health.set_ready(false);
                    // Let a broken connection recover without spinning.
                    std::thread::sleep(ERROR_BACKOFF);
                    Some(Instant::now())
                }
                None => {
                    until_shutdown_check = 0;
                    let mut handoff = context.handoff();
                    handoff.send(&mut context.state().positions).unwrap_or_else(stopped);
                    batched = false;
                    Some(Instant::now())
                }
            };
            let Some(now) = now else { continue };
            caught_up.round_if_due(consumer, engine, context, topics, now);
            if now - last_advance >= IDLE_TICK {
                // The engine thread advances while messages arrive; this is for when none do.
                engine.lock().advance(now);
                last_advance = now;
            }
            if awaiting_acknowledgment && now >= next_acknowledgment_check {
                let mut state = context.state();
                awaiting_acknowledgment = commit_if_acknowledged(consumer, engine, &mut state, topics);
                next_acknowledgment_check = now + ACKNOWLEDGMENT_CHECK;
            }
            // While a round is in flight the next waits for it (the consumer goes on): with
            // brokers slower than the interval, rounds come as fast as they acknowledge them.
            // A load per message; the write only when it is set.
            let due = !awaiting_acknowledgment
                && aggregates_due.load(Ordering::Relaxed)
                && aggregates_due.swap(false, Ordering::Relaxed);
            if !awaiting_acknowledgment && (now >= next_checkpoint || due) {
                if !context.barrier() {
                    stopped(handoff::EngineStopped);
                }
                let mut state = context.state();
                let assigned = state.assigned.clone();
                let occasion = if due { RECORDS_DUE } else { "interval" };
                let (mode, acknowledgment) = (CommitMode::Async, Acknowledgment::Later);
                checkpoint_and_commit(consumer, engine, &mut state, &assigned, topics, mode, acknowledgment, occasion);
                awaiting_acknowledgment = state.in_flight.is_some();
                drop(state);
                let sent = Instant::now();
                next_acknowledgment_check = sent + ACKNOWLEDGMENT_CHECK;
                next_checkpoint = sent + *checkpoint_interval;
            }
        }

        if !context.barrier() {
            stopped(handoff::EngineStopped);
        }
        context.handoff().stop();
        let mut state = consumer.context().state();
        // The demo keeps no snapshots: say only what is done.
        let last = if state.changelog.is_some() { "final snapshot and commit" } else { "final commit" };
        tracing::info!("stopping the consumer: {last}");
        let assigned = std::mem::take(&mut state.assigned);
        // Asynchronous: a commit queues behind a JoinGroup the coordinator holds during a
        // rebalance; closing the consumer waits for its reply, and stopping waits for the close
        // at most `GOODBYE_LIMIT`. The write itself is acknowledged before the commit is sent.
        let (mode, acknowledgment) = (CommitMode::Async, Acknowledgment::Wait);
        checkpoint_and_commit(consumer, engine, &mut state, &assigned, topics, mode, acknowledgment, "shutdown");
        let fatal = state.fatal.take();
        // Nothing is assigned any more as far as the revoke callback is concerned: the snapshot
        // is written, and the partitions' state stays for the demo's summary.
        drop(state);
        consumer.unsubscribe();
        health.set_ready(false);
        fatal
    }
}

/// One poll of a state-topic reader (the aggregates reader, the warm standby): the message, or
/// `None` after nothing arrived or an error, which is logged unless it is a broker outage (those
/// are the input consumer's to report, see [`crate::kafka_log::SharedLog`]) and followed by a
/// pause, so a broken connection recovers without spinning.
fn poll_state_reader<'c>(
    consumer: &'c BaseConsumer<crate::kafka_log::SharedLog>,
    timeout: Duration,
    log: &KafkaLog,
) -> Option<rdkafka::message::BorrowedMessage<'c>> {
    match consumer.poll(timeout)? {
        Ok(message) => Some(message),
        Err(e) => {
            if !crate::kafka_log::is_broker_outage(&e) {
                log.consume_error(&e);
            }
            std::thread::sleep(timeout);
            None
        }
    }
}
