//! The measures `rankpulse eval` prints, named and parameterized as trec_eval names them
//! (`-m P.5,10`, `-m ndcg_cut.10`, `-m map`), rankpulse's extensions in the same syntax, and
//! AutoRAG's grouped measures.

use std::fmt;

/// One measure family, as `-m` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// trec_eval `runid`: the run's tag.
    RunId,
    /// trec_eval `num_q`: queries evaluated.
    NumQ,
    /// trec_eval `num_ret`: documents retrieved.
    NumRet,
    /// trec_eval `num_rel`: relevant documents judged.
    NumRel,
    /// trec_eval `num_rel_ret`: relevant documents retrieved.
    NumRelRet,
    /// trec_eval `map`.
    Map,
    /// trec_eval `Rprec`.
    RPrec,
    /// trec_eval `recip_rank`.
    RecipRank,
    /// trec_eval `ndcg` (no cutoff).
    Ndcg,
    /// trec_eval `iprec_at_recall`: the 11 points.
    IprecAtRecall,
    /// trec_eval `P.k`.
    P,
    /// trec_eval `recall.k`.
    Recall,
    /// trec_eval `success.k`.
    Success,
    /// trec_eval `map_cut.k`.
    MapCut,
    /// trec_eval `ndcg_cut.k`.
    NdcgCut,
    /// rankpulse: harmonic mean of `P.k` and `recall.k`.
    F1Cut,
    /// rankpulse: `ndcg_cut.k` with gains 2^g - 1.
    NdcgExpCut,
    /// rankpulse: expected reciprocal rank at k.
    ErrCut,
    /// AutoRAG `retrieval_precision` (with `--ground-truth`).
    RetrievalPrecision,
    /// AutoRAG `retrieval_recall`.
    RetrievalRecall,
    /// AutoRAG `retrieval_f1`.
    RetrievalF1,
    /// AutoRAG `retrieval_mrr`.
    RetrievalMrr,
    /// AutoRAG `retrieval_map`.
    RetrievalMap,
    /// AutoRAG `retrieval_ndcg`.
    RetrievalNdcg,
}

/// trec_eval's default cutoffs for `P`, `recall`, `map_cut`, `ndcg_cut` (and rankpulse's
/// cutoff measures).
pub const DEFAULT_CUTOFFS: [u32; 9] = [5, 10, 15, 20, 30, 100, 200, 500, 1000];
/// trec_eval's default cutoffs for `success`.
pub const SUCCESS_CUTOFFS: [u32; 3] = [1, 5, 10];

/// Every family by its `-m` name.
const NAMES: [(&str, Family); 24] = [
    ("runid", Family::RunId),
    ("num_q", Family::NumQ),
    ("num_ret", Family::NumRet),
    ("num_rel", Family::NumRel),
    ("num_rel_ret", Family::NumRelRet),
    ("map", Family::Map),
    ("Rprec", Family::RPrec),
    ("recip_rank", Family::RecipRank),
    ("ndcg", Family::Ndcg),
    ("iprec_at_recall", Family::IprecAtRecall),
    ("P", Family::P),
    ("recall", Family::Recall),
    ("success", Family::Success),
    ("map_cut", Family::MapCut),
    ("ndcg_cut", Family::NdcgCut),
    ("f1_cut", Family::F1Cut),
    ("ndcg_exp_cut", Family::NdcgExpCut),
    ("err_cut", Family::ErrCut),
    ("retrieval_precision", Family::RetrievalPrecision),
    ("retrieval_recall", Family::RetrievalRecall),
    ("retrieval_f1", Family::RetrievalF1),
    ("retrieval_mrr", Family::RetrievalMrr),
    ("retrieval_map", Family::RetrievalMap),
    ("retrieval_ndcg", Family::RetrievalNdcg),
];

impl Family {
    pub fn name(self) -> &'static str {
        NAMES.iter().find(|(_, f)| *f == self).map_or("?", |(n, _)| n)
    }
    /// Whether it takes cutoffs (`P.5,10`).
    pub fn has_cutoffs(self) -> bool {
        matches!(
            self,
            Family::P
                | Family::Recall
                | Family::Success
                | Family::MapCut
                | Family::NdcgCut
                | Family::F1Cut
                | Family::NdcgExpCut
                | Family::ErrCut
        )
    }
    /// Whether it needs `--ground-truth` (AutoRAG's), rather than qrels.
    pub fn grouped(self) -> bool {
        matches!(
            self,
            Family::RetrievalPrecision
                | Family::RetrievalRecall
                | Family::RetrievalF1
                | Family::RetrievalMrr
                | Family::RetrievalMap
                | Family::RetrievalNdcg
        )
    }
    /// Whether its value is a count, printed as an integer and summed (not averaged) in `all`.
    pub fn is_count(self) -> bool {
        matches!(self, Family::NumQ | Family::NumRet | Family::NumRel | Family::NumRelRet)
    }
}

/// One printed value: a family and, for the cutoff families, its cutoff (for
/// `iprec_at_recall`, the recall level in tenths).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Measure {
    pub family: Family,
    pub k: Option<u32>,
}

