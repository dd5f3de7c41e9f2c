//! A Kafka broker for a test: librdkafka's mock cluster in this process, or tansu in its own.

use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;

use super::{create_state_topics, free_port, wait_for};

/// A broker for the test: in this process, or in its own.
pub enum Broker {
    /// librdkafka's mock cluster. It is `!Send`: a test keeps it on its own thread.
    Mock(MockCluster<'static, DefaultProducerContext>),
    /// tansu with its memory storage, killed (it ignores SIGTERM) when the test drops it.
    Tansu { child: Child, port: u16 },
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Broker::Tansu { child, .. } = self {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Broker {
    pub fn bootstrap(&self) -> String {
        match self {
            Broker::Mock(cluster) => cluster.bootstrap_servers(),
            Broker::Tansu { port, .. } => format!("127.0.0.1:{port}"),
        }
    }

    pub fn create_topic(&self, name: &str, partitions: i32) {
        match self {
            Broker::Mock(cluster) => cluster.create_topic(name, partitions, 1).unwrap(),
            Broker::Tansu { port, .. } => {
                let status = Command::new("tansu")
                    .args(["topic", "create", name, "--partitions", &partitions.to_string()])
                    .args(["--broker", &format!("tcp://127.0.0.1:{port}")])
                    .status()
                    .expect("running tansu topic create");
                assert!(status.success(), "tansu topic create {name} failed");
            }
        }
    }

    /// A consumer group's state topics on the mock cluster, which has no CreateTopics (see
    /// [`create_state_topics`]); on tansu rankpulse creates them itself, which the tests rely on.
    pub fn create_state_topics(&self, group: &str, partitions: i32) {
        if let Broker::Mock(cluster) = self {
            create_state_topics(cluster, group, partitions);
        }
    }

    /// tansu on a free port with its memory storage, once it accepts connections; `None` (a
    /// skip) outside CI when tansu is not installed.
    pub fn tansu() -> Option<Broker> {
        if Command::new("tansu").arg("--version").output().is_err() {
            assert!(std::env::var_os("CI").is_none(), "tansu is required in CI (tests/run.sh installs it)");
            eprintln!("SKIPPED: tansu not installed (cargo install tansu --locked --features dynostore)");
            return None;
        }
        let port = free_port();
        let url = format!("tcp://127.0.0.1:{port}");
        let child = Command::new("tansu")
            .args(["broker", "--listener-url", &url, "--advertised-listener-url", &url])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting tansu");
        let broker = Broker::Tansu { child, port };
        let deadline = Instant::now() + Duration::from_secs(30);
        let listening = || TcpStream::connect(("127.0.0.1", port)).ok().map(drop);
        wait_for(deadline, Duration::from_millis(100), &format!("tansu did not listen on {port}"), listening);
        Some(broker)
    }
}
