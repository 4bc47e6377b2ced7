//! What a connection reads and writes: a TCP socket, or TLS over one. The
//! TLS session (rustls, ring) is driven by hand on the same non-blocking
//! socket, so the epoll loops (`engine`, `connect`) serve `wss://` unchanged:
//! a read pulls records from the socket and returns plaintext, a write
//! encrypts (a `writev` of several frames becomes one record up to 16 KiB)
//! and hands the records to the socket, keeping what it did not take.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, SignatureScheme};
use std::io::{self, IoSlice, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

/// How the client checks the server's certificate.
#[derive(Clone, Debug)]
pub enum Trust {
    /// Trust the certificates in this PEM file (a CA, or the server's own
    /// self-signed certificate); the name in the URL must match.
    CaFile(String),
    /// Accept any certificate (signatures are still checked): loopback
    /// benchmarks against a throwaway certificate.
    Insecure,
}

/// The TLS 1.3 cipher suites `--tls-suites` may name.
pub const SUITE_NAMES: &[(&str, rustls::CipherSuite)] = &[
    ("aes128", rustls::CipherSuite::TLS13_AES_128_GCM_SHA256),
    ("aes256", rustls::CipherSuite::TLS13_AES_256_GCM_SHA384),
    (
        "chacha20",
        rustls::CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
    ),
];

/// A client TLS configuration: TLS 1.2 and 1.3, ring, no session
/// resumption (every connection pays a full handshake, which is what the
/// `connect` mode measures), ALPN as given. `suites` (names from
/// [`SUITE_NAMES`], in order of preference) limits what is offered, so
/// every server compared uses the same cipher (servers choose differently
/// from the same offer: rustls takes the client's first, BoringSSL prefers
/// AES-128-GCM); empty: rustls's defaults.
pub fn client_config(
    trust: &Trust,
    alpn: &[&[u8]],
    suites: &[String],
) -> Result<Arc<ClientConfig>, String> {
    let mut provider = rustls::crypto::ring::default_provider();
    if !suites.is_empty() {
        let mut chosen = Vec::new();
        for name in suites {
            let id = SUITE_NAMES
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, id)| *id)
                .ok_or_else(|| {
                    let known: Vec<_> = SUITE_NAMES.iter().map(|(n, _)| *n).collect();
                    format!("unknown TLS suite {name:?} (known: {})", known.join(", "))
                })?;
            let suite = provider
                .cipher_suites
                .iter()
                .find(|s| s.suite() == id)
                .copied()
                .ok_or_else(|| format!("{name}: not in the ring provider"))?;
            chosen.push(suite);
        }
        provider.cipher_suites = chosen;
    }
    let provider = Arc::new(provider);
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS versions: {e}"))?;
    let mut config = match trust {
        Trust::CaFile(path) => {
            let pem = std::fs::read(path).map_err(|e| format!("read {path}: {e}"))?;
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| format!("{path}: {e}"))?;
                roots
                    .add(cert)
                    .map_err(|e| format!("{path}: certificate refused: {e}"))?;
            }
            if roots.is_empty() {
                return Err(format!("{path}: no certificate in it"));
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        Trust::Insecure => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
            .with_no_client_auth(),
    };
    config.resumption = rustls::client::Resumption::disabled();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
}

/// `--insecure`: any certificate for any name, but the handshake's
/// signatures must still be valid for the certificate presented.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The server name to present (SNI) and check: an IP address or a DNS name.
pub fn server_name(host: &str) -> Result<ServerName<'static>, String> {
    ServerName::try_from(host.to_string()).map_err(|e| format!("server name {host:?}: {e}"))
}

/// One connection's byte stream.
pub enum Stream {
    Tcp(TcpStream),
    Tls(Box<TlsStream>),
}

/// A rustls client session over a socket.
pub struct TlsStream {
    sock: TcpStream,
    tls: ClientConnection,
}

impl From<TcpStream> for Stream {
    fn from(s: TcpStream) -> Self {
        Stream::Tcp(s)
    }
}

