//! The aggregates records as chains: now and then a partition's record is written whole (a
//! *base*: its cumulative sums, the closed windows it retains, partition 0's looks, CUPED's
//! covariates), and in between as an *increment*: what changed since the record before it.
//!
//! Every replica reads every partition's records ([`super::global`]); a whole record each
//! checkpoint round rewrote the cumulative table (its unit buckets and distinct units grow
//! with the users seen), the retained windows and the looks, some 17 to 43 times the input's
//! bytes at the demo's traffic. An increment carries:
//!
//! - the cumulative table's change ([`TableChange`]): each changed group's counts and sums, the
//!   unit buckets it changed and the distinct units it added, and the groups retired;
//! - the windows closed since the record before, each carried once (a base carries them again,
//!   up to the retained few, for a reader that starts there);
//! - partition 0's looks when a look was taken since: their prefix (the sums of every window
//!   looked at, with the distinct units seen) as its change since the looks the record before
//!   carried, their figures whole (`LooksChange`); CUPED's covariates' changed buckets;
//! - the bounds its windows are closed before, whole (a few numbers).
//!
//! A record names its place ([`Link`]): a base starts a chain (a random number) at 0, and
//! increment `n` applies to what a reader holds after record `n - 1` of the same chain. A
//! reader applies an increment only to that; one of another chain (a replica that lost the
//! partition and has not noticed yet, or a chain whose base the reader never saw) is skipped
//! and counted, and after a gap in its own chain (a record lost, damaged or refused) the reader
//! applies none of the partition's increments until the next base, whose retained windows and
//! `kept_from` say again which windows it holds whole; meanwhile the partition's sums stay as of
//! its last record applied, and no window is summed without its part. Increments are never the first record a reader takes of a
//! partition, so the rules by which the view knows a window is whole stay those of the base.
//!
//! The writer (`super::published`) keeps what the last acknowledged record left a reader with (the
//! cumulative table, the covariates, the looks) to take the next change against;
//! the change of a record not yet acknowledged becomes that only once it is. A failed write,
//! a new owner, or increments since the base adding up to [`BASE_AFTER`] times its size start
//! a new base. Keys follow the changelog's (`<partition>/<slot>` for a base,
//! `<partition>/<slot>/d<n>` for its increments, the slot alternating per base), so a compacted
//! topic keeps the newest chain whole and the base before it.
//!
//! A reader's looks are its own (every replica looks at the windows as they complete in its
//! view); it takes partition 0's over only when they are ahead of its own. A looks change
//! applies to looks standing where it was taken (then the prefix is the same: the windows
//! looked at are); looks standing elsewhere behind wait for the windows to complete in the
//! reader's view, or for partition 0's next base, which carries the looks whole.
//!
//! Increments have a format version of their own ([`AGGREGATES_INCREMENT_VERSION`]): a build
//! that reads only whole records refuses them with a message and goes on with the bases. The
//! version before it (8, whose increments carried the looks whole) is still read
//! (`super::compat::AGGREGATES_INCREMENT_V8`).
//!
//! What the brokers hand back is untrusted: this file is under the no-panic rule (crate
//! documentation, "Hostile input").
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::aggregates_record::PartitionAggregates;
use super::compat::AGGREGATES_INCREMENT_V8;
use super::published::{Link, Written, WrittenLooks};
use super::snapshot::check_named;
use super::wire::GroupName;
use super::Engine;
use crate::accumulate::{ClosedWindow, CovariateChange, StatsShape, TableChange};
use crate::checkpoint::{DecodeError, Inconsistency, FORMAT_VERSION};
use crate::experiments::sequential::{Looks, LooksChange, LooksChangeRef};
use crate::ids::GroupId;
use crate::time::EventTime;

/// The format version in the header of an increment (a whole record keeps
/// [`FORMAT_VERSION`]). Apart from the changelog's versions, so that no reader mistakes one
/// record for the other (8 and 9 are the increments'; the changelog's next is 10).
pub const AGGREGATES_INCREMENT_VERSION: u32 = 9;

/// A new base once the increments since the last add up to this many times its size: the
/// bases then cost at most a fifth of what is written, and a reader starting at a base (a
/// compacted topic keeps the chain) reads at most five bases' worth.
const BASE_AFTER: u64 = 4;

