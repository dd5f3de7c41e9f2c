//! OpenSearch UBI input gives the same metrics as rankpulse's own events on the same traffic.
//!
//! The demo's generated A/B traffic (with its malformed messages and redelivered engagements) is
//! written once in the native format and once converted to UBI query and event documents, the
//! way a UBI-instrumented application would log it: hit lists under `query_response_hit_ids` (or
//! the older `query_response_object_ids`), experiment and variant in `query_attributes` under
//! configured keys, the interleaving duel's lists as hit objects marked with their
//! `_search_configuration_id`, `client_id` and `session_id` (top level or in `query_attributes`) where the
//! traffic has them, clicks and purchases as `action_name` with the result in
//! `event_attributes.object.object_id`, timestamps in the several forms UBI producers use. Both
//! go through `rankpulse replay`, and the UBI documents also through `rankpulse serve` on
//! librdkafka's mock cluster; every metric of every group and window must be identical, and so
//! must the whole replay report.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use rdkafka::config::ClientConfig;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use serde_json::{json, Value};

const START_MS: i64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z

/// One event-time instant in the i-th of the forms UBI producers write: epoch milliseconds,
/// RFC 3339 in UTC, RFC 3339 with an offset, and ISO 8601 without an offset (read as UTC).
fn ubi_timestamp(ms: i64, i: usize) -> Value {
    let utc = chrono::DateTime::from_timestamp_millis(ms).unwrap();
    match i % 4 {
        0 => json!(ms),
        1 => json!(utc.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()),
        2 => {
            let offset = chrono::FixedOffset::east_opt(2 * 3600).unwrap();
            json!(utc.with_timezone(&offset).format("%Y-%m-%dT%H:%M:%S%.3f%:z").to_string())
        }
        _ => json!(utc.format("%Y-%m-%dT%H:%M:%S%.3f").to_string()),
    }
}

/// A native impression line as the UBI query document a UBI-instrumented search would log.
/// Lines that are not JSON objects stay as they are; malformed ones stay malformed the same way.
fn to_ubi_query(line: &str, i: usize) -> String {
    let Ok(Value::Object(mut native)) = serde_json::from_str::<Value>(line) else {
        return line.to_string();
    };
    let mut doc = serde_json::Map::new();
    doc.insert("application".into(), json!("rankpulse-test"));
    doc.insert("user_query".into(), json!(format!("query {i}")));
    doc.insert("query_response_id".into(), json!(format!("response-{i}")));
    let mut attributes = serde_json::Map::new();
    attributes.insert("page".into(), json!(1));
    // An interleaved list as Search Relevance Workbench marks it: each hit with the search
    // configuration that contributed it; the rankers named in every third document (the
    // others get them in sorted order, the same here: baseline, candidate).
    if let Some(Value::Array(teams)) = native.remove("teams") {
        let results = native.remove("results").unwrap();
        let hits: Vec<Value> = results
            .as_array()
            .unwrap()
            .iter()
            .zip(&teams)
            .map(|(id, team)| json!({"_id": id, "_search_configuration_id": team, "_score": 1.0}))
            .collect();
        doc.insert("query_response_hits".into(), json!(hits));
        let rankers = native.remove("interleaving").unwrap();
        if i % 3 == 0 {
            attributes.insert("interleaving".into(), rankers);
        }
    }
    for (key, value) in native {
        match key.as_str() {
            "timestamp" => {
                let ts = value.as_i64().map_or(value, |ms| ubi_timestamp(ms, i));
                doc.insert("timestamp".into(), ts);
            }
            // Half the documents use the plugin's older field name for the hit list.
            "results" if i % 2 == 0 => {
                doc.insert("query_response_hit_ids".into(), value);
            }
            "results" => {
                doc.insert("query_response_object_ids".into(), value);
            }
            "experiment" => {
                attributes.insert("ab_experiment".into(), value);
            }
            "variant" => {
                attributes.insert("ab_variant".into(), value);
            }
            // The session as some producers log it (top level), and as others do (an attribute).
            "session_id" if i % 2 == 1 => {
                attributes.insert("session_id".into(), value);
            }
            _ => {
                doc.insert(key, value);
            }
        }
    }
    doc.insert("query_attributes".into(), Value::Object(attributes));
    Value::Object(doc).to_string()
}

