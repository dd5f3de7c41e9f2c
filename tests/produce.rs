//! `rankpulse produce`, the traffic source of the docker compose quick start: against a Kafka
//! cluster (librdkafka's mock cluster, over TCP from another process) it writes live impressions
//! keyed by query id and their engagements, with ids that a restarted producer does not repeat,
//! and stops cleanly after `--duration`.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::{Duration, Instant};

use common::BIN;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::mocking::MockCluster;
use serde_json::Value;

/// Every (key, payload) of a topic, read from the beginning until `idle` passes without a message.
fn read_all(brokers: &str, topic: &str) -> Vec<(String, Value)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", format!("read-{topic}"))
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    consumer.subscribe(&[topic]).unwrap();
    let mut out = Vec::new();
    let mut last = Instant::now();
    while last.elapsed() < Duration::from_secs(5) {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
            let key = String::from_utf8_lossy(m.key().unwrap_or_default()).to_string();
            let payload = serde_json::from_slice(m.payload().unwrap_or_default()).unwrap_or(Value::Null);
            out.push((key, payload));
            last = Instant::now();
        }
    }
    out
}

fn produce(brokers: &str) -> Duration {
    let started = Instant::now();
    let out = Command::new(BIN)
        .args(["produce", "--brokers", brokers, "--rate", "100", "--duration", "3"])
        .args(["--impressions-topic", "imp", "--engagements-topic", "eng"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    started.elapsed()
}

#[test]
fn produce_writes_live_keyed_traffic_and_restarts_without_repeating_ids() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("imp", 2, 1).unwrap();
    cluster.create_topic("eng", 2, 1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let before = chrono::Utc::now().timestamp_millis();
    let took = [produce(&brokers), produce(&brokers)];
    let after = chrono::Utc::now().timestamp_millis();
    assert!(took.iter().all(|t| *t < Duration::from_secs(10)), "--duration 3 took {took:?}");

    let impressions = read_all(&brokers, "imp");
    let valid: Vec<&(String, Value)> = impressions.iter().filter(|(_, v)| v["results"].is_array()).collect();
    // Two runs of 3 s at 100/s; a little slack for start-up. The interleaving duel adds one
    // impression for every two, half of them interleaved.
    let is_duel = |v: &Value| v["query_id"].as_str().unwrap().starts_with("d-");
    let ab = valid.iter().filter(|(_, v)| !is_duel(v)).count();
    assert!((450..=620).contains(&ab), "{ab} impressions");
    let duel: Vec<&Value> = valid.iter().map(|(_, v)| v).filter(|v| is_duel(v)).collect();
    assert!(duel.len() * 2 >= ab - 2 && duel.len() * 2 <= ab + 2, "{} duel impressions for {ab}", duel.len());
    let interleaved = duel.iter().filter(|v| v["experiment"] == "ranker-duel").count();
    assert!(duel.iter().filter(|v| v["experiment"] == "ranker-duel").all(|v| v["teams"].is_array()));
    assert!(interleaved * 2 >= duel.len() - 2 && interleaved * 2 <= duel.len() + 2, "{interleaved} of {}", duel.len());
    let mut ids = BTreeSet::new();
    let mut variants = BTreeMap::<String, usize>::new();
    for (key, v) in &valid {
        let id = v["query_id"].as_str().unwrap();
        assert_eq!(key, id, "impressions are keyed by query_id");
        assert!(ids.insert(id.to_string()), "query id {id} produced twice (across the two runs)");
        let ts = v["timestamp"].as_i64().unwrap();
        assert!((before..=after).contains(&ts), "live timestamps: {ts} not in [{before}, {after}]");
        *variants.entry(v["variant"].as_str().unwrap_or("none").to_string()).or_default() += 1;
    }
    assert!(variants.get("control").is_some_and(|n| *n > 100) && variants.get("treatment").is_some_and(|n| *n > 100));

    let engagements = read_all(&brokers, "eng");
    assert!(engagements.len() > 100, "{} engagements", engagements.len());
    let mut event_ids = BTreeSet::new();
    for (key, v) in &engagements {
        assert_eq!(key, v["query_id"].as_str().unwrap(), "engagements are keyed by query_id");
        assert!(ids.contains(key), "engagement for a query that was not produced: {v}");
        event_ids.insert(v["event_id"].as_str().unwrap().to_string());
    }
    // Redeliveries repeat an event id on purpose (about 1 in 200); distinct runs never share one.
    assert!(
        event_ids.len() * 100 >= engagements.len() * 97,
        "{} ids for {} engagements",
        event_ids.len(),
        engagements.len()
    );
}
