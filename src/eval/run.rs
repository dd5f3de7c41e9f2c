#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]
//! A run file read for `rankpulse eval`: per query, its documents in rank order.
//!
//! * **TREC run** (`qid Q0 docno rank score tag`, whitespace separated, further fields
//!   ignored): ranked as trec_eval ranks it (get_trec_results.c, form_res_rels.c), by score
//!   descending, ties (`-0` ties with `0`, as C compares them) broken by docno in descending
//!   byte order; the rank column is ignored. trec_eval 9.x keeps the score in a C `float`, so
//!   scores that differ only beyond single precision tie there; 10.0 keeps a `double`, and skips
//!   lines whose first non-blank character is `#`. The tag is the last line's, trec_eval's
//!   `runid`. The file is read whole and parsed on every thread, each a slice of its lines; ids
//!   are borrowed from the text. A document ranked twice is refused when the query is
//!   evaluated, after `-M` has cut the ranking ([`super::trec::res_rels`]), as in trec_eval.
//! * **JSON-lines run** (`{"query": "q1", "results": ["d1", "d2"]}`, by its `.jsonl`,
//!   `.ndjson` or `.json` extension): the list is the ranking, as shown. A repeated document is
//!   allowed (AutoRAG's measures count repeats); trec_eval's measures count it at its first
//!   rank, its repeats as documents outside the pool.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::trec::Compat;

/// One query of a run.
#[derive(Debug)]
pub struct RunQuery<'a> {
    /// The query id as the run writes it.
    pub qid: Cow<'a, str>,
    /// Its documents in rank order.
    pub docs: Vec<Cow<'a, str>>,
}

/// A parsed run.
#[derive(Debug)]
pub struct Run<'a> {
    /// Its queries, in no particular order.
    pub queries: Vec<RunQuery<'a>>,
    /// The tag (sixth column) of its last line: trec_eval's `runid`.
    pub tag: String,
    /// Whether a document may appear twice in a ranking (JSON lines), or is refused (TREC).
    pub repeats_allowed: bool,
}

/// Why a run cannot be evaluated.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot read the run {path}: {error}")]
    Read { path: PathBuf, error: std::io::Error },
    #[error("{path}:{line}: {why}")]
    Line { path: PathBuf, line: u64, why: String },
}

/// A TREC run line: (qid, docno, score, tag).
type Entry<'a> = (&'a str, &'a str, f64, &'a str);
/// A slice of lines parsed: its entries and its line count; or the number of the line (within
/// the slice) that is not a run line, and why.
type Chunk<'a> = Result<(Vec<Entry<'a>>, u64), (u64, String)>;
/// A document of a query as read: (score, docno).
type Scored<'a> = (f64, &'a str);

/// Reads a run, TREC or JSON lines by its extension; a TREC run is ranked as `compat`'s
/// trec_eval ranks it.
pub fn read<'a>(path: &Path, text: &'a str, threads: usize, compat: Compat) -> Result<Run<'a>, RunError> {
    match path.extension().and_then(|e| e.to_str()) {
        Some("jsonl" | "ndjson" | "json") => json_lines(path, text),
        _ => trec(path, text, threads, compat),
    }
}

/// One TREC line, `None` for a blank one (or, for trec_eval 10.0, a comment).
fn trec_line(line: &str, compat: Compat) -> Result<Option<Entry<'_>>, String> {
    let mut fields = line.split_ascii_whitespace();
    let Some(qid) = fields.next() else { return Ok(None) };
    if compat == Compat::V10 && qid.starts_with('#') {
        return Ok(None);
    }
    let (Some(_q0), Some(doc), Some(_rank), Some(score), Some(tag)) =
        (fields.next(), fields.next(), fields.next(), fields.next(), fields.next())
    else {
        return Err(format!(
            "expected 6 fields (qid Q0 docno rank score tag), found {}",
            line.split_ascii_whitespace().count()
        ));
    };
    let score: f64 = score.parse().map_err(|_| format!("score {score:?} is not a number"))?;
    if !score.is_finite() {
        return Err(format!("score {score} is not finite"));
    }
    // trec_eval 9.x stores the score in a float: scores equal in single precision tie.
    let score = if compat == Compat::V9 { f64::from(score as f32) } else { score };
    Ok(Some((qid, doc, score, tag)))
}

/// Parses a slice of lines; the error carries the line's number within the slice (from 1).
fn trec_chunk(chunk: &str, compat: Compat) -> Chunk<'_> {
    let mut entries = Vec::new();
    let mut lines = 0u64;
    for line in chunk.split_terminator('\n') {
        lines += 1;
        if let Some(entry) = trec_line(line, compat).map_err(|why| (lines, why))? {
            entries.push(entry);
        }
    }
    Ok((entries, lines))
}

