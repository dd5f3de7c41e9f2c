//! The evaluation engine: decode → join → watermark → finalize → accumulate, its state owned by
//! one thread.
//!
//! Both the Kafka source and `replay` drive an [`Engine`] the same way: [`Engine::process`] for
//! every message (or [`Engine::process_prepared`] for one a [`Preparer`] decoded ahead, on
//! another thread), [`Engine::advance`] whenever time may have moved, [`Engine::finish`] when the
//! input has ended. Owning all evaluation state in one synchronous struct keeps the hot path free
//! of locks and makes the online and offline numbers agree by construction.
//!
//! The engine orchestrates; each rule it applies has a file of its own:
//!
//! | file | owns |
//! |---|---|
//! | [`prepare`] | a message decoded into what the engine keeps of it ([`Preparer`]), on any thread: replay's readers decode ahead of the engine |
//! | `process` | a message into the engine: counted, checked against the limits, offered to its partition's task within the limits on the state |
//! | [`offload`] | finalization (metrics, sums, closed windows) on threads of their own, in the engine's order per thread, their sums added: replay's |
//! | [`task`] | per-partition state (join shard, input clocks, totals) and its size: the unit of ownership; how a new partition's task starts; the tasks' inputs' progress |
//! | [`snapshot`] | one partition's state as a snapshot: written to the changelog, restored by whichever replica is assigned it |
//! | `restore` | a partition's snapshot taken of the engine, checked against its configuration and restored into it |
//! | [`delta`] | one partition's changes since its last snapshot, written between snapshots and applied to the snapshot they follow |
//! | [`totals_log`] | the operations on a partition's totals since its last changelog record (finalized impressions, click-log offers, judged sums, windows closed), which a delta carries and a restore runs again |
//! | [`global`] | the experiment-wide view: every partition's A/B sums, from whichever replica, merged into complete windows |
//! | `partitions` | the per-partition core, one part the engine owns: the tasks, how a new one starts, the join's rules, the state's limits and size, the watermarks; finalization a task at a time |
//! | `view` | what the engine reports experiment-wide, one part it owns: the closed windows, the looks and their history, the global view, the aggregates records' standing |
//! | `aggregates_topic` | the engine's side of the aggregates topic: its partitions' records written whole, every partition's applied to the view |
//! | [`watermark`] | input clocks, the frontier, per-partition and window-closing watermarks |
//! | [`limits`] | the `[limits]` on one message, the `[join]` limits on the state |
//! | [`aggregation`] | a finalized impression's metric values into its partition's totals, partitions finalized on several threads at once; closed windows merged |
//! | [`telemetry`] | event counters, latency distributions, checkpoint health; [`Telemetry`]: what the callers timed and what rebalances did, recorded |
//! | `read` | what exporters and reports read: every partition's sums merged, closed windows, labels |
//! | [`routing`] | [`Routing`]: whether events reach their impression's partition (the repartition stage's counts, the join input's key check) |
//! | [`reject_log`] | [`RejectLog`]: the rate limit on logging rejected messages, which the callers log (only they know where a message came from) |
//! | [`shared`] | [`SharedEngine`]: the engine behind one lock, and the locking rule |
//!
//! Every sum and count is kept per partition (a [`Task`]'s [`Totals`]) and merged when read, so
//! a partition's share moves with it when another replica takes the partition over. Offsets are
//! not the engine's: the Kafka source keeps them, beside each partition's snapshot.

mod aggregates_record;
mod aggregates_topic;
mod aggregation;
mod compat;
mod delta;
mod global;
mod increments;
mod judge;
mod limits;
mod offload;
mod partitions;
mod prepare;
mod process;
mod published;
mod read;
mod reject_log;
mod restore;
mod routing;
mod shared;
mod snapshot;
mod task;
mod telemetry;
mod totals_log;
mod view;
mod watermark;
mod wire;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::accumulate::{ClosedWindow, CupedSettings, Groups, LabelLimits, StatsShape};
use crate::clicks::log::LogSettings;
use crate::clicks::pbm::EmSettings;
use crate::clicks::FitSettings;
use crate::config::{AbConfig, AbUnit, Config, InterleavingCredit};
use crate::event::EventKind;
use crate::join::JoinSettings;
use crate::judgments::JudgmentSource;
use crate::metrics::MetricLayout;
use crate::time::{EventTime, WallClock};

