//! The engine shared between the consumer thread, the HTTP handlers and the publisher.

use std::sync::{Arc, Mutex, MutexGuard};

use super::Engine;

/// A shared handle on the [`Engine`]: the source mutates it, scrapes and the A/B publisher read
/// it. Cloning shares the same engine.
///
/// The locking rule lives here and only here: a lock is held for one message, one watermark
/// advance, one snapshot or one scrape, never across a poll or an await. A panic while the lock
/// was held (a bug) leaves the engine poisoned; the lock is then taken anyway, because the
/// consumer thread's death already ends `serve` with an error, and until it does, serving the
/// state as it was beats failing every scrape.
#[derive(Clone)]
pub struct SharedEngine(Arc<Mutex<Engine>>);

impl SharedEngine {
    pub fn new(engine: Engine) -> Self {
        SharedEngine(Arc::new(Mutex::new(engine)))
    }

    /// Exclusive access for one short step (see the type's documentation).
    pub fn lock(&self) -> MutexGuard<'_, Engine> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The engine itself, once every other handle is gone (after the pipeline has stopped).
    pub fn into_inner(self) -> Option<Engine> {
        Arc::into_inner(self.0).map(|m| m.into_inner().unwrap_or_else(|poisoned| poisoned.into_inner()))
    }
}
