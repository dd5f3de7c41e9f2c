//! Per-impression ranking metrics: pure functions over a ranked list of gains, following
//! trec_eval's definitions exactly (measure names in brackets below). No I/O, no state.
//!
//! Inputs are *gains by rank* (`ranked[i]` is the gain of the result at rank `i + 1`) plus the
//! gains of relevant documents that were not shown (`unretrieved`). Online, every relevant
//! document was shown, so `unretrieved` is empty; the parameter exists so that the definitions
//! stay those of trec_eval, where judged documents may be missing from the run.
//!
//! * `rr` = 1 / rank of the first relevant result, 0 if none [recip_rank]
//! * `hit@k` = 1 if a relevant result is in the top k [success.k]
//! * `precision@k` = relevant in top k / k, short lists padded [P.k]
//! * `recall@k` = relevant in top k / |R|, 0 when R is empty [recall.k]
//! * `ap@k` = sum over relevant ranks i <= k of precision@i, / |R| [map_cut.k]
//! * `ndcg@k` = DCG@k / IDCG@k with gain g_i / log2(i + 1); `ndcg_exp@k` with 2^g_i - 1 [ndcg_cut.k]
//!
//! A result is relevant when its gain is at least the relevance threshold; nDCG uses every
//! positive gain whatever the threshold, as trec_eval does.

use crate::config::MAX_GAIN;

/// One metric of the per-impression vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetricKind {
    ReciprocalRank,
    /// 1 when the impression has no relevant result; its mean is the abandonment rate.
    Abandonment,
    Hit,
    Precision,
    Recall,
    AveragePrecision,
    Ndcg,
    NdcgExp,
}

impl MetricKind {
    /// The kinds that take a cutoff, in layout order.
    pub const AT_K: [MetricKind; 6] = [
        MetricKind::Hit,
        MetricKind::Precision,
        MetricKind::Recall,
        MetricKind::AveragePrecision,
        MetricKind::Ndcg,
        MetricKind::NdcgExp,
    ];

    /// The contract's key for a group mean of this metric (`mrr`, `map@k`, ...), without the `@k`.
    pub fn mean_key(self) -> &'static str {
        match self {
            MetricKind::ReciprocalRank => "mrr",
            MetricKind::Abandonment => "abandonment_rate",
            MetricKind::Hit => "hit_rate",
            MetricKind::Precision => "precision",
            MetricKind::Recall => "recall",
            MetricKind::AveragePrecision => "map",
            MetricKind::Ndcg => "ndcg",
            MetricKind::NdcgExp => "ndcg_exp",
        }
    }
}

/// A metric and its cutoff, if it takes one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MetricKey {
    pub kind: MetricKind,
    pub k: Option<u32>,
}

impl MetricKey {
    /// The contract's key for the group mean: `mrr`, `ndcg@10`, `abandonment_rate`, ...
    pub fn name(&self) -> String {
        match self.k {
            Some(k) => format!("{}@{k}", self.kind.mean_key()),
            None => self.kind.mean_key().to_string(),
        }
    }
}

/// The fixed order of the per-impression metric vector, derived once from the configuration.
/// Accumulators and exporters index by position in this layout, so a metric's value never
/// travels with its name on the hot path.
#[derive(Debug, Clone)]
pub struct MetricLayout {
    /// Cutoffs in ascending order: the evaluation pass emits each as the rank reaches it.
    cutoffs: Vec<u32>,
    relevance_threshold: u8,
    keys: Vec<MetricKey>,
}

const RR_SLOT: usize = 0;
const ABANDONMENT_SLOT: usize = 1;
const FIXED_SLOTS: usize = 2;

impl MetricLayout {
    pub fn new(cutoffs: &[u32], relevance_threshold: u8) -> MetricLayout {
        let mut sorted = cutoffs.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        let mut keys = vec![
            MetricKey { kind: MetricKind::ReciprocalRank, k: None },
            MetricKey { kind: MetricKind::Abandonment, k: None },
        ];
        for &k in &sorted {
            keys.extend(MetricKind::AT_K.iter().map(|&kind| MetricKey { kind, k: Some(k) }));
        }
        MetricLayout { cutoffs: sorted, relevance_threshold, keys }
    }

