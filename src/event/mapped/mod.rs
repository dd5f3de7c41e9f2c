//! Events in the user's own shape, read through `[mapping.*]`: each field rankpulse needs is
//! found at a path of the message (JSON, or a decoded Avro or Protobuf record), in a header, in
//! the message key, or is a constant, and is then checked as its field's type with the same
//! reject reasons as the native format.
//!
//! | file | does |
//! |---|---|
//! | `mod.rs` | [`MappedImpressions`] and [`MappedEngagements`]: one input's mapping, compiled; the fields' types, defaults and the action names |
//! | `plan.rs` | the mapping's paths merged into one tree, and what a path finds |
//! | `scan.rs` | the fast path: that tree walked over JSON bytes with the native scanner's cursor, declining what it does not read exactly as serde_json |
//! | `walk.rs` | one pass over a message (or a decoded record) along that tree, by a serde visitor: the reference, and the path of what the scanner declines |
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]

use std::borrow::Cow;
use std::collections::HashMap;

use super::{
    interleaving_of, Dimensions, Engagement, Impression, RawMessage, RejectReason, Rejection, ResultSink, ABSENT_GROUP,
};
use crate::config::{
    EngagementMapping, FieldSource, ImpressionMapping, SourceOf, TimestampFormat, IMPRESSION_SCALARS, MAX_DIMENSIONS,
};
use crate::interleaving::RANKER_SEPARATOR;
use crate::time::{parse_rfc3339_ms, EventTime};

mod plan;
mod scan;
mod walk;

use plan::{Capture, Found, Node};
use walk::{Borrow, Extracted, RESULTS};

/// List fields: the results, the interleaving's rankers, each result's team.
const LIST_FIELDS: usize = 3;
const INTERLEAVING: usize = 1;
const TEAMS: usize = 2;

/// What a message's body is, for the walk.
pub(super) enum Body<'a> {
    /// JSON text (already checked to be UTF-8 and to start like an object).
    Json(&'a str),
    /// A decoded Protobuf record, in its JSON form.
    Tree(serde_json::Value),
    /// A decoded Avro record, walked as it is.
    Avro(apache_avro::types::Value),
}

