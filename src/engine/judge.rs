//! An arriving impression scored against the judgment list: [`Judge`].
//!
//! Judged metrics need no engagement, so an impression is judged when the join accepts it
//! (not a duplicate, not late), against the list in use then, and its judged block is added
//! to its group's sums at once (see [`crate::metrics::judged`]); it is counted as an
//! impression when it is finalized, like any other.

use std::sync::Arc;

use crate::ids::{DocKey, QueryKey};
use crate::judgments::{JudgedQueryKey, JudgmentSource, Judgments};
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
    /// Judged results as (document, rank): sorted to find repeats and to take the shown
    /// ones out of the query's grades.
    shown: Vec<(DocKey, usize)>,
    /// The positive grades of the query's judged documents that were not shown.
    unretrieved: Vec<u8>,
    /// The block's values.
    values: Vec<f64>,
    /// See [`JudgedObserver`]; `None` but in tests.
    pub(super) observer: Option<JudgedObserver>,
}

impl Judge {
    pub(super) fn new(source: Arc<JudgmentSource>, block: JudgedBlock) -> Self {
        let current = (source.current(), source.generation());
        let values = vec![0.0; block.len()];
        Judge {
            source,
            current,
            block,
            grades: Vec::new(),
            judged: Vec::new(),
            shown: Vec::new(),
            unretrieved: Vec::new(),
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
                self.shown.push((doc, rank));
            }
        }
        // A repeated result gains at its first rank only, as with engagements; the query's
        // judged documents that were not shown still count in |R| and the ideal ranking.
        self.shown.sort_unstable();
        let mut not_shown = [0u32; MAX_GAIN as usize + 1];
        for grade in judgments.grades() {
            not_shown[usize::from(grade)] += 1;
        }
        let mut previous = None;
        for &(doc, rank) in &self.shown {
            if previous == Some(doc) {
                self.grades[rank] = 0;
            } else {
                not_shown[usize::from(self.grades[rank])] -= 1;
            }
            previous = Some(doc);
        }
        self.unretrieved.clear();
        for (grade, &count) in not_shown.iter().enumerate().skip(1) {
            self.unretrieved.extend(std::iter::repeat_n(grade as u8, count as usize));
        }
        self.block.evaluate(&self.grades, &self.judged, &self.unretrieved, &mut self.values);
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
