//! The measures for incomplete judgments against trec_eval: the suites of `tests/judgments/`
//! replayed with their judgment lists, every judged impression's bpref, condensed-list AP@k
//! and nDCG@k (`map_condensed@k`, `ndcg_condensed@k`) compared with trec_eval's `bpref` and
//! its `map_cut` and `ndcg_cut` with `-J` (built from its C sources: 9.0.8 and 10.0 agree), and
//! the judged means and A/B comparisons `rankpulse replay` reports with the fixture's fsum
//! means and scipy's Welch test. The fixtures are `incomplete.json` beside each suite, written
//! by `tests/judgments/incomplete.py` (how to regenerate them is in its docstring).

use crate::common;

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use rankpulse::ids::query_key;
use rankpulse::time::format_rfc3339_ms;

const TOLERANCE: f64 = 1e-9;
use common::{judged_suite_config as config, judged_suite_dir as suite_dir, JUDGED_SUITES as SUITES};

fn expected(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("incomplete.json")).unwrap()).unwrap()
}

/// Replays a suite through the library, observing each judged impression's block; returns
/// the values compared and their largest difference from trec_eval's.
fn per_impression(name: &str) -> (usize, f64) {
    let dir = suite_dir(name);
    let want = expected(&dir);
    let cfg = config(&dir);
    assert!(cfg.judgments.incomplete_measures, "on by default");
    let (engine, seen) = common::replay_observing_judged(&dir, &cfg);
    let block = engine.layout().judged().unwrap().clone();
    let count = block.incomplete_count_slot().expect("the measures for incomplete judgments") - block.first;
    let slots: HashMap<String, usize> = block.named_slots().into_iter().map(|(n, s)| (n, s - block.first)).collect();
    let keys: Vec<&str> = want["keys"].as_array().unwrap().iter().map(|k| k.as_str().unwrap()).collect();
    assert_eq!(keys.len(), block.len() - block.plain_len() - 1, "{name}: the fixture covers every such measure");
    let impressions = want["impressions"].as_object().unwrap();
    assert_eq!(seen.len(), impressions.len(), "{name}: exactly the impressions of judged queries are judged");
    let (mut compared, mut largest) = (0, 0.0f64);
    let mut nonzero = vec![0usize; keys.len()];
    for (query_id, values) in impressions {
        let got = seen.get(&query_key(query_id)).unwrap_or_else(|| panic!("{name}: {query_id} was not judged"));
        assert_eq!(got[count], 1.0, "the measures' count");
        for (i, (key, w)) in keys.iter().zip(values.as_array().unwrap()).enumerate() {
            let (g, w) = (got[slots[*key]], w.as_f64().unwrap());
            let difference = (g - w).abs();
            assert!(difference <= TOLERANCE, "{name} {query_id} {key}: rankpulse {g}, trec_eval {w}");
            largest = largest.max(difference);
            nonzero[i] += usize::from(w != 0.0);
            compared += 1;
        }
    }
    // Every measure is exercised: a fixture of zeros would agree with anything.
    for (key, n) in keys.iter().zip(&nonzero) {
        assert!(*n > impressions.len() / 10, "{name} {key}: only {n} impressions with a nonzero value");
    }
    (compared, largest)
}

#[test]
fn bpref_and_the_condensed_measures_agree_with_trec_eval_on_every_judged_impression() {
    let (mut values, mut largest, mut impressions) = (0, 0.0f64, 0);
    for name in SUITES {
        let (n, l) = per_impression(name);
        values += n;
        largest = largest.max(l);
        impressions += expected(&suite_dir(name))["impressions"].as_object().unwrap().len();
    }
    eprintln!(
        "incomplete judgments: {impressions} impressions, {values} values (bpref, map_condensed@k, \
         ndcg_condensed@k) agree with trec_eval (bpref; -J map_cut, ndcg_cut); largest difference {largest:e}"
    );
    assert!(impressions >= 10_000);
}

