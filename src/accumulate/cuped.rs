//! CUPED's state per partition (`ab.cuped`): each unit's recent history, the pre-period of
//! every experiment frozen when it starts, and the pre-period sums of the units that entered
//! each group, per unit bucket (the math is `crate::stats::cuped`).
//!
//! An experiment's pre-period is the `lookback_days` whole UTC days before the day of its first
//! finalized impression on the partition (GrowthBook's and Statsig's definition: the look-back
//! before the experiment's start). At that moment every tracked unit's impressions of those
//! days are summed and frozen for the experiment, and when a unit's first impression in one of
//! its groups is finalized its frozen sums move to the group's unit bucket and are forgotten,
//! so a unit's pre-period counts once, whatever happens to its history afterwards. A unit with
//! no history (new, or not tracked) enters with a covariate of 0, as GrowthBook and Statsig fill
//! it: one pre-period observation of value 0 (x = 0, e = 1 in `crate::stats::cuped`), which
//! with one impression per unit is exactly their per-unit data. Either way the unit's entry is
//! remembered in its experiment's frozen pre-period (an entry without impressions), so that it
//! enters once; a frozen pre-period holds at most `max_units_per_partition` units, and a unit
//! without history arriving when it is full enters without a covariate (counted as untracked).
//!
//! Finalization runs in deadline order, so the pre-period holds exactly the impressions
//! finalized before the experiment's first, the same in a replay and in every replica that
//! restores the partition. Bounded: at most `max_units_per_partition` units are tracked, each
//! with at most `lookback_days + 1` days of (impressions, one sum per adjusted metric); a full
//! table makes room by dropping units idle for longer than the look-back.
//!
//! Snapshot bytes are untrusted: this file is under the no-panic rule (crate documentation,
//! "Hostile input"), and [`CupedState::check`] refuses state the configuration cannot hold.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize, Serializer};

use crate::checkpoint::Inconsistency;
use crate::ids::{GroupId, GroupMap};
use crate::time::EventTime;

const DAY_MS: i64 = 86_400_000;

/// A table by unit hash. Hashed, not ordered: every finalized impression looks its unit up in
/// two of them (its history and its experiment's pre-period), among hundreds of thousands of
/// units, and a B-tree's search was a sixth of a restore's replay. Written in key order
/// ([`in_key_order`]), so a state's bytes do not depend on the table's hashing.
type ByUnit<V> = HashMap<u32, V, foldhash::fast::RandomState>;

/// Serializes a [`ByUnit`] table as a map in key order, as the `BTreeMap` it replaced was
/// written: the same state writes the same bytes in every run and replica.
fn in_key_order<V: Serialize, S: Serializer>(table: &ByUnit<V>, serializer: S) -> Result<S::Ok, S::Error> {
    let mut entries: Vec<(&u32, &V)> = table.iter().collect();
    entries.sort_unstable_by_key(|&(unit, _)| *unit);
    serializer.collect_map(entries)
}

/// One in the covariate sums' fixed point (as [`super::GroupStats`]'s): integer sums merge
/// across partitions in any order to the same value.
const FIXED_ONE: f64 = (1u64 << 56) as f64;

/// What the state is kept for: from `ab.cuped`, `ab.unit_buckets` and the metric layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CupedSettings {
    /// The layout slots of `ab.cuped.metrics`, in their order.
    pub slots: Vec<usize>,
    /// `ab.cuped.lookback_days`.
    pub lookback_days: i64,
    /// `ab.cuped.max_units_per_partition`.
    pub max_units: usize,
    /// `ab.unit_buckets`: a unit's bucket is its hash modulo this, as for the metric sums.
    pub unit_buckets: u32,
}

/// A unit's recent days, oldest first, flat: per day one word of its day number (days since
/// the Unix epoch, UTC, in the high 32 bits) and impression count (the low 32), then one word
/// per adjusted metric holding the bits of its `f64` sum. One allocation per unit, 8 bytes per
/// metric and day: the table holds hundreds of thousands of units. Floating point sums: a
/// unit's history is one partition's, summed in its (deterministic) finalization order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct History {
    words: Vec<u64>,
}

