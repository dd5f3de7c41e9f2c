//! The A/B output topic: one JSON record per experiment and closed window.
//!
//! Closed windows wait in the engine's state (and so in its checkpoints) until every record of
//! theirs is acknowledged by the brokers; only then are they forgotten. A crash between delivery
//! and the next checkpoint publishes them again after the restart, under the same record id
//! (`experiment/window/start`, also the message key), so consumers deduplicate by id: delivery
//! is at least once, the content of a record never changes.

use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord};

use crate::config::KafkaConfig;
use crate::engine::SharedEngine;
use crate::shutdown::Shutdown;

/// How often closed windows are looked for; windows close at most once a minute in practice.
const PUBLISH_INTERVAL: Duration = Duration::from_secs(1);
/// How long one record may wait for the brokers before the batch is retried later; also the
/// producer's `message.timeout.ms`.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(30);
/// On shutdown, how long the last publication may take.
const FINAL_FLUSH: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
#[error("cannot create the producer for ab.output_topic: {0}")]
pub struct PublishError(#[from] rdkafka::error::KafkaError);

/// The producer of the A/B output topic.
pub struct Publisher {
    producer: FutureProducer,
    /// `ab.output_topic`.
    topic: String,
}

impl Publisher {
    /// A producer with the `[kafka]` brokers and properties (security settings apply to it too).
    pub fn new(kafka: &KafkaConfig, topic: &str) -> Result<Publisher, PublishError> {
        let mut config = ClientConfig::new();
        for (k, v) in &kafka.properties {
            config.set(k, v);
        }
        let producer = config
            .set("bootstrap.servers", &kafka.brokers)
            .set("message.timeout.ms", DELIVERY_TIMEOUT.as_millis().to_string())
            .set("enable.idempotence", "true")
            .create()?;
        Ok(Publisher { producer, topic: topic.to_string() })
    }

    /// Publishes closed windows until `shutdown`, then makes one last attempt.
    pub async fn run(self, engine: SharedEngine, shutdown: Shutdown) {
        run(&self.producer, &self.topic, &engine, shutdown).await
    }
}

async fn run(producer: &FutureProducer, topic: &str, engine: &SharedEngine, shutdown: Shutdown) {
    tracing::info!(%topic, "publishing the A/B feed of every closed window");
    let mut tick = tokio::time::interval(PUBLISH_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => publish_pending(producer, topic, engine).await,
            _ = shutdown.wait() => break,
        }
    }
    if tokio::time::timeout(FINAL_FLUSH, publish_pending(producer, topic, engine)).await.is_err() {
        tracing::warn!(%topic, "A/B records still unpublished at shutdown: they are in the checkpoint and go out after the restart");
    }
}

/// Sends every record of the unpublished windows; forgets the windows only if all arrived.
async fn publish_pending(producer: &FutureProducer, topic: &str, engine: &SharedEngine) {
    let (records, windows) = engine.lock().unpublished_records();
    if windows == 0 {
        return;
    }
    // Enqueue everything first, then wait: the records travel in as few requests as possible.
    let mut deliveries = Vec::with_capacity(records.len());
    for (id, json) in &records {
        match producer.send_result(FutureRecord::to(topic).key(id.as_str()).payload(json.as_str())) {
            Ok(delivery) => deliveries.push(delivery),
            Err((error, _)) => {
                tracing::warn!(%topic, %error, "A/B record not enqueued; retrying");
                return;
            }
        }
    }
    let mut failed = 0usize;
    for delivery in deliveries {
        match delivery.await {
            Ok(Ok(_)) => {}
            Ok(Err((error, _))) => {
                failed += 1;
                tracing::warn!(%topic, %error, "A/B record not delivered; retrying");
            }
            Err(_cancelled) => failed += 1,
        }
    }
    if failed > 0 {
        return;
    }
    engine.lock().published(windows);
    tracing::debug!(%topic, records = records.len(), windows, "A/B records published");
}
