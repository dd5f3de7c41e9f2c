//! Where an effect lives: an experiment's report per value of each dimension (`ab.dimensions`),
//! whether the effect differs between the values, and which values' effects survive the
//! false-discovery control across them.
//!
//! Each value's sums are a breakdown group's (`crate::accumulate::breakdown`), so its report
//! is the experiment-wide report's code over them: means, differences, intervals, p-values, the
//! anytime-valid figures, CUPED and the rest. Across the values of one dimension, per compared
//! variant and metric:
//!
//! * heterogeneity: Cochran's Q over the values' Welch differences and their variances
//!   ([`crate::stats::heterogeneity`]), a test that the effect is not one effect;
//! * q-values: Benjamini and Hochberg's adjustment of the values' Welch p-values, so that the
//!   values flagged at `1 − ab.confidence` hold at most that share of false discoveries
//!   ([`crate::stats::multiple`]).

use std::collections::BTreeMap;

use serde::Serialize;

use super::{
    as_map, report_over, ComparisonReport, ExperimentReport, ReadoutSources, SequentialSource, Span, CUMULATIVE,
};
use crate::accumulate::{breakdown, GroupStats, GroupTable, Groups, FOLDED};
use crate::config::AbConfig;
use crate::metrics::{MetricKind, MetricLayout};
use crate::stats::heterogeneity::{self, Heterogeneity};
use crate::stats::multiple::benjamini_hochberg;

/// An experiment broken down by every dimension it has sums for.
#[derive(Debug, Serialize)]
pub struct DimensionsReport {
    /// The experiment's name.
    pub experiment: String,
    /// `cumulative`: every impression finalized so far.
    pub window: String,
    /// The input partitions whose impressions this process holds (see [`ExperimentReport`]).
    pub partitions: Vec<i32>,
    /// `ab.confidence`: every interval's level; `1 − confidence` is the level the
    /// heterogeneity verdicts and the flagged values are at.
    pub confidence: f64,
    /// The variant every other is compared with.
    pub control: String,
    /// Per dimension, in `ab.dimensions` order (then any other kept from before, by name);
    /// `query` apart.
    pub dimensions: Vec<DimensionReport>,
    /// The `query` dimension (`ab.dimensions` naming `query`): per query, as for a dimension's
    /// values; left out without it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queries: Option<DimensionReport>,
}

/// One dimension's values.
#[derive(Debug, Serialize)]
pub struct DimensionReport {
    /// The impression field.
    pub dimension: String,
    /// Impressions over every value (the experiment's, but for any that arrived before the
    /// dimension was configured).
    pub impressions: u64,
    /// Values beyond `ab.max_dimension_values` are together under `other`; this many of the
    /// dimension's impressions are there.
    pub other_impressions: u64,
    /// The values, busiest first.
    pub values: Vec<ValueReport>,
    /// Per compared variant and metric (in layout order): does the effect differ between the
    /// values, and which values' effects stand out.
    pub heterogeneity: Vec<HeterogeneityReport>,
    /// Per compared variant, the values whose treatment lost the most engaged impressions
    /// against the control's rate (the traffic-weighted view: a small loss on a busy value
    /// before a large one on a rare value), at most [`MOST_LOST`], largest first.
    pub engagement_lost: Vec<EngagementLost>,
}

/// How many values [`DimensionReport::engagement_lost`] lists per variant.
pub const MOST_LOST: usize = 20;

/// A value's loss of engaged impressions in one variant.
#[derive(Debug, Serialize)]
pub struct EngagementLost {
    /// The variant.
    pub variant: String,
    /// The value.
    pub value: String,
    /// `(engaged_c / n_c − engaged_t / n_t) × n_t`: the engaged impressions the variant would
    /// have had at the control's rate, less those it had.
    pub engaged_impressions_lost: f64,
    /// The variant's impressions of the value.
    pub impressions: u64,
}

