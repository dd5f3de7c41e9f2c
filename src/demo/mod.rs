//! The demo: librdkafka's in-process mock cluster, and the traffic it carries.
//!
//! | file | does |
//! |---|---|
//! | `mod.rs` | [`DemoCluster`]: the mock cluster on its own thread; [`produce_live`]: generated traffic in real time (the demo's cluster and `rankpulse produce`) |
//! | `traffic.rs` | [`TrafficGenerator`]: the realistic A/B traffic; [`write_traffic`]: the same as files (`rankpulse generate`) |
//! | `head.rs` | head queries with hidden grades, their impressions and their judgment list (`rankpulse generate --judgments`) |

mod head;
mod traffic;

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

use crate::kafka_log::ProducerLog;
use crate::shutdown::Shutdown;
pub use traffic::{
    write_traffic, write_traffic_with, Extras, FaultRate, ScheduledEngagement, TrafficGenerator, TrafficSummary,
    DUEL_AB_EXPERIMENT, DUEL_EXPERIMENT, DUEL_RANKERS, EXPERIMENT,
};

/// Partitions of the demo's topics.
pub const PARTITIONS: i32 = 4;

/// The traffic the demo's topics hold when the pipeline starts: the last minute's, produced at
/// once (searches and their engagements in event-time order, as live) before the live traffic,
/// as a pipeline started against live topics finds them. A search's figures are final an
/// attribution window (30 s in the demo) after it, so without a backlog a newcomer waited that
/// long for the first figures; with it they come as soon as the backlog is read, seconds after
/// the start.
pub const BACKLOG: Duration = Duration::from_secs(60);

/// The most searches a backlog holds, whatever the rate: the mock cluster keeps at most 5 MB of
/// each partition (librdkafka's `rd_kafka_mock_partition_init`) and drops the oldest messages
/// of a fuller one, unread. 30,000 searches with their interleaving duels are about 3.7 MB of
/// each of the demo's partitions; a minute's at `--rate 1000` was about 7 MB, and its oldest
/// 20 s were gone before the pipeline had joined the group (BENCHMARKS.md, issue 55).
const BACKLOG_SEARCHES: u32 = 30_000;

/// The backlog at `impressions_per_second`: [`BACKLOG`], shorter at rates above 500 a second.
pub fn backlog(impressions_per_second: u32) -> Duration {
    let held = Duration::from_secs_f64(f64::from(BACKLOG_SEARCHES) / f64::from(impressions_per_second.max(1)));
    BACKLOG.min(held)
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// The mock cluster and generator, on their own thread (the mock cluster is `!Send`).
pub struct DemoCluster {
    /// Where the pipeline connects.
    pub bootstrap_servers: String,
    /// The cluster's own stop signal, not the pipeline's: the cluster must outlive the
    /// pipeline's shutdown, whose final commit still needs it.
    stop: Shutdown,
    /// The cluster's thread, joined on [`DemoCluster::stop`].
    thread: Option<JoinHandle<()>>,
}

#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("starting the in-process Kafka cluster: {0}")]
    Cluster(String),
}

impl DemoCluster {
    /// Starts the cluster with both topics and produces `impressions_per_second` of traffic.
    pub fn start(
        impressions_topic: &str,
        engagements_topic: &str,
        impressions_per_second: u32,
        seed: u64,
        faults: FaultRate,
    ) -> Result<Self, DemoError> {
        let stop = Shutdown::new();
        let (ready_tx, ready_rx) = mpsc::channel::<Result<String, String>>();
        let topics = (impressions_topic.to_string(), engagements_topic.to_string());
        let thread_stop = stop.clone();
        let thread = std::thread::Builder::new()
            .name("demo-kafka".into())
            .spawn(move || {
                if let Err(e) =
                    run_cluster(&topics.0, &topics.1, (impressions_per_second, seed, faults), &thread_stop, &ready_tx)
                {
                    let _ = ready_tx.send(Err(e));
                }
            })
            .map_err(|e| DemoError::Cluster(e.to_string()))?;
        match ready_rx.recv() {
            Ok(Ok(bootstrap_servers)) => Ok(DemoCluster { bootstrap_servers, stop, thread: Some(thread) }),
            Ok(Err(e)) => Err(DemoError::Cluster(e)),
            Err(_) => Err(DemoError::Cluster("the cluster thread exited".into())),
        }
    }

