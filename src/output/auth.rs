//! Credentials for `/metrics`, the experiment page and `/api/...`: `Authorization: Basic` checked against
//! `http.basic_auth_users`' bcrypt hashes, or `Authorization: Bearer` against the token in
//! `http.bearer_token_file`. Either is accepted when both are configured.
//!
//! - bcrypt is slow on purpose (about 50 ms at cost 10), so a verification runs on the blocking
//!   pool, at most as many at once as there are cores, and a success is remembered, keyed by a
//!   salted SHA-256 of user, password and hash (as Prometheus' exporter-toolkit caches them):
//!   a scrape every 15 s pays bcrypt once, not every time.
//! - An unknown user costs one bcrypt verification too, against a dummy hash of the same cost,
//!   so the time of a refusal does not tell which user names exist.
//! - The bearer token is compared in constant time (SHA-256 digests of both sides, so not even
//!   its length leaks), and the file is re-read when it changes.
//! - No credential, hash or token is ever logged: a refusal is counted by reason on
//!   `rankpulse_http_unauthorized_requests_total`, and logged at debug level with its path only.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use prometheus::{IntCounterVec, Opts};
use subtle::ConstantTimeEq;
use tokio::sync::Semaphore;

use super::watch::WatchedFiles;
use crate::config::{ConfigError, HttpConfig};

/// Successful verifications remembered at most; beyond it the memory starts over (a scraper
/// or two and a few API users need a handful).
const MAX_REMEMBERED: usize = 1024;

/// Why a request was refused: the `reason` label of the counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    /// No `Authorization` header.
    Missing,
    /// A header that is not `Basic` with base64 `user:password` nor `Bearer` with a token.
    Malformed,
    /// Well-formed credentials that are wrong: unknown user, wrong password, wrong token, or a
    /// scheme that is not configured.
    Invalid,
}

impl Refusal {
    const ALL: [Refusal; 3] = [Refusal::Missing, Refusal::Malformed, Refusal::Invalid];

    fn label(self) -> &'static str {
        match self {
            Refusal::Missing => "missing",
            Refusal::Malformed => "malformed",
            Refusal::Invalid => "invalid",
        }
    }
}

/// The credentials of an `Authorization` header.
#[derive(PartialEq, Eq)]
pub(super) enum Credentials {
    Basic { user: String, password: String },
    Bearer(String),
}

/// Shows the user name only, so that a test failure or a stray `{:?}` prints no secret.
impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credentials::Basic { user, .. } => write!(f, "Basic {{ user: {user:?}, password: (not shown) }}"),
            Credentials::Bearer(_) => write!(f, "Bearer (not shown)"),
        }
    }
}

/// Parses an `Authorization` header value: the scheme case-insensitively (RFC 9110), then
/// base64 `user:password` (RFC 7617; the password may hold `:`) or a bearer token.
pub(super) fn parse_authorization(value: &[u8]) -> Result<Credentials, Refusal> {
    let value = std::str::from_utf8(value).map_err(|_| Refusal::Malformed)?.trim();
    let (scheme, rest) = value.split_once([' ', '\t']).ok_or(Refusal::Malformed)?;
    let rest = rest.trim();
    if rest.is_empty() {
        return Err(Refusal::Malformed);
    }
    if scheme.eq_ignore_ascii_case("basic") {
        let decoded = base64::engine::general_purpose::STANDARD.decode(rest).map_err(|_| Refusal::Malformed)?;
        let decoded = String::from_utf8(decoded).map_err(|_| Refusal::Malformed)?;
        let (user, password) = decoded.split_once(':').ok_or(Refusal::Malformed)?;
        Ok(Credentials::Basic { user: user.to_string(), password: password.to_string() })
    } else if scheme.eq_ignore_ascii_case("bearer") {
        Ok(Credentials::Bearer(rest.to_string()))
    } else {
        Err(Refusal::Malformed)
    }
}

