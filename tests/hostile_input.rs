//! Hostile input, in CI (stable, no fuzzer): the committed fuzz corpus (`fuzz/corpus/<target>/`,
//! minimized with `cargo fuzz cmin`) replayed through `rankpulse::fuzzing`, the entry points the
//! fuzz targets call, and proptests that mutate well-formed inputs the way a broken producer or
//! an attacker would (byte flips, truncations, huge numbers, deep nesting, long strings, length
//! and count fields set to `u32::MAX` / `u64::MAX` in snapshot and chunk headers and inside the
//! snapshot's payload). Each entry point panics on what must never happen (see its module
//! documentation): a panic of the code under test, a rejected message not counted, or counted
//! under another reason, the scanner disagreeing with serde_json.
//!
//! The seeds the fuzzers started from are written by the ignored test `write_seeds`
//! (`cargo test --test integration hostile_input::write_seeds -- --ignored`): lines of the conformance
//! fixtures, the demo's generated traffic (with its malformed messages) and its UBI form, the
//! decoders' edge cases, and snapshots, aggregates records and changelog records of engines fed
//! that traffic.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Instant;

use proptest::prelude::*;
use rankpulse::checkpoint;
use rankpulse::config::Config;
use rankpulse::demo::{FaultRate, TrafficGenerator};
use rankpulse::engine::Engine;
use rankpulse::event::{EventKind, RejectReason};
use rankpulse::fuzzing::{self, Restored};
use rankpulse::source::chunks::{chunk_records_of, ChunkHeader, SnapshotId};
use rankpulse::source::{encode_partition, Positions};
use serde_json::{json, Value};

/// The fuzz targets, as named in `fuzz/Cargo.toml` and `fuzz/corpus/`.
const TARGETS: [&str; 6] = ["json_events", "ubi_documents", "mapped_events", "scan_vs_serde", "snapshot", "changelog"];

/// 2026-01-01T00:00:00Z: the generated traffic's start.
const START_MS: i64 = 1_767_225_600_000;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every file of a committed corpus, by name.
fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = root().join("fuzz/corpus").join(target);
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.unwrap().path();
            (path.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&path).unwrap())
        })
        .collect();
    files.sort();
    files
}

/// Runs one input through a target's entry point and says what became of it, for the tallies.
fn run(target: &str, data: &[u8]) -> Vec<String> {
    let event = |r: Result<(), RejectReason>| match r {
        Ok(()) => "accepted".to_string(),
        Err(reason) => format!("rejected: {}", reason.label()),
    };
    match target {
        "json_events" | "ubi_documents" => {
            let outcome =
                if target == "json_events" { fuzzing::json_events(data) } else { fuzzing::ubi_documents(data) };
            vec![
                format!("impression {}", event(outcome.impression)),
                format!("engagement {}", event(outcome.engagement)),
            ]
        }
        "mapped_events" => {
            let [ga4, avro] = fuzzing::mapped_events(data);
            vec![
                format!("ga4 impression {}", event(ga4.impression)),
                format!("ga4 engagement {}", event(ga4.engagement)),
                format!("avro impression {}", event(avro.impression)),
                format!("avro engagement {}", event(avro.engagement)),
            ]
        }
        "scan_vs_serde" => {
            let answered = fuzzing::scan_vs_serde(data);
            let said = |yes| if yes { "scanner answered" } else { "left to serde_json" };
            vec![
                format!("impression {}", said(answered.impression)),
                format!("engagement {}", said(answered.engagement)),
            ]
        }
        "snapshot" => {
            let o = fuzzing::snapshot(data);
            vec![
                format!("snapshot {:?}", o.snapshot),
                format!("sealed snapshot {:?}", o.sealed_snapshot),
                format!("aggregates {:?}", o.aggregates),
                format!("sealed aggregates {:?}", o.sealed_aggregates),
            ]
        }
        "changelog" => {
            let o = fuzzing::changelog(data);
            let mut out = vec![format!("{} chunks", if o.chunks == 0 { "no" } else { "some" })];
            out.extend(o.snapshots.iter().map(|r| format!("snapshot {r:?}")));
            out.extend(o.aggregates.iter().map(|r| format!("aggregates {r:?}")));
            out
        }
        other => panic!("no target {other}"),
    }
}

