//! Decoding on whichever of two threads has time, the engine's work on a thread of its own:
//! [`Handoff`].
//!
//! The consumer thread polls messages into batches; the engine thread joins, evaluates and
//! advances the watermarks. Decoding goes to the thread that would otherwise wait, message by
//! message: while the engine thread has a batch queued beyond the one it is working on, it is
//! the slower side, and the consumer thread decodes what it polls ([`Preparer`]); otherwise the
//! batch carries the message's bytes ([`Undecoded`]) and the engine thread decodes each right
//! before processing it, within one clock reading. A message over `limits.max_message_bytes` is
//! never carried (it is rejected by its size, unread). Either way a message is decoded by the
//! same code into the same prepared form, and processed in poll order.
//! With decoding on the consumer thread alone, that thread was the pipeline's limit (twice the
//! engine thread's time per message in profiles of the end-to-end benchmark), with a third of
//! the two cores left idle.
//!
//! The offset discipline is unchanged: a message's offset reaches [`Positions`] only when the
//! engine thread hands its batch back, that is once the message is in the state. Whatever reads
//! the positions as the state's (a checkpoint: at the interval, on revoke, at shutdown; an
//! assignment, which sets them) first calls [`Handoff::barrier`], which sends what is batched
//! and waits until the engine thread has handed every batch back: the state and the positions
//! then cover exactly the same messages, as when one thread did both. The barrier runs inside
//! the rebalance callbacks too, before they lock the source state, and the engine thread never
//! takes that lock, so waiting cannot deadlock.
//!
//! Each message's Kafka key is checked against its decoded query id where it is decoded
//! ([`KeyCheck`]).

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, SyncSender, TryRecvError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::positions::Positions;
use crate::engine::{PreparedBatch, Preparer, RejectLog, Routing, SharedEngine};
use crate::event::{EventKind, RawMessage};

/// Messages per batch: the hand-over and the engine lock cost nothing per message, and a batch
/// holds the engine lock for well under a millisecond (a `/metrics` scrape waits at most that).
const BATCH_MESSAGES: usize = 256;
/// Batches queued for the engine thread before the consumer thread waits (backpressure).
const BATCHES_IN_FLIGHT: usize = 4;
/// Batches sent and not yet processed from which the consumer thread decodes what it polls:
/// the one the engine thread is working on, and one more waiting for it.
const ENGINE_BUSY: usize = 2;
/// Carried bytes that fill a batch before its message count does: what the copies hold is
/// bounded (about this much per batch in flight, and one message), whatever the messages' size.
const BATCH_CARRIED_BYTES: usize = 1 << 20;

/// The engine thread stopped (it panicked): nothing more can be processed, and the positions
/// must not move past what is in the state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the engine thread stopped (it panicked)")]
pub(super) struct EngineStopped;

/// Where a polled message came from.
#[derive(Debug, Clone, Copy)]
struct Polled {
    /// Its topic's kind.
    kind: EventKind,
    /// Its partition.
    partition: i32,
    /// Its offset: recorded in the positions once the engine has it.
    offset: i64,
    /// How long decoding it took on the consumer thread: part of its processing time
    /// (`rankpulse_event_processing_seconds` is decode + join + accounting). Zero for a carried
    /// message, whose decoding the engine thread times with the rest of its processing.
    decode: Duration,
    /// Whether the consumer thread decoded it (into the batch's `prepared`), or it was carried
    /// (into `carried`).
    decoded_here: bool,
}

/// The bytes of a batch's messages, carried for the engine thread to decode: copied out of
/// librdkafka's buffers (its messages cannot leave the consumer thread), into buffers the batch
/// keeps and reuses, so carrying a message allocates nothing once they have grown.
#[derive(Debug, Default)]
struct Undecoded {
    /// Every message's payload, key and header values, back to back.
    bytes: Vec<u8>,
    /// Every header name, back to back.
    names: String,
    /// Every message's header names and values, in `names` and `bytes`.
    headers: Vec<(Range<usize>, Range<usize>)>,
    /// Each message, at its index in the batch.
    messages: Vec<UndecodedMessage>,
}

