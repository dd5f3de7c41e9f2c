//! One partition's changes since its last snapshot, as a delta: what the changelog writes
//! between two full snapshots (see `source::changelog`), so that a checkpoint costs what
//! changed rather than everything the partition holds.
//!
//! A delta holds the join's changes ([`ShardDelta`]: pending impressions and de-duplication
//! keys added or changed, and the latest that left), the operations on the totals since
//! ([`TotalsLog`]: each finalized impression's gains, the click log's offers, the windows
//! closed), which windows the task keeps for its aggregates records, and the few words written
//! whole: the input clocks and the counters. Applied to the snapshot it follows (and the
//! deltas between) by an engine of the same configuration ([`Engine::apply_delta`]), it gives
//! the snapshot the task would have had at the delta's moment, which is then checked and
//! restored as any snapshot is.
//!
//! A delta follows a snapshot written by the same engine: only an engine that wrote (or
//! restored) the whole task knows what changed since. So a task starts recording changes when
//! a snapshot of it is encoded ([`Engine::snapshot_partition_for_deltas`]), and a task that does
//! not record (just restored, or its last write failed) has no delta
//! to give: the source then writes a snapshot.
//!
//! Deltas of format 6 carried the totals whole; they are still read ([`TaskDeltaV6`]).
//!
//! A delta's bytes are untrusted, as a snapshot's: this file is under the no-panic rule (crate
//! documentation, "Hostile input"). The snapshot a delta applies to is checked before any
//! operation runs on it, each operation's inputs are checked as it runs, and what the deltas
//! make of the snapshot is checked as any snapshot is before it is installed.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};

use super::compat::TaskDeltaV6;
use super::snapshot::TaskSnapshot;
use super::task::{Task, Totals};
use super::telemetry::{Counters, LaterRejections};
use super::totals_log::{Operation, TotalsLog};
use super::watermark::InputClock;
use super::wire::{GroupName, StateFingerprint};
use super::{Engine, RestoreError};
use crate::accumulate::{breakdown, ClosedWindow};
use crate::checkpoint::Inconsistency;
use crate::clicks::log::{ClickLog, Offered};
use crate::ids::GroupId;
use crate::join::{JoinSettings, ShardDelta, ShardDeltaV7};
use crate::time::EventTime;

/// One partition's delta as written (borrowed, but for what it took from the task).
#[derive(Serialize)]
struct TaskDeltaRef<'a> {
    fingerprint: StateFingerprint,
    partition: i32,
    groups: Vec<GroupName<&'a str>>,
    frontier: Option<EventTime>,
    join: ShardDelta,
    inputs: &'a [InputClock; 2],
    counters: &'a Counters,
    later_rejections: LaterRejections,
    totals: TotalsLog,
    /// The windows the task keeps for its aggregates records (`Totals::recent_closed`), by
    /// size index and start, in order: each is one it kept before or one the operations close.
    recent_closed: Vec<(usize, EventTime)>,
}

/// One partition's delta as read back (format 10): [`TaskDeltaRef`]'s fields, owned, in the
/// same order. Format 7's differs in the join's pending impressions only, read with their
/// layout `J` (`super::compat::TaskDeltaV7`).
#[derive(Deserialize)]
pub struct TaskDelta<J = ShardDelta> {
    fingerprint: StateFingerprint,
    /// The partition number it is a delta of.
    pub partition: i32,
    groups: Vec<GroupName<String>>,
    frontier: Option<EventTime>,
    join: J,
    inputs: [InputClock; 2],
    counters: Counters,
    later_rejections: LaterRejections,
    totals: TotalsLog,
    recent_closed: Vec<(usize, EventTime)>,
}

/// A delta of format 7: [`TaskDelta`] but for the layout of its pending impressions (the join's
/// `pending::wire`), upgraded in one step as `super::compat`'s older layouts are.
pub type TaskDeltaV7 = TaskDelta<ShardDeltaV7>;

