//! Checkpoint files: a payload (the source's: the engine's complete state with the offset of
//! every input) written atomically to `[state] dir` and read back on start. This module knows
//! how to keep bytes safe, not what they mean.
//!
//! A file is `checkpoint-<sequence>.bin`: a 28-byte header (magic `RPULSECK`, format version,
//! payload length, xxh3-64 checksum of the payload, all little-endian) and a postcard payload.
//! Writing goes to a temporary file, fsync, rename, fsync of the directory: a crash leaves either
//! the old or the new checkpoint, never half of one. The newest few are kept, so that a
//! checkpoint damaged afterwards (truncated, bit-flipped) is detected by its checksum, reported,
//! and the previous one used instead. A checkpoint of another format version is an error that
//! says so, rather than a silent start from scratch.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;

const MAGIC: [u8; 8] = *b"RPULSECK";
/// Bumped whenever the payload layout changes (3: pending impressions as a deadline-ordered run
/// of records and a heap of records with their deadlines, no separate deadline heap; 4: state per
/// partition task, offsets beside the engine's state instead of inside its input clocks).
pub const FORMAT_VERSION: u32 = 4;
const HEADER_LEN: usize = 8 + 4 + 8 + 8;
const PREFIX: &str = "checkpoint-";
const SUFFIX: &str = ".bin";

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The cause is in the message, not a `source()`: logs print the message alone, `main`
    /// the whole chain, and either way it appears once.
    #[error("state directory {path}: {error}")]
    Io { path: PathBuf, error: std::io::Error },
    #[error("checkpoint {path} was written by an incompatible rankpulse (format version {found}, this one reads {FORMAT_VERSION}); move the state directory away to start afresh, or run the version that wrote it")]
    Incompatible { path: PathBuf, found: u32 },
    #[error("checkpoint {path} has a valid checksum but does not decode ({reason}): it was written by an incompatible build; move the state directory away to start afresh")]
    Undecodable { path: PathBuf, reason: String },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
    move |error| CheckpointError::Io { path: path.to_path_buf(), error }
}

/// Encodes a payload with the header (under whatever lock guards its state; the caller writes
/// it outside).
pub fn encode(payload: &impl Serialize) -> Vec<u8> {
    let payload = postcard::to_stdvec(payload).expect("checkpoint payloads always serialize");
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&xxhash_rust::xxh3::xxh3_64(&payload).to_le_bytes());
    out.extend_from_slice(&payload);
    out
}

/// Why a file is not a usable checkpoint (it is then skipped for an older one).
#[derive(Debug)]
enum Damage {
    Truncated,
    NotACheckpoint,
    ChecksumMismatch,
}

