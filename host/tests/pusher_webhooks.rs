//! A pusher route's webhooks and per-app metrics against real clients:
//! `pusher-js` connections drive the events, and receivers in Node check
//! every request with the `pusher` library's own `webhook().isValid()`
//! (host/tests/clients/pusher-webhooks.mjs). Each event kind arrives
//! exactly once and in order, close events share a POST, a receiver that
//! fails gets the batch once it recovers, a receiver that never answers
//! slows no connection while its queue stays within `max_queue` (the
//! dropped counter rises), and `/metrics` shows each app's figures.

mod common;

use common::*;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use weir_config::Config;

/// The routes file, with the receivers' ports filled in.
fn routes(ok: u16, failing: u16, silent: u16) -> String {
    format!(
        r#"
[server]
listen = "127.0.0.1:0"
workers = 2

[[route]]
path = "/app/{{key}}"
native = "pusher"

[[route.apps]]
id = "1"
key = "key1"
secret_env = "WEIR_TEST_WEBHOOK_SECRET1"
client_events = true

[[route.apps.webhooks]]
url = "http://127.0.0.1:{ok}/pusher/webhooks"
events = ["channel_occupied", "channel_vacated", "member_added", "member_removed",
          "client_event", "cache_miss"]

[[route.apps]]
id = "2"
key = "key2"
secret_env = "WEIR_TEST_WEBHOOK_SECRET2"

[[route.apps.webhooks]]
url = "http://127.0.0.1:{failing}/hooks"
events = ["channel_occupied", "channel_vacated"]

[[route.apps]]
id = "3"
key = "key3"
secret_env = "WEIR_TEST_WEBHOOK_SECRET3"
client_events = true
client_events_per_second = 1000

[[route.apps.webhooks]]
url = "http://127.0.0.1:{silent}/never"
events = ["client_event"]
timeout = "1s"
max_queue = "4KiB"
"#
    )
}

fn clients_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/clients")
}

/// Runs `scenario` of pusher-webhooks.mjs: its receivers start first, then
/// a gateway whose routes name them; the scenario's JSON summary and the
/// gateway (still running, for `/metrics`).
async fn scenario(name: &str) -> (serde_json::Value, Gateway) {
    assert!(
        clients_dir().join("node_modules/pusher-js").exists(),
        "host/tests/clients/node_modules/pusher-js missing: run npm ci there"
    );
    std::env::set_var("WEIR_TEST_WEBHOOK_SECRET1", "secret1");
    std::env::set_var("WEIR_TEST_WEBHOOK_SECRET2", "secret2");
    std::env::set_var("WEIR_TEST_WEBHOOK_SECRET3", "secret3");
    let name = name.to_string();
    let (config_tx, config_rx) = std::sync::mpsc::channel::<String>();
    let (addr_tx, addr_rx) = std::sync::mpsc::channel::<std::net::SocketAddr>();
    let node = tokio::task::spawn_blocking(move || {
        let mut child = Command::new("node")
            .args(["pusher-webhooks.mjs", &name])
            .current_dir(clients_dir())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("node");
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut first = String::new();
        stdout.read_line(&mut first).unwrap();
        let ports: serde_json::Value = serde_json::from_str(&first)
            .unwrap_or_else(|_| panic!("{name}: no receivers line: {first:?}"));
        let port = |i: usize| ports["receivers"][i].as_u64().unwrap() as u16;
        config_tx.send(routes(port(0), port(1), port(2))).unwrap();
        let addr = addr_rx.recv().unwrap();
        let mut stdin = child.stdin.take().unwrap();
        writeln!(stdin, "{} {}", addr.ip(), addr.port()).unwrap();
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
        let output = child.wait_with_output().unwrap();
        assert!(
            output.status.success(),
            "{name}: {}\n{rest}{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_str::<serde_json::Value>(rest.lines().last().unwrap_or("null")).unwrap()
    });
    let text = tokio::task::spawn_blocking(move || config_rx.recv().unwrap())
        .await
        .unwrap();
    let config = Config::parse(&text, Path::new(".")).expect("routes");
    let gw = Gateway::start(config);
    addr_tx.send(gw.addr).unwrap();
    let out = tokio::time::timeout(std::time::Duration::from_secs(90), node)
        .await
        .expect("the scenario ends by itself")
        .unwrap();
    (out, gw)
}

/// Every kind of webhook event, from what pusher-js clients do, arrives
/// once, in order, signed so that the `pusher` library accepts it;
/// subscriptions made at once share one POST.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_event_kind_arrives_once_in_order_and_signed() {
    let (out, _gw) = scenario("events").await;
    let events: Vec<&str> = out["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert_eq!(
        events,
        [
            "channel_occupied news ",
            "channel_vacated news ",
            "channel_occupied presence-room ",
            "member_added presence-room alice",
            "member_added presence-room bob",
            "member_removed presence-room alice",
            "member_removed presence-room bob",
            "channel_vacated presence-room ",
            "channel_occupied private-chat ",
            "client_event private-chat client-typing",
            "channel_occupied cache-prices ",
            "cache_miss cache-prices ",
            "channel_occupied x1 ",
            "channel_occupied x2 ",
            "channel_occupied x3 ",
        ],
        "{out}"
    );
    assert_eq!(out["invalid"], 0, "{out}");
    assert_eq!(
        out["together"],
        serde_json::json!([3]),
        "three subscriptions at once are one POST: {out}"
    );
}

