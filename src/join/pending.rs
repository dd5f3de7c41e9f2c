//! The pending impressions of one shard, laid out for memory: [`PendingSet`].
//!
//! A pending impression is one record of `u64` words in an arena: [`HEADER_WORDS`] header words
//! (query key, timestamp, first engagement, group and unit, result count) and then one [`Slot`]
//! word per shown result. A record is addressed by a `u32` id, the arena offset of its first
//! word, and the two structures that find records hold nothing but ids:
//! * a hash index (`hashbrown::HashTable<u32>`) hashed and compared by the query key stored in
//!   the record, so a bucket costs 4 bytes and a control byte instead of a key and a value;
//! * a deadline queue of ids ordered by (deadline, query key), both read from the records. The
//!   queries of pending impressions are unique, so this is a total order: which impression
//!   finalizes first never depends on where its record sits in the arena, ties of deadline go to
//!   the smaller query key (as they always have), and a checkpoint need not keep any id. Every
//!   record has exactly one queue entry, removed when it is finalized, so there are no stale
//!   entries to skip. Impressions arrive nearly in deadline order, so the queue is mostly a
//!   sorted run of ids that takes them at its end and gives them back from its front: O(1) with
//!   a comparison for an arrival in order. One up to [`RUN_REACH`] places out of order (a tie of
//!   deadline broken by query key, producer jitter) is inserted in place after a galloping and a
//!   binary search; one further out goes to a binary heap of stragglers, whose entries keep
//!   their deadline beside the id (16 bytes) so that sifting reads no record. The earlier of
//!   the run's front and the heap's top is due first.
//!
//! The deadline is `timestamp + attribution_window` (saturating), computed when needed rather
//! than stored in the record: the window is the same for every call on a shard, and a
//! checkpoint is only restored under the same window (the engine refuses another one).
//!
//! The arena grows in chunks of [`CHUNK_WORDS`], so it has no doubling slack. A finalized record
//! goes onto the free list of its result count and the next record of that count reuses it,
//! which is what a steady stream does. When the mix of result counts shifts so that unusable
//! free words reach the live ones, the next chunk is not added: the arena is compacted instead
//! (records copied in id order into fresh chunks, old chunks released as they empty, index and
//! queue rebuilt). That bounds the arena to about twice its live words, at an amortized O(1) per
//! record, and never happens while the result counts stay the same. A record longer than
//! [`BIG_WORDS`] gets a chunk of its own, released as soon as the record leaves.

use std::cmp::Ordering;
use std::collections::VecDeque;
use std::fmt;
use std::hash::{BuildHasher, RandomState};

use hashbrown::hash_table::Entry;
use hashbrown::HashTable;
use serde::de::{DeserializeSeed, Error as _, SeqAccess, Visitor};
use serde::ser::SerializeTuple;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::ids::{DocKey, GroupId, QueryKey};
use crate::time::EventTime;

/// Header word: low 64 bits of the query key.
const QUERY_LOW: usize = 0;
/// Header word: high 64 bits of the query key.
const QUERY_HIGH: usize = 1;
/// Header word: the impression's timestamp.
const TIMESTAMP: usize = 2;
/// Header word: timestamp of the earliest attributed engagement, or [`NO_ENGAGEMENT`].
const FIRST_ENGAGEMENT: usize = 3;
/// Header word: group id in the low 32 bits, unit hash in the high 32 bits.
const GROUP_UNIT: usize = 4;
/// Header word: the number of results (slot words after the header).
const LEN: usize = 5;
/// Words of a record before its slots.
pub(super) const HEADER_WORDS: usize = 6;

/// No engagement attributed yet.
pub(super) const NO_ENGAGEMENT: EventTime = EventTime::MAX;

const CHUNK_SHIFT: u32 = 14;
/// Words per ordinary chunk (128 KiB): large enough that the tail left unused when the next
/// record does not fit is small, small enough that a shard with little pending costs little.
const CHUNK_WORDS: usize = 1 << CHUNK_SHIFT;
const OFFSET_MASK: u32 = (1 << CHUNK_SHIFT) - 1;
/// Ids are `chunk << CHUNK_SHIFT | offset` in 32 bits: 2^18 chunks, 32 GiB of records per shard.
const MAX_CHUNKS: usize = 1 << (32 - CHUNK_SHIFT);
/// Longer records get a chunk of their own. An eighth of a chunk keeps the unusable chunk tails
/// below an eighth of the arena, so they can never by themselves trigger a compaction.
const BIG_WORDS: usize = CHUNK_WORDS / 8;
/// End of a free list (no record can start at the last word of a chunk).
const NONE: u32 = u32::MAX;
/// How many places before the end of the sorted run an impression may still be inserted
/// (impressions of one millisecond, ordered by query key; producer jitter) before it goes to the
/// heap of stragglers instead: bounds an insertion into the run to a few comparisons and a move
/// of at most 256 bytes.
const RUN_REACH: usize = 64;

/// One shown result: the low 56 bits of its id hash and, in the high byte, its gain so far.
/// Packing both keeps a result to one word; a collision of 56-bit hashes within one result list
/// is out of reach (about 2^-50 for 200 results).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Slot(u64);

impl Slot {
    const DOC_BITS: u32 = 56;
    const DOC_MASK: u64 = (1 << Self::DOC_BITS) - 1;

