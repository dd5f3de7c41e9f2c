//! The changelog's records under the demo's traffic, as the source writes them (the same
//! snapshot-or-delta choice, the same encoding; no broker, or a real one beside): what they
//! cost against the input, and that every partition's chain restores the partition exactly.
//! [`restore`] times a restore from them.
//!
//! The traffic is `rankpulse generate --interleaving --judgments --pre-period`'s (the state
//! benchmark's), with clicks and CUPED on and the client as the A/B unit, so that every part
//! of the totals changes: unit buckets and distinct units, the click log, CUPED's units.

mod restore;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use restore::{time_restore, Through};

use super::changelog::{Chain, RecordKind};
use super::chunks::SnapshotId;
use super::commit::encode_record;
use super::positions::Positions;
use super::record::{self, Record};
use crate::accumulate::{CovariateTable, GroupStats};
use crate::config::{AbUnit, Config};
use crate::demo::{write_traffic_with, Extras, FaultRate};
use crate::engine::{AggregatesRecord, AnyDelta, Engine};
use crate::event::EventKind;
use crate::time::HumanDuration;

/// A line of the generated traffic with the fields it is routed and paced by.
struct Line {
    kind: EventKind,
    at_ms: i64,
    partition: i32,
    bytes: Vec<u8>,
}

#[derive(serde::Deserialize)]
struct Head {
    query_id: Option<String>,
    timestamp: Option<i64>,
}

fn lines(kind: EventKind, text: &[u8], partitions: u32, last: &mut i64) -> Vec<Line> {
    text.split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (at_ms, key) = match serde_json::from_slice::<Head>(l) {
                Ok(Head { query_id: Some(k), timestamp: Some(t) }) => (t, k),
                _ => (*last, "malformed".to_string()),
            };
            *last = at_ms;
            let partition = (xxhash_rust::xxh3::xxh3_64(key.as_bytes()) % u64::from(partitions)) as i32;
            Line { kind, at_ms, partition, bytes: l.to_vec() }
        })
        .collect()
}

/// A chain as the changelog keeps it, for the snapshot-or-delta choice.
struct ChainModel {
    base_bytes: u64,
    delta_bytes: u64,
    deltas: u32,
}

/// What the measured rounds wrote and consumed, and the engine at the end with each
/// partition's chain (its snapshot and the deltas after it).
struct Volume {
    input: u64,
    snapshots: u64,
    deltas: u64,
    aggregates: u64,
    /// Aggregates records written whole (bases) while measuring.
    aggregates_bases: u32,
    rounds: u32,
    /// Per span of `span_s` measured seconds: bytes consumed, changelog bytes, aggregates
    /// bytes (whether the cost grows with the hours run).
    spans: Vec<[u64; 3]>,
    engine: Engine,
    /// A replica that reads every aggregates record the engine wrote, and nothing else.
    reader: Engine,
    chains: Vec<Vec<Vec<u8>>>,
    /// Partition 0's longest chain while measuring (by bytes): the one a restore just before
    /// its next snapshot reads, a restore's worst case.
    longest_chain: Vec<Vec<u8>>,
    cfg: Config,
    /// The changelog on a real broker the rounds also write through, if one was given.
    through: Option<Through>,
}

/// Feeds `prefill_s` of event time at once, then `measured_s` in rounds of 5 s; returns what
/// the measured rounds wrote against what they consumed.
fn measure(window: &str, (prefill_s, measured_s): (i64, i64), rate: u32, partitions: u32, pre_period: u64) -> Volume {
    measure_in_spans(window, (prefill_s, measured_s, measured_s), rate, partitions, pre_period, None)
}

/// The bench's configuration: the shipped defaults with clicks and CUPED on, and `window`.
fn config(window: &str) -> Config {
    let mut cfg = Config::default();
    cfg.ab.unit = AbUnit::ClientId;
    cfg.ab.cuped.metrics = vec!["ndcg@10".into(), "mrr".into()];
    cfg.clicks.enabled = true;
    cfg.join.attribution_window = window.parse::<HumanDuration>().unwrap();
    cfg
}

