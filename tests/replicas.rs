//! Several replicas in one consumer group, handing partitions over through the changelog topic:
//! one is SIGKILLed for good, replicas are added and removed, while traffic flows. Once the
//! stream is final, every `_sum`, `_count` and `_total` summed over the live replicas equals
//! that of one uninterrupted replica reading the same topics (in a group of its own), exactly.
//!
//! The traffic is faulty on purpose: redelivered engagements, engagements for impressions that
//! never come (orphans), engagements after their attribution window (late), invalid JSON, and
//! one partition whose event time lags the others by more than the attribution window, so a
//! replica that takes it over while its own partitions are ahead must still attribute every
//! engagement of it.
//!
//! Each replica is a real `rankpulse serve` process on librdkafka's mock cluster, which this
//! test hosts (its listeners are real TCP ports). Not on tansu 0.6: when a replica of two is
//! SIGKILLed there, tansu's coordinator hands the dead member its share again at the next
//! rebalance and never expires it while the survivor only heartbeats (the survivor logged
//! `partitions assigned partitions={0, 1, 2}` after the kill, and no other assignment in the
//! following three minutes); the single-replica SIGKILL tests run on tansu
//! (`tests/crash_restart.rs`, `tests/restarts.rs`). Totals are compared per partition (every
//! total carries a `partition` label): each partition's series, on whichever replica holds it,
//! must equal the reference's, bit for bit.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rdkafka::config::ClientConfig;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use serde_json::json;

const PARTITIONS: i32 = 6;
const IMPRESSIONS: usize = 6000;
const SPACING_MS: i64 = 10;
const BOUND_MS: i64 = 500;
const BATCHES: usize = 120;
const IMP_TOPIC: &str = "imp";
const ENG_TOPIC: &str = "eng";
/// The partition whose event time lags the others'.
const LAGGING: i32 = 5;
const LAG_MS: i64 = 20_000;

/// The stream in delivery order: every message within the disorder bound of its own timestamp,
/// so any consumer interleaving gives the same numbers.
fn stream(t0: i64, seed: u64) -> Vec<(&'static str, i32, String)> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut messages: Vec<(i64, &'static str, i32, String)> = Vec::new();
    for i in 0..IMPRESSIONS {
        let partition = (i % PARTITIONS as usize) as i32;
        // Delivered at the same wall time as the others, stamped LAG_MS earlier.
        let delivered = t0 + i as i64 * SPACING_MS;
        let t = if partition == LAGGING { delivered - LAG_MS } else { delivered };
        let query = format!("q{i}");
        let variant = ["control", "treatment"][i % 2];
        let docs: Vec<String> = (0..10).map(|r| format!("d{}", (i + r * 17) % 501)).collect();
        let jitter = |rng: &mut SmallRng| rng.random_range(0..BOUND_MS);
        let imp = json!({"query_id": query, "timestamp": t, "results": docs, "experiment": "x", "variant": variant});
        messages.push((delivered + jitter(&mut rng), IMP_TOPIC, partition, imp.to_string()));
        for j in 0..rng.random_range(0..4) {
            let offset = 1 + j * 300 + rng.random_range(0..300);
            let action = ["click", "click", "add_to_cart", "purchase"][rng.random_range(0..4)];
            let doc = &docs[rng.random_range(0..10)];
            let e = json!({"query_id": query, "timestamp": t + offset, "doc_id": doc, "action": action, "event_id": format!("e{i}-{j}")});
            messages.push((delivered + offset + jitter(&mut rng), ENG_TOPIC, partition, e.to_string()));
            if rng.random_bool(0.05) {
                messages.push((delivered + offset + jitter(&mut rng), ENG_TOPIC, partition, e.to_string()));
            }
        }
        if rng.random_bool(0.02) {
            let orphan = json!({"query_id": format!("never-{i}"), "timestamp": t, "doc_id": "d1"});
            messages.push((delivered, ENG_TOPIC, partition, orphan.to_string()));
        }
        if rng.random_bool(0.04) {
            // After the two-second attribution window: within one more window it is late, beyond
            // that orphaned, whether or not the impression is still open when it is read.
            let after = [rng.random_range(2_001..4_000), 10_000][i % 2];
            let late =
                json!({"query_id": query, "timestamp": t + after, "doc_id": docs[0], "event_id": format!("late{i}")});
            messages.push((delivered + after, ENG_TOPIC, partition, late.to_string()));
        }
        if rng.random_bool(0.01) {
            messages.push((delivered, ENG_TOPIC, partition, "{not json".into()));
        }
    }
    messages.sort_by_key(|m| m.0);
    messages.into_iter().map(|(_, topic, p, payload)| (topic, p, payload)).collect()
}

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
idle_timeout = "30s"
[metrics]
cutoffs = [1, 5, 10]
windows = ["10s"]
[state]
checkpoint_interval = "500ms"
"#
    )
}

