//! OpenSearch User Behavior Insights (UBI) input.
//!
//! Many search teams already log in the UBI format (<https://github.com/o19s/ubi>, the schema of
//! OpenSearch's `ubi_queries` and `ubi_events` indices). With `kafka.impressions_format = "ubi"`
//! the impressions topic carries UBI query documents, and with `kafka.engagements_format = "ubi"`
//! the engagements topic carries UBI event documents, one JSON document per message. They decode
//! into the same [`Impression`] and [`Engagement`] as rankpulse's own events, with the same
//! zero-copy approach and the same reject reasons, so everything downstream is unchanged.
//!
//! | UBI query document | impression |
//! |---|---|
//! | `query_id` | `query_id` |
//! | `timestamp` | `timestamp` |
//! | `query_response_hit_ids` (else the older `query_response_object_ids` / `query_response_objects_ids`) | `results` |
//! | `query_attributes.<ubi.experiment_key>`, `query_attributes.<ubi.variant_key>` | `experiment`, `variant` |
//! | `client_id` | `client_id` |
//! | `session_id`, else `query_attributes.session_id` | `session_id` |
//! | `user_query` | `query` (what judgment lists are keyed by) |
//! | `query_response_hits[]._id` (else `id`) with `_search_configuration_id` (else `search_configuration_id`; an interleaved response: it wins over the hit id lists) | `results` with `teams` |
//! | `query_attributes.interleaving`, else the hits' distinct configuration ids in sorted order | `interleaving` (the first is the baseline) |
//!
//! | UBI event document | engagement |
//! |---|---|
//! | `query_id` | `query_id` |
//! | `timestamp` | `timestamp` |
//! | `event_attributes.object.object_id` | `doc_id` |
//! | `action_name` | `action` (its gain from `metrics.action_gains`, as it is) |
//! | `event_attributes.position.ordinal` | `position` (informational) |
//!
//! Where UBI is looser than rankpulse's events, the decoder follows UBI: timestamps may be
//! ISO 8601 without an offset (UTC, as OpenSearch reads them); ids may be integers (the schema
//! allows integer `object_id`s), taken as their decimal text so they match hit ids written as
//! strings; a `null` hit list is a search that returned nothing (UBI's own convention for
//! zero-result queries).
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, Error as _, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use super::decoders::AttributeKeys;
use super::json::{
    decode_object, required_id, required_time, texts, ClusterId, IdListSeed, Label, ListedId, RawTimestamp, Text,
};
use super::{interleaving_of, Engagement, Impression, RejectReason, Rejection, ResultSink, ABSENT_GROUP};
use crate::ids::DocKey;
use crate::interleaving::RANKER_SEPARATOR;
use crate::time::{parse_rfc3339_ms, EventTime};

/// What a rejection for a bad text timestamp says UBI expects.
const UBI_TIME: &str = "an ISO 8601 date-time";

/// Decodes a UBI query document into an impression; hit ids are hashed into `results` in rank order.
pub fn decode_query<'a>(
    payload: &'a [u8],
    results: &mut Vec<DocKey>,
    keys: &AttributeKeys,
) -> Result<Impression<'a>, Rejection> {
    query_into(payload, results, keys)
}

