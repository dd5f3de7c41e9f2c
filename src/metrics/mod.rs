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
//! * `f1@k` = 2 P@k R@k / (P@k + R@k), 0 when both are 0
//! * `r_precision` = relevant in the top |R| / |R| [Rprec]
//! * `iprec@r` for r = 0.0, 0.1, ..., 1.0 = the largest precision@i over ranks i with
//!   recall@i >= r, 0 when R is empty [iprec_at_recall_r]: the 11-point curve. Where "recall
//!   reaches r" lies is where trec_eval's versions differ ([`TrecEval`]); 9.x's is the default.
//! * `err@k` = sum over i <= k of p_i / i x prod over j < i of (1 - p_j), with
//!   p_i = (2^g_i - 1) / 2^g_max and g_max the largest configured gain (expected reciprocal rank)
//!
//! A result is relevant when its gain is at least the relevance threshold; nDCG uses every
//! positive gain whatever the threshold, as trec_eval does.

pub mod grouped;
pub mod judged;

use crate::interleaving::{CreditRule, Slots};
pub use judged::JudgedBlock;

/// The largest gain the metric math handles, and so the largest action gain the configuration
/// accepts. It sizes the per-impression count of results at each gain level (an array of
/// `MAX_GAIN + 1` counters on the stack, so the ideal DCG costs no allocation), and `2^g - 1`
/// (exponential nDCG) and ERR's `2^g_max` stay exact in an f64 far beyond it; graded relevance
/// scales in practice stop at 3 or 4.
pub const MAX_GAIN: u8 = 30;

/// Which NIST trec_eval a definition follows where its versions differ: for `iprec@r` (and
/// `rankpulse eval`'s `iprec_at_recall` and `11pt_avg`), the number of relevant results at
/// which recall level r counts as reached, and for `rankpulse eval` also how scores are read
/// (see [`crate::eval::trec`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum TrecEval {
    /// trec_eval 9.x (9.0.8, what pytrec_eval, ir_measures and Anserini embed):
    /// `(long)(r |R| + 0.9)`, in effect recall@i >= r as the Metrics chapter defines it.
    #[default]
    #[serde(rename = "9")]
    V9,
    /// trec_eval 10.0 (June 2026): `lround(r |R|)`, r |R| rounded to the nearest count.
    #[serde(rename = "10")]
    V10,
}

impl std::str::FromStr for TrecEval {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "9" | "9.0.8" => Ok(TrecEval::V9),
            "10" | "10.0" => Ok(TrecEval::V10),
            other => Err(format!("{other:?}: trec_eval versions are 9 (9.x) and 10 (10.0)")),
        }
    }
}

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
    F1,
    Err,
    RPrecision,
    /// One point of the 11-point interpolated precision-recall curve; its [`MetricKey::k`] is
    /// the recall level in tenths (0 to 10).
    InterpolatedPrecision,
    /// Clicks in the top k, each weighted by the inverse of its rank's position-bias
    /// propensity (`clicks.propensities`, clipped at `clicks.clip`): the relevant results in
    /// the top k had every rank been examined (Joachims, Swaminathan, Schnabel, WSDM 2017).
    IpsClicks,
    /// [`MetricKind::IpsClicks`] discounted by rank as DCG is, 1 / log2(rank + 1).
    IpsDcg,
}

/// The largest value one impression's metric may take. The ranking metrics lie in [0, 1]; the
/// inverse-propensity-weighted ones reach the sum of the click weights within their cutoff, so
/// configuration refuses propensities and a clip that could exceed this (`clicks.clip`): the
/// accumulators' exact fixed-point sums ([`crate::accumulate`]) hold the squares of 2^41
/// impressions of this value.
pub const MAX_IMPRESSION_VALUE: f64 = 32768.0;

/// Recall levels of the interpolated precision-recall curve, in tenths.
pub const RECALL_LEVELS: u32 = 11;

