//! `rankpulse eval`: trec_eval's command over TREC run and qrels files, computed by the metric
//! code the daemon runs ([`crate::metrics::MetricLayout::evaluate`], one call per query), so
//! offline and online figures never disagree because of two implementations. And AutoRAG's
//! grouped measures over a `retrieval_gt` file ([`crate::metrics::grouped`]).
//!
//! | file | role |
//! |---|---|
//! | `measures.rs` | the `-m` names and cutoffs, trec_eval's syntax and printed names |
//! | `run.rs` | a run file (TREC or JSON lines) into each query's ranking, as trec_eval ranks it |
//! | `truth.rs` | AutoRAG's grouped ground truth |
//!
//! Evaluation follows trec_eval 9.0.8: a query is evaluated when it is in both the run and the
//! qrels (with `-c`, every qrels query, a missing one scoring 0); a document is relevant when
//! its grade is at least `-l` (default 1); an unjudged document has grade 0; nDCG uses every
//! positive grade; `-M` keeps the top N documents of each ranking. `all` is the mean over the
//! evaluated queries, and for the counts (`num_ret`, `num_rel`, `num_rel_ret`) their sum.
//! Queries are evaluated on every thread, each a share of them.

pub mod measures;
pub mod run;
pub mod truth;

use std::fmt::Write as _;

use crate::ids::doc_key;
use crate::judgments::{judged_bits, judged_query_key, Judgments};
use crate::metrics::grouped::{grouped, is_blank, ranking_has_value};
use crate::metrics::{MetricKind, MetricLayout, MAX_GAIN};
use measures::{Family, Measure};
use run::Run;
use truth::GroundTruth;

/// How `eval` evaluates.
#[derive(Debug, Clone)]
pub struct Options {
    /// What to print, in order.
    pub measures: Vec<Measure>,
    /// trec_eval's `-c`: average over every qrels query, not only those the run has.
    pub complete: bool,
    /// trec_eval's `-l`: the smallest relevant grade.
    pub relevance_level: u8,
    /// trec_eval's `-M`: documents kept per query.
    pub max_docs: Option<usize>,
    /// ERR's largest grade; `None`: the largest grade in the qrels.
    pub max_grade: Option<u8>,
    /// Threads that evaluate.
    pub threads: usize,
}

/// Every measure's value per evaluated query and over all of them.
#[derive(Debug)]
pub struct Evaluation {
    /// The measures, in print order (`runid` among them when asked for).
    pub measures: Vec<Measure>,
    /// Per query (sorted by id, as trec_eval prints them), a value per measure (`runid`'s is
    /// unused).
    pub queries: Vec<(String, Vec<f64>)>,
    /// The `all` values.
    pub all: Vec<f64>,
    /// The run's tag (`runid`).
    pub runid: String,
    /// Queries of both files left out because AutoRAG gives them no value (an empty ranking,
    /// an empty group, a blank id: [`crate::metrics::grouped::has_value`]), sorted; always
    /// empty for trec_eval's measures.
    pub no_value: Vec<String>,
}

/// Why a run cannot be evaluated as asked.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error("{0} needs --ground-truth (AutoRAG's grouped measures), not qrels")]
    NeedsGroundTruth(String),
    #[error("{0} is a trec_eval measure: it needs --qrels, not a grouped ground truth")]
    NeedsQrels(String),
    #[error("-l {0}: the relevance level must be from 1 to {MAX_GAIN}")]
    Level(u8),
    #[error("query {query:?}: the document id at rank {rank} is empty or blank, which no TREC run can hold")]
    BlankId { query: String, rank: usize },
}

/// The slot of a trec_eval measure's value in the layout's vector, or `None` for the counts
/// and `runid` (kept apart).
fn slot_of(layout: &MetricLayout, m: Measure) -> Option<usize> {
    let (kind, k) = match m.family {
        Family::RecipRank => (MetricKind::ReciprocalRank, None),
        Family::RPrec => (MetricKind::RPrecision, None),
        Family::IprecAtRecall => (MetricKind::InterpolatedPrecision, m.k),
        Family::Map => (MetricKind::AveragePrecision, Some(u32::MAX)),
        Family::Ndcg => (MetricKind::Ndcg, Some(u32::MAX)),
        Family::P => (MetricKind::Precision, m.k),
        Family::Recall => (MetricKind::Recall, m.k),
        Family::Success => (MetricKind::Hit, m.k),
        Family::MapCut => (MetricKind::AveragePrecision, m.k),
        Family::NdcgCut => (MetricKind::Ndcg, m.k),
        Family::F1Cut => (MetricKind::F1, m.k),
        Family::NdcgExpCut => (MetricKind::NdcgExp, m.k),
        Family::ErrCut => (MetricKind::Err, m.k),
        _ => return None,
    };
    layout.slot(kind, k)
}

