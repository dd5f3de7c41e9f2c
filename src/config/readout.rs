//! `[ab]`'s experiment read-out sections, CUPED (`[ab.cuped]`) and the Bayesian read-out
//! (`[ab.bayesian]`), and the checks of every read-out key (with multiple comparisons, power
//! and guardrails, which are plain `[ab]` keys). The math is `crate::stats`;
//! the CUPED state `crate::accumulate::cuped`.

use serde::{Deserialize, Serialize};

use super::{AbConfig, AbUnit, ConfigError};

/// `[ab.cuped]`: each unit's own metric before it entered an experiment adjusts the experiment's
/// comparison (CUPED, Deng et al. 2013), which narrows the intervals by the share of the
/// metric's variance that the pre-period explains. Needs `ab.unit` = `client_id` or
/// `session_id`. Shown in the cumulative report only: a window's units entered before it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct CupedConfig {
    /// The metric keys adjusted (`ndcg@10`, `mrr`, ...). Each costs 8 bytes per unit and
    /// tracked day. Default empty (off).
    pub metrics: Vec<String>,
    /// A unit's pre-period is the `lookback_days` whole UTC days before the day of its first
    /// impression in the experiment (GrowthBook's default is 14). Default 14.
    pub lookback_days: u32,
    /// The most units whose recent history is kept per partition. A new unit beyond it is not
    /// tracked until units idle for longer than the look-back make room; it enters an
    /// experiment with no pre-period data, as a new user does (counted in
    /// `rankpulse_cuped_units_total{outcome="untracked"}`). Default 200000.
    pub max_units_per_partition: usize,
}

impl Default for CupedConfig {
    fn default() -> Self {
        CupedConfig { metrics: Vec::new(), lookback_days: 14, max_units_per_partition: 200_000 }
    }
}

/// `[ab.bayesian]`: the Bayesian read-out of every comparison, as GrowthBook computes it
/// (gbstats 0.8.0): chance to beat control and the risk (expected loss) of each choice.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct BayesianConfig {
    /// `relative` (the effect as a share of the control's mean, GrowthBook's default) or
    /// `absolute`: the scale of the effect, its prior and the risk. Default `relative`.
    pub difference: DifferenceScale,
    /// A proper prior shrinks small samples toward `prior_mean`; an improper (flat) one lets the
    /// data speak alone. Default false.
    pub prior_proper: bool,
    /// The prior's mean effect, on the `difference` scale. Default 0.
    pub prior_mean: f64,
    /// The prior's standard deviation, on the `difference` scale. Default 0.3.
    pub prior_stddev: f64,
}

impl Default for BayesianConfig {
    fn default() -> Self {
        BayesianConfig {
            difference: DifferenceScale::Relative,
            prior_proper: false,
            prior_mean: 0.0,
            prior_stddev: 0.3,
        }
    }
}

/// The scale of the Bayesian read-out's effect.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum DifferenceScale {
    Relative,
    Absolute,
}

fn invalid(key: &str, problem: impl Into<String>) -> ConfigError {
    ConfigError::Invalid { key: key.to_string(), problem: problem.into() }
}

impl AbConfig {
    /// Checks the read-out keys; `metric_keys` are the configured layout's names.
    pub(super) fn validate_readout(&self, metric_keys: &[String]) -> Result<(), ConfigError> {
        let clustered = self.unit != AbUnit::Impression;
        let known = |key: &str, names: &[String]| -> Result<(), ConfigError> {
            for name in names {
                if !metric_keys.contains(name) {
                    return Err(invalid(
                        key,
                        format!("{name:?} is not a configured metric (these are: {})", metric_keys.join(", ")),
                    ));
                }
            }
            Ok(())
        };
        known("ab.cuped.metrics", &self.cuped.metrics)?;
        known("ab.correction_metrics", &self.correction_metrics)?;
        known("ab.guardrails", &self.guardrails)?;
        if !self.cuped.metrics.is_empty() && !clustered {
            return Err(invalid(
                "ab.cuped.metrics",
                "needs ab.unit = \"client_id\" or \"session_id\": a pre-period belongs to a user or session",
            ));
        }
        if !(1..=90).contains(&self.cuped.lookback_days) {
            return Err(invalid(
                "ab.cuped.lookback_days",
                format!("is {} but must be 1 to 90", self.cuped.lookback_days),
            ));
        }
        if self.cuped.max_units_per_partition == 0 {
            return Err(invalid("ab.cuped.max_units_per_partition", "must be at least 1"));
        }
        let b = &self.bayesian;
        if !(b.prior_stddev > 0.0 && b.prior_stddev.is_finite()) {
            return Err(invalid("ab.bayesian.prior_stddev", format!("is {} but must be positive", b.prior_stddev)));
        }
        if !b.prior_mean.is_finite() {
            return Err(invalid("ab.bayesian.prior_mean", "must be a number"));
        }
        if !(self.power > 0.0 && self.power < 1.0) {
            return Err(invalid("ab.power", format!("is {} but must lie strictly between 0 and 1", self.power)));
        }
        if !(self.target_mde > 0.0 && self.target_mde.is_finite()) {
            return Err(invalid("ab.target_mde", format!("is {} but must be a positive share", self.target_mde)));
        }
        Ok(())
    }
}
