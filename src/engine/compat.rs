//! The older layouts of the state records this build still reads, each with the one step that
//! upgrades it to this build's: a build reads the changelog and aggregates records of the build
//! before it, so an upgrade loses no state (`tests/state_upgrade.rs`).
//!
//! - **Format 5 snapshots** grew within their version: fields appended last (the later
//!   rejections, the click log, the CUPED state), which a snapshot written before them lacks.
//!   [`TaskRecordV5`] reads each as a [`Tail`]; [`TaskRecordV5::upgrade`] gives the
//!   [`TaskRecord`] of format 10 (formats 6, 7 and 10 write every field).
//! - **Pending impressions before format 10** (snapshots and deltas of formats 5 to 7) were
//!   written every field a varint: the join reads that layout ([`ShardRecordV7`],
//!   [`ShardDeltaV7`]) and upgrades it. [`TaskRecordV7`] here and `super::delta::TaskDeltaV7`
//!   (beside the delta it upgrades to: this file is below `delta` in `engine`'s layers) are
//!   this build's records but for it.
//! - **Format 6 deltas** carried the totals whole ([`TaskDeltaV6`]); format 7's carry the
//!   operations on them. A format 6 delta is applied as it was written (`super::delta`).
//! - **Aggregates records** (format 5, which they keep) grew the same way: the CUPED covariates,
//!   `kept_from` and the link are [`Tail`]s of `super::aggregates_record`'s layout.
//! - **Aggregates increments of version 8** ([`AGGREGATES_INCREMENT_V8`]) carried partition
//!   0's looks whole; version 9's carry their change. The layouts differ in that field only,
//!   so `super::increments::PartitionIncrement` reads both, the looks' type its parameter.
//!
//! A record's bytes are untrusted: this file is under the no-panic rule (crate documentation,
//! "Hostile input").
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]

use serde::{Deserialize, Deserializer};

use super::telemetry::LaterRejections;
use super::watermark::InputClock;
use super::wire::{GroupName, StateFingerprint, TaskRecord, TotalsRecord};
use crate::accumulate::CupedState;
use crate::clicks::log::LogState;
use crate::join::{ShardDeltaV7, ShardRecordV7};
use crate::time::EventTime;

/// The aggregates increments' version before the looks' change (see the module documentation).
pub(super) const AGGREGATES_INCREMENT_V8: u32 = 8;

/// A field appended to a record's layout within its format version: `None` where the record
/// ends before it. (Bytes that are there but garbled cannot be, behind a matching checksum,
/// unless forged; what is read is checked as any state is.)
#[derive(Debug)]
pub(super) struct Tail<T>(pub(super) Option<T>);

impl<T> Default for Tail<T> {
    fn default() -> Self {
        Tail(None)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Tail<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Tail(T::deserialize(d).ok()))
    }
}

/// A snapshot of format 5: [`TaskRecord`]'s fields, the last three appended within the format.
#[derive(Deserialize)]
pub struct TaskRecordV5 {
    fingerprint: StateFingerprint,
    partition: i32,
    groups: Vec<GroupName<String>>,
    frontier: Option<EventTime>,
    join: ShardRecordV7,
    inputs: [InputClock; 2],
    totals: TotalsRecord,
    /// Absent (zeros) in a snapshot from before the reject reasons after the first ones.
    later_rejections: Tail<LaterRejections>,
    /// Absent in a snapshot from before the click log.
    clicks: Tail<Option<LogState>>,
    /// Absent in a snapshot from before CUPED.
    cuped: Tail<Option<(Vec<String>, CupedState)>>,
}

impl TaskRecordV5 {
    /// The snapshot in format 10's layout: what an absent field would have held.
    pub(super) fn upgrade(self) -> TaskRecord {
        let TaskRecordV5 {
            fingerprint,
            partition,
            groups,
            frontier,
            join,
            inputs,
            totals,
            later_rejections,
            clicks,
            cuped,
        } = self;
        TaskRecord {
            fingerprint,
            partition,
            groups,
            frontier,
            join: join.upgrade(),
            inputs,
            totals,
            later_rejections: later_rejections.0.unwrap_or_default(),
            clicks: clicks.0.flatten(),
            cuped: cuped.0.flatten(),
        }
    }
}

/// A delta of format 6, whose totals were written whole: read and applied as it was.
#[derive(Deserialize)]
pub struct TaskDeltaV6 {
    pub(super) fingerprint: StateFingerprint,
    /// The partition number it is a delta of.
    pub partition: i32,
    pub(super) groups: Vec<GroupName<String>>,
    pub(super) frontier: Option<EventTime>,
    pub(super) join: ShardDeltaV7,
    pub(super) inputs: [InputClock; 2],
    pub(super) totals: TotalsRecord,
    pub(super) later_rejections: LaterRejections,
    pub(super) clicks: Option<LogState>,
    pub(super) cuped: Option<(Vec<String>, CupedState)>,
}

/// A snapshot of format 6 or 7: `TaskRecord` (`super::wire`) but for the layout of its pending
/// impressions.
#[derive(Deserialize)]
#[serde(transparent)]
pub struct TaskRecordV7(TaskRecord<ShardRecordV7>);

impl TaskRecordV7 {
    /// The snapshot in format 10's layout.
    pub(super) fn upgrade(self) -> TaskRecord {
        self.0.map_join(ShardRecordV7::upgrade)
    }
}
