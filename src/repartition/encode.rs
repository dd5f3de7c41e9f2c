//! A raw message decoded with the configured decoders and re-encoded as rankpulse's native JSON
//! event, keyed by its query id: [`Reencoder`].
//!
//! Why re-encode rather than forward the raw bytes: the format (UBI, and whatever mapping the
//! decoders apply) and the rejections are then dealt with once, at the stage, and the join
//! reads one fixed format with its fastest decoder. The native event carries every field the
//! engine reads (query id, timestamp as integer milliseconds, experiment, variant, client and
//! session ids, query text, segment, the dimensions `ab.dimensions` reads (a native object as it
//! came, a mapping's under their names), results as text ids, interleaving rankers and teams; an
//! engagement's document, action, event id and position), so decoding it again gives the same
//! impression or engagement, and the same de-duplication identity.
//!
//! [`decode`] is the only call into [`Decoders`] in this module. The decoders read the whole
//! message ([`RawMessage`]: body, key, and the headers when a mapping reads one), so a field
//! mapped from the key or a header is resolved here and written into the native event.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]

use std::borrow::Cow;

use serde::ser::{SerializeSeq, Serializer};
use serde::Serialize;

use crate::event::{Decoders, Dimensions, Engagement, EventKind, Impression, RawMessage, Rejection};
use crate::time::EventTime;

/// One decoded message, borrowed from it (an impression's result ids are in the caller's list).
// An impression with its mapped dimensions is the larger; a message's decoding lives on the stack
// for the one call, where boxing it would allocate per message.
#[allow(clippy::large_enum_variant)]
enum Decoded<'a> {
    Impression(Impression<'a>),
    Engagement(Engagement<'a>),
}

/// The one call into the configured decoders (see the module documentation).
fn decode<'a>(
    decoders: &'a Decoders,
    kind: EventKind,
    raw: RawMessage<'a>,
    ids: &mut Vec<Cow<'a, str>>,
) -> Result<Decoded<'a>, Rejection> {
    match kind {
        EventKind::Impression => decoders.impression_with_ids(raw, ids).map(Decoded::Impression),
        EventKind::Engagement => decoders.engagement(raw).map(Decoded::Engagement),
    }
}

/// An impression as the native format writes it: every field [`Impression`] carries, under the
/// contract's names, so the native decoder gives back the same impression.
#[derive(Serialize)]
struct NativeImpression<'e> {
    /// What the join and the key are by.
    query_id: &'e str,
    /// Integer milliseconds: whatever the raw form, the parsed instant.
    timestamp: i64,
    /// `none` when the raw event had none, written out (the decoder's default).
    experiment: &'e str,
    /// For an interleaved list the rankers' joined names, which the decoder derives again.
    variant: &'e str,
    /// The A/B unit with `ab.unit = "client_id"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    client_id: Option<&'e str>,
    /// The A/B unit with `ab.unit = "session_id"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    session_id: Option<&'e str>,
    /// What judgment lists are keyed by with `judgments.key = "query"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    query: Option<&'e str>,
    /// The traffic segment the click log keys its counts by.
    #[serde(skip_serializing_if = "Option::is_none")]
    segment: Option<&'e str>,
    /// The fields `ab.dimensions` breaks experiments down by: a native object as it came, or a
    /// mapping's values under their names.
    #[serde(skip_serializing_if = "Option::is_none")]
    dimensions: Option<NativeDimensions<'e>>,
    /// The result ids as text, in rank order (hashes cannot be decoded again).
    results: &'e [Cow<'e, str>],
    /// The rankers of an interleaved list.
    #[serde(skip_serializing_if = "Option::is_none")]
    interleaving: Option<&'e [Cow<'e, str>]>,
    /// Each result's ranker, by name.
    #[serde(skip_serializing_if = "Option::is_none")]
    teams: Option<Teams<'e>>,
}

/// An impression's dimensions as the native format's `dimensions` object.
enum NativeDimensions<'e> {
    /// A native object, its text as it came.
    Raw(&'e serde_json::value::RawValue),
    /// A mapping's values (absent ones left out), under the mapping's names.
    Named(&'e [String], &'e [Option<Cow<'e, str>>]),
}

impl Serialize for NativeDimensions<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            NativeDimensions::Raw(raw) => raw.serialize(serializer),
            NativeDimensions::Named(names, values) => {
                use serde::ser::SerializeMap;
                let mut map = serializer.serialize_map(None)?;
                for (name, value) in names.iter().zip(values.iter()) {
                    if let Some(value) = value {
                        map.serialize_entry(name, value)?;
                    }
                }
                map.end()
            }
        }
    }
}

/// An interleaved list's teams as the native format names them: each result's ranker by name.
struct Teams<'e> {
    /// The rankers, in the order the team numbers index.
    rankers: &'e [Cow<'e, str>],
    /// Each result's ranker index.
    teams: &'e [u8],
}

