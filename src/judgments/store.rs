#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]
//! A loaded judgment list: [`Judgments`], looked up by query key and document.
//!
//! Built once per load and never changed (a reload builds a new one and swaps it in whole), so
//! it is laid out for lookups and memory: every judgment is one `u64`, the document key's top
//! 56 bits and the grade in the low 8 (a lookup touches one cache line, not a key's and then a
//! grade's), in a flat array sorted by query and then document; a query's judgments are one
//! range of it, found through a hash map, and a document's grade a binary search within the
//! range. A judgment costs 8 bytes plus its query's share of the map, with no per-query
//! allocation. 56 bits of a document key tell apart the documents of one query as surely as
//! the pending impressions' result slots do.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};

use super::parse::{normalize_query, parse_line, Format, Reject};
use crate::ids::{doc_key, DocKey};

/// The identity of a judged query: the xxh3-64 hash of its (normalized) text. 64 bits keep
/// a collision between two of a million judged queries at about 3 in 10^8.
pub type JudgedQueryKey = u64;

/// The key of a query's text, normalized first when `normalize` is set (see
/// [`normalize_query`]); `scratch` is reused so that the hot path does not allocate.
pub fn judged_query_key(text: &str, normalize: bool, scratch: &mut String) -> JudgedQueryKey {
    if normalize {
        normalize_query(text, scratch);
        xxhash_rust::xxh3::xxh3_64(scratch.as_bytes())
    } else {
        xxhash_rust::xxh3::xxh3_64(text.as_bytes())
    }
}

/// How a judgment file is read.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Its line format.
    pub format: Format,
    /// Whether queries are normalized before they are keyed (`judgments.key = "query"`).
    pub normalize: bool,
    /// The largest grade allowed: a line above it is rejected.
    pub max_grade: u8,
    /// The largest share of non-blank lines that may be rejected: more, and the file is
    /// refused whole (a file in the wrong format, or half written, is not a judgment list).
    pub max_rejected_share: f64,
    /// Keep every query's text (the offline evaluation prints it); online only keys are kept.
    pub keep_query_names: bool,
}

/// What loading a file found: the figures a reload reports and exports.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoadReport {
    /// Non-blank lines read.
    pub lines: u64,
    /// Judgments kept.
    pub judgments: u64,
    /// Distinct queries with at least one judgment.
    pub queries: u64,
    /// Rejected lines by [`Reject::reason`].
    pub rejected: BTreeMap<&'static str, u64>,
    /// The first few rejected lines: line number (from 1) and why, for the log.
    pub first_rejects: Vec<(u64, String)>,
}

impl LoadReport {
    /// Rejected lines, over all reasons.
    pub fn rejected_total(&self) -> u64 {
        self.rejected.values().sum()
    }
}

/// How many rejected lines a report quotes.
const QUOTED_REJECTS: usize = 5;

/// Why a judgment file was not loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read judgments from {path}: {error}")]
    Read { path: PathBuf, error: io::Error },
    #[error("{path}: {rejected} of {lines} lines rejected, more than the allowed share {max_share} (first: {first})")]
    TooManyRejected { path: PathBuf, rejected: u64, lines: u64, max_share: f64, first: String },
}

/// The bits of an entry that hold the grade; the rest is the document key's top bits.
const GRADE_BITS: u64 = 0xFF;

/// A judgment as stored: the document's key without its low byte, and the grade in it.
fn entry(doc: DocKey, grade: u8) -> u64 {
    judged_bits(doc) | u64::from(grade)
}

/// The bits of a document key a judgment list keeps: two keys equal in them are one document
/// to it.
pub fn judged_bits(doc: DocKey) -> u64 {
    doc & !GRADE_BITS
}

/// A query's range of the flat array.
#[derive(Debug, Clone, Copy)]
struct Range {
    start: u32,
    len: u32,
}

