//! The position-based click model (PBM) fitted by expectation-maximization.
//!
//! A result at rank r is clicked when it is examined (probability `examination[r]`, the same
//! for every query) and found attractive (`attractiveness[pair]`, the same at every rank):
//! P(C = 1) = γ_r α_qd (Chuklin, Markov, de Rijke, *Click Models for Web Search*, 2015, §3.3).
//! Clicks at different ranks are independent given the list, so the likelihood depends on
//! the data only through each pair's shown and clicked counts per rank: the EM of §4.2, which
//! the book writes per session, is run here on those counts, which gives the same iterates.
//!
//! One iteration updates every parameter from the previous iteration's values. A click tells
//! that the result was examined and attractive; a result not clicked was attractive with
//! probability α(1 − γ)/(1 − γα) and examined with probability γ(1 − α)/(1 − γα). The new α of
//! a pair is the mean of its posterior attractiveness over every showing; the new γ of a rank
//! the mean of the posterior examination over every showing at that rank.
//!
//! Only ratios γ_r / γ_1 are identified in practice (scaling every γ up and every α down by
//! the same factor fits the clicks about as well), which is all inverse-propensity weighting
//! needs; [`PbmFit::relative`] gives them.

use super::ClickTable;

/// How long EM runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EmSettings {
    /// At most this many iterations.
    pub max_iterations: usize,
    /// Stops earlier once no parameter moved by more than this in an iteration (0: never).
    pub tolerance: f64,
}

impl Default for EmSettings {
    fn default() -> Self {
        EmSettings { max_iterations: 200, tolerance: 1e-7 }
    }
}

/// The starting value of every parameter: the book's uninformed start, and what the reference
/// implementation in `tests/clicks/reference.py` starts from.
pub const START: f64 = 0.5;

/// A fitted PBM.
#[derive(Debug, Clone, PartialEq)]
pub struct PbmFit {
    /// γ per rank; `None` for a rank nothing was shown at.
    pub examination: Vec<Option<f64>>,
    /// The standard error of each γ given the fitted α's (the inverse square root of the
    /// observed information in γ_r alone): it leaves out the α's own uncertainty, so it is a
    /// lower bound, tight when every pair has many showings.
    pub examination_stderr: Vec<Option<f64>>,
    /// α per pair, in the table's order.
    pub attractiveness: Vec<f64>,
    /// The iterations run.
    pub iterations: usize,
    /// Whether it stopped by the tolerance rather than the iteration limit.
    pub converged: bool,
    /// The log-likelihood of the table's clicks under the fitted parameters.
    pub log_likelihood: f64,
}

impl PbmFit {
    /// [`PbmFit::relative`] with standard errors by the delta method over the two
    /// examinations' errors (taken as independent): ratio · √((se_r/γ_r)² + (se_1/γ_1)²).
    pub fn relative_with_stderr(&self) -> Vec<Option<(f64, f64)>> {
        let top = self.examination.first().copied().flatten().filter(|&g| g > 0.0);
        let top_se = self.examination_stderr.first().copied().flatten().unwrap_or(0.0);
        let mut out = Vec::with_capacity(self.examination.len());
        for (rank, (g, se)) in self.examination.iter().zip(&self.examination_stderr).enumerate() {
            let (Some(g), Some(top)) = (*g, top) else {
                out.push(None);
                continue;
            };
            let ratio = g / top;
            let se =
                if rank == 0 { 0.0 } else { ratio * ((se.unwrap_or(0.0) / g).powi(2) + (top_se / top).powi(2)).sqrt() };
            out.push(Some((ratio, se)));
        }
        out
    }

    /// γ_r / γ_1 per rank: the position-bias propensities relative to the top rank.
    pub fn relative(&self) -> Vec<Option<f64>> {
        let top = self.examination.first().copied().flatten().filter(|&g| g > 0.0);
        self.examination.iter().map(|g| Some((*g)? / top?)).collect()
    }
}

/// The posterior probabilities that an unclicked showing was (attractive, examined): the
/// E-step for one cell. `None` when the parameters say a non-click cannot happen (γα = 1),
/// which no iterate reaches from [`START`] unless every showing was clicked.
fn unclicked_posteriors(alpha: f64, gamma: f64) -> Option<(f64, f64)> {
    let not_clicked = 1.0 - gamma * alpha;
    (not_clicked > 0.0).then(|| (alpha * (1.0 - gamma) / not_clicked, gamma * (1.0 - alpha) / not_clicked))
}

