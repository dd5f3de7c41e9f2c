//! The librdkafka configuration of every Kafka client rankpulse creates: which `[kafka]`
//! properties a client of each role gets, where secrets come from, how a refused property is
//! reported (naming the key, never a secret's value), and `check-config`'s dry run that builds
//! each client without connecting.
//!
//! One table of properties serves the consumer, the state clients and the producers, so the
//! security settings written once apply to all of them. Secrets may stay out of the file: a
//! property's value can be read from a file (`[kafka.properties_from_file]`, for Kubernetes
//! Secret mounts) or an environment variable (`[kafka.properties_from_env]`), at the moment each
//! client is built, so a rotated secret is picked up by the next start.

use std::collections::BTreeMap;
use std::sync::Mutex;

use rdkafka::client::ClientContext;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, DeliveryResult, Producer, ProducerContext};

use super::KafkaConfig;

/// The two kinds of librdkafka client: each reads only the properties of its kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientRole {
    /// The input consumer and the state readers.
    Consumer,
    /// The A/B output producer, the state writers and the admin client.
    Producer,
}

impl ClientRole {
    fn label(self) -> &'static str {
        match self {
            ClientRole::Consumer => "consumer",
            ClientRole::Producer => "producer",
        }
    }
}

/// librdkafka properties that only consumers read (scope `C` in librdkafka 2.12's
/// CONFIGURATION.md): a producer given one logs a CONFWARN line at start.
const CONSUMER_ONLY_PROPERTIES: &[&str] = &[
    "auto.commit.enable",
    "auto.commit.interval.ms",
    "auto.offset.reset",
    "check.crcs",
    "consume.callback.max.messages",
    "coordinator.query.interval.ms",
    "enable.auto.commit",
    "enable.auto.offset.store",
    "enable.partition.eof",
    "fetch.error.backoff.ms",
    "fetch.max.bytes",
    "fetch.message.max.bytes",
    "fetch.min.bytes",
    "fetch.queue.backoff.ms",
    "fetch.wait.max.ms",
    "group.id",
    "group.instance.id",
    "group.protocol",
    "group.protocol.type",
    "group.remote.assignor",
    "heartbeat.interval.ms",
    "isolation.level",
    "max.partition.fetch.bytes",
    "max.poll.interval.ms",
    "offset.store.method",
    "offset.store.path",
    "offset.store.sync.interval.ms",
    "partition.assignment.strategy",
    "queued.max.messages.kbytes",
    "queued.min.messages",
    "session.timeout.ms",
];

/// librdkafka properties that only producers read (scope `P`), likewise.
const PRODUCER_ONLY_PROPERTIES: &[&str] = &[
    "acks",
    "batch.num.messages",
    "batch.size",
    "compression.codec",
    "compression.level",
    "compression.type",
    "delivery.report.only.error",
    "delivery.timeout.ms",
    "enable.gapless.guarantee",
    "enable.idempotence",
    "linger.ms",
    "message.send.max.retries",
    "message.timeout.ms",
    "partitioner",
    "produce.offset.report",
    "queue.buffering.backpressure.threshold",
    "queue.buffering.max.kbytes",
    "queue.buffering.max.messages",
    "queue.buffering.max.ms",
    "queuing.strategy",
    "request.required.acks",
    "request.timeout.ms",
    "retries",
    "sticky.partitioning.linger.ms",
    "transaction.timeout.ms",
    "transactional.id",
];

/// Properties whose value is a secret (librdkafka flags them sensitive and redacts them in its
/// own dumps): never printed, logged or quoted in an error. librdkafka's sensitive list also has
/// names and file locations (`sasl.username`, `ssl.key.location`), which are not secret and
/// which an operator needs to see in `check-config`.
pub const SECRET_PROPERTIES: &[&str] = &[
    "sasl.password",
    "ssl.key.password",
    "ssl.keystore.password",
    "ssl.key.pem",
    "sasl.oauthbearer.client.secret",
    "sasl.oauthbearer.config",
    "sasl.oauthbearer.assertion.private.key.pem",
    "sasl.oauthbearer.assertion.private.key.passphrase",
];

