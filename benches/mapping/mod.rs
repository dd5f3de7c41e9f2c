//! Issue 32's figures: events in the user's own shape against the native JSON path, on the same
//! events in one run. The demo's traffic (faults off) as native JSON lines, as Segment track
//! events read through `config/examples/segment.toml`'s mapping, and as bare Avro datums read
//! through `config/examples/avro.toml`'s mapping with its `.avsc` files as local schemas (the
//! registry's framing costs a 5-byte header and a cache lookup on top). Each is decoded and
//! processed by the engine on one thread (decode, join, finalize, accumulate), in event-time
//! order; the decoders alone are timed too. And the native lines themselves read through a
//! mapping of the contract's names: what the mapping costs on the same bytes. Medians of 8
//! rounds, each starting with another shape.

use std::path::Path;
use std::time::Instant;

use apache_avro::types::Value as Avro;
use rankpulse::config::Config;
use rankpulse::engine::Engine;
use rankpulse::event::{Decoders, EventKind, RawMessage};
use serde_json::{json, Value};

use crate::{fmt, median, Results};

/// CPU time of this thread so far, in nanoseconds on the CPU (`/proc/thread-self/schedstat`):
/// the process's clock ticks (10 ms) are too coarse for runs of a tenth of a second.
fn thread_cpu_seconds() -> f64 {
    let schedstat = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    schedstat.split_whitespace().next().and_then(|n| n.parse::<u64>().ok()).unwrap_or(0) as f64 / 1e9
}

const IMPRESSIONS: u64 = 100_000;

