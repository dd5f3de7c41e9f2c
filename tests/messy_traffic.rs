//! Production-like traffic through the real binary and librdkafka's mock cluster: a generated
//! stream with known ground truth, delivered shuffled within the disorder bound, with
//! redelivered impressions and engagements, orphan clicks, clicks on results not shown, clicks
//! outside the attribution window, malformed messages, and (after everything was finalized) late
//! clicks. Every exported `_sum` and `_count` must equal the ground truth exactly, and every
//! injected fault must be counted exactly once, in its own counter.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rankpulse::accumulate::GroupStats;
use rankpulse::metrics::{recall_level_label, MetricKind, MetricLayout};
use rdkafka::config::ClientConfig;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use serde_json::json;

const PARTITIONS: i32 = 4;
const IMPRESSIONS: usize = 3000;
const SPACING_MS: i64 = 20;
const WINDOW_MS: i64 = 5_000;
const BOUND_MS: i64 = 2_000;
const CUTOFFS: [u32; 3] = [1, 3, 10];
const GAINS: [(&str, u8); 4] = [("click", 1), ("add_to_cart", 2), ("purchase", 3), ("hover", 0)];
const IMP_TOPIC: &str = "impressions";
const ENG_TOPIC: &str = "engagements";

/// One message to produce: `order` is the delivery position within its topic-partition.
struct Message {
    topic: &'static str,
    partition: i32,
    order: i64,
    payload: String,
}

