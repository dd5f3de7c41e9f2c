//! An arriving impression scored against the judgment list: [`Judge`].
//!
//! Judged metrics need no engagement, so an impression is judged when the join accepts it
//! (not a duplicate, not late), against the list in use then, and its judged block is added
//! to its group's sums at once (see [`crate::metrics::judged`]); it is counted as an
//! impression when it is finalized, like any other.

use std::sync::Arc;

use crate::ids::{DocKey, QueryKey};
use crate::judgments::{judged_bits, JudgedQueryKey, JudgmentSource, Judgments};
use crate::metrics::judged::JudgedInput;
use crate::metrics::{JudgedBlock, MAX_GAIN};

/// Called with every judged impression's query key and judged block.
pub type JudgedObserver = Box<dyn FnMut(QueryKey, &[f64]) + Send>;

/// Scores impressions of judged queries. Its buffers are reused: judging allocates nothing
/// per impression once they have grown.
pub(super) struct Judge {
    /// Where the list comes from (reloaded by its watcher).
    source: Arc<JudgmentSource>,
    /// The list in use, and the source's generation it was taken at: the lock is taken only
    /// after a reload.
    current: (Arc<Judgments>, u64),
    /// Where the block sits and the layout its metrics are computed with.
    block: JudgedBlock,
    /// Per rank, the result's grade (0 when not judged, and for a repeat after its first rank).
    grades: Vec<u8>,
    /// Per rank, whether the result has a judgment.
    judged: Vec<bool>,
    /// Judged results as (the document key bits the list keeps, rank): sorted to find repeats
    /// and to take the shown ones out of the query's grades. Two ids whose keys differ only in
    /// the bits the list drops are one judged document to it, so they are a repeat here too:
    /// the query's count of that grade is taken down once (an id crafted to collide cannot
    /// make it negative).
    shown: Vec<(DocKey, usize)>,
    /// The positive grades of the query's judged documents that were not shown.
    unretrieved: Vec<u8>,
    /// Per rank, whether the result is a judged document at its first rank: the condensed
    /// list's members (filled only with the incomplete measures).
    first_judged: Vec<bool>,
    /// The condensed list: the grades of `first_judged` ranks, in rank order.
    condensed: Vec<u8>,
    /// The condensed list's metrics, before the incomplete measures take theirs.
    scratch: Vec<f64>,
    /// The block's values.
    values: Vec<f64>,
    /// See [`JudgedObserver`]; `None` but in tests.
    pub(super) observer: Option<JudgedObserver>,
}

impl Judge {
    pub(super) fn new(source: Arc<JudgmentSource>, block: JudgedBlock) -> Self {
        let current = (source.current(), source.generation());
        let values = vec![0.0; block.len()];
        let scratch = vec![0.0; block.incomplete.as_ref().map_or(0, |_| block.layout.len())];
        Judge {
            source,
            current,
            block,
            grades: Vec::new(),
            judged: Vec::new(),
            shown: Vec::new(),
            unretrieved: Vec::new(),
            first_judged: Vec::new(),
            condensed: Vec::new(),
            scratch,
            values,
            observer: None,
        }
    }

    /// The list's source, for the gauges.
    pub(super) fn source(&self) -> &Arc<JudgmentSource> {
        &self.source
    }

    /// The judged block of the impression `impression` of `query` showing `docs` (the block's
    /// first slot is `self.first()`), or `None` when its query has no judgments.
    pub(super) fn score(&mut self, impression: QueryKey, query: JudgedQueryKey, docs: &[DocKey]) -> Option<&[f64]> {
        let generation = self.source.generation();
        if generation != self.current.1 {
            self.current = (self.source.current(), generation);
        }
        let judgments = self.current.0.query(query)?;
        self.grades.clear();
        self.judged.clear();
        self.shown.clear();
        for (rank, &doc) in docs.iter().enumerate() {
            let grade = judgments.grade(doc);
            self.grades.push(grade.unwrap_or(0));
            self.judged.push(grade.is_some());
            if grade.is_some() {
                self.shown.push((judged_bits(doc), rank));
            }
        }
        // A repeated result gains at its first rank only, as with engagements; the query's
        // judged documents that were not shown still count in |R| and the ideal ranking.
        self.shown.sort_unstable();
        let mut not_shown = [0u32; MAX_GAIN as usize + 1];
        for grade in judgments.grades() {
            not_shown[usize::from(grade)] += 1;
        }
        let incomplete = self.block.incomplete.is_some();
        let threshold = usize::from(self.block.layout.relevance_threshold());
        // bpref's N: every judged non-relevant document of the query, shown or not.
        let judged_nonrelevant = if incomplete { not_shown[..threshold.min(not_shown.len())].iter().sum() } else { 0 };
        self.first_judged.clear();
        if incomplete {
            self.first_judged.extend_from_slice(&self.judged);
        }
        let mut previous = None;
        for &(doc, rank) in &self.shown {
            if previous == Some(doc) {
                self.grades[rank] = 0;
                if incomplete {
                    self.first_judged[rank] = false;
                }
            } else if let Some(count) = not_shown.get_mut(usize::from(self.grades[rank])) {
                *count = count.saturating_sub(1);
            }
            previous = Some(doc);
        }
        self.unretrieved.clear();
        for (grade, &count) in not_shown.iter().enumerate().skip(1) {
            self.unretrieved.extend(std::iter::repeat_n(grade as u8, count as usize));
        }
        self.condensed.clear();
        let members = self.grades.iter().zip(&self.first_judged).filter(|(_, &first)| first);
        self.condensed.extend(members.map(|(&grade, _)| grade));
        let input = JudgedInput {
            grades: &self.grades,
            judged: &self.judged,
            unretrieved: &self.unretrieved,
            condensed: &self.condensed,
            judged_nonrelevant,
        };
        self.block.evaluate(&input, &mut self.scratch, &mut self.values);
        if let Some(observe) = &mut self.observer {
            observe(impression, &self.values);
        }
        Some(&self.values)
    }

