//! What the engine reports about itself besides metric values: event counts, latency
//! distributions, checkpoint health, and the rate-limited log of rejected messages.

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::event::{RejectReason, Rejection};
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

/// Logs rejected messages at a bounded rate: a flood of bad input must not become a flood of logs.
#[derive(Debug, Default)]
pub(super) struct RejectLog {
    /// Start of the current 10-second window; `None` before the first rejection.
    window_start: Option<Instant>,
    /// Lines logged in the current window.
    logged_in_window: u32,
    /// Rejections not logged in the current window, reported when it ends.
    suppressed: u64,
}

impl RejectLog {
    const PER_WINDOW: u32 = 5;
    const WINDOW: Duration = Duration::from_secs(10);

    pub(super) fn log(&mut self, now: Instant, topic: &str, partition: i32, rejection: &Rejection) {
        if self.window_start.is_none_or(|s| now.saturating_duration_since(s) >= Self::WINDOW) {
            if self.suppressed > 0 {
                tracing::warn!(suppressed = self.suppressed, "further rejected messages were not logged");
            }
            *self = RejectLog { window_start: Some(now), logged_in_window: 0, suppressed: 0 };
        }
        if self.logged_in_window < Self::PER_WINDOW {
            self.logged_in_window += 1;
            tracing::warn!(topic, partition, reason = rejection.reason.label(), detail = %rejection.detail, "rejected message");
        } else {
            self.suppressed += 1;
        }
    }
}
