//! The centrifugo route kind against the official `centrifuge` JavaScript
//! client (pinned in host/tests/clients/package.json, installed by
//! scripts/test.sh): connect with a token, refusals of bad tokens,
//! subscribe, publish, presence, join/leave, history, token refresh, and
//! recovery after the client's socket is cut while publishing goes on, and
//! the disconnect of a command over `max_command`. A raw client checks the
//! server's ping and the no-pong close, and the 1009 close of an oversized
//! command.

mod common;

use common::node::*;
use common::*;
use futures_util::{SinkExt, StreamExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::Message;
use weir_config::Config;

/// The HMAC secret the test's tokens are signed with.
const SECRET: &str = "centrifugo-test-secret";
const SECRET_ENV: &str = "WEIR_TEST_CENTRIFUGO_SECRET";
/// The server API's key.
const API_KEY: &str = "centrifugo-test-api-key-0123456789";

const ROUTES: &str = r#"
[server]
listen = "127.0.0.1:0"
workers = 2

[[route]]
path = "/connection/websocket"
native = "centrifugo"
token_hmac_secret_env = "WEIR_TEST_CENTRIFUGO_SECRET"
max_publication = "4KiB"
ping_interval = "2s"
pong_timeout = "1s"
expired_close_delay = "1s"

[[route]]
path = "/rt/{topic}"
native = "pubsub"
realtime = true

[api]
listen = "127.0.0.1:0"
key_env = "WEIR_TEST_API_KEY"
max_body = "1MiB"

[[namespaces]]
name = "chat"
history_size = 1000
history_ttl = "5m"
force_recovery = true
presence = true
join_leave = true
allow_subscribe_for_client = true
allow_publish_for_subscriber = true
allow_publish_for_client = true
allow_presence_for_subscriber = true
allow_history_for_subscriber = true

[[namespaces]]
name = "tiny"
history_size = 2
history_ttl = "5m"
force_recovery = true
allow_subscribe_for_client = true
allow_publish_for_client = true

[[namespaces]]
name = "private"
presence = true

[[namespaces]]
name = "capped"
history_size = 10
history_ttl = "5m"
max_channels = 2
"#;

fn gateway() -> Gateway {
    // Every test sets the same value before its gateway reads it.
    std::env::set_var(SECRET_ENV, SECRET);
    std::env::set_var("WEIR_TEST_API_KEY", API_KEY);
    let config = Config::parse(ROUTES, Path::new(".")).expect("routes");
    Gateway::start(config)
}

/// Runs one scenario of centrifuge-client.mjs against `gw`; returns its
/// JSON summary.
async fn scenario(gw: &Gateway, name: &str) -> serde_json::Value {
    require_client("centrifuge");
    let url = gw.url("/connection/websocket");
    let name = name.to_string();
    tokio::task::spawn_blocking(move || node_scenario(&url, &name, &[]))
        .await
        .unwrap()
}

/// Connect, subscribe, publish between two clients (with publisher info
/// and offsets), presence and presence_stats, join/leave, history
/// (limit, reverse), and refusals: permission denied (103), unknown
/// namespace (102), a publication over max_publication (106).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn centrifuge_client_subscribes_publishes_and_sees_presence() {
    let gw = gateway();
    let out = scenario(&gw, "basics").await;
    assert_eq!(out["publications"], 1, "{out}");
}

/// A token with another key's signature is disconnected with 3500 (and
/// the client does not reconnect); an expired one gets error 109 and the
/// client connects with the token its getToken gives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_and_expired_tokens_get_centrifugos_codes() {
    let gw = gateway();
    let out = scenario(&gw, "badTokens").await;
    assert_eq!(out["forged"], 3500, "{out}");
}

/// Tokens that live 2 s are refreshed through getToken (the refresh
/// command) and the connection stays; one that is not refreshed is closed
/// with 3005 when its token expires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_refreshed_and_expired_connections_closed() {
    let gw = gateway();
    let out = scenario(&gw, "refresh").await;
    assert_eq!(out["expired"], 3005, "{out}");
}

