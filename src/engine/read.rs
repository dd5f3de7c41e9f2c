//! What exporters and reports read from the engine: every partition's sums and counts merged,
//! the closed windows (this engine's, or complete over every partition with the global view on),
//! and the configuration they are labelled with.

use std::time::Instant;

use super::task::Totals;
use super::telemetry::{Counters, Telemetry};
use super::{Engine, StateSize};
use crate::accumulate::{ClosedWindow, CovariateTable, GroupTable, Groups};
use crate::clicks::log::LogSummary;
use crate::clicks::named::NamedTable;
use crate::config::AbConfig;
use crate::event::{Decoders, EventKind};
use crate::experiments::breakdown::{dimensions_report, DimensionsReport, Which};
use crate::experiments::history::History;
use crate::experiments::sequential::Looks;
use crate::experiments::{ExperimentReport, ReadoutSources, SequentialSource, Span};
use crate::join::EngagementTally;
use crate::metrics::MetricLayout;
use crate::time::EventTime;

impl Engine {
    /// The click log of every owned partition, merged by name, with its counts; `None` when
    /// `clicks.enabled` is off.
    pub fn click_table(&self) -> Option<(NamedTable, LogSummary)> {
        let summary = self.click_summary()?;
        let mut table = NamedTable::new(self.template_click_rank()?);
        for log in self.partitions.tasks.tasks().filter_map(|t| t.totals.clicks.as_ref()) {
            log.add_to(&mut table);
        }
        Some((table, summary))
    }

    /// [`Engine::click_table`]'s counts alone: cheap enough for every scrape.
    pub fn click_summary(&self) -> Option<LogSummary> {
        self.template_click_rank()?;
        let mut summary = LogSummary::default();
        for log in self.partitions.tasks.tasks().filter_map(|t| t.totals.clicks.as_ref()) {
            summary.counts.add(&log.counts);
            let (queries, pairs, pending) = log.sizes();
            summary.queries += queries;
            summary.pairs += pairs;
            summary.pending += pending;
        }
        Some(summary)
    }

    pub fn layout(&self) -> &MetricLayout {
        self.aggregation.layout()
    }
    /// The A/B reports of every experiment over `table` (the cumulative one or a closed window's),
    /// naming every partition held in state. A cumulative report's anytime-valid figures are the
    /// looks' (see [`crate::experiments::sequential`]); a window's, its own.
    pub fn experiment_reports(&self, table: &GroupTable, span: Span<'_>) -> Vec<ExperimentReport> {
        let (sequential, covariates, traffic) = self.report_inputs(span);
        let sources = ReadoutSources { enabled: true, covariates: covariates.as_ref(), traffic };
        let layout = self.aggregation.layout();
        let mut reports = crate::experiments::reports(layout, &self.groups, table, &self.ab, span, sequential, sources);
        let look_window = self.window_labels.first().filter(|_| matches!(span, Span::Cumulative));
        let partitions = self.reported_partitions();
        for report in &mut reports {
            report.partitions.clone_from(&partitions);
            if let Some(label) = look_window {
                report.sequential.look_window = Some(label.clone());
            }
        }
        reports
    }

    /// The cumulative report of `experiment` per value of each of its dimensions
    /// (`ab.dimensions`) that `which` takes; `None` when no finalized impression of it has such
    /// a breakdown here.
    pub fn dimensions_report(&self, experiment: &str, which: Which) -> Option<DimensionsReport> {
        let span = Span::Cumulative;
        let (sequential, covariates, traffic) = self.report_inputs(span);
        let sources = ReadoutSources { enabled: true, covariates: covariates.as_ref(), traffic };
        let layout = self.aggregation.layout();
        let table = self.ab_cumulative();
        let mut report =
            dimensions_report(layout, &self.groups, &table, &self.ab, span, sequential, sources, experiment, which)?;
        report.partitions = self.reported_partitions();
        let look_window = self.window_labels.first();
        for value in report.dimensions.iter_mut().flat_map(|d| d.values.iter_mut()) {
            value.report.partitions.clone_from(&report.partitions);
            value.report.sequential.look_window = look_window.cloned();
        }
        Some(report)
    }

    /// The partitions a report covers: every partition for the experiment-wide view, else
    /// those held.
    fn reported_partitions(&self) -> Vec<i32> {
        match &self.view.global {
            Some(view) => (0..view.partitions as i32).collect(),
            None => self.partitions(),
        }
    }