#[test]
fn the_committed_corpus_replays_through_every_entry_point() {
    let started = Instant::now();
    let mut total = 0;
    for target in TARGETS {
        let files = corpus(target);
        assert!(
            files.len() >= 10,
            "{target}: {} corpus files; run the fuzzer and cmin (docs/src/contributing.md)",
            files.len()
        );
        total += files.len();
        let mut tally: BTreeMap<String, usize> = BTreeMap::new();
        for (name, data) in &files {
            let outcome = std::panic::catch_unwind(|| run(target, data))
                .unwrap_or_else(|_| panic!("fuzz/corpus/{target}/{name} panicked (see above)"));
            for what in outcome {
                *tally.entry(what).or_default() += 1;
            }
        }
        eprintln!("{target}: {} inputs: {tally:?}", files.len());
        // The corpus exercises both sides of every path, or it tests little.
        let seen = |what: &str| tally.keys().any(|k| k.starts_with(what));
        let expected: &[&str] = match target {
            "json_events" | "ubi_documents" => {
                &["impression accepted", "impression rejected", "engagement accepted", "engagement rejected"]
            }
            "mapped_events" => &[
                "ga4 impression accepted",
                "ga4 impression rejected",
                "ga4 engagement accepted",
                "ga4 engagement rejected",
                "avro impression accepted",
                "avro impression rejected",
                "avro engagement accepted",
                "avro engagement rejected",
            ],
            "scan_vs_serde" => &[
                "impression scanner answered",
                "impression left to serde_json",
                "engagement scanner answered",
                "engagement left to serde_json",
            ],
            // Valid snapshots as written are the seeds' (`every_seed_goes_through_its_target`):
            // behind a recomputed checksum they cover the same code, which minimizing prefers.
            "snapshot" => &[
                "snapshot Refused",
                "sealed snapshot Installed",
                "sealed snapshot Incompatible",
                "sealed snapshot Refused",
                "sealed aggregates Installed",
            ],
            "changelog" => &["snapshot Installed", "snapshot Refused", "aggregates Installed"],
            _ => &[],
        };
        for what in expected {
            assert!(seen(what), "{target}: no corpus input gives \"{what}\": {tally:?}");
        }
    }
    assert!(total <= 1000, "{total} corpus files: minimize them (cargo fuzz cmin)");
    eprintln!("{total} corpus inputs in {:?}", started.elapsed());
}

/// Every rejected corpus message, processed through one engine per format as the source would
/// feed it, is in `rankpulse_events_rejected_total{topic, reason}` once, under the reason the
/// entry point reported for it alone.
#[test]
fn every_rejected_corpus_message_is_counted_in_the_exported_reject_counters() {
    for (target, format) in [("json_events", "json"), ("ubi_documents", "ubi")] {
        let cfg = Config::from_toml_with_env(
            &format!("[kafka]\nimpressions_format = \"{format}\"\nengagements_format = \"{format}\"\n"),
            "test",
            std::iter::empty(),
        )
        .unwrap();
        let now = Instant::now();
        let mut engine = Engine::new(&cfg).without_past_limit();
        engine.assign(0, now);
        let mut expected: BTreeMap<(String, String), u64> = BTreeMap::new();
        for (_, data) in corpus(target) {
            let alone = if format == "json" { fuzzing::json_events(&data) } else { fuzzing::ubi_documents(&data) };
            for (kind, alone) in [(EventKind::Impression, alone.impression), (EventKind::Engagement, alone.engagement)]
            {
                let here = engine.process(kind, 0, &data, now).map_err(|r| r.reason);
                assert_eq!(here, alone, "{target}: {:?}", String::from_utf8_lossy(&data));
                if let Err(reason) = here {
                    *expected.entry((engine.topic(kind).to_string(), reason.label().to_string())).or_default() += 1;
                }
            }
        }
        let mut exported: BTreeMap<(String, String), u64> = BTreeMap::new();
        for family in rankpulse::output::gather(&engine) {
            if family.name() != "rankpulse_events_rejected_total" {
                continue;
            }
            for metric in family.get_metric() {
                let label = |name: &str| {
                    metric.get_label().iter().find(|l| l.name() == name).map(|l| l.value().to_string()).unwrap()
                };
                let value = metric.get_counter().get_value() as u64;
                if value > 0 {
                    *exported.entry((label("topic"), label("reason"))).or_default() += value;
                }
            }
        }
        assert!(!expected.is_empty(), "{target}: the corpus has rejected messages");
        assert_eq!(exported, expected, "{target}: exported reject counters against the rejected corpus messages");
    }
}

// ---- mutations ----

/// What a mutation puts into a message: what breaks parsers (huge numbers, deep nesting, long
/// strings, bad UTF-8 and escapes, control bytes) and JSON's own punctuation.
fn hostile_token() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b"18446744073709551616".to_vec()),
        Just(b"-9223372036854775809".to_vec()),
        Just(b"9223372036854775807".to_vec()),
        Just(b"1e999".to_vec()),
        Just(b"-0".to_vec()),
        Just(b"0.0000000000000000000000000001e-400".to_vec()),
        (1usize..5000).prop_map(|n| "9".repeat(n).into_bytes()),
        (1usize..20_000).prop_map(|n| "[".repeat(n).into_bytes()),
        (1usize..20_000).prop_map(|n| format!("{}1{}", "[".repeat(n), "]".repeat(n)).into_bytes()),
        (1usize..5000).prop_map(|n| "{\"a\":".repeat(n).into_bytes()),
        (1usize..200_000).prop_map(|n| format!("\"{}\"", "x".repeat(n)).into_bytes()),
        // Past `limits.max_message_bytes` (1 MiB): too large, whatever else it is.
        ((1usize << 20)..(1 << 20) + 16).prop_map(|n| format!("\"{}\"", "x".repeat(n)).into_bytes()),
        (1usize..2000).prop_map(|n| format!("[{}\"a\"]", "\"a\",".repeat(n)).into_bytes()),
        Just(b"\"\\ud800\"".to_vec()),
        Just(b"\"\\u0000\"".to_vec()),
        Just(b"\"\\".to_vec()),
        Just(vec![0xff, 0xfe, 0xc3]),
        Just(vec![0x00]),
        Just(b"\"2026-13-45T99:99:99Z\"".to_vec()),
        Just(b"\"+275760-09-13T00:00:00Z\"".to_vec()),
        Just(b"null".to_vec()),
        prop::sample::select(vec![&b"\""[..], b",", b":", b"{", b"}", b"[", b"]", b"\\", b" "])
            .prop_map(<[u8]>::to_vec),
    ]
}