/// A reader whose TCP connection is cut six times while a writer keeps
/// publishing receives every publication exactly once and in order, each
/// resubscribe reporting `recovered: true`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_client_recovers_every_missed_publication_once_in_order() {
    let gw = gateway();
    let out = scenario(&gw, "recovery").await;
    assert_eq!(out["published"], out["received"], "{out}");
    assert_eq!(out["cuts"], 6, "{out}");
}

/// A reader that missed more than `history_size` publications is told it
/// did not recover (`recovered: false`), with the channel's position.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recovery_past_the_history_window_is_reported_unrecovered() {
    let gw = gateway();
    let out = scenario(&gw, "tooOld").await;
    assert_eq!(out["recovered"], false, "{out}");
}

/// The server pings (`{}`) every ping_interval; a client that never
/// answers is closed with 3012 within ping_interval + pong_timeout. A
/// command before connect, and a frame that is not JSON, are bad requests
/// (3501).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pings_go_out_and_a_client_without_pongs_is_closed() {
    let gw = gateway();
    let url = gw.url("/connection/websocket");
    let mut ws = client(&url).await;
    let token = jsonwebtoken::encode(
        &jsonwebtoken::Header::default(),
        &serde_json::json!({"sub": "quiet"}),
        &jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap();
    let connect = format!(r#"{{"id":1,"connect":{{"token":"{token}"}}}}"#);
    ws.send(Message::text(connect)).await.unwrap();
    let reply = next(&mut ws).await.into_text().unwrap();
    let reply: serde_json::Value = serde_json::from_str(&reply).unwrap();
    assert_eq!(reply["id"], 1);
    assert_eq!(reply["connect"]["ping"], 2);
    assert_eq!(reply["connect"]["pong"], true);
    let ping = timeout(Duration::from_secs(4), ws.next()).await.unwrap();
    assert_eq!(ping.unwrap().unwrap().into_text().unwrap().as_str(), "{}");
    // No pong: closed with 3012 once pong_timeout passes.
    let close = timeout(Duration::from_secs(4), async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Close(frame))) => return frame.map(|f| u16::from(f.code)),
                Some(Ok(_)) => continue,
                _ => return None,
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(close, Some(3012));

    for bad in [r#"{"id":1,"subscribe":{"channel":"chat:a"}}"#, "not json"] {
        let mut ws = client(&url).await;
        ws.send(Message::text(bad)).await.unwrap();
        let code = timeout(STEP, async {
            loop {
                match ws.next().await {
                    Some(Ok(Message::Close(frame))) => return frame.map(|f| u16::from(f.code)),
                    Some(Ok(_)) => continue,
                    _ => return None,
                }
            }
        })
        .await
        .unwrap();
        assert_eq!(code, Some(3501), "{bad}");
    }
}

