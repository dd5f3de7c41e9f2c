//! The experiment page: `/` (every experiment, its traffic and decisions, and the data's
//! quality), `/experiments/<name>` (one experiment's curves and figures), and `replay --html`'s
//! self-contained file with the same views.
//!
//! | file | does |
//! |---|---|
//! | `mod.rs` | [`PageData`]: what a page shows, copied from the engine under its lock (rendering happens after) |
//! | `html.rs` | the documents: the index, an experiment's page, the replay file, the data-quality panel |
//! | `experiment.rs` | one experiment's sections: decision, traffic split, drawn metrics, every metric, interleaving, judged |
//! | `breakdown.rs` | an experiment's breakdowns (`ab.dimensions`): a table per dimension with its verdicts, the query tables |
//! | `chart.rs` | line charts with interval bands as inline SVG, in a colour-blind-safe palette |
//! | `text.rs` | escaping, numbers for people, and figures carrying their exact value and place in the API's JSON |
//!
//! Every figure on a page is the A/B API's (`/api/v1/experiments/<name>`) at the same moment:
//! the cumulative report, drawn from the same code. Each number is text, carrying the exact
//! value and its place in the API's JSON (`data-value`, `data-figure`), which the browser test
//! compares. The curves are [`crate::experiments::history`]'s: the cumulative figures at each
//! look. Nothing loads from anywhere: no script, styles and SVG inline, and the served pages
//! say so in their `Content-Security-Policy`.

mod breakdown;
mod chart;
mod experiment;
mod html;
mod text;

use std::time::Instant;

use crate::config::Config;
use crate::engine::Engine;
use crate::event::{EventKind, RejectReason};
use crate::experiments::breakdown::{DimensionsReport, Which};
use crate::experiments::history::ExperimentHistory;
use crate::experiments::{ExperimentReport, Span};
use crate::join::EngagementTally;
use crate::metrics::{MetricKind, MetricLayout};
use crate::time::EventTime;

pub use html::{experiment_page, index_page, not_found, report_file};

/// The policy every page carries in a `<meta>` tag, the replay file's only one: nothing may
/// load, from anywhere, but the page's own inline styles and images; no script runs.
macro_rules! document_policy {
    () => {
        "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
    };
}

/// [`document_policy`] as a constant, for the `<meta>` tag.
const DOCUMENT_POLICY: &str = document_policy!();

/// What the served pages send as their `Content-Security-Policy` header: the document's policy,
/// and no framing (which only a header can say).
pub const CONTENT_SECURITY_POLICY: &str = concat!(document_policy!(), "; frame-ancestors 'none'");

/// Where the page comes from: a running daemon (refreshed) or a replay (a file, final).
#[derive(Debug, Clone)]
pub enum Origin {
    /// `serve` or `demo`: the page reloads itself.
    Live {
        /// How often the browser reloads the page, in seconds (`page.refresh`).
        refresh_seconds: u32,
        /// How far the watermark trails the wall clock, in milliseconds.
        watermark_lag_ms: Option<i64>,
    },
    /// `replay --html`: the input files, named in the title.
    Replay {
        /// The files replayed, as given.
        inputs: Vec<String>,
    },
}

/// The data-quality panel's figures, over every partition held.
#[derive(Debug, Clone, Default)]
pub struct DataQuality {
    /// Messages consumed: impressions, engagements.
    pub consumed: [u64; 2],
    /// Non-zero rejections: input (`impressions`, `engagements`), reason label, count.
    pub rejected: Vec<(&'static str, &'static str, u64)>,
    /// The engagements' outcomes (late, orphaned, ...).
    pub engagements: EngagementTally,
    /// Impressions whose attribution window had closed when they arrived.
    pub impressions_late: u64,
    /// Impressions whose query was already pending.
    pub impressions_duplicate: u64,
    /// Impressions finalized after their window had closed (in the cumulative figures only).
    pub window_late_impressions: u64,
    /// The least partition watermark: everything before it is final.
    pub watermark: Option<EventTime>,
}

/// What `[page]` asks for, resolved against the configured metrics once at start.
#[derive(Debug, Clone)]
pub struct PageSettings {
    /// The metric keys drawn as curves, in order ([`crate::config::PageConfig::drawn_metrics`]).
    pub drawn_metrics: Vec<String>,
    /// How often a live page reloads itself, in seconds.
    pub refresh_seconds: u32,
}

