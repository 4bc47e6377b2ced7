//! A connection's socket and who may touch it. The connection loop holds it
//! as a [`Socket`] (`Arc<TcpStream>`); a producer on another thread that
//! writes into it directly (relay partner, guest runner) holds only a `Weak`,
//! upgraded for the length of one `send` ([`super::outbound`]). The
//! descriptor therefore cannot close, and its number cannot be reused by
//! another client, while anyone is writing into it: a mistake in drop order
//! can lose bytes, never deliver them to the wrong client.
//!
//! Reads and writes go through socket2's safe calls on the borrowed socket;
//! the only `unsafe` left is reading the kernel's TCP state.

use socket2::SockRef;
use std::future::Future;
use std::io::{ErrorKind, Read, Write};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::AsyncWrite;
use tokio::net::TcpStream;

/// The connection's socket, shared with producers that write into it.
pub type Socket = Arc<TcpStream>;

/// One `recv` into `buf`. A read shorter than `buf` drained the socket, so
/// the readiness is cleared with it: otherwise the next turn of the loop
/// would make a second `recv` only to learn `EAGAIN` — one wasted syscall per
/// read, which for one-message-per-read traffic (relay, ping-pong) is a third
/// of all syscalls. tokio only clears readiness it has not seen renewed, so
/// data arriving meanwhile still wakes the connection.
pub fn read_drained(stream: &TcpStream, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    let result = stream.try_io(tokio::io::Interest::READABLE, || {
        got = (&*SockRef::from(stream)).read(buf)?;
        if got > 0 && got < buf.len() {
            // Drained: report WouldBlock so tokio clears the readiness.
            return Err(ErrorKind::WouldBlock.into());
        }
        Ok(got)
    });
    match result {
        Err(e) if e.kind() == ErrorKind::WouldBlock && got > 0 => Ok(got),
        other => other,
    }
}

/// One non-blocking `send` of as much of `bytes` as the socket takes now
/// (socket2 sends with `MSG_NOSIGNAL`); 0 on any error: the connection's own
/// next write or read reports it.
pub(crate) fn send_now(stream: &impl std::os::fd::AsFd, bytes: &[u8]) -> usize {
    (&*SockRef::from(stream)).write(bytes).unwrap_or(0)
}

/// [`send_now`] for several buffers in one `sendmsg`; returns the bytes
/// taken (0 on any error).
pub(crate) fn send_vectored_now(
    stream: &impl std::os::fd::AsFd,
    parts: &[std::io::IoSlice<'_>],
) -> usize {
    (&*SockRef::from(stream)).write_vectored(parts).unwrap_or(0)
}

/// Runs `send` (a non-blocking write into `stream`) straight away: the
/// usual send finds room, and going through tokio's readiness bookkeeping
/// for it costs more instructions than the send's own user-space part.
/// Only a send that would block runs again under tokio's readiness
/// (`try_io`), which then knows the socket is full, so a wait for
/// writability that follows is for real room. WouldBlock when nothing was
/// taken.
pub(crate) fn send_direct_first<T>(
    stream: &TcpStream,
    mut send: impl FnMut() -> std::io::Result<T>,
) -> std::io::Result<T> {
    match send() {
        Err(e) if e.kind() == ErrorKind::WouldBlock => {
            stream.try_io(tokio::io::Interest::WRITABLE, send)
        }
        other => other,
    }
}

/// One `sendmsg` of `parts` by [`send_direct_first`].
pub fn try_send_vectored(
    stream: &TcpStream,
    parts: &[std::io::IoSlice<'_>],
) -> std::io::Result<usize> {
    send_direct_first(stream, || (&*SockRef::from(stream)).write_vectored(parts))
}

/// Sends FIN after what was written: the client reads everything, then EOF.
pub fn shutdown_write(stream: &TcpStream) {
    let _ = SockRef::from(stream).shutdown(std::net::Shutdown::Write);
}

/// The client closed its side (or the connection is gone), by the kernel's
/// TCP state.
pub(crate) fn peer_hung_up(stream: &impl std::os::fd::AsRawFd) -> bool {
    // SAFETY: an all-zero tcp_info is valid; getsockopt writes at most `len`
    // bytes into it, and the descriptor belongs to `stream`, borrowed here.
    unsafe {
        let mut info: libc::tcp_info = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        let got = libc::getsockopt(
            stream.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        );
        const TCP_CLOSE: u8 = 7;
        const TCP_CLOSE_WAIT: u8 = 8;
        got != 0 || matches!(info.tcpi_state, TCP_CLOSE | TCP_CLOSE_WAIT)
    }
}

/// The connection's writes through a shared reference to its socket (tokio
/// implements `AsyncWrite` only for an owned stream).
pub struct Writer<'a>(pub &'a TcpStream);

impl Writer<'_> {
    /// `send` by [`send_direct_first`], then, while the socket is full,
    /// again each time tokio reports it writable.
    fn poll_with<T>(
        &self,
        cx: &mut Context<'_>,
        mut send: impl FnMut() -> std::io::Result<T>,
    ) -> Poll<std::io::Result<T>> {
        let mut result = send_direct_first(self.0, &mut send);
        loop {
            match result {
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    std::task::ready!(self.0.poll_write_ready(cx))?;
                    result = self.0.try_io(tokio::io::Interest::WRITABLE, &mut send);
                }
                other => return Poll::Ready(other),
            }
        }
    }
}

impl AsyncWrite for Writer<'_> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let socket = self.0;
        self.poll_with(cx, || (&*SockRef::from(socket)).write(buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let socket = self.0;
        self.poll_with(cx, || (&*SockRef::from(socket)).write_vectored(bufs))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        shutdown_write(self.0);
        Poll::Ready(Ok(()))
    }
}

/// Runs a write polled in place (its progress kept by the caller); if the
/// client leaves it blocked (its receive window full) for `limit`, gives
/// up with `TimedOut` so the connection is dropped: a client that stops
/// reading holds its socket and buffer only that long. The timer is set
/// only once the write has had to wait, so the usual write that completes
/// at once costs none. The future is the closure, the limit and a pointer.
pub(crate) fn unless_stalled_poll<W>(limit: Duration, write: W) -> Stalled<W>
where
    W: FnMut(&mut Context<'_>) -> Poll<std::io::Result<()>> + Unpin,
{
    Stalled {
        limit,
        write,
        timer: None,
    }
}

/// See [`unless_stalled_poll`].
pub struct Stalled<W> {
    limit: Duration,
    write: W,
    /// Boxed, and only once the write waits: the timer is not part of
    /// every connection's future (an idle connection holds it for nothing).
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<W> Future for Stalled<W>
where
    W: FnMut(&mut Context<'_>) -> Poll<std::io::Result<()>> + Unpin,
{
    type Output = std::io::Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let Poll::Ready(result) = (this.write)(cx) {
            return Poll::Ready(result);
        }
        let limit = this.limit;
        let timer = this
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => {
                tracing::debug!(?limit, "client stopped reading; dropping the connection");
                Poll::Ready(Err(ErrorKind::TimedOut.into()))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}
