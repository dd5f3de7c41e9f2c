//! Issue 35's figures: what CUPED costs on the hot path (the engine processing impressions of
//! clustered traffic with `ab.cuped.metrics` against without, the client as the unit both
//! ways), the memory its state holds per tracked unit and per unit waiting in a started
//! experiment's pre-period (counted by the allocator), and the time to build a cumulative report
//! with every read-out figure.

use std::time::Instant;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rankpulse::accumulate::{CupedSettings, CupedState};
use rankpulse::config::Config;
use rankpulse::engine::Engine;
use rankpulse::event::EventKind;
use rankpulse::experiments::Span;

use crate::common::alloc::live;
use crate::{fmt, median, Results};

const CLIENTS: u32 = 20_000;
const IMPRESSIONS: u32 = 200_000;
/// Units in the memory figure.
const MEMORY_UNITS: u32 = 100_000;
const DAY: i64 = 86_400_000;

pub fn cuped(results: &mut Results) {
    let mut rng = SmallRng::seed_from_u64(35);
    // A day of searches outside the experiment, then a day of the experiment, by the same
    // clients; a third of the impressions clicked.
    let mut events: Vec<(EventKind, String)> = Vec::new();
    for i in 0..IMPRESSIONS {
        let client = rng.random_range(0..CLIENTS);
        let (at, experiment) = if i < IMPRESSIONS / 2 {
            (DAY + i64::from(i) * 400, "baseline")
        } else {
            (2 * DAY + i64::from(i) * 400, "e")
        };
        let variant = if client % 2 == 0 { "control" } else { "treatment" };
        events.push((
            EventKind::Impression,
            format!(
                r#"{{"query_id":"c-{i}","timestamp":{at},"results":["a","b","c","d","e"],"experiment":"{experiment}","variant":"{variant}","client_id":"u{client}"}}"#
            ),
        ));
        if i % 3 == 0 {
            events.push((
                EventKind::Engagement,
                format!(r#"{{"query_id":"c-{i}","timestamp":{},"doc_id":"b"}}"#, at + 1),
            ));
        }
    }
    let base = "[join]\nmax_pending_impressions = 1000000\n[ab]\nunit = \"client_id\"\n";
    let config =
        |extra: &str| Config::from_toml_with_env(&format!("{base}{extra}"), "bench", std::iter::empty()).unwrap();
    let (off, on) = (config(""), config("[ab.cuped]\nmetrics = [\"mrr\", \"ndcg@10\"]\n"));
    let run = |cfg: &Config| {
        let mut engine = Engine::new(cfg).without_past_limit();
        let now = Instant::now();
        let started = Instant::now();
        for (kind, payload) in &events {
            engine.process(*kind, 0, payload.as_bytes(), now).unwrap();
        }
        engine.finish();
        (started.elapsed().as_secs_f64() * 1e9 / f64::from(IMPRESSIONS), engine)
    };
    let per_impression = |cfg: &Config| median((0..3).map(|_| run(cfg).0).collect());
    let (plain, adjusted) = (per_impression(&off), per_impression(&on));
    results.insert("cuped_off_impression_nanoseconds".into(), plain.into());
    results.insert("cuped_on_impression_nanoseconds".into(), adjusted.into());
    results.insert("cuped_cost_ratio".into(), (adjusted / plain).into());
    let (_, engine) = run(&on);
    let report_ms = median(
        (0..5)
            .map(|_| {
                let started = Instant::now();
                std::hint::black_box(engine.experiment_reports(&engine.ab_cumulative(), Span::Cumulative));
                started.elapsed().as_secs_f64() * 1e3
            })
            .collect(),
    );
    results.insert("cuped_report_milliseconds".into(), report_ms.into());

    // Memory: 100,000 units with impressions on each of 15 days (the default look-back and
    // today) of two adjusted metrics; then an experiment starts and freezes their pre-periods.
    let settings = CupedSettings { slots: vec![0, 1], lookback_days: 14, max_units: 1_000_000, unit_buckets: 256 };
    let before = live();
    let mut state = CupedState::new();
    for day in 0..15 {
        for unit in 0..MEMORY_UNITS {
            state.finalized(&settings, "baseline", 0, unit, day * DAY + 1000, &[0.5, 0.25]);
        }
    }
    let held = live() - before;
    results.insert("cuped_bytes_per_unit_15_days".into(), (held as f64 / f64::from(MEMORY_UNITS)).into());
    let before_frozen = live();
    state.finalized(&settings, "e", 1, MEMORY_UNITS + 1, 15 * DAY + 1000, &[0.5, 0.25]);
    results.insert(
        "cuped_bytes_per_frozen_unit".into(),
        ((live() - before_frozen) as f64 / f64::from(MEMORY_UNITS)).into(),
    );
    std::hint::black_box(state);
}

/// The table's rows of this stage.
pub fn rows(get: &dyn Fn(&str) -> Option<f64>) -> Vec<(&'static str, String, &'static str, &'static str)> {
    vec![
        (
            "CUPED: impression ns, on / off",
            format!(
                "{} / {} = {}",
                fmt(get("cuped_on_impression_nanoseconds"), 0),
                fmt(get("cuped_off_impression_nanoseconds"), 0),
                fmt(get("cuped_cost_ratio"), 2)
            ),
            "",
            "",
        ),
        (
            "  bytes per unit (15 days); per frozen unit",
            format!("{}; {}", fmt(get("cuped_bytes_per_unit_15_days"), 0), fmt(get("cuped_bytes_per_frozen_unit"), 0)),
            "",
            "",
        ),
        ("  cumulative report with read-out ms", fmt(get("cuped_report_milliseconds"), 2), "", ""),
    ]
}
