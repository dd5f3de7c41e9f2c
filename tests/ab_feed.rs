//! The A/B feed end to end: the real `rankpulse serve` binary against librdkafka's mock cluster
//! with the output topic on, read back by a plain consumer (one record per experiment and closed
//! window, equal to `replay`'s figures, judged figures included); a 55/45 split raising the
//! sample-ratio alarm; the HTTP API; and the cluster-robust standard error against a direct
//! per-client computation.

use crate::common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use rankpulse::config::Config;
use rankpulse::engine::Engine;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::mocking::MockCluster;
use rdkafka::Message;
use serde_json::{json, Value};

const T0: i64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z
const IMPRESSIONS: &str = "imp";
const ENGAGEMENTS: &str = "eng";
const OUTPUT: &str = "ab-feed";
/// Event time the traffic spans: three 5 s windows, one 10 s window and a half.
const SPAN_MS: i64 = 15_000;
/// Partitions of the input topics.
const PARTITIONS: i32 = 6;

/// A small deterministic generator, so the test needs no seed plumbing.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Impressions and engagements of two experiments: `e1` splits 50/50 and its treatment puts the
/// clicked result at rank 1 more often; `e2` splits 55/45 (expected 50/50) with equal quality.
/// Clients repeat (`c0`..`c399`) and some browse more than others, so impressions of one client
/// are correlated.
fn traffic(n: usize) -> (Messages, Messages, HashMap<String, String>) {
    let mut rng = Lcg(7);
    let (mut impressions, mut engagements, mut client_of) = (Vec::new(), Vec::new(), HashMap::new());
    for i in 0..n {
        let ts = T0 + (i as i64 * SPAN_MS) / n as i64;
        let query = format!("q{i}");
        let client = format!("c{}", (rng.next().powi(2) * 400.0) as u32);
        let (experiment, variant) = if i % 2 == 0 {
            ("e1", if rng.next() < 0.5 { "control" } else { "treatment" })
        } else {
            ("e2", if (i / 2) % 20 < 11 { "control" } else { "treatment" })
        };
        let results: Vec<String> = (0..5).map(|r| format!("d{}", (i * 7 + r) % 97)).collect();
        let partition = (i % PARTITIONS as usize) as i32;
        let mut impression = json!({"query_id": query, "timestamp": ts, "results": results, "experiment": experiment,
                                    "variant": variant, "client_id": client});
        // Two thirds name one of 40 head queries, of which the judgment list knows 30.
        if i % 3 != 0 {
            impression["query"] = json!(format!("Head Query {}", i % HEAD_QUERIES));
        }
        impressions.push((partition, impression.to_string()));
        client_of.insert(query.clone(), client.clone());
        let client_bias = (client[1..].parse::<f64>().unwrap() % 10.0) / 20.0; // 0 .. 0.45
        if rng.next() < 0.35 + client_bias {
            let rank = if experiment == "e1" && variant == "treatment" && rng.next() < 0.6 { 0 } else { 2 };
            engagements.push((
                partition,
                json!({"query_id": query, "timestamp": ts + 300, "doc_id": results[rank], "event_id": format!("x{i}")})
                    .to_string(),
            ));
        }
    }
    (impressions, engagements, client_of)
}

/// `n` team-draft interleaved impressions of experiment `e3` (rankers `base` and `cand`, whose
/// results are clicked more), spread over the same span and partitions, with their clicks.
fn add_interleaved(n: usize, impressions: &mut Messages, engagements: &mut Messages) {
    let mut rng = Lcg(11);
    for i in 0..n {
        let ts = T0 + (i as i64 * SPAN_MS) / n as i64;
        let query = format!("i{i}");
        let client = format!("c{}", (rng.next().powi(2) * 400.0) as u32);
        let results: Vec<String> = (0..6).map(|r| format!("d{}", (i * 5 + r) % 89)).collect();
        let teams: Vec<&str> = (0..6).map(|_| if rng.next() < 0.5 { "base" } else { "cand" }).collect();
        let partition = (i % PARTITIONS as usize) as i32;
        impressions.push((
            partition,
            json!({"query_id": query, "timestamp": ts, "results": results, "experiment": "e3", "client_id": client,
                   "interleaving": ["base", "cand"], "teams": teams})
            .to_string(),
        ));
        for (rank, team) in teams.iter().enumerate() {
            let p = if *team == "cand" { 0.22 } else { 0.15 };
            if rng.next() < p {
                let event = json!({"query_id": query, "timestamp": ts + 200 + rank as i64, "doc_id": results[rank],
                                   "event_id": format!("y{i}-{rank}")});
                engagements.push((partition, event.to_string()));
            }
        }
    }
    // In event-time order with the others, as a producer writes them (replay reads files in
    // order: an impression behind the watermark would be late).
    let time = |m: &(i32, String)| serde_json::from_str::<Value>(&m.1).unwrap()["timestamp"].as_i64().unwrap();
    impressions.sort_by_key(time);
    engagements.sort_by_key(time);
}

