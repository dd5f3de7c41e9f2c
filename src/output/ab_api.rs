//! The A/B API's reports: an experiment's report over a window or cumulatively, or why there
//! is none (`GET /api/v1/experiments/{id}?window=`, served by `http.rs`). A client is told
//! which of these it met: an unknown window, an experiment no impression named, impressions
//! not final yet, a window not closed yet (and when it will close), or a closed window
//! without the experiment.

use axum::http::StatusCode;

use crate::accumulate::breakdown;
use crate::engine::Engine;
use crate::experiments::breakdown::{worst_queries, DimensionsReport, SrwQuerySet, Which};
use crate::experiments::{ExperimentReport, Span, CUMULATIVE};
use crate::time::EventTime;

/// Why the A/B API has no report to give. The message is the API's `error` field, so it names
/// what the caller can change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    /// The `window` query is neither a configured window size nor `cumulative`.
    #[error("unknown window {window:?}; one of {}", .known.join(", "))]
    UnknownWindow {
        /// The window asked for, quoted back.
        window: String,
        /// Every valid value, in configuration order and then `cumulative`: the fix is one of them.
        known: Vec<String>,
    },
    /// No impression has named the experiment, in the partitions this process holds.
    #[error("unknown experiment {experiment:?}: no impression has named it")]
    UnknownExperiment {
        /// The experiment asked for.
        experiment: String,
    },
    /// Impressions name the experiment, but none is final yet: the report starts once the
    /// first ones' attribution window has passed.
    #[error(
        "experiment {experiment:?} has no finalized impressions yet: an impression is final once its attribution window has passed"
    )]
    NotFinal {
        /// The experiment asked for.
        experiment: String,
    },
    /// No window of this size has closed yet, though the experiment has final impressions (the
    /// cumulative report has them): a window closes only once every impression in it is final,
    /// an attribution window after its end.
    #[error("experiment {experiment:?}: no {window} window has closed yet{}; until then the cumulative report (without `window`) holds every final impression", closing(.closes))]
    NotClosed {
        /// The experiment asked for.
        experiment: String,
        /// The window size asked for.
        window: String,
        /// When the first one closes, when there is a watermark to tell.
        closes: Option<WindowClose>,
    },
    /// The newest closed window of this size holds no final impression of the experiment.
    #[error("experiment {experiment:?} has no finalized impressions in the newest closed {window} window, {} to {}{}", rfc3339(*.start), rfc3339(*.end), closing(.closes))]
    NotInWindow {
        /// The experiment asked for.
        experiment: String,
        /// The window size asked for.
        window: String,
        /// The newest closed window's bounds, in event time.
        start: EventTime,
        /// See `start`.
        end: EventTime,
        /// When the next one closes, when there is a watermark to tell.
        closes: Option<WindowClose>,
    },
    /// `ab.dimensions` does not name `query`, or no final impression had a breakdown by it.
    #[error("experiment {experiment:?} has no per-query figures: {}", if *.configured { "its final impressions arrived before ab.dimensions named query" } else { "ab.dimensions does not name query" })]
    NoQueries {
        /// The experiment asked for.
        experiment: String,
        /// Whether `ab.dimensions` names `query` now.
        configured: bool,
    },
    /// The query set asked for compares a variant or metric the report does not.
    #[error("experiment {experiment:?} compares no variant {variant:?} on metric {metric:?}; variants: {}; metrics: see the report", .variants.join(", "))]
    NoComparison {
        /// The experiment asked for.
        experiment: String,
        /// The variant asked for.
        variant: String,
        /// The metric asked for.
        metric: String,
        /// The variants compared with the control.
        variants: Vec<String>,
    },
    /// The experiment has final impressions, and none has a breakdown: `ab.dimensions` names
    /// no field, or did not when they arrived.
    #[error("experiment {experiment:?} has no breakdown by dimension: {}", if *.configured { "its final impressions arrived before ab.dimensions named a field" } else { "ab.dimensions names no impression field" })]
    NoDimensions {
        /// The experiment asked for.
        experiment: String,
        /// Whether `ab.dimensions` names any field now.
        configured: bool,
    },
}

