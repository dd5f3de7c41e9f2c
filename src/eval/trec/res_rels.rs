#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]
//! One query's ranking joined with its judgments, as trec_eval's `te_form_res_rels`
//! (form_res_rels.c) forms it: the relevance value at each rank, and the counts every measure
//! reads.

use super::qrels::QueryQrels;

/// One query's documents by id: a judged one's grade (or [`NONPOOL`]) and whether the ranking
/// showed it yet. One hash per ranked document serves both the grade lookup and the repeat
/// check; kept from query to query.
pub type Seen<'a> = hashbrown::HashMap<&'a str, (i64, bool), foldhash::fast::FixedState>;

/// A retrieved document the qrels do not name (trec_eval's `RELVALUE_NONPOOL`).
pub const NONPOOL: i64 = -1;
/// A retrieved document the qrels name with a negative grade: in the pool, not judged
/// (trec_eval's `RELVALUE_UNJUDGED`; infAP's sampled pools write them).
pub const UNJUDGED: i64 = -2;

/// What the measures read of one query (trec_eval's `RES_RELS`).
#[derive(Debug, Default, Clone)]
pub struct ResRels {
    /// The relevance value at each rank, rank 1 first: the grade of a judged document,
    /// [`NONPOOL`] or [`UNJUDGED`].
    pub list: Vec<i64>,
    /// Judged documents of the query per grade 0, 1, ..., retrieved or not (negative grades
    /// are not counted).
    pub rel_levels: Vec<i64>,
    /// One more than the largest grade that has a judged document (0 with none).
    pub num_rel_levels: usize,
    /// Judged documents with a grade of at least the relevance level.
    pub num_rel: i64,
    /// Documents evaluated (after `-M`, and `-J`'s removal of unjudged ones).
    pub num_ret: i64,
    /// Relevant documents among them.
    pub num_rel_ret: i64,
    /// Retrieved documents the qrels do not name.
    pub num_nonpool: i64,
    /// Retrieved documents the qrels name with a negative grade.
    pub num_unjudged_in_pool: i64,
}

/// Why a query cannot be evaluated (trec_eval stops on both).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FormError {
    #[error("query {qid:?}: document {doc:?} is ranked twice (trec_eval refuses duplicate docs too)")]
    RankedTwice { qid: String, doc: String },
    #[error("query {qid:?}: document {doc:?} is judged twice in the qrels (trec_eval refuses duplicate docs too)")]
    JudgedTwice { qid: String, doc: String },
}

/// How one query's ranking is read.
#[derive(Debug, Clone, Copy)]
pub struct Form {
    /// trec_eval's `-l`: the smallest relevant grade.
    pub relevance_level: i64,
    /// trec_eval's `-M`: documents kept per ranking (before the duplicate check, as trec_eval
    /// cuts first).
    pub max_docs: usize,
    /// trec_eval's `-J`: only judged documents are ranked, in their order.
    pub judged_only: bool,
    /// Whether a document ranked twice is an error (TREC runs, as in trec_eval) or counts, at
    /// its later ranks, as a document outside the pool (JSON-lines runs, which AutoRAG's
    /// measures allow to repeat).
    pub repeats_are_errors: bool,
}

