//! What the connection loop reads from and writes to: a [`Transport`]. The
//! loop is generic over it (like over the behaviour), so plain TCP keeps
//! its syscall-for-syscall path and TLS gets its own compiled loop:
//!
//! - [`Tcp`]: the socket itself (`reactor/socket.rs`); producers on other
//!   threads may write into it directly (`outbound`).
//! - [`Tls`]: a rustls session over the socket. One read takes the
//!   ciphertext the socket holds (one recv of up to what the receive buffer
//!   has room for), decrypts it and copies the plaintext into
//!   the connection's receive buffer (decode and the behaviour then work in
//!   place as over TCP); a batch of replies is encrypted into rustls's send
//!   buffer and handed to the kernel in one `sendmsg` on flush. Only the
//!   connection's loop touches the session, so producers queue their
//!   frames (no direct writes).
//! - [`H2Stream`]: one WebSocket of an HTTP/2 connection (RFC 8441),
//!   hyper's upgraded stream. hyper's connection task owns the socket and
//!   the HTTP/2 framing; the loop reads the stream's DATA (a copy out of
//!   hyper's buffer, as a `recv` is a copy out of the kernel's) and writes
//!   one DATA frame per batch. Flow control gives backpressure per stream:
//!   hyper returns window to the client only for bytes the loop read, and
//!   a write waits for the client's window.
//!
//! [`Io`] is what the server hands a behaviour after the upgrade.

use super::outbound::AnySocket;
use super::socket::{self, Socket, Writer};
use rustls::ServerConnection;
use std::future::Future;
use std::io::{ErrorKind, IoSlice, Read, Write};
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncWrite, Interest};
use tokio::net::TcpStream;

/// An upgraded connection, as the server hands it to the loop.
pub enum Io {
    Tcp(TcpStream),
    /// The socket and its TLS session, past the handshake.
    Tls(TcpStream, Box<ServerConnection>),
    /// A WebSocket stream of an HTTP/2 connection.
    H2(hyper_util::rt::TokioIo<hyper::upgrade::Upgraded>),
}

/// A connection's byte stream, as the loop sees it.
pub trait Transport: Sized + 'static {
    /// The loop's writer for one batch; `flush` ends every batch.
    type Writer<'a>: AsyncWrite + Unpin
    where
        Self: 'a;

    /// Resolves when a read may find bytes (or the end).
    fn readable(&mut self) -> impl Future<Output = std::io::Result<()>>;

    /// One non-blocking read into `buf`: `WouldBlock` when nothing is
    /// there, 0 at the end of the stream.
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize>;

    fn writer(&mut self) -> Self::Writer<'_>;

    /// Ends the sending side after what was written (FIN; for TLS a
    /// close_notify first).
    fn shutdown_write(&mut self);

    /// While reads are blocked: resolves true once bytes wait unread (the
    /// client is there), false when the client is gone.
    fn data_waiting(&mut self) -> impl Future<Output = bool>;

    /// The client hung up, though unread bytes wait (TCP's state).
    fn hung_up(&self) -> bool;

    /// The socket producers may write into directly (TCP only).
    fn direct_socket(&self) -> Option<Weak<AnySocket>> {
        None
    }
}

/// Plain TCP.
pub struct Tcp(pub Socket);

impl Transport for Tcp {
    type Writer<'a> = Writer<'a>;

    /// Through the socket's one read-waker slot, not `TcpStream::readable`:
    /// that future enters a waiter list under a lock on every wait and
    /// leaves it after, and the wake-up walks the list — a fifth of the
    /// user-space instructions of a one-message read (benches/instructions.sh).
    /// The slot keeps only the last task's waker: the connection's loop is
    /// the only reader (producers only write into the socket).
    fn readable(&mut self) -> impl Future<Output = std::io::Result<()>> {
        let socket = &self.0;
        std::future::poll_fn(move |cx| socket.poll_read_ready(cx))
    }

    #[inline]
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        socket::read_drained(&self.0, buf)
    }

    fn writer(&mut self) -> Writer<'_> {
        Writer(&self.0)
    }

    fn shutdown_write(&mut self) {
        socket::shutdown_write(&self.0)
    }

    async fn data_waiting(&mut self) -> bool {
        let mut probe = [0u8; 1];
        matches!(self.0.peek(&mut probe).await, Ok(n) if n > 0)
    }

    fn hung_up(&self) -> bool {
        socket::peer_hung_up(&self.0)
    }

    fn direct_socket(&self) -> Option<Weak<AnySocket>> {
        Some(Arc::downgrade(&self.0) as Weak<AnySocket>)
    }
}

/// A TLS session over the socket (see the module docs).
pub struct Tls {
    tcp: TcpStream,
    session: Box<ServerConnection>,
    /// rustls may hold plaintext the last read had no room for: the next
    /// read must not wait for the socket.
    pending: bool,
    /// Ciphertext received that the last read had no room to decrypt
    /// (empty, and unallocated, but for that).
    held: Vec<u8>,
}

