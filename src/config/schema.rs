//! The configuration's schema: one struct per TOML section, each key with its documented
//! default (an empty file is a valid configuration) and unknown keys refused.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::ab::AbConfig;
use super::clicks::ClicksConfig;
use super::http::HttpConfig;
use super::inputs::{MappingConfig, SchemaRegistryConfig, SchemasConfig};
use super::page::PageConfig;
use super::repartition::RepartitionConfig;
use crate::time::HumanDuration;

/// The whole configuration file.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// `[kafka]`: the brokers, topics and input formats. Default: see [`KafkaConfig`].
    pub kafka: KafkaConfig,
    /// `[ubi]`: where UBI documents carry experiment and variant. Default: see [`UbiConfig`].
    pub ubi: UbiConfig,
    /// `[join]`: attribution on event time and the join's state limits. Default: see
    /// [`JoinConfig`].
    pub join: JoinConfig,
    /// `[metrics]`: which metrics, cutoffs, windows and gains. Default: see [`MetricsConfig`].
    pub metrics: MetricsConfig,
    /// `[http]`: the endpoint address. Default: see [`HttpConfig`].
    pub http: HttpConfig,
    /// `[state]`: the changelog topic and the snapshot interval. Default: see [`StateConfig`].
    pub state: StateConfig,
    /// `[limits]`: what a message may look like. Default: see [`LimitsConfig`].
    pub limits: LimitsConfig,
    /// `[labels]`: the cardinality guard. Default: see [`LabelsConfig`].
    pub labels: LabelsConfig,
    /// `[ab]`: the A/B statistics. Default: see [`AbConfig`].
    pub ab: AbConfig,
    /// `[interleaving]`: how interleaved impressions are scored. Default: see
    /// [`InterleavingConfig`].
    pub interleaving: InterleavingConfig,
    /// `[judgments]`: editorial judgment lists, scored on live traffic. Default: see
    /// [`JudgmentsConfig`] (off).
    pub judgments: JudgmentsConfig,
    /// `[mapping]`: where each field is in events of the user's own shape. Default: see
    /// [`MappingConfig`] (the native event format's field names).
    pub mapping: MappingConfig,
    /// `[schema_registry]`: where Avro and Protobuf schemas come from. Default: see
    /// [`SchemaRegistryConfig`] (none).
    pub schema_registry: SchemaRegistryConfig,
    /// `[schemas]`: local Avro and Protobuf schemas, for setups without a registry. Default:
    /// see [`SchemasConfig`] (none).
    pub schemas: SchemasConfig,
    /// `[repartition]`: re-keying inputs that are not co-partitioned by query id through
    /// internal topics. Default: see [`RepartitionConfig`] (`auto`).
    pub repartition: RepartitionConfig,
    /// `[clicks]`: the click log behind the click models and implicit judgments. Default:
    /// see [`ClicksConfig`] (off).
    pub clicks: ClicksConfig,
    /// `[page]`: the experiment page's curves and refresh. Default: see [`PageConfig`].
    pub page: PageConfig,
}