/// What `check-config` prints instead of a secret's value.
pub const REDACTED: &str = "<redacted>";

/// The SASL mechanisms librdkafka implements (`sasl.mechanisms` takes exactly one). librdkafka
/// itself only refuses an unknown one when a client is created, and takes any `SCRAM-SHA-*`
/// until the first connection fails, so a misspelling is caught here, naming the key.
const SASL_MECHANISMS: &[&str] = &["GSSAPI", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"];

/// Whether a consumer with this configuration reads a partition without a committed offset
/// from its start (`auto.offset.reset`; librdkafka's default, `latest`, is not rankpulse's,
/// which sets `earliest` when the user did not choose).
pub fn reads_from_earliest(consumer: &ClientConfig) -> bool {
    matches!(consumer.get("auto.offset.reset"), None | Some("earliest" | "smallest" | "beginning"))
}

/// Whether `key`'s value must never be shown.
pub fn is_secret(key: &str) -> bool {
    SECRET_PROPERTIES.contains(&key)
}

/// A Kafka client configuration that cannot be built. Every message names the configuration
/// key at fault and never quotes a secret.
#[derive(Debug, thiserror::Error)]
pub enum KafkaClientError {
    /// A property's file (`[kafka.properties_from_file]`) cannot be read.
    #[error("configuration key `kafka.properties_from_file.\"{property}\"`: cannot read {path}: {error}")]
    SecretFile { property: String, path: String, error: std::io::Error },
    /// A property's environment variable (`[kafka.properties_from_env]`) is not set.
    #[error("configuration key `kafka.properties_from_env.\"{property}\"`: environment variable {variable} is not set (or not UTF-8)")]
    SecretEnv { property: String, variable: String },
    /// librdkafka refuses a property (unknown name, bad value, a feature not built in).
    #[error("configuration key `{key}`: {problem}")]
    Property { key: String, problem: String },
    /// librdkafka refuses the combination when it builds a client (a missing certificate file,
    /// a key that does not match its certificate, SASL without credentials). `key` is the
    /// configured property librdkafka's message names first, or else the first word of it shaped
    /// like a property name.
    #[error("configuration key `{key}`: librdkafka refuses the {role} configuration: {problem}")]
    Client { key: String, role: &'static str, problem: String },
}

impl KafkaConfig {
    /// `properties` for rankpulse's consumers: all but the producer-only ones, which a
    /// consumer would only warn about (one `[kafka.properties]` table serves every client).
    pub fn consumer_properties(&self) -> impl Iterator<Item = (&str, &str)> {
        self.properties_but(PRODUCER_ONLY_PROPERTIES)
    }

    /// `properties` for rankpulse's producers: all but the consumer-only ones.
    pub fn producer_properties(&self) -> impl Iterator<Item = (&str, &str)> {
        self.properties_but(CONSUMER_ONLY_PROPERTIES)
    }

    fn properties_but<'a>(&'a self, other_role: &'static [&'static str]) -> impl Iterator<Item = (&'a str, &'a str)> {
        self.properties
            .iter()
            .filter(move |(k, _)| !other_role.contains(&k.as_str()))
            .map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Where `property`'s value comes from, as a configuration key (for error messages).
    fn source_key(&self, property: &str) -> String {
        if self.properties_from_file.contains_key(property) {
            format!("kafka.properties_from_file.\"{property}\"")
        } else if self.properties_from_env.contains_key(property) {
            format!("kafka.properties_from_env.\"{property}\"")
        } else {
            format!("kafka.properties.\"{property}\"")
        }
    }

    /// The secrets of `[kafka.properties_from_file]` and `[kafka.properties_from_env]` (looked up
    /// with `env`), read now. A file's trailing newline (as `echo` and most secret stores leave
    /// it) is not part of the value.
    fn resolved_secrets(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<BTreeMap<&str, String>, KafkaClientError> {
        let mut values = BTreeMap::new();
        for (property, path) in &self.properties_from_file {
            let text = std::fs::read_to_string(path).map_err(|error| KafkaClientError::SecretFile {
                property: property.clone(),
                path: path.clone(),
                error,
            })?;
            values.insert(property.as_str(), text.trim_end_matches(['\n', '\r']).to_string());
        }
        for (property, variable) in &self.properties_from_env {
            let value = env(variable).ok_or_else(|| KafkaClientError::SecretEnv {
                property: property.clone(),
                variable: variable.clone(),
            })?;
            values.insert(property.as_str(), value);
        }
        Ok(values)
    }

    /// The configuration every client of `role` starts from: the brokers, the role's
    /// `[kafka.properties]` and the secrets. Each property is set on a native librdkafka
    /// configuration here, so an unknown name or a refused value fails now, naming the key.
    /// The caller adds what its client manages itself (group id, acks, ...).
    pub fn client_config(&self, role: ClientRole) -> Result<ClientConfig, KafkaClientError> {
        self.client_config_with_env(role, &|variable| std::env::var(variable).ok())
    }

    /// [`KafkaConfig::client_config`] with the environment looked up by `env`.
    fn client_config_with_env(
        &self,
        role: ClientRole,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<ClientConfig, KafkaClientError> {
        let mut config = ClientConfig::new();
        let plain = match role {
            ClientRole::Consumer => self.properties_but(PRODUCER_ONLY_PROPERTIES),
            ClientRole::Producer => self.properties_but(CONSUMER_ONLY_PROPERTIES),
        };
        for (key, value) in plain {
            config.set(key, value);
        }
        for (key, value) in self.resolved_secrets(env)? {
            config.set(key, value);
        }
        if let Some(mechanism) = config.get("sasl.mechanisms").or_else(|| config.get("sasl.mechanism")) {
            if !SASL_MECHANISMS.contains(&mechanism) {
                let key = if config.get("sasl.mechanisms").is_some() { "sasl.mechanisms" } else { "sasl.mechanism" };
                return Err(KafkaClientError::Property {
                    key: self.source_key(key),
                    problem: format!("unknown SASL mechanism {mechanism:?}; one of {}", SASL_MECHANISMS.join(", ")),
                });
            }
        }
        config.set("bootstrap.servers", &self.brokers);
        // OpenSSL is linked statically (Cargo.toml): its built-in CA path is its own build's
        // (/usr/local/ssl), not the system's, so without a CA setting of the user's, TLS would
        // trust nothing. `probe` makes librdkafka look in the standard places (Debian's
        // /etc/ssl/certs, RHEL's /etc/pki/tls, Alpine's ...), as it does by itself on macOS and
        // when it knows OpenSSL is static; the same for the OIDC token endpoint's HTTPS.
        if !["ssl.ca.location", "ssl.ca.pem"].iter().any(|k| config.get(k).is_some()) {
            config.set("ssl.ca.location", "probe");
        }
        if cfg!(feature = "oidc") && !["https.ca.location", "https.ca.pem"].iter().any(|k| config.get(k).is_some()) {
            config.set("https.ca.location", "probe");
        }
        config.create_native_config().map_err(|error| self.property_error(error))?;
        Ok(config)
    }

    /// librdkafka's refusal of one property, naming our key; a secret's value is not quoted
    /// (librdkafka's message does not quote string values, but the error type carries it).
    fn property_error(&self, error: KafkaError) -> KafkaClientError {
        match error {
            KafkaError::ClientConfig(_, problem, key, _value) => {
                let problem = if is_secret(&key) { "librdkafka refuses its value".to_string() } else { problem };
                KafkaClientError::Property { key: self.source_key(&key), problem }
            }
            other => KafkaClientError::Property { key: "kafka.properties".into(), problem: other.to_string() },
        }
    }

    /// `check-config`'s dry run: builds each kind of client rankpulse creates, the way `serve`
    /// does but with no broker to connect to, so what librdkafka checks only when a client is
    /// created (the SASL mechanism's provider, TLS certificates and keys, OIDC settings) fails
    /// here. Returns librdkafka's configuration warnings (CONFWARN), which are worth reading.
    pub fn check_clients(&self) -> Result<Vec<String>, KafkaClientError> {
        let mut warnings = Vec::new();
        for role in [ClientRole::Consumer, ClientRole::Producer] {
            let mut config = self.client_config(role)?;
            // No broker: the client checks its configuration and never connects.
            config.remove("bootstrap.servers");
            config.set_log_level(RDKafkaLogLevel::Warning);
            let context = CheckContext::default();
            let created = match role {
                ClientRole::Consumer => config
                    .set("group.id", &self.group_id)
                    .create_with_context::<_, BaseConsumer<CheckContext>>(context)
                    .map(|c| c.context().take_warnings()),
                ClientRole::Producer => config
                    .create_with_context::<_, BaseProducer<CheckContext>>(context)
                    .map(|p| p.context().take_warnings()),
            };
            match created {
                Ok(lines) => warnings.extend(lines.into_iter().map(|l| format!("{}: {l}", role.label()))),
                Err(KafkaError::ClientCreation(problem)) => {
                    let named = self.named_in(&problem).or_else(|| property_like_word(&problem));
                    let key = named.map_or_else(|| "kafka.properties".into(), |p| self.source_key(p));
                    return Err(KafkaClientError::Client { key, role: role.label(), problem });
                }
                Err(error) => return Err(self.property_error(error)),
            }
        }
        warnings.sort();
        warnings.dedup();
        Ok(warnings)
    }

    /// The configured property that librdkafka's `message` names first, if any: its messages
    /// say "ssl.certificate.location failed: ..." or "Failed to parse ssl.keystore.location
    /// PKCS#12 file: ...".
    fn named_in<'a>(&'a self, message: &'a str) -> Option<&'a str> {
        let is_name_byte = |b: u8| b.is_ascii_alphanumeric() || b == b'.' || b == b'_';
        let whole_word_at = |property: &str| {
            message.match_indices(property).map(|(at, _)| at).find(|&at| {
                let before = at.checked_sub(1).and_then(|i| message.as_bytes().get(i).copied());
                let after = message.as_bytes().get(at + property.len()).copied();
                !before.is_some_and(is_name_byte) && !after.is_some_and(is_name_byte)
            })
        };
        self.properties
            .keys()
            .chain(self.properties_from_file.keys())
            .chain(self.properties_from_env.keys())
            .filter_map(|p| whole_word_at(p).map(|at| (at, p.as_str())))
            .min()
            .map(|(_, p)| p)
    }

    /// This section with every secret's value replaced by [`REDACTED`], for printing.
    pub fn redacted(&self) -> KafkaConfig {
        let mut shown = self.clone();
        for (key, value) in shown.properties.iter_mut() {
            if is_secret(key) {
                *value = REDACTED.to_string();
            }
        }
        shown
    }
}

impl std::fmt::Debug for KafkaConfig {
    /// Every field, secrets redacted: a configuration may end up in a log line or a panic
    /// message.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let KafkaConfig {
            brokers,
            group_id,
            group_instance_id,
            impressions_topic,
            engagements_topic,
            impressions_format,
            engagements_format,
            properties: _,
            properties_from_file,
            properties_from_env,
        } = self;
        f.debug_struct("KafkaConfig")
            .field("brokers", brokers)
            .field("group_id", group_id)
            .field("group_instance_id", group_instance_id)
            .field("impressions_topic", impressions_topic)
            .field("engagements_topic", engagements_topic)
            .field("impressions_format", impressions_format)
            .field("engagements_format", engagements_format)
            .field("properties", &self.redacted().properties)
            .field("properties_from_file", properties_from_file)
            .field("properties_from_env", properties_from_env)
            .finish()
    }
}

/// The first word of librdkafka's `message` shaped like a property name (`sasl.username and
/// sasl.password must be set` names a property that is not configured at all).
fn property_like_word(message: &str) -> Option<&str> {
    message.split([' ', ':', ',', '(', ')']).find(|word| {
        word.contains('.')
            && !word.starts_with('.')
            && !word.ends_with('.')
            && word.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'_')
    })
}

