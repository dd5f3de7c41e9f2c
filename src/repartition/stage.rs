//! The stage's thread: consumes the raw topics in a consumer group of its own, re-keys each
//! event by its query id onto the internal topics, and commits a raw offset only once the
//! brokers acknowledged everything produced from the messages before it.
//!
//! Acknowledged, then committed: the producer is flushed (idempotent, `acks=all`) before every
//! commit, at an interval, before a rebalance takes partitions away, and at shutdown. A crash
//! between the two re-reads and re-sends what was not committed; the copies reach the same
//! partition of the internal topics (the key is the query id) and the join counts an
//! impression once per query id and an engagement once per identity (`join`'s de-duplication),
//! so a re-send changes no count. A delivery that fails for good stops the process before any
//! commit covers it: nothing is lost, and the restart re-sends.
//!
//! What is read waits in its raw partition's lane until `merge` lets it go: while a raw
//! partition catches up on a backlog, the lanes are forwarded in event-time order, so that an
//! internal partition's event time does not run ahead of raw partitions still unread. A lane's
//! bounds (where reading starts, the partition's end) are looked up once it is assigned.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Headers, Message};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientContext;

use super::encode::Reencoder;
use super::merge::{Entry, Fetch, Merge, Source};
use super::RepartitionError;
use crate::engine::{RejectLog, Routing};
use crate::event::{EventKind, RawMessage, RejectReason, Rejection};
use crate::kafka_log::KafkaLog;
use crate::shutdown::Shutdown;

/// How often what was produced is flushed and its raw offsets committed: bounds the latency the
/// stage adds (a flush waits for the acknowledgements) and how much a crash re-sends.
const FLUSH_INTERVAL: Duration = Duration::from_millis(100);
/// Messages produced before a flush is due whatever the interval: bounds the producer's queue.
const FLUSH_MESSAGES: usize = 20_000;
/// How long a flush may wait for the acknowledgements before the stage gives up (and stops the
/// process without committing: the restart re-sends).
const FLUSH_TIMEOUT: Duration = Duration::from_secs(60);
/// A flush slower than this is logged.
const SLOW_FLUSH: Duration = Duration::from_millis(500);
/// The longest one poll waits: bounds how late shutdown and a due flush can be.
const POLL_TIMEOUT: Duration = Duration::from_millis(50);
/// The pause after a consume error, so a broken connection recovers without spinning.
const ERROR_BACKOFF: Duration = Duration::from_millis(100);
/// Messages queued in one raw partition's lane before its fetching is paused: bounds the memory
/// a backlog takes while another partition is read up to it (a few MB a lane).
const LANE_MESSAGES: usize = 5_000;
/// How long looking up a lane's bounds may take, and the pause before looking again after a
/// failure.
const BOUNDS_TIMEOUT: Duration = Duration::from_secs(2);
const BOUNDS_RETRY: Duration = Duration::from_millis(500);

/// The producer's context: counts deliveries that failed for good.
pub(super) struct DeliveryContext {
    /// The stage's log.
    log: Arc<KafkaLog>,
    /// Messages the brokers never acknowledged: any makes the next flush fail.
    failed: AtomicU64,
    /// The newest delivery error, for the stage's error message.
    last_error: Mutex<Option<String>>,
}

impl ClientContext for DeliveryContext {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        self.log.librdkafka(level, facility, message);
    }
    fn error(&self, error: KafkaError, reason: &str) {
        self.log.client_error(&error, reason);
    }
}

impl ProducerContext for DeliveryContext {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((error, _)) = result {
            self.failed.fetch_add(1, Ordering::Relaxed);
            *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(error.to_string());
        }
    }
}