    pub(super) fn new(doc: DocKey) -> Self {
        Slot(doc & Self::DOC_MASK)
    }
    pub(super) fn is(self, doc: DocKey) -> bool {
        self.0 & Self::DOC_MASK == doc & Self::DOC_MASK
    }
    pub(super) fn gain(self) -> u8 {
        (self.0 >> Self::DOC_BITS) as u8
    }
    pub(super) fn raise_gain(&mut self, gain: u8) {
        if gain > self.gain() {
            self.0 = (self.0 & Self::DOC_MASK) | (u64::from(gain) << Self::DOC_BITS);
        }
    }
}

/// Chunked storage of records, with free lists per result count.
#[derive(Default)]
struct Arena {
    /// Ordinary chunks of [`CHUNK_WORDS`] words; chunks of exactly one record longer than
    /// [`BIG_WORDS`]; and empty (vacant) ones whose id range waits for the next new chunk.
    chunks: Vec<Box<[u64]>>,
    /// Indices of vacant chunks, reused before the chunk list grows.
    vacant: Vec<u32>,
    /// The ordinary chunk new records are appended to, and how many of its words are used.
    bump: Option<(usize, usize)>,
    /// Head of the free list of records with each result count (index), or [`NONE`]. A free
    /// record's first word holds the id of the next one.
    free: Vec<u32>,
    /// Words in live records.
    live_words: usize,
    /// Words of ordinary chunks holding no live record: free records and the chunk tails left
    /// when the next record did not fit. What compaction would give back.
    dead_words: usize,
    /// The most chunks there may be, when below the [`MAX_CHUNKS`] ids address (0): only
    /// tests lower it, since they cannot fill 32 GiB.
    chunk_limit: usize,
}

impl Arena {
    /// (chunk index, word offset) of an id.
    #[inline]
    fn locate(id: u32) -> (usize, usize) {
        ((id >> CHUNK_SHIFT) as usize, (id & OFFSET_MASK) as usize)
    }

    #[inline]
    fn word(&self, id: u32, k: usize) -> u64 {
        let (c, o) = Self::locate(id);
        self.chunks[c][o + k]
    }

    #[inline]
    fn query(&self, id: u32) -> QueryKey {
        u128::from(self.word(id, QUERY_LOW)) | (u128::from(self.word(id, QUERY_HIGH)) << 64)
    }

    #[inline]
    fn timestamp(&self, id: u32) -> EventTime {
        self.word(id, TIMESTAMP) as EventTime
    }

    /// The whole live record (header and slots).
    fn record(&self, id: u32) -> &[u64] {
        let (c, o) = Self::locate(id);
        let chunk = &self.chunks[c];
        &chunk[o..o + HEADER_WORDS + chunk[o + LEN] as usize]
    }

    /// `words` words from `id`, live or just allocated.
    #[inline]
    fn words_mut(&mut self, id: u32, words: usize) -> &mut [u64] {
        let (c, o) = Self::locate(id);
        &mut self.chunks[c][o..o + words]
    }

    /// Whether allocating a record of `words` words would add an ordinary chunk while the
    /// ordinary chunks are at least half dead: then it is time to compact instead.
    fn needs_compaction(&self, words: usize) -> bool {
        words <= BIG_WORDS
            && self.free.get(words - HEADER_WORDS).is_none_or(|&head| head == NONE)
            && !matches!(self.bump, Some((_, used)) if used + words <= CHUNK_WORDS)
            && self.dead_words >= self.live_words.max(CHUNK_WORDS)
    }

    /// Whether [`Arena::alloc`] finds room for `words` words within the chunks ids can address.
    fn has_room(&self, words: usize) -> bool {
        if self.chunks.len() < self.max_chunks() || !self.vacant.is_empty() {
            return true;
        }
        words <= BIG_WORDS
            && (self.free.get(words - HEADER_WORDS).is_some_and(|&head| head != NONE)
                || matches!(self.bump, Some((_, used)) if used + words <= CHUNK_WORDS))
    }

    fn max_chunks(&self) -> usize {
        if self.chunk_limit == 0 {
            MAX_CHUNKS
        } else {
            self.chunk_limit
        }
    }

    /// Room for a record of `words` words (its content is left for the caller to write).
    fn alloc(&mut self, words: usize) -> u32 {
        self.live_words += words;
        if words > BIG_WORDS {
            return Self::id(self.new_chunk(words), 0);
        }
        let len = words - HEADER_WORDS;
        if let Some(&head) = self.free.get(len) {
            if head != NONE {
                self.free[len] = self.word(head, 0) as u32;
                self.dead_words -= words;
                return head;
            }
        }
        let (chunk, used) = match self.bump {
            Some((chunk, used)) if used + words <= CHUNK_WORDS => (chunk, used),
            open => {
                if let Some((_, used)) = open {
                    self.dead_words += CHUNK_WORDS - used;
                }
                (self.new_chunk(CHUNK_WORDS), 0)
            }
        };
        self.bump = Some((chunk, used + words));
        Self::id(chunk, used)
    }

    /// Gives a record's words back: onto its free list, or its own chunk released.
    fn free(&mut self, id: u32) {
        let (c, o) = Self::locate(id);
        let len = self.chunks[c][o + LEN] as usize;
        let words = HEADER_WORDS + len;
        self.live_words -= words;
        if words > BIG_WORDS {
            self.chunks[c] = Box::default();
            self.vacant.push(c as u32);
            return;
        }
        if len >= self.free.len() {
            self.free.resize(len + 1, NONE);
        }
        self.chunks[c][o] = u64::from(self.free[len]);
        self.free[len] = id;
        self.dead_words += words;
    }

