//! Event decoding: a message's bytes to a borrowed impression or engagement, or a reject reason.
//!
//! Decoding is zero-copy on the hot path: strings borrow from the message unless they contain
//! escapes, and result ids are hashed straight into a caller-owned buffer, so a well-formed event
//! costs no heap allocation. Ids are identified by 128-bit (query) and 64-bit (document) xxh3
//! hashes from here on; the join never needs the text back. A strict scanner (`scan`) decodes the
//! common shape in one pass; serde_json decodes everything else and is the reference for both.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use crate::ids::{doc_key, DocKey};
use crate::time::{parse_rfc3339_ms, EventTime};

mod scan;
pub mod ubi;

/// Which of the two inputs a message came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    Impression = 0,
    Engagement = 1,
}

impl EventKind {
    pub const ALL: [EventKind; 2] = [EventKind::Impression, EventKind::Engagement];
    pub fn index(self) -> usize {
        self as usize
    }
}

/// Why a message was rejected; the `reason` label of `rankpulse_events_rejected_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RejectReason {
    /// The payload is absent or empty (for example a Kafka tombstone).
    EmptyMessage,
    /// Not parseable as JSON (syntax error, truncated, invalid UTF-8, trailing garbage).
    InvalidJson,
    /// Valid JSON, but not an object.
    NotAnObject,
    /// A required field is absent or null.
    MissingField,
    /// A field has the wrong JSON type.
    WrongType,
    /// The timestamp is neither RFC 3339 nor integer milliseconds in range.
    InvalidTimestamp,
    /// A field has the right type but an unusable value (for example an empty id).
    InvalidValue,
    /// Larger than `limits.max_message_bytes`; not parsed.
    TooLarge,
    /// An impression with more results than `limits.max_results`.
    TooManyResults,
    /// Stamped more than `limits.max_future` ahead of the wall clock.
    TimestampInFuture,
    /// Stamped more than `limits.max_past` behind the wall clock (serve only).
    TimestampTooOld,
}

impl RejectReason {
    pub const ALL: [RejectReason; 11] = [
        RejectReason::EmptyMessage,
        RejectReason::InvalidJson,
        RejectReason::NotAnObject,
        RejectReason::MissingField,
        RejectReason::WrongType,
        RejectReason::InvalidTimestamp,
        RejectReason::InvalidValue,
        RejectReason::TooLarge,
        RejectReason::TooManyResults,
        RejectReason::TimestampInFuture,
        RejectReason::TimestampTooOld,
    ];
    pub fn label(self) -> &'static str {
        match self {
            RejectReason::EmptyMessage => "empty_message",
            RejectReason::InvalidJson => "invalid_json",
            RejectReason::NotAnObject => "not_an_object",
            RejectReason::MissingField => "missing_field",
            RejectReason::WrongType => "wrong_type",
            RejectReason::InvalidTimestamp => "invalid_timestamp",
            RejectReason::InvalidValue => "invalid_value",
            RejectReason::TooLarge => "too_large",
            RejectReason::TooManyResults => "too_many_results",
            RejectReason::TimestampInFuture => "timestamp_in_future",
            RejectReason::TimestampTooOld => "timestamp_too_old",
        }
    }
    pub fn index(self) -> usize {
        self as usize
    }
}

/// A rejected message: the counted reason and a human-readable detail for the log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} ({detail})", reason.label())]
pub struct Rejection {
    pub reason: RejectReason,
    pub detail: String,
}

impl Rejection {
    pub(crate) fn new(reason: RejectReason, detail: impl Into<String>) -> Self {
        Rejection { reason, detail: detail.into() }
    }
    pub(crate) fn missing(field: &str) -> Self {
        Rejection::new(RejectReason::MissingField, format!("missing field `{field}`"))
    }
}

