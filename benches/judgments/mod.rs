//! Issue 21's figures: a judgment list of one million judgments (100,000 queries of 10 judged
//! documents, as JSON lines keyed by query text): the time to load it, the memory it holds
//! (counted by the allocator and by `Judgments::heap_bytes`), the cost of one lookup, and the
//! cost of judging on the hot path (the engine processing impressions of judged queries with
//! the list against the same impressions without one, and with the list but without the
//! measures for incomplete judgments: half of each list is unjudged, so every impression takes
//! their second pass).

use std::io::Write;
use std::time::Instant;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rankpulse::config::Config;
use rankpulse::engine::Engine;
use rankpulse::event::EventKind;
use rankpulse::ids::doc_key;
use rankpulse::judgments::{judged_query_key, Format, JudgmentSource, Judgments, LoadOptions};

use crate::common::alloc::live;
use crate::{fmt, median, Results};

const QUERIES: u32 = 100_000;
const PER_QUERY: u32 = 10;
/// Documents a query's results are drawn from: half of a list is judged.
const POOL: u32 = 20;
const LOOKUPS: u32 = 1_000_000;
const IMPRESSIONS: u32 = 200_000;

pub fn judgments(results: &mut Results) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("judgments.jsonl");
    let mut file = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    let mut rng = SmallRng::seed_from_u64(21);
    for q in 0..QUERIES {
        for d in 0..PER_QUERY {
            let grade = rng.random_range(0..4u8);
            writeln!(file, r#"{{"query":"query {q}","doc_id":"doc-{q}-{}","grade":{grade}}}"#, d * 2).unwrap();
        }
    }
    file.flush().unwrap();
    drop(file);
    let options = LoadOptions {
        format: Format::JsonLines,
        normalize: true,
        max_grade: 3,
        max_rejected_share: 0.0,
        keep_query_names: false,
    };
    let mut load_seconds = Vec::new();
    let mut held = 0;
    let mut kept = None;
    for _ in 0..3 {
        drop(kept.take());
        let before = live();
        let started = Instant::now();
        let (judgments, report) = Judgments::load(&path, &options).unwrap();
        load_seconds.push(started.elapsed().as_secs_f64());
        drop(report);
        held = live() - before;
        assert_eq!(judgments.len(), (QUERIES * PER_QUERY) as usize);
        kept = Some(judgments);
    }
    let judgments = kept.unwrap();
    results.insert("judgments_load_seconds".into(), median(load_seconds).into());
    results.insert("judgments_bytes_per_judgment".into(), (held as f64 / judgments.len() as f64).into());
    results.insert("judgments_heap_bytes".into(), judgments.heap_bytes().into());

    // Lookups as the engine does them: the query's key (normalized text), its judgments, then
    // one grade per result; half the documents judged.
    let probes: Vec<(String, String)> = (0..LOOKUPS)
        .map(|_| {
            let q = rng.random_range(0..QUERIES);
            (format!("Query  {q}"), format!("doc-{q}-{}", rng.random_range(0..POOL)))
        })
        .collect();
    let mut scratch = String::new();
    let lookup_ns = median(
        (0..5)
            .map(|_| {
                let started = Instant::now();
                let mut found = 0u32;
                for (query, doc) in &probes {
                    let judged = judgments.query(judged_query_key(query, true, &mut scratch));
                    found += u32::from(judged.and_then(|j| j.grade(doc_key(doc))).is_some());
                }
                std::hint::black_box(found);
                started.elapsed().as_secs_f64() * 1e9 / f64::from(LOOKUPS)
            })
            .collect(),
    );
    results.insert("judgments_lookup_nanoseconds".into(), lookup_ns.into());

    // The hot path: impressions of 10 results of judged queries, with and without the list.
    let payloads: Vec<String> = (0..IMPRESSIONS)
        .map(|i| {
            let q = rng.random_range(0..QUERIES);
            let docs: Vec<String> = (0..10).map(|_| format!("\"doc-{q}-{}\"", rng.random_range(0..POOL))).collect();
            format!(
                r#"{{"query_id":"j-{i}","timestamp":{},"query":"query {q}","results":[{}],"experiment":"e","variant":"v"}}"#,
                1_000_000 + i64::from(i),
                docs.join(",")
            )
        })
        .collect();
    let toml = format!("[judgments]\nfile = \"{}\"\n[join]\nmax_pending_impressions = 1000000\n", path.display());
    let with = Config::from_toml_with_env(&toml, "bench", std::iter::empty()).unwrap();
    let without =
        Config::from_toml_with_env("[join]\nmax_pending_impressions = 1000000\n", "bench", std::iter::empty()).unwrap();
    let mut plain_judged = with.clone();
    plain_judged.judgments.incomplete_measures = false;
    let per_impression = |cfg: &Config, judged: bool| {
        median(
            (0..3)
                .map(|_| {
                    let mut engine = Engine::new(cfg).without_past_limit();
                    if judged {
                        engine.set_judgments(JudgmentSource::from_config(&cfg.judgments).unwrap().unwrap());
                    }
                    let now = Instant::now();
                    let started = Instant::now();
                    for payload in &payloads {
                        engine.process(EventKind::Impression, 0, payload.as_bytes(), now).unwrap();
                    }
                    engine.finish();
                    started.elapsed().as_secs_f64() * 1e9 / f64::from(IMPRESSIONS)
                })
                .collect(),
        )
    };
    let (plain, judged) = (per_impression(&without, false), per_impression(&with, true));
    let judged_plain_only = per_impression(&plain_judged, true);
    results.insert("judged_impression_nanoseconds".into(), judged.into());
    results.insert("judged_without_incomplete_measures_nanoseconds".into(), judged_plain_only.into());
    results.insert("unjudged_impression_nanoseconds".into(), plain.into());
    results.insert("judging_cost_ratio".into(), (judged / plain).into());
}

/// The table's rows of this stage.
pub fn rows(get: &dyn Fn(&str) -> Option<f64>) -> Vec<(&'static str, String, &'static str, &'static str)> {
    vec![
        (
            "1M judgments: load s; bytes each (heap MB)",
            format!(
                "{}; {} ({})",
                fmt(get("judgments_load_seconds"), 2),
                fmt(get("judgments_bytes_per_judgment"), 1),
                fmt(get("judgments_heap_bytes").map(|b| b / 1e6), 1)
            ),
            "",
            "",
        ),
        ("  lookup (key + query + grade) ns", fmt(get("judgments_lookup_nanoseconds"), 0), "", ""),
        (
            "  impression ns: judged / unjudged",
            format!(
                "{} / {} = {}",
                fmt(get("judged_impression_nanoseconds"), 0),
                fmt(get("unjudged_impression_nanoseconds"), 0),
                fmt(get("judging_cost_ratio"), 2)
            ),
            "",
            "",
        ),
        (
            "  judged impression ns without bpref, AP', nDCG'",
            fmt(get("judged_without_incomplete_measures_nanoseconds"), 0),
            "",
            "",
        ),
    ]
}
