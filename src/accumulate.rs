//! Aggregation of finalized impressions: per (experiment, variant) group, cumulatively and per
//! event-time tumbling window.
//!
//! Sums are kept in fixed point (an `i128` of 2^-56 units) rather than `f64`: integer addition is
//! associative, so a sum does not depend on the order in which impressions were finalized, on how
//! partitions interleaved, or on whether the process restarted. Per impression the truncation is
//! below 2^-56, far below the 1e-9 that results are compared to, and an `i128` holds 2^70
//! impressions' worth of ones.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::ids::GroupId;
use crate::time::EventTime;

const FIXED_ONE: f64 = (1u64 << 56) as f64;

/// Converts a metric value to fixed point.
/// Metric values lie in [0, 1], so the value fits an `i64`: converting through it is a single
/// instruction, where a direct `f64 -> i128` conversion is a software routine. Truncating rather
/// than rounding (a libm call per value) loses less than 2^-56 per impression.
fn to_fixed(v: f64) -> i64 {
    (v * FIXED_ONE) as i64
}

/// Converts a fixed-point sum back to a float.
fn from_fixed(sum: i128) -> f64 {
    sum as f64 / FIXED_ONE
}

/// The smallest multiple of `m` that is at least `x` (saturating).
fn ceil_to_multiple(x: i64, m: i64) -> i64 {
    match x.rem_euclid(m) {
        0 => x,
        r => x.saturating_add(m - r),
    }
}

/// The label value that folded experiments and variants are reported under.
pub const FOLDED: &str = "other";

/// The cardinality guard's settings; see `[labels]` in the configuration.
#[derive(Debug, Clone)]
pub struct LabelLimits {
    pub max_experiments: usize,
    pub max_variants: usize,
    /// Only these experiments get their own series, when set.
    pub allowed_experiments: Option<HashSet<Box<str>>>,
    /// A group idle for this long (event time, behind the watermark) is retired.
    pub idle_expiry_ms: i64,
}

impl LabelLimits {
    /// No limits: every value gets its own group (tests and tools).
    pub fn unlimited() -> Self {
        LabelLimits {
            max_experiments: usize::MAX,
            max_variants: usize::MAX,
            allowed_experiments: None,
            idle_expiry_ms: i64::MAX,
        }
    }
}

/// Which label a folded value belonged to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FoldedLabel {
    Experiment = 0,
    Variant = 1,
}

/// Interns (experiment, variant) names so that the hot path carries a `u32`, and guards their
/// cardinality: beyond the configured number of active values, new ones are folded into
/// [`FOLDED`] and counted; values idle for `idle_expiry` are retired to make room.
#[derive(Debug, Serialize, Deserialize)]
pub struct Groups {
    /// Names by id. Kept after retirement, because closed windows may still name the group;
    /// ids are never reused.
    names: Vec<(Box<str>, Box<str>)>,
    /// Latest impression timestamp per id, for retirement.
    last_seen: Vec<EventTime>,
    /// Active groups: experiment → variant → id; two levels so a lookup borrows both strings.
    index: HashMap<Box<str>, HashMap<Box<str>, GroupId>>,
    /// From the configuration, not the checkpoint: limits may change across a restart.
    #[serde(skip, default = "LabelLimits::unlimited")]
    limits: LabelLimits,
    /// Impressions whose experiment / variant value was folded, by [`FoldedLabel`].
    folded: [u64; 2],
    /// Retired since the last [`Groups::take_retired`]: their cumulative series are dropped.
    retired: Vec<GroupId>,
    /// Event time of the last retirement scan: a flood of new values scans at most once a minute.
    last_retirement_scan: EventTime,
}

impl Default for Groups {
    fn default() -> Self {
        Self::new(LabelLimits::unlimited())
    }
}

impl Groups {
    const RETIREMENT_SCAN_INTERVAL_MS: i64 = 60_000;

