//! The daemon's wiring: the state restored (or started empty), the HTTP endpoint, the A/B
//! publisher and the Kafka source, all stopped by the one shutdown signal. `serve` runs it
//! against real brokers, `demo` against its in-process cluster.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::checkpoint::CheckpointStore;
use crate::config::Config;
use crate::engine::{Engine, SharedEngine};
use crate::health::Health;
use crate::output::{HttpServer, Publisher};
use crate::shutdown::Shutdown;
use crate::source::{self, Checkpoint, Durability, Positions};

/// How long the HTTP server may take to finish in-flight scrapes after shutdown.
const HTTP_DRAIN: Duration = Duration::from_secs(3);

/// The engine and positions of the newest checkpoint in `state.dir`, or an empty engine when
/// there is none; with the store to keep checkpointing into.
pub fn restore(cfg: &Config) -> anyhow::Result<(Engine, Durability)> {
    let store = CheckpointStore::open(&cfg.state.dir, cfg.state.keep_checkpoints)?;
    let (engine, positions) = match store.load_latest::<Checkpoint>()? {
        Some((path, checkpoint)) => {
            let engine =
                Engine::restore(cfg, checkpoint.engine).with_context(|| format!("restoring {}", path.display()))?;
            tracing::info!(checkpoint = %path.display(), pending = engine.pending_impressions(), "state restored");
            (engine, checkpoint.positions)
        }
        None => {
            tracing::info!(dir = %store.dir().display(), "no checkpoint: starting with empty state");
            (Engine::new(cfg), Positions::default())
        }
    };
    Ok((engine, Durability { store, interval: cfg.state.checkpoint_interval.as_duration(), positions }))
}

/// Serves HTTP and consumes until `shutdown` fires (or the source fails), then drains.
/// Without `durability` (the demo) nothing is checkpointed and offsets are committed every
/// `state.checkpoint_interval`.
pub async fn run(
    cfg: &Config,
    engine: SharedEngine,
    shutdown: Shutdown,
    durability: Option<Durability>,
) -> anyhow::Result<()> {
    let health = Arc::new(Health::default());
    let addr = cfg.listen_addr()?;
    let http = HttpServer::start(addr, engine.clone(), health.clone(), shutdown.clone())
        .await
        .with_context(|| format!("binding the metrics endpoint to {addr} (http.listen)"))?;
    tracing::info!("metrics on http://{}/metrics", http.local_addr);
    let interval = cfg.state.checkpoint_interval.as_duration();
    let publisher = match cfg.ab.output_topic.as_str() {
        "" => None,
        topic => {
            let publisher = Publisher::new(&cfg.kafka, topic)?;
            Some(tokio::spawn(publisher.run(engine.clone(), shutdown.clone())))
        }
    };
    let consumed = source::run(&cfg.kafka, engine, health, shutdown.clone(), durability, interval).await;
    shutdown.trigger();
    if let Some(publisher) = publisher {
        if let Err(e) = publisher.await {
            tracing::error!(error = %e, "the A/B publisher task failed");
        }
    }
    if tokio::time::timeout(HTTP_DRAIN, http.join()).await.is_err() {
        tracing::warn!("HTTP server did not finish within {HTTP_DRAIN:?}; exiting anyway");
    }
    consumed?;
    tracing::info!("stopped");
    Ok(())
}