impl TaskDeltaV7 {
    /// The delta in format 10's layout.
    pub fn upgrade(self) -> TaskDelta {
        self.map_join(ShardDeltaV7::upgrade)
    }
}

/// A delta of any format, as a restore applies it: one of format 6, with the totals whole, or
/// one of the operations on them (format 10's, or format 7's upgraded).
pub enum AnyDelta {
    V6(Box<TaskDeltaV6>),
    Operations(Box<TaskDelta>),
}

impl<J> TaskDelta<J> {
    /// The same delta, its join's part converted by `upgrade` (an older layout's step).
    pub(super) fn map_join<K>(self, upgrade: impl FnOnce(J) -> K) -> TaskDelta<K> {
        let TaskDelta {
            fingerprint,
            partition,
            groups,
            frontier,
            join,
            inputs,
            counters,
            later_rejections,
            totals,
            recent_closed,
        } = self;
        TaskDelta {
            fingerprint,
            partition,
            groups,
            frontier,
            join: upgrade(join),
            inputs,
            counters,
            later_rejections,
            totals,
            recent_closed,
        }
    }
}

impl TaskDelta {
    /// Its parts' encoded sizes, by name: where a delta's bytes go (the volume measurements).
    #[cfg(test)]
    pub fn parts(&self) -> Vec<(&'static str, usize)> {
        let size = |bytes: Vec<u8>| bytes.len();
        let mut parts = vec![
            ("groups", size(crate::checkpoint::encode(&self.groups))),
            ("inputs", size(crate::checkpoint::encode(&self.inputs))),
            ("counters", size(crate::checkpoint::encode(&self.counters))),
            ("totals", size(crate::checkpoint::encode(&self.totals))),
            ("recent_closed", size(crate::checkpoint::encode(&self.recent_closed))),
        ];
        parts.extend(self.join.parts());
        parts.extend(self.totals.parts());
        parts
    }

    /// What it writes entry by entry (pending impressions, de-duplication keys, held
    /// engagements), and the operations on the totals, for the log.
    pub fn entries(&self) -> [usize; 4] {
        let [pending, keys, held] = self.join.entries();
        [pending, keys, held, self.totals.len()]
    }
}

impl Task {
    /// Starts recording changes for a delta: the task as it is now is being written whole.
    fn record_changes(&mut self) {
        self.join.record_changes();
        self.totals.changes = Some(TotalsLog::default());
    }

    /// Stops recording changes: the next record of the task must be a snapshot.
    pub(super) fn stop_recording(&mut self) {
        self.join.stop_recording();
        self.totals.changes = None;
    }
}

