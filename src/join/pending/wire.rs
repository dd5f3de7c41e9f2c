//! How checkpoints hold pending impressions: one impression's record in this build's layout
//! (changelog format 10) and in the layout before it (formats 3 to 7), and a [`PendingSet`] as
//! two sequences of records, the run and the stragglers.
//!
//! Postcard writes every integer as a varint, 7 bits a byte, which is what a small number wants
//! and the opposite of what a hash does. Format 10 writes the hashes fixed-width, together in
//! one byte string after the varints: the 128-bit query key in 16 bytes (a uniform one took 19
//! as a varint), the unit's 32-bit hash in 4 (5), each result's slot word (a 56-bit document
//! hash with gain and team above it) in 8 (8 to 10). The first engagement is written as its
//! delay after the impression, plus one, and 0 for none: one byte for the many pending
//! impressions without one, where the absolute "none" (`i64::MAX`) took 10, and two or three
//! for a delay of seconds. An impression of ten results is 109 bytes instead of 122 (a
//! snapshot of a million of them 13 MB less, and every delta's records alike).
//!
//! A record's bytes are untrusted: this file is under the no-panic rule (crate documentation,
//! "Hostile input"); a delay that leaves i64's range is refused here, and what
//! [`PendingSet::restore`] checks is checked there.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]

use std::fmt;
use std::marker::PhantomData;

use serde::de::{DeserializeSeed, Error as _, SeqAccess, Visitor};
use serde::ser::SerializeTuple;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::arena::HEADER_WORDS;
use super::deadlines::Due;
use super::{PendingSet, Taken, NO_ENGAGEMENT};
use crate::checkpoint::{deserialize_byte_string, ByteString, Inconsistency};
use crate::ids::{GroupId, QueryKey};
use crate::time::EventTime;

/// A pending impression read back from a checkpoint: its header and its slot words, whatever
/// the layout it was written in. A delta holds its records this way, and writes them in this
/// build's layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingRecord {
    /// What the record's header says.
    pub(super) header: Taken,
    /// The slot words (document hash, gain and team).
    pub(super) slots: Vec<u64>,
}

impl Serialize for PendingRecord {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        RecordOut::new(self.header, &self.slots).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for PendingRecord {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        RecordIn::deserialize(deserializer)?.read().map_err(D::Error::custom)
    }
}

/// The first engagement as format 10 writes it: 0 for none, else its delay after the
/// impression plus one (a restore refuses one before the impression, so the delay is not
/// negative in any state written; a negative one is written as none rather than wrapped).
fn engagement_code(timestamp: EventTime, first_engagement: EventTime) -> u64 {
    if first_engagement == NO_ENGAGEMENT {
        return 0;
    }
    first_engagement
        .checked_sub(timestamp)
        .and_then(|delay| u64::try_from(delay).ok())
        .map_or(0, |d| d.saturating_add(1))
}

/// [`engagement_code`] read back: `None` when the delay leaves i64's range.
fn first_engagement(timestamp: EventTime, code: u64) -> Option<EventTime> {
    match code.checked_sub(1) {
        None => Some(NO_ENGAGEMENT),
        Some(delay) => timestamp.checked_add(i64::try_from(delay).ok()?),
    }
}

/// A pending impression as format 10 writes it (borrowed from the set's arena): the varints
/// first, then what is fixed-width as one byte string.
#[derive(Serialize)]
struct RecordOut<'a> {
    /// [`Taken::timestamp`].
    timestamp: EventTime,
    /// [`Taken::first_engagement`], by [`engagement_code`].
    engagement: u64,
    /// [`Taken::group`]: a small interned number.
    group: GroupId,
    /// The query key, the unit and the slot words.
    fixed: FixedOut<'a>,
}

impl<'a> RecordOut<'a> {
    fn new(header: Taken, slots: &'a [u64]) -> Self {
        let Taken { query, timestamp, first_engagement, group, unit } = header;
        RecordOut {
            timestamp,
            engagement: engagement_code(timestamp, first_engagement),
            group,
            fixed: FixedOut { query, unit, slots },
        }
    }
}

