//! The evaluation engine: decode → join → watermark → finalize → accumulate, single-threaded.
//!
//! Both the Kafka source and `replay` drive an [`Engine`] the same way: [`Engine::process`] for
//! every message, [`Engine::advance`] whenever time may have moved, [`Engine::finish`] when the
//! input has ended. Owning all evaluation state in one synchronous struct keeps the hot path free
//! of locks and makes the online and offline numbers agree by construction.
//!
//! # Watermarks
//! Each shard (partition number) has two inputs, its impressions and engagements partitions.
//! An input's progress is its largest event time minus `max_out_of_orderness`. An input is
//! *active* while it delivered something within `idle_timeout`; inputs that are active but have
//! not delivered an event time yet (just assigned) hold progress back, so a backlog of
//! impressions is not finalized before its engagements had a chance to be read.
//! * A shard with active inputs advances to the least progress among them.
//! * A shard with no active input follows the *frontier*: the least progress among all active
//!   inputs of every shard, so a silent partition does not freeze, nor is frozen by, the rest.
//! * When no input is active at all, the frontier advances with the wall clock from the moment
//!   the stream went idle, so impressions without any engagement still get finalized.
//!
//! Windows close once the least shard watermark has passed their last possible deadline.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use serde::{Deserialize, Serialize};

use crate::accumulate::{Accumulators, Groups, LabelLimits, StatsShape};
use crate::config::{AbUnit, Config};
use crate::event::Decoders;
use crate::event::{Engagement, EventKind, RejectReason, Rejection};
use crate::ids::{doc_key, query_key, DocKey, EngagementId, GroupId, QueryKey};
use crate::join::{EngagementTally, Finalized, ImpressionOutcome, JoinSettings, Shard};
use crate::metrics::{MetricKind, MetricLayout};
use crate::time::EventTime;

mod shared;
pub use shared::SharedEngine;

/// Counts of everything the engine saw that is not a metric value.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Counters {
    /// Messages consumed, per input kind.
    pub consumed: [u64; 2],
    /// Messages rejected, per input kind and [`RejectReason`].
    pub rejected: [[u64; RejectReason::ALL.len()]; 2],
    /// Impressions whose query was already pending.
    pub impressions_duplicate: u64,
    /// Impressions whose attribution window had already closed when they arrived.
    pub impressions_late: u64,
    /// Impressions finalized before their deadline because `join.max_pending_impressions` was reached.
    pub impressions_evicted: u64,
    /// De-duplication keys forgotten early because `join.max_dedup_keys` was reached.
    pub dedup_keys_evicted: u64,
    /// Impressions without the field `ab.unit` names; each counts as its own cluster.
    pub impressions_without_unit: u64,
}

/// The `[limits]` on a single message, checked before it can touch any state.
#[derive(Debug, Clone, Copy)]
pub struct InputLimits {
    pub max_message_bytes: usize,
    pub max_results: usize,
    pub max_future_ms: i64,
    /// `None` in replay, where old files are the point.
    pub max_past_ms: Option<i64>,
}

impl InputLimits {
    fn check_size(&self, payload: &[u8]) -> Result<(), Rejection> {
        if payload.len() > self.max_message_bytes {
            return Err(Rejection::new(
                RejectReason::TooLarge,
                format!("{} bytes, limits.max_message_bytes is {}", payload.len(), self.max_message_bytes),
            ));
        }
        Ok(())
    }

    fn check_timestamp(&self, timestamp: EventTime, wall_clock: EventTime) -> Result<(), Rejection> {
        // Before 1970 is absurd for a search log in any mode (replay included), and keeping event
        // time non-negative keeps every window and deadline computation far from overflow.
        if timestamp < 0 {
            return Err(Rejection::new(RejectReason::TimestampTooOld, format!("{timestamp} is before 1970")));
        }
        if timestamp > wall_clock.saturating_add(self.max_future_ms) {
            return Err(Rejection::new(
                RejectReason::TimestampInFuture,
                format!(
                    "{} is more than limits.max_future ahead of the wall clock",
                    crate::time::format_rfc3339_ms(timestamp)
                ),
            ));
        }
        if self.max_past_ms.is_some_and(|past| timestamp < wall_clock.saturating_sub(past)) {
            return Err(Rejection::new(
                RejectReason::TimestampTooOld,
                format!(
                    "{} is more than limits.max_past behind the wall clock",
                    crate::time::format_rfc3339_ms(timestamp)
                ),
            ));
        }
        Ok(())
    }
}

/// Limits on the join's state, from `[join]`.
#[derive(Debug, Clone, Copy)]
struct StateLimits {
    max_pending: usize,
    max_held: usize,
    max_dedup: usize,
}

/// Sizes of the join's state, summed over shards and kept exact by accounting each change.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateSize {
    pub pending: usize,
    pub held: usize,
    pub dedup: usize,
}

impl StateSize {
    fn of(shard: &Shard) -> Self {
        StateSize { pending: shard.pending_len(), held: shard.held_len(), dedup: shard.dedup_len() }
    }

    /// Runs `change` on a shard and applies its effect on the shard's size to the totals.
    fn track<R>(&mut self, shard: &mut Shard, change: impl FnOnce(&mut Shard) -> R) -> R {
        let before = Self::of(shard);
        let result = change(shard);
        let after = Self::of(shard);
        self.pending = self.pending + after.pending - before.pending;
        self.held = self.held + after.held - before.held;
        self.dedup = self.dedup + after.dedup - before.dedup;
        result
    }
}

/// A latency distribution: hdrhistogram for quantiles plus an exact sum for the `_sum` series.
#[derive(Debug)]
pub struct Distribution {
    pub histogram: Histogram<u64>,
    /// Sum of recorded values, in the histogram's unit.
    pub sum: u128,
}

