//! Issue 53's first figures (`RANKPULSE_BENCH_ONLY=state`): what the changelog costs under
//! steady traffic with the shipped `[join]` and `[state]` (a 30-minute attribution window, a
//! snapshot round every 5 s), so that the same stage shows the "before" (every round writes
//! every partition's whole state) and, once the changelog is incremental, the "after".
//!
//! The real binary (`rankpulse serve`) against tansu, four-partition topics, clicks and CUPED
//! on. Its input is the generator of `rankpulse generate --interleaving --judgments`: the
//! demo's A/B searches at 200/s and the duel that `produce` sends with them, plus the head
//! queries (one per three searches), whose `query` text is what the click log tracks
//! (`produce`'s traffic carries none, so with it the click log would stay empty), and a
//! pre-period the day before for CUPED. `produce` cannot start in the past, so the stage
//! produces the generated files itself, each message when its event time comes: the first
//! 30 minutes of event time (and the day before) at once, as fast as the broker takes them,
//! so the pending set starts at its steady size; then in real time. Producing it here also
//! gives the input's size, which no metric of `serve` counts: the bytes consumed are the
//! messages consumed times the mean size of those produced.
//!
//! Per run, after `serve` has consumed the prefill and 3 more rounds, and the prefill's
//! aftermath is written (the windows it closed carried by the aggregates records, then a round
//! without a base or a snapshot): every snapshot round
//! for `RANKPULSE_BENCH_STATE_SECONDS` (default 300) from `/metrics`
//! ([`crate::handover::watch_rounds`]), each with the messages consumed and the input
//! produced by then (`RANKPULSE_BENCH_STATE_ROUNDS=1` prints each round's records by kind,
//! with how far `serve` is behind, the producer's unacknowledged messages and what a plain
//! consumer of its own group read meanwhile, [`spawn_witness`]). Two runs: the default window and a 2-minute one
//! (`RANKPULSE_BENCH_STATE_WINDOW=30m` or `2m` runs one). Then the restore of a partition holding 1M
//! pending impressions, which is the `handover` stage's measurement
//! ([`crate::handover::handover_at`]); `RANKPULSE_BENCH_STATE_RESTORE=0` skips it.
//!
//! Two ratios to the input: the records' payload (the rounds' bytes, before compression), and
//! what reached the brokers, `rankpulse_state_bytes_sent_total` (compressed by
//! `state.compression`, framed) over the same span's input: the latter is issue 53's target.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rankpulse::demo::{write_traffic_with, Extras, FaultRate};
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};

use crate::common::{free_port, serve_config, wait_for, Broker};
use crate::handover::{bytes_by_kind, handover_at, scrape, spawn_serve, total, watch_rounds, Round};
use crate::{fmt, median, verdict, Results};

/// The demo's searches per second (A/B traffic; the duel and head queries come on top).
const RATE: u32 = 200;
/// Event time produced at once before the real-time traffic: the shipped attribution window.
const PREFILL_SECONDS: u64 = 30 * 60;
/// Event time generated beyond the prefill and the measurement, for the prefill's catch-up and
/// the warm-up rounds; the stage fails if the files run out before the measurement ends.
const SLACK_SECONDS: u64 = 600;
/// Searches of the same clients the day before (`generate --pre-period`): CUPED's pre-period.
const PRE_PERIOD: u64 = 20_000;
/// Rounds after the prefill is consumed before the measurement starts: the first rounds after
/// the catch-up still carry its backlog's effects.
const WARM_UP_ROUNDS: f64 = 3.0;
/// Closed windows waiting to be carried that still count as settled: at most one of each of the
/// shipped three sizes on each of the four partitions (what closes between two rounds).
const SETTLED_WINDOWS: f64 = 12.0;
/// The shipped `state.checkpoint_interval`, in seconds: issue 53's target takes a round's
/// duration over this as its share of the consumer thread (the round runs on that thread and
/// blocks it; the next is due an interval after it ends, so the time it takes is a little less).
const INTERVAL_SECONDS: f64 = 5.0;

