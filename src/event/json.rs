//! rankpulse's own event format through serde_json: the reference decoder, which the scanner
//! must agree with and which decodes everything the scanner declines. Its building blocks
//! (borrowed strings, lenient ids, raw timestamps, result-id lists, the reject classification)
//! are shared with the UBI decoder, so both formats reject the same faults for the same reasons.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{interleaving_of, Dimensions, Engagement, Impression, RejectReason, Rejection, ResultSink, ABSENT_GROUP};
use crate::interleaving::RANKER_SEPARATOR;
use crate::time::{parse_rfc3339_ms, EventTime};

pub(super) const DEFAULT_ACTION: &str = "click";

/// What a rejection for a bad text timestamp says the native format expects.
const NATIVE_TIME: &str = "an RFC 3339 timestamp";

/// How much of a message that is not a JSON object its rejection quotes.
const FOUND_CHARS: usize = 24;

/// The message as text, once it is known to be UTF-8 that starts like a JSON object.
pub(super) fn object_text(payload: &[u8]) -> Result<&str, Rejection> {
    let start = payload.trim_ascii_start();
    let Some(&first) = start.first() else {
        return Err(Rejection::new(RejectReason::EmptyMessage, "empty payload"));
    };
    if first != b'{' {
        // Distinguish "valid JSON but not an object" from garbage, for a useful reason, and
        // say what was found: a whole file in the wrong format shows at once.
        let rejection = match serde_json::from_slice::<IgnoredAny>(payload) {
            Ok(_) => Rejection::new(
                RejectReason::NotAnObject,
                format!("expected a JSON object, found {}", json_type_name(first)),
            ),
            Err(_) => Rejection::new(
                RejectReason::InvalidJson,
                format!("expected a JSON object, found {}", super::excerpt(start, FOUND_CHARS, false)),
            ),
        };
        return Err(rejection);
    }
    // One UTF-8 check of the whole message (a fast ASCII scan) instead of one per string, which
    // is what parsing from bytes costs.
    std::str::from_utf8(payload)
        .map_err(|e| Rejection::new(RejectReason::InvalidJson, format!("not UTF-8 at column {}", e.valid_up_to() + 1)))
}

/// The type of a valid JSON value, by its first byte.
fn json_type_name(first: u8) -> &'static str {
    match first {
        b'[' => "an array",
        b'"' => "a string",
        b't' | b'f' => "a boolean",
        b'n' => "null",
        _ => "a number",
    }
}

/// Decodes a JSON object with a serde visitor (the UBI formats, and the reference path here).
pub(super) fn decode_object<'a, V: Visitor<'a>>(payload: &'a [u8], visitor: V) -> Result<V::Value, Rejection> {
    serde_object(object_text(payload)?, visitor)
}

fn serde_object<'a, V: Visitor<'a>>(text: &'a str, visitor: V) -> Result<V::Value, Rejection> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value = de.deserialize_map(visitor).map_err(|e| classify(e, text))?;
    de.end().map_err(|e| classify(e, text))?;
    Ok(value)
}

/// serde_json's error as a rejection. Its position ("at line 2 column 0") is a line and column
/// of the message as serde counts them, which says nothing to whoever reads a log of messages
/// or a file's line (a truncated line ends in "line 2" after its newline): it becomes the
/// column within the message, the 1-based byte offset of the fault.
pub(super) fn classify(e: serde_json::Error, text: &str) -> Rejection {
    let reason = match e.classify() {
        serde_json::error::Category::Data => RejectReason::WrongType,
        _ => RejectReason::InvalidJson,
    };
    let message = e.to_string();
    if e.line() == 0 {
        return Rejection::new(reason, message);
    }
    // serde_json's own format for a positioned error.
    let position = format!(" at line {} column {}", e.line(), e.column());
    let what = message.strip_suffix(&position).unwrap_or(&message);
    let line_start = match e.line() {
        1 => 0,
        line => text.match_indices('\n').nth(line - 2).map_or(text.len(), |(i, _)| i + 1),
    };
    let column = line_start + e.column();
    let end = if e.is_eof() { ", the end of the message" } else { "" };
    Rejection::new(reason, format!("{what} at column {}{end}", column.max(1)))
}