impl Tls {
    pub fn new(tcp: TcpStream, mut session: Box<ServerConnection>) -> Tls {
        session.set_buffer_limit(Some(weir_config::tls::SEND_BUFFER_BYTES));
        // Plaintext the HTTP layer left in the session is read first.
        Tls {
            tcp,
            session,
            pending: true,
            held: Vec::new(),
        }
    }

    /// Writes what rustls has encrypted, as far as the socket takes it
    /// now (straight to the kernel first, as over TCP); `WouldBlock` when
    /// it takes nothing.
    fn send_tls(&mut self) -> std::io::Result<()> {
        let (tcp, session) = (&self.tcp, &mut self.session);
        while session.wants_write() {
            socket::send_direct_first(tcp, || session.write_tls(&mut Raw(tcp)))?;
        }
        Ok(())
    }

    /// [`send_tls`](Self::send_tls), waiting for the socket as needed.
    fn poll_send_tls(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        loop {
            match self.send_tls() {
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    ready!(self.tcp.poll_write_ready(cx))?
                }
                other => return Poll::Ready(other),
            }
        }
    }
}

/// The most ciphertext one TLS read takes from the socket: a 64 KiB
/// message and its record headers in one recv.
const RECV_CHUNK_BYTES: usize = 80 << 10;

thread_local! {
    /// Where a worker's TLS reads land before rustls takes them (one per
    /// worker, not per connection: an idle connection holds none).
    static RECV_CHUNK: std::cell::RefCell<Box<[u8]>> =
        std::cell::RefCell::new(vec![0; RECV_CHUNK_BYTES].into_boxed_slice());
}

impl Tls {
    /// Hands `data` (ciphertext) to rustls, a deframer's read at a time,
    /// moving the plaintext out into `buf[*filled..]` as records complete
    /// (which keeps rustls's plaintext buffer under its limit). Stops when
    /// `buf` is full; returns how many bytes of `data` it did not take.
    fn decrypt(
        &mut self,
        mut data: &[u8],
        buf: &mut [u8],
        filled: &mut usize,
    ) -> std::io::Result<usize> {
        while !data.is_empty() && *filled < buf.len() {
            if self.session.read_tls(&mut data)? == 0 {
                // After close_notify rustls takes nothing more.
                return Ok(0);
            }
            let processed = self.session.process_new_packets();
            // Alerts, key updates: out with the next write, or now.
            if self.session.wants_write() {
                let _ = self.send_tls();
            }
            if let Err(e) = processed {
                tracing::debug!(error = %e, "TLS error; dropping the connection");
                return Err(std::io::Error::new(ErrorKind::InvalidData, e));
            }
            while let Ok(n @ 1..) = self.session.reader().read(&mut buf[*filled..]) {
                *filled += n;
            }
        }
        Ok(data.len())
    }
}

/// Blocking-style I/O on the non-blocking socket, for rustls's
/// `read_tls`/`write_tls` (inside tokio's `try_io`, which clears the
/// readiness on `WouldBlock`).
struct Raw<'a>(&'a TcpStream);

impl Read for Raw<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        (&*socket2::SockRef::from(self.0)).read(buf)
    }
}

impl Write for Raw<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        (&*socket2::SockRef::from(self.0)).write(buf)
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> std::io::Result<usize> {
        (&*socket2::SockRef::from(self.0)).write_vectored(bufs)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Transport for Tls {
    type Writer<'a> = TlsWriter<'a>;

    /// At once when rustls holds plaintext or ciphertext is held back;
    /// else in the socket's read-waker slot, as over TCP.
    fn readable(&mut self) -> impl Future<Output = std::io::Result<()>> {
        let (pending, tcp) = (self.pending, &self.tcp);
        std::future::poll_fn(move |cx| match pending {
            true => Poll::Ready(Ok(())),
            false => tcp.poll_read_ready(cx),
        })
    }

    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut filled = 0;
        loop {
            // Plaintext rustls holds first.
            match self.session.reader().read(&mut buf[filled..]) {
                Ok(0) if filled < buf.len() => {
                    // close_notify: the end, after what this read has.
                    self.pending = filled > 0;
                    return Ok(filled);
                }
                Ok(n) => {
                    filled += n;
                    if filled == buf.len() {
                        self.pending = true;
                        return Ok(filled);
                    }
                    continue;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                // The client closed without close_notify: the end.
                Err(e) if e.kind() == ErrorKind::UnexpectedEof => {
                    self.pending = filled > 0;
                    return Ok(filled);
                }
                Err(e) => return Err(e),
            }
            // Then ciphertext an earlier read had no room for.
            if !self.held.is_empty() {
                let held = std::mem::take(&mut self.held);
                let left = self.decrypt(&held, buf, &mut filled)?;
                if left > 0 {
                    self.held = held[held.len() - left..].to_vec();
                    self.pending = true;
                    return Ok(filled);
                }
                continue;
            }
            // Then one recv of up to as much ciphertext as the plaintext
            // room can take (a record's plaintext is shorter than the
            // record). rustls alone reads at most 4 KiB per `read_tls`: a
            // 64 KiB message took 9 recvs.
            // Nothing waits in rustls now: an error or WouldBlock below
            // must leave the loop waiting for the socket.
            self.pending = false;
            let room = (buf.len() - filled).min(RECV_CHUNK_BYTES);
            let got = RECV_CHUNK.with(|chunk| {
                let chunk = &mut chunk.borrow_mut()[..room];
                let tcp = &self.tcp;
                let n = match tcp.try_io(Interest::READABLE, || Raw(tcp).read(chunk)) {
                    Ok(n) => n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock && filled > 0 => return Ok(None),
                    Err(e) => return Err(e),
                };
                if n == 0 {
                    // EOF: rustls notes it; its reader tells which kind.
                    self.session.read_tls(&mut &[][..])?;
                    return Ok(Some(0));
                }
                let left = self.decrypt(&chunk[..n], buf, &mut filled)?;
                if left > 0 {
                    self.held = chunk[n - left..n].to_vec();
                }
                Ok(Some(n))
            })?;
            match got {
                // The socket is drained: what this read has is the batch.
                None => break,
                Some(_) if !self.held.is_empty() => {
                    self.pending = true;
                    return Ok(filled);
                }
                // A short recv: the socket is most likely drained.
                Some(n) if n > 0 && n < room && filled > 0 => break,
                Some(_) => {}
            }
        }
        self.pending = false;
        Ok(filled)
    }

    fn writer(&mut self) -> TlsWriter<'_> {
        TlsWriter(self)
    }

    fn shutdown_write(&mut self) {
        self.session.send_close_notify();
        let _ = self.send_tls();
        socket::shutdown_write(&self.tcp);
    }

    async fn data_waiting(&mut self) -> bool {
        let mut probe = [0u8; 1];
        matches!(self.tcp.peek(&mut probe).await, Ok(n) if n > 0)
    }

    fn hung_up(&self) -> bool {
        socket::peer_hung_up(&self.tcp)
    }
}

