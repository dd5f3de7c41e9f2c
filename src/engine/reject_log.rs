//! The rate limit on logging rejected messages. The engine counts rejections; its callers log
//! them, because only a caller knows where a message came from (the Kafka source: topic,
//! partition and offset; replay: file, line and byte offset). Both share this limiter, so a
//! flood of bad input never becomes a flood of logs, wherever it comes from.

use std::time::{Duration, Instant};

/// Decides which rejections are logged: at most [`RejectLog::PER_WINDOW`] per
/// [`RejectLog::WINDOW`], then a count of the ones left out.
#[derive(Debug, Default)]
pub struct RejectLog {
    /// Start of the current window; `None` before the first rejection.
    window_start: Option<Instant>,
    /// Lines logged in the current window.
    logged_in_window: u32,
    /// Rejections not logged since the last report of them, reported when a window ends (or by
    /// the caller, through [`RejectLog::take_suppressed`], when its input ends).
    suppressed: u64,
}

impl RejectLog {
    /// Rejections logged per window.
    pub const PER_WINDOW: u32 = 5;
    /// The window. A caller that passes one frozen instant (replay) gets the first
    /// [`RejectLog::PER_WINDOW`] rejections and a count of the rest, whatever its speed.
    pub const WINDOW: Duration = Duration::from_secs(10);

    /// One rejection at `now`: `emit` (which writes the caller's log line) runs unless this
    /// window's lines are used up. A new window first logs how many the last one left out.
    pub fn log(&mut self, now: Instant, emit: impl FnOnce()) {
        if self.window_start.is_none_or(|s| now.saturating_duration_since(s) >= Self::WINDOW) {
            self.report_suppressed();
            self.window_start = Some(now);
            self.logged_in_window = 0;
        }
        if self.logged_in_window < Self::PER_WINDOW {
            self.logged_in_window += 1;
            emit();
        } else {
            self.suppressed += 1;
        }
    }

    /// Logs how many rejections were left out since the last such report, if any: for a
    /// caller whose input ends (the consumer at shutdown), so the count is never lost.
    pub fn report_suppressed(&mut self) {
        let suppressed = self.take_suppressed();
        if suppressed > 0 {
            tracing::warn!(suppressed, "further rejected messages were not logged");
        }
    }

    /// How many rejections were left out since the last report, reset: for a caller that
    /// words the closing count itself (replay).
    pub fn take_suppressed(&mut self) -> u64 {
        std::mem::take(&mut self.suppressed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_a_few_per_window_and_counts_the_rest() {
        let mut log = RejectLog::default();
        let start = Instant::now();
        let mut emitted = 0;
        for _ in 0..12 {
            log.log(start, || emitted += 1);
        }
        assert_eq!((emitted, log.take_suppressed()), (5, 7));
        assert_eq!(log.take_suppressed(), 0, "taken once");
        for _ in 0..6 {
            log.log(start + Duration::from_secs(1), || emitted += 1);
        }
        assert_eq!((emitted, log.suppressed), (5, 6), "the same window");
        log.log(start + RejectLog::WINDOW, || emitted += 1);
        assert_eq!((emitted, log.suppressed), (6, 0), "a new window reports the count and logs again");
    }
}
