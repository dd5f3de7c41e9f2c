//! A client of a Confluent-compatible Schema Registry's REST API: `GET /schemas/ids/{id}` for
//! a message's schema, `GET /subjects/{subject}/versions/{version}` for the schemas it
//! references, with the connection's TLS and basic or bearer authentication. Blocking (ureq):
//! it runs on the thread that decodes, once per schema id.

use std::time::Duration;

use serde::Deserialize;

use super::SchemaError;
use crate::config::SchemaRegistryConfig;

/// A schema as the registry returns it.
#[derive(Debug, Clone, Deserialize)]
pub struct RegisteredSchema {
    /// The schema's text: Avro JSON, or Protobuf (`.proto` text, or a base64
    /// `FileDescriptorProto` as some clients register it).
    pub schema: String,
    /// `AVRO` (the default when absent), `PROTOBUF` or `JSON`.
    #[serde(rename = "schemaType", default = "avro")]
    pub schema_type: String,
    /// Named schemas it imports or refers to.
    #[serde(default)]
    pub references: Vec<Reference>,
}

fn avro() -> String {
    "AVRO".into()
}

/// A reference from one schema to another registered one.
#[derive(Debug, Clone, Deserialize)]
pub struct Reference {
    /// The name the referring schema uses: an Avro full name, a Protobuf import path.
    pub name: String,
    pub subject: String,
    pub version: i64,
}

/// The registry's address and credentials, and an HTTP agent.
pub struct Registry {
    /// Base URL without a trailing slash.
    base: String,
    /// The `Authorization` header's value, when the registry needs one.
    authorization: Option<String>,
    agent: ureq::Agent,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").field("base", &self.base).finish_non_exhaustive()
    }
}

/// What a request came back with.
pub enum Answer<T> {
    Found(T),
    /// 404: the registry has no such id or subject version.
    NotFound(String),
}

impl Registry {
    /// A client for `[schema_registry]`: reads the secret and the CA file now, so that a
    /// mistake there is an error at start, not a rejection per message.
    pub fn new(cfg: &SchemaRegistryConfig) -> Result<Registry, SchemaError> {
        let secret = |env: &str, file: &str| -> Result<Option<String>, SchemaError> {
            if !env.is_empty() {
                return std::env::var(env)
                    .map(Some)
                    .map_err(|_| SchemaError::Setup(format!("environment variable {env} is not set")));
            }
            if !file.is_empty() {
                let text =
                    std::fs::read_to_string(file).map_err(|e| SchemaError::Setup(format!("reading {file}: {e}")))?;
                return Ok(Some(text.strip_suffix('\n').unwrap_or(&text).to_string()));
            }
            Ok(None)
        };
        use base64::Engine as _;
        let authorization = match (
            secret(&cfg.password_env, &cfg.password_file)?,
            secret(&cfg.bearer_token_env, &cfg.bearer_token_file)?,
        ) {
            (Some(password), _) => Some(format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{}:{password}", cfg.username))
            )),
            (None, Some(token)) => Some(format!("Bearer {token}")),
            (None, None) => None,
        };
        let mut tls = ureq::tls::TlsConfig::builder().provider(ureq::tls::TlsProvider::Rustls);
        if !cfg.ca_file.is_empty() {
            let pem = std::fs::read(&cfg.ca_file)
                .map_err(|e| SchemaError::Setup(format!("reading schema_registry.ca_file {}: {e}", cfg.ca_file)))?;
            let certs = ureq::tls::parse_pem(&pem)
                .filter_map(|item| match item {
                    Ok(ureq::tls::PemItem::Certificate(c)) => Some(Ok(c)),
                    Ok(_) => None,
                    Err(e) => Some(Err(e)),
                })
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| SchemaError::Setup(format!("schema_registry.ca_file {}: {e}", cfg.ca_file)))?;
            if certs.is_empty() {
                return Err(SchemaError::Setup(format!(
                    "schema_registry.ca_file {} holds no certificate",
                    cfg.ca_file
                )));
            }
            tls = tls.root_certs(ureq::tls::RootCerts::Specific(std::sync::Arc::new(certs)));
        }
        let config = ureq::Agent::config_builder()
            .timeout_global(Some(cfg.timeout.as_duration().max(Duration::from_millis(1))))
            .http_status_as_error(false)
            .tls_config(tls.build())
            .build();
        Ok(Registry {
            base: cfg.url.trim_end_matches('/').to_string(),
            authorization,
            agent: ureq::Agent::new_with_config(config),
        })
    }

    /// The base URL, for messages.
    pub fn url(&self) -> &str {
        &self.base
    }

    /// `GET /schemas/ids/{id}`.
    pub fn schema_by_id(&self, id: u32) -> Result<Answer<RegisteredSchema>, SchemaError> {
        self.get(&format!("/schemas/ids/{id}"))
    }

    /// `GET /subjects/{subject}/versions/{version}`, for a reference.
    pub fn subject_version(&self, subject: &str, version: i64) -> Result<Answer<RegisteredSchema>, SchemaError> {
        let subject = percent_encode(subject);
        let version = if version < 0 { "latest".to_string() } else { version.to_string() };
        self.get(&format!("/subjects/{subject}/versions/{version}"))
    }

    /// `GET /schemas/types`: answered by any registry that is up, whatever the caller may read.
    pub fn probe(&self) -> Result<(), SchemaError> {
        self.get::<serde_json::Value>("/schemas/types").map(|_| ())
    }

    fn get<T: for<'de> Deserialize<'de>>(&self, path: &str) -> Result<Answer<T>, SchemaError> {
        let url = format!("{}{path}", self.base);
        let mut request =
            self.agent.get(&url).header("Accept", "application/vnd.schemaregistry.v1+json, application/json");
        if let Some(value) = &self.authorization {
            request = request.header("Authorization", value);
        }
        let unreachable = |e: String| SchemaError::Unreachable(format!("GET {url}: {e}"));
        let mut response = request.call().map_err(|e| unreachable(e.to_string()))?;
        let status = response.status().as_u16();
        // A schema is small; a body beyond this is not a registry's answer.
        let body = response
            .body_mut()
            .with_config()
            .limit(16 << 20)
            .read_to_string()
            .map_err(|e| unreachable(e.to_string()))?;
        match status {
            200 => serde_json::from_str(&body)
                .map(Answer::Found)
                .map_err(|e| SchemaError::Invalid(format!("GET {url}: not a registry answer: {e}"))),
            404 => Ok(Answer::NotFound(format!("GET {url}: 404 {}", body.chars().take(200).collect::<String>()))),
            401 | 403 => Err(SchemaError::Unreachable(format!(
                "GET {url}: {status} (check schema_registry's credentials): {}",
                body.chars().take(200).collect::<String>()
            ))),
            _ => Err(unreachable(format!("{status} {}", body.chars().take(200).collect::<String>()))),
        }
    }
}

/// A subject name in a URL path.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_are_escaped_in_paths() {
        assert_eq!(percent_encode("search-events-value"), "search-events-value");
        assert_eq!(percent_encode("acme/search.proto"), "acme%2Fsearch.proto");
    }

    #[test]
    fn a_registry_answer_defaults_to_avro_without_references() {
        let s: RegisteredSchema = serde_json::from_str(r#"{"schema":"\"string\""}"#).unwrap();
        assert_eq!((s.schema_type.as_str(), s.references.len()), ("AVRO", 0));
    }
}