/// Runs `work` over `items` on `threads` threads, each a contiguous share; results in order.
fn on_threads<T: Sync, R: Send>(items: &[T], threads: usize, work: impl Fn(&[T]) -> Vec<R> + Sync) -> Vec<R> {
    let share = items.len().div_ceil(threads.max(1)).max(1);
    std::thread::scope(|scope| {
        let work = &work;
        let handles: Vec<_> = items.chunks(share).map(|chunk| scope.spawn(move || work(chunk))).collect();
        handles.into_iter().flat_map(|h| h.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))).collect()
    })
}

/// trec_eval's measures of `run` against `qrels`.
pub fn evaluate(qrels: &Judgments, run: &Run<'_>, options: &Options) -> Result<Evaluation, EvalError> {
    if let Some(m) = options.measures.iter().find(|m| m.family.grouped()) {
        return Err(EvalError::NeedsGroundTruth(m.to_string()));
    }
    let level = options.relevance_level;
    if level == 0 || level > MAX_GAIN {
        return Err(EvalError::Level(level));
    }
    let mut cutoffs: Vec<u32> =
        options.measures.iter().filter(|m| m.family.has_cutoffs()).filter_map(|m| m.k).collect();
    cutoffs.push(u32::MAX); // map, ndcg and Rprec over the whole ranking
    let max_grade = options.max_grade.unwrap_or_else(|| qrels.max_grade().max(1));
    let layout = MetricLayout::new(&cutoffs, level, max_grade);
    let slots: Vec<Option<usize>> = options.measures.iter().map(|&m| slot_of(&layout, m)).collect();
    let names: std::collections::HashSet<&str> = if options.complete {
        qrels.query_names().iter().map(|(_, n)| n.as_ref()).collect()
    } else {
        Default::default()
    };

    let evaluated: Vec<Result<(String, Vec<f64>), EvalError>> = on_threads(&run.queries, options.threads, |queries| {
        let (mut values, mut gains, mut shown, mut unretrieved) =
            (vec![0.0; layout.len()], Vec::new(), Vec::new(), Vec::new());
        let mut scratch = String::new();
        queries
            .iter()
            .filter_map(|query| {
                let judged = qrels.query(judged_query_key(&query.qid, false, &mut scratch))?;
                let docs = &query.docs[..options.max_docs.map_or(query.docs.len(), |m| m.min(query.docs.len()))];
                // A JSON-lines run can hold such an id; trec_eval's run format cannot.
                if let Some(i) = docs.iter().position(|d| is_blank(d)) {
                    return Some(Err(EvalError::BlankId { query: query.qid.to_string(), rank: i + 1 }));
                }
                gains.clear();
                shown.clear();
                unretrieved.clear();
                let mut not_shown = [0u32; MAX_GAIN as usize + 1];
                judged.grades().for_each(|g| not_shown[usize::from(g)] += 1);
                for doc in docs {
                    let key = doc_key(doc);
                    let grade = judged.grade(key);
                    // A repeat (JSON-lines runs) gains at its first rank only.
                    let first = grade.is_some() && !shown.contains(&judged_bits(key));
                    if first {
                        shown.push(judged_bits(key));
                        if let Some(g) = grade {
                            not_shown[usize::from(g)] = not_shown[usize::from(g)].saturating_sub(1);
                        }
                    }
                    gains.push(if first { grade.unwrap_or(0) } else { 0 });
                }
                for (g, &n) in not_shown.iter().enumerate().skip(1) {
                    unretrieved.extend(std::iter::repeat_n(g as u8, n as usize));
                }
                layout.evaluate(&gains, &unretrieved, &mut values);
                let num_rel = judged.grades().filter(|&g| g >= level).count() as f64;
                let num_rel_ret = gains.iter().filter(|&&g| g >= level).count() as f64;
                let row = options
                    .measures
                    .iter()
                    .zip(&slots)
                    .map(|(m, slot)| match (m.family, slot) {
                        (Family::NumQ, _) => 1.0,
                        (Family::NumRet, _) => docs.len() as f64,
                        (Family::NumRel, _) => num_rel,
                        (Family::NumRelRet, _) => num_rel_ret,
                        (_, Some(slot)) => values[*slot],
                        _ => 0.0,
                    })
                    .collect();
                Some(Ok((query.qid.to_string(), row)))
            })
            .collect()
    });
    let mut evaluated = evaluated.into_iter().collect::<Result<Vec<_>, _>>()?;
    if options.complete {
        // trec_eval -c: a qrels query the run lacks scores 0 but counts its relevant documents.
        let ranked: std::collections::HashSet<&str> = run.queries.iter().map(|q| q.qid.as_ref()).collect();
        for name in names.into_iter().filter(|n| !ranked.contains(n)) {
            let judged = qrels.query(judged_query_key(name, false, &mut String::new()));
            let num_rel = judged.map_or(0, |j| j.grades().filter(|&g| g >= level).count()) as f64;
            let row = options
                .measures
                .iter()
                .map(|m| match m.family {
                    Family::NumQ => 1.0,
                    Family::NumRel => num_rel,
                    _ => 0.0,
                })
                .collect();
            evaluated.push((name.to_string(), row));
        }
    }
    Ok(summarize(options.measures.clone(), evaluated, run.tag.clone()))
}

