//! `rankpulse replay` on broken input, through the real binary: every rejected line is named as
//! `file:line` with its reason, where in the line the fault is, and a quote; the report counts
//! rejections per file and reason; a replay that rejects too much of its input fails, with a
//! hint when the input is not JSON Lines at all; a missing file names its OS error once; and a
//! line over `limits.max_message_bytes` is skipped while streaming, never held in memory.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::BIN;
use serde_json::{json, Value};

const HINT: &str = "input must be JSON Lines: one JSON object per line";

/// The impression of line `i`, a second apart, three results.
fn impression(i: u64) -> String {
    format!(
        r#"{{"query_id":"q{i}","timestamp":{},"results":["a","b","c"],"experiment":"e","variant":"v"}}"#,
        1_795_341_600_000 + i * 1000
    )
}

/// A click on the second result of impression `i`.
fn engagement(i: u64) -> String {
    format!(r#"{{"query_id":"q{i}","timestamp":{},"doc_id":"b"}}"#, 1_795_341_600_000 + i * 1000 + 500)
}

fn write(dir: &Path, name: &str, contents: impl AsRef<[u8]>) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path
}

/// Engagements for impressions 1..=n, one a line.
fn engagements(dir: &Path, n: u64) -> PathBuf {
    write(dir, "eng.jsonl", (1..=n).map(|i| engagement(i) + "\n").collect::<String>())
}

/// `rankpulse replay` of the two files with `extra` arguments, warnings logged.
fn replay(impressions: &Path, engagements: &Path, extra: &[&str]) -> Output {
    let mut command = Command::new(BIN);
    command
        .args(["replay", "--impressions", impressions.to_str().unwrap()])
        .args(["--engagements", engagements.to_str().unwrap()])
        .args(extra)
        .env("RUST_LOG", "warn");
    command.output().unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The JSON report on stdout (printed before a failure too).
fn report(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: no report; stderr: {}", stderr(out)))
}

/// The logged rejections of `path`: stderr lines that start (after the log prefix) with it.
fn logged(err: &str, path: &Path) -> Vec<String> {
    let prefix = format!(" {}:", path.display());
    err.lines().filter(|l| l.contains("WARN") && l.contains(&prefix)).map(str::to_string).collect()
}

#[test]
fn a_truncated_line_is_named_by_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let truncated = r#"{"query_id":"q3","timestamp":1795341603000,"results":["a","b""#;
    // Line 2 is blank: lines are counted as an editor counts them.
    let lines = [impression(1), String::new(), impression(2), truncated.to_string(), impression(4)];
    let imp = write(dir.path(), "imp.jsonl", lines.iter().map(|l| format!("{l}\n")).collect::<String>());
    let eng = engagements(dir.path(), 4);
    let offset = lines[..3].iter().map(|l| l.len() + 1).sum::<usize>();

    let out = replay(&imp, &eng, &["--format", "json"]);
    let err = stderr(&out);
    assert!(out.status.success(), "1 of 4 lines rejected is within the default: {err}");
    let expected = format!(
        "{}:4: invalid_json: EOF while parsing a list at column {}, the end of the message; line 4 starts at byte {offset}: \"{{\"query_id\":\"q3\",",
        imp.display(),
        truncated.len()
    );
    assert!(err.contains(&expected), "expected {expected:?} in:\n{err}");
    assert!(!err.contains("line 2 column"), "serde's position within the message leaks out:\n{err}");
    assert_eq!(logged(&err, &imp).len(), 1, "{err}");
    assert!(!err.contains("more rejected lines not shown"), "nothing suppressed:\n{err}");
    let events = &report(&out)["events"];
    assert_eq!(events["rejected"], 1);
    assert_eq!(events["rejected_by_reason"], json!({"impressions": {"invalid_json": 1}, "engagements": {}}));
    assert_eq!(events["impressions_read"], 4, "the blank line is not an event");

    // An absolute limit below that fails, after the report, saying why.
    let out = replay(&imp, &eng, &["--format", "json", "--max-rejects", "0"]);
    let err = stderr(&out);
    assert!(!out.status.success());
    assert_eq!(report(&out)["events"]["rejected"], 1, "the report is printed before the failure");
    let expected = format!(
        "error: too many rejected lines: 1 of 4 lines of {} (invalid_json 1), more than --max-rejects 0; {HINT}",
        imp.display()
    );
    assert!(err.contains(&expected), "expected {expected:?} in:\n{err}");
}

