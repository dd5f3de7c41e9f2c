//! rankpulse against real brokers that require TLS: mutual TLS, and SASL/SCRAM inside TLS
//! (`SASL_SSL`), each with tansu behind Debian's stunnel4 (see tests/common/secure.rs for why
//! stunnel terminates the TLS and what tansu build stores SCRAM users). Every Kafka client
//! `serve` creates goes through it: the consumer, the changelog and aggregates clients, the
//! admin client creating the state topics, and the A/B producer.
//!
//! What is checked: `serve` over the secured connection reports exactly what `replay` reports
//! for the same events; a wrong password or a missing client certificate leaves `serve`
//! unready, logging the reason, with nothing committed; secrets come from files and the
//! environment and appear in no output (librdkafka's security debug log included); and
//! `check-config` names the key of a misspelt mechanism.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, Producer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use serde_json::{json, Value};

const PARTITIONS: i32 = 2;
const IMPRESSIONS: usize = 1500;
const IMP_TOPIC: &str = "imp";
const ENG_TOPIC: &str = "eng";
const OUTPUT_TOPIC: &str = "ab-output";
const TOPICS: &[(&str, i32)] = &[(IMP_TOPIC, PARTITIONS), (ENG_TOPIC, PARTITIONS), (OUTPUT_TOPIC, 1)];

/// The broker's SCRAM user. The password is one of [`TEST_SECRETS`], which no daemon output
/// may contain.
const USER: &str = "rankpulse";
const PASSWORD: &str = TEST_SECRETS[0];
const KEY_PASSPHRASE: &str = TEST_SECRETS[1];

/// The test's events, (partition, payload) per topic: two variants of experiment `x`, up to
/// three engagements per impression, five minutes in the past so that every window closes.
fn events() -> (Messages, Messages) {
    let t0 = chrono::Utc::now().timestamp_millis() - 300_000;
    let (mut impressions, mut engagements) = (Vec::new(), Vec::new());
    for i in 0..IMPRESSIONS {
        let t = t0 + i as i64 * 20;
        let partition = (i % PARTITIONS as usize) as i32;
        let docs: Vec<String> = (0..10).map(|r| format!("d{}", (i * 7 + r * 13) % 97)).collect();
        let variant = ["control", "treatment"][i % 2];
        let imp = json!({"query_id": format!("q{i}"), "timestamp": t, "results": docs, "experiment": "x", "variant": variant});
        impressions.push((partition, imp.to_string()));
        for j in 0..(i * 31 % 4) {
            let rank = (i * 3 + j * 5) % (4 + i % 2 * 6);
            let action = ["click", "click", "add_to_cart", "purchase"][(i + j) % 4];
            let e = json!({"query_id": format!("q{i}"), "timestamp": t + 100 + j as i64 * 50, "doc_id": docs[rank], "action": action, "event_id": format!("e{i}-{j}")});
            engagements.push((partition, e.to_string()));
        }
    }
    (impressions, engagements)
}

/// A client configuration for the test's own producer and offset reader.
fn client(bootstrap: &str, properties: &[(&str, String)]) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", bootstrap);
    for (key, value) in properties {
        config.set(*key, value);
    }
    config
}

fn produce(bootstrap: &str, properties: &[(&str, String)], topics: &[(&str, &Messages)]) {
    let producer: BaseProducer = client(bootstrap, properties).create().unwrap();
    for (topic, messages) in topics {
        for (partition, payload) in messages.iter() {
            send_queued(&producer, topic, *partition, payload);
        }
    }
    producer.flush(Duration::from_secs(60)).expect("the secured broker did not take the events");
}

/// The group's committed offsets per (topic, partition); absent where nothing is committed.
fn committed(bootstrap: &str, properties: &[(&str, String)], group: &str) -> BTreeMap<(String, i32), i64> {
    let consumer: BaseConsumer = client(bootstrap, properties).set("group.id", group).create().unwrap();
    let mut partitions = TopicPartitionList::new();
    for topic in [IMP_TOPIC, ENG_TOPIC] {
        for p in 0..PARTITIONS {
            partitions.add_partition(topic, p);
        }
    }
    let found = consumer.committed_offsets(partitions, Duration::from_secs(20)).unwrap();
    let offsets = found
        .elements()
        .iter()
        .filter_map(|e| match e.offset() {
            Offset::Offset(o) => Some(((e.topic().to_string(), e.partition()), o)),
            _ => None,
        })
        .collect();
    drop(found);
    offsets
}

