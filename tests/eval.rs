//! `rankpulse eval` against pytrec_eval and AutoRAG: the real binary on the fixtures of
//! `tests/eval/` (trec_eval 9.0.8 through pytrec-eval-terrier, which ir_measures and ranx's
//! users also get, printed as trec_eval prints; `generate.py`) and `tests/autorag/` (AutoRAG
//! 0.3.27's own retrieval metric functions; `generate.py`), and its refusals of bad input.
//! The output byte for byte, order and summary lines included, is held to NIST trec_eval
//! itself by tests/trec_eval_conformance.rs.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn fixtures(suite: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join(suite).join("fixtures")
}

fn eval(dir: &Path, args: &[&str]) -> Output {
    Command::new(common::BIN).current_dir(dir).arg("eval").args(args).output().unwrap()
}

fn stdout(out: &Output) -> String {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// Every line pytrec_eval's trec_eval computes is a line of `rankpulse eval --compat 9` (which
/// prints more: every measure of `all_trec`, in trec_eval's order).
#[test]
fn every_line_of_pytrec_eval_is_printed_by_eval_compat_9() {
    let dir = fixtures("eval");
    let invocations: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(dir.join("invocations.json")).unwrap()).unwrap();
    let mut lines = 0;
    for case in &invocations {
        let name = case["name"].as_str().unwrap();
        let mut args: Vec<&str> = vec!["--compat", "9"];
        args.extend(case["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()));
        args.extend(["qrels.txt", "run.txt"]);
        let got = stdout(&eval(&dir, &args));
        let want = std::fs::read_to_string(dir.join(format!("{name}.txt"))).unwrap();
        let printed: std::collections::HashSet<&str> = got.lines().collect();
        // The generator printed -c's zero lines of queries the run lacks; trec_eval 9.x (and so
        // --compat 9) prints none (10.0 does: tests/trec_eval_conformance.rs).
        let ranked: std::collections::HashSet<String> = std::fs::read_to_string(dir.join("run.txt"))
            .unwrap()
            .lines()
            .filter_map(|l| l.split_whitespace().next().map(str::to_string))
            .collect();
        for (i, w) in want.lines().enumerate() {
            let qid = w.split('\t').nth(1).unwrap_or("all");
            if qid != "all" && !ranked.contains(qid) {
                continue;
            }
            assert!(printed.contains(w), "{name}: pytrec_eval's line {} ({w:?}) is not printed", i + 1);
        }
        lines += want.lines().count();
    }
    eprintln!("eval: {lines} lines of {} invocations equal pytrec_eval's", invocations.len());
    assert!(lines > 10_000);
}

#[test]
fn json_is_trec_eval_at_full_precision_on_any_number_of_threads() {
    let dir = fixtures("eval");
    let want: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("all_trec_q.json")).unwrap()).unwrap();
    let mut outputs = Vec::new();
    for threads in ["1", "3"] {
        let args = [
            "--qrels",
            "qrels.txt",
            "--run",
            "run.txt",
            "-q",
            "--compat",
            "9",
            "-m",
            "all_trec",
            "--format",
            "json",
            "--threads",
            threads,
        ];
        outputs.push(stdout(&eval(&dir, &args)));
    }
    assert_eq!(outputs[0], outputs[1], "the output does not depend on the threads");
    let got: Value = serde_json::from_str(&outputs[0]).unwrap();
    let mut compared = 0;
    for (scope, want) in [("all", &want["all"])]
        .into_iter()
        .chain(want["queries"].as_object().unwrap().iter().map(|(q, v)| (q.as_str(), v)))
    {
        let got = if scope == "all" { &got["all"] } else { &got["queries"][scope] };
        for (measure, w) in want.as_object().unwrap() {
            if scope != "all" && measure == "num_q" {
                continue; // trec_eval prints num_q in the summary only, and so does rankpulse
            }
            let g = &got[measure];
            match w.as_f64() {
                Some(w) => assert!((g.as_f64().unwrap() - w).abs() <= 1e-9, "{scope} {measure}: {g} vs trec_eval {w}"),
                None => assert_eq!(g, w, "{scope} {measure}"),
            }
            compared += 1;
        }
    }
    assert_eq!(got["queries"].as_object().unwrap().len(), want["queries"].as_object().unwrap().len());
    eprintln!("eval --format json: {compared} values equal trec_eval's to 1e-9");
}

