//! permessage-deflate (RFC 7692) against a real `weir serve`: what the 101
//! answers to offers, compressed echo byte for byte from a raw client
//! (fragmented, interleaved with a ping, below `compression_min`), the
//! decompression bomb closed 1009 without inflating past `max_message`,
//! bad compressed input closed with the right code, relay, pubsub and a
//! guest route with compression, and the Node `ws` and Python
//! `websockets` clients in both context modes (installed by
//! scripts/test.sh into host/tests/clients).

mod common;

use common::{frame, Raw, WeirProcess, STEP};
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

const ROUTES: &str = r#"
[[route]]
path = "/echo"
native = "echo"
compression = "on"
compression_min = "64B"
max_message = "1MiB"

[[route]]
path = "/echo-none"
native = "echo"
compression = "on"
compression_min = "0B"
compression_context = "none"

[[route]]
path = "/plain"
native = "echo"

[[route]]
path = "/relay"
native = "relay"
compression = "on"

[[route]]
path = "/topic/{name}"
native = "pubsub"
compression = "on"

[[route]]
path = "/guest"
guest = "GUEST"
compression = "on"
"#;

async fn weir() -> WeirProcess {
    let guest = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/wasm/echo.wasm");
    assert!(
        guest.exists(),
        "{} missing: run scripts/build-guests.sh",
        guest.display()
    );
    let routes = ROUTES.replace("GUEST", &guest.display().to_string());
    WeirProcess::start("workers = 2", &routes, "warn", Stdio::null()).await
}

/// Sends an upgrade with `extensions` (None: no header); returns the raw
/// connection, the status and the response's Sec-WebSocket-Extensions.
async fn upgrade(
    addr: SocketAddr,
    path: &str,
    extensions: Option<&str>,
) -> (Raw, u16, Option<String>) {
    let mut stream = timeout(STEP, TcpStream::connect(addr))
        .await
        .unwrap()
        .unwrap();
    let ext = extensions
        .map(|e| format!("Sec-WebSocket-Extensions: {e}\r\n"))
        .unwrap_or_default();
    let head = format!(
        "GET {path} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{ext}\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    // Read the head byte by byte: what follows it belongs to Raw.
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        let n = timeout(STEP, stream.read(&mut b)).await.unwrap().unwrap();
        assert_eq!(n, 1, "closed during the response head");
        head.push(b[0]);
    }
    let head = String::from_utf8(head).unwrap();
    let status = head[9..12].parse().unwrap();
    let answered = head
        .lines()
        .find_map(|l| {
            l.strip_prefix("sec-websocket-extensions: ")
                .or_else(|| l.strip_prefix("Sec-WebSocket-Extensions: "))
        })
        .map(str::to_string);
    (Raw::from_stream(stream), status, answered)
}

/// A client's raw deflate stream (takeover kept across messages).
struct ClientDeflate {
    compress: Compress,
    decompress: Decompress,
}

impl ClientDeflate {
    fn new() -> ClientDeflate {
        ClientDeflate {
            compress: Compress::new_with_window_bits(Compression::fast(), false, 15),
            decompress: Decompress::new_with_window_bits(false, 15),
        }
    }

    /// Deflate bytes of one message without the sync tail (RFC 7692 §7.2.1).
    fn deflate(&mut self, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(payload.len() + 64);
        let mut input = payload;
        loop {
            let before = self.compress.total_in();
            self.compress
                .compress_vec(input, &mut out, FlushCompress::Sync)
                .unwrap();
            input = &input[(self.compress.total_in() - before) as usize..];
            if input.is_empty() && out.len() < out.capacity() {
                break;
            }
            out.reserve(out.capacity());
        }
        assert!(out.ends_with(&[0, 0, 0xFF, 0xFF]));
        out.truncate(out.len() - 4);
        out
    }

    fn inflate(&mut self, payload: &[u8]) -> Vec<u8> {
        let mut input = payload.to_vec();
        input.extend_from_slice(&[0, 0, 0xFF, 0xFF]);
        let mut out = Vec::with_capacity(1 << 20);
        self.decompress
            .decompress_vec(&input, &mut out, FlushDecompress::Sync)
            .unwrap();
        out
    }
}

fn json(n: usize, seed: usize) -> Vec<u8> {
    let mut s = String::new();
    let mut i = seed;
    while s.len() < n {
        s.push_str(&format!(
            "{{\"id\":{i},\"px\":{},\"side\":\"sell\"}}",
            i * 7919 % 1000
        ));
        i += 1;
    }
    s.truncate(n);
    s.into_bytes()
}