/// The ids of the A/B records on the output topic, once there are `expected` distinct ones (or
/// after a minute).
fn published_ids(bootstrap: &str, properties: &[(&str, String)], expected: usize) -> BTreeSet<String> {
    let consumer: BaseConsumer = client(bootstrap, properties)
        .set("group.id", "published-ids")
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    consumer.subscribe(&[OUTPUT_TOPIC]).unwrap();
    let mut ids = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while ids.len() < expected && Instant::now() < deadline {
        if let Some(Ok(message)) = consumer.poll(Duration::from_millis(200)) {
            ids.insert(String::from_utf8_lossy(message.key().unwrap_or_default()).into_owned());
        }
    }
    ids
}

/// `serve`'s configuration: the test's join and windows, the A/B output topic, and `security`
/// (TOML of `[kafka.properties]` and the secret tables).
fn sections(group: &str, security: &str) -> String {
    format!(
        r#"
[kafka]
group_id = "{group}"
impressions_topic = "{IMP_TOPIC}"
engagements_topic = "{ENG_TOPIC}"
{security}
[join]
attribution_window = "2s"
max_out_of_orderness = "1s"
idle_timeout = "3s"
[metrics]
cutoffs = [1, 5, 10]
windows = ["10s"]
[state]
checkpoint_interval = "500ms"
changelog_replication_factor = 1
[ab]
output_topic = "{OUTPUT_TOPIC}"
"#
    )
}

/// `[kafka.properties]` TOML of `properties`, plus `extra` lines (the secret tables).
fn security_toml(properties: &[(&str, String)], extra: &str) -> String {
    let mut toml = String::from("[kafka.properties]\n\"session.timeout.ms\" = \"6000\"\n");
    for (key, value) in properties {
        toml.push_str(&format!("{key:?} = {value:?}\n"));
    }
    toml + extra
}

fn finished(m: &BTreeMap<String, f64>, consumed: [usize; 2]) -> bool {
    let total = |topic: &str| m.get(&series("rankpulse_events_consumed_total", &[("topic", topic)])).copied();
    total(IMP_TOPIC) == Some(consumed[0] as f64)
        && total(ENG_TOPIC) == Some(consumed[1] as f64)
        && m.get("rankpulse_pending_impressions") == Some(&0.0)
        && m.get("rankpulse_held_engagements") == Some(&0.0)
}

/// Runs `serve` with `security` against `kafka` until it has finalized every event, and checks
/// its cumulative A/B report against `replay`'s over the same events, exactly; then stops it
/// and checks that it committed every offset. Returns everything the daemon wrote.
fn serve_equals_replay(
    kafka: &TlsKafka,
    dir: &Path,
    security: &str,
    env: &[(&str, &str)],
    probe: &[(&str, String)],
) -> String {
    let (impressions, engagements) = events();
    produce(&kafka.bootstrap(), probe, &[(IMP_TOPIC, &impressions), (ENG_TOPIC, &engagements)]);
    let port = free_port();
    let cfg = serve_config(dir, "secured", &kafka.bootstrap(), port, &sections("secured", security));

    let check = Command::new(BIN)
        .args(["check-config", "--config", cfg.to_str().unwrap()])
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let printed = format!("{}{}", String::from_utf8_lossy(&check.stdout), String::from_utf8_lossy(&check.stderr));
    assert!(check.status.success(), "check-config refused the working configuration:\n{printed}");
    assert_no_secret(&printed, "check-config");

    let daemon = Daemon::spawn_with_env(&["serve", "--config", cfg.to_str().unwrap()], env);
    let consumed = [impressions.len(), engagements.len()];
    let (_, metrics) = scrape_until(port, Duration::from_secs(120), |m| finished(m, consumed));
    assert_eq!(
        metrics
            .get(&series("rankpulse_impressions_total", &[("experiment", "x"), ("variant", "control")]))
            .copied()
            .unwrap_or(0.0)
            + metrics
                .get(&series("rankpulse_impressions_total", &[("experiment", "x"), ("variant", "treatment")]))
                .copied()
                .unwrap_or(0.0),
        IMPRESSIONS as f64
    );
    let imp_file = write_payloads(dir, "imp.jsonl", &impressions);
    let eng_file = write_payloads(dir, "eng.jsonl", &engagements);
    let replayed = replay_json(&imp_file, &eng_file, &cfg);
    let mut expected =
        replayed["experiments"].as_array().unwrap().iter().find(|r| r["experiment"] == "x").unwrap().clone();

    // The A/B API is experiment-wide: it reads every partition's sums back from the aggregates
    // topic, which the next snapshot brings up to date; its anytime-valid figures are complete
    // once the idle input has closed every window (replay closes them at the end of its files).
    let deadline = Instant::now() + Duration::from_secs(30);
    let served: Value =
        wait_for(deadline, Duration::from_millis(200), "the A/B API never covered every impression and look", || {
            let (status, body) = http_get(port, "/api/v1/experiments/x")?;
            let report: Value = serde_json::from_str(&body).ok().filter(|_| status == 200)?;
            let impressions: u64 =
                report["variants"].as_array()?.iter().filter_map(|v| v["impressions"].as_u64()).sum();
            let looks = report["sequential"]["looks"] == expected["sequential"]["looks"];
            (impressions == IMPRESSIONS as u64 && looks).then_some(report)
        });
    // replay reads files, which have no partitions (it reports partition 0); serve read both.
    assert_eq!(served["partitions"], json!([0, 1]));
    expected["partitions"] = served["partitions"].clone();
    assert_eq!(served, expected, "serve over the secured broker and replay disagree");

    // The A/B producer published every closed window through the same security settings.
    let windows: BTreeSet<String> = replayed["windows"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|w| w["experiments"].as_array().unwrap().iter())
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect();
    assert!(windows.len() >= 3, "{windows:?}");
    assert_eq!(published_ids(&kafka.bootstrap(), probe, windows.len()), windows);

    let (status, _, output) = daemon.terminate_with_output(Duration::from_secs(20));
    assert!(status.success(), "{output}");
    let offsets = committed(&kafka.bootstrap(), probe, "secured");
    for (topic, messages) in [(IMP_TOPIC, &impressions), (ENG_TOPIC, &engagements)] {
        for p in 0..PARTITIONS {
            let produced = messages.iter().filter(|(q, _)| *q == p).count() as i64;
            assert_eq!(offsets.get(&(topic.to_string(), p)), Some(&produced), "{topic}/{p} committed");
        }
    }
    output
}

