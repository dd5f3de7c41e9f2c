//! A real Prometheus server for a test (Debian's `prometheus` package): started on a
//! configuration derived from the shipped deploy/prometheus/prometheus.yml, and asked through
//! its HTTP API.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{free_port, wait_for};

/// A path in the repository.
pub fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// A Prometheus server in its own temporary directory, killed when dropped.
pub struct Prometheus {
    child: Child,
    /// Where its HTTP API listens, on 127.0.0.1.
    pub port: u16,
    /// Its stderr, printed only if the test fails (it is in the temporary directory, which
    /// may be gone by then: read while the server is dropped).
    log: PathBuf,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            eprintln!("---- prometheus's log ----\n{log}---- end of log ----");
        }
    }
}

pub fn require_tool(name: &str) {
    let found = Command::new(name).arg("--version").output().map(|o| o.status.success()).unwrap_or(false);
    assert!(found, "`{name}` is required: install Debian's `prometheus` package (bash tests/run.sh does)");
}

/// The shipped prometheus.yml with only what a test must change: the scrape target (the demo's
/// port), the scrape and evaluation intervals (1s instead of 15s, so rate() and the rules have
/// samples within seconds), and the rule file paths made absolute (the config is written to a
/// temporary directory). Each substitution must match exactly once, so a change to the shipped
/// file cannot silently leave this test checking something else.
pub fn shipped_prometheus_config(target: &str) -> String {
    let shipped = std::fs::read_to_string(repo("deploy/prometheus/prometheus.yml")).unwrap();
    let rules = repo("deploy/prometheus/rules");
    let mut text = shipped;
    for (from, to) in [
        ("\"localhost:9464\"", format!("\"{target}\"")),
        ("scrape_interval: 15s", "scrape_interval: 1s".to_string()),
        ("evaluation_interval: 15s", "evaluation_interval: 1s".to_string()),
        ("- rules/rankpulse-recording.yml", format!("- {}/rankpulse-recording.yml", rules.display())),
        ("- rules/rankpulse-alerts.yml", format!("- {}/rankpulse-alerts.yml", rules.display())),
    ] {
        assert_eq!(text.matches(from).count(), 1, "expected {from:?} exactly once in deploy/prometheus/prometheus.yml");
        text = text.replace(from, &to);
    }
    text
}

/// Starts `prometheus` with the configuration `config_text` (after `promtool check config`
/// passed on it) in `dir`, and waits until it is ready.
pub fn start_prometheus(dir: &Path, config_text: &str) -> Prometheus {
    let config = dir.join("prometheus.yml");
    std::fs::write(&config, config_text).unwrap();
    let check = Command::new("promtool").args(["check", "config"]).arg(&config).output().unwrap();
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stdout));
    let port = free_port();
    let child = Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .arg("--log.level=warn")
        .stdout(Stdio::null())
        // Printed only if the test fails (see `Prometheus`'s drop).
        .stderr(Stdio::from(std::fs::File::create(dir.join("prometheus.log")).unwrap()))
        .spawn()
        .expect("starting prometheus");
    let prometheus = Prometheus { child, port, log: dir.join("prometheus.log") };
    let deadline = Instant::now() + Duration::from_secs(30);
    let ready = || (http10_get(port, "/-/ready").map(|(s, _)| s) == Some(200)).then_some(());
    wait_for(deadline, Duration::from_millis(200), "prometheus did not become ready", ready);
    prometheus
}

/// GET over HTTP/1.0, so that the server closes the connection instead of chunking the body.
pub fn http10_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, response.split_once("\r\n\r\n")?.1.to_string()))
}

/// Percent-encoding of a query parameter.
pub fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A Prometheus API call: `Ok(data)`, or `Err(error text)` for a failed query.
pub fn api(port: u16, path: &str) -> Result<Value, String> {
    let (status, body) = http10_get(port, path).ok_or_else(|| format!("no response to {path}"))?;
    let json: Value = serde_json::from_str(&body).map_err(|e| format!("HTTP {status}, not JSON ({e}): {body}"))?;
    if json["status"] != "success" {
        return Err(format!("{}: {}", json["errorType"], json["error"]));
    }
    Ok(json["data"].clone())
}

/// Evaluates a PromQL expression now; the number of series (or 1 for a scalar) or the error.
pub fn query(port: u16, expr: &str) -> Result<usize, String> {
    Ok(series_count(&api(port, &format!("/api/v1/query?query={}", encode(expr)))?))
}

