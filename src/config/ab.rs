//! `[ab]`: the A/B statistics' section (the unit, intervals, controls and splits, the output
//! topic, corrections, power, guardrails, breakdowns by dimension); its read-out subsections
//! (`[ab.cuped]`, `[ab.bayesian]`) are `readout.rs`'s.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::readout::{BayesianConfig, CupedConfig};
use crate::stats::multiple::Correction;
/// The randomization unit A/B statistics treat as independent.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum AbUnit {
    /// Every impression is independent: right when the experiment randomizes per query.
    #[default]
    Impression,
    /// Impressions of one `client_id` form a cluster: right when it randomizes per user.
    ClientId,
    /// Impressions of one `session_id` form a cluster: right when it randomizes per session.
    SessionId,
}

impl AbUnit {
    pub fn label(self) -> &'static str {
        match self {
            AbUnit::Impression => "impression",
            AbUnit::ClientId => "client_id",
            AbUnit::SessionId => "session_id",
        }
    }
}

/// `[ab]`: the A/B statistics feed (treatment against control, sample-ratio checks).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AbConfig {
    /// The independent unit: `impression` (default), `client_id` or `session_id`. With a
    /// clustered unit, standard errors are cluster-robust (delta method over unit buckets).
    pub unit: AbUnit,
    /// Clustered units are hashed into this many buckets per group and window; each bucket holds
    /// whole units, and the variance is computed over buckets. More buckets: closer to per-unit
    /// exactness and more memory (8 + 16 x metrics bytes per bucket). Default 256.
    pub unit_buckets: u32,
    /// With a clustered unit, distinct units are counted exactly, up to this many per group and
    /// window, for the sample-ratio test (about 6 bytes each); beyond it that test is withheld.
    /// Default 1000000.
    pub max_units: usize,
    /// Confidence level of every interval. Default 0.95.
    pub confidence: f64,
    /// The anytime-valid figures' one tuning constant: the number of impressions (both arms
    /// together) at which their confidence sequences are tightest (1.55 times the fixed-horizon
    /// interval there at 95%). Set it near the sample size at which the experiment should be
    /// decided, erring low: tuned ten times too low, the interval there is 7% wider than at its
    /// best; ten times too high, 27%. Default 5000 (GrowthBook's).
    pub sequential_sample_size: f64,
    /// The variant every other variant is compared with, unless an experiment says otherwise.
    /// Default `control`.
    pub control: String,
    /// Kafka topic receiving one JSON record per experiment and closed window; empty (the
    /// default) disables it.
    pub output_topic: String,
    /// Per-experiment settings, by experiment name.
    pub experiments: BTreeMap<String, AbExperimentConfig>,
    /// CUPED: the comparisons adjusted by each unit's own metric before the experiment.
    pub cuped: CupedConfig,
    /// The Bayesian read-out: chance to beat control and risk, as GrowthBook computes them.
    pub bayesian: BayesianConfig,
    /// Adjusts the fixed-horizon p-values of each experiment's comparisons (every metric of
    /// `correction_metrics` against every non-control variant) for testing them all at once:
    /// `holm` (family-wise error rate), `benjamini-hochberg` (false discovery rate) or `none`.
    /// Both adjusted p-values are always reported; this one is also `adjusted_p_value`, the
    /// gauge the shipped alerts read. Default `none`.
    pub correction: Correction,
    /// The metric keys that form the family adjusted together. Default empty: every metric.
    pub correction_metrics: Vec<String>,
    /// The power at which the minimum detectable effect is reported. Default 0.8.
    pub power: f64,
    /// The relative effect an experiment should be able to detect: each comparison reports
    /// how many impressions, and how long at the current traffic, reaching it takes.
    /// Default 0.01 (1%).
    pub target_mde: f64,
    /// Metrics that must not get worse (say `abandonment_rate`), each with its own one-sided test
    /// that the treatment is worse (higher for abandonment, lower for the rest) and the
    /// `RankpulseGuardrailWorse` alert. Default empty.
    pub guardrails: Vec<String>,
    /// The impression fields every experiment is also broken down by, each value with the
    /// experiment-wide report's figures, a heterogeneity test per dimension and false-discovery
    /// control across values (`/api/v1/experiments/NAME/dimensions`): `segment`, `query` (the
    /// query text, normalized: per-query figures at `/api/v1/experiments/NAME/queries`), or a
    /// key of a native impression's `dimensions` object (`{"device": "mobile"}`) or of
    /// `[mapping.impressions.dimensions]`. An
    /// impression without the field counts under the value `none`. Each dimension adds the
    /// sums of one more group per value to every impression's accumulation. Default empty (at
    /// most 8).
    pub dimensions: Vec<String>,
    /// Values of one dimension with their own figures, per experiment and partition, in order
    /// of arrival; later values are reported together as `other` until an idle one retires
    /// (`labels.idle_expiry`). Default 20.
    pub max_dimension_values: usize,
    /// Queries with their own figures when `ab.dimensions` names `query` (the impression's
    /// query text, normalized as judgment lists key it), per experiment and partition, in
    /// order of arrival; later ones are reported together as `other` until an idle one
    /// retires. Default 500.
    pub max_queries: usize,
    /// A dimension value takes part in its dimension's heterogeneity test and q-values only
    /// with at least this many impressions in the control and in the compared variant: with
    /// fewer, the test's chi-square approximation is anti-conservative (the A/A simulation of
    /// `tests/breakdown.rs`). Its own figures are reported either way. Default 100.
    pub min_dimension_impressions: u64,
}

/// The most fields `ab.dimensions` names: each multiplies the accumulation's work.
pub const MAX_DIMENSIONS: usize = 8;

impl Default for AbConfig {
    fn default() -> Self {
        AbConfig {
            unit: AbUnit::Impression,
            unit_buckets: 256,
            max_units: 1_000_000,
            confidence: 0.95,
            sequential_sample_size: 5000.0,
            control: "control".into(),
            output_topic: String::new(),
            experiments: BTreeMap::new(),
            cuped: CupedConfig::default(),
            bayesian: BayesianConfig::default(),
            correction: Correction::None,
            correction_metrics: Vec::new(),
            power: 0.8,
            target_mde: 0.01,
            guardrails: Vec::new(),
            dimensions: Vec::new(),
            max_dimension_values: 20,
            max_queries: 500,
            min_dimension_impressions: 100,
        }
    }
}

/// `[ab.experiments.NAME]`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AbExperimentConfig {
    /// This experiment's control variant; default `ab.control`.
    pub control: Option<String>,
    /// Expected traffic share per variant (summing to 1), for the sample-ratio-mismatch test.
    /// Empty (the default): an equal split over the variants seen.
    pub split: BTreeMap<String, f64>,
}

impl AbConfig {
    /// The control variant of `experiment`.
    pub fn control_of(&self, experiment: &str) -> &str {
        self.experiments.get(experiment).and_then(|e| e.control.as_deref()).unwrap_or(&self.control)
    }

    /// The configured expected split of `experiment`, if any.
    pub fn split_of(&self, experiment: &str) -> Option<&BTreeMap<String, f64>> {
        self.experiments.get(experiment).map(|e| &e.split).filter(|s| !s.is_empty())
    }
}
