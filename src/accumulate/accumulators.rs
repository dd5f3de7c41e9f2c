//! Where finalized impressions are added up: [`Accumulators`], per group, cumulatively and per
//! event-time tumbling window.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::group_stats::{FixedValue, GroupStats, StatsShape, Unit};
use crate::checkpoint::Inconsistency;
use crate::ids::{GroupId, GroupMap};
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
    /// Adds one group's stats to this table's stats of `group`: exact, in any order.
    pub fn merge_group(&mut self, group: GroupId, stats: &GroupStats) {
        let i = group as usize;
        if self.by_group.len() <= i {
            self.by_group.resize(i + 1, None);
        }
        match &mut self.by_group[i] {
            Some(ours) => ours.merge(stats),
            slot @ None => *slot = Some(stats.clone()),
        }
    }
    /// Checks every group's stats (see [`GroupStats::check`]).
    pub fn check(&self, shape: StatsShape) -> Result<(), Inconsistency> {
        self.iter().try_for_each(|(_, stats)| stats.check(shape))
    }
    /// [`GroupStats::widen`] of every group.
    pub fn widen(&mut self, from: usize, to: usize) {
        self.by_group.iter_mut().flatten().for_each(|stats| stats.widen(from, to));
    }
    /// Adds every group of another table (another partition's sums) to this one.
    pub fn merge(&mut self, other: &GroupTable) {
        for (group, stats) in other.iter() {
            self.merge_group(group, stats);
        }
    }
    /// What changed since `earlier` (see [`TableChange`]); `None` when some group is not a
    /// growth of its earlier stats, which only a state not made by adding impressions shows.
    pub fn changes_since(&self, earlier: &GroupTable) -> Option<TableChange> {
        let removed = earlier.iter().map(|(g, _)| g).filter(|&g| self.get(g).is_none()).collect();
        let mut changed = GroupTable::default();
        for (group, stats) in self.iter() {
            match earlier.get(group) {
                Some(before) if before == stats => {}
                Some(before) => changed.merge_group(group, &stats.changes_since(before)?),
                None => changed.merge_group(group, stats),
            }
        }
        Some(TableChange { removed, changed })
    }

    /// Applies a [`TableChange`] taken against this table: it becomes the table the change was
    /// taken of. The caller checks the change and the result against the shape (a change read
    /// back is untrusted; checked, the additions cannot overflow).
    pub fn apply_change(&mut self, change: &TableChange) {
        for &group in &change.removed {
            self.remove(group);
        }
        self.merge(&change.changed);
    }

    /// Renumbers the groups (`map[old] = new`), merging groups mapped to one id: a partition's
    /// sums restored into an engine that interned the same labels under other ids.
    pub fn remap(&mut self, map: &GroupMap) {
        let old = std::mem::take(&mut self.by_group);
        for (stats, old) in old.into_iter().zip(0..) {
            if let (Some(stats), Some(&new)) = (stats, map.get(&old)) {
                self.merge_group(new, &stats);
            }
        }
    }
}

/// What changed in a [`GroupTable`] since an earlier copy of it ([`GroupTable::changes_since`]):
/// the groups dropped, and what was added to each group since (see
/// [`GroupStats::changes_since`]; a new group's whole stats). A table that grows by a few
/// hundred impressions changes in a few of its buckets and slots, so this is a small fraction
/// of the table: what an aggregates increment carries.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableChange {
    /// Groups in the earlier table and not in this one (retired labels).
    pub removed: Vec<GroupId>,
    /// Every group changed or new, as a change (a new group's change is its stats whole).
    pub changed: GroupTable,
}

impl TableChange {
    /// Whether applying it leaves a table as it was.
    pub fn is_empty(&self) -> bool {
        self.removed.is_empty() && self.changed.iter().next().is_none()
    }