impl History {
    /// The days, as (day, impressions, sums) with `width` sums each.
    fn days(&self, width: usize) -> impl Iterator<Item = (i64, u64, &[u64])> {
        self.words.chunks_exact(width + 1).filter_map(|chunk| {
            let (&head, sums) = chunk.split_first()?;
            Some((i64::from((head >> 32) as u32 as i32), head & 0xffff_ffff, sums))
        })
    }

    /// The newest day, if any.
    fn last_day(&self, width: usize) -> Option<i64> {
        self.days(width).last().map(|(day, _, _)| day)
    }
}

fn head(day: i64, impressions: u64) -> u64 {
    (u64::from(day as i32 as u32) << 32) | impressions.min(u64::from(u32::MAX))
}

/// A unit's pre-period of one experiment; once the unit has entered the experiment, an entry
/// without impressions or sums (nothing allocated), so that it enters once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct PrePeriod {
    impressions: u64,
    sums: Vec<f64>,
}

impl PrePeriod {
    /// The entry of a unit that entered the experiment.
    const ENTERED: PrePeriod = PrePeriod { impressions: 0, sums: Vec::new() };

    fn entered(&self) -> bool {
        self.impressions == 0
    }
}

/// An experiment's pre-period, frozen at its start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Frozen {
    /// The day of the experiment's first finalized impression here.
    start_day: i64,
    /// Units with impressions in the pre-period that have not entered the experiment yet, and
    /// ([`PrePeriod::ENTERED`]) the units that have, with or without a pre-period.
    #[serde(serialize_with = "in_key_order")]
    units: ByUnit<PrePeriod>,
}

/// Pre-period sums of the units of one unit bucket that entered a group.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CovariateBucket {
    /// Units that entered with a pre-period.
    pub units: u64,
    /// Their pre-period impressions, plus one for each unit that entered without a pre-period
    /// (e in `crate::stats::cuped`: its covariate of 0 counts as one observation).
    pub impressions: u64,
    /// Fixed-point pre-period sum per adjusted metric (x).
    sums: Vec<i128>,
}

impl CovariateBucket {
    /// The pre-period sum of the `i`-th adjusted metric.
    pub fn sum(&self, i: usize) -> f64 {
        self.sums.get(i).map_or(0.0, |&s| s as f64 / FIXED_ONE)
    }

    fn add(&mut self, other: &CovariateBucket) {
        self.units += other.units;
        self.impressions += other.impressions;
        if self.sums.len() < other.sums.len() {
            self.sums.resize(other.sums.len(), 0);
        }
        for (a, b) in self.sums.iter_mut().zip(&other.sums) {
            *a += b;
        }
    }
}

/// Per group (by id), the covariate sums per unit bucket. Merges by addition.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CovariateTable {
    by_group: BTreeMap<GroupId, BTreeMap<u32, CovariateBucket>>,
}

impl CovariateTable {
    /// A group's buckets, when any unit entered it with a pre-period.
    pub fn group(&self, group: GroupId) -> Option<&BTreeMap<u32, CovariateBucket>> {
        self.by_group.get(&group)
    }

    /// Adds another partition's table.
    pub fn merge(&mut self, other: &CovariateTable) {
        for (group, buckets) in &other.by_group {
            let ours = self.by_group.entry(*group).or_default();
            for (bucket, sums) in buckets {
                ours.entry(*bucket).or_default().add(sums);
            }
        }
    }

    /// Renumbers groups written by another engine.
    pub fn remap(&mut self, map: &GroupMap) {
        let old = std::mem::take(&mut self.by_group);
        let mut remapped = CovariateTable::default();
        for (group, buckets) in old {
            if let Some(&new) = map.get(&group) {
                remapped.merge(&CovariateTable { by_group: BTreeMap::from([(new, buckets)]) });
            }
        }
        *self = remapped;
    }
}

