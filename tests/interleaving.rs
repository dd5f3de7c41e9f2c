//! Interleaving through the real binary against an independent reference.
//!
//! `tests/interleaving/generate.py` writes generated interleaved traffic (two rankers and a
//! three-ranker multileaving, duplicates across teams, clicks below the depth, graded and
//! unknown actions, repeated engagements, ties, impressions without engagement, engagements
//! outside the window, invalid lines, A/B impressions that must not count) and, from its own
//! implementation of the manual's definitions (docs/src/interleaving.md) (scipy for the tests), what rankpulse must say
//! under two configurations: clicks over every rank with impression units (the multileaving
//! impressions are then over `interleaving.max_rankers` and rejected), and graded credit to
//! depth 5 with client units. Here `rankpulse replay` runs on the same files: every
//! interleaved impression's credits and outcome (`--trec-out`'s `interleaving.jsonl`), the
//! rejections, and every comparison's aggregates, cumulative and per closed window, must
//! equal the reference's, counts exactly and figures to 1e-9.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

const TOLERANCE: f64 = 1e-9;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interleaving/fixtures")
}

/// `replay --format json --trec-out` of the fixture under `config`: the report and the
/// per-impression lines.
fn replay(config: &str) -> (Value, Vec<Value>) {
    let dir = tempfile::tempdir().unwrap();
    let f = fixtures();
    let out = std::process::Command::new(common::BIN)
        .args(["replay", "--format", "json", "--max-rejects", "none", "--impressions"])
        .arg(f.join("impressions.jsonl"))
        .arg("--engagements")
        .arg(f.join("engagements.jsonl"))
        .arg("--config")
        .arg(f.join(format!("{config}.toml")))
        .arg("--trec-out")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let lines = std::fs::read_to_string(dir.path().join("interleaving.jsonl")).unwrap();
    (report, lines.lines().map(|l| serde_json::from_str(l).unwrap()).collect())
}

/// Whether two figures agree: both absent (or null), or both numbers within the tolerance
/// (relative for large magnitudes); integers (counts) must be equal.
fn agree(got: &Value, want: &Value) -> bool {
    match (got, want) {
        (Value::Null, Value::Null) => true,
        (Value::Number(g), Value::Number(w)) => {
            let (g, w) = (g.as_f64().unwrap(), w.as_f64().unwrap());
            (g - w).abs() <= TOLERANCE * w.abs().max(1.0)
        }
        (Value::Array(g), Value::Array(w)) => g.len() == w.len() && g.iter().zip(w).all(|(g, w)| agree(g, w)),
        (Value::Object(g), Value::Object(w)) => {
            g.len() == w.len() && w.iter().all(|(k, w)| g.get(k).is_some_and(|g| agree(g, w)))
        }
        (g, w) => g == w,
    }
}

