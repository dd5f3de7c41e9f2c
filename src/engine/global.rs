//! The experiment-wide view: every partition's A/B sums, whichever replica owns it, merged.
//!
//! Each replica publishes, for every partition it owns, a
//! [`PartitionAggregates`](super::aggregates_record::PartitionAggregates) record (its
//! cumulative sums, its recently closed windows and how far its windows are closed) to the
//! aggregates topic, and every replica reads all of them back into this view. A window is
//! complete once every partition has closed it; its figures are then the exact sum of every
//! partition's (the sums are mergeable: counts, fixed-point sums and squares, unit buckets), so
//! the A/B feed, the API and the gauges report the same experiment-wide figures whatever the
//! number of replicas, and equal to `replay` over the same traffic.

use super::published::Link;
use super::task::{Task, TaskTemplate, Tasks};
use crate::accumulate::{ClosedWindow, CovariateTable, GroupTable};
use crate::time::EventTime;
use std::collections::{BTreeMap, BTreeSet};

/// Closed windows of each size a partition holds that no record carried yet, at most, while
/// the changelog writes succeed: a backlog (hours of traffic already in the topics, read in
/// seconds) would close them all between two writes. Its windows past this many stay open
/// ([`hold_back`]), the source writes the partition's record at once rather than at the next
/// checkpoint interval, and the next ones close after it: no window is dropped, and a record
/// holds few enough that the view's [`PENDING_LIMIT`] is not reached while the records of the
/// partitions written together arrive one after another.
const RECORD_WINDOWS: usize = PENDING_LIMIT / 4;
/// Windows of each size waiting, in the view, for a partition to close them, at most: beyond
/// it (a partition without an owner for an hour of 1-minute windows) the oldest are given up,
/// and counted.
const PENDING_LIMIT: usize = 64;
/// Complete windows of each size waiting for the publisher at most, once its deliveries fail
/// (a publisher whose brokers are down for hours) or on a replica that does not publish: the
/// oldest are dropped. While deliveries succeed nothing is dropped: the publisher takes every
/// window waiting at each attempt, however many a backlog completed since.
const UNPUBLISHED_LIMIT: usize = 64;

/// What the engine knows of every partition's sums (see the module documentation).
#[derive(Debug, Default)]
pub(super) struct GlobalView {
    /// The input partitions: a window is complete when each of them has closed it.
    pub partitions: usize,
    /// Each partition's newest closed-before bounds and cumulative sums, its group ids
    /// renumbered into the engine's.
    latest: BTreeMap<i32, (Vec<EventTime>, GroupTable)>,
    /// Per partition and window size, the start from which this view has seen every window the
    /// partition closed (from its first record read; the records after it carry every window
    /// closed since): an earlier window cannot be summed whole.
    seen_from: BTreeMap<i32, Vec<EventTime>>,
    /// Each closed window's parts summed so far, with the partitions they are of, until every
    /// partition has closed it: records of partitions far apart in event time (one replica
    /// catching up) meet here. Summed as they come (the sums are exact in any order), so a
    /// window waiting takes one table, not one per partition.
    pending: BTreeMap<(usize, EventTime), (BTreeSet<i32>, GroupTable)>,
    /// Per window size, the start before which every window has been handed out or given up:
    /// a record's older windows are ones already seen (so each is handed out once per process).
    complete_before: Vec<EventTime>,
    /// Newest complete window per size.
    pub newest: Vec<Option<ClosedWindow>>,
    /// Complete windows not yet published, oldest first.
    pub unpublished: Vec<ClosedWindow>,
    /// Each partition's newest CUPED covariates (renumbered), `None` from a record without
    /// them (a replica without `ab.cuped`, or of other adjusted metrics).
    covariates: BTreeMap<i32, Option<CovariateTable>>,
    /// Windows closed everywhere that were never handed out, by why: they are in the
    /// cumulative sums, but are neither looks nor A/B feed records.
    pub skipped: WindowsSkipped,
    /// The publisher's last attempt failed (its brokers are down): only then is its backlog
    /// bounded by dropping the oldest windows.
    pub publisher_failing: bool,
    /// Per partition, the place of the newest record applied in its chain (`None`, or absent:
    /// no increment applies until a base does; see `super::increments`).
    links: BTreeMap<i32, Link>,
    /// Increments not applied: of a chain this view does not hold (a writer that lost the
    /// partition, a base never seen), or after a gap in its own.
    pub increments_skipped: u64,
}

