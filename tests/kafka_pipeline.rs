//! The real `rankpulse serve` binary against librdkafka's mock cluster (the Kafka protocol, in
//! this process): known impressions and engagements, malformed messages among them, the
//! exported `_sum`/`_count` compared to hand-computed values, offsets committed on SIGTERM, and
//! `replay` of the same events giving the same means; and the same events in batches of every
//! codec Kafka producers use, with the state topics in zstd.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;
use rdkafka::{Offset, TopicPartitionList};
use serde_json::json;

const T0: i64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z
const IMPRESSIONS: &str = "imp";
const ENGAGEMENTS: &str = "eng";

/// The impressions and engagements messages.
fn events() -> (Messages, Messages) {
    let imp = |q: &str, dt: i64, results: &[&str], variant: &str| {
        json!({"query_id": q, "timestamp": T0 + dt, "results": results, "experiment": "e1", "variant": variant, "user": "ignored"}).to_string()
    };
    let eng = |q: &str, dt: i64, doc: &str, action: &str| {
        json!({"query_id": q, "timestamp": T0 + dt, "doc_id": doc, "action": action}).to_string()
    };
    let impressions = vec![
        (0, imp("q1", 0, &["a", "b", "c", "d"], "control")),
        (0, "{not json".to_string()),
        (1, imp("q2", 1000, &["a", "b", "c"], "control")),
        (0, imp("q3", 2000, &["a", "b", "c"], "treatment")),
        (1, json!({"query_id": "qx", "timestamp": "soon", "results": []}).to_string()),
        (1, imp("q4", 3000, &["a", "b"], "treatment")),
        (0, imp("q5", 4000, &["a", "b", "c"], "treatment")),
    ];
    let engagements = vec![
        (0, eng("q1", 500, "c", "click")),
        (0, json!({"query_id": "q1", "timestamp": T0}).to_string()),
        (1, eng("q2", 1500, "b", "click")),
        (1, eng("q2", 1600, "b", "click")),
        (0, eng("q3", 2100, "a", "click")),
        (1, json!({"query_id": "q2", "timestamp": T0, "doc_id": 5}).to_string()),
        (1, eng("q4", 3100, "zzz", "click")),
        (1, eng("q-missing", 3500, "a", "click")),
        (0, eng("q5", 4100, "a", "click")),
        (0, eng("q5", 4900, "b", "purchase")),
        (0, eng("q5", 6001, "c", "click")),
    ];
    (impressions, engagements)
}

/// The configuration of `serve` and `replay`, but for what differs per run (see
/// [`serve_config`]).
fn sections() -> String {
    format!(
        r#"
[kafka]
group_id = "it-group"
impressions_topic = "{IMPRESSIONS}"
engagements_topic = "{ENGAGEMENTS}"
[join]
attribution_window = "2s"
max_out_of_orderness = "0s"
idle_timeout = "1s"
[metrics]
cutoffs = [1, 3]
windows = ["5s"]
[limits]
max_past = "3650d"   # the events are stamped 2026-01-01
[state]
checkpoint_interval = "500ms"
"#
    )
}

/// A one-broker mock cluster with both input topics and the group's state topics, 2 partitions
/// each.
fn cluster() -> MockCluster<'static, DefaultProducerContext> {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic(IMPRESSIONS, 2, 1).unwrap();
    cluster.create_topic(ENGAGEMENTS, 2, 1).unwrap();
    create_state_topics(&cluster, "it-group", 2);
    cluster
}

fn close(got: f64, want: f64, what: &str) {
    // Sums are fixed point with 2^-56 resolution: equal to the exact value far below 1e-12.
    assert!((got - want).abs() < 1e-12, "{what}: got {got}, want {want}");
}