impl Engine {
    /// A partition's state to write to the changelog, as [`Engine::snapshot_partition`], from
    /// which the task records its changes for [`Engine::delta_partition`].
    pub fn snapshot_partition_for_deltas(&mut self, partition: i32) -> Option<impl Serialize + '_> {
        // Finalization on threads of their own (replay's) adds to sums of their own, which
        // no operation log sees: such an engine writes snapshots only.
        if self.aggregation.worker.is_none() {
            self.partitions.tasks.get_mut(partition)?.record_changes();
        }
        self.snapshot_partition(partition)
    }

    /// A partition's changes since its last snapshot or delta, to write to the changelog;
    /// `None` when the engine holds no task for it or the task records no changes (a snapshot
    /// must carry it).
    pub fn delta_partition(&mut self, partition: i32) -> Option<impl Serialize + '_> {
        let task = self.partitions.tasks.get_mut(partition)?;
        let totals = std::mem::take(task.totals.changes.as_mut()?);
        let Some(join) = task.join.take_delta() else {
            task.stop_recording();
            return None;
        };
        let task = self.partitions.tasks.get(partition)?;
        let groups = self.names_of(task, join.pending_groups().chain(totals.groups()));
        Some(TaskDeltaRef {
            fingerprint: self.fingerprint(),
            partition,
            groups,
            frontier: self.partitions.watermarks.frontier,
            join,
            inputs: &task.inputs,
            counters: &task.totals.counters,
            later_rejections: task.totals.counters.rejected.later(),
            totals,
            recent_closed: task.totals.recent_closed.iter().map(|w| (w.size_index, w.start)).collect(),
        })
    }

    /// Stops recording a partition's changes: its last write failed, so the next must be a
    /// snapshot.
    pub fn forget_changes(&mut self, partition: i32) {
        if let Some(task) = self.partitions.tasks.get_mut(partition) {
            task.stop_recording();
        }
    }

    /// Applies a delta written after `snapshot` (and the deltas before it, already applied) by
    /// the engine that wrote it: the snapshot becomes the task as it was at the delta. Refused
    /// when the delta is of another partition or configuration, when the snapshot is not one
    /// this configuration restores, or when the delta would make it inconsistent; the
    /// snapshot is then unusable (partly changed).
    pub fn apply_delta(&self, snapshot: &mut TaskSnapshot, delta: AnyDelta) -> Result<(), RestoreError> {
        match delta {
            AnyDelta::V6(delta) => snapshot.apply_delta_v6(*delta),
            AnyDelta::Operations(delta) => self.apply_logged(snapshot, *delta),
        }
    }

    /// [`Engine::apply_delta`] of a delta of format 7.
    fn apply_logged(&self, snapshot: &mut TaskSnapshot, delta: TaskDelta) -> Result<(), RestoreError> {
        snapshot.check_follows(delta.partition, &delta.fingerprint)?;
        if !snapshot.opened {
            self.open_for_deltas(snapshot)?;
        }
        snapshot.merge_names(delta.groups)?;
        let settings = JoinSettings { attribution_window: snapshot.fingerprint.attribution_window_ms };
        snapshot.task.inputs = delta.inputs;
        snapshot.task.totals.counters = delta.counters;
        snapshot.frontier = delta.frontier;
        snapshot.later_rejections = delta.later_rejections;

        let experiments: HashMap<GroupId, Box<str>> =
            snapshot.groups.iter().map(|g| (g.id, Box::from(breakdown::experiment_of(&g.experiment)))).collect();
        let expansions = expansions_of(&snapshot.groups);
        // CUPED's state is replayed in place, and left where the snapshot keeps it.
        let Task { join, totals, .. } = &mut snapshot.task;
        let (cuped_keys, cuped) = snapshot.cuped.take().unzip();
        totals.cuped = cuped;
        // The join's changes, the click log's operations and the other operations touch
        // disjoint state, and in a chain of a large partition each is a second or more: the
        // first two run beside the third, on a thread of their own.
        let mut clicks = totals.clicks.take();
        let mut join_delta = Some(delta.join);
        let log = &delta.totals;
        let mut beside = || {
            let joined = join.apply_delta(join_delta.take()?, &settings);
            if let Some(clicks) = &mut clicks {
                replay_clicks(log, clicks);
            }
            Some(joined)
        };
        let (ran_beside, replayed) = std::thread::scope(|scope| {
            let thread = std::thread::Builder::new().name("rankpulse-replay".into()).spawn_scoped(scope, &mut beside);
            let replayed = self.replay(log, totals, &experiments, &expansions);
            // A panic there is a bug; it surfaces as it would have on this thread.
            let ran = thread.ok().and_then(|t| t.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)));
            (ran, replayed)
        });
        // A thread the system would not start: the same work, after, on this thread.
        let joined = ran_beside.or_else(beside).unwrap_or(Ok(()));
        totals.clicks = clicks;
        snapshot.cuped = cuped_keys.zip(totals.cuped.take());
        joined?;
        let mut closed = replayed?;
        // The windows kept: each one kept before or just closed, in the writer's order.
        let mut pool: Vec<ClosedWindow> = std::mem::take(&mut totals.recent_closed);
        pool.append(&mut closed);
        for (size_index, start) in delta.recent_closed {
            let found = pool.iter().position(|w| w.size_index == size_index && w.start == start).ok_or(
                Inconsistency::Value { what: "a window a delta keeps", expected: "one kept or closed before" },
            )?;
            totals.recent_closed.push(pool.swap_remove(found));
        }
        Ok(())
    }

    /// Runs a delta's operations on the totals of the snapshot it follows, in order, as the
    /// writer ran them: this engine's evaluation adds what the writer's added (its metric
    /// slots start with the writer's, which the totals are shaped by). `experiments` names
    /// each group's experiment (CUPED's pre-period is the experiment's): a group it does not
    /// name is refused, as its id would size the tables; so is a breakdown group without its
    /// `expansions`. Returns the windows closed. The click log's operations are
    /// [`replay_clicks`]'s.
    fn replay(
        &self,
        log: &TotalsLog,
        totals: &mut Totals,
        experiments: &HashMap<GroupId, Box<str>>,
        expansions: &Expansions,
    ) -> Result<Vec<ClosedWindow>, Inconsistency> {
        let evaluation = &self.aggregation.evaluation;
        let named = |group: GroupId| {
            let experiment = experiments
                .get(&group)
                .map(|e| &**e)
                .ok_or(Inconsistency::Unnamed { what: "group", id: group.into() })?;
            match expansions.get(&group) {
                Some(targets) => Ok((experiment, Some(&targets[..]))),
                None if breakdown::is_breakdown(experiment) => {
                    Err(Inconsistency::Unnamed { what: "breakdown group's part", id: group.into() })
                }
                None => Ok((experiment, None)),
            }
        };
        let mut values = vec![0.0; evaluation.slot_count()];
        let mut closed = Vec::new();
        // Staged as the writer's finalization lanes stage (`engine::offload`): an impression is
        // added once to its group's staged sums instead of to the cumulative table and each of
        // its windows, and the sums come out the same (`Accumulators::stage`). Unstaged below,
        // whatever the outcome, before anything reads the tables' fields.
        totals.accumulators.stage();
        let replayed = self.replay_staged(log, totals, &named, &mut values, &mut closed);
        totals.accumulators.unstage();
        replayed.map(|()| closed)
    }

    /// [`Engine::replay`]'s operations, run with the accumulators staged.
    fn replay_staged<'e>(
        &self,
        log: &TotalsLog,
        totals: &mut Totals,
        named: &impl Fn(GroupId) -> Result<(&'e str, Option<&'e [GroupId]>), Inconsistency>,
        values: &mut [f64],
        closed: &mut Vec<ClosedWindow>,
    ) -> Result<(), Inconsistency> {
        let evaluation = &self.aggregation.evaluation;
        for operation in log.operations() {
            match operation? {
                // The click log's, run by `replay_clicks` (the log is not in `totals` here).
                Operation::Offered { .. } => {}
                Operation::Judged { group, timestamp, unit, first, values } => {
                    let targets = named(group)?.1.unwrap_or(std::slice::from_ref(&group));
                    for &target in targets {
                        totals.accumulators.add_sums(target, timestamp, first, values, unit);
                    }
                }
                Operation::Finalized(f) => {
                    let (experiment, targets) = named(f.group)?;
                    let targets = targets.unwrap_or(std::slice::from_ref(&f.group));
                    // Gains beyond the configuration's make values the exact sums cannot hold.
                    let max_gain = self.aggregation.layout().max_gain();
                    if let Some(&gain) = f.gains.iter().find(|&&g| g > max_gain) {
                        return Err(Inconsistency::Beyond {
                            what: "a finalized impression's gain",
                            index: gain.into(),
                            limit: "the largest of metrics.action_gains, plus one",
                            count: u64::from(max_gain) + 1,
                        });
                    }
                    evaluation.add_as(values, totals, &f, experiment, targets);
                }
                Operation::Closed(watermark) => totals.accumulators.close_windows(watermark, |w| closed.push(w)),
                Operation::Retired(group) => {
                    totals.accumulators.retire(group);
                    if let Some(cuped) = &mut totals.cuped {
                        cuped.retire(group);
                    }
                }
            }
        }
        Ok(())
    }

    /// Checks a snapshot before the first delta's operations run on it, as a restore checks it
    /// but in the shape it was written in (a configuration that adds metric blocks widens it
    /// only after: the operations add what the writer added), and opens its click log.
    fn open_for_deltas(&self, snapshot: &mut TaskSnapshot) -> Result<(), RestoreError> {
        let partition = snapshot.partition;
        self.check_replayable(partition, snapshot)?;
        if let (Some(settings), Some(state)) = (self.partitions.template.clicks, snapshot.clicks.take()) {
            snapshot.task.totals.clicks = Some(ClickLog::restore(settings, state)?);
        }
        let keys = self.cuped_metric_keys();
        if self.partitions.template.cuped.is_none()
            || snapshot.cuped.as_ref().is_some_and(|(written, _)| *written != keys)
        {
            // Dropped at the restore: not worth replaying into.
            snapshot.cuped = None;
        }
        snapshot.opened = true;
        Ok(())
    }
}

