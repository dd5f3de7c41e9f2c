//! The decoder of each input: `kafka.impressions_format` and `kafka.engagements_format` choose
//! rankpulse's own events or OpenSearch UBI documents per topic. Everything that decodes a
//! message (the engine, replay's readers, its TREC writer) goes through here, so a format
//! choice can never apply to one of them and not to another.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]

use std::borrow::Cow;

use super::{decode_engagement, decode_impression, impression_into, ubi, EventKind, ResultSink};
use super::{Engagement, Impression, Rejection};
use crate::config::{Config, InputFormat};
use crate::ids::DocKey;
use crate::time::EventTime;

/// The decoder of each input, chosen by `kafka.impressions_format` and `kafka.engagements_format`.
#[derive(Debug, Clone)]
pub struct Decoders {
    /// Format of impression messages.
    impressions: InputFormat,
    /// Format of engagement messages.
    engagements: InputFormat,
    /// Where UBI query documents keep the experiment and variant.
    keys: AttributeKeys,
}

/// The `query_attributes` keys of the experiment and the variant (`[ubi]`).
#[derive(Debug, Clone)]
pub struct AttributeKeys {
    /// `ubi.experiment_key`.
    pub experiment: Box<str>,
    /// `ubi.variant_key`.
    pub variant: Box<str>,
}

impl Decoders {
    pub fn new(cfg: &Config) -> Self {
        Decoders {
            impressions: cfg.kafka.impressions_format,
            engagements: cfg.kafka.engagements_format,
            keys: AttributeKeys {
                experiment: cfg.ubi.experiment_key.as_str().into(),
                variant: cfg.ubi.variant_key.as_str().into(),
            },
        }
    }

    /// Decodes an impression in its configured format; result ids are hashed into `results`.
    pub fn impression<'a>(&self, payload: &'a [u8], results: &mut Vec<DocKey>) -> Result<Impression<'a>, Rejection> {
        match self.impressions {
            InputFormat::Json => decode_impression(payload, results),
            InputFormat::Ubi => ubi::decode_query(payload, results, &self.keys),
        }
    }

    /// [`Decoders::impression`], handing over the result ids as text (borrowed from the message
    /// unless escaped) instead of hashes, in rank order: for output that names the results
    /// (`replay --trec-out`). The same decoding, so it accepts and rejects exactly what the
    /// engine does.
    pub fn impression_with_ids<'a>(
        &self,
        payload: &'a [u8],
        ids: &mut Vec<Cow<'a, str>>,
    ) -> Result<Impression<'a>, Rejection> {
        self.impression_into(payload, ids)
    }

    fn impression_into<'a, S: ResultSink<'a>>(
        &self,
        payload: &'a [u8],
        results: &mut S,
    ) -> Result<Impression<'a>, Rejection> {
        match self.impressions {
            InputFormat::Json => impression_into(payload, results),
            InputFormat::Ubi => ubi::query_into(payload, results, &self.keys),
        }
    }

    /// Decodes an engagement in its configured format.
    pub fn engagement<'a>(&self, payload: &'a [u8]) -> Result<Engagement<'a>, Rejection> {
        match self.engagements {
            InputFormat::Json => decode_engagement(payload),
            InputFormat::Ubi => ubi::decode_event(payload),
        }
    }

    /// The event time of a message that decodes, `None` for one that does not: what replay
    /// merges its two files on.
    pub fn event_time(&self, kind: EventKind, payload: &[u8], scratch: &mut Vec<DocKey>) -> Option<EventTime> {
        match kind {
            EventKind::Impression => self.impression(payload, scratch).ok().map(|i| i.timestamp),
            EventKind::Engagement => self.engagement(payload).ok().map(|e| e.timestamp),
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
            let with_ids = decoders.impression_with_ids(payload, &mut ids).unwrap();
            assert_eq!(with_ids, decoders.impression(payload, &mut hashed).unwrap(), "{format:?}");
            assert_eq!(ids, expected, "{format:?}");
            assert_eq!(hashed, expected.iter().map(|id| crate::ids::doc_key(id)).collect::<Vec<_>>(), "{format:?}");
            assert!(matches!(ids[0], Cow::Borrowed(_)), "{format:?}: unescaped ids borrow from the message");
        }
        // A message the engine rejects is rejected here too, for the same reason.
        cfg.kafka.impressions_format = InputFormat::Json;
        let empty_id = br#"{"query_id":"q","timestamp":7,"results":["a",""]}"#;
        let reason = Decoders::new(&cfg).impression_with_ids(empty_id, &mut Vec::new()).unwrap_err().reason;
        assert_eq!(reason, super::super::RejectReason::InvalidValue);
    }
}
