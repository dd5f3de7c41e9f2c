//! A partition's snapshot taken of the [`Engine`], and a snapshot checked against the
//! engine's configuration and restored into it: the engine's side of [`super::snapshot`].
//!
//! A snapshot's bytes are untrusted (the checksum is no signature): this file is under the
//! no-panic rule (crate documentation, "Hostile input"), and [`Engine::check_compatible`] checks
//! a snapshot's consistency before anything of it is installed.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]

use std::collections::BTreeSet;
use std::time::Instant;

use serde::Serialize;

use super::snapshot::{check_named, RestoreError, TaskSnapshot};
use super::task::{StateSize, Task};
use super::wire::{GroupName, StateFingerprint, TaskRecordRef};
use super::Engine;
use crate::accumulate::{CupedState, StatsShape};
use crate::checkpoint::Inconsistency;
use crate::clicks::log::ClickLog;
use crate::config::AbUnit;
use crate::ids::{GroupId, GroupMap};
use crate::time::EventTime;

impl Engine {
    pub(super) fn fingerprint(&self) -> StateFingerprint {
        let template = &self.partitions.template;
        StateFingerprint {
            metric_keys: self.aggregation.layout().slot_names(),
            window_sizes_ms: template.window_sizes_ms.clone(),
            attribution_window_ms: self.partitions.join.attribution_window,
            unit_buckets: (self.ab.unit, if self.ab.unit == AbUnit::Impression { 0 } else { self.ab.unit_buckets }),
        }
    }

