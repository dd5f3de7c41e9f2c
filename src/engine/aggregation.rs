//! Where a finalized impression becomes numbers: its metric values, into the accumulators;
//! and the partitions finalized on several threads at once ([`finalize_due`]).

use super::task::{StateSize, Task, Totals};
use crate::accumulate::{breakdown, ClosedWindow, CupedSettings, GroupTable};
use crate::ids::GroupId;
use crate::ids::QueryKey;
use crate::interleaving::{self, Scored};
use crate::join::{Finalized, JoinSettings};
use crate::metrics::{MetricKind, MetricLayout};
use crate::time::EventTime;

/// A finalized impression as an observer sees it.
#[derive(Debug)]
pub struct FinalizedView<'a> {
    /// Its query, to match it with the caller's own records.
    pub query: QueryKey,
    /// Its (experiment, variant).
    pub group: GroupId,
    /// Its event time.
    pub timestamp: EventTime,
    /// Gain per rank, as attributed.
    pub gains: &'a [u8],
    /// Per rank, the team of an interleaved list (ranker index + 1); empty otherwise.
    pub teams: &'a [u8],
    /// An interleaved impression's credits and outcome.
    pub interleaving: Option<&'a Scored>,
    /// Metric values in layout order (followed by the interleaving sums' slots when the
    /// impression is interleaved).
    pub values: &'a [f64],
}

