//! The click log: one partition's bounded table of how often each (normalized query,
//! document) pair was shown at each rank and clicked there, over a sliding event-time horizon.
//! What the estimators of [`super`] read ([`ClickLog::add_to`]).
//!
//! * **Bounded.** At most `max_queries` queries per partition are tracked, the head of the
//!   traffic: a query not tracked is counted in a fixed-size sketch, and replaces the
//!   least-shown tracked query once its count there exceeds that one's showings (the
//!   Space-Saving idea, Metwally, Agrawal, El Abbadi, ICDT 2005, with a count-min row
//!   standing in for its exact counters). The documents of a tracked query are tracked as
//!   they are shown at ranks `1..=max_rank`.
//! * **Sliding.** Counts are kept for two epochs of `horizon` event time each, the current
//!   and the previous; a finalized impression of a newer epoch moves them on, dropping the
//!   oldest. Pairs and queries left without counts are then forgotten.
//! * **Attributed as the metrics are.** An impression is offered when the join takes it as
//!   pending, and counted when it is finalized, with its attributed gains: a result is clicked
//!   when its gain reaches the relevance threshold, exactly as every click metric decides.
//!
//! * **Per segment.** A query's segment (a device, a page type; empty for none) is part of
//!   what it is tracked by, so each segment's position bias can be estimated apart.
//!
//! Memory, measured by `benches/clicks/mod.rs`: about 220 bytes per tracked pair with document
//! ids of 10 to 14 bytes (its query's share included), and about 150 bytes per pending tracked
//! impression.

mod snapshot;
#[cfg(test)]
mod tests;

use std::collections::HashMap;

/// The log's maps: looked up for every rank of every tracked impression, where SipHash showed.
type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

use serde::{Deserialize, Serialize};

pub use snapshot::{LogState, LogStateRef};

use super::named::{NamedTable, PairName};
use super::Cell;
use crate::ids::{DocKey, QueryKey};
use crate::time::EventTime;

/// Ranks the log can track at most: a pending impression's pairs sit in a fixed array.
pub const MAX_RANKS: usize = 20;

/// Width of the sketch that counts the showings of queries not tracked.
const SKETCH_WIDTH: usize = 4096;

/// How the log is bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogSettings {
    /// Ranks tracked (at most [`MAX_RANKS`]).
    pub max_rank: usize,
    /// Queries tracked at most.
    pub max_queries: usize,
    /// Length of an epoch of event time, in milliseconds.
    pub horizon_ms: i64,
    /// The smallest attributed gain that counts as a click.
    pub click_threshold: u8,
}

/// What happened to the impressions offered to the log.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogCounts {
    /// Finalized and counted in the table.
    pub tracked: u64,
    /// Of a query not tracked (outside the head, or its text normalized to nothing).
    pub untracked: u64,
    /// Without a query text to key them by.
    pub without_query: u64,
    /// Finalized with an event time before the previous epoch: too old to count.
    pub outside_horizon: u64,
    /// Finalized after their query was replaced by a busier one.
    pub dropped: u64,
    /// Queries replaced by busier ones.
    pub queries_replaced: u64,
}

impl LogCounts {
    /// Adds another partition's counts (saturating: a restored snapshot's counts are read from
    /// outside, and a sum must not wrap to a small number).
    pub fn add(&mut self, other: &LogCounts) {
        self.tracked = self.tracked.saturating_add(other.tracked);
        self.untracked = self.untracked.saturating_add(other.untracked);
        self.without_query = self.without_query.saturating_add(other.without_query);
        self.outside_horizon = self.outside_horizon.saturating_add(other.outside_horizon);
        self.dropped = self.dropped.saturating_add(other.dropped);
        self.queries_replaced = self.queries_replaced.saturating_add(other.queries_replaced);
    }
}

