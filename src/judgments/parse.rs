#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]
//! One line of a judgment list into a [`Judgment`], or the reason it is rejected.
//!
//! Two formats, one judgment per line:
//!
//! * **TREC qrels** (what trec_eval reads): `query iteration doc grade`, separated by
//!   whitespace; the iteration column is ignored, as trec_eval ignores it.
//! * **JSON lines**: `{"query": "...", "doc_id": "...", "grade": 2}`; other keys are ignored.
//!
//! Blank lines are skipped. A grade is an integer; a negative one (TREC's "judged, and
//! harmful") is read as 0: judged, not relevant, which is what trec_eval's measures make of
//! it. A grade above the largest allowed one is rejected, because ERR's stopping probability
//! of a result is 2^g - 1 over 2^max.

use std::borrow::Cow;
use std::path::Path;

use serde::Deserialize;
use unicode_normalization::{is_nfkc_quick, IsNormalized, UnicodeNormalization};

/// How a judgment file's lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `query iteration doc grade`.
    Qrels,
    /// `{"query", "doc_id", "grade"}`.
    JsonLines,
}

impl Format {
    /// The format a file's name suggests: `.jsonl`, `.ndjson` and `.json` are JSON lines,
    /// anything else qrels (`qrels.txt`, `qrels.robust04`, ...).
    pub fn of_path(path: &Path) -> Format {
        match path.extension().and_then(|e| e.to_str()) {
            Some("jsonl" | "ndjson" | "json") => Format::JsonLines,
            _ => Format::Qrels,
        }
    }
}

/// One judgment: a document's grade for a query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judgment<'a> {
    /// The query as the file writes it (normalized, if at all, when it is keyed).
    pub query: Cow<'a, str>,
    /// The document (result) id, compared exactly with the ids of a result list.
    pub doc: Cow<'a, str>,
    /// The grade, 0 (judged, not relevant) to the largest allowed.
    pub grade: u8,
}

/// Why a line is not a judgment. Counted by [`Reject::reason`] and quoted with its line
/// number when a file is loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Reject {
    #[error("expected 4 fields (query iteration doc grade), found {0}")]
    Fields(usize),
    #[error("not a JSON object with string \"query\" and \"doc_id\" and integer \"grade\": {0}")]
    Json(String),
    #[error("grade {0:?} is not an integer")]
    Grade(String),
    #[error("grade {grade} is above the largest allowed grade {max}")]
    GradeAbove { grade: i64, max: u8 },
    #[error("the query or document id is empty")]
    EmptyId,
    #[error("the document is judged again for this query (the first grade counts)")]
    Duplicate,
}

impl Reject {
    /// The reason as the counters name it.
    pub fn reason(&self) -> &'static str {
        match self {
            Reject::Fields(_) => "fields",
            Reject::Json(_) => "json",
            Reject::Grade(_) => "grade",
            Reject::GradeAbove { .. } => "grade_above_max",
            Reject::EmptyId => "empty_id",
            Reject::Duplicate => "duplicate",
        }
    }
}

/// The line's judgment; `Ok(None)` for a blank line.
pub fn parse_line(format: Format, line: &str, max_grade: u8) -> Result<Option<Judgment<'_>>, Reject> {
    if line.trim().is_empty() {
        return Ok(None);
    }
    let (query, doc, grade) = match format {
        Format::Qrels => {
            let mut fields = line.split_ascii_whitespace();
            let (Some(query), Some(_iteration), Some(doc), Some(grade), None) =
                (fields.next(), fields.next(), fields.next(), fields.next(), fields.next())
            else {
                return Err(Reject::Fields(line.split_ascii_whitespace().count()));
            };
            let grade: i64 = grade.parse().map_err(|_| Reject::Grade(grade.to_string()))?;
            (Cow::Borrowed(query), Cow::Borrowed(doc), grade)
        }
        Format::JsonLines => {
            // serde reads a struct from a JSON array too (`["q", "d", 1]`, fields by position):
            // a judgment's fields are named, so an array is not one.
            if line.trim_start().starts_with('[') {
                return Err(Reject::Json("a JSON array, not an object".into()));
            }
            #[derive(Deserialize)]
            struct Line<'a> {
                #[serde(borrow)]
                query: Cow<'a, str>,
                #[serde(borrow)]
                doc_id: Cow<'a, str>,
                grade: serde_json::Value,
            }
            let parsed: Line<'_> = serde_json::from_str(line).map_err(|e| Reject::Json(e.to_string()))?;
            let grade = match &parsed.grade {
                serde_json::Value::Number(n) => n.as_i64().ok_or_else(|| Reject::Grade(n.to_string()))?,
                other => return Err(Reject::Grade(other.to_string())),
            };
            (parsed.query, parsed.doc_id, grade)
        }
    };
    if query.is_empty() || doc.is_empty() {
        return Err(Reject::EmptyId);
    }
    if grade > i64::from(max_grade) {
        return Err(Reject::GradeAbove { grade, max: max_grade });
    }
    let grade = u8::try_from(grade.max(0)).map_err(|_| Reject::GradeAbove { grade, max: max_grade })?;
    Ok(Some(Judgment { query, doc, grade }))
}

