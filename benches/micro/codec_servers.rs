//! The four WebSocket servers of the codec tables (`benches/codec_tables.rs`)
//! and the one client they all face, shared with the correctness test
//! (`tests/codec_servers.rs`).
//!
//! Every server runs on an already-upgraded, uncompressed stream in the
//! server role, on a current-thread runtime:
//! - weir: its codec as the reactor drives it (`reactor/conn.rs`): read into
//!   one buffer after `HEADROOM_BYTES`, `Decoder::next` (header, unmask,
//!   UTF-8) until it needs more, the native echo writes each reply header in
//!   place and `Output::flush` writes the batch; messages it originates are
//!   framed by `ws::encode::append_frame` into one buffer, as guest sends are.
//! - sockudo-ws 3.x: `WebSocketStream::server`, auto-ping and the idle
//!   timeout off; `next` and `feed` (its read path flushes fed replies
//!   before it waits for input, the documented batching path).
//! - fastwebsockets: `WebSocket::after_handshake`, `read_frame` and
//!   `write_frame` (no fragment collector: every frame here is whole).
//! - tokio-tungstenite: `WebSocketStream::from_raw_socket`, `next` and
//!   `send`; `feed` then `flush` for a run of sends.
//!
//! The client is hand-written: masked frames built once (or stamped in
//! place), written with `write_all`, replies read with `read_exact`, so the
//! figures differ only by server.

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use std::io::IoSlice;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream, ReadBuf};
use tokio::runtime::Runtime;
use weir::native::echo::Echo;
use weir::reactor::behaviour::Behaviour;
use weir::reactor::buffer::{Output, HEADROOM_BYTES, READ_BUF_BYTES, STREAM_ABOVE_BYTES};
use weir::reactor::decode::{Decoder, Piece};
use weir_ws::encode;
use weir_ws::frame::{OpCode, MAX_HEADER_BYTES};
use weir_ws::mask::unmask;

/// In-memory pipe capacity between client and server, like a socket buffer.
pub const PIPE_BYTES: usize = 1 << 20;
/// The client's masking key: not zero, so every server really unmasks.
const KEY: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];
/// Largest message any server here accepts (every library's default or more).
const MAX_MESSAGE_BYTES: usize = 64 << 20;
/// weir's batch of originated frames handed to one write, as a guest's
/// sends of one turn are.
const SEND_BATCH_BYTES: usize = 64 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Server {
    Weir,
    Sockudo,
    Fastwebsockets,
    Tungstenite,
}

pub const SERVERS: [Server; 4] = [
    Server::Weir,
    Server::Sockudo,
    Server::Fastwebsockets,
    Server::Tungstenite,
];

impl Server {
    pub fn name(self) -> &'static str {
        match self {
            Server::Weir => "weir",
            Server::Sockudo => "sockudo-ws 3.1",
            Server::Fastwebsockets => "fastwebsockets 0.10",
            Server::Tungstenite => "tokio-tungstenite 0.30",
        }
    }
}

/// Nanoseconds since the first call: the clock of the burst's timestamps,
/// shared by the client (send) and the server (arrival).
pub fn now_ns() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// CPU time this thread has run, user and kernel: the throughput cells'
/// clock, since client and server share the thread, and time the scheduler
/// gave other processes of a shared machine is not the codec's.
pub fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "CLOCK_THREAD_CPUTIME_ID");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// A throughput: messages per second of wall-clock time, and per second of
/// the thread's CPU time.
#[derive(Clone, Copy, Debug)]
pub struct Rate {
    pub per_wall_s: f64,
    pub per_cpu_s: f64,
}

impl Rate {
    fn of(count: usize, wall: Duration, cpu: Duration) -> Rate {
        Rate {
            per_wall_s: count as f64 / wall.as_secs_f64(),
            per_cpu_s: count as f64 / cpu.as_secs_f64(),
        }
    }
}

/// Wall-clock and CPU time since it was made.
struct Stopwatch(Instant, Duration);

impl Stopwatch {
    fn start() -> Stopwatch {
        Stopwatch(Instant::now(), thread_cpu())
    }

