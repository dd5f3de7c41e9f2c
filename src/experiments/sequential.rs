//! The looks of the cumulative anytime-valid figures: where a look happens and what the looks
//! so far add up to.
//!
//! A confidence sequence's running intersection and an always-valid p-value's running minimum
//! depend on the looks taken, not only on the sums at the end. For replicas, restarts and replay
//! to agree to the last bit, the looks are fixed in event time: one at every complete window of
//! the first configured size (`metrics.windows[0]`), over the sums of every complete window of
//! that size so far (the prefix). Each look computes the same report as the cumulative one, over
//! the prefix, and folds its sequential figures into [`RunningFigures`]. The prefix is made of
//! complete windows, so it leaves out what windows leave out: impressions finalized after their
//! window closed (`rankpulse_window_late_impressions_total`) and the window still open.
//!
//! The same looks fold the interleaving preferences' sequences and p-values (per experiment,
//! interleaved group and pair of rankers), so the cumulative interleaving figures are running
//! ones too.
//!
//! Look numbers count the stream's complete windows, the same windows for every experiment: an
//! experiment that starts late has its first figures at its first complete window with
//! traffic, and the looks before it fold nothing. The boundary's time is the impressions `n`,
//! not the look number, so this changes no figure; only `look` in the `*_significant_at`
//! points, and `sequential.looks`, count from the stream's first window.
//!
//! With the experiment-wide view on (serve), every replica folds the same complete windows;
//! the looks also travel in partition 0's aggregates record (whole in a base, as their change
//! in an increment: [`LooksChange`]), so a replica that starts late, or restarts, takes over
//! the looks so far instead of starting its own.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{report_over, ExperimentReport, SequentialSource, Span};
use crate::accumulate::{ClosedWindow, GroupTable, Groups};
use crate::checkpoint::Inconsistency;
use crate::config::AbConfig;
use crate::ids::GroupId;
use crate::interleaving::MAX_RANKERS;
use crate::metrics::MetricLayout;
use crate::stats::sequential::RunningFigures;
use crate::time::EventTime;

/// What the looks showed on one metric of one comparison.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct MetricLooks {
    /// The running figures.
    pub figures: RunningFigures,
    /// The first look at which the always-valid p-value was below α (`1 - ab.confidence`).
    pub always_valid_significant_at: Option<LookPoint>,
    /// The first look at which Welch's fixed-horizon p-value was below α: where watching it
    /// would have stopped. Kept to show, on real traffic, how much earlier that is and why it
    /// is not to be trusted.
    pub fixed_horizon_significant_at: Option<LookPoint>,
}

/// A look: its number, the impressions of both arms, the end of its window.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LookPoint {
    /// 1 for the first look.
    pub look: u64,
    /// Impressions of both arms at the look.
    pub impressions: u64,
    /// End of the window the look was taken at.
    pub through: EventTime,
}

/// The looks so far (see the module documentation).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Looks {
    /// Start of the first window looked at; `None` before the first look. Of two histories of
    /// the same experiments, the one that started earlier saw more.
    pub first: Option<EventTime>,
    /// End of the newest window looked at: a window starting before it was looked at already.
    pub through: Option<EventTime>,
    /// Looks taken.
    pub count: u64,
    /// Every looked-at window's sums, per group: the cumulative sums as of the newest look.
    pub prefix: GroupTable,
    /// Per experiment, per non-control variant, per metric slot: what the looks showed.
    pub comparisons: BTreeMap<String, BTreeMap<String, Vec<MetricLooks>>>,
    /// Per experiment: the running minimum of the sequential split test's p-value.
    pub sample_ratio: BTreeMap<String, f64>,
    /// `[ab.confidence, ab.sequential_sample_size]` the figures were computed with: when either
    /// changes (a restart with another configuration, or looks taken over from a replica
    /// configured otherwise), the running figures start again from the next look, since
    /// intervals of two boundaries do not intersect into one; the sums are kept.
    pub tuning: [f64; 2],
    /// Per experiment: the end of the newest looked-at window it had impressions in. An
    /// experiment idle for `labels.idle_expiry` is dropped from the looks (it ended; if it
    /// comes back, its looks start anew), by this event-time rule rather than by the label
    /// table's retirement, which differs between replicas.
    pub last_active: BTreeMap<String, EventTime>,
    /// Per experiment, per interleaved group (its variant, `"a vs b"`), per pair of rankers in
    /// the report's order: what the looks showed of the preference. Last, so that a record
    /// without it (written before it existed) is a prefix of one with it: see
    /// [`LooksBeforeInterleaving`].
    pub interleaving: BTreeMap<String, BTreeMap<String, Vec<RunningFigures>>>,
}

