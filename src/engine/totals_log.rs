//! A task's totals between two changelog records, as the operations that changed them: what a
//! delta carries instead of the totals themselves ([`TotalsLog`]).
//!
//! A partition's totals (the metric sums per group and window, the click log, CUPED's units,
//! the delay distribution) are large (megabytes with `ab.unit` clustering: every group's unit
//! buckets and distinct units, in the cumulative table and every open window) and change a
//! little with every finalized impression. They change through a handful of operations only:
//! an impression taken as pending offers its query to the click log, a judged impression adds
//! its judged sums, a finalized impression is evaluated and added everywhere, a watermark
//! closes windows. Each of them is a deterministic function of the totals and its own inputs,
//! so a delta records the inputs, a few dozen bytes an impression, and applying it runs the
//! same code on the totals the snapshot (and the deltas before) left: the totals come out
//! exactly as they were, bit for bit, and what they hold next is what the writer's held.
//!
//! What a log cannot say (a label group retired and its id reused, so that its operations
//! would name two groups alike) stops the task's recording: its next record is a snapshot.
//!
//! A log's bytes are untrusted, as a snapshot's: this file is under the no-panic rule (crate
//! documentation, "Hostile input"); an operation whose inputs lie outside the log's buffers,
//! or name text that is not UTF-8, makes the delta unusable.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]

use serde::{Deserialize, Serialize};

use super::aggregation::Evaluation;
use super::task::Totals;
use crate::accumulate::ClosedWindow;
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
    /// A finalized impression, evaluated and added everywhere ([`Evaluation::add`]): `gains`
    /// and `teams` bytes.
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

    /// Records [`Evaluation::add`] of a finalized impression.
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

    /// Runs the operations on `totals`, in order, as the engine ran them: `evaluation` is the
    /// restoring engine's (its metric slots start with the writer's, which the totals are
    /// shaped by, so what it adds is what the writer added), `experiment` names a group's
    /// experiment (CUPED's pre-period is the experiment's). Returns the windows closed.
    pub(super) fn replay<'e>(
        &self,
        totals: &mut Totals,
        evaluation: &Evaluation,
        experiment: impl Fn(GroupId) -> Option<&'e str>,
    ) -> Result<Vec<ClosedWindow>, Inconsistency> {
        // A group id sizes the tables it is added to: only those the delta names are taken.
        let named =
            |group: GroupId| experiment(group).ok_or(Inconsistency::Unnamed { what: "group", id: group.into() });
        let mut at = Cursor { log: self, bytes: 0, docs: 0, lengths: 0, values: 0 };
        let mut values = vec![0.0; evaluation.slot_count()];
        let mut closed = Vec::new();
        for &op in &self.ops {
            match op {
                Op::Offered { query, hash, text, segment, docs } => {
                    let text = at.text(text)?;
                    let segment = at.text(segment)?;
                    let keys = take(&self.docs, &mut at.docs, docs)?;
                    let lengths = take(&self.lengths, &mut at.lengths, docs)?;
                    let mut names = Vec::with_capacity(lengths.len());
                    for &len in lengths {
                        names.push(at.text(len)?);
                    }
                    if let Some(log) = &mut totals.clicks {
                        let doc_name = |rank: usize| names.get(rank).copied().unwrap_or("");
                        let query_text = hash.map(|h| (text, h));
                        log.offer(query, &Offered { query: query_text, segment, docs: keys, doc_name: &doc_name });
                    }
                }
                Op::Judged { group, timestamp, unit, first, values: n } => {
                    let judged = take(&self.values, &mut at.values, n)?;
                    named(group)?;
                    check_time(timestamp)?;
                    totals.accumulators.add_sums(group, timestamp, first as usize, judged, unit);
                }
                Op::Finalized { query, timestamp, group, unit, gains, teams, first_engagement_delay_ms } => {
                    let gains = at.bytes(gains)?;
                    let teams = at.bytes(teams)?;
                    let experiment = named(group)?;
                    check_time(timestamp)?;
                    if !teams.is_empty() && teams.len() != gains.len() {
                        return Err(Inconsistency::Value {
                            what: "an impression's teams in a delta",
                            expected: "one per rank",
                        });
                    }
                    let f = Finalized { query, timestamp, group, unit, gains, teams, first_engagement_delay_ms };
                    evaluation.add_as(&mut values, totals, &f, experiment);
                }
                Op::Closed(watermark) => totals.accumulators.close_windows(watermark, |w| closed.push(w)),
            }
        }
        Ok(closed)
    }
}
