//! COEC, clicks over expected clicks, exactly as OpenSearch's Search Relevance Workbench
//! computes its implicit judgments (`CoecClickModel.java` in opensearch-project/
//! search-relevance, `src/main/java/org/opensearch/searchrelevance/judgments/clickmodel/coec/`,
//! lines 77–153 for the rates, 155–252 for the pairs, 664–708 for the score).
//!
//! * The click-through rate of a rank is every pair's clicks at it over every pair's showings
//!   at it (0 where nothing was shown).
//! * A pair's expected clicks are the rate of its *best* (lowest) rank times all its showings,
//!   wherever they were: SRW's rule, not the textbook COEC of Zhang and Jones (2007), which sums
//!   the rate of each showing's own rank. The two agree for a pair always shown at one rank.
//! * COEC is clicks over expected clicks, and 0 when nothing is expected (SRW stores 0).
//!
//! SRW keys pairs by the query text exactly as logged; rankpulse keys them by the normalized
//! text (as its judgment lists are keyed), so differently cased or spaced spellings of one
//! query count as one. SRW's rank filter also admits the rank just past `maxRank` into a
//! pair's counts without computing a rate for it; the click log does not track that rank.
//! Only the tracked ranks count here.
//!
//! A pair's totals over its ranks saturate at 2^64 − 1 rather than wrap (tables from outside
//! are untrusted, and a wrapped sum would report a handful of showings for the busiest pair);
//! the commands say when a pair reached it ([`ClickTable::saturated_pairs`]).

use super::ClickTable;

/// One pair's COEC.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Coec {
    /// Its clicks at the tracked ranks.
    pub clicks: u64,
    /// Its showings at the tracked ranks.
    pub impressions: u64,
    /// Its best (0-based) rank; `None` when it has no showing.
    pub best_rank: Option<usize>,
    /// The click-through rate of its best rank times its showings.
    pub expected_clicks: f64,
    /// clicks / expected clicks; 0 when nothing is expected.
    pub coec: f64,
}

/// The click-through rate of each rank over every pair (0 where nothing was shown, as SRW).
pub fn rank_ctr(table: &ClickTable) -> Vec<f64> {
    table
        .per_rank()
        .iter()
        .map(|c| if c.impressions > 0 { c.clicks as f64 / c.impressions as f64 } else { 0.0 })
        .collect()
}

/// Every pair's COEC, in the table's order.
pub fn coec(table: &ClickTable) -> Vec<Coec> {
    let ctr = rank_ctr(table);
    let mut out =
        vec![Coec { clicks: 0, impressions: 0, best_rank: None, expected_clicks: 0.0, coec: 0.0 }; table.pairs.len()];
    for (pair, rank, cell) in table.cells() {
        let entry = &mut out[pair];
        entry.clicks = entry.clicks.saturating_add(cell.clicks);
        entry.impressions = entry.impressions.saturating_add(cell.impressions);
        if cell.impressions > 0 && entry.best_rank.is_none_or(|best| rank < best) {
            entry.best_rank = Some(rank);
        }
    }
    for entry in &mut out {
        if let Some(best) = entry.best_rank {
            entry.expected_clicks = ctr[best] * entry.impressions as f64;
        }
        if entry.expected_clicks > 0.0 {
            entry.coec = entry.clicks as f64 / entry.expected_clicks;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clicks::Cell;

    #[test]
    fn clicks_over_the_rate_of_the_best_rank_times_every_showing() {
        let cell = |impressions, clicks| Cell { impressions, clicks };
        // Rank 1: 20 showings, 8 clicks (0.4); rank 2: 20 showings, 2 clicks (0.1).
        let table = ClickTable {
            max_rank: 3,
            pairs: vec![
                vec![(0, cell(10, 6)), (1, cell(10, 2))],
                vec![(0, cell(10, 2)), (1, cell(10, 0))],
                vec![(2, cell(5, 0))],
            ],
        };
        let out = coec(&table);
        assert_eq!((out[0].clicks, out[0].impressions, out[0].best_rank), (8, 20, Some(0)));
        assert!((out[0].expected_clicks - 8.0).abs() < 1e-12, "0.4 × 20 showings, not 0.4 × 10 + 0.1 × 10");
        assert!((out[0].coec - 1.0).abs() < 1e-12);
        assert!((out[1].coec - 0.25).abs() < 1e-12);
        assert_eq!(out[2].coec, 0.0, "only shown where nobody clicks: 0, as SRW stores it");
        assert_eq!(rank_ctr(&table)[2], 0.0);
    }

    #[test]
    fn totals_past_two_to_the_64_saturate_rather_than_wrap() {
        let cell = |impressions, clicks| Cell { impressions, clicks };
        let table = ClickTable { max_rank: 2, pairs: vec![vec![(0, cell(u64::MAX, u64::MAX - 1)), (1, cell(2, 2))]] };
        let out = coec(&table)[0];
        assert_eq!((out.impressions, out.clicks), (u64::MAX, u64::MAX));
        assert_eq!(table.saturated_pairs(), 1);
    }
}
