//! Hostile input: one entry point per fuzz target, shared by the fuzz targets (`fuzz/`, run by
//! hand with cargo-fuzz) and by the tests that replay their corpus and mutate inputs in CI
//! (`tests/hostile_input.rs`), so both exercise exactly the same code.
//!
//! Each function takes arbitrary bytes through the path real input takes, and checks what must
//! hold whatever the bytes are; a violation panics, which is how a fuzzer reports it:
//!
//! | function | input | the path | what must hold |
//! |---|---|---|---|
//! | [`json_events`] | a message on a topic with `*_format = "json"` | [`Decoders`] (scanner, serde_json fallback), then [`Engine::process`] as an impression and as an engagement, then the join and finalization | no panic; a message is consumed once and, if rejected, counted once under the reason the decoder gave; the text-id and hashed-id decodings agree |
//! | [`ubi_documents`] | a message with `*_format = "ubi"` | the same, with the UBI decoders | the same |
//! | [`mapped_events`] | a message of events in the user's own shape | the same, through `config/examples/ga4.toml`'s mapping (JSON Pointer, JSONPath filters, microsecond timestamps, action names) and through `config/examples/avro.toml`'s with its `.avsc` files as local schemas (bare Avro datums, apache-avro's decoding) | the same |
//! | [`scan_vs_serde`] | a native message | the scanner alone, serde_json alone, and both as used | wherever the scanner answers, its answer (event, result ids, or rejection with its wording) is serde_json's, and the decoder as used always equals serde_json alone (`event/scan.rs`) |
//! | [`snapshot`] | a changelog snapshot or an aggregates record | [`crate::source::record::decode`] (by format version, format 5's layout upgraded) and the aggregates record's decoder, as read and behind a valid header (random bytes never pass the checksum), then [`Engine::restore_partition`] or [`Engine::apply_aggregates_record`], events, finalization, the `/metrics` families | no panic, no allocation sized by a length or id in the bytes; a restored state snapshots and restores again |
//! | [`delta`] | a delta record's payload, with a snapshot it follows | [`crate::source::record::decode`] behind a valid header of format 6, [`crate::engine::TaskSnapshot::apply_delta`] to the snapshot, then as [`snapshot`] | no panic, no allocation sized by a length or id in the bytes; what a delta makes of a snapshot is checked before it is installed |
//! | [`changelog`] | the records of a changelog partition | [`ChunkHeader::read`], [`Tail`] (the changelog reader's reassembly) and [`InOrder`] (the aggregates reader's), then as [`snapshot`] | the same |
//!
//! A rejected input is the normal case; what each function returns says what happened, for the
//! tests' tallies.

use std::sync::OnceLock;
use std::time::Instant;

use crate::checkpoint;
use crate::config::{Config, InputFormat};
use crate::engine::{AggregatesRecord, Counters, Engine};
use crate::event::{self, Decoders, EventKind, Path, RejectReason};
use crate::ids::doc_key;
use crate::source::chunks::{ChunkHeader, InOrder, Tail};
use crate::source::{encode_partition, PartitionSnapshot, Positions};

/// The partition every message and snapshot of the harness belongs to.
const PARTITION: i32 = 0;

/// What an event target did with its input, read once as each kind of message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventOutcome {
    /// As an impression: accepted, or the reason it was rejected (and counted).
    pub impression: Result<(), RejectReason>,
    /// As an engagement.
    pub engagement: Result<(), RejectReason>,
}

/// The default configuration, with both inputs in `format` and the click log on (so that
/// decoding keeps the result ids' text, and a snapshot's click log is restored and used).
fn config(format: InputFormat) -> &'static Config {
    static JSON: OnceLock<Config> = OnceLock::new();
    static UBI: OnceLock<Config> = OnceLock::new();
    let cell = match format {
        InputFormat::Json => &JSON,
        InputFormat::Ubi => &UBI,
        InputFormat::Avro | InputFormat::Protobuf => unreachable!("the JSON fuzz targets are for json and ubi"),
    };
    cell.get_or_init(|| {
        let mut cfg = Config::default();
        cfg.kafka.impressions_format = format;
        cfg.kafka.engagements_format = format;
        cfg.clicks.enabled = true;
        cfg
    })
}

