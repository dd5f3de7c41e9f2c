//! A throwaway PKI for tests, made with rcgen (ring, no CLI needed): a CA, a server certificate
//! for 127.0.0.1 and localhost, and a client certificate signed by the CA, as PEM files that
//! rustls, OpenSSL (stunnel, curl) and Go (Prometheus) all read. Keys are PKCS#8 ECDSA P-256.
//!
//! Also compiled into the server's unit tests (src/output/tls.rs includes this file), so it
//! uses nothing of the other helpers.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    SerialNumber,
};

/// A throwaway PKI for tests: a CA, a server certificate for 127.0.0.1/localhost, and a client
/// certificate signed by the CA, written as PEM files in `dir`.
pub struct TestPki {
    /// The CA's certificate: what clients trust, and `client_ca_file` for client certificates.
    pub ca_cert: PathBuf,
    /// The server's certificate (SANs localhost and 127.0.0.1, common name `localhost`).
    pub server_cert: PathBuf,
    /// Its PKCS#8 private key.
    pub server_key: PathBuf,
    /// A client certificate (common name `prometheus`, extended key usage clientAuth).
    pub client_cert: PathBuf,
    /// Its PKCS#8 private key.
    pub client_key: PathBuf,
    /// The server's certificate followed by its key in one PEM file, as stunnel wants it.
    pub server_combined: PathBuf,
    dir: PathBuf,
    ca: Issuer<'static, KeyPair>,
}

/// Writes `text` to `path` through a rename, so that a reader never sees half a file (as a
/// certificate manager or a Kubernetes Secret update would replace it).
fn replace(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn serial() -> SerialNumber {
    // Positive and nonzero: the first byte's high bit clear.
    let mut bytes: [u8; 16] = std::array::from_fn(|_| rand_byte());
    bytes[0] = (bytes[0] & 0x7f) | 0x01;
    SerialNumber::from_slice(&bytes)
}

/// A random byte without another dependency: ring's system random.
fn rand_byte() -> u8 {
    let mut b = [0u8; 1];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut b).unwrap();
    b[0]
}

impl TestPki {
    /// A new CA, server and client certificate in `dir` (ca.pem, server.pem, server-key.pem,
    /// client.pem, client-key.pem, server-combined.pem).
    pub fn new(dir: &Path) -> TestPki {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, "rankpulse test CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        params.serial_number = Some(serial());
        let key = KeyPair::generate().unwrap();
        let ca_cert = params.self_signed(&key).unwrap();
        let pki = TestPki {
            ca_cert: dir.join("ca.pem"),
            server_cert: dir.join("server.pem"),
            server_key: dir.join("server-key.pem"),
            client_cert: dir.join("client.pem"),
            client_key: dir.join("client-key.pem"),
            server_combined: dir.join("server-combined.pem"),
            dir: dir.to_path_buf(),
            ca: Issuer::new(params, key),
        };
        std::fs::write(&pki.ca_cert, ca_cert.pem()).unwrap();
        pki.reissue_server("localhost");
        let (cert, key) = pki.issue("prometheus", &[], ExtendedKeyUsagePurpose::ClientAuth);
        std::fs::write(&pki.client_cert, cert).unwrap();
        std::fs::write(&pki.client_key, key).unwrap();
        pki
    }

    /// A certificate and key (PEM) signed by the CA.
    fn issue(&self, common_name: &str, sans: &[&str], usage: ExtendedKeyUsagePurpose) -> (String, String) {
        let mut params = CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        params.distinguished_name.push(DnType::CommonName, common_name);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![usage];
        params.serial_number = Some(serial());
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.ca).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    /// A new server certificate and key (new serial, new key) for localhost and 127.0.0.1 with
    /// `common_name`, replacing server.pem, server-key.pem and server-combined.pem (each
    /// through a rename). Returns the new certificate's fingerprint.
    pub fn reissue_server(&self, common_name: &str) -> String {
        let (cert, key) = self.issue(common_name, &["localhost", "127.0.0.1"], ExtendedKeyUsagePurpose::ServerAuth);
        replace(&self.server_key, &key);
        replace(&self.server_cert, &cert);
        replace(&self.server_combined, &format!("{cert}{key}"));
        fingerprint(&self.server_cert)
    }

    /// Another client certificate signed by the CA, as `dir/{name}.pem` and `dir/{name}-key.pem`.
    pub fn issue_client(&self, name: &str, common_name: &str) -> (PathBuf, PathBuf) {
        let (cert, key) = self.issue(common_name, &[], ExtendedKeyUsagePurpose::ClientAuth);
        let (cert_path, key_path) = (self.dir.join(format!("{name}.pem")), self.dir.join(format!("{name}-key.pem")));
        std::fs::write(&cert_path, cert).unwrap();
        std::fs::write(&key_path, key).unwrap();
        (cert_path, key_path)
    }
}

/// The SHA-256 fingerprint (lowercase hex) of a DER certificate.
pub fn der_fingerprint(der: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, der).as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// The SHA-256 fingerprint of the first certificate in a PEM file.
pub fn fingerprint(pem_file: &Path) -> String {
    use rustls_pki_types::pem::PemObject;
    let cert = rustls_pki_types::CertificateDer::from_pem_file(pem_file).unwrap();
    der_fingerprint(&cert)
}
