//! The order in which the stage forwards what it read: the raw partitions merged on event time
//! while any of them is catching up on a backlog ([`Merge`]).
//!
//! Why: an internal partition mixes the events of every raw partition, and the join's watermark
//! on it (the least progress of its two inputs, `engine::watermark`) assumes they arrive in
//! event-time order to within `join.max_out_of_orderness`. Live, the raw partitions advance
//! together, and forwarding in arrival order keeps that. From a backlog it did not: the consumer
//! hands over one raw partition's fetched batch (up to `max.partition.fetch.bytes`, minutes of
//! event time) before the next one's, so forwarded as it came, an internal partition's event
//! time jumped ahead by that span, its watermark passed the other raw partitions' unread events,
//! and they were counted late (impressions) or orphaned (engagements held for an impression
//! still unread).
//!
//! So, as a Kafka Streams task picks the record with the least timestamp among its partitions'
//! buffered heads, the stage queues what it reads per raw partition (a *lane*) and forwards the
//! head with the least event time, but not while a lane that is *catching up* is empty: its next
//! message may be older. A lane catches up while its next offset is below the end its partition
//! had when it was assigned (unknown ends count as not reached). A lane that has caught up never
//! holds the others back: what it reads next is new traffic, which is the live case, forwarded
//! as it comes. A lane catching up that reads nothing for `max_stall` (its leader is down) is
//! given up on, so one partition cannot halt the rest; its events may then arrive behind the
//! watermark, as after any stall of the stage.
//!
//! Pure: no client, no clock (`now` is passed in); the stage does the Kafka side.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use crate::time::EventTime;

/// A raw partition: (input kind index, partition number), as the stage's offsets are keyed.
pub(super) type Source = (usize, i32);

/// One message read from a raw partition, waiting to be forwarded.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Entry<T> {
    /// Its offset: committed once it is forwarded.
    pub offset: i64,
    /// Its decoded event time; `None` for a message that was rejected, which goes nowhere and
    /// so waits for nothing.
    pub event_time: Option<EventTime>,
    /// What is forwarded.
    pub item: T,
}

/// What has been read of one raw partition and not yet forwarded.
#[derive(Debug)]
struct Lane<T> {
    /// Read, in offset order.
    queue: VecDeque<Entry<T>>,
    /// The offset after the newest message read (or where reading starts); `None` until known.
    next: Option<i64>,
    /// The partition's end offset when it was assigned; `None` until known.
    end: Option<i64>,
    /// Since when, empty and catching up, it has held back another lane's head: for `max_stall`.
    holding_since: Option<Instant>,
    /// Whether the stage paused fetching it because its queue is full.
    paused: bool,
}

impl<T> Lane<T> {
    fn new() -> Self {
        Lane { queue: VecDeque::new(), next: None, end: None, holding_since: None, paused: false }
    }

    /// Whether it may still read messages older than the other lanes' heads.
    fn catching_up(&self) -> bool {
        match (self.next, self.end) {
            (Some(next), Some(end)) => next < end,
            _ => true,
        }
    }
}

/// A change of a lane's fetching the stage applies to its consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fetch {
    Pause(Source),
    Resume(Source),
}

/// The lanes of the raw partitions the stage is assigned. See the module documentation.
#[derive(Debug)]
pub(super) struct Merge<T> {
    /// Per raw partition.
    lanes: BTreeMap<Source, Lane<T>>,
    /// How long an empty lane catching up may hold the others back.
    max_stall: Duration,
    /// A lane with this many messages queued is paused: bounds the memory a backlog takes.
    pause_at: usize,
    /// Lanes given up on since the stage last asked, for its log.
    given_up: Vec<Source>,
}

impl<T> Merge<T> {
    pub fn new(max_stall: Duration, pause_at: usize) -> Self {
        Merge { lanes: BTreeMap::new(), max_stall, pause_at: pause_at.max(1), given_up: Vec::new() }
    }

    /// A newly assigned raw partition: catching up until its bounds are known.
    pub fn assign(&mut self, source: Source) {
        self.lanes.insert(source, Lane::new());
    }

    /// A revoked raw partition: what was read of it and not forwarded is dropped (its offsets
    /// were not committed, so its next owner reads it again). Whether it was paused.
    pub fn revoke(&mut self, source: Source) -> bool {
        self.lanes.remove(&source).is_some_and(|lane| lane.paused)
    }

