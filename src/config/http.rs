//! `[http]`: the listener of the experiment page, `/metrics` and the A/B API, its TLS and its
//! basic-auth users.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `[http]`: the metrics endpoint, and how it is protected (the key names of Prometheus'
/// exporter-toolkit web configuration). `/healthz` and `/readyz` never ask for credentials.
/// `check-config` shows no bcrypt hash.
// Nor does its `Debug` (`HttpConfig::redacted`).
#[derive(Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// Address of the experiment page (`/`), `/metrics`, the A/B API, `/healthz` and
    /// `/readyz`. Default `0.0.0.0:9464`.
    pub listen: String,
    /// A file holding a bearer token (surrounding whitespace ignored) that `/metrics`, the
    /// experiment page and `/api/...` accept as `Authorization: Bearer TOKEN`; re-read when it
    /// changes. Default empty: no bearer token.
    pub bearer_token_file: String,
    /// `[http.tls_server_config]`: HTTPS. Default: plain HTTP (no certificate, every key of
    /// the table at its default).
    pub tls_server_config: TlsServerConfig,
    /// `[http.basic_auth_users]`: user name to bcrypt hash (`$2a$`, `$2b$` or `$2y$`; plain
    /// passwords are refused); `/metrics`, the experiment page and `/api/...` then ask for
    /// `Authorization: Basic`. Default empty: no basic auth.
    pub basic_auth_users: BTreeMap<String, String>,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            listen: "0.0.0.0:9464".into(),
            bearer_token_file: String::new(),
            tls_server_config: TlsServerConfig::default(),
            basic_auth_users: BTreeMap::new(),
        }
    }
}

impl HttpConfig {
    /// Whether `/metrics` and `/api/...` ask for credentials.
    pub fn auth_enabled(&self) -> bool {
        !self.basic_auth_users.is_empty() || !self.bearer_token_file.is_empty()
    }

    /// This section as `check-config` prints it: the bcrypt hashes replaced by a placeholder,
    /// since a printed configuration ends up in terminals, tickets and CI logs.
    pub fn redacted(&self) -> HttpConfig {
        let mut shown = self.clone();
        for hash in shown.basic_auth_users.values_mut() {
            *hash = REDACTED_HASH.into();
        }
        shown
    }
}

impl std::fmt::Debug for HttpConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpConfig")
            .field("listen", &self.listen)
            .field("bearer_token_file", &self.bearer_token_file)
            .field("tls_server_config", &self.tls_server_config)
            .field("basic_auth_users", &self.redacted().basic_auth_users)
            .finish()
    }
}

/// What `check-config` prints in place of a bcrypt hash.
pub const REDACTED_HASH: &str = "(bcrypt hash, not shown)";

/// `[http.tls_server_config]`: serve HTTPS. Certificate, key and client CA are re-read when
/// one of the files changes; a new connection then gets the new certificate.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TlsServerConfig {
    /// The server's certificate chain (PEM, leaf first). Default empty: plain HTTP.
    pub cert_file: String,
    /// The certificate's private key (PEM: PKCS#8, PKCS#1 or SEC1). Default empty; required
    /// with `cert_file`.
    pub key_file: String,
    /// Whether clients must present a certificate. Default `NoClientCert`.
    pub client_auth_type: ClientAuthType,
    /// CA certificates (PEM) client certificates are verified against; required by the
    /// `Verify...` types. Default empty.
    pub client_ca_file: String,
}

impl TlsServerConfig {
    /// Whether HTTPS is on.
    pub fn enabled(&self) -> bool {
        !self.cert_file.is_empty()
    }
}

/// `http.tls_server_config.client_auth_type`, with exporter-toolkit's names (Go's
/// `tls.ClientAuthType`). `RequestClientCert` and `RequireAnyClientCert` accept unverified
/// certificates and are refused by [`super::Config::validate`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClientAuthType {
    /// No client certificate is asked for.
    #[default]
    NoClientCert,
    /// A certificate is asked for but not verified (refused: not implemented).
    RequestClientCert,
    /// A certificate is required but not verified (refused: not implemented).
    RequireAnyClientCert,
    /// A certificate is optional, but one that is given must be signed by `client_ca_file`.
    VerifyClientCertIfGiven,
    /// A certificate signed by `client_ca_file` is required to connect at all.
    RequireAndVerifyClientCert,
}

impl ClientAuthType {
    /// The name as written in the configuration.
    pub fn name(self) -> &'static str {
        match self {
            ClientAuthType::NoClientCert => "NoClientCert",
            ClientAuthType::RequestClientCert => "RequestClientCert",
            ClientAuthType::RequireAnyClientCert => "RequireAnyClientCert",
            ClientAuthType::VerifyClientCertIfGiven => "VerifyClientCertIfGiven",
            ClientAuthType::RequireAndVerifyClientCert => "RequireAndVerifyClientCert",
        }
    }
}