/// Where one carried message is in its batch's [`Undecoded`].
#[derive(Debug, Clone)]
struct UndecodedMessage {
    /// Its payload, in `bytes`.
    payload: Range<usize>,
    /// Its key, in `bytes`; `None` when it has none.
    key: Option<Range<usize>>,
    /// Its headers, in `headers` (collected only for a mapping that reads them).
    headers: Range<usize>,
}

impl Undecoded {
    fn push(&mut self, raw: RawMessage<'_>) {
        let mut copy = |from: &[u8]| {
            let start = self.bytes.len();
            self.bytes.extend_from_slice(from);
            start..self.bytes.len()
        };
        let payload = copy(raw.payload);
        let key = raw.key.map(&mut copy);
        let first_header = self.headers.len();
        for (name, value) in raw.headers {
            let value = copy(value);
            let start = self.names.len();
            self.names.push_str(name);
            self.headers.push((start..self.names.len(), value));
        }
        self.messages.push(UndecodedMessage { payload, key, headers: first_header..self.headers.len() });
    }

    /// A carried message as it arrived; `envelope` is filled with its headers.
    fn message<'a, 'b>(
        &'a self,
        carried: &UndecodedMessage,
        envelope: &'b mut Vec<(&'a str, &'a [u8])>,
    ) -> RawMessage<'b>
    where
        'a: 'b,
    {
        let bytes_of = |r: &Range<usize>| self.bytes.get(r.clone()).unwrap_or_default();
        envelope.clear();
        let headers = self.headers.get(carried.headers.clone()).unwrap_or_default();
        envelope.extend(
            headers.iter().map(|(name, value)| (self.names.get(name.clone()).unwrap_or_default(), bytes_of(value))),
        );
        RawMessage { payload: bytes_of(&carried.payload), key: carried.key.as_ref().map(bytes_of), headers: envelope }
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.names.clear();
        self.headers.clear();
        self.messages.clear();
    }
}

/// Polled messages in poll order, decoded or carried.
#[derive(Debug, Default)]
struct Batch {
    /// Where each came from.
    messages: Vec<Polled>,
    /// The messages the consumer thread decoded, in order.
    prepared: PreparedBatch,
    /// The carried messages' bytes, in order.
    undecoded: Undecoded,
    /// The carried messages, decoded by the engine thread, in order.
    carried: PreparedBatch,
}

impl Batch {
    fn clear(&mut self) {
        self.messages.clear();
        self.prepared.clear();
        self.undecoded.clear();
        self.carried.clear();
    }
}

/// The check of each consumed message's Kafka key against its event's query id, where the
/// message is decoded: a key that is not the query id means the producers did not key the
/// topic by it, and the join's partitions need not hold the impressions of their engagements
/// (see [`Routing`]). Counted on every mismatch, named in the log once per process.
#[derive(Debug, Clone)]
struct KeyCheck {
    /// The counts the exporter reads.
    routing: Arc<Routing>,
    /// Impressions topic, engagements topic: what the log line names.
    topics: Arc<[String; 2]>,
    /// Whether the log line was written, by either thread.
    said: Arc<AtomicBool>,
}

impl KeyCheck {
    /// Checks the key of the newest message in `prepared`. A message without a key was placed
    /// by its producer (or at random): nothing to check; a rejected one has no query.
    fn check(&self, kind: EventKind, partition: i32, key: Option<&[u8]>, prepared: &PreparedBatch) {
        if let (Some(key), Some(query)) = (key, prepared.last_query()) {
            if self.routing.check_key(kind, key, query) && !self.said.swap(true, Ordering::Relaxed) {
                say_key_mismatch(&self.topics[kind.index()], partition, key);
            }
        }
    }
}