#[test]
fn grouped_measures_equal_autorag_s_own_functions() {
    let dir = fixtures("autorag");
    let want: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();
    let out = eval(&dir, &["--ground-truth", "ground_truth.jsonl", "--run", "run.jsonl", "-q", "--format", "json"]);
    let got: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let want = want.as_object().unwrap();
    assert!(want.len() >= 2_000);
    assert_eq!(got["queries"].as_object().unwrap().len(), want.len(), "every case evaluated");
    for (qid, measures) in want {
        for (measure, w) in measures.as_object().unwrap() {
            let (g, w) = (got["queries"][qid][measure].as_f64().unwrap(), w.as_f64().unwrap());
            assert!((g - w).abs() <= 1e-12, "{qid} {measure}: rankpulse {g}, AutoRAG {w}");
        }
    }
    let seed = &got["queries"]["seed-example"];
    for measure in ["retrieval_precision", "retrieval_recall", "retrieval_f1", "retrieval_mrr"] {
        assert_eq!(seed[measure], 0.5, "the worked example's {measure}");
    }
}

#[test]
fn bad_input_is_an_error_naming_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
    write("qrels.txt", "q1 0 a 1\nq1 0 b 2\n");
    write("run.txt", "q1 Q0 a 1 2.5 t\nq1 Q0 b 2 two t\n");
    write("dup.txt", "q1 Q0 a 1 2.5 t\nq1 Q0 a 2 1.5 t\n");
    write("bad-qrels.txt", "q1 0 a 1\nq1 0 b\n");
    write("good.txt", "q1 Q0 a 1 2.5 t\n");
    let fails = |args: &[&str], needle: &str| {
        let out = eval(dir.path(), args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(needle), "{args:?}: {stderr}");
    };
    fails(&["qrels.txt", "run.txt"], "run.txt:2: score \"two\" is not a number");
    fails(&["qrels.txt", "dup.txt"], "query \"q1\": document \"a\" is ranked twice");
    fails(&["bad-qrels.txt", "good.txt"], "bad-qrels.txt:2: expected 4 fields");
    fails(&["-m", "yaap", "qrels.txt", "good.txt"], "unknown measure \"yaap\"");
    fails(&["--compat", "9", "-m", "rbp", "qrels.txt", "good.txt"], "measure of trec_eval 10.0");
    fails(&["-m", "retrieval_f1", "qrels.txt", "good.txt"], "retrieval_f1 is one of AutoRAG's grouped measures");
    fails(&["-m", "P.5,5", "qrels.txt", "good.txt"], "given twice");
    fails(&["qrels.txt"], "give the judgments and the run");
    fails(&["qrels.txt", "missing.txt"], "cannot read missing.txt");
    let ok = stdout(&eval(dir.path(), &["-q", "-m", "P.1", "qrels.txt", "good.txt"]));
    assert_eq!(ok, "P_1                   \tq1\t1.0000\nP_1                   \tall\t1.0000\n");
}