impl MetricKind {
    /// The kinds that take a cutoff, in layout order.
    pub const AT_K: [MetricKind; 8] = [
        MetricKind::Hit,
        MetricKind::Precision,
        MetricKind::Recall,
        MetricKind::AveragePrecision,
        MetricKind::Ndcg,
        MetricKind::NdcgExp,
        MetricKind::F1,
        MetricKind::Err,
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
            MetricKind::F1 => "f1",
            MetricKind::Err => "err",
            MetricKind::RPrecision => "r_precision",
            MetricKind::InterpolatedPrecision => "iprec",
            MetricKind::IpsClicks => "ips_clicks",
            MetricKind::IpsDcg => "ips_dcg",
        }
    }
}

/// A metric and its cutoff, if it takes one (for the interpolated precision: its recall level
/// in tenths).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MetricKey {
    pub kind: MetricKind,
    pub k: Option<u32>,
}

impl MetricKey {
    /// The contract's key for the group mean: `mrr`, `ndcg@10`, `iprec@0.3`, `abandonment_rate`, ...
    pub fn name(&self) -> String {
        match (self.kind, self.k) {
            (MetricKind::InterpolatedPrecision, Some(level)) => format!("iprec@{}", recall_level_label(level)),
            (_, Some(k)) => format!("{}@{k}", self.kind.mean_key()),
            (_, None) => self.kind.mean_key().to_string(),
        }
    }
}

/// A recall level in tenths as the contract writes it: `0.0`, `0.1`, ..., `1.0`.
pub fn recall_level_label(tenths: u32) -> String {
    format!("{}.{}", tenths / 10, tenths % 10)
}

/// The fixed order of the per-impression metric vector, derived once from the configuration.
/// Accumulators and exporters index by position in this layout, so a metric's value never
/// travels with its name on the hot path.
#[derive(Debug, Clone)]
pub struct MetricLayout {
    /// Cutoffs in ascending order: the evaluation pass emits each as the rank reaches it.
    cutoffs: Vec<u32>,
    /// A result is relevant when its gain is at least this.
    relevance_threshold: u8,
    /// The largest configured gain: ERR's stopping probability of a result is (2^g - 1) / 2^max.
    max_gain: u8,
    /// The metric at each position of the vector: how exporters name a value.
    keys: Vec<MetricKey>,
    /// `[interleaving]`: the sums kept for interleaved impressions, after the metrics' slots
    /// (they have no [`MetricKey`]: no exporter of ranking metrics sees them), and how their
    /// credit is earned. `None` with `interleaving.max_rankers = 0`.
    interleaving: Option<(Slots, CreditRule)>,
    /// `[judgments]`: the judged block after the interleaving sums (see [`judged`]); `None`
    /// without a judgment list.
    judged: Option<JudgedBlock>,
    /// `metrics.trec_eval`: where `iprec@r` counts recall level r as reached.
    recall_rounding: TrecEval,
    /// `clicks.propensities`: the weight of a click at each rank, 1 / max(p, clip) (0 past
    /// the list), when the inverse-propensity-weighted metrics are on; their slots follow
    /// every cutoff's metrics, two per cutoff.
    ips_weights: Option<Vec<f64>>,
}

/// How the interleaving sums' name in [`MetricLayout::slot_names`] begins.
pub const INTERLEAVING_SLOTS: &str = "interleaving(";
/// How the judged block's name in [`MetricLayout::slot_names`] begins.
pub const JUDGED_SLOTS: &str = "judged(";
/// How the name of the judged block's measures for incomplete judgments begins: a block of
/// its own in [`MetricLayout::slot_names`], so that state written before it is widened.
pub const JUDGED_INCOMPLETE_SLOTS: &str = "judged_incomplete(";

const RR_SLOT: usize = 0;
const ABANDONMENT_SLOT: usize = 1;
const R_PRECISION_SLOT: usize = 2;
const IPREC_FIRST_SLOT: usize = 3;
const FIXED_SLOTS: usize = IPREC_FIRST_SLOT + RECALL_LEVELS as usize;

