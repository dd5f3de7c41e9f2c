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

use serde::{Deserialize, Serialize};

use super::task::Task;
use super::telemetry::LaterRejections;
use crate::accumulate::CupedState;
use crate::checkpoint::Inconsistency;
use crate::clicks::log::{LogState, LogStateRef};
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
    pub(super) id: GroupId,
    pub(super) experiment: S,
    pub(super) variant: S,
    /// Its latest impression timestamp, so that label retirement continues where it was.
    pub(super) last_seen: EventTime,
}

/// One partition's state as written (borrowed, no copy).
#[derive(Serialize)]
pub(super) struct TaskSnapshotRef<'a> {
    pub(super) fingerprint: StateFingerprint,
    pub(super) partition: i32,
    pub(super) groups: Vec<GroupName<&'a str>>,
    /// The engine's frontier: an idle input of the restored task follows it.
    pub(super) frontier: Option<EventTime>,
    pub(super) task: &'a Task,
    /// Last, so that an older rankpulse leaves it unread (see `telemetry::RejectCounts`).
    pub(super) later_rejections: LaterRejections,
    /// The partition's click log, with `clicks.enabled`; after everything else for the same
    /// reason.
    pub(super) clicks: Option<LogStateRef<'a>>,
    /// The partition's CUPED state with the metric keys it adjusts, with `ab.cuped.metrics`;
    /// last, for the same reason.
    pub(super) cuped: Option<(Vec<String>, &'a CupedState)>,
}

/// One partition's state as read back: [`TaskSnapshotRef`]'s fields, owned, in the same order
/// (postcard is positional).
#[derive(Deserialize)]
pub struct TaskSnapshot {
    pub(super) fingerprint: StateFingerprint,
    /// The partition number it is the state of.
    pub partition: i32,
    pub(super) groups: Vec<GroupName<String>>,
    pub(super) frontier: Option<EventTime>,
    pub(super) task: Task,
    /// Absent (zeros) in a snapshot of format 5.
    pub(super) later_rejections: LaterRejections,
    /// Absent in a snapshot written before the click log existed.
    pub(super) clicks: ClicksTail,
    /// Absent in a snapshot written before CUPED existed.
    pub(super) cuped: CupedTail,
    /// Whether deltas were applied to it (`super::delta`): it was checked in the shape it was
    /// written in, and its click log is open in `task.totals.clicks` (`clicks` is then empty).
    #[serde(skip)]
    pub(super) opened: bool,
}

/// A snapshot's click log, if it has one: a snapshot written before the click log existed
/// ends before it, which reads as none (as [`LaterRejections`] does).
#[derive(Debug, Default)]
pub(super) struct ClicksTail(pub(super) Option<LogState>);

impl<'de> Deserialize<'de> for ClicksTail {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(ClicksTail(Option::<LogState>::deserialize(d).unwrap_or_default()))
    }
}

/// A snapshot's CUPED state and the metric keys it adjusts, if it has one (as [`ClicksTail`]).
#[derive(Debug, Default)]
pub(super) struct CupedTail(pub(super) Option<(Vec<String>, CupedState)>);

impl<'de> Deserialize<'de> for CupedTail {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(CupedTail(Option::<(Vec<String>, CupedState)>::deserialize(d).unwrap_or_default()))
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