/// [`measure`], with what was consumed and written also added up per `span_s` of event time.
fn measure_in_spans(
    window: &str,
    (prefill_s, measured_s, span_s): (i64, i64, i64),
    rate: u32,
    partitions: u32,
    pre_period: u64,
    brokers: Option<&str>,
) -> Volume {
    let cfg = config(window);
    let start_ms = 1_780_000_000_000i64;
    let count = u64::from(rate) * (prefill_s + measured_s + 60) as u64;
    let (mut imp, mut eng) = (Vec::new(), Vec::new());
    let mut sink = std::io::sink();
    let extras = Extras { duel: true, judgments: Some(&mut sink), pre_period };
    write_traffic_with(&mut imp, &mut eng, (count, rate, 2026, start_ms), FaultRate::DEMO, extras).unwrap();
    let mut last = 0;
    let mut all = lines(EventKind::Impression, &imp, partitions, &mut last);
    last = 0;
    all.extend(lines(EventKind::Engagement, &eng, partitions, &mut last));
    all.sort_by_key(|l| l.at_ms);
    drop((imp, eng));

    let mut engine = Engine::new(&cfg).without_past_limit();
    engine.enable_global_view(partitions as usize);
    let mut positions = Positions::default();
    let mut chains: Vec<Option<(Chain, ChainModel)>> = (0..partitions).map(|_| None).collect();
    let mut offsets = [0i64; 2];
    let mut volume = Volume {
        input: 0,
        snapshots: 0,
        deltas: 0,
        aggregates: 0,
        aggregates_bases: 0,
        rounds: 0,
        spans: vec![[0; 3]; ((measured_s + span_s - 1) / span_s.max(1)).max(1) as usize],
        engine: Engine::new(&cfg),
        reader: {
            let mut reader = Engine::new(&cfg).without_past_limit();
            reader.enable_global_view(partitions as usize);
            reader
        },
        chains: vec![Vec::new(); partitions as usize],
        longest_chain: Vec::new(),
        cfg: cfg.clone(),
        through: brokers.map(Through::new),
    };
    let measure_from = start_ms + prefill_s * 1000;
    // The engine's clock follows event time, so that what it does with time (an input silent
    // for `join.idle_timeout` moves the watermark on) is the same however long the machine takes
    // to run this: with the wall clock, a run slowed past the idle timeout by its neighbours
    // found every input idle, and the watermark moved at the wall clock's pace, not the events'.
    let clock_zero = Instant::now();
    let clock = move |at_ms: i64| clock_zero + Duration::from_millis(u64::try_from(at_ms - start_ms).unwrap_or(0));
    // Rounds from the start, as a replica that ran through the prefill writes them: without
    // records, windows would be held open for them (`engine::global`'s hold-back).
    let mut next_round = start_ms;
    let end = measure_from + measured_s * 1000;
    let mut id = 0u64;
    let span_of = |at_ms: i64| (((at_ms - measure_from).max(0) / 1000) / span_s.max(1)) as usize;
    let round = |engine: &mut Engine,
                 positions: &Positions,
                 (at_ms, measuring, last): (i64, bool, bool),
                 volume: &mut Volume,
                 chains: &mut Vec<Option<(Chain, ChainModel)>>,
                 id: &mut u64| {
        engine.advance(clock(at_ms));
        for p in 0..partitions as i32 {
            let slot = &mut chains[p as usize];
            let records = &mut volume.chains[p as usize];
            let mut chain =
                slot.as_ref().filter(|(_, m)| m.deltas < 720 && m.delta_bytes < m.base_bytes).map(|(c, _)| *c);
            if let Some(through) = &mut volume.through {
                chain = through.changelog.chain(p);
                // Partition 0's snapshot is due: its chain is as long as it gets. Three restores
                // of it, each by a reader of its own.
                if p == 0 && measuring && chain.is_none() && through.deltas > 0 && through.restored.is_none() {
                    let times: Vec<String> = (0..3).map(|_| through.time_restore(&volume.cfg)).collect();
                    through.restored = Some(times.join("\n  "));
                }
            }
            let Some((kind, bytes)) = encode_record(engine, chain, positions, p) else { continue };
            if let Some(through) = &mut volume.through {
                through.write(p, kind, &bytes);
            }
            *id += 1;
            let id = *id;
            let len = bytes.len() as u64;
            match kind {
                RecordKind::Snapshot => {
                    let bytes_of = |chain: &[Vec<u8>]| chain.iter().map(Vec::len).sum::<usize>();
                    if p == 0 && measuring && bytes_of(records) > bytes_of(&volume.longest_chain) {
                        volume.longest_chain = std::mem::take(records);
                    }
                    let sid = SnapshotId { sequence: id, nonce: 0 };
                    *slot = Some((Chain::started(sid, len), ChainModel { base_bytes: len, delta_bytes: 0, deltas: 0 }));
                    records.clear();
                    if measuring {
                        volume.snapshots += len;
                        add_to_span(&mut volume.spans, span_of(at_ms - 1), 1, len);
                    }
                }
                RecordKind::Delta => {
                    let (c, m) = slot.as_mut().unwrap();
                    c.tip = SnapshotId { sequence: id, nonce: 0 };
                    m.delta_bytes += len;
                    m.deltas += 1;
                    if measuring {
                        volume.deltas += len;
                        add_to_span(&mut volume.spans, span_of(at_ms - 1), 1, len);
                    }
                }
            }
            records.push(bytes);
            let out = engine.aggregates_record(p).unwrap();
            let aggregates = out.bytes;
            // Read back into the experiment-wide view, as every replica's aggregates reader does.
            let read = || AggregatesRecord::decode(&aggregates).unwrap();
            engine.apply_aggregates_record(read()).unwrap();
            volume.reader.apply_aggregates_record(read()).unwrap();
            if measuring {
                volume.aggregates += aggregates.len() as u64;
                add_to_span(&mut volume.spans, span_of(at_ms - 1), 2, aggregates.len() as u64);
                volume.aggregates_bases += u32::from(out.base);
            }
            if let (true, Ok(dir)) = (last, std::env::var("VOL_DUMP")) {
                std::fs::write(format!("{dir}/aggregates-{p}"), &aggregates).unwrap();
                std::fs::write(format!("{dir}/record-{p}"), records.last().unwrap()).unwrap();
                let snapshot = crate::checkpoint::encode(&engine.snapshot_partition(p).unwrap());
                std::fs::write(format!("{dir}/snapshot-{p}"), snapshot).unwrap();
            }
            // The last round's records are what is restored: the windows they carried are
            // dropped after, as the source does once they are written.
            if !last {
                let carried = engine.unwritten_windows(p);
                engine.aggregates_written(&[(p, carried)]);
            }
        }
        if measuring {
            volume.rounds += 1;
        }
    };
    for line in &all {
        if line.at_ms >= end {
            break;
        }
        while line.at_ms >= next_round {
            let when = (next_round, next_round > measure_from, false);
            round(&mut engine, &positions, when, &mut volume, &mut chains, &mut id);
            next_round += 5000;
        }
        if line.at_ms >= measure_from {
            volume.input += line.bytes.len() as u64;
            add_to_span(&mut volume.spans, span_of(line.at_ms), 0, line.bytes.len() as u64);
        }
        let _ = engine.process(line.kind, line.partition, &line.bytes, clock(line.at_ms));
        offsets[line.kind.index()] += 1;
        positions.consumed(line.kind, line.partition, offsets[line.kind.index()]);
    }
    round(&mut engine, &positions, (end, true, true), &mut volume, &mut chains, &mut id);
    volume.engine = engine;
    volume
}