#[derive(Debug, Clone)]
enum Mutation {
    /// One bit of the byte at an index flipped.
    Flip(prop::sample::Index, u8),
    /// Cut at an index.
    Truncate(prop::sample::Index),
    /// A token inserted at an index.
    Insert(prop::sample::Index, Vec<u8>),
    /// Up to 16 bytes at an index replaced by a token.
    Replace(prop::sample::Index, usize, Vec<u8>),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<prop::sample::Index>(), 0u8..8).prop_map(|(i, bit)| Mutation::Flip(i, bit)),
        any::<prop::sample::Index>().prop_map(Mutation::Truncate),
        (any::<prop::sample::Index>(), hostile_token()).prop_map(|(i, t)| Mutation::Insert(i, t)),
        (any::<prop::sample::Index>(), 0usize..16, hostile_token()).prop_map(|(i, n, t)| Mutation::Replace(i, n, t)),
    ]
}

fn mutate(mut bytes: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
    for m in mutations {
        match m {
            Mutation::Flip(i, bit) if !bytes.is_empty() => {
                let at = i.index(bytes.len());
                bytes[at] ^= 1 << bit;
            }
            Mutation::Truncate(i) => bytes.truncate(i.index(bytes.len() + 1)),
            Mutation::Insert(i, token) => {
                let at = i.index(bytes.len() + 1);
                bytes.splice(at..at, token.iter().copied());
            }
            Mutation::Replace(i, n, token) => {
                let at = i.index(bytes.len() + 1);
                let end = (at + n).min(bytes.len());
                bytes.splice(at..end, token.iter().copied());
            }
            Mutation::Flip(..) => {}
        }
    }
    bytes
}

/// Values a length, count or number field might be set to by an attacker.
fn huge_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(u64::MAX),
        Just(u64::from(u32::MAX)),
        Just(u64::from(u32::MAX) + 1),
        Just(i64::MAX as u64),
        Just(1 << 40),
        Just(0),
        any::<u64>()
    ]
}

/// The varint (postcard's integer encoding) of a value.
fn varint(mut v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

/// How a snapshot's or a record's bytes are damaged: the header's length field, a varint inside
/// the payload (a sequence length, a group id, a partition, a counter) set to a huge value, or
/// the generic mutations.
#[derive(Debug, Clone)]
enum Damage {
    /// The header's payload length (bytes 12..20).
    HeaderLength(u64),
    /// The varint at an index of the payload replaced by a huge one, checksum recomputed.
    PayloadVarint(prop::sample::Index, u64),
    /// Generic mutations of the payload, checksum recomputed.
    Payload(Vec<Mutation>),
    /// Generic mutations of the whole bytes (the checksum then catches them).
    Raw(Vec<Mutation>),
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        1 => huge_u64().prop_map(Damage::HeaderLength),
        3 => (any::<prop::sample::Index>(), huge_u64()).prop_map(|(i, v)| Damage::PayloadVarint(i, v)),
        2 => prop::collection::vec(mutation(), 1..4).prop_map(Damage::Payload),
        1 => prop::collection::vec(mutation(), 1..3).prop_map(Damage::Raw),
    ]
}

const HEADER: usize = 28;

fn damaged(bytes: &[u8], damage: &Damage) -> Vec<u8> {
    let payload = &bytes[HEADER..];
    match damage {
        Damage::HeaderLength(len) => {
            let mut out = bytes.to_vec();
            out[12..20].copy_from_slice(&len.to_le_bytes());
            out
        }
        Damage::PayloadVarint(i, v) => {
            let starts = varint_starts(payload);
            let at = starts.get(i.index(starts.len().max(1))).copied().unwrap_or(0);
            checkpoint::seal(&with_varint(payload, at, *v))
        }
        Damage::Payload(ms) => checkpoint::seal(&mutate(payload.to_vec(), ms)),
        Damage::Raw(ms) => mutate(bytes.to_vec(), ms),
    }
}

