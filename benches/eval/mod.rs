//! Issue 21's `rankpulse eval` figures: a run of 100,000 queries x 100 documents against
//! qrels of 15 judgments per query, evaluated on five common measures by `rankpulse eval`
//! (the release binary, end to end: reading both files, ranking, evaluating, printing), on
//! every core and on one, and by trec_eval (pytrec-eval-terrier) and ranx on the same files
//! (`eval_reference.py`: from the files, and evaluation alone on data already loaded, which is
//! compared with `rankpulse::eval::trec::evaluate` alone on data already read and ranked).

use std::io::Write;
use std::process::Command;
use std::time::Instant;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use rankpulse::eval::trec::qrels::Qrels;
use rankpulse::eval::trec::{evaluate, Compat, Settings};

use crate::{fmt, median, Results};

const QUERIES: u32 = 100_000;
const DOCS: u32 = 100;
const JUDGED: u32 = 15;
/// The measures every tool computes.
const MEASURES: [&str; 5] = ["map", "P.10", "ndcg_cut.10", "recip_rank", "recall.100"];

pub fn eval(results: &mut Results) {
    let dir = tempfile::tempdir().unwrap();
    let (qrels, run) = (dir.path().join("qrels.txt"), dir.path().join("run.txt"));
    let mut rng = SmallRng::seed_from_u64(2111);
    let mut q = std::io::BufWriter::new(std::fs::File::create(&qrels).unwrap());
    let mut r = std::io::BufWriter::new(std::fs::File::create(&run).unwrap());
    for query in 0..QUERIES {
        for j in 0..JUDGED {
            writeln!(q, "{query} 0 d{query}-{} {}", j * 9, rng.random_range(0..4u8)).unwrap();
        }
        for rank in 0..DOCS {
            let score = f64::from(DOCS - rank) + rng.random_range(0.0..0.5);
            writeln!(r, "{query} Q0 d{query}-{} {} {score:.4} bench", rank * 2, rank + 1).unwrap();
        }
    }
    q.flush().unwrap();
    r.flush().unwrap();
    drop((q, r));
    let time = |threads: &str| {
        median(
            (0..3)
                .map(|_| {
                    let started = Instant::now();
                    let mut command = Command::new(env!("CARGO_BIN_EXE_rankpulse"));
                    command.arg("eval").args(["--threads", threads]);
                    MEASURES.iter().for_each(|m| {
                        command.args(["-m", m]);
                    });
                    let out = command.arg(&qrels).arg(&run).output().unwrap();
                    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
                    started.elapsed().as_secs_f64()
                })
                .collect(),
        )
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (all, one) = (time(&cores.to_string()), time("1"));
    results.insert("eval_seconds".into(), all.into());
    results.insert("eval_one_thread_seconds".into(), one.into());
    // The evaluation alone, in-process, on data already read and ranked: what the tools'
    // evaluation-only figures are compared with.
    let text = std::fs::read_to_string(&run).unwrap();
    let ranking = rankpulse::eval::run::read(&run, &text, cores, Compat::V10).unwrap();
    let qrels_text = std::fs::read_to_string(&qrels).unwrap();
    let judgments = Qrels::parse(&qrels, &qrels_text, Compat::V10).unwrap();
    let names: Vec<String> = MEASURES.iter().map(|m| m.to_string()).collect();
    let measures = rankpulse::eval::measures::parse(&names, Compat::V10).unwrap();
    let settings = Settings {
        compat: Compat::V10,
        relevance_level: 1,
        max_docs: None,
        judged_only: false,
        docs_in_collection: 0,
        complete: false,
        max_grade: None,
        threads: cores,
    };
    let evaluate_only = median(
        (0..3)
            .map(|_| {
                let started = Instant::now();
                std::hint::black_box(evaluate(&judgments, &ranking, &measures, &settings).unwrap());
                started.elapsed().as_secs_f64()
            })
            .collect(),
    );
    results.insert("eval_evaluate_seconds".into(), evaluate_only.into());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/eval_reference.py");
    match Command::new("python3").arg(script).arg(&qrels).arg(&run).output() {
        Ok(out) if out.status.success() => {
            let tools: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            for (key, value) in tools.as_object().unwrap() {
                results.insert(format!("eval_{key}"), value.clone());
                if let Some(seconds) = value.as_f64().filter(|_| key.ends_with("_seconds")) {
                    // From the files against the whole command; evaluation against evaluation.
                    let ours = if key.ends_with("_evaluate_seconds") { evaluate_only } else { all };
                    let speedup = format!("eval_speedup_vs_{}", key.trim_end_matches("_seconds"));
                    results.insert(speedup, (seconds / ours).into());
                }
            }
        }
        Ok(out) => eprintln!("eval reference tools failed: {}", String::from_utf8_lossy(&out.stderr)),
        Err(e) => eprintln!("python3 not available: {e}"),
    }
}

/// The table's rows of this stage.
pub fn rows(get: &dyn Fn(&str) -> Option<f64>) -> Vec<(&'static str, String, &'static str, &'static str)> {
    vec![
        (
            "eval 100k x 100, s: all cores; one; evaluation",
            format!(
                "{}; {}; {}",
                fmt(get("eval_seconds"), 2),
                fmt(get("eval_one_thread_seconds"), 2),
                fmt(get("eval_evaluate_seconds"), 2)
            ),
            "",
            "",
        ),
        (
            "  vs trec_eval from files; evaluation only",
            format!(
                "{}x; {}x",
                fmt(get("eval_speedup_vs_trec_eval_from_files"), 1),
                fmt(get("eval_speedup_vs_trec_eval_evaluate"), 1)
            ),
            "",
            "",
        ),
        (
            "  vs ranx from files; evaluation only",
            format!(
                "{}x; {}x",
                fmt(get("eval_speedup_vs_ranx_from_files"), 1),
                fmt(get("eval_speedup_vs_ranx_evaluate"), 1)
            ),
            "",
            "",
        ),
    ]
}