/// A decoded impression. Its result ids are in the `results` buffer passed to
/// [`decode_impression`], as [`DocKey`]s in rank order.
#[derive(Debug, PartialEq, Eq)]
pub struct Impression<'a> {
    pub query_id: Cow<'a, str>,
    pub timestamp: EventTime,
    /// `"none"` when absent, as the contract says.
    pub experiment: Cow<'a, str>,
    pub variant: Cow<'a, str>,
    /// The user (or browser) that issued the query, optional. With `statistics.unit = "client_id"`
    /// the A/B statistics treat all impressions of one client as one correlated cluster.
    pub client_id: Option<Cow<'a, str>>,
    /// The search session, optional; the cluster with `statistics.unit = "session_id"`.
    pub session_id: Option<Cow<'a, str>>,
}

/// A decoded engagement.
#[derive(Debug, PartialEq, Eq)]
pub struct Engagement<'a> {
    pub query_id: Cow<'a, str>,
    pub timestamp: EventTime,
    pub doc_id: Cow<'a, str>,
    /// `"click"` when absent.
    pub action: Cow<'a, str>,
    /// Identity for de-duplication of redelivered events.
    pub event_id: Option<Cow<'a, str>>,
    /// Informational only; never used for attribution (the result list is the truth).
    pub position: Option<i64>,
}

pub(crate) const ABSENT_GROUP: &str = "none";
const DEFAULT_ACTION: &str = "click";

/// Decodes an impression; result ids are hashed into `results` (cleared first), in rank order.
pub fn decode_impression<'a>(payload: &'a [u8], results: &mut Vec<DocKey>) -> Result<Impression<'a>, Rejection> {
    let text = object_text(payload)?;
    results.clear();
    let fields = match scan::impression(text, results) {
        Some(fields) => fields,
        None => {
            results.clear();
            serde_object(text, ImpressionVisitor { results })?
        }
    };
    finish_impression(fields)
}

/// Decodes an engagement.
pub fn decode_engagement(payload: &[u8]) -> Result<Engagement<'_>, Rejection> {
    let text = object_text(payload)?;
    let fields = match scan::engagement(text) {
        Some(fields) => fields,
        None => serde_object(text, EngagementVisitor)?,
    };
    finish_engagement(fields)
}

fn finish_impression(fields: ImpressionFields<'_>) -> Result<Impression<'_>, Rejection> {
    let query_id = required_id(fields.query_id, "query_id")?;
    let timestamp = fields.timestamp.ok_or_else(|| Rejection::missing("timestamp"))?.resolve()?;
    if !fields.saw_results {
        return Err(Rejection::missing("results"));
    }
    if fields.empty_result_id {
        return Err(Rejection::new(RejectReason::InvalidValue, "a result id is an empty string"));
    }
    Ok(Impression {
        query_id,
        timestamp,
        experiment: fields.experiment.map_or(Cow::Borrowed(ABSENT_GROUP), |t| t.0),
        variant: fields.variant.map_or(Cow::Borrowed(ABSENT_GROUP), |t| t.0),
        client_id: fields.client_id.and_then(|t| t.0),
        session_id: fields.session_id.and_then(|t| t.0),
    })
}

fn finish_engagement(fields: EngagementFields<'_>) -> Result<Engagement<'_>, Rejection> {
    Ok(Engagement {
        query_id: required_id(fields.query_id, "query_id")?,
        timestamp: fields.timestamp.ok_or_else(|| Rejection::missing("timestamp"))?.resolve()?,
        doc_id: required_id(fields.doc_id, "doc_id")?,
        action: fields.action.map_or(Cow::Borrowed(DEFAULT_ACTION), |t| t.0),
        event_id: fields.event_id.map(|t| t.0),
        position: fields.position,
    })
}

/// One decoder alone, for the differential test of the scanner against serde_json.
#[cfg(test)]
#[derive(Clone, Copy)]
pub(crate) enum Path {
    /// The scanner, `None` where it declines.
    ScanOnly,
    /// serde_json alone.
    Serde,
}

#[cfg(test)]
pub(crate) fn decode_impression_with<'a>(
    payload: &'a [u8],
    results: &mut Vec<DocKey>,
    path: Path,
) -> Option<Result<Impression<'a>, Rejection>> {
    results.clear();
    let fields = match (object_text(payload), path) {
        (Err(e), Path::Serde) => return Some(Err(e)),
        (Err(_), Path::ScanOnly) => return None,
        (Ok(text), Path::ScanOnly) => scan::impression(text, results)?,
        (Ok(text), Path::Serde) => match serde_object(text, ImpressionVisitor { results }) {
            Ok(fields) => fields,
            Err(e) => return Some(Err(e)),
        },
    };
    Some(finish_impression(fields))
}

