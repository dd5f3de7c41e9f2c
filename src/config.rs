//! Configuration: the TOML schema, its defaults, environment overrides and start-up checks.
//!
//! Every key has a default, so an empty file is a valid configuration. Unknown keys are refused
//! (`deny_unknown_fields`): a misspelt key silently falling back to its default is the most
//! expensive kind of configuration bug. Cross-field rules live in [`Config::validate`], and every
//! message names the key it is about.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::time::HumanDuration;

/// The largest action gain accepted: `2^g - 1` (exponential nDCG) stays exact in an f64 far
/// beyond it, and graded relevance scales in practice stop at 3 or 4.
pub const MAX_GAIN: u8 = 30;

/// librdkafka properties rankpulse sets itself, because its offset handling depends on them.
const MANAGED_KAFKA_PROPERTIES: &[&str] =
    &["bootstrap.servers", "group.id", "enable.auto.commit", "enable.auto.offset.store"];

/// The whole configuration file.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub kafka: KafkaConfig,
    pub ubi: UbiConfig,
    pub join: JoinConfig,
    pub metrics: MetricsConfig,
    pub http: HttpConfig,
    pub state: StateConfig,
    pub limits: LimitsConfig,
    pub labels: LabelsConfig,
    pub ab: AbConfig,
}

/// `[kafka]`: where events come from.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct KafkaConfig {
    /// Bootstrap brokers, comma separated. Default `localhost:9092`.
    pub brokers: String,
    /// Consumer group; replicas sharing it split the partitions. Default `rankpulse`.
    pub group_id: String,
    /// Topic of impression events. Default `search-impressions`.
    pub impressions_topic: String,
    /// Topic of engagement events, co-partitioned with impressions by `query_id`.
    /// Default `search-engagements`.
    pub engagements_topic: String,
    /// How impression messages are written: `json` (rankpulse's own events) or `ubi` (OpenSearch
    /// User Behavior Insights query documents). Default `json`.
    pub impressions_format: InputFormat,
    /// How engagement messages are written: `json` or `ubi` (UBI event documents). Default `json`.
    pub engagements_format: InputFormat,
    /// Extra librdkafka properties passed as they are (security.protocol, sasl.*, ...).
    pub properties: BTreeMap<String, String>,
}

impl Default for KafkaConfig {
    fn default() -> Self {
        KafkaConfig {
            brokers: "localhost:9092".into(),
            group_id: "rankpulse".into(),
            impressions_topic: "search-impressions".into(),
            engagements_topic: "search-engagements".into(),
            impressions_format: InputFormat::Json,
            engagements_format: InputFormat::Json,
            properties: BTreeMap::new(),
        }
    }
}

/// The format of one input's messages (and of replay's lines).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InputFormat {
    /// rankpulse's events as the contract defines them.
    Json,
    /// OpenSearch User Behavior Insights documents (`ubi_queries` / `ubi_events`); see [`crate::event::ubi`].
    Ubi,
}

/// `[ubi]`: where UBI query documents carry the experiment and variant.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct UbiConfig {
    /// Key of `query_attributes` holding the experiment name. Default `experiment`.
    pub experiment_key: String,
    /// Key of `query_attributes` holding the variant name. Default `variant`.
    pub variant_key: String,
}

impl Default for UbiConfig {
    fn default() -> Self {
        UbiConfig { experiment_key: "experiment".into(), variant_key: "variant".into() }
    }
}

/// `[join]`: how engagements are attributed to impressions on event time.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct JoinConfig {
    /// Engagements count for an impression when their timestamp lies in
    /// [impression, impression + attribution_window]. Default `30m`.
    pub attribution_window: HumanDuration,
    /// How far behind the newest event time of an input an event may still arrive and count:
    /// the watermark of an input is its maximum event time minus this. Default `10s`.
    pub max_out_of_orderness: HumanDuration,
    /// An input (topic partition) that delivered nothing for this long stops holding the
    /// watermark back; when every input is idle, the watermark advances with the wall clock.
    /// Default `30s`.
    pub idle_timeout: HumanDuration,
    /// At most this many impressions wait for their window; beyond it the one with the earliest
    /// deadline is finalized early (counted as evicted). Default 2,000,000.
    pub max_pending_impressions: usize,
    /// At most this many engagements wait for their impression; beyond it the oldest is dropped
    /// (counted as evicted). Default 500,000.
    pub max_held_engagements: usize,
    /// At most this many keys are remembered for de-duplication (engagement identities and
    /// recently finalized queries); beyond it the oldest is forgotten. Default 4,000,000.
    pub max_dedup_keys: usize,
}

