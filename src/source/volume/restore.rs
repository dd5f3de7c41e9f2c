//! A partition's restore from the chains [`super`] writes, timed by part: from a chain held in
//! memory or dumped to files, and through a real broker, as a replica newly assigned the
//! partition restores it.

use std::time::Instant;

use super::{config, measure_in_spans};
use crate::config::{Config, KafkaConfig, StateCompression};
use crate::engine::Engine;
use crate::kafka_log::KafkaLog;
use crate::source::changelog::{Changelog, RecordKind};
use crate::source::record::{self, Record};

/// Partition 0 restored from `chain` as a replica assigned it does it (decoded, its deltas
/// applied, checked and installed), timed by part.
pub(super) fn time_restore(cfg: &Config, chain: &[Vec<u8>]) -> String {
    let started = Instant::now();
    let mut engine = Engine::new(cfg).without_past_limit();
    let Ok(Record::Snapshot(mut snapshot)) = record::decode(&chain[0]) else { panic!("no snapshot") };
    let snapshot_decoded = started.elapsed().as_secs_f64();
    let (mut decoding, mut applying) = (0.0, 0.0);
    for delta in &chain[1..] {
        let at = Instant::now();
        let Ok(Record::Delta(delta)) = record::decode(delta) else { panic!("not a delta") };
        decoding += at.elapsed().as_secs_f64();
        let at = Instant::now();
        engine.apply_delta(&mut snapshot.task, delta.task).unwrap();
        applying += at.elapsed().as_secs_f64();
    }
    let at = Instant::now();
    engine.check_compatible(0, &mut snapshot.task).unwrap();
    let pending = snapshot.task.pending_impressions();
    engine.restore_partition(0, snapshot.task, Instant::now()).unwrap();
    let installing = at.elapsed().as_secs_f64();
    let bytes: usize = chain.iter().map(Vec::len).sum();
    format!(
        "{pending} pending, a snapshot of {} B and {} deltas, {bytes} B: {:.2} s (snapshot decoded \
         {snapshot_decoded:.2} s, deltas decoded {decoding:.2} s and applied {applying:.2} s, checked and installed \
         {installing:.2} s)",
        chain[0].len(),
        chain.len() - 1,
        started.elapsed().as_secs_f64()
    )
}

/// `VOL_CHAIN=dir VOL_WINDOW=30m cargo test --release --lib restore_of_a_dumped_chain -- --ignored
/// --nocapture`: the longest chain `volume_of_the_state_stage` dumped (`VOL_DUMP=dir`) restored
/// five times, for profiling a restore without producing its traffic again.
#[test]
#[ignore = "needs a chain dumped by volume_of_the_state_stage"]
fn restore_of_a_dumped_chain() {
    let dir = std::env::var("VOL_CHAIN").expect("VOL_CHAIN: the directory VOL_DUMP named");
    let mut names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    names.retain(|path| path.file_name().is_some_and(|n| n.to_string_lossy().starts_with("longest-")));
    names.sort();
    let chain: Vec<Vec<u8>> = names.iter().map(|path| std::fs::read(path).unwrap()).collect();
    let cfg = config(&std::env::var("VOL_WINDOW").unwrap_or("30m".into()));
    for _ in 0..5 {
        eprintln!("{}", time_restore(&cfg, &chain));
    }
}

/// `VOL_RATE=560 cargo test --release --lib restore_of_a_large_snapshot -- --ignored --nocapture`:
/// a partition's snapshot after half an hour of the bench's traffic at `VOL_RATE` (560: about a
/// million pending impressions, the handover stage's size), decoded and restored seven times;
/// the medians of decoding alone and of decoding with the restore, without the broker's read
/// that the handover stage's figure includes.
#[test]
#[ignore = "minutes in release: a million pending impressions"]
fn restore_of_a_large_snapshot() {
    let rate: u32 = std::env::var("VOL_RATE").ok().and_then(|s| s.parse().ok()).unwrap_or(560);
    let v = measure_in_spans("30m", (1800, 1, 1), rate, 1, 20_000, None);
    let snapshot = &v.chains[0][0];
    let (mut decoding, mut restoring) = (Vec::new(), Vec::new());
    let mut pending = 0;
    for _ in 0..7 {
        let started = Instant::now();
        let Ok(Record::Snapshot(mut snapshot)) = record::decode(snapshot) else { panic!("not a snapshot") };
        decoding.push(started.elapsed().as_secs_f64());
        let mut engine = Engine::new(&v.cfg).without_past_limit();
        engine.check_compatible(0, &mut snapshot.task).unwrap();
        pending = snapshot.task.pending_impressions();
        engine.restore_partition(0, snapshot.task, Instant::now()).unwrap();
        restoring.push(started.elapsed().as_secs_f64());
        drop(engine);
    }
    let median = |mut times: Vec<f64>| {
        times.sort_by(f64::total_cmp);
        times[times.len() / 2]
    };
    eprintln!(
        "a snapshot of {} B, {pending} pending: decoded in {:.3} s, decoded and restored in {:.3} s (medians of 7)",
        snapshot.len(),
        median(decoding),
        median(restoring)
    );
}

