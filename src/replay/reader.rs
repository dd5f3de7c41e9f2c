//! Reading one input file on a thread of its own: its lines, each with where it is in the file
//! and its event time, handed to the merge in batches.
//!
//! A line is read with a bounded buffer: one over `limits.max_message_bytes` is skipped while
//! streaming, keeping only the prefix its log line quotes, so a huge line (or a file with no
//! newline at all) never sits in memory whole.

use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, Sender, SyncSender};

use super::ReplayError;
use crate::engine::{Prepared, PreparedBatch, Preparer};
use crate::event::{EventKind, RawMessage};
use crate::time::EventTime;

/// Lines per batch handed from a reader thread to the merge: large enough that the hand-over
/// costs nothing per line, small enough to keep memory flat.
const BATCH_LINES: usize = 4096;
/// Bytes after which a batch is handed over even with fewer lines, so long lines keep a batch
/// (and the batches in flight) small too.
const BATCH_BYTES: usize = 4 << 20;
/// Batches in flight per file, so reading runs ahead of the merge without bound.
const BATCHES_IN_FLIGHT: usize = 4;
/// How much of a line over the size limit is kept: enough for the quote in its log line.
const OVERSIZED_PREFIX: usize = 256;

/// A line as the merge sees it: its bytes (without the line ending), where it came from and
/// what it decoded to.
#[derive(Clone, Copy)]
pub(super) struct Line<'a> {
    /// The line without its `\n` or `\r\n`; only a prefix when `oversized`.
    pub(super) bytes: &'a [u8],
    /// What the reader learnt of it.
    pub(super) info: LineInfo,
    /// The line decoded for the engine; `None` when it was over the size limit and not read.
    pub(super) prepared: Option<Prepared<'a>>,
}

/// Where a line is in its file, and what the merge needs of it.
#[derive(Debug, Clone, Copy)]
pub(super) struct LineInfo {
    /// Where the line ends in its batch's bytes.
    end: usize,
    /// The event time the merge orders on; `None` for a line that does not decode (or was not
    /// read), which the merge takes at once.
    pub(super) time: Option<EventTime>,
    /// Its index in the batch's prepared events; `None` for a line over the size limit.
    prepared: Option<u32>,
    /// The 1-based line number in the file (blank lines counted), for the diagnostics.
    pub(super) number: u64,
    /// The byte offset of the line's start in the file, for the diagnostics.
    pub(super) offset: u64,
    /// `Some(length)` for a line over `limits.max_message_bytes`: skipped unread but for a
    /// prefix, and counted as `too_large` with its full length.
    pub(super) oversized: Option<u64>,
}

/// Non-blank lines of one file, read and timed on a reader thread.
#[derive(Default)]
struct Batch {
    /// The lines back to back, without their line endings.
    bytes: Vec<u8>,
    /// Each line's end in `bytes`, position in the file and event time.
    lines: Vec<LineInfo>,
    /// The lines decoded for the engine (but the oversized ones).
    prepared: PreparedBatch,
}

impl Batch {
    fn clear(&mut self) {
        self.bytes.clear();
        self.lines.clear();
        self.prepared.clear();
    }
    fn line(&self, i: usize) -> Line<'_> {
        let start = if i == 0 { 0 } else { self.lines[i - 1].end };
        let info = self.lines[i];
        Line {
            bytes: &self.bytes[start..info.end],
            info,
            prepared: info.prepared.map(|event| self.prepared.get(event as usize)),
        }
    }
}

/// Where a reader thread runs: on threads of their own (`replay`), or inline on the merge
/// thread, the single-threaded path the threaded one is tested against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Threading {
    /// Each file is read and decoded on a thread of its own while the merge thread joins, and
    /// finalization runs on up to one thread per core (at most 4; one where the engine needs
    /// it in order, see `engine::offload`).
    ReaderThreads,
    /// As `ReaderThreads`, with at most this many finalization threads: what tests and
    /// benchmarks choose to compare.
    FinalizeLanes(usize),
    /// Everything on the calling thread.
    SingleThread,
}

