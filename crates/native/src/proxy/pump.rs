//! The upstream side of a proxied connection, run by the client's own
//! connection task (`Behaviour::beside`: readiness of either socket wakes
//! the one task): reads the upstream's frames and hands them to the client's
//! socket as they came (a server's frames need no change, only their
//! boundaries are found), writes the client bytes the upstream socket did
//! not take at once, and carries the close either way. With a filter, data
//! frames are assembled into messages for the filter instead, and what it
//! forwards toward the upstream is written from here. Once either side
//! ends, the closing toward the upstream runs as a task of its own
//! ([`Upstream::finish`]), so the client's close handshake and the
//! upstream's go on together.

use super::filter::MAX_FILTERED_MESSAGE_BYTES;
use super::{Link, LinkFilter, Masks, UPSTREAM_GONE};
use std::cell::RefCell;
use std::io::ErrorKind;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use weir_abi::Direction;
use weir_reactor::buffer::READ_BUF_BYTES;
use weir_reactor::conn::{CLOSE_DRAIN_MAX_BYTES, CLOSE_LINGER};
use weir_reactor::outbound::Outbound;
use weir_ws::close::{self, parse_close_payload};
use weir_ws::encode;
use weir_ws::frame::{parse_server_header, OpCode, ProtocolError, ServerHeader};

/// Longest a close waits for the filter's batches that carry the messages
/// before it (a batch that runs into its deadline settles them too; this
/// bounds a worker that stops running guests, at shutdown).
const SETTLE_WAIT: Duration = Duration::from_secs(10);

/// Receive buffer for upstream frames: the client loop's size, so a frame
/// up to 64 KiB is handed on whole and larger ones stream through.
const UPSTREAM_BUF_BYTES: usize = READ_BUF_BYTES;
/// Free upstream buffers a worker keeps; a connection holds one only while
/// bytes are in flight, like the client side.
const POOL_KEEP: usize = 64;

thread_local! {
    static FREE: RefCell<Vec<Box<[u8]>>> = const { RefCell::new(Vec::new()) };
}

fn take_buf() -> Box<[u8]> {
    FREE.with(|free| free.borrow_mut().pop())
        .unwrap_or_else(|| vec![0u8; UPSTREAM_BUF_BYTES].into_boxed_slice())
}

fn give_buf(buf: Box<[u8]>) {
    FREE.with(|free| {
        let mut free = free.borrow_mut();
        if free.len() < POOL_KEEP {
            free.push(buf);
        }
    });
}

/// How the upstream side ended.
pub(super) enum End {
    /// The upstream sent a close with this code and reason.
    Closed(u16, String),
    /// The upstream's connection ended without a close.
    Gone,
    /// The upstream broke the protocol.
    Broke(ProtocolError),
    /// The client side ended: the close to send the upstream (code, reason).
    ClientEnded(u16, String),
}

/// The upstream side's state, held by the client's behaviour (`Proxy`)
/// until either side ends, then by the closing task.
pub(super) struct Upstream {
    link: Rc<Link>,
    client: Arc<Outbound>,
    buf: Option<Box<[u8]>>,
    /// Bytes read and not yet handed on are `buf[..end]`.
    end: usize,
    /// Bytes of a streamed frame still to hand on as they come.
    frame_left: u64,
    /// With a filter: the upstream message being assembled, its kind, and
    /// whether one is open (fragments), and the FIN of a frame whose
    /// payload is still arriving.
    message: Vec<u8>,
    message_text: bool,
    message_open: bool,
    frame_fin: bool,
}

impl Upstream {
    /// The upstream side of `link`, writing to the client's queue `client`;
    /// `early` are bytes the upstream sent with its 101, handed on now
    /// (an end among them is returned).
    pub(super) fn new(
        link: Rc<Link>,
        client: Arc<Outbound>,
        early: &[u8],
    ) -> (Upstream, Option<End>) {
        let mut up = Upstream {
            link,
            client,
            buf: None,
            end: 0,
            frame_left: 0,
            message: Vec::new(),
            message_text: false,
            message_open: false,
            frame_fin: false,
        };
        let mut end = None;
        if !early.is_empty() {
            let buf = up.buf.insert(take_buf());
            buf[..early.len()].copy_from_slice(early);
            up.end = early.len();
            end = up.hand_on();
        }
        (up, end)
    }

