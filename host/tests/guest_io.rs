//! weir:gateway 0.4.0 guest I/O against a real `weir serve` and a real HTTP
//! backend (hyper, in this process, on loopback): responses matched to tags
//! under concurrency, policy refusals, timeouts, a slow backend not
//! delaying other batches, timer precision, the key-value store across a
//! restart, deferred upgrades (accept, reject, timeout). The guest is the
//! `io-probe` fixture (examples/fixtures/io-probe), and `fetch-echo`
//! (examples/fixtures/fetch-echo, the guest of benches/guest-io.py); the
//! JavaScript SDK's I/O (await fetch, timers, kv, an awaited upgrade) is
//! its own io-probe, examples/js/fixtures/io-probe.js.

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use futures_util::SinkExt;
use http_body_util::Full;
use hyper::service::service_fn;
use tokio::net::TcpListener;
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::Message;

/// A backend on loopback: `/echo?i=K` answers `K` (after a few ms so
/// answers overtake each other), `/slow` answers after 3 s, `/big` 2 MiB,
/// `/auth?token=good` 200 (else 403), `/value` a fixed value, `/post` the
/// request's body and `x-kind` header.
struct Backend {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Backend {
    async fn start() -> Backend {
        Self::serve(None).await
    }

    /// The same backend behind TLS (tokio-rustls) with `cert`.
    async fn start_tls(
        cert: rustls::pki_types::CertificateDer<'static>,
        key: rustls::pki_types::PrivateKeyDer<'static>,
    ) -> Backend {
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .unwrap();
        Self::serve(Some(tokio_rustls::TlsAcceptor::from(Arc::new(config)))).await
    }

    async fn serve(tls: Option<tokio_rustls::TlsAcceptor>) -> Backend {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let value = Arc::new(Mutex::new(String::from("v1")));
        let shared = value.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let value = shared.clone();
                let tls = tls.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                        let value = value.clone();
                        async move { Ok::<_, Infallible>(answer(req, &value).await) }
                    });
                    let http = hyper::server::conn::http1::Builder::new();
                    let _ = match tls {
                        None => {
                            http.serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                                .await
                        }
                        Some(tls) => {
                            let Ok(stream) = tls.accept(stream).await else {
                                return;
                            };
                            http.serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                                .await
                        }
                    };
                });
            }
        });
        Backend { addr, task }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn answer(
    req: hyper::Request<hyper::body::Incoming>,
    value: &Mutex<String>,
) -> hyper::Response<Full<Bytes>> {
    let query = req.uri().query().unwrap_or("").to_string();
    let param = |name: &str| {
        query
            .split('&')
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .unwrap_or("")
            .to_string()
    };
    if req.uri().path() == "/post" {
        let kind = req.headers().get("x-kind").cloned();
        let body = http_body_util::BodyExt::collect(req.into_body())
            .await
            .unwrap()
            .to_bytes();
        let mut response = hyper::Response::new(Full::new(body));
        if let Some(kind) = kind {
            response.headers_mut().insert("x-kind", kind);
        }
        return response;
    }
    let (status, body) = match req.uri().path() {
        "/echo" => {
            let i = param("i");
            let delay = i.parse::<u64>().unwrap_or(0) % 7;
            tokio::time::sleep(Duration::from_millis(delay)).await;
            (200, Bytes::from(i))
        }
        "/slow" => {
            tokio::time::sleep(Duration::from_secs(3)).await;
            (200, Bytes::from("slow"))
        }
        "/big" => (200, Bytes::from(vec![b'x'; 2 << 20])),
        "/auth" if param("token") == "good" => (200, Bytes::from("ann")),
        "/auth" => (403, Bytes::from("no")),
        "/value" => (200, Bytes::from(value.lock().unwrap().clone())),
        _ => (404, Bytes::new()),
    };
    hyper::Response::builder()
        .status(status)
        .body(Full::new(body))
        .unwrap()
}

