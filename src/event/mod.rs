//! Event decoding: a message's bytes to a borrowed impression or engagement, or a reject reason.
//!
//! Decoding is zero-copy on the hot path: strings borrow from the message unless they contain
//! escapes, and result ids are hashed straight into a caller-owned buffer, so a well-formed event
//! costs no heap allocation. Ids are identified by 128-bit (query) and 64-bit (document) xxh3
//! hashes from here on ([`crate::ids`]); the join never needs the text back. Both input formats
//! decode into the same [`Impression`] and [`Engagement`] with the same reject reasons, so
//! nothing downstream knows which format a message was in.
//!
//! | file | does |
//! |---|---|
//! | `mod.rs` | the decoded types and their vocabulary (input kinds, reject reasons), the entry points of the native format |
//! | `decoders.rs` | [`Decoders`]: the format and mapping of each input (`kafka.impressions_format`, `kafka.engagements_format`, `[mapping.*]`), the one way in for the engine and replay |
//! | `scan.rs` | the native format's fast path: a strict one-pass scanner for the common shape, declining anything else |
//! | `json.rs` | the native format through serde_json (the reference, and the fallback when the scanner declines), and the serde pieces UBI shares |
//! | `ubi.rs` | OpenSearch UBI query and event documents |
//! | `mapped/` | events of the user's own shape through `[mapping.*]`: the mapping's paths as one tree, a scanner and a serde walk over it, the fields' types and defaults |
//! | `wire.rs` | Avro and Protobuf: Confluent's framing (magic byte, schema id, message indexes), decoding by apache-avro and prost-reflect |
//! | `avro_value.rs` | a decoded Avro value as a serde deserializer, for the mapping's walk |
//! | `excerpt.rs` | [`excerpt`]: a short, escaped quote of a message, for rejections and their log lines |
//!
//! Every message is untrusted input: each file here is under the no-panic rule (crate
//! documentation, "Hostile input"), and `fuzz/` fuzzes both formats and the scanner against
//! serde_json through [`crate::fuzzing`].
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]

use std::borrow::Cow;

use crate::ids::{doc_key, DocKey, EngagementId};
use crate::interleaving::{MAX_RANKERS, RANKER_SEPARATOR};
use crate::time::EventTime;

mod avro_value;
mod decoders;
mod excerpt;
mod json;
pub mod mapped;
mod scan;
pub mod ubi;
mod wire;

pub use decoders::{impression_mapping, AttributeKeys, Decoders};
pub use excerpt::excerpt;

/// A message as it arrived: its body, and the envelope a mapping may read fields from.
#[derive(Debug, Clone, Copy, Default)]
pub struct RawMessage<'a> {
    /// The message's value.
    pub payload: &'a [u8],
    /// The message's key (`{ key = true }` in a mapping); `None` in replay's files.
    pub key: Option<&'a [u8]>,
    /// The message's headers, name and value (`{ header = "..." }` in a mapping); collected
    /// only when a mapping reads one ([`Decoders::reads_envelope`]).
    pub headers: &'a [(&'a str, &'a [u8])],
}

impl<'a> RawMessage<'a> {
    /// A message that is only a body: a replay line, a test's event.
    pub fn body(payload: &'a [u8]) -> Self {
        RawMessage { payload, key: None, headers: &[] }
    }
}

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
    /// An interleaved impression whose `interleaving` and `teams` do not fit together or with
    /// its results (see [`Interleaving`]).
    InvalidInterleaving,
    /// An engagement whose event name `mapping.engagements.actions` does not list (a page view
    /// on the clicks topic, say): counted, not silently dropped.
    UnmappedAction,
    /// An Avro or Protobuf message whose schema id the registry does not know (or a local
    /// schema that does not load).
    UnknownSchema,
    /// An Avro or Protobuf message whose schema could not be fetched: the registry is
    /// unreachable and the id is not cached yet.
    SchemaUnavailable,
    /// An Avro or Protobuf message that does not decode: not in Confluent's wire format (a
    /// wrong magic byte), truncated, or not a value of its schema.
    Undecodable,
}

