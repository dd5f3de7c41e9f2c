//! The HTTP server: `/metrics`, `/healthz`, `/readyz` and the A/B API `/api/v1/experiments[/{id}]`.
//!
//! Handlers that read the engine run on the blocking pool: a scrape or a report holds the
//! engine's lock for a while, and the async workers must stay free for other requests.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use prometheus::Registry;

use super::prometheus::{registry, render};
use crate::engine::{Engine, SharedEngine};
use crate::experiments::{ExperimentReport, Span, CUMULATIVE};
use crate::health::Health;
use crate::shutdown::Shutdown;

/// What every handler may need; cloned per request, so only shared handles.
#[derive(Clone)]
struct AppState {
    /// Built once at start: the collector in it is what `/metrics` renders.
    registry: Registry,
    /// Set by the source as partitions come and go; `/readyz` answers from it.
    health: Arc<Health>,
    /// For the A/B API, which reads reports straight from the accumulators.
    engine: SharedEngine,
}

/// Query of `GET /api/v1/experiments/{id}`.
#[derive(Debug, serde::Deserialize)]
struct ExperimentQuery {
    /// A configured window size (`5m`: its newest closed window) or `cumulative` (default).
    window: Option<String>,
}

fn json_error(status: StatusCode, message: String) -> axum::response::Response {
    (status, axum::Json(serde_json::json!({ "error": message }))).into_response()
}

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
    /// The window exists but holds no finalized impression of the experiment (yet): the
    /// experiment may be unknown, or its first window may still be open.
    #[error("experiment {experiment:?} has no finalized impressions in window {window:?}")]
    NoReport {
        /// The experiment asked for.
        experiment: String,
        /// The window it was looked up in.
        window: String,
    },
}

impl ReportError {
    /// The HTTP status of this error: a malformed request, or nothing there.
    pub fn status(&self) -> StatusCode {
        match self {
            ReportError::UnknownWindow { .. } => StatusCode::BAD_REQUEST,
            ReportError::NoReport { .. } => StatusCode::NOT_FOUND,
        }
    }
}

/// The report of `experiment` over `window` (a size label or `cumulative`).
pub fn experiment_report(engine: &Engine, experiment: &str, window: &str) -> Result<ExperimentReport, ReportError> {
    let reports = if window == CUMULATIVE {
        engine.experiment_reports(&engine.ab_cumulative(), Span::Cumulative)
    } else {
        let windows = engine.window_count();
        let size_index = (0..windows).find(|&i| engine.window_label(i) == window).ok_or_else(|| {
            let mut known: Vec<String> = (0..windows).map(|i| engine.window_label(i).to_string()).collect();
            known.push(CUMULATIVE.to_string());
            ReportError::UnknownWindow { window: window.to_string(), known }
        })?;
        match engine.newest_closed().find(|w| w.size_index == size_index) {
            Some(closed) => engine.experiment_reports(
                &closed.groups,
                Span::Window { label: window, start: closed.start, size_ms: engine.window_size_ms(size_index) },
            ),
            None => Vec::new(),
        }
    };
    reports
        .into_iter()
        .find(|r| r.experiment == experiment)
        .ok_or_else(|| ReportError::NoReport { experiment: experiment.to_string(), window: window.to_string() })
}