    pub fn keys(&self) -> &[MetricKey] {
        &self.keys
    }
    pub fn len(&self) -> usize {
        self.keys.len()
    }
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
    pub fn cutoffs(&self) -> &[u32] {
        &self.cutoffs
    }
    pub fn relevance_threshold(&self) -> u8 {
        self.relevance_threshold
    }

    /// Position of a metric in the vector, if configured.
    pub fn slot(&self, kind: MetricKind, k: Option<u32>) -> Option<usize> {
        self.keys.iter().position(|key| key.kind == kind && key.k == k)
    }

    /// Computes every configured metric of one impression into `out` (length [`Self::len`]).
    /// One pass over the ranked list serves every cutoff; the ideal ordering comes from a
    /// counting pass over gain levels instead of a sort.
    pub fn evaluate(&self, ranked: &[u8], unretrieved: &[u8], out: &mut [f64]) {
        assert_eq!(out.len(), self.keys.len(), "output vector does not match the layout");
        let threshold = self.relevance_threshold;
        let mut level_counts = [0u32; MAX_GAIN as usize + 1];
        let mut num_relevant = 0u32;
        for &g in ranked.iter().chain(unretrieved) {
            level_counts[usize::from(g.min(MAX_GAIN))] += 1;
            num_relevant += u32::from(g >= threshold);
        }
        let ideal = IdealDcg::new(&level_counts);

        out[ABANDONMENT_SLOT] = if num_relevant == 0 { 1.0 } else { 0.0 };
        let mut first_relevant_rank = None::<usize>;
        let mut relevant_so_far = 0u32;
        let mut precision_sum = 0.0f64;
        let mut dcg = 0.0f64;
        let mut dcg_exp = 0.0f64;
        let mut next_cutoff = 0usize;
        let mut slot = FIXED_SLOTS;
        let mut emit = |k: u32, relevant: u32, precision_sum: f64, dcg: f64, dcg_exp: f64, slot: &mut usize| {
            let (idcg, idcg_exp) = ideal.at(k);
            let rel = f64::from(relevant);
            let (recall, ap) = if num_relevant == 0 {
                (0.0, 0.0)
            } else {
                (rel / f64::from(num_relevant), precision_sum / f64::from(num_relevant))
            };
            let values = [
                if relevant > 0 { 1.0 } else { 0.0 },
                rel / f64::from(k),
                recall,
                ap,
                if idcg > 0.0 { dcg / idcg } else { 0.0 },
                if idcg_exp > 0.0 { dcg_exp / idcg_exp } else { 0.0 },
            ];
            out[*slot..*slot + values.len()].copy_from_slice(&values);
            *slot += values.len();
        };
        for (i, &g) in ranked.iter().enumerate() {
            if next_cutoff == self.cutoffs.len() && relevant_so_far > 0 {
                break; // every cutoff emitted and rr known: the rest of the list changes nothing
            }
            let rank = i + 1;
            if g >= threshold {
                relevant_so_far += 1;
                precision_sum += f64::from(relevant_so_far) / rank as f64;
                first_relevant_rank.get_or_insert(rank);
            }
            if g > 0 {
                let discount = discount(rank);
                dcg += f64::from(g) / discount;
                dcg_exp += exp_gain(g) / discount;
            }
            while next_cutoff < self.cutoffs.len() && self.cutoffs[next_cutoff] as usize == rank {
                emit(self.cutoffs[next_cutoff], relevant_so_far, precision_sum, dcg, dcg_exp, &mut slot);
                next_cutoff += 1;
            }
        }
        // Cutoffs beyond the list: the totals stand, precision keeps dividing by k (padding).
        for &k in &self.cutoffs[next_cutoff..] {
            emit(k, relevant_so_far, precision_sum, dcg, dcg_exp, &mut slot);
        }
        out[RR_SLOT] = first_relevant_rank.map_or(0.0, |r| 1.0 / r as f64);
    }
}

/// log2(rank + 1): the DCG discount of a rank counted from 1.
fn discount(rank: usize) -> f64 {
    ((rank + 1) as f64).log2()
}

