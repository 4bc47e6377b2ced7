//! Native routes over real loopback sockets: echo and relay with
//! tokio-tungstenite as the independent client, and the raw byte-level cases.

mod common;

use common::{client, frame, next, Gateway, Raw, STEP};
use futures_util::{SinkExt, StreamExt};
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::Message;
use weir_config::Config;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Echo is byte-exact across every header length class and buffer boundary
/// (65550 is the "64 KiB + header" trap), up to 16 MiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_every_size_text_and_binary() {
    let gw = Gateway::default_routes();
    let ws = client(&gw.url("/echo")).await;
    let (mut tx, mut rx) = ws.split();
    // Send and receive at once: the gateway stops reading from a client that
    // does not read its replies, and a 16 MiB echo outgrows socket buffers.
    for size in [0, 1, 125, 126, 127, 65535, 65536, 65550, 1 << 20, 16 << 20] {
        let bin = pattern(size, size as u8);
        let text: String = (0..size)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let send = async {
            tx.send(Message::binary(bin.clone())).await.unwrap();
            tx.send(Message::text(text.clone())).await.unwrap();
        };
        let receive = async {
            let first = timeout(STEP, rx.next()).await.expect("reply timed out");
            let second = timeout(STEP, rx.next()).await.expect("reply timed out");
            (first.unwrap().unwrap(), second.unwrap().unwrap())
        };
        let ((), (first, second)) = tokio::join!(send, receive);
        match first {
            Message::Binary(got) => assert!(got[..] == bin[..], "binary {size} differs"),
            other => panic!("binary {size}: got {other:?}"),
        }
        match second {
            Message::Text(got) => assert!(got.as_str() == text, "text {size} differs"),
            other => panic!("text {size}: got {other:?}"),
        }
    }
    let mut ws = tx.reunite(rx).unwrap();
    ws.close(None).await.unwrap();
    gw.stop();
}

/// Large and small messages mixed on one connection, sent back to back so
/// a read often holds the end of one and the start of the next: a
/// connection switches between its small and large receive buffers with
/// every change of size, and every reply stays byte-exact and in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_alternating_large_and_small_messages() {
    let gw = Gateway::default_routes();
    let ws = client(&gw.url("/echo")).await;
    let (mut tx, mut rx) = ws.split();
    let sizes = [
        130_000,
        10,
        70_000,
        0,
        300_000,
        125,
        65_550,
        3,
        1 << 20,
        64,
        131_072,
        131_072,
        1,
        200_000,
        262_144,
        262_144,
        262_200,
        5,
    ];
    let messages: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| pattern(n, i as u8))
        .collect();
    let send = async {
        for m in &messages {
            tx.send(Message::binary(m.clone())).await.unwrap();
        }
    };
    let receive = async {
        for (i, m) in messages.iter().enumerate() {
            let got = timeout(STEP, rx.next()).await.expect("reply timed out");
            match got.unwrap().unwrap() {
                Message::Binary(got) => {
                    assert!(got[..] == m[..], "message {i} ({} bytes) differs", m.len())
                }
                other => panic!("message {i}: got {other:?}"),
            }
        }
    };
    tokio::join!(send, receive);
    let mut ws = tx.reunite(rx).unwrap();
    ws.close(None).await.unwrap();
    gw.stop();
}

/// Many messages in one write come back complete and in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_messages_in_one_write() {
    let gw = Gateway::default_routes();
    let mut raw = Raw::connect(gw.addr, "/echo").await;
    let mut wire = Vec::new();
    for i in 0..1000u32 {
        wire.extend(frame(0x82, &i.to_le_bytes().repeat(1 + (i as usize % 40))));
    }
    raw.send(&wire).await;
    for i in 0..1000u32 {
        let (first, payload) = raw.next_frame().await.expect("reply");
        assert_eq!(first, 0x82);
        assert_eq!(
            payload,
            i.to_le_bytes().repeat(1 + (i as usize % 40)),
            "message {i}"
        );
    }
    gw.stop();
}

/// RFC 6455 §5.4: a fragmented message with a ping inside is echoed in
/// order, and the ping answered with a pong carrying its payload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fragmented_input_with_interleaved_ping() {
    let gw = Gateway::default_routes();
    let mut raw = Raw::connect(gw.addr, "/echo").await;
    raw.send(&frame(0x01, b"Hello, ")).await;
    raw.send(&frame(0x89, b"ping!")).await;
    raw.send(&frame(0x00, "wörld".as_bytes())).await;
    raw.send(&frame(0x80, b"!")).await;
    let mut text = Vec::new();
    let mut pong = None;
    while text.len() < "Hello, wörld!".len() {
        let (first, payload) = raw.next_frame().await.expect("reply");
        match first & 0x0F {
            0xA => pong = Some(payload),
            0x0 | 0x1 => text.extend(payload),
            op => panic!("unexpected opcode {op}"),
        }
    }
    assert_eq!(String::from_utf8(text).unwrap(), "Hello, wörld!");
    assert_eq!(pong.as_deref(), Some(&b"ping!"[..]));
    raw.send(&frame(0x88, &1000u16.to_be_bytes())).await;
    assert_eq!(raw.close_code().await, Some(1000));
    gw.stop();
}

