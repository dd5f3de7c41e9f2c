//! The changelog topic (`state.changelog_topic`): where each partition's state lives between
//! owners, the way Kafka Streams backs a task's state store.
//!
//! Partition *n*'s snapshots go to partition *n* of the changelog, so restoring a partition reads
//! one changelog partition, from its end. A snapshot is the bytes of one
//! [`crate::checkpoint::encode`] (version and checksum included), split into chunks below the
//! brokers' default message size. Each chunk carries a [`ChunkHeader`]: the snapshot's sequence
//! number (one above the newest the writer saw in the partition) and a random nonce, which
//! together identify it even if two writers ever chose the same sequence, its index and the chunk
//! count (the record format and reassembly are [`super::chunks`], pure). The newest snapshot is the one written last (highest offset), never judged by its
//! number. Chunk keys alternate between two slots (`<partition>/<sequence % 2>/<index>`), so that
//! on a compacted topic a snapshot interrupted by a crash can only overwrite the chunks of the
//! one before the newest complete one.
//!
//! A write is complete once the brokers acknowledged every chunk (`acks=all`, idempotent
//! producer): only then may the offsets the snapshots cover be committed. Sending does not wait
//! for that: the consumer thread goes on consuming, and commits when the brokers answered.
//! Reading walks back from the partition's end in growing steps until it holds a complete
//! snapshot; one that does not verify is reported by topic, partition and offset, and the one
//! before it is used.
//!
//! What the brokers hand back is untrusted: this file is under the no-panic rule (crate
//! documentation, "Hostile input").
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::statistics::Statistics;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::ClientContext;

use super::chunks::{chunk_records, ChunkHeader, SnapshotId, Tail};
use super::record::{self, Links};
use crate::config::{ClientRole, KafkaClientError, KafkaConfig, StateCompression};
use crate::engine::AggregatesOut;
use crate::kafka_log::{KafkaLog, SharedLog};

/// How long the brokers may take to acknowledge one write of snapshots.
const WRITE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long reading one partition's newest snapshot may take.
const READ_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a metadata or topic-creation request may take.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(30);
/// Records read from a partition's end first; each further step reads four times as many.
const FIRST_STEP: i64 = 16;

#[derive(Debug, thiserror::Error)]
pub enum ChangelogError {
    #[error("creating the changelog client: {0}")]
    Client(KafkaError),
    #[error(transparent)]
    Config(#[from] KafkaClientError),
    #[error("changelog topic {topic}: {error}")]
    Topic { topic: String, error: String },
    #[error("changelog topic {topic} has {has} partitions, but the input topics have {needed}: partition n's state goes to changelog partition n; add partitions to it (kafka-topics --alter) or set state.changelog_topic to a new topic")]
    TooFewPartitions { topic: String, has: usize, needed: usize },
    #[error("writing snapshots to {topic}: {error}")]
    Write { topic: String, error: String },
    #[error("reading partition {partition} of {topic}: {error}")]
    Read { topic: String, partition: i32, error: String },
}

/// Counts delivery failures of the changelog producer, so a write knows whether every chunk
/// it sent was acknowledged.
struct ChangelogContext {
    /// The producer's log lines.
    log: Arc<KafkaLog>,
    /// Chunks the brokers did not acknowledge, ever.
    failed: AtomicU64,
    /// The newest delivery error, for the write's error message.
    last_error: Mutex<Option<String>>,
    /// Bytes sent to the brokers, as librdkafka's statistics last counted them (each
    /// [`STATISTICS_INTERVAL`]): the records as compressed, with the protocol's framing.
    sent_bytes: AtomicU64,
}

/// How often librdkafka reports the state producer's statistics (its bytes sent).
const STATISTICS_INTERVAL: Duration = Duration::from_secs(1);

impl ClientContext for ChangelogContext {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        self.log.librdkafka(level, facility, message);
    }
    fn stats(&self, statistics: Statistics) {
        let sent: u64 = statistics.brokers.values().map(|b| b.txbytes).sum();
        self.sent_bytes.fetch_max(sent, Ordering::Relaxed);
    }
    fn error(&self, error: KafkaError, reason: &str) {
        self.log.client_error(&error, reason);
    }
}