/// Adds `bytes` to part `part` of span `span` (the last span takes what falls past it).
fn add_to_span(spans: &mut [[u64; 3]], span: usize, part: usize, bytes: u64) {
    let last = spans.len() - 1;
    spans[span.min(last)][part] += bytes;
}

/// Every partition's chain applied and restored into a fresh engine.
fn restored(volume: &Volume) -> Engine {
    let mut engine = Engine::new(&volume.cfg).without_past_limit();
    engine.enable_global_view(volume.chains.len());
    for (p, chain) in volume.chains.iter().enumerate() {
        let p = p as i32;
        let Ok(Record::Snapshot(mut snapshot)) = record::decode(&chain[0]) else {
            panic!("partition {p}'s chain has no snapshot")
        };
        for delta in &chain[1..] {
            let Ok(Record::Delta(delta)) = record::decode(delta) else { panic!("not a delta") };
            engine.apply_delta(&mut snapshot.task, delta.task).unwrap();
        }
        engine.check_compatible(p, &mut snapshot.task).unwrap();
        engine.restore_partition(p, snapshot.task, Instant::now()).unwrap();
    }
    engine
}

/// A group table by group name, comparable across engines (ids are each engine's own).
fn by_name(engine: &Engine, table: &crate::accumulate::GroupTable) -> BTreeMap<(String, String), GroupStats> {
    table
        .iter()
        .map(|(id, stats)| {
            let (e, v) = engine.groups().name(id);
            ((e.to_string(), v.to_string()), stats.clone())
        })
        .collect()
}