/// By the writer's group id, where an impression of a breakdown group is added.
type Expansions = HashMap<GroupId, Vec<GroupId>>;

/// The expansions of the breakdown groups among a state's names, by the writer's ids: the
/// experiment's group and each part, found by their names (which the writer names with every
/// breakdown group, `Engine::names_of`). One whose groups are not all named is left out.
fn expansions_of(groups: &[GroupName<String>]) -> Expansions {
    let ids: HashMap<(&str, &str), GroupId> =
        groups.iter().map(|g| ((g.experiment.as_str(), g.variant.as_str()), g.id)).collect();
    let mut expansions = Expansions::new();
    for group in groups {
        let Some((experiment, pairs)) = breakdown::parse(&group.experiment) else { continue };
        let variant = group.variant.as_str();
        let parts = pairs.iter().map(|(dimension, value)| {
            let part = breakdown::part_name(experiment, dimension, value);
            ids.get(&(part.as_str(), variant)).copied()
        });
        let targets: Option<Vec<GroupId>> =
            std::iter::once(ids.get(&(experiment, variant)).copied()).chain(parts).collect();
        if let Some(targets) = targets {
            expansions.insert(group.id, targets);
        }
    }
    expansions
}

/// The click log's part of a delta's operations, in order: the impressions offered to it and
/// those finalized (`Evaluation::add_as` finalizes them in the log first, and nothing else it
/// does reads the log). Stops at an operation that does not read: the other operations' replay
/// refuses the delta for it.
fn replay_clicks(log: &TotalsLog, clicks: &mut ClickLog) {
    for operation in log.operations() {
        match operation {
            Ok(Operation::Offered { query, text, segment, docs, names }) => {
                let doc_name = |rank: usize| names.get(rank).copied().unwrap_or("");
                clicks.offer(query, &Offered { query: text, segment, docs, doc_name: &doc_name });
            }
            Ok(Operation::Finalized(f)) => clicks.finalize(f.query, f.timestamp, f.gains),
            Ok(Operation::Judged { .. } | Operation::Closed(_) | Operation::Retired(_)) => {}
            Err(_) => return,
        }
    }
}