/// The one log line naming why metrics are biased when the join's input is keyed by something
/// else than the query id (counted in `rankpulse_input_key_mismatches_total` from then on).
fn say_key_mismatch(topic: &str, partition: i32, key: &[u8]) {
    tracing::warn!(
        topic,
        partition,
        key = %crate::event::excerpt(key, 60, false),
        "a message's Kafka key is not its query_id: the producers do not key this topic by query id, so engagements \
         land on partitions whose join never saw their impression and are counted as orphans, biasing every metric \
         downwards. Set repartition.mode = \"auto\" or \"always\" to re-key the inputs through internal topics, or \
         key both topics by query_id"
    );
}

/// What [`Handoff::push`] did.
pub(super) struct Pushed {
    /// When the message was decoded, if it was decoded here: a clock reading the caller may use
    /// rather than take its own. A carried message takes none.
    pub(super) at: Option<Instant>,
    /// The batch is full and should be sent.
    pub(super) full: bool,
}

/// Which thread decodes a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decoding {
    /// The one that would otherwise wait (module documentation): what `serve` runs.
    Balanced,
    /// Always the consumer thread, or always the engine thread: the tests compare them.
    #[cfg(test)]
    Here,
    #[cfg(test)]
    Carried,
}

/// The consumer thread's side of the engine thread.
pub(super) struct Handoff {
    /// Decodes on the consumer thread as the engine would.
    preparer: Preparer,
    /// Checks keys of the messages decoded here.
    keys: KeyCheck,
    /// Messages polled and not yet sent.
    filling: Batch,
    /// Which thread decodes each message.
    decoding: Decoding,
    /// Batches sent and not yet processed, counted down by the engine thread as it finishes
    /// each: how busy it is, read as each message is polled.
    queued: Arc<AtomicUsize>,
    /// Batches to the engine thread; `None` once it is stopped.
    to_engine: Option<SyncSender<Batch>>,
    /// Batches the engine thread processed, back for their positions and for reuse.
    processed: Receiver<Batch>,
    /// Batches sent and not yet back.
    in_flight: usize,
    /// The engine thread.
    thread: Option<JoinHandle<()>>,
}

impl Handoff {
    /// Starts the engine thread over `engine`; `topics` name the inputs in its log lines.
    pub(super) fn start(engine: SharedEngine, topics: [String; 2]) -> std::io::Result<Self> {
        let (preparer, routing) = {
            let engine = engine.lock();
            (engine.preparer().clone(), engine.routing().clone())
        };
        let topics = Arc::new(topics);
        let keys = KeyCheck { routing, topics: topics.clone(), said: Arc::new(AtomicBool::new(false)) };
        let queued = Arc::new(AtomicUsize::new(0));
        let (to_engine, batches) = std::sync::mpsc::sync_channel(BATCHES_IN_FLIGHT);
        let (done, processed) = std::sync::mpsc::channel();
        let engine_side = EngineSide { preparer: preparer.clone(), keys: keys.clone(), queued: queued.clone() };
        let thread = std::thread::Builder::new()
            .name("rankpulse-engine".into())
            .spawn(move || engine_side.run(&engine, &topics, &batches, &done))?;
        Ok(Handoff {
            preparer,
            keys,
            filling: Batch::default(),
            decoding: Decoding::Balanced,
            queued,
            to_engine: Some(to_engine),
            processed,
            in_flight: 0,
            thread: Some(thread),
        })
    }