    pub fn new(limits: LabelLimits) -> Self {
        Groups {
            names: Vec::new(),
            last_seen: Vec::new(),
            index: HashMap::new(),
            limits,
            folded: [0; 2],
            retired: Vec::new(),
            last_retirement_scan: EventTime::MIN,
        }
    }

    /// The group of an impression at `timestamp`. `watermark` (everything before it is final)
    /// bounds which idle groups may be retired to make room.
    pub fn intern(
        &mut self,
        experiment: &str,
        variant: &str,
        timestamp: EventTime,
        watermark: Option<EventTime>,
    ) -> GroupId {
        if let Some(&id) = self.index.get(experiment).and_then(|v| v.get(variant)) {
            let seen = &mut self.last_seen[id as usize];
            *seen = (*seen).max(timestamp);
            return id;
        }
        let (experiment, variant) = self.admit(experiment, variant, watermark);
        if let Some(&id) = self.index.get(experiment).and_then(|v| v.get(variant)) {
            let seen = &mut self.last_seen[id as usize];
            *seen = (*seen).max(timestamp);
            return id;
        }
        let id = GroupId::try_from(self.names.len()).expect("fewer than 2^32 groups");
        self.names.push((experiment.into(), variant.into()));
        self.last_seen.push(timestamp);
        self.index.entry(experiment.into()).or_default().insert(variant.into(), id);
        id
    }

    /// Decides the labels a new (experiment, variant) pair is reported under.
    fn admit<'a>(&mut self, experiment: &'a str, variant: &'a str, watermark: Option<EventTime>) -> (&'a str, &'a str) {
        let fold_experiment = |groups: &mut Self| {
            groups.folded[FoldedLabel::Experiment as usize] += 1;
            (FOLDED, FOLDED)
        };
        if experiment == FOLDED {
            return (
                FOLDED,
                if variant == FOLDED || self.variant_fits(FOLDED, variant, watermark) {
                    variant
                } else {
                    self.fold_variant()
                },
            );
        }
        if self.limits.allowed_experiments.as_ref().is_some_and(|allowed| !allowed.contains(experiment)) {
            return fold_experiment(self);
        }
        if !self.index.contains_key(experiment) && !self.experiment_fits(watermark) {
            return fold_experiment(self);
        }
        if variant != FOLDED && !self.variant_fits(experiment, variant, watermark) {
            return (experiment, self.fold_variant());
        }
        (experiment, variant)
    }

    fn fold_variant(&mut self) -> &'static str {
        self.folded[FoldedLabel::Variant as usize] += 1;
        FOLDED
    }

    fn active_experiments(&self) -> usize {
        self.index.len() - usize::from(self.index.contains_key(FOLDED))
    }

    fn experiment_fits(&mut self, watermark: Option<EventTime>) -> bool {
        if self.active_experiments() < self.limits.max_experiments {
            return true;
        }
        self.retire_idle(watermark);
        self.active_experiments() < self.limits.max_experiments
    }

    fn variant_fits(&mut self, experiment: &str, variant: &str, watermark: Option<EventTime>) -> bool {
        let count =
            |groups: &Self| groups.index.get(experiment).map_or(0, |v| v.len() - usize::from(v.contains_key(FOLDED)));
        if self.index.get(experiment).is_some_and(|v| v.contains_key(variant)) || count(self) < self.limits.max_variants
        {
            return true;
        }
        self.retire_idle(watermark);
        count(self) < self.limits.max_variants
    }

    /// Retires groups whose last impression is more than `idle_expiry` behind the watermark:
    /// every impression and window of theirs is final by then (checked at configuration time).
    fn retire_idle(&mut self, watermark: Option<EventTime>) {
        let Some(watermark) = watermark else { return };
        if watermark.saturating_sub(self.last_retirement_scan) < Self::RETIREMENT_SCAN_INTERVAL_MS {
            return;
        }
        self.last_retirement_scan = watermark;
        let horizon = watermark.saturating_sub(self.limits.idle_expiry_ms);
        let (last_seen, retired) = (&self.last_seen, &mut self.retired);
        self.index.retain(|_, variants| {
            variants.retain(|_, id| {
                let keep = last_seen[*id as usize] >= horizon;
                if !keep {
                    retired.push(*id);
                }
                keep
            });
            !variants.is_empty()
        });
    }

    /// Takes the limits out (to carry them over to a restored table).
    pub fn into_limits(self) -> LabelLimits {
        self.limits
    }

    /// Applies the configured limits (after restoring from a checkpoint).
    pub fn set_limits(&mut self, limits: LabelLimits) {
        self.limits = limits;
    }

    /// Groups retired since the last call.
    pub fn take_retired(&mut self) -> Vec<GroupId> {
        std::mem::take(&mut self.retired)
    }

    /// Impressions folded into [`FOLDED`], for one label.
    pub fn folded(&self, label: FoldedLabel) -> u64 {
        self.folded[label as usize]
    }

    /// Groups with their own series right now.
    pub fn active(&self) -> usize {
        self.index.values().map(HashMap::len).sum()
    }

    pub fn name(&self, id: GroupId) -> (&str, &str) {
        let (e, v) = &self.names[id as usize];
        (e, v)
    }
    pub fn len(&self) -> usize {
        self.names.len()
    }
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