impl ProducerContext for ChangelogContext {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        // A delivery does not end an outage here: the log is the consumer's, whose own
        // connections may still be down; it signals recovery when it consumes again.
        match result {
            Ok(_) => {}
            Err((error, _)) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(error.to_string());
            }
        }
    }
}

/// Deltas one snapshot may have before the next snapshot is written, whatever their size: a
/// time bound (an hour at the default 5 s interval) on what a restore reads, and on the keys a
/// compacted changelog keeps per partition.
const MAX_DELTAS: u32 = 720;

/// What a record of [`Changelog::write`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordKind {
    /// A partition's whole state: starts a chain.
    Snapshot,
    /// Its changes since the chain's tip ([`Changelog::chain`]).
    Delta,
}

/// A partition's chain as this replica writes it: the snapshot and the deltas after it.
#[derive(Debug, Clone, Copy)]
pub struct Chain {
    /// The snapshot the chain starts from.
    pub base: SnapshotId,
    /// The newest record of the chain, which the next delta follows.
    pub tip: SnapshotId,
    /// Deltas written since the snapshot.
    deltas: u32,
    /// The snapshot's size in bytes.
    base_bytes: u64,
    /// The deltas' size in bytes, together.
    delta_bytes: u64,
}

impl Chain {
    /// A chain that has just had its snapshot of `bytes` written.
    #[cfg(test)]
    pub(super) fn started(base: SnapshotId, bytes: u64) -> Chain {
        Chain { base, tip: base, deltas: 0, base_bytes: bytes, delta_bytes: 0 }
    }

    /// This chain with `tip` as its newest record.
    #[cfg(test)]
    pub(super) fn with_tip(self, tip: SnapshotId) -> Chain {
        Chain { tip, ..self }
    }

    /// Whether the next record should be a snapshot: once the deltas together are as large as
    /// the snapshot they follow (a restore then reads at most twice the state, and the deltas
    /// written cost at most as much again as snapshots would), or after [`MAX_DELTAS`].
    fn snapshot_due(&self) -> bool {
        self.deltas >= MAX_DELTAS || self.delta_bytes >= self.base_bytes
    }
}

/// Records [`Changelog::send`] sent and [`Changelog::finish`] has not finished.
#[must_use = "a write is complete only once finished"]
pub struct Sent {
    /// Each changelog record's partition, kind and size: how its chain moves on once
    /// acknowledged.
    records: Vec<(i32, RecordKind, u64)>,
    /// The id each partition's changelog record got.
    ids: HashMap<i32, SnapshotId>,
    /// Bytes sent (the chunks with their headers, before compression).
    bytes: u64,
    /// The producer's failed deliveries before the sending: any more when the brokers have
    /// answered, and the write failed.
    failed_before: u64,
    /// When the brokers must have acknowledged every chunk by.
    deadline: Instant,
}

/// A partition's newest state read back: its newest usable snapshot and the deltas after it,
/// in order.
pub struct RecoveredChain {
    /// The snapshot.
    pub base: Recovered,
    /// The deltas that follow it, each following the one before.
    pub deltas: Vec<Recovered>,
}

impl RecoveredChain {
    /// The record the state is as of: the last delta, or the snapshot.
    pub fn newest(&self) -> &Recovered {
        self.deltas.last().unwrap_or(&self.base)
    }

    /// Bytes read for it.
    pub fn bytes(&self) -> usize {
        self.base.bytes.len() + self.deltas.iter().map(|d| d.bytes.len()).sum::<usize>()
    }
}

/// A snapshot read back: its id and bytes, and where it starts (for messages).
pub struct Recovered {
    /// The snapshot's id.
    pub id: SnapshotId,
    /// The offset of its first chunk.
    pub offset: i64,
    /// The snapshot's bytes, for [`crate::checkpoint::decode`].
    pub bytes: Vec<u8>,
    /// When its first chunk was written (the record's timestamp, in ms since the epoch), if the
    /// brokers kept one: when the previous owner last snapshotted the partition.
    pub written_ms: Option<i64>,
}

