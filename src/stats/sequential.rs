//! Anytime-valid inference: figures that stay valid however often they are looked at.
//!
//! A fixed-horizon p-value is valid once, at a sample size chosen in advance; a live feed is
//! looked at every minute. The figures here hold *uniformly over time*: the probability that the
//! confidence sequence ever misses the true difference, at any look, is at most α, so a team may
//! watch them continuously and stop the first time they are conclusive.
//!
//! * [`MixtureBoundary`] and [`sequential_difference`]: the asymptotic confidence sequence of
//!   Waudby-Smith, Arbour, Sinha, Kennedy and Ramdas (2024, "Time-uniform central limit theory
//!   and asymptotic confidence sequences", Annals of Statistics; arXiv 2103.06476, eq. (14)
//!   with the tuning of their Section 2.3), which is the Gaussian-mixture sequential
//!   probability ratio test of Johari, Pekelis and Walsh (2017/2022, "Always valid inference: continuous monitoring of A/B tests",
//!   Operations Research) on the estimated difference, with the mixture variance tied to the
//!   per-impression variance. The p-value is 1 / the mixture likelihood ratio.
//! * [`RunningFigures`]: the running intersection of the intervals and the running minimum of the
//!   p-values over the looks (both are still valid: the error event is the same), so a lower
//!   bound never falls, an upper bound never rises and a p-value never increases. The
//!   intersection can come out empty. The guarantee (Howard, Ramdas, McAuliffe and Sekhon 2021,
//!   "Time-uniform, nonparametric, nonasymptotic confidence sequences", Annals of Statistics
//!   49(2); Waudby-Smith et al. 2024) is for one parameter, constant over time, of i.i.d.
//!   observations: under it every look covers that value, so the intersection is empty with
//!   probability at most α. Empty, it is evidence against the assumption (an effect present
//!   early only, a drifting one), not an interval: it is reported as empty
//!   ([`RunningFigures::difference_cs_empty`]), never as a lower bound above an upper one.
//! * [`sequential_sample_ratio`]: Lindon and Malek's sequential multinomial test (2022,
//!   "Anytime-valid inference for multinomial count data", NeurIPS), the Bayes factor of a
//!   Dirichlet mixture against the expected split: the split alarm, watched continuously.
//!
//! Pure math over the same mergeable sums as [`super`]; `tests/ab_sequential.rs` holds it to an
//! independent Python reference (itself checked against `confseq` and `savvi` from PyPI) within
//! 1e-6, and simulates thousands of A/A experiments watched at 100 looks each.

use serde::{Deserialize, Serialize};
use statrs::function::gamma::ln_gamma;

use super::Estimate;

/// The boundary's one tuning constant, in the form both papers share: the mixture of a normal
/// prior on the standardized effect, whose variance ρ² sets the sample size at which the
/// boundary is tightest.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MixtureBoundary {
    /// ρ² per impression: the mixture variance of the effect in units of the per-impression
    /// variance (Johari et al.'s τ² = ρ² σ²).
    rho_squared: f64,
    /// ln α of the level the boundary is for (`1 - ab.confidence`).
    ln_alpha: f64,
}

impl MixtureBoundary {
    /// The boundary at level `alpha` that is tightest after `sample_size` impressions of both
    /// arms together (`ab.sequential_sample_size`): ρ² = (−2 ln α + ln(1 − 2 ln α)) / n*
    /// (Waudby-Smith et al. 2024, Section 2.3; GrowthBook's "tuning parameter").
    pub fn tightest_at(sample_size: f64, alpha: f64) -> Self {
        let ln_alpha = alpha.ln();
        let rho_squared = (-2.0 * ln_alpha + (1.0 - 2.0 * ln_alpha).ln()) / sample_size;
        MixtureBoundary { rho_squared, ln_alpha }
    }

    /// Half the width of the confidence sequence after `n` observations of an estimate with
    /// variance `variance` (its squared standard error):
    /// sqrt(V (nρ² + 1) / (nρ²) (ln(nρ² + 1) − 2 ln α)).
    pub fn half_width(&self, n: f64, variance: f64) -> f64 {
        let t = n * self.rho_squared;
        (variance * (t + 1.0) / t * ((t + 1.0).ln() - 2.0 * self.ln_alpha)).sqrt()
    }

