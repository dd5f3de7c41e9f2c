//! The per-partition core, one part the [`Engine`](super::Engine) owns: the tasks of the
//! partitions it holds (what Kafka Streams calls tasks), how a new one starts, the join's
//! event-time rules, the limits on the state and its exact size, and the watermark rules with
//! the progress they keep. The engine's per-message and per-advance work runs on these, a task
//! at a time.

use std::time::Instant;

use super::aggregation::{finalize_due, Aggregation};
use super::global::{new_task_closed_at, GlobalView};
use super::limits::StateLimits;
use super::task::{StateSize, TaskTemplate, Tasks};
use super::telemetry::Counters;
use super::watermark::Watermarks;
use crate::event::EventKind;
use crate::join::JoinSettings;
use crate::time::EventTime;

/// The per-partition core.
#[derive(Debug)]
pub(super) struct Partitions {
    /// Per-partition state.
    pub(super) tasks: Tasks,
    /// How a new partition's task starts.
    pub(super) template: TaskTemplate,
    /// The join's event-time rules.
    pub(super) join: JoinSettings,
    /// `[join]`'s limits on the state, over every partition.
    pub(super) state_limits: StateLimits,
    /// Current state sizes, for the limits and the gauges.
    pub(super) state: StateSize,
    /// The watermark rules and the progress they keep.
    pub(super) watermarks: Watermarks,
    /// Counts of messages that belong to no partition (a negative partition number, which only
    /// a replay input can carry): rejected, and counted here since no task takes them.
    pub(super) unowned: Counters,
    /// The most threads that finalize partitions at once in `Engine::advance` and
    /// `Engine::finish`: the cores this process may use beyond the two that `serve`'s consumer
    /// and engine threads keep busy (at least 1, at most `MAX_FINALIZE_LANES`). On 2 cores a
    /// second thread gained nothing end to end (0.90 and 1.02 of one thread's rate in two runs,
    /// BENCHMARKS.md): the cores were already full.
    pub(super) finalize_lanes: usize,
}

impl Partitions {
    /// Marks a partition as assigned (see `Engine::assign`), its task created empty unless one
    /// was restored: where it closes its windows depends on the engine's global `view`.
    pub(super) fn assign(&mut self, partition: i32, view: Option<&GlobalView>, now: Instant) {
        let Partitions { tasks, template, .. } = self;
        let new = || template.task_closed_at(new_task_closed_at(template, view));
        let Some(task) = tasks.get_or_create(partition, new) else { return };
        for kind in EventKind::ALL {
            task.observe(kind, None, now);
        }
    }

    /// Where a message of this partition is counted: its task's counters (the task is created
    /// if need be, as [`Partitions::assign`] would), or the engine's own for a negative partition.
    pub(super) fn counters_of(&mut self, partition: i32, view: Option<&GlobalView>) -> &mut Counters {
        let Partitions { tasks, template, unowned, .. } = self;
        match tasks.get_or_create(partition, || template.task_closed_at(new_task_closed_at(template, view))) {
            Some(task) => &mut task.totals.counters,
            None => unowned,
        }
    }

    /// Advances every task whose watermark may move at `now` (its inputs' progress, or the
    /// frontier it follows) to it, finalizing what it passed into its totals; with `None`, the
    /// input has ended and everything pending is finalized.
    pub(super) fn finalize_due(&mut self, now: Option<Instant>, aggregation: &mut Aggregation) {
        let Partitions { tasks, watermarks, state, join, finalize_lanes, .. } = self;
        let mut due: Vec<_> = match now {
            Some(now) => {
                watermarks.update_frontier(tasks.input_clocks(), now);
                let targets = tasks.iter_mut().filter_map(|task| Some((watermarks.target(&task.inputs, now)?, task)));
                targets.collect()
            }
            None => tasks.iter_mut().map(|task| (EventTime::MAX, task)).collect(),
        };
        finalize_due(&mut due, aggregation, state, join, *finalize_lanes);
    }

    /// Drops a partition's task (see `Engine::remove_partition`), with its share of the state.
    pub(super) fn remove(&mut self, partition: i32) {
        if let Some(task) = self.tasks.remove(partition) {
            self.state.subtract(StateSize::of(&task.join));
            self.watermarks.least = self.tasks.least_watermark();
        }
    }
}