impl TaskSnapshot {
    /// Checks that a delta of `partition` written with `fingerprint` may follow this snapshot.
    fn check_follows(&self, partition: i32, fingerprint: &StateFingerprint) -> Result<(), RestoreError> {
        if partition != self.partition {
            return Err(RestoreError::Partition { found: partition, expected: self.partition });
        }
        if *fingerprint != self.fingerprint {
            let what = "the configuration a delta was written with";
            return Err(Inconsistency::Value { what, expected: "its snapshot's" }.into());
        }
        Ok(())
    }

    /// Keeps the names the state still refers to, as a snapshot taken now would carry: a
    /// group retired since the snapshot is interned by no restore (where it would take room
    /// under the label limits, and fold a newer group into `FOLDED`). Once after the last
    /// delta (`Engine::check_compatible`), not after each: it visits every pending impression,
    /// and a chain of 167 deltas over 1.8M of them spent most of its restore here. A group a
    /// delta left unused and a later one used again is named by the later one's names, so the
    /// names kept are the same.
    pub(super) fn drop_unused_names(&mut self) {
        let task = &self.task;
        let cuped = self.cuped.iter().flat_map(|(_, state)| state.groups());
        let recent = task.totals.recent_closed.iter().flat_map(|w| w.groups.iter().map(|(g, _)| g));
        let used: HashSet<GroupId> =
            task.join.pending_groups().chain(task.totals.accumulators.groups()).chain(recent).chain(cuped).collect();
        self.groups.retain(|g| used.contains(&g.id));
    }