    /// A partition's state, to write to the changelog: everything that determines its future
    /// output, nothing wall-clock. `None` if the engine holds no task for it.
    pub fn snapshot_partition(&self, partition: i32) -> Option<impl Serialize + '_> {
        let task = self.partitions.tasks.get(partition)?;
        let groups = self.names_of(task, std::iter::empty());
        Some(TaskRecordRef {
            fingerprint: self.fingerprint(),
            partition,
            groups,
            frontier: self.partitions.watermarks.frontier,
            join: task.join.record(),
            inputs: &task.inputs,
            totals: task.totals.record(),
            later_rejections: task.totals.counters.rejected.later(),
            clicks: task.totals.clicks.as_ref().map(ClickLog::state),
            cuped: task.totals.cuped.as_ref().map(|state| (self.cuped_metric_keys(), state)),
        })
    }

    /// Checks that a snapshot is of `partition` and was written with this configuration. A
    /// snapshot written without the interleaving sums or the judged block (before they
    /// existed, or with `interleaving.max_rankers = 0` or no `judgments.file`) is widened to
    /// this configuration's first: it counted nothing in them, so their sums are 0.
    pub fn check_compatible(&self, partition: i32, snapshot: &mut TaskSnapshot) -> Result<(), RestoreError> {
        if snapshot.opened {
            snapshot.drop_unused_names();
        }
        if let Some(from) = self.check_fingerprint(partition, snapshot)? {
            let to = self.partitions.template.shape.metrics;
            snapshot.task.totals.accumulators.widen(from, to);
            for window in &mut snapshot.task.totals.recent_closed {
                window.groups.widen(from, to);
            }
            snapshot.fingerprint.metric_keys = self.aggregation.layout().slot_names();
        }
        Ok(self.check_consistent(snapshot, self.partitions.template.shape)?)
    }

    /// [`Engine::check_compatible`] but for the widening: the snapshot is checked in the shape
    /// it was written in, for the operations of deltas to run on it (`super::delta`).
    pub(super) fn check_replayable(&self, partition: i32, snapshot: &TaskSnapshot) -> Result<(), RestoreError> {
        let from = self.check_fingerprint(partition, snapshot)?;
        let shape = StatsShape {
            metrics: from.unwrap_or(self.partitions.template.shape.metrics),
            ..self.partitions.template.shape
        };
        Ok(self.check_consistent(snapshot, shape)?)
    }

    /// Checks that a snapshot is of `partition` and was written with this configuration, or
    /// with its metric slots but for blocks this one adds: then `Some` of the slots it has.
    fn check_fingerprint(&self, partition: i32, snapshot: &TaskSnapshot) -> Result<Option<usize>, RestoreError> {
        let ours = self.fingerprint();
        let mismatch = |what, a: &dyn std::fmt::Debug, b: &dyn std::fmt::Debug| {
            Err(RestoreError::Configuration { what, snapshot: format!("{a:?}"), configured: format!("{b:?}") })
        };
        // A snapshot of another partition (read from the wrong changelog partition, or forged)
        // must not replace that partition's state, nor size the engine's tables by its number.
        if snapshot.partition != partition {
            return Err(RestoreError::Partition { found: snapshot.partition, expected: partition });
        }
        let theirs = &snapshot.fingerprint;
        let widens_from = self.aggregation.layout().widens_from(&theirs.metric_keys);
        if widens_from.is_none() && theirs.metric_keys != ours.metric_keys {
            return mismatch(
                "the metrics (metrics.cutoffs, interleaving.max_rankers, judgments.relevance_threshold, judgments.max_grade, judgments.incomplete_measures)",
                &theirs.metric_keys,
                &ours.metric_keys,
            );
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
        Ok(widens_from)
    }

    /// What a snapshot's bytes could say that no rankpulse writes, checked before anything is
    /// installed: the checksum only tells that bytes arrived as written, not who wrote them.
    /// Sizes and shapes must be this configuration's (the code indexes by them), counts kept
    /// beside the data must match it, pending impressions must be in deadline order, counts and
    /// sums must leave room to add to, and every group referred to must be named.
    fn check_consistent(&self, snapshot: &TaskSnapshot, shape: StatsShape) -> Result<(), Inconsistency> {
        let template = &self.partitions.template;
        let Task { join, totals, .. } = &snapshot.task;
        join.check(&self.partitions.join)?;
        totals.accumulators.check(shape, &template.window_sizes_ms, template.attribution_window_ms)?;
        totals.counters.check()?;
        snapshot.later_rejections.check()?;
        for window in &totals.recent_closed {
            window.check(shape, template.window_sizes_ms.len())?;
        }
        if let (Some(_), Some(clicks)) = (template.clicks, &snapshot.clicks) {
            clicks.check()?;
        }
        let mut cuped_groups = Vec::new();
        if let (Some(settings), Some((keys, state))) = (&template.cuped, &snapshot.cuped) {
            if *keys == self.cuped_metric_keys() {
                state.check(settings)?;
                cuped_groups.extend(state.groups());
            }
        }
        let recent = totals.recent_closed.iter().flat_map(|w| w.groups.iter().map(|(g, _)| g));
        let used = join.pending_groups().chain(totals.accumulators.groups()).chain(recent).chain(cuped_groups);
        check_named(&snapshot.groups, used)
    }

    /// Installs `partition`'s restored state in place of whatever the engine held for it, and
    /// assigns it (its inputs hold its watermark back until they deliver).
    pub fn restore_partition(
        &mut self,
        partition: i32,
        mut snapshot: TaskSnapshot,
        now: Instant,
    ) -> Result<(), RestoreError> {
        self.check_compatible(partition, &mut snapshot)?;
        let TaskSnapshot { groups, frontier, mut task, later_rejections, clicks, cuped, .. } = snapshot;
        task.totals.counters.rejected.set_later(&later_rejections);
        // A snapshot without a click log (written before it existed, or with it off) starts
        // an empty one; one written with it on and restored with it off is dropped.
        task.totals.clicks = match (self.partitions.template.clicks, clicks, task.totals.clicks.take()) {
            (None, _, _) => None,
            // Opened for the deltas applied to it (`super::delta`).
            (Some(_), _, Some(opened)) => Some(opened),
            (Some(settings), None, None) => Some(ClickLog::new(settings)),
            // Checked with the rest of the snapshot (`check_consistent`).
            (Some(settings), Some(state), None) => Some(ClickLog::restore(settings, state)?),
        };
        let map = self.intern_names(&groups);
        // CUPED's state of other adjusted metrics (or none) starts afresh: its sums would be
        // of other metrics. Checked with the rest of the snapshot when the metrics agree.
        let keys = self.cuped_metric_keys();
        task.totals.cuped = self.partitions.template.cuped.as_ref().map(|_| match cuped {
            Some((written, mut state)) if written == keys => {
                state.remap_groups(&map);
                state
            }
            _ => CupedState::new(),
        });
        if self.partitions.template.cuped.is_some() {
            let named: Vec<(GroupId, String)> =
                map.values().map(|&id| (id, self.groups.name(id).0.to_string())).collect();
            for (id, experiment) in named {
                self.aggregation.note_group(id, &experiment);
            }
        }
        task.join.remap_groups(&map);
        task.totals.accumulators.remap_groups(&map);
        for window in &mut task.totals.recent_closed {
            window.groups.remap(&map);
        }
        self.install(partition, task, frontier, now)
    }

    /// The metric keys CUPED adjusts (`ab.cuped.metrics` as configured), which a snapshot's
    /// CUPED state must have been written with.
    pub(super) fn cuped_metric_keys(&self) -> Vec<String> {
        self.ab.cuped.metrics.clone()
    }

    /// The names of the groups a task's totals and pending impressions refer to, and `more`.
    pub(super) fn names_of(&self, task: &Task, more: impl Iterator<Item = GroupId>) -> Vec<GroupName<&str>> {
        let used: BTreeSet<GroupId> = task
            .join
            .pending_groups()
            .chain(task.totals.accumulators.groups())
            .chain(task.totals.recent_closed.iter().flat_map(|w| w.groups.iter().map(|(g, _)| g)))
            .chain(task.totals.cuped.iter().flat_map(CupedState::groups))
            .chain(more)
            .collect();
        // A breakdown group's impressions are added to its expansion's groups: a reader
        // replaying them finds those by name.
        let expanded = used.iter().filter_map(|&id| self.groups.expansion(id)).flatten().copied().collect::<Vec<_>>();
        used.into_iter().chain(expanded).collect::<BTreeSet<_>>().into_iter().map(|id| self.group_name(id)).collect()
    }

    /// A group's name, to write beside sums that refer to it by id.
    pub(super) fn group_name(&self, id: GroupId) -> GroupName<&str> {
        let (experiment, variant) = self.groups.name(id);
        GroupName { id, experiment, variant, last_seen: self.groups.last_seen(id) }
    }

    /// Interns groups written by another engine: `map[their id] = our id`.
    pub(super) fn intern_names(&mut self, groups: &[GroupName<String>]) -> GroupMap {
        let (table, least) = (&mut self.groups, self.partitions.watermarks.least);
        let map = groups.iter().map(|g| (g.id, table.intern(&g.experiment, &g.variant, g.last_seen, least))).collect();
        self.note_expansions();
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
        self.partitions.state.add(StateSize::of(&task.join));
        // A frontier is a lower bound on every idle input's progress in the cluster: the
        // restored task's idle inputs may follow the newer of the two.
        self.partitions.watermarks.frontier = self.partitions.watermarks.frontier.max(frontier);
        self.partitions.tasks.insert(partition, task);
        self.assign(partition, now);
        self.partitions.watermarks.least = self.partitions.tasks.least_watermark();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::checkpoint;
    use crate::config::Config;
    use crate::engine::task::Totals;
    use crate::engine::TaskRecordV5;
    use crate::event::EventKind;
    use crate::judgments::JudgmentSource;
    use crate::source::record::decode_snapshot;
    use crate::source::{encode_partition, PartitionSnapshot, Positions};

    /// Partition 0's snapshot of an engine fed a few impressions of two groups.
    fn snapshot() -> TaskSnapshot {
        snapshot_of(&Config::default())
    }

    /// [`snapshot`] of an engine of `cfg`.
    fn snapshot_of(cfg: &Config) -> TaskSnapshot {
        let mut engine = Engine::new(cfg).without_past_limit();
        let now = Instant::now();
        for (i, variant) in ["a", "b", "a"].iter().enumerate() {
            let payload =
                format!(r#"{{"query_id":"q{i}","timestamp":{},"results":["x"],"variant":"{variant}"}}"#, 1000 + i);
            engine.process(EventKind::Impression, 0, payload.as_bytes(), now).unwrap();
        }
        let bytes = encode_partition(&engine, &Positions::default(), 0).unwrap();
        decode_snapshot(&bytes).unwrap().task
    }

    fn restore(snapshot: TaskSnapshot, partition: i32) -> Result<Engine, RestoreError> {
        let mut engine = Engine::new(&Config::default()).without_past_limit();
        engine.restore_partition(partition, snapshot, Instant::now()).map(|()| engine)
    }

    #[test]
    fn state_without_the_interleaving_sums_is_widened_and_the_other_way_refused() {
        // State of a version before interleaving has exactly the fingerprint and sums of
        // `interleaving.max_rankers = 0` today.
        let mut off = Config::default();
        off.interleaving.max_rankers = 0;
        let mut engine = restore(snapshot_of(&off), 0).expect("an upgrade keeps its state");
        let now = Instant::now();
        for i in 0..3 {
            let payload = format!(
                r#"{{"query_id":"i{i}","timestamp":{},"results":["x","y"],"experiment":"e","interleaving":["a","b"],"teams":["a","b"]}}"#,
                2000 + i
            );
            engine.process(EventKind::Impression, 0, payload.as_bytes(), now).unwrap();
            let click = format!(r#"{{"query_id":"i{i}","timestamp":{},"doc_id":"y"}}"#, 2001 + i);
            engine.process(EventKind::Engagement, 0, click.as_bytes(), now).unwrap();
        }
        engine.finish();
        let reports = engine.experiment_reports(&engine.cumulative(), crate::experiments::Span::Cumulative);
        let e = reports.iter().find(|r| r.experiment == "e").unwrap();
        assert_eq!((e.interleaving[0].impressions, e.interleaving[0].wins[1].1), (3, 3));
        // The restored groups kept their counts.
        assert_eq!(engine.cumulative().iter().map(|(_, s)| s.impressions).sum::<u64>(), 6);
        // Sums with interleaving cannot become sums without (nor of another ranker count).
        let mut err = None;
        for (writer, reader) in [(2, 0), (2, 3)] {
            let mut w = Config::default();
            w.interleaving.max_rankers = writer;
            let mut r = Config::default();
            r.interleaving.max_rankers = reader;
            let mut engine = Engine::new(&r).without_past_limit();
            err = engine.restore_partition(0, snapshot_of(&w), Instant::now()).err();
            assert!(err.as_ref().is_some_and(|e| e.to_string().contains("interleaving.max_rankers")), "{err:?}");
        }
        assert!(err.unwrap().to_string().contains("max_rankers=3"));
    }

    #[test]
    fn state_without_the_judged_block_is_widened_and_the_other_way_refused() {
        let dir = std::env::temp_dir().join(format!("rankpulse-snapshot-judged-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("judgments.jsonl");
        std::fs::write(&file, "{\"query\":\"shoes\",\"doc_id\":\"x\",\"grade\":2}\n").unwrap();
        let mut judged = Config::default();
        judged.judgments.file = file.to_string_lossy().into_owned();
        // The oldest state (no interleaving sums, no judged block) and today's without judgments.
        let mut oldest = Config::default();
        oldest.interleaving.max_rankers = 0;
        for writer in [oldest, Config::default()] {
            let mut engine = Engine::new(&judged).without_past_limit();
            engine
                .restore_partition(0, snapshot_of(&writer), Instant::now())
                .expect("turning judgments on keeps the state");
            engine.set_judgments(JudgmentSource::from_config(&judged.judgments).unwrap().unwrap());
            let payload = r#"{"query_id":"j","timestamp":2000,"results":["x"],"variant":"a","query":"Shoes"}"#;
            engine.process(EventKind::Impression, 0, payload.as_bytes(), Instant::now()).unwrap();
            engine.finish();
            let block = engine.layout().judged().unwrap().clone();
            let cumulative = engine.cumulative();
            let (_, a) = cumulative.iter().find(|(g, _)| engine.group_name(*g).variant == "a").unwrap();
            assert_eq!((a.impressions, a.sum(block.count_slot())), (3, 1.0), "old counts kept, the new one judged");
        }
        // Judged sums cannot become sums without them, nor of another judged relevance.
        let mut other = judged.clone();
        other.judgments.relevance_threshold = 2;
        for reader in [Config::default(), other] {
            let mut engine = Engine::new(&reader).without_past_limit();
            let err = engine.restore_partition(0, snapshot_of(&judged), Instant::now()).err();
            assert!(err.as_ref().is_some_and(|e| e.to_string().contains("judgments.relevance_threshold")), "{err:?}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// An engine with CUPED on mrr, fed a pre-period day in experiment `base` and then an
    /// experiment `e` whose units had it, one impression each finalized by the next day's.
    fn cuped_engine(cfg: &Config) -> Engine {
        let mut engine = Engine::new(cfg).without_past_limit();
        let now = Instant::now();
        let day = 86_400_000i64;
        let mut feed = |id: String, ts: i64, experiment: &str, variant: &str, client: &str, clicked: bool| {
            let payload = format!(
                r#"{{"query_id":"{id}","timestamp":{ts},"results":["x","y"],"experiment":"{experiment}","variant":"{variant}","client_id":"{client}"}}"#
            );
            engine.process(EventKind::Impression, 0, payload.as_bytes(), now).unwrap();
            if clicked {
                let click = format!(r#"{{"query_id":"{id}","timestamp":{},"doc_id":"x"}}"#, ts + 10);
                engine.process(EventKind::Engagement, 0, click.as_bytes(), now).unwrap();
            }
        };
        for u in 0..12 {
            let client = format!("u{u}");
            feed(format!("pre{u}"), day + u, "base", "control", &client, u % 3 == 0);
            let variant = if u % 2 == 0 { "control" } else { "treatment" };
            feed(format!("e{u}"), 3 * day + u, "e", variant, &client, u % 3 != 1);
            feed(format!("f{u}"), 4 * day + u, "e", variant, &client, u % 4 == 0);
        }
        engine.advance(now);
        engine
    }

    fn cuped_figures(engine: &Engine) -> Option<crate::stats::cuped::CupedComparison> {
        let reports = engine.experiment_reports(&engine.cumulative(), crate::experiments::Span::Cumulative);
        let report = reports.into_iter().find(|r| r.experiment == "e")?;
        let metrics = &report.comparisons.first()?.metrics;
        metrics.iter().find(|(k, _)| k == "mrr").and_then(|(_, c)| c.cuped.clone())
    }

    #[test]
    fn cuped_state_moves_with_its_partition_and_forged_state_is_refused() {
        let mut cfg = Config::default();
        cfg.ab.unit = AbUnit::ClientId;
        cfg.ab.cuped.metrics = vec!["mrr".into()];
        let writer = cuped_engine(&cfg);
        let written = cuped_figures(&writer).expect("CUPED figures");
        assert!(written.units_with_pre_period.iter().sum::<u64>() > 0, "{written:?}");
        let bytes = encode_partition(&writer, &Positions::default(), 0).unwrap();
        let decoded = || decode_snapshot(&bytes).unwrap().task;
        // Restored elsewhere, the figures are the same, and so is the state it writes next.
        let mut reader = Engine::new(&cfg).without_past_limit();
        reader.restore_partition(0, decoded(), Instant::now()).unwrap();
        assert_eq!(cuped_figures(&reader), Some(written.clone()));
        // And the state it writes next restores to the same figures again.
        let again = encode_partition(&reader, &Positions::default(), 0).unwrap();
        let mut third = Engine::new(&cfg).without_past_limit();
        third.restore_partition(0, decode_snapshot(&again).unwrap().task, Instant::now()).unwrap();
        assert_eq!(cuped_figures(&third), Some(written));
        // A snapshot of other adjusted metrics, or none, starts an empty state: no unit has a
        // pre-period any more.
        let mut other = cfg.clone();
        other.ab.cuped.metrics = vec!["mrr".into(), "hit_rate@1".into()];
        let mut reader = Engine::new(&other).without_past_limit();
        reader.restore_partition(0, decoded(), Instant::now()).unwrap();
        assert!(cuped_figures(&reader).is_none_or(|c| c.units_with_pre_period == [0, 0]));
        // Forged: a unit bucket beyond ab.unit_buckets is refused before anything is installed.
        let mut forged = decoded();
        let (_, state) = forged.cuped.as_mut().unwrap();
        let group = state.groups().next().unwrap();
        let mut table = CovariateTableForgery::default();
        table.0.insert(group, [(cfg.ab.unit_buckets, Default::default())].into_iter().collect());
        state.covariates.merge(&table.into_table());
        let mut reader = Engine::new(&cfg).without_past_limit();
        let err = reader.restore_partition(0, forged, Instant::now()).unwrap_err();
        let buckets = u64::from(cfg.ab.unit_buckets);
        let bucket = Inconsistency::Beyond {
            what: "CUPED unit bucket",
            index: buckets,
            limit: "ab.unit_buckets",
            count: buckets,
        };
        assert!(matches!(&err, RestoreError::Inconsistent(e) if *e == bucket), "{err}");
        assert!(!reader.has_partition(0));
    }

    /// Builds a covariate table by hand, as forged bytes would.
    #[derive(Default)]
    struct CovariateTableForgery(
        std::collections::BTreeMap<GroupId, std::collections::BTreeMap<u32, crate::accumulate::cuped::CovariateBucket>>,
    );

    impl CovariateTableForgery {
        fn into_table(self) -> crate::accumulate::CovariateTable {
            #[derive(Serialize)]
            struct Table<'a> {
                by_group: &'a std::collections::BTreeMap<
                    GroupId,
                    std::collections::BTreeMap<u32, crate::accumulate::cuped::CovariateBucket>,
                >,
            }
            let bytes = postcard::to_allocvec(&Table { by_group: &self.0 }).unwrap();
            postcard::from_bytes(&bytes).unwrap()
        }
    }

    #[test]
    fn judged_state_without_the_incomplete_measures_is_widened_and_the_other_way_refused() {
        let dir = std::env::temp_dir().join(format!("rankpulse-snapshot-incomplete-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("judgments.jsonl");
        let lines = [
            "{\"query\":\"shoes\",\"doc_id\":\"x\",\"grade\":2}",
            "{\"query\":\"shoes\",\"doc_id\":\"y\",\"grade\":0}",
        ];
        std::fs::write(&file, lines.join("\n") + "\n").unwrap();
        let mut with = Config::default();
        with.judgments.file = file.to_string_lossy().into_owned();
        // The judged state of the version before the measures for incomplete judgments is
        // today's with them off: one impression judged.
        let mut without = with.clone();
        without.judgments.incomplete_measures = false;
        let judged = |engine: &mut Engine, cfg: &Config, id: &str, variant: &str, timestamp: u32| {
            engine.set_judgments(JudgmentSource::from_config(&cfg.judgments).unwrap().unwrap());
            let payload = format!(
                r#"{{"query_id":"{id}","timestamp":{timestamp},"results":["y","x"],"variant":"{variant}","query":"shoes"}}"#
            );
            engine.process(EventKind::Impression, 0, payload.as_bytes(), Instant::now()).unwrap();
        };
        let mut writer = Engine::new(&without).without_past_limit();
        judged(&mut writer, &without, "j1", "a", 1000);
        judged(&mut writer, &without, "j1b", "b", 1000);
        let bytes = encode_partition(&writer, &Positions::default(), 0).unwrap();
        let upgraded = |ids: &[(&str, &str)]| {
            let snapshot = decode_snapshot(&bytes).unwrap().task;
            let mut engine = Engine::new(&with).without_past_limit();
            engine.restore_partition(0, snapshot, Instant::now()).expect("an upgrade keeps the judged state");
            for (id, variant) in ids {
                judged(&mut engine, &with, id, variant, 2000);
            }
            engine.finish();
            engine
        };
        // The A/B report leaves a measure out while a variant with judged impressions has none
        // it was computed for (b here), then compares it over the impressions that have it.
        let judged_report = |engine: &Engine| {
            let reports = engine.experiment_reports(&engine.ab_cumulative(), crate::experiments::Span::Cumulative);
            let judged = reports.into_iter().find_map(|r| r.judged).expect("a judged report");
            let n = |variant: usize, key: &str| {
                judged.variants[variant].metrics.iter().find(|(k, _)| k == key).map(|(_, e)| e.n)
            };
            [n(0, "mrr"), n(1, "mrr"), n(0, "bpref"), n(1, "bpref")]
        };
        assert_eq!(judged_report(&upgraded(&[("j2", "a")])), [Some(2), Some(1), None, None]);
        assert_eq!(judged_report(&upgraded(&[("j2", "a"), ("j3", "b")])), [Some(2), Some(2), Some(1), Some(1)]);
        let engine = upgraded(&[("j2", "a")]);
        let block = engine.layout().judged().unwrap().clone();
        let count = block.incomplete_count_slot().unwrap();
        let cumulative = engine.cumulative();
        let (_, a) = cumulative.iter().find(|(g, _)| engine.group_name(*g).variant == "a").unwrap();
        assert_eq!(a.sum(block.count_slot()), 2.0, "both impressions have the plain judged figures");
        // bpref of [non-relevant, relevant] with R = N = 1 is 0: the mean is over the new impression.
        assert_eq!((a.sum(count), a.sum(count + 1)), (1.0, 0.0), "only the new one has the incomplete measures");
        let ndcg_condensed_1 = count + 3;
        assert_eq!(a.sum(ndcg_condensed_1), 0.0);

        // The measures' sums cannot be dropped.
        let mut reader = Engine::new(&without).without_past_limit();
        let mut writer = Engine::new(&with).without_past_limit();
        judged(&mut writer, &with, "j1", "a", 1000);
        let bytes = encode_partition(&writer, &Positions::default(), 0).unwrap();
        let snapshot = decode_snapshot(&bytes).unwrap().task;
        let err = reader.restore_partition(0, snapshot, Instant::now()).err();
        assert!(err.as_ref().is_some_and(|e| e.to_string().contains("judgments.incomplete_measures")), "{err:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_click_log_moves_with_its_partition_and_older_snapshots_start_an_empty_one() {
        let mut on = Config::default();
        on.clicks.enabled = true;
        let mut engine = Engine::new(&on).without_past_limit();
        let now = Instant::now();
        for i in 0..4 {
            let shown =
                format!(r#"{{"query_id":"i{i}","timestamp":{},"results":["x","y"],"query":"Red  Shoes"}}"#, 1000 + i);
            engine.process(EventKind::Impression, 0, shown.as_bytes(), now).unwrap();
            let click = format!(r#"{{"query_id":"i{i}","timestamp":{},"doc_id":"y"}}"#, 1001 + i);
            engine.process(EventKind::Engagement, 0, click.as_bytes(), now).unwrap();
        }
        // All four pending when the snapshot is taken: they are counted once finalized, by
        // whichever engine holds the partition then.
        let bytes = encode_partition(&engine, &Positions::default(), 0).unwrap();
        let written = decode_snapshot(&bytes).unwrap().task;
        let mut restored = Engine::new(&on).without_past_limit();
        restored.restore_partition(0, written, now).unwrap();
        assert_eq!(restored.click_table().unwrap().0.to_lines(), engine.click_table().unwrap().0.to_lines());
        assert_eq!(restored.click_table().unwrap().1.pending, 4);
        restored.finish();
        engine.finish();
        let (table, summary) = restored.click_table().unwrap();
        assert_eq!(table.to_lines(), engine.click_table().unwrap().0.to_lines());
        assert_eq!((summary.counts.tracked, summary.pending), (4, 0));
        assert!(table.to_lines().contains(r#"{"query":"red shoes","doc_id":"y","rank":2,"impressions":4,"clicks":4}"#));
        // A snapshot written without the log restores with an empty one.
        let mut engine = Engine::new(&on).without_past_limit();
        engine.restore_partition(0, snapshot(), now).unwrap();
        assert_eq!(engine.click_table().unwrap().1.pending, 0);
    }

    /// The reject reasons added after snapshot format 5 are counted in a trailing field: a
    /// restore keeps them, a format-5 snapshot (without the field) reads as zeros, and a
    /// format-5 reader reads the new snapshot (postcard leaves the field unread).
    #[test]
    fn later_reject_reasons_survive_a_restore_and_either_version_reads_the_other() {
        use crate::event::RejectReason;
        let cfg = Config::from_toml_with_env(
            "[mapping.engagements]\nquery_id = \"/q\"\ndoc_id = \"/d\"\naction = \"/e\"\n\
             timestamp = { path = \"/t\", format = \"epoch_millis\" }\nactions = { tap = \"click\" }\n",
            "test",
            std::iter::empty(),
        )
        .unwrap();
        let mut engine = Engine::new(&cfg).without_past_limit();
        let now = Instant::now();
        let page_view = br#"{"q":"q1","d":"a","e":"page_view","t":1000}"#;
        let rejected = engine.process(EventKind::Engagement, 0, page_view, now).unwrap_err();
        assert_eq!(rejected.reason, RejectReason::UnmappedAction);
        engine.process(EventKind::Engagement, 0, b"{nope", now).unwrap_err();
        let bytes = encode_partition(&engine, &Positions::default(), 0).unwrap();
        let unmapped = |e: &Engine| e.counters().rejected[1][RejectReason::UnmappedAction.index()];
        let invalid = |e: &Engine| e.counters().rejected[1][RejectReason::InvalidJson.index()];
        let mut restored = Engine::new(&cfg).without_past_limit();
        let snapshot = decode_snapshot(&bytes).unwrap().task;
        restored.restore_partition(0, snapshot, now).unwrap();
        assert_eq!((unmapped(&restored), invalid(&restored)), (1, 1));

        // Format 5 ends before the trailing field: both lists are a length byte and 16 - 12
        // counts of one byte each. (Its pending impressions were laid out otherwise: it has none.)
        let v5 = checkpoint::encode(&([None::<i64>; 2], engine.snapshot_partition(0).unwrap()));
        let payload = &v5[28..];
        let format_5 = checkpoint::seal(&payload[..payload.len() - 2 * (1 + 4)]);
        let mut restored = Engine::new(&cfg).without_past_limit();
        let (_, record) = checkpoint::decode::<([Option<i64>; 2], TaskRecordV5)>(&format_5).unwrap();
        restored.restore_partition(0, TaskSnapshot::from(record), now).unwrap();
        assert_eq!((unmapped(&restored), invalid(&restored)), (0, 1), "format 5 counted no later reasons");
        // This build's layout has no optional field: the bytes a format 5 snapshot may end
        // with are refused as format 10's.
        assert!(checkpoint::decode::<PartitionSnapshot>(&format_5).is_err());

        /// What a rankpulse of format 5 reads: the snapshot without the trailing field.
        #[derive(serde::Deserialize)]
        #[allow(dead_code, reason = "only decoded")]
        struct Format5 {
            positions: [Option<i64>; 2],
            fingerprint: StateFingerprint,
            partition: i32,
            groups: Vec<GroupName<String>>,
            frontier: Option<EventTime>,
            join: crate::join::ShardRecord,
            inputs: [crate::engine::InputClock; 2],
            totals: super::super::wire::TotalsRecord,
        }
        let old = checkpoint::decode::<Format5>(&v5).unwrap();
        let totals = Totals::from_record(old.totals);
        assert_eq!(totals.counters.rejected[1][RejectReason::InvalidJson.index()], 1);
    }

    #[test]
    fn a_snapshot_restores_into_its_own_partition_only() {
        assert_eq!(restore(snapshot(), 0).unwrap().pending_impressions(), 3);
        let err = restore(snapshot(), 1).err().unwrap();
        assert!(matches!(err, RestoreError::Partition { found: 0, expected: 1 }), "{err}");
        // Found reviewing restore for the snapshot fuzz target: the partition number came from the
        // bytes and sized the engine's table of tasks (i32::MAX: 16 GiB).
        let mut forged = snapshot();
        forged.partition = i32::MAX;
        assert!(matches!(restore(forged, 0), Err(RestoreError::Partition { .. })));
    }

    #[test]
    fn group_ids_from_the_bytes_size_nothing_and_must_be_named() {
        // Found reviewing restore for the snapshot fuzz target: the renumbering table was a vector
        // indexed by the snapshot's group ids (u32::MAX: 16 GiB), and a group referred to but not
        // named panicked on renumbering.
        let mut unused = snapshot();
        unused.groups.push(GroupName { id: GroupId::MAX, experiment: "x".into(), variant: "y".into(), last_seen: 0 });
        assert_eq!(restore(unused, 0).unwrap().pending_impressions(), 3);
        let mut unnamed = snapshot();
        unnamed.groups.pop();
        let err = restore(unnamed, 0).err().unwrap();
        assert!(matches!(err, RestoreError::Inconsistent(Inconsistency::Unnamed { what: "group", .. })), "{err}");
        let mut twice = snapshot();
        let first = GroupName { id: twice.groups[0].id, experiment: "e".into(), variant: "v".into(), last_seen: 0 };
        twice.groups.push(first);
        let err = restore(twice, 0).err().unwrap();
        assert!(matches!(err, RestoreError::Inconsistent(Inconsistency::Twice { .. })), "{err}");
    }

    #[test]
    fn counts_that_adding_to_would_overflow_are_refused() {
        // Found by the snapshot proptest (tests/hostile_input.rs): a restored count at the top of
        // its type overflowed on the next message.
        let mut forged = snapshot();
        forged.task.totals.counters.consumed[0] = u64::MAX;
        let err = restore(forged, 0).err().unwrap();
        let count = Inconsistency::Count { what: "a message or impression count", value: u64::MAX };
        assert!(matches!(&err, RestoreError::Inconsistent(e) if *e == count), "{err}");
        // The counts of the reasons in the snapshot's tail too (found by the same proptest in
        // a clean-clone run: they were put in after the check).
        let mut forged = snapshot();
        forged.later_rejections = super::super::telemetry::LaterRejections::new([vec![u64::MAX], vec![]]);
        let later = restore(forged, 0).err().unwrap();
        assert!(matches!(&later, RestoreError::Inconsistent(e) if *e == count), "{later}");
        // What the log line says.
        assert_eq!(
            err.to_string(),
            "the snapshot is inconsistent (a message or impression count is 18446744073709551615, more than any \
             state can hold): damaged or forged, though its checksum matches"
        );
    }
}
