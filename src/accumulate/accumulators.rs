//! Where finalized impressions are added up: [`Accumulators`], per group, cumulatively and per
//! event-time tumbling window.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::group_stats::{to_fixed, GroupStats, StatsShape, Unit};
use crate::ids::GroupId;
use crate::time::EventTime;

/// The smallest multiple of `m` that is at least `x` (saturating).
fn ceil_to_multiple(x: i64, m: i64) -> i64 {
    match x.rem_euclid(m) {
        0 => x,
        r => x.saturating_add(m - r),
    }
}

/// Stats per group, indexed by [`GroupId`]; a group with no impression here has none.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupTable {
    /// Indexed by group id: ids are dense, so a vector beats a map on the hot path.
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
    /// Event time the window starts at (a multiple of its size); it ends one size later.
    pub start: EventTime,
    /// The figures of every group with an impression in the window.
    pub groups: GroupTable,
}

/// Open windows of one size, keyed by start time.
#[derive(Debug, Serialize, Deserialize)]
struct WindowSeries {
    /// The window size, from `metrics.windows`.
    size_ms: i64,
    /// Windows still open, keyed by start: ordered, so they close from the first.
    open: BTreeMap<EventTime, GroupTable>,
    /// Every window starting before this is closed; an impression finalized into one of them
    /// (possible only for a partition that appeared after the window closed) is counted, not added.
    closed_before: EventTime,
}

/// Cumulative and windowed accumulators.
#[derive(Debug, Serialize, Deserialize)]
pub struct Accumulators {
    /// What every new [`GroupStats`] is created with.
    shape: StatsShape,
    /// How long after a window's end its last impression can still be open.
    attribution_window_ms: i64,
    /// Every finalized impression since the start (or the oldest checkpoint), per group.
    pub cumulative: GroupTable,
    /// Open windows, one series per configured window size.
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
    /// Reused buffer: one impression's values in fixed point, converted once for every table
    /// rather than per table, and kept so that adding an impression allocates nothing.
    #[serde(skip)]
    fixed_scratch: Vec<i64>,
    /// Reused buffer: the squared values, likewise.
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