impl Distribution {
    fn new(max_value: u64) -> Self {
        Distribution { histogram: Histogram::new_with_bounds(1, max_value, 3).expect("valid histogram bounds"), sum: 0 }
    }
    fn record(&mut self, value: u64) {
        self.histogram.saturating_record(value.max(1));
        self.sum += u128::from(value);
    }

    /// (value, count) of every recorded bucket: what a checkpoint keeps of the histogram.
    fn recorded(&self) -> Vec<(u64, u64)> {
        self.histogram.iter_recorded().map(|v| (v.value_iterated_to(), v.count_at_value())).collect()
    }

    fn restore(&mut self, recorded: &[(u64, u64)], sum: u128) {
        for &(value, count) in recorded {
            let _ = self.histogram.record_n(value, count);
        }
        self.sum = sum;
    }
}

/// Checkpoint health, exported next to the evaluation state.
#[derive(Debug, Default, Clone, Copy)]
pub struct CheckpointStats {
    pub written: u64,
    pub failed: u64,
    pub last_bytes: u64,
    pub last_duration: Duration,
    /// Wall-clock milliseconds of the last successful checkpoint.
    pub last_success_ms: Option<EventTime>,
}

/// Logs rejected messages at a bounded rate: a flood of bad input must not become a flood of logs.
#[derive(Debug, Default)]
struct RejectLog {
    window_start: Option<Instant>,
    logged_in_window: u32,
    suppressed: u64,
}

impl RejectLog {
    const PER_WINDOW: u32 = 5;
    const WINDOW: Duration = Duration::from_secs(10);

    fn log(&mut self, now: Instant, topic: &str, partition: i32, rejection: &Rejection) {
        if self.window_start.is_none_or(|s| now.saturating_duration_since(s) >= Self::WINDOW) {
            if self.suppressed > 0 {
                tracing::warn!(suppressed = self.suppressed, "further rejected messages were not logged");
            }
            *self = RejectLog { window_start: Some(now), logged_in_window: 0, suppressed: 0 };
        }
        if self.logged_in_window < Self::PER_WINDOW {
            self.logged_in_window += 1;
            tracing::warn!(topic, partition, reason = rejection.reason.label(), detail = %rejection.detail, "rejected message");
        } else {
            self.suppressed += 1;
        }
    }
}

/// A finalized impression as an observer sees it.
#[derive(Debug)]
pub struct FinalizedView<'a> {
    pub query: QueryKey,
    pub group: GroupId,
    pub timestamp: EventTime,
    /// Gain per rank, as attributed.
    pub gains: &'a [u8],
    /// Metric values in layout order.
    pub values: &'a [f64],
}

/// Called with every finalized impression. Used by replay (TREC export) and the conformance tests.
pub type FinalizedObserver = Box<dyn FnMut(&FinalizedView<'_>) + Send>;

/// The evaluation engine. See the module documentation.
pub struct Engine {
    join: JoinSettings,
    input_limits: InputLimits,
    state_limits: StateLimits,
    /// Current state sizes, for the limits and the gauges.
    state: StateSize,
    /// Maps the monotonic `now` every caller passes to wall-clock milliseconds, for the
    /// timestamp limits: (instant, epoch milliseconds) at construction.
    wall_clock_origin: (Instant, EventTime),
    action_gains: HashMap<Box<str>, u8>,
    /// The `topic` label of each input kind.
    topics: [String; 2],
    /// The `window` label of each configured window size.
    window_labels: Vec<String>,
    /// Join state per partition number; partitions are small dense integers.
    shards: Vec<Option<Box<Shard>>>,
    groups: Groups,
    /// Everything that turns a finalized impression into numbers.
    aggregation: Aggregation,
    counters: Counters,
    /// Least progress of all active inputs; see the module documentation.
    frontier: Option<EventTime>,
    /// [`Engine::watermark`] as of the last [`Engine::advance`]: label retirement needs a bound
    /// per impression, and scanning every shard for it each time would be waste.
    least_watermark: Option<EventTime>,
    /// Time to process one message, in nanoseconds.
    processing_time: Distribution,
    /// Reused buffer for decoded result ids: decoding allocates nothing per event.
    scratch_docs: Vec<DocKey>,
    /// The decoder of each input (`kafka.impressions_format`, `kafka.engagements_format`).
    decoders: Decoders,
    reject_log: RejectLog,
    checkpoint_stats: CheckpointStats,
    /// How long a parked partition still holds back window closing (`state.rebalance_grace`).
    rebalance_grace: Duration,
    /// `ab.unit`: which impression field names the cluster for the A/B statistics.
    unit: AbUnit,
    /// `ab.unit_buckets`: clusters are hashed into this many buckets (for the fingerprint).
    unit_buckets: u32,
    /// `[ab]`, for the reports built from this engine's accumulators.
    ab: crate::config::AbConfig,
}

/// What a checkpoint must agree on with the running configuration for its state to mean the
/// same thing: the metric vector, the windows and the attribution window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateFingerprint {
    pub metric_keys: Vec<String>,
    pub window_sizes_ms: Vec<i64>,
    pub attribution_window_ms: i64,
    /// `ab.unit` and `ab.unit_buckets` (0 for the impression unit): pending impressions and
    /// accumulators hold bucket numbers that mean nothing under another hashing.
    pub unit_buckets: (AbUnit, u32),
}

/// The engine's state as a checkpoint writes it (borrowed, no copy).
#[derive(Serialize)]
struct SnapshotRef<'a> {
    fingerprint: StateFingerprint,
    shards: &'a [Option<Box<Shard>>],
    groups: &'a Groups,
    accumulators: &'a Accumulators,
    counters: &'a Counters,
    frontier: Option<EventTime>,
    first_engagement_delay: Vec<(u64, u64)>,
    first_engagement_delay_sum: u128,
}