/// [`decode_query`] into any sink.
pub(super) fn query_into<'a, S: ResultSink<'a>>(
    payload: &'a [u8],
    results: &mut S,
    keys: &AttributeKeys,
) -> Result<Impression<'a>, Rejection> {
    results.clear();
    let fields = decode_object(payload, QueryVisitor { results: &mut *results, keys })?;
    let query_id = required_id(fields.query_id, "query_id")?;
    let timestamp = required_time(fields.timestamp, parse_ubi_time, UBI_TIME)?;
    if fields.hits.is_none() {
        return Err(Rejection::missing("query_response_hit_ids"));
    }
    if fields.empty_hit_id {
        return Err(Rejection::new(RejectReason::InvalidValue, "a hit id is an empty string"));
    }
    let attributes = fields.attributes;
    // Hit objects without any configuration are a plain hit list.
    let marked = fields.hits == Some(HitSource::Interleaved) && fields.configurations.iter().any(|c| !c.is_empty());
    let teams = marked.then_some(fields.configurations);
    let rankers = match (&teams, attributes.interleaving) {
        (Some(_), Some(named)) => texts(Some(named)),
        (Some(teams), None) => {
            let mut distinct: Vec<Cow<'a, str>> = teams.clone();
            distinct.sort_unstable();
            distinct.dedup();
            Some(distinct)
        }
        (None, named) => texts(named),
    };
    let interleaving = interleaving_of(
        rankers,
        teams,
        results.len(),
        ["query_attributes.interleaving", "query_response_hits[]._search_configuration_id"],
    )?;
    let variant = match &interleaving {
        Some(il) => Cow::Owned(il.rankers.join(RANKER_SEPARATOR)),
        None => attributes.variant.unwrap_or(Cow::Borrowed(ABSENT_GROUP)),
    };
    Ok(Impression {
        query_id,
        timestamp,
        experiment: attributes.experiment.unwrap_or(Cow::Borrowed(ABSENT_GROUP)),
        variant,
        client_id: fields.client_id.and_then(|c| c.0),
        session_id: fields.session_id.and_then(|c| c.0).or(attributes.session_id),
        query: fields.user_query.and_then(|c| c.0),
        // UBI has no field for it; a segment comes with a mapping of the documents.
        segment: None,
        dimensions: super::Dimensions::Absent,
        interleaving,
    })
}

/// Decodes a UBI event document into an engagement.
pub fn decode_event(payload: &[u8]) -> Result<Engagement<'_>, Rejection> {
    let fields = decode_object(payload, EventVisitor)?;
    let timestamp = required_time(fields.timestamp, parse_ubi_time, UBI_TIME)?;
    let object_id =
        fields.attributes.object_id.ok_or_else(|| Rejection::missing("event_attributes.object.object_id"))?;
    if object_id.0.is_empty() {
        return Err(Rejection::new(RejectReason::InvalidValue, "`event_attributes.object.object_id` is empty"));
    }
    Ok(Engagement {
        query_id: required_id(fields.query_id, "query_id")?,
        timestamp,
        doc_id: object_id.0,
        action: required_id(fields.action_name, "action_name")?,
        // UBI has no event identity: redeliveries are recognized by (query, object, action, time).
        event_id: None,
        position: fields.attributes.ordinal,
    })
}

/// A text timestamp: RFC 3339, or ISO 8601 without an offset (UTC, as OpenSearch reads it).
fn parse_ubi_time(text: &str) -> Option<EventTime> {
    parse_rfc3339_ms(text).or_else(|| {
        chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f")
            .ok()
            .map(|naive| naive.and_utc().timestamp_millis())
    })
}

/// An id as UBI writes it: a string, or an integer taken as its decimal text.
struct Id<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Id<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct IdVisitor;
        impl<'de> Visitor<'de> for IdVisitor {
            type Value = Id<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or integer id")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Id(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Id(Cow::Owned(v.to_owned())))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(Id(Cow::Owned(v.to_string())))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(Id(Cow::Owned(v.to_string())))
            }
        }
        d.deserialize_any(IdVisitor)
    }
}

impl<'de> ListedId<'de> for Id<'de> {
    const LIST: &'static str = "an array of hit ids";
    fn into_text(self) -> Cow<'de, str> {
        self.0
    }
}

/// Which field the hit list came from: the current name wins over the older ones whatever the
/// order of the fields, so a document carrying both is read the way OpenSearch indexes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum HitSource {
    /// `query_response_object_ids` or `query_response_objects_ids` (older plugin and docs).
    Older,
    /// `query_response_hit_ids` (the plugin's index mapping).
    Current,
    /// `query_response_hits`: hit objects with their `_search_configuration_id`, as Search
    /// Relevance Workbench marks an interleaved response.
    Interleaved,
}

/// A UBI query document's fields as read, before the checks.
#[derive(Default)]
struct QueryFields<'a> {
    /// `None` when absent or null: required, and must not be empty.
    query_id: Option<Text<'a>>,
    /// Unresolved, so a bad value is rejected as a timestamp rather than as a type.
    timestamp: Option<RawTimestamp<'a>>,
    /// Optional context, never a reason to reject.
    client_id: Option<ClusterId<'a>>,
    /// Optional context; preferred over `query_attributes.session_id`.
    session_id: Option<ClusterId<'a>>,
    /// `user_query`: the query's text, optional (what judgment lists are keyed by).
    user_query: Option<ClusterId<'a>>,
    /// The experiment, the variant and the fallback session.
    attributes: QueryAttributes<'a>,
    /// Which field the hits came from, `None` if no hit list was present (rejected).
    hits: Option<HitSource>,
    /// Some hit id of the chosen list was empty: rejected once the whole document is read.
    empty_hit_id: bool,
    /// Each hit's `_search_configuration_id`, when the hits came as objects.
    configurations: Vec<Cow<'a, str>>,
}