impl PageSettings {
    /// From the configuration: `[page]`, and the read-out's metrics (guardrails, CUPED) that the
    /// default draws.
    pub fn from_config(cfg: &Config, layout: &MetricLayout) -> PageSettings {
        let keys: Vec<String> = layout.keys().iter().map(crate::metrics::MetricKey::name).collect();
        let read_out: [&[String]; 2] = [&cfg.ab.guardrails, &cfg.ab.cuped.metrics];
        PageSettings {
            drawn_metrics: cfg.page.drawn_metrics(&keys, &read_out),
            refresh_seconds: cfg.page.refresh_seconds(),
        }
    }
}

/// Everything a page shows, copied out of the engine.
#[derive(Debug)]
pub struct PageData {
    /// The cumulative report of every experiment, as the A/B API gives it.
    pub reports: Vec<ExperimentReport>,
    /// Per report (same order), its history of looks, when it has one.
    pub histories: Vec<Option<ExperimentHistory>>,
    /// Per report (same order), its breakdown by dimension and query, when `ab.dimensions`
    /// names any field.
    pub breakdowns: Vec<Option<DimensionsReport>>,
    /// The metric keys drawn as curves.
    pub drawn_metrics: Vec<String>,
    /// Metric keys for which lower is better (the abandonment rate): a decision's direction.
    pub lower_is_better: Vec<String>,
    /// The data-quality panel.
    pub quality: DataQuality,
    /// Live or replay.
    pub origin: Origin,
    /// When the page was made (wall clock, RFC 3339).
    pub generated: String,
}

impl PageData {
    /// The pages' figures at this moment: of a live daemon, or with `replay_inputs` (the files
    /// named on the page) of a finished replay. `only` limits the reports and histories to one
    /// experiment (its page needs no other); `None` takes them all.
    pub fn gather(
        engine: &Engine,
        settings: &PageSettings,
        replay_inputs: Option<Vec<String>>,
        only: Option<&str>,
    ) -> PageData {
        let mut reports = engine.experiment_reports(&engine.ab_cumulative(), Span::Cumulative);
        if let Some(name) = only {
            reports.retain(|r| r.experiment == name);
        }
        let histories = reports.iter().map(|r| engine.history().experiment(&r.experiment).cloned()).collect();
        // The index shows no breakdown: only an experiment's page and the replay file do, and a
        // breakdown of 500 queries costs as many reports.
        let shown = only.is_some() || replay_inputs.is_some();
        let breakdowns = reports
            .iter()
            .map(|r| shown.then(|| engine.dimensions_report(&r.experiment, Which::All)).flatten())
            .collect();
        let lower_is_better = engine
            .layout()
            .keys()
            .iter()
            .filter(|k| k.kind == MetricKind::Abandonment)
            .map(crate::metrics::MetricKey::name)
            .collect();
        let counters = engine.counters();
        let mut rejected = Vec::new();
        for (kind, counts) in EventKind::ALL.iter().zip(counters.rejected.iter()) {
            let input = match kind {
                EventKind::Impression => "impressions",
                EventKind::Engagement => "engagements",
            };
            for (reason, &count) in RejectReason::ALL.iter().zip(counts.iter()) {
                if count > 0 {
                    rejected.push((input, reason.label(), count));
                }
            }
        }
        let quality = DataQuality {
            consumed: counters.consumed,
            rejected,
            engagements: engine.engagement_tally(),
            impressions_late: counters.impressions_late,
            impressions_duplicate: counters.impressions_duplicate,
            window_late_impressions: engine.window_late_impressions(),
            watermark: engine.watermark(),
        };
        let origin = match replay_inputs {
            None => Origin::Live {
                refresh_seconds: settings.refresh_seconds,
                watermark_lag_ms: engine.watermark_lag_ms(Instant::now()),
            },
            Some(inputs) => Origin::Replay { inputs },
        };
        let generated = crate::time::format_rfc3339_ms(chrono::Utc::now().timestamp_millis() / 1000 * 1000);
        PageData {
            reports,
            histories,
            breakdowns,
            drawn_metrics: settings.drawn_metrics.clone(),
            lower_is_better,
            quality,
            origin,
            generated,
        }
    }
}
