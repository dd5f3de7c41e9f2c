//! trec_eval itself, ported: `rankpulse eval` over qrels and a run prints what NIST trec_eval
//! prints, byte for byte, in the version asked for ([`Compat`]).
//!
//! | file | role | trec_eval's |
//! |---|---|---|
//! | `qrels.rs` | the qrels, every grade kept | get_qrels.c |
//! | `res_rels.rs` | one query's ranking joined with its judgments | form_res_rels.c |
//! | `calc.rs` | each measure over relevant or not, on one query | m_*.c |
//! | `gains.rs` | each measure over graded gains, on one query | m_ndcg.c, m_G.c, m_rbp.c, ... |
//! | this file | which queries, the averages over them | trec_eval.c, meas_avg.c |
//!
//! The run is read by [`super::run`] (get_trec_results.c's rules), the measures are selected
//! by [`super::measures`] (measures.c, meas_init.c), and printed by [`super::Evaluation`]
//! (meas_print_*.c).
//!
//! The versions differ in what they read and how they round: 9.x (9.0.8 is what
//! pytrec_eval, ir_measures and Anserini embed) keeps scores in a C `float` and places
//! `iprec_at_recall` and `11pt_avg` recall levels at `(long)(p R + 0.9)` relevant documents;
//! 10.0 keeps `double` scores, rounds with `lround(p R)`, skips `#` comment lines, evaluates
//! and prints (`-q -c`) the qrels queries a run lacks, and adds `rbp`, `rbp_resid`, `unj`,
//! `dcg` and `ideal_dcg`. Where trec_eval stops instead of evaluating, rankpulse says why (see
//! [`evaluate`]).

pub mod calc;
pub mod gains;
pub mod qrels;
pub mod res_rels;

use calc::Ctx;
use qrels::{Qrels, QueryQrels};
use res_rels::{Form, FormError, ResRels};

use super::measures::{Id, Kind, Params, Selected};
use super::run::Run;
use super::{on_threads, Column, Evaluation, Row};
use crate::metrics::grouped::is_blank;
use crate::metrics::{MetricKind, MetricLayout, MAX_GAIN};

/// Which NIST trec_eval to reproduce: 9.x or 10.0 (the type the live `iprec@r` follows too).
pub use crate::metrics::TrecEval as Compat;

/// trec_eval's flags.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `--compat`: which trec_eval.
    pub compat: Compat,
    /// `-l`: the smallest relevant grade.
    pub relevance_level: i64,
    /// `-M`: documents evaluated per query.
    pub max_docs: Option<usize>,
    /// `-J`: only judged documents, in their order.
    pub judged_only: bool,
    /// `-N`: documents in the collection, for `utility`.
    pub docs_in_collection: i64,
    /// `-c`: average over every qrels query.
    pub complete: bool,
    /// ERR's largest grade (`err_cut`); `None`: the largest grade in the qrels.
    pub max_grade: Option<u8>,
    /// Threads that evaluate.
    pub threads: usize,
}

/// Why the run cannot be evaluated.
#[derive(Debug, thiserror::Error)]
pub enum TrecError {
    #[error(transparent)]
    Form(#[from] FormError),
    #[error("no query has both a ranking and judgments (trec_eval stops here too)")]
    NoQueries,
    #[error("{0} is one of AutoRAG's grouped measures: give --ground-truth, not qrels")]
    NeedsGroundTruth(String),
    #[error("query {query:?}: the document id at rank {rank} is empty or blank, which no TREC run can hold")]
    BlankId { query: String, rank: usize },
    #[error(
        "-l {0}: rankpulse's own measures (f1_cut, ndcg_exp_cut, err_cut) need a relevance level from 1 to {MAX_GAIN}"
    )]
    Level(i64),
}

/// What a query is evaluated on: its ranking, or trec_eval 10.0's stand-in for a qrels query
/// the run lacks under `-c` (one document no qrels names).
enum Ranked<'r> {
    Run(&'r [std::borrow::Cow<'r, str>]),
    Missing,
}

/// trec_eval 10.0's stand-in document (trec_eval.c's `bogus_result`).
const MISSING_DOC: &str = "ceci_nest_pas_un_docno";

