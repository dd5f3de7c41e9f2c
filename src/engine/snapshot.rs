//! The engine's state as a checkpoint holds it: what it must agree on with the running
//! configuration, the borrowed form written and the owned form read back, and the restore.

use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::limits::StateSize;
use super::task::Tasks;
use super::telemetry::Counters;
use super::Engine;
use crate::accumulate::{Accumulators, Groups};
use crate::config::{AbUnit, Config};
use crate::time::EventTime;

/// What a checkpoint must agree on with the running configuration for its state to mean the
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

/// The engine's state as a checkpoint writes it (borrowed, no copy). Everything that
/// determines future output, nothing wall-clock. The fields are the engine's of the same names
/// (the frontier is its watermarks', the delay histogram as recorded buckets and the exact sum).
#[derive(Serialize)]
struct SnapshotRef<'a> {
    fingerprint: StateFingerprint,
    tasks: &'a Tasks,
    groups: &'a Groups,
    accumulators: &'a Accumulators,
    counters: &'a Counters,
    frontier: Option<EventTime>,
    first_engagement_delay: Vec<(u64, u64)>,
    first_engagement_delay_sum: u128,
}

/// The engine's state as a checkpoint reads it back: [`SnapshotRef`]'s fields, owned, in the
/// same order (postcard is positional).
#[derive(Deserialize)]
pub struct EngineSnapshot {
    fingerprint: StateFingerprint,
    tasks: Tasks,
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
    /// The configuration key that differs.
    what: &'static str,
    /// Its value in the checkpoint.
    checkpoint: String,
    /// Its value in the running configuration.
    configured: String,
}

impl Engine {
    fn fingerprint(&self) -> StateFingerprint {
        let acc = &self.aggregation.accumulators;
        StateFingerprint {
            metric_keys: self.aggregation.layout.keys().iter().map(|k| k.name()).collect(),
            window_sizes_ms: (0..acc.window_count()).map(|i| acc.window_size_ms(i)).collect(),
            attribution_window_ms: self.join.attribution_window,
            unit_buckets: (self.ab.unit, if self.ab.unit == AbUnit::Impression { 0 } else { self.ab.unit_buckets }),
        }
    }

    /// The state to checkpoint: everything that determines future output, nothing wall-clock.
    pub fn snapshot(&self) -> impl Serialize + '_ {
        let delays = &self.aggregation.first_engagement_delay;
        SnapshotRef {
            fingerprint: self.fingerprint(),
            tasks: &self.tasks,
            groups: &self.groups,
            accumulators: &self.aggregation.accumulators,
            counters: &self.counters,
            frontier: self.watermarks.frontier,
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
        engine.watermarks.frontier = snapshot.frontier;
        engine.tasks = snapshot.tasks;
        engine.state = StateSize::default();
        let restored_at = Instant::now();
        for task in engine.tasks.iter_mut() {
            task.parked = true;
            task.parked_since = Some(restored_at);
            engine.state.add(StateSize::of(&task.join));
        }
        Ok(engine)
    }
}