/// A message on a topic of rankpulse's own JSON events: see the module documentation.
pub fn json_events(data: &[u8]) -> EventOutcome {
    events(config(InputFormat::Json), data)
}

/// A message of events in the user's own shape, as a GA4 JSON event and as a bare Avro datum:
/// see the module documentation.
pub fn mapped_events(data: &[u8]) -> [EventOutcome; 2] {
    static CONFIGS: OnceLock<[Config; 2]> = OnceLock::new();
    let [ga4, avro] = CONFIGS.get_or_init(|| {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/examples");
        let example = |name: &str, local: &str| {
            let text = std::fs::read_to_string(root.join(format!("{name}.toml"))).expect("config/examples");
            let mut table: toml::Table = toml::from_str(&text).expect("a TOML example");
            table.remove("schema_registry");
            let text = format!("{}\n{local}", toml::to_string(&table).expect("TOML"));
            Config::from_toml_with_env(&text, "fuzzing", std::iter::empty()).expect("a valid example")
        };
        let avsc = |f: &str| root.join("avro").join(f).display().to_string();
        let local = format!(
            "[schemas.impressions]\navro_file = {:?}\n[schemas.engagements]\navro_file = {:?}\n",
            avsc("search-impression.avsc"),
            avsc("search-engagement.avsc")
        );
        [example("ga4", ""), example("avro", &local)]
    });
    [events(ga4, data), events(avro, data)]
}

/// A message on a topic of OpenSearch UBI documents: see the module documentation.
pub fn ubi_documents(data: &[u8]) -> EventOutcome {
    events(config(InputFormat::Ubi), data)
}

/// `data` as an impression and then as an engagement, through one engine (so an input that is
/// both is attributed to itself), then everything finalized.
fn events(cfg: &Config, data: &[u8]) -> EventOutcome {
    let now = Instant::now();
    let mut engine = Engine::new(cfg).without_past_limit();
    engine.assign(PARTITION, now);
    let impression = process_counted(&mut engine, EventKind::Impression, data, now);
    let engagement = process_counted(&mut engine, EventKind::Engagement, data, now);
    engine.advance(now);
    engine.finish();
    let _ = crate::output::gather(&engine);
    EventOutcome { impression, engagement }
}

/// What the decoder alone says of a message: `Ok` or its rejection reason.
fn decoded(decoders: &Decoders, kind: EventKind, data: &[u8]) -> Result<(), RejectReason> {
    match kind {
        EventKind::Impression => {
            let (mut hashed, mut ids) = (Vec::new(), Vec::new());
            let impression = decoders.impression(event::RawMessage::body(data), &mut hashed);
            // The text ids (`replay --trec-out`) are the same decoding as the hashed ones.
            match (&impression, decoders.impression_with_ids(event::RawMessage::body(data), &mut ids)) {
                (Ok(a), Ok(b)) => {
                    assert_eq!(*a, b, "the impression differs with text ids");
                    assert!(
                        hashed.iter().copied().eq(ids.iter().map(|id| doc_key(id))),
                        "ids differ from their hashes"
                    );
                }
                (Err(a), Err(b)) => assert_eq!(*a, b, "rejected differently with text ids"),
                (a, b) => panic!("decoded with hashes {a:?}, with text ids {b:?}"),
            }
            impression.map(|_| ()).map_err(|r| r.reason)
        }
        EventKind::Engagement => decoders.engagement(event::RawMessage::body(data)).map(|_| ()).map_err(|r| r.reason),
    }
}