async fn text(ws: &mut Ws) -> String {
    match next(ws).await {
        Message::Text(t) => t.to_string(),
        other => panic!("expected text, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_are_matched_to_their_tags_under_concurrency() {
    let backend = Backend::start().await;
    let allow = format!(
        "allow_outbound = [\"http://{}/\"]\noutbound_max_concurrent = 256",
        backend.addr
    );
    let weir = io_probe("workers = 2", &allow, "").await;
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(client(&weir.url("/io")).await);
    }
    const EACH: usize = 50;
    for (c, ws) in clients.iter_mut().enumerate() {
        for i in 0..EACH {
            let k = c * 1000 + i;
            send_text(
                ws,
                &format!("get {k} {}", backend.url(&format!("/echo?i={k}"))),
            )
            .await;
        }
    }
    for (c, ws) in clients.iter_mut().enumerate() {
        let mut seen = Vec::new();
        for _ in 0..EACH {
            let answer = text(ws).await;
            let parts: Vec<&str> = answer.split(' ').collect();
            assert_eq!(parts.len(), 3, "{answer}");
            assert_eq!(parts[1], "200", "{answer}");
            assert_eq!(
                parts[0], parts[2],
                "answer matched to another tag: {answer}"
            );
            seen.push(parts[0].parse::<usize>().unwrap());
        }
        seen.sort_unstable();
        let want: Vec<usize> = (0..EACH).map(|i| c * 1000 + i).collect();
        assert_eq!(seen, want, "every request of client {c} answered once");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_refusals_timeouts_and_limits_are_errors() {
    let backend = Backend::start().await;
    let keys = format!(
        "allow_outbound = [\"http://{}/echo\", \"http://{}/slow\", \"http://{}/big\"]\n\
         outbound_timeout = \"300ms\"\noutbound_max_response = \"1MiB\"",
        backend.addr, backend.addr, backend.addr
    );
    let weir = io_probe("workers = 1", &keys, "").await;
    let mut ws = client(&weir.url("/io")).await;
    // Not in allow_outbound: the path, another port, https (another scheme).
    send_text(&mut ws, &format!("get a {}", backend.url("/value"))).await;
    assert_eq!(text(&mut ws).await, "a error refused");
    let other_port = format!("http://127.0.0.1:{}/echo", backend.addr.port() ^ 1);
    send_text(&mut ws, &format!("get b {other_port}")).await;
    assert_eq!(text(&mut ws).await, "b error refused");
    send_text(&mut ws, "get c https://127.0.0.1/echo").await;
    assert_eq!(text(&mut ws).await, "c error refused");
    let started = Instant::now();
    send_text(&mut ws, &format!("get d {}", backend.url("/slow"))).await;
    assert_eq!(text(&mut ws).await, "d error timeout");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(2),
        "{took:?}"
    );
    send_text(&mut ws, &format!("get e {}", backend.url("/big"))).await;
    assert_eq!(text(&mut ws).await, "e error too-large");
    send_text(&mut ws, &format!("get f {}", backend.url("/echo?i=7"))).await;
    assert_eq!(text(&mut ws).await, "f 200 7");
    // A route with no allow_outbound may reach nothing.
    drop(ws);
    let closed = io_probe("workers = 1", "", "").await;
    let mut ws = client(&closed.url("/io")).await;
    send_text(&mut ws, &format!("get g {}", backend.url("/echo?i=1"))).await;
    assert_eq!(text(&mut ws).await, "g error refused");
    // Connect failure: nothing listens there.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_addr = dead.local_addr().unwrap();
    drop(dead);
    let weir = io_probe(
        "workers = 1",
        &format!("allow_outbound = [\"http://{dead_addr}/\"]"),
        "",
    )
    .await;
    let mut ws = client(&weir.url("/io")).await;
    send_text(&mut ws, &format!("get h http://{dead_addr}/x")).await;
    assert_eq!(text(&mut ws).await, "h error connect");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_max_concurrent_is_busy_and_a_slow_backend_delays_no_batch() {
    let backend = Backend::start().await;
    let keys = format!(
        "allow_outbound = [\"http://{}/\"]\noutbound_max_concurrent = 64\noutbound_timeout = \"10s\"",
        backend.addr
    );
    let weir = io_probe("workers = 1", &keys, "").await;
    let mut echo = client(&weir.url("/io")).await;
    let rtt = |samples: &mut Vec<Duration>| {
        samples.sort_unstable();
        samples[samples.len() / 2]
    };
    let mut before = Vec::new();
    for i in 0..50 {
        let t = Instant::now();
        send_text(&mut echo, &format!("ping {i}")).await;
        assert_eq!(text(&mut echo).await, format!("ping {i}"));
        before.push(t.elapsed());
    }
    // 64 requests hang on the slow backend (the route's whole budget).
    let mut hang = client(&weir.url("/io")).await;
    for i in 0..64 {
        send_text(&mut hang, &format!("get s{i} {}", backend.url("/slow"))).await;
    }
    // The 65th is refused at once.
    send_text(&mut hang, &format!("get over {}", backend.url("/echo?i=1"))).await;
    assert_eq!(text(&mut hang).await, "over error busy");
    let mut during = Vec::new();
    for i in 0..50 {
        let t = Instant::now();
        send_text(&mut echo, &format!("pong {i}")).await;
        assert_eq!(text(&mut echo).await, format!("pong {i}"));
        during.push(t.elapsed());
    }
    let (before, during) = (rtt(&mut before), rtt(&mut during));
    eprintln!("echo median round trip: {before:?} before, {during:?} while 64 requests hang");
    assert!(
        during < before * 5 + Duration::from_millis(5),
        "echo slowed from {before:?} to {during:?}"
    );
    // And the 64 are all answered once the backend does.
    let mut answered = 0;
    while answered < 64 {
        let answer = timeout(Duration::from_secs(10), async { text(&mut hang).await })
            .await
            .expect("the slow answers arrive");
        assert!(answer.ends_with(" 200 slow"), "{answer}");
        answered += 1;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timers_fire_on_time_and_route_timers_reach_the_route() {
    let weir = io_probe("workers = 2", "", "").await;
    let mut ws = client(&weir.url("/io")).await;
    let mut late = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        send_text(&mut ws, "timer 50").await;
        assert_eq!(text(&mut ws).await, "timer");
        late.push(t.elapsed().saturating_sub(Duration::from_millis(50)));
    }
    late.sort_unstable();
    let median = late[late.len() / 2];
    eprintln!(
        "timer lateness seen by the client: median {median:?}, max {:?}",
        late[19]
    );
    assert!(median < Duration::from_millis(10), "timers late: {late:?}");
    // A route timer publishes to every connection (topic "io").
    let mut other = client(&weir.url("/io")).await;
    send_text(&mut ws, "route-timer 20").await;
    assert_eq!(text(&mut ws).await, "route-timer");
    assert_eq!(text(&mut other).await, "route-timer");
    // Cancelled timers never fire, however many, and do not hold back
    // the one set after them.
    send_text(&mut ws, "cancelled 5000 30").await;
    let t = Instant::now();
    send_text(&mut ws, "timer 60").await;
    assert_eq!(text(&mut ws).await, "timer");
    assert!(t.elapsed() >= Duration::from_millis(60), "fired early");
    send_text(&mut ws, "ping").await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(text(&mut ws).await, "ping", "a cancelled timer fired");
    // A connection's timer does not outlive it.
    send_text(&mut other, "timer 100").await;
    drop(other);
    send_text(&mut ws, "ping").await;
    assert_eq!(text(&mut ws).await, "ping");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_value_store_survives_a_restart() {
    let state = std::env::temp_dir().join(format!("weir-io-kv-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    let server = format!("workers = 1\nstate_dir = \"{}\"", state.display());
    {
        let weir = io_probe(&server, "kv = \"route\"", "").await;
        let mut ws = client(&weir.url("/io")).await;
        send_text(&mut ws, "set room lobby").await;
        send_text(&mut ws, "get-kv nothing").await;
        assert_eq!(text(&mut ws).await, "nothing?");
        // Writes are applied after the batch: poll until it is visible.
        let deadline = Instant::now() + STEP;
        loop {
            send_text(&mut ws, "get-kv room").await;
            if text(&mut ws).await == "room=lobby" {
                break;
            }
            assert!(Instant::now() < deadline, "the write never landed");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut weir = weir;
        weir.child.kill().unwrap();
        weir.child.wait().unwrap();
    }
    let weir = io_probe(&server, "kv = \"route\"", "").await;
    let mut ws = client(&weir.url("/io")).await;
    send_text(&mut ws, "get-kv room").await;
    assert_eq!(text(&mut ws).await, "room=lobby");
    drop(ws);
    drop(weir);
    let _ = std::fs::remove_dir_all(&state);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deferred_upgrades_accept_reject_and_time_out() {
    let backend = Backend::start().await;
    let keys = format!("allow_outbound = [\"http://{}/\"]", backend.addr);
    let weir = io_probe("workers = 1\nhandshake_timeout = \"1s\"", &keys, "").await;
    let url = |q: &str| weir.url(&format!("/io?auth={}", backend.url(q)));
    let mut ws = client(&url("/auth?token=good")).await;
    send_text(&mut ws, "hello").await;
    assert_eq!(text(&mut ws).await, "hello");
    let status = |r: Result<_, tokio_tungstenite::tungstenite::Error>| match r {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => resp.status().as_u16(),
        Ok(_) => 101,
        Err(e) => panic!("{e}"),
    };
    let refused = tokio_tungstenite::connect_async(url("/auth?token=bad")).await;
    assert_eq!(status(refused.map(|_| ())), 403);
    let started = Instant::now();
    let slow = tokio_tungstenite::connect_async(url("/slow")).await;
    assert_eq!(status(slow.map(|_| ())), 504);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "bounded by handshake_timeout"
    );
    // Not allowed by policy: the guest sees an error and answers 503.
    let other = weir.url("/io?auth=http://127.0.0.1:1/auth");
    let refused = tokio_tungstenite::connect_async(other).await;
    assert_eq!(status(refused.map(|_| ())), 503);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_0_3_0_guest_still_runs_beside_0_4_0() {
    // The JS echo example built for weir:gateway 0.3.0 (build.mjs --world
    // 0.3.0, scripts/build-guests.sh).
    let wasm = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/wasm/js-echo-v3.wasm");
    assert!(wasm.exists(), "run scripts/build-guests.sh first");
    let io =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/wasm/io-probe.wasm");
    let routes = format!(
        "[[route]]\npath = \"/old\"\nguest = \"{}\"\n\n[[route]]\npath = \"/io\"\nguest = \"{}\"\n",
        wasm.display(),
        io.display()
    );
    let weir = WeirProcess::start("workers = 1", &routes, "warn", Stdio::null()).await;
    let mut old = client(&weir.url("/old")).await;
    send_text(&mut old, "still here").await;
    assert_eq!(text(&mut old).await, "still here");
    let mut new = client(&weir.url("/io")).await;
    send_text(&mut new, "timer 1").await;
    assert_eq!(text(&mut new).await, "timer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_echo_answers_with_the_backend_and_counts_its_timers() {
    let backend = Backend::start().await;
    let wasm = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/wasm/fetch-echo.wasm");
    assert!(wasm.exists(), "run scripts/build-guests.sh first");
    let routes = format!(
        "[[route]]\npath = \"/fetch\"\nguest = \"{}\"\nallow_outbound = [\"http://{}/post\"]\n\
         env = {{ BACKEND_URL = \"{}\" }}\n",
        wasm.display(),
        backend.addr,
        backend.url("/post")
    );
    let weir = WeirProcess::start("", &routes, "warn", Stdio::null()).await;
    let mut ws = client(&weir.url("/fetch")).await;
    // Text and binary come back as sent, through the backend.
    send_text(&mut ws, "héllo").await;
    assert_eq!(text(&mut ws).await, "héllo");
    let bytes: Vec<u8> = (0..=255).collect();
    timeout(STEP, ws.send(Message::binary(bytes.clone())))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(next(&mut ws).await, Message::binary(bytes));
    // 1,000 timers of 5 ms: one `done` after the last.
    let started = Instant::now();
    send_text(&mut ws, "timers 1000 5").await;
    assert_eq!(text(&mut ws).await, "done 1000");
    assert!(started.elapsed() >= Duration::from_millis(5));
    send_text(&mut ws, "after").await;
    assert_eq!(text(&mut ws).await, "after", "no second done");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_requests_check_the_certificate_against_outbound_ca() {
    let made =
        rcgen::generate_simple_self_signed(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .unwrap();
    let dir = std::env::temp_dir().join(format!("weir-io-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca = dir.join("ca.pem");
    std::fs::write(&ca, made.cert.pem()).unwrap();
    let key = rustls::pki_types::PrivateKeyDer::try_from(made.signing_key.serialize_der()).unwrap();
    let backend = Backend::start_tls(made.cert.der().clone(), key).await;
    let https = |path: &str| format!("https://{}{path}", backend.addr);
    // Trusting the test's certificate: answers as over http.
    let allow = format!(
        "allow_outbound = [\"{}\"]\noutbound_ca = \"{}\"",
        https("/"),
        ca.display()
    );
    let weir = io_probe("", &allow, "").await;
    let mut ws = client(&weir.url("/io")).await;
    send_text(&mut ws, &format!("get a {}", https("/echo?i=7"))).await;
    assert_eq!(text(&mut ws).await, "a 200 7");
    send_text(&mut ws, &format!("get b {}", https("/value"))).await;
    assert_eq!(
        text(&mut ws).await,
        "b 200 v1",
        "the pooled TLS connection again"
    );
    // http:// to the same port is another scheme: not allowed.
    send_text(&mut ws, &format!("get c http://{}/value", backend.addr)).await;
    assert_eq!(text(&mut ws).await, "c error refused");
    drop(weir);
    // With webpki-roots only, the self-signed certificate is refused.
    let weir = io_probe("", &format!("allow_outbound = [\"{}\"]", https("/")), "").await;
    let mut ws = client(&weir.url("/io")).await;
    send_text(&mut ws, &format!("get d {}", https("/value"))).await;
    assert_eq!(text(&mut ws).await, "d error connect");
    drop(weir);
    // A CA file with no certificate stops the gateway from starting, saying why.
    let empty = dir.join("empty.pem");
    std::fs::write(&empty, "").unwrap();
    let wasm =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/wasm/io-probe.wasm");
    let routes = dir.join("routes.toml");
    std::fs::write(
        &routes,
        format!(
            "[[route]]\npath = \"/io\"\nguest = \"{}\"\nallow_outbound = [\"{}\"]\noutbound_ca = \"{}\"\n",
            wasm.display(),
            https("/"),
            empty.display()
        ),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("serve")
        .arg(&routes)
        .args(["--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("outbound_ca") && err.contains("no certificate"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A backend that reads paths as nginx and most frameworks do: the path
/// percent-decoded (`%2f` and `%5c` too), backslashes taken for slashes,
/// dot segments resolved. `/secret` answers `secret`, `/v1-admin` answers
/// `admin`; anything else answers `seen PATH HOST` (the path as
/// received). It counts the requests it gets.
struct NormalisingBackend {
    addr: SocketAddr,
    hits: Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl NormalisingBackend {
    async fn start() -> NormalisingBackend {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = hits.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let counter = counter.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                        counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        let raw = req.uri().path().to_string();
                        let host = req
                            .headers()
                            .get("host")
                            .map(|h| h.to_str().unwrap_or("?").to_string())
                            .unwrap_or_default();
                        let body = match resolve_like_nginx(&raw).as_str() {
                            "/secret" => "secret".to_string(),
                            "/v1-admin" => "admin".to_string(),
                            _ => format!("seen {raw} {host}"),
                        };
                        async move {
                            Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from(body))))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        NormalisingBackend { addr, hits, task }
    }

    fn hits(&self) -> usize {
        self.hits.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for NormalisingBackend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What a lenient server makes of a path: decode every escape, read `\`
/// as `/`, resolve `.` and `..` (clamped at the root).
fn resolve_like_nginx(raw: &str) -> String {
    let bytes = raw.as_bytes();
    let mut decoded = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                decoded.push((hex(h).unwrap() * 16 + hex(l).unwrap()) as u8);
                i += 3;
            }
            (b, _, _) => {
                decoded.push(b);
                i += 1;
            }
        }
    }
    let text = String::from_utf8_lossy(&decoded).replace('\\', "/");
    let mut kept: Vec<&str> = Vec::new();
    for segment in text.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                kept.pop();
            }
            s => kept.push(s),
        }
    }
    format!("/{}", kept.join("/"))
}

/// Issue 35 (security review): `allow_outbound = [".../api/"]` let a guest
/// reach `/secret` on a backend that resolves `/api/../secret` (raw or
/// percent-encoded), and `/v1` admitted `/v1-admin`. Now the path is
/// normalised before it is matched (on segment boundaries), what cannot be
/// read one way is refused, and exactly the checked path is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outbound_paths_are_checked_as_the_backend_reads_them() {
    let backend = NormalisingBackend::start().await;
    let base = format!("http://{}", backend.addr);
    let keys = format!("allow_outbound = [\"{base}/api/\", \"{base}/v1\"]");
    let weir = io_probe("workers = 1", &keys, "").await;
    let mut ws = client(&weir.url("/io")).await;
    for (label, path) in [
        ("dots", "/api/../secret"),
        ("encoded", "/api/%2e%2e/secret"),
        ("upper", "/api/%2E%2E/secret"),
        ("mixed", "/api/.%2e/secret"),
        ("slash", "/api/..%2fsecret"),
        ("slash2", "/api%2f.."),
        ("back", "/api/..\\secret"),
        ("back2", "/api/..%5csecret"),
        ("params", "/api/..;/secret"),
        ("above", "/api/../../secret"),
        ("admin", "/v1-admin"),
    ] {
        send_text(&mut ws, &format!("get {label} {base}{path}")).await;
        assert_eq!(
            text(&mut ws).await,
            format!("{label} error refused"),
            "{path}"
        );
    }
    assert_eq!(backend.hits(), 0, "no refused request reached the backend");
    // Allowed ones are sent normalised: the backend sees the checked path.
    let host = backend.addr.to_string();
    for (label, path, seen) in [
        ("a", "/api/x", "/api/x"),
        ("b", "/api/./x/../y", "/api/y"),
        ("c", "/api//%2e/z", "/api/z"),
        ("d", "/v1", "/v1"),
        ("e", "/v1/users", "/v1/users"),
    ] {
        send_text(&mut ws, &format!("get {label} {base}{path}")).await;
        assert_eq!(
            text(&mut ws).await,
            format!("{label} 200 seen {seen} {host}")
        );
    }
}

/// Issue 35: a guest could set its own Host header (any virtual host on an
/// allowed address), and an allowed host *name* was not checked against
/// the addresses it resolves to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guest_cannot_choose_host_or_reach_private_addresses_by_name() {
    let backend = NormalisingBackend::start().await;
    let base = format!("http://{}", backend.addr);
    let host = backend.addr.to_string();
    let weir = io_probe(
        "workers = 1",
        &format!("allow_outbound = [\"{base}/api/\"]"),
        "",
    )
    .await;
    let mut ws = client(&weir.url("/io")).await;
    send_text(&mut ws, &format!("get-as a admin.internal {base}/api/x")).await;
    assert_eq!(text(&mut ws).await, "a error refused");
    assert_eq!(backend.hits(), 0);
    // The URL's own authority is no choice: sent as the gateway writes it.
    send_text(&mut ws, &format!("get-as b {host} {base}/api/x")).await;
    assert_eq!(text(&mut ws).await, format!("b 200 seen /api/x {host}"));
    drop(ws);
    drop(weir);

    // `localhost` resolves to loopback: refused without allow_private.
    let port = backend.addr.port();
    let by_name = format!("allow_outbound = [\"http://localhost:{port}/api/\"]");
    let weir = io_probe("workers = 1", &by_name, "").await;
    let mut ws = client(&weir.url("/io")).await;
    send_text(&mut ws, &format!("get c http://localhost:{port}/api/x")).await;
    assert_eq!(text(&mut ws).await, "c error refused");
    assert_eq!(backend.hits(), 1, "only b reached the backend");
    drop(ws);
    drop(weir);
    let weir = io_probe(
        "workers = 1",
        &format!("{by_name}\nallow_private = true"),
        "",
    )
    .await;
    let mut ws = client(&weir.url("/io")).await;
    send_text(&mut ws, &format!("get d http://localhost:{port}/api/x")).await;
    assert_eq!(
        text(&mut ws).await,
        format!("d 200 seen /api/x localhost:{port}")
    );
}

/// Polls `get-kv KEY` until the answer is `want` (writes land after their
/// batch), bounded by [`STEP`].
async fn await_kv(ws: &mut Ws, key: &str, want: &str) {
    let deadline = Instant::now() + STEP;
    loop {
        send_text(ws, &format!("get-kv {key}")).await;
        let got = text(ws).await;
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "get-kv {key}: {got}, never {want}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Issue 39: a JavaScript guest (examples/js/fixtures/io-probe.js, built
/// by build.mjs for weir:gateway 0.4.0) served by the real gateway:
/// `await fetch` (GET, POST with a header and body, a policy refusal,
/// twenty in flight answered out of order), a Promise around setTimeout,
/// cleared timers, a route timer reaching every connection, the key-value
/// store with a ttl, state changed after an await, and an upgrade decided
/// by an awaited fetch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_javascript_guest_fetches_sleeps_and_keeps_values() {
    script_guest_fetches_sleeps_and_keeps_values("js-io-probe.wasm").await;
}

/// Issue 39: the same for a Python guest (examples/python/fixtures/
/// io-probe.py, built by guest-sdk/python/build.py for weir:gateway
/// 0.4.0): `await fetch`, `await sleep`, cancelled timers, a route timer,
/// kv with a ttl, state changed after an await, and an `async def
/// on_upgrade` that awaits one fetch (a deferred upgrade).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_guest_fetches_sleeps_and_keeps_values() {
    script_guest_fetches_sleeps_and_keeps_values("py-io-probe.wasm").await;
}

/// The io-probe commands against the fixture `name` in examples/wasm (the
/// JavaScript and Python ones answer alike).
async fn script_guest_fetches_sleeps_and_keeps_values(name: &str) {
    let backend = Backend::start().await;
    let wasm = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/wasm")
        .join(name);
    assert!(wasm.exists(), "run scripts/build-guests.sh first");
    let state = std::env::temp_dir().join(format!("weir-{name}-io-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    let routes = format!(
        "[[route]]\npath = \"/io\"\nguest = \"{}\"\nkv = \"route\"\n\
         allow_outbound = [\"http://{}/\"]\n",
        wasm.display(),
        backend.addr
    );
    let server = format!("workers = 1\nstate_dir = \"{}\"", state.display());
    let weir = WeirProcess::start(&server, &routes, "warn", Stdio::null()).await;
    let mut ws = client(&weir.url("/io")).await;

    send_text(&mut ws, &format!("get a {}", backend.url("/echo?i=5"))).await;
    assert_eq!(text(&mut ws).await, "a 200 5");
    send_text(
        &mut ws,
        &format!("post b {} hello there", backend.url("/post")),
    )
    .await;
    assert_eq!(text(&mut ws).await, "b 200 hello there");
    send_text(&mut ws, "get c http://127.0.0.1:1/x").await;
    assert_eq!(text(&mut ws).await, "c error refused");
    // Twenty awaiting at once; the backend answers them out of order.
    for i in 0..20 {
        send_text(
            &mut ws,
            &format!("get k{i} {}", backend.url(&format!("/echo?i={i}"))),
        )
        .await;
    }
    let mut seen = Vec::new();
    for _ in 0..20 {
        let answer = text(&mut ws).await;
        let parts: Vec<&str> = answer.split(' ').collect();
        assert_eq!(parts.len(), 3, "{answer}");
        assert_eq!(
            (parts[0], parts[1]),
            (&*format!("k{}", parts[2]), "200"),
            "{answer}"
        );
        seen.push(parts[2].parse::<u32>().unwrap());
    }
    seen.sort_unstable();
    assert_eq!(seen, (0..20).collect::<Vec<_>>());

    // setTimeout: not before its time.
    let started = Instant::now();
    send_text(&mut ws, "timer 50").await;
    assert_eq!(text(&mut ws).await, "timer");
    assert!(
        started.elapsed() >= Duration::from_millis(50),
        "{:?}",
        started.elapsed()
    );
    // Cleared timers never fire; the next message is the later timer's.
    send_text(&mut ws, "cancelled 10 20").await;
    send_text(&mut ws, "timer 60").await;
    assert_eq!(text(&mut ws).await, "timer");
    // A route timer publishes to every connection.
    let mut other = client(&weir.url("/io")).await;
    send_text(&mut ws, "route-timer 20").await;
    assert_eq!(text(&mut ws).await, "route-timer");
    assert_eq!(text(&mut other).await, "route-timer");

    // The key-value store, with a ttl.
    send_text(&mut ws, "get-kv room").await;
    assert_eq!(text(&mut ws).await, "room?");
    send_text(&mut ws, "set room lobby").await;
    await_kv(&mut ws, "room", "room=lobby").await;
    send_text(&mut ws, "set-ttl 200 brief here").await;
    await_kv(&mut ws, "brief", "brief=here").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    send_text(&mut ws, "get-kv brief").await;
    assert_eq!(text(&mut ws).await, "brief?");
    send_text(&mut ws, "del room").await;
    await_kv(&mut ws, "room", "room?").await;

    // State changed after an await is the connection's.
    send_text(&mut ws, "count").await;
    send_text(&mut ws, "count").await;
    assert_eq!(text(&mut ws).await, "1");
    assert_eq!(text(&mut ws).await, "2");

    // onUpgrade awaits one fetch: the gateway defers the upgrade on it.
    let status = |r: Result<_, tokio_tungstenite::tungstenite::Error>| match r {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => resp.status().as_u16(),
        Ok(_) => 101,
        Err(e) => panic!("{e}"),
    };
    let url = |q: &str| weir.url(&format!("/io?auth={}", backend.url(q)));
    let mut authed = client(&url("/auth?token=good")).await;
    send_text(&mut authed, "hello").await;
    assert_eq!(text(&mut authed).await, "hello");
    let refused = tokio_tungstenite::connect_async(url("/auth?token=bad")).await;
    assert_eq!(status(refused.map(|_| ())), 403);
    let other = weir.url("/io?auth=http://127.0.0.1:1/auth");
    let refused = tokio_tungstenite::connect_async(other).await;
    assert_eq!(status(refused.map(|_| ())), 503);
    drop((ws, authed, weir));
    let _ = std::fs::remove_dir_all(&state);
}
