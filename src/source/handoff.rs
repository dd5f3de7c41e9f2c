//! Decoding on the consumer thread, the engine's work on a thread of its own: [`Handoff`].
//!
//! The consumer thread polls and decodes each message ([`Preparer`]) into a batch; the engine
//! thread joins, evaluates and advances the watermarks. So two cores share what one did.
//!
//! The offset discipline is unchanged: a message's offset reaches [`Positions`] only when the
//! engine thread hands its batch back, that is once the message is in the state. Whatever reads
//! the positions as the state's (a checkpoint: at the interval, on revoke, at shutdown; an
//! assignment, which sets them) first calls [`Handoff::barrier`], which sends what is batched
//! and waits until the engine thread has handed every batch back: the state and the positions
//! then cover exactly the same messages, as when one thread did both. The barrier runs inside
//! the rebalance callbacks too, before they lock the source state, and the engine thread never
//! takes that lock, so waiting cannot deadlock.

use std::sync::mpsc::{Receiver, Sender, SyncSender, TryRecvError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::positions::Positions;
use crate::engine::{PreparedBatch, Preparer, RejectLog, SharedEngine};
use crate::event::{EventKind, RawMessage};

/// Messages per batch: the hand-over and the engine lock cost nothing per message, and a batch
/// holds the engine lock for well under a millisecond (a `/metrics` scrape waits at most that).
const BATCH_MESSAGES: usize = 256;
/// Batches queued for the engine thread before the consumer thread waits (backpressure).
const BATCHES_IN_FLIGHT: usize = 4;

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
    /// (`rankpulse_event_processing_seconds` is decode + join + accounting).
    decode: Duration,
}

/// Polled messages, decoded, in poll order.
#[derive(Debug, Default)]
struct Batch {
    /// Where each came from.
    messages: Vec<Polled>,
    /// Each decoded, at the same index.
    prepared: PreparedBatch,
}

/// What [`Handoff::push`] did.
pub(super) struct Pushed {
    /// When the message was decoded: the consumer thread's clock reading for this message.
    pub(super) at: Instant,
    /// The batch is full and should be sent.
    pub(super) full: bool,
    /// The message's query, `None` when it was rejected: what its Kafka key is checked against.
    pub(super) query: Option<crate::ids::QueryKey>,
}

/// The consumer thread's side of the engine thread.
pub(super) struct Handoff {
    /// Decodes on the consumer thread as the engine would.
    preparer: Preparer,
    /// Messages polled and not yet sent.
    filling: Batch,
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
        let preparer = engine.lock().preparer().clone();
        let (to_engine, batches) = std::sync::mpsc::sync_channel(BATCHES_IN_FLIGHT);
        let (done, processed) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("rankpulse-engine".into())
            .spawn(move || run(&engine, &topics, &batches, &done))?;
        Ok(Handoff {
            preparer,
            filling: Batch::default(),
            to_engine: Some(to_engine),
            processed,
            in_flight: 0,
            thread: Some(thread),
        })
    }

    /// Decodes a polled message into the batch, and returns when it finished; `full` tells
    /// that the batch should be sent.
    pub(super) fn push(&mut self, kind: EventKind, partition: i32, offset: i64, raw: RawMessage<'_>) -> Pushed {
        let started = Instant::now();
        self.preparer.prepare(kind, raw, &mut self.filling.prepared);
        let decoded = Instant::now();
        self.filling.messages.push(Polled { kind, partition, offset, decode: decoded - started });
        let query = self.filling.prepared.last_query();
        Pushed { at: decoded, full: self.filling.messages.len() >= BATCH_MESSAGES, query }
    }

    /// Whether a mapping reads a message's key or headers, which are then handed over.
    pub(super) fn reads_envelope(&self) -> bool {
        self.preparer.decoders().reads_envelope()
    }

    /// Whether polled messages wait to be sent.
    pub(super) fn has_unsent(&self) -> bool {
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
        done.messages.clear();
        done.prepared.clear();
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

/// The engine thread: processes batches in order, handing each back once it is in the state.
fn run(engine: &SharedEngine, topics: &[String; 2], batches: &Receiver<Batch>, done: &Sender<Batch>) {
    let mut rejects = RejectLog::default();
    let mut last_advance = Instant::now();
    while let Ok(batch) = batches.recv() {
        let mut engine = engine.lock();
        for (i, m) in batch.messages.iter().enumerate() {
            let started = Instant::now();
            if let Err(rejection) = engine.process_prepared(m.kind, m.partition, batch.prepared.get(i), started) {
                rejects.log(started, || {
                    let (topic, reason) = (&topics[m.kind.index()], rejection.reason.label());
                    let (partition, offset) = (m.partition, m.offset);
                    tracing::warn!(topic, partition, offset, reason, detail = %rejection.detail, "rejected message");
                });
            }
            let finished = Instant::now();
            engine.record_processing_time(m.decode + (finished - started));
            if finished - last_advance >= ADVANCE_INTERVAL {
                engine.advance(finished);
                last_advance = finished;
            }
        }
        drop(engine);
        if done.send(batch).is_err() {
            break;
        }
    }
    rejects.report_suppressed();
}