/// `GET /api/v1/experiments`: every experiment with its cumulative traffic and split check.
async fn list_experiments(State(state): State<AppState>) -> axum::response::Response {
    let engine = state.engine.clone();
    let listing = tokio::task::spawn_blocking(move || {
        let engine = engine.lock();
        let windows: Vec<&str> = std::iter::once(CUMULATIVE)
            .chain(engine.newest_closed().map(|w| engine.window_label(w.size_index)))
            .collect();
        let experiments: Vec<serde_json::Value> = engine
            .experiment_reports(&engine.ab_cumulative(), Span::Cumulative)
            .into_iter()
            .map(|r| {
                serde_json::json!({
                    "experiment": r.experiment,
                    "control": r.control,
                    "unit": r.unit,
                    "variants": r.variants.iter().map(|v| serde_json::json!({
                        "variant": v.variant, "impressions": v.impressions, "engaged": v.engaged,
                    })).collect::<Vec<_>>(),
                    "sample_ratio_p_value": r.sample_ratio.as_ref().map(|s| s.p_value),
                    "windows": windows,
                    "href": format!("/api/v1/experiments/{}", r.experiment),
                })
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
async fn get_experiment(
    State(state): State<AppState>,
    axum::extract::Path(experiment): axum::extract::Path<String>,
    axum::extract::Query(query): axum::extract::Query<ExperimentQuery>,
) -> axum::response::Response {
    let engine = state.engine.clone();
    let window = query.window.unwrap_or_else(|| CUMULATIVE.to_string());
    let report = tokio::task::spawn_blocking(move || {
        let engine = engine.lock();
        experiment_report(&engine, &experiment, &window).map(|r| serde_json::to_value(r).unwrap_or_default())
    })
    .await;
    match report {
        Ok(Ok(body)) => axum::Json(body).into_response(),
        Ok(Err(error)) => json_error(error.status(), error.to_string()),
        Err(e) => json_error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let body = tokio::task::spawn_blocking(move || render(&state.registry)).await.unwrap_or_default();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], body)
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(state): State<AppState>) -> (StatusCode, &'static str) {
    if state.health.is_ready() {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready: no partitions assigned or brokers unreachable\n")
    }
}

/// The HTTP server, bound and serving until shutdown.
pub struct HttpServer {
    /// The address actually bound: `http.listen` may ask for port 0, and the log and the tests
    /// need the real one.
    pub local_addr: SocketAddr,
    /// The serving task, awaited by [`HttpServer::join`] so in-flight scrapes can finish.
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl HttpServer {
    /// Binds `addr` and serves in a background task until `shutdown` fires.
    pub async fn start(
        addr: SocketAddr,
        engine: SharedEngine,
        health: Arc<Health>,
        shutdown: Shutdown,
    ) -> std::io::Result<HttpServer> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let local_addr = listener.local_addr()?;
        let app = Router::new()
            .route("/metrics", get(metrics))
            .route("/healthz", get(healthz))
            .route("/readyz", get(readyz))
            .route("/api/v1/experiments", get(list_experiments))
            .route("/api/v1/experiments/{id}", get(get_experiment))
            .with_state(AppState { registry: registry(engine.clone()), health, engine });
        let task = tokio::spawn(async move {
            axum::serve(listener, app).with_graceful_shutdown(async move { shutdown.wait().await }).await
        });
        Ok(HttpServer { local_addr, task })
    }

    /// Waits for the server to stop after shutdown.
    pub async fn join(self) -> std::io::Result<()> {
        self.task.await.unwrap_or(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::time::Instant;

    use super::*;
    use crate::config::Config;
    use crate::event::EventKind;

    /// Experiment `x`, two impressions per variant in the first minute of event time, with
    /// windows of `1m` and `5m`; `finish` closes them.
    fn engine(finish: bool) -> Engine {
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
    fn an_unknown_experiment_or_a_window_not_closed_yet_is_not_found() {
        let error = experiment_report(&engine(true), "nope", "cumulative").unwrap_err();
        assert_eq!(error.status(), StatusCode::NOT_FOUND);
        assert_eq!(error.to_string(), r#"experiment "nope" has no finalized impressions in window "cumulative""#);

        let open = engine(false);
        let error = experiment_report(&open, "x", "1m").unwrap_err();
        assert_eq!(error, ReportError::NoReport { experiment: "x".into(), window: "1m".into() });
        assert_eq!(error.to_string(), r#"experiment "x" has no finalized impressions in window "1m""#);
    }

    /// One `GET` over a plain socket: the status line's code and the body.
    fn get(addr: SocketAddr, path: &str) -> (u16, String) {
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        write!(stream, "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        let status = response.split(' ').nth(1).unwrap().parse().unwrap();
        let body = response.split_once("\r\n\r\n").unwrap().1.to_string();
        (status, body)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_api_answers_errors_as_json_with_their_status() {
        let shutdown = Shutdown::new();
        let health = Arc::new(Health::default());
        let engine = SharedEngine::new(engine(true));
        let server =
            HttpServer::start("127.0.0.1:0".parse().unwrap(), engine, health.clone(), shutdown.clone()).await.unwrap();
        let addr = server.local_addr;
        let answers = tokio::task::spawn_blocking(move || {
            let not_ready = get(addr, "/readyz");
            health.set_ready(true);
            [
                get(addr, "/api/v1/experiments/nope"),
                get(addr, "/api/v1/experiments/x?window=2m"),
                not_ready,
                get(addr, "/readyz"),
                get(addr, "/healthz"),
            ]
        })
        .await
        .unwrap();
        shutdown.trigger();
        server.join().await.unwrap();
        assert_eq!(
            answers,
            [
                (
                    404,
                    r#"{"error":"experiment \"nope\" has no finalized impressions in window \"cumulative\""}"#.into()
                ),
                (400, r#"{"error":"unknown window \"2m\"; one of 1m, 5m, cumulative"}"#.into()),
                (503, "not ready: no partitions assigned or brokers unreachable\n".into()),
                (200, "ready\n".into()),
                (200, "ok\n".into()),
            ]
        );
    }
}
