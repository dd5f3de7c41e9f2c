//! A [`Shard`] as a snapshot holds it: the join's part of the changelog's task record
//! (`crate::engine`'s `wire`), field by field in format 7's order, converted from and into the
//! shard. What only the running shard needs (its scratch buffers, whether it records changes
//! for the next delta) is not in it: a restored shard starts those afresh.
//!
//! The fields are written positionally (postcard): their order is the format. A field added,
//! moved or removed is a new format version, read beside the old one in `crate::engine`'s
//! `compat`; the fixtures of `tests/state_upgrade.rs` fail on any change of these bytes.

use serde::{Deserialize, Serialize};

use super::expiry::{ExpiringSetRecord, ExpiringSetRecordV7, ExpiryQueue, KeyMap, KeysByExpiry};
use super::pending::{PendingSet, PendingSetV7};
use super::{EngagementTally, ExpiringSet, HeldEngagement, Shard};
use crate::ids::{EngagementId, QueryKey};
use crate::time::EventTime;

/// A shard as written (borrowed, no copy).
#[derive(Serialize)]
pub struct ShardRecordRef<'a> {
    pending: &'a PendingSet,
    held: &'a KeyMap<QueryKey, Vec<HeldEngagement>>,
    held_expiry: &'a ExpiryQueue<QueryKey>,
    held_count: usize,
    seen_engagements: KeysByExpiry,
    finalized_recently: KeysByExpiry,
    watermark: Option<EventTime>,
    tally: EngagementTally,
}

/// A shard as read back: [`ShardRecordRef`]'s fields, owned, in the same order.
#[derive(Deserialize)]
pub struct ShardRecord {
    pending: PendingSet,
    held: KeyMap<QueryKey, Vec<HeldEngagement>>,
    held_expiry: ExpiryQueue<QueryKey>,
    held_count: usize,
    seen_engagements: ExpiringSetRecord<EngagementId>,
    finalized_recently: ExpiringSetRecord<QueryKey>,
    watermark: Option<EventTime>,
    tally: EngagementTally,
}

/// A shard as snapshots of format 7 and before held it: its pending impressions and its
/// de-duplication keys in their layouts (`pending::wire`, `expiry`), the rest as today's.
#[derive(Deserialize)]
pub struct ShardRecordV7 {
    pending: PendingSetV7,
    held: KeyMap<QueryKey, Vec<HeldEngagement>>,
    held_expiry: ExpiryQueue<QueryKey>,
    held_count: usize,
    seen_engagements: ExpiringSetRecordV7<EngagementId>,
    finalized_recently: ExpiringSetRecordV7<QueryKey>,
    watermark: Option<EventTime>,
    tally: EngagementTally,
}

impl ShardRecordV7 {
    /// The same shard as this build's record.
    pub fn upgrade(self) -> ShardRecord {
        let ShardRecordV7 {
            pending: PendingSetV7(pending),
            held,
            held_expiry,
            held_count,
            seen_engagements,
            finalized_recently,
            watermark,
            tally,
        } = self;
        ShardRecord {
            pending,
            held,
            held_expiry,
            held_count,
            seen_engagements: seen_engagements.into(),
            finalized_recently: finalized_recently.into(),
            watermark,
            tally,
        }
    }
}

impl Shard {
    /// The shard as a snapshot holds it.
    pub fn record(&self) -> ShardRecordRef<'_> {
        ShardRecordRef {
            pending: &self.pending,
            held: &self.held,
            held_expiry: &self.held_expiry,
            held_count: self.held_count,
            seen_engagements: self.seen_engagements.record(),
            finalized_recently: self.finalized_recently.record(),
            watermark: self.watermark,
            tally: self.tally,
        }
    }

    /// The shard a snapshot held, unchecked: [`Shard::check`] is the restore's next step.
    pub fn from_record(record: ShardRecord) -> Shard {
        let ShardRecord {
            pending,
            held,
            held_expiry,
            held_count,
            seen_engagements,
            finalized_recently,
            watermark,
            tally,
        } = record;
        Shard {
            pending,
            held,
            held_expiry,
            held_count,
            seen_engagements: ExpiringSet::from_record(seen_engagements),
            finalized_recently: ExpiringSet::from_record(finalized_recently),
            watermark,
            tally,
            ..Shard::default()
        }
    }
}
