//! One partition's state as a snapshot: what a replica writes to the changelog for each
//! partition it owns, and what whichever replica is assigned the partition next restores.
//!
//! A [`Task`] is self-contained except for its group ids, which are the owning engine's
//! interned numbers: the snapshot carries the names of the groups it refers to, and the
//! restoring engine interns them and renumbers the task's pending impressions and sums.

use std::collections::BTreeSet;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::limits::StateSize;
use super::task::Task;
use super::{watermark, Engine};
use crate::config::AbUnit;
use crate::ids::GroupId;
use crate::time::EventTime;

/// What a snapshot must agree on with the running configuration for its state to mean the
/// same thing: the metric vector, the windows and the attribution window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateFingerprint {
    /// The metric of each accumulator slot, by name.
    pub metric_keys: Vec<String>,
    /// `metrics.windows`, in milliseconds.
    pub window_sizes_ms: Vec<i64>,
    /// `join.attribution_window`: pending impressions' deadlines depend on it.
    pub attribution_window_ms: i64,
    /// `ab.unit` and `ab.unit_buckets` (0 for the impression unit): pending impressions and
    /// accumulators hold bucket numbers that mean nothing under another hashing.
    pub unit_buckets: (AbUnit, u32),
}

/// A group a snapshot or aggregates record refers to, by name (ids are the writing engine's own).
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct GroupName<S> {
    /// The writing engine's id for it.
    id: GroupId,
    experiment: S,
    variant: S,
    /// Its latest impression timestamp, so that label retirement continues where it was.
    last_seen: EventTime,
}

/// One partition's state as written (borrowed, no copy).
#[derive(Serialize)]
struct TaskSnapshotRef<'a> {
    fingerprint: StateFingerprint,
    partition: i32,
    groups: Vec<GroupName<&'a str>>,
    /// The engine's frontier: an idle input of the restored task follows it.
    frontier: Option<EventTime>,
    task: &'a Task,
}

/// One partition's state as read back: [`TaskSnapshotRef`]'s fields, owned, in the same order
/// (postcard is positional).
#[derive(Deserialize)]
pub struct TaskSnapshot {
    fingerprint: StateFingerprint,
    /// The partition number it is the state of.
    pub partition: i32,
    groups: Vec<GroupName<String>>,
    frontier: Option<EventTime>,
    task: Task,
}

impl TaskSnapshot {
    /// Pending impressions in it (for the log).
    pub fn pending_impressions(&self) -> usize {
        self.task.join.pending_len()
    }
}

/// A snapshot that cannot be restored into this configuration.
#[derive(Debug, thiserror::Error)]
#[error("the state was written with a different configuration ({what} differs: snapshot {snapshot}, configuration {configured}); run the configuration it was written with, or use a new changelog topic (and state.dir) to start afresh")]
pub struct RestoreError {
    /// The configuration key that differs.
    what: &'static str,
    /// Its value in the snapshot.
    snapshot: String,
    /// Its value in the running configuration.
    configured: String,
}

impl Engine {
    fn fingerprint(&self) -> StateFingerprint {
        let template = &self.template;
        StateFingerprint {
            metric_keys: self.aggregation.layout.keys().iter().map(|k| k.name()).collect(),
            window_sizes_ms: template.window_sizes_ms.clone(),
            attribution_window_ms: self.join.attribution_window,
            unit_buckets: (self.ab.unit, if self.ab.unit == AbUnit::Impression { 0 } else { self.ab.unit_buckets }),
        }
    }

    /// A partition's state, to write to the changelog: everything that determines its future
    /// output, nothing wall-clock. `None` if the engine holds no task for it.
    pub fn snapshot_partition(&self, partition: i32) -> Option<impl Serialize + '_> {
        let task = self.tasks.get(partition)?;
        let used: BTreeSet<GroupId> = task
            .join
            .pending_groups()
            .chain(task.totals.accumulators.groups())
            .chain(task.totals.recent_closed.iter().flat_map(|w| w.groups.iter().map(|(g, _)| g)))
            .collect();
        let groups = used.into_iter().map(|id| self.group_name(id)).collect();
        Some(TaskSnapshotRef {
            fingerprint: self.fingerprint(),
            partition,
            groups,
            frontier: self.watermarks.frontier,
            task,
        })
    }

    /// Checks that a snapshot was written with this configuration.
    pub fn check_compatible(&self, snapshot: &TaskSnapshot) -> Result<(), RestoreError> {
        let (theirs, ours) = (&snapshot.fingerprint, self.fingerprint());
        let mismatch = |what, a: &dyn std::fmt::Debug, b: &dyn std::fmt::Debug| {
            Err(RestoreError { what, snapshot: format!("{a:?}"), configured: format!("{b:?}") })
        };
        if theirs.metric_keys != ours.metric_keys {
            return mismatch("the metrics (metrics.cutoffs)", &theirs.metric_keys, &ours.metric_keys);
        }
        if theirs.window_sizes_ms != ours.window_sizes_ms {
            return mismatch("metrics.windows (ms)", &theirs.window_sizes_ms, &ours.window_sizes_ms);
        }
        if theirs.attribution_window_ms != ours.attribution_window_ms {
            return mismatch(
                "join.attribution_window (ms)",
                &theirs.attribution_window_ms,
                &ours.attribution_window_ms,
            );
        }
        if theirs.unit_buckets != ours.unit_buckets {
            return mismatch("ab.unit / ab.unit_buckets", &theirs.unit_buckets, &ours.unit_buckets);
        }
        Ok(())
    }

    /// Installs a partition's restored state in place of whatever the engine held for it, and
    /// assigns it (its inputs hold its watermark back until they deliver).
    pub fn restore_partition(&mut self, snapshot: TaskSnapshot, now: Instant) -> Result<(), RestoreError> {
        self.check_compatible(&snapshot)?;
        let TaskSnapshot { partition, groups, frontier, mut task, .. } = snapshot;
        let map = self.intern_names(&groups);
        task.join.remap_groups(&map);
        task.totals.accumulators.remap_groups(&map);
        for window in &mut task.totals.recent_closed {
            window.groups.remap(&map);
        }
        self.install(partition, task, frontier, now)
    }

    /// A group's name, to write beside sums that refer to it by id.
    pub(super) fn group_name(&self, id: GroupId) -> GroupName<&str> {
        let (experiment, variant) = self.groups.name(id);
        GroupName { id, experiment, variant, last_seen: self.groups.last_seen(id) }
    }

    /// Interns groups written by another engine: `map[their id] = our id`.
    pub(super) fn intern_names(&mut self, groups: &[GroupName<String>]) -> Vec<GroupId> {
        let mut map = vec![GroupId::MAX; groups.iter().map(|g| g.id as usize + 1).max().unwrap_or(0)];
        for g in groups {
            map[g.id as usize] = self.groups.intern(&g.experiment, &g.variant, g.last_seen, self.watermarks.least);
        }
        map
    }

    fn install(
        &mut self,
        partition: i32,
        task: Task,
        frontier: Option<EventTime>,
        now: Instant,
    ) -> Result<(), RestoreError> {
        self.remove_partition(partition);
        self.state.add(StateSize::of(&task.join));
        // A frontier is a lower bound on every idle input's progress in the cluster: the
        // restored task's idle inputs may follow the newer of the two.
        self.watermarks.frontier = self.watermarks.frontier.max(frontier);
        self.tasks.insert(partition, task);
        self.assign(partition, now);
        self.watermarks.least = watermark::least(&self.tasks);
        Ok(())
    }
}
