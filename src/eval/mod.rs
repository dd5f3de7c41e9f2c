//! `rankpulse eval`: trec_eval's command over TREC run and qrels files, printing what NIST
//! trec_eval prints byte for byte in the version asked for (`--compat 10`, the current
//! release, or `9` for 9.x, which pytrec_eval embeds): a port of trec_eval's own code, every
//! measure of `all_trec` ([`trec`]). rankpulse's own measures in the same syntax run on the
//! metric code the daemon runs ([`crate::metrics::MetricLayout::evaluate`]), and AutoRAG's
//! grouped measures over a `retrieval_gt` file ([`crate::metrics::grouped`]).
//!
//! | file | role |
//! |---|---|
//! | `measures.rs` | the `-m` names and parameters, trec_eval's syntax, order and printed names |
//! | `run.rs` | a run file (TREC or JSON lines) into each query's ranking, as trec_eval ranks it |
//! | `trec/` | trec_eval's qrels, its per-query forms, its measures and averages |
//! | `truth.rs` | AutoRAG's grouped ground truth |
//!
//! Queries are evaluated on every thread, each a share of them; sums run in query order, as
//! trec_eval sums them, so the output does not depend on the threads.

pub mod measures;
pub mod run;
pub mod trec;
pub mod truth;

use std::fmt::Write as _;

use crate::ids::doc_key;
use crate::metrics::grouped::{grouped, ranking_has_value};
use measures::{Id, Kind, Selected};
use run::Run;
use truth::GroundTruth;

/// A printed value's name and how it is printed and averaged.
#[derive(Debug, Clone)]
pub struct Column {
    /// trec_eval's printed name (`P_5`, `iprec_at_recall_0.30`, `ndcg_1=2`).
    pub name: String,
    /// Whether it is a count, a mean, a geometric mean, a string.
    pub kind: Kind,
}

/// One evaluated query.
#[derive(Debug, Clone)]
pub struct Row {
    /// The query id.
    pub qid: String,
    /// A value per column (a geometric mean's column holds the logarithm).
    pub values: Vec<f64>,
    /// `relstring`'s string, when asked for.
    pub text: Option<String>,
}

/// Every measure's value per evaluated query and over all of them.
#[derive(Debug)]
pub struct Evaluation {
    /// The printed values, in print order.
    pub columns: Vec<Column>,
    /// Per query, sorted by id as trec_eval prints them.
    pub queries: Vec<Row>,
    /// The `all` values: means, sums of counts, geometric means, `num_q`.
    pub all: Vec<f64>,
    /// The run's tag (`runid`).
    pub runid: String,
    /// Queries of both files left out because AutoRAG gives them no value (an empty ranking,
    /// an empty group, a blank id: [`crate::metrics::grouped::has_value`]), sorted; always
    /// empty for trec_eval's measures.
    pub no_value: Vec<String>,
}

/// Why a run cannot be evaluated against a grouped ground truth.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error("{0} is a trec_eval measure: it needs --qrels, not a grouped ground truth")]
    NeedsQrels(String),
}

/// Runs `work` over `items` on `threads` threads, each a contiguous share; results in order.
pub(crate) fn on_threads<T: Sync, R: Send>(
    items: &[T],
    threads: usize,
    work: impl Fn(&[T]) -> Vec<R> + Sync,
) -> Vec<R> {
    let share = items.len().div_ceil(threads.max(1)).max(1);
    std::thread::scope(|scope| {
        let work = &work;
        let handles: Vec<_> = items.chunks(share).map(|chunk| scope.spawn(move || work(chunk))).collect();
        handles.into_iter().flat_map(|h| h.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))).collect()
    })
}