/// [`RecordOut`], read back.
#[derive(Deserialize)]
struct RecordIn {
    timestamp: EventTime,
    engagement: u64,
    group: GroupId,
    fixed: FixedIn,
}

impl RecordIn {
    fn read(self) -> Result<PendingRecord, Inconsistency> {
        let RecordIn { timestamp, engagement, group, fixed: FixedIn { query, unit, slots } } = self;
        let first_engagement = first_engagement(timestamp, engagement).ok_or(Inconsistency::Value {
            what: "a pending impression's first engagement",
            expected: "at or after it",
        })?;
        Ok(PendingRecord { header: Taken { query, timestamp, first_engagement, group, unit }, slots })
    }
}

/// Bytes of the query key ([`Taken::query`]) and of the unit ([`Taken::unit`]) at the start of
/// a record's byte string; the slot words follow, 8 bytes each.
const KEY_BYTES: usize = 16;
const UNIT_BYTES: usize = 4;

/// A record's fixed-width fields as one byte string, little-endian: the query key, the unit,
/// the slot words. A byte string is read back as one slice (where 16 + 4 + 8n separate bytes
/// would be as many calls), which makes a snapshot of 1M pending impressions decode faster than
/// format 7's varints did.
struct FixedOut<'a> {
    query: QueryKey,
    unit: u32,
    slots: &'a [u64],
}

/// Result lists up to this long are laid out on the stack when written.
const SLOTS_ON_STACK: usize = 64;

impl Serialize for FixedOut<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let bytes = self
            .query
            .to_le_bytes()
            .into_iter()
            .chain(self.unit.to_le_bytes())
            .chain(self.slots.iter().flat_map(|word| word.to_le_bytes()));
        let len = KEY_BYTES + UNIT_BYTES + 8 * self.slots.len();
        if self.slots.len() <= SLOTS_ON_STACK {
            let mut stack = [0u8; KEY_BYTES + UNIT_BYTES + 8 * SLOTS_ON_STACK];
            stack.iter_mut().zip(bytes).for_each(|(to, byte)| *to = byte);
            serializer.serialize_bytes(stack.get(..len).unwrap_or_default())
        } else {
            serializer.serialize_bytes(&bytes.collect::<Vec<u8>>())
        }
    }
}

/// [`FixedOut`], read back.
struct FixedIn {
    query: QueryKey,
    unit: u32,
    slots: Vec<u64>,
}

impl FixedIn {
    /// `None` unless the bytes are a key, a unit and whole words.
    fn read(bytes: &[u8]) -> Option<FixedIn> {
        let (query, rest) = bytes.split_first_chunk::<KEY_BYTES>()?;
        let (unit, words) = rest.split_first_chunk::<UNIT_BYTES>()?;
        let words = words.chunks_exact(8);
        if !words.remainder().is_empty() {
            return None;
        }
        Some(FixedIn {
            query: QueryKey::from_le_bytes(*query),
            unit: u32::from_le_bytes(*unit),
            // Each chunk is 8 bytes: the conversion cannot fail.
            slots: words.map(|word| <[u8; 8]>::try_from(word).map_or(0, u64::from_le_bytes)).collect(),
        })
    }
}

impl<'de> Deserialize<'de> for FixedIn {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserialize_byte_string(deserializer, "a pending impression's query key, unit and slot words", FixedIn::read)
    }
}

/// A change to a pending impression that a snapshot or an earlier delta holds whole: an
/// engagement attributed to it changes only its first engagement and its results' gains, so a
/// delta writes those, not the record (about 30 bytes instead of 109 for ten results). Format 10.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingUpdate {
    /// The impression's query key.
    pub(super) query: QueryKey,
    /// Its first engagement, as [`engagement_code`] writes it: relative to its timestamp, which
    /// no change alters, so the update need not carry it.
    pub(super) engagement: u64,
    /// Each result's gain, in rank order.
    pub(super) gains: Vec<u8>,
}

impl PendingUpdate {
    /// The update that makes a record of the same impression, as it was written, into `record`.
    pub(super) fn of(header: Taken, gains: impl Iterator<Item = u8>) -> Self {
        PendingUpdate {
            query: header.query,
            engagement: engagement_code(header.timestamp, header.first_engagement),
            gains: gains.collect(),
        }
    }

