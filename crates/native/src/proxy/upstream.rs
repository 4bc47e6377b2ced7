//! The upstream connection of a proxied client: plain TCP (`ws://`) or TLS
//! (`wss://`, a rustls client session over the socket). Both sides of the
//! proxy use it the same way, by readiness and non-blocking calls on the
//! worker's thread: a TLS read pulls the records the socket holds into the
//! session and copies out the plaintext; a TLS write encrypts into the
//! session and hands the records to the socket, and what the socket did
//! not take stays in the session (`wants_write`) until it is writable.

use rustls::ClientConnection;
use std::cell::RefCell;
use std::io::{self, ErrorKind, IoSlice, Read, Write};
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
    pub(crate) fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        self.try_write_vectored(&[IoSlice::new(buf)])
    }

    pub(crate) fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
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