#[test]
fn serve_consumes_both_topics_and_exports_hand_computed_sums() {
    let cluster = cluster();
    let brokers = cluster.bootstrap_servers();
    let (impressions, engagements) = events();
    produce_to_partitions(&brokers, &[(IMPRESSIONS, &impressions), (ENGAGEMENTS, &engagements)]);

    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = serve_config(dir.path(), "rankpulse", &brokers, port, &sections());
    let daemon = Daemon::spawn(&["serve", "--config", cfg.to_str().unwrap()]);

    let key = |name: &str, variant: &str, extra: &[(&str, &str)]| {
        let mut labels = vec![("experiment", "e1"), ("variant", variant)];
        labels.extend_from_slice(extra);
        series(name, &labels)
    };
    let window_mrr = series(
        "rankpulse_window_mean",
        &[("window", "5s"), ("metric", "mrr"), ("experiment", "e1"), ("variant", "control")],
    );
    let (exposition, m) = scrape_until(port, Duration::from_secs(60), |m| {
        m.get(&key("rankpulse_impressions_total", "control", &[])) == Some(&2.0)
            && m.get(&key("rankpulse_impressions_total", "treatment", &[])) == Some(&3.0)
            && m.contains_key(&window_mrr)
            && m.get("rankpulse_engagements_orphaned_total") == Some(&1.0)
    });
    assert_eq!(http_get(port, "/healthz").map(|r| r.0), Some(200));
    assert_eq!(http_get(port, "/readyz").map(|r| r.0), Some(200));

    let l3 = 3f64.log2();
    let k1 = [("k", "1")];
    let k3 = [("k", "3")];
    let expected: Vec<(String, f64)> = vec![
        (key("rankpulse_reciprocal_rank_sum", "control", &[]), 1.0 / 3.0 + 0.5),
        (key("rankpulse_reciprocal_rank_count", "control", &[]), 2.0),
        (key("rankpulse_reciprocal_rank_sum", "treatment", &[]), 2.0),
        (key("rankpulse_reciprocal_rank_count", "treatment", &[]), 3.0),
        (key("rankpulse_hit_sum", "control", &k1), 0.0),
        (key("rankpulse_hit_sum", "control", &k3), 2.0),
        (key("rankpulse_hit_sum", "treatment", &k1), 2.0),
        (key("rankpulse_precision_sum", "control", &k3), 2.0 / 3.0),
        (key("rankpulse_precision_sum", "treatment", &k3), 1.0 / 3.0 + 2.0 / 3.0),
        (key("rankpulse_precision_sum", "treatment", &k1), 2.0),
        (key("rankpulse_recall_sum", "treatment", &k3), 2.0),
        (key("rankpulse_average_precision_sum", "control", &k3), 1.0 / 3.0 + 0.5),
        (key("rankpulse_average_precision_sum", "treatment", &k3), 2.0),
        (key("rankpulse_average_precision_count", "treatment", &k3), 3.0),
        (key("rankpulse_ndcg_sum", "control", &[("k", "3"), ("gain", "linear")]), 0.5 + 1.0 / l3),
        (
            key("rankpulse_ndcg_sum", "treatment", &[("k", "3"), ("gain", "linear")]),
            1.0 + (1.0 + 3.0 / l3) / (3.0 + 1.0 / l3),
        ),
        (
            key("rankpulse_ndcg_sum", "treatment", &[("k", "3"), ("gain", "exponential")]),
            1.0 + (1.0 + 7.0 / l3) / (7.0 + 1.0 / l3),
        ),
        (key("rankpulse_ndcg_count", "treatment", &[("k", "3"), ("gain", "exponential")]), 3.0),
        (key("rankpulse_impressions_engaged_total", "control", &[]), 2.0),
        (key("rankpulse_impressions_engaged_total", "treatment", &[]), 2.0),
        (series("rankpulse_events_consumed_total", &[("topic", IMPRESSIONS)]), 7.0),
        (series("rankpulse_events_consumed_total", &[("topic", ENGAGEMENTS)]), 11.0),
        (series("rankpulse_events_rejected_total", &[("topic", IMPRESSIONS), ("reason", "invalid_json")]), 1.0),
        (series("rankpulse_events_rejected_total", &[("topic", IMPRESSIONS), ("reason", "invalid_timestamp")]), 1.0),
        (series("rankpulse_events_rejected_total", &[("topic", ENGAGEMENTS), ("reason", "missing_field")]), 1.0),
        (series("rankpulse_events_rejected_total", &[("topic", ENGAGEMENTS), ("reason", "wrong_type")]), 1.0),
        (series("rankpulse_events_rejected_total", &[("topic", ENGAGEMENTS), ("reason", "invalid_json")]), 0.0),
        ("rankpulse_engagements_attributed_total".into(), 6.0),
        // q5's click 1 ms after its window.
        ("rankpulse_engagements_late_total".into(), 1.0),
        ("rankpulse_engagements_orphaned_total".into(), 1.0),
        (series("rankpulse_engagements_unattributed_total", &[("reason", "not_shown")]), 1.0),
        (series("rankpulse_engagements_unattributed_total", &[("reason", "outside_window")]), 0.0),
        ("rankpulse_pending_impressions".into(), 0.0),
        ("rankpulse_held_engagements".into(), 0.0),
        (window_mrr.clone(), (1.0 / 3.0 + 0.5) / 2.0),
        (series("rankpulse_window_start_timestamp_seconds", &[("window", "5s")]), (T0 / 1000) as f64),
    ];
    for (series, want) in &expected {
        let got = *m.get(series).unwrap_or_else(|| panic!("series {series} missing from:\n{exposition}"));
        close(got, *want, series);
    }
    assert!(m["rankpulse_first_engagement_delay_seconds_count"] == 4.0, "q1, q2, q3, q5 had a first engagement");
    promtool_check(&exposition);
    totals_are_per_partition(&exposition, &m);

    // SIGTERM: a clean exit within a few seconds, with every processed offset committed.
    let (status, took) = daemon.terminate(Duration::from_secs(10));
    assert!(status.success(), "exit status {status:?}");
    assert!(took < Duration::from_secs(5), "shutdown took {took:?}");
    let committed = committed_offsets(&brokers, "it-group");
    let expected_offsets: BTreeMap<(String, i32), i64> = [(IMPRESSIONS, &impressions), (ENGAGEMENTS, &engagements)]
        .iter()
        .flat_map(|(t, list)| {
            (0..2).map(move |p| ((t.to_string(), p), list.iter().filter(|(q, _)| *q == p).count() as i64))
        })
        .collect();
    assert_eq!(committed, expected_offsets);

    // The same events through `replay` give the same means as the online path.
    let imp_file = write_payloads(dir.path(), "impressions.jsonl", &impressions);
    let eng_file = write_payloads(dir.path(), "engagements.jsonl", &engagements);
    let report = replay_json(&imp_file, &eng_file, &cfg);
    let mut compared = 0;
    for group in report["groups"].as_array().unwrap() {
        let variant = group["variant"].as_str().unwrap();
        let online = |name: &str, extra: &[(&str, &str)]| {
            m[&key(&format!("{name}_sum"), variant, extra)] / m[&key(&format!("{name}_count"), variant, extra)]
        };
        let metrics = &group["metrics"];
        close(metrics["mrr"].as_f64().unwrap(), online("rankpulse_reciprocal_rank", &[]), "replay mrr");
        for k in ["1", "3"] {
            let kk = [("k", k)];
            close(metrics[format!("hit_rate@{k}")].as_f64().unwrap(), online("rankpulse_hit", &kk), "hit");
            close(metrics[format!("precision@{k}")].as_f64().unwrap(), online("rankpulse_precision", &kk), "precision");
            close(metrics[format!("recall@{k}")].as_f64().unwrap(), online("rankpulse_recall", &kk), "recall");
            close(metrics[format!("map@{k}")].as_f64().unwrap(), online("rankpulse_average_precision", &kk), "map");
            close(
                metrics[format!("ndcg@{k}")].as_f64().unwrap(),
                online("rankpulse_ndcg", &[("k", k), ("gain", "linear")]),
                "ndcg",
            );
            close(
                metrics[format!("ndcg_exp@{k}")].as_f64().unwrap(),
                online("rankpulse_ndcg", &[("k", k), ("gain", "exponential")]),
                "ndcg_exp",
            );
            compared += 6;
        }
        assert_eq!(group["impressions"].as_f64().unwrap(), m[&key("rankpulse_impressions_total", variant, &[])]);
        assert_eq!(group["engaged"].as_f64().unwrap(), m[&key("rankpulse_impressions_engaged_total", variant, &[])]);
    }
    assert_eq!(compared, 24);
    assert_eq!(report["events"]["rejected"], 4);
    assert_eq!(report["windows"][0]["size"], "5s");
    assert_eq!(report["windows"][0]["start"], "2026-01-01T00:00:00Z");
}

