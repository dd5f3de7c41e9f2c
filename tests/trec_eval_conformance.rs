//! `rankpulse eval` against NIST trec_eval itself, byte for byte: both 9.0.8 and 10.0, built
//! from the sources in `tests/vendor/` with a plain `make`, run on the same generated qrels and
//! runs with the same flags as `rankpulse eval --compat 9|10`, their standard output compared
//! whole.
//!
//! The inputs are made to be hard (seeded, so a failure reproduces): ties in score, `-0`
//! beside `0`, scores that differ only beyond single precision, exponents; grades 0 to 4 and
//! negative ones (judged "in the pool, not judged"); retrieved documents the qrels do not name;
//! queries with no relevant document; queries only in the qrels or only in the run; query ids
//! whose byte order differs from their numeric order; rankings from 1 to 1,200 documents; a
//! document ranked twice below the `-M` cut; the run's tag changing on its last line; lines of
//! all queries shuffled; and for 10.0, `#` comment lines. The invocations cover `-q`, `-c`,
//! `-l`, `-M`, `-J`, `-N`, `-n`, `official`, `all_trec` and parameterised measures.
//!
//! pytrec_eval (tests/eval.rs) sees neither print order nor summary lines; this test does.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use rand::rngs::SmallRng;
use rand::seq::{IndexedRandom, SliceRandom};
use rand::{Rng, SeedableRng};

