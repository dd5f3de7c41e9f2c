//! The A/B feed: per experiment and window, every variant's estimates, every variant against
//! the experiment's control, and the sample-ratio-mismatch test.
//!
//! Reports are computed on demand from the accumulators' mergeable sums (see
//! [`crate::accumulate::GroupStats`]), so the HTTP API, the Prometheus gauges, the Kafka output
//! topic and `replay --format json` all show the same figures for the same window. The math is
//! in [`crate::stats`]; this module only decides what is compared with what, and, for the
//! cumulative anytime-valid figures, when a look is taken ([`sequential`]).

pub mod breakdown;
pub mod history;
pub mod interleaving;
pub mod judged;
pub mod readout;
pub mod sequential;

use std::collections::BTreeMap;

use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

use crate::accumulate::{GroupStats, GroupTable, Groups, FOLDED};
use crate::config::{AbConfig, AbUnit};
use crate::metrics::MetricLayout;
use crate::stats::sequential::{sequential_difference, sequential_sample_ratio, MixtureBoundary, SSRM_CONCENTRATION};
use crate::stats::{self, Comparison, Estimate};
use crate::time::{format_rfc3339_ms, EventTime};
use interleaving::InterleavingReport;
use judged::JudgedReport;
pub use readout::ReadoutSources;
use sequential::Looks;

/// The label of the cumulative "window" in reports and the API.
pub const CUMULATIVE: &str = "cumulative";

/// Which impressions a report covers.
#[derive(Debug, Clone, Copy)]
pub enum Span<'a> {
    /// Every impression finalized so far.
    Cumulative,
    /// A closed tumbling window: its size label (`5m`), start and size.
    Window { label: &'a str, start: EventTime, size_ms: i64 },
}

/// Everything the A/B feed says about one experiment in one window.
#[derive(Debug, Serialize)]
pub struct ExperimentReport {
    /// Stable identity: `experiment/window/start` (or `experiment/cumulative`), the same on
    /// every replica and after every restart, so consumers of the output topic can deduplicate.
    pub id: String,
    /// The experiment's name, as the impressions carry it.
    pub experiment: String,
    /// The window size (`5m`) or `cumulative`.
    pub window: String,
    /// RFC 3339 bounds of a closed window, `[start, end)`; absent for `cumulative`.
    pub start: Option<String>,
    /// See `start`.
    pub end: Option<String>,
    /// The input partitions whose impressions this process holds (assigned now, or restored and
    /// not yet handed back). Each replica of a consumer group reports on
    /// the impressions of its own partitions; for experiment-wide figures, run the A/B feed in a
    /// group of its own with one replica (see docs/src/ab.md).
    pub partitions: Vec<i32>,
    /// `ab.unit`: what the standard errors treat as independent.
    pub unit: &'static str,
    /// `ab.confidence`: the level of every interval in the report.
    pub confidence: f64,
    /// `ab.correction`: the adjustment of every comparison's `adjusted_p_value` and
    /// `adjusted_always_valid_p_value`.
    pub correction: &'static str,
    /// The variant every other is compared with (`ab.control`, or the experiment's own).
    pub control: String,
    /// Control first, then the other variants by name.
    pub variants: Vec<VariantReport>,
    /// Every non-control variant against the control; empty when the control has no traffic.
    pub comparisons: Vec<ComparisonReport>,
    /// Absent with fewer than two expected variants (or see `notes`).
    pub sample_ratio: Option<SampleRatioReport>,
    /// What the anytime-valid figures (`difference_cs`, `relative_difference_cs`,
    /// `always_valid_p_value`, the split test's `sequential_p_value`) cover.
    pub sequential: SequentialReport,
    /// Why a figure is missing, when one is.
    pub notes: Vec<String>,
    /// Per interleaved group (its variant names the rankers), the outcomes and preferences;
    /// left out when the experiment has none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub interleaving: Vec<InterleavingReport>,
    /// The variants' metrics against the judgment list, over their impressions of judged
    /// queries, compared with the control's; left out without judged impressions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub judged: Option<JudgedReport>,
}

