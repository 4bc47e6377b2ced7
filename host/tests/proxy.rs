//! Native proxy over loopback with real upstreams: a tokio-tungstenite
//! server inside the test and the Node `ws` server (tests/proxy/upstream.mjs,
//! installed by scripts/test.sh), tokio-tungstenite and raw sockets as
//! clients. Exact pass-through both ways, fragments, pings and close codes,
//! 502/504 at the upgrade, 1014 when the upstream dies, headers and
//! subprotocols, and backpressure both ways in bounded memory.

mod common;

use common::{client, frame, next, Gateway, Raw, WeirProcess, STEP};
use futures_util::{SinkExt, StreamExt};
use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::Message;
use weir_config::Config;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// What the tokio-tungstenite upstream received, reported to the test.
#[derive(Debug)]
enum Seen {
    Message(Message),
}

fn ws_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .max_message_size(Some(64 << 20))
        .max_frame_size(Some(64 << 20))
}

/// A tokio-tungstenite upstream that echoes every message (and reports
/// what it got, the close included). `hello` is sent first on each
/// connection when given.
async fn tungstenite_upstream(
    hello: Option<Message>,
) -> (SocketAddr, mpsc::UnboundedReceiver<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let tx = tx.clone();
            let hello = hello.clone();
            tokio::spawn(async move {
                let Ok(mut ws) =
                    tokio_tungstenite::accept_async_with_config(stream, Some(ws_config())).await
                else {
                    return;
                };
                if let Some(hello) = hello {
                    ws.send(hello).await.unwrap();
                }
                while let Some(Ok(msg)) = ws.next().await {
                    let _ = tx.send(Seen::Message(msg.clone()));
                    if (msg.is_binary() || msg.is_text()) && ws.send(msg).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, rx)
}

/// A gateway (2 workers) with a proxy route `/rooms/{room}` to `upstream`
/// (`extra`: more route keys).
fn gateway(upstream: &str, extra: &str) -> Gateway {
    let text = format!(
        "[server]\nworkers = 2\n\n[[route]]\npath = \"/rooms/{{room}}\"\nnative = \"proxy\"\n\
         upstream = \"{upstream}\"\n{extra}\n"
    );
    Gateway::start(Config::parse(&text, Path::new(".")).expect("routes"))
}

async fn seen_message(rx: &mut mpsc::UnboundedReceiver<Seen>) -> Message {
    match timeout(STEP, rx.recv())
        .await
        .expect("upstream saw nothing")
    {
        Some(Seen::Message(m)) => m,
        None => panic!("upstream ended"),
    }
}

/// Every size class from 0 to 16 MiB, text and binary, through the proxy
/// and back: the upstream receives exactly what the client sent, and the
/// client exactly what the upstream sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_size_passes_through_both_ways() {
    let (up, mut seen) = tungstenite_upstream(None).await;
    let gw = gateway(&format!("ws://{up}/echo/{{room}}"), "");
    let ws = client(&gw.url("/rooms/sizes")).await;
    let (mut tx, mut rx) = ws.split();
    for size in [
        0,
        1,
        125,
        126,
        127,
        65535,
        65536,
        65550,
        200_000,
        1 << 20,
        16 << 20,
    ] {
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
        assert_eq!(
            seen_message(&mut seen).await.into_data()[..],
            bin[..],
            "upstream got binary {size}"
        );
        assert_eq!(
            seen_message(&mut seen).await.into_data()[..],
            text.as_bytes()[..],
            "upstream got text {size}"
        );
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

/// A fragmented message arrives whole at the upstream; a ping goes to the
/// upstream and its pong (same payload) comes back; the client's close
/// code and reason reach the upstream, and the upstream's close code
/// reaches the client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fragments_pings_and_close_codes_are_carried() {
    let (up, mut seen) = tungstenite_upstream(None).await;
    let gw = gateway(&format!("ws://{up}/x"), "");
    let mut raw = Raw::connect(gw.addr, "/rooms/a").await;
    raw.send(&frame(0x01, b"frag")).await; // text, FIN clear
    raw.send(&frame(0x89, b"p1")).await; // ping between fragments
    raw.send(&frame(0x80, b"mented")).await; // final continuation
    let mut got_pong = false;
    let mut got_echo = false;
    while !(got_pong && got_echo) {
        let (first, payload) = raw.next_frame().await.expect("frame");
        match first {
            0x8A => {
                assert_eq!(payload, b"p1");
                got_pong = true;
            }
            0x81 => {
                assert_eq!(payload, b"fragmented");
                got_echo = true;
            }
            other => panic!("unexpected frame {other:#x}"),
        }
    }
    assert_eq!(
        seen_message(&mut seen).await,
        Message::Ping(b"p1".to_vec().into())
    );
    assert_eq!(seen_message(&mut seen).await, Message::text("fragmented"));
    // The client closes with 4001: the upstream sees it, the client gets
    // its reply.
    raw.send(&frame(0x88, &[0x0F, 0xA1, b'b', b'y', b'e']))
        .await;
    assert_eq!(raw.close_code().await, Some(4001));
    match seen_message(&mut seen).await {
        Message::Close(Some(f)) => {
            assert_eq!((u16::from(f.code), f.reason.as_str()), (4001, "bye"));
        }
        other => panic!("upstream got {other:?}"),
    }

    // The upstream closes with 4002 "done": the client sees that code.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up2 = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let mut ws = tokio_tungstenite::accept_async(stream).await.unwrap();
        ws.send(Message::text("hello")).await.unwrap();
        ws.close(Some(CloseFrame {
            code: CloseCode::from(4002),
            reason: "done".into(),
        }))
        .await
        .unwrap();
        while ws.next().await.is_some() {}
    });
    let gw2 = gateway(&format!("ws://{up2}/"), "");
    let mut ws = client(&gw2.url("/rooms/b")).await;
    assert_eq!(next(&mut ws).await, Message::text("hello"));
    match next(&mut ws).await {
        Message::Close(Some(f)) => {
            assert_eq!((u16::from(f.code), f.reason.as_str()), (4002, "done"))
        }
        other => panic!("client got {other:?}"),
    }
    gw.stop();
    gw2.stop();
}

