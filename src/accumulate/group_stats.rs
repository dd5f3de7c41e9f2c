//! The sums one group's finalized impressions add up to: [`GroupStats`].
//!
//! Sums are kept in fixed point (an `i128` of 2^-56 units) rather than `f64`: integer addition is
//! associative, so a sum does not depend on the order in which impressions were finalized, on how
//! partitions interleaved, or on whether the process restarted. Per impression the truncation is
//! below 2^-56, far below the 1e-9 that results are compared to, and an `i128` holds 2^70
//! impressions' worth of ones.
//!
//! Most metric values lie in [0, 1]; the inverse-propensity-weighted ones (`ips_clicks@k`,
//! `ips_dcg@k`) reach the sum of their click weights. Configuration bounds every value by
//! [`crate::metrics::MAX_IMPRESSION_VALUE`], whose square in these units is 2^86: an `i128` sum of squares still
//! holds 2^41 impressions of it, more than any group sees.

use std::collections::{BTreeMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::checkpoint::Inconsistency;

/// One in fixed point: 2^56 units, so that an `i64` holds any metric value in [0, 1] (see
/// [`to_fixed`]) with 7 bits to spare.
const FIXED_ONE: f64 = (1u64 << 56) as f64;

/// Values below this in magnitude convert through an `i64` (2^63 units is 128).
const I64_RANGE: f64 = 64.0;

/// Converts a metric value to fixed point.
/// Nearly every value lies in [0, 1] and fits an `i64`: converting through it is a single
/// instruction, where a direct `f64 -> i128` conversion is a software routine, kept for the
/// weighted values beyond (up to [`crate::metrics::MAX_IMPRESSION_VALUE`] and its square). Truncating rather
/// than rounding (a libm call per value) loses less than 2^-56 per impression.
pub(super) fn to_fixed(v: f64) -> i128 {
    let scaled = v * FIXED_ONE;
    if v.abs() < I64_RANGE {
        i128::from(scaled as i64)
    } else {
        scaled as i128
    }
}

/// One nonzero metric value of an impression in fixed point, with its square: what is added
/// to every table the impression counts in. Only nonzero values are added (an impression
/// without engagement has one, its abandonment), which is most of the accumulation's saving.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct FixedValue {
    /// The metric slot.
    pub(super) slot: u32,
    /// The value, [`to_fixed`].
    pub(super) value: i128,
    /// The squared value, [`to_fixed`] of `v * v`.
    pub(super) square: i128,
}

impl FixedValue {
    /// The nonzero values of `values`, in slot order, into `out` (cleared first).
    pub(super) fn collect(values: &[f64], out: &mut Vec<FixedValue>) {
        Self::collect_from(0, values, out);
    }

    /// [`FixedValue::collect`] of values whose first is of slot `first`.
    pub(super) fn collect_from(first: u32, values: &[f64], out: &mut Vec<FixedValue>) {
        out.clear();
        for (slot, &v) in (first..).zip(values) {
            let value = to_fixed(v);
            if value != 0 {
                out.push(FixedValue { slot, value, square: to_fixed(v * v) });
            }
        }
    }
}

/// Converts a fixed-point sum back to a float.
fn from_fixed(sum: i128) -> f64 {
    sum as f64 / FIXED_ONE
}

/// What every [`GroupStats`] of an accumulator carries: fixed when the engine is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatsShape {
    /// Metric slots of the layout.
    pub metrics: usize,
    /// `ab.unit_buckets` when impressions are clustered by user or session (`ab.unit`).
    pub unit_buckets: Option<u32>,
    /// `ab.max_units`: distinct units counted exactly per group and table, for the SRM test.
    pub max_units: usize,
}

impl StatsShape {
    pub fn plain(metrics: usize) -> Self {
        StatsShape { metrics, unit_buckets: None, max_units: 0 }
    }
}

/// An impression's unit, as the accumulators need it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Unit {
    /// 32-bit hash of the unit: what distinct units are counted by.
    pub(super) hash: u32,
    /// The unit bucket its impressions are summed into (`hash % ab.unit_buckets`).
    pub(super) bucket: u32,
    /// `ab.max_units`, carried along so that counting needs no other argument.
    pub(super) max_units: usize,
}

