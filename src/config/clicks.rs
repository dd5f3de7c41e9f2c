//! `[clicks]`: the click log behind the click models (the math is `crate::clicks`, the state
//! `crate::clicks::log`).

use serde::{Deserialize, Serialize};

use super::ConfigError;
use crate::time::HumanDuration;

/// The most ranks the click log tracks: a pending tracked impression keeps one pair number per
/// tracked rank in a fixed array, so none of it is allocated per impression.
pub const MAX_TRACKED_RANKS: usize = 20;

/// `[clicks]`: per (normalized query, document), how often it was shown at each rank and
/// clicked there, for the position-bias propensities, COEC and the click model's
/// attractiveness (`/clicks`, the `rankpulse_click_*` gauges, `rankpulse judgments
/// --from-clicks`). A result counts as clicked when its attributed gain is at least
/// `metrics.relevance_threshold`, the rule every click metric uses.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ClicksConfig {
    /// Keep the click log. Impressions are keyed by their `query` text (UBI's `user_query`),
    /// normalized as judgment lists are; an impression without one is counted, not tracked.
    /// Default false.
    pub enabled: bool,
    /// Ranks 1 to `max_rank` are tracked (at most 20): each is a parameter of the click model,
    /// and deep ranks get too few clicks to estimate one. Default 10.
    pub max_rank: usize,
    /// The most queries tracked per partition: the head of the traffic. A query not tracked
    /// replaces the least-shown tracked one once its own showings (counted in a fixed-size
    /// sketch) exceed that one's; the rest are counted. Default 10000.
    pub max_queries_per_partition: usize,
    /// The click log covers the current and the previous `horizon` of event time: older
    /// counts are dropped as time moves on, so the estimates follow the rankers and the users.
    /// Default `7d`.
    pub horizon: HumanDuration,
    /// EM iterations for the position-based model at most (the gauges' fits, and those of
    /// `judgments --from-clicks --config`); it stops earlier once no parameter moves by more
    /// than 1e-7. Default 200.
    pub em_iterations: usize,
    /// The gauges refit the models at most this often (a fit reads the whole log). Default
    /// `1m`.
    pub refit_interval: HumanDuration,
    /// Position-bias propensities relative to rank 1, rank 1 first (each in (0, 1]; the
    /// `rankpulse_click_examination` gauges or `judgments --from-clicks --models-out` estimate
    /// them). When given, every cutoff k gets `ips_clicks@k` and `ips_dcg@k`: clicks weighted by
    /// 1 / max(propensity, clip), per experiment and variant with their A/B comparisons, beside
    /// the raw metrics; a click below the last given rank counts 0. Independent of `enabled`.
    /// Pinned rather than refitted live, so that every impression of an experiment is weighted
    /// alike. Default empty (off).
    pub propensities: Vec<f64>,
    /// Propensities below this count as this (clipping, Strehl et al. 2010): caps each click's
    /// weight at 1/clip, trading a bias towards the top ranks for less variance. 0 is no
    /// clipping. One impression's `ips_clicks@k` with a click at every weighted rank within the
    /// largest of `metrics.cutoffs` must stay within 32768, what the metrics' exact sums hold:
    /// propensities far below 1 need a clip, and the error names the smallest that will do.
    /// Default 0.
    pub clip: f64,
}

impl Default for ClicksConfig {
    fn default() -> Self {
        ClicksConfig {
            enabled: false,
            max_rank: 10,
            max_queries_per_partition: 10_000,
            horizon: HumanDuration::from_millis(7 * 24 * 3_600_000),
            em_iterations: 200,
            refit_interval: HumanDuration::from_millis(60_000),
            propensities: Vec::new(),
            clip: 0.0,
        }
    }
}

impl ClicksConfig {
    /// The checks serde cannot express, naming the key.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key: &str, problem: String| ConfigError::Invalid { key: key.to_string(), problem };
        if !(1..=MAX_TRACKED_RANKS).contains(&self.max_rank) {
            return Err(invalid(
                "clicks.max_rank",
                format!("is {} but must be from 1 to {MAX_TRACKED_RANKS}", self.max_rank),
            ));
        }
        if self.max_queries_per_partition == 0 {
            return Err(invalid("clicks.max_queries_per_partition", "must be at least 1".to_string()));
        }
        if self.horizon.as_millis_i64() < 60_000 {
            return Err(invalid("clicks.horizon", "must be at least 1m".to_string()));
        }
        if self.em_iterations == 0 {
            return Err(invalid("clicks.em_iterations", "must be at least 1".to_string()));
        }
        if let Some(bad) = self.propensities.iter().find(|p| !(**p > 0.0 && **p <= 1.0)) {
            return Err(invalid(
                "clicks.propensities",
                format!("has {bad}, but each must be in (0, 1]: relative to rank 1"),
            ));
        }
        if self.propensities.len() > 1000 {
            return Err(invalid("clicks.propensities", "lists more than 1000 ranks".to_string()));
        }
        if !(0.0..=1.0).contains(&self.clip) {
            return Err(invalid("clicks.clip", format!("is {} but must be from 0 to 1", self.clip)));
        }
        if self.refit_interval.as_millis_i64() < 100 {
            return Err(invalid("clicks.refit_interval", "must be at least 100ms".to_string()));
        }
        Ok(())
    }
}