    /// What a report over `span` reads beside its table: the anytime-valid looks, CUPED's
    /// covariates and the current traffic.
    fn report_inputs(
        &self,
        span: Span<'_>,
    ) -> (SequentialSource<'_>, Option<CovariateTable>, Option<(&GroupTable, f64)>) {
        let sequential = match span {
            Span::Cumulative => SequentialSource::Running(&self.view.looks),
            Span::Window { .. } => SequentialSource::ThisLook,
        };
        // CUPED's covariates are this process's partitions': they pair with the cumulative sums
        // of the same partitions only (the experiment-wide view carries its own).
        let covariates = match span {
            Span::Cumulative => self.ab_covariates(),
            Span::Window { .. } => None,
        };
        // The current traffic: the newest closed window of the first size, over the event time
        // it covered (a replay's last window closes when the input ends, part-way through it:
        // up to the newest impression).
        let newest_impression =
            self.partitions.tasks.tasks().filter_map(|t| t.inputs[EventKind::Impression.index()].max_event_time).max();
        // A closed window's report is final (the A/B feed publishes it once): no ETA, which
        // would move with the traffic.
        let cumulative = matches!(span, Span::Cumulative);
        let traffic = self.newest_closed().find(|w| cumulative && w.size_index == 0).map(|w| {
            let end = w.start.saturating_add(self.window_size_ms(0));
            let covered_to =
                newest_impression.map_or(end, |newest| newest.saturating_add(1).clamp(w.start.saturating_add(1), end));
            (&w.groups, covered_to.saturating_sub(w.start) as f64 / 1000.0)
        });
        (sequential, covariates, traffic)
    }
    /// The looks of the cumulative anytime-valid figures.
    pub fn looks(&self) -> &Looks {
        &self.view.looks
    }
    /// The cumulative figures at every look, for the experiment page.
    pub fn history(&self) -> &History {
        &self.view.history
    }
    pub fn ab(&self) -> &AbConfig {
        &self.ab
    }
    pub fn groups(&self) -> &Groups {
        &self.groups
    }
    /// The CUPED covariates of every partition held, merged; `None` without `ab.cuped`.
    pub fn cuped_covariates(&self) -> Option<CovariateTable> {
        self.partitions.template.cuped.as_ref()?;
        let mut table = CovariateTable::default();
        for task in self.partitions.tasks.tasks() {
            if let Some(state) = &task.totals.cuped {
                table.merge(&state.covariates);
            }
        }
        Some(table)
    }
    /// Every finalized impression's sums per group, over every partition held.
    pub fn cumulative(&self) -> GroupTable {
        let mut table = GroupTable::default();
        for task in self.partitions.tasks.tasks() {
            table.merge(&task.totals.accumulators.cumulative);
        }
        table
    }
    /// CUPED's covariates paired with [`Engine::ab_cumulative`]: every partition's (if every
    /// partition's record carried them) with the global view on, this engine's otherwise.
    pub fn ab_covariates(&self) -> Option<CovariateTable> {
        match &self.view.global {
            Some(view) => view.cuped_covariates(),
            None => self.cuped_covariates(),
        }
    }
    /// The sums the A/B reports compare cumulatively: every partition's, experiment-wide, when
    /// the global view is on; this engine's partitions' otherwise.
    pub fn ab_cumulative(&self) -> GroupTable {
        match &self.view.global {
            Some(view) => view.cumulative(),
            None => self.cumulative(),
        }
    }
    /// The newest closed window of each size: complete over every partition when the global
    /// view is on, merged over this engine's partitions otherwise.
    pub fn newest_closed(&self) -> impl Iterator<Item = &ClosedWindow> {
        self.view.newest_closed()
    }
    /// Closed windows kept and not yet taken or published, in closing order. With the global
    /// view on, the complete ones, and only on the replica that publishes (see
    /// [`Engine::enable_global_view`]).
    pub fn kept_closed(&self) -> &[ClosedWindow] {
        self.view.kept_closed(self.publishes_global())
    }
    pub fn take_closed_windows(&mut self) -> Vec<ClosedWindow> {
        std::mem::take(&mut self.view.closed.kept)
    }
    /// The unpublished closed windows of these (size index, start) have been delivered. Named,
    /// not counted: the oldest may have been dropped while they were sent.
    pub fn published(&mut self, windows: &[(usize, EventTime)]) {
        self.view.published(windows);
    }
    /// A publication failed: the publisher's backlog is bounded from now until one succeeds.
    pub fn publish_failed(&mut self) {
        self.view.publish_failed();
    }
    /// Closed windows the experiment-wide view never handed out, by why; `None` without the view.
    pub fn windows_skipped(&self) -> Option<super::WindowsSkipped> {
        self.view.windows_skipped()
    }
    /// Aggregates increments not applied (see `super::increments`): of a chain this replica
    /// does not hold, or after a record of its own chain was lost.
    pub fn aggregates_increments_skipped(&self) -> u64 {
        self.view.increments_skipped()
    }
    /// How many window sizes `metrics.windows` configures.
    pub fn window_count(&self) -> usize {
        self.partitions.template.window_sizes_ms.len()
    }
    /// A window size (`metrics.windows`), in milliseconds.
    pub fn window_size_ms(&self, size_index: usize) -> i64 {
        self.partitions.template.window_sizes_ms[size_index]
    }
    /// The window of size `size_index` that closes next, as `(its end, the watermark that closes
    /// it)`, both in event time; `None` before there is a watermark. Every impression final at
    /// the watermark `w` is at or before `w - attribution_window`, and every window ending by
    /// then is closed, so the open window holding that instant is the only one with final
    /// impressions; it closes once the watermark passes its end by the attribution window
    /// (`Accumulators::close_windows`). `None` too once the input has ended (the watermark at
    /// the end of time): no window will close again.
    pub fn next_window_close(&self, size_index: usize) -> Option<(EventTime, EventTime)> {
        let watermark = self.watermark().filter(|&w| w != EventTime::MAX)?;
        Some(next_close(watermark, self.partitions.template.attribution_window_ms, self.window_size_ms(size_index)))
    }
    /// Impressions finalized after their window had closed, over every partition.
    pub fn window_late_impressions(&self) -> u64 {
        self.partitions.tasks.tasks().map(|t| t.totals.accumulators.window_late_impressions).sum()
    }
    /// How this engine decodes each input, for readers that peek at messages (replay).
    pub fn decoders(&self) -> &Decoders {
        self.preparer.decoders()
    }
    /// Message and impression counts over every partition held.
    pub fn counters(&self) -> Counters {
        let mut counters = self.partitions.unowned.clone();
        for task in self.partitions.tasks.tasks() {
            counters.merge(&task.totals.counters);
        }
        counters
    }
    /// Each partition held, in partition order, with what its messages added up to and its
    /// engagement outcomes: the exporters label these by partition, so that a partition's
    /// totals leave this replica's exposition when it moves and reappear, carried over, on the
    /// replica that restores it.
    pub fn partition_totals(&self) -> impl Iterator<Item = (i32, &Totals, &EngagementTally)> {
        self.partitions.tasks.iter().map(|(p, task)| (p, &task.totals, &task.join.tally))
    }
    /// Counts of messages that belong to no partition (a negative partition number): they stay
    /// with this engine, as no partition carries them anywhere.
    pub fn unowned_counters(&self) -> &Counters {
        &self.partitions.unowned
    }
    pub fn topic(&self, kind: EventKind) -> &str {
        &self.topics[kind.index()]
    }
    pub fn window_label(&self, size_index: usize) -> &str {
        &self.window_labels[size_index]
    }
    /// Engagement outcomes summed over every shard.
    pub fn engagement_tally(&self) -> EngagementTally {
        self.partitions.tasks.iter().fold(EngagementTally::default(), |mut t, (_, task)| {
            t.merge(&task.join.tally);
            t
        })
    }
    pub fn pending_impressions(&self) -> usize {
        self.partitions.state.pending
    }
    pub fn held_engagements(&self) -> usize {
        self.partitions.state.held
    }
    pub fn state_size(&self) -> StateSize {
        self.partitions.state
    }
    /// How far the watermark trails the wall clock at `now`, in milliseconds.
    pub fn watermark_lag_ms(&self, now: Instant) -> Option<i64> {
        self.watermark().map(|w| self.wall_clock_ms(now).saturating_sub(w))
    }
    /// The least partition watermark, if every owned partition has one: everything before it
    /// is final.
    pub fn watermark(&self) -> Option<EventTime> {
        self.partitions.tasks.least_watermark()
    }
    /// What the callers timed and what rebalances did, for the exposition.
    pub fn telemetry(&self) -> &Telemetry {
        &self.telemetry
    }

