//! The upstream connection of a proxied client: plain TCP (`ws://`) or TLS
//! (`wss://`, a rustls client session over the socket). Both sides of the
//! proxy use it the same way, by readiness and non-blocking calls on the
//! worker's thread: a TLS read pulls the records the socket holds into the
//! session and copies out the plaintext; a TLS write encrypts into the
//! session and hands the records to the socket, and what the socket did
//! not take stays in the session (`wants_write`) until it is writable.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::ClientConnection;
use std::cell::RefCell;
use std::io::{self, ErrorKind, IoSlice, Read, Write};
use std::path::Path;
use std::sync::Arc;
use tokio::net::TcpStream;
use weir_reactor::socket::{read_drained, try_send_vectored};

/// A proxied connection's upstream socket.
pub enum UpstreamIo {
    Tcp(TcpStream),
    Tls {
        tcp: TcpStream,
        /// Only this connection's two sides touch it, on one thread, and
        /// never across an await.
        tls: Box<RefCell<ClientConnection>>,
    },
}

/// The TLS settings of a `wss://` route: the roots its upstream's
/// certificate is checked against (`upstream_ca`, else webpki-roots: the
/// Mozilla set, the same on every machine), HTTP/1.1 by ALPN.
pub fn client_config(upstream_ca: Option<&Path>) -> Result<Arc<rustls::ClientConfig>, String> {
    let mut roots = rustls::RootCertStore::empty();
    match upstream_ca {
        Some(path) => {
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("upstream_ca {}: {e}", path.display()))?;
            if certs.is_empty() {
                return Err(format!(
                    "upstream_ca {}: no certificate in the file",
                    path.display()
                ));
            }
            for cert in certs {
                roots
                    .add(cert)
                    .map_err(|e| format!("upstream_ca {}: {e}", path.display()))?;
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

/// `Read`/`Write` over tokio's non-blocking calls, which clear the socket's
/// readiness when they would block.
struct TryIo<'a>(&'a TcpStream);

impl Read for TryIo<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.try_read(buf)
    }
}

impl Write for TryIo<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.try_write(buf)
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.0.try_write_vectored(bufs)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl UpstreamIo {
    fn tcp(&self) -> &TcpStream {
        match self {
            UpstreamIo::Tcp(tcp) | UpstreamIo::Tls { tcp, .. } => tcp,
        }
    }

    /// Waits until a read may find something (TLS: plaintext the session
    /// already holds counts). One task waits at a time (the client's, then
    /// the closing task): the socket's own waker slot, not tokio's list of
    /// waiters, which takes a lock to join and another to leave each time
    /// the connection loop drops the wait.
    pub async fn readable(&self) -> io::Result<()> {
        if let UpstreamIo::Tls { tls, .. } = self {
            let held = match tls.borrow_mut().process_new_packets() {
                Ok(state) => state.plaintext_bytes_to_read() > 0 || state.peer_has_closed(),
                Err(_) => true,
            };
            if held {
                return Ok(());
            }
        }
        std::future::poll_fn(|cx| self.tcp().poll_read_ready(cx)).await
    }

    /// Waits until the socket takes more (one task at a time, as
    /// `readable`).
    pub async fn writable(&self) -> io::Result<()> {
        std::future::poll_fn(|cx| self.tcp().poll_write_ready(cx)).await
    }

    /// One non-blocking read of plaintext: Ok(0) at the end, WouldBlock
    /// when nothing is there yet.
    pub fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        let (tcp, tls) = match self {
            UpstreamIo::Tcp(tcp) => return read_drained(tcp, buf),
            UpstreamIo::Tls { tcp, tls } => (tcp, tls),
        };
        let mut tls = tls.borrow_mut();
        loop {
            match tls.reader().read(buf) {
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                other => return other,
            }
            let n = tls.read_tls(&mut TryIo(tcp))?;
            if let Err(e) = tls.process_new_packets() {
                // The alert rustls queued tells the upstream why.
                let _ = tls.write_tls(&mut TryIo(tcp));
                return Err(io::Error::new(ErrorKind::InvalidData, e));
            }
            if n > 0 && tls.wants_write() {
                // Answers the session owes (a key update).
                let _ = tls.write_tls(&mut TryIo(tcp));
            }
        }
    }

    /// Writes what the socket takes now (TLS: what the session takes, its
    /// records then sent as far as the socket allows). WouldBlock when
    /// nothing was taken.
    pub fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        self.try_write_vectored(&[IoSlice::new(buf)])
    }

    pub fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let (tcp, tls) = match self {
            UpstreamIo::Tcp(tcp) => return try_send_vectored(tcp, bufs),
            UpstreamIo::Tls { tcp, tls } => (tcp, tls),
        };
        let mut tls = tls.borrow_mut();
        send_records(tcp, &mut tls)?;
        let n = tls.writer().write_vectored(bufs)?;
        send_records(tcp, &mut tls)?;
        if n == 0 && bufs.iter().any(|b| !b.is_empty()) {
            return Err(ErrorKind::WouldBlock.into());
        }
        Ok(n)
    }

    /// TLS records the socket has not taken yet wait in the session.
    pub fn wants_write(&self) -> bool {
        match self {
            UpstreamIo::Tcp(_) => false,
            UpstreamIo::Tls { tls, .. } => tls.borrow().wants_write(),
        }
    }

    /// Sends what the session holds as far as the socket takes it.
    pub fn flush(&self) -> io::Result<()> {
        match self {
            UpstreamIo::Tcp(_) => Ok(()),
            UpstreamIo::Tls { tcp, tls } => send_records(tcp, &mut tls.borrow_mut()),
        }
    }

    /// No more writes: TLS's close_notify (as far as the socket takes it),
    /// then FIN.
    pub fn shutdown_write(&self) {
        if let UpstreamIo::Tls { tcp, tls } = self {
            let mut tls = tls.borrow_mut();
            tls.send_close_notify();
            let _ = send_records(tcp, &mut tls);
        }
        weir_reactor::socket::shutdown_write(self.tcp());
    }
}

/// Hands the session's records to the socket until it has none or the
/// socket would block.
fn send_records(tcp: &TcpStream, tls: &mut ClientConnection) -> io::Result<()> {
    while tls.wants_write() {
        match tls.write_tls(&mut TryIo(tcp)) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
