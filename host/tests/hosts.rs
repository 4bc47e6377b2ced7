//! Issue 35, item 5: Origin and Host against an in-process gateway over
//! loopback, with raw sockets and the `h2` crate. DNS rebinding (a foreign
//! `Host` with its matching `Origin`) gets 421 from a loopback gateway and
//! its admin listener unless `allowed_hosts` lists the name; two `Host`
//! headers and bare-LF heads get 400; the same origin compares the scheme
//! and reads HTTP/2's `:authority`.

mod common;

use common::{Gateway, Raw, STEP};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{timeout, Instant};
use weir_config::{AdminConfig, Config};

const KEY: &str = "Upgrade: websocket\r\nConnection: Upgrade\r\n\
                   Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n";

fn gateway(edit: impl FnOnce(&mut Config)) -> Gateway {
    let mut config = Config::builtin_default();
    config.server.workers = 1;
    edit(&mut config);
    Gateway::start(config)
}

/// The status of an upgrade to /echo naming `host`, with `extra` lines.
async fn upgrade(addr: SocketAddr, host: &str, extra: &str) -> u16 {
    let head = format!("GET /echo HTTP/1.1\r\nHost: {host}\r\n{KEY}{extra}\r\n");
    Raw::request(addr, &head).await.1
}

/// Regression (issue 35): `Host: evil.example:P` with `Origin:
/// http://evil.example:P` got 101 on a gateway bound to loopback, so a
/// page on a rebinding domain reached it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loopback_gateway_refuses_foreign_host_names_with_421() {
    let gw = gateway(|_| {});
    let port = gw.addr.port();
    let evil = format!("evil.example:{port}");
    let origin = format!("Origin: http://evil.example:{port}\r\n");
    assert_eq!(upgrade(gw.addr, &evil, &origin).await, 421, "rebinding");
    assert_eq!(
        upgrade(gw.addr, &evil, "").await,
        421,
        "not a browser either"
    );
    let (_, status) = Raw::request(
        gw.addr,
        &format!("GET /metrics HTTP/1.1\r\nHost: {evil}\r\n\r\n"),
    )
    .await;
    assert_eq!(status, 421, "plain requests too");
    let (_, status) = Raw::request(
        gw.addr,
        &format!("GET /healthz HTTP/1.1\r\nHost: {evil}\r\n\r\n"),
    )
    .await;
    assert_eq!(status, 200, "/healthz answers any name");
    for own in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        "[::1]".to_string(),
    ] {
        let origin = format!("Origin: http://{own}\r\n");
        assert_eq!(upgrade(gw.addr, &own, &origin).await, 101, "{own}");
    }
    drop(gw);

    let gw = gateway(|c| c.server.allowed_hosts = Some(vec!["evil.example".into()]));
    let port = gw.addr.port();
    let evil = format!("evil.example:{port}");
    let origin = format!("Origin: http://evil.example:{port}\r\n");
    assert_eq!(upgrade(gw.addr, &evil, &origin).await, 101, "listed");
    assert_eq!(
        upgrade(gw.addr, &format!("other.example:{port}"), "").await,
        421
    );
}

/// Two `Host` headers got the first one's treatment; bare-LF heads were
/// accepted. Both get 400; an upgrade whose first frames arrive with its
/// head (bytes after the head, LFs among them) is not mistaken for one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_hosts_and_bare_lf_heads_get_400() {
    let gw = gateway(|_| {});
    let head = format!("GET /echo HTTP/1.1\r\nHost: localhost\r\nHost: evil.example\r\n{KEY}\r\n");
    assert_eq!(
        Raw::request(gw.addr, &head).await.1,
        400,
        "two Host headers"
    );
    let head = format!(
        "GET /echo HTTP/1.1\nHost: localhost\n{}\n",
        KEY.replace("\r\n", "\n")
    );
    assert_eq!(
        Raw::request(gw.addr, &head).await.1,
        400,
        "bare LF throughout"
    );
    let head = format!("GET /echo HTTP/1.1\r\nHost: localhost\nX-A: 1\r\n{KEY}\r\n");
    assert_eq!(Raw::request(gw.addr, &head).await.1, 400, "one bare LF");
    let (_, status) = Raw::request(
        gw.addr,
        "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\nGET /healthz HTTP/1.1\nHost: localhost\n\n",
    )
    .await;
    assert_eq!(status, 200, "the first, well-formed request is answered");

    // A text frame sent with the head whose masked payload is "\n\n\n"
    // (0x0a each) on the wire.
    let mut stream = TcpStream::connect(gw.addr).await.unwrap();
    let mut bytes = format!("GET /echo HTTP/1.1\r\nHost: localhost\r\n{KEY}\r\n").into_bytes();
    let payload = [
        0x0a ^ common::KEY[0],
        0x0a ^ common::KEY[1],
        0x0a ^ common::KEY[2],
    ];
    let frame = common::frame(0x81, &payload);
    assert_eq!(&frame[6..], b"\n\n\n");
    bytes.extend_from_slice(&frame);
    stream.write_all(&bytes).await.unwrap();
    let mut got = Vec::new();
    let echoed = loop {
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            if got.len() >= end + 4 + 5 {
                assert!(
                    got.starts_with(b"HTTP/1.1 101"),
                    "{:?}",
                    String::from_utf8_lossy(&got)
                );
                break got[end + 4..end + 9].to_vec();
            }
        }
        let mut chunk = [0u8; 4096];
        let n = timeout(STEP, stream.read(&mut chunk))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "closed: {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&chunk[..n]);
    };
    assert_eq!(echoed[..2], [0x81, 0x03]);
    assert_eq!(echoed[2..], payload, "the frame echoed");
}

