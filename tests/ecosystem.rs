//! The shipped Prometheus configuration, rules and Grafana dashboard against a real Prometheus
//! server scraping `rankpulse demo`.
//!
//! A real `prometheus` (Debian's package; tests/run.sh installs it when missing, and without it
//! this test fails rather than skips) scrapes the demo with deploy/prometheus/prometheus.yml and
//! loads deploy/prometheus/rules/. Then, through Prometheus's HTTP API:
//! - every loaded rule is healthy (evaluated without error);
//! - every recording rule's expression and recorded series returns data;
//! - every alerting rule's expression evaluates, and every series it reads (raw or recorded)
//!   exists, so an alert on a misspelt or missing metric fails here even while it is not firing;
//! - every variable of deploy/grafana/dashboards/rankpulse.json resolves to values, and every
//!   panel query, with the variables substituted as Grafana would, returns at least one series;
//! - every query of the manual's PromQL cookbook (docs/src/promql.md) evaluates, and returns data unless it looks a
//!   day back (`offset 1d`: no such history here);
//! - the live `/metrics` passes `promtool check metrics`;
//! - the PromQL query the demo prints gives one series per experiment and variant.
//!
//! Starting Prometheus and asking its API are tests/common/prometheus.rs's, shared with
//! tests/http_security.rs (Prometheus scraping over TLS with basic auth).

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// Metric names a PromQL expression reads: identifiers outside strings and label matchers that
/// name rankpulse series or `up`, not followed by `(` (functions and aggregations are).
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut cleaned = String::new();
    let (mut in_string, mut in_braces) = (false, false);
    for c in expr.chars() {
        if in_string {
            in_string = c != '"';
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' => in_braces = true,
            '}' => {
                in_braces = false;
                cleaned.push(' ');
            }
            _ if in_braces => {}
            _ => cleaned.push(c),
        }
    }
    let chars: Vec<char> = cleaned.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i].is_ascii_alphabetic() || chars[i] == '_' || chars[i] == ':' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':') {
                i += 1;
            }
            let name: String = chars[start..i].iter().collect();
            let next = chars[i..].iter().find(|c| !c.is_whitespace());
            if (name.contains("rankpulse") || name == "up") && next != Some(&'(') {
                names.insert(name);
            }
        } else if chars[i].is_ascii_digit() {
            // Numbers and durations (10m, 0.10).
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
        } else {
            i += 1;
        }
    }
    names
}

/// The queries of the manual's PromQL cookbook (docs/src/promql.md): the first `promql` block
/// of its "PromQL cookbook" section, one query per run of lines that are neither blank nor
/// comments.
fn cookbook_queries() -> Vec<String> {
    let page = std::fs::read_to_string(repo("docs/src/promql.md")).unwrap();
    let section = page.split_once("\n## PromQL cookbook\n").expect("docs/src/promql.md has a PromQL cookbook").1;
    let block = section.split_once("```promql\n").unwrap().1.split_once("```").unwrap().0;
    let mut queries = Vec::new();
    let mut current = String::new();
    for line in block.lines() {
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            if !current.is_empty() {
                queries.push(std::mem::take(&mut current));
            }
        } else {
            current.push_str(line);
            current.push('\n');
        }
    }
    if !current.is_empty() {
        queries.push(current);
    }
    queries
}

/// A cookbook query's outcome: an error, or whether it may legitimately be empty.
fn check_cookbook_query(port: u16, expr: &str, failed_scrapes: &mut Vec<String>) -> Result<(), String> {
    match query_past_failed_scrapes(port, expr, failed_scrapes) {
        Err(e) => Err(format!("cookbook query {expr}: {e}")),
        Ok(0) if !expr.contains("offset") => Err(format!("cookbook query returned nothing: {expr}")),
        Ok(_) => Ok(()),
    }
}

/// A loaded rule: its kind ("recording" or "alerting"), name, expression and health.
#[derive(Debug)]
struct Rule {
    kind: String,
    name: String,
    expr: String,
    health: String,
    error: String,
}

