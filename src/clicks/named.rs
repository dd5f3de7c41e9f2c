//! A click table with its names: what the engine hands out, `/clicks` serves and
//! `rankpulse judgments --from-clicks` reads, merges and writes.
//!
//! Its text form is JSON lines, one per (query, document, rank) cell:
//! `{"query": "red shoes", "doc_id": "d1", "rank": 1, "impressions": 40, "clicks": 9}`, rank
//! 1-based, with `"segment"` first for traffic of a segment. Lines of the same segment, query,
//! document and rank add up, so the tables of several
//! replicas (or days) merge by concatenation. Read back, every line is checked (a rank of 0
//! or past `max_rank`, clicks over impressions, a missing field) and a bad one is counted
//! and named, never guessed at.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::{Cell, ClickTable};

/// A click table and the names of each of its pairs.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct NamedTable {
    /// The counts.
    pub table: ClickTable,
    /// Per pair, in the table's order: its segment, query text and document id.
    pub names: Vec<PairName>,
    /// Each name's pair, to merge.
    index: HashMap<PairName, usize>,
}

/// Who a pair is: a document for a normalized query, within a segment of the traffic (empty:
/// none).
#[derive(Debug, Default, Clone, PartialEq, Eq, Hash)]
pub struct PairName {
    pub segment: Box<str>,
    pub query: Box<str>,
    pub doc: Box<str>,
}

/// One line of the text form.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Line<'a> {
    /// Absent for traffic without a segment.
    #[serde(borrow, default, skip_serializing_if = "str::is_empty")]
    segment: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    query: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    doc_id: std::borrow::Cow<'a, str>,
    rank: u64,
    impressions: u64,
    clicks: u64,
}

/// A line that could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadLine {
    /// 1-based.
    pub line: usize,
    pub problem: String,
}

impl NamedTable {
    pub fn new(max_rank: usize) -> Self {
        NamedTable { table: ClickTable { max_rank, pairs: Vec::new() }, ..Default::default() }
    }

    /// Adds a cell's counts to the pair's (created if new) at a 0-based rank below `max_rank`.
    pub fn add(&mut self, name: &PairName, rank: usize, cell: Cell) {
        if rank >= self.table.max_rank || cell.impressions == 0 {
            return;
        }
        let pair = match self.index.get(name) {
            Some(&pair) => pair,
            None => {
                self.table.pairs.push(Vec::new());
                self.names.push(name.clone());
                self.index.insert(name.clone(), self.table.pairs.len() - 1);
                self.table.pairs.len() - 1
            }
        };
        let Some(cells) = self.table.pairs.get_mut(pair) else { return };
        let rank = u16::try_from(rank).unwrap_or(u16::MAX);
        match cells.binary_search_by_key(&rank, |(r, _)| *r) {
            Ok(i) => {
                if let Some((_, c)) = cells.get_mut(i) {
                    c.add(cell);
                }
            }
            Err(i) => cells.insert(i, (rank, cell)),
        }
    }

    /// Adds every cell of another table.
    pub fn merge(&mut self, other: &NamedTable) {
        for (name, cells) in other.names.iter().zip(&other.table.pairs) {
            for &(rank, cell) in cells {
                self.add(name, usize::from(rank), cell);
            }
        }
    }

    /// The segments the table has pairs of, sorted ("" for traffic without one).
    pub fn segments(&self) -> Vec<&str> {
        let mut segments: Vec<&str> = self.names.iter().map(|n| n.segment.as_ref()).collect();
        segments.sort_unstable();
        segments.dedup();
        segments
    }

    /// The pairs of one segment alone.
    pub fn of_segment(&self, segment: &str) -> NamedTable {
        let mut out = NamedTable::new(self.table.max_rank);
        for (name, cells) in self.names.iter().zip(&self.table.pairs).filter(|(n, _)| n.segment.as_ref() == segment) {
            for &(rank, cell) in cells {
                out.add(name, usize::from(rank), cell);
            }
        }
        out
    }