/// A query's text as judgments and impressions are matched on it with `judgments.key =
/// "query"`: Unicode NFKC, then lower case of the whole text, then surrounding whitespace
/// removed and every run of whitespace one space. Written into `out` (cleared first), so that
/// the hot path reuses one buffer.
///
/// NFKC because queries are typed on every keyboard: full-width Latin and the ideographic
/// space of Japanese and Chinese input methods, half-width katakana, Hangul as conjoining
/// jamo (macOS file names and some input methods) all mean the plain text. Lower case of the
/// whole text (`str::to_lowercase`), not of each character, because Greek capital sigma is
/// `ς` at the end of a word and `σ` elsewhere: `ΟΔΟΣ` is `οδος`. This is NFKC and then
/// Unicode's full lower case, close to Unicode's NFKC_Casefold (Elasticsearch's `icu_normalizer`
/// `nfkc_cf`, Lucene's ICU folding) but not case folding: `ß` stays `ß` and `ς` stays `ς`, as a
/// user types them. The same function keys the judgment file's queries and every impression's,
/// so whatever it does, both sides meet.
///
/// ASCII text, the bulk of traffic, is already NFKC and lowers byte for byte: it writes into
/// `out` and allocates nothing else. Other text takes two temporary strings.
pub fn normalize_query(text: &str, out: &mut String) {
    out.clear();
    if text.is_ascii() {
        push_words(text, out, |word, out| out.extend(word.bytes().map(|b| char::from(b.to_ascii_lowercase()))));
        return;
    }
    let lower = if is_nfkc_quick(text.chars()) == IsNormalized::Yes {
        text.to_lowercase()
    } else {
        text.nfkc().collect::<String>().to_lowercase()
    };
    push_words(&lower, out, |word, out| out.push_str(word));
}

