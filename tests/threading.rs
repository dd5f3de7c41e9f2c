//! The multi-threaded paths against the single-threaded one, on the trec_eval conformance
//! suites and on messy traffic:
//!
//! * replay (each file read and decoded on a thread of its own, finalization on another, while
//!   the merge thread joins): the same report to the byte, the same counters, and every
//!   impression finalized in the same order with the same values, including malformed,
//!   oversized and blank lines, redeliveries, late and out-of-order events, a clustered A/B
//!   unit and a label limit that folds groups;
//! * `serve`'s source (the consumer thread decodes, the engine thread processes) through
//!   librdkafka's mock cluster: the same impressions finalized with the same values and the same
//!   per-group figures as the single-threaded replay of the same events.

use crate::common;

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rankpulse::config::Config;
use rankpulse::engine::{Engine, SharedEngine};
use rankpulse::replay::{self, Report, Threading};
use rankpulse::shutdown::Shutdown;
use rdkafka::mocking::MockCluster;

/// Every finalized impression in order: query key, group, timestamp, gains, value bits.
type Finalized = Vec<(u128, u32, i64, Vec<u8>, Vec<u64>)>;

/// An engine for `cfg` that records every impression it finalizes.
fn observed(cfg: &Config) -> (Engine, Arc<Mutex<Finalized>>) {
    let seen: Arc<Mutex<Finalized>> = Arc::default();
    let sink = seen.clone();
    let mut engine = Engine::new(cfg);
    if let Some(judgments) = rankpulse::judgments::JudgmentSource::from_config(&cfg.judgments).unwrap() {
        engine.set_judgments(judgments);
    }
    engine.set_observer(Box::new(move |f| {
        let bits = f.values.iter().map(|v| v.to_bits()).collect();
        sink.lock().unwrap().push((f.query, f.group, f.timestamp, f.gains.to_vec(), bits));
    }));
    (engine, seen)
}

/// One replay: the report as JSON, the counters, and the finalized impressions in order.
fn replay(cfg: &Config, impressions: &Path, engagements: &Path, threading: Threading) -> (String, String, Finalized) {
    let (engine, seen) = observed(cfg);
    let (report, counters) = run(engine, impressions, engagements, threading);
    let finalized = std::mem::take(&mut *seen.lock().unwrap());
    (report, counters, finalized)
}

/// One replay through `engine`: the report as JSON and the counters.
fn run(engine: Engine, impressions: &Path, engagements: &Path, threading: Threading) -> (String, String) {
    let mut engine = replay::run_with(impressions, engagements, engine, None, threading).unwrap();
    let counters = format!("{:?} {:?}", engine.counters(), engine.engagement_tally());
    let report = serde_json::to_string(&Report::from_engine(&mut engine)).unwrap();
    (report, counters)
}

fn assert_same(name: &str, cfg: &Config, impressions: &Path, engagements: &Path) -> usize {
    let threaded = replay(cfg, impressions, engagements, Threading::ReaderThreads);
    let single = replay(cfg, impressions, engagements, Threading::SingleThread);
    assert_eq!(threaded.1, single.1, "{name}: counters");
    assert_eq!(threaded.2.len(), single.2.len(), "{name}: finalized impressions");
    for (i, (a, b)) in threaded.2.iter().zip(&single.2).enumerate() {
        assert_eq!(a, b, "{name}: finalized impression {i}");
    }
    assert_eq!(threaded.0, single.0, "{name}: report");
    threaded.2.len()
}

#[test]
fn threaded_replay_equals_the_single_threaded_path_on_the_conformance_suites() {
    for suite in ["threshold1", "threshold2"] {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/fixtures").join(suite);
        let cfg = Config::load(Some(&dir.join("config.toml"))).unwrap();
        let n = assert_same(suite, &cfg, &dir.join("impressions.jsonl"), &dir.join("engagements.jsonl"));
        assert!(n > 100, "{suite}: {n} impressions");
    }
}

/// The judged suites: judged blocks are added as impressions arrive, on the merge thread, and
/// reach the finalization worker's sums in order with the finalized impressions.
#[test]
fn threaded_replay_equals_the_single_threaded_path_with_a_judgment_list() {
    for suite in ["query_jsonl", "query_id_qrels"] {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/judgments/fixtures").join(suite);
        let mut cfg = Config::load(Some(&dir.join("config.toml"))).unwrap();
        cfg.judgments.file = dir.join(&cfg.judgments.file).to_string_lossy().into_owned();
        let n = assert_same(suite, &cfg, &dir.join("impressions.jsonl"), &dir.join("engagements.jsonl"));
        assert!(n >= 10_000, "{suite}: {n} impressions");
    }
}