    /// The closing task: carries `end` to the other side, then lets go of
    /// the upstream (its buffer to the pool, its filter link removed).
    pub(super) async fn finish(mut self, end: End) {
        self.close(end).await;
        if let Some(buf) = self.buf.take() {
            give_buf(buf);
        }
        if let Some(filter) = &self.link.filter {
            filter.links.remove(self.link.id.get());
        }
    }
    /// Serves the upstream side until it ends (Some), or, with
    /// `client_budget`, until the client side may read again: at most that
    /// many bytes wait for the upstream socket and the filter (if any) is
    /// not backlogged (None). Holds no state across its awaits: the
    /// connection loop drops it whenever the client's side is ready first.
    pub(super) async fn serve(&mut self, client_budget: Option<usize>) -> Option<End> {
        let link = self.link.clone();
        let filter = link.filter.as_ref();
        loop {
            let pending_len = link.pending.borrow().len();
            let backlogged = filter.is_some_and(|f| f.slot.backlogged());
            if client_budget.is_some_and(|budget| pending_len <= budget && !backlogged) {
                return None;
            }
            let pending = pending_len > 0 || link.upstream.wants_write();
            let client_over = self.client.over_budget();
            let over = client_over || backlogged;
            tokio::select! {
                biased;
                // What the filter forwarded toward the upstream.
                () = async { filter.expect("filtered").shared.wake.notified().await },
                    if filter.is_some() =>
                {
                    filter.expect("filtered").shared.take_frames(&mut link.pending.borrow_mut());
                    if link.flush().is_err() {
                        return Some(End::Gone);
                    }
                }
                ready = link.upstream.writable(), if pending => {
                    if ready.is_err() || link.flush().is_err() {
                        return Some(End::Gone);
                    }
                }
                () = self.client.wait_drained(), if client_over => {}
                () = async { filter.expect("filtered").slot.wait_backlog().await },
                    if backlogged && !client_over => {}
                ready = link.upstream.readable(), if !over => {
                    if ready.is_err() {
                        return Some(End::Gone);
                    }
                    if let Some(end) = self.read() {
                        return Some(end);
                    }
                }
            }
        }
    }

    /// One read from the upstream, handed on.
    fn read(&mut self) -> Option<End> {
        let buf = self.buf.get_or_insert_with(take_buf);
        match self.link.upstream.read(&mut buf[self.end..]) {
            Ok(0) => return Some(End::Gone),
            Ok(n) => self.end += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return None,
            Err(_) => return Some(End::Gone),
        }
        self.hand_on()
    }

