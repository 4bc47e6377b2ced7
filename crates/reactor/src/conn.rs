//! The connection loop: wait for the socket, read into a pooled buffer,
//! decode every complete frame of the read as one batch, hand the pieces to
//! the route's [`Behaviour`], write once, and keep the closing handshake,
//! idle timeout, backpressure and shutdown rules. Generic over the
//! behaviour: nothing here names a route kind.

mod inflate;
mod outgoing;

use inflate::{inflate_piece, Inflating};
pub(crate) use outgoing::take_queued;
use outgoing::write_all;

use super::behaviour::{Behaviour, Stop};
use super::buffer::{
    poll_write_all, poll_write_all_vectored, BufPool, Output, HEADROOM_BYTES, READ_BUF_BYTES,
    STREAM_ABOVE_BYTES,
};
use super::decode::{Decoder, Piece};
use super::idle::IdleWheel;
use super::outbound::{OutMsg, Outbound};
use super::rate::{Admit, ConnRate, Over};
use super::socket::unless_stalled_poll;
use super::transport::Transport;
use crate::registry::{worker_of, Registry};
use crate::stats::{overload, ConnCounters, RouteStats};
use std::io::{ErrorKind, IoSlice};
use std::rc::Rc;
use std::sync::Arc;
use std::task::ready;
use std::time::Duration;
use weir_config::Limits;
use weir_ws::close;
use weir_ws::compress::{Deflater, Inflater};
use weir_ws::deflate::Negotiated;
use weir_ws::encode;
use weir_ws::frame::{OpCode, ProtocolError};

/// How long the server keeps reading after its close frame, for the
/// client's close or EOF, before it drops the TCP connection anyway.
pub const CLOSE_LINGER: Duration = Duration::from_secs(2);
/// Bytes the server reads and discards after its close frame before giving
/// up on a clean close: a client still sending must not get a TCP reset
/// (which destroys the close frame in its receive queue), but it may not
/// keep the connection open by sending forever either.
pub const CLOSE_DRAIN_MAX_BYTES: usize = 4 << 20;
/// Outbound messages written together in one gather write.
const OUTBOUND_BATCH: usize = 64;
/// How often a connection whose reads are blocked, with unread data in its
/// socket, checks that its client is still there.
const HANGUP_PROBE: Duration = Duration::from_millis(250);

/// What a connection needs from its worker and route.
pub struct ConnEnv {
    pub id: u64,
    /// Index of the route, for the registry.
    pub route: usize,
    /// The client's address.
    pub peer: std::net::IpAddr,
    pub pool: Rc<BufPool>,
    pub limits: Arc<Limits>,
    /// The gateway's live connections; shutdown closes them through it.
    pub registry: Arc<Registry>,
    /// The connection's queue, made before the upgrade (a relay joins its
    /// hub with it before the 101).
    pub outbound: Arc<Outbound>,
    /// The route's counters; this connection writes its worker's shard.
    pub stats: Arc<RouteStats>,
    /// permessage-deflate, when the upgrade negotiated it.
    pub deflate: Option<Negotiated>,
    /// The worker's idle deadlines.
    pub idle: Rc<IdleWheel>,
    /// Held until the connection ends: its place under the connection
    /// limits (the server's; for HTTP/2, shared by the connection's streams).
    pub live: Rc<dyn std::any::Any>,
    /// The worker's plane (`[server] io = "epoll"`): a plain TCP connection
    /// of a kind with no work beside its socket runs there, not as a task.
    pub plane: Option<Rc<crate::plane::Plane>>,
}

/// The close every connection gets when the gateway shuts down: 1012
/// (service restart), so clients reconnect, to another node or to this
/// one once it is back (the paced drain spreads these over
/// `drain_timeout`; see `rate::Pace`).
pub(crate) const SHUTDOWN_CODE: u16 = close::SERVICE_RESTART;
pub(crate) const SHUTDOWN_REASON: &str = "server restarting";