/// A shape's name, the configuration that reads it, and its messages in event-time order.
type Shape = (&'static str, Config, Vec<(EventKind, Vec<u8>)>);
const ROUNDS: usize = 8;

fn example(name: &str, local: &str) -> Config {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/examples");
    let mut table: toml::Table =
        toml::from_str(&std::fs::read_to_string(root.join(format!("{name}.toml"))).unwrap()).unwrap();
    table.remove("schema_registry");
    let local = local.replace("ROOT", root.to_str().unwrap());
    Config::from_toml_with_env(&format!("{}\n{local}", toml::to_string(&table).unwrap()), "bench", std::iter::empty())
        .unwrap()
}

fn iso(ms: i64) -> String {
    rankpulse::time::format_rfc3339_ms(ms)
}

fn segment(kind: EventKind, e: &Value) -> Vec<u8> {
    let body = match kind {
        EventKind::Impression => json!({
            "type": "track", "event": "Products Searched", "messageId": format!("m-{}", e["query_id"].as_str().unwrap()),
            "timestamp": iso(e["timestamp"].as_i64().unwrap()), "userId": e["client_id"],
            "context": {"library": {"name": "analytics.js", "version": "4.1.0"}, "session_id": e["session_id"]},
            "properties": {
                "search_id": e["query_id"], "query": "shoes",
                "products": e["results"].as_array().unwrap().iter().enumerate()
                    .map(|(i, d)| json!({"product_id": d, "position": i + 1})).collect::<Vec<_>>(),
                "experiment_name": e["experiment"], "variant_name": e["variant"],
            },
        }),
        EventKind::Engagement => {
            let event = match e["action"].as_str().unwrap_or("click") {
                "add_to_cart" => "Product Added",
                "purchase" => "Order Completed",
                _ => "Product Clicked",
            };
            json!({
                "type": "track", "event": event, "messageId": e["event_id"], "timestamp": iso(e["timestamp"].as_i64().unwrap()),
                "anonymousId": "anon",
                "properties": {"search_id": e["query_id"], "product_id": e["doc_id"], "position": e["position"]},
            })
        }
    };
    serde_json::to_vec(&body).unwrap()
}

fn avro(kind: EventKind, e: &Value, schemas: &[apache_avro::Schema; 2]) -> Vec<u8> {
    let text = |v: &Value| Avro::String(v.as_str().unwrap().to_string());
    let optional = |v: &Value| match v.as_str() {
        Some(s) => Avro::Union(1, Box::new(Avro::String(s.to_string()))),
        None => Avro::Union(0, Box::new(Avro::Null)),
    };
    let record = match kind {
        EventKind::Impression => Avro::Record(vec![
            ("searchId".into(), text(&e["query_id"])),
            ("occurredAt".into(), Avro::TimestampMillis(e["timestamp"].as_i64().unwrap())),
            ("experiment".into(), optional(&e["experiment"])),
            ("variant".into(), optional(&e["variant"])),
            ("userId".into(), optional(&e["client_id"])),
            ("sessionId".into(), optional(&e["session_id"])),
            (
                "hits".into(),
                Avro::Array(
                    e["results"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .enumerate()
                        .map(|(i, d)| {
                            Avro::Record(vec![
                                ("documentId".into(), text(d)),
                                ("score".into(), Avro::Double(1.0 / (i + 1) as f64)),
                            ])
                        })
                        .collect(),
                ),
            ),
            ("device".into(), Avro::Union(0, Box::new(Avro::Null))),
        ]),
        EventKind::Engagement => {
            let symbol = match e["action"].as_str().unwrap_or("click") {
                "add_to_cart" => (1, "ADD_TO_CART"),
                "purchase" => (2, "PURCHASE"),
                _ => (0, "CLICK"),
            };
            Avro::Record(vec![
                ("searchId".into(), text(&e["query_id"])),
                ("occurredAt".into(), Avro::TimestampMillis(e["timestamp"].as_i64().unwrap())),
                ("documentId".into(), text(&e["doc_id"])),
                ("action".into(), Avro::Enum(symbol.0, symbol.1.into())),
                ("eventId".into(), text(&e["event_id"])),
                (
                    "position".into(),
                    e["position"].as_i64().map_or(Avro::Union(0, Box::new(Avro::Null)), |p| {
                        Avro::Union(1, Box::new(Avro::Int(p as i32)))
                    }),
                ),
            ])
        }
    };
    let schema = &schemas[kind.index()];
    apache_avro::writer::datum::GenericDatumWriter::builder(schema).build().unwrap().write_value_to_vec(record).unwrap()
}

/// The engine over `messages` on this thread; CPU seconds.
fn engine_run(cfg: &Config, messages: &[(EventKind, Vec<u8>)]) -> f64 {
    let mut engine = Engine::new(cfg).without_past_limit();
    let now = Instant::now();
    let cpu = thread_cpu_seconds();
    let mut rejected = 0usize;
    for (kind, payload) in messages {
        rejected += engine.process(*kind, 0, payload, now).is_err() as usize;
    }
    engine.finish();
    let took = thread_cpu_seconds() - cpu;
    assert_eq!(rejected, 0, "every event of every shape decodes");
    std::hint::black_box(engine.counters().consumed);
    took
}

/// The decoders alone over `messages`; CPU seconds.
fn decode_run(cfg: &Config, messages: &[(EventKind, Vec<u8>)]) -> f64 {
    let decoders = Decoders::new(cfg);
    let mut results = Vec::new();
    let cpu = thread_cpu_seconds();
    let mut ok = 0usize;
    for (kind, payload) in messages {
        let raw = RawMessage::body(payload);
        ok += match kind {
            EventKind::Impression => decoders.impression(raw, &mut results).is_ok(),
            EventKind::Engagement => decoders.engagement(raw).is_ok(),
        } as usize;
    }
    let took = thread_cpu_seconds() - cpu;
    assert_eq!(ok, messages.len());
    took
}

pub fn mapping(results: &mut Results) {
    let (mut imp, mut eng) = (Vec::new(), Vec::new());
    rankpulse::demo::write_traffic(
        &mut imp,
        &mut eng,
        IMPRESSIONS,
        2000,
        32,
        1_795_000_000_000,
        rankpulse::demo::FaultRate::NONE,
    )
    .unwrap();
    let mut native: Vec<(i64, EventKind, Value, Vec<u8>)> = Vec::new();
    for (kind, lines) in [(EventKind::Impression, &imp), (EventKind::Engagement, &eng)] {
        for line in lines.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            let v: Value = serde_json::from_slice(line).unwrap();
            native.push((v["timestamp"].as_i64().unwrap(), kind, v, line.to_vec()));
        }
    }
    native.sort_by_key(|(t, kind, ..)| (*t, kind.index()));
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/examples/avro");
    let schemas = ["search-impression.avsc", "search-engagement.avsc"]
        .map(|f| apache_avro::Schema::parse_str(&std::fs::read_to_string(root.join(f)).unwrap()).unwrap());
    // The same native lines read through a mapping of the contract's names: the mapping's own
    // cost, on the same bytes.
    let mut same_bytes = Config::default();
    same_bytes.mapping.impressions = Some(rankpulse::event::mapped::native_impression_mapping());
    same_bytes.mapping.engagements = Some(rankpulse::event::mapped::native_engagement_mapping());
    let shapes: [Shape; 4] = [
        ("native", Config::default(), native.iter().map(|(_, k, _, line)| (*k, line.clone())).collect()),
        ("mapped_native", same_bytes, native.iter().map(|(_, k, _, line)| (*k, line.clone())).collect()),
        ("segment", example("segment", ""), native.iter().map(|(_, k, v, _)| (*k, segment(*k, v))).collect()),
        (
            "avro",
            example(
                "avro",
                "[schemas.impressions]\navro_file = \"ROOT/avro/search-impression.avsc\"\n[schemas.engagements]\navro_file = \"ROOT/avro/search-engagement.avsc\"\n",
            ),
            native.iter().map(|(_, k, v, _)| (*k, avro(*k, v, &schemas))).collect(),
        ),
    ];
    let events = native.len() as f64;
    let mut engine_seconds = vec![Vec::new(); shapes.len()];
    let mut decode_seconds = vec![Vec::new(); shapes.len()];
    for round in 0..ROUNDS {
        // Each round starts with another shape: the order moved the figures by a third (what
        // ran before leaves the allocator and caches in another state).
        for k in 0..shapes.len() {
            let i = (round + k) % shapes.len();
            let (_, cfg, messages) = &shapes[i];
            engine_seconds[i].push(engine_run(cfg, messages));
            decode_seconds[i].push(decode_run(cfg, messages));
        }
    }
    let per_cpu_second: Vec<f64> = engine_seconds.into_iter().map(|s| events / median(s)).collect();
    let decoded_per_cpu_second: Vec<f64> = decode_seconds.into_iter().map(|s| events / median(s)).collect();
    for (i, (name, _, messages)) in shapes.iter().enumerate() {
        let bytes: usize = messages.iter().map(|(_, m)| m.len()).sum();
        results.insert(format!("mapping_{name}_events_per_cpu_second"), per_cpu_second[i].into());
        results.insert(format!("mapping_{name}_decoded_per_cpu_second"), decoded_per_cpu_second[i].into());
        results.insert(format!("mapping_{name}_bytes_per_event"), (bytes as f64 / events).into());
    }
    // The cost over native: how much more CPU an event takes (0.25 = 25 % more).
    for (i, name) in [(1, "mapped_native"), (2, "segment"), (3, "avro")] {
        results
            .insert(format!("mapping_{name}_cost_over_native"), (per_cpu_second[0] / per_cpu_second[i] - 1.0).into());
    }
    results.insert("mapping_events".into(), events.into());
}

/// The summary table's rows.
pub fn rows(get: &dyn Fn(&str) -> Option<f64>) -> Vec<(&'static str, String, &'static str, &'static str)> {
    let cost = get("mapping_mapped_native_cost_over_native");
    let verdict = match cost {
        Some(c) if c <= 0.25 => "met",
        Some(_) => "MISSED",
        None => "n/a",
    };
    // One figure of each shape, in the order the labels name them.
    let per_shape = |figure: &str| {
        ["native", "mapped_native", "segment", "avro"]
            .map(|shape| fmt(get(&format!("mapping_{shape}_{figure}")), 0))
            .join("; ")
    };
    vec![
        ("events/CPU-s: native; mapped; segment; avro", per_shape("events_per_cpu_second"), "", ""),
        ("  mapping's cost, same bytes", fmt(cost, 3), "<= 0.25", verdict),
        ("  segment shape cost (2.3x the bytes)", fmt(get("mapping_segment_cost_over_native"), 3), "", ""),
        ("  avro cost over native", fmt(get("mapping_avro_cost_over_native"), 3), "", ""),
        ("  decoders alone: n; m; s; a", per_shape("decoded_per_cpu_second"), "", ""),
    ]
}
