//! The Kafka source: consumes both topics and feeds the engine.
//!
//! Offset discipline (after Vector's Kafka source): auto-commit and auto-store are off; a
//! message's offset is stored only after the engine has applied it, stored offsets are committed
//! every `kafka.commit_interval`, and synchronously when partitions are revoked and at shutdown.
//! Because the engine is applied synchronously between two `recv` calls, a rebalance callback
//! (which runs inside `recv`) never sees a half-processed message.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::ClientContext;

use crate::config::KafkaConfig;
use crate::event::EventKind;
use crate::export::{Health, SharedEngine};
use crate::shutdown::Shutdown;

/// How often watermarks are recomputed when messages keep arriving, and the idle tick.
const ADVANCE_INTERVAL: Duration = Duration::from_millis(50);
const IDLE_TICK: Duration = Duration::from_millis(200);

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("creating the Kafka consumer: {0}")]
    Create(#[source] KafkaError),
    #[error("subscribing to {topics:?}: {source}")]
    Subscribe { topics: [String; 2], source: KafkaError },
}

/// Consumer callbacks: commits on revoke, readiness from assignment and broker state.
struct SourceContext {
    engine: SharedEngine,
    health: Arc<Health>,
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
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(partitions) = rebalance {
            tracing::info!(partitions = partitions.count(), "partitions revoked; committing processed offsets");
            commit(consumer, CommitMode::Sync);
        }
    }

    fn post_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(partitions) => {
                let now = tokio::time::Instant::now().into_std();
                let mut engine = self.engine.lock().unwrap_or_else(|p| p.into_inner());
                let mut numbers: Vec<i32> = partitions.elements().iter().map(|e| e.partition()).collect();
                numbers.sort_unstable();
                numbers.dedup();
                for &p in &numbers {
                    engine.assign(p, now);
                }
                tracing::info!(?numbers, "partitions assigned");
                self.health.set_ready(!numbers.is_empty());
            }
            Rebalance::Revoke(_) => self.health.set_ready(false),
            Rebalance::Error(e) => tracing::warn!(error = %e, "rebalance error"),
        }
    }
}

/// Commits stored offsets; "nothing stored yet" is not an error worth reporting.
fn commit<C: Consumer<X>, X: ConsumerContext>(consumer: &C, mode: CommitMode) {
    match consumer.commit_consumer_state(mode) {
        Ok(()) => {}
        Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => {}
        Err(e) => {
            tracing::warn!(error = %e, "offset commit failed; it is retried at the next commit")
        }
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

/// Consumes until shutdown; commits processed offsets before returning.
pub async fn run(
    cfg: &KafkaConfig,
    engine: SharedEngine,
    health: Arc<Health>,
    shutdown: Shutdown,
) -> Result<(), SourceError> {
    let context = SourceContext { engine: engine.clone(), health: health.clone() };
    let consumer: StreamConsumer<SourceContext> =
        client_config(cfg).create_with_context(context).map_err(SourceError::Create)?;
    let topics = [cfg.impressions_topic.clone(), cfg.engagements_topic.clone()];
    consumer
        .subscribe(&[topics[0].as_str(), topics[1].as_str()])
        .map_err(|source| SourceError::Subscribe { topics: topics.clone(), source })?;
    tracing::info!(brokers = %cfg.brokers, group = %cfg.group_id, ?topics, "consuming");

    let mut idle_tick = tokio::time::interval(IDLE_TICK);
    idle_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut commit_tick = tokio::time::interval(cfg.commit_interval.as_duration());
    commit_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_advance = tokio::time::Instant::now();
    let mut consecutive_errors = 0u32;

    loop {
        tokio::select! {
            biased;
            _ = shutdown.wait() => break,
            received = consumer.recv() => match received {
                Ok(message) => {
                    consecutive_errors = 0;
                    let kind = if message.topic() == topics[0] {
                        EventKind::Impression
                    } else if message.topic() == topics[1] {
                        EventKind::Engagement
                    } else {
                        continue;
                    };
                    let started = tokio::time::Instant::now();
                    {
                        let mut engine = engine.lock().unwrap_or_else(|p| p.into_inner());
                        let _ = engine.process(kind, message.partition(), message.payload().unwrap_or(&[]), started.into_std());
                        engine.record_processing_time(started.elapsed());
                        if started.duration_since(last_advance) >= ADVANCE_INTERVAL {
                            engine.advance(started.into_std());
                            last_advance = started;
                        }
                    }
                    // Only now is the message's effect in the state.
                    if let Err(e) = consumer.store_offset_from_message(&message) {
                        tracing::warn!(error = %e, "storing offset failed");
                    }
                    health.set_ready(true);
                }
                Err(e) => {
                    consecutive_errors += 1;
                    if consecutive_errors == 1 || consecutive_errors.is_power_of_two() {
                        tracing::warn!(error = %e, consecutive_errors, "consume error");
                    }
                    // Let a broken connection recover without spinning.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            _ = idle_tick.tick() => {
                let now = tokio::time::Instant::now();
                engine.lock().unwrap_or_else(|p| p.into_inner()).advance(now.into_std());
                last_advance = now;
            }
            _ = commit_tick.tick() => commit(&consumer, CommitMode::Async),
        }
    }

    tracing::info!("stopping the consumer; committing processed offsets");
    commit(&consumer, CommitMode::Sync);
    consumer.unsubscribe();
    health.set_ready(false);
    Ok(())
}
