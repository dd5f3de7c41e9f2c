#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]
//! AutoRAG's grouped ground truth for `rankpulse eval --ground-truth`: one JSON object per
//! line, `{"query": "q1", "retrieval_gt": [["a", "b"], ["c"]]}` (other keys ignored), each
//! query's groups of acceptable documents (see [`crate::metrics::grouped`]).
//!
//! A line AutoRAG 0.3.27 gives no value for (no group, an empty group, or an id that is empty
//! once Python's `str.strip` is done with it: `MetricInput._check_list`) is kept as a query
//! without groups, and evaluated as AutoRAG evaluates it: no value, left out of the means.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::ids::{doc_key, DocKey};
use crate::metrics::grouped::has_value;

/// Every query's groups, documents by key.
#[derive(Debug, Default)]
pub struct GroundTruth {
    /// Groups by query id; none for a query AutoRAG gives no value for
    /// ([`crate::metrics::grouped::has_value`]).
    pub queries: HashMap<String, Vec<Vec<DocKey>>>,
}

/// A ground-truth file that cannot be used: the line and why.
#[derive(Debug, thiserror::Error)]
pub enum TruthError {
    #[error("cannot read the ground truth {path}: {error}")]
    Read { path: PathBuf, error: std::io::Error },
    #[error("{path}:{line}: {why}")]
    Line { path: PathBuf, line: u64, why: String },
}

impl GroundTruth {
    /// Parses the file's text. A line that is not a query id and a list of lists of ids is
    /// refused, as is an empty query id or a query given twice; a line with no group, an empty
    /// group or a blank id is kept without groups (AutoRAG gives it no value).
    pub fn parse(path: &Path, text: &str) -> Result<GroundTruth, TruthError> {
        #[derive(Deserialize)]
        struct Line {
            query: String,
            retrieval_gt: Vec<Vec<String>>,
        }
        let mut truth = GroundTruth::default();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let error = |why: String| TruthError::Line { path: path.to_path_buf(), line: i as u64 + 1, why };
            let parsed: Line = serde_json::from_str(line).map_err(|e| {
                error(format!(
                    "not a JSON object with a string \"query\" and \"retrieval_gt\", a list of lists of ids: {e}"
                ))
            })?;
            if parsed.query.is_empty() {
                return Err(error("the query id is empty".into()));
            }
            let groups = if has_value(&parsed.retrieval_gt) {
                parsed.retrieval_gt.iter().map(|g| g.iter().map(|d| doc_key(d)).collect()).collect()
            } else {
                Vec::new()
            };
            if truth.queries.insert(parsed.query.clone(), groups).is_some() {
                return Err(error(format!("query {:?} is given twice", parsed.query)));
            }
        }
        Ok(truth)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_refusals() {
        let path = Path::new("gt.jsonl");
        let truth = GroundTruth::parse(path, "{\"query\":\"q1\",\"retrieval_gt\":[[\"a\",\"b\"],[\"c\"]],\"x\":1}\n\n")
            .unwrap();
        assert_eq!(truth.queries["q1"], vec![vec![doc_key("a"), doc_key("b")], vec![doc_key("c")]]);
        let err = |text: &str| GroundTruth::parse(path, text).unwrap_err().to_string();
        assert!(err("{\"query\":\"\",\"retrieval_gt\":[[\"a\"]]}").starts_with("gt.jsonl:1: the query id is empty"));
        assert!(err("{\"query\":\"q1\",\"retrieval_gt\":[[\"a\"]]}\n{\"query\":\"q1\",\"retrieval_gt\":[[\"a\"]]}")
            .starts_with("gt.jsonl:2: query \"q1\" is given twice"));
        assert!(err("{\"query\":\"q1\",\"retrieval_gt\":[\"a\"]}").starts_with("gt.jsonl:1: not a JSON object"));
    }

    #[test]
    fn lines_autorag_gives_no_value_are_kept_without_groups() {
        let text = "{\"query\":\"none\",\"retrieval_gt\":[]}\n\
                    {\"query\":\"empty-group\",\"retrieval_gt\":[[\"a\"],[]]}\n\
                    {\"query\":\"empty-id\",\"retrieval_gt\":[[\"a\",\"\"]]}\n\
                    {\"query\":\"blank-id\",\"retrieval_gt\":[[\"a\"],[\" \\t\"]]}\n\
                    {\"query\":\"separator\",\"retrieval_gt\":[[\"\\u001f\"]]}\n\
                    {\"query\":\"padded\",\"retrieval_gt\":[[\" a \"]]}\n";
        let truth = GroundTruth::parse(Path::new("gt.jsonl"), text).unwrap();
        for query in ["none", "empty-group", "empty-id", "blank-id", "separator"] {
            assert_eq!(truth.queries[query], Vec::<Vec<DocKey>>::new(), "{query}");
        }
        assert_eq!(truth.queries["padded"], vec![vec![doc_key(" a ")]], "ids are compared as written");
    }
}
