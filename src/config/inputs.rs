//! The configuration of events in the user's own shape: `[mapping.impressions]` and
//! `[mapping.engagements]` (where each field rankpulse needs lives in the user's event),
//! `[schema_registry]` (where Avro and Protobuf schemas come from) and `[schemas.*]` (local
//! schema files, for setups without a registry).

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::path::{self, FieldPath};
use super::schema::{Config, InputFormat};
use super::{ConfigError, Reads};
use crate::time::HumanDuration;

fn invalid(key: impl Into<String>, problem: impl Into<String>) -> ConfigError {
    ConfigError::Invalid { key: key.into(), problem: problem.into() }
}

/// `[mapping]`: the field mapping of each input. Default: neither (rankpulse's own field names).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct MappingConfig {
    /// `[mapping.impressions]`: where an impression's fields are. Default absent: the native
    /// event format's field names (`query_id`, `timestamp`, `results`, ...).
    pub impressions: Option<ImpressionMapping>,
    /// `[mapping.engagements]`: where an engagement's fields are. Default absent: the native
    /// event format's field names.
    pub engagements: Option<EngagementMapping>,
}

/// `[mapping.impressions]`: where each field of an impression is. Each key names a field
/// source: a path into the message (JSON Pointer or JSONPath), a header, the message key or a
/// constant, with an optional default. The three required fields have no default; an optional
/// field left out is absent in every event (experiment and variant then `none`, as for a
/// native event without them).
// Each field is a [`FieldSource`]; paths are parsed by [`path`].
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ImpressionMapping {
    /// The id joining the impression with its engagements. Required.
    pub query_id: FieldSource,
    /// The event time; its `format` must be declared. Required.
    pub timestamp: FieldSource,
    /// The result ids in rank order: a path to an array of ids (`/results`), or to each id in
    /// an array of objects (`/hits/hits/*/_id`). Required.
    pub results: FieldSource,
    /// The experiment. Default absent (`none`).
    pub experiment: Option<FieldSource>,
    /// The variant. Default absent (`none`).
    pub variant: Option<FieldSource>,
    /// The client (user or browser) id, for `ab.unit = "client_id"`. Default absent.
    pub client_id: Option<FieldSource>,
    /// The session id, for `ab.unit = "session_id"`. Default absent.
    pub session_id: Option<FieldSource>,
    /// The query's text, for `judgments.key = "query"` and the click log. Default absent.
    pub query: Option<FieldSource>,
    /// A segment of the traffic (a device, a page type): the click log's counts and
    /// position-bias estimates are kept per segment. Default absent.
    pub segment: Option<FieldSource>,
    /// The rankers of an interleaved list (an array of names). Default absent.
    pub interleaving: Option<FieldSource>,
    /// The ranker of each result, in rank order (an array, or each of an array of objects).
    /// Default absent.
    pub teams: Option<FieldSource>,
    /// `[mapping.impressions.dimensions]`: fields `ab.dimensions` may name, each a field source
    /// (`device = "/context/device"`), read as optional context like `segment`. Default empty
    /// (at most 8).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub dimensions: BTreeMap<String, FieldSource>,
}

/// Scalar fields of an impression's mapping: the eight of [`ImpressionMapping::scalars`] and up
/// to [`crate::config::MAX_DIMENSIONS`] dimensions.
pub const IMPRESSION_SCALARS: usize = 16;

/// `[mapping.engagements]`: where each field of an engagement is, with field sources as in
/// `[mapping.impressions]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct EngagementMapping {
    /// The impression it belongs to. Required.
    pub query_id: FieldSource,
    /// The event time; its `format` must be declared. Required.
    pub timestamp: FieldSource,
    /// The result engaged with. Required.
    pub doc_id: FieldSource,
    /// The event's name. Default absent (`click`).
    pub action: Option<FieldSource>,
    /// The event's own id, for de-duplication. Default absent.
    pub event_id: Option<FieldSource>,
    /// The rank as the client saw it (informational). Default absent.
    pub position: Option<FieldSource>,
    /// The user's event names and the rankpulse actions they are (whose gains
    /// `metrics.action_gains` gives): `"Product Clicked" = "click"`. When not empty, an event
    /// whose name is not here is rejected as `unmapped_action` (counted, so a page view on the
    /// clicks topic is seen, not silently dropped). Default empty: names are actions as they are.
    #[serde(default)]
    pub actions: BTreeMap<String, String>,
}

