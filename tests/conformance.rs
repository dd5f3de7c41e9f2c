//! trec_eval conformance: the randomized fixtures of `tests/conformance/` (expected values
//! computed by trec_eval through pytrec-eval-terrier) run through the code path of `replay`
//! (decode, merge on event time, join, metrics, accumulate); every per-impression value and every
//! group mean must agree to 1e-9.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use rankpulse::config::Config;
use rankpulse::engine::Engine;
use rankpulse::ids::{query_key, QueryKey};
use rankpulse::replay::{self, Report};

const TOLERANCE: f64 = 1e-9;

/// Runs one suite; returns (impressions compared, values compared).
fn check_suite(name: &str) -> (usize, usize) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/fixtures").join(name);
    let cfg = Config::load(Some(&dir.join("config.toml"))).unwrap();
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();

    let seen: Arc<Mutex<HashMap<QueryKey, Vec<f64>>>> = Arc::default();
    let mut engine = Engine::new(&cfg);
    let sink = seen.clone();
    engine.set_observer(Box::new(move |f| {
        assert!(sink.lock().unwrap().insert(f.query, f.values.to_vec()).is_none(), "an impression was finalized twice");
    }));
    let mut engine = replay::run(&dir.join("impressions.jsonl"), &dir.join("engagements.jsonl"), engine).unwrap();
    let keys: Vec<String> = engine.layout().keys().iter().map(|k| k.name()).collect();
    let seen = seen.lock().unwrap();

    let impressions = expected["impressions"].as_object().unwrap();
    assert_eq!(seen.len(), impressions.len(), "{name}: every impression is finalized exactly once");
    let mut values = 0;
    for (query_id, want) in impressions {
        let got = seen.get(&query_key(query_id)).unwrap_or_else(|| panic!("{name}: {query_id} never finalized"));
        let want = want.as_object().unwrap();
        assert_eq!(want.len(), keys.len(), "{name}: fixture and layout cover the same metrics");
        for (slot, key) in keys.iter().enumerate() {
            let w = want[key].as_f64().unwrap_or_else(|| panic!("{name}: fixture lacks {key}"));
            assert!(
                (got[slot] - w).abs() <= TOLERANCE,
                "{name} {query_id} {key}: rankpulse {} trec_eval {w}",
                got[slot]
            );
            values += 1;
        }
    }

    let report = Report::from_engine(&mut engine);
    let want_groups = expected["groups"].as_array().unwrap();
    assert_eq!(report.groups.len(), want_groups.len());
    for want in want_groups {
        let got = report
            .groups
            .iter()
            .find(|g| g.experiment == want["experiment"] && g.variant == want["variant"])
            .unwrap_or_else(|| panic!("{name}: group {want} missing"));
        assert_eq!(got.impressions, want["impressions"].as_u64().unwrap());
        assert_eq!(got.engaged, want["engaged"].as_u64().unwrap());
        for key in &keys {
            let (g, w) = (got.metrics[key].as_f64().unwrap(), want["metrics"][key].as_f64().unwrap());
            assert!(
                (g - w).abs() <= TOLERANCE,
                "{name} group {}/{} {key}: rankpulse {g} expected {w}",
                got.experiment,
                got.variant
            );
            values += 1;
        }
    }
    assert_eq!(report.events.rejected + report.events.impressions_late, 0);
    // The fixtures put some engagements just after their impression's window (ts + window + 1):
    // those, and only those, count as late; none was dropped by the watermark.
    assert_eq!(report.events.engagements_late, engagements_after_their_window(&dir, &cfg), "{name}");
    (impressions.len(), values)
}

