//! The decoder of each input: `kafka.impressions_format`, `kafka.engagements_format` and
//! `[mapping.*]` choose rankpulse's own events, OpenSearch UBI documents, or any JSON, Avro or
//! Protobuf event through a field mapping, per topic. Everything that decodes a
//! message (the engine, replay's readers, its TREC writer) goes through here, so a format
//! choice can never apply to one of them and not to another.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]

use std::borrow::Cow;
use std::sync::Arc;

use super::mapped::{self, Body, MappedEngagements, MappedImpressions};
use super::{decode_engagement, decode_impression, impression_into, ubi, wire, EventKind, RawMessage, ResultSink};
use super::{Engagement, Impression, Rejection};
use crate::config::{Config, ImpressionMapping, InputFormat};
use crate::ids::DocKey;
use crate::schemas::{Input, Schemas};
use crate::time::EventTime;

/// The decoder of each input, chosen by `kafka.impressions_format` and `kafka.engagements_format`
/// and `[mapping.*]`. Cheap to clone: the compiled mappings and the schema cache are shared.
#[derive(Debug, Clone)]
pub struct Decoders {
    /// How impression messages are read.
    impressions: Reader<MappedImpressions>,
    /// How engagement messages are read.
    engagements: Reader<MappedEngagements>,
    /// Where UBI query documents keep the experiment and variant.
    keys: AttributeKeys,
    /// The Avro and Protobuf schemas (registry or local files), when an input needs them.
    schemas: Option<Arc<Schemas>>,
    /// A mapping reads the message key or a header: the source hands them over.
    reads_envelope: bool,
}

/// How one input's messages are read.
#[derive(Debug, Clone)]
enum Reader<M> {
    /// The contract's JSON, by the scanner (serde_json where it declines).
    Native,
    /// OpenSearch UBI documents.
    Ubi,
    /// Any JSON, through a mapping.
    MappedJson(Arc<M>),
    /// Avro or Protobuf records through a mapping (the contract's names by default).
    MappedRecord(Arc<M>),
}

impl<M> Reader<M> {
    pub(super) fn mapping(&self) -> Option<&M> {
        match self {
            Reader::MappedJson(m) | Reader::MappedRecord(m) => Some(m),
            Reader::Native | Reader::Ubi => None,
        }
    }
}

/// The `query_attributes` keys of the experiment and the variant (`[ubi]`).
#[derive(Debug, Clone)]
pub struct AttributeKeys {
    /// `ubi.experiment_key`.
    pub experiment: Box<str>,
    /// `ubi.variant_key`.
    pub variant: Box<str>,
}

fn reader<M>(format: InputFormat, mapping: Option<M>, native: impl FnOnce() -> M) -> Reader<M> {
    match (format, mapping) {
        (InputFormat::Json, None) => Reader::Native,
        (InputFormat::Json, Some(m)) => Reader::MappedJson(Arc::new(m)),
        // Validation refuses a mapping with UBI.
        (InputFormat::Ubi, _) => Reader::Ubi,
        (InputFormat::Avro | InputFormat::Protobuf, m) => Reader::MappedRecord(Arc::new(m.unwrap_or_else(native))),
    }
}

/// The mapping impressions are read through: `[mapping.impressions]`, or for Avro and Protobuf
/// records without one the contract's own field names (with the `dimensions` fields
/// `ab.dimensions` names); `None` for native JSON and UBI.
pub fn impression_mapping(cfg: &Config) -> Option<ImpressionMapping> {
    match (cfg.kafka.impressions_format, &cfg.mapping.impressions) {
        (InputFormat::Ubi, _) | (InputFormat::Json, None) => None,
        (_, Some(m)) => Some(m.clone()),
        (InputFormat::Avro | InputFormat::Protobuf, None) => {
            Some(mapped::native_impression_mapping_with(&cfg.ab.dimensions))
        }
    }
}

impl Decoders {
    /// The names of a mapped input's dimensions, in the order of
    /// [`crate::event::Dimensions::Mapped`]'s values; empty for other inputs.
    pub fn impression_dimension_names(&self) -> &[String] {
        self.impressions.mapping().map_or(&[], MappedImpressions::dimension_names)
    }