/// One value of a dimension.
#[derive(Debug, Serialize)]
pub struct ValueReport {
    /// The value (`none`: impressions without the field; `other`: values beyond the limit).
    pub value: String,
    /// Its impressions, every variant.
    pub impressions: u64,
    /// Its share of the dimension's impressions.
    pub share: f64,
    /// Per compared variant, per metric: the Welch p-value of this value's comparison adjusted
    /// by Benjamini and Hochberg across the dimension's values.
    pub q_values: BTreeMap<String, QValues>,
    /// The experiment's report over this value's impressions.
    pub report: ExperimentReport,
}

/// Per metric key, a q-value (absent where the comparison has no p-value).
#[derive(Debug, Default, Serialize)]
pub struct QValues(#[serde(serialize_with = "as_map")] pub Vec<(String, f64)>);

/// One variant's effect on one metric across a dimension's values.
#[derive(Debug, Serialize)]
pub struct HeterogeneityReport {
    /// The variant compared with the control.
    pub variant: String,
    /// The metric key.
    pub metric: String,
    /// How `test` was computed, with its sources.
    pub method: &'static str,
    /// Cochran's Q test over the values with a difference and a variance; absent below two.
    pub test: Option<Heterogeneity>,
    /// Whether the test's p-value is at most `1 − ab.confidence`: the effect differs between
    /// the values.
    pub differs: bool,
    /// Values whose effect is better, with a q-value at most `1 − ab.confidence`: largest
    /// effect first. Better is higher but for `abandonment_rate`.
    pub better: Vec<FlaggedValue>,
    /// The same for values whose effect is worse.
    pub worse: Vec<FlaggedValue>,
    /// Values with fewer than `ab.min_dimension_impressions` impressions in the variant or the
    /// control: in neither the test nor the q-values.
    pub left_out: Vec<String>,
}

/// A value whose effect survives the false-discovery control.
#[derive(Debug, Serialize)]
pub struct FlaggedValue {
    /// The value.
    pub value: String,
    /// Its difference, treatment minus control.
    pub difference: f64,
    /// Its q-value.
    pub q_value: f64,
}

/// Which of an experiment's breakdowns a report computes: each value's report costs what an
/// experiment's does, and a reader of the dimensions (a scrape, `/dimensions`) has no use for
/// 500 queries'.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    /// Every dimension and the queries.
    All,
    /// The dimensions but `query`.
    Dimensions,
    /// The `query` dimension alone.
    Queries,
}

impl Which {
    fn takes(self, dimension: &str) -> bool {
        match self {
            Which::All => true,
            Which::Dimensions => dimension != breakdown::QUERY,
            Which::Queries => dimension == breakdown::QUERY,
        }
    }
}