struct QueryVisitor<'s, S> {
    /// Where the hit ids go.
    results: &'s mut S,
    /// Which `query_attributes` hold the experiment and the variant.
    keys: &'s AttributeKeys,
}

impl<'de, S: ResultSink<'de>> Visitor<'de> for QueryVisitor<'_, S> {
    type Value = QueryFields<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a UBI query object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut fields = QueryFields::default();
        while let Some(key) = map.next_key::<Text<'de>>()? {
            let source = match key.0.as_ref() {
                "query_response_hits" => Some(HitSource::Interleaved),
                "query_response_hit_ids" => Some(HitSource::Current),
                "query_response_object_ids" | "query_response_objects_ids" => Some(HitSource::Older),
                _ => None,
            };
            if source == Some(HitSource::Interleaved) {
                self.results.clear();
                fields.empty_hit_id = false;
                fields.configurations.clear();
                let seed = HitsSeed { results: self.results, configurations: &mut fields.configurations };
                fields.empty_hit_id = map.next_value_seed(seed)?;
                fields.hits = Some(HitSource::Interleaved);
                continue;
            }
            if let Some(source) = source {
                if fields.hits.is_some_and(|hits| hits > source) {
                    map.next_value::<IgnoredAny>()?;
                } else {
                    self.results.clear();
                    fields.empty_hit_id = false;
                    // A null list counts as present: UBI's zero-result search.
                    map.next_value_seed(IdListSeed::<S, Id<'de>>::new(self.results, &mut fields.empty_hit_id))?;
                    fields.hits = Some(source);
                }
                continue;
            }
            match key.0.as_ref() {
                "query_id" => fields.query_id = map.next_value()?,
                "timestamp" => fields.timestamp = map.next_value()?,
                "client_id" => fields.client_id = map.next_value()?,
                "session_id" => fields.session_id = map.next_value()?,
                "user_query" => fields.user_query = map.next_value()?,
                "query_attributes" => fields.attributes = map.next_value_seed(AttributesSeed { keys: self.keys })?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(fields)
    }
}

/// What rankpulse reads of `query_attributes`.
#[derive(Default)]
struct QueryAttributes<'a> {
    /// Under `ubi.experiment_key`; `"none"` when absent.
    experiment: Option<Cow<'a, str>>,
    /// Under `ubi.variant_key`; `"none"` when absent.
    variant: Option<Cow<'a, str>>,
    /// Where some producers put the session instead of the top level.
    session_id: Option<Cow<'a, str>>,
    /// `interleaving`: the rankers of an interleaved response, baseline first.
    interleaving: Option<Vec<Text<'a>>>,
}

/// `query_response_hits`: an array of hit objects, each with its id (`_id`, else `id`) and
/// its `_search_configuration_id`; the ids go to the results, the configurations beside them.
/// Yields whether some id was empty. A hit without a configuration gets an empty one: among
/// marked hits, no ranker is named that, so the impression is rejected as interleaving.
struct HitsSeed<'s, S, C> {
    /// Where the hit ids go.
    results: &'s mut S,
    /// Where each hit's configuration goes.
    configurations: &'s mut Vec<C>,
}

impl<'de, S: ResultSink<'de>> DeserializeSeed<'de> for HitsSeed<'_, S, Cow<'de, str>> {
    type Value = bool;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, S: ResultSink<'de>> Visitor<'de> for HitsSeed<'_, S, Cow<'de, str>> {
    type Value = bool;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of hit objects")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
        let mut empty_id = false;
        while let Some(hit) = seq.next_element::<Hit<'de>>()? {
            let id = hit.id.map(|i| i.0).unwrap_or_default();
            empty_id |= id.is_empty();
            self.results.push(id);
            self.configurations.push(hit.configuration.map(|c| c.0).unwrap_or_default());
        }
        Ok(empty_id)
    }
}

