//! Judged metrics conformance: the fixtures of `tests/judgments/` (trec_eval through
//! pytrec-eval-terrier as the oracle, coverage counted directly, the A/B figures scipy's; see
//! `generate.py`) replayed with a judgment list configured. Every judged impression's values,
//! every group's judged means (cumulative and per window) and the judged A/B comparisons must
//! agree to 1e-9; impressions without judgments must add nothing.

use crate::common;

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use rankpulse::ids::query_key;
use rankpulse::time::format_rfc3339_ms;

const TOLERANCE: f64 = 1e-9;
use common::{judged_suite_config as config, judged_suite_dir as suite_dir, JUDGED_SUITES as SUITES};

fn expected(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap()
}

fn close(got: f64, want: f64) -> bool {
    (got - want).abs() <= TOLERANCE
}

/// Replays a suite through the library with an observer of judged impressions; returns the
/// number of values compared.
fn per_impression(name: &str) -> usize {
    let dir = suite_dir(name);
    let want = expected(&dir);
    let cfg = config(&dir);
    let (engine, seen) = common::replay_observing_judged(&dir, &cfg);
    let block = engine.layout().judged().unwrap().clone();
    let slots: HashMap<String, usize> = block.named_slots().into_iter().map(|(n, s)| (n, s - block.first)).collect();
    let keys: Vec<&str> = want["keys"].as_array().unwrap().iter().map(|k| k.as_str().unwrap()).collect();
    // bpref and the condensed measures, after these, are checked by tests/judgments_incomplete.rs.
    assert_eq!(keys.len(), block.plain_len() - 1, "{name}: the fixture covers every plain judged value");
    let impressions = want["impressions"].as_object().unwrap();
    assert_eq!(seen.len(), impressions.len(), "{name}: exactly the impressions of judged queries are judged");
    assert_eq!(want["judged_impressions"].as_u64().unwrap() as usize, impressions.len());
    let mut compared = 0;
    for (query_id, values) in impressions {
        let got = seen.get(&query_key(query_id)).unwrap_or_else(|| panic!("{name}: {query_id} was not judged"));
        assert_eq!(got[0], 1.0, "the count");
        for (key, w) in keys.iter().zip(values.as_array().unwrap()) {
            let (g, w) = (got[slots[*key]], w.as_f64().unwrap());
            assert!(close(g, w), "{name} {query_id} {key}: rankpulse {g}, trec_eval {w}");
            compared += 1;
        }
    }
    compared
}

#[test]
fn every_judged_impression_agrees_with_trec_eval() {
    let (mut values, mut impressions) = (0, 0);
    for name in SUITES {
        values += per_impression(name);
        impressions += expected(&suite_dir(name))["judged_impressions"].as_u64().unwrap();
    }
    eprintln!("judged: {impressions} impressions, {values} values agree with trec_eval to {TOLERANCE}");
    assert!(impressions >= 10_000, "at least 5,000 judged impressions per suite");
}

/// Compares the judged part of the replay document's groups with the expected means.
fn check_groups(name: &str, what: &str, got: &serde_json::Value, want: &serde_json::Value) -> usize {
    let mut compared = 0;
    let judged: Vec<&serde_json::Value> =
        got.as_array().unwrap().iter().filter(|g| g.get("judged").is_some()).collect();
    let want = want.as_array().unwrap();
    assert_eq!(judged.len(), want.len(), "{name} {what}: the groups with judged impressions");
    for w in want {
        let g = judged
            .iter()
            .find(|g| g["experiment"] == w["experiment"] && g["variant"] == w["variant"])
            .unwrap_or_else(|| panic!("{name} {what}: no judged figures for {w}"));
        assert_eq!(g["judged"]["impressions"], w["impressions"], "{name} {what} {}", g["variant"]);
        for (key, mean) in w["metrics"].as_object().unwrap() {
            let (gv, wv) = (g["judged"]["metrics"][key].as_f64().unwrap(), mean.as_f64().unwrap());
            assert!(
                close(gv, wv),
                "{name} {what} {}/{} {key}: rankpulse {gv}, expected {wv}",
                w["experiment"],
                w["variant"]
            );
            compared += 1;
        }
    }
    compared
}

