//! Property tests of the per-impression metrics (`rankpulse::metrics`).
//!
//! `MetricLayout::evaluate` computes every metric at every cutoff in one pass over the ranked
//! list, with the ideal DCG taken from counts of gain levels. These properties check it against
//! the plain definitions and against the algebra the definitions imply, over random ranked gain
//! lists (length 0..=200, gains mostly 0..=3, sometimes up to 5, rarely up to `MAX_GAIN`),
//! relevance thresholds 1..=3 and random cutoff sets in 1..=250:
//!
//! 1. `values_are_finite_and_in_unit_interval`: every value is finite and in [0, 1] (and every
//!    slot is written: the output starts as NaN).
//! 2. `evaluate_matches_reference_definitions`: every metric at every cutoff equals the
//!    `reference` function (within 1e-12).
//! 3. `cumulative_metrics_are_monotone_in_k`: hit@k, recall@k, AP@k, relevant-in-top-k, IDCG@k
//!    and DCG@k (linear and exponential, recovered as nDCG@k x IDCG@k) never decrease with k.
//! 4. `ideal_order_has_ndcg_one`: a list already sorted by descending gain has nDCG@k = 1 and
//!    nDCG_exp@k = 1 at every k.
//! 5. `precision_times_k_equals_recall_times_num_relevant`: P@k * k = R@k * |R| when |R| > 0.
//! 6. `ap_at_k_beyond_the_list_is_uncut_ap`: AP@k for any k >= the list length is uncut AP.
//! 7. `appending_non_relevant_results_changes_nothing`: zeros appended after the list leave every
//!    metric at cutoffs <= the original length unchanged.
//! 8. `abandonment_iff_no_relevant_result`: abandonment is 1 exactly when no result reaches the
//!    threshold, and then rr, hit, precision, recall and AP are all 0.
//!
//! Properties 1, 2, 5 and 6 also draw judged-but-unretrieved gains (as in trec_eval); the others
//! use an empty list, as online. Failures are not persisted to a regressions file: proptest
//! prints the shrunk input instead.

use proptest::collection::{btree_set, vec};
use proptest::prelude::*;
use rankpulse::metrics::{reference, MetricKind, MetricLayout, MAX_GAIN};

const EPS: f64 = 1e-12;
/// A cutoff far beyond any generated list: the metric at it is the uncut metric.
const HUGE_K: u32 = 10_000;

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() }
}

/// Gains 0..=`max_gain`, half the time a short list (where edge cases live), else up to 200.
fn gains_up_to(max_gain: u8, min_len: usize) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![vec(0..=max_gain, min_len..=12), vec(0..=max_gain, min_len..=200),]
}

/// Ranked gains: mostly 0..=3, sometimes up to 5, rarely the full valid range.
fn ranked_gains(min_len: usize) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        6 => gains_up_to(3, min_len),
        3 => gains_up_to(5, min_len),
        1 => gains_up_to(MAX_GAIN, min_len),
    ]
}

/// Gains of judged documents that were not shown.
fn unretrieved_gains() -> impl Strategy<Value = Vec<u8>> {
    vec(0u8..=3, 0..=5)
}

fn threshold() -> impl Strategy<Value = u8> {
    1u8..=3
}

/// A non-empty set of cutoffs in 1..=250, biased towards small ones.
fn cutoffs() -> impl Strategy<Value = Vec<u32>> {
    btree_set(prop_oneof![1u32..=12, 1u32..=250], 1..=8).prop_map(|s| s.into_iter().collect())
}

fn evaluate(layout: &MetricLayout, ranked: &[u8], unretrieved: &[u8]) -> Vec<f64> {
    let mut out = vec![f64::NAN; layout.len()];
    layout.evaluate(ranked, unretrieved, &mut out);
    out
}

fn value(layout: &MetricLayout, out: &[f64], kind: MetricKind, k: Option<u32>) -> f64 {
    out[layout.slot(kind, k).unwrap_or_else(|| panic!("{kind:?}@{k:?} not in the layout"))]
}

fn num_relevant(ranked: &[u8], unretrieved: &[u8], threshold: u8) -> usize {
    ranked.iter().chain(unretrieved).filter(|&&g| g >= threshold).count()
}

fn exp_gain(g: u8) -> f64 {
    2f64.powi(i32::from(g)) - 1.0
}