/// The trec_eval binary of `version` (`9.0.8` or `10.0`), built once into the target
/// directory from `tests/vendor/trec_eval-<version>`.
fn trec_eval(version: &'static str) -> PathBuf {
    static BUILT: [OnceLock<PathBuf>; 2] = [OnceLock::new(), OnceLock::new()];
    let slot = &BUILT[usize::from(version == "10.0")];
    slot.get_or_init(|| {
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
        let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| manifest.join("target"), PathBuf::from);
        let dir = target.join("trec_eval").join(version);
        let binary = dir.join("trec_eval");
        if binary.exists() {
            return binary;
        }
        let staging = target.join("trec_eval").join(format!("{version}.build-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&staging);
        std::fs::create_dir_all(&staging).unwrap();
        let source = manifest.join("tests").join("vendor").join(format!("trec_eval-{version}"));
        let copied =
            Command::new("cp").arg("-r").arg(format!("{}/.", source.display())).arg(&staging).status().unwrap();
        assert!(copied.success());
        if version == "10.0" {
            // m_rbp.c reads `min` and `max` before setting them, so rbp depends on what earlier
            // calls left on the stack (even on the length of the files' paths). The one change:
            // they start at 0, which gives the figures NIST ships as 10.0's expected output
            // (test/out.test.aq) and what rankpulse computes.
            let rbp = staging.join("m_rbp.c");
            let text = std::fs::read_to_string(&rbp).unwrap();
            assert!(text.contains("double sum, min, max;"), "m_rbp.c changed: review the patch");
            std::fs::write(&rbp, text.replace("double sum, min, max;", "double sum, min = 0.0, max = 0.0;")).unwrap();
        }
        let made = Command::new("make").current_dir(&staging).output().expect("make (trec_eval's build)");
        assert!(made.status.success(), "make trec_eval {version}: {}", String::from_utf8_lossy(&made.stderr));
        // Tests run as separate processes (cargo nextest), so another may have built and moved
        // its copy in meanwhile: the first rename wins, and a directory in use is never replaced.
        // One without the binary was left by an interrupted build (a rename moves the binary in
        // with its directory) and is replaced.
        if std::fs::rename(&staging, &dir).is_err() {
            if binary.exists() {
                let _ = std::fs::remove_dir_all(&staging);
            } else {
                let _ = std::fs::remove_dir_all(&dir);
                std::fs::rename(&staging, &dir).unwrap();
            }
        }
        binary
    })
    .clone()
}

/// What the data set holds besides the common hard cases.
#[derive(Clone, Copy, PartialEq)]
enum Shape {
    /// Every qrels query is ranked (trec_eval 10.0 stops on a qrels query the run lacks,
    /// unless `-c`).
    Complete,
    /// Some qrels queries are not ranked.
    Partial,
    /// Long rankings with a document ranked twice below rank 50 (only `-M 50` or less reads
    /// them).
    RepeatsBelow50,
    /// `#` comment lines in both files (trec_eval 10.0 only).
    Comments,
}

/// A qrels file and a run, seeded.
fn dataset(seed: u64, shape: Shape) -> (String, String) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut qrels = Vec::new();
    let mut run = Vec::new();
    let grades = [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 2, 3, 3, 4, -1, -2];
    for q in 0..90 {
        // Ids whose byte order is not their numeric order, and a few that sort before digits.
        let qid = match q % 3 {
            0 => format!("{}", 95 + q * 11),
            1 => format!("q{q:03}"),
            _ => format!("Q-{q}"),
        };
        let pool = rng.random_range(1..60);
        let no_relevant = q % 17 == 0;
        for d in 0..pool {
            let grade = if no_relevant { 0 } else { *grades.choose(&mut rng).unwrap() };
            qrels.push(format!("{qid} 0 d{d:04} {grade}"));
        }
        let ranked = match shape {
            Shape::Partial => q % 7 != 3,
            _ => true,
        };
        if !ranked {
            continue;
        }
        let length = match q % 13 {
            0 => rng.random_range(1000..1200),
            1 => 1,
            _ => rng.random_range(1..150),
        };
        let mut docs: Vec<String> = (0..pool).map(|d| format!("d{d:04}")).collect();
        docs.extend((0..length).map(|u| format!("u{u:04}")));
        docs.shuffle(&mut rng);
        docs.truncate(length);
        if shape == Shape::RepeatsBelow50 && docs.len() > 60 {
            let twice = docs[0].clone();
            docs[55] = twice; // ranked by score below: see the scores
        }
        let style = rng.random_range(0..5);
        for (i, doc) in docs.iter().enumerate() {
            let score = match style {
                0 => format!("{}", rng.random_range(0..5)),          // many ties
                1 => format!("{}", (length - i) as f64 * 0.5 + 1.0), // strict order
                2 => format!("{:.9}", 3.0 + f64::from(rng.random_range(0..3u8)) * 1e-9), // beyond float
                3 => ["-0", "0", "0.0", "-0.0", "1e-3", "-1.5E2"][rng.random_range(0..6)].to_string(),
                _ => format!("{:.6}", rng.random_range(-10.0..10.0)),
            };
            // A repeated document must fall below rank 50: give it the lowest score.
            let score =
                if shape == Shape::RepeatsBelow50 && i == 55 && docs.len() > 60 { "-1e9".into() } else { score };
            let (iteration, rank) = (if i % 2 == 0 { "Q0" } else { "0" }, rng.random_range(1..2000));
            run.push(format!("{qid} {iteration} {doc} {rank} {score} runA"));
        }
        if shape == Shape::RepeatsBelow50 && docs.len() > 60 {
            // The repeated document's first line ranks at the top.
            let first = run
                .iter()
                .position(|l| l.starts_with(&format!("{qid} ")) && l.contains(&format!(" {} ", docs[0])))
                .unwrap();
            let fields: Vec<&str> = run[first].split(' ').collect();
            run[first] = format!("{} {} {} {} 1e9 runA", fields[0], fields[1], fields[2], fields[3]);
        }
    }
    // Queries only in the run.
    for q in 0..6 {
        for d in 0..5 {
            run.push(format!("only-run-{q} Q0 x{d} {d} {d} runA"));
        }
    }
    qrels.shuffle(&mut rng);
    run.shuffle(&mut rng);
    // trec_eval keeps the last line's tag.
    if let Some(last) = run.last_mut() {
        *last = last.replace(" runA", " runZ");
    }
    if shape == Shape::Comments {
        for (lines, at) in [(&mut qrels, 3), (&mut run, 7)] {
            lines.insert(at, "# a comment line".into());
            lines.insert(lines.len() / 2, "#another".into());
        }
    }
    (qrels.join("\n") + "\n", run.join("\n") + "\n")
}

/// Where a comparison's inputs are written.
enum Dir {
    Temp(tempfile::TempDir),
    Kept(PathBuf),
}

impl Dir {
    fn path(&self) -> &Path {
        match self {
            Dir::Temp(t) => t.path(),
            Dir::Kept(p) => p,
        }
    }
}

