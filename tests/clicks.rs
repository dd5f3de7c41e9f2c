//! Click models end to end: simulated traffic with known position bias and relevance
//! (`clicks/sim.rs`) replayed by the real binary (`judgments --from-clicks`, `eval --clicks`),
//! its figures compared with independent references (`clicks/reference.py`: the EM over
//! individual sessions, SRW's COEC over individual events, intervention harvesting, IPS) and
//! with the truth the simulation knows.

use crate::click_sim as sim;
use crate::common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::BIN;
use serde_json::Value;
use sim::{Ranker, User, World, EXAMINATION};

const TOLERANCE: f64 = 1e-9;

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn rankpulse(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().unwrap();
    assert!(out.status.success(), "rankpulse {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// Runs `tests/clicks/reference.py <command>` on `input`.
fn reference(command: &str, input: &Value) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clicks/reference.py");
    let mut child = Command::new("python3")
        .arg(script)
        .arg(command)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs the references");
    serde_json::to_writer(child.stdin.take().unwrap(), input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "reference.py {command}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The click log of a replay of the files: (judgment lines, models, click table text).
fn from_clicks(dir: &Path, impressions: &Path, engagements: &Path, max_rank: usize) -> (Vec<Value>, Value, String) {
    let (out, models, table) = (dir.join("judgments.jsonl"), dir.join("models.json"), dir.join("table.jsonl"));
    let max_rank = max_rank.to_string();
    rankpulse(&[
        "judgments",
        "--from-clicks",
        "--impressions",
        impressions.to_str().unwrap(),
        "--engagements",
        engagements.to_str().unwrap(),
        "--max-rank",
        &max_rank,
        "--min-impressions",
        "0",
        "--out",
        out.to_str().unwrap(),
        "--models-out",
        models.to_str().unwrap(),
        "--table-out",
        table.to_str().unwrap(),
    ]);
    let lines = std::fs::read_to_string(&out).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let models = serde_json::from_str(&std::fs::read_to_string(&models).unwrap()).unwrap();
    (lines, models, std::fs::read_to_string(&table).unwrap())
}

fn close(got: f64, want: f64, what: &str) {
    assert!((got - want).abs() <= TOLERANCE, "{what}: {got} vs the reference's {want}");
}

/// Every estimate of a small replay equals its reference on the same events: the EM (run by
/// the reference over individual sessions, for the iterations rankpulse ran), SRW's COEC (over
/// individual events), intervention harvesting, and the click table's counts.
#[test]
fn estimates_equal_the_references_on_the_same_events() {
    let dir = tempfile::tempdir().unwrap();
    let world = World::new(7, 5, 11);
    let user = User::Pbm(EXAMINATION.to_vec());
    let (logged, impressions, engagements) =
        world.traffic(600, &user, |i| if i % 3 == 0 { Ranker::Production } else { Ranker::Shuffled }, 12);
    let (imp, eng) = (write(dir.path(), "imp.jsonl", &impressions), write(dir.path(), "eng.jsonl", &engagements));
    let (judgments, models, table) = from_clicks(dir.path(), &imp, &eng, 5);
    let mut input = sim::reference_input(&logged);
    input["max_rank"] = 5.into();
    input["iterations"] = models["em_iterations"].clone();

    let pbm = reference("pbm", &input);
    for (r, rank) in models["ranks"].as_array().unwrap().iter().enumerate() {
        let want = pbm["examination"][r].as_f64().unwrap();
        close(rank["pbm_examination"].as_f64().unwrap(), want, &format!("γ at rank {}", r + 1));
    }
    close(models["log_likelihood"].as_f64().unwrap(), pbm["log_likelihood"].as_f64().unwrap(), "log-likelihood");
    let gamma1 = pbm["examination"][0].as_f64().unwrap();
    let alpha: HashMap<(String, String), f64> = pbm["attractiveness"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            ((a["query"].as_str().unwrap().into(), a["doc"].as_str().unwrap().into()), a["value"].as_f64().unwrap())
        })
        .collect();
    let coec = reference("coec", &input);
    let coec: HashMap<(String, String), &Value> = coec["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| ((p["query"].as_str().unwrap().into(), p["doc"].as_str().unwrap().into()), p))
        .collect();
    assert_eq!(judgments.len(), coec.len(), "every pair shown is judged");
    for j in &judgments {
        let key = (j["query"].as_str().unwrap().to_string(), j["doc_id"].as_str().unwrap().to_string());
        let what = format!("{key:?}");
        close(j["attractiveness"].as_f64().unwrap(), alpha[&key] * gamma1, &format!("α·γ₁ of {what}"));
        let srw = coec[&key];
        close(j["coec"].as_f64().unwrap(), srw["coec"].as_f64().unwrap(), &format!("COEC of {what}"));
        assert_eq!(j["clicks"], srw["clicks"], "{what}");
        assert_eq!(j["impressions"], srw["impressions"], "{what}");
    }
    let harvest = reference("harvest", &input);
    for (r, rank) in models["ranks"].as_array().unwrap().iter().enumerate() {
        close(
            rank["harvest_relative"].as_f64().unwrap(),
            harvest["ratio"][r].as_f64().unwrap(),
            &format!("harvest rank {}", r + 1),
        );
        assert_eq!(rank["harvest_pairs"], harvest["pairs"][r]);
    }
    // The table's cells are the logged counts.
    let mut cells: HashMap<(String, String, u64), (u64, u64)> = HashMap::new();
    for l in &logged {
        for (r, (doc, &clicked)) in l.docs.iter().zip(&l.clicks).enumerate() {
            let c = cells.entry((l.query.clone(), doc.clone(), r as u64 + 1)).or_default();
            c.0 += 1;
            c.1 += u64::from(clicked);
        }
    }
    let lines: Vec<Value> = table.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), cells.len());
    for line in lines {
        let key = (
            line["query"].as_str().unwrap().into(),
            line["doc_id"].as_str().unwrap().into(),
            line["rank"].as_u64().unwrap(),
        );
        assert_eq!((line["impressions"].as_u64().unwrap(), line["clicks"].as_u64().unwrap()), cells[&key], "{key:?}");
    }
}

/// The relative examination each estimator reports: (pbm, harvest ratio, harvest stderr).
fn relative(models: &Value) -> Vec<(f64, f64, f64)> {
    models["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let get = |k: &str| r[k].as_f64().unwrap_or(f64::NAN);
            (get("pbm_relative"), get("harvest_relative"), get("harvest_stderr"))
        })
        .collect()
}

