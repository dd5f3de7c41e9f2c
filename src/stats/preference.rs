//! Interleaving's pairwise preference: does users' engagement prefer one ranker's results over
//! another's? Pure: counts in, figures out.
//!
//! Over the impressions in which some ranker earned credit (`engaged`), each contributes
//! d = +1 when `ranker` earned more credit than `opponent`, −1 when less, 0 otherwise. The
//! preference Δ = mean d = (wins − losses) / engaged is twice the Δ_AB = (wins + ties / 2) /
//! engaged − 1/2 of Chapelle, Joachims, Radlinski and Yue (2012, "Large-scale validation and
//! analysis of interleaved search evaluation", ACM TOIS); as a mean of d, with ties in the
//! denominator, its interval is the usual one:
//! * interval: Student's t from [`super::estimate`], with n − 1 degrees of freedom, or with
//!   `ab.unit` a user or session, the cluster-robust (delta-method) error over unit buckets
//!   with K − 1, K counting every bucket of the group with an interleaved impression, engaged
//!   or not (per bucket: engaged impressions and the sum of d);
//! * sign test of "no preference" on the decided impressions (d ≠ 0): the exact two-sided
//!   binomial test with p = ½ (`scipy.stats.binomtest(wins, wins + losses)`); clustered, a
//!   z-test of Σd with the cluster-robust variance Σ_b (Σd in bucket b)², the score form under
//!   the null (a sign test whose variance counts whole users);
//! * anytime-valid: the same Gaussian-mixture boundary as the A/B comparisons
//!   ([`super::sequential`]) with n = engaged and V = the squared standard error.

use serde::Serialize;
use statrs::distribution::{Binomial, ContinuousCDF, DiscreteCDF, Normal};

use super::sequential::MixtureBoundary;
use super::{estimate, ClusterMoments, Moments};

/// What the preference of one pair is computed from.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PairCounts {
    /// Impressions in which some ranker earned credit.
    pub engaged: u64,
    /// Of those, where `ranker` earned more than `opponent`.
    pub wins: u64,
    /// Where `opponent` earned more than `ranker`.
    pub losses: u64,
}

/// Per unit bucket, the engaged impressions and Σd: what the clustered figures need.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PairClusters {
    /// The buckets' (engaged, Σd) moments, every bucket holding an impression of the group.
    pub moments: ClusterMoments,
}

/// The preference figures of one pair.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Preference {
    /// (wins − losses) / engaged: > 0 when users preferred `ranker`.
    pub preference: f64,
    /// Its standard error (cluster-robust with a clustered unit).
    pub se: Option<f64>,
    /// The interval's degrees of freedom.
    pub df: Option<f64>,
    /// Student's t interval at `ab.confidence`.
    pub preference_ci: Option<[f64; 2]>,
    /// Which sign test: `exact binomial` or `cluster-robust z`.
    pub sign_test: &'static str,
    /// Two-sided p-value of "no preference"; absent without a decided impression.
    pub sign_test_p_value: Option<f64>,
    /// Anytime-valid confidence sequence of the preference, at `ab.confidence`: this look's, or
    /// in a cumulative report the running intersection over the looks.
    pub preference_cs: Option<[f64; 2]>,
    /// Cumulative reports: the looks' sequences have no value in common (see
    /// [`super::sequential::RunningFigures`]), so `preference_cs` is absent.
    pub preference_cs_empty: bool,
    /// Always-valid p-value of "no preference" (Gaussian-mixture SPRT), safe to watch: this
    /// look's, or in a cumulative report the running minimum over the looks.
    pub always_valid_p_value: Option<f64>,
}

/// The figures of one pair: `clusters` when the unit is a user or session.
pub fn preference(
    counts: PairCounts,
    clusters: Option<&PairClusters>,
    confidence: f64,
    boundary: &MixtureBoundary,
) -> Preference {
    let PairCounts { engaged, wins, losses } = counts;
    let moments = Moments { n: engaged, sum: wins as f64 - losses as f64, sum_squares: (wins + losses) as f64 };
    let est = estimate(moments, clusters.map(|c| &c.moments), confidence);
    let (sign_test, sign_test_p_value) = match clusters {
        None => ("exact binomial", (wins + losses > 0).then(|| binomial_two_sided(wins.min(losses), wins + losses))),
        Some(c) => {
            // Σ_b S_b² is the clusters' sum of squared Σd.
            let variance = c.moments.ss;
            let p = (variance > 0.0).then(|| {
                let z = moments.sum / variance.sqrt();
                (2.0 * Normal::standard().sf(z.abs())).min(1.0)
            });
            ("cluster-robust z", p)
        }
    };
    let (preference_cs, always_valid_p_value) = match est.se {
        Some(se) if se > 0.0 && engaged > 0 => {
            let (n, v) = (engaged as f64, se * se);
            let half = boundary.half_width(n, v);
            (Some([est.mean - half, est.mean + half]), Some(boundary.p_value(n, est.mean, v)))
        }
        _ => (None, None),
    };
    Preference {
        preference: est.mean,
        se: est.se,
        df: est.df,
        preference_ci: est.ci,
        sign_test,
        sign_test_p_value,
        preference_cs,
        preference_cs_empty: false,
        always_valid_p_value,
    }
}

