//! What the [`Engine`](super::Engine) reports experiment-wide, one part it owns: the windows
//! its partitions closed (merged), or with the aggregates topic every partition's complete
//! ones ([`GlobalView`]); the looks of the cumulative anytime-valid figures and their history;
//! and how the aggregates records' writes stand, which decides whether windows wait for them.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use super::aggregation::ClosedWindows;
use super::global::{GlobalView, WindowsSkipped};
use crate::accumulate::{ClosedWindow, Groups};
use crate::config::AbConfig;
use crate::experiments::history::History;
use crate::experiments::sequential::Looks;
use crate::metrics::MetricLayout;
use crate::time::EventTime;

/// What turns sums into an experiment's figures at a look: borrowed from the engine's other
/// parts for the moment of the look.
pub(super) struct Statistics<'a> {
    /// `metrics.windows`, in milliseconds.
    pub(super) window_sizes_ms: &'a [i64],
    /// Which metric sits in which slot.
    pub(super) layout: &'a MetricLayout,
    /// The groups' names.
    pub(super) groups: &'a Groups,
    /// `[ab]`: what the reports compare.
    pub(super) ab: &'a AbConfig,
}

/// The experiment-wide part of the engine.
#[derive(Debug)]
pub(super) struct ExperimentView {
    /// The windows this engine's partitions closed, merged.
    pub(super) closed: ClosedWindows,
    /// The looks of the cumulative anytime-valid figures: at every complete window of the first
    /// size, this engine's own or, with the global view on, the experiment-wide ones.
    pub(super) looks: Looks,
    /// The cumulative figures at every look, for the experiment page's curves: in memory only
    /// (see [`crate::experiments::history`]).
    pub(super) history: History,
    /// Every partition's A/B sums, from the aggregates topic (serve only): when present, the
    /// A/B reports, window gauges and the A/B publisher read complete windows from here, and
    /// every task keeps its newest closed windows for its aggregates records.
    pub(super) global: Option<GlobalView>,
    /// Set when windows were held open for a partition's aggregates record (see
    /// `Engine::aggregates_due`); shared with the source, which reads it between messages.
    pub(super) aggregates_due: Arc<AtomicBool>,
    /// The last changelog write failed: windows are not held for records (see
    /// `Engine::aggregates_not_written`).
    pub(super) aggregates_failing: bool,
}

impl ExperimentView {
    /// A view of this engine's own partitions, for `sizes` window sizes.
    pub(super) fn new(sizes: usize) -> Self {
        ExperimentView {
            closed: ClosedWindows::new(sizes),
            looks: Looks::default(),
            history: History::default(),
            global: None,
            aggregates_due: Arc::default(),
            aggregates_failing: false,
        }
    }

    /// Whether each task keeps its newest closed windows for the aggregates topic: with the
    /// global view on.
    pub(super) fn retains_recent_closed(&self) -> bool {
        self.global.is_some()
    }

    /// Turns the global view on (see `Engine::enable_global_view`).
    pub(super) fn enable_global(&mut self, sizes: usize, partitions: usize) {
        let view = self.global.get_or_insert_with(|| GlobalView::new(sizes));
        view.partitions = view.partitions.max(partitions);
        // The local merge of closed windows is not what gets published any more, nor what the
        // looks are taken at.
        self.closed.keep = false;
        self.closed.kept.clear();
        self.looks = Looks::default();
    }

    /// Looks at a complete window of the first size: the anytime-valid figures, recorded.
    fn look(looks: &mut Looks, history: &mut History, window: &ClosedWindow, stats: &Statistics<'_>) {
        let reports = looks.look(window, stats.window_sizes_ms, stats.layout, stats.groups, stats.ab);
        history.record(looks, &reports);
    }

    /// Merges windows this engine's partitions closed together, and, unless the global view
    /// supplies the complete windows, looks at each of the first size.
    pub(super) fn add_closed(&mut self, windows: Vec<ClosedWindow>, stats: &Statistics<'_>) {
        let ExperimentView { closed, looks, history, global, .. } = self;
        let local = global.is_none();
        closed.add(windows, |window| {
            if local {
                Self::look(looks, history, window, stats);
            }
        });
    }

    /// Puts a partition's record, checked and renumbered, into the global view (if on): its
    /// newest sums and bounds, the windows it carries, each window that completes looked at.
    #[allow(clippy::too_many_arguments, reason = "a record's parts, each from the decoding")]
    pub(super) fn merge_record(
        &mut self,
        partition: i32,
        closed_before: Vec<EventTime>,
        cumulative: crate::accumulate::GroupTable,
        windows: Vec<ClosedWindow>,
        kept_from: Option<Vec<EventTime>>,
        covariates: Option<crate::accumulate::CovariateTable>,
        publishing: bool,
        stats: &Statistics<'_>,
    ) {
        let ExperimentView { global, looks, history, .. } = self;
        if let Some(view) = global.as_mut() {
            view.set_covariates(partition, covariates);
            view.apply(partition, closed_before, cumulative, windows, kept_from, |window| {
                Self::look(looks, history, window, stats);
            });
            view.trim_unpublished(publishing);
        }
    }

    /// The newest closed window of each size: complete over every partition when the global
    /// view is on, merged over this engine's partitions otherwise.
    pub(super) fn newest_closed(&self) -> impl Iterator<Item = &ClosedWindow> {
        match &self.global {
            Some(view) => view.newest.iter().flatten(),
            None => self.closed.newest.iter().flatten(),
        }
    }

    /// Closed windows kept and not yet taken or published, in closing order: with the global
    /// view on, the complete ones, and only where `publishes`.
    pub(super) fn kept_closed(&self, publishes: bool) -> &[ClosedWindow] {
        match &self.global {
            Some(view) if publishes => &view.unpublished,
            Some(_) => &[],
            None => &self.closed.kept,
        }
    }

    /// The unpublished closed windows of these (size index, start) have been delivered.
    pub(super) fn published(&mut self, windows: &[(usize, EventTime)]) {
        let kept = match &mut self.global {
            Some(view) => {
                view.publisher_failing = false;
                &mut view.unpublished
            }
            None => &mut self.closed.kept,
        };
        let sent: std::collections::BTreeSet<&(usize, EventTime)> = windows.iter().collect();
        kept.retain(|w| !sent.contains(&(w.size_index, w.start)));
    }

    /// A publication failed: the publisher's backlog is bounded from now until one succeeds.
    pub(super) fn publish_failed(&mut self) {
        if let Some(view) = &mut self.global {
            view.publisher_failing = true;
        }
    }

    /// Closed windows the global view never handed out, by why; `None` without it.
    pub(super) fn windows_skipped(&self) -> Option<WindowsSkipped> {
        self.global.as_ref().map(|view| view.skipped)
    }

    /// Aggregates increments not applied (see `super::increments`).
    pub(super) fn increments_skipped(&self) -> u64 {
        self.global.as_ref().map_or(0, |view| view.increments_skipped)
    }
}