/// RFC 7692 §5, §7.1: what the 101 answers to offers, and that a route
/// with compression off, or an offer that must be declined, gets no
/// extension (the upgrade itself still succeeds).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negotiation_as_the_101_answers_it() {
    let weir = weir().await;
    let cases: &[(&str, Option<&str>, Option<&str>)] = &[
        ("/echo", Some("permessage-deflate"), Some("permessage-deflate")),
        (
            "/echo",
            Some("permessage-deflate; client_max_window_bits"),
            Some("permessage-deflate"),
        ),
        (
            "/echo",
            Some("permessage-deflate; server_no_context_takeover; server_max_window_bits=10"),
            Some("permessage-deflate; server_no_context_takeover; server_max_window_bits=10"),
        ),
        (
            "/echo-none",
            Some("permessage-deflate"),
            Some("permessage-deflate; server_no_context_takeover; client_no_context_takeover"),
        ),
        // Several offers: the first acceptable one wins.
        (
            "/echo",
            Some("permessage-deflate; server_max_window_bits=20, permessage-deflate; client_max_window_bits=9"),
            Some("permessage-deflate; client_max_window_bits=9"),
        ),
        // Declined: repeated, unknown, valueless window, bad value.
        ("/echo", Some("permessage-deflate; server_no_context_takeover; server_no_context_takeover"), None),
        ("/echo", Some("permessage-deflate; foo=1"), None),
        ("/echo", Some("permessage-deflate; server_max_window_bits"), None),
        ("/echo", Some("permessage-deflate; client_max_window_bits=7"), None),
        ("/echo", Some("x-webkit-deflate-frame"), None),
        ("/echo", None, None),
        ("/plain", Some("permessage-deflate"), None),
    ];
    for (path, offer, want) in cases {
        let (_raw, status, answered) = upgrade(weir.addr, path, *offer).await;
        assert_eq!(status, 101, "{path} {offer:?}");
        assert_eq!(answered.as_deref(), *want, "{path} {offer:?}");
    }
}

/// Compressed messages are inflated, echoed compressed (RSV1) from
/// `compression_min` on and plain below it; a fragmented compressed message
/// with a ping between its fragments; context takeover across messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_echo_from_a_raw_client() {
    let weir = weir().await;
    let (mut raw, _, answered) = upgrade(weir.addr, "/echo", Some("permessage-deflate")).await;
    assert_eq!(answered.as_deref(), Some("permessage-deflate"));
    let mut z = ClientDeflate::new();
    for (i, len) in [1000usize, 20, 5000, 70_000, 1000].into_iter().enumerate() {
        let msg = json(len, i);
        let wire = z.deflate(&msg);
        raw.send(&frame(0xC1, &wire)).await;
        let (first, payload) = raw.next_frame().await.unwrap();
        if len >= 64 {
            assert_eq!(first, 0xC1, "message {i} ({len} B) comes back compressed");
            assert!(payload.len() * 3 < len, "{} of {len} bytes", payload.len());
            assert_eq!(z.inflate(&payload), msg, "message {i}");
        } else {
            assert_eq!(first, 0x81, "below compression_min: plain");
            assert_eq!(payload, msg);
        }
    }
    // Fragmented: RSV1 on the first frame only, a ping in between.
    let msg = json(3000, 99);
    let wire = z.deflate(&msg);
    let (a, b) = wire.split_at(wire.len() / 2);
    raw.send(&frame(0x41, a)).await;
    raw.send(&frame(0x89, b"hi")).await;
    raw.send(&frame(0x80, b)).await;
    let (first, payload) = raw.next_frame().await.unwrap();
    assert_eq!(
        (first, payload.as_slice()),
        (0x8A, &b"hi"[..]),
        "pong, never compressed"
    );
    let (first, payload) = raw.next_frame().await.unwrap();
    assert_eq!(first, 0xC1);
    assert_eq!(z.inflate(&payload), msg);
    // A plain message on a compressing connection is fine too.
    let msg = json(500, 7);
    raw.send(&frame(0x81, &msg)).await;
    let (first, payload) = raw.next_frame().await.unwrap();
    assert_eq!(first, 0xC1);
    assert_eq!(z.inflate(&payload), msg);
    raw.send(&frame(0x88, &1000u16.to_be_bytes())).await;
    assert_eq!(raw.close_code().await, Some(1000));
}

