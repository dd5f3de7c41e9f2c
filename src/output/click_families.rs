//! The click log's families: what happened to the impressions offered to it, its size, and the
//! position-bias estimates fitted on it (`crate::clicks`), with their standard errors.
//!
//! The counts are the owned partitions' sums, like every other total. The estimates are this
//! replica's: fitted on the pairs of the partitions it owns, at most every
//! `clicks.refit_interval`, on a thread of their own (a fit of a million pairs takes seconds,
//! longer than a scrape may; the table is copied under the engine's lock, milliseconds, and
//! fitted after it is released). A scrape shows the last finished fit. For one figure over
//! every replica, merge their `/api/v1/clicks` with `rankpulse judgments --from-clicks --url
//! ... --models-out`.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use prometheus::core::{Collector, Desc};
use prometheus::proto::{MetricFamily, MetricType};

use super::prometheus::{counter, family, gauge, label};
use crate::clicks::named::NamedTable;
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
const REPLACED: (&str, &str) = (
    "rankpulse_click_log_queries_replaced_total",
    "Tracked queries replaced by busier ones (the head of the traffic moving).",
);
const EXAMINATION: (&str, &str) = (
    "rankpulse_click_examination",
    "Examination probability of each rank relative to rank 1 (the position-bias propensity), by estimator: pbm (the position-based click model by EM) or harvest (intervention harvesting from pairs shown at both ranks); over every segment, and per segment (segment label) when impressions carry one. This replica's partitions; refitted every clicks.refit_interval.",
);
const STDERR: (&str, &str) = (
    "rankpulse_click_examination_stderr",
    "Standard error of rankpulse_click_examination: pbm's from the observed information of every attractiveness and examination together (none for a rank without a click, or when no pair was shown at two ranks), harvest's over the pairs shown at both ranks.",
);
const HARVEST_PAIRS: (&str, &str) = (
    "rankpulse_click_harvest_pairs",
    "Pairs shown both at rank 1 and at this rank: the intervention set harvesting estimates from.",
);

/// Collects the click log's families. Registered only with `clicks.enabled`.
pub(super) struct ClickCollector {
    engine: SharedEngine,
    settings: FitSettings,
    /// The last finished fit, shared with the fitting thread.
    fits: Arc<Mutex<Fits>>,
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
            desc(EXAMINATION, &["rank", "estimator", "segment"]),
            desc(STDERR, &["rank", "estimator", "segment"]),
            desc(HARVEST_PAIRS, &["rank", "segment"]),
        ];
        ClickCollector { engine, settings, fits: Arc::new(Mutex::new(Fits::default())), descs }
    }

    /// The last fit's families; starts a refit on a thread of its own when that one is older
    /// than `clicks.refit_interval` and none is running.
    fn estimates(&self) -> Vec<MetricFamily> {
        let mut fits = self.fits.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let due = !fits.running && fits.started.is_none_or(|at| at.elapsed() >= self.settings.refit_interval);
        if due {
            let (engine, settings, shared) = (self.engine.clone(), self.settings, self.fits.clone());
            let spawned = std::thread::Builder::new().name("rankpulse-click-fit".into()).spawn(move || {
                let table = engine.lock().click_table().map(|(t, _)| t);
                let families = table.map(|t| fit_families(&t, settings)).unwrap_or_default();
                let mut fits = shared.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                fits.families = families;
                fits.running = false;
            });
            match spawned {
                Ok(_) => {
                    fits.running = true;
                    fits.started = Some(Instant::now());
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot start the click models' fit; the gauges keep the last one")
                }
            }
        }
        fits.families.clone()
    }
}

/// The fits of the click models for the gauges.
#[derive(Default)]
struct Fits {
    /// The last finished fit's families.
    families: Vec<MetricFamily>,
    /// When the last fit started: the next starts `clicks.refit_interval` later.
    started: Option<Instant>,
    /// A fit is running: no second one starts.
    running: bool,
}

impl Collector for ClickCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let Some(summary) = self.engine.lock().click_summary() else { return Vec::new() };
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
        families.extend(self.estimates());
        families.retain(|f| !f.get_metric().is_empty());
        families
    }
}

/// The estimates as gauges, over every segment (no `segment` label) and, when the traffic has
/// segments, per segment (`segment`; `none` for traffic without one). Ranks without an
/// estimate have no series.
fn fit_families(table: &NamedTable, settings: FitSettings) -> Vec<MetricFamily> {
    let (mut value, mut stderr, mut pairs) = (Vec::new(), Vec::new(), Vec::new());
    let mut add = |fitted: &Fitted, segment: Option<&str>| {
        let labels = |rank: usize, estimator: Option<&str>| {
            let mut l = vec![label("rank", &(rank + 1).to_string())];
            l.extend(estimator.map(|e| label("estimator", e)));
            l.extend(segment.map(|s| label("segment", if s.is_empty() { "none" } else { s })));
            l
        };
        for (rank, pbm) in fitted.pbm.relative_with_stderr().into_iter().enumerate() {
            if let Some((ratio, se)) = pbm {
                value.push(gauge(labels(rank, Some("pbm")), ratio));
                if let Some(se) = se {
                    stderr.push(gauge(labels(rank, Some("pbm")), se));
                }
            }
        }
        for (rank, harvest) in fitted.harvest.iter().enumerate() {
            if let Some(h) = harvest {
                value.push(gauge(labels(rank, Some("harvest")), h.ratio));
                if let Some(se) = h.stderr {
                    stderr.push(gauge(labels(rank, Some("harvest")), se));
                }
                pairs.push(gauge(labels(rank, None), h.pairs as f64));
            }
        }
    };
    add(&Fitted::fit(&table.across_segments().table, settings.em), None);
    let segments = table.segments();
    if segments.iter().any(|s| !s.is_empty()) {
        for segment in segments {
            add(&Fitted::fit(&table.of_segment(segment).table, settings.em), Some(segment));
        }
    }
    vec![
        family(EXAMINATION.0, EXAMINATION.1, MetricType::GAUGE, value),
        family(STDERR.0, STDERR.1, MetricType::GAUGE, stderr),
        family(HARVEST_PAIRS.0, HARVEST_PAIRS.1, MetricType::GAUGE, pairs),
    ]
}