/// Series summed over several replicas' expositions.
fn summed(all: &[BTreeMap<String, f64>]) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for m in all {
        for (k, v) in m {
            *out.entry(k.clone()).or_insert(0.0) += v;
        }
    }
    out
}

/// Whether these series (one replica's, or summed) show the whole stream consumed and final.
fn finished(m: &BTreeMap<String, f64>, consumed: [usize; 2]) -> bool {
    let total = |topic: &str| m.get(&series("rankpulse_events_consumed_total", &[("topic", topic)])).copied();
    let impressions: f64 = ["control", "treatment"]
        .iter()
        .filter_map(|v| m.get(&series("rankpulse_impressions_total", &[("experiment", "x"), ("variant", v)])))
        .sum();
    total(IMP_TOPIC) == Some(consumed[0] as f64)
        && total(ENG_TOPIC) == Some(consumed[1] as f64)
        && impressions == IMPRESSIONS as f64
        && m.get("rankpulse_pending_impressions") == Some(&0.0)
        // Engagements ten seconds late stay held until the watermark passes them, after the
        // last impression is final: until then their orphan count is still moving.
        && m.get("rankpulse_held_engagements") == Some(&0.0)
}

/// What happens to the replicas after a batch.
enum Step {
    /// A new replica joins the group.
    Start(&'static str),
    /// A replica is SIGKILLed and never comes back.
    Kill(&'static str),
    /// A replica is stopped with SIGTERM (scale-in).
    Stop(&'static str),
}

/// One replica of the group under test.
struct Replica {
    name: &'static str,
    port: u16,
    daemon: Daemon,
}

fn start(dir: &Path, brokers: &str, name: &'static str) -> Replica {
    let port = free_port();
    let config = serve_config(dir, name, brokers, port, &sections("replicas"));
    Replica { name, port, daemon: Daemon::spawn(&["serve", "--config", config.to_str().unwrap()]) }
}

/// Produces the stream in batches, applying `plan` (batch number, step) as it goes, with the
/// replica `first` running from the start and an uninterrupted reference in a group of its
/// own. Once everything is final, compares the live replicas' summed totals with the
/// reference's and returns the live replicas' expositions.
fn run(broker: &Broker, first: &'static str, plan: &[(usize, Step)]) -> Vec<BTreeMap<String, f64>> {
    for topic in [IMP_TOPIC, ENG_TOPIC] {
        broker.create_topic(topic, PARTITIONS);
    }
    for group in ["replicas", "reference"] {
        broker.create_state_topics(group, PARTITIONS);
    }
    let brokers = broker.bootstrap();
    // One message per record batch on tansu: it serves a fetch that starts inside a batch from
    // the next batch, so resuming from a snapshot taken mid-batch would skip messages there.
    let batch_messages = if matches!(broker, Broker::Tansu { .. }) { "1" } else { "10000" };
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("batch.num.messages", batch_messages)
        .create()
        .unwrap();
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    eprintln!("replicas test seed {seed}");
    let t0 = chrono::Utc::now().timestamp_millis() - 300_000;
    let messages = stream(t0, seed);
    let consumed =
        [messages.iter().filter(|m| m.0 == IMP_TOPIC).count(), messages.iter().filter(|m| m.0 == ENG_TOPIC).count()];

    let dir = tempfile::tempdir().unwrap();
    let reference_port = free_port();
    let reference_cfg = serve_config(dir.path(), "reference", &brokers, reference_port, &sections("reference"));
    let reference = Daemon::spawn(&["serve", "--config", reference_cfg.to_str().unwrap()]);
    let mut replicas = vec![start(dir.path(), &brokers, first)];
    let mut gone = Vec::new();

    let per_batch = messages.len().div_ceil(BATCHES);
    for (batch_no, batch) in messages.chunks(per_batch).enumerate() {
        for (topic, partition, payload) in batch {
            let mut record = BaseRecord::<(), str>::to(topic).partition(*partition).payload(payload.as_str());
            while let Err((_, unsent)) = producer.send(record) {
                producer.poll(Duration::from_millis(10));
                record = unsent;
            }
        }
        producer.flush(Duration::from_secs(60)).expect("the mock cluster took the batch");
        for (_, step) in plan.iter().filter(|(at, _)| *at == batch_no) {
            match step {
                Step::Start(name) => {
                    eprintln!("batch {batch_no}: starting {name}");
                    replicas.push(start(dir.path(), &brokers, name));
                }
                Step::Kill(name) | Step::Stop(name) => {
                    let i = replicas.iter().position(|r| r.name == *name).expect("a running replica");
                    let replica = replicas.remove(i);
                    if let Step::Kill(_) = step {
                        eprintln!("batch {batch_no}: SIGKILL {name}, for good");
                        replica.daemon.kill();
                    } else {
                        eprintln!("batch {batch_no}: stopping {name}");
                        let (status, _, output) = replica.daemon.terminate_with_output(Duration::from_secs(30));
                        assert!(status.success(), "{name} did not stop cleanly:\n{output}");
                        gone.push(output);
                    }
                }
            }
        }
        std::thread::sleep(Duration::from_millis(150));
    }

    let (reference_exposition, _) = scrape_until(reference_port, Duration::from_secs(120), |m| finished(m, consumed));
    // Final once the live replicas' sums show the whole stream (a replica that lost a partition
    // no longer exports it; one that took it over exports it with its history).
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    let expositions =
        wait_for(deadline, Duration::from_millis(500), "the live replicas never showed the whole stream final", || {
            let all: Option<Vec<String>> =
                replicas.iter().map(|r| http_get(r.port, "/metrics").map(|(_, body)| body)).collect();
            let all = all?;
            let merged: Vec<BTreeMap<String, f64>> = all.iter().map(|body| parse_exposition(body)).collect();
            finished(&summed(&merged), consumed).then_some(all)
        });
    let per_partition: Vec<BTreeMap<String, f64>> = expositions.iter().map(|body| parse_exposition_raw(body)).collect();
    let (want, got) = (totals(&parse_exposition_raw(&reference_exposition)), totals(&summed(&per_partition)));
    assert!(want.len() > 100, "compared too few series: {}", want.len());
    let differing: Vec<String> = want
        .iter()
        .filter(|(k, v)| got.get(*k) != Some(v))
        .map(|(k, v)| format!("{k}: one uninterrupted replica {v}, summed over the live replicas {:?}", got.get(k)))
        .chain(got.keys().filter(|k| !want.contains_key(*k)).map(|k| format!("{k}: only on the replicas")))
        .collect();
    assert!(differing.is_empty(), "totals differ:\n{}", differing.join("\n"));
    eprintln!("{} totals summed over {} live replicas equal the uninterrupted run exactly", want.len(), replicas.len());
    // The faults were there to handle.
    for (name, minimum) in [
        ("rankpulse_engagements_duplicate_total", 1.0),
        ("rankpulse_engagements_orphaned_total", 1.0),
        ("rankpulse_engagements_late_total", 1.0),
    ] {
        let total: f64 = want.iter().filter(|(k, _)| k.split('{').next() == Some(name)).map(|(_, v)| v).sum();
        assert!(total >= minimum, "{name} is {total}: the traffic lacks it");
    }
    for replica in replicas {
        let (status, _) = replica.daemon.terminate(Duration::from_secs(30));
        assert!(status.success(), "{} did not stop cleanly", replica.name);
    }
    let (status, _) = reference.terminate(Duration::from_secs(30));
    assert!(status.success());
    expositions.iter().map(|body| parse_exposition(body)).collect()
}

/// Each test runs several daemons and produces for half a minute: one at a time on 2 cores.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn a_replica_lost_for_good_loses_nothing() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    run(&Broker::Mock(MockCluster::new(3).unwrap()), "a", &[(0, Step::Start("b")), (50, Step::Kill("b"))]);
}

#[test]
fn scaling_out_and_in_while_traffic_flows_is_exact_and_evicts_nothing() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let plan = [(30, Step::Start("b")), (30, Step::Start("c")), (80, Step::Stop("b")), (80, Step::Stop("c"))];
    let expositions = run(&Broker::Mock(MockCluster::new(3).unwrap()), "a", &plan);
    for m in expositions {
        assert_eq!(m.get("rankpulse_impressions_evicted_total").copied().unwrap_or(0.0), 0.0);
    }
}

/// A replica stopped while the group rebalances stops promptly. Its last commit and its
/// LeaveGroup queue behind the JoinGroup the coordinator holds until the other members rejoin
/// (on the mock cluster, for the session timeout less a second: 44 s by default); before the
/// goodbye was bounded, the stop waited all of it (40 s measured). Now it waits at most
/// `GOODBYE_LIMIT` (5 s) and says why, the final snapshot written before.
#[test]
fn a_replica_stopped_while_the_group_rebalances_stops_promptly() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let broker = Broker::Mock(MockCluster::new(1).unwrap());
    broker.create_topic(IMP_TOPIC, PARTITIONS);
    broker.create_topic(ENG_TOPIC, PARTITIONS);
    broker.create_state_topics("rebalancing", PARTITIONS);
    let brokers = broker.bootstrap();
    // Something to snapshot and commit on every partition.
    let t0 = 1_767_225_600_000i64;
    let impressions: Vec<(i32, String)> = (0..600)
        .map(|i| {
            (
                i % PARTITIONS,
                json!({"query_id": format!("q{i}"), "timestamp": t0 + i as i64, "results": ["d1", "d2"]}).to_string(),
            )
        })
        .collect();
    produce_to_partitions(&brokers, &[(IMP_TOPIC, &impressions)]);

