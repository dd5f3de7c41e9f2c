//! The protected endpoint through the real binary: `rankpulse serve` against librdkafka's mock
//! cluster with `[http.tls_server_config]`, `[http.basic_auth_users]` and `http.bearer_token_file`,
//! asked over HTTPS (rustls, tests/common/https.rs) with and without credentials and client
//! certificates; certificates and the token replaced while it runs; and a real Prometheus
//! scraping it with the shipped prometheus.yml's HTTPS settings uncommented.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;

const USER: &str = "prometheus";
const PASSWORD: &str = "correct horse battery staple";
const TOKEN: &str = "tok-4f1d2c-first";

/// A running `rankpulse serve` with TLS and credentials, and what the test needs to talk to it.
struct Protected {
    /// Kept alive for the daemon; `!Send`, so the test stays on its thread.
    _cluster: MockCluster<'static, DefaultProducerContext>,
    daemon: Daemon,
    port: u16,
    pki: TestPki,
    token_file: PathBuf,
    /// The bcrypt hash in the configuration: it must not appear in the output either.
    hash: String,
    dir: tempfile::TempDir,
}

/// Starts `serve` with TLS (`client_auth_type`), basic auth for [`USER`] and the bearer token
/// file holding [`TOKEN`], and waits until it answers `/healthz` over HTTPS.
fn start(name: &str, client_auth_type: &str) -> Protected {
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new(dir.path());
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let hash = bcrypt::hash(PASSWORD, 10).unwrap();
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("imp", 1, 1).unwrap();
    cluster.create_topic("eng", 1, 1).unwrap();
    create_state_topics(&cluster, name, 1);
    let path = |p: &Path| p.to_str().unwrap().to_string();
    let sections = format!(
        r#"
[kafka]
group_id = "{name}"
impressions_topic = "imp"
engagements_topic = "eng"
[http]
bearer_token_file = "{token}"
[http.tls_server_config]
cert_file = "{cert}"
key_file = "{key}"
client_auth_type = "{client_auth_type}"
client_ca_file = "{ca}"
[http.basic_auth_users]
{USER} = "{hash}"
"#,
        token = path(&token_file),
        cert = path(&pki.server_cert),
        key = path(&pki.server_key),
        ca = path(&pki.ca_cert),
    );
    let port = free_port();
    let config = serve_config(dir.path(), name, &cluster.bootstrap_servers(), port, &sections);
    let daemon = Daemon::spawn(&["serve", "--config", config.to_str().unwrap()]);
    let client = HttpsClient::new(&pki.ca_cert, Some((&pki.client_cert, &pki.client_key)));
    let up = || client.get(port, "/healthz", None).ok().filter(|r| r.status == 200);
    wait_for(Instant::now() + Duration::from_secs(30), Duration::from_millis(100), "no HTTPS /healthz", up);
    Protected { _cluster: cluster, daemon, port, pki, token_file, hash, dir }
}

impl Protected {
    /// Stops the daemon and checks that nothing it wrote holds a secret.
    fn stop_and_check_output(self) -> String {
        let (status, _, output) = self.daemon.terminate_with_output(Duration::from_secs(10));
        assert!(status.success(), "{output}");
        let encoded = basic_auth(USER, PASSWORD);
        for secret in [PASSWORD, TOKEN, "tok-4f1d2c-second", self.hash.as_str(), &encoded["Basic ".len()..]] {
            assert!(!output.contains(secret), "the output holds a secret ({} characters):\n{output}", secret.len());
        }
        output
    }
}

/// The value of series `key` (exactly as written in the exposition) in a `/metrics` body.
fn sample(body: &str, key: &str) -> Option<f64> {
    body.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.parse().ok())
}

/// Polls new connections until the server presents the certificate with `fingerprint`; how long
/// that took.
fn until_served(client: &HttpsClient, port: u16, fingerprint: &str) -> Duration {
    let started = Instant::now();
    let what = format!("the server did not present certificate {fingerprint} to new connections");
    let presented = || {
        let response = client.get(port, "/healthz", None).ok()?;
        (response.server_cert == fingerprint).then_some(())
    };
    wait_for(started + Duration::from_secs(10), Duration::from_millis(50), &what, presented);
    started.elapsed()
}

