//! The mapping against the shapes it is for (a search engine's response, GA4 events), against
//! the native decoder on the native shape, and on bad input.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]

use std::borrow::Cow;

use super::*;
use crate::config::Config;
use crate::event::{decode_engagement, decode_impression, Decoders};
use crate::ids::doc_key;

fn config(toml_text: &str) -> Config {
    Config::from_toml_with_env(toml_text, "test", std::iter::empty()).unwrap()
}

const OPENSEARCH: &str = r#"
[mapping.impressions]
query_id = "/ext/request_id"
timestamp = { path = "/ext/at", format = "rfc3339" }
results = "/hits/hits/*/_id"
experiment = { value = "ranker-2026" }
variant = { header = "ab-variant", default = "control" }
client_id = { key = true }
query = "$.ext['user query']"
"#;

const RESPONSE: &str = r#"{"took":4,"timed_out":false,"hits":{"total":{"value":3,"relation":"eq"},"max_score":2.5,
  "hits":[{"_index":"products","_id":"p-17","_score":2.5,"_source":{"title":"red shoe","tags":["a","b"]}},
          {"_index":"products","_id":"p-4","_score":1.0,"_source":{"title":"blue \"shoe\""}},
          {"_index":"products","_id":"p\u002d9","_score":0.5}]},
  "ext":{"request_id":"req-1","at":"2026-11-26T10:00:00.250Z","user query":"Red Shoes"}}"#;

#[test]
fn an_opensearch_response_logged_as_is() {
    let decoders = Decoders::new(&config(OPENSEARCH));
    let headers = [("ab-variant", &b"treatment"[..])];
    let raw = RawMessage { payload: RESPONSE.as_bytes(), key: Some(b"user-7"), headers: &headers };
    let mut results = Vec::new();
    let i = decoders.impression(raw, &mut results).unwrap();
    assert_eq!(i.query_id, "req-1");
    assert_eq!(i.timestamp, 1_795_687_200_250);
    assert_eq!((i.experiment.as_ref(), i.variant.as_ref()), ("ranker-2026", "treatment"));
    assert_eq!((i.client_id.as_deref(), i.query.as_deref()), (Some("user-7"), Some("Red Shoes")));
    assert_eq!(results, [doc_key("p-17"), doc_key("p-4"), doc_key("p-9")]);
    assert!(matches!(i.query_id, Cow::Borrowed(_)), "strings without escapes borrow from the message");
    // Without the header, its default; without the key, no client.
    let i = decoders.impression(RawMessage::body(RESPONSE.as_bytes()), &mut results).unwrap();
    assert_eq!((i.variant.as_ref(), i.client_id), ("control", None));
    // The text ids are the hashed ones.
    let mut ids = Vec::new();
    decoders.impression_with_ids(RawMessage::body(RESPONSE.as_bytes()), &mut ids).unwrap();
    assert_eq!(ids, ["p-17", "p-4", "p-9"]);
}

const GA4: &str = r#"
[mapping.engagements]
query_id = "$.event_params[?@.key == 'search_id'].value.string_value"
timestamp = { path = "/event_timestamp", format = "epoch_micros" }
doc_id = "$.items[0].item_id"
action = "/event_name"
position = "$.event_params[?(@.key=='index')].value.int_value"
actions = { select_item = "click", add_to_cart = "add_to_cart", purchase = "purchase" }
"#;

fn ga4_event(name: &str, search_id: &str) -> String {
    format!(
        r#"{{"event_name":"{name}","event_timestamp":"1795658400250123","user_pseudo_id":"u1",
        "event_params":[{{"key":"page_location","value":{{"string_value":"/s?q=shoes"}}}},
                        {{"key":"search_id","value":{{"string_value":"{search_id}"}}}},
                        {{"key":"index","value":{{"int_value":3}}}}],
        "items":[{{"item_id":"p-4","price":10.5}}]}}"#
    )
}