impl RejectReason {
    /// The reasons of snapshot format 5, whose counts sit in the snapshot's body; the later
    /// ones travel in its trailing extension (see `engine::telemetry::RejectCounts`).
    pub const LEGACY: usize = 12;
    pub const ALL: [RejectReason; 16] = [
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
        RejectReason::InvalidInterleaving,
        RejectReason::UnmappedAction,
        RejectReason::UnknownSchema,
        RejectReason::SchemaUnavailable,
        RejectReason::Undecodable,
    ];

    /// A message that is not meant for rankpulse rather than a broken one: an event name the
    /// mapping does not list (a page view on a shared analytics topic). Counted under its own
    /// reason, but left out of the rejected share that `RankpulseRejectedEvents` alerts on and
    /// of replay's `--max-rejects` budget, where a topic's other traffic would fail a sound run.
    pub fn is_foreign(self) -> bool {
        self == RejectReason::UnmappedAction
    }

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
            RejectReason::InvalidInterleaving => "invalid_interleaving",
            RejectReason::UnmappedAction => "unmapped_action",
            RejectReason::UnknownSchema => "unknown_schema",
            RejectReason::SchemaUnavailable => "schema_unavailable",
            RejectReason::Undecodable => "undecodable",
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
    /// What is counted: a small fixed set, so it can be a metric label.
    pub reason: RejectReason,
    /// What is logged: the field and value at fault, for whoever fixes the producer.
    pub detail: String,
}

impl Rejection {
    pub(crate) fn new(reason: RejectReason, detail: impl Into<String>) -> Self {
        Rejection { reason, detail: detail.into() }
    }
    pub(crate) fn missing(field: &str) -> Self {
        Rejection::new(RejectReason::MissingField, format!("missing field `{field}`"))
    }
    /// A mapped field that is absent, saying where it was looked for.
    pub(crate) fn missing_mapped(field: &str, at: &str) -> Self {
        Rejection::new(RejectReason::MissingField, format!("missing field `{field}` (at {at})"))
    }
}

/// A decoded impression. Its result ids are in the `results` buffer passed to
/// [`decode_impression`], as [`DocKey`]s in rank order.
#[derive(Debug, PartialEq, Eq)]
pub struct Impression<'a> {
    /// Joins the impression with its engagements (hashed to a [`crate::ids::QueryKey`]).
    pub query_id: Cow<'a, str>,
    /// Event time: orders the join and places the impression in its windows.
    pub timestamp: EventTime,
    /// `"none"` when absent, as the contract says.
    pub experiment: Cow<'a, str>,
    /// The arm of `experiment`; `"none"` when absent.
    pub variant: Cow<'a, str>,
    /// The user (or browser) that issued the query, optional. With `statistics.unit = "client_id"`
    /// the A/B statistics treat all impressions of one client as one correlated cluster.
    pub client_id: Option<Cow<'a, str>>,
    /// The search session, optional; the cluster with `statistics.unit = "session_id"`.
    pub session_id: Option<Cow<'a, str>>,
    /// The query's text, optional (`query`; UBI's `user_query`): what judgment lists are keyed
    /// by with `judgments.key = "query"`.
    pub query: Option<Cow<'a, str>>,
    /// A segment of the traffic (a device, a page type), optional: the click log keeps its
    /// counts, and so its position-bias estimates, per segment.
    pub segment: Option<Cow<'a, str>>,
    /// The fields `ab.dimensions` may name beyond `segment` and `query`.
    pub dimensions: Dimensions<'a>,
    /// The ranker behind each result, when the list was interleaved; its `variant` is then the
    /// rankers' names joined by [`RANKER_SEPARATOR`].
    pub interleaving: Option<Interleaving<'a>>,
}

