//! CUPED: a ratio metric adjusted by its own pre-experiment value, unit bucket by unit bucket.
//!
//! Deng, Xu, Kohavi and Walker, "Improving the sensitivity of online controlled experiments by
//! utilizing pre-experiment data", WSDM 2013: Ŷ_cv = Ȳ − θ(X̄ − E X), θ = cov(Y, X) / var(X),
//! which is unbiased for any θ and has variance var(Ȳ)(1 − ρ²) at the best one. rankpulse's
//! metrics are ratios over clusters (the metric summed over a bucket of whole units, over the
//! bucket's impressions), so both Y and X are ratios and their variances and covariance are the
//! delta method's over buckets (the paper's section 3.3 and its appendix B).
//!
//! The figures are GrowthBook's (gbstats 0.8.0, `RegressionAdjustedStatistic`, `compute_theta`
//! and `TwoSidedTTest`), generalised from per-unit means to per-bucket ratios:
//!
//! * θ is estimated once from both arms pooled, around the pooled means (`compute_theta`);
//! * an arm's per-bucket variance is var(y) + θ² var(x) − 2θ cov(y, x) of the linearized
//!   ratios y_b = (m_b − Y d_b) / d̄ and x_b = (x_b − X e_b) / ē, with n − 1 in the denominator;
//! * the test is Welch's with the Welch–Satterthwaite degrees of freedom of those variances,
//!   on the absolute difference and on the difference relative to the control's *unadjusted*
//!   mean, as gbstats does.
//!
//! When every bucket holds one impression and one pre-period impression (d = e = 1) the ratios
//! are per-unit means and every figure equals gbstats's to rounding; `tests/experiment_statistics.rs`
//! holds them to 1e-9 of gbstats on such data, and to 1e-9 of the delta method written out
//! over individual buckets in general. A bucket whose units had no pre-period impression adds
//! x = e = 0: the covariate of a unit without history is 0, as GrowthBook and Statsig fill it.

use serde::Serialize;

use super::sequential::{sequential_difference, MixtureBoundary, SequentialLook};
use super::{t_quantile, t_two_sided_p, Estimate};

/// Per-bucket sums of one arm: the metric (m), impressions (d), pre-period metric (x) and
/// pre-period impressions (e), with every product the delta method needs. Merges by addition.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CupedMoments {
    /// Buckets with at least one impression: the units of the variances.
    pub n: u64,
    pub m: f64,
    pub d: f64,
    pub x: f64,
    pub e: f64,
    pub mm: f64,
    pub dd: f64,
    pub md: f64,
    pub xx: f64,
    pub ee: f64,
    pub xe: f64,
    pub mx: f64,
    pub me: f64,
    pub dx: f64,
    pub de: f64,
}

impl CupedMoments {
    /// Adds one bucket: its metric sum and impressions, in the experiment and before it.
    pub fn add_bucket(&mut self, m: f64, d: f64, x: f64, e: f64) {
        self.n += 1;
        self.m += m;
        self.d += d;
        self.x += x;
        self.e += e;
        self.mm += m * m;
        self.dd += d * d;
        self.md += m * d;
        self.xx += x * x;
        self.ee += e * e;
        self.xe += x * e;
        self.mx += m * x;
        self.me += m * e;
        self.dx += d * x;
        self.de += d * e;
    }

    fn plus(&self, o: &CupedMoments) -> CupedMoments {
        CupedMoments {
            n: self.n + o.n,
            m: self.m + o.m,
            d: self.d + o.d,
            x: self.x + o.x,
            e: self.e + o.e,
            mm: self.mm + o.mm,
            dd: self.dd + o.dd,
            md: self.md + o.md,
            xx: self.xx + o.xx,
            ee: self.ee + o.ee,
            xe: self.xe + o.xe,
            mx: self.mx + o.mx,
            me: self.me + o.me,
            dx: self.dx + o.dx,
            de: self.de + o.de,
        }
    }

    /// The ratios and their per-bucket (co)variances around this set's own ratios; `None`
    /// below two buckets or without impressions.
    fn linearize(&self) -> Option<Linearized> {
        if self.n < 2 || self.d <= 0.0 {
            return None;
        }
        let n = self.n as f64;
        let y = self.m / self.d;
        let d_bar = self.d / n;
        // Sums over buckets of y_b², x_b² and y_b x_b, expanded into the accumulated sums. The
        // linearized values sum to zero, so these over n − 1 are the sample (co)variances.
        let syy = (self.mm - 2.0 * y * self.md + y * y * self.dd) / (d_bar * d_bar);
        let (x, sxx, sxy) = if self.e > 0.0 {
            let x = self.x / self.e;
            let e_bar = self.e / n;
            let sxx = (self.xx - 2.0 * x * self.xe + x * x * self.ee) / (e_bar * e_bar);
            let sxy = (self.mx - x * self.me - y * self.dx + y * x * self.de) / (d_bar * e_bar);
            (x, sxx, sxy)
        } else {
            (0.0, 0.0, 0.0)
        };
        Some(Linearized {
            y,
            x,
            var_y: (syy / (n - 1.0)).max(0.0),
            var_x: (sxx / (n - 1.0)).max(0.0),
            cov: sxy / (n - 1.0),
        })
    }
}

