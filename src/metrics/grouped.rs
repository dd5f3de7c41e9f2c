//! AutoRAG's retrieval metrics over a grouped ground truth: pure functions, no I/O.
//!
//! Retrieval-augmented generation evaluates a retriever against `retrieval_gt`, a list of
//! groups of acceptable passages: any passage of a group satisfies it, and every group is
//! needed (`[["test-1", "test-2"], ["test-3"]]`). These are the definitions of AutoRAG's
//! `autorag/evaluation/metric/retrieval.py` (AutoRAG 0.3.27, Marker-Inc-Korea/AutoRAG, Apache
//! 2.0), reproduced operation for operation so that the figures agree to the last bits: with
//! G the groups, P the retrieved ids in rank order (repeats allowed) and S the set of P,
//!
//! * `retrieval_recall` = groups with some id in S / |G|
//! * `retrieval_precision` = ids of S in some group / |P| (distinct hits over the list's
//!   length, repeats included)
//! * `retrieval_f1` = 2 precision recall / (precision + recall), 0 when both are 0
//! * `retrieval_mrr` = sum over groups of 1 / the first rank holding an id of the group (0 for
//!   a group never retrieved), / |G|
//! * `retrieval_map` = mean over groups of the group's AP: the mean, over the ranks i holding an
//!   id of the group, of (such ranks up to i) / i; 0 for a group never retrieved
//! * `retrieval_ndcg` = DCG / IDCG with gain 1 at every rank holding an id of any group
//!   (repeats included) and log2(i + 1) discounts; the ideal has min(|flattened G|, |P|) ones,
//!   |flattened G| counting every id of every group
//!
//! Where they differ from trec_eval's measures (which rankpulse keeps, under their own names):
//!
//! | | AutoRAG | trec_eval |
//! |---|---|---|
//! | relevance | any id of any group, binary | per document, graded |
//! | recall | groups covered / groups | relevant retrieved / relevant |
//! | precision | distinct hits / list length | relevant in top k / k |
//! | MRR | mean over groups of each group's reciprocal rank | reciprocal rank of the first relevant |
//! | MAP | mean over groups of a per-group AP that divides by the group's retrieved hits | AP divides by all relevant documents, retrieved or not |
//! | nDCG | binary gains; a repeat gains again; ideal from the flattened ground truth's size | graded gains; the ideal from the judged grades |
//!
//! On the worked example of `retrieval_gt = [["test-1", "test-2"], ["test-3"]]` and retrieved
//! `[test-1, pred-1, test-2, pred-3]`: precision 2/4 = 0.5, recall 1/2 = 0.5, F1 0.5, MRR
//! (1 + 0) / 2 = 0.5, MAP (1 + 2/3) / 2 / 2 = 0.41667, nDCG (1 + 1/log2 4) / (1 + 1/log2 3 +
//! 1/log2 4) = 0.70391.
//!
//! AutoRAG computes nothing (`None`, which its means leave out) for a query whose ground truth
//! or retrieved list fails `MetricInput.is_fields_notnone`: an empty list, an empty group, or
//! an id whose Python `str.strip()` is empty (`""`, `" "`, `"\t"`, even `"\x1f"`). It does not
//! strip the ids it keeps: `" a "` is not `"a"`. [`has_value`] and [`ranking_has_value`] are that
//! check; `rankpulse eval` leaves such a query out as AutoRAG does, and says so.

/// The six figures of one query.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GroupedScores {
    pub precision: f64,
    pub recall: f64,
    pub f1: f64,
    pub mrr: f64,
    pub map: f64,
    pub ndcg: f64,
}

/// The figures of `retrieved` (ids in rank order, compared by equality: hashes or text)
/// against `groups`. Empty input gives zeros (AutoRAG gives no value; callers leave such a
/// query out, see [`has_value`]).
pub fn grouped<T: PartialEq + Copy>(retrieved: &[T], groups: &[Vec<T>]) -> GroupedScores {
    let in_any = |id: &T| groups.iter().any(|g| g.contains(id));
    // S: the distinct retrieved ids, in first-seen order.
    let mut distinct: Vec<T> = Vec::with_capacity(retrieved.len());
    for id in retrieved {
        if !distinct.contains(id) {
            distinct.push(*id);
        }
    }
    let covered = groups.iter().filter(|g| distinct.iter().any(|id| g.contains(id))).count();
    let recall = if groups.is_empty() { 0.0 } else { covered as f64 / groups.len() as f64 };
    let hits = distinct.iter().filter(|id| in_any(id)).count();
    let precision = if retrieved.is_empty() { 0.0 } else { hits as f64 / retrieved.len() as f64 };
    let f1 = if recall + precision == 0.0 { 0.0 } else { 2.0 * (recall * precision) / (recall + precision) };

    let mut reciprocal_ranks = Vec::new();
    let mut average_precisions = Vec::new();
    for group in groups {
        if let Some(i) = retrieved.iter().position(|id| group.contains(id)) {
            reciprocal_ranks.push(1.0 / (i + 1) as f64);
        }
        let mut seen = 0usize;
        let mut precisions = Vec::new();
        for (i, id) in retrieved.iter().enumerate() {
            if group.contains(id) {
                seen += 1;
                precisions.push(seen as f64 / (i + 1) as f64);
            }
        }
        average_precisions.push(if precisions.is_empty() {
            0.0
        } else {
            python_sum(&precisions) / precisions.len() as f64
        });
    }
    let mrr = if reciprocal_ranks.is_empty() { 0.0 } else { python_sum(&reciprocal_ranks) / groups.len() as f64 };
    let map = if average_precisions.is_empty() { 0.0 } else { python_sum(&average_precisions) / groups.len() as f64 };

    let discount = |i: usize| ((i + 2) as f64).log2();
    let dcg = python_sum(
        &retrieved
            .iter()
            .enumerate()
            .map(|(i, id)| if in_any(id) { 1.0 / discount(i) } else { 0.0 })
            .collect::<Vec<_>>(),
    );
    let flattened: usize = groups.iter().map(Vec::len).sum();
    let ideal_ones = flattened.min(retrieved.len());
    let idcg = python_sum(
        &(0..retrieved.len()).map(|i| if i < ideal_ones { 1.0 / discount(i) } else { 0.0 }).collect::<Vec<_>>(),
    );
    let ndcg = if idcg > 0.0 { dcg / idcg } else { 0.0 };
    GroupedScores { precision, recall, f1, mrr, map, ndcg }
}