    /// The always-valid p-value of "the effect is 0" at this look: 1 / Λ, the mixture
    /// likelihood ratio Λ = (nρ² + 1)^(−1/2) exp(nρ² / (nρ² + 1) · Δ² / (2V)), capped at 1.
    /// It is below α exactly when 0 is outside the confidence sequence.
    pub fn p_value(&self, n: f64, estimate: f64, variance: f64) -> f64 {
        let t = n * self.rho_squared;
        let ln_lambda = -0.5 * (t + 1.0).ln() + t / (t + 1.0) * estimate * estimate / (2.0 * variance);
        (-ln_lambda).exp().min(1.0)
    }
}

/// One look at treatment against control on one metric.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SequentialLook {
    /// Confidence sequence of mean(treatment) − mean(control) at this look.
    pub difference_cs: [f64; 2],
    /// Of the relative difference (difference / mean(control), delta method); absent when the
    /// control mean is 0 or the delta-method variance is 0 or not finite (a treatment constant
    /// at 0, no click yet, gives variance 0 and the zero-width [−1, −1], which is no interval).
    pub relative_difference_cs: Option<[f64; 2]>,
    /// Always-valid p-value of "no difference" at this look.
    pub p_value: f64,
}

/// The sequential figures of one look, from the same estimates as Welch's test (plain or
/// cluster-robust standard errors); `None` when a side has no standard error yet or neither
/// side varies. The sample size is the impressions of both arms, the time scale the boundary is
/// tuned in.
pub fn sequential_difference(
    treatment: &Estimate,
    control: &Estimate,
    boundary: &MixtureBoundary,
) -> Option<SequentialLook> {
    let (se_t, se_c) = (treatment.se?, control.se?);
    let (v_t, v_c) = (se_t * se_t, se_c * se_c);
    let variance = v_t + v_c;
    if variance <= 0.0 || !variance.is_finite() {
        return None;
    }
    let n = (treatment.n + control.n) as f64;
    let difference = treatment.mean - control.mean;
    let half = boundary.half_width(n, variance);
    let relative_difference_cs = super::relative_variance(treatment, control).map(|v_rel| {
        let mc = control.mean;
        let half = boundary.half_width(n, v_rel);
        [difference / mc - half, difference / mc + half]
    });
    Some(SequentialLook {
        difference_cs: [difference - half, difference + half],
        relative_difference_cs,
        p_value: boundary.p_value(n, difference, variance),
    })
}

/// What the looks so far say together: the intersection of every look's interval and the least
/// p-value. A new look can only narrow the intervals and lower the p-value.
///
/// The bounds are kept as they fold, also once the lower passes the upper (an empty
/// intersection: see the module documentation), so the state is a plain fold that replicas and
/// replay reproduce; the accessors never hand out such a pair.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RunningFigures {
    /// Running intersection of the difference's confidence sequence (infinite before a look;
    /// lower above upper once empty).
    pub difference_cs: [f64; 2],
    /// Running intersection of the relative difference's (infinite before a look with a
    /// relative interval; lower above upper once empty).
    pub relative_difference_cs: [f64; 2],
    /// Running minimum of the always-valid p-value (1 before a look).
    pub p_value: f64,
    /// Looks that had figures to take (both arms with a standard error).
    pub looks: u64,
}

impl Default for RunningFigures {
    fn default() -> Self {
        RunningFigures {
            difference_cs: [f64::NEG_INFINITY, f64::INFINITY],
            relative_difference_cs: [f64::NEG_INFINITY, f64::INFINITY],
            p_value: 1.0,
            looks: 0,
        }
    }
}

fn intersect(running: &mut [f64; 2], look: [f64; 2]) {
    running[0] = running[0].max(look[0]);
    running[1] = running[1].min(look[1]);
}

impl RunningFigures {
    /// Takes one look.
    pub fn look(&mut self, look: &SequentialLook) {
        intersect(&mut self.difference_cs, look.difference_cs);
        if let Some(relative) = look.relative_difference_cs {
            intersect(&mut self.relative_difference_cs, relative);
        }
        self.p_value = self.p_value.min(look.p_value);
        self.looks += 1;
    }

