//! Click models: what clicks say about position bias and relevance, once position bias is
//! taken out. Pure: no I/O, no clock, no state beyond the arguments.
//!
//! Every estimator reads a [`ClickTable`]: for each tracked (normalized query, document)
//! pair, how often it was shown at each rank and how often it was clicked there, summed over
//! every variant and interleaved list. That table is all that the position-based model's
//! likelihood, the intervention-harvesting estimator and COEC depend on, so the engine keeps
//! only it (see [`log`]) and the estimators run on it whenever asked.
//!
//! | file | estimate | source |
//! |---|---|---|
//! | [`pbm`] | examination probability per rank and attractiveness per pair, by EM | Chuklin, Markov, de Rijke, *Click Models for Web Search* (2015), ch. 3.3 and 4.2 |
//! | [`harvest`] | examination ratios to rank 1 from pairs shown at both ranks | Agarwal, Zaitsev, Wang, Li, Najork, Joachims, *Estimating Position Bias without Intrusive Interventions*, WSDM 2019, §4 |
//! | [`coec`] | clicks over expected clicks per pair | OpenSearch Search Relevance Workbench's COEC implicit judgments |
//! | [`ips`] | inverse-propensity-weighted click values and the counterfactual estimate of a candidate ranking | Joachims, Swaminathan, Schnabel, *Unbiased Learning-to-Rank with Biased Feedback*, WSDM 2017; Strehl et al., NeurIPS 2010 (clipping) |
//!
//! Beside them, the state they read: [`log`], one partition's bounded click log (admission of
//! the head queries, the sliding horizon, segments; `log/snapshot.rs` its form in a partition's
//! snapshot, checked before it is restored), and [`named`], a click table with the names of
//! its pairs and its JSON-lines text form (`/api/v1/clicks`, `--table`).
//!
//! Ranks are 0-based in code (rank 0 is the top result) and 1-based wherever a person reads them.

pub mod coec;
pub mod harvest;
pub mod ips;
pub mod log;
pub mod named;
pub mod pbm;

use serde::{Deserialize, Serialize};

/// How often a pair was shown at one rank, and clicked there.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cell {
    /// Impressions that showed the pair's document at this rank for the pair's query.
    pub impressions: u64,
    /// Of those, the ones where the document was clicked.
    pub clicks: u64,
}

impl Cell {
    /// Adds another cell's counts (saturating: counts from outside are untrusted).
    pub fn add(&mut self, other: Cell) {
        self.impressions = self.impressions.saturating_add(other.impressions);
        self.clicks = self.clicks.saturating_add(other.clicks);
    }
}

/// One tracked pair's cells: (rank, counts) in rank order, only the ranks it was shown at.
pub type PairCells = Vec<(u16, Cell)>;

/// The click log every estimator reads: per pair, its cells over ranks `0..max_rank`.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ClickTable {
    /// Ranks from here down are not tracked (`clicks.max_rank`): every rank's examination is
    /// a parameter, and deep ranks have too few clicks to estimate one.
    pub max_rank: usize,
    /// Every tracked pair's cells, in the caller's order (estimates per pair come back in it).
    pub pairs: Vec<PairCells>,
}

