//! A changelog of snapshots and deltas survives SIGKILL wherever it lands: the replica under
//! test (`rankpulse serve` on librdkafka's mock cluster) is killed once while deltas follow its
//! snapshot (a restore then applies them) and a round is in flight to a slow broker, and once
//! right after the snapshot its restarted successor writes first; each time a new replica
//! restores from the changelog alone. Once the
//! stream is finalized, every exported `_sum`, `_count` and `_total` equals that of an
//! uninterrupted replica in a group of its own, exactly.
//!
//! A 10-minute attribution window keeps the pending impressions most of the state, so a round
//! writes a delta far smaller than the snapshot and the chains grow long; the restored replica's
//! log says how many deltas it applied.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use rdkafka::config::ClientConfig;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use serde_json::json;

const PARTITIONS: i32 = 2;
/// Impressions per batch, one batch every [`BATCH_PAUSE`].
const BATCH_IMPRESSIONS: usize = 40;
const BATCH_PAUSE: Duration = Duration::from_millis(100);
/// How late the broker answers in the run's slow part.
const SLOW_BROKER: Duration = Duration::from_secs(2);

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
attribution_window = "10m"
max_out_of_orderness = "1s"
idle_timeout = "30s"
[metrics]
cutoffs = [1, 5, 10]
windows = ["1m"]
[state]
checkpoint_interval = "300ms"
"#
    )
}

/// The number after `deltas=` in a daemon's `partition restored` lines.
fn deltas_applied(output: &str) -> Vec<u64> {
    output
        .lines()
        .filter(|l| l.contains("partition restored"))
        .filter_map(|l| l.split(" deltas=").nth(1)?.split(' ').next()?.parse().ok())
        .collect()
}

/// The replica's series once it consumed everything produced and finalized all but the last
/// impression of each partition.
fn caught_up(port: u16, produced: [usize; 2]) -> Option<std::collections::BTreeMap<String, f64>> {
    let (_, body) = http_get(port, "/metrics")?;
    let m = parse_exposition(&body);
    let total = |topic: &str| m.get(&series("rankpulse_events_consumed_total", &[("topic", topic)])).copied();
    (total(IMP_TOPIC) == Some(produced[0] as f64)
        && total(ENG_TOPIC) == Some(produced[1] as f64)
        && m.get("rankpulse_pending_impressions") == Some(&f64::from(PARTITIONS)))
    .then_some(m)
}

