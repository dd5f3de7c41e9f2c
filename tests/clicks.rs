//! Click models end to end: simulated traffic with known position bias and relevance
//! (`clicks/sim.rs`) replayed by the real binary (`judgments --from-clicks`, `eval --clicks`),
//! its figures compared with independent references (`clicks/reference.py`: the EM over
//! individual sessions, SRW's COEC over individual events, intervention harvesting, IPS) and
//! with the truth the simulation knows.

mod common;
#[path = "clicks/sim.rs"]
mod sim;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::BIN;
use serde_json::Value;
use sim::{Ranker, User, World};

const TOLERANCE: f64 = 1e-9;

/// The examination of the simulated position-based users, rank 1 first.
const EXAMINATION: [f64; 6] = [1.0, 0.72, 0.55, 0.41, 0.3, 0.22];

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn rankpulse(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().unwrap();
    assert!(out.status.success(), "rankpulse {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// Runs `tests/clicks/reference.py <command>` on `input`.
fn reference(command: &str, input: &Value) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clicks/reference.py");
    let mut child = Command::new("python3")
        .arg(script)
        .arg(command)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs the references");
    serde_json::to_writer(child.stdin.take().unwrap(), input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "reference.py {command}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The click log of a replay of the files: (judgment lines, models, click table text).
fn from_clicks(dir: &Path, impressions: &Path, engagements: &Path, max_rank: usize) -> (Vec<Value>, Value, String) {
    let (out, models, table) = (dir.join("judgments.jsonl"), dir.join("models.json"), dir.join("table.jsonl"));
    let max_rank = max_rank.to_string();
    rankpulse(&[
        "judgments",
        "--from-clicks",
        "--impressions",
        impressions.to_str().unwrap(),
        "--engagements",
        engagements.to_str().unwrap(),
        "--max-rank",
        &max_rank,
        "--min-impressions",
        "0",
        "--out",
        out.to_str().unwrap(),
        "--models-out",
        models.to_str().unwrap(),
        "--table-out",
        table.to_str().unwrap(),
    ]);
    let lines = std::fs::read_to_string(&out).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let models = serde_json::from_str(&std::fs::read_to_string(&models).unwrap()).unwrap();
    (lines, models, std::fs::read_to_string(&table).unwrap())
}

fn close(got: f64, want: f64, what: &str) {
    assert!((got - want).abs() <= TOLERANCE, "{what}: {got} vs the reference's {want}");
}

/// Every estimate of a small replay equals its reference on the same events: the EM (run by
/// the reference over individual sessions, for the iterations rankpulse ran), SRW's COEC (over
/// individual events), intervention harvesting, and the click table's counts.
#[test]
fn estimates_equal_the_references_on_the_same_events() {
    let dir = tempfile::tempdir().unwrap();
    let world = World::new(7, 5, 11);
    let user = User::Pbm(EXAMINATION.to_vec());
    let (logged, impressions, engagements) =
        world.traffic(600, &user, |i| if i % 3 == 0 { Ranker::Production } else { Ranker::Shuffled }, 12);
    let (imp, eng) = (write(dir.path(), "imp.jsonl", &impressions), write(dir.path(), "eng.jsonl", &engagements));
    let (judgments, models, table) = from_clicks(dir.path(), &imp, &eng, 5);
    let mut input = sim::reference_input(&logged);
    input["max_rank"] = 5.into();
    input["iterations"] = models["em_iterations"].clone();

    let pbm = reference("pbm", &input);
    for (r, rank) in models["ranks"].as_array().unwrap().iter().enumerate() {
        let want = pbm["examination"][r].as_f64().unwrap();
        close(rank["pbm_examination"].as_f64().unwrap(), want, &format!("γ at rank {}", r + 1));
    }
    close(models["log_likelihood"].as_f64().unwrap(), pbm["log_likelihood"].as_f64().unwrap(), "log-likelihood");
    let gamma1 = pbm["examination"][0].as_f64().unwrap();
    let alpha: HashMap<(String, String), f64> = pbm["attractiveness"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| ((a["query"].as_str().unwrap().into(), a["doc"].as_str().unwrap().into()), a["value"].as_f64().unwrap()))
        .collect();
    let coec = reference("coec", &input);
    let coec: HashMap<(String, String), &Value> = coec["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| ((p["query"].as_str().unwrap().into(), p["doc"].as_str().unwrap().into()), p))
        .collect();
    assert_eq!(judgments.len(), coec.len(), "every pair shown is judged");
    for j in &judgments {
        let key = (j["query"].as_str().unwrap().to_string(), j["doc_id"].as_str().unwrap().to_string());
        let what = format!("{key:?}");
        close(j["attractiveness"].as_f64().unwrap(), alpha[&key] * gamma1, &format!("α·γ₁ of {what}"));
        let srw = coec[&key];
        close(j["coec"].as_f64().unwrap(), srw["coec"].as_f64().unwrap(), &format!("COEC of {what}"));
        assert_eq!(j["clicks"], srw["clicks"], "{what}");
        assert_eq!(j["impressions"], srw["impressions"], "{what}");
    }
    let harvest = reference("harvest", &input);
    for (r, rank) in models["ranks"].as_array().unwrap().iter().enumerate() {
        close(rank["harvest_relative"].as_f64().unwrap(), harvest["ratio"][r].as_f64().unwrap(), &format!("harvest rank {}", r + 1));
        assert_eq!(rank["harvest_pairs"], harvest["pairs"][r]);
    }
    // The table's cells are the logged counts.
    let mut cells: HashMap<(String, String, u64), (u64, u64)> = HashMap::new();
    for l in &logged {
        for (r, (doc, &clicked)) in l.docs.iter().zip(&l.clicks).enumerate() {
            let c = cells.entry((l.query.clone(), doc.clone(), r as u64 + 1)).or_default();
            c.0 += 1;
            c.1 += u64::from(clicked);
        }
    }
    let lines: Vec<Value> = table.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), cells.len());
    for line in lines {
        let key = (line["query"].as_str().unwrap().into(), line["doc_id"].as_str().unwrap().into(), line["rank"].as_u64().unwrap());
        assert_eq!((line["impressions"].as_u64().unwrap(), line["clicks"].as_u64().unwrap()), cells[&key], "{key:?}");
    }
}