/// Fills `out` for `ranking` (documents in rank order) against `judged`. `seen` keeps its
/// allocation from query to query.
pub fn form<'a>(
    qid: &str,
    ranking: &[&'a str],
    judged: &'a QueryQrels<'_>,
    how: &Form,
    seen: &mut Seen<'a>,
    out: &mut ResRels,
) -> Result<(), FormError> {
    let ranking = ranking.get(..ranking.len().min(how.max_docs)).unwrap_or(ranking);
    let docs = &judged.docs;
    if let Some(pair) = docs.windows(2).find(|w| w.first().map(|d| &d.0) == w.get(1).map(|d| &d.0)) {
        let doc = pair.first().map(|d| d.0.to_string()).unwrap_or_default();
        return Err(FormError::JudgedTwice { qid: qid.to_string(), doc });
    }
    out.list.clear();
    seen.clear();
    seen.extend(docs.iter().map(|d| (d.0.as_ref(), (if d.1 < 0 { UNJUDGED } else { d.1 }, false))));
    for &doc in ranking {
        match seen.entry(doc) {
            hashbrown::hash_map::Entry::Occupied(mut e) => {
                let (rel, shown) = e.get_mut();
                if *shown {
                    if how.repeats_are_errors {
                        return Err(FormError::RankedTwice { qid: qid.to_string(), doc: doc.to_string() });
                    }
                    out.list.push(NONPOOL); // a repeat counts as a document outside the pool
                } else {
                    *shown = true;
                    out.list.push(*rel);
                }
            }
            hashbrown::hash_map::Entry::Vacant(e) => {
                e.insert((NONPOOL, true));
                out.list.push(NONPOOL);
            }
        }
    }
    let max_rel = docs.iter().map(|d| d.1).max().unwrap_or(-1);
    out.rel_levels.clear();
    out.rel_levels.resize(usize::try_from(max_rel + 1).unwrap_or(0), 0);
    for &(_, grade) in docs.iter() {
        if let Some(count) = usize::try_from(grade).ok().and_then(|g| out.rel_levels.get_mut(g)) {
            *count += 1;
        }
    }
    out.num_rel_levels = out.rel_levels.iter().rposition(|&n| n > 0).map_or(0, |i| i + 1);
    // A level of 0 or below makes every judged grade relevant.
    out.num_rel = out.rel_levels.iter().skip(usize::try_from(how.relevance_level).unwrap_or(0)).sum();
    if how.judged_only {
        out.list.retain(|&rel| rel >= 0);
    }
    out.num_ret = out.list.len() as i64;
    out.num_nonpool = out.list.iter().filter(|&&r| r == NONPOOL).count() as i64;
    out.num_unjudged_in_pool = out.list.iter().filter(|&&r| r == UNJUDGED).count() as i64;
    out.num_rel_ret = out.list.iter().filter(|&&r| r >= 0 && r >= how.relevance_level).count() as i64;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;

    fn qrels(docs: &[(&'static str, i64)]) -> QueryQrels<'static> {
        let mut docs: Vec<(Cow<'static, str>, i64)> = docs.iter().map(|&(d, g)| (Cow::Borrowed(d), g)).collect();
        docs.sort_by(|a, b| a.0.cmp(&b.0));
        QueryQrels { qid: Cow::Borrowed("q"), docs }
    }

    fn how() -> Form {
        Form { relevance_level: 1, max_docs: usize::MAX, judged_only: false, repeats_are_errors: true }
    }

    #[test]
    fn values_and_counts() {
        let judged = qrels(&[("a", 2), ("b", 0), ("c", -1), ("d", 1), ("e", 3)]);
        let mut out = ResRels::default();
        form("q", &["x", "a", "b", "c", "d"], &judged, &how(), &mut Seen::default(), &mut out).unwrap();
        assert_eq!(out.list, [NONPOOL, 2, 0, UNJUDGED, 1]);
        assert_eq!(out.rel_levels, [1, 1, 1, 1]);
        assert_eq!((out.num_rel_levels, out.num_rel, out.num_ret, out.num_rel_ret), (4, 3, 5, 2));
        assert_eq!((out.num_nonpool, out.num_unjudged_in_pool), (1, 1));
        form(
            "q",
            &["x", "a", "b", "c", "d"],
            &judged,
            &Form { judged_only: true, ..how() },
            &mut Seen::default(),
            &mut out,
        )
        .unwrap();
        assert_eq!(out.list, [2, 0, 1]);
    }

    #[test]
    fn duplicates_beyond_the_cut_are_not_seen() {
        let judged = qrels(&[("a", 1)]);
        let mut out = ResRels::default();
        let err = form("q", &["a", "b", "a"], &judged, &how(), &mut Seen::default(), &mut out).unwrap_err();
        assert_eq!(err, FormError::RankedTwice { qid: "q".into(), doc: "a".into() });
        form("q", &["a", "b", "a"], &judged, &Form { max_docs: 2, ..how() }, &mut Seen::default(), &mut out).unwrap();
        form(
            "q",
            &["a", "b", "a"],
            &judged,
            &Form { repeats_are_errors: false, ..how() },
            &mut Seen::default(),
            &mut out,
        )
        .unwrap();
        assert_eq!(out.list, [1, NONPOOL, NONPOOL]);
    }
}