/// Status code of an upgrade request to `path`.
async fn upgrade_status(addr: SocketAddr, path: &str) -> u16 {
    let head = format!(
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    Raw::request(addr, &head).await.1
}

/// Nothing listening, a wrong answer, or no 101 → 502; no answer within
/// `connect_timeout` → 504. The client never gets a 101 first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unusable_upstreams_get_502_and_a_silent_one_504() {
    // A port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_addr = closed.local_addr().unwrap();
    drop(closed);
    let gw = gateway(&format!("ws://{closed_addr}/"), "");
    assert_eq!(upgrade_status(gw.addr, "/rooms/a").await, 502);
    gw.stop();

    // Answers 403; then one that answers 101 with a wrong accept key.
    for answer in [
        "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Accept: AAAAAAAAAAAAAAAAAAAAAAAAAAA=\r\n\r\n",
    ] {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut head = vec![0u8; 4096];
            let _ = stream.read(&mut head).await;
            stream.write_all(answer.as_bytes()).await.unwrap();
            tokio::time::sleep(Duration::from_secs(2)).await;
        });
        let gw = gateway(&format!("ws://{addr}/"), "");
        assert_eq!(upgrade_status(gw.addr, "/rooms/a").await, 502, "{answer}");
        gw.stop();
        server.abort();
    }

    // Accepts TCP, never answers.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let gw = gateway(&format!("ws://{addr}/"), "connect_timeout = \"300ms\"");
    let started = std::time::Instant::now();
    assert_eq!(upgrade_status(gw.addr, "/rooms/a").await, 504);
    assert!(started.elapsed() < Duration::from_secs(5));
    gw.stop();
    server.abort();
}