/// Which looks a report's anytime-valid figures combine.
#[derive(Debug, Serialize)]
pub struct SequentialReport {
    /// The method, with its source.
    pub method: &'static str,
    /// `ab.sequential_sample_size`: the impressions (both arms) at which the boundary is tightest.
    pub sample_size: f64,
    /// Looks combined: 1 for a closed window (its own sums), one per complete window of the
    /// first configured size for the cumulative report, counted from the stream's first such
    /// window whatever the experiment's first impression (see [`sequential`]).
    pub looks: u64,
    /// The window size whose complete windows are the looks (`metrics.windows[0]`); a closed
    /// window's own size.
    pub look_window: Option<String>,
    /// RFC 3339 bounds `[from, through)` of the impressions the newest look covered; absent
    /// before the first look. `from` is the stream's first looked-at window, the same for every
    /// experiment: one that started later has no impressions before its own first window.
    pub from: Option<String>,
    /// See `from`.
    pub through: Option<String>,
}

/// The method named in every report.
pub const SEQUENTIAL_METHOD: &str = "asymptotic confidence sequence (Waudby-Smith et al. 2024) = Gaussian-mixture SPRT (Johari et al. 2017); split: Dirichlet-multinomial test (Lindon and Malek 2022)";

/// Where a report's anytime-valid figures come from.
#[derive(Debug, Clone, Copy)]
pub enum SequentialSource<'a> {
    /// The report's own sums, as one look (a closed window; a look being taken).
    ThisLook,
    /// The running figures of the looks so far (the cumulative report).
    Running(&'a Looks),
}

/// One variant's traffic and per-metric estimates.
#[derive(Debug, Serialize)]
pub struct VariantReport {
    /// The variant's name.
    pub variant: String,
    /// Finalized impressions.
    pub impressions: u64,
    /// Of those, impressions with at least one attributed engagement.
    pub engaged: u64,
    /// Non-empty unit buckets, when the unit is a user or session.
    pub unit_buckets: Option<usize>,
    /// Per metric key (`mrr`, `ndcg@10`, ...), in layout order.
    #[serde(serialize_with = "as_map")]
    pub metrics: Vec<(String, Estimate)>,
}

/// One variant against the control.
#[derive(Debug, Serialize)]
pub struct ComparisonReport {
    /// The variant compared.
    pub variant: String,
    /// What it is compared with.
    pub control: String,
    /// Per metric key, in layout order.
    #[serde(serialize_with = "as_map")]
    pub metrics: Vec<(String, Comparison)>,
}

/// The split test: did each variant get the share it should have?
#[derive(Debug, Serialize)]
pub struct SampleRatioReport {
    /// What `observed` counts: `impressions`, or distinct `units` when `ab.unit` is a user or
    /// session (the unit that was randomized; impressions per user vary far beyond chance).
    pub counted: &'static str,
    /// Count per tested variant.
    pub observed: BTreeMap<String, u64>,
    /// The share each was expected to get: `ab.experiments.NAME.split`, or equal.
    pub expected_share: BTreeMap<String, f64>,
    /// Pearson's statistic over the tested variants.
    pub chi_square: f64,
    /// Tested variants - 1.
    pub df: u32,
    /// Small means the split is not what was configured (a sample-ratio mismatch).
    pub p_value: f64,
    /// Always-valid p-value of the sequential split test (Lindon and Malek's Dirichlet-
    /// multinomial test, same counts): safe to watch continuously; for the cumulative report,
    /// the running minimum over the looks.
    pub sequential_p_value: Option<f64>,
    /// Variants with traffic that the expected split does not list (or the folded `other`):
    /// not part of the test, but a split problem of their own.
    pub unexpected_variants: Vec<String>,
}

pub(crate) fn as_map<T: Serialize, S: Serializer>(entries: &[(String, T)], s: S) -> Result<S::Ok, S::Error> {
    let mut map = s.serialize_map(Some(entries.len()))?;
    for (k, v) in entries {
        map.serialize_entry(k, v)?;
    }
    map.end()
}

