//! What the engine reports about itself besides metric values: event counts, latency
//! distributions and checkpoint health.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::event::RejectReason;
use crate::time::EventTime;

/// Counts of everything the engine saw that is not a metric value.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Counters {
    /// Messages consumed, per input kind.
    pub consumed: [u64; 2],
    /// Messages rejected, per input kind and [`RejectReason`].
    pub rejected: [[u64; RejectReason::ALL.len()]; 2],
    /// Impressions whose query was already pending.
    pub impressions_duplicate: u64,
    /// Impressions whose attribution window had already closed when they arrived.
    pub impressions_late: u64,
    /// Impressions finalized before their deadline because `join.max_pending_impressions` was reached.
    pub impressions_evicted: u64,
    /// De-duplication keys forgotten early because `join.max_dedup_keys` was reached.
    pub dedup_keys_evicted: u64,
    /// Impressions without the field `ab.unit` names; each counts as its own cluster.
    pub impressions_without_unit: u64,
    /// Impressions carrying a `client_id` while `ab.unit` is `impression`: if variants are
    /// assigned per client, the statistics then treat correlated impressions as independent,
    /// and `replay` warns.
    pub impressions_with_unused_client_id: u64,
}

/// A latency distribution: hdrhistogram for quantiles plus an exact sum for the `_sum` series.
#[derive(Debug)]
pub struct Distribution {
    /// Recorded values, for the exported quantiles.
    pub histogram: Histogram<u64>,
    /// Sum of recorded values, in the histogram's unit: the histogram's own sum is rounded.
    pub sum: u128,
}

impl Distribution {
    pub(super) fn new(max_value: u64) -> Self {
        Distribution { histogram: Histogram::new_with_bounds(1, max_value, 3).expect("valid histogram bounds"), sum: 0 }
    }

    pub(super) fn record(&mut self, value: u64) {
        self.histogram.saturating_record(value.max(1));
        self.sum += u128::from(value);
    }

    /// (value, count) of every recorded bucket: what a checkpoint keeps of the histogram.
    pub(super) fn recorded(&self) -> Vec<(u64, u64)> {
        self.histogram.iter_recorded().map(|v| (v.value_iterated_to(), v.count_at_value())).collect()
    }

    pub(super) fn restore(&mut self, recorded: &[(u64, u64)], sum: u128) {
        for &(value, count) in recorded {
            let _ = self.histogram.record_n(value, count);
        }
        self.sum = sum;
    }
}

/// Checkpoint health, exported next to the evaluation state.
#[derive(Debug, Default, Clone, Copy)]
pub struct CheckpointStats {
    /// Checkpoints written successfully.
    pub written: u64,
    /// Checkpoints that failed (their offsets were not committed).
    pub failed: u64,
    /// Size of the last successful checkpoint.
    pub last_bytes: u64,
    /// How long the last successful checkpoint took to write.
    pub last_duration: Duration,
    /// Wall-clock milliseconds of the last successful checkpoint.
    pub last_success_ms: Option<EventTime>,
}