/// What the consumer's rebalance callback shares with the loop: the producer and the raw
/// offsets produced but not yet committed.
pub(super) struct StageContext {
    /// The stage's log, shared with the producer.
    log: Arc<KafkaLog>,
    /// Writes the re-keyed events.
    producer: BaseProducer<DeliveryContext>,
    /// The raw topics (impressions, engagements), for the commits.
    raw_topics: [String; 2],
    /// The uncommitted progress and its counts; only the stage thread locks it (the loop and
    /// the callbacks inside its poll), the lock is what makes the context `Sync`.
    pending: Mutex<Pending>,
    /// Where the forwarded counts go.
    routing: Arc<Routing>,
    /// What was read and is not forwarded yet, per raw partition; locked by the stage thread
    /// alone (the loop, and the rebalance callbacks inside its poll).
    merge: Mutex<Merge<Option<Forward>>>,
}

/// A re-keyed event waiting in its lane; `None` in its place for a rejected message.
pub(super) struct Forward {
    /// Its query id: the key on the internal topic.
    key: String,
    /// The native event.
    payload: Vec<u8>,
}

/// Produced since the last commit.
#[derive(Default)]
struct Pending {
    /// The next raw offset of each (input kind, partition) whose messages were all produced.
    offsets: BTreeMap<(usize, i32), i64>,
    /// Events produced per input kind, counted as forwarded once acknowledged.
    produced: [u64; 2],
    /// Messages consumed since the last flush, forwarded or rejected.
    messages: usize,
    /// A flush failed: the stage stops, and nothing more is committed.
    failed: Option<RepartitionError>,
}

impl ClientContext for StageContext {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        self.log.librdkafka(level, facility, message);
    }
    fn error(&self, error: KafkaError, reason: &str) {
        self.log.client_error(&error, reason);
    }
}

impl ConsumerContext for StageContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        // Before partitions go to another member, what was forwarded from them is acknowledged
        // and committed, so their next owner re-sends nothing; what waits in their lanes was
        // not committed, and their next owner reads it.
        if let Rebalance::Revoke(tpl) = rebalance {
            self.flush_and_commit(consumer, CommitMode::Sync);
            let mut merge = self.merge();
            for element in tpl.elements() {
                if let Some(source) = self.source(element.topic(), element.partition()) {
                    merge.revoke(source);
                }
            }
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(tpl) => {
                let mut merge = self.merge();
                for element in tpl.elements() {
                    if let Some(source) = self.source(element.topic(), element.partition()) {
                        merge.assign(source);
                    }
                }
                drop(merge);
                // A partition paused when it was revoked starts fetching again.
                let _ = consumer.resume(tpl);
                let partitions: Vec<String> =
                    tpl.elements().iter().map(|e| format!("{}[{}]", e.topic(), e.partition())).collect();
                tracing::info!(?partitions, "repartition stage: raw partitions assigned");
            }
            Rebalance::Revoke(_) => tracing::info!("repartition stage: raw partitions revoked"),
            Rebalance::Error(e) => tracing::warn!(error = %e, "repartition stage: rebalance error"),
        }
    }
}

impl StageContext {
    fn pending(&self) -> MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn merge(&self) -> MutexGuard<'_, Merge<Option<Forward>>> {
        self.merge.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The lane of a raw topic's partition.
    fn source(&self, topic: &str, partition: i32) -> Option<Source> {
        self.raw_topics.iter().position(|t| t == topic).map(|kind| (kind, partition))
    }

    /// Looks up where the lanes of newly assigned partitions start reading (the committed
    /// offset, else the reset's) and where their partitions end: until then they are taken to
    /// be catching up. A failed lookup is retried on the next call.
    fn bound_lanes(&self, consumer: &BaseConsumer<Self>, from_earliest: bool) {
        let unbounded = self.merge().unbounded();
        let mut tpl = TopicPartitionList::new();
        for &(kind, partition) in &unbounded {
            if let Some(topic) = self.raw_topics.get(kind) {
                tpl.add_partition(topic, partition);
            }
        }
        let committed = match consumer.committed_offsets(tpl, BOUNDS_TIMEOUT) {
            Ok(committed) => committed,
            Err(e) => {
                tracing::debug!(error = %e, "reading the repartition stage's committed offsets failed; retried");
                return;
            }
        };
        for (kind, partition) in unbounded {
            let Some(topic) = self.raw_topics.get(kind) else { continue };
            let Ok((low, high)) = consumer.fetch_watermarks(topic, partition, BOUNDS_TIMEOUT) else { continue };
            let start = match committed.find_partition(topic, partition).map(|e| e.offset()) {
                Some(Offset::Offset(offset)) => offset,
                _ if from_earliest => low,
                _ => high,
            };
            self.merge().set_bounds((kind, partition), start, high);
        }
    }

