//! Abusive clients, each with a bounded outcome (README "What bad input
//! gets"): slow handshakes, clients that never read, floods, endless and
//! oversized messages. Memory bounds are asserted on the gateway's own
//! accounting (`/metrics`), not on timing.

mod common;

use common::*;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{timeout, Instant};
use weir_config::Config;

const UPGRADE: &str = "GET /echo HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                       Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";

/// The `/metrics` scrape is itself one open TCP connection.
const SCRAPER: u64 = 1;

/// The receive buffer a connection holds while a frame is in flight.
const SMALL_BUF: u64 = weir::reactor::buffer::READ_BUF_BYTES as u64;

fn one_worker() -> Config {
    let mut config = Config::builtin_default();
    config.server.workers = 1;
    config
}

/// Reads until the gateway closes the connection; returns how long it took.
/// Panics if it stays open past `limit` or if any answer arrives.
async fn dropped_within(stream: &mut TcpStream, limit: Duration) -> Duration {
    let started = Instant::now();
    let mut buf = [0u8; 1024];
    match timeout(limit, stream.read(&mut buf)).await {
        Err(_) => panic!("connection still open after {limit:?}"),
        Ok(Ok(0)) | Ok(Err(_)) => started.elapsed(),
        Ok(Ok(n)) => panic!(
            "unexpected answer: {:?}",
            String::from_utf8_lossy(&buf[..n])
        ),
    }
}

/// Slowloris: a request head sent one byte at a time, one never finished,
/// one never started and a keep-alive connection left idle are each dropped
/// once `handshake_timeout` has passed since the head began.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_handshakes_are_dropped_after_the_handshake_timeout() {
    let mut config = one_worker();
    config.server.handshake_timeout = Duration::from_millis(400);
    let gw = Gateway::start(config);
    let limit = Duration::from_secs(5);

    // One byte every 50 ms: the whole head would take ~8 s.
    let mut trickle = TcpStream::connect(gw.addr).await.unwrap();
    let started = Instant::now();
    let dripper = {
        let (mut rd, mut wr) = trickle.into_split();
        let drip = tokio::spawn(async move {
            for byte in UPGRADE.bytes() {
                if wr.write_all(&[byte]).await.is_err() {
                    return false;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            true
        });
        let mut buf = [0u8; 256];
        let ended = timeout(limit, rd.read(&mut buf)).await;
        assert!(
            matches!(ended, Ok(Ok(0)) | Ok(Err(_))),
            "trickled head was answered: {ended:?}"
        );
        drip
    };
    assert!(started.elapsed() < limit);
    assert!(
        !dripper.await.unwrap(),
        "the whole head got through before the timeout"
    );

    // Half a head, then nothing.
    trickle = TcpStream::connect(gw.addr).await.unwrap();
    trickle.write_all(&UPGRADE.as_bytes()[..40]).await.unwrap();
    dropped_within(&mut trickle, limit).await;

    // Nothing at all.
    let mut silent = TcpStream::connect(gw.addr).await.unwrap();
    dropped_within(&mut silent, limit).await;

    // A finished request, then an idle keep-alive connection.
    let mut idle = TcpStream::connect(gw.addr).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut head = [0u8; 128];
    let n = timeout(limit, idle.read(&mut head)).await.unwrap().unwrap();
    assert!(head[..n].starts_with(b"HTTP/1.1 200"));
    dropped_within(&mut idle, limit).await;

    await_metric(gw.addr, "weir_tcp_connections", SCRAPER).await;
    gw.stop();
}

/// A numbered binary message: its sequence number, then a fill byte.
fn numbered(seq: u32, len: usize) -> Vec<u8> {
    let mut payload = vec![(seq % 251) as u8; len];
    payload[..4].copy_from_slice(&seq.to_be_bytes());
    payload
}

fn check_numbered(seq: u32, first: u8, payload: &[u8], len: usize) {
    assert_eq!(first, 0x82, "message {seq}: opcode");
    assert_eq!(payload.len(), len, "message {seq}: length");
    let got = u32::from_be_bytes(payload[..4].try_into().unwrap());
    assert_eq!(got, seq, "messages lost or out of order");
    assert!(
        payload[4..].iter().all(|&x| x == (seq % 251) as u8),
        "message {seq}: content"
    );
}

/// Writes `count` numbered messages on its own task; `progress` counts the
/// ones handed to the kernel whole.
fn spawn_writer(
    raw: &Raw,
    count: u32,
    len: usize,
) -> (
    std::sync::Arc<std::sync::atomic::AtomicU32>,
    tokio::task::JoinHandle<()>,
) {
    use std::sync::atomic::Ordering;
    let progress = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let counter = progress.clone();
    let mut wr = second_handle(&raw.stream);
    let task = tokio::spawn(async move {
        for seq in 0..count {
            let wire = frame(0x82, &numbered(seq, len));
            wr.write_all(&wire).await.expect("write");
            counter.store(seq + 1, Ordering::Release);
        }
        // Keep the write half (and so the connection) open until dropped.
        std::future::pending::<()>().await;
    });
    (progress, task)
}

/// Waits until `progress` stops moving for a while: the gateway stopped
/// reading. Panics if everything was written (no backpressure at all).
async fn await_stall(progress: &std::sync::atomic::AtomicU32, count: u32) -> u32 {
    use std::sync::atomic::Ordering;
    let deadline = Instant::now() + STEP;
    let mut last = u32::MAX;
    loop {
        tokio::time::sleep(Duration::from_millis(400)).await;
        let now = progress.load(Ordering::Acquire);
        assert!(
            now < count,
            "all {count} messages were read without a reader"
        );
        if now == last {
            return now;
        }
        assert!(Instant::now() < deadline, "writer never stalled");
        last = now;
    }
}

/// Reads `count` numbered messages in order.
async fn read_numbered(rd: &mut Raw, count: u32, len: usize) {
    for seq in 0..count {
        let (first, payload) = rd.next_frame().await.expect("a message");
        check_numbered(seq, first, &payload, len);
    }
}

/// A relay partner that never reads: the sender is paused once the partner's
/// queue is over `outbound_budget` (it never holds more than the budget plus
/// one read's worth); when the partner reads, every message arrives, in order,
/// byte for byte, and the sender is read from again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_partner_that_never_reads_is_held_to_its_budget() {
    const BUDGET: usize = 256 << 10;
    const LEN: usize = 16 << 10;
    const COUNT: u32 = 4096; // 64 MiB: far more than budget and socket buffers
    let mut config = one_worker();
    for route in &mut config.routes {
        route.limits.outbound_budget = BUDGET;
    }
    let gw = Gateway::start(config);
    let a = Raw::connect(gw.addr, "/relay").await;
    let mut b = Raw::connect(gw.addr, "/relay").await;
    let (progress, writer) = spawn_writer(&a, COUNT, LEN);

    let stalled_at = await_stall(&progress, COUNT).await;
    // The budget is checked before each read, and one read (one receive
    // buffer) is forwarded whole: the queue can pass it by that much.
    let queued = metric(gw.addr, "weir_outbound_queued_bytes_max").await;
    assert!(
        queued <= BUDGET as u64 + SMALL_BUF,
        "{queued} bytes queued for a partner with a {BUDGET}-byte budget"
    );
    let held = metric(gw.addr, "weir_receive_buffer_bytes_held").await;
    assert!(
        held <= 2 * SMALL_BUF,
        "{held} bytes of receive buffers held"
    );
    assert!(stalled_at > 0);

    read_numbered(&mut b, COUNT, LEN).await;
    writer.abort();
    gw.stop();
}

