//! The measures `rankpulse eval` prints: trec_eval's, named, parameterized and ordered as
//! trec_eval names, parameterizes and orders them (its measure table in measures.c, its
//! parameter rules in meas_init.c), then rankpulse's extensions, then AutoRAG's grouped
//! measures.
//!
//! As in trec_eval, `-m` marks measures; the output follows the table, not the order of `-m`
//! (`-m P.10,5 -m map` prints `map` before `P_5`, and `P_5` before `P_10`). A measure's
//! parameters are those of the first `-m` that names it with parameters. Cutoffs are sorted,
//! and a repeated cutoff is refused, as trec_eval refuses it.

use std::fmt::Write as _;

use super::trec::Compat;

/// Which measure (one row of the table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Id {
    RunId,
    NumQ,
    NumRet,
    NumRel,
    NumRelRet,
    Map,
    GmMap,
    RPrec,
    Bpref,
    RecipRank,
    IprecAtRecall,
    P,
    RelString,
    Recall,
    InfAp,
    GmBpref,
    RPrecMult,
    Utility,
    ElevenPtAvg,
    BinG,
    G,
    Dcg,
    IdealDcg,
    Ndcg,
    NdcgRel,
    RNdcg,
    NdcgCut,
    MapCut,
    RelativeP,
    Success,
    SetP,
    SetRelativeP,
    SetRecall,
    SetMap,
    SetF,
    NumNonrelJudgedRet,
    Rbp,
    RbpResid,
    Unj,
    /// rankpulse: harmonic mean of `P.k` and `recall.k`.
    F1Cut,
    /// rankpulse: `ndcg_cut.k` with gains 2^g - 1.
    NdcgExpCut,
    /// rankpulse: expected reciprocal rank at k.
    ErrCut,
    /// AutoRAG `retrieval_precision` (with `--ground-truth`).
    RetrievalPrecision,
    RetrievalRecall,
    RetrievalF1,
    RetrievalMrr,
    RetrievalMap,
    RetrievalNdcg,
}

/// How a measure's values are kept, averaged and printed (trec_eval's init, acc, avg and print
/// functions of the measure).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `runid`: the run's tag, in the summary only.
    RunId,
    /// `num_q`: 1 per query, the number of queries in the summary only.
    NumQ,
    /// A count: printed as an integer, summed over the queries.
    Count,
    /// A value per query (`%6.4f`), the mean over the queries.
    Mean,
    /// A logarithm per query, not printed; the summary is the geometric mean.
    GeoMean,
    /// `relstring`: a string per query, no summary.
    Text,
}