/// Where the merge gets its batches from.
enum Batches {
    /// From a reader thread.
    Thread {
        /// Filled batches; closed after the last one (or an error).
        filled: Receiver<Result<Batch, ReplayError>>,
        /// Emptied batches back to the reader.
        recycle: Sender<Batch>,
    },
    /// Filled on the merge thread when it needs the next; `None` after the end of the file.
    /// Boxed: the reader carries the decoders, many times the size of the other variant.
    Inline(Option<Box<(Reader, FileLines)>>),
}

/// One input file in event order as the merge sees it: the head line.
///
/// A reader reads the file and decodes each line for the engine (its event time is what the
/// merge orders on). On its own thread it does so while the merge thread joins and evaluates:
/// the decoding, a third of replay's work, moves to the other cores. Batches go back to the
/// reader for reuse: no allocation per line.
pub(super) struct LineSource {
    /// Which input the file is.
    pub(super) kind: EventKind,
    /// Where the next batch comes from.
    batches: Batches,
    /// The batch being merged and the index of its head line; `None` at the end of the file.
    current: Option<(Batch, usize)>,
}

impl LineSource {
    /// Opens `path` and starts its reader; lines over `limits.max_message_bytes` are skipped
    /// unread.
    pub(super) fn open(
        kind: EventKind,
        path: &Path,
        preparer: &Preparer,
        threading: Threading,
    ) -> Result<Self, ReplayError> {
        let file = File::open(path).map_err(|error| ReplayError::Io { path: path.to_path_buf(), error })?;
        let reader = Reader { path: path.to_path_buf(), kind, preparer: preparer.clone() };
        let lines = FileLines { reader: BufReader::with_capacity(1 << 20, file), number: 0, offset: 0 };
        let batches = match threading {
            Threading::SingleThread => Batches::Inline(Some(Box::new((reader, lines)))),
            Threading::ReaderThreads | Threading::FinalizeLanes(_) => {
                let (batch_tx, filled) = std::sync::mpsc::sync_channel(BATCHES_IN_FLIGHT);
                let (recycle, recycled) = std::sync::mpsc::channel::<Batch>();
                std::thread::Builder::new()
                    .name(format!("replay-{kind:?}"))
                    .spawn(move || reader.run(lines, &batch_tx, &recycled))
                    .map_err(|error| ReplayError::Io { path: PathBuf::from("(replay reader thread)"), error })?;
                Batches::Thread { filled, recycle }
            }
        };
        let mut s = LineSource { kind, batches, current: None };
        s.next_batch()?;
        Ok(s)
    }

    /// The head line's event time (`Some(None)` for a line without one, `None` at the end of
    /// the file): what the merge picks by, without assembling the line.
    pub(super) fn head_time(&self) -> Option<Option<EventTime>> {
        self.current.as_ref().map(|(batch, i)| batch.lines[*i].time)
    }

    /// The head line.
    pub(super) fn head(&self) -> Option<Line<'_>> {
        self.current.as_ref().map(|(batch, i)| batch.line(*i))
    }

    fn next_batch(&mut self) -> Result<(), ReplayError> {
        let done = self.current.take().map(|(batch, _)| batch);
        match &mut self.batches {
            Batches::Thread { filled, recycle } => {
                if let Some(done) = done {
                    let _ = recycle.send(done);
                }
                // A closed channel is the end of the file.
                if let Ok(batch) = filled.recv() {
                    self.current = Some((batch?, 0));
                }
            }
            Batches::Inline(state) => {
                let Some(inline) = state else { return Ok(()) };
                let (reader, lines) = &mut **inline;
                let mut batch = done.unwrap_or_default();
                let eof = reader.fill(lines, &mut batch)?;
                if eof {
                    *state = None;
                }
                if !batch.lines.is_empty() {
                    self.current = Some((batch, 0));
                }
            }
        }
        Ok(())
    }

    pub(super) fn advance(&mut self) -> Result<(), ReplayError> {
        let Some((batch, i)) = &mut self.current else { return Ok(()) };
        *i += 1;
        if *i == batch.lines.len() {
            self.next_batch()?;
        }
        Ok(())
    }
}

