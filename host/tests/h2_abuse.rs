//! Issue 35, item 3: connections that never carry a WebSocket, and caps
//! that counted TCP connections. Attacker-style over loopback against an
//! in-process gateway: raw sockets that send only the HTTP/2 preface and
//! SETTINGS, an HTTP/2 connection left without streams, and one HTTP/2
//! connection opening WebSockets past `max_connections`,
//! `max_connections_per_ip` and `h2_max_streams` (the `h2` crate).

mod common;

use bytes::Bytes;
use common::{Gateway, Raw, STEP};
use h2::client::SendRequest;
use http::Request;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio::time::{timeout, Instant};
use weir_config::Config;

/// The HTTP/2 client preface and an empty SETTINGS frame: all an idle
/// attacker sends.
const PREFACE_AND_SETTINGS: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0";

fn gateway(edit: impl FnOnce(&mut Config)) -> Gateway {
    let mut config = Config::builtin_default();
    config.server.workers = 2;
    edit(&mut config);
    Gateway::start(config)
}

/// Reads until the server closes the connection; how long that took.
async fn closed_after(stream: &mut TcpStream, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        match timeout(limit.saturating_sub(start.elapsed()), stream.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(start.elapsed()),
            Ok(Ok(_)) => {}
        }
    }
}

/// An upgrade's status on a fresh connection.
async fn upgrade_status(gw: &Gateway) -> u16 {
    let head =
        "GET /echo HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";
    Raw::request(gw.addr, head).await.1
}

/// An h2c client whose connection task's end can be awaited.
async fn h2c(gw: &Gateway) -> (SendRequest<Bytes>, JoinHandle<()>) {
    let tcp = TcpStream::connect(gw.addr).await.unwrap();
    let (send, conn) = h2::client::handshake(tcp).await.expect("HTTP/2 handshake");
    let task = tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut send = timeout(STEP, send.ready()).await.unwrap().unwrap();
    let deadline = Instant::now() + STEP;
    while !send.is_extended_connect_protocol_enabled() {
        assert!(Instant::now() < deadline, "extended CONNECT never enabled");
        tokio::time::sleep(Duration::from_millis(5)).await;
        send = send.ready().await.unwrap();
    }
    (send, task)
}

/// A WebSocket stream as the client holds it.
struct Stream {
    send: h2::SendStream<Bytes>,
    _recv: h2::RecvStream,
}

/// Sends an extended CONNECT to /echo; its response, or None while the
/// stream waits for a free slot after `wait`.
async fn open(client: &SendRequest<Bytes>, wait: Duration) -> Option<(u16, Option<Stream>)> {
    let request = Request::builder()
        .method(http::Method::CONNECT)
        .uri("http://localhost/echo")
        .header("sec-websocket-version", "13")
        .extension(h2::ext::Protocol::from_static("websocket"))
        .body(())
        .unwrap();
    let mut client = client.clone().ready().await.unwrap();
    let (response, send) = client.send_request(request, false).unwrap();
    let response = timeout(wait, response).await.ok()?.expect("response");
    let status = response.status().as_u16();
    if status == 503 {
        assert!(
            response.headers().contains_key("retry-after"),
            "503 without Retry-After"
        );
    }
    let stream = (status == 200).then(|| Stream {
        send,
        _recv: response.into_body(),
    });
    Some((status, stream))
}

/// Regression (issue 35): sockets that sent only the h2c preface and an
/// empty SETTINGS frame held every `max_connections` slot for ever (150 s
/// seen on defaults). They are closed at `handshake_timeout`, and a normal
/// client then gets its 101.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_prefaces_without_streams_are_closed_at_the_handshake_timeout() {
    const SLOTS: usize = 20;
    let handshake = Duration::from_millis(1500);
    let gw = gateway(|c| {
        c.server.max_connections = SLOTS;
        c.server.handshake_timeout = handshake;
    });
    let mut idle = Vec::new();
    for _ in 0..SLOTS {
        let mut s = TcpStream::connect(gw.addr).await.unwrap();
        s.write_all(PREFACE_AND_SETTINGS).await.unwrap();
        idle.push(s);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(upgrade_status(&gw).await, 503, "the slots are held");
    let started = Instant::now();
    for s in &mut idle {
        let took = closed_after(s, handshake + Duration::from_secs(3)).await;
        assert!(
            took.is_some(),
            "a preface-only socket still open {:?} after the handshake timeout",
            started.elapsed()
        );
    }
    assert!(
        started.elapsed() < handshake + Duration::from_secs(2),
        "closed late: {:?}",
        started.elapsed()
    );
    assert_eq!(upgrade_status(&gw).await, 101, "the slots are free again");
}