/// `text`'s words (split at Unicode whitespace) into `out`, one space apart, each by `push`.
fn push_words(text: &str, out: &mut String, push: impl Fn(&str, &mut String)) {
    for word in text.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        push(word, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn qrels(line: &str) -> Result<Option<Judgment<'_>>, Reject> {
        parse_line(Format::Qrels, line, 3)
    }
    fn json(line: &str) -> Result<Option<Judgment<'_>>, Reject> {
        parse_line(Format::JsonLines, line, 3)
    }
    fn judgment(query: &str, doc: &str, grade: u8) -> Option<Judgment<'static>> {
        Some(Judgment { query: query.to_string().into(), doc: doc.to_string().into(), grade })
    }

    #[test]
    fn qrels_lines() {
        assert_eq!(qrels("301 0 FBIS3-10082 1"), Ok(judgment("301", "FBIS3-10082", 1)));
        assert_eq!(qrels("  q1\t0  d 3\r"), Ok(judgment("q1", "d", 3)));
        assert_eq!(qrels("q1 0 d -1"), Ok(judgment("q1", "d", 0)), "negative: judged, not relevant");
        assert_eq!(qrels(""), Ok(None));
        assert_eq!(qrels("   "), Ok(None));
        assert_eq!(qrels("q1 0 d"), Err(Reject::Fields(3)));
        assert_eq!(qrels("q1 0 d 1 extra"), Err(Reject::Fields(5)));
        assert_eq!(qrels("q1 0 d 1.5"), Err(Reject::Grade("1.5".into())));
        assert_eq!(qrels("q1 0 d 4"), Err(Reject::GradeAbove { grade: 4, max: 3 }));
        assert_eq!(qrels("q1 0 d 99999999999999999999"), Err(Reject::Grade("99999999999999999999".into())));
    }

    #[test]
    fn json_lines() {
        assert_eq!(
            json(r#"{"query":"Red Shoes","doc_id":"d1","grade":2,"rater":"x"}"#),
            Ok(judgment("Red Shoes", "d1", 2))
        );
        assert_eq!(json(r#"{"query":"a\"b","doc_id":"d\u00e9","grade":-2}"#), Ok(judgment("a\"b", "dé", 0)));
        assert!(matches!(json(r#"{"query":"q","doc_id":"d"}"#), Err(Reject::Json(_))));
        assert!(matches!(json(r#"{"query":"q","doc_id":7,"grade":1}"#), Err(Reject::Json(_))));
        assert!(matches!(json("not json"), Err(Reject::Json(_))));
        assert_eq!(json(r#"{"query":"q","doc_id":"d","grade":1.5}"#), Err(Reject::Grade("1.5".into())));
        assert_eq!(json(r#"{"query":"q","doc_id":"d","grade":"2"}"#), Err(Reject::Grade("\"2\"".into())));
        assert_eq!(json(r#"{"query":"","doc_id":"d","grade":1}"#), Err(Reject::EmptyId));
        assert_eq!(json(r#"{"query":"q","doc_id":"d","grade":7}"#), Err(Reject::GradeAbove { grade: 7, max: 3 }));
    }

    #[test]
    fn a_json_array_is_not_a_judgment() {
        // serde reads a struct from a sequence too: the fields must be named, as documented.
        for line in [r#"["q","d",1]"#, r#"  ["q", "d", 1]"#, r#"[]"#] {
            let rejected = json(line);
            assert!(matches!(rejected, Err(Reject::Json(_))), "{line}: {rejected:?}");
            assert_eq!(rejected.unwrap_err().reason(), "json");
        }
    }

    #[test]
    fn formats_by_name() {
        assert_eq!(Format::of_path(Path::new("j.jsonl")), Format::JsonLines);
        assert_eq!(Format::of_path(Path::new("dir/j.ndjson")), Format::JsonLines);
        assert_eq!(Format::of_path(Path::new("qrels.txt")), Format::Qrels);
        assert_eq!(Format::of_path(Path::new("qrels")), Format::Qrels);
    }

    #[test]
    fn normalized_queries() {
        let mut out = String::from("stale");
        for (text, normalized) in [
            ("Red  Shoes", "red shoes"),
            ("  red\tshoes \n", "red shoes"),
            ("ÉCOLE Straße", "école straße"),
            ("", ""),
            ("   ", ""),
            ("a\u{b}b", "a b"),
            // Final sigma: lower case of the whole text, not of each character.
            ("ΟΔΟΣ", "οδος"),
            ("ΣΟΦΙΑ ΟΔΟΣ ΑΘΗΝΑΣ", "σοφια οδος αθηνας"),
            ("ΟΔΟΣ-ΑΘΗΝΑΣ", "οδος-αθηνας"),
            ("οδος", "οδος"),
            // NFKC: full-width Latin and the ideographic space, half-width katakana, Hangul
            // written as conjoining jamo (as macOS keeps it) and compatibility jamo, ligatures.
            ("ＲＥＤ\u{3000}Ｓｈｏｅｓ", "red shoes"),
            ("ｶﾀｶﾅ", "カタカナ"),
            ("\u{1112}\u{1161}\u{11ab}\u{1100}\u{116e}\u{11a8}", "한국"),
            ("\u{3131}", "\u{1100}"),
            ("ﬁle №5", "file no5"),
            ("Ａ\u{00a0}B", "a b"),
            // Lower case, not case folding: ß stays, as Unicode's lower case keeps it.
            ("STRASSE Straße", "strasse straße"),
        ] {
            normalize_query(text, &mut out);
            assert_eq!(out, normalized, "{text:?}");
            let again = out.clone();
            normalize_query(&again, &mut out);
            assert_eq!(out, normalized, "{text:?}: normalizing twice changes nothing");
        }
    }

    #[test]
    fn ascii_queries_reuse_the_buffer() {
        let mut out = String::with_capacity(64);
        let buffer = out.as_ptr();
        for text in ["Red  Shoes", "  LAPTOP\tstand ", "q"] {
            normalize_query(text, &mut out);
            assert_eq!((out.as_ptr(), out.capacity()), (buffer, 64), "{text:?}");
        }
    }
}