/// `text` cut into about `parts` slices at line ends.
fn slices(text: &str, parts: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    let size = text.len() / parts.max(1) + 1;
    while !rest.is_empty() {
        let cut = if rest.len() <= size {
            rest.len()
        } else {
            rest.as_bytes().iter().skip(size).position(|&b| b == b'\n').map_or(rest.len(), |p| size + p + 1)
        };
        let (head, tail) = rest.split_at(cut);
        out.push(head);
        rest = tail;
    }
    out
}

fn trec<'a>(path: &Path, text: &'a str, threads: usize, compat: Compat) -> Result<Run<'a>, RunError> {
    let parts = slices(text, threads * 4);
    let parsed: Vec<Chunk<'a>> = std::thread::scope(|scope| {
        let handles: Vec<_> = parts
            .chunks(parts.len().div_ceil(threads.max(1)).max(1))
            .map(|group| scope.spawn(move || group.iter().map(|part| trec_chunk(part, compat)).collect::<Vec<_>>()))
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap_or_default()).collect()
    });
    // Each query's lines, in file order. A run lists a query's lines together, so a line of the
    // query just seen needs no lookup.
    let mut by_query: HashMap<&'a str, usize> = HashMap::new();
    let mut grouped: Vec<(&'a str, Vec<Scored<'a>>)> = Vec::new();
    let mut tag = None;
    let mut before = 0u64;
    for part in parsed {
        let (entries, lines) =
            part.map_err(|(line, why)| RunError::Line { path: path.to_path_buf(), line: before + line, why })?;
        let mut current: Option<(&str, usize)> = None;
        for (qid, doc, score, run_tag) in entries {
            tag = Some(run_tag);
            let index = match current {
                Some((last, index)) if last == qid => index,
                _ => {
                    let index = *by_query.entry(qid).or_insert_with(|| {
                        grouped.push((qid, Vec::new()));
                        grouped.len() - 1
                    });
                    current = Some((qid, index));
                    index
                }
            };
            if let Some((_, docs)) = grouped.get_mut(index) {
                docs.push((score, doc));
            }
        }
        before += lines;
    }
    // Ranking, a share of the queries on each thread.
    let share = grouped.len().div_ceil(threads.max(1)).max(1);
    std::thread::scope(|scope| {
        for chunk in grouped.chunks_mut(share) {
            scope.spawn(move || chunk.iter_mut().for_each(|(_, docs)| rank(docs)));
        }
    });
    let queries = grouped
        .into_iter()
        .map(|(qid, docs)| RunQuery {
            qid: Cow::Borrowed(qid),
            docs: docs.into_iter().map(|(_, doc)| Cow::Borrowed(doc)).collect(),
        })
        .collect();
    Ok(Run { queries, tag: tag.unwrap_or("rankpulse").to_string(), repeats_allowed: false })
}

