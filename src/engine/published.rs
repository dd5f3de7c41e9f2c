//! What a partition's aggregates records have carried, on the writer's side: the closed windows
//! a task keeps until a record carries them ([`ClosedProgress`], [`keep_closed`]), each
//! record's place in its chain ([`Link`]) and what the last one acknowledged left its readers
//! with ([`Published`]), which the next increment is taken against (see `super::increments`).
//! A task holds it; `super::global` and `super::increments` read and move it.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::accumulate::{ClosedWindow, CovariateTable, GroupTable};
use crate::experiments::sequential::LooksPosition;
use crate::time::EventTime;

/// Closed windows of each size a partition keeps for the aggregates topic once a record has
/// carried them: a margin for a reader that starts between two writes. A window no record has
/// carried yet is kept until one does (a backlog closes many windows between two writes).
pub(super) const RETAINED_WINDOWS: usize = 4;
/// Windows of each size a partition keeps that no record carried yet, at most, once a changelog
/// write failed (windows then close at the watermark again, not held for a record that cannot
/// be written): beyond it (a replica whose writes fail for an hour of 1-minute windows) the
/// oldest are dropped, and counted. Each is a table of the partition's groups, unit buckets
/// included, and the next record carries them all.
pub(super) const UNWRITTEN_LIMIT: usize = 64;
/// How much of a task's `recent_closed` the aggregates topic has carried (see
/// [`RETAINED_WINDOWS`]).
#[derive(Debug, Default)]
pub struct ClosedProgress {
    /// The newest windows of `recent_closed` that no record written has carried yet.
    unwritten: usize,
    /// Per window size, the start from which `recent_closed` holds every window the task
    /// closed; `None` for a restored task (its record's windows are what is known).
    pub(super) kept_from: Option<Vec<EventTime>>,
    /// The chain of records written for the task (see `super::increments`).
    pub(super) published: Published,
}

impl ClosedProgress {
    /// How many of the newest windows of `recent_closed` no record written has carried yet.
    pub(super) fn unwritten_count(&self) -> usize {
        self.unwritten
    }

    /// A record that carried the oldest `windows` of them was acknowledged.
    pub(super) fn carried(&mut self, windows: usize) {
        self.unwritten = self.unwritten.saturating_sub(windows);
    }

    /// How many windows of a size in `recent` no record carried yet.
    pub(super) fn unwritten_of_size(&self, recent: &[ClosedWindow], size: usize) -> usize {
        recent.iter().skip(recent.len().saturating_sub(self.unwritten)).filter(|w| w.size_index == size).count()
    }
}

/// Keeps a window a task just closed for its aggregates records, then drops what no record
/// needs any more; returns how many windows were dropped before a record carried them.
pub(super) fn keep_closed(
    recent: &mut Vec<ClosedWindow>,
    progress: &mut ClosedProgress,
    window: ClosedWindow,
    sizes_ms: &[i64],
) -> u64 {
    let size = window.size_index;
    recent.push(window);
    progress.unwritten += 1;
    trim_closed(recent, progress, size, sizes_ms)
}

/// Drops a size's oldest windows beyond [`RETAINED_WINDOWS`] that a record has carried, and
/// beyond [`UNWRITTEN_LIMIT`] those none has; returns how many of the latter.
pub(super) fn trim_closed(
    recent: &mut Vec<ClosedWindow>,
    progress: &mut ClosedProgress,
    size: usize,
    sizes_ms: &[i64],
) -> u64 {
    let mut dropped_unwritten = 0;
    loop {
        let written = recent.len().saturating_sub(progress.unwritten);
        let of_size = recent.iter().filter(|w| w.size_index == size).count();
        let unwritten_of_size = progress.unwritten_of_size(recent, size);
        let Some(oldest) = recent.iter().position(|w| w.size_index == size) else { break };
        let carried = oldest < written;
        if !(carried && of_size > RETAINED_WINDOWS || unwritten_of_size > UNWRITTEN_LIMIT) {
            break;
        }
        let window = recent.remove(oldest);
        if !carried {
            progress.unwritten -= 1;
            dropped_unwritten += 1;
        }
        let size_ms = sizes_ms.get(size).copied().unwrap_or(0);
        if let Some(from) = progress.kept_from.as_mut().and_then(|k| k.get_mut(size)) {
            *from = (*from).max(window.start.saturating_add(size_ms));
        }
    }
    dropped_unwritten
}

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
    /// The looks as the record left a reader, in partition 0's records: an increment carries
    /// them only when they moved, as their change since these.
    pub(super) looks: Option<WrittenLooks>,
    /// The chain's key slot (`super::increments::AggregatesOut::slot`).
    pub(super) slot: u64,
    /// The chain's base's size: a new base once the increments add up to a multiple of it.
    pub(super) base_bytes: u64,
    /// The increments' sizes since the base.
    pub(super) increment_bytes: u64,
}

/// Partition 0's looks as a record of its chain left a reader.
#[derive(Debug, Clone)]
pub(super) struct WrittenLooks {
    /// Where they stood.
    pub(super) position: LooksPosition,
    /// Their prefix: what the next change of the looks is taken against. Shared between the
    /// records written while the looks stand still (one each checkpoint round), rather than
    /// copied each time: it holds every unit of the looked-at windows.
    pub(super) prefix: Arc<GroupTable>,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accumulate::{Accumulators, StatsShape};

    fn window(minute: i64) -> ClosedWindow {
        let mut acc = Accumulators::new(StatsShape::plain(1), &[], 0);
        acc.add(0, 0, &[1.0], true, 0);
        ClosedWindow { size_index: 0, start: minute * 60, groups: acc.cumulative }
    }

    /// A task keeps every closed window until a record carries it, and the newest few; past
    /// the unwritten limit it drops the oldest and counts them; its record says from where it
    /// holds every window.
    #[test]
    fn a_task_keeps_its_closed_windows_until_a_record_carries_them() {
        let sizes_ms = [60];
        let mut recent = Vec::new();
        let mut progress = ClosedProgress { kept_from: Some(vec![EventTime::MIN]), ..ClosedProgress::default() };
        let dropped: u64 = (0..20).map(|m| keep_closed(&mut recent, &mut progress, window(m), &sizes_ms)).sum();
        assert_eq!((dropped, recent.len(), progress.unwritten), (0, 20, 20), "none written yet: all kept");
        assert_eq!(progress.kept_from, Some(vec![EventTime::MIN]));
        // A record carried the twenty; two more closed since it was encoded.
        for m in 20..22 {
            keep_closed(&mut recent, &mut progress, window(m), &sizes_ms);
        }
        progress.carried(20);
        trim_closed(&mut recent, &mut progress, 0, &sizes_ms);
        let starts: Vec<i64> = recent.iter().map(|w| w.start / 60).collect();
        assert_eq!(starts, [18, 19, 20, 21], "the newest four, the two not carried yet among them");
        assert_eq!(progress.kept_from, Some(vec![18 * 60]));
        // No write for a long while: the oldest past the limit go, counted.
        let dropped: u64 = (22..22 + UNWRITTEN_LIMIT as i64)
            .map(|m| keep_closed(&mut recent, &mut progress, window(m), &sizes_ms))
            .sum();
        assert_eq!(dropped, 2);
        assert_eq!(progress.unwritten, UNWRITTEN_LIMIT);
        assert_eq!(recent.len(), UNWRITTEN_LIMIT, "the carried two went first, then the two oldest not carried");
        assert_eq!(progress.kept_from, Some(vec![22 * 60]));
    }
}