pub use aggregates_record::PartitionAggregates;
pub use aggregation::{FinalizedObserver, FinalizedView};
pub use compat::{TaskDeltaV6, TaskRecordV5, TaskRecordV7};
pub use delta::{AnyDelta, TaskDelta, TaskDeltaV7};
pub use global::WindowsSkipped;
pub use increments::{
    AggregatesOut, AggregatesRecord, IncrementLooks, PartitionIncrement, AGGREGATES_INCREMENT_VERSION,
};
pub use judge::JudgedObserver;
pub use limits::InputLimits;
pub use prepare::{
    ClickNames, ImpressionRef, Prepared, PreparedBatch, PreparedEngagement, PreparedImpression, Preparer, UnitHash,
};
pub use process::Accepted;
pub use published::ClosedProgress;
pub use published::Link;
pub use reject_log::RejectLog;
pub use routing::{Routing, RoutingCounts, RoutingDecision, RoutingReason};
pub use shared::SharedEngine;
pub use snapshot::{RestoreError, TaskSnapshot};
pub use task::{StateSize, Task, Tasks, Totals};
pub use telemetry::{
    CheckpointStats, Counters, Distribution, RebalanceKind, RebalanceStats, Restore, RestoreSource, Telemetry,
};
pub use watermark::InputClock;
pub use wire::StateFingerprint;

use aggregation::Aggregation;
use limits::StateLimits;
use partitions::Partitions;
use task::TaskTemplate;
use view::{ExperimentView, Statistics};
use watermark::Watermarks;

/// The evaluation engine. See the module documentation.
pub struct Engine {
    /// The per-partition core: the tasks, how a new one starts, the join's rules, the state's
    /// limits and size, the watermarks.
    partitions: Partitions,
    /// `[limits]`, checked on every message before it touches state.
    input_limits: InputLimits,
    /// Maps the monotonic `now` every caller passes to wall-clock milliseconds, for the
    /// timestamp limits.
    wall_clock: WallClock,
    /// The `topic` label of each input kind.
    topics: [String; 2],
    /// The `window` label of each configured window size.
    window_labels: Vec<String>,
    /// What is reported experiment-wide: the windows closed, the looks and their history, the
    /// global view of every partition's sums (serve only).
    view: ExperimentView,
    /// Interned (experiment, variant) labels, with their limits and retirement.
    groups: Groups,
    /// Everything that turns a finalized impression into numbers.
    aggregation: Aggregation,
    /// Decodes messages for [`Engine::process`] (and, cloned, on replay's reader threads).
    preparer: Preparer,
    /// Reused batch of the one message [`Engine::process`] prepares: no allocation per event.
    single: PreparedBatch,
    /// What the callers timed and what rebalances did: the processing time, the checkpoints'
    /// health, the restores (the source records them, the exposition reads them).
    telemetry: Telemetry,
    /// `[ab]`: the unit's bucket count, and what the reports built from this engine's
    /// accumulators compare.
    ab: AbConfig,
    /// Scores impressions of judged queries against the judgment list; `None` until
    /// [`Engine::set_judgments`] (and always without `judgments.file`).
    judge: Option<judge::Judge>,
    /// Whether events reach their impression's partition: the repartition stage's counts and
    /// the key check, counted off the engine lock by the threads that see the messages.
    routing: Arc<Routing>,
}

/// The most threads [`Engine::advance`] finalizes partitions on.
pub const MAX_FINALIZE_LANES: usize = 8;

impl Engine {
    /// An engine for this configuration, labelling its inputs with the configured topic names.
    pub fn new(cfg: &Config) -> Engine {
        Self::with_topic_labels(cfg, [cfg.kafka.impressions_topic.clone(), cfg.kafka.engagements_topic.clone()])
    }