/// Every server API method through `cent` (Python): publish (with an
/// idempotency key, and b64data), broadcast, presence, presence_stats,
/// history (limit, since, reverse, position only), history_remove,
/// channels, info, disconnect; refusals: unknown namespace (102), presence
/// not enabled (108), wrong key (401), a body over max_body (413). A
/// `centrifuge` client subscribed to the channel receives the three API
/// publications, and a pubsub route with `realtime = true` gets their data
/// as plain text frames.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_api_answers_cent_and_reaches_subscribers() {
    let gw = gateway();
    let channel = "chat:api";
    let mut plain = client(&gw.url(&format!("/rt/{channel}"))).await;
    // The centrifuge listener: subscribed before cent publishes.
    let mut listener = std::process::Command::new("node")
        .args([
            "centrifuge-client.mjs",
            &gw.url("/connection/websocket"),
            SECRET,
            "listen",
            channel,
        ])
        .current_dir(clients_dir())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("node");
    let stdout = listener.stdout.take().unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stdout));
    let ready = tokio::task::spawn_blocking(move || {
        let first = lines.next().and_then(Result::ok);
        (first, lines)
    });
    let (first, lines) = timeout(STEP, ready).await.unwrap().unwrap();
    assert_eq!(first.as_deref(), Some("ready"));

    let python = clients_dir().join(".venv/bin/python");
    let api_url = format!("http://localhost:{}/api", gw.api.unwrap().port());
    let cent = tokio::task::spawn_blocking(move || {
        Command::new(python)
            .args(["cent_client.py", &api_url, API_KEY, "chat:api"])
            .current_dir(clients_dir())
            .output()
            .expect("python (scripts/test.sh installs the clients)")
    });
    let output = timeout(Duration::from_secs(60), cent)
        .await
        .unwrap()
        .unwrap();
    assert!(
        output.status.success(),
        "cent_client.py: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let out: serde_json::Value = serde_json::from_str(
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .last()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(out["refusals"]["unknown_namespace"], 102, "{out}");
    assert_eq!(out["refusals"]["no_presence"], 108, "{out}");
    assert_eq!(out["refusals"]["wrong_key"], 401, "{out}");
    assert_eq!(out["refusals"]["oversized"], 413, "{out}");
    assert_eq!(out["batch"].as_array().map(Vec::len), Some(3), "{out}");

    let summary = tokio::task::spawn_blocking(move || {
        let status = listener.wait().unwrap();
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut listener.stderr.take().unwrap(), &mut stderr).unwrap();
        (status, lines.map_while(Result::ok).last(), stderr)
    });
    let (status, last, stderr) = timeout(Duration::from_secs(40), summary)
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "listener: {stderr}");
    let last: serde_json::Value = serde_json::from_str(&last.unwrap()).unwrap();
    assert_eq!(last["received"], serde_json::json!([1, 2, 3]));

    // The pubsub route serving realtime channels got the data, plain (the
    // b64data publication as the JSON text it decoded to).
    let mut got = Vec::new();
    for _ in 0..3 {
        let msg = timeout(STEP, plain.next()).await.unwrap().unwrap().unwrap();
        let text = msg.into_text().unwrap().to_string();
        got.push(serde_json::from_str::<serde_json::Value>(&text).unwrap()["n"].clone());
    }
    assert_eq!(got, [1, 2, 3]);
}

/// A command frame over the route's `max_command` (64 KiB by default) is
/// closed with 1009 "message size limit exceeded", which the `centrifuge`
/// client reports as a message size disconnect and does not reconnect
/// after; whether it arrives whole or in fragments, the connection answers
/// nothing of it. A publish whose frame fits but whose data is over
/// `max_publication` (4 KiB here) is only refused (106): the connection
/// stays and answers the next command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_command_is_closed_with_1009() {
    let gw = gateway();
    let url = gw.url("/connection/websocket");
    let token = jsonwebtoken::encode(
        &jsonwebtoken::Header::default(),
        &serde_json::json!({"sub": "big"}),
        &jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap();
    let connect = format!(r#"{{"id":1,"connect":{{"token":"{token}"}}}}"#);
    let publish = |id: u32, bytes: usize| {
        format!(
            r#"{{"id":{id},"publish":{{"channel":"chat:big","data":{{"x":"{}"}}}}}}"#,
            "x".repeat(bytes)
        )
    };
    let mut ws = client(&url).await;
    ws.send(Message::text(connect.clone())).await.unwrap();
    let reply: serde_json::Value =
        serde_json::from_str(&next(&mut ws).await.into_text().unwrap()).unwrap();
    assert!(reply["connect"]["client"].is_string(), "{reply}");
    // Fits in a command, not in a publication: error 106, and the
    // connection goes on.
    ws.send(Message::text(publish(2, 8 << 10))).await.unwrap();
    let reply: serde_json::Value =
        serde_json::from_str(&next(&mut ws).await.into_text().unwrap()).unwrap();
    assert_eq!(reply["id"], 2);
    assert_eq!(reply["error"]["code"], 106, "{reply}");
    ws.send(Message::text(
        r#"{"id":3,"presence_stats":{"channel":"chat:big"}}"#,
    ))
    .await
    .unwrap();
    let reply: serde_json::Value =
        serde_json::from_str(&next(&mut ws).await.into_text().unwrap()).unwrap();
    assert_eq!(reply["id"], 3, "{reply}");
    // Over max_command (64 KiB): closed with 1009, no reply.
    ws.send(Message::text(publish(4, 65 << 10))).await.unwrap();
    assert_eq!(
        close_of(&mut ws).await,
        Some((1009, "message size limit exceeded".to_string()))
    );

    // The same command in 4 KiB fragments: counted as one message.
    let mut raw = Raw::connect(gw.addr, "/connection/websocket").await;
    raw.send(&frame(0x81, connect.as_bytes())).await;
    let (op, reply) = timeout(STEP, raw.next_frame()).await.unwrap().unwrap();
    assert_eq!(op, 0x81, "{}", String::from_utf8_lossy(&reply));
    let big = publish(5, 65 << 10).into_bytes();
    let pieces: Vec<&[u8]> = big.chunks(4 << 10).collect();
    for (i, piece) in pieces.iter().enumerate() {
        let fin = if i + 1 == pieces.len() { 0x80 } else { 0 };
        let op = if i == 0 { 0x1 } else { 0x0 };
        raw.send(&frame(fin | op, piece)).await;
    }
    assert_eq!(timeout(STEP, raw.close_code()).await.unwrap(), Some(1009));
}

/// The close frame's code and reason; fails if a text frame comes first.
async fn close_of(ws: &mut Ws) -> Option<(u16, String)> {
    timeout(STEP, async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Close(frame))) => {
                    return frame.map(|f| (u16::from(f.code), f.reason.to_string()))
                }
                Some(Ok(Message::Text(t))) => panic!("answered an oversized command: {t}"),
                Some(Ok(_)) => continue,
                _ => return None,
            }
        }
    })
    .await
    .expect("closed in time")
}