/// The context of `check-config`'s clients: keeps librdkafka's warnings instead of logging
/// them, except the one that says there is no broker (there is none on purpose).
#[derive(Default)]
struct CheckContext {
    /// Warning lines, for `check-config` to print.
    warnings: Mutex<Vec<String>>,
}

impl CheckContext {
    fn take_warnings(&self) -> Vec<String> {
        std::mem::take(&mut *self.warnings.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl ClientContext for CheckContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        if (level as i32) <= (RDKafkaLogLevel::Warning as i32) && !log_message.contains("bootstrap.servers") {
            self.warnings.lock().unwrap_or_else(|e| e.into_inner()).push(format!("{fac}: {log_message}"));
        }
    }
}

impl ConsumerContext for CheckContext {}

impl ProducerContext for CheckContext {
    type DeliveryOpaque = ();
    fn delivery(&self, _: &DeliveryResult<'_>, _: ()) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kafka(properties: &[(&str, &str)]) -> KafkaConfig {
        KafkaConfig {
            properties: properties.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            ..KafkaConfig::default()
        }
    }

    #[test]
    fn each_client_gets_the_properties_of_its_role_and_the_shared_ones() {
        let kafka = kafka(&[
            ("session.timeout.ms", "6000"),
            ("acks", "all"),
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanisms", "PLAIN"),
        ]);
        let keys = |it: &mut dyn Iterator<Item = (&str, &str)>| it.map(|(k, _)| k.to_string()).collect::<Vec<_>>();
        assert_eq!(
            keys(&mut kafka.consumer_properties()),
            ["sasl.mechanisms", "security.protocol", "session.timeout.ms"]
        );
        assert_eq!(keys(&mut kafka.producer_properties()), ["acks", "sasl.mechanisms", "security.protocol"]);
        let consumer = kafka.client_config(ClientRole::Consumer).unwrap();
        assert_eq!(consumer.get("session.timeout.ms"), Some("6000"));
        assert_eq!(consumer.get("acks"), None);
        assert_eq!(consumer.get("bootstrap.servers"), Some("localhost:9092"));
    }

