//! The benchmark suite: `bash benches/run.sh` (or `cargo bench --bench pipeline`). Prints a
//! table and writes the figures as JSON (`target/bench-results.json`). Nothing here asserts a
//! time: figures are medians on whatever machine runs it, compared as ratios measured in the
//! same run.
//!
//! 1. End to end through Kafka: demo traffic in librdkafka's in-process cluster, consumed by the
//!    real source (decode, join, finalize, accumulate), against a plain rdkafka consumer reading
//!    the same messages without decoding; on topics of 4 and of 16 partitions (there also with
//!    the partitions finalized on the engine thread alone, and on two threads).
//! 2. Replay throughput over JSON-lines files (multi-threaded, with one finalization lane, and
//!    on one thread; its CPU time per event), against the same files through a trec_eval
//!    pipeline in Python (`trec_pipeline.py`), and against trec_eval (pytrec-eval-terrier) and
//!    ranx evaluating the same impressions (their file loading not timed); and against the parse limit
//!    ([`parse_limit`]): a SIMD JSON parser reading the same files.
//! 3. Bytes per pending impression (10 results) at one million pending, from a counting allocator.
//! 4. Time to render `/metrics` with about 1,000 series; p50 and p99 per-message processing time.
//! 5. Issue 15's figures ([`handover`], a broker in its own process): a partition handed over
//!    with 100k and 1M pending impressions, and the changelog's bytes per second under the
//!    demo's traffic. The end-to-end stage measures the changelog's cost on throughput.
//! 6. Issue 21's figures ([`judgments`]): a list of one million judgments loaded, held and
//!    looked up, and the cost of judging impressions; [`eval`]: `rankpulse eval` on a run of
//!    100,000 queries x 100 against trec_eval (pytrec-eval-terrier) and ranx.
//! 7. Issue 32's figures ([`mapping`]): a mapped JSON shape and Avro against native JSON, events
//!    per CPU second through the engine and through the decoders alone.
//! 8. Issue 39's figures ([`repartition`]): the repartition path's events per CPU-second and the
//!    latency it adds, against co-partitioned input, in one run.
//! 9. Issue 34's figures ([`clicks`]): the click log's cost per impression and memory per
//!    tracked pair, a fit of the click models on a full log, the weighted metrics' cost.
//! 10. Issue 35's figures ([`cuped`]): CUPED's cost per impression, memory per tracked and per
//!     frozen unit, and the time to build a cumulative report with the whole read-out.
//! 11. Issue 53's figures ([`state`], tansu, minutes of real time): the changelog's bytes per
//!     input byte under steady traffic with the shipped 30-minute window and with 2 minutes,
//!     a snapshot round's share of the consumer thread, bytes per pending impression, and the
//!     restore of 1M pending impressions (the `handover` stage's measurement).

use std::time::{Duration, Instant};

use rankpulse::config::Config;
use rankpulse::engine::Engine;
use rankpulse::engine::SharedEngine;
use rankpulse::event::EventKind;
use rankpulse::output;
use rankpulse::shutdown::Shutdown;
use rankpulse::source::Durability;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::Message;

mod breakdown;
mod clicks;
#[path = "../tests/common/mod.rs"]
mod common;
mod cuped;
mod eval;
mod handover;
mod judgments;
mod mapping;
mod parse_limit;
mod repartition;
mod state;
use common::alloc::{live, Counting};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const PARTITIONS: i32 = 4;
const IMP_TOPIC: &str = "bench-impressions";
const ENG_TOPIC: &str = "bench-engagements";
/// The same messages again on topics of 16 partitions: a consumer spread over many partitions.
const WIDE_PARTITIONS: i32 = 16;
const WIDE_TOPICS: [&str; 2] = ["bench16-impressions", "bench16-engagements"];

/// Demo traffic as (topic, key, payload) in delivery order.
fn traffic(impressions: u64, start_ms: i64) -> Vec<(&'static str, String, Vec<u8>)> {
    let (mut imp, mut eng) = (Vec::new(), Vec::new());
    rankpulse::demo::write_traffic(
        &mut imp,
        &mut eng,
        impressions,
        2000,
        11,
        start_ms,
        rankpulse::demo::FaultRate::DEMO,
    )
    .unwrap();
    let key = |line: &[u8]| {
        serde_json::from_slice::<serde_json::Value>(line)
            .ok()
            .and_then(|v| v["query_id"].as_str().map(str::to_string))
            .unwrap_or_default()
    };
    let mut out = Vec::new();
    for (topic, lines) in [(IMP_TOPIC, &imp), (ENG_TOPIC, &eng)] {
        for line in lines.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            out.push((topic, key(line), line.to_vec()));
        }
    }
    out
}