    pub fn with_topic_labels(cfg: &Config, topics: [String; 2]) -> Engine {
        let max_gain = cfg.metrics.action_gains.values().copied().max().unwrap_or(cfg.metrics.relevance_threshold);
        let il = &cfg.interleaving;
        let layout = MetricLayout::new(&cfg.metrics.cutoffs, cfg.metrics.relevance_threshold, max_gain)
            .with_ips(&cfg.clicks.propensities, cfg.clicks.clip)
            .with_interleaving(il.max_rankers, il.credit == InterleavingCredit::Gains, il.depth)
            .with_recall_rounding(cfg.metrics.trec_eval);
        let layout = if cfg.judgments.file.is_empty() {
            layout
        } else {
            layout.with_judged(
                cfg.judgments.relevance_threshold,
                cfg.judgments.max_grade,
                cfg.judgments.incomplete_measures,
            )
        };
        let cuped = (!cfg.ab.cuped.metrics.is_empty() && cfg.ab.unit != AbUnit::Impression).then(|| CupedSettings {
            slots: cfg
                .ab
                .cuped
                .metrics
                .iter()
                .filter_map(|name| layout.keys().iter().position(|k| k.name() == *name))
                .collect(),
            lookback_days: i64::from(cfg.ab.cuped.lookback_days),
            max_units: cfg.ab.cuped.max_units_per_partition,
            unit_buckets: cfg.ab.unit_buckets,
        });
        let window_sizes: Vec<i64> = cfg.metrics.windows.iter().map(|w| w.as_millis_i64()).collect();
        let attribution_window = cfg.join.attribution_window.as_millis_i64();
        let template = TaskTemplate {
            shape: StatsShape {
                metrics: layout.slot_count(),
                unit_buckets: (cfg.ab.unit != AbUnit::Impression).then_some(cfg.ab.unit_buckets),
                max_units: cfg.ab.max_units,
            },
            window_sizes_ms: window_sizes,
            attribution_window_ms: attribution_window,
            windows_closed_at: None,
            click_fit: FitSettings {
                em: EmSettings { max_iterations: cfg.clicks.em_iterations, ..EmSettings::default() },
                refit_interval: cfg.clicks.refit_interval.as_duration(),
            },
            clicks: cfg.clicks.enabled.then(|| LogSettings {
                max_rank: cfg.clicks.max_rank,
                max_queries: cfg.clicks.max_queries_per_partition,
                horizon_ms: cfg.clicks.horizon.as_millis_i64(),
                click_threshold: cfg.metrics.relevance_threshold,
            }),
            cuped: cuped.clone(),
        };
        let mut view = ExperimentView::new(cfg.metrics.windows.len());
        // Closed windows wait for the A/B publisher when there is one.
        view.closed.keep = !cfg.ab.output_topic.is_empty();
        let input_limits = InputLimits {
            max_message_bytes: cfg.limits.max_message_bytes,
            max_results: cfg.limits.max_results,
            max_future_ms: cfg.limits.max_future.as_millis_i64(),
            max_past_ms: Some(cfg.limits.max_past.as_millis_i64()),
        };
        let wall_clock = WallClock::now();
        let partitions = Partitions {
            tasks: Tasks::default(),
            template,
            join: JoinSettings { attribution_window },
            state_limits: StateLimits {
                max_pending: cfg.join.max_pending_impressions,
                max_held: cfg.join.max_held_engagements,
                max_dedup: cfg.join.max_dedup_keys,
            },
            state: StateSize::default(),
            watermarks: Watermarks {
                max_out_of_orderness: cfg.join.max_out_of_orderness.as_millis_i64(),
                idle_timeout: cfg.join.idle_timeout.as_duration(),
                confirmation_valid_for: None,
                frontier: None,
                least: None,
            },
            unowned: Counters::default(),
            finalize_lanes: std::thread::available_parallelism()
                .map_or(1, std::num::NonZero::get)
                .saturating_sub(2)
                .clamp(1, MAX_FINALIZE_LANES),
        };
        Engine {
            partitions,
            input_limits,
            wall_clock,
            aggregation: Aggregation::new(layout).with_cuped(cuped),
            topics,
            window_labels: cfg.metrics.windows.iter().map(|w| w.to_string()).collect(),
            view,
            groups: Groups::new(LabelLimits {
                max_experiments: cfg.labels.max_experiments,
                max_variants: cfg.labels.max_variants,
                allowed_experiments: (!cfg.labels.allowed_experiments.is_empty())
                    .then(|| cfg.labels.allowed_experiments.iter().map(|e| e.as_str().into()).collect()),
                idle_expiry_ms: cfg.labels.idle_expiry.as_millis_i64(),
                max_dimension_values: cfg.ab.max_dimension_values,
                max_query_values: cfg.ab.max_queries,
            }),
            preparer: Preparer::new(cfg, input_limits),
            single: PreparedBatch::default(),
            telemetry: Telemetry::new(wall_clock),
            ab: cfg.ab.clone(),
            judge: None,
            routing: Routing::new(),
        }
    }