    /// Takes the names of the groups a delta refers to: the snapshot's parts it does not
    /// rewrite may refer to others, named by the snapshot (ids are the writer's).
    fn merge_names(&mut self, names: Vec<GroupName<String>>) -> Result<(), Inconsistency> {
        for name in names {
            match self.groups.iter_mut().find(|g| g.id == name.id) {
                Some(known) if known.experiment != name.experiment || known.variant != name.variant => {
                    return Err(Inconsistency::Value { what: "a group's name in a delta", expected: "its snapshot's" });
                }
                Some(known) => known.last_seen = known.last_seen.max(name.last_seen),
                None => self.groups.push(name),
            }
        }
        Ok(())
    }

    /// Applies a delta of format 6, whose totals are whole.
    fn apply_delta_v6(&mut self, delta: TaskDeltaV6) -> Result<(), RestoreError> {
        self.check_follows(delta.partition, &delta.fingerprint)?;
        if self.opened {
            // A chain is written by one build: format 7 deltas never precede format 6 ones.
            let what = "a delta of format 6";
            return Err(Inconsistency::Value { what, expected: "before any of format 7" }.into());
        }
        self.merge_names(delta.groups)?;
        let settings = JoinSettings { attribution_window: self.fingerprint.attribution_window_ms };
        self.task.join.apply_delta(delta.join.upgrade(), &settings)?;
        self.task.inputs = delta.inputs;
        self.task.totals = Totals::from_record(delta.totals);
        self.frontier = delta.frontier;
        self.later_rejections = delta.later_rejections;
        self.clicks = delta.clicks;
        self.cuped = delta.cuped;
        Ok(())
    }
}