    /// With a filter: finds the frames in `buf[..end]`, passes pings and
    /// pongs to the client, and gives each whole data message to the
    /// filter (payload bytes are taken as they arrive, so a message may be
    /// larger than the buffer).
    fn hand_to_filter(&mut self, filter: &LinkFilter) -> Option<End> {
        let mut buf = self.buf.take().expect("bytes to hand on");
        let end = self.end;
        let mut pos = 0;
        let mut result = None;
        let mut queued = false;
        let id = self.link.id.get();
        loop {
            if self.frame_left > 0 {
                let take = self.frame_left.min((end - pos) as u64) as usize;
                self.message.extend_from_slice(&buf[pos..pos + take]);
                pos += take;
                self.frame_left -= take as u64;
                if self.frame_left > 0 {
                    break;
                }
                if self.frame_fin {
                    match self.message_done(filter, id) {
                        Ok(()) => queued = true,
                        Err(e) => {
                            result = Some(End::Broke(e));
                            break;
                        }
                    }
                }
                continue;
            }
            let header = match next_header(&buf[pos..end]) {
                Ok(Some(header)) => header,
                Ok(None) => break,
                Err(end) => {
                    result = Some(end);
                    break;
                }
            };
            let total = header.header_len + header.payload_len as usize;
            let have = end - pos;
            match header.opcode {
                OpCode::Close | OpCode::Ping | OpCode::Pong if have < total => break,
                OpCode::Close => {
                    let payload = &buf[pos + header.header_len..pos + total];
                    result = Some(close_end(payload));
                    break;
                }
                OpCode::Ping | OpCode::Pong => {
                    if !self.client.send_direct(&buf[pos..pos + total]) {
                        result = Some(End::ClientEnded(close::GOING_AWAY, String::new()));
                        break;
                    }
                    pos += total;
                }
                opcode => {
                    let continuation = opcode == OpCode::Continuation;
                    if continuation != self.message_open {
                        result = Some(End::Broke(if continuation {
                            ProtocolError::UnexpectedContinuation
                        } else {
                            ProtocolError::ExpectedContinuation
                        }));
                        break;
                    }
                    if !continuation {
                        self.message_open = true;
                        self.message_text = opcode == OpCode::Text;
                    }
                    if self.message.len() as u64 + header.payload_len
                        > MAX_FILTERED_MESSAGE_BYTES as u64
                    {
                        result = Some(End::Broke(ProtocolError::MessageTooBig));
                        break;
                    }
                    let arrived = (have - header.header_len).min(header.payload_len as usize);
                    let from = pos + header.header_len;
                    self.message.extend_from_slice(&buf[from..from + arrived]);
                    pos = from + arrived;
                    if (arrived as u64) < header.payload_len {
                        self.frame_left = header.payload_len - arrived as u64;
                        self.frame_fin = header.fin;
                        break;
                    }
                    if header.fin {
                        match self.message_done(filter, id) {
                            Ok(()) => queued = true,
                            Err(e) => {
                                result = Some(End::Broke(e));
                                break;
                            }
                        }
                    }
                }
            }
        }
        if queued {
            filter.slot.wake();
        }
        let left = end - pos;
        if left == 0 {
            give_buf(buf);
        } else {
            buf.copy_within(pos..end, 0);
            self.buf = Some(buf);
        }
        self.end = left;
        result
    }

    /// An upstream message is whole: to the filter (text must be UTF-8,
    /// RFC 6455 §8.1, as every text a guest gets).
    fn message_done(&mut self, filter: &LinkFilter, id: u64) -> Result<(), ProtocolError> {
        if self.message_text && simdutf8::basic::from_utf8(&self.message).is_err() {
            return Err(ProtocolError::InvalidUtf8);
        }
        filter.queue(id, Direction::ToClient, self.message_text, &self.message);
        self.message.clear();
        self.message_open = false;
        if self.message.capacity() > super::KEEP_MESSAGE_BUF_BYTES {
            self.message = Vec::new();
        }
        Ok(())
    }

    /// Waits until every message given to the filter in `direction` has
    /// gone on or been dropped (at most [`SETTLE_WAIT`]); then, toward the
    /// upstream, moves what the filter forwarded to `pending`.
    async fn settle(&self, direction: Direction) {
        let Some(filter) = &self.link.filter else {
            return;
        };
        let wait = async {
            while !filter.settled(direction) {
                filter.shared.wake.notified().await;
            }
        };
        let _ = tokio::time::timeout(SETTLE_WAIT, wait).await;
        if direction == Direction::ToUpstream {
            filter
                .shared
                .take_frames(&mut self.link.pending.borrow_mut());
        }
    }