/// An echo client that never reads its replies is no longer read from; the
/// gateway holds at most one receive buffer for it and queues nothing. When
/// it reads, every reply arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_echo_client_that_never_reads_holds_one_buffer() {
    const LEN: usize = 16 << 10;
    const COUNT: u32 = 4096;
    let gw = Gateway::start(one_worker());
    let mut c = Raw::connect(gw.addr, "/echo").await;
    let (progress, writer) = spawn_writer(&c, COUNT, LEN);
    await_stall(&progress, COUNT).await;
    assert_eq!(metric(gw.addr, "weir_outbound_queued_bytes").await, 0);
    let held = metric(gw.addr, "weir_receive_buffer_bytes_held").await;
    assert!(held <= SMALL_BUF, "{held} bytes of receive buffers held");

    read_numbered(&mut c, COUNT, LEN).await;
    writer.abort();
    gw.stop();
}

/// A flood of tiny frames and pings, sent as fast as the socket takes them
/// while a slower reader drains the replies: every message is echoed and
/// every ping answered, in order, and the receive buffers held stay within
/// one per connection throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn floods_of_tiny_frames_and_pings_are_served_in_bounded_memory() {
    const ROUNDS: u32 = 50_000;
    let gw = Gateway::start(one_worker());
    let mut c = Raw::connect(gw.addr, "/echo").await;
    let mut wr = second_handle(&c.stream);
    let writer = tokio::spawn(async move {
        // Each round: a 1-byte text frame and a ping carrying the round number.
        let mut batch = Vec::new();
        for round in 0..ROUNDS {
            batch.extend(frame(0x81, b"x"));
            batch.extend(frame(0x89, &round.to_be_bytes()));
            if batch.len() > 16 << 10 {
                wr.write_all(&batch).await.expect("write");
                batch.clear();
            }
        }
        wr.write_all(&batch).await.expect("write");
        wr
    });
    let addr = gw.addr;
    let watcher = tokio::spawn(async move {
        let mut peak = 0;
        for _ in 0..20 {
            peak = peak.max(metric(addr, "weir_receive_buffer_bytes_held").await);
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        peak
    });
    for round in 0..ROUNDS {
        let (first, payload) = c.next_frame().await.expect("echo");
        assert_eq!(
            (first, payload.as_slice()),
            (0x81, &b"x"[..]),
            "round {round}"
        );
        let (first, payload) = c.next_frame().await.expect("pong");
        assert_eq!(first, 0x8A, "round {round}: a pong");
        assert_eq!(payload, round.to_be_bytes(), "pong for the wrong ping");
        if round % 1000 == 0 {
            // A slow reader: the flood backs up into the kernel buffers.
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    let _wr = writer.await.unwrap();
    let peak = watcher.await.unwrap();
    assert!(peak <= SMALL_BUF, "{peak} bytes of receive buffers held");
    assert_eq!(metric(gw.addr, "weir_outbound_queued_bytes").await, 0);
    gw.stop();
}

/// A message declared larger than `max_message` gets 1009 before any of its
/// payload is sent (so none was buffered); so does a fragment whose length
/// would take the message past the limit, and a fragmented message that
/// never ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_and_endless_messages_get_1009_before_buffering() {
    const MAX: usize = 64 << 10;
    let mut config = one_worker();
    for route in &mut config.routes {
        route.limits.max_message = MAX;
    }
    let gw = Gateway::start(config);

    // A header declaring 1 GiB, and no payload at all.
    let mut c = Raw::connect(gw.addr, "/echo").await;
    let mut header = vec![0x82, 0x80 | 127];
    header.extend((1u64 << 30).to_be_bytes());
    header.extend(KEY);
    c.send(&header).await;
    assert_eq!(c.close_code().await, Some(1009));

    // 60 KiB in a first fragment, then a continuation header for 8 KiB more.
    let mut c = Raw::connect(gw.addr, "/echo").await;
    c.send(&frame(0x02, &vec![1; 60 << 10])).await;
    let mut header = vec![0x80, 0x80 | 126];
    header.extend((8u16 << 10).to_be_bytes());
    header.extend(KEY);
    c.send(&header).await;
    assert_eq!(c.close_code().await, Some(1009));

    // Fragments that never end: the close comes once they pass MAX, while
    // the writer is still sending (it would go on for 1 GiB).
    let mut c = Raw::connect(gw.addr, "/echo").await;
    let mut wr = second_handle(&c.stream);
    let writer = tokio::spawn(async move {
        let _ = wr.write_all(&frame(0x01, b"start")).await;
        let piece = frame(0x00, &[b'a'; 1024]);
        for _ in 0..(1 << 20) {
            if wr.write_all(&piece).await.is_err() {
                return;
            }
        }
        panic!("1 GiB of fragments were accepted");
    });
    assert_eq!(c.close_code().await, Some(1009));
    drop(c);
    timeout(STEP, writer).await.unwrap().unwrap();
    await_metric(gw.addr, "weir_websocket_connections", 0).await;
    assert_eq!(metric(gw.addr, "weir_receive_buffer_bytes_held").await, 0);
    gw.stop();
}

/// A client that leaves the gateway's writes blocked (it never reads) is
/// dropped once a write has waited `idle_timeout`, so it cannot hold a
/// connection and its buffer forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_is_dropped_after_the_idle_timeout() {
    let mut config = one_worker();
    for route in &mut config.routes {
        route.limits.idle_timeout = Duration::from_millis(500);
    }
    let gw = Gateway::start(config);
    let c = Raw::connect(gw.addr, "/echo").await;
    let (progress, writer) = spawn_writer(&c, 1 << 16, 16 << 10);
    await_stall(&progress, 1 << 16).await;
    // Stalled: the connection goes away without the client reading a byte.
    await_metric(gw.addr, "weir_websocket_connections", 0).await;
    await_metric(gw.addr, "weir_receive_buffer_bytes_held", 0).await;
    writer.abort();
    drop(c);
    gw.stop();
}