/// Engagements in the suite's files timestamped after their impression's attribution window.
fn engagements_after_their_window(dir: &Path, cfg: &Config) -> u64 {
    let lines = |file: &str| -> Vec<serde_json::Value> {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
    };
    let shown_at: HashMap<String, i64> = lines("impressions.jsonl")
        .iter()
        .map(|i| (i["query_id"].as_str().unwrap().to_string(), i["timestamp"].as_i64().unwrap()))
        .collect();
    let window = cfg.join.attribution_window.as_millis_i64();
    lines("engagements.jsonl")
        .iter()
        .filter(|e| {
            let at = e["timestamp"].as_i64().unwrap();
            shown_at.get(e["query_id"].as_str().unwrap()).is_some_and(|&t| at > t + window)
        })
        .count() as u64
}

#[test]
fn per_impression_values_and_group_means_agree_with_trec_eval() {
    let (mut impressions, mut values) = (0, 0);
    for suite in ["threshold1", "threshold2"] {
        let (i, v) = check_suite(suite);
        impressions += i;
        values += v;
    }
    eprintln!("conformance: {impressions} impressions, {values} values agree with trec_eval to {TOLERANCE}");
    assert!(impressions >= 5000, "the fixtures must cover at least 5,000 impressions");
}

/// `replay --trec-out` writes exactly what was measured: reading qrels.txt and run.txt back and
/// evaluating them gives the trec_eval values of the fixture, scores descend without ties, and
/// every finalized impression with results is there.
#[test]
fn trec_export_holds_exactly_what_was_measured() {
    use rankpulse::metrics::reference;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/fixtures/threshold2");
    let out = tempfile::tempdir().unwrap();
    let cfg = Config::load(Some(&dir.join("config.toml"))).unwrap();
    replay::run_with_trec(
        &dir.join("impressions.jsonl"),
        &dir.join("engagements.jsonl"),
        Engine::new(&cfg),
        Some(out.path()),
    )
    .unwrap();
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();

    let mut gains: HashMap<(String, String), u8> = HashMap::new();
    for line in std::fs::read_to_string(out.path().join("qrels.txt")).unwrap().lines() {
        let f: Vec<&str> = line.split(' ').collect();
        assert_eq!((f.len(), f[1]), (4, "0"), "qrels line {line:?}");
        assert!(gains.insert((f[0].into(), f[2].into()), f[3].parse().unwrap()).is_none(), "duplicate qrel {line}");
    }
    let mut runs: HashMap<String, Vec<(usize, f64, String)>> = HashMap::new();
    for line in std::fs::read_to_string(out.path().join("run.txt")).unwrap().lines() {
        let f: Vec<&str> = line.split(' ').collect();
        assert_eq!((f.len(), f[1], f[5]), (6, "Q0", "rankpulse"), "run line {line:?}");
        runs.entry(f[0].into()).or_default().push((f[3].parse().unwrap(), f[4].parse().unwrap(), f[2].into()));
    }
    let with_results = expected["impressions"].as_object().unwrap().len()
        - std::fs::read_to_string(dir.join("impressions.jsonl"))
            .unwrap()
            .lines()
            .filter(|l| l.contains("\"results\":[]") || l.contains("\"results\": []"))
            .count();
    assert_eq!(runs.len(), with_results, "one query per finalized impression with results");
    for (query, mut ranked) in runs {
        ranked.sort_by_key(|r| r.0);
        assert!(
            ranked.windows(2).all(|w| w[0].1 > w[1].1 && w[1].0 == w[0].0 + 1),
            "{query}: ranks 1..n, scores descending"
        );
        let g: Vec<u8> = ranked.iter().map(|(_, _, doc)| gains[&(query.clone(), doc.clone())]).collect();
        let want = &expected["impressions"][&query];
        let close = |a: f64, key: &str| assert!((a - want[key].as_f64().unwrap()).abs() < 1e-9, "{query} {key}");
        close(reference::reciprocal_rank(&g, 2), "mrr");
        close(reference::precision(&g, 2, 10), "precision@10");
        close(reference::average_precision(&g, &[], 2, 20), "map@20");
        close(reference::ndcg(&g, &[], 10, false), "ndcg@10");
        close(reference::ndcg(&g, &[], 5, true), "ndcg_exp@5");
    }
}
