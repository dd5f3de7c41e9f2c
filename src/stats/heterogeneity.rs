//! Whether an effect differs between subgroups: Cochran's Q test of heterogeneity over the
//! subgroups' differences, with Higgins and Thompson's I².
//!
//! Each value of a dimension (`mobile`, `desktop`) is its own comparison of treatment against
//! control, with a difference `d_i` and its variance `v_i` (the squared standard error of the
//! difference, `se_t² + se_c²`, cluster-robust when the unit is a user or session). Under the
//! hypothesis that every value has the same effect, the fixed-effect (inverse-variance) pooled
//! difference is `d̄ = Σ w_i d_i / Σ w_i` with `w_i = 1 / v_i`, and
//! `Q = Σ w_i (d_i − d̄)²` follows a chi-square with `k − 1` degrees of freedom (k values).
//! A small p-value says the effect differs between values: "the treatment hurts mobile" is then
//! more than the noise of looking at many subgroups. `I² = max(0, (Q − df) / Q)` is the share
//! of the differences' spread beyond chance.
//!
//! Sources: W. G. Cochran, "The combination of estimates from different experiments",
//! Biometrics 10 (1954); J. P. T. Higgins and S. G. Thompson, "Quantifying heterogeneity in a
//! meta-analysis", Statistics in Medicine 21 (2002). statsmodels'
//! `stats.meta_analysis.combine_effects` computes the same (`q`, `i2`, `test_homogeneity()`),
//! which `tests/breakdown_reference.rs` holds these figures to.

use serde::Serialize;
use statrs::distribution::{ChiSquared, ContinuousCDF};

/// The method every heterogeneity figure names.
pub const METHOD: &str =
    "Cochran's Q over the values' differences, inverse-variance weights (Cochran 1954); I² (Higgins and Thompson 2002)";

/// Cochran's Q test over `k` subgroups' differences.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Heterogeneity {
    /// Subgroups tested: those with a difference and a positive, finite variance.
    pub values: usize,
    /// Cochran's Q.
    pub q: f64,
    /// `values − 1`.
    pub df: u32,
    /// P(χ²(df) ≥ Q): small when the differences differ more than chance allows.
    pub p_value: f64,
    /// Share of the spread beyond chance, in [0, 1).
    pub i_squared: f64,
    /// The fixed-effect pooled difference `d̄`.
    pub pooled_difference: f64,
    /// Its standard error, `1 / sqrt(Σ w_i)`.
    pub pooled_se: f64,
}

/// Cochran's Q over `(difference, variance)` pairs; pairs whose variance is not positive and
/// finite, or whose difference is not finite, are left out. `None` below two pairs left.
pub fn cochran_q(effects: &[(f64, f64)]) -> Option<Heterogeneity> {
    let usable: Vec<(f64, f64)> =
        effects.iter().copied().filter(|&(d, v)| d.is_finite() && v > 0.0 && v.is_finite()).collect();
    if usable.len() < 2 {
        return None;
    }
    let total_weight: f64 = usable.iter().map(|&(_, v)| 1.0 / v).sum();
    let pooled = usable.iter().map(|&(d, v)| d / v).sum::<f64>() / total_weight;
    let q: f64 = usable.iter().map(|&(d, v)| (d - pooled) * (d - pooled) / v).sum();
    let df = u32::try_from(usable.len() - 1).ok()?;
    let p_value = ChiSquared::new(f64::from(df)).ok()?.sf(q);
    let i_squared = if q > 0.0 { ((q - f64::from(df)) / q).max(0.0) } else { 0.0 };
    Some(Heterogeneity {
        values: usable.len(),
        q,
        df,
        p_value,
        i_squared,
        pooled_difference: pooled,
        pooled_se: total_weight.recip().sqrt(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q_matches_statsmodels() {
        // statsmodels 0.15: combine_effects([0.1, -0.2, 0.05], [0.01, 0.02, 0.015]):
        // q, i2, test_homogeneity().pvalue, mean_effect_fe, sd_eff_w_fe.
        let h = cochran_q(&[(0.1, 0.01), (-0.2, 0.02), (0.05, 0.015)]).unwrap();
        assert!((h.q - 3.1153846153846163).abs() < 1e-12, "{h:?}");
        assert!((h.i_squared - 0.35802469135802484).abs() < 1e-12);
        assert!((h.p_value - 0.21062156056041983).abs() < 1e-12);
        assert!((h.pooled_difference - 0.015384615384615385).abs() < 1e-15);
        assert!((h.pooled_se - 0.06793662204867575).abs() < 1e-12);
        assert_eq!((h.values, h.df), (3, 2));
    }

    #[test]
    fn equal_differences_are_not_heterogeneous_and_unusable_values_are_left_out() {
        let h = cochran_q(&[(0.1, 0.01), (0.1, 0.04), (f64::NAN, 0.01), (0.3, 0.0)]).unwrap();
        assert_eq!((h.values, h.q, h.i_squared, h.p_value), (2, 0.0, 0.0, 1.0));
        assert!(cochran_q(&[(0.1, 0.01)]).is_none());
    }
}
