//! The attribution join on event time, for one shard (one Kafka partition number, shared by the
//! co-partitioned impressions and engagements topics).
//!
//! State is keyed by time and expired by the watermark: pending impressions wait in a
//! deadline-ordered heap until the watermark passes `timestamp + attribution_window`;
//! engagements that arrive before their impression wait in a second heap until the watermark
//! passes their own timestamp, after which no impression they could belong to can still be
//! accepted, and they are orphaned. The watermark itself is computed by the engine (it needs
//! every shard to handle idleness); a shard only records what its inputs have seen.
//!
//! The rules, each in one place:
//! * an impression is *late* (dropped, counted) when the watermark already passed its deadline;
//! * an impression whose query is already pending is a *duplicate* (the first counts);
//! * an engagement with a pending impression is attributed when its timestamp lies in
//!   [impression, impression + window], else it is *outside the window*; when its document is not
//!   in the result list it is *not shown*; neither changes any gain;
//! * an engagement without a pending impression is *late* when the watermark passed its
//!   timestamp, else it is *held* until its impression arrives or the watermark passes it
//!   (*orphaned*).

use std::cmp::Reverse;
use std::collections::hash_map::Entry;
use std::collections::{BinaryHeap, HashMap};
use std::time::{Duration, Instant};

use crate::accumulate::GroupId;
use crate::event::{DocKey, EventKind, QueryKey};
use crate::time::EventTime;

/// Event-time rules of the join, in milliseconds.
#[derive(Debug, Clone, Copy)]
pub struct JoinSettings {
    pub attribution_window: i64,
    pub max_out_of_orderness: i64,
    pub idle_timeout: Duration,
}

/// What one input (a topic partition) has delivered so far; the engine derives watermarks
/// from these.
#[derive(Debug, Clone, Copy, Default)]
pub struct InputClock {
    /// Largest event time delivered; `None` before the first event.
    pub max_event_time: Option<EventTime>,
    /// When the input last delivered anything, valid or not: a partition carrying only rejects
    /// is still alive.
    pub last_active: Option<Instant>,
}

impl InputClock {
    pub fn is_active(&self, now: Instant, idle_timeout: Duration) -> bool {
        self.last_active.is_some_and(|t| now.saturating_duration_since(t) < idle_timeout)
    }
}

/// An impression waiting for its attribution window to close.
#[derive(Debug)]
struct PendingImpression {
    timestamp: EventTime,
    group: GroupId,
    /// Result ids in rank order.
    docs: Box<[DocKey]>,
    /// Gain per rank: the largest gain of any attributed engagement on that result.
    gains: Box<[u8]>,
    /// Timestamp of the earliest attributed engagement on a shown result, for the delay histogram.
    first_engagement: Option<EventTime>,
}

/// An engagement that arrived before its impression.
#[derive(Debug, Clone, Copy)]
struct HeldEngagement {
    timestamp: EventTime,
    doc: DocKey,
    gain: u8,
}

/// What happened to an impression offered to the join.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImpressionOutcome {
    Pending,
    Duplicate,
    Late,
}

/// What happened to an engagement offered to the join (or released from holding).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngagementOutcome {
    Attributed,
    NotShown,
    OutsideWindow,
    Held,
    Late,
}

/// Per-outcome counts of engagements, so that held engagements released by an arriving
/// impression are counted exactly like direct ones.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct EngagementTally {
    pub attributed: u64,
    pub not_shown: u64,
    pub outside_window: u64,
    pub late: u64,
    pub orphaned: u64,
}

impl EngagementTally {
    fn count(&mut self, outcome: EngagementOutcome) {
        match outcome {
            EngagementOutcome::Attributed => self.attributed += 1,
            EngagementOutcome::NotShown => self.not_shown += 1,
            EngagementOutcome::OutsideWindow => self.outside_window += 1,
            EngagementOutcome::Late => self.late += 1,
            EngagementOutcome::Held => {}
        }
    }
}

/// A finalized impression, handed to the accumulators.
#[derive(Debug)]
pub struct Finalized<'a> {
    pub query: QueryKey,
    pub timestamp: EventTime,
    pub group: GroupId,
    pub gains: &'a [u8],
    pub first_engagement_delay_ms: Option<i64>,
}

/// Join state of one shard.
#[derive(Debug, Default)]
pub struct Shard {
    pending: HashMap<QueryKey, PendingImpression>,
    /// (deadline, query) of every pending impression, earliest deadline first.
    deadlines: BinaryHeap<Reverse<(EventTime, QueryKey)>>,
    held: HashMap<QueryKey, Vec<HeldEngagement>>,
    /// (timestamp, query) of every held engagement, earliest first.
    held_expiry: BinaryHeap<Reverse<(EventTime, QueryKey)>>,
    held_count: usize,
    /// One clock per input kind (impressions, engagements).
    pub inputs: [InputClock; 2],
    /// This shard's watermark: no event behind it can still change an open impression.
    watermark: Option<EventTime>,
    pub tally: EngagementTally,
}