/// What changed in a [`CovariateTable`] since an earlier copy of it: the groups dropped, and
/// the buckets changed or added, whole (a bucket is a few sums).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CovariateChange {
    /// Groups in the earlier table and not in this one (retired labels).
    pub removed: Vec<GroupId>,
    /// Per group, the buckets that differ from the earlier table's.
    pub changed: CovariateTable,
}

impl CovariateChange {
    /// Renumbers its groups as [`CovariateTable::remap`].
    pub fn remap(&mut self, map: &GroupMap) {
        self.removed = self.removed.iter().filter_map(|g| map.get(g).copied()).collect();
        self.changed.remap(map);
    }
}

impl CovariateTable {
    /// What changed since `earlier` (see [`CovariateChange`]).
    pub fn changes_since(&self, earlier: &CovariateTable) -> CovariateChange {
        let removed = earlier.by_group.keys().filter(|g| !self.by_group.contains_key(g)).copied().collect();
        let mut changed = CovariateTable::default();
        for (&group, buckets) in &self.by_group {
            let before = earlier.by_group.get(&group);
            let differ: BTreeMap<u32, CovariateBucket> = buckets
                .iter()
                .filter(|(b, sums)| before.and_then(|before| before.get(b)) != Some(sums))
                .map(|(&b, sums)| (b, sums.clone()))
                .collect();
            if !differ.is_empty() {
                changed.by_group.insert(group, differ);
            }
        }
        CovariateChange { removed, changed }
    }

    /// Applies a [`CovariateChange`] taken against this table. The caller checks the result.
    pub fn apply_change(&mut self, change: &CovariateChange) {
        for group in &change.removed {
            self.by_group.remove(group);
        }
        for (&group, buckets) in &change.changed.by_group {
            let ours = self.by_group.entry(group).or_default();
            for (&bucket, sums) in buckets {
                ours.insert(bucket, sums.clone());
            }
        }
    }
}

/// Counts for the gauges.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CupedCounts {
    /// Units that entered an experiment's group with a pre-period.
    pub entered_with_pre_period: u64,
    /// Finalized impressions of units the full table could not track, and of units without
    /// a pre-period that a full frozen pre-period could not remember as entered.
    pub untracked_impressions: u64,
    /// Units dropped to make room (idle for longer than the look-back).
    pub units_dropped: u64,
}

/// One partition's CUPED state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CupedState {
    /// Tracked units' recent days, by unit hash.
    #[serde(serialize_with = "in_key_order")]
    units: ByUnit<History>,
    /// Per experiment that started here, its frozen pre-period.
    frozen: BTreeMap<String, Frozen>,
    /// The entered units' pre-period sums.
    pub covariates: CovariateTable,
    /// The newest day finalized: history older than the look-back before it is dropped.
    newest_day: i64,
    pub counts: CupedCounts,
}

impl CupedState {
    pub fn new() -> Self {
        CupedState {
            units: ByUnit::default(),
            frozen: BTreeMap::new(),
            covariates: CovariateTable::default(),
            newest_day: i64::MIN,
            counts: CupedCounts::default(),
        }
    }

    /// Tracked units.
    pub fn tracked_units(&self) -> usize {
        self.units.len()
    }

    /// Units waiting in experiments' frozen pre-periods.
    pub fn frozen_units(&self) -> usize {
        self.frozen.values().map(|f| f.units.values().filter(|p| !p.entered()).count()).sum()
    }

