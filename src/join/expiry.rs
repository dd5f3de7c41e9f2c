//! Keys in the order they expire: [`ExpiryQueue`], [`ExpiringSet`] (the de-duplication memory built
//! on it), and the hasher of the join's own tables.
//!
//! De-duplication memory and held engagements expire when the watermark passes a time that is
//! an event time plus a constant, and events arrive nearly in event-time order. So the queue is
//! mostly a sorted run that takes entries at its end and gives them back from its front (O(1)),
//! as [`super::pending`]'s deadline queue is: an entry up to [`RUN_REACH`] places out of order
//! is inserted in place, one further out goes to a binary heap of stragglers. It gives entries
//! back in exactly the (time, key) order of a binary heap of them, which it replaced (a
//! binary-heap pop of 32-byte entries was 8% of a replay's time), so what expires first, and
//! which entry a state limit evicts, did not change.
//!
//! It is written to snapshots as the heap was, a sequence of `Reverse((time, key))` in any
//! order, and sorted when read back: snapshots of either kind restore into the other.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use std::collections::hash_map::Entry;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::time::EventTime;

mod wire;
pub(super) use wire::KeysByExpiry;

/// The hasher of the join's tables of 128-bit keys: foldhash (hashbrown's default), a few
/// multiplications for a `u128` where SipHash was a measurable share of the join. It is seeded
/// randomly per process and per table, so the ids producers choose cannot be made to collide in
/// advance; unlike SipHash it is only minimally DoS-resistant (its authors' words): an attacker
/// who could learn the seed from timing could. The keys are xxh3 hashes of those ids, and the
/// state limits (`[join]`) bound what any flood costs.
pub type KeyHasher = foldhash::fast::RandomState;

/// A `HashMap` keyed by [`KeyHasher`].
pub type KeyMap<K, V> = std::collections::HashMap<K, V, KeyHasher>;

/// How many places before the end of the sorted run an entry may still be inserted (engagements
/// reordered by delivery jitter) before it goes to the heap of stragglers: bounds an insertion
/// to a binary search and a move of at most that many entries.
const RUN_REACH: usize = 64;

/// (expiry time, key) entries, earliest first (ties by key). See the module documentation.
#[derive(Debug, Clone)]
pub struct ExpiryQueue<K> {
    /// Entries in (time, key) order: most arrive at its end.
    run: VecDeque<(EventTime, K)>,
    /// Entries that arrived too far out of order for the run.
    stragglers: BinaryHeap<Reverse<(EventTime, K)>>,
}

impl<K> Default for ExpiryQueue<K> {
    fn default() -> Self {
        ExpiryQueue { run: VecDeque::new(), stragglers: BinaryHeap::new() }
    }
}

impl<K: Ord + Copy> ExpiryQueue<K> {
    pub fn push(&mut self, expires: EventTime, key: K) {
        let entry = (expires, key);
        let len = self.run.len();
        if self.run.back().is_none_or(|last| *last <= entry) {
            self.run.push_back(entry);
            return;
        }
        let reach = len.saturating_sub(RUN_REACH);
        if reach > 0 && self.run.get(reach - 1).is_some_and(|e| *e > entry) {
            self.stragglers.push(Reverse(entry));
            return;
        }
        // Binary search of run[reach..len] for the first entry after this one.
        let (mut lo, mut hi) = (reach, len);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.run.get(mid).is_some_and(|e| *e <= entry) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        self.run.insert(lo, entry);
    }

    /// The earliest entry.
    pub fn peek(&self) -> Option<(EventTime, K)> {
        match (self.run.front(), self.stragglers.peek()) {
            (Some(&run), Some(&Reverse(straggler))) => Some(run.min(straggler)),
            (Some(&run), None) => Some(run),
            (None, Some(&Reverse(straggler))) => Some(straggler),
            (None, None) => None,
        }
    }

    /// Whether every entry expires before `time`: the run's last, and every straggler's (there
    /// are few).
    pub fn all_before(&self, time: EventTime) -> bool {
        self.run.back().is_none_or(|&(expires, _)| expires < time)
            && self.stragglers.iter().all(|Reverse((expires, _))| *expires < time)
    }

    /// The latest entry.
    pub fn max(&self) -> Option<(EventTime, K)> {
        let straggler = self.stragglers.iter().map(|Reverse(e)| *e).max();
        self.run.back().copied().max(straggler)
    }