/// Checks one comparison's figures against the reference's (every key the reference gives).
fn check_group(context: &str, got: &Value, want: &Value, mismatches: &mut Vec<String>) {
    for key in ["rankers", "impressions", "engaged", "wins", "ties"] {
        if got[key] != want[key] {
            mismatches.push(format!("{context} {key}: {} vs {}", got[key], want[key]));
        }
    }
    let pairs: BTreeMap<(String, String), &Value> = got["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| ((p["ranker"].as_str().unwrap().to_string(), p["opponent"].as_str().unwrap().to_string()), p))
        .collect();
    let want_pairs = want["pairs"].as_array().unwrap();
    if pairs.len() != want_pairs.len() {
        mismatches.push(format!("{context}: {} pairs vs {}", pairs.len(), want_pairs.len()));
    }
    for w in want_pairs {
        let key = (w["ranker"].as_str().unwrap().to_string(), w["opponent"].as_str().unwrap().to_string());
        let Some(g) = pairs.get(&key) else {
            mismatches.push(format!("{context}: no pair {key:?}"));
            continue;
        };
        for (field, want_value) in w.as_object().unwrap() {
            if !agree(&g[field], want_value) {
                mismatches.push(format!("{context} {key:?} {field}: {} vs {want_value}", g[field]));
            }
        }
    }
}

/// The report's interleaving comparisons of a list of experiment reports, by (experiment, variant).
fn comparisons(experiments: &Value) -> BTreeMap<(String, String), Value> {
    let mut out = BTreeMap::new();
    for report in experiments.as_array().unwrap() {
        for comparison in report["interleaving"].as_array().into_iter().flatten() {
            let key = (
                report["experiment"].as_str().unwrap().to_string(),
                comparison["variant"].as_str().unwrap().to_string(),
            );
            out.insert(key, comparison.clone());
        }
    }
    out
}

fn conforms(config: &str) {
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join(format!("expected_{config}.json"))).unwrap())
            .unwrap();
    let (report, lines) = replay(config);
    let mut mismatches = Vec::new();

    // Every interleaved impression's credits and outcome.
    let want = expected["impressions"].as_object().unwrap();
    assert!(want.len() >= 5_000, "{config}: only {} interleaved impressions in the fixture", want.len());
    assert_eq!(lines.len(), want.len(), "{config}: interleaved impressions finalized");
    for line in &lines {
        let query = line["query_id"].as_str().unwrap();
        match want.get(query) {
            None => mismatches.push(format!("{query}: not interleaved in the reference")),
            Some(w) if w["credits"] != line["credits"] || w["outcome"] != line["outcome"] => {
                mismatches.push(format!("{query}: {line} vs {w}"))
            }
            Some(_) => {}
        }
    }

    // What was rejected, and why.
    let rejected = &report["events"]["rejected_by_reason"]["impressions"];
    for (reason, count) in expected["rejected"].as_object().unwrap() {
        if rejected[reason] != *count {
            mismatches.push(format!("rejected {reason}: {} vs {count}", rejected[reason]));
        }
    }

    // Cumulative aggregates.
    let got = comparisons(&report["experiments"]);
    let want_groups = expected["groups"].as_array().unwrap();
    assert_eq!(got.len(), want_groups.len(), "{config}: comparisons {:?}", got.keys().collect::<Vec<_>>());
    for w in want_groups {
        let key = (w["experiment"].as_str().unwrap().to_string(), w["variant"].as_str().unwrap().to_string());
        match got.get(&key) {
            Some(g) => check_group(&format!("{config} cumulative {key:?}"), g, w, &mut mismatches),
            None => mismatches.push(format!("{config}: no comparison {key:?}")),
        }
    }

    // Per closed window, by its start.
    let mut windows = 0;
    for w in expected["windows"].as_array().unwrap() {
        let start = rankpulse::time::format_rfc3339_ms(w["start_ms"].as_i64().unwrap());
        let window = report["windows"].as_array().unwrap().iter().find(|r| r["start"] == start.as_str());
        let Some(window) = window else {
            mismatches.push(format!("{config}: no window at {start}"));
            continue;
        };
        let in_window = comparisons(&window["experiments"]);
        for wg in w["groups"].as_array().unwrap() {
            let key = (wg["experiment"].as_str().unwrap().to_string(), wg["variant"].as_str().unwrap().to_string());
            match in_window.get(&key) {
                Some(g) => check_group(&format!("{config} window {start} {key:?}"), g, wg, &mut mismatches),
                None => mismatches.push(format!("{config} window {start}: no comparison {key:?}")),
            }
            windows += 1;
        }
    }
    assert!(windows >= 5, "{config}: {windows} windowed comparisons checked");
    assert!(
        mismatches.is_empty(),
        "{config}: {} mismatches:\n{}",
        mismatches.len(),
        mismatches[..mismatches.len().min(30)].join("\n")
    );
    eprintln!(
        "{config}: {} interleaved impressions, {} comparisons, {windows} windowed, equal to the reference",
        lines.len(),
        got.len()
    );
}

#[test]
fn clicks_over_every_rank_with_impression_units_equal_the_reference() {
    conforms("clicks");
}

#[test]
fn graded_credit_to_depth_five_with_client_units_equals_the_reference() {
    conforms("gains");
}