    /// A finalized impression of `unit` in `group` (of `experiment`) with the layout's metric
    /// `values`: enters the unit into the group, then adds the impression to its history.
    pub fn finalized(
        &mut self,
        settings: &CupedSettings,
        experiment: &str,
        group: GroupId,
        unit: u32,
        timestamp: EventTime,
        values: &[f64],
    ) {
        let day = timestamp.div_euclid(DAY_MS);
        if !self.frozen.contains_key(experiment) {
            let frozen = self.freeze(settings, day);
            self.frozen.insert(experiment.to_string(), frozen);
        }
        let mut forgotten = false;
        if let Some(frozen) = self.frozen.get_mut(experiment) {
            let room = frozen.units.len() < settings.max_units;
            let entered = match frozen.units.get_mut(&unit) {
                Some(pre) if pre.entered() => None,
                Some(pre) => {
                    let pre = std::mem::replace(pre, PrePeriod::ENTERED);
                    self.counts.entered_with_pre_period += 1;
                    Some(CovariateBucket {
                        units: 1,
                        impressions: pre.impressions,
                        sums: pre.sums.iter().map(|&s| (s * FIXED_ONE) as i128).collect(),
                    })
                }
                None if room => {
                    frozen.units.insert(unit, PrePeriod::ENTERED);
                    Some(CovariateBucket { units: 0, impressions: 1, sums: vec![0; settings.slots.len()] })
                }
                None => {
                    forgotten = true;
                    None
                }
            };
            if let Some(entered) = entered {
                let bucket = unit % settings.unit_buckets.max(1);
                self.covariates.by_group.entry(group).or_default().entry(bucket).or_default().add(&entered);
            }
        }
        let tracked = self.record(settings, unit, day, values);
        self.counts.untracked_impressions += u64::from(forgotten || !tracked);
    }

    /// Every tracked unit's sums over the look-back before `start_day`.
    fn freeze(&self, settings: &CupedSettings, start_day: i64) -> Frozen {
        let from = start_day.saturating_sub(settings.lookback_days);
        let mut units = ByUnit::default();
        for (&unit, history) in &self.units {
            let mut pre = PrePeriod { impressions: 0, sums: vec![0.0; settings.slots.len()] };
            for (_, impressions, sums) in
                history.days(settings.slots.len()).filter(|(d, _, _)| *d >= from && *d < start_day)
            {
                pre.impressions += impressions;
                for (a, &b) in pre.sums.iter_mut().zip(sums) {
                    *a += f64::from_bits(b);
                }
            }
            if pre.impressions > 0 {
                units.insert(unit, pre);
            }
        }
        Frozen { start_day, units }
    }

    /// Adds an impression to its unit's history; false when the full table could not track
    /// the unit.
    fn record(&mut self, settings: &CupedSettings, unit: u32, day: i64, values: &[f64]) -> bool {
        self.newest_day = self.newest_day.max(day);
        let keep_from = self.newest_day.saturating_sub(settings.lookback_days);
        if day < keep_from {
            return true;
        }
        if !self.units.contains_key(&unit) && self.units.len() >= settings.max_units {
            self.make_room(keep_from, settings.slots.len());
            if self.units.len() >= settings.max_units {
                return false;
            }
        }
        let width = settings.slots.len();
        let stride = width + 1;
        let history = self.units.entry(unit).or_insert_with(|| History { words: Vec::new() });
        // Days before the look-back are the oldest: drop them from the front.
        let expired = history.days(width).take_while(|(d, _, _)| *d < keep_from).count();
        history.words.drain(..expired * stride);
        let at = history.days(width).take_while(|(d, _, _)| *d < day).count() * stride;
        let (found, impressions) = match history.days(width).nth(at / stride) {
            Some((d, impressions, _)) if d == day => (true, impressions),
            _ => (false, 0),
        };
        if !found {
            history
                .words
                .splice(at..at, std::iter::once(head(day, 0)).chain(std::iter::repeat_n(0f64.to_bits(), width)));
        }
        if let Some(words) = history.words.get_mut(at..at + stride) {
            if let Some((first, sums)) = words.split_first_mut() {
                *first = head(day, impressions + 1);
                for (sum, &slot) in sums.iter_mut().zip(&settings.slots) {
                    *sum = (f64::from_bits(*sum) + values.get(slot).copied().unwrap_or(0.0)).to_bits();
                }
            }
        }
        true
    }

    /// Drops units with no impression since `keep_from`: no experiment starting from now on
    /// would find any of their days in its pre-period.
    fn make_room(&mut self, keep_from: i64, width: usize) {
        let before = self.units.len();
        self.units.retain(|_, h| h.last_day(width).is_some_and(|d| d >= keep_from));
        self.counts.units_dropped += (before - self.units.len()) as u64;
    }

    /// Renumbers groups restored from another engine.
    pub fn remap_groups(&mut self, map: &GroupMap) {
        self.covariates.remap(map);
    }