/// `[kafka]`: where events come from: the brokers, the consumer group, the topics and how their
/// messages are written, and librdkafka's own properties. Secrets are never printed:
/// `check-config` shows them as `<redacted>`.
// Its `Debug` redacts the secrets too (`KafkaConfig::redacted`).
#[derive(Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct KafkaConfig {
    /// Bootstrap brokers, comma separated. Default `localhost:9092`.
    pub brokers: String,
    /// Consumer group; replicas sharing it split the partitions. Default `rankpulse`.
    pub group_id: String,
    /// Static group membership (`group.instance.id`): a replica restarted under the same id
    /// within the session timeout gets its partitions back without a rebalance. A static member
    /// never leaves the group, not even on SIGTERM, so the id must survive restarts (a
    /// StatefulSet's pod name does; a Deployment's changes with every rollout, and each old
    /// id's partitions then wait out the session timeout). Unique per replica. Default empty:
    /// dynamic membership.
    pub group_instance_id: String,
    /// Topic of impression events. Default `search-impressions`.
    pub impressions_topic: String,
    /// Topic of engagement events, co-partitioned with impressions by `query_id`.
    /// Default `search-engagements`.
    pub engagements_topic: String,
    /// How impression messages are written: `json` (rankpulse's own events, or any JSON with
    /// `[mapping.impressions]`), `ubi` (OpenSearch User Behavior Insights query documents),
    /// `avro` or `protobuf` (with `[schema_registry]` or `[schemas.impressions]`). Default `json`.
    pub impressions_format: InputFormat,
    /// How engagement messages are written: `json`, `ubi` (UBI event documents), `avro` or
    /// `protobuf`. Default `json`.
    pub engagements_format: InputFormat,
    /// Extra librdkafka properties passed as they are (security.protocol, sasl.*, ssl.*, ...) to
    /// every client, but for those of the other role (a producer-only property is not given to
    /// the consumers, nor a consumer-only one to the producers, which would only warn).
    /// Secret values (`sasl.password`, ...) are accepted here but better kept out of the file
    /// with the two tables below. Default empty.
    pub properties: BTreeMap<String, String>,
    /// librdkafka properties whose value is the content of a file (a Kubernetes Secret mount,
    /// say), read when each client is built; a trailing newline is not part of the value:
    /// `"sasl.password" = "/var/run/secrets/rankpulse/kafka-password"`. Default empty.
    pub properties_from_file: BTreeMap<String, String>,
    /// librdkafka properties whose value is an environment variable's:
    /// `"sasl.password" = "KAFKA_SASL_PASSWORD"`. Default empty.
    pub properties_from_env: BTreeMap<String, String>,
}

impl Default for KafkaConfig {
    fn default() -> Self {
        KafkaConfig {
            brokers: "localhost:9092".into(),
            group_id: "rankpulse".into(),
            group_instance_id: String::new(),
            impressions_topic: "search-impressions".into(),
            engagements_topic: "search-engagements".into(),
            impressions_format: InputFormat::Json,
            engagements_format: InputFormat::Json,
            properties: BTreeMap::new(),
            properties_from_file: BTreeMap::new(),
            properties_from_env: BTreeMap::new(),
        }
    }
}

/// The format of one input's messages (and of replay's lines).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InputFormat {
    /// rankpulse's native events, as the manual's Events chapter defines them.
    Json,
    /// OpenSearch User Behavior Insights documents (`ubi_queries` / `ubi_events`); see the
    /// manual's OpenSearch UBI chapter.
    Ubi,
    /// Avro records: Confluent's wire format with `[schema_registry]`, bare datums with
    /// `[schemas.*].avro_file`. Fields are found by `[mapping.*]` (default: the native events' field names).
    Avro,
    /// Protobuf messages: Confluent's wire format with `[schema_registry]`, bare messages with
    /// `[schemas.*].protobuf_descriptor_set`. Fields are found by `[mapping.*]`, by their
    /// Protobuf JSON names (`snake_case` as declared).
    Protobuf,
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
    /// `serve` counts silence as idleness only while the brokers confirm the input has nothing
    /// unread (an outage holds the watermark). Default `30s`.
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
    /// Which trec_eval `iprec@r` follows where its versions differ: `"9"` (9.x: recall level r
    /// reached at `(long)(r |R| + 0.9)` relevant results, in effect recall@i >= r as
    /// the Metrics chapter defines it, what pytrec_eval and ir_measures compute) or `"10"` (10.0: at `lround(r |R|)`).
    /// Default `"9"`.
    pub trec_eval: crate::metrics::TrecEval,
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
            trec_eval: crate::metrics::TrecEval::V9,
        }
    }
}