/// [`Looks`] as written before the interleaving figures were folded, read from the aggregates
/// record of a replica not yet upgraded. Taken over, its interleaving figures start at the next
/// look: a running intersection over the looks from a fixed one on is as valid as over all.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct LooksBeforeInterleaving {
    /// See [`Looks::first`].
    pub first: Option<EventTime>,
    /// See [`Looks::through`].
    pub through: Option<EventTime>,
    /// See [`Looks::count`].
    pub count: u64,
    /// See [`Looks::prefix`].
    pub prefix: GroupTable,
    /// See [`Looks::comparisons`].
    pub comparisons: BTreeMap<String, BTreeMap<String, Vec<MetricLooks>>>,
    /// See [`Looks::sample_ratio`].
    pub sample_ratio: BTreeMap<String, f64>,
    /// See [`Looks::tuning`].
    pub tuning: [f64; 2],
    /// See [`Looks::last_active`].
    pub last_active: BTreeMap<String, EventTime>,
}

impl From<LooksBeforeInterleaving> for Looks {
    fn from(old: LooksBeforeInterleaving) -> Self {
        Looks {
            first: old.first,
            through: old.through,
            count: old.count,
            prefix: old.prefix,
            comparisons: old.comparisons,
            sample_ratio: old.sample_ratio,
            tuning: old.tuning,
            last_active: old.last_active,
            interleaving: BTreeMap::new(),
        }
    }
}

impl Looks {
    /// Takes a look at a complete window if it is of the look size (the first of
    /// `window_sizes_ms`, `metrics.windows`); a window of another size, or one the looks are
    /// already past (it can only be one handed out again), is ignored.
    ///
    /// Returns each experiment's report at this look (its own sequential figures; the running
    /// ones are in `self`), which the page's history keeps (see [`super::history`]); empty when
    /// no look was taken.
    pub fn look(
        &mut self,
        window: &ClosedWindow,
        window_sizes_ms: &[i64],
        layout: &MetricLayout,
        groups: &Groups,
        ab: &AbConfig,
    ) -> Vec<ExperimentReport> {
        let mut reports = Vec::new();
        let (Some(&size_ms), 0) = (window_sizes_ms.first(), window.size_index) else { return reports };
        if self.through.is_some_and(|through| window.start < through) {
            return reports;
        }
        let tuning = [ab.confidence, ab.sequential_sample_size];
        if self.tuning != tuning {
            self.comparisons.clear();
            self.sample_ratio.clear();
            self.interleaving.clear();
            self.tuning = tuning;
        }
        self.prefix.merge(&window.groups);
        self.first.get_or_insert(window.start);
        let end = window.start.saturating_add(size_ms);
        self.through = Some(end);
        self.count += 1;
        for (group, _) in window.groups.iter() {
            self.last_active.insert(groups.name(group).0.to_string(), end);
        }
        self.drop_idle(end, groups);
        let alpha = 1.0 - ab.confidence;
        for (experiment, variants) in super::group_by_experiment(groups, &self.prefix) {
            let report = report_over(
                layout,
                ab,
                groups,
                experiment,
                variants,
                Span::Cumulative,
                SequentialSource::ThisLook,
                super::ReadoutSources::default(),
            );
            let impressions =
                |variant: &str| report.variants.iter().find(|v| v.variant == variant).map_or(0, |v| v.impressions);
            for comparison in &report.comparisons {
                let point = LookPoint {
                    look: self.count,
                    impressions: impressions(&comparison.variant) + impressions(&comparison.control),
                    through: end,
                };
                let running = self
                    .comparisons
                    .entry(report.experiment.clone())
                    .or_default()
                    .entry(comparison.variant.clone())
                    .or_insert_with(|| vec![MetricLooks::default(); comparison.metrics.len()]);
                for (metric, (_, cmp)) in running.iter_mut().zip(&comparison.metrics) {
                    if let Some(look) = cmp.sequential_look() {
                        metric.figures.look(&look);
                    }
                    if metric.always_valid_significant_at.is_none() && metric.figures.p_value < alpha {
                        metric.always_valid_significant_at = Some(point);
                    }
                    if metric.fixed_horizon_significant_at.is_none() && cmp.p_value.is_some_and(|p| p < alpha) {
                        metric.fixed_horizon_significant_at = Some(point);
                    }
                }
            }
            for il in &report.interleaving {
                let running = self
                    .interleaving
                    .entry(report.experiment.clone())
                    .or_default()
                    .entry(il.variant.clone())
                    .or_default();
                if running.len() != il.pairs.len() {
                    // Only a record of another configuration gets here; its figures are of
                    // other pairs.
                    *running = vec![RunningFigures::default(); il.pairs.len()];
                }
                for (figures, pair) in running.iter_mut().zip(&il.pairs) {
                    if let Some(look) = super::interleaving::sequential_look(&pair.figures) {
                        figures.look(&look);
                    }
                }
            }
            if let Some(p) = report.sample_ratio.as_ref().and_then(|s| s.sequential_p_value) {
                let running = self.sample_ratio.entry(report.experiment.clone()).or_insert(1.0);
                *running = running.min(p);
            }
            reports.push(report);
        }
        reports
    }

