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
//! Windows close once the least partition watermark has passed their last possible deadline.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::task::{Task, Tasks};
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
}

impl InputClock {
    pub fn is_active(&self, now: Instant, idle_timeout: Duration) -> bool {
        self.last_active.is_some_and(|t| now.saturating_duration_since(t) < idle_timeout)
    }

    pub(super) fn observe(&mut self, event_time: Option<EventTime>, now: Instant) {
        self.last_active = Some(now);
        if let Some(t) = event_time {
            self.max_event_time = Some(self.max_event_time.map_or(t, |m| m.max(t)));
        }
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
    /// Least progress of all active inputs (see the module documentation); checkpointed, so
    /// that idle partitions resume where they were.
    pub frontier: Option<EventTime>,
    /// [`least`] as of the last [`Watermarks::update`]: label retirement needs a bound per
    /// impression, and scanning every partition for it each time would be waste.
    pub least: Option<EventTime>,
}

impl Watermarks {
    fn progress(&self, clock: &InputClock, now: Instant) -> Progress {
        if !clock.is_active(now, self.idle_timeout) {
            Progress::Idle
        } else {
            clock
                .max_event_time
                .map_or(Progress::Blocked, |t| Progress::At(t.saturating_sub(self.max_out_of_orderness)))
        }
    }

    /// Raises the frontier from every active task's inputs at wall time `now`.
    pub fn update_frontier(&mut self, tasks: &Tasks, now: Instant) {
        let mut least = Progress::Idle;
        let mut newest_event = None::<EventTime>;
        let mut last_active = None::<Instant>;
        for task in tasks.tasks() {
            for clock in &task.inputs {
                least = least.meet(self.progress(clock, now));
                newest_event = newest_event.max(clock.max_event_time);
                last_active = last_active.max(clock.last_active);
            }
        }
        let candidate = match least {
            Progress::At(t) => Some(t),
            Progress::Blocked => None,
            Progress::Idle => match (newest_event, last_active) {
                (Some(newest), Some(last)) => {
                    let idle_for = now.saturating_duration_since(last + self.idle_timeout);
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

    /// The watermark an active task advances to at `now`, if it may advance at all.
    pub fn target(&self, task: &Task, now: Instant) -> Option<EventTime> {
        match task.inputs.iter().fold(Progress::Idle, |acc, c| acc.meet(self.progress(c, now))) {
            Progress::At(t) => Some(t),
            Progress::Blocked => None,
            Progress::Idle => self.frontier,
        }
    }
}

/// The least watermark of the tasks, if every one has a watermark: everything before it is
/// final, and windows close on it.
pub(super) fn least(tasks: &Tasks) -> Option<EventTime> {
    let mut least = None;
    for task in tasks.tasks() {
        let w = task.join.watermark()?;
        least = Some(least.map_or(w, |l: EventTime| l.min(w)));
    }
    least
}