/// A file being read, with where its next line is.
struct FileLines {
    /// The file, buffered.
    reader: BufReader<File>,
    /// Lines read so far (blank ones counted): the next line's number less one.
    number: u64,
    /// Bytes read so far: the next line's offset.
    offset: u64,
}

/// What a reader needs of its file.
struct Reader {
    /// The file, for the error message.
    path: PathBuf,
    /// Which input it is, to decode its lines.
    kind: EventKind,
    /// The engine's decoding (`limits.max_message_bytes` among it: longer lines are skipped
    /// unread).
    preparer: Preparer,
}

impl Reader {
    /// The reader thread: batches until the end of the file, an error, or the merge stopping.
    fn run(self, mut lines: FileLines, batches: &SyncSender<Result<Batch, ReplayError>>, recycled: &Receiver<Batch>) {
        loop {
            let mut batch = recycled.try_recv().unwrap_or_default();
            let eof = match self.fill(&mut lines, &mut batch) {
                Ok(eof) => eof,
                Err(error) => {
                    let _ = batches.send(Err(error));
                    return;
                }
            };
            // A send fails only when the merge stopped early; nothing more to do then.
            if (!batch.lines.is_empty() && batches.send(Ok(batch)).is_err()) || eof {
                return;
            }
        }
    }

    /// Fills `batch` (emptied first) with the next lines, decoded; true at the end of the file.
    fn fill(&self, file: &mut FileLines, batch: &mut Batch) -> Result<bool, ReplayError> {
        batch.clear();
        let max_line_bytes = self.preparer.max_message_bytes();
        while batch.lines.len() < BATCH_LINES && batch.bytes.len() < BATCH_BYTES {
            let start = batch.bytes.len();
            let read = match read_line(&mut file.reader, &mut batch.bytes, max_line_bytes) {
                Ok(Some(read)) => read,
                Ok(None) => return Ok(true),
                Err(error) => return Err(ReplayError::Io { path: self.path.clone(), error }),
            };
            file.number += 1;
            let line_offset = file.offset;
            file.offset += read.consumed;
            let line = &batch.bytes[start..];
            if read.oversized.is_none() && line.iter().all(u8::is_ascii_whitespace) {
                batch.bytes.truncate(start);
                continue;
            }
            let (time, prepared) = match read.oversized {
                None => {
                    let index = batch.prepared.len();
                    self.preparer.prepare(self.kind, RawMessage::body(line), &mut batch.prepared);
                    (batch.prepared.get(index).time(), u32::try_from(index).ok())
                }
                Some(_) => (None, None),
            };
            let end = batch.bytes.len();
            let number = file.number;
            batch.lines.push(LineInfo { end, time, prepared, number, offset: line_offset, oversized: read.oversized });
        }
        Ok(false)
    }
}

/// What [`read_line`] read.
#[derive(Debug, PartialEq, Eq)]
struct ReadLine {
    /// Bytes of the file the line took, its line ending included: where the next line starts.
    consumed: u64,
    /// `Some(length)` when the line (without its line ending) was longer than the limit.
    oversized: Option<u64>,
}