impl ImpressionMapping {
    /// The single-valued fields by name, in the order the decoder numbers them: the eight
    /// fields, then the dimensions in name order (slots without one are `None`).
    pub fn scalars(&self) -> [(&'static str, Option<&FieldSource>); IMPRESSION_SCALARS] {
        let mut dimensions = self.dimensions.values();
        let mut next = || ("dimensions", dimensions.next());
        [
            ("query_id", Some(&self.query_id)),
            ("timestamp", Some(&self.timestamp)),
            ("experiment", self.experiment.as_ref()),
            ("variant", self.variant.as_ref()),
            ("client_id", self.client_id.as_ref()),
            ("session_id", self.session_id.as_ref()),
            ("query", self.query.as_ref()),
            ("segment", self.segment.as_ref()),
            next(),
            next(),
            next(),
            next(),
            next(),
            next(),
            next(),
            next(),
        ]
    }

    /// The slot of dimension `name` among [`ImpressionMapping::scalars`]'s, if mapped.
    pub fn dimension_slot(&self, name: &str) -> Option<usize> {
        self.dimensions.keys().position(|k| k == name).map(|i| 8 + i)
    }
    /// The list fields by name: the results, the interleaving's rankers, each result's team.
    pub fn lists(&self) -> [(&'static str, Option<&FieldSource>); 3] {
        [("results", Some(&self.results)), ("interleaving", self.interleaving.as_ref()), ("teams", self.teams.as_ref())]
    }
}

impl EngagementMapping {
    /// The single-valued fields by name, in the order the decoder numbers them.
    pub fn scalars(&self) -> [(&'static str, Option<&FieldSource>); 6] {
        [
            ("query_id", Some(&self.query_id)),
            ("timestamp", Some(&self.timestamp)),
            ("doc_id", Some(&self.doc_id)),
            ("action", self.action.as_ref()),
            ("event_id", self.event_id.as_ref()),
            ("position", self.position.as_ref()),
        ]
    }
}

/// How a timestamp is written: declared, never guessed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimestampFormat {
    /// An RFC 3339 string (`2026-11-26T10:00:00.250Z`).
    Rfc3339,
    /// Seconds since the epoch: an integer, a decimal string of one, or a number with a fraction.
    EpochSeconds,
    /// Milliseconds since the epoch: an integer or a decimal string of one.
    EpochMillis,
    /// Microseconds since the epoch (GA4's `event_timestamp`): an integer or a decimal string.
    EpochMicros,
    /// The native events' own rule: an RFC 3339 string or integer milliseconds.
    Rfc3339OrEpochMillis,
}

/// Where one field's value comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldSource {
    /// Where it is read.
    pub from: From,
    /// The value when it is absent (or null). A required field without a default makes an
    /// event without it a `missing_field` rejection.
    pub default: Option<String>,
    /// For a timestamp: how it is written. Required there, refused elsewhere.
    pub format: Option<TimestampFormat>,
}

/// The place of a [`FieldSource`].
#[derive(Debug, Clone, PartialEq)]
pub enum From {
    /// A path into the message's body.
    Path(FieldPath),
    /// A Kafka header, by name, as UTF-8 text.
    Header(String),
    /// The Kafka message key, as UTF-8 text.
    Key,
    /// The same value for every event (a fixed experiment, say).
    Value(String),
}

impl FieldSource {
    /// A path, as the native default shape and the shorthand string write it.
    pub fn path(text: &str) -> Result<FieldSource, String> {
        Ok(FieldSource { from: From::Path(path::parse(text)?), default: None, format: None })
    }
    /// Where it comes from, for messages: `/a/b`, `header x`, `the message key`, `"constant"`.
    pub fn describe(&self) -> String {
        match &self.from {
            From::Path(p) => p.text.clone(),
            From::Header(h) => format!("header {h:?}"),
            From::Key => "the message key".into(),
            From::Value(v) => format!("the constant {v:?}"),
        }
    }
}

/// The table form of a [`FieldSource`], as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FieldTable {
    path: Option<String>,
    header: Option<String>,
    key: Option<bool>,
    value: Option<String>,
    default: Option<String>,
    format: Option<TimestampFormat>,
}

