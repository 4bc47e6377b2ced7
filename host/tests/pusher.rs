//! The pusher route kind against the real `pusher-js` client and the real
//! `pusher` server library (pinned in host/tests/clients/package.json,
//! driven by pusher-client.mjs): public, private (with a bad signature
//! refused) and presence channels, client events (relayed, never echoed,
//! rate-limited, refused where the app disables them), cache channels,
//! signin with `sendToUser` and `terminateUserConnections`, the HTTP API's
//! queries, batch triggers and `socket_id` exclusion, an unknown key, and
//! two apps isolated. Raw clients check what pusher-js hides: the server's
//! ping and the 4201 close, the payload, channel, presence-member and
//! connection (4004) limits, protocol version refusals, and that the
//! gateway's own core (centrifugo routes, the server API) never reaches a
//! pusher channel. In-process and `weir serve` checks: an unset secret
//! stops the start; a reload that changes apps is reported.

mod common;

use common::node::{node_summary, require_client};
use common::*;
use futures_util::{SinkExt, StreamExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::Message;
use weir_config::Config;

const ROUTES: &str = r#"
[server]
listen = "127.0.0.1:0"
workers = 2

[[route]]
path = "/app/{key}"
native = "pusher"

[[route.apps]]
id = "1"
key = "key1"
secret_env = "WEIR_TEST_PUSHER_SECRET1"
client_events = true
client_events_per_second = 3
user_authentication = true

[[route.apps]]
id = "2"
key = "key2"
secret_env = "WEIR_TEST_PUSHER_SECRET2"

[[route.apps]]
id = "3"
key = "key3"
secret_env = "WEIR_TEST_PUSHER_SECRET1"
activity_timeout = "1s"
max_connections = 1
max_payload = "1KiB"
max_channels_per_connection = 2

[[route.apps]]
id = "4"
key = "key4"
secret_env = "WEIR_TEST_PUSHER_SECRET2"
max_presence_members = 1

[[route]]
path = "/rt/{topic}"
native = "pubsub"
realtime = true

[api]
listen = "127.0.0.1:0"
key_env = "WEIR_TEST_PUSHER_API_KEY"
"#;

fn gateway() -> Gateway {
    // Every test sets the same values before its gateway reads them.
    std::env::set_var("WEIR_TEST_PUSHER_SECRET1", "secret1");
    std::env::set_var("WEIR_TEST_PUSHER_SECRET2", "secret2");
    std::env::set_var("WEIR_TEST_PUSHER_API_KEY", "pusher-test-api-key-0123456789");
    let config = Config::parse(ROUTES, Path::new(".")).expect("routes");
    Gateway::start(config)
}

/// Runs one scenario of pusher-client.mjs against `gw`; its JSON summary.
async fn scenario(gw: &Gateway, name: &str) -> serde_json::Value {
    require_client("pusher-js");
    let (host, port) = (gw.addr.ip().to_string(), gw.addr.port().to_string());
    let name = name.to_string();
    tokio::task::spawn_blocking(move || {
        node_summary(&name, &["pusher-client.mjs", &host, &port, &name])
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn public_channel_trigger_batch_exclusion_and_channel_queries() {
    let gw = gateway();
    let out = scenario(&gw, "public").await;
    assert_eq!(out["a"], 2, "{out}");
    assert_eq!(out["b"], 3, "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_channel_is_authorised_and_a_bad_signature_refused() {
    let gw = gateway();
    let out = scenario(&gw, "private").await;
    assert_eq!(out["refused"], 401, "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presence_members_join_and_leave_and_are_queried() {
    let gw = gateway();
    let out = scenario(&gw, "presence").await;
    assert_eq!(out["members"], 2, "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_events_are_relayed_limited_and_refused_where_disabled() {
    let gw = gateway();
    let out = scenario(&gw, "client_events").await;
    assert_eq!(out["limited"], 4301, "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_channels_miss_then_replay_the_last_event() {
    let gw = gateway();
    let out = scenario(&gw, "cache").await;
    assert_eq!(out["replayed"], 2, "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signin_send_to_user_and_terminate_connections() {
    let gw = gateway();
    let out = scenario(&gw, "user").await;
    assert_eq!(out["terminated"], true, "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_app_key_is_refused_with_4001() {
    let gw = gateway();
    let out = scenario(&gw, "unknown_key").await;
    assert_eq!(out["code"], 4001, "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_apps_never_share_a_channel() {
    let gw = gateway();
    let out = scenario(&gw, "isolation").await;
    assert_eq!(
        (out["one"].clone(), out["two"].clone()),
        (1.into(), 1.into())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_request_with_a_bad_signature_gets_401() {
    let gw = gateway();
    let out = scenario(&gw, "bad_api_signature").await;
    assert_eq!(out["status"], 401, "{out}");
}

/// The next text message as JSON, within 5 s.
async fn next_json(ws: &mut Ws) -> serde_json::Value {
    loop {
        match timeout(Duration::from_secs(5), ws.next()).await {
            Ok(Some(Ok(Message::Text(t)))) => return serde_json::from_str(&t).unwrap(),
            Ok(Some(Ok(Message::Close(frame)))) => {
                return serde_json::json!({"closed": frame.map(|f| u16::from(f.code))})
            }
            Ok(Some(Ok(_))) => continue,
            other => panic!("no message: {other:?}"),
        }
    }
}

/// `data` of a Pusher message, parsed when it is a string holding JSON.
fn data(msg: &serde_json::Value) -> serde_json::Value {
    match &msg["data"] {
        serde_json::Value::String(s) => serde_json::from_str(s).unwrap_or(msg["data"].clone()),
        other => other.clone(),
    }
}

/// App 3 (activity_timeout 1 s): a silent client gets `pusher:ping`, and
/// with no answer the connection closes with 4201. The app holds one
/// connection: a second is refused with `pusher:error` 4004 and close
/// 4004. A third channel past `max_channels_per_connection` (2) gets
/// `pusher:subscription_error`. A message over `max_payload` (1 KiB) gets
/// `pusher:error`, and the connection stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn activity_timeout_connection_limit_and_payload_limit() {
    let gw = gateway();
    let mut ws = client(&gw.url("/app/key3?protocol=7")).await;
    let hello = next_json(&mut ws).await;
    assert_eq!(hello["event"], "pusher:connection_established", "{hello}");
    assert_eq!(data(&hello)["activity_timeout"], 1, "{hello}");

    let mut second = client(&gw.url("/app/key3?protocol=7")).await;
    let refused = next_json(&mut second).await;
    assert_eq!(refused["event"], "pusher:error", "{refused}");
    assert_eq!(data(&refused)["code"], 4004, "{refused}");
    assert_eq!(next_json(&mut second).await["closed"], 4004);

    for name in ["a", "b", "c"] {
        let sub = format!(r#"{{"event":"pusher:subscribe","data":{{"channel":"{name}"}}}}"#);
        ws.send(Message::Text(sub.into())).await.unwrap();
    }
    for name in ["a", "b"] {
        let ok = next_json(&mut ws).await;
        assert_eq!(
            ok["event"], "pusher_internal:subscription_succeeded",
            "{ok}"
        );
        assert_eq!(ok["channel"], name);
    }
    let over = next_json(&mut ws).await;
    assert_eq!(over["event"], "pusher:subscription_error", "{over}");
    assert_eq!(
        (over["channel"].clone(), data(&over)["status"].clone()),
        ("c".into(), 400.into())
    );

    let big = format!(
        r#"{{"event":"pusher:subscribe","data":{{"channel":"{}"}}}}"#,
        "x".repeat(2000)
    );
    ws.send(Message::Text(big.into())).await.unwrap();
    let too_big = next_json(&mut ws).await;
    assert_eq!(too_big["event"], "pusher:error", "{too_big}");
    ws.send(Message::Text(r#"{"event":"pusher:ping","data":{}}"#.into()))
        .await
        .unwrap();
    assert_eq!(next_json(&mut ws).await["event"], "pusher:pong");

    // Now silent: the server pings after 1 s, then closes 1 s later.
    let ping = next_json(&mut ws).await;
    assert_eq!(ping["event"], "pusher:ping", "{ping}");
    let error = next_json(&mut ws).await;
    assert_eq!(data(&error)["code"], 4201, "{error}");
    assert_eq!(next_json(&mut ws).await["closed"], 4201);
}

/// A realtime pubsub route publishing on the gateway's core (the one
/// centrifugo routes and the server API use), on the pusher channel's name
/// and on the name the app's channel has in the pusher route's core
/// (`p0:shared`), reaches no pusher subscriber: the pusher route's
/// channels live in a core of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_routes_never_reach_a_pusher_channel() {
    let gw = gateway();
    let mut ws = client(&gw.url("/app/key1?protocol=7")).await;
    let hello = next_json(&mut ws).await;
    assert_eq!(hello["event"], "pusher:connection_established");
    ws.send(Message::Text(
        r#"{"event":"pusher:subscribe","data":{"channel":"shared"}}"#.into(),
    ))
    .await
    .unwrap();
    let ok = next_json(&mut ws).await;
    assert_eq!(
        ok["event"], "pusher_internal:subscription_succeeded",
        "{ok}"
    );
    let mut witness = client(&gw.url("/rt/shared")).await;
    let mut other = client(&gw.url("/rt/p0:shared")).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    // A pubsub client publishing on its route's topic of the same names.
    other
        .send(Message::Text(r#"{"leak":1}"#.into()))
        .await
        .unwrap();
    // The server API publishing on the gateway's core, as a backend of the
    // centrifugo routes does: it reaches the core's subscribers...
    let body = r#"{"channel":"shared","data":{"leak":2}}"#;
    let request = format!(
        "POST /api/publish HTTP/1.1\r\nHost: {api}\r\nX-API-Key: pusher-test-api-key-0123456789\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len(),
        api = gw.api.expect("[api]"),
    );
    let (_, status) = Raw::request(gw.api.unwrap(), &request).await;
    assert_eq!(status, 200);
    assert_eq!(
        next(&mut witness).await,
        Message::Text(r#"{"leak":2}"#.into())
    );
    // ... and not the pusher channel of the same name.
    // Something the pusher client must see, after the publishes above.
    ws.send(Message::Text(r#"{"event":"pusher:ping","data":{}}"#.into()))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let answer = next_json(&mut ws).await;
    assert_eq!(answer["event"], "pusher:pong", "a publish leaked: {answer}");
}

/// A plain HTTP request on the API path is answered by the route (404 for
/// an unknown app, 401 unsigned), and a body over the route's limit gets
/// 413 before the route sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_api_path_refuses_unknown_apps_unsigned_and_oversized_requests() {
    let gw = gateway();
    let addr = gw.addr;
    let head = |method: &str, path: &str, len: usize| {
        format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {len}\r\n\
             Connection: close\r\n\r\n"
        )
    };
    let (_, status) = Raw::request(gw.addr, &head("GET", "/apps/9/channels", 0)).await;
    assert_eq!(status, 404);
    let (_, status) = Raw::request(gw.addr, &head("GET", "/apps/1/channels", 0)).await;
    assert_eq!(status, 401);
    let mut stream = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let len = 4 << 20;
    stream
        .write_all(head("POST", "/apps/1/events", len).as_bytes())
        .await
        .unwrap();
    let _ = stream.write_all(&vec![b'x'; 512 << 10]).await;
    let mut answer = vec![0u8; 64];
    let n = timeout(Duration::from_secs(5), stream.read(&mut answer))
        .await
        .unwrap()
        .unwrap();
    let answer = String::from_utf8_lossy(&answer[..n]);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
}

/// Connects a raw client to `path`; its socket id.
async fn connect_raw(gw: &Gateway, path: &str) -> (Ws, String) {
    connect_raw_at(&gw.url(path)).await
}

/// A presence subscribe of `user`, signed with app 4's secret.
async fn join_presence(ws: &mut Ws, socket_id: &str, channel: &str, user: &str) {
    let channel_data = format!(r#"{{"user_id":"{user}"}}"#);
    let app = weir_pusher::AppKey {
        key: "key4",
        secret: b"secret2",
    };
    let auth = weir_pusher::auth::sign_channel(&app, socket_id, channel, Some(&channel_data));
    let msg = serde_json::json!({
        "event": "pusher:subscribe",
        "data": {"channel": channel, "auth": auth, "channel_data": channel_data},
    });
    ws.send(Message::Text(msg.to_string().into()))
        .await
        .unwrap();
}

/// App 4 holds one member per presence channel: a second user is refused
/// with `pusher:subscription_error` (LimitReached), and the first member
/// saw no `member_added`. A connection without a protocol version gets
/// 4008, one with an unsupported version 4007.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presence_member_limit_and_protocol_versions() {
    let gw = gateway();
    let (mut a, id_a) = connect_raw(&gw, "/app/key4?protocol=7").await;
    join_presence(&mut a, &id_a, "presence-small", "alice").await;
    let ok = next_json(&mut a).await;
    assert_eq!(
        ok["event"], "pusher_internal:subscription_succeeded",
        "{ok}"
    );
    assert_eq!(data(&ok)["presence"]["count"], 1, "{ok}");
    let (mut b, id_b) = connect_raw(&gw, "/app/key4?protocol=7").await;
    join_presence(&mut b, &id_b, "presence-small", "bob").await;
    let full = next_json(&mut b).await;
    assert_eq!(full["event"], "pusher:subscription_error", "{full}");
    assert_eq!(data(&full)["type"], "LimitReached", "{full}");
    a.send(Message::Text(r#"{"event":"pusher:ping","data":{}}"#.into()))
        .await
        .unwrap();
    let answer = next_json(&mut a).await;
    assert_eq!(answer["event"], "pusher:pong", "alice saw: {answer}");

    for (query, code) in [("", 4008), ("?protocol=3", 4007), ("?protocol=x", 4006)] {
        let mut ws = client(&gw.url(&format!("/app/key4{query}"))).await;
        let refused = next_json(&mut ws).await;
        assert_eq!(data(&refused)["code"], code, "{query}: {refused}");
        assert_eq!(next_json(&mut ws).await["closed"], code, "{query}");
    }
}

/// An app whose `secret_env` names an unset variable stops the start, and
/// the error names the app's line and the variable (a secret never sits
/// in the file, so there is nothing to fall back on).
#[test]
fn an_unset_secret_stops_the_start_with_the_apps_line() {
    let routes = "[[route]]\npath = \"/app/{key}\"\nnative = \"pusher\"\n\
                  [[route.apps]]\nid = \"1\"\nkey = \"k\"\nsecret_env = \"WEIR_TEST_PUSHER_UNSET\"\n";
    let mut config = Config::parse(routes, Path::new(".")).expect("routes");
    config.server.listen = "127.0.0.1:0".parse().unwrap();
    let err = match weir::server::Server::bind(config) {
        Ok(_) => panic!("started without the app's secret"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("line 4") && err.contains("WEIR_TEST_PUSHER_UNSET"),
        "{err}"
    );
}

/// A reload (SIGHUP) that changes a kept pusher route's apps is reported
/// (the apps are read at start) and changes nothing: client events stay
/// off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_changes_apps_is_reported_and_changes_nothing() {
    use std::io::BufRead;
    std::env::set_var("WEIR_TEST_PUSHER_SECRET2", "secret2");
    let app = "[[route]]\npath = \"/app/{key}\"\nnative = \"pusher\"\n\
               [[route.apps]]\nid = \"2\"\nkey = \"key2\"\nsecret_env = \"WEIR_TEST_PUSHER_SECRET2\"\n";
    let mut weir = WeirProcess::start("workers = 1", app, "warn", Stdio::piped()).await;
    let file = std::env::temp_dir()
        .join(format!(
            "weir-process-{}-{}",
            std::process::id(),
            weir.addr.port()
        ))
        .join("routes.toml");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, format!("{text}client_events = true\n")).unwrap();
    let hup = Command::new("kill")
        .args(["-HUP", &weir.child.id().to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
    let stderr = weir.child.stderr.take().unwrap();
    let reported = tokio::task::spawn_blocking(move || {
        std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .find(|line| line.contains("apps are read when it starts"))
    });
    let line = timeout(Duration::from_secs(10), reported)
        .await
        .expect("the reload was not reported")
        .unwrap();
    assert!(line.is_some(), "the reload was not reported");
    // The route serves on as it was: client events still refused.
    let (mut ws, _) = connect_raw_at(&weir.url("/app/key2?protocol=7")).await;
    ws.send(Message::Text(
        r#"{"event":"client-x","channel":"private-a","data":{}}"#.into(),
    ))
    .await
    .unwrap();
    let refused = next_json(&mut ws).await;
    assert_eq!(data(&refused)["code"], 4301, "{refused}");
    assert!(
        data(&refused)["message"]
            .as_str()
            .unwrap()
            .contains("not enabled"),
        "{refused}"
    );
}

async fn connect_raw_at(url: &str) -> (Ws, String) {
    let mut ws = client(url).await;
    let hello = next_json(&mut ws).await;
    assert_eq!(hello["event"], "pusher:connection_established", "{hello}");
    let socket_id = data(&hello)["socket_id"].as_str().unwrap().to_string();
    (ws, socket_id)
}
