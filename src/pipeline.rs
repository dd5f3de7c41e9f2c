//! The daemon's wiring: the HTTP endpoint, the A/B publisher and the Kafka source (which
//! restores each partition's state from the changelog as it is assigned), all stopped by the one shutdown signal. `serve` runs it
//! against real brokers, `demo` against its in-process cluster.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::config::Config;
use crate::engine::SharedEngine;
use crate::health::Health;
use crate::output::page::PageSettings;
use crate::output::{HttpSecurity, HttpServer, Publisher};
use crate::shutdown::Shutdown;
use crate::source::{self, Durability};

/// How long the HTTP server may take to finish in-flight scrapes after shutdown.
const HTTP_DRAIN: Duration = Duration::from_secs(3);

/// The Avro and Protobuf schemas at start: a local schema that does not load, or a registry
/// whose credentials cannot be read, stops the start; a registry that does not answer only
/// warns, because ids are fetched when first seen and the registry may be back by then.
pub fn check_schemas(schemas: &crate::schemas::Schemas) -> anyhow::Result<()> {
    match schemas.check() {
        Ok(report) => {
            for line in report {
                tracing::info!("{line}");
            }
            Ok(())
        }
        Err(e @ crate::schemas::SchemaError::Unreachable(_)) => {
            tracing::warn!("{e}; starting anyway: schema ids are fetched when first seen");
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// Serves HTTP and consumes until `shutdown` fires (or the source fails), then drains.
/// Without `durability` (the demo) nothing is snapshotted and offsets are committed every
/// `state.checkpoint_interval`.
pub async fn run(
    cfg: &Config,
    engine: SharedEngine,
    shutdown: Shutdown,
    durability: Option<Durability>,
) -> anyhow::Result<()> {
    let health = Arc::new(Health::default());
    let schemas = engine.lock().preparer().decoders().schemas().cloned();
    if let Some(schemas) = &schemas {
        schemas.spawn_probe(shutdown.clone());
    }
    let addr = cfg.listen_addr()?;
    let security = HttpSecurity::load(&cfg.http)?;
    let (scheme, protection) = (security.scheme(), security.describe());
    let page = PageSettings::from_config(cfg, engine.lock().layout());
    let http = HttpServer::start(addr, security, page, engine.clone(), health.clone(), shutdown.clone())
        .await
        .with_context(|| format!("binding the metrics endpoint to {addr} (http.listen)"))?;
    let addr = http.local_addr;
    tracing::info!("metrics on {scheme}://{addr}/metrics, the experiment page on {scheme}://{addr}/ ({protection})");
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