/// One partition's increment as written (borrowed where the engine holds the parts).
#[derive(Serialize)]
struct PartitionIncrementRef<'a> {
    /// The input partition the sums are of.
    partition: i32,
    /// Its place: the record before it in the chain is `number - 1`.
    link: Link,
    /// Per window size, the start before which every window of the partition is closed.
    closed_before: Vec<EventTime>,
    /// The groups the increment refers to, by name.
    groups: Vec<GroupName<&'a str>>,
    /// The cumulative table's change since the record before.
    cumulative: TableChange,
    /// The windows closed since the record this one follows.
    windows: &'a [ClosedWindow],
    /// Partition 0's looks, when a look was taken since the record before: their change.
    looks: Option<LooksChangeRef<'a>>,
    /// CUPED's covariates' change, with the metric keys they adjust.
    cuped: Option<(Vec<String>, CovariateChange)>,
}

/// [`PartitionIncrementRef`], read back (its fields are documented there): of this version
/// (`L` a [`LooksChange`]) or of version 8 (`L` the [`Looks`] whole), as decoded, and
/// either as held ([`IncrementLooks`]).
#[derive(Debug, Deserialize)]
#[cfg_attr(test, derive(Serialize))]
pub struct PartitionIncrement<L = IncrementLooks> {
    /// The input partition these sums are of.
    pub partition: i32,
    link: Link,
    closed_before: Vec<EventTime>,
    groups: Vec<GroupName<String>>,
    cumulative: TableChange,
    windows: Vec<ClosedWindow>,
    looks: Option<L>,
    cuped: Option<(Vec<String>, CovariateChange)>,
}

impl<L> PartitionIncrement<L> {
    /// The same increment with its looks as held.
    fn held(self, looks: impl FnOnce(L) -> IncrementLooks) -> PartitionIncrement {
        let PartitionIncrement { partition, link, closed_before, groups, cumulative, windows, looks: l, cuped } = self;
        PartitionIncrement { partition, link, closed_before, groups, cumulative, windows, looks: l.map(looks), cuped }
    }
}

/// The looks an increment carries.
#[derive(Debug)]
pub enum IncrementLooks {
    /// Whole, as version 8 carried them.
    Whole(Looks),
    /// As their change since the record before's.
    Changed(LooksChange),
}

/// As the version it was read from writes it (a test forges records from what it read).
#[cfg(test)]
impl Serialize for IncrementLooks {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            IncrementLooks::Whole(looks) => looks.serialize(s),
            IncrementLooks::Changed(change) => change.serialize(s),
        }
    }
}

impl IncrementLooks {
    /// The prefix's part of what is read: the looks' whole prefix, or its change.
    fn prefix_mut(&mut self) -> &mut crate::accumulate::GroupTable {
        match self {
            IncrementLooks::Whole(looks) => &mut looks.prefix,
            IncrementLooks::Changed(change) => &mut change.prefix.changed,
        }
    }

    fn check(&self, shape: StatsShape, metrics: usize) -> Result<(), Inconsistency> {
        match self {
            IncrementLooks::Whole(looks) => looks.check(shape, metrics),
            IncrementLooks::Changed(change) => change.check(shape, metrics),
        }
    }

    /// The groups it names.
    fn groups(&self) -> impl Iterator<Item = GroupId> + '_ {
        let (removed, prefix) = match self {
            IncrementLooks::Whole(looks) => (&[][..], &looks.prefix),
            IncrementLooks::Changed(change) => (&change.prefix.removed[..], &change.prefix.changed),
        };
        removed.iter().copied().chain(prefix.iter().map(|(g, _)| g))
    }
}

/// A record of the aggregates topic, as read.
pub enum AggregatesRecord {
    /// A whole record: a base, or any record of a build from before increments.
    Whole(PartitionAggregates),
    /// What changed since the record before it in its chain.
    Increment(PartitionIncrement),
}

impl AggregatesRecord {
    /// Decodes a record of the aggregates topic: whole (of any layout
    /// [`PartitionAggregates::decode`] reads) or an increment.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let readable = [FORMAT_VERSION, AGGREGATES_INCREMENT_V8, AGGREGATES_INCREMENT_VERSION];
        let (version, payload) = crate::checkpoint::open(bytes, &readable, "5 and its increments, 8 and 9")?;
        match version {
            AGGREGATES_INCREMENT_VERSION => {
                crate::checkpoint::decode_payload::<PartitionIncrement<LooksChange>>(payload)
                    .map(|inc| AggregatesRecord::Increment(inc.held(IncrementLooks::Changed)))
            }
            AGGREGATES_INCREMENT_V8 => crate::checkpoint::decode_payload::<PartitionIncrement<Looks>>(payload)
                .map(|inc| AggregatesRecord::Increment(inc.held(IncrementLooks::Whole))),
            _ => PartitionAggregates::decode(bytes).map(AggregatesRecord::Whole),
        }
    }
}