    fn new_chunk(&mut self, words: usize) -> usize {
        let chunk = vec![0; words].into_boxed_slice();
        if let Some(c) = self.vacant.pop() {
            self.chunks[c as usize] = chunk;
            return c as usize;
        }
        // Unreachable: inserts first ask `PendingSet::has_room`.
        assert!(self.chunks.len() < self.max_chunks(), "one shard's pending impressions outgrew 32 GiB");
        self.chunks.push(chunk);
        self.chunks.len() - 1
    }

    fn id(chunk: usize, offset: usize) -> u32 {
        ((chunk as u32) << CHUNK_SHIFT) | offset as u32
    }
}

/// The deadline order of two records (deadline, then query key: a total order), for sorting.
fn due_order(arena: &Arena, window: i64, a: u32, b: u32) -> Ordering {
    let key = |id| (arena.timestamp(id).saturating_add(window), arena.query(id));
    key(a).cmp(&key(b))
}

/// A record id with its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Due {
    /// `timestamp + attribution_window`, saturating.
    deadline: EventTime,
    /// The record.
    id: u32,
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
struct DeadlineQueue {
    /// Ids in deadline order, earliest first.
    run: VecDeque<u32>,
    /// Ids that arrived more than [`RUN_REACH`] places out of order.
    stragglers: DeadlineHeap,
}

impl DeadlineQueue {
    fn len(&self) -> usize {
        self.run.len() + self.stragglers.entries.len()
    }

    /// The run's entry `i` with its deadline.
    #[inline(always)]
    fn run_due(&self, i: usize, arena: &Arena, window: i64) -> Due {
        Due::of(arena, window, self.run[i])
    }

    fn push(&mut self, id: u32, arena: &Arena, window: i64) {
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

    /// Removes the earliest due id if its deadline is before `limit` (any, when `None`).
    fn pop_due_before(&mut self, limit: Option<EventTime>, arena: &Arena, window: i64) -> Option<u32> {
        let first = match (self.run.front(), self.stragglers.peek()) {
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
        };
        if limit.is_some_and(|limit| first.deadline >= limit) {
            return None;
        }
        if self.run.front() == Some(&first.id) {
            self.run.pop_front()
        } else {
            self.stragglers.pop(arena)
        }
    }
}

/// A pending impression taken out of the set, except its gains (written to a buffer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Taken {
    /// The impression's query key.
    pub query: QueryKey,
    /// The impression's timestamp.
    pub timestamp: EventTime,
    /// Timestamp of the earliest attributed engagement on a shown result, or [`NO_ENGAGEMENT`]
    /// (for the delay histogram).
    pub first_engagement: EventTime,
    /// Its A/B group.
    pub group: GroupId,
    /// 32-bit hash of its A/B unit (client or session; 0 when the unit is the impression itself).
    pub unit: u32,
}

/// Mutable access to one pending impression, for the attribution rule.
pub(super) struct PendingMut<'a> {
    /// The record: header and slots.
    words: &'a mut [u64],
}

impl PendingMut<'_> {
    pub(super) fn timestamp(&self) -> EventTime {
        self.words[TIMESTAMP] as EventTime
    }

    /// Raises the gain of the first result with this document; false if it was not shown.
    pub(super) fn raise_gain(&mut self, doc: DocKey, gain: u8) -> bool {
        let Some(word) = self.words[HEADER_WORDS..].iter_mut().find(|w| Slot(**w).is(doc)) else {
            return false;
        };
        let mut slot = Slot(*word);
        slot.raise_gain(gain);
        *word = slot.0;
        true
    }

    /// Records an attributed engagement's timestamp (the earliest is kept).
    pub(super) fn note_engagement(&mut self, timestamp: EventTime) {
        let first = self.words[FIRST_ENGAGEMENT] as EventTime;
        self.words[FIRST_ENGAGEMENT] = first.min(timestamp) as u64;
    }
}

/// The pending impressions of a shard: records in an [`Arena`], found by query key through the
/// index and in deadline order through the queue.
#[derive(Default)]
pub(super) struct PendingSet {
    /// The records.
    arena: Arena,
    /// Ids of all records, hashed by their query key.
    index: HashTable<u32>,
    /// Ids of all records, in deadline order.
    queue: DeadlineQueue,
    /// Keys the index's hashes, randomly per shard, as a standard `HashMap` would.
    hasher: RandomState,
}

impl fmt::Debug for PendingSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingSet")
            .field("len", &self.len())
            .field("live_words", &self.arena.live_words)
            .field("dead_words", &self.arena.dead_words)
            .field("chunks", &self.arena.chunks.len())
            .finish()
    }
}

impl PendingSet {
    pub(super) fn len(&self) -> usize {
        self.queue.len()
    }

    /// The id of the pending impression of this query.
    /// Whether an impression of `results` results fits, possibly after a compaction: false only
    /// when one shard's records would outgrow the 32 GiB its 32-bit ids address, and then the
    /// caller makes room by finalizing the earliest impression early, as for any state limit.
    pub(super) fn has_room(&self, results: usize) -> bool {
        let words = HEADER_WORDS + results;
        self.arena.has_room(words) || self.arena.needs_compaction(words)
    }