/// An impression's dimension fields, as its format carries them.
#[derive(Debug, Default, PartialEq, Eq)]
pub enum Dimensions<'a> {
    /// None: absent, not an object, or a format without them (UBI).
    #[default]
    Absent,
    /// A native impression's `dimensions` object, as its text in the message: the values
    /// `ab.dimensions` names are read from it by [`dimension_value`].
    Native(&'a str),
    /// A mapped impression's `[mapping.impressions.dimensions]`, in the mapping's name order.
    Mapped([Option<Cow<'a, str>>; crate::config::MAX_DIMENSIONS]),
}

/// The value of field `name` in a native impression's `dimensions` object (its text, as
/// [`Impression::dimensions`] holds it): a string as it is, a number or boolean as its JSON
/// text; `None` when the field is absent, null or another type. Borrowed unless the object
/// has escapes, which serde_json then reads.
pub fn dimension_value<'a>(dimensions: &'a str, name: &str) -> Option<Cow<'a, str>> {
    let mut found = None;
    let mut c = scan::Cursor::new(dimensions);
    let walked = c.object(|c, key| {
        let value = match c.peek()? {
            b'"' => Some(c.string()?),
            b'{' | b'[' | b'n' => {
                c.skip_value(0)?;
                None
            }
            _ => {
                let start = c.position();
                c.skip_value(0)?;
                dimensions.get(start..c.position())
            }
        };
        if key == name {
            found = value.map(Cow::Borrowed);
        }
        Some(())
    });
    if walked.is_some() {
        return found;
    }
    // Escapes: keys and strings decoded by serde_json, the other values' text as above.
    let fields: std::collections::HashMap<String, &serde_json::value::RawValue> =
        serde_json::from_str(dimensions).ok()?;
    let raw: &'a serde_json::value::RawValue = fields.get(name)?;
    let raw = raw.get();
    match raw.as_bytes().first()? {
        b'"' => serde_json::from_str::<String>(raw).ok().map(Cow::Owned),
        b'{' | b'[' | b'n' => None,
        _ => Some(Cow::Borrowed(raw)),
    }
}

/// Which ranker contributed each result of an interleaved impression (team-draft
/// interleaving or multileaving): the native `interleaving` and `teams` fields, or UBI's hits
/// marked with their `_search_configuration_id`.
#[derive(Debug, PartialEq, Eq)]
pub struct Interleaving<'a> {
    /// The rankers, in the order that numbers the teams: the first is the baseline.
    pub rankers: Vec<Cow<'a, str>>,
    /// Per result in rank order, the index of its ranker in `rankers`.
    pub teams: Vec<u8>,
}

/// Checks an impression's interleaving fields against each other and its `results` results:
/// both or neither present; 2 to [`MAX_RANKERS`] distinct, non-empty rankers without the
/// separator in their names; one known team per result; at least one result. `fields` names
/// the two fields as the format calls them, for the rejection.
pub(crate) fn interleaving_of<'a>(
    rankers: Option<Vec<Cow<'a, str>>>,
    teams: Option<Vec<Cow<'a, str>>>,
    results: usize,
    fields: [&str; 2],
) -> Result<Option<Interleaving<'a>>, Rejection> {
    let [rankers_field, teams_field] = fields;
    let bad = |detail: String| Err(Rejection::new(RejectReason::InvalidInterleaving, detail));
    let (rankers, teams) = match (rankers, teams) {
        (None, None) => return Ok(None),
        (Some(_), None) => return bad(format!("`{rankers_field}` without `{teams_field}`")),
        (None, Some(_)) => return bad(format!("`{teams_field}` without `{rankers_field}`")),
        (Some(rankers), Some(teams)) => (rankers, teams),
    };
    if rankers.len() < 2 || rankers.len() > MAX_RANKERS {
        return bad(format!(
            "`{rankers_field}` names {} rankers; an interleaved list compares 2 to {MAX_RANKERS}",
            rankers.len()
        ));
    }
    for (i, name) in rankers.iter().enumerate() {
        if name.is_empty() || name.contains(RANKER_SEPARATOR) {
            return bad(format!("ranker name {name:?} is empty or contains {RANKER_SEPARATOR:?}"));
        }
        if rankers.iter().take(i).any(|r| r == name) {
            return bad(format!("ranker {name:?} is named twice in `{rankers_field}`"));
        }
    }
    if results == 0 {
        return bad("an interleaved impression without results".to_string());
    }
    if teams.len() != results {
        return bad(format!("`{teams_field}` has {} entries for {results} results", teams.len()));
    }
    let mut numbers = Vec::with_capacity(teams.len());
    for (rank, team) in (1..).zip(&teams) {
        match rankers.iter().position(|r| r == team) {
            Some(k) => numbers.push(k as u8),
            None => return bad(format!("team {team:?} at rank {rank} is not in `{rankers_field}`")),
        }
    }
    Ok(Some(Interleaving { rankers, teams: numbers }))
}