impl Stream {
    /// Starts a TLS session on `sock` (connected or still connecting); the
    /// handshake runs as the stream is read and written.
    pub fn tls(
        sock: TcpStream,
        config: &Arc<ClientConfig>,
        name: ServerName<'static>,
    ) -> Result<Self, String> {
        let tls = ClientConnection::new(config.clone(), name).map_err(|e| format!("TLS: {e}"))?;
        Ok(Stream::Tls(Box::new(TlsStream { sock, tls })))
    }

    pub fn socket(&self) -> &TcpStream {
        match self {
            Stream::Tcp(s) => s,
            Stream::Tls(t) => &t.sock,
        }
    }

    /// Whether a read shorter than the buffer means the socket is drained
    /// (true for TCP; TLS hands out plaintext a record at a time).
    pub fn short_read_drains(&self) -> bool {
        matches!(self, Stream::Tcp(_))
    }

    /// Encrypted bytes wait for the socket.
    pub fn wants_write(&self) -> bool {
        match self {
            Stream::Tcp(_) => false,
            Stream::Tls(t) => t.tls.wants_write(),
        }
    }

    /// Hands the socket what TLS has waiting. `Ok(true)` when nothing is
    /// left; `Ok(false)` when the socket is full (or still connecting).
    pub fn push_pending(&mut self) -> io::Result<bool> {
        match self {
            Stream::Tcp(_) => Ok(true),
            Stream::Tls(t) => t.push(),
        }
    }

    /// Completes the TLS handshake with blocking I/O (a no-op for TCP).
    pub fn handshake(&mut self) -> io::Result<()> {
        if let Stream::Tls(t) = self {
            while t.tls.is_handshaking() {
                t.tls.complete_io(&mut t.sock)?;
            }
        }
        Ok(())
    }

    /// "TLSv1_3 TLS13_AES_128_GCM_SHA256, ALPN h2" once the handshake is
    /// done; `None` for TCP.
    pub fn describe(&self) -> Option<String> {
        match self {
            Stream::Tcp(_) => None,
            Stream::Tls(t) => Some(describe(&t.tls)),
        }
    }

    /// The protocol ALPN settled on, if any.
    pub fn alpn(&self) -> Option<&[u8]> {
        match self {
            Stream::Tcp(_) => None,
            Stream::Tls(t) => t.tls.alpn_protocol(),
        }
    }
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> RawFd {
        self.socket().as_raw_fd()
    }
}

impl TlsStream {
    fn push(&mut self) -> io::Result<bool> {
        while self.tls.wants_write() {
            match self.tls.write_tls(&mut self.sock) {
                Ok(_) => {}
                Err(e) if would_block(&e) => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.tls.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The peer ended TCP without close_notify: an EOF all the same.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                Err(e) => return Err(e),
            }
            self.tls.read_tls(&mut self.sock)?;
            if let Err(e) = self.tls.process_new_packets() {
                // Tell the server why (an alert), then give up.
                let _ = self.push();
                return Err(io::Error::new(io::ErrorKind::InvalidData, e));
            }
            // Handshake messages, key updates: out as soon as the socket takes them.
            self.push()?;
        }
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        // Records already made go first, so rustls never holds more than
        // one batch.
        if !self.push()? {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = self.tls.writer().write_vectored(bufs)?;
        self.push()?;
        if n == 0 && bufs.iter().any(|b| !b.is_empty()) {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(n)
    }
}

/// The version, cipher suite and ALPN a session settled on.
pub fn describe(tls: &ClientConnection) -> String {
    let alpn = tls
        .alpn_protocol()
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .unwrap_or_else(|| "-".into());
    match (tls.protocol_version(), tls.negotiated_cipher_suite()) {
        (Some(v), Some(s)) => format!("{v:?} {:?}, ALPN {alpn}", s.suite()),
        _ => "handshake not done".into(),
    }
}

/// A non-blocking socket that cannot take bytes yet (full, or connecting).
fn would_block(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock || e.raw_os_error() == Some(libc::ENOTCONN)
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Tls(t) => t.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_vectored(&[IoSlice::new(buf)])
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write_vectored(bufs),
            Stream::Tls(t) => t.write_vectored(bufs),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self.push_pending()? {
            true => Ok(()),
            false => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}