impl TryFrom<FieldTable> for FieldSource {
    type Error = String;
    fn try_from(t: FieldTable) -> Result<Self, String> {
        let from = match (t.path, t.header, t.key, t.value) {
            (Some(p), None, None, None) => From::Path(path::parse(&p)?),
            (None, Some(h), None, None) if !h.is_empty() => From::Header(h),
            (None, None, Some(true), None) => From::Key,
            (None, None, None, Some(v)) => From::Value(v),
            (None, Some(_), None, None) => return Err("`header` must name a header".into()),
            (None, None, Some(false), None) => return Err("`key = false` reads nothing; leave the field out".into()),
            _ => return Err("give exactly one of `path`, `header`, `key = true` or `value`".into()),
        };
        if matches!(from, From::Value(_)) && t.default.is_some() {
            return Err("a constant `value` needs no `default`".into());
        }
        Ok(FieldSource { from, default: t.default, format: t.format })
    }
}

impl<'de> Deserialize<'de> for FieldSource {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct SourceVisitor;
        impl<'de> Visitor<'de> for SourceVisitor {
            type Value = FieldSource;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a path (\"/a/b\" or \"$.a.b\") or a table with `path`, `header`, `key` or `value`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<FieldSource, E> {
                FieldSource::path(v).map_err(E::custom)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<FieldSource, A::Error> {
                let table = FieldTable::deserialize(de::value::MapAccessDeserializer::new(map))?;
                FieldSource::try_from(table).map_err(de::Error::custom)
            }
        }
        d.deserialize_any(SourceVisitor)
    }
}

impl Serialize for FieldSource {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if let (From::Path(p), None, None) = (&self.from, &self.default, &self.format) {
            return s.serialize_str(&p.text);
        }
        let mut map = s.serialize_map(None)?;
        match &self.from {
            From::Path(p) => map.serialize_entry("path", &p.text)?,
            From::Header(h) => map.serialize_entry("header", h)?,
            From::Key => map.serialize_entry("key", &true)?,
            From::Value(v) => map.serialize_entry("value", v)?,
        }
        if let Some(default) = &self.default {
            map.serialize_entry("default", default)?;
        }
        if let Some(format) = &self.format {
            map.serialize_entry("format", format)?;
        }
        map.end()
    }
}

/// `[schema_registry]`: a Confluent-compatible Schema Registry, for `avro` and `protobuf`
/// inputs written in Confluent's wire format (a zero byte, the schema id, the payload).
/// Schemas are fetched by id (`GET /schemas/ids/{id}`) when first seen and cached for the
/// process's life (an id's schema never changes), so an outage does not stop the consumption
/// of ids already seen.
#[derive(Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SchemaRegistryConfig {
    /// Base URL, `http://` or `https://`. Default empty: no registry.
    pub url: String,
    /// Basic-auth user name. Default empty: no basic auth.
    pub username: String,
    /// Basic-auth password, from this environment variable. Default empty.
    pub password_env: String,
    /// Basic-auth password, from this file (a Secret mount; a trailing newline is dropped).
    /// Default empty.
    pub password_file: String,
    /// Bearer token, from this environment variable. Default empty.
    pub bearer_token_env: String,
    /// Bearer token, from this file. Default empty.
    pub bearer_token_file: String,
    /// PEM file of the CA that signed the registry's certificate, for `https://` with a private
    /// CA. Default empty: the public web roots.
    pub ca_file: String,
    /// How long one request may take. Default `10s`.
    pub timeout: HumanDuration,
    /// After a failed fetch (registry unreachable), messages of that id are rejected as
    /// `schema_unavailable` without asking again for this long, so an outage costs one timeout,
    /// not one per message. Default `5s`.
    pub retry_interval: HumanDuration,
    /// How often the registry is probed while every id in use is cached, so an outage shows on
    /// `/readyz` and `rankpulse_schema_registry_up` before a new id needs it. Default `30s`.
    pub check_interval: HumanDuration,
}

