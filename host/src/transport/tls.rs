//! # HTTPS: the certificate and key `serve --tls-cert/--tls-key` serve with
//!
//! rustls with ring (the host's one crypto stack), TLS 1.2 and 1.3, HTTP/1.1 by ALPN.
//! The files are read once at startup; anything wrong with them is a startup error that
//! names the file and what is wrong, never the key's bytes.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Accepts TLS connections with one certificate chain.
#[derive(Clone)]
pub struct Tls {
    acceptor: tokio_rustls::TlsAcceptor,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tls")
    }
}

/// Why the certificate or key cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading the TLS certificate {path}: {reason}")]
    Certificate { path: PathBuf, reason: String },
    #[error("the TLS certificate file {0} holds no PEM certificate")]
    NoCertificate(PathBuf),
    #[error("reading the TLS key {path}: {reason} (a PEM private key is expected: PKCS#8, PKCS#1 or SEC1)")]
    Key { path: PathBuf, reason: String },
    #[error("the TLS certificate {cert} and key {key} cannot be served together: {reason}")]
    Mismatch { cert: PathBuf, key: PathBuf, reason: String },
}

impl Tls {
    /// Read a PEM certificate chain (leaf first) and its PEM private key.
    pub fn from_pem_files(cert: &Path, key: &Path) -> Result<Self, TlsError> {
        let certificate = |reason: String| TlsError::Certificate { path: cert.to_owned(), reason };
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
            .map_err(|error| certificate(error.to_string()))?
            .collect::<Result<_, _>>()
            .map_err(|error| certificate(error.to_string()))?;
        if chain.is_empty() {
            return Err(TlsError::NoCertificate(cert.to_owned()));
        }
        // The error names what went wrong (missing, no key section, bad encoding); it
        // never carries the key's bytes.
        let private_key = PrivateKeyDer::from_pem_file(key)
            .map_err(|error| TlsError::Key { path: key.to_owned(), reason: error.to_string() })?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mismatch =
            |reason: String| TlsError::Mismatch { cert: cert.to_owned(), key: key.to_owned(), reason };
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("ring supports the default versions")
            .with_no_client_auth()
            .with_single_cert(chain, private_key)
            .map_err(|error| mismatch(error.to_string()))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self { acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)) })
    }

    pub(crate) fn acceptor(&self) -> &tokio_rustls::TlsAcceptor {
        &self.acceptor
    }
}
