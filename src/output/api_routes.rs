//! The A/B API's handlers, served by `http.rs`: `/api/v1/experiments` (every experiment's
//! traffic), `/api/v1/experiments/{id}` (a report), `.../dimensions` and `.../queries` (the
//! breakdowns), `.../queries/srw` (the worst queries as a Search Relevance Workbench query set)
//! and `/api/v1/clicks` (the click log). Each reads the engine on the blocking pool (see
//! `http.rs`); the reports and their errors are `ab_api.rs`'s.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;

use super::ab_api::{dimensions_report, experiment_report, queries_report, worst_queries_set, ReportError};
use super::http::AppState;
use crate::accumulate::breakdown;
use crate::experiments::{Span, CUMULATIVE};

/// Query of `GET /api/v1/experiments/{id}`.
#[derive(Debug, serde::Deserialize)]
pub(super) struct ExperimentQuery {
    /// A configured window size (`5m`: its newest closed window) or `cumulative` (default).
    window: Option<String>,
}

pub(super) fn json_error(status: StatusCode, message: String) -> axum::response::Response {
    (status, axum::Json(serde_json::json!({ "error": message }))).into_response()
}

/// A report read under the engine's lock on the blocking pool, as JSON, or its error with the
/// error's status.
async fn answer<T: serde::Serialize>(
    state: &AppState,
    read: impl FnOnce(&crate::engine::Engine) -> Result<T, ReportError> + Send + 'static,
) -> axum::response::Response {
    let engine = state.engine.clone();
    let report =
        tokio::task::spawn_blocking(move || read(&engine.lock()).map(|r| serde_json::to_value(r).unwrap_or_default()))
            .await;
    match report {
        Ok(Ok(body)) => axum::Json(body).into_response(),
        Ok(Err(error)) => json_error(error.status(), error.to_string()),
        Err(e) => json_error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// `GET /api/v1/experiments`: every experiment with its cumulative traffic (and that of its
/// interleaved comparisons) and split check.
pub(super) async fn list_experiments(State(state): State<AppState>) -> axum::response::Response {
    let engine = state.engine.clone();
    let listing = tokio::task::spawn_blocking(move || {
        let engine = engine.lock();
        let dimensions = &engine.ab().dimensions;
        let has_dimensions = dimensions.iter().any(|d| d != breakdown::QUERY);
        let has_queries = dimensions.iter().any(|d| d == breakdown::QUERY);
        let windows: Vec<&str> = std::iter::once(CUMULATIVE)
            .chain(engine.newest_closed().map(|w| engine.window_label(w.size_index)))
            .collect();
        let experiments: Vec<serde_json::Value> = engine
            .experiment_reports(&engine.ab_cumulative(), Span::Cumulative)
            .into_iter()
            .map(|r| {
                let mut entry = serde_json::json!({
                    "experiment": r.experiment,
                    "control": r.control,
                    "unit": r.unit,
                    "variants": r.variants.iter().map(|v| serde_json::json!({
                        "variant": v.variant, "impressions": v.impressions, "engaged": v.engaged,
                    })).collect::<Vec<_>>(),
                    "sample_ratio_p_value": r.sample_ratio.as_ref().map(|s| s.p_value),
                    "sequential_sample_ratio_p_value": r.sample_ratio.as_ref().and_then(|s| s.sequential_p_value),
                    "windows": windows,
                    "href": format!("/api/v1/experiments/{}", r.experiment),
                });
                if has_dimensions {
                    entry["dimensions_href"] = format!("/api/v1/experiments/{}/dimensions", r.experiment).into();
                }
                if has_queries {
                    entry["queries_href"] = format!("/api/v1/experiments/{}/queries", r.experiment).into();
                }
                // Interleaved comparisons, when the experiment has any: their traffic.
                if !r.interleaving.is_empty() {
                    entry["interleaving"] = r.interleaving.iter().map(|il| serde_json::json!({
                        "variant": il.variant, "rankers": il.rankers, "impressions": il.impressions, "engaged": il.engaged,
                    })).collect();
                }
                entry
            })
            .collect();
        serde_json::json!({ "experiments": experiments })
    })
    .await;
    match listing {
        Ok(body) => axum::Json(body).into_response(),
        Err(e) => json_error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// `GET /api/v1/experiments/{id}?window=5m`: the full report.
pub(super) async fn get_experiment(
    State(state): State<AppState>,
    axum::extract::Path(experiment): axum::extract::Path<String>,
    axum::extract::Query(query): axum::extract::Query<ExperimentQuery>,
) -> axum::response::Response {
    let window = query.window.unwrap_or_else(|| CUMULATIVE.to_string());
    answer(&state, move |engine| experiment_report(engine, &experiment, &window)).await
}

/// `GET /api/v1/experiments/{id}/dimensions`: the cumulative report per dimension value.
pub(super) async fn get_dimensions(
    State(state): State<AppState>,
    axum::extract::Path(experiment): axum::extract::Path<String>,
) -> axum::response::Response {
    answer(&state, move |engine| dimensions_report(engine, &experiment)).await
}

/// `GET /api/v1/experiments/{id}/queries`: the cumulative report per query.
pub(super) async fn get_queries(
    State(state): State<AppState>,
    axum::extract::Path(experiment): axum::extract::Path<String>,
) -> axum::response::Response {
    answer(&state, move |engine| queries_report(engine, &experiment)).await
}

/// Query of `GET /api/v1/experiments/{id}/queries/srw`.
#[derive(Debug, serde::Deserialize)]
pub(super) struct WorstQueriesQuery {
    /// The variant whose worst queries are listed; default the first compared with the control.
    variant: Option<String>,
    /// The metric they are worst on; default `ndcg@10` (else the first metric).
    metric: Option<String>,
    /// At most this many queries (1 to 10,000); default 50.
    limit: Option<usize>,
}

/// `GET /api/v1/experiments/{id}/queries/srw`: the worst queries as a Search Relevance
/// Workbench query set, to `PUT _plugins/_search_relevance/query_sets` for offline judging.
pub(super) async fn get_worst_queries(
    State(state): State<AppState>,
    axum::extract::Path(experiment): axum::extract::Path<String>,
    axum::extract::Query(query): axum::extract::Query<WorstQueriesQuery>,
) -> axum::response::Response {
    let limit = query.limit.unwrap_or(50);
    if !(1..=10_000).contains(&limit) {
        return json_error(StatusCode::BAD_REQUEST, format!("limit {limit} must lie between 1 and 10000"));
    }
    answer(&state, move |engine| {
        worst_queries_set(engine, &experiment, query.variant.as_deref(), query.metric.as_deref(), limit)
    })
    .await
}

/// `GET /api/v1/clicks`: the click log of the partitions this replica owns, as click table
/// lines (`crate::clicks::named`), which `rankpulse judgments --from-clicks --url` merges over
/// replicas. 404 when `clicks.enabled` is off. The copy is made under the engine's lock: a
/// log of 100,000 pairs takes milliseconds.
pub(super) async fn clicks(State(state): State<AppState>) -> axum::response::Response {
    let engine = state.engine.clone();
    let table = tokio::task::spawn_blocking(move || engine.lock().click_table().map(|(t, _)| t)).await;
    match table {
        Ok(Some(table)) => ([(header::CONTENT_TYPE, "application/x-ndjson")], table.to_lines()).into_response(),
        Ok(None) => json_error(StatusCode::NOT_FOUND, "the click log is off: set clicks.enabled = true".to_string()),
        Err(e) => json_error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}