    /// Finalizes partitions on at most `lanes` threads at once (1: on the caller's alone).
    /// The results are the same whatever the number; tests and benchmarks compare them.
    pub fn set_finalize_lanes(&mut self, lanes: usize) {
        self.partitions.finalize_lanes = lanes.clamp(1, MAX_FINALIZE_LANES);
    }

    /// Scores impressions against this judgment list from now on (the configuration's
    /// `judgments.file`, loaded by the caller, which also runs its reloads). Ignored when the
    /// configuration has no judgment list: its state has no judged sums.
    pub fn set_judgments(&mut self, source: Arc<JudgmentSource>) {
        if let Some(block) = self.aggregation.layout().judged() {
            self.judge = Some(judge::Judge::new(source, block.clone()));
        }
    }

    /// Registers a callback for every judged impression: its query key and judged block
    /// (count, metrics, coverage; see [`crate::metrics::judged`]). Conformance tests read
    /// the per-impression values through it.
    pub fn set_judged_observer(&mut self, observer: JudgedObserver) {
        if let Some(judge) = &mut self.judge {
            judge.observer = Some(observer);
        }
    }

    /// The judgment list's source, when impressions are judged.
    pub fn judgments(&self) -> Option<&Arc<JudgmentSource>> {
        self.judge.as_ref().map(judge::Judge::source)
    }

    /// Replay reads old files: no event is too old for it.
    pub fn without_past_limit(mut self) -> Self {
        self.input_limits.max_past_ms = None;
        self
    }

    /// Registers a callback for every finalized impression.
    pub fn set_observer(&mut self, observer: FinalizedObserver) {
        self.aggregation.observer = Some(observer);
    }

    /// Keeps every closed window for [`Engine::take_closed_windows`].
    pub fn keep_closed_windows(&mut self) {
        self.view.closed.keep = true;
    }

    // ---- partition lifecycle (the source's rebalance callbacks) ----

    /// Marks a partition as assigned: until its inputs deliver an event time (or go idle), they
    /// hold its watermark back. Its task is created empty unless one was restored.
    pub fn assign(&mut self, partition: i32, now: Instant) {
        self.partitions.assign(partition, self.view.global.as_ref(), now);
    }

    /// From now on an input goes idle only while the brokers confirm it has nothing unread
    /// ([`Engine::caught_up`]), each confirmation counting for `valid_for` (the Kafka source's
    /// rule; [`watermark`]'s documentation).
    pub fn require_caught_up_confirmation(&mut self, valid_for: Duration) {
        self.partitions.watermarks.confirmation_valid_for = Some(valid_for);
    }

    /// `join.idle_timeout`.
    pub fn idle_timeout(&self) -> Duration {
        self.partitions.watermarks.idle_timeout
    }

    /// The inputs (partition, kind) that delivered nothing for at least `silence`: those whose
    /// caught-up confirmation the source should ask the brokers for.
    pub fn silent_inputs(&self, now: Instant, silence: Duration) -> Vec<(i32, EventKind)> {
        self.partitions.tasks.silent_inputs(now, silence)
    }

