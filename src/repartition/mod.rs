//! The repartition stage: inputs that are not co-partitioned by query id, re-keyed through
//! internal topics so that the join, which is per partition, sees every engagement on its
//! impression's partition.
//!
//! The join needs impression and engagement of one query on the same partition number of the
//! two topics it reads. Clickstreams are often keyed by user or session instead, or the two
//! topics have different partition counts; then an engagement lands where its impression never
//! was and is orphaned, and every metric is biased downwards while no event looks invalid.
//! Like Kafka Streams, rankpulse then consumes the raw topics in a consumer group of its own
//! (`<group>-repartition`, shared by the replicas, so they split the raw partitions), decodes
//! each message with the configured decoders, and produces it as a native event keyed by its
//! query id to `<group>-impressions-repartition` and `<group>-engagements-repartition` (the
//! same partition count, so one query id maps to one partition number in both). The join then
//! consumes those two topics in `<group>`, with the native decoder, as if the producers had
//! keyed by query id.
//!
//! Decoded and re-encoded rather than forwarded as raw bytes, and keyed by the decoded query
//! id: the raw format (UBI, field mapping) and its rejections are dealt with once, here
//! (counted in `rankpulse_events_rejected_total` under the raw topic, and not forwarded), and
//! the join's format is fixed and fast.
//!
//! Delivery is at least once and counts are exact: raw offsets are committed after the brokers
//! acknowledged what was produced from them (`stage`), and a re-sent copy is absorbed by the
//! join's de-duplication (an impression counts once per query id, an engagement once per
//! `event_id`, or per query, document, action and timestamp). Transactions are not used: they
//! would make the re-sends invisible, but the join does not need that, and librdkafka's mock
//! cluster, which the tests run on, cannot exercise them.
//!
//! Event-time order: an internal partition mixes events from every raw partition, and the
//! join's watermark on it holds only if they arrive in event-time order to within
//! `join.max_out_of_orderness`. Read from a backlog, one raw partition's fetched batch comes
//! before the next one's; the stage therefore queues what it reads per raw partition and, while
//! any of them catches up, forwards the least event time first (`merge`). When one
//! raw partition's consumer stalls (a crashed replica's partitions wait out the session
//! timeout, then a rebalance), the others run ahead in event time. `join.max_out_of_orderness`
//! must cover that stall, or the stalled events arrive behind the watermark and are counted
//! late. The manual (docs/src/repartitioning.md) says how to size it.
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | the start-up decision ([`plan`]), the internal topics, starting the stage |
//! | `decide` | partition counts and sampled keys: are the inputs co-partitioned by query id? |
//! | `encode` | a raw message decoded and re-encoded as a native event keyed by its query id; the one call into the decoders |
//! | `merge` | the order of forwarding: the raw partitions merged on event time while one catches up on a backlog; pure |
//! | `stage` | the stage's thread: consume, re-key, queue per raw partition, produce, flush, commit |

mod decide;
mod encode;
mod merge;
mod stage;

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;

use crate::config::{ClientRole, Config, InputFormat, KafkaClientError, RepartitionConfig, RepartitionMode};
use crate::engine::{Routing, RoutingDecision, RoutingReason};
use crate::event::Decoders;
use crate::kafka_log::KafkaLog;
use crate::shutdown::Shutdown;

pub use decide::Inspection;
pub use encode::Reencoder;

/// The pause between two attempts to read the inputs' metadata at start.
const METADATA_RETRY: Duration = Duration::from_secs(2);
/// How long creating or checking the internal topics may take.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum RepartitionError {
    #[error(transparent)]
    Config(#[from] KafkaClientError),
    #[error("creating the repartition stage's Kafka client: {0}")]
    Create(KafkaError),
    #[error("reading the metadata of {topic}: {error}")]
    Metadata { topic: String, error: KafkaError },
    #[error("the repartition topic {topic}: {problem}")]
    Topic { topic: String, problem: String },
    #[error("subscribing the repartition stage to {topics}: {error}")]
    Subscribe { topics: String, error: KafkaError },
    #[error("producing to the repartition topics: {0}")]
    Produce(String),
    #[error("starting the repartition stage's thread: {0}")]
    Thread(std::io::Error),
}

