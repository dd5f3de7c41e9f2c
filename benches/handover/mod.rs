//! The stages that need a broker in its own process (tansu, memory storage): librdkafka's mock
//! cluster keeps about 5 MB per partition, and a million pending impressions are about 150 MB of
//! input in one partition and as much again per snapshot.
//!
//! - **handover**: the real binary consumes N impressions that all stay pending, then is
//!   stopped with SIGTERM (its final snapshot) and a new replica takes the partition over from
//!   the changelog; timed from its log and its `/metrics`.
//! - **changelog rate**: the demo's traffic (`rankpulse produce`, 200 searches/s) consumed by
//!   `serve` with the default checkpoint interval; the bytes each snapshot round writes, per
//!   second.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

use crate::common::{free_port, http_get, parse_exposition, serve_config, wait_for, Broker, Daemon, BIN};
use crate::{median, Results};

/// Impressions produced after a replica stopped, so the next one has something to resume with:
/// the first of them consumed marks the end of the handover.
const EXTRA: u64 = 100;
/// Handovers per state size: three gives a median, and each adds only `EXTRA` to the state.
const HANDOVERS: usize = 3;

/// Produces impressions `first..first + count` (10 results each, no engagements) to partition 0,
/// stamped within the last few minutes so `limits.max_past` keeps them and a 1h attribution
/// window keeps them all pending.
fn produce_impressions(brokers: &str, topic: &str, first: u64, count: u64) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("linger.ms", "20")
        .set("queue.buffering.max.messages", "200000")
        .create()
        .unwrap();
    let t0 = chrono::Utc::now().timestamp_millis() - 300_000;
    let mut payload = String::new();
    for i in first..first + count {
        use std::fmt::Write;
        payload.clear();
        write!(payload, r#"{{"query_id":"h-{i}","timestamp":{},"results":["#, t0 + (i % 200_000) as i64).unwrap();
        for r in 0..10 {
            write!(payload, r#"{}"doc-{}""#, if r > 0 { "," } else { "" }, (i * 31 + r * 7) % 100_003).unwrap();
        }
        let variant = ["control", "treatment"][(i % 2) as usize];
        write!(payload, r#"],"experiment":"handover","variant":"{variant}"}}"#).unwrap();
        let mut record = BaseRecord::<(), str>::to(topic).partition(0).payload(payload.as_str());
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((_, r)) => {
                    record = r;
                    producer.poll(Duration::from_millis(5));
                }
            }
        }
    }
    producer.flush(Duration::from_secs(300)).unwrap();
}

/// The series of a scrape, or `None` while the endpoint does not answer.
pub(crate) fn scrape(port: u16) -> Option<std::collections::BTreeMap<String, f64>> {
    match http_get(port, "/metrics") {
        Some((200, body)) => Some(parse_exposition(&body)),
        _ => None,
    }
}

/// The sum of every series of a family (over all its labels).
pub(crate) fn total(series: &std::collections::BTreeMap<String, f64>, family: &str) -> f64 {
    series.iter().filter(|(k, _)| *k == family || k.starts_with(&format!("{family}{{"))).map(|(_, v)| v).sum()
}

/// The first JSON log line of a daemon with this message, once it is written.
fn log_line(daemon: &Daemon, message: &str) -> Option<serde_json::Value> {
    daemon
        .output()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["message"] == message)
}

/// `rankpulse serve` with JSON logs, so the restore's fields can be read back.
pub(crate) fn spawn_serve(config: &std::path::Path) -> Daemon {
    Daemon::spawn(&["--log-format", "json", "serve", "--config", config.to_str().unwrap()])
}

/// One handover: what the new owner took to restore and then to consume again.
struct Handover {
    /// SIGTERM to exit of the old owner (its final snapshot, the commit, leaving the group).
    stop_seconds: f64,
    /// The new owner's start to the start of its restore (the group join, mostly).
    join_seconds: f64,
    /// The restore: reading the newest snapshot back from the changelog, decoding, restoring
    /// (`took_ms` of the log line `partition restored` with `source` = `changelog`).
    restore_seconds: f64,
    /// The restore's end (its log line) to the first message after the snapshot's offsets
    /// seen consumed on `/metrics` (polled every few milliseconds).
    resume_seconds: f64,
    /// The snapshot's size, as the restore read it.
    snapshot_bytes: f64,
}