    /// Forgets every entry, keeping the capacity.
    pub fn clear(&mut self) {
        self.run.clear();
        self.stragglers.clear();
    }

    /// Takes the earliest entry.
    pub fn pop(&mut self) -> Option<(EventTime, K)> {
        let from_run = match (self.run.front(), self.stragglers.peek()) {
            (Some(run), Some(Reverse(straggler))) => run <= straggler,
            (Some(_), None) => true,
            (None, _) => false,
        };
        if from_run {
            self.run.pop_front()
        } else {
            self.stragglers.pop().map(|Reverse(entry)| entry)
        }
    }

    /// Every entry, in no particular order.
    #[cfg(test)]
    pub fn entries(&self) -> Vec<(EventTime, K)> {
        self.run.iter().copied().chain(self.stragglers.iter().map(|Reverse(e)| *e)).collect()
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.run.len() + self.stragglers.len()
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn from_entries(mut entries: Vec<(EventTime, K)>) -> Self {
        entries.sort_unstable();
        ExpiryQueue { run: entries.into(), stragglers: BinaryHeap::new() }
    }
}

impl<K: Serialize> Serialize for ExpiryQueue<K> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.run.iter().map(Reverse).chain(self.stragglers.iter().map(|Reverse(e)| Reverse(e))))
    }
}

impl<'de, K: Deserialize<'de> + Ord + Copy> Deserialize<'de> for ExpiryQueue<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let entries: Vec<Reverse<(EventTime, K)>> = Vec::deserialize(deserializer)?;
        Ok(Self::from_entries(entries.into_iter().map(|Reverse(e)| e).collect()))
    }
}

/// A set of keys that forgets each one once the watermark passes its expiry time.
#[derive(Debug)]
pub(super) struct ExpiringSet<K> {
    /// The keys with their expiry times, for membership and for rules that depend on when a
    /// key expires (a late engagement's classification).
    keys: KeyMap<K, EventTime>,
    /// (expiry, key) for every key, earliest first.
    expiry: ExpiryQueue<K>,
    /// What changed since the last delta, while the source writes deltas.
    changes: Option<SetChanges<K>>,
}

/// An [`ExpiringSet`] as a snapshot of format 10 holds it: its (expiry, key) entries in order,
/// each key once ([`KeysByExpiry`]); not the changes recorded for the next delta, which a
/// snapshot starts afresh. Read back, the keys and their expiry order are built from them.
#[derive(Debug)]
pub(super) struct ExpiringSetRecord<K> {
    keys: KeyMap<K, EventTime>,
    expiry: ExpiryQueue<K>,
}

impl<'de> Deserialize<'de> for ExpiringSetRecord<u128> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let KeysByExpiry(entries) = KeysByExpiry::deserialize(deserializer)?;
        let mut keys = KeyMap::with_capacity_and_hasher(entries.len(), KeyHasher::default());
        for &(expires, key) in &entries {
            if keys.insert(key, expires).is_some() {
                return Err(serde::de::Error::custom("a key twice in an expiring set"));
            }
        }
        // In order already: the run takes them as they are.
        Ok(ExpiringSetRecord { keys, expiry: ExpiryQueue { run: entries.into(), stragglers: BinaryHeap::new() } })
    }
}

/// An [`ExpiringSet`] as snapshots of format 7 and before held it: its keys with their expiry
/// times, then the expiry order (every key twice over).
#[derive(Debug, Deserialize)]
#[serde(bound(deserialize = "K: Deserialize<'de> + std::hash::Hash + Eq + Ord + Copy"))]
pub(super) struct ExpiringSetRecordV7<K> {
    keys: KeyMap<K, EventTime>,
    expiry: ExpiryQueue<K>,
}

impl<K> From<ExpiringSetRecordV7<K>> for ExpiringSetRecord<K> {
    fn from(record: ExpiringSetRecordV7<K>) -> Self {
        let ExpiringSetRecordV7 { keys, expiry } = record;
        ExpiringSetRecord { keys, expiry }
    }
}

impl ExpiringSet<u128> {
    /// The changes since [`ExpiringSet::record_changes`] or the last call; an empty delta when
    /// not recording.
    pub(super) fn take_delta(&mut self) -> SetDelta {
        let Some(changes) = self.changes.as_mut() else { return SetDelta::default() };
        let mut added = std::mem::take(&mut changes.added);
        let left_through = changes.left_through.take();
        // Still there with that expiry (a key that left and came back is there once, with its
        // newer expiry).
        added.retain(|(expires, key)| self.keys.get(key) == Some(expires));
        added.sort_unstable();
        added.dedup();
        SetDelta { left_through, added: KeysByExpiry(added) }
    }

