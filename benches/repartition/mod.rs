//! Issue 39's figures: what the repartition path costs against co-partitioned input, in one
//! run on librdkafka's in-process cluster.
//!
//! - **throughput**: the demo's traffic (keyed by query id, 4 partitions) consumed by the real
//!   source straight from the raw topics (co-partitioned), and through the repartition stage
//!   (`repartition.mode = "always"`: decode, re-encode, produce idempotently, commit after the
//!   acknowledgements) and then the source on the internal topics. Events per second, and per
//!   CPU-second of every thread of the process but the mock cluster's (the stage's producer
//!   and consumer threads count: they are the path's cost); the stage's own thread apart.
//! - **latency**: then, with the backlog consumed, single impressions produced one at a time,
//!   each timed from its send until the engine has consumed it; the median of each path and
//!   their difference, the latency the stage adds; and, on the repartition path, until the
//!   stage has the acknowledgement that lets it commit the raw offset.

use std::time::{Duration, Instant};

use rankpulse::config::{Config, RepartitionMode};
use rankpulse::engine::{Engine, SharedEngine};
use rankpulse::shutdown::Shutdown;
use rdkafka::config::ClientConfig;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

use crate::{fmt, median, threads_cpu_seconds, traffic, Results, ENG_TOPIC, IMP_TOPIC};

const PARTITIONS: i32 = 4;
const RAW: [&str; 2] = ["rb-impressions", "rb-engagements"];
/// Impressions of demo traffic (with their engagements, about 2.4 messages each): within the
/// mock cluster's per-partition retention, twice over (raw and internal topics).
const IMPRESSIONS: u64 = 20_000;
const ROUNDS: usize = 3;
const PROBES: usize = 25;

/// Not the mock cluster's threads: they are the broker, which a real deployment does not pay.
fn not_the_broker(name: &str) -> bool {
    !name.starts_with("rdk:mock")
}

/// One path's figures.
struct Figures {
    /// Raw events through the path per second of wall time.
    events_per_second: f64,
    /// Raw events per CPU-second of every thread but the mock cluster's.
    events_per_cpu_second: f64,
    /// Raw events per CPU-second of the stage's own thread (the repartition path only).
    stage_events_per_cpu_second: Option<f64>,
    /// Send to consumed by the join, median of the probes.
    latency_ms: f64,
    /// Send to the stage's acknowledgement (when its raw offset may be committed).
    acknowledged_ms: f64,
}

fn config(brokers: &str, group: &str, mode: RepartitionMode) -> Config {
    let mut cfg = Config::default();
    cfg.kafka.brokers = brokers.into();
    cfg.kafka.group_id = group.into();
    cfg.kafka.impressions_topic = RAW[0].into();
    cfg.kafka.engagements_topic = RAW[1].into();
    cfg.join.attribution_window = "5s".parse().unwrap();
    cfg.join.max_out_of_orderness = "2s".parse().unwrap();
    cfg.repartition.mode = mode;
    // The mock cluster answers a fetch only when fetch.wait.max.ms (500 ms) expires, even when
    // data arrives sooner (a broker answers at once with fetch.min.bytes = 1): without this the
    // latencies are the mock's fetch cycle, not the paths'.
    cfg.kafka.properties.insert("fetch.wait.max.ms".into(), "5".into());
    cfg.repartition.replication_factor = 1;
    cfg
}