/// The dimensions report of `experiment` over `table`, of the dimensions `which` takes; `None`
/// when the table holds no such breakdown of it.
#[allow(clippy::too_many_arguments)]
pub fn dimensions_report(
    layout: &MetricLayout,
    groups: &Groups,
    table: &GroupTable,
    ab: &AbConfig,
    span: Span<'_>,
    sequential: SequentialSource<'_>,
    sources: ReadoutSources<'_>,
    experiment: &str,
    which: Which,
) -> Option<DimensionsReport> {
    // dimension → value → (part name, its variants).
    type Parts<'a> = BTreeMap<&'a str, BTreeMap<&'a str, (&'a str, Vec<(&'a str, &'a GroupStats)>)>>;
    let mut parts: Parts<'_> = BTreeMap::new();
    for (id, stats) in table.iter() {
        let (name, variant) = groups.name(id);
        let Some((of, dimension, value)) = breakdown::part(name) else { continue };
        if of == experiment && which.takes(dimension) {
            let entry = parts.entry(dimension).or_default().entry(value).or_insert_with(|| (name, Vec::new()));
            entry.1.push((variant, stats));
        }
    }
    if parts.is_empty() {
        return None;
    }
    let configured = |d: &str| ab.dimensions.iter().position(|c| c == d).unwrap_or(usize::MAX);
    let mut order: Vec<&str> = parts.keys().copied().collect();
    order.sort_by_key(|d| (configured(d), *d));
    let control = ab.control_of(experiment).to_string();
    // CUPED adjusts the experiment-wide report only (`Evaluation::add_as`): a value's report
    // is unadjusted, and says so.
    let sources = ReadoutSources { covariates: None, ..sources };
    let lower_is_better: Vec<String> =
        layout.keys().iter().filter(|k| k.kind == MetricKind::Abandonment).map(|k| k.name()).collect();
    let settings =
        Settings { confidence: ab.confidence, min_impressions: ab.min_dimension_impressions, lower_is_better };
    let mut dimensions: Vec<DimensionReport> = order
        .into_iter()
        .filter_map(|dimension| {
            let values = parts.remove(dimension)?;
            let values = values
                .into_iter()
                .map(|(value, (name, variants))| {
                    let mut report = report_over(layout, ab, groups, name, variants, span, sequential, sources);
                    let shown = format!("{experiment} ({dimension}={value})");
                    report.notes.retain(|note| !note.starts_with("no CUPED figures"));
                    report.notes.iter_mut().for_each(|note| *note = note.replace(name, &shown));
                    if !ab.cuped.metrics.is_empty() {
                        report.notes.push(
                            "no CUPED figures per dimension value: CUPED adjusts the experiment-wide report".into(),
                        );
                    }
                    report.experiment = experiment.to_string();
                    report.id = match span {
                        Span::Cumulative => format!("{experiment}/{CUMULATIVE}/{dimension}={value}"),
                        Span::Window { .. } => format!("{}/{dimension}={value}", report.id.replace(name, experiment)),
                    };
                    let impressions = report.variants.iter().map(|v| v.impressions).sum();
                    ValueReport { value: value.to_string(), impressions, share: 0.0, q_values: BTreeMap::new(), report }
                })
                .collect();
            Some(dimension_report(dimension, values, &settings))
        })
        .collect();
    let queries = dimensions.iter().position(|d| d.dimension == breakdown::QUERY).map(|i| dimensions.remove(i));
    Some(DimensionsReport {
        experiment: experiment.to_string(),
        window: CUMULATIVE.to_string(),
        partitions: Vec::new(),
        confidence: ab.confidence,
        control,
        dimensions,
        queries,
    })
}

/// What a dimension's report is computed with.
struct Settings {
    /// `ab.confidence`.
    confidence: f64,
    /// `ab.min_dimension_impressions`.
    min_impressions: u64,
    /// The metric keys whose decrease is better.
    lower_is_better: Vec<String>,
}