    /// Drops a retired group's covariates (its metric sums are dropped alike).
    pub fn retire(&mut self, group: GroupId) {
        self.covariates.by_group.remove(&group);
    }

    /// The groups the covariates refer to.
    pub fn groups(&self) -> impl Iterator<Item = GroupId> + '_ {
        self.covariates.by_group.keys().copied()
    }

    /// Checks state read from a snapshot against the settings: sums of the configured length,
    /// days within the look-back, buckets within `ab.unit_buckets`, bounded counts.
    pub fn check(&self, settings: &CupedSettings) -> Result<(), Inconsistency> {
        use crate::checkpoint::check_count;
        let width = settings.slots.len();
        let units = |what, found: usize| {
            if found > settings.max_units {
                return Err(Inconsistency::TooMany {
                    what,
                    found,
                    limit: "ab.cuped.max_units_per_partition",
                    max: settings.max_units,
                });
            }
            Ok(())
        };
        units("CUPED units", self.units.len())?;
        // A sum of one metric's values, each in [0, 1].
        let sum_range = |what, sums: &[f64]| {
            if !sums.iter().all(|s| s.is_finite() && *s >= 0.0) {
                return Err(Inconsistency::Value { what, expected: "finite and non-negative" });
            }
            Ok(())
        };
        for history in self.units.values() {
            let beyond = history.words.len() % (width + 1);
            if beyond != 0 {
                return Err(Inconsistency::Shape {
                    what: "words in a CUPED unit's history after its last whole day",
                    found: beyond,
                    expected: 0,
                });
            }
            let days = history.words.len() / (width + 1);
            let most_days = usize::try_from(settings.lookback_days.saturating_add(1)).unwrap_or(0);
            if days > most_days {
                return Err(Inconsistency::TooMany {
                    what: "days in a CUPED unit's history",
                    found: days,
                    limit: "ab.cuped.lookback_days + 1",
                    max: most_days,
                });
            }
            for (_, _, sums) in history.days(width) {
                let sums: Vec<f64> = sums.iter().map(|&b| f64::from_bits(b)).collect();
                sum_range("a CUPED day's sum", &sums)?;
            }
        }
        for frozen in self.frozen.values() {
            units("units in a CUPED pre-period", frozen.units.len())?;
            for pre in frozen.units.values() {
                if *pre == PrePeriod::ENTERED {
                    continue;
                }
                check_count("a CUPED pre-period's impressions", pre.impressions)?;
                if pre.sums.len() != width {
                    return Err(Inconsistency::Shape {
                        what: "sums in a CUPED pre-period",
                        found: pre.sums.len(),
                        expected: width,
                    });
                }
                sum_range("a CUPED pre-period's sum", &pre.sums)?;
                if pre.sums.iter().any(|&s| s > pre.impressions as f64) {
                    return Err(Inconsistency::Value {
                        what: "a CUPED pre-period's sum",
                        expected: "at most its impression count",
                    });
                }
            }
        }
        self.covariates.check(settings)?;
        check_count("the CUPED counts", self.counts.untracked_impressions)?;
        check_count("the CUPED counts", self.counts.entered_with_pre_period)?;
        check_count("the CUPED counts", self.counts.units_dropped)
    }
}

impl CovariateTable {
    /// Checks a table read from a snapshot or an aggregates record against the settings.
    pub fn check(&self, settings: &CupedSettings) -> Result<(), Inconsistency> {
        use crate::checkpoint::{check_count, check_sum};
        let width = settings.slots.len();
        for buckets in self.by_group.values() {
            for (&bucket, sums) in buckets {
                if bucket >= settings.unit_buckets {
                    return Err(Inconsistency::Beyond {
                        what: "CUPED unit bucket",
                        index: bucket.into(),
                        limit: "ab.unit_buckets",
                        count: settings.unit_buckets.into(),
                    });
                }
                check_count("a CUPED bucket's units", sums.units)?;
                check_count("a CUPED bucket's impressions", sums.impressions)?;
                if sums.sums.len() != width {
                    return Err(Inconsistency::Shape {
                        what: "sums in a CUPED bucket",
                        found: sums.sums.len(),
                        expected: width,
                    });
                }
                for &sum in &sums.sums {
                    check_sum("a CUPED bucket's sum", sum)?;
                }
            }
        }
        Ok(())
    }

