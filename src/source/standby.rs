//! The warm standby (`state.warm_standby`): a thread that tails the changelog topic and keeps
//! every partition's newest state, its newest complete snapshot decoded with every delta after
//! it applied as it arrives, so that a partition assigned to this replica is restored from
//! memory at once rather than read back from the brokers and replayed, as Kafka Streams'
//! standby replicas keep a task's state store warm.
//!
//! A copy is only as good as what the standby has read: the assignment asks for the copy
//! together with the changelog partition's end offset, and takes it only once the standby has
//! read up to there (so the copy is the newest complete state in the partition, the one
//! [`super::changelog::Changelog::read_newest`] would restore); otherwise it reads the
//! changelog. The standby starts from the topic's end: it holds a partition's copy once the
//! partition's owner writes its next snapshot. A copy that cannot go on (a snapshot that does
//! not decode, a delta that does not apply or does not follow the one before, as when two
//! writers briefly shared the partition) is given up until the next snapshot, and an assignment
//! meanwhile reads the changelog, which resolves such a chain.
//!
//! Deltas are applied through the engine (its evaluation replays their operations), under its
//! lock as the aggregates reader applies its records; decoding is done before taking it.
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

use super::chunks::{ChunkHeader, InOrder, SnapshotId};
use super::record::{self, Links, PartitionSnapshot, Record};
use super::SourceError;
use crate::checkpoint::DecodeError;
use crate::config::{ClientRole, KafkaConfig};
use crate::engine::{RestoreError, SharedEngine};
use crate::kafka_log::{KafkaLog, SharedLog};
use crate::shutdown::Shutdown;

/// How long one poll waits: bounds how late shutdown is noticed.
const POLL_TIMEOUT: Duration = Duration::from_millis(100);
/// How often the topic's partition count is read again (the source grows it on assignment).
const METADATA_INTERVAL: Duration = Duration::from_secs(5);