    let dir = tempfile::tempdir().unwrap();
    // librdkafka's default session timeout (45 s), and its group debug lines, which show when
    // the replica has sent its JoinGroup.
    let sections = format!(
        r#"
[kafka]
group_id = "rebalancing"
impressions_topic = "{IMP_TOPIC}"
engagements_topic = "{ENG_TOPIC}"
[kafka.properties]
debug = "cgrp"
[limits]
max_past = "3650d"
[state]
checkpoint_interval = "500ms"
"#
    );
    let config = |name: &str| serve_config(dir.path(), name, &brokers, free_port(), &sections);
    let (a_config, b_config) = (config("a"), config("b"));
    let a = Daemon::spawn(&["serve", "--config", a_config.to_str().unwrap()]);
    let b = Daemon::spawn_with_env(
        &["serve", "--config", b_config.to_str().unwrap()],
        &[("RUST_LOG", "info,librdkafka=debug")],
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    wait_for(deadline, Duration::from_millis(200), "both replicas own partitions", || {
        let owns = |d: &Daemon| d.output().contains("partitions assigned partitions={");
        (owns(&a) && owns(&b)).then_some(())
    });

    // `a` leaves; `b` learns of the rebalance at its next heartbeat and rejoins.
    let (status, _) = a.terminate(Duration::from_secs(10));
    assert!(status.success());
    let seen = b.output().len();
    wait_for(Instant::now() + Duration::from_secs(30), Duration::from_millis(100), "b rejoins", || {
        b.output()[seen..].contains("-> wait-join").then_some(())
    });

    let (status, took, output) = b.terminate_with_output(Duration::from_secs(15));
    assert!(status.success());
    assert!(took < Duration::from_secs(10), "stopping took {took:?}");
    assert!(output.contains("did not answer the last commit and this replica's leave in time"), "{output}");
}