/// Called with every finalized impression. Used by replay (TREC export) and the conformance tests.
pub type FinalizedObserver = Box<dyn FnMut(&FinalizedView<'_>) + Send>;

/// What turns finalized impressions into numbers: apart from the engine's other state so that
/// the join's finalization callback can borrow it while a partition's shard is borrowed.
pub(super) struct Aggregation {
    /// How an impression becomes numbers: read-only while finalizing, so that the threads
    /// finalizing several partitions at once share it (`Engine::advance`).
    pub evaluation: Evaluation,
    /// Reused buffer for one impression's metric values: no allocation per impression.
    values: Vec<f64>,
    /// See [`FinalizedObserver`]; `None` online.
    pub observer: Option<FinalizedObserver>,
    /// Where finalized impressions go instead when finalization runs on threads of their own
    /// (replay's `super::offload::FinalizeWorker`). `None` on a worker's own aggregation.
    pub worker: Option<Box<dyn Offloaded>>,
}

/// Finalization on threads of their own, as the engine's thread drives it: what would be added
/// up here is queued, in order, with the closes and retirements between (the threads'
/// side is `super::offload`'s, which runs an [`Aggregation`] per thread).
pub(super) trait Offloaded: Send {
    /// Queues a finalized impression.
    fn finalized(&mut self, f: &Finalized<'_>);
    /// Queues an arriving impression's judged block.
    fn judged(&mut self, group: GroupId, timestamp: EventTime, unit: u32, values: &[f64]);
    /// Queues closing the windows at `watermark`, after every impression finalized before.
    fn close_windows(&mut self, watermark: EventTime);
    /// Queues retiring `group`, after every impression finalized before.
    fn retire(&mut self, group: GroupId);
    /// Tells every lane where a breakdown group's impressions go, before any is queued.
    fn expansion(&mut self, group: GroupId, targets: &[GroupId]);
    /// Sends what is queued, waits for the threads and takes their results back.
    fn finish(self: Box<Self>) -> Finished;
}

/// What [`Offloaded::finish`] gives the engine back.
pub(super) struct Finished {
    /// The sums and delay distribution the threads computed.
    pub(super) totals: Totals,
    /// The windows each close closed, in order.
    pub(super) closed: Vec<Vec<ClosedWindow>>,
    /// The aggregation, with its observer, back from the threads.
    pub(super) aggregation: Aggregation,
}

/// What evaluates a finalized impression and adds it to its partition's sums.
pub(super) struct Evaluation {
    /// Which metric sits in which slot of a value vector.
    layout: MetricLayout,
    /// The metric values of an impression without any gain, whatever its length (every metric
    /// is 0 but abandonment; `unengaged_values_do_not_depend_on_length` checks it): a third of
    /// the traffic is finalized by copying them instead of evaluating.
    unengaged_values: Vec<f64>,
    /// The slot of abandonment: an impression is engaged when it is 0.
    abandonment_slot: usize,
    /// `ab.cuped`, when it adjusts any metric: finalized impressions also go to their
    /// partition's [`crate::accumulate::CupedState`].
    cuped: Option<CupedSettings>,
    /// Each group's experiment name, by group id (noted by the engine as it interns groups):
    /// CUPED's pre-period is the experiment's, whichever variant a unit enters.
    experiments: Vec<Box<str>>,
    /// By group id, where an impression of a breakdown group is added instead of to the group
    /// itself: its experiment's group and a part per dimension (noted by the engine from
    /// `Groups::take_new_expansions`; see `crate::accumulate::breakdown`).
    expansions: Vec<Option<Box<[GroupId]>>>,
}

impl Aggregation {
    pub fn new(layout: MetricLayout) -> Self {
        let mut unengaged_values = vec![0.0; layout.slot_count()];
        layout.evaluate(&[], &[], &mut unengaged_values[..layout.len()]);
        let abandonment_slot = layout.slot(MetricKind::Abandonment, None).expect("abandonment is always in the layout");
        Aggregation {
            values: vec![0.0; layout.slot_count()],
            evaluation: Evaluation {
                unengaged_values,
                abandonment_slot,
                layout,
                cuped: None,
                experiments: Vec::new(),
                expansions: Vec::new(),
            },
            observer: None,
            worker: None,
        }
    }

    /// This aggregation, keeping CUPED's state with `settings`.
    pub fn with_cuped(mut self, settings: Option<CupedSettings>) -> Self {
        self.evaluation.cuped = settings;
        self
    }

    /// An aggregation for a finalization lane: the same evaluation, without CUPED (which
    /// keeps one lane) or observer.
    pub fn for_lane(&self) -> Self {
        let mut lane = Aggregation::new(self.layout().clone());
        lane.evaluation.expansions = self.evaluation.expansions.clone();
        lane
    }

    /// Records where an impression of breakdown group `group` is added (`targets`), here and
    /// on the finalization lanes.
    pub fn note_expansion(&mut self, group: GroupId, targets: &[GroupId]) {
        if let Some(worker) = &mut self.worker {
            worker.expansion(group, targets);
        }
        self.evaluation.note_expansion(group, targets);
    }

    /// Records the experiment of `group` (a new group, or an id reused after retirement): a
    /// breakdown group's is its experiment's.
    pub fn note_group(&mut self, group: GroupId, experiment: &str) {
        let experiment = breakdown::experiment_of(experiment);
        let experiments = &mut self.evaluation.experiments;
        let i = group as usize;
        if experiments.len() <= i {
            experiments.resize(i + 1, Box::from(""));
        }
        if *experiments[i] != *experiment {
            experiments[i] = experiment.into();
        }
    }

    /// Which metric sits in which slot.
    pub fn layout(&self) -> &MetricLayout {
        &self.evaluation.layout
    }

    /// Adds an arriving impression's judged block (values from slot `first` on) to its
    /// partition's sums, or hands it to the worker, in order with the finalized impressions.
    pub fn add_judged(
        &mut self,
        totals: &mut Totals,
        group: GroupId,
        timestamp: EventTime,
        unit: u32,
        first: usize,
        values: &[f64],
    ) {
        match &mut self.worker {
            Some(worker) => worker.judged(group, timestamp, unit, values),
            None => {
                if let Some(changes) = &mut totals.changes {
                    changes.judged(group, timestamp, unit, first, values);
                }
                for &target in self.evaluation.targets(&group) {
                    totals.accumulators.add_sums(target, timestamp, first, values, unit);
                }
            }
        }
    }

    /// Computes a finalized impression's metrics and adds them to its partition's totals: the
    /// one place where an impression becomes numbers.
    pub fn finalize(&mut self, totals: &mut Totals, f: Finalized<'_>) {
        if let Some(worker) = &mut self.worker {
            return worker.finalized(&f);
        }
        let (added, scored) = self.evaluation.add(&mut self.values, totals, &f);
        if let Some(observe) = &mut self.observer {
            observe(&FinalizedView {
                query: f.query,
                group: f.group,
                timestamp: f.timestamp,
                gains: f.gains,
                teams: f.teams,
                interleaving: scored.as_ref(),
                values: &self.values[..added],
            });
        }
    }
}

impl Evaluation {
    /// How many values an impression has (the buffer [`Evaluation::add`] takes).
    pub fn slot_count(&self) -> usize {
        self.layout.slot_count()
    }

    /// The groups an impression of `group` is added to: its expansion, or itself.
    pub fn targets<'a>(&'a self, group: &'a GroupId) -> &'a [GroupId] {
        self.expansions.get(*group as usize).and_then(Option::as_deref).unwrap_or(std::slice::from_ref(group))
    }

    /// See [`Aggregation::note_expansion`].
    pub fn note_expansion(&mut self, group: GroupId, targets: &[GroupId]) {
        let i = group as usize;
        if self.expansions.len() <= i {
            self.expansions.resize(i + 1, None);
        }
        self.expansions[i] = Some(targets.into());
    }

    /// Evaluates a finalized impression into `values` (a buffer of the layout's slot count)
    /// and adds it to its partition's totals. Returns how many of the values were added (the
    /// interleaving slots only for an interleaved list) and its interleaving score.
    pub fn add(&self, values: &mut [f64], totals: &mut Totals, f: &Finalized<'_>) -> (usize, Option<Scored>) {
        if let Some(changes) = &mut totals.changes {
            changes.finalized(f);
        }
        let experiment = self.experiments.get(f.group as usize).map_or("", |e| &**e);
        self.add_as(values, totals, f, experiment, self.targets(&f.group))
    }

    /// [`Evaluation::add`] of an impression of a group of `experiment`, added to `targets` (its
    /// group, or a breakdown group's expansion): a delta's operations are replayed with the
    /// names of the groups of the state they apply to.
    pub fn add_as(
        &self,
        values: &mut [f64],
        totals: &mut Totals,
        f: &Finalized<'_>,
        experiment: &str,
        targets: &[GroupId],
    ) -> (usize, Option<Scored>) {
        if let Some(log) = &mut totals.clicks {
            log.finalize(f.query, f.timestamp, f.gains);
        }
        // Live gains never exceed the configuration's largest; restored state is checked, but a
        // pending impression's gains (5 bits) are not checked against it, and a value past it
        // would overflow the exact sums: bounded here, where every impression passes.
        let max_gain = self.layout.max_gain();
        let bounded: Vec<u8>;
        let gains = if f.gains.iter().any(|&g| g > max_gain) {
            bounded = f.gains.iter().map(|&g| g.min(max_gain)).collect();
            &bounded[..]
        } else {
            f.gains
        };
        if gains.iter().all(|&g| g == 0) {
            values.copy_from_slice(&self.unengaged_values);
        } else {
            self.layout.evaluate(gains, &[], &mut values[..self.layout.len()]);
        }
        // An impression that is not interleaved adds nothing to the interleaving sums: only the
        // metrics' slots go to the accumulators (measured: 1.3% of a replay's instructions).
        let mut scored = None;
        let mut added_len = self.layout.len();
        if let (Some((slots, rule)), false) = (self.layout.interleaving(), f.teams.is_empty()) {
            let s = scored.insert(interleaving::score(gains, f.teams, *rule));
            slots.write(Some(s), values);
            added_len = values.len();
        }
        let added = &values[..added_len];
        let engaged = values[self.abandonment_slot] == 0.0;
        for &group in targets {
            totals.accumulators.add(group, f.timestamp, added, engaged, f.unit);
        }
        // CUPED once per impression, for its experiment's group (the first target): the state
        // records each unit's history and enters it into its experiment once, so a breakdown's
        // groups would count the history again and enter nothing. A breakdown is not adjusted.
        if let (Some(settings), Some(state), Some(&group)) = (&self.cuped, &mut totals.cuped, targets.first()) {
            state.finalized(settings, experiment, group, f.unit, f.timestamp, added);
        }
        if let Some(delay) = f.first_engagement_delay_ms {
            totals.first_engagement_delay.record(u64::try_from(delay).unwrap_or(0));
        }
        (added_len, scored)
    }
}

/// Advances each task's join to its watermark, finalizing what it passed, with the partitions
/// spread over up to `lanes` threads.
///
/// A partition's finalization touches its own task and nothing else but the shared, read-only
/// [`Evaluation`], so each partition's results are the same on any thread; the
/// state sizes are added up after. On the caller's thread alone when there is one partition to
/// advance, or an observer (it sees impressions in order) or a finalization worker (replay's,
/// which takes them in order) is there.
pub(super) fn finalize_due(
    due: &mut [(EventTime, &mut Task)],
    aggregation: &mut Aggregation,
    state: &mut StateSize,
    join: &JoinSettings,
    lanes: usize,
) {
    let lanes = lanes.min(due.len());
    if lanes <= 1 || aggregation.observer.is_some() || aggregation.worker.is_some() {
        for (w, task) in due {
            let Task { join: shard, totals, .. } = &mut **task;
            state.track(shard, |s| s.advance(*w, join, |f| aggregation.finalize(totals, f)));
        }
        return;
    }
    let evaluation = &aggregation.evaluation;
    let finalize_group = |group: &mut [(EventTime, &mut Task)]| {
        let mut values = vec![0.0; evaluation.slot_count()];
        let (mut before, mut after) = (StateSize::default(), StateSize::default());
        for (w, task) in group {
            let Task { join: shard, totals, .. } = &mut **task;
            before.add(StateSize::of(shard));
            shard.advance(*w, join, |f| {
                evaluation.add(&mut values, totals, &f);
            });
            after.add(StateSize::of(shard));
        }
        (before, after)
    };
    let per_lane = due.len().div_ceil(lanes);
    let (before, after) = std::thread::scope(|scope| {
        let mut groups = due.chunks_mut(per_lane);
        let first = groups.next();
        let others: Vec<_> = groups.map(|group| scope.spawn(|| finalize_group(group))).collect();
        let (mut before, mut after) = first.map(&finalize_group).unwrap_or_default();
        for other in others {
            // A panic in the metric code is a bug; it surfaces as on the caller's thread.
            let (b, a) = other.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            before.add(b);
            after.add(a);
        }
        (before, after)
    });
    // Added before subtracted, as `StateSize::track` does: the totals include `before`.
    state.add(after);
    state.subtract(before);
}

/// The windows the engine's partitions closed, merged: a window closes in every partition at
/// the same watermark (the least one), so one `advance` closes it everywhere at once.
#[derive(Debug, Default)]
pub(super) struct ClosedWindows {
    /// Newest closed window per size, for the `rankpulse_window_mean` gauges and the API.
    pub newest: Vec<Option<ClosedWindow>>,
    /// Closed windows not yet taken by replay or delivered by the A/B publisher, in closing
    /// order (oldest first per size).
    pub kept: Vec<ClosedWindow>,
    /// Whether closed windows are kept at all: replay prints them, the publisher sends them.
    pub keep: bool,
}

impl ClosedWindows {
    pub fn new(sizes: usize) -> Self {
        ClosedWindows { newest: vec![None; sizes], kept: Vec::new(), keep: false }
    }

    /// Merges the windows closed by one `advance` (per partition) into one per (size, start),
    /// showing each merged window to `on_merged`, in order.
    pub fn add(&mut self, closed: Vec<ClosedWindow>, mut on_merged: impl FnMut(&ClosedWindow)) {
        let mut merged: std::collections::BTreeMap<(usize, i64), GroupTable> = Default::default();
        for window in closed {
            merged.entry((window.size_index, window.start)).or_default().merge(&window.groups);
        }
        for ((size_index, start), groups) in merged {
            let window = ClosedWindow { size_index, start, groups };
            on_merged(&window);
            if self.keep {
                self.kept.push(window.clone());
            }
            if self.newest[size_index].as_ref().is_none_or(|n| n.start <= start) {
                self.newest[size_index] = Some(window);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unengaged_values_do_not_depend_on_length() {
        for (cutoffs, threshold, max_gain) in [(&[1u32, 3, 5, 10][..], 1u8, 3u8), (&[1, 2, 20, 100, 1000], 2, 4)] {
            let aggregation = Aggregation::new(MetricLayout::new(cutoffs, threshold, max_gain));
            let mut values = vec![f64::NAN; aggregation.layout().len()];
            for length in 0..=1100 {
                aggregation.layout().evaluate(&vec![0; length], &[], &mut values);
                assert_eq!(values, aggregation.evaluation.unengaged_values, "{length} results, cutoffs {cutoffs:?}");
            }
        }
    }
}