/// Both windows, then the restore at 1M pending.
pub fn state(results: &mut Results) {
    let started = Instant::now();
    let seconds: u64 = std::env::var("RANKPULSE_BENCH_STATE_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(300);
    let only = std::env::var("RANKPULSE_BENCH_STATE_WINDOW").ok();
    for (label, window) in [("30m", None), ("2m", Some("2m"))] {
        if only.as_deref().is_some_and(|only| only != label) {
            continue;
        }
        eprintln!("state: attribution window {label}, {seconds} s measured after a {PREFILL_SECONDS} s prefill");
        if !steady(label, window, seconds, results) {
            return;
        }
    }
    // The whole suite has just measured it in the `handover` stage.
    let measured = results.contains_key("handover_1000k_restore_seconds");
    if !measured && std::env::var("RANKPULSE_BENCH_STATE_RESTORE").as_deref() != Ok("0") {
        eprintln!("state: restore at 1,000,000 pending impressions (the handover stage's measurement)");
        handover_at(1_000_000, results);
    }
    results.insert("state_measured_seconds".into(), seconds.into());
    results.insert("state_stage_seconds".into(), started.elapsed().as_secs_f64().into());
}

/// What the producer thread has sent, and the stage's word to it.
#[derive(Default)]
struct Sent {
    /// Payload bytes handed to the producer so far (malformed messages included: `serve`
    /// consumes them too).
    bytes: AtomicU64,
    /// Messages handed to the producer so far.
    messages: AtomicU64,
    /// Messages handed to the producer that the broker has not acknowledged yet, as of the
    /// producer thread's last pass: whether a stretch without consumption is the broker's.
    in_flight: AtomicU64,
    /// Messages of the prefill: everything stamped before the producer caught up with the clock.
    prefill: AtomicU64,
    /// Set once the producer caught up with the clock (`prefill` is then final).
    prefilled: AtomicBool,
    /// Set when the files ran out.
    exhausted: AtomicBool,
    /// Messages a plain consumer of its own group ([`spawn_witness`]) has read from both topics:
    /// whether a stretch in which `serve` consumes nothing is the broker's.
    witnessed: AtomicU64,
    /// The stage's stop.
    stop: AtomicBool,
}

/// One run: the window `window` (`None`: the shipped 30 minutes). `false` without tansu.
fn steady(label: &str, window: Option<&str>, seconds: u64, results: &mut Results) -> bool {
    let Some(tansu) = Broker::tansu() else { return false };
    let brokers = tansu.bootstrap();
    // The shipped topic names, four partitions each (the demo's).
    let topics = ("search-impressions", "search-engagements");
    for topic in [topics.0, topics.1] {
        tansu.create_topic(topic, rankpulse::demo::PARTITIONS);
    }
    let dir = tempfile::tempdir().unwrap();
    let files = traffic_files(dir.path(), seconds);
    // `[join]` and `[state]` at their defaults but for the window of the second run and the
    // replication factor one broker allows; the click log and CUPED on (CUPED needs a unit:
    // the client, as in the demo).
    let join = window.map_or(String::new(), |w| format!("[join]\nattribution_window = \"{w}\"\n"));
    let sections = format!(
        "[kafka]\ngroup_id = \"rankpulse-state\"\n{join}[ab]\nunit = \"client_id\"\n\
         [ab.cuped]\nmetrics = [\"ndcg@10\", \"mrr\"]\n[clicks]\nenabled = true\n\
         [state]\nchangelog_replication_factor = 1\n"
    );
    let port = free_port();
    let serve = spawn_serve(&serve_config(dir.path(), label, &brokers, port, &sections));
    let sent = Arc::new(Sent::default());
    let started = Instant::now();
    let producer = spawn_producer(&brokers, topics, files, sent.clone());
    // Only when the rounds are printed: a second consumer changes what the broker does (with it,
    // the stretches without consumption that `serve` otherwise sees did not occur).
    let print = std::env::var("RANKPULSE_BENCH_STATE_ROUNDS").as_deref() == Ok("1");
    let witness = print.then(|| spawn_witness(&brokers, topics, sent.clone()));

    let deadline = Instant::now() + Duration::from_secs(1200);
    let consumed = wait_for(deadline, Duration::from_millis(500), "serve did not consume the prefill", || {
        if !sent.prefilled.load(Ordering::Acquire) {
            return None;
        }
        let s = scrape(port)?;
        let consumed = total(&s, "rankpulse_events_consumed_total");
        (consumed >= sent.prefill.load(Ordering::Relaxed) as f64).then_some(s)
    });
    eprintln!(
        "  prefill: {} messages ({:.0} MB) produced and consumed in {:.1} s; {} pending impressions",
        sent.prefill.load(Ordering::Relaxed),
        sent.bytes.load(Ordering::Relaxed) as f64 / 1e6,
        started.elapsed().as_secs_f64(),
        total(&consumed, "rankpulse_pending_impressions")
    );
    let rounds = total(&consumed, "rankpulse_checkpoints_total");
    wait_for(deadline, Duration::from_millis(200), "no snapshot rounds after the prefill", || {
        scrape(port).filter(|s| total(s, "rankpulse_checkpoints_total") >= rounds + WARM_UP_ROUNDS)
    });
    // The prefill's aftermath: the windows it closed (all but the last window's worth of its
    // 30 minutes, with a 2-minute attribution window) wait to be carried by the aggregates
    // records, and the records that carry them make bases due. Both belong to the prefill's
    // input, not to the measurement's: it starts at the first round, once they are carried,
    // that writes no base nor snapshot.
    let settling = Instant::now();
    let mut last: Option<(f64, [f64; 4])> = None;
    wait_for(deadline, Duration::from_secs(2), "the prefill's windows were never carried", || {
        let s = scrape(port)?;
        let round = (total(&s, "rankpulse_checkpoints_total"), bytes_by_kind(&s));
        let carried = total(&s, "rankpulse_aggregates_windows_unwritten") <= SETTLED_WINDOWS;
        let quiet_round = last
            .is_some_and(|(count, kinds)| round.0 == count + 1.0 && round.1[0] == kinds[0] && round.1[2] == kinds[2]);
        if last.is_none_or(|(count, _)| round.0 > count) {
            last = Some(round);
        }
        (carried && quiet_round).then_some(())
    });
    eprintln!("  the prefill's windows carried and its bases written {:.0} s later", settling.elapsed().as_secs_f64());
    results.insert(format!("state_{label}_settling_seconds"), settling.elapsed().as_secs_f64().into());
    // With each round, the input produced by then: bytes (the round's `sampled`) and messages.
    let mut produced = Vec::new();
    let changelog_bytes = |s: &std::collections::BTreeMap<String, f64>| total(s, "rankpulse_changelog_bytes_total");
    let before = scrape(port);
    let changelog_before = before.as_ref().map(changelog_bytes);
    let (mut in_flight, mut witnessed) = (Vec::new(), Vec::new());
    let measured = watch_rounds(port, Duration::from_secs(seconds), || {
        produced.push(sent.messages.load(Ordering::Relaxed) as f64);
        in_flight.push(sent.in_flight.load(Ordering::Relaxed) as f64);
        witnessed.push(sent.witnessed.load(Ordering::Relaxed) as f64);
        sent.bytes.load(Ordering::Relaxed) as f64
    });
    let end = scrape(port);
    // The rounds' bytes split between the changelog's records and the aggregates records.
    if let (Some(before), Some(after)) = (changelog_before, end.as_ref().map(changelog_bytes)) {
        let written: f64 = measured.iter().skip(1).map(|r| r.bytes * f64::from(1 + r.missed)).sum();
        let rounds: f64 = measured.iter().skip(1).map(|r| f64::from(1 + r.missed)).sum();
        let changelog = after - before;
        eprintln!(
            "  per round over the measurement: {:.2} MB of changelog records, {:.2} MB of aggregates records",
            changelog / rounds.max(1.0) / 1e6,
            (written - changelog).max(0.0) / rounds.max(1.0) / 1e6
        );
        results.insert(format!("state_{label}_changelog_mb_per_round"), (changelog / rounds.max(1.0) / 1e6).into());
        results.insert(
            format!("state_{label}_aggregates_mb_per_round"),
            ((written - changelog).max(0.0) / rounds.max(1.0) / 1e6).into(),
        );
    }
    // What reached the brokers: the state producer's bytes sent (compressed, framed) over the
    // same two scrapes' input consumed (its messages times the mean message produced).
    if let (Some(before), Some(after)) = (&before, &end) {
        let of = |s: &std::collections::BTreeMap<String, f64>| {
            (total(s, "rankpulse_state_bytes_sent_total"), total(s, "rankpulse_events_consumed_total"))
        };
        let ((sent0, consumed0), (sent1, consumed1)) = (of(before), of(after));
        let (first, last) = (&measured[0], measured.last().unwrap());
        let mean_message = (last.sampled - first.sampled) / (produced[measured.len() - 1] - produced[0]).max(1.0);
        let per_byte = (sent1 - sent0) / ((consumed1 - consumed0) * mean_message).max(1.0);
        eprintln!(
            "  sent to the brokers (compressed): {:.2} MB per round, {per_byte:.2} bytes per input byte consumed",
            (sent1 - sent0) / (measured.len() as f64).max(1.0) / 1e6
        );
        results.insert(format!("state_{label}_sent_bytes_per_input_byte"), per_byte.into());
    }
    // The machine is shared: how busy it was over the last minute of the measurement.
    let load = std::fs::read_to_string("/proc/loadavg").ok().and_then(|l| l.split(' ').next()?.parse::<f64>().ok());
    sent.stop.store(true, Ordering::Relaxed);
    producer.join().unwrap();
    if let Some(witness) = witness {
        witness.join().unwrap();
    }
    assert!(!sent.exhausted.load(Ordering::Relaxed), "the traffic files ran out before the measurement ended");
    drop(serve);
    drop(tansu);
    if let Some(load) = load {
        eprintln!("  load average over the last minute: {load}");
        results.insert(format!("state_{label}_load_average_at_end"), load.into());
    }
    // What else the state holds at the end, to say where the bytes go beside pending impressions.
    if let Some(s) = &end {
        for family in ["dedup_keys", "held_engagements", "click_log_entries", "cuped_units", "label_groups"] {
            let v = total(s, &format!("rankpulse_{family}"));
            results.insert(format!("state_{label}_{family}_at_end"), v.into());
        }
        eprintln!(
            "  at the end: {} dedup keys, {} held engagements, {} click log entries, {} CUPED units",
            total(s, "rankpulse_dedup_keys"),
            total(s, "rankpulse_held_engagements"),
            total(s, "rankpulse_click_log_entries"),
            total(s, "rankpulse_cuped_units")
        );
    }
    // The changelog's records by kind over the whole run (the prefill's included), and the
    // aggregates records' bytes: where a round's bytes go.
    if let Some(s) = &end {
        let of = |family: &str, kind: &str| {
            s.iter()
                .filter(|(k, _)| k.starts_with(family) && k.contains(&format!("kind=\"{kind}\"")))
                .map(|(_, v)| v)
                .sum::<f64>()
        };
        // (topic, its two kinds of record, the prefix of their keys in the results)
        let topics = [("changelog", ["snapshot", "delta"], ""), ("aggregates", ["base", "increment"], "aggregates_")];
        for (topic, kinds, key) in topics {
            let records = kinds.map(|kind| of(&format!("rankpulse_{topic}_records_total"), kind));
            let bytes = kinds.map(|kind| of(&format!("rankpulse_{topic}_bytes_total"), kind));
            eprintln!(
                "  {topic} records over the run: {} {}s ({:.1} MB), {} {}s ({:.1} MB)",
                records[0],
                kinds[0],
                bytes[0] / 1e6,
                records[1],
                kinds[1],
                bytes[1] / 1e6,
            );
            for (i, kind) in kinds.into_iter().enumerate() {
                results.insert(format!("state_{label}_{key}{kind}_records"), records[i].into());
                results.insert(format!("state_{label}_{key}{kind}_bytes"), bytes[i].into());
            }
        }
    }
    if print {
        print_rounds(&measured, &produced, &in_flight, &witnessed);
    }
    summarize(label, &measured, &produced, results);
    true
}

/// The generated traffic as files (impressions, engagements): the prefill's 30 minutes of
/// event time up to now, the measurement and some slack after it, and the pre-period the day
/// before; `rankpulse generate --interleaving --judgments --pre-period` writes the same.
fn traffic_files(dir: &Path, seconds: u64) -> [PathBuf; 2] {
    let paths = [dir.join("impressions.jsonl"), dir.join("engagements.jsonl")];
    let start_ms = chrono::Utc::now().timestamp_millis() - PREFILL_SECONDS as i64 * 1000;
    let count = u64::from(RATE) * (PREFILL_SECONDS + seconds + SLACK_SECONDS);
    let create = |p: &Path| BufWriter::new(File::create(p).unwrap());
    let (mut imp, mut eng) = (create(&paths[0]), create(&paths[1]));
    // The judgment list itself is not needed: the head queries' impressions are.
    let mut judgments = std::io::sink();
    let extras = Extras { duel: true, judgments: Some(&mut judgments), pre_period: PRE_PERIOD };
    let at = (count, RATE, 2026, start_ms);
    let wrote = write_traffic_with(&mut imp, &mut eng, at, FaultRate::DEMO, extras).unwrap();
    imp.flush().unwrap();
    eng.flush().unwrap();
    eprintln!(
        "  generated {} searches, {} of the duel, {} of head queries, {} of the day before, {} engagements",
        wrote.impressions, wrote.duel, wrote.head, wrote.pre_period, wrote.engagements
    );
    paths
}

/// One message of a traffic file.
struct Message {
    /// Its `query_id`, as `produce` keys it; `malformed` for the injected malformed lines.
    key: String,
    payload: String,
    /// When it is sent: its event time (a malformed line goes with the line before it).
    at_ms: i64,
}

/// A traffic file read in order, one message ahead.
struct Lines {
    reader: BufReader<File>,
    next: Option<Message>,
    /// The event time of the last well-formed line.
    last_ms: i64,
}

/// The fields a message is keyed and paced by.
#[derive(serde::Deserialize)]
struct Head {
    query_id: Option<String>,
    timestamp: Option<i64>,
}

impl Lines {
    fn open(path: &Path) -> Lines {
        let mut lines = Lines { reader: BufReader::new(File::open(path).unwrap()), next: None, last_ms: 0 };
        lines.advance();
        lines
    }

    fn advance(&mut self) {
        let mut line = String::new();
        if self.reader.read_line(&mut line).unwrap() == 0 {
            self.next = None;
            return;
        }
        let payload = line.trim_end_matches('\n').to_string();
        let message = match serde_json::from_str::<Head>(&payload) {
            Ok(Head { query_id: Some(key), timestamp: Some(at_ms) }) => {
                self.last_ms = at_ms;
                Message { key, payload, at_ms }
            }
            _ => Message { key: "malformed".into(), payload, at_ms: self.last_ms },
        };
        self.next = Some(message);
    }
}

/// Sends the files' messages as their event time comes (at once for those already past), at
/// most a second of event time ahead of the other file, so impressions and engagements stay
/// interleaved through the prefill as they are in real time.
///
/// The producer serves its delivery reports on a thread of its own (`ThreadedProducer`): the
/// runs up to issue 53's seventh part polled a `BaseProducer` once per 10 ms pass, which serves
/// one event (one batch's reports) per call, fewer than the batches sent; the reports piled up
/// (200,000 within four minutes, the queue's limit) and sending then waited on them.
fn spawn_producer(brokers: &str, topics: (&str, &str), files: [PathBuf; 2], sent: Arc<Sent>) -> JoinHandle<()> {
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("linger.ms", "5")
        .set("queue.buffering.max.messages", "200000")
        .create()
        .unwrap();
    let topics = [topics.0.to_string(), topics.1.to_string()];
    std::thread::Builder::new()
        .name("state-producer".into())
        .spawn(move || {
            let mut inputs = files.map(|f| Lines::open(&f));
            while !sent.stop.load(Ordering::Relaxed) {
                let now = chrono::Utc::now().timestamp_millis();
                let Some(earliest) = inputs.iter().filter_map(|l| l.next.as_ref().map(|m| m.at_ms)).min() else {
                    sent.exhausted.store(true, Ordering::Relaxed);
                    break;
                };
                let upto = now.min(earliest + 1000);
                for (lines, topic) in inputs.iter_mut().zip(&topics) {
                    while lines.next.as_ref().is_some_and(|m| m.at_ms <= upto) {
                        let m = lines.next.take().unwrap();
                        send(&producer, topic, &m.key, &m.payload);
                        sent.bytes.fetch_add(m.payload.len() as u64, Ordering::Relaxed);
                        sent.messages.fetch_add(1, Ordering::Relaxed);
                        lines.advance();
                    }
                }
                sent.in_flight.store(u64::try_from(producer.in_flight_count()).unwrap_or(0), Ordering::Relaxed);
                if upto == now {
                    if !sent.prefilled.load(Ordering::Relaxed) {
                        sent.prefill.store(sent.messages.load(Ordering::Relaxed), Ordering::Relaxed);
                        sent.prefilled.store(true, Ordering::Release);
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            producer.flush(Duration::from_secs(60)).unwrap();
        })
        .unwrap()
}

/// A plain librdkafka consumer in a group of its own, reading both topics from the start as
/// `serve` does and counting what it reads ([`Sent::witnessed`]): the broker's side of a stretch
/// in which `serve` consumes nothing.
fn spawn_witness(brokers: &str, topics: (&str, &str), sent: Arc<Sent>) -> JoinHandle<()> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "state-bench-witness")
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    consumer.subscribe(&[topics.0, topics.1]).unwrap();
    std::thread::Builder::new()
        .name("state-witness".into())
        .spawn(move || {
            while !sent.stop.load(Ordering::Relaxed) {
                if let Some(Ok(_)) = consumer.poll(Duration::from_millis(100)) {
                    sent.witnessed.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
        .unwrap()
}

/// Hands one message to the producer, waiting for room in its queue.
fn send(producer: &ThreadedProducer<DefaultProducerContext>, topic: &str, key: &str, payload: &str) {
    let mut record = BaseRecord::to(topic).key(key).payload(payload);
    loop {
        match producer.send(record) {
            Ok(()) => return,
            Err((_, r)) => {
                record = r;
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

/// The figures of one run's rounds: each round's bytes against the input consumed since the
/// round before (a round unseen counted as the next one seen, which is logged). `produced`:
/// the messages produced by each round. No metric counts the bytes consumed: they are the
/// messages consumed (`rankpulse_events_consumed_total`) times the mean size of those produced
/// over the measurement, which holds as long as `serve` is behind by a steady amount; the ratio
/// to the bytes produced is kept beside it, with how far behind `serve` was.
fn summarize(label: &str, rounds: &[Round], produced: &[f64], results: &mut Results) {
    assert!(rounds.len() >= 4, "only {} snapshot rounds measured", rounds.len());
    let missed: u32 = rounds.iter().map(|r| r.missed).sum();
    if missed > 0 {
        eprintln!("  {missed} rounds unseen: each counted as the round seen after it");
    }
    let (first_round, last_round) = (&rounds[0], rounds.last().unwrap());
    let mean_message = (last_round.sampled - first_round.sampled) / (produced[rounds.len() - 1] - produced[0]).max(1.0);
    let written = |r: &Round| r.bytes * f64::from(1 + r.missed);
    let pairs: Vec<(f64, f64)> =
        rounds.windows(2).map(|w| (written(&w[1]), (w[1].consumed - w[0].consumed) * mean_message)).collect();
    let produced_ratio = rounds[1..].iter().map(written).sum::<f64>() / (last_round.sampled - first_round.sampled);
    let behind = [produced[0] - first_round.consumed, produced[rounds.len() - 1] - last_round.consumed];
    let ratio =
        |pairs: &[(f64, f64)]| pairs.iter().map(|p| p.0).sum::<f64>() / pairs.iter().map(|p| p.1).sum::<f64>().max(1.0);
    let third = (pairs.len() / 3).max(1);
    let (whole, first, last) = (ratio(&pairs), ratio(&pairs[..third]), ratio(&pairs[pairs.len() - third..]));
    let span = (rounds.last().unwrap().at - rounds[0].at).as_secs_f64();
    let written_per_second = pairs.iter().map(|p| p.0).sum::<f64>() / span;
    let input_per_second = pairs.iter().map(|p| p.1).sum::<f64>() / span;
    let round_seconds = median(rounds.iter().map(|r| r.seconds).collect());
    let round_max = rounds.iter().map(|r| r.seconds).fold(0.0, f64::max);
    let per_pending = median(rounds.iter().map(|r| r.bytes / r.pending.max(1.0)).collect());
    let pending = median(rounds.iter().map(|r| r.pending).collect());
    let round_bytes = median(rounds.iter().map(|r| r.bytes).collect());
    // Whether the state itself grows, apart from how fast `serve` consumes: the bytes written per
    // second in the first and the last third.
    let rate = |rounds: &[Round]| {
        rounds[1..].iter().map(written).sum::<f64>() / (rounds.last().unwrap().at - rounds[0].at).as_secs_f64()
    };
    let (written_first, written_last) = (rate(&rounds[..=third]), rate(&rounds[rounds.len() - 1 - third..]));
    let scrape_ms = median(rounds.iter().map(|r| r.scrape_seconds * 1000.0).collect());
    // The state's own size: a round's mean bytes in the first and the last third.
    let mean_bytes = |rounds: &[Round]| rounds.iter().map(|r| r.bytes).sum::<f64>() / rounds.len() as f64;
    let (bytes_first, bytes_last) = (mean_bytes(&rounds[..=third]), mean_bytes(&rounds[rounds.len() - 1 - third..]));
    eprintln!(
        "  {} rounds over {span:.0} s: {:.1} MB/s written for {:.3} MB/s of input = {whole:.1} bytes per input byte \
         (first third {first:.1}, last third {last:.1}); a round {:.1} MB in {round_seconds:.3} s (max {round_max:.3}) \
         at {pending:.0} pending impressions, {per_pending:.0} bytes each; per byte produced {produced_ratio:.1}; \
         {:.0} then {:.0} messages behind the producer; first and last third: written {:.1} then {:.1} MB/s, \
         a round {:.1} then {:.1} MB; \
         a scrape {scrape_ms:.0} ms",
        rounds.len(),
        written_per_second / 1e6,
        input_per_second / 1e6,
        round_bytes / 1e6,
        behind[0],
        behind[1],
        written_first / 1e6,
        written_last / 1e6,
        bytes_first / 1e6,
        bytes_last / 1e6
    );
    let mut put = |what: &str, v: f64| {
        results.insert(format!("state_{label}_{what}"), v.into());
    };
    put("bytes_per_input_byte", whole);
    put("bytes_per_input_byte_produced", produced_ratio);
    put("mean_message_bytes", mean_message);
    put("messages_behind_at_first_round", behind[0]);
    put("messages_behind_at_last_round", behind[1]);
    put("bytes_per_input_byte_first_third", first);
    put("bytes_per_input_byte_last_third", last);
    put("growth_last_over_first", last / first);
    put("written_bytes_per_second", written_per_second);
    put("written_bytes_per_second_first_third", written_first);
    put("written_bytes_per_second_last_third", written_last);
    put("scrape_milliseconds", scrape_ms);
    put("round_bytes_first_third", bytes_first);
    put("round_bytes_last_third", bytes_last);
    put("input_bytes_per_second", input_per_second);
    put("rounds", rounds.len() as f64);
    put("rounds_unseen", f64::from(missed));
    put("round_bytes", round_bytes);
    put("round_seconds", round_seconds);
    put("round_seconds_max", round_max);
    put("round_share_of_interval", round_seconds / INTERVAL_SECONDS);
    // The next round is due an interval after the last one ended, so a round of d seconds takes
    // d / (5 + d) of the consumer thread's time, not d / 5: what the run saw, rounds over time.
    put("round_time_share_of_run", rounds[1..].iter().map(|r| r.seconds).sum::<f64>() / span);
    put("pending_impressions", pending);
    put("bytes_per_pending_impression", per_pending);
    put("events_consumed", rounds.last().unwrap().consumed - rounds[0].consumed);
}

/// Each round's records by kind, what reached the brokers and the messages consumed since the
/// round before, with how far `serve` was behind the producer and how many of the producer's
/// messages the broker had not acknowledged (`RANKPULSE_BENCH_STATE_ROUNDS=1`): what a run's
/// large rounds hold, and whose a stretch without consumption is.
fn print_rounds(rounds: &[Round], produced: &[f64], in_flight: &[f64], witnessed: &[f64]) {
    eprintln!(
        "  round  s      snapshots  deltas  agg.bases  agg.incr  (KB)  sent KB  messages  behind  unacknowledged  \
         witness read"
    );
    for (i, w) in rounds.windows(2).enumerate() {
        let kb = |k: usize| (w[1].by_kind[k] - w[0].by_kind[k]) / 1e3;
        eprintln!(
            "  {:>5}  {:>5.0}  {:>9.0}  {:>6.0}  {:>9.0}  {:>8.0}        {:>7.0}  {:>8.0}  {:>6.0}  {:>14.0}  {:>12.0}{}",
            i + 1,
            (w[1].at - rounds[0].at).as_secs_f64(),
            kb(0),
            kb(1),
            kb(2),
            kb(3),
            (w[1].sent - w[0].sent) / 1e3,
            w[1].consumed - w[0].consumed,
            produced[i + 1] - w[1].consumed,
            in_flight[i + 1],
            witnessed[i + 1] - witnessed[i],
            if w[1].missed > 0 { format!("  ({} unseen)", w[1].missed) } else { String::new() }
        );
    }
}

/// The growth allowed between the first and the last third before the ratio counts as growing:
/// the input's own variation from one 100 s to the next is a few percent.
const GROWTH_TOLERANCE: f64 = 1.05;

/// The table's rows, with issue 53's targets.
pub fn rows(get: &dyn Fn(&str) -> Option<f64>) -> Vec<(&'static str, String, &'static str, &'static str)> {
    let at = |label: &str, what: &str| get(&format!("state_{label}_{what}"));
    let mut rows = Vec::new();
    // What reached the brokers (the records compressed by `state.compression`): the target.
    for (label, name) in [("30m", "state bytes sent per input byte, 30m window"), ("2m", "  the same, 2m window")] {
        let ratio = at(label, "sent_bytes_per_input_byte");
        rows.push((name, fmt(ratio, 2), "<= 1.5", verdict(ratio.map(|r| r <= 1.5))));
    }
    for (label, name) in [("30m", "  records' payload per input byte, 30m"), ("2m", "  the same, 2m window")] {
        let ratio = at(label, "bytes_per_input_byte");
        rows.push((
            name,
            format!(
                "{} ({} / {} MB/s)",
                fmt(ratio, 1),
                fmt(at(label, "written_bytes_per_second").map(|b| b / 1e6), 2),
                fmt(at(label, "input_bytes_per_second").map(|b| b / 1e6), 3)
            ),
            "",
            "",
        ));
    }
    for (label, name) in
        [("30m", "  first / last third of the run, 30m"), ("2m", "  first / last third of the run, 2m")]
    {
        let growth = at(label, "growth_last_over_first");
        rows.push((
            name,
            format!(
                "{} / {} ({}x)",
                fmt(at(label, "bytes_per_input_byte_first_third"), 1),
                fmt(at(label, "bytes_per_input_byte_last_third"), 1),
                fmt(growth, 2)
            ),
            "not growing",
            verdict(growth.map(|g| g <= GROWTH_TOLERANCE)),
        ));
    }
    rows.push((
        "  messages behind, first / last round: 30m; 2m",
        format!(
            "{} / {}; {} / {}",
            fmt(at("30m", "messages_behind_at_first_round"), 0),
            fmt(at("30m", "messages_behind_at_last_round"), 0),
            fmt(at("2m", "messages_behind_at_first_round"), 0),
            fmt(at("2m", "messages_behind_at_last_round"), 0)
        ),
        "",
        "",
    ));
    rows.push((
        "  a round MB, first / last third: 30m; 2m",
        format!(
            "{} / {}; {} / {}",
            fmt(at("30m", "round_bytes_first_third").map(|b| b / 1e6), 1),
            fmt(at("30m", "round_bytes_last_third").map(|b| b / 1e6), 1),
            fmt(at("2m", "round_bytes_first_third").map(|b| b / 1e6), 1),
            fmt(at("2m", "round_bytes_last_third").map(|b| b / 1e6), 1)
        ),
        "",
        "",
    ));
    for (label, name) in [("30m", "  one round s, share of 5 s: 30m"), ("2m", "  one round s, share of 5 s: 2m")] {
        let share = at(label, "round_share_of_interval");
        rows.push((
            name,
            format!(
                "{} ({}%; {}% of the run)",
                fmt(at(label, "round_seconds"), 3),
                fmt(share.map(|s| s * 100.0), 1),
                fmt(at(label, "round_time_share_of_run").map(|s| s * 100.0), 0)
            ),
            "< 2%",
            verdict(share.map(|s| s < 0.02)),
        ));
    }
    // A round is mostly deltas since issue 53: its bytes per pending impression say what a
    // round costs, not what a snapshot does; the restore stage's snapshot says that.
    rows.push((
        "  a round's bytes per pending impression",
        format!(
            "{} (at {}; 2m: {})",
            fmt(at("30m", "bytes_per_pending_impression"), 0),
            fmt(at("30m", "pending_impressions"), 0),
            fmt(at("2m", "bytes_per_pending_impression"), 0)
        ),
        "",
        "",
    ));
    // Issue 53's target as the issue states it: "no more than today's 122". The snapshot of
    // 1M pending impressions was 122.5 bytes each when it was filed; that figure reads as missed
    // here until the record is smaller, rather than the target being read as 122.5.
    let per_pending = get("handover_1000k_snapshot_bytes_per_pending");
    rows.push((
        "  snapshot bytes per pending impression (1M)",
        fmt(per_pending, 1),
        "<= 122",
        verdict(per_pending.map(|b| b <= 122.0)),
    ));
    let restore = get("handover_1000k_restore_seconds");
    rows.push(("  restore of 1M pending s (took_ms)", fmt(restore, 2), "<= 3 s", verdict(restore.map(|s| s <= 3.0))));
    rows
}
