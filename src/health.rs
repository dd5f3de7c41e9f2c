//! Readiness: set by the source, read by the `/readyz` probe.
//!
//! Its own module (beside [`crate::shutdown`]) because the input stage writes it and the output
//! stage reads it: neither should import the other for it.

use std::sync::atomic::{AtomicBool, Ordering};

/// Liveness and readiness, set by the source and read by the probes.
#[derive(Debug, Default)]
pub struct Health {
    /// True while the consumer has partitions assigned and the brokers are reachable.
    ready: AtomicBool,
}

impl Health {
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }
}
