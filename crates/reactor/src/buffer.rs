//! Receive buffers and the reply gather list. A worker keeps a small pool of
//! buffers; a connection holds one only while it has bytes in flight, so an
//! idle connection costs no buffer.

use smallvec::SmallVec;
use std::cell::RefCell;
use std::io::IoSlice;
use std::ops::Range;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use tokio::io::AsyncWrite;
use weir_ws::compress::Deflater;

/// Free bytes kept in front of the data: a piece of a frame that began in an
/// earlier read gets its reply header written here (10 bytes at most).
pub const HEADROOM_BYTES: usize = 16;
/// Receive buffer size: big enough that one read drains what a fast client
/// has queued, small enough to keep 200 busy connections in L2-ish memory.
/// Frames with a larger payload are streamed through it in pieces.
pub const READ_BUF_BYTES: usize = 64 * 1024 + HEADER_SLACK_BYTES + HEADROOM_BYTES;
/// Room for a frame header on top of 64 KiB, so a 64 KiB message (a common
/// size) arrives in one read instead of 64 KiB plus a 14-byte straggler.
const HEADER_SLACK_BYTES: usize = 64;
/// Payloads up to this size are decoded whole; larger ones stream.
pub const STREAM_ABOVE_BYTES: usize = READ_BUF_BYTES - HEADROOM_BYTES;
/// Receive buffer for the rest of a large streamed frame: fewer, bigger
/// reads and writes (a 1 MiB echo takes 4 round trips through the kernel
/// instead of 16). Only a connection in the middle of such a frame, or just
/// past one, holds one. The header slack again: a 256 KiB message read from
/// its first byte fits in one read, not 256 KiB plus a 14-byte straggler.
pub(crate) const LARGE_READ_BUF_BYTES: usize = 256 * 1024 + HEADER_SLACK_BYTES + HEADROOM_BYTES;
/// Buffers a worker keeps for reuse; more are freed.
const POOL_KEEP: usize = 64;
const POOL_KEEP_LARGE: usize = 8;
/// Replies shorter than this are moved next to the previous reply so a batch
/// of small frames goes out as one contiguous write; longer ones get their
/// own gather entry instead of a copy.
const COALESCE_MAX_BYTES: usize = 2048;
/// Ranges handed to one writev (the kernel's IOV_MAX is 1024).
const MAX_SLICES: usize = 64;

/// Per-worker pool of receive buffers (single-threaded: no locking).
#[derive(Default)]
pub struct BufPool {
    free: RefCell<Vec<Box<[u8]>>>,
    free_large: RefCell<Vec<Box<[u8]>>>,
    stats: Arc<PoolStats>,
}

/// What a worker's receive buffers hold, for `/metrics` and the tests that
/// bound memory under abusive clients. Written only by the pool's worker
/// (a plain load and store, no locked instruction on the hot path); read by
/// whichever worker renders the metrics.
#[derive(Default, Debug)]
pub struct PoolStats {
    /// Bytes in buffers that connections hold right now.
    held_bytes: AtomicUsize,
    /// Bytes in free buffers the pool keeps for reuse.
    pooled_bytes: AtomicUsize,
}

impl PoolStats {
    pub fn held_bytes(&self) -> usize {
        self.held_bytes.load(Ordering::Relaxed)
    }

    pub fn pooled_bytes(&self) -> usize {
        self.pooled_bytes.load(Ordering::Relaxed)
    }
}

/// `counter += delta` by its only writer.
fn bump(counter: &AtomicUsize, delta: isize) {
    let now = counter.load(Ordering::Relaxed).wrapping_add_signed(delta);
    counter.store(now, Ordering::Relaxed);
}

impl BufPool {
    pub fn new(stats: Arc<PoolStats>) -> BufPool {
        BufPool {
            stats,
            ..BufPool::default()
        }
    }

    /// A receive buffer; `large` for the rest of a big streamed frame.
    pub fn take(&self, large: bool) -> Box<[u8]> {
        let (free, size) = if large {
            (&self.free_large, LARGE_READ_BUF_BYTES)
        } else {
            (&self.free, READ_BUF_BYTES)
        };
        let buf = free.borrow_mut().pop();
        if buf.is_some() {
            bump(&self.stats.pooled_bytes, -(size as isize));
        }
        bump(&self.stats.held_bytes, size as isize);
        buf.unwrap_or_else(|| vec![0u8; size].into_boxed_slice())
    }

    pub fn give(&self, buf: Box<[u8]>) {
        let size = buf.len();
        bump(&self.stats.held_bytes, -(size as isize));
        let (free, keep) = if size == LARGE_READ_BUF_BYTES {
            (&self.free_large, POOL_KEEP_LARGE)
        } else {
            (&self.free, POOL_KEEP)
        };
        let mut free = free.borrow_mut();
        if free.len() < keep {
            free.push(buf);
            bump(&self.stats.pooled_bytes, size as isize);
        }
    }
}

