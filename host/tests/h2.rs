//! WebSockets over HTTP/2 (RFC 8441) against a real `weir serve`, with an
//! independent HTTP/2 client (the `h2` crate) and frames built and parsed
//! here: many WebSocket streams on one connection (h2c with prior
//! knowledge, and TLS with ALPN `h2`), a reset stream among them, every
//! route kind, refusals as stream errors, and per-stream backpressure.

mod common;

use bytes::Bytes;
use common::{await_metric, WeirProcess, STEP};
use h2::client::SendRequest;
use http::{Method, Request};
use rustls::pki_types::ServerName;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::time::{timeout, Instant};

const TEXT: u8 = 0x1;
const BINARY: u8 = 0x2;
const CLOSE: u8 = 0x8;

/// An HTTP/2 client connection; its task runs on the test's runtime. The
/// client's connection window is large, so replies left unread on one
/// stream never hold back another's.
async fn h2_client<T>(io: T) -> SendRequest<Bytes>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (send, conn) = h2::client::Builder::new()
        .initial_window_size(256 << 10)
        .initial_connection_window_size(64 << 20)
        .handshake(io)
        .await
        .expect("HTTP/2 handshake");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut send = timeout(STEP, send.ready()).await.unwrap().unwrap();
    // The server's SETTINGS (with ENABLE_CONNECT_PROTOCOL) arrive after the
    // handshake; an extended CONNECT must wait for them.
    let deadline = Instant::now() + STEP;
    while !send.is_extended_connect_protocol_enabled() {
        assert!(
            Instant::now() < deadline,
            "the server never enabled extended CONNECT"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
        send = send.ready().await.unwrap();
    }
    send
}

/// One WebSocket on an HTTP/2 stream, as a client sees it.
struct Ws {
    send: h2::SendStream<Bytes>,
    recv: h2::RecvStream,
    /// Received bytes not yet parsed into frames.
    buf: Vec<u8>,
}

/// The extended CONNECT for `path`: its status, and the stream when 200.
async fn connect(
    client: &SendRequest<Bytes>,
    scheme: &str,
    path: &str,
    method: Method,
) -> (u16, Option<Ws>) {
    connect_with(client, scheme, path, method, None).await
}

/// [`connect`] offering `extensions` (Sec-WebSocket-Extensions).
async fn connect_with(
    client: &SendRequest<Bytes>,
    scheme: &str,
    path: &str,
    method: Method,
    extensions: Option<&str>,
) -> (u16, Option<Ws>) {
    let mut request = Request::builder()
        .method(method.clone())
        .uri(format!("{scheme}://localhost{path}"))
        .header("sec-websocket-version", "13");
    if let Some(ext) = extensions {
        request = request.header("sec-websocket-extensions", ext);
    }
    if method == Method::CONNECT {
        request = request.extension(h2::ext::Protocol::from_static("websocket"));
    }
    let mut client = client.clone().ready().await.unwrap();
    let (response, send) = client
        .send_request(request.body(()).unwrap(), false)
        .unwrap();
    let response = timeout(STEP, response)
        .await
        .expect("no response")
        .expect("response");
    let status = response.status().as_u16();
    if let Some(ext) = extensions {
        let answered = response.headers().get("sec-websocket-extensions");
        assert!(
            answered.is_some_and(|v| v.to_str().unwrap().starts_with("permessage-deflate")),
            "{path}: offered {ext}, answered {answered:?}"
        );
    }
    let ws = (status == 200).then(|| Ws {
        send,
        recv: response.into_body(),
        buf: Vec::new(),
    });
    (status, ws)
}

async fn open(client: &SendRequest<Bytes>, scheme: &str, path: &str) -> Ws {
    let (status, ws) = connect(client, scheme, path, Method::CONNECT).await;
    assert_eq!(status, 200, "CONNECT {path}");
    ws.unwrap()
}

impl Ws {
    /// Sends one masked frame (FIN set).
    fn send(&mut self, opcode: u8, payload: &[u8]) {
        self.send_frame(0x80 | opcode, payload);
    }