    /// The groups it refers to.
    pub fn groups(&self) -> impl Iterator<Item = GroupId> + '_ {
        self.by_group.keys().copied()
    }
}

impl Default for CupedState {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> CupedSettings {
        CupedSettings { slots: vec![0], lookback_days: 2, max_units: 3, unit_buckets: 4 }
    }

    fn at(day: i64) -> EventTime {
        day * DAY_MS + 1000
    }

    #[test]
    fn a_state_is_written_in_unit_order_whatever_its_tables_hashing() {
        let s = CupedSettings { max_units: 1000, ..settings() };
        let (mut up, mut down) = (CupedState::new(), CupedState::new());
        for unit in 0..300 {
            up.finalized(&s, "e", 1, unit, at(9), &[0.5]);
            down.finalized(&s, "e", 1, 299 - unit, at(9), &[0.5]);
        }
        let (up, down) = (postcard::to_stdvec(&up).unwrap(), postcard::to_stdvec(&down).unwrap());
        assert!(up == down, "the same units added in another order, into another table's hashing");
        // The units in ascending order, as the B-tree they were held in wrote them: the count
        // (300, a two-byte varint), then unit 0's key.
        assert_eq!(&up[..3], &[0xac, 0x02, 0]);
        let decoded: CupedState = postcard::from_bytes(&up).unwrap();
        assert_eq!(decoded.tracked_units(), 300);
    }

    #[test]
    fn a_unit_brings_its_look_back_before_the_experiment_start_once() {
        let s = settings();
        let mut state = CupedState::new();
        // Unit 5: days 7, 8 and 9 in another experiment; day 6 is outside the look-back.
        for (day, v) in [(6, 0.9), (7, 0.5), (8, 0.25), (8, 0.25), (9, 1.0)] {
            state.finalized(&s, "other", 0, 5, at(day), &[v]);
        }
        // Experiment e starts on day 9: its pre-period is days 7 and 8.
        state.finalized(&s, "e", 1, 6, at(9), &[0.0]);
        state.finalized(&s, "e", 1, 5, at(10), &[0.3]);
        let bucket = &state.covariates.group(1).unwrap()[&(5 % 4)];
        assert_eq!((bucket.units, bucket.impressions), (1, 3));
        assert!((bucket.sum(0) - 1.0).abs() < 1e-12);
        // A second impression in the group, or in another variant, adds nothing.
        state.finalized(&s, "e", 1, 5, at(11), &[0.3]);
        state.finalized(&s, "e", 2, 5, at(11), &[0.3]);
        assert_eq!(state.covariates.group(1).unwrap()[&1].units, 1);
        assert!(state.covariates.group(2).is_none());
        assert_eq!(state.counts.entered_with_pre_period, 1);
        assert_eq!(state.check(&s), Ok(()));
    }

    #[test]
    fn a_unit_without_history_enters_once_with_a_covariate_of_zero() {
        let s = settings();
        let mut state = CupedState::new();
        state.finalized(&s, "other", 0, 5, at(8), &[0.5]);
        // Unit 6 has no history when e starts on day 9: one observation of 0 in its bucket.
        state.finalized(&s, "e", 1, 6, at(9), &[0.7]);
        state.finalized(&s, "e", 1, 6, at(9), &[0.2]);
        let bucket = &state.covariates.group(1).unwrap()[&(6 % 4)];
        assert_eq!((bucket.units, bucket.impressions, bucket.sum(0)), (0, 1, 0.0));
        // Unit 5 enters with its pre-period; both are remembered as entered.
        state.finalized(&s, "e", 1, 5, at(9), &[0.1]);
        let bucket = &state.covariates.group(1).unwrap()[&(5 % 4)];
        assert_eq!((bucket.units, bucket.impressions, bucket.sum(0)), (1, 1, 0.5));
        assert_eq!(state.frozen_units(), 0);
        assert_eq!(state.check(&s), Ok(()));
        // The frozen pre-period holds at most max_units (3) units: the fourth unit without
        // history is not remembered, so it enters without a covariate and is counted.
        state.finalized(&s, "e", 1, 7, at(9), &[0.1]);
        state.finalized(&s, "e", 1, 11, at(9), &[0.1]);
        assert_eq!(state.covariates.group(1).unwrap()[&(11 % 4)].impressions, 1, "unit 7's");
        assert_eq!(state.counts.untracked_impressions, 1);
        assert_eq!(state.check(&s), Ok(()));
    }

