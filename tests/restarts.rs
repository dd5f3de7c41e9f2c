//! Fast and reliable restarts: one `rankpulse serve` replica with static group membership
//! (`kafka.group_instance_id`) is SIGKILLed three times, each time a few seconds after it got
//! its partitions back, while traffic flows. It consumes again after every restart, and once
//! the stream is finalized every exported `_sum`, `_count` and `_total` equals that of an
//! uninterrupted replica (another group on the same topics), exactly. The replica keeps
//! nothing locally: every restart restores from the changelog alone, and loses nothing.
//!
//! On tansu, with the default session timeout (45 s): tansu honours `group.instance.id`, so the
//! restarted replica gets its own partitions back without waiting for the dead member's session
//! to expire. Measured: 6.1 to 6.2 s from SIGKILL to consuming, of which 6 s are tansu's own pauses
//! (3 s in JoinGroup and 3 s in SyncGroup for a static member, `PAUSE_MS` in its coordinator);
//! without static membership 45 to 48 s.
//!
//! On librdkafka's mock cluster, with a 6 s session timeout: its classic group coordinator
//! looks members up by member id only (`rd_kafka_mock_cgrp_classic_member_add`), so a restarted
//! static member is a new member there and waits for the dead one's session to expire (measured
//! with the default timeout: 90 s after the first kill, 44 to 46 s after later ones, with and
//! without `group.instance.id`, for rankpulse and for a plain rdkafka consumer alike). The short
//! timeout keeps that wait, and the test, short; what it shows there is the exactness.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use rdkafka::config::ClientConfig;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

const PARTITIONS: i32 = 4;
/// Impressions per produced batch, and the pause after each: about 150 impressions a second.
const BATCH_IMPRESSIONS: usize = 20;
const BATCH_PAUSE: Duration = Duration::from_millis(100);
/// How long after it got its partitions (back) the replica is killed.
const KILL_AFTER: Duration = Duration::from_secs(3);
const KILLS: usize = 3;