fn loaded_rules(port: u16) -> Vec<Rule> {
    let data = api(port, "/api/v1/rules").unwrap();
    let mut rules = Vec::new();
    for group in data["groups"].as_array().unwrap() {
        for r in group["rules"].as_array().unwrap() {
            rules.push(Rule {
                kind: r["type"].as_str().unwrap().to_string(),
                name: r["name"].as_str().unwrap().to_string(),
                expr: r["query"].as_str().unwrap().to_string(),
                health: r["health"].as_str().unwrap_or("").to_string(),
                error: r["lastError"].as_str().unwrap_or("").to_string(),
            });
        }
    }
    rules
}

/// The dashboard's variables resolved as Grafana would on load, by variable name: each
/// alternative value to try (the custom `window` variable has several, every other one one).
fn resolve_variables(port: u16, dashboard: &Value) -> Result<BTreeMap<String, Vec<String>>, String> {
    let mut values: BTreeMap<String, Vec<String>> = BTreeMap::new();
    // Grafana's built-ins, as they are for a 6-hour range on a 1-second scrape interval.
    values.insert("__rate_interval".into(), vec!["1m".into()]);
    values.insert("__interval".into(), vec!["15s".into()]);
    values.insert("__range".into(), vec!["6h".into()]);
    for var in dashboard["templating"]["list"].as_array().ok_or("no templating list")? {
        let name = var["name"].as_str().ok_or("a variable without a name")?.to_string();
        let current = &var["current"]["value"];
        match var["type"].as_str().unwrap_or_default() {
            "datasource" if var["query"] == "prometheus" => {
                values.insert(name, vec!["prometheus".into()]);
            }
            "custom" => {
                let options: Vec<String> =
                    var["query"].as_str().unwrap_or_default().split(',').map(|o| o.trim().to_string()).collect();
                if !current.as_str().is_some_and(|c| options.iter().any(|o| o == c)) {
                    return Err(format!("variable {name}: default {current} is not among {options:?}"));
                }
                values.insert(name, options);
            }
            "query" => {
                let text = var["definition"].as_str().unwrap_or_default();
                if var["query"]["query"] != text {
                    return Err(format!("variable {name}: definition and query differ"));
                }
                let (selector, label) = text
                    .strip_prefix("label_values(")
                    .and_then(|t| t.strip_suffix(')'))
                    .and_then(|t| t.rsplit_once(','))
                    .ok_or_else(|| format!("variable {name}: expected label_values(selector, label), got {text}"))?;
                let selector = substitute(selector.trim(), &values, &BTreeMap::new());
                let path = format!("/api/v1/label/{}/values?match[]={}", label.trim(), encode(&selector));
                let found: Vec<String> = api(port, &path)?
                    .as_array()
                    .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
                    .unwrap_or_default();
                if found.is_empty() {
                    return Err(format!("variable {name} ({text}, as {selector}) has no values"));
                }
                let chosen = if var["includeAll"] == true && current[0] == "$__all" {
                    // "All": Grafana's regex alternation of every value.
                    let escaped: Vec<String> = found.iter().map(|v| regex_escape(v)).collect();
                    format!("({})", escaped.join("|"))
                } else {
                    let current = current.as_str().unwrap_or_default().to_string();
                    if !found.contains(&current) {
                        return Err(format!("variable {name}: default {current:?} is not among {found:?}"));
                    }
                    current
                };
                values.insert(name, vec![chosen]);
            }
            other => return Err(format!("variable {name}: unexpected type {other} ({var})")),
        }
    }
    Ok(values)
}

fn regex_escape(value: &str) -> String {
    value.chars().flat_map(|c| if "\\.+*?()|[]{}^$".contains(c) { vec!['\\', c] } else { vec![c] }).collect()
}

/// `$name` and `${name}` replaced, longest names first; `choice` picks among alternatives.
fn substitute(expr: &str, values: &BTreeMap<String, Vec<String>>, choice: &BTreeMap<String, usize>) -> String {
    let mut names: Vec<&String> = values.keys().collect();
    names.sort_by_key(|n| std::cmp::Reverse(n.len()));
    let mut out = expr.to_string();
    for name in names {
        let value = &values[name][choice.get(name).copied().unwrap_or(0)];
        out = out.replace(&format!("${{{name}}}"), value).replace(&format!("${name}"), value);
    }
    out
}