    /// The difference's interval, once a look gave one, while the intersection is not empty.
    pub fn difference_cs(&self) -> Option<[f64; 2]> {
        bounded(self.difference_cs)
    }

    /// Whether the looks' intervals of the difference have no value in common.
    pub fn difference_cs_empty(&self) -> bool {
        empty(self.difference_cs)
    }

    /// The relative difference's interval, once a look gave one, while the intersection is not
    /// empty.
    pub fn relative_difference_cs(&self) -> Option<[f64; 2]> {
        bounded(self.relative_difference_cs)
    }

    /// Whether the looks' intervals of the relative difference have no value in common.
    pub fn relative_difference_cs_empty(&self) -> bool {
        empty(self.relative_difference_cs)
    }
}

fn bounded(cs: [f64; 2]) -> Option<[f64; 2]> {
    (cs[0].is_finite() && cs[1].is_finite() && !empty(cs)).then_some(cs)
}

// NaN never reaches the running bounds (f64::max and min skip it), so this is the whole test.
fn empty(cs: [f64; 2]) -> bool {
    cs[0] > cs[1]
}

/// The concentration of the Dirichlet mixture of [`sequential_sample_ratio`]: its prior is
/// Dirichlet(k · expected shares). 100 is the default of Lindon and Malek's `savvi` package: a
/// prior about as informative as 100 observations, sensitive to mismatches of a few percent
/// within thousands of units.
pub const SSRM_CONCENTRATION: f64 = 100.0;

