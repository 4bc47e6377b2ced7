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

[[route]]
path = "/relay-none"
native = "relay"
compression = "on"
compression_context = "none"

[[route]]
path = "/mixed/{name}"
native = "pubsub"
compression = "on"
topics = "mixed"

[[route]]
path = "/mixed-none/{name}"
native = "pubsub"
compression = "on"
compression_context = "none"
topics = "mixed"

[[route]]
path = "/guest-none"
guest = "GUEST"
compression = "on"
compression_context = "none"

[[route]]
path = "/chat/{room}"
guest = "CHAT"
compression = "on"

[[route]]
path = "/echo-rated"
native = "echo"
compression = "on"
compression_min = "0B"
max_message_rate = 3
"#;

fn example(name: &str) -> String {
    let wasm =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../examples/wasm/{name}.wasm"));
    assert!(
        wasm.exists(),
        "{} missing: run scripts/build-guests.sh",
        wasm.display()
    );
    wasm.display().to_string()
}

async fn weir() -> WeirProcess {
    let routes = ROUTES
        .replace("GUEST", &example("echo"))
        .replace("CHAT", &example("chat"));
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
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
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

    /// A message the server sent: inflated when RSV1 is set, else as is.
    fn read(&mut self, first: u8, payload: Vec<u8>) -> Vec<u8> {
        if first & 0x40 != 0 {
            self.inflate(&payload)
        } else {
            payload
        }
    }

    fn inflate(&mut self, payload: &[u8]) -> Vec<u8> {
        let mut input = payload.to_vec();
        input.extend_from_slice(&[0, 0, 0xFF, 0xFF]);
        let mut out = Vec::with_capacity(1 << 20);
        let status = self
            .decompress
            .decompress_vec(&input, &mut out, FlushDecompress::Sync)
            .unwrap();
        // A message may end in a final block (RFC 7692 §7.2.3.4: weir
        // compresses whole messages so without context takeover); the
        // next message starts a new stream.
        if status == flate2::Status::StreamEnd {
            self.decompress.reset(false);
        }
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

/// Compressed messages dropped over `max_message_rate` are still inflated
/// (not handed on): with context takeover the next message refers back to
/// them, so skipping them would corrupt the stream and end the connection
/// with 1007. Here the messages after the dropped ones repeat their text,
/// which the client's compressor encodes as references into them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_messages_dropped_over_the_rate_keep_the_context_whole() {
    let weir = weir().await;
    let (mut raw, _, answered) =
        upgrade(weir.addr, "/echo-rated", Some("permessage-deflate")).await;
    assert_eq!(answered.as_deref(), Some("permessage-deflate"));
    let mut z = ClientDeflate::new();
    let msgs: Vec<Vec<u8>> = (0..8).map(|i| json(2000, i)).collect();
    let mut burst = Vec::new();
    for m in &msgs {
        burst.extend(frame(0xC1, &z.deflate(m)));
    }
    raw.send(&burst).await;
    // A second's worth (3) comes back; the other 5 were dropped.
    for m in &msgs[..3] {
        let (first, payload) = raw.next_frame().await.unwrap();
        assert_eq!(first, 0xC1);
        assert_eq!(&z.inflate(&payload), m);
    }
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    // Refers back to the dropped messages' text: must inflate right.
    let again = msgs[7].clone();
    raw.send(&frame(0xC1, &z.deflate(&again))).await;
    let (first, payload) = raw.next_frame().await.unwrap();
    assert_eq!(first, 0xC1, "not a close: the inflater kept up");
    assert_eq!(z.inflate(&payload), again);
    let dropped = r#"weir_route_overload_total{route="/echo-rated",reason="message_rate_dropped"}"#;
    assert_eq!(common::metric(weir.addr, dropped).await, 5);
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
/// they deliver arrives whole and readable: plain to clients that did not
/// negotiate permessage-deflate, compressed to one that did.
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
    let (mut z, mut zr) = (ClientDeflate::new(), ClientDeflate::new());
    for i in 0..3 {
        let msg = json(1500 + i, i);
        g.send(&frame(0xC1, &z.deflate(&msg))).await;
        let (first, payload) = g.next_frame().await.unwrap();
        assert_eq!(first, 0xC1, "guest echo, compressed");
        assert_eq!(
            zr.read(first, payload),
            msg,
            "the guest saw the inflated message"
        );
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

/// A `deflate_peer.py` child (Python `websockets` with permessage-deflate):
/// started and ready (its connection open and answering); killed if the
/// test ends before it does.
struct Peer {
    child: std::process::Child,
    lines: tokio::sync::mpsc::UnboundedReceiver<String>,
}

impl Peer {
    /// `open`: ready once open (an unpaired relay connection answers no
    /// ping), else once it answered a ping.
    async fn start(url: &str, mode: &str, send: usize, recv: usize, open: bool) -> Peer {
        let python = clients_dir().join(".venv/bin/python");
        assert!(
            python.exists(),
            "{} missing: run scripts/test.sh",
            python.display()
        );
        let mut child = Command::new(python)
            .args([
                "deflate_peer.py",
                url,
                mode,
                &send.to_string(),
                &recv.to_string(),
            ])
            .args(open.then_some("open"))
            .current_dir(clients_dir())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = tokio::sync::mpsc::unbounded_channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                let _ = tx.send(line);
            }
        });
        let mut peer = Peer { child, lines };
        let first = timeout(STEP, peer.lines.recv())
            .await
            .expect("peer not ready");
        assert_eq!(first.as_deref(), Some("ready"), "{url} {mode}");
        peer
    }

    /// Waits for the peer's JSON line (it exits after it).
    async fn finish(mut self) -> serde_json::Value {
        let mut last = String::new();
        while let Some(line) = timeout(STEP, self.lines.recv())
            .await
            .expect("peer timed out")
        {
            last = line;
        }
        let status = self.child.wait().unwrap();
        assert!(status.success(), "deflate_peer.py: {status}: {last}");
        serde_json::from_str(&last).unwrap_or_else(|e| panic!("{e}: {last}"))
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// What a peer received, as text, and whether each arrived with RSV1.
fn received(out: &serde_json::Value) -> (Vec<String>, Vec<bool>) {
    let texts = out["received"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    let rsv1 = out["rsv1"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_bool().unwrap())
        .collect();
    (texts, rsv1)
}

/// Message sizes around the default `compression_min` (256 B).
const SIZES: [usize; 6] = [100, 300, 2000, 5000, 20, 3000];

/// Relay in both context modes: what a plain partner sends reaches a
/// Python `websockets` client compressed (RSV1 on the wire) from
/// `compression_min` on and plain below it, and inflates to exactly what
/// was sent (with context takeover, message after message through one
/// context); and what the compressing side sends reaches a raw client
/// plain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_delivers_compressed_both_modes() {
    let weir = weir().await;
    for (path, mode) in [("/relay", "takeover"), ("/relay-none", "none")] {
        let peer = Peer::start(&weir.url(path), mode, 2, SIZES.len(), true).await;
        let (mut plain, _, ext) = upgrade(weir.addr, path, None).await;
        assert_eq!(ext, None);
        let msgs: Vec<Vec<u8>> = SIZES.iter().map(|&n| json(n, n)).collect();
        for m in &msgs {
            plain.send(&frame(0x81, m)).await;
        }
        let mut from_peer = Vec::new();
        for _ in 0..2 {
            let (first, payload) = plain.next_frame().await.unwrap();
            assert_eq!(first, 0x81, "{path}: the plain side gets plain frames");
            from_peer.push(String::from_utf8(payload).unwrap());
        }
        let out = peer.finish().await;
        let (texts, rsv1) = received(&out);
        let want: Vec<String> = msgs
            .iter()
            .map(|m| String::from_utf8(m.clone()).unwrap())
            .collect();
        assert_eq!(texts, want, "{path}: exact payloads");
        let compressed: Vec<bool> = SIZES.iter().map(|&n| n >= 256).collect();
        assert_eq!(rsv1, compressed, "{path}: RSV1 from compression_min on");
        let sent: Vec<String> = serde_json::from_value(out["sent"].clone()).unwrap();
        assert_eq!(from_peer, sent, "{path}: the peer's messages");
        assert_eq!(
            out["extensions"]
                .as_str()
                .unwrap()
                .contains("server_no_context_takeover"),
            mode == "none",
            "{out}"
        );
    }
}

/// One topic (a namespace shared by a takeover route and a "none" route)
/// with compressing and plain subscribers: each gets exactly what was
/// published, compressed (RSV1) from `compression_min` on where it
/// negotiated permessage-deflate, plain where it did not. The two raw
/// subscribers without context takeover get the same compressed bytes
/// (one shared form), each message inflating on its own; the takeover
/// ones inflate through one context; two Python clients check the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pubsub_mixed_topic_compressed_and_plain() {
    let weir = weir().await;
    let py_takeover =
        Peer::start(&weir.url("/mixed/room"), "takeover", 0, SIZES.len(), false).await;
    let py_none = Peer::start(&weir.url("/mixed-none/room"), "none", 0, SIZES.len(), false).await;
    let mut subs = Vec::new();
    for (path, offer) in [
        ("/mixed/room", None),
        ("/mixed/room", Some("permessage-deflate")),
        ("/mixed-none/room", Some("permessage-deflate")),
        ("/mixed-none/room", Some("permessage-deflate")),
        // A takeover route's client may ask for no context on its side.
        (
            "/mixed/room",
            Some("permessage-deflate; server_no_context_takeover"),
        ),
    ] {
        let (mut raw, _, ext) = upgrade(weir.addr, path, offer).await;
        assert_eq!(ext.is_some(), offer.is_some(), "{path} {offer:?}");
        raw.send(&frame(0x89, b"")).await;
        assert_eq!(raw.next_frame().await.unwrap().0, 0x8A, "subscribed");
        subs.push(raw);
    }
    let (mut publisher, _, _) = upgrade(weir.addr, "/mixed/room", None).await;
    let msgs: Vec<Vec<u8>> = SIZES
        .iter()
        .enumerate()
        .map(|(i, &n)| json(n, 100 * i))
        .collect();
    for m in &msgs {
        publisher.send(&frame(0x81, m)).await;
    }
    let mut wires: Vec<Vec<(u8, Vec<u8>)>> = Vec::new();
    for (s, sub) in subs.iter_mut().enumerate() {
        let mut z = ClientDeflate::new();
        let mut wire = Vec::new();
        for (m, want) in msgs.iter().enumerate() {
            let (first, payload) = sub.next_frame().await.unwrap();
            let compressed = s != 0 && want.len() >= 256;
            assert_eq!(
                first,
                if compressed { 0xC1 } else { 0x81 },
                "subscriber {s}, message {m}"
            );
            wire.push((first, payload.clone()));
            let got = if s >= 2 {
                // No context: every message inflates on its own.
                ClientDeflate::new().read(first, payload)
            } else {
                z.read(first, payload)
            };
            assert!(got == *want, "subscriber {s}, message {m}: payload differs");
        }
        wires.push(wire);
    }
    assert_eq!(wires[2], wires[3], "one shared compressed form");
    assert_eq!(wires[2], wires[4], "the same form from the takeover route");
    let want: Vec<String> = msgs
        .iter()
        .map(|m| String::from_utf8(m.clone()).unwrap())
        .collect();
    let compressed: Vec<bool> = SIZES.iter().map(|&n| n >= 256).collect();
    for peer in [py_takeover, py_none] {
        let out = peer.finish().await;
        let (texts, rsv1) = received(&out);
        assert_eq!(texts, want, "{out}");
        assert_eq!(rsv1, compressed, "{out}");
    }
    // The publisher is not a subscriber of its own messages (echo_self off).
    publisher.send(&frame(0x89, b"")).await;
    assert_eq!(publisher.next_frame().await.unwrap().0, 0x8A);
}

/// A guest's sends (the echo example) reach a Python `websockets` client
/// compressed in both context modes, and a guest's publishes (the chat
/// example) reach a takeover subscriber, a no-context subscriber and a
/// plain one, each exactly; the guest sees only plain payloads (it echoes
/// what the client compressed, inflated).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guest_sends_and_publishes_compressed() {
    let weir = weir().await;
    for (path, mode) in [("/guest", "takeover"), ("/guest-none", "none")] {
        let out = Peer::start(&weir.url(path), mode, 6, 6, false)
            .await
            .finish()
            .await;
        let (texts, rsv1) = received(&out);
        let sent: Vec<String> = serde_json::from_value(out["sent"].clone()).unwrap();
        assert_eq!(texts, sent, "{path}: exact echoes");
        let compressed: Vec<bool> = sent.iter().map(|m| m.len() >= 256).collect();
        assert_eq!(rsv1, compressed, "{path}: RSV1 from compression_min on");
    }

    let (mut a, _, _) = upgrade(weir.addr, "/chat/r", Some("permessage-deflate")).await;
    let (mut b, _, ext) = upgrade(
        weir.addr,
        "/chat/r",
        Some("permessage-deflate; server_no_context_takeover"),
    )
    .await;
    assert!(ext.unwrap().contains("server_no_context_takeover"));
    let (mut c, _, _) = upgrade(weir.addr, "/chat/r", None).await;
    // Let the open events (and their subscriptions) reach the guest first.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (mut za, mut zb) = (ClientDeflate::new(), ClientDeflate::new());
    for i in 0..3 {
        let msg = json(1000 + 700 * i, i);
        a.send(&frame(0xC1, &za.deflate(&msg))).await;
        let (first, payload) = b.next_frame().await.unwrap();
        assert_eq!(first, 0xC1, "b gets a compressed publish");
        assert!(ClientDeflate::new().read(first, payload) == msg, "b: {i}");
        assert_eq!(c.next_frame().await.unwrap(), (0x81, msg.clone()), "c: {i}");
        let msg = json(2000 + i, 50 + i);
        c.send(&frame(0x81, &msg)).await;
        let (first, payload) = a.next_frame().await.unwrap();
        assert_eq!(first, 0xC1, "a gets a compressed publish");
        assert!(za.read(first, payload) == msg, "a: {i}");
        let (first, payload) = b.next_frame().await.unwrap();
        assert!(zb.read(first, payload) == msg, "b: {i}");
    }
}