/// An HTTP/2 connection whose only WebSocket ended is closed after the idle
/// deadline (`idle_timeout`), not kept for ever; while the stream is open,
/// the handshake deadline does not apply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h2_connection_left_without_streams_is_closed_after_the_idle_deadline() {
    let gw = gateway(|c| {
        c.server.handshake_timeout = Duration::from_millis(500);
        c.server.limits.idle_timeout = Duration::from_millis(1500);
    });
    let (client, conn) = h2c(&gw).await;
    let (status, stream) = open(&client, STEP).await.unwrap();
    assert_eq!(status, 200);
    let mut stream = stream.unwrap();
    // Past the handshake deadline with a stream open: still served.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(!conn.is_finished(), "closed with a WebSocket open");
    stream.send.send_reset(h2::Reason::CANCEL);
    let ended = Instant::now();
    timeout(Duration::from_secs(6), conn)
        .await
        .expect("an h2 connection without streams stayed open")
        .unwrap();
    let took = ended.elapsed();
    assert!(
        took >= Duration::from_millis(1000),
        "closed after {took:?}: before the idle deadline"
    );
    drop(client);
}

/// Regression (issue 35): one h2c connection opened 200 WebSockets under
/// `max_connections = 3`. Each WebSocket stream counts: the one over a cap
/// gets 503 with Retry-After on its stream, and a freed place serves the
/// next one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_h2_connection_is_held_to_the_connection_caps() {
    // The global cap.
    let gw = gateway(|c| c.server.max_connections = 3);
    let (client, _conn) = h2c(&gw).await;
    let mut open_streams = Vec::new();
    for i in 0..3 {
        let (status, stream) = open(&client, STEP).await.unwrap();
        assert_eq!(status, 200, "WebSocket {i}");
        open_streams.push(stream.unwrap());
    }
    assert_eq!(
        open(&client, STEP).await.unwrap().0,
        503,
        "a fourth WebSocket"
    );
    assert_eq!(upgrade_status(&gw).await, 503, "another connection");
    open_streams
        .pop()
        .unwrap()
        .send
        .send_reset(h2::Reason::CANCEL);
    let deadline = Instant::now() + STEP;
    loop {
        let (status, stream) = open(&client, STEP).await.unwrap();
        if status == 200 {
            open_streams.push(stream.unwrap());
            break;
        }
        assert!(Instant::now() < deadline, "the freed place never came back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(gw);

    // The per-IP cap.
    let gw = gateway(|c| {
        c.server.max_connections = 3;
        c.server.max_connections_per_ip = 2;
    });
    let (client, _conn) = h2c(&gw).await;
    let mut streams = Vec::new();
    for i in 0..2 {
        let (status, stream) = open(&client, STEP).await.unwrap();
        assert_eq!(status, 200, "WebSocket {i}");
        streams.push(stream.unwrap());
    }
    assert_eq!(
        open(&client, STEP).await.unwrap().0,
        503,
        "a third from one IP"
    );
}

/// `h2_max_streams` is what the server announces (SETTINGS_MAX_CONCURRENT_
/// STREAMS, read off the wire) and what it holds a client to: a stream
/// past it waits until one ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_h2_connection_is_held_to_h2_max_streams() {
    let gw = gateway(|c| c.server.h2_max_streams = 4);
    // The server's first frame is its SETTINGS.
    let mut raw = TcpStream::connect(gw.addr).await.unwrap();
    raw.write_all(PREFACE_AND_SETTINGS).await.unwrap();
    let mut head = [0u8; 9];
    timeout(STEP, raw.read_exact(&mut head))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(head[3], 0x4, "SETTINGS first");
    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let mut payload = vec![0u8; len];
    timeout(STEP, raw.read_exact(&mut payload))
        .await
        .unwrap()
        .unwrap();
    let max_streams = payload
        .chunks(6)
        .find(|s| u16::from_be_bytes([s[0], s[1]]) == 0x3)
        .map(|s| u32::from_be_bytes([s[2], s[3], s[4], s[5]]));
    assert_eq!(max_streams, Some(4));

    let (client, _conn) = h2c(&gw).await;
    let mut streams = Vec::new();
    for _ in 0..4 {
        let (status, stream) = open(&client, STEP).await.unwrap();
        assert_eq!(status, 200);
        streams.push(stream.unwrap());
    }
    let fifth = {
        let client = client.clone();
        tokio::spawn(async move { open(&client, STEP).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!fifth.is_finished(), "a fifth stream was opened");
    streams.pop().unwrap().send.send_reset(h2::Reason::CANCEL);
    let (status, _) = timeout(STEP, fifth).await.unwrap().unwrap().unwrap();
    assert_eq!(status, 200, "the fifth, once a stream ended");
}
