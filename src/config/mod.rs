//! Configuration: the TOML schema, its defaults, environment overrides and start-up checks.
//!
//! Every key has a default, so an empty file is a valid configuration. Unknown keys are refused
//! (`deny_unknown_fields`): a misspelt key silently falling back to its default is the most
//! expensive kind of configuration bug. Cross-field rules live in [`Config::validate`], and every
//! message names the key it is about.
//!
//! The schema (every section and its defaults) is in `schema`, with sections of their own in
//! `ab`, `http`, `inputs`, `clicks`, `readout`, `repartition` and `page`; reading the file and the
//! environment in `load`, the cross-field rules in `validate`, and what each Kafka client is
//! built from (role properties, secrets, librdkafka's own checks) in `kafka_client`, and the
//! keys of earlier releases, read with a warning naming their replacement, in `upgrade`.
//!
//! The file and the environment are input: the config module and its submodules are under the
//! no-panic rule (crate documentation, "Hostile input"); the attribute here covers them all.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]

mod ab;
mod clicks;
mod http;
mod inputs;
mod kafka_client;
mod load;
mod page;
pub mod path;
mod readout;
mod repartition;
mod schema;
mod upgrade;
mod validate;

use std::path::PathBuf;

pub use ab::{AbConfig, AbExperimentConfig, AbUnit, MAX_DIMENSIONS};
pub use clicks::{ClicksConfig, MAX_TRACKED_RANKS};
pub use http::{ClientAuthType, HttpConfig, TlsServerConfig, REDACTED_HASH};
pub use inputs::{
    EngagementMapping, FieldSource, From as SourceOf, ImpressionMapping, LocalSchema, MappingConfig,
    SchemaRegistryConfig, SchemasConfig, TimestampFormat, IMPRESSION_SCALARS,
};
pub use kafka_client::{is_secret, reads_from_earliest, ClientRole, KafkaClientError, REDACTED, SECRET_PROPERTIES};
pub use page::PageConfig;
pub use readout::{BayesianConfig, CupedConfig, DifferenceScale};
pub use repartition::{RepartitionConfig, RepartitionMode};
pub use schema::{
    Config, InputFormat, InterleavingConfig, InterleavingCredit, JoinConfig, JudgmentsConfig, JudgmentsFormat,
    JudgmentsKey, KafkaConfig, LabelsConfig, LimitsConfig, MetricsConfig, StateCompression, StateConfig, UbiConfig,
};
pub use upgrade::RetiredKey;

/// Where the events a command reads come from, which decides what an Avro or Protobuf input
/// needs: from topics (`serve`, `check-config`) each message names a schema that a registry or
/// a local file must provide; from exported files (`replay`, `judgments --from-clicks`) an Avro
/// object container file carries its own schema, and Protobuf exports are read as JSON lines,
/// so neither needs one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reads {
    /// Kafka topics: the messages' schemas come from `[schema_registry]` or `[schemas.*]`.
    Topics,
    /// Exported files: no schema source is required.
    Files,
}

/// A configuration that could not be loaded or is inconsistent. The message names the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The cause is part of the message and deliberately not a `source()`: `main` prints the
    /// whole chain, which would print it twice.
    #[error("cannot read configuration {path}: {error}")]
    Read { path: PathBuf, error: std::io::Error },
    #[error("configuration {origin}: {message}")]
    Parse { origin: String, message: String },
    #[error("configuration key `{key}`: {problem}")]
    Invalid { key: String, problem: String },
}