/// [`damaged`] for a payload without its header (the target seals it): a varint made huge, bytes
/// mutated, or the payload cut short.
fn damaged_payload(payload: &[u8], damage: &Damage) -> Vec<u8> {
    match damage {
        Damage::PayloadVarint(i, v) => {
            let starts = varint_starts(payload);
            let at = starts.get(i.index(starts.len().max(1))).copied().unwrap_or(0);
            with_varint(payload, at, *v)
        }
        Damage::Payload(ms) | Damage::Raw(ms) => mutate(payload.to_vec(), ms),
        Damage::HeaderLength(len) => payload[..(*len as usize).min(payload.len())].to_vec(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, failure_persistence: None, ..ProptestConfig::default() })]

    /// Mutated events through both formats' entry points and the differential check.
    #[test]
    fn mutated_events_never_panic_and_every_reject_is_counted(
        seed in prop::sample::select(event_seeds()),
        mutations in prop::collection::vec(mutation(), 1..5),
    ) {
        let bytes = mutate(seed.into_bytes(), &mutations);
        fuzzing::json_events(&bytes);
        fuzzing::ubi_documents(&bytes);
        fuzzing::scan_vs_serde(&bytes);
    }

    /// Mutated GA4 events and Avro datums through the mapped decoders (JSONPath filters, the
    /// walk, apache-avro's decoding of hostile lengths).
    #[test]
    fn mutated_events_of_your_own_shape_never_panic_and_every_reject_is_counted(
        seed in prop::sample::select(mapped_seeds()),
        mutations in prop::collection::vec(mutation(), 1..5),
    ) {
        fuzzing::mapped_events(&mutate(seed, &mutations));
    }

    /// Snapshots and aggregates records with damaged headers and payloads (the checksum
    /// recomputed, so the payload decoder and the restore see them).
    #[test]
    fn damaged_snapshots_never_panic_nor_allocate_by_their_fields(
        which in any::<prop::sample::Index>(),
        damage in damage(),
    ) {
        let seeds = state_seeds();
        let bytes = &seeds.encoded[which.index(seeds.encoded.len())];
        let damaged = damaged(bytes, &damage);
        fuzzing::snapshot(&damaged);
        fuzzing::snapshot(&damaged[HEADER.min(damaged.len())..]);
    }

    /// Deltas with damaged payloads (resealed, so the decoder and the application see them)
    /// after the snapshot they follow: refused, or applied and installed, never a panic.
    #[test]
    fn damaged_deltas_never_panic_nor_allocate_by_their_fields(
        which in any::<prop::sample::Index>(),
        damage in damage(),
    ) {
        let seeds = chain_seeds();
        let (base, payload) = &seeds[which.index(seeds.len())];
        fuzzing::delta(base, &damaged_payload(payload, &damage));
    }

    /// Click-table lines (`/api/v1/clicks` of another replica, a saved table) mutated: every
    /// line is read or named as bad, nothing panics, and what is read keeps its invariants.
    #[test]
    fn mutated_click_table_lines_are_read_or_named(
        mutations in prop::collection::vec(mutation(), 1..5),
        max_rank in 1usize..21,
    ) {
        let seed = concat!(
            r#"{"query":"red shoes","doc_id":"d1","rank":1,"impressions":40,"clicks":9}"#, "\n",
            r#"{"query":"red shoes","doc_id":"d2","rank":3,"impressions":18446744073709551615,"clicks":3}"#, "\n",
        );
        let bytes = mutate(seed.as_bytes().to_vec(), &mutations);
        let text = String::from_utf8_lossy(&bytes);
        let mut table = rankpulse::clicks::named::NamedTable::new(max_rank);
        let bad = table.add_lines(&text);
        let read = text.lines().filter(|l| !l.trim().is_empty()).count() - bad.len();
        prop_assert!(table.table.cells().count() <= read);
        for (_, rank, cell) in table.table.cells() {
            prop_assert!(rank < max_rank && cell.clicks <= cell.impressions);
        }
        let _ = rankpulse::clicks::Fitted::fit(&table.table, rankpulse::clicks::pbm::EmSettings { max_iterations: 5, tolerance: 0.0 });
    }

    /// Changelog records with huge sequences, counts and indexes, reordered, dropped or doubled,
    /// around damaged snapshots.
    #[test]
    fn changelog_records_with_hostile_headers_never_panic(
        which in any::<prop::sample::Index>(),
        chunk in 1usize..400,
        damage in damage(),
        fields in prop::collection::vec((any::<prop::sample::Index>(), 0usize..4, huge_u64()), 0..4),
        order in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
    ) {
        let seeds = state_seeds();
        let bytes = damaged(&seeds.encoded[which.index(seeds.encoded.len())], &damage);
        let id = SnapshotId { sequence: 3, nonce: 7 };
        let mut records = chunk_records_of(id, &bytes, chunk).unwrap();
        for (i, field, value) in &fields {
            let at = i.index(records.len());
            let record = &mut records[at];
            match field {
                0 => record[4..12].copy_from_slice(&value.to_le_bytes()),
                1 => record[12..20].copy_from_slice(&value.to_le_bytes()),
                2 => record[20..24].copy_from_slice(&(*value as u32).to_le_bytes()),
                _ => record[24..28].copy_from_slice(&(*value as u32).to_le_bytes()),
            }
        }
        // Records again, out of order or twice (a redelivery, a compacted gap).
        let extra: Vec<Vec<u8>> = order.iter().map(|i| records[i.index(records.len())].clone()).collect();
        records.extend(extra);
        fuzzing::changelog(&fuzzing::records_input(&records));
    }
}

