//! The warm standby (`state.warm_standby`): a thread that tails the changelog topic and keeps
//! every partition's newest complete snapshot, so that a partition assigned to this replica is
//! restored from memory rather than read back from the brokers, as Kafka Streams' standby
//! replicas keep a task's state store warm.
//!
//! A copy is only as good as what the standby has read: the assignment asks for the copy
//! together with the changelog partition's end offset, and takes it only once the standby has
//! read up to there (so the copy is the newest complete snapshot in the partition, the one
//! [`super::changelog::Changelog::read_newest`] would return); otherwise it reads the
//! changelog. The standby starts from the topic's end: it holds a partition's copy once the
//! partition's owner writes its next snapshot (within `state.checkpoint_interval`).
//!
//! What the brokers hand back is untrusted: this file is under the no-panic rule (crate
//! documentation, "Hostile input").
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use super::changelog::{Recovered, RecoveredChain};
use super::chunks::{ChunkHeader, InOrder, SnapshotId};
use super::record::{self, Links};
use super::SourceError;
use crate::config::{ClientRole, KafkaConfig};
use crate::kafka_log::{KafkaLog, SharedLog};
use crate::shutdown::Shutdown;

/// How long one poll waits: bounds how late shutdown is noticed.
const POLL_TIMEOUT: Duration = Duration::from_millis(100);
/// How often the topic's partition count is read again (the source grows it on assignment).
const METADATA_INTERVAL: Duration = Duration::from_secs(5);

/// The standby's copy of one changelog partition.
#[derive(Default)]
struct Copy {
    /// The newest complete snapshot read, with where it starts and when it was written.
    newest: Option<Recovered>,
    /// The complete deltas read after it that name it as their chain's start, with their links
    /// (a restore takes the chain of those following each other, `record::resolve_chain`).
    deltas: Vec<(Recovered, Links)>,
    /// The offset after the last record read: everything before it has been seen.
    read_to: i64,
    /// Where the snapshot being reassembled starts, and its record timestamp.
    first: Option<(SnapshotId, i64, Option<i64>)>,
    /// The highest snapshot sequence seen, complete or not (the next writer continues above it).
    newest_sequence: Option<u64>,
}

/// The copies, shared between the standby's thread and the assignment.
#[derive(Default)]
struct Copies {
    /// Per changelog partition.
    partitions: HashMap<i32, Copy>,
}

/// A handle on the standby's copies; the thread stops with the shutdown signal.
pub struct Standby {
    /// The copies and a condition signalled whenever a record was read.
    shared: Arc<(Mutex<Copies>, Condvar)>,
}

/// A snapshot the standby held with the deltas after it, and the sequence a writer continues
/// above.
pub struct Warm {
    /// The snapshot and its deltas, as the changelog reader would have returned them.
    pub chain: RecoveredChain,
    /// One above the highest sequence the standby saw in the partition.
    pub next_sequence: u64,
}

impl Standby {
    /// Starts tailing `topic` on a thread and client of its own.
    // Called once at start-up, where the error's size costs nothing.
    #[allow(clippy::result_large_err)]
    pub fn spawn(
        kafka: &KafkaConfig,
        topic: String,
        shutdown: Shutdown,
        log: Arc<KafkaLog>,
    ) -> Result<Standby, SourceError> {
        let consumer: BaseConsumer<SharedLog> = kafka
            .client_config(ClientRole::Consumer)?
            .set("group.id", format!("{}-standby", kafka.group_id))
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "latest")
            // As the changelog reader: snapshots of large states arrive in big fetches.
            .set("max.partition.fetch.bytes", (16 << 20).to_string())
            .set("fetch.max.bytes", (64 << 20).to_string())
            .set("receive.message.max.bytes", ((64 << 20) + (1 << 20)).to_string())
            .create_with_context(SharedLog(log.clone()))
            .map_err(SourceError::Create)?;
        let shared = Arc::new((Mutex::new(Copies::default()), Condvar::new()));
        let tailing = shared.clone();
        std::thread::Builder::new()
            .name("rankpulse-standby".into())
            .spawn(move || tail(&consumer, &topic, &tailing, &shutdown, &log))
            .map_err(|e| SourceError::Create(KafkaError::ClientCreation(format!("starting the standby: {e}"))))?;
        Ok(Standby { shared })
    }

    fn copies(&self) -> MutexGuard<'_, Copies> {
        self.shared.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the partition's copy if the standby has read up to `end` (the changelog
    /// partition's end offset), waiting up to `wait` for it to get there. `None` when it has no
    /// copy, or is behind: then the changelog is read.
    pub fn take_current(&self, partition: i32, end: i64, wait: Duration) -> Option<Warm> {
        let deadline = Instant::now() + wait;
        let mut copies = self.copies();
        loop {
            let copy = copies.partitions.get_mut(&partition)?;
            if copy.read_to >= end {
                let base = copy.newest.take()?;
                let read = std::mem::take(&mut copy.deltas);
                let links: Vec<(SnapshotId, i64, Links)> = read.iter().map(|(d, l)| (d.id, d.offset, *l)).collect();
                let order = record::resolve_chain(base.id, base.offset, &links);
                let mut by_id: HashMap<SnapshotId, Recovered> = read.into_iter().map(|(d, _)| (d.id, d)).collect();
                let deltas = order.iter().filter_map(|id| by_id.remove(id)).collect();
                let next_sequence = copy.newest_sequence.map_or(0, |s| s.wrapping_add(1));
                return Some(Warm { chain: RecoveredChain { base, deltas }, next_sequence });
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            copies = self.shared.1.wait_timeout(copies, left).map_or_else(|p| p.into_inner().0, |(g, _)| g);
        }
    }
}

