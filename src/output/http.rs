//! The HTTP server: `/metrics`, `/healthz`, `/readyz`, the experiment page `/` and
//! `/experiments/{name}` (see `page/`), and the A/B API `/api/v1/...` (its handlers:
//! `api_routes.rs`; its reports and errors: `ab_api.rs`), over plain
//! HTTP or HTTPS (`[http.tls_server_config]`, see `tls.rs`), all but the probes behind
//! credentials when `[http]` configures some (see `auth.rs`).
//!
//! Handlers that read the engine run on the blocking pool: a scrape or a report holds the
//! engine's lock for a while, and the async workers must stay free for other requests.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use prometheus::Registry;

use super::api_routes::{
    clicks, get_dimensions, get_experiment, get_queries, get_worst_queries, json_error, list_experiments,
};
use super::auth::{require_credentials, Auth};
use super::page;
use super::prometheus::{registry, render};
use super::tls::ReloadingTls;
use crate::config::{ConfigError, HttpConfig};
use crate::engine::SharedEngine;
use crate::health::Health;
use crate::shutdown::Shutdown;

/// What every handler may need; cloned per request, so only shared handles.
#[derive(Clone)]
pub(super) struct AppState {
    /// Built once at start: the collector in it is what `/metrics` renders.
    registry: Registry,
    /// Set by the source as partitions come and go; `/readyz` answers from it.
    health: Arc<Health>,
    /// For the A/B API, which reads reports straight from the accumulators.
    pub(super) engine: SharedEngine,
    /// The Avro and Protobuf schemas, when an input has them: `/readyz` tells a registry
    /// outage.
    schemas: Option<Arc<crate::schemas::Schemas>>,
    /// `[page]`: the experiment page's drawn metrics and refresh.
    page: Arc<page::PageSettings>,
}

