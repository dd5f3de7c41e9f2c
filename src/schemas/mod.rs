//! Avro and Protobuf schemas: fetched from a Confluent-compatible Schema Registry by id and
//! cached for the process's life (an id's schema never changes), or loaded from local files.
//!
//! A registry outage does not stop the consumption of ids already cached: nothing is asked of
//! the registry for them. An id not cached yet is fetched on the decoding thread (one request,
//! bounded by `schema_registry.timeout`); if the registry cannot answer, messages of that id are
//! rejected as `schema_unavailable` and the id is retried after `schema_registry.retry_interval`,
//! so an outage costs one timeout per interval, not one per message (an id the registry does
//! not know is likewise rejected as `unknown_schema` and asked for again after the interval). A
//! probe
//! ([`Schemas::spawn_probe`]) keeps the registry's state current for `/readyz` and
//! `rankpulse_schema_registry_up` while every id in use is cached.
//!
//! | file | does |
//! |---|---|
//! | `mod.rs` | [`Schemas`]: the cache, the local files, the registry's health and counters |
//! | `registry.rs` | the registry's REST API over HTTP(S), with its credentials |
//! | `compile.rs` | a schema's text (and its references) into an Avro schema or a Protobuf file |
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]

mod compile;
mod registry;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::{Duration, Instant};

use crate::config::{Config, LocalSchema};
use crate::shutdown::Shutdown;
pub use compile::Schema;
use registry::Registry;

/// Which input a local schema is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input {
    Impressions = 0,
    Engagements = 1,
}

/// Why a schema is not available.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SchemaError {
    /// The configuration's files or secrets could not be read.
    #[error("schema setup: {0}")]
    Setup(String),
    /// The registry could not be asked (down, refused, timed out, unauthorized).
    #[error("schema registry unreachable: {0}")]
    Unreachable(String),
    /// The registry does not know the id (or a reference).
    #[error("unknown schema: {0}")]
    NotFound(String),
    /// The schema is there but is not one rankpulse can read.
    #[error("unusable schema: {0}")]
    Invalid(String),
}

/// A fetch's outcome, the `outcome` label of `rankpulse_schema_fetches_total`.
#[derive(Debug, Clone, Copy)]
pub enum Outcome {
    Fetched = 0,
    Unknown = 1,
    Failed = 2,
}

impl Outcome {
    pub const ALL: [Outcome; 3] = [Outcome::Fetched, Outcome::Unknown, Outcome::Failed];
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Fetched => "fetched",
            Outcome::Unknown => "unknown",
            Outcome::Failed => "failed",
        }
    }
}

/// A cached answer for one id.
#[derive(Debug, Clone)]
enum Cached {
    Ready(Arc<Schema>),
    /// Not usable: the id's schema will not change, so the answer is kept.
    Refused(SchemaError),
    /// The registry could not answer, or did not know the id (yet: a producer may have
    /// registered it with a registry replica this one has not caught up with): asked again
    /// once `until` has passed.
    Failed {
        error: SchemaError,
        until: Instant,
    },
}

/// The registry's state, as last seen.
const STATE_UNKNOWN: u8 = 0;
const STATE_UP: u8 = 1;
const STATE_DOWN: u8 = 2;

/// The schemas of both inputs.
#[derive(Debug)]
pub struct Schemas {
    /// The registry, when `schema_registry.url` is set; `Err` when its secret or CA file could
    /// not be read (every registry id is then refused with that error, and `check` reports it).
    registry: Option<Result<Registry, SchemaError>>,
    /// Schemas by registry id.
    by_id: RwLock<HashMap<u32, Cached>>,
    /// `[schemas.*]`, by input.
    local_config: [Option<LocalSchema>; 2],
    /// Each input's local schema, loaded at first use.
    local: [OnceLock<Result<Arc<Schema>, SchemaError>>; 2],
    /// `schema_registry.retry_interval`.
    retry_interval: Duration,
    /// `schema_registry.check_interval`.
    check_interval: Duration,
    /// Fetches by [`Outcome`].
    fetches: [AtomicU64; 3],
    /// The registry as last seen: unknown, up or down.
    state: AtomicU8,
}

