//! Events as search teams log them, read through `[mapping.*]`: an OpenSearch response logged as
//! is (headers and the message key mapped), Segment track events, GA4 events with
//! `event_params`, Avro and Protobuf through a Schema Registry. The same generated events in
//! each shape, produced by real client libraries (confluent-kafka's Producer, AvroSerializer
//! and ProtobufSerializer with its SchemaRegistryClient: `tests/your_events/produce.py`) to
//! librdkafka's mock cluster, consumed by one real `rankpulse serve` per shape: every metric
//! sum and count, and every engagement outcome, equals the native JSON run's.
//!
//! No Schema Registry server is installable on these machines (Confluent's and Apicurio's need
//! Java artifacts from a registry they cannot reach; there is none on PyPI), so the test serves
//! the registry's documented REST endpoints itself (`tests/your_events/registry.py`); the
//! producers and their serializers are the real ones.
//!
//! Along the way: the Avro impressions move to a compatible v2 schema mid-stream, the registry
//! is stopped once the ids are cached and the second half is produced (nothing lost, the outage
//! shows on `/readyz` and `rankpulse_schema_registry_up`), and bad messages (an unknown schema
//! id, truncated payloads, a wrong magic byte, events missing a mapped path, events whose name
//! the mapping does not list) are counted under their reasons.

use crate::common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use rdkafka::mocking::MockCluster;

const SHAPES: [&str; 6] = ["native", "opensearch", "segment", "ga4", "avro", "protobuf"];
const PARTITIONS: i32 = 2;

/// What every shape's daemon shares. The generated files span 120 s of event time; every
/// engagement comes within 26 s of its impression and at most 1.5 s out of order, and no input
/// goes idle during the test: so what is attributed does not depend on how the daemons
/// interleave their topics, and every shape must count the same (the last 30 s stay pending,
/// the same in every shape).
const COMMON: &str = r#"
[join]
attribution_window = "30s"
max_out_of_orderness = "2s"
idle_timeout = "10m"
[metrics]
cutoffs = [1, 3, 10]
windows = ["10m"]
[limits]
max_past = "3650d"
[state]
checkpoint_interval = "500ms"
[ab]
unit = "client_id"
# The producer places every event by its query id's hash itself, in every shape, though the
# OpenSearch shape's key is the user: the topics are co-partitioned, and no stage is needed.
[repartition]
mode = "never"
"#;

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// The test command installs confluent-kafka and its serializers' dependencies; outside CI a
/// machine without them skips the test, saying so.
fn python_clients() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import confluent_kafka.schema_registry.avro, confluent_kafka.schema_registry.protobuf, fastavro"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(std::env::var_os("CI").is_none(), "confluent-kafka is required in CI (tests/run.sh installs it)");
        eprintln!("SKIPPED: python3 with confluent-kafka, fastavro and protobuf is not installed");
    }
    ok
}

/// A shape's configuration: its worked example from `config/examples/` with the test's topics,
/// group and registry, and [`COMMON`].
fn shape_config(shape: &str, registry: &str) -> String {
    let mut table: toml::Table = match shape {
        "native" => toml::Table::new(),
        "opensearch" => example("opensearch-response"),
        other => example(other),
    };
    let common: toml::Table = toml::from_str(COMMON).unwrap();
    table.extend(common);
    let kafka = table.entry("kafka").or_insert_with(|| toml::Table::new().into()).as_table_mut().unwrap();
    kafka.insert("impressions_topic".into(), format!("imp-{shape}").into());
    kafka.insert("engagements_topic".into(), format!("eng-{shape}").into());
    kafka.insert("group_id".into(), format!("g-{shape}").into());
    if let Some(r) = table.get_mut("schema_registry").and_then(|r| r.as_table_mut()) {
        r.insert("url".into(), registry.into());
        r.insert("check_interval".into(), "1s".into());
        r.insert("timeout".into(), "2s".into());
        // So that the unknown id is asked for again once the registry is gone.
        r.insert("retry_interval".into(), "100ms".into());
    }
    toml::to_string(&table).unwrap()
}

fn example(name: &str) -> toml::Table {
    toml::from_str(&std::fs::read_to_string(repo(&format!("config/examples/{name}.toml"))).unwrap()).unwrap()
}

/// The registry in its own process, killed on drop.
struct Registry(Child);

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_registry(dir: &Path) -> (Registry, String) {
    start_registry_with(dir, &[])
}