/// An HTML page: it may load nothing from anywhere ([`page::CONTENT_SECURITY_POLICY`]), and is
/// never cached, as it is the figures of this moment.
fn html(status: StatusCode, body: String) -> axum::response::Response {
    let headers = [
        (header::CONTENT_TYPE, "text/html; charset=utf-8"),
        (header::CONTENT_SECURITY_POLICY, page::CONTENT_SECURITY_POLICY),
        (header::CACHE_CONTROL, "no-store"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    ];
    (status, headers, body).into_response()
}

/// The page's figures, copied under the engine's lock on the blocking pool; rendered after.
async fn page_data(state: &AppState, only: Option<String>) -> Result<page::PageData, String> {
    let (engine, settings) = (state.engine.clone(), state.page.clone());
    tokio::task::spawn_blocking(move || page::PageData::gather(&engine.lock(), &settings, None, only.as_deref()))
        .await
        .map_err(|e| e.to_string())
}

/// `GET /`: every experiment, its traffic and decisions, and the data's quality.
async fn index_page(State(state): State<AppState>) -> axum::response::Response {
    match page_data(&state, None).await {
        Ok(data) => html(StatusCode::OK, page::index_page(&data)),
        Err(e) => json_error(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

/// `GET /experiments/{name}`: one experiment's curves and figures; 404 with a link back when it
/// has no finalized impressions.
async fn experiment_page(
    State(state): State<AppState>,
    axum::extract::Path(experiment): axum::extract::Path<String>,
) -> axum::response::Response {
    match page_data(&state, Some(experiment.clone())).await {
        Ok(data) => match page::experiment_page(&data, &experiment) {
            Some(body) => html(StatusCode::OK, body),
            None => html(StatusCode::NOT_FOUND, page::not_found(&experiment, state.page.refresh_seconds)),
        },
        Err(e) => json_error(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let body = tokio::task::spawn_blocking(move || render(&state.registry)).await.unwrap_or_default();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], body)
}

async fn healthz() -> &'static str {
    "ok\n"
}

/// Ready while the consumer has partitions and reaches the brokers. A Schema Registry outage
/// is told, not counted against readiness: cached schema ids are still decoded, and a
/// registry outage must not take every replica out of service (or stall a rollout) at once;
/// `rankpulse_schema_registry_up` and its alert are for paging.
async fn readyz(State(state): State<AppState>) -> (StatusCode, &'static str) {
    let registry_down = state.schemas.as_ref().is_some_and(|s| s.registry_down());
    match (state.health.is_ready(), registry_down) {
        (true, false) => (StatusCode::OK, "ready\n"),
        (true, true) => (
            StatusCode::OK,
            "ready; the schema registry is unreachable: cached schema ids are decoded, new ones are rejected as schema_unavailable\n",
        ),
        (false, _) => (StatusCode::SERVICE_UNAVAILABLE, "not ready: no partitions assigned or brokers unreachable\n"),
    }
}

/// How long a client may take over the TLS handshake before its connection is dropped.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long an HTTPS connection may wait for a request's headers, idle keep-alive included
/// (hyper's default): longer than a 15 s scrape interval, so Prometheus keeps its connection
/// and does not pay a handshake per scrape, yet a client that never finishes is let go.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// `[http]`'s TLS and credentials, loaded: every file read and checked.
pub struct HttpSecurity {
    /// The certificate, key and client CA, reloaded when they change; `None`: plain HTTP.
    tls: Option<ReloadingTls>,
    /// The check of `/metrics` and `/api/...`; `None`: open.
    auth: Option<Arc<Auth>>,
}

impl HttpSecurity {
    /// Reads every file `[http]` names (certificate, key, client CA, bearer token) and checks
    /// it parses; an error names the key and the file, never its content. `serve`, `demo` and
    /// `check-config` call it, so a broken file is found before the daemon starts.
    pub fn load(http: &HttpConfig) -> Result<HttpSecurity, ConfigError> {
        let tls =
            if http.tls_server_config.enabled() { Some(ReloadingTls::load(&http.tls_server_config)?) } else { None };
        let auth = Auth::load(http)?.map(Arc::new);
        if tls.is_none() && auth.is_some() {
            tracing::warn!("[http] asks for credentials over plain HTTP: anyone on the network path can read them; set [http.tls_server_config]");
        }
        Ok(HttpSecurity { tls, auth })
    }

    /// `https` or `http`.
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }

    /// What the start-up log says about it, with no secret in it: the scheme's protection
    /// and the credentials asked for.
    pub fn describe(&self) -> String {
        let credentials = match &self.auth {
            Some(auth) => format!("/metrics, the page and /api/ ask for {}", auth.describe()),
            None => "no credentials asked for".to_string(),
        };
        match &self.tls {
            Some(_) => format!("TLS; {credentials}"),
            None => format!("plain HTTP; {credentials}"),
        }
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
        security: HttpSecurity,
        page: page::PageSettings,
        engine: SharedEngine,
        health: Arc<Health>,
        shutdown: Shutdown,
    ) -> std::io::Result<HttpServer> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let local_addr = listener.local_addr()?;
        let registry = registry(engine.clone());
        let schemas = engine.lock().preparer().decoders().schemas().cloned();
        if let Some(settings) = engine.lock().click_fit_settings() {
            registry
                .register(Box::new(super::click_families::ClickCollector::new(engine.clone(), settings)))
                .expect("the click collector registers once");
        }
        if let Some(schemas) = &schemas {
            registry
                .register(Box::new(super::schema_families::SchemaCollector::new(schemas.clone())))
                .expect("the schema collector registers once");
        }
        let protected = Router::new()
            .route("/metrics", get(metrics))
            .route("/", get(index_page))
            .route("/experiments/{id}", get(experiment_page))
            .route("/api/v1/experiments", get(list_experiments))
            .route("/api/v1/experiments/{id}", get(get_experiment))
            .route("/api/v1/experiments/{id}/dimensions", get(get_dimensions))
            .route("/api/v1/experiments/{id}/queries", get(get_queries))
            .route("/api/v1/experiments/{id}/queries/srw", get(get_worst_queries))
            .route("/api/v1/clicks", get(clicks));
        let protected = match &security.auth {
            Some(auth) => {
                registry.register(Box::new(auth.refused_counter())).expect("the refusal counter registers once");
                // `route_layer`: only requests that match a protected route are checked, so an
                // unknown path is a 404 with or without credentials.
                protected.route_layer(axum::middleware::from_fn_with_state(auth.clone(), require_credentials))
            }
            None => protected,
        };
        let app = Router::new()
            .merge(protected)
            .route("/healthz", get(healthz))
            .route("/readyz", get(readyz))
            .with_state(AppState { registry, health, engine, schemas, page: Arc::new(page) });
        let task = match security.tls {
            None => tokio::spawn(async move {
                axum::serve(listener, app).with_graceful_shutdown(async move { shutdown.wait().await }).await
            }),
            Some(tls) => tokio::spawn(serve_tls(listener, tls, app, shutdown)),
        };
        Ok(HttpServer { local_addr, task })
    }

    /// Waits for the server to stop after shutdown.
    pub async fn join(self) -> std::io::Result<()> {
        self.task.await.unwrap_or(Ok(()))
    }
}

/// The HTTPS accept loop: each connection in its own task, the TLS handshake (with the
/// certificate current at that moment) under a timeout, then HTTP/1.1 with the router as the
/// service. On shutdown no connection is accepted any more, handshakes under way are dropped,
/// and requests in flight finish before the task ends.
async fn serve_tls(
    listener: tokio::net::TcpListener,
    tls: ReloadingTls,
    app: Router,
    shutdown: Shutdown,
) -> std::io::Result<()> {
    let graceful = GracefulShutdown::new();
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors and the like: wait instead of spinning.
                    tracing::warn!(%error, "accepting an HTTPS connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = shutdown.wait() => break,
        };
        let acceptor = tls.acceptor();
        let service = TowerToHyperService::new(app.clone());
        let watcher = graceful.watcher();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let handshake = tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream));
            let stream = tokio::select! {
                done = handshake => match done {
                    Ok(Ok(stream)) => stream,
                    // A client without an acceptable certificate, a port scanner, a plain-HTTP
                    // request: frequent and not the server's fault, so not above debug.
                    Ok(Err(error)) => return tracing::debug!(%peer, %error, "TLS handshake failed"),
                    Err(_) => return tracing::debug!(%peer, "TLS handshake timed out"),
                },
                _ = shutdown.wait() => return,
            };
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            if let Err(error) = watcher.watch(connection).await {
                tracing::debug!(%peer, %error, "HTTPS connection ended with an error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::time::Instant;

    use super::super::ab_api::tests::engine;
    use super::*;
    use crate::config::Config;
    use crate::engine::Engine;

    /// The default `[page]`, over the default metrics.
    fn settings() -> page::PageSettings {
        let cfg = Config::default();
        page::PageSettings::from_config(&cfg, Engine::new(&cfg).layout())
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
    async fn the_page_is_html_that_may_load_nothing_and_names_a_missing_experiment() {
        let shutdown = Shutdown::new();
        let engine = SharedEngine::new(engine(true));
        let security = HttpSecurity::load(&HttpConfig::default()).unwrap();
        let health = Arc::new(Health::default());
        let server =
            HttpServer::start("127.0.0.1:0".parse().unwrap(), security, settings(), engine, health, shutdown.clone())
                .await
                .unwrap();
        let addr = server.local_addr;
        let raw = move |path: &'static str| {
            let mut stream = std::net::TcpStream::connect(addr).unwrap();
            write!(stream, "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").unwrap();
            let mut response = String::new();
            stream.read_to_string(&mut response).unwrap();
            response
        };
        let pages =
            tokio::task::spawn_blocking(move || [raw("/"), raw("/experiments/x"), raw("/experiments/%3Cnope%3E")])
                .await
                .unwrap();
        shutdown.trigger();
        server.join().await.unwrap();
        for page in &pages[..2] {
            let (head, body) = page.split_once("\r\n\r\n").unwrap();
            let head = head.to_lowercase();
            assert!(head.starts_with("http/1.1 200"), "{head}");
            assert!(head.contains("content-type: text/html; charset=utf-8"), "{head}");
            assert!(head.contains(&format!("content-security-policy: {}", page::CONTENT_SECURITY_POLICY)), "{head}");
            assert!(head.contains("cache-control: no-store"), "{head}");
            assert!(body.starts_with("<!DOCTYPE html>") && !body.contains("<script"), "{body}");
        }
        assert!(pages[0].contains(r#"<a href="experiments/x">x</a>"#), "{}", pages[0]);
        assert!(pages[1].contains(r#"data-experiment="x""#), "{}", pages[1]);
        // An unknown experiment: 404, its name escaped.
        assert!(pages[2].starts_with("HTTP/1.1 404"), "{}", pages[2]);
        assert!(pages[2].contains("&lt;nope&gt;") && !pages[2].contains("<nope>"), "{}", pages[2]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_api_answers_errors_as_json_with_their_status() {
        let shutdown = Shutdown::new();
        let health = Arc::new(Health::default());
        let engine = SharedEngine::new(engine(true));
        let security = HttpSecurity::load(&HttpConfig::default()).unwrap();
        let server = HttpServer::start(
            "127.0.0.1:0".parse().unwrap(),
            security,
            settings(),
            engine,
            health.clone(),
            shutdown.clone(),
        )
        .await
        .unwrap();
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
                (404, r#"{"error":"unknown experiment \"nope\": no impression has named it"}"#.into()),
                (400, r#"{"error":"unknown window \"2m\"; one of 1m, 5m, cumulative"}"#.into()),
                (503, "not ready: no partitions assigned or brokers unreachable\n".into()),
                (200, "ready\n".into()),
                (200, "ok\n".into()),
            ]
        );
    }

    /// One GET over HTTPS trusting `ca`: the status code.
    fn https_get(addr: SocketAddr, ca: &std::path::Path, path: &str) -> std::io::Result<u16> {
        use rustls_pki_types::pem::PemObject;
        let mut roots = rustls::RootCertStore::empty();
        roots.add(rustls_pki_types::CertificateDer::from_pem_file(ca).unwrap()).unwrap();
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
        let connection = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
        let mut stream = rustls::StreamOwned::new(connection, std::net::TcpStream::connect(addr)?);
        write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
        let mut response = Vec::new();
        match stream.read_to_end(&mut response) {
            Err(e) if e.kind() != std::io::ErrorKind::UnexpectedEof || response.is_empty() => return Err(e),
            _ => {}
        }
        let text = String::from_utf8_lossy(&response);
        Ok(text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0))
    }

    /// Over TLS, shutdown waits for the request in flight: an API request stuck behind the
    /// engine's lock when shutdown fires is still answered, and only then does the server stop.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn over_tls_a_request_in_flight_at_shutdown_is_answered() {
        let dir = tempfile::tempdir().unwrap();
        let pki = super::super::tls::certs::TestPki::new(dir.path());
        let mut http = HttpConfig::default();
        http.tls_server_config.cert_file = pki.server_cert.to_str().unwrap().into();
        http.tls_server_config.key_file = pki.server_key.to_str().unwrap().into();
        let security = HttpSecurity::load(&http).unwrap();
        assert_eq!((security.scheme(), security.describe().as_str()), ("https", "TLS; no credentials asked for"));
        let shutdown = Shutdown::new();
        let engine = SharedEngine::new(engine(true));
        let health = Arc::new(Health::default());
        let server = HttpServer::start(
            "127.0.0.1:0".parse().unwrap(),
            security,
            settings(),
            engine.clone(),
            health,
            shutdown.clone(),
        )
        .await
        .unwrap();
        let addr = server.local_addr;
        let ca = pki.ca_cert.clone();
        assert_eq!(tokio::task::spawn_blocking(move || https_get(addr, &ca, "/healthz")).await.unwrap().unwrap(), 200);

        let (locked, is_locked) = std::sync::mpsc::channel();
        let holder = std::thread::spawn(move || {
            let _engine = engine.lock();
            locked.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(800));
        });
        is_locked.recv().unwrap();
        let ca = pki.ca_cert.clone();
        let request = tokio::task::spawn_blocking(move || https_get(addr, &ca, "/api/v1/experiments"));
        tokio::time::sleep(Duration::from_millis(300)).await;
        shutdown.trigger();
        let started = Instant::now();
        server.join().await.unwrap();
        let drained = started.elapsed();
        assert_eq!(request.await.unwrap().unwrap(), 200, "the request in flight is answered");
        assert!(drained >= Duration::from_millis(300), "the server waited for it: {drained:?}");
        holder.join().unwrap();
        assert!(std::net::TcpStream::connect(addr).is_err(), "no longer listening");
    }
}
