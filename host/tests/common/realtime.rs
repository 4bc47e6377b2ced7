//! The guest real-time tests' setup (guest_realtime.rs, polyglot_filters.rs):
//! a gateway with a centrifugo route and an `rt-probe` fixture on a
//! `realtime = true` route /g and a plain route /plain, its server API, the
//! probe's commands, and the official `centrifuge` client as a peer.

use super::node::{clients_dir, require_client};
use super::{next, server_api, Gateway, Ws, STEP};
use futures_util::SinkExt;
use serde_json::Value;
use std::io::{BufRead, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use tokio_tungstenite::tungstenite::Message;
use weir_config::Config;

const SECRET: &str = "guest-realtime-test-secret";
const SECRET_ENV: &str = "WEIR_TEST_GUEST_RT_SECRET";
const API_KEY: &str = "guest-realtime-test-api-key-0123";
const API_KEY_ENV: &str = "WEIR_TEST_GUEST_RT_API_KEY";

/// A gateway serving the rt-probe component `wasm` on /g (`realtime =
/// true`) and /plain, beside a centrifugo route and the server API, with
/// the namespaces `chat` (history and presence), `nohistory` and
/// `nopresence`.
pub fn realtime_gateway(wasm: &Path) -> Gateway {
    std::env::set_var(SECRET_ENV, SECRET);
    std::env::set_var(API_KEY_ENV, API_KEY);
    let routes = format!(
        r#"
[server]
workers = 2

[[route]]
path = "/connection/websocket"
native = "centrifugo"
token_hmac_secret_env = "{SECRET_ENV}"

[[route]]
path = "/g"
guest = "{wasm}"
realtime = true

[[route]]
path = "/plain"
guest = "{wasm}"

[api]
listen = "127.0.0.1:0"
key_env = "{API_KEY_ENV}"

[[namespaces]]
name = "chat"
history_size = 100
history_ttl = "5m"
presence = true
allow_subscribe_for_client = true
allow_publish_for_subscriber = true

[[namespaces]]
name = "nohistory"
presence = true

[[namespaces]]
name = "nopresence"
history_size = 10
history_ttl = "5m"
"#,
        wasm = wasm.display()
    );
    Gateway::start(Config::parse(&routes, Path::new(".")).expect("routes"))
}

/// One server API call with the gateway's key; its JSON answer.
pub async fn api(gw: &Gateway, method: &str, body: Value) -> Value {
    server_api(gw, API_KEY, method, &body.to_string()).await
}

/// The next text message on `ws`.
pub async fn text(ws: &mut Ws) -> String {
    match next(ws).await {
        Message::Text(t) => t.to_string(),
        other => panic!("expected text, got {other:?}"),
    }
}

/// Sends `command` to the probe and returns its answer.
pub async fn ask(ws: &mut Ws, command: &str) -> String {
    ws.send(Message::text(command)).await.unwrap();
    text(ws).await
}

/// Sends `command` to the probe; its answer parsed as JSON.
pub async fn ask_json(ws: &mut Ws, command: &str) -> Value {
    let answer = ask(ws, command).await;
    serde_json::from_str(&answer).unwrap_or_else(|_| panic!("{command}: {answer}"))
}

/// The centrifuge client (host/tests/clients, `guestPeer` scenario):
/// subscribed to a channel with presence, user "peer", info
/// {"role":"peer"}; publishes {"from":"centrifuge"} on "publish". Its
/// stdin takes lines from the test; its stdout lines are read on a
/// blocking thread.
pub struct Peer {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Peer {
    pub fn start(gw: &Gateway, channel: &str) -> Peer {
        require_client("centrifuge");
        let mut child = Command::new("node")
            .args([
                "centrifuge-client.mjs",
                &gw.url("/connection/websocket"),
                SECRET,
                "guestPeer",
                channel,
            ])
            .current_dir(clients_dir())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("node (scripts/test.sh installs the clients)");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Peer { child, lines }
    }

    pub async fn line(&mut self) -> String {
        let lines = &self.lines;
        tokio::task::block_in_place(|| lines.recv_timeout(STEP)).expect("a line from the peer")
    }

    pub fn say(&mut self, line: &str) {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
