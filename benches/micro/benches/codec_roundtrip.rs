//! In-memory echo round trip, weir's codec against tokio-tungstenite, with no
//! network and no scheduler between them: one current-thread runtime, one
//! `tokio::io::duplex` pipe, a client that writes a masked 512 B binary frame
//! and waits for the whole echo (checked byte for byte) before the next.
//!
//! - weir: the reactor's per-read loop (`conn.rs` `process()`): read into a
//!   buffer after `HEADROOM_BYTES`, `Decoder::next` until it needs more,
//!   `Echo::on_data` writes the reply header in place, `Output::flush` writes
//!   the batch, leftovers move back to the front.
//! - tungstenite: `WebSocketStream::from_raw_socket` (server role), echoing
//!   each data message with `send`.
//!
//! Criterion times the round trip (`iter_custom`); afterwards the bench
//! prints its own table of latency percentiles (each round trip timed on its
//! own) and messages/s for both. Target: weir's p99 ≤ half of tungstenite's.

use criterion::{BenchmarkId, Criterion, Throughput};
use futures_util::{SinkExt, StreamExt};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::runtime::Runtime;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::WebSocketStream;
use weir::native::echo::Echo;
use weir::reactor::behaviour::Behaviour;
use weir::reactor::buffer::{Output, HEADROOM_BYTES, READ_BUF_BYTES, STREAM_ABOVE_BYTES};
use weir::reactor::decode::{Decoder, Piece};
use weir_ws::encode::encode_client_header;
use weir_ws::frame::{OpCode, MAX_HEADER_BYTES};
use weir_ws::mask::unmask;

const PAYLOAD: usize = 512;
const KEY: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];
/// Pipe capacity: room for many frames, like a socket buffer.
const PIPE_BYTES: usize = 256 * 1024;
/// Round trips timed one by one for the percentile table.
const SAMPLES: usize = 200_000;

#[derive(Clone, Copy, Debug)]
enum Server {
    Weir,
    Tungstenite,
}

/// weir's codec, as the reactor drives it for a native echo route.
async fn weir_echo(mut stream: DuplexStream) {
    let mut buf = vec![0u8; READ_BUF_BYTES];
    let mut decoder = Decoder::new(64 << 20, STREAM_ABOVE_BYTES);
    let mut echo = Echo::default();
    let mut out = Output::default();
    let mut end = HEADROOM_BYTES;
    loop {
        match stream.read(&mut buf[end..]).await {
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
        if out.flush(&mut stream, &buf).await.is_err() {
            return;
        }
        let left = end - pos;
        if left > 0 && pos != HEADROOM_BYTES {
            buf.copy_within(pos..end, HEADROOM_BYTES);
        }
        end = HEADROOM_BYTES + left;
    }
}

/// tokio-tungstenite's server side, default configuration.
async fn tungstenite_echo(stream: DuplexStream) {
    let mut ws = WebSocketStream::from_raw_socket(stream, Role::Server, None).await;
    while let Some(Ok(msg)) = ws.next().await {
        if (msg.is_binary() || msg.is_text()) && ws.send(msg).await.is_err() {
            return;
        }
    }
}

/// The client end: the masked frame it sends and the reply it expects.
struct Client {
    stream: DuplexStream,
    frame: Vec<u8>,
    expect: Vec<u8>,
    reply: Vec<u8>,
}

impl Client {
    fn new(stream: DuplexStream) -> Client {
        let payload: Vec<u8> = (0..PAYLOAD).map(|i| (i * 7 + 3) as u8).collect();
        let mut head = [0u8; MAX_HEADER_BYTES];
        let n = encode_client_header(&mut head, true, OpCode::Binary, KEY, PAYLOAD as u64);
        let mut frame = head[..n].to_vec();
        let at = frame.len();
        frame.extend_from_slice(&payload);
        unmask(&mut frame[at..], KEY, 0);
        // Server frame: FIN|binary, 126 + 16-bit length, then the payload.
        let mut expect = vec![0x82, 126, (PAYLOAD >> 8) as u8, PAYLOAD as u8];
        expect.extend_from_slice(&payload);
        let reply = vec![0; expect.len()];
        Client {
            stream,
            frame,
            expect,
            reply,
        }
    }

    async fn round_trip(&mut self) {
        self.stream.write_all(&self.frame).await.unwrap();
        self.stream.read_exact(&mut self.reply).await.unwrap();
        assert!(self.reply == self.expect, "wrong echo");
    }
}

/// A runtime with a connected client and the chosen server task spawned on it.
fn setup(server: Server) -> (Runtime, Client) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (client, server_end) = tokio::io::duplex(PIPE_BYTES);
    rt.spawn(async move {
        match server {
            Server::Weir => weir_echo(server_end).await,
            Server::Tungstenite => tungstenite_echo(server_end).await,
        }
    });
    (rt, Client::new(client))
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("codec_roundtrip_512B");
    // Bytes through the server per round trip: the frame in and the echo out.
    group.throughput(Throughput::Bytes(2 * PAYLOAD as u64));
    for server in [Server::Weir, Server::Tungstenite] {
        let (rt, mut client) = setup(server);
        group.bench_function(BenchmarkId::from_parameter(format!("{server:?}")), |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let t = Instant::now();
                    for _ in 0..iters {
                        client.round_trip().await;
                    }
                    t.elapsed()
                })
            })
        });
    }
    group.finish();
}

struct Stats {
    p50: f64,
    p95: f64,
    p99: f64,
    p999: f64,
    msgs_per_s: f64,
}

/// Times `SAMPLES` round trips one by one (after a warm-up).
fn sample(server: Server) -> Stats {
    let (rt, mut client) = setup(server);
    let mut lat = Vec::with_capacity(SAMPLES);
    let total = rt.block_on(async {
        for _ in 0..SAMPLES / 10 {
            client.round_trip().await;
        }
        let start = Instant::now();
        for _ in 0..SAMPLES {
            let t = Instant::now();
            client.round_trip().await;
            lat.push(t.elapsed().as_nanos() as u64);
        }
        start.elapsed()
    });
    lat.sort_unstable();
    let q = |p: f64| lat[((p * SAMPLES as f64) as usize).min(SAMPLES - 1)] as f64;
    Stats {
        p50: q(0.50),
        p95: q(0.95),
        p99: q(0.99),
        p999: q(0.999),
        msgs_per_s: SAMPLES as f64 / total.as_secs_f64(),
    }
}

fn table() {
    println!("\nround trip of a 512 B binary message over tokio::io::duplex, current-thread runtime, {SAMPLES} samples each");
    println!("| server | p50 ns | p95 ns | p99 ns | p99.9 ns | msgs/s |");
    println!("|---|---|---|---|---|---|");
    let mut rows = Vec::new();
    for server in [Server::Weir, Server::Tungstenite] {
        let s = sample(server);
        println!(
            "| {server:?} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} |",
            s.p50, s.p95, s.p99, s.p999, s.msgs_per_s
        );
        rows.push(s);
    }
    let (w, t) = (&rows[0], &rows[1]);
    println!(
        "weir/tungstenite: p50 {:.2}, p99 {:.2}, p99.9 {:.2}, msgs/s {:.2} (target p99 ≤ 0.50)",
        w.p50 / t.p50,
        w.p99 / t.p99,
        w.p999 / t.p999,
        w.msgs_per_s / t.msgs_per_s
    );
}

fn main() {
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    bench(&mut c);
    c.final_summary();
    if !std::env::args().any(|a| a == "--list") {
        table();
    }
}