impl MetricLayout {
    /// The layout for these cutoffs, relevance threshold and largest action gain (for ERR).
    pub fn new(cutoffs: &[u32], relevance_threshold: u8, max_gain: u8) -> MetricLayout {
        let mut sorted = cutoffs.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        let mut keys = vec![
            MetricKey { kind: MetricKind::ReciprocalRank, k: None },
            MetricKey { kind: MetricKind::Abandonment, k: None },
            MetricKey { kind: MetricKind::RPrecision, k: None },
        ];
        keys.extend(
            (0..RECALL_LEVELS).map(|level| MetricKey { kind: MetricKind::InterpolatedPrecision, k: Some(level) }),
        );
        for &k in &sorted {
            keys.extend(MetricKind::AT_K.iter().map(|&kind| MetricKey { kind, k: Some(k) }));
        }
        MetricLayout {
            cutoffs: sorted,
            relevance_threshold,
            max_gain: max_gain.min(MAX_GAIN),
            keys,
            interleaving: None,
            judged: None,
            recall_rounding: TrecEval::V9,
            ips_weights: None,
        }
    }

    /// This layout with `ips_clicks@k` and `ips_dcg@k` for every cutoff, a click at rank r
    /// weighted 1 / max(propensities[r], clip) (0 past the list); none when `propensities` is
    /// empty. Call before [`Self::with_interleaving`] and [`Self::with_judged`].
    pub fn with_ips(mut self, propensities: &[f64], clip: f64) -> MetricLayout {
        if propensities.is_empty() {
            return self;
        }
        self.ips_weights = Some(
            crate::clicks::ips::Propensities { relative: propensities.to_vec(), covariance: Vec::new(), clip }
                .weights(),
        );
        for &k in &self.cutoffs {
            self.keys.push(MetricKey { kind: MetricKind::IpsClicks, k: Some(k) });
            self.keys.push(MetricKey { kind: MetricKind::IpsDcg, k: Some(k) });
        }
        self
    }

    /// This layout with `iprec@r` placed as `version` places it (`metrics.trec_eval`); call
    /// before [`Self::with_judged`], whose block follows the same rule.
    pub fn with_recall_rounding(mut self, version: TrecEval) -> MetricLayout {
        self.recall_rounding = version;
        self
    }

    /// This layout with the interleaving sums for up to `max_rankers` rankers (none when 0),
    /// credited by `by_gain` up to `depth` (see [`CreditRule`]).
    pub fn with_interleaving(mut self, max_rankers: usize, by_gain: bool, depth: u32) -> MetricLayout {
        self.interleaving = (max_rankers > 0).then(|| {
            let slots = Slots { first: self.keys.len(), rankers: max_rankers };
            (slots, CreditRule { threshold: self.relevance_threshold, by_gain, depth })
        });
        self
    }

    /// This layout with the judged block after its other slots: the same metrics scored from
    /// judgment grades, a grade relevant from `relevance_threshold`, ERR's largest grade
    /// `max_grade`; with `incomplete`, bpref and the condensed-list measures after them (see
    /// [`judged`]). Call after [`Self::with_interleaving`] and [`Self::with_recall_rounding`].
    pub fn with_judged(mut self, relevance_threshold: u8, max_grade: u8, incomplete: bool) -> MetricLayout {
        let layout =
            MetricLayout::new(&self.cutoffs, relevance_threshold, max_grade).with_recall_rounding(self.recall_rounding);
        let incomplete = incomplete.then(|| judged::IncompleteSlots::new(&layout));
        self.judged = Some(JudgedBlock { first: self.slot_count(), layout: Box::new(layout), incomplete });
        self
    }

    /// The judged block, when a judgment list is configured.
    pub fn judged(&self) -> Option<&JudgedBlock> {
        self.judged.as_ref()
    }

    /// Where each optional block of slots ends: the metrics', then the interleaving sums' and
    /// the judged block's when present. State written with fewer blocks ends at one of these
    /// and is widened with zeros (see [`Self::widens_from`]).
    pub fn block_ends(&self) -> Vec<usize> {
        let mut ends = vec![self.keys.len()];
        if let Some((slots, _)) = &self.interleaving {
            ends.push(self.keys.len() + slots.len());
        }
        if let Some(judged) = &self.judged {
            ends.push(judged.first + judged.plain_len());
            if judged.incomplete.is_some() {
                ends.push(judged.first + judged.len());
            }
        }
        ends
    }

