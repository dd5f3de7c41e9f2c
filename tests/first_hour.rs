//! The first hour of a new user, through the real binary: the replay examples of README.md and
//! of the manual (docs/src/commands.md, judgments.md, interleaving.md) print what they show;
//! `generate` writes what it says (malformed lines only on request);
//! `replay`'s table fits a screen, adds windows and the curve on request, prints nothing empty
//! for an empty input, and warns when the A/B unit ignores the client ids the data carries;
//! `demo` says that it injects faults and how to stop it; every option has help text.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use clap::CommandFactory;
use common::*;

/// The repository, where the README, the manual (`docs/src/`) and `config/` are.
const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn run(dir: &Path, args: &[&str]) -> Output {
    let out = Command::new(BIN).args(args).current_dir(dir).output().expect("running rankpulse");
    assert!(
        out.status.success(),
        "rankpulse {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).expect("UTF-8 output")
}

/// `generate` of `count` impressions into `dir` with extra arguments: the two files and what
/// it printed.
fn generate(dir: &Path, count: u64, extra: &[&str]) -> (PathBuf, PathBuf, String) {
    let (imp, eng) = (dir.join("imp.jsonl"), dir.join("eng.jsonl"));
    let count = count.to_string();
    let mut args = vec!["generate", "--impressions", imp.to_str().unwrap(), "--engagements"];
    args.extend([eng.to_str().unwrap(), "--count", &count]);
    args.extend_from_slice(extra);
    let out = run(dir, &args);
    (imp, eng, text(&out.stderr))
}

/// `replay` of two files with extra arguments: what it printed on stdout.
fn replay(dir: &Path, imp: &Path, eng: &Path, extra: &[&str]) -> String {
    let mut args = vec!["replay", "--impressions", imp.to_str().unwrap(), "--engagements", eng.to_str().unwrap()];
    args.extend_from_slice(extra);
    text(&run(dir, &args).stdout)
}

fn demo_config() -> String {
    format!("{ROOT}/config/replay-demo.toml")
}

/// The fenced block starting at line `from` (its opening fence) and the line after its end.
fn fenced_block(lines: &[&str], from: usize) -> (Vec<String>, usize) {
    let end = (from + 1..lines.len()).find(|&i| lines[i].trim_end() == "```").expect("an unterminated code block");
    (lines[from + 1..end].iter().map(|l| l.to_string()).collect(), end + 1)
}

/// Whether `actual` is `shown` with the documentation's elisions: a line `...` stands for one or more
/// lines; every other line must be there exactly, in order, the first first and the last last.
fn matches_with_elisions(shown: &[String], actual: &[&str]) -> Result<(), String> {
    // Runs of shown lines between elisions; each run must appear contiguously, after the last.
    let mut at = 0;
    let runs: Vec<&[String]> = shown.split(|l| l == "...").collect();
    for (n, run) in runs.iter().enumerate() {
        let (first, last) = (n == 0, n == runs.len() - 1);
        let fits = |start: usize| {
            start + run.len() <= actual.len()
                && run.iter().zip(&actual[start..]).all(|(s, a)| s == a)
                && (!last || start + run.len() == actual.len())
        };
        let found = if first {
            fits(0).then_some(0)
        } else if last {
            actual.len().checked_sub(run.len()).filter(|&s| s > at && fits(s))
        } else {
            (at + 1..=actual.len()).find(|&s| fits(s))
        };
        let Some(start) = found else {
            // Where the run comes closest: the first shown line that differs, and the output's.
            let agree = |start: usize| run.iter().zip(&actual[start..]).take_while(|(s, a)| s == a).count();
            let from = if first { 0 } else { at + usize::from(n > 0) };
            let (start, agreed) =
                (from..actual.len()).map(|s| (s, agree(s))).max_by_key(|&(_, a)| a).unwrap_or((at, 0));
            let expected = run.get(agreed).map_or("(the end of the output)", |l| l.as_str());
            let printed = actual.get(start + agreed).copied().unwrap_or("(the end of the output)");
            return Err(format!("the documentation shows {expected:?}\nwhere the output has {printed:?}"));
        };
        at = start + run.len();
    }
    Ok(())
}

#[test]
fn the_readme_replay_example_prints_what_the_readme_shows() {
    example_prints_what_it_shows("README.md", |l| l.contains("cargo run --release -- generate "), 15);
}

#[test]
fn the_manual_replay_example_prints_what_the_manual_shows() {
    example_prints_what_it_shows("docs/src/commands.md", |l| l.contains("cargo run --release -- generate "), 15);
}

#[test]
fn the_manual_judgments_example_prints_what_the_manual_shows() {
    example_prints_what_it_shows(
        "docs/src/judgments.md",
        |l| l.contains("cargo run --release -- generate ") && l.contains("--judgments"),
        18,
    );
}

#[test]
fn the_manual_interleaving_example_prints_what_the_manual_shows() {
    example_prints_what_it_shows(
        "docs/src/interleaving.md",
        |l| l.contains("cargo run --release -- generate ") && l.contains("--interleaving"),
        8,
    );
}

/// Runs the first generate-then-replay example of `file` (README.md or a chapter of the
/// manual) whose generate line `is_example`, and compares what it prints with the output block
/// after it (at least `min_shown` lines).
fn example_prints_what_it_shows(file: &str, is_example: impl Fn(&str) -> bool, min_shown: usize) {
    let doc = std::fs::read_to_string(format!("{ROOT}/{file}")).unwrap();
    let lines: Vec<&str> = doc.lines().collect();
    let start = lines.iter().position(|l| is_example(l)).unwrap_or_else(|| panic!("{file} has a generate example"));
    let fence = (0..start).rev().find(|&i| lines[i].starts_with("```")).unwrap();
    let (commands, after) = fenced_block(&lines, fence);
    let output_fence = (after..lines.len()).find(|&i| lines[i].starts_with("```")).unwrap();
    assert!(
        lines[after..output_fence].iter().all(|l| l.trim().is_empty()),
        "the output block follows the command block directly"
    );
    let (shown, _) = fenced_block(&lines, output_fence);
    assert!(commands.len() == 2 && commands[1].contains("-- replay "), "generate then replay: {commands:?}");

    // The commands verbatim, with the binary under test for `cargo run --release --`, in a
    // directory of their own holding the config they name.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("config")).unwrap();
    for config in std::fs::read_dir(format!("{ROOT}/config")).unwrap() {
        let config = config.unwrap().path();
        if config.extension().is_some_and(|e| e == "toml") {
            std::fs::copy(&config, dir.path().join("config").join(config.file_name().unwrap())).unwrap();
        }
    }
    let mut printed = String::new();
    for command in &commands {
        let args = command.strip_prefix("cargo run --release -- ").expect("each command is a cargo run");
        assert!(!args.contains(['"', '\'', '\\', '$']), "plain words only: {args}");
        let args: Vec<&str> = args.split_whitespace().collect();
        let out = run(dir.path(), &args);
        // What a terminal shows: generate reports on stderr, replay's report is stdout.
        printed.push_str(&text(if args[0] == "generate" { &out.stderr } else { &out.stdout }));
    }
    let actual: Vec<&str> = printed.lines().collect();
    if let Err(e) = matches_with_elisions(&shown, &actual) {
        panic!("{e}\n\nthe whole output:\n{printed}");
    }
    // The shown block is an excerpt, not a guess: much of the output is shown.
    assert!(shown.len() >= min_shown, "{} lines shown", shown.len());
}

#[test]
fn elisions_match_one_or_more_lines_and_nothing_else() {
    let shown = |s: &str| s.lines().map(str::to_string).collect::<Vec<_>>();
    assert!(matches_with_elisions(&shown("a\n...\nd"), &["a", "b", "c", "d"]).is_ok());
    assert!(matches_with_elisions(&shown("a\n...\nc\n...\ne"), &["a", "b", "c", "d", "e"]).is_ok());
    assert!(matches_with_elisions(&shown("a\n...\nd"), &["a", "d"]).is_err(), "... is at least one line");
    assert!(matches_with_elisions(&shown("a\nb"), &["a", "b", "c"]).is_err(), "the last line is last");
    assert!(matches_with_elisions(&shown("b\n...\nc"), &["a", "b", "c"]).is_err(), "the first line is first");
    assert!(matches_with_elisions(&shown("a\n...\nx\n...\nc"), &["a", "b", "c"]).is_err());
    assert!(matches_with_elisions(&shown("a\n..."), &["a", "b"]).is_ok());
}

#[test]
fn generate_writes_malformed_lines_only_when_asked_and_says_how_many() {
    let dir = tempfile::tempdir().unwrap();
    let (imp, eng, said) = generate(dir.path(), 3000, &[]);
    let clean = std::fs::read_to_string(&imp).unwrap();
    assert_eq!(clean.lines().count(), 3000, "the default writes exactly the impressions asked for");
    let engagements = std::fs::read_to_string(&eng).unwrap().lines().count();
    assert_eq!(
        said.trim_end(),
        format!("wrote 3000 impressions to {} and {engagements} engagements to {}", imp.display(), eng.display())
    );
    assert!(clean.lines().all(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["results"].is_array()));

    let (imp, _, said) = generate(dir.path(), 3000, &["--faults", "0.02"]);
    let faulty = std::fs::read_to_string(&imp).unwrap();
    let malformed = faulty.lines().count() - 3000;
    assert!((30..=90).contains(&malformed), "{malformed} malformed lines at 2%");
    assert!(
        said.contains(&format!(
            "wrote 3000 impressions, {malformed} of them followed by a malformed line (--faults 0.02),"
        )),
        "{said}"
    );
    // The same traffic with the malformed lines left out: the rate changes nothing else.
    let valid: Vec<&str> = faulty.lines().filter(|l| clean.contains(&format!("{l}\n"))).collect();
    assert_eq!(valid, clean.lines().collect::<Vec<_>>());

    // Replay counts exactly those lines as rejected.
    let report: serde_json::Value =
        serde_json::from_str(&replay(dir.path(), &imp, &eng, &["--format", "json"])).unwrap();
    assert_eq!(report["events"]["rejected"].as_u64(), Some(malformed as u64));

    for bad in ["1.5", "-1", "NaN", "often"] {
        let out = Command::new(BIN)
            .args(["generate", "--impressions", "i", "--engagements", "e", &format!("--faults={bad}")])
            .current_dir(dir.path())
            .output()
            .unwrap();
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "--faults {bad}: {stderr}");
        let why = stderr.contains("between 0 and 1") || stderr.contains("is not a number");
        assert!(stderr.contains("--faults") && why, "--faults {bad}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

#[test]
fn replay_shows_windows_and_the_curve_only_on_request() {
    let dir = tempfile::tempdir().unwrap();
    let (imp, eng, _) = generate(dir.path(), 4000, &[]);
    let config = demo_config();

    let default = replay(dir.path(), &imp, &eng, &["--config", &config]);
    assert!(default.starts_with("== cumulative ==\n"), "{default}");
    assert!(default.contains("\n== A/B ranker-2026-11 (cumulative, unit client_id) ==\n"), "{default}");
    assert!(!default.contains("windows of"), "no window tables by default:\n{default}");
    assert!(!default.contains("precision-recall curve ==") && !default.contains("iprec@"), "{default}");
    assert!(default.lines().last().unwrap().contains("--windows") && default.contains("--curve"), "{default}");
    assert!(default.lines().count() <= 60, "{} lines:\n{default}", default.lines().count());

    let windows = replay(dir.path(), &imp, &eng, &["--config", &config, "--windows"]);
    for size in ["1m", "5m", "1h"] {
        assert!(windows.contains(&format!(" windows of {size} (newest shown: ")), "{size}:\n{windows}");
    }
    assert!(!windows.contains("precision-recall curve =="), "{windows}");

    let curve = replay(dir.path(), &imp, &eng, &["--config", &config, "--curve"]);
    let at = curve.find("== interpolated precision-recall curve (11 points, cumulative) ==\n").expect(&curve);
    let rows: Vec<&str> = curve[at..].lines().skip(2).take(11).collect();
    let labels: Vec<&str> = rows.iter().map(|r| r.split_whitespace().next().unwrap()).collect();
    assert_eq!(labels, ["0.0", "0.1", "0.2", "0.3", "0.4", "0.5", "0.6", "0.7", "0.8", "0.9", "1.0"]);
    assert!(rows.iter().all(|r| r.split_whitespace().count() > 3), "every row has figures: {rows:?}");
    assert!(!curve.contains("windows of"), "{curve}");

    // JSON always carries everything, whatever the table options.
    let json: serde_json::Value =
        serde_json::from_str(&replay(dir.path(), &imp, &eng, &["--config", &config, "--format", "json"])).unwrap();
    assert!(json["windows"].as_array().is_some_and(|w| !w.is_empty()));
    assert!(json["groups"][0]["metrics"]["iprec@0.5"].is_number());
}

#[test]
fn replay_of_empty_files_prints_no_empty_rows() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    let out = replay(dir.path(), &empty, &empty, &["--windows", "--curve"]);
    for line in out.lines().filter(|l| !l.is_empty()) {
        assert!(
            line.starts_with("==")
                || line == "(no finalized impressions)"
                || line.starts_with("A/B unit: ")
                || line.starts_with("events: 0 impressions")
                || line.starts_with("note: the impressions file has no events")
                || line.starts_with("note: the engagements file has no events")
                || line.starts_with("(more: "),
            "unexpected line {line:?} in:\n{out}"
        );
    }
    assert_eq!(out.matches("(no finalized impressions)").count(), 2, "{out}");
}

#[test]
fn replay_warns_when_the_impression_unit_ignores_client_ids() {
    let dir = tempfile::tempdir().unwrap();
    let (imp, eng, _) = generate(dir.path(), 2000, &[]);
    let with_client = std::fs::read_to_string(&imp).unwrap().lines().filter(|l| l.contains("\"client_id\"")).count();
    assert!(with_client > 1500, "{with_client}");

    let default = replay(dir.path(), &imp, &eng, &[]);
    assert!(default.contains("\nA/B unit: impression (ab.unit)\n"), "{default}");
    let warning = format!("warning: {with_client} impressions carry a client_id, but ab.unit = \"impression\"");
    assert!(default.contains(&warning), "{default}");
    assert!(default.contains("set ab.unit = \"client_id\""), "{default}");
    let json: serde_json::Value = serde_json::from_str(&replay(dir.path(), &imp, &eng, &["--format", "json"])).unwrap();
    assert_eq!(json["ab_unit"]["unit"], "impression");
    assert_eq!(json["ab_unit"]["impressions_with_unused_client_id"].as_u64(), Some(with_client as u64));

    let clustered = replay(dir.path(), &imp, &eng, &["--config", &demo_config()]);
    assert!(clustered.contains("\nA/B unit: client_id (ab.unit)\n"), "{clustered}");
    assert!(!clustered.contains("warning"), "{clustered}");

    // Impressions without a client id give nothing to warn about.
    let plain = dir.path().join("plain.jsonl");
    let stripped: String = std::fs::read_to_string(&imp)
        .unwrap()
        .lines()
        .filter(|l| !l.contains("\"client_id\""))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&plain, stripped).unwrap();
    assert!(!replay(dir.path(), &plain, &eng, &[]).contains("warning"));
}

#[test]
fn every_option_of_every_command_has_help_text() {
    let cli = rankpulse::commands::Cli::command();
    let mut missing = Vec::new();
    for command in cli.get_subcommands() {
        assert!(command.get_about().is_some(), "{} has no description", command.get_name());
        for arg in command.get_arguments().filter(|a| a.get_id() != "help" && a.get_id() != "version") {
            if arg.get_help().is_none() {
                missing.push(format!("{} --{}", command.get_name(), arg.get_id()));
            }
        }
    }
    assert!(missing.is_empty(), "options without help text: {missing:?}");
    let help = text(&run(Path::new(ROOT), &["replay", "--help"]).stdout);
    assert!(help.contains("--windows") && help.contains("--curve"), "{help}");
    let help = text(&run(Path::new(ROOT), &["generate", "--help"]).stdout);
    assert!(help.contains("--faults <FAULTS>") && help.contains("[default: 0]"), "{help}");
}

/// `demo` for `seconds`: its stdout and stderr.
fn demo(seconds: u64, extra: &[&str]) -> (String, String) {
    let listen = format!("127.0.0.1:{}", free_port());
    let child = Command::new(BIN)
        .args(["demo", "--listen", &listen, "--duration", &seconds.to_string()])
        .args(extra)
        .env("RUST_LOG", "info,librdkafka=warn,rdkafka=warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Killed on drop if it does not end by itself; the pipes then close and the readers end.
    struct KillOnDrop(std::process::Child);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut daemon = KillOnDrop(child);
    let read_all = |mut pipe: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            pipe.read_to_string(&mut s).unwrap();
            s
        })
    };
    let out = read_all(Box::new(daemon.0.stdout.take().unwrap()));
    let err = read_all(Box::new(daemon.0.stderr.take().unwrap()));
    let deadline = std::time::Instant::now() + Duration::from_secs(seconds + 60);
    let status = wait_for(deadline, Duration::from_millis(100), "demo did not exit", || daemon.0.try_wait().unwrap());
    let (out, err) = (out.join().unwrap(), err.join().unwrap());
    assert!(status.success(), "demo failed: {out}{err}");
    (out, err)
}

#[test]
fn demo_says_it_injects_faults_and_its_shutdown_log_is_true() {
    // Long enough for one status line (every ten seconds).
    let (out, err) = demo(12, &[]);
    assert!(
        out.contains("injecting faults: 0.001 of impressions") && out.contains("--faults 0 turns this off"),
        "{out}"
    );
    assert!(err.contains("stopping the consumer: final commit"), "no checkpoint store in the demo: {err}");
    assert!(!err.contains("final checkpoint"), "{err}");
    let status: Vec<&str> = out.lines().filter(|l| l.starts_with("pending ")).collect();
    assert!(!status.is_empty(), "{out}");
    assert!(status.iter().all(|l| !l.trim_end().ends_with('|')), "no stray separator: {status:?}");

    let (out, _) = demo(2, &["--faults", "0"]);
    assert!(!out.contains("injecting faults"), "{out}");
}