/// The standby's copy of one changelog partition.
#[derive(Default)]
struct Copy {
    /// The partition's newest state, or why the standby cannot hold it until the next snapshot;
    /// `None` before the first snapshot read.
    held: Option<Result<Box<Applied>, Unheld>>,
    /// The offset after the last record read: everything before it has been seen.
    read_to: i64,
    /// Where the record being reassembled starts, and its record timestamp.
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

/// A partition's newest snapshot with the deltas after it applied: its state as of the last.
pub struct Applied {
    /// The state, checked in the shape it was written in (a restore checks it again, whole).
    pub snapshot: PartitionSnapshot,
    /// The snapshot the chain starts from, and the offset of its first chunk.
    pub base: (SnapshotId, i64),
    /// The newest record applied (the snapshot or its last delta): the next delta follows it.
    tip: SnapshotId,
    /// Deltas applied.
    pub deltas: usize,
    /// Bytes read for it: the snapshot's and the deltas'.
    pub bytes: usize,
    /// When the newest record was written (its record timestamp), if the brokers kept one.
    pub written_ms: Option<i64>,
}

/// Why the standby holds no state of a partition until its next snapshot.
#[derive(Debug, thiserror::Error)]
pub enum Unheld {
    #[error("the record at offset {offset} is not the {what} its first bytes say")]
    NotWhatItSays { offset: i64, what: &'static str },
    #[error("the snapshot at offset {offset}: {source}")]
    Snapshot { offset: i64, source: DecodeError },
    #[error("the delta at offset {offset} does not follow the record before it")]
    Gap { offset: i64 },
    #[error("the delta at offset {offset}: {source}")]
    Delta { offset: i64, source: Box<DeltaRefused> },
}

/// Why a delta the standby read was not applied to its copy.
#[derive(Debug, thiserror::Error)]
pub enum DeltaRefused {
    #[error(transparent)]
    Decode(#[from] DecodeError),
    #[error(transparent)]
    Restore(#[from] RestoreError),
}

impl From<DecodeError> for Box<DeltaRefused> {
    fn from(e: DecodeError) -> Self {
        Box::new(DeltaRefused::Decode(e))
    }
}

impl From<RestoreError> for Box<DeltaRefused> {
    fn from(e: RestoreError) -> Self {
        Box::new(DeltaRefused::Restore(e))
    }
}

/// A partition's copy taken over, and the sequence a writer continues above.
pub struct Warm {
    /// The state, or why the standby could not hold it (the changelog is then read).
    pub held: Result<Box<Applied>, Unheld>,
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
        engine: SharedEngine,
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
            .spawn(move || tail(&consumer, &topic, &tailing, &engine, &shutdown, &log))
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
                let held = copy.held.take()?;
                let next_sequence = copy.newest_sequence.map_or(0, |s| s.wrapping_add(1));
                return Some(Warm { held, next_sequence });
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            copies = self.shared.1.wait_timeout(copies, left).map_or_else(|p| p.into_inner().0, |(g, _)| g);
        }
    }
}

/// A complete record read from the changelog: where it starts and when it was written.
struct Read {
    id: SnapshotId,
    offset: i64,
    bytes: Vec<u8>,
    written_ms: Option<i64>,
}

/// The copy after `read`: a snapshot starts it afresh, a delta that follows its newest record
/// is applied to it; anything else (a snapshot that does not decode, a delta that does not
/// apply, or follows another record) gives it up until the next snapshot.
fn next_copy(
    held: Option<Result<Box<Applied>, Unheld>>,
    read: Read,
    engine: &SharedEngine,
) -> Option<Result<Box<Applied>, Unheld>> {
    let Read { id, offset, bytes, written_ms } = read;
    // A record whose first bytes say nothing is taken as a snapshot, and refused as one.
    match record::peek_links(&bytes).unwrap_or(Links::Snapshot) {
        Links::Snapshot => Some(match record::decode(&bytes) {
            Ok(Record::Snapshot(snapshot)) => Ok(Box::new(Applied {
                snapshot: *snapshot,
                base: (id, offset),
                tip: id,
                deltas: 0,
                bytes: bytes.len(),
                written_ms,
            })),
            Ok(Record::Delta(_)) => Err(Unheld::NotWhatItSays { offset, what: "snapshot" }),
            Err(source) => Err(Unheld::Snapshot { offset, source }),
        }),
        Links::Delta { base, previous } => {
            let mut applied = match held? {
                // A delta of another chain (an older one, or a writer's that lost the
                // partition) leaves the copy as it is.
                Ok(applied) if applied.base.0 != base => return Some(Ok(applied)),
                Ok(applied) if applied.tip != previous => return Some(Err(Unheld::Gap { offset })),
                Ok(applied) => applied,
                Err(why) => return Some(Err(why)),
            };
            let delta = match record::decode(&bytes) {
                Ok(Record::Delta(delta)) if delta.base == base && delta.previous == previous => delta,
                Ok(_) => return Some(Err(Unheld::NotWhatItSays { offset, what: "delta" })),
                Err(source) => return Some(Err(Unheld::Delta { offset, source: source.into() })),
            };
            if let Err(e) = engine.lock().apply_delta(&mut applied.snapshot.task, delta.task) {
                return Some(Err(Unheld::Delta { offset, source: e.into() }));
            }
            applied.snapshot.positions = delta.positions;
            applied.tip = id;
            applied.deltas += 1;
            applied.bytes += bytes.len();
            applied.written_ms = written_ms;
            Some(Ok(applied))
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
    engine: &SharedEngine,
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
                    let read = Read { id, offset: first, bytes, written_ms };
                    copy.held = next_copy(copy.held.take(), read, engine);
                    if let Some(Err(why)) = &copy.held {
                        tracing::debug!(partition, reason = %why, "warm standby: the copy waits for the next snapshot");
                    }
                }
            }
        }
        drop(copies);
        shared.1.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::engine::Engine;
    use crate::event::EventKind;
    use crate::source::commit::encode_record;
    use crate::source::positions::Positions;