/// `[state]`: where each partition's state lives between owners.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct StateConfig {
    /// The changelog topic: partition n holds snapshots of input partition n's state, written
    /// every `checkpoint_interval`, on revoke and at shutdown, and read by whichever replica is
    /// assigned the partition next. Created (compacted) if missing. Default empty: the group
    /// id followed by `-changelog`.
    pub changelog_topic: String,
    /// The aggregates topic: partition n holds input partition n's A/B sums (cumulative and
    /// its newest closed windows), which every replica reads to report experiment-wide figures
    /// whatever the number of replicas. Created (compacted) if missing. Default empty: the group
    /// id followed by `-aggregates`.
    pub aggregates_topic: String,
    /// Replication factor of the changelog and aggregates topics when rankpulse creates them
    /// (at most the number of brokers). Default 3.
    pub changelog_replication_factor: i32,
    /// How often every owned partition is snapshotted to the changelog; Kafka offsets are
    /// committed right after the brokers acknowledge it. Default `5s`.
    pub checkpoint_interval: HumanDuration,
    /// Keep a warm standby, as Kafka Streams' `num.standby.replicas` does: this replica tails
    /// the changelog and keeps every partition's newest snapshot in memory, so when it is
    /// assigned a partition (a failover, a rebalance) it restores from that copy instead of
    /// reading the changelog. It costs memory (every partition's newest snapshot: the sum of
    /// `rankpulse_checkpoint_bytes` over the replicas) and changelog reads (every snapshot,
    /// every `checkpoint_interval`). A copy is used only once it is as new as the changelog;
    /// otherwise the changelog is read as without a standby. Default `false`.
    pub warm_standby: bool,
    /// How the records of the changelog and aggregates topics are compressed on their way to
    /// the brokers (the producer's `compression.type`, for these topics only; `[kafka]`
    /// properties set the other producers'). The aggregates records' sums repeat (the same
    /// metric values in many unit buckets) and shrink 6 to 10 times; the changelog's pending
    /// impressions (hashes, gains) by 10 to 60%. Readers decompress whatever they find, so it
    /// can change at any restart. Default `lz4`.
    pub compression: StateCompression,
}

/// A codec of the state topics' producer (`state.compression`): those librdkafka is built with
/// here.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum StateCompression {
    /// Records as they are encoded.
    None,
    /// Fast, and about 6 times smaller aggregates records (`state` bench stage).
    #[default]
    Lz4,
    /// Faster still, compresses less.
    Snappy,
    /// About 10 times smaller aggregates records and the smallest snapshots, for several
    /// times lz4's CPU on the producer's thread.
    Gzip,
    /// Zstandard, at librdkafka's default level.
    Zstd,
}

impl StateCompression {
    /// librdkafka's name for it (`compression.type`).
    pub fn librdkafka_name(self) -> &'static str {
        match self {
            StateCompression::None => "none",
            StateCompression::Lz4 => "lz4",
            StateCompression::Snappy => "snappy",
            StateCompression::Gzip => "gzip",
            StateCompression::Zstd => "zstd",
        }
    }
}

impl StateConfig {
    /// The changelog topic's name, with the default applied.
    pub fn changelog_topic(&self, group_id: &str) -> String {
        if self.changelog_topic.is_empty() {
            format!("{group_id}-changelog")
        } else {
            self.changelog_topic.clone()
        }
    }

    /// The aggregates topic's name, with the default applied.
    pub fn aggregates_topic(&self, group_id: &str) -> String {
        if self.aggregates_topic.is_empty() {
            format!("{group_id}-aggregates")
        } else {
            self.aggregates_topic.clone()
        }
    }
}

impl Default for StateConfig {
    fn default() -> Self {
        StateConfig {
            changelog_topic: String::new(),
            aggregates_topic: String::new(),
            changelog_replication_factor: 3,
            checkpoint_interval: HumanDuration::from_millis(5_000),
            warm_standby: false,
            compression: StateCompression::default(),
        }
    }
}

/// `[interleaving]`: interleaved impressions (a `teams` list naming the ranker behind each
/// result) and the credit their engagements give each ranker.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct InterleavingConfig {
    /// The most rankers one interleaved impression may name (2 to 7; 0 turns interleaving off
    /// and rejects interleaved impressions). Every group carries `2 + n + n²` more sums for it,
    /// so it is not larger than needed. Default 2 (team-draft interleaving of two rankers).
    pub max_rankers: usize,
    /// What a ranker earns from a result it contributed: `clicks` (1 per relevant result,
    /// gain >= `metrics.relevance_threshold`) or `gains` (the result's gain). Default `clicks`.
    pub credit: InterleavingCredit,
    /// Only the top `depth` ranks earn credit (0: every shown rank). Default 0.
    pub depth: u32,
}