/// Each partition's totals are series of their own, labelled `partition`, and
/// `parse_exposition` reads their sum: partition 0 carries q1, q3 and q5 and partition 1 q2
/// and q4 (see [`events`]). Only the process's own measurements are per replica.
fn totals_are_per_partition(exposition: &str, merged: &BTreeMap<String, f64>) {
    let raw = parse_exposition_raw(exposition);
    let at = |name: &str, labels: &[(&str, &str)], partition: &str| {
        let mut labels = labels.to_vec();
        labels.push(("partition", partition));
        raw.get(&series(name, &labels)).copied()
    };
    let group = |variant| [("experiment", "e1"), ("variant", variant)];
    let impressions = |variant, p| at("rankpulse_impressions_total", &group(variant), p);
    assert_eq!([impressions("control", "0"), impressions("control", "1")], [Some(1.0), Some(1.0)]);
    assert_eq!([impressions("treatment", "0"), impressions("treatment", "1")], [Some(2.0), Some(1.0)]);
    let consumed = |topic, p| at("rankpulse_events_consumed_total", &[("topic", topic)], p);
    assert_eq!([consumed(IMPRESSIONS, "0"), consumed(IMPRESSIONS, "1")], [Some(4.0), Some(3.0)]);
    assert_eq!([consumed(ENGAGEMENTS, "0"), consumed(ENGAGEMENTS, "1")], [Some(6.0), Some(5.0)]);
    let rr = |variant, p| at("rankpulse_reciprocal_rank_sum", &group(variant), p).unwrap();
    close(rr("control", "0"), 1.0 / 3.0, "q1: first relevant at rank 3");
    close(rr("control", "1"), 0.5, "q2: first relevant at rank 2");
    assert_eq!(at("rankpulse_engagements_orphaned_total", &[], "1"), Some(1.0), "q-missing");
    assert_eq!(at("rankpulse_engagements_orphaned_total", &[], "0"), Some(0.0));

    let mut summed: BTreeMap<String, f64> = BTreeMap::new();
    for (key, value) in &raw {
        let name = key.split('{').next().unwrap();
        let total = ["_sum", "_count", "_bucket", "_total"].iter().any(|s| name.ends_with(s));
        assert_eq!(key.contains("partition=\""), total && !of_the_process(name), "{key}");
        let without_partition = match key.split_once('{') {
            Some((name, labels)) => {
                let kept: Vec<&str> =
                    labels.trim_end_matches('}').split(',').filter(|l| !l.starts_with("partition=")).collect();
                if kept.is_empty() {
                    name.to_string()
                } else {
                    format!("{name}{{{}}}", kept.join(","))
                }
            }
            None => key.clone(),
        };
        *summed.entry(without_partition).or_insert(0.0) += value;
    }
    assert_eq!(&summed, merged, "parse_exposition sums over the partition label");
}

