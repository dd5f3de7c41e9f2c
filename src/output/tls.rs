//! HTTPS for the endpoint: `[http.tls_server_config]`'s certificate, key and client CA loaded
//! into a rustls configuration (the `ring` provider), and loaded again when one of the files
//! changes, so that a renewed certificate is served to new connections without a restart.
//!
//! Every error names the configuration key and the file, never the file's content: a key file
//! pointed at by mistake could hold anything.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::pem::{self, PemObject};
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use super::watch::WatchedFiles;
use crate::config::{ClientAuthType, ConfigError, TlsServerConfig};

/// The configuration section every key below is in.
const SECTION: &str = "http.tls_server_config";

fn invalid(field: &str, problem: String) -> ConfigError {
    ConfigError::Invalid { key: format!("{SECTION}.{field}"), problem }
}

/// rustls with `ring`, explicitly: no process-wide default provider is installed or assumed.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// What went wrong with a PEM file, without quoting it (pki-types' own messages quote lines).
fn pem_problem(path: &str, error: &pem::Error, wanted: &str) -> String {
    let what = match error {
        pem::Error::NoItemsFound => return format!("{path} holds no {wanted}"),
        pem::Error::MissingSectionEnd { .. } => "a PEM section has no END line",
        pem::Error::IllegalSectionStart { .. } => "a PEM BEGIN line is malformed",
        pem::Error::Base64Decode(_) => "a PEM section is not valid base64",
        pem::Error::SectionTooLarge => "a PEM section is too large",
        _ => "it is not valid PEM",
    };
    format!("{path} is not a readable PEM file: {what}")
}

fn read(field: &str, path: &str) -> Result<Vec<u8>, ConfigError> {
    std::fs::read(path).map_err(|e| invalid(field, format!("cannot read {path}: {e}")))
}

fn read_certificates(field: &str, path: &str) -> Result<Vec<CertificateDer<'static>>, ConfigError> {
    let bytes = read(field, path)?;
    let wanted = "PEM certificate (-----BEGIN CERTIFICATE-----)";
    let certificates = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(field, pem_problem(path, &e, wanted)))?;
    if certificates.is_empty() {
        return Err(invalid(field, format!("{path} holds no {wanted}")));
    }
    Ok(certificates)
}

fn read_key(path: &str) -> Result<PrivateKeyDer<'static>, ConfigError> {
    let bytes = read("key_file", path)?;
    let wanted = "unencrypted PEM private key (PKCS#8 PRIVATE KEY, PKCS#1 RSA PRIVATE KEY or SEC1 EC PRIVATE KEY)";
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| invalid("key_file", pem_problem(path, &e, wanted)))
}

/// Reads and checks every file of `tls` (which must be enabled): the certificate chain, its
/// key (which must belong to the certificate) and, for the `Verify...` client auth types, the
/// client CA.
pub(super) fn server_config(tls: &TlsServerConfig) -> Result<Arc<ServerConfig>, ConfigError> {
    let chain = read_certificates("cert_file", &tls.cert_file)?;
    let key = read_key(&tls.key_file)?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions");
    let builder = match tls.client_auth_type {
        ClientAuthType::NoClientCert => builder.with_no_client_auth(),
        ClientAuthType::VerifyClientCertIfGiven | ClientAuthType::RequireAndVerifyClientCert => {
            let path = &tls.client_ca_file;
            let mut roots = RootCertStore::empty();
            for ca in read_certificates("client_ca_file", path)? {
                roots.add(ca).map_err(|e| {
                    invalid("client_ca_file", format!("{path} holds a certificate rustls cannot use as a CA: {e}"))
                })?;
            }
            let mut verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider());
            if tls.client_auth_type == ClientAuthType::VerifyClientCertIfGiven {
                verifier = verifier.allow_unauthenticated();
            }
            let verifier = verifier.build().map_err(|e| invalid("client_ca_file", format!("{path}: {e}")))?;
            builder.with_client_cert_verifier(verifier)
        }
        other => {
            // Refused by `Config::validate` already; here too, in case of a caller that skipped it.
            return Err(invalid("client_auth_type", format!("{} is not supported", other.name())));
        }
    };
    let mut config = builder.with_single_cert(chain, key).map_err(|e| {
        // Mostly a key of another certificate (rustls compares their public keys), else a key
        // type ring cannot sign with.
        invalid(
            "key_file",
            format!("{} is not a usable key for the certificate in {}: {e}", tls.key_file, tls.cert_file),
        )
    })?;
    // HTTP/1.1 is what the server speaks; a client offering h2 as well is told so.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The files' paths, in the order they are watched.