/// The `centrifuge` client whose publish is over `max_command` is
/// disconnected with its "message size limit" code (3, from 1009) and
/// does not reconnect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn centrifuge_client_over_max_command_is_disconnected_for_good() {
    let gw = gateway();
    let out = scenario(&gw, "oversized").await;
    assert_eq!(out["code"], 3, "{out}");
    assert_eq!(out["reason"], "message size limit exceeded", "{out}");
    assert_eq!(out["state"], "disconnected", "{out}");
}

/// One server API call with the test's key; the answer's JSON.
async fn api_call(gw: &Gateway, method: &str, body: &str) -> serde_json::Value {
    server_api(gw, API_KEY, method, body).await
}

/// docs/api/openapi.yaml stays true to the API: every method it lists is
/// served (never 104), and every other method of Centrifugo's HTTP API
/// answers 104, so a method added to api.rs without the document fails
/// here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_lists_exactly_the_methods_served() {
    let doc = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/api/openapi.yaml"),
    )
    .unwrap();
    let documented: Vec<&str> = doc
        .lines()
        .filter_map(|l| l.strip_prefix("  /api/")?.strip_suffix(':'))
        .collect();
    assert!(documented.contains(&"publish"), "{documented:?}");
    // Centrifugo v5's server API methods.
    let centrifugo = [
        "publish",
        "broadcast",
        "subscribe",
        "unsubscribe",
        "disconnect",
        "refresh",
        "presence",
        "presence_stats",
        "history",
        "history_remove",
        "channels",
        "info",
        "batch",
        "connections",
        "channel_info",
        "user_block",
        "user_unblock",
        "revoke_token",
        "invalidate_user_tokens",
        "update_user_status",
        "get_user_status",
        "delete_user_status",
        "device_register",
        "send_push_notification",
    ];
    for name in &documented {
        assert!(centrifugo.contains(name), "{name} is not Centrifugo's");
    }
    let gw = gateway();
    for method in centrifugo {
        let answer = api_call(&gw, method, r#"{"channel":"chat:doc"}"#).await;
        let code = &answer["error"]["code"];
        match method {
            m if documented.contains(&m) => assert_ne!(code, 104, "{method}: {answer}"),
            _ => assert_eq!(code, 104, "{method} is served but not documented: {answer}"),
        }
    }
}

/// Runs centrifuge-client.mjs `scenario` against `url` with `args`; its
/// JSON summary (the last line).
fn node_scenario(url: &str, scenario: &str, args: &[&str]) -> serde_json::Value {
    let script = ["centrifuge-client.mjs", url, SECRET, scenario];
    let args: Vec<&str> = script.iter().chain(args).copied().collect();
    node_summary(scenario, &args)
}