impl Default for JoinConfig {
    fn default() -> Self {
        JoinConfig {
            attribution_window: HumanDuration::from_millis(30 * 60_000),
            max_out_of_orderness: HumanDuration::from_millis(10_000),
            idle_timeout: HumanDuration::from_millis(30_000),
            max_pending_impressions: 2_000_000,
            max_held_engagements: 500_000,
            max_dedup_keys: 4_000_000,
        }
    }
}

/// `[limits]`: what a message may look like before it is rejected.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Larger messages are rejected as `too_large` without being parsed. Default 1048576 (1 MiB).
    pub max_message_bytes: usize,
    /// Impressions with more results are rejected as `too_many_results`. Default 1000.
    pub max_results: usize,
    /// Events stamped further than this ahead of the wall clock are rejected as
    /// `timestamp_in_future` (they would drag the watermark ahead). Default `1h`.
    pub max_future: HumanDuration,
    /// Events stamped further than this behind the wall clock are rejected as
    /// `timestamp_too_old` by `serve` (`replay` of old files has no such limit). Default `7d`.
    pub max_past: HumanDuration,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            max_message_bytes: 1 << 20,
            max_results: 1000,
            max_future: HumanDuration::from_millis(3_600_000),
            max_past: HumanDuration::from_millis(7 * 86_400_000),
        }
    }
}

/// `[labels]`: the cardinality guard on `experiment` and `variant` label values.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LabelsConfig {
    /// Distinct active experiments; further ones are folded into `other`. Default 20.
    pub max_experiments: usize,
    /// Distinct active variants per experiment; further ones are folded into `other`. Default 10.
    pub max_variants: usize,
    /// If not empty, only these experiments get their own series; others are folded into `other`.
    /// Default empty (any experiment, up to `max_experiments`).
    pub allowed_experiments: Vec<String>,
    /// An experiment/variant with no impression for this long (event time) is retired: its
    /// series leave `/metrics` and its slot is free for a new value. Default `24h`.
    pub idle_expiry: HumanDuration,
}

impl Default for LabelsConfig {
    fn default() -> Self {
        LabelsConfig {
            max_experiments: 20,
            max_variants: 10,
            allowed_experiments: Vec::new(),
            idle_expiry: HumanDuration::from_millis(86_400_000),
        }
    }
}

/// `[metrics]`: what is computed.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// The k of every @k metric. Default `[1, 3, 5, 10]`.
    pub cutoffs: Vec<u32>,
    /// Tumbling event-time window sizes. Default `["1m", "5m", "1h"]`.
    pub windows: Vec<HumanDuration>,
    /// A result is relevant when its gain is at least this. Default `1`.
    pub relevance_threshold: u8,
    /// Gain of each action; unknown actions gain 0. Default click 1, add_to_cart 2, purchase 3.
    pub action_gains: BTreeMap<String, u8>,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            cutoffs: vec![1, 3, 5, 10],
            windows: vec![
                HumanDuration::from_millis(60_000),
                HumanDuration::from_millis(300_000),
                HumanDuration::from_millis(3_600_000),
            ],
            relevance_threshold: 1,
            action_gains: [("click", 1), ("add_to_cart", 2), ("purchase", 3)]
                .into_iter()
                .map(|(a, g)| (a.to_string(), g))
                .collect(),
        }
    }
}

/// `[http]`: the metrics endpoint.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// Address of `/metrics`, `/healthz` and `/readyz`. Default `0.0.0.0:9464`.
    pub listen: String,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig { listen: "0.0.0.0:9464".into() }
    }
}