    /// The block's first slot.
    pub(super) fn first(&self) -> usize {
        self.block.first
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{doc_key, query_key};
    use crate::judgments::{judged_query_key, Format, LoadOptions};
    use crate::metrics::{MetricKind, MetricLayout};

    fn judge(file: &str) -> (Judge, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("qrels.txt");
        std::fs::write(&path, file).unwrap();
        let options = LoadOptions {
            format: Format::Qrels,
            normalize: false,
            max_grade: 3,
            max_rejected_share: 0.0,
            keep_query_names: false,
        };
        let block = MetricLayout::new(&[1, 3], 1, 3).with_judged(1, 3, true).judged().unwrap().clone();
        (Judge::new(JudgmentSource::load(&path, options).unwrap(), block), dir)
    }

    #[test]
    fn repeats_and_keys_that_collide_in_the_kept_bits_count_once() {
        let (mut judge, _dir) = judge("q 0 a 3\nq 0 b 2\nq 0 c 1\n");
        let layout = judge.block.layout.clone();
        let recall = 1 + layout.slot(MetricKind::Recall, Some(3)).unwrap();
        let rr = 1 + layout.slot(MetricKind::ReciprocalRank, None).unwrap();
        let query = judged_query_key("q", false, &mut String::new());
        let a = doc_key("a");
        // "a" twice, then an id whose key differs from a's only in the bits the list drops: one
        // judged document shown, two of three not shown.
        let values = judge.score(query_key("i1"), query, &[a, a, a ^ 0x5a, doc_key("zz")]).unwrap().to_vec();
        assert_eq!(judge.grades, [3, 0, 0, 0]);
        assert_eq!(judge.judged, [true, true, true, false]);
        assert_eq!(judge.unretrieved, [1, 2]);
        assert_eq!((values[rr], values[recall]), (1.0, 1.0 / 3.0));
        assert_eq!(judge.condensed, [3], "the condensed list holds a judged document once");
        let count = judge.block.incomplete_count_slot().unwrap() - judge.block.first;
        assert_eq!((values[count], values[count + 1]), (1.0, 1.0 / 3.0), "bpref: one of three relevant, first");
        assert!(judge.score(query_key("i2"), judged_query_key("other", false, &mut String::new()), &[a]).is_none());
    }

    #[test]
    fn the_condensed_list_and_bpref_count_the_querys_judged_nonrelevant_documents() {
        let (mut judge, _dir) = judge("q 0 a 0\nq 0 b 2\nq 0 c 0\nq 0 d 1\nq 0 e 0\n");
        let query = judged_query_key("q", false, &mut String::new());
        let docs = [doc_key("x"), doc_key("a"), doc_key("y"), doc_key("b"), doc_key("a")];
        let values = judge.score(query_key("i1"), query, &docs).unwrap().to_vec();
        assert_eq!(judge.condensed, [0, 2], "unjudged results and the repeat of a removed");
        let count = judge.block.incomplete_count_slot().unwrap() - judge.block.first;
        // R = 2 (b and the unshown d), N = 3 (a, c, e): b after one non-relevant, 1 - 1/2; d not shown.
        assert_eq!(values[count + 1], 0.25);
        // AP'@1 = 0 (rank 1 of the condensed list is a); AP'@3 = (1/2) / 2.
        assert_eq!((values[count + 2], values[count + 4]), (0.0, 0.25));
        assert!(judge.score(query_key("i2"), judged_query_key("other", false, &mut String::new()), &docs).is_none());
    }
}