/// AutoRAG's grouped measures of `run` against `truth`: every query in both that AutoRAG gives a
/// value (the others are named in [`Evaluation::no_value`]).
pub fn evaluate_grouped(truth: &GroundTruth, run: &Run<'_>, options: &Options) -> Result<Evaluation, EvalError> {
    if let Some(m) =
        options.measures.iter().find(|m| !m.family.grouped() && !matches!(m.family, Family::NumQ | Family::RunId))
    {
        return Err(EvalError::NeedsQrels(m.to_string()));
    }
    let evaluated = on_threads(&run.queries, options.threads, |queries| {
        queries
            .iter()
            .filter_map(|query| {
                let groups = truth.queries.get(query.qid.as_ref())?;
                let docs = &query.docs[..options.max_docs.map_or(query.docs.len(), |m| m.min(query.docs.len()))];
                // AutoRAG's `None`: no row, and nothing in the means.
                if groups.is_empty() || !ranking_has_value(docs) {
                    return Some((query.qid.to_string(), None));
                }
                let keys: Vec<u64> = docs.iter().map(|d| doc_key(d)).collect();
                let s = grouped(&keys, groups);
                let row = options
                    .measures
                    .iter()
                    .map(|m| match m.family {
                        Family::RetrievalPrecision => s.precision,
                        Family::RetrievalRecall => s.recall,
                        Family::RetrievalF1 => s.f1,
                        Family::RetrievalMrr => s.mrr,
                        Family::RetrievalMap => s.map,
                        Family::RetrievalNdcg => s.ndcg,
                        Family::NumQ => 1.0,
                        _ => 0.0,
                    })
                    .collect();
                Some((query.qid.to_string(), Some(row)))
            })
            .collect()
    });
    let (mut no_value, mut valued) = (Vec::new(), Vec::new());
    for (qid, row) in evaluated {
        match row {
            Some(row) => valued.push((qid, row)),
            None => no_value.push(qid),
        }
    }
    no_value.sort_unstable();
    Ok(Evaluation { no_value, ..summarize(options.measures.clone(), valued, run.tag.clone()) })
}

/// Sorts the queries by id and computes `all`: means, and sums for the counts. Means are summed
/// in query order, as trec_eval does.
fn summarize(measures: Vec<Measure>, mut queries: Vec<(String, Vec<f64>)>, runid: String) -> Evaluation {
    queries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let n = queries.len() as f64;
    let all = (0..measures.len())
        .map(|i| {
            let sum = queries.iter().map(|(_, row)| row.get(i).copied().unwrap_or(0.0)).fold(0.0, |a, v| a + v);
            match measures.get(i).map(|m| m.family) {
                Some(family) if family.is_count() => sum,
                _ if n > 0.0 => sum / n,
                _ => 0.0,
            }
        })
        .collect();
    Evaluation { measures, queries, all, runid, no_value: Vec::new() }
}