/// (linear, exponential) ideal DCG@k, computed here from the sorted positive gains.
fn ideal_dcg(ranked: &[u8], unretrieved: &[u8], k: u32) -> (f64, f64) {
    let mut gains: Vec<u8> = ranked.iter().chain(unretrieved).copied().filter(|&g| g > 0).collect();
    gains.sort_unstable_by(|a, b| b.cmp(a));
    gains.iter().take(k as usize).enumerate().fold((0.0, 0.0), |(lin, exp), (i, &g)| {
        let discount = ((i + 2) as f64).log2();
        (lin + f64::from(g) / discount, exp + exp_gain(g) / discount)
    })
}

proptest! {
    #![proptest_config(config(1000))]

    #[test]
    fn values_are_finite_and_in_unit_interval(
        ranked in ranked_gains(0),
        unretrieved in unretrieved_gains(),
        threshold in threshold(),
        cutoffs in cutoffs(),
    ) {
        let layout = MetricLayout::new(&cutoffs, threshold, MAX_GAIN);
        let out = evaluate(&layout, &ranked, &unretrieved);
        for (key, &v) in layout.keys().iter().zip(&out) {
            prop_assert!(
                v.is_finite() && (0.0..=1.0).contains(&v),
                "{} = {v}",
                key.name()
            );
        }
    }

    #[test]
    fn evaluate_matches_reference_definitions(
        ranked in ranked_gains(0),
        unretrieved in unretrieved_gains(),
        threshold in threshold(),
        cutoffs in cutoffs(),
    ) {
        let layout = MetricLayout::new(&cutoffs, threshold, MAX_GAIN).with_ips(&PROPENSITIES, CLIP);
        prop_assert_eq!(layout.cutoffs(), &cutoffs[..]);
        let out = evaluate(&layout, &ranked, &unretrieved);
        let no_relevant = num_relevant(&ranked, &unretrieved, threshold) == 0;
        for (key, &v) in layout.keys().iter().zip(&out) {
            let k = key.k.map_or(0, |k| k as usize);
            let (r, u, t) = (&ranked[..], &unretrieved[..], threshold);
            let expected = match key.kind {
                MetricKind::ReciprocalRank => reference::reciprocal_rank(r, t),
                MetricKind::Abandonment => if no_relevant { 1.0 } else { 0.0 },
                MetricKind::Hit => reference::hit(r, t, k),
                MetricKind::Precision => reference::precision(r, t, k),
                MetricKind::Recall => reference::recall(r, u, t, k),
                MetricKind::AveragePrecision => reference::average_precision(r, u, t, k),
                MetricKind::Ndcg => reference::ndcg(r, u, k, false),
                MetricKind::NdcgExp => reference::ndcg(r, u, k, true),
                MetricKind::F1 => reference::f1(r, u, t, k),
                MetricKind::Err => reference::err(r, k, MAX_GAIN),
                MetricKind::RPrecision => reference::r_precision(r, u, t),
                MetricKind::InterpolatedPrecision => reference::interpolated_precision(r, u, t, k as u32),
                MetricKind::IpsClicks => ips_reference(r, t, k, false),
                MetricKind::IpsDcg => ips_reference(r, t, k, true),
            };
            prop_assert!(
                (v - expected).abs() <= EPS,
                "{}: evaluate {v} reference {expected}",
                key.name()
            );
        }
    }
}

/// The propensities of the inverse-propensity-weighted metrics checked here, and their clip.
const PROPENSITIES: [f64; 5] = [1.0, 0.6, 0.45, 0.3, 0.1];
const CLIP: f64 = 0.2;

/// `ips_clicks@k` (or `ips_dcg@k`) by its definition: every relevant result in the top k
/// weighted 1 / max(p, clip) (0 past the propensities), discounted by log2(rank + 1) for DCG.
fn ips_reference(ranked: &[u8], threshold: u8, k: usize, discounted: bool) -> f64 {
    ranked
        .iter()
        .take(k)
        .enumerate()
        .filter(|(_, &g)| g >= threshold)
        .map(|(i, _)| {
            let weight = PROPENSITIES.get(i).map_or(0.0, |p| 1.0 / p.max(CLIP));
            if discounted {
                weight / ((i + 2) as f64).log2()
            } else {
                weight
            }
        })
        .sum()
}