/// A candidate ranking as a JSON-lines run, its queries written as users typed them
/// (`eval --clicks` normalizes them).
fn candidate_run(dir: &Path, name: &str, orders: &[Vec<usize>]) -> PathBuf {
    run_file(dir, name, orders, |q| format!("QUERY {q}"))
}

fn run_file(dir: &Path, name: &str, orders: &[Vec<usize>], query: impl Fn(usize) -> String) -> PathBuf {
    write(dir, name, &sim::run_lines(orders, query))
}

fn counterfactual(table: &Path, run: &Path, propensities: &str) -> Value {
    let out = rankpulse(&[
        "eval",
        "--clicks",
        table.to_str().unwrap(),
        "--run",
        run.to_str().unwrap(),
        "--propensities",
        propensities,
        "--cutoff",
        "6",
        "--max-rank",
        "6",
        "--format",
        "json",
    ]);
    serde_json::from_str(&out).unwrap()
}

/// 40,000 impressions of 40 queries × 6 results, 90% from the production ranker and 10% from
/// an exploration slice that shuffles it (the rank swaps both estimators need).
fn logged_traffic(world: &World, user: &User, dir: &Path) -> (Vec<sim::Logged>, Value, PathBuf) {
    let (logged, impressions, engagements) =
        world.traffic(40_000, user, |i| if i % 10 == 0 { Ranker::Shuffled } else { Ranker::Production }, 9);
    let (imp, eng) = (write(dir, "imp.jsonl", &impressions), write(dir, "eng.jsonl", &engagements));
    let (_, models, _) = from_clicks(dir, &imp, &eng, 6);
    (logged, models, dir.join("table.jsonl"))
}