/// The figures of a run, by name: printed as a table and saved as JSON.
type Results = serde_json::Map<String, serde_json::Value>;

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// 1. End to end through the in-process cluster, and the raw consume rate of the same messages.
fn end_to_end(results: &mut Results) {
    let start_ms = chrono::Utc::now().timestamp_millis() - 600_000;
    // Within the mock cluster's per-partition retention (about 5 MB or 100k messages): about
    // 3.5 MB of impressions per partition.
    let messages = traffic(40_000, start_ms);
    let total = messages.len() as u64;
    let cluster = MockCluster::new(1).unwrap();
    for topic in [IMP_TOPIC, ENG_TOPIC] {
        cluster.create_topic(topic, PARTITIONS, 1).unwrap();
    }
    for topic in WIDE_TOPICS {
        cluster.create_topic(topic, WIDE_PARTITIONS, 1).unwrap();
    }
    let brokers = cluster.bootstrap_servers();
    let producer: BaseProducer =
        ClientConfig::new().set("bootstrap.servers", &brokers).set("linger.ms", "20").create().unwrap();
    let wide = |topic: &str| if topic == IMP_TOPIC { WIDE_TOPICS[0] } else { WIDE_TOPICS[1] };
    for (topic, key, payload) in messages.iter().flat_map(|(t, k, p)| [(*t, k, p), (wide(t), k, p)]) {
        let mut record = BaseRecord::to(topic).key(key.as_str()).payload(payload.as_slice());
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
    producer.flush(Duration::from_secs(60)).unwrap();
    drop(producer);

    // Raw: a plain consumer, no decoding.
    let raw_once = |group: &str, topics: [&str; 2]| {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &brokers)
            .set("group.id", group)
            .set("auto.offset.reset", "earliest")
            .set("enable.auto.commit", "false")
            .create()
            .unwrap();
        consumer.subscribe(&topics).unwrap();
        let (mut seen, mut first, mut bytes) = (0u64, None, 0usize);
        let deadline = Instant::now() + Duration::from_secs(120);
        while seen < total {
            assert!(Instant::now() < deadline, "raw consumer saw {seen} of {total} messages");
            if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
                first.get_or_insert_with(|| (Instant::now(), threads_cpu_seconds(|_| true)));
                bytes += m.payload().map_or(0, <[u8]>::len);
                seen += 1;
            }
        }
        let (started, cpu_at_first) = first.unwrap();
        let wall = started.elapsed().as_secs_f64();
        let cores_busy = (threads_cpu_seconds(|_| true) - cpu_at_first) / wall;
        std::hint::black_box(bytes);
        drop(consumer);
        (total as f64 / wall, cores_busy)
    };

    // The pipeline: the real source feeding the engine, on its own runtime thread; with
    // `checkpoint_interval`, snapshots to the changelog as `serve` takes them (the mock cluster
    // has no CreateTopics: the group's state topics are made here).
    let pipeline_once = |group: &str, checkpoint_interval: Option<&str>, topics: [&str; 2], lanes: Option<usize>| {
        let mut cfg = Config::default();
        cfg.kafka.brokers = brokers.clone();
        cfg.kafka.group_id = group.into();
        cfg.kafka.impressions_topic = topics[0].into();
        cfg.kafka.engagements_topic = topics[1].into();
        cfg.join.attribution_window = "5s".parse().unwrap();
        cfg.join.max_out_of_orderness = "2s".parse().unwrap();
        let durability = checkpoint_interval.map(|interval| {
            common::create_state_topics(&cluster, group, PARTITIONS);
            cfg.state.changelog_replication_factor = 1;
            cfg.state.checkpoint_interval = interval.parse().unwrap();
            Durability { state: cfg.state.clone() }
        });
        let mut engine = Engine::new(&cfg);
        if let Some(lanes) = lanes {
            engine.set_finalize_lanes(lanes);
        }
        let engine = SharedEngine::new(engine);
        let shutdown = Shutdown::new();
        // Multi-threaded like `serve`'s: the aggregates reader is a task of its own.
        let runner = common::spawn_source(cfg.kafka.clone(), engine.clone(), shutdown.clone(), durability);
        let consumed = |e: &Engine| e.counters().consumed.iter().sum::<u64>();
        let mut first = None;
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let n = consumed(&engine.lock());
            assert!(Instant::now() < deadline, "pipeline consumed {n} of {total} messages");
            if n > 0 {
                first.get_or_insert_with(|| {
                    let threads = [consumer_thread, engine_thread].map(threads_cpu_seconds);
                    (Instant::now(), n, threads, threads_cpu_seconds(|_| true))
                });
            }
            if n >= total {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let (started, consumed_at_first, threads_at_first, all_cpu_at_first) = first.unwrap();
        let wall = started.elapsed().as_secs_f64();
        let [consumer_now, engine_now] = [consumer_thread, engine_thread].map(threads_cpu_seconds);
        let [consumer_cpu, engine_cpu] = [consumer_now - threads_at_first[0], engine_now - threads_at_first[1]];
        let per_cpu_second = (total - consumed_at_first) as f64 / (consumer_cpu + engine_cpu).max(1e-9);
        // The share of the wall-clock time each of rankpulse's two threads was on a core: the
        // busier one limits the pipeline.
        let threads_busy = [consumer_cpu / wall, engine_cpu / wall];
        let cores_busy = (threads_cpu_seconds(|_| true) - all_cpu_at_first) / wall;
        shutdown.trigger();
        runner.join().unwrap();
        let engine = engine.into_inner().unwrap();
        (total as f64 / wall, engine, per_cpu_second, cores_busy, threads_busy)
    };

    // Five rounds, alternating, each on its own consumer group: a round lasts a fraction of a
    // second, so one round alone is at the mercy of a neighbour's burst (on the 2-core machine
    // single rounds of the same build ranged from 0.33 to 0.51 of raw consume). Besides the pipeline
    // without snapshots (the demo's), the same with the changelog as `serve` runs it: at the
    // default interval (5 s, longer than a round, so no interval snapshot falls inside the
    // timing: what remains is the aggregates reader and the experiment-wide view), and every
    // 100 ms, so that snapshot rounds of the live state do fall inside it.
    // The 16-partition topics likewise, without snapshots.
    let (mut raw, mut piped, mut last) = (Vec::new(), Vec::new(), None);
    let (mut durable, mut frequent, mut frequent_rounds) = (Vec::new(), Vec::new(), Vec::new());
    let (mut raw_wide, mut piped_wide, mut per_cpu) = (Vec::new(), Vec::new(), Vec::new());
    let (mut raw_cores, mut piped_cores) = (Vec::new(), Vec::new());
    let (mut consumer_busy, mut engine_busy) = (Vec::new(), Vec::new());
    // At 16 partitions, the engine thread finalizing every partition itself, and with a second
    // finalization thread (the default has one per core beyond two: none more on 2 cores).
    let (mut one_lane_wide, mut two_lanes_wide) = (Vec::new(), Vec::new());
    let topics = [IMP_TOPIC, ENG_TOPIC];
    for round in 0..5 {
        let (rate, cores) = raw_once(&format!("raw-{round}"), topics);
        raw.push(rate);
        raw_cores.push(cores);
        let (rate, engine, events_per_cpu_second, cores, [consumer, engine_thread]) =
            pipeline_once(&format!("pipeline-{round}"), None, topics, None);
        piped.push(rate);
        consumer_busy.push(consumer);
        engine_busy.push(engine_thread);
        per_cpu.push(events_per_cpu_second);
        piped_cores.push(cores);
        last = Some(engine);
        raw_wide.push(raw_once(&format!("raw16-{round}"), WIDE_TOPICS).0);
        piped_wide.push(pipeline_once(&format!("pipeline16-{round}"), None, WIDE_TOPICS, None).0);
        one_lane_wide.push(pipeline_once(&format!("pipeline16-one-lane-{round}"), None, WIDE_TOPICS, Some(1)).0);
        two_lanes_wide.push(pipeline_once(&format!("pipeline16-two-lanes-{round}"), None, WIDE_TOPICS, Some(2)).0);
        durable.push(pipeline_once(&format!("changelog-{round}"), Some("5s"), topics, None).0);
        let (rate, engine, ..) = pipeline_once(&format!("changelog-100ms-{round}"), Some("100ms"), topics, None);
        frequent.push(rate);
        // Less the final snapshot at shutdown, after the timing.
        frequent_rounds.push(engine.telemetry().checkpoint_stats().written.saturating_sub(1) as f64);
    }
    let engine = last.unwrap();
    let (raw_rate, pipeline_rate) = (median(raw), median(piped));
    let (durable_rate, frequent_rate) = (median(durable), median(frequent));
    let (raw_wide_rate, wide_rate) = (median(raw_wide), median(piped_wide));
    results.insert("end_to_end_events_per_rankpulse_cpu_second".into(), median(per_cpu).into());
    results.insert("raw_consume_cores_busy".into(), median(raw_cores).into());
    results.insert("end_to_end_cores_busy".into(), median(piped_cores).into());
    results.insert("end_to_end_consumer_thread_busy".into(), median(consumer_busy).into());
    results.insert("end_to_end_engine_thread_busy".into(), median(engine_busy).into());
    results.insert("end_to_end_16_partitions_events_per_second".into(), wide_rate.into());
    results.insert("raw_consume_16_partitions_events_per_second".into(), raw_wide_rate.into());
    results.insert("end_to_end_16_partitions_share_of_raw".into(), (wide_rate / raw_wide_rate).into());
    let lanes_speedup = median(two_lanes_wide) / median(one_lane_wide);
    results.insert("end_to_end_16_partitions_two_finalize_lanes_speedup".into(), lanes_speedup.into());
    results.insert("end_to_end_changelog_events_per_second".into(), durable_rate.into());
    results.insert("end_to_end_changelog_share_of_none".into(), (durable_rate / pipeline_rate).into());
    results.insert("end_to_end_changelog_100ms_events_per_second".into(), frequent_rate.into());
    results.insert("end_to_end_changelog_100ms_share_of_none".into(), (frequent_rate / pipeline_rate).into());
    results.insert("end_to_end_changelog_100ms_rounds".into(), median(frequent_rounds).into());
    let finalized: u64 = engine.cumulative().iter().map(|(_, s)| s.impressions).sum();
    let h = &engine.telemetry().processing_time().histogram;
    results.insert("end_to_end_events".into(), total.into());
    results.insert("end_to_end_events_per_second".into(), pipeline_rate.into());
    results.insert("raw_consume_events_per_second".into(), raw_rate.into());
    results.insert("end_to_end_share_of_raw".into(), (pipeline_rate / raw_rate).into());
    results.insert("end_to_end_finalized_impressions".into(), finalized.into());
    results.insert("processing_p50_microseconds".into(), (h.value_at_quantile(0.5) as f64 / 1000.0).into());
    results.insert("processing_p99_microseconds".into(), (h.value_at_quantile(0.99) as f64 / 1000.0).into());
    drop(cluster);
}

