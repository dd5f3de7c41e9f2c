//! The attribution join on event time, for one shard (one Kafka partition number, shared by the
//! co-partitioned impressions and engagements topics).
//!
//! State is keyed by time and expired by the watermark: pending impressions wait in a
//! deadline-ordered heap until the watermark passes `timestamp + attribution_window` (how they
//! are stored compactly is [`pending`]'s business);
//! engagements that arrive before their impression wait in a second heap until the watermark
//! passes their own timestamp, after which no impression they could belong to can still be
//! accepted, and they are orphaned. De-duplication memory is expired the same way. The watermark
//! itself is computed by the engine (it needs every input of every partition to handle
//! idleness) and handed to [`Shard::advance`]; the join knows nothing of inputs, offsets or
//! partition ownership.
//!
//! The rules, each in one place:
//! * an impression whose query is pending, or was finalized within the last attribution window,
//!   is a *duplicate* (the first counts);
//! * an impression is *late* (dropped, counted) when the watermark already passed its deadline;
//! * an engagement whose identity (`event_id`, else query, document, action and timestamp) was
//!   seen within its attribution window is a *duplicate* and changes nothing;
//! * an engagement with a pending impression is attributed when its timestamp lies in
//!   [impression, impression + window]; before the impression it is *outside the window*; when
//!   its document is not in the result list it is *not shown*; neither changes any gain;
//! * an engagement after its impression's window is *late* when it is at most one more window
//!   after it, and is *held* (then *orphaned*) beyond that, whether the impression is pending,
//!   finalized or forgotten when the engagement is read: the outcome depends on timestamps, not
//!   on how the two topics' consumption interleaved (which differs between replicas and after a
//!   handover); a finalized query is remembered exactly that long;
//! * an engagement without a pending impression is *late* when the watermark passed its
//!   timestamp, else it is *held* until its impression arrives or the watermark passes it
//!   (*orphaned*);
//! * when the engine's state limits are reached, the impression with the earliest deadline is
//!   finalized early (*evicted*) and the oldest held engagement is dropped (*evicted*).

mod delta;
mod expiry;
mod pending;
mod record;

use std::collections::hash_map::Entry;

use serde::{Deserialize, Serialize};

use crate::checkpoint::Inconsistency;
use crate::ids::{DocKey, EngagementId, GroupId, GroupMap, QueryKey};
use crate::time::EventTime;
pub use delta::{ShardDelta, ShardDeltaV7};
use expiry::{ExpiringSet, ExpiryQueue, KeyMap};
pub use pending::{PendingDelta, PendingDeltaV7, PendingRecord, PendingRecordV7, PendingSet, PendingSetV7};
use pending::{PendingMut, NO_ENGAGEMENT};
pub use record::{ShardRecord, ShardRecordRef, ShardRecordV7};

/// Event-time rules of the join, in milliseconds.
#[derive(Debug, Clone, Copy)]
pub struct JoinSettings {
    /// `join.attribution_window`: how long after an impression its engagements count.
    pub attribution_window: i64,
}

/// An engagement that arrived before its impression.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct HeldEngagement {
    /// Its event time: attribution checks it against the impression's window.
    timestamp: EventTime,
    /// The result engaged with.
    doc: DocKey,
    /// Its action's gain, looked up once on arrival.
    gain: u8,
}

/// What happened to an impression offered to the join.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImpressionOutcome {
    Pending,
    Duplicate,
    Late,
    /// Not taken: the shard's pending records fill the 32 GiB their ids address. The caller
    /// finalizes the earliest impression early (an eviction) and offers it again.
    StateFull,
}

/// What happened to an engagement offered to the join (or released from holding).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngagementOutcome {
    Attributed,
    NotShown,
    OutsideWindow,
    Held,
    Late,
    Duplicate,
}

/// Per-outcome counts of engagements, so that held engagements released by an arriving
/// impression are counted exactly like direct ones.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngagementTally {
    /// Attributed to a shown result of their impression, within its window.
    pub attributed: u64,
    /// Their document was not in the impression's result list.
    pub not_shown: u64,
    /// Their timestamp was before the impression.
    pub outside_window: u64,
    /// Within one attribution window after their impression's window, or the watermark had
    /// passed them.
    pub late: u64,
    /// Held for an impression that never arrived before the watermark passed them.
    pub orphaned: u64,
    /// Seen before (same identity within the attribution window).
    pub duplicate: u64,
    /// Held engagements dropped because the held-engagement limit was reached.
    pub evicted: u64,
}

impl EngagementTally {
    fn count(&mut self, outcome: EngagementOutcome) {
        match outcome {
            EngagementOutcome::Attributed => self.attributed += 1,
            EngagementOutcome::NotShown => self.not_shown += 1,
            EngagementOutcome::OutsideWindow => self.outside_window += 1,
            EngagementOutcome::Late => self.late += 1,
            EngagementOutcome::Duplicate => self.duplicate += 1,
            EngagementOutcome::Held => {}
        }
    }

