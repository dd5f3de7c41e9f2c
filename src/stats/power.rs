//! Power: the smallest effect the sample so far can detect, and how long until a target one can.
//!
//! The minimum detectable effect of a two-sided test at level α with power 1 − β, for a
//! difference whose standard error is `se`, is (z₁₋α/₂ + z₁₋β) se (e.g. Kohavi, Tang and Xu,
//! "Trustworthy Online Controlled Experiments", 2020, ch. 17; the formula ignores the far
//! tail's rejections, below 1e-6 of power at the usual settings). The standard error of a
//! difference of means shrinks as 1/√n at a fixed split, so reaching a target MDE takes
//! n (MDE / target)² impressions in all; at the current traffic the rest takes that many more
//! divided by the rate.

use serde::Serialize;
use statrs::distribution::{ContinuousCDF, Normal};

/// What power analysis says about one comparison.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PowerReport {
    /// `ab.power`.
    pub power: f64,
    /// The absolute effect detectable now.
    pub mde: f64,
    /// `mde` over the control's mean; absent when it is 0.
    pub relative_mde: Option<f64>,
    /// `ab.target_mde` (relative).
    pub target_relative_mde: f64,
    /// Impressions of both arms the target needs, at the current split and spread.
    pub impressions_needed: Option<f64>,
    /// Event-time seconds until then at the current traffic of both arms; 0 once reached,
    /// absent without a traffic rate (no complete window yet) or a relative MDE.
    pub eta_seconds: Option<f64>,
}

/// The minimum detectable effect: (z₁₋α/₂ + z_power) se.
pub fn minimum_detectable_effect(se: f64, confidence: f64, power: f64) -> f64 {
    let z = Normal::standard();
    (z.inverse_cdf(0.5 + confidence / 2.0) + z.inverse_cdf(power)) * se
}

/// The power report of a difference with standard error `se` over `impressions` impressions
/// (both arms) whose control mean is `control_mean`; `rate` is the impressions per event-time
/// second both arms get now.
pub fn report(
    se: f64,
    impressions: f64,
    control_mean: f64,
    confidence: f64,
    power: f64,
    target_relative_mde: f64,
    rate: Option<f64>,
) -> PowerReport {
    let mde = minimum_detectable_effect(se, confidence, power);
    let relative_mde = (control_mean != 0.0).then(|| mde / control_mean.abs());
    let impressions_needed = relative_mde.map(|now| impressions * (now / target_relative_mde).powi(2));
    let eta_seconds = match (impressions_needed, rate) {
        (Some(needed), Some(rate)) if rate > 0.0 => Some(((needed - impressions) / rate).max(0.0)),
        _ => None,
    };
    PowerReport { power, mde, relative_mde, target_relative_mde, impressions_needed, eta_seconds }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_usual_multiplier_and_eta() {
        // scipy.stats.norm.ppf(0.975) + norm.ppf(0.8) = 2.8015852181129683
        assert!((minimum_detectable_effect(1.0, 0.95, 0.8) - 2.8015852181129683).abs() < 1e-12);
        // Twice the target MDE needs four times the impressions.
        let r = report(0.01, 1000.0, 0.5, 0.95, 0.8, 2.8015852181129683 * 0.01 / 0.5 / 2.0, Some(10.0));
        let needed = r.impressions_needed.unwrap();
        assert!((needed - 4000.0).abs() < 1e-6, "{r:?}");
        assert!((r.eta_seconds.unwrap() - 300.0).abs() < 1e-6);
        assert_eq!(report(0.01, 1000.0, 0.0, 0.95, 0.8, 0.01, Some(1.0)).eta_seconds, None);
    }
}
