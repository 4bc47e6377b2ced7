//! pusher-js after a network cut: the real client (pinned in
//! host/tests/clients, driven by pusher-reconnect.mjs) reaches the pusher
//! route through a TCP relay that the scenario destroys twice, with no
//! close frame (the client sees 1006, the gateway a closed socket). Each
//! time pusher-js must connect again with a new socket id and subscribe
//! again to its public, private and presence channels; the gateway must
//! list the user once in the presence channel (the cut connection gone),
//! and events triggered through the `pusher` server library and another
//! client's client events must reach the client again, each once.

mod common;

use common::Gateway;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use tokio::time::timeout;
use weir_config::Config;

const SECRET: &str = "pusher-reconnect-secret";
/// Cuts the scenario makes.
const CUTS: u32 = 2;

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
secret_env = "WEIR_TEST_PUSHER_RECONNECT_SECRET"
client_events = true
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pusher_js_reconnects_and_resubscribes_after_a_network_cut() {
    let clients = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/clients");
    assert!(
        clients.join("node_modules/pusher-js").exists(),
        "host/tests/clients/node_modules/pusher-js missing: run scripts/test.sh"
    );
    std::env::set_var("WEIR_TEST_PUSHER_RECONNECT_SECRET", SECRET);
    let gw = Gateway::start(Config::parse(ROUTES, Path::new(".")).expect("routes"));
    let (host, port) = (gw.addr.ip().to_string(), gw.addr.port().to_string());
    let run = tokio::task::spawn_blocking(move || {
        Command::new("node")
            .args(["pusher-reconnect.mjs", &host, &port, &CUTS.to_string()])
            .current_dir(clients)
            .env("WEIR_TEST_PUSHER_SECRET", SECRET)
            .stdin(Stdio::null())
            .output()
            .expect("node")
    });
    // The scenario bounds each of its waits; this bounds the whole.
    let output = timeout(Duration::from_secs(90), run)
        .await
        .expect("pusher-reconnect.mjs took over 90 s")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}\n{stdout}{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let summary: serde_json::Value =
        serde_json::from_str(stdout.lines().last().unwrap_or("null")).unwrap();
    let ids = summary["socket_ids"].as_array().unwrap();
    assert_eq!(ids.len(), CUTS as usize + 1, "{summary}");
    assert_eq!(
        summary["subscribed"]["presence-room"],
        CUTS + 1,
        "{summary}"
    );
    gw.stop();
}