/// Head queries the traffic names; the judgment list judges the first 30.
const HEAD_QUERIES: usize = 40;

/// Writes the judgment list of the head queries: 40 of the 97 documents judged for each,
/// grades 0 to 3.
fn write_judgments(dir: &std::path::Path) -> std::path::PathBuf {
    let mut rng = Lcg(13);
    let mut lines = String::new();
    for q in 0..30 {
        for d in 0..97 {
            if rng.next() < 0.4 {
                let grade = (rng.next() * 4.0) as u32;
                lines.push_str(&format!(
                    "{}\n",
                    json!({"query": format!("head query {q}"), "doc_id": format!("d{d}"), "grade": grade})
                ));
            }
        }
    }
    let path = dir.join("judgments.jsonl");
    std::fs::write(&path, lines).unwrap();
    path
}

/// The configuration of `serve` and `replay`, but for what differs per run (see
/// [`serve_config`]).
fn sections(judgments: &std::path::Path) -> String {
    format!(
        r#"
[kafka]
group_id = "ab-group"
impressions_topic = "{IMPRESSIONS}"
engagements_topic = "{ENGAGEMENTS}"
[kafka.properties]
"session.timeout.ms" = "6000"
"heartbeat.interval.ms" = "500"
[join]
attribution_window = "1s"
max_out_of_orderness = "0s"
idle_timeout = "1s"
[metrics]
cutoffs = [1, 3]
windows = ["5s", "10s"]
[limits]
max_past = "3650d"   # the events are stamped 2026-01-01
[state]
checkpoint_interval = "500ms"
[ab]
output_topic = "{OUTPUT}"
[judgments]
file = "{}"
"#,
        judgments.display()
    )
}

/// Every record of the output topic until `expected` arrived and `quiet` passed with no more.
fn read_output(brokers: &str, expected: usize, timeout: Duration, quiet: Duration) -> Vec<(String, Value)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "a-plain-reader")
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    consumer.subscribe(&[OUTPUT]).unwrap();
    let deadline = Instant::now() + timeout;
    let mut records = Vec::new();
    let mut last_arrival = Instant::now();
    while Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(message)) => {
                let key = String::from_utf8(message.key().unwrap().to_vec()).unwrap();
                let value: Value = serde_json::from_slice(message.payload().unwrap()).unwrap();
                records.push((key, value));
                last_arrival = Instant::now();
            }
            Some(Err(e)) => panic!("consuming the output topic: {e}"),
            None if records.len() >= expected && last_arrival.elapsed() > quiet => break,
            None => {}
        }
    }
    consumer.unsubscribe();
    drop(consumer);
    records
}

#[test]
fn output_topic_gets_one_record_per_experiment_and_closed_window() {
    ab_feed_equals_replay(1);
}

/// Each replica owns a third of the partitions, yet the output topic, the API and the gauges
/// of every replica give the experiment-wide figures, equal to replay's.
#[test]
fn three_replicas_publish_and_serve_the_experiment_wide_report() {
    ab_feed_equals_replay(3);
}

/// The mock cluster with the input topics, the state topics of group `ab-group` and the output
/// topic.
fn cluster_with_topics() -> MockCluster<'static, rdkafka::producer::DefaultProducerContext> {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic(IMPRESSIONS, PARTITIONS, 1).unwrap();
    cluster.create_topic(ENGAGEMENTS, PARTITIONS, 1).unwrap();
    create_state_topics(&cluster, "ab-group", PARTITIONS);
    cluster.create_topic(OUTPUT, 1, 1).unwrap();
    cluster
}