/// Closed windows the experiment-wide view could not hand out (see [`GlobalView::skipped`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct WindowsSkipped {
    /// A partition's part was never seen: this replica started reading after it was written
    /// and dropped (or a record of it was lost), or the partition waited past the pending limit.
    pub incomplete: u64,
    /// A partition dropped it before any record carried it (this replica's changelog writes
    /// failing past the unwritten limit).
    pub unwritten: u64,
    /// Complete, but past the publisher's backlog limit while its deliveries failed (the A/B
    /// output topic down); counted only on the replica that publishes.
    pub unpublished: u64,
}

impl GlobalView {
    /// An empty view for `sizes` window sizes.
    pub(super) fn new(sizes: usize) -> Self {
        GlobalView { newest: vec![None; sizes], ..Default::default() }
    }

    /// Every partition's CUPED covariates, merged: `None` unless every partition's record
    /// carried them (CUPED pairs them with every partition's sums).
    pub fn cuped_covariates(&self) -> Option<CovariateTable> {
        if self.latest.is_empty() || self.latest.keys().any(|p| !matches!(self.covariates.get(p), Some(Some(_)))) {
            return None;
        }
        let mut table = CovariateTable::default();
        for covariates in self.covariates.values().flatten() {
            table.merge(covariates);
        }
        Some(table)
    }

    /// Every partition's cumulative sums, merged.
    pub fn cumulative(&self) -> GroupTable {
        let mut table = GroupTable::default();
        for (_, cumulative) in self.latest.values() {
            table.merge(cumulative);
        }
        table
    }

    /// Puts a partition's newest CUPED covariates (renumbered), `None` from a record without.
    pub(super) fn set_covariates(&mut self, partition: i32, covariates: Option<CovariateTable>) {
        self.covariates.insert(partition, covariates);
    }

    /// The place of the newest record applied of a partition's chain.
    pub(super) fn link(&self, partition: i32) -> Option<Link> {
        self.links.get(&partition).copied()
    }

    /// Records the place of the record just applied of a partition's chain.
    pub(super) fn set_link(&mut self, partition: i32, link: Option<Link>) {
        match link {
            Some(link) => self.links.insert(partition, link),
            None => self.links.remove(&partition),
        };
    }

    /// Takes a partition's cumulative sums out to change them (they go back with
    /// [`GlobalView::apply`]).
    pub(super) fn take_cumulative(&mut self, partition: i32) -> Option<GroupTable> {
        self.latest.get_mut(&partition).map(|(_, cumulative)| std::mem::take(cumulative))
    }

    /// Takes a partition's CUPED covariates out to change them.
    pub(super) fn take_covariates(&mut self, partition: i32) -> Option<CovariateTable> {
        self.covariates.get_mut(&partition).and_then(Option::take)
    }

    /// A record of a partition's chain was lost (damaged, refused, never read): until its next
    /// whole record, no increment applies, and no window is taken as holding the partition's
    /// whole part (the lost record may have carried it). Its newest sums and bounds stay, as of
    /// the last record applied: the cumulative figures keep its part, a few rounds old, and no
    /// window completes past its bounds meanwhile.
    pub(super) fn lose_chain(&mut self, partition: i32) {
        self.links.remove(&partition);
        self.seen_from.remove(&partition);
    }

    /// [`GlobalView::lose_chain`], and the partition's sums and bounds dropped too: what an
    /// increment made of them failed its checks, so they are not any record's.
    pub(super) fn forget(&mut self, partition: i32) {
        self.lose_chain(partition);
        self.latest.remove(&partition);
        self.covariates.remove(&partition);
    }

    /// The highest watermark at which every window that closes is complete experiment-wide
    /// (handed out or given up, of every size), or `None` while some size has none complete.
    /// Window `[s, s + size)` closes at watermark `s + size + attribution_window`
    /// ([`crate::accumulate::Accumulators::close_windows`]).
    pub(super) fn complete_mark(&self, window_sizes_ms: &[i64], attribution_window_ms: i64) -> Option<EventTime> {
        let mut mark = None;
        for (size, &size_ms) in window_sizes_ms.iter().enumerate() {
            let complete_before = *self.complete_before.get(size)?;
            if complete_before == EventTime::MIN {
                return None;
            }
            let closes_only_complete =
                complete_before.saturating_add(attribution_window_ms).saturating_add(size_ms).saturating_sub(1);
            mark = Some(mark.map_or(closes_only_complete, |m: EventTime| m.min(closes_only_complete)));
        }
        mark
    }

