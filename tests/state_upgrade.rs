//! A changelog written by an earlier release restores into this one, exactly.
//!
//! `tests/state_upgrade/` holds changelog records (key and bytes, as the brokers kept them) of
//! every format this build reads, each partition's newest chain after `rankpulse serve`
//! consumed part A of the traffic below and stopped:
//! - version 5, the full snapshots rankpulse wrote up to issue 53 (which makes the changelog
//!   incremental): a snapshot per partition;
//! - version 6, issue 53's first part: a snapshot and the deltas after it, which carried the
//!   sums whole (version 7's carry the operations on them);
//! - version 7, snapshots and deltas of the operations on the sums, their pending impressions
//!   written every field a varint;
//! - version 10, the same with the smaller pending impressions this build writes: kept so that
//!   a change of the in-memory types that moved their bytes would fail here, not in a user's
//!   upgrade.
//!
//! The state is a rich one: pending impressions, finalized windows, engagements de-duplicated
//! and attributed, the click log, CUPED's pre-period and experiment sums, a client-id A/B unit.
//!
//! The test hosts librdkafka's mock cluster, produces part A again (the same messages at the
//! same offsets, which the records' positions name), puts the old records on the changelog
//! topic, then part B, and runs two `rankpulse serve`: one in the old records' group, which
//! must restore every partition from them and resume from their positions, and one in a group
//! of its own reading everything from the start. Every exported total, the experiment's A/B
//! report (CUPED-adjusted figures included) and the click log must be equal.
//!
//! `write_the_fixture` wrote the records (version 5 with the build of 0a7952a, version 6 with
//! that of 5edf72f, version 7 with that of 632a0f5, version 10 with the build that introduced
//! it, whose aggregates records are increments of version 9); it is ignored, and rerunning it
//! with a later build would write that build's format.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::Message;
use serde_json::{json, Value};

const PARTITIONS: i32 = 2;
/// The group whose changelog the fixture is.
const GROUP: &str = "upgrade";
/// 2026-01-01T00:00:00Z: the pre-period day.
const T0: i64 = 1_767_225_600_000;
const DAY: i64 = 86_400_000;
/// Experiment impressions in part A and in part B.
const PART_A: usize = 1200;
const PART_B: usize = 600;
/// Where the fixture lives, one file per changelog partition.
const FIXTURE_DIR: &str = "tests/state_upgrade";

/// The fixture file of one partition of a state topic (`changelog` or `aggregates`) of format
/// `version`.
fn fixture(version: u32, topic: &str, partition: i32) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(FIXTURE_DIR).join(format!("v{version}-{topic}-{partition}.bin"))
}

/// The configuration of both daemons but for the group: clicks, CUPED on mrr, the client as
/// A/B unit, a 2-minute attribution window so part A leaves some impressions final and some
/// pending.
fn sections(group: &str) -> String {
    format!(
        r#"
[kafka]
group_id = "{group}"
impressions_topic = "{IMP_TOPIC}"
engagements_topic = "{ENG_TOPIC}"
[join]
attribution_window = "2m"
max_out_of_orderness = "1s"
idle_timeout = "1s"
[metrics]
windows = ["1m", "5m"]
[limits]
max_past = "3650d"
[state]
checkpoint_interval = "500ms"
[ab]
unit = "client_id"
[ab.cuped]
metrics = ["mrr"]
[clicks]
enabled = true
"#
    )
}