    /// Stops the generator, then the cluster.
    pub fn stop(mut self) {
        self.stop.trigger();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for DemoCluster {
    fn drop(&mut self) {
        self.stop.trigger();
    }
}

fn run_cluster(
    impressions_topic: &str,
    engagements_topic: &str,
    (impressions_per_second, seed, faults): (u32, u64, FaultRate),
    stop: &Shutdown,
    ready: &mpsc::Sender<Result<String, String>>,
) -> Result<(), String> {
    let cluster = MockCluster::new(3).map_err(|e| e.to_string())?;
    for topic in [impressions_topic, engagements_topic] {
        cluster.create_topic(topic, PARTITIONS, 1).map_err(|e| e.to_string())?;
    }
    let bootstrap = cluster.bootstrap_servers();
    let producer: BaseProducer<ProducerLog> = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("linger.ms", "5")
        .create_with_context(ProducerLog::new("demo producer", &bootstrap))
        .map_err(|e| e.to_string())?;
    let _ = ready.send(Ok(bootstrap));
    produce_live(
        &producer,
        TrafficGenerator::new(seed).with_devices(),
        (impressions_topic, engagements_topic),
        (impressions_per_second, backlog(impressions_per_second)),
        faults,
        stop,
    );
    let _ = producer.flush(Duration::from_secs(2));
    drop(producer);
    drop(cluster);
    Ok(())
}

/// Produces generated traffic in real time, impressions keyed by `query_id` and each engagement
/// when it happens, and `faults` of the impressions followed by a malformed message (keyed
/// `malformed`), until `stop` is triggered: the demo's cluster and `rankpulse produce` share it.
/// The traffic of the `backlog` before the call comes first, as fast as it can be produced.
pub fn produce_live(
    producer: &BaseProducer<ProducerLog>,
    mut generator: TrafficGenerator,
    (impressions_topic, engagements_topic): (&str, &str),
    (impressions_per_second, backlog): (u32, Duration),
    faults: FaultRate,
    stop: &Shutdown,
) {
    let send = |topic: &str, key: &str, payload: &str| send(producer, topic, key, payload, stop);
    let mut scheduled: BinaryHeap<Reverse<ScheduledEngagement>> = BinaryHeap::new();
    let tick = Duration::from_millis(10);
    let tick_ms = tick.as_millis() as i64;
    let per_tick = f64::from(impressions_per_second) * tick.as_secs_f64();
    let mut owed = 0.0;
    // The event time of this tick's traffic: the backlog's start, then a tick further each time
    // (without sleeping) until it has caught up with the wall clock, whose it is from then on.
    let mut now = now_ms() - backlog.as_millis() as i64;
    while !stop.is_triggered() {
        owed += per_tick;
        while owed >= 1.0 {
            owed -= 1.0;
            let (query_id, impression, engagements) = generator.impression(now);
            send(impressions_topic, &query_id, &impression);
            scheduled.extend(engagements.into_iter().map(Reverse));
            if let Some(bad) = generator.maybe_malformed(faults) {
                send(impressions_topic, "malformed", bad);
            }
            if let Some((query_id, duel, engagements)) = generator.duel(now) {
                send(impressions_topic, &query_id, &duel);
                scheduled.extend(engagements.into_iter().map(Reverse));
            }
        }
        while scheduled.peek().is_some_and(|Reverse(e)| e.due_ms <= now) {
            let Reverse(e) = scheduled.pop().expect("peeked");
            send(engagements_topic, &e.query_id, &e.payload);
        }
        producer.poll(Duration::ZERO);
        if now + tick_ms <= now_ms() {
            now += tick_ms;
        } else {
            std::thread::sleep(tick);
            now = now_ms();
        }
    }
    // The clicks of the last searches are not due yet: send them now (they carry their own
    // event time) rather than let those searches look abandoned.
    while let Some(Reverse(e)) = scheduled.pop() {
        send(engagements_topic, &e.query_id, &e.payload);
    }
}

fn send(producer: &BaseProducer<ProducerLog>, topic: &str, key: &str, payload: &str, stop: &Shutdown) {
    let mut record = BaseRecord::to(topic).key(key).payload(payload);
    // A full local queue means the brokers do not keep up (or are down): wait for room rather
    // than drop, unless asked to stop.
    loop {
        match producer.send(record) {
            Ok(()) => return,
            Err((_, returned)) => {
                if stop.is_triggered() {
                    return;
                }
                producer.poll(Duration::from_millis(10));
                record = returned;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backlog_is_a_minute_unless_that_is_more_searches_than_a_partition_keeps() {
        assert_eq!(backlog(200), BACKLOG);
        assert_eq!(backlog(0), BACKLOG);
        assert_eq!(backlog(1000), Duration::from_secs(30));
        assert_eq!(backlog(30_000), Duration::from_secs(1));
    }
}