/// Totals of the impressions of one unit bucket: whole users or sessions, so buckets are
/// independent observations for the cluster-robust variance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketSums {
    /// Impressions in the bucket: the weight of its mean in the cluster-robust variance.
    pub impressions: u64,
    /// Fixed-point sum per metric slot.
    sums: Box<[i128]>,
}

impl BucketSums {
    pub fn sum(&self, slot: usize) -> f64 {
        from_fixed(self.sums[slot])
    }
}

/// Sums over the finalized impressions of one group (in one window, or ever): what the means,
/// their variances and the A/B tests are computed from. Every field merges by addition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupStats {
    /// Finalized impressions: the denominator of every mean.
    pub impressions: u64,
    /// Impressions with at least one relevant result.
    pub engaged: u64,
    /// Fixed-point sum per metric slot of the layout.
    sums: Box<[i128]>,
    /// Fixed-point sum of squared values per slot, for standard deviations.
    squares: Box<[i128]>,
    /// Per unit bucket, when the A/B unit is a user or session; empty otherwise. Ordered, so
    /// the floating-point sums over buckets come out the same in every run and after a restore.
    buckets: BTreeMap<u32, BucketSums>,
    /// The distinct units (32-bit hashes) seen, up to `ab.max_units`: the sample-ratio test
    /// counts units, because impressions per unit vary far more than chance. Hashed with
    /// foldhash (keyed per set): inserted into for every impression and table.
    units: HashSet<u32, foldhash::fast::RandomState>,
    /// More than `ab.max_units` distinct units arrived: `units` is incomplete.
    units_overflowed: bool,
}

impl GroupStats {
    pub fn new(shape: StatsShape) -> Self {
        let zeros = || vec![0; shape.metrics].into_boxed_slice();
        GroupStats {
            impressions: 0,
            engaged: 0,
            sums: zeros(),
            squares: zeros(),
            buckets: BTreeMap::new(),
            units: HashSet::default(),
            units_overflowed: false,
        }
    }

    pub fn add(&mut self, values: &[f64], engaged: bool) {
        let mut fixed = Vec::new();
        FixedValue::collect(&values[..values.len().min(self.sums.len())], &mut fixed);
        self.add_fixed(&fixed, engaged, None);
    }

    /// [`GroupStats::add`] for an impression's nonzero values already in fixed point
    /// (converted once per impression, not per table). Slots must be below the shape's.
    pub(super) fn add_fixed(&mut self, values: &[FixedValue], engaged: bool, unit: Option<Unit>) {
        self.impressions += 1;
        self.engaged += u64::from(engaged);
        self.add_fixed_sums(values, unit, true);
    }

    /// Adds values to the sums (and to the unit's bucket) without counting an impression: the
    /// judged block of an impression, added when it arrives, before it is finalized (see
    /// [`crate::metrics::judged`]).
    pub(super) fn add_fixed_sums(&mut self, values: &[FixedValue], unit: Option<Unit>, count: bool) {
        for v in values {
            self.sums[v.slot as usize] += v.value;
            self.squares[v.slot as usize] += v.square;
        }
        if let Some(unit) = unit {
            if !count {
                self.add_to_bucket(unit.bucket, values, 0);
                return;
            }
            if !self.units_overflowed && self.units.len() < unit.max_units {
                self.units.insert(unit.hash);
            } else if !self.units.contains(&unit.hash) {
                self.units_overflowed = true;
            }
            self.add_to_bucket(unit.bucket, values, 1);
        }
    }

    fn add_to_bucket(&mut self, bucket: u32, values: &[FixedValue], impressions: u64) {
        let metrics = self.sums.len();
        let sums = self
            .buckets
            .entry(bucket)
            .or_insert_with(|| BucketSums { impressions: 0, sums: vec![0; metrics].into_boxed_slice() });
        sums.impressions += impressions;
        for v in values {
            sums.sums[v.slot as usize] += v.value;
        }
    }