/// The upstream process dies mid-stream: the client gets 1014. (A raw
/// client: tokio-tungstenite reports a received 1014 as 1002, since it
/// does not list the IANA-registered code as one a peer may send.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_killed_mid_stream_closes_the_client_1014() {
    let mut node = NodeUpstream::start().await;
    let gw = gateway(&format!("ws://127.0.0.1:{}/", node.port), "");
    let mut raw = Raw::connect(gw.addr, "/rooms/a").await;
    let (first, _hello) = raw.next_frame().await.expect("hello");
    assert_eq!(first, 0x81);
    raw.send(&frame(0x82, &pattern(1000, 1))).await;
    assert_eq!(raw.next_frame().await.unwrap(), (0x82, pattern(1000, 1)));
    node.child.kill().unwrap();
    assert_eq!(raw.close_code().await, Some(1014));
    gw.stop();
}

/// The client goes away without a close: the upstream gets 1001.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_gone_closes_the_upstream_1001() {
    let (up, mut seen) = tungstenite_upstream(None).await;
    let gw = gateway(&format!("ws://{up}/"), "");
    let mut raw = Raw::connect(gw.addr, "/rooms/a").await;
    raw.send(&frame(0x82, b"last")).await;
    assert_eq!(raw.next_frame().await.unwrap().1, b"last");
    drop(raw);
    assert_eq!(
        seen_message(&mut seen).await,
        Message::binary(b"last".to_vec())
    );
    match seen_message(&mut seen).await {
        Message::Close(Some(f)) => assert_eq!(u16::from(f.code), 1001),
        other => panic!("upstream got {other:?}"),
    }
    gw.stop();
}

/// The Node `ws` server as upstream (tests/proxy/upstream.mjs); killed
/// (by its PID) when dropped.
struct NodeUpstream {
    child: std::process::Child,
    port: u16,
}

impl NodeUpstream {
    async fn start() -> NodeUpstream {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/proxy");
        assert!(
            dir.join("node_modules/ws").is_dir(),
            "the ws package is missing in {}: run scripts/test.sh (it installs it), \
             or npm ci there",
            dir.display()
        );
        let mut child = std::process::Command::new("node")
            .arg(dir.join("upstream.mjs"))
            .stdout(Stdio::piped())
            .spawn()
            .expect("node (scripts/test.sh installs it)");
        let stdout = child.stdout.take().unwrap();
        let first_line = tokio::task::spawn_blocking(move || {
            let mut line = String::new();
            std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).unwrap();
            line
        });
        let mut upstream = NodeUpstream { child, port: 0 };
        let line = timeout(STEP, first_line)
            .await
            .expect("node upstream did not start")
            .unwrap();
        upstream.port = line.trim().strip_prefix("port ").unwrap().parse().unwrap();
        upstream
    }
}

