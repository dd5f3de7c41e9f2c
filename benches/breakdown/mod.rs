//! Issue 54's figures: what breakdowns cost (the engine processing impressions with
//! `ab.dimensions` against without, and a dimensions report's time), and the memory and
//! snapshot bytes each tracked dimension value and query holds, counted by the allocator and
//! by the snapshot's encoding.

use std::time::Instant;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rankpulse::config::Config;
use rankpulse::engine::Engine;
use rankpulse::event::EventKind;
use rankpulse::experiments::breakdown::Which;

use crate::common::alloc::live;
use crate::{fmt, median, Results};

const IMPRESSIONS: u32 = 200_000;
const QUERIES: u32 = 500;
const DEVICES: [&str; 4] = ["mobile", "desktop", "tablet", "tv"];
const SEGMENTS: [&str; 3] = ["app", "web", "widget"];

pub fn breakdown(results: &mut Results) {
    let mut rng = SmallRng::seed_from_u64(54);
    // One experiment of two variants over half an hour of event time, every impression with a
    // segment, a device and one of 500 queries (the head more often); a third clicked.
    let mut events: Vec<(EventKind, String)> = Vec::new();
    for i in 0..IMPRESSIONS {
        let at = 1_000_000 + i64::from(i) * 9;
        let variant = if rng.random_bool(0.5) { "control" } else { "treatment" };
        let segment = SEGMENTS[rng.random_range(0..SEGMENTS.len())];
        let device = DEVICES[rng.random_range(0..DEVICES.len())];
        let query = (f64::from(QUERIES) * rng.random::<f64>().powi(2)) as u32;
        events.push((
            EventKind::Impression,
            format!(
                r#"{{"query_id":"b-{i}","timestamp":{at},"results":["a","b","c","d","e"],"experiment":"e","variant":"{variant}","segment":"{segment}","query":"query {query}","dimensions":{{"device":"{device}"}}}}"#
            ),
        ));
        if i % 3 == 0 {
            events.push((
                EventKind::Engagement,
                format!(r#"{{"query_id":"b-{i}","timestamp":{},"doc_id":"b"}}"#, at + 1),
            ));
        }
    }
    let base = "[join]\nmax_pending_impressions = 1000000\n[ab]\nmax_queries = 500\n";
    let config =
        |extra: &str| Config::from_toml_with_env(&format!("{base}{extra}"), "bench", std::iter::empty()).unwrap();
    let configs = [
        ("off", config("")),
        ("dimensions", config("dimensions = [\"segment\", \"device\"]\n")),
        ("queries", config("dimensions = [\"query\"]\n")),
        ("all", config("dimensions = [\"segment\", \"device\", \"query\"]\n")),
    ];
    // The engine after the stream (every impression final, every window closed), and the heap
    // it holds: the sums of every group and table.
    let run = |cfg: &Config| {
        let before = live();
        let mut engine = Engine::new(cfg).without_past_limit();
        let now = Instant::now();
        let started = Instant::now();
        for (kind, payload) in &events {
            engine.process(*kind, 0, payload.as_bytes(), now).unwrap();
        }
        engine.finish();
        let seconds = started.elapsed().as_secs_f64();
        (seconds * 1e9 / f64::from(IMPRESSIONS), live().saturating_sub(before), engine)
    };
    // Each configuration in turn, five rounds: a drift of the shared machine's speed falls on
    // every configuration alike.
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); configs.len()];
    for _ in 0..5 {
        for (i, (_, cfg)) in configs.iter().enumerate() {
            samples[i].push(run(cfg).0);
        }
    }
    let mut nanoseconds = Vec::new();
    for ((name, _), samples) in configs.iter().zip(samples) {
        let ns = median(samples);
        results.insert(format!("breakdown_{name}_impression_nanoseconds"), ns.into());
        nanoseconds.push(ns);
    }
    results.insert("breakdown_dimensions_cost_ratio".into(), (nanoseconds[1] / nanoseconds[0]).into());
    results.insert("breakdown_all_cost_ratio".into(), (nanoseconds[3] / nanoseconds[0]).into());

    let (_, off_heap, off) = run(&configs[0].1);
    let snapshot = |e: &mut Engine| rankpulse::checkpoint::encode(&e.snapshot_partition(0).unwrap()).len();
    let off_snapshot = snapshot(&mut { off });
    for (name, cfg) in &configs[1..3] {
        let (_, heap, mut engine) = run(cfg);
        let groups = engine.groups();
        let parts = engine.cumulative().iter().filter(|&(g, _)| groups.is_breakdown(g)).count();
        let values = parts / 2;
        results.insert(format!("breakdown_{name}_values"), values.into());
        results.insert(
            format!("breakdown_{name}_bytes_per_value"),
            (heap.saturating_sub(off_heap) as f64 / values as f64).into(),
        );
        results.insert(
            format!("breakdown_{name}_snapshot_bytes_per_value"),
            (snapshot(&mut engine).saturating_sub(off_snapshot) as f64 / values as f64).into(),
        );
        if *name == "queries" {
            let ms = median(
                (0..5)
                    .map(|_| {
                        let started = Instant::now();
                        std::hint::black_box(engine.dimensions_report("e", Which::Queries));
                        started.elapsed().as_secs_f64() * 1e3
                    })
                    .collect(),
            );
            results.insert("breakdown_queries_report_milliseconds".into(), ms.into());
        }
    }
}

/// The table's rows of this stage.
pub fn rows(get: &dyn Fn(&str) -> Option<f64>) -> Vec<(&'static str, String, &'static str, &'static str)> {
    vec![
        (
            "breakdowns: impression ns, off; 2 dimensions; query; all three",
            format!(
                "{}; {} ({}x); {}; {} ({}x)",
                fmt(get("breakdown_off_impression_nanoseconds"), 0),
                fmt(get("breakdown_dimensions_impression_nanoseconds"), 0),
                fmt(get("breakdown_dimensions_cost_ratio"), 2),
                fmt(get("breakdown_queries_impression_nanoseconds"), 0),
                fmt(get("breakdown_all_impression_nanoseconds"), 0),
                fmt(get("breakdown_all_cost_ratio"), 2)
            ),
            "",
            "",
        ),
        (
            "  heap bytes per dimension value (both variants); per query",
            format!(
                "{} ({} values); {} ({} queries)",
                fmt(get("breakdown_dimensions_bytes_per_value"), 0),
                fmt(get("breakdown_dimensions_values"), 0),
                fmt(get("breakdown_queries_bytes_per_value"), 0),
                fmt(get("breakdown_queries_values"), 0)
            ),
            "",
            "",
        ),
        (
            "  snapshot bytes per dimension value; per query",
            format!(
                "{}; {}",
                fmt(get("breakdown_dimensions_snapshot_bytes_per_value"), 0),
                fmt(get("breakdown_queries_snapshot_bytes_per_value"), 0)
            ),
            "",
            "",
        ),
        ("  dimensions report of 500 queries ms", fmt(get("breakdown_queries_report_milliseconds"), 1), "", ""),
    ]
}
