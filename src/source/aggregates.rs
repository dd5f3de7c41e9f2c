//! The aggregates topic's reader: every replica reads every partition's A/B sums, whichever
//! replica wrote them, into the engine's experiment-wide view (`crate::engine`'s `global`).
//!
//! A record is whole (a base) or an increment on the one before it (see `crate::engine`'s
//! `increments`). Records are chunked like changelog snapshots (`super::chunks`); one
//! partition's chunks are consecutive, so a record is complete when its last chunk arrives
//! ([`InOrder`]). The reader has a thread and a consumer of its own (no group: it reads every
//! partition), so a slow broker never holds up the input consumer.
//!
//! What the brokers hand back is untrusted: this file is under the no-panic rule (crate
//! documentation, "Hostile input").
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use super::chunks::{ChunkHeader, InOrder};
use super::SourceError;
use crate::config::{ClientRole, KafkaConfig};
use crate::engine::{AggregatesRecord, SharedEngine};
use crate::kafka_log::{KafkaLog, SharedLog};
use crate::shutdown::Shutdown;

/// How long one poll waits: bounds how late shutdown is noticed.
const POLL_TIMEOUT: Duration = Duration::from_millis(100);
/// How often the topic is looked for until it exists (the source creates it on assignment).
const METADATA_RETRY: Duration = Duration::from_secs(1);

/// Starts the reader thread; it stops when `shutdown` fires.
// Called once at start-up, where the error's size costs nothing.
#[allow(clippy::result_large_err)]
pub(super) fn spawn(
    kafka: &KafkaConfig,
    topic: String,
    engine: SharedEngine,
    shutdown: Shutdown,
    log: Arc<KafkaLog>,
) -> Result<std::thread::JoinHandle<()>, SourceError> {
    let consumer: BaseConsumer<SharedLog> = kafka
        .client_config(ClientRole::Consumer)?
        .set("group.id", format!("{}-aggregates-reader", kafka.group_id))
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .create_with_context(SharedLog(log.clone()))
        .map_err(SourceError::Create)?;
    std::thread::Builder::new()
        .name("rankpulse-aggregates".into())
        .spawn(move || read(&consumer, &topic, &engine, &shutdown, &log))
        .map_err(|e| SourceError::Create(KafkaError::ClientCreation(format!("starting the aggregates reader: {e}"))))
}

/// Per partition of `topic` holding records, the offset of its last record as the reader starts:
/// once every one is read, the history is. `None` if the offsets cannot be read.
fn history(consumer: &BaseConsumer<SharedLog>, topic: &str, partitions: usize) -> Option<BTreeMap<i32, i64>> {
    let mut last = BTreeMap::new();
    for p in 0..i32::try_from(partitions).unwrap_or(i32::MAX) {
        let (low, high) = consumer.fetch_watermarks(topic, p, METADATA_RETRY).ok()?;
        if high > low {
            last.insert(p, high - 1);
        }
    }
    Some(last)
}

fn read(consumer: &BaseConsumer<SharedLog>, topic: &str, engine: &SharedEngine, shutdown: &Shutdown, log: &KafkaLog) {
    // Wait for the topic (the source creates it when it first gets partitions).
    let partitions = loop {
        if shutdown.is_triggered() {
            return;
        }
        let found = consumer.fetch_metadata(Some(topic), METADATA_RETRY).ok().and_then(|m| {
            m.topics().iter().find(|t| t.name() == topic && t.error().is_none()).map(|t| t.partitions().len())
        });
        match found {
            Some(n) if n > 0 => break n,
            _ => std::thread::sleep(METADATA_RETRY),
        }
    };
    engine.lock().enable_global_view(partitions);
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        let _ = tpl.add_partition_offset(topic, p as i32, Offset::Beginning);
    }
    if let Err(e) = consumer.assign(&tpl) {
        tracing::error!(topic, error = %e, "the aggregates reader cannot read its topic; A/B figures stay at what this replica owns");
        return;
    }
    drop(tpl);
    tracing::info!(topic, partitions, "reading every partition's A/B sums");
    let started = Instant::now();
    let mut catching_up = history(consumer, topic, partitions).filter(|last| !last.is_empty());
    let mut records = InOrder::default();
    while !shutdown.is_triggered() {
        let Some(message) = super::poll_state_reader(consumer, POLL_TIMEOUT, log) else { continue };
        if let Some(behind) = catching_up.as_mut() {
            if behind.get(&message.partition()).is_some_and(|&last| message.offset() >= last) {
                behind.remove(&message.partition());
            }
            if behind.is_empty() {
                catching_up = None;
                let seconds = started.elapsed().as_secs_f64();
                tracing::info!(topic, seconds, "read the aggregates topic's history up to where it was at the start");
                // What reading it allocated and freed is not what the view holds.
                crate::memory::release_free_heap("the aggregates topic's history read");
            }
        }
        let Some((header, payload)) = message.payload().and_then(ChunkHeader::read) else { continue };
        let partition = message.partition();
        let Some(record) = records.add(partition, header, payload) else { continue };
        match AggregatesRecord::decode(&record) {
            Ok(aggregates) => {
                if let Err(e) = engine.lock().apply_aggregates_record(aggregates) {
                    tracing::warn!(topic, partition, offset = message.offset(), error = %e, "aggregates record refused");
                }
            }
            Err(e) => {
                // Whatever it carried is unknown: an increment after it would not apply.
                engine.lock().aggregates_record_lost(partition);
                tracing::warn!(topic, partition, offset = message.offset(), error = %e, "aggregates record skipped")
            }
        }
    }
}