    /// The first engagement it sets on the impression of `timestamp`; `None` when its delay
    /// leaves i64's range.
    pub(super) fn first_engagement(&self, timestamp: EventTime) -> Option<EventTime> {
        first_engagement(timestamp, self.engagement)
    }
}

impl Serialize for PendingUpdate {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut bytes = [0u8; KEY_BYTES + 8 * SLOTS_ON_STACK];
        let len = KEY_BYTES + self.gains.len();
        let fixed = self.query.to_le_bytes().into_iter().chain(self.gains.iter().copied());
        let mut tuple = serializer.serialize_tuple(2)?;
        tuple.serialize_element(&self.engagement)?;
        match bytes.get_mut(..len) {
            Some(on_stack) => {
                on_stack.iter_mut().zip(fixed).for_each(|(to, byte)| *to = byte);
                tuple.serialize_element(&ByteString(on_stack))?;
            }
            None => tuple.serialize_element(&ByteString(&fixed.collect::<Vec<u8>>()))?,
        }
        tuple.end()
    }
}

impl<'de> Deserialize<'de> for PendingUpdate {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let (engagement, KeyAndGains(query, gains)) = <(u64, KeyAndGains)>::deserialize(deserializer)?;
        Ok(PendingUpdate { query, engagement, gains })
    }
}

/// An update's byte string read back: the query key, then the gains.
struct KeyAndGains(QueryKey, Vec<u8>);

impl<'de> Deserialize<'de> for KeyAndGains {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserialize_byte_string(deserializer, "a pending impression's query key and gains", |bytes| {
            let (query, gains) = bytes.split_first_chunk::<KEY_BYTES>()?;
            Some(KeyAndGains(QueryKey::from_le_bytes(*query), gains.to_vec()))
        })
    }
}

/// A pending impression as formats 3 to 7 wrote it: every field a varint, the first engagement
/// absolute.
#[derive(Deserialize)]
struct RecordInV7 {
    query: QueryKey,
    timestamp: EventTime,
    first_engagement: EventTime,
    group: GroupId,
    unit: u32,
    slots: Vec<u64>,
}

/// A pending impression of format 7 or before, read back (`crate::engine`'s `compat`).
#[derive(Deserialize)]
#[serde(from = "RecordInV7")]
pub struct PendingRecordV7(PendingRecord);

impl From<RecordInV7> for PendingRecordV7 {
    fn from(r: RecordInV7) -> Self {
        let RecordInV7 { query, timestamp, first_engagement, group, unit, slots } = r;
        PendingRecordV7(PendingRecord { header: Taken { query, timestamp, first_engagement, group, unit }, slots })
    }
}

impl From<PendingRecordV7> for PendingRecord {
    fn from(record: PendingRecordV7) -> Self {
        record.0
    }
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
            RecordOut::new(Taken::read(record), record.get(HEADER_WORDS..).unwrap_or_default())
        };
        let mut tuple = serializer.serialize_tuple(2)?;
        tuple.serialize_element(&SeqOf(self.queue.run().map(record)))?;
        tuple.serialize_element(&SeqOf(self.queue.stragglers().map(|due| (due.deadline, record(due.id)))))?;
        tuple.end()
    }
}

impl<'de> Deserialize<'de> for PendingSet {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_tuple(2, Parts::<PendingRecord>(PhantomData))
    }
}

/// A pending set of format 7 or before, read back (`crate::engine`'s `compat`).
pub struct PendingSetV7(pub(in crate::join) PendingSet);

impl<'de> Deserialize<'de> for PendingSetV7 {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_tuple(2, Parts::<PendingRecordV7>(PhantomData)).map(PendingSetV7)
    }
}

/// Reads the run and the stragglers, each record in layout `R`.
struct Parts<R>(PhantomData<R>);