    pub fn new(cfg: &Config) -> Self {
        let k = &cfg.kafka;
        let impressions =
            reader(k.impressions_format, impression_mapping(cfg).as_ref().map(MappedImpressions::new), || {
                MappedImpressions::new(&mapped::native_impression_mapping())
            });
        let engagements =
            reader(k.engagements_format, cfg.mapping.engagements.as_ref().map(MappedEngagements::new), || {
                MappedEngagements::new(&mapped::native_engagement_mapping())
            });
        let records = [k.impressions_format, k.engagements_format]
            .iter()
            .any(|f| matches!(f, InputFormat::Avro | InputFormat::Protobuf));
        let reads_envelope = impressions.mapping().is_some_and(|m| m.reads_envelope())
            || engagements.mapping().is_some_and(|m| m.reads_envelope());
        Decoders {
            impressions,
            engagements,
            keys: AttributeKeys {
                experiment: cfg.ubi.experiment_key.as_str().into(),
                variant: cfg.ubi.variant_key.as_str().into(),
            },
            schemas: records.then(|| Arc::new(Schemas::new(cfg))),
            reads_envelope,
        }
    }

    /// Whether a mapping reads the message key or headers: only then does the source collect
    /// them for [`RawMessage`].
    pub fn reads_envelope(&self) -> bool {
        self.reads_envelope
    }

    /// The Avro and Protobuf schemas, when an input has them: for their metrics and the
    /// registry's health.
    pub fn schemas(&self) -> Option<&Arc<Schemas>> {
        self.schemas.as_ref()
    }

    /// A record's body, decoded from Avro or Protobuf.
    fn record<'a>(&self, input: Input, payload: &[u8]) -> Result<Body<'a>, Rejection> {
        match &self.schemas {
            Some(schemas) => wire::decode(schemas, input, payload),
            // `Decoders::new` creates the schemas whenever an input is a record format.
            None => Err(Rejection::new(super::RejectReason::UnknownSchema, "no schemas are configured")),
        }
    }

