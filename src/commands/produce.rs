//! `rankpulse produce`: the demo's generated A/B traffic, produced live to real Kafka topics.

use std::time::Duration;

use anyhow::Context;
use rdkafka::producer::{BaseProducer, Producer};

use crate::config::{ClientRole, KafkaConfig};
use crate::demo::{produce_live, FaultRate, TrafficGenerator, EXPERIMENT};
use crate::kafka_log::ProducerLog;
use crate::shutdown::Shutdown;

pub fn run(
    kafka: &KafkaConfig,
    (rate, seed, faults): (u32, u64, FaultRate),
    duration: Option<Duration>,
) -> anyhow::Result<()> {
    let (brokers, impressions_topic, engagements_topic) =
        (kafka.brokers.as_str(), kafka.impressions_topic.as_str(), kafka.engagements_topic.as_str());
    let producer: BaseProducer<ProducerLog> = kafka
        .client_config(ClientRole::Producer)?
        .set("linger.ms", "5")
        .create_with_context(ProducerLog::new("producer", brokers))
        .with_context(|| format!("creating a Kafka producer for {brokers}"))?;
    // Ids continue from the wall clock, so a restarted producer never repeats a recent one.
    let first_id = u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap_or(0) * 1000;
    let generator = TrafficGenerator::new(seed).numbered_from(first_id);
    // The one shutdown signal: SIGINT/SIGTERM or the end of --duration stop the producer thread.
    let shutdown = Shutdown::new();
    println!(
        "rankpulse produce: {rate} searches/s of experiment {EXPERIMENT} (control vs treatment) to {impressions_topic} and {engagements_topic} at {brokers}; Ctrl-C to stop"
    );
    if faults != FaultRate::NONE {
        println!(
            "  --faults {faults}: that share of impressions is followed by a malformed message (keyed \"malformed\")"
        );
    }
    let thread_stop = shutdown.clone();
    let topics = (impressions_topic.to_string(), engagements_topic.to_string());
    let worker = std::thread::Builder::new().name("produce".into()).spawn(move || {
        produce_live(&producer, generator, (&topics.0, &topics.1), (rate, Duration::ZERO), faults, &thread_stop);
        producer.flush(Duration::from_secs(5))
    })?;
    super::runtime()?.block_on(async {
        shutdown.on_signals();
        match duration {
            Some(d) => tokio::select! { _ = tokio::time::sleep(d) => {}, _ = shutdown.wait() => {} },
            None => shutdown.wait().await,
        }
    });
    shutdown.trigger();
    let flushed = worker.join().map_err(|_| anyhow::anyhow!("the producer thread panicked"))?;
    // rdkafka's error repeats its code as its `source()`: the message alone says it once.
    flushed.map_err(|e| anyhow::anyhow!("flushing the last messages: {e}"))?;
    Ok(())
}