/// Replay's window records (what the output topic should get), by record id.
/// A single replica's feed: every window of replay's once, each equal to replay's record (a
/// single replica's record covers partition 0 of its own view, as replay's one file does).
fn feed_equals_replay(records: &[(String, Value)], expected: &BTreeMap<String, Value>) {
    let unique: BTreeSet<&str> = records.iter().map(|(key, _)| key.as_str()).collect();
    assert_eq!(unique, expected.keys().map(String::as_str).collect(), "record ids");
    assert_eq!(records.len(), expected.len(), "each window published once");
    for (key, record) in records {
        let mut record = record.clone();
        record["partitions"] = json!([0]);
        assert_eq!(record, expected[key], "record {key} differs from replay's");
    }
}

fn window_records(replayed: &Value) -> BTreeMap<String, Value> {
    replayed["windows"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|w| w["experiments"].as_array().unwrap().iter())
        .map(|r| (r["id"].as_str().unwrap().to_string(), r.clone()))
        .collect()
}

/// Replay's cumulative reports, by experiment.
fn cumulative_reports(replayed: &Value) -> BTreeMap<String, Value> {
    replayed["experiments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["experiment"].as_str().unwrap().to_string(), r.clone()))
        .collect()
}

/// A backlog is consumed in less than a checkpoint interval, so one changelog write follows the
/// close of every window of the span: still, each window is a look and an A/B feed record,
/// equal to replay's (a partition's aggregates record carries every window no record carried
/// yet, not only the newest few).
#[test]
fn a_backlog_of_many_windows_is_published_whole() {
    let cluster = cluster_with_topics();
    let brokers = cluster.bootstrap_servers();
    let (impressions, engagements, _) = traffic(8_000);
    produce_to_partitions(&brokers, &[(IMPRESSIONS, &impressions), (ENGAGEMENTS, &engagements)]);

    let dir = tempfile::tempdir().unwrap();
    let judgments = write_judgments(dir.path());
    let one_second_windows = sections(&judgments)
        .replace(r#"windows = ["5s", "10s"]"#, r#"windows = ["1s"]"#)
        .replace(r#"checkpoint_interval = "500ms""#, r#"checkpoint_interval = "5s""#);
    assert!(one_second_windows.contains(r#"["1s"]"#) && one_second_windows.contains(r#""5s""#));
    let port = free_port();
    let cfg = serve_config(dir.path(), "backlog", &brokers, port, &one_second_windows);
    let imp_file = write_payloads(dir.path(), "imp.jsonl", &impressions);
    let eng_file = write_payloads(dir.path(), "eng.jsonl", &engagements);
    let replayed = replay_json(&imp_file, &eng_file, &cfg);
    let expected = window_records(&replayed);
    assert_eq!(expected.len(), 30, "fifteen 1 s windows of two experiments");

    let daemon = Daemon::spawn(&["serve", "--config", cfg.to_str().unwrap()]);
    let records = read_output(&brokers, expected.len(), Duration::from_secs(60), Duration::from_secs(6));
    feed_equals_replay(&records, &expected);
    let cumulative = cumulative_reports(&replayed);
    assert_eq!(cumulative["e1"]["sequential"]["looks"], 15);
    sequential_figures_equal_replay(port, &cumulative);
    let (_, m) = scrape_until(port, Duration::from_secs(10), |m| {
        m.contains_key(&series("rankpulse_ab_windows_skipped_total", &[("reason", "incomplete")]))
    });
    for reason in ["incomplete", "unwritten", "unpublished"] {
        assert_eq!(m[&series("rankpulse_ab_windows_skipped_total", &[("reason", reason)])], 0.0, "{reason}");
    }
    let (status, _) = daemon.terminate(Duration::from_secs(10));
    assert!(status.success());
}

/// A `serve` started on 130 minutes of traffic already in the topics, with 1-minute and
/// 5-minute windows: far more windows close before the first checkpoint than a partition may
/// keep unwritten (64 of a size). Each still reaches the feed once, equal to replay's, and none
/// is counted skipped (a partition writes its aggregates record as its closed windows reach a
/// record's worth, rather than dropping the oldest).
#[test]
fn a_backlog_past_the_unwritten_limit_reaches_the_feed_whole() {
    const MINUTES: i64 = 130;
    let cluster = cluster_with_topics();
    let brokers = cluster.bootstrap_servers();
    // Twelve impressions a minute, so every partition has some in every window.
    let (mut rng, mut impressions, mut engagements) = (Lcg(17), Vec::new(), Vec::new());
    for i in 0..MINUTES * 12 {
        let (ts, query, partition) = (T0 + i * 5_000, format!("b{i}"), (i % PARTITIONS as i64) as i32);
        let variant = if rng.next() < 0.5 { "control" } else { "treatment" };
        let results: Vec<String> = (0..4).map(|r| format!("d{}", (i + r) % 31)).collect();
        impressions.push((
            partition,
            json!({"query_id": query, "timestamp": ts, "results": results, "experiment": "e1", "variant": variant})
                .to_string(),
        ));
        if rng.next() < 0.4 {
            let doc = &results[(rng.next() * 4.0) as usize];
            let event = json!({"query_id": query, "timestamp": ts + 300, "doc_id": doc, "event_id": format!("b{i}")});
            engagements.push((partition, event.to_string()));
        }
    }
    produce_to_partitions(&brokers, &[(IMPRESSIONS, &impressions), (ENGAGEMENTS, &engagements)]);

    let dir = tempfile::tempdir().unwrap();
    let judgments = write_judgments(dir.path());
    let minute_windows = sections(&judgments)
        .replace(r#"windows = ["5s", "10s"]"#, r#"windows = ["1m", "5m"]"#)
        .replace(r#"checkpoint_interval = "500ms""#, r#"checkpoint_interval = "5s""#);
    assert!(minute_windows.contains(r#"["1m", "5m"]"#) && minute_windows.contains(r#""5s""#));
    let port = free_port();
    let cfg = serve_config(dir.path(), "long-backlog", &brokers, port, &minute_windows);
    let imp_file = write_payloads(dir.path(), "imp.jsonl", &impressions);
    let eng_file = write_payloads(dir.path(), "eng.jsonl", &engagements);
    let expected = window_records(&replay_json(&imp_file, &eng_file, &cfg));
    assert_eq!(expected.len(), 130 + 26, "every 1 m and 5 m window of the span");

    let daemon = Daemon::spawn(&["serve", "--config", cfg.to_str().unwrap()]);
    let records = read_output(&brokers, expected.len(), Duration::from_secs(120), Duration::from_secs(6));
    let unique: BTreeSet<&str> = records.iter().map(|(key, _)| key.as_str()).collect();
    let missing: Vec<&str> = expected.keys().map(String::as_str).filter(|id| !unique.contains(id)).collect();
    assert!(missing.is_empty(), "{} of {} windows never reached the feed: {missing:?}", missing.len(), expected.len());
    feed_equals_replay(&records, &expected);
    let (_, m) = scrape_until(port, Duration::from_secs(10), |m| {
        m.contains_key(&series("rankpulse_ab_windows_skipped_total", &[("reason", "unwritten")]))
    });
    for reason in ["incomplete", "unwritten", "unpublished"] {
        assert_eq!(m[&series("rankpulse_ab_windows_skipped_total", &[("reason", reason)])], 0.0, "{reason}");
    }
    let (status, _) = daemon.terminate(Duration::from_secs(10));
    assert!(status.success());
}

fn ab_feed_equals_replay(replicas: usize) {
    let cluster = cluster_with_topics();
    let brokers = cluster.bootstrap_servers();
    let (mut impressions, mut engagements, _) = traffic(8_000);
    add_interleaved(2_000, &mut impressions, &mut engagements);
    produce_to_partitions(&brokers, &[(IMPRESSIONS, &impressions), (ENGAGEMENTS, &engagements)]);

    let dir = tempfile::tempdir().unwrap();
    let judgments = write_judgments(dir.path());
    let ports: Vec<u16> = (0..replicas).map(|_| free_port()).collect();
    let configs: Vec<_> = ports
        .iter()
        .enumerate()
        .map(|(i, &port)| serve_config(dir.path(), &format!("replica{i}"), &brokers, port, &sections(&judgments)))
        .collect();
    let cfg = configs[0].clone();

    // What replay says about the same events: the expected record ids and their figures.
    let imp_file = write_payloads(dir.path(), "imp.jsonl", &impressions);
    let eng_file = write_payloads(dir.path(), "eng.jsonl", &engagements);
    let replayed = replay_json(&imp_file, &eng_file, &cfg);
    let expected = window_records(&replayed);
    // 5 s windows at 0, 5, 10 and 10 s windows at 0, 10, each with the three experiments.
    assert_eq!(expected.len(), 15, "{:?}", expected.keys().collect::<Vec<_>>());
    assert!(expected
        .values()
        .filter(|r| r["experiment"] == "e3")
        .all(|r| r["interleaving"][0]["impressions"].as_u64() > Some(0)));
    // Every window of e1 and e2 has judged impressions, compared between the variants.
    assert!(expected.values().filter(|r| r["experiment"] != "e3").all(|r| {
        r["judged"]["variants"].as_array().is_some_and(|v| v.len() == 2 && v[0]["impressions"].as_u64() > Some(50))
            && r["judged"]["comparisons"][0]["metrics"]["ndcg@3"]["p_value"].is_f64()
    }));

    let daemons: Vec<Daemon> =
        configs.iter().map(|cfg| Daemon::spawn(&["serve", "--config", cfg.to_str().unwrap()])).collect();
    // When one replica's join misses the group's first generation, the mock cluster takes two or
    // three cooperative rebalances before it owns its partitions, each the session timeout less a
    // second (hence the 6 s session timeout above: with librdkafka's default, 45 s, three took
    // 180 s on a 2-core machine running other tests), and no window is complete (nothing is
    // published) until every partition is owned. The joins usually coincide: seconds.
    let records = read_output(&brokers, expected.len(), Duration::from_secs(180), Duration::from_secs(3));

    let ids: Vec<&str> = records.iter().map(|(key, _)| key.as_str()).collect();
    let unique: BTreeSet<&str> = ids.iter().copied().collect();
    if replicas == 1 {
        let repeated: BTreeSet<&str> =
            unique.iter().copied().filter(|id| ids.iter().filter(|i| *i == id).count() > 1).collect();
        assert!(
            repeated.is_empty(),
            "{} records for {} ids; published more than once: {repeated:?}",
            ids.len(),
            unique.len()
        );
    }
    // With several replicas the publisher (the owner of partition 0) may change while the group
    // settles, and the new one may send a window again: at least once, under the same id, with
    // the same content, which the comparison below checks for every copy.
    assert_eq!(unique, expected.keys().map(String::as_str).collect(), "record ids");
    let all_partitions: Vec<i32> = (0..PARTITIONS).collect();
    for (key, record) in &records {
        assert_eq!(record["id"], key.as_str(), "the key is the record id");
        assert_eq!(record["partitions"], json!(all_partitions), "the report covers every partition");
        let mut record = record.clone();
        record["partitions"] = json!([0]); // replay reads one file as partition 0
        assert_eq!(record, expected[key], "record {key} differs from replay's");
    }

    // The skewed experiment raises the alarm, the balanced one does not; e1's treatment wins.
    let srm_p = |r: &Value| r["sample_ratio"]["p_value"].as_f64().unwrap();
    let e2_cumulative = replayed["experiments"].as_array().unwrap().iter().find(|r| r["experiment"] == "e2").unwrap();
    assert_eq!(e2_cumulative["sample_ratio"]["observed"], json!({"control": 2200, "treatment": 1800}));
    assert!(srm_p(e2_cumulative) < 0.001, "55/45 against 50/50: {}", srm_p(e2_cumulative));
    let e1_windows: Vec<&Value> = records.iter().map(|(_, r)| r).filter(|r| r["experiment"] == "e1").collect();
    assert!(e1_windows.iter().all(|r| srm_p(r) > 0.001), "e1 is split 50/50");
    for r in &e1_windows {
        let mrr = &r["comparisons"][0]["metrics"]["mrr"];
        assert!(mrr["difference"].as_f64().unwrap() > 0.0 && mrr["p_value"].as_f64().unwrap() < 0.05, "{mrr}");
    }
    // e3's candidate earns more credit.
    let e3_cumulative = replayed["experiments"].as_array().unwrap().iter().find(|r| r["experiment"] == "e3").unwrap();
    let pair = &e3_cumulative["interleaving"][0]["pairs"][0];
    assert_eq!((&pair["ranker"], &pair["opponent"]), (&json!("cand"), &json!("base")));
    assert!(pair["preference"].as_f64().unwrap() > 0.0 && pair["sign_test_p_value"].as_f64().unwrap() < 0.01, "{pair}");

    // The same figures on every replica's /metrics (newest closed window of each size) and
    // HTTP API; and the same anytime-valid cumulative figures, whose looks (one per complete 5 s
    // window) every replica takes from the experiment-wide windows.
    let cumulative = cumulative_reports(&replayed);
    assert_eq!(cumulative["e1"]["sequential"]["looks"], 3, "5 s windows at 0, 5 and 10 s");
    for &port in &ports {
        api_and_gauges_equal_replay(port, &expected, &all_partitions);
        sequential_figures_equal_replay(port, &cumulative);
    }
    for daemon in daemons {
        let (status, _) = daemon.terminate(Duration::from_secs(10));
        assert!(status.success());
    }
}

fn api_and_gauges_equal_replay(port: u16, expected: &BTreeMap<String, Value>, all_partitions: &[i32]) {
    let srm_p = |r: &Value| r["sample_ratio"]["p_value"].as_f64().unwrap();
    let newest_10s = series("rankpulse_window_start_timestamp_seconds", &[("window", "10s")]);
    let (exposition, m) = scrape_until(port, Duration::from_secs(30), |m| {
        m.contains_key(&series("rankpulse_ab_srm_p_value", &[("experiment", "e2"), ("window", "5s")]))
            && m.get(&newest_10s) == Some(&(((T0 + 10_000) / 1000) as f64))
    });
    promtool_check(&exposition);
    let newest_5s = &expected["e2/5s/2026-01-01T00:00:10Z"];
    assert_eq!(
        m[&series("rankpulse_ab_srm_p_value", &[("experiment", "e2"), ("window", "5s")])],
        srm_p(newest_5s),
        "gauge equals the record"
    );
    let e1_newest = &expected["e1/10s/2026-01-01T00:00:10Z"];
    let labels = [("experiment", "e1"), ("variant", "treatment"), ("metric", "mrr"), ("window", "10s")];
    for (gauge, field) in [("rankpulse_ab_difference", "difference"), ("rankpulse_ab_p_value", "p_value")] {
        let want = e1_newest["comparisons"][0]["metrics"]["mrr"][field].as_f64().unwrap();
        assert_eq!(m[&series(gauge, &labels)], want, "{gauge}");
    }
    let (status, body) = http_get(port, "/api/v1/experiments/e2?window=5s").unwrap();
    assert_eq!(status, 200, "{body}");
    let mut from_api: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(from_api["partitions"], json!(all_partitions));
    from_api["partitions"] = json!([0]);
    assert_eq!(from_api, *newest_5s);
    let (status, body) = http_get(port, "/api/v1/experiments").unwrap();
    let listing: Value = serde_json::from_str(&body).unwrap();
    assert_eq!((status, listing["experiments"].as_array().unwrap().len()), (200, 3), "{body}");
    // The interleaving gauges of the newest 10 s window equal the record's figures.
    let e3_newest = &expected["e3/10s/2026-01-01T00:00:10Z"]["interleaving"][0]["pairs"][0];
    let labels = [
        ("experiment", "e3"),
        ("variant", "base vs cand"),
        ("ranker", "cand"),
        ("opponent", "base"),
        ("window", "10s"),
    ];
    for (gauge, field) in
        [("rankpulse_interleaving_preference", "preference"), ("rankpulse_interleaving_p_value", "sign_test_p_value")]
    {
        assert_eq!(m[&series(gauge, &labels)], e3_newest[field].as_f64().unwrap(), "{gauge}");
    }
    // The judged gauges of the newest 10 s window equal the record's judged figures (to the
    // last bit but one: serde_json's default float parsing can be one ulp off, Rust's is not).
    let judged = &e1_newest["judged"];
    let close = |got: f64, want: &Value, what: &str| {
        let want = want.as_f64().unwrap();
        assert!((got - want).abs() <= 2.0 * f64::EPSILON * want.abs(), "{what}: {got} vs {want}");
    };
    let labels = [("experiment", "e1"), ("variant", "treatment"), ("metric", "ndcg@3"), ("window", "10s")];
    for (gauge, field) in [("rankpulse_judged_ab_difference", "difference"), ("rankpulse_judged_ab_p_value", "p_value")]
    {
        close(m[&series(gauge, &labels)], &judged["comparisons"][0]["metrics"]["ndcg@3"][field], gauge);
    }
    let labels = [("experiment", "e1"), ("variant", "control"), ("metric", "coverage@3"), ("window", "10s")];
    let control = &judged["variants"][0];
    close(
        m[&series("rankpulse_judged_window_mean", &labels)],
        &control["metrics"]["coverage@3"]["mean"],
        "judged mean",
    );
    assert_eq!(
        m[&series(
            "rankpulse_judged_window_impressions",
            &[("experiment", "e1"), ("variant", "control"), ("window", "10s")]
        )],
        control["impressions"].as_f64().unwrap()
    );
    assert_eq!(http_get(port, "/api/v1/experiments/e9").map(|r| r.0), Some(404));
    assert_eq!(http_get(port, "/api/v1/experiments/e1?window=7m").map(|r| r.0), Some(400));
}

/// The cumulative report's anytime-valid figures (API and `window="cumulative"` gauges) equal
/// replay's, to the bit.
fn sequential_figures_equal_replay(port: u16, replayed: &BTreeMap<String, Value>) {
    let labels = [("experiment", "e1"), ("variant", "treatment"), ("metric", "mrr"), ("window", "cumulative")];
    let (_, m) = scrape_until(port, Duration::from_secs(30), |m| {
        m.contains_key(&series("rankpulse_ab_always_valid_p_value", &labels))
    });
    for (experiment, want) in replayed {
        let (status, body) = http_get(port, &format!("/api/v1/experiments/{experiment}?window=cumulative")).unwrap();
        assert_eq!(status, 200, "{body}");
        let got: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(got["sequential"], want["sequential"], "{experiment}: the looks");
        assert_eq!(got["sample_ratio"]["sequential_p_value"], want["sample_ratio"]["sequential_p_value"]);
        // Every replica's cumulative interleaving figures are replay's: the sums of every
        // partition, through the aggregates topic.
        assert_eq!(got["interleaving"], want["interleaving"], "{experiment}: interleaving");
        // And their judged figures, summed the same way.
        assert_eq!(got["judged"], want["judged"], "{experiment}: judged");
        if want["comparisons"].as_array().unwrap().is_empty() {
            continue;
        }
        for field in ["difference_cs", "relative_difference_cs", "always_valid_p_value"] {
            let metrics = |r: &Value| r["comparisons"][0]["metrics"].as_object().unwrap().clone();
            for (metric, figures) in metrics(want) {
                assert_eq!(metrics(&got)[&metric][field], figures[field], "{experiment} {metric} {field}");
            }
        }
    }
    // Through the exposition's text, to the last digit it prints.
    let e1_mrr = &replayed["e1"]["comparisons"][0]["metrics"]["mrr"];
    let close = |gauge: &str, want: &Value| {
        let (got, want) = (m[&series(gauge, &labels)], want.as_f64().unwrap());
        assert!((got - want).abs() <= 1e-15 * want.abs(), "{gauge}: {got} vs {want}");
    };
    close("rankpulse_ab_always_valid_p_value", &e1_mrr["always_valid_p_value"]);
    close("rankpulse_ab_cs_lower", &e1_mrr["difference_cs"][0]);
    close("rankpulse_ab_cs_upper", &e1_mrr["difference_cs"][1]);
    let e2 = &replayed["e2"]["sample_ratio"]["sequential_p_value"];
    assert!(e2.as_f64().unwrap() < 0.001, "the 55/45 split is caught sequentially too: {e2}");
}

/// With `ab.unit = "client_id"` and more buckets than clients, the standard error in the report
/// is the delta-method error over clients, computed here directly from each impression's value.
#[test]
fn client_unit_standard_error_equals_a_direct_per_client_computation() {
    let (impressions, engagements, client_of) = traffic(6_000);
    let dir = tempfile::tempdir().unwrap();
    let imp_file = write_payloads(dir.path(), "imp.jsonl", &impressions);
    let eng_file = write_payloads(dir.path(), "eng.jsonl", &engagements);
    let toml = "[join]\nattribution_window = \"1s\"\n[metrics]\ncutoffs = [1, 3]\nwindows = [\"5s\"]\n\
                [ab]\nunit = \"client_id\"\nunit_buckets = 4294967295\n";
    let cfg = Config::from_toml_with_env(toml, "test", std::iter::empty()).unwrap();
    let mut engine = Engine::new(&cfg);
    let mrr_slot = engine.layout().keys().iter().position(|k| k.name() == "mrr").unwrap();

    // Every finalized impression's (group, query, mrr), to rebuild per-client sums here.
    let seen: Arc<Mutex<Vec<(u32, u128, f64)>>> = Arc::default();
    let sink = seen.clone();
    engine.set_observer(Box::new(move |f| sink.lock().unwrap().push((f.group, f.query, f.values[mrr_slot]))));
    let mut engine = rankpulse::replay::run(&imp_file, &eng_file, engine).unwrap();
    let report = rankpulse::replay::Report::from_engine(&mut engine);

    let client_by_key: HashMap<u128, &String> =
        client_of.iter().map(|(q, c)| (rankpulse::ids::query_key(q), c)).collect();
    let seen = seen.lock().unwrap();
    let mut checked = 0;
    for experiment in &report.experiments {
        for variant in &experiment.variants {
            let group = (0..engine.groups().len() as u32)
                .find(|&g| engine.groups().name(g) == (experiment.experiment.as_str(), variant.variant.as_str()))
                .unwrap();
            // Per client: N_i impressions and S_i the sum of their reciprocal ranks.
            let mut per_client: BTreeMap<&String, (f64, f64)> = BTreeMap::new();
            for (_, query, mrr) in seen.iter().filter(|(g, _, _)| *g == group) {
                let e = per_client.entry(client_by_key[query]).or_default();
                e.0 += 1.0;
                e.1 += mrr;
            }
            let k = per_client.len() as f64;
            let (n, s): (f64, f64) = per_client.values().fold((0.0, 0.0), |a, v| (a.0 + v.0, a.1 + v.1));
            let mu = s / n;
            // The textbook form: Var = (var(S) - 2 mu cov(S, N) + mu^2 var(N)) / (K Nbar^2),
            // with sample (co)variances over clients.
            let (nbar, sbar) = (n / k, s / k);
            let (mut var_s, mut var_n, mut cov_sn) = (0.0, 0.0, 0.0);
            for &(ni, si) in per_client.values() {
                var_s += (si - sbar) * (si - sbar) / (k - 1.0);
                var_n += (ni - nbar) * (ni - nbar) / (k - 1.0);
                cov_sn += (si - sbar) * (ni - nbar) / (k - 1.0);
            }
            let var = (var_s - 2.0 * mu * cov_sn + mu * mu * var_n) / (k * nbar * nbar);
            let (_, estimate) = variant.metrics.iter().find(|(key, _)| key == "mrr").unwrap();
            assert_eq!(variant.unit_buckets, Some(per_client.len()), "one bucket per client");
            assert!((estimate.mean - mu).abs() < 1e-12);
            let se = estimate.se.unwrap();
            assert!(
                (se - var.sqrt()).abs() < 1e-9,
                "{}/{}: se {se} vs direct {}",
                experiment.experiment,
                variant.variant,
                var.sqrt()
            );
            assert_eq!(estimate.df, Some(k - 1.0));
            // Clustering matters here: the impression-level error understates it.
            let naive = estimate.sd.unwrap() / (estimate.n as f64).sqrt();
            assert!(se > naive * 1.05, "clustered {se} vs naive {naive}");
            checked += 1;
        }
    }
    assert_eq!(checked, 4);
}
