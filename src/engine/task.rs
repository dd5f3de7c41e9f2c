//! Per-partition state: a [`Task`] is everything one partition number contributes to the
//! engine (what Kafka Streams calls a task), and [`Tasks`] finds it by partition number.
//!
//! A task holds its join state and its two input clocks, and whether it is *parked*: revoked
//! from this consumer, frozen (nothing finalizes, it holds back no watermark) and kept until the
//! partition is assigned here again or found consumed elsewhere. Offsets are not here: they
//! are the source's (`crate::source::Positions`), checkpointed beside the engine's state.

use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::watermark::InputClock;
use crate::event::EventKind;
use crate::join::Shard;
use crate::time::EventTime;

/// The state of one partition number, shared by the co-partitioned impressions and
/// engagements topics.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Task {
    /// Pending impressions, held engagements, de-duplication memory, engagement counts.
    pub join: Shard,
    /// One clock per input kind (impressions, engagements): what the watermark is derived from.
    pub inputs: [InputClock; 2],
    /// Revoked from this consumer: frozen until assigned here again (see the module doc).
    pub parked: bool,
    /// When it was parked (wall clock; not checkpointed): for `state.rebalance_grace` a parked
    /// partition still holds back window closing, in case it comes back here.
    #[serde(skip)]
    pub parked_since: Option<Instant>,
}

impl Task {
    /// Records that an input delivered a message (with its event time, when it had a valid one).
    pub fn observe(&mut self, kind: EventKind, event_time: Option<EventTime>, now: Instant) {
        self.inputs[kind.index()].observe(event_time, now);
    }
}

/// Tasks by partition number. Kafka partitions are small dense non-negative integers, so a
/// vector indexed by partition is the whole map.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Tasks(Vec<Option<Box<Task>>>);

impl Tasks {
    /// The one rule mapping a partition number to its slot: a negative number (never a
    /// partition a message comes from) has none.
    fn slot(partition: i32) -> Option<usize> {
        usize::try_from(partition).ok()
    }

    pub fn get(&self, partition: i32) -> Option<&Task> {
        self.0.get(Self::slot(partition)?)?.as_deref()
    }

    pub fn get_mut(&mut self, partition: i32) -> Option<&mut Task> {
        self.0.get_mut(Self::slot(partition)?)?.as_deref_mut()
    }

    /// The partition's task, created empty on first use; `None` for a negative partition.
    pub fn get_or_create(&mut self, partition: i32) -> Option<&mut Task> {
        let i = Self::slot(partition)?;
        if self.0.len() <= i {
            self.0.resize_with(i + 1, || None);
        }
        Some(self.0[i].get_or_insert_with(Box::default))
    }

    /// Every task with its partition number, in partition order.
    pub fn iter(&self) -> impl Iterator<Item = (i32, &Task)> {
        self.0.iter().enumerate().filter_map(|(i, t)| Some((i32::try_from(i).ok()?, t.as_deref()?)))
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Task> {
        self.0.iter_mut().flatten().map(|t| &mut **t)
    }

    /// Tasks this consumer owns now (not parked).
    pub fn active(&self) -> impl Iterator<Item = &Task> {
        self.iter().map(|(_, t)| t).filter(|t| !t.parked)
    }

    pub fn active_mut(&mut self) -> impl Iterator<Item = &mut Task> {
        self.iter_mut().filter(|t| !t.parked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_negative_partition_has_no_task_anywhere() {
        let mut tasks = Tasks::default();
        assert!(tasks.get_or_create(-1).is_none());
        assert!(tasks.get(-1).is_none() && tasks.get_mut(i32::MIN).is_none());
        tasks.get_or_create(2).unwrap().parked = true;
        assert_eq!(tasks.iter().map(|(p, t)| (p, t.parked)).collect::<Vec<_>>(), [(2, true)]);
        assert!(tasks.get(0).is_none() && tasks.get(3).is_none());
        assert_eq!(tasks.active().count(), 0);
    }
}