/// A record for the aggregates topic, encoded.
#[derive(Debug)]
pub struct AggregatesOut {
    /// The input partition it is of (and the aggregates topic's partition it goes to).
    pub partition: i32,
    /// The key's middle (`<slot>` or `<slot>/d<n>`): see the module documentation.
    pub slot: String,
    /// The record.
    pub bytes: Vec<u8>,
    /// Whether it is a base.
    pub base: bool,
}

impl Engine {
    /// A partition's next aggregates record: a base, or an increment on the last record
    /// acknowledged (see the module documentation); `None` if the engine holds no task for
    /// it. Once the brokers acknowledged it, [`Engine::aggregates_written`] makes it what the
    /// next is taken against.
    pub fn aggregates_record(&mut self, partition: i32) -> Option<AggregatesOut> {
        let looks_now = (partition == 0 && self.view.global.is_some()).then_some(&self.view.looks);
        let task = self.partitions.tasks.get(partition)?;
        let totals = &task.totals;
        let published = &task.closed_progress.published;
        let covariates = totals.cuped.as_ref().map(|c| &c.covariates);
        let in_chain = |w: &&Written| w.increment_bytes < w.base_bytes.saturating_mul(BASE_AFTER);
        let increment = published.written.as_ref().filter(in_chain).and_then(|w| {
            let cumulative = totals.accumulators.cumulative.changes_since(&w.cumulative)?;
            let cuped = match (covariates, &w.covariates) {
                (Some(now), Some(before)) => Some(now.changes_since(before)),
                (None, None) => None,
                _ => return None,
            };
            let looks = match (looks_now, &w.looks) {
                (None, None) => None,
                (Some(now), Some(then)) if now.position() == then.position => None,
                (Some(now), Some(then)) => Some(now.change_since(then.position, &then.prefix)?),
                _ => return None,
            };
            Some((w, cumulative, cuped, looks))
        });
        // The looks a record leaves a reader with: as the record before if they stood still.
        let written_looks = |then: Option<&WrittenLooks>| {
            looks_now.map(|now| match then {
                Some(then) if then.position == now.position() => then.clone(),
                _ => WrittenLooks { position: now.position(), prefix: Arc::new(now.prefix.clone()) },
            })
        };
        let (out, written) = match increment {
            Some((w, cumulative, cuped, looks)) => {
                let link = Link { chain: w.link.chain, number: w.link.number + 1 };
                let unwritten = task.closed_progress.unwritten_count();
                let first_unwritten = totals.recent_closed.len().saturating_sub(unwritten);
                let windows = totals.recent_closed.get(first_unwritten..).unwrap_or_default();
                let ids = (cumulative.removed.iter().copied())
                    .chain(cumulative.changed.iter().map(|(g, _)| g))
                    .chain(windows.iter().flat_map(|w| w.groups.iter().map(|(g, _)| g)))
                    .chain(looks.iter().flat_map(|l| l.prefix.removed.iter().copied()))
                    .chain(looks.iter().flat_map(|l| l.prefix.changed.iter().map(|(g, _)| g)))
                    .chain(cuped.iter().flat_map(|c| c.removed.iter().copied().chain(c.changed.groups())));
                let groups = self.names(ids);
                let bytes = crate::checkpoint::encode_as(
                    AGGREGATES_INCREMENT_VERSION,
                    &PartitionIncrementRef {
                        partition,
                        link,
                        closed_before: totals.accumulators.closed_before(),
                        groups,
                        cumulative,
                        windows,
                        looks,
                        cuped: cuped.map(|change| (self.cuped_metric_keys(), change)),
                    },
                );
                let slot = format!("{}/d{}", w.slot, link.number);
                let written = Written {
                    link,
                    slot: w.slot,
                    cumulative: totals.accumulators.cumulative.clone(),
                    covariates: covariates.cloned(),
                    looks: written_looks(w.looks.as_ref()),
                    base_bytes: w.base_bytes,
                    increment_bytes: w.increment_bytes + bytes.len() as u64,
                };
                (AggregatesOut { partition, slot, bytes, base: false }, written)
            }
            None => {
                let link = Link { chain: rand::random(), number: 0 };
                let bytes = self.whole_record(partition, Some(link))?;
                let slot = format!("{}", published.bases % 2);
                let written = Written {
                    link,
                    slot: published.bases % 2,
                    cumulative: totals.accumulators.cumulative.clone(),
                    covariates: covariates.cloned(),
                    looks: written_looks(None),
                    base_bytes: bytes.len() as u64,
                    increment_bytes: 0,
                };
                (AggregatesOut { partition, slot, bytes, base: true }, written)
            }
        };
        let published = &mut self.partitions.tasks.get_mut(partition)?.closed_progress.published;
        published.bases += u64::from(out.base);
        published.candidate = Some(written);
        Some(out)
    }

