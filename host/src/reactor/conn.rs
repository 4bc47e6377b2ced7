//! The connection loop: wait for the socket, read into a pooled buffer,
//! decode every complete frame of the read as one batch, reply (in place for
//! echo), write once, and keep the closing handshake, idle timeout,
//! backpressure and shutdown rules.

use super::buffer::{BufPool, Output, HEADROOM_BYTES, READ_BUF_BYTES, STREAM_ABOVE_BYTES};
use super::decode::{Decoder, Piece};
use super::guest::GuestConn;
use super::outbound::{OutMsg, Outbound};
use crate::config::Limits;
use crate::native::echo::Echo;
use crate::native::relay::{Join, Relay, RelayHub};
use crate::ws::close::{self, close_frame};
use crate::ws::frame::{server_frame, OpCode, ProtocolError};
use std::collections::HashMap;
use std::io::{ErrorKind, IoSlice};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// How long the server waits for the client's close frame after sending its
/// own, before it drops the TCP connection anyway.
pub const CLOSE_LINGER: Duration = Duration::from_secs(2);
/// Outbound messages written together in one gather write.
const OUTBOUND_BATCH: usize = 64;

/// What a connection needs from its worker and route.
pub struct ConnEnv {
    pub id: u64,
    pub pool: Rc<BufPool>,
    pub limits: Arc<Limits>,
    /// The gateway's open connections; shutdown closes them through it.
    pub open: Arc<OpenConns>,
    /// The connection's queue, when it was made before the upgrade (a relay
    /// joins its hub with it before the 101).
    pub outbound: Option<Arc<Outbound>>,
}

/// The upgrade never completed: undo what was set up for the connection
/// (a relay's place in the hub, its partner, its queue).
pub fn abandon(env: ConnEnv, mode: Mode) {
    if let Mode::Relay(hub, relay) = mode {
        hub.leave(env.id);
        if let Some(Join::Paired(partner)) = relay.join {
            partner.close(close::GOING_AWAY, "relay partner left");
        }
    }
    if let Some(out) = env.outbound {
        out.consumer_gone();
    }
}

/// The gateway's open WebSocket connections, by id. Shutdown goes through
/// their inboxes rather than a watch in every connection's select, which
/// would cost a waiter registration per read on the hot path; `/metrics`
/// reads their queues. Locked once per connection open and close.
#[derive(Default)]
pub struct OpenConns {
    conns: Mutex<HashMap<u64, Arc<Outbound>>>,
    closing: AtomicBool,
}

/// What the open connections' outbound queues hold, for `/metrics`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct QueueStats {
    pub connections: usize,
    pub queued_bytes: usize,
    /// The most any one connection has queued.
    pub max_queued_bytes: usize,
}

impl OpenConns {
    fn insert(&self, id: u64, outbound: Arc<Outbound>) {
        let mut conns = self.conns.lock().expect("open connections lock");
        // Checked under the lock: a connection opening while shutdown
        // begins is either closed here or by `close_all`.
        if self.closing.load(Ordering::Acquire) {
            outbound.drain();
        }
        conns.insert(id, outbound);
    }

    fn remove(&self, id: u64) {
        self.conns
            .lock()
            .expect("open connections lock")
            .remove(&id);
    }

    /// Asks every open connection, and every one that opens later, to close
    /// with 1001. Only the first call does anything.
    pub fn close_all(&self) {
        let conns = self.conns.lock().expect("open connections lock");
        if self.closing.swap(true, Ordering::AcqRel) {
            return;
        }
        for out in conns.values() {
            out.drain();
        }
    }

    pub fn stats(&self) -> QueueStats {
        let conns = self.conns.lock().expect("open connections lock");
        let mut stats = QueueStats {
            connections: conns.len(),
            ..QueueStats::default()
        };
        for out in conns.values() {
            let queued = out.queued_bytes();
            stats.queued_bytes += queued;
            stats.max_queued_bytes = stats.max_queued_bytes.max(queued);
        }
        stats
    }
}

const SHUTDOWN_REASON: &str = "server shutting down";