#[cfg(test)]
pub(crate) fn decode_engagement_with(payload: &[u8], path: Path) -> Option<Result<Engagement<'_>, Rejection>> {
    let fields = match (object_text(payload), path) {
        (Err(e), Path::Serde) => return Some(Err(e)),
        (Err(_), Path::ScanOnly) => return None,
        (Ok(text), Path::ScanOnly) => scan::engagement(text)?,
        (Ok(text), Path::Serde) => match serde_object(text, EngagementVisitor) {
            Ok(fields) => fields,
            Err(e) => return Some(Err(e)),
        },
    };
    Some(finish_engagement(fields))
}

pub(crate) fn required_id<'a>(value: Option<Text<'a>>, field: &str) -> Result<Cow<'a, str>, Rejection> {
    let text = value.ok_or_else(|| Rejection::missing(field))?.0;
    if text.is_empty() {
        return Err(Rejection::new(RejectReason::InvalidValue, format!("`{field}` is an empty string")));
    }
    Ok(text)
}

/// Decodes a JSON object with a serde visitor (the UBI formats, and the reference path here).
pub(crate) fn decode_object<'a, V: Visitor<'a>>(payload: &'a [u8], visitor: V) -> Result<V::Value, Rejection> {
    serde_object(object_text(payload)?, visitor)
}

/// The message as text, once it is known to be UTF-8 that starts like a JSON object.
fn object_text(payload: &[u8]) -> Result<&str, Rejection> {
    match payload.iter().find(|b| !b.is_ascii_whitespace()) {
        None => return Err(Rejection::new(RejectReason::EmptyMessage, "empty payload")),
        Some(b'{') => {}
        Some(_) => {
            // Distinguish "valid JSON but not an object" from garbage, for a useful reason.
            let reason = match serde_json::from_slice::<IgnoredAny>(payload) {
                Ok(_) => RejectReason::NotAnObject,
                Err(_) => RejectReason::InvalidJson,
            };
            return Err(Rejection::new(reason, "the message is not a JSON object"));
        }
    }
    // One UTF-8 check of the whole message (a fast ASCII scan) instead of one per string, which
    // is what parsing from bytes costs.
    std::str::from_utf8(payload)
        .map_err(|e| Rejection::new(RejectReason::InvalidJson, format!("not UTF-8 at byte {}", e.valid_up_to())))
}

fn serde_object<'a, V: Visitor<'a>>(text: &'a str, visitor: V) -> Result<V::Value, Rejection> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value = de.deserialize_map(visitor).map_err(classify)?;
    de.end().map_err(classify)?;
    Ok(value)
}

fn classify(e: serde_json::Error) -> Rejection {
    let reason = match e.classify() {
        serde_json::error::Category::Data => RejectReason::WrongType,
        _ => RejectReason::InvalidJson,
    };
    Rejection::new(reason, e.to_string())
}

/// A string that borrows from the message when it has no escapes.
pub(crate) struct Text<'a>(pub(crate) Cow<'a, str>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct TextVisitor;
        impl<'de> Visitor<'de> for TextVisitor {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(TextVisitor)
    }
}

