//! The experiment read-out through the binary, on simulated streams with known truth.
//!
//! * CUPED: 120 A/A experiments of 80 users each, every user with a click propensity that holds
//!   before and during the experiment (80% of them active in the look-back). `replay`'s CUPED
//!   figures equal the comparison recomputed here from the events' own unit buckets (the
//!   pipeline's pre-period, entry and bucket bookkeeping, to 1e-9); the CUPED interval is
//!   narrower by the factor the simulation implies, and by the factor the difference's spread
//!   across experiments shows; CUPED's A/A false positives stay at the nominal 5%; Holm's and
//!   Benjamini-Hochberg's adjusted p-values of a report equal statsmodels' `multipletests`.
//! * CUPED on two `serve` replicas over four partitions (units keyed to partitions): every
//!   replica's cumulative CUPED figures, merged through the aggregates topic, are replay's.
//! * Power: the ETA reported after 12 hours of a steady stream predicts when the relative MDE
//!   reaches the target: a replay through that moment reports it within 5%.
//!
//! The statistics' formulas are held to gbstats, statsmodels and scipy by
//! `tests/experiment_statistics.rs`.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use common::*;
use rankpulse::stats::cuped::{self, CupedMoments};
use rdkafka::mocking::MockCluster;
use serde_json::{json, Value};

/// 2026-03-01T00:00:00Z: the A/A experiments' first day.
const D0: i64 = 1_772_323_200_000;
const DAY: i64 = 86_400_000;
const EXPERIMENTS: usize = 120;
const USERS: usize = 80;
const PRE_IMPRESSIONS: usize = 8;
const POST_IMPRESSIONS: usize = 8;
const UNIT_BUCKETS: u32 = 4096;
/// Partitions of the input topics in the serve test.
const PARTITIONS: i32 = 4;

struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[derive(Default)]
struct Stream {
    impressions: Vec<(i64, String)>,
    engagements: Vec<(i64, String)>,
    /// Per impression and engagement (same order), its partition: its client's.
    partitions: (Vec<i32>, Vec<i32>),
}

impl Stream {
    /// One impression; clicked at rank 1 with probability `p`. Returns its MRR.
    fn impression(&mut self, rng: &mut Lcg, ts: i64, experiment: &str, variant: &str, client: &str, p: f64) -> f64 {
        let id = format!("q{}", self.impressions.len());
        let results: Vec<String> = (0..3).map(|r| format!("{id}-d{r}")).collect();
        let impression = json!({"query_id": id, "timestamp": ts, "results": results, "experiment": experiment,
                                "variant": variant, "client_id": client});
        self.impressions.push((ts, impression.to_string()));
        let partition = (xxhash_rust::xxh3::xxh3_64(client.as_bytes()) % PARTITIONS as u64) as i32;
        self.partitions.0.push(partition);
        if rng.next() < p {
            let click =
                json!({"query_id": id, "timestamp": ts + 1000, "doc_id": results[0], "event_id": format!("e-{id}")});
            self.engagements.push((ts + 1000, click.to_string()));
            self.partitions.1.push(partition);
            1.0
        } else {
            0.0
        }
    }

    /// The events as (partition, payload) messages per topic, each partition in event-time order.
    fn messages(&self) -> (Messages, Messages) {
        let keyed = |events: &[(i64, String)], partitions: &[i32]| {
            let mut out: Vec<(i64, i32, String)> =
                events.iter().zip(partitions).map(|((ts, line), &p)| (*ts, p, line.clone())).collect();
            out.sort_by_key(|(ts, _, _)| *ts);
            out.into_iter().map(|(_, p, line)| (p, line)).collect()
        };
        (keyed(&self.impressions, &self.partitions.0), keyed(&self.engagements, &self.partitions.1))
    }

    fn write(mut self, dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
        let mut out = Vec::new();
        for (name, events) in
            [("impressions.jsonl", &mut self.impressions), ("engagements.jsonl", &mut self.engagements)]
        {
            events.sort_by_key(|(ts, _)| *ts);
            let text: String = events.iter().map(|(_, line)| format!("{line}\n")).collect();
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            out.push(path);
        }
        (out[0].clone(), out[1].clone())
    }
}

fn bucket(client: &str) -> u32 {
    (xxhash_rust::xxh3::xxh3_64(client.as_bytes()) as u32) % UNIT_BUCKETS
}