/// The route's behaviour, as the connection runs it.
pub enum Mode {
    Echo(Echo),
    Relay(Arc<RelayHub>, Relay),
    /// A guest route; `target` is the request's `path?query` for the open event.
    Guest(GuestConn, String),
}

impl Mode {
    /// A streamed reply frame is half written: no close frame can follow.
    fn mid_frame(&self) -> bool {
        matches!(self, Mode::Echo(e) if e.mid_frame)
    }
}

/// How the loop goes on after an event.
enum Flow {
    Continue,
    /// The connection is over; the socket may be dropped.
    Done,
    /// Send this close and wait for the client's reply.
    Close(u16, String),
    /// Shutdown: answer what the client has sent so far, then close 1001.
    Drain,
}

struct Conn {
    env: ConnEnv,
    stream: TcpStream,
    decoder: Decoder,
    /// Held only while bytes are in flight (idle connections hold none).
    buf: Option<Box<[u8]>>,
    /// Unprocessed bytes are `buf[start..end]`.
    start: usize,
    end: usize,
    out: Output,
    outbound: Arc<Outbound>,
    last_read: Instant,
    ping_sent: bool,
    /// The client's close code and reason, once it sent a close.
    peer_close: Option<(u16, String)>,
    /// The last read carried a piece of a streamed (large) frame: the next
    /// read takes a large buffer from the start.
    large_frames: bool,
}

/// Runs a connection after the 101 until it closes. `prefix` holds bytes
/// hyper had already read past the request head.
pub async fn run(stream: TcpStream, prefix: bytes::Bytes, mut env: ConnEnv, mut mode: Mode) {
    let outbound = env
        .outbound
        .take()
        .unwrap_or_else(|| Arc::new(Outbound::new(env.limits.outbound_budget)));
    let mut c = Conn {
        decoder: Decoder::new(env.limits.max_message, STREAM_ABOVE_BYTES),
        env,
        stream,
        buf: None,
        start: HEADROOM_BYTES,
        end: HEADROOM_BYTES,
        out: Output::default(),
        outbound,
        last_read: Instant::now(),
        ping_sent: false,
        peer_close: None,
        large_frames: false,
    };
    c.env.open.insert(c.env.id, c.outbound.clone());
    if let Mode::Guest(g, target) = &mode {
        g.slot.open(c.env.id, target, c.outbound.clone());
    }
    let flow = c.drive(prefix, &mut mode).await;
    match flow {
        Flow::Close(code, reason) if !mode.mid_frame() => c.close_and_linger(code, &reason).await,
        _ => {}
    }
    match &mode {
        Mode::Relay(hub, relay) => {
            hub.leave(c.env.id);
            if let Some(p) = &relay.partner {
                p.close(close::GOING_AWAY, "relay partner left");
            }
        }
        Mode::Guest(g, _) => {
            // 1006: the connection ended without a close from the client.
            let (code, reason) = c.peer_close.take().unwrap_or((1006, String::new()));
            g.slot.close(c.env.id, code, &reason);
        }
        Mode::Echo(_) => {}
    }
    c.env.open.remove(c.env.id);
    c.outbound.consumer_gone();
    if let Some(buf) = c.buf.take() {
        c.env.pool.give(buf);
    }
}

