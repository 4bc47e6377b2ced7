//! Native proxy: each client connection is carried to a connection of its
//! own to the route's upstream WebSocket server, opened before the client
//! gets its 101 (`dial`). Client frames (data, pings, pongs) are masked
//! again in place in the receive buffer and written to the upstream with
//! no copy; upstream frames are already server frames and go to the client
//! as read (`pump`). Fragments stay as sent, and close codes travel both
//! ways: an upstream that goes away without one closes the client with
//! 1014; a client that goes away closes the upstream with 1001.
//!
//! Backpressure both ways: the client is not read while more than
//! `outbound_budget` bytes wait for the upstream socket, and the upstream
//! is not read while the client's queue is over that budget. Nothing read
//! is dropped on the way. See docs/architecture.md.
//!
//! With a `filter` (a guest, `filter`), data messages go through the
//! guest both ways instead, as whole messages; control frames still pass
//! straight through.

mod dial;
mod filter;
mod pump;
mod route;
pub(crate) mod upstream;

use http::StatusCode;
use pump::{End, Upstream};
use std::cell::{Cell, RefCell};
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::io::{ErrorKind, IoSlice};
use std::ops::Range;
use std::rc::Rc;
use std::sync::Arc;
use tracing::debug;
use upstream::UpstreamIo;
use weir_config::ProxyConfig;
use weir_reactor::behaviour::{Behaviour, LocalFuture, Stop};
use weir_reactor::buffer::Output;
use weir_reactor::decode::DataPiece;
use weir_reactor::kind::{Accepted, Refusal, RouteKind, Upgrade, WorkerRoute, WorkerSetup};
use weir_reactor::outbound::Outbound;
use weir_ws::frame::OpCode;
use weir_ws::{close, encode, mask};

pub use dial::upstream_target;
pub use filter::FilterLinks;
pub use route::ProxyRoute;

use weir_abi::Direction;
use weir_reactor::attached::{AttachedGuest, AttachedSlot};

/// The close reason a client gets when its upstream went away.
const UPSTREAM_GONE: &str = "upstream went away";
/// Ranges written to the upstream in one `sendmsg` at most.
const GATHER_MAX: usize = 16;
/// A filtered client message's assembly buffer is freed past this.
const KEEP_MESSAGE_BUF_BYTES: usize = 64 * 1024;

/// Masking keys for frames toward the upstream (RFC 6455 §5.3, §10.3): a
/// fast generator per connection, seeded from SipHash under the process's
/// random keys, so no client can predict the mask its bytes will be sent
/// under. One per frame, a few nanoseconds each.
struct Masks(u64);

impl Masks {
    fn new() -> Masks {
        thread_local! {
            static SEEDS: (RandomState, Cell<u64>) = (RandomState::new(), Cell::new(0));
        }
        Masks(SEEDS.with(|(state, n)| {
            n.set(n.get() + 1);
            state.hash_one(n.get())
        }))
    }

    /// wyrand: one multiply per output.
    #[inline]
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0xa076_1d64_78bd_642f);
        let t = u128::from(self.0) * u128::from(self.0 ^ 0xe703_7ed1_a0b4_28db);
        (t as u64) ^ ((t >> 64) as u64)
    }

    #[inline]
    fn next(&mut self) -> [u8; 4] {
        (self.next_u64() as u32).to_le_bytes()
    }
}

/// A filtered connection's side of its filter (on the client's worker).
struct LinkFilter {
    slot: Rc<dyn AttachedSlot>,
    links: Arc<FilterLinks>,
    shared: Arc<filter::FilterLink>,
    /// Messages given to the filter per direction ([`Direction`] as index).
    queued: [Cell<u64>; 2],
    /// The open event's connection info, until the open.
    info: RefCell<Vec<u8>>,
}

impl LinkFilter {
    /// A whole message for the filter; the caller wakes the slot.
    fn queue(&self, id: u64, direction: Direction, text: bool, payload: &[u8]) {
        self.slot.proxy_message(id, direction, text, payload);
        let queued = &self.queued[direction as usize];
        queued.set(queued.get() + 1);
    }

    /// Every message given to the filter in `direction` has gone on or
    /// been dropped.
    fn settled(&self, direction: Direction) -> bool {
        self.shared.settled(direction) >= self.queued[direction as usize].get()
    }
}

/// What a connection's two sides share: the client's behaviour and its
/// upstream side, then the closing task (all on the worker's thread).
struct Link {
    upstream: UpstreamIo,
    /// The connection's id, once open.
    id: Cell<u64>,
    /// The route's filter, if it has one.
    filter: Option<LinkFilter>,
    /// Client frames the upstream socket has not taken yet, masked.
    pending: RefCell<Vec<u8>>,
    /// A client frame is partly written toward the upstream: no close
    /// frame can follow until it ends.
    to_upstream_mid_frame: Cell<bool>,
    /// An upstream frame is partly written toward the client.
    to_client_mid_frame: Cell<bool>,
}