impl Serialize for Teams<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.teams.len()))?;
        for &team in self.teams {
            // The decoder checked every team against the rankers; an index out of range
            // cannot come from it, and writing "" would be refused by the join, not panic.
            seq.serialize_element(self.rankers.get(usize::from(team)).map_or("", |r| r.as_ref()))?;
        }
        seq.end()
    }
}

/// An engagement as the native format writes it: every field [`Engagement`] carries, so its
/// de-duplication identity is the raw event's.
#[derive(Serialize)]
struct NativeEngagement<'e> {
    /// Its impression's query, and its key.
    query_id: &'e str,
    /// Integer milliseconds (part of the identity of an engagement without `event_id`).
    timestamp: i64,
    /// The result engaged with.
    doc_id: &'e str,
    /// The action (`click` when the raw event had none, written out).
    action: &'e str,
    /// The identity a re-sent copy is recognised by.
    #[serde(skip_serializing_if = "Option::is_none")]
    event_id: Option<&'e str>,
    /// Informational, kept as the contract carries it.
    #[serde(skip_serializing_if = "Option::is_none")]
    position: Option<i64>,
}

/// Decodes raw messages and writes each as a native event with its query id for a key, in
/// buffers reused from message to message.
#[derive(Debug)]
pub struct Reencoder {
    /// The configured decoders of the raw topics.
    decoders: Decoders,
    /// The native event of the newest message.
    payload: Vec<u8>,
    /// The query id of the newest message: its key on the internal topic.
    key: String,
    /// The event time of the newest message: the stage forwards in its order (`merge`).
    timestamp: EventTime,
    /// The capacity of an impression's result-id list, kept between messages (the list itself
    /// borrows from each message in turn).
    spare_ids: Vec<Cow<'static, str>>,
}

impl Reencoder {
    pub fn new(decoders: Decoders) -> Self {
        Reencoder {
            decoders,
            payload: Vec::with_capacity(1024),
            key: String::new(),
            timestamp: 0,
            spare_ids: Vec::new(),
        }
    }

    /// Whether a mapping reads the key or a header: only then are a message's headers collected.
    pub fn reads_envelope(&self) -> bool {
        self.decoders.reads_envelope()
    }

    /// Decodes `raw` and re-encodes it; then [`Reencoder::key`] and [`Reencoder::payload`] are
    /// the message to forward. A rejection is what the join would have rejected it for.
    pub fn reencode(&mut self, kind: EventKind, raw: RawMessage<'_>) -> Result<(), Rejection> {
        // The buffer's allocation is reused for this message's borrowed ids (an empty vector
        // collected into one of the same layout keeps its allocation).
        let mut ids: Vec<Cow<'_, str>> =
            std::mem::take(&mut self.spare_ids).into_iter().map(|_| Cow::Borrowed("")).collect();
        ids.clear();
        let result = decode(&self.decoders, kind, raw, &mut ids).map(|decoded| {
            self.payload.clear();
            self.key.clear();
            let written = match &decoded {
                Decoded::Impression(i) => {
                    self.key.push_str(&i.query_id);
                    self.timestamp = i.timestamp;
                    let interleaving = i.interleaving.as_ref();
                    serde_json::to_writer(
                        &mut self.payload,
                        &NativeImpression {
                            query_id: &i.query_id,
                            timestamp: i.timestamp,
                            experiment: &i.experiment,
                            variant: &i.variant,
                            client_id: i.client_id.as_deref(),
                            session_id: i.session_id.as_deref(),
                            query: i.query.as_deref(),
                            segment: i.segment.as_deref(),
                            dimensions: match &i.dimensions {
                                Dimensions::Absent => None,
                                // Checked JSON already (the decoder sliced it from a message it
                                // parsed); a failure leaves the dimensions out, not the event.
                                Dimensions::Native(text) => serde_json::from_str::<&serde_json::value::RawValue>(text)
                                    .ok()
                                    .map(NativeDimensions::Raw),
                                Dimensions::Mapped(values) => {
                                    Some(NativeDimensions::Named(self.decoders.impression_dimension_names(), values))
                                }
                            },
                            results: &ids,
                            interleaving: interleaving.map(|il| il.rankers.as_slice()),
                            teams: interleaving.map(|il| Teams { rankers: &il.rankers, teams: &il.teams }),
                        },
                    )
                }
                Decoded::Engagement(e) => {
                    self.key.push_str(&e.query_id);
                    self.timestamp = e.timestamp;
                    serde_json::to_writer(
                        &mut self.payload,
                        &NativeEngagement {
                            query_id: &e.query_id,
                            timestamp: e.timestamp,
                            doc_id: &e.doc_id,
                            action: &e.action,
                            event_id: e.event_id.as_deref(),
                            position: e.position,
                        },
                    )
                }
            };
            // Writing borrowed strings and integers into a vector cannot fail.
            debug_assert!(written.is_ok());
        });
        ids.clear();
        self.spare_ids = ids.into_iter().map(|_| Cow::Borrowed("")).collect();
        result
    }