/// The decompression bomb: a 1 MiB frame that inflates to 1 GiB, on a
/// route whose max_message is 1 MiB, is closed 1009, and the gateway's
/// peak RSS stays far below what inflating it would take.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decompression_bomb_closes_1009() {
    let weir = weir().await;
    let mut bomb = Compress::new_with_window_bits(Compression::best(), false, 15);
    let zeros = vec![0u8; 1 << 20];
    let mut wire = Vec::with_capacity(2 << 20);
    for _ in 0..1024 {
        bomb.compress_vec(&zeros, &mut wire, FlushCompress::None)
            .unwrap();
        wire.reserve(1 << 16);
    }
    bomb.compress_vec(&[], &mut wire, FlushCompress::Sync)
        .unwrap();
    wire.truncate(wire.len() - 4);
    assert!(wire.len() <= 1 << 20, "the bomb is {} bytes", wire.len());
    let (mut raw, _, answered) = upgrade(weir.addr, "/echo", Some("permessage-deflate")).await;
    assert!(answered.is_some());
    let started = std::time::Instant::now();
    raw.send(&frame(0xC2, &wire)).await;
    assert_eq!(raw.close_code().await, Some(1009));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    let status = std::fs::read_to_string(format!("/proc/{}/status", weir.child.id())).unwrap();
    let peak_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    assert!(peak_kib < 200 * 1024, "peak RSS {peak_kib} KiB");
    // The gateway goes on serving.
    let (mut raw, status, _) = upgrade(weir.addr, "/echo", Some("permessage-deflate")).await;
    assert_eq!(status, 101);
    raw.send(&frame(0x81, b"ok")).await;
    assert_eq!(raw.next_frame().await.unwrap(), (0x81, b"ok".to_vec()));
}

/// Bad compressed input gets the right close code: RSV1 where nothing was
/// negotiated (1002), RSV1 on a continuation or a control frame (1002),
/// invalid deflate data or invalid UTF-8 after inflating (1007).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_compressed_input_close_codes() {
    let weir = weir().await;
    let mut z = ClientDeflate::new();
    let hello = z.deflate(b"hello");
    let (mut raw, _, _) = upgrade(weir.addr, "/plain", Some("permessage-deflate")).await;
    raw.send(&frame(0xC1, &hello)).await;
    assert_eq!(raw.close_code().await, Some(1002), "RSV1 not negotiated");

    let (mut raw, _, _) = upgrade(weir.addr, "/echo", Some("permessage-deflate")).await;
    raw.send(&frame(0x01, b"a")).await;
    raw.send(&frame(0xC0, b"b")).await;
    assert_eq!(raw.close_code().await, Some(1002), "RSV1 on a continuation");

    let (mut raw, _, _) = upgrade(weir.addr, "/echo", Some("permessage-deflate")).await;
    raw.send(&frame(0xC9, b"")).await;
    assert_eq!(raw.close_code().await, Some(1002), "RSV1 on a ping");

    let (mut raw, _, _) = upgrade(weir.addr, "/echo", Some("permessage-deflate")).await;
    raw.send(&frame(0xC1, &[0xFF; 32])).await;
    assert_eq!(raw.close_code().await, Some(1007), "not deflate data");

    let (mut raw, _, _) = upgrade(weir.addr, "/echo", Some("permessage-deflate")).await;
    let mut z = ClientDeflate::new();
    raw.send(&frame(0xC1, &z.deflate(b"bad \xFF\xFE utf-8")))
        .await;
    assert_eq!(raw.close_code().await, Some(1007), "invalid UTF-8 inflated");
}

