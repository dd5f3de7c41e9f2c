//! An HTTPS client for tests (rustls with ring, like the server): one GET per connection, with
//! or without a client certificate and an `Authorization` header, reporting the certificate the
//! server presented.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use super::der_fingerprint;

/// A response over HTTPS.
#[derive(Debug)]
pub struct HttpsResponse {
    pub status: u16,
    /// Header names lowercased, in order (a header may repeat).
    pub headers: Vec<(String, String)>,
    pub body: String,
    /// The SHA-256 fingerprint of the certificate the server presented.
    pub server_cert: String,
}

impl HttpsResponse {
    /// Every value of header `name` (lowercase).
    pub fn header(&self, name: &str) -> Vec<&str> {
        self.headers.iter().filter(|(n, _)| n == name).map(|(_, v)| v.as_str()).collect()
    }
}

/// Trusts one CA; presents a client certificate if given one.
pub struct HttpsClient {
    config: Arc<ClientConfig>,
}

impl HttpsClient {
    /// A client trusting `ca` (PEM), presenting `identity` (certificate and key PEM files) when
    /// the server asks for one.
    pub fn new(ca: &Path, identity: Option<(&Path, &Path)>) -> HttpsClient {
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(ca).unwrap() {
            roots.add(cert.unwrap()).unwrap();
        }
        let builder = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        let config = match identity {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let chain = CertificateDer::pem_file_iter(cert).unwrap().map(Result::unwrap).collect();
                builder.with_client_auth_cert(chain, PrivateKeyDer::from_pem_file(key).unwrap()).unwrap()
            }
        };
        HttpsClient { config: Arc::new(config) }
    }

    /// GET `path` on https://127.0.0.1:port (the certificate must hold that IP address), with
    /// an `Authorization` header if given. `Err` holds the TLS or I/O error: a refused
    /// handshake, or a server that does not speak TLS.
    pub fn get(&self, port: u16, path: &str, authorization: Option<&str>) -> Result<HttpsResponse, String> {
        let tcp = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
        tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let name = ServerName::try_from("127.0.0.1").unwrap();
        let connection = ClientConnection::new(self.config.clone(), name).unwrap();
        let mut stream = StreamOwned::new(connection, tcp);
        let auth = authorization.map(|a| format!("Authorization: {a}\r\n")).unwrap_or_default();
        // HTTP/1.0: the server closes the connection after the response, no chunking.
        write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n{auth}\r\n").map_err(|e| format!("write: {e}"))?;
        let mut raw = Vec::new();
        match stream.read_to_end(&mut raw) {
            Ok(_) => {}
            // A server closing without close_notify after a complete response is still a response.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {}
            Err(e) => return Err(format!("read: {e}")),
        }
        let server_cert = stream.conn.peer_certificates().and_then(|c| c.first()).map(|c| der_fingerprint(c));
        let text = String::from_utf8_lossy(&raw).to_string();
        let (head, body) = text.split_once("\r\n\r\n").ok_or_else(|| format!("no HTTP response: {text:?}"))?;
        let mut lines = head.lines();
        let status = lines.next().and_then(|l| l.split_whitespace().nth(1)).and_then(|s| s.parse().ok());
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        Ok(HttpsResponse {
            status: status.ok_or_else(|| format!("no status line: {head:?}"))?,
            headers,
            body: body.to_string(),
            server_cert: server_cert.ok_or("no server certificate")?,
        })
    }
}

/// `Basic` credentials for an `Authorization` header.
pub fn basic_auth(user: &str, password: &str) -> String {
    use base64::Engine as _;
    format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}")))
}