    /// Adds a polled message to the batch, decoded here or carried (see the module
    /// documentation); `full` tells that the batch should be sent.
    pub(super) fn push(&mut self, kind: EventKind, partition: i32, offset: i64, raw: RawMessage<'_>) -> Pushed {
        let decoded_here = raw.payload.len() > self.preparer.max_message_bytes()
            || match self.decoding {
                Decoding::Balanced => self.queued.load(Ordering::Relaxed) >= ENGINE_BUSY,
                #[cfg(test)]
                Decoding::Here => true,
                #[cfg(test)]
                Decoding::Carried => false,
            };
        let (decode, at) = if decoded_here {
            let started = Instant::now();
            self.preparer.prepare(kind, raw, &mut self.filling.prepared);
            self.keys.check(kind, partition, raw.key, &self.filling.prepared);
            let decoded = Instant::now();
            (decoded - started, Some(decoded))
        } else {
            self.filling.undecoded.push(raw);
            (Duration::ZERO, None)
        };
        self.filling.messages.push(Polled { kind, partition, offset, decode, decoded_here });
        let full =
            self.filling.messages.len() >= BATCH_MESSAGES || self.filling.undecoded.bytes.len() >= BATCH_CARRIED_BYTES;
        Pushed { at, full }
    }

    /// Whether a mapping reads a message's key or headers, which are then handed over.
    pub(super) fn reads_envelope(&self) -> bool {
        self.preparer.decoders().reads_envelope()
    }

    /// Whether polled messages wait to be sent.
    fn has_unsent(&self) -> bool {
        !self.filling.messages.is_empty()
    }

    /// Sends the batch (if any) to the engine thread, and records the positions of the batches
    /// it has handed back.
    pub(super) fn send(&mut self, positions: &mut Positions) -> Result<(), EngineStopped> {
        if self.has_unsent() {
            let next = match self.processed.try_recv() {
                Ok(done) => self.recycle(done, positions),
                Err(_) => Batch::default(),
            };
            let full = std::mem::replace(&mut self.filling, next);
            self.queued.fetch_add(1, Ordering::Relaxed);
            self.to_engine.as_ref().ok_or(EngineStopped)?.send(full).map_err(|_| EngineStopped)?;
            self.in_flight += 1;
        }
        self.collect(positions)
    }

