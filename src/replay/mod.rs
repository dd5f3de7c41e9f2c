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
//! | `mod.rs` | reader threads that read and time each file's lines, the merge on event time through the engine |
//! | `report.rs` | [`Report`]: the replay document (`--format json`) and its plain-text tables |
//! | `trec.rs` | `--trec-out`: `qrels.txt` and `run.txt` of every finalized impression |

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::engine::Engine;
use crate::event::{Decoders, EventKind};
use crate::time::EventTime;

mod report;
mod trec;

pub use report::{AbUnitReport, EventCounts, GroupReport, Report, TableOptions, WindowReport};
use trec::TrecWriter;

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// An input file could not be opened or read (or a reader thread not started).
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file, so the message says which of the two.
        path: PathBuf,
        source: std::io::Error,
    },
    /// A `--trec-out` file could not be created or written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file or directory, so the message says where.
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Lines per batch handed from a reader thread to the merge: large enough that the hand-over
/// costs nothing per line, small enough to keep memory flat.
const BATCH_LINES: usize = 4096;
/// Batches in flight per file, so reading runs ahead of the merge without bound.
const BATCHES_IN_FLIGHT: usize = 4;

/// Non-blank lines of one file with the event time of each, read and timed on a reader thread.
#[derive(Default)]
struct Batch {
    /// The lines back to back (newlines kept).
    bytes: Vec<u8>,
    /// Where each line ends in `bytes`.
    ends: Vec<usize>,
    /// Each line's event time, `None` for a line that does not decode.
    times: Vec<Option<EventTime>>,
}

impl Batch {
    fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
        self.times.clear();
    }
    fn line(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.bytes[start..self.ends[i]]
    }
}

/// One input file in event order as the merge sees it: the head line and its event time.
///
/// A reader thread reads the file and decodes each line's timestamp (what the merge orders on),
/// so on a machine with a spare core the merge thread only joins and evaluates. Batches go back
/// to the reader for reuse: no allocation per line.
struct LineSource {
    kind: EventKind,
    /// Filled batches from the reader; closed after the last one (or an error).
    batches: std::sync::mpsc::Receiver<Result<Batch, ReplayError>>,
    /// Emptied batches back to the reader.
    recycle: std::sync::mpsc::Sender<Batch>,
    /// The batch being merged and the index of its head line; `None` at the end of the file.
    current: Option<(Batch, usize)>,
}

impl LineSource {
    fn open(kind: EventKind, path: &Path, decoders: &Decoders) -> Result<Self, ReplayError> {
        let file = File::open(path).map_err(|source| ReplayError::Io { path: path.to_path_buf(), source })?;
        let (batch_tx, batches) = std::sync::mpsc::sync_channel(BATCHES_IN_FLIGHT);
        let (recycle, recycled) = std::sync::mpsc::channel::<Batch>();
        let (path, decoders) = (path.to_path_buf(), decoders.clone());
        std::thread::Builder::new()
            .name(format!("replay-{kind:?}"))
            .spawn(move || {
                let mut reader = BufReader::with_capacity(1 << 20, file);
                let mut scratch = Vec::new();
                loop {
                    let mut batch = recycled.try_recv().unwrap_or_default();
                    batch.clear();
                    let mut eof = false;
                    while batch.ends.len() < BATCH_LINES {
                        let start = batch.bytes.len();
                        match reader.read_until(b'\n', &mut batch.bytes) {
                            Ok(0) => {
                                eof = true;
                                break;
                            }
                            Ok(_) => {}
                            Err(source) => {
                                let _ = batch_tx.send(Err(ReplayError::Io { path, source }));
                                return;
                            }
                        }
                        let line = &batch.bytes[start..];
                        if line.iter().all(u8::is_ascii_whitespace) {
                            batch.bytes.truncate(start);
                            continue;
                        }
                        batch.times.push(decoders.event_time(kind, line, &mut scratch));
                        batch.ends.push(batch.bytes.len());
                    }
                    // A send fails only when the merge stopped early; nothing more to do then.
                    if (!batch.ends.is_empty() && batch_tx.send(Ok(batch)).is_err()) || eof {
                        return;
                    }
                }
            })
            .map_err(|source| ReplayError::Io { path: PathBuf::from("(replay reader thread)"), source })?;
        let mut s = LineSource { kind, batches, recycle, current: None };
        s.next_batch()?;
        Ok(s)
    }

    /// The head line and its event time.
    fn head(&self) -> Option<(&[u8], Option<EventTime>)> {
        self.current.as_ref().map(|(batch, i)| (batch.line(*i), batch.times[*i]))
    }

    fn next_batch(&mut self) -> Result<(), ReplayError> {
        if let Some((done, _)) = self.current.take() {
            let _ = self.recycle.send(done);
        }
        // A closed channel is the end of the file.
        if let Ok(batch) = self.batches.recv() {
            self.current = Some((batch?, 0));
        }
        Ok(())
    }

    fn advance(&mut self) -> Result<(), ReplayError> {
        let Some((batch, i)) = &mut self.current else { return Ok(()) };
        *i += 1;
        if *i == batch.ends.len() {
            self.next_batch()?;
        }
        Ok(())
    }
}

/// Runs the files through a fresh engine and returns it, every impression final.
pub fn run(impressions: &Path, engagements: &Path, engine: Engine) -> Result<Engine, ReplayError> {
    run_with_trec(impressions, engagements, engine, None)
}

/// [`run`], also writing `qrels.txt` and `run.txt` of every finalized impression into `trec_dir`.
pub fn run_with_trec(
    impressions: &Path,
    engagements: &Path,
    engine: Engine,
    trec_dir: Option<&Path>,
) -> Result<Engine, ReplayError> {
    // Backfills are old by definition: only the future limit applies.
    let mut engine = engine.without_past_limit();
    engine.keep_closed_windows();
    let mut trec = trec_dir.map(|dir| TrecWriter::create(dir, &mut engine)).transpose()?;
    let decoders = engine.decoders();
    let mut sources = [
        LineSource::open(EventKind::Impression, impressions, decoders)?,
        LineSource::open(EventKind::Engagement, engagements, decoders)?,
    ];
    // One frozen wall-clock instant: replay time is event time only, no input ever goes idle.
    let now = Instant::now();
    engine.assign(0, now);
    let mut since_advance = 0u32;
    loop {
        // Impressions first on equal timestamps; an undecodable line goes at once.
        let pick = match (sources[0].head(), sources[1].head()) {
            (None, None) => break,
            (Some(_), None) => 0,
            (None, Some(_)) => 1,
            (Some((_, a)), Some((_, b))) => match (a, b) {
                (None, _) => 0,
                (_, None) => 1,
                (Some(a), Some(b)) => usize::from(b < a),
            },
        };
        let source = &mut sources[pick];
        if let Some((line, _)) = source.head() {
            if let (Some(writer), EventKind::Impression) = (&mut trec, source.kind) {
                writer.impression_line(line);
            }
            let _ = engine.process(source.kind, 0, line, now);
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
    engine.finish();
    if let Some(writer) = trec {
        writer.finish()?;
    }
    Ok(engine)
}