/// The parameters a measure takes, with trec_eval's defaults.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ParamShape {
    None,
    /// Integer cutoffs, printed `name_k` (`P`, `recall`, ...).
    Cutoffs(&'static [i64]),
    /// Fractional cutoffs, printed `name_%3.2f` (`iprec_at_recall`, `Rprec_mult`).
    Levels(&'static [f64]),
    /// Numbers, printed `name_<as given>` when given (`set_F`, `utility`, `11pt_avg`,
    /// `relstring`).
    Values(&'static [f64]),
    /// `name=value` pairs, printed `name_<as given>` when given (the gains of `ndcg`, `G`, ...;
    /// rbp's `p`).
    Pairs,
}

/// Where a measure comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// NIST trec_eval, in both 9.x and 10.0.
    TrecEval,
    /// NIST trec_eval 10.0 only.
    TrecEval10,
    /// rankpulse's own, with trec_eval's syntax.
    Rankpulse,
    /// AutoRAG's grouped measures, over `--ground-truth`.
    AutoRag,
}

/// One row of the table.
#[derive(Debug, Clone, Copy)]
pub struct Def {
    pub id: Id,
    pub name: &'static str,
    pub kind: Kind,
    pub params: ParamShape,
    pub origin: Origin,
}

/// trec_eval's default cutoffs for `P`, `recall`, `map_cut`, `ndcg_cut`, `relative_P` (and
/// rankpulse's cutoff measures).
pub const DEFAULT_CUTOFFS: &[i64] = &[5, 10, 15, 20, 30, 100, 200, 500, 1000];
const SUCCESS_CUTOFFS: &[i64] = &[1, 5, 10];
const UNJ_CUTOFFS: &[i64] = &[5, 10, 20];
const RECALL_LEVELS: &[f64] = &[0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0];
const RPREC_MULTIPLES: &[f64] = &[0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8, 2.0];

const fn def(id: Id, name: &'static str, kind: Kind, params: ParamShape, origin: Origin) -> Def {
    Def { id, name, kind, params, origin }
}

use Kind::{Count, GeoMean, Mean};
use Origin::{AutoRag, Rankpulse, TrecEval, TrecEval10};
use ParamShape::{Cutoffs, Levels, Pairs, Values};

/// Every measure, in trec_eval 10.0's print order (9.x's is the same without the 10.0 rows),
/// then rankpulse's and AutoRAG's.
pub const TABLE: &[Def] = &[
    def(Id::RunId, "runid", Kind::RunId, ParamShape::None, TrecEval),
    def(Id::NumQ, "num_q", Kind::NumQ, ParamShape::None, TrecEval),
    def(Id::NumRet, "num_ret", Count, ParamShape::None, TrecEval),
    def(Id::NumRel, "num_rel", Count, ParamShape::None, TrecEval),
    def(Id::NumRelRet, "num_rel_ret", Count, ParamShape::None, TrecEval),
    def(Id::Map, "map", Mean, ParamShape::None, TrecEval),
    def(Id::GmMap, "gm_map", GeoMean, ParamShape::None, TrecEval),
    def(Id::RPrec, "Rprec", Mean, ParamShape::None, TrecEval),
    def(Id::Bpref, "bpref", Mean, ParamShape::None, TrecEval),
    def(Id::RecipRank, "recip_rank", Mean, ParamShape::None, TrecEval),
    def(Id::IprecAtRecall, "iprec_at_recall", Mean, Levels(RECALL_LEVELS), TrecEval),
    def(Id::P, "P", Mean, Cutoffs(DEFAULT_CUTOFFS), TrecEval),
    def(Id::RelString, "relstring", Kind::Text, Values(&[10.0]), TrecEval),
    def(Id::Recall, "recall", Mean, Cutoffs(DEFAULT_CUTOFFS), TrecEval),
    def(Id::InfAp, "infAP", Mean, ParamShape::None, TrecEval),
    def(Id::GmBpref, "gm_bpref", GeoMean, ParamShape::None, TrecEval),
    def(Id::RPrecMult, "Rprec_mult", Mean, Levels(RPREC_MULTIPLES), TrecEval),
    def(Id::Utility, "utility", Mean, Values(&[1.0, -1.0, 0.0, 0.0]), TrecEval),
    def(Id::ElevenPtAvg, "11pt_avg", Mean, Values(RECALL_LEVELS), TrecEval),
    def(Id::BinG, "binG", Mean, ParamShape::None, TrecEval),
    def(Id::G, "G", Mean, Pairs, TrecEval),
    def(Id::Dcg, "dcg", Mean, Pairs, TrecEval10),
    def(Id::IdealDcg, "ideal_dcg", Mean, Pairs, TrecEval10),
    def(Id::Ndcg, "ndcg", Mean, Pairs, TrecEval),
    def(Id::NdcgRel, "ndcg_rel", Mean, Pairs, TrecEval),
    def(Id::RNdcg, "Rndcg", Mean, Pairs, TrecEval),
    def(Id::NdcgCut, "ndcg_cut", Mean, Cutoffs(DEFAULT_CUTOFFS), TrecEval),
    def(Id::MapCut, "map_cut", Mean, Cutoffs(DEFAULT_CUTOFFS), TrecEval),
    def(Id::RelativeP, "relative_P", Mean, Cutoffs(DEFAULT_CUTOFFS), TrecEval),
    def(Id::Success, "success", Mean, Cutoffs(SUCCESS_CUTOFFS), TrecEval),
    def(Id::SetP, "set_P", Mean, ParamShape::None, TrecEval),
    def(Id::SetRelativeP, "set_relative_P", Mean, ParamShape::None, TrecEval),
    def(Id::SetRecall, "set_recall", Mean, ParamShape::None, TrecEval),
    def(Id::SetMap, "set_map", Mean, ParamShape::None, TrecEval),
    def(Id::SetF, "set_F", Mean, Values(&[1.0]), TrecEval),
    def(Id::NumNonrelJudgedRet, "num_nonrel_judged_ret", Count, ParamShape::None, TrecEval),
    def(Id::Rbp, "rbp", Mean, Pairs, TrecEval10),
    def(Id::RbpResid, "rbp_resid", Mean, Pairs, TrecEval10),
    def(Id::Unj, "unj", Mean, Cutoffs(UNJ_CUTOFFS), TrecEval10),
    def(Id::F1Cut, "f1_cut", Mean, Cutoffs(DEFAULT_CUTOFFS), Rankpulse),
    def(Id::NdcgExpCut, "ndcg_exp_cut", Mean, Cutoffs(DEFAULT_CUTOFFS), Rankpulse),
    def(Id::ErrCut, "err_cut", Mean, Cutoffs(DEFAULT_CUTOFFS), Rankpulse),
    def(Id::RetrievalPrecision, "retrieval_precision", Mean, ParamShape::None, AutoRag),
    def(Id::RetrievalRecall, "retrieval_recall", Mean, ParamShape::None, AutoRag),
    def(Id::RetrievalF1, "retrieval_f1", Mean, ParamShape::None, AutoRag),
    def(Id::RetrievalMrr, "retrieval_mrr", Mean, ParamShape::None, AutoRag),
    def(Id::RetrievalMap, "retrieval_map", Mean, ParamShape::None, AutoRag),
    def(Id::RetrievalNdcg, "retrieval_ndcg", Mean, ParamShape::None, AutoRag),
];

/// trec_eval's nicknames (measures.c): `official` (the default), `set`, `all_trec`.
fn nickname(name: &str, compat: Compat) -> Option<Vec<&'static str>> {
    const OFFICIAL: &[&str] =
        &["runid", "num_q", "num_ret", "num_rel", "num_rel_ret", "map", "gm_map", "Rprec", "bpref", "recip_rank"];
    let official = || OFFICIAL.iter().copied().chain(["iprec_at_recall", "P"]).collect::<Vec<_>>();
    match name {
        "official" => Some(official()),
        "set" => Some(vec![
            "runid",
            "num_q",
            "num_ret",
            "num_rel",
            "num_rel_ret",
            "utility",
            "set_P",
            "set_recall",
            "set_relative_P",
            "set_map",
            "set_F",
        ]),
        "all_trec" => {
            let mut names = official();
            names.extend(["relstring", "recall"]);
            if compat == Compat::V10 {
                names.extend(["unj", "rbp", "rbp_resid"]);
            }
            names.extend([
                "infAP",
                "gm_bpref",
                "utility",
                "11pt_avg",
                "ndcg",
                "relative_P",
                "Rprec_mult",
                "success",
                "map_cut",
                "ndcg_cut",
                "ndcg_rel",
                "Rndcg",
                "binG",
                "G",
                "set_P",
                "set_recall",
                "set_relative_P",
                "set_map",
                "set_F",
                "num_nonrel_judged_ret",
            ]);
            Some(names)
        }
        _ => None,
    }
}