    /// Applies a delta to the set as the snapshot or delta before it left it.
    pub(super) fn apply_delta(&mut self, delta: SetDelta) -> Result<(), crate::checkpoint::Inconsistency> {
        if let Some(through) = delta.left_through {
            while let Some(entry) = self.expiry.peek() {
                if entry > through {
                    break;
                }
                self.expiry.pop();
                self.keys.remove(&entry.1);
            }
        }
        for (expires, key) in delta.added.0 {
            if !self.insert(key, expires) {
                return Err(crate::checkpoint::Inconsistency::Twice { what: "a de-duplication key a delta adds" });
            }
        }
        Ok(())
    }

    /// The set as a snapshot holds it.
    pub(super) fn record(&self) -> KeysByExpiry {
        let mut entries: Vec<(EventTime, u128)> =
            self.expiry.run.iter().copied().chain(self.expiry.stragglers.iter().map(|Reverse(e)| *e)).collect();
        // The run is in order and the stragglers few: nearly sorted already.
        entries.sort_unstable();
        KeysByExpiry(entries)
    }
}

impl<K> ExpiringSet<K> {
    /// The set a snapshot held.
    pub(super) fn from_record(record: ExpiringSetRecord<K>) -> Self {
        ExpiringSet { keys: record.keys, expiry: record.expiry, changes: None }
    }
}

impl<K> Default for ExpiringSet<K> {
    fn default() -> Self {
        ExpiringSet { keys: KeyMap::default(), expiry: ExpiryQueue::default(), changes: None }
    }
}

/// The changes an [`ExpiringSet`] records: keys leave it only earliest first (expired by the
/// watermark or forgotten for the state limits), so those of the last snapshot that left since
/// are exactly those up to the latest one that left, as for the pending impressions
/// (`pending::changes`).
#[derive(Debug)]
struct SetChanges<K> {
    /// Entries inserted since the last delta (some may have left again).
    added: Vec<(EventTime, K)>,
    /// The latest (expiry, key) that left since the last delta.
    left_through: Option<(EventTime, K)>,
}

impl<K: Ord + Copy> SetChanges<K> {
    fn left(&mut self, entry: (EventTime, K)) {
        if self.left_through.is_none_or(|through| through < entry) {
            self.left_through = Some(entry);
        }
    }
}

/// The changes of an [`ExpiringSet`] between two snapshots or deltas (format 10).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct SetDelta {
    /// Every key of the set as it was, up to this (expiry, key) inclusive, left it.
    left_through: Option<(EventTime, u128)>,
    /// Keys inserted since that are still there, with their expiry, in (expiry, key) order.
    added: KeysByExpiry,
}

impl SetDelta {
    /// How many keys it adds.
    pub(super) fn added(&self) -> usize {
        self.added.0.len()
    }
}

/// [`SetDelta`] as formats 6 and 7 wrote it: the keys added as varints, each with its expiry.
#[derive(Debug, Deserialize)]
pub(super) struct SetDeltaV7 {
    left_through: Option<(EventTime, u128)>,
    added: Vec<(EventTime, u128)>,
}

impl From<SetDeltaV7> for SetDelta {
    fn from(delta: SetDeltaV7) -> Self {
        let SetDeltaV7 { left_through, added } = delta;
        SetDelta { left_through, added: KeysByExpiry(added) }
    }
}

