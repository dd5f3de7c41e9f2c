//! `[page]`: the experiment page (`/`, `/experiments/<name>`) and `replay --html`'s file.

use serde::{Deserialize, Serialize};

use super::ConfigError;
use crate::time::HumanDuration;

/// `[page]`: what the experiment page draws and how often a live one reloads. Every metric's
/// figures are on the page as text either way; these are the ones drawn over time.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PageConfig {
    /// The metric keys drawn as curves over the looks (per variant, and each comparison's
    /// difference with its intervals), in this order. Default empty: `mrr`, `ndcg@10` and
    /// `abandonment_rate` where configured, then `ab.guardrails` and `ab.cuped.metrics`.
    pub metrics: Vec<String>,
    /// How often a live page reloads itself (`5s` to `1h`). Default `15s`.
    pub refresh: HumanDuration,
}

impl Default for PageConfig {
    fn default() -> Self {
        PageConfig { metrics: Vec::new(), refresh: HumanDuration::from_millis(15_000) }
    }
}

/// The headline metrics of the default page, where configured.
const DEFAULT_METRICS: [&str; 3] = ["mrr", "ndcg@10", "abandonment_rate"];

impl PageConfig {
    /// The metric keys drawn, given the configured ones (`metric_keys`) and the A/B read-out's
    /// own (guardrails, CUPED), without repeats.
    pub fn drawn_metrics(&self, metric_keys: &[String], read_out: &[&[String]]) -> Vec<String> {
        let mut drawn: Vec<String> = Vec::new();
        let mut add = |key: &str| {
            if metric_keys.iter().any(|k| k == key) && !drawn.iter().any(|d| d == key) {
                drawn.push(key.to_string());
            }
        };
        if self.metrics.is_empty() {
            DEFAULT_METRICS.iter().for_each(|k| add(k));
            read_out.iter().flat_map(|keys| keys.iter()).for_each(|k| add(k));
        } else {
            self.metrics.iter().for_each(|k| add(k));
        }
        drawn
    }

    /// The refresh, in whole seconds.
    pub fn refresh_seconds(&self) -> u32 {
        u32::try_from(self.refresh.as_duration().as_secs()).unwrap_or(u32::MAX)
    }

    pub(super) fn validate(&self, metric_keys: &[String]) -> Result<(), ConfigError> {
        for name in &self.metrics {
            if !metric_keys.contains(name) {
                return Err(super::validate::invalid(
                    "page.metrics",
                    format!("{name:?} is not a configured metric (these are: {})", metric_keys.join(", ")),
                ));
            }
        }
        let seconds = self.refresh.as_duration().as_secs_f64();
        if !(5.0..=3600.0).contains(&seconds) {
            return Err(super::validate::invalid("page.refresh", format!("is {} but must be 5s to 1h", self.refresh)));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_default_draws_the_headline_metrics_configured_and_the_read_outs() {
        let configured = keys(&["mrr", "ndcg@5", "abandonment_rate", "precision@5"]);
        let guardrails = keys(&["precision@5", "mrr"]);
        let drawn = PageConfig::default().drawn_metrics(&configured, &[&guardrails]);
        assert_eq!(drawn, keys(&["mrr", "abandonment_rate", "precision@5"]));
        let chosen = PageConfig { metrics: keys(&["ndcg@5"]), ..PageConfig::default() };
        assert_eq!(chosen.drawn_metrics(&configured, &[&guardrails]), keys(&["ndcg@5"]));
    }

    #[test]
    fn unknown_metrics_and_odd_refreshes_name_the_key() {
        let configured = keys(&["mrr"]);
        let wrong = PageConfig { metrics: keys(&["ndcg@10"]), ..PageConfig::default() };
        assert!(wrong.validate(&configured).unwrap_err().to_string().contains("page.metrics"));
        let fast = PageConfig { refresh: HumanDuration::from_millis(1000), ..PageConfig::default() };
        assert!(fast.validate(&configured).unwrap_err().to_string().contains("page.refresh"));
        assert!(PageConfig::default().validate(&configured).is_ok());
    }
}
