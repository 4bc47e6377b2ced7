//! The JavaScript and Python SDKs' proxy filter hook and real-time reads
//! against a real gateway over loopback (issue 39 item 1), each with both
//! languages' fixtures (examples/js/fixtures, examples/python/fixtures,
//! built by scripts/build-guests.sh as `js-<name>.wasm` / `py-<name>.wasm`):
//!
//! - `moderate` as a `native = "proxy"` route's `filter`, between a
//!   tokio-tungstenite client and a real upstream: "spam" dropped both
//!   ways, "darn" rewritten, binary passed unchanged, in order; the
//!   filter's own message (`conn.forward`) with a count kept in its
//!   connection state; "!kick" closing the client 1008 and the upstream.
//! - `rt-probe` on a guest route with `realtime = true`: the server API's
//!   and a centrifuge client's publications read back with `await
//!   conn.history` (oldest and newest first, the API's epoch) and
//!   `route.history`, the centrifuge client in `await conn.presence`, and
//!   the read errors' reasons (history off, presence off, bad channel, not
//!   a realtime route).

mod common;
mod guest_support;

use common::realtime::{api, ask, ask_json, realtime_gateway, text, Peer};
use common::{client, next, Gateway, STEP};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::Path;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;
use weir_config::Config;

/// A language's component of a fixture.
fn fixture(lang: &str, name: &str) -> String {
    guest_support::wasm(&format!("{lang}-{name}"))
        .display()
        .to_string()
}

// ------------------------------------------------------------------ filters