/// A native impression's fields as read, before the checks; result ids went to a sink.
pub(super) fn impression_fields<'a, S: ResultSink<'a>>(
    text: &'a str,
    results: &mut S,
) -> Result<ImpressionFields<'a>, Rejection> {
    serde_object(text, ImpressionVisitor { results })
}

/// A native engagement's fields as read, before the checks.
pub(super) fn engagement_fields(text: &str) -> Result<EngagementFields<'_>, Rejection> {
    serde_object(text, EngagementVisitor)
}

/// The native impression's checks and defaults, whichever decoder read the fields, with the
/// number of result ids read.
pub(super) fn finish_impression(fields: ImpressionFields<'_>, results: usize) -> Result<Impression<'_>, Rejection> {
    let query_id = required_id(fields.query_id, "query_id")?;
    let timestamp = required_time(fields.timestamp, parse_rfc3339_ms, NATIVE_TIME)?;
    if !fields.saw_results {
        return Err(Rejection::missing("results"));
    }
    if fields.empty_result_id {
        return Err(Rejection::new(RejectReason::InvalidValue, "a result id is an empty string"));
    }
    let interleaving = match (fields.interleaving, fields.teams) {
        (None, None) => None,
        (rankers, teams) => interleaving_of(texts(rankers), texts(teams), results, ["interleaving", "teams"])?,
    };
    let variant = match &interleaving {
        Some(il) => Cow::Owned(il.rankers.join(RANKER_SEPARATOR)),
        None => fields.variant.map_or(Cow::Borrowed(ABSENT_GROUP), |t| t.0),
    };
    Ok(Impression {
        query_id,
        timestamp,
        experiment: fields.experiment.map_or(Cow::Borrowed(ABSENT_GROUP), |t| t.0),
        variant,
        client_id: fields.client_id.and_then(|t| t.0),
        session_id: fields.session_id.and_then(|t| t.0),
        query: fields.query.and_then(|t| t.0),
        segment: fields.segment.and_then(|t| t.0),
        dimensions: fields.dimensions.filter(|d| d.starts_with('{')).map_or(Dimensions::Absent, Dimensions::Native),
        interleaving,
    })
}

/// The native engagement's checks and defaults, whichever decoder read the fields.
pub(super) fn finish_engagement(fields: EngagementFields<'_>) -> Result<Engagement<'_>, Rejection> {
    Ok(Engagement {
        query_id: required_id(fields.query_id, "query_id")?,
        timestamp: required_time(fields.timestamp, parse_rfc3339_ms, NATIVE_TIME)?,
        doc_id: required_id(fields.doc_id, "doc_id")?,
        action: fields.action.map_or(Cow::Borrowed(DEFAULT_ACTION), |t| t.0),
        event_id: fields.event_id.map(|t| t.0),
        position: fields.position,
    })
}

/// A list of strings as decoded, as text.
pub(super) fn texts(list: Option<Vec<Text<'_>>>) -> Option<Vec<Cow<'_, str>>> {
    list.map(|l| l.into_iter().map(|t| t.0).collect())
}

/// A required, non-empty id.
pub(super) fn required_id<'a>(value: Option<Text<'a>>, field: &str) -> Result<Cow<'a, str>, Rejection> {
    let text = value.ok_or_else(|| Rejection::missing(field))?.0;
    if text.is_empty() {
        return Err(Rejection::new(RejectReason::InvalidValue, format!("`{field}` is an empty string")));
    }
    Ok(text)
}

/// A required timestamp in milliseconds. Each format reads integer milliseconds the same way
/// and text in its own forms: `parse` reads those, `expected` names them in the rejection.
pub(super) fn required_time(
    raw: Option<RawTimestamp<'_>>,
    parse: fn(&str) -> Option<EventTime>,
    expected: &str,
) -> Result<EventTime, Rejection> {
    match raw.ok_or_else(|| Rejection::missing("timestamp"))? {
        RawTimestamp::Millis(ms) => Ok(ms),
        RawTimestamp::OutOfRange => {
            Err(Rejection::new(RejectReason::InvalidTimestamp, "integer timestamp out of range"))
        }
        RawTimestamp::Text(t) => parse(&t.0)
            .ok_or_else(|| Rejection::new(RejectReason::InvalidTimestamp, format!("{:?} is not {expected}", t.0))),
    }
}

/// A string that borrows from the message when it has no escapes.
pub(super) struct Text<'a>(pub(super) Cow<'a, str>);

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

