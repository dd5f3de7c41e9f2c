//! Where a finalized impression becomes numbers: its metric values, into the accumulators.

use super::offload::FinalizeWorker;
use super::task::Totals;
use crate::accumulate::{ClosedWindow, CupedSettings, GroupTable};
use crate::ids::GroupId;
use crate::ids::QueryKey;
use crate::interleaving::{self, Scored};
use crate::join::Finalized;
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
    /// Which metric sits in which slot of a value vector.
    layout: MetricLayout,
    /// Reused buffer for one impression's metric values: no allocation per impression.
    values: Vec<f64>,
    /// The metric values of an impression without any gain, whatever its length (every metric
    /// is 0 but abandonment; `unengaged_values_do_not_depend_on_length` checks it): a third of
    /// the traffic is finalized by copying them instead of evaluating.
    unengaged_values: Vec<f64>,
    /// The slot of abandonment: an impression is engaged when it is 0.
    abandonment_slot: usize,
    /// See [`FinalizedObserver`]; `None` online.
    pub observer: Option<FinalizedObserver>,
    /// Where finalized impressions go instead when finalization runs on a thread of its own
    /// (replay; see [`super::offload`]). `None` on the worker's own aggregation.
    pub worker: Option<FinalizeWorker>,
    /// `ab.cuped`, when it adjusts any metric: finalized impressions also go to their
    /// partition's [`crate::accumulate::CupedState`].
    cuped: Option<CupedSettings>,
    /// Each group's experiment name, by group id (noted by the engine as it interns groups):
    /// CUPED's pre-period is the experiment's, whichever variant a unit enters.
    experiments: Vec<Box<str>>,
}

impl Aggregation {
    pub fn new(layout: MetricLayout) -> Self {
        let mut unengaged_values = vec![0.0; layout.slot_count()];
        layout.evaluate(&[], &[], &mut unengaged_values[..layout.len()]);
        let abandonment_slot = layout.slot(MetricKind::Abandonment, None).expect("abandonment is always in the layout");
        Aggregation {
            values: vec![0.0; layout.slot_count()],
            unengaged_values,
            abandonment_slot,
            layout,
            observer: None,
            worker: None,
            cuped: None,
            experiments: Vec::new(),
        }
    }

    /// This aggregation, keeping CUPED's state with `settings`.
    pub fn with_cuped(mut self, settings: Option<CupedSettings>) -> Self {
        self.cuped = settings;
        self
    }

    /// Records the experiment of `group` (a new group, or an id reused after retirement).
    pub fn note_group(&mut self, group: GroupId, experiment: &str) {
        let i = group as usize;
        if self.experiments.len() <= i {
            self.experiments.resize(i + 1, Box::from(""));
        }
        if *self.experiments[i] != *experiment {
            self.experiments[i] = experiment.into();
        }
    }

    /// Which metric sits in which slot.
    pub fn layout(&self) -> &MetricLayout {
        &self.layout
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
            None => totals.accumulators.add_sums(group, timestamp, first, values, unit),
        }
    }

    /// Computes a finalized impression's metrics and adds them to its partition's totals: the
    /// one place where an impression becomes numbers.
    pub fn finalize(&mut self, totals: &mut Totals, f: Finalized<'_>) {
        if let Some(worker) = &mut self.worker {
            return worker.finalized(&f);
        }
        if let Some(log) = &mut totals.clicks {
            log.finalize(f.query, f.timestamp, f.gains);
        }
        let values = &mut self.values;
        if f.gains.iter().all(|&g| g == 0) {
            values.copy_from_slice(&self.unengaged_values);
        } else {
            self.layout.evaluate(f.gains, &[], &mut values[..self.layout.len()]);
        }
        // An impression that is not interleaved adds nothing to the interleaving sums: only the
        // metrics' slots go to the accumulators (measured: 1.3% of a replay's instructions).
        let mut scored = None;
        let mut added = &values[..self.layout.len()];
        if let (Some((slots, rule)), false) = (self.layout.interleaving(), f.teams.is_empty()) {
            let s = scored.insert(interleaving::score(f.gains, f.teams, *rule));
            slots.write(Some(s), values);
            added = values;
        }
        let engaged = values[self.abandonment_slot] == 0.0;
        totals.accumulators.add(f.group, f.timestamp, added, engaged, f.unit);
        if let (Some(settings), Some(state)) = (&self.cuped, &mut totals.cuped) {
            let experiment = self.experiments.get(f.group as usize).map_or("", |e| &**e);
            state.finalized(settings, experiment, f.group, f.unit, f.timestamp, added);
        }
        if let Some(delay) = f.first_engagement_delay_ms {
            totals.first_engagement_delay.record(u64::try_from(delay).unwrap_or(0));
        }
        if let Some(observe) = &mut self.observer {
            observe(&FinalizedView {
                query: f.query,
                group: f.group,
                timestamp: f.timestamp,
                gains: f.gains,
                teams: f.teams,
                interleaving: scored.as_ref(),
                values: added,
            });
        }
    }
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
            let mut values = vec![f64::NAN; aggregation.layout.len()];
            for length in 0..=1100 {
                aggregation.layout.evaluate(&vec![0; length], &[], &mut values);
                assert_eq!(values, aggregation.unengaged_values, "{length} results, cutoffs {cutoffs:?}");
            }
        }
    }
}