/// `[state]`: checkpoints.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct StateConfig {
    /// Directory of the checkpoints. Default `./rankpulse-state`.
    pub dir: PathBuf,
    /// How often the whole state is checkpointed; Kafka offsets are committed right after each
    /// checkpoint. Default `5s`.
    pub checkpoint_interval: HumanDuration,
    /// How many of the newest checkpoints are kept (a damaged newest one falls back to the
    /// previous). Default 3.
    pub keep_checkpoints: usize,
    /// A partition revoked from this consumer, or restored from a checkpoint and not assigned
    /// yet, keeps holding back window closing for this long, so its impressions still land in
    /// their windows if it comes back (after a restart, the old member's session must expire
    /// first: keep this above `session.timeout.ms`). Default `60s`.
    pub rebalance_grace: HumanDuration,
}

impl Default for StateConfig {
    fn default() -> Self {
        StateConfig {
            dir: PathBuf::from("./rankpulse-state"),
            checkpoint_interval: HumanDuration::from_millis(5_000),
            keep_checkpoints: 3,
            rebalance_grace: HumanDuration::from_millis(60_000),
        }
    }
}

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
    /// The variant every other variant is compared with, unless an experiment says otherwise.
    /// Default `control`.
    pub control: String,
    /// Kafka topic receiving one JSON record per experiment and closed window; empty (the
    /// default) disables it.
    pub output_topic: String,
    /// Per-experiment settings, by experiment name.
    pub experiments: BTreeMap<String, AbExperimentConfig>,
}

impl Default for AbConfig {
    fn default() -> Self {
        AbConfig {
            unit: AbUnit::Impression,
            unit_buckets: 256,
            max_units: 1_000_000,
            confidence: 0.95,
            control: "control".into(),
            output_topic: String::new(),
            experiments: BTreeMap::new(),
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

/// A configuration that could not be loaded or is inconsistent. The message names the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read configuration {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("configuration {origin}: {message}")]
    Parse { origin: String, message: String },
    #[error("configuration key `{key}`: {problem}")]
    Invalid { key: String, problem: String },
}

fn invalid(key: impl Into<String>, problem: impl Into<String>) -> ConfigError {
    ConfigError::Invalid { key: key.into(), problem: problem.into() }
}

impl Config {
    /// Loads a TOML file (or only defaults when `path` is `None`), applies
    /// `RANKPULSE__SECTION__KEY` environment overrides, and validates the result.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        let text = match path {
            Some(p) => {
                std::fs::read_to_string(p).map_err(|source| ConfigError::Read { path: p.to_path_buf(), source })?
            }
            None => String::new(),
        };
        let origin = path.map_or_else(|| "defaults".to_string(), |p| p.display().to_string());
        Self::from_toml_with_env(&text, &origin, std::env::vars())
    }

