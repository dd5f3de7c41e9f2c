//! A/B statistics: pure math over accumulated moments, no I/O and no state.
//!
//! Everything here works from sums that the accumulators can merge exactly across partitions,
//! windows and checkpoints: per metric the count, the sum and the sum of squares, and, when the
//! randomization unit is a user or session, the same per *unit bucket* (see [`ClusterMoments`]).
//!
//! * [`estimate`]: mean, standard deviation, standard error and a t confidence interval.
//! * [`compare`]: treatment minus control, absolute and relative, with Welch's t-test.
//! * [`sample_ratio_mismatch`]: Pearson's chi-square test of the observed split against the
//!   expected one.
//!
//! * [`cuped`]: the comparison adjusted by each unit's pre-experiment value (CUPED).
//! * [`bayes`]: GrowthBook's Bayesian read-out, chance to beat control and risk.
//! * [`multiple`]: Holm and Benjamini–Hochberg adjusted p-values over an experiment's tests.
//! * [`heterogeneity`]: Cochran's Q, whether an effect differs between a dimension's values.
//! * [`power`]: the minimum detectable effect and the time to reach a target one.
//! * [`guardrail_p_value`]: the one-sided test that a metric got worse.
//!
//! * [`preference`]: interleaving's pairwise preference, its interval and its sign test.
//! * [`sequential`]: the anytime-valid counterparts, valid however often they are looked at:
//!   confidence sequences and always-valid p-values of the difference, and the sequential split
//!   test.
//!
//! The fixed-horizon definitions are scipy's: `scipy.stats.t.interval`, `scipy.stats.ttest_ind(equal_var=False)`
//! and `scipy.stats.chisquare`; `tests/ab_statistics.rs` holds them to 1e-6 on generated data.

pub mod bayes;
pub mod cuped;
pub mod heterogeneity;
pub mod multiple;
pub mod power;
pub mod preference;
pub mod sequential;

use serde::Serialize;
use statrs::distribution::{ChiSquared, Continuous, ContinuousCDF, StudentsT};

/// Count, sum and sum of squares of one metric over a set of impressions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Moments {
    /// Impressions.
    pub n: u64,
    /// Sum of the metric's values.
    pub sum: f64,
    /// Sum of the squared values: with `sum`, the variance without keeping the values.
    pub sum_squares: f64,
}

/// Moments of a ratio metric over clusters (users, sessions): the mean is sum(S_b) / sum(N_b)
/// where bucket b holds whole clusters, S_b the sum of the metric over its impressions and N_b
/// their count. Because a cluster never straddles two buckets, buckets are independent even
/// when a cluster's impressions are not, which is what makes the variance below honest.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ClusterMoments {
    /// Non-empty buckets.
    pub buckets: u64,
    /// sum over buckets of N_b (= impressions).
    pub n: f64,
    /// sum of S_b.
    pub s: f64,
    /// sum of S_b^2.
    pub ss: f64,
    /// sum of S_b N_b.
    pub sn: f64,
    /// sum of N_b^2.
    pub nn: f64,
}

impl ClusterMoments {
    /// Adds one bucket's totals.
    pub fn add_bucket(&mut self, impressions: f64, sum: f64) {
        self.buckets += 1;
        self.n += impressions;
        self.s += sum;
        self.ss += sum * sum;
        self.sn += sum * impressions;
        self.nn += impressions * impressions;
    }
}

/// The estimate of one metric's mean in one variant.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Estimate {
    /// Impressions.
    pub n: u64,
    /// Mean of the metric over the impressions.
    pub mean: f64,
    /// Sample standard deviation over impressions (n - 1 in the denominator); absent below 2.
    pub sd: Option<f64>,
    /// Standard error of the mean: sd / sqrt(n), or the cluster-robust delta-method error.
    pub se: Option<f64>,
    /// Degrees of freedom of `se`: n - 1, or buckets - 1 when clustered.
    pub df: Option<f64>,
    /// Confidence interval of the mean (t distribution with `df`).
    pub ci: Option<[f64; 2]>,
}

