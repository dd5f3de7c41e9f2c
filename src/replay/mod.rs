//! Replay: the engine over JSON-lines files, as if every event had been consumed and the stream
//! had then gone idle.
//!
//! The two files are merged on event time (each is read in order, the earlier head goes first),
//! so a replay behaves like a consumer reading both topics in step: the watermark follows event
//! time exactly as online, state stays bounded by the attribution window, and events out of
//! order beyond `max_out_of_orderness` are late here just as they would be online. At the end
//! every impression is finalized and every window closed.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;

use crate::accumulate::{GroupStats, GroupTable, Groups};
use crate::engine::Engine;
use crate::event::EventKind;
use crate::experiments::{ExperimentReport, Span};
use crate::metrics::{recall_level_label, MetricLayout, RECALL_LEVELS};
use crate::time::{format_rfc3339_ms, EventTime};

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("cannot read {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
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
    fn open(kind: EventKind, path: &Path, decoders: &crate::event::Decoders) -> Result<Self, ReplayError> {
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
    let trec = trec_dir.map(TrecWriter::create).transpose()?;
    if let Some(writer) = &trec {
        let writer = writer.clone();
        engine.set_observer(Box::new(move |f| {
            writer.lock().unwrap_or_else(|p| p.into_inner()).finalized(f.query, f.gains)
        }));
    }
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
            if let (Some(writer), EventKind::Impression) = (&trec, source.kind) {
                writer.lock().unwrap_or_else(|p| p.into_inner()).impression_line(line);
            }
            let _ = engine.process(source.kind, 0, line, now);
        }
        source.advance()?;
        since_advance += 1;
        if since_advance == 1024 {
            engine.advance(now);
            since_advance = 0;
        }
    }
    engine.finish();
    if let Some(writer) = trec {
        writer.lock().unwrap_or_else(|p| p.into_inner()).finish()?;
    }
    Ok(engine)
}

/// Writes what rankpulse measured in TREC format, so trec_eval or ranx can be run on exactly
/// the same judgments and rankings: one query per finalized impression; `qrels.txt` holds the
/// attributed gain of every shown result (`query 0 doc gain`), `run.txt` the ranking with
/// strictly descending scores (`query Q0 doc rank score rankpulse`). A result id repeated in
/// a list is written as `id#dupN` (N its rank) so ranks stay those rankpulse measured; ids
/// with whitespace, which TREC files cannot hold, have it replaced by `_`.
struct TrecWriter {
    /// Text ids of impressions read but not yet finalized (late and duplicate ones never are).
    pending: std::collections::HashMap<crate::ids::QueryKey, (String, Vec<String>)>,
    qrels: std::io::BufWriter<File>,
    run: std::io::BufWriter<File>,
    dir: PathBuf,
    /// First write error, reported at the end instead of failing inside the engine callback.
    error: Option<std::io::Error>,
}

impl TrecWriter {
    fn create(dir: &Path) -> Result<std::sync::Arc<std::sync::Mutex<TrecWriter>>, ReplayError> {
        let write_err = |source| ReplayError::Write { path: dir.to_path_buf(), source };
        std::fs::create_dir_all(dir).map_err(write_err)?;
        let open = |name: &str| {
            File::create(dir.join(name))
                .map(std::io::BufWriter::new)
                .map_err(|source| ReplayError::Write { path: dir.join(name), source })
        };
        Ok(std::sync::Arc::new(std::sync::Mutex::new(TrecWriter {
            pending: Default::default(),
            qrels: open("qrels.txt")?,
            run: open("run.txt")?,
            dir: dir.to_path_buf(),
            error: None,
        })))
    }

    fn impression_line(&mut self, line: &[u8]) {
        #[derive(serde::Deserialize)]
        struct Ids {
            query_id: String,
            results: Vec<String>,
        }
        if let Ok(ids) = serde_json::from_slice::<Ids>(line) {
            self.pending.entry(crate::ids::query_key(&ids.query_id)).or_insert((ids.query_id, ids.results));
        }
    }

    fn finalized(&mut self, query: crate::ids::QueryKey, gains: &[u8]) {
        use std::io::Write;
        let Some((query_id, results)) = self.pending.remove(&query) else { return };
        let clean = |id: &str| id.replace(char::is_whitespace, "_");
        let query_id = clean(&query_id);
        let mut seen = std::collections::HashSet::new();
        let n = results.len();
        for (i, (doc, gain)) in results.iter().zip(gains).enumerate() {
            let rank = i + 1;
            let doc = if seen.insert(doc.as_str()) { clean(doc) } else { format!("{}#dup{rank}", clean(doc)) };
            let written = writeln!(self.qrels, "{query_id} 0 {doc} {gain}")
                .and_then(|_| writeln!(self.run, "{query_id} Q0 {doc} {rank} {} rankpulse", n - i));
            if let Err(e) = written {
                self.error.get_or_insert(e);
            }
        }
    }