    /// Takes a partition's newest record (already renumbered) and hands out the windows it
    /// completes, showing each to `on_complete` in order. `kept_from` is the record's own
    /// claim (absent in an older record's): per size, from where it holds every closed window.
    pub(super) fn apply(
        &mut self,
        partition: i32,
        closed_before: Vec<EventTime>,
        cumulative: GroupTable,
        recent: Vec<ClosedWindow>,
        kept_from: Option<Vec<EventTime>>,
        mut on_complete: impl FnMut(&ClosedWindow),
    ) {
        let sizes = self.newest.len();
        self.complete_before.resize(sizes, EventTime::MIN);
        self.seen_from.entry(partition).or_insert_with(|| {
            (0..sizes)
                .map(|size| {
                    let oldest_held = recent.iter().filter(|w| w.size_index == size).map(|w| w.start).min();
                    let bound = closed_before.get(size).copied().unwrap_or(EventTime::MIN);
                    match kept_from.as_ref().and_then(|k| k.get(size)) {
                        Some(&from) => from.min(oldest_held.unwrap_or(from)),
                        None => oldest_held.unwrap_or(bound),
                    }
                })
                .collect()
        });
        for window in recent {
            let Some(&done) = self.complete_before.get(window.size_index) else { continue };
            if window.start >= done {
                let (parts, sums) = self.pending.entry((window.size_index, window.start)).or_default();
                // A partition's newer records hold the window again: its part is added once.
                if parts.insert(partition) {
                    sums.merge(&window.groups);
                }
            }
        }
        self.latest.insert(partition, (closed_before, cumulative));
        for size in 0..sizes {
            self.give_up_past_limit(size);
            // Closed everywhere before the least bound over every partition, if all have one.
            let all: Option<Vec<EventTime>> = (0..self.partitions)
                .map(|p| self.latest.get(&(p as i32)).and_then(|(bounds, _)| bounds.get(size).copied()))
                .collect();
            let Some(complete_before) = all.and_then(|bounds| bounds.into_iter().min()) else { continue };
            if complete_before <= self.complete_before[size] {
                continue;
            }
            self.complete_before[size] = complete_before;
            let ready: Vec<(usize, EventTime)> =
                self.pending.range((size, EventTime::MIN)..(size, complete_before)).map(|(&key, _)| key).collect();
            for key in ready {
                let Some((_, groups)) = self.pending.remove(&key) else { continue };
                let start = key.1;
                let whole = (0..self.partitions as i32)
                    .all(|p| self.seen_from.get(&p).and_then(|from| from.get(size)).is_some_and(|&from| from <= start));
                if !whole {
                    self.skipped.incomplete += 1;
                    continue;
                }
                let window = ClosedWindow { size_index: size, start, groups };
                on_complete(&window);
                if self.newest[size].as_ref().is_none_or(|n| n.start < start) {
                    self.newest[size] = Some(window.clone());
                }
                self.unpublished.push(window);
            }
        }
    }

    /// Drops the oldest complete windows past the publisher's backlog limit. `publishing`: this
    /// replica publishes them (it holds partition 0 and `ab.output_topic` is set), so a window
    /// dropped is one the feed lost, and is counted, and only while deliveries fail (a backlog
    /// completes windows faster than the publisher's interval, which then takes them all);
    /// elsewhere they are kept only in case it becomes the publisher.
    pub(super) fn trim_unpublished(&mut self, publishing: bool) {
        let limit = UNPUBLISHED_LIMIT * self.newest.len().max(1);
        if self.unpublished.len() > limit && (!publishing || self.publisher_failing) {
            let over = self.unpublished.len() - limit;
            self.unpublished.drain(..over);
            if publishing {
                self.skipped.unpublished += over as u64;
            }
        }
    }

    /// Gives up the oldest windows of a size waiting past [`PENDING_LIMIT`] (a partition that
    /// has not closed them for that long): they are counted, not summed partly.
    pub(super) fn give_up_past_limit(&mut self, size: usize) {
        let waiting = self.pending.range((size, EventTime::MIN)..=(size, EventTime::MAX)).count();
        for _ in PENDING_LIMIT..waiting {
            let Some(&oldest) =
                self.pending.range((size, EventTime::MIN)..=(size, EventTime::MAX)).next().map(|(k, _)| k)
            else {
                break;
            };
            self.pending.remove(&oldest);
            self.skipped.incomplete += 1;
            if let Some(done) = self.complete_before.get_mut(size) {
                *done = (*done).max(oldest.1.saturating_add(1));
            }
        }
    }
}

/// Where a partition's new task (it has no snapshot) closes its windows, for an engine whose
/// experiment-wide view is `view`, if it has one. With one, only where the view has completed
/// them: a window still waiting for this partition (whose previous owner stopped before its
/// first checkpoint, say) stays open for the impressions it re-reads, which an uninterrupted run
/// counts in that window. Without one, where this engine has.
pub(super) fn new_task_closed_at(template: &TaskTemplate, view: Option<&GlobalView>) -> Option<EventTime> {
    match view {
        None => template.windows_closed_at,
        Some(view) => {
            let complete = view.complete_mark(&template.window_sizes_ms, template.attribution_window_ms);
            template.windows_closed_at.zip(complete).map(|(own, complete)| own.min(complete))
        }
    }
}

