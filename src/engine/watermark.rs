//! Watermarks: how far event time has progressed, per partition and over all of them.
//!
//! Each partition has two inputs, its impressions and engagements partitions. An input's
//! progress is its largest event time minus `join.max_out_of_orderness`. An input is *active*
//! while it delivered something within `join.idle_timeout`; inputs that are active but have not
//! delivered an event time yet (just assigned) hold progress back, so a backlog of impressions is
//! not finalized before its engagements had a chance to be read.
//! * A partition with active inputs advances to the least progress among them.
//! * A partition with no active input follows the *frontier*: the least progress among all
//!   active inputs of every partition, so a silent partition does not freeze, nor is frozen by,
//!   the rest.
//! * When no input is active at all, the frontier advances with the wall clock from the moment
//!   the stream went idle, so impressions without any engagement still get finalized.
//!
//! Silence alone does not make a Kafka input idle: a consumer that cannot fetch (brokers down,
//! a partition without a leader) delivers nothing either, and the backlog it finds when it can
//! again would all be behind a watermark the wall clock moved. So where the source confirms
//! ([`Watermarks::confirmation_valid_for`]), an input is idle only while the brokers keep
//! confirming that it has nothing unread (its high watermark at the consumer's position,
//! `source::caught_up`), and only once they have without a break (a round that could not
//! confirm it) since its last delivery, or for a whole `join.idle_timeout` after the break:
//! time during which nobody could tell whether the input was silent does not count as idle
//! time.
//!
//! Windows close once the least partition watermark has passed their last possible deadline.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::time::EventTime;

/// What one input (a topic partition) has delivered so far.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct InputClock {
    /// Largest event time delivered; `None` before the first event.
    pub max_event_time: Option<EventTime>,
    /// When the input last delivered anything, valid or not: a partition carrying only rejects
    /// is still alive. Wall-clock state: not checkpointed (a restored input is re-assigned).
    #[serde(skip)]
    pub last_active: Option<Instant>,
    /// The brokers' latest confirmation that the input had nothing unread, if one came after
    /// its last delivery and no round failed to confirm it since. Wall-clock state, like
    /// `last_active`.
    #[serde(skip)]
    confirmed_at: Option<Instant>,
    /// Since when the input is known to have had nothing to deliver: its last delivery when no
    /// round failed to confirm it since, else the first confirmation after the last such
    /// round. Meaningful while `confirmed_at` is set.
    #[serde(skip)]
    confirmed_since: Option<Instant>,
    /// A round failed to confirm the input (the brokers did not answer, or messages waited)
    /// since its last delivery: its silence before the next confirmation is not idle time.
    #[serde(skip)]
    broken: bool,
}

/// When silence counts as idleness (the module documentation).
#[derive(Debug, Clone, Copy)]
pub(super) struct IdleRule {
    /// `join.idle_timeout`.
    pub idle_timeout: Duration,
    /// `Some(valid_for)` where the source confirms caught-up inputs: how long a confirmation
    /// counts without the next (rounds that stop coming stop the idleness they vouched for).
    pub confirmation_valid_for: Option<Duration>,
}

impl InputClock {
    /// When the input became (or becomes) idle under `rule`, or `None` while it is active. An
    /// input that never delivered nor was assigned has always been idle.
    fn idle_since(&self, now: Instant, rule: IdleRule) -> Option<Option<Instant>> {
        let Some(last) = self.last_active else { return Some(None) };
        let silent_from = match rule.confirmation_valid_for {
            None => last,
            Some(valid_for) => match (self.confirmed_at, self.confirmed_since) {
                (Some(at), Some(since)) if now.saturating_duration_since(at) <= valid_for => since,
                _ => return None,
            },
        };
        let idle_from = silent_from + rule.idle_timeout;
        (now >= idle_from).then_some(Some(idle_from))
    }

    pub(super) fn observe(&mut self, event_time: Option<EventTime>, now: Instant) {
        self.last_active = Some(now);
        self.confirmed_at = None;
        self.broken = false;
        if let Some(t) = event_time {
            self.max_event_time = Some(self.max_event_time.map_or(t, |m| m.max(t)));
        }
    }

    /// The brokers confirmed that the input had nothing unread as of `at` (taken before they
    /// were asked). Ignored when the input delivered since: the confirmation is about an older
    /// position.
    pub(super) fn confirm_caught_up(&mut self, at: Instant) {
        if self.last_active.is_some_and(|last| last > at) {
            return;
        }
        if self.confirmed_at.is_none() {
            self.confirmed_since = match self.broken {
                true => Some(at),
                false => self.last_active.or(Some(at)),
            };
        }
        self.confirmed_at = Some(self.confirmed_at.map_or(at, |c| c.max(at)));
    }

