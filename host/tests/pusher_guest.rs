//! A Pusher app's guest (`guest = "x.wasm"` on `[[route.apps]]`, the
//! fixture examples/fixtures/pusher-gate) against the real `pusher-js`
//! client and the real `pusher` server library (driven by
//! pusher-guest-client.mjs): private and presence subscriptions the guest
//! authorises from a JWT with no auth endpoint (members as the token names
//! them), a channel prefix it refuses, client events it rewrites and drops
//! as another client sees them, a connection it refuses, a guest that
//! traps or passes its deadline (the subscription is refused, the
//! connection stays), and another
//! app of the same route untouched by this app's guest. Each scenario runs
//! with the JavaScript and Python versions of the fixture too
//! (examples/js/fixtures/pusher-gate.js, examples/python/fixtures/
//! pusher-gate.py: onPusherConnect/Subscribe/ClientEvent and their Python
//! names; a throw there fails the question as a trap does). Needs
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

/// The languages the fixture is written in: the components' prefixes.
const LANGS: [&str; 3] = ["", "js-", "py-"];

/// A gateway whose apps "g" and "t" run the `lang` fixture ("" for Rust,
/// "js-", "py-").
fn gateway(lang: &str) -> Gateway {
    std::env::set_var("WEIR_TEST_PUSHER_GUEST_SECRET_G", "gsecret");
    std::env::set_var("WEIR_TEST_PUSHER_GUEST_SECRET_P", "psecret");
    let gate = example_wasm(&format!("{lang}pusher-gate.wasm"));
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

/// Runs scenario `name` against a gateway with each language's fixture in
/// turn; the summaries, labelled with the language.
async fn in_each_language(name: &str) -> Vec<(&'static str, serde_json::Value)> {
    let mut out = Vec::new();
    for lang in LANGS {
        let gw = gateway(lang);
        out.push((lang, scenario(&gw, name).await));
        gw.stop();
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guest_authorises_private_and_presence_channels_from_a_jwt() {
    for (lang, out) in in_each_language("authorised").await {
        assert_eq!(out["members"], 2, "{lang}{out}");
        assert_eq!(out["not_granted"], 403, "{lang}{out}");
        assert_eq!(out["forged"], 401, "{lang}{out}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guest_refuses_a_channel_prefix_with_its_code() {
    for (lang, out) in in_each_language("refused").await {
        assert_eq!(out["status"], 403, "{lang}{out}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_events_are_rewritten_and_dropped_by_the_guest() {
    for (lang, out) in in_each_language("events").await {
        assert_eq!(out["delivered"], 3, "{lang}{out}");
        assert_eq!(out["loud"], 4301, "{lang}{out}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guest_refuses_a_connection() {
    for (lang, out) in in_each_language("suspended").await {
        assert_eq!(out["code"], 4003, "{lang}{out}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trapping_or_slow_guest_refuses_the_subscription_and_the_connection_stays() {
    for (lang, out) in in_each_language("trap").await {
        assert_eq!(out["status"], 500, "{lang}{out}");
        assert_eq!(out["slow"], 500, "{lang}{out}");
        assert_eq!(out["same_socket"], true, "{lang}{out}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_app_on_the_route_is_untouched_by_the_guest() {
    // App "p" has no guest: whatever language app "g"'s is in, once is enough.
    let gw = gateway("");
    let out = scenario(&gw, "other_app").await;
    assert_eq!(out["refused"], 401, "{out}");
    assert_eq!(out["untouched"], "  spam  ", "{out}");
    gw.stop();
}