fn start_registry_with(dir: &Path, env: &[(&str, &str)]) -> (Registry, String) {
    let port_file = dir.join("registry.port");
    let child = Command::new("python3")
        .arg(repo("tests/your_events/registry.py"))
        .arg(&port_file)
        .envs(env.iter().copied())
        .spawn()
        .expect("python3 tests/your_events/registry.py");
    let registry = Registry(child);
    let port = wait_for(Instant::now() + Duration::from_secs(20), Duration::from_millis(50), "registry port", || {
        std::fs::read_to_string(&port_file).ok()
    });
    (registry, format!("http://127.0.0.1:{}", port.trim()))
}

/// Every series that must not depend on the shape: metric sums and counts, impression and
/// engagement counters; not the per-topic consumption and rejection counters, nor process
/// timings.
fn comparable(m: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    totals(m)
        .into_iter()
        .filter(|(k, _)| {
            !k.starts_with("rankpulse_events_") && !k.starts_with("rankpulse_schema") && !k.contains("topic=")
        })
        .collect()
}

fn rejected(m: &BTreeMap<String, f64>, topic: &str) -> BTreeMap<String, f64> {
    m.iter()
        .filter(|(k, v)| {
            k.starts_with("rankpulse_events_rejected_total") && k.contains(&format!("topic=\"{topic}\"")) && **v > 0.0
        })
        .map(|(k, v)| (k.split("reason=\"").nth(1).unwrap().split('"').next().unwrap().to_string(), *v))
        .collect()
}

fn consumed(m: &BTreeMap<String, f64>, topic: &str) -> f64 {
    m.iter()
        .filter(|(k, _)| k.starts_with("rankpulse_events_consumed_total") && k.contains(&format!("topic=\"{topic}\"")))
        .map(|(_, v)| v)
        .sum()
}

