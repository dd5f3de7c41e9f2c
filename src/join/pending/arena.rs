//! Where the records of pending impressions live: [`Arena`].
//!
//! A record is [`HEADER_WORDS`] `u64` header words and then one slot word per shown result,
//! addressed by a `u32` id: the chunk index and the word offset of its first word. The arena
//! grows in chunks of [`CHUNK_WORDS`], so it has no doubling slack. A freed record goes onto the
//! free list of its result count and the next record of that count reuses it, which is what a
//! steady stream does. When the mix of result counts shifts so that unusable free words reach
//! the live ones, the next chunk is not added: the arena is compacted instead (records copied in
//! id order into fresh chunks, old chunks released as they empty; the owner then rebuilds what
//! holds ids). That bounds the arena to about twice its live words, at an amortized O(1) per
//! record, and never happens while the result counts stay the same. A record longer than
//! [`BIG_WORDS`] gets a chunk of its own, released as soon as the record leaves.

use crate::ids::QueryKey;
use crate::time::EventTime;

/// Header word: low 64 bits of the query key.
pub(super) const QUERY_LOW: usize = 0;
/// Header word: high 64 bits of the query key.
pub(super) const QUERY_HIGH: usize = 1;
/// Header word: the impression's timestamp.
pub(super) const TIMESTAMP: usize = 2;
/// Header word: timestamp of the earliest attributed engagement, or
/// [`NO_ENGAGEMENT`](super::NO_ENGAGEMENT).
pub(super) const FIRST_ENGAGEMENT: usize = 3;
/// Header word: group id in the low 32 bits, unit hash in the high 32 bits.
pub(super) const GROUP_UNIT: usize = 4;
/// Header word: the number of results (slot words after the header).
pub(super) const LEN: usize = 5;
/// Words of a record before its slots.
pub(super) const HEADER_WORDS: usize = 6;

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

/// Chunked storage of records, with free lists per result count.
#[derive(Default)]
pub(super) struct Arena {
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
    pub(super) fn query(&self, id: u32) -> QueryKey {
        u128::from(self.word(id, QUERY_LOW)) | (u128::from(self.word(id, QUERY_HIGH)) << 64)
    }

    #[inline]
    pub(super) fn timestamp(&self, id: u32) -> EventTime {
        self.word(id, TIMESTAMP) as EventTime
    }

    /// The whole live record (header and slots).
    pub(super) fn record(&self, id: u32) -> &[u64] {
        let (c, o) = Self::locate(id);
        let chunk = &self.chunks[c];
        &chunk[o..o + HEADER_WORDS + chunk[o + LEN] as usize]
    }

    /// The whole live record, to change in place.
    pub(super) fn record_mut(&mut self, id: u32) -> &mut [u64] {
        let (c, o) = Self::locate(id);
        let chunk = &mut self.chunks[c];
        let len = chunk[o + LEN] as usize;
        &mut chunk[o..o + HEADER_WORDS + len]
    }

    /// `words` words from `id`, live or just allocated.
    #[inline]
    pub(super) fn words_mut(&mut self, id: u32, words: usize) -> &mut [u64] {
        let (c, o) = Self::locate(id);
        &mut self.chunks[c][o..o + words]
    }

    /// Words in live records.
    pub(super) fn live_words(&self) -> usize {
        self.live_words
    }

    /// Words compaction would give back.
    pub(super) fn dead_words(&self) -> usize {
        self.dead_words
    }

    /// Chunks, vacant ones included.
    pub(super) fn chunk_count(&self) -> usize {
        self.chunks.len()
    }

    /// Whether allocating a record of `words` words would add an ordinary chunk while the
    /// ordinary chunks are at least half dead: then it is time to compact instead.
    pub(super) fn needs_compaction(&self, words: usize) -> bool {
        words <= BIG_WORDS
            && self.free.get(words - HEADER_WORDS).is_none_or(|&head| head == NONE)
            && !matches!(self.bump, Some((_, used)) if used + words <= CHUNK_WORDS)
            && self.dead_words >= self.live_words.max(CHUNK_WORDS)
    }