impl<K: std::hash::Hash + Eq + Ord + Copy> ExpiringSet<K> {
    /// Inserts; false if the key was already there.
    pub(super) fn insert(&mut self, key: K, expires: EventTime) -> bool {
        let fresh = match self.keys.entry(key) {
            Entry::Occupied(_) => false,
            Entry::Vacant(slot) => {
                slot.insert(expires);
                true
            }
        };
        if fresh {
            self.expiry.push(expires, key);
            if let Some(changes) = self.changes.as_mut() {
                changes.added.push((expires, key));
            }
        }
        fresh
    }
    pub(super) fn contains(&self, key: &K) -> bool {
        self.keys.contains_key(key)
    }
    /// When a key expires, if it is here.
    pub(super) fn expires(&self, key: &K) -> Option<EventTime> {
        self.keys.get(key).copied()
    }
    pub(super) fn expire(&mut self, watermark: EventTime) {
        // Every key passed (the end of the input, a long idle gap): all forgotten at once rather
        // than a cache miss apiece.
        if self.expiry.all_before(watermark) {
            // Not when empty already: clearing writes every control byte of the capacity.
            if !self.keys.is_empty() {
                self.keys.clear();
            }
            if let (Some(changes), Some(last)) = (self.changes.as_mut(), self.expiry.max()) {
                changes.left(last);
            }
            self.expiry.clear();
            return;
        }
        while let Some((expires, key)) = self.expiry.peek() {
            if expires >= watermark {
                break;
            }
            self.expiry.pop();
            self.keys.remove(&key);
            if let Some(changes) = self.changes.as_mut() {
                changes.left((expires, key));
            }
        }
    }
    /// Forgets the key that would expire first.
    pub(super) fn forget_oldest(&mut self) -> bool {
        match self.expiry.pop() {
            Some((expires, key)) => {
                if let Some(changes) = self.changes.as_mut() {
                    changes.left((expires, key));
                }
                self.keys.remove(&key).is_some()
            }
            None => false,
        }
    }

    /// Starts recording changes from now on (a snapshot of the set was just taken or restored).
    pub(super) fn record_changes(&mut self) {
        self.changes = Some(SetChanges { added: Vec::new(), left_through: None });
    }

    /// Stops recording changes.
    pub(super) fn stop_recording(&mut self) {
        self.changes = None;
    }

    pub(super) fn len(&self) -> usize {
        self.keys.len()
    }

    /// Every (expiry, key), in no particular order; checked against the queue's.
    #[cfg(test)]
    pub(super) fn entries(&self) -> Vec<(EventTime, K)> {
        let mut from_keys: Vec<(EventTime, K)> = self.keys.iter().map(|(&k, &e)| (e, k)).collect();
        let mut from_queue = self.expiry.entries();
        from_keys.sort_unstable();
        from_queue.sort_unstable();
        assert!(from_keys == from_queue, "the keys and their queue disagree");
        from_keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn gives_entries_back_in_the_order_a_binary_heap_does() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(18);
        for jitter in [0i64, 3, 50, 10_000] {
            let (mut queue, mut heap) = (ExpiryQueue::default(), BinaryHeap::new());
            let mut popped = (Vec::new(), Vec::new());
            for i in 0..5_000i64 {
                let t = i * 10 + rng.random_range(0..=jitter);
                let key: u128 = rng.random_range(0..4);
                queue.push(t, key);
                heap.push(Reverse((t, key)));
                if rng.random_bool(0.3) {
                    popped.0.push(queue.pop());
                    popped.1.push(heap.pop().map(|Reverse(e)| e));
                }
                assert_eq!(queue.peek(), heap.peek().map(|Reverse(e)| *e));
            }
            assert_eq!(queue.len(), heap.len());
            while let Some(e) = heap.pop() {
                popped.0.push(queue.pop());
                popped.1.push(Some(e.0));
            }
            assert_eq!(popped.0, popped.1, "jitter {jitter}");
            assert!(queue.is_empty());
        }
    }

    #[test]
    fn reads_back_what_a_binary_heap_wrote_and_the_reverse() {
        let entries = [(5i64, 2u128), (1, 9), (5, 1), (3, 3), (1, 9)];
        let heap: BinaryHeap<Reverse<(EventTime, u128)>> = entries.iter().copied().map(Reverse).collect();
        let bytes = postcard::to_allocvec(&heap).unwrap();
        let mut queue: ExpiryQueue<u128> = postcard::from_bytes(&bytes).unwrap();
        let mut sorted = entries.to_vec();
        sorted.sort();
        let drained: Vec<_> = std::iter::from_fn(|| queue.pop()).collect();
        assert_eq!(drained, sorted);
        let mut queue = ExpiryQueue::default();
        for (t, k) in entries {
            queue.push(t, k);
        }
        queue.push(-1_000_000, 7);
        let mut heap: BinaryHeap<Reverse<(EventTime, u128)>> =
            postcard::from_bytes(&postcard::to_allocvec(&queue).unwrap()).unwrap();
        assert_eq!(heap.pop(), Some(Reverse((-1_000_000, 7))));
        assert_eq!(heap.len(), 5);
    }
}