/// The engine's state as a checkpoint reads it back: [`SnapshotRef`]'s fields, owned.
#[derive(Deserialize)]
pub struct EngineSnapshot {
    fingerprint: StateFingerprint,
    shards: Vec<Option<Box<Shard>>>,
    groups: Groups,
    accumulators: Accumulators,
    counters: Counters,
    frontier: Option<EventTime>,
    first_engagement_delay: Vec<(u64, u64)>,
    first_engagement_delay_sum: u128,
}

/// A checkpoint that cannot be restored into this configuration.
#[derive(Debug, thiserror::Error)]
#[error("the checkpoint was written with a different configuration ({what} differs: checkpoint {checkpoint}, configuration {configured}); start with the configuration it was written with, or move the state directory away to start afresh")]
pub struct RestoreError {
    what: &'static str,
    checkpoint: String,
    configured: String,
}

impl Engine {
    /// An engine for this configuration, labelling its inputs with the configured topic names.
    pub fn new(cfg: &Config) -> Engine {
        Self::with_topic_labels(cfg, [cfg.kafka.impressions_topic.clone(), cfg.kafka.engagements_topic.clone()])
    }

    pub fn with_topic_labels(cfg: &Config, topics: [String; 2]) -> Engine {
        let max_gain = cfg.metrics.action_gains.values().copied().max().unwrap_or(cfg.metrics.relevance_threshold);
        let layout = MetricLayout::new(&cfg.metrics.cutoffs, cfg.metrics.relevance_threshold, max_gain);
        let window_sizes: Vec<i64> = cfg.metrics.windows.iter().map(|w| w.as_millis_i64()).collect();
        let attribution_window = cfg.join.attribution_window.as_millis_i64();
        let mut accumulators = Accumulators::new(
            StatsShape {
                metrics: layout.len(),
                unit_buckets: (cfg.ab.unit != AbUnit::Impression).then_some(cfg.ab.unit_buckets),
                max_units: cfg.ab.max_units,
            },
            &window_sizes,
            attribution_window,
        );
        // Closed windows wait for the A/B publisher, in the state, when there is one.
        accumulators.keep_closed_windows(!cfg.ab.output_topic.is_empty());
        Engine {
            join: JoinSettings {
                attribution_window,
                max_out_of_orderness: cfg.join.max_out_of_orderness.as_millis_i64(),
                idle_timeout: cfg.join.idle_timeout.as_duration(),
            },
            input_limits: InputLimits {
                max_message_bytes: cfg.limits.max_message_bytes,
                max_results: cfg.limits.max_results,
                max_future_ms: cfg.limits.max_future.as_millis_i64(),
                max_past_ms: Some(cfg.limits.max_past.as_millis_i64()),
            },
            state_limits: StateLimits {
                max_pending: cfg.join.max_pending_impressions,
                max_held: cfg.join.max_held_engagements,
                max_dedup: cfg.join.max_dedup_keys,
            },
            state: StateSize::default(),
            wall_clock_origin: (Instant::now(), chrono::Utc::now().timestamp_millis()),
            aggregation: Aggregation {
                accumulators,
                values: vec![0.0; layout.len()],
                layout,
                first_engagement_delay: Distribution::new(86_400_000 * 7),
                observer: None,
            },
            action_gains: cfg.metrics.action_gains.iter().map(|(a, &g)| (a.as_str().into(), g)).collect(),
            topics,
            window_labels: cfg.metrics.windows.iter().map(|w| w.to_string()).collect(),
            shards: Vec::new(),
            groups: Groups::new(LabelLimits {
                max_experiments: cfg.labels.max_experiments,
                max_variants: cfg.labels.max_variants,
                allowed_experiments: (!cfg.labels.allowed_experiments.is_empty())
                    .then(|| cfg.labels.allowed_experiments.iter().map(|e| e.as_str().into()).collect()),
                idle_expiry_ms: cfg.labels.idle_expiry.as_millis_i64(),
            }),
            counters: Counters::default(),
            frontier: None,
            least_watermark: None,
            processing_time: Distribution::new(60_000_000_000),
            scratch_docs: Vec::with_capacity(256),
            decoders: Decoders::new(cfg),
            reject_log: RejectLog::default(),
            checkpoint_stats: CheckpointStats::default(),
            rebalance_grace: cfg.state.rebalance_grace.as_duration(),
            unit: cfg.ab.unit,
            unit_buckets: cfg.ab.unit_buckets,
            ab: cfg.ab.clone(),
        }
    }

    fn fingerprint(&self) -> StateFingerprint {
        let acc = &self.aggregation.accumulators;
        StateFingerprint {
            metric_keys: self.aggregation.layout.keys().iter().map(|k| k.name()).collect(),
            window_sizes_ms: (0..acc.window_count()).map(|i| acc.window_size_ms(i)).collect(),
            attribution_window_ms: self.join.attribution_window,
            unit_buckets: (self.unit, if self.unit == AbUnit::Impression { 0 } else { self.unit_buckets }),
        }
    }