/// Fits the PBM to `table` by EM from [`START`].
pub fn fit(table: &ClickTable, settings: EmSettings) -> PbmFit {
    let ranks = table.max_rank;
    let mut alpha = vec![START; table.pairs.len()];
    let mut gamma = vec![START; ranks];
    let shown_per_rank: Vec<u64> = table.per_rank().iter().map(|c| c.impressions).collect();
    let shown_per_pair: Vec<u64> = (0..table.pairs.len()).map(|p| table.pair_total(p).impressions).collect();
    let (mut iterations, mut converged) = (0, false);
    let mut alpha_sum = vec![0.0; alpha.len()];
    let mut gamma_sum = vec![0.0; ranks];
    while iterations < settings.max_iterations {
        alpha_sum.iter_mut().for_each(|s| *s = 0.0);
        gamma_sum.iter_mut().for_each(|s| *s = 0.0);
        for (pair, rank, cell) in table.cells() {
            let (a, g) = (alpha[pair], gamma[rank]);
            let (clicks, unclicked) = (cell.clicks as f64, cell.impressions.saturating_sub(cell.clicks) as f64);
            let (attractive, examined) = unclicked_posteriors(a, g).unwrap_or((0.0, 0.0));
            alpha_sum[pair] += clicks + unclicked * attractive;
            gamma_sum[rank] += clicks + unclicked * examined;
        }
        let mut moved: f64 = 0.0;
        for (a, (sum, &n)) in alpha.iter_mut().zip(alpha_sum.iter().zip(&shown_per_pair)) {
            if n > 0 {
                let next = sum / n as f64;
                moved = moved.max((next - *a).abs());
                *a = next;
            }
        }
        for (g, (sum, &n)) in gamma.iter_mut().zip(gamma_sum.iter().zip(&shown_per_rank)) {
            if n > 0 {
                let next = sum / n as f64;
                moved = moved.max((next - *g).abs());
                *g = next;
            }
        }
        iterations += 1;
        if moved <= settings.tolerance {
            converged = true;
            break;
        }
    }
    let mut information = vec![0.0; ranks];
    let mut log_likelihood = 0.0;
    for (pair, rank, cell) in table.cells() {
        let (a, g) = (alpha[pair], gamma[rank]);
        let (clicks, unclicked) = (cell.clicks as f64, cell.impressions.saturating_sub(cell.clicks) as f64);
        let p = g * a;
        // 0 · ln 0 is 0: a term only counts when it has showings.
        if clicks > 0.0 {
            log_likelihood += clicks * p.ln();
            information[rank] += clicks / (g * g);
        }
        if unclicked > 0.0 {
            log_likelihood += unclicked * (1.0 - p).ln();
            information[rank] += unclicked * a * a / ((1.0 - p) * (1.0 - p));
        }
    }
    let shown = |rank: usize| shown_per_rank[rank] > 0;
    PbmFit {
        examination: (0..ranks).map(|r| shown(r).then(|| gamma[r])).collect(),
        examination_stderr: (0..ranks)
            .map(|r| (shown(r) && information[r] > 0.0).then(|| information[r].sqrt().recip()))
            .collect(),
        attractiveness: alpha,
        iterations,
        converged,
        log_likelihood,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clicks::simulate::pbm_table;
    use crate::clicks::Cell;

    #[test]
    fn recovers_the_relative_examination_of_a_position_based_user() {
        let truth = [1.0, 0.7, 0.5, 0.35, 0.25];
        let (table, alpha) = pbm_table(&truth, 30, 20_000, 7);
        let fit = fit(&table, EmSettings { max_iterations: 500, tolerance: 1e-9 });
        for (rank, (estimate, truth)) in fit.relative().iter().zip(truth).enumerate() {
            let estimate = estimate.unwrap();
            assert!((estimate - truth).abs() < 0.03, "rank {rank}: {estimate} vs {truth}");
        }
        // α is recovered up to the common scale of γ_1.
        let scale = fit.examination[0].unwrap();
        let worst = fit.attractiveness.iter().zip(&alpha).map(|(a, t)| (a * scale - t).abs()).fold(0.0, f64::max);
        assert!(worst < 0.1, "attractiveness off by {worst}");
    }

    #[test]
    fn each_iteration_does_not_lower_the_likelihood() {
        let (table, _) = pbm_table(&[0.9, 0.6, 0.3], 5, 500, 1);
        let mut previous = f64::NEG_INFINITY;
        for iterations in 1..30 {
            let ll = fit(&table, EmSettings { max_iterations: iterations, tolerance: 0.0 }).log_likelihood;
            assert!(ll >= previous - 1e-9, "iteration {iterations}: {ll} < {previous}");
            previous = ll;
        }
    }

    #[test]
    fn ranks_without_showings_and_empty_tables_have_no_estimate() {
        let table = ClickTable { max_rank: 3, pairs: vec![vec![(0, Cell { impressions: 4, clicks: 2 })]] };
        let fit = fit(&table, EmSettings::default());
        assert!(fit.examination[0].is_some());
        assert_eq!(&fit.examination[1..], &[None, None]);
        assert_eq!(fit.relative()[1], None);
        let empty = super::fit(&ClickTable { max_rank: 2, pairs: vec![] }, EmSettings::default());
        assert_eq!(empty.examination, vec![None, None]);
        assert!(empty.converged);
    }

    #[test]
    fn all_clicked_showings_do_not_divide_by_zero() {
        let table = ClickTable { max_rank: 1, pairs: vec![vec![(0, Cell { impressions: 3, clicks: 3 })]] };
        let fit = fit(&table, EmSettings::default());
        assert!(fit.examination[0].unwrap().is_finite() && fit.attractiveness[0].is_finite());
    }
}