/// AutoRAG 0.3.27 gives no value (`None`, left out of its means) to a query whose retrieved
/// list or ground truth has an id that Python's `str.strip()` empties, `" "` as `""`, or an
/// empty group (`MetricInput.is_fields_notnone`); `eval --ground-truth` leaves such a query out
/// the same way and names it, instead of evaluating `" "` as an id.
#[test]
fn grouped_measures_leave_out_what_autorag_gives_no_value() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
    write(
        "gt.jsonl",
        "{\"query\":\"q1\",\"retrieval_gt\":[[\"a\",\"b\"],[\"c\"]]}\n{\"query\":\"q2\",\"retrieval_gt\":[[\"a\"]]}\n",
    );
    write(
        "run.jsonl",
        "{\"query\":\"q1\",\"results\":[\"a\",\"x\",\"c\",\"y\"]}\n{\"query\":\"q2\",\"results\":[\"a\",\" \"]}\n",
    );
    let args = ["--ground-truth", "gt.jsonl", "--run", "run.jsonl", "-q", "--format", "json"];
    let measures = ["-m", "retrieval_precision", "-m", "retrieval_recall", "-m", "num_q"];
    let grouped = |args: &[&str]| {
        let out = eval(dir.path(), &[args, &measures[..]].concat());
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (serde_json::from_str::<Value>(&stdout(&out)).unwrap(), stderr)
    };
    // q1 by AutoRAG's definitions: distinct hits {a, c} over 4 retrieved, both groups covered.
    // (num_q is in the summary only, as trec_eval prints it.)
    let q1 = serde_json::json!({"retrieval_precision": 0.5, "retrieval_recall": 1.0});
    let all = serde_json::json!({"retrieval_precision": 0.5, "retrieval_recall": 1.0, "num_q": 1});
    let (got, stderr) = grouped(&args);
    assert_eq!(got["queries"], serde_json::json!({"q1": q1}), "q2's \" \" is not an id to evaluate");
    assert_eq!(got["all"], all, "the means leave q2 out");
    assert!(stderr.contains("1 query left out") && stderr.contains("\"q2\""), "{stderr}");

    // The same for "", for a blank ground-truth id, and for an empty group: no value, not an error.
    write(
        "gt.jsonl",
        "{\"query\":\"q1\",\"retrieval_gt\":[[\"a\",\"b\"],[\"c\"]]}\n{\"query\":\"q2\",\"retrieval_gt\":[[\"a\"]]}\n\
         {\"query\":\"q3\",\"retrieval_gt\":[[\"a\",\"\\t\"]]}\n{\"query\":\"q4\",\"retrieval_gt\":[[\"a\"],[]]}\n\
         {\"query\":\"q5\",\"retrieval_gt\":[[\"a\"]]}\n",
    );
    write(
        "run.jsonl",
        "{\"query\":\"q1\",\"results\":[\"a\",\"x\",\"c\",\"y\"]}\n{\"query\":\"q2\",\"results\":[\"a\",\" \"]}\n\
         {\"query\":\"q3\",\"results\":[\"a\"]}\n{\"query\":\"q4\",\"results\":[\"a\"]}\n{\"query\":\"q5\",\"results\":[\"\",\"a\"]}\n",
    );
    let (got, stderr) = grouped(&args);
    assert_eq!(got["queries"], serde_json::json!({"q1": q1}));
    assert_eq!(got["all"], all);
    assert!(stderr.contains("4 queries left out"), "{stderr}");
}

/// AutoRAG's own functions on inputs it computes nothing for (`tests/autorag/generate.py`'s
/// no-value cases: blank ids by Python's `str.strip`, `""`, empty groups and lists, beside ids
/// that only look blank): those queries get no value and stay out of the means, the others
/// AutoRAG's values; the means equal a pandas mean over AutoRAG's values, as its evaluation
/// takes them.
#[test]
fn grouped_measures_give_no_value_where_autorag_gives_none() {
    let dir = fixtures("autorag");
    let want: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("no_value_expected.json")).unwrap()).unwrap();
    let args =
        ["--ground-truth", "no_value_ground_truth.jsonl", "--run", "no_value_run.jsonl", "-q", "--format", "json"];
    let out = eval(&dir, &args);
    let got: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let mut none = 0;
    for (qid, measures) in want["queries"].as_object().unwrap() {
        let got_query = &got["queries"][qid];
        if measures["retrieval_precision"].is_null() {
            assert!(got_query.is_null(), "{qid}: AutoRAG gives no value, rankpulse {got_query}");
            none += 1;
            continue;
        }
        for (measure, w) in measures.as_object().unwrap() {
            let (g, w) = (got_query[measure].as_f64().unwrap(), w.as_f64().unwrap());
            assert!((g - w).abs() <= 1e-12, "{qid} {measure}: rankpulse {g}, AutoRAG {w}");
        }
    }
    for (measure, w) in want["all"].as_object().unwrap() {
        let (g, w) = (got["all"][measure].as_f64().unwrap(), w.as_f64().unwrap());
        assert!((g - w).abs() <= 1e-12, "all {measure}: rankpulse {g}, AutoRAG {w}");
    }
    assert_eq!(none, 12);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("12 queries left out"), "{stderr}");
}