    /// The state to checkpoint: everything that determines future output, nothing wall-clock.
    pub fn snapshot(&self) -> impl Serialize + '_ {
        let delays = &self.aggregation.first_engagement_delay;
        SnapshotRef {
            fingerprint: self.fingerprint(),
            shards: &self.shards,
            groups: &self.groups,
            accumulators: &self.aggregation.accumulators,
            counters: &self.counters,
            frontier: self.frontier,
            first_engagement_delay: delays.recorded(),
            first_engagement_delay_sum: delays.sum,
        }
    }

    /// An engine for this configuration continuing from a snapshot. Every restored partition is
    /// parked until the consumer is assigned it again.
    pub fn restore(cfg: &Config, snapshot: EngineSnapshot) -> Result<Engine, RestoreError> {
        let mut engine = Engine::new(cfg);
        let (theirs, ours) = (&snapshot.fingerprint, engine.fingerprint());
        let mismatch = |what, a: &dyn std::fmt::Debug, b: &dyn std::fmt::Debug| {
            Err(RestoreError { what, checkpoint: format!("{a:?}"), configured: format!("{b:?}") })
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
        let limits = std::mem::take(&mut engine.groups);
        engine.groups = snapshot.groups;
        engine.groups.set_limits(limits.into_limits());
        let keep = engine.aggregation.accumulators.keeps_closed();
        engine.aggregation.accumulators = snapshot.accumulators;
        engine.aggregation.accumulators.keep_closed_windows(keep);
        engine
            .aggregation
            .first_engagement_delay
            .restore(&snapshot.first_engagement_delay, snapshot.first_engagement_delay_sum);
        engine.counters = snapshot.counters;
        engine.frontier = snapshot.frontier;
        engine.shards = snapshot.shards;
        engine.state = StateSize::default();
        let restored_at = Instant::now();
        for shard in engine.shards.iter_mut().flatten() {
            shard.parked = true;
            shard.parked_since = Some(restored_at);
            let size = StateSize::of(shard);
            engine.state.pending += size.pending;
            engine.state.held += size.held;
            engine.state.dedup += size.dedup;
        }
        Ok(engine)
    }

    /// Records that the message at `offset` of an input is in the state.
    pub fn consumed(&mut self, kind: EventKind, partition: i32, offset: i64) {
        Self::shard(&mut self.shards, partition).inputs[kind.index()].next_offset = Some(offset + 1);
    }

    /// Next offset to consume per partition and input. Parked partitions are left out unless
    /// asked for: their offsets must never be committed (another consumer may own them now).
    pub fn positions(&self, include_parked: bool) -> Vec<(EventKind, i32, i64)> {
        let mut out = Vec::new();
        for (p, shard) in self.shards.iter().enumerate() {
            let Some(shard) = shard.as_ref().filter(|s| include_parked || !s.parked) else { continue };
            for kind in EventKind::ALL {
                if let Some(next) = shard.inputs[kind.index()].next_offset {
                    out.push((kind, p as i32, next));
                }
            }
        }
        out
    }

    /// The checkpointed next offsets of a partition (impressions, engagements), if it has state.
    pub fn position(&self, partition: i32) -> Option<[Option<i64>; 2]> {
        let shard = self.shards.get(usize::try_from(partition).ok()?)?.as_ref()?;
        Some([shard.inputs[0].next_offset, shard.inputs[1].next_offset])
    }

    /// A partition was revoked: freeze its state until it comes back.
    pub fn park(&mut self, partition: i32, now: Instant) {
        if let Some(Some(shard)) = self.shards.get_mut(usize::try_from(partition).unwrap_or(usize::MAX)) {
            shard.parked = true;
            shard.parked_since = Some(now);
        }
    }

    /// A parked partition was consumed elsewhere meanwhile (the group committed past our
    /// position): its open impressions are finalized now with what they have (counted as
    /// evicted), and it starts afresh from the group's offsets.
    pub fn take_over(&mut self, partition: i32) {
        let Engine { shards, aggregation, state, join, counters, .. } = self;
        let Some(Some(shard)) = shards.get_mut(usize::try_from(partition).unwrap_or(usize::MAX)) else { return };
        let finalized = state.track(shard, |s| {
            let mut n = 0u64;
            s.drain(join, |f| {
                n += 1;
                aggregation.finalize(f)
            });
            s.reset_keeping_tally();
            n
        });
        counters.impressions_evicted += finalized;
    }

    /// Records a checkpoint attempt.
    pub fn record_checkpoint(&mut self, bytes: u64, took: Duration, ok: bool, now: Instant) {
        let wall_clock = self.wall_clock_ms(now);
        let stats = &mut self.checkpoint_stats;
        if ok {
            stats.written += 1;
            stats.last_bytes = bytes;
            stats.last_duration = took;
            stats.last_success_ms = Some(wall_clock);
        } else {
            stats.failed += 1;
        }
    }

    pub fn checkpoint_stats(&self) -> CheckpointStats {
        self.checkpoint_stats
    }

    /// Registers a callback for every finalized impression.
    pub fn set_observer(&mut self, observer: FinalizedObserver) {
        self.aggregation.observer = Some(observer);
    }

    /// Keeps every closed window for [`Engine::take_closed_windows`].
    pub fn keep_closed_windows(&mut self) {
        self.aggregation.accumulators.keep_closed_windows(true);
    }

    fn shard(shards: &mut Vec<Option<Box<Shard>>>, partition: i32) -> &mut Shard {
        let i = usize::try_from(partition).unwrap_or(0);
        if shards.len() <= i {
            shards.resize_with(i + 1, || None);
        }
        shards[i].get_or_insert_with(Box::default)
    }

    /// Marks a partition as assigned: until its inputs deliver an event time (or go idle), they
    /// hold its watermark back.
    pub fn assign(&mut self, partition: i32, now: Instant) {
        let shard = Self::shard(&mut self.shards, partition);
        shard.parked = false;
        shard.parked_since = None;
        for kind in EventKind::ALL {
            shard.observe(kind, None, now);
        }
    }

    /// Replay reads old files: no event is too old for it.
    pub fn without_past_limit(mut self) -> Self {
        self.input_limits.max_past_ms = None;
        self
    }

    /// Wall-clock milliseconds at the monotonic instant `now`.
    fn wall_clock_ms(&self, now: Instant) -> EventTime {
        let (origin, origin_ms) = self.wall_clock_origin;
        let since = i64::try_from(now.saturating_duration_since(origin).as_millis()).unwrap_or(i64::MAX);
        origin_ms.saturating_add(since)
    }

    /// Processes one message. Rejections are counted and logged here; the result tells the
    /// caller only for its own bookkeeping.
    pub fn process(&mut self, kind: EventKind, partition: i32, payload: &[u8], now: Instant) -> Result<(), Rejection> {
        self.counters.consumed[kind.index()] += 1;
        let result = self.input_limits.check_size(payload).and_then(|()| match kind {
            EventKind::Impression => self.process_impression(partition, payload, now),
            EventKind::Engagement => self.process_engagement(partition, payload, now),
        });
        if let Err(rejection) = &result {
            // A rejected message proves the input alive, but its timestamp must not move anything.
            Self::shard(&mut self.shards, partition).observe(kind, None, now);
            self.counters.rejected[kind.index()][rejection.reason.index()] += 1;
            self.reject_log.log(now, &self.topics[kind.index()], partition, rejection);
        }
        result
    }

    fn process_impression(&mut self, partition: i32, payload: &[u8], now: Instant) -> Result<(), Rejection> {
        let impression = self.decoders.impression(payload, &mut self.scratch_docs)?;
        if self.scratch_docs.len() > self.input_limits.max_results {
            return Err(Rejection::new(
                RejectReason::TooManyResults,
                format!("{} results, limits.max_results is {}", self.scratch_docs.len(), self.input_limits.max_results),
            ));
        }
        self.input_limits.check_timestamp(impression.timestamp, self.wall_clock_ms(now))?;
        let group =
            self.groups.intern(&impression.experiment, &impression.variant, impression.timestamp, self.least_watermark);
        for retired in self.groups.take_retired() {
            self.aggregation.accumulators.cumulative.remove(retired);
        }
        let key = query_key(&impression.query_id);
        let unit = self.unit_hash(&impression);
        let Engine { shards, state, join, aggregation, counters, scratch_docs, .. } = self;
        let shard = Self::shard(shards, partition);
        shard.observe(EventKind::Impression, Some(impression.timestamp), now);
        let offer = |s: &mut Shard| s.offer_impression(key, impression.timestamp, group, unit, scratch_docs, join);
        let mut outcome = state.track(shard, offer);
        while outcome == ImpressionOutcome::StateFull {
            // As for `join.max_pending_impressions`: the earliest deadline is finalized early.
            if !state.track(shard, |s| s.evict_oldest_pending(join, |f| aggregation.finalize(f))) {
                break;
            }
            counters.impressions_evicted += 1;
            outcome = state.track(shard, offer);
        }
        match outcome {
            ImpressionOutcome::Pending => self.enforce_state_limits(partition),
            ImpressionOutcome::Duplicate => self.counters.impressions_duplicate += 1,
            ImpressionOutcome::Late => self.counters.impressions_late += 1,
            // Nothing pending and still no room cannot happen (an empty shard compacts to
            // nothing); counted rather than lost silently if it ever did.
            ImpressionOutcome::StateFull => self.counters.impressions_evicted += 1,
        }
        Ok(())
    }

    /// The 32-bit hash of an impression's A/B unit. An impression without the configured unit
    /// field is its own cluster (hashed by query id), which is what the impression unit assumes;
    /// it is counted, because many of them mean the statistics are not clustered as configured.
    fn unit_hash(&mut self, impression: &crate::event::Impression<'_>) -> u32 {
        let unit = match self.unit {
            AbUnit::Impression => return 0,
            AbUnit::ClientId => impression.client_id.as_deref(),
            AbUnit::SessionId => impression.session_id.as_deref(),
        };
        let hash = match unit {
            Some(unit) => xxhash_rust::xxh3::xxh3_64(unit.as_bytes()),
            None => {
                self.counters.impressions_without_unit += 1;
                xxhash_rust::xxh3::xxh3_64(impression.query_id.as_bytes()) ^ 0x9e37_79b9_7f4a_7c15
            }
        };
        hash as u32
    }

    fn process_engagement(&mut self, partition: i32, payload: &[u8], now: Instant) -> Result<(), Rejection> {
        let engagement = self.decoders.engagement(payload)?;
        self.input_limits.check_timestamp(engagement.timestamp, self.wall_clock_ms(now))?;
        let gain = self.action_gains.get(engagement.action.as_ref()).copied().unwrap_or(0);
        let identity = engagement_identity(&engagement);
        let shard = Self::shard(&mut self.shards, partition);
        shard.observe(EventKind::Engagement, Some(engagement.timestamp), now);
        let (query, doc) = (query_key(&engagement.query_id), doc_key(&engagement.doc_id));
        self.state.track(shard, |s| s.offer_engagement(query, identity, engagement.timestamp, doc, gain, &self.join));
        self.enforce_state_limits(partition);
        Ok(())
    }

    /// Brings the state back within `[join]`'s limits by evicting from the shard that grew:
    /// the impression with the earliest deadline is finalized early, the oldest held engagement
    /// dropped, the oldest de-duplication key forgotten. Each is counted.
    fn enforce_state_limits(&mut self, partition: i32) {
        let Engine { shards, state, state_limits: limits, join, aggregation, counters, .. } = self;
        let shard = Self::shard(shards, partition);
        while state.pending > limits.max_pending
            && state.track(shard, |s| s.evict_oldest_pending(join, |f| aggregation.finalize(f)))
        {
            counters.impressions_evicted += 1;
        }
        while state.held > limits.max_held && state.track(shard, Shard::evict_oldest_held) {}
        while state.dedup > limits.max_dedup && state.track(shard, Shard::evict_oldest_dedup_key) {
            counters.dedup_keys_evicted += 1;
        }
    }

    /// Records the wall time one message took, for the processing-time distribution.
    pub fn record_processing_time(&mut self, elapsed: Duration) {
        self.processing_time.record(u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX));
    }

    /// Recomputes watermarks at wall time `now`, finalizes what they passed and closes windows.
    pub fn advance(&mut self, now: Instant) {
        let bound = self.join.max_out_of_orderness;
        let idle = self.join.idle_timeout;
        let progress = |clock: &crate::join::InputClock| -> Progress {
            if !clock.is_active(now, idle) {
                Progress::Idle
            } else {
                clock.max_event_time.map_or(Progress::Blocked, |t| Progress::At(t.saturating_sub(bound)))
            }
        };

        // The frontier over every input of every shard.
        let mut least = Progress::Idle;
        let mut newest_event = None::<EventTime>;
        let mut last_active = None::<Instant>;
        for shard in self.shards.iter().flatten().filter(|s| !s.parked) {
            for clock in &shard.inputs {
                least = least.meet(progress(clock));
                newest_event = newest_event.max(clock.max_event_time);
                last_active = last_active.max(clock.last_active);
            }
        }
        let candidate = match least {
            Progress::At(t) => Some(t),
            Progress::Blocked => None,
            Progress::Idle => match (newest_event, last_active) {
                (Some(newest), Some(last)) => {
                    let idle_for = now.saturating_duration_since(last + idle);
                    let idle_ms = i64::try_from(idle_for.as_millis()).unwrap_or(i64::MAX);
                    Some(newest.saturating_sub(bound).saturating_add(idle_ms))
                }
                _ => None,
            },
        };
        if let Some(c) = candidate {
            self.frontier = Some(self.frontier.map_or(c, |f| f.max(c)));
        }

        let Engine { shards, aggregation, frontier, state, join, .. } = self;
        for shard in shards.iter_mut().flatten().filter(|s| !s.parked) {
            let own = shard.inputs.iter().fold(Progress::Idle, |acc, c| acc.meet(progress(c)));
            let target = match own {
                Progress::At(t) => Some(t),
                Progress::Blocked => None,
                Progress::Idle => *frontier,
            };
            if let Some(w) = target {
                state.track(shard, |s| s.advance(w, join, |f| aggregation.finalize(f)));
            }
        }
        if let Some(w) = self.window_closing_watermark(now) {
            self.aggregation.accumulators.close_windows(w);
        }
        self.least_watermark = self.watermark();
    }

    /// The input has ended: finalizes every pending impression and closes every window.
    pub fn finish(&mut self) {
        let Engine { shards, aggregation, state, join, .. } = self;
        for shard in shards.iter_mut().flatten() {
            state.track(shard, |s| s.drain(join, |f| aggregation.finalize(f)));
        }
        aggregation.accumulators.close_all();
    }

    // ---- read access for exporters and reports ----

    pub fn layout(&self) -> &MetricLayout {
        &self.aggregation.layout
    }
    /// The A/B reports of every experiment over `table` (the cumulative one or a closed window's).
    pub fn experiment_reports(
        &self,
        table: &crate::accumulate::GroupTable,
        span: crate::experiments::Span<'_>,
    ) -> Vec<crate::experiments::ExperimentReport> {
        let partitions: Vec<i32> = self
            .shards
            .iter()
            .enumerate()
            .filter(|(_, s)| s.is_some())
            .map(|(i, _)| i32::try_from(i).unwrap_or(i32::MAX))
            .collect();
        let mut reports = crate::experiments::reports(&self.aggregation.layout, &self.groups, table, &self.ab, span);
        for report in &mut reports {
            report.partitions.clone_from(&partitions);
        }
        reports
    }
    pub fn ab(&self) -> &crate::config::AbConfig {
        &self.ab
    }
    pub fn groups(&self) -> &Groups {
        &self.groups
    }
    pub fn accumulators(&self) -> &Accumulators {
        &self.aggregation.accumulators
    }
    pub fn take_closed_windows(&mut self) -> Vec<crate::accumulate::ClosedWindow> {
        self.aggregation.accumulators.take_closed()
    }
    /// The A/B records of the closed windows not yet published: (record id, JSON) per
    /// experiment, and how many windows they cover (to [`Engine::published`] once delivered).
    pub fn unpublished_records(&self) -> (Vec<(String, String)>, usize) {
        let acc = &self.aggregation.accumulators;
        let closed = acc.kept_closed();
        let mut records = Vec::new();
        for window in closed {
            let span = crate::experiments::Span::Window {
                label: self.window_label(window.size_index),
                start: window.start,
                size_ms: acc.window_size_ms(window.size_index),
            };
            for report in self.experiment_reports(&window.groups, span) {
                let json = serde_json::to_string(&report).expect("reports always serialize");
                records.push((report.id, json));
            }
        }
        (records, closed.len())
    }
    /// The first `windows` unpublished closed windows have been delivered.
    pub fn published(&mut self, windows: usize) {
        self.aggregation.accumulators.forget_closed(windows);
    }
    /// How this engine decodes each input, for readers that peek at messages (replay).
    pub fn decoders(&self) -> &Decoders {
        &self.decoders
    }
    pub fn counters(&self) -> &Counters {
        &self.counters
    }
    pub fn topic(&self, kind: EventKind) -> &str {
        &self.topics[kind.index()]
    }
    pub fn window_label(&self, size_index: usize) -> &str {
        &self.window_labels[size_index]
    }
    /// Engagement outcomes summed over every shard.
    pub fn engagement_tally(&self) -> EngagementTally {
        self.shards.iter().flatten().fold(EngagementTally::default(), |mut t, s| {
            t.merge(&s.tally);
            t
        })
    }
    pub fn pending_impressions(&self) -> usize {
        self.state.pending
    }
    pub fn held_engagements(&self) -> usize {
        self.state.held
    }
    pub fn state_size(&self) -> StateSize {
        self.state
    }
    /// How far the watermark trails the wall clock at `now`, in milliseconds.
    pub fn watermark_lag_ms(&self, now: Instant) -> Option<i64> {
        self.watermark().map(|w| self.wall_clock_ms(now).saturating_sub(w))
    }
    /// The least shard watermark, if every shard has one: everything before it is final.
    pub fn watermark(&self) -> Option<EventTime> {
        let mut least = None;
        for shard in self.shards.iter().flatten().filter(|s| !s.parked) {
            let w = shard.watermark()?;
            least = Some(least.map_or(w, |l: EventTime| l.min(w)));
        }
        least
    }
    /// The watermark windows close on: [`Engine::watermark`], also held back by partitions parked
    /// less than `state.rebalance_grace` ago, which may still come back here.
    fn window_closing_watermark(&self, now: Instant) -> Option<EventTime> {
        let mut least = None;
        for shard in self.shards.iter().flatten() {
            let holds_back = !shard.parked
                || shard.parked_since.is_some_and(|since| now.saturating_duration_since(since) < self.rebalance_grace);
            if holds_back {
                let w = shard.watermark()?;
                least = Some(least.map_or(w, |l: EventTime| l.min(w)));
            }
        }
        least
    }

    pub fn first_engagement_delay(&self) -> &Distribution {
        &self.aggregation.first_engagement_delay
    }
    pub fn processing_time(&self) -> &Distribution {
        &self.processing_time
    }
}