/// A replica that read the aggregates records holds the experiment-wide view of the engine
/// that wrote them (written the last round, so every partition's sums as they are now), CUPED's covariates, the looks taken at
/// the windows completed (each window whole: a part missing would make other sums).
fn the_view_is_the_writer_s(reader: &Engine, writer: &Engine) {
    let view = by_name(reader, &reader.ab_cumulative());
    assert!(view == by_name(writer, &writer.cumulative()), "the view's sums are not the partitions'");
    assert!(view == by_name(writer, &writer.ab_cumulative()), "the view's sums are not the writer's view's");
    let covariates = |e: &Engine, table: Option<CovariateTable>| {
        let table = table.expect("CUPED is on");
        let named = |id| {
            let (e, v) = e.groups().name(id);
            (e.to_string(), v.to_string())
        };
        table.groups().map(|id| (named(id), table.group(id).cloned())).collect::<BTreeMap<_, _>>()
    };
    let view = covariates(reader, reader.ab_covariates());
    assert!(view == covariates(writer, writer.cuped_covariates()), "the view's CUPED covariates differ");
    assert!(!view.is_empty(), "no unit entered with a pre-period");
    assert_eq!(reader.looks().count, writer.looks().count, "looks taken");
    assert!(reader.looks().count > 0, "no window completed");
    assert!(
        by_name(reader, &reader.looks().prefix) == by_name(writer, &writer.looks().prefix),
        "the looked-at windows' sums differ"
    );
    assert_eq!(reader.windows_skipped(), writer.windows_skipped());
    assert_eq!(reader.aggregates_increments_skipped(), 0);
}

fn ratio(v: &Volume) -> f64 {
    (v.snapshots + v.deltas) as f64 / v.input as f64
}

#[test]
fn the_demo_traffic_s_deltas_cost_less_than_its_input_and_restore_every_partition_exactly() {
    // A 1-minute attribution window, 3 minutes of it held before 1 minute measured: impressions
    // finalized, windows closed and units entered in every round.
    let mut v = measure("1m", (180, 60), 200, 4, 5_000);
    assert!(v.rounds >= 12, "{} rounds measured", v.rounds);
    // A partition's next base may fall in the minute (once its deltas outgrow the one before):
    // the deltas alone are what this measures.
    let written = v.deltas as f64 / v.input as f64;
    assert!(written < 1.0, "the changelog's deltas cost {written:.2} bytes per byte consumed");

    // The aggregates records: mostly increments, and a replica reading them holds what one
    // reading whole records would (the writer's own view reads them whole: each is checked
    // against the table it changes, and the looks are taken at the windows completed).
    let aggregates = v.aggregates as f64 / v.input as f64;
    assert!(aggregates < 1.0, "the aggregates records cost {aggregates:.2} bytes per byte consumed");
    assert!(v.aggregates_bases < v.rounds, "{} bases in {} rounds", v.aggregates_bases, v.rounds);
    the_view_is_the_writer_s(&v.reader, &v.engine);

    let mut restored = restored(&v);
    let live = &mut v.engine;
    assert_eq!(restored.pending_impressions(), live.pending_impressions());
    assert!(by_name(&restored, &restored.cumulative()) == by_name(live, &live.cumulative()), "the sums differ");
    assert_eq!(restored.click_summary(), live.click_summary());
    assert_eq!(
        restored.cuped_covariates().map(|c| c.groups().count()),
        live.cuped_covariates().map(|c| c.groups().count())
    );
    for p in 0..4 {
        assert_eq!(restored.state_parts(p), live.state_parts(p), "partition {p}'s state restored");
    }
    // Both go on alike: every window closed and every impression finalized.
    live.finish();
    restored.finish();
    assert!(
        by_name(&restored, &restored.cumulative()) == by_name(live, &live.cumulative()),
        "the sums differ at the end"
    );
    // Which closed windows a task keeps for its aggregates records depends on what records it
    // wrote since it started, which a restored task has not: every other part is the same.
    let kept = |e: &Engine, p| {
        e.state_parts(p).into_iter().filter(|(part, _)| !part.starts_with("recent")).collect::<Vec<_>>()
    };
    for p in 0..4 {
        assert_eq!(kept(&restored, p), kept(live, p), "partition {p}'s state at the end");
    }
    assert_eq!(restored.click_summary(), live.click_summary());
}