/// AutoRAG's grouped measures of `run` against `truth` (the first `max_docs` of each
/// ranking): every query in both that AutoRAG gives a value, sorted by id; the others are named
/// in [`Evaluation::no_value`].
pub fn evaluate_grouped(
    truth: &GroundTruth,
    run: &Run<'_>,
    measures: &[Selected],
    max_docs: Option<usize>,
    threads: usize,
) -> Result<Evaluation, EvalError> {
    if let Some(s) = measures.iter().find(|s| s.def.origin != measures::Origin::AutoRag && s.def.id != Id::NumQ) {
        return Err(EvalError::NeedsQrels(s.def.name.to_string()));
    }
    let evaluated = on_threads(&run.queries, threads, |queries| {
        queries
            .iter()
            .filter_map(|query| {
                let groups = truth.queries.get(query.qid.as_ref())?;
                let docs = &query.docs[..max_docs.map_or(query.docs.len(), |m| m.min(query.docs.len()))];
                // AutoRAG's `None`: no row, and nothing in the means.
                if groups.is_empty() || !ranking_has_value(docs) {
                    return Some(Err(query.qid.to_string()));
                }
                let keys: Vec<u64> = docs.iter().map(|d| doc_key(d)).collect();
                let s = grouped(&keys, groups);
                let values = measures
                    .iter()
                    .map(|m| match m.def.id {
                        Id::RetrievalPrecision => s.precision,
                        Id::RetrievalRecall => s.recall,
                        Id::RetrievalF1 => s.f1,
                        Id::RetrievalMrr => s.mrr,
                        Id::RetrievalMap => s.map,
                        Id::RetrievalNdcg => s.ndcg,
                        _ => 1.0, // num_q
                    })
                    .collect();
                Some(Ok(Row { qid: query.qid.to_string(), values, text: None }))
            })
            .collect::<Vec<_>>()
    });
    let (mut queries, mut no_value) = (Vec::new(), Vec::new());
    for row in evaluated {
        match row {
            Ok(row) => queries.push(row),
            Err(qid) => no_value.push(qid),
        }
    }
    queries.sort_unstable_by(|a, b| a.qid.cmp(&b.qid));
    no_value.sort_unstable();
    let columns: Vec<Column> =
        measures.iter().map(|m| Column { name: m.def.name.to_string(), kind: m.def.kind }).collect();
    let n = queries.len() as f64;
    let all = (0..columns.len())
        .map(|i| {
            let sum = queries.iter().map(|row| row.values.get(i).copied().unwrap_or(0.0)).fold(0.0, |a, v| a + v);
            match columns.get(i).map(|c| c.kind) {
                Some(Kind::NumQ) => n,
                _ if n > 0.0 => sum / n,
                _ => 0.0,
            }
        })
        .collect();
    Ok(Evaluation { columns, queries, all, runid: run.tag.clone(), no_value })
}

/// C's `printf("%6.4f")`, which prints NaN as `nan` or `-nan` by its sign.
fn c_float(value: f64) -> String {
    if value.is_nan() {
        let nan = if value.is_sign_negative() { "-nan" } else { "nan" };
        format!("{nan:>6}")
    } else {
        format!("{value:6.4}")
    }
}

impl Evaluation {
    /// trec_eval's output (meas_print_single.c, meas_print_final.c): per query when
    /// `per_query` (trec_eval's `-q`), then the summary unless `summary` is off (`-n`):
    /// `%-22s\t%s\t%6.4f` lines, counts as integers, `relstring` quoted, `runid` and `num_q`
    /// and the geometric means in the summary only.
    pub fn to_trec(&self, per_query: bool, summary: bool) -> String {
        let mut out = String::new();
        if per_query {
            for row in &self.queries {
                for (column, &v) in self.columns.iter().zip(&row.values) {
                    let name = &column.name;
                    let qid = &row.qid;
                    let _ = match column.kind {
                        Kind::Mean => writeln!(out, "{name:<22}\t{qid}\t{}", c_float(v)),
                        Kind::Count => writeln!(out, "{name:<22}\t{qid}\t{}", v as i64),
                        Kind::Text => writeln!(out, "{name:<22}\t{qid}\t'{}'", row.text.as_deref().unwrap_or("")),
                        Kind::RunId | Kind::NumQ | Kind::GeoMean => Ok(()),
                    };
                }
            }
        }
        if summary {
            for (column, &v) in self.columns.iter().zip(&self.all) {
                let name = &column.name;
                let _ = match column.kind {
                    Kind::RunId => writeln!(out, "{name:<22}\tall\t{}", self.runid),
                    Kind::NumQ | Kind::Count => writeln!(out, "{name:<22}\tall\t{}", v as i64),
                    Kind::Mean | Kind::GeoMean => writeln!(out, "{name:<22}\tall\t{}", c_float(v)),
                    Kind::Text => Ok(()),
                };
            }
        }
        out
    }