/// One input's field sources by slot, with the tree their paths make.
#[derive(Debug, Clone)]
struct Compiled<const N: usize> {
    /// Every path of the mapping, merged.
    root: Node,
    /// Each scalar field's name, for rejections.
    names: [&'static str; N],
    /// Each scalar field's source, `None` when the mapping leaves it out.
    scalars: [Option<FieldSource>; N],
    /// Each list field's source.
    lists: [Option<FieldSource>; LIST_FIELDS],
}

impl<const N: usize> Compiled<N> {
    fn new(
        named: [(&'static str, Option<&FieldSource>); N],
        lists: [(&'static str, Option<&FieldSource>); LIST_FIELDS],
    ) -> Self {
        let names = named.map(|(name, _)| name);
        let scalars = named.map(|(_, source)| source);
        let lists = lists.map(|(_, source)| source);
        let mut root = Node::default();
        for (slot, source) in scalars.iter().enumerate() {
            if let Some(FieldSource { from: SourceOf::Path(path), .. }) = source {
                root.add(path, Capture::Scalar(slot));
            }
        }
        for (list, source) in lists.iter().enumerate() {
            if let Some(FieldSource { from: SourceOf::Path(path), .. }) = source {
                root.add(path, Capture::Item(list));
            }
        }
        Compiled { root, names, scalars: scalars.map(|s| s.cloned()), lists: lists.map(|s| s.cloned()) }
    }

    /// Whether a field is read from the message's key or a header.
    fn reads_envelope(&self) -> bool {
        self.scalars.iter().flatten().any(|s| matches!(s.from, SourceOf::Key | SourceOf::Header(_)))
    }

    /// One pass over the body, into `out` (fresh): filled in place rather than returned, as it
    /// is a few hundred bytes, moved per message otherwise.
    fn extract<'a, S: ResultSink<'a>>(
        &self,
        body: Body<'a>,
        sink: &mut S,
        out: &mut Extracted<'a, N>,
    ) -> Result<(), Rejection> {
        match body {
            // The scanner first; serde_json where it declines.
            Body::Json(text) if scan::walk(text, &self.root, out, sink).is_some() => {}
            Body::Json(text) => {
                *out = Extracted::default();
                sink.clear();
                let mut de = serde_json::Deserializer::from_str(text);
                walk::walk::<N, S, Borrow, _>(&self.root, &mut de, out, sink)
                    .and_then(|()| de.end())
                    .map_err(|e| super::json::classify(e, text))?;
            }
            Body::Tree(value) => walk::walk_value(&self.root, &value, out, sink),
            Body::Avro(value) => {
                walk::walk::<N, S, walk::Own, _>(&self.root, super::avro_value::AvroValue(&value), out, sink)
                    .map_err(|e| Rejection::new(RejectReason::Undecodable, format!("an Avro record: {e}")))?
            }
        }
        match out.fault.take() {
            Some(fault) => Err(fault),
            None => Ok(()),
        }
    }

    /// A scalar field's value: found at its path, or read from the message's envelope, or its
    /// constant; the source's default when absent or null. `None`: absent, no default.
    fn value<'a>(
        &'a self,
        slot: usize,
        found: &mut Extracted<'a, N>,
        raw: &RawMessage<'a>,
    ) -> Result<Option<Found<'a>>, Rejection> {
        let Some(Some(source)) = self.scalars.get(slot) else { return Ok(None) };
        let value = match &source.from {
            SourceOf::Path(_) => found.scalars.get_mut(slot).and_then(Option::take),
            SourceOf::Header(name) => match raw.headers.iter().find(|(n, _)| n == name) {
                Some((_, bytes)) => Some(Found::Text(Cow::Borrowed(utf8(bytes, source)?))),
                None => None,
            },
            SourceOf::Key => match raw.key {
                Some(bytes) => Some(Found::Text(Cow::Borrowed(utf8(bytes, source)?))),
                None => None,
            },
            SourceOf::Value(v) => Some(Found::Text(Cow::Borrowed(v.as_str()))),
        };
        Ok(match (value, &source.default) {
            (None | Some(Found::Null), Some(default)) => Some(Found::Text(Cow::Borrowed(default.as_str()))),
            (Some(Found::Null), None) => None,
            (value, _) => value,
        })
    }

    /// A required id: text or an integer, not empty.
    fn id<'a>(
        &'a self,
        slot: usize,
        found: &mut Extracted<'a, N>,
        raw: &RawMessage<'a>,
    ) -> Result<Cow<'a, str>, Rejection> {
        let name = self.names.get(slot).copied().unwrap_or("?");
        match self.value(slot, found, raw)? {
            None => Err(Rejection::missing_mapped(name, &self.describe(slot))),
            Some(Found::Text(t)) if t.is_empty() => Err(Rejection::new(
                RejectReason::InvalidValue,
                format!("`{name}` ({}) is an empty string", self.describe(slot)),
            )),
            Some(value) => text_of(value).ok_or_else(|| self.wrong_type(slot, name, "a string")),
        }
    }