/// A position-based user: both estimators recover its examination, and IPS scores candidate
/// rankings the log never showed within their 95% intervals of the truth, where clicks
/// without weights miss by tens of standard errors.
#[test]
fn a_position_based_users_bias_is_recovered_and_candidates_are_scored_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let world = World::new(40, 6, 5);
    let (logged, models, table) = logged_traffic(&world, &User::Pbm(EXAMINATION.to_vec()), dir.path());
    for (rank, ((pbm, harvest, stderr), truth)) in relative(&models).into_iter().zip(EXAMINATION).enumerate() {
        eprintln!("rank {}: truth {truth:.3}, pbm {pbm:.4}, harvest {harvest:.4} ± {stderr:.4}", rank + 1);
        assert!((pbm - truth).abs() < 0.03, "rank {}: the EM's {pbm} vs {truth}", rank + 1);
        assert!((harvest - truth).abs() < 0.03, "rank {}: harvesting's {harvest} vs {truth}", rank + 1);
        assert!(
            (harvest - truth).abs() <= 3.0 * stderr.max(1e-12) || rank == 0,
            "rank {}: outside 3 standard errors",
            rank + 1
        );
    }
    let reversed: Vec<Vec<usize>> = world.production.iter().map(|o| o.iter().rev().copied().collect()).collect();
    let known = EXAMINATION.map(|e| e.to_string()).join(",");
    for (name, orders) in [("ideal", world.ideal()), ("reversed", reversed), ("production", world.production.clone())] {
        let run = candidate_run(dir.path(), "candidate.jsonl", &orders);
        let truth = world.true_dcg(&orders, &logged, 6);
        for propensities in ["harvest", "pbm", known.as_str()] {
            let cf = counterfactual(&table, &run, propensities);
            let (estimate, stderr, naive) =
                (cf["estimate"].as_f64().unwrap(), cf["stderr"].as_f64().unwrap(), cf["naive"].as_f64().unwrap());
            eprintln!("{name} ({propensities}): truth {truth:.4}, IPS {estimate:.4} ± {stderr:.4}, naive {naive:.4}");
            assert!(
                (estimate - truth).abs() <= 1.96 * stderr,
                "{name} ({propensities}): {estimate} ± {stderr} vs {truth}"
            );
            assert!((naive - truth).abs() > 10.0 * stderr, "{name}: the naive estimate {naive} is not off");
            assert_eq!(cf["unlogged"], 0);
        }
        // The estimate with known propensities equals the reference's, impression by impression.
        let mut input = sim::reference_input(&logged);
        let candidate: serde_json::Map<String, Value> = orders
            .iter()
            .enumerate()
            .map(|(q, o)| (sim::query_text(q), o.iter().map(|&d| sim::doc_id(q, d)).collect()))
            .collect();
        input["propensities"] = EXAMINATION.to_vec().into();
        input["clip"] = Value::Null;
        input["candidate"] = candidate.into();
        input["cutoff"] = 6.into();
        let want = reference("ips", &input);
        let cf = counterfactual(&table, &run, &known);
        close(cf["estimate"].as_f64().unwrap(), want["estimate"].as_f64().unwrap(), &format!("{name}: IPS"));
        close(cf["naive"].as_f64().unwrap(), want["naive"].as_f64().unwrap(), &format!("{name}: naive"));
    }
}

/// A cascade user (who stops at the first attractive result) breaks the position-based
/// assumption every estimate here rests on, and it shows: the propensities fall much faster
/// than any fixed examination, and IPS misses the candidates' value by many standard errors.
/// The manual says so; this test keeps it true.
#[test]
fn a_cascade_user_breaks_the_position_based_assumption_visibly() {
    let dir = tempfile::tempdir().unwrap();
    let world = World::new(40, 6, 5);
    let (logged, models, table) = logged_traffic(&world, &User::Cascade, dir.path());
    eprintln!("cascade: relative examination (pbm, harvest, stderr): {:?}", relative(&models));
    let orders = world.ideal();
    let run = candidate_run(dir.path(), "candidate.jsonl", &orders);
    let truth = world.true_dcg(&orders, &logged, 6);
    for propensities in ["harvest", "pbm"] {
        let cf = counterfactual(&table, &run, propensities);
        let (estimate, stderr) = (cf["estimate"].as_f64().unwrap(), cf["stderr"].as_f64().unwrap());
        eprintln!("ideal ({propensities}): truth {truth:.4}, IPS {estimate:.4} ± {stderr:.4}");
        assert!((truth - estimate) > 5.0 * stderr, "{propensities}: a cascade user's clicks should not fit");
    }
}

