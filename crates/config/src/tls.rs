//! TLS termination's certificates and settings (rustls, `ring` provider):
//! reading the PEM files of `[server] tls`, the server settings (ALPN,
//! TLS 1.2 and 1.3) and the certificate a reload swaps in. The handshake
//! runs in the server's `http.rs` (tokio-rustls, bounded by `handshake_timeout`);
//! the connection loop's side of a TLS connection is `weir-reactor`'s
//! `transport.rs`. The client side is here too: the settings a proxy
//! route's `wss://` upstream and a guest's HTTPS requests are made with.
//!
//! `ring`, not rustls's default `aws-lc-rs`: it builds with the C compiler
//! alone (aws-lc-sys wants cmake or a long cc build), and both use the
//! CPU's AES-GCM and ChaCha20 assembly.

use arc_swap::ArcSwap;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::io::{self, ErrorKind};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// ALPN protocols offered, in the server's order of preference: HTTP/2
/// (WebSockets as streams, RFC 8441), then HTTP/1.1.
pub const ALPN_H2: &[u8] = b"h2";
pub const ALPN_HTTP1: &[u8] = b"http/1.1";

/// Ciphertext rustls may hold for one connection before a write waits for
/// the socket: a 256 KiB echo batch is encrypted and handed to the kernel
/// in one `sendmsg` instead of four.
pub const SEND_BUFFER_BYTES: usize = 512 << 10;

/// `[server] tls`: where the certificate chain and its private key are
/// (PEM; relative paths start at the routes file's directory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The routes file's line, for messages.
    pub line: usize,
}

/// Why a certificate could not be used; the message names the file.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("cannot read the TLS certificate {path}: {source}")]
    CertUnreadable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read the TLS key {path}: {source}")]
    KeyUnreadable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the TLS certificate {path} is not valid PEM: {detail}")]
    BadCertPem { path: PathBuf, detail: String },
    #[error("the TLS certificate file {path} holds no certificate (expected \"-----BEGIN CERTIFICATE-----\")")]
    NoCert { path: PathBuf },
    #[error("the TLS key {path} is not a PEM private key (PKCS#8, PKCS#1 or SEC1): {detail}")]
    BadKey { path: PathBuf, detail: String },
    #[error("the TLS key {key} does not belong to the certificate {cert}: {detail}")]
    Mismatch {
        cert: PathBuf,
        key: PathBuf,
        detail: String,
    },
}

/// Reads and checks the chain and key of `files`: PEM syntax, at least one
/// certificate, a key type the provider signs with, and that the key is the
/// one the first certificate names.
pub fn load(files: &TlsFiles) -> Result<Arc<CertifiedKey>, CertError> {
    let cert_pem = std::fs::read(&files.cert).map_err(|source| CertError::CertUnreadable {
        path: files.cert.clone(),
        source,
    })?;
    let key_pem = std::fs::read(&files.key).map_err(|source| CertError::KeyUnreadable {
        path: files.key.clone(),
        source,
    })?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| CertError::BadCertPem {
            path: files.cert.clone(),
            detail: e.to_string(),
        })?;
    if chain.is_empty() {
        return Err(CertError::NoCert {
            path: files.cert.clone(),
        });
    }
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| CertError::BadKey {
        path: files.key.clone(),
        detail: e.to_string(),
    })?;
    let provider = provider();
    let key = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| CertError::BadKey {
            path: files.key.clone(),
            detail: e.to_string(),
        })?;
    let certified = CertifiedKey::new(chain, key);
    certified.keys_match().map_err(|e| CertError::Mismatch {
        cert: files.cert.clone(),
        key: files.key.clone(),
        detail: e.to_string(),
    })?;
    Ok(Arc::new(certified))
}

/// The crypto provider (see the module docs).
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The certificate handshakes use now; a reload swaps it, and handshakes
/// already past the hello keep the one they got.
#[derive(Debug)]
struct Current(ArcSwap<CertifiedKey>);

impl ResolvesServerCert for Current {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.load_full())
    }
}

/// The gateway's TLS: its settings and the certificate reloads replace.
pub struct Tls {
    files: TlsFiles,
    current: Arc<Current>,
    /// The settings every handshake uses (the server wraps them in its
    /// acceptor; a reload swaps the certificate beneath them).
    server: Arc<rustls::ServerConfig>,
}

impl Tls {
    /// Loads the certificate and builds the server settings; `alpn` lists
    /// the protocols offered, preferred first.
    pub fn new(files: &TlsFiles, alpn: &[&[u8]]) -> Result<Tls, CertError> {
        let current = Arc::new(Current(ArcSwap::new(load(files)?)));
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .expect("ring supports TLS 1.2 and 1.3")
            .with_no_client_auth()
            .with_cert_resolver(current.clone());
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(Tls {
            files: files.clone(),
            current,
            server: Arc::new(config),
        })
    }

    /// The server settings, for the listener's acceptor.
    pub fn server_config(&self) -> &Arc<rustls::ServerConfig> {
        &self.server
    }

    /// Reads the certificate files again and, if they are valid, serves the
    /// new certificate to handshakes from now on; connections already open
    /// keep their session. An invalid pair changes nothing.
    pub fn reload(&self) -> Result<(), CertError> {
        let next = load(&self.files)?;
        self.current.0.store(next);
        Ok(())
    }

    /// The certificate file, for logs.
    pub fn cert_path(&self) -> &Path {
        &self.files.cert
    }
}

// The client side: a proxy route's `wss://` upstream and a guest's HTTPS
// requests.

/// Why a CA file cannot check servers' certificates; the caller names the
/// setting (`upstream_ca`, `outbound_ca`) before it.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    #[error("{}: {source}", path.display())]
    Unreadable {
        path: PathBuf,
        source: rustls_pki_types::pem::Error,
    },
    #[error("{}: no certificate in the file", path.display())]
    NoCert { path: PathBuf },
    #[error("{}: {source}", path.display())]
    Refused {
        path: PathBuf,
        source: rustls::Error,
    },
}

/// The TLS settings of a `wss://` route: the roots its upstream's
/// certificate is checked against (`upstream_ca`, else webpki-roots: the
/// Mozilla set, the same on every machine), HTTP/1.1 by ALPN.
pub fn client_config(upstream_ca: Option<&Path>) -> Result<Arc<rustls::ClientConfig>, CaError> {
    let mut roots = rustls::RootCertStore::empty();
    match upstream_ca {
        Some(path) => {
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|source| CaError::Unreadable {
                    path: path.to_owned(),
                    source,
                })?;
            if certs.is_empty() {
                return Err(CaError::NoCert {
                    path: path.to_owned(),
                });
            }
            for cert in certs {
                roots.add(cert).map_err(|source| CaError::Refused {
                    path: path.to_owned(),
                    source,
                })?;
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
    .expect("ring supports TLS 1.2 and 1.3")
    .with_root_certificates(roots)
    .with_no_client_auth();
    // The upgrade is an HTTP/1.1 request.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The name the upstream's certificate must carry: its host (a DNS name or
/// an IP address).
pub fn server_name(host: &str) -> io::Result<ServerName<'static>> {
    ServerName::try_from(host.to_string())
        .map_err(|e| io::Error::new(ErrorKind::InvalidInput, e.to_string()))
}