#[test]
fn sigkill_between_snapshots_and_right_after_one_loses_nothing() {
    let cluster = MockCluster::new(1).unwrap();
    for topic in [IMP_TOPIC, ENG_TOPIC] {
        cluster.create_topic(topic, PARTITIONS, 1).unwrap();
    }
    for group in ["reference", "chain"] {
        create_state_topics(&cluster, group, PARTITIONS);
    }
    let brokers = cluster.bootstrap_servers();
    let producer: BaseProducer = ClientConfig::new().set("bootstrap.servers", &brokers).create().unwrap();
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    eprintln!("changelog chain seed {seed}");
    let t0 = chrono::Utc::now().timestamp_millis() - 7_200_000;
    let mut stream = Stream::new(seed, t0, PARTITIONS);
    let send = |messages: Vec<(&'static str, i32, String)>| {
        for (topic, partition, payload) in messages {
            let mut record = BaseRecord::<(), str>::to(topic).partition(partition).payload(payload.as_str());
            while let Err((_, back)) = producer.send(record) {
                record = back;
                producer.poll(Duration::from_millis(10));
            }
        }
        producer.flush(Duration::from_secs(30)).unwrap();
    };

    let dir = tempfile::tempdir().unwrap();
    let (ref_port, port) = (free_port(), free_port());
    let reference_cfg = serve_config(dir.path(), "reference", &brokers, ref_port, &sections("reference"));
    let cfg = serve_config(dir.path(), "chain", &brokers, port, &sections("chain"));
    let serve = |cfg: &std::path::Path| Daemon::spawn(&["serve", "--config", cfg.to_str().unwrap()]);
    let reference = serve(&reference_cfg);
    let mut replica = serve(&cfg);

    // Produces batches until `until` says stop (checked after each), with the pause between.
    let produce_until = |stream: &mut Stream, what: &str, until: &mut dyn FnMut() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            send(stream.batch(BATCH_IMPRESSIONS, false));
            if until() {
                return;
            }
            assert!(Instant::now() < deadline, "{what}");
            std::thread::sleep(BATCH_PAUSE);
        }
    };
    // 1. Consuming for 3 s and until the brokers acknowledged deltas of several rounds (a
    //    machine busy with other tests may take longer): a snapshot per partition, then deltas.
    //    Killed between snapshots.
    let mut consuming_since: Option<Instant> = None;
    let deltas_acknowledged = || {
        let (_, body) = http_get(port, "/metrics")?;
        parse_exposition(&body).get(&series("rankpulse_changelog_records_total", &[("kind", "delta")])).copied()
    };
    produce_until(&mut stream, "the replica never wrote deltas", &mut || {
        if consuming_since.is_none() && replica.output().contains("partitions assigned") {
            consuming_since = Some(Instant::now());
        }
        consuming_since.is_some_and(|since| since.elapsed() > Duration::from_secs(3))
            && deltas_acknowledged().is_some_and(|n| n >= f64::from(4 * PARTITIONS))
    });
    // 2. Its successor restores the snapshots with their deltas, writes its own snapshots at its
    //    first round, and is killed right after.
    //    A replica starts a new chain once its deltas are as large as their snapshot, so a kill
    //    can also land just after a snapshot, and the restore then rightly applies none (seen on
    //    a busy machine: "snapshot=9 ... deltas=0"). That successor is killed in its turn once
    //    the brokers acknowledged deltas of its own, at most three times in all.
    let mut restored = Vec::new();
    for attempt in 1..=3 {
        replica = serve(&cfg);
        produce_until(&mut stream, "the first successor never restored", &mut || {
            deltas_applied(&replica.output()).len() == PARTITIONS as usize
        });
        restored = deltas_applied(&replica.output());
        if attempt == 3 || restored.iter().all(|&d| d > 0) {
            break;
        }
        eprintln!("the kill came right after a snapshot (the restore applied {restored:?} deltas): once more");
        produce_until(&mut stream, "the successor never wrote deltas", &mut || {
            deltas_acknowledged().is_some_and(|n| n >= f64::from(4 * PARTITIONS))
        });
    }
    assert!(restored.iter().all(|&d| d > 0), "a restore between snapshots applies deltas: {restored:?}");
    eprintln!("the first restore applied {restored:?} deltas");
    std::thread::sleep(Duration::from_millis(450));
    replica.kill();
    // 3. The second successor restores from those fresh snapshots.
    replica = serve(&cfg);
    produce_until(&mut stream, "the second successor never restored", &mut || {
        deltas_applied(&replica.output()).len() == PARTITIONS as usize
    });
    // 4. The broker answers every request 2 s late: the consumer thread does not wait for a
    //    round's acknowledgment (it goes on consuming, and commits once the broker answered),
    //    so the round takes it far less than the acknowledgment does. Killed with a round in
    //    flight (rounds follow one another as acknowledged), its offsets uncommitted.
    cluster.broker_round_trip_time(1, SLOW_BROKER).unwrap();
    let (mut on_thread, mut acknowledged) = (0.0, 0.0);
    produce_until(&mut stream, "no round acknowledged by the slow broker", &mut || {
        let Some((_, body)) = http_get(port, "/metrics") else { return false };
        let m = parse_exposition(&body);
        let of = |family: &str| m.get(family).copied().unwrap_or(0.0);
        (on_thread, acknowledged) =
            (of("rankpulse_checkpoint_duration_seconds"), of("rankpulse_checkpoint_acknowledged_seconds"));
        acknowledged >= SLOW_BROKER.as_secs_f64()
    });
    eprintln!("with a slow broker, a round took the consumer thread {on_thread:.3} s and was acknowledged in {acknowledged:.3} s");
    assert!(on_thread < SLOW_BROKER.as_secs_f64() / 2.0, "the consumer thread waited for the broker: {on_thread} s");
    replica.kill();
    cluster.broker_round_trip_time(1, Duration::ZERO).unwrap();
    // 5. The third successor restores what the broker acknowledged, or more (a record the
    //    broker kept but whose acknowledgment was still on its way), and runs to the end.
    replica = serve(&cfg);
    produce_until(&mut stream, "the third successor never restored", &mut || {
        deltas_applied(&replica.output()).len() == PARTITIONS as usize
    });
    for _ in 0..20 {
        send(stream.batch(BATCH_IMPRESSIONS, false));
        std::thread::sleep(BATCH_PAUSE);
    }
    send(stream.batch(0, true));
    // The last impression of each partition, 20 minutes of event time later: every other is final.
    let end = t0 + stream.next as i64 * 10 + 1_200_000;
    // An engagement of it moves the engagements' clock there too.
    let last: Vec<_> = (0..PARTITIONS)
        .flat_map(|p| {
            let query = format!("last-{p}");
            let impression = json!({"query_id": query, "timestamp": end, "results": ["d1"], "experiment": "x", "variant": "control"});
            let click = json!({"query_id": query, "timestamp": end + 1, "doc_id": "d1", "event_id": query});
            [(IMP_TOPIC, p, impression.to_string()), (ENG_TOPIC, p, click.to_string())]
        })
        .collect();
    send(last);
    let produced = [stream.produced[0] + PARTITIONS as usize, stream.produced[1] + PARTITIONS as usize];

    let deadline = Instant::now() + Duration::from_secs(60);
    let want = wait_for(deadline, Duration::from_millis(250), "the reference never caught up", || {
        caught_up(ref_port, produced)
    });
    let got = wait_for(deadline, Duration::from_millis(250), "the killed replica never caught up", || {
        caught_up(port, produced)
    });
    // The last replica wrote a snapshot per partition, then deltas, each far smaller.
    let of = |family: &str, kind: &str| got.get(&series(family, &[("kind", kind)])).copied().unwrap_or(0.0);
    let (snapshots, deltas) =
        (of("rankpulse_changelog_records_total", "snapshot"), of("rankpulse_changelog_records_total", "delta"));
    assert!(snapshots >= f64::from(PARTITIONS) && deltas > 2.0 * snapshots, "{snapshots} snapshots, {deltas} deltas");
    let per_snapshot = of("rankpulse_changelog_bytes_total", "snapshot") / snapshots;
    let per_delta = of("rankpulse_changelog_bytes_total", "delta") / deltas;
    eprintln!("{snapshots} snapshots of {per_snapshot:.0} bytes on average, {deltas} deltas of {per_delta:.0}");
    assert!(per_delta * 3.0 < per_snapshot, "a delta is {per_delta:.0} bytes, a snapshot {per_snapshot:.0}");
    // The records reached the broker compressed (`state.compression`, lz4 by default), as
    // librdkafka's statistics count the bytes sent.
    let payload: f64 = ["snapshot", "delta"].iter().map(|k| of("rankpulse_changelog_bytes_total", k)).sum::<f64>()
        + ["base", "increment"].iter().map(|k| of("rankpulse_aggregates_bytes_total", k)).sum::<f64>();
    let sent = got.get("rankpulse_state_bytes_sent_total").copied().unwrap_or(0.0);
    eprintln!("{payload:.0} bytes of records, {sent:.0} bytes sent to the broker");
    assert!(sent > 0.0 && sent < 0.8 * payload, "{sent} bytes sent for {payload} bytes of records");
    let (want, got) = (totals(&want), totals(&got));
    assert!(want.len() > 50, "compared too few series: {}", want.len());
    let differing: Vec<String> = want
        .iter()
        .filter(|(k, v)| got.get(*k) != Some(v))
        .map(|(k, v)| format!("{k}: uninterrupted {v}, killed twice {:?}", got.get(k)))
        .collect();
    assert!(differing.is_empty(), "totals differ:\n{}", differing.join("\n"));
    assert_eq!(got.len(), want.len());
    for daemon in [reference, replica] {
        let (status, _) = daemon.terminate(Duration::from_secs(15));
        assert!(status.success());
    }
}