    /// Checks counts read from a snapshot (see [`crate::checkpoint::MAX_COUNT`]).
    pub fn check(&self) -> Result<(), Inconsistency> {
        let EngagementTally { attributed, not_shown, outside_window, late, orphaned, duplicate, evicted } = *self;
        for count in [attributed, not_shown, outside_window, late, orphaned, duplicate, evicted] {
            crate::checkpoint::check_count("an engagement count", count)?;
        }
        Ok(())
    }

    /// Adds another shard's counts.
    pub fn merge(&mut self, other: &EngagementTally) {
        self.attributed += other.attributed;
        self.not_shown += other.not_shown;
        self.outside_window += other.outside_window;
        self.late += other.late;
        self.orphaned += other.orphaned;
        self.duplicate += other.duplicate;
        self.evicted += other.evicted;
    }
}

/// A finalized impression, handed to the accumulators.
#[derive(Debug)]
pub struct Finalized<'a> {
    /// Its query, for observers (replay's TREC export, the conformance tests).
    pub query: QueryKey,
    /// Its event time: which windows it falls in.
    pub timestamp: EventTime,
    /// Its (experiment, variant).
    pub group: GroupId,
    /// The hash of its A/B unit: which unit bucket its values go to.
    pub unit: u32,
    /// The attributed gain per rank: what the metrics are computed from.
    pub gains: &'a [u8],
    /// Per rank, the team of an interleaved list (ranker index + 1); empty when the list was
    /// not interleaved.
    pub teams: &'a [u8],
    /// Impression to its first attributed engagement, for the delay distribution.
    pub first_engagement_delay_ms: Option<i64>,
}

/// Join state of one shard. A snapshot holds it as a [`ShardRecord`].
#[derive(Debug, Default)]
pub struct Shard {
    /// Impressions waiting for their attribution window to close, by query and by deadline.
    pending: PendingSet,
    /// Engagements that arrived before their impression, by query: released into the
    /// impression when it arrives.
    held: KeyMap<QueryKey, Vec<HeldEngagement>>,
    /// (timestamp, query) of every held engagement, earliest first: how held engagements are
    /// orphaned by the watermark and evicted oldest first. Entries of released engagements stay
    /// and are skipped when they surface.
    held_expiry: ExpiryQueue<QueryKey>,
    /// Held engagements in all lists: kept so the size is O(1) for the state limits.
    held_count: usize,
    /// Engagements seen within their attribution window, for de-duplication.
    seen_engagements: ExpiringSet<EngagementId>,
    /// Queries finalized within the last attribution window: a redelivered impression is a
    /// duplicate, and an engagement for it is late rather than held.
    finalized_recently: ExpiringSet<QueryKey>,
    /// This shard's watermark: no event behind it can still change an open impression.
    watermark: Option<EventTime>,
    /// Outcome counts of every engagement offered here: exported totals, so they survive a
    /// [`Shard::reset_keeping_tally`].
    pub tally: EngagementTally,
    /// Reused buffer handing a finalized impression's gains to the accumulators.
    gains_scratch: Vec<u8>,
    /// Reused buffer handing a finalized impression's teams to the accumulators.
    teams_scratch: Vec<u8>,
    /// Whether changes are recorded for the next delta ([`Shard::record_changes`]).
    recording: bool,
    /// The held engagements changed since the last delta (they go into it whole).
    held_changed: bool,
}

