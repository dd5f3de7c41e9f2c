#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]
//! AutoRAG's grouped ground truth for `rankpulse eval --ground-truth`: one JSON object per
//! line, `{"query": "q1", "retrieval_gt": [["a", "b"], ["c"]]}` (other keys ignored), each
//! query's groups of acceptable documents (see [`crate::metrics::grouped`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::ids::{doc_key, DocKey};

/// Every query's groups, documents by key.
#[derive(Debug, Default)]
pub struct GroundTruth {
    /// Groups by query id.
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
    /// Parses the file's text. A line with no group, an empty group or an empty id is refused
    /// (AutoRAG gives no value for it), as is a query given twice.
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
            if parsed.retrieval_gt.is_empty()
                || parsed.retrieval_gt.iter().any(|g| g.is_empty() || g.iter().any(|d| d.trim().is_empty()))
            {
                return Err(error(format!(
                    "query {:?}: retrieval_gt needs at least one group, and no empty group or id",
                    parsed.query
                )));
            }
            let groups = parsed.retrieval_gt.iter().map(|g| g.iter().map(|d| doc_key(d)).collect()).collect();
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
        assert!(
            err("{\"query\":\"q1\",\"retrieval_gt\":[]}").starts_with("gt.jsonl:1: query \"q1\": retrieval_gt needs")
        );
        assert!(err("{\"query\":\"q1\",\"retrieval_gt\":[[\"a\"],[]]}").contains("no empty group"));
        assert!(err("{\"query\":\"q1\",\"retrieval_gt\":[[\" \"]]}").contains("no empty group or id"));
        assert!(err("{\"query\":\"q1\",\"retrieval_gt\":[[\"a\"]]}\n{\"query\":\"q1\",\"retrieval_gt\":[[\"a\"]]}")
            .starts_with("gt.jsonl:2: query \"q1\" is given twice"));
        assert!(err("{\"query\":\"q1\",\"retrieval_gt\":[\"a\"]}").starts_with("gt.jsonl:1: not a JSON object"));
    }
}