impl Link {
    /// Writes what the upstream socket takes of `pending` now. Err when the
    /// upstream is gone.
    fn flush(&self) -> std::io::Result<()> {
        self.upstream.flush()?;
        let mut pending = self.pending.borrow_mut();
        while !pending.is_empty() {
            match self.upstream.try_write(&pending) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(n) => {
                    pending.drain(..n);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// One proxied connection: the client side (the behaviour's hooks) and the
/// upstream side (`pump`, polled by the same loop through `beside`).
pub struct Proxy {
    link: Rc<Link>,
    /// The upstream's first bytes, until the upstream side starts.
    early: Option<Vec<u8>>,
    /// The upstream side, from the open until either side ends (then its
    /// closing task has it).
    up: Option<Upstream>,
    /// The upstream side ended first: what the client sends now has
    /// nowhere to go.
    upstream_ended: bool,
    /// Upstream-bound frames of this read: ranges of the receive buffer.
    ranges: Output,
    masks: Masks,
    /// The mask of the frame being forwarded, and how far into its payload.
    mask: [u8; 4],
    offset: usize,
    mid_frame: bool,
    budget: usize,
    upstream_failed: bool,
    /// With a filter: the client message being assembled, and whether this
    /// read gave the filter a message.
    message: Vec<u8>,
    queued: bool,
    /// The client's close code and reason, once it sent a close.
    peer_close: Option<(u16, String)>,
}

impl Proxy {
    fn new(
        dialed: dial::Dialed,
        client: &Outbound,
        masks: Masks,
        filter: Option<LinkFilter>,
    ) -> Proxy {
        Proxy {
            link: Rc::new(Link {
                id: Cell::new(0),
                filter,
                upstream: dialed.stream,
                pending: RefCell::new(Vec::new()),
                to_upstream_mid_frame: Cell::new(false),
                to_client_mid_frame: Cell::new(false),
            }),
            budget: client.budget(),
            early: Some(dialed.early),
            up: None,
            upstream_ended: false,
            ranges: Output::default(),
            masks,
            mask: [0; 4],
            offset: 0,
            mid_frame: false,
            upstream_failed: false,
            message: Vec::new(),
            queued: false,
            peer_close: None,
        }
    }

    /// With a filter: assembles the client's messages and gives each whole
    /// one to the filter.
    fn give_filter(&mut self, filter: &LinkFilter, buf: &[u8], piece: &DataPiece) {
        let text = piece.message == OpCode::Text;
        let bytes = &buf[piece.payload.clone()];
        let id = self.link.id.get();
        if piece.message_end() && self.message.is_empty() {
            filter.queue(id, Direction::ToUpstream, text, bytes);
        } else {
            self.message.extend_from_slice(bytes);
            if !piece.message_end() {
                return;
            }
            filter.queue(id, Direction::ToUpstream, text, &self.message);
            self.message.clear();
            if self.message.capacity() > KEEP_MESSAGE_BUF_BYTES {
                self.message = Vec::new();
            }
        }
        self.queued = true;
    }

    /// Masks a client frame's piece again for the upstream, in place: a new
    /// client header over the old one at the frame's start, then the
    /// payload under the new mask.
    #[inline]
    fn forward(&mut self, buf: &mut [u8], piece: Range<usize>, start: Option<(bool, OpCode, u64)>) {
        let from = match start {
            Some((fin, opcode, len)) => {
                self.mask = self.masks.next();
                self.offset = 0;
                encode::masked_header_before(buf, piece.start, fin, opcode, len, self.mask)
            }
            None => piece.start,
        };
        mask::unmask(&mut buf[piece.clone()], self.mask, self.offset);
        self.offset += piece.len();
        self.ranges.push(buf, from..piece.end);
    }

    /// The client side ended: the closing task sends the upstream this
    /// close after what is pending (unless the upstream side ended first).
    fn end(&mut self, code: u16, reason: &str) {
        self.finish(End::ClientEnded(code, reason.to_string()));
    }

    /// One side ended: the upstream side goes to a task of its own that
    /// carries the close on.
    fn finish(&mut self, end: End) {
        if !matches!(end, End::ClientEnded(..)) {
            self.upstream_ended = true;
        }
        if let Some(up) = self.up.take() {
            tokio::task::spawn_local(up.finish(end));
        }
    }
}

impl Behaviour for Proxy {
    /// The upstream side writes its frames straight into the client socket.
    const DIRECT_WRITES: bool = true;

    fn on_open(&mut self, id: u64, outbound: &Arc<Outbound>) {
        self.link.id.set(id);
        if let Some(filter) = &self.link.filter {
            filter.links.insert(id, filter.shared.clone());
            filter.slot.open(id, &filter.info.take());
        }
        let early = self.early.take().unwrap_or_default();
        let (up, end) = Upstream::new(self.link.clone(), outbound.clone(), &early);
        self.up = Some(up);
        if let Some(end) = end {
            self.finish(end);
        }
    }

    /// Not read while the upstream socket has more than the budget
    /// waiting, or while the filter's route has more than it may hold.
    /// (A TLS session holds at most 64 KiB of records besides.)
    #[inline]
    fn reads_blocked(&self, _own: &Outbound) -> bool {
        self.link.pending.borrow().len() > self.budget
            || self
                .link
                .filter
                .as_ref()
                .is_some_and(|f| f.slot.backlogged())
    }

    /// Serves the upstream side (which also writes what waits for the
    /// upstream socket) until the client may be read again. Once the
    /// upstream side has ended, the client's close is on its queue: the
    /// loop delivers it.
    async fn unblocked(&mut self, _own: &Outbound) -> Result<(), Stop> {
        let Some(up) = self.up.as_mut() else {
            return std::future::pending().await;
        };
        if let Some(end) = up.serve(Some(self.budget)).await {
            self.finish(end);
        }
        Ok(())
    }

    const HAS_BESIDE: bool = true;

    /// The upstream side, in the client's task, until it ends.
    async fn beside(&mut self) -> Result<(), Stop> {
        let Some(up) = self.up.as_mut() else {
            return std::future::pending().await;
        };
        if let Some(end) = up.serve(None).await {
            self.finish(end);
        }
        Ok(())
    }

    #[inline]
    fn on_data(&mut self, buf: &mut [u8], piece: &DataPiece, _out: &mut Output) {
        if self.link.filter.is_some() {
            let link = self.link.clone();
            self.give_filter(link.filter.as_ref().expect("checked"), buf, piece);
            return;
        }
        let start = piece
            .frame_start
            .then_some((piece.fin, piece.opcode, piece.frame_len));
        self.forward(buf, piece.payload.clone(), start);
        self.mid_frame = !piece.frame_end;
    }

    /// Pings and pongs go to the upstream; its pongs come back as frames.
    #[inline]
    fn on_control(&mut self, buf: &mut [u8], opcode: OpCode, payload: Range<usize>) -> bool {
        let len = payload.len() as u64;
        self.forward(buf, payload, Some((true, opcode, len)));
        true
    }

    fn on_peer_close(&mut self, code: u16, reason: &str) {
        self.peer_close = Some((code, reason.to_string()));
        // RFC 6455 §7.1.5: no code received is sent on as a plain 1000.
        let code = if code == close::NO_STATUS {
            close::NORMAL
        } else {
            code
        };
        self.end(code, reason);
    }

    /// Writes the read's upstream-bound frames: straight into the socket
    /// when nothing waits before them, the rest copied to `pending`.
    #[inline]
    fn end_of_read_in(&mut self, buf: &[u8]) -> Result<(), Stop> {
        if std::mem::take(&mut self.queued) {
            if let Some(filter) = &self.link.filter {
                filter.slot.wake();
            }
        }
        let ranges = self.ranges.ranges();
        if ranges.is_empty() {
            return Ok(());
        }
        if self.upstream_ended {
            // Behind the close the closing task sends (or the upstream is
            // gone): the client gets its close next.
            self.ranges.clear();
            return Ok(());
        }
        self.link.to_upstream_mid_frame.set(self.mid_frame);
        let mut pending = self.link.pending.borrow_mut();
        let mut written = 0;
        if pending.is_empty() {
            let mut slices = [IoSlice::new(&[]); GATHER_MAX];
            let n = ranges.len().min(GATHER_MAX);
            for (slice, range) in slices.iter_mut().zip(ranges) {
                *slice = IoSlice::new(&buf[range.clone()]);
            }
            written = match self.link.upstream.try_write_vectored(&slices[..n]) {
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => 0,
                Err(_) => {
                    self.ranges.clear();
                    self.upstream_failed = true;
                    return Err(Stop::Close(close::BAD_GATEWAY, UPSTREAM_GONE));
                }
            };
        }
        for range in ranges {
            let len = range.len();
            if written >= len {
                written -= len;
                continue;
            }
            pending.extend_from_slice(&buf[range.start + written..range.end]);
            written = 0;
        }
        // What the socket did not take (and TLS records waiting in the
        // session) the upstream side writes when it is writable: the loop's
        // next `beside` waits for that.
        drop(pending);
        self.ranges.clear();
        Ok(())
    }

    /// An upstream frame is half written to the client: a close frame
    /// cannot follow it.
    fn mid_frame(&self) -> bool {
        self.link.to_client_mid_frame.get()
    }

    fn on_close(&mut self, id: u64) {
        if let Some(filter) = &self.link.filter {
            // The filter's close event (1006: no close from the client).
            let (code, reason) = self
                .peer_close
                .take()
                .unwrap_or((close::ABNORMAL, String::new()));
            filter.slot.close(id, code, &reason);
        }
        if self.upstream_failed {
            self.end(close::GOING_AWAY, "");
            return;
        }
        self.end(close::GOING_AWAY, "client went away");
    }

    /// The 101 never reached the client: the upstream connection is
    /// dropped with the behaviour.
    fn abandon(self, _id: u64) {}

    /// With a filter, replies come from batches that run after the close.
    fn answers_before_drain(&self) -> bool {
        self.link.filter.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_differ_between_frames_and_connections() {
        let (mut a, mut b) = (Masks::new(), Masks::new());
        let first = a.next();
        assert_ne!(first, a.next());
        assert_ne!(first, b.next());
    }
}