/// The changelog topic's producer and reader, and the aggregates topic's producer.
pub struct Changelog {
    /// `state.changelog_topic`.
    topic: String,
    /// `state.aggregates_topic`: written with the snapshots, read by `super::aggregates`.
    aggregates_topic: String,
    /// Idempotent, `acks=all`: a write is complete when every replica has every chunk.
    producer: BaseProducer<ChangelogContext>,
    /// Reads one partition at a time by manual assignment (no group, nothing committed).
    reader: BaseConsumer<SharedLog>,
    /// Creates the topic when it is missing.
    admin: AdminClient<SharedLog>,
    /// The sequence of each partition's next snapshot: one above the newest seen in the topic.
    next_sequence: HashMap<i32, u64>,
    /// Each partition's chain this replica writes; none until it wrote a snapshot.
    chains: HashMap<i32, Chain>,
    /// Each partition's newest complete snapshot known (written here, or restored from): the
    /// next snapshot takes the other key slot, so a crash while writing it cannot overwrite
    /// the chain a restore would read on a compacted topic.
    last_base: HashMap<i32, SnapshotId>,
    /// The same for the aggregates topic, which is never read back here (nonces keep two
    /// writers' records apart there).
    next_aggregates_sequence: HashMap<i32, u64>,
    /// The partition count each topic is known to have (at least).
    ready_for: HashMap<String, usize>,
    /// `state.changelog_replication_factor`.
    replication: i32,
    /// Runs the admin client's requests, which are futures, on the consumer thread.
    runtime: tokio::runtime::Handle,
}

