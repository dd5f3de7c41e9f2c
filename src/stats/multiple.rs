//! Multiple comparisons: p-values adjusted for testing an experiment's metrics and variants at once.
//!
//! * Holm (1979), "A simple sequentially rejective multiple test procedure": the family-wise
//!   error rate, under any dependence. Sorted ascending, p_(i) becomes
//!   max over j ≤ i of min(1, (m − j) p_(j)) (j from 0).
//! * Benjamini and Hochberg (1995), "Controlling the false discovery rate": the expected share
//!   of false discoveries among the rejected, under independence or positive dependence (which
//!   metrics of one ranking have). Sorted ascending, p_(i) becomes min over j ≥ i of
//!   min(1, m p_(j) / (j + 1)).
//!
//! Both are statsmodels's `multipletests` (`holm`, `fdr_bh`); `tests/experiment_statistics.rs`
//! holds them to it. Ties keep their input order, which changes no adjusted value.

use serde::{Deserialize, Serialize};

/// Which adjustment the alerts and the decision use (`ab.correction`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Correction {
    /// Unadjusted p-values (each test at the confidence level on its own).
    #[default]
    None,
    /// Holm–Bonferroni: family-wise error rate.
    Holm,
    /// Benjamini–Hochberg: false discovery rate.
    BenjaminiHochberg,
}

impl Correction {
    /// The configuration's spelling.
    pub fn label(self) -> &'static str {
        match self {
            Correction::None => "none",
            Correction::Holm => "holm",
            Correction::BenjaminiHochberg => "benjamini-hochberg",
        }
    }

    /// The adjusted p-values of `p_values`, in their order.
    pub fn adjust(self, p_values: &[f64]) -> Vec<f64> {
        match self {
            Correction::None => p_values.to_vec(),
            Correction::Holm => holm(p_values),
            Correction::BenjaminiHochberg => benjamini_hochberg(p_values),
        }
    }
}

/// Indices of `p` in ascending order of their p-value (stable).
fn ascending(p: &[f64]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..p.len()).collect();
    order.sort_by(|&a, &b| p[a].total_cmp(&p[b]));
    order
}

/// Holm's step-down adjustment.
pub fn holm(p: &[f64]) -> Vec<f64> {
    let m = p.len() as f64;
    let mut adjusted = vec![0.0; p.len()];
    let mut running = 0.0f64;
    for (j, &i) in ascending(p).iter().enumerate() {
        running = running.max(((m - j as f64) * p[i]).min(1.0));
        adjusted[i] = running;
    }
    adjusted
}

/// Benjamini and Hochberg's step-up adjustment.
pub fn benjamini_hochberg(p: &[f64]) -> Vec<f64> {
    let m = p.len() as f64;
    let mut adjusted = vec![0.0; p.len()];
    let mut running = 1.0f64;
    for (j, &i) in ascending(p).iter().enumerate().rev() {
        running = running.min((m * p[i] / (j as f64 + 1.0)).min(1.0));
        adjusted[i] = running;
    }
    adjusted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_statsmodels_on_a_worked_example() {
        // statsmodels.stats.multitest.multipletests([0.01, 0.04, 0.03, 0.005, 0.5], method=...)[1]
        let p = [0.01, 0.04, 0.03, 0.005, 0.5];
        let close = |got: Vec<f64>, want: [f64; 5]| got.iter().zip(want).all(|(g, w)| (g - w).abs() < 1e-12);
        assert!(close(holm(&p), [0.04, 0.09, 0.09, 0.025, 0.5]), "{:?}", holm(&p));
        assert!(close(benjamini_hochberg(&p), [0.025, 0.05, 0.05, 0.025, 0.5]), "{:?}", benjamini_hochberg(&p));
        assert!(holm(&[]).is_empty());
    }
}
