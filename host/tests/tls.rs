//! TLS termination (`[server] tls`) against a real `weir serve`, with
//! independent clients: tokio-tungstenite over tokio-rustls (TLS 1.3 and
//! 1.2), raw sockets for the abusive handshakes, and the certificate files
//! replaced under an open connection. Certificates are made here (rcgen)
//! in a temporary directory; none is committed.

mod common;

use common::{WeirProcess, STEP};
use futures_util::{SinkExt, StreamExt};
use rustls::pki_types::{CertificateDer, ServerName};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{timeout, Instant};
use tokio_rustls::client::TlsStream;
use tokio_tungstenite::tungstenite::Message;

type Wss = tokio_tungstenite::WebSocketStream<TlsStream<TcpStream>>;

/// A fresh directory for one test's certificates and files.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("weir-tls-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes a new self-signed certificate for `localhost` and its key as
/// `cert.pem` / `key.pem` in `dir`; returns the certificate (DER).
fn write_cert(dir: &Path) -> CertificateDer<'static> {
    let made = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    std::fs::write(dir.join("cert.pem"), made.cert.pem()).unwrap();
    std::fs::write(dir.join("key.pem"), made.signing_key.serialize_pem()).unwrap();
    made.cert.der().clone()
}

fn tls_key(dir: &Path) -> String {
    format!(
        "tls = {{ cert = \"{}\", key = \"{}\" }}",
        dir.join("cert.pem").display(),
        dir.join("key.pem").display()
    )
}

/// A client that trusts exactly `roots`, offering `alpn`.
fn client_config(
    roots: &[CertificateDer<'static>],
    versions: &[&'static rustls::SupportedProtocolVersion],
    alpn: &[&[u8]],
) -> Arc<rustls::ClientConfig> {
    let mut store = rustls::RootCertStore::empty();
    for root in roots {
        store.add(root.clone()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(store)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    // Full handshakes only: a resumed session reports the certificate of
    // the session it resumed, not the one served now.
    config.resumption = rustls::client::Resumption::disabled();
    Arc::new(config)
}

async fn tls_connect(
    addr: std::net::SocketAddr,
    config: Arc<rustls::ClientConfig>,
) -> TlsStream<TcpStream> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let connector = tokio_rustls::TlsConnector::from(config);
    timeout(
        STEP,
        connector.connect(ServerName::try_from("localhost").unwrap(), tcp),
    )
    .await
    .expect("TLS handshake timed out")
    .expect("TLS handshake")
}

/// A wss:// client over a TLS stream made with `config`.
async fn wss(addr: std::net::SocketAddr, path: &str, config: Arc<rustls::ClientConfig>) -> Wss {
    let tls = tls_connect(addr, config).await;
    let ws_config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
        .max_message_size(Some(64 << 20))
        .max_frame_size(Some(64 << 20));
    let (ws, resp) = timeout(
        STEP,
        tokio_tungstenite::client_async_with_config(
            format!("wss://localhost{path}"),
            tls,
            Some(ws_config),
        ),
    )
    .await
    .expect("upgrade timed out")
    .expect("upgrade");
    assert_eq!(resp.status(), 101);
    ws
}

async fn next(ws: &mut Wss) -> Message {
    timeout(STEP, ws.next())
        .await
        .expect("reply timed out")
        .expect("stream ended")
        .expect("protocol error")
}

/// The certificate the server presented on `ws`'s connection.
fn presented(ws: &Wss) -> CertificateDer<'static> {
    let (_, session) = ws.get_ref().get_ref();
    session.peer_certificates().unwrap()[0].clone().into_owned()
}

/// `GET path` over TLS; the whole response.
async fn https_get(
    addr: std::net::SocketAddr,
    config: Arc<rustls::ClientConfig>,
    path: &str,
) -> String {
    let mut tls = tls_connect(addr, config).await;
    let head = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    tls.write_all(head.as_bytes()).await.unwrap();
    let mut body = Vec::new();
    let _ = timeout(STEP, tls.read_to_end(&mut body))
        .await
        .expect("response timed out");
    String::from_utf8_lossy(&body).into_owned()
}

async fn metric(addr: std::net::SocketAddr, config: Arc<rustls::ClientConfig>, name: &str) -> u64 {
    let text = https_get(addr, config, "/metrics").await;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} missing from /metrics:\n{text}"))
}

fn guest_wasm(name: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/wasm")
        .join(format!("{name}.wasm"));
    assert!(
        path.exists(),
        "{} is missing: run scripts/build-guests.sh first",
        path.display()
    );
    path
}

const TLS13: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS13];
const TLS12: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS12];

