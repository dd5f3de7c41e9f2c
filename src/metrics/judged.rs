//! The judged block of a value vector: an impression of a judged query scored against the
//! judgment list's grades instead of its engagements, and how much of what it showed is judged.
//!
//! The block follows the metrics' slots (and the interleaving sums'), so the accumulators keep
//! it per group and window like any other sum:
//!
//! | slot | value per judged impression |
//! |---|---|
//! | `first` | 1: the count, the denominator of every judged mean |
//! | `first + 1 + i` | the metric of the layout's key `i`, computed from the grades |
//! | `first + 1 + keys + c` | judged coverage at the layout's cutoff `c` |
//!
//! An impression whose query has no judgments adds nothing to the block, so the judged means
//! run over judged impressions only, and its count over the group's impressions is the share
//! of traffic the list covers.
//!
//! Judged coverage at k is the share of the shown results in the top k that have a judgment:
//! judged results among ranks 1..=min(k, n) over min(k, n) for a list of n results, 0 for an
//! empty list. It is `_rank_eval`'s "unrated documents" figure turned into a rate: low
//! coverage means the judged metrics count unknown results as not relevant (as trec_eval does).

use super::MetricLayout;

/// Where the judged block sits and how it is scored.
#[derive(Debug, Clone)]
pub struct JudgedBlock {
    /// The block's first slot (the count).
    pub first: usize,
    /// The metrics' layout with the judgments' relevance threshold and largest grade: the same
    /// keys as the engagement metrics, so each judged metric has the same name.
    pub layout: Box<MetricLayout>,
}

impl JudgedBlock {
    /// Slots of the block.
    pub fn len(&self) -> usize {
        1 + self.layout.len() + self.layout.cutoffs().len()
    }
    pub fn is_empty(&self) -> bool {
        false
    }
    /// The count's slot.
    pub fn count_slot(&self) -> usize {
        self.first
    }
    /// The slot of the layout's metric `key_index`.
    pub fn metric_slot(&self, key_index: usize) -> usize {
        self.first + 1 + key_index
    }
    /// The slot of the coverage at the layout's `cutoff_index`th cutoff.
    pub fn coverage_slot(&self, cutoff_index: usize) -> usize {
        self.first + 1 + self.layout.len() + cutoff_index
    }

    /// Every value of the block but the count, named as reports and series name it (the
    /// metrics' keys, then `coverage@k`), with its slot.
    pub fn named_slots(&self) -> Vec<(String, usize)> {
        let metrics = self.layout.keys().iter().enumerate().map(|(i, key)| (key.name(), self.metric_slot(i)));
        let coverage =
            self.layout.cutoffs().iter().enumerate().map(|(c, k)| (format!("coverage@{k}"), self.coverage_slot(c)));
        metrics.chain(coverage).collect()
    }

    /// Scores one judged impression into `out` (the block's [`Self::len`] values): `grades`
    /// per rank (0 for a result without a judgment, and for a repeated result after its first
    /// rank), `judged` per rank whether the result has a judgment, and `unretrieved` the grades
    /// of the query's judged documents that were not shown.
    pub fn evaluate(&self, grades: &[u8], judged: &[bool], unretrieved: &[u8], out: &mut [f64]) {
        let metrics = self.layout.len();
        out[0] = 1.0;
        self.layout.evaluate(grades, unretrieved, &mut out[1..1 + metrics]);
        for (value, &k) in out[1 + metrics..].iter_mut().zip(self.layout.cutoffs()) {
            *value = coverage(judged, k as usize);
        }
    }
}

/// Judged coverage at `k`: judged results in the top min(k, n) over min(k, n); 0 for no results.
pub fn coverage(judged: &[bool], k: usize) -> f64 {
    let shown = judged.len().min(k);
    if shown == 0 {
        return 0.0;
    }
    judged[..shown].iter().filter(|&&j| j).count() as f64 / shown as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::MetricKind;

    #[test]
    fn coverage_counts_judged_results_in_the_top_k_of_what_was_shown() {
        let judged = [true, false, true, true, false];
        assert_eq!(coverage(&judged, 1), 1.0);
        assert_eq!(coverage(&judged, 2), 0.5);
        assert_eq!(coverage(&judged, 5), 0.6);
        assert_eq!(coverage(&judged, 10), 0.6, "a short list: over what was shown");
        assert_eq!(coverage(&[], 10), 0.0);
    }

    #[test]
    fn the_block_is_the_count_the_metrics_from_grades_and_coverage() {
        let layout = MetricLayout::new(&[1, 3], 1, 3).with_judged(2, 3);
        let block = layout.judged().unwrap().clone();
        assert_eq!(block.first, layout.len(), "after the metrics (interleaving is off)");
        assert_eq!(block.len(), 1 + layout.len() + 2);
        assert_eq!(layout.slot_count(), layout.len() + block.len());
        let mut out = vec![f64::NAN; block.len()];
        // grades 1 (not relevant at threshold 2), 3, unjudged; one judged relevant doc unshown.
        block.evaluate(&[1, 3, 0], &[true, true, false], &[2], &mut out);
        assert_eq!(out[0], 1.0);
        let rr = block.layout.slot(MetricKind::ReciprocalRank, None).unwrap();
        assert_eq!(out[1 + rr], 0.5, "the first grade >= 2 is at rank 2");
        let recall = block.layout.slot(MetricKind::Recall, Some(3)).unwrap();
        assert_eq!(out[1 + recall], 0.5, "one of the two relevant judged documents");
        assert_eq!(out[block.coverage_slot(0) - block.first], 1.0);
        assert!((out[block.coverage_slot(1) - block.first] - 2.0 / 3.0).abs() < 1e-15);
    }
}