/// Orders a dimension's values, and computes its shares, q-values, heterogeneity tests and
/// losses of engagement.
fn dimension_report(dimension: &str, mut values: Vec<ValueReport>, settings: &Settings) -> DimensionReport {
    let (confidence, min_impressions) = (settings.confidence, settings.min_impressions);
    values.sort_by(|a, b| b.impressions.cmp(&a.impressions).then_with(|| a.value.cmp(&b.value)));
    let impressions: u64 = values.iter().map(|v| v.impressions).sum();
    for value in &mut values {
        value.share = if impressions > 0 { value.impressions as f64 / impressions as f64 } else { 0.0 };
    }
    let other_impressions = values.iter().filter(|v| v.value == FOLDED).map(|v| v.impressions).sum();
    // Every (variant, metric) compared in any value, in the order the values' reports list them.
    let mut compared: Vec<(String, String)> = Vec::new();
    for value in &values {
        for comparison in &value.report.comparisons {
            for (metric, _) in &comparison.metrics {
                let key = (comparison.variant.clone(), metric.clone());
                if !compared.contains(&key) {
                    compared.push(key);
                }
            }
        }
    }
    let alpha = 1.0 - confidence;
    let mut heterogeneity = Vec::new();
    for (variant, metric) in compared {
        // Per value with enough traffic: its difference, the difference's variance and its
        // p-value.
        let effects: Vec<Option<(f64, f64, Option<f64>)>> =
            values.iter().map(|v| effect_of(&v.report, &variant, &metric, min_impressions).ok().flatten()).collect();
        let left_out = values
            .iter()
            .filter(|v| effect_of(&v.report, &variant, &metric, min_impressions).is_err())
            .map(|v| v.value.clone())
            .collect();
        let tested: Vec<(usize, f64)> =
            effects.iter().enumerate().filter_map(|(i, e)| Some((i, e.as_ref()?.2?))).collect();
        let p: Vec<f64> = tested.iter().map(|&(_, p)| p).collect();
        let (mut better, mut worse) = (Vec::new(), Vec::new());
        let lower_is_better = settings.lower_is_better.contains(&metric);
        for (&(i, _), q) in tested.iter().zip(benjamini_hochberg(&p)) {
            let value = &mut values[i];
            let per_metric = value.q_values.entry(variant.clone()).or_default();
            per_metric.0.push((metric.clone(), q));
            let difference = effects[i].as_ref().map_or(0.0, |e| e.0);
            if q <= alpha && difference != 0.0 {
                let flagged = FlaggedValue { value: value.value.clone(), difference, q_value: q };
                if (difference > 0.0) != lower_is_better {
                    better.push(flagged)
                } else {
                    worse.push(flagged)
                }
            }
        }
        for list in [&mut better, &mut worse] {
            list.sort_by(|a, b| b.difference.abs().total_cmp(&a.difference.abs()));
        }
        let pairs: Vec<(f64, f64)> = effects.iter().flatten().map(|&(d, v, _)| (d, v)).collect();
        let test = heterogeneity::cochran_q(&pairs);
        heterogeneity.push(HeterogeneityReport {
            variant,
            metric,
            method: heterogeneity::METHOD,
            test,
            differs: test.is_some_and(|t| t.p_value <= alpha),
            better,
            worse,
            left_out,
        });
    }
    let engagement_lost = engagement_lost(&values);
    DimensionReport {
        dimension: dimension.to_string(),
        impressions,
        other_impressions,
        values,
        heterogeneity,
        engagement_lost,
    }
}

/// Per compared variant, the values that lost the most engaged impressions, at most
/// [`MOST_LOST`] each (values that gained are not listed).
fn engagement_lost(values: &[ValueReport]) -> Vec<EngagementLost> {
    let mut lost = Vec::new();
    for value in values {
        let report = &value.report;
        let arm = |name: &str| report.variants.iter().find(|v| v.variant == name);
        for comparison in &report.comparisons {
            let (Some(t), Some(c)) = (arm(&comparison.variant), arm(&comparison.control)) else { continue };
            if t.impressions == 0 || c.impressions == 0 {
                continue;
            }
            let rate = |engaged: u64, n: u64| engaged as f64 / n as f64;
            let lost_here = (rate(c.engaged, c.impressions) - rate(t.engaged, t.impressions)) * t.impressions as f64;
            if lost_here > 0.0 {
                lost.push(EngagementLost {
                    variant: comparison.variant.clone(),
                    value: value.value.clone(),
                    engaged_impressions_lost: lost_here,
                    impressions: t.impressions,
                });
            }
        }
    }
    lost.sort_by(|a, b| {
        a.variant.cmp(&b.variant).then(b.engaged_impressions_lost.total_cmp(&a.engaged_impressions_lost))
    });
    let mut kept: BTreeMap<String, usize> = BTreeMap::new();
    lost.retain(|l| {
        let n = kept.entry(l.variant.clone()).or_default();
        *n += 1;
        *n <= MOST_LOST
    });
    lost
}