/// Relay pairs connections in arrival order and never echoes; when one side
/// leaves, the other gets 1001.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_pairs_and_closes_partner() {
    let gw = Gateway::default_routes();
    let mut a = client(&gw.url("/relay")).await;
    let mut b = client(&gw.url("/relay")).await;
    a.send(Message::text("from a")).await.unwrap();
    assert_eq!(next(&mut b).await, Message::text("from a"));
    b.send(Message::binary(vec![1, 2, 3])).await.unwrap();
    assert_eq!(next(&mut a).await, Message::binary(vec![1, 2, 3]));
    // A third connection waits, then pairs with a fourth.
    let mut c = client(&gw.url("/relay")).await;
    c.send(Message::text("early")).await.unwrap();
    let mut d = client(&gw.url("/relay")).await;
    assert_eq!(next(&mut d).await, Message::text("early"));
    // Nothing came back to the sender.
    assert!(timeout(std::time::Duration::from_millis(300), a.next())
        .await
        .is_err());
    a.close(None).await.unwrap();
    match next(&mut b).await {
        Message::Close(Some(f)) => assert_eq!(u16::from(f.code), 1001),
        other => panic!("expected close 1001, got {other:?}"),
    }
    drop(c);
    gw.stop();
}

async fn expect_close(path: &str, gw: &Gateway, wire: &[u8], code: u16) {
    let mut raw = Raw::connect(gw.addr, path).await;
    raw.send(wire).await;
    assert_eq!(
        raw.close_code().await,
        Some(code),
        "wire {:02x?}",
        &wire[..wire.len().min(8)]
    );
}

/// The README's table of bad input ("What bad input gets"), frame side.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_frames_get_their_close_codes() {
    let mut config = Config::builtin_default();
    config.server.workers = 1;
    config.routes[0].limits.max_message = 1000;
    let gw = Gateway::start(config);
    // Unmasked client frame (RFC 6455 §5.1).
    expect_close("/echo", &gw, &[0x81, 0x02, b'h', b'i'], 1002).await;
    // Reserved bit without an extension.
    expect_close("/echo", &gw, &frame(0xC1, b"hi"), 1002).await;
    // Reserved opcode.
    expect_close("/echo", &gw, &frame(0x83, b"hi"), 1002).await;
    // Ping over 125 bytes.
    expect_close("/echo", &gw, &frame(0x89, &[0; 126]), 1002).await;
    // Continuation with nothing to continue.
    expect_close("/echo", &gw, &frame(0x80, b"x"), 1002).await;
    // Invalid close code.
    expect_close("/echo", &gw, &frame(0x88, &1005u16.to_be_bytes()), 1002).await;
    // Invalid UTF-8 in a text message and in a close reason.
    expect_close("/echo", &gw, &frame(0x81, &[0xCE, 0xBA, 0xFF]), 1007).await;
    expect_close("/echo", &gw, &frame(0x88, &[0x03, 0xE8, 0xFF]), 1007).await;
    // Over max_message, also when split into fragments.
    expect_close("/echo", &gw, &frame(0x82, &[0; 1001]), 1009).await;
    let mut frags = frame(0x02, &[0; 600]);
    frags.extend(frame(0x80, &[0; 600]));
    expect_close("/echo", &gw, &frags, 1009).await;
    gw.stop();
}

/// The README's table of bad input ("What bad input gets"), HTTP side.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_upgrades_get_their_status() {
    let gw = Gateway::default_routes();
    let ok = "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n";
    let cases = [
        (format!("GET /nowhere HTTP/1.1\r\nHost: localhost\r\n{ok}Sec-WebSocket-Version: 13\r\n\r\n"), 404),
        ("GET /echo HTTP/1.1\r\nHost: localhost\r\n\r\n".to_string(), 426),
        (format!("GET /echo HTTP/1.1\r\nHost: localhost\r\n{ok}Sec-WebSocket-Version: 8\r\n\r\n"), 426),
        (
            "GET /echo HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: c2hvcnQ=\r\nSec-WebSocket-Version: 13\r\n\r\n"
                .to_string(),
            400,
        ),
        (format!("POST /echo HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n{ok}Sec-WebSocket-Version: 13\r\n\r\n"), 400),
        ("GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n".to_string(), 200),
    ];
    for (head, status) in cases {
        let (_raw, got) = Raw::request(gw.addr, &head).await;
        assert_eq!(got, status, "request:\n{head}");
    }
    let huge = format!(
        "GET /echo HTTP/1.1\r\nHost: localhost\r\nX-Big: {}\r\n\r\n",
        "a".repeat(40_000)
    );
    let (_raw, got) = Raw::request(gw.addr, &huge).await;
    assert_eq!(got, 431);
    gw.stop();
}

