//! A configuration written for an earlier release keeps working: the file 0.1.0 shipped as
//! config/rankpulse.toml (tests/upgrade/rankpulse-0.1.0.toml, byte for byte from that release),
//! with `[state] dir` and `kafka.commit_interval`, which today's schema does not have, is accepted
//! by `check-config` and `serve` with one warning per retired key naming its replacement, and
//! `serve` consumes and exports with it. Unknown keys that never existed are still refused.

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::*;
use rdkafka::mocking::MockCluster;
use serde_json::json;

const OLD: &str = "tests/upgrade/rankpulse-0.1.0.toml";

fn check_config(path: &str, env: &[(&str, &str)]) -> (bool, String, String) {
    let out = Command::new(BIN).args(["check-config", "--config", path]).envs(env.iter().copied()).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

#[test]
fn the_0_1_0_config_is_checked_with_a_warning_per_retired_key() {
    let old = std::fs::read_to_string(repo(OLD)).unwrap();
    assert!(
        old.contains("[state]\n") && old.contains("\ndir = ") && old.contains("\ncommit_interval = "),
        "the fixture is 0.1.0's file"
    );

    let (ok, stdout, stderr) = check_config(repo(OLD).to_str().unwrap(), &[]);
    assert!(ok, "check-config refused 0.1.0's file:\n{stderr}");
    for (old_key, new_key) in
        [("state.dir", "state.changelog_topic"), ("kafka.commit_interval", "state.checkpoint_interval")]
    {
        let line = stderr
            .lines()
            .find(|l| l.contains("WARN") && l.contains(&format!("`{old_key}`")))
            .unwrap_or_else(|| panic!("no warning names {old_key}:\n{stderr}"));
        assert!(line.contains(new_key), "the warning about {old_key} does not name {new_key}: {line}");
    }
    // The effective configuration: the old value in its new place, no retired key.
    let effective: toml::Table =
        toml::from_str(&stdout[stdout.find("[kafka]").unwrap_or(0)..]).unwrap_or_else(|e| panic!("{e}\n{stdout}"));
    assert_eq!(effective["state"]["checkpoint_interval"].as_str(), Some("5s"));
    assert!(effective["state"].get("dir").is_none() && effective["kafka"].get("commit_interval").is_none());

    // The environment overrides of the time are read too.
    let (ok, _, stderr) = check_config(
        repo("config/rankpulse.toml").to_str().unwrap(),
        &[("RANKPULSE__STATE__DIR", "/var/lib/rankpulse"), ("RANKPULSE__KAFKA__COMMIT_INTERVAL", "2s")],
    );
    assert!(
        ok && stderr.contains("`RANKPULSE__STATE__DIR`") && stderr.contains("`RANKPULSE__KAFKA__COMMIT_INTERVAL`"),
        "{stderr}"
    );

    // A key no release ever had is still an error, naming it.
    let dir = tempfile::tempdir().unwrap();
    let typo = dir.path().join("typo.toml");
    std::fs::write(&typo, old.replace("\ndir = ", "\ndirectory = ")).unwrap();
    let (ok, _, stderr) = check_config(typo.to_str().unwrap(), &[]);
    assert!(!ok && stderr.contains("directory"), "{stderr}");
}

#[test]
fn serve_starts_and_counts_with_the_0_1_0_config() {
    let cluster = MockCluster::new(1).unwrap();
    // 0.1.0's topic and group names, unchanged.
    cluster.create_topic("search-impressions", 1, 1).unwrap();
    cluster.create_topic("search-engagements", 1, 1).unwrap();
    create_state_topics(&cluster, "rankpulse", 1);
    let brokers = cluster.bootstrap_servers();
    let now = chrono_now_ms();
    let impressions: Messages = (0..5)
        .map(|i| (0, json!({"query_id": format!("q{i}"), "timestamp": now, "results": ["a", "b"], "experiment": "e", "variant": "v"}).to_string()))
        .collect();
    produce_to_partitions(&brokers, &[("search-impressions", &impressions)]);

    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let daemon = Daemon::spawn_with_env(
        &["serve", "--config", repo(OLD).to_str().unwrap()],
        &[("RANKPULSE__KAFKA__BROKERS", brokers.as_str()), ("RANKPULSE__HTTP__LISTEN", listen.as_str())],
    );
    // Consumed and joined: 0.1.0's 30-minute attribution window holds them pending.
    scrape_until(port, Duration::from_secs(60), |m| m.get("rankpulse_pending_impressions") == Some(&5.0));
    let (status, _, output) = daemon.terminate_with_output(Duration::from_secs(30));
    assert!(status.success(), "{output}");
    assert!(output.contains("`state.dir`") && output.contains("state.changelog_topic"), "{output}");
}

/// Milliseconds since the epoch: the events are stamped now, inside every default limit.
fn chrono_now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}
