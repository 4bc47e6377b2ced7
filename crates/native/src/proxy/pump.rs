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
    /// The frame whose payload is still arriving.
    frame: Streaming,
    /// With a filter: the upstream message being assembled.
    message: Assembly,
}

/// A data frame whose payload goes on past the bytes read so far.
#[derive(Default)]
struct Streaming {
    /// Payload bytes still to come.
    left: u64,
    /// Whether the frame ends its message.
    fin: bool,
}

/// With a filter: the upstream message being assembled from its frames,
/// its kind, and whether one is open (fragments).
#[derive(Default)]
struct Assembly {
    bytes: Vec<u8>,
    text: bool,
    open: bool,
}

/// What [`walk`] meets in the upstream's bytes, in order.
enum Piece<'a> {
    /// A whole ping or pong frame.
    Control(&'a [u8]),
    /// A data frame begins: its header, before its payload.
    Start(&'a ServerHeader),
    /// Payload bytes of the current data frame, as they arrived; `true`
    /// when they are the last of a frame that ends its message.
    Payload(&'a [u8], bool),
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
            frame: Streaming::default(),
            message: Assembly::default(),
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
        let buf = self.buf.take().expect("bytes to hand on");
        let id = self.link.id.get();
        let mut queued = false;
        let (client, message) = (&self.client, &mut self.message);
        let (pos, result) = walk(&buf[..self.end], &mut self.frame, false, |piece| {
            match piece {
                Piece::Control(frame) => {
                    if !client.send_direct(frame) {
                        return Err(End::ClientEnded(close::GOING_AWAY, String::new()));
                    }
                }
                Piece::Start(header) => message.start(header).map_err(End::Broke)?,
                Piece::Payload(bytes, last) => {
                    message.bytes.extend_from_slice(bytes);
                    if last {
                        message.done(filter, id).map_err(End::Broke)?;
                        queued = true;
                    }
                }
            }
            Ok(())
        });
        if queued {
            filter.slot.wake();
        }
        self.keep_rest(buf, pos);
        result
    }

    /// Keeps `buf[pos..end]` for the next read (at the buffer's start), or
    /// gives the buffer back to the pool when nothing is left.
    fn keep_rest(&mut self, mut buf: Box<[u8]>, pos: usize) {
        let left = self.end - pos;
        if left == 0 {
            give_buf(buf);
        } else {
            buf.copy_within(pos..self.end, 0);
            self.buf = Some(buf);
        }
        self.end = left;
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
        let buf = self.buf.take().expect("bytes to hand on");
        let (pos, mut result) = walk(&buf[..self.end], &mut self.frame, true, |_| Ok(()));
        if pos > 0 {
            self.link.to_client_mid_frame.set(self.frame.left > 0);
            if !self.client.send_direct(&buf[..pos]) {
                result = result.or(Some(End::ClientEnded(close::GOING_AWAY, String::new())));
            }
        }
        self.keep_rest(buf, pos);
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

impl Assembly {
    /// A data frame of `header` begins: a continuation only inside a
    /// message, a first frame only outside one (RFC 6455 §5.4), and the
    /// message within [`MAX_FILTERED_MESSAGE_BYTES`].
    fn start(&mut self, header: &ServerHeader) -> Result<(), ProtocolError> {
        let continuation = header.opcode == OpCode::Continuation;
        if continuation != self.open {
            return Err(if continuation {
                ProtocolError::UnexpectedContinuation
            } else {
                ProtocolError::ExpectedContinuation
            });
        }
        if !continuation {
            self.open = true;
            self.text = header.opcode == OpCode::Text;
        }
        if self.bytes.len() as u64 + header.payload_len > MAX_FILTERED_MESSAGE_BYTES as u64 {
            return Err(ProtocolError::MessageTooBig);
        }
        Ok(())
    }

    /// The message is whole: to the filter (text must be UTF-8, RFC 6455
    /// §8.1, as every text a guest gets).
    fn done(&mut self, filter: &LinkFilter, id: u64) -> Result<(), ProtocolError> {
        if self.text && simdutf8::basic::from_utf8(&self.bytes).is_err() {
            return Err(ProtocolError::InvalidUtf8);
        }
        filter.queue(id, Direction::ToClient, self.text, &self.bytes);
        self.bytes.clear();
        self.open = false;
        if self.bytes.capacity() > super::KEEP_MESSAGE_BUF_BYTES {
            self.bytes = Vec::new();
        }
        Ok(())
    }
}

/// Walks the upstream frames in `buf` from its start, telling `on` each
/// piece, and returns how far it got and the end a close frame, a protocol
/// violation or `on` brings. A data frame whose payload goes past `buf`
/// is streamed (`frame` counts what is still to come), unless `whole` and
/// it fits the buffer: then the walk stops before it until it is all there.
/// Control frames are always waited for whole; a close ends the walk.
fn walk(
    buf: &[u8],
    frame: &mut Streaming,
    whole: bool,
    mut on: impl FnMut(Piece<'_>) -> Result<(), End>,
) -> (usize, Option<End>) {
    let mut pos = 0;
    while pos < buf.len() {
        if frame.left > 0 {
            let take = frame.left.min((buf.len() - pos) as u64) as usize;
            frame.left -= take as u64;
            let piece = Piece::Payload(&buf[pos..pos + take], frame.left == 0 && frame.fin);
            pos += take;
            if let Err(end) = on(piece) {
                return (pos, Some(end));
            }
            continue;
        }
        let header = match parse_server_header(&buf[pos..]) {
            Ok(Some(header)) => header,
            Ok(None) => break,
            Err(e) => return (pos, Some(End::Broke(e))),
        };
        let total = header.header_len as u64 + header.payload_len;
        let have = (buf.len() - pos) as u64;
        let control = matches!(header.opcode, OpCode::Close | OpCode::Ping | OpCode::Pong);
        if have < total && (control || (whole && total <= UPSTREAM_BUF_BYTES as u64)) {
            break;
        }
        let payload = pos + header.header_len;
        if header.opcode == OpCode::Close {
            return (pos, Some(close_end(&buf[payload..pos + total as usize])));
        }
        let step = if control {
            pos += total as usize;
            on(Piece::Control(&buf[pos - total as usize..pos]))
        } else {
            let arrived = (have - header.header_len as u64).min(header.payload_len) as usize;
            frame.left = header.payload_len - arrived as u64;
            frame.fin = header.fin;
            pos = payload + arrived;
            on(Piece::Start(&header)).and_then(|()| {
                on(Piece::Payload(
                    &buf[payload..pos],
                    frame.left == 0 && header.fin,
                ))
            })
        };
        if let Err(end) = step {
            return (pos, Some(end));
        }
    }
    (pos, None)
}

/// The end an upstream's close frame brings: its code and reason, or the
/// violation a malformed close payload is (RFC 6455 §5.5.1).
fn close_end(payload: &[u8]) -> End {
    match parse_close_payload(payload) {
        Ok((code, reason)) => End::Closed(code, reason.to_string()),
        Err(e) => End::Broke(e),
    }
}