/// A decoded engagement.
#[derive(Debug, PartialEq, Eq)]
pub struct Engagement<'a> {
    /// The impression it is attributed to.
    pub query_id: Cow<'a, str>,
    /// Event time: must fall within the impression's attribution window.
    pub timestamp: EventTime,
    /// The result engaged with, looked up in the impression's result list.
    pub doc_id: Cow<'a, str>,
    /// `"click"` when absent.
    pub action: Cow<'a, str>,
    /// Identity for de-duplication of redelivered events.
    pub event_id: Option<Cow<'a, str>>,
    /// Informational only; never used for attribution (the result list is the truth).
    pub position: Option<i64>,
}

impl Engagement<'_> {
    /// The de-duplication identity of an engagement: its `event_id` when it has one, else what
    /// makes a redelivered copy identical (query, document, action, timestamp). The two forms
    /// are hashed with different seeds so they never collide with each other.
    pub fn identity(&self) -> EngagementId {
        use xxhash_rust::xxh3::{xxh3_128_with_seed, Xxh3};
        match &self.event_id {
            Some(id) => xxh3_128_with_seed(id.as_bytes(), 1),
            None => {
                let mut h = Xxh3::with_seed(2);
                for part in [self.query_id.as_bytes(), self.doc_id.as_bytes(), self.action.as_bytes()] {
                    h.update(&(part.len() as u64).to_le_bytes());
                    h.update(part);
                }
                h.update(&self.timestamp.to_le_bytes());
                h.digest128()
            }
        }
    }
}

/// The experiment and variant of an impression that names none, as the contract says.
pub(crate) const ABSENT_GROUP: &str = "none";

/// Where a decoder puts an impression's result ids, in rank order: hashed into the engine's
/// reused buffer on the hot path, or kept as text where the ids themselves are written out
/// (`replay --trec-out`). One trait, so both are filled by the same decoding code.
trait ResultSink<'a> {
    /// Forgets the ids of an earlier list, which a repeated or preferred field replaces.
    fn clear(&mut self);
    /// The ids so far: what an interleaved impression's teams must match.
    fn len(&self) -> usize;
    /// The next id in rank order.
    fn push(&mut self, id: Cow<'a, str>);
    /// [`ResultSink::push`] of an id borrowed from the message, the scanner's only case: the
    /// hashing sink then hashes the text straight away, without a `Cow` to build and drop per
    /// result (measured: 2.5% of a replay's instructions).
    fn push_borrowed(&mut self, id: &'a str) {
        self.push(Cow::Borrowed(id));
    }
    /// [`ResultSink::push`] of an id in a temporary (a decoded Avro or Protobuf record): the
    /// hashing sink hashes it without the copy.
    fn push_copied(&mut self, id: &str) {
        self.push(Cow::Owned(id.to_owned()));
    }
}

