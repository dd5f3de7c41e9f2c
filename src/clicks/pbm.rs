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
//! Only ratios γ_r / γ_1 are identified (scaling every γ up and every α down by the same
//! factor fits the clicks equally well), which is all inverse-propensity weighting needs;
//! [`PbmFit::relative`] gives them, and [`relative_covariance`] their errors: the inverse of
//! the observed information of every parameter together (attractiveness per pair and
//! examination per rank, with γ_1 fixed at 1 as the identifying constraint), not of each γ
//! given the fitted α's, which leaves out how α and γ trade off and was measured at 0.41 to
//! 0.60 of the estimates' real spread.

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
    /// The covariance of the relative examinations γ_r / γ_1 ([`relative_covariance`]), a
    /// row and a column per rank; rank 1's, exact by definition, is 0, and so are those of
    /// ranks without a click or whose examination the clicks cannot tell from the
    /// attractiveness of what was shown there (no pair shown both there and at a rank joined
    /// to rank 1). `None` when rank 1 has no estimate, or the information is not positive
    /// definite.
    pub relative_covariance: Option<Vec<Vec<f64>>>,
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
    /// [`PbmFit::relative`] with each ratio's standard error from [`PbmFit::relative_covariance`]:
    /// 0 at rank 1, `None` where it has no estimate (a rank without a click, or examination
    /// not identified).
    pub fn relative_with_stderr(&self) -> Vec<Option<(f64, Option<f64>)>> {
        let covariance = self.relative_covariance.as_ref();
        self.relative()
            .into_iter()
            .enumerate()
            .map(|(rank, ratio)| {
                let variance = covariance.and_then(|c| c.get(rank)?.get(rank).copied());
                let stderr = variance.filter(|v| *v > 0.0 || rank == 0).map(f64::sqrt);
                Some((ratio?, stderr))
            })
            .collect()
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
    let mut log_likelihood = 0.0;
    for (pair, rank, cell) in table.cells() {
        let (clicks, unclicked) = (cell.clicks as f64, cell.impressions.saturating_sub(cell.clicks) as f64);
        let p = gamma[rank] * alpha[pair];
        // 0 · ln 0 is 0: a term only counts when it has showings.
        if clicks > 0.0 {
            log_likelihood += clicks * p.ln();
        }
        if unclicked > 0.0 {
            log_likelihood += unclicked * (1.0 - p).ln();
        }
    }
    let shown = |rank: usize| shown_per_rank[rank] > 0;
    let examination: Vec<Option<f64>> = (0..ranks).map(|r| shown(r).then(|| gamma[r])).collect();
    PbmFit {
        relative_covariance: relative_covariance(table, &alpha, &examination),
        examination,
        attractiveness: alpha,
        iterations,
        converged,
        log_likelihood,
    }
}