    /// Records the positions of the batches the engine thread has handed back, without waiting.
    pub(super) fn collect(&mut self, positions: &mut Positions) -> Result<(), EngineStopped> {
        while self.in_flight > 0 {
            match self.processed.try_recv() {
                Ok(done) => {
                    let spare = self.recycle(done, positions);
                    // Kept when nothing is batched: the grown buffers are reused, nothing polled lost.
                    if !self.has_unsent() && self.filling.messages.capacity() < spare.messages.capacity() {
                        self.filling = spare;
                    }
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => return Err(EngineStopped),
            }
        }
        Ok(())
    }

    /// Sends what is batched and waits until the engine thread has processed everything sent:
    /// then the engine's state and `positions` cover the same messages.
    pub(super) fn barrier(&mut self, positions: &mut Positions) -> Result<(), EngineStopped> {
        self.send(positions)?;
        while self.in_flight > 0 {
            let done = self.processed.recv().map_err(|_| EngineStopped)?;
            self.recycle(done, positions);
        }
        Ok(())
    }

    /// Records a processed batch's positions and empties it for reuse.
    fn recycle(&mut self, mut done: Batch, positions: &mut Positions) -> Batch {
        self.in_flight -= 1;
        for m in &done.messages {
            positions.consumed(m.kind, m.partition, m.offset);
        }
        done.clear();
        done
    }

    /// Stops the engine thread after what was sent (call [`Handoff::barrier`] first to have it
    /// all processed and recorded).
    pub(super) fn stop(&mut self) {
        self.to_engine = None;
        if let Some(thread) = self.thread.take() {
            // A panic there was reported by the barrier that found it gone.
            let _ = thread.join();
        }
    }
}

/// How often the engine thread recomputes watermarks while messages keep arriving.
const ADVANCE_INTERVAL: Duration = super::ADVANCE_INTERVAL;

/// What the engine thread owns besides the engine.
struct EngineSide {
    /// Decodes the carried messages, each right before it is processed.
    preparer: Preparer,
    /// Checks keys of the messages decoded here.
    keys: KeyCheck,
    /// Counted down as each batch is processed.
    queued: Arc<AtomicUsize>,
}

impl EngineSide {
    /// Processes batches in order, handing each back once it is in the state.
    fn run(&self, engine: &SharedEngine, topics: &[String; 2], batches: &Receiver<Batch>, done: &Sender<Batch>) {
        let mut rejects = RejectLog::default();
        let mut last_advance = Instant::now();
        while let Ok(mut batch) = batches.recv() {
            let Batch { messages, prepared, undecoded, carried } = &mut batch;
            // A carried message's headers, borrowed from the batch while it is decoded.
            let mut envelope = Vec::new();
            let mut undecoded_messages = undecoded.messages.iter();
            let mut engine = engine.lock();
            // One clock reading per message: each message's processing ends where the next's
            // begins, and a carried message is decoded right before it is processed, within its
            // processing time. (Decoding a batch ahead, before taking the lock, took a second
            // reading per message, and the engine thread's clock readings were 7% of its time.)
            let mut started = Instant::now();
            let (mut here, mut decoded) = (0, 0);
            for m in messages.iter() {
                let event = if m.decoded_here {
                    here += 1;
                    prepared.get(here - 1)
                } else {
                    let Some(bytes) = undecoded_messages.next() else {
                        unreachable!("every carried message has its bytes in the batch")
                    };
                    let raw = undecoded.message(bytes, &mut envelope);
                    let key = raw.key;
                    self.preparer.prepare(m.kind, raw, carried);
                    self.keys.check(m.kind, m.partition, key, carried);
                    decoded += 1;
                    carried.get(decoded - 1)
                };
                if let Err(rejection) = engine.process_prepared(m.kind, m.partition, event, started) {
                    rejects.log(started, || {
                        let (topic, reason) = (&topics[m.kind.index()], rejection.reason.label());
                        let (partition, offset) = (m.partition, m.offset);
                        tracing::warn!(topic, partition, offset, reason, detail = %rejection.detail, "rejected message");
                    });
                }
                let finished = Instant::now();
                engine.telemetry_mut().record_processing_time(m.decode + (finished - started));
                started = finished;
                if finished - last_advance >= ADVANCE_INTERVAL {
                    engine.advance(finished);
                    last_advance = finished;
                    // Advancing is not the next message's processing.
                    started = Instant::now();
                }
            }
            drop(engine);
            self.queued.fetch_sub(1, Ordering::Relaxed);
            if done.send(batch).is_err() {
                break;
            }
        }
        rejects.report_suppressed();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::engine::{Engine, SharedEngine};
    use crate::event::RejectReason;

    /// Demo traffic in event-time order as (kind, key, payload), with messages no decoder
    /// accepts, messages over `limits.max_message_bytes` (4096 here) and keys that are not the
    /// query id mixed in: in order, no event is late whenever the engine thread advances, so
    /// runs agree however their batches were timed.
    fn messages() -> Vec<(EventKind, Vec<u8>, Vec<u8>)> {
        let (mut impressions, mut engagements) = (Vec::new(), Vec::new());
        let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
        let start_ms = i64::try_from(since_epoch.as_millis()).unwrap() - 600_000;
        let none = crate::demo::FaultRate::NONE;
        crate::demo::write_traffic(&mut impressions, &mut engagements, 3_000, 500, 3, start_ms, none).unwrap();
        let mut all = Vec::new();
        for (kind, bytes) in [(EventKind::Impression, &impressions), (EventKind::Engagement, &engagements)] {
            for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                let v: serde_json::Value = serde_json::from_slice(line).unwrap();
                let at = v["timestamp"].as_i64().unwrap();
                all.push((at, kind, v["query_id"].as_str().unwrap().as_bytes().to_vec(), line.to_vec()));
            }
        }
        all.sort_by_key(|(at, kind, ..)| (*at, kind.index()));
        let mut out = Vec::new();
        for (i, (_, kind, key, payload)) in all.into_iter().enumerate() {
            let key = if i % 97 == 5 { b"session-7".to_vec() } else { key };
            out.push((kind, key, payload));
            if i % 211 == 3 {
                out.push((kind, b"q".to_vec(), b"{\"query_id\": ".to_vec()));
            }
            if i % 503 == 7 {
                out.push((kind, b"q".to_vec(), [b' '; 5000].to_vec()));
            }
        }
        out
    }

