//! Pending impressions in the order they are due: [`DeadlineQueue`].
//!
//! The queue holds record ids ordered by (deadline, query key), both read from the records. The
//! queries of pending impressions are unique, so this is a total order: which impression
//! finalizes first never depends on where its record sits in the arena, ties of deadline go to
//! the smaller query key (as they always have), and a checkpoint need not keep any id. Every
//! record has exactly one queue entry, removed when it is finalized, so there are no stale
//! entries to skip. Impressions arrive nearly in deadline order, so the queue is mostly a sorted
//! run of ids that takes them at its end and gives them back from its front: O(1) with a
//! comparison for an arrival in order. One up to [`RUN_REACH`] places out of order (a tie of
//! deadline broken by query key, producer jitter) is inserted in place after a galloping and a
//! binary search; one further out goes to a binary heap of stragglers, whose entries keep their
//! deadline beside the id (16 bytes) so that sifting reads no record. The earlier of the run's
//! front and the heap's top is due first.
//!
//! The deadline is `timestamp + attribution_window` (saturating), computed when needed rather
//! than stored in the record: the window is the same for every call on a shard, and a checkpoint
//! is only restored under the same window (the engine refuses another one).

use std::cmp::Ordering;
use std::collections::VecDeque;

use super::arena::Arena;
use crate::checkpoint::Inconsistency;
use crate::time::EventTime;

/// How many places before the end of the sorted run an impression may still be inserted
/// (impressions of one millisecond, ordered by query key; producer jitter) before it goes to the
/// heap of stragglers instead: bounds an insertion into the run to a few comparisons and a move
/// of at most 256 bytes.
const RUN_REACH: usize = 64;

/// The deadline order of two records (deadline, then query key: a total order), for sorting.
fn due_order(arena: &Arena, window: i64, a: u32, b: u32) -> Ordering {
    let key = |id| (arena.timestamp(id).saturating_add(window), arena.query(id));
    key(a).cmp(&key(b))
}

/// A record id with its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Due {
    /// `timestamp + attribution_window`, saturating.
    pub(super) deadline: EventTime,
    /// The record.
    pub(super) id: u32,
}

impl Due {
    fn of(arena: &Arena, window: i64, id: u32) -> Self {
        Due { deadline: arena.timestamp(id).saturating_add(window), id }
    }

    /// The deadline order: is `self` due before `other`? (Deadline, then query key: a total
    /// order.) Inlined: it is the inner step of every queue operation.
    #[inline(always)]
    fn before(self, other: Due, arena: &Arena) -> bool {
        self.deadline < other.deadline
            || (self.deadline == other.deadline && arena.query(self.id) < arena.query(other.id))
    }
}

/// A binary min-heap of record ids in deadline order (see [`Due::before`]), for the few that
/// arrive too far out of order for the run. Each entry keeps its deadline beside the id (16
/// bytes rather than 4) so that sifting, a comparison per level, reads no record but on a tie.
#[derive(Default)]
struct DeadlineHeap {
    /// The heap array: each entry is due no earlier than its parent.
    entries: Vec<Due>,
}

impl DeadlineHeap {
    fn push(&mut self, due: Due, arena: &Arena) {
        self.entries.push(due);
        self.sift_up(self.entries.len() - 1, arena);
    }

    fn peek(&self) -> Option<Due> {
        self.entries.first().copied()
    }

    fn pop(&mut self, arena: &Arena) -> Option<u32> {
        let last = self.entries.pop()?;
        if self.entries.is_empty() {
            return Some(last.id);
        }
        let top = std::mem::replace(&mut self.entries[0], last);
        // As the standard library's heap does: the moved element came from the bottom and
        // usually belongs near it, so move the hole to the bottom (one comparison per level)
        // and sift the element up from there (rarely far).
        let end = self.entries.len();
        let (mut hole, mut child) = (0, 1);
        while child + 1 < end {
            child += usize::from(self.entries[child + 1].before(self.entries[child], arena));
            self.entries[hole] = self.entries[child];
            hole = child;
            child = 2 * hole + 1;
        }
        if child == end - 1 {
            self.entries[hole] = self.entries[child];
            hole = child;
        }
        self.entries[hole] = last;
        self.sift_up(hole, arena);
        Some(top.id)
    }