/// What the metrics show of the schemas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchemaStats {
    /// Whether the registry answered last time it was asked; `None` without a registry or
    /// before the first request.
    pub registry_up: Option<bool>,
    /// Registry ids whose schema is cached.
    pub cached: usize,
    /// Fetches by [`Outcome`].
    pub fetches: [u64; 3],
}

impl Schemas {
    pub fn new(cfg: &Config) -> Schemas {
        // apache-avro allocates what a length in the bytes claims, up to this (its default is
        // 512 MiB): no valid message needs more than its own size many times over.
        apache_avro::util::max_allocation_bytes(cfg.limits.max_message_bytes.saturating_mul(8).max(1 << 20));
        let r = &cfg.schema_registry;
        Schemas {
            registry: (!r.url.is_empty()).then(|| Registry::new(r)),
            by_id: RwLock::new(HashMap::new()),
            local_config: [cfg.schemas.impressions.clone(), cfg.schemas.engagements.clone()],
            local: [OnceLock::new(), OnceLock::new()],
            retry_interval: r.retry_interval.as_duration(),
            check_interval: r.check_interval.as_duration(),
            fetches: Default::default(),
            state: AtomicU8::new(STATE_UNKNOWN),
        }
    }

    /// Whether `input` has a local schema (its messages are then bare, without framing).
    pub fn has_local(&self, input: Input) -> bool {
        self.local_config.get(input as usize).is_some_and(Option::is_some)
    }

    /// `input`'s local schema, loaded at the first call.
    pub fn local(&self, input: Input) -> Result<Arc<Schema>, SchemaError> {
        let (Some(Some(local)), Some(cell)) = (self.local_config.get(input as usize), self.local.get(input as usize))
        else {
            return Err(SchemaError::Setup("no local schema for this input".into()));
        };
        cell.get_or_init(|| compile::local(local).map(Arc::new)).clone()
    }

    /// The schema with this registry id: cached, or fetched now.
    pub fn by_id(&self, id: u32) -> Result<Arc<Schema>, SchemaError> {
        let cached = match self.by_id.read() {
            Ok(cache) => cache.get(&id).cloned(),
            Err(poisoned) => poisoned.into_inner().get(&id).cloned(),
        };
        match cached {
            Some(Cached::Ready(schema)) => return Ok(schema),
            Some(Cached::Refused(error)) => return Err(error),
            Some(Cached::Failed { error, until }) if Instant::now() < until => return Err(error),
            _ => {}
        }
        let answer = self.fetch(id);
        let entry = match &answer {
            Ok(schema) => Cached::Ready(schema.clone()),
            Err(error @ (SchemaError::Unreachable(_) | SchemaError::NotFound(_))) => {
                Cached::Failed { error: error.clone(), until: Instant::now() + self.retry_interval }
            }
            Err(error) => Cached::Refused(error.clone()),
        };
        match self.by_id.write() {
            Ok(mut cache) => cache.insert(id, entry),
            Err(poisoned) => poisoned.into_inner().insert(id, entry),
        };
        answer
    }

    fn fetch(&self, id: u32) -> Result<Arc<Schema>, SchemaError> {
        let registry = match &self.registry {
            Some(Ok(registry)) => registry,
            Some(Err(e)) => return Err(e.clone()),
            None => {
                return Err(SchemaError::Setup(format!(
                    "a message names registry schema id {id}, and schema_registry.url is not set"
                )))
            }
        };
        let result = self.ask(|| compile::registered(registry, id));
        let outcome = match &result {
            Ok(_) => Outcome::Fetched,
            Err(SchemaError::Unreachable(e)) => {
                tracing::warn!(id, "schema {id} not fetched, its messages are rejected as schema_unavailable: {e}");
                Outcome::Failed
            }
            Err(e) => {
                tracing::warn!(id, "schema {id}: {e}; its messages are rejected as unknown_schema");
                Outcome::Unknown
            }
        };
        if let Some(counter) = self.fetches.get(outcome as usize) {
            counter.fetch_add(1, Ordering::Relaxed);
        }
        if let Ok(schema) = &result {
            tracing::info!(id, registry = registry.url(), "schema {id} fetched ({})", schema.describe());
        }
        result.map(Arc::new)
    }

