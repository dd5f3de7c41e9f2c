//! One partition's state as a snapshot: what a replica writes to the changelog for each
//! partition it owns, and what whichever replica is assigned the partition next restores.
//!
//! A [`Task`] is self-contained except for its group ids, which are the owning engine's
//! interned numbers: the snapshot carries the names of the groups it refers to, and the
//! restoring engine interns them and renumbers the task's pending impressions and sums.
//!
//! A snapshot's bytes are untrusted (the checksum is no signature): this file is under the
//! no-panic rule (crate documentation, "Hostile input"), and [`Engine::check_compatible`] checks
//! a snapshot's consistency before anything of it is installed.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]

use std::collections::HashSet;

use serde::Deserialize;

use super::compat::{TaskRecordV5, TaskRecordV7};
use super::task::{Task, Totals};
use super::telemetry::LaterRejections;
use super::wire::{GroupName, StateFingerprint, TaskRecord};
use crate::accumulate::CupedState;
use crate::checkpoint::Inconsistency;
use crate::clicks::log::LogState;
use crate::ids::GroupId;
use crate::join::Shard;
use crate::time::EventTime;

/// One partition's state as read back, in the in-memory types a restore installs: the task
/// record (`super::wire`) of any format this build reads, converted. Those of formats 5 to 7
/// are upgraded first (`super::compat`).
#[derive(Deserialize)]
#[serde(from = "TaskRecord")]
pub struct TaskSnapshot {
    pub(super) fingerprint: StateFingerprint,
    /// The partition number it is the state of.
    pub partition: i32,
    pub(super) groups: Vec<GroupName<String>>,
    pub(super) frontier: Option<EventTime>,
    pub(super) task: Task,
    pub(super) later_rejections: LaterRejections,
    /// The click log, if the writer kept one (`task.totals.clicks` stays empty until the
    /// restore opens it).
    pub(super) clicks: Option<LogState>,
    /// CUPED's state and the metric keys it adjusts, if the writer kept one.
    pub(super) cuped: Option<(Vec<String>, CupedState)>,
    /// Whether deltas were applied to it (`super::delta`): it was checked in the shape it was
    /// written in, and its click log is open in `task.totals.clicks` (`clicks` is then empty).
    pub(super) opened: bool,
}

impl From<TaskRecordV5> for TaskSnapshot {
    /// A format 5 snapshot, upgraded to format 10's task record and converted.
    fn from(record: TaskRecordV5) -> Self {
        TaskSnapshot::from(record.upgrade())
    }
}

impl From<TaskRecordV7> for TaskSnapshot {
    /// A format 6 or 7 snapshot, upgraded to format 10's task record and converted.
    fn from(record: TaskRecordV7) -> Self {
        TaskSnapshot::from(record.upgrade())
    }
}

impl From<TaskRecord> for TaskSnapshot {
    fn from(record: TaskRecord) -> Self {
        let TaskRecord {
            fingerprint,
            partition,
            groups,
            frontier,
            join,
            inputs,
            totals,
            later_rejections,
            clicks,
            cuped,
        } = record;
        let mut task = Task::new(Totals::from_record(totals));
        task.join = Shard::from_record(join);
        task.inputs = inputs;
        TaskSnapshot { fingerprint, partition, groups, frontier, task, later_rejections, clicks, cuped, opened: false }
    }
}

impl TaskSnapshot {
    /// Pending impressions in it (for the log).
    pub fn pending_impressions(&self) -> usize {
        self.task.join.pending_len()
    }
}

/// A snapshot that cannot be restored into this configuration.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    #[error("the state was written with a different configuration ({what} differs: snapshot {snapshot}, configuration {configured}); run the configuration it was written with, or set a new state.changelog_topic to start afresh")]
    Configuration {
        /// The configuration key that differs.
        what: &'static str,
        /// Its value in the snapshot.
        snapshot: String,
        /// Its value in the running configuration.
        configured: String,
    },
    #[error(
        "the snapshot is of partition {found}, not of partition {expected} whose changelog partition it was read from"
    )]
    Partition { found: i32, expected: i32 },
    #[error("the snapshot is inconsistent ({0}): damaged or forged, though its checksum matches")]
    Inconsistent(#[from] Inconsistency),
}

/// Checks that every group id state refers to is named once beside it (a snapshot's or an
/// aggregates record's `groups`), so that renumbering leaves none behind.
pub(super) fn check_named<S>(
    names: &[GroupName<S>],
    mut used: impl Iterator<Item = GroupId>,
) -> Result<(), Inconsistency> {
    let named: HashSet<GroupId> = names.iter().map(|g| g.id).collect();
    if named.len() != names.len() {
        return Err(Inconsistency::Twice { what: "a group id is named" });
    }
    if let Some(group) = used.find(|group| !named.contains(group)) {
        return Err(Inconsistency::Unnamed { what: "group", id: group.into() });
    }
    Ok(())
}