/// Consumes the backlog of `total` raw messages through one path, then times probes.
fn run_path(
    cluster: &MockCluster<'static, rdkafka::producer::DefaultProducerContext>,
    group: &str,
    repartition: bool,
    total: u64,
) -> Figures {
    let brokers = cluster.bootstrap_servers();
    let mode = if repartition { RepartitionMode::Always } else { RepartitionMode::Never };
    let cfg = config(&brokers, group, mode);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    if repartition {
        for topic in rankpulse::repartition::internal_topics(group) {
            cluster.create_topic(&topic, PARTITIONS, 1).unwrap();
        }
    }
    let plan = rankpulse::repartition::plan(&cfg, runtime.handle()).unwrap();
    let join = plan.join_config(&cfg);
    let engine = Engine::new(&join);
    let routing = engine.routing().clone();
    routing.decide(plan.decision.clone());
    let engine = SharedEngine::new(engine);
    let shutdown = Shutdown::new();
    let stage =
        repartition.then(|| rankpulse::repartition::spawn(&cfg, &plan, routing.clone(), shutdown.clone()).unwrap());
    let source = crate::common::spawn_source(join.kafka.clone(), engine.clone(), shutdown.clone(), None);
    let consumed = || engine.lock().counters().consumed.iter().sum::<u64>();
    // What the join must see: everything, or what the stage forwarded once it read everything
    // (a rebalance of the stage's group may re-send a little: a commit during the revoke can
    // fail with REBALANCE_IN_PROGRESS, and the join de-duplicates the copies).
    let expected = || {
        if !repartition {
            return Some(total);
        }
        let counts = routing.counts();
        let read: u64 = counts.stage_consumed.iter().sum();
        (read >= total).then(|| counts.stage_forwarded.iter().sum::<u64>())
    };
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut first = None;
    loop {
        let n = consumed();
        assert!(Instant::now() < deadline, "{group}: the join consumed {n} of {total}");
        if n > 0 || routing.counts().stage_consumed.iter().sum::<u64>() > 0 {
            first.get_or_insert_with(|| {
                let stage_cpu = threads_cpu_seconds(|t| t.starts_with("rankpulse-repar"));
                (Instant::now(), threads_cpu_seconds(not_the_broker), stage_cpu)
            });
        }
        if expected().is_some_and(|e| n >= e) {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let (started, cpu_at_first, stage_cpu_at_first) = first.unwrap();
    let wall = started.elapsed().as_secs_f64();
    let cpu = threads_cpu_seconds(not_the_broker) - cpu_at_first;
    let stage_cpu = threads_cpu_seconds(|t| t.starts_with("rankpulse-repar")) - stage_cpu_at_first;

    // Latency: one impression at a time, from send to consumed by the join.
    let producer: BaseProducer =
        ClientConfig::new().set("bootstrap.servers", &brokers).set("linger.ms", "0").create().unwrap();
    let now_ms = chrono::Utc::now().timestamp_millis();
    let mut latencies = Vec::new();
    let mut acknowledged = Vec::new();
    let forwarded = || routing.counts().stage_forwarded.iter().sum::<u64>();
    for i in 0..PROBES {
        let before = consumed();
        let forwarded_before = forwarded();
        let query = format!("{group}-probe-{i}");
        let payload = format!(r#"{{"query_id":"{query}","timestamp":{now_ms},"results":["a","b"]}}"#);
        let sent = Instant::now();
        producer.send(BaseRecord::to(RAW[0]).key(query.as_str()).payload(payload.as_str())).unwrap();
        // Not `flush`, which takes about 100 ms whatever the acknowledgement's latency (see
        // the stage's `wait_acknowledged`): it would hide both paths' latencies under its own.
        let deadline = sent + Duration::from_secs(10);
        while consumed() == before {
            producer.poll(Duration::ZERO);
            assert!(Instant::now() < deadline, "{group}: probe {i} never reached the join");
            std::thread::sleep(Duration::from_micros(200));
        }
        latencies.push(sent.elapsed().as_secs_f64() * 1000.0);
        while repartition && forwarded() == forwarded_before {
            assert!(Instant::now() < deadline, "{group}: probe {i} never acknowledged");
            std::thread::sleep(Duration::from_micros(200));
        }
        acknowledged.push(sent.elapsed().as_secs_f64() * 1000.0);
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(producer);
    shutdown.trigger();
    source.join().unwrap();
    if let Some(stage) = stage {
        stage.join().unwrap().unwrap();
    }
    // Per raw event, whatever was re-sent: the cost of the path per event of input.
    let processed = total as f64;
    Figures {
        events_per_second: processed / wall,
        events_per_cpu_second: processed / cpu.max(1e-9),
        stage_events_per_cpu_second: repartition.then(|| total as f64 / stage_cpu.max(1e-9)),
        latency_ms: median(latencies),
        acknowledged_ms: median(acknowledged),
    }
}

pub fn repartition(results: &mut Results) {
    let start_ms = chrono::Utc::now().timestamp_millis() - 600_000;
    let messages = traffic(IMPRESSIONS, start_ms);
    let total = messages.len() as u64;
    let cluster = MockCluster::new(1).unwrap();
    for topic in RAW {
        cluster.create_topic(topic, PARTITIONS, 1).unwrap();
    }
    let brokers = cluster.bootstrap_servers();
    let producer: BaseProducer =
        ClientConfig::new().set("bootstrap.servers", &brokers).set("linger.ms", "20").create().unwrap();
    for (topic, key, payload) in &messages {
        let raw = if *topic == IMP_TOPIC {
            RAW[0]
        } else if *topic == ENG_TOPIC {
            RAW[1]
        } else {
            unreachable!()
        };
        let mut record = BaseRecord::to(raw).key(key.as_str()).payload(payload.as_slice());
        while let Err((_, r)) = producer.send(record) {
            record = r;
            producer.poll(Duration::from_millis(5));
        }
    }
    producer.flush(Duration::from_secs(60)).unwrap();
    drop(producer);

    let (mut direct, mut through) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        direct.push(run_path(&cluster, &format!("direct-{round}"), false, total));
        through.push(run_path(&cluster, &format!("rp-{round}"), true, total));
    }
    let of = |figures: &[Figures], f: fn(&Figures) -> f64| median(figures.iter().map(f).collect());
    let put = |results: &mut Results, key: &str, value: f64| {
        results.insert(key.into(), value.into());
    };
    put(results, "repartition_events", total as f64);
    put(results, "co_partitioned_events_per_second", of(&direct, |f| f.events_per_second));
    put(results, "repartitioned_events_per_second", of(&through, |f| f.events_per_second));
    put(results, "co_partitioned_events_per_cpu_second", of(&direct, |f| f.events_per_cpu_second));
    put(results, "repartitioned_events_per_cpu_second", of(&through, |f| f.events_per_cpu_second));
    put(
        results,
        "repartition_stage_events_per_cpu_second",
        of(&through, |f| f.stage_events_per_cpu_second.unwrap_or(0.0)),
    );
    put(results, "co_partitioned_latency_milliseconds", of(&direct, |f| f.latency_ms));
    put(results, "repartitioned_latency_milliseconds", of(&through, |f| f.latency_ms));
    put(results, "repartition_acknowledged_milliseconds", of(&through, |f| f.acknowledged_ms));
    put(
        results,
        "repartition_added_latency_milliseconds",
        of(&through, |f| f.latency_ms) - of(&direct, |f| f.latency_ms),
    );
    drop(cluster);
}

pub fn rows(get: &dyn Fn(&str) -> Option<f64>) -> Vec<(&'static str, String, &'static str, &'static str)> {
    vec![
        (
            "co-partitioned / repartitioned, events/s",
            format!(
                "{} / {}",
                fmt(get("co_partitioned_events_per_second"), 0),
                fmt(get("repartitioned_events_per_second"), 0)
            ),
            "",
            "",
        ),
        (
            "  events per CPU-second (stage thread)",
            format!(
                "{} / {} ({})",
                fmt(get("co_partitioned_events_per_cpu_second"), 0),
                fmt(get("repartitioned_events_per_cpu_second"), 0),
                fmt(get("repartition_stage_events_per_cpu_second"), 0)
            ),
            "",
            "",
        ),
        (
            "  latency ms, median (added; stage ack)",
            format!(
                "{} / {} ({:+.1}; {})",
                fmt(get("co_partitioned_latency_milliseconds"), 1),
                fmt(get("repartitioned_latency_milliseconds"), 1),
                get("repartition_added_latency_milliseconds").unwrap_or(f64::NAN),
                fmt(get("repartition_acknowledged_milliseconds"), 1)
            ),
            "",
            "",
        ),
    ]
}