/// `VOL_WINDOW=30m VOL_PREFILL=1800 VOL_MEASURED=300 cargo test --release --lib volume_of_the_state_stage -- --ignored --nocapture`:
/// the state benchmark's figures in process (the benchmark runs the real binary on a broker);
/// `VOL_SPAN=1800` (seconds) adds them up per span as well, for a run of hours.
#[test]
#[ignore = "minutes in release: the state benchmark's traffic, in process"]
fn volume_of_the_state_stage() {
    let window = std::env::var("VOL_WINDOW").unwrap_or("2m".into());
    let prefill: i64 = std::env::var("VOL_PREFILL").ok().and_then(|s| s.parse().ok()).unwrap_or(300);
    let measured: i64 = std::env::var("VOL_MEASURED").ok().and_then(|s| s.parse().ok()).unwrap_or(60);
    let env = |name: &str, default: u32| std::env::var(name).ok().and_then(|s| s.parse().ok()).unwrap_or(default);
    let (rate, partitions) = (env("VOL_RATE", 200), env("VOL_PARTITIONS", 4));
    let span: i64 = std::env::var("VOL_SPAN").ok().and_then(|s| s.parse().ok()).unwrap_or(measured);
    let v = measure_in_spans(&window, (prefill, measured, span), rate, partitions, 20_000, None);
    eprintln!("pending impressions at the end: {}", v.engine.pending_impressions());
    for (i, [input, changelog, aggregates]) in v.spans.iter().enumerate() {
        let per_byte = |bytes: &u64| *bytes as f64 / (*input).max(1) as f64;
        eprintln!(
            "span {i} ({} to {} s measured): input {input} B, changelog {changelog} B ({:.2} per byte consumed), aggregates {aggregates} B ({:.2}), together {:.2}",
            i as i64 * span,
            ((i as i64 + 1) * span).min(measured),
            per_byte(changelog),
            per_byte(aggregates),
            per_byte(&(changelog + aggregates))
        );
    }
    eprintln!(
        "window {window}: {} rounds, input {} B, snapshots {} B, deltas {} B ({:.2} per byte consumed), aggregates {} B ({:.2})",
        v.rounds,
        v.input,
        v.snapshots,
        v.deltas,
        ratio(&v),
        v.aggregates,
        v.aggregates as f64 / v.input as f64
    );
    eprintln!("aggregates records written whole: {} of {}", v.aggregates_bases, v.rounds * partitions);
    eprintln!("partition 0's aggregates record: {:?}", v.engine.aggregates_parts(0));
    the_view_is_the_writer_s(&v.reader, &v.engine);
    eprintln!("partition 0's state: {:?}", v.engine.state_parts(0));
    // Where the deltas' bytes go: every partition's deltas since its last snapshot, by part.
    let mut parts: Vec<(&'static str, usize)> = Vec::new();
    let mut delta_bytes = 0;
    for record in v.chains.iter().flat_map(|chain| chain.iter().skip(1)) {
        let Ok(Record::Delta(delta)) = record::decode(record) else { panic!("not a delta") };
        delta_bytes += record.len();
        let AnyDelta::Operations(task) = &delta.task else { panic!("this build writes operations") };
        for (name, n) in task.parts() {
            match parts.iter_mut().find(|(known, _)| *known == name) {
                Some((_, total)) => *total += n,
                None => parts.push((name, n)),
            }
        }
    }
    eprintln!("the deltas since each partition's last snapshot ({delta_bytes} B), by part: {parts:?}");
    // Partition 0's restore from its chain, as a replica assigned it does it: decoded, its
    // deltas applied, checked and installed; at the end, and from the longest chain it had
    // (just before a snapshot replaced it: a restore's worst case).
    for (which, chain) in [("at the end", &v.chains[0]), ("its longest chain", &v.longest_chain)] {
        if !chain.is_empty() {
            eprintln!("restore of partition 0, {which}: {}", time_restore(&v.cfg, chain));
        }
    }
    if let Ok(dir) = std::env::var("VOL_DUMP") {
        for (i, record) in v.longest_chain.iter().enumerate() {
            std::fs::write(format!("{dir}/longest-{i:04}"), record).unwrap();
        }
    }
}