    /// When state whose slots are named `theirs` becomes state of this layout by appending
    /// zero sums, the slot count it has: `theirs` is this layout's names without its last
    /// blocks (interleaving, judged, the judged measures for incomplete judgments), written
    /// before they existed or with them off, so it counted nothing in them.
    pub fn widens_from(&self, theirs: &[String]) -> Option<usize> {
        let ours = self.slot_names();
        let blocks = ours.len().checked_sub(theirs.len()).filter(|&b| b > 0)?;
        let appended_blocks_only = ours[theirs.len()..].iter().all(|name| {
            [INTERLEAVING_SLOTS, JUDGED_SLOTS, JUDGED_INCOMPLETE_SLOTS].iter().any(|p| name.starts_with(p))
        });
        let ends = self.block_ends();
        (ours.starts_with(theirs) && appended_blocks_only && theirs.len() >= self.keys.len())
            .then(|| ends.get(ends.len() - 1 - blocks).copied())
            .flatten()
    }

    /// The interleaving sums' slots and credit rule, when interleaving is on.
    pub fn interleaving(&self) -> Option<&(Slots, CreditRule)> {
        self.interleaving.as_ref()
    }

    /// Every slot of a value vector: the metrics' and the interleaving sums'. What the
    /// accumulators keep per group.
    pub fn slot_count(&self) -> usize {
        let before_judged = self.keys.len() + self.interleaving.map_or(0, |(slots, _)| slots.len());
        before_judged + self.judged.as_ref().map_or(0, JudgedBlock::len)
    }

    /// The names that identify the slots, for a snapshot's fingerprint: the metrics', then
    /// the interleaving sums' as one name ([`INTERLEAVING_SLOTS`] and the ranker count).
    pub fn slot_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.keys.iter().map(MetricKey::name).collect();
        if let Some((slots, _)) = &self.interleaving {
            names.push(format!("{INTERLEAVING_SLOTS}max_rankers={})", slots.rankers));
        }
        if let Some(judged) = &self.judged {
            let (threshold, max_grade) = (judged.layout.relevance_threshold, judged.layout.max_gain);
            names.push(format!("{JUDGED_SLOTS}relevance_threshold={threshold},max_grade={max_grade})"));
            if judged.incomplete.is_some() {
                names.push(format!("{JUDGED_INCOMPLETE_SLOTS}bpref,map_condensed,ndcg_condensed)"));
            }
        }
        names
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

    /// The largest gain an impression's results can have under this configuration (the largest
    /// of `metrics.action_gains`): what the metrics' values are bounded by.
    pub fn max_gain(&self) -> u8 {
        self.max_gain
    }

