//! Real brokers behind TLS for the security tests: tansu in its own process with Debian's
//! `stunnel4` in front of it as the TLS (and client-certificate) terminator, and tansu with
//! SCRAM users.
//!
//! tansu 0.6 accepts `--cert` but never wraps its listener in TLS (its acceptor is built and
//! unused), and its memory storage keeps no SCRAM credentials: SASL/SCRAM needs a tansu built
//! with the `libsql` feature and `sqlite://` storage, where `tansu user create` stores the
//! user before the broker is restarted with `--authentication` (the user cannot be created
//! afterwards: tansu's own client has no SASL). tansu must advertise stunnel's port, so that
//! the metadata sends clients back through the TLS front.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::certs::TestPki;
use super::{free_port, wait_for};

/// A process killed (SIGKILL: tansu ignores SIGTERM) and reaped when the test drops it.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_listening(port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let listening = || TcpStream::connect(("127.0.0.1", port)).ok().map(drop);
    wait_for(deadline, Duration::from_millis(100), &format!("{what} did not listen on {port}"), listening);
}

/// Whether the installed tansu can store SCRAM users (`Storage engines: ... libsql` in its
/// help); tests/run.sh installs one that can.
pub fn tansu_has_sqlite() -> bool {
    let help = Command::new("tansu").arg("--help").output().map(|o| o.stdout).unwrap_or_default();
    String::from_utf8_lossy(&help).lines().any(|l| l.starts_with("Storage engines:") && l.contains("libsql"))
}

/// Runs `tansu ARGS` (its command-line client) to completion, asserting success.
fn tansu_cli(args: &[&str]) {
    let out = Command::new("tansu").args(args).output().expect("running tansu");
    assert!(out.status.success(), "tansu {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// One Kafka broker reachable only through TLS: tansu on a loopback port of its own, with
/// stunnel in front of it on the port clients use.
pub struct TlsKafka {
    /// Declared first: dropped (killed) before the broker behind it.
    stunnel: Killed,
    broker: Killed,
    /// The port stunnel accepts TLS on, which tansu advertises.
    pub port: u16,
    /// tansu's own plaintext port, for its command-line client (topics, users).
    plain_port: u16,
    /// stunnel's log: a refused client certificate shows there.
    pub stunnel_log: PathBuf,
}

/// What the TLS front asks of clients.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum ClientCerts {
    /// Server-authenticated TLS only.
    NotAsked,
    /// Mutual TLS: a client without a certificate signed by the test CA is refused.
    Required,
}

/// SCRAM-SHA-512 users the broker knows, as (name, password).
pub type ScramUsers<'a> = &'a [(&'a str, &'a str)];

impl TlsKafka {
    /// tansu behind stunnel. With `scram_users`, tansu stores them in a sqlite database and
    /// then runs with `--authentication`: clients must then speak SASL/SCRAM inside the TLS.
    /// `topics` are created (name, partitions) before authentication is switched on.
    pub fn start(
        dir: &Path,
        pki: &TestPki,
        certs: ClientCerts,
        scram_users: ScramUsers,
        topics: &[(&str, i32)],
    ) -> TlsKafka {
        let (port, plain_port) = (free_port(), free_port());
        let listener = format!("tcp://127.0.0.1:{plain_port}");
        let advertised = format!("tcp://127.0.0.1:{port}");
        // A path relative to the broker's working directory: tansu 0.6 reads `sqlite:///abs`
        // as relative too.
        let storage = format!("sqlite://tansu-{port}.db");
        let start_broker = |authentication: bool| {
            let mut command = Command::new("tansu");
            command.args(["broker", "--listener-url", &listener, "--advertised-listener-url", &advertised]);
            if !scram_users.is_empty() {
                command.args(["--storage-engine", &storage]);
            }
            if authentication {
                command.arg("--authentication");
            }
            let log = std::fs::File::create(dir.join(format!("tansu-{port}.log"))).unwrap();
            let child = command
                .current_dir(dir)
                .stdout(Stdio::null())
                .stderr(Stdio::from(log))
                .spawn()
                .expect("starting tansu");
            let broker = Killed(child);
            wait_listening(plain_port, "tansu");
            broker
        };
        let broker_cli = format!("tcp://127.0.0.1:{plain_port}");
        let mut broker = start_broker(false);
        for (topic, partitions) in topics {
            tansu_cli(&["topic", "create", topic, "--partitions", &partitions.to_string(), "--broker", &broker_cli]);
        }
        if !scram_users.is_empty() {
            for (user, password) in scram_users {
                tansu_cli(&["user", "create", user, password, "--mechanism", "scram512", "--broker", &broker_cli]);
            }
            drop(broker);
            broker = start_broker(true);
        }

        let stunnel_log = dir.join(format!("stunnel-{port}.log"));
        let conf = dir.join(format!("stunnel-{port}.conf"));
        let verify = match certs {
            ClientCerts::NotAsked => String::new(),
            ClientCerts::Required => format!("CAfile = {}\nverify = 2\n", pki.ca_cert.display()),
        };
        std::fs::write(
            &conf,
            format!(
                "foreground = yes\npid =\noutput = {}\ndebug = 5\n[kafka]\naccept = 127.0.0.1:{port}\nconnect = 127.0.0.1:{plain_port}\ncert = {}\nkey = {}\n{verify}",
                stunnel_log.display(),
                pki.server_cert.display(),
                pki.server_key.display(),
            ),
        )
        .unwrap();
        let child = Command::new(stunnel_binary())
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting stunnel4 (Debian's stunnel4 package; tests/run.sh installs it)");
        let stunnel = Killed(child);
        wait_listening(port, "stunnel");
        TlsKafka { stunnel, broker, port, plain_port, stunnel_log }
    }

    /// The bootstrap address clients use: stunnel's.
    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

/// `stunnel4` (Debian's name) or `stunnel`.
fn stunnel_binary() -> &'static str {
    if Command::new("stunnel4").arg("-version").stderr(Stdio::null()).stdout(Stdio::null()).status().is_ok() {
        "stunnel4"
    } else {
        "stunnel"
    }
}

/// librdkafka properties of a test client for `kafka`, in the shape of `[kafka.properties]`.
pub fn tls_properties(pki: &TestPki, client_cert: bool) -> Vec<(&'static str, String)> {
    let mut properties = vec![("ssl.ca.location", pki.ca_cert.display().to_string())];
    if client_cert {
        properties.push(("ssl.certificate.location", pki.client_cert.display().to_string()));
        properties.push(("ssl.key.location", pki.client_key.display().to_string()));
    }
    properties
}