/// Treatment against control on one metric.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// mean(treatment) - mean(control).
    pub difference: f64,
    /// Welch confidence interval of the difference; absent when a side has too few impressions.
    pub difference_ci: Option<[f64; 2]>,
    /// difference / mean(control); absent when the control mean is 0.
    pub relative_difference: Option<f64>,
    /// Delta-method interval of the relative difference; absent when the control mean is 0 or
    /// the delta-method variance is 0 or not finite (a treatment constant at 0 gives variance 0
    /// and the zero-width [−1, −1], which no data support), as Welch's figures are absent on
    /// zero variance.
    pub relative_difference_ci: Option<[f64; 2]>,
    /// Welch's t statistic.
    pub t: Option<f64>,
    /// Welch–Satterthwaite degrees of freedom.
    pub df: Option<f64>,
    /// Two-sided p-value of Welch's t-test.
    pub p_value: Option<f64>,
    /// Anytime-valid confidence sequence of the difference ([`sequential`]): this look's, or
    /// the running intersection over the looks of a cumulative report.
    pub difference_cs: Option<[f64; 2]>,
    /// The same for the relative difference.
    pub relative_difference_cs: Option<[f64; 2]>,
    /// Cumulative reports: the looks' sequences of the difference have no value in common, so
    /// `difference_cs` is absent. Under the sequences' assumption (one constant effect) that
    /// happens with probability at most 1 − confidence: the effect changed over time.
    pub difference_cs_empty: bool,
    /// The same for the relative difference and `relative_difference_cs`.
    pub relative_difference_cs_empty: bool,
    /// Always-valid p-value of "no difference": this look's, or the running minimum.
    pub always_valid_p_value: Option<f64>,
    /// Cumulative reports: the first look at which `always_valid_p_value` fell below
    /// 1 − confidence, where a team watching the anytime-valid figures stops.
    pub always_valid_significant_at: Option<SignificantAt>,
    /// Cumulative reports: the first look at which Welch's p-value was below 1 − confidence,
    /// where a team watching the fixed-horizon p-value would have stopped, with no guarantee.
    pub fixed_horizon_significant_at: Option<SignificantAt>,
    /// `p_value` adjusted by `ab.correction` over the experiment's family of tests (equal to
    /// it with `none`): what the shipped alerts read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adjusted_p_value: Option<f64>,
    /// `always_valid_p_value` adjusted by `ab.correction` over the same family (equal to it
    /// with `none`): what the shipped harm alert reads. An always-valid p-value is a valid
    /// p-value at any stopping time, so Holm's and Benjamini and Hochberg's procedures apply.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adjusted_always_valid_p_value: Option<f64>,
    /// `p_value` adjusted by Holm's procedure over the family ([`multiple`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holm_p_value: Option<f64>,
    /// `p_value` adjusted by Benjamini and Hochberg's procedure over the family.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bh_p_value: Option<f64>,
    /// GrowthBook's Bayesian read-out ([`bayes`]); CUPED-adjusted when `cuped` is present.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bayesian: Option<bayes::BayesianReadout>,
    /// The minimum detectable effect and the time to the target one ([`power`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub power: Option<power::PowerReport>,
    /// The comparison adjusted by the units' pre-period ([`cuped`]): cumulative reports of
    /// `ab.cuped.metrics`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cuped: Option<cuped::CupedComparison>,
    /// A metric of `ab.guardrails`: the one-sided test that the treatment is worse.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guardrail: Option<GuardrailTest>,
}

/// A guardrail metric's one-sided test.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct GuardrailTest {
    /// `higher` or `lower`: the direction that is worse for this metric.
    pub worse_when: &'static str,
    /// One-sided Welch p-value of "the treatment is not worse" ([`guardrail_p_value`]).
    pub p_value: f64,
    /// `p_value` below 1 − confidence: the treatment is worse.
    pub failed: bool,
}

/// A look, named for people: which, after how many impressions, through when.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SignificantAt {
    /// 1 for the first look.
    pub look: u64,
    /// Impressions of both arms at that look.
    pub impressions: u64,
    /// RFC 3339 end of the window the look was taken at.
    pub through: String,
}

impl Comparison {
    /// This look's sequential figures, when it has them.
    pub fn sequential_look(&self) -> Option<sequential::SequentialLook> {
        Some(sequential::SequentialLook {
            difference_cs: self.difference_cs?,
            relative_difference_cs: self.relative_difference_cs,
            p_value: self.always_valid_p_value?,
        })
    }
}

/// Pearson's chi-square test of the observed variant counts against the expected split.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SampleRatioTest {
    /// Pearson's statistic, sum of (observed - expected)^2 / expected.
    pub chi_square: f64,
    /// Variants - 1.
    pub df: u32,
    /// Upper tail of chi-square with `df`: small means the split is not what was configured.
    pub p_value: f64,
}