/// Per experiment and arm, per unit bucket: (post metric sum, post impressions, pre metric sum,
/// pre impressions), as the simulation knows them.
type Truth = BTreeMap<(String, String), BTreeMap<u32, [f64; 4]>>;

fn aa_stream() -> (Stream, Truth) {
    let mut rng = Lcg(2013);
    let (mut stream, mut truth) = (Stream::default(), Truth::new());
    for e in 0..EXPERIMENTS {
        let experiment = format!("aa{e:03}");
        for u in 0..USERS {
            let client = format!("u{e}-{u}");
            let variant = if u % 2 == 0 { "control" } else { "treatment" };
            let quality = rng.next();
            let cell =
                truth.entry((experiment.clone(), variant.to_string())).or_default().entry(bucket(&client)).or_default();
            // 80% of the users searched in the look-back (days D0-5 .. D0-1), in another experiment;
            // the others enter with a covariate of 0, counted as one observation.
            if rng.next() < 0.8 {
                for i in 0..PRE_IMPRESSIONS {
                    let ts = D0 - (1 + (i % 5) as i64) * DAY + (rng.next() * 80_000_000.0) as i64;
                    cell[2] += stream.impression(&mut rng, ts, "baseline", "control", &client, quality);
                    cell[3] += 1.0;
                }
            } else {
                cell[3] += 1.0;
            }
            for _ in 0..POST_IMPRESSIONS {
                let ts = D0 + (rng.next() * 2.0 * DAY as f64) as i64;
                cell[0] += stream.impression(&mut rng, ts, &experiment, variant, &client, quality);
                cell[1] += 1.0;
            }
        }
    }
    (stream, truth)
}

/// The configuration's sections, `ab` last: `window` is the one window size (the traffic
/// rate's); the events are stamped 2026-03, and an idle input lets the watermark move on.
fn sections(window: &str, ab: &str) -> String {
    format!(
        r#"
[join]
attribution_window = "10s"
max_out_of_orderness = "0s"
idle_timeout = "1s"
[metrics]
cutoffs = [1, 3]
windows = ["{window}"]
[limits]
max_past = "3650d"
[labels]
max_experiments = 200
idle_expiry = "30d"
{ab}
"#
    )
}

/// [`sections`] written to `dir/rankpulse.toml`, for `replay`.
fn config(dir: &Path, window: &str, ab: &str) -> std::path::PathBuf {
    let path = dir.join("rankpulse.toml");
    std::fs::write(&path, sections(window, ab)).unwrap();
    path
}