/// What every [`GroupStats`] of an accumulator carries: fixed when the engine is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatsShape {
    /// Metric slots of the layout.
    pub metrics: usize,
    /// `ab.unit_buckets` when impressions are clustered by user or session (`ab.unit`).
    pub unit_buckets: Option<u32>,
    /// `ab.max_units`: distinct units counted exactly per group and table, for the SRM test.
    pub max_units: usize,
}

impl StatsShape {
    pub fn plain(metrics: usize) -> Self {
        StatsShape { metrics, unit_buckets: None, max_units: 0 }
    }
}

/// An impression's unit, as the accumulators need it.
#[derive(Debug, Clone, Copy)]
struct Unit {
    hash: u32,
    bucket: u32,
    max_units: usize,
}

/// Totals of the impressions of one unit bucket: whole users or sessions, so buckets are
/// independent observations for the cluster-robust variance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketSums {
    pub impressions: u64,
    /// Fixed-point sum per metric slot.
    sums: Box<[i128]>,
}

impl BucketSums {
    pub fn sum(&self, slot: usize) -> f64 {
        from_fixed(self.sums[slot])
    }
}

/// Sums over the finalized impressions of one group (in one window, or ever): what the means,
/// their variances and the A/B tests are computed from. Every field merges by addition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupStats {
    pub impressions: u64,
    /// Impressions with at least one relevant result.
    pub engaged: u64,
    /// Fixed-point sum per metric slot of the layout.
    sums: Box<[i128]>,
    /// Fixed-point sum of squared values per slot, for standard deviations.
    squares: Box<[i128]>,
    /// Per unit bucket, when the A/B unit is a user or session; empty otherwise. Ordered, so
    /// the floating-point sums over buckets come out the same in every run and after a restore.
    buckets: BTreeMap<u32, BucketSums>,
    /// The distinct units (32-bit hashes) seen, up to `ab.max_units`: the sample-ratio test
    /// counts units, because impressions per unit vary far more than chance.
    units: HashSet<u32>,
    /// More than `ab.max_units` distinct units arrived: `units` is incomplete.
    units_overflowed: bool,
}

impl GroupStats {
    pub fn new(shape: StatsShape) -> Self {
        let zeros = || vec![0; shape.metrics].into_boxed_slice();
        GroupStats {
            impressions: 0,
            engaged: 0,
            sums: zeros(),
            squares: zeros(),
            buckets: BTreeMap::new(),
            units: HashSet::new(),
            units_overflowed: false,
        }
    }