/// 2^g - 1, the exponential gain.
fn exp_gain(g: u8) -> f64 {
    (2.0f64).powi(i32::from(g)) - 1.0
}

/// The ideal DCG at any cutoff, from the count of results at each gain level.
struct IdealDcg<'a> {
    level_counts: &'a [u32; MAX_GAIN as usize + 1],
}

impl<'a> IdealDcg<'a> {
    fn new(level_counts: &'a [u32; MAX_GAIN as usize + 1]) -> Self {
        IdealDcg { level_counts }
    }

    /// (linear IDCG@k, exponential IDCG@k), summed in rank order exactly as trec_eval does.
    fn at(&self, k: u32) -> (f64, f64) {
        let mut rank = 0usize;
        let (mut linear, mut exponential) = (0.0, 0.0);
        for gain in (1..=MAX_GAIN).rev() {
            for _ in 0..self.level_counts[usize::from(gain)] {
                if rank == k as usize {
                    return (linear, exponential);
                }
                rank += 1;
                let d = discount(rank);
                linear += f64::from(gain) / d;
                exponential += exp_gain(gain) / d;
            }
        }
        (linear, exponential)
    }
}

/// The straightforward definitions, one function per metric. They are the readable reference
/// that [`MetricLayout::evaluate`] is tested against, and the vocabulary of the unit tests.
pub mod reference {
    use super::{discount, exp_gain};

    fn relevant(g: u8, threshold: u8) -> bool {
        g >= threshold
    }

    fn num_relevant(ranked: &[u8], unretrieved: &[u8], threshold: u8) -> usize {
        ranked.iter().chain(unretrieved).filter(|&&g| relevant(g, threshold)).count()
    }

    pub fn reciprocal_rank(ranked: &[u8], threshold: u8) -> f64 {
        ranked.iter().position(|&g| relevant(g, threshold)).map_or(0.0, |i| 1.0 / (i + 1) as f64)
    }

    pub fn hit(ranked: &[u8], threshold: u8, k: usize) -> f64 {
        if ranked.iter().take(k).any(|&g| relevant(g, threshold)) {
            1.0
        } else {
            0.0
        }
    }

    pub fn precision(ranked: &[u8], threshold: u8, k: usize) -> f64 {
        ranked.iter().take(k).filter(|&&g| relevant(g, threshold)).count() as f64 / k as f64
    }

    pub fn recall(ranked: &[u8], unretrieved: &[u8], threshold: u8, k: usize) -> f64 {
        let r = num_relevant(ranked, unretrieved, threshold);
        if r == 0 {
            return 0.0;
        }
        ranked.iter().take(k).filter(|&&g| relevant(g, threshold)).count() as f64 / r as f64
    }

    pub fn average_precision(ranked: &[u8], unretrieved: &[u8], threshold: u8, k: usize) -> f64 {
        let r = num_relevant(ranked, unretrieved, threshold);
        if r == 0 {
            return 0.0;
        }
        let mut hits = 0usize;
        let mut sum = 0.0;
        for (i, &g) in ranked.iter().take(k).enumerate() {
            if relevant(g, threshold) {
                hits += 1;
                sum += hits as f64 / (i + 1) as f64;
            }
        }
        sum / r as f64
    }