    /// The newest message's query id, its key on the internal topic.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The newest message's event time.
    pub fn timestamp(&self) -> EventTime {
        self.timestamp
    }

    /// The newest message as a native event.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, InputFormat};
    use crate::event::{decode_engagement, decode_impression, RejectReason};

    fn raw(payload: &[u8]) -> RawMessage<'_> {
        RawMessage { payload, key: Some(b"user-7"), headers: &[] }
    }

    #[test]
    fn a_reencoded_impression_decodes_to_the_same_impression() {
        let mut r = Reencoder::new(Decoders::new(&Config::default()));
        let cases: [&[u8]; 3] = [
            br#"{"query_id":"q\u0031","timestamp":"2026-11-22T10:05:00Z","results":["a","b\"c"],"client_id":7,"session_id":"s","query":"red shoes","segment":"mobile","dimensions":{"device":"tv","n":3},"extra":1}"#,
            br#"{"query_id":"q2","timestamp":5,"results":[],"experiment":"e","variant":"v"}"#,
            br#"{"query_id":"q3","timestamp":1,"results":["a","b","c"],"experiment":"duel","interleaving":["base","cand"],"teams":["cand","base","cand"]}"#,
        ];
        for payload in cases {
            r.reencode(EventKind::Impression, raw(payload)).unwrap();
            let (mut want_docs, mut got_docs) = (Vec::new(), Vec::new());
            let want = decode_impression(payload, &mut want_docs).unwrap();
            let got = decode_impression(r.payload(), &mut got_docs).unwrap();
            assert_eq!(got, want, "{}", String::from_utf8_lossy(r.payload()));
            assert_eq!(got_docs, want_docs);
            assert_eq!(r.key(), want.query_id);
            assert_eq!(r.timestamp(), want.timestamp);
        }
    }

    #[test]
    fn a_mapped_impressions_dimensions_are_a_native_object_under_their_names() {
        let toml = "[ab]\ndimensions = [\"device\", \"market\"]\n[mapping.impressions]\nquery_id = \"/id\"\n\
                    timestamp = { path = \"/t\", format = \"epoch_millis\" }\nresults = \"/r\"\n\
                    [mapping.impressions.dimensions]\ndevice = \"/ctx/device\"\nmarket = \"/ctx/market\"\n";
        let cfg = Config::from_toml_with_env(toml, "test", std::iter::empty()).unwrap();
        let mut r = Reencoder::new(Decoders::new(&cfg));
        r.reencode(EventKind::Impression, raw(br#"{"id":"q","t":5,"r":["a"],"ctx":{"device":"tv"}}"#)).unwrap();
        let mut docs = Vec::new();
        let got = decode_impression(r.payload(), &mut docs).unwrap();
        let crate::event::Dimensions::Native(object) = got.dimensions else { panic!("{got:?}") };
        assert_eq!(object, r#"{"device":"tv"}"#, "the absent market left out");
    }

    #[test]
    fn a_reencoded_engagement_keeps_its_identity() {
        let mut r = Reencoder::new(Decoders::new(&Config::default()));
        for payload in [
            &br#"{"query_id":"q","timestamp":"2026-11-22T10:05:00.250Z","doc_id":"d"}"#[..],
            br#"{"query_id":"q","timestamp":5,"doc_id":"d","action":"purchase","event_id":"x1","position":3}"#,
        ] {
            r.reencode(EventKind::Engagement, raw(payload)).unwrap();
            let (want, got) = (decode_engagement(payload).unwrap(), decode_engagement(r.payload()).unwrap());
            assert_eq!(got, want);
            assert_eq!(got.identity(), want.identity());
            assert_eq!(r.key(), "q");
        }
    }

    #[test]
    fn ubi_documents_become_native_events() {
        let mut cfg = Config::default();
        cfg.kafka.engagements_format = InputFormat::Ubi;
        let mut r = Reencoder::new(Decoders::new(&cfg));
        let ubi =
            br#"{"action_name":"click","query_id":"q","timestamp":9,"event_attributes":{"object":{"object_id":"a"}}}"#;
        r.reencode(EventKind::Engagement, raw(ubi)).unwrap();
        let got = decode_engagement(r.payload()).unwrap();
        assert_eq!((got.query_id.as_ref(), got.timestamp, got.doc_id.as_ref()), ("q", 9, "a"));
    }

    #[test]
    fn what_the_join_would_reject_is_rejected_here() {
        let mut r = Reencoder::new(Decoders::new(&Config::default()));
        let err = r.reencode(EventKind::Impression, raw(b"{not json")).unwrap_err();
        assert_eq!(err.reason, RejectReason::InvalidJson);
        let err = r.reencode(EventKind::Engagement, raw(br#"{"query_id":"q","timestamp":5}"#)).unwrap_err();
        assert_eq!(err.reason, RejectReason::MissingField);
    }
}