impl ResultSink<'_> for Vec<DocKey> {
    fn clear(&mut self) {
        Vec::clear(self);
    }
    fn len(&self) -> usize {
        Vec::len(self)
    }
    fn push(&mut self, id: Cow<'_, str>) {
        Vec::push(self, doc_key(&id));
    }
    #[inline]
    fn push_borrowed(&mut self, id: &str) {
        Vec::push(self, doc_key(id));
    }
    fn push_copied(&mut self, id: &str) {
        Vec::push(self, doc_key(id));
    }
}

impl<'a> ResultSink<'a> for Vec<Cow<'a, str>> {
    fn clear(&mut self) {
        Vec::clear(self);
    }
    fn len(&self) -> usize {
        Vec::len(self)
    }
    fn push(&mut self, id: Cow<'a, str>) {
        Vec::push(self, id);
    }
}

/// Result ids hashed into keys, as the engine keys them, and kept as text too, back to back
/// in one buffer: what the click log names its pairs by, without a string per result.
pub struct NamedResults<'b> {
    /// The ids' keys in rank order.
    pub keys: &'b mut Vec<DocKey>,
    /// The ids' text, back to back.
    pub names: &'b mut String,
    /// Where each id's text ends in `names`.
    pub ends: &'b mut Vec<usize>,
    /// Where this message's ids start in `names` and `ends`: a repeated field's list replaces
    /// only this message's.
    start: (usize, usize),
}

impl<'b> NamedResults<'b> {
    pub fn new(keys: &'b mut Vec<DocKey>, names: &'b mut String, ends: &'b mut Vec<usize>) -> Self {
        let start = (names.len(), ends.len());
        keys.clear();
        NamedResults { keys, names, ends, start }
    }

    fn push_str(&mut self, id: &str) {
        self.keys.push(doc_key(id));
        self.names.push_str(id);
        self.ends.push(self.names.len());
    }
}

impl ResultSink<'_> for NamedResults<'_> {
    fn clear(&mut self) {
        self.keys.clear();
        self.names.truncate(self.start.0);
        self.ends.truncate(self.start.1);
    }
    fn len(&self) -> usize {
        self.keys.len()
    }
    fn push(&mut self, id: Cow<'_, str>) {
        self.push_str(&id);
    }
    fn push_borrowed(&mut self, id: &str) {
        self.push_str(id);
    }
    fn push_copied(&mut self, id: &str) {
        self.push_str(id);
    }
}

/// Decodes an impression; result ids are hashed into `results` (cleared first), in rank order.
pub fn decode_impression<'a>(payload: &'a [u8], results: &mut Vec<DocKey>) -> Result<Impression<'a>, Rejection> {
    impression_into(payload, results)
}

/// [`decode_impression`] into any sink: the scanner first, serde_json where it declines.
fn impression_into<'a, S: ResultSink<'a>>(payload: &'a [u8], results: &mut S) -> Result<Impression<'a>, Rejection> {
    let text = json::object_text(payload)?;
    results.clear();
    let fields = match scan::impression(text, results) {
        Some(fields) => fields,
        None => {
            results.clear();
            json::impression_fields(text, results)?
        }
    };
    json::finish_impression(fields, results.len())
}

/// Decodes an engagement.
pub fn decode_engagement(payload: &[u8]) -> Result<Engagement<'_>, Rejection> {
    let text = json::object_text(payload)?;
    let fields = match scan::engagement(text) {
        Some(fields) => fields,
        None => json::engagement_fields(text)?,
    };
    json::finish_engagement(fields)
}

/// One decoder of the native format alone, for the differential check of the scanner against
/// serde_json (its unit tests and the `scan_vs_serde` fuzz target, through [`crate::fuzzing`]).
#[derive(Debug, Clone, Copy)]
pub enum Path {
    /// The scanner, `None` where it declines.
    ScanOnly,
    /// serde_json alone: always answers.
    Serde,
}

