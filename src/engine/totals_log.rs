//! A task's totals between two changelog records, as the operations that changed them: what a
//! delta carries instead of the totals themselves ([`TotalsLog`]).
//!
//! A partition's totals (the metric sums per group and window, the click log, CUPED's units,
//! the delay distribution) are large (megabytes with `ab.unit` clustering: every group's unit
//! buckets and distinct units, in the cumulative table and every open window) and change a
//! little with every finalized impression. They change through a handful of operations only:
//! an impression taken as pending offers its query to the click log, a judged impression adds
//! its judged sums, a finalized impression is evaluated and added everywhere, a watermark
//! closes windows, an idle label group retires. Each of them is a deterministic function of the totals and its own inputs,
//! so a delta records the inputs, a few dozen bytes an impression, and applying it runs the
//! same code on the totals the snapshot (and the deltas before) left (`super::delta`): the
//! totals come out exactly as they were, and what they hold next is what the writer's held.
//!
//! A label group's retirement is an operation too (its sums leave the totals); group ids are
//! never reused, so every operation names one group for good.
//!
//! A log's bytes are untrusted, as a snapshot's: this file is under the no-panic rule (crate
//! documentation, "Hostile input"); an operation whose inputs lie outside the log's buffers,
//! or name text that is not UTF-8, makes the delta unusable.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]

use serde::{Deserialize, Serialize};

use crate::checkpoint::Inconsistency;
use crate::clicks::log::Offered;
use crate::ids::{DocKey, GroupId, QueryKey};
use crate::join::Finalized;
use crate::time::EventTime;

/// One operation on a task's totals; its variable-length inputs are in the log's buffers, in
/// the order of the operations (each takes the next so many).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum Op {
    /// An impression the join took as pending, offered to the click log
    /// ([`crate::clicks::log::ClickLog::offer`]): `text` and `segment` bytes, `docs` keys and
    /// as many names (each a length in `lengths` and its bytes). `hash` is `None` for an
    /// impression without query text.
    Offered { query: QueryKey, hash: Option<u64>, text: u32, segment: u32, docs: u32 },
    /// An arriving impression's judged sums ([`crate::accumulate::Accumulators::add_sums`]):
    /// `values` of them, the first of slot `first`.
    Judged { group: GroupId, timestamp: EventTime, unit: u32, first: u32, values: u32 },
    /// A finalized impression, evaluated and added everywhere: `gains` and `teams` bytes.
    Finalized {
        query: QueryKey,
        timestamp: EventTime,
        group: GroupId,
        unit: u32,
        gains: u32,
        teams: u32,
        first_engagement_delay_ms: Option<i64>,
    },
    /// The windows closed at a watermark ([`crate::accumulate::Accumulators::close_windows`]).
    Closed(EventTime),
    /// A label group retired: its sums and CUPED state dropped (ids are never reused).
    Retired(GroupId),
}

/// The operations on a task's totals since its last changelog record, with their inputs.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct TotalsLog {
    ops: Vec<Op>,
    /// Gains, teams, query texts, segments and result names, in the order of the operations.
    bytes: Vec<u8>,
    /// The result keys of offered impressions.
    docs: Vec<DocKey>,
    /// The length of each result name in `bytes`.
    lengths: Vec<u32>,
    /// Judged values.
    values: Vec<f64>,
}

/// Reads a log's buffers in order, refusing what lies beyond them.
struct Cursor<'a> {
    log: &'a TotalsLog,
    bytes: usize,
    docs: usize,
    lengths: usize,
    values: usize,
}

/// Event times an operation may carry: a rankpulse takes none before 1970 and none far ahead
/// of its clock, so what lies beyond this (over 100,000 years) is damage, kept from the window
/// and epoch arithmetic.
const MAX_TIMESTAMP: EventTime = 1 << 52;

fn check_time(timestamp: EventTime) -> Result<(), Inconsistency> {
    match (0..=MAX_TIMESTAMP).contains(&timestamp) {
        true => Ok(()),
        false => Err(Inconsistency::Value {
            what: "an event time in a delta",
            expected: "between 1970 and the year 100,000",
        }),
    }
}