/// The quantile `q` of Student's t with `df` degrees of freedom.
///
/// statrs's inverse is slow and off by up to 1e-4 for very large `df` (it returns 1.95985 for
/// df = 1e6 where the answer is 1.95997), so a series expansion (or, below 3 degrees of freedom,
/// that inverse) only seeds Newton steps on the CDF, which statrs computes to full precision.
pub fn t_quantile(q: f64, df: f64) -> f64 {
    // A report asks for the same (level, df) once per metric: every metric of a variant shares
    // n - 1. Remembering recent answers makes a report's intervals cost one quantile per variant.
    thread_local! {
        static RECENT: std::cell::RefCell<std::collections::HashMap<(u64, u64), f64>> = Default::default();
    }
    let key = (q.to_bits(), df.to_bits());
    if let Some(x) = RECENT.with(|r| r.borrow().get(&key).copied()) {
        return x;
    }
    let x = t_quantile_uncached(q, df);
    RECENT.with(|r| {
        let mut recent = r.borrow_mut();
        if recent.len() >= 4096 {
            recent.clear();
        }
        recent.insert(key, x);
    });
    x
}

fn t_quantile_uncached(q: f64, df: f64) -> f64 {
    let t = StudentsT::new(0.0, 1.0, df).expect("df > 0");
    let mut x = if df >= 3.0 {
        // The Cornish-Fisher expansion around the normal quantile: within 1e-3 from df = 3 on,
        // so two or three Newton steps finish, where statrs's inverse costs dozens of CDFs.
        let z = statrs::distribution::Normal::standard().inverse_cdf(q);
        let (z2, v) = (z * z, df);
        z + z * (z2 + 1.0) / (4.0 * v)
            + z * ((5.0 * z2 + 16.0) * z2 + 3.0) / (96.0 * v * v)
            + z * (((3.0 * z2 + 19.0) * z2 + 17.0) * z2 - 15.0) / (384.0 * v * v * v)
    } else {
        t.inverse_cdf(q)
    };
    for _ in 0..20 {
        let step = (t.cdf(x) - q) / t.pdf(x);
        x -= step;
        if step.abs() <= 1e-15 * x.abs().max(1.0) {
            break;
        }
    }
    x
}

/// Two-sided p-value of a t statistic.
pub fn t_two_sided_p(t_stat: f64, df: f64) -> f64 {
    let dist = StudentsT::new(0.0, 1.0, df).expect("df > 0");
    (2.0 * dist.sf(t_stat.abs())).min(1.0)
}

fn interval(center: f64, se: f64, df: f64, confidence: f64) -> [f64; 2] {
    let half = t_quantile(0.5 + confidence / 2.0, df) * se;
    [center - half, center + half]
}

/// Mean, spread and confidence interval of one metric. With `clusters`, the standard error is
/// the cluster-robust (delta-method) error of the ratio sum(S) / sum(N), with buckets - 1
/// degrees of freedom; the standard deviation stays the impression-level one.
pub fn estimate(m: Moments, clusters: Option<&ClusterMoments>, confidence: f64) -> Estimate {
    let n = m.n as f64;
    let mean = if m.n == 0 { 0.0 } else { m.sum / n };
    let sd = (m.n >= 2).then(|| {
        // Sums of squares minus n mean^2 can dip a hair below zero for a constant metric.
        ((m.sum_squares - m.sum * mean) / (n - 1.0)).max(0.0).sqrt()
    });
    let (se, df) = match clusters {
        None => (sd.map(|sd| sd / n.sqrt()), (m.n >= 2).then_some(n - 1.0)),
        Some(c) if c.buckets >= 2 && c.n > 0.0 => {
            let k = c.buckets as f64;
            // sum over buckets of (S_b - mean N_b)^2, expanded into the accumulated sums.
            let spread = (c.ss - 2.0 * mean * c.sn + mean * mean * c.nn).max(0.0);
            (Some((k / (k - 1.0) * spread).sqrt() / c.n), Some(k - 1.0))
        }
        Some(_) => (None, None),
    };
    let ci = match (se, df) {
        (Some(se), Some(df)) => Some(interval(mean, se, df, confidence)),
        _ => None,
    };
    Estimate { n: m.n, mean, sd, se, df, ci }
}

