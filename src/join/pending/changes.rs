//! What changed in a [`PendingSet`] since its last snapshot or delta, and how a delta is applied
//! to the set as that snapshot (and the deltas before) left it.
//!
//! Impressions leave the set only through [`PendingSet::take_earliest`], which always takes the
//! earliest in the (deadline, query key) order, a total order. So the impressions of the last
//! snapshot that left since are exactly those up to the latest one taken: a delta names that
//! one (`taken_through`) rather than each impression taken, and applying it takes from the
//! restored set every impression up to it, the same ones. Impressions added since are written
//! whole, once each however often they changed. One the set held before that changed since (an
//! engagement attributed raises a gain and may set the first engagement, nothing else) is
//! written as an update of those alone, its key, first engagement and gains: a third of its
//! record. Applying a delta adds the first and changes the second in place, refusing an update
//! of an impression the set does not hold.
//!
//! Recording costs a `Vec` push per insertion and per attributed engagement, and nothing when
//! it is off (the default: only the Kafka source, which writes deltas, turns it on).

use serde::{Deserialize, Serialize};

use super::arena::{FIRST_ENGAGEMENT, HEADER_WORDS};
use super::wire::{PendingRecord, PendingRecordV7, PendingUpdate};
use super::{PendingSet, Slot, Taken};
use crate::checkpoint::Inconsistency;
use crate::ids::{GroupId, GroupMap, QueryKey};
use crate::time::EventTime;

/// The changes a [`PendingSet`] records while [`PendingSet::record_changes`] is on.
#[derive(Debug, Default)]
pub(in crate::join) struct PendingChanges {
    /// Queries inserted since the last delta: written whole.
    inserted: Vec<QueryKey>,
    /// Queries changed since the last delta (with repeats): written as updates, unless
    /// inserted since too.
    changed: Vec<QueryKey>,
    /// The latest (deadline, query) taken since the last delta.
    taken_through: Option<(EventTime, QueryKey)>,
}

impl PendingChanges {
    pub(super) fn inserted(&mut self, query: QueryKey) {
        self.inserted.push(query);
    }

    pub(super) fn changed(&mut self, query: QueryKey) {
        self.changed.push(query);
    }

    pub(super) fn taken(&mut self, deadline: EventTime, query: QueryKey) {
        // Takes come in increasing order, but for an impression added behind the last one taken
        // (it is taken next): the maximum is what a delta names.
        if self.taken_through.is_none_or(|through| through < (deadline, query)) {
            self.taken_through = Some((deadline, query));
        }
    }
}

/// The changes of a [`PendingSet`] between two snapshots or deltas (format 10).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingDelta {
    /// Every impression of the set as it was, up to this (deadline, query) inclusive, left it.
    taken_through: Option<(EventTime, QueryKey)>,
    /// Impressions added since, as they are now, in query order.
    records: Vec<PendingRecord>,
    /// Impressions the set held before that changed since (engagements attributed), as they
    /// are now, in query order.
    updates: Vec<PendingUpdate>,
}

/// A delta of format 7 or before, read back (`crate::engine`'s `compat`): impressions added or
/// changed, each written whole.
#[derive(Deserialize)]
pub struct PendingDeltaV7 {
    taken_through: Option<(EventTime, QueryKey)>,
    records: Vec<PendingRecordV7>,
}

impl From<PendingDeltaV7> for PendingDelta {
    fn from(delta: PendingDeltaV7) -> Self {
        let PendingDeltaV7 { taken_through, records } = delta;
        let records = records.into_iter().map(PendingRecord::from).collect();
        PendingDelta { taken_through, records, updates: Vec::new() }
    }
}

impl PendingDelta {
    /// A delta of no change.
    fn empty() -> Self {
        PendingDelta { taken_through: None, records: Vec::new(), updates: Vec::new() }
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

    /// How many impressions it changes by an update.
    pub(in crate::join) fn updates(&self) -> usize {
        self.updates.len()
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
        let mut inserted = std::mem::take(&mut changes.inserted);
        let mut changed = std::mem::take(&mut changes.changed);
        let taken_through = changes.taken_through.take();
        inserted.sort_unstable();
        inserted.dedup();
        changed.sort_unstable();
        changed.dedup();
        // Those taken since are found no more: the delta's `taken_through` covers them.
        let records = inserted
            .iter()
            .filter_map(|&query| {
                let record = self.arena.record(self.find(query)?);
                Some(PendingRecord { header: Taken::read(record), slots: record[HEADER_WORDS..].to_vec() })
            })
            .collect();
        let updates = changed
            .into_iter()
            .filter(|query| inserted.binary_search(query).is_err())
            .filter_map(|query| {
                let record = self.arena.record(self.find(query)?);
                let gains = record[HEADER_WORDS..].iter().map(|&word| Slot(word).gain());
                Some(PendingUpdate::of(Taken::read(record), gains))
            })
            .collect();
        PendingDelta { taken_through, records, updates }
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
        for update in delta.updates {
            let missing = Inconsistency::Value { what: "a pending impression a delta updates", expected: "pending" };
            let record = self.arena.record_mut(self.find(update.query).ok_or(missing)?);
            let timestamp = Taken::read(record).timestamp;
            let first_engagement = update.first_engagement(timestamp).ok_or(Inconsistency::Value {
                what: "a pending impression's first engagement",
                expected: "at or after it",
            })?;
            let slots = &mut record[HEADER_WORDS..];
            if slots.len() != update.gains.len() {
                return Err(Inconsistency::Value {
                    what: "the gains of a pending impression a delta updates",
                    expected: "one per result",
                });
            }
            for (word, &gain) in slots.iter_mut().zip(&update.gains) {
                *word = Slot(*word)
                    .with_gain(gain)
                    .ok_or(Inconsistency::Value { what: "a gain in a delta", expected: "at most 31" })?;
            }
            record[FIRST_ENGAGEMENT] = first_engagement as u64;
        }
        Ok(())
    }
}
