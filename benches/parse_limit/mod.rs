//! Issue 37's parse limit: how fast a SIMD JSON parser reads replay's files, parsing only.
//!
//! simd-json (its tape, the whole parse of a document without building values; CPU features
//! detected at run time) over the same two JSON-lines files the replay stage times, with the
//! same threading as replay's readers (one thread per file), and on one thread; and rankpulse's
//! own decoders alone (decoding, hashing the ids) on one thread. Each pass reads its files from
//! the page cache inside the timing, as replay does. Medians of 3.

use std::path::Path;
use std::time::Instant;

use rankpulse::config::Config;
use rankpulse::event::{Decoders, EventKind, RawMessage};

use crate::{fmt, median, Results};

/// Every line of `path` through simd-json's parser; the lines read. (The demo's faults make a
/// few lines invalid JSON: those are parsed up to the error, as the decoders do.)
fn simd_json_pass(path: &Path) -> usize {
    let bytes = std::fs::read(path).unwrap();
    let (mut line_buf, mut buffers) = (Vec::new(), simd_json::Buffers::default());
    let mut parsed = 0;
    for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        // simd-json parses in place: each line is copied into a buffer it may rewrite.
        line_buf.clear();
        line_buf.extend_from_slice(line);
        std::hint::black_box(simd_json::to_tape_with_buffers(&mut line_buf, &mut buffers).map(|t| t.0.len()).ok());
        parsed += 1;
    }
    parsed
}

/// Every line of `path` through rankpulse's decoders; the lines read.
fn rankpulse_pass(path: &Path, kind: EventKind, decoders: &Decoders) -> usize {
    let bytes = std::fs::read(path).unwrap();
    let mut results = Vec::new();
    let mut decoded = 0;
    for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let raw = RawMessage::body(line);
        std::hint::black_box(match kind {
            EventKind::Impression => decoders.impression(raw, &mut results).is_ok(),
            EventKind::Engagement => decoders.engagement(raw).is_ok(),
        });
        decoded += 1;
    }
    decoded
}

/// The parse limit of the replay stage's files, against its time (`replay_seconds`).
pub fn parse_limit(results: &mut Results, imp: &Path, eng: &Path, replay_seconds: f64) {
    let lines = simd_json_pass(imp) + simd_json_pass(eng);
    let timed = |pass: &dyn Fn() -> usize| {
        let started = Instant::now();
        assert_eq!(pass(), lines, "every line read");
        started.elapsed().as_secs_f64()
    };
    let threads = median(
        (0..3)
            .map(|_| {
                timed(&|| {
                    std::thread::scope(|s| {
                        let eng = s.spawn(|| simd_json_pass(eng));
                        simd_json_pass(imp) + eng.join().unwrap()
                    })
                })
            })
            .collect(),
    );
    let one_thread = median((0..3).map(|_| timed(&|| simd_json_pass(imp) + simd_json_pass(eng))).collect());
    let decoders = Decoders::new(&Config::default());
    let ours = median(
        (0..3)
            .map(|_| {
                timed(&|| {
                    rankpulse_pass(imp, EventKind::Impression, &decoders)
                        + rankpulse_pass(eng, EventKind::Engagement, &decoders)
                })
            })
            .collect(),
    );
    results.insert("parse_limit_seconds".into(), threads.into());
    results.insert("parse_limit_one_thread_seconds".into(), one_thread.into());
    results.insert("rankpulse_decoders_one_thread_seconds".into(), ours.into());
    results.insert("replay_share_of_parse_limit".into(), (threads / replay_seconds).into());
}

/// The table's rows.
pub fn rows(get: &dyn Fn(&str) -> Option<f64>) -> Vec<(&'static str, String, &'static str, &'static str)> {
    let share = get("replay_share_of_parse_limit");
    let verdict = match share {
        Some(v) if v >= 0.5 => "met",
        Some(_) => "MISSED",
        None => "n/a",
    };
    vec![
        ("replay / parse limit (simd-json, a thread a file)", fmt(share, 2), ">= 0.50", verdict),
        (
            "  parse s: threads; one; rankpulse decoders one",
            format!(
                "{}; {}; {}",
                fmt(get("parse_limit_seconds"), 3),
                fmt(get("parse_limit_one_thread_seconds"), 3),
                fmt(get("rankpulse_decoders_one_thread_seconds"), 3)
            ),
            "",
            "",
        ),
    ]
}