/// A free-form value where a name is expected: a string, or an integer taken as its decimal
/// text; any other type is reported by name, for the caller to decide whether that rejects the
/// message (UBI's experiment and variant) or counts as absent (cluster ids).
pub(super) enum Label<'a> {
    /// A string, or an integer's decimal text.
    Text(Cow<'a, str>),
    /// `null`.
    Absent,
    /// Any other type, named for the rejection's detail.
    Other(&'static str),
}

impl<'de> Deserialize<'de> for Label<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct LabelVisitor;
        impl<'de> Visitor<'de> for LabelVisitor {
            type Value = Label<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or an integer")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Label::Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Label::Text(Cow::Owned(v.to_owned())))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(Label::Text(Cow::Owned(v.to_string())))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(Label::Text(Cow::Owned(v.to_string())))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Label::Absent)
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
                Ok(Label::Other("a fractional number"))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
                Ok(Label::Other("a boolean"))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Label::Other("an array"))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Label::Other("an object"))
            }
        }
        d.deserialize_any(LabelVisitor)
    }
}

/// An optional clustering id (`client_id`, `session_id`). Producers added these fields long
/// before rankpulse read them, often as numbers, so an integer is taken as its decimal text and
/// any other type (object, bool, float) counts as absent rather than rejecting the impression.
pub(super) struct ClusterId<'a>(pub(super) Option<Cow<'a, str>>);

impl<'de> Deserialize<'de> for ClusterId<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(ClusterId(match Label::deserialize(d)? {
            Label::Text(id) if !id.is_empty() => Some(id),
            Label::Text(_) | Label::Absent | Label::Other(_) => None,
        }))
    }
}

/// A timestamp as written: resolved to milliseconds after decoding, so that a bad value gets
/// its own reject reason rather than a generic type error.
pub(super) enum RawTimestamp<'a> {
    /// Integer milliseconds since the epoch.
    Millis(i64),
    /// An integer beyond `i64`: rejected as a timestamp, not as a type error.
    OutOfRange,
    /// Text, in whichever forms the format accepts.
    Text(Text<'a>),
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

/// One id of a result list, as a format writes it.
pub(super) trait ListedId<'de>: Deserialize<'de> {
    /// What the list is called when an element has the wrong type.
    const LIST: &'static str;
    fn into_text(self) -> Cow<'de, str>;
}

impl<'de> ListedId<'de> for Text<'de> {
    const LIST: &'static str = "an array of result id strings";
    fn into_text(self) -> Cow<'de, str> {
        self.0
    }
}

/// Reads a result list (the native `results`, UBI's hit ids) into a sink, in rank order.
/// Yields false for `null`, which each format reads its own way (missing natively, a
/// zero-result search in UBI). Does not clear the sink or the flag: a repeated field is each
/// format's own rule.
pub(super) struct IdListSeed<'s, S, T> {
    /// Where the ids go.
    sink: &'s mut S,
    /// Set when an id is empty, which the caller rejects after the whole message is read.
    empty_id: &'s mut bool,
    /// How an element is read: strings only natively, strings or integers in UBI.
    element: PhantomData<fn() -> T>,
}

impl<'s, S, T> IdListSeed<'s, S, T> {
    pub(super) fn new(sink: &'s mut S, empty_id: &'s mut bool) -> Self {
        IdListSeed { sink, empty_id, element: PhantomData }
    }
}