/// A native engagement line as a UBI event document. UBI events carry no event id: redelivered
/// copies are recognized by query, object, action and timestamp, as for native events without one.
fn to_ubi_event(line: &str, i: usize) -> String {
    let Ok(Value::Object(native)) = serde_json::from_str::<Value>(line) else {
        return line.to_string();
    };
    let ts = native["timestamp"].as_i64().expect("generated engagements have integer timestamps");
    json!({
        "application": "rankpulse-test",
        "action_name": native["action"],
        "query_id": native["query_id"],
        "session_id": format!("session-{}", native["query_id"].as_str().unwrap()),
        "timestamp": ubi_timestamp(ts, i),
        "message_type": "INTERACTION",
        "event_attributes": {
            "object": {"object_id": native["doc_id"], "object_id_field": "doc_id", "description": "a result"},
            "position": {"ordinal": native["position"], "page_depth": 1},
        },
    })
    .to_string()
}

/// Writes the generated traffic natively and as UBI; returns the four files and the number of
/// impression lines.
fn write_both(dir: &Path, count: u64, per_second: u32) -> ([PathBuf; 4], usize) {
    let (mut imp, mut eng) = (Vec::new(), Vec::new());
    let at = (count, per_second, 7, START_MS);
    let extras = rankpulse::demo::Extras { duel: true, judgments: None, pre_period: 0 };
    rankpulse::demo::write_traffic_with(&mut imp, &mut eng, at, rankpulse::demo::FaultRate::DEMO, extras).unwrap();
    let (imp, eng) = (String::from_utf8(imp).unwrap(), String::from_utf8(eng).unwrap());
    let convert = |text: &str, f: fn(&str, usize) -> String| {
        text.lines().enumerate().map(|(i, l)| f(l, i) + "\n").collect::<String>()
    };
    let paths = ["imp.jsonl", "eng.jsonl", "ubi_queries.jsonl", "ubi_events.jsonl"].map(|n| dir.join(n));
    std::fs::write(&paths[0], &imp).unwrap();
    std::fs::write(&paths[1], &eng).unwrap();
    std::fs::write(&paths[2], convert(&imp, to_ubi_query)).unwrap();
    std::fs::write(&paths[3], convert(&eng, to_ubi_event)).unwrap();
    (paths, imp.lines().count())
}

const JOIN: &str = r#"
[join]
attribution_window = "10s"
max_out_of_orderness = "2s"
idle_timeout = "3s"
[metrics]
windows = ["10s", "1m"]
[limits]
max_past = "3650d"   # the traffic is stamped 2026-01-01
[ab]
# Clients as the A/B unit: the whole-report comparison then also covers the UBI client_id
# mapping (cluster-robust errors and the split test count clients).
unit = "client_id"
"#;

const UBI: &str = r#"
[ubi]
experiment_key = "ab_experiment"
variant_key = "ab_variant"
"#;

fn write_config(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    checked(path)
}

/// A configuration file that `rankpulse check-config` accepts.
fn checked(path: PathBuf) -> PathBuf {
    let name = path.file_name().unwrap().to_string_lossy();
    let out = Command::new(BIN).args(["check-config", "--config", path.to_str().unwrap()]).output().unwrap();
    assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
    path
}

/// Every (group, metric) mean of a replay report's groups, keyed `experiment/variant metric`.
/// The JSON path of the first difference between two documents, with both values.
fn first_difference(a: &Value, b: &Value, path: &str) -> String {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, v) in x {
                match y.get(k) {
                    Some(w) if v == w => {}
                    Some(w) => return first_difference(v, w, &format!("{path}.{k}")),
                    None => return format!("{path}.{k}: only in the first"),
                }
            }
            format!("{path}: keys only in the second")
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            let i = x.iter().zip(y).position(|(v, w)| v != w).unwrap_or(0);
            first_difference(&x[i], &y[i], &format!("{path}[{i}]"))
        }
        _ => format!("{path}: {a} vs {b}"),
    }
}