/// The always-valid p-value of Lindon and Malek's sequential sample-ratio test at counts
/// `observed` against `expected_shares` (which sum to 1): 1 / the Bayes factor of a
/// Dirichlet(k · shares) mixture against the expected split,
/// B(k θ + x) / B(k θ) / Π θ_i^x_i with B the multivariate beta function, capped at 1. The
/// factor depends on the counts only (its sequential updates telescope), so it is computed from
/// the mergeable totals. `None` with fewer than two variants or no traffic.
pub fn sequential_sample_ratio(observed: &[u64], expected_shares: &[f64], concentration: f64) -> Option<f64> {
    debug_assert_eq!(observed.len(), expected_shares.len());
    if observed.len() < 2 || observed.iter().all(|&o| o == 0) || expected_shares.iter().any(|&s| s <= 0.0) {
        return None;
    }
    let ln_beta = |a: &mut dyn Iterator<Item = f64>| {
        let (mut sum, mut total) = (0.0, 0.0);
        for a in a {
            sum += ln_gamma(a);
            total += a;
        }
        sum - ln_gamma(total)
    };
    let prior = || expected_shares.iter().map(|&s| concentration * s);
    let posterior = prior().zip(observed).map(|(a, &x)| a + x as f64);
    let ln_likelihood_null: f64 =
        observed.iter().zip(expected_shares).map(|(&x, &s)| if x == 0 { 0.0 } else { x as f64 * s.ln() }).sum();
    let ln_bayes_factor = ln_beta(&mut posterior.into_iter()) - ln_beta(&mut prior()) - ln_likelihood_null;
    Some((-ln_bayes_factor).exp().min(1.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{estimate, Moments};

    fn arm(n: u64, mean: f64, sd: f64) -> Estimate {
        let nf = n as f64;
        let sum = mean * nf;
        let sum_squares = sd * sd * (nf - 1.0) + sum * mean;
        estimate(Moments { n, sum, sum_squares }, None, 0.95)
    }

    #[test]
    fn the_interval_and_the_p_value_agree_on_zero() {
        let boundary = MixtureBoundary::tightest_at(5000.0, 0.05);
        for delta in [0.0, 0.01, 0.02, 0.03, 0.05, 0.1] {
            let look = sequential_difference(&arm(4000, 0.5 + delta, 0.4), &arm(4000, 0.5, 0.4), &boundary).unwrap();
            let excludes_zero = look.difference_cs[0] > 0.0;
            assert_eq!(excludes_zero, look.p_value < 0.05, "delta {delta}: {look:?}");
        }
    }

    #[test]
    fn wider_than_the_fixed_horizon_interval_and_tightest_near_the_tuned_size() {
        let boundary = MixtureBoundary::tightest_at(5000.0, 0.05);
        // Relative to sqrt(V): 1.96 for a fixed-horizon interval at any n.
        let ratio = |n: f64| boundary.half_width(n, 1.0) / 1.959963984540054;
        let at_tuned = ratio(5000.0);
        assert!(at_tuned > 1.0 && at_tuned < 1.6, "{at_tuned}");
        assert!(ratio(500.0) > at_tuned && ratio(500_000.0) > at_tuned);
        // ... and the p-value is at least the fixed-horizon one's at the same z.
        let z: f64 = 2.5;
        let fixed = 2.0 * statrs::distribution::ContinuousCDF::sf(&statrs::distribution::Normal::standard(), z);
        assert!(boundary.p_value(5000.0, z, 1.0) > fixed);
    }

    #[test]
    fn running_figures_only_narrow() {
        let mut running = RunningFigures::default();
        assert_eq!((running.difference_cs(), running.p_value), (None, 1.0));
        running.look(&SequentialLook { difference_cs: [-1.0, 2.0], relative_difference_cs: None, p_value: 0.4 });
        running.look(&SequentialLook {
            difference_cs: [-2.0, 1.0],
            relative_difference_cs: Some([0.0, 1.0]),
            p_value: 0.6,
        });
        assert_eq!(running.difference_cs(), Some([-1.0, 1.0]));
        assert_eq!(running.relative_difference_cs(), Some([0.0, 1.0]));
        assert_eq!((running.p_value, running.looks), (0.4, 2));
    }

    #[test]
    fn a_treatment_without_clicks_yet_has_no_relative_sequence() {
        // Treatment constant at 0 while the control varies: the delta-method variance of the
        // relative difference is 0, which gave the zero-width [-1, -1].
        let boundary = MixtureBoundary::tightest_at(5000.0, 0.05);
        let look = sequential_difference(&arm(50, 0.0, 0.0), &arm(400, 0.5, 0.4), &boundary).unwrap();
        assert_eq!(look.relative_difference_cs, None);
        assert!(look.difference_cs[0] < look.difference_cs[1], "{look:?}");
        // Constant at a nonzero value, the control's spread still gives the ratio one.
        let look = sequential_difference(&arm(50, 1.0, 0.0), &arm(400, 0.5, 0.4), &boundary).unwrap();
        assert!(look.relative_difference_cs.is_some_and(|[lo, hi]| lo < hi), "{look:?}");
    }

    #[test]
    fn an_empty_intersection_is_reported_as_empty_never_inverted() {
        let mut running = RunningFigures::default();
        let look =
            |cs, relative, p_value| SequentialLook { difference_cs: cs, relative_difference_cs: relative, p_value };
        running.look(&look([0.3, 0.5], Some([0.5, 1.0]), 0.001));
        running.look(&look([0.1, 0.2], Some([0.6, 0.9]), 0.02));
        assert_eq!((running.difference_cs(), running.difference_cs_empty()), (None, true));
        assert_eq!(
            (running.relative_difference_cs(), running.relative_difference_cs_empty()),
            (Some([0.6, 0.9]), false)
        );
        assert_eq!((running.p_value, running.looks), (0.001, 2));
        // It stays empty: a later look cannot widen it again.
        running.look(&look([-1.0, 1.0], None, 0.5));
        assert!(running.difference_cs_empty() && running.difference_cs().is_none());
        assert!(!RunningFigures::default().difference_cs_empty(), "no look is not an empty intersection");
    }

    #[test]
    fn sample_ratio_matches_a_worked_example() {
        // savvi.Multinomial(0.05, np.array([0.5, 0.5]), k=100); update([5500, 4500]); 1/odds
        //   = 2.9248540706784596e-21; an exact 50/50 split gives 10.07, capped at 1 here.
        let p = sequential_sample_ratio(&[5500, 4500], &[0.5, 0.5], SSRM_CONCENTRATION).unwrap();
        assert!((p.ln() - 2.9248540706784596e-21f64.ln()).abs() < 1e-9, "{p}");
        assert_eq!(sequential_sample_ratio(&[5000, 5000], &[0.5, 0.5], SSRM_CONCENTRATION), Some(1.0));
        assert_eq!(sequential_sample_ratio(&[0, 0], &[0.5, 0.5], SSRM_CONCENTRATION), None);
    }
}