impl fmt::Display for Measure {
    /// trec_eval's printed name: `P_5`, `iprec_at_recall_0.30`, `map`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.family, self.k) {
            (Family::IprecAtRecall, Some(tenths)) => write!(f, "iprec_at_recall_{}.{}0", tenths / 10, tenths % 10),
            (family, Some(k)) => write!(f, "{}_{k}", family.name()),
            (family, None) => f.write_str(family.name()),
        }
    }
}

/// A `-m` argument that names no measure rankpulse computes.
#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    #[error("unknown measure {0:?}; rankpulse eval computes {list}", list = supported())]
    Unknown(String),
    #[error("measure {measure:?}: {why}")]
    BadCutoff { measure: String, why: String },
}

/// The supported `-m` names, for the error.
fn supported() -> String {
    let mut names: Vec<&str> = NAMES.iter().map(|(n, _)| *n).collect();
    names.extend(["all_trec", "official"]);
    names.join(", ")
}

/// The measures of the `-m` arguments, in order, expanded: `P.5,10` is `P_5` then `P_10`,
/// `P` trec_eval's default cutoffs, `iprec_at_recall` its 11 points; `official` (the default
/// without `-m`) is trec_eval's default set less what rankpulse does not compute (`gm_map`,
/// `bpref`); `all_trec` every trec_eval measure rankpulse computes. A measure named twice
/// is printed once.
pub fn parse(args: &[String]) -> Result<Vec<Measure>, MeasureError> {
    let mut out: Vec<Measure> = Vec::new();
    let mut push = |m: Measure| {
        if !out.contains(&m) {
            out.push(m);
        }
    };
    let official =
        ["runid", "num_q", "num_ret", "num_rel", "num_rel_ret", "map", "Rprec", "recip_rank", "iprec_at_recall", "P"];
    let all_trec = [
        "runid",
        "num_q",
        "num_ret",
        "num_rel",
        "num_rel_ret",
        "map",
        "Rprec",
        "recip_rank",
        "iprec_at_recall",
        "P",
        "recall",
        "success",
        "map_cut",
        "ndcg",
        "ndcg_cut",
    ];
    let expanded: Vec<String> = args
        .iter()
        .flat_map(|a| match a.as_str() {
            "official" => official.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            "all_trec" => all_trec.iter().map(|s| s.to_string()).collect(),
            _ => vec![a.clone()],
        })
        .collect();
    for arg in &expanded {
        let (name, cutoffs) = match arg.split_once('.') {
            Some((name, cutoffs)) => (name, Some(cutoffs)),
            None => (arg.as_str(), None),
        };
        let family = NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, f)| *f)
            .ok_or_else(|| MeasureError::Unknown(arg.clone()))?;
        let bad = |why: &str| MeasureError::BadCutoff { measure: arg.clone(), why: why.to_string() };
        if family == Family::IprecAtRecall {
            if cutoffs.is_some() {
                return Err(bad("iprec_at_recall takes no cutoffs: it prints its 11 recall levels"));
            }
            (0..=10).for_each(|tenths| push(Measure { family, k: Some(tenths) }));
            continue;
        }
        if !family.has_cutoffs() {
            if cutoffs.is_some() {
                return Err(bad("this measure takes no cutoffs"));
            }
            push(Measure { family, k: None });
            continue;
        }
        let ks: Vec<u32> = match cutoffs {
            None if family == Family::Success => SUCCESS_CUTOFFS.to_vec(),
            None => DEFAULT_CUTOFFS.to_vec(),
            Some(list) => list
                .split(',')
                .map(|k| k.trim().parse::<u32>().ok().filter(|&k| k > 0))
                .collect::<Option<Vec<u32>>>()
                .ok_or_else(|| bad("cutoffs are positive integers separated by commas"))?,
        };
        ks.into_iter().for_each(|k| push(Measure { family, k: Some(k) }));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(args: &[&str]) -> Vec<String> {
        parse(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap().iter().map(|m| m.to_string()).collect()
    }

    #[test]
    fn trec_eval_syntax_and_names() {
        assert_eq!(names(&["P.5,10", "map", "ndcg_cut.10", "P.5"]), ["P_5", "P_10", "map", "ndcg_cut_10"]);
        assert_eq!(names(&["success"]), ["success_1", "success_5", "success_10"]);
        assert_eq!(names(&["P"]).len(), 9);
        let iprec = names(&["iprec_at_recall"]);
        assert_eq!(
            (iprec[0].as_str(), iprec[3].as_str(), iprec[10].as_str()),
            ("iprec_at_recall_0.00", "iprec_at_recall_0.30", "iprec_at_recall_1.00")
        );
        assert_eq!(names(&["official"])[..6], ["runid", "num_q", "num_ret", "num_rel", "num_rel_ret", "map"]);
        assert_eq!(names(&["retrieval_f1"]), ["retrieval_f1"]);
    }

    #[test]
    fn what_is_refused() {
        let err =
            |args: &[&str]| parse(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap_err().to_string();
        assert!(err(&["bpref"]).contains("unknown measure \"bpref\"") && err(&["bpref"]).contains("ndcg_cut"));
        assert!(err(&["P.0"]).contains("positive integers"));
        assert!(err(&["P.x"]).contains("positive integers"));
        assert!(err(&["map.10"]).contains("takes no cutoffs"));
        assert!(err(&["iprec_at_recall.5"]).contains("11 recall levels"));
    }
}
