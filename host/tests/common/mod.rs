//! Test harness: a real gateway on a loopback port, and a raw client for the
//! byte-level cases that a well-behaved client library refuses to produce.
#![allow(dead_code)]

pub mod node;
pub mod realtime;
pub mod redis;

use futures_util::{SinkExt, StreamExt};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;
use weir::server::Server;
use weir_config::Config;

/// Every network step of a test is bounded by this.
pub const STEP: Duration = Duration::from_secs(20);

pub struct Gateway {
    pub addr: SocketAddr,
    /// The server API's address, when the config has `[api]`.
    pub api: Option<SocketAddr>,
    stop: tokio::sync::watch::Sender<bool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Gateway {
    pub fn start(mut config: Config) -> Gateway {
        if let Some(io) = test_io() {
            config.server.io = io;
        }
        Gateway::start_exact(config)
    }

    /// [`start`](Self::start) on the config's own `[server] io`, whatever
    /// `WEIR_TEST_IO` says.
    pub fn start_exact(mut config: Config) -> Gateway {
        config.server.listen = "127.0.0.1:0".parse().unwrap();
        let server = Server::bind(config).expect("bind");
        let addr = server.local_addr();
        let api = server.api_addr();
        let (stop, rx) = tokio::sync::watch::channel(false);
        let thread = std::thread::spawn(move || server.run(rx).expect("serve"));
        Gateway {
            addr,
            api,
            stop,
            thread: Some(thread),
        }
    }

    pub fn default_routes() -> Gateway {
        let mut config = Config::builtin_default();
        config.server.workers = 2;
        Gateway::start(config)
    }

    pub fn url(&self, path: &str) -> String {
        format!("ws://{}{}", self.addr, path)
    }

    /// Stops the gateway and waits for its threads.
    pub fn stop(mut self) {
        self.stop.send(true).unwrap();
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// A tokio-tungstenite client: the independent peer of most tests.
pub type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Connects with message limits above the gateway's (up to 64 MiB).
pub async fn client(url: &str) -> Ws {
    let config = WebSocketConfig::default()
        .max_message_size(Some(64 << 20))
        .max_frame_size(Some(64 << 20));
    let (ws, resp) = timeout(
        STEP,
        tokio_tungstenite::connect_async_with_config(url, Some(config), false),
    )
    .await
    .expect("connect timed out")
    .expect("handshake");
    assert_eq!(resp.status(), 101);
    ws
}

/// The next message, bounded by `STEP`.
pub async fn next(ws: &mut Ws) -> Message {
    timeout(STEP, ws.next())
        .await
        .expect("reply timed out")
        .expect("stream ended")
        .expect("protocol error")
}

/// A raw client: handshake by hand, then masked frames and reply parsing.
pub struct Raw {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

pub const KEY: [u8; 4] = [0x11, 0x22, 0x33, 0x44];

/// A masked client frame with explicit header bits.
pub fn frame(first_byte: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![first_byte];
    let len = payload.len();
    if len < 126 {
        out.push(0x80 | len as u8);
    } else if len <= 0xFFFF {
        out.push(0x80 | 126);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        out.push(0x80 | 127);
        out.extend_from_slice(&(len as u64).to_be_bytes());
    }
    out.extend_from_slice(&KEY);
    out.extend(payload.iter().enumerate().map(|(i, b)| b ^ KEY[i % 4]));
    out
}

impl Raw {
    /// A raw client on a stream whose upgrade the caller completed.
    pub fn from_stream(stream: TcpStream) -> Raw {
        Raw {
            stream,
            buf: Vec::new(),
        }
    }

    /// Sends a raw HTTP request and returns the status line's code.
    pub async fn request(addr: SocketAddr, head: &str) -> (Raw, u16) {
        let mut stream = timeout(STEP, TcpStream::connect(addr))
            .await
            .unwrap()
            .unwrap();
        stream.write_all(head.as_bytes()).await.unwrap();
        let mut raw = Raw {
            stream,
            buf: Vec::new(),
        };
        let status = raw.read_head().await;
        (raw, status)
    }

    /// Upgrades `stream` (already connected) to a WebSocket on `path`.
    pub async fn upgrade(mut stream: TcpStream, path: &str) -> Raw {
        let head = format!(
            "GET {path} HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        let mut raw = Raw {
            stream,
            buf: Vec::new(),
        };
        assert_eq!(raw.read_head().await, 101);
        raw
    }

    pub async fn connect(addr: SocketAddr, path: &str) -> Raw {
        let head = format!(
            "GET {path} HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        );
        let (raw, status) = Raw::request(addr, &head).await;
        assert_eq!(status, 101);
        raw
    }

    async fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 65536];
        let n = timeout(STEP, self.stream.read(&mut chunk))
            .await
            .expect("read timed out")
            .unwrap_or(0);
        self.buf.extend_from_slice(&chunk[..n]);
        n > 0
    }

    async fn read_head(&mut self) -> u16 {
        loop {
            if let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&self.buf[..end]).to_string();
                self.buf.drain(..end + 4);
                return head[9..12].parse().unwrap();
            }
            assert!(
                self.fill().await,
                "connection closed before the response head"
            );
        }
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
    }

    /// Next server frame as (first byte, payload); None on EOF.
    pub async fn next_frame(&mut self) -> Option<(u8, Vec<u8>)> {
        loop {
            if self.buf.len() >= 2 {
                assert_eq!(self.buf[1] & 0x80, 0, "server frames are never masked");
                let (len, at) = match self.buf[1] & 0x7F {
                    126 if self.buf.len() >= 4 => {
                        (u16::from_be_bytes([self.buf[2], self.buf[3]]) as usize, 4)
                    }
                    127 if self.buf.len() >= 10 => (
                        u64::from_be_bytes(self.buf[2..10].try_into().unwrap()) as usize,
                        10,
                    ),
                    126 | 127 => (usize::MAX, 0),
                    n => (n as usize, 2),
                };
                if len != usize::MAX && self.buf.len() >= at + len {
                    let first = self.buf[0];
                    let payload = self.buf[at..at + len].to_vec();
                    self.buf.drain(..at + len);
                    return Some((first, payload));
                }
            }
            if !self.fill().await {
                return None;
            }
        }
    }

    /// Reads frames until a close arrives; returns its code.
    pub async fn close_code(&mut self) -> Option<u16> {
        while let Some((first, payload)) = self.next_frame().await {
            if first & 0x0F == 0x8 {
                return (payload.len() >= 2).then(|| u16::from_be_bytes([payload[0], payload[1]]));
            }
        }
        None
    }
}

/// The body of `GET /metrics`.
pub async fn metrics(addr: SocketAddr) -> String {
    let mut stream = timeout(STEP, TcpStream::connect(addr))
        .await
        .unwrap()
        .unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut all = Vec::new();
    timeout(STEP, stream.read_to_end(&mut all))
        .await
        .expect("metrics timed out")
        .unwrap();
    let text = String::from_utf8(all).unwrap();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    text.split_once("\r\n\r\n").unwrap().1.to_string()
}

/// One figure of `/metrics`.
pub async fn metric(addr: SocketAddr, name: &str) -> u64 {
    let body = metrics(addr).await;
    weir::metrics::read(&body, name).unwrap_or_else(|| panic!("no {name} in\n{body}"))
}

/// Waits (bounded by `STEP`) until `/metrics` shows `name` at `want`.
pub async fn await_metric(addr: SocketAddr, name: &str, want: u64) {
    let deadline = tokio::time::Instant::now() + STEP;
    loop {
        let got = metric(addr, name).await;
        if got == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{name} stayed at {got}, expected {want}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A second handle on the same socket (a dup'd descriptor), so one task can
/// write while the test reads through `Raw`.
pub fn second_handle(stream: &TcpStream) -> TcpStream {
    use std::os::fd::AsFd;
    let fd = stream.as_fd().try_clone_to_owned().unwrap();
    let std = std::net::TcpStream::from(fd);
    std.set_nonblocking(true).unwrap();
    TcpStream::from_std(std).unwrap()
}

/// The loop the tests' gateways run connections on: `WEIR_TEST_IO=epoll`
/// (or `uring`, `auto`) runs every gateway a test starts on the workers'
/// planes (CI runs the connection-level tests each way); unset, each
/// config's own.
pub fn test_io() -> Option<weir_config::Io> {
    match std::env::var("WEIR_TEST_IO").ok()?.as_str() {
        "epoll" => Some(weir_config::Io::Epoll),
        "uring" => Some(weir_config::Io::Uring),
        "auto" => Some(weir_config::Io::Auto),
        "tasks" => Some(weir_config::Io::Tasks),
        other => panic!("WEIR_TEST_IO={other}: write epoll, uring, auto or tasks"),
    }
}

/// A real `weir serve` child process on a free loopback port, with the
/// routes file written by the test; killed when dropped if still running.
pub struct WeirProcess {
    pub child: Child,
    pub addr: SocketAddr,
}

impl WeirProcess {
    /// Serves `[server]` with `server_keys` (after `listen`), then `routes`
    /// (`[[route]]` tables), with `RUST_LOG=rust_log` and stderr to `stderr`;
    /// returns once it accepts connections.
    pub async fn start(
        server_keys: &str,
        routes: &str,
        rust_log: &str,
        stderr: Stdio,
    ) -> WeirProcess {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = std::env::temp_dir().join(format!("weir-process-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("routes.toml");
        let io = match test_io() {
            _ if server_keys.contains("io =") => "",
            Some(weir_config::Io::Epoll) => "io = \"epoll\"\n",
            Some(weir_config::Io::Uring) => "io = \"uring\"\n",
            Some(weir_config::Io::Auto) => "io = \"auto\"\n",
            _ => "",
        };
        std::fs::write(
            &file,
            format!("[server]\nlisten = \"127.0.0.1:{port}\"\n{io}{server_keys}\n\n{routes}\n"),
        )
        .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_weir"))
            .arg("serve")
            .arg(&file)
            .env("RUST_LOG", rust_log)
            .env("WEIR_CACHE_DIR", dir.join("cache"))
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let mut weir = WeirProcess {
            child,
            addr: format!("127.0.0.1:{port}").parse().unwrap(),
        };
        let deadline = tokio::time::Instant::now() + STEP;
        while TcpStream::connect(weir.addr).await.is_err() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "weir serve did not listen"
            );
            assert!(
                weir.child.try_wait().unwrap().is_none(),
                "weir serve exited"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        weir
    }

    pub fn url(&self, path: &str) -> String {
        format!("ws://{}{}", self.addr, path)
    }
}

impl Drop for WeirProcess {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A `weir serve` process with the io-probe fixture at `/io`: `keys` are
/// added to its route table, `tail` (more tables) after it.
pub async fn io_probe(server_keys: &str, keys: &str, tail: &str) -> WeirProcess {
    let wasm =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/wasm/io-probe.wasm");
    assert!(wasm.exists(), "run scripts/build-guests.sh first");
    let routes = format!(
        "[[route]]\npath = \"/io\"\nguest = \"{}\"\n{keys}\n\n{tail}",
        wasm.display()
    );
    WeirProcess::start(server_keys, &routes, "warn", Stdio::null()).await
}

/// Sends one text message, bounded by [`STEP`].
pub async fn send_text(ws: &mut Ws, text: &str) {
    timeout(STEP, ws.send(Message::text(text)))
        .await
        .unwrap()
        .unwrap();
}

/// One server API call (`POST /api/{method}` with `key`) to `gw`'s `[api]`
/// listener, which must answer 200: its JSON.
pub async fn server_api(gw: &Gateway, key: &str, method: &str, body: &str) -> serde_json::Value {
    let addr = gw.api.expect("[api]");
    let request = format!(
        "POST /api/{method} HTTP/1.1\r\nhost: {addr}\r\nx-api-key: {key}\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let answer = timeout(STEP, async {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.unwrap();
        String::from_utf8(answer).unwrap()
    })
    .await
    .unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{method}: {answer}");
    serde_json::from_str(body).unwrap()
}