#[cfg(test)]
impl Engine {
    /// A task's parts by name, each with its size encoded (or its length): what tests compare
    /// between a restored task and the one that never stopped. Pending impressions are equal
    /// as a set, not in their layout (a restore may hold them in another order of runs),
    /// so only their count is a part.
    pub fn state_parts(&self, partition: i32) -> Vec<(&'static str, usize)> {
        let task = self.partitions.tasks.get(partition).unwrap();
        let enc = |b: Vec<u8>| b.len();
        vec![
            ("inputs", enc(crate::checkpoint::encode(&task.inputs))),
            ("cumulative", enc(crate::checkpoint::encode(&task.totals.accumulators.cumulative))),
            ("accumulators", enc(crate::checkpoint::encode(&task.totals.accumulators.record()))),
            ("counters", enc(crate::checkpoint::encode(&task.totals.counters))),
            ("delay", enc(crate::checkpoint::encode(&task.totals.first_engagement_delay))),
            ("recent", enc(crate::checkpoint::encode(&task.totals.recent_closed))),
            ("recent_n", task.totals.recent_closed.len()),
            ("clicks", task.totals.clicks.as_ref().map_or(0, |c| crate::checkpoint::encode(&c.state()).len())),
            ("cuped", task.totals.cuped.as_ref().map_or(0, |c| crate::checkpoint::encode(c).len())),
            ("groups", self.names_of(task, std::iter::empty()).len()),
        ]
        .into_iter()
        .chain(task.join.state_parts())
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::checkpoint;
    use crate::config::{AbUnit, Config};
    use crate::event::EventKind;
    use crate::experiments::breakdown::Which;

    /// Feeds impressions `from..to` (client units, some clicked, some engaged before they
    /// arrive, some redelivered) and advances.
    fn feed(engine: &mut Engine, from: usize, to: usize) {
        let now = Instant::now();
        for i in from..to {
            let ts = 1_000_000 + i as i64 * 700;
            let variant = ["control", "treatment"][i % 2];
            let impression = format!(
                r#"{{"query_id":"q{i}","timestamp":{ts},"results":["a","b","c"],"experiment":"e","variant":"{variant}","client_id":"c{}","query":"text {}","segment":"s{}","dimensions":{{"market":"m{}"}}}}"#,
                i % 13,
                i % 7,
                i % 3,
                (i / 2) % 4
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

    fn decoded(delta: &[u8]) -> AnyDelta {
        AnyDelta::Operations(Box::new(checkpoint::decode(delta).unwrap()))
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

    /// [`config`] with two dimensions (`ab.dimensions`), one of them limited to 3 values.
    fn with_dimensions() -> Config {
        let mut cfg = config();
        cfg.ab.dimensions = vec!["segment".into(), "market".into()];
        cfg.ab.max_dimension_values = 3;
        cfg
    }

    #[test]
    fn a_snapshot_with_its_deltas_restores_the_partition_and_it_goes_on_alike() {
        for cfg in [config(), with_dimensions()] {
            restores_alike(&cfg);
        }
    }

    fn restores_alike(cfg: &Config) {
        let cfg = cfg.clone();
        let mut live = Engine::new(&cfg).without_past_limit();
        feed(&mut live, 0, 300);
        let base = checkpoint::encode(&live.snapshot_partition_for_deltas(0).unwrap());
        let mut deltas = Vec::new();
        for (from, to) in [(300, 420), (420, 430), (430, 700)] {
            feed(&mut live, from, to);
            deltas.push(checkpoint::encode(&live.delta_partition(0).unwrap()));
        }

        let mut snapshot: TaskSnapshot = checkpoint::decode(&base).unwrap();
        let mut restored = Engine::new(&cfg).without_past_limit();
        for delta in &deltas {
            restored.apply_delta(&mut snapshot, decoded(delta)).unwrap();
        }
        restored.check_compatible(0, &mut snapshot).unwrap();
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
        let breakdowns = live.cumulative().iter().filter(|&(g, _)| live.groups().is_breakdown(g)).count();
        // Per variant: 3 segments; 3 markets and `other` for the fourth.
        assert_eq!(breakdowns, if cfg.ab.dimensions.is_empty() { 0 } else { 2 * (3 + 4) }, "{:?}", cfg.ab.dimensions);
        // The anytime-valid figures are the looks', which the experiment-wide view keeps (in
        // partition 0's aggregates records), not a partition's snapshot.
        fn without_looks(value: &mut serde_json::Value) {
            match value {
                serde_json::Value::Object(map) => {
                    map.retain(|k, _| {
                        !(k.contains("always_valid")
                            || k.contains("_cs")
                            || k.contains("sequential")
                            || k == "notes"
                            || k.ends_with("significant_at"))
                    });
                    map.values_mut().for_each(without_looks);
                }
                serde_json::Value::Array(items) => items.iter_mut().for_each(without_looks),
                _ => {}
            }
        }
        let report = |e: &Engine| {
            let mut value = serde_json::to_value(e.dimensions_report("e", Which::All)).unwrap();
            without_looks(&mut value);
            serde_json::to_string_pretty(&value).unwrap()
        };
        let (restored, live) = (report(&restored), report(&live));
        let differs = restored.lines().zip(live.lines()).position(|(r, l)| r != l);
        assert!(differs.is_none(), "the dimensions reports differ from line {differs:?}: {}", {
            let at = differs.unwrap_or(0).saturating_sub(30);
            let context = |s: &str| s.lines().skip(at).take(32).collect::<Vec<_>>().join("\n");
            format!("restored:\n{}\nlive:\n{}", context(&restored), context(&live))
        });
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
    fn a_label_group_retired_between_snapshots_leaves_the_restored_totals_alike() {
        // One experiment at a time: a new one retires a group idle for a minute of event time
        // to make room (until then its impressions are folded).
        let mut cfg = config();
        cfg.labels.idle_expiry = crate::time::HumanDuration::from_millis(60_000);
        cfg.labels.max_experiments = 1;
        let mut live = Engine::new(&cfg).without_past_limit();
        let now = Instant::now();
        let impression = |i: i64, experiment: &str| {
            format!(
                r#"{{"query_id":"r{i}","timestamp":{},"results":["a","b"],"experiment":"{experiment}","variant":"v","client_id":"c{}","query":"q"}}"#,
                1_000_000 + i * 1_000,
                i % 5
            )
        };
        for i in 0..40 {
            live.process(EventKind::Impression, 0, impression(i, "early").as_bytes(), now).unwrap();
        }
        live.advance(now);
        let base = checkpoint::encode(&live.snapshot_partition_for_deltas(0).unwrap());
        let mut deltas = Vec::new();
        // "early" goes idle while "late" goes on, for three minutes: "early" retires.
        for minute in 0..3 {
            for i in 40 + minute * 60..100 + minute * 60 {
                live.process(EventKind::Impression, 0, impression(i, "late").as_bytes(), now).unwrap();
            }
            live.advance(now);
            deltas.push(checkpoint::encode(&live.delta_partition(0).unwrap()));
        }
        let early = live.groups().id_of("early", "v");
        assert!(early.is_none(), "the idle group retired");

        let mut snapshot: TaskSnapshot = checkpoint::decode(&base).unwrap();
        let mut restored = Engine::new(&cfg).without_past_limit();
        for delta in &deltas {
            restored.apply_delta(&mut snapshot, decoded(delta)).unwrap();
        }
        restored.check_compatible(0, &mut snapshot).unwrap();
        restored.restore_partition(0, snapshot, Instant::now()).unwrap();
        // The sums' tables are indexed by group id, which the restore renumbered (the retired
        // id is gone): compared by name below, everything else as it is.
        let parts = |e: &Engine| {
            let by_id = |part: &&str| *part == "cumulative" || *part == "accumulators";
            e.state_parts(0).into_iter().filter(|(part, _)| !by_id(part)).collect::<Vec<_>>()
        };
        assert_eq!(parts(&restored), parts(&live));
        // Each group's sums under its name: a group retired since the snapshot is not restored
        // (under the limit of one experiment it would fold the newer one into `FOLDED`).
        let names = |e: &Engine| {
            let table = e.cumulative();
            let named = table.iter().map(|(g, s)| (e.groups().name(g).0.to_string(), s.impressions));
            named.collect::<std::collections::BTreeMap<_, _>>()
        };
        assert_eq!(names(&restored), names(&live));
        assert!(names(&live).contains_key("late"));
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
        let err = engine.apply_delta(&mut snapshot, decoded(&delta)).unwrap_err();
        assert!(matches!(err, RestoreError::Partition { found: 0, expected: 3 }), "{err}");
        let mut snapshot: TaskSnapshot = checkpoint::decode(&base).unwrap();
        snapshot.fingerprint.attribution_window_ms += 1;
        let err = engine.apply_delta(&mut snapshot, decoded(&delta)).unwrap_err();
        assert!(err.to_string().contains("the configuration a delta was written with is not its snapshot's"), "{err}");
        // A task that records no changes (restored, or never snapshotted for deltas) has none.
        let mut other = Engine::new(&cfg).without_past_limit();
        feed(&mut other, 0, 5);
        assert!(other.delta_partition(0).is_none());
    }
}