/// A value's comparison of `variant` on `metric`: the difference, its variance (the sum of the
/// two means' squared standard errors, as Welch's test has it) and the p-value. `None` without
/// the comparison or a standard error on either side; an error when either arm has fewer than
/// `min_impressions`.
fn effect_of(
    report: &ExperimentReport,
    variant: &str,
    metric: &str,
    min_impressions: u64,
) -> Result<Option<(f64, f64, Option<f64>)>, TooFew> {
    let arm = |name: &str| report.variants.iter().find(|v| v.variant == name).map_or(0, |v| v.impressions);
    let Some(comparison) = report.comparisons.iter().find(|c| c.variant == variant) else { return Ok(None) };
    if arm(variant) < min_impressions || arm(&comparison.control) < min_impressions {
        return Err(TooFew);
    }
    Ok(welch_effect(report, comparison, metric))
}

/// A value whose arms have fewer impressions than `ab.min_dimension_impressions`.
struct TooFew;

/// [`effect_of`] of a comparison with enough traffic.
fn welch_effect(
    report: &ExperimentReport,
    comparison: &ComparisonReport,
    metric: &str,
) -> Option<(f64, f64, Option<f64>)> {
    let variant = comparison.variant.as_str();
    let (_, cmp) = comparison.metrics.iter().find(|(m, _)| m == metric)?;
    let se = |name: &str| {
        let arm = report.variants.iter().find(|v| v.variant == name)?;
        arm.metrics.iter().find(|(m, _)| m == metric)?.1.se
    };
    let (se_t, se_c) = (se(variant)?, se(&comparison.control)?);
    Some((cmp.difference, se_t * se_t + se_c * se_c, cmp.p_value))
}

/// A query set of Search Relevance Workbench (OpenSearch 3.1 and later), as its
/// `PUT _plugins/_search_relevance/query_sets` takes one with `"sampling": "manual"`: the
/// queries to judge offline.
#[derive(Debug, Serialize)]
pub struct SrwQuerySet {
    /// At most 50 characters, as the workbench requires.
    pub name: String,
    /// At most 250 characters: which queries, and why.
    pub description: String,
    /// `manual`: the queries are given.
    pub sampling: &'static str,
    /// The queries, worst first.
    #[serde(rename = "querySetQueries")]
    pub query_set_queries: Vec<SrwQuery>,
}

/// One query of an [`SrwQuerySet`].
#[derive(Debug, Serialize)]
pub struct SrwQuery {
    /// The query's text, normalized as rankpulse keys queries.
    #[serde(rename = "queryText")]
    pub query_text: String,
}

/// The worst queries of `variant` on `metric` as an SRW query set: the queries flagged worse
/// (q-value at most `1 − ab.confidence`), largest effect first, then those that lost the most
/// engaged impressions, up to `limit`; the folded `other` and the query-less `none` are no
/// query to judge and are left out. `None` when the report has no such comparison.
pub fn worst_queries(
    report: &DimensionsReport,
    queries: &DimensionReport,
    variant: &str,
    metric: &str,
    limit: usize,
) -> Option<SrwQuerySet> {
    let entry = queries.heterogeneity.iter().find(|h| h.variant == variant && h.metric == metric)?;
    let judgeable = |q: &&str| *q != FOLDED && *q != "none";
    let mut texts: Vec<&str> = entry.worse.iter().map(|w| w.value.as_str()).filter(judgeable).collect();
    let flagged = texts.len();
    let lost = queries.engagement_lost.iter().filter(|l| l.variant == variant).map(|l| l.value.as_str());
    for text in lost.filter(judgeable) {
        if !texts.contains(&text) {
            texts.push(text);
        }
    }
    texts.truncate(limit);
    let name: String = format!("rankpulse {} worst {metric}", report.experiment).chars().take(50).collect();
    let description = format!(
        "{} queries: {} where {variant} was worse than {} on {metric} (Benjamini-Hochberg q <= {:.2}), then those that lost the most engaged impressions; rankpulse, cumulative",
        texts.len(),
        flagged.min(texts.len()),
        report.control,
        1.0 - report.confidence,
    );
    Some(SrwQuerySet {
        name,
        description: description.chars().take(250).collect(),
        sampling: "manual",
        query_set_queries: texts.into_iter().map(|t| SrwQuery { query_text: t.to_string() }).collect(),
    })
}