    /// Runs requests to the registry, recording whether it answered.
    fn ask<T>(&self, request: impl FnOnce() -> Result<T, SchemaError>) -> Result<T, SchemaError> {
        let result = request();
        let up = !matches!(result, Err(SchemaError::Unreachable(_)));
        let before = self.state.swap(if up { STATE_UP } else { STATE_DOWN }, Ordering::Relaxed);
        match (before, up) {
            (STATE_DOWN, true) => tracing::info!("the schema registry answers again"),
            (STATE_UP | STATE_UNKNOWN, false) => {
                if let Err(e) = &result {
                    tracing::warn!("{e}; cached schema ids are still decoded");
                }
            }
            _ => {}
        }
        result
    }

    /// Start-up check: the local schemas load and the registry answers (`check-config`, and
    /// `serve`, which warns and starts anyway: cached ids need no registry, and a registry
    /// that comes up later is used then).
    pub fn check(&self) -> Result<Vec<String>, SchemaError> {
        let mut report = Vec::new();
        for input in [Input::Impressions, Input::Engagements] {
            if self.has_local(input) {
                let schema = self.local(input)?;
                report.push(format!("{input:?}: local schema, {}", schema.describe()).to_lowercase());
            }
        }
        match &self.registry {
            None => {}
            Some(Err(e)) => return Err(e.clone()),
            Some(Ok(registry)) => {
                self.ask(|| registry.probe())?;
                report.push(format!("schema registry {} answers", registry.url()));
            }
        }
        Ok(report)
    }

    /// What the metrics show.
    pub fn stats(&self) -> SchemaStats {
        let cached = match self.by_id.read() {
            Ok(cache) => cache.values().filter(|c| matches!(c, Cached::Ready(_))).count(),
            Err(poisoned) => poisoned.into_inner().values().filter(|c| matches!(c, Cached::Ready(_))).count(),
        };
        let registry_up = match (&self.registry, self.state.load(Ordering::Relaxed)) {
            (None, _) | (_, STATE_UNKNOWN) => None,
            (_, state) => Some(state == STATE_UP),
        };
        SchemaStats {
            registry_up,
            cached,
            fetches: std::array::from_fn(|i| self.fetches.get(i).map_or(0, |c| c.load(Ordering::Relaxed))),
        }
    }

    /// Whether the registry is known to be down (for `/readyz`).
    pub fn registry_down(&self) -> bool {
        self.registry.is_some() && self.state.load(Ordering::Relaxed) == STATE_DOWN
    }

    /// Probes the registry every `schema_registry.check_interval` until shutdown, on a thread
    /// of its own (the client blocks). Nothing without a registry.
    pub fn spawn_probe(self: &Arc<Self>, shutdown: Shutdown) {
        let Some(Ok(_)) = &self.registry else { return };
        let schemas = Arc::clone(self);
        let spawned = std::thread::Builder::new().name("rankpulse-registry".into()).spawn(move || {
            let Some(Ok(registry)) = &schemas.registry else { return };
            while !shutdown.is_triggered() {
                let _ = schemas.ask(|| registry.probe());
                let deadline = Instant::now() + schemas.check_interval;
                while Instant::now() < deadline && !shutdown.is_triggered() {
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        });
        if let Err(e) = spawned {
            tracing::warn!("the schema registry probe did not start ({e}); its state shows with the next fetch");
        }
    }
}