/// Every panel target of the dashboard: (panel title, expression), after structural checks.
fn dashboard_targets(dashboard: &Value) -> Vec<(String, String)> {
    assert!(dashboard["schemaVersion"].as_u64().unwrap() >= 38);
    assert!(dashboard["uid"].as_str().is_some_and(|u| !u.is_empty() && u.len() <= 40));
    assert!(dashboard["id"].is_null(), "a provisionable dashboard has no fixed id");
    let names: BTreeSet<&str> =
        dashboard["templating"]["list"].as_array().unwrap().iter().map(|v| v["name"].as_str().unwrap()).collect();
    for required in ["datasource", "experiment", "variant", "k"] {
        assert!(names.contains(required), "dashboard variable {required} missing");
    }
    let mut ids = BTreeSet::new();
    let mut targets = Vec::new();
    let mut rows = 0;
    for panel in dashboard["panels"].as_array().unwrap() {
        let title = panel["title"].as_str().unwrap().to_string();
        assert!(ids.insert(panel["id"].as_u64().unwrap()), "duplicate panel id in {title}");
        let pos = &panel["gridPos"];
        assert!(pos["x"].as_u64().unwrap() + pos["w"].as_u64().unwrap() <= 24, "{title} is wider than the grid");
        if panel["type"] == "row" {
            rows += 1;
            continue;
        }
        assert_eq!(panel["datasource"]["uid"], "${datasource}", "{title} must use the datasource variable");
        let panel_targets = panel["targets"].as_array().unwrap();
        assert!(!panel_targets.is_empty(), "{title} has no query");
        for t in panel_targets {
            assert_eq!(t["datasource"]["uid"], "${datasource}", "{title}");
            targets.push((title.clone(), t["expr"].as_str().unwrap().to_string()));
        }
    }
    assert!(rows >= 3, "rows: quality by variant, treatment minus control, pipeline health");
    targets
}

/// Series an alert reads that the demo cannot have, with where they are checked instead.
const NOT_IN_THE_DEMO: [(&str, &str); 1] = [(
    "rankpulse_schema_registry_up",
    "exported only with a [schema_registry] (the demo's events are JSON): tests/your_events.rs scrapes it, and the alert's promtool test fires it",
)];

