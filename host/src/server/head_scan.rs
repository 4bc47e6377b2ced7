//! Refuses HTTP/1.1 request heads whose lines end in a bare LF. RFC 9112
//! §2.2 lets a server accept them and hyper does; a proxy in front that
//! does not reads the same bytes as other headers (request smuggling), so
//! weir answers 400. hyper has no switch for it: [`HeadScan`] wraps the
//! connection's stream and looks at the bytes of each head as hyper reads
//! them, up to the empty line that ends it (never a body or the WebSocket
//! bytes after an upgrade). A head that arrived in one read with the
//! previous request (pipelining) is not scanned.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Reading a head: its bytes are scanned.
const SCANNING: u8 = 0;
/// Between heads (the head ended; a body or the next request's bytes).
const BETWEEN: u8 = 1;
/// A head had a bare LF: the connection's requests get 400.
const BARE_LF: u8 = 2;

/// What the service and the stream share about the current head.
#[derive(Default)]
pub(super) struct HeadState(AtomicU8);

impl HeadState {
    /// Whether a head read so far had a line ending in a bare LF.
    pub fn bare_lf(&self) -> bool {
        self.0.load(Ordering::Acquire) == BARE_LF
    }

    /// The request was answered: what is read next is a head again.
    pub fn next_head(&self) {
        let _ = self
            .0
            .compare_exchange(BETWEEN, SCANNING, Ordering::AcqRel, Ordering::Acquire);
    }
}

/// A stream whose reads are scanned while they carry a request head.
pub(super) struct HeadScan<I> {
    io: I,
    state: Arc<HeadState>,
    /// The last byte scanned was CR.
    after_cr: bool,
    /// Bytes on the current line (CRs aside); 0 at a line's start.
    line_bytes: usize,
    /// Whether the head's first line began (empty lines before it do not
    /// end the head, RFC 9112 §2.2).
    began: bool,
}

impl<I> HeadScan<I> {
    pub fn new(io: I, state: Arc<HeadState>) -> HeadScan<I> {
        HeadScan {
            io,
            state,
            after_cr: false,
            line_bytes: 0,
            began: false,
        }
    }

    pub fn into_inner(self) -> I {
        self.io
    }

    /// Scans `bytes` up to the end of the head.
    fn scan(&mut self, bytes: &[u8]) {
        for &b in bytes {
            match b {
                b'\n' if !self.after_cr => {
                    self.state.0.store(BARE_LF, Ordering::Release);
                    return;
                }
                b'\n' => {
                    if self.line_bytes == 0 && self.began {
                        self.state.0.store(BETWEEN, Ordering::Release);
                        self.began = false;
                        self.after_cr = false;
                        return;
                    }
                    self.line_bytes = 0;
                }
                b'\r' => {}
                _ => {
                    self.line_bytes += 1;
                    self.began = true;
                }
            }
            self.after_cr = b == b'\r';
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for HeadScan<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if self.state.0.load(Ordering::Acquire) == SCANNING {
            self.scan(&buf.filled()[before..]);
        }
        polled
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for HeadScan<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scanned(chunks: &[&[u8]]) -> u8 {
        let state = Arc::new(HeadState::default());
        let mut s = HeadScan::new((), state.clone());
        for c in chunks {
            if state.0.load(Ordering::Acquire) == SCANNING {
                s.scan(c);
            }
        }
        state.0.load(Ordering::Acquire)
    }

    /// RFC 9112 §2.2: lines end in CRLF; a bare LF is refused.
    #[test]
    fn bare_lf_in_a_head_is_seen_and_bytes_after_the_head_are_not() {
        assert_eq!(scanned(&[b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"]), BETWEEN);
        assert_eq!(
            scanned(&[b"GET / HTTP/1.1\r", b"\nHost: a\r\n\r", b"\n"]),
            BETWEEN
        );
        assert_eq!(scanned(&[b"GET / HTTP/1.1\nHost: a\r\n\r\n"]), BARE_LF);
        assert_eq!(scanned(&[b"GET / HTTP/1.1\r\nHost: a\n\n"]), BARE_LF);
        assert_eq!(scanned(&[b"GET / HTTP/1.1\r\nHost: a\r\n", b"\n"]), BARE_LF);
        assert_eq!(
            scanned(&[b"\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n"]),
            BETWEEN,
            "an empty line before the request line"
        );
        // WebSocket frames sent with the upgrade request: not a head.
        assert_eq!(scanned(&[b"GET / HTTP/1.1\r\n\r\n\x81\x8a\n\n\n"]), BETWEEN);
        assert_eq!(scanned(&[b"GET / HTTP/1.1\r\n\r\n", b"\n\n"]), BETWEEN);
    }
}
