//! The A/B output topic: one JSON record per experiment and closed window.
//!
//! Closed windows wait in the engine's state (and so in its checkpoints) until every record of
//! theirs is acknowledged by the brokers; only then are they forgotten. A crash between delivery
//! and the next checkpoint publishes them again after the restart, under the same record id
//! (`experiment/window/start`, also the message key), so consumers deduplicate by id: delivery
//! is at least once, the content of a record never changes.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::producer::{FutureProducer, FutureRecord};

use crate::config::{ClientRole, KafkaClientError, KafkaConfig};
use crate::engine::{Engine, SharedEngine};
use crate::experiments::Span;
use crate::kafka_log::{KafkaLog, ProducerLog};
use crate::shutdown::Shutdown;
use crate::time::EventTime;

/// How often closed windows are looked for; windows close at most once a minute in practice.
const PUBLISH_INTERVAL: Duration = Duration::from_secs(1);
/// How long one record may wait for the brokers before the batch is retried later; also the
/// producer's `message.timeout.ms`.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(30);
/// On shutdown, how long the last publication may take.
const FINAL_FLUSH: Duration = Duration::from_secs(5);

/// The A/B output topic cannot be served: `serve` stops at start-up rather than run without it.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The client library's reason. In the message and deliberately not a `source()`, which
    /// `main` would print a second time.
    #[error("cannot create the producer for ab.output_topic: {0}")]
    Create(rdkafka::error::KafkaError),
    /// A `[kafka]` property or secret the producer cannot be configured with.
    #[error(transparent)]
    Config(#[from] KafkaClientError),
}

/// The producer of the A/B output topic.
pub struct Publisher {
    /// Idempotent, so a retried batch does not duplicate records within one producer session.
    producer: FutureProducer<ProducerLog>,
    /// `ab.output_topic`.
    topic: String,
    /// The producer's log, also held here: deliveries resolve as futures in this module, not
    /// in the producer's context, so a delivered record ends an outage from here.
    log: Arc<KafkaLog>,
}

impl Publisher {
    /// A producer with the `[kafka]` brokers and properties (security settings apply to it too).
    pub fn new(kafka: &KafkaConfig, topic: &str) -> Result<Publisher, PublishError> {
        let mut config = kafka.client_config(ClientRole::Producer)?;
        let context = ProducerLog::new("A/B producer", &kafka.brokers);
        let log = context.log.clone();
        let producer = config
            .set("message.timeout.ms", DELIVERY_TIMEOUT.as_millis().to_string())
            .set("enable.idempotence", "true")
            .create_with_context(context)
            .map_err(PublishError::Create)?;
        Ok(Publisher { producer, topic: topic.to_string(), log })
    }

    /// Publishes closed windows until `shutdown`, then makes one last attempt.
    pub async fn run(self, engine: SharedEngine, shutdown: Shutdown) {
        run(&self.producer, &self.topic, &engine, &self.log, shutdown).await
    }
}

/// A window by (size index, start), as [`Engine::published`] takes it.
type WindowKey = (usize, EventTime);

/// The A/B records of the closed windows not yet published: (record id, JSON) per experiment
/// and window, and the (size index, start) of the windows they cover, to pass to
/// [`Engine::published`] once every record is delivered (windows closing or dropped in the
/// meantime leave the others as they are).
pub fn unpublished_records(engine: &Engine) -> (Vec<(String, String)>, Vec<WindowKey>) {
    let closed = engine.kept_closed();
    let mut records = Vec::new();
    for window in closed {
        let span = Span::Window {
            label: engine.window_label(window.size_index),
            start: window.start,
            size_ms: engine.window_size_ms(window.size_index),
        };
        for report in engine.experiment_reports(&window.groups, span) {
            let json = serde_json::to_string(&report).expect("reports always serialize");
            records.push((report.id, json));
        }
    }
    (records, closed.iter().map(|w| (w.size_index, w.start)).collect())
}

async fn run(
    producer: &FutureProducer<ProducerLog>,
    topic: &str,
    engine: &SharedEngine,
    log: &KafkaLog,
    shutdown: Shutdown,
) {
    tracing::info!(%topic, "publishing the A/B feed of every closed window");
    let mut tick = tokio::time::interval(PUBLISH_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => publish_pending(producer, topic, engine, log).await,
            _ = shutdown.wait() => break,
        }
    }
    if tokio::time::timeout(FINAL_FLUSH, publish_pending(producer, topic, engine, log)).await.is_err() {
        tracing::warn!(%topic, "A/B records still unpublished at shutdown: they are in the checkpoint and go out after the restart");
    }
}