    fn sift_up(&mut self, mut hole: usize, arena: &Arena) {
        let due = self.entries[hole];
        while hole > 0 {
            let parent = (hole - 1) / 2;
            if !due.before(self.entries[parent], arena) {
                break;
            }
            self.entries[hole] = self.entries[parent];
            hole = parent;
        }
        self.entries[hole] = due;
    }
}

/// Record ids in deadline order: a sorted run for those that arrive in order, a heap for the
/// others.
#[derive(Default)]
pub(super) struct DeadlineQueue {
    /// Ids in deadline order, earliest first.
    run: VecDeque<u32>,
    /// Ids that arrived more than [`RUN_REACH`] places out of order.
    stragglers: DeadlineHeap,
}

impl DeadlineQueue {
    pub(super) fn len(&self) -> usize {
        self.run.len() + self.stragglers.entries.len()
    }

    /// The run's entry `i` with its deadline.
    #[inline(always)]
    fn run_due(&self, i: usize, arena: &Arena, window: i64) -> Due {
        Due::of(arena, window, self.run[i])
    }

    pub(super) fn push(&mut self, id: u32, arena: &Arena, window: i64) {
        let me = Due::of(arena, window, id);
        let end = self.run.len();
        if end == 0 || !me.before(self.run_due(end - 1, arena, window), arena) {
            self.run.push_back(id);
            return;
        }
        // Out of order. Further back than the run reaches: onto the heap.
        if end > RUN_REACH && me.before(self.run_due(end - 1 - RUN_REACH, arena, window), arena) {
            self.stragglers.push(me, arena);
            return;
        }
        // Within reach: gallop back from the end (1, 2, 4, ... places) to an entry due before
        // it, then binary search between that entry and the last one it is due before. A tie
        // of deadline broken by query key, the usual disorder, costs two more comparisons.
        let (mut after, mut step) = (end - 1, 1);
        let mut lo = loop {
            match after.checked_sub(step) {
                None => break 0,
                Some(i) if me.before(self.run_due(i, arena, window), arena) => (after, step) = (i, step * 2),
                Some(i) => break i + 1,
            }
        };
        let mut hi = after;
        while lo < hi {
            let mid = (lo + hi) / 2;
            if me.before(self.run_due(mid, arena, window), arena) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        self.run.insert(lo, id);
    }

    /// Whether every id's deadline is before `limit`: the run's last, and every straggler's
    /// (there are few).
    pub(super) fn all_due_before(&self, limit: EventTime, arena: &Arena, window: i64) -> bool {
        self.run.back().is_none_or(|&id| Due::of(arena, window, id).deadline < limit)
            && self.stragglers.entries.iter().all(|due| due.deadline < limit)
    }

    /// The earliest due id, with its deadline.
    pub(super) fn peek(&self, arena: &Arena, window: i64) -> Option<Due> {
        Some(match (self.run.front(), self.stragglers.peek()) {
            (None, None) => return None,
            (Some(&id), None) => Due::of(arena, window, id),
            (None, Some(top)) => top,
            (Some(&id), Some(top)) => {
                let front = Due::of(arena, window, id);
                if top.before(front, arena) {
                    top
                } else {
                    front
                }
            }
        })
    }

    /// Removes the earliest due id if its deadline is before `limit` (any, when `None`).
    pub(super) fn pop_due_before(&mut self, limit: Option<EventTime>, arena: &Arena, window: i64) -> Option<u32> {
        let first = self.peek(arena, window)?;
        if limit.is_some_and(|limit| first.deadline >= limit) {
            return None;
        }
        if self.run.front() == Some(&first.id) {
            self.run.pop_front()
        } else {
            self.stragglers.pop(arena)
        }
    }

    /// Empties the queue, giving back its ids in no particular order (for a compaction).
    pub(super) fn take_ids(&mut self) -> Vec<u32> {
        let mut ids: Vec<u32> = std::mem::take(&mut self.stragglers.entries).iter().map(|due| due.id).collect();
        ids.extend(self.run.drain(..));
        ids
    }

    /// Refills the emptied queue with `ids` (every record, after a compaction) as one sorted run.
    pub(super) fn rebuild(&mut self, mut ids: Vec<u32>, arena: &Arena, window: i64) {
        ids.sort_unstable_by(|&a, &b| due_order(arena, window, a, b));
        self.run = ids.into();
    }

    /// The run's ids, earliest first: how a checkpoint writes it.
    pub(super) fn run(&self) -> impl Iterator<Item = u32> + Clone + '_ {
        self.run.iter().copied()
    }