impl Default for SchemaRegistryConfig {
    fn default() -> Self {
        SchemaRegistryConfig {
            url: String::new(),
            username: String::new(),
            password_env: String::new(),
            password_file: String::new(),
            bearer_token_env: String::new(),
            bearer_token_file: String::new(),
            ca_file: String::new(),
            timeout: HumanDuration::from_millis(10_000),
            retry_interval: HumanDuration::from_millis(5_000),
            check_interval: HumanDuration::from_millis(30_000),
        }
    }
}

impl fmt::Debug for SchemaRegistryConfig {
    // Field by field, so that a new field is not forgotten; nothing here is a secret itself
    // (secrets come from the environment or files named here).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let SchemaRegistryConfig {
            url,
            username,
            password_env,
            password_file,
            bearer_token_env,
            bearer_token_file,
            ca_file,
            timeout,
            retry_interval,
            check_interval,
        } = self;
        f.debug_struct("SchemaRegistryConfig")
            .field("url", url)
            .field("username", username)
            .field("password_env", password_env)
            .field("password_file", password_file)
            .field("bearer_token_env", bearer_token_env)
            .field("bearer_token_file", bearer_token_file)
            .field("ca_file", ca_file)
            .field("timeout", timeout)
            .field("retry_interval", retry_interval)
            .field("check_interval", check_interval)
            .finish()
    }
}

/// `[schemas]`: local schema files, instead of a registry. Default: none.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SchemasConfig {
    /// `[schemas.impressions]`. Default absent.
    pub impressions: Option<LocalSchema>,
    /// `[schemas.engagements]`. Default absent.
    pub engagements: Option<LocalSchema>,
}

/// One input's local schema. Messages are then the bare encoding (an Avro datum, a Protobuf
/// message), without Confluent's framing, as a producer without a registry writes them.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LocalSchema {
    /// An Avro schema file (`.avsc`), for `avro` inputs. Default empty.
    pub avro_file: String,
    /// A Protobuf `FileDescriptorSet` (`protoc --include_imports --descriptor_set_out=...`),
    /// for `protobuf` inputs. Default empty.
    pub protobuf_descriptor_set: String,
    /// The fully qualified message name in that set (`acme.search.v1.SearchEvent`). Default empty.
    pub protobuf_message: String,
}