impl Evaluation {
    /// trec_eval's output: `measure\tqid\tvalue` lines (`%-22s\t%s\t%6.4f`, counts as integers),
    /// per query when `per_query` (trec_eval's `-q`), then `all`.
    pub fn to_trec(&self, per_query: bool) -> String {
        let mut out = String::new();
        let mut line = |m: &Measure, qid: &str, value: f64| {
            let _ = match m.family {
                Family::RunId => writeln!(out, "{:<22}\t{qid}\t{}", m.to_string(), self.runid),
                family if family.is_count() => writeln!(out, "{:<22}\t{qid}\t{}", m.to_string(), value as i64),
                _ => writeln!(out, "{:<22}\t{qid}\t{value:6.4}", m.to_string()),
            };
        };
        if per_query {
            for (qid, row) in &self.queries {
                for (m, &v) in self.measures.iter().zip(row) {
                    // trec_eval prints runid and num_q in the summary only.
                    if !matches!(m.family, Family::RunId | Family::NumQ) {
                        line(m, qid, v);
                    }
                }
            }
        }
        for (m, &v) in self.measures.iter().zip(&self.all) {
            line(m, "all", v);
        }
        out
    }

    /// `{"queries": {qid: {measure: value}}, "all": {measure: value}}` at full precision
    /// (`queries` only when `per_query`); `runid` a string.
    pub fn to_json(&self, per_query: bool) -> serde_json::Value {
        let row = |values: &[f64]| -> serde_json::Map<String, serde_json::Value> {
            self.measures
                .iter()
                .zip(values)
                .map(|(m, &v)| match m.family {
                    Family::RunId => (m.to_string(), serde_json::json!(self.runid)),
                    family if family.is_count() => (m.to_string(), serde_json::json!(v as i64)),
                    _ => (m.to_string(), serde_json::json!(v)),
                })
                .collect()
        };
        let mut doc = serde_json::Map::new();
        if per_query {
            let queries: serde_json::Map<String, serde_json::Value> =
                self.queries.iter().map(|(qid, values)| (qid.clone(), row(values).into())).collect();
            doc.insert("queries".into(), queries.into());
        }
        doc.insert("all".into(), row(&self.all).into());
        doc.into()
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::path::Path;

    use super::*;
    use crate::judgments::{Format, LoadOptions};
    use run::RunQuery;

    fn options(names: &str) -> Options {
        let names: Vec<String> = names.split(' ').map(str::to_string).collect();
        Options {
            measures: measures::parse(&names).unwrap(),
            complete: false,
            relevance_level: 1,
            max_docs: None,
            max_grade: None,
            threads: 2,
        }
    }

    fn run(queries: &[(&'static str, &[&'static str])]) -> Run<'static> {
        let queries = queries
            .iter()
            .map(|(qid, docs)| RunQuery {
                qid: Cow::Borrowed(qid),
                docs: docs.iter().map(|&d| Cow::Borrowed(d)).collect(),
            })
            .collect();
        Run { queries, tag: "t".into() }
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
        let e = evaluate_grouped(&truth, &ranked, &options("retrieval_precision num_q")).unwrap();
        assert_eq!(e.queries, [("ok".to_string(), vec![0.5, 1.0])]);
        assert_eq!(e.all, [0.5, 1.0], "the mean over the queries with a value");
        assert_eq!(e.no_value, ["blank", "blank-gt", "empty", "none"]);
    }

    #[test]
    fn trec_eval_s_measures_refuse_a_blank_id() {
        let load = LoadOptions {
            format: Format::Qrels,
            normalize: false,
            max_grade: 3,
            max_rejected_share: 0.0,
            keep_query_names: true,
        };
        let (qrels, _) = Judgments::read(&b"q1 0 a 1\n"[..], &load).unwrap();
        for blank in ["", " ", "\u{1f}"] {
            let ranked = run(&[("q1", &["a", blank])]);
            let err = evaluate(&qrels, &ranked, &options("P.1")).unwrap_err().to_string();
            assert_eq!(err, "query \"q1\": the document id at rank 2 is empty or blank, which no TREC run can hold");
        }
        assert_eq!(evaluate(&qrels, &run(&[("q1", &["a", " b"])]), &options("P.1")).unwrap().all, [1.0]);
    }
}