    /// A round of questions to the brokers as of `at`: `confirmed` inputs had nothing unread;
    /// `not_confirmed` ones (no answer, or messages waiting) are not idle until confirmed again.
    pub fn caught_up(&mut self, confirmed: &[(i32, EventKind)], not_confirmed: &[(i32, EventKind)], at: Instant) {
        if self.partitions.watermarks.confirmation_valid_for.is_some() {
            self.partitions.tasks.caught_up(confirmed, not_confirmed, at);
        }
    }

    /// Whether the engine holds a task for the partition.
    pub fn has_partition(&self, partition: i32) -> bool {
        self.partitions.tasks.get(partition).is_some()
    }

    /// The partitions the engine holds tasks for.
    pub fn partitions(&self) -> Vec<i32> {
        self.partitions.tasks.iter().map(|(p, _)| p).collect()
    }

    /// Drops a partition's task: the partition now belongs to another replica, which restores
    /// it from its snapshot. Everything it contributed leaves this engine's totals with it.
    pub fn remove_partition(&mut self, partition: i32) {
        self.partitions.remove(partition);
    }

    /// Recomputes watermarks at wall time `now`, finalizes what they passed and closes windows.
    pub fn advance(&mut self, now: Instant) {
        self.partitions.finalize_due(Some(now), &mut self.aggregation);
        let least = self.partitions.tasks.least_watermark();
        if let Some(w) = least {
            self.close_windows(w, true);
        }
        self.partitions.watermarks.least = least;
    }

    /// Closes, in every partition, the windows whose impressions are all final at watermark `w`;
    /// with `hold`, while the aggregates records are written, no more than a record carries
    /// ([`global::hold_back`]).
    fn close_windows(&mut self, w: EventTime, hold: bool) {
        let w = match hold && self.view.retains_recent_closed() && !self.view.aggregates_failing {
            true => {
                let held =
                    global::hold_back(&mut self.partitions.tasks, w, self.partitions.template.window_sizes_ms.len());
                if held < w {
                    self.view.aggregates_due.store(true, Ordering::Relaxed);
                }
                held
            }
            false => w,
        };
        if let Some(worker) = &mut self.aggregation.worker {
            // Its windows are merged when it finishes, in this order.
            worker.close_windows(w);
        }
        let mut closed = Vec::new();
        let retain = self.view.retains_recent_closed();
        let mut dropped_unwritten = 0;
        for task in self.partitions.tasks.iter_mut() {
            let Task { totals: Totals { accumulators, recent_closed, changes, .. }, closed_progress, .. } = task;
            if let Some(changes) = changes {
                changes.closed(w);
            }
            accumulators.close_windows(w, |window| {
                if retain {
                    dropped_unwritten += published::keep_closed(
                        recent_closed,
                        closed_progress,
                        window.clone(),
                        &self.partitions.template.window_sizes_ms,
                    );
                }
                closed.push(window);
            });
        }
        if let Some(view) = &mut self.view.global {
            view.skipped.unwritten += dropped_unwritten;
        }
        self.add_closed(closed);
        self.partitions.template.windows_closed_at =
            Some(self.partitions.template.windows_closed_at.map_or(w, |c| c.max(w)));
    }

    /// The input has ended: finalizes every pending impression and closes every window.
    pub fn finish(&mut self) {
        self.partitions.finalize_due(None, &mut self.aggregation);
        self.close_windows(EventTime::MAX, false);
        self.join_finalize_worker();
    }