impl<'de, R: Deserialize<'de> + Into<PendingRecord>> Visitor<'de> for Parts<R> {
    type Value = PendingSet;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the run and the stragglers of pending impressions")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<PendingSet, A::Error> {
        let mut set = PendingSet::default();
        for (i, stragglers) in [false, true].into_iter().enumerate() {
            seq.next_element_seed(RecordsIn::<R> { set: &mut set, stragglers, layout: PhantomData })?
                .ok_or_else(|| A::Error::invalid_length(i, &self))?;
        }
        Ok(set)
    }
}

/// Reads one sequence of records into a set, appending them to the run or the heap array: the
/// same place as when written, so the run stays sorted and the heap array a heap.
struct RecordsIn<'a, R> {
    /// The set being restored.
    set: &'a mut PendingSet,
    /// Whether these are the stragglers (each with its deadline), else the run.
    stragglers: bool,
    /// The records' layout.
    layout: PhantomData<R>,
}

impl<'de, R: Deserialize<'de> + Into<PendingRecord>> DeserializeSeed<'de> for RecordsIn<'_, R> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de, R: Deserialize<'de> + Into<PendingRecord>> Visitor<'de> for RecordsIn<'_, R> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a sequence of pending impressions")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let set = self.set;
        if self.stragglers {
            while let Some((deadline, record)) = seq.next_element::<(EventTime, R)>()? {
                let id = set.restore(record.into()).map_err(A::Error::custom)?;
                set.queue.restore_straggler(Due { deadline, id });
            }
        } else {
            while let Some(record) = seq.next_element::<R>()? {
                let id = set.restore(record.into()).map_err(A::Error::custom)?;
                set.queue.restore_run(id);
            }
        }
        Ok(())
    }
}

/// Format 7's layout written as that build did, for the tests.
#[cfg(test)]
mod tests_support {
    use super::*;

