//! The click log as a partition's snapshot carries it: written borrowed after the rest of
//! the partition's state (`engine::snapshot`), read back untrusted, checked, then restored with
//! its indexes rebuilt.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]

use serde::{Deserialize, Serialize};

use super::{ClickLog, LogCounts, LogSettings, Map, Pair, Query, Showing, MAX_RANKS, SKETCH_WIDTH};
use crate::checkpoint::Inconsistency;
use crate::ids::QueryKey;

/// A click log as a snapshot carries it (`engine::snapshot` writes it after the rest of a
/// partition's state): the slots and counts; the indexes are rebuilt on restore.
#[derive(Serialize)]
pub struct LogStateRef<'a> {
    epoch: Option<i64>,
    queries: &'a [Option<Query>],
    pairs: &'a [Option<Pair>],
    showings: &'a Map<QueryKey, Showing>,
    sketch: &'a [u32],
    admissions: u32,
    counts: LogCounts,
}

/// [`LogStateRef`] read back: untrusted until [`LogState::check`] has passed it.
#[derive(Debug, Deserialize)]
pub struct LogState {
    epoch: Option<i64>,
    queries: Vec<Option<Query>>,
    pub(super) pairs: Vec<Option<Pair>>,
    pub(super) showings: Map<QueryKey, Showing>,
    pub(super) sketch: Vec<u32>,
    admissions: u32,
    counts: LogCounts,
}

impl LogState {
    /// Whether the log is consistent: every slot a query, pair or pending showing refers to
    /// exists and refers back, no query or pair is tracked twice, a pair's ranks are in order,
    /// and the sketch has its width. Bytes that pass a checksum can still be forged; the log
    /// indexes by these numbers, so none is used before this has passed.
    pub fn check(&self) -> Result<(), Inconsistency> {
        let LogState { queries, pairs, showings, sketch, .. } = self;
        if sketch.len() != SKETCH_WIDTH {
            return Err(Inconsistency::Shape {
                what: "counters in the click log's sketch",
                found: sketch.len(),
                expected: SKETCH_WIDTH,
            });
        }
        let slots = |what, found: usize| {
            u32::try_from(found).map_err(|_| Inconsistency::TooMany {
                what,
                found,
                limit: "what 32-bit slot numbers address",
                max: u32::MAX as usize,
            })
        };
        let query_count = slots("click log query slots", queries.len())?;
        let pair_count = slots("click log pair slots", pairs.len())?;
        let mut hashes = std::collections::HashSet::new();
        for (slot, query) in queries.iter().enumerate() {
            let Some(query) = query else { continue };
            if !hashes.insert(query.hash) {
                return Err(Inconsistency::Twice { what: "a click log query is tracked" });
            }
            for &pair in &query.pairs {
                let owner = pairs.get(pair as usize).and_then(Option::as_ref).map(|p| p.query);
                if owner != Some(slot as u32) {
                    return Err(Inconsistency::Dangling { what: "click log query slot", index: slot as u64 });
                }
            }
        }
        let mut keys = std::collections::HashSet::new();
        for (slot, pair) in pairs.iter().enumerate() {
            let Some(pair) = pair else { continue };
            let listed = queries
                .get(pair.query as usize)
                .and_then(Option::as_ref)
                .is_some_and(|q| q.pairs.contains(&(slot as u32)));
            if !listed {
                return Err(Inconsistency::Dangling { what: "click log pair slot", index: slot as u64 });
            }
            if !keys.insert((pair.query, pair.doc_key)) {
                return Err(Inconsistency::Twice { what: "a click log pair is tracked" });
            }
            if !pair.cells.windows(2).all(|w| matches!(w, [a, b] if a.0 < b.0)) {
                return Err(Inconsistency::Order { what: "the ranks of a click log pair" });
            }
        }
        for showing in showings.values() {
            if showing.query >= query_count {
                return Err(Inconsistency::Beyond {
                    what: "a pending showing's query slot",
                    index: showing.query.into(),
                    limit: "the click log's query slots",
                    count: query_count.into(),
                });
            }
            let ranks = usize::from(showing.ranks);
            let Some(shown) = showing.pairs.get(..ranks) else {
                return Err(Inconsistency::TooMany {
                    what: "ranks in a pending showing",
                    found: ranks,
                    limit: "MAX_RANKS",
                    max: MAX_RANKS,
                });
            };
            if let Some(&slot) = shown.iter().find(|&&s| s >= pair_count) {
                return Err(Inconsistency::Beyond {
                    what: "a pending showing's pair slot",
                    index: slot.into(),
                    limit: "the click log's pair slots",
                    count: pair_count.into(),
                });
            }
        }
        Ok(())
    }
}

impl ClickLog {
    /// What a snapshot carries of the log.
    pub fn state(&self) -> LogStateRef<'_> {
        LogStateRef {
            epoch: self.epoch,
            queries: &self.queries,
            pairs: &self.pairs,
            showings: &self.showings,
            sketch: &self.sketch,
            admissions: self.admissions,
            counts: self.counts,
        }
    }

    /// The log a snapshot carried, once [`LogState::check`] has passed it: limits tighter
    /// than the snapshot's (`clicks.max_rank`, `max_queries_per_partition` lowered) take effect
    /// as the log moves on; ranks past `max_rank` are dropped now.
    pub fn restore(settings: LogSettings, state: LogState) -> Result<ClickLog, Inconsistency> {
        state.check()?;
        let mut log = ClickLog::new(settings);
        let LogState { epoch, mut queries, mut pairs, showings, sketch, admissions, counts } = state;
        for (slot, query) in queries.iter().enumerate() {
            if let Some(query) = query {
                log.query_index.insert(query.hash, slot as u32);
            }
        }
        for (slot, pair) in pairs.iter_mut().enumerate() {
            if let Some(pair) = pair {
                log.pair_index.insert((pair.query, pair.doc_key), slot as u32);
                pair.cells.retain(|(rank, _)| usize::from(*rank) < log.settings.max_rank);
            }
        }
        // The pending counts follow from the showings, whatever the bytes said.
        queries.iter_mut().flatten().for_each(|q| q.pending = 0);
        pairs.iter_mut().flatten().for_each(|p| p.pending = 0);
        for showing in showings.values() {
            let Some(q) = queries.get_mut(showing.query as usize).and_then(Option::as_mut) else { continue };
            if q.generation != showing.generation {
                continue;
            }
            q.pending += 1;
            for &pair in showing.pairs.iter().take(usize::from(showing.ranks)) {
                if let Some(p) = pairs.get_mut(pair as usize).and_then(Option::as_mut) {
                    p.pending += 1;
                }
            }
        }
        log.free_queries =
            (0..queries.len() as u32).filter(|&s| queries.get(s as usize).is_some_and(Option::is_none)).collect();
        log.free_pairs =
            (0..pairs.len() as u32).filter(|&s| pairs.get(s as usize).is_some_and(Option::is_none)).collect();
        log.epoch = epoch;
        log.queries = queries;
        log.pairs = pairs;
        log.showings = showings;
        log.sketch = sketch;
        log.admissions = admissions;
        log.counts = counts;
        Ok(log)
    }
}