    /// Computes every configured metric of one impression into `out` (length [`Self::len`]).
    /// One pass over the ranked list serves every cutoff and every recall level; the ideal
    /// ordering comes from a counting pass over gain levels instead of a sort.
    pub fn evaluate(&self, ranked: &[u8], unretrieved: &[u8], out: &mut [f64]) {
        assert_eq!(out.len(), self.keys.len(), "output vector does not match the layout");
        let threshold = self.relevance_threshold;
        let mut level_counts = [0u32; MAX_GAIN as usize + 1];
        let mut relevant_shown = 0u32;
        for &g in ranked {
            level_counts[usize::from(g.min(MAX_GAIN))] += 1;
            relevant_shown += u32::from(g >= threshold);
        }
        let mut num_relevant = relevant_shown;
        for &g in unretrieved {
            level_counts[usize::from(g.min(MAX_GAIN))] += 1;
            num_relevant += u32::from(g >= threshold);
        }
        let mut ideal = IdealDcg::new(&level_counts);
        let level_reached_at: [u32; RECALL_LEVELS as usize] =
            std::array::from_fn(|l| recall_level_count(l as u32, num_relevant, self.recall_rounding).max(1));
        let mut interpolated = [0.0f64; RECALL_LEVELS as usize];
        let err_scale = 2f64.powi(i32::from(self.max_gain));

        let mut first_relevant_rank = None::<usize>;
        let mut relevant_at_r = None::<u32>;
        let mut prefix = Prefix::default();
        let mut next_cutoff = 0usize;
        let mut slot = FIXED_SLOTS;
        let mut emit = |k: u32, p: &Prefix, slot: &mut usize| {
            let (idcg, idcg_exp) = ideal.at(k);
            let rel = f64::from(p.relevant);
            let precision = rel / f64::from(k);
            let (recall, ap) = if num_relevant == 0 {
                (0.0, 0.0)
            } else {
                (rel / f64::from(num_relevant), p.precision_sum / f64::from(num_relevant))
            };
            let values = [
                if p.relevant > 0 { 1.0 } else { 0.0 },
                precision,
                recall,
                ap,
                if idcg > 0.0 { p.dcg / idcg } else { 0.0 },
                if idcg_exp > 0.0 { p.dcg_exp / idcg_exp } else { 0.0 },
                if precision + recall > 0.0 { 2.0 * precision * recall / (precision + recall) } else { 0.0 },
                p.err,
            ];
            out[*slot..*slot + values.len()].copy_from_slice(&values);
            *slot += values.len();
        };
        for (i, &g) in ranked.iter().enumerate() {
            if next_cutoff == self.cutoffs.len() && prefix.relevant == relevant_shown {
                break; // every cutoff emitted and every relevant rank seen: the rest changes nothing
            }
            let rank = i + 1;
            if g >= threshold {
                prefix.relevant += 1;
                let precision = f64::from(prefix.relevant) / rank as f64;
                prefix.precision_sum += precision;
                first_relevant_rank.get_or_insert(rank);
                for (value, &reached_at) in interpolated.iter_mut().zip(&level_reached_at) {
                    if prefix.relevant >= reached_at && precision > *value {
                        *value = precision;
                    }
                }
            }
            if g > 0 {
                let discount = discount(rank);
                prefix.dcg += f64::from(g) / discount;
                prefix.dcg_exp += exp_gain(g) / discount;
                let stop = exp_gain(g.min(self.max_gain)) / err_scale;
                prefix.err += prefix.continue_probability * stop / rank as f64;
                prefix.continue_probability *= 1.0 - stop;
            }
            if rank == num_relevant as usize {
                relevant_at_r = Some(prefix.relevant);
            }
            while next_cutoff < self.cutoffs.len() && self.cutoffs[next_cutoff] as usize == rank {
                emit(self.cutoffs[next_cutoff], &prefix, &mut slot);
                next_cutoff += 1;
            }
        }
        // Cutoffs beyond the list: the totals stand, precision keeps dividing by k (padding).
        for &k in &self.cutoffs[next_cutoff..] {
            emit(k, &prefix, &mut slot);
        }
        out[RR_SLOT] = first_relevant_rank.map_or(0.0, |r| 1.0 / r as f64);
        out[ABANDONMENT_SLOT] = if num_relevant == 0 { 1.0 } else { 0.0 };
        // Stopped before rank |R| (list shorter, or every relevant result seen): all of them count.
        out[R_PRECISION_SLOT] = if num_relevant == 0 {
            0.0
        } else {
            f64::from(relevant_at_r.unwrap_or(prefix.relevant)) / f64::from(num_relevant)
        };
        out[IPREC_FIRST_SLOT..FIXED_SLOTS].copy_from_slice(&interpolated);
        if let Some(weights) = &self.ips_weights {
            let first = FIXED_SLOTS + self.cutoffs.len() * MetricKind::AT_K.len();
            self.evaluate_ips(ranked, weights, &mut out[first..]);
        }
    }

    /// The inverse-propensity-weighted click metrics of every cutoff, into `out` (two per
    /// cutoff): a result is clicked when its gain reaches the relevance threshold.
    fn evaluate_ips(&self, ranked: &[u8], weights: &[f64], out: &mut [f64]) {
        let (mut clicks, mut dcg, mut rank) = (0.0, 0.0, 0usize);
        for (i, &k) in self.cutoffs.iter().enumerate() {
            while rank < (k as usize).min(ranked.len()) {
                if ranked[rank] >= self.relevance_threshold {
                    let w = weights.get(rank).copied().unwrap_or(0.0);
                    clicks += w;
                    dcg += w / discount(rank + 1);
                }
                rank += 1;
            }
            out[2 * i] = clicks;
            out[2 * i + 1] = dcg;
        }
    }
}