    /// Runs finalization (evaluating metrics, adding them up, closing windows) on threads of
    /// their own until [`Engine::finish`], which takes the results back: for an engine with one
    /// partition that keeps no windows for the aggregates topic (replay's). Up to `lanes`
    /// threads (at most 4), one when an observer must see the impressions in order or the A/B
    /// unit keeps distinct units (see [`offload`]). The results are the same either way.
    /// Returns whether it did.
    pub fn offload_finalization(&mut self, lanes: usize) -> std::io::Result<bool> {
        // The click log takes impressions here and their finalization there: it stays whole
        // on this thread. CUPED's state follows units across groups: likewise.
        let clicks = self.partitions.template.clicks.is_some() || self.partitions.template.cuped.is_some();
        if self.partitions.tasks.iter().count() != 1
            || self.view.retains_recent_closed()
            || self.aggregation.worker.is_some()
            || clicks
        {
            return Ok(false);
        }
        let Some(task) = self.partitions.tasks.iter_mut().next() else { return Ok(false) };
        let lanes = match self.aggregation.observer.is_some() || self.partitions.template.shape.unit_buckets.is_some() {
            true => 1,
            false => lanes.clamp(1, offload::MAX_LANES),
        };
        let sums_of = |totals: Totals| Totals {
            accumulators: totals.accumulators,
            first_engagement_delay: totals.first_engagement_delay,
            counters: Counters::default(),
            recent_closed: Vec::new(),
            clicks: None,
            cuped: None,
            changes: None,
        };
        // The first lane goes on from the task's sums; the others start empty.
        let mut first = self.partitions.template.task().totals;
        std::mem::swap(&mut first.accumulators, &mut task.totals.accumulators);
        std::mem::swap(&mut first.first_engagement_delay, &mut task.totals.first_engagement_delay);
        let mut on_worker = self.aggregation.for_lane();
        on_worker.observer = self.aggregation.observer.take();
        let mut workers = vec![(sums_of(first), on_worker)];
        for _ in 1..lanes {
            workers.push((sums_of(self.partitions.template.task().totals), self.aggregation.for_lane()));
        }
        self.aggregation.worker = Some(Box::new(offload::FinalizeWorker::start(workers)?));
        Ok(true)
    }

    /// Takes the sums, closed windows and observer back from the finalization threads, if any.
    fn join_finalize_worker(&mut self) {
        let Some(worker) = self.aggregation.worker.take() else { return };
        let finished = worker.finish();
        self.aggregation.observer = finished.aggregation.observer;
        if let Some(task) = self.partitions.tasks.iter_mut().next() {
            task.totals.accumulators = finished.totals.accumulators;
            task.totals.first_engagement_delay = finished.totals.first_engagement_delay;
        }
        for windows in finished.closed {
            self.add_closed(windows);
        }
    }

    /// Merges windows this engine's partitions closed together into the view.
    fn add_closed(&mut self, windows: Vec<ClosedWindow>) {
        let Engine { partitions: Partitions { template, .. }, view, aggregation, groups, ab, .. } = self;
        let stats = Statistics { window_sizes_ms: &template.window_sizes_ms, layout: aggregation.layout(), groups, ab };
        view.add_closed(windows, &stats);
    }

    /// `clicks.max_rank` when the click log is on.
    fn template_click_rank(&self) -> Option<usize> {
        self.partitions.template.clicks.map(|c| c.max_rank)
    }

    /// How the click models are fitted for the gauges, when the click log is on.
    pub fn click_fit_settings(&self) -> Option<FitSettings> {
        self.partitions.template.clicks.map(|_| self.partitions.template.click_fit)
    }

