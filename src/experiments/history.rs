//! What the experiment page plots over time: each experiment's cumulative figures at every
//! look (see [`super::sequential`]).
//!
//! The looks are the one place where the cumulative figures are fixed in event time, the same
//! on every replica and in replay, so the history is taken there: at each complete window of
//! the first configured size, every variant's mean with its interval, every comparison's
//! difference with its fixed-horizon interval and the running anytime-valid sequence, and every
//! interleaved pair's preference with its running sequence.
//!
//! The history is for looking at, not for deciding: it is kept in memory (a restarted replica's
//! curves start at its first look, while the figures of the current look are always complete),
//! in `f32` (a plot's resolution), and thinned to [`MAX_POINTS`] per experiment by dropping
//! every other older point, so a long experiment keeps its whole span at a coarser step.

use std::collections::BTreeMap;

use super::sequential::Looks;
use super::ExperimentReport;
use crate::time::EventTime;

/// Points kept per experiment: enough for a smooth curve at phone or desktop width.
pub const MAX_POINTS: usize = 120;

/// A figure with its interval: `[value, low, high]`, NaN where the report has none.
pub type Band = [f32; 3];

/// Every experiment's history.
#[derive(Debug, Clone, Default)]
pub struct History {
    /// Per experiment, by name.
    experiments: BTreeMap<String, ExperimentHistory>,
}

/// One experiment's points. Series are named once here and indexed in the points, so a point
/// is a few flat vectors; a variant, comparison or pair that appears later is appended, and the
/// points before it are shorter (absent there).
#[derive(Debug, Clone, Default)]
pub struct ExperimentHistory {
    /// Variant names, in the order first seen (the report's: control first).
    pub variants: Vec<String>,
    /// Metric keys (`mrr`, `ndcg@10`), in layout order.
    pub metrics: Vec<String>,
    /// Compared variants (non-control), in the order first seen.
    pub comparisons: Vec<String>,
    /// Interleaved pairs as `group: ranker vs opponent`, in the order first seen.
    pub pairs: Vec<String>,
    /// Oldest first.
    pub points: Vec<HistoryPoint>,
}

/// The figures at one look.
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryPoint {
    /// The look's number (see [`Looks::count`]).
    pub look: u64,
    /// End of the window the look was taken at.
    pub through: EventTime,
    /// Impressions per variant (index into [`ExperimentHistory::variants`]).
    pub impressions: Vec<u64>,
    /// Per variant, per metric (`variant * metrics + metric`): the mean and its interval.
    pub means: Vec<Band>,
    /// Per comparison, per metric: the difference and its fixed-horizon interval.
    pub differences: Vec<Band>,
    /// Per comparison, per metric: the running anytime-valid sequence of the difference
    /// (`[difference, low, high]`; NaN bounds before a look with figures or once empty).
    pub sequences: Vec<Band>,
    /// Per pair: the preference and its running anytime-valid sequence.
    pub preferences: Vec<Band>,
}

fn band(value: f64, interval: Option<[f64; 2]>) -> Band {
    let [low, high] = interval.unwrap_or([f64::NAN; 2]);
    [value as f32, low as f32, high as f32]
}

/// The index of `name` in `names`, appended when new.
fn index_of(names: &mut Vec<String>, name: &str) -> usize {
    match names.iter().position(|n| n == name) {
        Some(i) => i,
        None => {
            names.push(name.to_string());
            names.len() - 1
        }
    }
}

/// A finite running interval, or none (infinite before a look, inverted once empty).
fn finite(interval: [f64; 2]) -> Option<[f64; 2]> {
    (interval[0].is_finite() && interval[1].is_finite() && interval[0] <= interval[1]).then_some(interval)
}

impl History {
    /// Records the reports of one look (what [`Looks::look`] returned), with the running
    /// figures `looks` holds after it. Experiments the looks dropped (idle) are dropped here.
    pub fn record(&mut self, looks: &Looks, reports: &[ExperimentReport]) {
        let Some(through) = looks.through else { return };
        if reports.is_empty() {
            return;
        }
        self.experiments.retain(|name, _| looks.last_active.contains_key(name));
        for report in reports {
            let history = self.experiments.entry(report.experiment.clone()).or_default();
            history.record(looks, report, through);
        }
    }