/// Running totals of the evaluation pass up to the current rank.
#[derive(Debug, Clone, Copy)]
struct Prefix {
    relevant: u32,
    precision_sum: f64,
    dcg: f64,
    dcg_exp: f64,
    /// Expected reciprocal rank so far, and the probability that the user reads on.
    err: f64,
    continue_probability: f64,
}

impl Default for Prefix {
    fn default() -> Self {
        Prefix { relevant: 0, precision_sum: 0.0, dcg: 0.0, dcg_exp: 0.0, err: 0.0, continue_probability: 1.0 }
    }
}

/// The number of relevant results at which recall level `tenths / 10` counts as reached,
/// computed exactly as `version` of trec_eval does, in double precision. 9.x:
/// `(long) (level * num_rel + 0.9)`, the ceiling of level x |R| except where the product rounds
/// just below a tenth: for 0.7 x 3 = 2.0999999999999996 the count is 2, so recall 2/3 reaches
/// level 0.7 (up to |R| = 200, 14 (level, |R|) pairs, levels 0.3 and 0.7 only). 10.0:
/// `lround(level * num_rel)`, the nearest count (half away from zero), so with |R| = 3 level 0.1
/// needs no relevant result and level 0.2 one. (A count of 0 acts as 1 in both: trec_eval's
/// walk gives those levels the precision of the first relevant result.)
pub fn recall_level_count(tenths: u32, num_relevant: u32, version: TrecEval) -> u32 {
    recall_cutoff(f64::from(tenths) / 10.0, i64::from(num_relevant), version).clamp(0, i64::from(u32::MAX)) as u32
}

/// [`recall_level_count`] for any recall level `level` (`rankpulse eval`'s
/// `iprec_at_recall.0.25`): m_iprec_at_recall.c's and m_11pt_avg.c's rounding, by version.
pub fn recall_cutoff(level: f64, num_relevant: i64, version: TrecEval) -> i64 {
    let product = level * num_relevant as f64;
    match version {
        TrecEval::V9 => (product + 0.9) as i64,
        // C's lround: half away from zero, as f64::round.
        TrecEval::V10 => product.round() as i64,
    }
}

/// log2(rank + 1): the DCG discount of a rank counted from 1.
fn discount(rank: usize) -> f64 {
    DISCOUNTS.get(rank).copied().unwrap_or_else(|| discount_computed(rank))
}

fn discount_computed(rank: usize) -> f64 {
    ((rank + 1) as f64).log2()
}

/// [`discount`] of the first ranks, computed once: the same values, without a `log2` per
/// relevant result and cutoff.
static DISCOUNTS: std::sync::LazyLock<[f64; 1024]> =
    std::sync::LazyLock::new(|| std::array::from_fn(discount_computed));

/// 2^g - 1, the exponential gain.
fn exp_gain(g: u8) -> f64 {
    (2.0f64).powi(i32::from(g)) - 1.0
}

/// The ideal DCG at any cutoff, from the count of results at each gain level.
struct IdealDcg<'a> {
    level_counts: &'a [u32; MAX_GAIN as usize + 1],
    /// Ranks of the ideal ordering summed so far, and their (linear, exponential) sums: the
    /// cutoffs come in increasing order, so each goes on from the one before.
    rank: usize,
    sums: (f64, f64),
    /// The gain level the next rank takes, and how many of its results are summed already.
    level: u8,
    taken_of_level: u32,
}

impl<'a> IdealDcg<'a> {
    fn new(level_counts: &'a [u32; MAX_GAIN as usize + 1]) -> Self {
        IdealDcg { level_counts, rank: 0, sums: (0.0, 0.0), level: MAX_GAIN, taken_of_level: 0 }
    }

    /// (linear IDCG@k, exponential IDCG@k), summed in rank order exactly as trec_eval does
    /// (going on from the previous cutoff adds the same terms in the same order).
    fn at(&mut self, k: u32) -> (f64, f64) {
        if (k as usize) < self.rank {
            *self = IdealDcg::new(self.level_counts);
        }
        while self.rank < k as usize && self.level > 0 {
            if self.taken_of_level == self.level_counts[usize::from(self.level)] {
                self.level -= 1;
                self.taken_of_level = 0;
                continue;
            }
            self.taken_of_level += 1;
            self.rank += 1;
            let d = discount(self.rank);
            self.sums.0 += f64::from(self.level) / d;
            self.sums.1 += exp_gain(self.level) / d;
        }
        self.sums
    }
}