impl Conn {
    async fn drive(&mut self, prefix: bytes::Bytes, mode: &mut Mode) -> Flow {
        // A relay is paired before anything it sent is handled.
        if let Mode::Relay(hub, relay) = mode {
            let join = relay
                .join
                .take()
                .unwrap_or_else(|| hub.join(self.env.id, self.outbound.clone()));
            match join {
                Join::Paired(partner) => relay.partner = Some(partner),
                Join::Waiting(paired) => match self.wait_for_partner(paired).await {
                    Ok(partner) => relay.partner = Some(partner),
                    Err(flow) => return flow,
                },
            }
        }
        for chunk in prefix.chunks(READ_BUF_BYTES - HEADROOM_BYTES) {
            let buf = self.buf.get_or_insert_with(|| self.env.pool.take(false));
            let room = buf.len() - self.end;
            let take = chunk.len().min(room);
            buf[self.end..self.end + take].copy_from_slice(&chunk[..take]);
            self.end += take;
            if let flow @ (Flow::Done | Flow::Close(..)) = self.process(mode).await {
                return flow;
            }
        }
        // hyper's read buffer is several KiB: not something to keep for the
        // life of an idle connection.
        drop(prefix);
        if matches!(mode, Mode::Relay(..) | Mode::Guest(..)) {
            // The relay partner or the guest runner writes its messages
            // straight into this socket when it can. `Drop for Conn` ends
            // that before the socket closes.
            use std::os::fd::AsRawFd;
            self.outbound.enable_direct(self.stream.as_raw_fd());
        }
        let idle_timeout = self.env.limits.idle_timeout;
        let idle = tokio::time::sleep(idle_timeout);
        tokio::pin!(idle);
        loop {
            // Stop reading while the queue this client's messages feed is
            // over budget: the partner's for relay, its own for guest replies.
            let blocker = match mode {
                Mode::Relay(_, r) => r.partner.as_ref().filter(|p| p.over_budget()).cloned(),
                Mode::Guest(..) => Some(self.outbound.clone()).filter(|o| o.over_budget()),
                Mode::Echo(_) => None,
            };
            let blocked = blocker.is_some();
            let flow = tokio::select! {
                biased;
                _ = self.outbound.ready() => self.deliver().await,
                _ = wait_drained(blocker.as_deref()), if blocked => Flow::Continue,
                ready = self.stream.readable(), if !blocked => match ready {
                    Ok(()) => self.read(mode).await,
                    Err(_) => Flow::Done,
                },
                _ = &mut idle => {
                    let quiet = self.last_read.elapsed();
                    if quiet < idle_timeout {
                        idle.as_mut().reset(self.last_read + idle_timeout);
                        Flow::Continue
                    } else if self.ping_sent {
                        Flow::Close(close::GOING_AWAY, "idle timeout".into())
                    } else {
                        self.ping_sent = true;
                        idle.as_mut().reset(Instant::now() + idle_timeout);
                        let ping = server_frame(OpCode::Ping, b"");
                        match self.write_own(&ping, idle_timeout).await {
                            Ok(()) => Flow::Continue,
                            Err(_) => Flow::Done,
                        }
                    }
                }
            };
            match flow {
                Flow::Continue => {}
                Flow::Drain => return self.read_rest(mode).await,
                flow => return flow,
            }
        }
    }

