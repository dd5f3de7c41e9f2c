//! What changed in a [`PendingSet`] since its last snapshot or delta, and how a delta is applied
//! to the set as that snapshot (and the deltas before) left it.
//!
//! Impressions leave the set only through [`PendingSet::take_earliest`], which always takes the
//! earliest in the (deadline, query key) order, a total order. So the impressions of the last
//! snapshot that left since are exactly those up to the latest one taken: a delta names that
//! one (`taken_through`) rather than each impression taken, and applying it takes from the
//! restored set every impression up to it, the same ones. Impressions added or changed since
//! (an engagement attributed raises a gain in place) are written whole, once each however often
//! they changed; applying a delta puts them in the set in place of what it held.
//!
//! Recording costs a `Vec` push per insertion and per attributed engagement, and nothing when
//! it is off (the default: only the Kafka source, which writes deltas, turns it on).

use serde::{Deserialize, Serialize};

use super::arena::HEADER_WORDS;
use super::wire::{PendingRecord, PendingRecordV7};
use super::{PendingSet, Taken};
use crate::checkpoint::Inconsistency;
use crate::ids::{GroupId, GroupMap, QueryKey};
use crate::time::EventTime;

/// The changes a [`PendingSet`] records while [`PendingSet::record_changes`] is on.
#[derive(Debug, Default)]
pub(in crate::join) struct PendingChanges {
    /// Queries inserted or changed since the last delta (with repeats).
    touched: Vec<QueryKey>,
    /// The latest (deadline, query) taken since the last delta.
    taken_through: Option<(EventTime, QueryKey)>,
}

impl PendingChanges {
    pub(super) fn touched(&mut self, query: QueryKey) {
        self.touched.push(query);
    }

    pub(super) fn taken(&mut self, deadline: EventTime, query: QueryKey) {
        // Takes come in increasing order, but for an impression added behind the last one taken
        // (it is taken next): the maximum is what a delta names.
        if self.taken_through.is_none_or(|through| through < (deadline, query)) {
            self.taken_through = Some((deadline, query));
        }
    }
}

/// The changes of a [`PendingSet`] between two snapshots or deltas, its records in layout `R`
/// (this build's, [`PendingRecord`], unless read from a changelog of format 7 or before).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingDelta<R = PendingRecord> {
    /// Every impression of the set as it was, up to this (deadline, query) inclusive, left it.
    taken_through: Option<(EventTime, QueryKey)>,
    /// Impressions added or changed since, as they are now, in query order.
    records: Vec<R>,
}

/// A delta of format 7 or before, read back (`crate::engine`'s `compat`).
pub type PendingDeltaV7 = PendingDelta<PendingRecordV7>;

impl From<PendingDeltaV7> for PendingDelta {
    fn from(delta: PendingDeltaV7) -> Self {
        let PendingDelta { taken_through, records } = delta;
        PendingDelta { taken_through, records: records.into_iter().map(PendingRecord::from).collect() }
    }
}

impl PendingDelta {
    /// A delta of no change.
    fn empty() -> Self {
        PendingDelta { taken_through: None, records: Vec::new() }
    }

    /// The groups its records refer to (with repeats).
    pub(in crate::join) fn groups(&self) -> impl Iterator<Item = GroupId> + '_ {
        self.records.iter().map(|r| r.header.group)
    }

    /// Renumbers its records' groups (`map[old] = new`), as [`PendingSet::remap_groups`].
    pub(in crate::join) fn remap_groups(&mut self, map: &GroupMap) {
        for record in &mut self.records {
            if let Some(&ours) = map.get(&record.header.group) {
                record.header.group = ours;
            }
        }
    }

    /// How many impressions it writes whole.
    pub(in crate::join) fn records(&self) -> usize {
        self.records.len()
    }
}

impl PendingSet {
    /// Starts recording changes from now on (a snapshot of the set was just taken or restored).
    pub(in crate::join) fn record_changes(&mut self) {
        self.changes = Some(PendingChanges::default());
    }

    /// Stops recording changes.
    pub(in crate::join) fn stop_recording(&mut self) {
        self.changes = None;
    }

    /// The changes since [`PendingSet::record_changes`] or the last call, which starts the next
    /// delta; an empty delta when not recording.
    pub(in crate::join) fn take_delta(&mut self) -> PendingDelta {
        let Some(changes) = self.changes.as_mut() else { return PendingDelta::empty() };
        let mut touched = std::mem::take(&mut changes.touched);
        let taken_through = changes.taken_through.take();
        touched.sort_unstable();
        touched.dedup();
        let records = touched
            .into_iter()
            .filter_map(|query| {
                let record = self.arena.record(self.find(query)?);
                Some(PendingRecord { header: Taken::read(record), slots: record[HEADER_WORDS..].to_vec() })
            })
            .collect();
        PendingDelta { taken_through, records }
    }

    /// Applies a delta to the set as the snapshot or delta before it left it. Its records are
    /// untrusted: one that changes a pending impression must keep its timestamp and result
    /// count, and a new one is checked as a snapshot's is.
    pub(in crate::join) fn apply_delta(&mut self, delta: PendingDelta, window: i64) -> Result<(), Inconsistency> {
        if let Some(through) = delta.taken_through {
            while let Some(due) = self.queue.peek(&self.arena, window) {
                if (due.deadline, self.arena.query(due.id)) > through {
                    break;
                }
                let lost = Inconsistency::Value { what: "the pending impressions' queue", expected: "whole" };
                let id = self.queue.pop_due_before(None, &self.arena, window).ok_or(lost)?;
                self.index.remove(self.arena.query(id), id);
                self.arena.free(id);
            }
        }
        for r in delta.records {
            let PendingRecord { header, slots } = &r;
            match self.find(header.query) {
                Some(id) => {
                    let record = self.arena.record_mut(id);
                    let had = Taken::read(record);
                    if had.timestamp != header.timestamp || record.len() != HEADER_WORDS + slots.len() {
                        return Err(Inconsistency::Value {
                            what: "a pending impression's timestamp or result count in a delta",
                            expected: "its snapshot's",
                        });
                    }
                    if header.first_engagement != super::NO_ENGAGEMENT && header.first_engagement < header.timestamp {
                        return Err(Inconsistency::Value {
                            what: "a pending impression's first engagement",
                            expected: "at or after it",
                        });
                    }
                    header.write(record, slots.len());
                    record[HEADER_WORDS..].copy_from_slice(slots);
                }
                None => {
                    let id = self.restore(r)?;
                    self.queue.push(id, &self.arena, window);
                }
            }
        }
        Ok(())
    }
}