/// A running daemon keeps the same click log as a replay of the same events, serves it on
/// `/api/v1/clicks` (where `judgments --from-clicks --url` reads it) and exports the
/// estimates as gauges; a daemon without the log answers 404.
#[test]
fn a_running_daemon_serves_its_click_log_and_the_estimates() {
    use rdkafka::mocking::MockCluster;
    let dir = tempfile::tempdir().unwrap();
    let world = World::new(6, 4, 21);
    let user = User::Pbm(EXAMINATION.to_vec());
    // Half the impressions of a segment: the estimates come per segment too.
    let segments = [("", user.clone()), ("tablet", user)];
    let ranker = |i: usize| if i % 4 < 2 { Ranker::Shuffled } else { Ranker::Production };
    let (logged, impressions, engagements) = world.traffic_in_segments(1_500, &segments, ranker, 22);
    // Co-partitioned by impression: an impression and its clicks on the same partition.
    let partition_of = |line: &str| -> i32 {
        let v: Value = serde_json::from_str(line).unwrap();
        v["query_id"].as_str().unwrap()["imp-".len()..].parse::<i32>().unwrap() % 2
    };
    let messages =
        |text: &str| -> Vec<(i32, String)> { text.lines().map(|l| (partition_of(l), l.to_string())).collect() };
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("imp", 2, 1).unwrap();
    cluster.create_topic("eng", 2, 1).unwrap();
    common::create_state_topics(&cluster, "clicks-it", 2);
    let brokers = cluster.bootstrap_servers();
    common::produce_to_partitions(&brokers, &[("imp", &messages(&impressions)), ("eng", &messages(&engagements))]);
    let sections = r#"
[kafka]
group_id = "clicks-it"
impressions_topic = "imp"
engagements_topic = "eng"
[join]
attribution_window = "2s"
max_out_of_orderness = "0s"
idle_timeout = "1s"
[limits]
max_past = "3650d"
[clicks]
enabled = true
max_rank = 4
refit_interval = "100ms"
"#;
    let port = common::free_port();
    let cfg = common::serve_config(dir.path(), "rankpulse", &brokers, port, sections);
    let daemon = common::Daemon::spawn(&["serve", "--config", cfg.to_str().unwrap()]);
    let tracked = common::series("rankpulse_click_log_impressions_total", &[("outcome", "tracked")]);
    // The estimates are fitted on a thread of their own: a scrape shows the last finished fit.
    let pbm_rank_2 = common::series("rankpulse_click_examination", &[("estimator", "pbm"), ("rank", "2")]);
    let (_, m) = common::scrape_until(port, std::time::Duration::from_secs(90), |m| {
        m.get(&tracked) == Some(&(logged.len() as f64)) && m.contains_key(&pbm_rank_2)
    });
    let examination = |estimator: &str, rank: &str| {
        m[&common::series("rankpulse_click_examination", &[("estimator", estimator), ("rank", rank)])]
    };
    assert_eq!(examination("pbm", "1"), 1.0);
    assert!((examination("harvest", "2") - EXAMINATION[1]).abs() < 0.15, "{}", examination("harvest", "2"));
    assert!(
        m.contains_key(&common::series("rankpulse_click_examination_stderr", &[("estimator", "pbm"), ("rank", "2")]))
    );
    for segment in ["tablet", "none"] {
        let top = common::series(
            "rankpulse_click_examination",
            &[("estimator", "harvest"), ("rank", "1"), ("segment", segment)],
        );
        assert_eq!(m.get(&top), Some(&1.0), "{segment}");
    }

    // The daemon's table is the replay's, and `--url` reads it.
    let (imp, eng) = (write(dir.path(), "imp.jsonl", &impressions), write(dir.path(), "eng.jsonl", &engagements));
    let (_, _, replayed) = from_clicks(dir.path(), &imp, &eng, 4);
    let url = format!("http://127.0.0.1:{port}");
    let served = dir.path().join("served.jsonl");
    rankpulse(&[
        "judgments",
        "--from-clicks",
        "--url",
        &url,
        "--max-rank",
        "4",
        "--table-out",
        served.to_str().unwrap(),
    ]);
    let sorted = |text: String| {
        let mut lines: Vec<String> = text.lines().map(String::from).collect();
        lines.sort();
        lines
    };
    assert_eq!(sorted(std::fs::read_to_string(&served).unwrap()), sorted(replayed));
    daemon.terminate(std::time::Duration::from_secs(30));
}