#[derive(Debug, Clone, Copy)]
struct Linearized {
    /// The metric's ratio (the unadjusted mean).
    y: f64,
    /// The pre-period ratio.
    x: f64,
    var_y: f64,
    var_x: f64,
    cov: f64,
}

/// The regression coefficient of the metric on its pre-period value, from both arms pooled
/// (gbstats's `compute_theta`); 0 when either pooled variance is 0 (no adjustment, as gbstats
/// reverts to the unadjusted statistic).
pub fn theta(control: &CupedMoments, treatment: &CupedMoments) -> f64 {
    match control.plus(treatment).linearize() {
        Some(joint) if joint.var_x > 0.0 && joint.var_y > 0.0 => joint.cov / joint.var_x,
        _ => 0.0,
    }
}

/// One arm, adjusted.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CupedArm {
    /// Buckets.
    pub n: u64,
    /// The metric's mean, unadjusted (sum over impressions).
    pub mean: f64,
    /// The pre-period mean of the arm's units that had one.
    pub pre_mean: f64,
    /// mean − θ pre_mean.
    pub adjusted_mean: f64,
    /// Per-bucket variance of the adjusted ratio (var / n is the squared standard error).
    pub variance: f64,
    /// Per-bucket variance of the unadjusted ratio.
    pub unadjusted_variance: f64,
}

/// `arm` adjusted with `theta`; `None` below two buckets.
pub fn adjust(arm: &CupedMoments, theta: f64) -> Option<CupedArm> {
    let l = arm.linearize()?;
    Some(CupedArm {
        n: arm.n,
        mean: l.y,
        pre_mean: l.x,
        adjusted_mean: l.y - theta * l.x,
        variance: (l.var_y + theta * theta * l.var_x - 2.0 * theta * l.cov).max(0.0),
        unadjusted_variance: l.var_y,
    })
}

/// A two-sided Welch test of one difference, as gbstats's `TwoSidedTTest` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct WelchResult {
    /// The point estimate.
    pub estimate: f64,
    /// Its confidence interval.
    pub ci: [f64; 2],
    /// Its two-sided p-value.
    pub p_value: f64,
    /// Its standard error.
    pub se: f64,
}

/// Treatment against control, adjusted.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CupedComparison {
    /// The pooled regression coefficient.
    pub theta: f64,
    /// 1 − the adjusted difference's variance over the unadjusted one's: the share of the
    /// variance the pre-period explains (ρ² at the best θ).
    pub variance_reduction: f64,
    /// Welch–Satterthwaite degrees of freedom of the adjusted variances.
    pub df: f64,
    /// Adjusted treatment mean minus adjusted control mean.
    pub difference: WelchResult,
    /// The same over the control's unadjusted mean.
    pub relative_difference: Option<WelchResult>,
    /// The arms, control first.
    pub arms: [CupedArm; 2],
    /// Anytime-valid confidence sequence of `difference` at this look (set by the report,
    /// from the adjusted means and errors, as `crate::stats::sequential` does unadjusted).
    pub difference_cs: Option<[f64; 2]>,
    /// Always-valid p-value of no difference at this look.
    pub always_valid_p_value: Option<f64>,
    /// Units that entered each arm with a pre-period, control first.
    pub units_with_pre_period: [u64; 2],
}

/// The adjusted comparison; `None` when an arm has fewer than two buckets, the control's
/// mean is 0, or an adjusted variance is 0 (gbstats answers its placeholder there: estimate 0,
/// interval [0, 0], p-value 1, which a dashboard would read as a result).
pub fn compare(control: &CupedMoments, treatment: &CupedMoments, confidence: f64) -> Option<CupedComparison> {
    let theta = theta(control, treatment);
    let (a, b) = (adjust(control, theta)?, adjust(treatment, theta)?);
    if a.adjusted_mean == 0.0 || a.mean == 0.0 || a.variance <= 0.0 || b.variance <= 0.0 {
        return None;
    }
    let (na, nb) = (a.n as f64, b.n as f64);
    let (va, vb) = (a.variance / na, b.variance / nb);
    let df = (va + vb).powi(2) / (vb * vb / (nb - 1.0) + va * va / (na - 1.0));
    let welch = |estimate: f64, variance: f64| {
        let se = variance.sqrt();
        let half = t_quantile(0.5 + confidence / 2.0, df) * se;
        WelchResult { estimate, ci: [estimate - half, estimate + half], p_value: t_two_sided_p(estimate / se, df), se }
    };
    let difference = welch(b.adjusted_mean - a.adjusted_mean, va + vb);
    let relative_variance = b.variance / (a.mean * a.mean * nb) + a.variance * b.mean * b.mean / (a.mean.powi(4) * na);
    let relative_difference = (relative_variance > 0.0 && relative_variance.is_finite())
        .then(|| welch((b.adjusted_mean - a.adjusted_mean) / a.mean, relative_variance));
    let unadjusted = a.unadjusted_variance / na + b.unadjusted_variance / nb;
    let variance_reduction = if unadjusted > 0.0 { 1.0 - (va + vb) / unadjusted } else { 0.0 };
    Some(CupedComparison {
        theta,
        variance_reduction,
        df,
        difference,
        relative_difference,
        arms: [a, b],
        difference_cs: None,
        always_valid_p_value: None,
        units_with_pre_period: [0, 0],
    })
}