/// The demo's traffic, `count` impressions with 2% of them malformed, as two JSON-lines files in
/// `dir`: their paths, and the files still open for more lines.
fn traffic(dir: &Path, count: u64) -> ((PathBuf, PathBuf), (File, File)) {
    let (imp, eng) = (dir.join("imp.jsonl"), dir.join("eng.jsonl"));
    let (mut fi, mut fe) = (File::create(&imp).unwrap(), File::create(&eng).unwrap());
    let faults = rankpulse::demo::FaultRate::new(0.02).unwrap();
    rankpulse::demo::write_traffic(&mut fi, &mut fe, count, 400, 18, 1_795_000_000_000, faults).unwrap();
    ((imp, eng), (fi, fe))
}

#[test]
fn threaded_replay_equals_the_single_threaded_path_on_messy_traffic() {
    let dir = tempfile::tempdir().unwrap();
    // More than one reader batch (4,096 lines) per file.
    let ((imp, eng), (mut fi, mut fe)) = traffic(dir.path(), 20_000);
    // What a careless producer adds: blank and oversized lines, redeliveries, events far out of
    // order, a line that is not JSON, an engagement before its impression, an unknown action.
    let t = 1_795_000_000_000i64;
    let huge = format!(r#"{{"query_id":"huge","timestamp":{t},"results":["{}"]}}"#, "x".repeat(70_000));
    let redelivered = format!(r#"{{"query_id":"q-00000010","timestamp":{},"results":["a","b"]}}"#, t + 50);
    for line in ["", "   ", &huge, &redelivered, "not json", r#"{"query_id":"late","timestamp":1000,"results":["a"]}"#]
    {
        writeln!(fi, "{line}").unwrap();
    }
    for line in [
        format!(r#"{{"query_id":"q-00000010","timestamp":{},"doc_id":"a","event_id":"e-x"}}"#, t + 60),
        format!(r#"{{"query_id":"q-00000010","timestamp":{},"doc_id":"a","event_id":"e-x"}}"#, t + 60),
        format!(r#"{{"query_id":"early","timestamp":{t},"doc_id":"a","action":"purchase"}}"#),
        format!(r#"{{"query_id":"q-00000011","timestamp":{},"doc_id":"a","action":"teleport"}}"#, t + 70),
        "".to_string(),
        "[1,2]".to_string(),
    ] {
        writeln!(fe, "{line}").unwrap();
    }
    writeln!(fi, r#"{{"query_id":"early","timestamp":{},"results":["a","b"]}}"#, t + 10).unwrap();
    drop((fi, fe));
    let toml = r#"
[join]
attribution_window = "20s"
max_out_of_orderness = "2s"
max_pending_impressions = 3000
[ab]
unit = "client_id"
[labels]
max_variants = 2
[limits]
max_message_bytes = 65536
max_results = 50
"#;
    let cfg = Config::from_toml_with_env(toml, "test", std::iter::empty()).unwrap();
    let n = assert_same("messy", &cfg, &imp, &eng);
    assert!(n > 15_000, "{n} impressions finalized");
    // The default configuration too (no clustering, no state limit).
    assert_same("messy, defaults", &Config::default(), &imp, &eng);
}

/// Without an observer and without distinct units, finalization runs on several lanes whose sums
/// are added at the end and at every window close (`engine::offload`): the report is still the
/// single-threaded path's, byte for byte, whatever the number of lanes.
#[test]
fn finalization_lanes_add_up_to_the_single_threaded_path() {
    let dir = tempfile::tempdir().unwrap();
    // The windows close as the watermark goes, and batches of finalized impressions alternate
    // between lanes between the closes.
    let ((imp, eng), files) = traffic(dir.path(), 30_000);
    drop(files);
    let toml = r#"
[join]
attribution_window = "20s"
max_out_of_orderness = "2s"
max_pending_impressions = 3000
[metrics]
windows = ["10s", "1m"]
[labels]
max_variants = 2
"#;
    let short = Config::from_toml_with_env(toml, "test", std::iter::empty()).unwrap();
    let judged = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/judgments/fixtures/query_jsonl");
    let mut with_judgments = Config::load(Some(&judged.join("config.toml"))).unwrap();
    with_judgments.judgments.file = judged.join(&with_judgments.judgments.file).to_string_lossy().into_owned();
    let cases = [
        ("short windows, a state limit", short, imp.clone(), eng.clone()),
        ("defaults", Config::default(), imp.clone(), eng.clone()),
        ("judged", with_judgments, judged.join("impressions.jsonl"), judged.join("engagements.jsonl")),
    ];
    for (name, cfg, imp, eng) in cases {
        let engine = || {
            let mut engine = Engine::new(&cfg);
            if let Some(judgments) = rankpulse::judgments::JudgmentSource::from_config(&cfg.judgments).unwrap() {
                engine.set_judgments(judgments);
            }
            engine
        };
        let single = run(engine(), &imp, &eng, Threading::SingleThread);
        assert!(single.0.contains("\"windows\""), "{name}: {}", &single.0[..200]);
        for lanes in [2, 3] {
            let laned = run(engine(), &imp, &eng, Threading::FinalizeLanes(lanes));
            assert_eq!(laned.1, single.1, "{name}, {lanes} lanes: counters");
            assert_eq!(laned.0, single.0, "{name}, {lanes} lanes: report");
        }
    }
}

/// `serve`'s engine holds many partitions and finalizes them on several threads at once as the
/// watermarks pass (`Engine::advance`, `engine::aggregation::finalize_due`): each partition's
/// sums, windows, counts and state are those of one thread, whatever the number of threads.
#[test]
fn partitions_finalized_on_several_threads_equal_one_thread() {
    let mut impressions = Vec::new();
    let mut engagements = Vec::new();
    let faults = rankpulse::demo::FaultRate::new(0.02).unwrap();
    // Recent: within the engine's `limits.max_past`.
    let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    let start_ms = i64::try_from(since_epoch.as_millis()).unwrap() - 600_000;
    rankpulse::demo::write_traffic(&mut impressions, &mut engagements, 20_000, 500, 7, start_ms, faults).unwrap();
    let lines = |bytes: &[u8]| -> Vec<(i32, Vec<u8>)> {
        bytes
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| {
                let query = serde_json::from_slice::<serde_json::Value>(l)
                    .ok()
                    .and_then(|v| v["query_id"].as_str().map(rankpulse::ids::query_key))
                    .unwrap_or(0);
                ((query % 6) as i32, l.to_vec())
            })
            .collect()
    };
    let (impressions, engagements) = (lines(&impressions), lines(&engagements));
    let toml = r#"
[join]
attribution_window = "5s"
max_out_of_orderness = "1s"
[metrics]
windows = ["10s", "1m"]
"#;
    let cfg = Config::from_toml_with_env(toml, "test", std::iter::empty()).unwrap();
    let run = |lanes: usize| {
        let mut engine = Engine::new(&cfg);
        engine.set_finalize_lanes(lanes);
        engine.keep_closed_windows();
        let now = Instant::now();
        for p in 0..6 {
            engine.assign(p, now);
        }
        // The two topics interleaved as a consumer reads them, watermarks advanced as it goes.
        let mut engagements = engagements.iter();
        for (i, (partition, line)) in impressions.iter().enumerate() {
            let _ = engine.process(rankpulse::event::EventKind::Impression, *partition, line, now);
            for (partition, line) in engagements.by_ref().take(1) {
                let _ = engine.process(rankpulse::event::EventKind::Engagement, *partition, line, now);
            }
            if i % 500 == 0 {
                engine.advance(now);
            }
        }
        for (partition, line) in engagements {
            let _ = engine.process(rankpulse::event::EventKind::Engagement, *partition, line, now);
        }
        let before_finish = (engine.cumulative(), engine.state_size());
        engine.finish();
        let windows = engine.take_closed_windows();
        let figures = format!("{:?} {:?} {:?}", engine.counters(), engine.engagement_tally(), engine.state_size());
        (before_finish, engine.cumulative(), windows, figures)
    };
    let one = run(1);
    assert!(one.0 .0.iter().map(|(_, s)| s.impressions).sum::<u64>() > 5_000, "finalized before the end");
    assert!(one.2.len() >= 5, "{} windows", one.2.len());
    for lanes in [2, 4] {
        let many = run(lanes);
        assert_eq!(many.0, one.0, "{lanes} lanes: sums and state before the end");
        assert_eq!(many.1, one.1, "{lanes} lanes: sums");
        assert_eq!(many.2, one.2, "{lanes} lanes: windows");
        assert_eq!(many.3, one.3, "{lanes} lanes: counts");
    }
}

/// Values per finalized impression, by query key (the order differs between serve and replay).
type ByQuery = BTreeMap<u128, Vec<u64>>;

fn by_query(finalized: &Finalized) -> ByQuery {
    finalized.iter().map(|(query, _, _, _, bits)| (*query, bits.clone())).collect()
}

/// The events of two JSON-lines files through the real Kafka source on the mock cluster (4
/// partitions, each event on the partition of its query), every pending impression finalized
/// once all are consumed: the per-group report and the finalized impressions.
fn serve(cfg: &Config, impressions: &Path, engagements: &Path) -> (String, ByQuery) {
    let partition_of = |line: &str| {
        let query = serde_json::from_str::<serde_json::Value>(line)
            .ok()
            .and_then(|v| v["query_id"].as_str().map(rankpulse::ids::query_key))
            .unwrap_or(0);
        (query % 4) as i32
    };
    let messages = |path: &Path| -> common::Messages {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| (partition_of(l), l.to_string()))
            .collect()
    };
    let (imp, eng) = (messages(impressions), messages(engagements));
    let total = (imp.len() + eng.len()) as u64;
    let cluster = MockCluster::new(1).unwrap();
    for topic in ["t-impressions", "t-engagements"] {
        cluster.create_topic(topic, 4, 1).unwrap();
    }
    let mut cfg = cfg.clone();
    cfg.kafka.brokers = cluster.bootstrap_servers();
    cfg.kafka.group_id = "threading".into();
    cfg.kafka.impressions_topic = "t-impressions".into();
    cfg.kafka.engagements_topic = "t-engagements".into();
    common::produce_to_partitions(&cfg.kafka.brokers, &[("t-impressions", &imp), ("t-engagements", &eng)]);

    let (engine, seen) = observed(&cfg);
    let engine = SharedEngine::new(engine);
    let shutdown = Shutdown::new();
    let source = common::spawn_source(cfg.kafka.clone(), engine.clone(), shutdown.clone(), None);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let consumed: u64 = engine.lock().counters().consumed.iter().sum();
        if consumed >= total {
            break;
        }
        assert!(Instant::now() < deadline, "consumed {consumed} of {total}");
        std::thread::sleep(Duration::from_millis(20));
    }
    shutdown.trigger();
    source.join().unwrap();
    let mut engine = engine.into_inner().unwrap();
    engine.finish();
    let groups = serde_json::to_string(&Report::from_engine(&mut engine).groups).unwrap();
    let finalized = by_query(&seen.lock().unwrap());
    (groups, finalized)
}

#[test]
fn serve_with_an_engine_thread_equals_the_single_threaded_replay() {
    // Nothing is late however the two topics interleave (the watermark stays behind every
    // event until the end), so consumption order cannot matter and the figures must agree.
    let order_free = |cfg: &mut Config| {
        cfg.join.max_out_of_orderness = "6h".parse().unwrap();
        cfg.limits.max_past = "3650d".parse().unwrap();
    };
    let dir = tempfile::tempdir().unwrap();
    let (imp, eng) = (dir.path().join("imp.jsonl"), dir.path().join("eng.jsonl"));
    let (mut fi, mut fe) = (std::fs::File::create(&imp).unwrap(), std::fs::File::create(&eng).unwrap());
    let start = chrono::Utc::now().timestamp_millis() - 3_600_000;
    let faults = rankpulse::demo::FaultRate::new(0.02).unwrap();
    rankpulse::demo::write_traffic(&mut fi, &mut fe, 6_000, 200, 7, start, faults).unwrap();
    drop((fi, fe));
    let suites = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/fixtures");
    let mut cases = Vec::new();
    for suite in ["threshold1", "threshold2"] {
        let dir = suites.join(suite);
        let cfg = Config::load(Some(&dir.join("config.toml"))).unwrap();
        cases.push((suite.to_string(), cfg, dir.join("impressions.jsonl"), dir.join("engagements.jsonl")));
    }
    let messy = Config::from_toml_with_env("[ab]\nunit = \"client_id\"\n", "test", std::iter::empty()).unwrap();
    cases.push(("messy".to_string(), messy, imp, eng));
    for (name, mut cfg, imp, eng) in cases {
        order_free(&mut cfg);
        let single = replay(&cfg, &imp, &eng, Threading::SingleThread);
        let single_groups = {
            let report: serde_json::Value = serde_json::from_str(&single.0).unwrap();
            report["groups"].to_string()
        };
        let (groups, finalized) = serve(&cfg, &imp, &eng);
        let expected = by_query(&single.2);
        assert!(expected.len() > 100, "{name}: {} impressions", expected.len());
        assert_eq!(finalized.len(), expected.len(), "{name}: impressions finalized");
        assert!(finalized == expected, "{name}: per-impression values differ");
        let normalize = |s: &str| serde_json::from_str::<serde_json::Value>(s).unwrap().to_string();
        assert_eq!(normalize(&groups), single_groups, "{name}: per-group figures");
    }
}