/// A comparison's anytime-valid figures from its own sums, as one look.
fn this_look(cmp: &mut Comparison, treatment: &Estimate, control: &Estimate, boundary: &MixtureBoundary) {
    if let Some(look) = sequential_difference(treatment, control, boundary) {
        cmp.difference_cs = Some(look.difference_cs);
        cmp.relative_difference_cs = look.relative_difference_cs;
        cmp.always_valid_p_value = Some(look.p_value);
    }
}

/// A comparison's anytime-valid figures from the looks so far.
fn from_looks(cmp: &mut Comparison, looks: Option<&sequential::MetricLooks>) {
    let Some(looks) = looks else { return };
    if looks.figures.looks > 0 {
        cmp.difference_cs = looks.figures.difference_cs();
        cmp.relative_difference_cs = looks.figures.relative_difference_cs();
        cmp.difference_cs_empty = looks.figures.difference_cs_empty();
        cmp.relative_difference_cs_empty = looks.figures.relative_difference_cs_empty();
        cmp.always_valid_p_value = Some(looks.figures.p_value);
    }
    cmp.always_valid_significant_at = looks.always_valid_significant_at.map(named);
    cmp.fixed_horizon_significant_at = looks.fixed_horizon_significant_at.map(named);
}

fn named(point: sequential::LookPoint) -> stats::SignificantAt {
    stats::SignificantAt { look: point.look, impressions: point.impressions, through: format_rfc3339_ms(point.through) }
}

/// One report per experiment with impressions in `table`, sorted by experiment name.
pub fn reports(
    layout: &MetricLayout,
    groups: &Groups,
    table: &GroupTable,
    ab: &AbConfig,
    span: Span<'_>,
    sequential: SequentialSource<'_>,
    sources: ReadoutSources<'_>,
) -> Vec<ExperimentReport> {
    group_by_experiment(groups, table)
        .into_iter()
        .map(|(experiment, variants)| report_over(layout, ab, groups, experiment, variants, span, sequential, sources))
        .collect()
}

/// `table`'s groups by experiment name, with their variant names.
fn group_by_experiment<'a>(
    groups: &'a Groups,
    table: &'a GroupTable,
) -> BTreeMap<&'a str, Vec<(&'a str, &'a GroupStats)>> {
    let mut by_experiment: BTreeMap<&str, Vec<(&str, &GroupStats)>> = BTreeMap::new();
    for (id, stats) in table.iter().filter(|&(id, _)| !groups.is_breakdown(id)) {
        let (experiment, variant) = groups.name(id);
        by_experiment.entry(experiment).or_default().push((variant, stats));
    }
    by_experiment
}