    /// nDCG@k; `exponential` selects 2^g - 1 over g.
    pub fn ndcg(ranked: &[u8], unretrieved: &[u8], k: usize, exponential: bool) -> f64 {
        let gain = |g: u8| {
            if exponential {
                exp_gain(g)
            } else {
                f64::from(g)
            }
        };
        let dcg: f64 =
            ranked.iter().take(k).enumerate().filter(|(_, &g)| g > 0).map(|(i, &g)| gain(g) / discount(i + 1)).sum();
        let mut ideal: Vec<u8> = ranked.iter().chain(unretrieved).copied().filter(|&g| g > 0).collect();
        ideal.sort_unstable_by(|a, b| b.cmp(a));
        let idcg: f64 = ideal.iter().take(k).enumerate().map(|(i, &g)| gain(g) / discount(i + 1)).sum();
        if idcg > 0.0 {
            dcg / idcg
        } else {
            0.0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::reference::*;
    use super::*;

    const EPS: f64 = 1e-12;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < EPS
    }

    fn eval(layout: &MetricLayout, ranked: &[u8], unretrieved: &[u8]) -> Vec<f64> {
        let mut out = vec![f64::NAN; layout.len()];
        layout.evaluate(ranked, unretrieved, &mut out);
        out
    }

    fn get(layout: &MetricLayout, values: &[f64], kind: MetricKind, k: Option<u32>) -> f64 {
        values[layout.slot(kind, k).unwrap()]
    }

    #[test]
    fn mrr_of_first_clicks_at_ranks_three_two_one_is_eleven_eighteenths() {
        let rrs = [reciprocal_rank(&[0, 0, 1, 0], 1), reciprocal_rank(&[0, 1, 0], 1), reciprocal_rank(&[1, 1, 1], 1)];
        assert!(close(rrs.iter().sum::<f64>() / 3.0, 11.0 / 18.0));
    }

    #[test]
    fn average_precision_of_relevance_00110_is_five_twelfths() {
        let layout = MetricLayout::new(&[5], 1);
        let v = eval(&layout, &[0, 0, 1, 1, 0], &[]);
        assert!(close(get(&layout, &v, MetricKind::AveragePrecision, Some(5)), 5.0 / 12.0));
        assert!(close(average_precision(&[0, 0, 1, 1, 0], &[], 1, 5), (1.0 / 3.0 + 2.0 / 4.0) / 2.0));
    }

    #[test]
    fn graded_ndcg_with_an_unshown_relevant_document() {
        // gains [1,0,3,3,0] shown, one more relevant document of gain 3 not shown.
        let layout = MetricLayout::new(&[5], 1);
        let v = eval(&layout, &[1, 0, 3, 3, 0], &[3]);
        let dcg = 1.0 + 3.0 / 4f64.log2() + 3.0 / 5f64.log2();
        let idcg = 3.0 + 3.0 / 3f64.log2() + 3.0 / 4f64.log2() + 1.0 / 5f64.log2();
        assert!((dcg - 3.792).abs() < 1e-3 && (idcg - 6.823).abs() < 1e-3);
        let ndcg = get(&layout, &v, MetricKind::Ndcg, Some(5));
        assert!(close(ndcg, dcg / idcg));
        assert!((ndcg - 0.5557).abs() < 1e-4, "{ndcg}");
    }

    #[test]
    fn binary_ndcg_with_three_relevant_documents() {
        // relevance [1,0,1,0] with three relevant documents: 1.5 / 2.1309.
        let v = ndcg(&[1, 0, 1, 0], &[1], 4, false);
        assert!(close(v, 1.5 / (1.0 + 1.0 / 3f64.log2() + 0.5)));
        assert!((v - 0.7039).abs() < 1e-4, "{v}");
        assert!(close(ndcg(&[1, 0, 1, 0], &[1], 4, true), v), "binary gains: exp and linear agree");
    }

    #[test]
    fn empty_relevant_set_gives_zero_everywhere_and_abandonment_one() {
        let layout = MetricLayout::new(&[1, 3, 10], 1);
        for ranked in [&[][..], &[0][..], &[0, 0, 0, 0][..]] {
            let v = eval(&layout, ranked, &[]);
            for (key, value) in layout.keys().iter().zip(&v) {
                let expected = if key.kind == MetricKind::Abandonment { 1.0 } else { 0.0 };
                assert_eq!(*value, expected, "{} on {ranked:?}", key.name());
            }
        }
    }

    #[test]
    fn cutoff_larger_than_the_list_pads_precision_only() {
        let layout = MetricLayout::new(&[2, 10], 1);
        let v = eval(&layout, &[0, 1], &[]);
        assert!(close(get(&layout, &v, MetricKind::Precision, Some(10)), 0.1));
        assert!(close(get(&layout, &v, MetricKind::Recall, Some(10)), 1.0));
        assert!(close(get(&layout, &v, MetricKind::AveragePrecision, Some(10)), 0.5));
        assert!(close(get(&layout, &v, MetricKind::Ndcg, Some(10)), 1.0 / 3f64.log2()));
        assert_eq!(get(&layout, &v, MetricKind::Hit, Some(10)), 1.0);
        assert!(close(get(&layout, &v, MetricKind::Precision, Some(2)), 0.5));
    }

    #[test]
    fn list_of_one() {
        let layout = MetricLayout::new(&[1, 5], 1);
        let v = eval(&layout, &[2], &[]);
        assert_eq!(get(&layout, &v, MetricKind::ReciprocalRank, None), 1.0);
        assert_eq!(get(&layout, &v, MetricKind::Precision, Some(1)), 1.0);
        assert!(close(get(&layout, &v, MetricKind::Precision, Some(5)), 0.2));
        assert_eq!(get(&layout, &v, MetricKind::Ndcg, Some(5)), 1.0);
        assert_eq!(get(&layout, &v, MetricKind::NdcgExp, Some(5)), 1.0);
        assert_eq!(get(&layout, &v, MetricKind::Abandonment, None), 0.0);
    }

    #[test]
    fn threshold_two_ignores_clicks_for_binary_metrics_but_not_for_ndcg() {
        let layout = MetricLayout::new(&[3], 2);
        let v = eval(&layout, &[1, 3, 0], &[]);
        assert!(close(get(&layout, &v, MetricKind::ReciprocalRank, None), 0.5));
        assert!(close(get(&layout, &v, MetricKind::Precision, Some(3)), 1.0 / 3.0));
        let dcg = 1.0 + 3.0 / 3f64.log2();
        let idcg = 3.0 + 1.0 / 3f64.log2();
        assert!(close(get(&layout, &v, MetricKind::Ndcg, Some(3)), dcg / idcg));
    }

    #[test]
    fn one_pass_evaluation_matches_the_reference_definitions() {
        // A deterministic sweep of lists; property tests over random inputs live in tests/.
        let layout = MetricLayout::new(&[1, 2, 3, 5, 10, 20], 2);
        let mut seed = 0x2545F4914F6CDD1Du64;
        for case in 0..2000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let len = (seed % 25) as usize;
            let ranked: Vec<u8> = (0..len).map(|i| ((seed >> (i % 60)) % 4) as u8).collect();
            let unretrieved: Vec<u8> = (0..(seed % 3)).map(|i| (i % 4) as u8).collect();
            let v = eval(&layout, &ranked, &unretrieved);
            let t = 2;
            assert!(close(v[0], reciprocal_rank(&ranked, t)), "case {case}");
            for &k in layout.cutoffs() {
                let ku = k as usize;
                let g = |kind| get(&layout, &v, kind, Some(k));
                assert!(close(g(MetricKind::Hit), hit(&ranked, t, ku)), "hit case {case}");
                assert!(close(g(MetricKind::Precision), precision(&ranked, t, ku)), "P case {case}");
                assert!(close(g(MetricKind::Recall), recall(&ranked, &unretrieved, t, ku)), "R case {case}");
                assert!(
                    close(g(MetricKind::AveragePrecision), average_precision(&ranked, &unretrieved, t, ku)),
                    "AP {case}"
                );
                assert!(close(g(MetricKind::Ndcg), ndcg(&ranked, &unretrieved, ku, false)), "nDCG {case}");
                assert!(close(g(MetricKind::NdcgExp), ndcg(&ranked, &unretrieved, ku, true)), "nDCGexp {case}");
            }
        }
    }

    #[test]
    fn keys_follow_the_contract() {
        let layout = MetricLayout::new(&[10, 1], 1);
        let names: Vec<String> = layout.keys().iter().map(|k| k.name()).collect();
        assert_eq!(
            names,
            [
                "mrr",
                "abandonment_rate",
                "hit_rate@1",
                "precision@1",
                "recall@1",
                "map@1",
                "ndcg@1",
                "ndcg_exp@1",
                "hit_rate@10",
                "precision@10",
                "recall@10",
                "map@10",
                "ndcg@10",
                "ndcg_exp@10"
            ]
        );
    }
}