#[test]
fn a_ga4_event_with_event_params() {
    let decoders = Decoders::new(&config(GA4));
    let event = ga4_event("select_item", "req-1");
    let e = decoders.engagement(RawMessage::body(event.as_bytes())).unwrap();
    assert_eq!((e.query_id.as_ref(), e.doc_id.as_ref(), e.action.as_ref()), ("req-1", "p-4", "click"));
    assert_eq!((e.timestamp, e.position), (1_795_658_400_250, Some(3)));
    // An event name the mapping does not list: counted under its own reason.
    let page_view = ga4_event("page_view", "req-1");
    let rejected = decoders.engagement(RawMessage::body(page_view.as_bytes())).unwrap_err();
    assert_eq!(rejected.reason, RejectReason::UnmappedAction, "{}", rejected.detail);
    assert!(rejected.detail.contains("\"page_view\""), "{}", rejected.detail);
    // A filter that matches nothing: the field is missing, and the detail says where.
    let other = ga4_event("select_item", "x").replace("search_id", "search_ref");
    let missing = decoders.engagement(RawMessage::body(other.as_bytes())).unwrap_err();
    assert_eq!(missing.reason, RejectReason::MissingField);
    assert!(missing.detail.contains("$.event_params[?@.key == 'search_id']"), "{}", missing.detail);
}

/// The mapping the contract's own names make decodes every native event as the native
/// decoder does: same fields, same rejections.
#[test]
fn the_native_names_as_a_mapping_equal_the_native_decoder() {
    let impressions = [
        r#"{"query_id":"q1","timestamp":1700000000000,"results":["a","b"],"experiment":"e","variant":"v","client_id":7}"#,
        r#"{"query_id":"q2","timestamp":"2026-11-22T10:05:00Z","results":[],"session_id":"s","query":"x"}"#,
        r#"{"query_id":"q\u0033","timestamp":1,"results":["a\n"],"interleaving":["b","c"],"teams":["c"]}"#,
        r#"{"query_id":"q","timestamp":1,"results":["a",""]}"#,
        r#"{"query_id":"q","timestamp":1,"results":["a",{"id":1}]}"#,
        r#"{"query_id":"q","timestamp":"yesterday","results":[]}"#,
        r#"{"query_id":"","timestamp":1,"results":[]}"#,
        r#"{"query_id":"q","results":[]}"#,
        r#"{"query_id":"q","timestamp":1}"#,
        r#"{"query_id":"q","timestamp":1,"results":"a,b"}"#,
        r#"{"query_id":"q","timestamp":1,"results":["a"],"interleaving":["x","y"]}"#,
    ];
    let mapped = MappedImpressions::new(&native_impression_mapping());
    for line in impressions {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let native = decode_impression(line.as_bytes(), &mut a);
        let text = crate::event::json::object_text(line.as_bytes()).unwrap();
        let by_mapping = mapped.decode(Body::Json(text), &RawMessage::body(line.as_bytes()), &mut b);
        match (&native, &by_mapping) {
            (Ok(n), Ok(m)) => assert_eq!((n, &a), (m, &b), "{line}"),
            (Err(n), Err(m)) => assert_eq!(n.reason, m.reason, "{line}: {} / {}", n.detail, m.detail),
            _ => panic!("{line}: native {native:?}, mapped {by_mapping:?}"),
        }
    }
    let engagements = [
        r#"{"query_id":"q","timestamp":5,"doc_id":"d"}"#,
        r#"{"query_id":"q","timestamp":5,"doc_id":"d","action":"purchase","event_id":"x1","position":3}"#,
        r#"{"query_id":"q","timestamp":5}"#,
        r#"{"query_id":"q","timestamp":5,"doc_id":""}"#,
    ];
    let mapped = MappedEngagements::new(&native_engagement_mapping());
    for line in engagements {
        let native = decode_engagement(line.as_bytes());
        let text = crate::event::json::object_text(line.as_bytes()).unwrap();
        let by_mapping = mapped.decode(Body::Json(text), &RawMessage::body(line.as_bytes()));
        match (&native, &by_mapping) {
            (Ok(n), Ok(m)) => assert_eq!(n, m, "{line}"),
            (Err(n), Err(m)) => assert_eq!(n.reason, m.reason, "{line}: {} / {}", n.detail, m.detail),
            _ => panic!("{line}: native {native:?}, mapped {by_mapping:?}"),
        }
    }
}