    /// The stragglers in heap-array order: how a checkpoint writes them.
    pub(super) fn stragglers(&self) -> impl Iterator<Item = Due> + Clone + '_ {
        self.stragglers.entries.iter().copied()
    }

    /// Checks the order a restored queue was read back in, which [`DeadlineQueue::restore_run`]
    /// and [`DeadlineQueue::restore_straggler`] trust: the run sorted, the heap a heap, and every
    /// straggler's deadline its record's under this attribution window.
    pub(super) fn check(&self, arena: &Arena, window: i64) -> Result<(), Inconsistency> {
        let heap = &self.stragglers.entries;
        for (i, &due) in heap.iter().enumerate() {
            if due != Due::of(arena, window, due.id) {
                return Err(Inconsistency::Value {
                    what: "a pending impression's deadline",
                    expected: "its timestamp's",
                });
            }
            if i > 0 && heap.get((i - 1) / 2).is_some_and(|&parent| due.before(parent, arena)) {
                return Err(Inconsistency::Order { what: "the late pending impressions" });
            }
        }
        let mut run = self.run.iter().map(|&id| Due::of(arena, window, id));
        if let Some(mut previous) = run.next() {
            for due in run {
                if !previous.before(due, arena) {
                    return Err(Inconsistency::Order { what: "the pending impressions' deadlines" });
                }
                previous = due;
            }
        }
        Ok(())
    }

    /// Appends an id to the run, trusting that it is due no earlier than the run's last (a
    /// checkpoint's run, read back in its order; [`DeadlineQueue::check`] checks it).
    pub(super) fn restore_run(&mut self, id: u32) {
        self.run.push_back(id);
    }

    /// Swaps two entries of the run, breaking its order (for the tests of [`DeadlineQueue::check`]).
    #[cfg(test)]
    pub(super) fn swap_run(&mut self, a: usize, b: usize) {
        self.run.swap(a, b);
    }

    /// Appends an entry to the heap array, trusting that the array stays a heap (a checkpoint's
    /// stragglers, read back in their order).
    pub(super) fn restore_straggler(&mut self, due: Due) {
        self.stragglers.entries.push(due);
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::arena::HEADER_WORDS;
    use super::super::tests::{check, docs, take, WINDOW};
    use super::super::PendingSet;
    use super::*;
    use crate::ids::QueryKey;

    /// The queue's order: the run is sorted, the heap is a heap, and every straggler's deadline
    /// is its record's.
    pub(in crate::join::pending) fn invariants(queue: &DeadlineQueue, arena: &Arena) {
        let heap = &queue.stragglers.entries;
        for (i, &due) in heap.iter().enumerate().skip(1) {
            assert_eq!(due, Due::of(arena, WINDOW, due.id), "deadline of {i}");
            assert!(!due.before(heap[(i - 1) / 2], arena), "heap order at {i}");
        }
        for pair in queue.run.iter().collect::<Vec<_>>().windows(2) {
            let due = |id| Due::of(arena, WINDOW, id);
            assert!(due(*pair[0]).before(due(*pair[1]), arena), "run order");
        }
    }

    #[test]
    fn equal_deadlines_finalize_in_query_order_whatever_the_arena_order() {
        let mut set = PendingSet::default();
        for q in [9, 3, 7, 5] {
            set.insert(q, 1000, 0, 0, &docs(1), &[], WINDOW);
        }
        set.insert(1, 1001, 0, 0, &docs(1), &[], WINDOW);
        let order: Vec<QueryKey> = std::iter::from_fn(|| take(&mut set)).map(|(t, _)| t.query).collect();
        assert_eq!(order, [3, 5, 7, 9, 1]);
    }

    #[test]
    fn arrivals_out_of_order_go_into_the_run_within_reach_and_onto_the_heap_beyond() {
        let mut set = PendingSet::default();
        for t in 10..110 {
            set.insert(t as QueryKey, t, 0, 0, &[], &[], WINDOW);
        }
        // Into the run: a tie with the last (after it by query key), and every place back to
        // RUN_REACH from the end (one back, then the binary search).
        set.insert(1000, 109, 0, 0, &[], &[], WINDOW);
        for back in (1..RUN_REACH as i64).rev() {
            set.insert(2000 + back as QueryKey, 109 - back, 0, 0, &[], &[], WINDOW);
        }
        assert_eq!((set.queue.run.len(), set.queue.stragglers.entries.len()), (164, 0));
        check(&set);
        // Beyond reach, and before everything: onto the heap.
        set.insert(3000, 20, 0, 0, &[], &[], WINDOW);
        set.insert(3001, 0, 0, 0, &[], &[], WINDOW);
        assert_eq!((set.queue.run.len(), set.queue.stragglers.entries.len()), (164, 2));
        // A short run takes an arrival earlier than all of it at its front.
        let mut short = PendingSet::default();
        short.insert(1, 50, 0, 0, &[], &[], WINDOW);
        short.insert(2, 60, 0, 0, &[], &[], WINDOW);
        short.insert(3, 10, 0, 0, &[], &[], WINDOW);
        assert_eq!(short.queue.run, [2, 0, 1].map(|i| i * HEADER_WORDS as u32));
        check(&short);
        // Take and append one at a time until the run's ring buffer wraps: a checkpoint keeps both
        // parts, in order.
        let mut expected: Vec<EventTime> =
            (10..110).chain([109, 20, 0]).chain((1..RUN_REACH as i64).map(|b| 109 - b)).collect();
        expected.sort_unstable();
        let mut next = 110;
        while set.queue.run.as_slices().1.is_empty() {
            assert!(next < 1000, "the ring buffer never wrapped");
            assert_eq!(take(&mut set).unwrap().0.timestamp, expected.remove(0));
            set.insert(next as QueryKey, next, 0, 0, &[], &[], WINDOW);
            expected.push(next);
            next += 1;
        }
        let mut set: PendingSet = postcard::from_bytes(&postcard::to_stdvec(&set).unwrap()).unwrap();
        check(&set);
        let order: Vec<EventTime> = std::iter::from_fn(|| take(&mut set)).map(|(t, _)| t.timestamp).collect();
        assert_eq!(order, expected);
    }

    #[test]
    fn a_restored_heap_with_other_deadlines_or_out_of_order_is_refused() {
        let mut set = PendingSet::default();
        for t in 10..110 {
            set.insert(t as QueryKey, t, 0, 0, &[], &[], WINDOW);
        }
        set.insert(3000, 20, 0, 0, &[], &[], WINDOW);
        set.insert(3001, 0, 0, 0, &[], &[], WINDOW);
        assert_eq!(set.queue.stragglers.entries.len(), 2);
        assert_eq!(set.check(WINDOW), Ok(()));
        // Deadlines of another attribution window than the one restoring them.
        let other = set.check(WINDOW + 1).unwrap_err();
        assert!(matches!(other, Inconsistency::Value { what: "a pending impression's deadline", .. }), "{other}");
        set.queue.stragglers.entries.swap(0, 1);
        assert_eq!(set.check(WINDOW), Err(Inconsistency::Order { what: "the late pending impressions" }));
    }

    #[test]
    fn deadlines_saturate_and_still_order_by_query() {
        let mut set = PendingSet::default();
        set.insert(2, EventTime::MAX - 10, 0, 0, &[], &[], WINDOW);
        set.insert(1, EventTime::MAX - 50, 0, 0, &[], &[], WINDOW);
        set.insert(3, 0, 0, 0, &[], &[], WINDOW);
        let mut gains = Vec::new();
        assert_eq!(
            set.take_earliest(WINDOW, Some(WINDOW), true, &mut gains, &mut Vec::new()),
            None,
            "due at WINDOW, not before"
        );
        let order: Vec<QueryKey> = std::iter::from_fn(|| take(&mut set)).map(|(t, _)| t.query).collect();
        assert_eq!(order, [3, 1, 2], "both others saturate to the same deadline");
    }
}