    /// Everything a run decides, as text; and the positions it recorded.
    fn run(decoding: Decoding, messages: &[(EventKind, Vec<u8>, Vec<u8>)]) -> (String, Positions) {
        let cfg = Config::from_toml_with_env("[limits]\nmax_message_bytes = 4096\n", "test", std::iter::empty());
        let engine = SharedEngine::new(Engine::new(&cfg.unwrap()));
        let now = Instant::now();
        for p in 0..3 {
            engine.lock().assign(p, now);
        }
        let mut handoff = Handoff::start(engine.clone(), ["imp".into(), "eng".into()]).unwrap();
        handoff.decoding = decoding;
        let mut positions = Positions::default();
        for (offset, (kind, key, payload)) in messages.iter().enumerate() {
            let partition = i32::from(key.first().copied().unwrap_or(0) % 3);
            let raw = RawMessage { payload, key: Some(key), headers: &[] };
            if handoff.push(*kind, partition, offset as i64, raw).full {
                handoff.send(&mut positions).unwrap();
            }
        }
        handoff.barrier(&mut positions).unwrap();
        handoff.stop();
        let mut engine = engine.lock();
        let processed = engine.telemetry().processing_time().histogram.len();
        engine.finish();
        let routing = engine.routing().counts();
        let too_large: u64 = engine.counters().rejected.iter().map(|kind| kind[RejectReason::TooLarge.index()]).sum();
        let figures = format!(
            "{:?} {:?} {:?} {processed} too large: {too_large}",
            engine.cumulative(),
            engine.counters(),
            routing
        );
        (figures, positions)
    }

    #[test]
    fn decoding_on_either_thread_gives_the_same_state_positions_and_counts() {
        let messages = messages();
        let here = run(Decoding::Here, &messages);
        assert!(here.0.contains(&format!(" {} too large", messages.len())), "every message timed once");
        assert!(!here.0.contains("keys_mismatched: [0, 0]"), "{}", here.0);
        assert!(!here.0.ends_with("too large: 0"), "{}", here.0);
        for decoding in [Decoding::Carried, Decoding::Balanced] {
            let other = run(decoding, &messages);
            assert_eq!(here.0, other.0, "{decoding:?}");
            assert_eq!(here.1, other.1, "{decoding:?}");
        }
    }

    #[test]
    fn a_carried_message_reads_back_as_it_arrived() {
        let mut undecoded = Undecoded::default();
        let headers = [("trace", &b"t-1"[..]), ("tenant", &b""[..])];
        undecoded.push(RawMessage { payload: b"{}", key: Some(b"q-1"), headers: &headers });
        undecoded.push(RawMessage { payload: b"[1]", key: None, headers: &[] });
        let mut envelope = Vec::new();
        let first = undecoded.message(&undecoded.messages[0], &mut envelope);
        assert_eq!((first.payload, first.key, first.headers), (&b"{}"[..], Some(&b"q-1"[..]), &headers[..]));
        let mut envelope = Vec::new();
        let second = undecoded.message(&undecoded.messages[1], &mut envelope);
        assert_eq!((second.payload, second.key, second.headers.len()), (&b"[1]"[..], None, 0));
        undecoded.clear();
        assert!(undecoded.messages.is_empty() && undecoded.bytes.is_empty() && undecoded.names.is_empty());
    }
}