/// Runs a reference `script` in python3 with `input` as JSON on its standard input; its
/// standard output, parsed. `what` names the package the test command installs for it.
fn python(script: &str, input: &impl serde::Serialize, what: &str) -> Value {
    let mut child = Command::new("python3")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    serde_json::to_writer(child.stdin.take().unwrap(), input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{what} (the test command installs it)");
    serde_json::from_slice(&out.stdout).unwrap()
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn cuped_narrows_by_the_expected_factor_keeps_aa_false_positives_and_equals_the_buckets() {
    let dir = tempfile::tempdir().unwrap();
    let (stream, truth) = aa_stream();
    let (impressions, engagements) = stream.write(dir.path());
    let cfg = config(
        dir.path(),
        "1d",
        &format!(
            "[ab]\nunit = \"client_id\"\nunit_buckets = {UNIT_BUCKETS}\ncorrection = \"holm\"\n[ab.cuped]\nmetrics = [\"mrr\"]\nlookback_days = 7"
        ),
    );
    let report = replay_json(&impressions, &engagements, &cfg);
    let experiments: BTreeMap<String, &Value> = report["experiments"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["experiment"].as_str().unwrap().starts_with("aa"))
        .map(|r| (r["experiment"].as_str().unwrap().to_string(), r))
        .collect();
    assert_eq!(experiments.len(), EXPERIMENTS);

    let (mut ratios, mut cuped_differences, mut plain_differences) = (Vec::new(), Vec::new(), Vec::new());
    let (mut cuped_positives, mut plain_positives) = (0, 0);
    for (name, r) in &experiments {
        let mrr = &r["comparisons"][0]["metrics"]["mrr"];
        let adjusted = &mrr["cuped"];
        assert!(adjusted.is_object(), "{name}: no CUPED figures: {}", r["notes"]);
        // The pipeline's bookkeeping: its figures are the comparison of the events' own buckets.
        let moments = |variant: &str| {
            let mut m = CupedMoments::default();
            for cell in truth[&(name.clone(), variant.to_string())].values() {
                m.add_bucket(cell[0], cell[1], cell[2], cell[3]);
            }
            m
        };
        let want = cuped::compare(&moments("control"), &moments("treatment"), 0.95).unwrap();
        for (what, got, expected) in [
            ("theta", num(&adjusted["theta"]), want.theta),
            ("difference", num(&adjusted["difference"]["estimate"]), want.difference.estimate),
            ("lower", num(&adjusted["difference"]["ci"][0]), want.difference.ci[0]),
            ("p-value", num(&adjusted["difference"]["p_value"]), want.difference.p_value),
        ] {
            assert!((got - expected).abs() < 1e-9, "{name} {what}: replay {got}, from the buckets {expected}");
        }
        let units = adjusted["units_with_pre_period"].as_array().unwrap();
        assert!(num(&units[0]) + num(&units[1]) > 0.6 * USERS as f64, "{name}: {units:?}");
        let width = |ci: &Value| num(&ci[1]) - num(&ci[0]);
        ratios.push(width(&adjusted["difference"]["ci"]) / width(&mrr["difference_ci"]));
        cuped_differences.push(num(&adjusted["difference"]["estimate"]));
        plain_differences.push(num(&mrr["difference"]));
        cuped_positives += usize::from(num(&adjusted["difference"]["p_value"]) < 0.05);
        plain_positives += usize::from(num(&mrr["p_value"]) < 0.05);
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let sd = |v: &[f64]| {
        let m = mean(v);
        (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (v.len() - 1) as f64).sqrt()
    };
    // The simulation's factor: per user, post and pre are means of 8 clicks at a propensity
    // q ~ U(0, 1), so each has variance 1/12 + (1/6)/8 and their covariance is 1/12
    // (rho = 0.8); 80% of users have a pre-period, so the share of variance explained is
    // 0.8 rho^2 and the interval narrows by sqrt(1 - 0.8 rho^2) = 0.70.
    let rho: f64 = (1.0 / 12.0) / (1.0 / 12.0 + 1.0 / 48.0);
    let expected = (1.0 - 0.8 * rho * rho).sqrt();
    let reported = mean(&ratios);
    let observed = sd(&cuped_differences) / sd(&plain_differences);
    println!(
        "CUPED interval / unadjusted: reported {reported:.3}, spread across experiments {observed:.3}, expected {expected:.3}; \
         A/A positives at 5%: CUPED {cuped_positives}/{EXPERIMENTS}, unadjusted {plain_positives}/{EXPERIMENTS}"
    );
    assert!((reported - expected).abs() < 0.06, "reported ratio {reported}, expected {expected}");
    assert!(
        (observed / reported - 1.0).abs() < 0.15,
        "the spread across experiments {observed} vs reported {reported}"
    );
    // Binomial(120, 0.05): at most 15 with probability 0.999.
    assert!((1..=15).contains(&cuped_positives), "{cuped_positives} CUPED false positives of {EXPERIMENTS}");
    assert!(plain_positives <= 15, "{plain_positives} unadjusted false positives of {EXPERIMENTS}");

    // Holm and BH over one report's family against statsmodels.
    let first = experiments.values().next().unwrap();
    let metrics = first["comparisons"][0]["metrics"].as_object().unwrap();
    let family: Vec<(&String, &Value)> = metrics.iter().filter(|(_, m)| m["p_value"].is_number()).collect();
    let p: Vec<f64> = family.iter().map(|(_, m)| num(&m["p_value"])).collect();
    let script = "import json, sys\nfrom statsmodels.stats.multitest import multipletests\np = json.load(sys.stdin)\n\
                  print(json.dumps([list(multipletests(p, method=m)[1]) for m in ('holm', 'fdr_bh')]))";
    let reference: Vec<Vec<f64>> = serde_json::from_value(python(script, &p, "statsmodels")).unwrap();
    for (k, (key, m)) in family.iter().enumerate() {
        for (field, want) in [("holm_p_value", reference[0][k]), ("bh_p_value", reference[1][k])] {
            let got = num(&m[field]);
            assert!((got - want).abs() < 1e-12, "{key} {field}: {got} vs statsmodels {want}");
        }
        assert_eq!(m["adjusted_p_value"], m["holm_p_value"], "ab.correction = holm");
    }
}

/// GrowthBook's CUPED on per-unit data: one impression per unit in the experiment, one in the
/// look-back for 70% of the units, and a covariate of 0 for the 30% without one (gbstats 0.8.0's
/// `RegressionAdjustedStatistic`, `compute_theta` and `TwoSidedTTest`, the units without history
/// filled with 0 as GrowthBook's queries fill them). Every unit has a bucket of its own, so
/// replay's figures are gbstats's to 1e-9. Before units without history counted as 0 they were
/// left out of the covariate's mean, and θ differed (0.38 against 0.62 in the issue's example).
#[test]
fn cuped_fills_units_without_a_pre_period_with_zero_as_gbstats_does() {
    let mut rng = Lcg(52);
    let mut stream = Stream::default();
    // Per arm, per unit: (post, pre), pre 0 without a pre-period.
    let mut rows: BTreeMap<&str, Vec<[f64; 2]>> = BTreeMap::new();
    let mut used = std::collections::BTreeSet::new();
    let mut candidates = 0..;
    let mut without = 0;
    for u in 0..120 {
        // A client whose bucket no other client has.
        let client = loop {
            let name = format!("fill-{}", candidates.next().unwrap());
            if used.insert(bucket(&name)) {
                break name;
            }
        };
        let variant = if u % 2 == 0 { "control" } else { "treatment" };
        let quality = 0.15 + 0.7 * rng.next();
        let pre = if u % 10 < 3 {
            without += 1;
            0.0
        } else {
            let ts = D0 - DAY + (rng.next() * 80_000_000.0) as i64;
            stream.impression(&mut rng, ts, "baseline", "control", &client, quality)
        };
        let lift = if variant == "treatment" { 0.1 } else { 0.0 };
        let ts = D0 + (rng.next() * 80_000_000.0) as i64;
        let post = stream.impression(&mut rng, ts, "fill", variant, &client, quality + lift);
        rows.entry(variant).or_default().push([post, pre]);
    }
    assert_eq!(without, 36, "30% of the units have no pre-period");
    let dir = tempfile::tempdir().unwrap();
    let (impressions, engagements) = stream.write(dir.path());
    let cfg = config(
        dir.path(),
        "1d",
        &format!("[ab]\nunit = \"client_id\"\nunit_buckets = {UNIT_BUCKETS}\n[ab.cuped]\nmetrics = [\"mrr\"]\nlookback_days = 7"),
    );
    let report = replay_json(&impressions, &engagements, &cfg);
    let experiment = report["experiments"].as_array().unwrap().iter().find(|r| r["experiment"] == "fill").unwrap();
    let adjusted = &experiment["comparisons"][0]["metrics"]["mrr"]["cuped"];
    assert!(adjusted.is_object(), "no CUPED figures: {experiment}");
    let units = adjusted["units_with_pre_period"].as_array().unwrap();
    assert_eq!(num(&units[0]) + num(&units[1]), 84.0, "{units:?}");

    let script = r#"
import json, sys
import numpy as np
from gbstats.frequentist.tests import FrequentistConfig, TwoSidedTTest
from gbstats.models.statistics import RegressionAdjustedStatistic, SampleMeanStatistic, compute_theta
rows = json.load(sys.stdin)
def stat(arm):
    a = np.array(rows[arm])
    post, pre = a[:, 0], a[:, 1]
    mean = lambda v: SampleMeanStatistic(n=len(v), sum=float(v.sum()), sum_squares=float((v**2).sum()))
    return RegressionAdjustedStatistic(n=len(post), post_statistic=mean(post), pre_statistic=mean(pre),
                                       post_pre_sum_of_products=float((post * pre).sum()), theta=0)
theta = compute_theta(stat("control"), stat("treatment"))
r = TwoSidedTTest(stat("control"), stat("treatment"), FrequentistConfig(alpha=0.05, difference_type="absolute")).compute_result()
print(json.dumps({"theta": theta, "estimate": r.expected, "ci": list(r.ci), "p_value": r.p_value}))
"#;
    let gbstats = python(script, &rows, "gbstats");
    println!("CUPED with 30% of units without a pre-period: replay {adjusted}, gbstats {gbstats}");
    for (what, got, want) in [
        ("theta", num(&adjusted["theta"]), num(&gbstats["theta"])),
        ("difference", num(&adjusted["difference"]["estimate"]), num(&gbstats["estimate"])),
        ("lower", num(&adjusted["difference"]["ci"][0]), num(&gbstats["ci"][0])),
        ("upper", num(&adjusted["difference"]["ci"][1]), num(&gbstats["ci"][1])),
        ("p-value", num(&adjusted["difference"]["p_value"]), num(&gbstats["p_value"])),
    ] {
        assert!((got - want).abs() < 1e-9, "{what}: replay {got}, gbstats {want}");
    }
}

#[test]
fn replicas_merge_cuped_figures_through_the_aggregates_topic_to_replays() {
    // Two experiments of 160 users each (e1's treatment clicks more), their users' look-back in
    // another experiment, then one late impression per partition so that every impression of
    // the experiments is final in `serve` as in `replay`.
    let mut rng = Lcg(36);
    let mut stream = Stream::default();
    for (e, effect) in [("e0", 0.0), ("e1", 0.1)] {
        for u in 0..160 {
            let client = format!("{e}-u{u}");
            let variant = if u % 2 == 0 { "control" } else { "treatment" };
            let quality = rng.next() * 0.8;
            for i in 0..6 {
                let ts = D0 - (1 + i % 3) * DAY + (rng.next() * 80_000_000.0) as i64;
                stream.impression(&mut rng, ts, "baseline", "control", &client, quality);
            }
            let lift = if variant == "treatment" { effect } else { 0.0 };
            for _ in 0..6 {
                let ts = D0 + (rng.next() * DAY as f64) as i64;
                stream.impression(&mut rng, ts, e, variant, &client, quality + lift);
            }
        }
    }
    for p in 0..PARTITIONS {
        // A client name for each partition, found by its hash.
        let client = (0..)
            .map(|i| format!("tail{i}"))
            .find(|c| (xxhash_rust::xxh3::xxh3_64(c.as_bytes()) % PARTITIONS as u64) as i32 == p);
        stream.impression(&mut rng, D0 + 10 * DAY, "tail", "control", &client.unwrap(), 1.0);
    }
    let (impressions, engagements) = stream.messages();

    let cluster = MockCluster::new(1).unwrap();
    for topic in ["imp", "eng"] {
        cluster.create_topic(topic, PARTITIONS, 1).unwrap();
    }
    create_state_topics(&cluster, "cuped-group", PARTITIONS);
    let brokers = cluster.bootstrap_servers();
    produce_to_partitions(&brokers, &[("imp", &impressions), ("eng", &engagements)]);

    let dir = tempfile::tempdir().unwrap();
    let ab = format!(
        "[ab]\nunit = \"client_id\"\nunit_buckets = {UNIT_BUCKETS}\n[ab.cuped]\nmetrics = [\"mrr\", \"ndcg@3\"]\nlookback_days = 7"
    );
    let kafka = "[kafka]\ngroup_id = \"cuped-group\"\nimpressions_topic = \"imp\"\nengagements_topic = \"eng\"\n\
                 [kafka.properties]\n\"session.timeout.ms\" = \"6000\"\n\"heartbeat.interval.ms\" = \"500\"\n\
                 [state]\ncheckpoint_interval = \"500ms\"\n";
    let sections = format!("{kafka}{}", sections("1d", &ab));
    let ports = [free_port(), free_port()];
    let configs: Vec<_> = ports
        .iter()
        .enumerate()
        .map(|(i, &port)| serve_config(dir.path(), &format!("replica{i}"), &brokers, port, &sections))
        .collect();
    let replayed = replay_json(
        &write_payloads(dir.path(), "imp.jsonl", &impressions),
        &write_payloads(dir.path(), "eng.jsonl", &engagements),
        &configs[0],
    );
    let cuped_of = |report: &Value| -> Value {
        let metrics = &report["comparisons"][0]["metrics"];
        json!([metrics["mrr"]["cuped"], metrics["ndcg@3"]["cuped"]])
    };
    let want: BTreeMap<String, Value> = replayed["experiments"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["experiment"] == "e0" || r["experiment"] == "e1")
        .map(|r| (r["experiment"].as_str().unwrap().to_string(), cuped_of(r)))
        .collect();
    assert_eq!(
        want.len(),
        2,
        "{}",
        replayed["experiments"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["experiment"].to_string())
            .collect::<Vec<_>>()
            .join(",")
    );
    assert!(want["e1"][0]["variance_reduction"].as_f64().unwrap() > 0.2, "{}", want["e1"]);

    let daemons: Vec<Daemon> =
        configs.iter().map(|cfg| Daemon::spawn(&["serve", "--config", cfg.to_str().unwrap()])).collect();
    // The replicas start together: when the second joins while the first's join is still being
    // completed, the mock cluster takes two cooperative rebalances before the second owns its
    // partitions, each the session timeout less a second (6 s above; with librdkafka's default
    // of 45 s, about 40 s each, seen in 2 of 4 runs of this file on a loaded 2-core machine).
    // A run where the joins coincide takes seconds.
    for &port in &ports {
        for (experiment, want) in &want {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(180);
            let got = wait_for(deadline, std::time::Duration::from_millis(500), "CUPED figures equal replay's", || {
                let (status, body) = http_get(port, &format!("/api/v1/experiments/{experiment}?window=cumulative"))?;
                let report: Value = serde_json::from_str(&body).ok()?;
                (status == 200 && report["partitions"] == json!([0, 1, 2, 3]) && cuped_of(&report) == *want)
                    .then_some(report)
            });
            assert_eq!(cuped_of(&got), *want, "replica on {port}, {experiment}");
        }
    }
    for daemon in daemons {
        let (status, _) = daemon.terminate(std::time::Duration::from_secs(10));
        assert!(status.success());
    }
}

/// A steady stream: `per_hour` impressions per hour of two arms, the treatment's click rate
/// 0.30 against 0.31, from hour 0 until `hours`.
fn steady_stream(hours: f64, per_hour: usize) -> Stream {
    let mut rng = Lcg(7);
    let mut stream = Stream::default();
    let total = (hours * per_hour as f64) as usize;
    for i in 0..total {
        let ts = D0 + (i as f64 * 3_600_000.0 / per_hour as f64) as i64;
        let (variant, p) = if i % 2 == 0 { ("control", 0.30) } else { ("treatment", 0.31) };
        stream.impression(&mut rng, ts, "eta", variant, &format!("c{i}"), p);
    }
    stream
}

#[test]
fn the_eta_predicts_when_the_target_mde_is_reached() {
    let ab = "[ab]\npower = 0.8\ntarget_mde = 0.05";
    let run = |hours: f64| -> Value {
        let dir = tempfile::tempdir().unwrap();
        let (impressions, engagements) = steady_stream(hours, 400).write(dir.path());
        let report = replay_json(&impressions, &engagements, &config(dir.path(), "1h", ab));
        let eta = report["experiments"].as_array().unwrap().iter().find(|r| r["experiment"] == "eta").unwrap();
        eta["comparisons"][0]["metrics"]["mrr"]["power"].clone()
    };
    let early = run(12.0);
    let eta_hours = num(&early["eta_seconds"]) / 3600.0;
    let relative_mde = num(&early["relative_mde"]);
    // The target is reached once the MDE has shrunk to 0.05: some 20 to 60 hours on.
    assert!(relative_mde > 0.05 && (8.0..60.0).contains(&eta_hours), "{early}");
    let later = run(12.0 + eta_hours);
    let reached = num(&later["relative_mde"]);
    println!(
        "after 12 h: relative MDE {relative_mde:.4}, ETA {eta_hours:.1} h; after {:.1} h: relative MDE {reached:.4} (target 0.05)",
        12.0 + eta_hours
    );
    assert!((reached / 0.05 - 1.0).abs() < 0.05, "at the ETA the relative MDE is {reached}, not 0.05");
    assert!(num(&later["eta_seconds"]) < 0.1 * eta_hours * 3600.0, "{later}");
}

/// The manual's "Try it" (docs/src/readout.md), run by `sh` as written with this build as
/// `rankpulse`: replay's read-out prints exactly the lines the page shows.
#[test]
fn the_manuals_try_it_prints_what_the_manual_shows() {
    let page = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/src/readout.md")).unwrap();
    let shown = page.split("```text\n").nth(1).unwrap().split("```").next().unwrap();
    let section = &page[page.find("## Try it").unwrap()..];
    let script = section.split("```sh\n").nth(1).unwrap().split("```").next().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_rankpulse")).parent().unwrap();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    let out = Command::new("sh").args(["-ec", script]).current_dir(dir.path()).env("PATH", path).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains(shown), "the manual shows\n{shown}\nreplay printed\n{stdout}");
}