impl Drop for NodeUpstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Against Node's `ws`: the path parameter is substituted and the query
/// appended, the listed headers and X-Forwarded-For/-Proto arrive (others
/// do not), the subprotocol the upstream picked is the client's, and
/// messages of every size pass through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_ws_upstream_gets_headers_and_picks_the_subprotocol() {
    let node = NodeUpstream::start().await;
    let gw = gateway(
        &format!("ws://127.0.0.1:{}/backend/{{room}}", node.port),
        "forward_headers = [\"cookie\", \"X-Tenant\"]",
    );
    let mut req = tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(
        gw.url("/rooms/lobby?user=ann"),
    )
    .unwrap();
    let h = req.headers_mut();
    h.insert(
        "sec-websocket-protocol",
        HeaderValue::from_static("chat.v2, chat.v1"),
    );
    h.insert("cookie", HeaderValue::from_static("session=abc"));
    h.insert("x-tenant", HeaderValue::from_static("t1"));
    h.insert("authorization", HeaderValue::from_static("Bearer secret"));
    h.insert("x-forwarded-for", HeaderValue::from_static("6.6.6.6"));
    let (mut ws, resp) = timeout(
        STEP,
        tokio_tungstenite::connect_async_with_config(req, Some(ws_config()), false),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(
        resp.headers().get("sec-websocket-protocol").unwrap(),
        "chat.v1",
        "the upstream's choice (the last offered) is the client's"
    );
    let hello: serde_json::Value =
        serde_json::from_str(next(&mut ws).await.to_text().unwrap()).unwrap();
    assert_eq!(hello["path"], "/backend/lobby?user=ann");
    assert_eq!(hello["protocol"], "chat.v1");
    let headers = &hello["headers"];
    assert_eq!(headers["cookie"], "session=abc");
    assert_eq!(headers["x-tenant"], "t1");
    assert_eq!(
        headers["x-forwarded-for"], "127.0.0.1",
        "the client's claim is not passed on"
    );
    assert_eq!(headers["x-forwarded-proto"], "http");
    assert!(
        headers.get("authorization").is_none(),
        "not listed, not forwarded"
    );
    let (mut tx, mut rx) = ws.split();
    for size in [0, 125, 126, 65535, 65536, 1 << 20, 16 << 20] {
        let bin = pattern(size, 7);
        let (sent, got) = tokio::join!(tx.send(Message::binary(bin.clone())), async {
            timeout(STEP, rx.next()).await.unwrap().unwrap().unwrap()
        });
        sent.unwrap();
        assert!(got.into_data()[..] == bin[..], "size {size} differs");
    }
    gw.stop();
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// A client that stops reading while the upstream floods it, and an
/// upstream that stops reading while the client floods it: neither side
/// is read past the budget (the producer stalls, weir's memory stays
/// bounded), and once the slow side reads, every byte arrives in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_client_and_slow_upstream_hold_memory_bounded() {
    const MESSAGE: usize = 64 << 10;
    const TOTAL: usize = 256 << 20;
    // The upstream: on "flood" sends TOTAL bytes in MESSAGE-sized binary
    // messages counting how far it got; on "sink" waits for the "read"
    // signal before reading everything the client sends.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = listener.local_addr().unwrap();
    let (sent_tx, mut sent_rx) = mpsc::unbounded_channel::<usize>();
    let (read_tx, read_rx) = tokio::sync::oneshot::channel::<()>();
    let (got_tx, got_rx) = tokio::sync::oneshot::channel::<usize>();
    tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let mut ws = tokio_tungstenite::accept_async_with_config(stream, Some(ws_config()))
            .await
            .unwrap();
        let mut sent = 0;
        for i in 0..TOTAL / MESSAGE {
            let mut m = vec![0u8; MESSAGE];
            m[..8].copy_from_slice(&(i as u64).to_be_bytes());
            ws.send(Message::binary(m)).await.unwrap();
            sent += MESSAGE;
            let _ = sent_tx.send(sent);
        }
        // Now the other way: do not read until told to.
        read_rx.await.unwrap();
        let mut got = 0;
        let mut expect = 0u64;
        while got < TOTAL {
            match ws.next().await {
                Some(Ok(Message::Binary(b))) => {
                    assert_eq!(u64::from_be_bytes(b[..8].try_into().unwrap()), expect);
                    expect += 1;
                    got += b.len();
                }
                other => panic!("upstream got {other:?}"),
            }
        }
        let _ = got_tx.send(got);
        while ws.next().await.is_some() {}
    });
    let weir = WeirProcess::start(
        "workers = 1",
        &format!(
            "[[route]]\npath = \"/rooms/{{room}}\"\nnative = \"proxy\"\nupstream = \"ws://{up}/\"\n\
             outbound_budget = \"1MiB\"\n"
        ),
        "warn",
        Stdio::null(),
    )
    .await;
    let pid = weir.child.id();
    let base = rss_kib(pid);
    let mut ws = client(&weir.url("/rooms/a")).await;
    // The client does not read: the upstream stalls far short of TOTAL.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut stalled_at = 0;
    while let Ok(n) = sent_rx.try_recv() {
        stalled_at = n;
    }
    assert!(
        stalled_at < 64 << 20,
        "upstream sent {stalled_at} bytes to a client that reads nothing"
    );
    let grown = rss_kib(pid).saturating_sub(base);
    assert!(
        grown < 48 << 10,
        "weir grew {grown} KiB holding a stalled stream"
    );
    // Now the client reads: every message, in order.
    for i in 0..(TOTAL / MESSAGE) as u64 {
        let m = next(&mut ws).await.into_data();
        assert_eq!(u64::from_be_bytes(m[..8].try_into().unwrap()), i);
    }

    // The other way: the client floods an upstream that does not read.
    let (mut tx, rx) = ws.split();
    let flood = tokio::spawn(async move {
        let mut sent = 0;
        let (progress_tx, progress) = tokio::sync::watch::channel(0usize);
        let sending = async {
            for i in 0..TOTAL / MESSAGE {
                let mut m = vec![0u8; MESSAGE];
                m[..8].copy_from_slice(&(i as u64).to_be_bytes());
                tx.send(Message::binary(m)).await.unwrap();
                sent += MESSAGE;
                let _ = progress_tx.send(sent);
            }
        };
        (sending.await, progress)
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !flood.is_finished(),
        "a client flooding an upstream that reads nothing is not held back"
    );
    let grown = rss_kib(pid).saturating_sub(base);
    assert!(
        grown < 48 << 10,
        "weir grew {grown} KiB holding a stalled upstream"
    );
    read_tx.send(()).unwrap();
    let got = timeout(Duration::from_secs(60), got_rx)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got, TOTAL);
    timeout(STEP, flood).await.unwrap().unwrap();
    drop(rx);
}