    fn finish(&mut self) -> Result<(), ReplayError> {
        use std::io::Write;
        let flushed = self.qrels.flush().and_then(|_| self.run.flush());
        match self.error.take().map_or(flushed, Err) {
            Ok(()) => Ok(()),
            Err(source) => Err(ReplayError::Write { path: self.dir.clone(), source }),
        }
    }
}

/// The replay document of the contract (`--format json`); extra keys are allowed.
#[derive(Debug, Serialize)]
pub struct Report {
    pub groups: Vec<GroupReport>,
    pub windows: Vec<WindowReport>,
    pub events: EventCounts,
    /// The A/B feed over every impression, one entry per experiment.
    pub experiments: Vec<ExperimentReport>,
}

#[derive(Debug, Serialize)]
pub struct GroupReport {
    pub experiment: String,
    pub variant: String,
    pub impressions: u64,
    pub engaged: u64,
    pub metrics: serde_json::Map<String, serde_json::Value>,
}

#[derive(Debug, Serialize)]
pub struct WindowReport {
    pub size: String,
    pub start: String,
    pub groups: Vec<GroupReport>,
    /// The A/B feed of this window, one entry per experiment.
    pub experiments: Vec<ExperimentReport>,
}

#[derive(Debug, Serialize)]
pub struct EventCounts {
    pub impressions_read: u64,
    pub engagements_read: u64,
    pub rejected: u64,
    pub impressions_duplicate: u64,
    pub impressions_late: u64,
    pub engagements_attributed: u64,
    pub engagements_late: u64,
    pub engagements_orphaned: u64,
    pub engagements_not_shown: u64,
    pub engagements_outside_window: u64,
}

fn group_reports(layout: &MetricLayout, groups: &Groups, table: &GroupTable) -> Vec<GroupReport> {
    let mut out: Vec<GroupReport> = table.iter().map(|(id, stats)| group_report(layout, groups, id, stats)).collect();
    out.sort_by(|a, b| (&a.experiment, &a.variant).cmp(&(&b.experiment, &b.variant)));
    out
}

fn group_report(layout: &MetricLayout, groups: &Groups, id: u32, stats: &GroupStats) -> GroupReport {
    let (experiment, variant) = groups.name(id);
    GroupReport {
        experiment: experiment.to_string(),
        variant: variant.to_string(),
        impressions: stats.impressions,
        engaged: stats.engaged,
        metrics: layout
            .keys()
            .iter()
            .enumerate()
            .map(|(slot, key)| (key.name(), serde_json::json!(stats.mean(slot))))
            .collect(),
    }
}

impl Report {
    /// Builds the report from a finished engine (closed windows are taken from it).
    pub fn from_engine(engine: &mut Engine) -> Report {
        let mut closed = engine.take_closed_windows();
        closed.sort_by_key(|w| (w.size_index, w.start));
        let layout = engine.layout();
        let groups = engine.groups();
        let windows: Vec<WindowReport> = closed
            .iter()
            .map(|w| {
                let label = engine.window_label(w.size_index);
                let span =
                    Span::Window { label, start: w.start, size_ms: engine.accumulators().window_size_ms(w.size_index) };
                WindowReport {
                    size: label.to_string(),
                    start: format_rfc3339_ms(w.start),
                    groups: group_reports(layout, groups, &w.groups),
                    experiments: engine.experiment_reports(&w.groups, span),
                }
            })
            .collect();
        let c = engine.counters();
        let t = engine.engagement_tally();
        Report {
            groups: group_reports(layout, groups, &engine.accumulators().cumulative),
            experiments: engine.experiment_reports(&engine.accumulators().cumulative, Span::Cumulative),
            windows,
            events: EventCounts {
                impressions_read: c.consumed[0],
                engagements_read: c.consumed[1],
                rejected: c.rejected.iter().flatten().sum(),
                impressions_duplicate: c.impressions_duplicate,
                impressions_late: c.impressions_late,
                engagements_attributed: t.attributed,
                engagements_late: t.late,
                engagements_orphaned: t.orphaned,
                engagements_not_shown: t.not_shown,
                engagements_outside_window: t.outside_window,
            },
        }
    }

    /// A plain-text table per window size and cumulatively: metrics as rows, groups as columns.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        out.push_str("== cumulative ==\n");
        out.push_str(&table(&self.groups));
        out.push_str("\n== interpolated precision-recall curve (11 points, cumulative) ==\n");
        out.push_str(&precision_recall_curve(&self.groups));
        out.push_str(&ab_summary(&self.experiments));
        let mut sizes: Vec<&str> = self.windows.iter().map(|w| w.size.as_str()).collect();
        sizes.dedup();
        for size in sizes {
            let windows: Vec<&WindowReport> = self.windows.iter().filter(|w| w.size == size).collect();
            out.push_str(&format!(
                "\n== {} windows of {size} (newest shown: {}) ==\n",
                windows.len(),
                windows.last().map_or("", |w| &w.start)
            ));
            if let Some(last) = windows.last() {
                out.push_str(&table(&last.groups));
            }
        }
        let e = &self.events;
        out.push_str(&format!(
            "\nevents: {} impressions and {} engagements read, {} rejected; {} engagements attributed, {} late, {} orphaned, {} on results not shown, {} outside the attribution window; {} duplicate and {} late impressions\n",
            e.impressions_read, e.engagements_read, e.rejected, e.engagements_attributed, e.engagements_late, e.engagements_orphaned,
            e.engagements_not_shown, e.engagements_outside_window, e.impressions_duplicate, e.impressions_late
        ));
        out
    }
}

