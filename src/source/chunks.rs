//! Snapshot chunks: the record format of the changelog and aggregates topics, and the two ways
//! records are put back together. No Kafka client here: what a broker hands back is bytes, and
//! everything done with them before [`crate::checkpoint::decode`] is in this file, so it can be
//! tested and fuzzed without a broker (`crate::fuzzing`).
//!
//! A record is a [`ChunkHeader`] (magic `RPCL`, the snapshot's sequence and nonce, the chunk's
//! index and the chunk count, little-endian) and a piece of the snapshot's bytes. The changelog
//! reader collects chunks by snapshot in a [`Tail`] and takes a snapshot once it holds every
//! chunk; the aggregates reader, whose records' chunks are consecutive, uses [`InOrder`].
//!
//! The rule against panics (below) holds here: every record comes from a topic anyone with
//! write access can fill. The header's count and index are only compared, never used to size or
//! index anything, so a count of `u32::MAX` costs nothing: memory grows with the bytes actually
//! received, not with what a header claims.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]

use std::collections::{BTreeMap, HashMap};

/// Payload bytes per chunk: with the header and Kafka's record overhead, below the brokers'
/// default `message.max.bytes` (1 MB), so no broker setting has to change.
pub const CHUNK_BYTES: usize = 900 * 1024;
/// Marks a changelog record as a rankpulse snapshot chunk.
const MAGIC: [u8; 4] = *b"RPCL";
/// magic, sequence (u64), nonce (u64), chunk index (u32), chunk count (u32), little-endian.
pub const HEADER_LEN: usize = 4 + 8 + 8 + 4 + 4;

/// Identifies one snapshot among those of a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct SnapshotId {
    /// One above the newest sequence the writer saw in the partition: chooses the key slot.
    pub sequence: u64,
    /// Random: tells apart two snapshots that got the same sequence from two writers.
    pub nonce: u64,
}

/// The header of one chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkHeader {
    /// The snapshot the chunk belongs to.
    pub snapshot: SnapshotId,
    /// This chunk's place in the snapshot.
    pub index: u32,
    /// How many chunks the snapshot has.
    pub count: u32,
}

/// A snapshot too large to split into `u32` chunks (beyond 3 PB: only a bug gets there).
#[derive(Debug, thiserror::Error)]
#[error("a snapshot of {0} bytes has more than 2^32 chunks")]
pub struct TooManyChunks(pub usize);

impl ChunkHeader {
    /// Appends the header to a record.
    pub fn write(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&self.snapshot.sequence.to_le_bytes());
        out.extend_from_slice(&self.snapshot.nonce.to_le_bytes());
        out.extend_from_slice(&self.index.to_le_bytes());
        out.extend_from_slice(&self.count.to_le_bytes());
    }

    /// The header and the payload of a record, or `None` if it is not a chunk (too short,
    /// another magic, a count of 0 or an index not below the count).
    pub fn read(bytes: &[u8]) -> Option<(ChunkHeader, &[u8])> {
        let (magic, rest) = bytes.split_first_chunk::<4>()?;
        if *magic != MAGIC {
            return None;
        }
        let (sequence, rest) = rest.split_first_chunk::<8>()?;
        let (nonce, rest) = rest.split_first_chunk::<8>()?;
        let (index, rest) = rest.split_first_chunk::<4>()?;
        let (count, payload) = rest.split_first_chunk::<4>()?;
        let header = ChunkHeader {
            snapshot: SnapshotId { sequence: u64::from_le_bytes(*sequence), nonce: u64::from_le_bytes(*nonce) },
            index: u32::from_le_bytes(*index),
            count: u32::from_le_bytes(*count),
        };
        (header.count > 0 && header.index < header.count).then_some((header, payload))
    }
}

/// Splits a snapshot into chunk records (header and payload) of at most [`CHUNK_BYTES`].
pub fn chunk_records(snapshot: SnapshotId, bytes: &[u8]) -> Result<Vec<Vec<u8>>, TooManyChunks> {
    chunk_records_of(snapshot, bytes, CHUNK_BYTES)
}

/// [`chunk_records`] with chunks of at most `chunk_bytes` (at least 1), for tests and fuzzing
/// seeds that want several chunks of a small snapshot.
pub fn chunk_records_of(snapshot: SnapshotId, bytes: &[u8], chunk_bytes: usize) -> Result<Vec<Vec<u8>>, TooManyChunks> {
    let chunks: Vec<&[u8]> = if bytes.is_empty() { vec![bytes] } else { bytes.chunks(chunk_bytes.max(1)).collect() };
    let count = u32::try_from(chunks.len()).map_err(|_| TooManyChunks(bytes.len()))?;
    Ok((0..count)
        .zip(chunks)
        .map(|(index, chunk)| {
            let mut record = Vec::with_capacity(HEADER_LEN + chunk.len());
            ChunkHeader { snapshot, index, count }.write(&mut record);
            record.extend_from_slice(chunk);
            record
        })
        .collect())
}