/// Sends every record of the unpublished windows; forgets the windows only if all arrived.
async fn publish_pending(producer: &FutureProducer<ProducerLog>, topic: &str, engine: &SharedEngine, log: &KafkaLog) {
    let (records, windows) = unpublished_records(&engine.lock());
    if windows.is_empty() {
        return;
    }
    // Enqueue everything first, then wait: the records travel in as few requests as possible.
    let mut deliveries = Vec::with_capacity(records.len());
    for (id, json) in &records {
        match producer.send_result(FutureRecord::to(topic).key(id.as_str()).payload(json.as_str())) {
            Ok(delivery) => deliveries.push(delivery),
            Err((error, _)) => {
                if let Some(repeated) = log.admit("A/B record not enqueued", &error) {
                    tracing::warn!(%topic, %error, "A/B record not enqueued; retrying{repeated}");
                }
                engine.lock().publish_failed();
                return;
            }
        }
    }
    let mut failed = 0usize;
    for delivery in deliveries {
        match delivery.await {
            Ok(Ok(_)) => log.recovered("an A/B record was delivered"),
            Ok(Err((error, _))) => {
                failed += 1;
                if let Some(repeated) = log.admit("A/B record not delivered", &error) {
                    tracing::warn!(%topic, %error, "A/B record not delivered; retrying{repeated}");
                }
            }
            Err(_cancelled) => failed += 1,
        }
    }
    if failed > 0 {
        engine.lock().publish_failed();
        return;
    }
    engine.lock().published(&windows);
    tracing::debug!(%topic, records = records.len(), windows = windows.len(), "A/B records published");
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::config::Config;
    use crate::event::EventKind;

    /// Impressions of experiment `x` in the first two minutes and of `y` in the first only,
    /// half control, half treatment; no engagements.
    fn engine_with_two_closed_windows() -> Engine {
        let toml = "[metrics]\nwindows = [\"1m\"]\n[ab]\noutput_topic = \"ab\"\n";
        let cfg = Config::from_toml_with_env(toml, "test", std::iter::empty()).unwrap();
        let mut e = Engine::new(&cfg).without_past_limit();
        let now = Instant::now();
        let mut feed = |query: String, timestamp: i64, experiment: &str, variant: &str| {
            let payload = format!(
                r#"{{"query_id":"{query}","timestamp":{timestamp},"results":["a"],"experiment":"{experiment}","variant":"{variant}"}}"#
            );
            e.process(EventKind::Impression, 0, payload.as_bytes(), now).unwrap();
        };
        for i in 0..6 {
            let variant = if i % 2 == 0 { "control" } else { "treatment" };
            feed(format!("x{i}"), 1_000 + i, "x", variant);
            feed(format!("y{i}"), 2_000 + i, "y", variant);
            feed(format!("later{i}"), 61_000 + i, "x", variant);
        }
        e.finish();
        e
    }

    #[test]
    fn one_record_per_experiment_and_closed_window_keyed_by_its_id() {
        let e = engine_with_two_closed_windows();
        let (records, windows) = unpublished_records(&e);
        assert_eq!(windows, [(0, 0), (0, 60_000)]);
        let ids: Vec<&str> = records.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, ["x/1m/1970-01-01T00:00:00Z", "y/1m/1970-01-01T00:00:00Z", "x/1m/1970-01-01T00:01:00Z"]);
        for (id, json) in &records {
            let record: serde_json::Value = serde_json::from_str(json).unwrap();
            assert_eq!(record["id"], id.as_str(), "the key is the record's id");
            assert_eq!(record["window"], "1m");
            assert_eq!(record["control"], "control");
            let impressions: Vec<(&str, u64)> = record["variants"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| (v["variant"].as_str().unwrap(), v["impressions"].as_u64().unwrap()))
                .collect();
            assert_eq!(impressions, [("control", 3), ("treatment", 3)], "{id}");
        }
        let first: serde_json::Value = serde_json::from_str(&records[0].1).unwrap();
        assert_eq!((first["experiment"].as_str(), first["start"].as_str()), (Some("x"), Some("1970-01-01T00:00:00Z")));
        assert_eq!(first["end"], "1970-01-01T00:01:00Z");
    }

    #[test]
    fn published_windows_are_forgotten_oldest_first_and_the_rest_are_unchanged() {
        let mut e = engine_with_two_closed_windows();
        let (records, windows) = unpublished_records(&e);
        e.published(&windows[..1]);
        assert_eq!(
            unpublished_records(&e),
            (records[2..].to_vec(), windows[1..].to_vec()),
            "the second window, byte for byte"
        );
        e.published(&windows[1..]);
        assert_eq!(unpublished_records(&e), (Vec::new(), Vec::new()));
    }
}