/// A line the engine refuses (more rankers than `interleaving.max_rankers`, more results than
/// `limits.max_results`, stamped in the future) or does not keep (late) leaves nothing in
/// `--trec-out`: the next line of the same query_id is exported with its own rankers, credits
/// and results, never the refused line's.
#[test]
fn trec_out_exports_no_rejected_line() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("trec");
    let t0: i64 = 1_795_300_000_000;
    let impression = |query: &str, ts: i64, results: &[&str], rankers: &[&str], teams: &[&str]| {
        serde_json::json!({"query_id": query, "timestamp": ts, "results": results, "experiment": "duel",
            "interleaving": rankers, "teams": teams})
        .to_string()
    };
    let two = ["base", "cand"];
    let mut impressions = vec![
        // Three rankers where two are allowed (at most 7 decode): rejected.
        impression("q1", t0, &["a1", "a2", "a3"], &["x", "y", "z"], &["z", "y", "x"]),
        impression("q1", t0 + 1, &["b1", "b2"], &two, &two),
        // Four results where three are allowed: rejected.
        impression("q2", t0 + 2, &["a1", "a2", "a3", "a4"], &["r", "s"], &["s", "s", "r", "r"]),
        impression("q2", t0 + 3, &["c1", "c2"], &two, &two),
    ];
    let mut engagements = vec![
        serde_json::json!({"query_id": "q1", "timestamp": t0 + 10, "doc_id": "b2"}).to_string(),
        serde_json::json!({"query_id": "q2", "timestamp": t0 + 11, "doc_id": "c2"}).to_string(),
    ];
    // Two hours of other traffic move the watermark on; then a line of q4 stamped at the start
    // is late (its attribution window has passed), and a current one of q4 counts.
    for i in 0..1200 {
        let ts = t0 + 1_000 + i * 6_000;
        impressions.push(impression(&format!("f{i}"), ts, &["f"], &two, &["base"]));
        engagements.push(serde_json::json!({"query_id": "none", "timestamp": ts, "doc_id": "f"}).to_string());
    }
    let end = t0 + 1_000 + 1200 * 6_000;
    impressions.push(impression("q4", t0 + 5, &["a1", "a2"], &["p", "q"], &["q", "p"]));
    impressions.push(impression("q4", end, &["e1", "e2"], &two, &two));
    engagements.push(serde_json::json!({"query_id": "q4", "timestamp": end + 1, "doc_id": "e2"}).to_string());
    // Far in the future: rejected. Last, since replay reads the files in time order (so no
    // click of q3: every other line comes first).
    impressions.push(impression("q3", 4_102_444_800_000, &["a1", "a2"], &["p", "q"], &["q", "p"]));
    impressions.push(impression("q3", end + 2, &["d1", "d2"], &two, &two));
    std::fs::write(dir.path().join("impressions.jsonl"), impressions.join("\n") + "\n").unwrap();
    std::fs::write(dir.path().join("engagements.jsonl"), engagements.join("\n") + "\n").unwrap();
    std::fs::write(
        dir.path().join("config.toml"),
        "[join]\nattribution_window = \"30m\"\n[limits]\nmax_results = 3\n[interleaving]\nmax_rankers = 2\n",
    )
    .unwrap();
    let out = std::process::Command::new(common::BIN)
        .current_dir(dir.path())
        .args(["replay", "--format", "json", "--max-rejects", "none", "--impressions", "impressions.jsonl"])
        .args(["--engagements", "engagements.jsonl", "--config", "config.toml", "--trec-out"])
        .arg(&out_dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rejected = &report["events"]["rejected_by_reason"]["impressions"];
    for reason in ["invalid_interleaving", "too_many_results", "timestamp_in_future"] {
        assert_eq!(rejected[reason], 1, "{reason}: {rejected}");
    }
    assert_eq!(report["events"]["impressions_late"], 1, "the early q4 is late");

    let lines = std::fs::read_to_string(out_dir.join("interleaving.jsonl")).unwrap();
    let by_query: BTreeMap<String, Value> = lines
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l["query_id"].as_str().unwrap().starts_with('q'))
        .map(|l| (l["query_id"].as_str().unwrap().to_string(), l))
        .collect();
    let won =
        |query: &str| serde_json::json!({"query_id": query, "credits": {"base": 0, "cand": 1}, "outcome": "cand"});
    let want: BTreeMap<String, Value> = [
        ("q1".to_string(), won("q1")),
        ("q2".to_string(), won("q2")),
        ("q3".to_string(), serde_json::json!({"query_id": "q3", "credits": {"base": 0, "cand": 0}, "outcome": "none"})),
        ("q4".to_string(), won("q4")),
    ]
    .into();
    assert_eq!(by_query, want, "each query's valid line's rankers and credits");
    let qrels = std::fs::read_to_string(out_dir.join("qrels.txt")).unwrap();
    let mut judged: Vec<&str> = qrels.lines().filter(|l| l.starts_with('q')).collect();
    judged.sort_unstable();
    assert_eq!(
        judged,
        ["q1 0 b1 0", "q1 0 b2 1", "q2 0 c1 0", "q2 0 c2 1", "q3 0 d1 0", "q3 0 d2 0", "q4 0 e1 0", "q4 0 e2 1"],
        "each query's valid line's results"
    );
}