/// What [`plan`] decided.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Whether and why, as the exporter shows it.
    pub decision: RoutingDecision,
    /// The internal topics (impressions, engagements) the join consumes when active.
    pub internal_topics: [String; 2],
    /// What the inputs looked like.
    pub inspection: Inspection,
}

impl Plan {
    /// The configuration the join runs with: the internal topics in the native format when
    /// repartitioning, the configuration as it is otherwise.
    pub fn join_config(&self, cfg: &Config) -> Config {
        let mut join = cfg.clone();
        if self.decision.active {
            let [impressions, engagements] = self.internal_topics.clone();
            join.kafka.impressions_topic = impressions;
            join.kafka.engagements_topic = engagements;
            join.kafka.impressions_format = InputFormat::Json;
            join.kafka.engagements_format = InputFormat::Json;
            // The stage applied the mapping and the schemas: the internal topics hold
            // rankpulse's own events.
            join.mapping = Default::default();
            join.schemas = Default::default();
        }
        join
    }
}

/// The internal topics of a consumer group.
pub fn internal_topics(group_id: &str) -> [String; 2] {
    [RepartitionConfig::topic(group_id, "impressions"), RepartitionConfig::topic(group_id, "engagements")]
}

/// Decides at start whether the inputs are re-keyed (see [`crate::config::RepartitionMode`]),
/// logs why, and creates the internal topics when they are needed and missing.
pub fn plan(cfg: &Config, runtime: &tokio::runtime::Handle) -> Result<Plan, RepartitionError> {
    let raw_topics = [cfg.kafka.impressions_topic.clone(), cfg.kafka.engagements_topic.clone()];
    let internal_topics = internal_topics(&cfg.kafka.group_id);
    let mut probe_config = cfg.kafka.client_config(ClientRole::Consumer)?;
    // Assigned, never subscribed: the group id is only required by the client.
    probe_config
        .set("group.id", format!("{}-repartition-probe", cfg.kafka.group_id))
        .set("enable.auto.commit", "false");
    // Its errors are logged as the consumer's would be: with wrong credentials or certificates,
    // the wait below says why (SASL authentication error, certificate required, ...).
    let log = crate::kafka_log::SharedLog(Arc::new(KafkaLog::new("consumer", &cfg.kafka.brokers)));
    let probe: BaseConsumer<crate::kafka_log::SharedLog> =
        probe_config.create_with_context(log).map_err(RepartitionError::Create)?;
    let mut reencoder = Reencoder::new(Decoders::new(cfg));
    let sample = if cfg.repartition.mode == RepartitionMode::Always { 0 } else { cfg.repartition.sample_messages };
    // The brokers may be down at start: with "always" `serve` waits for them (the internal topics
    // must exist); "auto" and "never" go on without the check.
    let mut said = false;
    let inspection = loop {
        match decide::inspect(&probe, &raw_topics, &mut reencoder, sample) {
            Ok(inspection) => break inspection,
            Err(e) if cfg.repartition.mode == RepartitionMode::Never => {
                tracing::warn!(error = %e, "could not check whether the inputs are co-partitioned by query id; consuming them as they are (repartition.mode = \"never\")");
                break Inspection::default();
            }
            // "auto" does not hold the daemon back: its endpoint comes up, /readyz says the
            // brokers are not reachable, and the consumer logs why (credentials, certificates).
            // The key check on every message still counts keys that are not query ids.
            Err(e) if cfg.repartition.mode == RepartitionMode::Auto => {
                tracing::warn!(error = %e, "could not read the input topics' metadata at start: consuming them as they are, without repartitioning; rankpulse_input_key_mismatches_total (alert RankpulseInputNotKeyedByQuery) counts keys that are not query ids, and a restart once the brokers answer lets repartition.mode = \"auto\" decide");
                break Inspection::default();
            }
            Err(e) => {
                if !said {
                    tracing::warn!(error = %e, "waiting for the brokers: whether to repartition is decided from the input topics' metadata");
                    said = true;
                }
                // Polling serves the client's error queue: why the brokers do not answer
                // (authentication, certificates) is logged while it waits.
                let _ = probe.poll(METADATA_RETRY);
            }
        }
    };
    drop(probe);
    let [imp_partitions, eng_partitions] = inspection.partitions;
    let (active, reason) = match cfg.repartition.mode {
        RepartitionMode::Always => (true, RoutingReason::Configured),
        RepartitionMode::Never => (false, RoutingReason::Disabled),
        RepartitionMode::Auto if inspection.counts_differ() => (true, RoutingReason::PartitionCounts),
        RepartitionMode::Auto if inspection.keys_differ() => (true, RoutingReason::Keys),
        RepartitionMode::Auto => (false, RoutingReason::CoPartitioned),
    };
    let (keyed, mismatched) = (inspection.keyed, inspection.mismatched);
    let cause = if inspection.counts_differ() {
        format!("the input topics have {imp_partitions} and {eng_partitions} partitions")
    } else if inspection.keys_differ() {
        format!("sampled message keys are not the events' query ids ({mismatched:?} of {keyed:?} keyed impressions and engagements)")
    } else {
        String::new()
    };
    match (active, cause.is_empty()) {
        (true, _) => tracing::info!(
            reason = reason.label(),
            ?internal_topics,
            "repartitioning: the inputs are re-keyed by query id through internal topics{}{cause}",
            if cause.is_empty() { "" } else { ": " }
        ),
        (false, false) => tracing::warn!(
            "repartition.mode = \"never\", but the inputs are not co-partitioned by query id: {cause}. Engagements land \
             on partitions whose join never saw their impression and are counted as orphans, biasing every metric \
             downwards; set repartition.mode = \"auto\" or \"always\", or key both topics by query_id with equal \
             partition counts"
        ),
        (false, true) if reason == RoutingReason::CoPartitioned && keyed == [0, 0] => tracing::info!(
            ?inspection.partitions,
            "not repartitioning: equal partition counts, and no keyed message to sample; if the producers do not key \
             both topics by query_id, set repartition.mode = \"always\" (rankpulse_input_key_mismatches_total counts \
             keys that are not query ids)"
        ),
        (false, true) if reason == RoutingReason::Disabled => tracing::info!(
            ?inspection.partitions,
            ?keyed,
            "repartition.mode = \"never\": consuming the input topics as they are (the key check on every message still counts keys that are not query ids)"
        ),
        (false, true) => tracing::info!(?inspection.partitions, ?keyed, "not repartitioning: the inputs are co-partitioned by query id"),
    }
    if active {
        warn_if_disorder_is_short(cfg);
        let partitions = match cfg.repartition.partitions {
            0 => imp_partitions.max(eng_partitions),
            n => n,
        };
        if partitions == 0 {
            return Err(RepartitionError::Topic {
                topic: internal_topics[0].clone(),
                problem: "the input topics do not exist yet, so their partition count is unknown: create them, or set repartition.partitions".into(),
            });
        }
        ensure_topics(cfg, &internal_topics, partitions, runtime)?;
    }
    Ok(Plan { decision: RoutingDecision { active, reason, raw_topics }, internal_topics, inspection })
}