    /// Parses TOML text plus environment overrides; split from [`Config::load`] so tests can
    /// inject an environment.
    pub fn from_toml_with_env(
        text: &str,
        origin: &str,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let parse_err =
            |e: &dyn std::fmt::Display| ConfigError::Parse { origin: origin.to_string(), message: e.to_string() };
        // Parse the file strictly first, so its errors point at the file with line numbers.
        let _: Config = toml::from_str(text).map_err(|e| parse_err(&e))?;
        let env_source = config::Environment::with_prefix("RANKPULSE")
            .prefix_separator("__")
            .separator("__")
            .try_parsing(true)
            .list_separator(",")
            .with_list_parse_key("metrics.cutoffs")
            .with_list_parse_key("metrics.windows")
            .source(Some(env.into_iter().filter(|(k, _)| k.starts_with("RANKPULSE__")).collect()));
        let merged = config::Config::builder()
            .add_source(config::File::from_str(text, config::FileFormat::Toml))
            .add_source(env_source)
            .build()
            .map_err(|e| parse_err(&e))?;
        let cfg: Config = merged
            .try_deserialize()
            .map_err(|e| parse_err(&format!("{e} (after applying RANKPULSE__* environment overrides)")))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Cross-field checks that serde cannot express. Run at start-up by every command.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let k = &self.kafka;
        if k.brokers.trim().is_empty() {
            return Err(invalid("kafka.brokers", "must name at least one broker (host:port)"));
        }
        if k.group_id.trim().is_empty() {
            return Err(invalid("kafka.group_id", "must not be empty"));
        }
        for (key, topic) in
            [("kafka.impressions_topic", &k.impressions_topic), ("kafka.engagements_topic", &k.engagements_topic)]
        {
            if topic.trim().is_empty() {
                return Err(invalid(key, "must not be empty"));
            }
        }
        if k.impressions_topic == k.engagements_topic {
            return Err(invalid(
                "kafka.engagements_topic",
                "must differ from kafka.impressions_topic: the topic tells an impression from an engagement",
            ));
        }
        for managed in MANAGED_KAFKA_PROPERTIES {
            if k.properties.contains_key(*managed) {
                return Err(invalid(
                    format!("kafka.properties.\"{managed}\""),
                    "is set by rankpulse itself (offsets are stored only after processing); use kafka.brokers / kafka.group_id instead",
                ));
            }
        }
        for (key, value) in
            [("ubi.experiment_key", &self.ubi.experiment_key), ("ubi.variant_key", &self.ubi.variant_key)]
        {
            if value.is_empty() {
                return Err(invalid(key, "must name a key of the UBI query_attributes"));
            }
        }
        if self.ubi.experiment_key == self.ubi.variant_key {
            return Err(invalid("ubi.variant_key", "must differ from ubi.experiment_key"));
        }
        if self.state.checkpoint_interval.as_millis_i64() == 0 {
            return Err(invalid("state.checkpoint_interval", "must be positive"));
        }
        if self.state.dir.as_os_str().is_empty() {
            return Err(invalid("state.dir", "must name a directory"));
        }
        let j = &self.join;
        if j.attribution_window.as_millis_i64() == 0 {
            return Err(invalid("join.attribution_window", "must be positive"));
        }
        if j.idle_timeout.as_millis_i64() == 0 {
            return Err(invalid("join.idle_timeout", "must be positive"));
        }
        for (key, value) in [
            ("join.max_pending_impressions", j.max_pending_impressions),
            ("join.max_held_engagements", j.max_held_engagements),
            ("join.max_dedup_keys", j.max_dedup_keys),
            ("limits.max_results", self.limits.max_results),
            ("labels.max_experiments", self.labels.max_experiments),
            ("labels.max_variants", self.labels.max_variants),
            ("state.keep_checkpoints", self.state.keep_checkpoints),
        ] {
            if value == 0 {
                return Err(invalid(key, "must be at least 1"));
            }
        }
        if self.limits.max_message_bytes < 64 {
            return Err(invalid("limits.max_message_bytes", "must be at least 64: no valid event is smaller"));
        }
        let m = &self.metrics;
        if m.cutoffs.is_empty() {
            return Err(invalid("metrics.cutoffs", "must list at least one k"));
        }
        let mut seen = std::collections::BTreeSet::new();
        for &c in &m.cutoffs {
            if c == 0 {
                return Err(invalid("metrics.cutoffs", "every k must be at least 1"));
            }
            if !seen.insert(c) {
                return Err(invalid("metrics.cutoffs", format!("k = {c} is listed twice")));
            }
        }
        let mut seen = std::collections::BTreeSet::new();
        for w in &m.windows {
            if w.as_millis_i64() == 0 {
                return Err(invalid("metrics.windows", "every window size must be positive"));
            }
            if !seen.insert(*w) {
                return Err(invalid("metrics.windows", format!("window {w} is listed twice")));
            }
        }
        if m.relevance_threshold == 0 {
            return Err(invalid(
                "metrics.relevance_threshold",
                "must be at least 1: with 0 every shown result, engaged or not, would be relevant",
            ));
        }
        for (action, &gain) in &m.action_gains {
            if action.is_empty() {
                return Err(invalid("metrics.action_gains", "action names must not be empty"));
            }
            if gain > MAX_GAIN {
                return Err(invalid(
                    format!("metrics.action_gains.{action}"),
                    format!("gain {gain} is above the maximum {MAX_GAIN}"),
                ));
            }
        }
        let max_gain = m.action_gains.values().copied().max().unwrap_or(0);
        if max_gain < m.relevance_threshold {
            return Err(invalid(
                "metrics.relevance_threshold",
                format!("is {} but the largest gain in metrics.action_gains is {max_gain}: no result could ever be relevant", m.relevance_threshold),
            ));
        }
        // A retired label group must have nothing left open: no pending impression (attribution
        // window plus disorder) and no open window (largest window size).
        let largest_window = m.windows.iter().map(|w| w.as_millis_i64()).max().unwrap_or(0);
        let needed = j.attribution_window.as_millis_i64() + j.max_out_of_orderness.as_millis_i64() + largest_window;
        if self.labels.idle_expiry.as_millis_i64() <= needed {
            return Err(invalid(
                "labels.idle_expiry",
                format!(
                    "is {} but must exceed join.attribution_window + join.max_out_of_orderness + the largest of metrics.windows ({}), so that a retired experiment has nothing left open",
                    self.labels.idle_expiry,
                    crate::time::HumanDuration::from_millis(needed as u64)
                ),
            ));
        }
        self.validate_ab()?;
        self.listen_addr()?;
        Ok(())
    }