/// A measure's parameters as given (or its defaults).
#[derive(Debug, Clone, PartialEq)]
pub enum Params {
    None,
    Cutoffs(Vec<i64>),
    Levels(Vec<f64>),
    Values(Vec<f64>),
    Pairs(Vec<(String, f64)>),
}

/// A measure to compute and print.
#[derive(Debug, Clone)]
pub struct Selected {
    pub def: &'static Def,
    pub params: Params,
    /// The printed names of its values (one per cutoff, or one).
    pub names: Vec<String>,
}

/// A `-m` argument that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    #[error("unknown measure {0:?}; rankpulse eval computes {list}", list = supported())]
    Unknown(String),
    #[error("{0:?} is a measure of trec_eval 10.0; trec_eval 9.x (--compat 9) does not have it")]
    NotIn9(String),
    #[error("measure {measure:?}: {why}")]
    BadParameter { measure: String, why: String },
}

/// The supported `-m` names, for the error.
fn supported() -> String {
    let mut names: Vec<&str> = TABLE.iter().map(|d| d.name).collect();
    names.extend(["official", "all_trec", "set"]);
    names.join(", ")
}

/// The measures the `-m` arguments select, in print order.
pub fn parse(args: &[String], compat: Compat) -> Result<Vec<Selected>, MeasureError> {
    let mut marked: Vec<&'static Def> = Vec::new();
    let mut given: Vec<(&str, &str)> = Vec::new();
    for arg in args {
        let (name, params) = match arg.split_once('.') {
            Some((name, params)) => (name, Some(params)),
            None => (arg.as_str(), None),
        };
        if let Some(params) = params {
            if params.is_empty() {
                return Err(MeasureError::BadParameter { measure: arg.clone(), why: "no parameter after '.'".into() });
            }
            given.push((name, params));
        }
        let names = nickname(name, compat).unwrap_or_else(|| vec![""]);
        for single in names {
            let single = if single.is_empty() { name } else { single };
            let def = TABLE.iter().find(|d| d.name == single).ok_or_else(|| MeasureError::Unknown(arg.clone()))?;
            if compat == Compat::V9 && def.origin == TrecEval10 {
                return Err(MeasureError::NotIn9(def.name.to_string()));
            }
            if !marked.iter().any(|m| m.id == def.id) {
                marked.push(def);
            }
        }
    }
    let mut selected = Vec::new();
    for def in TABLE.iter().filter(|d| marked.iter().any(|m| m.id == d.id)) {
        let text = given.iter().find(|(n, _)| *n == def.name).map(|(_, p)| *p);
        let bad = |why: &str| MeasureError::BadParameter {
            measure: format!("{}.{}", def.name, text.unwrap_or("")),
            why: why.to_string(),
        };
        let (params, names) = match def.params {
            ParamShape::None => {
                if text.is_some() {
                    return Err(bad("this measure takes no parameters"));
                }
                (Params::None, vec![def.name.to_string()])
            }
            ParamShape::Cutoffs(default) => {
                let mut cutoffs = match text {
                    None => default.to_vec(),
                    Some(t) => t
                        .split(',')
                        .map(|k| k.trim().parse::<i64>())
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|_| bad("cutoffs are integers separated by commas"))?,
                };
                cutoffs.sort_unstable();
                if cutoffs.first().is_some_and(|&k| k <= 0) {
                    return Err(bad("cutoffs must be positive"));
                }
                if cutoffs.windows(2).any(|w| w.first() == w.get(1)) {
                    return Err(bad("a cutoff is given twice (trec_eval refuses duplicate cutoffs)"));
                }
                let names = cutoffs.iter().map(|k| format!("{}_{k}", def.name)).collect();
                (Params::Cutoffs(cutoffs), names)
            }
            ParamShape::Levels(default) => {
                let mut levels = match text {
                    None => default.to_vec(),
                    Some(t) => numbers(t).ok_or_else(|| bad("levels are numbers separated by commas"))?,
                };
                levels.sort_by(|a, b| a.total_cmp(b));
                if levels.windows(2).any(|w| w.first() == w.get(1)) {
                    return Err(bad("a level is given twice (trec_eval refuses duplicate cutoffs)"));
                }
                let names = levels.iter().map(|p| format!("{}_{p:3.2}", def.name)).collect();
                (Params::Levels(levels), names)
            }
            ParamShape::Values(default) => {
                let values = match text {
                    None => default.to_vec(),
                    Some(t) => numbers(t).ok_or_else(|| bad("parameters are numbers separated by commas"))?,
                };
                if def.id == Id::Utility && values.len() != 4 {
                    return Err(bad(
                        "utility takes 4 numbers: the gains of rel_ret, nonrel_ret, rel_not_ret, nonrel_not_ret",
                    ));
                }
                (Params::Values(values), vec![printed(def.name, text)])
            }
            ParamShape::Pairs => {
                let pairs = match text {
                    None => Vec::new(),
                    Some(t) => pairs(t).ok_or_else(|| bad("parameters are name=number pairs separated by commas"))?,
                };
                (Params::Pairs(pairs), vec![printed(def.name, text)])
            }
        };
        selected.push(Selected { def, params, names });
    }
    Ok(selected)
}