    /// Adds sums staged from this table's own impressions (`Accumulators::stage`): as
    /// [`GroupStats::merge`], but the distinct units go through the `ab.max_units` limit as
    /// if their impressions had been added one by one. Which units a full set keeps depends on
    /// their order, but nothing reads a set that overflowed; whether it overflows does not.
    pub(super) fn absorb(&mut self, staged: &GroupStats, max_units: usize) {
        self.merge_sums(staged);
        self.units_overflowed |= staged.units_overflowed;
        for &unit in &staged.units {
            if !self.units_overflowed && self.units.len() < max_units {
                self.units.insert(unit);
            } else if !self.units.contains(&unit) {
                self.units_overflowed = true;
            }
        }
    }

    /// Adds another group's sums: exact, so partial results merge in any order.
    pub fn merge(&mut self, other: &GroupStats) {
        self.merge_sums(other);
        self.units.extend(&other.units);
        self.units_overflowed |= other.units_overflowed;
    }

    /// [`GroupStats::merge`] but for the distinct units.
    fn merge_sums(&mut self, other: &GroupStats) {
        self.impressions += other.impressions;
        self.engaged += other.engaged;
        for (a, b) in self.sums.iter_mut().zip(other.sums.iter()) {
            *a += b;
        }
        for (a, b) in self.squares.iter_mut().zip(other.squares.iter()) {
            *a += b;
        }
        for (bucket, theirs) in &other.buckets {
            let ours = self
                .buckets
                .entry(*bucket)
                .or_insert_with(|| BucketSums { impressions: 0, sums: vec![0; theirs.sums.len()].into_boxed_slice() });
            ours.impressions += theirs.impressions;
            for (a, b) in ours.sums.iter_mut().zip(theirs.sums.iter()) {
                *a += b;
            }
        }
    }

    pub fn sum(&self, slot: usize) -> f64 {
        from_fixed(self.sums[slot])
    }

    /// Mean over every impression of the group, empty-R impressions counting as 0.
    pub fn mean(&self, slot: usize) -> f64 {
        if self.impressions == 0 {
            0.0
        } else {
            from_fixed(self.sums[slot]) / self.impressions as f64
        }
    }

    /// Count, sum and sum of squares of one metric slot.
    pub fn moments(&self, slot: usize) -> crate::stats::Moments {
        crate::stats::Moments {
            n: self.impressions,
            sum: from_fixed(self.sums[slot]),
            sum_squares: from_fixed(self.squares[slot]),
        }
    }

    /// The per-bucket moments of one slot, when impressions were clustered. A bucket with
    /// only the judged sums of impressions not yet finalized is not one of its buckets yet.
    pub fn cluster_moments(&self, slot: usize) -> Option<crate::stats::ClusterMoments> {
        if self.buckets.is_empty() {
            return None;
        }
        let mut moments = crate::stats::ClusterMoments::default();
        for bucket in self.buckets.values().filter(|b| b.impressions > 0) {
            moments.add_bucket(bucket.impressions as f64, bucket.sum(slot));
        }
        Some(moments)
    }

    /// [`GroupStats::moments`] of a slot that only some impressions add to, counted by the
    /// slot `count_slot` (the judged block: its count is the judged impressions).
    pub fn moments_over(&self, slot: usize, count_slot: usize) -> crate::stats::Moments {
        crate::stats::Moments {
            n: self.sum(count_slot).round() as u64,
            sum: from_fixed(self.sums[slot]),
            sum_squares: from_fixed(self.squares[slot]),
        }
    }

    /// [`GroupStats::cluster_moments`] of a slot counted by `count_slot`: a bucket's count is
    /// its sum of that slot, and a bucket without any is left out.
    pub fn cluster_moments_over(&self, slot: usize, count_slot: usize) -> Option<crate::stats::ClusterMoments> {
        if self.buckets.is_empty() {
            return None;
        }
        let mut moments = crate::stats::ClusterMoments::default();
        for bucket in self.buckets.values() {
            let count = bucket.sum(count_slot).round();
            if count > 0.0 {
                moments.add_bucket(count, bucket.sum(slot));
            }
        }
        Some(moments)
    }

    /// The unit buckets' sums, in bucket order (empty when impressions are not clustered).
    pub fn buckets(&self) -> impl Iterator<Item = &BucketSums> {
        self.buckets.values()
    }