/// The straightforward definitions, one function per metric (`reference.rs`).
pub mod reference;

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
        let layout = MetricLayout::new(&[5], 1, 3);
        let v = eval(&layout, &[0, 0, 1, 1, 0], &[]);
        assert!(close(get(&layout, &v, MetricKind::AveragePrecision, Some(5)), 5.0 / 12.0));
        assert!(close(average_precision(&[0, 0, 1, 1, 0], &[], 1, 5), (1.0 / 3.0 + 2.0 / 4.0) / 2.0));
    }

    #[test]
    fn graded_ndcg_with_an_unshown_relevant_document() {
        // gains [1,0,3,3,0] shown, one more relevant document of gain 3 not shown.
        let layout = MetricLayout::new(&[5], 1, 3);
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
        let layout = MetricLayout::new(&[1, 3, 10], 1, 3);
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
        let layout = MetricLayout::new(&[2, 10], 1, 3);
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
        let layout = MetricLayout::new(&[1, 5], 1, 3);
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
        let layout = MetricLayout::new(&[3], 2, 3);
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
        let layout = MetricLayout::new(&[1, 2, 3, 5, 10, 20], 2, 3);
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
                assert!(close(g(MetricKind::F1), f1(&ranked, &unretrieved, t, ku)), "F1 {case}");
                assert!(close(g(MetricKind::Err), err(&ranked, ku, 3)), "ERR {case}");
            }
            assert!(close(get(&layout, &v, MetricKind::RPrecision, None), r_precision(&ranked, &unretrieved, t)));
            for level in 0..RECALL_LEVELS {
                let want = interpolated_precision(&ranked, &unretrieved, t, level);
                let got = get(&layout, &v, MetricKind::InterpolatedPrecision, Some(level));
                assert!(close(got, want), "iprec@{level} case {case}: {got} vs {want} on {ranked:?} + {unretrieved:?}");
            }
        }
    }

    #[test]
    fn interpolated_curve_r_precision_and_f1_of_relevant_at_ranks_one_five_six() {
        // The case checked against trec_eval 9.0.8 (pytrec-eval-terrier): iprec_at_recall_0.30 = 1.0,
        // iprec_at_recall_0.40 = 0.5 (recall 1/3 < 0.4, so level 0.4 needs the second relevant).
        let layout = MetricLayout::new(&[5], 1, 3);
        let ranked = [1, 0, 0, 0, 1, 1, 0, 0, 0, 0];
        let v = eval(&layout, &ranked, &[]);
        let curve: Vec<f64> =
            (0..RECALL_LEVELS).map(|l| get(&layout, &v, MetricKind::InterpolatedPrecision, Some(l))).collect();
        assert_eq!(curve, [1.0, 1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]);
        assert!(close(get(&layout, &v, MetricKind::RPrecision, None), 1.0 / 3.0));
        // P@5 = 2/5, R@5 = 2/3: F1 = 2 * (2/5)(2/3) / (2/5 + 2/3) = 1/2.
        assert!(close(get(&layout, &v, MetricKind::F1, Some(5)), 0.5));
    }

    #[test]
    fn recall_levels_round_as_trec_eval_does() {
        // trec_eval 9.0.8 (pytrec-eval-terrier) on relevant results at ranks 1, 2, 10 of 10:
        // iprec_at_recall_0.70 = 1.0 although recall 2/3 < 0.7; 0.80 = 0.3.
        let layout = MetricLayout::new(&[1], 1, 3);
        let v = eval(&layout, &[1, 1, 0, 0, 0, 0, 0, 0, 0, 1], &[]);
        assert_eq!(get(&layout, &v, MetricKind::InterpolatedPrecision, Some(7)), 1.0);
        assert_eq!(get(&layout, &v, MetricKind::InterpolatedPrecision, Some(8)), 0.3);
        let quirks = (1..=200).flat_map(|r| (0..RECALL_LEVELS).map(move |l| (l, r)));
        let differing: Vec<(u32, u32)> =
            quirks.filter(|&(l, r)| recall_level_count(l, r, TrecEval::V9) != (l * r).div_ceil(10)).collect();
        assert_eq!(differing.len(), 14, "{differing:?}");
        assert!(differing.iter().all(|&(l, _)| l == 3 || l == 7));
    }

    #[test]
    fn recall_levels_hit_exactly_at_tenths() {
        // Ten relevant results: recall 3/10 must reach level 0.3 although 0.3 * 10 > 3 in floating point.
        let layout = MetricLayout::new(&[1], 1, 3);
        let mut ranked = vec![1u8; 3];
        ranked.extend([0; 7]);
        let v = eval(&layout, &ranked, &[1; 7]);
        assert_eq!(get(&layout, &v, MetricKind::InterpolatedPrecision, Some(3)), 1.0);
        assert_eq!(get(&layout, &v, MetricKind::InterpolatedPrecision, Some(4)), 0.0);
    }

    #[test]
    fn expected_reciprocal_rank_follows_the_cascade() {
        // g_max 3: p = 7/8 at rank 1, 0 at rank 2, 1/8 at rank 3.
        let layout = MetricLayout::new(&[1, 3], 1, 3);
        let v = eval(&layout, &[3, 0, 1], &[]);
        assert!(close(get(&layout, &v, MetricKind::Err, Some(1)), 7.0 / 8.0));
        assert!(close(get(&layout, &v, MetricKind::Err, Some(3)), 7.0 / 8.0 + (1.0 / 8.0) * (1.0 / 8.0) / 3.0));
    }

    #[test]
    fn inverse_propensity_weighted_clicks_are_clipped_and_stop_at_the_known_ranks() {
        // Weights 1, 1/0.5, 1/max(0.1, 0.25): a click past the third rank counts nothing.
        let layout = MetricLayout::new(&[1, 2, 5], 1, 3).with_ips(&[1.0, 0.5, 0.1], 0.25);
        let v = eval(&layout, &[1, 0, 2, 1], &[]);
        let d = |rank: f64| 1.0 / (rank + 1.0).log2();
        assert!(close(get(&layout, &v, MetricKind::IpsClicks, Some(1)), 1.0));
        assert!(close(get(&layout, &v, MetricKind::IpsClicks, Some(2)), 1.0));
        assert!(close(get(&layout, &v, MetricKind::IpsClicks, Some(5)), 1.0 + 4.0));
        assert!(close(get(&layout, &v, MetricKind::IpsDcg, Some(5)), d(1.0) + 4.0 * d(3.0)));
        // The metrics before them are those of the layout without.
        let plain = MetricLayout::new(&[1, 2, 5], 1, 3);
        assert_eq!(&v[..plain.len()], &eval(&plain, &[1, 0, 2, 1], &[])[..]);
        assert_eq!(layout.keys()[plain.len()].name(), "ips_clicks@1");
        assert!(
            MetricLayout::new(&[1], 1, 3).with_ips(&[], 0.0).keys().len() == MetricLayout::new(&[1], 1, 3).keys().len()
        );
    }

    #[test]
    fn keys_follow_the_contract() {
        let layout = MetricLayout::new(&[10, 1], 1, 3);
        let names: Vec<String> = layout.keys().iter().map(|k| k.name()).collect();
        assert_eq!(
            names,
            [
                "mrr",
                "abandonment_rate",
                "r_precision",
                "iprec@0.0",
                "iprec@0.1",
                "iprec@0.2",
                "iprec@0.3",
                "iprec@0.4",
                "iprec@0.5",
                "iprec@0.6",
                "iprec@0.7",
                "iprec@0.8",
                "iprec@0.9",
                "iprec@1.0",
                "hit_rate@1",
                "precision@1",
                "recall@1",
                "map@1",
                "ndcg@1",
                "ndcg_exp@1",
                "f1@1",
                "err@1",
                "hit_rate@10",
                "precision@10",
                "recall@10",
                "map@10",
                "ndcg@10",
                "ndcg_exp@10",
                "f1@10",
                "err@10"
            ]
        );
    }
}
