//! Durability: `rankpulse serve` is killed with SIGKILL at random moments while it consumes,
//! and restarted each time with nothing local (it restores from the changelog). Once the stream is fully finalized, every
//! exported `_sum`, `_count` and `_total` equals that of an uninterrupted run over the same
//! topics, exactly.
//!
//! Run against a broker in its own process (tansu), and against librdkafka's mock cluster with
//! broker faults injected (brokers down then up, request errors).

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rdkafka::config::ClientConfig;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseProducer, Producer};
use rdkafka::types::RDKafkaRespErr;
use serde_json::json;

const PARTITIONS: i32 = 4;
const IMPRESSIONS: usize = 8000;
const SPACING_MS: i64 = 10;
const BOUND_MS: i64 = 1_000;
const BATCHES: usize = 200;
const IMP_TOPIC: &str = "imp";
const ENG_TOPIC: &str = "eng";

/// The stream, per (topic, partition), in delivery order: every message within the disorder
/// bound of its own timestamp, so any consumer interleaving gives the same numbers.
fn stream(t0: i64) -> Vec<(&'static str, i32, String)> {
    let mut rng = SmallRng::seed_from_u64(7);
    let mut messages: Vec<(i64, &'static str, i32, String)> = Vec::new();
    for i in 0..IMPRESSIONS {
        let t = t0 + i as i64 * SPACING_MS;
        let query = format!("q{i}");
        let partition = (i % PARTITIONS as usize) as i32;
        let variant = ["control", "treatment"][i % 2];
        let docs: Vec<String> = (0..10).map(|r| format!("d{}", (i + r * 17) % 501)).collect();
        let jitter = |rng: &mut SmallRng| rng.random_range(0..BOUND_MS);
        let imp = json!({"query_id": query, "timestamp": t, "results": docs, "experiment": "x", "variant": variant});
        messages.push((t + jitter(&mut rng), IMP_TOPIC, partition, imp.to_string()));
        for j in 0..rng.random_range(0..4) {
            let at = t + 1 + j * 300 + rng.random_range(0..300);
            let action = ["click", "click", "add_to_cart", "purchase"][rng.random_range(0..4)];
            let e = json!({"query_id": query, "timestamp": at, "doc_id": docs[rng.random_range(0..10)], "action": action, "event_id": format!("e{i}-{j}")});
            messages.push((at + jitter(&mut rng), ENG_TOPIC, partition, e.to_string()));
            if rng.random_bool(0.05) {
                messages.push((at + jitter(&mut rng), ENG_TOPIC, partition, e.to_string()));
            }
        }
        if rng.random_bool(0.01) {
            messages.push((t, ENG_TOPIC, partition, "{not json".into()));
        }
    }
    messages.sort_by_key(|m| m.0);
    messages.into_iter().map(|(_, topic, p, payload)| (topic, p, payload)).collect()
}

/// The configuration of both daemons, but for what differs per run (see [`serve_config`]).
fn sections(group_id: &str) -> String {
    format!(
        r#"
[kafka]
group_id = "{group_id}"
impressions_topic = "{IMP_TOPIC}"
engagements_topic = "{ENG_TOPIC}"
[kafka.properties]
"session.timeout.ms" = "6000"
"heartbeat.interval.ms" = "500"
[join]
attribution_window = "2s"
max_out_of_orderness = "1s"
idle_timeout = "10s"
[metrics]
cutoffs = [1, 5, 10]
windows = ["10s"]
[state]
checkpoint_interval = "300ms"
"#
    )
}

/// What still separates a daemon's exposition from the finished stream, or `Ok` once nothing
/// does: every message consumed, every impression counted, none pending.
fn unfinished(m: &BTreeMap<String, f64>, consumed: [usize; 2]) -> Result<(), String> {
    let total = |topic: &str| m.get(&series("rankpulse_events_consumed_total", &[("topic", topic)])).copied();
    let impressions: f64 = ["control", "treatment"]
        .iter()
        .filter_map(|v| m.get(&series("rankpulse_impressions_total", &[("experiment", "x"), ("variant", v)])))
        .sum();
    let pending = m.get("rankpulse_pending_impressions").copied();
    let done = total(IMP_TOPIC) == Some(consumed[0] as f64)
        && total(ENG_TOPIC) == Some(consumed[1] as f64)
        && impressions == IMPRESSIONS as f64
        && pending == Some(0.0);
    if done {
        return Ok(());
    }
    Err(format!(
        "consumed {IMP_TOPIC} {:?} of {}, {ENG_TOPIC} {:?} of {}; impressions counted {impressions} of {IMPRESSIONS}; \
         pending {pending:?}",
        total(IMP_TOPIC),
        consumed[0],
        total(ENG_TOPIC),
        consumed[1],
    ))
}

/// Scrapes `port` until the stream is finished there, or panics after `timeout` naming what is
/// missing and the series that say why (lateness, rejections, restores, the watermark), not the
/// whole exposition (whose A/B families would bury them).
fn await_finished(who: &str, port: u16, timeout: Duration, consumed: [usize; 2]) -> (String, BTreeMap<String, f64>) {
    let deadline = std::time::Instant::now() + timeout;
    let mut last = (String::new(), "never scraped".to_string());
    while std::time::Instant::now() < deadline {
        if let Some((200, body)) = http_get(port, "/metrics") {
            let parsed = parse_exposition(&body);
            match unfinished(&parsed, consumed) {
                Ok(()) => return (body, parsed),
                Err(missing) => last = (body, missing),
            }
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let telling: Vec<&str> = last
        .0
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("rankpulse_ab_") && !l.starts_with("rankpulse_metric_"))
        .filter(|l| {
            [
                "late",
                "reject",
                "restor",
                "watermark",
                "pending",
                "consumed",
                "lag",
                "assigned",
                "changelog",
                "impressions_total",
            ]
            .iter()
            .any(|word| l.contains(word))
        })
        .collect();
    panic!(
        "the {who} did not finish the stream within {timeout:?}: {}\nits last scrape, in part:\n{}",
        last.1,
        telling.join("\n")
    );
}

/// Produces the stream in batches while the victim is killed and restarted at random batches;
/// `between_batches` may inject broker faults. Returns the victim's final totals and the
/// reference's.
fn run_crash_test(broker: &Broker, mut between_batches: impl FnMut(usize)) {
    // A failure names its seed; RANKPULSE_CRASH_SEED replays the same kill points.
    let seed = match std::env::var("RANKPULSE_CRASH_SEED") {
        Ok(seed) => seed.parse().expect("RANKPULSE_CRASH_SEED is a u64"),
        Err(_) => std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64,
    };
    eprintln!("crash test seed {seed} (RANKPULSE_CRASH_SEED={seed} replays its kill points)");
    let mut rng = SmallRng::seed_from_u64(seed);
    broker.create_topic(IMP_TOPIC, PARTITIONS);
    broker.create_topic(ENG_TOPIC, PARTITIONS);
    for group in ["reference", "victim"] {
        broker.create_state_topics(group, PARTITIONS);
    }
    let brokers = broker.bootstrap();
    // One message per record batch: tansu 0.6 serves a fetch that starts inside a batch from the
    // next batch (measured: a fetch at offset 5 of a 10-message batch returned offsets 10 on), so
    // resuming from a checkpoint taken mid-batch would skip messages on it, though not on Kafka.
    // The mock-cluster variant keeps librdkafka's batching.
    let batch_messages = if matches!(broker, Broker::Tansu { .. }) { "1" } else { "10000" };
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("batch.num.messages", batch_messages)
        .create()
        .unwrap();
    let t0 = chrono::Utc::now().timestamp_millis() - 300_000;
    let messages = stream(t0);
    let consumed =
        [messages.iter().filter(|m| m.0 == IMP_TOPIC).count(), messages.iter().filter(|m| m.0 == ENG_TOPIC).count()];

    let dir = tempfile::tempdir().unwrap();
    let (ref_port, victim_port) = (free_port(), free_port());
    let reference_cfg = serve_config(dir.path(), "reference", &brokers, ref_port, &sections("reference"));
    let victim_cfg = serve_config(dir.path(), "victim", &brokers, victim_port, &sections("victim"));
    let reference = Daemon::spawn(&["serve", "--config", reference_cfg.to_str().unwrap()]);
    let mut victim = Some(Daemon::spawn(&["serve", "--config", victim_cfg.to_str().unwrap()]));

    // Three kills at random batches, each as soon as the restarted victim is consuming again
    // (an instance killed while still joining lingers in tansu's group). Production never pauses:
    // a pause longer than join.idle_timeout would rightly let the wall clock move the watermark.
    // Both ready before the first batch, so that the seed, not the machine's speed, decides
    // where the first kill falls.
    for port in [ref_port, victim_port] {
        scrape_until(port, Duration::from_secs(60), |_| http_get(port, "/readyz").map(|r| r.0) == Some(200));
    }
    let mut kill_at: Vec<usize> = (0..3).map(|_| rng.random_range(10..BATCHES / 2)).collect();
    kill_at.sort_unstable();
    let mut kills = 0;
    let per_batch = messages.len().div_ceil(BATCHES);
    for (batch_no, batch) in messages.chunks(per_batch).enumerate() {
        for (topic, partition, payload) in batch {
            send_queued(&producer, topic, *partition, payload);
        }
        // After a broker outage the producer reconnects with backoff: give it time.
        producer.flush(Duration::from_secs(120)).expect("the broker did not take the batch within 2 minutes");
        between_batches(batch_no);
        let due = kills < kill_at.len() && batch_no >= kill_at[kills];
        if due && http_get(victim_port, "/readyz").map(|r| r.0) == Some(200) {
            // Somewhere within the next 100 ms, while the victim consumes.
            std::thread::sleep(Duration::from_millis(rng.random_range(0..100)));
            victim.take().unwrap().kill();
            kills += 1;
            eprintln!("SIGKILLed the victim after batch {batch_no}");
            victim = Some(Daemon::spawn(&["serve", "--config", victim_cfg.to_str().unwrap()]));
        }
        std::thread::sleep(Duration::from_millis(150));
    }
    assert_eq!(kills, 3, "the victim was not killed three times while consuming");

    let (_, reference_metrics) = await_finished("uninterrupted daemon", ref_port, Duration::from_secs(120), consumed);
    let (exposition, victim_metrics) = await_finished("killed daemon", victim_port, Duration::from_secs(180), consumed);
    let (want, got) = (totals(&reference_metrics), totals(&victim_metrics));
    assert!(want.len() > 100, "compared too few series: {}", want.len());
    let differing: Vec<String> = want
        .iter()
        .filter(|(k, v)| got.get(*k) != Some(v))
        .map(|(k, v)| format!("{k}: uninterrupted {v}, killed 3 times {:?}", got.get(k)))
        .collect();
    assert!(differing.is_empty(), "totals differ after SIGKILL and restore:\n{}", differing.join("\n"));
    assert_eq!(got.len(), want.len());
    eprintln!("after 3 SIGKILLs: {} totals equal to the uninterrupted run exactly", want.len());
    assert!(victim_metrics.get("rankpulse_engagements_duplicate_total").copied().unwrap_or(0.0) > 0.0);
    promtool_check(&exposition);
    for daemon in [reference, victim.take().unwrap()] {
        let (status, _) = daemon.terminate(Duration::from_secs(15));
        assert!(status.success());
    }
    drop(producer);
}

/// Each test runs two daemons and produces for half a minute: one at a time on a 2-core machine.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn sigkill_and_restart_against_a_broker_in_its_own_process() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let Some(broker) = Broker::tansu() else { return };
    run_crash_test(&broker, |_| {});
}

#[test]
fn sigkill_and_broker_faults_on_the_mock_cluster() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let broker = Broker::Mock(MockCluster::new(3).unwrap());
    run_crash_test(&broker, |batch| {
        let Broker::Mock(cluster) = &broker else { unreachable!() };
        match batch {
            // Every broker down for two seconds, then back.
            10 => {
                for id in 1..=3 {
                    cluster.broker_down(id).unwrap();
                }
                std::thread::sleep(Duration::from_secs(2));
                for id in 1..=3 {
                    cluster.broker_up(id).unwrap();
                }
            }
            // Fetch and commit requests failing for a while.
            20 => cluster.request_errors(
                rdkafka::types::RDKafkaApiKey::Fetch,
                &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION; 5],
            ),
            25 => cluster.request_errors(
                rdkafka::types::RDKafkaApiKey::OffsetCommit,
                &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT; 3],
            ),
            _ => {}
        }
    });
}