/// What a replica's click log holds, over every partition it owns.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LogSummary {
    /// The impressions' fates.
    pub counts: LogCounts,
    /// Tracked queries, tracked pairs, and offered impressions not finalized yet.
    pub queries: usize,
    pub pairs: usize,
    pub pending: usize,
}

/// Counts of one pair at one rank: previous epoch, current epoch.
type EpochCells = [Cell32; 2];

/// A [`Cell`] in 32 bits per count: a pair's showings at one rank within two horizons.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Cell32 {
    impressions: u32,
    clicks: u32,
}

/// A tracked query.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Query {
    /// Its normalized text: what the judgments are written for.
    text: Box<str>,
    /// The traffic segment it was shown in (empty: none): the same text in two segments is
    /// two tracked queries, so that each segment's position bias is estimated apart.
    segment: Box<str>,
    /// Hash of the segment and text: the key the log finds it by.
    hash: u64,
    /// Finalized showings in the previous and the current epoch: its traffic, which decides
    /// whether a busier query replaces it.
    showings: [u32; 2],
    /// The sketch's count when it was admitted: it competes with that head start, so that a
    /// query just admitted is not replaced by the next one at once (Space-Saving's rule).
    credit: u32,
    /// Its pairs' slots.
    pairs: Vec<u32>,
    /// Its impressions offered and not yet finalized: its pairs stay while any is.
    pending: u32,
    /// Which admission this is: a pending impression of an earlier one is not counted.
    generation: u32,
}

impl Query {
    fn traffic(&self) -> u64 {
        u64::from(self.showings[0]) + u64::from(self.showings[1]) + u64::from(self.credit)
    }
}

/// A tracked pair.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Pair {
    /// Its query's slot.
    query: u32,
    /// Its document, hashed: the key it is found by.
    doc_key: DocKey,
    /// Its document id, as the judgments name it.
    doc: Box<str>,
    /// (rank, counts) for the ranks it was shown at.
    cells: Vec<(u16, EpochCells)>,
    /// Showings of it offered and not finalized yet: it stays tracked while any is.
    pending: u32,
}

/// An offered impression until it is finalized.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct Showing {
    /// Its query's slot and admission.
    query: u32,
    generation: u32,
    /// Ranks tracked of it.
    ranks: u8,
    /// The pair at each tracked rank.
    pairs: [u32; MAX_RANKS],
}

/// One partition's click log. See the module documentation.
#[derive(Debug, Clone)]
pub struct ClickLog {
    settings: LogSettings,
    /// The epoch (event time / horizon) of the current counts; `None` before the first.
    epoch: Option<i64>,
    /// Query slots (`None`: free), and the hash of each tracked one to its slot.
    queries: Vec<Option<Query>>,
    query_index: Map<u64, u32>,
    /// Pair slots (`None`: free), and (query slot, document) to a pair's slot.
    pairs: Vec<Option<Pair>>,
    pair_index: Map<(u32, DocKey), u32>,
    /// Free slots of each, reused before the vectors grow.
    free_queries: Vec<u32>,
    free_pairs: Vec<u32>,
    /// Offered impressions not yet finalized, by their query key.
    showings: Map<QueryKey, Showing>,
    /// Showings of queries not tracked, by hash: the admission test.
    sketch: Vec<u32>,
    /// A lower bound of the least traffic of a tracked query: a sketch count above it makes
    /// the log look for the actual least (a scan), not every untracked impression.
    least_traffic: u64,
    /// Numbers admissions, for [`Query::generation`].
    admissions: u32,
    /// What happened to the impressions offered.
    pub counts: LogCounts,
}

/// The key a query is tracked by: the hash of its normalized text, within its segment (the
/// text's alone when it has none, as judgment lists hash it).
pub fn query_hash(segment: &str, normalized: &str) -> u64 {
    if segment.is_empty() {
        return xxhash_rust::xxh3::xxh3_64(normalized.as_bytes());
    }
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    hasher.update(segment.as_bytes());
    // A separator no text holds, so that ("ab", "c") and ("a", "bc") differ.
    hasher.update(&[0xff]);
    hasher.update(normalized.as_bytes());
    hasher.digest()
}