/// The covariance of the relative examinations γ_r / γ_1 at the fitted parameters: the inverse
/// of the observed information (minus the Hessian of the log-likelihood; Efron and Hinkley,
/// *Assessing the accuracy of the maximum likelihood estimator: observed versus expected
/// Fisher information*, Biometrika 1978) of every parameter together, restricted to the
/// examinations. The PBM's log-likelihood is Σ c ln(α γ) + u ln(1 − α γ) over cells of c
/// clicks and u showings without one (Chuklin, Markov, de Rijke 2015, §3.3), so with
/// p = α γ its observed information has, per cell,
///
/// ```text
/// J_αα = c/α² + u γ²/(1 − p)²,  J_γγ = c/γ² + u α²/(1 − p)²,  J_αγ = u/(1 − p)²
/// ```
///
/// summed over the cells each parameter is in. γ_1 is fixed at 1 (α and γ rescaled so, which
/// leaves every p and the likelihood as they are): without that constraint the information is
/// singular along the scale no click can tell. The α block is diagonal (a pair's α touches
/// only its own cells), so the examinations' covariance is the inverse of its Schur
/// complement S = J_γγ − J_γα J_αα⁻¹ J_αγ: a matrix of a side of the ranks, whatever the pairs.
///
/// Left out, as at the boundary of the parameter space where the information says nothing: a
/// pair never clicked (its α's maximum is 0, where its likelihood is 1 whatever γ is) and a
/// rank never clicked (its γ's maximum is 0; its row is 0). Left out as not identified: a
/// rank that no chain of clicked pairs, each shown at two of the ranks, joins to rank 1 (with
/// one fixed ranking per query, α and γ trade off freely; its row is 0 too, and
/// [`PbmFit::relative_with_stderr`] gives it no error). `None` when rank 1 has no estimate,
/// or S is not positive definite, which those rules leave to rounding.
pub fn relative_covariance(
    table: &ClickTable,
    attractiveness: &[f64],
    examination: &[Option<f64>],
) -> Option<Vec<Vec<f64>>> {
    let ranks = table.max_rank;
    let top = examination.first().copied().flatten().filter(|g| *g > 0.0)?;
    let clicked_at = table.per_rank();
    // Ranks joined by a clicked pair shown at both: a rank not joined to rank 1 this way has
    // an examination only its pairs' attractiveness can make up for, whatever the clicks.
    let mut group: Vec<usize> = (0..ranks).collect();
    for cells in &table.pairs {
        let mut tracked = cells.iter().filter(|(rank, _)| usize::from(*rank) < ranks);
        if !cells.iter().any(|(rank, cell)| usize::from(*rank) < ranks && cell.clicks > 0) {
            continue;
        }
        let Some(&(first, _)) = tracked.next() else { continue };
        for &(rank, _) in tracked {
            let (a, b) = (root(&mut group, usize::from(first)), root(&mut group, usize::from(rank)));
            group[a.max(b)] = a.min(b);
        }
    }
    // The free examinations (ranks 2 and down with a click, joined to rank 1): their index in S.
    let mut free = vec![None; ranks];
    let mut count = 0;
    for rank in 1..ranks {
        if clicked_at[rank].clicks > 0 && examination[rank].is_some_and(|g| g > 0.0) && root(&mut group, rank) == 0 {
            free[rank] = Some(count);
            count += 1;
        }
    }
    let gamma = |rank: usize| examination[rank].unwrap_or(0.0) / top;
    let mut schur = vec![vec![0.0; count]; count];
    // One pair's J_αα and its J_αγ per free rank (at most one entry per rank it was shown at).
    let mut coupling: Vec<(usize, f64)> = Vec::with_capacity(ranks);
    for (pair, cells) in table.pairs.iter().enumerate() {
        let tracked = || cells.iter().filter(|(rank, _)| usize::from(*rank) < ranks);
        if tracked().all(|(_, cell)| cell.clicks == 0) {
            continue;
        }
        let a = attractiveness[pair] * top;
        let mut j_aa = 0.0;
        coupling.clear();
        for &(rank, cell) in tracked() {
            let rank = usize::from(rank);
            let (c, u) = (cell.clicks as f64, cell.impressions.saturating_sub(cell.clicks) as f64);
            let g = gamma(rank);
            let p = a * g;
            let not = (1.0 - p) * (1.0 - p);
            j_aa += c / (a * a) + if u > 0.0 { u * g * g / not } else { 0.0 };
            if let Some(k) = free[rank] {
                schur[k][k] += c / (g * g) + if u > 0.0 { u * a * a / not } else { 0.0 };
                if u > 0.0 {
                    coupling.push((k, u / not));
                }
            }
        }
        for &(k, x) in &coupling {
            for &(l, y) in &coupling {
                schur[k][l] -= x * y / j_aa;
            }
        }
    }
    let inverse = invert_positive_definite(&schur)?;
    let mut covariance = vec![vec![0.0; ranks]; ranks];
    for (r, k) in free.iter().enumerate() {
        for (s, l) in free.iter().enumerate() {
            if let (Some(k), Some(l)) = (k, l) {
                covariance[r][s] = inverse[*k][*l];
            }
        }
    }
    Some(covariance)
}

/// The representative of a rank's group (union-find: the lowest rank joined to it).
fn root(group: &mut [usize], mut rank: usize) -> usize {
    while group[rank] != rank {
        group[rank] = group[group[rank]];
        rank = group[rank];
    }
    rank
}