/// A crashed replica's raw partitions wait out the session timeout before another replica's
/// stage takes them over, while the other raw partitions run ahead in event time on the
/// internal topics: unless `join.max_out_of_orderness` covers that, their events arrive behind
/// the watermark and are counted late. Said once at start, naming the keys.
fn warn_if_disorder_is_short(cfg: &Config) {
    // librdkafka's default session timeout, and about a rebalance on top.
    const DEFAULT_SESSION_MS: i64 = 45_000;
    const REBALANCE_MS: i64 = 5_000;
    let session = cfg.kafka.properties.get("session.timeout.ms").and_then(|v| v.parse::<i64>().ok());
    let stall = session.unwrap_or(DEFAULT_SESSION_MS) + REBALANCE_MS;
    let disorder = cfg.join.max_out_of_orderness.as_millis_i64();
    if disorder < stall {
        tracing::warn!(
            max_out_of_orderness_ms = disorder,
            session_timeout_ms = session.unwrap_or(DEFAULT_SESSION_MS),
            "when a replica crashes, its raw partitions wait out kafka.properties.\"session.timeout.ms\" before another \
             replica's repartition stage reads them, while the others run ahead in event time: raise \
             join.max_out_of_orderness above the session timeout + 5 s, or lower the session timeout, or those \
             events are counted late (the manual, docs/src/repartitioning.md)"
        );
    }
}