/// Appends the next line of `reader` to `out` without its line ending (`\n` or `\r\n`);
/// `None` at the end of the file. A line longer than `max_len` is not held: a prefix of it stays
/// in `out` (for its quote), the rest is skipped up to the next newline.
fn read_line(reader: &mut impl BufRead, out: &mut Vec<u8>, max_len: usize) -> io::Result<Option<ReadLine>> {
    let start = out.len();
    let bound = (max_len as u64).saturating_add(1);
    // `read_until` through `take(bound)`, with the memchr crate's vectorized search (the
    // standard library's is a word at a time): at most `bound` bytes, up to a newline.
    let mut consumed = 0u64;
    while consumed < bound {
        let buf = match reader.fill_buf() {
            Ok(buf) => buf,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let room = usize::try_from(bound - consumed).unwrap_or(usize::MAX).min(buf.len());
        let window = &buf[..room];
        let (take, found) = match memchr::memchr(b'\n', window) {
            Some(i) => (i + 1, true),
            None => (room, false),
        };
        out.extend_from_slice(&window[..take]);
        reader.consume(take);
        consumed += take as u64;
        if found || take == 0 {
            break;
        }
    }
    if consumed == 0 {
        return Ok(None);
    }
    let read = consumed as usize;
    if out.last() == Some(&b'\n') {
        out.pop();
        if out.len() > start && out.last() == Some(&b'\r') {
            out.pop();
        }
        return Ok(Some(ReadLine { consumed, oversized: None }));
    }
    if consumed < bound {
        // The last line, without a newline.
        return Ok(Some(ReadLine { consumed, oversized: None }));
    }
    out.truncate(start + OVERSIZED_PREFIX.min(read));
    let (rest, newline) = skip_line(reader)?;
    Ok(Some(ReadLine { consumed: consumed + rest + u64::from(newline), oversized: Some(consumed + rest) }))
}

/// Skips the rest of a line without keeping it: its length, and whether a newline ended it.
fn skip_line(reader: &mut impl BufRead) -> io::Result<(u64, bool)> {
    let mut skipped = 0u64;
    loop {
        let buf = match reader.fill_buf() {
            Ok(buf) => buf,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            return Ok((skipped, false));
        }
        match buf.iter().position(|&b| b == b'\n') {
            Some(i) => {
                reader.consume(i + 1);
                return Ok((skipped + i as u64, true));
            }
            None => {
                let n = buf.len();
                reader.consume(n);
                skipped += n as u64;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every line of `input` read with `max_len` through a small buffer: (kept bytes, read).
    fn lines(input: &[u8], max_len: usize) -> Vec<(Vec<u8>, ReadLine)> {
        let mut reader = BufReader::with_capacity(8, input);
        std::iter::from_fn(|| {
            let mut bytes = Vec::new();
            read_line(&mut reader, &mut bytes, max_len).unwrap().map(|read| (bytes, read))
        })
        .collect()
    }

    fn line(bytes: &[u8], consumed: u64, oversized: Option<u64>) -> (Vec<u8>, ReadLine) {
        (bytes.to_vec(), ReadLine { consumed, oversized })
    }

    #[test]
    fn lines_lose_their_endings_and_keep_their_lengths() {
        assert_eq!(
            lines(b"ab\ncd\r\n\nlast", 10),
            vec![line(b"ab", 3, None), line(b"cd", 4, None), line(b"", 1, None), line(b"last", 4, None)]
        );
        assert_eq!(lines(b"", 10), vec![]);
        // Exactly the limit is within it, with or without a newline.
        assert_eq!(
            lines(b"0123456789\n0123456789", 10),
            vec![line(b"0123456789", 11, None), line(b"0123456789", 10, None)]
        );
    }

    #[test]
    fn a_line_over_the_limit_is_skipped_keeping_a_prefix() {
        let long = vec![b'x'; 1000];
        let input = [&long[..], b"\nok\n", &long[..]].concat();
        let got = lines(&input, 500);
        assert_eq!(
            got,
            vec![
                line(&long[..OVERSIZED_PREFIX], 1001, Some(1000)),
                line(b"ok", 3, None),
                line(&long[..OVERSIZED_PREFIX], 1000, Some(1000)),
            ]
        );
        // One byte over: still too large, its full length counted.
        assert_eq!(lines(b"0123456789A\nok", 10), vec![line(b"0123456789A", 12, Some(11)), line(b"ok", 2, None)]);
    }
}