    /// What the looks showed of `variant` against its control in `experiment`, per metric slot.
    pub fn comparison(&self, experiment: &str, variant: &str) -> Option<&[MetricLooks]> {
        self.comparisons.get(experiment)?.get(variant).map(Vec::as_slice)
    }

    /// What the looks showed of the interleaved group `variant` in `experiment`, per pair of
    /// rankers in the report's order.
    pub fn interleaving(&self, experiment: &str, variant: &str) -> Option<&[RunningFigures]> {
        self.interleaving.get(experiment)?.get(variant).map(Vec::as_slice)
    }

    /// Drops the experiments idle for `labels.idle_expiry` at event time `now`.
    fn drop_idle(&mut self, now: EventTime, groups: &Groups) {
        let expiry = groups.limits().idle_expiry_ms;
        let idle: Vec<String> = self
            .last_active
            .iter()
            .filter(|(_, &last)| last.saturating_add(expiry) < now)
            .map(|(experiment, _)| experiment.clone())
            .collect();
        for experiment in idle {
            let ids: Vec<GroupId> =
                self.prefix.iter().filter(|(id, _)| groups.name(*id).0 == experiment).map(|(id, _)| id).collect();
            for id in ids {
                self.prefix.remove(id);
            }
            self.comparisons.remove(&experiment);
            self.sample_ratio.remove(&experiment);
            self.interleaving.remove(&experiment);
            self.last_active.remove(&experiment);
        }
    }

    /// Whether `other` saw more than these looks: it started earlier, or as early and went
    /// further. A replica adopts such looks from partition 0's aggregates record.
    pub fn is_behind(&self, other: &Looks) -> bool {
        self.position().is_behind(&other.position())
    }

    /// Checks looks read from an aggregates record: the prefix against the configuration's
    /// shape, figures per metric of the layout.
    pub fn check(&self, shape: crate::accumulate::StatsShape, metrics: usize) -> Result<(), Inconsistency> {
        self.prefix.check(shape)?;
        check_figures(&self.comparisons, &self.interleaving, self.count, metrics)
    }

    /// Where the looks stand.
    pub fn position(&self) -> LooksPosition {
        LooksPosition { first: self.first, through: self.through, count: self.count }
    }