/// Handover of one partition holding `n` pending impressions, `HANDOVERS` times. The `state`
/// stage runs it at 1M too, for issue 53's restore target, rather than a copy of it.
pub(crate) fn handover_at(n: u64, results: &mut Results) {
    let Some(tansu) = Broker::tansu() else { return };
    let brokers = tansu.bootstrap();
    let (imp, eng) = ("handover-impressions", "handover-engagements");
    tansu.create_topic(imp, 1);
    tansu.create_topic(eng, 1);
    let started = Instant::now();
    produce_impressions(&brokers, imp, 0, n);
    eprintln!("  {n} impressions produced to tansu in {:.1} s", started.elapsed().as_secs_f64());

    let dir = tempfile::tempdir().unwrap();
    let sections = format!(
        "[kafka]\ngroup_id = \"handover\"\nimpressions_topic = \"{imp}\"\nengagements_topic = \"{eng}\"\n\
         [join]\nattribution_window = \"1h\"\n[state]\nchangelog_replication_factor = 1\n"
    );
    let config = |name: &str, port: u16| serve_config(dir.path(), name, &brokers, port, &sections);

    // The first owner consumes everything and snapshots it at least once more.
    let mut port = free_port();
    let mut owner = spawn_serve(&config("owner-0", port));
    let deadline = Instant::now() + Duration::from_secs(900);
    let mut first_consumed = None;
    let full = wait_for(deadline, Duration::from_millis(50), "the first owner did not consume everything", || {
        let s = scrape(port)?;
        if total(&s, "rankpulse_events_consumed_total") > 0.0 {
            first_consumed.get_or_insert_with(Instant::now);
        }
        (total(&s, "rankpulse_pending_impressions") == n as f64).then_some(s)
    });
    let consume_rate = n as f64 / first_consumed.unwrap().elapsed().as_secs_f64();
    // A round that started before the last message may end after it: the second round to end
    // from now on snapshots the whole state.
    let rounds = total(&full, "rankpulse_checkpoints_total");
    let round = wait_for(deadline, Duration::from_millis(100), "no snapshot round at the full state", || {
        scrape(port).filter(|s| total(s, "rankpulse_checkpoints_total") >= rounds + 2.0)
    });
    let (round_bytes, round_seconds) =
        (total(&round, "rankpulse_checkpoint_bytes"), total(&round, "rankpulse_checkpoint_duration_seconds"));
    eprintln!(
        "  consumed at {consume_rate:.0} impressions/s; one snapshot round at {n} pending: {round_bytes} bytes in {round_seconds:.3} s"
    );

    let mut handovers = Vec::new();
    let mut pending = n;
    for h in 1..=HANDOVERS {
        let (status, took) = owner.terminate(Duration::from_secs(600));
        assert!(status.success(), "the owner did not stop cleanly");
        produce_impressions(&brokers, imp, pending, EXTRA);
        port = free_port();
        let spawned = Instant::now();
        owner = spawn_serve(&config(&format!("owner-{h}"), port));
        let restored = wait_for(deadline, Duration::from_millis(2), "the new owner did not restore", || {
            // Named `partition restored from the changelog` until the warm standby gave the line a
            // `source` (322fba0): waiting for the old name hung the stage until its deadline.
            log_line(&owner, "partition restored").filter(|l| l["source"] == "changelog")
        });
        let logged = Instant::now();
        let resumed_at = wait_for(deadline, Duration::from_millis(2), "the new owner did not resume", || {
            scrape(port)
                .filter(|s| total(s, "rankpulse_events_consumed_total") > pending as f64)
                .map(|_| Instant::now())
        });
        assert_eq!(restored["pending"].as_u64(), Some(pending), "the restored state lost impressions");
        let restore_seconds = restored["took_ms"].as_f64().unwrap() / 1000.0;
        let handover = Handover {
            stop_seconds: took.as_secs_f64(),
            join_seconds: ((logged - spawned).as_secs_f64() - restore_seconds).max(0.0),
            restore_seconds,
            resume_seconds: (resumed_at - logged).as_secs_f64(),
            snapshot_bytes: restored["bytes"].as_f64().unwrap(),
        };
        eprintln!(
            "  handover {h}: old owner stopped in {:.2} s; new owner joined in {:.2} s, restored {} bytes in {:.3} s, consumed again {:.3} s later",
            handover.stop_seconds, handover.join_seconds, handover.snapshot_bytes, handover.restore_seconds, handover.resume_seconds
        );
        handovers.push(handover);
        pending += EXTRA;
        let all = pending as f64;
        wait_for(deadline, Duration::from_millis(20), "the new owner lost impressions", || {
            scrape(port).filter(|s| total(s, "rankpulse_pending_impressions") == all)
        });
    }
    drop(owner);

    let key = |what: &str| format!("handover_{}k_{what}", n / 1000);
    let med = |f: fn(&Handover) -> f64| median(handovers.iter().map(f).collect());
    let restore = med(|h| h.restore_seconds);
    let resume = med(|h| h.resume_seconds);
    results.insert(key("consume_impressions_per_second"), consume_rate.into());
    results.insert(key("round_bytes"), round_bytes.into());
    results.insert(key("round_seconds"), round_seconds.into());
    results.insert(key("snapshot_bytes"), med(|h| h.snapshot_bytes).into());
    results.insert(key("snapshot_bytes_per_pending"), (med(|h| h.snapshot_bytes) / n as f64).into());
    results.insert(key("stop_seconds"), med(|h| h.stop_seconds).into());
    results.insert(key("join_seconds"), med(|h| h.join_seconds).into());
    results.insert(key("restore_seconds"), restore.into());
    results.insert(key("resume_seconds"), resume.into());
    results.insert(key("assignment_to_consumption_seconds"), med(|h| h.restore_seconds + h.resume_seconds).into());
    results.insert(key("rounds"), handovers.len().into());
}