/// Evaluates `run` against `qrels` as the chosen trec_eval does. The second value names the
/// qrels queries the run lacks that trec_eval 10.0 would stop at ("result qid not found",
/// without `-c`): rankpulse evaluates the queries in both, as 9.x does, and the caller warns.
pub fn evaluate(
    qrels: &Qrels<'_>,
    run: &Run<'_>,
    measures: &[Selected],
    settings: &Settings,
) -> Result<(Evaluation, Vec<String>), TrecError> {
    if let Some(s) = measures.iter().find(|s| s.def.origin == super::measures::Origin::AutoRag) {
        return Err(TrecError::NeedsGroundTruth(s.def.name.to_string()));
    }
    let mut ranked: Vec<(&str, &[std::borrow::Cow<'_, str>])> =
        run.queries.iter().map(|q| (q.qid.as_ref(), q.docs.as_slice())).collect();
    ranked.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let ranking_of = |qid: &str| ranked.binary_search_by(|r| r.0.cmp(qid)).ok().and_then(|i| ranked.get(i));

    // The queries trec_eval evaluates, in its order (both versions walk them sorted by id).
    let mut lacking = Vec::new();
    let mut queries: Vec<(&QueryQrels<'_>, Ranked<'_>)> = Vec::new();
    for judged in &qrels.queries {
        match ranking_of(&judged.qid) {
            Some(&(_, docs)) => queries.push((judged, Ranked::Run(docs))),
            None if settings.complete && settings.compat == Compat::V10 => queries.push((judged, Ranked::Missing)),
            None if !settings.complete && settings.compat == Compat::V10 => lacking.push(judged.qid.to_string()),
            None => {}
        }
    }
    let extensions = Extensions::new(qrels, measures, settings)?;
    let columns: Vec<Column> = measures
        .iter()
        .flat_map(|s| s.names.iter().map(|name| Column { name: name.clone(), kind: s.def.kind }))
        .collect();
    let width = columns.len();
    let ctx = Ctx {
        relevance_level: settings.relevance_level,
        docs_in_collection: settings.docs_in_collection,
        compat: settings.compat,
    };
    let form = Form {
        relevance_level: settings.relevance_level,
        max_docs: settings.max_docs.unwrap_or(usize::MAX),
        judged_only: settings.judged_only,
        repeats_are_errors: !run.repeats_allowed,
    };
    let rows: Vec<Result<Row, TrecError>> = on_threads(&queries, settings.threads, |chunk| {
        let (mut rr, mut seen, mut docs) = (ResRels::default(), res_rels::Seen::default(), Vec::<&str>::new());
        let mut layout_values = extensions.as_ref().map(|e| vec![0.0; e.layout.len()]).unwrap_or_default();
        chunk
            .iter()
            .map(|(judged, ranking)| {
                docs.clear();
                match ranking {
                    Ranked::Run(list) => docs.extend(list.iter().map(|d| d.as_ref())),
                    Ranked::Missing => docs.push(MISSING_DOC),
                }
                // A JSON-lines run can hold such an id; trec_eval's run format cannot.
                if let Some(i) = docs.iter().take(form.max_docs).position(|d| is_blank(d)) {
                    return Err(TrecError::BlankId { query: judged.qid.to_string(), rank: i + 1 });
                }
                res_rels::form(&judged.qid, &docs, judged, &form, &mut seen, &mut rr)?;
                let mut values = vec![0.0; width];
                let mut text = None;
                let mut at = 0;
                for s in measures {
                    let n = s.names.len();
                    let out = values.get_mut(at..at + n).unwrap_or_default();
                    if let Some(t) = compute(&ctx, &rr, s, out, extensions.as_ref(), &mut layout_values) {
                        text = Some(t);
                    }
                    at += n;
                }
                if matches!(ranking, Ranked::Missing) {
                    // trec_eval.c zeroes what the stand-in document would otherwise count.
                    for (column, value) in columns.iter().zip(values.iter_mut()) {
                        let name = column.name.as_str();
                        if name == "num_ret" || name == "utility" || name.starts_with("unj") || name == "rbp_resid" {
                            *value = 0.0;
                        }
                        if name == "relstring" {
                            text = Some(String::new());
                        }
                    }
                }
                Ok(Row { qid: judged.qid.to_string(), values, text })
            })
            .collect()
    });
    let rows = rows.into_iter().collect::<Result<Vec<Row>, TrecError>>()?;
    if rows.is_empty() {
        return Err(TrecError::NoQueries);
    }
    // trec_eval.c and meas_avg.c: sums in query order, divided by the queries evaluated, or
    // with -c by the qrels' queries.
    let evaluated = rows.len() as i64;
    let n = if settings.complete { qrels.queries.len() as i64 } else { evaluated };
    let mut all = vec![0.0; width];
    for row in &rows {
        for (sum, v) in all.iter_mut().zip(&row.values) {
            *sum += v;
        }
    }
    for (column, value) in columns.iter().zip(all.iter_mut()) {
        match column.kind {
            Kind::Mean if n > 0 => *value /= n as f64,
            Kind::GeoMean if n > 0 => {
                let mut sum = *value;
                if settings.complete {
                    sum += (n - evaluated) as f64 * calc::MIN_GEO_MEAN.ln();
                }
                *value = (sum / n as f64).exp();
            }
            Kind::NumQ => *value = n as f64,
            Kind::Count if column.name == "num_rel" && settings.complete => *value = qrels.positive_judgments() as f64,
            _ => {}
        }
    }
    Ok((Evaluation { columns, queries: rows, all, runid: run.tag.clone(), no_value: Vec::new() }, lacking))
}

/// One measure on one query into `out` (its values); `relstring`'s string is returned.
fn compute(
    ctx: &Ctx,
    rr: &ResRels,
    s: &Selected,
    out: &mut [f64],
    extensions: Option<&Extensions>,
    layout_values: &mut [f64],
) -> Option<String> {
    let one = |out: &mut [f64], v: f64| {
        if let Some(slot) = out.first_mut() {
            *slot = v;
        }
    };
    let no_pairs: &[(String, f64)] = &[];
    let pairs = match &s.params {
        Params::Pairs(p) => p.as_slice(),
        _ => no_pairs,
    };
    let (cutoffs, levels, values): (&[i64], &[f64], &[f64]) = match &s.params {
        Params::Cutoffs(c) => (c, &[], &[]),
        Params::Levels(l) => (&[], l, &[]),
        Params::Values(v) => (&[], &[], v),
        _ => (&[], &[], &[]),
    };
    match s.def.id {
        Id::RunId => {}
        Id::NumQ => one(out, 1.0),
        Id::NumRet => one(out, rr.num_ret as f64),
        Id::NumRel => one(out, rr.num_rel as f64),
        Id::NumRelRet => one(out, rr.num_rel_ret as f64),
        Id::Map => one(out, calc::map(ctx, rr)),
        Id::GmMap => one(out, calc::gm_map(ctx, rr)),
        Id::RPrec => one(out, calc::r_prec(ctx, rr)),
        Id::Bpref => one(out, calc::bpref(ctx, rr)),
        Id::RecipRank => one(out, calc::recip_rank(ctx, rr)),
        Id::IprecAtRecall => calc::iprec_at_recall(ctx, rr, levels, out),
        Id::P => calc::precision(ctx, rr, cutoffs, out),
        Id::RelString => return Some(calc::relstring(rr, values.first().copied().unwrap_or(10.0))),
        Id::Recall => calc::recall(ctx, rr, cutoffs, out),
        Id::InfAp => one(out, calc::inf_ap(ctx, rr)),
        Id::GmBpref => one(out, calc::gm_bpref(ctx, rr)),
        Id::RPrecMult => calc::r_prec_mult(ctx, rr, levels, out),
        Id::Utility => one(out, calc::utility(ctx, rr, values)),
        Id::ElevenPtAvg => one(out, calc::eleven_point_average(ctx, rr, values)),
        Id::BinG => one(out, calc::bin_g(ctx, rr)),
        Id::G => one(out, gains::g(rr, pairs, ctx.compat)),
        Id::Dcg => one(out, gains::dcg_pair(rr, pairs, ctx.compat).0),
        Id::IdealDcg => one(out, gains::dcg_pair(rr, pairs, ctx.compat).1),
        Id::Ndcg => {
            let (dcg, ideal) = gains::dcg_pair(rr, pairs, ctx.compat);
            if ideal > 0.0 {
                one(out, dcg / ideal);
            }
        }
        Id::NdcgRel => one(out, gains::ndcg_rel(rr, pairs, ctx.compat)),
        Id::RNdcg => one(out, gains::r_ndcg(rr, pairs, ctx.compat)),
        Id::NdcgCut => calc::ndcg_cut(rr, cutoffs, out),
        Id::MapCut => calc::map_cut(ctx, rr, cutoffs, out),
        Id::RelativeP => calc::relative_precision(ctx, rr, cutoffs, out),
        Id::Success => calc::success(ctx, rr, cutoffs, out),
        Id::SetP => one(out, calc::set_p(rr)),
        Id::SetRelativeP => one(out, calc::set_relative_p(rr)),
        Id::SetRecall => one(out, calc::set_recall(rr)),
        Id::SetMap => one(out, calc::set_map(rr)),
        Id::SetF => one(out, calc::set_f(rr, values.first().copied().unwrap_or(1.0))),
        Id::NumNonrelJudgedRet => one(out, calc::num_nonrel_judged_ret(rr)),
        Id::Rbp => one(out, gains::rbp(rr, pairs, ctx.compat)),
        Id::RbpResid => one(out, gains::rbp_resid(rr, pairs)),
        Id::Unj => calc::unjudged(rr, cutoffs, out),
        Id::F1Cut | Id::NdcgExpCut | Id::ErrCut => {
            if let Some(e) = extensions {
                e.compute(rr, s.def.id, cutoffs, out, layout_values);
            }
        }
        Id::RetrievalPrecision
        | Id::RetrievalRecall
        | Id::RetrievalF1
        | Id::RetrievalMrr
        | Id::RetrievalMap
        | Id::RetrievalNdcg => {}
    }
    None
}

/// rankpulse's own measures, by the daemon's metric code ([`MetricLayout`]) over the same
/// ranking: a grade is the gain (negative grades and documents outside the pool gain 0, grades
/// above [`MAX_GAIN`] count as it).
struct Extensions {
    layout: MetricLayout,
}

impl Extensions {
    fn new(qrels: &Qrels<'_>, measures: &[Selected], settings: &Settings) -> Result<Option<Extensions>, TrecError> {
        let mut cutoffs: Vec<u32> = Vec::new();
        for s in measures.iter().filter(|s| matches!(s.def.id, Id::F1Cut | Id::NdcgExpCut | Id::ErrCut)) {
            if let Params::Cutoffs(c) = &s.params {
                cutoffs.extend(c.iter().map(|&k| u32::try_from(k).unwrap_or(u32::MAX)));
            }
        }
        if cutoffs.is_empty() {
            return Ok(None);
        }
        let level = u8::try_from(settings.relevance_level)
            .ok()
            .filter(|l| (1..=MAX_GAIN).contains(l))
            .ok_or(TrecError::Level(settings.relevance_level))?;
        let largest = qrels.queries.iter().flat_map(|q| q.docs.iter().map(|d| d.1)).max().unwrap_or(1);
        let max_grade = settings.max_grade.unwrap_or_else(|| largest.clamp(1, i64::from(MAX_GAIN)) as u8);
        Ok(Some(Extensions { layout: MetricLayout::new(&cutoffs, level, max_grade) }))
    }

    fn compute(&self, rr: &ResRels, id: Id, cutoffs: &[i64], out: &mut [f64], values: &mut [f64]) {
        let gain = |rel: i64| rel.clamp(0, i64::from(MAX_GAIN)) as u8;
        let gains: Vec<u8> = rr.list.iter().map(|&r| gain(r)).collect();
        // The judged grades no retrieved document has, for the ideal ranking.
        let mut unretrieved = Vec::new();
        for (grade, &count) in rr.rel_levels.iter().enumerate().skip(1) {
            let shown = rr.list.iter().filter(|&&r| r == grade as i64).count() as i64;
            let g = gain(grade as i64);
            unretrieved.extend(std::iter::repeat_n(g, (count - shown).max(0) as usize));
        }
        self.layout.evaluate(&gains, &unretrieved, values);
        let kind = match id {
            Id::F1Cut => MetricKind::F1,
            Id::NdcgExpCut => MetricKind::NdcgExp,
            _ => MetricKind::Err,
        };
        for (slot, &k) in out.iter_mut().zip(cutoffs) {
            let k = u32::try_from(k).unwrap_or(u32::MAX);
            if let Some(v) = self.layout.slot(kind, Some(k)).and_then(|i| values.get(i)) {
                *slot = *v;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    use super::*;

    /// The daemon's metric code and the port of trec_eval agree on every measure both compute,
    /// for either version's recall levels: the live figures are trec_eval's.
    #[test]
    fn the_daemon_s_metrics_equal_the_port_of_trec_eval() {
        let mut rng = SmallRng::seed_from_u64(31);
        let cutoffs = [1i64, 3, 5, 10, 20];
        let cut32: Vec<u32> = cutoffs.iter().map(|&k| k as u32).collect();
        let mut values = Vec::new();
        let mut rr = ResRels::default();
        for case in 0..3000 {
            let version = if case % 2 == 0 { Compat::V9 } else { Compat::V10 };
            let level = rng.random_range(1..=3u8);
            let layout = MetricLayout::new(&cut32, level, 4).with_recall_rounding(version);
            values.resize(layout.len(), 0.0);
            // A judged pool, some of it ranked among unjudged documents.
            let pool = rng.random_range(0..25);
            let docs: Vec<(Cow<'static, str>, i64)> =
                (0..pool).map(|d| (Cow::Owned(format!("d{d:03}")), rng.random_range(0..=4))).collect();
            let judged = QueryQrels { qid: Cow::Borrowed("q"), docs };
            let mut ranking: Vec<String> =
                (0..pool).filter(|_| rng.random_bool(0.6)).map(|d| format!("d{d:03}")).collect();
            ranking.extend((0..rng.random_range(0..15)).map(|u| format!("u{u}")));
            let shuffle: Vec<(u32, String)> = ranking.into_iter().map(|d| (rng.random(), d)).collect();
            let mut shuffle = shuffle;
            shuffle.sort();
            let ranking: Vec<&str> = shuffle.iter().map(|(_, d)| d.as_str()).collect();
            let form = Form {
                relevance_level: i64::from(level),
                max_docs: usize::MAX,
                judged_only: false,
                repeats_are_errors: true,
            };
            res_rels::form("q", &ranking, &judged, &form, &mut res_rels::Seen::default(), &mut rr).unwrap();
            let gains: Vec<u8> = rr.list.iter().map(|&r| r.max(0) as u8).collect();
            let mut unretrieved = Vec::new();
            for (g, &n) in rr.rel_levels.iter().enumerate().skip(1) {
                let shown = rr.list.iter().filter(|&&r| r == g as i64).count() as i64;
                unretrieved.extend(std::iter::repeat_n(g as u8, (n - shown) as usize));
            }
            layout.evaluate(&gains, &unretrieved, &mut values);
            let ctx = Ctx { relevance_level: i64::from(level), docs_in_collection: 0, compat: version };
            let daemon = |kind, k: Option<u32>| values[layout.slot(kind, k).unwrap()];
            let close = |a: f64, b: f64, what: &str| assert!((a - b).abs() < 1e-12, "case {case} {what}: {a} vs {b}");
            let mut out = vec![0.0; cutoffs.len()];
            for (measure, kind) in [
                (calc::precision as fn(&Ctx, &ResRels, &[i64], &mut [f64]), MetricKind::Precision),
                (calc::recall, MetricKind::Recall),
                (calc::success, MetricKind::Hit),
                (calc::map_cut, MetricKind::AveragePrecision),
            ] {
                out.fill(0.0);
                measure(&ctx, &rr, &cutoffs, &mut out);
                for (k, v) in cut32.iter().zip(&out) {
                    close(daemon(kind, Some(*k)), *v, &format!("{kind:?}@{k}"));
                }
            }
            out.fill(0.0);
            calc::ndcg_cut(&rr, &cutoffs, &mut out);
            for (k, v) in cut32.iter().zip(&out) {
                close(daemon(MetricKind::Ndcg, Some(*k)), *v, &format!("ndcg@{k}"));
            }
            close(daemon(MetricKind::ReciprocalRank, None), calc::recip_rank(&ctx, &rr), "recip_rank");
            close(daemon(MetricKind::RPrecision, None), calc::r_prec(&ctx, &rr), "Rprec");
            let levels: Vec<f64> = (0..=10).map(|t| f64::from(t) / 10.0).collect();
            let mut iprec = vec![0.0; levels.len()];
            if rr.num_ret > 0 {
                calc::iprec_at_recall(&ctx, &rr, &levels, &mut iprec);
            }
            for (tenths, v) in iprec.iter().enumerate() {
                let got = daemon(MetricKind::InterpolatedPrecision, Some(tenths as u32));
                close(if rr.num_rel == 0 { 0.0 } else { *v }, got, &format!("iprec@{tenths} {version:?}"));
            }
        }
    }
}