/// The de-duplication identity of an engagement: its `event_id` when it has one, else what
/// makes a redelivered copy identical (query, document, action, timestamp). The two forms are
/// hashed with different seeds so they never collide with each other.
fn engagement_identity(e: &Engagement<'_>) -> EngagementId {
    use xxhash_rust::xxh3::{xxh3_128_with_seed, Xxh3};
    match &e.event_id {
        Some(id) => xxh3_128_with_seed(id.as_bytes(), 1),
        None => {
            let mut h = Xxh3::with_seed(2);
            for part in [e.query_id.as_bytes(), e.doc_id.as_bytes(), e.action.as_bytes()] {
                h.update(&(part.len() as u64).to_le_bytes());
                h.update(part);
            }
            h.update(&e.timestamp.to_le_bytes());
            h.digest128()
        }
    }
}

/// Progress of a set of inputs, combined by taking the least.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Progress {
    /// No active input: nothing constrains.
    Idle,
    /// An active input has not delivered an event time yet: nothing may advance.
    Blocked,
    At(EventTime),
}

impl Progress {
    fn meet(self, other: Progress) -> Progress {
        match (self, other) {
            (Progress::Blocked, _) | (_, Progress::Blocked) => Progress::Blocked,
            (Progress::Idle, p) | (p, Progress::Idle) => p,
            (Progress::At(a), Progress::At(b)) => Progress::At(a.min(b)),
        }
    }
}