/// The names of an offered impression's query and results.
pub struct Offered<'a> {
    /// Its normalized query text and the hash of its segment and text ([`query_hash`]); `None`
    /// when it has none.
    pub query: Option<(&'a str, u64)>,
    /// Its traffic segment (empty: none).
    pub segment: &'a str,
    /// Its result keys in rank order.
    pub docs: &'a [DocKey],
    /// The result id at a rank (only asked for a pair not tracked yet).
    pub doc_name: &'a dyn Fn(usize) -> &'a str,
}

impl ClickLog {
    pub fn new(settings: LogSettings) -> Self {
        let settings = LogSettings { max_rank: settings.max_rank.min(MAX_RANKS), ..settings };
        ClickLog {
            settings,
            epoch: None,
            queries: Vec::new(),
            query_index: Map::default(),
            pairs: Vec::new(),
            pair_index: Map::default(),
            free_queries: Vec::new(),
            free_pairs: Vec::new(),
            showings: Map::default(),
            sketch: vec![0; SKETCH_WIDTH],
            least_traffic: 0,
            admissions: 0,
            counts: LogCounts::default(),
        }
    }

    pub fn settings(&self) -> LogSettings {
        self.settings
    }

    /// Tracked queries and pairs, and offered impressions not finalized yet.
    pub fn sizes(&self) -> (usize, usize, usize) {
        (self.query_index.len(), self.pair_index.len(), self.showings.len())
    }

    /// Whether an impression offered under `impression` is tracked, not finalized yet.
    pub fn is_showing(&self, impression: QueryKey) -> bool {
        self.showings.contains_key(&impression)
    }

    /// Takes note of an impression the join took as pending, under its query key.
    pub fn offer(&mut self, impression: QueryKey, offered: &Offered<'_>) {
        let Some((text, hash)) = offered.query.filter(|(text, _)| !text.is_empty()) else {
            self.counts.without_query += 1;
            return;
        };
        let Some(query) = self.admit(text, offered.segment, hash) else {
            self.counts.untracked += 1;
            return;
        };
        let ranks = offered.docs.len().min(self.settings.max_rank);
        let mut showing = Showing { query, generation: 0, ranks: ranks as u8, pairs: [0; MAX_RANKS] };
        for (rank, &doc) in offered.docs.iter().enumerate().take(ranks) {
            showing.pairs[rank] = self.pair(query, doc, || (offered.doc_name)(rank));
        }
        for &pair in showing.pairs.iter().take(ranks) {
            if let Some(p) = self.pairs[pair as usize].as_mut() {
                p.pending += 1;
            }
        }
        let q = self.queries[query as usize].as_mut().expect("admitted above");
        q.pending += 1;
        showing.generation = q.generation;
        if let Some(replaced) = self.showings.insert(impression, showing) {
            // The join never has two pending impressions under one key; if it ever did, the
            // earlier one is forgotten here, and its query's pending count with it.
            self.release(replaced);
        }
    }