    /// Caps the arena at `chunks` chunks, so tests can reach the limit 32-bit ids impose.
    #[cfg(test)]
    pub(super) fn limit_chunks(&mut self, chunks: usize) {
        self.arena.chunk_limit = chunks;
    }

    pub(super) fn find(&self, query: QueryKey) -> Option<u32> {
        let arena = &self.arena;
        self.index.find(self.hasher.hash_one(query), |&id| arena.query(id) == query).copied()
    }

    /// Adds an impression with no engagement yet; `None` (and no change) if its query is
    /// already pending.
    pub(super) fn insert(
        &mut self,
        query: QueryKey,
        timestamp: EventTime,
        group: GroupId,
        unit: u32,
        docs: &[DocKey],
        window: i64,
    ) -> Option<u32> {
        let words = HEADER_WORDS + docs.len();
        let hash = self.hasher.hash_one(query);
        let (arena, hasher) = (&self.arena, &self.hasher);
        let id = match self.index.entry(hash, |&id| arena.query(id) == query, |&id| hasher.hash_one(arena.query(id))) {
            Entry::Occupied(_) => return None,
            Entry::Vacant(slot) if !self.arena.needs_compaction(words) => {
                let id = self.arena.alloc(words);
                slot.insert(id);
                id
            }
            Entry::Vacant(_) => {
                self.compact(window);
                let id = self.arena.alloc(words);
                let (arena, hasher) = (&self.arena, &self.hasher);
                self.index.insert_unique(hash, id, |&id| hasher.hash_one(arena.query(id)));
                id
            }
        };
        let record = self.arena.words_mut(id, words);
        record[QUERY_LOW] = query as u64;
        record[QUERY_HIGH] = (query >> 64) as u64;
        record[TIMESTAMP] = timestamp as u64;
        record[FIRST_ENGAGEMENT] = NO_ENGAGEMENT as u64;
        record[GROUP_UNIT] = u64::from(group) | (u64::from(unit) << 32);
        record[LEN] = docs.len() as u64;
        for (word, &doc) in record[HEADER_WORDS..].iter_mut().zip(docs) {
            *word = Slot::new(doc).0;
        }
        self.queue.push(id, &self.arena, window);
        Some(id)
    }

    /// The pending impression with this id (valid until the next insertion or removal).
    pub(super) fn get_mut(&mut self, id: u32) -> PendingMut<'_> {
        let (c, o) = Arena::locate(id);
        let chunk = &mut self.arena.chunks[c];
        let len = chunk[o + LEN] as usize;
        PendingMut { words: &mut chunk[o..o + HEADER_WORDS + len] }
    }

    /// Removes the impression with the earliest deadline, if that deadline is before `limit` (or
    /// whatever it is, when `None`); its gains, in rank order, replace the content of `gains`.
    pub(super) fn take_earliest(
        &mut self,
        window: i64,
        limit: Option<EventTime>,
        gains: &mut Vec<u8>,
    ) -> Option<Taken> {
        let id = self.queue.pop_due_before(limit, &self.arena, window)?;
        let record = self.arena.record(id);
        let query = u128::from(record[QUERY_LOW]) | (u128::from(record[QUERY_HIGH]) << 64);
        let taken = Taken {
            query,
            timestamp: record[TIMESTAMP] as EventTime,
            first_engagement: record[FIRST_ENGAGEMENT] as EventTime,
            group: record[GROUP_UNIT] as u32,
            unit: (record[GROUP_UNIT] >> 32) as u32,
        };
        gains.clear();
        gains.extend(record[HEADER_WORDS..].iter().map(|&w| Slot(w).gain()));
        self.index
            .find_entry(self.hasher.hash_one(query), |&other| other == id)
            .expect("every pending record is indexed")
            .remove();
        self.arena.free(id);
        Some(taken)
    }

    /// Copies every record, in id order, into fresh chunks (releasing each old chunk once it is
    /// copied, so memory never holds both arenas), then rebuilds the index, and the queue as one
    /// sorted run.
    fn compact(&mut self, window: i64) {
        let mut ids: Vec<u32> = std::mem::take(&mut self.queue.stragglers.entries).iter().map(|due| due.id).collect();
        ids.extend(self.queue.run.drain(..));
        ids.sort_unstable();
        let mut old = std::mem::take(&mut self.arena);
        self.arena.chunk_limit = old.chunk_limit;
        let mut copying = None;
        for id in &mut ids {
            let (chunk, _) = Arena::locate(*id);
            if copying != Some(chunk) {
                if let Some(done) = copying {
                    old.chunks[done] = Box::default();
                }
                copying = Some(chunk);
            }
            let record = old.record(*id);
            let moved = self.arena.alloc(record.len());
            self.arena.words_mut(moved, record.len()).copy_from_slice(record);
            *id = moved;
        }
        drop(old);
        // Clearing keeps the table's capacity: the same ids go back in without growing it.
        self.index.clear();
        let (arena, hasher) = (&self.arena, &self.hasher);
        for &id in &ids {
            self.index.insert_unique(hasher.hash_one(arena.query(id)), id, |&id| hasher.hash_one(arena.query(id)));
        }
        ids.sort_unstable_by(|&a, &b| due_order(arena, window, a, b));
        self.queue.run = ids.into();
    }
}