#[test]
fn the_record_framing_of_the_changelog_target_round_trips() {
    let records: Vec<&[u8]> = vec![b"", b"a", &[7; 300]];
    let input = fuzzing::records_input(&records);
    assert_eq!(fuzzing::split_records(&input), records);
    // A truncated last record is whatever is left; a lone byte is no record.
    assert_eq!(fuzzing::split_records(&[5, 0, b'x', b'y']), [&b"xy"[..]]);
    assert!(fuzzing::split_records(&[5]).is_empty());
}

#[test]
fn a_huge_length_field_in_a_sealed_snapshot_is_refused_without_allocating() {
    let seeds = state_seeds();
    for bytes in &seeds.encoded {
        for len in [u64::MAX, u64::from(u32::MAX), bytes.len() as u64] {
            let d = damaged(bytes, &Damage::HeaderLength(len));
            assert_eq!(fuzzing::snapshot(&d).snapshot, Restored::Refused);
        }
    }
    // The undamaged seeds are installed, as a snapshot or as an aggregates record.
    let installed = |b: &Vec<u8>| {
        let o = fuzzing::snapshot(b);
        o.snapshot == Restored::Installed || o.aggregates == Restored::Installed
    };
    assert!(seeds.encoded.iter().all(installed));
}

// ---- seeds ----

/// Native events: conformance lines, generated traffic with its malformed messages, and the
/// decoders' edge cases.
fn native_seeds() -> Vec<String> {
    let mut out = Vec::new();
    for file in ["threshold1/impressions.jsonl", "threshold1/engagements.jsonl", "threshold2/engagements.jsonl"] {
        let text = std::fs::read_to_string(root().join("tests/conformance/fixtures").join(file)).unwrap();
        out.extend(text.lines().step_by(300).take(12).map(str::to_string));
    }
    let mut generator = TrafficGenerator::new(7);
    for i in 0..12 {
        let (_, impression, engagements) = generator.impression(START_MS + i * 700);
        out.push(impression);
        out.extend(engagements.into_iter().take(2).map(|e| e.payload));
        if let Some(bad) = generator.maybe_malformed(FaultRate::new(1.0).unwrap()) {
            out.push(bad.to_string());
        }
        // The interleaving duel: team-draft lists with their teams, and their A/B twin.
        if let Some((_, duel, engagements)) = generator.duel(START_MS + i * 700) {
            out.push(duel);
            out.extend(engagements.into_iter().take(2).map(|e| e.payload));
        }
    }
    out.extend(
        [
            r#"{"query_id":"q\u0031","timestamp":"2026-11-22T10:05:00.123+01:00","results":["a","b\n"],"variant":null}"#,
            r#" { "query_id" : "q1" , "timestamp" : -5 , "results" : [ ] , "client_id" : 7 , "session_id" : {"a":[1]} } "#,
            r#"{"query_id":"q","timestamp":1,"results":["a",""],"experiment":"e","extra":{"a":[1,-2.5e+3,true,false,null]}}"#,
            r#"{"query_id":"q","timestamp":18446744073709551615,"doc_id":"d","action":"purchase","event_id":"x","position":3}"#,
            r#"{"query_id":"q","timestamp":1.5,"doc_id":"d","position":-0}"#,
            r#"{"query_id":"q","timestamp":1,"results":[]} trailing"#,
            r#"{"query_id":"q","timestamp":1,"results":["a","b","a"],"interleaving":["x","y","z"],"teams":["z","x","y"]}"#,
            r#"{"query_id":"q","timestamp":1,"results":["a"],"interleaving":["x","x"],"teams":["x",1]}"#,
            r#"[1,2]"#,
            "\"text\"",
            "",
        ]
        .map(str::to_string),
    );
    out
}

/// A native event as the UBI document a UBI-instrumented application would log.
fn to_ubi(line: &str, i: usize) -> Option<String> {
    let Ok(Value::Object(native)) = serde_json::from_str::<Value>(line) else { return None };
    let ts = match native.get("timestamp") {
        Some(Value::Number(n)) if i % 2 == 1 => n
            .as_i64()
            .and_then(chrono::DateTime::from_timestamp_millis)
            .map_or(Value::Null, |t| json!(t.format("%Y-%m-%dT%H:%M:%S%.3f").to_string())),
        other => other.cloned().unwrap_or(Value::Null),
    };
    Some(if let Some(results) = native.get("results") {
        let hits = if i % 3 == 0 { "query_response_object_ids" } else { "query_response_hit_ids" };
        json!({"application": "shop", "query_id": native.get("query_id"), "timestamp": ts, hits: results,
               "client_id": native.get("client_id"), "user_query": "laptop",
               "query_attributes": {"experiment": native.get("experiment"), "variant": native.get("variant"),
                                    "session_id": native.get("session_id"), "page": 1}})
        .to_string()
    } else {
        json!({"application": "shop", "action_name": native.get("action").unwrap_or(&json!("click")),
               "query_id": native.get("query_id"), "timestamp": ts, "message_type": "INTERACTION",
               "event_attributes": {"object": {"object_id": native.get("doc_id"), "object_id_field": "sku"},
                                    "position": {"ordinal": native.get("position")}}})
        .to_string()
    })
}