/// How the loop goes on after an event.
pub(crate) enum Flow {
    Continue,
    /// The connection is over; the socket may be dropped.
    Done,
    /// Send this close and wait for the client's reply.
    Close(u16, String),
    /// Shutdown: answer what the client has sent so far, then close 1001.
    Drain,
}

impl From<Stop> for Flow {
    fn from(stop: Stop) -> Flow {
        match stop {
            Stop::Gone => Flow::Done,
            Stop::Close(code, reason) => Flow::Close(code, reason.into()),
        }
    }
}

pub(crate) struct Conn<T> {
    pub(crate) env: ConnEnv,
    pub(crate) stream: T,
    pub(crate) decoder: Decoder,
    /// Held only while bytes are in flight (idle connections hold none).
    pub(crate) buf: Option<Box<[u8]>>,
    /// Unprocessed bytes are `buf[start..end]`.
    pub(crate) start: usize,
    pub(crate) end: usize,
    pub(crate) out: Output,
    /// A ping went out after a silent period; a read clears it.
    pub(crate) ping_sent: bool,
    /// The last read carried a piece of a streamed (large) frame: the next
    /// read takes a large buffer from the start.
    pub(crate) large_frames: bool,
    /// The close code the connection ends with, for the route's counters:
    /// the client's, or the one the server sends; 1006 while none.
    pub(crate) close_code: u16,
    /// permessage-deflate's inbound side (None: not negotiated).
    inflate: Option<Box<Inflating>>,
    /// The route's message and byte rates (None: the route sets none, and
    /// the loop never looks past this Option, once per batch).
    rate: Option<Box<ConnRate>>,
}

/// Runs a connection after the 101 until it closes. `prefix` holds bytes
/// hyper had already read past the request head.
///
/// Not an `async fn`: its arguments would stay in the future beside the
/// connection they were moved into. The future is what every open
/// connection holds while it waits, so its size is per-connection memory.
pub fn run<B: Behaviour, T: Transport>(
    stream: T,
    prefix: bytes::Bytes,
    env: ConnEnv,
    mut behaviour: B,
) -> impl std::future::Future<Output = ()> {
    let mut c = Conn::new::<B>(stream, env);
    async move {
        c.open(&mut behaviour);
        let flow = c.drive(prefix, &mut behaviour).await;
        match flow {
            Flow::Close(code, reason) if !behaviour.mid_frame() => {
                c.close_code = code;
                c.close_and_linger(code, &reason).await
            }
            _ => c.env.outbound.end_direct(),
        }
        c.finish(&mut behaviour);
    }
}

impl<T: Transport> Conn<T> {
    /// A connection's state before its first read.
    pub(crate) fn new<B: Behaviour>(stream: T, env: ConnEnv) -> Conn<T> {
        let mut decoder = Decoder::new(env.limits.max_message, STREAM_ABOVE_BYTES);
        let (mut out, mut inflate) = (Output::default(), None);
        if let Some(n) = &env.deflate {
            decoder.allow_compression();
            if B::COMPRESSES_REPLIES {
                out = Output::compressing(Deflater::new(n));
            }
            inflate = Some(Box::new(Inflating {
                inflater: Inflater::new(n),
                message: Vec::new(),
            }));
        }
        let rates = &env.limits.rates;
        let rate = match rates.limits_messages() {
            true => ConnRate::new(rates, std::time::Instant::now()).map(Box::new),
            false => None,
        };
        Conn {
            decoder,
            inflate,
            rate,
            env,
            stream,
            buf: None,
            start: HEADROOM_BYTES,
            end: HEADROOM_BYTES,
            out,
            ping_sent: false,
            large_frames: false,
            close_code: close::ABNORMAL,
        }
    }

