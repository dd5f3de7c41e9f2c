//! Aggregation of finalized impressions: per (experiment, variant) group, cumulatively and per
//! event-time tumbling window.
//!
//! Sums are kept in fixed point (an `i128` of 2^-56 units) rather than `f64`: integer addition is
//! associative, so a sum does not depend on the order in which impressions were finalized, on how
//! partitions interleaved, or on whether the process restarted. Per impression the rounding is at
//! most 2^-57, far below the 1e-9 that results are compared to, and an `i128` holds 2^70
//! impressions' worth of ones.

use std::collections::{BTreeMap, HashMap};

use crate::time::EventTime;

/// Dense id of an (experiment, variant) pair, assigned in order of first appearance.
pub type GroupId = u32;

const FIXED_ONE: f64 = (1u64 << 56) as f64;

/// Converts a metric value to fixed point.
fn to_fixed(v: f64) -> i128 {
    (v * FIXED_ONE).round() as i128
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

/// Interns (experiment, variant) names so that the hot path carries a `u32`.
#[derive(Debug, Default)]
pub struct Groups {
    names: Vec<(Box<str>, Box<str>)>,
    /// experiment → variant → id; two levels so a lookup borrows both strings, no allocation.
    index: HashMap<Box<str>, HashMap<Box<str>, GroupId>>,
}

impl Groups {
    pub fn intern(&mut self, experiment: &str, variant: &str) -> GroupId {
        if let Some(&id) = self.index.get(experiment).and_then(|v| v.get(variant)) {
            return id;
        }
        let id = GroupId::try_from(self.names.len()).expect("fewer than 2^32 groups");
        self.names.push((experiment.into(), variant.into()));
        self.index.entry(experiment.into()).or_default().insert(variant.into(), id);
        id
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

/// Sums over the finalized impressions of one group (in one window, or ever).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupStats {
    pub impressions: u64,
    /// Impressions with at least one relevant result.
    pub engaged: u64,
    /// Fixed-point sum per metric slot of the layout.
    sums: Box<[i128]>,
}

impl GroupStats {
    pub fn new(metric_count: usize) -> Self {
        GroupStats { impressions: 0, engaged: 0, sums: vec![0; metric_count].into_boxed_slice() }
    }

    pub fn add(&mut self, values: &[f64], engaged: bool) {
        self.impressions += 1;
        self.engaged += u64::from(engaged);
        for (sum, &v) in self.sums.iter_mut().zip(values) {
            *sum += to_fixed(v);
        }
    }

    /// Adds another group's sums: exact, so partial results merge in any order.
    pub fn merge(&mut self, other: &GroupStats) {
        self.impressions += other.impressions;
        self.engaged += other.engaged;
        for (a, b) in self.sums.iter_mut().zip(other.sums.iter()) {
            *a += b;
        }
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
}

/// Stats per group, indexed by [`GroupId`]; a group with no impression here has none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupTable {
    by_group: Vec<Option<GroupStats>>,
}

impl GroupTable {
    fn entry(&mut self, group: GroupId, metric_count: usize) -> &mut GroupStats {
        let i = group as usize;
        if self.by_group.len() <= i {
            self.by_group.resize(i + 1, None);
        }
        self.by_group[i].get_or_insert_with(|| GroupStats::new(metric_count))
    }
    pub fn iter(&self) -> impl Iterator<Item = (GroupId, &GroupStats)> {
        self.by_group.iter().enumerate().filter_map(|(i, s)| s.as_ref().map(|s| (i as GroupId, s)))
    }
    pub fn get(&self, group: GroupId) -> Option<&GroupStats> {
        self.by_group.get(group as usize).and_then(Option::as_ref)
    }
}

/// A window whose every impression is final: its figures never change again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClosedWindow {
    /// Index into the configured window sizes.
    pub size_index: usize,
    pub start: EventTime,
    pub groups: GroupTable,
}

/// Open windows of one size, keyed by start time.
#[derive(Debug)]
struct WindowSeries {
    size_ms: i64,
    open: BTreeMap<EventTime, GroupTable>,
    /// Every window starting before this is closed; an impression finalized into one of them
    /// (possible only for a partition that appeared after the window closed) is counted, not added.
    closed_before: EventTime,
}

/// Cumulative and windowed accumulators.
#[derive(Debug)]
pub struct Accumulators {
    metric_count: usize,
    /// How long after a window's end its last impression can still be open.
    attribution_window_ms: i64,
    pub cumulative: GroupTable,
    series: Vec<WindowSeries>,
    /// Newest closed window per size, for the `rankpulse_window_mean` gauges.
    newest_closed: Vec<Option<ClosedWindow>>,
    /// Closed windows not yet taken by [`Accumulators::take_closed`] (replay output).
    recently_closed: Vec<ClosedWindow>,
    /// Whether closed windows are kept for `take_closed`; the daemon needs only the newest.
    keep_closed: bool,
    /// Impressions finalized after their window had closed.
    pub window_late_impressions: u64,
}

impl Accumulators {
    pub fn new(metric_count: usize, window_sizes_ms: &[i64], attribution_window_ms: i64) -> Self {
        Accumulators {
            metric_count,
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
        }
    }

    /// Keep every closed window for [`Accumulators::take_closed`] (replay prints them all).
    pub fn keep_closed_windows(&mut self, keep: bool) {
        self.keep_closed = keep;
    }

    pub fn window_size_ms(&self, size_index: usize) -> i64 {
        self.series[size_index].size_ms
    }
    pub fn window_count(&self) -> usize {
        self.series.len()
    }

    /// Adds one finalized impression's metric values.
    pub fn add(&mut self, group: GroupId, timestamp: EventTime, values: &[f64], engaged: bool) {
        let m = self.metric_count;
        self.cumulative.entry(group, m).add(values, engaged);
        for series in &mut self.series {
            let start = timestamp.div_euclid(series.size_ms) * series.size_ms;
            if start < series.closed_before {
                self.window_late_impressions += 1;
                continue;
            }
            series.open.entry(start).or_default().entry(group, m).add(values, engaged);
        }
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

    pub fn open_window_count(&self) -> usize {
        self.series.iter().map(|s| s.open.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_point_sums_do_not_depend_on_order() {
        let values: Vec<f64> = (1..200).map(|i| 1.0 / f64::from(i)).collect();
        let mut forward = GroupStats::new(1);
        let mut backward = GroupStats::new(1);
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
        let a = g.intern("e1", "control");
        let b = g.intern("e1", "treatment");
        assert_eq!(g.intern("e1", "control"), a);
        assert_ne!(a, b);
        assert_eq!(g.name(b), ("e1", "treatment"));
    }

    #[test]
    fn windows_close_when_their_last_impression_is_final() {
        // 1-second windows, 100 ms attribution window.
        let mut acc = Accumulators::new(1, &[1000], 100);
        acc.keep_closed_windows(true);
        acc.add(0, 999, &[1.0], true);
        acc.add(0, 1000, &[0.5], true);
        acc.close_windows(1099);
        assert!(acc.take_closed().is_empty(), "impression at 999 is final only when the watermark passes 1099");
        acc.close_windows(1100);
        let closed = acc.take_closed();
        assert_eq!(closed.len(), 1);
        assert_eq!(closed[0].start, 0);
        assert_eq!(closed[0].groups.get(0).unwrap().mean(0), 1.0);
        // A straggler for the closed window is counted, not added; cumulative still has it.
        acc.add(0, 10, &[0.0], false);
        assert_eq!(acc.window_late_impressions, 1);
        assert_eq!(acc.cumulative.get(0).unwrap().impressions, 3);
        acc.close_all();
        assert_eq!(acc.take_closed()[0].start, 1000);
        assert_eq!(acc.newest_closed().next().unwrap().start, 1000);
    }

    #[test]
    fn negative_timestamps_align_to_the_epoch() {
        let mut acc = Accumulators::new(1, &[1000], 0);
        acc.keep_closed_windows(true);
        acc.add(0, -1, &[1.0], true);
        acc.close_all();
        assert_eq!(acc.take_closed()[0].start, -1000);
    }
}