/// The chunks read from the end of one changelog partition, by snapshot.
#[derive(Default)]
pub struct Tail {
    /// Snapshot → chunk index → (offset, payload). A chunk read twice (the ranges read overlap
    /// nothing, but a redelivered record could) keeps its first copy.
    snapshots: HashMap<SnapshotId, BTreeMap<u32, (i64, Vec<u8>)>>,
    /// Chunk count per snapshot.
    counts: HashMap<SnapshotId, u32>,
    /// The highest sequence seen, complete or not.
    newest_sequence: Option<u64>,
}

impl Tail {
    /// Keeps one chunk read at `offset`.
    pub fn add(&mut self, offset: i64, header: ChunkHeader, payload: &[u8]) {
        self.counts.insert(header.snapshot, header.count);
        self.newest_sequence = self.newest_sequence.max(Some(header.snapshot.sequence));
        self.snapshots.entry(header.snapshot).or_default().entry(header.index).or_insert((offset, payload.to_vec()));
    }

    /// The highest sequence seen, complete or not.
    pub fn newest_sequence(&self) -> Option<u64> {
        self.newest_sequence
    }

    /// The sequence of the next snapshot written after those seen: one above the highest, 0
    /// after `u64::MAX` (a sequence only chooses a key slot, which still alternates).
    pub fn next_sequence(&self) -> Option<u64> {
        self.newest_sequence.map(|newest| newest.wrapping_add(1))
    }

    /// The complete snapshots read so far, the one written last first: (id, first offset).
    pub fn complete(&self) -> Vec<(SnapshotId, i64)> {
        let mut out = Vec::new();
        for (&id, chunks) in &self.snapshots {
            let Some(&count) = self.counts.get(&id) else { continue };
            if chunks.len() == count as usize && chunks.keys().copied().eq(0..count) {
                out.push((id, chunks.values().next().map_or(0, |(o, _)| *o)));
            }
        }
        out.sort_by_key(|&(_, first)| std::cmp::Reverse(first));
        out
    }

    /// The payload of a snapshot's first chunk (empty for one never seen).
    pub fn first_chunk(&self, id: SnapshotId) -> &[u8] {
        self.snapshots.get(&id).and_then(|chunks| chunks.get(&0)).map_or(&[], |(_, payload)| payload.as_slice())
    }

    /// A snapshot's bytes, its chunks joined in order (only for the one being tried: a snapshot
    /// can be hundreds of megabytes); empty for a snapshot never seen.
    pub fn assemble(&self, id: SnapshotId) -> Vec<u8> {
        let Some(chunks) = self.snapshots.get(&id) else { return Vec::new() };
        let mut bytes = Vec::with_capacity(chunks.values().map(|(_, p)| p.len()).sum());
        for (_, payload) in chunks.values() {
            bytes.extend_from_slice(payload);
        }
        bytes
    }
}

/// Reassembles records whose chunks arrive consecutively within a partition (the aggregates
/// topic, read forwards): a record is complete when its last chunk arrives; a chunk that does
/// not continue the record being read (a record whose start was not seen, or an interrupted
/// write) drops it.
#[derive(Default)]
pub struct InOrder {
    /// The record being read, per partition.
    partial: HashMap<i32, Partial>,
}

/// A record being reassembled from its chunks.
struct Partial {
    /// The record's id: chunks of another id start a new record.
    id: SnapshotId,
    /// Chunk count.
    count: u32,
    /// The chunks so far, in order.
    bytes: Vec<u8>,
    /// The next chunk index expected.
    next: u32,
}