/// An optional clustering id (`client_id`, `session_id`). Producers added these fields long
/// before rankpulse read them, often as numbers, so an integer is taken as its decimal text and
/// any other type (object, bool, float) counts as absent rather than rejecting the impression.
pub(crate) struct ClusterId<'a>(pub(crate) Option<Cow<'a, str>>);

impl<'de> Deserialize<'de> for ClusterId<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct IdVisitor;
        impl<'de> Visitor<'de> for IdVisitor {
            type Value = ClusterId<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or an integer")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(ClusterId((!v.is_empty()).then_some(Cow::Borrowed(v))))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(ClusterId((!v.is_empty()).then(|| Cow::Owned(v.to_owned()))))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(ClusterId(Some(Cow::Owned(v.to_string()))))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(ClusterId(Some(Cow::Owned(v.to_string()))))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
                Ok(ClusterId(None))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
                Ok(ClusterId(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(ClusterId(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(ClusterId(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(ClusterId(None))
            }
        }
        d.deserialize_any(IdVisitor)
    }
}

/// A timestamp as written: resolved to milliseconds after decoding, so that a bad value gets
/// its own reject reason rather than a generic type error.
pub(crate) enum RawTimestamp<'a> {
    Millis(i64),
    OutOfRange,
    Text(Text<'a>),
}

impl RawTimestamp<'_> {
    fn resolve(self) -> Result<EventTime, Rejection> {
        match self {
            RawTimestamp::Millis(ms) => Ok(ms),
            RawTimestamp::OutOfRange => {
                Err(Rejection::new(RejectReason::InvalidTimestamp, "integer timestamp out of range"))
            }
            RawTimestamp::Text(t) => parse_rfc3339_ms(&t.0).ok_or_else(|| {
                Rejection::new(RejectReason::InvalidTimestamp, format!("{:?} is not an RFC 3339 timestamp", t.0))
            }),
        }
    }
}

impl<'de> Deserialize<'de> for RawTimestamp<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct TsVisitor;
        impl<'de> Visitor<'de> for TsVisitor {
            type Value = RawTimestamp<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an RFC 3339 string or integer milliseconds since the epoch")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(RawTimestamp::Millis(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(i64::try_from(v).map_or(RawTimestamp::OutOfRange, RawTimestamp::Millis))
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(RawTimestamp::Text(Text(Cow::Borrowed(v))))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(RawTimestamp::Text(Text(Cow::Owned(v.to_owned()))))
            }
        }
        d.deserialize_any(TsVisitor)
    }
}

#[derive(Default)]
struct ImpressionFields<'a> {
    query_id: Option<Text<'a>>,
    timestamp: Option<RawTimestamp<'a>>,
    experiment: Option<Text<'a>>,
    variant: Option<Text<'a>>,
    client_id: Option<ClusterId<'a>>,
    session_id: Option<ClusterId<'a>>,
    saw_results: bool,
    empty_result_id: bool,
}

struct ImpressionVisitor<'s> {
    results: &'s mut Vec<DocKey>,
}

impl<'de> Visitor<'de> for ImpressionVisitor<'_> {
    type Value = ImpressionFields<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an impression object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut fields = ImpressionFields::default();
        while let Some(key) = map.next_key::<Text<'de>>()? {
            match key.0.as_ref() {
                "query_id" => fields.query_id = map.next_value()?,
                "timestamp" => fields.timestamp = map.next_value()?,
                "experiment" => fields.experiment = map.next_value()?,
                "variant" => fields.variant = map.next_value()?,
                "client_id" => fields.client_id = map.next_value()?,
                "session_id" => fields.session_id = map.next_value()?,
                "results" => {
                    self.results.clear();
                    let seed = ResultIdsSeed { results: self.results, empty_id: &mut fields.empty_result_id };
                    fields.saw_results = map.next_value_seed(seed)?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(fields)
    }
}