/// What the exporter must show.
#[derive(Default)]
struct Truth {
    /// Per (partition, variant): every total is exported per partition, and each is exact.
    groups: BTreeMap<(i32, &'static str), GroupStats>,
    consumed: [u64; 2],
    attributed: u64,
    duplicate_engagements: u64,
    duplicate_impressions: u64,
    not_shown: u64,
    outside_window: u64,
    orphaned: u64,
    late: u64,
    /// Of `late`: engagements just after their window (the others arrive after everything is final).
    late_after_window: u64,
    rejected: BTreeMap<(&'static str, &'static str), u64>,
}

fn partition_of(query: &str) -> i32 {
    (xxhash_rust::xxh3::xxh3_64(query.as_bytes()) % PARTITIONS as u64) as i32
}

/// Builds the stream. Returns (first-phase messages, late clicks for the second phase, truth).
fn generate(t0: i64, layout: &MetricLayout) -> (Vec<Message>, Vec<Message>, Truth) {
    let mut rng = SmallRng::seed_from_u64(42);
    let mut truth = Truth::default();
    let mut messages = Vec::new();
    let mut late_clicks = Vec::new();
    let mut values = vec![0.0; layout.len()];
    // Delivery position: the event time plus a jitter below the disorder bound, so no message is
    // delivered after one stamped more than the bound later.
    let push = |messages: &mut Vec<Message>, rng: &mut SmallRng, topic, query: &str, at: i64, payload: String| {
        let order = at + rng.random_range(0..BOUND_MS);
        messages.push(Message { topic, partition: partition_of(query), order, payload });
    };
    let mut event_no = 0;
    for i in 0..IMPRESSIONS {
        let t = t0 + i as i64 * SPACING_MS;
        let query = format!("q{i}");
        let variant = if i % 2 == 0 { "control" } else { "treatment" };
        let docs: Vec<String> = (0..10).map(|r| format!("d{}", (i * 7 + r * 13) % 997)).collect();
        let impression =
            json!({"query_id": query, "timestamp": t, "results": docs, "experiment": "exp", "variant": variant})
                .to_string();
        push(&mut messages, &mut rng, IMP_TOPIC, &query, t, impression.clone());
        truth.consumed[0] += 1;
        if rng.random_bool(0.03) {
            push(&mut messages, &mut rng, IMP_TOPIC, &query, t, impression);
            truth.consumed[0] += 1;
            truth.duplicate_impressions += 1;
        }

        let mut gains = [0u8; 10];
        for j in 0..rng.random_range(0..4) {
            // Treatment engages higher ranks.
            let rank = if variant == "treatment" { rng.random_range(0..4) } else { rng.random_range(0..10) };
            let (action, gain) = GAINS[rng.random_range(0..GAINS.len())];
            // Distinct timestamps per engagement, both window ends included.
            let at = t + [0, WINDOW_MS][j % 2] + if j < 2 { 0 } else { rng.random_range(1..WINDOW_MS) };
            event_no += 1;
            let mut e = json!({"query_id": query, "timestamp": at, "doc_id": docs[rank], "action": action});
            if rng.random_bool(0.8) {
                e["event_id"] = json!(format!("ev{event_no}"));
            }
            gains[rank] = gains[rank].max(gain);
            truth.attributed += 1;
            truth.consumed[1] += 1;
            let redelivered = rng.random_bool(0.1);
            let payload = e.to_string();
            push(&mut messages, &mut rng, ENG_TOPIC, &query, at, payload.clone());
            if redelivered {
                push(&mut messages, &mut rng, ENG_TOPIC, &query, at, payload);
                truth.consumed[1] += 1;
                truth.duplicate_engagements += 1;
            }
        }
        let fault: f64 = rng.random();
        let click = |doc: &str, at: i64, q: &str| json!({"query_id": q, "timestamp": at, "doc_id": doc}).to_string();
        if fault < 0.03 {
            push(&mut messages, &mut rng, ENG_TOPIC, &query, t + 10, click("not-in-the-list", t + 10, &query));
            truth.not_shown += 1;
        } else if fault < 0.05 {
            // One millisecond after the window: late, whether the impression is still open when
            // it is read or already final (that depends on how the topics interleave).
            let at = t + WINDOW_MS + 1;
            push(&mut messages, &mut rng, ENG_TOPIC, &query, at, click(&docs[0], at, &query));
            truth.late += 1;
            truth.late_after_window += 1;
        } else if fault < 0.07 {
            push(&mut messages, &mut rng, ENG_TOPIC, &query, t - 1, click(&docs[0], t - 1, &query));
            truth.outside_window += 1;
        } else if fault < 0.10 {
            let orphan = format!("orphan{i}");
            push(&mut messages, &mut rng, ENG_TOPIC, &orphan, t, click("d1", t, &orphan));
            truth.orphaned += 1;
        } else if fault < 0.12 {
            // A valid click for this impression that arrives only after everything was final.
            let order = i64::MAX;
            late_clicks.push(Message {
                topic: ENG_TOPIC,
                partition: partition_of(&query),
                order,
                payload: click(&docs[0], t + 100, &query),
            });
            truth.late += 1;
        }
        if fault < 0.12 {
            truth.consumed[1] += 1;
        }

        layout.evaluate(&gains, &[], &mut values);
        let engaged = values[layout.slot(MetricKind::Abandonment, None).unwrap()] == 0.0;
        truth
            .groups
            .entry((partition_of(&query), variant))
            .or_insert_with(|| GroupStats::new(rankpulse::accumulate::StatsShape::plain(layout.len())))
            .add(&values, engaged);
    }
    for (topic, payload, reason) in [
        (IMP_TOPIC, "{\"query_id\": ", "invalid_json"),
        (IMP_TOPIC, "{\"timestamp\": 1, \"results\": []}", "missing_field"),
        (ENG_TOPIC, "{\"query_id\": \"q1\", \"timestamp\": \"noon\", \"doc_id\": \"d\"}", "invalid_timestamp"),
        (ENG_TOPIC, "[1, 2]", "not_an_object"),
    ] {
        let at = t0 + rng.random_range(0..IMPRESSIONS as i64 * SPACING_MS);
        messages.push(Message {
            topic,
            partition: rng.random_range(0..PARTITIONS),
            order: at,
            payload: payload.into(),
        });
        truth.consumed[usize::from(topic == ENG_TOPIC)] += 1;
        *truth.rejected.entry((topic, reason)).or_default() += 1;
    }
    (messages, late_clicks, truth)
}

fn produce(producer: &BaseProducer, mut messages: Vec<Message>) {
    messages.sort_by_key(|m| m.order);
    for m in &messages {
        producer.send(BaseRecord::<(), str>::to(m.topic).partition(m.partition).payload(m.payload.as_str())).unwrap();
    }
    producer.flush(Duration::from_secs(30)).unwrap();
}

/// The Prometheus family and extra labels of a metric key.
fn series_of(kind: MetricKind, k: Option<u32>) -> Option<(&'static str, Vec<(&'static str, String)>)> {
    let k_label = || vec![("k", k.unwrap().to_string())];
    Some(match kind {
        MetricKind::ReciprocalRank => ("rankpulse_reciprocal_rank", vec![]),
        MetricKind::Hit => ("rankpulse_hit", k_label()),
        MetricKind::Precision => ("rankpulse_precision", k_label()),
        MetricKind::Recall => ("rankpulse_recall", k_label()),
        MetricKind::AveragePrecision => ("rankpulse_average_precision", k_label()),
        MetricKind::Ndcg => ("rankpulse_ndcg", vec![("k", k.unwrap().to_string()), ("gain", "linear".into())]),
        MetricKind::NdcgExp => ("rankpulse_ndcg", vec![("k", k.unwrap().to_string()), ("gain", "exponential".into())]),
        MetricKind::F1 => ("rankpulse_f1", k_label()),
        MetricKind::Err => ("rankpulse_err", k_label()),
        MetricKind::RPrecision => ("rankpulse_r_precision", vec![]),
        MetricKind::InterpolatedPrecision => {
            ("rankpulse_interpolated_precision", vec![("recall", recall_level_label(k.unwrap()))])
        }
        MetricKind::IpsClicks => ("rankpulse_ips_clicks", k_label()),
        MetricKind::IpsDcg => ("rankpulse_ips_dcg", k_label()),
        MetricKind::Abandonment => return None,
    })
}