/// A changelog on a real broker that the rounds write through (`VOL_BROKERS`), and partition
/// 0's restore through it timed once, when its chain is longest (just before its snapshot).
pub(super) struct Through {
    kafka: KafkaConfig,
    pub(super) changelog: Changelog,
    /// Deltas written since partition 0's snapshot.
    pub(super) deltas: u32,
    /// The restores timed, once.
    pub(super) restored: Option<String>,
    /// Runs the admin client's requests.
    runtime: tokio::runtime::Runtime,
}

impl Through {
    const TOPICS: (&'static str, &'static str) = ("volume-changelog", "volume-aggregates");

    pub(super) fn new(brokers: &str) -> Through {
        let kafka = KafkaConfig { brokers: brokers.into(), ..Default::default() };
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let mut changelog = Self::open(&kafka, &runtime);
        changelog.ensure_topics(1).unwrap();
        Through { kafka, changelog, deltas: 0, restored: None, runtime }
    }

    fn open(kafka: &KafkaConfig, runtime: &tokio::runtime::Runtime) -> Changelog {
        let log = std::sync::Arc::new(KafkaLog::new("consumer", &kafka.brokers));
        let compression = StateCompression::default();
        Changelog::new(kafka, Self::TOPICS, 1, compression, runtime.handle().clone(), log).unwrap()
    }

    /// Writes a record as the source does, waiting for the brokers.
    pub(super) fn write(&mut self, partition: i32, kind: RecordKind, bytes: &[u8]) {
        let sent = self.changelog.send(&[(partition, kind, bytes.to_vec())], &[]).unwrap();
        self.changelog.finish(sent).unwrap();
        if partition == 0 {
            self.deltas = if kind == RecordKind::Delta { self.deltas + 1 } else { 0 };
        }
    }

    /// Partition 0 restored as a replica newly assigned it restores it: a changelog reader of
    /// its own reads the newest chain back, then its snapshot is decoded and its deltas applied
    /// (as `rebalance`'s `newest_snapshot` does), checked and installed.
    pub(super) fn time_restore(&self, cfg: &Config) -> String {
        let started = Instant::now();
        let mut reader = Self::open(&self.kafka, &self.runtime);
        let mut engine = Engine::new(cfg).without_past_limit();
        let mut read = 0.0;
        let (chain, mut task) = reader
            .read_newest(0, |chain| {
                read = started.elapsed().as_secs_f64();
                let Ok(Record::Snapshot(mut snapshot)) = record::decode(&chain.base.bytes) else {
                    return Err("no snapshot");
                };
                for delta in &chain.deltas {
                    let Ok(Record::Delta(delta)) = record::decode(&delta.bytes) else { return Err("not a delta") };
                    engine.apply_delta(&mut snapshot.task, delta.task).unwrap();
                }
                Ok(snapshot.task)
            })
            .unwrap()
            .expect("a chain");
        engine.check_compatible(0, &mut task).unwrap();
        let pending = task.pending_impressions();
        engine.restore_partition(0, task, Instant::now()).unwrap();
        format!(
            "{pending} pending, a snapshot and {} deltas, {} B, through the broker: {:.2} s (read {read:.2} s, then \
             decoded, applied, checked and installed)",
            chain.deltas.len(),
            chain.bytes(),
            started.elapsed().as_secs_f64()
        )
    }
}

/// `VOL_BROKERS=host:port VOL_RATE=310 VOL_WINDOW=30m cargo test --release --lib
/// restore_through_a_broker -- --ignored --nocapture`: the volume test's traffic in one partition,
/// its records also written to a real broker (tansu: `tansu broker --listener-url
/// tcp://127.0.0.1:9092`, memory storage), and the restore of the partition through it from
/// its longest chain, as a replica assigned it then would restore it.
#[test]
#[ignore = "needs a broker (VOL_BROKERS), minutes in release"]
fn restore_through_a_broker() {
    let brokers = std::env::var("VOL_BROKERS").expect("VOL_BROKERS: a broker's host:port");
    let window = std::env::var("VOL_WINDOW").unwrap_or("30m".into());
    let rate: u32 = std::env::var("VOL_RATE").ok().and_then(|s| s.parse().ok()).unwrap_or(310);
    let measured: i64 = std::env::var("VOL_MEASURED").ok().and_then(|s| s.parse().ok()).unwrap_or(1800);
    let v = measure_in_spans(&window, (1800, measured, measured), rate, 1, 20_000, Some(&brokers));
    let through = v.through.as_ref().unwrap();
    eprintln!(
        "restore of partition 0, its longest chain: {}",
        through.restored.as_deref().unwrap_or("no snapshot was due")
    );
}