    /// The record format 7 wrote, for the test below.
    #[derive(Serialize)]
    pub(super) struct RecordOutV7<'a> {
        query: QueryKey,
        timestamp: EventTime,
        first_engagement: EventTime,
        group: GroupId,
        unit: u32,
        slots: &'a [u64],
    }

    /// `n` pending impressions of ten results with uniform hashes: 128-bit keys and 32-bit
    /// units with their top bit set, 56-bit document hashes (the widest varints).
    pub(super) fn uniform_set(n: u128) -> PendingSet {
        let mut set = PendingSet::default();
        for q in 1..=n {
            let query = q.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c834) | (1 << 127);
            let docs: Vec<u64> =
                (0..10u64).map(|d| (q as u64 * 31 + d).wrapping_mul(0x9e37_79b9_7f4a_7c15) | (1 << 55)).collect();
            let unit = (q as u32).wrapping_mul(0x9e37_79b9) | (1 << 31);
            set.insert(query, 1_767_225_600_000 + q as i64, 0, unit, &docs, &[], super::super::tests::WINDOW);
        }
        set
    }

    /// A set of format 7's layout, written as that build did.
    pub(super) fn written_as_v7(set: &PendingSet) -> Vec<u8> {
        let record = |id: u32| {
            let record = set.arena.record(id);
            let Taken { query, timestamp, first_engagement, group, unit } = Taken::read(record);
            RecordOutV7 { query, timestamp, first_engagement, group, unit, slots: &record[HEADER_WORDS..] }
        };
        let run: Vec<_> = set.queue.run().map(record).collect();
        let stragglers: Vec<_> = set.queue.stragglers().map(|due| (due.deadline, record(due.id))).collect();
        postcard::to_stdvec(&(run, stragglers)).unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{check, docs, take, WINDOW};
    use super::tests_support::{uniform_set, written_as_v7};
    use super::*;

    /// A set with stragglers, engagements, teams and units of every width.
    fn varied_set() -> PendingSet {
        let mut set = PendingSet::default();
        for q in 0..300u128 {
            let query = q.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c834) ^ (q << 100);
            // Every fifth arrives out of order: a straggler behind the run.
            let timestamp = 1_767_225_600_000 + if q % 5 == 4 { q as i64 * 10 - 400 } else { q as i64 * 10 };
            let unit = if q % 2 == 0 { 0 } else { (q as u32).wrapping_mul(0x9e37_79b9) };
            let teams: Vec<u8> = if q % 3 == 0 { vec![1, 2, 1, 2, 1] } else { vec![] };
            let id = set.insert(query, timestamp, q as u32 % 4, unit, &docs(q as usize % 6 + 1), &teams, WINDOW);
            if q % 4 == 1 {
                let mut p = set.get_mut(id.unwrap());
                p.raise_gain(1, 30);
                p.note_engagement(timestamp + q as i64 * 1000);
            }
        }
        check(&set);
        set
    }

    fn drained(mut set: PendingSet) -> Vec<(Taken, Vec<u8>)> {
        std::iter::from_fn(|| take(&mut set)).collect()
    }

    #[test]
    fn both_layouts_read_back_the_same_set() {
        let set = varied_set();
        let current: PendingSet = postcard::from_bytes(&postcard::to_stdvec(&set).unwrap()).unwrap();
        let PendingSetV7(old) = postcard::from_bytes(&written_as_v7(&set)).unwrap();
        check(&current);
        check(&old);
        let expected = drained(varied_set());
        assert_eq!(drained(current), expected);
        assert_eq!(drained(old), expected);
    }

    #[test]
    fn format_10_is_smaller_by_what_the_hashes_and_the_absent_engagement_took() {
        let set = uniform_set(1000);
        let per_record = |bytes: usize| bytes as f64 / 1000.0;
        let (old, new) = (per_record(written_as_v7(&set).len()), per_record(postcard::to_stdvec(&set).unwrap().len()));
        // Key, timestamp, engagement, group, unit, count, slots: 19 + 6 + 10 + 1 + 5 + 1 + 10 * 8
        // = 122 before; timestamp, engagement, group, length, key, unit, slots: 6 + 1 + 1 + 1 +
        // 16 + 4 + 10 * 8 = 109 now.
        assert!((121.9..122.1).contains(&old), "{old}");
        assert!((108.9..109.1).contains(&new), "{new}");
    }

    #[test]
    fn an_engagement_delay_beyond_i64_is_refused_and_none_is_kept() {
        assert_eq!(first_engagement(5, 0), Some(NO_ENGAGEMENT));
        assert_eq!(first_engagement(5, 1), Some(5));
        assert_eq!(first_engagement(5, engagement_code(5, 1_005)), Some(1_005));
        assert_eq!(engagement_code(5, NO_ENGAGEMENT), 0);
        assert_eq!(first_engagement(i64::MAX - 3, 10), None);
        assert_eq!(first_engagement(0, u64::MAX), None);
        let record = PendingRecord {
            header: Taken { query: 1, timestamp: i64::MAX - 3, first_engagement: NO_ENGAGEMENT, group: 0, unit: 0 },
            slots: vec![],
        };
        let mut bytes = postcard::to_stdvec(&record).unwrap();
        // The engagement code follows the timestamp's 10-byte varint.
        assert_eq!(bytes[10], 0);
        bytes[10] = 10;
        assert!(postcard::from_bytes::<PendingRecord>(&bytes).is_err());
        bytes[10] = 3;
        let read = postcard::from_bytes::<PendingRecord>(&bytes).unwrap();
        assert_eq!(read.header.first_engagement, i64::MAX - 1);
    }
}

/// How long a million pending impressions take to decode in each layout (release, ignored:
/// `cargo test --release --lib decoding_a_million -- --ignored --nocapture`).
#[cfg(test)]
mod timing {
    use super::tests_support::{uniform_set, written_as_v7};
    use super::*;

    #[test]
    #[ignore]
    fn decoding_a_million_pending_impressions_in_both_layouts() {
        let set = uniform_set(1_000_000);
        let new = postcard::to_stdvec(&set).unwrap();
        let old = written_as_v7(&set);
        for _ in 0..3 {
            let t = std::time::Instant::now();
            let s: PendingSet = postcard::from_bytes(&new).unwrap();
            let a = t.elapsed();
            drop(s);
            let t = std::time::Instant::now();
            let s: PendingSetV7 = postcard::from_bytes(&old).unwrap();
            let b = t.elapsed();
            drop(s);
            eprintln!("new {a:?} ({} B)  old {b:?} ({} B)", new.len(), old.len());
        }
    }
}