    /// Sends one masked frame whose first byte is `first`.
    fn send_frame(&mut self, first: u8, payload: &[u8]) {
        let mask = [0x37, 0xfa, 0x21, 0x3d];
        let mut frame = vec![first];
        match payload.len() {
            n if n < 126 => frame.push(0x80 | n as u8),
            n if n < 1 << 16 => {
                frame.push(0x80 | 126);
                frame.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                frame.push(0x80 | 127);
                frame.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        frame.extend_from_slice(&mask);
        frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        self.send.send_data(Bytes::from(frame), false).unwrap();
    }

    /// The next whole frame from the server (unmasked): opcode and payload.
    async fn next(&mut self) -> (u8, Vec<u8>) {
        let (first, payload) = self.next_frame().await;
        (first & 0x0f, payload)
    }

    /// The next whole frame from the server: its first byte and payload.
    async fn next_frame(&mut self) -> (u8, Vec<u8>) {
        loop {
            if let Some((first, payload, used)) = parse(&self.buf) {
                self.buf.drain(..used);
                return (first, payload);
            }
            let chunk = timeout(STEP, self.recv.data())
                .await
                .expect("reply timed out")
                .expect("stream ended")
                .expect("stream error");
            self.recv
                .flow_control()
                .release_capacity(chunk.len())
                .unwrap();
            self.buf.extend_from_slice(&chunk);
        }
    }

    async fn echoes(&mut self, opcode: u8, payload: &[u8]) {
        self.send(opcode, payload);
        let (got_op, got) = self.next().await;
        assert_eq!(got_op, opcode);
        assert!(got == payload, "echo of {} bytes differs", payload.len());
    }
}

/// A server frame at the start of `buf`: (first byte, payload, bytes used).
fn parse(buf: &[u8]) -> Option<(u8, Vec<u8>, usize)> {
    if buf.len() < 2 {
        return None;
    }
    assert_eq!(buf[0] & 0x80, 0x80, "fragmented reply");
    assert_eq!(buf[1] & 0x80, 0, "masked server frame");
    let (len, head) = match buf[1] & 0x7f {
        126 if buf.len() >= 4 => (u16::from_be_bytes([buf[2], buf[3]]) as usize, 4),
        127 if buf.len() >= 10 => (
            u64::from_be_bytes(buf[2..10].try_into().unwrap()) as usize,
            10,
        ),
        126 | 127 => return None,
        n => (n as usize, 2),
    };
    (buf.len() >= head + len).then(|| (buf[0], buf[head..head + len].to_vec(), head + len))
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

fn routes() -> String {
    format!(
        "[[route]]\npath = \"/echo\"\nnative = \"echo\"\n\n\
         [[route]]\npath = \"/relay\"\nnative = \"relay\"\n\n\
         [[route]]\npath = \"/guest\"\nguest = \"{}\"\n",
        guest_wasm("echo").display()
    )
}

fn payload(seed: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| ((i + seed) * 131 % 251) as u8).collect()
}

/// 100 WebSockets on one h2c connection (90 native echo, 10 guest): exact
/// echo on each, interleaved; then one stream is reset and the other 99
/// go on, and the gateway counts it gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_websockets_share_one_h2c_connection_and_a_reset_disturbs_none() {
    let weir = WeirProcess::start("workers = 1", &routes(), "warn", Stdio::inherit()).await;
    let client = h2_client(TcpStream::connect(weir.addr).await.unwrap()).await;
    let mut streams = Vec::new();
    for i in 0..100 {
        let path = if i % 10 == 9 { "/guest" } else { "/echo" };
        streams.push(open(&client, "http", path).await);
    }
    await_metric(weir.addr, "weir_websocket_connections", 100).await;
    // Every stream sends before any reads: the replies interleave on the
    // connection.
    for (i, ws) in streams.iter_mut().enumerate() {
        ws.send(TEXT, format!("stream {i}").as_bytes());
        ws.send(BINARY, &payload(i, i * 997 % 70_000));
    }
    for (i, ws) in streams.iter_mut().enumerate() {
        assert_eq!(ws.next().await, (TEXT, format!("stream {i}").into_bytes()));
        assert_eq!(ws.next().await, (BINARY, payload(i, i * 997 % 70_000)));
    }
    let mut reset = streams.remove(0);
    reset.send.send_reset(h2::Reason::CANCEL);
    await_metric(weir.addr, "weir_websocket_connections", 99).await;
    for (i, ws) in streams.iter_mut().enumerate() {
        ws.echoes(TEXT, format!("after the reset {i}").as_bytes())
            .await;
    }
    // A close handshake on a stream: the close comes back, then the end.
    let ws = &mut streams[0];
    ws.send(CLOSE, &1000u16.to_be_bytes());
    assert_eq!(ws.next().await, (CLOSE, 1000u16.to_be_bytes().to_vec()));
    await_metric(weir.addr, "weir_websocket_connections", 98).await;
}

/// Over TLS, ALPN `h2`: native echo (large messages too), relay between
/// two streams of the same connection, a guest route; refusals are stream
/// errors that leave the connection serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_over_tls_serves_every_route_kind_and_refuses_per_stream() {
    let dir = std::env::temp_dir().join(format!("weir-h2-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let made = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    std::fs::write(dir.join("cert.pem"), made.cert.pem()).unwrap();
    std::fs::write(dir.join("key.pem"), made.signing_key.serialize_pem()).unwrap();
    let tls_key = format!(
        "workers = 2\ntls = {{ cert = \"{}\", key = \"{}\" }}",
        dir.join("cert.pem").display(),
        dir.join("key.pem").display()
    );
    let weir = WeirProcess::start(&tls_key, &routes(), "warn", Stdio::inherit()).await;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(made.cert.der().clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let tcp = TcpStream::connect(weir.addr).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let client = h2_client(tls).await;

    let mut echo = open(&client, "https", "/echo").await;
    for len in [0, 125, 126, 65_535, 65_536, 300_000, 1 << 20] {
        echo.echoes(BINARY, &payload(len, len)).await;
    }
    let mut a = open(&client, "https", "/relay").await;
    let mut b = open(&client, "https", "/relay").await;
    a.send(TEXT, b"to b");
    assert_eq!(b.next().await, (TEXT, b"to b".to_vec()));
    b.send(BINARY, &payload(3, 200_000));
    assert_eq!(a.next().await, (BINARY, payload(3, 200_000)));
    let mut guest = open(&client, "https", "/guest").await;
    for i in 0..20 {
        guest.echoes(TEXT, format!("guest {i}").as_bytes()).await;
    }

    // Refusals answer the stream; the connection and its streams go on.
    assert_eq!(
        connect(&client, "https", "/nowhere", Method::CONNECT)
            .await
            .0,
        404
    );
    assert_eq!(connect(&client, "https", "/echo", Method::GET).await.0, 400);
    echo.echoes(TEXT, b"still serving").await;
    guest.echoes(TEXT, b"still serving").await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Flow control is per stream: a client that sends 4 MiB on one stream and
/// reads none of the replies stalls only that stream (the gateway stops
/// reading it once the client's window for replies is full); another
/// stream on the same connection is served meanwhile, and once the first
/// client reads, every byte comes back in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_whose_replies_are_not_read_holds_back_only_itself() {
    let weir = WeirProcess::start("workers = 1", &routes(), "warn", Stdio::inherit()).await;
    let client = h2_client(TcpStream::connect(weir.addr).await.unwrap()).await;
    let mut stuck = open(&client, "http", "/echo").await;
    let mut other = open(&client, "http", "/echo").await;
    const MESSAGES: usize = 64;
    for i in 0..MESSAGES {
        stuck.send(BINARY, &payload(i, 64 << 10));
    }
    // Well past both windows (256 KiB each way): the gateway holds the
    // stream's replies back and stops reading it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    for i in 0..50 {
        other
            .echoes(TEXT, format!("meanwhile {i}").as_bytes())
            .await;
    }
    for i in 0..MESSAGES {
        assert_eq!(
            stuck.next().await,
            (BINARY, payload(i, 64 << 10)),
            "message {i}"
        );
    }
}

/// Deflate bytes of one message without the sync tail (RFC 7692 §7.2.1),
/// with the client's context kept.
fn deflate(c: &mut flate2::Compress, msg: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(msg.len() + 64);
    c.compress_vec(msg, &mut out, flate2::FlushCompress::Sync)
        .unwrap();
    assert!(
        out.ends_with(&[0, 0, 0xFF, 0xFF]),
        "room for the whole message"
    );
    out.truncate(out.len() - 4);
    out
}

fn inflate(d: &mut flate2::Decompress, payload: &[u8]) -> Vec<u8> {
    let mut input = payload.to_vec();
    input.extend_from_slice(&[0, 0, 0xFF, 0xFF]);
    let mut out = Vec::with_capacity(1 << 20);
    d.decompress_vec(&input, &mut out, flate2::FlushDecompress::Sync)
        .unwrap();
    out
}

/// permessage-deflate on WebSockets over HTTP/2 (h2c): the extension is
/// negotiated per stream; native echo (compressed by its loop), relay
/// and a guest route (compressed by their producers, queued for the
/// stream) send RSV1 frames that inflate to exactly what was sent, with
/// context takeover across messages and, on the guest route, without.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permessage_deflate_on_h2_streams() {
    let routes = format!(
        "[[route]]\npath = \"/zecho\"\nnative = \"echo\"\ncompression = \"on\"\n\n\
         [[route]]\npath = \"/zrelay\"\nnative = \"relay\"\ncompression = \"on\"\n\n\
         [[route]]\npath = \"/zguest\"\nguest = \"{}\"\ncompression = \"on\"\n\
         compression_context = \"none\"\n",
        guest_wasm("echo").display()
    );
    let weir = WeirProcess::start("workers = 1", &routes, "warn", Stdio::inherit()).await;
    let client = h2_client(TcpStream::connect(weir.addr).await.unwrap()).await;
    let offer = Some("permessage-deflate");
    let open_z = |path: &'static str| {
        let client = client.clone();
        async move {
            connect_with(&client, "http", path, Method::CONNECT, offer)
                .await
                .1
                .expect("200")
        }
    };
    let json = |i: usize| {
        (0..40)
            .map(|n| {
                format!(
                    "{{\"seq\":{i},\"n\":{n},\"px\":{}}},",
                    (n * 7919 + i) % 1000
                )
            })
            .collect::<String>()
            .into_bytes()
    };
    let mut echo = open_z("/zecho").await;
    let (mut c, mut d) = (
        flate2::Compress::new(flate2::Compression::fast(), false),
        flate2::Decompress::new(false),
    );
    for i in 0..5 {
        let msg = json(i);
        echo.send_frame(0xC1, &deflate(&mut c, &msg));
        let (first, payload) = echo.next_frame().await;
        assert_eq!(first, 0xC1, "echo {i} compressed");
        assert_eq!(inflate(&mut d, &payload), msg, "echo {i}");
    }
    let mut a = open_z("/zrelay").await;
    let mut b = open(&client, "http", "/zrelay").await;
    let mut d = flate2::Decompress::new(false);
    for i in 0..5 {
        let msg = json(10 + i);
        b.send(TEXT, &msg);
        let (first, payload) = a.next_frame().await;
        assert_eq!(first, 0xC1, "relay {i} compressed");
        assert_eq!(inflate(&mut d, &payload), msg, "relay {i}");
    }
    let mut guest = open_z("/zguest").await;
    for i in 0..5 {
        let msg = json(20 + i);
        guest.send(TEXT, &msg);
        let (first, payload) = guest.next_frame().await;
        assert_eq!(first, 0xC1, "guest {i} compressed");
        // No context: each message inflates on its own.
        assert_eq!(
            inflate(&mut flate2::Decompress::new(false), &payload),
            msg,
            "guest {i}"
        );
    }
}