/// A pending impression as checkpoints hold it.
#[derive(Serialize)]
struct RecordOut<'a> {
    query: QueryKey,
    timestamp: EventTime,
    first_engagement: EventTime,
    group: GroupId,
    unit: u32,
    /// The slot words (document hash and gain).
    slots: &'a [u64],
}

/// [`RecordOut`], read back.
#[derive(Deserialize)]
struct RecordIn {
    query: QueryKey,
    timestamp: EventTime,
    first_engagement: EventTime,
    group: GroupId,
    unit: u32,
    slots: Vec<u64>,
}

/// Serializes what an iterator yields as a sequence (its size hint must be exact).
struct SeqOf<I>(I);

impl<I: Iterator<Item: Serialize> + Clone> Serialize for SeqOf<I> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.clone())
    }
}

/// Two sequences of records: the run in order, then the stragglers in heap-array order, each
/// with its deadline. Reading them back in that order into a fresh arena puts each in the same
/// place of the run or the heap, so neither needs sorting again (it could not be: the
/// attribution window is not known there).
impl Serialize for PendingSet {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let arena = &self.arena;
        let record = |id: u32| {
            let record = arena.record(id);
            RecordOut {
                query: arena.query(id),
                timestamp: record[TIMESTAMP] as EventTime,
                first_engagement: record[FIRST_ENGAGEMENT] as EventTime,
                group: record[GROUP_UNIT] as u32,
                unit: (record[GROUP_UNIT] >> 32) as u32,
                slots: &record[HEADER_WORDS..],
            }
        };
        let mut tuple = serializer.serialize_tuple(2)?;
        tuple.serialize_element(&SeqOf(self.queue.run.iter().map(|&id| record(id))))?;
        tuple.serialize_element(&SeqOf(
            self.queue.stragglers.entries.iter().map(|due| (due.deadline, record(due.id))),
        ))?;
        tuple.end()
    }
}

impl PendingSet {
    /// Appends a checkpointed record to the arena and the index (not yet to the queue).
    fn restore(&mut self, r: RecordIn) -> Result<u32, &'static str> {
        if self.find(r.query).is_some() {
            return Err("a query is pending twice");
        }
        let words = HEADER_WORDS + r.slots.len();
        let id = self.arena.alloc(words);
        let record = self.arena.words_mut(id, words);
        record[QUERY_LOW] = r.query as u64;
        record[QUERY_HIGH] = (r.query >> 64) as u64;
        record[TIMESTAMP] = r.timestamp as u64;
        record[FIRST_ENGAGEMENT] = r.first_engagement as u64;
        record[GROUP_UNIT] = u64::from(r.group) | (u64::from(r.unit) << 32);
        record[LEN] = r.slots.len() as u64;
        record[HEADER_WORDS..].copy_from_slice(&r.slots);
        let (arena, hasher) = (&self.arena, &self.hasher);
        self.index.insert_unique(hasher.hash_one(r.query), id, |&id| hasher.hash_one(arena.query(id)));
        Ok(id)
    }
}

/// Reads one sequence of records into a set, appending them to the run or the heap array: the
/// same place as when written, so the run stays sorted and the heap array a heap.
struct RecordsIn<'a> {
    /// The set being restored.
    set: &'a mut PendingSet,
    /// Whether these are the stragglers (each with its deadline), else the run.
    stragglers: bool,
}

impl<'de> DeserializeSeed<'de> for RecordsIn<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for RecordsIn<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a sequence of pending impressions")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let set = self.set;
        if self.stragglers {
            while let Some((deadline, record)) = seq.next_element::<(EventTime, RecordIn)>()? {
                let id = set.restore(record).map_err(A::Error::custom)?;
                set.queue.stragglers.entries.push(Due { deadline, id });
            }
        } else {
            while let Some(record) = seq.next_element::<RecordIn>()? {
                let id = set.restore(record).map_err(A::Error::custom)?;
                set.queue.run.push_back(id);
            }
        }
        Ok(())
    }
}

impl<'de> Deserialize<'de> for PendingSet {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Parts;
        impl<'de> Visitor<'de> for Parts {
            type Value = PendingSet;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("the run and the stragglers of pending impressions")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<PendingSet, A::Error> {
                let mut set = PendingSet::default();
                for (i, stragglers) in [false, true].into_iter().enumerate() {
                    seq.next_element_seed(RecordsIn { set: &mut set, stragglers })?
                        .ok_or_else(|| A::Error::invalid_length(i, &self))?;
                }
                Ok(set)
            }
        }
        deserializer.deserialize_tuple(2, Parts)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    const WINDOW: i64 = 100;

    fn docs(n: usize) -> Vec<DocKey> {
        (0..n as u64).map(|d| d * 7 + 1).collect()
    }

    fn take(set: &mut PendingSet) -> Option<(Taken, Vec<u8>)> {
        let mut gains = Vec::new();
        set.take_earliest(WINDOW, None, &mut gains).map(|t| (t, gains))
    }