    fn validate_ab(&self) -> Result<(), ConfigError> {
        let ab = &self.ab;
        if !(ab.confidence > 0.0 && ab.confidence < 1.0) {
            return Err(invalid(
                "ab.confidence",
                format!("is {} but must lie strictly between 0 and 1", ab.confidence),
            ));
        }
        if ab.unit_buckets < 2 {
            return Err(invalid("ab.unit_buckets", "must be at least 2: a variance needs two buckets"));
        }
        if ab.control.trim().is_empty() {
            return Err(invalid("ab.control", "must name a variant"));
        }
        if ab.output_topic == self.kafka.impressions_topic || ab.output_topic == self.kafka.engagements_topic {
            return Err(invalid("ab.output_topic", "must differ from the input topics"));
        }
        for (name, experiment) in &ab.experiments {
            let key = |k: &str| format!("ab.experiments.{name}.{k}");
            if experiment.split.is_empty() {
                continue;
            }
            if experiment.split.len() < 2 {
                return Err(invalid(key("split"), "needs at least two variants"));
            }
            for (variant, share) in &experiment.split {
                if !(*share > 0.0 && *share < 1.0) {
                    return Err(invalid(
                        format!("{}.{variant}", key("split")),
                        format!("share {share} must lie between 0 and 1"),
                    ));
                }
            }
            let total: f64 = experiment.split.values().sum();
            if (total - 1.0).abs() > 1e-6 {
                return Err(invalid(key("split"), format!("shares sum to {total}, not 1")));
            }
            let control = ab.control_of(name);
            if !experiment.split.contains_key(control) {
                return Err(invalid(key("split"), format!("does not list the control variant {control:?}")));
            }
        }
        Ok(())
    }

    /// The parsed `http.listen` address.
    pub fn listen_addr(&self) -> Result<SocketAddr, ConfigError> {
        self.http.listen.parse().map_err(|e| {
            invalid("http.listen", format!("{:?} is not an address like 0.0.0.0:9464 ({e})", self.http.listen))
        })
    }

