//! The encoding of a state snapshot (the source's: one partition's state with the offsets of
//! its inputs, written to the changelog topic): a header that identifies and protects a
//! postcard payload. This module knows how to keep bytes safe, not what they mean.
//!
//! The header is 28 bytes: magic `RPULSECK`, format version, payload length, xxh3-64 checksum
//! of the payload, all little-endian. A snapshot damaged on the way (truncated, bit-flipped) is
//! detected by its checksum and reported, and the reader uses the one before; one of another
//! format version is an error that says so, rather than a silent start from scratch.
//!
//! The bytes read back are untrusted (the checksum is no signature): this file is under the
//! no-panic rule (crate documentation, "Hostile input"), and the header's length is compared,
//! never used to size anything.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]

use serde::de::DeserializeOwned;
use serde::Serialize;

const MAGIC: [u8; 8] = *b"RPULSECK";
/// Bumped whenever the payload layout changes (3: pending impressions as a deadline-ordered run
/// of records and a heap of records with their deadlines, no separate deadline heap; 4: state per
/// partition task, offsets beside the engine's state instead of inside its input clocks; 5: one
/// partition's state per snapshot, with its own totals, written to the changelog topic).
pub const FORMAT_VERSION: u32 = 5;

/// The changelog's records (6: a record is a partition's snapshot or its delta since one, see
/// `source::commit`; 7: a delta carries the operations on the totals rather than the totals;
/// 10: a pending impression's record writes its hashes fixed-width and its first engagement
/// as a delay, `join`'s `pending::wire`. 8 and 9 are the aggregates increments' versions).
/// Bumped apart from [`FORMAT_VERSION`], which the aggregates records keep: a build that reads
/// only version 5 refuses a changelog record of 6 (a delta applied to nothing would lose what
/// it carries), and still reads the aggregates records.
pub const CHANGELOG_FORMAT_VERSION: u32 = 10;

/// The changelog's records of format 6, still read (`source::record`).
pub const CHANGELOG_FORMAT_V6: u32 = 6;

/// The changelog's records of format 7, still read (`source::record`).
pub const CHANGELOG_FORMAT_V7: u32 = 7;
pub const HEADER_LEN: usize = 8 + 4 + 8 + 8;

/// The largest count (of messages, impressions, engagements...) a decoded snapshot or
/// aggregates record may carry: 2^53, beyond any process's reach (and beyond what a Prometheus
/// float holds exactly). What a restored state adds to or merges counts with then cannot
/// overflow, whatever the bytes said.
pub const MAX_COUNT: u64 = 1 << 53;

/// The largest magnitude of a decoded fixed-point sum: [`MAX_COUNT`] values of up to 2^57.
pub const MAX_SUM: u128 = 1 << 110;