/// (topic, partition, payload) in production order: a pre-period day in experiment `base`, then
/// experiment `e`, whose treatment clicks higher ranks; clicks, some redelivered. Part A is
/// what the fixture's snapshots cover; part B follows them, and ends with an impression and an
/// engagement per partition an hour later, so every window closes and only those stay pending.
fn traffic(part_b: bool) -> Vec<(&'static str, i32, String)> {
    let mut rng = 0x5eed_u64;
    let mut next = move || {
        rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (rng >> 33) as usize
    };
    let mut out = Vec::new();
    let impression =
        |out: &mut Vec<_>, i: usize, ts: i64, experiment: &str, variant: &str, client: usize, query: usize| {
            let results: Vec<String> = (0..8).map(|r| format!("d{}", (query * 7 + r * 3) % 40)).collect();
            let payload = json!({"query_id": format!("{experiment}-{i}"), "timestamp": ts, "results": results,
            "experiment": experiment, "variant": variant, "client_id": format!("c{client}"),
            "query": format!("query {query}")});
            out.push((IMP_TOPIC, (i % PARTITIONS as usize) as i32, payload.to_string()));
        };
    let click = |out: &mut Vec<_>, i: usize, ts: i64, experiment: &str, query: usize, rank: usize, copies: usize| {
        let doc = format!("d{}", (query * 7 + rank * 3) % 40);
        let payload = json!({"query_id": format!("{experiment}-{i}"), "timestamp": ts, "doc_id": doc,
            "event_id": format!("{experiment}-{i}-click")});
        for _ in 0..copies {
            out.push((ENG_TOPIC, (i % PARTITIONS as usize) as i32, payload.to_string()));
        }
    };
    let (range, pre) = if part_b { (PART_A..PART_A + PART_B, false) } else { (0..PART_A, true) };
    if pre {
        for i in 0..300 {
            let (client, query) = (i % 60, next() % 25);
            let ts = T0 + i as i64 * 1000;
            impression(&mut out, i, ts, "base", "control", client, query);
            if next() % 3 == 0 {
                click(&mut out, i, ts + 1500, "base", query, next() % 4, 1);
            }
        }
    }
    for i in range.clone() {
        let (client, query) = (next() % 60, next() % 25);
        let variant = if client % 2 == 0 { "control" } else { "treatment" };
        let ts = T0 + 2 * DAY + i as i64 * 500;
        impression(&mut out, i, ts, "e", variant, client, query);
        if next() % 3 != 1 {
            let rank = if variant == "treatment" { next() % 3 } else { next() % 6 };
            click(&mut out, i, ts + 2000, "e", query, rank, 1 + usize::from(next() % 10 == 0));
        }
    }
    if part_b {
        let end = T0 + 2 * DAY + (PART_A + PART_B) as i64 * 500 + 3_600_000;
        for p in 0..PARTITIONS as usize {
            let i = PART_A + PART_B + p;
            impression(&mut out, i, end, "e", "control", 0, 0);
            click(&mut out, i, end + 10, "e", 0, 0, 1);
        }
    }
    out
}

fn produce(brokers: &str, messages: &[(&'static str, i32, String)]) {
    let producer: BaseProducer = ClientConfig::new().set("bootstrap.servers", brokers).create().unwrap();
    for (topic, partition, payload) in messages {
        let mut record = BaseRecord::<(), str>::to(topic).partition(*partition).payload(payload.as_str());
        while let Err((_, unsent)) = producer.send(record) {
            producer.poll(Duration::from_millis(10));
            record = unsent;
        }
    }
    producer.flush(Duration::from_secs(60)).unwrap();
}

fn cluster() -> MockCluster<'static, rdkafka::producer::DefaultProducerContext> {
    let cluster = MockCluster::new(1).unwrap();
    for topic in [IMP_TOPIC, ENG_TOPIC] {
        cluster.create_topic(topic, PARTITIONS, 1).unwrap();
    }
    for group in [GROUP, "reference"] {
        create_state_topics(&cluster, group, PARTITIONS);
    }
    cluster
}

/// Records of a fixture file: (key, value) pairs, each a little-endian u32 length and bytes.
fn read_fixture(path: &Path) -> Vec<(Vec<u8>, Vec<u8>)> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut rest = bytes.as_slice();
    let mut take = || {
        let (len, tail) = rest.split_first_chunk::<4>()?;
        let (field, tail) = tail.split_at(u32::from_le_bytes(*len) as usize);
        rest = tail;
        Some(field.to_vec())
    };
    let mut records = Vec::new();
    while let Some(key) = take() {
        records.push((key, take().expect("a value after every key")));
    }
    records
}

fn scrape(port: u16) -> Option<BTreeMap<String, f64>> {
    http_get(port, "/metrics").map(|(_, body)| parse_exposition_raw(&body))
}

