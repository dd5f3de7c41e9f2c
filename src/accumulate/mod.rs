//! Aggregation of finalized impressions: per (experiment, variant) group, cumulatively and per
//! event-time tumbling window.
//!
//! `labels` turns label values into dense group ids and guards their cardinality ([`Groups`]),
//! `group_stats` holds the order-independent fixed-point sums of one group ([`GroupStats`]), and
//! `accumulators` adds every finalized impression into the cumulative table and the open windows,
//! closing a window once all of its impressions are final ([`Accumulators`]), and `cuped` keeps
//! each unit's recent history and the pre-period sums of the units that entered each group
//! ([`CupedState`], with `ab.cuped`). `breakdown` names the groups that keep an experiment's
//! sums once more per value of each dimension (`ab.dimensions`).

mod accumulators;
pub mod breakdown;
pub mod cuped;
mod group_stats;
mod labels;

pub use accumulators::{
    Accumulators, AccumulatorsRecord, AccumulatorsRecordRef, ClosedWindow, GroupTable, TableChange,
};
pub use cuped::{CovariateChange, CovariateTable, CupedSettings, CupedState};
pub use group_stats::{BucketSums, GroupStats, StatsShape};
pub use labels::{FoldedLabel, Groups, LabelLimits, FOLDED};