/// Whether AutoRAG's input check refuses `id`: empty once Python's `str.strip()` removed its
/// whitespace, which is Unicode's White_Space and also U+001C to U+001F (`str.isspace` counts
/// the information separators; Rust's `char::is_whitespace` does not).
pub fn is_blank(id: &str) -> bool {
    id.chars().all(|c| c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c))
}

/// Whether AutoRAG gives a ground truth a value: at least one group, no empty group, no blank id.
pub fn has_value<S: AsRef<str>>(retrieval_gt: &[Vec<S>]) -> bool {
    !retrieval_gt.is_empty() && retrieval_gt.iter().all(|g| ranking_has_value(g))
}

/// Whether AutoRAG gives a retrieved list a value: not empty, no blank id.
pub fn ranking_has_value<S: AsRef<str>>(ids: &[S]) -> bool {
    !ids.is_empty() && !ids.iter().any(|id| is_blank(id.as_ref()))
}

/// Python's `sum` over floats: left to right from 0 (so that the figures agree to the bit).
fn python_sum(values: &[f64]) -> f64 {
    values.iter().fold(0.0, |acc, v| acc + v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worked_example() {
        let groups = vec![vec!["test-1", "test-2"], vec!["test-3"]];
        let s = grouped(&["test-1", "pred-1", "test-2", "pred-3"], &groups);
        assert_eq!((s.precision, s.recall, s.f1, s.mrr), (0.5, 0.5, 0.5, 0.5));
        assert!((s.map - (1.0 + 2.0 / 3.0) / 2.0 / 2.0).abs() < 1e-15, "{}", s.map);
        let ndcg = (1.0 + 1.0 / 4f64.log2()) / (1.0 + 1.0 / 3f64.log2() + 1.0 / 4f64.log2());
        assert!((s.ndcg - ndcg).abs() < 1e-15, "{}", s.ndcg);
    }

    #[test]
    fn repeats_divide_precision_and_gain_again_in_ndcg() {
        let groups = vec![vec!["a"]];
        let s = grouped(&["a", "a", "x"], &groups);
        assert_eq!(s.precision, 1.0 / 3.0, "one distinct hit over three retrieved");
        assert_eq!(s.recall, 1.0);
        assert_eq!(s.mrr, 1.0);
        assert_eq!(s.map, (1.0 + 1.0) / 2.0, "both ranks of a are hits of its group");
        assert_eq!(s.ndcg, (1.0 + 1.0 / 3f64.log2()) / 1.0, "the ideal has one 1: one id in the ground truth");
    }

    #[test]
    fn blank_is_what_python_s_strip_empties() {
        for blank in ["", " ", "\t\n", "\u{a0}", "\u{3000}", "\u{1f}", "\u{1c} \u{1d}"] {
            assert!(is_blank(blank), "{blank:?}");
        }
        for id in ["a", " a ", "\u{200b}", "\u{1b}", "\u{0}"] {
            assert!(!is_blank(id), "{id:?}: Python's strip keeps it");
        }
    }

    #[test]
    fn values_only_where_autorag_gives_them() {
        assert!(has_value(&[vec!["a", "b"], vec!["c"]]));
        assert!(has_value(&[vec![" a "]]));
        assert!(!has_value::<&str>(&[]));
        assert!(!has_value(&[vec!["a"], vec![]]));
        assert!(!has_value(&[vec!["a", " "]]));
        assert!(ranking_has_value(&["a", "a"]));
        assert!(!ranking_has_value::<&str>(&[]));
        assert!(!ranking_has_value(&["a", ""]));
        assert!(!ranking_has_value(&["a", " "]));
        assert!(!ranking_has_value(&["\u{1e}", "a"]));
    }

    #[test]
    fn nothing_retrieved_of_any_group() {
        let s = grouped(&["x", "y"], &[vec!["a"], vec!["b", "c"]]);
        assert_eq!(s, GroupedScores { precision: 0.0, recall: 0.0, f1: 0.0, mrr: 0.0, map: 0.0, ndcg: 0.0 });
    }
}