/// 2. Replay over files, and trec_eval and ranx on the same impressions.
fn replay(results: &mut Results) {
    let dir = tempfile::tempdir().unwrap();
    let (imp, eng) = (dir.path().join("imp.jsonl"), dir.path().join("eng.jsonl"));
    let (mut fi, mut fe) = (std::fs::File::create(&imp).unwrap(), std::fs::File::create(&eng).unwrap());
    rankpulse::demo::write_traffic(
        &mut fi,
        &mut fe,
        300_000,
        2000,
        5,
        1_795_000_000_000,
        rankpulse::demo::FaultRate::DEMO,
    )
    .unwrap();
    drop((fi, fe));
    let lines = std::fs::read(&imp).unwrap().iter().filter(|&&b| b == b'\n').count()
        + std::fs::read(&eng).unwrap().iter().filter(|&&b| b == b'\n').count();
    let cfg = Config::default();
    let timed = |threading: rankpulse::replay::Threading| {
        let (started, cpu) = (Instant::now(), process_cpu_seconds());
        let e = rankpulse::replay::run_with(&imp, &eng, Engine::new(&cfg), None, threading).unwrap();
        std::hint::black_box(e.counters().consumed);
        (started.elapsed().as_secs_f64(), process_cpu_seconds() - cpu)
    };
    // Taken in turn, so that a neighbour's burst falls on every kind alike.
    let (mut threaded, mut one_lane) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        threaded.push(timed(rankpulse::replay::Threading::ReaderThreads));
        one_lane.push(timed(rankpulse::replay::Threading::FinalizeLanes(1)).0);
    }
    let seconds = median(threaded.iter().map(|t| t.0).collect());
    let cpu_seconds = median(threaded.iter().map(|t| t.1).collect());
    let one_lane = median(one_lane);
    let single = median((0..3).map(|_| timed(rankpulse::replay::Threading::SingleThread).0).collect());
    results.insert("replay_single_thread_seconds".into(), single.into());
    results.insert("replay_threads_speedup".into(), (single / seconds).into());
    results.insert("replay_one_finalization_lane_seconds".into(), one_lane.into());
    results.insert("replay_finalization_lanes_speedup".into(), (one_lane / seconds).into());
    results.insert("replay_cpu_seconds".into(), cpu_seconds.into());
    results.insert("replay_cores_busy".into(), (cpu_seconds / seconds).into());
    results.insert("replay_events_per_cpu_second".into(), (lines as f64 / cpu_seconds).into());
    trec_pipeline(results, &imp, &eng, seconds);
    parse_limit::parse_limit(results, &imp, &eng, seconds);
    let trec_dir = dir.path().join("trec");
    rankpulse::replay::run_with_trec(&imp, &eng, Engine::new(&cfg), Some(&trec_dir)).unwrap();
    results.insert("replay_events".into(), lines.into());
    results.insert("replay_seconds".into(), seconds.into());
    results.insert("replay_events_per_second".into(), (lines as f64 / seconds).into());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/reference_tools.py");
    match std::process::Command::new("python3").arg(script).arg(&trec_dir).output() {
        Ok(out) if out.status.success() => {
            let tools: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            for tool in ["trec_eval", "ranx"] {
                match tools[format!("{tool}_seconds")].as_f64() {
                    Some(t) => {
                        results.insert(format!("{tool}_seconds"), t.into());
                        results.insert(format!("replay_speedup_vs_{tool}"), (t / seconds).into());
                    }
                    None => eprintln!("{tool}: {}", tools[format!("{tool}_error")]),
                }
                if let Some(t) = tools[format!("{tool}_from_files_seconds")].as_f64() {
                    results.insert(format!("{tool}_from_files_seconds"), t.into());
                    results.insert(format!("replay_speedup_vs_{tool}_from_files"), (t / seconds).into());
                }
            }
        }
        Ok(out) => eprintln!("reference tools failed: {}", String::from_utf8_lossy(&out.stderr)),
        Err(e) => eprintln!("python3 not available: {e}"),
    }
}