impl ClickTable {
    /// Every cell with its pair index, rank and counts, skipping ranks past `max_rank`.
    pub fn cells(&self) -> impl Iterator<Item = (usize, usize, Cell)> + '_ {
        self.pairs.iter().enumerate().flat_map(move |(pair, cells)| {
            cells
                .iter()
                .filter(move |(rank, _)| usize::from(*rank) < self.max_rank)
                .map(move |&(rank, cell)| (pair, usize::from(rank), cell))
        })
    }

    /// Impressions and clicks per rank over every pair.
    pub fn per_rank(&self) -> Vec<Cell> {
        let mut ranks = vec![Cell::default(); self.max_rank];
        for (_, rank, cell) in self.cells() {
            ranks[rank].add(cell);
        }
        ranks
    }

    /// The pairs whose showings or clicks over their ranks reach 2^64 − 1, where every sum of
    /// counts saturates: their totals (and the rates of their ranks) are capped, not exact.
    pub fn saturated_pairs(&self) -> usize {
        (0..self.pairs.len())
            .filter(|&pair| {
                let total = self.pair_total(pair);
                total.impressions == u64::MAX || total.clicks == u64::MAX
            })
            .count()
    }

    /// A pair's total over its ranks (saturating, as [`Cell::add`]).
    pub fn pair_total(&self, pair: usize) -> Cell {
        let mut total = Cell::default();
        for (rank, cell) in self.pairs.get(pair).map(Vec::as_slice).unwrap_or_default() {
            if usize::from(*rank) < self.max_rank {
                total.add(*cell);
            }
        }
        total
    }
}

#[cfg(test)]
pub(crate) mod simulate {
    //! A position-based user for the estimators' tests: known examination and attractiveness,
    //! rankings shuffled per impression so that every pair is shown at several ranks.
    use rand::rngs::SmallRng;
    use rand::seq::SliceRandom;
    use rand::{Rng, SeedableRng};

    use super::{Cell, ClickTable};

    /// The table of `impressions` simulated impressions of `queries` queries with `docs`
    /// documents each, all shown in a random order, clicked with probability
    /// `examination[rank] * attractiveness`; returns the table and the true attractiveness.
    pub fn pbm_table(examination: &[f64], queries: usize, impressions: usize, seed: u64) -> (ClickTable, Vec<f64>) {
        let mut rng = SmallRng::seed_from_u64(seed);
        let docs = examination.len();
        let alpha: Vec<f64> = (0..queries * docs).map(|_| rng.random_range(0.05..0.95)).collect();
        let mut cells = vec![vec![Cell::default(); docs]; queries * docs];
        let mut order: Vec<usize> = (0..docs).collect();
        for _ in 0..impressions {
            let q = rng.random_range(0..queries);
            order.shuffle(&mut rng);
            for (rank, &d) in order.iter().enumerate() {
                let cell = &mut cells[q * docs + d][rank];
                cell.impressions += 1;
                cell.clicks += u64::from(rng.random_bool(examination[rank] * alpha[q * docs + d]));
            }
        }
        let pairs =
            cells.into_iter().map(|c| c.into_iter().enumerate().map(|(r, c)| (r as u16, c)).collect()).collect();
        (ClickTable { max_rank: docs, pairs }, alpha)
    }
}

/// How often and how long the models are fitted on a running replica (`[clicks]`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FitSettings {
    /// The EM's limits.
    pub em: pbm::EmSettings,
    /// The gauges refit at most this often.
    pub refit_interval: std::time::Duration,
}

/// Every estimate of a table: what `rankpulse judgments --from-clicks`, `/api/v1/clicks/models`
/// and the gauges report.
#[derive(Debug, Clone)]
pub struct Fitted {
    /// The position-based model by EM.
    pub pbm: pbm::PbmFit,
    /// The examination ratios to rank 1 by intervention harvesting.
    pub harvest: Vec<Option<harvest::Ratio>>,
    /// SRW's COEC per pair.
    pub coec: Vec<coec::Coec>,
}

impl Fitted {
    pub fn fit(table: &ClickTable, em: pbm::EmSettings) -> Fitted {
        Fitted { pbm: pbm::fit(table, em), harvest: harvest::ratios_to_top(table), coec: coec::coec(table) }
    }

    /// A pair's attractiveness on the scale of rank 1 (α × γ_1: the click-through rate it
    /// would have at the top), which is identified where α alone is not.
    pub fn attractiveness_at_top(&self, pair: usize) -> Option<f64> {
        Some(self.pbm.attractiveness.get(pair)? * self.pbm.examination.first().copied().flatten()?)
    }
}