/// Every variant against its control on the headline metrics (cumulative), and the split test;
/// `--format json` has every metric.
fn ab_summary(experiments: &[ExperimentReport]) -> String {
    let mut out = String::new();
    for report in experiments.iter().filter(|r| !r.comparisons.is_empty() || r.sample_ratio.is_some()) {
        out.push_str(&format!("\n== A/B {} (cumulative, unit {}) ==\n", report.experiment, report.unit));
        if let Some(srm) = &report.sample_ratio {
            let observed: Vec<String> = srm.observed.iter().map(|(v, n)| format!("{v} {n}")).collect();
            out.push_str(&format!(
                "split test ({}): {}; chi-square {:.2}, p = {:.2e}{}\n",
                srm.counted,
                observed.join(", "),
                srm.chi_square,
                srm.p_value,
                if srm.p_value < 0.001 { "  << SAMPLE RATIO MISMATCH: comparisons are not trustworthy" } else { "" }
            ));
        }
        for comparison in &report.comparisons {
            out.push_str(&format!(
                "{:<18} {:>10} {:>10} {:>10} {:>24} {:>10}\n",
                format!("{} - {}", comparison.variant, comparison.control),
                comparison.control,
                comparison.variant,
                "difference",
                format!("{:.0}% interval", report.confidence * 100.0),
                "p"
            ));
            let headline = |key: &str| key == "mrr" || key == "abandonment_rate" || key.starts_with("ndcg@");
            for (key, c) in comparison.metrics.iter().filter(|(k, _)| headline(k)) {
                let mean = |variant: &str| {
                    report
                        .variants
                        .iter()
                        .find(|v| v.variant == variant)
                        .and_then(|v| v.metrics.iter().find(|(k, _)| k == key))
                        .map_or(f64::NAN, |(_, e)| e.mean)
                };
                let interval = c.difference_ci.map_or("-".to_string(), |[lo, hi]| format!("[{lo:+.4}, {hi:+.4}]"));
                let p = c.p_value.map_or("-".to_string(), |p| format!("{p:.2e}"));
                out.push_str(&format!(
                    "{key:<18} {:>10.4} {:>10.4} {:>+10.4} {interval:>24} {p:>10}\n",
                    mean(&comparison.control),
                    mean(&comparison.variant),
                    c.difference
                ));
            }
        }
        for note in &report.notes {
            out.push_str(&format!("note: {note}\n"));
        }
    }
    out
}

/// The 11-point interpolated precision-recall curve of each group: one row per recall level,
/// each value with a bar (one `#` per 0.05), so control and treatment can be compared by eye.
fn precision_recall_curve(groups: &[GroupReport]) -> String {
    const BAR: usize = 20;
    let width = groups.iter().map(|g| g.experiment.len() + g.variant.len() + 1).max().unwrap_or(0).max(BAR + 7);
    let mut out = format!("{:<8}", "recall");
    for g in groups {
        out.push_str(&format!(" {:<width$}", format!("{}/{}", g.experiment, g.variant)));
    }
    out.truncate(out.trim_end().len());
    out.push('\n');
    for level in 0..RECALL_LEVELS {
        let label = recall_level_label(level);
        out.push_str(&format!("{label:<8}"));
        for g in groups {
            let v = g.metrics.get(&format!("iprec@{label}")).and_then(|v| v.as_f64()).unwrap_or(0.0);
            let bar = "#".repeat((v * BAR as f64).round() as usize);
            out.push_str(&format!(" {:<width$}", format!("{v:.3} {bar}")));
        }
        out.truncate(out.trim_end().len());
        out.push('\n');
    }
    out
}

fn table(groups: &[GroupReport]) -> String {
    if groups.is_empty() {
        return "(no finalized impressions)\n".to_string();
    }
    let headers: Vec<String> = groups.iter().map(|g| format!("{}/{}", g.experiment, g.variant)).collect();
    let width = headers.iter().map(String::len).max().unwrap_or(0).max(10);
    let mut out = format!("{:<18}", "metric");
    for h in &headers {
        out.push_str(&format!(" {h:>width$}"));
    }
    out.push('\n');
    let row = |name: &str, cell: &dyn Fn(&GroupReport) -> String| {
        let mut line = format!("{name:<18}");
        for g in groups {
            line.push_str(&format!(" {:>width$}", cell(g)));
        }
        line.push('\n');
        line
    };
    out.push_str(&row("impressions", &|g| g.impressions.to_string()));
    out.push_str(&row("engaged", &|g| g.engaged.to_string()));
    for key in groups[0].metrics.keys() {
        out.push_str(&row(key, &|g| {
            g.metrics.get(key).and_then(|v| v.as_f64()).map_or("-".into(), |v| format!("{v:.4}"))
        }));
    }
    out
}