    /// Pauses or resumes fetching a lane's partition.
    fn apply(&self, consumer: &BaseConsumer<Self>, fetch: Fetch) {
        let (Fetch::Pause((kind, partition)) | Fetch::Resume((kind, partition))) = fetch;
        let Some(topic) = self.raw_topics.get(kind) else { return };
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(topic, partition);
        let result = match fetch {
            Fetch::Pause(_) => consumer.pause(&tpl),
            Fetch::Resume(_) => consumer.resume(&tpl),
        };
        if let Err(e) = result {
            // A partition revoked meanwhile: its next assignment starts it unpaused.
            tracing::debug!(topic, partition, error = %e, "pausing or resuming a raw partition failed");
        }
    }

    /// Serves delivery reports until every produced event is acknowledged (or failed for good):
    /// false after [`FLUSH_TIMEOUT`]. Not the client's `flush`, which waited about 100 ms
    /// whatever the acknowledgements' latency (measured on the mock cluster): that bounded the
    /// stage to one flush per 100 ms and made it the pipeline's slowest step.
    fn wait_acknowledged(&self) -> bool {
        let deadline = Instant::now() + FLUSH_TIMEOUT;
        loop {
            self.producer.poll(Duration::from_millis(1));
            if self.producer.in_flight_count() == 0 {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
        }
    }

    /// Waits for every produced event's acknowledgement, then commits the raw offsets they came
    /// from. On a failed delivery nothing is committed and the failure is kept for the loop.
    fn flush_and_commit(&self, consumer: &BaseConsumer<Self>, mode: CommitMode) {
        let mut pending = self.pending();
        if pending.failed.is_some() || pending.offsets.is_empty() {
            return;
        }
        let failed_before = self.producer.context().failed.load(Ordering::Relaxed);
        let started = Instant::now();
        let acknowledged = self.wait_acknowledged();
        let took = started.elapsed();
        if took > SLOW_FLUSH {
            // The stage's latency is this wait's: say when the brokers are slow to acknowledge.
            let events = pending.produced.iter().sum::<u64>();
            tracing::info!(
                took_ms = took.as_millis() as u64,
                events,
                "the repartition topics were slow to acknowledge"
            );
        }
        let failed = self.producer.context().failed.load(Ordering::Relaxed) - failed_before;
        if !acknowledged {
            let problem = format!("not acknowledged within {FLUSH_TIMEOUT:?}");
            pending.failed = Some(RepartitionError::Produce(problem));
            return;
        }
        if failed > 0 {
            let last = self.producer.context().last_error.lock().unwrap_or_else(|p| p.into_inner()).clone();
            let error = format!("{failed} events not acknowledged: {}", last.unwrap_or_default());
            pending.failed = Some(RepartitionError::Produce(error));
            return;
        }
        for kind in EventKind::ALL {
            self.routing.stage_forwarded(kind, std::mem::take(&mut pending.produced[kind.index()]));
        }
        let mut tpl = TopicPartitionList::new();
        for (&(kind, partition), &next) in &pending.offsets {
            if let Some(topic) = self.raw_topics.get(kind) {
                let _ = tpl.add_partition_offset(topic, partition, Offset::Offset(next));
            }
        }
        pending.offsets.clear();
        pending.messages = 0;
        if let Err(e) = consumer.commit(&tpl, mode) {
            // Not committed: the next owner re-sends from the previous commit, which the join's
            // de-duplication absorbs. Nothing is lost either way.
            if !matches!(e.rdkafka_error_code(), Some(RDKafkaErrorCode::NoOffset)) {
                tracing::debug!(error = %e, "committing the repartition stage's raw offsets failed; they are re-sent");
            }
        }
    }
}

/// The stage's thread state.
pub(super) struct Stage {
    /// Reads the raw topics in the stage's own group; its context holds the producer.
    pub(super) consumer: BaseConsumer<StageContext>,
    /// Re-keys what the consumer reads.
    pub(super) forwarder: Forwarder,
    /// Checked between messages; the stage then flushes and commits one last time.
    pub(super) shutdown: Shutdown,
    /// Whether a partition without a committed offset is read from its start
    /// (`auto.offset.reset`): where its lane starts catching up.
    pub(super) from_earliest: bool,
}

/// What turns a raw message into a produced event.
pub(super) struct Forwarder {
    /// Decodes and re-encodes.
    pub(super) reencoder: Reencoder,
    /// The internal topics (impressions, engagements).
    pub(super) internal_topics: [String; 2],
    /// `limits.max_message_bytes`: a longer raw message is rejected unread, as the join would.
    pub(super) max_message_bytes: usize,
}

impl StageContext {
    pub(super) fn new(
        log: Arc<KafkaLog>,
        producer: BaseProducer<DeliveryContext>,
        raw_topics: [String; 2],
        routing: Arc<Routing>,
        max_stall: Duration,
    ) -> Self {
        let merge = Mutex::new(Merge::new(max_stall, LANE_MESSAGES));
        StageContext { log, producer, raw_topics, pending: Mutex::new(Pending::default()), routing, merge }
    }
}

impl DeliveryContext {
    pub(super) fn new(log: Arc<KafkaLog>) -> Self {
        DeliveryContext { log, failed: AtomicU64::new(0), last_error: Mutex::new(None) }
    }
}

impl Stage {
    /// Runs until shutdown or a delivery that failed for good.
    pub(super) fn run(self) -> Result<(), RepartitionError> {
        let Stage { consumer, mut forwarder, shutdown, from_earliest } = self;
        let mut rejects = RejectLog::default();
        let mut next_flush = Instant::now() + FLUSH_INTERVAL;
        let mut next_bounds = Instant::now();
        let result = loop {
            if shutdown.is_triggered() {
                break Ok(());
            }
            match consumer.poll(POLL_TIMEOUT) {
                Some(Ok(message)) => {
                    consumer.context().log.recovered("a message was consumed");
                    if let Some(fetch) = forwarder.read(consumer.context(), &message, &mut rejects) {
                        consumer.context().apply(&consumer, fetch);
                    }
                }
                Some(Err(e)) => {
                    consumer.context().log.consume_error(&e);
                    std::thread::sleep(ERROR_BACKOFF);
                }
                None => {}
            }
            let context = consumer.context();
            if Instant::now() >= next_bounds && !context.merge().unbounded().is_empty() {
                context.bound_lanes(&consumer, from_earliest);
                next_bounds = Instant::now() + BOUNDS_RETRY;
            }
            forwarder.forward_ready(&consumer);
            // Serves the delivery callbacks between flushes.
            context.producer.poll(Duration::ZERO);
            let now = Instant::now();
            if now >= next_flush || context.pending().messages >= FLUSH_MESSAGES {
                context.flush_and_commit(&consumer, CommitMode::Async);
                // From the end of the wait: the next interval gathers messages, not waits.
                next_flush = Instant::now() + FLUSH_INTERVAL;
            }
            if let Some(failed) = context.pending().failed.take() {
                break Err(failed);
            }
        };
        let context = consumer.context();
        if result.is_ok() {
            context.flush_and_commit(&consumer, CommitMode::Sync);
        }
        rejects.report_suppressed();
        consumer.unsubscribe();
        let failed = context.pending().failed.take();
        match (result, failed) {
            (Err(e), _) | (Ok(()), Some(e)) => {
                tracing::error!(error = %e, "the repartition stage stopped without committing what it could not deliver; a restart re-sends it");
                shutdown.trigger();
                Err(e)
            }
            (Ok(()), None) => Ok(()),
        }
    }
}

impl Forwarder {
    /// Decodes one raw message into its lane, re-keyed, or counts its rejection (it keeps its
    /// place in the lane: its offset is done only once what was read before it is). Says
    /// whether to pause the lane's partition.
    fn read(
        &mut self,
        context: &StageContext,
        message: &BorrowedMessage<'_>,
        rejects: &mut RejectLog,
    ) -> Option<Fetch> {
        let kind = if message.topic() == context.raw_topics[0] {
            EventKind::Impression
        } else if message.topic() == context.raw_topics[1] {
            EventKind::Engagement
        } else {
            return None;
        };
        context.routing.stage_consumed(kind);
        let payload = message.payload().unwrap_or(&[]);
        let reencoded = if payload.len() > self.max_message_bytes {
            let detail = format!("{} bytes, more than limits.max_message_bytes", payload.len());
            Err(Rejection::new(RejectReason::TooLarge, detail))
        } else {
            // Headers are collected only for a mapping that reads one.
            let headers: Vec<(&str, &[u8])> = match (self.reencoder.reads_envelope(), message.headers()) {
                (true, Some(headers)) => headers.iter().filter_map(|h| Some((h.key, h.value?))).collect(),
                _ => Vec::new(),
            };
            self.reencoder.reencode(kind, RawMessage { payload, key: message.key(), headers: &headers })
        };
        let (event_time, item) = match reencoded {
            Ok(()) => {
                let forward =
                    Forward { key: self.reencoder.key().to_owned(), payload: self.reencoder.payload().to_vec() };
                (Some(self.reencoder.timestamp()), Some(forward))
            }
            Err(rejection) => {
                context.routing.stage_rejected(kind, rejection.reason);
                rejects.log(Instant::now(), || {
                    let (topic, reason) = (message.topic(), rejection.reason.label());
                    let (partition, offset) = (message.partition(), message.offset());
                    tracing::warn!(topic, partition, offset, reason, detail = %rejection.detail, "rejected message");
                });
                (None, None)
            }
        };
        let entry = Entry { offset: message.offset(), event_time, item };
        context.merge().push((kind.index(), message.partition()), entry)
    }