/// The cross-field rules of `[mapping]`, `[schema_registry]` and `[schemas]`, and their
/// agreement with `kafka.*_format`; each error names the key. A schema source is required only
/// of inputs read from topics (see [`Reads`]).
pub(super) fn validate(cfg: &Config, reads: Reads) -> Result<(), ConfigError> {
    let inputs = [
        ("impressions", cfg.kafka.impressions_format, cfg.mapping.impressions.is_some(), &cfg.schemas.impressions),
        ("engagements", cfg.kafka.engagements_format, cfg.mapping.engagements.is_some(), &cfg.schemas.engagements),
    ];
    for (input, format, mapped, local) in inputs {
        if mapped && format == InputFormat::Ubi {
            return Err(invalid(
                format!("mapping.{input}"),
                format!(
                    "kafka.{input}_format is \"ubi\", whose fields are fixed; a mapping is for json, avro or protobuf"
                ),
            ));
        }
        match (format, local) {
            (InputFormat::Avro | InputFormat::Protobuf, None)
                if reads == Reads::Topics && cfg.schema_registry.url.is_empty() =>
            {
                return Err(invalid(
                    format!("kafka.{input}_format"),
                    format!(
                        "{format:?} needs schemas: set schema_registry.url, or a local schema in [schemas.{input}]"
                    )
                    .to_lowercase(),
                ));
            }
            (InputFormat::Json | InputFormat::Ubi, Some(_)) => {
                return Err(invalid(
                    format!("schemas.{input}"),
                    format!("is set but kafka.{input}_format is not avro or protobuf"),
                ));
            }
            (InputFormat::Avro, Some(local))
                if local.avro_file.is_empty() || !local.protobuf_descriptor_set.is_empty() =>
            {
                return Err(invalid(
                    format!("schemas.{input}.avro_file"),
                    "an avro input needs its .avsc file here (and no protobuf keys)",
                ));
            }
            (InputFormat::Protobuf, Some(local))
                if local.protobuf_descriptor_set.is_empty()
                    || local.protobuf_message.is_empty()
                    || !local.avro_file.is_empty() =>
            {
                return Err(invalid(
                    format!("schemas.{input}.protobuf_descriptor_set"),
                    "a protobuf input needs protobuf_descriptor_set and protobuf_message here (and no avro_file)",
                ));
            }
            _ => {}
        }
    }
    if let Some(m) = &cfg.mapping.impressions {
        check_fields("mapping.impressions", &m.timestamp, &m.scalars(), &m.lists())?;
        if m.dimensions.len() > super::MAX_DIMENSIONS {
            return Err(invalid(
                "mapping.impressions.dimensions",
                format!("maps {} fields; at most {}", m.dimensions.len(), super::MAX_DIMENSIONS),
            ));
        }
        // A mapped input has no native `dimensions` object: every other field a dimension
        // names must be mapped, or it would read `none` for every impression.
        if let Some(name) = cfg
            .ab
            .dimensions
            .iter()
            .find(|d| !["segment", "query"].contains(&d.as_str()) && !m.dimensions.contains_key(*d))
        {
            return Err(invalid(
                "ab.dimensions",
                format!("names {name:?}, which [mapping.impressions.dimensions] does not map (add {name} = \"/path/to/it\")"),
            ));
        }
    }
    if let Some(m) = &cfg.mapping.engagements {
        check_fields("mapping.engagements", &m.timestamp, &m.scalars(), &[])?;
        for (name, action) in &m.actions {
            if action.is_empty() {
                return Err(invalid(format!("mapping.engagements.actions.\"{name}\""), "must name a rankpulse action"));
            }
            if !cfg.metrics.action_gains.contains_key(action) {
                return Err(invalid(
                    format!("mapping.engagements.actions.\"{name}\""),
                    format!("maps to {action:?}, which metrics.action_gains does not list (it would gain 0)"),
                ));
            }
        }
    }
    let r = &cfg.schema_registry;
    if !(r.url.is_empty() || r.url.starts_with("http://") || r.url.starts_with("https://")) {
        return Err(invalid("schema_registry.url", "must start with http:// or https://"));
    }
    let secrets = [&r.password_env, &r.password_file, &r.bearer_token_env, &r.bearer_token_file];
    if secrets.iter().filter(|s| !s.is_empty()).count() > 1 {
        return Err(invalid(
            "schema_registry.password_env",
            "give one of password_env, password_file, bearer_token_env, bearer_token_file",
        ));
    }
    if r.username.is_empty() != (r.password_env.is_empty() && r.password_file.is_empty()) {
        return Err(invalid(
            "schema_registry.username",
            "basic auth needs both a username and password_env or password_file",
        ));
    }
    if r.timeout.as_millis_i64() == 0 || r.check_interval.as_millis_i64() == 0 {
        return Err(invalid("schema_registry.timeout", "timeout and check_interval must be positive"));
    }
    Ok(())
}

