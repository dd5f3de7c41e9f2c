//! Per-partition state: a [`Task`] is everything one partition number contributes to the
//! engine (what Kafka Streams calls a task), [`Tasks`] finds it by partition number, and
//! `TaskTemplate` says how a new partition's task starts.
//!
//! A task holds its join state, its two input clocks and its [`Totals`]: every sum and count
//! its messages contributed. A partition's state moves between replicas as one task (see
//! [`super::snapshot`]), so what a replica exports is the sum of the tasks it owns, and the
//! sum over replicas is what one replica owning every partition would export.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::published::ClosedProgress;
use super::telemetry::{Counters, Distribution};
use super::totals_log::TotalsLog;
use super::watermark::InputClock;
use crate::accumulate::{Accumulators, ClosedWindow, CupedSettings, CupedState, StatsShape};
use crate::clicks::log::{ClickLog, LogSettings};
use crate::clicks::FitSettings;
use crate::event::EventKind;
use crate::join::Shard;
use crate::time::EventTime;

/// Everything a partition's messages added up to: exported summed over the engine's tasks. A
/// snapshot holds them as a `super::wire::TotalsRecord`.
#[derive(Debug)]
pub struct Totals {
    /// Metric sums per group, cumulative and per open window.
    pub accumulators: Accumulators,
    /// Message and impression counts.
    pub counters: Counters,
    /// Impression timestamp to first attributed engagement, in milliseconds.
    pub first_engagement_delay: Distribution,
    /// The partition's newest closed windows (a few per size), for the experiment-wide view
    /// (`super::global`); empty unless the engine keeps them.
    pub recent_closed: Vec<ClosedWindow>,
    /// The partition's click log, with `clicks.enabled`. The task record carries it after
    /// everything else (format 5 appended it).
    pub clicks: Option<ClickLog>,
    /// The partition's CUPED state, with `ab.cuped.metrics`; a trailing field of the task
    /// record like `clicks`.
    pub cuped: Option<CupedState>,
    /// The operations on these totals since the task's last changelog record, while the task
    /// records changes for a delta (`super::delta`); `None` otherwise.
    pub changes: Option<TotalsLog>,
}

/// The state of one partition number, shared by the co-partitioned impressions and
/// engagements topics. A snapshot holds it as a `super::wire::TaskRecord`.
#[derive(Debug)]
pub struct Task {
    /// Pending impressions, held engagements, de-duplication memory, engagement counts.
    pub join: Shard,
    /// One clock per input kind (impressions, engagements): what the watermark is derived from.
    pub inputs: [InputClock; 2],
    /// What this partition's messages added up to.
    pub totals: Totals,
    /// How much of `totals.recent_closed` the aggregates topic has carried. Not in the
    /// snapshot: a restored task's windows were all in the record written with it.
    pub closed_progress: ClosedProgress,
}

impl Task {
    pub fn new(totals: Totals) -> Self {
        Task { join: Shard::default(), inputs: Default::default(), totals, closed_progress: ClosedProgress::default() }
    }

    /// Records that an input delivered a message (with its event time, when it had a valid one).
    pub fn observe(&mut self, kind: EventKind, event_time: Option<EventTime>, now: Instant) {
        self.inputs[kind.index()].observe(event_time, now);
    }
}

/// Sizes of the join's state, summed over partitions and kept exact by accounting each change.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateSize {
    /// Pending impressions.
    pub pending: usize,
    /// Held engagements.
    pub held: usize,
    /// De-duplication keys.
    pub dedup: usize,
}

impl StateSize {
    pub(super) fn of(shard: &Shard) -> Self {
        StateSize { pending: shard.pending_len(), held: shard.held_len(), dedup: shard.dedup_len() }
    }

    pub(super) fn add(&mut self, other: StateSize) {
        self.pending += other.pending;
        self.held += other.held;
        self.dedup += other.dedup;
    }

    pub(super) fn subtract(&mut self, other: StateSize) {
        self.pending -= other.pending;
        self.held -= other.held;
        self.dedup -= other.dedup;
    }