    /// Wall-clock milliseconds at the monotonic instant `now`.
    fn wall_clock_ms(&self, now: Instant) -> EventTime {
        self.wall_clock.ms(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    pub(super) fn engine(window: &str, bound: &str, idle: &str) -> Engine {
        let toml = format!(
            "[join]\nattribution_window = \"{window}\"\nmax_out_of_orderness = \"{bound}\"\nidle_timeout = \"{idle}\"\n[metrics]\ncutoffs = [1, 3]\nwindows = [\"1m\"]\n"
        );
        Engine::new(&Config::from_toml_with_env(&toml, "test", std::iter::empty()).unwrap()).without_past_limit()
    }

    pub(super) fn imp(q: &str, ts: i64, results: &[&str]) -> Vec<u8> {
        serde_json::json!({"query_id": q, "timestamp": ts, "results": results, "experiment": "e", "variant": "v"})
            .to_string()
            .into_bytes()
    }

    pub(super) fn eng(q: &str, ts: i64, doc: &str) -> Vec<u8> {
        serde_json::json!({"query_id": q, "timestamp": ts, "doc_id": doc}).to_string().into_bytes()
    }

    pub(super) fn impressions(e: &Engine) -> u64 {
        e.cumulative().iter().map(|(_, s)| s.impressions).sum()
    }

    #[test]
    fn an_idle_stream_finalizes_impressions_without_engagement_by_the_wall_clock() {
        let mut e = engine("10s", "1s", "5s");
        let t0 = Instant::now();
        e.process(EventKind::Impression, 0, &imp("q1", 100_000, &["a", "b"]), t0).unwrap();
        e.advance(t0);
        assert_eq!((e.pending_impressions(), impressions(&e)), (1, 0));
        // Still active: the watermark stays at 99s; nothing closes no matter how often we look.
        e.advance(t0 + Duration::from_secs(4));
        assert_eq!(e.pending_impressions(), 1);
        // Idle from t0 + 5s; the frontier starts at 99s and moves with the wall clock. The deadline
        // is 110s, so it is passed 11s (and a millisecond) after going idle.
        e.advance(t0 + Duration::from_millis(5_000 + 11_000));
        assert_eq!(e.pending_impressions(), 1, "watermark exactly at the deadline has not passed it");
        e.advance(t0 + Duration::from_millis(5_000 + 11_001));
        assert_eq!((e.pending_impressions(), impressions(&e)), (0, 1));
        let stats = e.cumulative().get(0).unwrap().clone();
        assert_eq!((stats.engaged, stats.mean(1)), (0, 1.0), "abandoned impression");
        // A click for it arriving now is late: counted and dropped.
        e.process(EventKind::Engagement, 0, &eng("q1", 101_000, "a"), t0 + Duration::from_secs(20)).unwrap();
        assert_eq!(e.engagement_tally().late, 1);
        assert_eq!(e.cumulative().get(0).unwrap().clone().engaged, 0);
    }

    #[test]
    fn a_silent_partition_does_not_hold_back_a_busy_one() {
        let mut e = engine("10s", "0s", "5s");
        let t0 = Instant::now();
        e.process(EventKind::Impression, 1, &imp("quiet", 100_000, &["a"]), t0).unwrap();
        e.process(EventKind::Impression, 0, &imp("busy", 100_000, &["a"]), t0).unwrap();
        // Partition 0 keeps delivering on both inputs; partition 1 goes silent.
        for s in 1..=20 {
            let now = t0 + Duration::from_secs(s);
            e.process(EventKind::Impression, 0, &imp(&format!("b{s}"), 100_000 + s as i64 * 1000, &["a"]), now)
                .unwrap();
            e.process(EventKind::Engagement, 0, &eng(&format!("b{s}"), 100_000 + s as i64 * 1000, "a"), now).unwrap();
            e.advance(now);
        }
        // Partition 0 is at 120s: "busy" (deadline 110s) is final. Partition 1 went idle at 5s and
        // follows the frontier, so "quiet" is final too.
        assert_eq!(impressions(&e), 2 + 9, "busy, quiet and b1..b9 (deadlines up to 119s)");
    }

    #[test]
    fn a_just_assigned_partition_holds_its_watermark_until_it_delivers() {
        let mut e = engine("10s", "0s", "5s");
        let t0 = Instant::now();
        e.assign(0, t0);
        e.process(EventKind::Impression, 0, &imp("q", 100_000, &["a"]), t0).unwrap();
        e.process(EventKind::Impression, 0, &imp("q2", 200_000, &["a"]), t0).unwrap();
        e.advance(t0);
        assert_eq!(impressions(&e), 0, "the engagements input has not delivered yet");
        e.process(EventKind::Engagement, 0, &eng("q", 100_500, "a"), t0).unwrap();
        e.advance(t0);
        // Engagements input at 100.5s holds the shard there: "q" (deadline 110s) stays open.
        assert_eq!(impressions(&e), 0);
        e.process(EventKind::Engagement, 0, &eng("other", 150_000, "a"), t0).unwrap();
        e.advance(t0);
        assert_eq!(impressions(&e), 1);
        assert_eq!(e.cumulative().get(0).unwrap().clone().engaged, 1);
    }
}
