//! The changelog's records: what one partition's record says, in format 10, and how a reader
//! finds the records a partition's state is made of.
//!
//! Format 10 (`checkpoint::CHANGELOG_FORMAT_VERSION`): a record is a partition's **snapshot**
//! (its whole state and the offsets it covers, as format 5's records were) or its **delta**
//! since one: the changes of its state since the record before it (`previous`: the snapshot,
//! or the delta before), the snapshot they all follow (`base`) and the offsets covered. A
//! partition's state is its newest complete snapshot with the chain of deltas that follows it,
//! each naming the one before ([`resolve_chain`]). Records of format 5 are snapshots, and
//! are still read; so are those of format 6, whose deltas carried the totals whole (later ones
//! carry the operations on them, `crate::engine`'s `delta`), and those of format 7, whose
//! pending impressions were written in a larger layout (`crate::join`'s `pending::wire`): a
//! chain written by the builds before is read on, each record upgraded as it is decoded.
//!
//! The encoded record (postcard) is an enum: the variant's index, then its fields. A delta's
//! first fields are its links, so a reader learns them from its first chunk without decoding
//! the state ([`peek_links`]). The bytes are untrusted: this file is under the no-panic rule (crate
//! documentation, "Hostile input").
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]

use serde::{Deserialize, Serialize};

use super::chunks::SnapshotId;
use crate::checkpoint::{
    self, DecodeError, CHANGELOG_FORMAT_V6, CHANGELOG_FORMAT_V7, CHANGELOG_FORMAT_VERSION, FORMAT_VERSION,
};
use crate::engine::{AnyDelta, TaskDelta, TaskDeltaV6, TaskDeltaV7, TaskRecordV5, TaskRecordV7, TaskSnapshot};

/// The versions of the changelog's records this build reads, as its errors name them.
const READS: &str = "5, 6, 7 and 10";

/// One partition's record as written (borrowed, no copy).
#[derive(Serialize)]
pub enum RecordRef<S: Serialize, D: Serialize> {
    /// The partition's whole state.
    Snapshot {
        /// Where the partition's inputs resume: the next offset of each, if any was consumed.
        positions: [Option<i64>; 2],
        /// `Engine::snapshot_partition`.
        task: S,
    },
    /// The partition's changes since `previous`.
    Delta {
        /// The snapshot the chain starts from.
        base: SnapshotId,
        /// The record this one follows: `base`, or the delta before.
        previous: SnapshotId,
        /// Where the partition's inputs resume.
        positions: [Option<i64>; 2],
        /// `Engine::delta_partition`.
        task: D,
    },
}

/// Encodes a record in format 10.
pub fn encode<S: Serialize, D: Serialize>(record: &RecordRef<S, D>) -> Vec<u8> {
    checkpoint::encode_as(CHANGELOG_FORMAT_VERSION, record)
}

/// One partition's snapshot, as read back.
#[derive(Deserialize)]
pub struct PartitionSnapshot {
    /// Where the partition's inputs resume.
    pub positions: [Option<i64>; 2],
    /// Its state, for `Engine::restore_partition`.
    pub task: TaskSnapshot,
}

/// One partition's snapshot of an older format (5: `T` is `TaskRecordV5`; 6 and 7:
/// `TaskRecordV7`), as read back and upgraded by [`decode`].
#[derive(Deserialize)]
struct OlderSnapshot<T> {
    positions: [Option<i64>; 2],
    task: T,
}

impl<T> From<Box<OlderSnapshot<T>>> for Box<PartitionSnapshot>
where
    TaskSnapshot: From<T>,
{
    fn from(old: Box<OlderSnapshot<T>>) -> Self {
        let OlderSnapshot { positions, task } = *old;
        Box::new(PartitionSnapshot { positions, task: TaskSnapshot::from(task) })
    }
}

/// One partition's delta, as read back.
pub struct PartitionDelta {
    /// The snapshot the chain starts from.
    pub base: SnapshotId,
    /// The record it follows.
    pub previous: SnapshotId,
    /// Where the partition's inputs resume.
    pub positions: [Option<i64>; 2],
    /// Its changes, for `Engine::apply_delta`.
    pub task: AnyDelta,
}

/// A record as read back (boxed: both are large, and moved along).
pub enum Record {
    Snapshot(Box<PartitionSnapshot>),
    Delta(Box<PartitionDelta>),
}

/// A record as written in format `N` (6, 7 or 10), the snapshot of type `S`, the delta's
/// changes of type `D`.
#[derive(Deserialize)]
enum Written<S, D> {
    Snapshot(Box<S>),
    Delta { base: SnapshotId, previous: SnapshotId, positions: [Option<i64>; 2], task: Box<D> },
}