    /// Shutdown: what the client sent before the 1001 and is already in
    /// the socket is read and answered first (a bounded number of reads,
    /// without waiting for more). Guest routes skip this: their replies
    /// would come from a batch that runs after the close.
    async fn read_rest(&mut self, mode: &mut Mode) -> Flow {
        const DRAIN_READS: usize = 16;
        let going_away = Flow::Close(close::GOING_AWAY, SHUTDOWN_REASON.into());
        if matches!(mode, Mode::Guest(..)) {
            return going_away;
        }
        for _ in 0..DRAIN_READS {
            let large = self.wants_large_buffer();
            let buf = self.buf.get_or_insert_with(|| self.env.pool.take(large));
            let room = &mut buf[self.end..];
            // A plain non-blocking recv: tokio's readiness may not know yet
            // about bytes that have arrived.
            use std::os::fd::AsRawFd;
            // SAFETY: `room` is valid for writes of its length; the
            // descriptor belongs to `self.stream`.
            let n = unsafe {
                libc::recv(
                    self.stream.as_raw_fd(),
                    room.as_mut_ptr().cast(),
                    room.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if n <= 0 {
                break;
            }
            self.end += n as usize;
            match self.process(mode).await {
                Flow::Continue => {}
                flow => return flow,
            }
        }
        going_away
    }

    /// An unpaired relay connection is not read from; it waits for a partner,
    /// for shutdown, or for the client to go away (seen with a peek, or in
    /// the TCP state once data is pending).
    async fn wait_for_partner(
        &mut self,
        mut paired: tokio::sync::oneshot::Receiver<Arc<Outbound>>,
    ) -> Result<Arc<Outbound>, Flow> {
        let mut watch_socket = true;
        let mut probe = [0u8; 1];
        loop {
            tokio::select! {
                partner = &mut paired => {
                    return partner.map_err(|_| Flow::Done);
                }
                _ = self.outbound.ready() => match self.deliver().await {
                    Flow::Continue => {}
                    // Nothing was read while unpaired: nothing to answer.
                    Flow::Drain => {
                        return Err(Flow::Close(close::GOING_AWAY, SHUTDOWN_REASON.into()))
                    }
                    flow => return Err(flow),
                },
                peeked = self.stream.peek(&mut probe), if watch_socket => match peeked {
                    // Data waits for the partner; only a hang-up matters now.
                    Ok(n) if n > 0 => watch_socket = false,
                    _ => return Err(Flow::Done),
                },
                // With data pending the socket stays readable, so a hang-up
                // behind it is seen in the TCP state instead: a dead
                // connection must not be paired with the next client.
                _ = tokio::time::sleep(HANGUP_PROBE), if !watch_socket => {
                    if peer_hung_up(&self.stream) {
                        return Err(Flow::Done);
                    }
                }
            }
        }
    }

    /// Which receive buffer the next read takes when none is held: the
    /// large one for the rest of a large frame, and for the read after one.
    /// A client that sends one large message mostly sends more: reading the
    /// next one into a large buffer from its first byte halves the reads and
    /// writes of a 128 KiB echo (one each instead of two) and saves a fifth
    /// of its CPU. Other connections keep the small buffer.
    fn wants_large_buffer(&self) -> bool {
        self.large_frames || self.decoder.streamed_remaining() > STREAM_ABOVE_BYTES as u64
    }

    /// One read, then the batch of pieces it completes.
    async fn read(&mut self, mode: &mut Mode) -> Flow {
        let large = self.wants_large_buffer();
        let buf = self.buf.get_or_insert_with(|| self.env.pool.take(large));
        match read_drained(&self.stream, &mut buf[self.end..]) {
            Ok(0) => return Flow::Done,
            Ok(n) => self.end += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Flow::Continue,
            Err(_) => return Flow::Done,
        }
        self.last_read = Instant::now();
        self.ping_sent = false;
        self.process(mode).await
    }

    /// Decodes `buf[start..end]`, replies, writes, and keeps the leftover.
    async fn process(&mut self, mode: &mut Mode) -> Flow {
        let buf = self.buf.as_mut().expect("process runs on a buffer");
        let mut pos = self.start;
        let end = self.end;
        let mut flow = Flow::Continue;
        let mut large_frames = false;
        loop {
            match self.decoder.next(buf, &mut pos, end) {
                Ok(Some(Piece::Data(piece))) => {
                    large_frames |= piece.frame_len > STREAM_ABOVE_BYTES as u64;
                    match mode {
                        Mode::Echo(echo) => echo.reply(buf, &piece, &mut self.out),
                        Mode::Relay(_, relay) => relay.take_piece(buf, &piece),
                        Mode::Guest(g, _) => g.take_piece(self.env.id, buf, &piece),
                    }
                }
                Ok(Some(Piece::Ping { payload })) => {
                    // RFC 6455 §5.5.3: a pong carries the ping's payload; its
                    // header goes where the ping's header was.
                    let at = payload.start - 2;
                    buf[at] = 0x80 | OpCode::Pong as u8;
                    buf[at + 1] = payload.len() as u8;
                    self.out.push(buf, at..payload.end);
                }
                Ok(Some(Piece::Pong)) => {}
                Ok(Some(Piece::Close { code, payload })) => {
                    // RFC 6455 §5.5.1: answer with a close echoing the code
                    // (1000 when the client gave none), then end the connection.
                    if matches!(mode, Mode::Guest(..)) {
                        let reason = String::from_utf8_lossy(
                            &buf[payload.start + 2.min(payload.len())..payload.end],
                        );
                        self.peer_close = Some((code, reason.into_owned()));
                    }
                    let code = if code == 1005 { close::NORMAL } else { code };
                    let at = payload.start - 4;
                    buf[at..payload.start].copy_from_slice(&[
                        0x88,
                        2,
                        (code >> 8) as u8,
                        code as u8,
                    ]);
                    self.out.push(buf, at..payload.start);
                    flow = Flow::Done;
                    break;
                }
                Ok(None) => break,
                Err(e) => {
                    flow = failure(e);
                    break;
                }
            }
        }
        self.large_frames = large_frames;
        match mode {
            Mode::Relay(_, relay) => {
                if !relay.flush() && matches!(flow, Flow::Continue) {
                    flow = Flow::Close(close::GOING_AWAY, "relay partner left".into());
                }
            }
            Mode::Guest(g, _) => g.end_of_read(),
            Mode::Echo(_) => {}
        }
        let stall_limit = self.env.limits.idle_timeout;
        let written = if self.outbound.direct() && !self.out.is_empty() {
            // The relay partner may be writing into this socket too: take
            // the turn, and finish a frame it began first.
            let _turn = self.outbound.write_turn();
            let mut result = Ok(());
            if let Some(rest) = self.outbound.take_remainder() {
                result = unless_stalled(stall_limit, self.stream.write_all(&rest)).await;
                self.outbound.written(rest.len());
            }
            if result.is_ok() {
                result = unless_stalled(stall_limit, self.out.flush(&mut self.stream, buf)).await;
            }
            result
        } else {
            unless_stalled(stall_limit, self.out.flush(&mut self.stream, buf)).await
        };
        if written.is_err() {
            return Flow::Done;
        }
        // Keep what the decoder could not use yet at the front of the buffer.
        let left = end - pos;
        if left == 0 {
            self.env.pool.give(self.buf.take().expect("buffer in use"));
        } else if pos != HEADROOM_BYTES {
            buf.copy_within(pos..end, HEADROOM_BYTES);
        }
        self.start = HEADROOM_BYTES;
        self.end = HEADROOM_BYTES + left;
        flow
    }

    /// Writes frames other connections or the guest queued for this one.
    async fn deliver(&mut self) -> Flow {
        // Messages are taken under the write turn, so a direct write from
        // the relay partner cannot overtake them.
        let _turn = self.outbound.direct().then(|| self.outbound.write_turn());
        self.outbound.clear_remainder();
        let mut frames = Vec::new();
        let mut closing = None;
        let mut taken = 0;
        while frames.len() < OUTBOUND_BATCH {
            let Some(msg) = self.outbound.try_recv() else {
                break;
            };
            taken += 1;
            match msg {
                OutMsg::Frames(f) => frames.push(f),
                OutMsg::Close(code, reason) => {
                    closing = Some(Flow::Close(code, reason));
                    break;
                }
                OutMsg::Drain => {
                    closing = Some(Flow::Drain);
                    break;
                }
            }
        }
        let total: usize = frames.iter().map(|f| f.len()).sum();
        let stall_limit = self.env.limits.idle_timeout;
        let written = match frames.as_slice() {
            [] => Ok(()),
            [one] => unless_stalled(stall_limit, self.stream.write_all(one)).await,
            _ => {
                let mut slices: Vec<IoSlice<'_>> = frames.iter().map(|f| IoSlice::new(f)).collect();
                let write = super::buffer::write_all_vectored(&mut self.stream, &mut slices);
                unless_stalled(stall_limit, write).await
            }
        };
        self.outbound.written(total);
        self.outbound.delivered(taken);
        match (written, closing) {
            (Err(_), _) => Flow::Done,
            (Ok(()), Some(flow)) => flow,
            (Ok(()), None) => Flow::Continue,
        }
    }

    /// Writes bytes of the connection's own (a ping) to its socket, taking
    /// the write turn when the relay partner may write too.
    async fn write_own(&mut self, bytes: &[u8], stall_limit: Duration) -> std::io::Result<()> {
        let _turn = self.outbound.direct().then(|| self.outbound.write_turn());
        if let Some(rest) = self.outbound.take_remainder() {
            unless_stalled(stall_limit, self.stream.write_all(&rest)).await?;
            self.outbound.written(rest.len());
        }
        unless_stalled(stall_limit, self.stream.write_all(bytes)).await
    }

    /// Sends a close frame, then reads until the client's close (or EOF, or
    /// the linger time) so the client sees a clean close (RFC 6455 §7.1.1).
    async fn close_and_linger(&mut self, code: u16, reason: &str) {
        // No direct writes after the close frame.
        self.outbound.end_direct();
        let frame = close_frame(code, reason);
        if self.write_own(&frame, CLOSE_LINGER).await.is_err() {
            return;
        }
        if !self.decoder.peer_closed() {
            let _ = tokio::time::timeout(CLOSE_LINGER, self.await_close()).await;
        }
        let _ = self.stream.shutdown().await;
    }

    async fn await_close(&mut self) {
        loop {
            let buf = self.buf.get_or_insert_with(|| self.env.pool.take(false));
            if self.end == buf.len() {
                // Nothing useful can arrive in this much junk; stop waiting.
                return;
            }
            if self.stream.readable().await.is_err() {
                return;
            }
            match self.stream.try_read(&mut buf[self.end..]) {
                Ok(0) => return,
                Ok(n) => self.end += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => continue,
                Err(_) => return,
            }
            let mut pos = self.start;
            loop {
                match self.decoder.next(buf, &mut pos, self.end) {
                    Ok(Some(Piece::Close { .. })) | Err(_) => return,
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                }
            }
            let left = self.end - pos;
            buf.copy_within(pos..self.end, HEADROOM_BYTES);
            self.start = HEADROOM_BYTES;
            self.end = HEADROOM_BYTES + left;
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        // Before the socket closes: its descriptor number could be reused
        // by another connection while the relay partner still writes to it.
        self.outbound.end_direct();
    }
}

/// How often an unpaired relay connection holding unread data checks that
/// its client is still there.
const HANGUP_PROBE: Duration = Duration::from_millis(250);

/// The client closed its side (or the connection is gone), by the kernel's
/// TCP state.
fn peer_hung_up(stream: &TcpStream) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: an all-zero tcp_info is valid; getsockopt writes at most `len`
    // bytes into it, and the descriptor belongs to `stream`.
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

/// One `recv` into `buf`. A read shorter than `buf` drained the socket, so
/// the readiness is cleared with it: otherwise the next turn of the loop
/// would make a second `recv` only to learn `EAGAIN` — one wasted syscall per
/// read, which for one-message-per-read traffic (relay, ping-pong) is a third
/// of all syscalls. tokio only clears readiness it has not seen renewed, so
/// data arriving meanwhile still wakes the connection.
fn read_drained(stream: &TcpStream, buf: &mut [u8]) -> std::io::Result<usize> {
    use std::os::fd::AsRawFd;
    let mut got = 0;
    let result = stream.try_io(tokio::io::Interest::READABLE, || {
        // SAFETY: `buf` is valid for writes of `buf.len()` bytes, and the
        // descriptor belongs to `stream`, which outlives the call.
        let n = unsafe { libc::recv(stream.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        got = n as usize;
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

/// Runs a write; if the client leaves it blocked (its receive window full)
/// for `limit`, gives up with `TimedOut` so the connection is dropped: a
/// client that stops reading holds its socket and buffer only that long.
/// The timer is set only once the write has had to wait, so the usual write
/// that completes at once costs none.
async fn unless_stalled<F>(limit: Duration, write: F) -> std::io::Result<()>
where
    F: std::future::Future<Output = std::io::Result<()>>,
{
    let mut write = std::pin::pin!(write);
    let first = std::future::poll_fn(|cx| std::task::Poll::Ready(write.as_mut().poll(cx))).await;
    match first {
        std::task::Poll::Ready(result) => result,
        std::task::Poll::Pending => match tokio::time::timeout(limit, write).await {
            Ok(result) => result,
            Err(_) => {
                tracing::debug!(?limit, "client stopped reading; dropping the connection");
                Err(ErrorKind::TimedOut.into())
            }
        },
    }
}

/// Waits until the queue that blocked reading drains.
async fn wait_drained(queue: Option<&Outbound>) {
    if let Some(q) = queue {
        q.wait_drained().await;
    }
}

/// The close a protocol violation earns (RFC 6455 §7.4.1).
fn failure(e: ProtocolError) -> Flow {
    tracing::debug!(error = %e, "closing connection on protocol error");
    Flow::Close(e.close_code(), e.to_string())
}