    /// Renumbers its groups as [`GroupTable::remap`]; a group the map lacks is left out.
    pub fn remap(&mut self, map: &GroupMap) {
        self.removed = self.removed.iter().filter_map(|g| map.get(g).copied()).collect();
        self.changed.remap(map);
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

impl ClosedWindow {
    /// Checks a closed window read from a snapshot or an aggregates record against the
    /// configuration: one of its window sizes, stats of its shape.
    pub fn check(&self, shape: StatsShape, window_count: usize) -> Result<(), Inconsistency> {
        if self.size_index >= window_count {
            return Err(Inconsistency::Beyond {
                what: "a closed window's size index",
                index: self.size_index as u64,
                limit: "metrics.windows",
                count: window_count as u64,
            });
        }
        self.groups.check(shape)
    }
}

/// Open windows of one size, keyed by start time. It is its own record in a snapshot (every
/// field is written, in this order; see [`AccumulatorsRecord`]): the *window record*.
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

/// Cumulative and windowed accumulators of one partition (the engine merges them for export).
/// A snapshot holds them as an [`AccumulatorsRecord`].
#[derive(Debug)]
pub struct Accumulators {
    /// What every new [`GroupStats`] is created with.
    shape: StatsShape,
    /// How long after a window's end its last impression can still be open.
    attribution_window_ms: i64,
    /// Every finalized impression since the start (or the oldest checkpoint), per group.
    pub cumulative: GroupTable,
    /// Open windows, one series per configured window size.
    series: Vec<WindowSeries>,
    /// Impressions finalized after their window had closed.
    pub window_late_impressions: u64,
    /// Reused buffer: one impression's nonzero values in fixed point, converted once for every
    /// table rather than per table, and kept so that adding an impression allocates nothing.
    fixed_scratch: Vec<FixedValue>,
    /// With [`Accumulators::stage`]: impressions added since the last flush, summed once per
    /// (group, window of each size) instead of into the cumulative table and every window's.
    /// Sums are integers, so adding a staged sum later is adding its impressions one by one.
    /// Never in a snapshot: only an owner that reads nothing but through these methods stages
    /// (replay's finalization worker), and every method that reads or closes flushes first.
    staged: Option<Vec<Staged>>,
}

/// [`Accumulators`] as a snapshot holds them (the changelog's task record, `crate::engine`'s
/// `wire`): the shape, the attribution window, the cumulative table, the open windows of each
/// size and the late count, in format 7's order; not the scratch buffer nor staged sums, which
/// only the running accumulators have (a snapshot is taken of flushed ones).
#[derive(Serialize)]
pub struct AccumulatorsRecordRef<'a> {
    shape: StatsShape,
    attribution_window_ms: i64,
    cumulative: &'a GroupTable,
    series: &'a [WindowSeries],
    window_late_impressions: u64,
}

/// [`AccumulatorsRecordRef`] read back.
#[derive(Debug, Deserialize)]
pub struct AccumulatorsRecord {
    shape: StatsShape,
    attribution_window_ms: i64,
    cumulative: GroupTable,
    series: Vec<WindowSeries>,
    window_late_impressions: u64,
}

impl Accumulators {
    /// The accumulators as a snapshot holds them. Staged sums must have been flushed: a
    /// snapshot is never taken of a finalization worker's accumulators.
    pub fn record(&self) -> AccumulatorsRecordRef<'_> {
        AccumulatorsRecordRef {
            shape: self.shape,
            attribution_window_ms: self.attribution_window_ms,
            cumulative: &self.cumulative,
            series: &self.series,
            window_late_impressions: self.window_late_impressions,
        }
    }

    /// The accumulators a snapshot held, unchecked: [`Accumulators::check`] is the restore's
    /// next step.
    pub fn from_record(record: AccumulatorsRecord) -> Self {
        let AccumulatorsRecord { shape, attribution_window_ms, cumulative, series, window_late_impressions } = record;
        Accumulators {
            shape,
            attribution_window_ms,
            cumulative,
            series,
            window_late_impressions,
            fixed_scratch: Vec::new(),
            staged: None,
        }
    }
}