    /// An optional label: text or an integer; `None` when absent.
    fn label<'a>(
        &'a self,
        slot: usize,
        found: &mut Extracted<'a, N>,
        raw: &RawMessage<'a>,
    ) -> Result<Option<Cow<'a, str>>, Rejection> {
        let name = self.names.get(slot).copied().unwrap_or("?");
        match self.value(slot, found, raw)? {
            None => Ok(None),
            Some(value) => text_of(value).map(Some).ok_or_else(|| self.wrong_type(slot, name, "a string")),
        }
    }

    /// Optional context (cluster ids, the query's text): any other type counts as absent, as
    /// natively.
    fn context<'a>(
        &'a self,
        slot: usize,
        found: &mut Extracted<'a, N>,
        raw: &RawMessage<'a>,
    ) -> Result<Option<Cow<'a, str>>, Rejection> {
        Ok(self.value(slot, found, raw)?.and_then(text_of).filter(|t| !t.is_empty()))
    }

    fn timestamp<'a>(
        &'a self,
        slot: usize,
        found: &mut Extracted<'a, N>,
        raw: &RawMessage<'a>,
    ) -> Result<EventTime, Rejection> {
        let format = match self.scalars.get(slot) {
            Some(Some(source)) => source.format.unwrap_or(TimestampFormat::Rfc3339OrEpochMillis),
            _ => TimestampFormat::Rfc3339OrEpochMillis,
        };
        match self.value(slot, found, raw)? {
            None => Err(Rejection::missing_mapped("timestamp", &self.describe(slot))),
            Some(value) => event_time(format, &value).ok_or_else(|| {
                let shown = match &value {
                    Found::Text(t) => format!("{t:?}"),
                    Found::Int(i) => i.to_string(),
                    Found::Float(f) => f.to_string(),
                    other => other.kind().to_string(),
                };
                Rejection::new(
                    RejectReason::InvalidTimestamp,
                    format!("`timestamp` ({}) is {shown}, not {}", self.describe(slot), format_name(format)),
                )
            }),
        }
    }

    fn describe(&self, slot: usize) -> String {
        match self.scalars.get(slot) {
            Some(Some(source)) => source.describe(),
            _ => "not mapped".into(),
        }
    }

    fn wrong_type(&self, slot: usize, name: &str, expected: &str) -> Rejection {
        Rejection::new(RejectReason::WrongType, format!("`{name}` ({}) is not {expected}", self.describe(slot)))
    }

    /// A list field's items as text (rankers, teams); `None` when the list is absent.
    fn list<'a>(&self, list: usize, found: &mut Extracted<'a, N>) -> Option<Vec<Cow<'a, str>>> {
        self.lists.get(list)?.as_ref()?;
        if !found.lists_seen.get(list).copied().unwrap_or(false) {
            return None;
        }
        let items = std::mem::take(found.lists.get_mut(list)?);
        Some(items.into_iter().filter_map(text_of).collect())
    }
}

/// A value as text: a string, or an integer's decimal text.
fn text_of(value: Found<'_>) -> Option<Cow<'_, str>> {
    match value {
        Found::Text(t) => Some(t),
        Found::Int(i) => Some(Cow::Owned(i.to_string())),
        _ => None,
    }
}

fn utf8<'a>(bytes: &'a [u8], source: &FieldSource) -> Result<&'a str, Rejection> {
    std::str::from_utf8(bytes)
        .map_err(|_| Rejection::new(RejectReason::WrongType, format!("{} is not UTF-8 text", source.describe())))
}

fn format_name(format: TimestampFormat) -> &'static str {
    match format {
        TimestampFormat::Rfc3339 => "an RFC 3339 timestamp",
        TimestampFormat::EpochSeconds => "seconds since the epoch",
        TimestampFormat::EpochMillis => "milliseconds since the epoch",
        TimestampFormat::EpochMicros => "microseconds since the epoch",
        TimestampFormat::Rfc3339OrEpochMillis => "an RFC 3339 timestamp or integer milliseconds",
    }
}

/// A timestamp in its declared format, in milliseconds; `None` if it is not in that format or
/// out of range. Integers may come as decimal text (Protobuf's JSON form of int64, BigQuery
/// exports); sub-millisecond digits are truncated toward negative infinity, as RFC 3339 text is.
fn event_time(format: TimestampFormat, value: &Found<'_>) -> Option<EventTime> {
    let integer = |value: &Found<'_>| -> Option<i128> {
        match value {
            Found::Int(i) => Some(*i),
            Found::Text(t)
                if !t.is_empty() && t.bytes().enumerate().all(|(i, b)| b.is_ascii_digit() || (i == 0 && b == b'-')) =>
            {
                t.parse().ok()
            }
            _ => None,
        }
    };
    let ms = match format {
        TimestampFormat::Rfc3339 => match value {
            Found::Text(t) => i128::from(parse_rfc3339_ms(t)?),
            _ => return None,
        },
        TimestampFormat::Rfc3339OrEpochMillis => match value {
            Found::Text(t) => i128::from(parse_rfc3339_ms(t)?),
            Found::Int(i) => *i,
            _ => return None,
        },
        TimestampFormat::EpochMillis => integer(value)?,
        TimestampFormat::EpochMicros => integer(value)?.div_euclid(1000),
        TimestampFormat::EpochSeconds => match (integer(value), value) {
            (Some(s), _) => s.checked_mul(1000)?,
            (None, Found::Float(f)) => seconds_to_ms(*f)?,
            (None, Found::Text(t)) => seconds_to_ms(t.parse::<f64>().ok()?)?,
            _ => return None,
        },
    };
    i64::try_from(ms).ok()
}