fn committed_offsets(brokers: &str, group: &str) -> BTreeMap<(String, i32), i64> {
    let consumer: BaseConsumer =
        ClientConfig::new().set("bootstrap.servers", brokers).set("group.id", group).create().unwrap();
    let mut tpl = TopicPartitionList::new();
    for topic in [IMPRESSIONS, ENGAGEMENTS] {
        for p in 0..2 {
            tpl.add_partition(topic, p);
        }
    }
    let committed = consumer.committed_offsets(tpl, Duration::from_secs(10)).unwrap();
    let out = committed
        .elements()
        .iter()
        .map(|e| {
            let offset = match e.offset() {
                Offset::Offset(o) => o,
                other => panic!("no committed offset for {}/{}: {other:?}", e.topic(), e.partition()),
            };
            ((e.topic().to_string(), e.partition()), offset)
        })
        .collect();
    drop(committed);
    drop(consumer);
    out
}

/// Produces each partition's messages of `messages` to `topic` with a producer of its own whose
/// `compression.type` is that partition's entry of `codecs`, and waits until the brokers have
/// them. librdkafka sends a batch uncompressed when compressing would not make it smaller, so
/// every message carries a long padding field (fields not listed are ignored): each batch is
/// then far smaller compressed, and is sent so.
fn produce_compressed(brokers: &str, topic: &str, messages: &Messages, codecs: &[&str]) {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let padding = "relevance ".repeat(400);
    for (partition, codec) in (0..).zip(codecs) {
        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", brokers)
            .set("compression.type", *codec)
            // One batch of the partition's messages, not one message a batch.
            .set("linger.ms", "100")
            .create()
            .unwrap_or_else(|e| panic!("a producer with compression.type = {codec}: {e}"));
        for (_, payload) in messages.iter().filter(|(p, _)| *p == partition) {
            let padded = match serde_json::from_str::<serde_json::Value>(payload) {
                Ok(serde_json::Value::Object(mut event)) => {
                    event.insert("padding".into(), padding.clone().into());
                    serde_json::Value::Object(event).to_string()
                }
                // The malformed messages stay as they are.
                _ => payload.clone(),
            };
            producer.send(BaseRecord::<(), str>::to(topic).partition(partition).payload(&padded)).unwrap();
        }
        producer.flush(Duration::from_secs(10)).unwrap();
    }
}