    /// `{"queries": {qid: {measure: value}}, "all": {measure: value}}` at full precision
    /// (`queries` only when `per_query`): counts as integers, `runid` and `relstring` as
    /// strings, what trec_eval prints in the summary only (`runid`, `num_q`, the geometric
    /// means) only in `all`.
    pub fn to_json(&self, per_query: bool) -> serde_json::Value {
        let mut doc = serde_json::Map::new();
        if per_query {
            let queries: serde_json::Map<String, serde_json::Value> = self
                .queries
                .iter()
                .map(|row| {
                    let values: serde_json::Map<String, serde_json::Value> = self
                        .columns
                        .iter()
                        .zip(&row.values)
                        .filter_map(|(c, &v)| {
                            let value = match c.kind {
                                Kind::Mean => serde_json::json!(v),
                                Kind::Count => serde_json::json!(v as i64),
                                Kind::Text => serde_json::json!(row.text.as_deref().unwrap_or("")),
                                Kind::RunId | Kind::NumQ | Kind::GeoMean => return None,
                            };
                            Some((c.name.clone(), value))
                        })
                        .collect();
                    (row.qid.clone(), values.into())
                })
                .collect();
            doc.insert("queries".into(), queries.into());
        }
        let all: serde_json::Map<String, serde_json::Value> = self
            .columns
            .iter()
            .zip(&self.all)
            .filter_map(|(c, &v)| {
                let value = match c.kind {
                    Kind::RunId => serde_json::json!(self.runid),
                    Kind::NumQ | Kind::Count => serde_json::json!(v as i64),
                    Kind::Mean | Kind::GeoMean => serde_json::json!(v),
                    Kind::Text => return None,
                };
                Some((c.name.clone(), value))
            })
            .collect();
        doc.insert("all".into(), all.into());
        doc.into()
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::path::Path;

    use super::*;
    use run::RunQuery;

    fn measures(names: &str) -> Vec<Selected> {
        let names: Vec<String> = names.split(' ').map(str::to_string).collect();
        measures::parse(&names, trec::Compat::V10).unwrap()
    }

    fn run(queries: &[(&'static str, &[&'static str])]) -> Run<'static> {
        let queries = queries
            .iter()
            .map(|(qid, docs)| RunQuery {
                qid: Cow::Borrowed(qid),
                docs: docs.iter().map(|&d| Cow::Borrowed(d)).collect(),
            })
            .collect();
        Run { queries, tag: "t".into(), repeats_allowed: true }
    }

    #[test]
    fn grouped_queries_autorag_gives_no_value_are_left_out_and_named() {
        let truth = GroundTruth::parse(
            Path::new("gt.jsonl"),
            "{\"query\":\"ok\",\"retrieval_gt\":[[\"a\"]]}\n{\"query\":\"blank-gt\",\"retrieval_gt\":[[\"a\",\" \"]]}\n\
             {\"query\":\"blank\",\"retrieval_gt\":[[\"a\"]]}\n{\"query\":\"empty\",\"retrieval_gt\":[[\"a\"]]}\n\
             {\"query\":\"none\",\"retrieval_gt\":[[\"a\"]]}\n",
        )
        .unwrap();
        let ranked = run(&[
            ("ok", &["a", "x"]),
            ("blank-gt", &["a"]),
            ("blank", &["a", " "]),
            ("empty", &["", "a"]),
            ("none", &[]),
            ("unknown", &["a"]),
        ]);
        let e = evaluate_grouped(&truth, &ranked, &measures("retrieval_precision num_q"), None, 2).unwrap();
        assert_eq!(e.queries.len(), 1);
        // num_q first, in trec_eval's table order.
        assert_eq!((e.queries[0].qid.as_str(), e.queries[0].values.as_slice()), ("ok", &[1.0, 0.5][..]));
        assert_eq!(e.all, [1.0, 0.5], "the mean over the queries with a value");
        assert_eq!(e.no_value, ["blank", "blank-gt", "empty", "none"]);
    }

    #[test]
    fn trec_eval_s_measures_refuse_a_blank_id() {
        let qrels = trec::qrels::Qrels::parse(Path::new("q.txt"), "q1 0 a 1\n", trec::Compat::V10).unwrap();
        let settings = trec::Settings {
            compat: trec::Compat::V10,
            relevance_level: 1,
            max_docs: None,
            judged_only: false,
            docs_in_collection: 0,
            complete: false,
            max_grade: None,
            threads: 2,
        };
        for blank in ["", " ", "\u{1f}"] {
            let ranked = run(&[("q1", &["a", blank])]);
            let err = trec::evaluate(&qrels, &ranked, &measures("P.1"), &settings).unwrap_err().to_string();
            assert_eq!(err, "query \"q1\": the document id at rank 2 is empty or blank, which no TREC run can hold");
        }
        let (e, _) = trec::evaluate(&qrels, &run(&[("q1", &["a", " b"])]), &measures("P.1"), &settings).unwrap();
        assert_eq!(e.all, [1.0]);
    }
}