/// trec_eval's name for a measure given parameters it prints as typed.
fn printed(name: &str, params: Option<&str>) -> String {
    let mut out = name.to_string();
    if let Some(p) = params {
        let _ = write!(out, "_{p}");
    }
    out
}

fn numbers(text: &str) -> Option<Vec<f64>> {
    text.split(',').map(|v| v.trim().parse::<f64>().ok().filter(|v| v.is_finite())).collect()
}

fn pairs(text: &str) -> Option<Vec<(String, f64)>> {
    text.split(',')
        .map(|pair| {
            let (name, value) = pair.split_once('=')?;
            let value = value.trim().parse::<f64>().ok().filter(|v| v.is_finite())?;
            Some((name.to_string(), value))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(args: &[&str], compat: Compat) -> Vec<String> {
        parse(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>(), compat)
            .unwrap()
            .into_iter()
            .flat_map(|s| s.names)
            .collect()
    }

    #[test]
    fn table_order_sorted_cutoffs_first_parameters_win() {
        assert_eq!(names(&["P.10,5", "map"], Compat::V10), ["map", "P_5", "P_10"]);
        assert_eq!(names(&["P.5", "P.10"], Compat::V10), ["P_5"]);
        assert_eq!(names(&["success"], Compat::V10), ["success_1", "success_5", "success_10"]);
        let iprec = names(&["iprec_at_recall"], Compat::V10);
        assert_eq!(
            (iprec[0].as_str(), iprec[3].as_str(), iprec.len()),
            ("iprec_at_recall_0.00", "iprec_at_recall_0.30", 11)
        );
        assert_eq!(names(&["set_F.0.5", "ndcg.1=2,2=4"], Compat::V10), ["ndcg_1=2,2=4", "set_F_0.5"]);
        let official = names(&["official"], Compat::V9);
        assert_eq!(official[..8], ["runid", "num_q", "num_ret", "num_rel", "num_rel_ret", "map", "gm_map", "Rprec"]);
        let all10 = names(&["all_trec"], Compat::V10);
        assert!(all10.contains(&"unj_20".to_string()) && all10.last().unwrap() == "unj_20");
        assert!(!names(&["all_trec"], Compat::V9).contains(&"rbp".to_string()));
    }

    #[test]
    fn what_is_refused() {
        let err = |args: &[&str], compat| {
            parse(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>(), compat).unwrap_err().to_string()
        };
        assert!(err(&["yaap"], Compat::V10).contains("unknown measure \"yaap\""));
        assert!(err(&["P.0"], Compat::V10).contains("positive"));
        assert!(err(&["P.5,5"], Compat::V10).contains("twice"));
        assert!(err(&["P.x"], Compat::V10).contains("integers"));
        assert!(err(&["map.10"], Compat::V10).contains("no parameters"));
        assert!(err(&["rbp"], Compat::V9).contains("trec_eval 10.0"));
        assert!(err(&["utility.1,2"], Compat::V10).contains("4 numbers"));
    }
}