/// Kafka producers compress their batches (`compression.type`; zstd is common in production):
/// each input partition here arrives in another codec, and `serve` reads all of them, as
/// exactly as uncompressed ones (the same hand-computed figures as above). Its own state topics
/// are written in zstd (`state.compression`), and a restart restores from them.
#[test]
fn batches_in_every_kafka_codec_are_read_and_state_in_zstd_is_restored() {
    let cluster = cluster();
    let brokers = cluster.bootstrap_servers();
    let (impressions, engagements) = events();
    produce_compressed(&brokers, IMPRESSIONS, &impressions, &["zstd", "snappy"]);
    produce_compressed(&brokers, ENGAGEMENTS, &engagements, &["gzip", "lz4"]);

    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    // The restart's rebalance waits `session.timeout.ms` - 1 s on the mock cluster's coordinator.
    let sections =
        format!("{}\ncompression = \"zstd\"\n[kafka.properties]\n\"session.timeout.ms\" = \"6000\"\n", sections());
    let cfg = serve_config(dir.path(), "rankpulse", &brokers, port, &sections);
    let group = |variant| [("experiment", "e1"), ("variant", variant)];
    let expected = [
        (series("rankpulse_events_consumed_total", &[("topic", IMPRESSIONS)]), 7.0),
        (series("rankpulse_events_consumed_total", &[("topic", ENGAGEMENTS)]), 11.0),
        (series("rankpulse_impressions_total", &group("control")), 2.0),
        (series("rankpulse_impressions_total", &group("treatment")), 3.0),
        (series("rankpulse_reciprocal_rank_sum", &group("control")), 1.0 / 3.0 + 0.5),
        (series("rankpulse_reciprocal_rank_sum", &group("treatment")), 2.0),
        ("rankpulse_engagements_attributed_total".to_string(), 6.0),
        ("rankpulse_engagements_orphaned_total".to_string(), 1.0),
        ("rankpulse_pending_impressions".to_string(), 0.0),
    ];
    let all_there = |m: &BTreeMap<String, f64>| {
        expected.iter().all(|(series, want)| m.get(series).is_some_and(|got| (got - want).abs() < 1e-12))
    };
    let checkpointed = series("rankpulse_changelog_records_total", &[("kind", "snapshot")]);

    let daemon = Daemon::spawn(&["serve", "--config", cfg.to_str().unwrap()]);
    let (exposition, m) =
        scrape_until(port, Duration::from_secs(60), |m| all_there(m) && m.get(&checkpointed).is_some_and(|n| *n > 0.0));
    assert!(all_there(&m), "not every figure as expected:\n{exposition}");
    let rejected: f64 =
        m.iter().filter(|(k, _)| k.starts_with("rankpulse_events_rejected_total{")).map(|(_, v)| v).sum();
    assert_eq!(rejected, 4.0, "the four malformed messages, and nothing else");
    let (status, _) = daemon.terminate(Duration::from_secs(10));
    assert!(status.success(), "exit status {status:?}");

    // The restarted daemon restores both partitions from the zstd-compressed changelog, and
    // its figures are the same.
    let restored = series("rankpulse_partition_restores_total", &[("source", "changelog")]);
    let restarted = Daemon::spawn(&["serve", "--config", cfg.to_str().unwrap()]);
    let (exposition, m) =
        scrape_until(port, Duration::from_secs(60), |m| all_there(m) && m.get(&restored) == Some(&2.0));
    assert!(all_there(&m) && m.get(&restored) == Some(&2.0), "not restored:\n{exposition}");
    let (status, _) = restarted.terminate(Duration::from_secs(10));
    assert!(status.success(), "exit status {status:?}");
}