/// What turns finalized impressions into numbers: split from [`Engine`] so that the join's
/// finalization callback can borrow it while the shards are borrowed.
struct Aggregation {
    layout: MetricLayout,
    accumulators: Accumulators,
    /// Reused buffer for one impression's metric values.
    values: Vec<f64>,
    /// Impression timestamp to first attributed engagement, in milliseconds.
    first_engagement_delay: Distribution,
    observer: Option<FinalizedObserver>,
}

impl Aggregation {
    /// Computes a finalized impression's metrics and adds them to the accumulators: the one
    /// place where an impression becomes numbers.
    fn finalize(&mut self, f: Finalized<'_>) {
        let values = &mut self.values;
        self.layout.evaluate(f.gains, &[], values);
        let abandoned =
            values[self.layout.slot(MetricKind::Abandonment, None).expect("abandonment is always in the layout")];
        self.accumulators.add(f.group, f.timestamp, values, abandoned == 0.0, f.unit);
        if let Some(delay) = f.first_engagement_delay_ms {
            self.first_engagement_delay.record(u64::try_from(delay).unwrap_or(0));
        }
        if let Some(observe) = &mut self.observer {
            observe(&FinalizedView { query: f.query, group: f.group, timestamp: f.timestamp, gains: f.gains, values });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine(window: &str, bound: &str, idle: &str) -> Engine {
        let toml = format!(
            "[join]\nattribution_window = \"{window}\"\nmax_out_of_orderness = \"{bound}\"\nidle_timeout = \"{idle}\"\n[metrics]\ncutoffs = [1, 3]\nwindows = [\"1m\"]\n"
        );
        Engine::new(&Config::from_toml_with_env(&toml, "test", std::iter::empty()).unwrap()).without_past_limit()
    }

    fn imp(q: &str, ts: i64, results: &[&str]) -> Vec<u8> {
        serde_json::json!({"query_id": q, "timestamp": ts, "results": results, "experiment": "e", "variant": "v"})
            .to_string()
            .into_bytes()
    }

    fn eng(q: &str, ts: i64, doc: &str) -> Vec<u8> {
        serde_json::json!({"query_id": q, "timestamp": ts, "doc_id": doc}).to_string().into_bytes()
    }

    fn impressions(e: &Engine) -> u64 {
        e.accumulators().cumulative.iter().map(|(_, s)| s.impressions).sum()
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
        let stats = e.accumulators().cumulative.get(0).unwrap();
        assert_eq!((stats.engaged, stats.mean(1)), (0, 1.0), "abandoned impression");
        // A click for it arriving now is late: counted and dropped.
        e.process(EventKind::Engagement, 0, &eng("q1", 101_000, "a"), t0 + Duration::from_secs(20)).unwrap();
        assert_eq!(e.engagement_tally().late, 1);
        assert_eq!(e.accumulators().cumulative.get(0).unwrap().engaged, 0);
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
        assert_eq!(e.accumulators().cumulative.get(0).unwrap().engaged, 1);
    }

    #[test]
    fn rejected_messages_are_counted_and_do_not_stop_the_stream() {
        let mut e = engine("10s", "0s", "5s");
        let t0 = Instant::now();
        e.process(EventKind::Impression, 0, &imp("q", 1000, &["a"]), t0).unwrap();
        assert!(e.process(EventKind::Impression, 0, b"{nope", t0).is_err());
        assert!(e.process(EventKind::Engagement, 0, br#"{"query_id":"q","timestamp":1}"#, t0).is_err());
        e.process(EventKind::Engagement, 0, &eng("q", 1000, "a"), t0).unwrap();
        e.finish();
        let c = e.counters();
        assert_eq!(c.consumed, [2, 2]);
        assert_eq!(c.rejected[0][RejectReason::InvalidJson.index()], 1);
        assert_eq!(c.rejected[1][RejectReason::MissingField.index()], 1);
        assert_eq!(e.accumulators().cumulative.get(0).unwrap().engaged, 1);
    }

    #[test]
    fn input_limits_reject_before_any_state_changes() {
        let toml = "[limits]\nmax_message_bytes = 200\nmax_results = 3\nmax_future = \"1h\"\nmax_past = \"1d\"\n";
        let mut e = Engine::new(&Config::from_toml_with_env(toml, "test", std::iter::empty()).unwrap());
        let t0 = Instant::now();
        let now_ms = e.wall_clock_ms(t0);
        let reason =
            |e: &mut Engine, payload: &[u8]| e.process(EventKind::Impression, 0, payload, t0).unwrap_err().reason;
        assert_eq!(reason(&mut e, &imp("q", now_ms, &["a"; 60])), RejectReason::TooLarge);
        assert_eq!(reason(&mut e, &imp("q", now_ms, &["a", "b", "c", "d"])), RejectReason::TooManyResults);
        assert_eq!(reason(&mut e, &imp("q", now_ms + 3_600_001, &["a"])), RejectReason::TimestampInFuture);
        assert_eq!(reason(&mut e, &imp("q", now_ms - 86_400_001, &["a"])), RejectReason::TimestampTooOld);
        let far_future_click = eng("q", now_ms + 86_400_000, "a");
        assert_eq!(
            e.process(EventKind::Engagement, 0, &far_future_click, t0).unwrap_err().reason,
            RejectReason::TimestampInFuture
        );
        e.process(EventKind::Impression, 0, &imp("q", now_ms, &["a", "b", "c"]), t0).unwrap();
        // The rejected future timestamps did not move the input clocks.
        assert_eq!(e.shards[0].as_ref().unwrap().inputs[0].max_event_time, Some(now_ms));
        assert_eq!(e.shards[0].as_ref().unwrap().inputs[1].max_event_time, None);
    }

    #[test]
    fn state_limits_evict_oldest_first_and_count_it() {
        let toml = "[join]\nattribution_window = \"10s\"\nmax_pending_impressions = 3\nmax_held_engagements = 2\n";
        let mut e =
            Engine::new(&Config::from_toml_with_env(toml, "test", std::iter::empty()).unwrap()).without_past_limit();
        let t0 = Instant::now();
        for i in 0..10 {
            e.process(EventKind::Impression, 0, &imp(&format!("q{i}"), 1000 + i, &["a"]), t0).unwrap();
        }
        assert_eq!((e.pending_impressions(), e.counters().impressions_evicted), (3, 7));
        assert_eq!(impressions(&e), 7, "evicted impressions are finalized, not lost");
        for i in 0..5 {
            e.process(EventKind::Engagement, 0, &eng(&format!("orphan{i}"), 5000 + i, "a"), t0).unwrap();
        }
        assert_eq!((e.held_engagements(), e.engagement_tally().evicted), (2, 3));
        e.finish();
        assert_eq!((e.pending_impressions(), e.held_engagements(), impressions(&e)), (0, 0, 10));
        assert_eq!(e.engagement_tally().orphaned, 2);
    }

    #[test]
    fn duplicates_count_once_everywhere() {
        let mut e = engine("10s", "0s", "5s");
        let t0 = Instant::now();
        let click =
            serde_json::json!({"query_id": "q", "timestamp": 1500, "doc_id": "a", "event_id": "e1"}).to_string();
        let same_click_no_id = eng("q", 1600, "b");
        e.process(EventKind::Impression, 0, &imp("q", 1000, &["a", "b"]), t0).unwrap();
        e.process(EventKind::Impression, 0, &imp("q", 1000, &["a", "b"]), t0).unwrap();
        for _ in 0..3 {
            e.process(EventKind::Engagement, 0, click.as_bytes(), t0).unwrap();
            e.process(EventKind::Engagement, 0, &same_click_no_id, t0).unwrap();
        }
        e.finish();
        let t = e.engagement_tally();
        assert_eq!((t.attributed, t.duplicate, e.counters().impressions_duplicate), (2, 4, 1));
        assert_eq!(impressions(&e), 1);
    }

    #[test]
    fn timestamps_before_1970_are_rejected_even_without_a_past_limit() {
        let mut e = engine("10s", "0s", "5s");
        let t0 = Instant::now();
        for ts in [i64::MIN, -1] {
            let reason = e.process(EventKind::Impression, 0, &imp("q", ts, &["a"]), t0).unwrap_err().reason;
            assert_eq!(reason, RejectReason::TimestampTooOld);
            let reason = e.process(EventKind::Engagement, 0, &eng("q", ts, "a"), t0).unwrap_err().reason;
            assert_eq!(reason, RejectReason::TimestampTooOld);
        }
        e.process(EventKind::Impression, 0, &imp("q", 0, &["a"]), t0).unwrap();
        e.finish();
        assert_eq!(impressions(&e), 1);
    }
}
