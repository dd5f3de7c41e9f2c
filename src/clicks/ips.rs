//! Inverse propensity weighting: a click at rank r counts 1/p_r, so that on average each
//! result counts as if it had been examined wherever it was shown (Joachims, Swaminathan,
//! Schnabel, *Unbiased Learning-to-Rank with Biased Feedback*, WSDM 2017, §4).
//!
//! The weights come from examination propensities relative to rank 1 ([`super::pbm`] or
//! [`super::harvest`]), so the estimates are on the scale of "clicks had the result been shown
//! at the top". Clipping (Strehl, Langford, Li, Kakade, *Learning from Logged Implicit
//! Exploration Data*, NeurIPS 2010) caps every weight at 1/τ: deep ranks with tiny propensities
//! no longer dominate the variance, at the price of a bias towards the top ranks' clicks.

use super::ClickTable;

/// Position-bias propensities relative to rank 1, and the clipping floor.
#[derive(Debug, Clone, PartialEq)]
pub struct Propensities {
    /// p_r / p_1 per 0-based rank; ranks past the end are not weighted (a click there counts 0).
    pub relative: Vec<f64>,
    /// The covariance of their errors, a row and a column per rank (0 for propensities known,
    /// not estimated): carried into the counterfactual estimate's standard error. The PBM's
    /// ranks are estimated together and their errors correlated
    /// ([`super::pbm::relative_covariance`]); harvesting's are taken as independent (only the
    /// diagonal). Empty: all known.
    pub covariance: Vec<Vec<f64>>,
    /// τ: a propensity below it is taken as τ (0: no clipping).
    pub clip: f64,
}

impl Propensities {
    /// Every known rank's [`Propensities::weight`].
    pub fn weights(&self) -> Vec<f64> {
        (0..self.relative.len()).map(|rank| self.weight(rank)).collect()
    }

    /// Each rank's standard error: the root of the covariance's diagonal (0 where known).
    pub fn stderr(&self) -> Vec<f64> {
        (0..self.relative.len())
            .map(|r| self.covariance.get(r).and_then(|row| row.get(r)).map_or(0.0, |v| v.max(0.0).sqrt()))
            .collect()
    }

    /// The weight of a click at `rank`: 1 / max(p, τ); 0 past the known ranks or where the
    /// propensity (clipped) is not positive.
    pub fn weight(&self, rank: usize) -> f64 {
        match self.relative.get(rank) {
            Some(&p) if p.max(self.clip) > 0.0 => 1.0 / p.max(self.clip),
            _ => 0.0,
        }
    }

    /// The largest value one impression's `ips_clicks@k` can take at cutoff `k`: a click at
    /// every weighted rank within it. `ips_dcg@k` is never larger (its discounts are at most 1).
    pub fn largest_sum(&self, k: usize) -> f64 {
        (0..k.min(self.relative.len())).map(|rank| self.weight(rank)).sum()
    }

    /// The smallest clip τ at which [`Self::largest_sum`] at `k` is at most `bound`, to the
    /// precision a user would write it (rounded up to 3 significant digits); `None` when even
    /// τ = 1 (every weight 1) exceeds it. The sum falls as τ rises, so a bisection finds it.
    pub fn smallest_clip_within(&self, k: usize, bound: f64) -> Option<f64> {
        let with_clip = |clip: f64| Propensities { clip, ..self.clone() }.largest_sum(k);
        if with_clip(1.0) > bound {
            return None;
        }
        let (mut low, mut high) = (0.0_f64, 1.0_f64);
        for _ in 0..200 {
            let mid = 0.5 * (low + high);
            if with_clip(mid) > bound {
                low = mid;
            } else {
                high = mid;
            }
        }
        // Up to three significant digits, staying within the bound.
        let scale = 10f64.powi(2 - high.log10().floor() as i32);
        let rounded = (high * scale).ceil() / scale;
        Some(if with_clip(rounded) <= bound { rounded } else { high })
    }
}

/// The DCG discount of a 0-based rank, 1 / log2(rank + 2): the gain a candidate ranking gives
/// a relevant result at that rank.
pub fn discount(rank: usize) -> f64 {
    1.0 / ((rank + 2) as f64).log2()
}