/// Starts `serve` that the broker must refuse, waits until its log says why (`reason`), and
/// checks that it stays unready and commits nothing. Returns its output.
fn refused(
    kafka: &TlsKafka,
    dir: &Path,
    security: &str,
    env: &[(&str, &str)],
    reason: &str,
    probe: &[(&str, String)],
) -> String {
    let port = free_port();
    let cfg = serve_config(dir, "refused", &kafka.bootstrap(), port, &sections("refused", security));
    let daemon = Daemon::spawn_with_env(&["serve", "--config", cfg.to_str().unwrap()], env);
    let deadline = Instant::now() + Duration::from_secs(60);
    wait_for(deadline, Duration::from_millis(200), &format!("serve never logged {reason:?}"), || {
        daemon.output().contains(reason).then_some(())
    });
    // A few more seconds: still unready, as librdkafka retries.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(http_get(port, "/readyz").map(|r| r.0), Some(503), "a refused replica is not ready");
    let (status, _, output) = daemon.terminate_with_output(Duration::from_secs(20));
    assert!(status.success(), "{output}");
    assert!(committed(&kafka.bootstrap(), probe, "refused").is_empty(), "a refused replica committed offsets");
    output
}

/// Mutual TLS: stunnel requires a client certificate signed by the test CA. The client key is
/// encrypted, its passphrase read from a file (`ssl.key.password`).
#[test]
fn mutual_tls_consumes_commits_and_publishes_exactly() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new(dir.path());
    let encrypted_key = dir.path().join("client-encrypted.key");
    let passphrase_file = dir.path().join("key-passphrase");
    std::fs::write(&passphrase_file, format!("{KEY_PASSPHRASE}\n")).unwrap();
    let out = Command::new("openssl")
        .args(["pkey", "-in", pki.client_key.to_str().unwrap(), "-aes256", "-out", encrypted_key.to_str().unwrap()])
        .args(["-passout", &format!("file:{}", passphrase_file.display())])
        .output()
        .expect("openssl");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let kafka = TlsKafka::start(dir.path(), &pki, ClientCerts::Required, &[], TOPICS);

    let mut probe = vec![("security.protocol", "SSL".to_string())];
    probe.extend(tls_properties(&pki, true));
    let serve = vec![
        ("security.protocol", "SSL".to_string()),
        ("ssl.ca.location", pki.ca_cert.display().to_string()),
        ("ssl.certificate.location", pki.client_cert.display().to_string()),
        ("ssl.key.location", encrypted_key.display().to_string()),
        ("debug", "security".to_string()),
    ];
    let secrets =
        format!("[kafka.properties_from_file]\n\"ssl.key.password\" = {:?}\n", passphrase_file.display().to_string());
    let output = serve_equals_replay(&kafka, dir.path(), &security_toml(&serve, &secrets), &[], &probe);
    assert!(output.contains("consuming"), "{output}");

    // `produce --config` takes the same settings: its traffic arrives through the TLS front.
    let high_watermark = || {
        let consumer: BaseConsumer = client(&kafka.bootstrap(), &probe).create().unwrap();
        (0..PARTITIONS)
            .map(|p| consumer.fetch_watermarks(IMP_TOPIC, p, Duration::from_secs(10)).unwrap().1)
            .sum::<i64>()
    };
    let before = high_watermark();
    let cfg = dir.path().join("secured.toml");
    let out = Command::new(BIN)
        .args(["produce", "--config", cfg.to_str().unwrap(), "--rate", "100", "--duration", "2"])
        .output()
        .unwrap();
    let printed = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{printed}");
    assert_no_secret(&printed, "produce");
    assert!(high_watermark() >= before + 100, "produce --config wrote nothing through TLS:\n{printed}");

    // Without a client certificate the TLS front refuses the connection.
    let no_cert =
        vec![("security.protocol", "SSL".to_string()), ("ssl.ca.location", pki.ca_cert.display().to_string())];
    let output = refused(&kafka, dir.path(), &security_toml(&no_cert, ""), &[], "certificate required", &probe);
    assert!(output.contains("the TLS connection failed: check ssl.ca.location"), "{output}");
    let stunnel = std::fs::read_to_string(&kafka.stunnel_log).unwrap();
    assert!(stunnel.contains("peer did not return a certificate"), "stunnel's log:\n{stunnel}");
}