/// When a window closes: its end, and the watermark at which its impressions are all final
/// (both event time). The caller learns when to ask again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowClose {
    /// The window's end, exclusive.
    pub end: EventTime,
    /// The watermark that closes it: `end` plus the attribution window.
    pub at: EventTime,
}

impl WindowClose {
    /// The next window of size `size_index` to close, from the engine's watermark.
    fn next(engine: &Engine, size_index: usize) -> Option<WindowClose> {
        engine.next_window_close(size_index).map(|(end, at)| WindowClose { end, at })
    }
}

/// An event time in the API's messages, as in its reports.
fn rfc3339(ms: EventTime) -> String {
    crate::time::format_rfc3339_ms(ms)
}

/// The part of a message that says when a window closes.
fn closing(closes: &Option<WindowClose>) -> String {
    match closes {
        Some(c) => format!(
            "; the next ends at {} (event time) and closes when the watermark reaches {}, once its impressions are final",
            rfc3339(c.end),
            rfc3339(c.at)
        ),
        None => "; a window closes once the watermark passes its end by the attribution window".to_string(),
    }
}

impl ReportError {
    /// The HTTP status of this error: a malformed request, or nothing there (yet).
    pub fn status(&self) -> StatusCode {
        match self {
            ReportError::UnknownWindow { .. } => StatusCode::BAD_REQUEST,
            ReportError::UnknownExperiment { .. }
            | ReportError::NotFinal { .. }
            | ReportError::NotClosed { .. }
            | ReportError::NotInWindow { .. }
            | ReportError::NoDimensions { .. }
            | ReportError::NoQueries { .. }
            | ReportError::NoComparison { .. } => StatusCode::NOT_FOUND,
        }
    }
}

/// The report of `experiment` over `window` (a size label or `cumulative`). Without one, the
/// error says why: an experiment never seen, impressions not final yet, a window not closed
/// yet (and when it will), or a closed window the experiment had no traffic in.
pub fn experiment_report(engine: &Engine, experiment: &str, window: &str) -> Result<ExperimentReport, ReportError> {
    let name = || experiment.to_string();
    if window == CUMULATIVE {
        let reports = engine.experiment_reports(&engine.ab_cumulative(), Span::Cumulative);
        return match reports.into_iter().find(|r| r.experiment == experiment) {
            Some(report) => Ok(report),
            None if engine.groups().has_experiment(experiment) => Err(ReportError::NotFinal { experiment: name() }),
            None => Err(ReportError::UnknownExperiment { experiment: name() }),
        };
    }
    let windows = engine.window_count();
    let size_index = (0..windows).find(|&i| engine.window_label(i) == window).ok_or_else(|| {
        let mut known: Vec<String> = (0..windows).map(|i| engine.window_label(i).to_string()).collect();
        known.push(CUMULATIVE.to_string());
        ReportError::UnknownWindow { window: window.to_string(), known }
    })?;
    // A report when there is one, even of an experiment retired since (`labels.idle_expiry`).
    let unknown = !engine.groups().has_experiment(experiment);
    let closes = WindowClose::next(engine, size_index);
    let Some(closed) = engine.newest_closed().find(|w| w.size_index == size_index) else {
        if unknown {
            return Err(ReportError::UnknownExperiment { experiment: name() });
        }
        // The window that closes next holds every final impression (see
        // `Engine::next_window_close`), so it is the experiment's first only once it has one.
        let groups = engine.groups();
        let any_final = engine.ab_cumulative().iter().any(|(g, s)| s.impressions > 0 && groups.name(g).0 == experiment);
        if !any_final {
            return Err(ReportError::NotFinal { experiment: name() });
        }
        return Err(ReportError::NotClosed { experiment: name(), window: window.to_string(), closes });
    };
    let size_ms = engine.window_size_ms(size_index);
    let span = Span::Window { label: window, start: closed.start, size_ms };
    let report = engine.experiment_reports(&closed.groups, span).into_iter().find(|r| r.experiment == experiment);
    report.ok_or_else(|| {
        if unknown {
            return ReportError::UnknownExperiment { experiment: name() };
        }
        ReportError::NotInWindow {
            experiment: name(),
            window: window.to_string(),
            start: closed.start,
            end: closed.start.saturating_add(size_ms),
            closes,
        }
    })
}