/// Handover time at 100k and 1M pending impressions in one partition.
pub fn handover(results: &mut Results) {
    for n in [100_000, 1_000_000] {
        eprintln!("handover at {n} pending impressions");
        handover_at(n, results);
    }
}

/// How long the demo's traffic runs before bytes are counted: past the demo's attribution window
/// (30 s) and disorder bound, so the pending state has reached its steady size.
const WARM_UP: Duration = Duration::from_secs(45);
/// How long snapshot rounds are counted.
const MEASURED: Duration = Duration::from_secs(60);

/// Changelog and aggregates bytes per second under the demo's traffic, default checkpoint
/// interval.
pub fn changelog_rate(results: &mut Results) {
    let Some(tansu) = Broker::tansu() else { return };
    let brokers = tansu.bootstrap();
    // The demo's topics: four partitions each.
    let (imp, eng) = ("search-impressions", "search-engagements");
    for topic in [imp, eng] {
        tansu.create_topic(topic, rankpulse::demo::PARTITIONS);
    }
    // The demo's rate (200 searches/s) and faults, produced live by the real command.
    let mut producer = Command::new(BIN)
        .args(["produce", "--brokers", &brokers, "--rate", "200", "--faults", "0.001"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting rankpulse produce");
    // The demo's configuration (`commands::demo::demo_config`) as a file, with `[state]` left
    // at its defaults but for the replication factor one broker allows.
    let dir = tempfile::tempdir().unwrap();
    let sections = "[kafka]\ngroup_id = \"rankpulse-demo\"\n\
        [join]\nattribution_window = \"30s\"\nmax_out_of_orderness = \"2s\"\nidle_timeout = \"10s\"\n\
        [metrics]\nwindows = [\"1m\", \"5m\"]\n[ab]\nunit = \"client_id\"\n[state]\nchangelog_replication_factor = 1\n";
    let port = free_port();
    let serve = spawn_serve(&serve_config(dir.path(), "demo", &brokers, port, sections));
    std::thread::sleep(WARM_UP);
    let rounds = watch_rounds(port, MEASURED, || 0.0);
    let _ = producer.kill();
    let _ = producer.wait();
    drop(serve);
    assert!(rounds.len() >= 3, "only {} snapshot rounds in {MEASURED:?}", rounds.len());
    assert!(rounds.iter().all(|r| r.missed == 0), "a snapshot round was missed");
    // From the first round seen to the last: the bytes of every round after the first.
    let span = (rounds.last().unwrap().at - rounds[0].at).as_secs_f64();
    let per_second = rounds[1..].iter().map(|r| r.bytes).sum::<f64>() / span;
    results.insert("changelog_rounds".into(), rounds.len().into());
    results.insert("changelog_bytes_per_second".into(), per_second.into());
    results.insert("changelog_round_bytes".into(), median(rounds.iter().map(|r| r.bytes).collect()).into());
    results.insert("changelog_round_seconds".into(), median(rounds.iter().map(|r| r.seconds).collect()).into());
    results.insert("changelog_pending_impressions".into(), median(rounds.iter().map(|r| r.pending).collect()).into());
}

/// One snapshot round as `/metrics` showed it just after it ended.
pub(crate) struct Round {
    /// When the scrape saw it.
    pub at: Instant,
    /// Its changelog and aggregates payload bytes, all partitions (`rankpulse_checkpoint_bytes`).
    pub bytes: f64,
    /// Its duration (`rankpulse_checkpoint_duration_seconds`).
    pub seconds: f64,
    /// `rankpulse_pending_impressions` at that scrape.
    pub pending: f64,
    /// `rankpulse_events_consumed_total` at that scrape.
    pub consumed: f64,
    /// Rounds that ended between this scrape and the one before, unseen (their bytes unknown).
    pub missed: u32,
    /// What `sample` returned at that scrape (the `state` stage: input bytes produced so far).
    pub sampled: f64,
    /// How long that scrape took (rendering `/metrics` holds the engine's lock).
    pub scrape_seconds: f64,
    /// The state records' bytes written by then, by kind: changelog snapshots and deltas,
    /// aggregates bases and increments (the `_bytes_total` counters): what each round held.
    pub by_kind: [f64; 4],
    /// `rankpulse_state_bytes_sent_total` by then (compressed, framed).
    pub sent: f64,
}

/// The state records' bytes written so far, by kind (see [`Round::by_kind`]).
pub(crate) fn bytes_by_kind(series: &std::collections::BTreeMap<String, f64>) -> [f64; 4] {
    let of = |family: &str, kind: &str| {
        let kind = format!("kind=\"{kind}\"");
        series.iter().filter(|(k, _)| k.starts_with(family) && k.contains(&kind)).map(|(_, v)| v).sum::<f64>()
    };
    [
        of("rankpulse_changelog_bytes_total", "snapshot"),
        of("rankpulse_changelog_bytes_total", "delta"),
        of("rankpulse_aggregates_bytes_total", "base"),
        of("rankpulse_aggregates_bytes_total", "increment"),
    ]
}

/// Every snapshot round that ends within `span`, from `/metrics` polled every 2 s: the gauges
/// hold only the last round's figures and `rankpulse_checkpoints_total` says a new one ended,
/// and the next round is due 5 s after one ends, so polling this often sees each (`missed` says
/// if not). Not more often: a scrape renders under the engine's lock, and with the `state`
/// stage's state one took 60 to 90 ms, a sixth of the engine's time at a scrape every 500 ms.
/// Shared by `changelog rate` and the `state` stage, which samples its producer's byte count
/// with each round.
pub(crate) fn watch_rounds(port: u16, span: Duration, mut sample: impl FnMut() -> f64) -> Vec<Round> {
    let (mut rounds, mut last) = (Vec::new(), None);
    let started = Instant::now();
    while started.elapsed() < span {
        let scraping = Instant::now();
        if let Some(s) = scrape(port) {
            let scrape_seconds = scraping.elapsed().as_secs_f64();
            let count = total(&s, "rankpulse_checkpoints_total");
            if let Some(before) = last.filter(|&l| count > l) {
                rounds.push(Round {
                    at: Instant::now(),
                    bytes: total(&s, "rankpulse_checkpoint_bytes"),
                    seconds: total(&s, "rankpulse_checkpoint_duration_seconds"),
                    pending: total(&s, "rankpulse_pending_impressions"),
                    consumed: total(&s, "rankpulse_events_consumed_total"),
                    missed: (count - before - 1.0) as u32,
                    sampled: sample(),
                    scrape_seconds,
                    by_kind: bytes_by_kind(&s),
                    sent: total(&s, "rankpulse_state_bytes_sent_total"),
                });
            }
            last = Some(count);
        }
        std::thread::sleep(Duration::from_secs(2));
    }
    rounds
}
