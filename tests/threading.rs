//! The multi-threaded replay (each file read and decoded on a thread of its own while the merge
//! thread joins and evaluates) against the single-threaded path: the same report to the byte,
//! the same counters, and every impression finalized in the same order with the same values,
//! on the trec_eval conformance suites and on messy traffic (malformed lines, oversized and
//! blank lines, redeliveries, late and out-of-order events, a clustered A/B unit, two label
//! limits that fold groups).

use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};

use rankpulse::config::Config;
use rankpulse::engine::Engine;
use rankpulse::replay::{self, Report, Threading};

/// Every finalized impression in order: query key, group, timestamp, gains, value bits.
type Finalized = Vec<(u128, u32, i64, Vec<u8>, Vec<u64>)>;

/// One replay: the report as JSON, the counters, and the finalized impressions in order.
fn replay(cfg: &Config, impressions: &Path, engagements: &Path, threading: Threading) -> (String, String, Finalized) {
    let seen: Arc<Mutex<Finalized>> = Arc::default();
    let sink = seen.clone();
    let mut engine = Engine::new(cfg);
    engine.set_observer(Box::new(move |f| {
        let bits = f.values.iter().map(|v| v.to_bits()).collect();
        sink.lock().unwrap().push((f.query, f.group, f.timestamp, f.gains.to_vec(), bits));
    }));
    let mut engine = replay::run_with(impressions, engagements, engine, None, threading).unwrap();
    let counters = format!("{:?} {:?}", engine.counters(), engine.engagement_tally());
    let report = serde_json::to_string(&Report::from_engine(&mut engine)).unwrap();
    let finalized = std::mem::take(&mut *seen.lock().unwrap());
    (report, counters, finalized)
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

#[test]
fn threaded_replay_equals_the_single_threaded_path_on_messy_traffic() {
    let dir = tempfile::tempdir().unwrap();
    let (imp, eng) = (dir.path().join("imp.jsonl"), dir.path().join("eng.jsonl"));
    let (mut fi, mut fe) = (std::fs::File::create(&imp).unwrap(), std::fs::File::create(&eng).unwrap());
    // More than one reader batch (4,096 lines) per file, 2% malformed impressions.
    let faults = rankpulse::demo::FaultRate::new(0.02).unwrap();
    rankpulse::demo::write_traffic(&mut fi, &mut fe, 20_000, 400, 18, 1_795_000_000_000, faults).unwrap();
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
