//! Replay: the engine over JSON-lines files, as if every event had been consumed and the stream
//! had then gone idle.
//!
//! The two files are merged on event time (each is read in order, the earlier head goes first),
//! so a replay behaves like a consumer reading both topics in step: the watermark follows event
//! time exactly as online, state stays bounded by the attribution window, and events out of
//! order beyond `max_out_of_orderness` are late here just as they would be online. At the end
//! every impression is finalized and every window closed.
//!
//! | file | does |
//! |---|---|
//! | `mod.rs` | the merge on event time through the engine |
//! | `reader.rs` | a reader per file (a thread of its own, or inline: [`Threading`]): its lines (over-long ones skipped unread), where each is, each decoded for the engine |
//! | `diagnostics.rs` | rejected lines logged as `file:line: reason: detail`, and `--max-rejects` |
//! | `report.rs` | [`Report`]: the replay document (`--format json`) and its plain-text tables |
//! | `records.rs` | Avro object container files read as JSON lines of their records, through the same mapping as online |
//! | `trec.rs` | `--trec-out`: `qrels.txt` and `run.txt` of every finalized impression |

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::engine::{Accepted, Engine};
use crate::event::EventKind;

mod breakdown_table;
mod diagnostics;
mod reader;
mod readout_table;
pub mod records;
mod report;
mod trec;

use diagnostics::RejectedLines;
pub use diagnostics::{check_rejects, MaxRejects};
use reader::LineSource;
pub use reader::Threading;
pub use report::{AbUnitReport, EventCounts, GroupReport, RejectedByReason, Report, TableOptions, WindowReport};
use trec::TrecWriter;

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// An input file could not be opened or read (or a reader thread not started).
    #[error("cannot read {path}: {error}")]
    Io {
        /// The file, so the message says which of the two.
        path: PathBuf,
        /// What the OS said. In the message and deliberately not a `source()`: `main` prints
        /// the whole chain, which would print it twice.
        error: std::io::Error,
    },
    /// A `--trec-out` file could not be created or written.
    #[error("cannot write {path}: {error}")]
    Write {
        /// The file or directory, so the message says where.
        path: PathBuf,
        /// What the OS said (in the message, not a `source()`, as for `Io`).
        error: std::io::Error,
    },
    /// An Avro container file that does not read, or an input format replay cannot read.
    #[error("{path}: {message}")]
    Records {
        /// The input file.
        path: PathBuf,
        /// What is wrong, and what to do.
        message: String,
    },
    /// More lines were rejected than `--max-rejects` allows: the report would measure little.
    #[error("too many rejected lines: {counts}, {limit}{hint}")]
    TooManyRejects {
        /// Rejected of read lines per file over the limit, with the reasons.
        counts: String,
        /// Which limit, and how to change it.
        limit: String,
        /// What the input must be, when most rejected lines are not JSON objects at all.
        hint: String,
    },
}

/// Runs the files through a fresh engine and returns it, every impression final.
pub fn run(impressions: &Path, engagements: &Path, engine: Engine) -> Result<Engine, ReplayError> {
    run_with(impressions, engagements, engine, None, Threading::ReaderThreads)
}

/// [`run`], also writing `qrels.txt` and `run.txt` of every finalized impression into `trec_dir`.
pub fn run_with_trec(
    impressions: &Path,
    engagements: &Path,
    engine: Engine,
    trec_dir: Option<&Path>,
) -> Result<Engine, ReplayError> {
    run_with(impressions, engagements, engine, trec_dir, Threading::ReaderThreads)
}

/// [`run_with_trec`] with the choice of threads: the results are the same either way
/// (`tests/threading.rs` checks it), only the time differs.
pub fn run_with(
    impressions: &Path,
    engagements: &Path,
    engine: Engine,
    trec_dir: Option<&Path>,
    threading: Threading,
) -> Result<Engine, ReplayError> {
    // Backfills are old by definition: only the future limit applies.
    let mut engine = engine.without_past_limit();
    engine.keep_closed_windows();
    let mut trec = trec_dir.map(|dir| TrecWriter::create(dir, &mut engine)).transpose()?;
    let preparer = engine.preparer();
    let mut sources = [
        LineSource::open(EventKind::Impression, impressions, preparer, threading)?,
        LineSource::open(EventKind::Engagement, engagements, preparer, threading)?,
    ];
    // One frozen wall-clock instant: replay time is event time only, no input ever goes idle.
    let now = Instant::now();
    let mut rejected = RejectedLines::new([impressions, engagements], now);
    engine.assign(0, now);
    // The TREC writer matches finalized impressions with the lines it kept as they come: it
    // keeps finalization on this thread.
    let lanes = match threading {
        Threading::SingleThread => None,
        Threading::ReaderThreads => Some(std::thread::available_parallelism().map_or(1, std::num::NonZero::get)),
        Threading::FinalizeLanes(lanes) => Some(lanes),
    };
    if let (Some(lanes), None) = (lanes, &trec) {
        engine
            .offload_finalization(lanes)
            .map_err(|error| ReplayError::Io { path: PathBuf::from("(replay finalization thread)"), error })?;
    }
    let mut since_advance = 0u32;
    loop {
        // Impressions first on equal timestamps; an undecodable line goes at once.
        let pick = match (sources[0].head_time(), sources[1].head_time()) {
            (None, None) => break,
            (Some(_), None) => 0,
            (None, Some(_)) => 1,
            (Some(a), Some(b)) => match (a, b) {
                (None, _) => 0,
                (_, None) => 1,
                (Some(a), Some(b)) => usize::from(b < a),
            },
        };
        let source = &mut sources[pick];
        if let Some(line) = source.head() {
            let result = match (line.prepared, line.info.oversized) {
                (Some(event), _) => {
                    let result = engine.process_prepared(source.kind, 0, event, now);
                    // Only once the engine took the impression: a line it rejects (or finds
                    // late or a duplicate) must leave nothing for a later line of its query.
                    if let (Some(writer), Ok(Accepted::PendingImpression)) = (&mut trec, &result) {
                        writer.impression_line(line.bytes);
                    }
                    result.map(|_| ())
                }
                (None, size) => Err(engine.process_oversized(source.kind, 0, size.unwrap_or(u64::MAX), now)),
            };
            if let Err(rejection) = result {
                rejected.rejected(source.kind, line, &rejection);
            }
        }
        source.advance()?;
        since_advance += 1;
        if since_advance == 1024 {
            engine.advance(now);
            since_advance = 0;
        }
        if let Some(writer) = &mut trec {
            writer.write_finalized()?;
        }
    }
    rejected.finish();
    engine.finish();
    if let Some(writer) = trec {
        writer.finish()?;
    }
    Ok(engine)
}