impl Default for InterleavingConfig {
    fn default() -> Self {
        InterleavingConfig { max_rankers: 2, credit: InterleavingCredit::Clicks, depth: 0 }
    }
}

/// `[judgments]`: a judgment list (graded editorial relevance per query and document) that
/// every impression of a judged query is also scored against, beside its engagements.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct JudgmentsConfig {
    /// The judgment file: TREC qrels (`query iteration doc grade`) or JSON lines (`{"query",
    /// "doc_id", "grade"}`). Read at start (a file that cannot be loaded stops the start) and
    /// again whenever it changes. Default empty: no judgments, and nothing judged is exported.
    pub file: String,
    /// `qrels`, `jsonl`, or `auto` (by the file's extension: `.jsonl`, `.ndjson`, `.json` are
    /// JSON lines). Default `auto`.
    pub format: JudgmentsFormat,
    /// The impression field judgments are matched on: `query` (the impression's `query`, UBI's
    /// `user_query`, normalized on both sides: NFKC, lower case of the whole text so that a
    /// final sigma is `ς`, trimmed, whitespace runs as one space) or `query_id` (exactly).
    /// Default `query`.
    // The normalization is `crate::judgments::normalize_query`.
    pub key: JudgmentsKey,
    /// A judged result is relevant when its grade is at least this (trec_eval's `-l`). Default 1.
    pub relevance_threshold: u8,
    /// The largest grade (a line above it is rejected); ERR's stopping probability of a result
    /// is (2^grade - 1) / 2^max_grade. At most 30. Default 3.
    pub max_grade: u8,
    /// How often the file is checked for a change (its modification time and length). A
    /// changed file is loaded once it has stayed unchanged for one interval, so a file still
    /// being written is not read half way (replacing it by a rename is still best). Default `10s`.
    pub reload_interval: HumanDuration,
    /// The largest share of a file's non-blank lines that may be rejected (counted by reason):
    /// above it the file is refused whole and the judgments loaded before stay. Default 0.01.
    pub max_rejected_share: f64,
    /// Also the measures built for incomplete judgments: bpref and the condensed-list AP@k
    /// and nDCG@k (unjudged results removed), which the share of unjudged results live
    /// rankers show does not drag down as it does the plain judged measures. Default true;
    /// false saves their sums (2 + 2 per cutoff per group) and their second pass per judged
    /// impression. State kept with them is refused without them, as other judged sums are.
    pub incomplete_measures: bool,
}

impl Default for JudgmentsConfig {
    fn default() -> Self {
        JudgmentsConfig {
            file: String::new(),
            format: JudgmentsFormat::Auto,
            key: JudgmentsKey::Query,
            relevance_threshold: 1,
            max_grade: 3,
            reload_interval: HumanDuration::from_millis(10_000),
            max_rejected_share: 0.01,
            incomplete_measures: true,
        }
    }
}

/// How a judgment file is written.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum JudgmentsFormat {
    /// By the file's extension.
    #[default]
    Auto,
    /// TREC qrels.
    Qrels,
    /// JSON lines.
    Jsonl,
}

/// Which impression field a judgment's query is matched with.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum JudgmentsKey {
    /// The query's text (`query`; UBI `user_query`), normalized.
    #[default]
    Query,
    /// The response id, exactly: judgments of individual impressions (offline checks).
    QueryId,
}

/// What an engaged result is worth to the ranker that contributed it.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum InterleavingCredit {
    /// 1 per relevant result (the usual click credit of team-draft interleaving).
    #[default]
    Clicks,
    /// The result's gain (`metrics.action_gains`): a purchase outweighs a click.
    Gains,
}
