//! How much sooner interleaving detects a small ranking difference than an A/B test does.
//!
//! The generator's duel (`rankpulse generate`, the demo) shows two rankers whose quality differs
//! a little (score noise 1.0 against 0.8; control and treatment of the A/B experiment differ by
//! 1.6 against 0.5) to the same simulated users in two ways, on alternate searches: as one
//! team-draft interleaved list (`ranker-duel`) and as an A/B test, one ranker per user
//! (`ranker-duel-ab`). Per seed, the searches of each kind are read in order, and at every
//! 100th the test computes rankpulse's own figures from the per-impression values of its metric
//! and credit code: the number of searches each side needs before its p-value is first below
//! 0.01. The headline is the always-valid p-values (interleaving's preference, the A/B
//! comparison of MRR; the same mixture boundary), for which "first below 0.01" is a valid
//! stopping rule; the fixed-horizon tests (sign test, Welch) are reported too, but stopping at
//! their first crossing is peeking, so that ratio is noisier. The median ratio over seeds is
//! what the manual quotes (docs/src/interleaving.md); the test fails if interleaving is not at
//! least 3 times as sensitive.
//!
//! Both sides count impressions as independent (`ab.unit = "impression"`), the same rule for
//! both; the A/B side is Welch's test on MRR, the metric the demo shows.

use std::collections::HashMap;

use rankpulse::demo::TrafficGenerator;
use rankpulse::interleaving::{score, CreditRule};
use rankpulse::metrics::{MetricKind, MetricLayout};
use rankpulse::stats::preference::{preference, PairCounts};
use rankpulse::stats::sequential::{sequential_difference, MixtureBoundary};
use rankpulse::stats::{compare, estimate, Moments};

const CHECK_EVERY: u64 = 100;
/// Searches of each kind per seed at most: the A/B side usually needs fewer.
const MAX_SEARCHES: u64 = 80_000;
const SEEDS: u64 = 9;

/// A generated search: its gains per rank and, interleaved, its teams.
struct Search {
    interleaved: bool,
    variant_is_treatment: bool,
    gains: Vec<u8>,
    teams: Vec<u8>,
}

fn gain_of(action: &str) -> u8 {
    match action {
        "click" => 1,
        "add_to_cart" => 2,
        "purchase" => 3,
        _ => 0,
    }
}

/// The next duel search of `generator`, with the gains its engagements give (every generated
/// engagement is within the attribution window; a document's gain is its best action, at its
/// first rank).
fn next_search(generator: &mut TrafficGenerator, now: &mut i64) -> Search {
    loop {
        *now += 5;
        let Some((_, impression, engagements)) = generator.duel(*now) else { continue };
        let imp: serde_json::Value = serde_json::from_str(&impression).unwrap();
        let results: Vec<&str> = imp["results"].as_array().unwrap().iter().map(|r| r.as_str().unwrap()).collect();
        let mut best: HashMap<String, u8> = HashMap::new();
        for e in &engagements {
            let e: serde_json::Value = serde_json::from_str(&e.payload).unwrap();
            let g = gain_of(e["action"].as_str().unwrap());
            let slot = best.entry(e["doc_id"].as_str().unwrap().to_string()).or_default();
            *slot = (*slot).max(g);
        }
        let mut seen = std::collections::HashSet::new();
        let gains =
            results.iter().map(|d| if seen.insert(*d) { best.get(*d).copied().unwrap_or(0) } else { 0 }).collect();
        let interleaved = imp.get("teams").is_some();
        let teams = match imp["teams"].as_array() {
            Some(teams) => teams.iter().map(|t| if t == "baseline" { 1 } else { 2 }).collect(),
            None => Vec::new(),
        };
        return Search { interleaved, variant_is_treatment: imp["variant"] == "treatment", gains, teams };
    }
}