impl Shard {
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }
    pub fn held_len(&self) -> usize {
        self.held_count
    }
    /// Keys held for de-duplication (engagement identities and recently finalized queries).
    pub fn dedup_len(&self) -> usize {
        self.seen_engagements.len() + self.finalized_recently.len()
    }
    pub fn watermark(&self) -> Option<EventTime> {
        self.watermark
    }

    fn passed(&self, t: EventTime) -> bool {
        self.watermark.is_some_and(|w| w > t)
    }

    /// Checks a shard read from a snapshot, beyond what deserializing checked: its count of held
    /// engagements (kept, not recounted), its engagement counts, and the deadline order of its
    /// pending impressions under this attribution window.
    pub fn check(&self, settings: &JoinSettings) -> Result<(), Inconsistency> {
        let held: usize = self.held.values().map(Vec::len).sum();
        if held != self.held_count {
            return Err(Inconsistency::Recount { what: "held engagements", found: held, kept: self.held_count });
        }
        self.tally.check()?;
        self.pending.check(settings.attribution_window)
    }

    /// The groups of the pending impressions (with repeats).
    pub fn pending_groups(&self) -> impl Iterator<Item = GroupId> + '_ {
        self.pending.groups()
    }

    /// Renumbers the pending impressions' groups: `map[old] = new` (see [`Shard::pending_groups`]).
    pub fn remap_groups(&mut self, map: &GroupMap) {
        self.pending.remap_groups(map);
    }

    /// Offers an impression. On acceptance, engagements held for it are attributed.
    pub fn offer_impression(
        &mut self,
        query: QueryKey,
        timestamp: EventTime,
        group: GroupId,
        unit: u32,
        docs: &[DocKey],
        settings: &JoinSettings,
    ) -> ImpressionOutcome {
        self.offer_interleaved_impression(query, timestamp, group, unit, docs, &[], settings)
    }

    /// [`Shard::offer_impression`] of a list whose results carry their `teams` (ranker index
    /// + 1 per result; empty for a list that was not interleaved), handed back on finalization.
    #[allow(clippy::too_many_arguments, reason = "one impression's fields, each a plain value")]
    pub fn offer_interleaved_impression(
        &mut self,
        query: QueryKey,
        timestamp: EventTime,
        group: GroupId,
        unit: u32,
        docs: &[DocKey],
        teams: &[u8],
        settings: &JoinSettings,
    ) -> ImpressionOutcome {
        if self.finalized_recently.contains(&query) {
            return ImpressionOutcome::Duplicate;
        }
        let deadline = timestamp.saturating_add(settings.attribution_window);
        if self.passed(deadline) {
            return ImpressionOutcome::Late;
        }
        if !self.pending.has_room(docs.len()) {
            return match self.pending.find(query) {
                Some(_) => ImpressionOutcome::Duplicate,
                None => ImpressionOutcome::StateFull,
            };
        }
        let Some(id) = self.pending.insert(query, timestamp, group, unit, docs, teams, settings.attribution_window)
        else {
            return ImpressionOutcome::Duplicate;
        };
        if let Some(held) = self.held.remove(&query) {
            self.held_changed = true;
            let mut still_held = Vec::new();
            for e in held {
                match attribute(self.pending.get_mut(id), e.timestamp, e.doc, e.gain, settings) {
                    // Too late even to be counted late: stays held and is orphaned, as it is
                    // when the impression comes first (see `attribute`).
                    EngagementOutcome::Held => still_held.push(e),
                    outcome => {
                        self.held_count -= 1;
                        self.tally.count(outcome);
                    }
                }
            }
            if !still_held.is_empty() {
                self.held.insert(query, still_held);
            }
            // The released ones' expiry entries stay in the heap and are skipped when they surface.
        }
        ImpressionOutcome::Pending
    }

    /// Offers an engagement with the gain of its action already looked up.
    pub fn offer_engagement(
        &mut self,
        query: QueryKey,
        identity: EngagementId,
        timestamp: EventTime,
        doc: DocKey,
        gain: u8,
        settings: &JoinSettings,
    ) -> EngagementOutcome {
        let outcome = if !self.seen_engagements.insert(identity, timestamp.saturating_add(settings.attribution_window))
        {
            EngagementOutcome::Duplicate
        } else if let Some(id) = self.pending.find(query) {
            attribute(self.pending.get_mut(id), timestamp, doc, gain, settings)
        } else if self.passed(timestamp) {
            EngagementOutcome::Late
        } else {
            // A recently finalized query is remembered until the watermark passes
            // deadline + attribution_window: exactly the span `attribute` counts as late.
            match self.finalized_recently.expires(&query) {
                Some(late_until) if timestamp <= late_until => EngagementOutcome::Late,
                _ => EngagementOutcome::Held,
            }
        };
        if outcome == EngagementOutcome::Held {
            self.held.entry(query).or_default().push(HeldEngagement { timestamp, doc, gain });
            self.held_expiry.push(timestamp, query);
            self.held_count += 1;
            self.held_changed = true;
        }
        self.tally.count(outcome);
        outcome
    }

    /// Raises the watermark (never lowers it) and finalizes every impression whose deadline it
    /// passed, in deadline order; held engagements it passed become orphans.
    pub fn advance(&mut self, watermark: EventTime, settings: &JoinSettings, mut on_final: impl FnMut(Finalized<'_>)) {
        if self.watermark.is_some_and(|w| w >= watermark) {
            return;
        }
        self.watermark = Some(watermark);
        // Everything due (the end of the input, a long idle gap): the index is emptied at once.
        let indexed = !self.pending.all_due_before(watermark, settings.attribution_window);
        if !indexed {
            self.pending.unindex_all();
        }
        while self.finalize_earliest(Some(watermark), indexed, settings, &mut on_final) {}
        while let Some((timestamp, query)) = self.held_expiry.peek() {
            if timestamp >= watermark {
                break;
            }
            self.held_expiry.pop();
            self.held_changed = true;
            if let Entry::Occupied(mut slot) = self.held.entry(query) {
                // Several engagements of one query may be held; expire only those passed.
                let list = slot.get_mut();
                let before = list.len();
                list.retain(|e| e.timestamp >= watermark);
                let expired = before - list.len();
                self.held_count -= expired;
                self.tally.orphaned += expired as u64;
                if list.is_empty() {
                    slot.remove();
                }
            }
        }
        self.seen_engagements.expire(watermark);
        self.finalized_recently.expire(watermark);
    }

    /// Finalizes the pending impression with the earliest deadline, if that deadline is before
    /// `limit` (or whatever it is, when `None`), and remembers its query; false if there is none.
    /// `indexed` is false while [`Shard::advance`] takes everything pending.
    ///
    /// The query is remembered until one more window has passed. When the watermark `limit`
    /// that finalizes it has passed that too, the same advance would forget it again: it is not
    /// remembered at all, which leaves the same state without growing the set.
    fn finalize_earliest(
        &mut self,
        limit: Option<EventTime>,
        indexed: bool,
        settings: &JoinSettings,
        on_final: &mut impl FnMut(Finalized<'_>),
    ) -> bool {
        let Some(p) = self.pending.take_earliest(
            settings.attribution_window,
            limit,
            indexed,
            &mut self.gains_scratch,
            &mut self.teams_scratch,
        ) else {
            return false;
        };
        let deadline = p.timestamp.saturating_add(settings.attribution_window);
        let forget_at = deadline.saturating_add(settings.attribution_window);
        if limit.is_none_or(|watermark| forget_at >= watermark) {
            self.finalized_recently.insert(p.query, forget_at);
        }
        on_final(Finalized {
            query: p.query,
            timestamp: p.timestamp,
            group: p.group,
            unit: p.unit,
            gains: &self.gains_scratch,
            teams: &self.teams_scratch,
            first_engagement_delay_ms: (p.first_engagement != NO_ENGAGEMENT).then(|| p.first_engagement - p.timestamp),
        });
        true
    }

    /// Finalizes the pending impression with the earliest deadline before its time, to bound
    /// memory. False if nothing is pending.
    pub fn evict_oldest_pending(&mut self, settings: &JoinSettings, mut on_final: impl FnMut(Finalized<'_>)) -> bool {
        self.finalize_earliest(None, true, settings, &mut on_final)
    }

    /// Drops the held engagement with the earliest timestamp, to bound memory.
    pub fn evict_oldest_held(&mut self) -> bool {
        while let Some((timestamp, query)) = self.held_expiry.pop() {
            self.held_changed = true;
            let Entry::Occupied(mut slot) = self.held.entry(query) else { continue };
            let list = slot.get_mut();
            let Some(i) = list.iter().position(|e| e.timestamp == timestamp) else { continue };
            list.swap_remove(i);
            if list.is_empty() {
                slot.remove();
            }
            self.held_count -= 1;
            self.tally.evicted += 1;
            return true;
        }
        false
    }

    /// Forgets the de-duplication key that would expire first, to bound memory.
    pub fn evict_oldest_dedup_key(&mut self) -> bool {
        // Engagement identities are the bulk; recently finalized queries go second.
        self.seen_engagements.forget_oldest() || self.finalized_recently.forget_oldest()
    }

    /// Forgets everything but the engagement counts (which are exported totals), after
    /// [`Shard::drain`], so the partition can start afresh elsewhere's offsets.
    pub fn reset_keeping_tally(&mut self) {
        *self = Shard { tally: self.tally, ..Shard::default() };
    }

    /// Finalizes everything pending and orphans everything held, as when the stream has ended.
    pub fn drain(&mut self, settings: &JoinSettings, on_final: impl FnMut(Finalized<'_>)) {
        self.advance(EventTime::MAX, settings, on_final);
    }
}

/// Applies one engagement to a pending impression: the attribution rule.
fn attribute(
    mut p: PendingMut<'_>,
    timestamp: EventTime,
    doc: DocKey,
    gain: u8,
    settings: &JoinSettings,
) -> EngagementOutcome {
    let shown_at = p.timestamp();
    if timestamp < shown_at {
        return EngagementOutcome::OutsideWindow;
    }
    // After the window, the outcome depends on the timestamps alone, never on whether the
    // impression is still pending when the engagement is read: that depends on how the two
    // topics' consumption interleaved, which differs between replicas and after a handover.
    // Within one more window it is late (as when the impression was already finalized and is
    // still remembered); beyond that it is held and orphaned (as when it was forgotten).
    // Saturating: a restored impression's timestamp is whatever its snapshot said.
    let after_window = timestamp.saturating_sub(shown_at).saturating_sub(settings.attribution_window);
    if after_window > settings.attribution_window {
        return EngagementOutcome::Held;
    }
    if after_window > 0 {
        return EngagementOutcome::Late;
    }
    // The first occurrence of a repeated result id is the one engaged with.
    if !p.raise_gain(doc, gain) {
        return EngagementOutcome::NotShown;
    }
    p.note_engagement(timestamp);
    EngagementOutcome::Attributed
}

#[cfg(test)]
impl Shard {
    /// The shard's parts for [`crate::engine::Engine::state_parts`].
    pub fn state_parts(&self) -> Vec<(&'static str, usize)> {
        let e = |b: Vec<u8>| b.len();
        vec![
            ("pending_n", self.pending.len()),
            ("held", e(postcard::to_stdvec(&self.held).unwrap())),
            ("held_expiry", e(postcard::to_stdvec(&self.held_expiry).unwrap())),
            ("seen", e(postcard::to_stdvec(&self.seen_engagements.record()).unwrap())),
            ("seen_n", self.seen_engagements.len()),
            ("finalized_recently", e(postcard::to_stdvec(&self.finalized_recently.record()).unwrap())),
            ("finalized_recently_n", self.finalized_recently.len()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SETTINGS: JoinSettings = JoinSettings { attribution_window: 100 };

    fn finalize(shard: &mut Shard, watermark: EventTime) -> Vec<(QueryKey, Vec<u8>)> {
        let mut out = Vec::new();
        shard.advance(watermark, &SETTINGS, |f| out.push((f.query, f.gains.to_vec())));
        out
    }

    /// Offers an engagement with an identity of its own (no redelivery).
    fn engage(s: &mut Shard, query: QueryKey, ts: EventTime, doc: DocKey, gain: u8) -> EngagementOutcome {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let identity = u128::from(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        s.offer_engagement(query, identity, ts, doc, gain, &SETTINGS)
    }

    #[test]
    fn an_engagement_after_the_window_counts_the_same_whatever_the_impression_state() {
        // Window 100: impression at 1000, deadline 1100, late until 1200, orphaned beyond.
        let outcomes = |engagement_first: bool, finalize_at: Option<EventTime>, ts: EventTime| {
            let mut s = Shard::default();
            if engagement_first {
                engage(&mut s, 1, ts, 10, 1);
            }
            s.offer_impression(1, 1000, 0, 0, &[10], &SETTINGS);
            if let Some(w) = finalize_at {
                s.advance(w, &SETTINGS, |_| {});
            }
            if !engagement_first {
                engage(&mut s, 1, ts, 10, 1);
            }
            s.drain(&SETTINGS, |_| {});
            (s.tally.late, s.tally.orphaned, s.tally.outside_window, s.tally.attributed)
        };
        for ts in [1101, 1150, 1200] {
            for order in [(true, None), (false, None), (false, Some(1101)), (false, Some(1150))] {
                assert_eq!(outcomes(order.0, order.1, ts), (1, 0, 0, 0), "late at {ts}, {order:?}");
            }
        }
        for ts in [1201, 1500] {
            for order in [(true, None), (false, None), (false, Some(1150)), (false, Some(1201))] {
                assert_eq!(outcomes(order.0, order.1, ts), (0, 1, 0, 0), "orphaned at {ts}, {order:?}");
            }
        }
    }

    #[test]
    fn engagements_within_the_window_set_the_largest_gain() {
        let mut s = Shard::default();
        assert_eq!(s.offer_impression(1, 1000, 0, 0, &[10, 20, 30], &SETTINGS), ImpressionOutcome::Pending);
        assert_eq!(engage(&mut s, 1, 1000, 20, 1), EngagementOutcome::Attributed);
        assert_eq!(engage(&mut s, 1, 1100, 20, 3), EngagementOutcome::Attributed);
        assert_eq!(engage(&mut s, 1, 1050, 20, 2), EngagementOutcome::Attributed);
        assert_eq!(engage(&mut s, 1, 1101, 30, 1), EngagementOutcome::Late, "after the window, impression open");
        assert_eq!(engage(&mut s, 1, 999, 30, 1), EngagementOutcome::OutsideWindow);
        assert_eq!(engage(&mut s, 1, 1010, 99, 1), EngagementOutcome::NotShown);
        assert!(finalize(&mut s, 1100).is_empty(), "deadline 1100 not yet passed");
        assert_eq!(finalize(&mut s, 1101), vec![(1, vec![0, 3, 0])]);
    }

    #[test]
    fn an_impression_at_the_edge_of_time_does_not_overflow_attribution() {
        // Found by the hostile-input review: a restored impression can carry any timestamp, and
        // `timestamp - shown_at - window` overflowed (a panic in debug builds, a wrap to
        // "attributed" in release).
        let mut s = Shard::default();
        s.offer_impression(1, EventTime::MIN, 0, 0, &[10], &SETTINGS);
        assert_eq!(engage(&mut s, 1, 1_700_000_000_000, 10, 1), EngagementOutcome::Held);
        s.offer_impression(2, 0, 0, 0, &[10], &SETTINGS);
        assert_eq!(engage(&mut s, 2, EventTime::MAX, 10, 1), EngagementOutcome::Held);
    }

    #[test]
    fn a_restored_shard_is_checked_against_its_bookkeeping() {
        let mut s = Shard::default();
        engage(&mut s, 7, 1020, 20, 2);
        s.offer_impression(8, 1000, 0, 0, &[10, 20], &SETTINGS);
        assert_eq!(s.check(&SETTINGS), Ok(()));
        let bytes = postcard::to_stdvec(&s.record()).unwrap();
        let restored = Shard::from_record(postcard::from_bytes(&bytes).unwrap());
        assert_eq!(restored.check(&SETTINGS), Ok(()));
        // The held count is kept, not recounted: one that disagrees would underflow the state
        // size accounting (the snapshot entry point's varint sweep, tests/hostile_input.rs).
        s.held_count = usize::MAX;
        assert_eq!(
            s.check(&SETTINGS),
            Err(Inconsistency::Recount { what: "held engagements", found: 1, kept: usize::MAX })
        );
    }

    #[test]
    fn engagement_before_its_impression_is_held_then_attributed() {
        let mut s = Shard::default();
        assert_eq!(engage(&mut s, 7, 1020, 20, 2), EngagementOutcome::Held);
        assert_eq!(s.held_len(), 1);
        s.offer_impression(7, 1000, 0, 0, &[10, 20], &SETTINGS);
        assert_eq!((s.held_len(), s.tally.attributed), (0, 1));
        assert_eq!(finalize(&mut s, 2000), vec![(7, vec![0, 2])]);
        assert_eq!(s.tally.orphaned, 0, "the stale expiry entry must not orphan anything");
    }

    #[test]
    fn held_engagement_without_impression_is_orphaned_once_the_watermark_passes_it() {
        let mut s = Shard::default();
        engage(&mut s, 7, 1020, 20, 1);
        engage(&mut s, 7, 1500, 20, 1);
        finalize(&mut s, 1020);
        assert_eq!((s.tally.orphaned, s.held_len()), (0, 2));
        finalize(&mut s, 1021);
        assert_eq!((s.tally.orphaned, s.held_len()), (1, 1));
        s.drain(&SETTINGS, |_| {});
        assert_eq!((s.tally.orphaned, s.held_len()), (2, 0));
    }

    #[test]
    fn late_duplicate_and_post_finalization_events() {
        let mut s = Shard::default();
        s.offer_impression(1, 1000, 0, 0, &[10], &SETTINGS);
        assert_eq!(s.offer_impression(1, 1001, 0, 0, &[11], &SETTINGS), ImpressionOutcome::Duplicate);
        assert_eq!(finalize(&mut s, 1101).len(), 1);
        // The watermark is past 1100: an engagement for the finalized impression is late.
        assert_eq!(engage(&mut s, 1, 1050, 10, 1), EngagementOutcome::Late);
        // An impression whose deadline the watermark passed is late; one that can still close is not.
        assert_eq!(s.offer_impression(2, 1000, 0, 0, &[10], &SETTINGS), ImpressionOutcome::Late);
        assert_eq!(s.offer_impression(3, 1001, 0, 0, &[10], &SETTINGS), ImpressionOutcome::Pending);
        assert_eq!(s.tally.late, 1);
    }

    #[test]
    fn the_watermark_never_moves_back() {
        let mut s = Shard::default();
        s.offer_impression(1, 1000, 0, 0, &[10], &SETTINGS);
        finalize(&mut s, 1050);
        finalize(&mut s, 10);
        assert_eq!(s.watermark(), Some(1050));
        assert_eq!(engage(&mut s, 1, 1060, 10, 1), EngagementOutcome::Attributed);
    }

    #[test]
    fn repeated_result_ids_take_gain_at_their_first_rank() {
        let mut s = Shard::default();
        s.offer_impression(1, 0, 0, 0, &[10, 20, 10], &SETTINGS);
        engage(&mut s, 1, 5, 10, 1);
        assert_eq!(finalize(&mut s, 1000), vec![(1, vec![1, 0, 0])]);
    }

    #[test]
    fn redelivered_engagements_and_impressions_count_once() {
        let mut s = Shard::default();
        s.offer_impression(1, 1000, 0, 0, &[10, 20], &SETTINGS);
        assert_eq!(s.offer_engagement(1, 77, 1010, 20, 1, &SETTINGS), EngagementOutcome::Attributed);
        assert_eq!(s.offer_engagement(1, 77, 1010, 20, 1, &SETTINGS), EngagementOutcome::Duplicate);
        // Held engagements are de-duplicated too.
        assert_eq!(s.offer_engagement(2, 88, 1500, 20, 1, &SETTINGS), EngagementOutcome::Held);
        assert_eq!(s.offer_engagement(2, 88, 1500, 20, 1, &SETTINGS), EngagementOutcome::Duplicate);
        assert_eq!(s.held_len(), 1);
        assert_eq!(finalize(&mut s, 1101), vec![(1, vec![0, 1])]);
        // After finalization the query is remembered for one more window: a redelivered
        // impression is a duplicate, not a new search, and its engagements are late, not held.
        assert_eq!(s.offer_impression(1, 1000, 0, 0, &[10, 20], &SETTINGS), ImpressionOutcome::Duplicate);
        assert_eq!(engage(&mut s, 1, 1200, 20, 1), EngagementOutcome::Late);
        assert_eq!((s.tally.duplicate, s.tally.attributed), (2, 1));
        // Both memories expire once the watermark passes another attribution window.
        finalize(&mut s, 1201 + 100);
        assert_eq!(s.offer_impression(1, 1400, 0, 0, &[10], &SETTINGS), ImpressionOutcome::Pending);
    }

    /// A finalized impression as a test sees it: query, timestamp, group, unit, gains, delay.
    type FinalizedRow = (QueryKey, EventTime, GroupId, u32, Vec<u8>, Option<i64>);

    /// Everything a shard reports while fed: outcomes, finalized impressions, tally, sizes.
    #[derive(Debug, PartialEq)]
    struct Observed {
        /// Every impression and engagement outcome, in order.
        outcomes: Vec<String>,
        /// Every finalized impression, in order.
        finalized: Vec<FinalizedRow>,
        /// The engagement counts at the end.
        tally: EngagementTally,
        /// Pending, held and de-duplication sizes at the end.
        sizes: (usize, usize, usize),
    }

    /// Feeds a shard a mix of events from time `start` (new impressions, engagements for them and
    /// for the queries `0..40` and `500..540`, impressions for the latter, duplicates, late ones,
    /// evictions, watermark advances), then drains it.
    fn feed(s: &mut Shard, start: EventTime) -> Observed {
        let mut o = Observed {
            outcomes: Vec::new(),
            finalized: Vec::new(),
            tally: EngagementTally::default(),
            sizes: (0, 0, 0),
        };
        let mut record = |f: Finalized<'_>| {
            o.finalized.push((f.query, f.timestamp, f.group, f.unit, f.gains.to_vec(), f.first_engagement_delay_ms))
        };
        for i in 0..120u64 {
            let t = start + (i as i64 * 7) % 150;
            let (q, docs) = (u128::from(i % 45) + 1000, [i % 5, i % 3, 7]);
            let outcome = match i % 6 {
                0 => format!("{:?}", s.offer_impression(q, t, (i % 3) as u32, i as u32, &docs, &SETTINGS)),
                1 => format!("{:?}", s.offer_engagement(q, u128::from(i), t + 5, i % 5, (i % 4) as u8, &SETTINGS)),
                2 => format!("{:?}", s.offer_engagement(u128::from(i % 40), u128::from(i), t - 60, 3, 3, &SETTINGS)),
                3 => format!("{:?}", s.offer_impression(u128::from(i % 40) + 500, t - 70, 1, 1, &[3, 4], &SETTINGS)),
                4 => format!("{:?}", s.offer_engagement(q, u128::from(i % 7), t, 7, 2, &SETTINGS)),
                _ => {
                    s.evict_oldest_pending(&SETTINGS, &mut record);
                    s.evict_oldest_held();
                    s.evict_oldest_dedup_key();
                    s.advance(start + i as i64 - 40, &SETTINGS, &mut record);
                    continue;
                }
            };
            o.outcomes.push(outcome);
        }
        s.drain(&SETTINGS, &mut record);
        o.tally = s.tally;
        o.sizes = (s.pending_len(), s.held_len(), s.dedup_len());
        o
    }

    #[test]
    fn a_checkpointed_shard_behaves_exactly_like_the_original() {
        let mut original = Shard::default();
        // Pending impressions (engaged and not), held engagements, an evicted impression and
        // held engagement, de-duplication memory; then a checkpoint.
        for q in 0..40u128 {
            let t = 5000 + (q as i64 * 37) % 90;
            original.offer_impression(q, t, 1, q as u32, &[q as u64, 3, 9], &SETTINGS);
            original.offer_engagement(q, 10_000 + q, t + 3, 3, 2, &SETTINGS);
            original.offer_engagement(q + 500, 20_000 + q, 5080 + q as i64, 4, 1, &SETTINGS);
        }
        let mut evicted = Vec::new();
        assert!(original.evict_oldest_pending(&SETTINGS, |f| evicted.push(f.query)));
        assert!(original.evict_oldest_held());
        original.advance(5030, &SETTINGS, |f| evicted.push(f.query));
        assert!(original.pending_len() > 20 && original.held_len() > 20 && original.tally.evicted == 1);
        assert!(evicted.len() == 1 && original.dedup_len() > 40);
        let bytes = postcard::to_stdvec(&original.record()).unwrap();
        let mut restored = Shard::from_record(postcard::from_bytes(&bytes).unwrap());
        assert_eq!(
            (restored.pending_len(), restored.held_len(), restored.dedup_len(), restored.watermark()),
            (original.pending_len(), original.held_len(), original.dedup_len(), original.watermark())
        );
        let (a, b) = (feed(&mut restored, 5040), feed(&mut original, 5040));
        assert!(a.finalized.len() > 60 && a.tally.attributed > 40 && a.tally.orphaned > 0, "{a:?}");
        assert_eq!(a, b);
    }

    #[test]
    fn a_watermark_jump_leaves_the_state_that_steps_to_it_leave() {
        // One advance past many deadlines takes shortcuts: it does not remember queries it would
        // forget again at once, and when everything is due or expired it empties the index and
        // the de-duplication memory at once. Steps of one millisecond take none of them (but for
        // the last steps, when everything left is due).
        let populated = || {
            let mut s = Shard::default();
            for q in 0..60u128 {
                let t = 5000 + (q as i64 * 37) % 300;
                s.offer_impression(q, t, 1, q as u32, &[q as u64, 3, 9], &SETTINGS);
                s.offer_engagement(q, 10_000 + q, t + 3, 3, 2, &SETTINGS);
                s.offer_engagement(q + 500, 20_000 + q, 5080 + q as i64, 4, 1, &SETTINGS);
            }
            postcard::to_stdvec(&s.record()).unwrap()
        };
        let bytes = populated();
        // Past some deadlines and forget times but not all; past every forget time.
        for jump_to in [5250, 5600] {
            let restore = || Shard::from_record(postcard::from_bytes(&bytes).unwrap());
            let (mut jumped, mut stepped) = (restore(), restore());
            let (mut by_jump, mut by_steps) = (Vec::new(), Vec::new());
            jumped.advance(jump_to, &SETTINGS, |f| by_jump.push((f.query, f.gains.to_vec())));
            for w in 5000..=jump_to {
                stepped.advance(w, &SETTINGS, |f| by_steps.push((f.query, f.gains.to_vec())));
            }
            assert!(by_jump.len() > 10, "{jump_to}: {}", by_jump.len());
            assert_eq!(by_jump, by_steps, "{jump_to}");
            let sizes = |s: &Shard| (s.pending_len(), s.held_len(), s.dedup_len(), s.tally);
            assert_eq!(sizes(&jumped), sizes(&stepped), "{jump_to}");
            // Queries and engagement ids remembered, or forgotten, alike: the same events after
            // (redelivered impressions and engagements among them) are treated alike.
            let (a, b) = (feed(&mut jumped, jump_to - 100), feed(&mut stepped, jump_to - 100));
            assert!(a.outcomes.iter().any(|o| o == "Duplicate") || jump_to == 5600, "{a:?}");
            assert_eq!(a, b, "{jump_to}");
        }
    }

    #[test]
    fn eviction_finalizes_the_earliest_deadline_and_drops_the_oldest_held() {
        let mut s = Shard::default();
        s.offer_impression(2, 2000, 0, 0, &[10], &SETTINGS);
        s.offer_impression(1, 1000, 0, 0, &[10], &SETTINGS);
        engage(&mut s, 1, 1001, 10, 3);
        let mut evicted = Vec::new();
        assert!(s.evict_oldest_pending(&SETTINGS, |f| evicted.push((f.query, f.gains.to_vec()))));
        assert_eq!((evicted, s.pending_len()), (vec![(1, vec![3])], 1));
        engage(&mut s, 9, 5000, 10, 1);
        engage(&mut s, 8, 4000, 10, 1);
        assert!(s.evict_oldest_held());
        assert_eq!((s.held_len(), s.tally.evicted), (1, 1));
        // The survivor is the later one: an impression for query 9 still finds it.
        s.offer_impression(9, 4990, 0, 0, &[10], &SETTINGS);
        assert_eq!(s.tally.attributed, 2);
    }

    #[test]
    fn a_shard_whose_records_fill_their_id_space_asks_for_an_eviction() {
        let mut s = Shard::default();
        s.pending.limit_chunks(1);
        // 1,000-result records: 16 fit in one 128 KiB chunk.
        let docs: Vec<DocKey> = (0..1000).collect();
        let mut query = 0;
        while s.offer_impression(query, 1000 + query as i64, 0, 0, &docs, &SETTINGS) == ImpressionOutcome::Pending {
            query += 1;
        }
        assert_eq!((query, s.pending_len()), (16, 16));
        assert_eq!(s.offer_impression(query, 2000, 0, 0, &docs, &SETTINGS), ImpressionOutcome::StateFull);
        // A duplicate is still a duplicate when there is no room.
        assert_eq!(s.offer_impression(3, 2000, 0, 0, &docs, &SETTINGS), ImpressionOutcome::Duplicate);
        let mut evicted = Vec::new();
        assert!(s.evict_oldest_pending(&SETTINGS, |f| evicted.push(f.query)));
        assert_eq!(evicted, vec![0]);
        assert_eq!(s.offer_impression(query, 2000, 0, 0, &docs, &SETTINGS), ImpressionOutcome::Pending);
    }
}