/// A mapping's fields: the timestamp has a declared format, nothing else has one; a single
/// value is not read through a wildcard; a list has at most one.
fn check_fields(
    table: &str,
    timestamp: &FieldSource,
    scalars: &[(&str, Option<&FieldSource>)],
    lists: &[(&str, Option<&FieldSource>)],
) -> Result<(), ConfigError> {
    if timestamp.format.is_none() {
        return Err(invalid(
            format!("{table}.timestamp"),
            "needs its `format` declared: { path = \"...\", format = \"rfc3339\" | \"epoch_seconds\" | \"epoch_millis\" | \"epoch_micros\" | \"rfc3339_or_epoch_millis\" }",
        ));
    }
    if let From::Path(p) = &timestamp.from {
        if p.wildcards() > 0 {
            return Err(invalid(format!("{table}.timestamp"), format!("{p} has a wildcard; a timestamp is one value")));
        }
    }
    for (name, source) in scalars.iter().chain(lists).filter(|(name, _)| *name != "timestamp") {
        let Some(source) = source else { continue };
        if source.format.is_some() {
            return Err(invalid(format!("{table}.{name}"), "only a timestamp has a `format`"));
        }
        if let From::Path(p) = &source.from {
            let (list, wildcards) = (lists.iter().any(|(l, _)| l == name), p.wildcards());
            if !list && wildcards > 0 {
                return Err(invalid(format!("{table}.{name}"), format!("{p} has a wildcard; {name} is one value")));
            }
            if list && wildcards > 1 {
                return Err(invalid(format!("{table}.{name}"), format!("{p} has more than one wildcard")));
            }
        } else if lists.iter().any(|(l, _)| l == name) {
            return Err(invalid(format!("{table}.{name}"), "a list is read from the message body (a `path`)"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(toml_text: &str) -> Result<Config, String> {
        Config::from_toml_with_env(toml_text, "test", std::iter::empty()).map_err(|e| e.to_string())
    }

    #[derive(Debug, Deserialize, Serialize, PartialEq)]
    struct One {
        f: FieldSource,
    }

    fn one(toml_text: &str) -> Result<FieldSource, String> {
        toml::from_str::<One>(toml_text).map(|o| o.f).map_err(|e| e.to_string())
    }

    #[test]
    fn sources_in_both_forms_round_trip() {
        for text in [
            "f = \"/hits/hits/*/_id\"",
            "f = { header = \"x-variant\", default = \"control\" }",
            "f = { key = true }",
            "f = { value = \"exp-1\" }",
            "f = { path = \"/ts\", format = \"epoch_micros\" }",
        ] {
            let parsed = one(text).unwrap();
            let written = toml::to_string(&One { f: parsed.clone() }).unwrap();
            assert_eq!(one(&written).unwrap(), parsed, "{text} -> {written}");
        }
        assert_eq!(one("f = { key = true }").unwrap().describe(), "the message key");
    }

    #[test]
    fn bad_sources_say_what_is_wrong() {
        for (text, says) in [
            ("f = \"query_id\"", "neither a JSON Pointer"),
            ("f = { path = \"/a\", header = \"h\" }", "exactly one of"),
            ("f = { }", "exactly one of"),
            ("f = { value = \"x\", default = \"y\" }", "needs no `default`"),
            ("f = { path = \"/a\", fromat = \"rfc3339\" }", "unknown field `fromat`"),
            ("f = { path = \"/a\", format = \"unix\" }", "unknown variant `unix`"),
            ("f = 3", "a path"),
        ] {
            let err = one(text).unwrap_err();
            assert!(err.contains(says), "{text}: {err}");
        }
    }

    #[test]
    fn mappings_agree_with_their_inputs() {
        let mapping = "[mapping.engagements]\nquery_id = \"/q\"\ndoc_id = \"/d\"\n";
        let ok = format!("{mapping}timestamp = {{ path = \"/t\", format = \"epoch_millis\" }}\n");
        assert!(config(&ok).is_ok());
        for (extra, key) in [
            ("", "mapping.engagements.timestamp"),
            ("[kafka]\nengagements_format = \"ubi\"\n", "mapping.engagements"),
            ("[kafka]\nengagements_format = \"avro\"\n", "kafka.engagements_format"),
            ("[schemas.engagements]\navro_file = \"x.avsc\"\n", "schemas.engagements"),
            ("[schema_registry]\nurl = \"registry:8081\"\n", "schema_registry.url"),
            ("[schema_registry]\nusername = \"u\"\n", "schema_registry.username"),
        ] {
            let text = if extra.is_empty() { format!("{mapping}timestamp = \"/t\"\n") } else { format!("{ok}{extra}") };
            let err = config(&text).unwrap_err();
            assert!(err.contains(&format!("`{key}`")), "{extra}: {err}");
        }
        let wildcard = ok.replace("doc_id = \"/d\"", "doc_id = \"/d/*\"");
        assert!(config(&wildcard).unwrap_err().contains("is one value"));
        let unknown_action = format!("{ok}actions = {{ \"Product Clicked\" = \"clik\" }}\n");
        assert!(config(&unknown_action).unwrap_err().contains("metrics.action_gains"));
        let registry =
            format!("{ok}[kafka]\nengagements_format = \"avro\"\n[schema_registry]\nurl = \"http://r:8081\"\n");
        assert!(config(&registry).is_ok());
    }
}
