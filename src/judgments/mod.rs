//! Judgment lists: editorial relevance grades per (query, document), what search teams keep
//! for their head queries and evaluate offline (Elasticsearch's `_rank_eval`, OpenSearch's
//! Search Relevance Workbench, trec_eval's qrels).
//!
//! * [`parse`]: one line of a TREC qrels file or of JSON lines into a judgment, or the
//!   reason it is rejected; how query texts are normalized.
//! * [`store`]: a loaded list, keyed by query and document for lookups per impression (and
//!   per query of `rankpulse eval`).
//! * [`source`]: the list a running process uses, reloaded whole when its file changes, a
//!   broken file refused (the previous list stays) and reported.
//!
//! Judgments are reference data, not events: a file is read whole and swapped in whole, so an
//! impression is always scored against one consistent list.

pub mod parse;
pub mod source;
pub mod store;

pub use parse::{normalize_query, parse_line, Format, Judgment, Reject};
pub use source::{JudgmentSource, SourceStatus};
pub use store::{
    judged_bits, judged_query_key, JudgedQuery, JudgedQueryKey, Judgments, LoadError, LoadOptions, LoadReport,
};