    /// The unit buckets' sums with their bucket numbers, in bucket order.
    pub fn buckets_by_number(&self) -> impl Iterator<Item = (u32, &BucketSums)> {
        self.buckets.iter().map(|(&b, sums)| (b, sums))
    }

    /// Non-empty unit buckets.
    pub fn bucket_count(&self) -> usize {
        self.buckets.values().filter(|b| b.impressions > 0).count()
    }

    /// Checks stats read from a snapshot or an aggregates record against the shape of this
    /// configuration's stats: one sum per metric slot, unit buckets only when clustered and
    /// within their count, counts and sums that adding to cannot overflow. What the bytes say is
    /// not trusted, the checksum only tells they arrived as written.
    pub fn check(&self, shape: StatsShape) -> Result<(), Inconsistency> {
        use crate::checkpoint::{check_count, check_sum};
        let slots = |what, found: usize| {
            if found != shape.metrics {
                return Err(Inconsistency::Shape { what, found, expected: shape.metrics });
            }
            Ok(())
        };
        slots("sums in a group's stats", self.sums.len())?;
        slots("squares in a group's stats", self.squares.len())?;
        check_count("an impression count", self.impressions)?;
        check_count("an engaged count", self.engaged)?;
        for &sum in self.sums.iter().chain(self.squares.iter()) {
            check_sum("a metric sum", sum)?;
        }
        for (&bucket, sums) in &self.buckets {
            // Without clustering (`ab.unit` = impression) there are no buckets.
            let buckets = shape.unit_buckets.unwrap_or(0);
            if bucket >= buckets {
                return Err(Inconsistency::Beyond {
                    what: "unit bucket",
                    index: bucket.into(),
                    limit: "ab.unit_buckets",
                    count: buckets.into(),
                });
            }
            slots("sums in a unit bucket", sums.sums.len())?;
            check_count("a unit bucket's impression count", sums.impressions)?;
            for &sum in sums.sums.iter() {
                check_sum("a unit bucket's sum", sum)?;
            }
        }
        if self.units.len() > shape.max_units {
            return Err(Inconsistency::TooMany {
                what: "distinct units",
                found: self.units.len(),
                limit: "ab.max_units",
                max: shape.max_units,
            });
        }
        Ok(())
    }

    /// Appends zero sums to stats of `from` slots up to `to`: stats written without the
    /// interleaving sums or the judged block (before they existed, or with them off) read as
    /// they would have been kept, since no impression they counted added to them. Stats of any
    /// other length are left as they are, for the shape check to refuse.
    pub fn widen(&mut self, from: usize, to: usize) {
        let widen = |sums: &mut Box<[i128]>| {
            if sums.len() == from && from < to {
                let mut wider = sums.to_vec();
                wider.resize(to, 0);
                *sums = wider.into_boxed_slice();
            }
        };
        widen(&mut self.sums);
        widen(&mut self.squares);
        for bucket in self.buckets.values_mut() {
            widen(&mut bucket.sums);
        }
    }

    /// What was added since `earlier`, these same stats as they were: the differences of the
    /// counts, sums and squares, of each unit bucket that changed (a bucket added is whole),
    /// and the distinct units added. [`GroupStats::merge`] of it into `earlier` gives these
    /// stats exactly (integers). An impression's values are a few nonzero slots, so a bucket
    /// that a few impressions changed differs in few. `None` when these stats are not a
    /// growth of `earlier` (a count that fell, a bucket or a unit gone, another shape), which
    /// no impression makes: the caller then sends the stats whole.
    pub fn changes_since(&self, earlier: &GroupStats) -> Option<GroupStats> {
        let grown = self.impressions >= earlier.impressions
            && self.engaged >= earlier.engaged
            && self.sums.len() == earlier.sums.len()
            && self.squares.len() == earlier.squares.len()
            && earlier.buckets.iter().all(|(b, sums)| {
                self.buckets
                    .get(b)
                    .is_some_and(|now| now.impressions >= sums.impressions && now.sums.len() == sums.sums.len())
            })
            && (self.units_overflowed || !earlier.units_overflowed);
        if !grown {
            return None;
        }
        let minus = |now: &[i128], before: &[i128]| -> Box<[i128]> {
            now.iter().zip(before).map(|(a, b)| a.wrapping_sub(*b)).collect()
        };
        let mut buckets = BTreeMap::new();
        for (&b, now) in &self.buckets {
            match earlier.buckets.get(&b) {
                Some(before) if before == now => {}
                Some(before) => {
                    let impressions = now.impressions - before.impressions;
                    buckets.insert(b, BucketSums { impressions, sums: minus(&now.sums, &before.sums) });
                }
                None => {
                    buckets.insert(b, now.clone());
                }
            }
        }
        let units: HashSet<u32, foldhash::fast::RandomState> =
            self.units.iter().filter(|u| !earlier.units.contains(u)).copied().collect();
        if earlier.units.len() + units.len() != self.units.len() {
            return None;
        }
        Some(GroupStats {
            impressions: self.impressions - earlier.impressions,
            engaged: self.engaged - earlier.engaged,
            sums: minus(&self.sums, &earlier.sums),
            squares: minus(&self.squares, &earlier.squares),
            buckets,
            units,
            units_overflowed: self.units_overflowed,
        })
    }