fn paths(tls: &TlsServerConfig) -> Vec<PathBuf> {
    [&tls.cert_file, &tls.key_file, &tls.client_ca_file]
        .into_iter()
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .collect()
}

/// The TLS configuration new connections are accepted with, reloaded when a file changes.
pub(super) struct ReloadingTls {
    settings: TlsServerConfig,
    state: Mutex<(WatchedFiles, TlsAcceptor)>,
}

impl ReloadingTls {
    /// Loads the files (errors name the key and the file).
    pub(super) fn load(tls: &TlsServerConfig) -> Result<ReloadingTls, ConfigError> {
        let watched = WatchedFiles::new(paths(tls));
        let acceptor = TlsAcceptor::from(server_config(tls)?);
        Ok(ReloadingTls { settings: tls.clone(), state: Mutex::new((watched, acceptor)) })
    }

    /// The acceptor for a new connection: the files are looked at (at most once a second) and
    /// loaded again if one changed. A new version that does not load is logged, naming the
    /// file, and the previous configuration goes on serving.
    pub(super) fn acceptor(&self) -> TlsAcceptor {
        let mut state = self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if state.0.changed() {
            match server_config(&self.settings) {
                Ok(config) => {
                    state.1 = TlsAcceptor::from(config);
                    tracing::info!(
                        cert_file = %self.settings.cert_file,
                        "TLS certificate, key and client CA reloaded: new connections get the new certificate"
                    );
                }
                Err(error) => tracing::error!(
                    %error,
                    "the changed TLS files do not load; the previous certificate goes on serving until they change again"
                ),
            }
        }
        state.1.clone()
    }

    /// Forces the next [`ReloadingTls::acceptor`] to look at the files (tests).
    #[cfg(test)]
    pub(super) fn look_now(&self) {
        self.state.lock().unwrap().0.look_now();
    }
}

#[cfg(test)]
#[path = "../../tests/common/certs.rs"]
#[allow(dead_code)] // the integration tests use the rest
pub(super) mod certs;

#[cfg(test)]
mod tests {
    use super::certs::{fingerprint, TestPki};
    use super::*;

    fn settings(pki: &TestPki, client_auth_type: ClientAuthType) -> TlsServerConfig {
        let path = |p: &std::path::Path| p.to_str().unwrap().to_string();
        TlsServerConfig {
            cert_file: path(&pki.server_cert),
            key_file: path(&pki.server_key),
            client_auth_type,
            client_ca_file: if client_auth_type == ClientAuthType::NoClientCert {
                String::new()
            } else {
                path(&pki.ca_cert)
            },
        }
    }

    /// The certificate an acceptor serves, as a client trusting the test CA sees it in a
    /// handshake over loopback: the fingerprint of the leaf.
    async fn served(pki: &TestPki, acceptor: TlsAcceptor) -> String {
        let mut roots = RootCertStore::empty();
        roots.add(CertificateDer::from_pem_file(&pki.ca_cert).unwrap()).unwrap();
        let client = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client_end = tokio::net::TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let server_end = listener.accept().await.unwrap().0;
        let server = tokio::spawn(async move { acceptor.accept(server_end).await.map(drop) });
        let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
        let stream = tokio_rustls::TlsConnector::from(Arc::new(client)).connect(name, client_end).await.unwrap();
        server.await.unwrap().unwrap();
        certs::der_fingerprint(&stream.get_ref().1.peer_certificates().unwrap()[0])
    }