proptest! {
    #![proptest_config(config(500))]

    #[test]
    fn cumulative_metrics_are_monotone_in_k(
        ranked in ranked_gains(0),
        threshold in threshold(),
        cutoffs in cutoffs(),
    ) {
        let layout = MetricLayout::new(&cutoffs, threshold, MAX_GAIN);
        let out = evaluate(&layout, &ranked, &[]);
        let at = |kind, k| value(&layout, &out, kind, Some(k));
        for pair in layout.cutoffs().windows(2) {
            let (a, b) = (pair[0], pair[1]);
            prop_assert!(a < b, "cutoffs not ascending: {:?}", layout.cutoffs());
            for kind in [MetricKind::Hit, MetricKind::Recall, MetricKind::AveragePrecision] {
                prop_assert!(
                    at(kind, a) <= at(kind, b),
                    "{kind:?}@{a} = {} > @{b} = {}",
                    at(kind, a),
                    at(kind, b)
                );
            }
            let relevant = |k: u32| (at(MetricKind::Precision, k) * f64::from(k)).round();
            prop_assert!(relevant(a) <= relevant(b), "relevant in top {a} > in top {b}");

            let (idcg_a, idcg_exp_a) = ideal_dcg(&ranked, &[], a);
            let (idcg_b, idcg_exp_b) = ideal_dcg(&ranked, &[], b);
            prop_assert!(idcg_a <= idcg_b && idcg_exp_a <= idcg_exp_b, "IDCG@{a} > IDCG@{b}");
            let dcg_a = at(MetricKind::Ndcg, a) * idcg_a;
            let dcg_b = at(MetricKind::Ndcg, b) * idcg_b;
            prop_assert!(
                dcg_a <= dcg_b + 1e-9 * dcg_b.max(1.0),
                "DCG@{a} = {dcg_a} > DCG@{b} = {dcg_b}"
            );
            let dcg_exp_a = at(MetricKind::NdcgExp, a) * idcg_exp_a;
            let dcg_exp_b = at(MetricKind::NdcgExp, b) * idcg_exp_b;
            prop_assert!(
                dcg_exp_a <= dcg_exp_b + 1e-9 * dcg_exp_b.max(1.0),
                "DCG_exp@{a} = {dcg_exp_a} > DCG_exp@{b} = {dcg_exp_b}"
            );
        }
    }

    #[test]
    fn ideal_order_has_ndcg_one(
        mut ranked in ranked_gains(1),
        threshold in threshold(),
        cutoffs in cutoffs(),
    ) {
        ranked.sort_unstable_by(|a, b| b.cmp(a));
        if ranked[0] == 0 {
            ranked[0] = 1; // at least one positive gain; the order stays descending
        }
        let layout = MetricLayout::new(&cutoffs, threshold, MAX_GAIN);
        let out = evaluate(&layout, &ranked, &[]);
        for &k in layout.cutoffs() {
            for kind in [MetricKind::Ndcg, MetricKind::NdcgExp] {
                let v = value(&layout, &out, kind, Some(k));
                prop_assert!(
                    (v - 1.0).abs() <= EPS,
                    "{kind:?}@{k} = {v} on an ideally ordered list"
                );
            }
        }
    }

    #[test]
    fn precision_times_k_equals_recall_times_num_relevant(
        ranked in ranked_gains(0),
        mut unretrieved in unretrieved_gains(),
        threshold in threshold(),
        cutoffs in cutoffs(),
    ) {
        if num_relevant(&ranked, &unretrieved, threshold) == 0 {
            unretrieved.push(threshold); // |R| > 0
        }
        let num_relevant = num_relevant(&ranked, &unretrieved, threshold) as f64;
        let layout = MetricLayout::new(&cutoffs, threshold, MAX_GAIN);
        let out = evaluate(&layout, &ranked, &unretrieved);
        for &k in layout.cutoffs() {
            let p = value(&layout, &out, MetricKind::Precision, Some(k));
            let r = value(&layout, &out, MetricKind::Recall, Some(k));
            prop_assert!(
                (p * f64::from(k) - r * num_relevant).abs() <= 1e-9,
                "P@{k} * {k} = {} but R@{k} * |R| = {}", p * f64::from(k), r * num_relevant
            );
        }
    }

    #[test]
    fn ap_at_k_beyond_the_list_is_uncut_ap(
        ranked in ranked_gains(0),
        unretrieved in unretrieved_gains(),
        threshold in threshold(),
        extra in 0u32..=50,
    ) {
        let len = (ranked.len() as u32).max(1);
        let layout = MetricLayout::new(&[len, len + extra, HUGE_K], threshold, MAX_GAIN);
        let out = evaluate(&layout, &ranked, &unretrieved);
        let ap = |k| value(&layout, &out, MetricKind::AveragePrecision, Some(k));
        let uncut = ap(HUGE_K);
        let reference = reference::average_precision(&ranked, &unretrieved, threshold, usize::MAX);
        prop_assert!(
            (uncut - reference).abs() <= EPS,
            "AP@{HUGE_K} = {uncut}, uncut reference AP = {reference}"
        );
        for k in [len, len + extra] {
            prop_assert!((ap(k) - uncut).abs() <= EPS, "AP@{k} = {} but uncut AP = {uncut}", ap(k));
        }
    }

    #[test]
    fn appending_non_relevant_results_changes_nothing(
        (ranked, cutoffs) in ranked_gains(1).prop_flat_map(|ranked| {
            let len = ranked.len() as u32;
            let cutoffs =
                btree_set(1..=len, 1..=8).prop_map(|s| s.into_iter().collect::<Vec<u32>>());
            (Just(ranked), cutoffs)
        }),
        zeros in 1usize..=50,
        threshold in threshold(),
    ) {
        let layout = MetricLayout::new(&cutoffs, threshold, MAX_GAIN);
        let before = evaluate(&layout, &ranked, &[]);
        let mut longer = ranked.clone();
        longer.resize(ranked.len() + zeros, 0);
        let after = evaluate(&layout, &longer, &[]);
        for ((key, &b), &a) in layout.keys().iter().zip(&before).zip(&after) {
            prop_assert!(
                (a - b).abs() <= EPS,
                "{}: {b} before appending {zeros} zeros, {a} after",
                key.name()
            );
        }
    }

    #[test]
    fn abandonment_iff_no_relevant_result(
        (threshold, ranked) in (threshold(), ranked_gains(0), any::<bool>()).prop_map(
            |(threshold, ranked, all_below)| {
                let ranked = if all_below {
                    ranked.into_iter().map(|g| g % threshold).collect()
                } else {
                    ranked
                };
                (threshold, ranked)
            }
        ),
        cutoffs in cutoffs(),
    ) {
        let layout = MetricLayout::new(&cutoffs, threshold, MAX_GAIN);
        let out = evaluate(&layout, &ranked, &[]);
        let abandonment = value(&layout, &out, MetricKind::Abandonment, None);
        let rr = value(&layout, &out, MetricKind::ReciprocalRank, None);
        let no_relevant = !ranked.iter().any(|&g| g >= threshold);
        prop_assert_eq!(abandonment, if no_relevant { 1.0 } else { 0.0 });
        if no_relevant {
            prop_assert_eq!(rr, 0.0);
            for &k in layout.cutoffs() {
                for kind in [
                    MetricKind::Hit,
                    MetricKind::Precision,
                    MetricKind::Recall,
                    MetricKind::AveragePrecision,
                ] {
                    prop_assert_eq!(
                        value(&layout, &out, kind, Some(k)),
                        0.0,
                        "{:?}@{} with no relevant result",
                        kind,
                        k
                    );
                }
            }
        } else {
            prop_assert!(rr > 0.0, "rr = 0 with a relevant result shown");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, failure_persistence: None, ..ProptestConfig::default() })]

    /// The interpolated precision-recall curve never rises with recall, and expected
    /// reciprocal rank never falls as the cutoff grows.
    #[test]
    fn interpolated_curve_falls_and_err_grows(
        ranked in ranked_gains(0),
        unretrieved in unretrieved_gains(),
        threshold in threshold(),
        cutoffs in cutoffs(),
    ) {
        let layout = MetricLayout::new(&cutoffs, threshold, MAX_GAIN);
        let out = evaluate(&layout, &ranked, &unretrieved);
        let value = |kind, k| out[layout.slot(kind, Some(k)).unwrap()];
        for level in 1..rankpulse::metrics::RECALL_LEVELS {
            let (before, here) = (value(MetricKind::InterpolatedPrecision, level - 1), value(MetricKind::InterpolatedPrecision, level));
            prop_assert!(here <= before, "iprec rises from level {} ({before}) to {level} ({here})", level - 1);
        }
        for pair in layout.cutoffs().windows(2) {
            prop_assert!(value(MetricKind::Err, pair[1]) >= value(MetricKind::Err, pair[0]));
        }
    }
}