    /// Counts a finalized impression: its showings at each tracked rank, and its clicks.
    pub fn finalize(&mut self, impression: QueryKey, timestamp: EventTime, gains: &[u8]) {
        let Some(showing) = self.showings.remove(&impression) else { return };
        let epoch = timestamp.div_euclid(self.settings.horizon_ms);
        let current = *self.epoch.get_or_insert(epoch);
        if epoch > current {
            // Before the showing is released: its query's pending count keeps its pairs.
            self.rotate(epoch);
        }
        if !self.release(showing) {
            self.counts.dropped += 1;
            return;
        }
        let slot = match current.max(epoch) - epoch {
            0 => 1,
            1 => 0,
            _ => {
                self.counts.outside_horizon += 1;
                return;
            }
        };
        let threshold = self.settings.click_threshold;
        for (rank, &pair) in showing.pairs.iter().enumerate().take(usize::from(showing.ranks)) {
            let clicked = gains.get(rank).is_some_and(|&g| g >= threshold);
            if let Some(p) = self.pairs.get_mut(pair as usize).and_then(Option::as_mut) {
                let cell = cell_at(&mut p.cells, rank as u16);
                cell[slot].impressions = cell[slot].impressions.saturating_add(1);
                cell[slot].clicks = cell[slot].clicks.saturating_add(u32::from(clicked));
            }
        }
        if let Some(q) = self.queries[showing.query as usize].as_mut() {
            q.showings[slot] = q.showings[slot].saturating_add(1);
        }
        self.counts.tracked += 1;
    }

    /// Adds every tracked pair's counts (both epochs) to `table`, by name: the tables of
    /// several partitions (one query shows up on many) merge there.
    pub fn add_to(&self, table: &mut NamedTable) {
        for pair in self.pairs.iter().flatten() {
            let Some(query) = &self.queries[pair.query as usize] else { continue };
            let name = PairName { segment: query.segment.clone(), query: query.text.clone(), doc: pair.doc.clone() };
            for &(rank, [previous, current]) in &pair.cells {
                let cell = Cell {
                    impressions: u64::from(previous.impressions) + u64::from(current.impressions),
                    clicks: u64::from(previous.clicks) + u64::from(current.clicks),
                };
                table.add(&name, usize::from(rank), cell);
            }
        }
    }

    /// The tracked slot of the query, admitting it if there is room or it is busier than
    /// the least-shown tracked one.
    fn admit(&mut self, text: &str, segment: &str, hash: u64) -> Option<u32> {
        if let Some(&slot) = self.query_index.get(&hash) {
            return Some(slot);
        }
        let mut credit = 0;
        if self.query_index.len() >= self.settings.max_queries {
            let count = &mut self.sketch[(hash % SKETCH_WIDTH as u64) as usize];
            *count = count.saturating_add(1);
            credit = *count;
            if u64::from(credit) <= self.least_traffic {
                return None;
            }
            let (least, traffic) = self.least_shown()?;
            self.least_traffic = traffic;
            if u64::from(credit) <= traffic {
                return None;
            }
            self.forget_query(least);
            self.counts.queries_replaced += 1;
        }
        self.admissions = self.admissions.wrapping_add(1);
        let query = Query {
            text: text.into(),
            segment: segment.into(),
            hash,
            showings: [0; 2],
            credit,
            pairs: Vec::new(),
            pending: 0,
            generation: self.admissions,
        };
        let slot = match self.free_queries.pop() {
            Some(slot) => {
                self.queries[slot as usize] = Some(query);
                slot
            }
            None => {
                self.queries.push(Some(query));
                (self.queries.len() - 1) as u32
            }
        };
        self.query_index.insert(hash, slot);
        Some(slot)
    }

    /// The tracked query with the least traffic, and that traffic.
    fn least_shown(&self) -> Option<(u32, u64)> {
        self.queries
            .iter()
            .enumerate()
            .filter_map(|(slot, q)| Some((slot as u32, q.as_ref()?.traffic())))
            .min_by_key(|&(_, traffic)| traffic)
    }

