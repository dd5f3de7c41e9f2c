//! Reading what a running `rankpulse` exports: HTTP GETs, `/metrics` parsed into series, and
//! waiting for a condition on them.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A port nothing listens on right now, for a daemon's `http.listen`.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// GET `path` on 127.0.0.1:port; (status code, body), or None if not reachable.
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    http_request(port, path, None).map(|r| (r.status, r.body))
}

/// A response read by [`http_request`].
pub struct HttpResponse {
    pub status: u16,
    /// The status line and headers, as sent.
    pub head: String,
    pub body: String,
}

/// GET `path` on 127.0.0.1:port with an `Authorization` header if given; None if not reachable.
pub fn http_request(port: u16, path: &str, authorization: Option<&str>) -> Option<HttpResponse> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let authorization = authorization.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
    write!(stream, "GET {path} HTTP/1.1\r\nHost: localhost\r\n{authorization}Connection: close\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    Some(HttpResponse { status, head: head.to_string(), body: body.to_string() })
}

/// Series in a Prometheus text exposition: `name{a="x",b="y"}` (labels sorted) → value, summed
/// over the `partition` label, so that a total reads the same however many partitions (and
/// replicas) it is spread over: what `sum without (partition)` returns. [`parse_exposition_raw`]
/// keeps every series apart.
pub fn parse_exposition(text: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for (name, mut labels, value) in samples(text) {
        labels.retain(|(k, _)| k != "partition");
        *out.entry(key(&name, &labels)).or_insert(0.0) += value;
    }
    out
}

/// Every series of a Prometheus text exposition as it is, `partition` label included:
/// `name{a="x",partition="3"}` (labels sorted) → value.
pub fn parse_exposition_raw(text: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for (name, labels, value) in samples(text) {
        let previous = out.insert(key(&name, &labels), value);
        assert!(previous.is_none(), "{name}{labels:?} twice in the exposition");
    }
    out
}

/// The samples of an exposition: name, labels (name, value; values as written, escapes and
/// all) and value.
fn samples(text: &str) -> impl Iterator<Item = (String, Vec<(String, String)>, f64)> + '_ {
    text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()).map(|line| {
        let (series, value) = line.rsplit_once(' ').expect("series and value");
        let value = value.parse().expect("numeric sample");
        let Some((name, labels)) = series.split_once('{') else {
            return (series.to_string(), Vec::new(), value);
        };
        let labels = labels
            .trim_end_matches('}')
            .split(',')
            .filter(|p| !p.is_empty())
            .map(|pair| {
                let (k, v) = pair.split_once('=').expect("label=\"value\"");
                (k.to_string(), v.trim_matches('"').to_string())
            })
            .collect();
        (name.to_string(), labels, value)
    })
}

fn key(name: &str, labels: &[(String, String)]) -> String {
    let borrowed: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    series(name, &borrowed)
}

/// Builds a series key with labels in any order.
pub fn series(name: &str, labels: &[(&str, &str)]) -> String {
    if labels.is_empty() {
        return name.to_string();
    }
    let mut pairs: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    pairs.sort_unstable();
    format!("{name}{{{}}}", pairs.join(","))
}

/// Scrapes until `done` holds for the parsed series, or panics after `timeout`.
pub fn scrape_until(
    port: u16,
    timeout: Duration,
    mut done: impl FnMut(&BTreeMap<String, f64>) -> bool,
) -> (String, BTreeMap<String, f64>) {
    let deadline = Instant::now() + timeout;
    let mut last = String::new();
    while Instant::now() < deadline {
        if let Some((200, body)) = http_get(port, "/metrics") {
            let parsed = parse_exposition(&body);
            if done(&parsed) {
                return (body, parsed);
            }
            last = body;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    panic!("condition not reached within {timeout:?}; last scrape:\n{last}");
}

/// Runs `promtool check metrics` on an exposition. In CI promtool must exist (the test command
/// installs it); elsewhere a missing promtool skips the check with a message.
pub fn promtool_check(exposition: &str) {
    let promtool = Command::new("promtool").arg("--version").output();
    if promtool.is_err() {
        assert!(std::env::var_os("CI").is_none(), "promtool is required in CI (apt-get install prometheus)");
        eprintln!("SKIPPED promtool check: promtool not installed");
        return;
    }
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(exposition.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.trim().is_empty(), "promtool check metrics complained:\n{text}");
}

/// Whether a family counts what this process saw rather than a partition's data (its
/// processing, checkpoints and changelog records, the key check on its consumer, the repartition stage, rebalances,
/// restores, the windows its experiment-wide view could not hand out, and its CPU time): such counts do not
/// move with a partition, and carry no `partition` label.
pub fn of_the_process(name: &str) -> bool {
    [
        "rankpulse_event_processing_seconds",
        "rankpulse_checkpoint",
        "rankpulse_changelog",
        "rankpulse_input_key",
        "rankpulse_repartition",
        "rankpulse_rebalances",
        "rankpulse_partition_restores",
        "rankpulse_click_examination",
        "rankpulse_click_harvest",
        "rankpulse_ab_windows_skipped",
        "rankpulse_aggregates_",
        "rankpulse_state_bytes_sent",
        "process_",
    ]
    .iter()
    .any(|prefix| name.starts_with(prefix))
}

/// Every `_sum`, `_count` and `_total` series except the process's own counts
/// ([`of_the_process`]): what must equal an uninterrupted run's whatever happened to the
/// daemons.
pub fn totals(m: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    m.iter()
        .filter(|(k, _)| {
            let name = k.split('{').next().unwrap();
            (name.ends_with("_sum") || name.ends_with("_count") || name.ends_with("_total")) && !of_the_process(name)
        })
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}