#[test]
fn shipped_rules_and_dashboard_work_against_a_real_prometheus() {
    require_tool("prometheus");
    require_tool("promtool");
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let demo_port = free_port();
    let demo = Daemon::spawn(&["demo", "--listen", &format!("127.0.0.1:{demo_port}"), "--duration", "400"]);
    // Scrapes every 2 s, so with a 2-s timeout: the demo's 648 KB exposition takes about 0.1 s on
    // an idle machine, but beside the rest of the suite on 2 cores CI saw scrapes past 1 s time
    // out (each stales every series until the next; see `query_past_failed_scrapes`).
    let config = shipped_prometheus_config(&format!("127.0.0.1:{demo_port}"));
    let config = config.replacen("scrape_interval: 1s", "scrape_interval: 2s", 1);
    let prometheus = start_prometheus(dir.path(), &config);
    let port = prometheus.port;
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(repo("deploy/grafana/dashboards/rankpulse.json")).unwrap())
            .expect("the dashboard is valid JSON");
    let targets = dashboard_targets(&dashboard);
    let cookbook = cookbook_queries();
    assert!(cookbook.len() >= 10, "{cookbook:?}");

    // Wait until every recorded series, every series an alert reads and every panel has data:
    // the demo finalizes its first impressions seconds after start (its topics start with the
    // minute of traffic before it), and its first 1-minute window closes within about a minute.
    let deadline = started + Duration::from_secs(170);
    let mut failed_scrapes = Vec::new();
    let missing = loop {
        let rules = loaded_rules(port);
        let mut missing: Vec<String> = Vec::new();
        for rule in &rules {
            let names: Vec<String> = match rule.kind.as_str() {
                "recording" => vec![rule.name.clone()],
                _ => metric_names(&rule.expr).into_iter().collect(),
            };
            for name in names {
                if NOT_IN_THE_DEMO.iter().any(|(series, _)| *series == name) {
                    continue;
                }
                if query(port, &name).unwrap_or(0) == 0 {
                    missing.push(format!("series {name} (rule {})", rule.name));
                }
            }
        }
        if missing.is_empty() {
            match resolve_variables(port, &dashboard) {
                Err(e) => missing.push(e),
                Ok(values) => {
                    for (title, expr) in &targets {
                        for choice in choices(&values) {
                            let expr = substitute(expr, &values, &choice);
                            if query(port, &expr).unwrap_or(0) == 0 {
                                missing.push(format!("panel {title}: {expr}"));
                            }
                        }
                    }
                }
            }
        }
        missing.extend(cookbook.iter().filter_map(|q| check_cookbook_query(port, q, &mut failed_scrapes).err()));
        if missing.is_empty() || Instant::now() > deadline {
            break missing;
        }
        std::thread::sleep(Duration::from_secs(2));
    };
    let waited = started.elapsed();
    if !missing.is_empty() {
        let targets = api(port, "/api/v1/targets").map(|t| t["activeTargets"].to_string());
        let demo_alive = http10_get(demo_port, "/healthz").map(|r| r.0);
        panic!(
            "no data after {waited:?} for:\n{}\nscrape targets: {targets:?}\ndemo /healthz: {demo_alive:?}",
            missing.join("\n")
        );
    }

    // Rules: all healthy, every expression evaluates, recording ones to data.
    let rules = loaded_rules(port);
    let (mut recording, mut alerting, mut alert_series) = (0, 0, BTreeSet::new());
    for rule in &rules {
        assert_eq!(rule.health, "ok", "rule {} is {}: {}", rule.name, rule.health, rule.error);
        let result = query(port, &rule.expr);
        match rule.kind.as_str() {
            "recording" => {
                recording += 1;
                assert!(result.as_ref().is_ok_and(|n| *n > 0), "recording rule {}: {result:?}", rule.name);
                let n = query_past_failed_scrapes(port, &rule.name, &mut failed_scrapes).unwrap();
                assert!(n > 0, "recorded series {} is empty", rule.name);
            }
            "alerting" => {
                alerting += 1;
                assert!(result.is_ok(), "alert {}: {result:?}", rule.name);
                let names = metric_names(&rule.expr);
                assert!(!names.is_empty(), "alert {} reads no series?", rule.name);
                alert_series.extend(names);
            }
            other => panic!("unexpected rule type {other}"),
        }
    }
    let shipped = |file: &str, prefix: &str| {
        std::fs::read_to_string(repo("deploy/prometheus/rules").join(file))
            .unwrap()
            .lines()
            .filter(|l| l.trim_start().starts_with(prefix))
            .count()
    };
    let shipped_recording =
        shipped("rankpulse-recording.yml", "- record:") + shipped("rankpulse-alerts.yml", "- record:");
    assert_eq!(recording, shipped_recording, "every shipped recording rule is loaded");
    assert_eq!(alerting, shipped("rankpulse-alerts.yml", "- alert:"), "every shipped alert is loaded");

    // Panels: every query with every alternative of the variables, at least one series each.
    let values = resolve_variables(port, &dashboard).unwrap();
    let mut panel_queries = 0;
    let mut panel_series = 0;
    for (title, expr) in &targets {
        for choice in choices(&values) {
            let expr = substitute(expr, &values, &choice);
            assert!(!expr.contains('$'), "panel {title}: unresolved variable in {expr}");
            let n = query_past_failed_scrapes(port, &expr, &mut failed_scrapes)
                .unwrap_or_else(|e| panic!("panel {title}: {expr}: {e}"));
            assert!(n > 0, "panel {title}: {expr} returned no series");
            panel_queries += 1;
            panel_series += n;
        }
    }

    for q in &cookbook {
        check_cookbook_query(port, q, &mut failed_scrapes).unwrap();
    }

    // The query the demo prints: one series per experiment and variant, so the two experiments
    // with a `control` are two series, not one mixing them.
    let output = demo.output();
    let printed = output.lines().find_map(|l| l.split_once("in PromQL: ")).expect("the demo prints a query").1.trim();
    let data = api(port, &format!("/api/v1/query?query={}", encode(printed))).unwrap();
    let pairs: Vec<(String, String)> = data["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let label =
                |name: &str| r["metric"][name].as_str().unwrap_or_else(|| panic!("no {name} in {r}")).to_string();
            (label("experiment"), label("variant"))
        })
        .collect();
    let distinct: BTreeSet<&(String, String)> = pairs.iter().collect();
    assert_eq!(distinct.len(), pairs.len(), "{pairs:?}");
    for experiment in ["ranker-2026-11", "ranker-duel-ab"] {
        assert!(pairs.contains(&(experiment.to_string(), "control".to_string())), "{experiment}: {pairs:?}");
    }
    eprintln!("the demo's printed query: {} series, one per experiment and variant", pairs.len());

    // The live exposition passes promtool check metrics.
    let (exposition, _) = scrape_until(demo_port, Duration::from_secs(5), |_| true);
    promtool_check(&exposition);

    // Scrapes that failed (each stales every series until the next) stay few, and only by
    // timing out under the machine's load: a /metrics that failed otherwise, or mostly, would be
    // a defect. (Prometheus' `lastError` may already be cleared by the next scrape when read.)
    let over_the_run = |expr: &str| {
        let data = api(port, &format!("/api/v1/query?query={}", encode(expr))).unwrap();
        data["result"][0]["value"][1].as_str().and_then(|v| v.parse::<f64>().ok()).unwrap_or(f64::NAN)
    };
    let scrapes = over_the_run("sum(count_over_time(up[10m]))");
    let scrapes_failed = scrapes - over_the_run("sum(sum_over_time(up[10m]))");
    let slowest = over_the_run("max(max_over_time(scrape_duration_seconds[10m]))");
    eprintln!(
        "scrapes: {scrapes} ({scrapes_failed} failed; slowest {slowest:.3} s); empty answers asked again after a failed \
         scrape: {failed_scrapes:?}"
    );
    assert!(scrapes_failed <= scrapes / 4.0, "{scrapes_failed} of {scrapes} scrapes failed: {failed_scrapes:?}");
    for failure in &failed_scrapes {
        assert!(
            failure.ends_with("\"\"") || failure.contains("deadline exceeded"),
            "a scrape failed other than by timing out: {failure}"
        );
    }

    eprintln!(
        "ecosystem: data after {waited:.0?}; {} rules healthy ({recording} recording, {alerting} alerting reading {} \
         distinct series); {} panel targets, {panel_queries} panel queries returning {panel_series} series; {} cookbook \
         queries; total {:.0?}",
        rules.len(),
        alert_series.len(),
        targets.len(),
        cookbook.len(),
        started.elapsed()
    );
    let (status, _) = demo.terminate(Duration::from_secs(10));
    assert!(status.success());
    drop(prometheus);
}