    pub fn add(&mut self, values: &[f64], engaged: bool) {
        let fixed: Vec<i64> = values.iter().map(|&v| to_fixed(v)).collect();
        let squares: Vec<i64> = values.iter().map(|&v| to_fixed(v * v)).collect();
        self.add_fixed(&fixed, &squares, engaged, None);
    }

    /// [`GroupStats::add`] for values already in fixed point (converted once per impression).
    fn add_fixed(&mut self, values: &[i64], squares: &[i64], engaged: bool, unit: Option<Unit>) {
        self.impressions += 1;
        self.engaged += u64::from(engaged);
        for (sum, &v) in self.sums.iter_mut().zip(values) {
            *sum += i128::from(v);
        }
        for (sum, &v) in self.squares.iter_mut().zip(squares) {
            *sum += i128::from(v);
        }
        if let Some(unit) = unit {
            if !self.units_overflowed && self.units.len() < unit.max_units {
                self.units.insert(unit.hash);
            } else if !self.units.contains(&unit.hash) {
                self.units_overflowed = true;
            }
            let sums = self
                .buckets
                .entry(unit.bucket)
                .or_insert_with(|| BucketSums { impressions: 0, sums: vec![0; values.len()].into_boxed_slice() });
            sums.impressions += 1;
            for (sum, &v) in sums.sums.iter_mut().zip(values) {
                *sum += i128::from(v);
            }
        }
    }

    /// Adds another group's sums: exact, so partial results merge in any order.
    pub fn merge(&mut self, other: &GroupStats) {
        self.impressions += other.impressions;
        self.engaged += other.engaged;
        for (a, b) in self.sums.iter_mut().zip(other.sums.iter()) {
            *a += b;
        }
        for (a, b) in self.squares.iter_mut().zip(other.squares.iter()) {
            *a += b;
        }
        for (bucket, theirs) in &other.buckets {
            let ours = self
                .buckets
                .entry(*bucket)
                .or_insert_with(|| BucketSums { impressions: 0, sums: vec![0; theirs.sums.len()].into_boxed_slice() });
            ours.impressions += theirs.impressions;
            for (a, b) in ours.sums.iter_mut().zip(theirs.sums.iter()) {
                *a += b;
            }
        }
        self.units.extend(&other.units);
        self.units_overflowed |= other.units_overflowed;
    }

    pub fn sum(&self, slot: usize) -> f64 {
        from_fixed(self.sums[slot])
    }

    /// Mean over every impression of the group, empty-R impressions counting as 0.
    pub fn mean(&self, slot: usize) -> f64 {
        if self.impressions == 0 {
            0.0
        } else {
            from_fixed(self.sums[slot]) / self.impressions as f64
        }
    }

    /// Count, sum and sum of squares of one metric slot.
    pub fn moments(&self, slot: usize) -> crate::stats::Moments {
        crate::stats::Moments {
            n: self.impressions,
            sum: from_fixed(self.sums[slot]),
            sum_squares: from_fixed(self.squares[slot]),
        }
    }

    /// The per-bucket moments of one slot, when impressions were clustered.
    pub fn cluster_moments(&self, slot: usize) -> Option<crate::stats::ClusterMoments> {
        if self.buckets.is_empty() {
            return None;
        }
        let mut moments = crate::stats::ClusterMoments::default();
        for bucket in self.buckets.values() {
            moments.add_bucket(bucket.impressions as f64, bucket.sum(slot));
        }
        Some(moments)
    }

    /// Non-empty unit buckets.
    pub fn bucket_count(&self) -> usize {
        self.buckets.len()
    }

    /// Distinct units seen, or `None` when there were more than `ab.max_units`.
    pub fn distinct_units(&self) -> Option<usize> {
        (!self.units_overflowed).then_some(self.units.len())
    }
}

/// Stats per group, indexed by [`GroupId`]; a group with no impression here has none.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupTable {
    by_group: Vec<Option<GroupStats>>,
}