impl InOrder {
    /// Takes the next chunk of a partition; the record's bytes when it completes one.
    pub fn add(&mut self, partition: i32, header: ChunkHeader, payload: &[u8]) -> Option<Vec<u8>> {
        if header.index == 0 {
            let id = header.snapshot;
            self.partial.insert(partition, Partial { id, count: header.count, bytes: Vec::new(), next: 0 });
        }
        let record = self.partial.get_mut(&partition)?;
        if record.id != header.snapshot || record.next != header.index {
            self.partial.remove(&partition);
            return None;
        }
        record.bytes.extend_from_slice(payload);
        // `next` is a valid index, below the count, so this cannot overflow.
        record.next += 1;
        if record.next < record.count {
            return None;
        }
        self.partial.remove(&partition).map(|record| record.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_reassemble_and_incomplete_snapshots_are_not_taken() {
        let bytes: Vec<u8> = (0..CHUNK_BYTES * 2 + 10).map(|i| (i % 251) as u8).collect();
        let id = |sequence| SnapshotId { sequence, nonce: 99 };
        let records = chunk_records(id(7), &bytes).unwrap();
        assert_eq!(records.len(), 3);
        let mut tail = Tail::default();
        for (offset, record) in records.iter().enumerate() {
            let (header, payload) = ChunkHeader::read(record).unwrap();
            tail.add(10 + offset as i64, header, payload);
        }
        // A newer snapshot whose last chunk never arrived (a crash mid-write).
        let newer = chunk_records(id(8), &bytes).unwrap();
        for (offset, record) in newer.iter().take(2).enumerate() {
            let (header, payload) = ChunkHeader::read(record).unwrap();
            tail.add(20 + offset as i64, header, payload);
        }
        let complete = tail.complete();
        assert_eq!(complete, [(id(7), 10)]);
        assert_eq!(tail.assemble(id(7)), bytes);
        // Another writer's snapshot with the same sequence, written later: a snapshot of its
        // own, and the newest, judged by where it was written.
        let same_sequence = chunk_records(SnapshotId { sequence: 7, nonce: 1 }, b"other").unwrap();
        let (header, payload) = ChunkHeader::read(&same_sequence[0]).unwrap();
        tail.add(30, header, payload);
        let complete = tail.complete();
        assert_eq!((complete[0].1, tail.assemble(complete[0].0).as_slice()), (30, &b"other"[..]));
        assert_eq!((complete[1].1, tail.assemble(complete[1].0).len()), (10, bytes.len()));
        assert_eq!((tail.newest_sequence(), tail.next_sequence()), (Some(8), Some(9)));
        assert!(ChunkHeader::read(b"RPCLxxxx").is_none(), "truncated header");
        let mut zero_count = records[0].clone();
        zero_count[24..28].copy_from_slice(&0u32.to_le_bytes());
        assert!(ChunkHeader::read(&zero_count).is_none(), "a chunk count of 0 is no chunk");
        assert_eq!(chunk_records(id(1), &[]).unwrap().len(), 1, "an empty snapshot is one empty chunk");
        assert!(tail.assemble(id(99)).is_empty(), "a snapshot never seen");
    }

    #[test]
    fn a_huge_chunk_count_allocates_nothing_and_completes_nothing() {
        let mut tail = Tail::default();
        let mut in_order = InOrder::default();
        let id = SnapshotId { sequence: u64::MAX, nonce: u64::MAX };
        for index in [0, 1, u32::MAX - 1] {
            let header = ChunkHeader { snapshot: id, index, count: u32::MAX };
            let mut record = Vec::new();
            header.write(&mut record);
            record.extend_from_slice(b"payload");
            let (read, payload) = ChunkHeader::read(&record).unwrap();
            assert_eq!((read, payload), (header, &b"payload"[..]));
            tail.add(i64::from(index), read, payload);
            assert_eq!(in_order.add(0, read, payload), None);
        }
        assert!(tail.complete().is_empty());
        // Found by review: `newest + 1` overflowed here (a panic in debug builds).
        assert_eq!((tail.newest_sequence(), tail.next_sequence()), (Some(u64::MAX), Some(0)));
    }

    #[test]
    fn records_read_in_order_complete_on_their_last_chunk() {
        let id = |sequence| SnapshotId { sequence, nonce: 5 };
        let records = chunk_records_of(id(1), b"abcdefgh", 3).unwrap();
        assert_eq!(records.len(), 3);
        let mut in_order = InOrder::default();
        let mut add = |partition, record: &[u8]| {
            let (header, payload) = ChunkHeader::read(record).unwrap();
            in_order.add(partition, header, payload)
        };
        // A chunk whose record's start was not seen is dropped.
        assert_eq!(add(0, &records[1]), None);
        assert_eq!(add(0, &records[0]), None);
        // Another partition's chunks in between do not disturb it.
        assert_eq!(add(1, &chunk_records(id(2), b"x").unwrap()[0]), Some(b"x".to_vec()));
        assert_eq!(add(0, &records[1]), None);
        assert_eq!(add(0, &records[2]), Some(b"abcdefgh".to_vec()));
        // An interrupted record (a chunk skipped) is never completed.
        assert_eq!(add(0, &records[0]), None);
        assert_eq!(add(0, &records[2]), None);
        assert_eq!(add(0, &records[1]), None);
    }
}