/// Checks a file's header and checksum; returns its payload.
fn verify(path: &Path, bytes: &[u8]) -> Result<Result<usize, Damage>, CheckpointError> {
    if bytes.len() < HEADER_LEN {
        return Ok(Err(Damage::Truncated));
    }
    if bytes[..8] != MAGIC {
        return Ok(Err(Damage::NotACheckpoint));
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if version != FORMAT_VERSION {
        return Err(CheckpointError::Incompatible { path: path.to_path_buf(), found: version });
    }
    let len = u64::from_le_bytes(bytes[12..20].try_into().expect("8 bytes"));
    let checksum = u64::from_le_bytes(bytes[20..28].try_into().expect("8 bytes"));
    // The length comes from the file: compared, never added to, so a corrupt one cannot overflow.
    if u64::try_from(bytes.len() - HEADER_LEN) != Ok(len) {
        return Ok(Err(Damage::Truncated));
    }
    if xxhash_rust::xxh3::xxh3_64(&bytes[HEADER_LEN..]) != checksum {
        return Ok(Err(Damage::ChecksumMismatch));
    }
    Ok(Ok(HEADER_LEN))
}

/// The checkpoint files of one state directory.
#[derive(Debug)]
pub struct CheckpointStore {
    /// `state.dir`.
    dir: PathBuf,
    /// Sequence number of the next checkpoint written.
    next_sequence: u64,
    /// How many of the newest checkpoints are kept.
    keep: usize,
}

impl CheckpointStore {
    /// Opens (creating) a state directory.
    pub fn open(dir: &Path, keep: usize) -> Result<Self, CheckpointError> {
        fs::create_dir_all(dir).map_err(io_err(dir))?;
        let next_sequence = Self::list(dir)?.last().map_or(1, |(seq, _)| seq + 1);
        Ok(CheckpointStore { dir: dir.to_path_buf(), next_sequence, keep: keep.max(1) })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Checkpoint files, oldest first.
    fn list(dir: &Path) -> Result<Vec<(u64, PathBuf)>, CheckpointError> {
        let mut found = Vec::new();
        for entry in fs::read_dir(dir).map_err(io_err(dir))? {
            let path = entry.map_err(io_err(dir))?.path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else { continue };
            let Some(seq) = name.strip_prefix(PREFIX).and_then(|n| n.strip_suffix(SUFFIX)) else { continue };
            if let Ok(seq) = seq.parse() {
                found.push((seq, path));
            }
        }
        found.sort();
        Ok(found)
    }

    /// The newest checkpoint that verifies, decoded. Damaged ones are reported and skipped.
    pub fn load_latest<T: DeserializeOwned>(&self) -> Result<Option<(PathBuf, T)>, CheckpointError> {
        for (_, path) in Self::list(&self.dir)?.into_iter().rev() {
            let bytes = fs::read(&path).map_err(io_err(&path))?;
            match verify(&path, &bytes)? {
                Ok(start) => {
                    let snapshot = postcard::from_bytes(&bytes[start..])
                        .map_err(|e| CheckpointError::Undecodable { path: path.clone(), reason: e.to_string() })?;
                    return Ok(Some((path, snapshot)));
                }
                Err(damage) => {
                    tracing::error!(path = %path.display(), ?damage, "damaged checkpoint skipped; trying the previous one");
                }
            }
        }
        Ok(None)
    }

    /// Writes one encoded checkpoint atomically and prunes old ones; returns its path.
    pub fn write(&mut self, encoded: &[u8]) -> Result<PathBuf, CheckpointError> {
        let path = self.dir.join(format!("{PREFIX}{:020}{SUFFIX}", self.next_sequence));
        let tmp = self.dir.join(format!(".{PREFIX}{:020}.tmp", self.next_sequence));
        let written = (|| {
            let mut file = File::create(&tmp)?;
            file.write_all(encoded)?;
            file.sync_all()?;
            fs::rename(&tmp, &path)?;
            // The rename is durable only once the directory is.
            File::open(&self.dir)?.sync_all()
        })();
        if let Err(error) = written {
            let _ = fs::remove_file(&tmp);
            return Err(CheckpointError::Io { path, error });
        }
        self.next_sequence += 1;
        let all = Self::list(&self.dir)?;
        for (_, old) in all.iter().take(all.len().saturating_sub(self.keep)) {
            let _ = fs::remove_file(old);
        }
        Ok(path)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::config::Config;
    use crate::engine::Engine;
    use crate::event::EventKind;
    use crate::source::{encode_checkpoint, Checkpoint, Positions};

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

    /// The source's checkpoint of [`engine_with`].
    fn checkpoint_with(impressions: usize) -> Vec<u8> {
        let (engine, positions) = engine_with(impressions);
        encode_checkpoint(&engine, &positions)
    }

    /// The newest checkpoint's engine state, restored under `cfg`.
    fn restore_latest(store: &CheckpointStore, cfg: &Config) -> Result<Engine, crate::engine::RestoreError> {
        let (_, checkpoint) = store.load_latest::<Checkpoint>().unwrap().unwrap();
        Engine::restore(cfg, checkpoint.engine)
    }

    #[test]
    fn round_trip_restores_state_and_positions() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = CheckpointStore::open(dir.path(), 2).unwrap();
        store.write(&checkpoint_with(3)).unwrap();
        let (_, checkpoint) = store.load_latest::<Checkpoint>().unwrap().unwrap();
        let positions = checkpoint.positions.clone();
        let mut restored = Engine::restore(&Config::default(), checkpoint.engine).unwrap();
        assert_eq!(restored.pending_impressions(), 3);
        assert_eq!(positions.of(0), Some([Some(3), None]));
        assert_eq!(restored.counters().consumed, [3, 0]);
        restored.finish();
        assert_eq!(restored.accumulators().cumulative.iter().map(|(_, s)| s.impressions).sum::<u64>(), 3);
    }

    #[test]
    fn damaged_newest_checkpoint_falls_back_to_the_previous_one() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = CheckpointStore::open(dir.path(), 3).unwrap();
        store.write(&checkpoint_with(1)).unwrap();
        store.write(&checkpoint_with(2)).unwrap();
        let newest = store.write(&checkpoint_with(3)).unwrap();
        let bytes = fs::read(&newest).unwrap();

        // Truncated: the previous checkpoint (two impressions) is used.
        fs::write(&newest, &bytes[..bytes.len() - 5]).unwrap();
        let (path, _) = store.load_latest::<Checkpoint>().unwrap().unwrap();
        assert_ne!(path, newest);
        assert_eq!(restore_latest(&store, &Config::default()).unwrap().pending_impressions(), 2);

        // One flipped bit: detected by the checksum.
        let mut flipped = bytes.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 0x10;
        fs::write(&newest, &flipped).unwrap();
        assert_eq!(restore_latest(&store, &Config::default()).unwrap().pending_impressions(), 2);
    }

    #[test]
    fn another_format_version_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = CheckpointStore::open(dir.path(), 2).unwrap();
        let path = store.write(&checkpoint_with(1)).unwrap();
        let mut bytes = fs::read(&path).unwrap();
        bytes[8..12].copy_from_slice(&99u32.to_le_bytes());
        fs::write(&path, &bytes).unwrap();
        let err = store.load_latest::<Checkpoint>().err().unwrap().to_string();
        assert!(err.contains("format version 99") && err.contains("move the state directory away"), "{err}");
    }

    #[test]
    fn a_different_metrics_configuration_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = CheckpointStore::open(dir.path(), 2).unwrap();
        store.write(&checkpoint_with(1)).unwrap();
        let other = Config::from_toml_with_env("[metrics]\ncutoffs = [5]\n", "t", std::iter::empty()).unwrap();
        let err = restore_latest(&store, &other).err().unwrap().to_string();
        assert!(err.contains("metrics.cutoffs"), "{err}");
    }

    #[test]
    fn unpublished_closed_windows_and_unit_buckets_survive_a_restart() {
        let toml = "[metrics]\nwindows = [\"1m\"]\n[ab]\nunit = \"client_id\"\noutput_topic = \"ab\"\n";
        let cfg = Config::from_toml_with_env(toml, "t", std::iter::empty()).unwrap();
        let mut e = Engine::new(&cfg).without_past_limit();
        let now = Instant::now();
        for i in 0..40 {
            let (variant, client) = (if i % 2 == 0 { "control" } else { "treatment" }, i % 7);
            let payload = format!(
                r#"{{"query_id":"q{i}","timestamp":{},"results":["a"],"experiment":"x","variant":"{variant}","client_id":"c{client}"}}"#,
                1000 + i
            );
            e.process(EventKind::Impression, 0, payload.as_bytes(), now).unwrap();
        }
        e.finish();
        let (records, windows) = crate::output::unpublished_records(&e);
        assert_eq!((records.len(), windows), (1, 1), "one experiment, one closed window");

        let dir = tempfile::tempdir().unwrap();
        let mut store = CheckpointStore::open(dir.path(), 2).unwrap();
        store.write(&encode_checkpoint(&e, &Positions::default())).unwrap();
        let mut restored = restore_latest(&store, &cfg).unwrap();
        assert_eq!(
            crate::output::unpublished_records(&restored),
            (records, 1),
            "the same record, published after the restart"
        );
        restored.published(1);
        assert_eq!(crate::output::unpublished_records(&restored).1, 0);

        // Buckets hashed one way cannot be read under another unit.
        store.write(&encode_checkpoint(&e, &Positions::default())).unwrap();
        let other = Config::from_toml_with_env("[metrics]\nwindows = [\"1m\"]\n", "t", std::iter::empty()).unwrap();
        let err = restore_latest(&store, &other).err().unwrap().to_string();
        assert!(err.contains("ab.unit"), "{err}");
    }

    #[test]
    fn only_the_newest_are_kept_and_numbering_continues_after_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = CheckpointStore::open(dir.path(), 2).unwrap();
        for _ in 0..4 {
            store.write(&checkpoint_with(1)).unwrap();
        }
        assert_eq!(CheckpointStore::list(dir.path()).unwrap().iter().map(|(s, _)| *s).collect::<Vec<_>>(), [3, 4]);
        let mut reopened = CheckpointStore::open(dir.path(), 2).unwrap();
        let path = reopened.write(&checkpoint_with(1)).unwrap();
        assert!(path.to_string_lossy().ends_with("checkpoint-00000000000000000005.bin"));
    }

    #[test]
    fn a_corrupt_length_in_the_header_is_damage_not_an_overflow() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = CheckpointStore::open(dir.path(), 3).unwrap();
        store.write(&checkpoint_with(2)).unwrap();
        let newest = store.write(&checkpoint_with(3)).unwrap();
        let mut bytes = fs::read(&newest).unwrap();
        // A length that `HEADER_LEN + len` would overflow (it panicked in debug builds), and its
        // neighbours at the edge of the address space.
        for len in [u64::MAX, u64::MAX - 27, u64::MAX - 28, 1 << 63] {
            bytes[12..20].copy_from_slice(&len.to_le_bytes());
            fs::write(&newest, &bytes).unwrap();
            assert!(matches!(verify(&newest, &bytes), Ok(Err(Damage::Truncated))), "length {len}");
            assert_eq!(restore_latest(&store, &Config::default()).unwrap().pending_impressions(), 2);
        }
    }
}
