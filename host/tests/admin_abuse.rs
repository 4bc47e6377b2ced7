//! Issue 35, item 6: the admin listener under attack, against a real
//! `weir serve` over loopback. Wrong tokens (bearer and `POST /session`)
//! are limited per client address (429 with `Retry-After`, the right token
//! too while limited, another address not) and logged as one line, not
//! one per attempt; malformed percent escapes get 400; `[admin] tls`
//! serves HTTPS only and its session cookie is `Secure`. Item 7's
//! end-to-end case is here too: a component cache directory others may
//! write stops `weir check` with its name (the rest: guest/cache.rs).

mod admin_support;
mod common;
mod guest_support;

use admin_support::{request_head, Gateway, TOKEN};
use common::STEP;
use rustls::pki_types::{CertificateDer, ServerName};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::timeout;

const ROUTES: &str = "[[route]]\npath = \"/echo\"\nnative = \"echo\"\n";

/// One HTTP/1.1 exchange (`connection: close`) over `stream`: (status,
/// lower-cased head, body).
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String, String) {
    let head = request_head(method, path, "localhost", headers, body.len());
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    let mut raw = Vec::new();
    match timeout(STEP, stream.read_to_end(&mut raw))
        .await
        .expect("an answer in time")
    {
        Ok(_) => {}
        // A TLS peer that closes without close_notify, after its answer.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {}
        Err(e) => panic!("reading the answer: {e}"),
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("an HTTP answer, got {text:?}"));
    let status = head[9..12].parse().unwrap();
    (status, head.to_ascii_lowercase(), body.to_string())
}

/// [`exchange`] over plain TCP from `from` (a loopback address of the
/// test's choosing, so two "clients" can be told apart).
async fn http_from(
    from: &str,
    to: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String, String) {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    let stream = timeout(STEP, socket.connect(to)).await.unwrap().unwrap();
    exchange(stream, method, path, headers, body).await
}

/// `GET path` from `from`.
async fn get(
    from: &str,
    to: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, String, String) {
    http_from(from, to, "GET", path, headers, b"").await
}

/// `POST /session` with `token` as the body, from `from`.
async fn sign_in(from: &str, to: SocketAddr, token: &str) -> (u16, String, String) {
    http_from(from, to, "POST", "/session", &[], token.as_bytes()).await
}

fn retry_after(head: &str) -> Option<u64> {
    head.lines()
        .find_map(|l| l.strip_prefix("retry-after:"))
        .map(|v| v.trim().parse().unwrap())
}

#[tokio::test]
async fn wrong_tokens_are_limited_per_address_and_logged_once() {
    let gw = Gateway::start_with("abuse-limit", &[], ROUTES, true).await;
    let admin = gw.admin;
    let bearer = format!("Bearer {TOKEN}");
    // A session opened before the attack keeps working through it.
    let (status, head, body) = sign_in("127.0.0.1", admin, TOKEN).await;
    assert_eq!(status, 204, "{body}");
    let set = head
        .lines()
        .find_map(|l| l.strip_prefix("set-cookie:"))
        .expect("a session cookie");
    assert!(!set.contains("secure"), "plain HTTP: no Secure: {set}");
    let cookie = set.trim().split(';').next().unwrap().to_string();

    // Ten wrong tokens, by both doors, are each a plain 401.
    for i in 0..10 {
        let (status, head, body) = if i % 2 == 0 {
            let wrong = format!("Bearer wrong-token-{i:02}-0123456789");
            get("127.0.0.1", admin, "/routes", &[("authorization", &wrong)]).await
        } else {
            sign_in("127.0.0.1", admin, "wrong-token-0123456789").await
        };
        assert_eq!(status, 401, "attempt {i}: {body}");
        assert_eq!(retry_after(&head), None);
    }
    // The eleventh gets 429, and so does the right token from this address.
    let wrong = "Bearer wrong-token-xx-0123456789";
    let (status, head, body) =
        get("127.0.0.1", admin, "/routes", &[("authorization", wrong)]).await;
    assert_eq!(status, 429, "{body}");
    let wait = retry_after(&head).expect("Retry-After");
    assert!((1..=60).contains(&wait), "{wait}");
    let (status, head, _) = get("127.0.0.1", admin, "/routes", &[("authorization", &bearer)]).await;
    assert_eq!(status, 429, "the right token is refused while limited");
    assert!(retry_after(&head).is_some());
    let (status, _, _) = sign_in("127.0.0.1", admin, TOKEN).await;
    assert_eq!(status, 429, "and so is a new session");
    // The session opened before still works (it is not a guess).
    let (status, _, body) = get("127.0.0.1", admin, "/api/overview", &[("cookie", &cookie)]).await;
    assert_eq!(status, 200, "{body}");
    // Another address is not limited.
    let (status, _, body) = get("127.0.0.2", admin, "/routes", &[("authorization", &bearer)]).await;
    assert_eq!(status, 200, "{body}");

    // The log is written by a thread of its own: wait for the line (and a
    // moment more, for any that should not be there).
    let deadline = tokio::time::Instant::now() + STEP;
    while !gw.log().contains("failed sign-in") && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let log = gw.log();
    let lines: Vec<_> = log
        .lines()
        .filter(|l| l.contains("failed sign-in"))
        .collect();
    assert_eq!(lines.len(), 1, "one line, not one per attempt: {lines:#?}");
    assert!(lines[0].contains("127.0.0.1"), "{}", lines[0]);
    assert!(!log.contains("login refused"), "{log}");
}