/// One hit object of `query_response_hits`.
struct Hit<'a> {
    /// `_id`, else `id`.
    id: Option<Id<'a>>,
    /// `_search_configuration_id`, else `search_configuration_id` (as some clients copy it).
    configuration: Option<Id<'a>>,
}

impl<'de> Deserialize<'de> for Hit<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct HitVisitor;
        impl<'de> Visitor<'de> for HitVisitor {
            type Value = Hit<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a hit object with `_id` and `_search_configuration_id`")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut hit = Hit { id: None, configuration: None };
                while let Some(key) = map.next_key::<Text<'de>>()? {
                    match key.0.as_ref() {
                        "_id" => hit.id = map.next_value()?,
                        "id" if hit.id.is_none() => hit.id = map.next_value()?,
                        "_search_configuration_id" => hit.configuration = map.next_value()?,
                        "search_configuration_id" if hit.configuration.is_none() => {
                            hit.configuration = map.next_value()?
                        }
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(hit)
            }
        }
        d.deserialize_map(HitVisitor)
    }
}

struct AttributesSeed<'s> {
    /// Which attributes hold the experiment and the variant.
    keys: &'s AttributeKeys,
}

impl<'de> DeserializeSeed<'de> for AttributesSeed<'_> {
    type Value = QueryAttributes<'de>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for AttributesSeed<'_> {
    type Value = QueryAttributes<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("query_attributes as an object")
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(QueryAttributes::default())
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(QueryAttributes::default())
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut attributes = QueryAttributes::default();
        while let Some(key) = map.next_key::<Text<'de>>()? {
            let key = key.0;
            let slot = if *key == *self.keys.experiment {
                &mut attributes.experiment
            } else if *key == *self.keys.variant {
                &mut attributes.variant
            } else if key == "interleaving" {
                attributes.interleaving = map.next_value()?;
                continue;
            } else if key == "session_id" {
                // Optional context: a value of another type is no reason to lose the impression.
                attributes.session_id = map.next_value::<ClusterId<'de>>()?.0;
                continue;
            } else {
                map.next_value::<IgnoredAny>()?;
                continue;
            };
            *slot = match map.next_value::<Label<'de>>()? {
                Label::Text(text) => Some(text),
                Label::Absent => None,
                Label::Other(kind) => {
                    return Err(A::Error::custom(format!(
                        "query_attributes.{key} is {kind}, expected a string (or an integer)"
                    )))
                }
            };
        }
        Ok(attributes)
    }
}

/// A UBI event document's fields as read, before the checks.
#[derive(Default)]
struct EventFields<'a> {
    /// Required: the action whose gain `metrics.action_gains` gives.
    action_name: Option<Text<'a>>,
    /// `None` when absent or null: required, and must not be empty.
    query_id: Option<Text<'a>>,
    /// Unresolved, so a bad value is rejected as a timestamp rather than as a type.
    timestamp: Option<RawTimestamp<'a>>,
    /// The result engaged with and its position.
    attributes: EventAttributes<'a>,
}

struct EventVisitor;

impl<'de> Visitor<'de> for EventVisitor {
    type Value = EventFields<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a UBI event object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut fields = EventFields::default();
        while let Some(key) = map.next_key::<Text<'de>>()? {
            match key.0.as_ref() {
                "action_name" => fields.action_name = map.next_value()?,
                "query_id" => fields.query_id = map.next_value()?,
                "timestamp" => fields.timestamp = map.next_value()?,
                "event_attributes" => {
                    fields.attributes = map.next_value::<Option<EventAttributes<'de>>>()?.unwrap_or_default()
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(fields)
    }
}

/// What rankpulse reads of `event_attributes`: the object's id and the position's ordinal.
#[derive(Default)]
struct EventAttributes<'a> {
    /// `object.object_id`: required, the result the event is about.
    object_id: Option<Id<'a>>,
    /// `position.ordinal`: informational.
    ordinal: Option<i64>,
}