    /// Distinct units seen, or `None` when there were more than `ab.max_units`.
    pub fn distinct_units(&self) -> Option<usize> {
        (!self.units_overflowed).then_some(self.units.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_read_back_are_checked_against_the_configured_shape() {
        let shape = StatsShape { metrics: 2, unit_buckets: Some(4), max_units: 10 };
        let mut stats = GroupStats::new(shape);
        let values = [FixedValue { slot: 0, value: 1, square: 1 }, FixedValue { slot: 1, value: 2, square: 4 }];
        stats.add_fixed(&values, true, Some(Unit { hash: 7, bucket: 3, max_units: 10 }));
        assert_eq!(stats.check(shape), Ok(()));
        // Found by the snapshot entry point's varint sweep (tests/hostile_input.rs): stats of
        // another shape were merged and indexed by this one, and a shape from the bytes sized every
        // new group's sums (68 GB).
        let sums = Inconsistency::Shape { what: "sums in a group's stats", found: 2, expected: 3 };
        assert_eq!(stats.check(StatsShape { metrics: 3, ..shape }), Err(sums));
        let bucket = |count| Inconsistency::Beyond { what: "unit bucket", index: 3, limit: "ab.unit_buckets", count };
        assert_eq!(stats.check(StatsShape { unit_buckets: Some(3), ..shape }), Err(bucket(3)), "bucket 3 of 3");
        assert_eq!(stats.check(StatsShape { unit_buckets: None, ..shape }), Err(bucket(0)));
        let units = stats.check(StatsShape { max_units: 0, ..shape });
        assert!(matches!(units, Err(Inconsistency::TooMany { what: "distinct units", found: 1, max: 0, .. })));
        let mut huge = stats.clone();
        huge.sums[0] = i128::MAX;
        assert_eq!(huge.check(shape), Err(Inconsistency::Sum { what: "a metric sum", value: i128::MAX }));
        assert_eq!(
            huge.check(shape).unwrap_err().to_string(),
            format!("a metric sum is {}, more than any state can hold", i128::MAX)
        );
        let mut narrow = stats.clone();
        narrow.buckets.values_mut().next().unwrap().sums = Box::new([0]);
        let bucket_sums = Inconsistency::Shape { what: "sums in a unit bucket", found: 1, expected: 2 };
        assert_eq!(narrow.check(shape), Err(bucket_sums));
        let mut huge = stats;
        huge.impressions = u64::MAX;
        assert_eq!(huge.check(shape), Err(Inconsistency::Count { what: "an impression count", value: u64::MAX }));
    }

    #[test]
    fn fixed_point_sums_do_not_depend_on_order() {
        let values: Vec<f64> = (1..200).map(|i| 1.0 / f64::from(i)).collect();
        let mut forward = GroupStats::new(StatsShape::plain(1));
        let mut backward = GroupStats::new(StatsShape::plain(1));
        for v in &values {
            forward.add(&[*v], true);
        }
        for v in values.iter().rev() {
            backward.add(&[*v], true);
        }
        assert_eq!(forward, backward);
        let exact: f64 = values.iter().sum();
        assert!((forward.sum(0) - exact).abs() < 1e-12);
    }
}
