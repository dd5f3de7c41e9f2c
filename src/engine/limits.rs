//! The `[limits]` on a single message, and the `[join]` limits on the state with the exact
//! accounting they are enforced against.

use super::aggregation::Aggregation;
use super::task::{StateSize, Totals};
use crate::event::{RejectReason, Rejection};
use crate::join::{JoinSettings, Shard};
use crate::time::{format_rfc3339_ms, EventTime};

/// The `[limits]` on a single message, checked before it can touch any state.
#[derive(Debug, Clone, Copy)]
pub struct InputLimits {
    /// `limits.max_message_bytes`: larger messages are not even parsed.
    pub max_message_bytes: usize,
    /// `limits.max_results`: a longer result list is rejected.
    pub max_results: usize,
    /// `limits.max_future`: one bad client clock must not drag the watermark ahead.
    pub max_future_ms: i64,
    /// `limits.max_past`; `None` in replay, where old files are the point.
    pub max_past_ms: Option<i64>,
}

impl InputLimits {
    /// A message of `size` bytes: the size alone decides, so a caller that streams its input
    /// can skip a long message without holding it.
    pub(super) fn check_size(&self, size: u64) -> Result<(), Rejection> {
        if size > self.max_message_bytes as u64 {
            return Err(Rejection::new(
                RejectReason::TooLarge,
                format!("{size} bytes, limits.max_message_bytes is {}", self.max_message_bytes),
            ));
        }
        Ok(())
    }

    pub(super) fn check_results(&self, results: usize) -> Result<(), Rejection> {
        if results > self.max_results {
            return Err(Rejection::new(
                RejectReason::TooManyResults,
                format!("{results} results, limits.max_results is {}", self.max_results),
            ));
        }
        Ok(())
    }

    pub(super) fn check_timestamp(&self, timestamp: EventTime, wall_clock: EventTime) -> Result<(), Rejection> {
        // Before 1970 is absurd for a search log in any mode (replay included), and keeping event
        // time non-negative keeps every window and deadline computation far from overflow.
        if timestamp < 0 {
            return Err(Rejection::new(RejectReason::TimestampTooOld, format!("{timestamp} is before 1970")));
        }
        if timestamp > wall_clock.saturating_add(self.max_future_ms) {
            return Err(Rejection::new(
                RejectReason::TimestampInFuture,
                format!("{} is more than limits.max_future ahead of the wall clock", format_rfc3339_ms(timestamp)),
            ));
        }
        if self.max_past_ms.is_some_and(|past| timestamp < wall_clock.saturating_sub(past)) {
            return Err(Rejection::new(
                RejectReason::TimestampTooOld,
                format!("{} is more than limits.max_past behind the wall clock", format_rfc3339_ms(timestamp)),
            ));
        }
        Ok(())
    }
}

/// Limits on the join's state, from `[join]`, over every partition together.
#[derive(Debug, Clone, Copy)]
pub(super) struct StateLimits {
    /// `join.max_pending_impressions`.
    pub max_pending: usize,
    /// `join.max_held_engagements`.
    pub max_held: usize,
    /// `join.max_dedup_keys`.
    pub max_dedup: usize,
}

impl StateLimits {
    /// Brings the state back within the limits by evicting from the shard that grew: the
    /// impression with the earliest deadline is finalized early, the oldest held engagement
    /// dropped, the oldest de-duplication key forgotten. Each is counted.
    pub(super) fn enforce(
        &self,
        state: &mut StateSize,
        shard: &mut Shard,
        join: &JoinSettings,
        aggregation: &mut Aggregation,
        totals: &mut Totals,
    ) {
        while state.pending > self.max_pending
            && state.track(shard, |s| s.evict_oldest_pending(join, |f| aggregation.finalize(totals, f)))
        {
            totals.counters.impressions_evicted += 1;
        }
        while state.held > self.max_held && state.track(shard, Shard::evict_oldest_held) {}
        while state.dedup > self.max_dedup && state.track(shard, Shard::evict_oldest_dedup_key) {
            totals.counters.dedup_keys_evicted += 1;
        }
    }
}
