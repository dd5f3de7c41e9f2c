//! Finalization on a thread of its own: [`FinalizeWorker`].
//!
//! Evaluating a finalized impression's metrics and adding them up is a third of replay's work
//! and depends on nothing but the impression, so `replay` hands it to a worker thread while the
//! engine's thread goes on joining. Everything that touches the sums goes to the worker as a
//! command, in the order the engine issued it: impressions finalized, windows closed at a
//! watermark, label groups retired. One worker applies them in that order, so its sums, its
//! closed windows and the order it finalizes in (which the observer sees) are those the engine
//! would have computed itself; `tests/threading.rs` checks it. At the end the engine takes the
//! sums back ([`FinalizeWorker::finish`]).
//!
//! Only an engine with one partition offloads (replay's), and only one that keeps no closed
//! windows for the aggregates topic (serve's): reads of the sums while the worker runs would
//! need a barrier, which nothing in replay needs.

use std::ops::Range;
use std::sync::mpsc::{Receiver, Sender, SyncSender};
use std::thread::JoinHandle;

use super::aggregation::Aggregation;
use super::task::Totals;
use crate::accumulate::ClosedWindow;
use crate::ids::{GroupId, QueryKey};
use crate::join::Finalized;
use crate::time::EventTime;

/// Finalized impressions per batch handed to the worker: the hand-over costs nothing per
/// impression, and the engine runs at most this far ahead of the sums (times the batches in
/// flight).
const BATCH_IMPRESSIONS: usize = 2048;
/// Batches and other commands queued for the worker before the engine waits.
const COMMANDS_IN_FLIGHT: usize = 4;

/// A finalized impression as the worker needs it; its gains are in the batch.
#[derive(Debug, Clone)]
struct Record {
    /// See [`Finalized::query`].
    query: QueryKey,
    /// See [`Finalized::timestamp`].
    timestamp: EventTime,
    /// See [`Finalized::group`].
    group: GroupId,
    /// See [`Finalized::unit`].
    unit: u32,
    /// Its gains: `gains[range]` of the batch.
    gains: Range<usize>,
    /// Its teams (interleaved lists only): `teams[range]` of the batch.
    teams: Range<usize>,
    /// See [`Finalized::first_engagement_delay_ms`].
    first_engagement_delay_ms: Option<i64>,
}

/// An arriving impression's judged block, as the worker needs it; its values are in the batch.
#[derive(Debug, Clone)]
struct JudgedRecord {
    /// Its group.
    group: GroupId,
    /// Its event time: which windows it falls in.
    timestamp: EventTime,
    /// Its unit's hash.
    unit: u32,
    /// Its values: `judged_values[range]` of the batch.
    values: Range<usize>,
}

/// Finalized impressions, their gains back to back: a batch allocates nothing per impression
/// once its buffers have grown, and goes back to the engine for reuse.
#[derive(Debug, Default)]
struct Batch {
    /// The impressions in the order they were finalized.
    records: Vec<Record>,
    /// Every impression's gains.
    gains: Vec<u8>,
    /// Every interleaved impression's teams.
    teams: Vec<u8>,
    /// Judged blocks of arriving impressions. Their windows are open until a later
    /// `CloseWindows`, and sums do not depend on order, so they are added after the batch's
    /// finalized impressions.
    judged: Vec<JudgedRecord>,
    /// Every judged block's values.
    judged_values: Vec<f64>,
}

/// What the worker does, in the order the engine asked.
enum Command {
    /// Evaluate and add up these impressions.
    Finalized(Batch),
    /// Close the windows whose impressions are all final at this watermark.
    CloseWindows(EventTime),
    /// Drop a retired group's cumulative sums.
    Retire(GroupId),
}

/// What the worker hands back at the end.
struct Outcome {
    /// The sums, and the delay distribution.
    totals: Totals,
    /// The windows each `CloseWindows` closed, in command order.
    closed: Vec<Vec<ClosedWindow>>,
    /// The observer, which ran on the worker.
    aggregation: Aggregation,
}

/// The engine's side of a finalization worker.
pub(super) struct FinalizeWorker {
    /// The batch being filled.
    batch: Batch,
    /// Commands to the worker; dropped to tell it the input has ended.
    commands: SyncSender<Command>,
    /// Emptied batches back from the worker.
    recycled: Receiver<Batch>,
    /// The worker, with what it hands back.
    thread: JoinHandle<Outcome>,
}

/// What [`FinalizeWorker::finish`] gives the engine back.
pub(super) struct Finished {
    /// The sums and delay distribution the worker computed.
    pub(super) totals: Totals,
    /// The windows each close closed, in order.
    pub(super) closed: Vec<Vec<ClosedWindow>>,
    /// The aggregation, with its observer, back from the worker.
    pub(super) aggregation: Aggregation,
}