/// With `clicks.propensities`, every impression's clicks are also weighted by the inverse of
/// their rank's propensity: each variant's `ips_clicks@k` and `ips_dcg@k` equal the mean of a
/// direct computation over the logged impressions, and the A/B read-out compares them beside
/// the raw metrics, with their variances.
#[test]
fn debiased_click_metrics_per_variant_equal_a_direct_computation() {
    let dir = tempfile::tempdir().unwrap();
    let world = World::new(10, 6, 31);
    let ranker = |i: usize| if i % 2 == 0 { Ranker::Shuffled } else { Ranker::Production };
    let (logged, impressions, engagements) = world.traffic(3_000, &User::Pbm(EXAMINATION.to_vec()), ranker, 32);
    let (imp, eng) = (write(dir.path(), "imp.jsonl", &impressions), write(dir.path(), "eng.jsonl", &engagements));
    let (propensities, clip) = ([1.0, 0.7, 0.5, 0.4, 0.3, 0.2], 0.25);
    let config = write(
        dir.path(),
        "ips.toml",
        &format!("[metrics]\ncutoffs = [1, 3, 10]\n[clicks]\npropensities = {propensities:?}\nclip = {clip}\n"),
    );
    let report = common::replay_json(&imp, &eng, &config);
    for (variant, parity) in [("exploration", 0), ("production", 1)] {
        let group = report["groups"].as_array().unwrap().iter().find(|g| g["variant"] == variant).unwrap();
        let mine: Vec<&sim::Logged> =
            logged.iter().enumerate().filter(|(i, _)| i % 2 == parity).map(|(_, l)| l).collect();
        for k in [1usize, 3, 10] {
            let (mut clicks, mut dcg) = (0.0, 0.0);
            for l in &mine {
                for (rank, _) in l.clicks.iter().enumerate().take(k).filter(|(_, c)| **c) {
                    let weight = propensities.get(rank).map_or(0.0, |p: &f64| 1.0 / p.max(clip));
                    clicks += weight;
                    dcg += weight / ((rank + 2) as f64).log2();
                }
            }
            let n = mine.len() as f64;
            close(
                group["metrics"][format!("ips_clicks@{k}")].as_f64().unwrap(),
                clicks / n,
                &format!("{variant} ips_clicks@{k}"),
            );
            close(
                group["metrics"][format!("ips_dcg@{k}")].as_f64().unwrap(),
                dcg / n,
                &format!("{variant} ips_dcg@{k}"),
            );
        }
    }
    let experiment = &report["experiments"].as_array().unwrap()[0];
    let treatment =
        &experiment["variants"].as_array().unwrap().iter().find(|v| v["variant"] != experiment["control"]).unwrap();
    assert!(treatment["metrics"]["ips_dcg@10"]["se"].as_f64().unwrap() > 0.0, "{treatment}");
    assert!(experiment.to_string().contains("\"ips_dcg@10\""));
}