/// The partition count of `topic`, if it exists.
fn partition_count(consumer: &BaseConsumer<SharedLog>, topic: &str) -> Option<usize> {
    let metadata = consumer.fetch_metadata(Some(topic), METADATA_INTERVAL).ok()?;
    let found = metadata.topics().iter().find(|t| t.name() == topic && t.error().is_none())?;
    Some(found.partitions().len()).filter(|&n| n > 0)
}

fn tail(
    consumer: &BaseConsumer<SharedLog>,
    topic: &str,
    shared: &(Mutex<Copies>, Condvar),
    shutdown: &Shutdown,
    log: &KafkaLog,
) {
    let mut assigned = 0usize;
    let mut next_metadata = Instant::now();
    let mut records = InOrder::default();
    while !shutdown.is_triggered() {
        if Instant::now() >= next_metadata {
            next_metadata = Instant::now() + METADATA_INTERVAL;
            if let Some(n) = partition_count(consumer, topic).filter(|&n| n > assigned) {
                // Known partitions resume where they were; new ones start at their end.
                let copies = shared.0.lock().unwrap_or_else(|p| p.into_inner());
                let mut tpl = TopicPartitionList::new();
                for p in 0..i32::try_from(n).unwrap_or(i32::MAX) {
                    let at = copies.partitions.get(&p).map_or(Offset::End, |c| Offset::Offset(c.read_to));
                    let _ = tpl.add_partition_offset(topic, p, at);
                }
                drop(copies);
                match consumer.assign(&tpl) {
                    Ok(()) => {
                        tracing::info!(topic, partitions = n, "warm standby: tailing the changelog");
                        assigned = n;
                    }
                    Err(e) => {
                        tracing::error!(topic, error = %e, "the warm standby cannot read the changelog; partitions are restored from it on assignment")
                    }
                }
            }
        }
        if assigned == 0 {
            std::thread::sleep(POLL_TIMEOUT);
            continue;
        }
        let Some(message) = super::poll_state_reader(consumer, POLL_TIMEOUT, log) else { continue };
        let (partition, offset) = (message.partition(), message.offset());
        let mut copies = shared.0.lock().unwrap_or_else(|p| p.into_inner());
        let copy = copies.partitions.entry(partition).or_default();
        copy.read_to = copy.read_to.max(offset.saturating_add(1));
        if let Some((header, payload)) = message.payload().and_then(ChunkHeader::read) {
            copy.newest_sequence = copy.newest_sequence.max(Some(header.snapshot.sequence));
            if header.index == 0 {
                copy.first = Some((header.snapshot, offset, message.timestamp().to_millis()));
            }
            if let Some(bytes) = records.add(partition, header, payload) {
                if let Some((id, first, written_ms)) = copy.first.take().filter(|f| f.0 == header.snapshot) {
                    let recovered = Recovered { id, offset: first, bytes, written_ms };
                    // A record whose first bytes say nothing is kept as a snapshot, and
                    // reported as unusable when a restore tries it.
                    match record::peek_links(&recovered.bytes).unwrap_or(Links::Snapshot) {
                        Links::Snapshot => {
                            copy.newest = Some(recovered);
                            copy.deltas.clear();
                        }
                        links @ Links::Delta { base, .. } => {
                            if copy.newest.as_ref().is_some_and(|newest| newest.id == base) {
                                copy.deltas.push((recovered, links));
                            }
                        }
                    }
                }
            }
        }
        drop(copies);
        shared.1.notify_all();
    }
}