/// The inverse of a symmetric positive definite matrix by its Cholesky factor; `None` when a
/// pivot is not positive or, relative to its diagonal entry, lost to rounding (a singular
/// matrix computed in floating point rarely has an exact 0 pivot).
// Indices read as the algebra is written; iterators over rows and columns at once would not.
#[allow(clippy::needless_range_loop)]
fn invert_positive_definite(matrix: &[Vec<f64>]) -> Option<Vec<Vec<f64>>> {
    let n = matrix.len();
    let mut l = vec![vec![0.0; n]; n];
    for i in 0..n {
        for j in 0..=i {
            let sum: f64 = (0..j).map(|k| l[i][k] * l[j][k]).sum();
            if i == j {
                let pivot = matrix[i][i] - sum;
                let positive = pivot.is_finite() && pivot > 1e-9 * matrix[i][i];
                if !positive {
                    return None;
                }
                l[i][i] = pivot.sqrt();
            } else {
                l[i][j] = (matrix[i][j] - sum) / l[j][j];
            }
        }
    }
    // L⁻¹ by forward substitution, then A⁻¹ = L⁻ᵀ L⁻¹.
    let mut l_inv = vec![vec![0.0; n]; n];
    for i in 0..n {
        l_inv[i][i] = 1.0 / l[i][i];
        for j in 0..i {
            let sum: f64 = (j..i).map(|k| l[i][k] * l_inv[k][j]).sum();
            l_inv[i][j] = -sum / l[i][i];
        }
    }
    let mut inverse = vec![vec![0.0; n]; n];
    for i in 0..n {
        for j in 0..=i {
            let value: f64 = (i..n).map(|k| l_inv[k][i] * l_inv[k][j]).sum();
            inverse[i][j] = value;
            inverse[j][i] = value;
        }
    }
    Some(inverse)
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

    /// The log-likelihood at α' (per pair) and γ' (ranks 2 on, γ'_1 = 1), for the numerical
    /// Hessian.
    fn log_likelihood(table: &ClickTable, theta: &[f64]) -> f64 {
        let pairs = table.pairs.len();
        let gamma = |rank: usize| if rank == 0 { 1.0 } else { theta[pairs + rank - 1] };
        table
            .cells()
            .map(|(pair, rank, cell)| {
                let p = theta[pair] * gamma(rank);
                let (c, u) = (cell.clicks as f64, (cell.impressions - cell.clicks) as f64);
                c * p.ln() + u * (1.0 - p).ln()
            })
            .sum()
    }

    #[test]
    fn the_covariance_is_the_inverse_of_a_numerical_hessian_of_the_log_likelihood() {
        // 3 queries × 3 documents, every pair shown at every rank and clicked: 9 α's and 2 free γ's.
        let (table, _) = pbm_table(&[1.0, 0.6, 0.35], 3, 900, 3);
        let fit = fit(&table, EmSettings { max_iterations: 5000, tolerance: 1e-12 });
        let top = fit.examination[0].unwrap();
        let mut theta: Vec<f64> = fit.attractiveness.iter().map(|a| a * top).collect();
        theta.extend(fit.examination[1..].iter().map(|g| g.unwrap() / top));
        let n = theta.len();
        let h = 1e-4;
        let mut information = vec![vec![0.0; n]; n];
        for i in 0..n {
            for j in 0..n {
                let at = |di: f64, dj: f64| {
                    let mut t = theta.clone();
                    t[i] += di;
                    t[j] += dj;
                    log_likelihood(&table, &t)
                };
                information[i][j] = -(at(h, h) - at(h, -h) - at(-h, h) + at(-h, -h)) / (4.0 * h * h);
            }
        }
        let inverse = invert_positive_definite(&information).expect("positive definite at the maximum");
        let covariance = fit.relative_covariance.as_ref().unwrap();
        assert!(covariance[0].iter().all(|c| *c == 0.0), "γ_1 is fixed");
        for r in 1..3 {
            for s in 1..3 {
                let (got, want) = (covariance[r][s], inverse[9 + r - 1][9 + s - 1]);
                assert!((got - want).abs() <= 1e-5 * want.abs(), "({r}, {s}): {got} vs the numerical {want}");
            }
        }
        let stderr = fit.relative_with_stderr();
        assert_eq!(stderr[0], Some((1.0, Some(0.0))));
        assert!((stderr[2].unwrap().1.unwrap() - inverse[10][10].sqrt()).abs() < 1e-6);
    }

    #[test]
    fn examination_without_rank_swaps_has_no_standard_error() {
        // Every pair always at one rank: α and γ trade off freely, so γ is not identified.
        let cell = |impressions, clicks| Cell { impressions, clicks };
        let table = ClickTable {
            max_rank: 2,
            pairs: vec![vec![(0, cell(100, 40))], vec![(1, cell(100, 20))], vec![(1, cell(50, 5))]],
        };
        let fit = fit(&table, EmSettings::default());
        assert_eq!(fit.relative_covariance, Some(vec![vec![0.0; 2]; 2]));
        assert_eq!(fit.relative_with_stderr()[1].map(|(_, se)| se), Some(None));
        // One pair shown at both ranks identifies it.
        let mut swapped = table.clone();
        swapped.pairs[0].push((1, cell(100, 25)));
        let fit = super::fit(&swapped, EmSettings::default());
        assert!(fit.relative_with_stderr()[1].unwrap().1.unwrap() > 0.0);
    }

    #[test]
    fn a_rank_never_clicked_has_no_standard_error_and_the_others_keep_theirs() {
        let (mut table, _) = pbm_table(&[1.0, 0.6, 0.35], 3, 900, 3);
        for cells in &mut table.pairs {
            cells.iter_mut().filter(|(r, _)| *r == 2).for_each(|(_, c)| c.clicks = 0);
        }
        let stderr = fit(&table, EmSettings::default()).relative_with_stderr();
        assert!(stderr[1].unwrap().1.unwrap() > 0.0);
        assert_eq!(stderr[2].unwrap().1, None);
    }

    #[test]
    fn all_clicked_showings_do_not_divide_by_zero() {
        let table = ClickTable { max_rank: 1, pairs: vec![vec![(0, Cell { impressions: 3, clicks: 3 })]] };
        let fit = fit(&table, EmSettings::default());
        assert!(fit.examination[0].unwrap().is_finite() && fit.attractiveness[0].is_finite());
    }
}