#[allow(clippy::too_many_arguments)]
fn report_over(
    layout: &MetricLayout,
    ab: &AbConfig,
    groups: &Groups,
    experiment: &str,
    mut variants: Vec<(&str, &GroupStats)>,
    span: Span<'_>,
    sequential: SequentialSource<'_>,
    sources: ReadoutSources<'_>,
) -> ExperimentReport {
    // A breakdown's (`breakdown`) settings are its experiment's.
    let configured_as = crate::accumulate::breakdown::experiment_of(experiment);
    let control = ab.control_of(configured_as);
    variants.sort_by_key(|(name, _)| (*name != control, *name));
    let clustered = ab.unit != AbUnit::Impression;
    let estimates: Vec<Vec<(String, Estimate)>> = variants
        .iter()
        .map(|(_, stats)| {
            layout
                .keys()
                .iter()
                .enumerate()
                .map(|(slot, key)| {
                    let clusters = if clustered { stats.cluster_moments(slot) } else { None };
                    (key.name(), stats::estimate(stats.moments(slot), clusters.as_ref(), ab.confidence))
                })
                .collect()
        })
        .collect();
    let boundary = MixtureBoundary::tightest_at(ab.sequential_sample_size, 1.0 - ab.confidence);
    let comparisons = match variants.first() {
        Some((name, _)) if *name == control => variants
            .iter()
            .zip(&estimates)
            .skip(1)
            .map(|((variant, _), treatment)| {
                let running = match sequential {
                    SequentialSource::Running(looks) => Some(looks.comparison(experiment, variant).unwrap_or_default()),
                    SequentialSource::ThisLook => None,
                };
                ComparisonReport {
                    variant: variant.to_string(),
                    control: control.to_string(),
                    metrics: treatment
                        .iter()
                        .zip(&estimates[0])
                        .enumerate()
                        .map(|(slot, ((key, t), (_, c)))| {
                            let mut cmp = stats::compare(t, c, ab.confidence);
                            match running {
                                None => this_look(&mut cmp, t, c, &boundary),
                                Some(running) => from_looks(&mut cmp, running.get(slot)),
                            }
                            (key.clone(), cmp)
                        })
                        .collect(),
                }
            })
            .collect(),
        _ => Vec::new(),
    };
    let mut comparisons = comparisons;
    let mut notes = Vec::new();
    let arms = readout::ExperimentArms { experiment, variants: &variants, estimates: &estimates, boundary: &boundary };
    readout::fill(layout, ab, groups, &arms, sources, &mut comparisons, &mut notes);
    if comparisons.is_empty() && variants.len() > 1 {
        notes.push(format!(
            "no comparisons: the control variant {control:?} has no impressions here (set ab.control or ab.experiments.{configured_as}.control)"
        ));
    }
    let mut sample_ratio = if clustered && variants.iter().any(|(_, s)| s.distinct_units().is_none()) {
        notes.push(format!(
            "no sample-ratio test: a variant has more than ab.max_units = {} distinct units here",
            ab.max_units
        ));
        None
    } else {
        sample_ratio(ab, configured_as, &variants, clustered)
    };
    for comparison in &comparisons {
        for (key, cmp) in &comparison.metrics {
            let empty: Vec<&str> = [
                (cmp.difference_cs_empty, "difference_cs"),
                (cmp.relative_difference_cs_empty, "relative_difference_cs"),
            ]
            .into_iter()
            .filter_map(|(empty, name)| empty.then_some(name))
            .collect();
            if !empty.is_empty() {
                notes.push(format!(
                    "{} - {} {key}: no {}: the looks' confidence sequences have no value in common, so the data contradict one constant effect (it changed over time); the always-valid p-value stays valid",
                    comparison.variant,
                    comparison.control,
                    empty.join(" nor ")
                ));
            }
        }
    }
    if let (Some(test), SequentialSource::Running(looks)) = (&mut sample_ratio, sequential) {
        test.sequential_p_value = looks.sample_ratio.get(experiment).copied();
    }
    let (looks, from, through, look_window) = match (span, sequential) {
        (_, SequentialSource::Running(looks)) => (looks.count, looks.first, looks.through, None),
        (Span::Window { start, size_ms, label }, SequentialSource::ThisLook) => {
            (1, Some(start), Some(start.saturating_add(size_ms)), Some(label.to_string()))
        }
        (Span::Cumulative, SequentialSource::ThisLook) => (1, None, None, None),
    };
    let sequential_report = SequentialReport {
        method: SEQUENTIAL_METHOD,
        sample_size: ab.sequential_sample_size,
        looks,
        look_window,
        from: from.map(format_rfc3339_ms),
        through: through.map(format_rfc3339_ms),
    };
    let (window, start, end, id) = match span {
        Span::Cumulative => (CUMULATIVE.to_string(), None, None, format!("{experiment}/{CUMULATIVE}")),
        Span::Window { label, start, size_ms } => {
            let from = format_rfc3339_ms(start);
            let id = format!("{experiment}/{label}/{from}");
            (label.to_string(), Some(from), Some(format_rfc3339_ms(start.saturating_add(size_ms))), id)
        }
    };
    let mut interleaving: Vec<InterleavingReport> = match layout.interleaving() {
        Some((slots, _)) => variants
            .iter()
            .filter_map(|(variant, stats)| interleaving::report(slots, ab, variant, stats, &boundary))
            .collect(),
        None => Vec::new(),
    };
    if let SequentialSource::Running(looks) = sequential {
        // Interleaving's cumulative figures are running ones too, so they wait for a look alike.
        if looks.count == 0 && !(comparisons.is_empty() && interleaving.is_empty()) {
            notes.push(
                "no anytime-valid figures yet: they are taken at every complete window of the first size of metrics.windows (none is complete, or none is configured)"
                    .to_string(),
            );
        }
        for report in &mut interleaving {
            let running = looks.interleaving(experiment, &report.variant);
            for (k, pair) in report.pairs.iter_mut().enumerate() {
                interleaving::from_looks(&mut pair.figures, running.and_then(|r| r.get(k)));
            }
        }
    }
    let has_control = variants.first().is_some_and(|(name, _)| *name == control);
    let judged = layout.judged().and_then(|block| judged::report(block, ab, &variants, has_control, &boundary));
    ExperimentReport {
        interleaving,
        judged,
        id,
        experiment: experiment.to_string(),
        window,
        start,
        end,
        partitions: Vec::new(),
        unit: ab.unit.label(),
        confidence: ab.confidence,
        correction: ab.correction.label(),
        control: control.to_string(),
        variants: variants
            .iter()
            .zip(estimates)
            .map(|((variant, stats), metrics)| VariantReport {
                variant: variant.to_string(),
                impressions: stats.impressions,
                engaged: stats.engaged,
                unit_buckets: clustered.then(|| stats.bucket_count()),
                metrics,
            })
            .collect(),
        comparisons,
        sample_ratio,
        sequential: sequential_report,
        notes,
    }
}