    /// Runs `change` on a shard and applies its effect on the shard's size to the totals.
    pub(super) fn track<R>(&mut self, shard: &mut Shard, change: impl FnOnce(&mut Shard) -> R) -> R {
        let before = Self::of(shard);
        let result = change(shard);
        let after = Self::of(shard);
        self.pending = self.pending + after.pending - before.pending;
        self.held = self.held + after.held - before.held;
        self.dedup = self.dedup + after.dedup - before.dedup;
        result
    }
}

/// How a partition's task starts: empty sums of the configured shape, with every window the
/// engine already closed treated as closed.
#[derive(Debug, Clone)]
pub(super) struct TaskTemplate {
    /// The shape of every group's stats.
    pub(super) shape: StatsShape,
    /// `metrics.windows`, in milliseconds.
    pub(super) window_sizes_ms: Vec<i64>,
    /// `join.attribution_window`, in milliseconds.
    pub(super) attribution_window_ms: i64,
    /// The watermark the engine last closed windows on: a new partition's impressions in
    /// windows closed before it are late, as they would be for the partitions already there
    /// (but see [`super::global::new_task_closed_at`]).
    pub(super) windows_closed_at: Option<EventTime>,
    /// `[clicks]` when the click log is on.
    pub(super) clicks: Option<LogSettings>,
    /// `[clicks]`' fitting settings, for the gauges.
    pub(super) click_fit: FitSettings,
    /// `ab.cuped` when it adjusts any metric.
    pub(super) cuped: Option<CupedSettings>,
}

impl TaskTemplate {
    /// A task with every window closed that the engine has closed.
    pub(super) fn task(&self) -> Task {
        self.task_closed_at(self.windows_closed_at)
    }

    /// A task with every window closed that `closed_at` closes (a partition's new task:
    /// [`super::global::new_task_closed_at`]).
    pub(super) fn task_closed_at(&self, closed_at: Option<EventTime>) -> Task {
        let mut accumulators = Accumulators::new(self.shape, &self.window_sizes_ms, self.attribution_window_ms);
        if let Some(w) = closed_at {
            accumulators.close_windows(w, |_| unreachable!("a new task has no open window"));
        }
        let mut task = Task::new(Totals {
            accumulators,
            counters: Counters::default(),
            first_engagement_delay: self.delay_distribution(),
            recent_closed: Vec::new(),
            clicks: self.clicks.map(ClickLog::new),
            cuped: self.cuped.as_ref().map(|_| CupedState::new()),
            changes: None,
        });
        // It closed nothing yet: every window it closes from now on is kept.
        task.closed_progress.kept_from = Some(vec![EventTime::MIN; self.window_sizes_ms.len()]);
        task
    }

    /// Impression to first engagement, in milliseconds, up to a week.
    pub(super) fn delay_distribution(&self) -> Distribution {
        Distribution::new(86_400_000 * 7)
    }
}

/// Tasks by partition number. Kafka partitions are small dense non-negative integers, so a
/// vector indexed by partition is the whole map.
#[derive(Debug, Default)]
pub struct Tasks(Vec<Option<Box<Task>>>);

impl Tasks {
    /// The one rule mapping a partition number to its slot: a negative number (never a
    /// partition a message comes from) has none.
    fn slot(partition: i32) -> Option<usize> {
        usize::try_from(partition).ok()
    }

    pub fn get(&self, partition: i32) -> Option<&Task> {
        self.0.get(Self::slot(partition)?)?.as_deref()
    }

    pub fn get_mut(&mut self, partition: i32) -> Option<&mut Task> {
        self.0.get_mut(Self::slot(partition)?)?.as_deref_mut()
    }

    /// The partition's task, created by `new` on first use; `None` for a negative partition.
    pub fn get_or_create(&mut self, partition: i32, new: impl FnOnce() -> Task) -> Option<&mut Task> {
        let i = Self::slot(partition)?;
        if self.0.len() <= i {
            self.0.resize_with(i + 1, || None);
        }
        Some(self.0[i].get_or_insert_with(|| Box::new(new())))
    }