/// Every combination of alternative values (only custom variables have more than one).
fn choices(values: &BTreeMap<String, Vec<String>>) -> Vec<BTreeMap<String, usize>> {
    let mut out = vec![BTreeMap::new()];
    for (name, options) in values {
        out = out
            .into_iter()
            .flat_map(|c| {
                (0..options.len()).map(move |i| {
                    let mut c = c.clone();
                    c.insert(name.clone(), i);
                    c
                })
            })
            .collect();
    }
    out
}

#[test]
fn metric_names_finds_the_series_an_expression_reads() {
    let expr = r#"experiment_variant:rankpulse_ndcg:ratio_rate1h{k="10", gain="linear"}
        < (1 - scalar(rankpulse:alert_quality_drop:ratio)) * experiment_variant:rankpulse_ndcg:ratio_rate1h offset 1d
        and on (experiment, variant) sum by (job) (rate(rankpulse_impressions_total{job="rankpulse"}[10m])) >= 0.10
        or absent(up{job="rankpulse"})"#;
    let names: Vec<String> = metric_names(expr).into_iter().collect();
    assert_eq!(
        names,
        [
            "experiment_variant:rankpulse_ndcg:ratio_rate1h",
            "rankpulse:alert_quality_drop:ratio",
            "rankpulse_impressions_total",
            "up"
        ]
    );
}