/// Replies of one read batch: ranges of the receive buffer, in order (every
/// reply is built in place, see `ws::encode`), and on a connection that
/// negotiated permessage-deflate, compressed replies built by the encoder
/// in a buffer of the batch's own.
#[derive(Default)]
pub struct Output {
    /// Two ranges inline: echo's in-place replies coalesce into one range
    /// per batch, so most batches allocate nothing and an idle connection
    /// keeps no list on the heap (a `Vec` kept its capacity: 64 B and
    /// malloc's own per idle connection).
    segs: SmallVec<[Range<usize>; 2]>,
    /// Bytes of `segs` already written, while a flush waits for the socket.
    sent: usize,
    /// The connection's compressor (None: permessage-deflate not
    /// negotiated) and the bytes of this batch's compressed replies.
    deflate: Option<Box<OwnedReplies>>,
}

/// Replies built outside the receive buffer.
struct OwnedReplies {
    deflater: Deflater,
    bytes: Vec<u8>,
    scratch: Vec<u8>,
}

/// Ranges with this bit set are in `OwnedReplies::bytes`, not the
/// receive buffer.
const OWNED: usize = 1 << (usize::BITS - 1);

impl Output {
    /// Output for a connection that compresses its replies.
    pub fn compressing(deflater: Deflater) -> Output {
        Output {
            segs: SmallVec::new(),
            sent: 0,
            deflate: Some(Box::new(OwnedReplies {
                deflater,
                bytes: Vec::new(),
                scratch: Vec::new(),
            })),
        }
    }

    /// Whether replies may be compressed (see [`Output::push_message`]).
    #[inline]
    pub fn compresses(&self) -> bool {
        self.deflate.is_some()
    }

    pub fn is_empty(&self) -> bool {
        self.segs.is_empty()
    }

    /// Adds `buf[range]` to the reply. Ranges must come in buffer order and
    /// never start before the end of the previous one. Inlined into each
    /// behaviour's `on_data` (echo's per-message cost): left to itself, the
    /// compiler stopped inlining it once more callers appeared, +22
    /// instructions a message at 64 B × 200 × 8 (benches/instructions.sh).
    #[inline]
    pub fn push(&mut self, buf: &mut [u8], range: Range<usize>) {
        if let Some(last) = self.segs.last_mut() {
            if last.end == range.start {
                last.end = range.end;
                return;
            }
            if range.len() <= COALESCE_MAX_BYTES && last.start & OWNED == 0 {
                buf.copy_within(range.clone(), last.end);
                last.end += range.len();
                return;
            }
        }
        self.segs.push(range);
    }

    /// Adds one whole message, framed by the encoder: compressed when it
    /// reaches the route's `compression_min`. Only on an output made by
    /// [`Output::compressing`]. Out of line: echo's in-place path stays
    /// as small as it was.
    #[inline(never)]
    pub fn push_message(&mut self, opcode: weir_ws::OpCode, payload: &[u8]) {
        let owned = self.deflate.as_mut().expect("a compressing output");
        let start = owned.bytes.len();
        weir_ws::encode::append_message(
            &mut owned.bytes,
            opcode,
            payload,
            &mut owned.deflater,
            &mut owned.scratch,
        );
        let range = (start | OWNED)..(owned.bytes.len() | OWNED);
        match self.segs.last_mut() {
            Some(last) if last.end == range.start => last.end = range.end,
            _ => self.segs.push(range),
        }
    }

    /// The ranges gathered so far, in order.
    pub fn ranges(&self) -> &[Range<usize>] {
        &self.segs
    }

    pub fn clear(&mut self) {
        self.segs.clear();
    }

    /// Writes everything with as few syscalls as the kernel allows, flushes,
    /// then clears. Polled in place: a write the socket cannot take at once
    /// leaves its progress in the output (`sent`), not in a future, so the
    /// connection's future stays small.
    pub fn poll_flush<W: AsyncWrite + Unpin>(
        &mut self,
        stream: &mut W,
        buf: &[u8],
        cx: &mut Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.segs.is_empty() {
            return Poll::Ready(Ok(()));
        }
        let owned: &[u8] = self.deflate.as_ref().map_or(&[], |d| &d.bytes);
        let slice = |r: &Range<usize>| run_of(buf, owned, r);
        if let [one] = self.segs.as_slice() {
            // The usual batch of an echo: one range, no gather list.
            let bytes = slice(one);
            while self.sent < bytes.len() {
                let n = ready!(Pin::new(&mut *stream).poll_write(cx, &bytes[self.sent..]))?;
                if n == 0 {
                    return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
                }
                self.sent += n;
            }
        }
        while self.segs.len() > 1 {
            let mut slices = [IoSlice::new(&[]); MAX_SLICES];
            let (mut n, mut skip) = (0, self.sent);
            for r in &self.segs {
                let s = slice(r);
                if skip >= s.len() {
                    skip -= s.len();
                    continue;
                }
                slices[n] = IoSlice::new(&s[skip..]);
                skip = 0;
                n += 1;
                if n == MAX_SLICES {
                    break;
                }
            }
            let written = match n {
                0 => break,
                1 => ready!(Pin::new(&mut *stream).poll_write(cx, &slices[0]))?,
                _ => ready!(Pin::new(&mut *stream).poll_write_vectored(cx, &slices[..n]))?,
            };
            if written == 0 {
                return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
            }
            self.sent += written;
        }
        // TLS hands its records to the kernel here; TCP has none.
        ready!(Pin::new(&mut *stream).poll_flush(cx))?;
        self.finished();
        Poll::Ready(Ok(()))
    }