/// Regression (issue 35): same-origin over HTTP/2 read `Host`, which
/// browsers do not send there, and failed; it ignored the scheme too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_origin_reads_the_authority_and_compares_the_scheme() {
    let gw = gateway(|_| {});
    let port = gw.addr.port();
    let own = format!("127.0.0.1:{port}");
    assert_eq!(
        upgrade(gw.addr, &own, &format!("Origin: http://{own}\r\n")).await,
        101
    );
    assert_eq!(
        upgrade(gw.addr, &own, &format!("Origin: https://{own}\r\n")).await,
        403,
        "https page, plain listener"
    );

    let tcp = TcpStream::connect(gw.addr).await.unwrap();
    let (send, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut send = timeout(STEP, send.ready()).await.unwrap().unwrap();
    let deadline = Instant::now() + STEP;
    while !send.is_extended_connect_protocol_enabled() {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(5)).await;
        send = send.ready().await.unwrap();
    }
    let connect = |authority: &str, origin: &str| {
        http::Request::builder()
            .method(http::Method::CONNECT)
            .uri(format!("http://{authority}/echo"))
            .header("sec-websocket-version", "13")
            .header("origin", origin)
            .extension(h2::ext::Protocol::from_static("websocket"))
            .body(())
            .unwrap()
    };
    for (authority, origin, want) in [
        (own.clone(), format!("http://{own}"), 200),
        (own.clone(), format!("https://{own}"), 403),
        (own.clone(), format!("http://127.0.0.1:{}", port + 1), 403),
        (
            format!("evil.example:{port}"),
            format!("http://evil.example:{port}"),
            421,
        ),
    ] {
        let mut send = send.clone().ready().await.unwrap();
        let (response, _stream) = send
            .send_request(connect(&authority, &origin), false)
            .unwrap();
        let response = timeout(STEP, response).await.unwrap().unwrap();
        assert_eq!(
            response.status().as_u16(),
            want,
            ":authority {authority}, origin {origin}"
        );
    }
}

/// The admin listener (console and API) refuses foreign host names too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_listener_refuses_foreign_host_names_with_421() {
    const TOKEN_ENV: &str = "WEIR_HOSTS_TEST_ADMIN_TOKEN";
    std::env::set_var(TOKEN_ENV, "0123456789abcdef0123456789abcdef");
    let mut config = Config::builtin_default();
    config.server.workers = 1;
    config.server.listen = "127.0.0.1:0".parse().unwrap();
    config.admin = Some(AdminConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        token_env: TOKEN_ENV.into(),
        tls: None,
    });
    let server = weir::server::Server::bind(config).expect("bind");
    let admin = server.admin_addr().unwrap();
    let (stop, rx) = tokio::sync::watch::channel(false);
    let thread = std::thread::spawn(move || server.run(rx).expect("serve"));
    let request = |host: String| {
        format!("GET /routes HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer 0123456789abcdef0123456789abcdef\r\n\r\n")
    };
    let port = admin.port();
    let (_, status) = Raw::request(admin, &request(format!("evil.example:{port}"))).await;
    assert_eq!(status, 421);
    let (_, status) = Raw::request(admin, &request(format!("127.0.0.1:{port}"))).await;
    assert_eq!(status, 200);
    stop.send(true).unwrap();
    thread.join().unwrap();
}