/// A judgment list, keyed for lookups. See the module documentation for its layout.
#[derive(Debug, Default)]
pub struct Judgments {
    /// Each judged query's range of `entries`.
    queries: HashMap<JudgedQueryKey, Range, foldhash::fast::FixedState>,
    /// Every judgment ([`entry`]), sorted within each query's range: what a grade is found by.
    entries: Box<[u64]>,
    /// Query texts by key, in file order of first appearance, when
    /// [`LoadOptions::keep_query_names`] is set.
    names: Vec<(JudgedQueryKey, Box<str>)>,
}

/// One query's judgments.
#[derive(Debug, Clone, Copy)]
pub struct JudgedQuery<'a> {
    /// Its judgments ([`entry`]), sorted.
    entries: &'a [u64],
}

impl<'a> JudgedQuery<'a> {
    /// The document's grade, if it is judged.
    pub fn grade(&self, doc: DocKey) -> Option<u8> {
        let i = self.entries.binary_search_by_key(&judged_bits(doc), |e| judged_bits(*e)).ok()?;
        self.entries.get(i).map(|e| (e & GRADE_BITS) as u8)
    }
    /// Every judged document's grade (in document-key order).
    pub fn grades(&self) -> impl Iterator<Item = u8> + 'a {
        self.entries.iter().map(|e| (e & GRADE_BITS) as u8)
    }
    /// Judged documents.
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl Judgments {
    /// Reads and keys the file at `path`.
    pub fn load(path: &Path, options: &LoadOptions) -> Result<(Judgments, LoadReport), LoadError> {
        let read_error = |error| LoadError::Read { path: path.to_path_buf(), error };
        let file = File::open(path).map_err(read_error)?;
        let (judgments, report) = Self::read(BufReader::with_capacity(1 << 20, file), options).map_err(read_error)?;
        let rejected = report.rejected_total();
        if rejected > 0 && rejected as f64 > options.max_rejected_share * report.lines as f64 {
            let first =
                report.first_rejects.first().map(|(line, why)| format!("line {line}: {why}")).unwrap_or_default();
            return Err(LoadError::TooManyRejected {
                path: path.to_path_buf(),
                rejected,
                lines: report.lines,
                max_share: options.max_rejected_share,
                first,
            });
        }
        Ok((judgments, report))
    }

    /// Reads judgments line by line; a line that is not valid UTF-8 is rejected like any
    /// other bad line. Only reading can fail, not a line.
    pub fn read(mut reader: impl BufRead, options: &LoadOptions) -> io::Result<(Judgments, LoadReport)> {
        let mut report = LoadReport::default();
        let reject = |report: &mut LoadReport, line_no: u64, why: Reject| {
            *report.rejected.entry(why.reason()).or_default() += 1;
            if report.first_rejects.len() < QUOTED_REJECTS {
                report.first_rejects.push((line_no, why.to_string()));
            }
        };
        // (query, document key without its low byte, grade, line): sorted, then the first of
        // each (query, doc) kept.
        let mut entries: Vec<(JudgedQueryKey, DocKey, u8, u32)> = Vec::new();
        let mut names: HashMap<JudgedQueryKey, Box<str>, foldhash::fast::FixedState> = HashMap::default();
        let mut name_order = Vec::new();
        let (mut buf, mut scratch) = (Vec::new(), String::new());
        let mut line_no = 0u64;
        loop {
            buf.clear();
            if reader.read_until(b'\n', &mut buf)? == 0 {
                break;
            }
            line_no += 1;
            let Ok(line) = std::str::from_utf8(&buf) else {
                report.lines += 1;
                reject(&mut report, line_no, Reject::Json("not UTF-8".into()));
                continue;
            };
            let line = line.trim_end_matches(['\n', '\r']);
            match parse_line(options.format, line, options.max_grade) {
                Ok(None) => {}
                Ok(Some(judgment)) => {
                    report.lines += 1;
                    let query = judged_query_key(&judgment.query, options.normalize, &mut scratch);
                    if options.keep_query_names && !names.contains_key(&query) {
                        names.insert(query, judgment.query.as_ref().into());
                        name_order.push(query);
                    }
                    entries.push((query, judged_bits(doc_key(&judgment.doc)), judgment.grade, line_no as u32));
                }
                Err(why) => {
                    report.lines += 1;
                    reject(&mut report, line_no, why);
                }
            }
        }
        entries.sort_unstable();
        let mut queries: HashMap<JudgedQueryKey, Range, foldhash::fast::FixedState> = HashMap::default();
        let mut kept = Vec::with_capacity(entries.len());
        let mut previous: Option<(JudgedQueryKey, DocKey)> = None;
        let mut duplicates = Vec::new();
        for &(query, doc, grade, line) in &entries {
            if previous == Some((query, doc)) {
                duplicates.push(u64::from(line));
                continue;
            }
            previous = Some((query, doc));
            let index = kept.len() as u32;
            queries.entry(query).or_insert(Range { start: index, len: 0 }).len += 1;
            kept.push(entry(doc, grade));
        }
        duplicates.sort_unstable();
        for line in duplicates {
            reject(&mut report, line, Reject::Duplicate);
        }
        report.first_rejects.sort_unstable();
        report.judgments = kept.len() as u64;
        report.queries = queries.len() as u64;
        let names = name_order.into_iter().filter_map(|key| Some((key, names.remove(&key)?))).collect();
        Ok((Judgments { queries, entries: kept.into(), names }, report))
    }

    /// The judgments of a query, if it has any.
    pub fn query(&self, key: JudgedQueryKey) -> Option<JudgedQuery<'_>> {
        let range = self.queries.get(&key)?;
        let (start, end) = (range.start as usize, range.start as usize + range.len as usize);
        Some(JudgedQuery { entries: self.entries.get(start..end)? })
    }

    /// Judgments kept.
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    /// The largest grade judged.
    pub fn max_grade(&self) -> u8 {
        self.entries.iter().map(|e| (e & GRADE_BITS) as u8).max().unwrap_or(0)
    }
    /// Judged queries.
    pub fn query_count(&self) -> usize {
        self.queries.len()
    }
    /// Query texts by key, in order of first appearance (empty unless kept).
    pub fn query_names(&self) -> &[(JudgedQueryKey, Box<str>)] {
        &self.names
    }
    /// Bytes held (the arrays and the map's table, not the allocator's overhead), for the
    /// `rankpulse_judgments_bytes` gauge and the benchmark.
    pub fn heap_bytes(&self) -> usize {
        let map = self.queries.capacity() * (std::mem::size_of::<(JudgedQueryKey, Range)>() + 1);
        let names: usize =
            self.names.iter().map(|(_, n)| n.len() + std::mem::size_of::<(JudgedQueryKey, Box<str>)>()).sum();
        map + self.entries.len() * std::mem::size_of::<u64>() + names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(format: Format) -> LoadOptions {
        LoadOptions { format, normalize: true, max_grade: 3, max_rejected_share: 0.5, keep_query_names: true }
    }

    fn key(text: &str) -> JudgedQueryKey {
        judged_query_key(text, true, &mut String::new())
    }

    #[test]
    fn lookups_by_normalized_query_and_document() {
        let file = "Shoes 0 d1 2\nshoes 0 d2 0\n\nq2 0 d1 3\nq2 0 d9 -1\nSHOES 0 d1 3\nbroken line\nq3 0 d 9\n";
        let (judgments, report) = Judgments::read(file.as_bytes(), &options(Format::Qrels)).unwrap();
        assert_eq!(judgments.len(), 4);
        assert_eq!(judgments.query_count(), 2);
        let shoes = judgments.query(key("sHoEs")).unwrap();
        assert_eq!(shoes.grade(doc_key("d1")), Some(2), "the first grade counts");
        assert_eq!(shoes.grade(doc_key("d2")), Some(0), "judged, not relevant");
        assert_eq!(shoes.grade(doc_key("d3")), None, "not judged");
        let q2 = judgments.query(key("q2")).unwrap();
        assert_eq!(q2.grade(doc_key("d9")), Some(0));
        let mut grades: Vec<u8> = q2.grades().collect();
        grades.sort_unstable();
        assert_eq!(grades, [0, 3]);
        assert!(judgments.query(key("q3")).is_none());
        assert_eq!(report.lines, 7);
        assert_eq!(report.judgments, 4);
        assert_eq!(report.queries, 2);
        assert_eq!(report.rejected_total(), 3);
        assert_eq!(report.rejected.get("duplicate"), Some(&1));
        assert_eq!(report.rejected.get("fields"), Some(&1));
        assert_eq!(report.rejected.get("grade_above_max"), Some(&1));
        let lines: Vec<u64> = report.first_rejects.iter().map(|(line, _)| *line).collect();
        assert_eq!(lines, [6, 7, 8], "in line order");
        let names: Vec<&str> = judgments.query_names().iter().map(|(_, n)| n.as_ref()).collect();
        assert_eq!(names, ["Shoes", "q2"], "as first written");
    }

    #[test]
    fn json_lines_and_exact_keys() {
        let file = "{\"query\":\" Laptop\",\"doc_id\":\"a\",\"grade\":1}\n{\"query\":\"laptop\",\"doc_id\":\"b\",\"grade\":2}\n";
        let exact = LoadOptions { normalize: false, ..options(Format::JsonLines) };
        let (judgments, _) = Judgments::read(file.as_bytes(), &exact).unwrap();
        assert_eq!(judgments.query_count(), 2, "not normalized: two queries");
        let laptop = judgments.query(judged_query_key(" Laptop", false, &mut String::new())).unwrap();
        assert_eq!(laptop.len(), 1);
        let (judgments, _) = Judgments::read(file.as_bytes(), &options(Format::JsonLines)).unwrap();
        assert_eq!(judgments.query(key("LAPTOP")).unwrap().len(), 2);
    }

    #[test]
    fn a_query_s_judgments_meet_under_one_key_whatever_its_case_and_width() {
        let file = "{\"query\":\"ΟΔΟΣ\",\"doc_id\":\"a\",\"grade\":1}\n\
                    {\"query\":\"οδος\",\"doc_id\":\"b\",\"grade\":2}\n\
                    {\"query\":\" ΟΔΟΣ\\u00a0\",\"doc_id\":\"c\",\"grade\":3}\n\
                    [\"οδος\",\"d\",3]\n";
        let (judgments, report) =
            Judgments::read(file.as_bytes(), &LoadOptions { max_rejected_share: 1.0, ..options(Format::JsonLines) })
                .unwrap();
        assert_eq!(judgments.query_count(), 1, "one query, not split over keys");
        assert_eq!(judgments.query(key("Οδος")).unwrap().len(), 3);
        assert_eq!(report.rejected.get("json"), Some(&1), "the array line");
    }

    #[test]
    fn a_file_of_mostly_bad_lines_is_refused_naming_the_first() {
        let dir = std::env::temp_dir().join(format!("rankpulse-judgments-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("qrels.txt");
        std::fs::write(&path, "q 0 d 1\nnot a judgment\nnor this\n").unwrap();
        let err = Judgments::load(&path, &options(Format::Qrels)).unwrap_err().to_string();
        assert!(err.contains("2 of 3 lines rejected") && err.contains("line 2: expected 4 fields"), "{err}");
        std::fs::write(&path, "q 0 d 1\nq 0 e 1\nnot a judgment\n").unwrap();
        let (judgments, report) = Judgments::load(&path, &options(Format::Qrels)).unwrap();
        assert_eq!((judgments.len(), report.rejected_total()), (2, 1), "a third is within the share");
        let missing = Judgments::load(&dir.join("missing"), &options(Format::Qrels)).unwrap_err().to_string();
        assert!(missing.contains("cannot read judgments from") && missing.contains("missing"), "{missing}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn invalid_utf8_is_a_rejected_line() {
        let (judgments, report) = Judgments::read(&b"q 0 d 1\nq 0 \xff 1\n"[..], &options(Format::Qrels)).unwrap();
        assert_eq!((judgments.len(), report.rejected_total()), (1, 1));
    }
}