/// Makes sure both internal topics exist with the same partition count, creating the missing
/// ones with `partitions` (delete policy, `repartition.retention`).
fn ensure_topics(
    cfg: &Config,
    topics: &[String; 2],
    partitions: usize,
    runtime: &tokio::runtime::Handle,
) -> Result<(), RepartitionError> {
    let probe: BaseConsumer =
        cfg.kafka.client_config(ClientRole::Consumer)?.create().map_err(RepartitionError::Create)?;
    let counts = |probe: &BaseConsumer| -> Result<([usize; 2], usize), RepartitionError> {
        let mut counts = [0; 2];
        let mut brokers = 1;
        for (count, topic) in counts.iter_mut().zip(topics) {
            let metadata = probe
                .fetch_metadata(Some(topic), ADMIN_TIMEOUT)
                .map_err(|error| RepartitionError::Metadata { topic: topic.clone(), error })?;
            brokers = metadata.brokers().len().max(1);
            let found = metadata.topics().iter().find(|t| t.name() == topic && t.error().is_none());
            *count = found.map_or(0, |t| t.partitions().len());
        }
        Ok((counts, brokers))
    };
    let (mut has, brokers) = counts(&probe)?;
    if has.contains(&0) {
        let admin: AdminClient<DefaultClientContext> =
            cfg.kafka.client_config(ClientRole::Producer)?.create().map_err(RepartitionError::Create)?;
        let replication = cfg.repartition.replication_factor.min(i32::try_from(brokers).unwrap_or(i32::MAX));
        let retention = cfg.repartition.retention.as_millis_i64().to_string();
        let new: Vec<NewTopic<'_>> = topics
            .iter()
            .zip(has)
            .filter(|(_, count)| *count == 0)
            .map(|(topic, _)| {
                NewTopic::new(
                    topic,
                    i32::try_from(partitions).unwrap_or(i32::MAX),
                    TopicReplication::Fixed(replication),
                )
                .set("cleanup.policy", "delete")
                .set("retention.ms", &retention)
            })
            .collect();
        let options = AdminOptions::new().operation_timeout(Some(ADMIN_TIMEOUT)).request_timeout(Some(ADMIN_TIMEOUT));
        let results = runtime
            .block_on(admin.create_topics(&new, &options))
            .map_err(|e| RepartitionError::Topic { topic: topics[0].clone(), problem: format!("creating it: {e}") })?;
        for result in results {
            match result {
                Ok(topic) => {
                    tracing::info!(topic, partitions, replication, retention_ms = %retention, "repartition topic created")
                }
                Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((topic, code)) => {
                    return Err(RepartitionError::Topic {
                        topic,
                        problem: format!("creating it: {code} (does rankpulse have the CREATE ACL on it?)"),
                    })
                }
            }
        }
        let deadline = std::time::Instant::now() + ADMIN_TIMEOUT;
        while has.contains(&0) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
            has = counts(&probe)?.0;
        }
    }
    match has {
        [0, _] | [_, 0] => Err(RepartitionError::Topic {
            topic: topics[usize::from(has[0] != 0)].clone(),
            problem: "created, but not in the metadata".into(),
        }),
        [i, e] if i != e => Err(RepartitionError::Topic {
            topic: topics[1].clone(),
            problem: format!(
                "has {e} partitions and {} has {i}: the join needs the same count on both; recreate them alike",
                topics[0]
            ),
        }),
        [n, _] => {
            if n != partitions {
                tracing::info!(
                    ?topics,
                    partitions = n,
                    wanted = partitions,
                    "the repartition topics exist; their partition count is kept"
                );
            }
            Ok(())
        }
    }
}

