//! The deployment files are valid for the tools that read them: `promtool check config`,
//! `promtool check rules` and `promtool test rules` on deploy/prometheus/.
//!
//! promtool comes with Debian's `prometheus` package, which the README's test command
//! (tests/run.sh) installs when it is missing; without it these tests fail rather than skip.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn deploy(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy").join(path)
}

/// Runs promtool, failing with a clear message when it is not installed.
fn promtool(args: &[&str], dir: &Path) -> Output {
    Command::new("promtool").args(args).current_dir(dir).output().unwrap_or_else(|e| {
        panic!("cannot run promtool ({e}): install Debian's `prometheus` package (bash tests/run.sh does)")
    })
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// Every file in `dir` whose name ends with `suffix`, sorted.
fn files(dir: &Path, suffix: &str) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(suffix))
        .collect();
    out.sort();
    out
}

#[test]
fn prometheus_config_passes_promtool_check_config() {
    let out = promtool(&["check", "config", "prometheus.yml"], &deploy("prometheus"));
    let text = text(&out);
    assert!(out.status.success(), "{text}");
    // The config loads both rule files, so `check config` checked them too.
    assert!(text.contains("2 rule files found"), "{text}");
}

#[test]
fn rule_files_pass_promtool_check_rules() {
    let dir = deploy("prometheus/rules");
    let rules = files(&dir, ".yml");
    assert_eq!(rules, ["rankpulse-alerts.yml", "rankpulse-recording.yml"]);
    let args: Vec<&str> = ["check", "rules"].into_iter().chain(rules.iter().map(String::as_str)).collect();
    let out = promtool(&args, &dir);
    assert!(out.status.success(), "{}", text(&out));
}

#[test]
fn rule_unit_tests_pass_promtool_test_rules() {
    let dir = deploy("prometheus/tests");
    let tests = files(&dir, ".test.yml");
    assert!(tests.len() >= 4, "{tests:?}");
    let args: Vec<&str> = ["test", "rules"].into_iter().chain(tests.iter().map(String::as_str)).collect();
    let out = promtool(&args, &dir);
    let text = text(&out);
    assert!(out.status.success(), "{text}");
    assert_eq!(text.matches("SUCCESS").count(), tests.len(), "{text}");
}

/// Every rule (recording and alerting) has a unit test: its name appears in a test file.
#[test]
fn every_rule_is_unit_tested() {
    let tests: String = files(&deploy("prometheus/tests"), ".test.yml")
        .iter()
        .map(|f| std::fs::read_to_string(deploy("prometheus/tests").join(f)).unwrap())
        .collect();
    let mut untested = Vec::new();
    let mut rules = 0;
    for file in ["rankpulse-recording.yml", "rankpulse-alerts.yml"] {
        let text = std::fs::read_to_string(deploy("prometheus/rules").join(file)).unwrap();
        for line in text.lines().map(str::trim) {
            let name = line.strip_prefix("- record: ").or_else(|| line.strip_prefix("- alert: "));
            let Some(name) = name else { continue };
            rules += 1;
            // Constants (thresholds) are tested through the alerts that use them.
            let used_by_a_tested_rule = name.starts_with("rankpulse:alert_");
            if !used_by_a_tested_rule && !tests.contains(name) {
                untested.push(name.to_string());
            }
        }
    }
    assert!(rules >= 50, "only {rules} rules found");
    assert!(untested.is_empty(), "rules without a promtool test: {untested:?}");
}
