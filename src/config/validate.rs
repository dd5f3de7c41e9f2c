//! The cross-field rules serde cannot express, each refusal naming the key it is about.

use std::net::SocketAddr;

use super::ab::MAX_DIMENSIONS;
use super::{ClientAuthType, Config, ConfigError, Reads};
use crate::metrics::MAX_GAIN;

/// librdkafka properties rankpulse sets itself, because its offset handling depends on them.
const MANAGED_KAFKA_PROPERTIES: &[&str] = &[
    "bootstrap.servers",
    "group.id",
    "group.instance.id",
    "enable.auto.commit",
    "enable.auto.offset.store",
    "partition.assignment.strategy",
];

/// The refusal of one key's value: every message of a failed check names the key it is about.
pub(super) fn invalid(key: impl Into<String>, problem: impl Into<String>) -> ConfigError {
    ConfigError::Invalid { key: key.into(), problem: problem.into() }
}

impl Config {
    /// Cross-field checks that serde cannot express. Run at start-up by every command.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_for(Reads::Topics)
    }

    /// [`Config::validate`] for a command that reads its events from `reads`: only a command
    /// reading topics needs a schema source for Avro and Protobuf inputs.
    pub fn validate_for(&self, reads: Reads) -> Result<(), ConfigError> {
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
        for (table, path_kind) in [("properties_from_file", "a file path"), ("properties_from_env", "a variable name")]
        {
            let sources =
                if table == "properties_from_file" { &k.properties_from_file } else { &k.properties_from_env };
            for (property, source) in sources {
                if source.trim().is_empty() {
                    return Err(invalid(format!("kafka.{table}.\"{property}\""), format!("must be {path_kind}")));
                }
                if k.properties.contains_key(property) {
                    return Err(invalid(
                        format!("kafka.{table}.\"{property}\""),
                        format!("is also set in kafka.properties; give {property} one source"),
                    ));
                }
            }
        }
        if let Some(property) = k.properties_from_file.keys().find(|p| k.properties_from_env.contains_key(*p)) {
            return Err(invalid(
                format!("kafka.properties_from_env.\"{property}\""),
                format!("is also set in kafka.properties_from_file; give {property} one source"),
            ));
        }
        let every_property =
            k.properties.keys().chain(k.properties_from_file.keys()).chain(k.properties_from_env.keys());
        for managed in MANAGED_KAFKA_PROPERTIES {
            if every_property.clone().any(|p| p == managed) {
                return Err(invalid(
                    format!("kafka.properties.\"{managed}\""),
                    "is set by rankpulse itself (offsets are stored only after processing, and partition n of both topics must be assigned together); use kafka.brokers / kafka.group_id / kafka.group_instance_id instead",
                ));
            }
        }
        if !cfg!(feature = "oidc") {
            if let Some(method) = k.properties.get("sasl.oauthbearer.method").filter(|m| m.eq_ignore_ascii_case("oidc"))
            {
                return Err(invalid(
                    "kafka.properties.\"sasl.oauthbearer.method\"",
                    format!("`{method}` needs librdkafka's libcurl, which this rankpulse was built without: build with `cargo build --release --features oidc` (needs libcurl4-openssl-dev and pkg-config), or use the Docker image, which has it"),
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
        if self.state.changelog_replication_factor < 1 {
            return Err(invalid("state.changelog_replication_factor", "must be at least 1"));
        }
        let changelog = self.state.changelog_topic(&k.group_id);
        if [&k.impressions_topic, &k.engagements_topic, &self.ab.output_topic].contains(&&changelog) {
            return Err(invalid("state.changelog_topic", format!("{changelog:?} is already an input or output topic")));
        }
        let aggregates = self.state.aggregates_topic(&k.group_id);
        if [&k.impressions_topic, &k.engagements_topic, &self.ab.output_topic, &changelog].contains(&&aggregates) {
            return Err(invalid(
                "state.aggregates_topic",
                format!("{aggregates:?} is already an input, output or changelog topic"),
            ));
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
        self.validate_interleaving()?;
        self.validate_judgments()?;
        super::inputs::validate(self, reads)?;
        self.validate_repartition()?;
        self.clicks.validate()?;
        self.validate_ips()?;
        self.listen_addr()?;
        self.validate_http()?;
        Ok(())
    }

    /// `clicks.propensities` with `clicks.clip` and `metrics.cutoffs`: one impression's
    /// `ips_clicks@k` (a click at every weighted rank within the largest cutoff) must stay within
    /// [`crate::metrics::MAX_IMPRESSION_VALUE`], what the exact sums hold; the error says which
    /// clip would do.
    fn validate_ips(&self) -> Result<(), ConfigError> {
        let c = &self.clicks;
        let Some(&k) = self.metrics.cutoffs.iter().max() else { return Ok(()) };
        let propensities =
            crate::clicks::ips::Propensities { relative: c.propensities.clone(), covariance: Vec::new(), clip: c.clip };
        let bound = crate::metrics::MAX_IMPRESSION_VALUE;
        let largest = propensities.largest_sum(k as usize);
        if largest <= bound {
            return Ok(());
        }
        let remedy = match propensities.smallest_clip_within(k as usize, bound) {
            Some(clip) => format!("set clicks.clip to at least {clip}"),
            None => "list fewer ranks in clicks.propensities".to_string(),
        };
        Err(invalid(
            "clicks.clip",
            format!(
                "is {} but with clicks.propensities as given, one impression's ips_clicks@{k} (a click at every rank) would weigh {largest:.6e}, above the {bound} rankpulse sums exactly: {remedy}",
                c.clip
            ),
        ))
    }

    /// `[repartition]`: sizes, and internal topic names that clash with no other topic.
    fn validate_repartition(&self) -> Result<(), ConfigError> {
        let r = &self.repartition;
        if r.replication_factor < 1 {
            return Err(invalid("repartition.replication_factor", "must be at least 1"));
        }
        if r.retention.as_millis_i64() == 0 {
            return Err(invalid("repartition.retention", "must be positive"));
        }
        if r.partitions > 100_000 {
            return Err(invalid("repartition.partitions", "must be at most 100000 (0 takes the inputs' larger count)"));
        }
        let k = &self.kafka;
        let others = [
            &k.impressions_topic,
            &k.engagements_topic,
            &self.ab.output_topic,
            &self.state.changelog_topic(&k.group_id),
            &self.state.aggregates_topic(&k.group_id),
        ];
        for input in ["impressions", "engagements"] {
            let internal = crate::config::RepartitionConfig::topic(&k.group_id, input);
            if others.contains(&&internal) {
                return Err(invalid(
                    "kafka.group_id",
                    format!("the repartition topic {internal:?} it names is already an input, output or state topic"),
                ));
            }
        }
        Ok(())
    }

    /// `[http]`'s TLS and credentials. Only the settings: whether the files exist and parse
    /// is checked where they are loaded (the HTTP server's start, and `check-config`).
    /// A refusal never quotes a `basic_auth_users` value: it may be a plain password.
    fn validate_http(&self) -> Result<(), ConfigError> {
        let tls = &self.http.tls_server_config;
        const TLS: &str = "http.tls_server_config";
        if tls.cert_file.is_empty() && !tls.key_file.is_empty() {
            return Err(invalid(format!("{TLS}.cert_file"), format!("must be set with {TLS}.key_file")));
        }
        if !tls.cert_file.is_empty() && tls.key_file.is_empty() {
            return Err(invalid(format!("{TLS}.key_file"), format!("must be set with {TLS}.cert_file")));
        }
        let client_auth = tls.client_auth_type;
        if !tls.enabled() && (client_auth != ClientAuthType::NoClientCert || !tls.client_ca_file.is_empty()) {
            return Err(invalid(
                format!("{TLS}.cert_file"),
                "client certificates need TLS: set cert_file and key_file, or remove client_auth_type and client_ca_file",
            ));
        }
        match client_auth {
            ClientAuthType::RequestClientCert | ClientAuthType::RequireAnyClientCert => {
                return Err(invalid(
                    format!("{TLS}.client_auth_type"),
                    format!(
                        "{} is not supported (it accepts certificates nobody verified); use VerifyClientCertIfGiven or RequireAndVerifyClientCert with client_ca_file",
                        client_auth.name()
                    ),
                ));
            }
            ClientAuthType::VerifyClientCertIfGiven | ClientAuthType::RequireAndVerifyClientCert
                if tls.client_ca_file.is_empty() =>
            {
                return Err(invalid(
                    format!("{TLS}.client_ca_file"),
                    format!(
                        "is required with client_auth_type = {:?}: the CA client certificates are verified against",
                        client_auth.name()
                    ),
                ));
            }
            ClientAuthType::NoClientCert if !tls.client_ca_file.is_empty() => {
                return Err(invalid(
                    format!("{TLS}.client_auth_type"),
                    "is NoClientCert but client_ca_file is set: client certificates would not be checked; use VerifyClientCertIfGiven or RequireAndVerifyClientCert",
                ));
            }
            _ => {}
        }
        for (user, hash) in &self.http.basic_auth_users {
            let key = format!("http.basic_auth_users.{user}");
            if user.is_empty() || user.contains(':') {
                return Err(invalid(
                    key,
                    "a user name must not be empty nor contain ':' (basic auth separates user and password with it)",
                ));
            }
            if !is_bcrypt_hash(hash) {
                // Not `hash` itself: a plain password here must not reach a log or a terminal.
                return Err(invalid(
                    key,
                    "is not a bcrypt hash ($2a$, $2b$ or $2y$, a cost 04-31, then 53 characters): plain passwords are refused; make one with `htpasswd -nbBC 10 \"\" PASSWORD | tr -d ':\\n'`",
                ));
            }
        }
        Ok(())
    }

    fn validate_interleaving(&self) -> Result<(), ConfigError> {
        let rankers = self.interleaving.max_rankers;
        if rankers == 1 || rankers > crate::interleaving::MAX_RANKERS {
            return Err(invalid(
                "interleaving.max_rankers",
                format!(
                    "is {rankers} but must be 0 (off) or from 2 to {}: an interleaved list compares at least two rankers, and a result names its ranker in 3 bits",
                    crate::interleaving::MAX_RANKERS
                ),
            ));
        }
        Ok(())
    }

    fn validate_judgments(&self) -> Result<(), ConfigError> {
        let j = &self.judgments;
        if j.max_grade == 0 || j.max_grade > crate::metrics::MAX_GAIN {
            return Err(invalid(
                "judgments.max_grade",
                format!("is {} but must be from 1 to {}", j.max_grade, crate::metrics::MAX_GAIN),
            ));
        }
        if j.relevance_threshold == 0 || j.relevance_threshold > j.max_grade {
            return Err(invalid(
                "judgments.relevance_threshold",
                format!(
                    "is {} but must be from 1 to judgments.max_grade = {}: 0 would make every judged result relevant",
                    j.relevance_threshold, j.max_grade
                ),
            ));
        }
        if !(0.0..=1.0).contains(&j.max_rejected_share) {
            return Err(invalid(
                "judgments.max_rejected_share",
                format!("is {} but must be a share from 0 to 1", j.max_rejected_share),
            ));
        }
        if j.reload_interval.as_millis_i64() < 100 {
            return Err(invalid("judgments.reload_interval", "must be at least 100ms".to_string()));
        }
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
        if !(ab.sequential_sample_size >= 1.0 && ab.sequential_sample_size.is_finite()) {
            return Err(invalid(
                "ab.sequential_sample_size",
                format!("is {} but must be a number of impressions, at least 1", ab.sequential_sample_size),
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
        for (i, dimension) in ab.dimensions.iter().enumerate() {
            if dimension.trim().is_empty() || dimension.contains(['\u{1e}', '\u{1f}']) {
                return Err(invalid("ab.dimensions", format!("{dimension:?} is not a field name")));
            }
            if ab.dimensions.iter().take(i).any(|d| d == dimension) {
                return Err(invalid("ab.dimensions", format!("names {dimension:?} twice")));
            }
        }
        if ab.dimensions.len() > MAX_DIMENSIONS {
            return Err(invalid(
                "ab.dimensions",
                format!("names {} fields; at most {MAX_DIMENSIONS}", ab.dimensions.len()),
            ));
        }
        if ab.max_dimension_values == 0 {
            return Err(invalid("ab.max_dimension_values", "must be at least 1"));
        }
        if ab.max_queries == 0 {
            return Err(invalid("ab.max_queries", "must be at least 1"));
        }
        if ab.min_dimension_impressions < 2 {
            return Err(invalid(
                "ab.min_dimension_impressions",
                "must be at least 2: a variance needs two impressions",
            ));
        }
        let metric_keys: Vec<String> = crate::metrics::MetricLayout::new(&self.metrics.cutoffs, 1, 1)
            .with_ips(&self.clicks.propensities, self.clicks.clip)
            .keys()
            .iter()
            .map(|k| k.name())
            .collect();
        ab.validate_readout(&metric_keys)?;
        self.page.validate(&metric_keys)
    }

    /// The parsed `http.listen` address.
    pub fn listen_addr(&self) -> Result<SocketAddr, ConfigError> {
        self.http.listen.parse().map_err(|e| {
            invalid("http.listen", format!("{:?} is not an address like 0.0.0.0:9464 ({e})", self.http.listen))
        })
    }
}

/// Whether `value` is written like a bcrypt hash: `$2a$`, `$2b$` or `$2y$`, a two-digit cost
/// from 04 to 31, `$`, then 53 characters of bcrypt's base64 (22 of salt, 31 of hash).
fn is_bcrypt_hash(value: &str) -> bool {
    let bytes = value.as_bytes();
    let Some(rest) = ["$2a$", "$2b$", "$2y$"].iter().find_map(|prefix| value.strip_prefix(prefix)) else {
        return false;
    };
    let cost_ok = rest.get(..2).and_then(|c| c.parse::<u32>().ok()).is_some_and(|c| (4..=31).contains(&c))
        && rest.as_bytes().get(..2).is_some_and(|c| c.iter().all(u8::is_ascii_digit));
    bytes.len() == 60
        && cost_ok
        && rest.as_bytes().get(2) == Some(&b'$')
        && rest
            .as_bytes()
            .get(3..)
            .is_some_and(|h| h.iter().all(|&b| b.is_ascii_alphanumeric() || b == b'.' || b == b'/'))
}

#[cfg(test)]
mod tests {
    use super::super::load::tests::parse;
    use super::is_bcrypt_hash;

    /// Without the `oidc` feature, an OIDC configuration is refused at start, saying how to get
    /// it, rather than by librdkafka when the first client is built.
    #[cfg(not(feature = "oidc"))]
    #[test]
    fn oidc_without_its_feature_is_refused_saying_how_to_build_it() {
        let err = parse(
            "[kafka.properties]\n\"sasl.mechanisms\" = \"OAUTHBEARER\"\n\"sasl.oauthbearer.method\" = \"OIDC\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("sasl.oauthbearer.method") && err.contains("--features oidc"), "{err}");
        parse("[kafka.properties]\n\"sasl.mechanisms\" = \"OAUTHBEARER\"\n\"sasl.oauthbearer.method\" = \"default\"\n")
            .unwrap();
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
            ("[ab]\nguardrails = [\"latency\"]", "ab.guardrails"),
            ("[ab.cuped]\nmetrics = [\"mrr\"]", "ab.cuped.metrics"),
            ("[ab]\nunit = \"client_id\"\n[ab.cuped]\nmetrics = [\"mrr\"]\nlookback_days = 0", "ab.cuped.lookback_days"),
            ("[ab]\npower = 1.0", "ab.power"),
            ("[ab]\ndimensions = [\"device\", \"device\"]", "ab.dimensions"),
            ("[ab]\ndimensions = [\"\"]", "ab.dimensions"),
            ("[ab]\nmax_dimension_values = 0", "ab.max_dimension_values"),
            ("[ab]\nmin_dimension_impressions = 1", "ab.min_dimension_impressions"),
            ("[ab]\ntarget_mde = 0", "ab.target_mde"),
            ("[ab.bayesian]\nprior_stddev = -1", "ab.bayesian.prior_stddev"),
            ("[ab]\nunit_buckets = 1", "ab.unit_buckets"),
            ("[ab]\nsequential_sample_size = 0", "ab.sequential_sample_size"),
            ("[ab]\noutput_topic = \"search-impressions\"", "ab.output_topic"),
            ("[ab.experiments.e]\nsplit = { control = 0.5, t = 0.4 }", "ab.experiments.e.split"),
            ("[ab.experiments.e]\nsplit = { a = 0.5, b = 0.5 }", "ab.experiments.e.split"),
            ("[ab.experiments.e]\nsplit = { control = 1.5, t = -0.5 }", "ab.experiments.e.split.control"),
            ("[kafka]\nengagements_topic = \"search-impressions\"", "kafka.engagements_topic"),
            ("[repartition]\nreplication_factor = 0", "repartition.replication_factor"),
            ("[repartition]\nretention = \"0s\"", "repartition.retention"),
            ("[repartition]\npartitions = 1000000", "repartition.partitions"),
            ("[repartition]\nmode = \"sometimes\"", "unknown variant `sometimes`"),
            ("[kafka]\ngroup_id = \"g\"\nimpressions_topic = \"g-engagements-repartition\"", "kafka.group_id"),
            ("[kafka.properties]\n\"enable.auto.commit\" = \"true\"", "enable.auto.commit"),
            ("[kafka.properties_from_env]\n\"group.id\" = \"GROUP\"", "kafka.properties.\"group.id\""),
            ("[kafka.properties_from_file]\n\"sasl.password\" = \"\"", "kafka.properties_from_file.\"sasl.password\""),
            (
                "[kafka.properties]\n\"sasl.password\" = \"x\"\n[kafka.properties_from_env]\n\"sasl.password\" = \"P\"",
                "kafka.properties_from_env.\"sasl.password\"",
            ),
            (
                "[kafka.properties_from_file]\n\"sasl.password\" = \"/p\"\n[kafka.properties_from_env]\n\"sasl.password\" = \"P\"",
                "kafka.properties_from_env.\"sasl.password\"",
            ),
            ("[http]\nlisten = \"nowhere\"", "http.listen"),
            ("[metrics]\nwindows = [\"1m\", \"60s\"]", "metrics.windows"),
            ("[join]\nmax_pending_impressions = 0", "join.max_pending_impressions"),
            ("[limits]\nmax_message_bytes = 10", "limits.max_message_bytes"),
            ("[labels]\nidle_expiry = \"1h\"", "labels.idle_expiry"),
            ("[labels]\nmax_variants = 0", "labels.max_variants"),
            ("[interleaving]\nmax_rankers = 1", "interleaving.max_rankers"),
            ("[interleaving]\nmax_rankers = 8", "interleaving.max_rankers"),
            ("[interleaving]\ncredit = \"views\"", "credit"),
            ("[judgments]\nmax_grade = 31", "judgments.max_grade"),
            ("[judgments]\nrelevance_threshold = 4", "judgments.relevance_threshold"),
            ("[judgments]\nrelevance_threshold = 0", "judgments.relevance_threshold"),
            ("[judgments]\nmax_rejected_share = 2.0", "judgments.max_rejected_share"),
            ("[judgments]\nreload_interval = \"10ms\"", "judgments.reload_interval"),
            ("[judgments]\nkey = \"user\"", "key"),
        ];
        for (text, needle) in cases {
            let err = parse(text).expect_err(text).to_string();
            assert!(err.contains(needle), "{text:?} gave {err:?}, expected it to mention {needle}");
        }
    }

    /// Click weights whose sum within the largest cutoff exceeds what the sums hold exactly are
    /// refused, naming the clip that would do; at that clip they are accepted.
    #[test]
    fn inverse_propensity_weights_beyond_the_exact_sums_are_refused() {
        let config = |clip: &str| {
            format!("[metrics]\ncutoffs = [5, 10]\n[clicks]\npropensities = [1.0, 1e-9, 1e-9, 1e-9, 1e-9, 1e-9, 1e-9, 1e-9, 1e-9, 1e-9]\nclip = {clip}")
        };
        let err = parse(&config("0.0")).unwrap_err().to_string();
        assert!(err.contains("clicks.clip") && err.contains("ips_clicks@10"), "{err}");
        // 1 + 9 / τ ≤ 32768 from τ = 9 / 32767 = 0.000274666..., written 0.000275.
        assert!(err.contains("set clicks.clip to at least 0.000275"), "{err}");
        parse(&config("0.000275")).unwrap();
        parse(&config("0.000274")).unwrap_err();
        // A single rank's weight alone can be too much.
        let err = parse("[clicks]\npropensities = [1e-6]").unwrap_err().to_string();
        assert!(err.contains("at least 0.0000306") || err.contains("at least 3.06e-5"), "{err}");
    }

    /// A real bcrypt hash (cost 4) of "secret".
    const HASH: &str = "$2b$04$w5B6m9WzWZqIs7GrVcX7peXWwMpCDCrb.FKlfKabvtxn85RiTkJc6";

    #[test]
    fn bcrypt_hashes_are_told_from_anything_else() {
        assert!(is_bcrypt_hash(HASH));
        for prefix in ["$2a$", "$2y$"] {
            assert!(is_bcrypt_hash(&HASH.replacen("$2b$", prefix, 1)));
        }
        for not_a_hash in [
            "secret",
            "",
            &HASH[..59],
            &format!("{HASH}x"),
            &HASH.replacen("$2b$", "$2x$", 1),
            &HASH.replacen("$04$", "$03$", 1),
            &HASH.replacen("$04$", "$32$", 1),
            &HASH.replacen("$04$", "$4a$", 1),
            &HASH.replacen('w', "!", 1),
            "{SHA}5en6G6MezRroT3XKqkdPOmY/BfQ=",
        ] {
            assert!(!is_bcrypt_hash(not_a_hash), "{not_a_hash:?}");
        }
    }

    #[test]
    fn http_security_errors_name_the_key_and_never_echo_a_password() {
        let tls = "[http.tls_server_config]\n";
        let cases = [
            (format!("{tls}cert_file = \"c.pem\""), "http.tls_server_config.key_file"),
            (format!("{tls}key_file = \"k.pem\""), "http.tls_server_config.cert_file"),
            (format!("{tls}client_auth_type = \"RequireAndVerifyClientCert\""), "http.tls_server_config.cert_file"),
            (format!("{tls}client_ca_file = \"ca.pem\""), "http.tls_server_config.cert_file"),
            (
                format!("{tls}cert_file = \"c\"\nkey_file = \"k\"\nclient_auth_type = \"RequireAndVerifyClientCert\""),
                "http.tls_server_config.client_ca_file",
            ),
            (
                format!("{tls}cert_file = \"c\"\nkey_file = \"k\"\nclient_auth_type = \"VerifyClientCertIfGiven\""),
                "http.tls_server_config.client_ca_file",
            ),
            (
                format!("{tls}cert_file = \"c\"\nkey_file = \"k\"\nclient_auth_type = \"RequireAnyClientCert\""),
                "RequireAnyClientCert is not supported",
            ),
            (
                format!("{tls}cert_file = \"c\"\nkey_file = \"k\"\nclient_auth_type = \"RequestClientCert\"\nclient_ca_file = \"ca\""),
                "http.tls_server_config.client_auth_type",
            ),
            (
                format!("{tls}cert_file = \"c\"\nkey_file = \"k\"\nclient_ca_file = \"ca\""),
                "http.tls_server_config.client_auth_type",
            ),
            (format!("{tls}client_auth_type = \"VerifyClientCert\""), "client_auth_type"),
            (format!("{tls}min_version = \"TLS13\""), "min_version"),
            ("[http.basic_auth_users]\nprometheus = \"hunter2-plain\"".to_string(), "http.basic_auth_users.prometheus"),
            (format!("[http.basic_auth_users]\n\"a:b\" = \"{HASH}\""), "http.basic_auth_users.a:b"),
        ];
        for (text, needle) in cases {
            let err = parse(&text).expect_err(&text).to_string();
            assert!(err.contains(needle), "{text:?} gave {err:?}, expected it to mention {needle}");
            assert!(!err.contains("hunter2"), "the refusal quotes the password: {err}");
        }
        let ok = format!(
            "[http]\nbearer_token_file = \"/run/secrets/token\"\n{tls}cert_file = \"c\"\nkey_file = \"k\"\nclient_auth_type = \"VerifyClientCertIfGiven\"\nclient_ca_file = \"ca\"\n[http.basic_auth_users]\nprometheus = \"{HASH}\"\n"
        );
        let cfg = parse(&ok).unwrap();
        assert!(cfg.http.auth_enabled() && cfg.http.tls_server_config.enabled());
        assert_eq!(cfg.http.basic_auth_users["prometheus"], HASH);
    }

    #[test]
    fn the_printed_configuration_shows_no_hash() {
        let cfg = parse(&format!("[http.basic_auth_users]\nPrometheus = \"{HASH}\"\n")).unwrap();
        assert_eq!(cfg.http.basic_auth_users.keys().collect::<Vec<_>>(), ["Prometheus"], "user names keep their case");
        let printed = cfg.to_toml();
        assert!(!printed.contains(HASH) && printed.contains(crate::config::REDACTED_HASH), "{printed}");
        let debugged = format!("{cfg:?}");
        assert!(!debugged.contains(HASH) && debugged.contains("Prometheus"), "{debugged}");
    }
}