/// Every broker down for four times `join.idle_timeout` while the producers queue events stamped
/// with the wall clock: the consumer delivers nothing meanwhile, but that is not idleness (the
/// brokers cannot confirm its inputs have nothing unread), so the wall clock does not move the
/// watermark past what waits to be delivered. Once the brokers are back, every impression is
/// counted in its place and none late, as in a run without the outage.
#[test]
fn a_broker_outage_longer_than_the_idle_timeout_counts_nothing_late() {
    // The group keeps the member through the outage.
    outage_test("30000");
}

/// The same outage, longer than the group's session timeout: the member is expelled and its
/// partitions dropped; once the brokers are back the group assigns them again and they are
/// restored from the changelog (whose reader finds the outage's errors still queued), and the
/// daemon goes on: nothing lost, nothing late.
#[test]
fn a_broker_outage_longer_than_the_session_timeout_restores_and_goes_on() {
    outage_test("6000");
}

fn outage_test(session_timeout_ms: &str) {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    const OUTAGE: Duration = Duration::from_secs(12);
    let broker = Broker::Mock(MockCluster::new(1).unwrap());
    broker.create_topic(IMP_TOPIC, 2);
    broker.create_topic(ENG_TOPIC, 2);
    broker.create_state_topics("outage", 2);
    let brokers = broker.bootstrap();
    // A producer that reconnects quickly: what it queued during the outage reaches the brokers
    // soon after they are back, well within the idle timeout.
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("linger.ms", "5")
        .set("reconnect.backoff.max.ms", "500")
        .create()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let sections = sections("outage")
        .replace(r#"idle_timeout = "10s""#, r#"idle_timeout = "3s""#)
        .replace(r#""session.timeout.ms" = "6000""#, &format!(r#""session.timeout.ms" = "{session_timeout_ms}""#));
    assert!(sections.contains(r#"idle_timeout = "3s""#) && sections.contains(session_timeout_ms));
    let config = serve_config(dir.path(), "outage", &brokers, port, &sections);
    let daemon = Daemon::spawn(&["serve", "--config", config.to_str().unwrap()]);
    scrape_until(port, Duration::from_secs(60), |_| http_get(port, "/readyz").map(|r| r.0) == Some(200));

    // Two impressions and a click every 50 ms, stamped now: 5 s before, the outage, 5 s after.
    let mut produced = [0usize; 2];
    let produce_for = |how_long: Duration, produced: &mut [usize; 2]| {
        let until = std::time::Instant::now() + how_long;
        while std::time::Instant::now() < until {
            let t = chrono::Utc::now().timestamp_millis();
            for p in 0..2 {
                let i = produced[0];
                let query = format!("q{i}");
                let docs: Vec<String> = (0..5).map(|r| format!("d{}", (i + r) % 50)).collect();
                let variant = ["control", "treatment"][i % 2];
                let imp =
                    json!({"query_id": query, "timestamp": t, "results": docs, "experiment": "x", "variant": variant});
                send_queued(&producer, IMP_TOPIC, p, &imp.to_string());
                let click = json!({"query_id": query, "timestamp": t + 10, "doc_id": docs[i % 5], "action": "click", "event_id": format!("c{i}")});
                send_queued(&producer, ENG_TOPIC, p, &click.to_string());
                produced[0] += 1;
                produced[1] += 1;
            }
            producer.poll(Duration::from_millis(50));
        }
    };
    produce_for(Duration::from_secs(5), &mut produced);
    producer.flush(Duration::from_secs(30)).unwrap();
    let Broker::Mock(cluster) = &broker else { unreachable!() };
    cluster.broker_down(1).unwrap();
    eprintln!("the broker is down for {} s", OUTAGE.as_secs());
    produce_for(OUTAGE, &mut produced);
    cluster.broker_up(1).unwrap();
    produce_for(Duration::from_secs(5), &mut produced);
    producer.flush(Duration::from_secs(60)).expect("the producer did not deliver within a minute of the outage");

    // Per-partition counters, summed.
    let sum = |m: &BTreeMap<String, f64>, name: &str| -> f64 {
        m.iter().filter(|(k, _)| *k == name || k.starts_with(&format!("{name}{{"))).map(|(_, v)| v).sum()
    };
    let (_, m) = scrape_until(port, Duration::from_secs(120), |m| {
        let impressions = sum(m, "rankpulse_impressions_total");
        let late = sum(m, "rankpulse_impressions_late_total");
        impressions + late == produced[0] as f64 && m.get("rankpulse_pending_impressions") == Some(&0.0)
    });
    let late = sum(&m, "rankpulse_impressions_late_total");
    let late_clicks = sum(&m, "rankpulse_engagements_late_total");
    let window_late = sum(&m, "rankpulse_window_late_impressions_total");
    eprintln!(
        "{} impressions; late: {late} impressions, {late_clicks} clicks, {window_late} in closed windows",
        produced[0]
    );
    assert_eq!(
        (late, late_clicks, window_late),
        (0.0, 0.0, 0.0),
        "an outage of {} s against join.idle_timeout = 3s (session timeout {session_timeout_ms} ms) made events late",
        OUTAGE.as_secs()
    );
    let (status, _) = daemon.terminate(Duration::from_secs(15));
    assert!(status.success());
}