/// Deterministic pseudo-random bytes (xorshift64*).
fn random_bytes(n: usize, mut state: u64) -> Vec<u8> {
    (0..n)
        .map(|_| {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            (state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
        })
        .collect()
}

#[test]
fn a_binary_file_fails_with_the_json_lines_hint_and_every_rejection_counted() {
    let dir = tempfile::tempdir().unwrap();
    let imp = write(dir.path(), "random.bin", random_bytes(200_000, 2026));
    let eng = engagements(dir.path(), 10);

    let out = replay(&imp, &eng, &["--format", "json"]);
    let err = stderr(&out);
    assert!(!out.status.success(), "a binary file must not look like a result:\n{err}");
    let events = &report(&out)["events"];
    let (read, rejected) = (events["impressions_read"].as_u64().unwrap(), events["rejected"].as_u64().unwrap());
    let reasons = events["rejected_by_reason"]["impressions"].as_object().unwrap();
    let not_json = reasons.get("invalid_json").and_then(Value::as_u64).unwrap_or(0)
        + reasons.get("not_an_object").and_then(Value::as_u64).unwrap_or(0);
    eprintln!("random bytes: {rejected} of {read} lines rejected: {reasons:?}");
    assert!(read > 100 && rejected == read && not_json == read, "{events}");
    assert_eq!(events["rejected_by_reason"]["engagements"], json!({}));
    assert!(
        err.contains(&format!("error: too many rejected lines: {read} of {read} lines of {}", imp.display())),
        "{err}"
    );
    assert!(err.contains("more than half of a file (--max-rejects half, the default"), "{err}");
    assert!(err.trim_end().ends_with(HINT), "{err}");
    // The first few are shown, each escaped to one log line; the rest are counted at the end.
    let shown = logged(&err, &imp);
    assert_eq!(shown.len(), 5, "{err}");
    assert!(shown.iter().all(|l| l.contains(": invalid_json: ") || l.contains(": not_an_object: ")), "{err}");
    let more = format!("... and {} more rejected lines not shown", read - 5);
    assert!(err.contains(&more), "expected {more:?} in:\n{err}");

    // `--max-rejects none`: the same report, and success.
    let out = replay(&imp, &eng, &["--format", "json", "--max-rejects", "none"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(report(&out)["events"]["rejected"], rejected);
}

#[test]
fn pretty_printed_json_fails_with_the_json_lines_hint() {
    let dir = tempfile::tempdir().unwrap();
    let events: Vec<Value> = (1..=8).map(|i| serde_json::from_str(&impression(i)).unwrap()).collect();
    let pretty = serde_json::to_string_pretty(&events).unwrap();
    let lines = pretty.lines().count() as u64;
    let imp = write(dir.path(), "imp.json", &pretty);
    let eng = engagements(dir.path(), 8);

    let out = replay(&imp, &eng, &["--format", "json"]);
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    let events = &report(&out)["events"];
    assert_eq!((events["impressions_read"].as_u64(), events["rejected"].as_u64()), (Some(lines), Some(lines)));
    let reasons = events["rejected_by_reason"]["impressions"].as_object().unwrap();
    assert_eq!(reasons.values().map(|n| n.as_u64().unwrap()).sum::<u64>(), lines, "{reasons:?}");
    assert!(reasons.keys().all(|r| r == "invalid_json" || r == "not_an_object"), "{reasons:?}");
    assert!(err.contains(&format!("{lines} of {lines} lines of {}", imp.display())), "{err}");
    assert!(err.trim_end().ends_with(HINT), "{err}");
    // The first line of the file is the array's opening bracket.
    assert!(err.contains(&format!("{}:1: invalid_json: ", imp.display())), "{err}");
}

#[test]
fn empty_files_are_no_error_but_the_summary_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let imp = write(dir.path(), "imp.jsonl", "");
    let eng = engagements(dir.path(), 3);
    let out = replay(&imp, &eng, &[]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(table.contains("note: the impressions file has no events (it is empty or blank)"), "{table}");
    assert!(!table.contains("the engagements file has no events"), "{table}");

    let blank = write(dir.path(), "blank.jsonl", "\n  \n");
    let out = replay(&imp, &blank, &["--format", "json"]);
    assert!(out.status.success(), "0 of 0 lines rejected: {}", stderr(&out));
    let events = &report(&out)["events"];
    assert_eq!((events["impressions_read"].as_u64(), events["engagements_read"].as_u64()), (Some(0), Some(0)));
    assert_eq!(events["rejected_by_reason"], json!({"impressions": {}, "engagements": {}}));
}

#[test]
fn a_missing_file_names_the_path_and_the_os_error_once() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.jsonl");
    let eng = engagements(dir.path(), 1);
    // What the OS says, as the binary will quote it.
    let os_error = std::fs::File::open(&missing).map(|_| ()).unwrap_err().to_string();
    assert!(os_error.contains("os error 2"), "{os_error}");

    let out = replay(&missing, &eng, &[]);
    let err = stderr(&out);
    assert!(!out.status.success());
    assert!(err.contains(&format!("error: cannot read {}: {os_error}\n", missing.display())), "{err}");
    assert_eq!(err.matches(&os_error).count(), 1, "{err}");

    let out = Command::new(BIN).args(["check-config", "--config", missing.to_str().unwrap()]).output().unwrap();
    let err = stderr(&out);
    assert!(!out.status.success());
    assert!(err.contains(&format!("error: cannot read configuration {}: {os_error}\n", missing.display())), "{err}");
    assert_eq!(err.matches(&os_error).count(), 1, "{err}");
}

/// `replay` under a data-size limit (RLIMIT_DATA: heap and private anonymous mappings, counted
/// since Linux 4.7), through `sh -c 'ulimit -d'`.
fn replay_within(data_kib: u64, impressions: &Path, engagements: &Path, config: &Path) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -d {data_kib} && exec \"$0\" \"$@\""))
        .arg(BIN)
        .args(["replay", "--impressions", impressions.to_str().unwrap()])
        .args(["--engagements", engagements.to_str().unwrap(), "--config", config.to_str().unwrap()])
        .args(["--format", "json"])
        .env("RUST_LOG", "warn")
        .output()
        .unwrap()
}