impl FinalizeWorker {
    /// Starts a worker that owns `totals` (empty sums of the engine's shape) and evaluates with
    /// `aggregation` (the engine's, observer included).
    pub(super) fn start(mut totals: Totals, aggregation: Aggregation) -> std::io::Result<Self> {
        // Nothing reads the worker's sums but through methods that flush (see `stage`).
        totals.accumulators.stage();
        let (commands, received) = std::sync::mpsc::sync_channel(COMMANDS_IN_FLIGHT);
        let (recycle, recycled) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("rankpulse-finalize".into())
            .spawn(move || run(totals, aggregation, &received, &recycle))?;
        Ok(FinalizeWorker { batch: Batch::default(), commands, recycled, thread })
    }

    /// Queues a finalized impression.
    pub(super) fn finalized(&mut self, f: &Finalized<'_>) {
        let start = self.batch.gains.len();
        self.batch.gains.extend_from_slice(f.gains);
        let teams_start = self.batch.teams.len();
        self.batch.teams.extend_from_slice(f.teams);
        self.batch.records.push(Record {
            query: f.query,
            timestamp: f.timestamp,
            group: f.group,
            unit: f.unit,
            gains: start..self.batch.gains.len(),
            teams: teams_start..self.batch.teams.len(),
            first_engagement_delay_ms: f.first_engagement_delay_ms,
        });
        if self.batch.records.len() == BATCH_IMPRESSIONS {
            self.flush();
        }
    }

    /// Queues an arriving impression's judged block.
    pub(super) fn judged(&mut self, group: GroupId, timestamp: EventTime, unit: u32, values: &[f64]) {
        let start = self.batch.judged_values.len();
        self.batch.judged_values.extend_from_slice(values);
        let values = start..self.batch.judged_values.len();
        self.batch.judged.push(JudgedRecord { group, timestamp, unit, values });
        if self.batch.judged.len() == BATCH_IMPRESSIONS {
            self.flush();
        }
    }

    /// Queues closing the windows at `watermark`, after every impression finalized before.
    pub(super) fn close_windows(&mut self, watermark: EventTime) {
        self.flush();
        self.send(Command::CloseWindows(watermark));
    }

    /// Queues retiring `group`, after every impression finalized before.
    pub(super) fn retire(&mut self, group: GroupId) {
        self.flush();
        self.send(Command::Retire(group));
    }

    fn flush(&mut self) {
        if self.batch.records.is_empty() && self.batch.judged.is_empty() {
            return;
        }
        let mut next = self.recycled.try_recv().unwrap_or_default();
        next.records.clear();
        next.gains.clear();
        next.teams.clear();
        next.judged.clear();
        next.judged_values.clear();
        let full = std::mem::replace(&mut self.batch, next);
        self.send(Command::Finalized(full));
    }

    fn send(&mut self, command: Command) {
        // The worker stops only when this side hangs up, or by a panic, which `finish` reports.
        let _ = self.commands.send(command);
    }

    /// Sends what is queued, waits for the worker and takes its results.
    pub(super) fn finish(mut self) -> Finished {
        self.flush();
        let FinalizeWorker { commands, thread, .. } = self;
        drop(commands);
        match thread.join() {
            Ok(Outcome { totals, closed, aggregation }) => Finished { totals, closed, aggregation },
            // A panic in the metric code is a bug; it surfaces as it would have on the engine's
            // own thread.
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}

/// The worker: applies the commands in order until the engine hangs up.
fn run(
    mut totals: Totals,
    mut aggregation: Aggregation,
    commands: &Receiver<Command>,
    recycle: &Sender<Batch>,
) -> Outcome {
    let mut closed = Vec::new();
    while let Ok(command) = commands.recv() {
        match command {
            Command::Finalized(batch) => {
                for r in &batch.records {
                    let f = Finalized {
                        query: r.query,
                        timestamp: r.timestamp,
                        group: r.group,
                        unit: r.unit,
                        gains: &batch.gains[r.gains.clone()],
                        teams: &batch.teams[r.teams.clone()],
                        first_engagement_delay_ms: r.first_engagement_delay_ms,
                    };
                    aggregation.finalize(&mut totals, f);
                }
                if let Some(first) = aggregation.layout().judged().map(|block| block.first) {
                    for j in &batch.judged {
                        let values = &batch.judged_values[j.values.clone()];
                        totals.accumulators.add_sums(j.group, j.timestamp, first, values, j.unit);
                    }
                }
                let _ = recycle.send(batch);
            }
            Command::CloseWindows(watermark) => {
                let mut windows = Vec::new();
                totals.accumulators.close_windows(watermark, |window| windows.push(window));
                closed.push(windows);
            }
            Command::Retire(group) => totals.accumulators.retire(group),
        }
    }
    totals.accumulators.unstage();
    Outcome { totals, closed, aggregation }
}