/// The weighted metrics reach the sum of their click weights, far beyond the [0, 1] of the
/// ranking metrics: two impressions of 10 results, every result of the first clicked, at
/// propensities [1, 0.05 x 9] without clipping (weights up to 181 an impression; summed in a
/// format that held 0 to 128, they reported a mean of 64 and an sd of 0) and at the smallest
/// clip the configuration allows for propensities of 1e-9 (32,728 an impression): replay's mean
/// and sd are the direct computation's; a clip below that is refused, naming the clip that would do.
#[test]
fn debiased_click_metrics_are_exact_up_to_the_largest_weight_the_clip_allows() {
    let dir = tempfile::tempdir().unwrap();
    let results: Vec<String> = (0..10).map(|r| format!("d{r}")).collect();
    let impressions: String = (0..2)
        .map(|i| {
            serde_json::json!({"query_id": format!("q{i}"), "timestamp": 1_790_000_000_000i64 + i * 1000,
                               "results": results, "experiment": "ips", "variant": "control"})
            .to_string()
                + "\n"
        })
        .collect();
    let engagements: String = results
        .iter()
        .enumerate()
        .map(|(r, doc)| {
            serde_json::json!({"query_id": "q0", "timestamp": 1_790_000_000_500i64, "doc_id": doc,
                               "event_id": format!("e{r}")})
            .to_string()
                + "\n"
        })
        .collect();
    let (imp, eng) = (write(dir.path(), "imp.jsonl", &impressions), write(dir.path(), "eng.jsonl", &engagements));
    let discount = |rank: usize| 1.0 / ((rank + 2) as f64).log2();
    for (small, clip) in [(0.05, 0.0), (1e-9, 0.000275)] {
        let mut propensities = vec![1.0];
        propensities.extend([small; 9]);
        let config = write(
            dir.path(),
            "ips.toml",
            &format!("[metrics]\ncutoffs = [10]\n[clicks]\npropensities = {propensities:?}\nclip = {clip}\n"),
        );
        let report = common::replay_json(&imp, &eng, &config);
        let experiment = &report["experiments"].as_array().unwrap()[0];
        let control = experiment["variants"].as_array().unwrap().iter().find(|v| v["variant"] == "control").unwrap();
        let weight = |rank: usize| 1.0 / f64::max(propensities[rank], clip);
        let clicks: f64 = (0..10).map(weight).sum();
        let dcg: f64 = (0..10).map(|r| weight(r) * discount(r)).sum();
        for (metric, value) in [("ips_clicks@10", clicks), ("ips_dcg@10", dcg)] {
            let estimate = &control["metrics"][metric];
            // Two impressions, one with `value` and one with 0: mean value / 2, sd value / √2.
            let (mean, sd) = (estimate["mean"].as_f64().unwrap(), estimate["sd"].as_f64().unwrap());
            let want = (value / 2.0, value / 2f64.sqrt());
            println!("{metric} at propensity {small}, clip {clip}: mean {mean} sd {sd}, expected {want:?}");
            assert!((mean - want.0).abs() <= 1e-12 * want.0, "{metric}: mean {mean}, expected {}", want.0);
            assert!((sd - want.1).abs() <= 1e-9 * want.1, "{metric}: sd {sd}, expected {}", want.1);
        }
    }
    let config = write(
        dir.path(),
        "too-far.toml",
        "[metrics]\ncutoffs = [10]\n[clicks]\npropensities = [1.0, 1e-9, 1e-9, 1e-9, 1e-9, 1e-9, 1e-9, 1e-9, 1e-9, 1e-9]\nclip = 0.000274\n",
    );
    let out = Command::new(BIN)
        .args(["replay", "--impressions"])
        .arg(&imp)
        .arg("--engagements")
        .arg(&eng)
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a clip whose weights exceed the exact sums is refused");
    assert!(stderr.contains("clicks.clip") && stderr.contains("at least 0.000275"), "{stderr}");
}

/// nDCG@k of `docs` against `grades` as trec_eval computes it (linear gain, ideal from every
/// judged document of the query), and P@k with relevance from grade 1.
fn ndcg_and_precision(docs: &[String], grades: &HashMap<&str, u64>, k: usize) -> (f64, f64) {
    let gain = |d: &String| grades.get(d.as_str()).copied().unwrap_or(0) as f64;
    let dcg: f64 = docs.iter().take(k).enumerate().map(|(i, d)| gain(d) / ((i + 2) as f64).log2()).sum();
    let mut ideal: Vec<f64> = grades.values().map(|&g| g as f64).collect();
    ideal.sort_by(|a, b| b.total_cmp(a));
    let idcg: f64 = ideal.iter().take(k).enumerate().map(|(i, g)| g / ((i + 2) as f64).log2()).sum();
    let relevant = docs.iter().take(k).filter(|d| gain(d) >= 1.0).count();
    (if idcg > 0.0 { dcg / idcg } else { 0.0 }, relevant as f64 / k as f64)
}