/// The cumulative report of `experiment` per value of each dimension (`ab.dimensions`); without
/// one, the error says why, as [`experiment_report`]'s does, or that it has no breakdown.
pub fn dimensions_report(engine: &Engine, experiment: &str) -> Result<DimensionsReport, ReportError> {
    if let Some(report) = engine.dimensions_report(experiment, Which::Dimensions) {
        return Ok(report);
    }
    experiment_report(engine, experiment, CUMULATIVE)?;
    let configured = engine.ab().dimensions.iter().any(|d| d != breakdown::QUERY);
    Err(ReportError::NoDimensions { experiment: experiment.to_string(), configured })
}

/// The cumulative report of `experiment` per query (`ab.dimensions` naming `query`): the
/// dimensions report with the query dimension alone.
pub fn queries_report(engine: &Engine, experiment: &str) -> Result<DimensionsReport, ReportError> {
    if let Some(report) = engine.dimensions_report(experiment, Which::Queries) {
        return Ok(report);
    }
    experiment_report(engine, experiment, CUMULATIVE)?;
    let configured = engine.ab().dimensions.iter().any(|d| d == breakdown::QUERY);
    Err(ReportError::NoQueries { experiment: experiment.to_string(), configured })
}

/// The worst queries of `experiment`'s `variant` (default: the first compared) on `metric`
/// (default `ndcg@10`, else the first metric) as a Search Relevance Workbench query set, at
/// most `limit`.
pub fn worst_queries_set(
    engine: &Engine,
    experiment: &str,
    variant: Option<&str>,
    metric: Option<&str>,
    limit: usize,
) -> Result<SrwQuerySet, ReportError> {
    let report = queries_report(engine, experiment)?;
    let no_queries = || ReportError::NoQueries { experiment: experiment.to_string(), configured: true };
    let queries = report.queries.as_ref().ok_or_else(no_queries)?;
    let mut variants: Vec<String> = Vec::new();
    for h in &queries.heterogeneity {
        if !variants.contains(&h.variant) {
            variants.push(h.variant.clone());
        }
    }
    let keys = engine.layout().keys();
    let default_metric =
        keys.iter().map(|k| k.name()).find(|k| k == "ndcg@10").or_else(|| keys.first().map(|k| k.name()));
    let metric = metric.map(str::to_string).or(default_metric).unwrap_or_default();
    let variant = variant.map(str::to_string).or_else(|| variants.first().cloned()).unwrap_or_default();
    worst_queries(&report, queries, &variant, &metric, limit).ok_or(ReportError::NoComparison {
        experiment: experiment.to_string(),
        variant,
        metric,
        variants,
    })
}

#[cfg(test)]
pub(super) mod tests {
    use std::time::Instant;

    use super::*;
    use crate::config::Config;
    use crate::event::EventKind;

    /// Experiment `x`, two impressions per variant in the first minute of event time, with
    /// windows of `1m` and `5m`; `finish` closes them.
    pub(in crate::output) fn engine(finish: bool) -> Engine {
        let toml = "[metrics]\nwindows = [\"1m\", \"5m\"]\n";
        let mut e =
            Engine::new(&Config::from_toml_with_env(toml, "test", std::iter::empty()).unwrap()).without_past_limit();
        for (i, variant) in ["control", "treatment", "control", "treatment"].into_iter().enumerate() {
            let payload = format!(
                r#"{{"query_id":"q{i}","timestamp":{},"results":["a"],"experiment":"x","variant":"{variant}"}}"#,
                1_000 + i
            );
            e.process(EventKind::Impression, 0, payload.as_bytes(), Instant::now()).unwrap();
        }
        if finish {
            e.finish();
        }
        e
    }

