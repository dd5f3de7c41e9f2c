//! `rankpulse serve`: the daemon. Also the pipeline that `demo` runs against its own cluster.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;

use crate::config::Config;
use crate::engine::Engine;
use crate::export::{Health, HttpServer, SharedEngine};
use crate::shutdown::Shutdown;
use crate::source;

/// How long the HTTP server may take to finish in-flight scrapes after shutdown.
const HTTP_DRAIN: Duration = Duration::from_secs(3);

pub fn run(config: &Path) -> anyhow::Result<()> {
    let cfg = Config::load(Some(config))?;
    super::runtime()?.block_on(async {
        let shutdown = Shutdown::new();
        shutdown.on_signals();
        let engine = Arc::new(Mutex::new(Engine::new(&cfg)));
        run_pipeline(&cfg, engine, shutdown).await
    })
}

/// Serves HTTP and consumes until `shutdown` fires (or the source fails), then drains.
pub async fn run_pipeline(cfg: &Config, engine: SharedEngine, shutdown: Shutdown) -> anyhow::Result<()> {
    let health = Arc::new(Health::default());
    let addr = cfg.listen_addr()?;
    let http = HttpServer::start(addr, engine.clone(), health.clone(), shutdown.clone())
        .await
        .with_context(|| format!("binding the metrics endpoint to {addr} (http.listen)"))?;
    tracing::info!("metrics on http://{}/metrics", http.local_addr);
    let consumed = source::run(&cfg.kafka, engine, health, shutdown.clone()).await;
    shutdown.trigger();
    if tokio::time::timeout(HTTP_DRAIN, http.join()).await.is_err() {
        tracing::warn!("HTTP server did not finish within {HTTP_DRAIN:?}; exiting anyway");
    }
    consumed?;
    tracing::info!("stopped");
    Ok(())
}