    /// The effective configuration as TOML, for `check-config`.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("configuration always serializes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::from_toml_with_env(text, "test.toml", std::iter::empty())
    }

    #[test]
    fn empty_file_gives_contract_defaults() {
        let cfg = parse("").unwrap();
        assert_eq!(cfg, Config::default());
        assert_eq!(cfg.kafka.impressions_topic, "search-impressions");
        assert_eq!(cfg.join.attribution_window.as_millis_i64(), 1_800_000);
        assert_eq!(cfg.metrics.cutoffs, vec![1, 3, 5, 10]);
        assert_eq!(cfg.metrics.action_gains["purchase"], 3);
        assert_eq!(cfg.http.listen, "0.0.0.0:9464");
    }

    #[test]
    fn shipped_default_file_equals_built_in_defaults() {
        let text = include_str!("../config/rankpulse.toml");
        assert_eq!(parse(text).unwrap(), Config::default());
    }

    #[test]
    fn effective_config_round_trips() {
        let cfg = parse("[join]\nattribution_window = \"90s\"\n").unwrap();
        assert_eq!(parse(&cfg.to_toml()).unwrap(), cfg);
    }

    #[test]
    fn unknown_keys_are_refused_with_their_name() {
        let err = parse("[join]\nattribution_windo = \"5m\"\n").unwrap_err().to_string();
        assert!(err.contains("attribution_windo"), "{err}");
    }

    #[test]
    fn cross_field_errors_name_the_key() {
        let cases = [
            ("[metrics]\ncutoffs = []", "metrics.cutoffs"),
            ("[metrics]\ncutoffs = [0]", "metrics.cutoffs"),
            ("[metrics]\ncutoffs = [3, 3]", "metrics.cutoffs"),
            ("[metrics]\nrelevance_threshold = 0", "metrics.relevance_threshold"),
            ("[metrics]\nrelevance_threshold = 4", "metrics.relevance_threshold"),
            ("[metrics.action_gains]\nclick = 31", "metrics.action_gains.click"),
            ("[join]\nattribution_window = \"0s\"", "join.attribution_window"),
            ("[join]\nattribution_window = \"5 minutes\"", "invalid duration"),
            ("[ab]\nconfidence = 1.0", "ab.confidence"),
            ("[ab]\nunit_buckets = 1", "ab.unit_buckets"),
            ("[ab]\noutput_topic = \"search-impressions\"", "ab.output_topic"),
            ("[ab.experiments.e]\nsplit = { control = 0.5, t = 0.4 }", "ab.experiments.e.split"),
            ("[ab.experiments.e]\nsplit = { a = 0.5, b = 0.5 }", "ab.experiments.e.split"),
            ("[ab.experiments.e]\nsplit = { control = 1.5, t = -0.5 }", "ab.experiments.e.split.control"),
            ("[kafka]\nengagements_topic = \"search-impressions\"", "kafka.engagements_topic"),
            ("[kafka.properties]\n\"enable.auto.commit\" = \"true\"", "enable.auto.commit"),
            ("[http]\nlisten = \"nowhere\"", "http.listen"),
            ("[metrics]\nwindows = [\"1m\", \"60s\"]", "metrics.windows"),
            ("[join]\nmax_pending_impressions = 0", "join.max_pending_impressions"),
            ("[limits]\nmax_message_bytes = 10", "limits.max_message_bytes"),
            ("[labels]\nidle_expiry = \"1h\"", "labels.idle_expiry"),
            ("[labels]\nmax_variants = 0", "labels.max_variants"),
        ];
        for (text, needle) in cases {
            let err = parse(text).expect_err(text).to_string();
            assert!(err.contains(needle), "{text:?} gave {err:?}, expected it to mention {needle}");
        }
    }

    #[test]
    fn environment_overrides_file() {
        let env = [
            ("RANKPULSE__KAFKA__BROKERS".to_string(), "b1:9092,b2:9092".to_string()),
            ("RANKPULSE__JOIN__ATTRIBUTION_WINDOW".to_string(), "5m".to_string()),
            ("RANKPULSE__METRICS__CUTOFFS".to_string(), "1,10".to_string()),
            ("UNRELATED".to_string(), "x".to_string()),
        ];
        let cfg = Config::from_toml_with_env("[kafka]\nbrokers = \"file:9092\"\n", "t", env).unwrap();
        assert_eq!(cfg.kafka.brokers, "b1:9092,b2:9092");
        assert_eq!(cfg.join.attribution_window.as_millis_i64(), 300_000);
        assert_eq!(cfg.metrics.cutoffs, vec![1, 10]);
    }

    #[test]
    fn input_formats_and_ubi_keys() {
        let cfg = parse("[kafka]\nimpressions_format = \"ubi\"\n[ubi]\nexperiment_key = \"ab_test\"\n").unwrap();
        assert_eq!((cfg.kafka.impressions_format, cfg.kafka.engagements_format), (InputFormat::Ubi, InputFormat::Json));
        assert_eq!((cfg.ubi.experiment_key.as_str(), cfg.ubi.variant_key.as_str()), ("ab_test", "variant"));
        let env = [("RANKPULSE__KAFKA__ENGAGEMENTS_FORMAT".to_string(), "ubi".to_string())];
        let cfg = Config::from_toml_with_env("", "t", env).unwrap();
        assert_eq!(cfg.kafka.engagements_format, InputFormat::Ubi);
        for (text, needle) in [
            ("[kafka]\nimpressions_format = \"avro\"", "impressions_format"),
            ("[ubi]\nexperiment_key = \"\"", "ubi.experiment_key"),
            ("[ubi]\nvariant_key = \"experiment\"", "ubi.variant_key"),
            ("[ubi]\nsession_key = \"s\"", "session_key"),
        ] {
            let err = parse(text).expect_err(text).to_string();
            assert!(err.contains(needle), "{text:?} gave {err:?}, expected it to mention {needle}");
        }
    }
}