    /// Finds the frames in `buf[..end]` and writes the complete ones (and
    /// the arrived part of one too large for the buffer) to the client.
    /// A close is not handed on: it ends this side.
    fn hand_on(&mut self) -> Option<End> {
        if self.link.filter.is_some() {
            let link = self.link.clone();
            return self.hand_to_filter(link.filter.as_ref().expect("checked"));
        }
        let buf = self.buf.as_mut().expect("bytes to hand on");
        let end = self.end;
        let mut pos = 0;
        let mut result = None;
        loop {
            if self.frame_left > 0 {
                let take = self.frame_left.min((end - pos) as u64);
                pos += take as usize;
                self.frame_left -= take;
                if self.frame_left > 0 {
                    break;
                }
                continue;
            }
            let header = match next_header(&buf[pos..end]) {
                Ok(Some(header)) => header,
                Ok(None) => break,
                Err(end) => {
                    result = Some(end);
                    break;
                }
            };
            let total = header.header_len as u64 + header.payload_len;
            let have = (end - pos) as u64;
            if header.opcode == OpCode::Close {
                if have < total {
                    break;
                }
                let payload = &buf[pos + header.header_len..pos + total as usize];
                result = Some(close_end(payload));
                break;
            }
            if have >= total {
                pos += total as usize;
            } else if total <= buf.len() as u64 {
                // Whole once the rest arrives: wait for it.
                break;
            } else {
                self.frame_left = total - have;
                pos = end;
                break;
            }
        }
        if pos > 0 {
            self.link.to_client_mid_frame.set(self.frame_left > 0);
            if !self.client.send_direct(&buf[..pos]) {
                result = result.or(Some(End::ClientEnded(close::GOING_AWAY, String::new())));
            }
        }
        let left = end - pos;
        if left == 0 {
            give_buf(self.buf.take().expect("held above"));
        } else if pos > 0 {
            buf.copy_within(pos..end, 0);
        }
        self.end = left;
        result
    }

    async fn close(&mut self, end: End) {
        match end {
            End::Closed(code, reason) => {
                // RFC 6455 §7.1.5: no code received is passed on as 1000.
                let code = if code == close::NO_STATUS {
                    close::NORMAL
                } else {
                    code
                };
                self.settle(Direction::ToClient).await;
                self.client.close(code, &reason);
                self.close_upstream(code, "").await;
            }
            End::Gone => {
                self.settle(Direction::ToClient).await;
                self.client.close(close::BAD_GATEWAY, UPSTREAM_GONE);
            }
            End::Broke(e) => {
                tracing::debug!(error = %e, "upstream broke the protocol");
                self.client
                    .close(close::BAD_GATEWAY, "upstream protocol error");
                self.close_upstream(e.close_code(), &e.to_string()).await;
            }
            End::ClientEnded(code, reason) => self.close_upstream(code, &reason).await,
        }
    }

    /// Writes what the client sent first, then a close frame, FIN, and reads
    /// until the upstream's EOF (bounded like the client side's linger).
    async fn close_upstream(&mut self, code: u16, reason: &str) {
        self.settle(Direction::ToUpstream).await;
        let link = self.link.clone();
        let closing = async move {
            while !link.pending.borrow().is_empty() || link.upstream.wants_write() {
                link.upstream.writable().await?;
                link.flush()?;
            }
            if link.to_upstream_mid_frame.get() {
                // A client frame is cut short: no close frame can follow.
                return Ok(());
            }
            let frame = encode::client_close_frame(code, reason, Masks::new().next());
            let mut at = 0;
            while at < frame.len() {
                link.upstream.writable().await?;
                match link.upstream.try_write(&frame[at..]) {
                    Ok(n) => at += n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => continue,
                    Err(e) => return Err(e),
                }
            }
            link.upstream.shutdown_write();
            let mut sink = [0u8; 4096];
            let mut discarded = 0;
            while discarded < CLOSE_DRAIN_MAX_BYTES {
                link.upstream.readable().await?;
                match link.upstream.read(&mut sink) {
                    Ok(0) => break,
                    Ok(n) => discarded += n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => continue,
                    Err(e) => return Err(e),
                }
            }
            Ok::<(), std::io::Error>(())
        };
        let _ = tokio::time::timeout(CLOSE_LINGER, closing).await;
    }
}

/// The next upstream frame's header in `bytes`: None until it is all
/// there; a protocol violation is the end it brings. Both ways of handing
/// upstream bytes on (to the client as they are, or to the filter as
/// messages) walk frames with it.
fn next_header(bytes: &[u8]) -> Result<Option<ServerHeader>, End> {
    parse_server_header(bytes).map_err(End::Broke)
}

/// The end an upstream's close frame brings: its code and reason, or the
/// violation a malformed close payload is (RFC 6455 §5.5.1).
fn close_end(payload: &[u8]) -> End {
    match parse_close_payload(payload) {
        Ok((code, reason)) => End::Closed(code, reason.to_string()),
        Err(e) => End::Broke(e),
    }
}