    /// Whether [`Arena::alloc`] finds room for `words` words within the chunks ids can address.
    pub(super) fn has_room(&self, words: usize) -> bool {
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
    pub(super) fn alloc(&mut self, words: usize) -> u32 {
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
    pub(super) fn free(&mut self, id: u32) {
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

    /// Copies the records of `ids` (every live record, in id order) into fresh chunks,
    /// releasing each old chunk once it is copied, so memory never holds both arenas; each id
    /// in `ids` is replaced by its record's new id. Whatever else holds ids must be rebuilt.
    pub(super) fn compact(&mut self, ids: &mut [u32]) {
        let mut old = std::mem::take(self);
        self.chunk_limit = old.chunk_limit;
        let mut copying = None;
        for id in ids {
            let (chunk, _) = Self::locate(*id);
            if copying != Some(chunk) {
                if let Some(done) = copying {
                    old.chunks[done] = Box::default();
                }
                copying = Some(chunk);
            }
            let record = old.record(*id);
            let moved = self.alloc(record.len());
            self.words_mut(moved, record.len()).copy_from_slice(record);
            *id = moved;
        }
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

    /// Caps the arena at `chunks` chunks, so tests can reach the limit 32-bit ids impose.
    #[cfg(test)]
    pub(super) fn limit_chunks(&mut self, chunks: usize) {
        self.chunk_limit = chunks;
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::tests::{check, docs, take, WINDOW};
    use super::super::{PendingSet, NO_ENGAGEMENT};
    use super::*;

    /// The arena's word accounting matches its records: `live` (every live id) holds exactly the
    /// live words, and the free lists hold no more than the dead ones.
    pub(in crate::join::pending) fn invariants(arena: &Arena, live: &[u32]) {
        let live: usize = live.iter().map(|&id| arena.record(id).len()).sum();
        assert_eq!(live, arena.live_words);
        let free: usize = (0..arena.free.len())
            .map(|len| {
                let (mut n, mut id) = (0, arena.free[len]);
                while id != NONE {
                    n += 1;
                    id = arena.word(id, 0) as u32;
                }
                n * (HEADER_WORDS + len)
            })
            .sum();
        assert!(free <= arena.dead_words, "free records {free} > dead words {}", arena.dead_words);
    }

    #[test]
    fn a_freed_record_is_reused_by_the_next_of_its_length_only() {
        let mut set = PendingSet::default();
        let a = set.insert(1, 1000, 0, 0, &docs(3), &[], WINDOW).unwrap();
        let b = set.insert(2, 2000, 0, 0, &docs(3), &[], WINDOW).unwrap();
        assert_eq!(b, a + (HEADER_WORDS + 3) as u32, "appended");
        assert_eq!(take(&mut set).unwrap().0.query, 1);
        assert_eq!(set.arena.dead_words, HEADER_WORDS + 3);
        // Another length does not fit the hole; the same length takes it.
        let c = set.insert(3, 3000, 0, 0, &docs(4), &[], WINDOW).unwrap();
        assert_eq!(c, b + (HEADER_WORDS + 3) as u32);
        let d = set.insert(4, 4000, 0, 0, &docs(3), &[], WINDOW).unwrap();
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
                set.insert(next_query, next_time, 0, 0, &docs(len), &[], WINDOW).unwrap();
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
        set.insert(1, 1000, 0, 0, &docs(2), &[], WINDOW);
        let big = set.insert(2, 2000, 0, 0, &long, &[], WINDOW).unwrap();
        set.insert(3, 3000, 0, 0, &docs(2), &[], WINDOW);
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
        assert_eq!(set.insert(4, 4000, 0, 0, &long, &[], WINDOW), Some(big));
        check(&set);
    }
}
