//! The Bayesian read-out as GrowthBook computes it: chance to beat control and risk.
//!
//! gbstats 0.8.0, `EffectBayesianABTest`: the difference (relative to the control's mean by
//! default, or absolute) is given a normal likelihood with the frequentist variance, and a
//! Gaussian prior on the effect that is improper (flat) unless `proper`. The posterior is
//! normal; the chance to beat control is its mass above 0 (below, for a metric where lower is
//! better), and the risk of each choice is the expected loss of shipping it:
//! E[max(0, effect)] if control is kept, E[max(0, −effect)] if the treatment is shipped.
//! Those are the truncated-normal means times their tail probabilities, which in closed form
//! are μ(1 − Φ(−μ/σ)) + σφ(μ/σ) and σφ(μ/σ) − μΦ(−μ/σ) (no division, so no 0/0 in the tails
//! where scipy's `truncnorm` loses precision). `tests/experiment_statistics.rs` holds every
//! figure to gbstats's to 1e-9.

use serde::Serialize;
use statrs::distribution::{Continuous, ContinuousCDF, Normal};

/// gbstats's `GaussianPrior` on the effect, on the scale of the difference (relative by default).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prior {
    pub mean: f64,
    pub variance: f64,
    /// An improper prior adds nothing: the posterior is the likelihood.
    pub proper: bool,
}

/// One arm as the read-out needs it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Arm {
    /// Units (impressions, or buckets when clustered).
    pub n: f64,
    /// The arm's mean (adjusted, with CUPED).
    pub mean: f64,
    /// The unadjusted mean: what a relative difference is relative to.
    pub unadjusted_mean: f64,
    /// Variance per unit (n × the squared standard error).
    pub variance: f64,
}

/// The read-out of one metric, treatment against control.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BayesianReadout {
    /// `relative` or `absolute`: the scale of `expected`, `ci` and `risk`.
    pub difference: &'static str,
    /// Posterior probability that the treatment is better (accounting for the metric's direction).
    pub chance_to_win: f64,
    /// Posterior mean of the effect.
    pub expected: f64,
    /// Posterior standard deviation of the effect.
    pub stddev: f64,
    /// Equal-tailed credible interval at the report's confidence.
    pub ci: [f64; 2],
    /// Expected loss of keeping the control.
    pub risk_control: f64,
    /// Expected loss of shipping the treatment.
    pub risk_treatment: f64,
}

/// The read-out; `None` where gbstats answers its uninformative placeholder: an arm without
/// units, a control mean of 0 on the relative scale, or an arm without variance.
pub fn readout(
    control: Arm,
    treatment: Arm,
    prior: Prior,
    relative: bool,
    lower_is_better: bool,
    confidence: f64,
) -> Option<BayesianReadout> {
    let (a, b) = (control, treatment);
    if relative && (a.mean == 0.0 || a.unadjusted_mean == 0.0) {
        return None;
    }
    if a.n == 0.0 || b.n == 0.0 || a.variance <= 0.0 || b.variance <= 0.0 {
        return None;
    }
    let (data_mean, data_variance) = if relative {
        (
            (b.mean - a.mean) / a.unadjusted_mean,
            b.variance / (a.unadjusted_mean.powi(2) * b.n)
                + a.variance * b.unadjusted_mean.powi(2) / (a.unadjusted_mean.powi(4) * a.n),
        )
    } else {
        (b.mean - a.mean, b.variance / b.n + a.variance / a.n)
    };
    if !(data_variance > 0.0 && data_variance.is_finite()) {
        return None;
    }
    let precision = 1.0 / data_variance + if prior.proper { 1.0 / prior.variance } else { 0.0 };
    let mu =
        if prior.proper { (data_mean / data_variance + prior.mean / prior.variance) / precision } else { data_mean };
    let sigma = (1.0 / precision).sqrt();
    let standard = Normal::standard();
    let above_zero = standard.cdf(mu / sigma);
    let chance_to_win = if lower_is_better { 1.0 - above_zero } else { above_zero };
    let z = standard.inverse_cdf(0.5 + confidence / 2.0);
    // Loss of keeping control: E[max(0, effect)]; of shipping: E[max(0, −effect)].
    let density = sigma * standard.pdf(mu / sigma);
    let gain = mu * standard.cdf(mu / sigma) + density;
    let loss = density - mu * standard.cdf(-mu / sigma);
    let (risk_control, risk_treatment) = if lower_is_better { (loss, gain) } else { (gain, loss) };
    Some(BayesianReadout {
        difference: if relative { "relative" } else { "absolute" },
        chance_to_win,
        expected: mu,
        stddev: sigma,
        ci: [mu - z * sigma, mu + z * sigma],
        risk_control,
        risk_treatment,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLAT: Prior = Prior { mean: 0.0, variance: 1.0, proper: false };

    #[test]
    fn equals_a_worked_gbstats_example() {
        // gbstats 0.8.0: EffectBayesianABTest(SampleMeanStatistic(n=100, sum=50, sum_squares=40),
        // SampleMeanStatistic(n=100, sum=55, sum_squares=45)).compute_result()
        let arm = |sum: f64, squares: f64| Arm {
            n: 100.0,
            mean: sum / 100.0,
            unadjusted_mean: sum / 100.0,
            variance: (squares - sum * sum / 100.0) / 99.0,
        };
        let r = readout(arm(50.0, 40.0), arm(55.0, 45.0), FLAT, true, false, 0.95).unwrap();
        assert!((r.chance_to_win - 0.8071222784181415).abs() < 1e-9, "{r:?}");
        assert!((r.risk_control - 0.1122887987780631).abs() < 1e-9);
        assert!((r.risk_treatment - 0.012288798778062989).abs() < 1e-9);
        assert!((r.stddev - 0.11529496646831246).abs() < 1e-9);
        assert!((r.ci[0] + 0.12597398187664557).abs() < 1e-9);
    }

    #[test]
    fn lower_is_better_flips_the_chance_and_the_risks() {
        let a = Arm { n: 50.0, mean: 0.4, unadjusted_mean: 0.4, variance: 0.24 };
        let b = Arm { n: 50.0, mean: 0.3, unadjusted_mean: 0.3, variance: 0.21 };
        let up = readout(a, b, FLAT, false, false, 0.95).unwrap();
        let down = readout(a, b, FLAT, false, true, 0.95).unwrap();
        assert!((up.chance_to_win + down.chance_to_win - 1.0).abs() < 1e-15);
        assert_eq!((up.risk_control, up.risk_treatment), (down.risk_treatment, down.risk_control));
        assert!(down.chance_to_win > 0.8, "{down:?}");
    }

    #[test]
    fn a_proper_prior_shrinks_toward_its_mean() {
        let a = Arm { n: 20.0, mean: 0.5, unadjusted_mean: 0.5, variance: 0.25 };
        let b = Arm { n: 20.0, mean: 0.6, unadjusted_mean: 0.6, variance: 0.24 };
        let flat = readout(a, b, FLAT, true, false, 0.95).unwrap();
        let tight = readout(a, b, Prior { mean: 0.0, variance: 0.01, proper: true }, true, false, 0.95).unwrap();
        assert!(tight.expected.abs() < flat.expected.abs() && tight.stddev < flat.stddev);
    }
}