    /// Produces every event its lane lets go (`merge`) onto its internal topic; each one's
    /// offset is done once what was produced before it is acknowledged.
    fn forward_ready(&self, consumer: &BaseConsumer<StageContext>) {
        let context = consumer.context();
        loop {
            let Some(((kind, partition), entry, fetch)) = context.merge().pop(Instant::now()) else { break };
            if let Some(fetch) = fetch {
                context.apply(consumer, fetch);
            }
            if let Some(Forward { key, payload }) = &entry.item {
                let Some(topic) = self.internal_topics.get(kind) else { continue };
                let mut record = BaseRecord::to(topic).key(key.as_str()).payload(payload.as_slice());
                // A full queue waits for acknowledgements rather than dropping anything.
                while let Err((e, unsent)) = context.producer.send(record) {
                    if !matches!(e.rdkafka_error_code(), Some(RDKafkaErrorCode::QueueFull)) {
                        context.pending().failed = Some(RepartitionError::Produce(e.to_string()));
                        return;
                    }
                    context.producer.poll(Duration::from_millis(10));
                    record = unsent;
                }
                if let Some(produced) = context.pending().produced.get_mut(kind) {
                    *produced += 1;
                }
            }
            let mut pending = context.pending();
            pending.offsets.insert((kind, partition), entry.offset + 1);
            pending.messages += 1;
        }
        for (kind, partition) in context.merge().take_given_up() {
            let topic = context.raw_topics.get(kind).map_or("", String::as_str);
            tracing::warn!(
                topic,
                partition,
                "a raw partition with unread messages delivered none for a third of join.idle_timeout: forwarding the \
                 others without waiting for it; its events may arrive behind the watermark and be counted late"
            );
        }
    }
}
