//! `/readyz`, the readiness probe (deploy/kubernetes/deployment.yaml): 200 only
//! once every guest route's component is compiled, 503 while draining
//! (SIGTERM); a route drained from the admin API leaves the gateway ready.
//! Real `weir serve` processes over loopback.

mod admin_support;
mod common;
mod guest_support;

use common::*;
use guest_support::wasm;
use http::Method;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{timeout, Instant};

/// One `GET path` with `host` on a new connection: the status and the whole
/// response (head and body); None when nothing listens yet.
async fn get(addr: SocketAddr, path: &str, host: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(addr).await.ok()?;
    let head = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    s.write_all(head.as_bytes()).await.unwrap();
    let mut all = Vec::new();
    timeout(STEP, s.read_to_end(&mut all))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&all).to_string();
    Some((text[9..12].parse().unwrap(), text))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn sigterm(child: &std::process::Child) {
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: kill(2) on the child this test spawned; no memory involved.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
}

/// Kills the child when the test ends, whatever happened.
struct Reap(std::process::Child);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Polled from the moment the process starts, with the compile cache off
/// (so both guests really compile, the JavaScript one for a second or
/// more): `/readyz` is
/// never answered before the guests are compiled, and its first answer is
/// 200 with both guest routes upgrading and echoing right then. It answers
/// any Host name (the kubelet probes by address), where a route answers
/// only the loopback names of a loopback listener.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_is_200_once_every_guest_is_compiled() {
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("weir-readyz-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let routes = format!(
        "[server]\nlisten = \"127.0.0.1:{port}\"\nworkers = 2\n\n\
         [[route]]\npath = \"/plain\"\nguest = \"{}\"\n\n\
         [[route]]\npath = \"/js/plain\"\nguest = \"{}\"\n",
        wasm("echo").display(),
        wasm("js-echo").display()
    );
    let file = dir.join("routes.toml");
    std::fs::write(&file, routes).unwrap();
    let started = Instant::now();
    let mut weir = Reap(
        Command::new(env!("CARGO_BIN_EXE_weir"))
            .arg("serve")
            .arg(&file)
            .env("RUST_LOG", "warn")
            .env("WEIR_CACHE_DIR", "")
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let (status, text) = loop {
        if let Some(answer) = get(addr, "/readyz", "probe.example").await {
            break answer;
        }
        assert!(weir.0.try_wait().unwrap().is_none(), "weir serve exited");
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "weir serve did not listen"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(status, 200, "the first /readyz answer: {text}");
    assert!(text.ends_with("\r\n\r\nready\n"), "{text}");
    for path in ["/plain", "/js/plain"] {
        let mut ws = Raw::connect(addr, path).await;
        ws.send(&frame(0x81, b"ready?")).await;
        assert_eq!(
            ws.next_frame().await,
            Some((0x81, b"ready?".to_vec())),
            "{path} once /readyz said 200"
        );
    }
    // Routes answer loopback names only; the probe answers any.
    let (status, text) = get(addr, "/nothing", "probe.example").await.unwrap();
    assert_eq!(status, 421, "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// After SIGTERM, while a client holds the drain open (it has not answered
/// its 1012 yet), `/readyz` and `/healthz` answer 503 with a reason and
/// Retry-After; the process still exits 0 once the client closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_is_503_while_draining() {
    let mut weir = WeirProcess::start(
        "workers = 2\ndrain_timeout = \"20s\"",
        "[[route]]\npath = \"/echo\"\nnative = \"echo\"\n",
        "warn",
        Stdio::inherit(),
    )
    .await;
    let (status, text) = get(weir.addr, "/readyz", "localhost").await.unwrap();
    assert_eq!(status, 200, "{text}");
    let mut held = Raw::connect(weir.addr, "/echo").await;

    sigterm(&weir.child);
    assert_eq!(held.close_code().await, Some(1012));
    for path in ["/readyz", "/healthz"] {
        let (status, text) = get(weir.addr, path, "localhost").await.unwrap();
        assert_eq!(status, 503, "{path}: {text}");
        assert!(
            text.ends_with("draining: not taking new connections\n"),
            "{path}: {text}"
        );
        assert!(
            text.to_ascii_lowercase().contains("retry-after:"),
            "{path}: {text}"
        );
    }
    held.send(&frame(0x88, &1012u16.to_be_bytes())).await;
    let deadline = Instant::now() + STEP;
    let status = loop {
        if let Some(status) = weir.child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "weir serve did not exit");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(status.success(), "exit status {status}");
}

/// A route drained from the admin API refuses its own upgrades (503) but
/// leaves the gateway ready: the other routes keep their clients.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drained_route_leaves_the_gateway_ready() {
    let gateway = admin_support::Gateway::start(
        "readyz-route-drain",
        &["echo"],
        "[[route]]\npath = \"/plain\"\nguest = \"echo.wasm\"\n\n\
         [[route]]\npath = \"/echo\"\nnative = \"echo\"\n",
    )
    .await;
    let path = weir::client::route_endpoint("/plain", "drain");
    let (status, body) = gateway.admin(Method::POST, &path, Vec::new()).await;
    assert_eq!(status, 200, "{body}");
    let (_, status) = Raw::request(
        gateway.addr,
        "GET /plain HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
    )
    .await;
    assert_eq!(status, 503, "the drained route's upgrade");
    let (status, text) = get(gateway.addr, "/readyz", "localhost").await.unwrap();
    assert_eq!(status, 200, "{text}");
    let mut ws = Raw::connect(gateway.addr, "/echo").await;
    ws.send(&frame(0x82, b"still here")).await;
    assert_eq!(ws.next_frame().await, Some((0x82, b"still here".to_vec())));
}
