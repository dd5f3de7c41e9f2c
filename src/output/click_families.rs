//! The click log's families: what happened to the impressions offered to it, its size, and the
//! position-bias estimates fitted on it (`crate::clicks`), with their standard errors.
//!
//! The counts are the owned partitions' sums, like every other total. The estimates are this
//! replica's: fitted on the pairs of the partitions it owns, refitted at most every
//! `clicks.refit_interval` (a fit reads the whole log; the table is copied under the engine's
//! lock and fitted after it is released). For one figure over every replica, merge their
//! `/api/v1/clicks` with `rankpulse judgments --from-clicks --url ... --models-out`.

use std::sync::Mutex;
use std::time::Instant;

use prometheus::core::{Collector, Desc};
use prometheus::proto::{MetricFamily, MetricType};

use super::prometheus::{counter, family, gauge, label};
use crate::clicks::{FitSettings, Fitted};
use crate::engine::SharedEngine;

const IMPRESSIONS: (&str, &str) = (
    "rankpulse_click_log_impressions_total",
    "Impressions offered to the click log by outcome: tracked (finalized and counted), untracked (a query outside the tracked head), without_query (no query text), outside_horizon (older than the previous horizon), dropped (their query was replaced by a busier one before they were finalized).",
);
const SIZE: (&str, &str) = (
    "rankpulse_click_log_entries",
    "What the click log holds over this replica's partitions: tracked queries, (query, document) pairs, and impressions offered and not finalized yet.",
);
const REPLACED: (&str, &str) =
    ("rankpulse_click_log_queries_replaced_total", "Tracked queries replaced by busier ones (the head of the traffic moving).");
const EXAMINATION: (&str, &str) = (
    "rankpulse_click_examination",
    "Examination probability of each rank relative to rank 1 (the position-bias propensity), by estimator: pbm (the position-based click model by EM) or harvest (intervention harvesting from pairs shown at both ranks). This replica's partitions; refitted every clicks.refit_interval.",
);
const STDERR: (&str, &str) = (
    "rankpulse_click_examination_stderr",
    "Standard error of rankpulse_click_examination: pbm's given the fitted attractiveness (a lower bound), harvest's over the pairs shown at both ranks.",
);
const HARVEST_PAIRS: (&str, &str) =
    ("rankpulse_click_harvest_pairs", "Pairs shown both at rank 1 and at this rank: the intervention set harvesting estimates from.");

/// Collects the click log's families. Registered only with `clicks.enabled`.
pub(super) struct ClickCollector {
    engine: SharedEngine,
    settings: FitSettings,
    /// The last fit's families, and when it was made: a scrape refits only when it is older
    /// than `clicks.refit_interval`.
    fitted: Mutex<Option<(Instant, Vec<MetricFamily>)>>,
    /// Declared: a registry tells collectors apart by their descriptors.
    descs: Vec<Desc>,
}

impl ClickCollector {
    pub(super) fn new(engine: SharedEngine, settings: FitSettings) -> Self {
        let desc = |(name, help): (&str, &str), labels: &[&str]| {
            Desc::new(name.into(), help.into(), labels.iter().map(|l| l.to_string()).collect(), Default::default())
                .expect("the click families' names and labels are valid")
        };
        let descs = vec![
            desc(IMPRESSIONS, &["outcome"]),
            desc(SIZE, &["kind"]),
            desc(REPLACED, &[]),
            desc(EXAMINATION, &["rank", "estimator"]),
            desc(STDERR, &["rank", "estimator"]),
            desc(HARVEST_PAIRS, &["rank"]),
        ];
        ClickCollector { engine, settings, fitted: Mutex::new(None), descs }
    }

    /// The estimates' families, refitted when the last fit is stale.
    fn estimates(&self, table: impl FnOnce() -> Option<crate::clicks::named::NamedTable>) -> Vec<MetricFamily> {
        let mut fitted = self.fitted.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let fresh = fitted.as_ref().is_some_and(|(at, _)| at.elapsed() < self.settings.refit_interval);
        if !fresh {
            let families = table().map(|t| fit_families(&Fitted::fit(&t.table, self.settings.em))).unwrap_or_default();
            *fitted = Some((Instant::now(), families));
        }
        fitted.as_ref().map(|(_, f)| f.clone()).unwrap_or_default()
    }
}

impl Collector for ClickCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let stale = self.fitted.lock().map_or(true, |f| {
            f.as_ref().is_none_or(|(at, _)| at.elapsed() >= self.settings.refit_interval)
        });
        // One lock for the counts and, when a refit is due, the table's copy.
        let (summary, table) = {
            let engine = self.engine.lock();
            let table = if stale { engine.click_table().map(|(t, _)| t) } else { None };
            (engine.click_summary(), table)
        };
        let Some(summary) = summary else { return Vec::new() };
        let c = summary.counts;
        let outcomes = [
            ("tracked", c.tracked),
            ("untracked", c.untracked),
            ("without_query", c.without_query),
            ("outside_horizon", c.outside_horizon),
            ("dropped", c.dropped),
        ];
        let sizes = [("queries", summary.queries), ("pairs", summary.pairs), ("pending", summary.pending)];
        let mut families = vec![
            family(
                IMPRESSIONS.0,
                IMPRESSIONS.1,
                MetricType::COUNTER,
                outcomes.iter().map(|(o, n)| counter(vec![label("outcome", o)], *n as f64)).collect(),
            ),
            family(
                SIZE.0,
                SIZE.1,
                MetricType::GAUGE,
                sizes.iter().map(|(k, n)| gauge(vec![label("kind", k)], *n as f64)).collect(),
            ),
            family(REPLACED.0, REPLACED.1, MetricType::COUNTER, vec![counter(vec![], c.queries_replaced as f64)]),
        ];
        families.extend(self.estimates(|| table));
        families.retain(|f| !f.get_metric().is_empty());
        families
    }
}

/// The estimates as gauges: ranks without an estimate have no series.
fn fit_families(fitted: &Fitted) -> Vec<MetricFamily> {
    let (mut value, mut stderr, mut pairs) = (Vec::new(), Vec::new(), Vec::new());
    let labels = |rank: usize, estimator: &str| vec![label("rank", &(rank + 1).to_string()), label("estimator", estimator)];
    for (rank, pbm) in fitted.pbm.relative_with_stderr().into_iter().enumerate() {
        if let Some((ratio, se)) = pbm {
            value.push(gauge(labels(rank, "pbm"), ratio));
            stderr.push(gauge(labels(rank, "pbm"), se));
        }
    }
    for (rank, harvest) in fitted.harvest.iter().enumerate() {
        if let Some(h) = harvest {
            value.push(gauge(labels(rank, "harvest"), h.ratio));
            if let Some(se) = h.stderr {
                stderr.push(gauge(labels(rank, "harvest"), se));
            }
            pairs.push(gauge(vec![label("rank", &(rank + 1).to_string())], h.pairs as f64));
        }
    }
    vec![
        family(EXAMINATION.0, EXAMINATION.1, MetricType::GAUGE, value),
        family(STDERR.0, STDERR.1, MetricType::GAUGE, stderr),
        family(HARVEST_PAIRS.0, HARVEST_PAIRS.1, MetricType::GAUGE, pairs),
    ]
}