    /// The connection is live: counted, in the registry, opened to its
    /// behaviour, under the idle wheel, and open to direct writes.
    pub(crate) fn open<B: Behaviour>(&mut self, behaviour: &mut B) {
        let (id, outbound) = (self.env.id, self.env.outbound.clone());
        self.counters().accepted.add_owned(1);
        self.env
            .registry
            .insert(id, self.env.route, outbound.clone(), self.env.peer);
        behaviour.on_open(id, &outbound);
        self.env
            .idle
            .watch(outbound.clone(), self.env.limits.idle_timeout);
        if B::DIRECT_WRITES {
            if let Some(socket) = self.stream.direct_socket() {
                outbound.enable_direct(socket);
            }
        }
    }

    /// The connection ended (its close, if any, written): counted, closed
    /// to its behaviour, out of the registry, its queue refused.
    pub(crate) fn finish<B: Behaviour>(&mut self, behaviour: &mut B) {
        let id = self.env.id;
        self.counters().closed_with(self.close_code);
        behaviour.on_close(id);
        self.env.registry.remove(id);
        self.env.outbound.consumer_gone();
        if let Some(buf) = self.buf.take() {
            self.env.pool.give(buf);
        }
    }

    /// This worker's shard of the route's counters.
    pub(crate) fn counters(&self) -> &ConnCounters {
        self.env.stats.worker(worker_of(self.env.id))
    }

    /// The paths that are not every message's (reads blocked, the idle
    /// ping, the shutdown's last reads) run boxed: the future every open
    /// connection holds while it waits is sized by the common path only.
    async fn drive<B: Behaviour>(&mut self, prefix: bytes::Bytes, behaviour: &mut B) -> Flow {
        // Bytes the client sent with its upgrade wait, like the socket, until
        // reads are allowed (a relay is paired first).
        if behaviour.reads_blocked(&self.env.outbound) {
            match Box::pin(self.wait_unblocked(behaviour)).await {
                Flow::Continue => {}
                // Nothing was read while blocked: nothing to answer.
                Flow::Drain => return Flow::Close(SHUTDOWN_CODE, SHUTDOWN_REASON.into()),
                flow => return flow,
            }
        }
        for chunk in prefix.chunks(READ_BUF_BYTES - HEADROOM_BYTES) {
            let buf = self.buf.get_or_insert_with(|| self.env.pool.take(false));
            let room = buf.len() - self.end;
            let take = chunk.len().min(room);
            buf[self.end..self.end + take].copy_from_slice(&chunk[..take]);
            self.end += take;
            if let flow @ (Flow::Done | Flow::Close(..)) = self.process(behaviour).await {
                return flow;
            }
        }
        // hyper's read buffer is several KiB: not something to keep for the
        // life of an idle connection.
        drop(prefix);
        loop {
            let flow = if behaviour.reads_blocked(&self.env.outbound) {
                Box::pin(self.wait_unblocked(behaviour)).await
            } else {
                tokio::select! {
                    biased;
                    _ = self.env.outbound.ready() => match self.env.outbound.take_idle_due() {
                        true => Box::pin(self.idle_check()).await,
                        false => self.deliver().await,
                    },
                    ready = self.stream.readable() => match ready {
                        Ok(()) => self.read(behaviour).await,
                        Err(_) => Flow::Done,
                    },
                    beside = behaviour.beside(), if B::HAS_BESIDE => match beside {
                        Ok(()) => Flow::Continue,
                        Err(stop) => stop.into(),
                    },
                }
            };
            match flow {
                Flow::Continue => {}
                Flow::Drain if behaviour.answers_before_drain() => {
                    return Box::pin(self.read_rest(behaviour)).await
                }
                Flow::Drain => return Flow::Close(SHUTDOWN_CODE, SHUTDOWN_REASON.into()),
                flow => return flow,
            }
        }
    }

    /// The idle wheel woke the connection: a ping after one silent period,
    /// a close after the second (see `reactor::idle`).
    async fn idle_check(&mut self) -> Flow {
        let idle = &self.env.idle;
        let silent = idle.now().wrapping_sub(self.env.outbound.last_read());
        if silent < IdleWheel::ticks(self.env.limits.idle_timeout) {
            // A read came after the wheel looked.
            return Flow::Continue;
        }
        if self.ping_sent {
            return Flow::Close(close::GOING_AWAY, "idle timeout".into());
        }
        self.ping_sent = true;
        let ping = encode::frame(OpCode::Ping, b"");
        match self.write_own(&ping, self.env.limits.idle_timeout).await {
            Ok(()) => Flow::Continue,
            Err(_) => Flow::Done,
        }
    }