/// [`decode_impression`] through one decoder only: `None` where the scanner declines. Where the
/// scanner answers, the answer must be serde_json's (see `scan.rs`).
pub fn decode_impression_with<'a>(
    payload: &'a [u8],
    results: &mut Vec<DocKey>,
    path: Path,
) -> Option<Result<Impression<'a>, Rejection>> {
    results.clear();
    let fields = match (json::object_text(payload), path) {
        (Err(e), Path::Serde) => return Some(Err(e)),
        (Err(_), Path::ScanOnly) => return None,
        (Ok(text), Path::ScanOnly) => scan::impression(text, results)?,
        (Ok(text), Path::Serde) => match json::impression_fields(text, results) {
            Ok(fields) => fields,
            Err(e) => return Some(Err(e)),
        },
    };
    Some(json::finish_impression(fields, results.len()))
}

/// [`decode_engagement`] through one decoder only, as [`decode_impression_with`].
pub fn decode_engagement_with(payload: &[u8], path: Path) -> Option<Result<Engagement<'_>, Rejection>> {
    let fields = match (json::object_text(payload), path) {
        (Err(e), Path::Serde) => return Some(Err(e)),
        (Err(_), Path::ScanOnly) => return None,
        (Ok(text), Path::ScanOnly) => scan::engagement(text)?,
        (Ok(text), Path::Serde) => match json::engagement_fields(text) {
            Ok(fields) => fields,
            Err(e) => return Some(Err(e)),
        },
    };
    Some(json::finish_engagement(fields))
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
    fn the_query_text_is_optional_context() {
        let mut buf = Vec::new();
        let with = decode_impression(br#"{"query_id":"q1","timestamp":1,"results":[],"query":" Red Shoes"}"#, &mut buf);
        assert_eq!(with.unwrap().query.as_deref(), Some(" Red Shoes"), "as written; keying normalizes it");
        let bare = decode_impression(br#"{"query_id":"q1","timestamp":1,"results":[]}"#, &mut buf).unwrap();
        assert_eq!(bare.query, None);
        let numeric = decode_impression(br#"{"query_id":"q1","timestamp":1,"results":[],"query":42}"#, &mut buf);
        assert_eq!(numeric.unwrap().query.as_deref(), Some("42"));
        for odd in [r#""query":"""#, r#""query":null"#, r#""query":{"text":"x"}"#, r#""query":[1]"#] {
            let payload = format!(r#"{{"query_id":"q1","timestamp":1,"results":[],{odd}}}"#);
            assert_eq!(
                decode_impression(payload.as_bytes(), &mut buf).unwrap().query,
                None,
                "{odd}: absent, not rejected"
            );
        }
    }

    #[test]
    fn interleaved_impressions_carry_their_teams_and_name_their_group() {
        let mut buf = Vec::new();
        let json = br#"{"query_id":"q","timestamp":1,"results":["a","b","c"],"experiment":"duel","variant":"x",
            "interleaving":["base","cand"],"teams":["cand","base","cand"]}"#;
        let i = decode_impression(json, &mut buf).unwrap();
        let il = i.interleaving.as_ref().unwrap();
        assert_eq!(
            (il.rankers.as_slice(), il.teams.as_slice()),
            (&[Cow::from("base"), "cand".into()][..], &[1, 0, 1][..])
        );
        assert_eq!(
            (i.experiment.as_ref(), i.variant.as_ref()),
            ("duel", "base vs cand"),
            "the rankers are the variant"
        );
        // Both decoders agree (the scanner leaves interleaved impressions to serde_json).
        assert!(decode_impression_with(json, &mut buf, Path::ScanOnly).is_none());
        assert_eq!(decode_impression_with(json, &mut buf, Path::Serde).unwrap().unwrap(), i);
        let plain = decode_impression(br#"{"query_id":"q","timestamp":1,"results":["a"],"teams":null}"#, &mut buf);
        assert_eq!(plain.unwrap().interleaving, None);
    }

    #[test]
    fn interleaving_faults_are_counted_rejections() {
        let base = r#"{"query_id":"q","timestamp":1,"results":["a","b"],"#;
        let cases = [
            (
                r#""interleaving":["x","y"],"teams":["x"]}"#,
                RejectReason::InvalidInterleaving,
                "1 entries for 2 results",
            ),
            (r#""interleaving":["x","y"],"teams":["x","z"]}"#, RejectReason::InvalidInterleaving, "\"z\" at rank 2"),
            (r#""interleaving":["x"],"teams":["x","x"]}"#, RejectReason::InvalidInterleaving, "names 1 rankers"),
            (r#""interleaving":["x","x"],"teams":["x","x"]}"#, RejectReason::InvalidInterleaving, "named twice"),
            (r#""interleaving":["x",""],"teams":["x","x"]}"#, RejectReason::InvalidInterleaving, "empty"),
            (r#""interleaving":["a vs b","y"],"teams":["y","y"]}"#, RejectReason::InvalidInterleaving, "contains"),
            (r#""interleaving":["x","y"]}"#, RejectReason::InvalidInterleaving, "without `teams`"),
            (r#""teams":["x","y"]}"#, RejectReason::InvalidInterleaving, "without `interleaving`"),
            (
                r#""interleaving":["a","b","c","d","e","f","g","h"],"teams":["a","b"]}"#,
                RejectReason::InvalidInterleaving,
                "2 to 7",
            ),
            (r#""interleaving":["x","y"],"teams":"x"}"#, RejectReason::WrongType, "expected a sequence"),
            (r#""interleaving":["x","y"],"teams":["x",1]}"#, RejectReason::WrongType, "expected a string"),
        ];
        for (tail, reason, detail) in cases {
            let json = format!("{base}{tail}");
            let err = decode_impression(json.as_bytes(), &mut Vec::new()).unwrap_err();
            assert_eq!(err.reason, reason, "{json}: {}", err.detail);
            assert!(err.detail.contains(detail), "{json}: {}", err.detail);
        }
        let empty = br#"{"query_id":"q","timestamp":1,"results":[],"interleaving":["x","y"],"teams":[]}"#;
        let err = decode_impression(empty, &mut Vec::new()).unwrap_err();
        assert_eq!(
            (err.reason, err.detail.as_str()),
            (RejectReason::InvalidInterleaving, "an interleaved impression without results")
        );
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
    fn rejections_say_where_and_what_they_found() {
        let detail = |json: &[u8]| decode_impression(json, &mut Vec::new()).unwrap_err().detail;
        // A truncated line, with or without its newline: the column within it, never serde's
        // "line 2" (the position after the newline).
        let truncated = br#"{"query_id":"q4","timestamp":1,"results":["a","b""#;
        let at_end = format!("EOF while parsing a list at column {}, the end of the message", truncated.len());
        assert_eq!(detail(truncated), at_end);
        assert_eq!(
            detail(&[&truncated[..], b"\n"].concat()),
            format!("{} at column {}, the end of the message", "EOF while parsing a list", truncated.len() + 1)
        );
        assert_eq!(detail(br#"{"query_id":"q","timestamp":1,"results":[],}"#), "trailing comma at column 44");
        assert_eq!(
            detail(br#"{"query_id":7,"timestamp":1,"results":[]}"#),
            "invalid type: integer `7`, expected a string at column 13"
        );
        // A message over several lines: still the byte offset within the whole message.
        assert_eq!(detail(b"{\n\"query_id\": x}"), "expected value at column 15");
        assert_eq!(
            detail(b"not json at all, not at all"),
            "expected a JSON object, found \"not json at all, not at …\""
        );
        assert_eq!(detail(b"  [1, 2]"), "expected a JSON object, found an array");
        assert_eq!(detail(b"\"text\""), "expected a JSON object, found a string");
        assert_eq!(detail(b"{\"query_id\":\"q\xff\"}"), "not UTF-8 at column 15");
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