    /// Decodes an impression in its configured format; result ids are hashed into `results`.
    pub fn impression<'a>(
        &'a self,
        raw: RawMessage<'a>,
        results: &mut Vec<DocKey>,
    ) -> Result<Impression<'a>, Rejection> {
        match &self.impressions {
            Reader::Native => decode_impression(raw.payload, results),
            Reader::Ubi => ubi::decode_query(raw.payload, results, &self.keys),
            _ => self.impression_into(raw, results),
        }
    }

    /// [`Decoders::impression`], handing over the result ids as text (borrowed from the message
    /// unless escaped) instead of hashes, in rank order: for output that names the results
    /// (`replay --trec-out`). The same decoding, so it accepts and rejects exactly what the
    /// engine does.
    pub fn impression_with_ids<'a>(
        &'a self,
        raw: RawMessage<'a>,
        ids: &mut Vec<Cow<'a, str>>,
    ) -> Result<Impression<'a>, Rejection> {
        self.impression_into(raw, ids)
    }

    /// [`Decoders::impression`], keeping the result ids' text beside their keys (the click
    /// log's names). The same decoding, so it accepts and rejects exactly what the engine does.
    pub fn impression_named<'a>(
        &'a self,
        raw: RawMessage<'a>,
        results: &mut super::NamedResults<'_>,
    ) -> Result<Impression<'a>, Rejection> {
        self.impression_into(raw, results)
    }

    fn impression_into<'a, S: ResultSink<'a>>(
        &'a self,
        raw: RawMessage<'a>,
        results: &mut S,
    ) -> Result<Impression<'a>, Rejection> {
        match &self.impressions {
            Reader::Native => impression_into(raw.payload, results),
            Reader::Ubi => ubi::query_into(raw.payload, results, &self.keys),
            Reader::MappedJson(m) => m.decode(Body::Json(super::json::object_text(raw.payload)?), &raw, results),
            Reader::MappedRecord(m) => m.decode(self.record(Input::Impressions, raw.payload)?, &raw, results),
        }
    }

    /// Decodes an engagement in its configured format.
    pub fn engagement<'a>(&'a self, raw: RawMessage<'a>) -> Result<Engagement<'a>, Rejection> {
        match &self.engagements {
            Reader::Native => decode_engagement(raw.payload),
            Reader::Ubi => ubi::decode_event(raw.payload),
            Reader::MappedJson(m) => m.decode(Body::Json(super::json::object_text(raw.payload)?), &raw),
            Reader::MappedRecord(m) => m.decode(self.record(Input::Engagements, raw.payload)?, &raw),
        }
    }

    /// The event time of a message that decodes, `None` for one that does not: what replay
    /// merges its two files on.
    pub fn event_time(&self, kind: EventKind, payload: &[u8], scratch: &mut Vec<DocKey>) -> Option<EventTime> {
        let raw = RawMessage::body(payload);
        match kind {
            EventKind::Impression => self.impression(raw, scratch).ok().map(|i| i.timestamp),
            EventKind::Engagement => self.engagement(raw).ok().map(|e| e.timestamp),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::ubi::tests::SPEC_QUERY;
    use super::*;

    #[test]
    fn decoders_follow_the_configured_format() {
        let mut cfg = Config::default();
        let native_impression = br#"{"query_id":"q","timestamp":7,"results":["a"]}"#;
        let native_engagement = br#"{"query_id":"q","timestamp":8,"doc_id":"a"}"#;
        let ubi_event =
            br#"{"action_name":"click","query_id":"q","timestamp":9,"event_attributes":{"object":{"object_id":"a"}}}"#;
        let json = Decoders::new(&cfg);
        let mut scratch = Vec::new();
        assert_eq!(json.event_time(EventKind::Impression, native_impression, &mut scratch), Some(7));
        assert_eq!(json.event_time(EventKind::Engagement, native_engagement, &mut scratch), Some(8));
        assert_eq!(json.event_time(EventKind::Impression, SPEC_QUERY.as_bytes(), &mut scratch), None);
        assert_eq!(json.event_time(EventKind::Engagement, ubi_event, &mut scratch), None);
        cfg.kafka.impressions_format = InputFormat::Ubi;
        cfg.kafka.engagements_format = InputFormat::Ubi;
        let ubi = Decoders::new(&cfg);
        assert_eq!(ubi.event_time(EventKind::Impression, SPEC_QUERY.as_bytes(), &mut scratch), Some(1_542_140_439_000));
        assert_eq!(ubi.event_time(EventKind::Engagement, ubi_event, &mut scratch), Some(9));
        assert_eq!(ubi.event_time(EventKind::Impression, native_impression, &mut scratch), None);
        assert_eq!(ubi.event_time(EventKind::Engagement, native_engagement, &mut scratch), None);
    }

    #[test]
    fn ids_as_text_are_the_hashed_ids() {
        let mut cfg = Config::default();
        let native = br#"{"query_id":"q","timestamp":7,"results":["a","b\u0031","a"]}"#;
        let ubi_query =
            br#"{"query_id":"q","timestamp":7,"query_response_object_ids":["x"],"query_response_hit_ids":["a",42]}"#;
        for (format, payload, expected) in [
            (InputFormat::Json, &native[..], &["a", "b1", "a"][..]),
            (InputFormat::Ubi, &ubi_query[..], &["a", "42"][..]),
        ] {
            cfg.kafka.impressions_format = format;
            let decoders = Decoders::new(&cfg);
            let (mut ids, mut hashed) = (Vec::new(), Vec::new());
            let with_ids = decoders.impression_with_ids(RawMessage::body(payload), &mut ids).unwrap();
            assert_eq!(with_ids, decoders.impression(RawMessage::body(payload), &mut hashed).unwrap(), "{format:?}");
            assert_eq!(ids, expected, "{format:?}");
            assert_eq!(hashed, expected.iter().map(|id| crate::ids::doc_key(id)).collect::<Vec<_>>(), "{format:?}");
            assert!(matches!(ids[0], Cow::Borrowed(_)), "{format:?}: unescaped ids borrow from the message");
        }
        // A message the engine rejects is rejected here too, for the same reason.
        cfg.kafka.impressions_format = InputFormat::Json;
        let empty_id = br#"{"query_id":"q","timestamp":7,"results":["a",""]}"#;
        let reason =
            Decoders::new(&cfg).impression_with_ids(RawMessage::body(empty_id), &mut Vec::new()).unwrap_err().reason;
        assert_eq!(reason, super::super::RejectReason::InvalidValue);
    }
}
