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
//!
//! With `judgments.incomplete_measures` (the default) the measures built for incomplete
//! judgments follow, as a block of their own with its own count:
//!
//! | slot | value per judged impression |
//! |---|---|
//! | `incomplete` | 1: the count of these measures' means |
//! | `incomplete + 1` | [`bpref`] |
//! | `incomplete + 2 + 2c` | `map_condensed@k`: AP@k of the condensed list (Sakai's AP') |
//! | `incomplete + 3 + 2c` | `ndcg_condensed@k`: nDCG@k of the condensed list (Sakai's nDCG') |
//!
//! for the layout's cutoff `c` = k. The plain judged measures count an unjudged result as not
//! relevant, so on live traffic, where rankers show documents nobody judged, they fall as
//! coverage falls whatever the ranking's quality. bpref (Buckley & Voorhees, "Retrieval
//! Evaluation with Incomplete Information", SIGIR 2004) compares judged relevant documents
//! with judged non-relevant ones only; the condensed-list measures (Sakai, "Alternatives to
//! Bpref", SIGIR 2007) remove the unjudged results from the ranking and score what is left
//! as the plain measures do. The block has its own count so that state written without it
//! (an older version) is widened with zeros and these means run over the impressions scored
//! since, not over impressions that never had them.

use super::{MetricKind, MetricLayout};

/// Where the judged block sits and how it is scored.
#[derive(Debug, Clone)]
pub struct JudgedBlock {
    /// The block's first slot (the count).
    pub first: usize,
    /// The metrics' layout with the judgments' relevance threshold and largest grade: the same
    /// keys as the engagement metrics, so each judged metric has the same name.
    pub layout: Box<MetricLayout>,
    /// The measures for incomplete judgments after the block's plain part, when configured
    /// (`judgments.incomplete_measures`).
    pub incomplete: Option<IncompleteSlots>,
}

/// Where the condensed-list measures read the plain layout's values: the condensed list is
/// scored by the same [`MetricLayout::evaluate`] as the full one, into a scratch vector.
#[derive(Debug, Clone)]
pub struct IncompleteSlots {
    /// Per cutoff (ascending), the layout's positions of AP@k and nDCG@k, found once here so
    /// that an impression does not search the layout's keys.
    pub condensed: Vec<(usize, usize)>,
}

impl IncompleteSlots {
    /// The positions for `layout`'s cutoffs.
    pub fn new(layout: &MetricLayout) -> Self {
        let position = |kind, k| layout.slot(kind, Some(k)).expect("every cutoff has AP and nDCG");
        let condensed = layout
            .cutoffs()
            .iter()
            .map(|&k| (position(MetricKind::AveragePrecision, k), position(MetricKind::Ndcg, k)))
            .collect();
        IncompleteSlots { condensed }
    }

    /// Slots: the count, bpref, then AP' and nDCG' per cutoff.
    pub fn len(&self) -> usize {
        2 + 2 * self.condensed.len()
    }
    pub fn is_empty(&self) -> bool {
        false
    }
}

/// One judged impression as [`JudgedBlock::evaluate`] scores it.
#[derive(Debug, Clone, Copy)]
pub struct JudgedInput<'a> {
    /// Per rank, the result's grade: 0 for a result without a judgment, and for a repeated
    /// result after its first rank (it gains once, as with engagements).
    pub grades: &'a [u8],
    /// Per rank, whether the result has a judgment (a repeat of a judged result too): what
    /// coverage counts.
    pub judged: &'a [bool],
    /// The positive grades of the query's judged documents that were not shown: they count in
    /// |R| and the ideal ranking.
    pub unretrieved: &'a [u8],
    /// The condensed list: the grades of the judged results in rank order, each document at
    /// its first rank only (a repeat is not a document the judgments know twice; trec_eval
    /// refuses a run that ranks one twice). Read only with the incomplete measures.
    pub condensed: &'a [u8],
    /// The query's judged documents with a grade below the relevance threshold, shown or
    /// not: bpref's N. Read only with the incomplete measures.
    pub judged_nonrelevant: u32,
}