    /// The pair's slot, tracking it (with its name) if it is new.
    fn pair<'n>(&mut self, query: u32, doc: DocKey, name: impl FnOnce() -> &'n str) -> u32 {
        if let Some(&slot) = self.pair_index.get(&(query, doc)) {
            return slot;
        }
        let pair = Pair { query, doc_key: doc, doc: name().into(), cells: Vec::new(), pending: 0 };
        let slot = match self.free_pairs.pop() {
            Some(slot) => {
                self.pairs[slot as usize] = Some(pair);
                slot
            }
            None => {
                self.pairs.push(Some(pair));
                (self.pairs.len() - 1) as u32
            }
        };
        self.pair_index.insert((query, doc), slot);
        if let Some(q) = self.queries[query as usize].as_mut() {
            q.pairs.push(slot);
        }
        slot
    }

    /// Ends a showing's claim on its query; false if the query it was offered under has been
    /// replaced since (its pairs are gone).
    fn release(&mut self, showing: Showing) -> bool {
        match self.queries.get_mut(showing.query as usize).and_then(Option::as_mut) {
            Some(q) if q.generation == showing.generation => {
                q.pending = q.pending.saturating_sub(1);
                for &pair in showing.pairs.iter().take(usize::from(showing.ranks)) {
                    if let Some(p) = self.pairs.get_mut(pair as usize).and_then(Option::as_mut) {
                        p.pending = p.pending.saturating_sub(1);
                    }
                }
                true
            }
            _ => false,
        }
    }

    /// Stops tracking a query and its pairs.
    fn forget_query(&mut self, slot: u32) {
        let Some(query) = self.queries[slot as usize].take() else { return };
        self.query_index.remove(&query.hash);
        for pair in query.pairs {
            if let Some(p) = self.pairs[pair as usize].take() {
                self.pair_index.remove(&(slot, p.doc_key));
                self.free_pairs.push(pair);
            }
        }
        self.free_queries.push(slot);
    }

    /// Moves the counts on to `epoch`: the current become the previous (or, after a gap of
    /// more than one epoch, are dropped too); what is left without counts is forgotten.
    fn rotate(&mut self, epoch: i64) {
        let gap = epoch - self.epoch.unwrap_or(epoch);
        self.epoch = Some(epoch);
        let shift = |cells: &mut EpochCells| {
            cells[0] = if gap == 1 { cells[1] } else { Cell32::default() };
            cells[1] = Cell32::default();
        };
        for query in self.queries.iter_mut().flatten() {
            query.showings = [if gap == 1 { query.showings[1] } else { 0 }, 0];
            query.credit = 0;
        }
        for pair in self.pairs.iter_mut().flatten() {
            pair.cells.iter_mut().for_each(|(_, cells)| shift(cells));
            pair.cells.retain(|(_, cells)| cells[0].impressions > 0);
        }
        let idle: Vec<u32> = self
            .queries
            .iter()
            .enumerate()
            .filter_map(|(slot, q)| {
                let q = q.as_ref()?;
                (q.pending == 0 && q.showings == [0, 0]).then_some(slot as u32)
            })
            .collect();
        for slot in idle {
            self.forget_query(slot);
        }
        // Pairs of a query still tracked but shown in neither epoch go too (unless an
        // impression that showed them is pending).
        let empty: Vec<u32> = self
            .pairs
            .iter()
            .enumerate()
            .filter_map(|(slot, p)| {
                let p = p.as_ref()?;
                (p.cells.is_empty() && p.pending == 0).then_some(slot as u32)
            })
            .collect();
        for slot in empty {
            if let Some(p) = self.pairs[slot as usize].take() {
                self.pair_index.remove(&(p.query, p.doc_key));
                if let Some(q) = self.queries[p.query as usize].as_mut() {
                    q.pairs.retain(|&s| s != slot);
                }
                self.free_pairs.push(slot);
            }
        }
        self.sketch.iter_mut().for_each(|c| *c = 0);
        self.least_traffic = 0;
    }
}

/// The counts of a pair at a rank, added if the pair was not shown there yet.
fn cell_at(cells: &mut Vec<(u16, EpochCells)>, rank: u16) -> &mut EpochCells {
    let i = match cells.binary_search_by_key(&rank, |(r, _)| *r) {
        Ok(i) => i,
        Err(i) => {
            cells.insert(i, (rank, EpochCells::default()));
            i
        }
    };
    &mut cells[i].1
}
