//! Memory under floods, measured with a counting global allocator (live heap bytes, exact and
//! independent of machine noise): bytes per pending impression, flat memory when impressions
//! never get engagements or a producer invents a variant per request, and the counters that say
//! what was evicted or folded.

mod common;

use std::sync::Mutex;
use std::time::Instant;

use common::alloc::{live, Counting};
use rankpulse::config::Config;
use rankpulse::engine::Engine;
use rankpulse::event::EventKind;

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The tests measure one process-wide counter: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn engine(toml: &str) -> Engine {
    Engine::new(&Config::from_toml_with_env(toml, "flood", std::iter::empty()).unwrap()).without_past_limit()
}

/// An impression with ten results, in a reused buffer (the test's own allocations stay flat).
fn impression(buf: &mut String, i: u64, variant: &str) {
    use std::fmt::Write;
    buf.clear();
    write!(buf, r#"{{"query_id":"flood-{i}","timestamp":{},"results":["#, 1_000_000 + i).unwrap();
    for r in 0..10 {
        write!(buf, r#"{}"doc-{}""#, if r > 0 { "," } else { "" }, (i * 31 + r * 7) % 100_003).unwrap();
    }
    write!(buf, r#"],"experiment":"e","variant":"{variant}"}}"#).unwrap();
}

fn rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

#[test]
fn bytes_per_pending_impression_with_ten_results() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    const PENDING: u64 = 1_000_000;
    let mut e = engine("[join]\nmax_pending_impressions = 2000000\n");
    let now = Instant::now();
    let mut buf = String::with_capacity(512);
    let before = live();
    for i in 0..PENDING {
        impression(&mut buf, i, "v");
        e.process(EventKind::Impression, (i % 4) as i32, buf.as_bytes(), now).unwrap();
    }
    assert_eq!(e.pending_impressions(), PENDING as usize);
    let per_impression = (live() - before) as f64 / PENDING as f64;
    eprintln!("bytes per pending impression (10 results) at {PENDING} pending: {per_impression:.0}");
    // Results (80 bytes) + record header (48) + index and deadline-queue ids (about 15); a
    // regression past this is a design change.
    assert!(per_impression < 160.0, "{per_impression} bytes per pending impression");

    // What checkpointing this state costs (reported, not asserted: timing is the machine's).
    // Measured in optimized builds only (`cargo test --release --test flood -- --nocapture`);
    // checkpoint correctness is the checkpoint module's own tests.
    if cfg!(debug_assertions) {
        return;
    }
    let positions = rankpulse::source::Positions::default();
    let started = Instant::now();
    let encoded: Vec<Vec<u8>> =
        (0..4).map(|p| rankpulse::source::encode_partition(&e, &positions, p).unwrap()).collect();
    let encode_time = started.elapsed();
    let started = Instant::now();
    let mut restored = Engine::new(&Config::default());
    for (partition, bytes) in (0..).zip(&encoded) {
        let snapshot = rankpulse::source::record::decode_snapshot(bytes).unwrap();
        restored.restore_partition(partition, snapshot.task, Instant::now()).unwrap();
    }
    let restore_time = started.elapsed();
    assert_eq!(restored.pending_impressions(), PENDING as usize);
    eprintln!(
        "snapshots of {PENDING} pending impressions (4 partitions): {:.1} MB, encode {encode_time:?}, decode+restore {restore_time:?}",
        encoded.iter().map(Vec::len).sum::<usize>() as f64 / 1e6
    );
}

#[test]
fn impressions_that_never_get_engagements_keep_memory_flat() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    const LIMIT: usize = 50_000;
    const FLOOD: u64 = 1_000_000;
    let baseline = live();
    let mut e = engine("[join]\nmax_pending_impressions = 50000\nmax_dedup_keys = 50000\n");
    let now = Instant::now();
    let mut buf = String::with_capacity(512);
    let mut at_limit = 0;
    for i in 0..FLOOD {
        impression(&mut buf, i, "v");
        e.process(EventKind::Impression, 0, buf.as_bytes(), now).unwrap();
        if i == 8 * LIMIT as u64 {
            // Full for a while: pending and de-duplication memory at their limits, and the hash
            // tables grown to their size under churn.
            at_limit = live() - baseline;
        }
    }
    let end = live() - baseline;
    eprintln!(
        "flood of {FLOOD} impressions with limit {LIMIT}: live heap {:.1} MB when full, {:.1} MB at the end; RSS {:.0} MB",
        at_limit as f64 / 1e6,
        end as f64 / 1e6,
        rss_bytes().unwrap_or(0) as f64 / 1e6
    );
    assert_eq!(e.pending_impressions(), LIMIT);
    assert_eq!(e.counters().impressions_evicted, FLOOD - LIMIT as u64);
    assert!(e.state_size().dedup <= LIMIT);
    assert!(end <= at_limit + at_limit / 20, "memory grew from {at_limit} to {end} bytes under the flood");
    // Every evicted impression was finalized and counted, none lost.
    let finalized: u64 = e.cumulative().iter().map(|(_, s)| s.impressions).sum();
    assert_eq!(finalized, FLOOD - LIMIT as u64);
}

#[test]
fn a_variant_per_request_is_folded_and_memory_stays_flat() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    const FLOOD: u64 = 200_000;
    let baseline = live();
    let mut e = engine("[join]\nmax_pending_impressions = 10000\nmax_dedup_keys = 10000\n[labels]\nmax_experiments = 5\nmax_variants = 4\n");
    let now = Instant::now();
    let mut buf = String::with_capacity(512);
    let mut variant = String::new();
    let mut after_warmup = 0;
    for i in 0..FLOOD {
        variant.clear();
        use std::fmt::Write;
        write!(variant, "bug-{i}").unwrap();
        impression(&mut buf, i, &variant);
        e.process(EventKind::Impression, 0, buf.as_bytes(), now).unwrap();
        if i == 100_000 {
            after_warmup = live() - baseline;
        }
    }
    let end = live() - baseline;
    let groups = e.groups();
    use rankpulse::accumulate::FoldedLabel;
    eprintln!(
        "{FLOOD} unique variants: {} groups, {} folded, live heap {:.1} MB after warm-up, {:.1} MB at the end",
        groups.active(),
        groups.folded(FoldedLabel::Variant),
        after_warmup as f64 / 1e6,
        end as f64 / 1e6
    );
    assert_eq!(groups.active(), 5, "4 variants + e/other");
    assert_eq!(groups.folded(FoldedLabel::Variant), FLOOD - 4);
    assert!(end <= after_warmup + after_warmup / 20, "memory grew from {after_warmup} to {end} bytes");
}