#[test]
fn replay_reports_judged_means_per_window_and_the_judged_ab_comparisons() {
    for name in SUITES {
        let dir = suite_dir(name);
        let want = expected(&dir);
        // The configuration names its judgment file relative to the working directory.
        let out = Command::new(common::BIN)
            .current_dir(&dir)
            .args(["replay", "--impressions", "impressions.jsonl", "--engagements", "engagements.jsonl"])
            .args(["--config", "config.toml", "--format", "json"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let mut compared = check_groups(name, "cumulative", &report["groups"], &want["groups"]);
        let windows = want["windows"].as_array().unwrap();
        assert_eq!(windows.len(), 5, "five 1h windows");
        for w in windows {
            let start = format_rfc3339_ms(w["start"].as_i64().unwrap());
            let got = report["windows"]
                .as_array()
                .unwrap()
                .iter()
                .find(|g| g["size"] == "1h" && g["start"] == start.as_str())
                .unwrap_or_else(|| panic!("{name}: no window at {start}"));
            compared += check_groups(name, &start, &got["groups"], &w["groups"]);
        }
        for (experiment, metrics) in want["ab"].as_object().unwrap() {
            let report =
                report["experiments"].as_array().unwrap().iter().find(|e| e["experiment"] == **experiment).unwrap();
            let comparison = &report["judged"]["comparisons"][0];
            for (key, w) in metrics.as_object().unwrap() {
                let got = &comparison["metrics"][key];
                for figure in ["difference", "p_value"] {
                    let (g, w) = (got[figure].as_f64().unwrap(), w[figure].as_f64().unwrap());
                    assert!(close(g, w), "{name} {experiment} judged {key} {figure}: rankpulse {g}, scipy {w}");
                    compared += 1;
                }
            }
        }
        eprintln!("{name}: {compared} judged means and A/B figures agree");
        // Impressions without judgments add nothing: every group's share is below 1.
        for g in report["groups"].as_array().unwrap() {
            let share = g["judged"]["impressions"].as_f64().unwrap() / g["impressions"].as_f64().unwrap();
            assert!(share > 0.3 && share < 0.7, "{name}: judged share {share}");
        }
    }
}

/// The plain-text report has a judged section: each group's judged share, coverage and
/// headline metrics, and the judged comparisons.
#[test]
fn the_replay_table_shows_the_judged_figures() {
    let dir = suite_dir("query_jsonl");
    let out = Command::new(common::BIN)
        .current_dir(&dir)
        .args(["replay", "--impressions", "impressions.jsonl", "--engagements", "engagements.jsonl"])
        .args(["--config", "config.toml"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8(out.stdout).unwrap();
    for needle in ["== judged (cumulative", "judged share", "coverage@10", "e1 treatment - control: judged mrr"] {
        assert!(table.contains(needle), "{needle:?} missing from\n{table}");
    }
}

/// Query matching through the real binary: a judgment list written in capitals, full width,
/// half-width katakana or decomposed Hangul meets the same queries as users type them (NFKC,
/// then lower case of the whole text: `ΟΔΟΣ` is `οδος`, final sigma).
#[test]
fn judgments_meet_queries_across_case_width_and_composition() {
    let dir = tempfile::tempdir().unwrap();
    let judged = [
        ("ΟΔΟΣ ΑΘΗΝΑΣ", "οδος αθηνας"),
        ("ＲＥＤ\u{3000}ＳＨＯＥＳ", "red shoes"),
        ("ｶﾀｶﾅ", "カタカナ"),
        ("\u{1112}\u{1161}\u{11ab}\u{1100}\u{116e}\u{11a8}", "한국"),
    ];
    let mut judgments = String::new();
    let mut impressions = String::new();
    let t0: i64 = 1_795_300_000_000;
    for (i, (written, typed)) in judged.iter().enumerate() {
        judgments += &format!("{}\n", serde_json::json!({"query": written, "doc_id": "d1", "grade": 3}));
        let impression = serde_json::json!({"query_id": format!("i{i}"), "timestamp": t0 + i as i64,
            "results": ["d1", "d2"], "experiment": "e", "variant": "v", "query": typed});
        impressions += &format!("{impression}\n");
    }
    let unjudged = serde_json::json!({"query_id": "i9", "timestamp": t0 + 9, "results": ["d1"],
        "experiment": "e", "variant": "v", "query": "οδοσ"});
    impressions += &format!("{unjudged}\n");
    std::fs::write(dir.path().join("judgments.jsonl"), judgments).unwrap();
    std::fs::write(dir.path().join("impressions.jsonl"), impressions).unwrap();
    std::fs::write(dir.path().join("engagements.jsonl"), "").unwrap();
    std::fs::write(dir.path().join("config.toml"), "[judgments]\nfile = \"judgments.jsonl\"\nkey = \"query\"\n")
        .unwrap();
    let out = Command::new(common::BIN)
        .current_dir(dir.path())
        .args(["replay", "--impressions", "impressions.jsonl", "--engagements", "engagements.jsonl"])
        .args(["--config", "config.toml", "--format", "json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let group = &report["groups"][0];
    assert_eq!(group["impressions"], 5);
    let judged = group["judged"]["impressions"].as_u64().unwrap_or(0);
    assert_eq!(judged, 4, "every query meets its judgments; a wrong sigma does not");
}

/// A JSON array is not a judgment: rejected as `json`, so a list of them is refused whole.
#[test]
fn a_json_array_line_is_a_rejected_judgment() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("judgments.jsonl"),
        "{\"query\":\"q\",\"doc_id\":\"d\",\"grade\":1}\n[\"q\",\"e\",1]\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("config.toml"), "[judgments]\nfile = \"judgments.jsonl\"\n").unwrap();
    let out = Command::new(common::BIN)
        .current_dir(dir.path())
        .args(["check-config", "--config", "config.toml"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "accepted: {}", String::from_utf8_lossy(&out.stdout));
    assert!(stderr.contains("1 of 2 lines rejected") && stderr.contains("line 2: not a JSON object"), "{stderr}");
}