/// The anytime-valid figures of the adjusted difference at this look: the asymptotic confidence
/// sequence and always-valid p-value of [`super::sequential`], from the adjusted means and their
/// standard errors. `n` (control, treatment) is the boundary's time scale: impressions in
/// rankpulse's reports, as for every other sequential figure; with one impression per unit it
/// is gbstats's (units), and the figures are its `SequentialTwoSidedTTest`'s.
pub fn sequential(cmp: &CupedComparison, n: [u64; 2], boundary: &MixtureBoundary) -> Option<SequentialLook> {
    let estimate = |arm: &CupedArm, n: u64| Estimate {
        n,
        mean: arm.adjusted_mean,
        sd: None,
        se: Some((arm.variance / arm.n as f64).sqrt()),
        df: Some(arm.n as f64 - 1.0),
        ci: None,
    };
    sequential_difference(&estimate(&cmp.arms[1], n[1]), &estimate(&cmp.arms[0], n[0]), boundary)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn moments(rows: &[(f64, f64, f64, f64)]) -> CupedMoments {
        let mut s = CupedMoments::default();
        for &(m, d, x, e) in rows {
            s.add_bucket(m, d, x, e);
        }
        s
    }

    #[test]
    fn per_unit_means_give_the_textbook_cuped() {
        // d = e = 1: theta is the pooled least-squares slope of post on pre.
        let a = moments(&[(1.0, 1.0, 0.8, 1.0), (0.2, 1.0, 0.1, 1.0), (0.6, 1.0, 0.7, 1.0), (0.4, 1.0, 0.2, 1.0)]);
        let b = moments(&[(0.9, 1.0, 0.9, 1.0), (0.5, 1.0, 0.3, 1.0), (0.7, 1.0, 0.5, 1.0)]);
        let post = [1.0, 0.2, 0.6, 0.4, 0.9, 0.5, 0.7];
        let pre = [0.8, 0.1, 0.7, 0.2, 0.9, 0.3, 0.5];
        let (mp, mx) = (post.iter().sum::<f64>() / 7.0, pre.iter().sum::<f64>() / 7.0);
        let sxy: f64 = post.iter().zip(&pre).map(|(y, x)| (y - mp) * (x - mx)).sum();
        let sxx: f64 = pre.iter().map(|x| (x - mx) * (x - mx)).sum();
        assert!((theta(&a, &b) - sxy / sxx).abs() < 1e-12);
        let cmp = compare(&a, &b, 0.95).unwrap();
        assert!(cmp.variance_reduction > 0.5, "{cmp:?}");
        let expected = (0.7 - cmp.theta * (0.9 + 0.3 + 0.5) / 3.0) - (0.55 - cmp.theta * 0.45);
        assert!((cmp.difference.estimate - expected).abs() < 1e-12);
    }

    #[test]
    fn without_pre_period_data_nothing_is_adjusted() {
        let a = moments(&[(1.0, 2.0, 0.0, 0.0), (0.2, 1.0, 0.0, 0.0), (0.6, 3.0, 0.0, 0.0)]);
        let b = moments(&[(0.9, 1.0, 0.0, 0.0), (0.5, 2.0, 0.0, 0.0), (0.7, 2.0, 0.0, 0.0)]);
        let cmp = compare(&a, &b, 0.95).unwrap();
        assert_eq!((cmp.theta, cmp.variance_reduction), (0.0, 0.0));
        assert!((cmp.difference.estimate - (2.1 / 5.0 - 1.8 / 6.0)).abs() < 1e-12);
    }

    #[test]
    fn degenerate_arms_have_no_comparison() {
        let one = moments(&[(1.0, 1.0, 1.0, 1.0)]);
        let two = moments(&[(1.0, 1.0, 1.0, 1.0), (0.0, 1.0, 0.0, 1.0)]);
        assert!(compare(&one, &two, 0.95).is_none());
        let zero = moments(&[(0.0, 1.0, 1.0, 1.0), (0.0, 1.0, 0.0, 1.0)]);
        assert!(compare(&zero, &two, 0.95).is_none(), "a control mean of 0 has no relative scale");
    }
}