/// Past `max_connections_per_ip`, one address gets 503 with Retry-After
/// while another address is still served (127.0.0.2 is loopback too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_ip_connection_limit_answers_503_to_that_address_only() {
    let mut config = one_worker();
    config.server.max_connections_per_ip = 2;
    let gw = Gateway::start(config);
    let _a = Raw::connect(gw.addr, "/echo").await;
    let _b = Raw::connect(gw.addr, "/echo").await;
    let mut refused = TcpStream::connect(gw.addr).await.unwrap();
    refused.write_all(UPGRADE.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    timeout(STEP, refused.read_to_end(&mut answer))
        .await
        .unwrap()
        .unwrap();
    let answer = String::from_utf8_lossy(&answer).to_ascii_lowercase();
    assert!(answer.starts_with("http/1.1 503"), "{answer}");
    assert!(answer.contains("\r\nretry-after: "), "{answer}");
    // From another address: served.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    let mut other = socket.connect(gw.addr).await.unwrap();
    other.write_all(UPGRADE.as_bytes()).await.unwrap();
    let mut head = [0u8; 12];
    timeout(STEP, other.read_exact(&mut head))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&head, b"HTTP/1.1 101");
    assert_eq!(metric(gw.addr, "weir_refused_over_limit_total").await, 1);
    gw.stop();
}