    /// Every segment's counts added up per (query, document): what judgments are made from.
    pub fn across_segments(&self) -> NamedTable {
        let mut out = NamedTable::new(self.table.max_rank);
        for (name, cells) in self.names.iter().zip(&self.table.pairs) {
            let name = PairName { segment: "".into(), query: name.query.clone(), doc: name.doc.clone() };
            for &(rank, cell) in cells {
                out.add(&name, usize::from(rank), cell);
            }
        }
        out
    }

    /// The text form, a line per cell, in pair order.
    pub fn to_lines(&self) -> String {
        let mut out = String::new();
        for (name, cells) in self.names.iter().zip(&self.table.pairs) {
            for &(rank, cell) in cells {
                let line = Line {
                    segment: name.segment.as_ref().into(),
                    query: name.query.as_ref().into(),
                    doc_id: name.doc.as_ref().into(),
                    rank: u64::from(rank) + 1,
                    impressions: cell.impressions,
                    clicks: cell.clicks,
                };
                if let Ok(text) = serde_json::to_string(&line) {
                    out.push_str(&text);
                    out.push('\n');
                }
            }
        }
        out
    }

    /// Adds the cells of a text form; returns the lines it could not read (blank lines are
    /// skipped).
    pub fn add_lines(&mut self, text: &str) -> Vec<BadLine> {
        let mut bad = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            if raw.trim().is_empty() {
                continue;
            }
            let problem = match serde_json::from_str::<Line<'_>>(raw) {
                Err(e) => format!("not a click table line ({e})"),
                Ok(l) if l.rank == 0 || l.rank > self.table.max_rank as u64 => {
                    format!("rank {} is outside 1..={} (--max-rank)", l.rank, self.table.max_rank)
                }
                Ok(l) if l.clicks > l.impressions => format!("{} clicks of {} impressions", l.clicks, l.impressions),
                Ok(l) => {
                    let rank = usize::try_from(l.rank - 1).unwrap_or(usize::MAX);
                    let name = PairName { segment: l.segment.into(), query: l.query.into(), doc: l.doc_id.into() };
                    self.add(&name, rank, Cell { impressions: l.impressions, clicks: l.clicks });
                    continue;
                }
            };
            bad.push(BadLine { line: i + 1, problem });
        }
        bad
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip_and_tables_merge_by_name() {
        let name = |segment: &str, query: &str, doc: &str| PairName {
            segment: segment.into(),
            query: query.into(),
            doc: doc.into(),
        };
        let mut a = NamedTable::new(3);
        a.add(&name("", "red shoes", "d1"), 0, Cell { impressions: 4, clicks: 1 });
        a.add(&name("", "red shoes", "d1"), 2, Cell { impressions: 2, clicks: 0 });
        a.add(&name("", "x", "d\"2"), 1, Cell { impressions: 1, clicks: 1 });
        a.add(&name("", "x", "d3"), 3, Cell { impressions: 1, clicks: 1 });
        a.add(&name("mobile", "red shoes", "d1"), 0, Cell { impressions: 3, clicks: 3 });
        let mut b = NamedTable::new(3);
        assert!(b.add_lines(&a.to_lines()).is_empty());
        assert_eq!(b.table, a.table);
        b.merge(&a);
        assert_eq!(
            b.table.pairs[0],
            vec![(0, Cell { impressions: 8, clicks: 2 }), (2, Cell { impressions: 4, clicks: 0 })]
        );
    }

    #[test]
    fn bad_lines_are_named_not_guessed() {
        let mut t = NamedTable::new(2);
        let bad = t.add_lines(
            "{\"query\":\"q\",\"doc_id\":\"d\",\"rank\":0,\"impressions\":1,\"clicks\":0}\n\n\
             {\"query\":\"q\",\"doc_id\":\"d\",\"rank\":1,\"impressions\":1,\"clicks\":2}\nnot json\n\
             {\"query\":\"q\",\"doc_id\":\"d\",\"rank\":2,\"impressions\":3,\"clicks\":2}\n",
        );
        assert_eq!(bad.iter().map(|b| b.line).collect::<Vec<_>>(), [1, 3, 4]);
        assert_eq!(t.table.pairs, vec![vec![(1, Cell { impressions: 3, clicks: 2 })]]);
    }
}