impl JudgedBlock {
    /// Slots of the block, the incomplete measures' included.
    pub fn len(&self) -> usize {
        self.plain_len() + self.incomplete.as_ref().map_or(0, IncompleteSlots::len)
    }
    /// Slots of the plain part: the count, the metrics and coverage.
    pub fn plain_len(&self) -> usize {
        1 + self.layout.len() + self.layout.cutoffs().len()
    }
    /// The incomplete measures' count slot, when they are configured.
    pub fn incomplete_count_slot(&self) -> Option<usize> {
        self.incomplete.as_ref().map(|_| self.first + self.plain_len())
    }
    /// The slot holding the count that the mean of `slot` (a slot of the block) is over: the
    /// incomplete measures have their own (see the module's documentation).
    pub fn count_slot_of(&self, slot: usize) -> usize {
        match self.incomplete_count_slot() {
            Some(count) if slot >= count => count,
            _ => self.count_slot(),
        }
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

    /// Every value of the block but the counts, named as reports and series name it (the
    /// metrics' keys, then `coverage@k`, then `bpref`, `map_condensed@k`, `ndcg_condensed@k`
    /// when configured), with its slot. [`Self::count_slot_of`] tells each one's count.
    pub fn named_slots(&self) -> Vec<(String, usize)> {
        let metrics = self.layout.keys().iter().enumerate().map(|(i, key)| (key.name(), self.metric_slot(i)));
        let coverage =
            self.layout.cutoffs().iter().enumerate().map(|(c, k)| (format!("coverage@{k}"), self.coverage_slot(c)));
        let mut named: Vec<(String, usize)> = metrics.chain(coverage).collect();
        if let Some(count) = self.incomplete_count_slot() {
            named.push(("bpref".to_string(), count + 1));
            for (c, k) in self.layout.cutoffs().iter().enumerate() {
                named.push((format!("map_condensed@{k}"), count + 2 + 2 * c));
                named.push((format!("ndcg_condensed@{k}"), count + 3 + 2 * c));
            }
        }
        named
    }

    /// Scores one judged impression into `out` (the block's [`Self::len`] values). `scratch`
    /// (the layout's [`MetricLayout::len`] values) holds the condensed list's metrics while
    /// the incomplete measures are read from them; unused without them.
    pub fn evaluate(&self, input: &JudgedInput, scratch: &mut [f64], out: &mut [f64]) {
        let metrics = self.layout.len();
        out[0] = 1.0;
        self.layout.evaluate(input.grades, input.unretrieved, &mut out[1..1 + metrics]);
        let plain = self.plain_len();
        for (value, &k) in out[1 + metrics..plain].iter_mut().zip(self.layout.cutoffs()) {
            *value = coverage(input.judged, k as usize);
        }
        let Some(incomplete) = &self.incomplete else { return };
        let threshold = self.layout.relevance_threshold();
        let (plain_values, out) = out.split_at_mut(plain);
        out[0] = 1.0;
        let relevant = relevant_count(input.condensed, input.unretrieved, threshold);
        out[1] = bpref(input.condensed, threshold, relevant, input.judged_nonrelevant);
        // Sakai's condensed list scored exactly as the plain measures score the full one: the
        // same |R| and ideal ranking (every judged document), the same cutoffs, now of the
        // condensed list's ranks. A list whose results are all judged, each once, is its own
        // condensed list: its plain values serve, without a second pass.
        let condensed: &[f64] = if input.condensed.len() == input.grades.len() {
            &plain_values[1..1 + metrics]
        } else {
            self.layout.evaluate(input.condensed, input.unretrieved, scratch);
            scratch
        };
        for (pair, &(ap, ndcg)) in out[2..].chunks_exact_mut(2).zip(&incomplete.condensed) {
            pair[0] = condensed[ap];
            pair[1] = condensed[ndcg];
        }
    }
}

/// |R|: the judged documents of the query with a grade of at least `threshold`, those in
/// `condensed` (shown) and those in `unretrieved` (not shown).
pub fn relevant_count(condensed: &[u8], unretrieved: &[u8], threshold: u8) -> u32 {
    condensed.iter().chain(unretrieved).filter(|&&g| g >= threshold).count() as u32
}

/// bpref, exactly as trec_eval computes it (`m_bpref.c`, trec_eval 9.0.8 and 10.0; Buckley &
/// Voorhees, "Retrieval Evaluation with Incomplete Information", SIGIR 2004):
///
/// bpref = 1/R x sum over the judged relevant results r of
/// (1 - min(n_r, R) / min(N, R)),
///
/// with n_r the judged non-relevant results ranked above r, R the query's judged relevant
/// documents (`relevant`, shown or not) and N its judged non-relevant ones
/// (`judged_nonrelevant`, grade below `threshold`, grade 0 included). `condensed` is the
/// grades of the judged results in rank order: unjudged results are skipped, as trec_eval
/// skips documents outside the pool. trec_eval's edge cases: a relevant result with no
/// judged non-relevant one above it adds 1 (min(N, R) may be 0 then), and R = 0 gives 0.
/// A negative qrels grade, which trec_eval's bpref skips as "pooled but unjudged", reaches
/// this function as 0 (judged, not relevant): how judgment lists read it.
pub fn bpref(condensed: &[u8], threshold: u8, relevant: u32, judged_nonrelevant: u32) -> f64 {
    if relevant == 0 {
        return 0.0;
    }
    let (mut nonrelevant_above, mut sum) = (0u32, 0.0);
    for &g in condensed {
        if g < threshold {
            nonrelevant_above += 1;
        } else if nonrelevant_above > 0 {
            // N is at least the judged non-relevant results shown: a count passed too low
            // cannot divide by 0.
            let n = judged_nonrelevant.max(nonrelevant_above);
            sum += 1.0 - f64::from(nonrelevant_above.min(relevant)) / f64::from(n.min(relevant));
        } else {
            sum += 1.0;
        }
    }
    sum / f64::from(relevant)
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
    use crate::metrics::reference;

    fn input<'a>(grades: &'a [u8], judged: &'a [bool], unretrieved: &'a [u8], condensed: &'a [u8]) -> JudgedInput<'a> {
        JudgedInput { grades, judged, unretrieved, condensed, judged_nonrelevant: 0 }
    }

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
        let layout = MetricLayout::new(&[1, 3], 1, 3).with_judged(2, 3, false);
        let block = layout.judged().unwrap().clone();
        assert_eq!(block.first, layout.len(), "after the metrics (interleaving is off)");
        assert_eq!(block.len(), 1 + layout.len() + 2);
        assert_eq!(layout.slot_count(), layout.len() + block.len());
        assert_eq!(block.named_slots().len(), layout.len() + 2);
        let mut out = vec![f64::NAN; block.len()];
        // grades 1 (not relevant at threshold 2), 3, unjudged; one judged relevant doc unshown.
        block.evaluate(&input(&[1, 3, 0], &[true, true, false], &[2], &[1, 3]), &mut [], &mut out);
        assert_eq!(out[0], 1.0);
        let rr = block.layout.slot(MetricKind::ReciprocalRank, None).unwrap();
        assert_eq!(out[1 + rr], 0.5, "the first grade >= 2 is at rank 2");
        let recall = block.layout.slot(MetricKind::Recall, Some(3)).unwrap();
        assert_eq!(out[1 + recall], 0.5, "one of the two relevant judged documents");
        assert_eq!(out[block.coverage_slot(0) - block.first], 1.0);
        assert!((out[block.coverage_slot(1) - block.first] - 2.0 / 3.0).abs() < 1e-15);
    }