#[test]
fn every_shape_gives_the_native_metrics_through_a_registry_outage() {
    if !python_clients() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (impressions, engagements) = (dir.path().join("impressions.jsonl"), dir.path().join("engagements.jsonl"));
    let generated = Command::new(BIN)
        .args(["generate", "--count", "1200", "--seed", "17", "--rate", "10", "--start", "2026-11-20T10:00:00Z"])
        .args(["--impressions", impressions.to_str().unwrap(), "--engagements", engagements.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(generated.status.success(), "{}", String::from_utf8_lossy(&generated.stderr));

    let (mut registry, registry_url) = start_registry(dir.path());
    let cluster = MockCluster::new(1).unwrap();
    for shape in SHAPES {
        cluster.create_topic(&format!("imp-{shape}"), PARTITIONS, 1).unwrap();
        cluster.create_topic(&format!("eng-{shape}"), PARTITIONS, 1).unwrap();
        create_state_topics(&cluster, &format!("g-{shape}"), PARTITIONS);
    }
    let brokers = cluster.bootstrap_servers();

    // Phase 1: the first half of the events, the Avro impressions moving to v2 on the way.
    let mut producer = Command::new("python3")
        .arg(repo("tests/your_events/produce.py"))
        .args([&brokers, &registry_url, impressions.to_str().unwrap(), engagements.to_str().unwrap()])
        .arg(dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut said = BufReader::new(producer.stdout.take().unwrap()).lines();
    let mut next_line = || said.next().expect("the producer ended early").unwrap();
    assert_eq!(next_line(), "phase 1");

    let mut daemons = Vec::new();
    for shape in SHAPES {
        let port = free_port();
        let cfg = serve_config(dir.path(), shape, &brokers, port, &shape_config(shape, &registry_url));
        daemons.push((shape, port, Daemon::spawn(&["serve", "--config", cfg.to_str().unwrap()])));
    }
    // Every daemon has consumed phase 1 (so the Avro and Protobuf ones have every id cached).
    let half_native = |m: &BTreeMap<String, f64>| consumed(m, "imp-native");
    let (_, native_phase_1) = scrape_until(daemons[0].1, Duration::from_secs(90), |m| half_native(m) >= 600.0);
    let phase_1_engagements = consumed(&native_phase_1, "eng-native");
    for (shape, port, _) in &daemons[1..] {
        let (imp, eng) = (format!("imp-{shape}"), format!("eng-{shape}"));
        scrape_until(*port, Duration::from_secs(90), |m| {
            consumed(m, &imp) >= 600.0 && consumed(m, &eng) >= phase_1_engagements
        });
    }

    // The registry goes away; phase 2 is produced with the serializers' cached ids.
    let _ = registry.0.kill();
    let _ = registry.0.wait();
    writeln!(producer.stdin.as_mut().unwrap(), "go").unwrap();
    let last = next_line();
    let counts: BTreeMap<String, f64> =
        serde_json::from_str(last.strip_prefix("phase 2 ").unwrap_or_else(|| panic!("{last}"))).unwrap();
    assert!(producer.wait().unwrap().success());

    // Everything consumed, and the state settled: two scrapes a second apart agree.
    let mut finals = BTreeMap::new();
    for (shape, port, _) in &daemons {
        let (imp, eng) = (format!("imp-{shape}"), format!("eng-{shape}"));
        let mut previous = BTreeMap::new();
        let (exposition, m) = scrape_until(*port, Duration::from_secs(90), |m| {
            let done = consumed(m, &imp) == counts[&imp] && consumed(m, &eng) == counts[&eng];
            let now = comparable(m);
            let settled = done && now == previous;
            previous = now;
            std::thread::sleep(Duration::from_millis(750));
            settled
        });
        promtool_check(&exposition);
        finals.insert(*shape, m);
    }

    let native = comparable(&finals["native"]);
    assert!(native.len() > 50, "{native:?}");
    assert!(native.iter().any(|(k, v)| k.starts_with("rankpulse_reciprocal_rank_sum") && *v > 10.0), "{native:?}");
    for shape in &SHAPES[1..] {
        let got = comparable(&finals[shape]);
        let differ: Vec<String> = native
            .keys()
            .chain(got.keys())
            .filter(|k| native.get(*k) != got.get(*k))
            .map(|k| format!("{k}: native {:?}, {shape} {:?}", native.get(k), got.get(k)))
            .collect();
        assert!(differ.is_empty(), "{shape} differs from native JSON:\n{}", differ.join("\n"));
    }

    // What was refused, by shape, and nothing else.
    let reasons = |shape: &str| {
        (rejected(&finals[shape], &format!("imp-{shape}")), rejected(&finals[shape], &format!("eng-{shape}")))
    };
    let none = BTreeMap::new();
    assert_eq!(reasons("native"), (none.clone(), none.clone()));
    assert_eq!(reasons("opensearch"), (none.clone(), none.clone()));
    assert_eq!(reasons("segment"), (none.clone(), BTreeMap::from([("unmapped_action".to_string(), 10.0)])));
    assert_eq!(reasons("ga4"), (BTreeMap::from([("missing_field".to_string(), 10.0)]), none.clone()));
    // The unknown id: unknown while the registry answers, unavailable once it is gone.
    let avro = BTreeMap::from([
        ("schema_unavailable".to_string(), 1.0),
        ("undecodable".to_string(), 4.0),
        ("unknown_schema".to_string(), 1.0),
    ]);
    assert_eq!(reasons("avro"), (avro, none.clone()));
    assert_eq!(reasons("protobuf"), (none.clone(), BTreeMap::from([("undecodable".to_string(), 2.0)])));

    // The outage is told while cached ids go on being decoded.
    let avro_port = daemons[4].1;
    let (_, avro_now) =
        scrape_until(avro_port, Duration::from_secs(20), |m| m.get("rankpulse_schema_registry_up") == Some(&0.0));
    assert_eq!(avro_now.get("rankpulse_schemas_cached"), Some(&3.0), "impression v1 and v2, engagement v1");
    let ready = http_get(avro_port, "/readyz").unwrap();
    assert_eq!(ready.0, 200);
    assert!(ready.1.contains("schema registry is unreachable"), "{}", ready.1);

    for (shape, _, daemon) in daemons {
        let (status, _, output) = daemon.terminate_with_output(Duration::from_secs(15));
        assert!(status.success(), "{shape}: {status:?}");
        assert!(!output.contains("panicked"), "{shape}:\n{output}");
    }

    // Offline, with the same configurations: the JSON shapes' lines and the Avro container
    // files (as exported by a sink connector) replay to the native files' report.
    let report = |shape: &str, impressions: &Path, engagements: &Path| {
        let cfg = dir.path().join(format!("{shape}.toml"));
        let mut report = replay_json(impressions, engagements, &cfg);
        report.as_object_mut().unwrap().remove("events");
        report
    };
    let native = report("native", &impressions, &engagements);
    assert!(native["groups"].as_array().is_some_and(|g| g.len() >= 2), "{native}");
    for (shape, imp, eng) in [
        ("segment", "segment-impressions.jsonl", "segment-engagements.jsonl"),
        ("ga4", "ga4-impressions.jsonl", "ga4-engagements.jsonl"),
        ("avro", "avro-impressions.avro", "avro-engagements.avro"),
    ] {
        let got = report(shape, &dir.path().join(imp), &dir.path().join(eng));
        assert_eq!(got, native, "replay of the {shape} files");

        // check-config shows what the mapping reads from the same samples.
        let cfg = dir.path().join(format!("{shape}.toml"));
        let out = Command::new(BIN)
            .args(["check-config", "--config", cfg.to_str().unwrap(), "--lines", "1"])
            .args(["--impressions", dir.path().join(imp).to_str().unwrap()])
            .args(["--engagements", dir.path().join(eng).to_str().unwrap()])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{shape}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains("# impressions: 1200 decoded, 0 rejected"), "{shape}:\n{stdout}");
        let first: serde_json::Value = stdout
            .lines()
            .find(|l| l.starts_with("{\"line\":1,"))
            .map(|l| serde_json::from_str(l).unwrap())
            .unwrap_or_else(|| panic!("{shape}:\n{stdout}"));
        let native_first: serde_json::Value =
            serde_json::from_str(std::fs::read_to_string(&impressions).unwrap().lines().next().unwrap()).unwrap();
        assert_eq!(first["query_id"], native_first["query_id"], "{shape}: {first}");
        assert_eq!(first["results"], native_first["results"], "{shape}: {first}");
        assert_eq!(first["timestamp"], native_first["timestamp"], "{shape}: {first}");
    }
}

/// The worked examples load as they are shipped.
#[test]
fn the_worked_examples_are_valid_configurations() {
    for entry in std::fs::read_dir(repo("config/examples")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let out = Command::new(BIN).args(["check-config", "--config", path.to_str().unwrap()]).output().unwrap();
            assert!(out.status.success(), "{}: {}", path.display(), String::from_utf8_lossy(&out.stderr));
        }
    }
}

/// A registry that asks for credentials: `check-config` reaches it with basic auth (the password
/// from the environment) or a bearer token (from a file), and says what is wrong without them.
#[test]
fn the_registry_is_asked_with_its_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let check = |url: &str, registry: &str, env: &[(&str, &str)]| {
        let cfg = dir.path().join("check.toml");
        let text = format!(
            "[kafka]\nimpressions_format = \"avro\"\n[schema_registry]\nurl = \"{url}\"\ntimeout = \"2s\"\n{registry}"
        );
        std::fs::write(&cfg, text).unwrap();
        let out = Command::new(BIN)
            .args(["check-config", "--config", cfg.to_str().unwrap()])
            .envs(env.iter().copied())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let (_basic, url) = start_registry_with(dir.path(), &[("REGISTRY_BASIC_AUTH", "rankpulse:reg-pw-4b1f")]);
    let said = check(&url, "username = \"rankpulse\"\npassword_env = \"REG_PW\"\n", &[("REG_PW", "reg-pw-4b1f")]);
    assert!(said.contains(&format!("schema registry {url} answers")), "{said}");
    let said = check(&url, "username = \"rankpulse\"\npassword_env = \"REG_PW\"\n", &[("REG_PW", "wrong")]);
    assert!(said.contains("401 (check schema_registry's credentials)"), "{said}");
    assert!(!said.contains("wrong") && !said.contains("reg-pw-4b1f"), "no secret in what it says: {said}");
    drop(_basic);
    std::fs::remove_file(dir.path().join("registry.port")).unwrap();
    let (_bearer, url) = start_registry_with(dir.path(), &[("REGISTRY_BEARER_TOKEN", "tok-91c2")]);
    let token = dir.path().join("token");
    std::fs::write(&token, "tok-91c2\n").unwrap();
    let said = check(&url, &format!("bearer_token_file = {token:?}\n"), &[]);
    assert!(said.contains("answers"), "{said}");
    let said = check(&url, "", &[]);
    assert!(said.contains("401"), "{said}");
}

/// A registry over HTTPS with a private CA: trusted through `schema_registry.ca_file`, refused
/// without it (the public roots do not know the CA).
#[test]
fn the_registry_is_reached_over_tls_with_its_ca() {
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new(dir.path());
    let env = [
        ("REGISTRY_TLS_CERT", pki.server_cert.to_str().unwrap()),
        ("REGISTRY_TLS_KEY", pki.server_key.to_str().unwrap()),
    ];
    let (_registry, url) = start_registry_with(dir.path(), &env);
    let url = url.replace("http://127.0.0.1", "https://localhost");
    let check = |extra: &str| {
        let cfg = dir.path().join("tls.toml");
        let text = format!(
            "[kafka]\nengagements_format = \"protobuf\"\n[schema_registry]\nurl = \"{url}\"\ntimeout = \"2s\"\n{extra}"
        );
        std::fs::write(&cfg, text).unwrap();
        let out = Command::new(BIN).args(["check-config", "--config", cfg.to_str().unwrap()]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let said = check(&format!("ca_file = {:?}\n", pki.ca_cert));
    assert!(said.contains(&format!("schema registry {url} answers")), "{said}");
    let said = check("");
    assert!(said.contains("warning: schema registry unreachable"), "{said}");
}