/// The threads doing rankpulse's own work in `serve` (not librdkafka's threads, nor the
/// in-process cluster's): the consumer thread, which polls (and decodes while the engine thread
/// is the busier)...
fn consumer_thread(name: &str) -> bool {
    name.starts_with("rankpulse-sourc")
}

/// ... and the engine thread (which decodes the messages carried to it).
fn engine_thread(name: &str) -> bool {
    name.starts_with("rankpulse-engin")
}

/// CPU time so far of this process's live threads whose name `counts`, from
/// `/proc/self/task/*/schedstat` (nanoseconds on the CPU); 0 where there is no procfs.
fn threads_cpu_seconds(counts: impl Fn(&str) -> bool) -> f64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return 0.0 };
    let mut nanos = 0u64;
    for task in tasks.flatten() {
        let name = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if counts(&name) {
            let schedstat = std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
            nanos += schedstat.split_whitespace().next().and_then(|n| n.parse::<u64>().ok()).unwrap_or(0);
        }
    }
    nanos as f64 / 1e9
}

/// CPU time of this process so far (every thread), from `/proc/self/stat` (utime + stime, in
/// clock ticks of 1/100 s, Linux's USER_HZ); 0 where there is no procfs.
fn process_cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may hold spaces), from field 3 on: utime and stime
    // are fields 14 and 15.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// The batch pipeline a team would otherwise write (`benches/trec_pipeline.py`: read the JSON