    /// Every invariant the set relies on: the index and the queue hold exactly the live ids, the
    /// run is sorted, the heap is a heap, and the arena's word accounting matches the records.
    fn check(set: &PendingSet) {
        let mut indexed: Vec<u32> = set.index.iter().copied().collect();
        let heap = &set.queue.stragglers.entries;
        let mut heaped: Vec<u32> = set.queue.run.iter().copied().chain(heap.iter().map(|due| due.id)).collect();
        indexed.sort_unstable();
        heaped.sort_unstable();
        assert_eq!(indexed, heaped);
        for (i, &due) in heap.iter().enumerate().skip(1) {
            assert_eq!(due, Due::of(&set.arena, WINDOW, due.id), "deadline of {i}");
            assert!(!due.before(heap[(i - 1) / 2], &set.arena), "heap order at {i}");
        }
        for pair in set.queue.run.iter().collect::<Vec<_>>().windows(2) {
            let due = |id| Due::of(&set.arena, WINDOW, id);
            assert!(due(*pair[0]).before(due(*pair[1]), &set.arena), "run order");
        }
        for &id in &heaped {
            assert_eq!(set.find(set.arena.query(id)), Some(id));
        }
        let live: usize = heaped.iter().map(|&id| set.arena.record(id).len()).sum();
        assert_eq!(live, set.arena.live_words);
        let free: usize = (0..set.arena.free.len())
            .map(|len| {
                let (mut n, mut id) = (0, set.arena.free[len]);
                while id != NONE {
                    n += 1;
                    id = set.arena.word(id, 0) as u32;
                }
                n * (HEADER_WORDS + len)
            })
            .sum();
        assert!(free <= set.arena.dead_words, "free records {free} > dead words {}", set.arena.dead_words);
    }

    #[test]
    fn gains_pack_with_the_document() {
        let mut slot = Slot::new(u64::MAX);
        assert!(slot.is(u64::MAX) && slot.gain() == 0);
        slot.raise_gain(3);
        slot.raise_gain(1);
        assert!(slot.is(u64::MAX) && slot.gain() == 3);
        assert!(!slot.is(7));
    }

    #[test]
    fn a_freed_record_is_reused_by_the_next_of_its_length_only() {
        let mut set = PendingSet::default();
        let a = set.insert(1, 1000, 0, 0, &docs(3), WINDOW).unwrap();
        let b = set.insert(2, 2000, 0, 0, &docs(3), WINDOW).unwrap();
        assert_eq!(b, a + (HEADER_WORDS + 3) as u32, "appended");
        assert_eq!(take(&mut set).unwrap().0.query, 1);
        assert_eq!(set.arena.dead_words, HEADER_WORDS + 3);
        // Another length does not fit the hole; the same length takes it.
        let c = set.insert(3, 3000, 0, 0, &docs(4), WINDOW).unwrap();
        assert_eq!(c, b + (HEADER_WORDS + 3) as u32);
        let d = set.insert(4, 4000, 0, 0, &docs(3), WINDOW).unwrap();
        assert_eq!((d, set.arena.dead_words), (a, 0));
        // The reused record carries nothing of the old one.
        let (taken, gains) = take(&mut set).unwrap();
        assert_eq!((taken.query, taken.first_engagement, gains), (2, NO_ENGAGEMENT, vec![0; 3]));
        let (taken, gains) = take(&mut set).unwrap();
        assert_eq!((taken.query, taken.timestamp, gains), (3, 3000, vec![0; 4]));
        assert_eq!(take(&mut set).unwrap().0.query, 4);
        check(&set);
    }

    #[test]
    fn equal_deadlines_finalize_in_query_order_whatever_the_arena_order() {
        let mut set = PendingSet::default();
        for q in [9, 3, 7, 5] {
            set.insert(q, 1000, 0, 0, &docs(1), WINDOW);
        }
        set.insert(1, 1001, 0, 0, &docs(1), WINDOW);
        let order: Vec<QueryKey> = std::iter::from_fn(|| take(&mut set)).map(|(t, _)| t.query).collect();
        assert_eq!(order, [3, 5, 7, 9, 1]);
    }

