//! The deployment files are valid for the tools that read them.

use std::process::Command;

#[test]
fn prometheus_scrape_config_passes_promtool() {
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/prometheus/prometheus.yml");
    let Ok(out) = Command::new("promtool").args(["check", "config", config]).output() else {
        assert!(std::env::var_os("CI").is_none(), "promtool is required in CI (apt-get install prometheus)");
        eprintln!("SKIPPED: promtool not installed");
        return;
    };
    assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
}