/// Relay, pubsub and a guest route inflate what their clients send; what
/// they deliver arrives whole and readable (plain frames: only echo
/// compresses its replies so far).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_pubsub_and_guest_inflate() {
    let weir = weir().await;
    let msg = json(2000, 3);

    let (mut a, _, ext) = upgrade(weir.addr, "/relay", Some("permessage-deflate")).await;
    assert!(ext.is_some());
    let (mut b, _, _) = upgrade(weir.addr, "/relay", None).await;
    let mut z = ClientDeflate::new();
    a.send(&frame(0xC1, &z.deflate(&msg))).await;
    assert_eq!(b.next_frame().await.unwrap(), (0x81, msg.clone()), "relay");

    let (mut sub, _, _) = upgrade(weir.addr, "/topic/t", None).await;
    let (mut publisher, _, ext) = upgrade(weir.addr, "/topic/t", Some("permessage-deflate")).await;
    assert!(ext.is_some());
    // The subscriber is in the topic once it answers a ping.
    sub.send(&frame(0x89, b"")).await;
    assert_eq!(sub.next_frame().await.unwrap().0, 0x8A);
    let mut z = ClientDeflate::new();
    publisher.send(&frame(0xC1, &z.deflate(&msg))).await;
    assert_eq!(
        sub.next_frame().await.unwrap(),
        (0x81, msg.clone()),
        "pubsub"
    );

    let (mut g, _, ext) = upgrade(weir.addr, "/guest", Some("permessage-deflate")).await;
    assert_eq!(ext.as_deref(), Some("permessage-deflate"));
    let mut z = ClientDeflate::new();
    for i in 0..3 {
        let msg = json(1500 + i, i);
        g.send(&frame(0xC1, &z.deflate(&msg))).await;
        let (first, payload) = g.next_frame().await.unwrap();
        assert_eq!(first & 0x0F, 0x1, "guest echo");
        let got = if first & 0x40 != 0 {
            ClientDeflate::new().inflate(&payload)
        } else {
            payload
        };
        assert_eq!(got, msg, "the guest saw the inflated message");
    }
}

/// Runs a client script from host/tests/clients; returns its JSON line.
fn run_client(program: &str, args: &[&str]) -> serde_json::Value {
    let clients = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/clients");
    let output = Command::new(program)
        .args(args)
        .current_dir(&clients)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e} (scripts/test.sh installs the clients)"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{program} {args:?}: {}\n{stdout}{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or("")).unwrap()
}

fn clients_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/clients")
}

/// Node's `ws` with perMessageDeflate (threshold 0) in both context modes:
/// every echo arrives intact, and the server's replies take under a third
/// of the messages' bytes on the wire (they are compressed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_ws_client_both_modes() {
    assert!(
        clients_dir().join("node_modules/ws").exists(),
        "host/tests/clients/node_modules/ws missing: run scripts/test.sh"
    );
    let weir = weir().await;
    for (path, mode, want) in [
        (
            "/echo",
            "takeover",
            "permessage-deflate; client_max_window_bits",
        ),
        (
            "/echo",
            "none",
            "permessage-deflate; server_no_context_takeover; client_no_context_takeover",
        ),
        (
            "/echo-none",
            "takeover",
            "permessage-deflate; server_no_context_takeover; client_no_context_takeover",
        ),
    ] {
        let url = weir.url(path);
        let out = tokio::task::spawn_blocking(move || {
            run_client("node", &["deflate-client.mjs", &url, mode])
        })
        .await
        .unwrap();
        assert_eq!(out["echoed"], 20, "{path} {mode}: {out}");
        assert_eq!(out["code"], 1000, "{out}");
        let (wire, payload) = (
            out["wireBytes"].as_u64().unwrap(),
            out["payload"].as_u64().unwrap(),
        );
        assert!(wire * 3 < payload, "replies compressed: {out}");
        let ext = out["extensions"].as_str().unwrap();
        assert!(ext.starts_with("permessage-deflate"), "{out}");
        if want.contains("server_no") {
            assert_eq!(ext, want, "{path} {mode}");
        }
    }
}

/// Python's `websockets` with permessage-deflate in both context modes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_websockets_client_both_modes() {
    let python = clients_dir().join(".venv/bin/python");
    assert!(
        python.exists(),
        "{} missing: run scripts/test.sh",
        python.display()
    );
    let weir = weir().await;
    for (path, mode) in [
        ("/echo", "takeover"),
        ("/echo", "none"),
        ("/echo-none", "takeover"),
    ] {
        let url = weir.url(path);
        let py = python.display().to_string();
        let out = tokio::task::spawn_blocking(move || {
            run_client(&py, &["deflate_client.py", &url, mode])
        })
        .await
        .unwrap();
        assert_eq!(out["echoed"], 21, "{path} {mode}: {out}");
        assert_eq!(out["negotiated"][0], "PerMessageDeflate", "{out}");
        let ext = out["extensions"].as_str().unwrap();
        let stateless = mode == "none" || path == "/echo-none";
        assert_eq!(
            ext.contains("server_no_context_takeover"),
            stateless,
            "{path} {mode}: {ext}"
        );
    }
}