impl Changelog {
    /// The changelog's clients, with the `[kafka]` brokers and properties (security included).
    pub fn new(
        kafka: &KafkaConfig,
        (topic, aggregates_topic): (&str, &str),
        replication: i32,
        compression: StateCompression,
        runtime: tokio::runtime::Handle,
        log: Arc<KafkaLog>,
    ) -> Result<Changelog, ChangelogError> {
        let context = ChangelogContext {
            log: log.clone(),
            failed: AtomicU64::new(0),
            last_error: Mutex::new(None),
            sent_bytes: AtomicU64::new(0),
        };
        let producer = kafka
            .client_config(ClientRole::Producer)?
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("message.timeout.ms", WRITE_TIMEOUT.as_millis().to_string())
            .set("linger.ms", "5")
            .set("compression.type", compression.librdkafka_name())
            .set("statistics.interval.ms", STATISTICS_INTERVAL.as_millis().to_string())
            .create_with_context(context)
            .map_err(ChangelogError::Client)?;
        let reader = kafka
            .client_config(ClientRole::Consumer)?
            .set("group.id", format!("{}-changelog-reader", kafka.group_id))
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "true")
            .set("auto.offset.reset", "earliest")
            // A read ends at the partition's end, where a fetch waits `fetch.wait.max.ms` for
            // data that is not coming. The broker answers a connection's requests in order, so
            // with the default (500 ms) the next partition's watermark request queued behind
            // that fetch: measured, restoring cost 0.5 to 0.75 s per partition before the
            // replica consumed again, and is 15 to 25 ms with this.
            .set("fetch.wait.max.ms", "10")
            // A snapshot of a million pending impressions is about 120 MB: fetched in 16 MB
            // steps rather than the default 1 MB per partition and request.
            .set("max.partition.fetch.bytes", (16 << 20).to_string())
            .set("fetch.max.bytes", (64 << 20).to_string())
            .set("receive.message.max.bytes", ((64 << 20) + (1 << 20)).to_string())
            .create_with_context(SharedLog(log.clone()))
            .map_err(ChangelogError::Client)?;
        // The admin client is a producer-type client.
        let admin = kafka
            .client_config(ClientRole::Producer)?
            .create_with_context(SharedLog(log))
            .map_err(ChangelogError::Client)?;
        Ok(Changelog {
            topic: topic.to_string(),
            aggregates_topic: aggregates_topic.to_string(),
            producer,
            reader,
            admin,
            next_sequence: HashMap::new(),
            chains: HashMap::new(),
            last_base: HashMap::new(),
            next_aggregates_sequence: HashMap::new(),
            ready_for: HashMap::new(),
            replication,
            runtime,
        })
    }

    /// Makes sure the changelog and aggregates topics exist with at least `partitions`
    /// partitions, creating them (compacted) when missing.
    pub fn ensure_topics(&mut self, partitions: usize) -> Result<(), ChangelogError> {
        for topic in [self.topic.clone(), self.aggregates_topic.clone()] {
            if self.ready_for.get(&topic).is_some_and(|&has| has >= partitions) {
                continue;
            }
            let has = self.ensure_topic(&topic, partitions)?;
            self.ready_for.insert(topic, has);
        }
        Ok(())
    }

    /// Makes sure one topic exists with at least `partitions` partitions (created compacted
    /// when missing); returns how many it has.
    fn ensure_topic(&self, topic: &str, partitions: usize) -> Result<usize, ChangelogError> {
        let topic_error = |error: String| ChangelogError::Topic { topic: topic.to_string(), error };
        let deadline = Instant::now() + ADMIN_TIMEOUT;
        let mut created = false;
        tracing::debug!(topic, partitions, "checking a state topic");
        loop {
            let metadata = self
                .reader
                .fetch_metadata(Some(topic), ADMIN_TIMEOUT)
                .map_err(|e| topic_error(format!("reading metadata: {e}")))?;
            let brokers = metadata.brokers().len();
            let found = metadata.topics().iter().find(|t| t.name() == topic).filter(|t| t.error().is_none());
            match found.map(|t| t.partitions().len()) {
                Some(has) if has >= partitions => return Ok(has),
                Some(has) if has > 0 => {
                    return Err(ChangelogError::TooFewPartitions { topic: topic.to_string(), has, needed: partitions })
                }
                _ if !created => {
                    let replication = self.replication.min(i32::try_from(brokers.max(1)).unwrap_or(1));
                    let new = NewTopic::new(
                        topic,
                        i32::try_from(partitions).unwrap_or(i32::MAX),
                        TopicReplication::Fixed(replication),
                    )
                    .set("cleanup.policy", "compact");
                    let options =
                        AdminOptions::new().operation_timeout(Some(ADMIN_TIMEOUT)).request_timeout(Some(ADMIN_TIMEOUT));
                    let results = self
                        .runtime
                        .block_on(self.admin.create_topics([&new], &options))
                        .map_err(|e| topic_error(format!("creating it: {e}")))?;
                    for result in results {
                        match result {
                            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                            Err((_, code)) => return Err(topic_error(format!("creating it: {code}"))),
                        }
                    }
                    tracing::info!(topic, partitions, replication, "state topic created (compacted)");
                    created = true;
                }
                _ if Instant::now() > deadline => return Err(topic_error("created, but not in the metadata".into())),
                _ => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// The chain a partition's next record may continue as a delta: `None` when this replica
    /// wrote no snapshot of it yet, its last write failed, or a snapshot is due.
    pub fn chain(&self, partition: i32) -> Option<Chain> {
        self.chains.get(&partition).filter(|chain| !chain.snapshot_due()).copied()
    }

    /// Notes the newest snapshot of a partition restored from (its key slot is not the next
    /// snapshot's).
    pub fn restored_from(&mut self, partition: i32, base: SnapshotId) {
        self.last_base.insert(partition, base);
        self.chains.remove(&partition);
    }

    /// The id of a partition's next record: one above the newest sequence seen, and for a
    /// snapshot the key slot (sequence parity) its newest known snapshot does not hold.
    fn next_id(&mut self, partition: i32, kind: RecordKind) -> SnapshotId {
        let next = self.next_sequence.entry(partition).or_insert(0);
        let same_slot = self.last_base.get(&partition).is_some_and(|last| last.sequence % 2 == *next % 2);
        if kind == RecordKind::Snapshot && same_slot {
            *next = next.wrapping_add(1);
        }
        let id = SnapshotId { sequence: *next, nonce: rand::random() };
        // Sequences only choose a key slot and tell records apart (the newest is judged by
        // offset): past u64::MAX they start again at 0, still alternating slots.
        *next = next.wrapping_add(1);
        id
    }

    /// Sends one record per partition to the changelog (a snapshot, or a delta continuing
    /// [`Changelog::chain`]) and one aggregates record per partition to the aggregates topic,
    /// without waiting for the brokers: [`Changelog::answered`] says when they answered for
    /// every chunk, and [`Changelog::finish`] (which waits for that) whether the write is
    /// complete. Nothing else may be sent before it is finished: the chains move on then. On
    /// error, some chunks may be sent: a later complete record supersedes them, a reader never
    /// takes an incomplete one, and the partitions start their next chain with a snapshot.
    ///
    /// Keys: a snapshot's chunks `<partition>/<slot>/<index>`, a delta's
    /// `<partition>/<slot>/d<n>/<index>` (its snapshot's slot, n counting from 1), so on a
    /// compacted topic records of one chain overwrite only those of the chain before the one
    /// before.
    ///
    /// An aggregates record's key is `<partition>/<slot>/<index>` with the slot the engine chose
    /// (a base's, or its increment's: see `crate::engine`'s `increments`).
    pub fn send(
        &mut self,
        records: &[(i32, RecordKind, Vec<u8>)],
        aggregates: &[AggregatesOut],
    ) -> Result<Sent, ChangelogError> {
        let sent = self.send_records(records, aggregates);
        if sent.is_err() {
            for (partition, ..) in records {
                self.chains.remove(partition);
            }
        }
        sent
    }

    /// Whether the brokers answered for every chunk of `sent` (or its time is up), without
    /// waiting: serves the producer's delivery reports that arrived.
    pub fn answered(&self, sent: &Sent) -> bool {
        // One poll serves one event (a batch of delivery reports, or the statistics): a few
        // serve what arrived since the last look.
        for _ in 0..16 {
            if self.producer.in_flight_count() == 0 {
                return true;
            }
            self.producer.poll(Duration::ZERO);
        }
        self.producer.in_flight_count() == 0 || Instant::now() >= sent.deadline
    }

    /// Waits until the brokers answered for every chunk of `sent` (at most until its deadline)
    /// and moves the chains on: a partition whose record is acknowledged goes on from it, one
    /// whose write failed starts again with a snapshot. Returns the bytes sent.
    pub fn finish(&mut self, sent: Sent) -> Result<u64, ChangelogError> {
        let acknowledged = self.acknowledged(&sent);
        for &(partition, kind, len) in &sent.records {
            let Some(&id) = sent.ids.get(&partition).filter(|_| acknowledged.is_ok()) else {
                self.chains.remove(&partition);
                continue;
            };
            match (kind, self.chains.get_mut(&partition)) {
                (RecordKind::Delta, Some(chain)) => {
                    chain.tip = id;
                    chain.deltas += 1;
                    chain.delta_bytes += len;
                }
                (RecordKind::Delta, None) => {}
                (RecordKind::Snapshot, _) => {
                    self.last_base.insert(partition, id);
                    let chain = Chain { base: id, tip: id, deltas: 0, base_bytes: len, delta_bytes: 0 };
                    self.chains.insert(partition, chain);
                }
            }
        }
        acknowledged.map(|()| sent.bytes)
    }

    /// Whether every chunk of `sent` was acknowledged, waiting for the brokers at most until
    /// its deadline.
    fn acknowledged(&self, sent: &Sent) -> Result<(), ChangelogError> {
        let write_error = |error: String| ChangelogError::Write { topic: self.topic.clone(), error };
        let left = sent.deadline.saturating_duration_since(Instant::now());
        self.producer.flush(left).map_err(|e| write_error(format!("not acknowledged: {e}")))?;
        let context = self.producer.context();
        if context.failed.load(Ordering::Relaxed) != sent.failed_before {
            let last = context.last_error.lock().unwrap_or_else(|p| p.into_inner()).clone();
            return Err(write_error(format!("not acknowledged: {}", last.unwrap_or_default())));
        }
        Ok(())
    }

    /// [`Changelog::send`]'s sending.
    fn send_records(
        &mut self,
        records: &[(i32, RecordKind, Vec<u8>)],
        aggregates: &[AggregatesOut],
    ) -> Result<Sent, ChangelogError> {
        let topic_name = self.topic.clone();
        let write_error = |error: String| ChangelogError::Write { topic: topic_name.clone(), error };
        let failed_before = self.producer.context().failed.load(Ordering::Relaxed);
        let mut bytes = 0u64;
        let mut ids = HashMap::new();
        // `Ok(kind)`: a changelog record; `Err(slot)`: an aggregates record and its key's slot.
        let to_changelog = records.iter().map(|(p, kind, b)| (Ok(*kind), p, b));
        let to_aggregates = aggregates.iter().map(|a| (Err(a.slot.as_str()), &a.partition, &a.bytes));
        for (kind, partition, record) in to_changelog.chain(to_aggregates) {
            let (topic, id, slot) = match kind {
                Ok(kind) => {
                    let id = self.next_id(*partition, kind);
                    ids.insert(*partition, id);
                    let slot = match (kind, self.chains.get(partition)) {
                        (RecordKind::Delta, Some(chain)) => {
                            format!("{}/d{}", chain.base.sequence % 2, chain.deltas.saturating_add(1))
                        }
                        _ => format!("{}", id.sequence % 2),
                    };
                    (self.topic.as_str(), id, slot)
                }
                Err(slot) => {
                    let next = self.next_aggregates_sequence.entry(*partition).or_insert(0);
                    let id = SnapshotId { sequence: *next, nonce: rand::random() };
                    *next = next.wrapping_add(1);
                    (self.aggregates_topic.as_str(), id, slot.to_string())
                }
            };
            let chunks = chunk_records(id, record).map_err(|e| write_error(e.to_string()))?;
            for (index, record) in chunks.iter().enumerate() {
                let key = format!("{partition}/{slot}/{index}");
                bytes += record.len() as u64;
                let mut pending = BaseRecord::to(topic).partition(*partition).key(&key).payload(record);
                loop {
                    match self.producer.send(pending) {
                        Ok(()) => break,
                        Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), record)) => {
                            pending = record;
                            self.producer.poll(Duration::from_millis(10));
                        }
                        Err((e, _)) => return Err(write_error(e.to_string())),
                    }
                }
            }
        }
        let records = records.iter().map(|(partition, kind, bytes)| (*partition, *kind, bytes.len() as u64)).collect();
        Ok(Sent { records, ids, bytes, failed_before, deadline: Instant::now() + WRITE_TIMEOUT })
    }

    /// Bytes the producer sent to the brokers so far (the changelog's and aggregates records,
    /// compressed, framed), as of librdkafka's last statistics.
    pub fn sent_bytes(&self) -> u64 {
        self.producer.context().sent_bytes.load(Ordering::Relaxed)
    }

    /// The end offset of a changelog partition (the offset its next record gets).
    pub fn end_offset(&self, partition: i32) -> Result<i64, ChangelogError> {
        let (_, high) = self.reader.fetch_watermarks(&self.topic, partition, ADMIN_TIMEOUT).map_err(|e| {
            ChangelogError::Read { topic: self.topic.clone(), partition, error: format!("watermarks: {e}") }
        })?;
        Ok(high)
    }

    /// Notes the sequence a partition's next snapshot continues from, learnt without reading
    /// the partition here (from the warm standby's copy).
    pub fn continue_sequence(&mut self, partition: i32, next: u64) {
        let known = self.next_sequence.entry(partition).or_insert(0);
        *known = (*known).max(next);
    }

    /// The newest complete snapshot of a partition that `usable` accepts (it decodes and fits
    /// the configuration), or `None` if the partition has none. Snapshots `usable` rejects
    /// are reported and skipped for the one before; if it rejects every one, that is an error
    /// (starting the partition empty would silently lose its state).
    pub fn read_newest<T, E: std::fmt::Display>(
        &mut self,
        partition: i32,
        mut usable: impl FnMut(&RecoveredChain) -> Result<T, E>,
    ) -> Result<Option<(RecoveredChain, T)>, ChangelogError> {
        let read_error = |error: String| ChangelogError::Read { topic: self.topic.clone(), partition, error };
        let (low, high) = self
            .reader
            .fetch_watermarks(&self.topic, partition, ADMIN_TIMEOUT)
            .map_err(|e| read_error(format!("watermarks: {e}")))?;
        let deadline = Instant::now() + READ_TIMEOUT;
        tracing::debug!(topic = %self.topic, partition, low, high, "reading the newest snapshot");
        let mut tail = Tail::default();
        // Record timestamps by offset, for the one snapshot taken.
        let mut written = HashMap::new();
        let mut rejected = HashSet::new();
        let mut last_rejection = None;
        let (mut from, mut step) = (high, FIRST_STEP);
        while from > low {
            let end = from;
            from = (from - step).max(low);
            step = step.saturating_mul(4);
            self.read_range(partition, from, end, deadline, &mut tail, &mut written).map_err(read_error)?;
            if let Some(after) = tail.next_sequence() {
                let next = self.next_sequence.entry(partition).or_insert(0);
                *next = (*next).max(after);
            }
            let complete = tail.complete();
            let links: Vec<(SnapshotId, i64, Links)> = complete
                .iter()
                .filter_map(|&(id, offset)| Some((id, offset, record::peek_links(tail.first_chunk(id))?)))
                .collect();
            let recover = |id: SnapshotId, offset: i64| Recovered {
                id,
                offset,
                bytes: tail.assemble(id),
                written_ms: written.get(&offset).copied(),
            };
            // Snapshots newest first, each with the chain of deltas after it; a record whose
            // first bytes say nothing is tried as a snapshot (and reported when it is not one).
            for &(id, offset) in &complete {
                if rejected.contains(&id)
                    || links.iter().any(|(other, _, l)| *other == id && matches!(l, Links::Delta { .. }))
                {
                    continue;
                }
                let chain = record::resolve_chain(id, offset, &links);
                let offsets: HashMap<SnapshotId, i64> = complete.iter().copied().collect();
                let deltas = chain.iter().map(|d| recover(*d, offsets.get(d).copied().unwrap_or(offset))).collect();
                let recovered = RecoveredChain { base: recover(id, offset), deltas };
                match usable(&recovered) {
                    Ok(value) => return Ok(Some((recovered, value))),
                    Err(why) => {
                        tracing::error!(topic = %self.topic, partition, offset, snapshot = id.sequence, reason = %why, "changelog snapshot unusable; trying the one before");
                        rejected.insert(id);
                        last_rejection = Some(format!("snapshot {} at offset {offset}: {why}", id.sequence));
                    }
                }
            }
        }
        match last_rejection {
            None => Ok(None),
            Some(why) => Err(read_error(format!("no usable snapshot (the oldest tried: {why})"))),
        }
    }

    /// Reads the records of `[from, end)` of a partition into `tail`, and their timestamps into
    /// `written`.
    fn read_range(
        &self,
        partition: i32,
        from: i64,
        end: i64,
        deadline: Instant,
        tail: &mut Tail,
        written: &mut HashMap<i64, i64>,
    ) -> Result<(), String> {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&self.topic, partition, Offset::Offset(from)).map_err(|e| e.to_string())?;
        self.reader.assign(&tpl).map_err(|e| format!("assigning: {e}"))?;
        drop(tpl);
        loop {
            if Instant::now() > deadline {
                return Err(format!("timed out after {READ_TIMEOUT:?}"));
            }
            match self.reader.poll(Duration::from_millis(100)) {
                None => {}
                Some(Err(KafkaError::PartitionEOF(_))) => break,
                // The brokers unreachable, or were (the event may have waited in the reader's
                // queue since an outage that is over): librdkafka reconnects, the read goes on
                // until the deadline. Stopping here stopped the daemon after every outage
                // longer than the group's session timeout.
                Some(Err(e)) if crate::kafka_log::is_broker_outage(&e) => {
                    tracing::debug!(topic = %self.topic, partition, error = %e, "reading the changelog: brokers unreachable; retrying");
                }
                Some(Err(e)) => return Err(e.to_string()),
                Some(Ok(message)) => {
                    let offset = message.offset();
                    if offset < end {
                        if let Some((header, payload)) = message.payload().and_then(ChunkHeader::read) {
                            tail.add(offset, header, payload);
                            if let Some(ms) = message.timestamp().to_millis() {
                                written.insert(offset, ms);
                            }
                        }
                    }
                    // Compaction may have removed the record at `end - 1`: anything at or past
                    // it ends the range.
                    if offset >= end - 1 {
                        break;
                    }
                }
            }
        }
        self.reader.unassign().map_err(|e| format!("unassigning: {e}"))
    }
}