/// [`Engine::process`] of one message, checking that it is counted exactly once: consumed, and
/// if rejected, under the reason the decoder gave (or a `[limits]` reason the engine adds).
fn process_counted(engine: &mut Engine, kind: EventKind, data: &[u8], now: Instant) -> Result<(), RejectReason> {
    let decoder = decoded(engine.decoders(), kind, data);
    let before = engine.counters();
    let result = engine.process(kind, PARTITION, data, now);
    let after = engine.counters();
    let k = kind.index();
    let rejected = |c: &Counters| c.rejected[k].iter().sum::<u64>();
    assert_eq!(after.consumed[k], before.consumed[k] + 1, "a message is consumed once");
    let result = result.map_err(|rejection| {
        assert!(!rejection.detail.is_empty(), "a rejection says what is wrong");
        // What the log lines quote of a rejected message.
        let _ = event::excerpt(data, 60, false);
        rejection.reason
    });
    match result {
        Ok(()) => assert_eq!(rejected(&after), rejected(&before), "accepted, yet counted as rejected"),
        Err(reason) => {
            assert_eq!(rejected(&after), rejected(&before) + 1, "a rejected message is counted once");
            assert_eq!(
                after.rejected[k][reason.index()],
                before.rejected[k][reason.index()] + 1,
                "counted under its reason"
            );
        }
    }
    match (decoder, result) {
        // Too large is decided before decoding.
        (_, Err(RejectReason::TooLarge)) => {}
        (Err(reason), result) => assert_eq!(result, Err(reason), "the engine rejects for the decoder's reason"),
        (Ok(()), Err(reason)) => assert!(
            matches!(
                reason,
                // The configured limits: `limits.max_results`, the clock's, and the rankers an
                // interleaved impression may name (`interleaving.max_rankers`).
                RejectReason::TooManyResults
                    | RejectReason::TimestampInFuture
                    | RejectReason::TimestampTooOld
                    | RejectReason::InvalidInterleaving
            ),
            "the decoder accepted, the engine rejected for {reason:?}"
        ),
        (Ok(()), Ok(())) => {}
    }
    result
}

/// Whether the scanner answered, per kind (the rest went to serde_json).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScannerAnswered {
    pub impression: bool,
    pub engagement: bool,
}

/// The differential check of the native format's two decoders: see the module documentation.
pub fn scan_vs_serde(data: &[u8]) -> ScannerAnswered {
    let (mut fast_ids, mut reference_ids, mut used_ids) = (Vec::new(), Vec::new(), Vec::new());
    let fast = event::decode_impression_with(data, &mut fast_ids, Path::ScanOnly);
    let Some(reference) = event::decode_impression_with(data, &mut reference_ids, Path::Serde) else {
        unreachable!("serde_json always answers")
    };
    let impression = fast.is_some();
    if let Some(fast) = fast {
        assert_eq!(fast, reference, "the scanner's impression differs from serde_json's");
        if fast.is_ok() {
            assert_eq!(fast_ids, reference_ids, "the scanner's result ids differ from serde_json's");
        }
    }
    let used = event::decode_impression(data, &mut used_ids);
    assert_eq!(used, reference, "the impression decoder as used differs from serde_json alone");
    if used.is_ok() {
        assert_eq!(used_ids, reference_ids, "result ids as used differ from serde_json's");
    }

    let fast = event::decode_engagement_with(data, Path::ScanOnly);
    let Some(reference) = event::decode_engagement_with(data, Path::Serde) else {
        unreachable!("serde_json always answers")
    };
    let engagement = fast.is_some();
    if let Some(fast) = fast {
        assert_eq!(fast, reference, "the scanner's engagement differs from serde_json's");
    }
    assert_eq!(
        event::decode_engagement(data),
        reference,
        "the engagement decoder as used differs from serde_json alone"
    );
    ScannerAnswered { impression, engagement }
}

/// What became of bytes read as a snapshot or an aggregates record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restored {
    /// Refused by the decoder: damaged, another format version, or not decodable.
    Refused,
    /// Decoded, but written with another configuration (or for another partition).
    Incompatible,
    /// Installed in an engine, which then processed, finalized and exported.
    Installed,
}