fn sha256(parts: &[&[u8]]) -> [u8; 32] {
    let mut context = ring::digest::Context::new(&ring::digest::SHA256);
    for part in parts {
        // Length-prefixed, so that ("ab", "c") and ("a", "bc") differ.
        context.update(&(part.len() as u64).to_le_bytes());
        context.update(part);
    }
    context.finish().as_ref().try_into().expect("SHA-256 is 32 bytes")
}

/// Whether `given` equals `expected`, in time independent of where they differ and of their
/// lengths: the digests are compared, in constant time.
pub(super) fn token_matches(given: &[u8], expected: &[u8; 32]) -> bool {
    sha256(&[given]).ct_eq(expected).into()
}

/// The bearer token file: its trimmed content's digest, re-read when the file changes.
struct TokenFile {
    path: PathBuf,
    state: Mutex<(WatchedFiles, [u8; 32])>,
}

impl TokenFile {
    fn read(path: &PathBuf) -> Result<[u8; 32], String> {
        let text = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let token = text.trim_ascii();
        if token.is_empty() {
            return Err(format!("{} is empty", path.display()));
        }
        Ok(sha256(&[token]))
    }

    fn load(path: &str) -> Result<TokenFile, ConfigError> {
        let path = PathBuf::from(path);
        let watched = WatchedFiles::new(vec![path.clone()]);
        let digest = Self::read(&path)
            .map_err(|problem| ConfigError::Invalid { key: "http.bearer_token_file".into(), problem })?;
        Ok(TokenFile { path, state: Mutex::new((watched, digest)) })
    }

    /// The current token's digest; a changed file that cannot be read or is empty is logged
    /// (by name) and the previous token stays valid.
    fn current(&self) -> [u8; 32] {
        let mut state = self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if state.0.changed() {
            match Self::read(&self.path) {
                Ok(digest) => {
                    state.1 = digest;
                    tracing::info!(file = %self.path.display(), "bearer token file changed: the new token is accepted, the old one no longer");
                }
                Err(problem) => tracing::error!(
                    file = %self.path.display(),
                    %problem,
                    "the changed bearer token file does not load (http.bearer_token_file); the previous token stays valid"
                ),
            }
        }
        state.1
    }
}

/// The check every protected request goes through.
pub(super) struct Auth {
    /// User name to bcrypt hash.
    users: BTreeMap<String, String>,
    /// What an unknown user's password is verified against: a hash of the highest configured
    /// cost, so that the refusal takes as long as a known user's.
    dummy_hash: String,
    /// Digests of (user, password, hash) that verified, so bcrypt runs once per credential.
    verified: Mutex<HashSet<[u8; 32]>>,
    /// Random per process: a digest in memory says nothing about a password elsewhere.
    salt: [u8; 32],
    token: Option<TokenFile>,
    /// bcrypt verifications running at once, at most: a flood of wrong passwords takes the
    /// cores it is given, not the blocking pool's hundreds of threads.
    verifying: Semaphore,
    /// `WWW-Authenticate` of a refusal: the schemes configured.
    challenges: Vec<HeaderValue>,
    /// `rankpulse_http_unauthorized_requests_total{reason}`.
    refused: IntCounterVec,
}

/// The cost of a bcrypt hash (`$2b$10$...` is 10).
fn cost_of(hash: &str) -> u32 {
    hash.get(4..6).and_then(|c| c.parse().ok()).unwrap_or(bcrypt::DEFAULT_COST)
}