impl GroupTable {
    fn entry(&mut self, group: GroupId, shape: StatsShape) -> &mut GroupStats {
        let i = group as usize;
        if self.by_group.len() <= i {
            self.by_group.resize(i + 1, None);
        }
        self.by_group[i].get_or_insert_with(|| GroupStats::new(shape))
    }
    pub fn iter(&self) -> impl Iterator<Item = (GroupId, &GroupStats)> {
        self.by_group.iter().enumerate().filter_map(|(i, s)| s.as_ref().map(|s| (i as GroupId, s)))
    }
    pub fn get(&self, group: GroupId) -> Option<&GroupStats> {
        self.by_group.get(group as usize).and_then(Option::as_ref)
    }
    /// Drops a group's stats (a retired label group leaves the exported series).
    pub fn remove(&mut self, group: GroupId) {
        if let Some(slot) = self.by_group.get_mut(group as usize) {
            *slot = None;
        }
    }
}

/// A window whose every impression is final: its figures never change again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClosedWindow {
    /// Index into the configured window sizes.
    pub size_index: usize,
    pub start: EventTime,
    pub groups: GroupTable,
}

/// Open windows of one size, keyed by start time.
#[derive(Debug, Serialize, Deserialize)]
struct WindowSeries {
    size_ms: i64,
    open: BTreeMap<EventTime, GroupTable>,
    /// Every window starting before this is closed; an impression finalized into one of them
    /// (possible only for a partition that appeared after the window closed) is counted, not added.
    closed_before: EventTime,
}

/// Cumulative and windowed accumulators.
#[derive(Debug, Serialize, Deserialize)]
pub struct Accumulators {
    shape: StatsShape,
    /// How long after a window's end its last impression can still be open.
    attribution_window_ms: i64,
    pub cumulative: GroupTable,
    series: Vec<WindowSeries>,
    /// Newest closed window per size, for the `rankpulse_window_mean` gauges.
    newest_closed: Vec<Option<ClosedWindow>>,
    /// Closed windows not yet taken by [`Accumulators::take_closed`] (replay output) or
    /// acknowledged by the A/B output topic's publisher. Checkpointed, so a window that closed
    /// just before a crash is still published after the restart.
    recently_closed: Vec<ClosedWindow>,
    /// Whether closed windows are kept for `take_closed`; the daemon needs only the newest.
    #[serde(skip)]
    keep_closed: bool,
    /// Impressions finalized after their window had closed.
    pub window_late_impressions: u64,
    /// Reused buffers: one impression's values and squared values in fixed point, converted
    /// once for every table.
    #[serde(skip)]
    fixed_scratch: Vec<i64>,
    #[serde(skip)]
    squares_scratch: Vec<i64>,
}

impl Accumulators {
    pub fn new(shape: StatsShape, window_sizes_ms: &[i64], attribution_window_ms: i64) -> Self {
        Accumulators {
            shape,
            attribution_window_ms,
            cumulative: GroupTable::default(),
            series: window_sizes_ms
                .iter()
                .map(|&size_ms| WindowSeries { size_ms, open: BTreeMap::new(), closed_before: EventTime::MIN })
                .collect(),
            newest_closed: vec![None; window_sizes_ms.len()],
            recently_closed: Vec::new(),
            keep_closed: false,
            window_late_impressions: 0,
            fixed_scratch: Vec::new(),
            squares_scratch: Vec::new(),
        }
    }

    /// Keep every closed window for [`Accumulators::take_closed`] (replay prints them all).
    pub fn keep_closed_windows(&mut self, keep: bool) {
        self.keep_closed = keep;
        if !keep {
            self.recently_closed.clear();
        }
    }

    pub fn keeps_closed(&self) -> bool {
        self.keep_closed
    }

    pub fn window_size_ms(&self, size_index: usize) -> i64 {
        self.series[size_index].size_ms
    }
    pub fn window_count(&self) -> usize {
        self.series.len()
    }