    /// All is out: cleared for the next batch (also for a caller that
    /// handed [`Output::single`]'s bytes to the kernel itself).
    pub fn finished(&mut self) {
        self.segs.clear();
        self.sent = 0;
        if let Some(d) = &mut self.deflate {
            // Freed, not kept: an idle connection holds no reply buffer.
            if d.bytes.capacity() != 0 {
                d.bytes = Vec::new();
                d.scratch = Vec::new();
            }
        }
    }

    /// The replies when they are one run of bytes none of which is
    /// written yet (an echo's usual batch), for a caller that hands them
    /// to the kernel itself and then calls [`Output::finished`].
    pub fn single<'a>(&'a self, buf: &'a [u8]) -> Option<&'a [u8]> {
        match self.segs.as_slice() {
            [r] if self.sent == 0 => {
                let owned: &[u8] = self.deflate.as_ref().map_or(&[], |d| &d.bytes);
                Some(run_of(buf, owned, r))
            }
            _ => None,
        }
    }

    /// [`poll_flush`](Self::poll_flush) as a future.
    pub async fn flush<W: AsyncWrite + Unpin>(
        &mut self,
        stream: &mut W,
        buf: &[u8],
    ) -> std::io::Result<()> {
        std::future::poll_fn(|cx| self.poll_flush(stream, buf, cx)).await
    }
}

/// The bytes a gathered range names: in the receive buffer, or (`OWNED`)
/// among the compressed replies.
fn run_of<'a>(buf: &'a [u8], owned: &'a [u8], r: &Range<usize>) -> &'a [u8] {
    if r.start & OWNED == 0 {
        &buf[r.clone()]
    } else {
        &owned[r.start & !OWNED..r.end & !OWNED]
    }
}

/// Writes `bytes[*sent..]` and flushes, advancing `sent`: `write_all` and
/// `flush` polled in place (the cursor is the caller's).
pub(crate) fn poll_write_all<W: AsyncWrite + Unpin>(
    stream: &mut W,
    bytes: &[u8],
    sent: &mut usize,
    cx: &mut Context<'_>,
) -> Poll<std::io::Result<()>> {
    while *sent < bytes.len() {
        let n = ready!(Pin::new(&mut *stream).poll_write(cx, &bytes[*sent..]))?;
        if n == 0 {
            return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
        }
        *sent += n;
    }
    Pin::new(&mut *stream).poll_flush(cx)
}

/// Writes all of `slices`, advancing them past what was written: one
/// writev per kernel acceptance. Polled in place (the cursor is the
/// caller's), so no future of its own.
pub(crate) fn poll_write_all_vectored<W: AsyncWrite + Unpin>(
    stream: &mut W,
    slices: &mut &mut [IoSlice<'_>],
    cx: &mut Context<'_>,
) -> Poll<std::io::Result<()>> {
    while !slices.is_empty() {
        let n = ready!(Pin::new(&mut *stream).poll_write_vectored(cx, slices))?;
        if n == 0 {
            return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
        }
        IoSlice::advance_slices(slices, n);
    }
    Poll::Ready(Ok(()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_replies_coalesce_large_ones_gather() {
        let mut buf = vec![0u8; 10_000];
        buf[10..14].copy_from_slice(b"aaaa");
        buf[20..24].copy_from_slice(b"bbbb");
        let mut out = Output::default();
        out.push(&mut buf, 10..14);
        out.push(&mut buf, 20..24);
        out.push(&mut buf, 24..30);
        out.push(&mut buf, 5000..9000);
        assert_eq!(out.segs.as_slice(), [10..24, 5000..9000]);
        assert_eq!(&buf[10..18], b"aaaabbbb");
    }

    #[test]
    fn pool_stats_follow_take_and_give() {
        let stats = Arc::new(PoolStats::default());
        let pool = BufPool::new(stats.clone());
        let a = pool.take(false);
        let b = pool.take(true);
        assert_eq!(stats.held_bytes(), READ_BUF_BYTES + LARGE_READ_BUF_BYTES);
        pool.give(a);
        assert_eq!(stats.held_bytes(), LARGE_READ_BUF_BYTES);
        assert_eq!(stats.pooled_bytes(), READ_BUF_BYTES);
        let again = pool.take(false);
        assert_eq!(stats.pooled_bytes(), 0);
        pool.give(again);
        pool.give(b);
        assert_eq!(stats.held_bytes(), 0);
        assert_eq!(stats.pooled_bytes(), READ_BUF_BYTES + LARGE_READ_BUF_BYTES);
    }
}