/// [`query`] at `at` (seconds since the epoch).
fn query_at(port: u16, expr: &str, at: f64) -> Result<usize, String> {
    Ok(series_count(&api(port, &format!("/api/v1/query?query={}&time={at:.3}", encode(expr)))?))
}

/// The number of series of a query's result (or 1 for a scalar).
fn series_count(data: &Value) -> usize {
    match data["resultType"].as_str() {
        Some("vector") | Some("matrix") => data["result"].as_array().map_or(0, Vec::len),
        _ => 1,
    }
}

/// [`query`], except that an empty answer at an instant when a scrape of the last 4 s had
/// failed is asked again at a later instant. A failed scrape (here: the scrape timeout, which
/// these tests' short intervals make as short, met on a loaded 2-core machine) marks
/// every series the target exported stale, so an instant selector finds nothing until the
/// next one; that is Prometheus' rule, not a series rankpulse stopped exporting. An empty
/// answer while `up` was 1 is returned as it is, so a series that really went missing still
/// fails the test. Each failed scrape met is added to `failed_scrapes` with Prometheus' error,
/// for the caller to bound and print.
pub fn query_past_failed_scrapes(port: u16, expr: &str, failed_scrapes: &mut Vec<String>) -> Result<usize, String> {
    let now = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    let mut at = now();
    for _ in 0..10 {
        let n = query_at(port, expr, at)?;
        if n > 0 {
            return Ok(n);
        }
        // Within the last 4 s (two scrapes at 2 s): a recording rule evaluated (every 1 s) while
        // the scrape had failed recorded nothing either, until its next evaluation.
        let up = api(port, &format!("/api/v1/query?query={}&time={at:.3}", encode("min(min_over_time(up[4s]))")))?;
        let failed = up["result"][0]["value"][1].as_str() == Some("0");
        if !failed {
            return Ok(0);
        }
        let error =
            api(port, "/api/v1/targets").map(|t| t["activeTargets"][0]["lastError"].to_string()).unwrap_or_else(|e| e);
        failed_scrapes.push(format!("at {at:.3}: {error}"));
        std::thread::sleep(Duration::from_millis(1500));
        at = now();
    }
    Ok(0)
}

/// The shipped configuration's commented-out HTTPS scrape settings (`scheme: https`,
/// `tls_config`, `basic_auth`) uncommented, with the test's files in place of the example
/// paths: `ca` (the CA of rankpulse's certificate), Prometheus' client certificate and key, and
/// the file holding the password. Each line must be found exactly once, so that the test
/// checks the lines the file ships.
pub fn with_https_scrape(
    config: &str,
    ca: &Path,
    client_cert: &Path,
    client_key: &Path,
    password_file: &Path,
) -> String {
    let mut text = config.to_string();
    for (from, to) in [
        ("    # scheme: https\n", "    scheme: https\n".to_string()),
        ("    # tls_config:\n", "    tls_config:\n".to_string()),
        ("    #   ca_file: /etc/prometheus/rankpulse/ca.pem\n", format!("      ca_file: {}\n", ca.display())),
        (
            "    #   cert_file: /etc/prometheus/rankpulse/client.pem\n",
            format!("      cert_file: {}\n", client_cert.display()),
        ),
        (
            "    #   key_file: /etc/prometheus/rankpulse/client-key.pem\n",
            format!("      key_file: {}\n", client_key.display()),
        ),
        ("    # basic_auth:\n", "    basic_auth:\n".to_string()),
        ("    #   username: prometheus\n", "      username: prometheus\n".to_string()),
        (
            "    #   password_file: /etc/prometheus/rankpulse/password\n",
            format!("      password_file: {}\n", password_file.display()),
        ),
    ] {
        assert_eq!(text.matches(from).count(), 1, "expected {from:?} exactly once in deploy/prometheus/prometheus.yml");
        text = text.replace(from, &to);
    }
    text
}

/// The scrape targets' health: (`health`, `lastError`) of each active target.
pub fn target_health(port: u16) -> Vec<(String, String)> {
    let data = api(port, "/api/v1/targets").unwrap_or_default();
    data["activeTargets"]
        .as_array()
        .map(|targets| {
            targets
                .iter()
                .map(|t| {
                    (t["health"].as_str().unwrap_or("").to_string(), t["lastError"].as_str().unwrap_or("").to_string())
                })
                .collect()
        })
        .unwrap_or_default()
}
