//! The experiment page in a real browser: Debian's headless chromium, driven through
//! chromedriver by `tests/experiment_page/browser.py` (Selenium), which reports what the page
//! showed; this file judges it.
//!
//! * A running demo's `/` and `/experiments/ranker-2026-11`: no console message, no request
//!   but the page itself, one curve per variant in every chart, and every number on the page
//!   equal to the A/B API's JSON fetched just before and just after (when those two agree).
//! * `replay --html`'s file opened from disk: the same, against `replay --format json`, at
//!   desktop and phone width (nothing wider than the phone).
//! * 50 experiments × 3 variants: the replay file, and a `serve` daemon's `/` and one
//!   experiment page behind basic auth (401 without credentials), with their times to load
//!   reported (not asserted: the machines are shared).
//!
//! Screenshots go to `target/experiment-page/`; `docs/images/experiment-page.png`, the
//! README's, is the demo page's at desktop width.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

/// Where the screenshots and timings go.
fn artefacts() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/experiment-page");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs the browser over `visits` (see browser.py), one result per visit.
fn browse(visits: Value) -> Vec<Value> {
    for tool in ["/usr/bin/chromium", "/usr/bin/chromedriver"] {
        assert!(
            Path::new(tool).exists(),
            "{tool} is required: install Debian's chromium and chromium-driver (bash tests/run.sh does)"
        );
    }
    let plan = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(plan.path(), visits.to_string()).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/experiment_page/browser.py");
    let out = Command::new("python3").arg(script).arg(plan.path()).output().unwrap();
    assert!(out.status.success(), "browser.py failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// What every page must be: no console message, nothing fetched but `own` URLs, every figure
/// equal to the reference, as many figures as `min_figures`, and every chart with one curve per
/// variant (value and traffic charts) or per compared variant (difference charts) of its
/// experiment in `reports`.
fn check_page(visit: &Value, own: &[&str], reports: &[Value], min_figures: u64) {
    let url = visit["url"].as_str().unwrap();
    assert_eq!(visit["console"], json!([]), "{url}: console messages");
    for request in visit["requests"].as_array().unwrap() {
        let request = request.as_str().unwrap();
        assert!(own.iter().any(|o| request.starts_with(o)), "{url} requested {request}, which is not the page's own");
    }
    assert!(visit["figures"].as_u64().unwrap() >= min_figures, "{url}: {} figures", visit["figures"]);
    assert_eq!(visit["wrong_figures"], json!([]), "{url}: figures that are not the reference's");
    let charts = visit["charts"].as_array().unwrap();
    for chart in charts {
        let Some(experiment) = chart["experiment"].as_str() else { continue };
        let report = reports.iter().find(|r| r["experiment"] == experiment).unwrap_or_else(|| panic!("{experiment}"));
        let names = |list: &str, field: &str| -> Vec<Value> {
            report[list].as_array().unwrap().iter().map(|v| v[field].clone()).collect()
        };
        let want = match chart["kind"].as_str().unwrap() {
            "value" | "traffic" => names("variants", "variant"),
            "difference" => names("comparisons", "variant"),
            _ => continue,
        };
        assert_eq!(chart["series"].as_array().unwrap(), &want, "{url}: {}", chart["title"]);
    }
}

/// `rankpulse replay` of the files with `config` and `extra` arguments, in JSON; its output.
fn replay(impressions: &Path, engagements: &Path, config: &Path, extra: &[&str]) -> Vec<u8> {
    let files = [impressions, engagements, config].map(|p| p.to_str().unwrap());
    let out = Command::new(BIN)
        .args(["replay", "--impressions", files[0], "--engagements", files[1], "--config", files[2]])
        .args(["--format", "json"])
        .args(extra)
        .output()
        .unwrap();
    assert!(out.status.success(), "replay {extra:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

/// Every report of `replay --format json` of the files, cumulative, and the file its output is
/// in: browser.py reads the figures from there, as Python parses every number exactly (serde_json
/// without its `float_roundtrip` feature may be a unit in the last place off).
fn replay_reports(impressions: &Path, engagements: &Path, config: &Path, dir: &Path) -> (Vec<Value>, PathBuf) {
    let stdout = replay(impressions, engagements, config, &[]);
    let path = dir.join("replay.json");
    std::fs::write(&path, &stdout).unwrap();
    let report: Value = serde_json::from_slice(&stdout).unwrap();
    let reports =
        report["experiments"].as_array().unwrap().iter().filter(|r| r["window"] == "cumulative").cloned().collect();
    (reports, path)
}

fn replay_html(impressions: &Path, engagements: &Path, config: &Path, html: &Path) {
    replay(impressions, engagements, config, &["--html", html.to_str().unwrap()]);
}

#[test]
fn the_demo_page_shows_the_apis_figures_with_a_curve_per_variant() {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    // A slow demo, so that the figures stand still for the moment a page and two API calls take.
    let daemon = Daemon::spawn(&["demo", "--listen", &listen, "--rate", "8", "--faults", "0", "--duration", "400"]);
    let first_line =
        wait_for(Instant::now() + Duration::from_secs(60), Duration::from_millis(200), "the demo's first line", || {
            daemon.output().lines().find(|l| l.starts_with("rankpulse demo")).map(str::to_string)
        });
    assert!(first_line.contains(&format!("http://{listen}/")), "the demo names its page first: {first_line}");
    // Two looks: the curves are lines.
    let looks = || {
        let (status, body) = http_get(port, "/api/v1/experiments/ranker-2026-11")?;
        let report: Value = serde_json::from_str(&body).ok().filter(|_| status == 200)?;
        (report["sequential"]["looks"].as_u64()? >= 2).then_some(())
    };
    wait_for(Instant::now() + Duration::from_secs(300), Duration::from_secs(2), "two looks of the demo", looks);
    let base = format!("http://{listen}");
    let dir = artefacts();
    let visits = browse(json!([
        {"url": format!("{base}/"), "api": base, "screenshot": dir.join("demo-index.png"), "width": 1280, "height": 900},
        {"url": format!("{base}/experiments/ranker-2026-11"), "api": base,
         "screenshot": dir.join("demo-experiment.png"), "width": 1280, "height": 900, "max_height": 2600},
        {"url": format!("{base}/experiments/ranker-duel"), "api": base, "screenshot": dir.join("demo-duel.png"), "width": 1280, "height": 900},
        {"url": format!("{base}/experiments/ranker-2026-11"), "api": base,
         "screenshot": dir.join("demo-experiment-phone.png"), "width": 390, "height": 844, "max_height": 2600},
    ]));
    let (_, body) = http_get(port, "/api/v1/experiments").unwrap();
    let listing: Value = serde_json::from_str(&body).unwrap();
    let reports: Vec<Value> = listing["experiments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| serde_json::from_str(&http_get(port, e["href"].as_str().unwrap()).unwrap().1).unwrap())
        .collect();
    for visit in &visits {
        eprintln!(
            "{}: {} figures compared with the API's after {} attempt(s), loaded in {:.0} ms",
            visit["url"],
            visit["figures"],
            visit["attempts"],
            visit["timing"]["load_ms"].as_f64().unwrap()
        );
        check_page(visit, &[&format!("{base}/")], &reports, 8);
    }
    let experiment = &visits[1];
    let kinds: Vec<&str> =
        experiment["charts"].as_array().unwrap().iter().map(|c| c["kind"].as_str().unwrap()).collect();
    assert!(kinds.contains(&"value") && kinds.contains(&"difference") && kinds.contains(&"traffic"), "{kinds:?}");
    let text = experiment["layout"]["text"].as_str().unwrap();
    let headings = experiment["layout"]["headings"].to_string();
    for section in ["Decision", "Traffic split", "Metrics over time", "Where it changed", "By device", "Data quality"] {
        assert!(headings.contains(section), "the experiment page has no {section:?}: {headings}");
    }
    assert!(text.contains("watermark lag"), "{text}");
    let duel = &visits[2];
    assert!(duel["charts"].as_array().unwrap().iter().any(|c| c["kind"] == "preference"), "{duel}");
    let phone = &visits[3]["layout"];
    assert!(phone["scroll_width"].as_u64() <= phone["inner_width"].as_u64(), "wider than a phone: {phone}");
    // The page's own headers: nothing may load from anywhere, and no cache keeps old figures.
    let headers = http_request(port, "/", None).unwrap().head.to_lowercase();
    assert!(headers.contains("content-security-policy: default-src 'none'"), "{headers}");
    assert!(headers.contains("cache-control: no-store"), "{headers}");
    let (status, _) = http_get(port, "/experiments/no-such-experiment").unwrap();
    assert_eq!(status, 404);
    drop(daemon);
}

#[test]
fn the_replay_report_opened_from_disk_shows_replays_figures_at_desktop_and_phone_width() {
    let dir = tempfile::tempdir().unwrap();
    let (impressions, engagements, judgments) =
        (dir.path().join("imp.jsonl"), dir.path().join("eng.jsonl"), dir.path().join("judgments.jsonl"));
    let out = Command::new(BIN)
        .args([
            "generate",
            "--impressions",
            impressions.to_str().unwrap(),
            "--engagements",
            engagements.to_str().unwrap(),
        ])
        .args(["--count", "30000", "--rate", "20", "--interleaving", "--judgments", judgments.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let config = dir.path().join("replay.toml");
    std::fs::write(
        &config,
        format!(
            "[ab]\nunit = \"client_id\"\ndimensions = [\"query\"]\n[judgments]\nfile = \"{}\"\n[page]\nmetrics = [\"ndcg@10\", \"mrr\"]\n",
            judgments.display()
        ),
    )
    .unwrap();
    let html = artefacts().join("replay-report.html");
    replay_html(&impressions, &engagements, &config, &html);
    let (reports, replayed) = replay_reports(&impressions, &engagements, &config, dir.path());
    let file = format!("file://{}", html.display());
    let visits = browse(json!([
        {"url": file, "reports": replayed, "screenshot": artefacts().join("replay-report.png"), "width": 1280, "height": 900, "max_height": 3000},
        {"url": file, "reports": replayed, "screenshot": artefacts().join("replay-report-phone.png"), "width": 390, "height": 844},
        // The README's picture (docs/images/experiment-page.png is a copy): one experiment, the
        // top of its section.
        {"url": format!("{file}#experiment-ranker-2026-11"), "reports": replayed, "screenshot": artefacts().join("readme.png"), "width": 1100, "height": 1400, "max_height": 1400},
    ]));
    for visit in &visits {
        eprintln!(
            "{file}: {} figures equal to replay's, loaded in {:.0} ms",
            visit["figures"],
            visit["timing"]["load_ms"].as_f64().unwrap()
        );
        check_page(visit, &[&file], &reports, 500);
    }
    // The drawn metrics are `page.metrics`, in its order, for every experiment.
    let drawn: Vec<&str> = visits[0]["charts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["kind"] == "value")
        .filter_map(|c| c["metric"].as_str())
        .collect();
    assert_eq!(&drawn[..2], ["ndcg@10", "mrr"], "{drawn:?}");
    let headings = visits[0]["layout"]["headings"].to_string();
    assert!(headings.contains("Against the judgment list") && headings.contains("Interleaving: "), "{headings}");
    // The per-query breakdown (`ab.dimensions = ["query"]`): its figures are among those
    // compared with replay's `breakdowns`.
    assert!(headings.contains("Where it changed") && headings.contains("Per query: "), "{headings}");
    let phone = &visits[1]["layout"];
    assert!(phone["scroll_width"].as_u64() <= phone["inner_width"].as_u64(), "wider than a phone: {phone}");
}

/// The generated traffic's names, and what the test below renames them to: every character
/// that the figures' data paths use as syntax (`|`, `&`, `=`, `{row}`, `%`), HTML's (quotes,
/// `<`, `&`), spaces and letters outside ASCII.
const AWKWARD_NAMES: [(&str, &str); 8] = [
    ("ranker-2026-11", "exp|{row} & <b>=\"é\""),
    ("control", "a|b"),
    ("treatment", "{row}"),
    ("ranker-duel-ab", "duel ab|{row}&x=1"),
    ("ranker-duel", "duel|1&2={row} 'ß'"),
    ("baseline", "base|line & \"b\" 50%"),
    ("candidate", "cand=<c> ñ {row}"),
    // The A/B twin's treatment, so that both experiments' variants differ.
    ("ranker-duel-ab/treatment", "x&y=z \"q\" <i> ü"),
];

/// `name` renamed by [`AWKWARD_NAMES`] (a variant first as `experiment/variant`).
fn awkward(experiment: Option<&str>, name: &str) -> String {
    let scoped = experiment.map(|e| format!("{e}/{name}"));
    AWKWARD_NAMES
        .iter()
        .find(|(from, _)| Some(*from) == scoped.as_deref())
        .or_else(|| AWKWARD_NAMES.iter().find(|(from, _)| *from == name))
        .map_or(name.to_string(), |(_, to)| to.to_string())
}

#[test]
fn names_with_the_data_paths_syntax_resolve_to_the_reports_figures() {
    let dir = tempfile::tempdir().unwrap();
    let (generated, engagements, judgments) =
        (dir.path().join("generated.jsonl"), dir.path().join("eng.jsonl"), dir.path().join("judgments.jsonl"));
    let out = Command::new(BIN)
        .args(["generate", "--impressions", generated.to_str().unwrap()])
        .args(["--engagements", engagements.to_str().unwrap()])
        .args(["--count", "6000", "--rate", "20", "--interleaving", "--judgments", judgments.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // The same traffic under awkward names: experiments, variants, and the interleaved rankers
    // (in `interleaving` and `teams`), which name the interleaving group and its pairs.
    let mut renamed = String::new();
    for line in std::fs::read_to_string(&generated).unwrap().lines() {
        let mut event: Value = serde_json::from_str(line).unwrap();
        let experiment = event["experiment"].as_str().map(str::to_string);
        if let Some(e) = &experiment {
            event["experiment"] = json!(awkward(None, e));
        }
        if let Some(v) = event["variant"].as_str().map(str::to_string) {
            event["variant"] = json!(awkward(experiment.as_deref(), &v));
        }
        for list in ["interleaving", "teams"] {
            if let Some(rankers) = event[list].as_array_mut() {
                for r in rankers.iter_mut() {
                    *r = json!(awkward(None, r.as_str().unwrap()));
                }
            }
        }
        renamed.push_str(&event.to_string());
        renamed.push('\n');
    }
    let impressions = dir.path().join("imp.jsonl");
    std::fs::write(&impressions, renamed).unwrap();
    // The controls renamed, and a configured split: the split test's figures are keyed by
    // variant name. JSON strings are TOML basic strings.
    let quoted = |s: &str| serde_json::to_string(s).unwrap();
    let (first, control, treatment) =
        (awkward(None, "ranker-2026-11"), awkward(None, "control"), awkward(None, "treatment"));
    let config = dir.path().join("replay.toml");
    std::fs::write(
        &config,
        format!(
            "[ab]\nunit = \"client_id\"\ncontrol = {}\n[ab.experiments.{}]\nsplit = {{ {} = 0.5, {} = 0.5 }}\n[judgments]\nfile = {}\n[page]\nmetrics = [\"ndcg@10\", \"mrr\"]\n",
            quoted(&control),
            quoted(&first),
            quoted(&control),
            quoted(&treatment),
            quoted(judgments.to_str().unwrap()),
        ),
    )
    .unwrap();
    let html = artefacts().join("awkward-names.html");
    replay_html(&impressions, &engagements, &config, &html);
    let (reports, replayed) = replay_reports(&impressions, &engagements, &config, dir.path());
    // Every renamed experiment, variant and ranker is in the report, so its figures are on the page.
    let report_text = serde_json::to_string(&reports).unwrap();
    for (_, name) in AWKWARD_NAMES {
        assert!(report_text.contains(&serde_json::to_string(name).unwrap()), "{name:?} is not in the report");
    }
    let file = format!("file://{}", html.display());
    let visits = browse(json!([
        {"url": file, "reports": replayed, "screenshot": artefacts().join("awkward-names.png"), "width": 1280, "height": 900},
    ]));
    let visit = &visits[0];
    eprintln!("{file}: {} figures equal to replay's", visit["figures"]);
    check_page(visit, &[&file], &reports, 500);
    // The names are shown as they are, not as their escapes.
    let text = visit["layout"]["text"].as_str().unwrap();
    for (_, name) in AWKWARD_NAMES {
        assert!(text.contains(name), "the page does not show {name:?}");
    }
}

/// 50 experiments of 3 variants (`control`, `b` a little better, `c`), an impression per variant
/// every 8 s over 20 minutes ending 2 minutes ago, an engagement on about half: (partition,
/// payload) messages of impressions and engagements, co-partitioned by query over 4 partitions.
fn fifty_experiments() -> (Messages, Messages) {
    let end = chrono::Utc::now().timestamp_millis() - 120_000;
    let start = end - 20 * 60_000;
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut random = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    let (mut impressions, mut engagements) = (Vec::new(), Vec::new());
    let mut n = 0u64;
    let mut t = start;
    while t < end {
        for experiment in 0..50 {
            for (v, variant) in ["control", "b", "c"].iter().enumerate() {
                n += 1;
                let query = format!("q{n}");
                let partition = (n % 4) as i32;
                let client = format!("u{}-{}", experiment, (random() * 40.0) as u32);
                let results: Vec<String> = (0..10).map(|r| format!("\"d{experiment}-{r}\"")).collect();
                let timestamp = t + (experiment * 3 + v as i64) * 40;
                impressions.push((partition, format!(
                    r#"{{"query_id":"{query}","timestamp":{timestamp},"results":[{}],"experiment":"exp-{experiment:02}","variant":"{variant}","client_id":"{client}"}}"#,
                    results.join(",")
                )));
                let click_rate = if v == 1 { 0.6 } else { 0.5 };
                if random() < click_rate {
                    let rank = (random() * random() * 10.0) as usize;
                    engagements.push((partition, format!(
                        r#"{{"query_id":"{query}","timestamp":{},"doc_id":"d{experiment}-{rank}","action":"click","position":{}}}"#,
                        timestamp + 3_000,
                        rank + 1
                    )));
                }
            }
        }
        t += 8_000;
    }
    (impressions, engagements)
}

#[test]
fn fifty_experiments_of_three_variants_render_as_a_file_and_as_a_page_behind_basic_auth() {
    let dir = tempfile::tempdir().unwrap();
    let (impressions, engagements) = fifty_experiments();
    // More experiments than the label guard's default (20) admits; an attribution window short
    // beside the 20 minutes of traffic, so most of it is final when the traffic ends.
    let shared = "[ab]\nunit = \"client_id\"\n[join]\nattribution_window = \"30s\"\n[metrics]\nwindows = [\"1m\"]\n[labels]\nmax_experiments = 60\n";
    let config_sections = format!(
        "[kafka]\ngroup_id = \"page-fifty\"\nimpressions_topic = \"imp\"\nengagements_topic = \"eng\"\n{shared}"
    );

    // The replay file.
    let (imp_file, eng_file) =
        (write_payloads(dir.path(), "imp.jsonl", &impressions), write_payloads(dir.path(), "eng.jsonl", &engagements));
    let replay_config = dir.path().join("replay.toml");
    std::fs::write(&replay_config, shared).unwrap();
    let html = artefacts().join("fifty-experiments.html");
    replay_html(&imp_file, &eng_file, &replay_config, &html);
    let (reports, replayed) = replay_reports(&imp_file, &eng_file, &replay_config, dir.path());
    assert_eq!(reports.len(), 50);

    // The daemon, behind basic auth, on the mock cluster.
    let password = "page-password";
    let hash = bcrypt::hash(password, 4).unwrap();
    let cluster = rdkafka::mocking::MockCluster::new(1).unwrap();
    for topic in ["imp", "eng"] {
        cluster.create_topic(topic, 4, 1).unwrap();
    }
    create_state_topics(&cluster, "page-fifty", 4);
    let port = free_port();
    let sections = format!("{config_sections}[http.basic_auth_users]\nviewer = \"{hash}\"\n");
    let config = serve_config(dir.path(), "page-fifty", &cluster.bootstrap_servers(), port, &sections);
    let daemon = Daemon::spawn(&["serve", "--config", config.to_str().unwrap()]);
    produce_to_partitions(&cluster.bootstrap_servers(), &[("imp", &impressions), ("eng", &engagements)]);
    wait_for(Instant::now() + Duration::from_secs(30), Duration::from_millis(100), "/healthz", || {
        http_get(port, "/healthz").filter(|(s, _)| *s == 200)
    });
    // Without credentials: 401, for the page as for the API.
    for path in ["/", "/experiments/exp-00"] {
        let (status, _) = http_get(port, path).unwrap();
        assert_eq!(status, 401, "{path} without credentials");
    }
    let authorization = basic_auth("viewer", password);
    let all_looked_at = || {
        let body = http_get_with(port, "/api/v1/experiments/exp-49", &authorization)?;
        let report: Value = serde_json::from_str(&body).ok()?;
        (report["sequential"]["looks"].as_u64()? >= 3).then_some(())
    };
    wait_for(Instant::now() + Duration::from_secs(120), Duration::from_secs(1), "three looks of exp-49", all_looked_at);
    let base = format!("http://viewer:{password}@127.0.0.1:{port}");
    let visits = browse(json!([
        {"url": format!("file://{}", html.display()), "reports": replayed, "screenshot": artefacts().join("fifty-experiments.png"), "width": 1280, "height": 900},
        {"url": format!("{base}/"), "api": format!("http://127.0.0.1:{port}"), "auth": format!("viewer:{password}"), "width": 1280, "height": 900},
        {"url": format!("{base}/experiments/exp-07"), "api": format!("http://127.0.0.1:{port}"), "auth": format!("viewer:{password}"), "width": 1280, "height": 900},
    ]));
    let mut timings = String::from(
        "experiment page, 50 experiments x 3 variants (navigation start to load event, chromium headless):\n",
    );
    for (visit, what) in visits.iter().zip(["replay --html file", "serve /", "serve /experiments/exp-07"]) {
        let timing = &visit["timing"];
        let line = format!(
            "  {what}: {:.0} ms to load, {:.0} ms to DOMContentLoaded, {} KiB of HTML, {} figures, {} charts\n",
            timing["load_ms"].as_f64().unwrap(),
            timing["dom_content_loaded_ms"].as_f64().unwrap(),
            timing["html_bytes"].as_u64().unwrap() / 1024,
            visit["figures"],
            visit["charts"].as_array().unwrap().len()
        );
        timings.push_str(&line);
    }
    eprint!("{timings}");
    std::fs::write(artefacts().join("timings.txt"), &timings).unwrap();
    check_page(&visits[0], &[&format!("file://{}", html.display())], &reports, 5000);
    let live: Vec<Value> = (0..50)
        .map(|e| {
            serde_json::from_str(
                &http_get_with(port, &format!("/api/v1/experiments/exp-{e:02}"), &authorization).unwrap(),
            )
            .unwrap()
        })
        .collect();
    for visit in &visits[1..] {
        check_page(visit, &[&format!("http://127.0.0.1:{port}/"), &format!("{base}/")], &live, 100);
    }
    drop(daemon);
}

/// The body of `GET path` with `authorization`, if it answered 200.
fn http_get_with(port: u16, path: &str, authorization: &str) -> Option<String> {
    http_request(port, path, Some(authorization)).filter(|r| r.status == 200).map(|r| r.body)
}