/// A counterfactual estimate of a candidate ranking's DCG of clicks, from clicks logged under
/// another ranking: for each click on a document at logged rank r that the candidate ranks at
/// j < cutoff, discount(j) / p_r, averaged over the logged impressions. Under the PBM the
/// expectation is the candidate's DCG with each document's attractiveness as its gain, over
/// the documents the logged rankings showed within the propensities' ranks (a document never
/// shown there counts 0: the estimate is biased low by what the log never showed, which
/// [`Counterfactual::unlogged`] measures).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Counterfactual {
    /// The IPS estimate (per logged impression).
    pub estimate: f64,
    /// Its standard error: the clicks' share (independent Bernoulli trials per showing with
    /// the observed rate of their cell, the position-based model's own assumption, given which
    /// pairs were shown how often) and the propensities' (the delta method over every rank's
    /// weight with the propensities' covariance), added in quadrature. When the propensities
    /// are estimated from the same clicks the two errors partly cancel (more clicks at a rank
    /// raise its propensity and lower its weight), which the sum leaves out: the interval errs
    /// wide, not narrow.
    pub stderr: f64,
    /// The clicks' share of the standard error alone.
    pub stderr_clicks: f64,
    /// The same average without weights: what the clicks say before position bias is removed.
    pub naive: f64,
    /// The logged impressions averaged over.
    pub impressions: u64,
    /// Candidate results within the cutoff of a logged query that no logged list showed within
    /// the propensities' ranks: each is a result the estimate cannot credit.
    pub unlogged: u64,
}