    /// A round as of `at` could not confirm the input caught up: its stretch of silence is
    /// broken (unless it delivered since).
    pub(super) fn not_confirmed(&mut self, at: Instant) {
        if self.last_active.is_some_and(|last| last > at) {
            return;
        }
        self.confirmed_at = None;
        self.broken = true;
    }

    /// Whether the input delivered nothing for at least `silence` before `now`, nor since.
    pub(super) fn silent_for(&self, now: Instant, silence: Duration) -> bool {
        self.last_active.is_none_or(|last| now.saturating_duration_since(last) >= silence)
    }
}

/// Progress of a set of inputs, combined by taking the least.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Progress {
    /// No active input: nothing constrains.
    Idle,
    /// An active input has not delivered an event time yet: nothing may advance.
    Blocked,
    At(EventTime),
}

impl Progress {
    fn meet(self, other: Progress) -> Progress {
        match (self, other) {
            (Progress::Blocked, _) | (_, Progress::Blocked) => Progress::Blocked,
            (Progress::Idle, p) | (p, Progress::Idle) => p,
            (Progress::At(a), Progress::At(b)) => Progress::At(a.min(b)),
        }
    }
}

/// The watermark rules and the engine-wide progress they keep.
#[derive(Debug)]
pub(super) struct Watermarks {
    /// `join.max_out_of_orderness`, in milliseconds.
    pub max_out_of_orderness: i64,
    /// `join.idle_timeout`.
    pub idle_timeout: Duration,
    /// Whether an input is idle only while the brokers confirm it caught up, and how long a
    /// confirmation counts: set by the Kafka source, which confirms; `None` where nothing does
    /// (replay reads files to their end, and finishes).
    pub confirmation_valid_for: Option<Duration>,
    /// Least progress of all active inputs (see the module documentation); checkpointed, so
    /// that idle partitions resume where they were.
    pub frontier: Option<EventTime>,
    /// `Tasks::least_watermark` as of the last `Engine::advance`: label retirement needs a bound per
    /// impression, and scanning every partition for it each time would be waste.
    pub least: Option<EventTime>,
}

impl Watermarks {
    fn rule(&self) -> IdleRule {
        IdleRule { idle_timeout: self.idle_timeout, confirmation_valid_for: self.confirmation_valid_for }
    }

    fn progress(&self, clock: &InputClock, now: Instant) -> Progress {
        if clock.idle_since(now, self.rule()).is_some() {
            Progress::Idle
        } else {
            clock
                .max_event_time
                .map_or(Progress::Blocked, |t| Progress::At(t.saturating_sub(self.max_out_of_orderness)))
        }
    }