    /// OIDC is the `oidc` feature (libcurl); the test command builds with it.
    #[cfg(feature = "oidc")]
    #[test]
    fn oidc_is_built_in_with_its_feature() {
        let kafka = kafka(&[
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanisms", "OAUTHBEARER"),
            ("sasl.oauthbearer.method", "oidc"),
            ("sasl.oauthbearer.client.id", "rankpulse"),
            ("sasl.oauthbearer.client.secret", "s3cret"),
            ("sasl.oauthbearer.token.endpoint.url", "https://idp.example/token"),
        ]);
        kafka.check_clients().unwrap();
    }

    /// The statically linked OpenSSL does not know the system's CAs: unless the user names
    /// theirs, librdkafka probes the standard places.
    #[test]
    fn the_system_s_cas_are_probed_unless_a_ca_is_configured() {
        let config = kafka(&[("security.protocol", "SSL")]).client_config(ClientRole::Consumer).unwrap();
        assert_eq!(config.get("ssl.ca.location"), Some("probe"));
        let own = kafka(&[("security.protocol", "SSL"), ("ssl.ca.location", "/etc/kafka/ca.pem")]);
        assert_eq!(own.client_config(ClientRole::Producer).unwrap().get("ssl.ca.location"), Some("/etc/kafka/ca.pem"));
        let pem = kafka(&[("ssl.ca.pem", "-----BEGIN CERTIFICATE-----")]);
        assert_eq!(pem.client_config(ClientRole::Consumer).unwrap().get("ssl.ca.location"), None);
    }