impl<'de> Deserialize<'de> for EventAttributes<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct AttributesVisitor;
        impl<'de> Visitor<'de> for AttributesVisitor {
            type Value = EventAttributes<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("event_attributes as an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut attributes = EventAttributes::default();
                while let Some(key) = map.next_key::<Text<'de>>()? {
                    match key.0.as_ref() {
                        "object" => {
                            attributes.object_id = map.next_value::<Option<Member<'de, Id<'de>>>>()?.and_then(|m| m.0)
                        }
                        "position" => {
                            attributes.ordinal = map.next_value::<Option<Member<'de, i64>>>()?.and_then(|m| m.0)
                        }
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(attributes)
            }
        }
        d.deserialize_map(AttributesVisitor)
    }
}

/// The one member rankpulse reads of a nested UBI object: `object_id` of `object`, `ordinal`
/// of `position`. Every other member is skipped.
struct Member<'a, T>(Option<T>, std::marker::PhantomData<&'a ()>);

/// Which member a [`Member`] reads.
trait MemberName {
    const NAME: &'static str;
}
impl MemberName for Id<'_> {
    const NAME: &'static str = "object_id";
}
impl MemberName for i64 {
    const NAME: &'static str = "ordinal";
}

impl<'de, T: Deserialize<'de> + MemberName> Deserialize<'de> for Member<'de, T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct MemberVisitor<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de> + MemberName> Visitor<'de> for MemberVisitor<T> {
            type Value = Member<'de, T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "an object with {}", T::NAME)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut value = None;
                while let Some(key) = map.next_key::<Text<'de>>()? {
                    if key.0 == T::NAME {
                        value = map.next_value::<Option<T>>()?;
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(Member(value, std::marker::PhantomData))
            }
        }
        d.deserialize_map(MemberVisitor(std::marker::PhantomData))
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::ids::doc_key;

    fn keys() -> AttributeKeys {
        AttributeKeys { experiment: "experiment".into(), variant: "variant".into() }
    }

    fn query(json: &str) -> Result<(Impression<'_>, Vec<DocKey>), RejectReason> {
        let mut results = Vec::new();
        decode_query(json.as_bytes(), &mut results, &keys()).map(|i| (i, results)).map_err(|r| r.reason)
    }

    fn event(json: &str) -> Result<Engagement<'_>, RejectReason> {
        decode_event(json.as_bytes()).map_err(|r| r.reason)
    }

    /// A `ubi_queries` document as the UBI 1.3.0 query schema describes it (its example values).
    pub(in crate::event) const SPEC_QUERY: &str = r#"{
        "application": "amazon-shop",
        "query_id": "00112233-4455-6677-8899-aabbccddeeff",
        "client_id": "5e3b2a1c-8b7d-4f2e-a3d4-c9b2e1f3a4b5",
        "user_query": "laptop",
        "query_attributes": {"experiment": "ranker-v2", "variant": "treatment", "page": 1, "filters": {"brand": ["x"]}},
        "object_id_field": "asin",
        "timestamp": "2018-11-13T20:20:39+00:00",
        "query_response_id": "5e3b2a1c-8b7d-4f2e-a3d4-c9b2e1f3a4b5",
        "query_response_hit_ids": ["B07XLFYN6S", "B013UFPODY", "B07SHS91DQ", "B077FVRM4P", "B07ZCRSVBB"]
    }"#;

    /// A `ubi_events` document as the UBI 1.3.0 event schema describes it.
    const SPEC_EVENT: &str = r#"{
        "application": "amazon-shop",
        "action_name": "add_to_cart",
        "query_id": "00112233-4455-6677-8899-aabbccddeeff",
        "session_id": "84266fdbd31d4c2c6d0665f7e8380fa3",
        "client_id": "5e3b2a1c-8b7d-4f2e-a3d4-c9b2e1f3a4b5",
        "user_id": "5e3b2a1c-8b7d-4f2e-a3d4-c9b2e1f3a4b5",
        "timestamp": "2018-11-13T20:21:02.125Z",
        "message_type": "CONVERSION",
        "message": "added to cart from the result list",
        "event_attributes": {
            "object": {"object_id": "B07SHS91DQ", "object_id_field": "asin", "internal_id": "123456",
                       "description": "a laptop", "object_detail": {"price": 999}},
            "position": {"ordinal": 3, "xy": {"x": 10.5, "y": 200}, "trail": "search>results"},
            "browser": "Firefox"
        }
    }"#;

    #[test]
    fn an_interleaved_response_marks_each_hit_with_its_search_configuration() {
        // Search Relevance Workbench's shape: hit objects with `_search_configuration_id`.
        let json = r#"{"query_id":"q1","timestamp":"2026-11-22T10:00:00Z","client_id":"c1",
            "query_attributes":{"experiment":"srw-test-7"},
            "query_response_hits":[{"_id":"d1","_search_configuration_id":"cfg-b","_score":3.5},
                                   {"_id":"d2","_search_configuration_id":"cfg-a"},
                                   {"id":"d3","search_configuration_id":"cfg-b"}]}"#;
        let (i, results) = query(json).unwrap();
        assert_eq!(results, ["d1", "d2", "d3"].map(doc_key));
        let il = i.interleaving.unwrap();
        // Without `query_attributes.interleaving`, the configurations in sorted order.
        assert_eq!(
            (il.rankers.as_slice(), il.teams.as_slice()),
            (&["cfg-a", "cfg-b"].map(Cow::from)[..], &[1, 0, 1][..])
        );
        assert_eq!((i.experiment.as_ref(), i.variant.as_ref()), ("srw-test-7", "cfg-a vs cfg-b"));
        // Named in `query_attributes.interleaving`: that order, the baseline first; and the
        // hit objects win over a hit id list in the same document.
        let named =
            json.replace(r#""experiment":"srw-test-7""#, r#""experiment":"e","interleaving":["cfg-b","cfg-a"]"#);
        let named = named.replace(r#""client_id":"c1","#, r#""client_id":"c1","query_response_hit_ids":["x"],"#);
        let (i, results) = query(&named).unwrap();
        assert_eq!((results.len(), i.variant.as_ref()), (3, "cfg-b vs cfg-a"));
        assert_eq!(i.interleaving.unwrap().teams, [0, 1, 0]);
        // Hit objects without any configuration are a plain hit list.
        let plain = r#"{"query_id":"q1","timestamp":1,"query_response_hits":[{"_id":"d1"},{"_id":"d2"}]}"#;
        let (i, results) = query(plain).unwrap();
        assert_eq!((results.len(), i.interleaving, i.variant.as_ref()), (2, None, "none"));
        // Faults are counted rejections.
        for bad in [
            r#"{"query_id":"q","timestamp":1,"query_response_hits":[{"_id":"d1","_search_configuration_id":"a"},{"_id":"d2"}]}"#,
            r#"{"query_id":"q","timestamp":1,"query_response_hits":[{"_id":"d1","_search_configuration_id":"a"}]}"#,
            r#"{"query_id":"q","timestamp":1,"query_attributes":{"interleaving":["a","b"]},"query_response_hits":[{"_id":"d1","_search_configuration_id":"c"},{"_id":"d2","_search_configuration_id":"a"}]}"#,
        ] {
            assert_eq!(query(bad).map(|_| ()), Err(RejectReason::InvalidInterleaving), "{bad}");
        }
        let wrong = r#"{"query_id":"q","timestamp":1,"query_response_hits":["d1"]}"#;
        assert_eq!(query(wrong).map(|_| ()), Err(RejectReason::WrongType));
    }

    #[test]
    fn spec_query_document_maps_to_an_impression() {
        let (i, results) = query(SPEC_QUERY).unwrap();
        assert_eq!(i.query_id, "00112233-4455-6677-8899-aabbccddeeff");
        assert_eq!(i.timestamp, 1_542_140_439_000);
        assert_eq!((i.experiment.as_ref(), i.variant.as_ref()), ("ranker-v2", "treatment"));
        assert_eq!(i.client_id.as_deref(), Some("5e3b2a1c-8b7d-4f2e-a3d4-c9b2e1f3a4b5"));
        assert_eq!(i.session_id, None);
        assert_eq!(i.query.as_deref(), Some("laptop"), "user_query: what judgments are keyed by");
        let expected: Vec<DocKey> =
            ["B07XLFYN6S", "B013UFPODY", "B07SHS91DQ", "B077FVRM4P", "B07ZCRSVBB"].iter().map(|d| doc_key(d)).collect();
        assert_eq!(results, expected);
        assert!(matches!(i.query_id, Cow::Borrowed(_)) && matches!(i.variant, Cow::Borrowed(_)), "zero-copy");
    }

    #[test]
    fn spec_event_document_maps_to_an_engagement() {
        let e = event(SPEC_EVENT).unwrap();
        assert_eq!(e.query_id, "00112233-4455-6677-8899-aabbccddeeff");
        assert_eq!(e.timestamp, 1_542_140_462_125);
        assert_eq!((e.doc_id.as_ref(), e.action.as_ref()), ("B07SHS91DQ", "add_to_cart"));
        assert_eq!((e.position, e.event_id), (Some(3), None));
        assert!(matches!(e.doc_id, Cow::Borrowed(_)), "zero-copy");
    }

    #[test]
    fn query_variants_older_field_names_and_defaults() {
        // The plugin's older field name, epoch-millisecond time, no attributes, session in attributes.
        let (i, r) = query(
            r#"{"query_id":"q1","timestamp":1700000000000,"query_response_object_ids":["a","b"],"client_id":null}"#,
        )
        .unwrap();
        assert_eq!((i.timestamp, i.experiment.as_ref(), i.variant.as_ref()), (1_700_000_000_000, "none", "none"));
        assert_eq!((r, i.client_id), (vec![doc_key("a"), doc_key("b")], None));
        let (_, r) = query(r#"{"query_id":"q1","timestamp":1,"query_response_objects_ids":["c"]}"#).unwrap();
        assert_eq!(r, vec![doc_key("c")]);
        // The current name wins over an older one, in either order.
        for doc in [
            r#"{"query_id":"q","timestamp":1,"query_response_hit_ids":["x"],"query_response_object_ids":["y","z"]}"#,
            r#"{"query_id":"q","timestamp":1,"query_response_object_ids":["y","z"],"query_response_hit_ids":["x"]}"#,
        ] {
            assert_eq!(query(doc).unwrap().1, vec![doc_key("x")], "{doc}");
        }
        // A null hit list is a zero-result search; integer ids are their decimal text.
        assert_eq!(
            query(r#"{"query_id":"q","timestamp":1,"query_response_hit_ids":null}"#).unwrap().1,
            Vec::<DocKey>::new()
        );
        assert_eq!(
            query(r#"{"query_id":"q","timestamp":1,"query_response_hit_ids":[42]}"#).unwrap().1,
            vec![doc_key("42")]
        );
        // No offset: UTC, as OpenSearch reads it; fractional seconds optional.
        let (i, _) =
            query(r#"{"query_id":"q","timestamp":"2018-11-13T20:20:39","query_response_hit_ids":[]}"#).unwrap();
        assert_eq!(i.timestamp, 1_542_140_439_000);
        let (i, _) =
            query(r#"{"query_id":"q","timestamp":"2018-11-13T20:20:39.5","query_response_hit_ids":[]}"#).unwrap();
        assert_eq!(i.timestamp, 1_542_140_439_500);
        // Sessions: top-level first, else query_attributes.session_id; numbers as text.
        let (i, _) = query(
            r#"{"query_id":"q","timestamp":1,"query_response_hit_ids":[],"query_attributes":{"session_id":77,"variant":2}}"#,
        )
        .unwrap();
        assert_eq!((i.session_id.as_deref(), i.variant.as_ref()), (Some("77"), "2"));
        let (i, _) = query(
            r#"{"query_id":"q","timestamp":1,"query_response_hit_ids":[],"session_id":"s1","query_attributes":{"session_id":"s2"}}"#,
        )
        .unwrap();
        assert_eq!(i.session_id.as_deref(), Some("s1"));
    }

    #[test]
    fn configured_attribute_keys_are_used() {
        let keys = AttributeKeys { experiment: "ab_test".into(), variant: "bucket".into() };
        let doc = br#"{"query_id":"q","timestamp":1,"query_response_hit_ids":[],
                       "query_attributes":{"experiment":"ignored","ab_test":"e7","bucket":"b"}}"#;
        let i = decode_query(doc, &mut Vec::new(), &keys).unwrap();
        assert_eq!((i.experiment.as_ref(), i.variant.as_ref()), ("e7", "b"));
    }

    #[test]
    fn query_rejections_have_reasons() {
        let cases = [
            ("", RejectReason::EmptyMessage),
            ("[]", RejectReason::NotAnObject),
            ("{\"query_id\":", RejectReason::InvalidJson),
            (r#"{"timestamp":1,"query_response_hit_ids":[]}"#, RejectReason::MissingField),
            (r#"{"query_id":"q","query_response_hit_ids":[]}"#, RejectReason::MissingField),
            (r#"{"query_id":"q","timestamp":1}"#, RejectReason::MissingField),
            (r#"{"query_id":"q","timestamp":1,"results":["a"]}"#, RejectReason::MissingField),
            (r#"{"query_id":"q","timestamp":1,"query_response_hit_ids":"a"}"#, RejectReason::WrongType),
            (r#"{"query_id":"q","timestamp":1,"query_response_hit_ids":[true]}"#, RejectReason::WrongType),
            (
                r#"{"query_id":"q","timestamp":1,"query_response_hit_ids":[],"query_attributes":[]}"#,
                RejectReason::WrongType,
            ),
            (
                r#"{"query_id":"q","timestamp":1,"query_response_hit_ids":[],"query_attributes":{"variant":true}}"#,
                RejectReason::WrongType,
            ),
            (
                r#"{"query_id":"q","timestamp":"13/11/2018","query_response_hit_ids":[]}"#,
                RejectReason::InvalidTimestamp,
            ),
            (r#"{"query_id":"","timestamp":1,"query_response_hit_ids":[]}"#, RejectReason::InvalidValue),
            (r#"{"query_id":"q","timestamp":1,"query_response_hit_ids":["a",""]}"#, RejectReason::InvalidValue),
        ];
        for (json, reason) in cases {
            assert_eq!(query(json).map(|_| ()).unwrap_err(), reason, "{json}");
        }
        let detail = decode_query(
            br#"{"query_id":"q","timestamp":1,"query_response_hit_ids":[],"query_attributes":{"experiment":{"a":1}}}"#,
            &mut Vec::new(),
            &keys(),
        )
        .unwrap_err()
        .detail;
        assert!(detail.contains("query_attributes.experiment is an object"), "{detail}");
    }

    #[test]
    fn event_variants_and_rejections() {
        // Integer object ids, a custom action, no position, epoch milliseconds.
        let e = event(
            r#"{"action_name":"watch","query_id":"q","timestamp":5,"event_attributes":{"object":{"object_id":123}}}"#,
        )
        .unwrap();
        assert_eq!((e.doc_id.as_ref(), e.action.as_ref(), e.position, e.timestamp), ("123", "watch", None, 5));
        let reason = |j: &str| event(j).map(|_| ()).unwrap_err();
        // A UBI event that is not about a result (a filter, a page view) has nothing to attribute.
        assert_eq!(reason(r#"{"action_name":"on_search","query_id":"q","timestamp":5}"#), RejectReason::MissingField);
        assert_eq!(
            reason(
                r#"{"action_name":"click","query_id":"q","timestamp":5,"event_attributes":{"position":{"ordinal":1}}}"#
            ),
            RejectReason::MissingField
        );
        let object = r#""event_attributes":{"object":{"object_id":"d"}}"#;
        assert_eq!(reason(&format!(r#"{{"query_id":"q","timestamp":5,{object}}}"#)), RejectReason::MissingField);
        assert_eq!(reason(&format!(r#"{{"action_name":"click","timestamp":5,{object}}}"#)), RejectReason::MissingField);
        assert_eq!(
            reason(&format!(r#"{{"action_name":"click","query_id":"q",{object}}}"#)),
            RejectReason::MissingField
        );
        assert_eq!(
            reason(&format!(r#"{{"action_name":"click","query_id":"q","timestamp":"soon",{object}}}"#)),
            RejectReason::InvalidTimestamp
        );
        assert_eq!(
            reason(
                r#"{"action_name":"click","query_id":"q","timestamp":5,"event_attributes":{"object":{"object_id":""}}}"#
            ),
            RejectReason::InvalidValue
        );
        assert_eq!(
            reason(
                r#"{"action_name":"click","query_id":"q","timestamp":5,"event_attributes":{"object":{"object_id":1.5}}}"#
            ),
            RejectReason::WrongType
        );
        assert_eq!(
            reason(
                r#"{"action_name":"click","query_id":"q","timestamp":5,"event_attributes":{"object":{"object_id":"d"},"position":{"ordinal":"3"}}}"#
            ),
            RejectReason::WrongType
        );
        assert_eq!(
            reason(r#"{"action_name":"click","query_id":"q","timestamp":5,"event_attributes":7}"#),
            RejectReason::WrongType
        );
    }
}