#[tokio::test]
async fn malformed_percent_escapes_get_400() {
    let gw = Gateway::start("abuse-escapes", &[], ROUTES).await;
    let bearer = format!("Bearer {TOKEN}");
    for (method, path) in [
        ("GET", "/%+e"),
        ("GET", "/%4"),
        ("GET", "/routes%-1"),
        ("POST", "/routes/%+e/rollback"),
        ("POST", "/routes/%2Fecho%4/drain"),
        ("GET", "/console?path=%+2Fecho"),
    ] {
        for auth in [None, Some(bearer.as_str())] {
            let headers: Vec<(&str, &str)> =
                auth.map(|a| ("authorization", a)).into_iter().collect();
            let (status, _, body) =
                http_from("127.0.0.1", gw.admin, method, path, &headers, b"").await;
            assert_eq!(status, 400, "{method} {path} ({auth:?}): {body}");
            assert!(body.contains("two hex digits"), "{body}");
        }
    }
    // A well-formed escape still reaches its route.
    let (status, _, body) = http_from(
        "127.0.0.1",
        gw.admin,
        "POST",
        "/routes/%2Fecho/drain",
        &[("authorization", &bearer)],
        b"",
    )
    .await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn admin_tls_serves_https_only_with_a_secure_cookie() {
    let certs = std::env::temp_dir().join(format!("weir-admin-tls-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&certs);
    std::fs::create_dir_all(&certs).unwrap();
    let made = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    std::fs::write(certs.join("cert.pem"), made.cert.pem()).unwrap();
    std::fs::write(certs.join("key.pem"), made.signing_key.serialize_pem()).unwrap();
    let root: CertificateDer<'static> = made.cert.der().clone();
    // These keys land in [admin]: the harness writes `routes` right after it.
    let routes = format!(
        "tls = {{ cert = \"{}\", key = \"{}\" }}\n\n{ROUTES}",
        certs.join("cert.pem").display(),
        certs.join("key.pem").display()
    );
    let gw = Gateway::start("abuse-tls", &[], &routes).await;

    let mut store = rustls::RootCertStore::empty();
    store.add(root).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(store)
            .with_no_client_auth(),
    );
    let https = || async {
        let tcp = TcpStream::connect(gw.admin).await.unwrap();
        timeout(
            STEP,
            tokio_rustls::TlsConnector::from(config.clone())
                .connect(ServerName::try_from("localhost").unwrap(), tcp),
        )
        .await
        .expect("TLS handshake in time")
        .expect("TLS handshake")
    };

    let (status, head, body) =
        exchange(https().await, "POST", "/session", &[], TOKEN.as_bytes()).await;
    assert_eq!(status, 204, "{body}");
    let set = head
        .lines()
        .find_map(|l| l.strip_prefix("set-cookie:"))
        .expect("a session cookie");
    assert!(set.contains("; secure"), "{set}");
    assert!(set.contains("httponly"), "{set}");
    let bearer = format!("Bearer {TOKEN}");
    let (status, _, body) = exchange(
        https().await,
        "GET",
        "/routes",
        &[("authorization", &bearer)],
        b"",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("/echo"), "{body}");

    // Plain HTTP to the TLS port gets no HTTP answer (and no token is read).
    let mut plain = TcpStream::connect(gw.admin).await.unwrap();
    plain
        .write_all(b"GET /routes HTTP/1.1\r\nhost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut raw = Vec::new();
    let _ = timeout(STEP, plain.read_to_end(&mut raw))
        .await
        .expect("closed in time");
    assert!(
        !raw.starts_with(b"HTTP/"),
        "{:?}",
        String::from_utf8_lossy(&raw)
    );
    drop(gw);
    let _ = std::fs::remove_dir_all(&certs);
}

/// Issue 35 item 7: a cache directory anyone may write would let anyone
/// plant native code; `weir check` (and `weir serve`) refuse it by name.
#[test]
fn a_world_writable_cache_dir_is_refused_by_name() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("weir-cache-trust-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cache = dir.join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).unwrap();
    let routes = format!(
        "[[route]]\npath = \"/plain\"\nguest = \"{}\"\n",
        guest_support::wasm("echo").display()
    );
    std::fs::write(dir.join("routes.toml"), routes).unwrap();
    let run = |cache: &std::path::Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
            .arg("check")
            .arg(dir.join("routes.toml"))
            .env("WEIR_CACHE_DIR", cache)
            .output()
            .unwrap()
    };
    let out = run(&cache);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains(&cache.display().to_string()), "{stderr}");
    assert!(stderr.contains("writable by group or others"), "{stderr}");
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o700)).unwrap();
    let out = run(&cache);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