/// Relay partners write straight into each other's sockets; when a socket
/// fills mid-frame the rest is queued, and the receiver's own pongs must
/// still land between frames, never inside one. Several pairs on two
/// workers, large frames (so writes are cut short), pings all the while,
/// and a slow reader: every frame arrives whole, in order, and every ping
/// gets its pong.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_frames_stay_whole_around_pongs_when_writes_are_cut_short() {
    const LEN: usize = 60 << 10;
    const COUNT: u32 = 150; // ~9 MiB per pair: past the socket buffers
    let mut config = Config::builtin_default();
    config.server.workers = 2;
    let gw = Gateway::start(config);
    let mut pairs = Vec::new();
    for _ in 0..4 {
        let a = Raw::connect(gw.addr, "/relay").await;
        let b = Raw::connect(gw.addr, "/relay").await;
        pairs.push((a, b));
    }
    let mut tasks = Vec::new();
    for (a, mut b) in pairs {
        let (_progress, writer) = spawn_writer(&a, COUNT, LEN);
        let mut pinger = second_handle(&b.stream);
        tasks.push(tokio::spawn(async move {
            let mut pings_sent = 0u32;
            let mut pongs = 0u32;
            let mut seq = 0u32;
            while seq < COUNT {
                if pings_sent < 200 {
                    pinger
                        .write_all(&frame(0x89, &pings_sent.to_be_bytes()))
                        .await
                        .unwrap();
                    pings_sent += 1;
                }
                let (first, payload) = b.next_frame().await.expect("a frame");
                if first == 0x8A {
                    assert_eq!(payload, pongs.to_be_bytes(), "pong out of order");
                    pongs += 1;
                    continue;
                }
                check_numbered(seq, first, &payload, LEN);
                seq += 1;
                if seq.is_multiple_of(4) {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
            while pongs < pings_sent {
                let (first, payload) = b.next_frame().await.expect("a pong");
                assert_eq!(first, 0x8A);
                assert_eq!(payload, pongs.to_be_bytes());
                pongs += 1;
            }
            writer.abort();
            drop(a);
        }));
    }
    for t in tasks {
        timeout(STEP * 2, t).await.expect("pair timed out").unwrap();
    }
    gw.stop();
}

/// A relay client that sent data while waiting for a partner, then hung up,
/// is not paired with the next client: the next two pair with each other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_client_gone_while_unpaired_is_not_anyones_partner() {
    let gw = Gateway::start(one_worker());
    let mut gone = Raw::connect(gw.addr, "/relay").await;
    gone.send(&frame(0x81, b"anyone there?")).await;
    drop(gone);
    await_metric(gw.addr, "weir_websocket_connections", 0).await;
    let mut a = Raw::connect(gw.addr, "/relay").await;
    let mut b = Raw::connect(gw.addr, "/relay").await;
    a.send(&frame(0x81, b"hi b")).await;
    assert_eq!(b.next_frame().await, Some((0x81, b"hi b".to_vec())));
    gw.stop();
}

/// Clients the gateway closed (a protocol error) that neither answer the
/// close nor leave linger for up to `CLOSE_LINGER` each; while they are
/// quiet they hold no receive buffer, so a mass close of slow clients
/// (a drain, a shutdown) does not hold one per connection for the linger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lingering_quiet_clients_hold_no_receive_buffer() {
    const N: u64 = 20;
    let gw = Gateway::start(one_worker());
    let mut clients = Vec::new();
    for _ in 0..N {
        let mut c = Raw::connect(gw.addr, "/echo").await;
        // A reserved opcode with a payload: 1002.
        c.send(&frame(0x83, b"reserved")).await;
        assert_eq!(c.close_code().await, Some(1002));
        clients.push(c);
    }
    // At least the last ones still linger (their 2 s are not over)...
    let open = metric(gw.addr, "weir_websocket_connections").await;
    assert!(open >= 1, "the closed clients linger");
    // ...and none of them holds a receive buffer.
    let held = metric(gw.addr, "weir_receive_buffer_bytes_held").await;
    assert_eq!(
        held, 0,
        "{held} bytes of receive buffers held by {open} lingering connections"
    );
    drop(clients);
    await_metric(gw.addr, "weir_websocket_connections", 0).await;
    gw.stop();
}