/// Starts the stage on a thread of its own; it runs until `shutdown` (or a delivery that failed
/// for good, which triggers it).
pub fn spawn(
    cfg: &Config,
    plan: &Plan,
    routing: Arc<Routing>,
    shutdown: Shutdown,
) -> Result<JoinHandle<Result<(), RepartitionError>>, RepartitionError> {
    let raw_topics = plan.decision.raw_topics.clone();
    let log = Arc::new(KafkaLog::new("repartition", &cfg.kafka.brokers));
    let producer = cfg
        .kafka
        .client_config(ClientRole::Producer)?
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "2")
        .create_with_context(stage::DeliveryContext::new(log.clone()))
        .map_err(RepartitionError::Create)?;
    // A raw partition catching up on a backlog that delivers nothing holds the others back for
    // at most a third of `join.idle_timeout`: well before the join's inputs count as idle.
    let max_stall = cfg.join.idle_timeout.as_duration() / 3;
    let context = stage::StageContext::new(log, producer, raw_topics.clone(), routing, max_stall);
    let consumer_config = consumer_config(cfg)?;
    let from_earliest = crate::config::reads_from_earliest(&consumer_config);
    let consumer: BaseConsumer<stage::StageContext> =
        consumer_config.create_with_context(context).map_err(RepartitionError::Create)?;
    consumer
        .subscribe(&[raw_topics[0].as_str(), raw_topics[1].as_str()])
        .map_err(|error| RepartitionError::Subscribe { topics: raw_topics.join(", "), error })?;
    tracing::info!(group = %stage_group(&cfg.kafka.group_id), ?raw_topics, internal = ?plan.internal_topics, "repartition stage consuming");
    let forwarder = stage::Forwarder {
        reencoder: Reencoder::new(Decoders::new(cfg)),
        internal_topics: plan.internal_topics.clone(),
        max_message_bytes: cfg.limits.max_message_bytes,
    };
    let stage = stage::Stage { consumer, forwarder, shutdown, from_earliest };
    std::thread::Builder::new()
        .name("rankpulse-repartition".into())
        .spawn(move || stage.run())
        .map_err(RepartitionError::Thread)
}

/// The stage's consumer group: its own, so the join's group is assigned only the internal topics.
pub fn stage_group(group_id: &str) -> String {
    format!("{group_id}-repartition")
}

fn consumer_config(cfg: &Config) -> Result<ClientConfig, RepartitionError> {
    let mut c = cfg.kafka.client_config(ClientRole::Consumer)?;
    if c.get("auto.offset.reset").is_none() {
        c.set("auto.offset.reset", "earliest");
    }
    c.set("group.id", stage_group(&cfg.kafka.group_id))
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false");
    if !cfg.kafka.group_instance_id.is_empty() {
        c.set("group.instance.id", format!("{}-repartition", cfg.kafka.group_instance_id));
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stage applies the mapping and the schemas; the join of re-keyed inputs reads
    /// rankpulse's own events, and must not apply them a second time.
    #[test]
    fn the_join_of_re_keyed_inputs_reads_native_events() {
        let cfg = Config::from_toml_with_env(
            "[kafka]\nimpressions_format = \"avro\"\n[schema_registry]\nurl = \"http://registry:8081\"\n\
             [mapping.engagements]\nquery_id = \"/q\"\ndoc_id = \"/d\"\ntimestamp = { path = \"/t\", format = \"epoch_millis\" }\n",
            "test",
            std::iter::empty(),
        )
        .unwrap();
        let decision = |active| RoutingDecision {
            active,
            reason: RoutingReason::Configured,
            raw_topics: [cfg.kafka.impressions_topic.clone(), cfg.kafka.engagements_topic.clone()],
        };
        let plan = |active| Plan {
            decision: decision(active),
            internal_topics: internal_topics(&cfg.kafka.group_id),
            inspection: Inspection::default(),
        };
        let join = plan(true).join_config(&cfg);
        assert_eq!(
            (join.kafka.impressions_format, join.kafka.engagements_format),
            (InputFormat::Json, InputFormat::Json)
        );
        assert!(join.mapping.engagements.is_none() && join.schemas.impressions.is_none());
        assert!(Decoders::new(&join).schemas().is_none(), "no registry for the internal topics");
        assert_eq!(plan(false).join_config(&cfg), cfg, "not re-keyed: the inputs as configured");
    }
}