    /// One experiment's history, if it was looked at.
    pub fn experiment(&self, name: &str) -> Option<&ExperimentHistory> {
        self.experiments.get(name)
    }
}

impl ExperimentHistory {
    fn record(&mut self, looks: &Looks, report: &ExperimentReport, through: EventTime) {
        if self.metrics.is_empty() {
            if let Some(v) = report.variants.first() {
                self.metrics = v.metrics.iter().map(|(k, _)| k.clone()).collect();
            }
        }
        let metrics = self.metrics.len();
        let mut point = HistoryPoint {
            look: looks.count,
            through,
            impressions: Vec::new(),
            means: Vec::new(),
            differences: Vec::new(),
            sequences: Vec::new(),
            preferences: Vec::new(),
        };
        let absent = [f32::NAN; 3];
        for variant in &report.variants {
            let i = index_of(&mut self.variants, &variant.variant);
            if point.impressions.len() <= i {
                point.impressions.resize(i + 1, 0);
                point.means.resize((i + 1) * metrics, absent);
            }
            point.impressions[i] = variant.impressions;
            for (m, key) in self.metrics.iter().enumerate() {
                if let Some((_, e)) = variant.metrics.iter().find(|(k, _)| k == key) {
                    point.means[i * metrics + m] = band(e.mean, e.ci);
                }
            }
        }
        for comparison in &report.comparisons {
            let c = index_of(&mut self.comparisons, &comparison.variant);
            if point.differences.len() < (c + 1) * metrics {
                point.differences.resize((c + 1) * metrics, absent);
                point.sequences.resize((c + 1) * metrics, absent);
            }
            let running = looks.comparison(&report.experiment, &comparison.variant).unwrap_or_default();
            for (slot, (key, cmp)) in comparison.metrics.iter().enumerate() {
                let Some(m) = self.metrics.iter().position(|k| k == key) else { continue };
                point.differences[c * metrics + m] = band(cmp.difference, cmp.difference_ci);
                let sequence = running.get(slot).and_then(|r| finite(r.figures.difference_cs));
                point.sequences[c * metrics + m] = band(cmp.difference, sequence);
            }
        }
        for il in &report.interleaving {
            let running = looks.interleaving(&report.experiment, &il.variant).unwrap_or_default();
            for (p, pair) in il.pairs.iter().enumerate() {
                let i = index_of(&mut self.pairs, &format!("{}: {} vs {}", il.variant, pair.ranker, pair.opponent));
                if point.preferences.len() <= i {
                    point.preferences.resize(i + 1, absent);
                }
                let sequence = running.get(p).and_then(|r| finite(r.difference_cs));
                point.preferences[i] = band(pair.figures.preference, sequence);
            }
        }
        if self.points.len() >= MAX_POINTS {
            // Every other older point goes; the oldest and the newest stay, so the curve still
            // spans the experiment and ends at the present.
            let newest = self.points.pop();
            let mut i = 0;
            self.points.retain(|_| {
                let keep = i % 2 == 0;
                i += 1;
                keep
            });
            self.points.extend(newest);
        }
        self.points.push(point);
    }

    /// The mean band of `variant` (index) on `metric` (index) at `point`, if it had one.
    pub fn mean(&self, point: &HistoryPoint, variant: usize, metric: usize) -> Option<Band> {
        point.means.get(variant * self.metrics.len() + metric).copied().filter(|b| b[0].is_finite())
    }

    /// The difference and its fixed-horizon interval of `comparison` on `metric` at `point`.
    pub fn difference(&self, point: &HistoryPoint, comparison: usize, metric: usize) -> Option<Band> {
        point.differences.get(comparison * self.metrics.len() + metric).copied().filter(|b| b[0].is_finite())
    }

    /// The difference and its running anytime-valid sequence.
    pub fn sequence(&self, point: &HistoryPoint, comparison: usize, metric: usize) -> Option<Band> {
        point.sequences.get(comparison * self.metrics.len() + metric).copied().filter(|b| b[0].is_finite())
    }
}