/// Treatment minus control with Welch's unequal-variances t-test.
pub fn compare(treatment: &Estimate, control: &Estimate, confidence: f64) -> Comparison {
    let difference = treatment.mean - control.mean;
    let relative_difference = (control.mean != 0.0).then(|| difference / control.mean);
    let mut out = Comparison {
        difference,
        difference_ci: None,
        relative_difference,
        relative_difference_ci: None,
        t: None,
        df: None,
        p_value: None,
        difference_cs: None,
        relative_difference_cs: None,
        difference_cs_empty: false,
        relative_difference_cs_empty: false,
        always_valid_p_value: None,
        always_valid_significant_at: None,
        fixed_horizon_significant_at: None,
        adjusted_p_value: None,
        adjusted_always_valid_p_value: None,
        holm_p_value: None,
        bh_p_value: None,
        bayesian: None,
        power: None,
        cuped: None,
        guardrail: None,
    };
    let (Some(se_t), Some(df_t), Some(se_c), Some(df_c)) = (treatment.se, treatment.df, control.se, control.df) else {
        return out;
    };
    let (v_t, v_c) = (se_t * se_t, se_c * se_c);
    let v = v_t + v_c;
    if v <= 0.0 || !v.is_finite() {
        // Both arms constant: no spread to test against (scipy answers NaN).
        return out;
    }
    let df = v * v / (v_t * v_t / df_t + v_c * v_c / df_c);
    let se = v.sqrt();
    let t = difference / se;
    out.t = Some(t);
    out.df = Some(df);
    out.p_value = Some(t_two_sided_p(t, df));
    out.difference_ci = Some(interval(difference, se, df, confidence));
    if let Some(v_rel) = relative_variance(treatment, control) {
        out.relative_difference_ci = Some(interval(difference / control.mean, v_rel.sqrt(), df, confidence));
    }
    out
}

/// The delta-method variance of mean_t / mean_c − 1 with independent arms,
/// se_t² / mc² + mt² se_c² / mc⁴; `None` when the control mean is 0, a side has no standard
/// error, or the variance is 0 or not finite. It is 0 when the treatment is constant at 0 (no
/// click yet on a small variant) whatever the control does: the ratio's first-order expansion
/// vanishes there, and an interval of width 0 would claim −100% exactly.
pub(crate) fn relative_variance(treatment: &Estimate, control: &Estimate) -> Option<f64> {
    let (mt, mc) = (treatment.mean, control.mean);
    let (se_t, se_c) = (treatment.se?, control.se?);
    if mc == 0.0 {
        return None;
    }
    let v = se_t * se_t / (mc * mc) + mt * mt * se_c * se_c / mc.powi(4);
    (v > 0.0 && v.is_finite()).then_some(v)
}

/// One-sided p-value of Welch's test that the treatment is *worse* than the control (greater
/// when lower is better, smaller otherwise): scipy's `ttest_ind(equal_var=False,
/// alternative="greater" | "less")` on the same arms. `None` when `cmp` has no test.
pub fn guardrail_p_value(cmp: &Comparison, lower_is_better: bool) -> Option<f64> {
    let (t, df) = (cmp.t?, cmp.df?);
    let dist = StudentsT::new(0.0, 1.0, df).ok()?;
    Some(if lower_is_better { dist.sf(t) } else { dist.cdf(t) })
}