    /// These looks as their change since the looks at `since`, whose prefix was `prefix_then`
    /// (what an aggregates increment carries); `None` if the prefix is not `prefix_then` grown
    /// (the looks started again: a base carries them whole).
    pub fn change_since<'a>(&'a self, since: LooksPosition, prefix_then: &GroupTable) -> Option<LooksChangeRef<'a>> {
        Some(LooksChangeRef {
            since,
            prefix: self.prefix.changes_since(prefix_then)?,
            first: self.first,
            through: self.through,
            count: self.count,
            comparisons: &self.comparisons,
            sample_ratio: &self.sample_ratio,
            tuning: self.tuning,
            last_active: &self.last_active,
            interleaving: &self.interleaving,
        })
    }
}

/// The figures' checks of [`Looks::check`] and [`LooksChange::check`]: per metric of the
/// layout, at most the pairs of [`MAX_RANKERS`] rankers, a count a record can hold.
fn check_figures(
    comparisons: &BTreeMap<String, BTreeMap<String, Vec<MetricLooks>>>,
    interleaving: &BTreeMap<String, BTreeMap<String, Vec<RunningFigures>>>,
    count: u64,
    metrics: usize,
) -> Result<(), Inconsistency> {
    for variants in comparisons.values() {
        if let Some(figures) = variants.values().find(|figures| figures.len() != metrics) {
            return Err(Inconsistency::Shape {
                what: "metrics with figures in a look's variant",
                found: figures.len(),
                expected: metrics,
            });
        }
    }
    let most_pairs = MAX_RANKERS * (MAX_RANKERS - 1) / 2;
    for groups in interleaving.values() {
        if let Some(pairs) = groups.values().find(|pairs| pairs.len() > most_pairs) {
            return Err(Inconsistency::TooMany {
                what: "ranker pairs with interleaving figures in looks",
                found: pairs.len(),
                limit: "the pairs of MAX_RANKERS rankers",
                max: most_pairs,
            });
        }
    }
    crate::checkpoint::check_count("looks", count)
}

/// Where looks stand: the first window looked at, the end of the newest, how many. Two
/// replicas' looks at one position looked at the same complete windows, so they hold the
/// same prefix (its sums are exact in any order) and the same figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LooksPosition {
    /// [`Looks::first`].
    pub first: Option<EventTime>,
    /// [`Looks::through`].
    pub through: Option<EventTime>,
    /// [`Looks::count`].
    pub count: u64,
}

impl LooksPosition {
    /// Whether looks at `other` saw more: see [`Looks::is_behind`].
    pub fn is_behind(&self, other: &LooksPosition) -> bool {
        match (self.first, other.first) {
            (_, None) => false,
            (None, Some(_)) => true,
            (Some(ours), Some(theirs)) => theirs < ours || (theirs == ours && other.through > self.through),
        }
    }
}

/// Looks as partition 0's aggregates increments carry them: the prefix as its change since
/// the looks the record before carried (at `since`), the figures whole (a few per experiment,
/// variant and metric). The prefix holds every unit seen, so carried whole each time a window
/// completed it grew with the hours the replica ran. Borrowed when written; fields as
/// [`Looks`]' unless said.
#[derive(Serialize)]
pub struct LooksChangeRef<'a> {
    /// The position of the looks the change is taken against.
    pub since: LooksPosition,
    /// The prefix's change since then.
    pub prefix: crate::accumulate::TableChange,
    first: Option<EventTime>,
    through: Option<EventTime>,
    count: u64,
    comparisons: &'a BTreeMap<String, BTreeMap<String, Vec<MetricLooks>>>,
    sample_ratio: &'a BTreeMap<String, f64>,
    tuning: [f64; 2],
    last_active: &'a BTreeMap<String, EventTime>,
    interleaving: &'a BTreeMap<String, BTreeMap<String, Vec<RunningFigures>>>,
}

/// [`LooksChangeRef`], read back.
#[derive(Debug, Deserialize)]
#[cfg_attr(test, derive(Serialize))]
pub struct LooksChange {
    /// The position of the looks the change applies to.
    pub since: LooksPosition,
    /// The prefix's change: renumbered and widened by the reader like any table it reads.
    pub prefix: crate::accumulate::TableChange,
    first: Option<EventTime>,
    through: Option<EventTime>,
    count: u64,
    comparisons: BTreeMap<String, BTreeMap<String, Vec<MetricLooks>>>,
    sample_ratio: BTreeMap<String, f64>,
    tuning: [f64; 2],
    last_active: BTreeMap<String, EventTime>,
    interleaving: BTreeMap<String, BTreeMap<String, Vec<RunningFigures>>>,
}