/// A component of examples/wasm (scripts/build-guests.sh builds them).
fn example_wasm(name: &str) -> String {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/wasm")
        .join(name);
    path.display().to_string()
}

/// An upstream for filter tests: answers each text message `m` with `m`,
/// `spam:m` and `darn:m`, echoes binary, and reports what it received
/// (the close included).
async fn chatty_upstream() -> (SocketAddr, mpsc::UnboundedReceiver<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let Ok(mut ws) =
                    tokio_tungstenite::accept_async_with_config(stream, Some(ws_config())).await
                else {
                    return;
                };
                while let Some(Ok(msg)) = ws.next().await {
                    let _ = tx.send(Seen::Message(msg.clone()));
                    let replies = match &msg {
                        Message::Text(t) => vec![
                            Message::text(t.as_str()),
                            Message::text(format!("spam:{t}")),
                            Message::text(format!("darn:{t}")),
                        ],
                        Message::Binary(b) => vec![Message::binary(b.clone())],
                        _ => vec![],
                    };
                    for reply in replies {
                        if ws.send(reply).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    (addr, rx)
}

/// The moderate example as a proxy route's filter, both ways: messages
/// with "spam" are dropped, "darn" is rewritten, the rest (binary too,
/// 1 MiB of it, larger than a read) goes on unchanged, in order; "!kick"
/// closes the client 1008 and the upstream gets a close of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filter_drops_rewrites_and_forwards_both_ways_in_order() {
    let (up, mut seen) = chatty_upstream().await;
    let filter = example_wasm("moderate.wasm");
    let gw = gateway(
        &format!("ws://{up}/r/{{room}}"),
        &format!("filter = \"{filter}\""),
    );
    let mut ws = client(&gw.url("/rooms/mod")).await;
    const N: usize = 100;
    let sent: Vec<String> = (0..N)
        .map(|i| match i % 4 {
            0 => format!("hello {i}"),
            1 => format!("buy spam {i}"),
            2 => format!("darn it {i}"),
            _ => format!("plain {i}"),
        })
        .collect();
    for m in &sent {
        ws.send(Message::text(m.as_str())).await.unwrap();
    }
    let big = pattern(1 << 20, 7);
    ws.send(Message::binary(big.clone())).await.unwrap();
    // Toward the upstream: spam dropped, darn rewritten, order kept.
    let upstream_wants: Vec<String> = sent
        .iter()
        .filter(|m| !m.contains("spam"))
        .map(|m| m.replace("darn", "d**n"))
        .collect();
    for want in &upstream_wants {
        assert_eq!(seen_message(&mut seen).await, Message::text(want.as_str()));
    }
    assert_eq!(seen_message(&mut seen).await.into_data()[..], big[..]);
    // Toward the client: each answer `m`, `spam:m` (dropped), `darn:m`
    // (rewritten), then the binary echo.
    for m in &upstream_wants {
        assert_eq!(next(&mut ws).await, Message::text(m.as_str()));
        assert_eq!(next(&mut ws).await, Message::text(format!("d**n:{m}")));
    }
    assert_eq!(next(&mut ws).await.into_data()[..], big[..]);
    // A ping still passes straight through (its pong comes back).
    ws.send(Message::Ping(b"p".to_vec().into())).await.unwrap();
    assert_eq!(next(&mut ws).await, Message::Pong(b"p".to_vec().into()));
    // The filter closes: the client gets 1008, the upstream a close.
    ws.send(Message::text("!kick")).await.unwrap();
    match next(&mut ws).await {
        Message::Close(Some(f)) => {
            assert_eq!(f.code, CloseCode::Policy);
            assert_eq!(f.reason.as_str(), "kicked by the moderator");
        }
        other => panic!("expected close 1008, got {other:?}"),
    }
    loop {
        match seen_message(&mut seen).await {
            Message::Close(_) => break,
            Message::Pong(_) | Message::Ping(_) => continue,
            other => panic!("upstream got {other:?} after the kick"),
        }
    }
    gw.stop();
}

/// A filter that traps closes that connection 1011 (and its upstream),
/// while another connection of the route, not in the failed batch, goes
/// on; a filter that loops past its deadline does the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filter_faults_close_only_their_connection_1011() {
    let (up, _seen) = tungstenite_upstream(None).await;
    let filter = example_wasm("faulty.wasm");
    let text = format!(
        "[server]\nworkers = 1\n\n[[route]]\npath = \"/rooms/{{room}}\"\nnative = \"proxy\"\n\
         upstream = \"ws://{up}/\"\nfilter = \"{filter}\"\ntimeout = \"200ms\"\n"
    );
    let gw = Gateway::start(Config::parse(&text, Path::new(".")).expect("routes"));
    let mut calm = client(&gw.url("/rooms/calm")).await;
    calm.send(Message::text("before")).await.unwrap();
    assert_eq!(next(&mut calm).await, Message::text("before"));
    for fault in ["trap", "loop"] {
        let mut bad = client(&gw.url("/rooms/bad")).await;
        bad.send(Message::text("fine")).await.unwrap();
        assert_eq!(next(&mut bad).await, Message::text("fine"));
        bad.send(Message::text(fault)).await.unwrap();
        match next(&mut bad).await {
            Message::Close(Some(f)) => assert_eq!(f.code, CloseCode::Error, "{fault}"),
            other => panic!("{fault}: expected close 1011, got {other:?}"),
        }
        calm.send(Message::text(format!("after {fault}")))
            .await
            .unwrap();
        assert_eq!(
            next(&mut calm).await,
            Message::text(format!("after {fault}"))
        );
    }
    gw.stop();
}

