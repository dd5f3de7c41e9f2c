//! Issue 34's figures: the cost of the click log on the hot path (the engine processing
//! impressions of 10 results and their clicks, with `clicks.enabled` against without), the
//! memory it holds per tracked (query, document) pair and per pending tracked impression
//! (counted by the allocator), the time to fit the click models on a full log, and the cost
//! of the inverse-propensity-weighted metrics.

use std::time::Instant;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rankpulse::clicks::log::{ClickLog, LogSettings, Offered};
use rankpulse::clicks::named::NamedTable;
use rankpulse::clicks::pbm::EmSettings;
use rankpulse::clicks::Fitted;
use rankpulse::config::Config;
use rankpulse::engine::Engine;
use rankpulse::event::EventKind;
use rankpulse::ids::doc_key;

use crate::common::alloc::live;
use crate::{fmt, median, Results};

/// Queries of the hot-path traffic: each shown 100 times on average, mostly in its production
/// order (a quarter of the impressions shuffle it, as A/B and interleaving traffic does), so
/// the figure is the steady state of a head of queries, not the first sight of every pair.
const QUERIES: u32 = 2_000;
const IMPRESSIONS: u32 = 200_000;
/// Pairs in the memory figure: 100,000 queries of 10 documents.
const MEMORY_QUERIES: u32 = 100_000;

pub fn clicks(results: &mut Results) {
    let mut rng = SmallRng::seed_from_u64(34);
    // Impressions of 10 results of a head-heavy query mix, a third of them clicked once.
    let mut events: Vec<(EventKind, String)> = Vec::new();
    for i in 0..IMPRESSIONS {
        let q = (rng.random::<f64>().powi(2) * f64::from(QUERIES)) as u32;
        let mut docs: Vec<String> = (0..10).map(|d| format!("doc-{q}-{d}")).collect();
        if i % 4 == 0 {
            use rand::seq::SliceRandom;
            docs.shuffle(&mut rng);
        }
        let at = 1_000_000 + i64::from(i);
        let quoted: Vec<String> = docs.iter().map(|d| format!("\"{d}\"")).collect();
        events.push((
            EventKind::Impression,
            format!(
                r#"{{"query_id":"c-{i}","timestamp":{at},"query":"query {q}","results":[{}],"experiment":"e","variant":"v"}}"#,
                quoted.join(",")
            ),
        ));
        if i % 3 == 0 {
            let doc = &docs[rng.random_range(0..4)];
            events.push((
                EventKind::Engagement,
                format!(r#"{{"query_id":"c-{i}","timestamp":{},"doc_id":"{doc}"}}"#, at + 1),
            ));
        }
    }
    let base = "[join]\nmax_pending_impressions = 1000000\n";
    let config =
        |extra: &str| Config::from_toml_with_env(&format!("{base}{extra}"), "bench", std::iter::empty()).unwrap();
    let (off, on) = (config(""), config("[clicks]\nenabled = true\nmax_queries_per_partition = 100000\n"));
    let ips =
        config("[clicks]\npropensities = [1.0, 0.7, 0.55, 0.45, 0.38, 0.32, 0.28, 0.25, 0.22, 0.2]\nclip = 0.1\n");
    let per_impression = |cfg: &Config| {
        median(
            (0..3)
                .map(|_| {
                    let mut engine = Engine::new(cfg).without_past_limit();
                    let now = Instant::now();
                    let started = Instant::now();
                    for (kind, payload) in &events {
                        engine.process(*kind, 0, payload.as_bytes(), now).unwrap();
                    }
                    engine.finish();
                    started.elapsed().as_secs_f64() * 1e9 / f64::from(IMPRESSIONS)
                })
                .collect(),
        )
    };
    let (plain, tracked, weighted) = (per_impression(&off), per_impression(&on), per_impression(&ips));
    results.insert("clicks_off_impression_nanoseconds".into(), plain.into());
    results.insert("clicks_on_impression_nanoseconds".into(), tracked.into());
    results.insert("clicks_cost_ratio".into(), (tracked / plain).into());
    results.insert("ips_metrics_cost_ratio".into(), (weighted / plain).into());

    // Memory: a log of 1M pairs (100,000 queries x 10 documents), every impression finalized;
    // then 100,000 impressions offered and pending.
    let settings =
        LogSettings { max_rank: 10, max_queries: MEMORY_QUERIES as usize, horizon_ms: 86_400_000, click_threshold: 1 };
    let before = live();
    let mut log = ClickLog::new(settings);
    let mut names: Vec<String> = Vec::with_capacity(10);
    for q in 0..MEMORY_QUERIES {
        let text = format!("query {q}");
        names.clear();
        names.extend((0..10).map(|d| format!("doc-{q}-{d}")));
        let keys: Vec<u64> = names.iter().map(|d| doc_key(d)).collect();
        let name = |rank: usize| names[rank].as_str();
        let offered = Offered {
            query: Some((&text, xxhash_rust::xxh3::xxh3_64(text.as_bytes()))),
            segment: "",
            docs: &keys,
            doc_name: &name,
        };
        log.offer(u128::from(q), &offered);
        log.finalize(u128::from(q), 1_000, &[1, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    }
    let held = live() - before;
    let (_, pairs, _) = log.sizes();
    // Document ids here are 10 to 14 bytes: their text is part of the figure.
    results.insert("clicks_bytes_per_pair".into(), (held as f64 / pairs as f64).into());
    let before_pending = live();
    for q in 0..MEMORY_QUERIES {
        let keys: Vec<u64> = (0..10).map(|d| doc_key(&format!("doc-{q}-{d}"))).collect();
        let text = format!("query {q}");
        let unused = |_: usize| "";
        let offered = Offered {
            query: Some((&text, xxhash_rust::xxh3::xxh3_64(text.as_bytes()))),
            segment: "",
            docs: &keys,
            doc_name: &unused,
        };
        log.offer(u128::from(MEMORY_QUERIES + q), &offered);
    }
    results.insert(
        "clicks_bytes_per_pending_impression".into(),
        ((live() - before_pending) as f64 / f64::from(MEMORY_QUERIES)).into(),
    );

    // The models on the full log: what a refit of the gauges costs.
    let mut table = NamedTable::new(10);
    log.add_to(&mut table);
    let started = Instant::now();
    let fitted = Fitted::fit(&table.table, EmSettings { max_iterations: 200, tolerance: 0.0 });
    results.insert("clicks_fit_seconds_1m_pairs_200_iterations".into(), started.elapsed().as_secs_f64().into());
    std::hint::black_box(fitted);
}

/// The table's rows of this stage.
pub fn rows(get: &dyn Fn(&str) -> Option<f64>) -> Vec<(&'static str, String, &'static str, &'static str)> {
    vec![
        (
            "click log: impression ns, on / off",
            format!(
                "{} / {} = {}",
                fmt(get("clicks_on_impression_nanoseconds"), 0),
                fmt(get("clicks_off_impression_nanoseconds"), 0),
                fmt(get("clicks_cost_ratio"), 2)
            ),
            "",
            "",
        ),
        (
            "  bytes per pair; per pending impression",
            format!("{}; {}", fmt(get("clicks_bytes_per_pair"), 0), fmt(get("clicks_bytes_per_pending_impression"), 0)),
            "",
            "",
        ),
        ("  fit 1M pairs, 200 EM iterations s", fmt(get("clicks_fit_seconds_1m_pairs_200_iterations"), 2), "", ""),
        ("ips metrics: impression cost ratio", fmt(get("ips_metrics_cost_ratio"), 2), "", ""),
    ]
}