/// Why decoded state (a snapshot's, an aggregates record's) cannot be used although its bytes
/// decoded: what it says is impossible for any rankpulse to have written, or does not fit the
/// configuration it is restored into. Bytes that pass the checksum can still be forged or come
/// from a buggy writer; every check of decoded state says what it refused with one of these,
/// and the state is refused whole.
///
/// `what` names the part of the state, as a phrase the message is built around.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Inconsistency {
    /// A count above [`MAX_COUNT`]: adding to it could overflow.
    #[error("{what} is {value}, more than any state can hold")]
    Count { what: &'static str, value: u64 },
    /// A fixed-point sum beyond [`MAX_SUM`] in magnitude.
    #[error("{what} is {value}, more than any state can hold")]
    Sum { what: &'static str, value: i128 },
    /// An unsigned total (of recorded values) above [`MAX_SUM`].
    #[error("{what} is {value}, more than any state can hold")]
    Total { what: &'static str, value: u128 },
    /// A length that is not the one this configuration makes (`found` of `what`, where
    /// `expected` were due: sums per metric slot, counters of a sketch...).
    #[error("{found} {what}, not {expected}")]
    Shape { what: &'static str, found: usize, expected: usize },
    /// A setting the state was made under that is not the configuration's, though the
    /// snapshot's fingerprint agreed (values as `Debug` prints them).
    #[error("{what} {found}, configured {configured}")]
    Configuration { what: &'static str, found: String, configured: String },
    /// More of something than its limit (a setting, or what ids can number) allows.
    #[error("{found} {what}, more than {limit} ({max})")]
    TooMany { what: &'static str, found: usize, limit: &'static str, max: usize },
    /// A count kept beside the data that the data does not match.
    #[error("{found} {what} counted as {kept}")]
    Recount { what: &'static str, found: usize, kept: usize },
    /// Entries read back in an order the code trusts, out of it.
    #[error("{what} are out of order")]
    Order { what: &'static str },
    /// A number that refers to one of `count` things (`limit` names them) and is not below it:
    /// a unit bucket beyond `ab.unit_buckets`, a window size index, a slot.
    #[error("{what} {index} beyond {limit} ({count})")]
    Beyond { what: &'static str, index: u64, limit: &'static str, count: u64 },
    /// An id the state refers to that is not named beside it (so renumbering would miss it).
    #[error("{what} {id} is not named")]
    Unnamed { what: &'static str, id: u64 },
    /// Something that is unique (a clause: "a group id is named") found twice.
    #[error("{what} twice")]
    Twice { what: &'static str },
    /// A reference (slot `index` of `what`) whose target does not refer back to it.
    #[error("{what} {index} does not refer back")]
    Dangling { what: &'static str, index: u64 },
    /// A value outside its range: `what` is not `expected`.
    #[error("{what} is not {expected}")]
    Value { what: &'static str, expected: &'static str },
}

/// Refuses a decoded count above [`MAX_COUNT`], naming it.
pub fn check_count(what: &'static str, value: u64) -> Result<(), Inconsistency> {
    if value > MAX_COUNT {
        return Err(Inconsistency::Count { what, value });
    }
    Ok(())
}

/// Refuses a decoded sum beyond [`MAX_SUM`] in magnitude, naming it.
pub fn check_sum(what: &'static str, value: i128) -> Result<(), Inconsistency> {
    if value.unsigned_abs() > MAX_SUM {
        return Err(Inconsistency::Sum { what, value });
    }
    Ok(())
}

/// Refuses a decoded unsigned total above [`MAX_SUM`], naming it.
pub fn check_total(what: &'static str, value: u128) -> Result<(), Inconsistency> {
    if value > MAX_SUM {
        return Err(Inconsistency::Total { what, value });
    }
    Ok(())
}

/// Why [`verify`] refuses bytes outright (rather than reporting damage).
#[derive(Debug)]
struct Incompatible {
    /// The format version found.
    found: u32,
}

/// Encodes a payload with the header (under whatever lock guards its state; the caller writes
/// it outside).
// Not input: this serializes the process's own state, which postcard fails on only for a
// sequence of unknown length, a bug in a `Serialize` impl here that must not go unnoticed.
#[allow(clippy::expect_used, reason = "serializes our own state, never input")]
pub fn encode(payload: &impl Serialize) -> Vec<u8> {
    encode_as(FORMAT_VERSION, payload)
}

/// [`encode`] with another format version in the header (the changelog's records).
#[allow(clippy::expect_used, reason = "serializes our own state, never input")]
pub fn encode_as(version: u32, payload: &impl Serialize) -> Vec<u8> {
    seal_as(version, &postcard::to_stdvec(payload).expect("checkpoint payloads always serialize"))
}

/// Puts the header (format version, length, checksum) in front of an encoded payload: what
/// [`encode`] writes, and what the fuzz targets use to reach the payload decoding behind a
/// checksum that random bytes never match.
pub fn seal(payload: &[u8]) -> Vec<u8> {
    seal_as(FORMAT_VERSION, payload)
}

/// [`seal`] with another format version.
pub fn seal_as(version: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&xxhash_rust::xxh3::xxh3_64(payload).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// Why encoded bytes (from a file or a changelog record) cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("damaged ({0:?}): truncated, or not written by rankpulse")]
    Damaged(Damage),
    #[error("written by an incompatible rankpulse (format version {0}, this one reads {1})")]
    Incompatible(u32, &'static str),
    #[error("valid checksum but does not decode ({0}): written by an incompatible build")]
    Undecodable(String),
}

/// Verifies and decodes bytes made by [`encode`].
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, DecodeError> {
    let (_, payload) = open(bytes, &[FORMAT_VERSION], "5")?;
    decode_payload(payload)
}

/// Verifies bytes made by [`encode_as`] with one of the `readable` versions (named in the
/// error as `reads`): their version and payload, for [`decode_payload`].
pub fn open<'a>(bytes: &'a [u8], readable: &[u32], reads: &'static str) -> Result<(u32, &'a [u8]), DecodeError> {
    match verify(bytes, readable) {
        Ok(Ok(opened)) => Ok(opened),
        Ok(Err(damage)) => Err(DecodeError::Damaged(damage)),
        Err(Incompatible { found }) => Err(DecodeError::Incompatible(found, reads)),
    }
}

/// Decodes a verified payload (see [`open`]).
pub fn decode_payload<T: DeserializeOwned>(payload: &[u8]) -> Result<T, DecodeError> {
    postcard::from_bytes(payload).map_err(|e| DecodeError::Undecodable(e.to_string()))
}

/// Bytes written as one byte string (postcard: their length, then the bytes), where a sequence
/// of `u8` would be as many calls: how the changelog's records write their fixed-width fields
/// (hashes, keys, gains), read back with [`deserialize_byte_string`].
pub struct ByteString<'a>(pub &'a [u8]);

impl Serialize for ByteString<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(self.0)
    }
}

/// Reads one byte string as `read` makes it out; bytes it gives `None` for (not what
/// `expecting` says) are refused as of the wrong length. The bytes are borrowed from the
/// input, not copied, until `read` takes what it keeps.
pub fn deserialize_byte_string<'de, D, T>(
    deserializer: D,
    expecting: &'static str,
    read: impl FnOnce(&[u8]) -> Option<T>,
) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
{
    struct Visit<F> {
        expecting: &'static str,
        read: F,
    }
    impl<T, F: FnOnce(&[u8]) -> Option<T>> serde::de::Visitor<'_> for Visit<F> {
        type Value = T;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.expecting)
        }
        fn visit_bytes<E: serde::de::Error>(self, bytes: &[u8]) -> Result<T, E> {
            let expecting = self.expecting;
            (self.read)(bytes).ok_or_else(|| E::invalid_length(bytes.len(), &expecting))
        }
    }
    deserializer.deserialize_bytes(Visit { expecting, read })
}

/// Why bytes are not a usable snapshot (the reader then tries an older one).
#[derive(Debug)]
pub enum Damage {
    Truncated,
    NotACheckpoint,
    ChecksumMismatch,
}

/// A header as read: nothing in it is trusted yet.
struct Header {
    magic: [u8; 8],
    version: u32,
    /// The payload length it claims.
    len: u64,
    checksum: u64,
}

/// The header and what follows it, `None` if the bytes are shorter than a header.
fn read_header(bytes: &[u8]) -> Option<(Header, &[u8])> {
    let (magic, rest) = bytes.split_first_chunk::<8>()?;
    let (version, rest) = rest.split_first_chunk::<4>()?;
    let (len, rest) = rest.split_first_chunk::<8>()?;
    let (checksum, payload) = rest.split_first_chunk::<8>()?;
    let header = Header {
        magic: *magic,
        version: u32::from_le_bytes(*version),
        len: u64::from_le_bytes(*len),
        checksum: u64::from_le_bytes(*checksum),
    };
    Some((header, payload))
}

/// Checks the header (a `readable` version) and checksum; returns the version and payload.
fn verify<'a>(bytes: &'a [u8], readable: &[u32]) -> Result<Result<(u32, &'a [u8]), Damage>, Incompatible> {
    let Some((header, payload)) = read_header(bytes) else {
        return Ok(Err(Damage::Truncated));
    };
    if header.magic != MAGIC {
        return Ok(Err(Damage::NotACheckpoint));
    }
    if !readable.contains(&header.version) {
        return Err(Incompatible { found: header.version });
    }
    // The length comes from the bytes: compared, never added to or allocated from, so a corrupt
    // one can neither overflow nor reserve memory.
    if u64::try_from(payload.len()) != Ok(header.len) {
        return Ok(Err(Damage::Truncated));
    }
    if xxhash_rust::xxh3::xxh3_64(payload) != header.checksum {
        return Ok(Err(Damage::ChecksumMismatch));
    }
    Ok(Ok((header.version, payload)))
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::config::Config;
    use crate::engine::Engine;
    use crate::event::EventKind;
    use crate::source::{PartitionSnapshot, Positions};

    /// An engine fed `impressions` impressions on partition 0, and the positions they leave.
    fn engine_with(impressions: usize) -> (Engine, Positions) {
        let cfg = Config::default();
        let mut e = Engine::new(&cfg).without_past_limit();
        let mut positions = Positions::default();
        let now = Instant::now();
        for i in 0..impressions {
            let payload =
                format!(r#"{{"query_id":"q{i}","timestamp":{},"results":["a","b"],"variant":"t"}}"#, 1000 + i);
            e.process(EventKind::Impression, 0, payload.as_bytes(), now).unwrap();
            positions.consumed(EventKind::Impression, 0, i as i64);
        }
        (e, positions)
    }

    /// Partition 0's snapshot of [`engine_with`], with its positions, encoded by [`encode`]
    /// (the changelog's records are `source::record`'s: this is the container alone).
    fn snapshot_with(impressions: usize) -> Vec<u8> {
        let (engine, positions) = engine_with(impressions);
        let bytes = encode(&(positions.of(0).unwrap_or([None; 2]), engine.snapshot_partition(0).unwrap()));
        bytes
    }

    /// Restores a snapshot into a fresh engine under `cfg`.
    fn restore(bytes: &[u8], cfg: &Config) -> Result<(Engine, [Option<i64>; 2]), String> {
        let snapshot: PartitionSnapshot = decode(bytes).map_err(|e| e.to_string())?;
        let mut engine = Engine::new(cfg).without_past_limit();
        let positions = snapshot.positions;
        engine.restore_partition(0, snapshot.task, Instant::now()).map_err(|e| e.to_string())?;
        Ok((engine, positions))
    }

    #[test]
    fn round_trip_restores_state_and_positions() {
        let (mut restored, positions) = restore(&snapshot_with(3), &Config::default()).unwrap();
        assert_eq!(restored.pending_impressions(), 3);
        assert_eq!(positions, [Some(3), None]);
        assert_eq!(restored.counters().consumed, [3, 0]);
        restored.finish();
        assert_eq!(restored.cumulative().iter().map(|(_, s)| s.impressions).sum::<u64>(), 3);
    }

    #[test]
    fn damage_is_detected_not_decoded() {
        let bytes = snapshot_with(3);
        let truncated = decode::<PartitionSnapshot>(&bytes[..bytes.len() - 5]).err().unwrap();
        assert!(matches!(truncated, DecodeError::Damaged(Damage::Truncated)), "{truncated}");
        let mut flipped = bytes.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 0x10;
        let flipped = decode::<PartitionSnapshot>(&flipped).err().unwrap();
        assert!(matches!(flipped, DecodeError::Damaged(Damage::ChecksumMismatch)), "{flipped}");
        assert!(matches!(decode::<PartitionSnapshot>(b"not a snapshot at all, no"), Err(DecodeError::Damaged(_))));
    }

    #[test]
    fn another_format_version_is_a_clear_error() {
        let mut bytes = snapshot_with(1);
        bytes[8..12].copy_from_slice(&99u32.to_le_bytes());
        let err = decode::<PartitionSnapshot>(&bytes).err().unwrap().to_string();
        assert!(err.contains("format version 99"), "{err}");
    }

    #[test]
    fn a_different_metrics_configuration_is_refused_by_name() {
        let other = Config::from_toml_with_env("[metrics]\ncutoffs = [5]\n", "t", std::iter::empty()).unwrap();
        let err = restore(&snapshot_with(1), &other).err().unwrap();
        assert!(err.contains("metrics.cutoffs"), "{err}");
        // Buckets hashed one way cannot be read under another unit.
        let clustered = Config::from_toml_with_env("[ab]\nunit = \"client_id\"\n", "t", std::iter::empty()).unwrap();
        let err = restore(&snapshot_with(1), &clustered).err().unwrap();
        assert!(err.contains("ab.unit"), "{err}");
    }

    #[test]
    fn a_corrupt_length_in_the_header_is_damage_not_an_overflow() {
        let mut bytes = snapshot_with(2);
        // A length that `HEADER_LEN + len` would overflow (it panicked in debug builds), and its
        // neighbours at the edge of the address space.
        for len in [u64::MAX, u64::MAX - 27, u64::MAX - 28, 1 << 63] {
            bytes[12..20].copy_from_slice(&len.to_le_bytes());
            assert!(matches!(verify(&bytes, &[FORMAT_VERSION]), Ok(Err(Damage::Truncated))), "length {len}");
            assert!(matches!(decode::<PartitionSnapshot>(&bytes), Err(DecodeError::Damaged(Damage::Truncated))));
        }
    }
}