/// Impressions of one group whose windows are the same, summed: see `Accumulators::staged`.
#[derive(Debug)]
struct Staged {
    /// Their group.
    group: GroupId,
    /// Per window size, the start of their window, `None` when it had closed (late).
    starts: Vec<Option<EventTime>>,
    /// Their sums.
    stats: GroupStats,
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
            window_late_impressions: 0,
            fixed_scratch: Vec::new(),
            staged: None,
        }
    }

    /// Checks accumulators read from a snapshot against the ones this configuration makes
    /// (`Accumulators::new` of the same arguments): the same shape, windows and attribution
    /// window, and every stats table consistent with them.
    pub fn check(
        &self,
        shape: StatsShape,
        window_sizes_ms: &[i64],
        attribution_window_ms: i64,
    ) -> Result<(), Inconsistency> {
        let differs = |what, found: &dyn std::fmt::Debug, configured: &dyn std::fmt::Debug| {
            Err(Inconsistency::Configuration {
                what,
                found: format!("{found:?}"),
                configured: format!("{configured:?}"),
            })
        };
        if self.shape != shape {
            return differs("stats of shape", &self.shape, &shape);
        }
        if self.attribution_window_ms != attribution_window_ms {
            return differs("attribution window (ms)", &self.attribution_window_ms, &attribution_window_ms);
        }
        let sizes: Vec<i64> = self.series.iter().map(|s| s.size_ms).collect();
        if sizes != window_sizes_ms {
            return differs("windows (ms)", &sizes, &window_sizes_ms);
        }
        crate::checkpoint::check_count("the late window impressions", self.window_late_impressions)?;
        self.cumulative.check(shape)?;
        self.series.iter().flat_map(|s| s.open.values()).try_for_each(|table| table.check(shape))
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
        let mut fixed = std::mem::take(&mut self.fixed_scratch);
        FixedValue::collect(&values[..values.len().min(self.shape.metrics)], &mut fixed);
        self.add_everywhere(group, timestamp, &fixed, Some(engaged), unit);
        self.fixed_scratch = fixed;
    }

    /// Adds an arriving impression's judged block (its values, the first of slot `first`)
    /// to the sums of its group and windows, without counting an impression: it is counted
    /// when it is finalized. Its windows are open, since the join accepted it.
    pub fn add_sums(&mut self, group: GroupId, timestamp: EventTime, first: usize, values: &[f64], unit: u32) {
        let mut fixed = std::mem::take(&mut self.fixed_scratch);
        let end = (first + values.len()).min(self.shape.metrics);
        FixedValue::collect_from(first as u32, &values[..end.saturating_sub(first)], &mut fixed);
        self.add_everywhere(group, timestamp, &fixed, None, unit);
        self.fixed_scratch = fixed;
    }

    /// Adds values to the cumulative table and the windows of `timestamp` (or to what is
    /// staged): as one impression, engaged or not, or (`None`) as sums only.
    fn add_everywhere(
        &mut self,
        group: GroupId,
        timestamp: EventTime,
        fixed: &[FixedValue],
        impression: Option<bool>,
        unit: u32,
    ) {
        let shape = self.shape;
        let unit =
            shape.unit_buckets.map(|buckets| Unit { hash: unit, bucket: unit % buckets, max_units: shape.max_units });
        let add = |stats: &mut GroupStats| match impression {
            Some(engaged) => stats.add_fixed(fixed, engaged, unit),
            None => stats.add_fixed_sums(fixed, unit, false),
        };
        if let Some(staged) = &mut self.staged {
            let start_of = |series: &WindowSeries| {
                let start = timestamp.div_euclid(series.size_ms).saturating_mul(series.size_ms);
                (start >= series.closed_before).then_some(start)
            };
            let same = |entry: &&mut Staged| {
                entry.group == group && entry.starts.iter().zip(&self.series).all(|(&s, series)| s == start_of(series))
            };
            match staged.iter_mut().find(same) {
                Some(entry) => add(&mut entry.stats),
                None => {
                    let mut stats = GroupStats::new(shape);
                    add(&mut stats);
                    staged.push(Staged { group, starts: self.series.iter().map(start_of).collect(), stats });
                }
            }
            return;
        }
        add(self.cumulative.entry(group, shape));
        for series in &mut self.series {
            let start = timestamp.div_euclid(series.size_ms).saturating_mul(series.size_ms);
            if start < series.closed_before {
                self.window_late_impressions += u64::from(impression.is_some());
                continue;
            }
            add(series.open.entry(start).or_default().entry(group, shape));
        }
    }

    /// Sums impressions per (group, windows) until the next flush rather than into every table
    /// at once: for an owner that reads the sums only through methods of this type, which flush
    /// first (or [`Accumulators::flush`]), never through the fields. See `staged`.
    pub fn stage(&mut self) {
        self.staged.get_or_insert_with(Vec::new);
    }

    /// Flushes and stops staging: the fields hold every impression again.
    pub fn unstage(&mut self) {
        self.flush();
        self.staged = None;
    }

    /// Adds what is staged to the tables.
    pub fn flush(&mut self) {
        let Some(staged) = &mut self.staged else { return };
        let shape = self.shape;
        for Staged { group, starts, stats } in staged.drain(..) {
            self.cumulative.entry(group, shape).absorb(&stats, shape.max_units);
            for (series, start) in self.series.iter_mut().zip(starts) {
                match start {
                    Some(start) => {
                        series.open.entry(start).or_default().entry(group, shape).absorb(&stats, shape.max_units)
                    }
                    None => self.window_late_impressions += stats.impressions,
                }
            }
        }
    }

    /// Adds another owner's sums of the same shape and windows (another finalization lane's):
    /// the cumulative table, the open windows' tables and the late count. Exact, as integer
    /// sums are, but for the distinct units of a set that reached `ab.max_units` (which a full
    /// set keeps depends on order): an owner whose sums are merged keeps no units
    /// (`engine::offload`).
    pub fn merge(&mut self, mut other: Accumulators) {
        self.flush();
        other.flush();
        self.cumulative.merge(&other.cumulative);
        for (ours, theirs) in self.series.iter_mut().zip(other.series) {
            for (start, groups) in theirs.open {
                ours.open.entry(start).or_default().merge(&groups);
            }
            ours.closed_before = ours.closed_before.max(theirs.closed_before);
        }
        self.window_late_impressions += other.window_late_impressions;
    }

    /// Closes every window whose impressions are all final once the watermark has reached
    /// `watermark` (its last impression's deadline is `end - 1 + attribution_window`), handing
    /// each to `on_closed`, oldest first per size.
    pub fn close_windows(&mut self, watermark: EventTime, mut on_closed: impl FnMut(ClosedWindow)) {
        self.flush();
        for (i, series) in self.series.iter_mut().enumerate() {
            let reach = watermark.saturating_sub(self.attribution_window_ms);
            // window [s, s + size) is closed when s + size <= reach
            let bound = reach.saturating_sub(series.size_ms).saturating_add(1);
            while let Some(entry) = series.open.first_entry() {
                if *entry.key() >= bound {
                    break;
                }
                let (start, groups) = entry.remove_entry();
                on_closed(ClosedWindow { size_index: i, start, groups });
            }
            series.closed_before = series.closed_before.max(ceil_to_multiple(bound, series.size_ms));
        }
    }

    /// The highest watermark up to `watermark` at which at most `n` open windows of size
    /// `size_index` close (see [`Accumulators::close_windows`]): one below the watermark that
    /// would close the next after them.
    pub fn closing_at_most(&mut self, watermark: EventTime, size_index: usize, n: usize) -> EventTime {
        self.flush();
        let Some(series) = self.series.get(size_index) else { return watermark };
        match series.open.keys().nth(n) {
            // Window [s, s + size) closes once the watermark reaches s + size + attribution.
            Some(&start) => {
                let closes_at = start.saturating_add(series.size_ms).saturating_add(self.attribution_window_ms);
                watermark.min(closes_at.saturating_sub(1))
            }
            None => watermark,
        }
    }

    /// Closes every open window (the stream has ended).
    pub fn close_all(&mut self, on_closed: impl FnMut(ClosedWindow)) {
        self.close_windows(EventTime::MAX, on_closed);
    }

    /// Per window size, the start before which every window is closed.
    pub fn closed_before(&self) -> Vec<EventTime> {
        self.series.iter().map(|s| s.closed_before).collect()
    }

    /// Treats every window starting before `closed_before[size]` as closed: a partition that
    /// first shows up after its engine closed those windows counts impressions in them as late,
    /// exactly as the partitions that were there.
    pub fn close_before(&mut self, closed_before: &[EventTime]) {
        self.flush();
        for (series, &bound) in self.series.iter_mut().zip(closed_before) {
            series.closed_before = series.closed_before.max(bound);
        }
    }

    /// Renumbers the groups everywhere (see [`GroupTable::remap`]).
    /// [`GroupStats::widen`] of every table, and of the shape new groups get.
    pub fn widen(&mut self, from: usize, to: usize) {
        self.flush();
        if self.shape.metrics == from {
            self.shape.metrics = to;
        }
        self.cumulative.widen(from, to);
        for series in &mut self.series {
            series.open.values_mut().for_each(|table| table.widen(from, to));
        }
    }

    pub fn remap_groups(&mut self, map: &GroupMap) {
        self.flush();
        self.cumulative.remap(map);
        for series in &mut self.series {
            for table in series.open.values_mut() {
                table.remap(map);
            }
        }
    }

    /// Every group with sums here (with repeats).
    pub fn groups(&self) -> impl Iterator<Item = GroupId> + '_ {
        let windows = self.series.iter().flat_map(|s| s.open.values()).flat_map(|t| t.iter().map(|(g, _)| g));
        self.cumulative.iter().map(|(g, _)| g).chain(windows)
    }

    /// Drops a retired group's cumulative sums.
    pub fn retire(&mut self, group: GroupId) {
        self.flush();
        self.cumulative.remove(group);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accumulators_and_closed_windows_read_back_are_checked_against_the_configuration() {
        let shape = StatsShape::plain(2);
        let mut acc = Accumulators::new(shape, &[1000], 300);
        acc.add(0, 10, &[1.0, 0.0], true, 0);
        assert_eq!(acc.check(shape, &[1000], 300), Ok(()));
        let differs = |err: Result<(), Inconsistency>| match err {
            Err(Inconsistency::Configuration { what, .. }) => what,
            other => panic!("{other:?}"),
        };
        assert_eq!(differs(acc.check(StatsShape::plain(3), &[1000], 300)), "stats of shape");
        assert_eq!(differs(acc.check(shape, &[1000], 301)), "attribution window (ms)");
        let err = acc.check(shape, &[1000, 5000], 300);
        assert_eq!(
            err.unwrap_err().to_string(),
            "windows (ms) [1000], configured [1000, 5000]",
            "what the log line quotes"
        );
        acc.window_late_impressions = u64::MAX;
        let late = Inconsistency::Count { what: "the late window impressions", value: u64::MAX };
        assert_eq!(acc.check(shape, &[1000], 300), Err(late));
        let mut closed = Vec::new();
        acc.close_all(|w| closed.push(w));
        let mut window = closed.pop().unwrap();
        assert_eq!(window.check(shape, 1), Ok(()));
        window.size_index = 1;
        let beyond = Inconsistency::Beyond {
            what: "a closed window's size index",
            index: 1,
            limit: "metrics.windows",
            count: 1,
        };
        assert_eq!(window.check(shape, 1), Err(beyond));
    }

    /// Closing at the watermark `closing_at_most` gives closes exactly that many of the
    /// windows the full watermark would, oldest first, and the rest later.
    #[test]
    fn closing_at_most_n_windows_holds_the_rest_open() {
        let mut acc = Accumulators::new(StatsShape::plain(1), &[1000], 100);
        for start in [0, 2000, 3000, 7000] {
            acc.add(0, start + 5, &[1.0], true, 0);
        }
        let mut closed = Vec::new();
        assert_eq!(acc.closing_at_most(5000, 0, 4), 5000, "only three would close");
        let w = acc.closing_at_most(5000, 0, 2);
        assert_eq!(w, 3000 + 1000 + 100 - 1, "one short of closing the third");
        acc.close_windows(w, |c| closed.push(c.start));
        assert_eq!(closed, [0, 2000]);
        assert_eq!(acc.closing_at_most(5000, 0, 0), 4099);
        acc.close_windows(5000, |c| closed.push(c.start));
        assert_eq!(closed, [0, 2000, 3000]);
        assert_eq!(acc.closing_at_most(EventTime::MAX, 0, 0), 8099, "the window at 7 s is open");
        assert_eq!(acc.closing_at_most(5000, 1, 0), 5000, "no such size");
    }

    #[test]
    fn windows_close_when_their_last_impression_is_final() {
        // 1-second windows, 100 ms attribution window.
        let mut acc = Accumulators::new(StatsShape::plain(1), &[1000], 100);
        let mut closed = Vec::new();
        acc.add(0, 999, &[1.0], true, 0);
        acc.add(0, 1000, &[0.5], true, 0);
        acc.close_windows(1099, |w| closed.push(w));
        assert!(closed.is_empty(), "impression at 999 is final only when the watermark passes 1099");
        acc.close_windows(1100, |w| closed.push(w));
        assert_eq!(closed.len(), 1);
        assert_eq!(closed[0].start, 0);
        assert_eq!(closed[0].groups.get(0).unwrap().mean(0), 1.0);
        // A straggler for the closed window is counted, not added; cumulative still has it.
        acc.add(0, 10, &[0.0], false, 0);
        assert_eq!(acc.window_late_impressions, 1);
        assert_eq!(acc.cumulative.get(0).unwrap().impressions, 3);
        let mut rest = Vec::new();
        acc.close_all(|w| rest.push(w));
        assert_eq!(rest.iter().map(|w| w.start).collect::<Vec<_>>(), [1000]);
    }

    #[test]
    fn remapped_groups_merge_and_tables_merge_exactly() {
        let mut a = Accumulators::new(StatsShape::plain(1), &[1000], 0);
        a.add(0, 10, &[1.0], true, 0);
        a.add(1, 10, &[0.5], true, 0);
        a.add(2, 10, &[0.0], false, 0);
        // Old groups 0 and 2 are one group (id 5) in the engine restoring them.
        a.remap_groups(&GroupMap::from([(0, 5), (1, 3), (2, 5)]));
        let ids: Vec<GroupId> = a.cumulative.iter().map(|(g, _)| g).collect();
        assert_eq!(ids, [3, 5]);
        assert_eq!((a.cumulative.get(5).unwrap().impressions, a.cumulative.get(5).unwrap().mean(0)), (2, 0.5));
        let mut merged = GroupTable::default();
        merged.merge(&a.cumulative);
        merged.merge(&a.cumulative);
        assert_eq!(merged.get(3).unwrap().impressions, 2);
        let mut closed = Vec::new();
        a.close_all(|w| closed.push(w));
        assert_eq!(closed[0].groups.get(5).unwrap().impressions, 2, "open windows are renumbered too");
    }

    /// A table's change since an earlier copy, applied to that copy, gives the table exactly
    /// (counts, sums, buckets, distinct units, the overflow flag, a retired group); it is a
    /// fraction of the table; a table that is no growth of the copy has none; and a change
    /// whose units the copy's would take past `ab.max_units` leaves a table its check refuses.
    #[test]
    fn a_table_s_change_applied_to_the_earlier_copy_gives_the_table() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(53);
        let shape = StatsShape { metrics: 3, unit_buckets: Some(64), max_units: 400 };
        let mut acc = Accumulators::new(shape, &[], 0);
        let mut add = |acc: &mut Accumulators, n: usize, units: u32| {
            for _ in 0..n {
                let values = [rng.random_range(0.0..1.0), 0.0, if rng.random_bool(0.3) { 1.0 } else { 0.0 }];
                acc.add(rng.random_range(0..4), 0, &values, values[2] > 0.0, rng.random_range(0..units));
            }
        };
        add(&mut acc, 5_000, 300);
        let earlier = acc.cumulative.clone();
        // A few impressions, some of new units; group 0 past its units' limit; group 3 retired.
        add(&mut acc, 40, 2_000);
        for unit in 0..500 {
            acc.add(0, 0, &[0.5, 0.0, 0.0], false, 10_000 + unit);
        }
        acc.retire(3);
        let change = acc.cumulative.changes_since(&earlier).unwrap();
        assert_eq!(change.removed, [3]);
        let mut applied = earlier.clone();
        applied.apply_change(&change);
        assert_eq!(applied, acc.cumulative);
        assert_eq!(applied.get(0).unwrap().distinct_units(), None, "group 0 overflowed");
        let size = |t: &GroupTable| postcard::to_stdvec(t).unwrap().len();
        let whole = size(&acc.cumulative);
        assert!(size(&change.changed) < whole / 2, "{} of {whole} bytes", size(&change.changed));
        assert!(earlier.changes_since(&acc.cumulative).is_none(), "the table shrank");
        // Another copy's units (more than its limit leaves room for), forged into the change.
        let mut small = Accumulators::new(StatsShape { max_units: 100, ..shape }, &[], 0);
        for unit in 0..60 {
            small.add(1, 0, &[0.5, 0.0, 0.0], false, unit);
        }
        let mut forged = small.cumulative.clone();
        let mut more = Accumulators::new(shape, &[], 0);
        for unit in 60..120 {
            more.add(1, 0, &[0.5, 0.0, 0.0], false, unit);
        }
        let change = TableChange { removed: vec![], changed: more.cumulative };
        assert!(change.changed.check(StatsShape { max_units: 100, ..shape }).is_ok(), "each part is within the limit");
        forged.apply_change(&change);
        assert!(matches!(
            forged.check(StatsShape { max_units: 100, ..shape }),
            Err(Inconsistency::TooMany { limit: "ab.max_units", .. })
        ));
    }

    #[test]
    fn staged_sums_are_the_sums_added_one_by_one() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(18);
        for max_units in [5, 1000] {
            let shape = StatsShape { metrics: 3, unit_buckets: Some(4), max_units };
            let (mut direct, mut staged) =
                (Accumulators::new(shape, &[1000, 5000], 300), Accumulators::new(shape, &[1000, 5000], 300));
            staged.stage();
            let (mut closed_direct, mut closed_staged) = (Vec::new(), Vec::new());
            let mut watermark = 0;
            for i in 0..5_000i64 {
                // Mostly in order, some far behind the watermark (late for a window size).
                let t = i * 7 - if rng.random_bool(0.05) { rng.random_range(0..3000) } else { 0 };
                let values = [rng.random_range(0.0..1.0), 0.0, if rng.random_bool(0.5) { 1.0 } else { 0.0 }];
                let (group, unit) = (rng.random_range(0..3), rng.random_range(0..50));
                direct.add(group, t, &values, values[2] > 0.0, unit);
                staged.add(group, t, &values, values[2] > 0.0, unit);
                if i % 300 == 0 {
                    watermark = i * 7 - 500;
                    direct.close_windows(watermark, |w| closed_direct.push(w));
                    staged.close_windows(watermark, |w| closed_staged.push(w));
                }
                if i == 2500 {
                    direct.retire(1);
                    staged.retire(1);
                }
            }
            assert!(watermark > 0);
            direct.close_all(|w| closed_direct.push(w));
            staged.unstage();
            assert_eq!(staged.window_late_impressions, direct.window_late_impressions);
            assert!(direct.window_late_impressions > 0);
            let units = |t: &GroupTable| t.iter().map(|(g, s)| (g, s.distinct_units())).collect::<Vec<_>>();
            assert_eq!(units(&staged.cumulative), units(&direct.cumulative), "max_units {max_units}");
            if max_units == 1000 {
                assert_eq!(staged.cumulative, direct.cumulative);
            }
            staged.close_all(|w| closed_staged.push(w));
            assert_eq!(closed_staged.len(), closed_direct.len());
            for (a, b) in closed_staged.iter().zip(&closed_direct) {
                assert_eq!((a.size_index, a.start), (b.size_index, b.start));
                assert_eq!(units(&a.groups), units(&b.groups));
                if max_units == 1000 {
                    assert_eq!(a, b);
                }
            }
        }
    }

    #[test]
    fn sums_split_between_owners_merge_to_the_sums_of_one() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(37);
        let shape = StatsShape::plain(3);
        let new = || Accumulators::new(shape, &[1000, 5000], 300);
        let (mut one, mut halves) = (new(), [new(), new()]);
        let (mut closed_one, mut closed_halves) = (Vec::new(), Vec::new());
        for i in 0..4_000i64 {
            // Mostly in order, some behind the watermark (late for a window size), alternating
            // between the two owners in runs, as batches go to finalization lanes.
            let t = i * 7 - if rng.random_bool(0.05) { rng.random_range(0..3000) } else { 0 };
            let values = [rng.random_range(0.0..1.0), 0.0, if rng.random_bool(0.5) { 1.0 } else { 0.0 }];
            let group = rng.random_range(0..3);
            one.add(group, t, &values, values[2] > 0.0, 0);
            halves[(i / 64 % 2) as usize].add(group, t, &values, values[2] > 0.0, 0);
            if i % 300 == 0 {
                let watermark = i * 7 - 500;
                one.close_windows(watermark, |w| closed_one.push(w));
                let mut closed = ClosedWindows::default();
                for half in &mut halves {
                    half.close_windows(watermark, |w| closed.push(w));
                }
                closed_halves.extend(closed.merged());
            }
        }
        // Merged with windows still open, then closed.
        let [mut merged, other] = halves;
        merged.merge(other);
        assert_eq!(merged.window_late_impressions, one.window_late_impressions);
        assert!(one.window_late_impressions > 0);
        assert_eq!(merged.cumulative, one.cumulative);
        one.close_all(|w| closed_one.push(w));
        merged.close_all(|w| closed_halves.push(w));
        assert_eq!(closed_halves, closed_one);
    }

    /// Windows closed by several owners at one watermark, merged per (size, start) in order.
    #[derive(Default)]
    struct ClosedWindows(std::collections::BTreeMap<(usize, EventTime), GroupTable>);

    impl ClosedWindows {
        fn push(&mut self, window: ClosedWindow) {
            self.0.entry((window.size_index, window.start)).or_default().merge(&window.groups);
        }
        fn merged(self) -> impl Iterator<Item = ClosedWindow> {
            self.0.into_iter().map(|((size_index, start), groups)| ClosedWindow { size_index, start, groups })
        }
    }

    #[test]
    fn negative_timestamps_align_to_the_epoch() {
        let mut acc = Accumulators::new(StatsShape::plain(1), &[1000], 0);
        acc.add(0, -1, &[1.0], true, 0);
        let mut closed = Vec::new();
        acc.close_all(|w| closed.push(w));
        assert_eq!(closed[0].start, -1000);
    }

    /// A timestamp at i64's ends (only damaged state can hold one) is added without a panic:
    /// its window's start saturates.
    #[test]
    fn timestamps_at_the_ends_of_i64_do_not_overflow_a_windows_start() {
        let mut acc = Accumulators::new(StatsShape::plain(1), &[60_000], 0);
        for timestamp in [i64::MIN, i64::MIN + 1, i64::MAX] {
            acc.add(0, timestamp, &[1.0], true, 0);
        }
        assert_eq!(acc.cumulative.get(0).map(|s| s.impressions), Some(3));
    }
}