#[test]
fn messy_stream_gives_exact_ground_truth_and_counts_every_fault_once() {
    let t0 = (chrono::Utc::now().timestamp_millis() - 600_000) / 10_000 * 10_000;
    let layout = MetricLayout::new(&CUTOFFS, 1, 3);
    let (messages, late_clicks, truth) = generate(t0, &layout);

    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic(IMP_TOPIC, PARTITIONS, 1).unwrap();
    cluster.create_topic(ENG_TOPIC, PARTITIONS, 1).unwrap();
    create_state_topics(&cluster, "messy", PARTITIONS);
    let brokers = cluster.bootstrap_servers();
    let producer: BaseProducer = ClientConfig::new().set("bootstrap.servers", &brokers).create().unwrap();
    produce(&producer, messages);

    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let sections = format!(
        "[kafka]\ngroup_id = \"messy\"\nimpressions_topic = \"{IMP_TOPIC}\"\nengagements_topic = \"{ENG_TOPIC}\"\n\
         [join]\nattribution_window = \"5s\"\nmax_out_of_orderness = \"2s\"\nidle_timeout = \"1s\"\n\
         [metrics]\ncutoffs = [1, 3, 10]\nwindows = [\"10s\"]\n"
    );
    let config = serve_config(dir.path(), "rankpulse", &brokers, port, &sections);
    let daemon = Daemon::spawn(&["serve", "--config", config.to_str().unwrap()]);

    // Phase 1: everything but the late clicks, until every impression is final.
    let group = |variant: &str| vec![("experiment", "exp".to_string()), ("variant", variant.to_string())];
    let total = |m: &BTreeMap<String, f64>| -> f64 {
        ["control", "treatment"].iter().filter_map(|v| m.get(&key("rankpulse_impressions_total", &group(v)))).sum()
    };
    scrape_until(port, Duration::from_secs(90), |m| {
        total(m) == IMPRESSIONS as f64 && m.get("rankpulse_pending_impressions") == Some(&0.0)
    });

    // Phase 2: clicks for impressions that are already final.
    let late = late_clicks.len() as f64;
    produce(&producer, late_clicks);
    let consumed = |m: &BTreeMap<String, f64>, topic: &str| {
        m.get(&key("rankpulse_events_consumed_total", &[("topic", topic.into())])).copied()
    };
    let (exposition, m) = scrape_until(port, Duration::from_secs(60), |m| {
        consumed(m, ENG_TOPIC) == Some(truth.consumed[1] as f64)
            && m.get("rankpulse_engagements_orphaned_total") == Some(&(truth.orphaned as f64))
    });
    assert_eq!(late, (truth.late - truth.late_after_window) as f64);

    let per_partition = parse_exposition_raw(&exposition);
    let mut compared = 0;
    for (&(partition, variant), stats) in &truth.groups {
        let mut labels = group(variant);
        labels.push(("partition", partition.to_string()));
        let m = &per_partition;
        let variant = format!("{variant} (partition {partition})");
        assert_eq!(m[&key("rankpulse_impressions_total", &labels)], stats.impressions as f64, "{variant} impressions");
        assert_eq!(m[&key("rankpulse_impressions_engaged_total", &labels)], stats.engaged as f64, "{variant} engaged");
        for (slot, metric) in layout.keys().iter().enumerate() {
            let Some((family, extra)) = series_of(metric.kind, metric.k) else { continue };
            let mut l = labels.clone();
            l.extend(extra);
            let sum = m[&key(&format!("{family}_sum"), &l)];
            let count = m[&key(&format!("{family}_count"), &l)];
            assert_eq!(sum, stats.sum(slot), "{variant} {} sum", metric.name());
            assert_eq!(count, stats.impressions as f64, "{variant} {} count", metric.name());
            compared += 2;
        }
    }
    eprintln!("messy traffic: {compared} sums and counts equal the ground truth exactly");

    let expect = |name: &str, labels: &[(&str, String)], want: u64| {
        assert_eq!(m.get(&key(name, labels)).copied(), Some(want as f64), "{name}{labels:?}");
    };
    expect("rankpulse_events_consumed_total", &[("topic", IMP_TOPIC.into())], truth.consumed[0]);
    expect("rankpulse_events_consumed_total", &[("topic", ENG_TOPIC.into())], truth.consumed[1]);
    expect("rankpulse_engagements_attributed_total", &[], truth.attributed);
    expect("rankpulse_engagements_duplicate_total", &[], truth.duplicate_engagements);
    expect("rankpulse_impressions_duplicate_total", &[], truth.duplicate_impressions);
    expect("rankpulse_engagements_unattributed_total", &[("reason", "not_shown".into())], truth.not_shown);
    expect("rankpulse_engagements_unattributed_total", &[("reason", "outside_window".into())], truth.outside_window);
    expect("rankpulse_engagements_orphaned_total", &[], truth.orphaned);
    expect("rankpulse_engagements_late_total", &[], truth.late);
    expect("rankpulse_impressions_late_total", &[], 0);
    expect("rankpulse_impressions_evicted_total", &[], 0);
    expect("rankpulse_engagements_evicted_total", &[], 0);
    let mut rejected_total = 0;
    for (series_key, value) in m.iter().filter(|(k, _)| k.starts_with("rankpulse_events_rejected_total")) {
        let expected = truth
            .rejected
            .iter()
            .find(|((topic, reason), _)| {
                series_key.contains(&format!("topic=\"{topic}\""))
                    && series_key.contains(&format!("reason=\"{reason}\""))
            })
            .map_or(0, |(_, n)| *n);
        assert_eq!(*value, expected as f64, "{series_key}");
        rejected_total += expected;
    }
    assert_eq!(rejected_total, 4);
    promtool_check(&exposition);
    let (status, _) = daemon.terminate(Duration::from_secs(10));
    assert!(status.success());
    drop(producer);
}

/// A series key with labels given as owned strings.
fn key(name: &str, labels: &[(&str, String)]) -> String {
    let borrowed: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
    series(name, &borrowed)
}