    /// Reads are blocked (see [`Behaviour::reads_blocked`]): deliver what
    /// others queue for this connection, and notice the client leaving —
    /// with a peek, or in the TCP state once data is pending (a dead relay
    /// connection must not be paired with the next client).
    async fn wait_unblocked<B: Behaviour>(&mut self, behaviour: &mut B) -> Flow {
        let mut watch_socket = true;
        loop {
            tokio::select! {
                unblocked = behaviour.unblocked(&self.env.outbound) => {
                    return match unblocked {
                        Ok(()) => Flow::Continue,
                        Err(stop) => stop.into(),
                    };
                }
                _ = self.env.outbound.ready() => {
                    // Reads are blocked: nothing to time out yet.
                    self.env.outbound.take_idle_due();
                    match self.deliver().await {
                        Flow::Continue => {}
                        flow => return flow,
                    }
                },
                waiting = self.stream.data_waiting(), if watch_socket => match waiting {
                    // Data waits; only a hang-up matters now.
                    true => watch_socket = false,
                    false => return Flow::Done,
                },
                _ = tokio::time::sleep(HANGUP_PROBE), if !watch_socket => {
                    if self.stream.hung_up() {
                        return Flow::Done;
                    }
                }
            }
        }
    }

    /// Shutdown: what the client sent before the 1001 and is already in
    /// the socket is read and answered first (a bounded number of reads,
    /// without waiting for more).
    async fn read_rest<B: Behaviour>(&mut self, behaviour: &mut B) -> Flow {
        const DRAIN_READS: usize = 16;
        for _ in 0..DRAIN_READS {
            let large = self.wants_large_buffer();
            let buf = self.buf.get_or_insert_with(|| self.env.pool.take(large));
            let n = match self.stream.read(&mut buf[self.end..]) {
                Ok(n) if n > 0 => n,
                _ => break,
            };
            self.end += n;
            match self.process(behaviour).await {
                Flow::Continue => {}
                flow => return flow,
            }
        }
        Flow::Close(SHUTDOWN_CODE, SHUTDOWN_REASON.into())
    }

    /// Which receive buffer the next read takes when none is held: the
    /// large one for the rest of a large frame, and for the read after one.
    /// A client that sends one large message mostly sends more: reading the
    /// next one into a large buffer from its first byte halves the reads and
    /// writes of a 128 KiB echo (one each instead of two) and saves a fifth
    /// of its CPU. Other connections keep the small buffer.
    pub(crate) fn wants_large_buffer(&self) -> bool {
        self.large_frames || self.decoder.streamed_remaining() > STREAM_ABOVE_BYTES as u64
    }

    /// One read, then the batch of pieces it completes.
    async fn read<B: Behaviour>(&mut self, behaviour: &mut B) -> Flow {
        let large = self.wants_large_buffer();
        let buf = self.buf.get_or_insert_with(|| self.env.pool.take(large));
        match self.stream.read(&mut buf[self.end..]) {
            Ok(0) => return Flow::Done,
            Ok(n) => self.end += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Flow::Continue,
            Err(_) => return Flow::Done,
        }
        self.env.outbound.touch(self.env.idle.now());
        self.ping_sent = false;
        self.process(behaviour).await
    }