fn group_means(groups: &Value) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for g in groups.as_array().unwrap() {
        let group = format!("{}/{}", g["experiment"].as_str().unwrap(), g["variant"].as_str().unwrap());
        out.insert(format!("{group} impressions"), g["impressions"].as_f64().unwrap());
        out.insert(format!("{group} engaged"), g["engaged"].as_f64().unwrap());
        for (metric, value) in g["metrics"].as_object().unwrap() {
            out.insert(format!("{group} {metric}"), value.as_f64().unwrap());
        }
    }
    out
}

/// The same join settings twice: for native events, and for UBI documents on both inputs.
fn native_and_ubi_configs(dir: &Path) -> (PathBuf, PathBuf) {
    let native = write_config(dir, "native.toml", JOIN);
    let ubi = write_config(
        dir,
        "ubi.toml",
        &format!("[kafka]\nimpressions_format = \"ubi\"\nengagements_format = \"ubi\"\n{JOIN}{UBI}"),
    );
    (native, ubi)
}

#[test]
fn ubi_documents_replay_to_the_same_metrics_as_native_events() {
    let dir = tempfile::tempdir().unwrap();
    let ([imp, eng, queries, events], lines) = write_both(dir.path(), 20_000, 200);
    let (native_cfg, ubi_cfg) = native_and_ubi_configs(dir.path());
    let native = replay_json(&imp, &eng, &native_cfg);
    let ubi = replay_json(&queries, &events, &ubi_cfg);

    // Every mean of every group, cumulatively and in every closed window.
    let mut compared = 0usize;
    let mut max_difference = 0f64;
    let mut check = |a: &Value, b: &Value, context: &str| {
        let (a, b) = (group_means(a), group_means(b));
        assert_eq!(
            a.keys().collect::<Vec<_>>(),
            b.keys().collect::<Vec<_>>(),
            "{context}: the same groups and metrics"
        );
        for (key, x) in &a {
            max_difference = max_difference.max((x - b[key]).abs());
            compared += 1;
        }
    };
    check(&native["groups"], &ubi["groups"], "cumulative");
    let (nw, uw) = (native["windows"].as_array().unwrap(), ubi["windows"].as_array().unwrap());
    assert_eq!(nw.len(), uw.len(), "the same closed windows");
    for (a, b) in nw.iter().zip(uw) {
        assert_eq!((&a["size"], &a["start"]), (&b["size"], &b["start"]));
        check(&a["groups"], &b["groups"], &format!("window {} {}", a["size"], a["start"]));
    }
    // The event accounting too: rejects (the generator's malformed lines), duplicates, late ones.
    assert_eq!(native["events"], ubi["events"], "event counts");
    // And everything else the report holds (whatever keys it has), exactly.
    assert!(native == ubi, "the whole replay report differs, first at {}", first_difference(&native, &ubi, "$"));

    let impressions: f64 =
        native["groups"].as_array().unwrap().iter().map(|g| g["impressions"].as_f64().unwrap()).sum();
    eprintln!(
        "UBI vs native replay: {lines} impression lines, {impressions} finalized impressions, {} groups, {} windows, \
         {compared} values compared, largest difference {max_difference:e}, events {}",
        native["groups"].as_array().unwrap().len(),
        nw.len(),
        native["events"]
    );
    assert_eq!(max_difference, 0.0, "UBI and native metrics must be identical");
    assert!(impressions >= 19_000.0 && native["events"]["rejected"].as_u64().unwrap() > 0);
    assert_eq!(
        native["groups"].as_array().unwrap().len(),
        6,
        "none/none, control, treatment, the duel's interleaved comparison and its A/B twin's control and treatment"
    );
    let duel = native["experiments"].as_array().unwrap().iter().find(|e| e["experiment"] == "ranker-duel").unwrap();
    assert!(duel["interleaving"][0]["impressions"].as_u64().unwrap() > 4_000, "{}", duel["interleaving"]);
    assert!(nw.len() >= 12 && compared > 1_500, "{} windows, {compared} values", nw.len());
}