/// Pearson's chi-square goodness of fit of `observed` counts to `expected_shares` (which sum
/// to 1). `None` when there is nothing to test (fewer than two variants or no traffic).
pub fn sample_ratio_mismatch(observed: &[u64], expected_shares: &[f64]) -> Option<SampleRatioTest> {
    debug_assert_eq!(observed.len(), expected_shares.len());
    let total: u64 = observed.iter().sum();
    if observed.len() < 2 || total == 0 {
        return None;
    }
    let total = total as f64;
    let chi_square: f64 = observed
        .iter()
        .zip(expected_shares)
        .map(|(&o, &share)| {
            let e = share * total;
            let d = o as f64 - e;
            d * d / e
        })
        .sum();
    let df = u32::try_from(observed.len() - 1).unwrap_or(u32::MAX);
    let p_value = ChiSquared::new(f64::from(df)).expect("df >= 1").sf(chi_square);
    Some(SampleRatioTest { chi_square, df, p_value })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn moments(values: &[f64]) -> Moments {
        Moments { n: values.len() as u64, sum: values.iter().sum(), sum_squares: values.iter().map(|v| v * v).sum() }
    }

    #[test]
    fn t_quantile_is_exact_where_the_library_inverse_is_not() {
        // scipy.stats.t.ppf(0.975, df)
        for (df, expected) in [(1.0, 12.706204736174694), (10.0, 2.228138851986274), (1e6, 1.959966356814107)] {
            assert!((t_quantile(0.975, df) - expected).abs() < 1e-9, "df {df}: {}", t_quantile(0.975, df));
        }
    }

    #[test]
    fn welch_matches_a_worked_example() {
        // r = scipy.stats.ttest_ind([1, 0, 1, 1, 0, 1], [0, 0, 1, 0, 0], equal_var=False)
        //   statistic 1.6059101370939322, pvalue 0.14287300840331724, df 8.968944099378882,
        //   r.confidence_interval(0.95) = (-0.1910481024080642, 1.1243814357413975)
        let t = estimate(moments(&[1.0, 0.0, 1.0, 1.0, 0.0, 1.0]), None, 0.95);
        let c = estimate(moments(&[0.0, 0.0, 1.0, 0.0, 0.0]), None, 0.95);
        let cmp = compare(&t, &c, 0.95);
        assert!((cmp.t.unwrap() - 1.6059101370939322).abs() < 1e-12);
        assert!((cmp.df.unwrap() - 8.968944099378882).abs() < 1e-9);
        assert!((cmp.p_value.unwrap() - 0.14287300840331724).abs() < 1e-12, "{:?}", cmp.p_value);
        let [low, high] = cmp.difference_ci.unwrap();
        assert!((low + 0.1910481024080642).abs() < 1e-12 && (high - 1.1243814357413975).abs() < 1e-12);
        assert!((cmp.difference - (4.0 / 6.0 - 0.2)).abs() < 1e-15);
    }

    #[test]
    fn constant_arms_have_no_test() {
        let zeros = estimate(moments(&[0.0; 10]), None, 0.95);
        assert_eq!(zeros.sd, Some(0.0));
        let cmp = compare(&zeros, &zeros, 0.95);
        assert_eq!((cmp.p_value, cmp.relative_difference), (None, None));
        let single = estimate(moments(&[0.5]), None, 0.95);
        assert_eq!((single.sd, single.ci), (None, None));
    }

    #[test]
    fn a_treatment_constant_at_zero_has_no_relative_interval() {
        // No click yet on the treatment: the relative difference is -1 with delta-method
        // variance 0, whose interval would be the zero-width [-1, -1].
        let t = estimate(moments(&[0.0; 10]), None, 0.95);
        let c = estimate(moments(&[1.0, 0.0, 1.0, 0.5, 0.0]), None, 0.95);
        let cmp = compare(&t, &c, 0.95);
        assert_eq!((cmp.relative_difference, cmp.relative_difference_ci), (Some(-1.0), None));
        assert!(cmp.difference_ci.is_some() && cmp.p_value.is_some(), "{cmp:?}");
    }

    #[test]
    fn cluster_error_with_one_impression_per_cluster_is_the_plain_error_scaled() {
        // One impression per bucket: sum (x_b - mean)^2 = (n - 1) sd^2, so the robust error is
        // sd / sqrt(n) * sqrt((n - 1) / n) * sqrt(n / (n - 1)) = the plain one.
        let values = [0.2, 0.9, 0.4, 0.0, 1.0, 0.7];
        let mut c = ClusterMoments::default();
        for v in values {
            c.add_bucket(1.0, v);
        }
        let plain = estimate(moments(&values), None, 0.95);
        let robust = estimate(moments(&values), Some(&c), 0.95);
        assert!((plain.se.unwrap() - robust.se.unwrap()).abs() < 1e-15);
    }

    #[test]
    fn skewed_split_is_flagged() {
        // scipy.stats.chisquare([5500, 4500]) -> statistic 100.0, pvalue 1.5239706048320995e-23
        let srm = sample_ratio_mismatch(&[5500, 4500], &[0.5, 0.5]).unwrap();
        assert!((srm.chi_square - 100.0).abs() < 1e-9);
        assert!((srm.p_value - 1.5239706048320995e-23).abs() < 1e-30);
        assert!(sample_ratio_mismatch(&[100], &[1.0]).is_none());
    }
}