impl<S, D> Written<S, D> {
    /// The record, its snapshot or delta in this build's types.
    fn into_record(self, any: impl FnOnce(Box<D>) -> AnyDelta) -> Record
    where
        Box<S>: Into<Box<PartitionSnapshot>>,
    {
        match self {
            Written::Snapshot(snapshot) => Record::Snapshot(snapshot.into()),
            Written::Delta { base, previous, positions, task } => {
                Record::Delta(Box::new(PartitionDelta { base, previous, positions, task: any(task) }))
            }
        }
    }
}

/// Decodes a record of format 5 (a snapshot), 6, 7 or 10, upgrading the older ones.
pub fn decode(bytes: &[u8]) -> Result<Record, DecodeError> {
    let readable = [FORMAT_VERSION, CHANGELOG_FORMAT_V6, CHANGELOG_FORMAT_V7, CHANGELOG_FORMAT_VERSION];
    let (version, payload) = checkpoint::open(bytes, &readable, READS)?;
    match version {
        FORMAT_VERSION => {
            let snapshot: Box<OlderSnapshot<TaskRecordV5>> = checkpoint::decode_payload(payload)?;
            Ok(Record::Snapshot(snapshot.into()))
        }
        CHANGELOG_FORMAT_V6 => {
            let written: Written<OlderSnapshot<TaskRecordV7>, TaskDeltaV6> = checkpoint::decode_payload(payload)?;
            Ok(written.into_record(AnyDelta::V6))
        }
        CHANGELOG_FORMAT_V7 => {
            let written: Written<OlderSnapshot<TaskRecordV7>, TaskDeltaV7> = checkpoint::decode_payload(payload)?;
            Ok(written.into_record(|delta| AnyDelta::Operations(Box::new(delta.upgrade()))))
        }
        _ => {
            let written: Written<PartitionSnapshot, TaskDelta> = checkpoint::decode_payload(payload)?;
            Ok(written.into_record(AnyDelta::Operations))
        }
    }
}

/// Decodes a record that must be a snapshot (a delta is refused as undecodable here): how tests
/// and the fuzz targets read [`crate::source::encode_partition`]'s records.
pub fn decode_snapshot(bytes: &[u8]) -> Result<PartitionSnapshot, DecodeError> {
    match decode(bytes)? {
        Record::Snapshot(snapshot) => Ok(*snapshot),
        Record::Delta(_) => Err(DecodeError::Undecodable("a delta where a snapshot was expected".into())),
    }
}

/// What a record is, read from its first fields alone ([`peek_links`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Links {
    /// A snapshot: a chain may start from it.
    Snapshot,
    /// A delta of the chain from `base`, following `previous`.
    Delta { base: SnapshotId, previous: SnapshotId },
}

/// The first fields of a record of format 6, 7 or 10 (the rest is left unread).
#[derive(Deserialize)]
enum Head {
    Snapshot(()),
    Delta { base: SnapshotId, previous: SnapshotId },
}

/// What a record is, from its first bytes alone (its first chunk), unverified: how a reader
/// chooses which records to decode, each of which is then verified whole. `None` when the
/// bytes are too short or not a record of a version this build reads.
pub fn peek_links(first_bytes: &[u8]) -> Option<Links> {
    let header = first_bytes.get(..checkpoint::HEADER_LEN)?;
    let version = u32::from_le_bytes(header.get(8..12)?.try_into().ok()?);
    if version == FORMAT_VERSION {
        return Some(Links::Snapshot);
    }
    if ![CHANGELOG_FORMAT_V6, CHANGELOG_FORMAT_V7, CHANGELOG_FORMAT_VERSION].contains(&version) {
        return None;
    }
    match postcard::take_from_bytes::<Head>(first_bytes.get(checkpoint::HEADER_LEN..)?).ok()?.0 {
        Head::Snapshot(()) => Some(Links::Snapshot),
        Head::Delta { base, previous } => Some(Links::Delta { base, previous }),
    }
}