/// The judgment list `judgments --from-clicks` writes is one `[judgments]` and `eval` read:
/// graded from the click model's attractiveness, it agrees with the simulation's true
/// relevance, and both read it into exactly the judged metrics its grades give.
#[test]
fn judgments_from_clicks_feed_the_judged_metrics_and_eval() {
    let dir = tempfile::tempdir().unwrap();
    let world = World::new(20, 6, 41);
    let ranker = |i: usize| if i % 4 == 0 { Ranker::Shuffled } else { Ranker::Production };
    let (logged, impressions, engagements) = world.traffic(20_000, &User::Pbm(EXAMINATION.to_vec()), ranker, 42);
    let (imp, eng) = (write(dir.path(), "imp.jsonl", &impressions), write(dir.path(), "eng.jsonl", &engagements));
    let judgments = dir.path().join("clicks.jsonl");
    let thresholds = [0.25, 0.5, 0.75];
    rankpulse(&[
        "judgments",
        "--from-clicks",
        "--impressions",
        imp.to_str().unwrap(),
        "--engagements",
        eng.to_str().unwrap(),
        "--max-rank",
        "6",
        "--estimate",
        "attractiveness",
        "--grades",
        "0.25,0.5,0.75",
        "--out",
        judgments.to_str().unwrap(),
    ]);
    let lines: Vec<Value> =
        std::fs::read_to_string(&judgments).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 20 * 6, "every pair was shown at least 20 times");
    let grade_of = |alpha: f64| thresholds.iter().filter(|&&t| alpha >= t).count() as u64;
    let agree = lines
        .iter()
        .filter(|l| {
            let (q, d) = (l["query"].as_str().unwrap(), l["doc_id"].as_str().unwrap());
            let (q, d): (usize, usize) =
                (q["query ".len()..].parse().unwrap(), d.rsplit("-d").next().unwrap().parse().unwrap());
            l["grade"].as_u64().unwrap() == grade_of(world.alpha[q][d])
        })
        .count();
    eprintln!("{agree} of {} grades equal the true relevance's", lines.len());
    assert!(agree * 10 >= lines.len() * 9, "{agree} of {} grades agree with the truth", lines.len());

    let mut grades: HashMap<&str, HashMap<&str, u64>> = HashMap::new();
    for l in &lines {
        grades
            .entry(l["query"].as_str().unwrap())
            .or_default()
            .insert(l["doc_id"].as_str().unwrap(), l["grade"].as_u64().unwrap());
    }
    // eval: the production ranking as a run, scored against the list (trec_eval matches
    // query ids exactly: the run names them as the list does).
    let run = run_file(dir.path(), "production.jsonl", &world.production, sim::query_text);
    let out = rankpulse(&[
        "eval",
        "--qrels",
        judgments.to_str().unwrap(),
        "--run",
        run.to_str().unwrap(),
        "-q",
        "-m",
        "ndcg_cut.5",
        "-m",
        "P.3",
        "--format",
        "json",
    ]);
    let eval: Value = serde_json::from_str(&out).unwrap();
    let (mut ndcg_sum, mut p_sum) = (0.0, 0.0);
    for (q, order) in world.production.iter().enumerate() {
        let docs: Vec<String> = order.iter().map(|&d| sim::doc_id(q, d)).collect();
        let ndcg = ndcg_and_precision(&docs, &grades[sim::query_text(q).as_str()], 5).0;
        let p3 = ndcg_and_precision(&docs, &grades[sim::query_text(q).as_str()], 3).1;
        ndcg_sum += ndcg;
        p_sum += p3;
    }
    close(eval["all"]["ndcg_cut_5"].as_f64().unwrap(), ndcg_sum / 20.0, "eval ndcg_cut_5");
    close(eval["all"]["P_3"].as_f64().unwrap(), p_sum / 20.0, "eval P_3");

    // [judgments]: every replayed impression is judged against the list.
    let config = write(
        dir.path(),
        "judged.toml",
        &format!("[metrics]\ncutoffs = [3, 5]\n[judgments]\nfile = \"{}\"\nkey = \"query\"\n", judgments.display()),
    );
    let report = common::replay_json(&imp, &eng, &config);
    for group in report["groups"].as_array().unwrap() {
        let variant = group["variant"].as_str().unwrap();
        let parity = usize::from(variant == "production");
        let mine: Vec<&sim::Logged> =
            logged.iter().enumerate().filter(|(i, _)| (i % 4 != 0) as usize == parity).map(|(_, l)| l).collect();
        let judged = &group["judged"];
        assert_eq!(judged["impressions"].as_u64().unwrap(), mine.len() as u64, "{variant}: every impression judged");
        let n = mine.len() as f64;
        let ndcg: f64 =
            mine.iter().map(|l| ndcg_and_precision(&l.docs, &grades[l.query.as_str()], 5).0).sum::<f64>() / n;
        let p3: f64 = mine.iter().map(|l| ndcg_and_precision(&l.docs, &grades[l.query.as_str()], 3).1).sum::<f64>() / n;
        close(judged["metrics"]["ndcg@5"].as_f64().unwrap(), ndcg, &format!("{variant}: judged ndcg@5"));
        close(judged["metrics"]["precision@3"].as_f64().unwrap(), p3, &format!("{variant}: judged precision@3"));
    }
}