fn seconds_to_ms(seconds: f64) -> Option<i128> {
    let ms = (seconds * 1000.0).floor();
    (ms.is_finite() && ms.abs() < 9.0e15).then_some(ms as i128)
}

/// `[mapping.impressions]`, compiled, with its dimensions' names (in the order of
/// [`Dimensions::Mapped`]'s values).
#[derive(Debug, Clone)]
pub struct MappedImpressions(Compiled<IMPRESSION_SCALARS>, Vec<String>);

impl MappedImpressions {
    pub fn new(m: &ImpressionMapping) -> Self {
        MappedImpressions(Compiled::new(m.scalars(), m.lists()), m.dimensions.keys().cloned().collect())
    }

    /// The names of `[mapping.impressions.dimensions]`, in the order of [`Dimensions::Mapped`].
    pub fn dimension_names(&self) -> &[String] {
        &self.1
    }

    /// Whether a field is read from the message's key or a header.
    pub fn reads_envelope(&self) -> bool {
        self.0.reads_envelope()
    }

    /// Decodes an impression from its body and envelope; result ids go to `results`.
    pub(super) fn decode<'a, S: ResultSink<'a>>(
        &'a self,
        body: Body<'a>,
        raw: &RawMessage<'a>,
        results: &mut S,
    ) -> Result<Impression<'a>, Rejection> {
        let c = &self.0;
        results.clear();
        let mut found = Extracted::default();
        c.extract(body, results, &mut found)?;
        let query_id = c.id(0, &mut found, raw)?;
        let timestamp = c.timestamp(1, &mut found, raw)?;
        if !found.lists_seen.get(RESULTS).copied().unwrap_or(false) {
            let at = c.lists.first().and_then(Option::as_ref).map(FieldSource::describe).unwrap_or_default();
            return Err(Rejection::missing_mapped("results", &at));
        }
        let experiment = c.label(2, &mut found, raw)?;
        let variant = c.label(3, &mut found, raw)?;
        let rankers = c.list(INTERLEAVING, &mut found);
        let teams = c.list(TEAMS, &mut found);
        let interleaving = interleaving_of(rankers, teams, results.len(), ["interleaving", "teams"])?;
        let variant = match &interleaving {
            Some(il) => Cow::Owned(il.rankers.join(RANKER_SEPARATOR)),
            None => variant.unwrap_or(Cow::Borrowed(ABSENT_GROUP)),
        };
        Ok(Impression {
            query_id,
            timestamp,
            experiment: experiment.unwrap_or(Cow::Borrowed(ABSENT_GROUP)),
            variant,
            client_id: c.context(4, &mut found, raw)?,
            session_id: c.context(5, &mut found, raw)?,
            query: c.context(6, &mut found, raw)?,
            segment: c.context(7, &mut found, raw)?,
            dimensions: match c.scalars.get(8) {
                Some(Some(_)) => {
                    let mut values: [Option<Cow<'a, str>>; MAX_DIMENSIONS] = Default::default();
                    for (i, value) in values.iter_mut().enumerate() {
                        *value = c.context(8 + i, &mut found, raw)?;
                    }
                    Dimensions::Mapped(values)
                }
                _ => Dimensions::Absent,
            },
            interleaving,
        })
    }
}

/// `[mapping.engagements]`, compiled.
#[derive(Debug, Clone)]
pub struct MappedEngagements {
    fields: Compiled<6>,
    /// `actions`: the user's event names to rankpulse's actions; empty, names pass as they are.
    actions: HashMap<Box<str>, Box<str>, foldhash::fast::RandomState>,
}

impl MappedEngagements {
    pub fn new(m: &EngagementMapping) -> Self {
        MappedEngagements {
            fields: Compiled::new(m.scalars(), [("results", None), ("interleaving", None), ("teams", None)]),
            actions: m.actions.iter().map(|(k, v)| (k.as_str().into(), v.as_str().into())).collect(),
        }
    }

    /// Whether a field is read from the message's key or a header.
    pub fn reads_envelope(&self) -> bool {
        self.fields.reads_envelope()
    }