/// A filter's keys are checked with their line: an empty `filter`, a
/// `filter` on another kind of route, guest keys on a proxy route without
/// a filter.
#[test]
fn filter_keys_are_checked() {
    let text = "[[route]]\npath = \"/p\"\nnative = \"proxy\"\nupstream = \"ws://127.0.0.1:1/\"\n\
                filter = \"\"\n";
    let err = Config::parse(text, Path::new(".")).unwrap_err().to_string();
    assert!(err.contains("line 5"), "{err}");
    let text = "[[route]]\npath = \"/p\"\nnative = \"echo\"\nfilter = \"x.wasm\"\n";
    let err = Config::parse(text, Path::new(".")).unwrap_err().to_string();
    assert!(err.contains("filter only applies to proxy routes"), "{err}");
    let text = "[[route]]\npath = \"/p\"\nnative = \"proxy\"\nupstream = \"ws://127.0.0.1:1/\"\n\
                memory = \"16MiB\"\n";
    let err = Config::parse(text, Path::new(".")).unwrap_err().to_string();
    assert!(err.contains("memory only applies to guest routes"), "{err}");
}

/// A fresh directory for one test's certificates (none is committed).
fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("weir-proxy-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A self-signed certificate for `localhost` as `<stem>.pem` and
/// `<stem>-key.pem` in `dir`; returns the certificate and key (DER).
fn write_cert(
    dir: &Path,
    stem: &str,
) -> (
    rustls::pki_types::CertificateDer<'static>,
    rustls::pki_types::PrivateKeyDer<'static>,
) {
    let made = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    std::fs::write(dir.join(format!("{stem}.pem")), made.cert.pem()).unwrap();
    std::fs::write(
        dir.join(format!("{stem}-key.pem")),
        made.signing_key.serialize_pem(),
    )
    .unwrap();
    let key = rustls::pki_types::PrivateKeyDer::try_from(made.signing_key.serialize_der()).unwrap();
    (made.cert.der().clone(), key)
}

/// A wss:// upstream (tokio-rustls + tokio-tungstenite) that echoes data
/// messages and reports the X-Forwarded-Proto of each upgrade, then each
/// message (the close included).
// The header callback's error type is tungstenite's (an HTTP response).
#[allow(clippy::result_large_err)]
async fn tls_upstream(
    cert: rustls::pki_types::CertificateDer<'static>,
    key: rustls::pki_types::PrivateKeyDer<'static>,
) -> (
    SocketAddr,
    mpsc::UnboundedReceiver<Seen>,
    mpsc::UnboundedReceiver<String>,
) {
    let config = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![cert], key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    let (proto_tx, proto_rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (tx, proto_tx, acceptor) = (tx.clone(), proto_tx.clone(), acceptor.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(stream).await else {
                    return;
                };
                let record = |req: &tokio_tungstenite::tungstenite::handshake::server::Request,
                              resp| {
                    let proto = req
                        .headers()
                        .get("x-forwarded-proto")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("")
                        .to_string();
                    let _ = proto_tx.send(proto);
                    Ok(resp)
                };
                let Ok(mut ws) =
                    tokio_tungstenite::accept_hdr_async_with_config(tls, record, Some(ws_config()))
                        .await
                else {
                    return;
                };
                while let Some(Ok(msg)) = ws.next().await {
                    let _ = tx.send(Seen::Message(msg.clone()));
                    if (msg.is_binary() || msg.is_text()) && ws.send(msg).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, rx, proto_rx)
}

/// A client TLS config that trusts exactly `root`.
fn trusting(
    root: rustls::pki_types::CertificateDer<'static>,
) -> std::sync::Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(root).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    std::sync::Arc::new(config)
}

/// A `wss://` upstream with a private CA (`upstream_ca`): every size both
/// ways exactly (records split and joined across reads), the close carried;
/// X-Forwarded-Proto is `https` for a client that came over TLS and
/// `http` for one that did not. The same upstream without `upstream_ca`
/// (the web's roots do not know it) is a 502.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wss_upstreams_with_a_private_ca() {
    let dir = scratch("wss");
    let (up_cert, up_key) = write_cert(&dir, "upstream");
    let (gw_cert, _) = write_cert(&dir, "gateway");
    let (up, mut seen, mut protos) = tls_upstream(up_cert, up_key).await;
    let routes = |tls: &str| {
        format!(
            "[server]\nworkers = 2\n{tls}\n\n[[route]]\npath = \"/rooms/{{room}}\"\n\
             native = \"proxy\"\nupstream = \"wss://localhost:{port}/r/{{room}}\"\n\
             upstream_ca = \"{ca}\"\n\n[[route]]\npath = \"/public/{{room}}\"\n\
             native = \"proxy\"\nupstream = \"wss://localhost:{port}/r/{{room}}\"\n",
            port = up.port(),
            ca = dir.join("upstream.pem").display(),
        )
    };
    // A plain gateway: the client's frames over TLS to the upstream.
    let gw = Gateway::start(Config::parse(&routes(""), Path::new(".")).expect("routes"));
    let mut ws = client(&gw.url("/rooms/a")).await;
    assert_eq!(timeout(STEP, protos.recv()).await.unwrap().unwrap(), "http");
    for size in [0, 125, 16_383, 16_385, 70_000, 1 << 20] {
        let bin = pattern(size, size as u8);
        ws.send(Message::binary(bin.clone())).await.unwrap();
        assert_eq!(
            seen_message(&mut seen).await.into_data()[..],
            bin[..],
            "{size}"
        );
        assert_eq!(next(&mut ws).await.into_data()[..], bin[..], "{size}");
    }
    ws.send(Message::text("héllo")).await.unwrap();
    assert_eq!(next(&mut ws).await, Message::text("héllo"));
    assert_eq!(seen_message(&mut seen).await, Message::text("héllo"));
    ws.close(Some(CloseFrame {
        code: CloseCode::Away,
        reason: "bye".into(),
    }))
    .await
    .unwrap();
    match seen_message(&mut seen).await {
        Message::Close(Some(f)) => {
            assert_eq!((f.code, f.reason.as_str()), (CloseCode::Away, "bye"))
        }
        other => panic!("expected the client's close, got {other:?}"),
    }
    // Without upstream_ca the upstream's certificate is not trusted.
    assert_eq!(upgrade_status(gw.addr, "/public/a").await, 502);
    gw.stop();

    // A TLS gateway: the upstream hears that the client came over https.
    let tls = format!(
        "tls = {{ cert = \"{}\", key = \"{}\" }}",
        dir.join("gateway.pem").display(),
        dir.join("gateway-key.pem").display()
    );
    let gw = Gateway::start(Config::parse(&routes(&tls), Path::new(".")).expect("routes"));
    let tcp = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let stream = tokio_rustls::TlsConnector::from(trusting(gw_cert))
        .connect(name, tcp)
        .await
        .unwrap();
    let (mut wss, _) = timeout(
        STEP,
        tokio_tungstenite::client_async("wss://localhost/rooms/b", stream),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(
        timeout(STEP, protos.recv()).await.unwrap().unwrap(),
        "https"
    );
    wss.send(Message::text("over tls twice")).await.unwrap();
    let got = timeout(STEP, wss.next()).await.unwrap().unwrap().unwrap();
    assert_eq!(got, Message::text("over tls twice"));
    gw.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

/// An upstream that accepts every WebSocket and reports the request path
/// of each upgrade it gets. (tungstenite's callback type returns its
/// error response by value.)
#[allow(clippy::result_large_err)]
async fn path_recording_upstream() -> (SocketAddr, mpsc::UnboundedReceiver<String>) {
    use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let record = |req: &Request, resp: Response| {
                    let _ = tx.send(req.uri().to_string());
                    Ok(resp)
                };
                if let Ok(mut ws) = tokio_tungstenite::accept_hdr_async(stream, record).await {
                    while let Some(Ok(_)) = ws.next().await {}
                }
            });
        }
    });
    (addr, rx)
}

