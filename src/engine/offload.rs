//! Finalization on threads of their own: [`FinalizeWorker`].
//!
//! Evaluating a finalized impression's metrics and adding them up is a third of replay's work
//! and depends on nothing but the impression, so `replay` hands it to worker threads while the
//! engine's thread goes on joining. Everything that touches the sums goes to the workers as a
//! command, in the order the engine issued it: impressions finalized, windows closed at a
//! watermark, label groups retired. Each worker (a *lane*) applies them in that order.
//!
//! With one lane, its sums, its closed windows and the order it finalizes in (which the
//! observer sees) are those the engine would have computed itself. With several, each batch of
//! finalized impressions goes to the next lane in turn, and every window close and retirement
//! to every lane: each lane then holds the sums of its share of the impressions, with the same
//! windows closed at the same points, and the lanes' sums are added at the end and per closed
//! window. The sums are integers (fixed point), so that addition is exact in any order, and
//! whether an impression came after its window had closed depends only on the closes before
//! it, which every lane saw. Two things are not sums, and keep one lane: an observer (it sees
//! impressions in order) and the distinct units of `ab.unit` (a set capped at `ab.max_units`,
//! where which units a full set kept depends on order). `tests/threading.rs` checks both
//! kinds against the single-threaded path, byte for byte. At the end the engine takes the sums
//! back ([`FinalizeWorker::finish`]).
//!
//! Only an engine with one partition offloads (replay's), and only one that keeps no closed
//! windows for the aggregates topic (serve's): reads of the sums while the worker runs would
//! need a barrier, which nothing in replay needs.

use std::ops::Range;
use std::sync::mpsc::{Receiver, Sender, SyncSender};
use std::thread::JoinHandle;

use super::aggregation::{Aggregation, Finished, Offloaded};
use super::task::Totals;
use crate::accumulate::ClosedWindow;
use crate::ids::{GroupId, QueryKey};
use crate::join::Finalized;
use crate::time::EventTime;

/// Finalized impressions per batch handed to the worker: the hand-over costs nothing per
/// impression, and the engine runs at most this far ahead of the sums (times the batches in
/// flight).
const BATCH_IMPRESSIONS: usize = 2048;
/// Batches and other commands queued for each worker before the engine waits.
const COMMANDS_IN_FLIGHT: usize = 4;
/// The most lanes an engine starts, whatever the cores: the engine's own thread joins at most
/// about as fast as two or three lanes evaluate.
pub(super) const MAX_LANES: usize = 4;

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
    /// Add a breakdown group's impressions to these groups (see `Aggregation::note_expansion`).
    Expand(GroupId, Box<[GroupId]>),
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

/// The engine's side of the finalization workers.
pub(super) struct FinalizeWorker {
    /// The batch being filled.
    batch: Batch,
    /// The workers, one or more (see the module documentation).
    lanes: Vec<Lane>,
    /// The lane the next batch goes to: the batches go round.
    next_lane: usize,
}

/// One worker thread, as the engine sees it.
struct Lane {
    /// Commands to the worker; dropped to tell it the input has ended.
    commands: SyncSender<Command>,
    /// Emptied batches back from the worker.
    recycled: Receiver<Batch>,
    /// The worker, with what it hands back.
    thread: JoinHandle<Outcome>,
}

impl FinalizeWorker {
    /// Starts a lane per `(totals, aggregation)`: each owns its empty sums of the engine's shape
    /// and evaluates with its aggregation (the first is the engine's, observer included). More
    /// than one only where the module documentation allows.
    pub(super) fn start(lanes: Vec<(Totals, Aggregation)>) -> std::io::Result<Self> {
        let lanes = lanes
            .into_iter()
            .enumerate()
            .map(|(i, (mut totals, aggregation))| {
                // Nothing reads a worker's sums but through methods that flush (see `stage`).
                totals.accumulators.stage();
                let (commands, received) = std::sync::mpsc::sync_channel(COMMANDS_IN_FLIGHT);
                let (recycle, recycled) = std::sync::mpsc::channel();
                let thread = std::thread::Builder::new()
                    .name(format!("rankpulse-final{i}"))
                    .spawn(move || run(totals, aggregation, &received, &recycle))?;
                Ok(Lane { commands, recycled, thread })
            })
            .collect::<std::io::Result<Vec<Lane>>>()?;
        Ok(FinalizeWorker { batch: Batch::default(), lanes, next_lane: 0 })
    }