    pub(super) fn decode<'a>(&'a self, body: Body<'a>, raw: &RawMessage<'a>) -> Result<Engagement<'a>, Rejection> {
        let c = &self.fields;
        let mut found = Extracted::default();
        c.extract(body, &mut NoResults, &mut found)?;
        // The name first: an event the mapping does not list (a page view) is not an
        // engagement, whatever fields it lacks.
        let action = match c.label(3, &mut found, raw)? {
            None => Cow::Borrowed(super::json::DEFAULT_ACTION),
            Some(name) if self.actions.is_empty() => name,
            Some(name) => match self.actions.get(name.as_ref()) {
                Some(action) => Cow::Borrowed(&**action),
                None => {
                    return Err(Rejection::new(
                        RejectReason::UnmappedAction,
                        format!("event name {name:?} ({}) is not in mapping.engagements.actions", c.describe(3)),
                    ))
                }
            },
        };
        let query_id = c.id(0, &mut found, raw)?;
        let timestamp = c.timestamp(1, &mut found, raw)?;
        let doc_id = c.id(2, &mut found, raw)?;
        let event_id = c.context(4, &mut found, raw)?;
        let position = match c.value(5, &mut found, raw)? {
            None => None,
            Some(Found::Int(i)) => Some(i64::try_from(i).map_err(|_| c.wrong_type(5, "position", "an integer"))?),
            Some(_) => return Err(c.wrong_type(5, "position", "an integer")),
        };
        Ok(Engagement { query_id, timestamp, doc_id, action, event_id, position })
    }
}

/// An engagement has no results: a sink that is never written.
struct NoResults;
impl ResultSink<'_> for NoResults {
    fn clear(&mut self) {}
    fn len(&self) -> usize {
        0
    }
    fn push(&mut self, _: Cow<'_, str>) {}
}

/// The mapping the contract's own field names make, for Avro and Protobuf records without a
/// `[mapping.impressions]`: the native shape, in another encoding.
pub fn native_impression_mapping() -> ImpressionMapping {
    ImpressionMapping {
        query_id: native("/query_id"),
        timestamp: native_timestamp(),
        results: native("/results"),
        experiment: Some(native("/experiment")),
        variant: Some(native("/variant")),
        client_id: Some(native("/client_id")),
        session_id: Some(native("/session_id")),
        query: Some(native("/query")),
        segment: Some(native("/segment")),
        interleaving: Some(native("/interleaving")),
        teams: Some(native("/teams")),
        dimensions: Default::default(),
    }
}

/// [`native_impression_mapping`] reading the fields of its `dimensions` record (a map, or a
/// record of string fields) that `ab.dimensions` names: an Avro or Protobuf record of the
/// contract's shape carries them as the native JSON's object.
pub fn native_impression_mapping_with(dimensions: &[String]) -> ImpressionMapping {
    let mut mapping = native_impression_mapping();
    for name in dimensions.iter().filter(|d| !["segment", "query"].contains(&d.as_str())) {
        // A JSON Pointer's escapes: `~` as `~0`, `/` as `~1`.
        let token = name.replace('~', "~0").replace('/', "~1");
        if let Ok(source) = FieldSource::path(&format!("/dimensions/{token}")) {
            mapping.dimensions.insert(name.clone(), source);
        }
    }
    mapping
}

/// As [`native_impression_mapping`], for engagements.
pub fn native_engagement_mapping() -> EngagementMapping {
    EngagementMapping {
        query_id: native("/query_id"),
        timestamp: native_timestamp(),
        doc_id: native("/doc_id"),
        action: Some(native("/action")),
        event_id: Some(native("/event_id")),
        position: Some(native("/position")),
        actions: Default::default(),
    }
}

/// A field of the contract's shape, by its name.
fn native(path: &str) -> FieldSource {
    FieldSource::path(path).unwrap_or_else(|_| unreachable_path())
}

/// The contract's timestamp: RFC 3339 text or integer milliseconds.
fn native_timestamp() -> FieldSource {
    FieldSource { format: Some(TimestampFormat::Rfc3339OrEpochMillis), ..native("/timestamp") }
}

/// The literal paths above parse; this is never called (a constant, not a `panic!`).
fn unreachable_path() -> FieldSource {
    FieldSource { from: SourceOf::Value(String::new()), default: None, format: None }
}

#[cfg(test)]
mod tests;