/// 2 P(X ≤ k) for X ~ Binomial(n, ½), at most 1: the exact two-sided sign test with k the
/// smaller count (the distribution is symmetric, so this is scipy's `binomtest` p-value).
fn binomial_two_sided(k: u64, n: u64) -> f64 {
    match Binomial::new(0.5, n) {
        Ok(b) => (2.0 * b.cdf(k)).min(1.0),
        Err(_) => 1.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn boundary() -> MixtureBoundary {
        MixtureBoundary::tightest_at(5000.0, 0.05)
    }

    #[test]
    fn sign_test_matches_scipy() {
        // scipy.stats.binomtest(k, n, 0.5).pvalue
        for (k, n, expected) in
            [(3u64, 10u64, 0.34375), (40, 100, 0.05688793364098089), (450, 1000, 0.0017305360849763027), (5, 10, 1.0)]
        {
            let p = binomial_two_sided(k, n);
            assert!((p - expected).abs() < 1e-12, "{k}/{n}: {p} vs {expected}");
        }
    }

    #[test]
    fn preference_is_the_mean_of_the_signs_with_a_t_interval() {
        // 60 wins, 40 losses, 20 ties: d has mean 20/120; scipy.stats.t.interval(0.95, 119,
        // loc=1/6, scale=sd(d, ddof=1)/sqrt(120)).
        let p = preference(PairCounts { engaged: 120, wins: 60, losses: 40 }, None, 0.95, &boundary());
        assert!((p.preference - 1.0 / 6.0).abs() < 1e-15);
        let sd = ((100.0 - 120.0 / 36.0) / 119.0f64).sqrt();
        assert!((p.se.unwrap() - sd / 120f64.sqrt()).abs() < 1e-15);
        let [lo, hi] = p.preference_ci.unwrap();
        assert!((lo - 0.0037515572071821768).abs() < 1e-9 && (hi - 0.32958177612615114).abs() < 1e-9, "{lo} {hi}");
        // binomtest(40, 100) as above.
        assert!((p.sign_test_p_value.unwrap() - 0.05688793364098089).abs() < 1e-12);
        assert_eq!(p.sign_test, "exact binomial");
        let av = p.always_valid_p_value.unwrap();
        assert!(av > p.sign_test_p_value.unwrap() && av <= 1.0, "the always-valid p-value pays for peeking: {av}");
    }

    #[test]
    fn clustered_sign_test_counts_whole_users() {
        // Two buckets holding +10 and +10, one holding -2 (each bucket 10 engaged): z = 18 /
        // sqrt(100 + 100 + 4).
        let mut moments = ClusterMoments::default();
        for (n, s) in [(10.0, 10.0), (10.0, 10.0), (10.0, -2.0)] {
            moments.add_bucket(n, s);
        }
        let counts = PairCounts { engaged: 30, wins: 21, losses: 3 };
        let p = preference(counts, Some(&PairClusters { moments }), 0.95, &boundary());
        let z = 18.0 / 204f64.sqrt();
        let expected = 2.0 * Normal::standard().sf(z);
        assert!((p.sign_test_p_value.unwrap() - expected).abs() < 1e-15);
        assert_eq!(p.sign_test, "cluster-robust z");
        // The unclustered test, which takes 24 decided impressions as independent, is far
        // more confident.
        let plain = preference(counts, None, 0.95, &boundary());
        assert!(plain.sign_test_p_value.unwrap() < p.sign_test_p_value.unwrap() / 100.0);
    }

    #[test]
    fn no_decided_impression_has_no_test() {
        let p = preference(PairCounts { engaged: 10, wins: 0, losses: 0 }, None, 0.95, &boundary());
        assert_eq!((p.preference, p.sign_test_p_value, p.always_valid_p_value), (0.0, None, None));
        let empty = preference(PairCounts::default(), None, 0.95, &boundary());
        assert_eq!((empty.preference_ci, empty.sign_test_p_value), (None, None));
    }
}
