//! The aggregates record's layouts: the one this build writes ([`PartitionAggregatesRef`]) and
//! reads ([`PartitionAggregates`]), and the older ones it still reads, each upgraded in
//! [`PartitionAggregates::decode`]. Postcard is positional: a field is only ever added last,
//! read as absent from a record that ends before it (`super::compat::Tail`), and a layout that
//! changed inside a field is a struct of its own here. What the fields mean and how a reader
//! merges them is `super::global`'s; the increments between bases are `super::increments`'.
//!
//! A record's bytes are untrusted: this file is under the no-panic rule (crate documentation,
//! "Hostile input").
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]

use serde::{Deserialize, Serialize};

use super::compat::Tail;
use super::published::Link;
use super::wire::GroupName;
use crate::accumulate::{ClosedWindow, CovariateTable, GroupTable};
use crate::experiments::sequential::{Looks, LooksBeforeInterleaving};
use crate::time::EventTime;

/// One partition's A/B sums as the aggregates topic carries them (borrowed when written).
#[derive(Serialize)]
pub(super) struct PartitionAggregatesRef<'a> {
    pub(super) partition: i32,
    /// Per window size, the start before which every window of the partition is closed.
    pub(super) closed_before: Vec<EventTime>,
    /// The groups the tables refer to, by name.
    pub(super) groups: Vec<GroupName<&'a str>>,
    pub(super) cumulative: &'a GroupTable,
    pub(super) recent_closed: &'a [ClosedWindow],
    /// The experiment-wide looks of the cumulative anytime-valid figures, in partition 0's
    /// record only: a replica that starts late or restarts takes them over.
    pub(super) looks: Option<&'a Looks>,
    /// The partition's CUPED covariates with the metric keys they adjust (`ab.cuped`); after
    /// the fields above, so that an older rankpulse leaves it unread.
    pub(super) cuped: Option<(Vec<String>, &'a CovariateTable)>,
    /// Per window size, the start from which `recent_closed` holds every window the partition
    /// closed (one absent from it had no impression there): how a reader whose first record
    /// this is knows which windows it has the partition's whole part of. Last, like `cuped`.
    pub(super) kept_from: Vec<EventTime>,
    /// The record's place, as the base of a chain of increments (`super::increments`); last.
    pub(super) link: Option<Link>,
}

/// [`PartitionAggregatesRef`], read back.
#[derive(Deserialize)]
pub struct PartitionAggregates {
    /// The input partition these sums are of.
    pub partition: i32,
    pub(super) closed_before: Vec<EventTime>,
    pub(super) groups: Vec<GroupName<String>>,
    pub(super) cumulative: GroupTable,
    pub(super) recent_closed: Vec<ClosedWindow>,
    pub(super) looks: Option<Looks>,
    /// Absent in a record of a replica without `ab.cuped` or from before it.
    pub(super) cuped: Tail<Option<(Vec<String>, CovariateTable)>>,
    /// Absent in a record from before it: then only the windows the record holds are known.
    pub(super) kept_from: Tail<Vec<EventTime>>,
    /// Absent in a record from before increments: no increment follows it.
    pub(super) link: Tail<Option<Link>>,
}

/// A record as rankpulse wrote it before the looks folded the interleaving figures (its looks
/// lack their last field).
#[derive(Deserialize)]
struct PartitionAggregatesBeforeInterleavingLooks {
    partition: i32,
    closed_before: Vec<EventTime>,
    groups: Vec<GroupName<String>>,
    cumulative: GroupTable,
    recent_closed: Vec<ClosedWindow>,
    looks: Option<LooksBeforeInterleaving>,
}

/// A record as rankpulse wrote it before the looks were added (it lacks the last field).
#[derive(Deserialize)]
struct PartitionAggregatesWithoutLooks {
    partition: i32,
    closed_before: Vec<EventTime>,
    groups: Vec<GroupName<String>>,
    cumulative: GroupTable,
    recent_closed: Vec<ClosedWindow>,
}