/// The plain judged figures count unjudged results as not relevant; with most shown results
/// unjudged (as in these suites) the condensed measures must differ from them, or they would
/// not be what trec_eval's -J computes.
#[test]
fn the_condensed_measures_are_not_the_plain_ones_where_results_are_unjudged() {
    let dir = suite_dir("query_jsonl");
    let plain: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();
    let condensed = expected(&dir);
    let (p, c) = (&plain["groups"][0]["metrics"], &condensed["groups"][0]["metrics"]);
    for k in [5, 10] {
        let (p, c) = (p[format!("ndcg@{k}")].as_f64().unwrap(), c[format!("ndcg_condensed@{k}")].as_f64().unwrap());
        assert!(c > p * 1.2, "nDCG'@{k} {c} against nDCG@{k} {p}");
    }
}

fn check_groups(name: &str, what: &str, got: &serde_json::Value, want: &serde_json::Value) -> usize {
    let mut compared = 0;
    for w in want.as_array().unwrap() {
        let g = got
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["experiment"] == w["experiment"] && g["variant"] == w["variant"])
            .unwrap_or_else(|| panic!("{name} {what}: no group {w}"));
        assert_eq!(g["judged"]["impressions"], w["impressions"], "{name} {what} {}", g["variant"]);
        for (key, mean) in w["metrics"].as_object().unwrap() {
            let (gv, wv) = (g["judged"]["metrics"][key].as_f64().unwrap(), mean.as_f64().unwrap());
            assert!(
                (gv - wv).abs() <= TOLERANCE,
                "{name} {what} {} {key}: rankpulse {gv}, expected {wv}",
                w["variant"]
            );
            compared += 1;
        }
    }
    compared
}

fn replay(dir: &Path, format: &[&str]) -> Vec<u8> {
    let out = Command::new(common::BIN)
        .current_dir(dir)
        .args(["replay", "--impressions", "impressions.jsonl", "--engagements", "engagements.jsonl"])
        .args(["--config", "config.toml"])
        .args(format)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

#[test]
fn replay_reports_their_means_per_window_and_their_ab_comparisons() {
    for name in SUITES {
        let dir = suite_dir(name);
        let want = expected(&dir);
        let report: serde_json::Value = serde_json::from_slice(&replay(&dir, &["--format", "json"])).unwrap();
        let mut compared = check_groups(name, "cumulative", &report["groups"], &want["groups"]);
        for w in want["windows"].as_array().unwrap() {
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
            let judged = &report["judged"];
            for variant in judged["variants"].as_array().unwrap() {
                assert!(variant["metrics"]["bpref"]["mean"].is_number(), "{name}: an estimate of bpref per variant");
            }
            for (key, w) in metrics.as_object().unwrap() {
                let got = &judged["comparisons"][0]["metrics"][key];
                for figure in ["difference", "p_value"] {
                    let (g, w) = (got[figure].as_f64().unwrap(), w[figure].as_f64().unwrap());
                    assert!((g - w).abs() <= TOLERANCE, "{name} {experiment} {key} {figure}: rankpulse {g}, scipy {w}");
                    compared += 1;
                }
            }
        }
        // Every experiment compares them, cluster-robust where the suite clusters by client.
        for experiment in report["experiments"].as_array().unwrap() {
            let metrics = &experiment["judged"]["comparisons"][0]["metrics"];
            for key in ["bpref", "map_condensed@10", "ndcg_condensed@10"] {
                assert!(metrics[key]["p_value"].is_f64(), "{name} {}: {key} compared", experiment["experiment"]);
            }
        }
        eprintln!("{name}: {compared} means and A/B figures of the measures for incomplete judgments agree");
    }
}

#[test]
fn the_replay_table_shows_bpref_and_ndcg_condensed_beside_coverage() {
    let table = String::from_utf8(replay(&suite_dir("query_jsonl"), &[])).unwrap();
    let judged = &table[table.find("== judged (cumulative").expect("a judged section")..];
    for needle in ["\nbpref ", "\nndcg_condensed@10 ", "\ncoverage@10 ", "e1 treatment - control: judged bpref"] {
        assert!(judged.contains(needle), "{needle:?} missing from\n{judged}");
    }
}