fn beyond() -> Inconsistency {
    Inconsistency::Value { what: "an operation's inputs in a delta", expected: "within its buffers" }
}

/// The next `n` items of `buffer` from `*at`, moving `*at` past them.
fn take<'a, T>(buffer: &'a [T], at: &mut usize, n: u32) -> Result<&'a [T], Inconsistency> {
    let end = at.checked_add(n as usize).ok_or_else(beyond)?;
    let taken = buffer.get(*at..end).ok_or_else(beyond)?;
    *at = end;
    Ok(taken)
}

impl<'a> Cursor<'a> {
    fn bytes(&mut self, n: u32) -> Result<&'a [u8], Inconsistency> {
        take(&self.log.bytes, &mut self.bytes, n)
    }

    fn text(&mut self, n: u32) -> Result<&'a str, Inconsistency> {
        std::str::from_utf8(self.bytes(n)?)
            .map_err(|_| Inconsistency::Value { what: "a text in a delta", expected: "UTF-8" })
    }
}

impl TotalsLog {
    /// Operations recorded.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether none was recorded.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Its buffers' encoded sizes and its operations by kind: where a delta's bytes go (the
    /// volume measurements).
    #[cfg(test)]
    pub fn parts(&self) -> Vec<(&'static str, usize)> {
        let size = |bytes: Vec<u8>| bytes.len();
        let count = |kind: fn(&Op) -> bool| self.ops.iter().filter(|op| kind(op)).count();
        vec![
            ("ops", size(crate::checkpoint::encode(&self.ops))),
            ("ops offered", count(|op| matches!(op, Op::Offered { .. }))),
            ("ops finalized", count(|op| matches!(op, Op::Finalized { .. }))),
            ("ops judged", count(|op| matches!(op, Op::Judged { .. }))),
            ("bytes", size(crate::checkpoint::encode(&self.bytes))),
            ("docs", size(crate::checkpoint::encode(&self.docs))),
            ("lengths", size(crate::checkpoint::encode(&self.lengths))),
            ("values", size(crate::checkpoint::encode(&self.values))),
        ]
    }

    /// Records [`crate::clicks::log::ClickLog::offer`]; `names` are the result names of the
    /// ranks the click log may track.
    pub fn offered(&mut self, query: QueryKey, offered: &Offered<'_>, names: usize) {
        let (text, hash) = match offered.query {
            Some((text, hash)) => (text, Some(hash)),
            None => ("", None),
        };
        let docs = offered.docs.get(..names).unwrap_or(offered.docs);
        self.ops.push(Op::Offered {
            query,
            hash,
            text: text.len() as u32,
            segment: offered.segment.len() as u32,
            docs: docs.len() as u32,
        });
        self.bytes.extend_from_slice(text.as_bytes());
        self.bytes.extend_from_slice(offered.segment.as_bytes());
        self.docs.extend_from_slice(docs);
        for rank in 0..docs.len() {
            let name = (offered.doc_name)(rank);
            self.lengths.push(name.len() as u32);
            self.bytes.extend_from_slice(name.as_bytes());
        }
    }

    /// Records [`crate::accumulate::Accumulators::add_sums`].
    pub fn judged(&mut self, group: GroupId, timestamp: EventTime, unit: u32, first: usize, values: &[f64]) {
        let (first, len) = (first as u32, values.len() as u32);
        self.ops.push(Op::Judged { group, timestamp, unit, first, values: len });
        self.values.extend_from_slice(values);
    }

    /// Records the evaluation of a finalized impression (`super::aggregation`'s `Evaluation::add`).
    pub fn finalized(&mut self, f: &Finalized<'_>) {
        self.ops.push(Op::Finalized {
            query: f.query,
            timestamp: f.timestamp,
            group: f.group,
            unit: f.unit,
            gains: f.gains.len() as u32,
            teams: f.teams.len() as u32,
            first_engagement_delay_ms: f.first_engagement_delay_ms,
        });
        self.bytes.extend_from_slice(f.gains);
        self.bytes.extend_from_slice(f.teams);
    }

