//! The changelog's task record, explicit: a partition's snapshot as format 10 lays it out,
//! field by field, converted from the in-memory types when written and into them when read.
//!
//! Postcard writes a record's fields one after the other, without names: their order *is* the
//! format. So the in-memory types that carry anything only a running engine needs (scratch
//! buffers, the changes recorded for the next delta, staged sums) are not serialized
//! themselves: each is written through a record of its own, next to it, that names exactly what
//! a snapshot holds, in order ([`TaskRecordRef`] and [`TaskRecord`] here; the join's
//! `crate::join::ShardRecord`, the windows' `crate::accumulate::AccumulatorsRecord`, a pending
//! impression's record in `crate::join`'s pending set). Plain data whose every field is state
//! (a group's sums, the counters, a closed window) is its own record. A reordered field of the
//! join's state then changes no byte of the changelog; a change of a record is a new format
//! version, and the layouts before it are read by `super::compat`, each upgraded in one step.
//! `tests/state_upgrade.rs` restores a chain of every format this build reads, so a change of
//! these bytes fails there.
//!
//! The layout of format 10's snapshot, as the manual's durability chapter lists it (format 7's
//! is the same but for a pending impression's record, the join's `pending::wire`):
//! fingerprint, partition, group names, frontier, the join's shard, the two input clocks, the
//! totals (accumulators: shape, attribution window, cumulative table, open windows per size,
//! late count; counters; first-engagement delay; recently closed windows), the later
//! rejections, the click log, the CUPED state.
//!
//! A record's bytes are untrusted: this file is under the no-panic rule (crate documentation,
//! "Hostile input"); what is read is checked before it is installed (`super::restore`).
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]

use serde::{Deserialize, Serialize};

use super::task::Totals;
use super::telemetry::{Counters, Distribution, LaterRejections};
use super::watermark::InputClock;
use crate::accumulate::{Accumulators, AccumulatorsRecord, AccumulatorsRecordRef, ClosedWindow, CupedState};
use crate::clicks::log::{LogState, LogStateRef};
use crate::config::AbUnit;
use crate::ids::GroupId;
use crate::join::{ShardRecord, ShardRecordRef};
use crate::time::EventTime;

/// What a snapshot must agree on with the running configuration for its state to mean the
/// same thing: the metric vector, the windows and the attribution window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateFingerprint {
    /// The metric of each accumulator slot, by name.
    pub metric_keys: Vec<String>,
    /// `metrics.windows`, in milliseconds.
    pub window_sizes_ms: Vec<i64>,
    /// `join.attribution_window`: pending impressions' deadlines depend on it.
    pub attribution_window_ms: i64,
    /// `ab.unit` and `ab.unit_buckets` (0 for the impression unit): pending impressions and
    /// accumulators hold bucket numbers that mean nothing under another hashing.
    pub unit_buckets: (AbUnit, u32),
}

/// A group a snapshot or aggregates record refers to, by name (ids are the writing engine's own).
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct GroupName<S> {
    /// The writing engine's id for it.
    pub(super) id: GroupId,
    pub(super) experiment: S,
    pub(super) variant: S,
    /// Its latest impression timestamp, so that label retirement continues where it was.
    pub(super) last_seen: EventTime,
}

/// One partition's snapshot as written (borrowed, no copy): the task record of format 10.
#[derive(Serialize)]
pub(super) struct TaskRecordRef<'a> {
    pub(super) fingerprint: StateFingerprint,
    pub(super) partition: i32,
    pub(super) groups: Vec<GroupName<&'a str>>,
    /// The engine's frontier: an idle input of the restored task follows it.
    pub(super) frontier: Option<EventTime>,
    /// Pending impressions, held engagements, de-duplication memory, engagement counts.
    pub(super) join: ShardRecordRef<'a>,
    /// The impressions' and the engagements' input clocks.
    pub(super) inputs: &'a [InputClock; 2],
    pub(super) totals: TotalsRecordRef<'a>,
    /// The counts of the reject reasons a format 5 snapshot had no room for.
    pub(super) later_rejections: LaterRejections,
    /// The partition's click log, with `clicks.enabled`.
    pub(super) clicks: Option<LogStateRef<'a>>,
    /// The partition's CUPED state with the metric keys it adjusts, with `ab.cuped.metrics`.
    pub(super) cuped: Option<(Vec<String>, &'a CupedState)>,
}

/// One partition's snapshot as read back (format 10): [`TaskRecordRef`]'s fields, owned, in the
/// same order. Formats 6 and 7 differ in the join's pending impressions only, read with their
/// layout `J` (`super::compat::TaskRecordV7`).
#[derive(Deserialize)]
pub(super) struct TaskRecord<J = ShardRecord> {
    pub(super) fingerprint: StateFingerprint,
    pub(super) partition: i32,
    pub(super) groups: Vec<GroupName<String>>,
    pub(super) frontier: Option<EventTime>,
    pub(super) join: J,
    pub(super) inputs: [InputClock; 2],
    pub(super) totals: TotalsRecord,
    pub(super) later_rejections: LaterRejections,
    pub(super) clicks: Option<LogState>,
    pub(super) cuped: Option<(Vec<String>, CupedState)>,
}

impl<J> TaskRecord<J> {
    /// The same record, its join's part converted by `upgrade` (an older layout's step).
    pub(super) fn map_join<K>(self, upgrade: impl FnOnce(J) -> K) -> TaskRecord<K> {
        let TaskRecord {
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
            join: upgrade(join),
            inputs,
            totals,
            later_rejections,
            clicks,
            cuped,
        }
    }
}

/// A task's [`Totals`] as a snapshot holds them (borrowed): not the click log and CUPED state,
/// which the task record carries after everything else (format 5 appended them), nor the
/// operations recorded for the next delta.
#[derive(Serialize)]
pub(super) struct TotalsRecordRef<'a> {
    accumulators: AccumulatorsRecordRef<'a>,
    counters: &'a Counters,
    first_engagement_delay: &'a Distribution,
    recent_closed: &'a [ClosedWindow],
}

/// [`TotalsRecordRef`] read back (also a format 6 delta's totals, written whole).
#[derive(Deserialize)]
pub(super) struct TotalsRecord {
    accumulators: AccumulatorsRecord,
    counters: Counters,
    first_engagement_delay: Distribution,
    recent_closed: Vec<ClosedWindow>,
}

impl Totals {
    /// The totals as a snapshot holds them.
    pub(super) fn record(&self) -> TotalsRecordRef<'_> {
        TotalsRecordRef {
            accumulators: self.accumulators.record(),
            counters: &self.counters,
            first_engagement_delay: &self.first_engagement_delay,
            recent_closed: &self.recent_closed,
        }
    }

    /// The totals a snapshot held, without a click log, CUPED state or recorded changes (the
    /// restore sets the first two from the record's own fields).
    pub(super) fn from_record(record: TotalsRecord) -> Totals {
        let TotalsRecord { accumulators, counters, first_engagement_delay, recent_closed } = record;
        Totals {
            accumulators: Accumulators::from_record(accumulators),
            counters,
            first_engagement_delay,
            recent_closed,
            clicks: None,
            cuped: None,
            changes: None,
        }
    }
}