/// Searches of each kind until each test's p-value first falls below 0.01: (interleaving
/// sign test, A/B Welch on MRR, interleaving always-valid, A/B always-valid); `None` beyond
/// [`MAX_SEARCHES`].
fn searches_needed(seed: u64) -> [Option<u64>; 4] {
    let layout = MetricLayout::new(&[10], 1, 3);
    let rr = layout.slot(MetricKind::ReciprocalRank, None).unwrap();
    let rule = CreditRule { threshold: 1, by_gain: false, depth: 0 };
    let boundary = MixtureBoundary::tightest_at(5000.0, 0.01);
    let mut generator = TrafficGenerator::new(seed);
    let mut now = 1_795_000_000_000;
    let (mut interleaved, mut counts) = (0u64, PairCounts::default());
    let mut arms = [Moments { n: 0, sum: 0.0, sum_squares: 0.0 }; 2];
    let mut values = vec![0.0; layout.len()];
    let mut needed = [None; 4];
    while needed.iter().any(Option::is_none) && (interleaved < MAX_SEARCHES || arms[0].n + arms[1].n < MAX_SEARCHES) {
        let search = next_search(&mut generator, &mut now);
        if search.interleaved {
            interleaved += 1;
            let s = score(&search.gains, &search.teams, rule);
            counts.engaged += u64::from(s.engaged());
            counts.wins += u64::from(s.credits[1] > s.credits[0]);
            counts.losses += u64::from(s.credits[0] > s.credits[1]);
            if interleaved % CHECK_EVERY == 0 {
                let p = preference(counts, None, 0.99, &boundary);
                for (slot, value) in [(0, p.sign_test_p_value), (2, p.always_valid_p_value)] {
                    if needed[slot].is_none() && value.is_some_and(|p| p < 0.01) {
                        needed[slot] = Some(interleaved);
                    }
                }
            }
        } else {
            layout.evaluate(&search.gains, &[], &mut values);
            let arm = &mut arms[usize::from(search.variant_is_treatment)];
            arm.n += 1;
            arm.sum += values[rr];
            arm.sum_squares += values[rr] * values[rr];
            let n = arms[0].n + arms[1].n;
            if n % CHECK_EVERY == 0 && arms.iter().all(|a| a.n >= 2) {
                let (c, t) = (estimate(arms[0], None, 0.99), estimate(arms[1], None, 0.99));
                let welch = compare(&t, &c, 0.99).p_value;
                let always_valid = sequential_difference(&t, &c, &boundary).map(|look| look.p_value);
                for (slot, value) in [(1, welch), (3, always_valid)] {
                    if needed[slot].is_none() && value.is_some_and(|p| p < 0.01) {
                        needed[slot] = Some(n);
                    }
                }
            }
        }
    }
    needed
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[test]
fn interleaving_needs_far_fewer_searches_than_an_ab_test_on_mrr() {
    let mut ratios = Vec::new();
    let mut always_valid_ratios = Vec::new();
    for seed in 0..SEEDS {
        let [il, ab, il_av, ab_av] = searches_needed(seed);
        // A side that never got there counts as MAX_SEARCHES: the ratio is then a lower bound.
        let at = |n: Option<u64>| n.unwrap_or(MAX_SEARCHES) as f64;
        let il = il.expect("interleaving detects the duel's difference");
        ratios.push(at(ab) / il as f64);
        always_valid_ratios.push(at(ab_av) / at(il_av));
        println!(
            "seed {seed}: p < 0.01 after {il} interleaved searches, {} A/B searches (MRR, Welch); always-valid: {} against {}",
            ab.map_or(format!(">{MAX_SEARCHES}"), |n| n.to_string()),
            il_av.map_or(format!(">{MAX_SEARCHES}"), |n| n.to_string()),
            ab_av.map_or(format!(">{MAX_SEARCHES}"), |n| n.to_string()),
        );
    }
    let (ratio, always_valid_ratio) = (median(ratios), median(always_valid_ratios));
    println!("median over {SEEDS} seeds: interleaving is {always_valid_ratio:.1}x as sensitive (always-valid p), {ratio:.1}x (first crossing of the fixed-horizon p)");
    assert!(always_valid_ratio >= 3.0, "interleaving only {always_valid_ratio:.1}x as sensitive as the A/B test");
    assert!(ratio >= 2.0, "fixed-horizon: only {ratio:.1}x");
}
