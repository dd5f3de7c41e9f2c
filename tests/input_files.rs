//! The user's own files, through the real binary: `replay` reads Avro object container files of
//! every codec of the Avro specification (as Spark, Kafka Connect and Hive write them, here by
//! Python's fastavro) to the report of the same events as JSON lines, with no schema registry
//! nor local schema configured (the file carries its schema); lines of events the mapping does
//! not list (`unmapped_action`, foreign rather than malformed) are reported but do not fail a
//! replay; and `check-config` prints every field a sample line read under its mapping key, and
//! fails when a sample line is rejected.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::BIN;
use serde_json::Value;

/// Writes the two JSON-lines files as Avro container files with one codec, in the contract's
/// field names (so the native mapping reads them), the optional fields as unions with null.
const TO_CONTAINER: &str = r#"
import json, sys, fastavro
impressions, engagements, codec, out = sys.argv[1:5]
optional = lambda name, kind: {"name": name, "type": ["null", kind], "default": None}
schemas = {
    "impressions": {"type": "record", "name": "Impression", "fields": [
        {"name": "query_id", "type": "string"}, {"name": "timestamp", "type": "long"},
        {"name": "results", "type": {"type": "array", "items": "string"}},
        optional("experiment", "string"), optional("variant", "string"),
        optional("client_id", "string"), optional("session_id", "string")]},
    "engagements": {"type": "record", "name": "Engagement", "fields": [
        {"name": "query_id", "type": "string"}, {"name": "timestamp", "type": "long"},
        {"name": "doc_id", "type": "string"}, optional("action", "string"),
        optional("position", "int"), optional("event_id", "string")]},
}
for name, path in (("impressions", impressions), ("engagements", engagements)):
    records = [json.loads(line) for line in open(path)]
    with open(f"{out}/{name}-{codec}.avro", "wb") as f:
        fastavro.writer(f, fastavro.parse_schema(schemas[name]), records, codec=codec)
"#;

/// Every codec of the Avro specification 1.12 ("Required Codecs" and "Optional Codecs").
const CODECS: [&str; 6] = ["null", "deflate", "snappy", "zstandard", "bzip2", "xz"];

/// fastavro with the codecs' Python libraries (cramjam for snappy, backports.zstd for
/// zstandard: tests/your_events/requirements.txt); outside CI a machine without them skips the
/// Avro tests, saying so.
fn fastavro_with_codecs() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import fastavro, cramjam, lzma, bz2\ntry:\n import compression.zstd\nexcept ImportError:\n import backports.zstd"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "fastavro and its codecs are required in CI (tests/run.sh installs them)"
        );
        eprintln!("SKIPPED: python3 with fastavro, cramjam and backports.zstd is not installed");
    }
    ok
}

fn write(dir: &Path, name: &str, contents: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path
}

fn replay(impressions: &Path, engagements: &Path, config: Option<&Path>) -> Output {
    let mut command = Command::new(BIN);
    command.args(["replay", "--impressions", impressions.to_str().unwrap(), "--engagements"]).args([
        engagements.to_str().unwrap(),
        "--format",
        "json",
    ]);
    if let Some(config) = config {
        command.args(["--config", config.to_str().unwrap()]);
    }
    command.output().unwrap()
}