    /// Adds one finalized impression's metric values. `unit` is the hash of its A/B unit
    /// (ignored unless the accumulators are clustered).
    pub fn add(&mut self, group: GroupId, timestamp: EventTime, values: &[f64], engaged: bool, unit: u32) {
        let shape = self.shape;
        let unit =
            shape.unit_buckets.map(|buckets| Unit { hash: unit, bucket: unit % buckets, max_units: shape.max_units });
        let (mut fixed, mut squares) =
            (std::mem::take(&mut self.fixed_scratch), std::mem::take(&mut self.squares_scratch));
        fixed.clear();
        fixed.extend(values.iter().map(|&v| to_fixed(v)));
        squares.clear();
        squares.extend(values.iter().map(|&v| to_fixed(v * v)));
        self.cumulative.entry(group, shape).add_fixed(&fixed, &squares, engaged, unit);
        for series in &mut self.series {
            let start = timestamp.div_euclid(series.size_ms) * series.size_ms;
            if start < series.closed_before {
                self.window_late_impressions += 1;
                continue;
            }
            series.open.entry(start).or_default().entry(group, shape).add_fixed(&fixed, &squares, engaged, unit);
        }
        self.fixed_scratch = fixed;
        self.squares_scratch = squares;
    }

    /// Closes every window whose impressions are all final once every shard's watermark has
    /// reached `watermark`: its last impression's deadline is `end - 1 + attribution_window`.
    pub fn close_windows(&mut self, watermark: EventTime) {
        for (i, series) in self.series.iter_mut().enumerate() {
            let reach = watermark.saturating_sub(self.attribution_window_ms);
            // window [s, s + size) is closed when s + size <= reach
            let bound = reach.saturating_sub(series.size_ms).saturating_add(1);
            while let Some(entry) = series.open.first_entry() {
                if *entry.key() >= bound {
                    break;
                }
                let (start, groups) = entry.remove_entry();
                let closed = ClosedWindow { size_index: i, start, groups };
                if self.keep_closed {
                    self.recently_closed.push(closed.clone());
                }
                self.newest_closed[i] = Some(closed);
            }
            series.closed_before = series.closed_before.max(ceil_to_multiple(bound, series.size_ms));
        }
    }

    /// Closes every open window (the stream has ended).
    pub fn close_all(&mut self) {
        self.close_windows(EventTime::MAX);
    }

    pub fn newest_closed(&self) -> impl Iterator<Item = &ClosedWindow> {
        self.newest_closed.iter().flatten()
    }

    /// Windows closed since the last call, oldest first per size.
    pub fn take_closed(&mut self) -> Vec<ClosedWindow> {
        std::mem::take(&mut self.recently_closed)
    }

    /// Closed windows kept and not yet taken, in closing order.
    pub fn kept_closed(&self) -> &[ClosedWindow] {
        &self.recently_closed
    }