    /// The lanes whose end is not known yet, for the stage to look up.
    pub fn unbounded(&self) -> Vec<Source> {
        self.lanes.iter().filter(|(_, lane)| lane.end.is_none()).map(|(source, _)| *source).collect()
    }

    /// Where reading a lane starts, if nothing was read of it yet, and its partition's end. A
    /// partition revoked meanwhile gets no lane: an empty one would hold the others back.
    pub fn set_bounds(&mut self, source: Source, start: i64, end: i64) {
        if let Some(lane) = self.lanes.get_mut(&source) {
            lane.end = Some(end);
            lane.next.get_or_insert(start);
        }
    }

    /// Queues a message read from `source` (a lane is made for a partition not seen assigned:
    /// nothing read is ever dropped); says whether to pause it.
    pub fn push(&mut self, source: Source, entry: Entry<T>) -> Option<Fetch> {
        let lane = self.lanes.entry(source).or_insert_with(Lane::new);
        lane.next = Some(entry.offset.saturating_add(1));
        lane.holding_since = None;
        lane.queue.push_back(entry);
        (!lane.paused && lane.queue.len() >= self.pause_at).then(|| {
            lane.paused = true;
            Fetch::Pause(source)
        })
    }

    /// The next message to forward at `now`, if one may go, and a lane to resume.
    pub fn pop(&mut self, now: Instant) -> Option<(Source, Entry<T>, Option<Fetch>)> {
        // A rejected head first (it waits for nothing), then the least event time.
        let (source, event_time) = self
            .lanes
            .iter()
            .filter_map(|(source, lane)| lane.queue.front().map(|head| (*source, head.event_time)))
            .min_by_key(|(_, t)| t.map_or((0, 0), |t| (1, t)))?;
        if event_time.is_some() && self.held_back(now) {
            return None;
        }
        let lane = self.lanes.get_mut(&source)?;
        let entry = lane.queue.pop_front()?;
        let resume = (lane.paused && lane.queue.len() <= self.pause_at / 2).then(|| {
            lane.paused = false;
            Fetch::Resume(source)
        });
        Some((source, entry, resume))
    }

    /// Whether an empty lane catching up holds the heads back; one that has done so for
    /// `max_stall` is given up on (counted as caught up) instead.
    fn held_back(&mut self, now: Instant) -> bool {
        let mut held = false;
        for (source, lane) in &mut self.lanes {
            if !lane.queue.is_empty() || !lane.catching_up() {
                continue;
            }
            let since = *lane.holding_since.get_or_insert(now);
            if now.saturating_duration_since(since) < self.max_stall {
                held = true;
            } else {
                lane.end = lane.next.or(Some(0));
                lane.next = lane.end;
                lane.holding_since = None;
                self.given_up.push(*source);
            }
        }
        held
    }

    /// The lanes given up on since the last call.
    pub fn take_given_up(&mut self) -> Vec<Source> {
        std::mem::take(&mut self.given_up)
    }

