//! The [`Engine`]'s side of the aggregates topic: the records of the partitions it owns,
//! encoded whole (the increments are [`super::increments`]'), what the brokers acknowledged of
//! them, and every partition's records applied to the experiment-wide view
//! ([`super::global`]).
//!
//! The records applied are untrusted bytes (decoded and checked by
//! [`super::aggregates_record`]): this file is under the no-panic rule (crate documentation,
//! "Hostile input").
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]

use std::collections::BTreeSet;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use super::aggregates_record::{PartitionAggregates, PartitionAggregatesRef};
use super::partitions::Partitions;
use super::published::{trim_closed, Link};
use super::snapshot::check_named;
use super::view::Statistics;
use super::Engine;
use crate::accumulate::{ClosedWindow, CovariateTable, GroupTable};
use crate::checkpoint::Inconsistency;
use crate::experiments::sequential::Looks;
use crate::ids::{GroupId, GroupMap};
use crate::time::EventTime;

impl Engine {
    /// How many of a partition's closed windows no aggregates record carried yet: what a
    /// record encoded now carries, for [`Engine::aggregates_written`] once it is written.
    pub fn unwritten_windows(&self, partition: i32) -> usize {
        self.partitions.tasks.get(partition).map_or(0, |t| t.closed_progress.unwritten_count())
    }

    /// [`Engine::unwritten_windows`] over every partition the engine holds: the experiment-wide
    /// view's backlog from this replica (a catch-up closes many windows between two writes).
    pub fn unwritten_windows_total(&self) -> usize {
        self.partitions.tasks.iter().map(|(_, t)| t.closed_progress.unwritten_count()).sum()
    }

    /// Records encoded with `(partition, unwritten_windows)` were written: those windows are
    /// carried, and beyond the retained few can go; windows held open for them close at the
    /// next advance.
    pub fn aggregates_written(&mut self, written: &[(i32, usize)]) {
        self.view.aggregates_failing = false;
        let sizes_ms = &self.partitions.template.window_sizes_ms;
        for &(partition, carried) in written {
            let Some(task) = self.partitions.tasks.get_mut(partition) else { continue };
            let progress = &mut task.closed_progress;
            progress.published.acknowledged();
            progress.carried(carried);
            for size in 0..sizes_ms.len() {
                trim_closed(&mut task.totals.recent_closed, progress, size, sizes_ms);
            }
        }
    }

    /// A changelog write failed: until one succeeds, windows close at the watermark rather than
    /// wait for a record (the unwritten limit bounds what they keep, see [`super::published::UNWRITTEN_LIMIT`]).
    pub fn aggregates_not_written(&mut self) {
        self.view.aggregates_failing = true;
        for task in self.partitions.tasks.iter_mut() {
            task.closed_progress.published.not_written();
        }
    }

    /// Set (and left set) whenever windows are held open for a partition's record
    /// ([`hold_back`]): the source then writes the records without waiting for the checkpoint
    /// interval, and clears it.
    pub fn aggregates_due(&self) -> Arc<AtomicBool> {
        self.view.aggregates_due.clone()
    }

    /// Turns on the experiment-wide view over `partitions` input partitions (0 until the
    /// aggregates topic's partition count is known: then no window is complete yet): from now on
    /// the A/B reports, the window gauges and the A/B publisher read complete windows from it,
    /// and every task keeps its recently closed windows for [`Engine::partition_aggregates`].
    pub fn enable_global_view(&mut self, partitions: usize) {
        self.view.enable_global(self.partitions.template.window_sizes_ms.len(), partitions);
    }

    /// A partition's aggregates record for the aggregates topic, `None` if the engine holds no
    /// task for it.
    pub fn partition_aggregates(&self, partition: i32) -> Option<Vec<u8>> {
        self.whole_record(partition, None)
    }

    /// [`Engine::partition_aggregates`] as the base of a chain at `link`.
    pub(super) fn whole_record(&self, partition: i32, link: Option<Link>) -> Option<Vec<u8>> {
        let task = self.partitions.tasks.get(partition)?;
        let acc = &task.totals.accumulators;
        let looks = (partition == 0 && self.view.global.is_some()).then_some(&self.view.looks);
        let used: BTreeSet<GroupId> = acc
            .cumulative
            .iter()
            .map(|(g, _)| g)
            .chain(task.totals.recent_closed.iter().flat_map(|w| w.groups.iter().map(|(g, _)| g)))
            .chain(looks.iter().flat_map(|l| l.prefix.iter().map(|(g, _)| g)))
            .chain(task.totals.cuped.iter().flat_map(|c| c.covariates.groups()))
            .collect();
        let groups = used.into_iter().map(|id| self.group_name(id)).collect();
        Some(crate::checkpoint::encode(&PartitionAggregatesRef {
            partition,
            closed_before: acc.closed_before(),
            groups,
            cumulative: &acc.cumulative,
            recent_closed: &task.totals.recent_closed,
            looks,
            cuped: task.totals.cuped.as_ref().map(|state| (self.cuped_metric_keys(), &state.covariates)),
            kept_from: task.closed_kept_from(&acc.closed_before()),
            link,
        }))
    }