    fn rate(&self, count: usize) -> Rate {
        Rate::of(count, self.0.elapsed(), thread_cpu() - self.1)
    }
}

/// A current-thread runtime: client and server take turns on one thread.
pub fn runtime() -> Runtime {
    // sockudo-ws calibrates its clock on first use (up to 200 ms): done
    // here, outside any timing.
    sockudo_ws::init_clock();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

/// Payload bytes of a test message: printable ASCII, so valid text too.
pub fn payload(len: usize) -> Vec<u8> {
    (0..len).map(|i| b'a' + (i % 26) as u8).collect()
}

/// A masked client frame carrying `payload`.
pub fn client_frame(opcode: OpCode, payload: &[u8]) -> Vec<u8> {
    let mut head = [0u8; MAX_HEADER_BYTES];
    let n = encode::encode_client_header(&mut head, true, opcode, KEY, payload.len() as u64);
    let mut frame = head[..n].to_vec();
    frame.extend_from_slice(payload);
    unmask(&mut frame[n..], KEY, 0);
    frame
}

/// The unmasked server frame carrying `payload` (RFC 6455 §5.2), written
/// out here rather than by weir's encoder, so it checks weir too.
pub fn server_frame(opcode: OpCode, payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    let mut frame = vec![0x80 | opcode as u8];
    if len < 126 {
        frame.push(len as u8);
    } else if len <= 0xffff {
        frame.push(126);
        frame.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        frame.push(127);
        frame.extend_from_slice(&(len as u64).to_be_bytes());
    }
    frame.extend_from_slice(payload);
    frame
}

/// Echoes every data message back to its sender until the stream ends.
pub async fn echo(server: Server, io: DuplexStream) {
    match server {
        Server::Weir => weir_echo(io).await,
        Server::Sockudo => {
            let mut ws = sockudo_ws::WebSocketStream::server(io, sockudo_config());
            while let Some(Ok(msg)) = ws.next().await {
                if (msg.is_text() || msg.is_binary()) && ws.feed(msg).await.is_err() {
                    return;
                }
            }
        }
        Server::Fastwebsockets => {
            let mut ws =
                fastwebsockets::WebSocket::after_handshake(io, fastwebsockets::Role::Server);
            while let Ok(frame) = ws.read_frame().await {
                match frame.opcode {
                    fastwebsockets::OpCode::Text | fastwebsockets::OpCode::Binary => {
                        // A received frame keeps the client's mask key; a
                        // server frame must carry none (RFC 6455 §5.1).
                        let reply = fastwebsockets::Frame::new(
                            frame.fin,
                            frame.opcode,
                            None,
                            frame.payload,
                        );
                        if ws.write_frame(reply).await.is_err() {
                            return;
                        }
                    }
                    fastwebsockets::OpCode::Close => return,
                    _ => {}
                }
            }
        }
        Server::Tungstenite => {
            let mut ws = tungstenite_server(io).await;
            while let Some(Ok(msg)) = ws.next().await {
                if (msg.is_text() || msg.is_binary()) && ws.send(msg).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Hands the payload of every data message to `each` until the stream ends.
pub async fn consume(server: Server, io: DuplexStream, mut each: impl FnMut(&[u8])) {
    match server {
        Server::Weir => weir_consume(io, each).await,
        Server::Sockudo => {
            let mut ws = sockudo_ws::WebSocketStream::server(io, sockudo_config());
            while let Some(Ok(msg)) = ws.next().await {
                match msg {
                    sockudo_ws::Message::Text(b) | sockudo_ws::Message::Binary(b) => each(&b),
                    sockudo_ws::Message::Close(_) => return,
                    _ => {}
                }
            }
        }
        Server::Fastwebsockets => {
            let mut ws =
                fastwebsockets::WebSocket::after_handshake(io, fastwebsockets::Role::Server);
            while let Ok(frame) = ws.read_frame().await {
                match frame.opcode {
                    fastwebsockets::OpCode::Text | fastwebsockets::OpCode::Binary => {
                        each(&frame.payload)
                    }
                    fastwebsockets::OpCode::Close => return,
                    _ => {}
                }
            }
        }
        Server::Tungstenite => {
            use tokio_tungstenite::tungstenite::Message;
            let mut ws = tungstenite_server(io).await;
            while let Some(Ok(msg)) = ws.next().await {
                match msg {
                    Message::Text(t) => each(t.as_bytes()),
                    Message::Binary(b) => each(&b),
                    Message::Close(_) => return,
                    _ => {}
                }
            }
        }
    }
}

/// Sends `warm` then `count` text messages carrying `text` (valid UTF-8)
/// into `io` and flushes; returns the sink and the rate of the last
/// `count` and the flush.
pub async fn send_texts(
    server: Server,
    io: Discard,
    text: &Bytes,
    warm: usize,
    count: usize,
) -> (Discard, Rate) {
    let mut start = Stopwatch::start();
    let mut note = |i: usize| {
        if i == warm {
            start = Stopwatch::start();
        }
    };
    let io = match server {
        Server::Weir => {
            let mut io = io;
            let mut frames = Vec::with_capacity(SEND_BATCH_BYTES + MAX_HEADER_BYTES + text.len());
            for i in 0..warm + count {
                note(i);
                encode::append_frame(&mut frames, OpCode::Text, text);
                if frames.len() >= SEND_BATCH_BYTES {
                    io.write_all(&frames).await.expect("discard write");
                    frames.clear();
                }
            }
            io.write_all(&frames).await.expect("discard write");
            io.flush().await.expect("discard flush");
            io
        }
        Server::Sockudo => {
            let mut ws = sockudo_ws::WebSocketStream::server(io, sockudo_config());
            for i in 0..warm + count {
                note(i);
                ws.feed(sockudo_ws::Message::Text(text.clone()))
                    .await
                    .expect("sockudo feed");
            }
            SinkExt::flush(&mut ws).await.expect("sockudo flush");
            ws.into_inner()
        }
        Server::Fastwebsockets => {
            let mut ws =
                fastwebsockets::WebSocket::after_handshake(io, fastwebsockets::Role::Server);
            for i in 0..warm + count {
                note(i);
                let frame = fastwebsockets::Frame::text(fastwebsockets::Payload::Borrowed(text));
                ws.write_frame(frame).await.expect("fastwebsockets write");
            }
            ws.flush().await.expect("fastwebsockets flush");
            ws.into_inner()
        }
        Server::Tungstenite => {
            use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};
            let text = Utf8Bytes::try_from(text.clone()).expect("UTF-8 text");
            let mut ws = tungstenite_server(io).await;
            for i in 0..warm + count {
                note(i);
                ws.feed(Message::Text(text.clone()))
                    .await
                    .expect("tungstenite feed");
            }
            SinkExt::flush(&mut ws).await.expect("tungstenite flush");
            ws.into_inner()
        }
    };
    (io, start.rate(count))
}

/// Plain frames only: no pings, no idle deadline, nothing but the codec.
fn sockudo_config() -> sockudo_ws::Config {
    sockudo_ws::Config::builder()
        .auto_ping(false)
        .idle_timeout(0)
        .max_message_size(MAX_MESSAGE_BYTES)
        .build()
}

async fn tungstenite_server<S>(io: S) -> tokio_tungstenite::WebSocketStream<S>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    tokio_tungstenite::WebSocketStream::from_raw_socket(
        io,
        tokio_tungstenite::tungstenite::protocol::Role::Server,
        None,
    )
    .await
}

/// weir's codec, as the reactor drives it for a native echo route: every
/// reply is the received frame with its header rewritten in place, and a
/// read's replies leave in one write.
async fn weir_echo(mut io: DuplexStream) {
    let mut buf = vec![0u8; READ_BUF_BYTES];
    let mut decoder = Decoder::new(MAX_MESSAGE_BYTES, STREAM_ABOVE_BYTES);
    let mut echo = Echo::default();
    let mut out = Output::default();
    let mut end = HEADROOM_BYTES;
    loop {
        match io.read(&mut buf[end..]).await {
            Ok(0) | Err(_) => return,
            Ok(n) => end += n,
        }
        let mut pos = HEADROOM_BYTES;
        loop {
            match decoder.next(&mut buf, &mut pos, end) {
                Ok(Some(Piece::Data(piece))) => echo.on_data(&mut buf, &piece, &mut out),
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(e) => panic!("weir decoder: {e:?}"),
            }
        }
        if out.flush(&mut io, &buf).await.is_err() {
            return;
        }
        end = keep_rest(&mut buf, pos, end);
    }
}

/// The same read loop handing each whole message to `each`.
async fn weir_consume(mut io: DuplexStream, mut each: impl FnMut(&[u8])) {
    let mut buf = vec![0u8; READ_BUF_BYTES];
    let mut decoder = Decoder::new(MAX_MESSAGE_BYTES, STREAM_ABOVE_BYTES);
    let mut end = HEADROOM_BYTES;
    loop {
        match io.read(&mut buf[end..]).await {
            Ok(0) | Err(_) => return,
            Ok(n) => end += n,
        }
        let mut pos = HEADROOM_BYTES;
        loop {
            match decoder.next(&mut buf, &mut pos, end) {
                Ok(Some(Piece::Data(piece))) => {
                    assert!(piece.frame_start && piece.message_end(), "a whole message");
                    each(&buf[piece.payload]);
                }
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(e) => panic!("weir decoder: {e:?}"),
            }
        }
        end = keep_rest(&mut buf, pos, end);
    }
}

/// Moves an incomplete frame's bytes to the front; returns the new end.
fn keep_rest(buf: &mut [u8], pos: usize, end: usize) -> usize {
    let left = end - pos;
    if left > 0 && pos != HEADROOM_BYTES {
        buf.copy_within(pos..end, HEADROOM_BYTES);
    }
    HEADROOM_BYTES + left
}

/// A write end that discards what it is given and counts it (keeping it
/// too when asked, for the correctness test); reading it never yields.
#[derive(Default)]
pub struct Discard {
    pub bytes: usize,
    pub kept: Option<Vec<u8>>,
}

impl AsyncWrite for Discard {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.bytes += buf.len();
        if let Some(kept) = &mut self.kept {
            kept.extend_from_slice(buf);
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let mut n = 0;
        for b in bufs {
            n += b.len();
            if let Some(kept) = &mut self.kept {
                kept.extend_from_slice(b);
            }
        }
        self.bytes += n;
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl AsyncRead for Discard {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        _: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Poll::Pending
    }
}

/// The client end of a round-trip run: one masked text frame and the echo
/// it expects.
pub struct EchoClient {
    io: DuplexStream,
    frame: Vec<u8>,
    expect: Vec<u8>,
    reply: Vec<u8>,
}

impl EchoClient {
    pub fn new(io: DuplexStream, size: usize) -> EchoClient {
        let text = payload(size);
        let expect = server_frame(OpCode::Text, &text);
        EchoClient {
            io,
            frame: client_frame(OpCode::Text, &text),
            reply: vec![0; expect.len()],
            expect,
        }
    }

    /// One round trip; `check` compares the whole echo, else only its
    /// header (the length is `read_exact`'s).
    pub async fn round_trip(&mut self, check: bool) {
        self.io.write_all(&self.frame).await.expect("client write");
        self.io
            .read_exact(&mut self.reply)
            .await
            .expect("client read");
        if check {
            assert!(
                self.reply == self.expect,
                "wrong echo: {:?} for {:?}",
                &self.reply[..self.reply.len().min(12)],
                &self.expect[..self.expect.len().min(12)]
            );
        } else {
            assert!(self.reply[..2] == self.expect[..2], "wrong echo header");
        }
    }
}

/// Round-trip latencies (ns, sorted) of `count` text messages of `size`
/// bytes, one at a time, after `warm` unmeasured ones (checked in full).
pub fn round_trips(server: Server, size: usize, warm: usize, count: usize) -> Vec<u64> {
    let rt = runtime();
    let (client, server_end) = tokio::io::duplex(PIPE_BYTES);
    rt.spawn(echo(server, server_end));
    let mut client = EchoClient::new(client, size);
    let mut lat = Vec::with_capacity(count);
    rt.block_on(async {
        for _ in 0..warm {
            client.round_trip(true).await;
        }
        for _ in 0..count {
            let t = Instant::now();
            client.round_trip(false).await;
            lat.push(t.elapsed().as_nanos() as u64);
        }
    });
    lat.sort_unstable();
    lat
}

/// One-way latencies (ns, sorted): the client writes `count` binary
/// messages of `size` bytes back to back, each stamped with its send time
/// in its first 8 bytes; the server notes each one's arrival.
pub fn burst(server: Server, size: usize, count: usize) -> Vec<u64> {
    assert!(size >= 8);
    let rt = runtime();
    let (mut client, server_end) = tokio::io::duplex(PIPE_BYTES);
    let body = payload(size);
    let task = rt.spawn(async move {
        let mut lat = Vec::with_capacity(count);
        consume(server, server_end, |msg| {
            let now = now_ns();
            let sent = u64::from_le_bytes(msg[..8].try_into().expect("8 bytes"));
            assert!(msg.len() == size && msg[8..] == body[8..], "wrong message");
            lat.push(now - sent);
        })
        .await;
        lat
    });
    let mut frame = client_frame(OpCode::Binary, &payload(size));
    let at = frame.len() - size;
    let mut lat = rt.block_on(async move {
        for _ in 0..count {
            let mut stamp = now_ns().to_le_bytes();
            // The key repeats every 4 bytes and the payload starts at offset 0.
            unmask(&mut stamp, KEY, 0);
            frame[at..at + 8].copy_from_slice(&stamp);
            client.write_all(&frame).await.expect("client write");
        }
        drop(client);
        task.await.expect("server task")
    });
    assert_eq!(lat.len(), count, "{server:?} lost messages");
    lat.sort_unstable();
    lat
}

/// Messages/s the server consumes: `warm` then `count` text messages of
/// `size` bytes, encoded beforehand and written in one go; timed by the
/// server's receive loop from its `warm`-th message to its last, so the
/// pipe's and the server's buffers have grown before the clock starts.
pub fn receive_rate(server: Server, size: usize, warm: usize, count: usize) -> Rate {
    assert!(warm > 0);
    let rt = runtime();
    let (mut client, server_end) = tokio::io::duplex(PIPE_BYTES);
    let one = client_frame(OpCode::Text, &payload(size));
    let frames = one.repeat(warm + count);
    let task = rt.spawn(async move {
        let (mut seen, mut start, mut rate) = (0, Stopwatch::start(), None);
        consume(server, server_end, |msg| {
            assert!(msg.len() == size, "wrong message");
            seen += 1;
            if seen == warm {
                start = Stopwatch::start();
            } else if seen == warm + count {
                rate = Some(start.rate(count));
            }
        })
        .await;
        (seen, rate)
    });
    let (seen, rate) = rt.block_on(async move {
        client.write_all(&frames).await.expect("client write");
        drop(client);
        task.await.expect("server task")
    });
    assert_eq!(seen, warm + count, "{server:?} lost messages");
    rate.expect("the last message was timed")
}

/// Messages/s the server sends: `count` text messages of `size` bytes,
/// after `warm` untimed ones, into a sink that discards them.
pub fn send_rate(server: Server, size: usize, warm: usize, count: usize) -> Rate {
    let rt = runtime();
    let text = Bytes::from(payload(size));
    let (sink, rate) = rt.block_on(send_texts(server, Discard::default(), &text, warm, count));
    let want = (warm + count) * server_frame(OpCode::Text, &text).len();
    assert_eq!(
        sink.bytes, want,
        "{server:?} sent the wrong number of bytes"
    );
    rate
}

/// Messages/s of `count` sequential round trips of `size`-byte text, after
/// `warm` untimed ones (checked in full).
pub fn echo_rate(server: Server, size: usize, warm: usize, count: usize) -> Rate {
    let rt = runtime();
    let (client, server_end) = tokio::io::duplex(PIPE_BYTES);
    rt.spawn(echo(server, server_end));
    let mut client = EchoClient::new(client, size);
    rt.block_on(async {
        for _ in 0..warm {
            client.round_trip(true).await;
        }
        let t = Stopwatch::start();
        for _ in 0..count {
            client.round_trip(false).await;
        }
        t.rate(count)
    })
}