fn sample_ratio(
    ab: &AbConfig,
    experiment: &str,
    variants: &[(&str, &GroupStats)],
    count_units: bool,
) -> Option<SampleRatioReport> {
    let count = |s: &GroupStats| if count_units { s.distinct_units().unwrap_or(0) as u64 } else { s.impressions };
    let observed_of = |name: &str| variants.iter().find(|(v, _)| *v == name).map_or(0, |(_, s)| count(s));
    let expected: BTreeMap<String, f64> = match ab.split_of(experiment) {
        Some(split) => split.clone(),
        None => {
            let tested: Vec<&str> = variants.iter().map(|(v, _)| *v).filter(|v| *v != FOLDED).collect();
            let share = 1.0 / tested.len() as f64;
            tested.into_iter().map(|v| (v.to_string(), share)).collect()
        }
    };
    let observed: BTreeMap<String, u64> = expected.keys().map(|v| (v.clone(), observed_of(v))).collect();
    let counts: Vec<u64> = observed.values().copied().collect();
    let shares: Vec<f64> = expected.values().copied().collect();
    let test = stats::sample_ratio_mismatch(&counts, &shares)?;
    let sequential_p_value = sequential_sample_ratio(&counts, &shares, SSRM_CONCENTRATION);
    Some(SampleRatioReport {
        sequential_p_value,
        counted: if count_units { "units" } else { "impressions" },
        unexpected_variants: variants
            .iter()
            .filter(|(v, s)| !expected.contains_key(*v) && s.impressions > 0)
            .map(|(v, _)| v.to_string())
            .collect(),
        observed,
        expected_share: expected,
        chi_square: test.chi_square,
        df: test.df,
        p_value: test.p_value,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accumulate::{Accumulators, StatsShape};

    fn layout() -> MetricLayout {
        MetricLayout::new(&[1], 1, 3)
    }

    /// Accumulates `n` impressions per variant of experiment `e`, relevant at rank 1 with
    /// probability given by `rate` (deterministically spread).
    fn table(variants: &[(&str, u64, f64)]) -> (Groups, Accumulators) {
        let layout = layout();
        let mut groups = Groups::default();
        let mut acc = Accumulators::new(StatsShape::plain(layout.len()), &[], 0);
        let mut values = vec![0.0; layout.len()];
        for &(variant, n, rate) in variants {
            let id = groups.intern("e", variant, 0, None);
            for i in 0..n {
                let relevant = ((i as f64 + 0.5) / n as f64) < rate;
                layout.evaluate(&[u8::from(relevant)], &[], &mut values);
                acc.add(id, 0, &values, relevant, 0);
            }
        }
        (groups, acc)
    }

    /// The cumulative reports of `acc`, without the read-out.
    fn cumulative(groups: &Groups, acc: &Accumulators, ab: &AbConfig) -> Vec<ExperimentReport> {
        let sequential = SequentialSource::ThisLook;
        reports(&layout(), groups, &acc.cumulative, ab, Span::Cumulative, sequential, ReadoutSources::default())
    }

    #[test]
    fn compares_every_variant_with_the_control_and_checks_the_split() {
        let (groups, acc) = table(&[("treatment", 1000, 0.6), ("control", 1000, 0.5), ("other", 3, 0.0)]);
        let ab = AbConfig::default();
        let reports = cumulative(&groups, &acc, &ab);
        assert_eq!(reports.len(), 1);
        let r = &reports[0];
        assert_eq!(r.id, "e/cumulative");
        let names: Vec<&str> = r.variants.iter().map(|v| v.variant.as_str()).collect();
        assert_eq!(names, ["control", "other", "treatment"]);
        let vs_treatment = r.comparisons.iter().find(|c| c.variant == "treatment").unwrap();
        let (_, mrr) = vs_treatment.metrics.iter().find(|(k, _)| k == "mrr").unwrap();
        assert!((mrr.difference - 0.1).abs() < 1e-12);
        assert!(mrr.p_value.unwrap() < 1e-4, "{mrr:?}");
        let srm = r.sample_ratio.as_ref().unwrap();
        assert_eq!(srm.unexpected_variants, ["other"]);
        assert!(srm.p_value > 0.99, "1000 vs 1000 is the expected split");
    }

    #[test]
    fn the_eta_counts_the_traffic_of_the_two_arms_compared() {
        // Three variants of 1000, 1000 and 4000 impressions; the window of the current traffic
        // is the same table over 100 s. The ETA of `a` against control rests on their 2000.
        let (groups, acc) = table(&[("control", 1000, 0.5), ("a", 1000, 0.55), ("b", 4000, 0.5)]);
        let ab = AbConfig::default();
        let sources = ReadoutSources { enabled: true, covariates: None, traffic: Some((&acc.cumulative, 100.0)) };
        let sequential = SequentialSource::ThisLook;
        let r = &reports(&layout(), &groups, &acc.cumulative, &ab, Span::Cumulative, sequential, sources)[0];
        let vs_a = r.comparisons.iter().find(|c| c.variant == "a").unwrap();
        let (_, mrr) = vs_a.metrics.iter().find(|(k, _)| k == "mrr").unwrap();
        let power = mrr.power.unwrap();
        let needed = power.impressions_needed.unwrap();
        let expected = (needed - 2000.0) / (2000.0 / 100.0);
        assert!((power.eta_seconds.unwrap() - expected).abs() < 1e-6 * expected, "{power:?}");
        assert!(mrr.bayesian.is_some() && mrr.adjusted_p_value == mrr.p_value, "{mrr:?}");
    }

    #[test]
    fn configured_split_and_control_are_used() {
        let (groups, acc) = table(&[("a", 550, 0.5), ("b", 450, 0.5)]);
        let mut ab = AbConfig::default();
        ab.experiments.insert(
            "e".into(),
            crate::config::AbExperimentConfig {
                control: Some("b".into()),
                split: [("a".to_string(), 0.55), ("b".to_string(), 0.45)].into_iter().collect(),
            },
        );
        let r = &cumulative(&groups, &acc, &ab)[0];
        assert_eq!((r.control.as_str(), r.variants[0].variant.as_str()), ("b", "b"));
        assert!(r.sample_ratio.as_ref().unwrap().chi_square < 1e-9, "exactly the configured split");
        // Against the default equal split, 550/450 gives chi-square 10, p = 0.0016.
        let r = &cumulative(&groups, &acc, &AbConfig::default())[0];
        assert!(r.comparisons.is_empty(), "no variant is called control");
        assert!(r.sample_ratio.as_ref().unwrap().p_value < 0.01);
    }
}