/// Memory a replay of a few lines needs, measured: it runs with 7 MiB of data and not with 6
/// (debug build: the file buffers, the batches in flight, two reader threads' stacks). The
/// limit is three times that; the long line is twice the limit, so holding it cannot succeed.
const DATA_LIMIT_KIB: u64 = 24 * 1024;
const LONG_LINE_BYTES: usize = 48 << 20;

#[test]
fn a_line_over_the_limit_is_skipped_while_streaming_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    // A 1 MiB line with its newline in the middle, and a 48 MiB line without one at the end.
    let long = |n: usize| {
        format!(r#"{{"query_id":"big","timestamp":1795341603000,"results":[{}"x"]}}"#, "\"x\",".repeat(n / 4))
    };
    let mut contents = String::new();
    for line in [impression(1), impression(2), impression(3), long(1 << 20), impression(5)] {
        contents.push_str(&line);
        contents.push('\n');
    }
    contents.push_str(&long(LONG_LINE_BYTES));
    let imp = write(dir.path(), "imp.jsonl", &contents);
    drop(contents);
    let eng = engagements(dir.path(), 5);
    let small = write(dir.path(), "small.toml", "[limits]\nmax_message_bytes = 65536\n");

    let out = replay_within(DATA_LIMIT_KIB, &imp, &eng, &small);
    let err = stderr(&out);
    assert!(out.status.success(), "2 of 6 lines rejected, within the data limit: {err}");
    let events = &report(&out)["events"];
    assert_eq!(events["rejected_by_reason"], json!({"impressions": {"too_large": 2}, "engagements": {}}));
    assert_eq!(events["impressions_read"], 6);
    assert_eq!(report(&out)["groups"][0]["impressions"], 4, "the lines around the long ones are read");
    let sizes = [long(1 << 20).len(), long(LONG_LINE_BYTES).len()];
    for (line, size) in [(4, sizes[0]), (6, sizes[1])] {
        let expected = format!("{}:{line}: too_large: {size} bytes, limits.max_message_bytes is 65536;", imp.display());
        assert!(err.contains(&expected), "expected {expected:?} in:\n{err}");
    }
    assert!(err.contains("\"{\"query_id\":\"big\",\"timestamp\":1795341603000,\"results\":[\"x\","), "a quote: {err}");

    // The control: allowed by the configuration, the long line is read whole, which the same
    // data limit does not allow. So the run above really did not hold it.
    let large = write(dir.path(), "large.toml", "[limits]\nmax_message_bytes = 104857600\n");
    let out = replay_within(DATA_LIMIT_KIB, &imp, &eng, &large);
    let err = stderr(&out);
    assert!(!out.status.success(), "holding a 48 MiB line within {DATA_LIMIT_KIB} KiB of data should fail");
    assert!(err.contains("memory allocation of"), "it fails for want of memory: {err}");
}