    /// Decodes `buf[start..end]`, replies, writes, and keeps the leftover.
    async fn process<B: Behaviour>(&mut self, behaviour: &mut B) -> Flow {
        let (flow, pos) = self.decode_batch(behaviour);
        let stall_limit = self.env.limits.idle_timeout;
        let outbound = &self.env.outbound;
        let buf = self.buf.as_mut().expect("process runs on a buffer");
        let (stream, out) = (&mut self.stream, &mut self.out);
        // A producer may be writing into this socket too: take the turn,
        // and finish a frame it began first.
        let direct = outbound.direct() && !out.is_empty();
        let turn = direct.then(|| outbound.write_turn());
        let mut written = Ok(());
        if let Some(rest) = direct.then(|| outbound.take_remainder()).flatten() {
            // A direct write's remainder (relay, guests): rare, boxed.
            written = Box::pin(write_all(stream, &rest, stall_limit)).await;
            outbound.written(rest.len());
        }
        if written.is_ok() {
            let buf: &[u8] = buf;
            written = unless_stalled_poll(stall_limit, |cx| {
                out.poll_flush(&mut stream.writer(), buf, cx)
            })
            .await;
        }
        drop(turn);
        if written.is_err() {
            return Flow::Done;
        }
        self.keep_leftover(pos);
        flow
    }

    /// After the close: whatever the buffer holds is dropped and the
    /// buffer goes back to the pool, so a lingering connection whose
    /// client is quiet holds none (a mass close of slow clients would hold
    /// one each for the whole linger).
    pub(crate) fn drop_buffer(&mut self) {
        if let Some(buf) = self.buf.take() {
            self.env.pool.give(buf);
        }
        self.start = HEADROOM_BYTES;
        self.end = HEADROOM_BYTES;
    }

    /// Keeps what the decoder could not use yet (`buf[pos..end]`) at the
    /// front of the buffer, or gives the buffer back when nothing is left.
    pub(crate) fn keep_leftover(&mut self, pos: usize) {
        let end = self.end;
        let left = end - pos;
        if left == 0 {
            self.env.pool.give(self.buf.take().expect("buffer in use"));
        } else if pos != HEADROOM_BYTES {
            let buf = self.buf.as_mut().expect("buffer in use");
            buf.copy_within(pos..end, HEADROOM_BYTES);
        }
        self.start = HEADROOM_BYTES;
        self.end = HEADROOM_BYTES + left;
    }

    /// Decodes `buf[start..end]` and hands every piece to the behaviour,
    /// its replies gathered in `out` (not yet written): the read's flow,
    /// and where decoding stopped.
    pub(crate) fn decode_batch<B: Behaviour>(&mut self, behaviour: &mut B) -> (Flow, usize) {
        // The rates are looked at once per batch: a connection without any
        // runs the loop with a gate that always passes (compiled away).
        match self.rate.take() {
            None => self.decode_gated(behaviour, &mut Open),
            Some(mut rate) => {
                rate.refill(std::time::Instant::now());
                let done = self.decode_gated(behaviour, &mut *rate);
                self.rate = Some(rate);
                done
            }
        }
    }