/// SASL/SCRAM-SHA-512 inside TLS, the usual managed-Kafka setup, with the password from the
/// environment; then a wrong password from a file.
#[test]
fn sasl_ssl_with_scram_consumes_commits_and_publishes_exactly() {
    if !tansu_has_sqlite() {
        assert!(std::env::var_os("CI").is_none(), "CI needs a tansu with sqlite storage (tests/run.sh installs it)");
        eprintln!("SKIPPED: this tansu has no sqlite storage for SCRAM users (tests/run.sh installs one that has)");
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new(dir.path());
    let kafka = TlsKafka::start(dir.path(), &pki, ClientCerts::NotAsked, &[(USER, PASSWORD)], TOPICS);
    let sasl = |password: Option<&str>| {
        let mut properties = vec![
            ("security.protocol", "SASL_SSL".to_string()),
            ("sasl.mechanisms", "SCRAM-SHA-512".to_string()),
            ("sasl.username", USER.to_string()),
        ];
        properties.extend(tls_properties(&pki, false));
        if let Some(password) = password {
            properties.push(("sasl.password", password.to_string()));
        }
        properties
    };
    let probe = sasl(Some(PASSWORD));
    let mut serve = sasl(None);
    serve.push(("debug", "security".to_string()));
    let from_env = "[kafka.properties_from_env]\n\"sasl.password\" = \"RANKPULSE_TEST_KAFKA_PASSWORD\"\n";
    let output = serve_equals_replay(
        &kafka,
        dir.path(),
        &security_toml(&serve, from_env),
        &[("RANKPULSE_TEST_KAFKA_PASSWORD", PASSWORD)],
        &probe,
    );
    assert!(output.contains("consuming"), "{output}");

    let wrong = dir.path().join("wrong-password");
    std::fs::write(&wrong, format!("{}\n", TEST_SECRETS[2])).unwrap();
    let from_file = format!("[kafka.properties_from_file]\n\"sasl.password\" = {:?}\n", wrong.display().to_string());
    let output =
        refused(&kafka, dir.path(), &security_toml(&serve, &from_file), &[], "SASL authentication error", &probe);
    assert!(output.contains("SCRAM"), "the log names the SASL failure:\n{output}");
    assert!(output.contains("the brokers refused rankpulse's credentials: check sasl.mechanisms"), "{output}");
}

/// SASL OAUTHBEARER with `sasl.oauthbearer.method = oidc`: librdkafka (built with libcurl)
/// fetches a token from the identity provider's token endpoint with the client credentials,
/// the secret read from a file. The endpoint here is the test's own HTTP listener, which
/// records the request and answers with a token; tansu 0.6 cannot validate OAUTHBEARER tokens
/// (tests/common/secure.rs), so what the broker makes of it is not checked.
/// Built with `--features oidc`, as the test command builds.
#[cfg(feature = "oidc")]
#[test]
fn oauthbearer_oidc_fetches_a_token_with_the_client_credentials() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new(dir.path());
    let kafka = TlsKafka::start(dir.path(), &pki, ClientCerts::NotAsked, &[], TOPICS);
    let endpoint = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let token_url = format!("http://{}/oauth2/token", endpoint.local_addr().unwrap());
    let (requests, received) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // An unsigned JWT with the claims librdkafka checks (sub, exp), valid for an hour.
        let exp = chrono::Utc::now().timestamp() + 3600;
        let part = |json: &str| base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, json);
        let jwt = format!(
            "{}.{}.c2ln",
            part(r#"{"alg":"RS256","typ":"JWT"}"#),
            part(&format!(r#"{{"sub":"rankpulse","exp":{exp}}}"#))
        );
        let body = format!(r#"{{"access_token":"{jwt}","token_type":"bearer","expires_in":3600}}"#);
        for stream in endpoint.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut request = Vec::new();
            let mut buffer = [0u8; 4096];
            // Headers, then the form body (its length from Content-Length).
            while let Ok(n) = std::io::Read::read(&mut stream, &mut buffer) {
                request.extend_from_slice(&buffer[..n]);
                let text = String::from_utf8_lossy(&request);
                if let Some((head, body)) = text.split_once("\r\n\r\n") {
                    let length = head
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                        })
                        .unwrap_or(0);
                    if body.len() >= length {
                        break;
                    }
                }
                if n == 0 {
                    break;
                }
            }
            let reply = format!("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
            let _ = std::io::Write::write_all(&mut stream, reply.as_bytes());
            if requests.send(String::from_utf8_lossy(&request).into_owned()).is_err() {
                return;
            }
        }
    });
    let secret_file = dir.path().join("client-secret");
    std::fs::write(&secret_file, format!("{PASSWORD}\n")).unwrap();
    let mut properties = vec![
        ("security.protocol", "SASL_SSL".to_string()),
        ("sasl.mechanisms", "OAUTHBEARER".to_string()),
        ("sasl.oauthbearer.method", "oidc".to_string()),
        ("sasl.oauthbearer.client.id", "rankpulse".to_string()),
        ("sasl.oauthbearer.token.endpoint.url", token_url),
        ("sasl.oauthbearer.scope", "kafka".to_string()),
    ];
    properties.extend(tls_properties(&pki, false));
    let secrets = format!(
        "[kafka.properties_from_file]\n\"sasl.oauthbearer.client.secret\" = {:?}\n",
        secret_file.display().to_string()
    );
    let port = free_port();
    let cfg = serve_config(
        dir.path(),
        "oidc",
        &kafka.bootstrap(),
        port,
        &sections("oidc", &security_toml(&properties, &secrets)),
    );
    let daemon = Daemon::spawn(&["serve", "--config", cfg.to_str().unwrap()]);
    let request =
        received.recv_timeout(Duration::from_secs(30)).expect("serve never asked the token endpoint for a token");
    let (status, _, _) = daemon.terminate_with_output(Duration::from_secs(20));
    assert!(status.success());

    let head = request.split("\r\n\r\n").next().unwrap().to_ascii_lowercase();
    assert!(request.starts_with("POST /oauth2/token "), "{request}");
    let credentials =
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, format!("rankpulse:{PASSWORD}"));
    assert!(head.contains(&format!("authorization: basic {}", credentials.to_ascii_lowercase())), "{request}");
    let body = request.split_once("\r\n\r\n").unwrap().1;
    assert!(body.contains("grant_type=client_credentials") && body.contains("scope=kafka"), "{request}");
}