#[test]
fn https_with_basic_auth_and_a_bearer_token_reloading_certificate_and_token() {
    let protected = start("sec-optional", "VerifyClientCertIfGiven");
    let (port, pki) = (protected.port, &protected.pki);
    let anonymous = HttpsClient::new(&pki.ca_cert, None);
    let get = |path: &str, authorization: Option<&str>| anonymous.get(port, path, authorization).unwrap();
    let right = basic_auth(USER, PASSWORD);

    // The probes need nothing; /readyz turns 200 once the partition is assigned.
    assert_eq!(get("/healthz", None).status, 200);
    let ready = || (get("/readyz", None).status == 200).then_some(());
    wait_for(Instant::now() + Duration::from_secs(30), Duration::from_millis(200), "/readyz never 200", ready);

    // Without credentials, or with wrong ones: 401, with both challenges.
    let refused = get("/metrics", None);
    assert_eq!(refused.status, 401, "{refused:?}");
    assert_eq!(refused.header("www-authenticate"), ["Basic realm=\"rankpulse\"", "Bearer realm=\"rankpulse\""]);
    assert!(!refused.body.contains("rankpulse_"), "{refused:?}");
    assert_eq!(get("/api/v1/experiments", None).status, 401);
    let wrong_password = basic_auth(USER, "correct horse battery stapler");
    let unknown_user = basic_auth("grafana", PASSWORD);
    for authorization in [wrong_password.as_str(), &unknown_user, "Bearer tok-4f1d2c-firs", "Basic bm90LWJhc2U2NA"] {
        assert_eq!(get("/metrics", Some(authorization)).status, 401, "{authorization}");
    }
    assert_eq!(get("/nowhere", None).status, 404, "only known routes ask for credentials");

    // With them: 200. The refusals so far are counted by reason.
    let started = Instant::now();
    let scraped = get("/metrics", Some(&right));
    let first_basic = started.elapsed();
    assert_eq!(scraped.status, 200, "{scraped:?}");
    let started = Instant::now();
    assert_eq!(get("/metrics", Some(&right)).status, 200);
    let remembered_basic = started.elapsed();
    let counted = |reason: &str| {
        sample(&scraped.body, &format!("rankpulse_http_unauthorized_requests_total{{reason=\"{reason}\"}}"))
    };
    assert_eq!((counted("missing"), counted("invalid"), counted("malformed")), (Some(2.0), Some(3.0), Some(1.0)));
    assert!(
        scraped.body.contains("rankpulse_events_consumed_total")
            || scraped.body.contains("rankpulse_pending_impressions")
    );
    let api = get("/api/v1/experiments", Some(&format!("Bearer {TOKEN}")));
    assert_eq!((api.status, api.body.as_str()), (200, r#"{"experiments":[]}"#));
    eprintln!("HTTPS /metrics with basic auth (debug build, bcrypt cost 10): first {first_basic:?}, remembered {remembered_basic:?}");

    // A client certificate is optional, but one that is given must be the CA's.
    let with_cert = HttpsClient::new(&pki.ca_cert, Some((&pki.client_cert, &pki.client_key)));
    assert_eq!(with_cert.get(port, "/metrics", Some(&right)).unwrap().status, 200);
    let other_dir = tempfile::tempdir().unwrap();
    let stranger = TestPki::new(other_dir.path());
    let foreign = HttpsClient::new(&pki.ca_cert, Some((&stranger.client_cert, &stranger.client_key)));
    let error = foreign.get(port, "/healthz", None).expect_err("a certificate of another CA is refused");
    eprintln!("client certificate of another CA: {error}");
    // Plain HTTP on the HTTPS port gets no answer.
    assert_ne!(http_get(port, "/healthz").map(|r| r.0), Some(200));

    // Certificate renewal: a new connection sees the new certificate.
    let original = fingerprint(&pki.server_cert);
    assert_eq!(get("/healthz", None).server_cert, original);
    let renewed = pki.reissue_server("localhost-renewed");
    assert_ne!(renewed, original);
    let took = until_served(&anonymous, port, &renewed);
    eprintln!("renewed certificate served to new connections after {took:?}");
    assert_eq!(get("/metrics", Some(&right)).status, 200, "credentials are still remembered across the reload");

    // A broken certificate file: logged by name, the renewed certificate goes on serving; fixed,
    // it is picked up.
    std::fs::write(&pki.server_cert, "-----BEGIN CERTIFICATE-----\nnot base64 at all!\n-----END CERTIFICATE-----\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(get("/healthz", None).server_cert, renewed);
    let broken_logged = || {
        let output = protected.daemon.output();
        (output.contains("do not load") && output.contains(pki.server_cert.to_str().unwrap())).then_some(())
    };
    wait_for(
        Instant::now() + Duration::from_secs(5),
        Duration::from_millis(100),
        "the broken file is not logged",
        broken_logged,
    );
    let fixed = pki.reissue_server("localhost-fixed");
    until_served(&anonymous, port, &fixed);

    // Token rotation: the new token is accepted, the old one no longer.
    std::fs::write(&protected.token_file, "tok-4f1d2c-second\n").unwrap();
    let rotated = || (get("/metrics", Some("Bearer tok-4f1d2c-second")).status == 200).then_some(());
    wait_for(Instant::now() + Duration::from_secs(5), Duration::from_millis(100), "the new token is refused", rotated);
    assert_eq!(get("/metrics", Some(&format!("Bearer {TOKEN}"))).status, 401);

    let output = protected.stop_and_check_output();
    assert!(output.contains(&format!("metrics on https://127.0.0.1:{port}/metrics")), "{output}");
    assert!(output.contains("TLS certificate, key and client CA reloaded"), "{output}");
}

#[test]
fn require_and_verify_client_cert_refuses_a_client_without_one() {
    let protected = start("sec-required", "RequireAndVerifyClientCert");
    let (port, pki) = (protected.port, &protected.pki);
    let right = basic_auth(USER, PASSWORD);

    let anonymous = HttpsClient::new(&pki.ca_cert, None);
    for path in ["/healthz", "/metrics"] {
        let error = anonymous.get(port, path, Some(&right)).expect_err("no client certificate, no connection");
        eprintln!("{path} without a client certificate: {error}");
    }
    let other_dir = tempfile::tempdir().unwrap();
    let stranger = TestPki::new(other_dir.path());
    let foreign = HttpsClient::new(&pki.ca_cert, Some((&stranger.client_cert, &stranger.client_key)));
    assert!(foreign.get(port, "/healthz", None).is_err(), "a certificate of another CA is refused");

    // With the CA's client certificate: the probes answer, /metrics still wants credentials.
    let (cert, key) = pki.issue_client("grafana", "grafana");
    for client in [
        HttpsClient::new(&pki.ca_cert, Some((&pki.client_cert, &pki.client_key))),
        HttpsClient::new(&pki.ca_cert, Some((&cert, &key))),
    ] {
        assert_eq!(client.get(port, "/healthz", None).unwrap().status, 200);
        assert_eq!(client.get(port, "/metrics", None).unwrap().status, 401);
        assert_eq!(client.get(port, "/metrics", Some(&right)).unwrap().status, 200);
    }
    // OpenSSL's side (curl) agrees: refused without a client certificate, 200 with one.
    let curl = |identity: &[&Path]| {
        let mut command = std::process::Command::new("curl");
        command.args(["-sS", "-o", "/dev/null", "-w", "%{http_code}", "--cacert"]).arg(&pki.ca_cert);
        if let [cert, key] = identity {
            command.arg("--cert").arg(cert).arg("--key").arg(key);
        }
        let out = command.args(["-u", &format!("{USER}:{PASSWORD}")]).arg(format!("https://127.0.0.1:{port}/metrics"));
        let out = out.output().expect("curl is installed");
        (out.status.success(), String::from_utf8_lossy(&out.stdout).to_string())
    };
    assert_eq!(curl(&[&pki.client_cert, &pki.client_key]), (true, "200".to_string()));
    assert!(!curl(&[]).0, "curl without a client certificate is refused");
    protected.stop_and_check_output();
}

#[test]
fn prometheus_scrapes_over_tls_with_basic_auth_and_a_client_certificate() {
    require_tool("prometheus");
    require_tool("promtool");
    let protected = start("sec-prometheus", "RequireAndVerifyClientCert");
    let (port, pki) = (protected.port, &protected.pki);
    let password_file = protected.dir.path().join("password");
    std::fs::write(&password_file, PASSWORD).unwrap();
    let prometheus_dir = tempfile::tempdir().unwrap();
    let config = with_https_scrape(
        &shipped_prometheus_config(&format!("127.0.0.1:{port}")),
        &pki.ca_cert,
        &pki.client_cert,
        &pki.client_key,
        &password_file,
    );
    let prometheus = start_prometheus(prometheus_dir.path(), &config);
    let up = |want: &str| {
        let data = api(prometheus.port, "/api/v1/query?query=up%7Bjob%3D%22rankpulse%22%7D").ok()?;
        (data["result"][0]["value"][1] == want).then_some(())
    };
    let what = format!("up never 1; targets: {:?}", target_health(prometheus.port));
    wait_for(Instant::now() + Duration::from_secs(30), Duration::from_millis(250), &what, || up("1"));
    assert_eq!(target_health(prometheus.port), [("up".to_string(), String::new())]);

    // Prometheus reads password_file at every scrape: a wrong password is a 401, and up is 0.
    std::fs::write(&password_file, "not the password").unwrap();
    let refused = || {
        let health = target_health(prometheus.port);
        let (state, error) = health.first()?;
        (state == "down" && error.contains("401")).then(|| error.clone())
    };
    let what = "the target never went down with a 401";
    let error = wait_for(Instant::now() + Duration::from_secs(30), Duration::from_millis(250), what, refused);
    eprintln!("Prometheus with a wrong password: {error}");
    wait_for(Instant::now() + Duration::from_secs(30), Duration::from_millis(250), "up never 0", || up("0"));

    let client = HttpsClient::new(&pki.ca_cert, Some((&pki.client_cert, &pki.client_key)));
    let body = client.get(port, "/metrics", Some(&basic_auth(USER, PASSWORD))).unwrap().body;
    let invalid = sample(&body, "rankpulse_http_unauthorized_requests_total{reason=\"invalid\"}").unwrap();
    assert!(invalid >= 1.0, "the refused scrapes are counted: {invalid}");
    drop(prometheus);
    protected.stop_and_check_output();
}

/// `check-config` and `serve` read the files `[http]` names: a missing or wrong one stops them
/// naming the key and the file; a plain password is refused without being echoed; and the
/// printed configuration shows no hash.
#[test]
fn check_config_and_serve_refuse_broken_files_naming_key_and_file() {
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new(dir.path());
    let path = |p: &Path| p.to_str().unwrap().to_string();
    let missing = path(&dir.path().join("missing.pem"));
    let hash = bcrypt::hash(PASSWORD, 4).unwrap();
    let tls =
        |cert: &str, key: &str| format!("[http.tls_server_config]\ncert_file = \"{cert}\"\nkey_file = \"{key}\"\n");
    let run = |command: &str, toml: &str| {
        let config = dir.path().join("rankpulse.toml");
        std::fs::write(&config, toml).unwrap();
        let out = std::process::Command::new(BIN).args([command, "--config"]).arg(&config).output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let cases = [
        (tls(&missing, &path(&pki.server_key)), "http.tls_server_config.cert_file", missing.clone()),
        (tls(&path(&pki.server_cert), &missing), "http.tls_server_config.key_file", missing.clone()),
        // The client's key does not belong to the server's certificate.
        (
            tls(&path(&pki.server_cert), &path(&pki.client_key)),
            "http.tls_server_config.key_file",
            path(&pki.client_key),
        ),
        (
            format!(
                "{}client_auth_type = \"RequireAndVerifyClientCert\"\nclient_ca_file = \"{missing}\"\n",
                tls(&path(&pki.server_cert), &path(&pki.server_key))
            ),
            "http.tls_server_config.client_ca_file",
            missing.clone(),
        ),
        (format!("[http]\nbearer_token_file = \"{missing}\"\n"), "http.bearer_token_file", missing.clone()),
        (
            format!("[http.basic_auth_users]\n{USER} = \"{PASSWORD}\"\n"),
            "http.basic_auth_users.prometheus",
            String::new(),
        ),
    ];
    for (toml, key, file) in &cases {
        for command in ["check-config", "serve"] {
            let (ok, _, stderr) = run(command, toml);
            assert!(!ok, "{command} accepted:\n{toml}");
            assert!(stderr.contains(key) && stderr.contains(file.as_str()), "{command} on\n{toml}\nsaid: {stderr}");
            assert!(
                !stderr.contains(PASSWORD) && !stderr.contains("PRIVATE KEY"),
                "{command} quotes a secret: {stderr}"
            );
        }
    }
    let (ok, stdout, stderr) = run("check-config", &format!("[http.basic_auth_users]\n{USER} = \"{hash}\"\n"));
    assert!(ok, "{stderr}");
    assert!(stdout.contains(USER) && !stdout.contains(&hash), "check-config prints the hash:\n{stdout}");
    assert!(stderr.contains("over plain HTTP"), "credentials without TLS are warned about: {stderr}");
}
