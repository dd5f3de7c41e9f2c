//! Where consumption resumes: the next offset of every input partition whose messages are in
//! the engine's state. Checkpointed beside the engine's snapshot, so a restored state and its
//! positions always agree.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::event::EventKind;

/// The next offset to consume per partition number and input kind: every message before it is
/// in the engine's state.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Positions(
    /// Indexed by partition number (small dense non-negative integers), then by input kind.
    Vec<[Option<i64>; 2]>,
);

impl Positions {
    /// Records that the message at `offset` is in the state. A negative partition (which no
    /// consumed message has) is ignored, as the engine ignores it.
    pub fn consumed(&mut self, kind: EventKind, partition: i32, offset: i64) {
        let Ok(i) = usize::try_from(partition) else { return };
        if self.0.len() <= i {
            self.0.resize(i + 1, [None; 2]);
        }
        self.0[i][kind.index()] = Some(offset + 1);
    }

    /// The next offsets of a partition (impressions, engagements), if anything of it was consumed.
    pub fn of(&self, partition: i32) -> Option<[Option<i64>; 2]> {
        let offsets = *self.0.get(usize::try_from(partition).ok()?)?;
        (offsets != [None; 2]).then_some(offsets)
    }

    /// Sets a partition's next offsets (from its restored snapshot).
    pub fn set(&mut self, partition: i32, offsets: [Option<i64>; 2]) {
        let Ok(i) = usize::try_from(partition) else { return };
        if self.0.len() <= i {
            self.0.resize(i + 1, [None; 2]);
        }
        self.0[i] = offsets;
    }

    /// Forgets a partition: it has no snapshot and resumes from the group's offsets.
    pub fn forget(&mut self, partition: i32) {
        if let Some(offsets) = usize::try_from(partition).ok().and_then(|i| self.0.get_mut(i)) {
            *offsets = [None; 2];
        }
    }

    /// (input, partition, next offset) of the given partitions: what may be committed for them.
    pub fn of_partitions(&self, partitions: &BTreeSet<i32>) -> Vec<(EventKind, i32, i64)> {
        let mut out = Vec::new();
        for &p in partitions {
            let Some(offsets) = self.of(p) else { continue };
            for kind in EventKind::ALL {
                if let Some(next) = offsets[kind.index()] {
                    out.push((kind, p, next));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_offsets_per_partition_and_input() {
        let mut p = Positions::default();
        p.consumed(EventKind::Impression, 2, 10);
        p.consumed(EventKind::Impression, 2, 11);
        p.consumed(EventKind::Engagement, 0, 4);
        p.consumed(EventKind::Engagement, -1, 7);
        assert_eq!((p.of(0), p.of(1), p.of(2), p.of(-1)), (Some([None, Some(5)]), None, Some([Some(12), None]), None));
        let all: BTreeSet<i32> = [0, 1, 2].into();
        assert_eq!(p.of_partitions(&all), [(EventKind::Engagement, 0, 5), (EventKind::Impression, 2, 12)]);
        p.forget(2);
        assert_eq!((p.of(2), p.of_partitions(&all).len()), (None, 1));
    }
}