/// RS256 and ES256 tokens checked with the public keys of a JWKS file
/// (chosen by `kid`), with no HMAC secret set: a key not in the file, a
/// signature that does not match its `kid`'s key, and an HS256 token are
/// refused (3500). The file rotated and the gateway reloaded (SIGHUP): the
/// removed key's tokens are refused, the added key's accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rs256_and_es256_tokens_follow_the_jwks_file_across_reloads() {
    let dir = std::env::temp_dir().join(format!("weir-jwks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dir_arg = dir.to_str().unwrap().to_string();
    let keys = node_scenario("ws://unused", "keys", &[&dir_arg]);
    assert!(keys.is_null(), "{keys}");
    let jwks = dir.join("jwks.json");
    let routes = format!(
        "[[route]]\npath = \"/connection/websocket\"\nnative = \"centrifugo\"\n\
         token_hmac_secret_env = \"WEIR_TEST_NO_SUCH_SECRET\"\ntoken_jwks_file = \"{}\"\n",
        jwks.display()
    );
    let mut weir = WeirProcess::start("workers = 1", &routes, "warn", Stdio::null()).await;
    let url = weir.url("/connection/websocket");
    let (u, d) = (url.clone(), dir_arg.clone());
    let before = tokio::task::spawn_blocking(move || node_scenario(&u, "jwks", &[&d, "before"]))
        .await
        .unwrap();
    assert_eq!(before["k1"], "connected", "{before}");
    assert_eq!(before["k2"], "connected", "{before}");
    assert_eq!(before["k3"], 3500, "a key not in the file: {before}");
    assert_eq!(before["swapped"], 3500, "{before}");
    assert_eq!(before["hmac"], 3500, "no HMAC secret is set: {before}");

    std::fs::copy(dir.join("jwks-rotated.json"), &jwks).unwrap();
    let hup = Command::new("kill")
        .args(["-HUP", &weir.child.id().to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
    let after =
        tokio::task::spawn_blocking(move || node_scenario(&url, "jwks", &[&dir_arg, "after"]))
            .await
            .unwrap();
    assert_eq!(after["k3"], "connected", "the added key: {after}");
    assert_eq!(after["k2"], "connected", "{after}");
    assert_eq!(after["k1"], 3500, "the removed key: {after}");
    assert!(weir.child.try_wait().unwrap().is_none(), "weir exited");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `[api] max_connections` bounds the API's connections: one more is
/// answered 503 and closed, and a freed place serves again. A namespace's
/// `max_channels` bounds the channels it holds: a publish that would make
/// one more is refused with 106, while the channels held keep working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_bounds_its_connections_and_a_namespace_its_channels() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    std::env::set_var(SECRET_ENV, SECRET);
    std::env::set_var("WEIR_TEST_API_KEY", API_KEY);
    let routes = ROUTES.replace(
        "max_body = \"1MiB\"",
        "max_body = \"1MiB\"\nmax_connections = 2",
    );
    let gw = Gateway::start(Config::parse(&routes, Path::new(".")).expect("routes"));
    let addr = gw.api.expect("[api]");

    let first = tokio::net::TcpStream::connect(addr).await.unwrap();
    let second = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut third = tokio::net::TcpStream::connect(addr).await.unwrap();
    third
        .write_all(b"POST /api/info HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    timeout(STEP, third.read_to_end(&mut answer))
        .await
        .unwrap()
        .unwrap();
    let answer = String::from_utf8(answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("max_connections"), "{answer}");

    drop(first);
    drop(second);
    // The places free once the gateway sees the closes.
    let deadline = std::time::Instant::now() + STEP;
    loop {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = format!(
            "POST /api/info HTTP/1.1\r\nhost: {addr}\r\nx-api-key: {API_KEY}\r\n\
             content-length: 0\r\nconnection: close\r\n\r\n"
        );
        s.write_all(request.as_bytes()).await.unwrap();
        let mut got = Vec::new();
        timeout(STEP, s.read_to_end(&mut got))
            .await
            .unwrap()
            .unwrap();
        if got.starts_with(b"HTTP/1.1 200") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no place freed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    for channel in ["capped:a", "capped:b"] {
        let out = api_call(
            &gw,
            "publish",
            &format!(r#"{{"channel":"{channel}","data":{{}}}}"#),
        )
        .await;
        assert_eq!(out["result"]["offset"], 1, "{channel}: {out}");
    }
    let out = api_call(&gw, "publish", r#"{"channel":"capped:c","data":{}}"#).await;
    assert_eq!(out["error"]["code"], 106, "{out}");
    let out = api_call(&gw, "publish", r#"{"channel":"capped:a","data":{}}"#).await;
    assert_eq!(out["result"]["offset"], 2, "{out}");
    // Other namespaces have their own bound.
    let out = api_call(&gw, "publish", r#"{"channel":"tiny:x","data":{}}"#).await;
    assert_eq!(out["result"]["offset"], 1, "{out}");
}

/// A PEM public key file (`token_public_key_file`), RSA or EC, with no
/// HMAC secret and no JWKS file: tokens signed with its key are accepted
/// whatever `kid` they name, others refused (3500); replaced and reloaded
/// (SIGHUP), the new key's tokens are accepted and the old one's refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pem_public_key_file_checks_tokens_and_follows_reloads() {
    let dir = std::env::temp_dir().join(format!("weir-pem-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dir_arg = dir.to_str().unwrap().to_string();
    let keys = node_scenario("ws://unused", "keys", &[&dir_arg]);
    assert!(keys.is_null(), "{keys}");
    let pem = dir.join("public.pem");
    std::fs::copy(dir.join("k1.pub.pem"), &pem).unwrap();
    let routes = format!(
        "[[route]]\npath = \"/connection/websocket\"\nnative = \"centrifugo\"\n\
         token_hmac_secret_env = \"WEIR_TEST_NO_SUCH_SECRET\"\ntoken_public_key_file = \"{}\"\n",
        pem.display()
    );
    let mut weir = WeirProcess::start("workers = 1", &routes, "warn", Stdio::null()).await;
    let url = weir.url("/connection/websocket");
    let phase = |phase: &'static str| {
        let (u, d) = (url.clone(), dir_arg.clone());
        tokio::task::spawn_blocking(move || node_scenario(&u, "jwks", &[&d, phase]))
    };
    let rsa = phase("before").await.unwrap();
    assert_eq!(rsa["k1"], "connected", "{rsa}");
    assert_eq!(
        rsa["swapped"], "connected",
        "k1's signature, k2's kid: {rsa}"
    );
    assert_eq!(rsa["k2"], 3500, "another key: {rsa}");
    assert_eq!(rsa["k3"], 3500, "another key: {rsa}");
    assert_eq!(rsa["hmac"], 3500, "no HMAC secret is set: {rsa}");

    let hup = |weir: &WeirProcess| {
        let ok = Command::new("kill")
            .args(["-HUP", &weir.child.id().to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
    };
    std::fs::copy(dir.join("k3.pub.pem"), &pem).unwrap();
    hup(&weir);
    let rotated = phase("after").await.unwrap();
    assert_eq!(rotated["k3"], "connected", "the new key: {rotated}");
    assert_eq!(rotated["k1"], 3500, "the old key: {rotated}");

    std::fs::copy(dir.join("k2.pub.pem"), &pem).unwrap();
    hup(&weir);
    let ec = phase("ec").await.unwrap();
    assert_eq!(ec["k2"], "connected", "an EC key: {ec}");
    assert_eq!(ec["k3"], 3500, "{ec}");
    assert!(weir.child.try_wait().unwrap().is_none(), "weir exited");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The server API's `subscribe`, `unsubscribe` and `disconnect` of a user,
/// called with `cent`, reach a `centrifuge` client: a server-side
/// subscription (with its publications, positioned), the end of it and of
/// a subscription the client made (code 2000, no resubscribe), 102 for an
/// unknown namespace, and the disconnect (3503 by default).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_subscribes_and_unsubscribes_a_users_connections() {
    let gw = gateway();
    let url = gw.url("/connection/websocket");
    let api_url = format!("http://localhost:{}/api", gw.api.unwrap().port());
    let out = tokio::task::spawn_blocking(move || {
        node_scenario(&url, "userCommands", &[&api_url, API_KEY])
    })
    .await
    .unwrap();
    assert_eq!(out["serverSubscribed"], "chat:pushed", "{out}");
    assert_eq!(out["positioned"], true, "{out}");
    assert_eq!(out["publication"], 1, "{out}");
    assert_eq!(out["ownUnsubscribed"], 2000, "{out}");
    assert_eq!(out["unknownNamespace"], 102, "{out}");
    assert_eq!(out["disconnected"], 3503, "{out}");
}

/// Subscription tokens expire as connection tokens do: the subscribe reply
/// says when (`expires`, `ttl`), the `centrifuge` client renews the token
/// through `sub_refresh` and keeps its subscription; a subscription whose
/// token is not renewed is ended with an unsubscribe push, 2501, after its
/// expiry plus `expired_close_delay` (1 s here), while one renewed in time
/// stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscription_tokens_are_refreshed_or_their_subscriptions_end() {
    let gw = gateway();
    let url = gw.url("/connection/websocket");
    let u = url.clone();
    let out = tokio::task::spawn_blocking(move || node_scenario(&u, "subRefresh", &[]))
        .await
        .unwrap();
    assert!(
        out["tokens"].as_u64().unwrap() >= 3,
        "refreshed twice: {out}"
    );
    assert_eq!(out["changes"], serde_json::json!([]), "{out}");
    assert_eq!(out["state"], "subscribed", "{out}");

    let sign = |claims: serde_json::Value| {
        jsonwebtoken::encode(
            &jsonwebtoken::Header::default(),
            &claims,
            &jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes()),
        )
        .unwrap()
    };
    let unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let grant = |channel: &str, ttl: u64| {
        sign(serde_json::json!({"sub": "exp", "channel": channel, "exp": unix + ttl}))
    };
    let mut ws = client(&url).await;
    let connect = format!(
        r#"{{"id":1,"connect":{{"token":"{}"}}}}"#,
        sign(serde_json::json!({"sub": "exp"}))
    );
    ws.send(Message::text(connect)).await.unwrap();
    let reply: serde_json::Value = answer(&mut ws).await;
    assert!(reply["connect"]["client"].is_string(), "{reply}");
    for (id, channel) in [(2, "private:lapses"), (3, "private:renewed")] {
        let subscribe = format!(
            r#"{{"id":{id},"subscribe":{{"channel":"{channel}","token":"{}"}}}}"#,
            grant(channel, 2)
        );
        ws.send(Message::text(subscribe)).await.unwrap();
        let reply: serde_json::Value = answer(&mut ws).await;
        assert_eq!(reply["id"], id, "{reply}");
        assert_eq!(reply["subscribe"]["expires"], true, "{reply}");
        assert!(reply["subscribe"]["ttl"].as_u64().unwrap() <= 2, "{reply}");
    }
    let refresh = format!(
        r#"{{"id":4,"sub_refresh":{{"channel":"private:renewed","token":"{}"}}}}"#,
        grant("private:renewed", 600)
    );
    ws.send(Message::text(refresh)).await.unwrap();
    let reply: serde_json::Value = answer(&mut ws).await;
    assert_eq!(reply["id"], 4, "{reply}");
    assert_eq!(reply["sub_refresh"]["expires"], true, "{reply}");
    // Within 2 s + 1 s of grace (and a margin): the lapsed one ends.
    let push = timeout(Duration::from_secs(6), answer(&mut ws))
        .await
        .expect("an unsubscribe push");
    assert_eq!(push["push"]["channel"], "private:lapses", "{push}");
    assert_eq!(push["push"]["unsubscribe"]["code"], 2501, "{push}");
    // The renewed one is still there: a refresh of it is answered.
    let again = format!(
        r#"{{"id":5,"sub_refresh":{{"channel":"private:renewed","token":"{}"}}}}"#,
        grant("private:renewed", 600)
    );
    ws.send(Message::text(again)).await.unwrap();
    let reply: serde_json::Value = answer(&mut ws).await;
    assert_eq!(reply["id"], 5, "{reply}");
    assert!(reply["error"].is_null(), "{reply}");
}

/// The next message that is not the server's ping (`{}`, answered with a
/// pong so the connection stays), as JSON.
async fn answer(ws: &mut Ws) -> serde_json::Value {
    loop {
        let text = next(ws).await.into_text().unwrap().to_string();
        if text == "{}" {
            ws.send(Message::text("{}")).await.unwrap();
            continue;
        }
        return serde_json::from_str(&text).unwrap();
    }
}