/// The watermark to close windows at, `w` or less: the highest at which no task holds more than
/// [`RECORD_WINDOWS`] closed windows of a size that no record carried yet. Less than `w` when a
/// backlog's windows must wait, open, for the record that carries those before them, as they
/// wait for a partition whose watermark lags: their impressions are final (each partition's
/// join refuses what its own watermark passed), and they close, whole, once the record is
/// written.
pub(super) fn hold_back(tasks: &mut Tasks, w: EventTime, sizes: usize) -> EventTime {
    let mut held = w;
    for task in tasks.iter_mut() {
        let Task { totals, closed_progress, .. } = task;
        for size in 0..sizes {
            let room = RECORD_WINDOWS.saturating_sub(closed_progress.unwritten_of_size(&totals.recent_closed, size));
            held = held.min(totals.accumulators.closing_at_most(w, size, room));
        }
    }
    held
}

impl Task {
    /// The record's `kept_from`: per size, from where `recent_closed` holds every window the
    /// task closed. A restored task knows that of the windows it holds (or, holding none of a
    /// size, of the windows it has yet to close).
    pub(super) fn closed_kept_from(&self, closed_before: &[EventTime]) -> Vec<EventTime> {
        if let Some(kept_from) = &self.closed_progress.kept_from {
            return kept_from.clone();
        }
        let recent = &self.totals.recent_closed;
        (0..closed_before.len())
            .map(|size| {
                recent.iter().filter(|w| w.size_index == size).map(|w| w.start).min().unwrap_or(closed_before[size])
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::Inconsistency;
    use crate::engine::published::UNWRITTEN_LIMIT;
    use crate::engine::{Engine, PartitionAggregates};
    use crate::ids::GroupId;

    fn table(groups: &[(GroupId, u64)]) -> GroupTable {
        let mut acc = crate::accumulate::Accumulators::new(crate::accumulate::StatsShape::plain(1), &[], 0);
        for &(g, n) in groups {
            for _ in 0..n {
                acc.add(g, 0, &[1.0], true, 0);
            }
        }
        acc.cumulative
    }

    #[test]
    fn a_window_is_complete_when_every_partition_closed_it_and_is_handed_out_once() {
        let mut view = GlobalView { partitions: 2, newest: vec![None], ..Default::default() };
        let window = |start, n| ClosedWindow { size_index: 0, start, groups: table(&[(0, n)]) };
        let from_start = || Some(vec![EventTime::MIN]);
        view.apply(0, vec![120], table(&[(0, 3)]), vec![window(0, 1), window(60, 2)], from_start(), |_| {});
        assert!(view.unpublished.is_empty(), "partition 1 has not closed anything yet");
        view.apply(1, vec![60], table(&[(0, 4)]), vec![window(0, 5)], from_start(), |_| {});
        assert_eq!(view.unpublished.len(), 1, "window 0 is closed everywhere, window 60 not on partition 1");
        assert_eq!(view.unpublished[0].groups.get(0).unwrap().impressions, 6);
        assert_eq!(view.cumulative().get(0).unwrap().impressions, 7);
        // Partition 1 rewrites its record (a new owner): nothing is handed out twice.
        view.apply(1, vec![120], table(&[(0, 4)]), vec![window(0, 5), window(60, 1)], from_start(), |_| {});
        let starts: Vec<EventTime> = view.unpublished.iter().map(|w| w.start).collect();
        assert_eq!(starts, [0, 60]);
        assert_eq!(view.newest[0].as_ref().map(|w| (w.start, w.groups.get(0).unwrap().impressions)), Some((60, 3)));
        assert_eq!(view.skipped, WindowsSkipped::default());
    }

    /// One replica catches up on a backlog while the other is live at the start: partition 0's
    /// records run far ahead of partition 1's. Each window is handed out once partition 1
    /// closes it, with both parts, though partition 0's newer records no longer hold it.
    #[test]
    fn windows_of_partitions_far_apart_in_event_time_are_summed_whole() {
        let mut view = GlobalView { partitions: 2, newest: vec![None], ..Default::default() };
        let window = |start, n| ClosedWindow { size_index: 0, start, groups: table(&[(0, n)]) };
        let from_start = || Some(vec![EventTime::MIN]);
        // Partition 0: twenty windows in its first record, then only the newest few.
        view.apply(0, vec![20 * 60], table(&[]), (0..20).map(|m| window(m * 60, 1)).collect(), from_start(), |_| {});
        view.apply(0, vec![21 * 60], table(&[]), (16..21).map(|m| window(m * 60, 1)).collect(), from_start(), |_| {});
        // Partition 1 closes them a minute at a time; it had no impression at minute 3.
        let mut handed = Vec::new();
        for m in 0..21 {
            let recent = (m.max(4) - 4..=m).filter(|&k| k != 3).map(|k| window(k * 60, 10)).collect();
            view.apply(1, vec![(m + 1) * 60], table(&[]), recent, from_start(), |w| {
                handed.push((w.start / 60, w.groups.get(0).unwrap().impressions))
            });
        }
        let expected: Vec<(i64, u64)> = (0..21).map(|m| (m, if m == 3 { 1 } else { 11 })).collect();
        assert_eq!(handed, expected);
        assert_eq!(view.skipped, WindowsSkipped::default());
        assert!(view.pending.is_empty());
    }

    /// A replica that starts reading after partition 0's older windows left its records (a
    /// record of a restored task, or of the version before `kept_from`) never hands out a
    /// window it cannot sum whole: it counts it.
    #[test]
    fn a_window_whose_part_was_never_seen_is_counted_not_summed_partly() {
        let mut view = GlobalView { partitions: 2, newest: vec![None], ..Default::default() };
        let window = |start, n| ClosedWindow { size_index: 0, start, groups: table(&[(0, n)]) };
        // Partition 0 holds minutes 6 to 9 only, and says nothing of before.
        view.apply(0, vec![600], table(&[]), (6..10).map(|m| window(m * 60, 1)).collect(), None, |_| {});
        // Partition 1 holds every window since the start, and has now closed minutes 0 to 9.
        let mut handed = Vec::new();
        let recent = (0..10).map(|m| window(m * 60, 10)).collect();
        view.apply(1, vec![600], table(&[]), recent, Some(vec![EventTime::MIN]), |w| handed.push(w.start / 60));
        assert_eq!(handed, [6, 7, 8, 9]);
        assert_eq!(view.skipped, WindowsSkipped { incomplete: 6, ..Default::default() });
        assert!(view.pending.is_empty());
        // Partition 1's owner stops for a long while: the oldest windows waiting past the limit
        // are given up (and counted), and none of them is handed out later.
        let recent = (10..10 + PENDING_LIMIT as i64 + 5).map(|m| window(m * 60, 1)).collect();
        view.apply(0, vec![(15 + PENDING_LIMIT as i64) * 60], table(&[]), recent, None, |_| {});
        assert_eq!(view.pending.len(), PENDING_LIMIT);
        assert_eq!(view.skipped.incomplete, 6 + 5);
        let recent = (10..20).map(|m| window(m * 60, 10)).collect();
        view.apply(1, vec![20 * 60], table(&[]), recent, None, |w| handed.push(w.start / 60));
        assert_eq!(handed, [6, 7, 8, 9, 15, 16, 17, 18, 19], "minutes 10 to 14 were given up");
    }

    /// Partition 1's first owner stopped before its first checkpoint: no record of it was ever
    /// written, and the windows partition 0 closed wait for it in the view. The replica that
    /// takes it over without a snapshot re-reads it from the start; its new task's windows are
    /// open where the view has not completed them, so the re-read impressions count in their
    /// windows (none late), and each window is handed out with both parts, as in an
    /// uninterrupted run. Once windows are complete, a partition taken over again closes them:
    /// a window published stays as published, and an impression of it is counted late.
    #[test]
    fn a_partition_taken_over_before_its_first_record_fills_the_windows_waiting_for_it() {
        let toml = "[join]\nattribution_window = \"1s\"\nmax_out_of_orderness = \"0s\"\nidle_timeout = \"1s\"\n\
                    [metrics]\nwindows = [\"1m\"]\n";
        let cfg = crate::config::Config::from_toml_with_env(toml, "test", std::iter::empty()).unwrap();
        let mut e = Engine::new(&cfg).without_past_limit();
        e.enable_global_view(2);
        let now = std::time::Instant::now();
        let impressions = |e: &mut Engine, partition: i32, minutes: std::ops::Range<i64>| {
            for m in minutes {
                let imp = serde_json::json!({"query_id": format!("q{partition}-{m}"), "timestamp": m * 60_000 + 1_000,
                                             "results": ["d1"], "experiment": "e", "variant": "control"});
                e.process(crate::event::EventKind::Impression, partition, imp.to_string().as_bytes(), now).unwrap();
                let eng = serde_json::json!({"query_id": format!("q{partition}-{m}"), "timestamp": m * 60_000 + 1_010,
                                             "doc_id": "d1"});
                e.process(crate::event::EventKind::Engagement, partition, eng.to_string().as_bytes(), now).unwrap();
            }
            e.advance(now);
        };
        let write_record = |e: &mut Engine, partition: i32| -> Vec<(i64, u64)> {
            let (record, carried) = (e.partition_aggregates(partition).unwrap(), e.unwritten_windows(partition));
            e.aggregates_written(&[(partition, carried)]);
            e.apply_aggregates(PartitionAggregates::decode(&record).unwrap()).unwrap();
            let view = e.view.global.as_mut().unwrap();
            view.unpublished.drain(..).map(|w| (w.start / 60_000, w.groups.get(0).unwrap().impressions)).collect()
        };
        e.assign(0, now);
        impressions(&mut e, 0, 0..8);
        assert!(write_record(&mut e, 0).is_empty(), "partition 1 has closed nothing");
        e.assign(1, now);
        impressions(&mut e, 1, 0..8);
        assert_eq!(e.window_late_impressions(), 0, "the re-read impressions are in their windows");
        let handed = write_record(&mut e, 1);
        assert_eq!(handed, (0..7).map(|m| (m, 2)).collect::<Vec<_>>(), "every window whole, with both parts");
        // Partition 1 moves again without a snapshot: minutes 0 to 6 are published.
        e.remove_partition(1);
        e.assign(1, now);
        impressions(&mut e, 1, 2..4);
        assert_eq!(e.window_late_impressions(), 1, "minute 2, final: a published window stays as published");
    }

    /// A backlog: 100 minutes of traffic processed before any record is written. The engine
    /// closes a record's worth of windows of each size, holds the rest open and says records
    /// are due; each record written lets the next ones close, and every window reaches the
    /// view, none dropped. Once a write failed, windows close at the watermark again and the
    /// unwritten limit bounds what is kept.
    #[test]
    fn a_backlog_closes_a_record_of_windows_at_a_time_and_drops_none() {
        use std::sync::atomic::Ordering::Relaxed;
        let backlog = || {
            let toml = "[join]\nattribution_window = \"1s\"\nmax_out_of_orderness = \"0s\"\nidle_timeout = \"1s\"\n\
                        [metrics]\nwindows = [\"1m\", \"5m\"]\n";
            let cfg = crate::config::Config::from_toml_with_env(toml, "test", std::iter::empty()).unwrap();
            let mut e = Engine::new(&cfg).without_past_limit();
            e.enable_global_view(1);
            let now = std::time::Instant::now();
            e.assign(0, now);
            for m in 0..=100 {
                let imp = serde_json::json!({"query_id": format!("q{m}"), "timestamp": m * 60_000 + 1_000,
                                             "results": ["d1"], "experiment": "e", "variant": "control"});
                e.process(crate::event::EventKind::Impression, 0, imp.to_string().as_bytes(), now).unwrap();
                let eng =
                    serde_json::json!({"query_id": format!("q{m}"), "timestamp": m * 60_000 + 1_010, "doc_id": "d1"});
                e.process(crate::event::EventKind::Engagement, 0, eng.to_string().as_bytes(), now).unwrap();
            }
            e.advance(now);
            (e, now)
        };
        let unwritten = |e: &Engine, size| {
            let task = e.partitions.tasks.get(0).unwrap();
            task.closed_progress.unwritten_of_size(&task.totals.recent_closed, size)
        };
        let (mut e, now) = backlog();
        let due = e.aggregates_due();
        let (mut records, mut handed) = (0, Vec::new());
        while due.swap(false, Relaxed) {
            assert_eq!(unwritten(&e, 0), RECORD_WINDOWS, "a record's worth of 1 m windows, the rest held");
            assert!(unwritten(&e, 1) <= RECORD_WINDOWS);
            let (record, carried) = (e.partition_aggregates(0).unwrap(), e.unwritten_windows(0));
            e.aggregates_written(&[(0, carried)]);
            e.apply_aggregates(PartitionAggregates::decode(&record).unwrap()).unwrap();
            records += 1;
            e.advance(now);
        }
        let record = e.partition_aggregates(0).unwrap();
        e.apply_aggregates(PartitionAggregates::decode(&record).unwrap()).unwrap();
        let view = e.view.global.as_ref().unwrap();
        for size in [0, 1] {
            handed.push(view.unpublished.iter().filter(|w| w.size_index == size).count());
        }
        assert_eq!(handed, [100, 20], "minutes 0 to 99, in 1 m and 5 m windows");
        assert_eq!(records, 100 / RECORD_WINDOWS, "a record per {RECORD_WINDOWS} minutes, the rest in the last");
        assert_eq!(view.skipped, WindowsSkipped::default());
        // The changelog cannot be written: no window waits for it, and past the limit the
        // oldest unwritten ones go, counted.
        let (mut e, now) = backlog();
        assert_eq!(unwritten(&e, 0), RECORD_WINDOWS, "closed before the write failed");
        // The source clears the flag as it writes; the write fails.
        e.aggregates_due().store(false, Relaxed);
        e.aggregates_not_written();
        e.advance(now);
        assert!(!e.aggregates_due().load(Relaxed), "no record is waited for");
        assert_eq!((unwritten(&e, 0), unwritten(&e, 1)), (UNWRITTEN_LIMIT, 20));
        assert_eq!(e.view.global.as_ref().unwrap().skipped.unwritten, 100 - UNWRITTEN_LIMIT as u64);
    }

    /// While the publisher's deliveries succeed, its backlog is not bounded (a backlog completes
    /// many windows between two attempts, all taken at the next); once one failed, the oldest
    /// past the limit are dropped and counted.
    #[test]
    fn the_publishers_backlog_is_bounded_only_while_its_deliveries_fail() {
        let mut view = GlobalView { partitions: 1, newest: vec![None], ..Default::default() };
        let window = |m: i64| ClosedWindow { size_index: 0, start: m * 60, groups: table(&[(0, 1)]) };
        view.unpublished = (0..100).map(window).collect();
        view.trim_unpublished(true);
        assert_eq!((view.unpublished.len(), view.skipped.unpublished), (100, 0));
        view.publisher_failing = true;
        view.trim_unpublished(true);
        assert_eq!(
            (view.unpublished.len(), view.skipped.unpublished),
            (UNPUBLISHED_LIMIT, 100 - UNPUBLISHED_LIMIT as u64)
        );
        assert_eq!(view.unpublished[0].start, (100 - UNPUBLISHED_LIMIT as i64) * 60, "the oldest went");
    }

    /// During a rolling upgrade, replicas of the version before interleaving write records
    /// without its sums (as `interleaving.max_rankers = 0` does): read as zeros, not refused.
    #[test]
    fn a_record_without_the_interleaving_sums_is_read_as_zeros() {
        let engine = |max_rankers: usize| {
            let mut cfg = crate::config::Config::default();
            cfg.interleaving.max_rankers = max_rankers;
            let mut e = Engine::new(&cfg).without_past_limit();
            e.enable_global_view(1);
            e
        };
        let now = std::time::Instant::now();
        let (mut old, mut new) = (engine(0), engine(2));
        old.assign(0, now);
        let imp = r#"{"query_id":"q1","timestamp":1000,"results":["d1"],"experiment":"e","variant":"control"}"#;
        old.process(crate::event::EventKind::Impression, 0, imp.as_bytes(), now).unwrap();
        old.finish();
        let record = PartitionAggregates::decode(&old.partition_aggregates(0).unwrap()).unwrap();
        new.apply_aggregates(record).expect("an older replica's record");
        assert_eq!(new.ab_cumulative().iter().map(|(_, s)| s.impressions).sum::<u64>(), 1);
        // The other way round the sums do not fit: refused, as any record of another shape.
        let mut newer = engine(2);
        newer.assign(0, now);
        newer.process(crate::event::EventKind::Impression, 0, imp.as_bytes(), now).unwrap();
        newer.finish();
        let record = PartitionAggregates::decode(&newer.partition_aggregates(0).unwrap()).unwrap();
        let refused = old.apply_aggregates(record).unwrap_err();
        assert!(matches!(refused, Inconsistency::Shape { what: "sums in a group's stats", .. }), "{refused}");
    }

    /// During a rolling upgrade, replicas of the version before the measures for incomplete
    /// judgments write judged records without their sums (as `judgments.incomplete_measures =
    /// false` does): read as zeros, so those measures' count there is 0, not the judged count.
    #[test]
    fn a_judged_record_without_the_incomplete_measures_is_read_as_zeros() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("judgments.jsonl");
        std::fs::write(&file, "{\"query\":\"q\",\"doc_id\":\"d1\",\"grade\":1}\n").unwrap();
        let engine = |incomplete: bool| {
            let mut cfg = crate::config::Config::default();
            cfg.judgments.file = file.to_string_lossy().into_owned();
            cfg.judgments.incomplete_measures = incomplete;
            let mut e = Engine::new(&cfg).without_past_limit();
            e.set_judgments(crate::judgments::JudgmentSource::from_config(&cfg.judgments).unwrap().unwrap());
            e.enable_global_view(1);
            e
        };
        let now = std::time::Instant::now();
        let imp =
            r#"{"query_id":"q1","timestamp":1000,"results":["d1"],"experiment":"e","variant":"control","query":"q"}"#;
        let record = |e: &mut Engine| {
            e.assign(0, now);
            e.process(crate::event::EventKind::Impression, 0, imp.as_bytes(), now).unwrap();
            e.finish();
            PartitionAggregates::decode(&e.partition_aggregates(0).unwrap()).unwrap()
        };
        let (mut old, mut new) = (engine(false), engine(true));
        new.apply_aggregates(record(&mut engine(false))).expect("an older replica's record");
        let block = new.layout().judged().unwrap().clone();
        let cumulative = new.ab_cumulative();
        let (_, stats) = cumulative.iter().next().unwrap();
        assert_eq!(stats.sum(block.count_slot()), 1.0, "judged there");
        assert_eq!(stats.sum(block.incomplete_count_slot().unwrap()), 0.0, "without the measures there");
        let refused = old.apply_aggregates(record(&mut engine(true))).unwrap_err();
        assert!(matches!(refused, Inconsistency::Shape { what: "sums in a group's stats", .. }), "{refused}");
    }

    /// Two replicas of one deployment: `a` holds partition 0 from the start, `b` starts after
    /// six looks. `b` takes the looks over from partition 0's record and then folds the same
    /// windows as `a`: their cumulative anytime-valid figures are equal to the bit.
    #[test]
    fn a_late_replica_takes_the_looks_over_from_partition_0() {
        let engine = || {
            let toml = "[join]\nattribution_window = \"1s\"\nmax_out_of_orderness = \"0s\"\nidle_timeout = \"1s\"\n[metrics]\ncutoffs = [1, 3]\nwindows = [\"1m\"]\n";
            let cfg = crate::config::Config::from_toml_with_env(toml, "test", std::iter::empty()).unwrap();
            let mut e = Engine::new(&cfg).without_past_limit();
            e.enable_global_view(1);
            e
        };
        let now = std::time::Instant::now();
        let (mut a, mut b) = (engine(), engine());
        a.assign(0, now);
        let feed = |a: &mut Engine, minutes: std::ops::Range<i64>| {
            for i in minutes.start * 100..minutes.end * 100 {
                let (variant, ts) = (if i % 2 == 0 { "control" } else { "treatment" }, 1_000 + i * 600);
                let q = format!("q{i}");
                let imp = serde_json::json!({"query_id": q, "timestamp": ts, "results": ["d1", "d2"],
                                             "experiment": "e", "variant": variant});
                a.process(crate::event::EventKind::Impression, 0, imp.to_string().as_bytes(), now).unwrap();
                if i % 3 == 0 || (variant == "treatment" && i % 5 == 0) {
                    let eng = serde_json::json!({"query_id": q, "timestamp": ts + 10, "doc_id": "d1"});
                    a.process(crate::event::EventKind::Engagement, 0, eng.to_string().as_bytes(), now).unwrap();
                }
            }
        };
        // Written as the source writes it: then the windows it carried are marked so.
        let write = |a: &mut Engine| {
            let (record, carried) = (a.partition_aggregates(0).unwrap(), a.unwritten_windows(0));
            a.aggregates_written(&[(0, carried)]);
            record
        };
        let publish = |a: &mut Engine, readers: &mut [&mut Engine]| {
            a.advance(now);
            let record = write(a);
            a.apply_aggregates(PartitionAggregates::decode(&record).unwrap()).unwrap();
            // Written again, now with the looks the windows just made.
            let record = write(a);
            for r in readers {
                r.apply_aggregates(PartitionAggregates::decode(&record).unwrap()).unwrap();
            }
        };
        for minute in 0..7 {
            // A record every minute, as a checkpoint interval of seconds writes them.
            feed(&mut a, minute..minute + 1);
            publish(&mut a, &mut []);
        }
        assert_eq!(a.looks().count, 6, "minutes 0 to 5 are closed");
        // The record keeps only the newest RETAINED_WINDOWS windows: b has the six looks only
        // by taking them over.
        publish(&mut a, &mut [&mut b]);
        assert_eq!(b.looks().count, 6);
        for minute in 7..10 {
            feed(&mut a, minute..minute + 1);
            publish(&mut a, &mut [&mut b]);
        }
        assert_eq!((a.looks().count, b.looks().count), (9, 9));
        let figures = |e: &Engine| {
            let report = e.experiment_reports(&e.ab_cumulative(), crate::experiments::Span::Cumulative);
            serde_json::to_value(&report[0].comparisons).unwrap()
        };
        assert_eq!(figures(&a), figures(&b));
        let mrr = &figures(&a)[0]["metrics"]["mrr"];
        assert!(mrr["always_valid_p_value"].as_f64().is_some(), "{mrr}");
    }
}