/// A receiver that answers 500 twice gets the batch on the third attempt
/// (back-off 200 ms, then 400 ms), and the next batch after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_receiver_gets_the_batch_once_it_recovers() {
    let (out, gw) = scenario("retry").await;
    assert_eq!(
        out["events"],
        serde_json::json!(["channel_occupied orders ", "channel_vacated orders "]),
        "{out}"
    );
    assert_eq!(out["requests"], 4, "two failures, two deliveries: {out}");
    assert_eq!(out["invalid"], 0, "{out}");
    let body = metrics(gw.addr).await;
    let read = |name: &str| weir::metrics::read(&body, name);
    let labels = r#"route="/app/{key}",app="2""#;
    assert_eq!(
        read(&format!(
            "weir_pusher_webhook_events_total{{{labels},outcome=\"sent\"}}"
        )),
        Some(2),
        "{body}"
    );
    assert_eq!(
        read(&format!(
            "weir_pusher_webhook_posts_total{{{labels},result=\"error\"}}"
        )),
        Some(2),
        "{body}"
    );
}

/// A receiver that never answers: client events keep flowing between two
/// connections at full speed, while the webhook's queue stays within its
/// 4 KiB and the events past it are dropped and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_receiver_slows_no_connection_and_its_queue_stays_bounded() {
    let (out, gw) = scenario("silent").await;
    assert_eq!(out["relayed"], 400, "{out}");
    // 400 events with 8 pauses of 60 ms; a connection waiting on the
    // receiver (1 s timeout, 5 attempts) would take many seconds.
    assert!(out["ms"].as_u64().unwrap() < 4000, "{out}");
    assert!(
        out["held"].as_u64().unwrap() >= 1,
        "the receiver was asked: {out}"
    );
    let body = metrics(gw.addr).await;
    let read = |name: &str| weir::metrics::read(&body, name);
    let labels = r#"route="/app/{key}",app="3""#;
    let dropped = read(&format!(
        "weir_pusher_webhook_events_total{{{labels},outcome=\"dropped\"}}"
    ))
    .unwrap();
    assert!(
        dropped >= 300,
        "{dropped} dropped of 400 with a 4 KiB queue"
    );
    let queued = read(&format!("weir_pusher_webhook_queued_bytes{{{labels}}}")).unwrap();
    assert!(queued <= 4096, "{queued} bytes queued");
    assert_eq!(
        read(&format!(
            "weir_pusher_webhook_events_total{{{labels},outcome=\"sent\"}}"
        )),
        Some(0)
    );
}

/// Per-app figures on `/metrics`, labelled by route and app, for two apps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_app_metrics_count_each_app_apart() {
    let (out, _gw) = scenario("metrics").await;
    let figures = &out["figures"];
    let get = |name: &str, app: &str, extra: &str| {
        let key = format!(r#"{name}{{route="/app/{{key}}",app="{app}"{extra}}}"#);
        figures[&key]
            .as_u64()
            .unwrap_or_else(|| panic!("no {key} in {figures}"))
    };
    // App 1: two connections, two subscribes and two client events in,
    // 2 connection_established + 2 subscription_succeeded + 2 client
    // events to b + the trigger to a and b out.
    assert_eq!(get("weir_pusher_connections", "1", ""), 2);
    assert_eq!(get("weir_pusher_messages_received_total", "1", ""), 4);
    assert_eq!(get("weir_pusher_messages_sent_total", "1", ""), 8);
    assert_eq!(get("weir_pusher_client_events_total", "1", ""), 2);
    let api = |app, outcome| {
        get(
            "weir_pusher_api_requests_total",
            app,
            &format!(r#",outcome="{outcome}""#),
        )
    };
    assert_eq!(api("1", "ok"), 1);
    assert_eq!(api("1", "auth_failed"), 1);
    // App 2: one connection, one subscribe, one query.
    assert_eq!(get("weir_pusher_connections", "2", ""), 1);
    assert_eq!(get("weir_pusher_messages_received_total", "2", ""), 1);
    assert_eq!(get("weir_pusher_messages_sent_total", "2", ""), 2);
    assert_eq!(get("weir_pusher_client_events_total", "2", ""), 0);
    assert_eq!(api("2", "ok"), 1);
    assert_eq!(api("2", "auth_failed"), 0);
    assert_eq!(get("weir_pusher_connections", "3", ""), 0);
}