fn run_tool(binary: &Path, args: &[String], qrels: &Path, run: &Path) -> Output {
    Command::new(binary).args(args).arg(qrels).arg(run).output().unwrap()
}

/// Compares every invocation on one data set; returns the lines compared.
fn compare(version: &'static str, shape: Shape, seed: u64, invocations: &[Vec<&str>]) -> usize {
    let dir = tempfile::tempdir().unwrap();
    let (qrels_text, run_text) = dataset(seed, shape);
    // RANKPULSE_KEEP_INPUTS=DIR keeps the generated files, to rerun a failing case by hand.
    let dir = match std::env::var_os("RANKPULSE_KEEP_INPUTS") {
        Some(keep) => {
            let kept = PathBuf::from(keep).join(format!("{version}-{shape}-{seed}"));
            std::fs::create_dir_all(&kept).unwrap();
            Dir::Kept(kept)
        }
        None => Dir::Temp(dir),
    };
    let (qrels, run) = (dir.path().join("qrels.txt"), dir.path().join("run.txt"));
    std::fs::write(&qrels, qrels_text).unwrap();
    std::fs::write(&run, run_text).unwrap();
    let compat = if version == "10.0" { "10" } else { "9" };
    let mut lines = 0;
    for args in invocations {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let want = run_tool(&trec_eval(version), &args, &qrels, &run);
        assert!(want.status.success(), "trec_eval {version} {args:?}: {}", String::from_utf8_lossy(&want.stderr));
        let mut ours = vec!["eval".to_string(), "--compat".into(), compat.into(), "--threads".into(), "3".into()];
        ours.extend(args.iter().cloned());
        let got = run_tool(Path::new(common::BIN), &ours, &qrels, &run);
        assert!(got.status.success(), "rankpulse {ours:?}: {}", String::from_utf8_lossy(&got.stderr));
        let (want, got) = (String::from_utf8(want.stdout).unwrap(), String::from_utf8(got.stdout).unwrap());
        for (i, (w, g)) in want.lines().zip(got.lines()).enumerate() {
            assert_eq!(g, w, "trec_eval {version} {args:?} ({shape}, seed {seed}): line {} differs", i + 1);
        }
        assert_eq!(got.lines().count(), want.lines().count(), "trec_eval {version} {args:?}: line count");
        assert_eq!(got, want, "trec_eval {version} {args:?}: bytes");
        lines += want.lines().count();
    }
    lines
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Shape::Complete => "complete",
            Shape::Partial => "partial",
            Shape::RepeatsBelow50 => "repeats below 50",
            Shape::Comments => "comments",
        })
    }
}

/// The invocations of both versions.
fn common_invocations() -> Vec<Vec<&'static str>> {
    vec![
        vec![],
        vec!["-q", "-m", "all_trec"],
        vec!["-q", "-c", "-m", "all_trec"],
        vec!["-q", "-l", "2", "-m", "all_trec"],
        vec!["-q", "-c", "-l", "3", "-m", "official"],
        vec!["-q", "-m", "official", "-m", "P.10,5,7", "-m", "ndcg_cut.3,1", "-m", "iprec_at_recall.0.25,0.75,0.05"],
        vec![
            "-q",
            "-N",
            "5000",
            "-m",
            "Rprec_mult.0.5,1.5",
            "-m",
            "set_F.0.25",
            "-m",
            "utility.2,-1,0.5,0.1",
            "-m",
            "relstring.15",
            "-m",
            "ndcg.1=0,2=5,4=10",
            "-m",
            "G.3=1",
            "-m",
            "ndcg_rel.2=1",
            "-m",
            "Rndcg.1=2",
            "-m",
            "11pt_avg.0.2,0.5",
            "-m",
            "success.2,4",
            "-m",
            "relative_P.3",
            "-m",
            "map_cut.7",
            "-m",
            "recall.25",
            "-m",
            "set",
        ],
        vec!["-J", "-q", "-m", "all_trec"],
        vec!["-n", "-q", "-m", "map", "-m", "gm_map", "-m", "num_q"],
        vec!["-c", "-m", "gm_map", "-m", "gm_bpref", "-m", "num_rel"],
    ]
}

