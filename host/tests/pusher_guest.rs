//! A Pusher app's guest (`guest = "x.wasm"` on `[[route.apps]]`, the
//! fixture examples/fixtures/pusher-gate) against the real `pusher-js`
//! client and the real `pusher` server library (driven by
//! pusher-guest-client.mjs): private and presence subscriptions the guest
//! authorises from a JWT with no auth endpoint (members as the token names
//! them), a channel prefix it refuses, client events it rewrites and drops
//! as another client sees them, a connection it refuses, a guest that
//! traps or passes its deadline (the subscription is refused, the
//! connection stays), and another
//! app of the same route untouched by this app's guest. Needs
//! `scripts/build-guests.sh` and `npm ci` in host/tests/clients.

mod common;

use common::node::{node_summary, require_client};
use common::*;
use std::path::{Path, PathBuf};

fn example_wasm(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/wasm")
        .join(name);
    assert!(
        path.exists(),
        "{} missing: run scripts/build-guests.sh",
        path.display()
    );
    path.display().to_string()
}

fn gateway() -> Gateway {
    std::env::set_var("WEIR_TEST_PUSHER_GUEST_SECRET_G", "gsecret");
    std::env::set_var("WEIR_TEST_PUSHER_GUEST_SECRET_P", "psecret");
    let gate = example_wasm("pusher-gate.wasm");
    let routes = format!(
        r#"
[server]
listen = "127.0.0.1:0"
workers = 2

[[route]]
path = "/app/{{key}}"
native = "pusher"

[[route.apps]]
id = "g"
key = "gkey"
secret_env = "WEIR_TEST_PUSHER_GUEST_SECRET_G"
client_events = true
guest = "{gate}"
timeout = "500ms"
instances = 4

[[route.apps]]
id = "p"
key = "pkey"
secret_env = "WEIR_TEST_PUSHER_GUEST_SECRET_P"
client_events = true

[[route]]
path = "/{{tenant}}/app/{{key}}"
native = "pusher"

[[route.apps]]
id = "t"
key = "tkey"
secret_env = "WEIR_TEST_PUSHER_GUEST_SECRET_G"
guest = "{gate}"
"#
    );
    let config = weir_config::Config::parse(&routes, Path::new(".")).expect("routes");
    Gateway::start(config)
}

/// Runs one scenario of pusher-guest-client.mjs against `gw`; its JSON summary.
async fn scenario(gw: &Gateway, name: &str) -> serde_json::Value {
    require_client("pusher-js");
    let (host, port) = (gw.addr.ip().to_string(), gw.addr.port().to_string());
    let name = name.to_string();
    tokio::task::spawn_blocking(move || {
        node_summary(&name, &["pusher-guest-client.mjs", &host, &port, &name])
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guest_authorises_private_and_presence_channels_from_a_jwt() {
    let gw = gateway();
    let out = scenario(&gw, "authorised").await;
    assert_eq!(out["members"], 2, "{out}");
    assert_eq!(out["not_granted"], 403, "{out}");
    assert_eq!(out["forged"], 401, "{out}");
    gw.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guest_refuses_a_channel_prefix_with_its_code() {
    let gw = gateway();
    let out = scenario(&gw, "refused").await;
    assert_eq!(out["status"], 403, "{out}");
    gw.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_events_are_rewritten_and_dropped_by_the_guest() {
    let gw = gateway();
    let out = scenario(&gw, "events").await;
    assert_eq!(out["delivered"], 3, "{out}");
    assert_eq!(out["loud"], 4301, "{out}");
    gw.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guest_refuses_a_connection() {
    let gw = gateway();
    let out = scenario(&gw, "suspended").await;
    assert_eq!(out["code"], 4003, "{out}");
    gw.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trapping_or_slow_guest_refuses_the_subscription_and_the_connection_stays() {
    let gw = gateway();
    let out = scenario(&gw, "trap").await;
    assert_eq!(out["status"], 500, "{out}");
    assert_eq!(out["slow"], 500, "{out}");
    assert_eq!(out["same_socket"], true, "{out}");
    gw.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_app_on_the_route_is_untouched_by_the_guest() {
    let gw = gateway();
    let out = scenario(&gw, "other_app").await;
    assert_eq!(out["refused"], 401, "{out}");
    assert_eq!(out["untouched"], "  spam  ", "{out}");
    gw.stop();
}