    #[test]
    fn the_table_is_bounded_and_makes_room_from_idle_units() {
        let s = settings();
        let mut state = CupedState::new();
        for unit in 0..3 {
            state.finalized(&s, "x", 0, unit, at(1), &[1.0]);
        }
        state.finalized(&s, "x", 0, 9, at(2), &[1.0]);
        assert_eq!((state.tracked_units(), state.counts.untracked_impressions), (3, 1));
        // Day 5: units last seen on day 1 are beyond the 2-day look-back.
        state.finalized(&s, "x", 0, 9, at(5), &[1.0]);
        assert_eq!((state.tracked_units(), state.counts.units_dropped), (1, 3));
    }

    #[test]
    fn restored_state_is_checked() {
        let s = settings();
        let mut state = CupedState::new();
        state.finalized(&s, "x", 0, 1, at(1), &[1.0]);
        state.finalized(&s, "e", 3, 1, at(2), &[1.0]);
        assert_eq!(state.check(&s), Ok(()));
        let err = state.check(&CupedSettings { slots: vec![0, 1], ..s.clone() }).unwrap_err();
        assert!(matches!(err, Inconsistency::Shape { expected: 0, .. }), "{err}");
        let err = state.check(&CupedSettings { unit_buckets: 1, ..s.clone() }).unwrap_err();
        assert!(matches!(err, Inconsistency::Beyond { what: "CUPED unit bucket", index: 1, count: 1, .. }), "{err}");
        let err = state.check(&CupedSettings { max_units: 0, ..s.clone() }).unwrap_err();
        assert!(matches!(err, Inconsistency::TooMany { what: "CUPED units", found: 1, max: 0, .. }), "{err}");
        let err = state.check(&CupedSettings { lookback_days: 0, ..s.clone() }).unwrap_err();
        assert!(matches!(err, Inconsistency::TooMany { what: "days in a CUPED unit's history", .. }), "{err}");
        // Forged sums: a day's, and a pre-period's of the wrong length, negative or beyond its count.
        let mut forged = CupedState::new();
        forged.finalized(&s, "x", 0, 1, at(1), &[1.0]);
        *forged.units.get_mut(&1).unwrap().words.last_mut().unwrap() = f64::NAN.to_bits();
        let err = forged.check(&s).unwrap_err();
        assert!(matches!(err, Inconsistency::Value { what: "a CUPED day's sum", .. }), "{err}");
        let frozen = |sums: Vec<f64>| {
            let mut forged = CupedState::new();
            forged.finalized(&s, "e", 3, 1, at(2), &[1.0]);
            let pre = PrePeriod { impressions: 1, sums };
            forged.frozen.values_mut().next().unwrap().units.insert(9, pre);
            forged.check(&s).unwrap_err()
        };
        assert!(matches!(frozen(vec![]), Inconsistency::Shape { what: "sums in a CUPED pre-period", .. }));
        let negative = Inconsistency::Value { what: "a CUPED pre-period's sum", expected: "finite and non-negative" };
        assert_eq!(frozen(vec![-1.0]), negative);
        let beyond =
            Inconsistency::Value { what: "a CUPED pre-period's sum", expected: "at most its impression count" };
        assert_eq!(frozen(vec![2.0]), beyond);
        let mut map = GroupMap::new();
        map.insert(3, 7);
        state.remap_groups(&map);
        assert!(state.covariates.group(7).is_some() && state.covariates.group(3).is_none());
    }
}