/// Messages of `topic` a replica's series show consumed.
fn consumed_of(m: &BTreeMap<String, f64>, topic: &str) -> f64 {
    m.iter()
        .filter(|(k, _)| k.starts_with("rankpulse_events_consumed_total{") && k.contains(&format!("topic=\"{topic}\"")))
        .map(|(_, v)| v)
        .sum()
}

/// Whether a replica's series show `consumed` messages of each topic consumed and every
/// impression final but the last of each partition.
fn finished(m: &BTreeMap<String, f64>, consumed: [usize; 2]) -> bool {
    let total = |topic: &str| consumed_of(m, topic);
    let gauge = |name: &str| m.iter().filter(|(k, _)| k.split('{').next() == Some(name)).map(|(_, v)| v).sum::<f64>();
    total(IMP_TOPIC) == consumed[0] as f64
        && total(ENG_TOPIC) == consumed[1] as f64
        // The last impression of each partition, an hour after the rest, stays pending.
        && gauge("rankpulse_pending_impressions") == f64::from(PARTITIONS)
        && gauge("rankpulse_held_engagements") == 0.0
}

/// The experiment's report and the click log, as a replica serves them, without what depends
/// on when they were asked; `None` until both are there.
fn reports(port: u16) -> Option<(Value, Value)> {
    let get = |path: &str| {
        let (status, body) = http_get(port, path)?;
        if status != 200 {
            return None;
        }
        // A JSON document, or JSON lines (the click log).
        let mut value: Value = serde_json::from_str(&body)
            .unwrap_or_else(|_| Value::Array(body.lines().map(|line| serde_json::from_str(line).unwrap()).collect()));
        strip_times(&mut value);
        Some(value)
    };
    Some((get("/api/v1/experiments/e")?, get("/api/v1/clicks")?))
}

/// Where two JSON values differ, by path (at most 40).
fn differences_between(want: &Value, got: &Value, path: &str, out: &mut Vec<String>) {
    if out.len() >= 40 {
        return;
    }
    match (want, got) {
        (Value::Object(a), Value::Object(b)) => {
            for key in a.keys().chain(b.keys().filter(|k| !a.contains_key(*k))) {
                let (x, y) = (a.get(key).unwrap_or(&Value::Null), b.get(key).unwrap_or(&Value::Null));
                differences_between(x, y, &format!("{path}.{key}"), out);
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                differences_between(x, y, &format!("{path}[{i}]"), out);
            }
        }
        _ if want != got => out.push(format!("{path}: {want} / {got}")),
        _ => {}
    }
}

/// Removes the fields that say when a report was made or how old its data is.
fn strip_times(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|k, _| !matches!(k.as_str(), "generated_at" | "as_of" | "age_seconds" | "updated_at"));
            map.values_mut().for_each(strip_times);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_times),
        _ => {}
    }
}

#[test]
fn a_version_5_changelog_restores_and_resumes_exactly() {
    restores_and_resumes_exactly(5);
}

#[test]
fn a_version_6_chain_of_deltas_restores_and_resumes_exactly() {
    restores_and_resumes_exactly(6);
}

#[test]
fn a_version_7_chain_of_deltas_restores_and_resumes_exactly() {
    restores_and_resumes_exactly(7);
}

#[test]
fn a_version_10_chain_of_deltas_restores_and_resumes_exactly() {
    restores_and_resumes_exactly(10);
}