/// Hashes the `results` array into the caller's buffer; yields false for `null`.
struct ResultIdsSeed<'s> {
    results: &'s mut Vec<DocKey>,
    empty_id: &'s mut bool,
}

impl<'de> DeserializeSeed<'de> for ResultIdsSeed<'_> {
    type Value = bool;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for ResultIdsSeed<'_> {
    type Value = bool;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of result id strings")
    }
    fn visit_none<E: de::Error>(self) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_seq(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
        while let Some(id) = seq.next_element::<Text<'de>>()? {
            *self.empty_id |= id.0.is_empty();
            self.results.push(doc_key(&id.0));
        }
        Ok(true)
    }
}

#[derive(Default)]
struct EngagementFields<'a> {
    query_id: Option<Text<'a>>,
    timestamp: Option<RawTimestamp<'a>>,
    doc_id: Option<Text<'a>>,
    action: Option<Text<'a>>,
    event_id: Option<Text<'a>>,
    position: Option<i64>,
}

struct EngagementVisitor;

impl<'de> Visitor<'de> for EngagementVisitor {
    type Value = EngagementFields<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an engagement object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut fields = EngagementFields::default();
        while let Some(key) = map.next_key::<Text<'de>>()? {
            match key.0.as_ref() {
                "query_id" => fields.query_id = map.next_value()?,
                "timestamp" => fields.timestamp = map.next_value()?,
                "doc_id" => fields.doc_id = map.next_value()?,
                "action" => fields.action = map.next_value()?,
                "event_id" => fields.event_id = map.next_value()?,
                "position" => fields.position = map.next_value()?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(fields)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn imp(json: &str) -> Result<(String, i64, String, String, Vec<DocKey>), RejectReason> {
        let mut buf = Vec::new();
        decode_impression(json.as_bytes(), &mut buf)
            .map(|i| {
                (i.query_id.into_owned(), i.timestamp, i.experiment.into_owned(), i.variant.into_owned(), buf.clone())
            })
            .map_err(|r| r.reason)
    }

    #[test]
    fn impression_fields_and_defaults() {
        let (q, ts, e, v, r) =
            imp(r#"{"query_id":"q1","timestamp":1700000000000,"results":["a","b"],"extra":{"x":[1]}}"#).unwrap();
        assert_eq!((q.as_str(), ts, e.as_str(), v.as_str()), ("q1", 1_700_000_000_000, "none", "none"));
        assert_eq!(r, vec![doc_key("a"), doc_key("b")]);
        let (_, ts, e, v, r) = imp(
            r#"{"query_id":"q\u0031","timestamp":"2026-11-22T10:05:00Z","results":[],"experiment":"e1","variant":null}"#,
        )
        .unwrap();
        assert_eq!((ts, e.as_str(), v.as_str(), r.len()), (1_795_341_900_000, "e1", "none", 0));
    }

    #[test]
    fn well_formed_events_borrow_without_copying() {
        let payload = br#"{"query_id":"q1","timestamp":1,"results":["a"],"experiment":"e","variant":"v"}"#;
        let mut buf = Vec::new();
        let i = decode_impression(payload, &mut buf).unwrap();
        assert!(matches!(i.query_id, Cow::Borrowed(_)) && matches!(i.variant, Cow::Borrowed(_)));
    }

    #[test]
    fn optional_cluster_ids_are_read_when_present() {
        let mut buf = Vec::new();
        let payload = br#"{"query_id":"q1","timestamp":1,"results":[],"client_id":"u7","session_id":"s9"}"#;
        let i = decode_impression(payload, &mut buf).unwrap();
        assert_eq!((i.client_id.as_deref(), i.session_id.as_deref()), (Some("u7"), Some("s9")));
        let bare = decode_impression(br#"{"query_id":"q1","timestamp":1,"results":[]}"#, &mut buf).unwrap();
        assert_eq!((bare.client_id, bare.session_id), (None, None));
        let numeric = decode_impression(br#"{"query_id":"q1","timestamp":1,"results":[],"client_id":7}"#, &mut buf);
        assert_eq!(numeric.unwrap().client_id.as_deref(), Some("7"));
        let odd = br#"{"query_id":"q1","timestamp":1,"results":[],"client_id":{"a":[1]},"session_id":true}"#;
        let odd = decode_impression(odd, &mut buf).unwrap();
        assert_eq!((odd.client_id, odd.session_id), (None, None));
    }

    #[test]
    fn impression_rejections_have_reasons() {
        let cases = [
            ("", RejectReason::EmptyMessage),
            ("   ", RejectReason::EmptyMessage),
            ("{\"query_id\":", RejectReason::InvalidJson),
            ("not json", RejectReason::InvalidJson),
            ("[1,2]", RejectReason::NotAnObject),
            ("42", RejectReason::NotAnObject),
            (r#"{"timestamp":1,"results":[]}"#, RejectReason::MissingField),
            (r#"{"query_id":null,"timestamp":1,"results":[]}"#, RejectReason::MissingField),
            (r#"{"query_id":"q","results":[]}"#, RejectReason::MissingField),
            (r#"{"query_id":"q","timestamp":1}"#, RejectReason::MissingField),
            (r#"{"query_id":7,"timestamp":1,"results":[]}"#, RejectReason::WrongType),
            (r#"{"query_id":"q","timestamp":1,"results":"a,b"}"#, RejectReason::WrongType),
            (r#"{"query_id":"q","timestamp":1,"results":["a",3]}"#, RejectReason::WrongType),
            (r#"{"query_id":"q","timestamp":1.5,"results":[]}"#, RejectReason::WrongType),
            (r#"{"query_id":"q","timestamp":true,"results":[]}"#, RejectReason::WrongType),
            (r#"{"query_id":"q","timestamp":1,"results":[],"variant":1}"#, RejectReason::WrongType),
            (r#"{"query_id":"q","timestamp":"yesterday","results":[]}"#, RejectReason::InvalidTimestamp),
            (r#"{"query_id":"q","timestamp":18446744073709551615,"results":[]}"#, RejectReason::InvalidTimestamp),
            (r#"{"query_id":"","timestamp":1,"results":[]}"#, RejectReason::InvalidValue),
            (r#"{"query_id":"q","timestamp":1,"results":[""]}"#, RejectReason::InvalidValue),
            (r#"{"query_id":"q","timestamp":1,"results":[]} trailing"#, RejectReason::InvalidJson),
        ];
        for (json, reason) in cases {
            assert_eq!(imp(json).map(|_| ()), Err(reason), "{json}");
        }
    }

    #[test]
    fn engagement_fields_defaults_and_rejections() {
        let e = decode_engagement(br#"{"query_id":"q","timestamp":5,"doc_id":"d"}"#).unwrap();
        assert_eq!((e.action.as_ref(), e.event_id, e.position), ("click", None, None));
        let e = decode_engagement(
            br#"{"query_id":"q","timestamp":5,"doc_id":"d","action":"purchase","event_id":"x1","position":3}"#,
        )
        .unwrap();
        assert_eq!((e.action.as_ref(), e.event_id.as_deref(), e.position), ("purchase", Some("x1"), Some(3)));
        let reason = |j: &str| decode_engagement(j.as_bytes()).unwrap_err().reason;
        assert_eq!(reason(r#"{"query_id":"q","timestamp":5}"#), RejectReason::MissingField);
        assert_eq!(reason(r#"{"query_id":"q","timestamp":5,"doc_id":"d","position":"3"}"#), RejectReason::WrongType);
        assert_eq!(reason(r#"{"query_id":"q","timestamp":5,"doc_id":""}"#), RejectReason::InvalidValue);
        assert_eq!(reason("\u{0}"), RejectReason::InvalidJson);
    }
}