impl Auth {
    /// `None` when `[http]` asks for no credentials. Reads the token file (errors name the key
    /// and the file) and makes the dummy hash.
    pub(super) fn load(http: &HttpConfig) -> Result<Option<Auth>, ConfigError> {
        if !http.auth_enabled() {
            return Ok(None);
        }
        let token = match http.bearer_token_file.as_str() {
            "" => None,
            path => Some(TokenFile::load(path)?),
        };
        let cost = http.basic_auth_users.values().map(|h| cost_of(h)).max().unwrap_or(4);
        let dummy_hash = if http.basic_auth_users.is_empty() {
            String::new()
        } else {
            bcrypt::hash(rand::random::<[u8; 16]>(), cost).expect("bcrypt hashes at a valid cost")
        };
        let mut challenges = Vec::new();
        if !http.basic_auth_users.is_empty() {
            challenges.push(HeaderValue::from_static("Basic realm=\"rankpulse\""));
        }
        if token.is_some() {
            challenges.push(HeaderValue::from_static("Bearer realm=\"rankpulse\""));
        }
        let refused = IntCounterVec::new(
            Opts::new(
                "rankpulse_http_unauthorized_requests_total",
                "Requests to /metrics or /api/... refused with 401, by reason: missing, malformed or invalid credentials",
            ),
            &["reason"],
        )
        .expect("a valid metric");
        for reason in Refusal::ALL {
            refused.with_label_values(&[reason.label()]);
        }
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Ok(Some(Auth {
            users: http.basic_auth_users.clone(),
            dummy_hash,
            verified: Mutex::new(HashSet::new()),
            salt: rand::random(),
            token,
            verifying: Semaphore::new(cores),
            challenges,
            refused,
        }))
    }

    /// The refusal counter, for the registry `/metrics` renders.
    pub(super) fn refused_counter(&self) -> IntCounterVec {
        self.refused.clone()
    }

    /// What the start-up log says about the credentials (no secret in it).
    pub(super) fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.users.is_empty() {
            let users = self.users.len();
            parts.push(format!("basic auth ({users} user{})", if users == 1 { "" } else { "s" }));
        }
        if self.token.is_some() {
            parts.push("bearer token".to_string());
        }
        parts.join(" or ")
    }

    /// Checks a request's `Authorization` header.
    pub(super) async fn check(&self, header: Option<&HeaderValue>) -> Result<(), Refusal> {
        let header = header.ok_or(Refusal::Missing)?;
        match parse_authorization(header.as_bytes())? {
            Credentials::Basic { user, password } => self.check_basic(user, password).await,
            Credentials::Bearer(token) => match &self.token {
                Some(file) if token_matches(token.as_bytes(), &file.current()) => Ok(()),
                _ => Err(Refusal::Invalid),
            },
        }
    }

    fn memory_key(&self, user: &str, password: &str, hash: &str) -> [u8; 32] {
        sha256(&[&self.salt, user.as_bytes(), password.as_bytes(), hash.as_bytes()])
    }

    async fn check_basic(&self, user: String, password: String) -> Result<(), Refusal> {
        if self.users.is_empty() {
            return Err(Refusal::Invalid);
        }
        let known = self.users.get(&user);
        let hash = known.unwrap_or(&self.dummy_hash).clone();
        let key = self.memory_key(&user, &password, &hash);
        if known.is_some() && self.verified.lock().unwrap_or_else(|p| p.into_inner()).contains(&key) {
            return Ok(());
        }
        let verified = {
            let _permit = self.verifying.acquire().await.map_err(|_| Refusal::Invalid)?;
            tokio::task::spawn_blocking(move || bcrypt::verify(password, &hash).unwrap_or(false)).await.unwrap_or(false)
        };
        if !(verified && known.is_some()) {
            return Err(Refusal::Invalid);
        }
        let mut remembered = self.verified.lock().unwrap_or_else(|p| p.into_inner());
        if remembered.len() >= MAX_REMEMBERED {
            remembered.clear();
        }
        remembered.insert(key);
        Ok(())
    }

    /// The 401 answer: counted, logged without credentials, with the configured challenges.
    fn refuse(&self, refusal: Refusal, path: &str) -> Response {
        self.refused.with_label_values(&[refusal.label()]).inc();
        tracing::debug!(reason = refusal.label(), path, "refused a request without valid credentials (401)");
        let mut response = (StatusCode::UNAUTHORIZED, "401 Unauthorized: credentials required\n").into_response();
        for challenge in &self.challenges {
            response.headers_mut().append(WWW_AUTHENTICATE, challenge.clone());
        }
        response
    }
}