    /// Messages queued in every lane.
    #[cfg(test)]
    fn queued(&self) -> usize {
        self.lanes.values().map(|lane| lane.queue.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IMP: usize = 0;
    const ENG: usize = 1;

    fn entry(offset: i64, t: i64) -> Entry<i64> {
        Entry { offset, event_time: Some(t), item: t }
    }

    fn drain(m: &mut Merge<i64>, now: Instant) -> Vec<i64> {
        std::iter::from_fn(|| m.pop(now)).map(|(_, e, _)| e.item).collect()
    }

    /// The defect: two raw partitions' backlogs read one after the other come out merged on
    /// event time, not partition by partition.
    #[test]
    fn backlogs_read_one_partition_after_another_are_forwarded_in_event_time_order() {
        let now = Instant::now();
        let mut m = Merge::new(Duration::from_secs(5), 1000);
        for p in 0..2 {
            m.assign((IMP, p));
            m.set_bounds((IMP, p), 0, 3);
        }
        // Partition 0's whole backlog arrives first: nothing may go, partition 1 may be older.
        for (o, t) in [10, 20, 30].into_iter().enumerate() {
            m.push((IMP, 0), entry(o as i64, t));
        }
        assert_eq!(drain(&mut m, now), Vec::<i64>::new());
        for (o, t) in [11, 21, 31].into_iter().enumerate() {
            m.push((IMP, 1), entry(o as i64, t));
        }
        assert_eq!(drain(&mut m, now), [10, 11, 20, 21, 30, 31]);
    }

    /// Live: a lane that has caught up holds nothing back, so messages go as they come.
    #[test]
    fn caught_up_lanes_hold_nothing_back() {
        let now = Instant::now();
        let mut m = Merge::new(Duration::from_secs(5), 1000);
        m.assign((IMP, 0));
        m.assign((ENG, 0));
        m.set_bounds((IMP, 0), 5, 5);
        m.set_bounds((ENG, 0), 7, 7);
        m.push((ENG, 0), entry(7, 100));
        assert_eq!(drain(&mut m, now), [100]);
        m.push((IMP, 0), entry(5, 90));
        assert_eq!(drain(&mut m, now), [90]);
    }

    /// A lane whose end is not known yet may be behind: it holds the others back until it has
    /// read something or its bounds say it has nothing to catch up on.
    #[test]
    fn a_lane_of_unknown_end_holds_back_until_bounded() {
        let now = Instant::now();
        let mut m = Merge::new(Duration::from_secs(5), 1000);
        m.assign((IMP, 0));
        m.assign((IMP, 1));
        m.set_bounds((IMP, 0), 0, 1);
        m.push((IMP, 0), entry(0, 50));
        assert_eq!(drain(&mut m, now), Vec::<i64>::new());
        assert_eq!(m.unbounded(), [(IMP, 1)]);
        m.set_bounds((IMP, 1), 4, 4);
        assert_eq!(drain(&mut m, now), [50]);
        // Its next message makes it a lane that has read past its end: still nothing to wait for.
        m.push((IMP, 1), entry(4, 40));
        assert_eq!(drain(&mut m, now), [40]);
    }

    /// A rejected message waits for nothing, and keeps its place in its lane's offset order.
    #[test]
    fn rejections_go_at_once_and_in_offset_order() {
        let now = Instant::now();
        let mut m = Merge::new(Duration::from_secs(5), 1000);
        m.assign((ENG, 0));
        m.assign((ENG, 1));
        m.set_bounds((ENG, 0), 0, 10);
        m.set_bounds((ENG, 1), 0, 10);
        m.push((ENG, 0), Entry { offset: 0, event_time: None, item: -1 });
        m.push((ENG, 0), entry(1, 5));
        assert_eq!(drain(&mut m, now), [-1], "the rejection goes; the event waits for partition 1");
    }

    /// A lane catching up that reads nothing for `max_stall` stops holding the others back.
    #[test]
    fn a_stalled_lane_is_given_up_on_after_max_stall() {
        let start = Instant::now();
        let mut m = Merge::new(Duration::from_secs(2), 1000);
        m.assign((IMP, 0));
        m.assign((IMP, 1));
        m.set_bounds((IMP, 0), 0, 10);
        m.set_bounds((IMP, 1), 0, 10);
        m.push((IMP, 0), entry(0, 1));
        assert_eq!(drain(&mut m, start), Vec::<i64>::new());
        assert_eq!(drain(&mut m, start + Duration::from_secs(1)), Vec::<i64>::new());
        assert_eq!(drain(&mut m, start + Duration::from_secs(2)), [1]);
        assert_eq!(m.take_given_up(), [(IMP, 1)]);
        // It read something: it is a lane like the others again, past the end it was given.
        m.push((IMP, 1), entry(0, 0));
        m.push((IMP, 0), entry(1, 3));
        assert_eq!(drain(&mut m, start + Duration::from_secs(3)), [0, 3]);
    }

    /// A full lane is paused and resumed once half drained; a revoked lane's queue is dropped.
    #[test]
    fn full_lanes_pause_and_revoked_lanes_are_dropped() {
        let now = Instant::now();
        let mut m = Merge::new(Duration::from_secs(5), 4);
        m.assign((IMP, 0));
        m.set_bounds((IMP, 0), 0, 100);
        let fetches: Vec<_> = (0..4).filter_map(|o| m.push((IMP, 0), entry(o, o))).collect();
        assert_eq!(fetches, [Fetch::Pause((IMP, 0))]);
        let resumes: Vec<_> = (0..2).filter_map(|_| m.pop(now).and_then(|(_, _, f)| f)).collect();
        assert_eq!(resumes, [Fetch::Resume((IMP, 0))]);
        assert!(!m.revoke((IMP, 0)));
        assert_eq!(m.queued(), 0);
        assert!(m.pop(now).is_none());
        m.set_bounds((IMP, 0), 0, 100);
        assert!(m.unbounded().is_empty() && m.lanes.is_empty(), "bounds looked up before a revocation make no lane");
    }
}