    #[test]
    fn arrivals_out_of_order_go_into_the_run_within_reach_and_onto_the_heap_beyond() {
        let mut set = PendingSet::default();
        for t in 10..110 {
            set.insert(t as QueryKey, t, 0, 0, &[], WINDOW);
        }
        // Into the run: a tie with the last (after it by query key), and every place back to
        // RUN_REACH from the end (one back, then the binary search).
        set.insert(1000, 109, 0, 0, &[], WINDOW);
        for back in (1..RUN_REACH as i64).rev() {
            set.insert(2000 + back as QueryKey, 109 - back, 0, 0, &[], WINDOW);
        }
        assert_eq!((set.queue.run.len(), set.queue.stragglers.entries.len()), (164, 0));
        check(&set);
        // Beyond reach, and before everything: onto the heap.
        set.insert(3000, 20, 0, 0, &[], WINDOW);
        set.insert(3001, 0, 0, 0, &[], WINDOW);
        assert_eq!((set.queue.run.len(), set.queue.stragglers.entries.len()), (164, 2));
        // A short run takes an arrival earlier than all of it at its front.
        let mut short = PendingSet::default();
        short.insert(1, 50, 0, 0, &[], WINDOW);
        short.insert(2, 60, 0, 0, &[], WINDOW);
        short.insert(3, 10, 0, 0, &[], WINDOW);
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
            set.insert(next as QueryKey, next, 0, 0, &[], WINDOW);
            expected.push(next);
            next += 1;
        }
        let mut set: PendingSet = postcard::from_bytes(&postcard::to_stdvec(&set).unwrap()).unwrap();
        check(&set);
        let order: Vec<EventTime> = std::iter::from_fn(|| take(&mut set)).map(|(t, _)| t.timestamp).collect();
        assert_eq!(order, expected);
    }

    #[test]
    fn deadlines_saturate_and_still_order_by_query() {
        let mut set = PendingSet::default();
        set.insert(2, EventTime::MAX - 10, 0, 0, &[], WINDOW);
        set.insert(1, EventTime::MAX - 50, 0, 0, &[], WINDOW);
        set.insert(3, 0, 0, 0, &[], WINDOW);
        let mut gains = Vec::new();
        assert_eq!(set.take_earliest(WINDOW, Some(WINDOW), &mut gains), None, "due at WINDOW, not before");
        let order: Vec<QueryKey> = std::iter::from_fn(|| take(&mut set)).map(|(t, _)| t.query).collect();
        assert_eq!(order, [3, 1, 2], "both others saturate to the same deadline");
    }

    #[test]
    fn an_evicted_record_reused_at_once_leaves_no_stale_deadline() {
        let mut set = PendingSet::default();
        set.insert(1, 1000, 0, 0, &docs(2), WINDOW);
        set.insert(2, 5000, 0, 0, &docs(2), WINDOW);
        // Evicted early (before its deadline), then its words reused by an impression due later.
        let (early, _) = take(&mut set).unwrap();
        let reused = set.insert(3, 9000, 0, 0, &docs(2), WINDOW).unwrap();
        assert_eq!((early.query, reused), (1, 0));
        let mut gains = Vec::new();
        assert_eq!(set.take_earliest(WINDOW, Some(5000 + WINDOW), &mut gains), None);
        assert_eq!(set.take_earliest(WINDOW, Some(5001 + WINDOW), &mut gains).map(|t| t.query), Some(2));
        assert_eq!(take(&mut set).map(|(t, _)| t.query), Some(3));
        assert_eq!(take(&mut set), None);
        assert!(set.find(1).is_none());
    }

    #[test]
    fn gains_and_first_engagement_live_in_the_record() {
        let mut set = PendingSet::default();
        let id = set.insert(1, 1000, 7, 0xdead_beef, &[10, 20, 10], WINDOW).unwrap();
        let mut p = set.get_mut(id);
        assert!(p.raise_gain(10, 2) && p.raise_gain(20, 1) && p.raise_gain(20, 3) && p.raise_gain(20, 2));
        assert!(!p.raise_gain(30, 1));
        p.note_engagement(1050);
        p.note_engagement(1020);
        p.note_engagement(1090);
        let (taken, gains) = take(&mut set).unwrap();
        assert_eq!(taken, Taken { query: 1, timestamp: 1000, first_engagement: 1020, group: 7, unit: 0xdead_beef });
        assert_eq!(gains, [2, 3, 0], "a repeated id takes gain at its first rank");
    }

    #[test]
    fn full_width_keys_and_timestamps_round_trip() {
        let mut set = PendingSet::default();
        let query = u128::MAX - 12345;
        set.insert(query, -5, u32::MAX, u32::MAX, &[u64::MAX], WINDOW);
        assert!(set.find(query).is_some() && set.find(query ^ (1 << 100)).is_none());
        let (taken, gains) = take(&mut set).unwrap();
        assert_eq!(
            (taken.query, taken.timestamp, taken.group, taken.unit, gains),
            (query, -5, u32::MAX, u32::MAX, vec![0])
        );
    }

    #[test]
    fn a_shifting_mix_of_lengths_is_compacted_and_memory_stays_bounded() {
        let mut set = PendingSet::default();
        let (mut next_query, mut next_time) = (0u128, 0i64);
        const LIVE: usize = 3000;
        // Each phase replaces every pending impression by one with one more result: no freed
        // record can be reused, so without compaction the arena would hold every phase.
        for len in 1..40 {
            for _ in 0..LIVE {
                if set.len() == LIVE {
                    take(&mut set).unwrap();
                }
                set.insert(next_query, next_time, 0, 0, &docs(len), WINDOW).unwrap();
                next_query += 1;
                next_time += 1;
            }
            let ordinary = set.arena.chunks.iter().filter(|c| c.len() == CHUNK_WORDS).count();
            assert!(
                ordinary * CHUNK_WORDS <= 2 * set.arena.live_words + 2 * CHUNK_WORDS,
                "{ordinary} chunks for {} live words",
                set.arena.live_words
            );
        }
        check(&set);
        // Nothing was lost or reordered: the survivors come out in deadline order, with their
        // own contents.
        let mut expected = next_time - LIVE as i64;
        while let Some((taken, gains)) = take(&mut set) {
            assert_eq!((taken.timestamp, taken.query), (expected, expected as u128));
            assert_eq!(gains.len(), 39);
            expected += 1;
        }
    }

    #[test]
    fn records_longer_than_big_words_get_their_own_chunk_released_on_removal() {
        let mut set = PendingSet::default();
        let long = docs(BIG_WORDS);
        set.insert(1, 1000, 0, 0, &docs(2), WINDOW);
        let big = set.insert(2, 2000, 0, 0, &long, WINDOW).unwrap();
        set.insert(3, 3000, 0, 0, &docs(2), WINDOW);
        assert_eq!(Arena::locate(big), (1, 0));
        assert_eq!(set.arena.chunks[1].len(), HEADER_WORDS + BIG_WORDS);
        let mut p = set.get_mut(big);
        assert!(p.raise_gain(*long.last().unwrap(), 4));
        take(&mut set).unwrap();
        let (taken, gains) = take(&mut set).unwrap();
        assert_eq!((taken.query, gains.len(), gains.last()), (2, BIG_WORDS, Some(&4)));
        assert!(set.arena.chunks[1].is_empty() && set.arena.vacant == [1], "released");
        assert_eq!(set.arena.dead_words, HEADER_WORDS + 2, "a big record leaves no dead words");
        // The vacant chunk index is the next big record's.
        assert_eq!(set.insert(4, 4000, 0, 0, &long, WINDOW), Some(big));
        check(&set);
    }

    #[test]
    fn checkpoint_round_trip_keeps_contents_and_order() {
        let mut set = PendingSet::default();
        for q in 0..200u128 {
            let id =
                set.insert(q * 7919 % 200, 1000 + (q as i64 * 13) % 50, q as u32, 0, &docs(q as usize % 5), WINDOW);
            if q % 3 == 0 {
                let mut p = set.get_mut(id.unwrap());
                p.raise_gain(1, 2);
                p.note_engagement(1040);
            }
        }
        for _ in 0..20 {
            take(&mut set);
        }
        let bytes = postcard::to_stdvec(&set).unwrap();
        let mut restored: PendingSet = postcard::from_bytes(&bytes).unwrap();
        check(&restored);
        assert_eq!(restored.len(), 180);
        while let Some(expected) = take(&mut set) {
            assert_eq!(take(&mut restored), Some(expected));
        }
        assert_eq!(take(&mut restored), None);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert { query: u8, timestamp: u8, len: u8 },
        Engage { query: u8, doc: u8, gain: u8 },
        TakeEarliest,
        RoundTrip,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (any::<u8>(), any::<u8>(), 0u8..12).prop_map(|(query, timestamp, len)| Op::Insert { query, timestamp, len }),
            2 => (any::<u8>(), 0u8..12, 1u8..4).prop_map(|(query, doc, gain)| Op::Engage { query, doc, gain }),
            3 => Just(Op::TakeEarliest),
            1 => Just(Op::RoundTrip),
        ]
    }

    /// One pending impression of the model: deadline-keyed, with plain vectors.
    #[derive(Debug, Clone, PartialEq)]
    struct Model {
        timestamp: EventTime,
        first_engagement: EventTime,
        gains: Vec<u8>,
        docs: Vec<DocKey>,
    }

    proptest! {
        // A failure prints its minimal case; no regressions file is written into the source tree.
        #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

        /// The set behaves like an ordered map keyed by (deadline, query) under any sequence of
        /// insertions, engagements, removals and checkpoint round trips.
        #[test]
        fn behaves_like_an_ordered_map(ops in proptest::collection::vec(op(), 1..400)) {
            let mut set = PendingSet::default();
            let mut model: BTreeMap<(EventTime, QueryKey), Model> = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Insert { query, timestamp, len } => {
                        let (query, timestamp) = (QueryKey::from(query) << 100 | 5, EventTime::from(timestamp));
                        // Repeated documents, to exercise the first-rank rule.
                        let docs: Vec<DocKey> = (0..u64::from(len)).map(|d| d % 7).collect();
                        let fresh = !model.keys().any(|&(_, q)| q == query);
                        prop_assert_eq!(set.insert(query, timestamp, 0, 0, &docs, WINDOW).is_some(), fresh);
                        if fresh {
                            let gains = vec![0; docs.len()];
                            model.insert((timestamp + WINDOW, query), Model { timestamp, first_engagement: NO_ENGAGEMENT, gains, docs });
                        }
                    }
                    Op::Engage { query, doc, gain } => {
                        let query = QueryKey::from(query) << 100 | 5;
                        let entry = model.iter_mut().find(|((_, q), _)| *q == query);
                        prop_assert_eq!(set.find(query).is_some(), entry.is_some());
                        if let (Some(id), Some((_, m))) = (set.find(query), entry) {
                            let mut p = set.get_mut(id);
                            let shown = p.raise_gain(u64::from(doc), gain);
                            let position = m.docs.iter().position(|&d| d == u64::from(doc));
                            prop_assert_eq!(shown, position.is_some());
                            if let Some(i) = position {
                                m.gains[i] = m.gains[i].max(gain);
                                p.note_engagement(m.timestamp + i64::from(doc));
                                m.first_engagement = m.first_engagement.min(m.timestamp + i64::from(doc));
                            }
                        }
                    }
                    Op::TakeEarliest => {
                        let expected = model.pop_first();
                        let got = take(&mut set);
                        prop_assert_eq!(got.is_some(), expected.is_some());
                        if let (Some((t, gains)), Some(((_, query), m))) = (got, expected) {
                            prop_assert_eq!((t.query, t.timestamp, t.first_engagement), (query, m.timestamp, m.first_engagement));
                            prop_assert_eq!(gains, m.gains);
                        }
                    }
                    Op::RoundTrip => {
                        set = postcard::from_bytes(&postcard::to_stdvec(&set).unwrap()).unwrap();
                    }
                }
                prop_assert_eq!(set.len(), model.len());
                check(&set);
            }
        }
    }
}
