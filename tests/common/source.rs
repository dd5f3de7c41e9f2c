//! The real Kafka source in-process, for tests and benchmarks that read the engine it feeds.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use rankpulse::config::KafkaConfig;
use rankpulse::engine::SharedEngine;
use rankpulse::health::Health;
use rankpulse::shutdown::Shutdown;
use rankpulse::source::Durability;

/// Runs `rankpulse::source::run` on a thread of its own until `shutdown`, on a multi-threaded
/// runtime like `serve`'s (the aggregates reader is a task of its own); the thread panics if
/// the source fails.
pub fn spawn_source(
    kafka: KafkaConfig,
    engine: SharedEngine,
    shutdown: Shutdown,
    durability: Option<Durability>,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
        let health = Arc::new(Health::default());
        rt.block_on(rankpulse::source::run(&kafka, engine, health, shutdown, durability, Duration::from_secs(5)))
            .unwrap();
    })
}