/// The fixture of format `version` restored, and going on as a replica that read everything.
fn restores_and_resumes_exactly(version: u32) {
    let cluster = cluster();
    let brokers = cluster.bootstrap_servers();
    let (part_a, part_b) = (traffic(false), traffic(true));
    produce(&brokers, &part_a);
    // The old records, on the group's state topics, as the release that wrote them left them.
    let producer: BaseProducer = ClientConfig::new().set("bootstrap.servers", &brokers).create().unwrap();
    for suffix in ["changelog", "aggregates"] {
        let topic = format!("{GROUP}-{suffix}");
        for partition in 0..PARTITIONS {
            let records = read_fixture(&fixture(version, suffix, partition));
            assert!(!records.is_empty(), "{topic} [{partition}]: no record in the fixture");
            for (key, value) in records {
                let record = BaseRecord::to(&topic).partition(partition).key(&key).payload(&value);
                producer.send(record).map_err(|(e, _)| e).unwrap();
            }
        }
    }
    producer.flush(Duration::from_secs(30)).unwrap();
    produce(&brokers, &part_b);
    let all: Vec<_> = part_a.iter().chain(&part_b).collect();
    let consumed = [all.iter().filter(|m| m.0 == IMP_TOPIC).count(), all.iter().filter(|m| m.0 == ENG_TOPIC).count()];

    let dir = tempfile::tempdir().unwrap();
    let (port, reference_port) = (free_port(), free_port());
    let upgraded_cfg = serve_config(dir.path(), "upgraded", &brokers, port, &sections(GROUP));
    let reference_cfg = serve_config(dir.path(), "reference", &brokers, reference_port, &sections("reference"));
    let upgraded = Daemon::spawn(&["serve", "--config", upgraded_cfg.to_str().unwrap()]);
    let reference = Daemon::spawn(&["serve", "--config", reference_cfg.to_str().unwrap()]);

    let deadline = Instant::now() + Duration::from_secs(120);
    let (want, got) = wait_for(deadline, Duration::from_millis(300), "both replicas final", || {
        let (want, got) = (scrape(reference_port)?, scrape(port)?);
        (finished(&want, consumed) && finished(&got, consumed)).then_some((want, got))
    });
    // Every partition came from the old records, and resumed where they left off.
    let output = upgraded.output();
    for partition in 0..PARTITIONS {
        let restored = output.lines().find(|l| {
            l.contains("partition restored")
                && l.contains(&format!("partition={partition} "))
                && l.contains("source=\"changelog\"")
        });
        assert!(restored.is_some(), "partition {partition} was not restored from the old changelog:\n{output}");
        // Version 6's chains end with deltas, applied on the way.
        let deltas = restored.and_then(|l| l.split("deltas=").nth(1)?.split(' ').next()?.parse::<u32>().ok());
        assert!(version < 6 || deltas > Some(0), "partition {partition}: no delta applied:\n{output}");
    }
    let (want_totals, got_totals) = (totals(&want), totals(&got));
    assert!(want_totals.len() > 100, "compared too few series: {}", want_totals.len());
    let differing: Vec<String> = want_totals
        .iter()
        .filter(|(k, v)| got_totals.get(*k) != Some(v))
        .map(|(k, v)| format!("{k}: from scratch {v}, restored {:?}", got_totals.get(k)))
        .chain(got_totals.keys().filter(|k| !want_totals.contains_key(*k)).map(|k| format!("{k}: only restored")))
        .collect();
    assert!(differing.is_empty(), "totals differ:\n{}", differing.join("\n"));
    // The A/B report is the experiment-wide view, which follows the aggregates topic: the same
    // once both replicas' views have caught up.
    let mut last = None;
    let settled = Instant::now() + Duration::from_secs(60);
    let ((want_report, want_clicks), (got_report, got_clicks)) = loop {
        if let (Some(want), Some(got)) = (reports(reference_port), reports(port)) {
            if want == got || Instant::now() > settled {
                break (want, got);
            }
            last = Some(got);
        }
        assert!(Instant::now() < settled, "no report on one of the replicas; the restored one served {last:?}");
        std::thread::sleep(Duration::from_millis(500));
    };
    for (what, want, got) in
        [("the experiment's report", &want_report, &got_report), ("the click log", &want_clicks, &got_clicks)]
    {
        let mut differences = Vec::new();
        differences_between(want, got, "", &mut differences);
        assert!(differences.is_empty(), "{what} differs (from scratch, restored):\n{}", differences.join("\n"));
    }
    let cuped = &want_report["comparisons"][0]["metrics"]["mrr"]["cuped"];
    assert!(
        cuped["units_with_pre_period"].as_array().is_some_and(|u| u.iter().any(|n| n.as_u64() > Some(0))),
        "{cuped}"
    );
    for daemon in [upgraded, reference] {
        let (status, _) = daemon.terminate(Duration::from_secs(15));
        assert!(status.success());
    }
}