    fn flush(&mut self) {
        if self.batch.records.is_empty() && self.batch.judged.is_empty() {
            return;
        }
        let Some(lane) = self.lanes.get(self.next_lane) else { return };
        self.next_lane = (self.next_lane + 1) % self.lanes.len();
        let mut next = lane.recycled.try_recv().unwrap_or_default();
        next.records.clear();
        next.gains.clear();
        next.teams.clear();
        next.judged.clear();
        next.judged_values.clear();
        let full = std::mem::replace(&mut self.batch, next);
        lane.send(Command::Finalized(full));
    }
}

impl Offloaded for FinalizeWorker {
    /// Queues a finalized impression.
    fn finalized(&mut self, f: &Finalized<'_>) {
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
    fn judged(&mut self, group: GroupId, timestamp: EventTime, unit: u32, values: &[f64]) {
        let start = self.batch.judged_values.len();
        self.batch.judged_values.extend_from_slice(values);
        let values = start..self.batch.judged_values.len();
        self.batch.judged.push(JudgedRecord { group, timestamp, unit, values });
        if self.batch.judged.len() == BATCH_IMPRESSIONS {
            self.flush();
        }
    }

    /// Queues closing the windows at `watermark`, after every impression finalized before.
    fn close_windows(&mut self, watermark: EventTime) {
        self.flush();
        for lane in &self.lanes {
            lane.send(Command::CloseWindows(watermark));
        }
    }

    /// Queues retiring `group`, after every impression finalized before.
    fn retire(&mut self, group: GroupId) {
        self.flush();
        for lane in &self.lanes {
            lane.send(Command::Retire(group));
        }
    }

    /// Tells every lane where a breakdown group's impressions go. Nothing of the group is
    /// queued yet (it was just interned), so it goes ahead of the batch being filled.
    fn expansion(&mut self, group: GroupId, targets: &[GroupId]) {
        for lane in &self.lanes {
            lane.send(Command::Expand(group, targets.into()));
        }
    }

    /// Sends what is queued, waits for the workers and takes their results, the lanes' sums
    /// added together and their windows of each close merged.
    fn finish(mut self: Box<Self>) -> Finished {
        self.flush();
        let mut outcomes = self.lanes.into_iter().map(|Lane { commands, thread, .. }| {
            drop(commands);
            // A panic in the metric code is a bug; it surfaces as it would have on the engine's
            // own thread.
            thread.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        });
        let Outcome { mut totals, mut closed, aggregation } =
            outcomes.next().expect("the engine starts at least one lane");
        for lane in outcomes {
            totals.accumulators.merge(lane.totals.accumulators);
            totals.first_engagement_delay.merge(&lane.totals.first_engagement_delay);
            // Every lane saw every close, in the same order.
            for (ours, theirs) in closed.iter_mut().zip(lane.closed) {
                ours.extend(theirs);
            }
        }
        Finished { totals, closed, aggregation }
    }
}

impl Lane {
    fn send(&self, command: Command) {
        // The worker stops only when this side hangs up, or by a panic, which `finish` reports.
        let _ = self.commands.send(command);
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
                        for &group in aggregation.evaluation.targets(&j.group) {
                            totals.accumulators.add_sums(group, j.timestamp, first, values, j.unit);
                        }
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
            Command::Expand(group, targets) => aggregation.evaluation.note_expansion(group, &targets),
        }
    }
    totals.accumulators.unstage();
    Outcome { totals, closed, aggregation }
}