fn sections(group_id: &str, instance: &str, session: &str) -> String {
    format!(
        r#"
[kafka]
group_id = "{group_id}"
group_instance_id = "{instance}"
impressions_topic = "{IMP_TOPIC}"
engagements_topic = "{ENG_TOPIC}"
[kafka.properties]
{session}
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

/// Where the replica under test is in its kill-and-restart cycle.
enum Phase {
    /// Started or killed at the instant: waiting for readiness, which comes with a non-empty
    /// assignment (restored from the changelog by then).
    Starting(Instant),
    /// Ready; waiting for the consumed count to pass what it was then (the restored count).
    Assigned { since: Instant, consumed: f64 },
    /// Consuming again since the instant; killed [`KILL_AFTER`] later.
    Consuming(Instant),
    /// Killed [`KILLS`] times and consuming again: this many more batches, then the end.
    Done(usize),
}

/// The sum of `rankpulse_events_consumed_total` on `port`, if it answers.
fn consumed_on(port: u16) -> Option<f64> {
    http_get(port, "/metrics").map(|(_, body)| consumed_total(&parse_exposition(&body)))
}

/// The test: a reference replica and the replica under test in two groups on the same topics,
/// fed a stream while the one under test is killed and restarted; `restart_bound` is the
/// longest a restart may take, from SIGKILL to consuming again.
fn run_restarts(broker: &Broker, session: &str, restart_bound: Duration) {
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    eprintln!("restarts seed {seed}");
    broker.create_topic(IMP_TOPIC, PARTITIONS);
    broker.create_topic(ENG_TOPIC, PARTITIONS);
    for group in ["reference", "replica"] {
        broker.create_state_topics(group, PARTITIONS);
    }
    let brokers = broker.bootstrap();
    // One message per record batch on tansu: a fetch from inside a batch is served from the
    // next batch there (see tests/crash_restart.rs).
    let batch_messages = if matches!(broker, Broker::Tansu { .. }) { "1" } else { "10000" };
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("batch.num.messages", batch_messages)
        .create()
        .unwrap();
    // Event time runs up to twice as fast as the wall clock, from far enough back that it never
    // overtakes it.
    let mut stream = Stream::new(seed, chrono::Utc::now().timestamp_millis() - 900_000, PARTITIONS);

    let dir = tempfile::tempdir().unwrap();
    let (ref_port, port) = (free_port(), free_port());
    let reference_cfg =
        serve_config(dir.path(), "reference", &brokers, ref_port, &sections("reference", "reference-0", session));
    let cfg = serve_config(dir.path(), "replica", &brokers, port, &sections("replica", "replica-0", session));
    let serve = |cfg: &std::path::Path| Daemon::spawn(&["serve", "--config", cfg.to_str().unwrap()]);
    let reference = serve(&reference_cfg);
    let mut replica = serve(&cfg);
    let mut phase = Phase::Starting(Instant::now());
    // SIGKILL to consuming again, per restart.
    let mut restarts: Vec<Duration> = Vec::new();
    let mut kills = 0;

    // Production never pauses for longer than a batch: a pause longer than join.idle_timeout
    // would rightly let the wall clock move the watermark, in one replica and not the other.
    loop {
        let drain = matches!(phase, Phase::Done(0));
        for (topic, partition, payload) in stream.batch(BATCH_IMPRESSIONS, drain) {
            let mut record = BaseRecord::<(), str>::to(topic).partition(partition).payload(payload.as_str());
            while let Err((_, back)) = producer.send(record) {
                record = back;
                producer.poll(Duration::from_millis(10));
            }
        }
        producer.flush(Duration::from_secs(30)).expect("the broker did not take a batch within 30 s");
        if drain {
            break;
        }
        let now = Instant::now();
        // The first start joins an empty group; only restarts have to beat the bound.
        let bound = if kills == 0 { Duration::from_secs(60) } else { restart_bound };
        let since_kill = |since: Instant| {
            let waited = now - since;
            assert!(waited <= bound, "not consuming {waited:?} after SIGKILL {kills} (earlier restarts: {restarts:?})");
        };
        phase = match phase {
            Phase::Starting(since) => {
                since_kill(since);
                match (http_get(port, "/readyz").map(|r| r.0), consumed_on(port)) {
                    (Some(200), Some(consumed)) => Phase::Assigned { since, consumed },
                    _ => Phase::Starting(since),
                }
            }
            Phase::Assigned { since, consumed } => {
                since_kill(since);
                if consumed_on(port).is_some_and(|c| c > consumed) {
                    if kills > 0 {
                        restarts.push(now - since);
                        eprintln!("restart {kills}: consuming {:.1} s after SIGKILL", (now - since).as_secs_f64());
                    }
                    Phase::Consuming(now)
                } else {
                    Phase::Assigned { since, consumed }
                }
            }
            Phase::Consuming(since) if now - since >= KILL_AFTER && kills == KILLS => Phase::Done(20),
            Phase::Consuming(since) if now - since >= KILL_AFTER => {
                replica.kill();
                kills += 1;
                let killed = Instant::now();
                replica = serve(&cfg);
                Phase::Starting(killed)
            }
            Phase::Done(left) => Phase::Done(left - 1),
            consuming => consuming,
        };
        std::thread::sleep(BATCH_PAUSE);
    }
    assert_eq!(restarts.len(), KILLS);
    let produced = stream.produced;
    let impressions = stream.next;

    let (_, want) = scrape_until(ref_port, Duration::from_secs(60), |m| finished(m, produced, impressions));
    let (exposition, got) = scrape_until(port, Duration::from_secs(60), |m| finished(m, produced, impressions));
    let (want, got_totals) = (totals(&want), totals(&got));
    assert!(want.len() > 100, "compared too few series: {}", want.len());
    let differing: Vec<String> = want
        .iter()
        .filter(|(k, v)| got_totals.get(*k) != Some(v))
        .map(|(k, v)| format!("{k}: uninterrupted {v}, killed {KILLS} times {:?}", got_totals.get(k)))
        .collect();
    assert!(differing.is_empty(), "totals differ after SIGKILL and restore:\n{}", differing.join("\n"));
    assert_eq!(got_totals.len(), want.len());
    assert!(got.get("rankpulse_engagements_duplicate_total").copied().unwrap_or(0.0) > 0.0);
    eprintln!("after {KILLS} SIGKILLs: {} totals equal to the uninterrupted run exactly", want.len());
    promtool_check(&exposition);
    for daemon in [reference, replica] {
        let (status, _) = daemon.terminate(Duration::from_secs(15));
        assert!(status.success());
    }
}

/// Each test runs two daemons and produces for about a minute: one at a time on a 2-core machine.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn static_member_restarts_fast_and_exact_on_tansu_with_the_default_session_timeout() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let Some(broker) = Broker::tansu() else { return };
    // Well below the 45 s session timeout a dynamic member waits for.
    run_restarts(&broker, "", Duration::from_secs(20));
}

#[test]
fn static_member_restarts_exact_on_the_mock_cluster() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let broker = Broker::Mock(MockCluster::new(3).unwrap());
    // The mock waits out the dead member's session (see the module documentation): up to
    // about twice the timeout.
    run_restarts(
        &broker,
        "\"session.timeout.ms\" = \"6000\"\n\"heartbeat.interval.ms\" = \"500\"",
        Duration::from_secs(30),
    );
}