/// Sends from `raw` without ever reading replies; returns how many bytes the
/// gateway accepted before it stopped reading (the write stalls).
async fn bytes_accepted_before_stall(raw: &mut Raw, frame_bytes: &[u8]) -> usize {
    use tokio::io::AsyncWriteExt;
    let mut sent = 0;
    loop {
        match timeout(
            std::time::Duration::from_millis(500),
            raw.stream.write_all(frame_bytes),
        )
        .await
        {
            Ok(Ok(())) => sent += frame_bytes.len(),
            Ok(Err(e)) => panic!("write failed: {e}"),
            Err(_) => return sent,
        }
        assert!(
            sent < 512 << 20,
            "gateway kept reading 512 MiB from a client that never reads"
        );
    }
}

/// Backpressure: a client that does not read its echo replies is no longer
/// read from, so the gateway holds a bounded amount for it; the same for a
/// relay sender whose partner does not read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_stop_reading_are_not_read_from() {
    let gw = Gateway::default_routes();
    let msg = frame(0x82, &vec![7u8; 64 * 1024]);
    let mut echo = Raw::connect(gw.addr, "/echo").await;
    let accepted = bytes_accepted_before_stall(&mut echo, &msg).await;
    // Kernel socket buffers on loopback in both directions plus one receive
    // buffer: tens of MiB at most, not the hundreds a reader-less gateway would take.
    assert!(accepted < 64 << 20, "echo accepted {accepted} bytes");

    let mut a = Raw::connect(gw.addr, "/relay").await;
    let _b = Raw::connect(gw.addr, "/relay").await;
    let accepted = bytes_accepted_before_stall(&mut a, &msg).await;
    assert!(accepted < 64 << 20, "relay accepted {accepted} bytes");
    gw.stop();
}

/// Shutdown closes open connections with 1012 (service restart).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_with_service_restart() {
    let gw = Gateway::default_routes();
    let mut raw = Raw::connect(gw.addr, "/echo").await;
    raw.send(&frame(0x81, b"before")).await;
    assert_eq!(raw.next_frame().await.unwrap().1, b"before");
    let stopper = std::thread::spawn(move || gw.stop());
    assert_eq!(raw.close_code().await, Some(1012));
    raw.send(&frame(0x88, &1000u16.to_be_bytes())).await;
    stopper.join().unwrap();
}

/// A silent connection gets a ping after `idle_timeout`, and a 1001 close
/// after another silent period; one that answers stays open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_pinged_then_closed() {
    let mut config = Config::builtin_default();
    config.server.workers = 1;
    config.routes[0].limits.idle_timeout = std::time::Duration::from_millis(300);
    let gw = Gateway::start(config);
    let mut lively = Raw::connect(gw.addr, "/echo").await;
    let mut silent = Raw::connect(gw.addr, "/echo").await;
    let (first, _) = lively.next_frame().await.expect("a ping");
    assert_eq!(first, 0x89, "server ping");
    lively.send(&frame(0x8A, b"")).await;
    let (first, _) = silent.next_frame().await.expect("a ping");
    assert_eq!(first, 0x89);
    assert_eq!(silent.close_code().await, Some(1001));
    // The one that answered is still served.
    lively.send(&frame(0x81, b"still here")).await;
    loop {
        let (first, payload) = lively.next_frame().await.expect("reply");
        if first == 0x81 {
            assert_eq!(payload, b"still here");
            break;
        }
        assert_eq!(first, 0x89, "only pings may come before the echo");
    }
    gw.stop();
}

/// Past `max_connections`, requests get 503 with Retry-After.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_limit_answers_503() {
    let mut config = Config::builtin_default();
    config.server.workers = 1;
    config.server.max_connections = 2;
    let gw = Gateway::start(config);
    let _a = Raw::connect(gw.addr, "/echo").await;
    let _b = Raw::connect(gw.addr, "/echo").await;
    let head =
        "GET /echo HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";
    let (_c, status) = Raw::request(gw.addr, head).await;
    assert_eq!(status, 503);
    drop(_a);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let _d = Raw::connect(gw.addr, "/echo").await;
    gw.stop();
}