impl PartitionAggregates {
    /// Decodes a record of the aggregates topic, of this version, the one before the looks
    /// folded the interleaving figures, or the one before the looks (a rolling upgrade: the
    /// looks are optional, the figures are not). Postcard has no field names to default
    /// missing fields by, so each older layout is a struct of its own.
    pub fn decode(bytes: &[u8]) -> Result<Self, crate::checkpoint::DecodeError> {
        crate::checkpoint::decode::<PartitionAggregates>(bytes).or_else(|error| {
            if let Ok(old) = crate::checkpoint::decode::<PartitionAggregatesBeforeInterleavingLooks>(bytes) {
                return Ok(PartitionAggregates {
                    partition: old.partition,
                    closed_before: old.closed_before,
                    groups: old.groups,
                    cumulative: old.cumulative,
                    recent_closed: old.recent_closed,
                    looks: old.looks.map(Looks::from),
                    cuped: Tail::default(),
                    kept_from: Tail::default(),
                    link: Tail::default(),
                });
            }
            let Ok(old) = crate::checkpoint::decode::<PartitionAggregatesWithoutLooks>(bytes) else {
                return Err(error);
            };
            Ok(PartitionAggregates {
                partition: old.partition,
                closed_before: old.closed_before,
                groups: old.groups,
                cumulative: old.cumulative,
                recent_closed: old.recent_closed,
                looks: None,
                cuped: Tail::default(),
                kept_from: Tail::default(),
                link: Tail::default(),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// The record layout before the looks, as an older rankpulse writes it.
    #[derive(Serialize)]
    struct PartitionAggregatesWithoutLooksRef<'a> {
        partition: i32,
        closed_before: Vec<EventTime>,
        groups: Vec<GroupName<&'a str>>,
        cumulative: &'a GroupTable,
        recent_closed: &'a [ClosedWindow],
    }

    /// A record of the layout before the looks is still read, without them.
    #[test]
    fn a_record_without_the_looks_is_read() {
        let old = PartitionAggregatesWithoutLooksRef {
            partition: 0,
            closed_before: vec![],
            groups: vec![],
            cumulative: &GroupTable::default(),
            recent_closed: &[],
        };
        assert!(PartitionAggregates::decode(&crate::checkpoint::encode(&old)).unwrap().looks.is_none());
    }

    /// A record of the version before the looks folded the interleaving figures is read, its
    /// looks with none (they start at the next look); the current layout keeps them, and the
    /// version before reads the current layout.
    #[test]
    fn looks_without_the_interleaving_figures_are_read() {
        use crate::experiments::sequential::MetricLooks;
        use crate::stats::sequential::RunningFigures;

        /// [`Looks`] as the version before writes it.
        #[derive(Serialize)]
        struct OldLooks<'a> {
            first: Option<EventTime>,
            through: Option<EventTime>,
            count: u64,
            prefix: &'a GroupTable,
            comparisons: &'a BTreeMap<String, BTreeMap<String, Vec<MetricLooks>>>,
            sample_ratio: &'a BTreeMap<String, f64>,
            tuning: [f64; 2],
            last_active: &'a BTreeMap<String, EventTime>,
        }
        #[derive(Serialize)]
        struct OldRecord<'a> {
            partition: i32,
            closed_before: Vec<EventTime>,
            groups: Vec<GroupName<&'a str>>,
            cumulative: &'a GroupTable,
            recent_closed: &'a [ClosedWindow],
            looks: Option<OldLooks<'a>>,
        }
        let mut looks =
            Looks { first: Some(0), through: Some(60_000), count: 1, tuning: [0.95, 5000.0], ..Looks::default() };
        looks.comparisons.entry("e".into()).or_default().insert("treatment".into(), vec![MetricLooks::default(); 2]);
        looks.sample_ratio.insert("e".into(), 0.5);
        looks.last_active.insert("e".into(), 60_000);
        let empty = GroupTable::default();
        let old = OldRecord {
            partition: 0,
            closed_before: vec![],
            groups: vec![],
            cumulative: &empty,
            recent_closed: &[],
            looks: Some(OldLooks {
                first: looks.first,
                through: looks.through,
                count: looks.count,
                prefix: &looks.prefix,
                comparisons: &looks.comparisons,
                sample_ratio: &looks.sample_ratio,
                tuning: looks.tuning,
                last_active: &looks.last_active,
            }),
        };
        let read = PartitionAggregates::decode(&crate::checkpoint::encode(&old)).unwrap();
        assert_eq!(read.looks.as_ref(), Some(&looks));
        looks.interleaving.entry("duel".into()).or_default().insert("a vs b".into(), vec![RunningFigures::default()]);
        let current = PartitionAggregatesRef {
            partition: 0,
            closed_before: vec![],
            groups: vec![],
            cumulative: &empty,
            recent_closed: &[],
            looks: Some(&looks),
            cuped: None,
            kept_from: vec![EventTime::MIN],
            link: Some(Link { chain: 7, number: 0 }),
        };
        let encoded = crate::checkpoint::encode(&current);
        assert_eq!(PartitionAggregates::decode(&encoded).unwrap().kept_from.0, Some(vec![EventTime::MIN]));
        assert_eq!(PartitionAggregates::decode(&encoded).unwrap().link.0.flatten(), Some(Link { chain: 7, number: 0 }));
        assert_eq!(read.link.0.flatten(), None, "a record from before increments is no chain's base");
        assert_eq!(read.kept_from.0, None, "a record from before kept_from says nothing of older windows");
        // The version before reads it too (postcard leaves the trailing field unread), so
        // replicas can be upgraded in either order.
        let by_the_version_before =
            crate::checkpoint::decode::<PartitionAggregatesBeforeInterleavingLooks>(&encoded).unwrap();
        assert_eq!(by_the_version_before.looks.map(|l| Looks::from(l).count), Some(looks.count));
        assert_eq!(PartitionAggregates::decode(&encoded).unwrap().looks, Some(looks));
    }
}