/// UBI documents: the native seeds converted, and the schema's edge cases.
fn ubi_seeds() -> Vec<String> {
    let mut out: Vec<String> = native_seeds().iter().enumerate().filter_map(|(i, l)| to_ubi(l, i)).collect();
    out.extend(
        [
            r#"{"query_id":"q1","timestamp":1700000000000,"query_response_object_ids":["a",42],"query_response_hit_ids":null}"#,
            r#"{"query_id":"q1","timestamp":"2018-11-13T20:20:39","query_response_hit_ids":["a"],"query_attributes":{"experiment":7,"variant":true}}"#,
            r#"{"action_name":"click","query_id":"q","timestamp":9,"event_attributes":{"object":{"object_id":12},"position":null}}"#,
            r#"{"action_name":"on_search","query_id":"q","timestamp":9,"event_attributes":null}"#,
            r#"{"query_id":"q2","timestamp":9,"query_attributes":{"interleaving":["b","a"]},"query_response_hits":[{"_id":"d1","_search_configuration_id":"a"},{"id":7,"_search_configuration_id":"b"},{"_id":"d3"}]}"#,
        ]
        .map(str::to_string),
    );
    out
}

/// Every event seed, native and UBI, for the mutations.
fn event_seeds() -> Vec<String> {
    static SEEDS: OnceLock<Vec<String>> = OnceLock::new();
    SEEDS.get_or_init(|| native_seeds().into_iter().chain(ubi_seeds()).collect()).clone()
}

/// Encoded snapshots and aggregates records of engines fed generated traffic.
struct StateSeeds {
    /// Changelog snapshots and aggregates records, header included.
    encoded: Vec<Vec<u8>>,
    /// How many of `encoded` are snapshots (the rest are aggregates records).
    snapshots: usize,
}