/// Writes the fixture of format `RANKPULSE_FIXTURE_VERSION`: part A consumed by `serve`,
/// stopped with SIGTERM (its final record), then each changelog partition's records from its
/// newest snapshot's first chunk on (the deltas after it included), and every record of the
/// aggregates topic (the experiment-wide view's windows, which the A/B report's looks are taken
/// from). Run by hand (`RANKPULSE_FIXTURE_VERSION=N cargo test --test integration
/// state_upgrade::write_the_fixture -- --ignored`) only with the build that writes format N.
#[test]
#[ignore]
fn write_the_fixture() {
    let version: u32 =
        std::env::var("RANKPULSE_FIXTURE_VERSION").expect("the format the build writes").parse().unwrap();
    let cluster = cluster();
    let brokers = cluster.bootstrap_servers();
    let part_a = traffic(false);
    // Half of it before the first snapshot, the rest after: a chain's deltas carry changes.
    let (first, second) = part_a.split_at(part_a.len() / 2);
    produce(&brokers, first);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = serve_config(dir.path(), "writer", &brokers, port, &sections(GROUP));
    let daemon = Daemon::spawn(&["serve", "--config", cfg.to_str().unwrap()]);
    let deadline = Instant::now() + Duration::from_secs(120);
    for produced in [first, &part_a[..]] {
        let consumed = [
            produced.iter().filter(|m| m.0 == IMP_TOPIC).count(),
            produced.iter().filter(|m| m.0 == ENG_TOPIC).count(),
        ];
        wait_for(deadline, Duration::from_millis(300), "part A consumed", || {
            let m = scrape(port)?;
            let total = |topic: &str| consumed_of(&m, topic);
            (total(IMP_TOPIC) == consumed[0] as f64 && total(ENG_TOPIC) == consumed[1] as f64).then_some(())
        });
        std::thread::sleep(Duration::from_secs(2));
        if produced.len() < part_a.len() {
            produce(&brokers, second);
        }
    }
    let (status, _, output) = daemon.terminate_with_output(Duration::from_secs(15));
    assert!(status.success(), "{output}");

    std::fs::create_dir_all(fixture(version, "changelog", 0).parent().unwrap()).unwrap();
    for (suffix, partition) in
        ["changelog", "aggregates"].into_iter().flat_map(|s| (0..PARTITIONS).map(move |p| (s, p)))
    {
        let reader: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &brokers)
            .set("group.id", "fixture-reader")
            .set("enable.partition.eof", "true")
            .create()
            .unwrap();
        let topic = format!("{GROUP}-{suffix}");
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&topic, partition, Offset::Beginning).unwrap();
        reader.assign(&tpl).unwrap();
        drop(tpl);
        let mut records = Vec::new();
        loop {
            match reader.poll(Duration::from_secs(10)) {
                Some(Ok(m)) => records.push((m.key().unwrap().to_vec(), m.payload().unwrap().to_vec())),
                Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => break,
                other => panic!("reading the changelog: {other:?}"),
            }
        }
        // The newest snapshot's chunks: from the last record whose chunk index is 0 (bytes 20..24
        // of the chunk header) and whose key is not a delta's (`<partition>/<slot>/d<n>/<chunk>`)
        // on.
        let is_delta = |key: &[u8]| String::from_utf8_lossy(key).split('/').any(|part| part.starts_with('d'));
        let start = match suffix {
            "changelog" => records
                .iter()
                .rposition(|(k, v)| v.get(20..24) == Some(&[0, 0, 0, 0][..]) && !is_delta(k))
                .expect("a snapshot"),
            _ => 0,
        };
        let mut file = Vec::new();
        for (key, value) in &records[start..] {
            for field in [key, value] {
                file.extend_from_slice(&(field.len() as u32).to_le_bytes());
                file.extend_from_slice(field);
            }
        }
        std::fs::write(fixture(version, suffix, partition), file).unwrap();
        eprintln!("{topic} [{partition}]: {} records, {} kept", records.len(), records.len() - start);
    }
}
