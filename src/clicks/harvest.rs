//! Intervention harvesting: position bias from documents that different rankers showed the
//! same query at different ranks (Agarwal, Zaitsev, Wang, Li, Najork, Joachims, *Estimating
//! Position Bias without Intrusive Interventions*, WSDM 2019, §4).
//!
//! A/B variants and interleaved lists put the same (query, document) pair at different ranks
//! without anyone randomizing on purpose. For the pairs shown both at rank 1 and at rank k,
//! the click-through rates there differ only by examination (the pair's relevance is the
//! same), so
//!
//! ```text
//! p_k / p_1 = Σ_{pairs in S_k} ctr(pair, k) / Σ_{pairs in S_k} ctr(pair, 1)
//! ```
//!
//! where S_k is the set of pairs shown at both ranks and ctr a pair's clicks over showings at
//! that rank. Weighting every pair's rate equally is the paper's weighting by how often each
//! ranker put the pair there (its ĉ with m_k(q, d) the showings of the pair at rank k). Unlike
//! the PBM's EM this needs no model of each pair's attractiveness, only that examination does
//! not depend on the document, so it is the check on the EM: where they disagree, the
//! position-based assumption is what fails (a cascade-like user, whose examination of rank k
//! depends on the results above it, shows as such a disagreement).
//!
//! The standard error is the ratio estimator's over pairs as sampled units (Cochran,
//! *Sampling Techniques*, 3rd ed., 1977, §6.4): SE² = m/(m − 1) · Σ (a_i − R b_i)² / B².

use super::ClickTable;

/// The examination ratio of one rank to rank 1.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ratio {
    /// p_k / p_1.
    pub ratio: f64,
    /// Its standard error over pairs; `None` with fewer than 2 pairs.
    pub stderr: Option<f64>,
    /// The pairs shown both at rank 1 and at this rank: the intervention set S_k.
    pub pairs: usize,
}

/// p_k / p_1 for every rank (rank 1's is 1), `None` where no pair was shown at both ranks or
/// none of those was clicked at rank 1.
pub fn ratios_to_top(table: &ClickTable) -> Vec<Option<Ratio>> {
    let ctr = |cells: &super::PairCells, rank: usize| {
        cells
            .iter()
            .find(|(r, c)| usize::from(*r) == rank && c.impressions > 0)
            .map(|(_, c)| c.clicks as f64 / c.impressions as f64)
    };
    let mut out = Vec::with_capacity(table.max_rank);
    for rank in 0..table.max_rank {
        if rank == 0 {
            let pairs = table.pairs.iter().filter(|cells| ctr(cells, 0).is_some()).count();
            out.push((pairs > 0).then_some(Ratio { ratio: 1.0, stderr: Some(0.0), pairs }));
            continue;
        }
        let both: Vec<(f64, f64)> =
            table.pairs.iter().filter_map(|cells| Some((ctr(cells, rank)?, ctr(cells, 0)?))).collect();
        let (a, b) = both.iter().fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
        if both.is_empty() || b <= 0.0 {
            out.push(None);
            continue;
        }
        let ratio = a / b;
        let m = both.len();
        let stderr = (m > 1).then(|| {
            let residuals: f64 = both.iter().map(|(x, y)| (x - ratio * y).powi(2)).sum();
            (residuals * m as f64 / (m - 1) as f64).sqrt() / b
        });
        out.push(Some(Ratio { ratio, stderr, pairs: m }));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clicks::simulate::pbm_table;
    use crate::clicks::Cell;

    #[test]
    fn recovers_the_examination_ratios_of_a_position_based_user_within_three_standard_errors() {
        let truth = [1.0, 0.7, 0.5, 0.35, 0.25];
        let (table, _) = pbm_table(&truth, 40, 20_000, 3);
        let ratios = ratios_to_top(&table);
        for (rank, (r, truth)) in ratios.iter().zip(truth).enumerate().skip(1) {
            let r = r.unwrap();
            assert_eq!(r.pairs, 200);
            let z = (r.ratio - truth) / r.stderr.unwrap();
            assert!(z.abs() < 3.0, "rank {}: {} ± {} vs {truth}", rank + 1, r.ratio, r.stderr.unwrap());
        }
    }

    #[test]
    fn a_rank_no_pair_shares_with_the_top_has_no_ratio() {
        let cell = |impressions, clicks| Cell { impressions, clicks };
        let table = ClickTable {
            max_rank: 3,
            pairs: vec![
                vec![(0, cell(10, 5)), (1, cell(10, 2))],
                vec![(2, cell(10, 1))],
                vec![(0, cell(4, 0)), (1, cell(4, 1))],
            ],
        };
        let ratios = ratios_to_top(&table);
        assert_eq!(ratios[0].unwrap().ratio, 1.0);
        let second = ratios[1].unwrap();
        assert_eq!(second.pairs, 2);
        assert!((second.ratio - (0.2 + 0.25) / 0.5).abs() < 1e-12);
        assert_eq!(ratios[2], None);
    }
}
