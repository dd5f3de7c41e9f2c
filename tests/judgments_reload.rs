//! A judgment list changed on disk while `rankpulse serve` runs (against librdkafka's mock
//! cluster): the new list is picked up without a restart and scores the impressions that come
//! after it; a broken file is refused, the previous list stays in use, and the refusal is
//! logged and counted on `/metrics`. A broken file at start stops the start, naming the file.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::*;
use rdkafka::mocking::MockCluster;
use serde_json::json;

const IMPRESSIONS: &str = "judged-impressions";
const ENGAGEMENTS: &str = "judged-engagements";
const T0: i64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z

fn impression(id: &str, at: i64, query: &str, results: &[&str]) -> (i32, String) {
    let event = json!({"query_id": id, "timestamp": T0 + at, "experiment": "e1", "variant": "control",
                       "query": query, "results": results});
    (0, event.to_string())
}

/// Replaces the judgment file as a deployment would: written aside, then renamed over it.
fn replace(path: &Path, lines: &[serde_json::Value]) {
    let aside = path.with_extension("tmp");
    std::fs::write(&aside, lines.iter().map(|l| format!("{l}\n")).collect::<String>()).unwrap();
    std::fs::rename(&aside, path).unwrap();
}

fn judgment(query: &str, doc: &str, grade: i64) -> serde_json::Value {
    json!({"query": query, "doc_id": doc, "grade": grade})
}

#[test]
fn a_changed_judgment_file_is_used_without_a_restart_and_a_broken_one_keeps_the_list() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic(IMPRESSIONS, 1, 1).unwrap();
    cluster.create_topic(ENGAGEMENTS, 1, 1).unwrap();
    create_state_topics(&cluster, "judged-group", 1);
    let brokers = cluster.bootstrap_servers();
    let dir = tempfile::tempdir().unwrap();
    let judgments = dir.path().join("judgments.jsonl");
    replace(&judgments, &[judgment("red shoes", "a", 0), judgment("red shoes", "b", 2)]);
    let port = free_port();
    let sections = format!(
        r#"
[kafka]
group_id = "judged-group"
impressions_topic = "{IMPRESSIONS}"
engagements_topic = "{ENGAGEMENTS}"
[join]
attribution_window = "1s"
max_out_of_orderness = "0s"
idle_timeout = "1s"
[metrics]
cutoffs = [1, 3]
windows = ["5s"]
[limits]
max_past = "3650d"
[judgments]
file = "{}"
reload_interval = "200ms"
"#,
        judgments.display()
    );
    let cfg = serve_config(dir.path(), "rankpulse", &brokers, port, &sections);
    let daemon = Daemon::spawn(&["serve", "--config", cfg.to_str().unwrap()]);
    let labels = [("experiment", "e1"), ("variant", "control")];
    let judged = series("rankpulse_judged_impressions_total", &labels);
    let sum = |metric: &str| {
        let mut with = labels.to_vec();
        with.push(("metric", metric));
        series("rankpulse_judged_metric_sum", &with)
    };
    let close = |m: &std::collections::BTreeMap<String, f64>, key: &str, want: f64| {
        let got = m.get(key).copied().unwrap_or(f64::NAN);
        assert!((got - want).abs() < 1e-12, "{key}: got {got}, want {want}");
    };

    // The list at start: "b" (grade 2) is the first relevant result at rank 2; "c" is not judged.
    // The other query has no judgments and adds nothing judged.
    produce_to_partitions(
        &brokers,
        &[(
            IMPRESSIONS,
            &[impression("q1", 0, " Red  SHOES", &["a", "b", "c"]), impression("q2", 10, "blue shoes", &["a"])],
        )],
    );
    let (exposition, m) = scrape_until(port, Duration::from_secs(60), |m| m.get(&judged) == Some(&1.0));
    promtool_check(&exposition);
    close(&m, &sum("mrr"), 0.5);
    close(&m, &sum("coverage@1"), 1.0);
    close(&m, &sum("coverage@3"), 2.0 / 3.0);
    // The measures for incomplete judgments: the condensed list is a (0), b (2). bpref: b has
    // the only judged non-relevant document above it, 1 - 1/1; AP'@3 is 1/2.
    close(&m, &sum("bpref"), 0.0);
    close(&m, &sum("map_condensed@3"), 0.5);
    close(&m, "rankpulse_judgments", 2.0);
    close(&m, "rankpulse_judgments_loads_total", 1.0);
    close(&m, "rankpulse_judgments_load_failures_total", 0.0);

    // A new list: "a" now relevant at rank 1, every result judged. Impressions after the swap
    // are scored against it.
    replace(&judgments, &[judgment("red shoes", "a", 3), judgment("red shoes", "b", 2), judgment("red shoes", "c", 1)]);
    scrape_until(port, Duration::from_secs(30), |m| m.get("rankpulse_judgments") == Some(&3.0));
    produce_to_partitions(&brokers, &[(IMPRESSIONS, &[impression("q3", 20, "red shoes", &["a", "b", "c"])])]);
    let (_, m) = scrape_until(port, Duration::from_secs(30), |m| m.get(&judged) == Some(&2.0));
    close(&m, &sum("mrr"), 0.5 + 1.0);
    close(&m, &sum("coverage@3"), 2.0 / 3.0 + 1.0);
    close(&m, &sum("bpref"), 1.0);
    close(&m, &sum("map_condensed@3"), 0.5 + 1.0);
    close(&m, "rankpulse_judgments_loads_total", 2.0);

    // A broken file (another format altogether): refused, reported, the list stays.
    std::fs::write(&judgments, "query,doc,grade\nred shoes,a,0\nred shoes,b,0\n").unwrap();
    let (_, m) =
        scrape_until(port, Duration::from_secs(30), |m| m.get("rankpulse_judgments_load_failures_total") == Some(&1.0));
    close(&m, "rankpulse_judgments", 3.0);
    close(&m, "rankpulse_judgments_loads_total", 2.0);
    produce_to_partitions(&brokers, &[(IMPRESSIONS, &[impression("q4", 30, "red shoes", &["b", "a"])])]);
    let (_, m) = scrape_until(port, Duration::from_secs(30), |m| m.get(&judged) == Some(&3.0));
    close(&m, &sum("mrr"), 0.5 + 1.0 + 1.0);
    let (status, _, output) = daemon.terminate_with_output(Duration::from_secs(30));
    assert!(status.success(), "{output}");
    assert!(
        output.contains("judgment list not reloaded, the previous one stays in use")
            && output.contains("3 of 3 lines rejected"),
        "the refusal is logged with its reason:\n{output}"
    );
    assert!(output.contains("judgment list reloaded"), "{output}");
}

#[test]
fn a_broken_judgment_file_at_start_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let judgments = dir.path().join("judgments.jsonl");
    std::fs::write(&judgments, "{\"query\": \"q\", \"doc_id\": \"d\", \"grade\": 9}\n").unwrap();
    let cfg = dir.path().join("rankpulse.toml");
    std::fs::write(&cfg, format!("[judgments]\nfile = \"{}\"\n", judgments.display())).unwrap();
    for command in ["serve", "check-config"] {
        let out = std::process::Command::new(BIN).args([command, "--config", cfg.to_str().unwrap()]).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{command} must refuse it");
        assert!(
            stderr.contains("judgments.jsonl") && stderr.contains("grade 9 is above the largest allowed grade 3"),
            "{command}: {stderr}"
        );
    }
}