    /// Puts a task in the partition's slot (a restored one), returning the one it replaces.
    pub fn insert(&mut self, partition: i32, task: Task) -> Option<Box<Task>> {
        let i = Self::slot(partition)?;
        if self.0.len() <= i {
            self.0.resize_with(i + 1, || None);
        }
        self.0[i].replace(Box::new(task))
    }

    /// Takes the partition's task out (its partition moved to another replica).
    pub fn remove(&mut self, partition: i32) -> Option<Box<Task>> {
        self.0.get_mut(Self::slot(partition)?)?.take()
    }

    /// Every task with its partition number, in partition order.
    pub fn iter(&self) -> impl Iterator<Item = (i32, &Task)> {
        self.0.iter().enumerate().filter_map(|(i, t)| Some((i32::try_from(i).ok()?, t.as_deref()?)))
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Task> {
        self.0.iter_mut().flatten().map(|t| &mut **t)
    }

    /// The tasks, without their partition numbers.
    pub fn tasks(&self) -> impl Iterator<Item = &Task> {
        self.0.iter().flatten().map(|t| &**t)
    }
    /// The inputs (partition, kind) that delivered nothing for at least `silence`.
    pub fn silent_inputs(&self, now: Instant, silence: Duration) -> Vec<(i32, EventKind)> {
        let mut silent = Vec::new();
        for (partition, task) in self.iter() {
            for kind in EventKind::ALL {
                if task.inputs[kind.index()].silent_for(now, silence) {
                    silent.push((partition, kind));
                }
            }
        }
        silent
    }

    /// Tells the inputs what a round of questions to the brokers as of `at` learned.
    pub fn caught_up(&mut self, confirmed: &[(i32, EventKind)], not_confirmed: &[(i32, EventKind)], at: Instant) {
        for &(partition, kind) in confirmed {
            if let Some(task) = self.get_mut(partition) {
                task.inputs[kind.index()].confirm_caught_up(at);
            }
        }
        for &(partition, kind) in not_confirmed {
            if let Some(task) = self.get_mut(partition) {
                task.inputs[kind.index()].not_confirmed(at);
            }
        }
    }

    /// The least watermark of the tasks, if every one has a watermark: everything before it is
    /// final, and windows close on it.
    pub fn least_watermark(&self) -> Option<EventTime> {
        let mut least = None;
        for task in self.tasks() {
            let w = task.join.watermark()?;
            least = Some(least.map_or(w, |l: EventTime| l.min(w)));
        }
        least
    }

    /// Each task's pair of input clocks, for the watermark rules.
    pub fn input_clocks(&self) -> impl Iterator<Item = &[InputClock; 2]> {
        self.tasks().map(|task| &task.inputs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task() -> Task {
        Task::new(Totals {
            accumulators: Accumulators::new(crate::accumulate::StatsShape::plain(1), &[], 0),
            counters: Counters::default(),
            first_engagement_delay: Distribution::new(1000),
            recent_closed: Vec::new(),
            clicks: None,
            cuped: None,
            changes: None,
        })
    }

    #[test]
    fn a_negative_partition_has_no_task_anywhere() {
        let mut tasks = Tasks::default();
        assert!(tasks.get_or_create(-1, task).is_none());
        assert!(tasks.insert(-1, task()).is_none() && tasks.remove(-1).is_none());
        assert!(tasks.get(-1).is_none() && tasks.get_mut(i32::MIN).is_none());
        tasks.get_or_create(2, task).unwrap().totals.counters.consumed[0] = 7;
        assert_eq!(tasks.iter().map(|(p, t)| (p, t.totals.counters.consumed[0])).collect::<Vec<_>>(), [(2, 7)]);
        assert!(tasks.get(0).is_none() && tasks.get(3).is_none());
        assert_eq!(tasks.remove(2).map(|t| t.totals.counters.consumed[0]), Some(7));
        assert_eq!(tasks.tasks().count(), 0);
    }
}