/// `replay --trec-out` on UBI documents writes the same qrels and run, byte for byte, as on the
/// native events: the TREC writer reads the ids through the engine's own decoders.
#[test]
fn ubi_documents_write_the_same_trec_files_as_native_events() {
    let dir = tempfile::tempdir().unwrap();
    let ([imp, eng, queries, events], lines) = write_both(dir.path(), 5_000, 200);
    let (native_cfg, ubi_cfg) = native_and_ubi_configs(dir.path());
    let trec = |impressions: &Path, engagements: &Path, config: &Path, name: &str| {
        let out_dir = dir.path().join(name);
        let out = Command::new(BIN)
            .args(["replay", "--impressions", impressions.to_str().unwrap(), "--engagements"])
            .args([engagements.to_str().unwrap(), "--config", config.to_str().unwrap(), "--format", "json"])
            .args(["--trec-out", out_dir.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(out.status.success(), "{name} replay failed: {}", String::from_utf8_lossy(&out.stderr));
        ["qrels.txt", "run.txt"].map(|file| std::fs::read_to_string(out_dir.join(file)).unwrap())
    };
    let [native_qrels, native_run] = trec(&imp, &eng, &native_cfg, "native");
    let [ubi_qrels, ubi_run] = trec(&queries, &events, &ubi_cfg, "ubi");
    let judged = native_qrels.lines().count();
    eprintln!("TREC files of UBI vs native replay: {lines} impression lines, {judged} judged results");
    assert!(judged > 8 * lines && native_run.lines().count() == judged, "{judged} judgments of {lines} impressions");
    assert!(native_qrels.lines().any(|l| !l.ends_with(" 0")), "some result has a gain");
    assert!(
        native_qrels == ubi_qrels,
        "qrels.txt differs from line {}",
        first_line_difference(&native_qrels, &ubi_qrels)
    );
    assert!(native_run == ubi_run, "run.txt differs from line {}", first_line_difference(&native_run, &ubi_run));
}

/// The first differing line (1-based) of two texts, with both versions.
fn first_line_difference(a: &str, b: &str) -> String {
    let (mut x, mut y) = (a.lines(), b.lines());
    for n in 1.. {
        match (x.next(), y.next()) {
            (None, None) => break,
            (l, r) if l != r => return format!("{n}: {l:?} vs {r:?}"),
            _ => {}
        }
    }
    "none".to_string()
}

/// The Prometheus series of a replay metric key, and the labels beyond experiment and variant.
fn series_of(metric: &str) -> Option<(&'static str, Vec<(&'static str, String)>)> {
    let (name, k) = metric.split_once('@').map_or((metric, None), |(n, k)| (n, Some(k.to_string())));
    let with_k = |family: &'static str| Some((family, vec![("k", k.clone().unwrap())]));
    match name {
        "mrr" => Some(("rankpulse_reciprocal_rank", vec![])),
        "r_precision" => Some(("rankpulse_r_precision", vec![])),
        "hit_rate" => with_k("rankpulse_hit"),
        "precision" => with_k("rankpulse_precision"),
        "recall" => with_k("rankpulse_recall"),
        "map" => with_k("rankpulse_average_precision"),
        "f1" => with_k("rankpulse_f1"),
        "err" => with_k("rankpulse_err"),
        "ndcg" => Some(("rankpulse_ndcg", vec![("k", k.unwrap()), ("gain", "linear".into())])),
        "ndcg_exp" => Some(("rankpulse_ndcg", vec![("k", k.unwrap()), ("gain", "exponential".into())])),
        "iprec" => Some(("rankpulse_interpolated_precision", vec![("recall", k.unwrap())])),
        _ => None,
    }
}

#[test]
fn ubi_documents_through_kafka_match_native_replay() {
    const IMPRESSIONS: &str = "ubi_queries";
    const ENGAGEMENTS: &str = "ubi_events";
    let dir = tempfile::tempdir().unwrap();
    let ([imp, eng, queries, events], _) = write_both(dir.path(), 3_000, 100);
    let native = replay_json(&imp, &eng, &write_config(dir.path(), "native.toml", JOIN));

    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic(IMPRESSIONS, 2, 1).unwrap();
    cluster.create_topic(ENGAGEMENTS, 2, 1).unwrap();
    create_state_topics(&cluster, "rankpulse", 2);
    let brokers = cluster.bootstrap_servers();
    let producer: BaseProducer = ClientConfig::new().set("bootstrap.servers", &brokers).create().unwrap();
    let mut produced = 0;
    for (topic, path) in [(IMPRESSIONS, &queries), (ENGAGEMENTS, &events)] {
        for line in std::fs::read_to_string(path).unwrap().lines() {
            // Keyed by query_id, as the manual asks producers to (docs/src/events.md), so a query
            // and its events co-partition.
            let key = serde_json::from_str::<Value>(line)
                .ok()
                .and_then(|v| v["query_id"].as_str().map(str::to_string))
                .unwrap_or_default();
            let mut record = BaseRecord::to(topic).key(key.as_str()).payload(line);
            while let Err((_, returned)) = producer.send(record) {
                producer.poll(Duration::from_millis(10));
                record = returned;
            }
            produced += 1;
        }
    }
    producer.flush(Duration::from_secs(30)).unwrap();

    let port = free_port();
    let sections = format!(
        "[kafka]\nimpressions_topic = \"{IMPRESSIONS}\"\nengagements_topic = \"{ENGAGEMENTS}\"\n\
         impressions_format = \"ubi\"\nengagements_format = \"ubi\"\n{JOIN}{UBI}"
    );
    let config = checked(serve_config(dir.path(), "serve", &brokers, port, &sections));
    let started = Instant::now();
    let daemon = Daemon::spawn(&["serve", "--config", config.to_str().unwrap()]);
    let expected = group_means(&native["groups"]);
    let total = |m: &BTreeMap<String, f64>| {
        m.iter().filter(|(k, _)| k.starts_with("rankpulse_impressions_total{")).map(|(_, v)| v).sum::<f64>()
    };
    let want_total: f64 = expected.iter().filter(|(k, _)| k.ends_with(" impressions")).map(|(_, v)| v).sum();
    let (exposition, m) = scrape_until(port, Duration::from_secs(90), |m| {
        total(m) >= want_total && m.get("rankpulse_pending_impressions") == Some(&0.0)
    });
    let took = started.elapsed();

    let mut compared = 0usize;
    let mut max_difference = 0f64;
    for (key, want) in &expected {
        let (group, metric) = key.rsplit_once(' ').unwrap();
        let (experiment, variant) = group.split_once('/').unwrap();
        let get = |name: String, extra: &[(&'static str, String)]| {
            let mut labels: Vec<(&str, &str)> = vec![("experiment", experiment), ("variant", variant)];
            labels.extend(extra.iter().map(|(k, v)| (*k, v.as_str())));
            let s = series(&name, &labels);
            *m.get(&s).unwrap_or_else(|| panic!("{s} missing from:\n{exposition}"))
        };
        let got = match metric {
            "impressions" => get("rankpulse_impressions_total".into(), &[]),
            "engaged" => get("rankpulse_impressions_engaged_total".into(), &[]),
            "abandonment_rate" => {
                1.0 - get("rankpulse_impressions_engaged_total".into(), &[])
                    / get("rankpulse_impressions_total".into(), &[])
            }
            _ => {
                let (family, extra) = series_of(metric).unwrap_or_else(|| panic!("unmapped metric {metric}"));
                get(format!("{family}_sum"), &extra) / get(format!("{family}_count"), &extra)
            }
        };
        let difference = (got - want).abs();
        assert!(difference < 1e-12, "{key}: UBI through Kafka {got}, native replay {want}");
        max_difference = max_difference.max(difference);
        compared += 1;
    }
    // The generator's malformed lines are rejected for the same reasons as natively.
    let rejected: f64 =
        m.iter().filter(|(k, _)| k.starts_with("rankpulse_events_rejected_total{")).map(|(_, v)| v).sum();
    assert_eq!(rejected, native["events"]["rejected"].as_f64().unwrap(), "rejected messages");
    assert_eq!(
        m["rankpulse_engagements_attributed_total"],
        native["events"]["engagements_attributed"].as_f64().unwrap()
    );
    promtool_check(&exposition);
    eprintln!(
        "UBI through Kafka: {produced} messages, {want_total} impressions finalized after {took:.1?}, {compared} values \
         equal to native replay (largest difference {max_difference:e})"
    );
    let (status, _) = daemon.terminate(Duration::from_secs(10));
    assert!(status.success(), "serve exited with {status:?}");
    drop(producer);
}