fn report(out: &Output) -> Value {
    assert!(out.status.success(), "replay failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Generated A/B traffic as JSON lines in `dir`.
fn generated(dir: &Path, count: u64) -> (PathBuf, PathBuf) {
    let (impressions, engagements) = (dir.join("imp.jsonl"), dir.join("eng.jsonl"));
    let out = Command::new(BIN)
        .args(["generate", "--count", &count.to_string(), "--seed", "52", "--start", "2026-11-20T10:00:00Z"])
        .args(["--impressions", impressions.to_str().unwrap(), "--engagements", engagements.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    (impressions, engagements)
}

fn containers(dir: &Path, impressions: &Path, engagements: &Path, codec: &str) -> (PathBuf, PathBuf) {
    let out = Command::new("python3")
        .args(["-c", TO_CONTAINER, impressions.to_str().unwrap(), engagements.to_str().unwrap(), codec])
        .arg(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "fastavro, {codec}: {}", String::from_utf8_lossy(&out.stderr));
    (dir.join(format!("impressions-{codec}.avro")), dir.join(format!("engagements-{codec}.avro")))
}

/// The example configuration's way in: `config/examples/avro.toml` names a registry, which a
/// replay of container files never asks (none listens at this address).
const AVRO_WITH_REGISTRY: &str = "[kafka]\nimpressions_format = \"avro\"\nengagements_format = \"avro\"\n\
                                  [schema_registry]\nurl = \"http://127.0.0.1:9\"\n";

#[test]
fn container_files_of_every_codec_replay_to_the_json_lines_report() {
    if !fastavro_with_codecs() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (impressions, engagements) = generated(dir.path(), 1500);
    let native = report(&replay(&impressions, &engagements, None));
    assert!(native["groups"].as_array().is_some_and(|g| g.len() >= 2), "{native}");
    assert_eq!(native["events"]["rejected"], 0, "{}", native["events"]);
    let config = write(dir.path(), "avro.toml", AVRO_WITH_REGISTRY);
    for codec in CODECS {
        let (imp, eng) = containers(dir.path(), &impressions, &engagements, codec);
        let got = report(&replay(&imp, &eng, Some(&config)));
        assert_eq!(got, native, "replay of the {codec} container files");
    }
}

#[test]
fn a_container_file_replays_with_no_schema_source() {
    if !fastavro_with_codecs() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (impressions, engagements) = generated(dir.path(), 300);
    let native = report(&replay(&impressions, &engagements, None));
    let (imp, eng) = containers(dir.path(), &impressions, &engagements, "deflate");
    let config =
        write(dir.path(), "avro.toml", "[kafka]\nimpressions_format = \"avro\"\nengagements_format = \"avro\"\n");
    assert_eq!(report(&replay(&imp, &eng, Some(&config))), native);
    // `serve` reads Confluent's wire format, whose schema ids need a registry: still demanded.
    let out = Command::new(BIN).args(["check-config", "--config", config.to_str().unwrap()]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("`kafka.impressions_format`: avro needs schemas: set schema_registry.url"), "{err}");
}

/// Algolia-style Insights events on one stream: a view of every result shown, a click on some.
/// Views are no rankpulse action, so the mapping's `actions` leaves them out.
const INSIGHTS: &str = r#"
[mapping.engagements]
query_id = "/queryID"
timestamp = { path = "/timestamp", format = "epoch_millis" }
doc_id = "/objectIDs/0"
action = "/eventType"
actions = { click = "click", conversion = "purchase" }
"#;

#[test]
fn foreign_lines_do_not_fail_a_replay_but_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = 1_795_341_600_000u64;
    let mut impressions = String::new();
    let mut engagements = String::new();
    for i in 0..100u64 {
        let t = t0 + i * 1000;
        impressions.push_str(&format!(
            "{{\"query_id\":\"q{i}\",\"timestamp\":{t},\"results\":[\"a\",\"b\",\"c\"],\"experiment\":\"e\",\"variant\":\"v{}\"}}\n",
            i % 2
        ));
        // 57% of the engagement lines are views.
        let views = if i < 71 { 2 } else { 1 };
        for v in 0..views {
            engagements.push_str(&format!(
                "{{\"queryID\":\"q{i}\",\"timestamp\":{},\"objectIDs\":[\"{}\"],\"eventType\":\"view\"}}\n",
                t + 100 + v,
                ["a", "b"][v as usize]
            ));
        }
        engagements.push_str(&format!(
            "{{\"queryID\":\"q{i}\",\"timestamp\":{},\"objectIDs\":[\"b\"],\"eventType\":\"click\"}}\n",
            t + 500
        ));
    }
    let (imp, eng) = (write(dir.path(), "imp.jsonl", &impressions), write(dir.path(), "eng.jsonl", &engagements));
    let config = write(dir.path(), "insights.toml", INSIGHTS);
    let lines = engagements.lines().count() as f64;
    let views = engagements.matches("\"view\"").count() as f64;
    assert!(views / lines > 0.5, "{views} of {lines}");

    let out = replay(&imp, &eng, Some(&config));
    let got = report(&out);
    assert_eq!(got["events"]["rejected_by_reason"]["engagements"]["unmapped_action"], views, "{}", got["events"]);
    assert_eq!(got["events"]["engagements_attributed"].as_f64(), Some(100.0), "{}", got["events"]);
    // A malformed line still counts against the budget, the foreign ones do not.
    let out = Command::new(BIN)
        .args(["replay", "--impressions", imp.to_str().unwrap(), "--engagements", eng.to_str().unwrap()])
        .args(["--config", config.to_str().unwrap(), "--format", "json", "--max-rejects", "0"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let broken = write(dir.path(), "broken.jsonl", &(engagements.clone() + "{\"queryID\":\"q1\"}\n"));
    let out = Command::new(BIN)
        .args(["replay", "--impressions", imp.to_str().unwrap(), "--engagements", broken.to_str().unwrap()])
        .args(["--config", config.to_str().unwrap(), "--format", "json", "--max-rejects", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("too many rejected lines: 1 of "), "{err}");
    assert!(err.contains("(missing_field 1), more than --max-rejects 0"), "{err}");
}

/// `check-config` of `config` with sample files: its status and what it printed.
fn check_config(
    config: &Path,
    impressions: Option<&Path>,
    engagements: Option<&Path>,
) -> (Option<i32>, String, String) {
    let mut command = Command::new(BIN);
    command.args(["check-config", "--config", config.to_str().unwrap(), "--lines", "100"]);
    if let Some(path) = impressions {
        command.args(["--impressions", path.to_str().unwrap()]);
    }
    if let Some(path) = engagements {
        command.args(["--engagements", path.to_str().unwrap()]);
    }
    let out = command.output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The sample lines `check-config` printed, as JSON.
fn sample_lines(stdout: &str) -> Vec<Value> {
    stdout.lines().filter(|l| l.starts_with("{\"line\":")).map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn check_config_prints_every_impression_field_under_its_mapping_key() {
    let dir = tempfile::tempdir().unwrap();
    let native = write(
        dir.path(),
        "native.jsonl",
        concat!(
            r#"{"query_id":"q1","timestamp":1795341600000,"results":["a","b","c"],"segment":"mobile","interleaving":["base","new"],"teams":["new","base","new"]}"#,
            "\n"
        ),
    );
    let defaults = write(dir.path(), "defaults.toml", "");
    let (code, stdout, stderr) = check_config(&defaults, Some(&native), None);
    assert_eq!(code, Some(0), "{stderr}");
    let line = &sample_lines(&stdout)[0];
    assert_eq!(line["segment"], "mobile", "{line}");
    assert_eq!(line["interleaving"], serde_json::json!(["base", "new"]), "{line}");
    assert_eq!(line["teams"], serde_json::json!(["new", "base", "new"]), "{line}");
    assert!(line.get("rankers").is_none(), "`rankers` is no field nor mapping key: {line}");

    // The same through a mapping of other names: every mapping key is a key of the printout.
    let mapped = write(
        dir.path(),
        "mapped.jsonl",
        concat!(
            r#"{"id":"q1","at":1795341600000,"hits":["a","b","c"],"device":"tablet","arms":["base","new"],"from":["base","base","new"]}"#,
            "\n"
        ),
    );
    let mapping = write(
        dir.path(),
        "mapping.toml",
        r#"
[mapping.impressions]
query_id = "/id"
timestamp = { path = "/at", format = "epoch_millis" }
results = "/hits/*"
segment = "/device"
interleaving = "/arms/*"
teams = "/from/*"
"#,
    );
    let (code, stdout, stderr) = check_config(&mapping, Some(&mapped), None);
    assert_eq!(code, Some(0), "{stderr}");
    let line = &sample_lines(&stdout)[0];
    assert_eq!(line["segment"], "tablet", "{line}");
    assert_eq!(line["interleaving"], serde_json::json!(["base", "new"]), "{line}");
    assert_eq!(line["teams"], serde_json::json!(["base", "base", "new"]), "{line}");
    let shown = toml::from_str::<toml::Table>(&stdout[..stdout.find("\n# impressions sample").unwrap()]).unwrap();
    for key in shown["mapping"]["impressions"].as_table().unwrap().keys() {
        assert!(line.get(key).is_some(), "mapping key {key} is not printed: {line}");
    }
}

#[test]
fn check_config_fails_when_a_sample_line_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(dir.path(), "insights.toml", INSIGHTS);
    let good = r#"{"queryID":"q1","timestamp":1795341600000,"objectIDs":["a"],"eventType":"click"}"#;
    let view = r#"{"queryID":"q1","timestamp":1795341600000,"objectIDs":["a"],"eventType":"view"}"#;
    // A mapping that reads nothing of these events: every line rejected, and a CI gate fails.
    let other_shape = write(dir.path(), "other.jsonl", "{\"query_id\":\"q1\",\"doc_id\":\"a\"}\n".repeat(3).as_str());
    let (code, stdout, stderr) = check_config(&config, None, Some(&other_shape));
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(stdout.contains("# engagements: 0 decoded, 3 rejected (missing_field 3)"), "{stdout}");
    assert!(stderr.contains("sample lines rejected: 3 of 3 lines of"), "{stderr}");
    // One bad line of many is enough.
    let one_bad = write(dir.path(), "one-bad.jsonl", &format!("{good}\n{good}\n{{\"queryID\":\"q2\"}}\n"));
    let (code, _, stderr) = check_config(&config, None, Some(&one_bad));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("sample lines rejected: 1 of 3 lines of"), "{stderr}");
    // Foreign lines (views the mapping does not list) are counted, and fail nothing.
    let with_views = write(dir.path(), "views.jsonl", &format!("{good}\n{view}\n{view}\n"));
    let (code, stdout, stderr) = check_config(&config, None, Some(&with_views));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("# engagements: 1 decoded, 2 rejected (unmapped_action 2)"), "{stdout}");
}
