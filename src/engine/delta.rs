//! One partition's changes since its last snapshot, as a delta: what the changelog writes
//! between two full snapshots (see `source::changelog`), so that a checkpoint costs what
//! changed in the join, the part that grows with the attribution window and the traffic, rather
//! than everything it holds.
//!
//! A delta holds the join's changes ([`ShardDelta`]: pending impressions and de-duplication
//! keys added or changed, and the latest that left) and everything else of the task whole, as a
//! snapshot holds it: the input clocks, the totals, the click log and CUPED's state, with the
//! names of the groups they refer to. Applied to the snapshot it follows (and the deltas
//! between), it gives the snapshot the task would have had at the delta's moment
//! ([`TaskSnapshot::apply_delta`]), which is then checked and restored as any snapshot is.
//!
//! A delta follows a snapshot written by the same engine: only an engine that wrote (or
//! restored) the whole task knows what changed since. So a task starts recording changes when
//! a snapshot of it is encoded ([`Engine::snapshot_partition_for_deltas`]), and a task that does
//! not record (just restored, or its last write failed) has no delta to give: the source then
//! writes a snapshot.

use serde::{Deserialize, Serialize};

use super::snapshot::{ClicksTail, CupedTail, GroupName, StateFingerprint, TaskSnapshot};
use super::task::Totals;
use super::telemetry::LaterRejections;
use super::watermark::InputClock;
use super::Engine;
use crate::accumulate::CupedState;
use crate::clicks::log::{ClickLog, LogState, LogStateRef};
use crate::join::{JoinSettings, ShardDelta};
use crate::time::EventTime;

/// One partition's delta as written (borrowed, but for the join's changes).
#[derive(Serialize)]
struct TaskDeltaRef<'a> {
    fingerprint: StateFingerprint,
    partition: i32,
    groups: Vec<GroupName<&'a str>>,
    frontier: Option<EventTime>,
    join: ShardDelta,
    inputs: &'a [InputClock; 2],
    totals: &'a Totals,
    later_rejections: LaterRejections,
    clicks: Option<LogStateRef<'a>>,
    cuped: Option<(Vec<String>, &'a CupedState)>,
}

/// One partition's delta as read back: [`TaskDeltaRef`]'s fields, owned, in the same order.
#[derive(Deserialize)]
pub struct TaskDelta {
    fingerprint: StateFingerprint,
    /// The partition number it is a delta of.
    pub partition: i32,
    groups: Vec<GroupName<String>>,
    frontier: Option<EventTime>,
    join: ShardDelta,
    inputs: [InputClock; 2],
    totals: Totals,
    later_rejections: LaterRejections,
    clicks: Option<LogState>,
    cuped: Option<(Vec<String>, CupedState)>,
}

impl TaskDelta {
    /// What it writes entry by entry (pending impressions, de-duplication keys, held
    /// engagements), for the log.
    pub fn entries(&self) -> [usize; 3] {
        self.join.entries()
    }
}

impl Engine {
    /// A partition's state to write to the changelog, as [`Engine::snapshot_partition`], from
    /// which the task records its changes for [`Engine::delta_partition`].
    pub fn snapshot_partition_for_deltas(&mut self, partition: i32) -> Option<Vec<u8>> {
        let bytes = crate::checkpoint::encode(&self.snapshot_partition(partition)?);
        if let Some(task) = self.tasks.get_mut(partition) {
            task.join.record_changes();
        }
        Some(bytes)
    }

    /// A partition's changes since its last snapshot or delta, encoded as a payload (see
    /// [`crate::checkpoint::encode`]); `None` when the engine holds no task for it or the task
    /// records no changes (a snapshot must carry it).
    pub fn delta_partition(&mut self, partition: i32) -> Option<Vec<u8>> {
        let join = self.tasks.get_mut(partition)?.join.take_delta()?;
        let task = self.tasks.get(partition)?;
        let groups = self.names_of(task, join.pending_groups());
        Some(crate::checkpoint::encode(&TaskDeltaRef {
            fingerprint: self.fingerprint(),
            partition,
            groups,
            frontier: self.watermarks.frontier,
            join,
            inputs: &task.inputs,
            totals: &task.totals,
            later_rejections: task.totals.counters.rejected.later(),
            clicks: task.totals.clicks.as_ref().map(ClickLog::state),
            cuped: task.totals.cuped.as_ref().map(|state| (self.cuped_metric_keys(), state)),
        }))
    }

    /// Stops recording a partition's changes: its last write failed, so the next must be a
    /// snapshot.
    pub fn forget_changes(&mut self, partition: i32) {
        if let Some(task) = self.tasks.get_mut(partition) {
            task.join.stop_recording();
        }
    }
}

impl TaskSnapshot {
    /// Applies a delta written after this snapshot (and the deltas before it, already applied)
    /// by the engine that wrote it: the snapshot becomes the task as it was at the delta.
    /// Refused when the delta is of another partition or configuration, or would make the
    /// join inconsistent; the snapshot is then unusable (partly changed).
    pub fn apply_delta(&mut self, delta: TaskDelta) -> Result<(), String> {
        if delta.partition != self.partition {
            return Err(format!("a delta of partition {} follows a snapshot of {}", delta.partition, self.partition));
        }
        if delta.fingerprint != self.fingerprint {
            return Err("a delta was written with another configuration than the snapshot it follows".into());
        }
        // The delta names the groups of what it holds; the snapshot's pending impressions it
        // does not rewrite may refer to others, named by the snapshot (ids are the writer's).
        for name in delta.groups {
            match self.groups.iter_mut().find(|g| g.id == name.id) {
                Some(known) if known.experiment != name.experiment || known.variant != name.variant => {
                    return Err(format!("group {} is named differently in a delta and its snapshot", name.id));
                }
                Some(known) => known.last_seen = known.last_seen.max(name.last_seen),
                None => self.groups.push(name),
            }
        }
        let settings = JoinSettings { attribution_window: self.fingerprint.attribution_window_ms };
        self.task.join.apply_delta(delta.join, &settings)?;
        self.task.inputs = delta.inputs;
        self.task.totals = delta.totals;
        self.frontier = delta.frontier;
        self.later_rejections = delta.later_rejections;
        self.clicks = ClicksTail(delta.clicks);
        self.cuped = CupedTail(delta.cuped);
        Ok(())
    }
}