    #[test]
    fn tls_and_sasl_are_built_in() {
        // OpenSSL is vendored: TLS and SCRAM are in every build.
        kafka(&[("security.protocol", "SSL")]).check_clients().unwrap();
        for mechanism in ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] {
            let kafka = self::kafka(&[
                ("security.protocol", "SASL_SSL"),
                ("sasl.mechanisms", mechanism),
                ("sasl.username", "rankpulse"),
                ("sasl.password", "s3cret"),
            ]);
            kafka.check_clients().unwrap();
        }
        // What librdkafka checks only when it builds a client is found by the dry run, naming
        // the property its message starts with.
        let error = self::kafka(&[("security.protocol", "SASL_SSL"), ("sasl.mechanisms", "PLAIN")])
            .check_clients()
            .unwrap_err()
            .to_string();
        assert_eq!(error, "configuration key `kafka.properties.\"sasl.username\"`: librdkafka refuses the consumer configuration: sasl.username and sasl.password must be set");
    }

    #[test]
    fn a_misspelt_mechanism_or_property_is_refused_naming_the_key() {
        let error = kafka(&[("security.protocol", "SASL_SSL"), ("sasl.mechanisms", "SCRAM-SHA-265")])
            .client_config(ClientRole::Consumer)
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with(
                "configuration key `kafka.properties.\"sasl.mechanisms\"`: unknown SASL mechanism \"SCRAM-SHA-265\""
            ),
            "{error}"
        );
        let error = kafka(&[("security.protocl", "SSL")]).client_config(ClientRole::Producer).unwrap_err().to_string();
        assert!(error.starts_with("configuration key `kafka.properties.\"security.protocl\"`: "), "{error}");
        let error = kafka(&[("security.protocol", "TLS")]).client_config(ClientRole::Producer).unwrap_err().to_string();
        assert!(error.contains("`kafka.properties.\"security.protocol\"`") && error.contains("TLS"), "{error}");
    }

    #[test]
    fn a_missing_key_file_is_found_by_the_dry_run() {
        let kafka = kafka(&[
            ("security.protocol", "SSL"),
            ("ssl.key.location", "/nonexistent/client.key"),
            ("ssl.certificate.location", "/nonexistent/client.pem"),
        ]);
        kafka.client_config(ClientRole::Consumer).unwrap();
        let error = kafka.check_clients().unwrap_err().to_string();
        assert!(error.starts_with("configuration key `kafka.properties.\"ssl.certificate.location\"`: librdkafka refuses the consumer configuration: ssl.certificate.location failed: "), "{error}");
    }

    #[test]
    fn secrets_come_from_files_and_the_environment_and_are_never_shown() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("password");
        std::fs::write(&file, "from-a-file\n").unwrap();
        let variable = "RANKPULSE_TEST_KEY_PASSWORD";
        let env = |name: &str| (name == variable).then(|| "from-the-env".to_string());
        let mut kafka = kafka(&[("sasl.username", "rankpulse"), ("sasl.password", "inline-secret")]);
        kafka.properties.remove("sasl.password");
        kafka.properties_from_file.insert("sasl.password".into(), file.display().to_string());
        kafka.properties_from_env.insert("ssl.key.password".into(), variable.into());
        let config = kafka.client_config_with_env(ClientRole::Consumer, &env).unwrap();
        assert_eq!(config.get("sasl.password"), Some("from-a-file"));
        assert_eq!(config.get("ssl.key.password"), Some("from-the-env"));

        kafka.properties_from_env.insert("ssl.keystore.password".into(), "RANKPULSE_TEST_UNSET".into());
        let error = kafka.client_config_with_env(ClientRole::Producer, &env).unwrap_err().to_string();
        assert_eq!(error, "configuration key `kafka.properties_from_env.\"ssl.keystore.password\"`: environment variable RANKPULSE_TEST_UNSET is not set (or not UTF-8)");
        kafka.properties_from_env.remove("ssl.keystore.password");
        kafka.properties_from_file.insert("sasl.password".into(), "/nonexistent/secret".into());
        let error = kafka.client_config_with_env(ClientRole::Producer, &env).unwrap_err().to_string();
        assert!(
            error.starts_with(
                "configuration key `kafka.properties_from_file.\"sasl.password\"`: cannot read /nonexistent/secret: "
            ),
            "{error}"
        );

        let inline = self::kafka(&[("sasl.password", "inline-secret"), ("sasl.username", "rankpulse")]);
        let shown = inline.redacted();
        assert_eq!(shown.properties["sasl.password"], REDACTED);
        assert_eq!(shown.properties["sasl.username"], "rankpulse");
        let debug = format!("{inline:?}");
        assert!(!debug.contains("inline-secret") && debug.contains(REDACTED), "{debug}");
    }
}