fn state_seeds() -> &'static StateSeeds {
    static SEEDS: OnceLock<StateSeeds> = OnceLock::new();
    SEEDS.get_or_init(|| {
        let now = Instant::now();
        let (mut snapshots, mut aggregates) = (Vec::new(), Vec::new());
        // The click log on, and the impressions given a query text, so that the seeds carry a
        // click log for the damage to reach.
        let mut cfg = Config::default();
        cfg.clicks.enabled = true;
        for (count, finish) in [(0, false), (3, false), (12, false), (12, true)] {
            let mut engine = Engine::new(&cfg).without_past_limit();
            engine.enable_global_view(1);
            engine.assign(0, now);
            let mut positions = Positions::default();
            let mut generator = TrafficGenerator::new(11);
            let mut offset = 0;
            for i in 0..count {
                let (_, impression, engagements) = generator.impression(START_MS + i * 90_000);
                let impression = impression.replacen('{', &format!(r#"{{"query":"q{}","#, i % 4), 1);
                for (kind, payload) in std::iter::once((EventKind::Impression, impression))
                    .chain(engagements.into_iter().map(|e| (EventKind::Engagement, e.payload)))
                {
                    let _ = engine.process(kind, 0, payload.as_bytes(), now);
                    positions.consumed(kind, 0, offset);
                    offset += 1;
                }
                engine.advance(now);
            }
            if finish {
                engine.finish();
                // And one more pending after the windows closed.
                let (_, impression, _) = generator.impression(START_MS + 100 * 90_000);
                engine.process(EventKind::Impression, 0, impression.as_bytes(), now).unwrap();
            }
            snapshots.push(encode_partition(&engine, &positions, 0).unwrap());
            aggregates.push(engine.partition_aggregates(0).unwrap());
        }
        let count = snapshots.len();
        StateSeeds { encoded: snapshots.into_iter().chain(aggregates).collect(), snapshots: count }
    })
}

/// Snapshot records of format 6 with the payload of a delta that follows each (pending
/// impressions added, engaged and finalized, de-duplication keys, held engagements, the click
/// log), for the delta target.
fn chain_seeds() -> &'static Vec<(Vec<u8>, Vec<u8>)> {
    use rankpulse::source::record::{self, RecordRef};
    static SEEDS: OnceLock<Vec<(Vec<u8>, Vec<u8>)>> = OnceLock::new();
    SEEDS.get_or_init(|| {
        let now = Instant::now();
        let mut cfg = Config::default();
        cfg.clicks.enabled = true;
        let mut seeds = Vec::new();
        for (before, after) in [(0, 3), (3, 3), (12, 20)] {
            let mut engine = Engine::new(&cfg).without_past_limit();
            engine.assign(0, now);
            let mut generator = TrafficGenerator::new(13);
            let mut feed = |engine: &mut Engine, from: i64, to: i64| {
                for i in from..to {
                    let (_, impression, engagements) = generator.impression(START_MS + i * 90_000);
                    let impression = impression.replacen('{', &format!(r#"{{"query":"q{}","#, i % 4), 1);
                    let _ = engine.process(EventKind::Impression, 0, impression.as_bytes(), now);
                    for e in engagements {
                        let _ = engine.process(EventKind::Engagement, 0, e.payload.as_bytes(), now);
                    }
                    engine.advance(now);
                }
            };
            feed(&mut engine, 0, before);
            let id = SnapshotId { sequence: 4, nonce: 9 };
            let positions = [Some(before), None];
            let base = record::encode(&RecordRef::<_, ()>::Snapshot {
                positions,
                task: engine.snapshot_partition_for_deltas(0).unwrap(),
            });
            feed(&mut engine, before, before + after);
            let delta = RecordRef::<(), _>::Delta {
                base: id,
                previous: id,
                positions: [Some(before + after), None],
                task: engine.delta_partition(0).unwrap(),
            };
            let payload = postcard::to_allocvec(&delta).unwrap();
            // Undamaged, the pair restores.
            assert_eq!(fuzzing::delta(&base, &payload), Restored::Installed, "seed ({before}, {after})");
            seeds.push((base, payload));
        }
        seeds
    })
}

/// The changelog target's seeds: each snapshot whole, in chunks, after an interrupted newer
/// one, after another writer's; aggregates records in chunks.
fn changelog_seeds() -> Vec<Vec<u8>> {
    let seeds = state_seeds();
    let id = |sequence, nonce| SnapshotId { sequence, nonce };
    let mut out = Vec::new();
    for (i, bytes) in seeds.encoded.iter().enumerate() {
        let chunk = (bytes.len() / 3).max(1);
        let whole = chunk_records_of(id(i as u64, 1), bytes, usize::MAX).unwrap();
        let split = chunk_records_of(id(i as u64, 2), bytes, chunk).unwrap();
        let newer = chunk_records_of(id(i as u64 + 1, 3), bytes, chunk).unwrap();
        out.push(fuzzing::records_input(&whole));
        out.push(fuzzing::records_input(&split));
        // A complete one, then a newer one whose last chunk never came.
        let mut interrupted = split.clone();
        interrupted.extend(newer.iter().take(newer.len() - 1).cloned());
        out.push(fuzzing::records_input(&interrupted));
        if i < seeds.snapshots {
            // A damaged newest one (the reader falls back to the one before).
            let mut damaged = bytes.clone();
            let last = damaged.len() - 1;
            damaged[last] ^= 1;
            let mut both = whole.clone();
            both.extend(chunk_records_of(id(9, 9), &damaged, usize::MAX).unwrap());
            out.push(fuzzing::records_input(&both));
        }
    }
    // A header alone, and not a chunk at all.
    let mut header = Vec::new();
    ChunkHeader { snapshot: id(0, 0), index: 0, count: 1 }.write(&mut header);
    out.push(fuzzing::records_input(&[header, b"not a chunk".to_vec()]));
    out
}

/// GA4 events (impressions and engagements, one without its search id) and bare Avro datums of
/// `config/examples/avro/`'s schemas, some of them cut short.
fn mapped_seeds() -> Vec<Vec<u8>> {
    use apache_avro::types::Value as Avro;
    let param = |k: &str, v: &str| format!(r#"{{"key":"{k}","value":{{"string_value":"{v}"}}}}"#);
    let mut out = Vec::new();
    for i in 0..6 {
        let search = if i == 5 { param("other", "x") } else { param("search_id", &format!("q{i}")) };
        out.push(format!(r#"{{"event_name":"view_search_results","event_timestamp":"{}","user_pseudo_id":"u{i}","event_params":[{search},{},{}],"items":[{{"item_id":"d{i}"}},{{"item_id":"d9"}}]}}"#,
            (START_MS + i) * 1000 + 7, param("experiment", "e"), param("variant", if i % 2 == 0 { "control" } else { "treatment" })).into_bytes());
        let name = ["select_item", "add_to_cart", "purchase", "page_view"][i as usize % 4];
        out.push(format!(r#"{{"event_name":"{name}","event_timestamp":{},"event_params":[{},{{"key":"index","value":{{"int_value":{i}}}}}],"items":[{{"item_id":"d{i}"}}]}}"#,
            (START_MS + i + 5) * 1000, param("search_id", &format!("q{i}"))).into_bytes());
    }
    let root = root().join("config/examples/avro");
    let schema = |f: &str| apache_avro::Schema::parse_str(&std::fs::read_to_string(root.join(f)).unwrap()).unwrap();
    let (imp, eng) = (schema("search-impression.avsc"), schema("search-engagement.avsc"));
    let datum = |schema: &apache_avro::Schema, value: Avro| {
        apache_avro::writer::datum::GenericDatumWriter::builder(schema)
            .build()
            .unwrap()
            .write_value_to_vec(value)
            .unwrap()
    };
    for i in 0..4i64 {
        let some = |s: String| Avro::Union(1, Box::new(Avro::String(s)));
        let hits = (0..3)
            .map(|d| {
                Avro::Record(vec![
                    ("documentId".into(), Avro::String(format!("d{d}"))),
                    ("score".into(), Avro::Double(1.0)),
                ])
            })
            .collect();
        let impression = datum(
            &imp,
            Avro::Record(vec![
                ("searchId".into(), Avro::String(format!("q{i}"))),
                ("occurredAt".into(), Avro::TimestampMillis(START_MS + i)),
                ("experiment".into(), some("e".into())),
                ("variant".into(), some("control".into())),
                ("userId".into(), Avro::Union(0, Box::new(Avro::Null))),
                ("sessionId".into(), some(format!("s{i}"))),
                ("hits".into(), Avro::Array(hits)),
                ("device".into(), Avro::Union(0, Box::new(Avro::Null))),
            ]),
        );
        let engagement = datum(
            &eng,
            Avro::Record(vec![
                ("searchId".into(), Avro::String(format!("q{i}"))),
                ("occurredAt".into(), Avro::TimestampMillis(START_MS + i + 5)),
                ("documentId".into(), Avro::String("d1".into())),
                (
                    "action".into(),
                    Avro::Enum(i as u32 % 3, ["CLICK", "ADD_TO_CART", "PURCHASE"][i as usize % 3].into()),
                ),
                ("eventId".into(), Avro::String(format!("e{i}"))),
                ("position".into(), Avro::Union(1, Box::new(Avro::Int(2)))),
            ]),
        );
        out.push(impression[..impression.len() / 2].to_vec());
        out.push(impression);
        out.push(engagement);
    }
    out
}

/// Every seed of every target.
fn seeds() -> BTreeMap<&'static str, Vec<Vec<u8>>> {
    let native: Vec<Vec<u8>> = native_seeds().into_iter().map(String::into_bytes).collect();
    let state = state_seeds();
    let mut snapshot = state.encoded.clone();
    // The payloads alone, for the sealed path.
    snapshot.extend(state.encoded.iter().map(|b| b[HEADER..].to_vec()));
    BTreeMap::from([
        ("json_events", native.clone()),
        ("ubi_documents", ubi_seeds().into_iter().map(String::into_bytes).collect()),
        ("mapped_events", mapped_seeds()),
        ("scan_vs_serde", native),
        ("snapshot", snapshot),
        ("changelog", changelog_seeds()),
    ])
}

#[test]
fn every_seed_goes_through_its_target() {
    for (target, inputs) in seeds() {
        for input in inputs {
            run(target, &input);
        }
    }
}

/// Writes the seeds to `fuzz/seeds/<target>/`, where the fuzzers start (see docs/src/contributing.md, Fuzzing).
#[test]
#[ignore = "writes fuzz/seeds/, run by hand before fuzzing"]
fn write_seeds() {
    for (target, inputs) in seeds() {
        let dir: &Path = &root().join("fuzz/seeds").join(target);
        std::fs::create_dir_all(dir).unwrap();
        for (i, input) in inputs.iter().enumerate() {
            std::fs::write(dir.join(format!("seed-{i:03}")), input).unwrap();
        }
        eprintln!("{}: {} seeds", dir.display(), inputs.len());
    }
}

/// The start of every varint (postcard's integer encoding) in a payload.
fn varint_starts(payload: &[u8]) -> Vec<usize> {
    (0..payload.len()).filter(|&i| i == 0 || payload[i - 1] & 0x80 == 0).collect()
}

/// A payload with the varint starting at `at` replaced by `value`'s.
fn with_varint(payload: &[u8], at: usize, value: u64) -> Vec<u8> {
    let end = payload[at..].iter().position(|b| b & 0x80 == 0).map_or(payload.len(), |n| at + n + 1);
    let mut p = payload.to_vec();
    p.splice(at..end, varint(value));
    p
}

/// Varints of the seed snapshots and aggregates records (a sequence length, a group id, a
/// partition, a count, a timestamp...) set to `u32::MAX` and `u64::MAX`, checksum recomputed:
/// no panic, no allocation sized by them. About 75 varints of each seed, spread over it, so it
/// takes a few seconds; `every_varint_set_to_every_hostile_value` (ignored, 2 minutes) does all.
#[test]
fn varints_of_the_seed_states_set_to_huge_values() {
    for bytes in &state_seeds().encoded {
        let payload = &bytes[HEADER..];
        let starts = varint_starts(payload);
        for &at in starts.iter().step_by((starts.len() / 75).max(1)) {
            for value in [u64::from(u32::MAX), u64::MAX] {
                fuzzing::snapshot(&with_varint(payload, at, value));
            }
        }
    }
}

/// [`varints_of_the_seed_states_set_to_huge_values`] on every varint, with more values.
#[test]
#[ignore = "2 minutes: run by hand after changing what snapshots hold"]
fn every_varint_set_to_every_hostile_value() {
    for bytes in &state_seeds().encoded {
        let payload = &bytes[HEADER..];
        for at in varint_starts(payload) {
            for value in [u64::from(u32::MAX), u64::MAX, 1 << 33, 0, 1, 2, 1000, u64::MAX / 2] {
                fuzzing::snapshot(&with_varint(payload, at, value));
            }
        }
    }
}

/// Found by `damaged_deltas_never_panic_nor_allocate_by_their_fields`: the last varint of a
/// chain's delta shortened to 0 shifted the bytes after it, and a finalized impression's gain
/// read as 70, beyond the configuration's largest (3): its exponential-gain DCG (2^70) overflowed
/// the exact sums. The delta is refused.
#[test]
fn a_delta_with_a_gain_past_the_configuration_s_is_refused() {
    let seeds = chain_seeds();
    let (base, payload) = &seeds[2];
    let at = varint_starts(payload)[976];
    assert_eq!(fuzzing::delta(base, &with_varint(payload, at, 0)), fuzzing::Restored::Incompatible);
}