/// The deltas that follow the snapshot `base` (written at `base_offset`), in order: from the
/// deltas read (id, first offset, links), those of its chain written after it, each following
/// the one before. Where two follow the same record (a writer that lost the partition and did
/// not know yet), the one written last is taken, as the newest snapshot is.
pub fn resolve_chain(base: SnapshotId, base_offset: i64, deltas: &[(SnapshotId, i64, Links)]) -> Vec<SnapshotId> {
    let mut chain = Vec::new();
    let mut tip = base;
    // Each step takes a record written after the one before, so the walk ends.
    let mut after = base_offset;
    loop {
        let next = deltas
            .iter()
            .filter(|(_, offset, links)| {
                *offset > after && matches!(links, Links::Delta { base: b, previous } if *b == base && *previous == tip)
            })
            .max_by_key(|(_, offset, _)| *offset);
        let Some(&(id, offset, _)) = next else { return chain };
        chain.push(id);
        tip = id;
        after = offset;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(sequence: u64) -> SnapshotId {
        SnapshotId { sequence, nonce: sequence * 31 }
    }

    #[test]
    fn the_chain_is_the_deltas_each_following_the_one_before() {
        let delta = |base: u64, previous: u64| Links::Delta { base: id(base), previous: id(previous) };
        let deltas = [
            (id(2), 20, delta(1, 1)),
            (id(3), 30, delta(1, 2)),
            // Another chain's delta, and a delta of this chain following a record never written.
            (id(9), 35, delta(8, 8)),
            (id(10), 36, delta(1, 7)),
            (id(4), 40, delta(1, 3)),
        ];
        assert_eq!(resolve_chain(id(1), 10, &deltas), [id(2), id(3), id(4)]);
        // A delta written before its base is not of it (the sequence came round, or a forgery).
        assert_eq!(resolve_chain(id(1), 25, &deltas), Vec::<SnapshotId>::new());
        // Two writers followed delta 3: the one written last is taken, and its chain goes on.
        let forked = [
            (id(2), 20, delta(1, 1)),
            (id(3), 30, delta(1, 2)),
            (id(4), 40, delta(1, 3)),
            (id(5), 50, delta(1, 3)),
            (id(6), 60, delta(1, 5)),
        ];
        assert_eq!(resolve_chain(id(1), 10, &forked), [id(2), id(3), id(5), id(6)]);
    }

    /// What a build of format 5 does with a record of 10: its reader was `checkpoint::decode`
    /// with `FORMAT_VERSION` 5, which this build keeps for the aggregates records.
    #[test]
    fn a_reader_of_format_5_refuses_the_new_records_by_their_version() {
        let delta = encode::<(), u8>(&RecordRef::Delta { base: id(1), previous: id(1), positions: [None; 2], task: 0 });
        let snapshot = encode::<u8, ()>(&RecordRef::Snapshot { positions: [None; 2], task: 0 });
        for record in [delta, snapshot] {
            let err = checkpoint::decode::<([Option<i64>; 2], u8)>(&record).err().unwrap().to_string();
            assert!(err.contains("incompatible rankpulse (format version 10, this one reads 5)"), "{err}");
        }
    }

    /// What the release before (format 7, reading 5, 6 and 7) does with a record of 10: its
    /// reader opened the record with those versions only.
    #[test]
    fn a_reader_of_format_7_refuses_the_new_records_by_their_version() {
        let delta = encode::<(), u8>(&RecordRef::Delta { base: id(1), previous: id(1), positions: [None; 2], task: 0 });
        let snapshot = encode::<u8, ()>(&RecordRef::Snapshot { positions: [None; 2], task: 0 });
        for record in [delta, snapshot] {
            let err =
                checkpoint::open(&record, &[FORMAT_VERSION, CHANGELOG_FORMAT_V6, CHANGELOG_FORMAT_V7], "5, 6 and 7")
                    .err()
                    .unwrap()
                    .to_string();
            assert!(err.contains("incompatible rankpulse (format version 10, this one reads 5, 6 and 7)"), "{err}");
        }
    }

    #[test]
    fn a_records_links_are_read_without_its_state() {
        let snapshot = encode::<(), ()>(&RecordRef::Snapshot { positions: [Some(1), None], task: () });
        assert_eq!(peek_links(&snapshot), Some(Links::Snapshot));
        let delta =
            encode::<(), u8>(&RecordRef::Delta { base: id(1), previous: id(2), positions: [None, Some(7)], task: 5 });
        // The links are read from the first bytes: the rest may be in later chunks.
        let links_end = checkpoint::HEADER_LEN + 1 + 4;
        assert_eq!(peek_links(&delta[..links_end]), Some(Links::Delta { base: id(1), previous: id(2) }));
        assert_eq!(peek_links(&delta[..20]), None);
        // A format 5 record is a snapshot; format 6 and 7 ones have the same links (their deltas
        // differ after them); another version is none this build reads.
        assert_eq!(peek_links(&checkpoint::encode(&((), ()))), Some(Links::Snapshot));
        for version in [6u32, 7] {
            let mut older = delta.clone();
            older[8..12].copy_from_slice(&version.to_le_bytes());
            assert_eq!(peek_links(&older), Some(Links::Delta { base: id(1), previous: id(2) }));
        }
        let mut other = delta.clone();
        other[8..12].copy_from_slice(&8u32.to_le_bytes());
        assert_eq!(peek_links(&other), None);
        let err = decode(&other).err().unwrap().to_string();
        assert!(err.contains("format version 8, this one reads 5, 6, 7 and 10"), "{err}");
    }
}
