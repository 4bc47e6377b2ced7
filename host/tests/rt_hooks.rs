//! Guests attached to real-time namespaces (`guest = "x.wasm"` on a
//! `[[namespaces]]` table), driven by the official `centrifuge` JavaScript
//! client (host/tests/clients, scenario `hooks`): the moderate example
//! refuses `chat:secret*` subscribes (103) and `chat:vip*` ones with its own
//! code, rewrites and drops client publications (what a second subscriber
//! gets and what history holds is what the guest passed), a replacement
//! that is not JSON is refused 100, and a server API publication is not
//! filtered; the faulty fixture traps or runs past its deadline and the
//! client gets 100 while its connection stays up. The same scenario runs
//! with the JavaScript and Python versions of both (examples/js/fixtures,
//! examples/python/fixtures: onSubscribe/on_subscribe and
//! onClientPublish/on_client_publish; a throw there fails the question as
//! a trap does). Needs the guests built (scripts/build-guests.sh).

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use weir_config::Config;

const SECRET: &str = "rt-hooks-test-secret";
const SECRET_ENV: &str = "WEIR_TEST_RT_HOOKS_SECRET";
const API_KEY: &str = "rt-hooks-test-api-key-0123456789";
const API_KEY_ENV: &str = "WEIR_TEST_RT_HOOKS_API_KEY";

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

/// The routes with the namespaces' guests of one language: `lang` is the
/// components' prefix ("" for Rust, "js-", "py-").
fn routes(lang: &str) -> String {
    let moderate = example_wasm(&format!("{lang}moderate.wasm"));
    let faulty = example_wasm(&format!("{lang}faulty.wasm"));
    format!(
        r#"
[server]
listen = "127.0.0.1:0"
workers = 2

[[route]]
path = "/connection/websocket"
native = "centrifugo"
token_hmac_secret_env = "{SECRET_ENV}"

[api]
listen = "127.0.0.1:0"
key_env = "{API_KEY_ENV}"

[[namespaces]]
name = "chat"
history_size = 100
history_ttl = "5m"
allow_subscribe_for_client = true
allow_publish_for_subscriber = true
allow_history_for_subscriber = true
guest = "{moderate}"

[[namespaces]]
name = "faulty"
allow_subscribe_for_client = true
allow_publish_for_subscriber = true
guest = "{faulty}"
timeout = "300ms"
"#
    )
}

fn clients_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/clients")
}

/// Runs centrifuge-client.mjs `scenario` against `url` with `args`; its
/// JSON summary (the last line).
fn node_scenario(url: &str, scenario: &str, args: &[&str]) -> serde_json::Value {
    assert!(
        clients_dir().join("node_modules/centrifuge").exists(),
        "host/tests/clients/node_modules/centrifuge missing: run scripts/test.sh"
    );
    let output = Command::new("node")
        .args(["centrifuge-client.mjs", url, SECRET, scenario])
        .args(args)
        .current_dir(clients_dir())
        .stdin(Stdio::null())
        .output()
        .expect("node (scripts/test.sh installs the clients)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{scenario}: {}\n{stdout}{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or("null")).unwrap()
}

/// Subscribes authorised, publications rewritten or dropped by the
/// namespace's guest (the scenario asserts each step); a guest fault is
/// error 100 with the connection kept. Without the feature the secret
/// channel would be subscribed and "spam" published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_guests_authorise_subscribes_and_filter_publications() {
    hooks_scenario("").await;
}

/// The same with the JavaScript guests (onSubscribe, onClientPublish).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn javascript_namespace_guests_authorise_subscribes_and_filter_publications() {
    hooks_scenario("js-").await;
}

/// The same with the Python guests (on_subscribe, on_client_publish).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_namespace_guests_authorise_subscribes_and_filter_publications() {
    hooks_scenario("py-").await;
}

async fn hooks_scenario(lang: &str) {
    std::env::set_var(SECRET_ENV, SECRET);
    std::env::set_var(API_KEY_ENV, API_KEY);
    let config = Config::parse(&routes(lang), Path::new(".")).expect("routes");
    let gw = Gateway::start(config);
    let url = gw.url("/connection/websocket");
    let api = format!("http://{}/api", gw.api.expect("[api]"));
    let out = tokio::task::spawn_blocking(move || node_scenario(&url, "hooks", &[&api, API_KEY]))
        .await
        .unwrap();
    assert_eq!(out["refused"], 103, "{out}");
    assert_eq!(out["vip"], 4403, "{out}");
    assert_eq!(out["trap"], 100, "{out}");
    assert_eq!(out["loop"], 100, "{out}");
    assert_eq!(out["sockets"], 1, "{out}");
    assert_eq!(
        out["received"],
        serde_json::json!([{"text": "oh d**n"}, {"text": "after"}, {"text": "api spam"}]),
        "{out}"
    );
}

/// A namespace guest's limit without a guest, and an empty guest path,
/// are refused with the line.
#[test]
fn namespace_guest_keys_are_checked() {
    for (table, want) in [
        ("name = \"x\"\ntimeout = \"1s\"", "without a guest"),
        ("name = \"x\"\nguest = \"\"", "empty"),
    ] {
        let text =
            format!("[[route]]\npath = \"/e\"\nnative = \"echo\"\n\n[[namespaces]]\n{table}\n");
        let err = Config::parse(&text, Path::new("."))
            .unwrap_err()
            .to_string();
        assert!(err.contains(want), "{err}");
    }
}
