//! Whether events reach the partition their impression is on: [`Routing`], the counters of the
//! repartition stage and of the key check on the join's input, read by the exporter.
//!
//! The join is per partition, so an engagement whose message is keyed by something else than
//! its query id lands on a partition that never saw its impression and is orphaned: the metrics
//! are biased downwards without any event being invalid. Two things make that visible:
//! the repartition stage's own counters (what it consumed, rejected and forwarded), and the key
//! check on every message the join consumes (a Kafka key that is not the event's query id).
//!
//! Atomics, not the engine's per-partition [`super::Counters`]: the stage and the consumer
//! thread count without taking the engine lock, and these counts describe this process (its
//! stage, its consumer), not a partition's state, so they do not move with a partition on a
//! handover and start at zero with the process.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::event::{EventKind, RejectReason};
use crate::ids::{query_key, QueryKey};

/// Why the repartition stage runs (or why it does not): the `reason` label of
/// `rankpulse_repartition_active`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoutingReason {
    /// `repartition.mode = "always"`.
    Configured,
    /// The input topics have different partition counts.
    PartitionCounts,
    /// Sampled message keys are not their events' query ids.
    Keys,
    /// Neither: the inputs look co-partitioned by query id (or there was nothing to sample).
    CoPartitioned,
    /// `repartition.mode = "never"`.
    Disabled,
}

impl RoutingReason {
    pub fn label(self) -> &'static str {
        match self {
            RoutingReason::Configured => "configured",
            RoutingReason::PartitionCounts => "partition_counts",
            RoutingReason::Keys => "keys",
            RoutingReason::CoPartitioned => "co_partitioned",
            RoutingReason::Disabled => "disabled",
        }
    }
}

/// What was decided at start: set once, before any message is consumed.
#[derive(Debug, Clone)]
pub struct RoutingDecision {
    /// Whether the join consumes the internal topics.
    pub active: bool,
    /// Why.
    pub reason: RoutingReason,
    /// The raw input topics the stage consumes (impressions, engagements): the `topic` label of
    /// its consumed and rejected counts.
    pub raw_topics: [String; 2],
}

/// The counters; shared by the engine (for the exporter), the stage and the consumer thread.
#[derive(Debug, Default)]
pub struct Routing {
    /// The start-up decision; unset in `replay` and the demo, which have no stage.
    decision: OnceLock<RoutingDecision>,
    /// Raw messages the stage consumed, per input kind.
    stage_consumed: [AtomicU64; 2],
    /// Raw messages the stage rejected, per input kind and reason (not forwarded).
    stage_rejected: [[AtomicU64; RejectReason::ALL.len()]; 2],
    /// Re-keyed events the brokers acknowledged on the internal topics, per input kind.
    stage_forwarded: [AtomicU64; 2],
    /// Messages the join consumed that had a key, per input kind.
    keys_checked: [AtomicU64; 2],
    /// Of those, the ones whose key was not their decoded query id, per input kind.
    keys_mismatched: [AtomicU64; 2],
}

impl Routing {
    pub fn new() -> Arc<Self> {
        Arc::new(Routing::default())
    }

    /// Records the start-up decision (the first one wins: it is made once per process).
    pub fn decide(&self, decision: RoutingDecision) {
        let _ = self.decision.set(decision);
    }

    pub fn decision(&self) -> Option<&RoutingDecision> {
        self.decision.get()
    }

    pub fn stage_consumed(&self, kind: EventKind) {
        self.stage_consumed[kind.index()].fetch_add(1, Ordering::Relaxed);
    }

    pub fn stage_rejected(&self, kind: EventKind, reason: RejectReason) {
        self.stage_rejected[kind.index()][reason.index()].fetch_add(1, Ordering::Relaxed);
    }

    pub fn stage_forwarded(&self, kind: EventKind, n: u64) {
        self.stage_forwarded[kind.index()].fetch_add(n, Ordering::Relaxed);
    }

    /// Checks a consumed message's key against its event's query: true when they differ
    /// (the first such message is what the caller logs).
    pub fn check_key(&self, kind: EventKind, key: &[u8], query: QueryKey) -> bool {
        self.keys_checked[kind.index()].fetch_add(1, Ordering::Relaxed);
        // The key as the producer wrote it; bytes that are not UTF-8 cannot be a query id.
        let matches = std::str::from_utf8(key).is_ok_and(|k| query_key(k) == query);
        if !matches {
            self.keys_mismatched[kind.index()].fetch_add(1, Ordering::Relaxed);
        }
        !matches
    }

    /// A snapshot of every count, for the exporter.
    pub fn counts(&self) -> RoutingCounts {
        let load = |a: &[AtomicU64; 2]| [a[0].load(Ordering::Relaxed), a[1].load(Ordering::Relaxed)];
        let mut rejected = [[0; RejectReason::ALL.len()]; 2];
        for (to, from) in rejected.iter_mut().zip(&self.stage_rejected) {
            for (t, f) in to.iter_mut().zip(from) {
                *t = f.load(Ordering::Relaxed);
            }
        }
        RoutingCounts {
            stage_consumed: load(&self.stage_consumed),
            stage_rejected: rejected,
            stage_forwarded: load(&self.stage_forwarded),
            keys_checked: load(&self.keys_checked),
            keys_mismatched: load(&self.keys_mismatched),
        }
    }
}

/// The counts of a [`Routing`] at one moment (see its fields for what each is).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RoutingCounts {
    /// [`Routing`]'s `stage_consumed`.
    pub stage_consumed: [u64; 2],
    /// [`Routing`]'s `stage_rejected`.
    pub stage_rejected: [[u64; RejectReason::ALL.len()]; 2],
    /// [`Routing`]'s `stage_forwarded`.
    pub stage_forwarded: [u64; 2],
    /// [`Routing`]'s `keys_checked`.
    pub keys_checked: [u64; 2],
    /// [`Routing`]'s `keys_mismatched`.
    pub keys_mismatched: [u64; 2],
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_that_is_not_the_query_id_is_a_mismatch() {
        let routing = Routing::new();
        assert!(!routing.check_key(EventKind::Engagement, b"q1", query_key("q1")));
        assert!(routing.check_key(EventKind::Engagement, b"session-7", query_key("q1")));
        assert!(routing.check_key(EventKind::Impression, &[0xff, 0xfe], query_key("q1")));
        let counts = routing.counts();
        assert_eq!((counts.keys_checked, counts.keys_mismatched), ([1, 2], [1, 1]));
    }
}