    /// Where the callers record what they timed and what rebalances did.
    pub fn telemetry_mut(&mut self) -> &mut Telemetry {
        &mut self.telemetry
    }
}

/// [`Engine::next_window_close`] at watermark `watermark`: windows are `size`-aligned in event
/// time (from the epoch, as `Accumulators` opens them).
fn next_close(watermark: EventTime, attribution: i64, size: i64) -> (EventTime, EventTime) {
    let reach = watermark.saturating_sub(attribution);
    let end = reach.div_euclid(size).saturating_mul(size).saturating_add(size);
    (end, end.saturating_add(attribution))
}

#[cfg(test)]
mod tests {
    use super::next_close;

    #[test]
    fn the_next_window_to_close_holds_the_newest_final_instant() {
        // Watermark 00:01:40, attribution 30 s: final through 00:01:10, in [00:01, 00:02),
        // which closes at watermark 00:02:30.
        assert_eq!(next_close(100_000, 30_000, 60_000), (120_000, 150_000));
        // At the very watermark that closes [00:01, 00:02), the next is [00:02, 00:03).
        assert_eq!(next_close(150_000, 30_000, 60_000), (180_000, 210_000));
        assert_eq!(next_close(149_999, 30_000, 60_000), (120_000, 150_000));
        // Before the epoch, aligned the same way.
        assert_eq!(next_close(-1, 0, 60_000), (0, 0));
    }
}