    #[test]
    fn bpref_follows_trec_eval() {
        // R = 2, N = 3: the relevant result at rank 2 has one judged non-relevant result above
        // it, 1 - 1/min(3, 2); the one at rank 4 has two, 1 - 2/2.
        assert_eq!(bpref(&[0, 2, 1, 3], 2, 2, 3), (0.5 + 0.0) / 2.0);
        // A third relevant document not shown: R = 3, 1 - 1/3 and 1 - 2/3, over 3.
        assert!((bpref(&[0, 2, 1, 3], 2, 3, 3) - (2.0 / 3.0 + 1.0 / 3.0) / 3.0).abs() < 1e-15);
        // Nothing judged non-relevant above: 1 each.
        assert_eq!(bpref(&[3, 2, 0], 1, 2, 1), 1.0);
        // n_r capped at R: three non-relevant above with R = 2 count as two.
        assert_eq!(bpref(&[0, 0, 0, 1], 1, 2, 5), 0.5 * (1.0 - 2.0 / 2.0));
        // min(N, R) with N < R: one non-relevant above, N = 1, R = 3: 1 - 1/1 = 0.
        assert_eq!(bpref(&[1, 0, 1, 1], 1, 3, 1), (1.0 + 0.0 + 0.0) / 3.0);
        // No relevant judged document: 0, as trec_eval leaves the sum undivided (it is 0).
        assert_eq!(bpref(&[0, 0], 1, 0, 2), 0.0);
        assert_eq!(bpref(&[], 1, 4, 2), 0.0, "nothing judged shown");
        // A count of N below the non-relevant results shown cannot divide by zero.
        assert_eq!(bpref(&[0, 1], 1, 1, 0), 0.0);
    }