impl LooksChange {
    /// Checks a change read back: its prefix's groups against the shape, the figures as
    /// [`Looks::check`] does. The prefix it makes is checked once applied.
    pub fn check(&self, shape: crate::accumulate::StatsShape, metrics: usize) -> Result<(), Inconsistency> {
        self.prefix.changed.check(shape)?;
        check_figures(&self.comparisons, &self.interleaving, self.count, metrics)
    }

    /// The position of the looks it makes.
    pub fn position(&self) -> LooksPosition {
        LooksPosition { first: self.first, through: self.through, count: self.count }
    }

    /// Makes `looks` the writer's, if they are behind them and stand where the change was
    /// taken (then their prefix is the one it was taken against); `false`, leaving them be,
    /// otherwise: looks ahead need nothing, and looks elsewhere behind take the writer's over
    /// from its next whole record, or look at the windows themselves as they complete.
    ///
    /// The resulting prefix is checked against `shape`: a change that takes it past the
    /// reader's limits (a writer configured otherwise, or forged bytes) leaves the reader
    /// with no looks, refused, until a whole record's looks (its own prefix is no longer
    /// what any writer's is).
    pub fn apply_to(self, looks: &mut Looks, shape: crate::accumulate::StatsShape) -> Result<bool, Inconsistency> {
        let held = looks.position();
        if !held.is_behind(&self.position()) || held != self.since {
            return Ok(false);
        }
        looks.prefix.apply_change(&self.prefix);
        if let Err(e) = looks.prefix.check(shape) {
            *looks = Looks::default();
            return Err(e);
        }
        let LooksChange { first, through, count, comparisons, sample_ratio, tuning, last_active, interleaving, .. } =
            self;
        let prefix = std::mem::take(&mut looks.prefix);
        *looks = Looks { first, through, count, prefix, comparisons, sample_ratio, tuning, last_active, interleaving };
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accumulate::{Accumulators, LabelLimits, StatsShape};
    use crate::stats::sequential::{sequential_difference, MixtureBoundary};
    use crate::stats::{estimate, Estimate};

    const MINUTE: i64 = 60_000;

    fn layout() -> MetricLayout {
        MetricLayout::new(&[1], 1, 3)
    }

    /// A closed 1-minute window of experiment `e` starting at minute `minute`: per variant,
    /// `n` impressions relevant at rank 1 at `rate` (deterministically spread).
    fn window(groups: &mut Groups, minute: i64, variants: &[(&str, u64, f64)]) -> ClosedWindow {
        let layout = layout();
        let mut acc = Accumulators::new(StatsShape::plain(layout.len()), &[], 0);
        let mut values = vec![0.0; layout.len()];
        for &(variant, n, rate) in variants {
            let id = groups.intern("e", variant, minute * MINUTE, None);
            for i in 0..n {
                let relevant = ((i as f64 * 0.618 + minute as f64 * 0.3) % 1.0) < rate;
                layout.evaluate(&[u8::from(relevant)], &[], &mut values);
                acc.add(id, 0, &values, relevant, 0);
            }
        }
        ClosedWindow { size_index: 0, start: minute * MINUTE, groups: acc.cumulative }
    }

    fn mrr(groups: &Groups, table: &GroupTable, variant: &str) -> Estimate {
        let (_, stats) = table.iter().find(|(id, _)| groups.name(*id).1 == variant).unwrap();
        estimate(stats.moments(0), None, 0.95)
    }

    #[test]
    fn the_history_keeps_each_looks_figures_and_thins_to_its_bound() {
        use crate::experiments::history::{History, MAX_POINTS};
        let (layout, ab) = (layout(), AbConfig::default());
        let mut groups = Groups::default();
        let (mut looks, mut history) = (Looks::default(), History::default());
        // The treatment arrives at the third look: its series start there.
        for m in 0..2 {
            let w = window(&mut groups, m, &[("control", 100, 0.5)]);
            let reports = looks.look(&w, &[MINUTE], &layout, &groups, &ab);
            history.record(&looks, &reports);
            let again = looks.look(&w, &[MINUTE], &layout, &groups, &ab);
            assert!(again.is_empty(), "a window looked at again is no look");
            history.record(&looks, &again);
        }
        let w = window(&mut groups, 2, &[("control", 100, 0.5), ("treatment", 120, 0.7)]);
        let reports = looks.look(&w, &[MINUTE], &layout, &groups, &ab);
        history.record(&looks, &reports);
        let h = history.experiment("e").unwrap();
        assert_eq!((h.variants.join(","), h.comparisons.join(",")), ("control,treatment".into(), "treatment".into()));
        assert_eq!(h.points.len(), 3);
        assert_eq!(h.points[0].impressions, vec![100]);
        assert_eq!(h.points[2].impressions, vec![300, 120]);
        assert_eq!(h.points.iter().map(|p| p.through).collect::<Vec<_>>(), [MINUTE, 2 * MINUTE, 3 * MINUTE]);
        // The mean is the report's at that look; the sequence is the running one.
        let report = &reports[0];
        let mean = report.variants.iter().find(|v| v.variant == "treatment").unwrap().metrics[0].1.mean;
        assert_eq!(h.mean(&h.points[2], 1, 0).unwrap()[0], mean as f32);
        assert!(h.difference(&h.points[1], 0, 0).is_none(), "no comparison before the treatment");
        let running = looks.comparison("e", "treatment").unwrap()[0].figures.difference_cs;
        let band = h.sequence(&h.points[2], 0, 0).unwrap();
        assert_eq!([band[1], band[2]], [running[0] as f32, running[1] as f32]);
        // A long experiment keeps its whole span, thinned, and always its newest look.
        for m in 3..(MAX_POINTS as i64 + 40) {
            let w = window(&mut groups, m, &[("control", 10, 0.5), ("treatment", 10, 0.6)]);
            let reports = looks.look(&w, &[MINUTE], &layout, &groups, &ab);
            history.record(&looks, &reports);
        }
        let h = history.experiment("e").unwrap();
        assert!(h.points.len() <= MAX_POINTS && h.points.len() > MAX_POINTS / 2, "{}", h.points.len());
        assert_eq!(h.points.first().unwrap().through, MINUTE);
        assert_eq!(h.points.last().unwrap().through, (MAX_POINTS as i64 + 40) * MINUTE);
        assert!(h.points.windows(2).all(|p| p[0].through < p[1].through));
    }

    #[test]
    fn each_look_is_the_prefix_report_and_the_figures_only_narrow() {
        let (layout, ab) = (layout(), AbConfig::default());
        let mut groups = Groups::default();
        let windows: Vec<ClosedWindow> = (0..6)
            .map(|m| window(&mut groups, m, &[("control", 200 + 10 * m as u64, 0.5), ("treatment", 210, 0.56)]))
            .collect();
        let mut looks = Looks::default();
        let boundary = MixtureBoundary::tightest_at(ab.sequential_sample_size, 1.0 - ab.confidence);
        let (mut prefix, mut want) = (GroupTable::default(), RunningFigures::default());
        for w in &windows {
            looks.look(w, &[MINUTE], &layout, &groups, &ab);
            prefix.merge(&w.groups);
            let look = sequential_difference(
                &mrr(&groups, &prefix, "treatment"),
                &mrr(&groups, &prefix, "control"),
                &boundary,
            );
            want.look(&look.unwrap());
            assert_eq!(looks.comparison("e", "treatment").unwrap()[0].figures, want);
        }
        assert_eq!((looks.count, looks.first, looks.through), (6, Some(0), Some(6 * MINUTE)));
        assert!(looks.sample_ratio["e"] <= 1.0);
        // A window handed out again is not looked at twice.
        let before = looks.clone();
        looks.look(&windows[3], &[MINUTE], &layout, &groups, &ab);
        assert_eq!(looks, before);
    }

    #[test]
    fn another_tuning_starts_the_figures_again() {
        let (layout, mut ab) = (layout(), AbConfig::default());
        let mut groups = Groups::default();
        let mut looks = Looks::default();
        for m in 0..3 {
            let w = window(&mut groups, m, &[("control", 300, 0.5), ("treatment", 300, 0.6)]);
            looks.look(&w, &[MINUTE], &layout, &groups, &ab);
        }
        assert_eq!(looks.comparison("e", "treatment").unwrap()[0].figures.looks, 3);
        ab.sequential_sample_size = 50_000.0;
        let w = window(&mut groups, 3, &[("control", 300, 0.5), ("treatment", 300, 0.6)]);
        looks.look(&w, &[MINUTE], &layout, &groups, &ab);
        assert_eq!(looks.comparison("e", "treatment").unwrap()[0].figures.looks, 1);
        assert_eq!(looks.count, 4, "the sums are kept");
    }

    #[test]
    fn an_idle_experiment_leaves_the_looks() {
        let (layout, ab) = (layout(), AbConfig::default());
        let mut groups = Groups::new(LabelLimits { idle_expiry_ms: 10 * MINUTE, ..LabelLimits::unlimited() });
        let mut looks = Looks::default();
        looks.look(
            &window(&mut groups, 0, &[("control", 50, 0.5), ("treatment", 50, 0.5)]),
            &[MINUTE],
            &layout,
            &groups,
            &ab,
        );
        assert!(looks.comparison("e", "treatment").is_some());
        let other = ClosedWindow { size_index: 0, start: 30 * MINUTE, groups: GroupTable::default() };
        looks.look(&other, &[MINUTE], &layout, &groups, &ab);
        assert!(looks.comparison("e", "treatment").is_none() && looks.prefix.iter().next().is_none());
    }

    #[test]
    fn looks_read_back_with_figures_of_another_metric_count_are_refused() {
        let layout = layout();
        let mut looks = Looks::default();
        looks.comparisons.entry("e".into()).or_default().insert("treatment".into(), Vec::new());
        let refused = looks.check(StatsShape::plain(layout.len()), layout.len()).unwrap_err();
        assert!(matches!(refused, Inconsistency::Shape { found: 0, .. }), "{refused}");
    }

    #[test]
    fn interleaving_figures_start_again_with_another_tuning_and_are_checked() {
        let (layout, mut ab) = (layout(), AbConfig::default());
        let mut groups = Groups::default();
        let mut looks = Looks::default();
        looks.look(&window(&mut groups, 0, &[("control", 50, 0.5)]), &[MINUTE], &layout, &groups, &ab);
        looks.interleaving.entry("duel".into()).or_default().insert("a vs b".into(), vec![RunningFigures::default()]);
        assert_eq!(looks.check(StatsShape::plain(layout.len()), layout.len()), Ok(()));
        let most = MAX_RANKERS * (MAX_RANKERS - 1) / 2;
        looks.interleaving.get_mut("duel").unwrap().insert("x".into(), vec![RunningFigures::default(); most + 1]);
        let refused = looks.check(StatsShape::plain(layout.len()), layout.len()).unwrap_err();
        let pairs = Inconsistency::TooMany {
            what: "ranker pairs with interleaving figures in looks",
            found: most + 1,
            limit: "the pairs of MAX_RANKERS rankers",
            max: most,
        };
        assert_eq!(refused, pairs);
        ab.confidence = 0.9;
        looks.look(&window(&mut groups, 1, &[("control", 50, 0.5)]), &[MINUTE], &layout, &groups, &ab);
        assert!(looks.interleaving.is_empty(), "intervals of two boundaries do not intersect into one");
    }

    #[test]
    fn longer_histories_win() {
        let at = |first, through| Looks { first: Some(first), through: Some(through), ..Looks::default() };
        assert!(Looks::default().is_behind(&at(0, MINUTE)));
        assert!(at(MINUTE, 5 * MINUTE).is_behind(&at(0, 2 * MINUTE)), "an earlier start saw more");
        assert!(at(0, MINUTE).is_behind(&at(0, 2 * MINUTE)));
        assert!(!at(0, 2 * MINUTE).is_behind(&at(0, 2 * MINUTE)));
        assert!(!at(0, MINUTE).is_behind(&Looks::default()));
    }
}