/// Impressions that carry a `segment` (a device) have their position bias estimated per
/// segment: desktop users who read deep and mobile users who do not each get their own
/// propensities back, while the judgments are made over both.
#[test]
fn each_segment_gets_its_own_position_bias() {
    let dir = tempfile::tempdir().unwrap();
    let world = World::new(40, 6, 51);
    let mobile = [1.0, 0.45, 0.25, 0.14, 0.08, 0.05];
    let segments = [("desktop", User::Pbm(EXAMINATION.to_vec())), ("mobile", User::Pbm(mobile.to_vec()))];
    let ranker = |i: usize| if i % 10 < 2 { Ranker::Shuffled } else { Ranker::Production };
    let (_, impressions, engagements) = world.traffic_in_segments(60_000, &segments, ranker, 52);
    let (imp, eng) = (write(dir.path(), "imp.jsonl", &impressions), write(dir.path(), "eng.jsonl", &engagements));
    let (judgments, models, table) = from_clicks(dir.path(), &imp, &eng, 6);
    assert!(table.lines().next().unwrap().starts_with(r#"{"segment":"#), "the table keeps the segment");
    assert_eq!(judgments.len(), 40 * 6, "judgments are per (query, document), over both segments");
    for (segment, truth) in [("desktop", EXAMINATION), ("mobile", mobile)] {
        for (rank, ((pbm, harvest, stderr), truth)) in
            relative(&models["segments"][segment]).into_iter().zip(truth).enumerate()
        {
            eprintln!(
                "{segment} rank {}: truth {truth:.3}, pbm {pbm:.4}, harvest {harvest:.4} ± {stderr:.4}",
                rank + 1
            );
            assert!((pbm - truth).abs() < 0.04, "{segment} rank {}: the EM's {pbm} vs {truth}", rank + 1);
            assert!((harvest - truth).abs() < 0.04, "{segment} rank {}: harvesting's {harvest} vs {truth}", rank + 1);
        }
    }
    // Over both segments the estimate is neither segment's.
    let (_, overall, _) = relative(&models)[2];
    assert!(overall < EXAMINATION[2] - 0.05 && overall > mobile[2] + 0.05, "{overall}");
}

/// The manual's "Try it" (docs/src/clicks.md) as written: the generated traffic's head queries
/// through `judgments --from-clicks` print exactly the lines the manual shows.
#[test]
fn the_manuals_try_it_prints_what_the_manual_shows() {
    let dir = tempfile::tempdir().unwrap();
    let page = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/src/clicks.md")).unwrap();
    let section = &page[page.find("## Try it").unwrap()..page.find("## The click log").unwrap()];
    let blocks: Vec<&str> = section.split("```").collect();
    let (commands, shown) = (blocks[1], blocks[3].trim());
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    for line in commands.lines().filter(|l| l.starts_with("cargo run --release -- ")) {
        let args: Vec<String> = line["cargo run --release -- ".len()..]
            .split_whitespace()
            .map(|a| if a.ends_with(".jsonl") || a.ends_with(".json") { path(a) } else { a.to_string() })
            .collect();
        let out = Command::new(BIN).args(&args).output().unwrap();
        assert!(out.status.success(), "{line}: {}", String::from_utf8_lossy(&out.stderr));
        if args[0] == "judgments" {
            assert_eq!(String::from_utf8_lossy(&out.stderr).trim(), shown, "{line}");
        }
    }
    assert!(std::fs::read_to_string(path("clicks.jsonl")).unwrap().lines().count() > 3000);
}
