//! The writer's side of a partition's chain of aggregates records (see `super::increments`):
//! each record's place ([`Link`]) and what the last one acknowledged left its readers with
//! ([`Published`]), which the next increment is taken against. Pure data: `super::global`
//! keeps it per task, `super::increments` reads and writes it.

use serde::{Deserialize, Serialize};

use crate::accumulate::{CovariateTable, GroupTable};
use crate::time::EventTime;

/// A record's place in its partition's chain of aggregates records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    /// Drawn at random for each base: tells two writers' chains apart.
    pub chain: u64,
    /// 0 for the base, then one more per increment.
    pub number: u64,
}

/// What a record left a reader of its chain with: what the next increment is taken against.
#[derive(Debug)]
pub(super) struct Written {
    /// The record's place.
    pub(super) link: Link,
    /// The partition's cumulative table as the record carried it.
    pub(super) cumulative: GroupTable,
    /// CUPED's covariates as the record carried them.
    pub(super) covariates: Option<CovariateTable>,
    /// The looks' position (`first`, `through`, `count`) as the record carried them, in
    /// partition 0's records: an increment carries the looks only when they moved.
    pub(super) looks: Option<(Option<EventTime>, Option<EventTime>, u64)>,
    /// The chain's key slot (`super::increments::AggregatesOut::slot`).
    pub(super) slot: u64,
    /// The chain's base's size: a new base once the increments add up to a multiple of it.
    pub(super) base_bytes: u64,
    /// The increments' sizes since the base.
    pub(super) increment_bytes: u64,
}

/// The writer's side of a task's chain (see `super::increments`). Not in the snapshot:
/// a restored task starts a chain with a base.
#[derive(Debug, Default)]
pub struct Published {
    /// What the newest acknowledged record left readers with; `None` until a base is, and
    /// after a failed write (the next record is a base).
    pub(super) written: Option<Written>,
    /// The record encoded and not yet acknowledged: `written` once it is.
    pub(super) candidate: Option<Written>,
    /// Bases this task encoded: the parity is the key slot of the next chain.
    pub(super) bases: u64,
}

impl Published {
    /// A write failed (or what it carried is unknown): the next record is a base.
    pub(super) fn not_written(&mut self) {
        self.written = None;
        self.candidate = None;
    }

    /// The record last encoded was acknowledged.
    pub(super) fn acknowledged(&mut self) {
        if let Some(candidate) = self.candidate.take() {
            self.written = Some(candidate);
        }
    }
}