/// lines, attribute, evaluate with trec_eval through pytrec-eval-terrier) on the same files as
/// replay, median of 3 of its own timing (interpreter start and imports not counted).
fn trec_pipeline(results: &mut Results, imp: &std::path::Path, eng: &std::path::Path, replay_seconds: f64) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/trec_pipeline.py");
    let mut totals = Vec::new();
    for _ in 0..3 {
        match std::process::Command::new("python3").arg(script).arg(imp).arg(eng).output() {
            Ok(out) if out.status.success() => {
                let figures: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
                totals.push(figures["total_seconds"].as_f64().unwrap());
                let module = figures["json_module"].as_str().unwrap_or("?").to_string();
                results.insert("trec_eval_pipeline_json_module".into(), module.into());
                for part in ["read", "attribute", "evaluate"] {
                    results.insert(
                        format!("trec_eval_pipeline_{part}_seconds"),
                        figures[format!("{part}_seconds")].clone(),
                    );
                }
            }
            Ok(out) => return eprintln!("trec_eval pipeline failed: {}", String::from_utf8_lossy(&out.stderr)),
            Err(e) => return eprintln!("python3 not available: {e}"),
        }
    }
    let total = median(totals);
    results.insert("trec_eval_pipeline_seconds".into(), total.into());
    results.insert("replay_speedup_vs_trec_eval_pipeline".into(), (total / replay_seconds).into());
}