    fn feed(engine: &mut Engine, from: usize, to: usize) {
        let now = Instant::now();
        for i in from..to {
            let ts = 1_000_000 + i as i64 * 700;
            let impression = format!(
                r#"{{"query_id":"q{i}","timestamp":{ts},"results":["a","b","c"],"variant":"v{}","query":"text {}"}}"#,
                i % 2,
                i % 5
            );
            let click = format!(r#"{{"query_id":"q{i}","timestamp":{},"doc_id":"b"}}"#, ts + 300);
            engine.process(EventKind::Impression, 0, impression.as_bytes(), now).unwrap();
            engine.process(EventKind::Engagement, 0, click.as_bytes(), now).unwrap();
        }
        engine.advance(now);
    }

    fn read(id: u64, bytes: Vec<u8>) -> Read {
        Read { id: SnapshotId { sequence: id, nonce: 7 }, offset: id as i64 * 10, bytes, written_ms: Some(id as i64) }
    }

    fn id(sequence: u64) -> SnapshotId {
        SnapshotId { sequence, nonce: 7 }
    }

    #[test]
    fn the_copy_applies_each_delta_as_it_arrives_and_gives_up_on_one_out_of_turn() {
        let mut cfg = Config::default();
        cfg.clicks.enabled = true;
        cfg.join.attribution_window = crate::time::HumanDuration::from_millis(20_000);
        let mut live = Engine::new(&cfg).without_past_limit();
        let standby_engine = SharedEngine::new(Engine::new(&cfg).without_past_limit());
        let positions = Positions::default();
        feed(&mut live, 0, 100);
        let (_, base) = encode_record(&mut live, None, &positions, 0).unwrap();
        let mut held = next_copy(None, read(1, base), &standby_engine);
        let chain = |tip| super::super::changelog::Chain::started(id(1), 1 << 40).with_tip(tip);
        for (n, (from, to)) in [(100, 150), (150, 400)].into_iter().enumerate() {
            feed(&mut live, from, to);
            let (_, delta) = encode_record(&mut live, Some(chain(id(n as u64 + 1))), &positions, 0).unwrap();
            held = next_copy(held, read(n as u64 + 2, delta), &standby_engine);
        }
        let applied = held.unwrap().unwrap();
        assert_eq!((applied.deltas, applied.tip, applied.written_ms), (2, id(3), Some(3)));
        let mut snapshot = applied.snapshot;
        let mut restored = Engine::new(&cfg).without_past_limit();
        restored.check_compatible(0, &mut snapshot.task).unwrap();
        restored.restore_partition(0, snapshot.task, Instant::now()).unwrap();
        assert_eq!(restored.pending_impressions(), live.pending_impressions());
        assert_eq!(restored.state_parts(0), live.state_parts(0));

        // A delta that follows another record than the copy's newest: given up until a snapshot.
        let mut live = Engine::new(&cfg).without_past_limit();
        feed(&mut live, 0, 50);
        let (_, base) = encode_record(&mut live, None, &positions, 0).unwrap();
        let held = next_copy(None, read(1, base.clone()), &standby_engine);
        feed(&mut live, 50, 60);
        let (_, delta) = encode_record(&mut live, Some(chain(id(9))), &positions, 0).unwrap();
        let held = next_copy(held, read(2, delta), &standby_engine);
        assert!(matches!(&held, Some(Err(Unheld::Gap { offset: 20 }))), "{:?}", held.map(|h| h.err()));
        let held = next_copy(held, read(3, base), &standby_engine);
        assert!(matches!(held, Some(Ok(applied)) if applied.deltas == 0 && applied.base.0 == id(3)));
        // Damaged bytes are refused with the reason, never a panic.
        let held = next_copy(None, read(4, vec![1, 2, 3]), &standby_engine);
        assert!(matches!(&held, Some(Err(Unheld::Snapshot { offset: 40, .. }))), "{:?}", held.map(|h| h.err()));
    }
}