impl<'de, S: ResultSink<'de>, T: ListedId<'de>> DeserializeSeed<'de> for IdListSeed<'_, S, T> {
    type Value = bool;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de, S: ResultSink<'de>, T: ListedId<'de>> Visitor<'de> for IdListSeed<'_, S, T> {
    type Value = bool;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(T::LIST)
    }
    fn visit_none<E: de::Error>(self) -> Result<bool, E> {
        Ok(false)
    }
    // serde_json reads `null` as none; a deserializer that reports a unit gets the same answer.
    fn visit_unit<E: de::Error>(self) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_seq(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
        while let Some(id) = seq.next_element::<T>()? {
            let id = id.into_text();
            *self.empty_id |= id.is_empty();
            self.sink.push(id);
        }
        Ok(true)
    }
}

/// A native impression's fields as read by either decoder, before the checks: kept raw so
/// that the scanner and serde_json share one set of checks and rejection wordings.
#[derive(Default)]
pub(super) struct ImpressionFields<'a> {
    /// `None` when absent or null: required, and must not be empty.
    pub(super) query_id: Option<Text<'a>>,
    /// Unresolved, so a bad value is rejected as a timestamp rather than as a type.
    pub(super) timestamp: Option<RawTimestamp<'a>>,
    /// `None` when absent or null: defaults to `"none"`.
    pub(super) experiment: Option<Text<'a>>,
    /// `None` when absent or null: defaults to `"none"`.
    pub(super) variant: Option<Text<'a>>,
    /// Optional context, never a reason to reject.
    pub(super) client_id: Option<ClusterId<'a>>,
    /// Optional context, never a reason to reject.
    pub(super) session_id: Option<ClusterId<'a>>,
    /// The query's text; optional context like the cluster ids (a number is its decimal text,
    /// another type counts as absent).
    pub(super) query: Option<ClusterId<'a>>,
    /// The traffic segment (`segment`); optional context like the query's text.
    pub(super) segment: Option<ClusterId<'a>>,
    /// `dimensions`, the object's text as it is in the message (`None` when absent or null):
    /// only the fields `ab.dimensions` names are read from it, by [`super::dimension_value`].
    pub(super) dimensions: Option<&'a str>,
    /// `results` was present and not `null`; the ids themselves went to the sink.
    pub(super) saw_results: bool,
    /// Some result id was empty: rejected once the whole message is read.
    pub(super) empty_result_id: bool,
    /// `interleaving`, `None` when absent or null: the rankers of an interleaved list.
    pub(super) interleaving: Option<Vec<Text<'a>>>,
    /// `teams`, `None` when absent or null: each result's ranker.
    pub(super) teams: Option<Vec<Text<'a>>>,
}

struct ImpressionVisitor<'s, S> {
    /// Where the result ids go.
    results: &'s mut S,
}

impl<'de, S: ResultSink<'de>> Visitor<'de> for ImpressionVisitor<'_, S> {
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
                "query" => fields.query = map.next_value()?,
                "segment" => fields.segment = map.next_value()?,
                "dimensions" => {
                    fields.dimensions = map.next_value::<Option<&'de RawValue>>()?.map(RawValue::get);
                }
                "interleaving" => fields.interleaving = map.next_value()?,
                "teams" => fields.teams = map.next_value()?,
                "results" => {
                    self.results.clear();
                    let seed = IdListSeed::<S, Text<'de>>::new(self.results, &mut fields.empty_result_id);
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

/// A native engagement's fields as read by either decoder, before the checks (shared, as for
/// impressions).
#[derive(Default)]
pub(super) struct EngagementFields<'a> {
    /// `None` when absent or null: required, and must not be empty.
    pub(super) query_id: Option<Text<'a>>,
    /// Unresolved, so a bad value is rejected as a timestamp rather than as a type.
    pub(super) timestamp: Option<RawTimestamp<'a>>,
    /// `None` when absent or null: required, and must not be empty.
    pub(super) doc_id: Option<Text<'a>>,
    /// `None` when absent or null: defaults to `"click"`.
    pub(super) action: Option<Text<'a>>,
    /// Optional: without it, redeliveries are recognized by their content.
    pub(super) event_id: Option<Text<'a>>,
    /// Optional and informational.
    pub(super) position: Option<i64>,
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
