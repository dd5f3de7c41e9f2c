//! What a test feeds the binary: its configuration, event files, and messages on a broker.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// (partition, payload) messages of one topic, in production order.
pub type Messages = Vec<(i32, String)>;

/// Writes `dir/{name}.toml` for `rankpulse serve`: the test's own `sections` (TOML) plus the
/// keys that differ from run to run, which `sections` leaves out: `kafka.brokers` and
/// `http.listen` on `port`.
pub fn serve_config(dir: &Path, name: &str, brokers: &str, port: u16, sections: &str) -> PathBuf {
    let mut config: toml::Table = toml::from_str(sections).unwrap_or_else(|e| panic!("{name}: {e}"));
    for (section, key, value) in
        [("kafka", "brokers", brokers.to_string()), ("http", "listen", format!("127.0.0.1:{port}"))]
    {
        let table = config.entry(section).or_insert_with(|| toml::Table::new().into());
        let table = table.as_table_mut().unwrap_or_else(|| panic!("{name}: {section} is not a table"));
        assert!(table.insert(key.into(), value.into()).is_none(), "{name}: {section}.{key} is set per run");
    }
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, toml::to_string(&config).unwrap()).unwrap();
    path
}

/// Writes the payloads of `messages` to `dir/name`, one a line, as `replay` reads them.
pub fn write_payloads(dir: &Path, name: &str, messages: &[(i32, String)]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, messages.iter().map(|(_, p)| format!("{p}\n")).collect::<String>()).unwrap();
    path
}

/// Produces (partition, payload) messages to each topic and waits until the brokers have them.
pub fn produce_to_partitions(brokers: &str, topics: &[(&str, &[(i32, String)])]) {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let producer: BaseProducer =
        rdkafka::config::ClientConfig::new().set("bootstrap.servers", brokers).create().unwrap();
    for (topic, messages) in topics {
        for (partition, payload) in *messages {
            producer.send(BaseRecord::<(), str>::to(topic).partition(*partition).payload(payload.as_str())).unwrap();
        }
    }
    producer.flush(Duration::from_secs(10)).unwrap();
}

/// Queues one message for partition `partition` of `topic`, polling the producer while its
/// queue is full (a broker outage, or producing faster than the broker takes).
pub fn send_queued(producer: &rdkafka::producer::BaseProducer, topic: &str, partition: i32, payload: &str) {
    use rdkafka::producer::{BaseRecord, Producer};
    while producer.send(BaseRecord::<(), str>::to(topic).partition(partition).payload(payload)).is_err() {
        producer.poll(Duration::from_millis(10));
    }
}

/// Creates a consumer group's state topics (`<group>-changelog`, `<group>-aggregates`) on the
/// mock cluster, which has no CreateTopics for rankpulse to create them itself: with the input
/// topics' partition count, as rankpulse would.
pub fn create_state_topics<C: rdkafka::ClientContext>(
    cluster: &rdkafka::mocking::MockCluster<'_, C>,
    group: &str,
    partitions: i32,
) {
    for suffix in ["changelog", "aggregates"] {
        cluster.create_topic(&format!("{group}-{suffix}"), partitions, 1).unwrap();
    }
}