/// Issue 35 (security review): a proxy route `upstream = "ws://…/rooms/{room}"`
/// passed `/rooms/..`, `/rooms/%2e%2e` and `/rooms/..%2Fadmin` on as
/// upstream paths. A parameter that would change the upstream path's shape
/// now gets 400 before any dial; others are sent as one encoded segment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_parameters_cannot_change_the_upstream_path() {
    let (addr, mut seen) = path_recording_upstream().await;
    let gw = gateway(&format!("ws://{addr}/rooms/{{room}}"), "");
    for room in [
        "..",
        ".",
        "%2e%2e",
        "%2E%2E",
        ".%2e",
        "%2e",
        "..%2Fadmin",
        "a%2fb",
        "a\\b",
        "a%5Cb",
        "a%0d%0aX-Evil:%201",
        "a%00",
        "a%zz",
    ] {
        assert_eq!(
            upgrade_status(gw.addr, &format!("/rooms/{room}")).await,
            400,
            "{room}"
        );
    }
    // Allowed values arrive as one segment, percent-encoded.
    for (room, sent) in [
        ("lobby", "/rooms/lobby"),
        ("a%20b", "/rooms/a%20b"),
        ("a;b=c", "/rooms/a%3Bb%3Dc"),
        ("...", "/rooms/..."),
    ] {
        let head = format!(
            "GET /rooms/{room}?x=1 HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\n\
             Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
             Sec-WebSocket-Version: 13\r\n\r\n"
        );
        let (_raw, status) = Raw::request(gw.addr, &head).await;
        assert_eq!(status, 101, "{room}");
        let path = timeout(STEP, seen.recv()).await.unwrap().unwrap();
        assert_eq!(path, format!("{sent}?x=1"), "{room}");
    }
    assert!(
        seen.try_recv().is_err(),
        "the upstream saw only the allowed upgrades"
    );
    gw.stop();
}