    #[test]
    fn bpref_is_the_share_of_preferences_kept_when_n_is_at_least_r() {
        // With N >= R and every result judged, bpref is the share of (relevant, top-R
        // non-relevant) pairs ranked in the preferred order, counting from Buckley & Voorhees'
        // definition directly.
        let mut seed = 0x9E3779B97F4A7C15u64;
        for case in 0..500 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let len = 1 + (seed % 15) as usize;
            let ranked: Vec<u8> = (0..len).map(|i| ((seed >> (i % 60)) & 1) as u8).collect();
            let r = ranked.iter().filter(|&&g| g == 1).count() as u32;
            let shown_nonrelevant = ranked.len() as u32 - r;
            let n = shown_nonrelevant.max(r) + (seed % 3) as u32;
            // The first R judged non-relevant documents by rank, those not shown after every
            // shown one; a pair is kept when the relevant result is ranked above its partner.
            let mut partners: Vec<usize> = (0..len).filter(|&i| ranked[i] == 0).collect();
            partners.extend(std::iter::repeat_n(usize::MAX, (n - shown_nonrelevant) as usize));
            partners.truncate(r as usize);
            let kept: usize =
                (0..len).filter(|&i| ranked[i] == 1).map(|i| partners.iter().filter(|&&j| j > i).count()).sum();
            let want = if r == 0 { 0.0 } else { kept as f64 / f64::from(r * r) };
            assert!((bpref(&ranked, 1, r, n) - want).abs() < 1e-12, "case {case}: {ranked:?}");
        }
    }

    #[test]
    fn the_incomplete_measures_are_bpref_and_the_plain_measures_of_the_condensed_list() {
        let layout = MetricLayout::new(&[1, 3], 1, 3).with_judged(2, 3, true);
        let block = layout.judged().unwrap().clone();
        assert_eq!(block.len(), block.plain_len() + 2 + 2 * 2);
        assert_eq!(layout.slot_count(), layout.len() + block.len());
        let count = block.incomplete_count_slot().unwrap();
        assert_eq!(count, block.first + block.plain_len());
        let names: Vec<(String, usize)> = block.named_slots().into_iter().skip(block.plain_len() - 1).collect();
        let want = ["bpref", "map_condensed@1", "ndcg_condensed@1", "map_condensed@3", "ndcg_condensed@3"];
        assert_eq!(names.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), want);
        assert_eq!(names.iter().map(|(_, s)| *s).collect::<Vec<_>>(), (count + 1..count + 6).collect::<Vec<_>>());
        assert_eq!(block.count_slot_of(count + 1), count);
        assert_eq!(block.count_slot_of(block.coverage_slot(1)), block.count_slot());

        // Shown: unjudged, grade 3, unjudged, grade 0, grade 2, unjudged; one relevant (grade 2)
        // and two non-relevant (grade 1 and 0) judged documents not shown.
        let grades = [0, 3, 0, 0, 2, 0];
        let judged = [false, true, false, true, true, false];
        let condensed = [3, 0, 2];
        let unretrieved = [2, 1];
        let input = JudgedInput { judged_nonrelevant: 3, ..input(&grades, &judged, &unretrieved, &condensed) };
        let mut scratch = vec![f64::NAN; block.layout.len()];
        let mut out = vec![f64::NAN; block.len()];
        block.evaluate(&input, &mut scratch, &mut out);
        let at = |slot: usize| out[slot - block.first];
        assert_eq!(at(count), 1.0);
        // R = 3, N = 3: rank 1 relevant (1), rank 3 after one non-relevant (1 - 1/3).
        assert!((at(count + 1) - (1.0 + 2.0 / 3.0) / 3.0).abs() < 1e-15);
        let (t, all) = (2, [2u8, 1]);
        for (c, k) in [(0usize, 1usize), (1, 3)] {
            let ap = reference::average_precision(&condensed, &all, t, k);
            let ndcg = reference::ndcg(&condensed, &all, k, false);
            assert!((at(count + 2 + 2 * c) - ap).abs() < 1e-15, "AP'@{k}");
            assert!((at(count + 3 + 2 * c) - ndcg).abs() < 1e-15, "nDCG'@{k}");
        }
        // Condensing moves the judged relevant result from rank 5 to rank 3: AP'@3 counts it,
        // the plain AP@3 does not.
        let plain_ap3 = out[1 + block.layout.slot(MetricKind::AveragePrecision, Some(3)).unwrap()];
        assert!((plain_ap3 - 0.5 / 3.0).abs() < 1e-15);
        assert!((at(count + 4) - (1.0 + 2.0 / 3.0) / 3.0).abs() < 1e-15);
        // A list with every result judged (taken without the second pass): the condensed
        // measures are the plain ones, and still the definitions' values.
        let input = JudgedInput { judged_nonrelevant: 1, ..self::input(&[3, 0, 2], &[true; 3], &[2], &[3, 0, 2]) };
        scratch.fill(f64::NAN);
        block.evaluate(&input, &mut scratch, &mut out);
        for k in [1, 3] {
            let plain = |kind| out[1 + block.layout.slot(kind, Some(k)).unwrap()];
            let c = usize::from(k == 3);
            let (ap, ndcg) = (out[count - block.first + 2 + 2 * c], out[count - block.first + 3 + 2 * c]);
            assert_eq!((ap, ndcg), (plain(MetricKind::AveragePrecision), plain(MetricKind::Ndcg)));
            assert!((ap - reference::average_precision(&[3, 0, 2], &[2], 2, k as usize)).abs() < 1e-15);
            assert!((ndcg - reference::ndcg(&[3, 0, 2], &[2], k as usize, false)).abs() < 1e-15);
        }
    }

    #[test]
    fn state_without_the_incomplete_measures_widens_and_the_other_way_does_not() {
        let plain = MetricLayout::new(&[1, 3], 1, 3).with_interleaving(2, false, 0).with_judged(1, 3, false);
        let full = MetricLayout::new(&[1, 3], 1, 3).with_interleaving(2, false, 0).with_judged(1, 3, true);
        let none = MetricLayout::new(&[1, 3], 1, 3).with_interleaving(2, false, 0);
        assert_eq!(full.widens_from(&plain.slot_names()), Some(plain.slot_count()));
        assert_eq!(full.widens_from(&none.slot_names()), Some(none.slot_count()));
        assert_eq!(plain.widens_from(&full.slot_names()), None, "the measures are not dropped");
        assert_eq!(full.widens_from(&full.slot_names()), None, "nothing to widen");
        assert_eq!(*full.block_ends().last().unwrap(), full.slot_count());
        let other = MetricLayout::new(&[1, 3], 1, 3).with_interleaving(2, false, 0).with_judged(2, 3, false);
        assert_eq!(full.widens_from(&other.slot_names()), None, "another judged relevance");
    }
}
