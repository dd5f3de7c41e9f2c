//! What `rankpulse serve` writes to stderr, for operators: a broker outage of ten seconds is a
//! handful of lines and exactly one recovery line (not librdkafka's ten lines a second); logs
//! redirected to a file carry no colour codes; `--log-format json` is one JSON object per line.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use rdkafka::config::ClientConfig;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use serde_json::Value;

const BROKERS: i32 = 3;

/// The lines of a JSON log, parsed; panics on a line that is not one JSON object.
fn json_lines(output: &str) -> Vec<Value> {
    output
        .lines()
        .map(|line| {
            let value: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
            assert!(value.is_object() && value["level"].is_string() && value["message"].is_string(), "{line}");
            value
        })
        .collect()
}

fn is_alarm(line: &Value) -> bool {
    matches!(line["level"].as_str(), Some("WARN" | "ERROR"))
}

/// Produces one impression every 50 ms to `imp` until `stop`: traffic flows before, during
/// (queued) and after the outage, so the consumer has messages to prove recovery with.
fn produce_until(brokers: String, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let producer: BaseProducer = ClientConfig::new().set("bootstrap.servers", &brokers).create().unwrap();
        let mut n = 0u64;
        while !stop.load(Ordering::Relaxed) {
            n += 1;
            let now = chrono::Utc::now().timestamp_millis();
            let payload = format!(r#"{{"query_id":"q{n}","timestamp":{now},"results":["a","b"]}}"#);
            // A full queue during the outage only drops test traffic.
            let _ = producer.send(BaseRecord::<(), str>::to("imp").payload(&payload));
            producer.poll(Duration::ZERO);
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = producer.flush(Duration::from_secs(5));
    })
}

#[test]
fn a_ten_second_broker_outage_is_a_handful_of_lines_and_one_recovery_line() {
    let cluster = MockCluster::new(BROKERS).unwrap();
    cluster.create_topic("imp", 2, 1).unwrap();
    cluster.create_topic("eng", 2, 1).unwrap();
    create_state_topics(&cluster, "rankpulse", 2);
    let brokers = cluster.bootstrap_servers();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let sections = r#"
[kafka]
impressions_topic = "imp"
engagements_topic = "eng"
"#;
    let config = serve_config(dir.path(), "outage", &brokers, port, sections);
    let daemon = Daemon::spawn(&["serve", "--config", config.to_str().unwrap(), "--log-format", "json"]);
    let stop = Arc::new(AtomicBool::new(false));
    let producer = produce_until(brokers.clone(), stop.clone());
    let consumed = |m: &std::collections::BTreeMap<String, f64>| {
        m.get(&series("rankpulse_events_consumed_total", &[("topic", "imp")])).copied().unwrap_or(0.0)
    };
    scrape_until(port, Duration::from_secs(60), |m| consumed(m) > 0.0);
    let before = daemon.output().lines().count();

    for id in 1..=BROKERS {
        cluster.broker_down(id).unwrap();
    }
    // The outage itself, not a timed assertion.
    std::thread::sleep(Duration::from_secs(10));
    for id in 1..=BROKERS {
        cluster.broker_up(id).unwrap();
    }
    let recovered = |line: &Value| line["message"].as_str().is_some_and(|m| m.starts_with("Kafka reachable again"));
    wait_for(Instant::now() + Duration::from_secs(120), Duration::from_millis(200), "no recovery line", || {
        json_lines(&daemon.output()).iter().skip(before).any(recovered).then_some(())
    });
    // Consuming again after the outage, and a little longer for late repeats to show up.
    let (_, m) = scrape_until(port, Duration::from_secs(60), |m| consumed(m) > 0.0);
    let resumed_at = consumed(&m);
    scrape_until(port, Duration::from_secs(60), |m| consumed(m) > resumed_at + 20.0);
    stop.store(true, Ordering::Relaxed);
    producer.join().unwrap();

    let output = daemon.output();
    let lines = json_lines(&output);
    let during: Vec<&Value> = lines.iter().skip(before).collect();
    let alarms: Vec<String> = during.iter().filter(|l| is_alarm(l)).map(|l| l.to_string()).collect();
    let recoveries = during.iter().filter(|l| recovered(l)).count();
    eprintln!(
        "a 10 s outage of all {BROKERS} brokers: {} warnings and errors, {recoveries} recovery line:\n{}",
        alarms.len(),
        alarms.join("\n")
    );
    assert!(!alarms.is_empty(), "the outage was not reported at all:\n{output}");
    assert!(alarms.len() <= 5, "{} lines for one outage:\n{}", alarms.len(), alarms.join("\n"));
    assert_eq!(recoveries, 1, "exactly one recovery line:\n{output}");
    let (status, _) = daemon.terminate(Duration::from_secs(15));
    assert!(status.success());
    drop(cluster);
}

/// What `rankpulse serve` writes against a port nothing listens on, to its last line, once it
/// has reported the outage; stderr is a file, as under a container runtime.
fn serve_without_broker(extra: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let brokers = format!("127.0.0.1:{}", free_port());
    let config = serve_config(dir.path(), "nobroker", &brokers, free_port(), "");
    let mut args = vec!["serve", "--config", config.to_str().unwrap()];
    args.extend_from_slice(extra);
    let daemon = Daemon::spawn(&args);
    let deadline = Instant::now() + Duration::from_secs(60);
    wait_for(deadline, Duration::from_millis(100), "the outage was not reported", || {
        daemon.output().contains("no Kafka broker reachable").then_some(())
    });
    let (status, _, output) = daemon.terminate_with_output(Duration::from_secs(15));
    assert!(status.success(), "{output}");
    output
}

#[test]
fn logs_in_a_file_have_no_colour_codes() {
    let output = serve_without_broker(&[]);
    assert!(output.contains(" WARN "), "levels are where colour would be:\n{output}");
    assert!(!output.contains('\u{1b}'), "ANSI escape codes in a file:\n{output:?}");
}

#[test]
fn log_format_json_is_one_object_per_line() {
    let output = serve_without_broker(&["--log-format", "json"]);
    let lines = json_lines(&output);
    assert!(lines.len() >= 4, "{output}");
    assert!(lines.iter().all(|l| l["timestamp"].is_string() && l["target"].is_string()), "{output}");
    let outage =
        lines.iter().find(|l| l["message"].as_str().is_some_and(|m| m.starts_with("no Kafka broker reachable")));
    let outage = outage.expect("the outage line");
    assert_eq!(outage["level"], "WARN");
    assert_eq!(outage["client"], "consumer", "fields are top-level keys: {outage}");
    assert!(outage["brokers"].as_str().is_some_and(|b| b.starts_with("127.0.0.1:")), "{outage}");
}