#[test]
fn eval_prints_what_trec_eval_10_prints() {
    let mut lines = 0;
    let mut invocations = common_invocations();
    invocations.push(vec!["-q", "-m", "dcg", "-m", "ideal_dcg", "-m", "unj.3,30", "-m", "rbp_resid.p=0.5"]);
    // rbp on its own: see rbp_of_trec_eval_10_depends_on_the_other_measures.
    invocations.push(vec!["-q", "-m", "rbp.p=0.7,2=3", "-m", "rbp.p=0.1"]);
    invocations.push(vec!["-q", "-m", "rbp.p=0.8"]);
    for seed in [1, 2] {
        lines += compare("10.0", Shape::Complete, seed, &invocations);
    }
    let complete_flag: Vec<Vec<&str>> = invocations.iter().filter(|a| a.contains(&"-c")).cloned().collect();
    lines += compare("10.0", Shape::Partial, 3, &complete_flag);
    lines += compare("10.0", Shape::Comments, 4, &common_invocations()[..3]);
    lines += compare(
        "10.0",
        Shape::RepeatsBelow50,
        5,
        &[vec!["-q", "-M", "50", "-m", "all_trec"], vec!["-q", "-M", "10", "-m", "official"]],
    );
    eprintln!("trec_eval 10.0: {lines} lines equal, byte for byte");
    assert!(lines > 50_000, "{lines}");
}

#[test]
fn eval_prints_what_trec_eval_9_prints() {
    let mut lines = 0;
    for (seed, shape) in [(1, Shape::Complete), (3, Shape::Partial), (6, Shape::Partial)] {
        lines += compare("9.0.8", shape, seed, &common_invocations());
    }
    lines += compare(
        "9.0.8",
        Shape::RepeatsBelow50,
        5,
        &[vec!["-q", "-M", "50", "-m", "all_trec"], vec!["-q", "-c", "-M", "10", "-m", "official"]],
    );
    eprintln!("trec_eval 9.0.8: {lines} lines equal, byte for byte");
    assert!(lines > 50_000, "{lines}");
}

/// Where trec_eval 10.0 stops, rankpulse evaluates and says why; where the two versions
/// differ, each compat follows its own.
#[test]
fn where_trec_eval_10_stops_rankpulse_evaluates_the_queries_in_both() {
    let dir = tempfile::tempdir().unwrap();
    let (qrels_text, run_text) = dataset(3, Shape::Partial);
    let (qrels, run) = (dir.path().join("qrels.txt"), dir.path().join("run.txt"));
    std::fs::write(&qrels, qrels_text).unwrap();
    std::fs::write(&run, run_text).unwrap();
    let args = vec!["-q".to_string(), "-m".into(), "all_trec".into()];
    let reference = run_tool(&trec_eval("10.0"), &args, &qrels, &run);
    assert_eq!(reference.status.code(), Some(4), "trec_eval 10.0 stops on a qrels query the run lacks");
    assert!(String::from_utf8_lossy(&reference.stderr).contains("not found"));
    let ours = |compat: &str| {
        let mut a = vec!["eval".to_string(), "--compat".into(), compat.into()];
        a.extend(args.iter().cloned());
        run_tool(Path::new(common::BIN), &a, &qrels, &run)
    };
    let (ten, nine) = (ours("10"), ours("9"));
    assert!(ten.status.success());
    assert!(String::from_utf8_lossy(&ten.stderr).contains("the run lacks"), "{}", String::from_utf8_lossy(&ten.stderr));
    let nine_reference = run_tool(&trec_eval("9.0.8"), &args, &qrels, &run);
    assert_eq!(nine.stdout, nine_reference.stdout, "--compat 9 is 9.0.8");
    // The same queries as 9.x, each scored as 10.0 scores it: only 10.0's own measures and
    // its rounding of recall levels may differ.
    let lines = |o: &Output| String::from_utf8(o.stdout.clone()).unwrap().lines().count();
    assert_eq!(
        lines(&ten),
        lines(&nine)
            + String::from_utf8(ten.stdout.clone())
                .unwrap()
                .lines()
                .filter(|l| l.starts_with("rbp") || l.starts_with("unj"))
                .count()
    );
}