impl Shard {
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }
    pub fn held_len(&self) -> usize {
        self.held_count
    }
    pub fn watermark(&self) -> Option<EventTime> {
        self.watermark
    }

    /// Records that an input delivered a message (with its event time, when it had a valid one).
    pub fn observe(&mut self, kind: EventKind, event_time: Option<EventTime>, now: Instant) {
        let clock = &mut self.inputs[kind.index()];
        clock.last_active = Some(now);
        if let Some(t) = event_time {
            clock.max_event_time = Some(clock.max_event_time.map_or(t, |m| m.max(t)));
        }
    }

    fn passed(&self, t: EventTime) -> bool {
        self.watermark.is_some_and(|w| w > t)
    }

    /// Offers an impression. On acceptance, engagements held for it are attributed.
    pub fn offer_impression(
        &mut self,
        query: QueryKey,
        timestamp: EventTime,
        group: GroupId,
        docs: &[DocKey],
        settings: &JoinSettings,
    ) -> ImpressionOutcome {
        let deadline = timestamp.saturating_add(settings.attribution_window);
        if self.passed(deadline) {
            return ImpressionOutcome::Late;
        }
        let impression = match self.pending.entry(query) {
            Entry::Occupied(_) => return ImpressionOutcome::Duplicate,
            Entry::Vacant(slot) => slot.insert(PendingImpression {
                timestamp,
                group,
                docs: docs.into(),
                gains: vec![0; docs.len()].into_boxed_slice(),
                first_engagement: None,
            }),
        };
        self.deadlines.push(Reverse((deadline, query)));
        if let Some(held) = self.held.remove(&query) {
            self.held_count -= held.len();
            for e in held {
                let outcome = attribute(impression, e.timestamp, e.doc, e.gain, settings);
                self.tally.count(outcome);
            }
            // Their expiry entries stay in the heap and are skipped when they surface.
        }
        ImpressionOutcome::Pending
    }

    /// Offers an engagement with the gain of its action already looked up.
    pub fn offer_engagement(
        &mut self,
        query: QueryKey,
        timestamp: EventTime,
        doc: DocKey,
        gain: u8,
        settings: &JoinSettings,
    ) -> EngagementOutcome {
        let outcome = if let Some(impression) = self.pending.get_mut(&query) {
            attribute(impression, timestamp, doc, gain, settings)
        } else if self.passed(timestamp) {
            EngagementOutcome::Late
        } else {
            self.held.entry(query).or_default().push(HeldEngagement { timestamp, doc, gain });
            self.held_expiry.push(Reverse((timestamp, query)));
            self.held_count += 1;
            EngagementOutcome::Held
        };
        self.tally.count(outcome);
        outcome
    }

    /// Raises the watermark (never lowers it) and finalizes every impression whose deadline it
    /// passed, in deadline order; held engagements it passed become orphans.
    pub fn advance(&mut self, watermark: EventTime, mut on_final: impl FnMut(Finalized<'_>)) {
        if self.watermark.is_some_and(|w| w >= watermark) {
            return;
        }
        self.watermark = Some(watermark);
        while let Some(&Reverse((deadline, query))) = self.deadlines.peek() {
            if deadline >= watermark {
                break;
            }
            self.deadlines.pop();
            if let Some(p) = self.pending.remove(&query) {
                on_final(Finalized {
                    query,
                    timestamp: p.timestamp,
                    group: p.group,
                    gains: &p.gains,
                    first_engagement_delay_ms: p.first_engagement.map(|t| t - p.timestamp),
                });
            }
        }
        while let Some(&Reverse((timestamp, query))) = self.held_expiry.peek() {
            if timestamp >= watermark {
                break;
            }
            self.held_expiry.pop();
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
    }

    /// Finalizes everything pending and orphans everything held, as when the stream has ended.
    pub fn drain(&mut self, on_final: impl FnMut(Finalized<'_>)) {
        self.advance(EventTime::MAX, on_final);
    }
}

/// Applies one engagement to a pending impression: the attribution rule.
fn attribute(
    p: &mut PendingImpression,
    timestamp: EventTime,
    doc: DocKey,
    gain: u8,
    settings: &JoinSettings,
) -> EngagementOutcome {
    if timestamp < p.timestamp || timestamp - p.timestamp > settings.attribution_window {
        return EngagementOutcome::OutsideWindow;
    }
    // The first occurrence of a repeated result id is the one engaged with.
    let Some(rank) = p.docs.iter().position(|&d| d == doc) else {
        return EngagementOutcome::NotShown;
    };
    p.gains[rank] = p.gains[rank].max(gain);
    p.first_engagement = Some(p.first_engagement.map_or(timestamp, |f| f.min(timestamp)));
    EngagementOutcome::Attributed
}

#[cfg(test)]
mod tests {
    use super::*;

    const SETTINGS: JoinSettings =
        JoinSettings { attribution_window: 100, max_out_of_orderness: 0, idle_timeout: Duration::from_secs(1) };

    fn finalize(shard: &mut Shard, watermark: EventTime) -> Vec<(QueryKey, Vec<u8>)> {
        let mut out = Vec::new();
        shard.advance(watermark, |f| out.push((f.query, f.gains.to_vec())));
        out
    }

    #[test]
    fn engagements_within_the_window_set_the_largest_gain() {
        let mut s = Shard::default();
        assert_eq!(s.offer_impression(1, 1000, 0, &[10, 20, 30], &SETTINGS), ImpressionOutcome::Pending);
        assert_eq!(s.offer_engagement(1, 1000, 20, 1, &SETTINGS), EngagementOutcome::Attributed);
        assert_eq!(s.offer_engagement(1, 1100, 20, 3, &SETTINGS), EngagementOutcome::Attributed);
        assert_eq!(s.offer_engagement(1, 1050, 20, 2, &SETTINGS), EngagementOutcome::Attributed);
        assert_eq!(s.offer_engagement(1, 1101, 30, 1, &SETTINGS), EngagementOutcome::OutsideWindow);
        assert_eq!(s.offer_engagement(1, 999, 30, 1, &SETTINGS), EngagementOutcome::OutsideWindow);
        assert_eq!(s.offer_engagement(1, 1010, 99, 1, &SETTINGS), EngagementOutcome::NotShown);
        assert!(finalize(&mut s, 1100).is_empty(), "deadline 1100 not yet passed");
        assert_eq!(finalize(&mut s, 1101), vec![(1, vec![0, 3, 0])]);
    }

    #[test]
    fn engagement_before_its_impression_is_held_then_attributed() {
        let mut s = Shard::default();
        assert_eq!(s.offer_engagement(7, 1020, 20, 2, &SETTINGS), EngagementOutcome::Held);
        assert_eq!(s.held_len(), 1);
        s.offer_impression(7, 1000, 0, &[10, 20], &SETTINGS);
        assert_eq!((s.held_len(), s.tally.attributed), (0, 1));
        assert_eq!(finalize(&mut s, 2000), vec![(7, vec![0, 2])]);
        assert_eq!(s.tally.orphaned, 0, "the stale expiry entry must not orphan anything");
    }

    #[test]
    fn held_engagement_without_impression_is_orphaned_once_the_watermark_passes_it() {
        let mut s = Shard::default();
        s.offer_engagement(7, 1020, 20, 1, &SETTINGS);
        s.offer_engagement(7, 1500, 20, 1, &SETTINGS);
        finalize(&mut s, 1020);
        assert_eq!((s.tally.orphaned, s.held_len()), (0, 2));
        finalize(&mut s, 1021);
        assert_eq!((s.tally.orphaned, s.held_len()), (1, 1));
        s.drain(|_| {});
        assert_eq!((s.tally.orphaned, s.held_len()), (2, 0));
    }

    #[test]
    fn late_duplicate_and_post_finalization_events() {
        let mut s = Shard::default();
        s.offer_impression(1, 1000, 0, &[10], &SETTINGS);
        assert_eq!(s.offer_impression(1, 1001, 0, &[11], &SETTINGS), ImpressionOutcome::Duplicate);
        assert_eq!(finalize(&mut s, 1101).len(), 1);
        // The watermark is past 1100: an engagement for the finalized impression is late.
        assert_eq!(s.offer_engagement(1, 1050, 10, 1, &SETTINGS), EngagementOutcome::Late);
        // An impression whose deadline the watermark passed is late; one that can still close is not.
        assert_eq!(s.offer_impression(2, 1000, 0, &[10], &SETTINGS), ImpressionOutcome::Late);
        assert_eq!(s.offer_impression(3, 1001, 0, &[10], &SETTINGS), ImpressionOutcome::Pending);
        assert_eq!(s.tally.late, 1);
    }

    #[test]
    fn the_watermark_never_moves_back() {
        let mut s = Shard::default();
        s.offer_impression(1, 1000, 0, &[10], &SETTINGS);
        finalize(&mut s, 1050);
        finalize(&mut s, 10);
        assert_eq!(s.watermark(), Some(1050));
        assert_eq!(s.offer_engagement(1, 1060, 10, 1, &SETTINGS), EngagementOutcome::Attributed);
    }

    #[test]
    fn repeated_result_ids_take_gain_at_their_first_rank() {
        let mut s = Shard::default();
        s.offer_impression(1, 0, 0, &[10, 20, 10], &SETTINGS);
        s.offer_engagement(1, 5, 10, 1, &SETTINGS);
        assert_eq!(finalize(&mut s, 1000), vec![(1, vec![1, 0, 0])]);
    }
}