/// Scores a candidate against the table: `candidate_rank[pair]` is the 0-based rank the
/// candidate gives the pair's document for its query (`None`: not ranked or past the cutoff),
/// `impressions` the logged impressions of the queries evaluated, `unlogged` the count for
/// [`Counterfactual::unlogged`], which only the caller, holding the candidate, can count.
pub fn counterfactual(
    table: &ClickTable,
    candidate_rank: &[Option<usize>],
    propensities: &Propensities,
    impressions: u64,
    unlogged: u64,
) -> Counterfactual {
    let (mut weighted, mut naive, mut variance) = (0.0, 0.0, 0.0);
    // Per rank, the discounted clicks weighted there: the estimate is Σ_r S_r / p_r.
    let mut per_rank = vec![0.0; propensities.relative.len()];
    for (pair, rank, cell) in table.cells() {
        let Some(j) = candidate_rank.get(pair).copied().flatten() else { continue };
        let value = discount(j) * propensities.weight(rank);
        weighted += cell.clicks as f64 * value;
        if let Some(s) = per_rank.get_mut(rank) {
            *s += cell.clicks as f64 * discount(j);
        }
        naive += cell.clicks as f64 * discount(j);
        if cell.impressions > 0 {
            let rate = cell.clicks as f64 / cell.impressions as f64;
            variance += cell.impressions as f64 * rate * (1.0 - rate) * value * value;
        }
    }
    let n = impressions.max(1) as f64;
    // d(S_r / p_r)/dp_r = -S_r / p_r², where the weight is not clipped; the variance of
    // Σ_r S_r / p_r is gᵀ C g over that gradient g and the propensities' covariance C.
    let gradient: Vec<f64> = per_rank
        .iter()
        .zip(&propensities.relative)
        .map(|(s, &p)| if p > propensities.clip && p > 0.0 { -s / (p * p) } else { 0.0 })
        .collect();
    let mut from_propensities = 0.0;
    for (row, g_r) in propensities.covariance.iter().zip(&gradient) {
        for (c, g_s) in row.iter().zip(&gradient) {
            from_propensities += g_r * c * g_s;
        }
    }
    // A covariance rounded below positive semi-definite must not take a root of less than 0.
    let from_propensities = from_propensities.max(0.0);
    Counterfactual {
        estimate: weighted / n,
        stderr: (variance + from_propensities).sqrt() / n,
        stderr_clicks: variance.sqrt() / n,
        naive: naive / n,
        impressions,
        unlogged,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clicks::Cell;

    #[test]
    fn weights_are_clipped_and_unknown_ranks_count_nothing() {
        let p = Propensities { relative: vec![1.0, 0.5, 0.01, 0.0], covariance: vec![], clip: 0.1 };
        assert_eq!(p.weight(0), 1.0);
        assert_eq!(p.weight(1), 2.0);
        assert_eq!(p.weight(2), 10.0);
        assert_eq!(p.weight(3), 10.0);
        assert_eq!(p.weight(4), 0.0);
        let unclipped = Propensities { relative: vec![0.0], covariance: vec![], clip: 0.0 };
        assert_eq!(unclipped.weight(0), 0.0);
    }

    #[test]
    fn the_largest_sum_and_the_clip_that_bounds_it() {
        let p = Propensities { relative: vec![1.0, 0.05, 0.05, 1e-9], covariance: vec![], clip: 0.0 };
        assert_eq!(p.largest_sum(3), 41.0);
        assert!((p.largest_sum(100) - (41.0 + 1e9)).abs() < 1e-6);
        // Below τ = 0.05 the weights are 1, 20, 20 and 1 / τ: 41 + 1 / τ ≤ 1000 from τ = 1 / 959,
        // 0.0010428, which a user writes as 0.00105.
        let clip = p.smallest_clip_within(4, 1000.0).unwrap();
        assert!((clip - 0.00105).abs() < 1e-15, "{clip}");
        assert!(Propensities { clip, ..p.clone() }.largest_sum(4) <= 1000.0);
        assert!(Propensities { clip: 0.00104, ..p.clone() }.largest_sum(4) > 1000.0);
        assert_eq!(p.smallest_clip_within(4, 3.0), None);
        assert_eq!(p.smallest_clip_within(4, 4.0), Some(1.0));
    }

    #[test]
    fn a_click_counts_its_candidate_discount_over_its_logged_propensity() {
        let cell = |impressions, clicks| Cell { impressions, clicks };
        let table = ClickTable { max_rank: 2, pairs: vec![vec![(1, cell(4, 2))], vec![(0, cell(4, 1))]] };
        let mut p = Propensities { relative: vec![1.0, 0.5], covariance: vec![], clip: 0.0 };
        let out = counterfactual(&table, &[Some(0), None], &p, 4, 0);
        assert!((out.estimate - 2.0 * 2.0 / 4.0).abs() < 1e-12);
        assert!((out.naive - 2.0 / 4.0).abs() < 1e-12);
        assert!((out.stderr - (4.0f64 * 0.25 * 4.0).sqrt() / 4.0).abs() < 1e-12);
        // An estimated propensity adds (S / p² · se)² = (2 / 0.25 · 0.1)² to the variance of the sum.
        p.covariance = vec![vec![0.0, 0.0], vec![0.0, 0.01]];
        let out = counterfactual(&table, &[Some(0), None], &p, 4, 0);
        assert!((out.stderr - (4.0f64 + 0.64).sqrt() / 4.0).abs() < 1e-12);
        assert!((out.stderr_clicks - 0.5).abs() < 1e-12);
    }

    #[test]
    fn correlated_propensity_errors_add_their_covariance() {
        let cell = |impressions, clicks| Cell { impressions, clicks };
        // Clicks at ranks 2 and 3 (S = 1 each, candidate rank 1), propensities 0.5 and 0.25.
        let table = ClickTable { max_rank: 3, pairs: vec![vec![(1, cell(1, 1))], vec![(2, cell(1, 1))]] };
        let covariance = |c: f64| vec![vec![0.0; 3], vec![0.0, 0.01, c], vec![0.0, c, 0.0025]];
        let at = |c: f64| {
            let p = Propensities { relative: vec![1.0, 0.5, 0.25], covariance: covariance(c), clip: 0.0 };
            counterfactual(&table, &[Some(0), Some(0)], &p, 1, 0).stderr
        };
        // Gradient (−4, −16): 16 · 0.01 + 256 · 0.0025 + 2 · 64 · c.
        assert!((at(0.0) - (0.16f64 + 0.64).sqrt()).abs() < 1e-12);
        assert!((at(0.004) - (0.16f64 + 0.64 + 0.512).sqrt()).abs() < 1e-12);
        assert!((at(-0.004) - (0.16f64 + 0.64 - 0.512).sqrt()).abs() < 1e-12);
    }
}
