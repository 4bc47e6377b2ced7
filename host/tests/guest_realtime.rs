//! A guest route with `realtime = true` (issue 37) over real loopback
//! sockets, with the `rt-probe` fixture: its connection subscribes to a
//! real-time channel and receives, as plain text frames, a publication of
//! the server API and one of the official `centrifuge` client on the
//! centrifugo route; the guest's publication goes through the core (an
//! offset in the API's history, delivered to the centrifuge subscriber);
//! the guest reads history and presence (the centrifuge client present)
//! and sends them to its connection. Refusals: a channel of no namespace,
//! data that is not JSON (counted in `/metrics`), history or presence
//! asked of a namespace without it.

mod common;
mod guest_support;

use common::realtime::{api, ask, ask_json, realtime_gateway, text, Peer};
use common::*;
use serde_json::{json, Value};

fn gateway() -> Gateway {
    realtime_gateway(&guest_support::wasm("rt-probe"))
}

/// The whole path (issue 37, items 1 and 3): API and centrifuge
/// publications reach the guest's subscribed connection as their data; the
/// guest's own publication gets an offset in history and reaches the
/// centrifuge subscriber; the guest reads history and presence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_realtime_guest_route_joins_publishes_and_reads_channels() {
    let gw = gateway();
    let channel = "chat:room";
    let mut ws = client(&gw.url("/g")).await;
    assert_eq!(
        ask(&mut ws, &format!("sub {channel}")).await,
        "subscribed chat:room"
    );
    let mut peer = Peer::start(&gw, channel);
    assert_eq!(peer.line().await, "ready");

    // A server API publication arrives as its data alone.
    let at = api(
        &gw,
        "publish",
        json!({"channel": channel, "data": {"from": "api"}}),
    )
    .await;
    assert_eq!(at["result"]["offset"], 1, "{at}");
    let got: Value = serde_json::from_str(&text(&mut ws).await).unwrap();
    assert_eq!(got, json!({"from": "api"}));

    // So does a centrifuge client's.
    peer.say("publish");
    assert_eq!(peer.line().await, "published");
    let got: Value = serde_json::from_str(&text(&mut ws).await).unwrap();
    assert_eq!(got, json!({"from": "centrifuge"}));

    // The guest's publication goes through the core: it comes back to the
    // guest's own subscriber, and has offset 3 in the API's history.
    assert_eq!(
        ask(&mut ws, r#"pub chat:room {"from":"guest"}"#).await,
        "published"
    );
    let got: Value = serde_json::from_str(&text(&mut ws).await).unwrap();
    assert_eq!(got, json!({"from": "guest"}));
    let history = api(&gw, "history", json!({"channel": channel, "limit": 10})).await;
    let pubs = history["result"]["publications"].as_array().unwrap();
    assert_eq!(pubs.len(), 3, "{history}");
    assert_eq!(pubs[2]["data"], json!({"from": "guest"}), "{history}");
    assert_eq!(pubs[2]["offset"], 3, "{history}");

    // The guest reads history: the three publications with their offsets,
    // and the stream's position (the API's epoch).
    let read = ask_json(&mut ws, "history chat:room 10").await;
    let h = &read["history"];
    assert_eq!(h["offset"], 3, "{read}");
    assert_eq!(h["epoch"], history["result"]["epoch"], "{read}");
    let froms: Vec<_> = h["publications"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["offset"].as_u64().unwrap(), p["data"]["from"].clone()))
        .collect();
    assert_eq!(
        froms,
        [
            (1, json!("api")),
            (2, json!("centrifuge")),
            (3, json!("guest"))
        ]
    );
    // A limit cuts it.
    let read = ask_json(&mut ws, "history chat:room 1").await;
    assert_eq!(
        read["history"]["publications"].as_array().unwrap().len(),
        1,
        "{read}"
    );

    // Presence: the centrifuge client, its user and connection info.
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

    // The centrifuge subscriber got all three, the guest's with offset 3.
    peer.say("done");
    let summary: Value = serde_json::from_str(&peer.line().await).unwrap();
    assert_eq!(
        summary["received"],
        json!([
            {"from": "api", "offset": 1},
            {"from": "centrifuge", "offset": 2},
            {"from": "guest", "offset": 3},
        ]),
        "{summary}"
    );
    gw.stop();
}

/// Refusals are not silent: a subscribe to a channel of no namespace and a
/// publish of data that is not JSON are refused and counted
/// (`weir_guest_realtime_refused_total`), and publish nothing; reads answer
/// an error code (bad channel, history off, presence off); a route without
/// `realtime = true` answers `not-realtime`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_counted_or_answered() {
    let gw = gateway();
    let refused = r#"weir_guest_realtime_refused_total{route="/g"}"#;
    let mut ws = client(&gw.url("/g")).await;
    assert_eq!(metric(gw.addr, refused).await, 0);
    assert_eq!(
        ask(&mut ws, "sub nowhere:room").await,
        "subscribed nowhere:room"
    );
    assert_eq!(
        ask(&mut ws, "sub chat:refusals").await,
        "subscribed chat:refusals"
    );
    assert_eq!(
        ask(&mut ws, "pub chat:refusals not json").await,
        "published"
    );
    assert_eq!(ask(&mut ws, "pub nowhere:room {}").await, "published");
    await_metric(gw.addr, refused, 3).await;
    // Nothing was published: the next message is the answer to the read,
    // and the channel has no history.
    let read = ask_json(&mut ws, "history chat:refusals 10").await;
    assert_eq!(read["history"]["offset"], 0, "{read}");
    assert_eq!(read["history"]["publications"], json!([]), "{read}");

    for (command, want) in [
        (
            "history nowhere:x 5",
            json!({"history": {"error": "bad-channel"}}),
        ),
        (
            "history nohistory:x 5",
            json!({"history": {"error": "history-off"}}),
        ),
        (
            "presence nopresence:x",
            json!({"presence": {"error": "presence-off"}}),
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
    gw.stop();
}
