//! Where a finalized impression becomes numbers: its metric values, into the accumulators.

use super::telemetry::Distribution;
use crate::accumulate::Accumulators;
use crate::ids::GroupId;
use crate::ids::QueryKey;
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
    /// Metric values in layout order.
    pub values: &'a [f64],
}

/// Called with every finalized impression. Used by replay (TREC export) and the conformance tests.
pub type FinalizedObserver = Box<dyn FnMut(&FinalizedView<'_>) + Send>;

/// What turns finalized impressions into numbers: apart from the engine's other state so that
/// the join's finalization callback can borrow it while a partition's shard is borrowed.
pub(super) struct Aggregation {
    /// Which metric sits in which slot of a value vector.
    pub layout: MetricLayout,
    /// Exact sums per group, cumulative and per window.
    pub accumulators: Accumulators,
    /// Reused buffer for one impression's metric values: no allocation per impression.
    pub values: Vec<f64>,
    /// Impression timestamp to first attributed engagement, in milliseconds.
    pub first_engagement_delay: Distribution,
    /// See [`FinalizedObserver`]; `None` online.
    pub observer: Option<FinalizedObserver>,
}

impl Aggregation {
    /// Computes a finalized impression's metrics and adds them to the accumulators: the one
    /// place where an impression becomes numbers.
    pub fn finalize(&mut self, f: Finalized<'_>) {
        let values = &mut self.values;
        self.layout.evaluate(f.gains, &[], values);
        let abandoned =
            values[self.layout.slot(MetricKind::Abandonment, None).expect("abandonment is always in the layout")];
        self.accumulators.add(f.group, f.timestamp, values, abandoned == 0.0, f.unit);
        if let Some(delay) = f.first_engagement_delay_ms {
            self.first_engagement_delay.record(u64::try_from(delay).unwrap_or(0));
        }
        if let Some(observe) = &mut self.observer {
            observe(&FinalizedView { query: f.query, group: f.group, timestamp: f.timestamp, gains: f.gains, values });
        }
    }
}