/// 3. Bytes per pending impression with 10 results, at one million pending.
fn memory(results: &mut Results) {
    const PENDING: u64 = 1_000_000;
    let cfg =
        Config::from_toml_with_env("[join]\nmax_pending_impressions = 2000000\n", "bench", std::iter::empty()).unwrap();
    let mut engine = Engine::new(&cfg).without_past_limit();
    let now = Instant::now();
    let mut buf = String::new();
    let before = live();
    for i in 0..PENDING {
        use std::fmt::Write;
        buf.clear();
        write!(buf, r#"{{"query_id":"m-{i}","timestamp":{},"results":["#, 1_000_000 + i).unwrap();
        for r in 0..10 {
            write!(buf, r#"{}"doc-{}""#, if r > 0 { "," } else { "" }, (i * 31 + r * 7) % 100_003).unwrap();
        }
        buf.push_str(r#"],"experiment":"e","variant":"v"}"#);
        engine.process(EventKind::Impression, (i % 4) as i32, buf.as_bytes(), now).unwrap();
    }
    let per = (live() - before) as f64 / PENDING as f64;
    results.insert("bytes_per_pending_impression".into(), per.into());
}

/// 3b. `serve`'s engine finalizing 16 partitions at once (`Engine::finish`, as `advance` does when
/// the watermarks pass many deadlines) on one thread and on two: what a second finalization
/// thread gives where a core is free for it, which the end-to-end stage's full cores do not show.
fn finalize_lanes(results: &mut Results) {
    const PARTITIONS: i64 = 16;
    const PER_PARTITION: i64 = 20_000;
    let cfg = Config::default();
    let filled = || {
        let mut engine = Engine::new(&cfg).without_past_limit();
        let now = Instant::now();
        let mut buf = String::new();
        for i in 0..PARTITIONS * PER_PARTITION {
            use std::fmt::Write;
            let (partition, t) = ((i % PARTITIONS) as i32, 1_000_000 + i);
            buf.clear();
            write!(buf, r#"{{"query_id":"f-{i}","timestamp":{t},"results":["#).unwrap();
            for r in 0..10 {
                write!(buf, r#"{}"doc-{}""#, if r > 0 { "," } else { "" }, (i * 31 + r * 7) % 100_003).unwrap();
            }
            buf.push_str(r#"],"experiment":"e","variant":"v"}"#);
            engine.process(EventKind::Impression, partition, buf.as_bytes(), now).unwrap();
            // Two of three engaged, at ranks that vary: the metrics are evaluated, not copied.
            if i % 3 != 0 {
                let doc = (i * 31 + (i % 10) * 7) % 100_003;
                let click = format!(r#"{{"query_id":"f-{i}","timestamp":{},"doc_id":"doc-{doc}"}}"#, t + 5);
                engine.process(EventKind::Engagement, partition, click.as_bytes(), now).unwrap();
            }
        }
        engine
    };
    let timed = |lanes: usize| {
        let mut engine = filled();
        engine.set_finalize_lanes(lanes);
        let started = Instant::now();
        engine.finish();
        let seconds = started.elapsed().as_secs_f64();
        std::hint::black_box(engine.counters());
        seconds
    };
    let (mut one, mut two) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        one.push(timed(1));
        two.push(timed(2));
    }
    let (one, two) = (median(one), median(two));
    results.insert("finalize_16_partitions_one_lane_seconds".into(), one.into());
    results.insert("finalize_16_partitions_two_lanes_seconds".into(), two.into());
    results.insert("finalize_16_partitions_two_lanes_speedup".into(), (one / two).into());
}

/// 4. `/metrics` render time with about 1,000 series.
fn render(results: &mut Results) {
    let cfg = Config::from_toml_with_env("[labels]\nmax_experiments = 1000\n", "bench", std::iter::empty()).unwrap();
    let series_of = |groups: usize| {
        let mut engine = Engine::new(&cfg).without_past_limit();
        let now = Instant::now();
        for g in 0..groups {
            let payload = format!(
                r#"{{"query_id":"r{g}","timestamp":1000,"results":["a","b"],"experiment":"e{g}","variant":"v"}}"#
            );
            engine.process(EventKind::Impression, 0, payload.as_bytes(), now).unwrap();
        }
        engine.finish();
        let registry = output::registry(SharedEngine::new(engine));
        let text = output::render(&registry);
        (registry, text.lines().filter(|l| !l.starts_with('#')).count())
    };
    let (_, base) = series_of(0);
    let (_, one) = series_of(1);
    let groups = (1000 - base) / (one - base).max(1);
    let (registry, series) = series_of(groups.max(1));
    let millis = median(
        (0..21)
            .map(|_| {
                let started = Instant::now();
                std::hint::black_box(output::render(&registry));
                started.elapsed().as_secs_f64() * 1000.0
            })
            .collect(),
    );
    results.insert("metrics_series".into(), series.into());
    results.insert("metrics_render_milliseconds".into(), millis.into());
}

/// A target's verdict: `n/a` when the stage did not run.
fn verdict(ok: Option<bool>) -> &'static str {
    match ok {
        Some(true) => "met",
        Some(false) => "MISSED",
        None => "n/a",
    }
}

/// A figure of the table: `digits` decimals, or `n/a` when the stage did not run.
fn fmt(v: Option<f64>, digits: usize) -> String {
    v.map_or("n/a".to_string(), |v| format!("{v:.digits$}"))
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --all-targets` runs this binary without it, and a
    // benchmark in a debug build under test measures nothing useful.
    if !std::env::args().any(|a| a == "--bench") {
        eprintln!("benchmarks run with `bash benches/run.sh` (cargo bench --bench pipeline); skipped under cargo test");
        return;
    }
    // RANKPULSE_BENCH_ONLY=replay (or "end to end", "memory", "finalize lanes", "render", "handover", "changelog
    // rate", "judgments", "eval", "mapping", "repartition", "clicks", "cuped", "breakdown", "state") runs one stage, to profile
    // it. "state" runs for about 15 minutes; RANKPULSE_BENCH_STATE_SECONDS shortens its measurement.
    let only = std::env::var("RANKPULSE_BENCH_ONLY").ok();
    let mut results = serde_json::Map::new();
    results.insert("cores".into(), std::thread::available_parallelism().map_or(0, |n| n.get()).into());
    for (name, stage) in [
        ("end to end", end_to_end as fn(&mut Results)),
        ("replay", replay),
        ("memory", memory),
        ("finalize lanes", finalize_lanes),
        ("render", render),
        ("handover", handover::handover),
        ("changelog rate", handover::changelog_rate),
        ("judgments", judgments::judgments),
        ("eval", eval::eval),
        ("mapping", mapping::mapping),
        ("repartition", repartition::repartition),
        ("clicks", clicks::clicks),
        ("cuped", cuped::cuped),
        ("breakdown", breakdown::breakdown),
        ("state", state::state),
    ] {
        if only.as_deref().is_some_and(|o| o != name) {
            continue;
        }
        eprintln!("running: {name}");
        stage(&mut results);
    }
    let get = |k: &str| results.get(k).and_then(|v| v.as_f64());
    let share = get("end_to_end_share_of_raw");
    let wide_share = get("end_to_end_16_partitions_share_of_raw");
    let per_core = get("replay_events_per_cpu_second");
    let serve_per_core = get("end_to_end_events_per_rankpulse_cpu_second");
    let pipeline = get("replay_speedup_vs_trec_eval_pipeline");
    let rows = [
        ("end to end, events/s", fmt(get("end_to_end_events_per_second"), 0), "", ""),
        ("raw rdkafka consume, events/s", fmt(get("raw_consume_events_per_second"), 0), "", ""),
        (
            "  cores busy: raw consume; end to end",
            format!("{}; {}", fmt(get("raw_consume_cores_busy"), 2), fmt(get("end_to_end_cores_busy"), 2)),
            "",
            "",
        ),
        (
            "  end to end, busy: consumer thread; engine thread",
            format!(
                "{}; {}",
                fmt(get("end_to_end_consumer_thread_busy"), 2),
                fmt(get("end_to_end_engine_thread_busy"), 2)
            ),
            "",
            "",
        ),
        ("end to end / raw consume", fmt(share, 2), ">= 0.70", verdict(share.map(|v| v >= 0.7))),
        (
            "  16 partitions: end to end / raw",
            format!(
                "{} ({} / {})",
                fmt(wide_share, 2),
                fmt(get("end_to_end_16_partitions_events_per_second"), 0),
                fmt(get("raw_consume_16_partitions_events_per_second"), 0)
            ),
            ">= 0.70",
            verdict(wide_share.map(|v| v >= 0.7)),
        ),
        (
            "  16 partitions: two finalization threads' speed-up over one",
            fmt(get("end_to_end_16_partitions_two_finalize_lanes_speedup"), 2),
            "",
            "",
        ),
        (
            "  finalizing 16 partitions, engine alone: one thread s; two",
            format!(
                "{}; {} ({}x)",
                fmt(get("finalize_16_partitions_one_lane_seconds"), 3),
                fmt(get("finalize_16_partitions_two_lanes_seconds"), 3),
                fmt(get("finalize_16_partitions_two_lanes_speedup"), 2)
            ),
            "",
            "",
        ),
        (
            "rankpulse work, events/s per core: serve",
            fmt(serve_per_core, 0),
            ">= 1,000,000",
            verdict(serve_per_core.map(|v| v >= 1e6)),
        ),
        ("  the same, replay", fmt(per_core, 0), ">= 1,000,000", verdict(per_core.map(|v| v >= 1e6))),
        ("replay, events/s", fmt(get("replay_events_per_second"), 0), "", ""),
        (
            "  cores busy; speed-up of the reader threads",
            format!("{}; {}", fmt(get("replay_cores_busy"), 2), fmt(get("replay_threads_speedup"), 2)),
            "",
            "",
        ),
        ("  speed-up of the finalization lanes over one", fmt(get("replay_finalization_lanes_speedup"), 2), "", ""),
        ("replay vs a trec_eval pipeline", fmt(pipeline, 1), ">= 20x", verdict(pipeline.map(|v| v >= 20.0))),
        (
            "replay vs trec_eval, evaluation only",
            fmt(get("replay_speedup_vs_trec_eval"), 1),
            ">= 10x",
            verdict(get("replay_speedup_vs_trec_eval").map(|v| v >= 10.0)),
        ),
        (
            "replay speed-up vs ranx",
            fmt(get("replay_speedup_vs_ranx"), 1),
            ">= 10x",
            verdict(get("replay_speedup_vs_ranx").map(|v| v >= 10.0)),
        ),
        (
            "  the same, tools timed from their files",
            format!(
                "{} / {}",
                fmt(get("replay_speedup_vs_trec_eval_from_files"), 1),
                fmt(get("replay_speedup_vs_ranx_from_files"), 1)
            ),
            "",
            "",
        ),
        (
            "bytes per pending impression (10 results)",
            fmt(get("bytes_per_pending_impression"), 0),
            "<= 150",
            verdict(get("bytes_per_pending_impression").map(|v| v <= 150.0)),
        ),
        (
            "/metrics render ms (series)",
            format!("{} ({})", fmt(get("metrics_render_milliseconds"), 2), fmt(get("metrics_series"), 0)),
            "< 50",
            verdict(get("metrics_render_milliseconds").map(|v| v < 50.0)),
        ),
        (
            "processing p50 / p99 us",
            format!("{} / {}", fmt(get("processing_p50_microseconds"), 1), fmt(get("processing_p99_microseconds"), 1)),
            "p99 < 100",
            verdict(get("processing_p99_microseconds").map(|v| v < 100.0)),
        ),
        (
            "end to end with the changelog, 5s / 100ms",
            format!(
                "{} / {}",
                fmt(get("end_to_end_changelog_share_of_none"), 2),
                fmt(get("end_to_end_changelog_100ms_share_of_none"), 2)
            ),
            "",
            "",
        ),
    ];
    let mut rows = Vec::from(rows);
    for n in ["100k", "1000k"] {
        let h = |what: &str| get(&format!("handover_{n}_{what}"));
        rows.push((
            if n == "100k" { "handover 100k: restore + resume s" } else { "handover 1M: restore + resume s" },
            format!(
                "{} + {} = {}",
                fmt(h("restore_seconds"), 3),
                fmt(h("resume_seconds"), 3),
                fmt(h("assignment_to_consumption_seconds"), 3)
            ),
            "",
            "",
        ));
        rows.push((
            "  snapshot MB; round s; old owner stop s",
            format!(
                "{}; {}; {}",
                fmt(h("snapshot_bytes").map(|b| b / 1e6), 1),
                fmt(h("round_seconds"), 2),
                fmt(h("stop_seconds"), 2)
            ),
            "",
            "",
        ));
    }
    rows.push(("changelog bytes/s, demo traffic, 5s interval", fmt(get("changelog_bytes_per_second"), 0), "", ""));
    rows.extend(parse_limit::rows(&get));
    rows.extend(judgments::rows(&get));
    rows.extend(eval::rows(&get));
    rows.extend(mapping::rows(&get));
    rows.extend(repartition::rows(&get));
    rows.extend(clicks::rows(&get));
    rows.extend(cuped::rows(&get));
    rows.extend(breakdown::rows(&get));
    rows.extend(state::rows(&get));
    println!("\n{:<44} {:>30} {:>12} {:>8}", "figure", "value", "target", "");
    for (name, value, target, ok) in rows {
        println!("{name:<44} {value:>30} {target:>12} {ok:>8}");
    }
    // Beside the sources even when CARGO_TARGET_DIR points elsewhere, so the directory may not exist.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bench-results.json");
    std::fs::write(&path, serde_json::to_string_pretty(&results).unwrap()).unwrap();
    println!("\nfigures saved to {}", path.display());
}