/// What the snapshot target did with its input: as read, and as the payload behind a valid header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotOutcome {
    /// The bytes as a changelog snapshot.
    pub snapshot: Restored,
    /// The bytes as the payload of a changelog snapshot with a valid header.
    pub sealed_snapshot: Restored,
    /// The bytes as an aggregates record.
    pub aggregates: Restored,
    /// The bytes as the payload of an aggregates record with a valid header.
    pub sealed_aggregates: Restored,
}

/// Bytes from the changelog or aggregates topic: see the module documentation.
pub fn snapshot(data: &[u8]) -> SnapshotOutcome {
    let sealed = checkpoint::seal(data);
    SnapshotOutcome {
        snapshot: restore(data),
        sealed_snapshot: restore(&sealed),
        aggregates: apply_aggregates(data),
        sealed_aggregates: apply_aggregates(&sealed),
    }
}

/// A delta's payload read as the changelog's next record after `base` (a snapshot record, of
/// format 5 or 7), sealed behind a valid header of format 7 (random bytes never pass the
/// checksum): applied to the snapshot as a restore does, then restored and used as
/// [`snapshot`] does. `Refused` when the base or the payload does not decode as a snapshot and
/// a delta, `Incompatible` when the delta does not follow the snapshot or the result does not
/// fit the configuration.
pub fn delta(base: &[u8], payload: &[u8]) -> Restored {
    use crate::source::record::{self, Record};
    let Ok(Record::Snapshot(mut snapshot)) = record::decode(base) else { return Restored::Refused };
    let sealed = checkpoint::seal_as(checkpoint::CHANGELOG_FORMAT_VERSION, payload);
    let Ok(Record::Delta(delta)) = record::decode(&sealed) else { return Restored::Refused };
    let engine = Engine::new(config(InputFormat::Json)).without_past_limit();
    if engine.apply_delta(&mut snapshot.task, delta.task).is_err() {
        return Restored::Incompatible;
    }
    snapshot.positions = delta.positions;
    restore_snapshot(*snapshot)
}