    #[test]
    fn every_client_auth_type_loads_and_a_foreign_key_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let pki = TestPki::new(dir.path());
        for auth in [
            ClientAuthType::NoClientCert,
            ClientAuthType::VerifyClientCertIfGiven,
            ClientAuthType::RequireAndVerifyClientCert,
        ] {
            server_config(&settings(&pki, auth)).unwrap_or_else(|e| panic!("{auth:?}: {e}"));
        }
        // The client's key with the server's certificate.
        let mut wrong = settings(&pki, ClientAuthType::NoClientCert);
        wrong.key_file = pki.client_key.to_str().unwrap().to_string();
        let error = server_config(&wrong).err().unwrap().to_string();
        assert!(
            error.contains("http.tls_server_config.key_file")
                && error.contains("is not a usable key for the certificate"),
            "{error}"
        );
        assert!(!error.contains("PRIVATE KEY-----"), "{error}");
        // A certificate where the key should be.
        wrong.key_file = pki.server_cert.to_str().unwrap().to_string();
        let error = server_config(&wrong).err().unwrap().to_string();
        assert!(error.contains("key_file") && error.contains("holds no unencrypted PEM private key"), "{error}");
        // A key where the client CA should be.
        let mut wrong = settings(&pki, ClientAuthType::RequireAndVerifyClientCert);
        wrong.client_ca_file = pki.server_key.to_str().unwrap().to_string();
        let error = server_config(&wrong).err().unwrap().to_string();
        assert!(error.contains("client_ca_file") && error.contains("holds no PEM certificate"), "{error}");
    }

    #[tokio::test]
    async fn changed_files_are_served_to_new_connections_and_broken_ones_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let pki = TestPki::new(dir.path());
        let tls = ReloadingTls::load(&settings(&pki, ClientAuthType::NoClientCert)).unwrap();
        let first = fingerprint(&pki.server_cert);
        assert_eq!(served(&pki, tls.acceptor()).await, first);

        let second = pki.reissue_server("localhost-2");
        assert_ne!(first, second);
        assert_eq!(served(&pki, tls.acceptor()).await, first, "looked at no more than once a second");
        tls.look_now();
        assert_eq!(served(&pki, tls.acceptor()).await, second, "reloaded");

        // A broken certificate: the previous one goes on serving, and is replaced once the file
        // is fixed.
        std::fs::write(&pki.server_cert, "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n")
            .unwrap();
        tls.look_now();
        assert_eq!(served(&pki, tls.acceptor()).await, second);
        let third = pki.reissue_server("localhost-3");
        tls.look_now();
        assert_eq!(served(&pki, tls.acceptor()).await, third);
    }

    #[test]
    fn unreadable_or_wrong_files_are_refused_naming_key_and_file_not_content() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            path.to_str().unwrap().to_string()
        };
        let secret_line = "-----BEGIN CERTIFICATE----- hunter2";
        let missing = dir.path().join("nope.pem").to_str().unwrap().to_string();
        let garbage = write("garbage.pem", &format!("{secret_line}\nhunter2\n"));
        let empty = write("empty.pem", "nothing here hunter2\n");
        let cases = [
            (
                TlsServerConfig { cert_file: missing.clone(), key_file: empty.clone(), ..Default::default() },
                "cert_file",
                "cannot read",
            ),
            (
                TlsServerConfig { cert_file: empty.clone(), key_file: empty.clone(), ..Default::default() },
                "cert_file",
                "holds no PEM certificate",
            ),
            (
                TlsServerConfig { cert_file: garbage.clone(), key_file: empty.clone(), ..Default::default() },
                "cert_file",
                "not a readable PEM file",
            ),
        ];
        for (tls, field, problem) in cases {
            let error = server_config(&tls).expect_err("refused").to_string();
            assert!(error.contains(&format!("http.tls_server_config.{field}")), "{error}");
            assert!(error.contains(problem), "{error}");
            assert!(!error.contains("hunter2"), "the error quotes the file: {error}");
        }
    }
}
