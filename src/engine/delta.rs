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
//!
//! A delta's bytes are untrusted, as a snapshot's: this file is under the no-panic rule (crate
//! documentation, "Hostile input"), and what a delta makes of a snapshot is checked as any
//! snapshot is before it is installed.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]

use serde::{Deserialize, Serialize};

use super::snapshot::{ClicksTail, CupedTail, GroupName, StateFingerprint, TaskSnapshot};
use super::task::Totals;
use super::telemetry::LaterRejections;
use super::watermark::InputClock;
use super::{Engine, RestoreError};
use crate::accumulate::CupedState;
use crate::checkpoint::Inconsistency;
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
    pub fn snapshot_partition_for_deltas(&mut self, partition: i32) -> Option<impl Serialize + '_> {
        self.tasks.get_mut(partition)?.join.record_changes();
        self.snapshot_partition(partition)
    }

    /// A partition's changes since its last snapshot or delta, to write to the changelog;
    /// `None` when the engine holds no task for it or the task records no changes (a snapshot
    /// must carry it).
    pub fn delta_partition(&mut self, partition: i32) -> Option<impl Serialize + '_> {
        let join = self.tasks.get_mut(partition)?.join.take_delta()?;
        let task = self.tasks.get(partition)?;
        let groups = self.names_of(task, join.pending_groups());
        Some(TaskDeltaRef {
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
        })
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
    pub fn apply_delta(&mut self, delta: TaskDelta) -> Result<(), RestoreError> {
        if delta.partition != self.partition {
            return Err(RestoreError::Partition { found: delta.partition, expected: self.partition });
        }
        if delta.fingerprint != self.fingerprint {
            let what = "the configuration a delta was written with";
            return Err(Inconsistency::Value { what, expected: "its snapshot's" }.into());
        }
        // The delta names the groups of what it holds; the snapshot's pending impressions it
        // does not rewrite may refer to others, named by the snapshot (ids are the writer's).
        for name in delta.groups {
            match self.groups.iter_mut().find(|g| g.id == name.id) {
                Some(known) if known.experiment != name.experiment || known.variant != name.variant => {
                    return Err(
                        Inconsistency::Value { what: "a group's name in a delta", expected: "its snapshot's" }.into()
                    );
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

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::checkpoint;
    use crate::config::{AbUnit, Config};
    use crate::event::EventKind;

    /// Feeds impressions `from..to` (client units, some clicked, some engaged before they
    /// arrive, some redelivered) and advances.
    fn feed(engine: &mut Engine, from: usize, to: usize) {
        let now = Instant::now();
        for i in from..to {
            let ts = 1_000_000 + i as i64 * 700;
            let variant = ["control", "treatment"][i % 2];
            let impression = format!(
                r#"{{"query_id":"q{i}","timestamp":{ts},"results":["a","b","c"],"experiment":"e","variant":"{variant}","client_id":"c{}","query":"text {}"}}"#,
                i % 13,
                i % 7
            );
            let click = format!(
                r#"{{"query_id":"q{i}","timestamp":{},"doc_id":"{}","event_id":"k{i}"}}"#,
                ts + 500,
                ["a", "b", "c"][i % 3]
            );
            if i % 5 == 0 {
                engine.process(EventKind::Engagement, 0, click.as_bytes(), now).unwrap();
            }
            engine.process(EventKind::Impression, 0, impression.as_bytes(), now).unwrap();
            if i % 3 != 0 {
                engine.process(EventKind::Engagement, 0, click.as_bytes(), now).unwrap();
            }
        }
        engine.advance(now);
    }

    fn config() -> Config {
        let mut cfg = Config::default();
        cfg.ab.unit = AbUnit::ClientId;
        cfg.ab.cuped.metrics = vec!["mrr".into()];
        cfg.clicks.enabled = true;
        cfg.join.attribution_window = crate::time::HumanDuration::from_millis(30_000);
        cfg.metrics.windows = vec![crate::time::HumanDuration::from_millis(60_000)];
        cfg
    }

    #[test]
    fn a_snapshot_with_its_deltas_restores_the_partition_and_it_goes_on_alike() {
        let cfg = config();
        let mut live = Engine::new(&cfg).without_past_limit();
        feed(&mut live, 0, 300);
        let base = checkpoint::encode(&live.snapshot_partition_for_deltas(0).unwrap());
        let mut deltas = Vec::new();
        for (from, to) in [(300, 420), (420, 430), (430, 700)] {
            feed(&mut live, from, to);
            deltas.push(checkpoint::encode(&live.delta_partition(0).unwrap()));
        }

        let mut snapshot: TaskSnapshot = checkpoint::decode(&base).unwrap();
        for delta in &deltas {
            snapshot.apply_delta(checkpoint::decode(delta).unwrap()).unwrap();
        }
        let mut restored = Engine::new(&cfg).without_past_limit();
        restored.restore_partition(0, snapshot, Instant::now()).unwrap();
        assert_eq!(restored.pending_impressions(), live.pending_impressions());
        assert_eq!(restored.cumulative(), live.cumulative());
        // What each writes next is the same state.
        let again = |e: &Engine| checkpoint::encode(&e.snapshot_partition(0).unwrap());
        assert_eq!(again(&restored).len(), again(&live).len());
        feed(&mut live, 700, 900);
        feed(&mut restored, 700, 900);
        live.finish();
        restored.finish();
        assert_eq!(restored.cumulative(), live.cumulative());
        assert_eq!(restored.counters().consumed, live.counters().consumed);
    }

    #[test]
    fn with_the_shipped_defaults_a_delta_costs_what_changed() {
        // A 30-minute attribution window: everything fed stays pending.
        let mut engine = Engine::new(&Config::default()).without_past_limit();
        feed(&mut engine, 0, 2_000);
        let whole = checkpoint::encode(&engine.snapshot_partition_for_deltas(0).unwrap()).len();
        feed(&mut engine, 2_000, 2_020);
        let delta = checkpoint::encode(&engine.delta_partition(0).unwrap()).len();
        assert!(delta * 20 < whole, "a delta of 20 impressions is {delta} bytes, the snapshot of 2,000 {whole}");
    }

    #[test]
    fn a_delta_of_another_partition_or_configuration_is_refused() {
        let cfg = config();
        let mut engine = Engine::new(&cfg).without_past_limit();
        feed(&mut engine, 0, 50);
        let base = checkpoint::encode(&engine.snapshot_partition_for_deltas(0).unwrap());
        feed(&mut engine, 50, 60);
        let delta = checkpoint::encode(&engine.delta_partition(0).unwrap());
        let mut snapshot: TaskSnapshot = checkpoint::decode(&base).unwrap();
        snapshot.partition = 3;
        let err = snapshot.apply_delta(checkpoint::decode(&delta).unwrap()).unwrap_err();
        assert!(matches!(err, RestoreError::Partition { found: 0, expected: 3 }), "{err}");
        let mut snapshot: TaskSnapshot = checkpoint::decode(&base).unwrap();
        snapshot.fingerprint.attribution_window_ms += 1;
        let err = snapshot.apply_delta(checkpoint::decode(&delta).unwrap()).unwrap_err();
        assert!(err.to_string().contains("the configuration a delta was written with is not its snapshot's"), "{err}");
        // A task that records no changes (restored, or never snapshotted for deltas) has none.
        let mut other = Engine::new(&cfg).without_past_limit();
        feed(&mut other, 0, 5);
        assert!(other.delta_partition(0).is_none());
    }
}