/// A native impression and an engagement on its second result, at `timestamp`: what a
/// restored engine is fed to show it still works.
fn probe_events(timestamp: i64) -> [(EventKind, String); 2] {
    [
        (
            EventKind::Impression,
            format!(
                r#"{{"query_id":"probe","timestamp":{timestamp},"results":["a","b","c"],"variant":"v","query":"probe"}}"#
            ),
        ),
        (EventKind::Engagement, format!(r#"{{"query_id":"probe","timestamp":{timestamp},"doc_id":"b"}}"#)),
    ]
}

/// Decodes a changelog snapshot of [`PARTITION`] and, if it fits the configuration, restores it
/// as the source does on assignment; then checks that the restored state snapshots and restores
/// again, feeds it events, finalizes it and builds its `/metrics` families.
fn restore(bytes: &[u8]) -> Restored {
    use crate::source::record::{self, Record};
    // As the changelog reader decodes: by the record's format version (format 5's snapshot
    // upgraded to this build's layout).
    let Ok(Record::Snapshot(snapshot)) = record::decode(bytes) else { return Restored::Refused };
    restore_snapshot(*snapshot)
}

/// [`restore`] of a decoded snapshot.
fn restore_snapshot(mut snapshot: PartitionSnapshot) -> Restored {
    let cfg = config(InputFormat::Json);
    let now = Instant::now();
    let mut engine = Engine::new(cfg).without_past_limit();
    // The source's check while reading the changelog, then the install.
    if engine.check_compatible(PARTITION, &mut snapshot.task).is_err() {
        return Restored::Incompatible;
    }
    let positions = snapshot.positions;
    if let Err(e) = engine.restore_partition(PARTITION, snapshot.task, now) {
        panic!("checked as compatible, then refused: {e}");
    }
    // A restored state is written again at the next checkpoint, and must restore again.
    let mut at = Positions::default();
    at.set(PARTITION, positions);
    let Some(again) = encode_partition(&engine, &at, PARTITION) else { panic!("the restored partition is not held") };
    let again = match crate::source::record::decode_snapshot(&again) {
        Ok(again) => again,
        Err(e) => panic!("a restored state snapshots to bytes that do not decode: {e}"),
    };
    assert_eq!(again.positions, positions, "positions change through a snapshot");
    let mut second = Engine::new(cfg).without_past_limit();
    if let Err(e) = second.restore_partition(PARTITION, again.task, now) {
        panic!("a restored state snapshots to a snapshot that does not restore: {e}");
    }
    let timestamp = engine.watermark().unwrap_or(0).clamp(0, 4_000_000_000_000);
    for (kind, payload) in probe_events(timestamp) {
        process_counted(&mut engine, kind, payload.as_bytes(), now).ok();
    }
    engine.advance(now);
    let _ = crate::output::gather(&engine);
    engine.finish();
    let _ = crate::output::gather(&engine);
    Restored::Installed
}

/// Decodes an aggregates record and merges it into an engine's experiment-wide view, as every
/// replica's aggregates reader does; then reads the view.
fn apply_aggregates(bytes: &[u8]) -> Restored {
    let Ok(record) = AggregatesRecord::decode(bytes) else { return Restored::Refused };
    let mut engine = Engine::new(config(InputFormat::Json)).without_past_limit();
    engine.enable_global_view(2);
    if engine.apply_aggregates_record(record).is_err() {
        return Restored::Incompatible;
    }
    let _ = crate::output::gather(&engine);
    Restored::Installed
}

/// What the changelog target did with its records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangelogOutcome {
    /// Records that are chunks (a valid header).
    pub chunks: usize,
    /// Complete snapshots the changelog reader assembled, newest first, and what became of each
    /// until one was installed (the reader stops there).
    pub snapshots: Vec<Restored>,
    /// Records the aggregates reader completed, and what became of each.
    pub aggregates: Vec<Restored>,
}

/// Splits fuzz input into records: each a little-endian `u16` length and that many bytes (the
/// last one whatever is left). The inverse of [`records_input`].
pub fn split_records(mut data: &[u8]) -> Vec<&[u8]> {
    let mut records = Vec::new();
    while let Some((len, rest)) = data.split_first_chunk::<2>() {
        let len = usize::from(u16::from_le_bytes(*len)).min(rest.len());
        let (record, rest) = rest.split_at(len);
        records.push(record);
        data = rest;
    }
    records
}

/// Joins records into the changelog target's input (each at most `u16::MAX` bytes: longer ones
/// are cut).
pub fn records_input<R: AsRef<[u8]>>(records: &[R]) -> Vec<u8> {
    let mut out = Vec::new();
    for record in records {
        let record = record.as_ref();
        let record = &record[..record.len().min(usize::from(u16::MAX))];
        out.extend_from_slice(&(record.len() as u16).to_le_bytes());
        out.extend_from_slice(record);
    }
    out
}

/// The records of one changelog partition, in offset order: see the module documentation.
pub fn changelog(data: &[u8]) -> ChangelogOutcome {
    let mut tail = Tail::default();
    let mut in_order = InOrder::default();
    let mut outcome = ChangelogOutcome { chunks: 0, snapshots: Vec::new(), aggregates: Vec::new() };
    for (offset, record) in split_records(data).into_iter().enumerate() {
        let Some((header, payload)) = ChunkHeader::read(record) else { continue };
        outcome.chunks += 1;
        tail.add(offset as i64, header, payload);
        if let Some(bytes) = in_order.add(PARTITION, header, payload) {
            outcome.aggregates.push(apply_aggregates(&bytes));
        }
    }
    let _ = tail.next_sequence();
    for (id, _) in tail.complete() {
        let restored = restore(&tail.assemble(id));
        outcome.snapshots.push(restored);
        if restored == Restored::Installed {
            break;
        }
    }
    outcome
}