/// Issue 31, defect 2: the cumulative always-valid figures of interleaving were the newest
/// look's own, not running ones. 2,000 interleaved impressions over two hours, `candidate`
/// winning 80% of them in the first hour only, looks at every closed hour: the cumulative
/// p-value must be at most the first look's (the first hour's own, which is its sums), and
/// the cumulative sequence inside the first hour's, or reported empty.
#[test]
fn the_cumulative_interleaving_figures_are_running_ones() {
    const HOUR: i64 = 3_600_000;
    let t0 = 498_695 * HOUR;
    let dir = tempfile::tempdir().unwrap();
    let (mut imps, mut engs) = (String::new(), String::new());
    for i in 0..2000i64 {
        let ts = t0 + i * (2 * HOUR / 2000);
        let teams = if i % 2 == 0 { ["baseline", "candidate"] } else { ["candidate", "baseline"] };
        let candidate_wins = if i < 1000 { i % 10 < 8 } else { i % 2 == 0 };
        let winner = if candidate_wins { "candidate" } else { "baseline" };
        let doc = if teams[0] == winner { "d1" } else { "d2" };
        let q = format!("q{i}");
        imps.push_str(&format!(
            "{}\n",
            serde_json::json!({"query_id": q, "timestamp": ts, "results": ["d1", "d2"], "experiment": "duel",
                               "interleaving": ["baseline", "candidate"], "teams": teams})
        ));
        engs.push_str(&format!("{}\n", serde_json::json!({"query_id": q, "timestamp": ts + 1000, "doc_id": doc})));
    }
    let path = |name: &str| dir.path().join(name);
    std::fs::write(path("imp.jsonl"), imps).unwrap();
    std::fs::write(path("eng.jsonl"), engs).unwrap();
    std::fs::write(
        path("cfg.toml"),
        "[join]\nattribution_window = \"1m\"\n[metrics]\nwindows = [\"1h\"]\n[interleaving]\nmax_rankers = 2\n",
    )
    .unwrap();
    let out = std::process::Command::new(common::BIN)
        .args(["replay", "--format", "json", "--impressions"])
        .arg(path("imp.jsonl"))
        .arg("--engagements")
        .arg(path("eng.jsonl"))
        .arg("--config")
        .arg(path("cfg.toml"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let pair = |experiments: &Value| {
        comparisons(experiments)[&("duel".to_string(), "baseline vs candidate".to_string())]["pairs"][0].clone()
    };
    let cumulative = pair(&report["experiments"]);
    let hours: Vec<Value> = report["windows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["experiments"].as_array().is_some_and(|e| !e.is_empty()))
        .map(|w| pair(&w["experiments"]))
        .collect();
    assert_eq!(hours.len(), 2, "{hours:?}");
    let p = |v: &Value| v["always_valid_p_value"].as_f64().unwrap();
    assert!(p(&hours[0]) < p(&hours[1]), "the first hour is the more conclusive: {hours:?}");
    assert!(p(&cumulative) <= p(&hours[0]), "cumulative {cumulative} against the first look {}", hours[0]);
    let first = &hours[0]["preference_cs"];
    match cumulative["preference_cs"].as_array() {
        Some(cs) => {
            let (lo, hi) = (cs[0].as_f64().unwrap(), cs[1].as_f64().unwrap());
            assert!(lo <= hi, "{cumulative}");
            assert!(lo >= first[0].as_f64().unwrap() && hi <= first[1].as_f64().unwrap(), "{cumulative} vs {first}");
        }
        None => assert_eq!(cumulative["preference_cs_empty"], Value::Bool(true), "{cumulative}"),
    }
}