/// The middleware of the protected routes.
pub(super) async fn require_credentials(State(auth): State<Arc<Auth>>, request: Request, next: Next) -> Response {
    match auth.check(request.headers().get(AUTHORIZATION)).await {
        Ok(()) => next.run(request).await,
        Err(refusal) => auth.refuse(refusal, request.uri().path()),
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    fn basic(user: &str, password: &str) -> HeaderValue {
        let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        HeaderValue::from_str(&format!("Basic {encoded}")).unwrap()
    }

    #[test]
    fn authorization_headers_are_parsed_or_refused_as_malformed() {
        let b = |user: &str, password: &str| Credentials::Basic { user: user.into(), password: password.into() };
        assert_eq!(parse_authorization(basic("prometheus", "s3:cr:et").as_bytes()), Ok(b("prometheus", "s3:cr:et")));
        assert_eq!(parse_authorization(b"basic  cHJvbTo="), Ok(b("prom", "")), "scheme in any case, empty password");
        assert_eq!(parse_authorization(b"Bearer abc.def-ghi"), Ok(Credentials::Bearer("abc.def-ghi".into())));
        assert_eq!(parse_authorization(b"BEARER \tabc "), Ok(Credentials::Bearer("abc".into())));
        for malformed in [
            &b"Basic"[..],
            b"Basic ",
            b"Basic !!!not-base64",
            b"Basic cHJvbWV0aGV1cw==", // "prometheus": no colon
            b"Basic //79",             // not UTF-8
            b"Bearer",
            b"Digest username=\"x\"",
            b"\xff\xfe",
            b"",
        ] {
            assert_eq!(
                parse_authorization(malformed),
                Err(Refusal::Malformed),
                "{:?}",
                String::from_utf8_lossy(malformed)
            );
        }
    }

    #[test]
    fn a_debug_print_shows_no_secret() {
        let shown = format!("{:?}", parse_authorization(basic("prometheus", "hunter2").as_bytes()));
        assert!(shown.contains("prometheus") && !shown.contains("hunter2"), "{shown}");
        let shown = format!("{:?}", parse_authorization(b"Bearer hunter2"));
        assert!(!shown.contains("hunter2"), "{shown}");
    }

    #[test]
    fn tokens_match_exactly() {
        let expected = sha256(&[b"the-token"]);
        assert!(token_matches(b"the-token", &expected));
        for wrong in [&b"the-tokeN"[..], b"the-token ", b"the-toke", b"", b"the-token-and-more"] {
            assert!(!token_matches(wrong, &expected), "{:?}", String::from_utf8_lossy(wrong));
        }
    }

    /// An `[http]` with user `prometheus` (password `right`, cost 4) and a token file.
    fn auth(dir: &std::path::Path) -> (Auth, PathBuf) {
        let token = dir.join("token");
        std::fs::write(&token, "  tok-1\n").unwrap();
        let http = HttpConfig {
            basic_auth_users: [("prometheus".to_string(), bcrypt::hash("right", 4).unwrap())].into(),
            bearer_token_file: token.to_str().unwrap().to_string(),
            ..HttpConfig::default()
        };
        (Auth::load(&http).unwrap().unwrap(), token)
    }

    #[tokio::test]
    async fn basic_and_bearer_credentials_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let (auth, token) = auth(dir.path());
        let check = |value: HeaderValue| {
            let auth = &auth;
            async move { auth.check(Some(&value)).await }
        };
        assert_eq!(auth.check(None).await, Err(Refusal::Missing));
        assert_eq!(check(basic("prometheus", "right")).await, Ok(()));
        assert_eq!(check(basic("prometheus", "right")).await, Ok(()), "remembered");
        assert_eq!(check(basic("prometheus", "wrong")).await, Err(Refusal::Invalid));
        assert_eq!(check(basic("prometheus", "right ")).await, Err(Refusal::Invalid));
        assert_eq!(check(basic("Prometheus", "right")).await, Err(Refusal::Invalid), "user names are exact");
        assert_eq!(check(basic("nobody", "right")).await, Err(Refusal::Invalid));
        assert_eq!(check(HeaderValue::from_static("Basic ???")).await, Err(Refusal::Malformed));
        assert_eq!(check(HeaderValue::from_static("Bearer tok-1")).await, Ok(()), "trimmed file content");
        assert_eq!(check(HeaderValue::from_static("Bearer tok-2")).await, Err(Refusal::Invalid));

        // The token file changes: the new token is accepted, the old one no longer.
        std::fs::write(&token, "tok-2\n").unwrap();
        auth.token.as_ref().unwrap().state.lock().unwrap().0.look_now();
        assert_eq!(check(HeaderValue::from_static("Bearer tok-2")).await, Ok(()));
        assert_eq!(check(HeaderValue::from_static("Bearer tok-1")).await, Err(Refusal::Invalid));
        // Emptied (a half-written update): the previous token stays valid.
        std::fs::write(&token, "").unwrap();
        auth.token.as_ref().unwrap().state.lock().unwrap().0.look_now();
        assert_eq!(check(HeaderValue::from_static("Bearer tok-2")).await, Ok(()));
    }

    #[tokio::test]
    async fn only_the_configured_schemes_are_accepted_and_challenged() {
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "tok").unwrap();
        let only_token = HttpConfig { bearer_token_file: token.to_str().unwrap().into(), ..HttpConfig::default() };
        let auth = Auth::load(&only_token).unwrap().unwrap();
        assert_eq!(auth.check(Some(&basic("prometheus", "tok"))).await, Err(Refusal::Invalid));
        assert_eq!(auth.challenges, [HeaderValue::from_static("Bearer realm=\"rankpulse\"")]);
        let response = auth.refuse(Refusal::Missing, "/metrics");
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(response.headers()[WWW_AUTHENTICATE], "Bearer realm=\"rankpulse\"");
        assert_eq!(auth.refused.with_label_values(&["missing"]).get(), 1);

        assert!(Auth::load(&HttpConfig::default()).unwrap().is_none(), "no credentials configured");
        let missing =
            HttpConfig { bearer_token_file: dir.path().join("nope").to_str().unwrap().into(), ..HttpConfig::default() };
        let error = Auth::load(&missing).err().unwrap().to_string();
        assert!(error.contains("http.bearer_token_file") && error.contains("nope"), "{error}");
        std::fs::write(&token, " \n").unwrap();
        let error = Auth::load(&only_token).err().unwrap().to_string();
        assert!(error.contains("http.bearer_token_file") && error.contains("is empty"), "{error}");
    }

    /// bcrypt at cost 10 (htpasswd's and Python's default): what a verification costs, what a
    /// remembered one costs, and that an unknown user costs as much as a known one.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_verification_is_remembered_and_an_unknown_user_costs_as_much() {
        let http = HttpConfig {
            basic_auth_users: [("prometheus".to_string(), bcrypt::hash("right", 10).unwrap())].into(),
            ..HttpConfig::default()
        };
        let auth = Auth::load(&http).unwrap().unwrap();
        let timed = |user: &'static str, password: &'static str| {
            let auth = &auth;
            async move {
                let started = Instant::now();
                let result = auth.check(Some(&basic(user, password))).await;
                (result, started.elapsed())
            }
        };
        let (first, verify) = timed("prometheus", "right").await;
        let (again, remembered) = timed("prometheus", "right").await;
        let (wrong, wrong_took) = timed("prometheus", "wrong").await;
        let (unknown, unknown_took) = timed("nobody", "right").await;
        eprintln!(
            "bcrypt cost 10: verify {verify:?}, remembered {remembered:?}, wrong password {wrong_took:?}, unknown user {unknown_took:?}"
        );
        assert_eq!((first, again, wrong, unknown), (Ok(()), Ok(()), Err(Refusal::Invalid), Err(Refusal::Invalid)));
        assert!(verify > Duration::from_millis(10), "bcrypt at cost 10 is slow on purpose: {verify:?}");
        assert!(remembered * 20 < verify, "a remembered success skips bcrypt: {remembered:?} vs {verify:?}");
        assert!(unknown_took * 2 > wrong_took, "an unknown user pays bcrypt too: {unknown_took:?} vs {wrong_took:?}");
        // Counted, not timed: only the success is remembered.
        let remembered_count = auth.verified.lock().unwrap_or_else(|p| p.into_inner()).len();
        assert_eq!(remembered_count, 1, "a wrong password is never remembered ({wrong_took:?} against {verify:?})");
    }
}
