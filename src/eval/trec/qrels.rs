#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]
//! A qrels file read for `rankpulse eval` as trec_eval reads it (get_qrels.c): every judgment
//! kept with its integer grade, negative ones included (trec_eval's "in the pool, not judged"),
//! queries and documents in byte order. A document judged twice for a query is an error when
//! that query is evaluated, as in trec_eval.
//!
//! * **TREC qrels**: `query iteration doc grade`, whitespace separated. trec_eval 10.0 skips
//!   lines starting with `#`; 9.x reads them as judgments (and stops at the malformed line).
//! * **JSON lines** (`.jsonl`, `.ndjson`, `.json`): `{"query", "doc_id", "grade"}`, as
//!   `[judgments]` reads them.
//!
//! Stricter than trec_eval where trec_eval would read nonsense: a grade that is not an
//! integer is an error naming the line (trec_eval's `atol` reads `1.5` as 1 and `x` as 0).
//! Blank lines are skipped (trec_eval calls them malformed).

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::Compat;

/// One query's judgments.
#[derive(Debug, Clone)]
pub struct QueryQrels<'a> {
    /// The query id.
    pub qid: Cow<'a, str>,
    /// (document, grade), sorted by document; a document judged twice appears twice.
    pub docs: Vec<(Cow<'a, str>, i64)>,
}

/// Every query's judgments, sorted by query id.
#[derive(Debug, Default)]
pub struct Qrels<'a> {
    /// The queries in byte order of their ids.
    pub queries: Vec<QueryQrels<'a>>,
}

/// A qrels file that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum QrelsError {
    #[error("{path}:{line}: {why}")]
    Line { path: PathBuf, line: u64, why: String },
}

impl<'a> Qrels<'a> {
    /// Reads TREC qrels, or JSON lines by the file's extension.
    pub fn parse(path: &Path, text: &'a str, compat: Compat) -> Result<Qrels<'a>, QrelsError> {
        let json = matches!(path.extension().and_then(|e| e.to_str()), Some("jsonl" | "ndjson" | "json"));
        let mut lines: Vec<(Cow<'a, str>, Cow<'a, str>, i64)> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let error = |why: String| QrelsError::Line { path: path.to_path_buf(), line: i as u64 + 1, why };
            if line.trim().is_empty() || (compat == Compat::V10 && !json && line.starts_with('#')) {
                continue;
            }
            lines.push(if json { json_line(line).map_err(error)? } else { trec_line(line).map_err(error)? });
        }
        // Stable: a document judged twice keeps its lines' order, as trec_eval's merge sort does.
        lines.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
        let mut queries: Vec<QueryQrels<'a>> = Vec::new();
        for (qid, doc, grade) in lines {
            match queries.last_mut() {
                Some(last) if last.qid == qid => last.docs.push((doc, grade)),
                _ => queries.push(QueryQrels { qid, docs: vec![(doc, grade)] }),
            }
        }
        Ok(Qrels { queries })
    }

    /// The judgments of `qid`.
    pub fn query(&self, qid: &str) -> Option<&QueryQrels<'a>> {
        self.queries.binary_search_by(|q| q.qid.as_ref().cmp(qid)).ok().and_then(|i| self.queries.get(i))
    }

    /// Judgments with a grade above 0 over every query: trec_eval's `num_rel` over all queries
    /// under `-c` (whatever `-l` is).
    pub fn positive_judgments(&self) -> i64 {
        self.queries.iter().map(|q| q.docs.iter().filter(|d| d.1 > 0).count() as i64).sum()
    }
}

fn trec_line(line: &str) -> Result<(Cow<'_, str>, Cow<'_, str>, i64), String> {
    let mut fields = line.split_ascii_whitespace();
    let (Some(qid), Some(_iteration), Some(doc), Some(grade), None) =
        (fields.next(), fields.next(), fields.next(), fields.next(), fields.next())
    else {
        return Err(format!(
            "expected 4 fields (query iteration doc grade), found {}",
            line.split_ascii_whitespace().count()
        ));
    };
    let grade = grade.parse::<i64>().map_err(|_| format!("grade {grade:?} is not an integer"))?;
    Ok((Cow::Borrowed(qid), Cow::Borrowed(doc), grade))
}

fn json_line(line: &str) -> Result<(Cow<'_, str>, Cow<'_, str>, i64), String> {
    #[derive(Deserialize)]
    struct Judgment<'a> {
        #[serde(borrow)]
        query: Cow<'a, str>,
        #[serde(borrow)]
        doc_id: Cow<'a, str>,
        grade: i64,
    }
    // serde reads a struct from an array too: `["q1", "d", 1]` is not a judgment.
    if !line.trim_start().starts_with('{') {
        return Err("not a JSON object: a judgment is {\"query\", \"doc_id\", \"grade\"}".to_string());
    }
    let parsed: Judgment<'_> = serde_json::from_str(line)
        .map_err(|e| format!("not a JSON object with string \"query\" and \"doc_id\" and an integer \"grade\": {e}"))?;
    if parsed.query.trim().is_empty() || parsed.doc_id.trim().is_empty() {
        return Err("an empty query or document id".to_string());
    }
    Ok((parsed.query, parsed.doc_id, parsed.grade))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorted_negative_grades_kept_and_comments_by_version() {
        let text = "q2 0 b 1\n# a comment\n\nq1 0 z -1\nq1 0 a 3\n";
        let err = Qrels::parse(Path::new("q.txt"), text, Compat::V9).unwrap_err().to_string();
        assert_eq!(err, "q.txt:2: expected 4 fields (query iteration doc grade), found 3");
        let qrels = Qrels::parse(Path::new("q.txt"), text, Compat::V10).unwrap();
        let q1 = qrels.query("q1").unwrap();
        assert_eq!(q1.docs, [(Cow::Borrowed("a"), 3), (Cow::Borrowed("z"), -1)]);
        assert_eq!(qrels.queries.iter().map(|q| q.qid.as_ref()).collect::<Vec<_>>(), ["q1", "q2"]);
        assert_eq!(qrels.positive_judgments(), 2);
        let err = Qrels::parse(Path::new("q.txt"), "q1 0 a x\n", Compat::V10).unwrap_err().to_string();
        assert!(err.contains("q.txt:1: grade \"x\" is not an integer"), "{err}");
    }

    #[test]
    fn json_lines() {
        let text = "{\"query\":\"q1\",\"doc_id\":\"d\",\"grade\":-1}\n";
        let qrels = Qrels::parse(Path::new("q.jsonl"), text, Compat::V10).unwrap();
        assert_eq!(qrels.query("q1").unwrap().docs, [(Cow::Borrowed("d"), -1)]);
        let err = Qrels::parse(Path::new("q.jsonl"), "[\"q1\",\"d\",1]\n", Compat::V10).unwrap_err().to_string();
        assert!(err.contains("not a JSON object"), "{err}");
    }
}