    /// Merges a partition's aggregates record (any replica's) into the experiment-wide view. A
    /// record whose stats are not of this configuration's shape, whose counts leave no room to
    /// add to, or that refers to groups it does not name, is refused whole (its bytes are
    /// another replica's, or anyone's who can write the topic).
    pub fn apply_aggregates(&mut self, mut record: PartitionAggregates) -> Result<(), Inconsistency> {
        if self.view.global.is_none() {
            return Ok(());
        }
        let (shape, sizes) = (self.partitions.template.shape, self.partitions.template.window_sizes_ms.len());
        // A record of a replica without the interleaving sums (an older version during a
        // rolling upgrade, or `interleaving.max_rankers = 0`) counted no interleaved impression.
        // Likewise without the judged block (judgments off there, or an older version).
        for from in self.aggregation.layout().block_ends() {
            let to = shape.metrics;
            record.cumulative.widen(from, to);
            for window in &mut record.recent_closed {
                window.groups.widen(from, to);
            }
            if let Some(looks) = &mut record.looks {
                looks.prefix.widen(from, to);
            }
        }
        record.cumulative.check(shape)?;
        for window in &record.recent_closed {
            window.check(shape, sizes)?;
        }
        if let Some(looks) = &record.looks {
            looks.check(shape, self.aggregation.layout().len())?;
        }
        let recent = record.recent_closed.iter().flat_map(|w| w.groups.iter().map(|(g, _)| g));
        let prefix = record.looks.iter().flat_map(|l| l.prefix.iter().map(|(g, _)| g));
        let keys = self.cuped_metric_keys();
        let covariates = match (&self.partitions.template.cuped, record.cuped.0.flatten()) {
            (Some(settings), Some((written, table))) if written == keys => {
                table.check(settings)?;
                Some(table)
            }
            _ => None,
        };
        let used_by_covariates = covariates.iter().flat_map(CovariateTable::groups);
        let used = record.cumulative.iter().map(|(g, _)| g).chain(recent).chain(prefix).chain(used_by_covariates);
        check_named(&record.groups, used)?;
        let map = self.intern_names(&record.groups);
        let mut cumulative = record.cumulative;
        cumulative.remap(&map);
        let mut recent = record.recent_closed;
        self.renumber_windows_take_looks(&map, &mut recent, record.looks);
        let covariates = covariates.map(|mut table| {
            table.remap(&map);
            table
        });
        if let Some(view) = self.view.global.as_mut() {
            view.set_link(record.partition, record.link.0.flatten());
        }
        let kept_from = record.kept_from.0;
        self.merge_into_view(record.partition, record.closed_before, cumulative, recent, kept_from, covariates);
        Ok(())
    }

    /// Renumbers a record's windows into this engine's group ids, and takes its looks over
    /// (renumbered) when this engine's are behind them.
    pub(super) fn renumber_windows_take_looks(
        &mut self,
        map: &GroupMap,
        windows: &mut [ClosedWindow],
        looks: Option<Looks>,
    ) {
        for window in windows {
            window.groups.remap(map);
        }
        if let Some(mut theirs) = looks {
            if self.view.looks.is_behind(&theirs) {
                theirs.prefix.remap(map);
                self.view.looks = theirs;
            }
        }
    }

    /// Puts a partition's record, checked and renumbered, into the view: its newest sums and
    /// bounds, the windows it carries, each window that completes looked at.
    pub(super) fn merge_into_view(
        &mut self,
        partition: i32,
        closed_before: Vec<EventTime>,
        cumulative: GroupTable,
        windows: Vec<ClosedWindow>,
        kept_from: Option<Vec<EventTime>>,
        covariates: Option<CovariateTable>,
    ) {
        let publishing = self.publishes_global() && !self.ab.output_topic.is_empty();
        let Engine { partitions: Partitions { template, .. }, view, aggregation, groups, ab, .. } = self;
        let stats = Statistics { window_sizes_ms: &template.window_sizes_ms, layout: aggregation.layout(), groups, ab };
        view.merge_record(partition, closed_before, cumulative, windows, kept_from, covariates, publishing, &stats);
    }

    /// Whether this engine publishes the experiment-wide A/B feed: with the view on, the owner
    /// of partition 0 does (one replica at a time, chosen by the group's assignment).
    pub(super) fn publishes_global(&self) -> bool {
        self.partitions.tasks.get(0).is_some()
    }
}

#[cfg(test)]
impl Engine {
    /// The parts of a partition's aggregates record with their sizes encoded, for the tests
    /// and measurements that say where its bytes go.
    pub fn aggregates_parts(&self, partition: i32) -> Vec<(&'static str, usize)> {
        let Some(task) = self.partitions.tasks.get(partition) else { return Vec::new() };
        let enc = |b: Vec<u8>| b.len();
        let totals = &task.totals;
        vec![
            ("cumulative", enc(crate::checkpoint::encode(&totals.accumulators.cumulative))),
            ("recent_closed", enc(crate::checkpoint::encode(&totals.recent_closed))),
            ("recent_closed_n", totals.recent_closed.len()),
            ("looks", enc(crate::checkpoint::encode(&self.view.looks))),
            ("cuped", totals.cuped.as_ref().map_or(0, |c| enc(crate::checkpoint::encode(&c.covariates)))),
        ]
    }
}