    /// Forgets the first `n` kept closed windows (they have been published).
    pub fn forget_closed(&mut self, n: usize) {
        self.recently_closed.drain(..n.min(self.recently_closed.len()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_point_sums_do_not_depend_on_order() {
        let values: Vec<f64> = (1..200).map(|i| 1.0 / f64::from(i)).collect();
        let mut forward = GroupStats::new(StatsShape::plain(1));
        let mut backward = GroupStats::new(StatsShape::plain(1));
        for v in &values {
            forward.add(&[*v], true);
        }
        for v in values.iter().rev() {
            backward.add(&[*v], true);
        }
        assert_eq!(forward, backward);
        let exact: f64 = values.iter().sum();
        assert!((forward.sum(0) - exact).abs() < 1e-12);
    }

    #[test]
    fn groups_intern_once() {
        let mut g = Groups::default();
        let a = g.intern("e1", "control", 0, None);
        let b = g.intern("e1", "treatment", 0, None);
        assert_eq!(g.intern("e1", "control", 0, None), a);
        assert_ne!(a, b);
        assert_eq!(g.name(b), ("e1", "treatment"));
    }

    #[test]
    fn cardinality_guard_folds_excess_values_and_retires_idle_ones() {
        let limits =
            LabelLimits { max_experiments: 2, max_variants: 2, allowed_experiments: None, idle_expiry_ms: 1_000_000 };
        let mut g = Groups::new(limits);
        let e1a = g.intern("e1", "a", 0, None);
        g.intern("e1", "b", 0, None);
        // A third variant of e1 folds into e1/other; a third experiment into other/other.
        let folded_variant = g.intern("e1", "c", 0, None);
        assert_eq!(g.name(folded_variant), ("e1", FOLDED));
        assert_eq!(g.intern("e1", "d", 0, None), folded_variant);
        g.intern("e2", "a", 0, None);
        let folded_experiment = g.intern("e3", "a", 0, None);
        assert_eq!(g.name(folded_experiment), (FOLDED, FOLDED));
        assert_eq!((g.folded(FoldedLabel::Experiment), g.folded(FoldedLabel::Variant)), (1, 2));
        // A flood of unique variant names creates no new groups beyond e2/other.
        g.intern("e2", "b", 0, None);
        let before = g.len();
        for i in 0..10_000 {
            g.intern("e2", &format!("v{i}"), 0, None);
        }
        assert_eq!(g.len(), before + 1, "only e2/other is new");
        // Once e1 is idle past the expiry (behind the watermark), it is retired and e3 fits.
        g.intern("e2", "a", 2_000_000, None);
        let e3 = g.intern("e3", "a", 2_000_000, Some(1_500_000));
        assert_eq!(g.name(e3), ("e3", "a"));
        let retired = g.take_retired();
        assert!(retired.contains(&e1a) && retired.contains(&folded_variant), "{retired:?}");
        assert!(g.active() <= 2 * 3, "at most 2 experiments x (2 variants + other), plus other/other");
    }

    #[test]
    fn allowlist_folds_everything_else() {
        let limits = LabelLimits {
            max_experiments: 10,
            max_variants: 10,
            allowed_experiments: Some(["ranker".into()].into_iter().collect()),
            idle_expiry_ms: i64::MAX,
        };
        let mut g = Groups::new(limits);
        let (allowed, rogue) = (g.intern("ranker", "t", 0, None), g.intern("rogue", "t", 0, None));
        assert_eq!((g.name(allowed), g.name(rogue)), (("ranker", "t"), (FOLDED, FOLDED)));
        assert_eq!(g.folded(FoldedLabel::Experiment), 1);
    }

    #[test]
    fn windows_close_when_their_last_impression_is_final() {
        // 1-second windows, 100 ms attribution window.
        let mut acc = Accumulators::new(StatsShape::plain(1), &[1000], 100);
        acc.keep_closed_windows(true);
        acc.add(0, 999, &[1.0], true, 0);
        acc.add(0, 1000, &[0.5], true, 0);
        acc.close_windows(1099);
        assert!(acc.take_closed().is_empty(), "impression at 999 is final only when the watermark passes 1099");
        acc.close_windows(1100);
        let closed = acc.take_closed();
        assert_eq!(closed.len(), 1);
        assert_eq!(closed[0].start, 0);
        assert_eq!(closed[0].groups.get(0).unwrap().mean(0), 1.0);
        // A straggler for the closed window is counted, not added; cumulative still has it.
        acc.add(0, 10, &[0.0], false, 0);
        assert_eq!(acc.window_late_impressions, 1);
        assert_eq!(acc.cumulative.get(0).unwrap().impressions, 3);
        acc.close_all();
        assert_eq!(acc.take_closed()[0].start, 1000);
        assert_eq!(acc.newest_closed().next().unwrap().start, 1000);
    }

    #[test]
    fn negative_timestamps_align_to_the_epoch() {
        let mut acc = Accumulators::new(StatsShape::plain(1), &[1000], 0);
        acc.keep_closed_windows(true);
        acc.add(0, -1, &[1.0], true, 0);
        acc.close_all();
        assert_eq!(acc.take_closed()[0].start, -1000);
    }
}