/// Encrypts into the session's send buffer; `flush` (which ends every
/// batch) hands the records to the kernel.
pub struct TlsWriter<'a>(&'a mut Tls);

impl TlsWriter<'_> {
    fn poll_encrypt(
        &mut self,
        cx: &mut Context<'_>,
        encrypt: impl FnOnce(&mut rustls::Writer<'_>) -> std::io::Result<usize>,
    ) -> Poll<std::io::Result<usize>> {
        // Earlier records first: what rustls buffers stays bounded.
        if self.0.session.wants_write() {
            ready!(self.0.poll_send_tls(cx))?;
        }
        Poll::Ready(encrypt(&mut self.0.session.writer()))
    }
}

impl AsyncWrite for TlsWriter<'_> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.get_mut().poll_encrypt(cx, |w| w.write(buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        self.get_mut().poll_encrypt(cx, |w| w.write_vectored(bufs))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.get_mut().0.poll_send_tls(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.get_mut().0.shutdown_write();
        Poll::Ready(Ok(()))
    }
}

/// One WebSocket over an HTTP/2 stream (see the module docs).
pub struct H2Stream<S>(pub S);

impl<S> H2Stream<S>
where
    S: tokio::io::AsyncRead + AsyncWrite + Unpin,
{
    /// Polls `S` once without a task to wake: hyper registers a waker only
    /// when it returns `Pending`, and the loop polls `readable` (with its
    /// own waker) before it waits.
    fn poll_now<T>(
        &mut self,
        poll: impl FnOnce(Pin<&mut S>, &mut Context<'_>) -> Poll<T>,
    ) -> Poll<T> {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        poll(Pin::new(&mut self.0), &mut cx)
    }
}

impl<S> Transport for H2Stream<S>
where
    S: tokio::io::AsyncRead + AsyncWrite + Unpin + 'static,
{
    type Writer<'a> = &'a mut S;

    /// A read into no room: hyper takes the stream's next DATA chunk (or
    /// its end) and keeps it for the next read, without releasing window.
    async fn readable(&mut self) -> std::io::Result<()> {
        std::future::poll_fn(|cx| {
            let mut none = tokio::io::ReadBuf::new(&mut []);
            Pin::new(&mut self.0).poll_read(cx, &mut none)
        })
        .await
    }

    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut into = tokio::io::ReadBuf::new(buf);
        match self.poll_now(|s, cx| s.poll_read(cx, &mut into)) {
            Poll::Ready(Ok(())) => Ok(into.filled().len()),
            Poll::Ready(Err(e)) => Err(e),
            Poll::Pending => Err(ErrorKind::WouldBlock.into()),
        }
    }

    fn writer(&mut self) -> &mut S {
        &mut self.0
    }

    /// END_STREAM after what was written.
    fn shutdown_write(&mut self) {
        let _ = self.poll_now(|s, cx| s.poll_shutdown(cx));
    }

    /// The stream's next chunk (or its end, or a reset) is what readiness
    /// reports: true unless the stream failed.
    async fn data_waiting(&mut self) -> bool {
        self.readable().await.is_ok()
    }

    fn hung_up(&self) -> bool {
        false
    }
}
