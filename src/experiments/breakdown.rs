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
use crate::metrics::MetricLayout;
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
    /// Per dimension, in `ab.dimensions` order (then any other kept from before, by name).
    pub dimensions: Vec<DimensionReport>,
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
    /// Values whose q-value is at most `1 − ab.confidence`, largest effect first.
    pub flagged: Vec<FlaggedValue>,
    /// Values with fewer than `ab.min_dimension_impressions` impressions in the variant or the
    /// control: in neither the test nor the q-values.
    pub left_out: Vec<String>,
}

/// A value whose effect survives the false-discovery control.
#[derive(Debug, Serialize)]
pub struct FlaggedValue {
    /// The value.
    pub value: String,
    /// Its difference, treatment minus control: its sign says better or worse (lower is better
    /// for `abandonment_rate`).
    pub difference: f64,
    /// Its q-value.
    pub q_value: f64,
}

/// The dimensions report of `experiment` over `table`; `None` when the table holds no breakdown
/// of it.
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
) -> Option<DimensionsReport> {
    // dimension → value → (part name, its variants).
    type Parts<'a> = BTreeMap<&'a str, BTreeMap<&'a str, (&'a str, Vec<(&'a str, &'a GroupStats)>)>>;
    let mut parts: Parts<'_> = BTreeMap::new();
    for (id, stats) in table.iter() {
        let (name, variant) = groups.name(id);
        let Some((of, dimension, value)) = breakdown::part(name) else { continue };
        if of == experiment {
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
    let dimensions = order
        .into_iter()
        .filter_map(|dimension| {
            let values = parts.remove(dimension)?;
            let values = values
                .into_iter()
                .map(|(value, (name, variants))| {
                    let mut report = report_over(layout, ab, groups, name, variants, span, sequential, sources);
                    let shown = format!("{experiment} ({dimension}={value})");
                    report.notes.iter_mut().for_each(|note| *note = note.replace(name, &shown));
                    report.experiment = experiment.to_string();
                    report.id = match span {
                        Span::Cumulative => format!("{experiment}/{CUMULATIVE}/{dimension}={value}"),
                        Span::Window { .. } => format!("{}/{dimension}={value}", report.id.replace(name, experiment)),
                    };
                    let impressions = report.variants.iter().map(|v| v.impressions).sum();
                    ValueReport { value: value.to_string(), impressions, share: 0.0, q_values: BTreeMap::new(), report }
                })
                .collect();
            Some(dimension_report(dimension, values, ab.confidence, ab.min_dimension_impressions))
        })
        .collect();
    Some(DimensionsReport {
        experiment: experiment.to_string(),
        window: CUMULATIVE.to_string(),
        partitions: Vec::new(),
        confidence: ab.confidence,
        control,
        dimensions,
    })
}

/// Orders a dimension's values, and computes its shares, q-values and heterogeneity tests.
fn dimension_report(
    dimension: &str,
    mut values: Vec<ValueReport>,
    confidence: f64,
    min_impressions: u64,
) -> DimensionReport {
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
        let mut flagged = Vec::new();
        for (&(i, _), q) in tested.iter().zip(benjamini_hochberg(&p)) {
            let value = &mut values[i];
            let per_metric = value.q_values.entry(variant.clone()).or_default();
            per_metric.0.push((metric.clone(), q));
            if q <= alpha {
                let difference = effects[i].as_ref().map_or(f64::NAN, |e| e.0);
                flagged.push(FlaggedValue { value: value.value.clone(), difference, q_value: q });
            }
        }
        flagged.sort_by(|a, b| b.difference.abs().total_cmp(&a.difference.abs()));
        let pairs: Vec<(f64, f64)> = effects.iter().flatten().map(|&(d, v, _)| (d, v)).collect();
        let test = heterogeneity::cochran_q(&pairs);
        heterogeneity.push(HeterogeneityReport {
            variant,
            metric,
            method: heterogeneity::METHOD,
            test,
            differs: test.is_some_and(|t| t.p_value <= alpha),
            flagged,
            left_out,
        });
    }
    DimensionReport { dimension: dimension.to_string(), impressions, other_impressions, values, heterogeneity }
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