#[test]
fn timestamps_are_read_in_their_declared_format() {
    let cases: [(TimestampFormat, Found<'_>, Option<i64>); 12] = [
        (TimestampFormat::Rfc3339, Found::Text("2026-11-26T10:00:00.250+01:00".into()), Some(1_795_683_600_250)),
        (TimestampFormat::Rfc3339, Found::Int(1_700_000_000_000), None),
        (TimestampFormat::EpochSeconds, Found::Int(1_700_000_000), Some(1_700_000_000_000)),
        (TimestampFormat::EpochSeconds, Found::Float(1_700_000_000.250_9), Some(1_700_000_000_250)),
        (TimestampFormat::EpochSeconds, Found::Text("1700000000.5".into()), Some(1_700_000_000_500)),
        (TimestampFormat::EpochMillis, Found::Text("1700000000123".into()), Some(1_700_000_000_123)),
        (TimestampFormat::EpochMillis, Found::Float(1.5), None),
        (TimestampFormat::EpochMicros, Found::Int(1_700_000_000_123_999), Some(1_700_000_000_123)),
        (TimestampFormat::EpochMicros, Found::Int(-1), Some(-1)),
        (TimestampFormat::EpochMillis, Found::Int(i128::from(i64::MAX) + 1), None),
        (TimestampFormat::Rfc3339OrEpochMillis, Found::Int(7), Some(7)),
        (TimestampFormat::EpochSeconds, Found::Float(f64::NAN), None),
    ];
    for (format, found, expected) in cases {
        assert_eq!(event_time(format, &found), expected, "{format:?} {found:?}");
    }
}

#[test]
fn bad_events_are_counted_rejections_with_the_path() {
    let decoders = Decoders::new(&config(OPENSEARCH));
    let reject = |json: &str| decoders.impression(RawMessage::body(json.as_bytes()), &mut Vec::new()).unwrap_err();
    let no_hits = reject(r#"{"ext":{"request_id":"r","at":"2026-11-26T10:00:00Z"}}"#);
    assert_eq!(
        (no_hits.reason, no_hits.detail.as_str()),
        (RejectReason::MissingField, "missing field `results` (at /hits/hits/*/_id)")
    );
    let bad_time = reject(r#"{"ext":{"request_id":"r","at":1700000000000},"hits":{"hits":[]}}"#);
    assert_eq!(bad_time.reason, RejectReason::InvalidTimestamp);
    assert!(bad_time.detail.contains("not an RFC 3339 timestamp"), "{}", bad_time.detail);
    let object_id =
        reject(r#"{"ext":{"request_id":"r","at":"2026-11-26T10:00:00Z"},"hits":{"hits":[{"_id":{"x":1}}]}}"#);
    assert_eq!(object_id.reason, RejectReason::WrongType, "{}", object_id.detail);
    let not_a_list = reject(r#"{"ext":{"request_id":"r","at":"2026-11-26T10:00:00Z"},"hits":{"hits":"p-1"}}"#);
    assert_eq!(not_a_list.reason, RejectReason::WrongType, "{}", not_a_list.detail);
    let bool_id = reject(r#"{"ext":{"request_id":true,"at":"2026-11-26T10:00:00Z"},"hits":{"hits":[]}}"#);
    assert_eq!(
        (bool_id.reason, bool_id.detail.as_str()),
        (RejectReason::WrongType, "`query_id` (/ext/request_id) is not a string")
    );
    assert_eq!(reject(r#"{"ext":{"request_id":"r"#).reason, RejectReason::InvalidJson);
    assert_eq!(reject(r#"{"ext":{}} trailing"#).reason, RejectReason::InvalidJson);
    assert_eq!(reject("[1]").reason, RejectReason::NotAnObject);
    // A header that is not UTF-8.
    let headers = [("ab-variant", &b"\xff"[..])];
    let ok = r#"{"ext":{"request_id":"r","at":"2026-11-26T10:00:00Z"},"hits":{"hits":[]}}"#;
    let raw = RawMessage { payload: ok.as_bytes(), key: None, headers: &headers };
    assert_eq!(decoders.impression(raw, &mut Vec::new()).unwrap_err().reason, RejectReason::WrongType);
}

#[test]
fn a_path_read_twice_and_wildcards_over_objects() {
    // `teams` and `results` walk the same array; the interleaving's rankers are a constant-free
    // list; the same member feeds a scalar and a filter.
    let cfg = config(
        r#"
[mapping.impressions]
query_id = "/id"
timestamp = { path = "/t", format = "epoch_seconds" }
results = "/hits/*/id"
interleaving = "/rankers"
teams = "/hits/*/from"
session_id = "/hits/0/id"
"#,
    );
    let decoders = Decoders::new(&cfg);
    let json = r#"{"id":"q","t":1700000000,"rankers":["a","b"],"hits":[{"id":"x","from":"b"},{"from":"a","id":"y"}]}"#;
    let mut results = Vec::new();
    let i = decoders.impression(RawMessage::body(json.as_bytes()), &mut results).unwrap();
    assert_eq!(results, [doc_key("x"), doc_key("y")]);
    assert_eq!(i.interleaving.as_ref().unwrap().teams, [1, 0]);
    assert_eq!((i.variant.as_ref(), i.session_id.as_deref()), ("a vs b", Some("x")));
}

/// `[schemas.*]`: bare Avro datums read with a local `.avsc`, bare Protobuf messages with a
/// `FileDescriptorSet`, through the worked examples' mappings (`config/examples/`).
#[test]
fn local_schemas_read_bare_avro_and_protobuf() {
    use apache_avro::types::Value;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/examples");
    let example = |name: &str, local: &str| {
        let text = std::fs::read_to_string(root.join(format!("{name}.toml"))).unwrap();
        let mut table: toml::Table = toml::from_str(&text).unwrap();
        table.remove("schema_registry");
        config(&format!("{}\n{local}", toml::to_string(&table).unwrap()))
    };

    let avsc = root.join("avro/search-impression.avsc");
    let cfg = example(
        "avro",
        &format!(
            "[schemas.impressions]\navro_file = {:?}\n[schemas.engagements]\navro_file = {:?}\n",
            avsc,
            root.join("avro/search-engagement.avsc")
        ),
    );
    let schema = apache_avro::Schema::parse_str(&std::fs::read_to_string(&avsc).unwrap()).unwrap();
    let some = |s: &str| Value::Union(1, Box::new(Value::String(s.into())));
    let hit = |id: &str| {
        Value::Record(vec![("documentId".into(), Value::String(id.into())), ("score".into(), Value::Double(0.5))])
    };
    let record = Value::Record(vec![
        ("searchId".into(), Value::String("q1".into())),
        ("occurredAt".into(), Value::TimestampMillis(1_700_000_000_123)),
        ("experiment".into(), some("e")),
        ("variant".into(), some("v")),
        ("userId".into(), Value::Union(0, Box::new(Value::Null))),
        ("sessionId".into(), some("s")),
        ("hits".into(), Value::Array(vec![hit("a"), hit("b")])),
        ("device".into(), Value::Union(0, Box::new(Value::Null))),
    ]);
    let datum = apache_avro::writer::datum::GenericDatumWriter::builder(&schema)
        .build()
        .unwrap()
        .write_value_to_vec(record)
        .unwrap();
    let decoders = Decoders::new(&cfg);
    let mut results = Vec::new();
    let i = decoders.impression(RawMessage::body(&datum), &mut results).unwrap();
    assert_eq!((i.query_id.as_ref(), i.timestamp, i.variant.as_ref()), ("q1", 1_700_000_000_123, "v"));
    assert_eq!((i.client_id, i.session_id.as_deref()), (None, Some("s")));
    assert_eq!(results, [doc_key("a"), doc_key("b")]);
    let truncated = decoders.impression(RawMessage::body(&datum[..datum.len() - 4]), &mut results).unwrap_err();
    assert_eq!(truncated.reason, RejectReason::Undecodable, "{}", truncated.detail);

    let set = protox::compile(["acme/search/v1/events.proto"], [root.join("protobuf")]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let descriptors = dir.path().join("events.pb");
    std::fs::write(&descriptors, prost::Message::encode_to_vec(&set)).unwrap();
    let local = |message: &str, input: &str| {
        format!("[schemas.{input}]\nprotobuf_descriptor_set = {descriptors:?}\nprotobuf_message = \"acme.search.v1.{message}\"\n")
    };
    let cfg =
        example("protobuf", &(local("SearchImpression", "impressions") + &local("SearchEngagement", "engagements")));
    let pool = prost_reflect::DescriptorPool::decode(prost::Message::encode_to_vec(&set).as_slice()).unwrap();
    let encode = |message: &str, json: &str| {
        let desc = pool.get_message_by_name(message).unwrap();
        let m =
            prost_reflect::DynamicMessage::deserialize(desc, &mut serde_json::Deserializer::from_str(json)).unwrap();
        prost::Message::encode_to_vec(&m)
    };
    let impression = encode(
        "acme.search.v1.SearchImpression",
        r#"{"search_id":"q2","time":"2026-11-26T10:00:00.250Z","variant":"t","hits":[{"doc_id":"x"},{"doc_id":"y","score":0.5}]}"#,
    );
    let decoders = Decoders::new(&cfg);
    let i = decoders.impression(RawMessage::body(&impression), &mut results).unwrap();
    assert_eq!((i.query_id.as_ref(), i.timestamp, i.experiment.as_ref()), ("q2", 1_795_687_200_250, "none"));
    assert_eq!(results, [doc_key("x"), doc_key("y")]);
    let engagement = encode(
        "acme.search.v1.SearchEngagement",
        r#"{"search_id":"q2","time_ms":"1795687201000","doc_id":"y","action":"purchase","position":2}"#,
    );
    let e = decoders.engagement(RawMessage::body(&engagement)).unwrap();
    assert_eq!(
        (e.doc_id.as_ref(), e.action.as_ref(), e.timestamp, e.position),
        ("y", "purchase", 1_795_687_201_000, Some(2))
    );
    let garbage = decoders.engagement(RawMessage::body(b"\xff\xff\xff")).unwrap_err();
    assert_eq!(garbage.reason, RejectReason::Undecodable, "{}", garbage.detail);
}

/// The scanner against the serde walk: wherever the scanner answers, what it captured (every
/// field, list and fault, the result ids in order) is the serde walk's, on the shapes of the
/// worked examples and on mutations of them (`scan.rs`).
mod scanner_agrees_with_serde {
    use proptest::prelude::*;

    use super::super::{scan, walk, Compiled};
    use super::*;

    fn compiled() -> Vec<Compiled<IMPRESSION_SCALARS>> {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/examples");
        let mut out = vec![MappedImpressions::new(&native_impression_mapping()).0];
        for name in ["segment", "opensearch-response", "ga4"] {
            let text = std::fs::read_to_string(root.join(format!("{name}.toml"))).unwrap();
            let cfg = config(&text);
            out.push(MappedImpressions::new(cfg.mapping.impressions.as_ref().unwrap()).0);
        }
        out
    }

    /// Whether the scanner answered, after checking it agrees.
    fn agree(c: &Compiled<IMPRESSION_SCALARS>, bytes: &[u8]) -> bool {
        let Ok(text) = crate::event::json::object_text(bytes) else { return false };
        let (mut fast, mut fast_ids) = (walk::Extracted::<7>::default(), Vec::<Cow<'_, str>>::new());
        if scan::walk(text, &c.root, &mut fast, &mut fast_ids).is_none() {
            return false;
        }
        let (mut slow, mut slow_ids) = (walk::Extracted::<7>::default(), Vec::<Cow<'_, str>>::new());
        let mut de = serde_json::Deserializer::from_str(text);
        let read =
            walk::walk::<7, _, walk::Borrow, _>(&c.root, &mut de, &mut slow, &mut slow_ids).and_then(|()| de.end());
        assert!(read.is_ok(), "the scanner read what serde_json refuses ({read:?}): {text}");
        assert_eq!((&fast, &fast_ids), (&slow, &slow_ids), "{text}");
        true
    }

    fn seeds() -> Vec<String> {
        let native = r#"{"query_id":"q1","timestamp":1700000000000,"results":["a","b"],"experiment":"e","variant":"v","client_id":7,"x":{"y":[1,2.5e3,null,true]}}"#;
        let segment = r#"{"type":"track","event":"Products Searched","timestamp":"2026-11-26T10:00:00Z","userId":"u1","context":{"session_id":"s"},"properties":{"search_id":"q","query":"shoes","products":[{"product_id":"p1","position":1},{"product_id":"p2","position":2}],"experiment_name":"e","variant_name":"v"}}"#;
        vec![native.to_string(), segment.to_string(), RESPONSE.replace('\n', ""), ga4_event("view_search_results", "q")]
    }

    #[test]
    fn the_example_shapes_take_the_fast_path() {
        let compiled = compiled();
        let seeds = seeds();
        assert!(agree(&compiled[0], seeds[0].as_bytes()), "native");
        assert!(agree(&compiled[1], seeds[1].as_bytes()), "segment");
        // An escape in an id (`p\u002d9`): left to serde_json.
        assert!(!agree(&compiled[2], seeds[2].as_bytes()), "escapes are declined");
        let plain = seeds[2].replace("p\\u002d9", "p-9").replace(r#"\"shoe\""#, "shoe");
        assert!(agree(&compiled[2], plain.as_bytes()), "opensearch: {plain}");
        // Filters look at an element whole: the serde walk's.
        assert!(!agree(&compiled[3], seeds[3].as_bytes()), "ga4 filters are declined");
    }

    fn edit() -> impl Strategy<Value = (usize, String, usize)> {
        let token = prop::sample::select(vec![
            "\"",
            "\\",
            "{",
            "}",
            "[",
            "]",
            ",",
            ":",
            " ",
            "0",
            "-",
            "-0",
            "1e5",
            "1.5",
            "null",
            "true",
            "fals",
            "\\u0041",
            "é",
            "\u{1}",
            "99999999999999999999",
            "\"results\":",
            "\"products\":[{}]",
            "[[[[",
            "",
        ]);
        (any::<usize>(), token.prop_map(str::to_string), 0..4usize)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 400, failure_persistence: None, ..ProptestConfig::default() })]
        #[test]
        fn on_mutated_events(seed in 0..4usize, mapping in 0..4usize, edits in prop::collection::vec(edit(), 1..4)) {
            let mut text = seeds()[seed].clone().into_bytes();
            for (at, token, delete) in edits {
                let at = at % (text.len() + 1);
                let end = (at + delete).min(text.len());
                text.splice(at..end, token.into_bytes());
            }
            agree(&compiled()[mapping], &text);
        }
    }
}