/// An upstream that answers each text message `m` with `m`, `spam:m` and
/// `darn:m`, echoes binary, and reports what it received (the close
/// included).
async fn chatty_upstream() -> (SocketAddr, mpsc::UnboundedReceiver<Message>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let Ok(mut ws) = tokio_tungstenite::accept_async(stream).await else {
                    return;
                };
                while let Some(Ok(msg)) = ws.next().await {
                    let _ = tx.send(msg.clone());
                    let replies = match &msg {
                        Message::Text(t) => vec![
                            Message::text(t.as_str()),
                            Message::text(format!("spam:{t}")),
                            Message::text(format!("darn:{t}")),
                        ],
                        Message::Binary(b) => vec![Message::binary(b.clone())],
                        _ => vec![],
                    };
                    for reply in replies {
                        if ws.send(reply).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    (addr, rx)
}

async fn upstream_saw(rx: &mut mpsc::UnboundedReceiver<Message>) -> Message {
    timeout(STEP, rx.recv())
        .await
        .expect("the upstream saw nothing")
        .expect("the upstream ended")
}

/// `lang`'s moderate fixture as a proxy route's filter.
async fn filter_moderates_a_real_proxied_connection(lang: &str) {
    let (up, mut seen) = chatty_upstream().await;
    let routes = format!(
        "[server]\nworkers = 2\n\n[[route]]\npath = \"/rooms/{{room}}\"\nnative = \"proxy\"\n\
         upstream = \"ws://{up}/r/{{room}}\"\nfilter = \"{}\"\n",
        fixture(lang, "moderate")
    );
    let gw = Gateway::start(Config::parse(&routes, Path::new(".")).expect("routes"));
    let mut ws = client(&gw.url("/rooms/mod")).await;
    let sent: Vec<String> = (0..30)
        .map(|i| match i % 3 {
            0 => format!("hello {i}"),
            1 => format!("buy spam {i}"),
            _ => format!("darn it {i}"),
        })
        .collect();
    for m in &sent {
        ws.send(Message::text(m.as_str())).await.unwrap();
    }
    let big: Vec<u8> = (0..70_000u32).map(|i| (i * 31 % 251) as u8).collect();
    ws.send(Message::binary(big.clone())).await.unwrap();

    // Toward the upstream: spam dropped, darn rewritten, in order.
    let passed: Vec<String> = sent
        .iter()
        .filter(|m| !m.contains("spam"))
        .map(|m| m.replace("darn", "d**n"))
        .collect();
    for want in &passed {
        assert_eq!(upstream_saw(&mut seen).await, Message::text(want.as_str()));
    }
    assert_eq!(upstream_saw(&mut seen).await.into_data()[..], big[..]);
    // Toward the client: `m`, `spam:m` (dropped), `darn:m` (rewritten),
    // then the binary echo, unchanged.
    for m in &passed {
        assert_eq!(next(&mut ws).await, Message::text(m.as_str()));
        assert_eq!(next(&mut ws).await, Message::text(format!("d**n:{m}")));
    }
    assert_eq!(next(&mut ws).await.into_data()[..], big[..]);

    // The filter's own message, with the count its connection state kept:
    // 10 client messages and 20 upstream answers dropped.
    ws.send(Message::text("!dropped")).await.unwrap();
    assert_eq!(next(&mut ws).await, Message::text("dropped 30"));

    // A second connection has its own count.
    let mut other = client(&gw.url("/rooms/other")).await;
    other.send(Message::text("!dropped")).await.unwrap();
    assert_eq!(next(&mut other).await, Message::text("dropped 0"));

    // The filter closes: the client gets 1008, the upstream a close.
    ws.send(Message::text("!kick")).await.unwrap();
    match next(&mut ws).await {
        Message::Close(Some(f)) => {
            assert_eq!(f.code, CloseCode::Policy);
            assert_eq!(f.reason.as_str(), "kicked by the moderator");
        }
        other => panic!("expected close 1008, got {other:?}"),
    }
    loop {
        match upstream_saw(&mut seen).await {
            Message::Close(_) => break,
            Message::Ping(_) | Message::Pong(_) => continue,
            // The second connection's "!dropped" never reaches it.
            other => panic!("the upstream got {other:?} after the kick"),
        }
    }
    gw.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_javascript_filter_moderates_a_real_proxied_connection() {
    filter_moderates_a_real_proxied_connection("js").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_filter_moderates_a_real_proxied_connection() {
    filter_moderates_a_real_proxied_connection("py").await;
}

// ------------------------------------------------------------------ reads

/// (offset, data) of a probe's history answer.
fn publications(read: &Value) -> Vec<(u64, Value)> {
    read["history"]["publications"]
        .as_array()
        .unwrap_or_else(|| panic!("{read}"))
        .iter()
        .map(|p| (p["offset"].as_u64().unwrap(), p["data"].clone()))
        .collect()
}

/// `lang`'s rt-probe fixture reads a real-time channel's history and
/// presence through the gateway's core.
async fn reads_history_and_presence(lang: &str) {
    let gw = realtime_gateway(Path::new(&fixture(lang, "rt-probe")));
    let channel = "chat:room";
    let mut ws = client(&gw.url("/g")).await;
    assert_eq!(
        ask(&mut ws, &format!("sub {channel}")).await,
        "subscribed chat:room"
    );
    let mut peer = Peer::start(&gw, channel);
    assert_eq!(peer.line().await, "ready");

    // Two publications of the server API and one of the centrifuge client,
    // each delivered to the probe's subscribed connection.
    for n in [1, 2] {
        let at = api(
            &gw,
            "publish",
            json!({"channel": channel, "data": {"n": n}}),
        )
        .await;
        assert_eq!(at["result"]["offset"], n, "{at}");
        let got: Value = serde_json::from_str(&text(&mut ws).await).unwrap();
        assert_eq!(got, json!({"n": n}));
    }
    peer.say("publish");
    assert_eq!(peer.line().await, "published");
    let got: Value = serde_json::from_str(&text(&mut ws).await).unwrap();
    assert_eq!(got, json!({"from": "centrifuge"}));
    let epoch = api(&gw, "history", json!({"channel": channel, "limit": 0})).await["result"]
        ["epoch"]
        .clone();
    assert!(epoch.as_str().is_some_and(|e| !e.is_empty()), "{epoch}");

    // Oldest first, the position the API's.
    let read = ask_json(&mut ws, "history chat:room 10").await;
    assert_eq!(read["history"]["offset"], 3, "{read}");
    assert_eq!(read["history"]["epoch"], epoch, "{read}");
    let all = [
        (1, json!({"n": 1})),
        (2, json!({"n": 2})),
        (3, json!({"from": "centrifuge"})),
    ];
    assert_eq!(publications(&read), all);
    // Newest first, cut by the limit.
    let read = ask_json(&mut ws, "newest chat:room 2").await;
    assert_eq!(publications(&read), [all[2].clone(), all[1].clone()]);
    // A limit of 0: the position alone.
    let read = ask_json(&mut ws, "history chat:room 0").await;
    assert_eq!(read["history"]["offset"], 3, "{read}");
    assert_eq!(publications(&read), []);
    // The route's own read.
    let read = ask_json(&mut ws, "route-history chat:room").await;
    assert_eq!(publications(&read), all);

    // Presence: the centrifuge client, its user and connection info (a
    // guest route's subscriber is not a presence member).
    let read = ask_json(&mut ws, "presence chat:room").await;
    let members = read["presence"]
        .as_array()
        .unwrap_or_else(|| panic!("{read}"));
    assert_eq!(members.len(), 1, "{read}");
    assert_eq!(members[0]["user"], "peer", "{read}");
    assert_eq!(members[0]["info"], json!({"role": "peer"}), "{read}");
    let api_presence = api(&gw, "presence", json!({"channel": channel})).await;
    let client_id = members[0]["client"].as_str().unwrap();
    assert!(
        api_presence["result"]["presence"].get(client_id).is_some(),
        "{api_presence}"
    );
    peer.say("done");

    // Read errors reject (raise) with the gateway's reason.
    for (command, want) in [
        (
            "history nohistory:x 5",
            json!({"history": {"error": "history-off"}}),
        ),
        (
            "presence nopresence:x",
            json!({"presence": {"error": "presence-off"}}),
        ),
        (
            "history nowhere:x 5",
            json!({"history": {"error": "bad-channel"}}),
        ),
        (
            "presence nowhere:x",
            json!({"presence": {"error": "bad-channel"}}),
        ),
    ] {
        assert_eq!(ask_json(&mut ws, command).await, want, "{command}");
    }
    let mut plain = client(&gw.url("/plain")).await;
    assert_eq!(
        ask_json(&mut plain, "history chat:room 5").await,
        json!({"history": {"error": "not-realtime"}})
    );
    assert_eq!(
        ask_json(&mut plain, "presence chat:room").await,
        json!({"presence": {"error": "not-realtime"}})
    );
    gw.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_javascript_guest_reads_history_and_presence() {
    reads_history_and_presence("js").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_guest_reads_history_and_presence() {
    reads_history_and_presence("py").await;
}