    /// [`decode_batch`](Self::decode_batch) with each data piece judged by
    /// `gate` first: passed, dropped (counted) or closing the connection.
    fn decode_gated<B: Behaviour, G: Gate>(
        &mut self,
        behaviour: &mut B,
        gate: &mut G,
    ) -> (Flow, usize) {
        let buf = self.buf.as_mut().expect("process runs on a buffer");
        let mut pos = self.start;
        let end = self.end;
        let mut flow = Flow::Continue;
        let mut large_frames = false;
        let (mut messages, mut bytes) = (0u64, 0u64);
        let mut closed_over = None;
        loop {
            match self.decoder.next(buf, &mut pos, end) {
                Ok(Some(Piece::Data(piece))) => {
                    large_frames |= piece.frame_len > STREAM_ABOVE_BYTES as u64;
                    messages += u64::from(piece.message_end());
                    bytes += piece.payload.len() as u64;
                    let deliver = match gate.admit(&piece) {
                        Admit::Pass => true,
                        Admit::Drop => false,
                        Admit::Close(over) => {
                            closed_over = Some(over);
                            flow = Flow::Close(close::POLICY_VIOLATION, over.reason().into());
                            break;
                        }
                    };
                    if !piece.compressed {
                        if deliver {
                            behaviour.on_data(buf, &piece, &mut self.out);
                        }
                    } else if let Err(e) = inflate_piece(
                        self.inflate.as_mut().expect("RSV1 only when negotiated"),
                        &buf[piece.payload.clone()],
                        &piece,
                        self.env.limits.max_message,
                        deliver.then_some(&mut *behaviour),
                        &mut self.out,
                    ) {
                        flow = failure(e);
                        break;
                    }
                }
                Ok(Some(Piece::Ping { payload })) => {
                    if !behaviour.on_control(buf, OpCode::Ping, payload.clone()) {
                        let pong = encode::pong_in_place(buf, payload);
                        self.out.push(buf, pong);
                    }
                }
                Ok(Some(Piece::Pong { payload })) => {
                    behaviour.on_control(buf, OpCode::Pong, payload);
                }
                Ok(Some(Piece::Close { code, payload })) => {
                    // RFC 6455 §5.5.1: answer with a close, then end the
                    // connection. The decoder checked the reason's UTF-8.
                    let reason = &buf[payload.start + 2.min(payload.len())..payload.end];
                    behaviour.on_peer_close(code, std::str::from_utf8(reason).unwrap_or(""));
                    let reply = encode::close_reply_in_place(buf, payload, code);
                    self.out.push(buf, reply);
                    self.close_code = code;
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
        if bytes != 0 || messages != 0 {
            let counters = self.env.stats.worker(worker_of(self.env.id));
            counters.messages_in.add_owned(messages);
            counters.bytes_in.add_owned(bytes);
            let (dropped, dropped_bytes) = gate.take_dropped();
            if B::SENDS_EACH_MESSAGE_ON {
                let dropped_messages = dropped[0] + dropped[1];
                counters
                    .messages_out
                    .add_owned(messages.saturating_sub(dropped_messages));
                counters
                    .bytes_out
                    .add_owned(bytes.saturating_sub(dropped_bytes));
            }
            if dropped != [0, 0] {
                let o = &counters.overload;
                o[overload::MESSAGE_RATE_DROPPED].add_owned(dropped[0]);
                o[overload::BYTE_RATE_DROPPED].add_owned(dropped[1]);
            }
        }
        if let Some(over) = closed_over {
            let index = match over {
                Over::Messages => overload::MESSAGE_RATE_CLOSED,
                Over::Bytes => overload::BYTE_RATE_CLOSED,
            };
            let counters = self.env.stats.worker(worker_of(self.env.id));
            counters.overload[index].add_owned(1);
        }
        if let Err(stop) = behaviour.end_of_read_in(&buf[..]) {
            if matches!(flow, Flow::Continue) {
                flow = stop.into();
            }
        }
        (flow, pos)
    }
}

/// What the loop asks of a connection's rates for each data piece.
pub(crate) trait Gate {
    fn admit(&mut self, piece: &crate::decode::DataPiece) -> Admit;
    /// Messages dropped since the last call (over the message rate, over
    /// the byte rate) and their payload bytes.
    fn take_dropped(&mut self) -> ([u64; 2], u64);
}

/// No rates: every piece passes.
struct Open;

impl Gate for Open {
    #[inline(always)]
    fn admit(&mut self, _: &crate::decode::DataPiece) -> Admit {
        Admit::Pass
    }

    #[inline(always)]
    fn take_dropped(&mut self) -> ([u64; 2], u64) {
        ([0; 2], 0)
    }
}

impl Gate for ConnRate {
    #[inline]
    fn admit(&mut self, piece: &crate::decode::DataPiece) -> Admit {
        ConnRate::admit(self, piece)
    }

    fn take_dropped(&mut self) -> ([u64; 2], u64) {
        ConnRate::take_dropped(self)
    }
}

/// The close a protocol violation earns (RFC 6455 §7.4.1).
pub(crate) fn failure(e: ProtocolError) -> Flow {
    tracing::debug!(error = %e, "closing connection on protocol error");
    Flow::Close(e.close_code(), e.to_string())
}