/// Native echo, relay and a guest route over wss://, TLS 1.3 and 1.2:
/// exact bytes back for small, pipelined and large (streamed, several TLS
/// records) messages; ALPN settles on http/1.1 for a client that offers
/// only that (one offering h2 gets HTTP/2: host/tests/h2.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wss_serves_echo_relay_and_a_guest_route_over_tls_1_3_and_1_2() {
    let dir = scratch("routes");
    let cert = write_cert(&dir);
    let routes = format!(
        "[[route]]\npath = \"/echo\"\nnative = \"echo\"\n\n\
         [[route]]\npath = \"/relay\"\nnative = \"relay\"\n\n\
         [[route]]\npath = \"/guest\"\nguest = \"{}\"\n",
        guest_wasm("echo").display()
    );
    let weir = WeirProcess::start(
        &format!("workers = 2\n{}", tls_key(&dir)),
        &routes,
        "warn",
        Stdio::inherit(),
    )
    .await;
    for versions in [TLS13, TLS12] {
        let config = client_config(std::slice::from_ref(&cert), versions, &[b"http/1.1"]);
        let mut echo = wss(weir.addr, "/echo", config.clone()).await;
        {
            let (_, session) = echo.get_ref().get_ref();
            assert_eq!(session.protocol_version(), Some(versions[0].version));
            assert_eq!(session.alpn_protocol(), Some(&b"http/1.1"[..]));
        }
        // 200 small messages sent before reading any reply: the gateway reads
        // them in few TLS reads and answers in batches.
        for i in 0..200 {
            echo.feed(Message::text(format!("message {i}")))
                .await
                .unwrap();
        }
        echo.flush().await.unwrap();
        for i in 0..200 {
            assert_eq!(next(&mut echo).await, Message::text(format!("message {i}")));
        }
        for len in [0usize, 125, 126, 65_535, 65_536, 300_000, 2 << 20] {
            let payload: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            echo.send(Message::binary(payload.clone())).await.unwrap();
            match next(&mut echo).await {
                Message::Binary(got) => {
                    assert!(got[..] == payload[..], "echo of {len} bytes differs")
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        // Large messages sent back to back: a TLS read takes up to 80 KiB
        // of ciphertext at once, so records straddle reads and a receive
        // buffer fills with ciphertext left over (kept for the next read).
        let sizes: Vec<usize> = (0..8).map(|i| 70_000 + i * 4_099).collect();
        for (i, &len) in sizes.iter().enumerate() {
            let payload: Vec<u8> = (0..len).map(|j| ((i + j) * 7 % 253) as u8).collect();
            echo.feed(Message::binary(payload)).await.unwrap();
        }
        echo.flush().await.unwrap();
        for (i, &len) in sizes.iter().enumerate() {
            let payload: Vec<u8> = (0..len).map(|j| ((i + j) * 7 % 253) as u8).collect();
            match next(&mut echo).await {
                Message::Binary(got) => {
                    assert!(got[..] == payload[..], "pipelined echo {i} differs")
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        echo.close(None).await.unwrap();

        // Relay: the partner's frames are queued to a TLS connection (no
        // direct writes into a TLS session).
        let mut a = wss(weir.addr, "/relay", config.clone()).await;
        let mut b = wss(weir.addr, "/relay", config.clone()).await;
        a.send(Message::text("to b")).await.unwrap();
        assert_eq!(next(&mut b).await, Message::text("to b"));
        let big = vec![7u8; 200_000];
        b.send(Message::binary(big.clone())).await.unwrap();
        assert_eq!(next(&mut a).await, Message::binary(big));

        let mut guest = wss(weir.addr, "/guest", config.clone()).await;
        for i in 0..20 {
            guest
                .send(Message::text(format!("guest {i}")))
                .await
                .unwrap();
            assert_eq!(next(&mut guest).await, Message::text(format!("guest {i}")));
        }
        guest.close(None).await.unwrap();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Plaintext HTTP, garbage and a client that stalls in the middle of its
/// hello are each dropped, the stalled one at `handshake_timeout`, and
/// counted; a well-behaved client is served meanwhile, with 50 stalled
/// handshakes open on a one-worker gateway.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abusive_handshakes_are_dropped_within_handshake_timeout_and_block_nobody() {
    let dir = scratch("abuse");
    let cert = write_cert(&dir);
    let weir = WeirProcess::start(
        &format!("workers = 1\nhandshake_timeout = \"1s\"\n{}", tls_key(&dir)),
        "[[route]]\npath = \"/echo\"\nnative = \"echo\"\n",
        "warn",
        Stdio::inherit(),
    )
    .await;
    let config = client_config(std::slice::from_ref(&cert), TLS13, &[b"http/1.1"]);

    /// What the gateway sends before it closes (an alert at most), bounded.
    async fn answer_to(addr: std::net::SocketAddr, bytes: &[u8]) -> (Vec<u8>, Duration) {
        let started = Instant::now();
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        tcp.write_all(bytes).await.unwrap();
        let mut got = Vec::new();
        let _ = timeout(STEP, tcp.read_to_end(&mut got))
            .await
            .expect("connection left open");
        (got, started.elapsed())
    }
    let (plain, _) = answer_to(
        weir.addr,
        b"GET /echo HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\n\r\n",
    )
    .await;
    assert!(
        !String::from_utf8_lossy(&plain).contains("HTTP/1.1"),
        "plaintext got an HTTP answer: {plain:?}"
    );
    assert!(
        plain.len() < 64,
        "plaintext got more than an alert: {plain:?}"
    );
    let garbage: Vec<u8> = (0..4096u32).map(|i| (i * 7919 % 256) as u8).collect();
    let (answer, _) = answer_to(weir.addr, &garbage).await;
    assert!(
        answer.len() < 64,
        "garbage got more than an alert: {answer:?}"
    );

    // A record header announcing a 512-byte hello, then nothing.
    let mut stalled = Vec::new();
    for _ in 0..50 {
        let mut tcp = TcpStream::connect(weir.addr).await.unwrap();
        tcp.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
            .await
            .unwrap();
        stalled.push(tcp);
    }
    let started = Instant::now();
    let mut ws = wss(weir.addr, "/echo", config.clone()).await;
    ws.send(Message::text("served while others stall"))
        .await
        .unwrap();
    assert_eq!(
        next(&mut ws).await,
        Message::text("served while others stall")
    );
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "a stalled handshake held up a good client"
    );
    for mut tcp in stalled {
        let mut got = Vec::new();
        let read = timeout(Duration::from_secs(5), tcp.read_to_end(&mut got)).await;
        assert!(
            read.is_ok(),
            "a stalled handshake outlived handshake_timeout"
        );
    }
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(800),
        "stalled handshakes dropped too early: {elapsed:?}"
    );
    // The open connection outlives the handshake timeout.
    ws.send(Message::text("still here")).await.unwrap();
    assert_eq!(next(&mut ws).await, Message::text("still here"));
    // 52, and the harness's own probes for the port (a connect and close).
    let failures = metric(weir.addr, config, "weir_tls_handshake_failures_total").await;
    assert!(
        (52..=60).contains(&failures),
        "{failures} handshake failures counted"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// SIGHUP reads the certificate files again: new handshakes get the new
/// certificate, an open connection goes on with its session, and invalid
/// files keep the old certificate (and the log says why).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_certificate_without_dropping_connections() {
    let dir = scratch("reload");
    let first = write_cert(&dir);
    let log = dir.join("weir.log");
    let weir = WeirProcess::start(
        &format!("workers = 2\n{}", tls_key(&dir)),
        "[[route]]\npath = \"/echo\"\nnative = \"echo\"\n",
        "info",
        Stdio::from(std::fs::File::create(&log).unwrap()),
    )
    .await;
    let sighup = || {
        // SAFETY: kill(2) on the child this test spawned; no memory involved.
        assert_eq!(
            unsafe { libc::kill(weir.child.id() as i32, libc::SIGHUP) },
            0
        );
    };
    let config = client_config(std::slice::from_ref(&first), TLS13, &[b"http/1.1"]);
    let mut open = wss(weir.addr, "/echo", config).await;
    assert!(presented(&open) == first);

    let second = write_cert(&dir);
    sighup();
    let both = client_config(&[first.clone(), second.clone()], TLS13, &[b"http/1.1"]);
    let deadline = Instant::now() + STEP;
    loop {
        let ws = wss(weir.addr, "/echo", both.clone()).await;
        if presented(&ws) == second {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the new certificate was not served"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    open.send(Message::text("after the reload")).await.unwrap();
    assert_eq!(next(&mut open).await, Message::text("after the reload"));

    // A broken certificate file: the second certificate serves on.
    std::fs::write(
        dir.join("cert.pem"),
        "-----BEGIN CERTIFICATE-----\nnot base64\n",
    )
    .unwrap();
    sighup();
    let deadline = Instant::now() + STEP;
    while !std::fs::read_to_string(&log)
        .unwrap()
        .contains("TLS certificate not reloaded")
    {
        assert!(
            Instant::now() < deadline,
            "no log line for the refused certificate"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let ws = wss(weir.addr, "/echo", both).await;
    assert!(
        presented(&ws) == second,
        "a broken certificate replaced the served one"
    );
    open.send(Message::text("after the refusal")).await.unwrap();
    assert_eq!(next(&mut open).await, Message::text("after the refusal"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `weir check` (and `weir serve`) name a missing file, a file without a
/// certificate, and a key that belongs to another certificate, with the
/// routes file's line, and exit 1. Paths are relative to the routes file.
#[test]
fn check_names_missing_files_bad_pem_and_mismatched_keys() {
    let dir = scratch("check");
    write_cert(&dir);
    std::fs::create_dir_all(dir.join("other")).unwrap();
    write_cert(&dir.join("other"));
    let run = |command: &str, cert: &str, key: &str| {
        let file = dir.join("routes.toml");
        std::fs::write(
            &file,
            format!(
                "[server]\nlisten = \"127.0.0.1:0\"\ntls = {{ cert = \"{cert}\", key = \"{key}\" }}\n\n\
                 [[route]]\npath = \"/echo\"\nnative = \"echo\"\n"
            ),
        )
        .unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_weir"))
            .arg(command)
            .arg(&file)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, _) = run("check", "cert.pem", "key.pem");
    assert_eq!(code, Some(0));
    let (code, err) = run("check", "missing.pem", "key.pem");
    assert_eq!(code, Some(1));
    assert!(
        err.contains("line 3")
            && err.contains("cannot read the TLS certificate")
            && err.contains("missing.pem"),
        "{err}"
    );
    std::fs::write(dir.join("empty.pem"), "no certificate here\n").unwrap();
    let (code, err) = run("check", "empty.pem", "key.pem");
    assert_eq!(code, Some(1));
    assert!(
        err.contains("holds no certificate") && err.contains("empty.pem"),
        "{err}"
    );
    let (code, err) = run("check", "cert.pem", "cert.pem");
    assert_eq!(code, Some(1));
    assert!(err.contains("not a PEM private key"), "{err}");
    for command in ["check", "serve"] {
        let (code, err) = run(command, "cert.pem", "other/key.pem");
        assert_eq!(code, Some(1), "{command}");
        assert!(
            err.contains("does not belong to the certificate"),
            "{command}: {err}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