    #[test]
    fn a_report_for_every_known_window_once_it_closed() {
        let e = engine(true);
        for window in ["cumulative", "1m", "5m"] {
            let report = experiment_report(&e, "x", window).unwrap();
            assert_eq!((report.experiment.as_str(), report.variants.len()), ("x", 2), "{window}");
        }
        assert_eq!(experiment_report(&e, "x", "1m").unwrap().id, "x/1m/1970-01-01T00:00:00Z");
    }

    #[test]
    fn an_unknown_window_is_a_bad_request_listing_the_valid_ones() {
        let error = experiment_report(&engine(true), "x", "2m").unwrap_err();
        assert_eq!(
            error,
            ReportError::UnknownWindow {
                window: "2m".into(),
                known: vec!["1m".into(), "5m".into(), "cumulative".into()]
            }
        );
        assert_eq!(error.status(), StatusCode::BAD_REQUEST);
        assert_eq!(error.to_string(), r#"unknown window "2m"; one of 1m, 5m, cumulative"#);
    }

    #[test]
    fn an_unknown_experiment_is_named_unknown() {
        for window in ["cumulative", "1m"] {
            let error = experiment_report(&engine(true), "nope", window).unwrap_err();
            assert_eq!(error.status(), StatusCode::NOT_FOUND);
            assert_eq!(error.to_string(), r#"unknown experiment "nope": no impression has named it"#, "{window}");
        }
    }

    #[test]
    fn a_window_not_closed_yet_says_when_it_closes() {
        // The impressions are at 00:00:01; the watermark trails them by the default
        // out-of-orderness, so none is final and no window closed.
        let mut open = engine(false);
        open.advance(Instant::now());
        let error = experiment_report(&open, "x", "cumulative").unwrap_err();
        assert_eq!(error, ReportError::NotFinal { experiment: "x".into() });
        assert_eq!(error.status(), StatusCode::NOT_FOUND);
        assert!(error.to_string().contains("no finalized impressions yet"), "{error}");
        assert_eq!(experiment_report(&open, "x", "1m").unwrap_err(), ReportError::NotFinal { experiment: "x".into() });
        // Once they are final (a watermark past 00:00:01 by the attribution window), the window
        // [00:00, 00:01) holds them and has not closed.
        let later = r#"{"query_id":"later","timestamp":1860000,"results":["a"],"experiment":"y","variant":"control"}"#;
        open.process(EventKind::Impression, 0, later.as_bytes(), Instant::now()).unwrap();
        open.advance(Instant::now());
        assert!(experiment_report(&open, "x", "cumulative").is_ok());
        let error = experiment_report(&open, "x", "1m").unwrap_err();
        assert_eq!(error.status(), StatusCode::NOT_FOUND);
        let ReportError::NotClosed { closes, .. } = &error else { panic!("{error:?}") };
        let closes = closes.as_ref().expect("the engine has a watermark");
        let text = error.to_string();
        assert_eq!((closes.end, closes.at), (60_000, 1_860_000), "{text}");
        assert_eq!(
            text,
            "experiment \"x\": no 1m window has closed yet; the next ends at 1970-01-01T00:01:00Z (event time) and closes when the watermark reaches 1970-01-01T00:31:00Z, once its impressions are final; until then the cumulative report (without `window`) holds every final impression"
        );
    }

    #[test]
    fn a_closed_window_without_the_experiment_names_its_bounds() {
        let mut e = engine(false);
        let late = r#"{"query_id":"late","timestamp":7200000,"results":["a"],"experiment":"y","variant":"control"}"#;
        e.process(EventKind::Impression, 0, late.as_bytes(), Instant::now()).unwrap();
        e.finish();
        // `y` is in the newest 1m window, 02:00 to 02:01; `x` is not.
        let error = experiment_report(&e, "x", "1m").unwrap_err();
        assert_eq!(
            error.to_string(),
            r#"experiment "x" has no finalized impressions in the newest closed 1m window, 1970-01-01T02:00:00Z to 1970-01-01T02:01:00Z; a window closes once the watermark passes its end by the attribution window"#
        );
        assert!(experiment_report(&e, "y", "1m").is_ok());
    }
}