    /// The names of `ids`, each once.
    fn names(&self, ids: impl Iterator<Item = GroupId>) -> Vec<GroupName<&str>> {
        let used: std::collections::BTreeSet<GroupId> = ids.collect();
        used.into_iter().map(|id| self.group_name(id)).collect()
    }

    /// Merges a record of the aggregates topic into the experiment-wide view: a whole record
    /// as [`Engine::apply_aggregates`], an increment onto the record before it in its chain
    /// (see the module documentation). Refused whole as [`Engine::apply_aggregates`] refuses.
    pub fn apply_aggregates_record(&mut self, record: AggregatesRecord) -> Result<(), Inconsistency> {
        match record {
            AggregatesRecord::Whole(record) => self.apply_aggregates(record),
            AggregatesRecord::Increment(increment) => self.apply_increment(increment),
        }
    }

    /// A partition's record could not be read (damaged, or of a format this build does not
    /// know): its chain is broken until its next whole record (see `GlobalView::lose_chain`).
    pub fn aggregates_record_lost(&mut self, partition: i32) {
        if let Some(view) = self.view.global.as_mut() {
            view.lose_chain(partition);
        }
    }

    fn apply_increment(&mut self, mut inc: PartitionIncrement) -> Result<(), Inconsistency> {
        let Some(view) = self.view.global.as_mut() else { return Ok(()) };
        let partition = inc.partition;
        match view.link(partition) {
            Some(held) if held.chain == inc.link.chain && held.number.checked_add(1) == Some(inc.link.number) => {}
            Some(held) if held.chain == inc.link.chain && inc.link.number > held.number => {
                // A record of the chain it holds was lost: what it holds is no longer what
                // the writer's next increments change.
                view.lose_chain(partition);
                view.increments_skipped += 1;
                return Ok(());
            }
            _ => {
                view.increments_skipped += 1;
                return Ok(());
            }
        }
        let (shape, sizes) = (self.partitions.template.shape, self.partitions.template.window_sizes_ms.len());
        for from in self.aggregation.layout().block_ends() {
            let to = shape.metrics;
            inc.cumulative.changed.widen(from, to);
            for window in &mut inc.windows {
                window.groups.widen(from, to);
            }
            if let Some(looks) = &mut inc.looks {
                looks.prefix_mut().widen(from, to);
            }
        }
        inc.cumulative.changed.check(shape)?;
        for window in &inc.windows {
            window.check(shape, sizes)?;
        }
        if let Some(looks) = &inc.looks {
            looks.check(shape, self.aggregation.layout().len())?;
        }
        let keys = self.cuped_metric_keys();
        let cuped = match (&self.partitions.template.cuped, inc.cuped) {
            (Some(settings), Some((written, change))) if written == keys => {
                change.changed.check(settings)?;
                Some(change)
            }
            _ => None,
        };
        let used = (inc.cumulative.removed.iter().copied())
            .chain(inc.cumulative.changed.iter().map(|(g, _)| g))
            .chain(inc.windows.iter().flat_map(|w| w.groups.iter().map(|(g, _)| g)))
            .chain(inc.looks.iter().flat_map(IncrementLooks::groups))
            .chain(cuped.iter().flat_map(|c| c.removed.iter().copied().chain(c.changed.groups())));
        check_named(&inc.groups, used)?;
        let map = self.intern_names(&inc.groups);
        inc.cumulative.remap(&map);
        let looks = match inc.looks {
            Some(IncrementLooks::Whole(looks)) => Some(looks),
            Some(IncrementLooks::Changed(mut change)) => {
                change.prefix.remap(&map);
                change.apply_to(&mut self.view.looks, shape)?;
                None
            }
            None => None,
        };
        self.renumber_windows_take_looks(&map, &mut inc.windows, looks);
        let cuped = cuped.map(|mut change| {
            change.remap(&map);
            change
        });
        let settings = self.partitions.template.cuped.clone();
        let Some(view) = self.view.global.as_mut() else { return Ok(()) };
        let Some(mut cumulative) = view.take_cumulative(partition) else { return Ok(()) };
        cumulative.apply_change(&inc.cumulative);
        let mut covariates = view.take_covariates(partition);
        match (&mut covariates, &cuped, &settings) {
            (Some(table), Some(change), Some(_)) => table.apply_change(change),
            _ => covariates = None,
        }
        let checked = cumulative.check(shape).and_then(|()| match (&covariates, &settings) {
            (Some(table), Some(settings)) => table.check(settings),
            _ => Ok(()),
        });
        if let Err(e) = checked {
            // Applied, the change made sums no writer could have: the partition's part is
            // unknown until its next base.
            view.forget(partition);
            return Err(e);
        }
        view.set_link(partition, Some(inc.link));
        self.merge_into_view(partition, inc.closed_before, cumulative, inc.windows, None, covariates);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Instant;

    use super::*;
    use crate::accumulate::GroupStats;
    use crate::config::{AbUnit, Config};
    use crate::event::EventKind;

    fn config(max_units: usize) -> Config {
        let mut cfg = Config::default();
        cfg.ab.unit = AbUnit::ClientId;
        cfg.ab.max_units = max_units;
        cfg.join.attribution_window = "1s".parse().unwrap();
        cfg.metrics.windows = vec!["10s".parse().unwrap()];
        cfg
    }

    fn engine(cfg: &Config, partitions: &[i32]) -> Engine {
        let mut e = Engine::new(cfg).without_past_limit();
        e.enable_global_view(2);
        for &p in partitions {
            e.assign(p, Instant::now());
        }
        e
    }

    /// Impressions of `round` (a second of event time each) on both partitions, of new and
    /// returning clients, then the watermark advanced: some finalize, windows close.
    fn feed(e: &mut Engine, round: i64) {
        let now = Instant::now();
        for p in 0..2 {
            for i in 0..5 {
                let (t, client) = (round * 1000 + i * 100, (round * 7 + i * 3 + i64::from(p)) % 40);
                let variant = if i % 2 == 0 { "control" } else { "treatment" };
                let imp = format!(
                    r#"{{"query_id":"r{round}p{p}i{i}","timestamp":{t},"results":["d1","d2"],"experiment":"e","variant":"{variant}","client_id":"c{client}"}}"#
                );
                e.process(EventKind::Impression, p, imp.as_bytes(), now).unwrap();
                if i % 2 == 1 {
                    let click = format!(
                        r#"{{"query_id":"r{round}p{p}i{i}","timestamp":{},"doc_id":"d{}","event_id":"k{round}p{p}i{i}"}}"#,
                        t + 50,
                        1 + i % 2 + round % 2
                    );
                    e.process(EventKind::Engagement, p, click.as_bytes(), now).unwrap();
                }
            }
        }
        e.advance(now);
    }

    /// The record of a partition, acknowledged as the source does once the brokers have it.
    fn write(e: &mut Engine, p: i32) -> AggregatesOut {
        let carried = e.unwritten_windows(p);
        let out = e.aggregates_record(p).unwrap();
        e.aggregates_written(&[(p, carried)]);
        out
    }

    fn read(e: &mut Engine, out: &AggregatesOut) -> Result<(), Inconsistency> {
        e.apply_aggregates_record(AggregatesRecord::decode(&out.bytes).unwrap())
    }

    fn by_name(e: &Engine) -> BTreeMap<(String, String), GroupStats> {
        let table = e.ab_cumulative();
        let name = |id| {
            let (x, v) = e.groups().name(id);
            (x.to_string(), v.to_string())
        };
        table.iter().map(|(id, stats)| (name(id), stats.clone())).collect()
    }

    /// A backlog closes windows that wait to be carried: the replica's gauge counts them, and the
    /// next record of each partition carries them.
    #[test]
    fn the_windows_a_backlog_closed_are_counted_until_a_record_carries_them() {
        let cfg = config(10_000);
        let mut writer = engine(&cfg, &[0, 1]);
        for round in 0..200 {
            feed(&mut writer, round);
        }
        let waiting = [writer.unwritten_windows(0), writer.unwritten_windows(1)];
        assert!(waiting.iter().all(|&w| w > 1), "{waiting:?}");
        assert_eq!(writer.unwritten_windows_total(), waiting.iter().sum::<usize>());
        let gauge = |e: &Engine| {
            let families = crate::output::gather(e);
            let family = families.iter().find(|f| f.name() == "rankpulse_aggregates_windows_unwritten").unwrap();
            family.get_metric()[0].get_gauge().get_value()
        };
        assert_eq!(gauge(&writer), writer.unwritten_windows_total() as f64);
        write(&mut writer, 0);
        assert_eq!(writer.unwritten_windows_total(), waiting[1]);
        write(&mut writer, 1);
        assert_eq!((writer.unwritten_windows_total(), gauge(&writer)), (0, 0.0));
    }

    /// A replica that reads the increments holds, after every record, what one reading each
    /// record whole holds: sums, unit buckets, distinct units, windows completed.
    #[test]
    fn a_replica_reading_increments_holds_what_whole_records_give() {
        let cfg = config(10_000);
        let mut writer = engine(&cfg, &[0, 1]);
        let (mut chained, mut whole) = (engine(&cfg, &[]), engine(&cfg, &[]));
        let (mut bases, mut records) = (0, 0);
        for round in 0..60 {
            feed(&mut writer, round);
            for p in 0..2 {
                let whole_record = writer.partition_aggregates(p).unwrap();
                let out = write(&mut writer, p);
                bases += usize::from(out.base);
                records += 1;
                assert_eq!(out.slot.contains("/d"), !out.base, "{}", out.slot);
                read(&mut chained, &out).unwrap();
                whole.apply_aggregates(PartitionAggregates::decode(&whole_record).unwrap()).unwrap();
                assert!(by_name(&chained) == by_name(&whole), "round {round}, partition {p}");
            }
        }
        let finalized: u64 = by_name(&whole).values().map(|s| s.impressions).sum();
        assert!(finalized > 400, "{finalized} impressions finalized");
        assert!(by_name(&whole).values().all(|s| s.distinct_units().is_some_and(|n| n > 10)));
        assert!(bases < records / 5, "{bases} bases in {records} records");
        assert_eq!(chained.looks().count, whole.looks().count);
        assert!(chained.looks().count >= 4, "windows completed: {}", chained.looks().count);
        assert_eq!(chained.windows_skipped(), whole.windows_skipped());
        assert_eq!(chained.aggregates_increments_skipped(), 0);
    }

    /// An increment of a chain the reader does not hold (a replica that lost the partition and
    /// writes on) changes nothing; after a gap in its own chain the reader applies none until
    /// the next base, rather than add a change to the wrong sums.
    #[test]
    fn an_increment_of_another_chain_or_after_a_gap_changes_nothing() {
        let cfg = config(10_000);
        let mut writer = engine(&cfg, &[0, 1]);
        let mut reader = engine(&cfg, &[]);
        let mut other = engine(&cfg, &[0]);
        for round in 0..15 {
            feed(&mut writer, round);
            feed(&mut other, round);
        }
        for p in 0..2 {
            read(&mut reader, &write(&mut writer, p)).unwrap();
        }
        // Another replica took partition 0 over from the same point (its own chain).
        let theirs = write(&mut other, 0);
        assert!(theirs.base);
        feed(&mut other, 15);
        let their_increment = write(&mut other, 0);
        assert!(!their_increment.base);
        feed(&mut writer, 15);
        let held = by_name(&reader);
        read(&mut reader, &their_increment).unwrap();
        assert!(by_name(&reader) == held, "another chain's increment was applied");
        assert_eq!(reader.aggregates_increments_skipped(), 1);
        // A gap: increment 2 lost, 3 arrives.
        let lost = write(&mut writer, 0);
        feed(&mut writer, 16);
        let after_the_gap = write(&mut writer, 0);
        assert!(!lost.base && !after_the_gap.base, "{} {}", lost.slot, after_the_gap.slot);
        read(&mut reader, &after_the_gap).unwrap();
        assert_eq!(reader.aggregates_increments_skipped(), 2);
        assert!(by_name(&reader) == held, "partition 0's part stays as of its last record applied");
        // Nor does the chain's next increment apply: only a base mends it.
        feed(&mut writer, 17);
        let next = write(&mut writer, 0);
        assert!(!next.base);
        read(&mut reader, &next).unwrap();
        assert_eq!(reader.aggregates_increments_skipped(), 3);
        assert!(by_name(&reader) == held);
        // A failed write starts a new base, which the reader takes.
        writer.aggregates_not_written();
        feed(&mut writer, 18);
        let base = write(&mut writer, 0);
        assert!(base.base);
        read(&mut reader, &base).unwrap();
        read(&mut reader, &write(&mut writer, 1)).unwrap();
        let mut whole = engine(&cfg, &[]);
        for p in 0..2 {
            let record = PartitionAggregates::decode(&writer.partition_aggregates(p).unwrap()).unwrap();
            whole.apply_aggregates(record).unwrap();
        }
        assert!(by_name(&reader) == by_name(&whole));
    }

    /// A build that reads only whole records refuses an increment, saying why; a change that
    /// takes a group past this replica's `ab.max_units` (a replica configured otherwise, or
    /// forged bytes) is refused whole, and the increment after it finds a gap: none applies
    /// until the next base.
    #[test]
    fn increments_are_refused_by_an_older_build_and_checked_once_applied() {
        let cfg = config(10_000);
        let mut writer = engine(&cfg, &[0, 1]);
        let mut reader = engine(&config(12), &[]);
        let mut round = 0;
        let mut next = |writer: &mut Engine| {
            feed(writer, round);
            round += 1;
            write(writer, 0)
        };
        // Until the reader holds the chain (an increment applied) and sums in it.
        loop {
            let out = next(&mut writer);
            read(&mut reader, &out).unwrap();
            if !out.base && by_name(&reader).values().any(|s| s.impressions > 0) {
                break;
            }
        }
        // The next increment (a base due first is read).
        let out = loop {
            let out = next(&mut writer);
            if !out.base {
                break out;
            }
            read(&mut reader, &out).unwrap();
        };
        let Err(older) = crate::checkpoint::decode::<PartitionAggregatesOfTheBuildBefore>(&out.bytes) else {
            panic!("an increment read as a whole record")
        };
        assert!(older.to_string().contains("format version 9"), "{older}");
        // The change, with a group's units grown past the reader's limit (the writer's
        // cumulative stats of many rounds have more).
        let AggregatesRecord::Increment(mut increment) = AggregatesRecord::decode(&out.bytes).unwrap() else {
            panic!("not an increment")
        };
        let mut longer = engine(&cfg, &[0]);
        for round in 0..40 {
            feed(&mut longer, round);
        }
        let (group, _) = increment.cumulative.changed.iter().next().expect("a group changed");
        let name = increment.groups.iter().find(|g| g.id == group).unwrap();
        let many =
            longer.groups().id_of(&name.experiment, &name.variant).and_then(|id| longer.cumulative().get(id).cloned());
        let many = many.expect("the writer's stats of the group");
        assert!(many.distinct_units().unwrap() > 12);
        increment.cumulative.changed.merge_group(group, &many);
        let forged = crate::checkpoint::encode_as(AGGREGATES_INCREMENT_VERSION, &increment);
        let held = by_name(&reader);
        let refused = reader.apply_aggregates_record(AggregatesRecord::decode(&forged).unwrap()).unwrap_err();
        assert!(matches!(refused, Inconsistency::TooMany { limit: "ab.max_units", .. }), "{refused}");
        assert!(by_name(&reader) == held, "refused whole");
        // The next increment follows the one refused: a gap, so none applies until a base.
        let after = next(&mut writer);
        assert!(!after.base);
        read(&mut reader, &after).unwrap();
        assert!(by_name(&reader) == held, "partition 0's part stays as of its last record applied");
        assert_eq!(reader.aggregates_increments_skipped(), 1);
    }

    type LooksByName = (Looks, BTreeMap<(String, String), GroupStats>);

    /// Looks with their prefix by group name: two engines number the groups apart.
    fn looks_by_name(e: &Engine, looks: &Looks) -> LooksByName {
        let mut looks = looks.clone();
        let prefix = std::mem::take(&mut looks.prefix);
        let name = |id| {
            let (x, v) = e.groups().name(id);
            (x.to_string(), v.to_string())
        };
        (looks, prefix.iter().map(|(id, stats)| (name(id), stats.clone())).collect())
    }

    /// A round of the writer as a replica runs it: its records of both partitions written
    /// and read back into its own view (every replica reads every record, its own too), where
    /// the windows complete and its looks move; partition 0's record is returned, with the
    /// looks it carries (as they were when it was written).
    fn round_of_the_writer(writer: &mut Engine, round: i64) -> (AggregatesOut, Looks) {
        feed(writer, round);
        let theirs = write(writer, 1);
        read(writer, &theirs).unwrap();
        let out = write(writer, 0);
        let looks = writer.looks().clone();
        read(writer, &out).unwrap();
        (out, looks)
    }

    /// Whether a record is an increment carrying a looks change.
    fn carries_a_looks_change(out: &AggregatesOut) -> bool {
        matches!(
            AggregatesRecord::decode(&out.bytes).unwrap(),
            AggregatesRecord::Increment(PartitionIncrement { looks: Some(IncrementLooks::Changed(_)), .. })
        )
    }

    /// A replica that cannot look at the windows itself (it reads partition 0's records only,
    /// so no window completes in its view) holds the writer's looks after every record of
    /// partition 0: from the base whole, then from each increment's change, whose prefix part
    /// is what the windows looked at since added (as large as one window's sums, at every
    /// look), not the prefix again.
    #[test]
    fn a_replica_takes_the_looks_over_from_their_changes() {
        let cfg = config(10_000);
        let mut writer = engine(&cfg, &[0, 1]);
        let mut late = engine(&cfg, &[]);
        let mut changes = Vec::new();
        for round in 0..80 {
            let (out, carried) = round_of_the_writer(&mut writer, round);
            if let AggregatesRecord::Increment(PartitionIncrement {
                looks: Some(IncrementLooks::Changed(change)),
                ..
            }) = AggregatesRecord::decode(&out.bytes).unwrap()
            {
                assert_eq!(change.since.count + 1, carried.count, "round {round}: one look a record");
                changes.push(crate::checkpoint::encode(&change.prefix).len());
            }
            read(&mut late, &out).unwrap();
            assert_eq!(late.looks().count, carried.count, "round {round}");
            assert!(looks_by_name(&late, late.looks()) == looks_by_name(&writer, &carried), "round {round}");
        }
        // The first change is the first window's sums whole.
        assert!(changes.len() >= 5, "{} increments carried the looks' change", changes.len());
        assert!(changes.iter().all(|&bytes| bytes <= changes[0] * 21 / 20), "bytes of each change: {changes:?}");
        let whole = crate::checkpoint::encode(&writer.looks().prefix).len();
        assert!(whole > changes[0] * 3 / 2, "the prefix whole ({whole} bytes) against its changes: {changes:?}");
        assert_eq!(late.aggregates_increments_skipped(), 0);
    }

    /// Looks that stand elsewhere behind (they looked at a window of their own the change
    /// does not start from) are left as they are, not given a change taken against another
    /// prefix; partition 0's next base carries the looks whole, and they take those over.
    #[test]
    fn a_looks_change_from_elsewhere_is_not_applied_and_a_base_mends_it() {
        let cfg = config(10_000);
        let mut writer = engine(&cfg, &[0, 1]);
        let mut late = engine(&cfg, &[]);
        let mut rounds = 0..60;
        // Until the reader holds looks and the chain.
        for round in rounds.by_ref() {
            read(&mut late, &round_of_the_writer(&mut writer, round).0).unwrap();
            if late.looks().count > 0 {
                break;
            }
        }
        assert!(late.looks().count > 0, "no looks in 60 rounds");
        // Looks of its own at another position (as if it had looked at a window the writer
        // took together with the next in one record).
        late.view.looks.count += 1;
        let held = looks_by_name(&late, late.looks());
        let mut change = None;
        for round in rounds.by_ref() {
            let (out, _) = round_of_the_writer(&mut writer, round);
            if carries_a_looks_change(&out) {
                change = Some(out);
                break;
            }
            read(&mut late, &out).unwrap();
        }
        read(&mut late, &change.expect("a looks change in 60 rounds")).unwrap();
        assert!(looks_by_name(&late, late.looks()) == held, "a change taken against other looks was applied");
        assert_eq!(late.aggregates_increments_skipped(), 0, "the rest of the increment applies");
        writer.aggregates_not_written();
        let (base, carried) = round_of_the_writer(&mut writer, rounds.next().unwrap());
        assert!(base.base);
        read(&mut late, &base).unwrap();
        assert!(looks_by_name(&late, late.looks()) == looks_by_name(&writer, &carried));
    }

    /// An increment of version 8 (the looks whole) from a replica not yet upgraded is read and
    /// applied: its looks are taken over as a base's are.
    #[test]
    fn an_increment_of_version_8_is_read() {
        let cfg = config(10_000);
        let mut writer = engine(&cfg, &[0, 1]);
        let mut late = engine(&cfg, &[]);
        let mut v8 = None;
        let mut carried = None;
        for round in 0..60 {
            let (out, looks) = round_of_the_writer(&mut writer, round);
            if !carries_a_looks_change(&out) || late.looks().count == 0 {
                read(&mut late, &out).unwrap();
                continue;
            }
            let AggregatesRecord::Increment(inc) = AggregatesRecord::decode(&out.bytes).unwrap() else { continue };
            let inc = PartitionIncrement { looks: Some(IncrementLooks::Whole(looks.clone())), ..inc };
            carried = Some(looks);
            v8 = Some(crate::checkpoint::encode_as(AGGREGATES_INCREMENT_V8, &inc));
            break;
        }
        let v8 = v8.expect("a looks change in 60 rounds");
        let AggregatesRecord::Increment(read_back) = AggregatesRecord::decode(&v8).unwrap() else {
            panic!("version 8 not read as an increment")
        };
        assert!(matches!(read_back.looks, Some(IncrementLooks::Whole(_))));
        let before = late.looks().count;
        late.apply_aggregates_record(AggregatesRecord::Increment(read_back)).unwrap();
        assert!(late.looks().count > before);
        assert!(looks_by_name(&late, late.looks()) == looks_by_name(&writer, &carried.unwrap()));
        assert_eq!(late.aggregates_increments_skipped(), 0);
    }

    /// What a build before increments decodes a record as (its header version only).
    type PartitionAggregatesOfTheBuildBefore = PartitionAggregates;
}