/// `check-config` runs librdkafka's own checks: a misspelt mechanism and a key file that does
/// not exist are named by key; a secret file that cannot be read is named by key and path; the
/// printed configuration shows secrets redacted.
#[test]
fn check_config_names_the_key_and_never_prints_a_secret() {
    let dir = tempfile::tempdir().unwrap();
    let check = |name: &str, toml: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, toml).unwrap();
        let out = Command::new(BIN).args(["check-config", "--config", path.to_str().unwrap()]).output().unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert_no_secret(&text, name);
        (out.status.success(), text)
    };
    let sasl = |mechanism: &str| {
        format!("[kafka.properties]\n\"security.protocol\" = \"SASL_SSL\"\n\"sasl.mechanisms\" = \"{mechanism}\"\n\"sasl.username\" = \"u\"\n\"sasl.password\" = \"{PASSWORD}\"\n")
    };
    let (ok, text) = check("misspelt.toml", &sasl("SCRAM-SHA-265"));
    assert!(!ok);
    assert!(
        text.contains(
            "configuration key `kafka.properties.\"sasl.mechanisms\"`: unknown SASL mechanism \"SCRAM-SHA-265\""
        ),
        "{text}"
    );

    let (ok, text) = check("valid.toml", &sasl("SCRAM-SHA-256"));
    assert!(ok, "{text}");
    assert!(text.contains("\"sasl.password\" = \"<redacted>\""), "{text}");

    let missing_key = "[kafka.properties]\n\"security.protocol\" = \"SSL\"\n\"ssl.certificate.location\" = \"/nonexistent/client.pem\"\n\"ssl.key.location\" = \"/nonexistent/client.key\"\n";
    let (ok, text) = check("missing-key.toml", missing_key);
    assert!(!ok);
    assert!(
        text.contains("configuration key `kafka.properties.\"ssl.certificate.location\"`: librdkafka refuses"),
        "{text}"
    );

    let missing_secret = "[kafka.properties_from_file]\n\"sasl.password\" = \"/nonexistent/kafka-password\"\n";
    let (ok, text) = check("missing-secret.toml", missing_secret);
    assert!(!ok);
    assert!(
        text.contains(
            "configuration key `kafka.properties_from_file.\"sasl.password\"`: cannot read /nonexistent/kafka-password"
        ),
        "{text}"
    );

    // Mutual TLS from a PKCS#12 keystore, its password from the environment: librdkafka opens
    // it when the client is built, so a wrong password fails the check.
    let pki = TestPki::new(dir.path());
    let keystore = dir.path().join("client.p12");
    let out = Command::new("openssl")
        .args([
            "pkcs12",
            "-export",
            "-in",
            pki.client_cert.to_str().unwrap(),
            "-inkey",
            pki.client_key.to_str().unwrap(),
        ])
        .args(["-out", keystore.to_str().unwrap(), "-passout", &format!("pass:{KEY_PASSPHRASE}")])
        .output()
        .expect("openssl");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let p12 = |variable: &str| {
        let path = dir.path().join("p12.toml");
        std::fs::write(&path, format!("[kafka.properties]\n\"security.protocol\" = \"SSL\"\n\"ssl.keystore.location\" = {:?}\n[kafka.properties_from_env]\n\"ssl.keystore.password\" = \"{variable}\"\n", keystore.display().to_string())).unwrap();
        let out = Command::new(BIN)
            .args(["check-config", "--config", path.to_str().unwrap()])
            .env("RANKPULSE_TEST_P12_RIGHT", KEY_PASSPHRASE)
            .env("RANKPULSE_TEST_P12_WRONG", TEST_SECRETS[2])
            .output()
            .unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert_no_secret(&text, "check-config");
        (out.status.success(), text)
    };
    let (ok, text) = p12("RANKPULSE_TEST_P12_RIGHT");
    assert!(ok, "{text}");
    let (ok, text) = p12("RANKPULSE_TEST_P12_WRONG");
    assert!(!ok);
    assert!(
        text.contains("configuration key `kafka.properties.\"ssl.keystore.location\"`: librdkafka refuses"),
        "{text}"
    );

    let oidc = "[kafka.properties]\n\"security.protocol\" = \"SASL_SSL\"\n\"sasl.mechanisms\" = \"OAUTHBEARER\"\n\"sasl.oauthbearer.method\" = \"oidc\"\n\"sasl.oauthbearer.client.id\" = \"rankpulse\"\n\"sasl.oauthbearer.token.endpoint.url\" = \"https://idp.example/token\"\n[kafka.properties_from_env]\n\"sasl.oauthbearer.client.secret\" = \"HOME\"\n";
    let (ok, text) = check("oidc.toml", oidc);
    if cfg!(feature = "oidc") {
        assert!(ok, "OAUTHBEARER with OIDC is built in (libcurl):\n{text}");
    } else {
        assert!(
            !ok && text.contains("--features oidc"),
            "without the oidc feature, OIDC is refused saying how to build it:\n{text}"
        );
    }
}

/// The security tests each run a broker, stunnel and daemons: one at a time on 2 cores.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