    /// Raises the frontier from every active task's inputs (each task's pair of clocks) at wall
    /// time `now`.
    pub fn update_frontier<'a>(&mut self, tasks: impl Iterator<Item = &'a [InputClock; 2]>, now: Instant) {
        let mut least = Progress::Idle;
        let mut newest_event = None::<EventTime>;
        // When the last input went idle: the stream has been idle since.
        let mut idle_since = None::<Instant>;
        for inputs in tasks {
            for clock in inputs {
                least = least.meet(self.progress(clock, now));
                newest_event = newest_event.max(clock.max_event_time);
                idle_since = idle_since.max(clock.idle_since(now, self.rule()).flatten());
            }
        }
        let candidate = match least {
            Progress::At(t) => Some(t),
            Progress::Blocked => None,
            Progress::Idle => match (newest_event, idle_since) {
                (Some(newest), Some(since)) => {
                    let idle_for = now.saturating_duration_since(since);
                    let idle_ms = i64::try_from(idle_for.as_millis()).unwrap_or(i64::MAX);
                    Some(newest.saturating_sub(self.max_out_of_orderness).saturating_add(idle_ms))
                }
                _ => None,
            },
        };
        if let Some(c) = candidate {
            self.frontier = Some(self.frontier.map_or(c, |f| f.max(c)));
        }
    }

    /// The watermark an active task (its inputs' clocks) advances to at `now`, if it may advance
    /// at all.
    pub fn target(&self, inputs: &[InputClock; 2], now: Instant) -> Option<EventTime> {
        match inputs.iter().fold(Progress::Idle, |acc, c| acc.meet(self.progress(c, now))) {
            Progress::At(t) => Some(t),
            Progress::Blocked => None,
            Progress::Idle => self.frontier,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    fn rule(valid_for: Option<u64>) -> IdleRule {
        IdleRule { idle_timeout: 10 * SECOND, confirmation_valid_for: valid_for.map(Duration::from_secs) }
    }

    /// A clock that delivered at `t0`.
    fn delivered_at(t0: Instant) -> InputClock {
        let mut clock = InputClock::default();
        clock.observe(Some(1_000), t0);
        clock
    }

    #[test]
    fn silence_alone_is_idleness_where_nothing_confirms() {
        let t0 = Instant::now();
        let clock = delivered_at(t0);
        assert_eq!(clock.idle_since(t0 + 9 * SECOND, rule(None)), None);
        assert_eq!(clock.idle_since(t0 + 10 * SECOND, rule(None)), Some(Some(t0 + 10 * SECOND)));
        assert_eq!(InputClock::default().idle_since(t0, rule(Some(3))), Some(None), "never assigned: idle");
    }

    #[test]
    fn where_the_source_confirms_an_unconfirmed_input_is_never_idle() {
        let t0 = Instant::now();
        let clock = delivered_at(t0);
        for s in [10, 60, 3600u32] {
            assert_eq!(clock.idle_since(t0 + s * SECOND, rule(Some(3))), None);
        }
    }

    #[test]
    fn unbroken_confirmations_count_from_the_delivery_however_far_apart() {
        let t0 = Instant::now();
        let mut clock = delivered_at(t0);
        // Rounds slowed down by a busy machine: the first confirmation 6 s after the delivery.
        for s in [6, 10] {
            clock.confirm_caught_up(t0 + s * SECOND);
        }
        assert_eq!(clock.idle_since(t0 + 10 * SECOND, rule(Some(3))), Some(Some(t0 + 10 * SECOND)));
        // A confirmation stops counting once the rounds stop coming, and counts again with the
        // next one, from the same start.
        assert_eq!(clock.idle_since(t0 + 14 * SECOND, rule(Some(3))), None);
        clock.confirm_caught_up(t0 + 14 * SECOND);
        assert_eq!(clock.idle_since(t0 + 14 * SECOND, rule(Some(3))), Some(Some(t0 + 10 * SECOND)));
    }

    #[test]
    fn an_outage_does_not_count_as_idle_time() {
        let t0 = Instant::now();
        let mut clock = delivered_at(t0);
        clock.confirm_caught_up(t0 + 2 * SECOND);
        // The brokers answer nothing from 4 s to 40 s; then they confirm it caught up.
        for s in (4..40).step_by(2) {
            clock.not_confirmed(t0 + s * SECOND);
            assert_eq!(clock.idle_since(t0 + s * SECOND, rule(Some(3))), None, "at {s} s");
        }
        for s in (40..=48).step_by(2) {
            clock.confirm_caught_up(t0 + s * SECOND);
        }
        assert_eq!(clock.idle_since(t0 + 49 * SECOND, rule(Some(3))), None, "the 9 s since the break are not 10");
        clock.confirm_caught_up(t0 + 50 * SECOND);
        assert_eq!(clock.idle_since(t0 + 50 * SECOND, rule(Some(3))), Some(Some(t0 + 50 * SECOND)));
    }

    #[test]
    fn what_a_delivery_outdates_is_ignored_and_a_delivery_mends_a_break() {
        let t0 = Instant::now();
        let mut clock = delivered_at(t0);
        clock.observe(Some(2_000), t0 + 5 * SECOND);
        clock.confirm_caught_up(t0 + 4 * SECOND);
        clock.not_confirmed(t0 + 4 * SECOND);
        assert_eq!(clock.idle_since(t0 + 16 * SECOND, rule(Some(3))), None, "nothing confirmed since 5 s");
        clock.not_confirmed(t0 + 6 * SECOND);
        clock.observe(None, t0 + 8 * SECOND);
        clock.confirm_caught_up(t0 + 9 * SECOND);
        assert_eq!(clock.idle_since(t0 + 18 * SECOND, rule(Some(30))), Some(Some(t0 + 18 * SECOND)));
    }

    #[test]
    fn silence_is_measured_from_the_last_delivery() {
        let t0 = Instant::now();
        let clock = delivered_at(t0);
        assert!(!clock.silent_for(t0 + SECOND, 2 * SECOND));
        assert!(clock.silent_for(t0 + 2 * SECOND, 2 * SECOND));
        assert!(InputClock::default().silent_for(t0, 2 * SECOND));
    }
}