    /// Records the windows closed at `watermark`.
    pub fn closed(&mut self, watermark: EventTime) {
        self.ops.push(Op::Closed(watermark));
    }

    /// Records the retirement of a label group.
    pub fn retired(&mut self, group: GroupId) {
        self.ops.push(Op::Retired(group));
    }

    /// The groups the operations refer to (with repeats): a delta names them.
    pub fn groups(&self) -> impl Iterator<Item = GroupId> + '_ {
        self.ops.iter().filter_map(|op| match *op {
            Op::Judged { group, .. } | Op::Finalized { group, .. } | Op::Retired(group) => Some(group),
            Op::Offered { .. } | Op::Closed(_) => None,
        })
    }

    /// The operations, in order, each with its inputs; an operation whose inputs are not in
    /// the buffers, or are out of range, is an error (and the last item).
    pub fn operations(&self) -> impl Iterator<Item = Result<Operation<'_>, Inconsistency>> + '_ {
        let mut at = Cursor { log: self, bytes: 0, docs: 0, lengths: 0, values: 0 };
        let mut failed = false;
        self.ops.iter().map_while(move |&op| {
            if failed {
                return None;
            }
            let read = at.read(op);
            failed = read.is_err();
            Some(read)
        })
    }
}

/// One operation of a [`TotalsLog`] with its inputs, as the engine ran it.
#[derive(Debug)]
pub enum Operation<'a> {
    /// [`crate::clicks::log::ClickLog::offer`] of the impression under `query`: `text` (with
    /// its hash) is `None` for an impression without query text; `names` are those of `docs`.
    Offered { query: QueryKey, text: Option<(&'a str, u64)>, segment: &'a str, docs: &'a [DocKey], names: Vec<&'a str> },
    /// [`crate::accumulate::Accumulators::add_sums`] of a judged impression's values, the
    /// first of slot `first`.
    Judged { group: GroupId, timestamp: EventTime, unit: u32, first: usize, values: &'a [f64] },
    /// A finalized impression, evaluated and added everywhere.
    Finalized(Finalized<'a>),
    /// [`crate::accumulate::Accumulators::close_windows`] at a watermark.
    Closed(EventTime),
    /// A label group retired.
    Retired(GroupId),
}

impl<'a> Cursor<'a> {
    /// `op` with its inputs, taken from the buffers.
    fn read(&mut self, op: Op) -> Result<Operation<'a>, Inconsistency> {
        Ok(match op {
            Op::Offered { query, hash, text, segment, docs } => {
                let text = self.text(text)?;
                let segment = self.text(segment)?;
                let keys = take(&self.log.docs, &mut self.docs, docs)?;
                let lengths = take(&self.log.lengths, &mut self.lengths, docs)?;
                let names = lengths.iter().map(|&len| self.text(len)).collect::<Result<_, _>>()?;
                Operation::Offered { query, text: hash.map(|h| (text, h)), segment, docs: keys, names }
            }
            Op::Judged { group, timestamp, unit, first, values } => {
                check_time(timestamp)?;
                let values = take(&self.log.values, &mut self.values, values)?;
                Operation::Judged { group, timestamp, unit, first: first as usize, values }
            }
            Op::Finalized { query, timestamp, group, unit, gains, teams, first_engagement_delay_ms } => {
                check_time(timestamp)?;
                let gains = self.bytes(gains)?;
                let teams = self.bytes(teams)?;
                if !teams.is_empty() && teams.len() != gains.len() {
                    let what = "an impression's teams in a delta";
                    return Err(Inconsistency::Value { what, expected: "one per rank" });
                }
                Operation::Finalized(Finalized {
                    query,
                    timestamp,
                    group,
                    unit,
                    gains,
                    teams,
                    first_engagement_delay_ms,
                })
            }
            Op::Closed(watermark) => Operation::Closed(watermark),
            Op::Retired(group) => Operation::Retired(group),
        })
    }
}