/// One query's documents in trec_eval's order: score descending, then docno descending
/// (strcmp). Scores compare as C compares them: -0 equals 0.
fn rank(docs: &mut [Scored<'_>]) {
    docs.sort_by(|a, b| b.0.partial_cmp(&a.0).unwrap_or(std::cmp::Ordering::Equal).then_with(|| b.1.cmp(a.1)));
}

fn json_lines<'a>(path: &Path, text: &'a str) -> Result<Run<'a>, RunError> {
    #[derive(Deserialize)]
    struct Line<'a> {
        #[serde(borrow)]
        query: Cow<'a, str>,
        #[serde(borrow)]
        results: Vec<Cow<'a, str>>,
    }
    let mut queries: Vec<RunQuery<'a>> = Vec::new();
    let mut seen: HashMap<String, u64> = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let line_no = i as u64 + 1;
        if line.trim().is_empty() {
            continue;
        }
        let error = |why: String| RunError::Line { path: path.to_path_buf(), line: line_no, why };
        let parsed: Line<'a> = serde_json::from_str(line).map_err(|e| {
            error(format!("not a JSON object with a string \"query\" and a \"results\" list of strings: {e}"))
        })?;
        // An empty or blank document id is read as written: AutoRAG's measures give its query
        // no value, trec_eval's refuse it (crate::eval).
        if parsed.query.is_empty() {
            return Err(error("the query id is empty".to_string()));
        }
        if let Some(first) = seen.insert(parsed.query.to_string(), line_no) {
            return Err(error(format!("query {:?} was already ranked on line {first}", parsed.query)));
        }
        queries.push(RunQuery { qid: parsed.query, docs: parsed.results });
    }
    Ok(Run { queries, tag: "rankpulse".to_string(), repeats_allowed: true })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn docs<'a>(run: &'a Run<'a>, qid: &str) -> Vec<&'a str> {
        run.queries.iter().find(|q| q.qid == qid).unwrap().docs.iter().map(|d| d.as_ref()).collect()
    }

    #[test]
    fn trec_order_is_score_then_docno_descending_in_each_version_s_precision() {
        let text = "q1 Q0 a 1 2.0 tag\nq1 Q0 b 2 3.0 tag\nq1 Q0 c 3 2.0 tag\nq2 Q0 x 1 1 tag extra\n\
                    q1 Q0 d 4 2.00000001 tag\nq1\tQ0 e 5 -1e3 tag\n\nq2 Q0 y 2 1.5 other\n\
                    q1 Q0 f 6 -0 last\nq1 Q0 g 7 0 last\n";
        for threads in [1, 2, 7] {
            let run = read(Path::new("run.txt"), text, threads, Compat::V9).unwrap();
            // 2.00000001 is 2.0 as a float: d ties with a and c, and sorts first of them; -0
            // ties with 0, so g (the greater docno) comes first.
            assert_eq!(docs(&run, "q1"), ["b", "d", "c", "a", "g", "f", "e"]);
            assert_eq!(docs(&run, "q2"), ["y", "x"]);
            assert_eq!(run.tag, "last", "trec_eval keeps the last line's tag");
            let run = read(Path::new("run.txt"), text, threads, Compat::V10).unwrap();
            assert_eq!(docs(&run, "q1"), ["b", "d", "c", "a", "g", "f", "e"]);
        }
        let text = "q1 Q0 a 1 2.00000001 t\nq1 Q0 b 1 2.0 t\n  # a comment\n";
        assert_eq!(docs(&read(Path::new("run.txt"), text, 1, Compat::V10).unwrap(), "q1"), ["a", "b"]);
        assert!(read(Path::new("run.txt"), text, 1, Compat::V9).is_err(), "9.x reads no comments");
    }

    #[test]
    fn bad_lines_are_errors_naming_the_line() {
        let err = |text: &str| read(Path::new("run.txt"), text, 3, Compat::V10).unwrap_err().to_string();
        assert_eq!(err("q1 Q0 a 1 2 t\nq1 Q0 b 1 x t\n"), "run.txt:2: score \"x\" is not a number");
        assert_eq!(
            err("q1 Q0 a 1 2 t\n\nq1 Q0 b 1\n"),
            "run.txt:3: expected 6 fields (qid Q0 docno rank score tag), found 4"
        );
        assert!(err("q1 Q0 a 1 NaN t\n").contains("not finite"));
        let long: String = (0..5000).map(|i| format!("q{} Q0 d{i} 1 {i} t\n", i % 7)).collect::<String>() + "oops\n";
        assert_eq!(err(&long), "run.txt:5001: expected 6 fields (qid Q0 docno rank score tag), found 1");
    }

    #[test]
    fn json_lines_keep_their_order_and_repeats() {
        let text = "{\"query\":\"q1\",\"results\":[\"b\",\"a\",\"b\"]}\n\n{\"query\":\"q2\",\"results\":[]}\n";
        let run = read(Path::new("run.jsonl"), text, 2, Compat::V10).unwrap();
        assert_eq!(docs(&run, "q1"), ["b", "a", "b"]);
        assert!(docs(&run, "q2").is_empty());
        let err = read(
            Path::new("r.jsonl"),
            "{\"query\":\"q1\",\"results\":[]}\n{\"query\":\"q1\",\"results\":[]}\n",
            1,
            Compat::V10,
        );
        assert_eq!(err.unwrap_err().to_string(), "r.jsonl:2: query \"q1\" was already ranked on line 1");
        let err = read(Path::new("r.jsonl"), "{\"query\":\"q1\"}\n", 1, Compat::V10).unwrap_err().to_string();
        assert!(err.starts_with("r.jsonl:1: not a JSON object"), "{err}");
        let err = read(Path::new("r.jsonl"), "{\"query\":\"\",\"results\":[\"a\"]}\n", 1, Compat::V10).unwrap_err();
        assert_eq!(err.to_string(), "r.jsonl:1: the query id is empty");
        // Each evaluation decides about an empty or blank id (crate::eval); read as written.
        let run =
            read(Path::new("r.jsonl"), "{\"query\":\"q1\",\"results\":[\"a\",\"\",\" \"]}\n", 1, Compat::V10).unwrap();
        assert_eq!(docs(&run, "q1"), ["a", "", " "]);
    }
}
