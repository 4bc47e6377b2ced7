//! The realtime example as a person uses it: `weir serve` on
//! examples/realtime/routes.toml (its ports moved to free loopback ones),
//! the example's own page server (`node examples/realtime/serve.mjs`, which
//! signs the tokens and serves the `centrifuge` browser bundle), and
//! headless Chromium showing examples/realtime/chat.html. The test drives
//! the page over the DevTools protocol and reads what the page shows:
//! connected and subscribed, presence and join/leave of a second tab, a
//! message typed in the page, a publication from the server API (HTTP POST
//! with X-API-Key), and, after the API disconnects the page three times
//! (code 3001, reconnect allowed) while publishing goes on, every
//! publication shown exactly once and in order, each resubscribe
//! recovered; a late joiner sees the last 20 messages from history.
//!
//! Needs Chromium (`chromium` on PATH, or `WEIR_CHROMIUM`), node, and the
//! pinned `centrifuge` package in host/tests/clients; scripts/test.sh
//! installs all three.

mod browser_support;
mod common;

use browser_support::{free_port, repo, wait_listening, Killed};
use common::STEP;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{sleep, timeout, Instant};

const SECRET: &str = "chat-page-test-secret";
const API_KEY: &str = "chat-page-test-api-key-0123456789";
/// The room the page joins: channel `chat:lobby`.
const CHANNEL: &str = "chat:lobby";
/// Times the server API cuts the page's connection.
const CUTS: usize = 3;

/// examples/realtime/routes.toml with its gateway, API and page ports
/// replaced; each must be found, so the test follows the example.
fn example_routes(gw: u16, api: u16, page: u16) -> String {
    let mut text = std::fs::read_to_string(repo().join("examples/realtime/routes.toml")).unwrap();
    for (from, to) in [
        ("127.0.0.1:9001", format!("127.0.0.1:{gw}")),
        ("127.0.0.1:8000", format!("127.0.0.1:{api}")),
        ("http://127.0.0.1:8080", format!("http://127.0.0.1:{page}")),
        ("http://localhost:8080", format!("http://localhost:{page}")),
    ] {
        assert!(
            text.contains(from),
            "examples/realtime/routes.toml names {from}"
        );
        text = text.replace(from, &to);
    }
    text
}

/// One server API call (`POST /api/<method>` with X-API-Key); its `result`.
async fn api(addr: SocketAddr, method: &str, params: Value) -> Value {
    let body = params.to_string();
    let request = format!(
        "POST /api/{method} HTTP/1.1\r\nhost: {addr}\r\nx-api-key: {API_KEY}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let answer = timeout(STEP, async {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.unwrap();
        answer
    })
    .await
    .expect("the API answered in time");
    let answer = String::from_utf8(answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{method}: {answer}");
    let v: Value = serde_json::from_str(body).unwrap();
    assert!(v.get("error").is_none(), "{method}: {v}");
    v["result"].clone()
}

/// The users the server API lists in the channel's presence.
async fn present_users(api_addr: SocketAddr) -> Vec<String> {
    let result = api(api_addr, "presence", json!({ "channel": CHANNEL })).await;
    let mut users: Vec<String> = result["presence"]
        .as_object()
        .unwrap()
        .values()
        .map(|m| m["user"].as_str().unwrap().to_string())
        .collect();
    users.sort();
    users
}

/// What the page shows: `user: text` per message, the event log, the
/// users present, the connection and subscription states.
const MESSAGES: &str = "[...document.querySelectorAll('#messages li')].map(li => \
    li.querySelector('.user').textContent + ': ' + li.querySelector('.text').textContent)";
const EVENTS: &str = "[...document.querySelectorAll('#events .text')].map(e => e.textContent)";
const PRESENT: &str = "[...document.querySelectorAll('#presence .user')].map(e => e.textContent)";
const SHOWN: &str = "({ state: document.getElementById('state').textContent, \
    sub: document.getElementById('sub-state').textContent, \
    messages: [...document.querySelectorAll('#messages li')].map(li => li.textContent), \
    events: [...document.querySelectorAll('#events .text')].map(e => e.textContent), \
    present: [...document.querySelectorAll('#presence .user')].map(e => e.textContent) })";

/// How many event lines end with `suffix`.
fn events_ending(events: &Value, suffix: &str) -> usize {
    events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e.as_str().unwrap().ends_with(suffix))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chat_example_connects_presents_publishes_and_recovers_in_chromium() {
    let clients = repo().join("host/tests/clients");
    assert!(
        clients
            .join("node_modules/centrifuge/dist/centrifuge.js")
            .exists(),
        "host/tests/clients/node_modules/centrifuge missing: run scripts/test.sh"
    );
    let (gw_port, api_port, page_port) = (free_port(), free_port(), free_port());
    let api_addr: SocketAddr = format!("127.0.0.1:{api_port}").parse().unwrap();
    let dir = std::env::temp_dir().join(format!("weir-chat-page-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let routes = dir.join("routes.toml");
    std::fs::write(&routes, example_routes(gw_port, api_port, page_port)).unwrap();

    let mut weir = Killed {
        child: Command::new(env!("CARGO_BIN_EXE_weir"))
            .arg("serve")
            .arg(&routes)
            .env("WEIR_TOKEN_HMAC_SECRET", SECRET)
            .env("WEIR_API_KEY", API_KEY)
            .env("RUST_LOG", "warn")
            .env("WEIR_CACHE_DIR", dir.join("cache"))
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
        group: false,
    };
    let gw_addr: SocketAddr = format!("127.0.0.1:{gw_port}").parse().unwrap();
    wait_listening(gw_addr, &mut weir.child, "weir serve").await;
    wait_listening(api_addr, &mut weir.child, "the server API").await;

    let mut pages = Killed {
        child: Command::new("node")
            .arg(repo().join("examples/realtime/serve.mjs"))
            .env("PORT", page_port.to_string())
            .env(
                "WEIR_WS_URL",
                format!("ws://{gw_addr}/connection/websocket"),
            )
            .env("WEIR_TOKEN_HMAC_SECRET", SECRET)
            .stdout(Stdio::null())
            .spawn()
            .expect("node (scripts/test.sh installs it)"),
        group: false,
    };
    let page_addr: SocketAddr = format!("127.0.0.1:{page_port}").parse().unwrap();
    wait_listening(page_addr, &mut pages.child, "serve.mjs").await;

    let (browser, mut dt) = browser_support::chromium(&dir.join("chromium")).await;
    dt.set_shown(SHOWN);

    let run = async {
        // Connect and subscribe; the page lists its own user as present,
        // and so does the server API.
        let page = format!("http://127.0.0.1:{page_port}/?user=tester&room=lobby");
        let (_, me) = dt.open(&page).await;
        dt.wait_for(
            &me,
            "document.getElementById('state').textContent === 'connected as tester' && \
             document.getElementById('sub-state').textContent === 'subscribed to chat:lobby'",
            "connected and subscribed",
        )
        .await;
        dt.wait_for(
            &me,
            &format!("JSON.stringify({PRESENT}) === '[\"tester\"]'"),
            "tester present",
        )
        .await;
        assert_eq!(present_users(api_addr).await, ["tester"]);

        // A second tab joins and leaves: the first shows both.
        let (bob, _) = dt
            .open(&format!(
                "http://127.0.0.1:{page_port}/?user=bob&room=lobby"
            ))
            .await;
        dt.wait_for(
            &me,
            &format!("JSON.stringify({PRESENT}) === '[\"bob\",\"tester\"]'"),
            "bob present",
        )
        .await;
        dt.wait_for(
            &me,
            &format!("{EVENTS}.some(e => e.endsWith(' bob joined'))"),
            "bob's join",
        )
        .await;
        dt.close(&bob).await;
        dt.wait_for(
            &me,
            &format!("{EVENTS}.some(e => e.endsWith(' bob left'))"),
            "bob's leave",
        )
        .await;
        dt.wait_for(
            &me,
            &format!("JSON.stringify({PRESENT}) === '[\"tester\"]'"),
            "bob gone",
        )
        .await;

        // A publication from the server API, then a message typed in the page.
        let mut expected = vec!["server: from the API".to_string()];
        api(
            api_addr,
            "publish",
            json!({ "channel": CHANNEL, "data": { "text": "from the API" } }),
        )
        .await;
        dt.wait_for(
            &me,
            &format!("{MESSAGES}.includes('server: from the API')"),
            "the API's publication",
        )
        .await;
        dt.eval(
            &me,
            "document.getElementById('text').value = 'hello from the page'; \
             document.getElementById('say').requestSubmit(); true",
        )
        .await;
        expected.push("tester: hello from the page".into());
        dt.wait_for(
            &me,
            &format!("{MESSAGES}.includes('tester: hello from the page')"),
            "the page's own message",
        )
        .await;
        let history = api(
            api_addr,
            "history",
            json!({ "channel": CHANNEL, "limit": -1 }),
        )
        .await;
        let typed = history["publications"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["data"]["text"] == "hello from the page")
            .unwrap_or_else(|| panic!("the typed message in history: {history}"))
            .clone();
        assert_eq!(typed["info"]["user"], "tester", "{typed}");

        // Cuts while publishing: each round publishes 5 live, disconnects
        // the page (3001: the client reconnects), publishes 3 at once (they
        // race the close), 5 once the API no longer lists the page (missed
        // for certain), then 5 more after the page resubscribed.
        let mut n = 0;
        let mut publish = |count: usize| {
            let batch: Vec<usize> = (n + 1..=n + count).collect();
            n += count;
            batch
        };
        async fn send(api_addr: SocketAddr, batch: Vec<usize>, expected: &mut Vec<String>) {
            for k in batch {
                let text = format!("seq {k}");
                api(
                    api_addr,
                    "publish",
                    json!({ "channel": CHANNEL, "data": { "text": text } }),
                )
                .await;
                expected.push(format!("server: {text}"));
            }
        }
        for cut in 0..CUTS {
            send(api_addr, publish(5), &mut expected).await;
            api(
                api_addr,
                "disconnect",
                json!({ "user": "tester",
                        "disconnect": { "code": 3001, "reason": "test: reconnect" } }),
            )
            .await;
            send(api_addr, publish(3), &mut expected).await;
            let deadline = Instant::now() + STEP;
            while !present_users(api_addr).await.is_empty() {
                assert!(Instant::now() < deadline, "the page is still present");
                sleep(Duration::from_millis(5)).await;
            }
            send(api_addr, publish(5), &mut expected).await;
            assert!(
                present_users(api_addr).await.is_empty(),
                "the page came back before the missed batch was published: \
                 nothing was recovered in cut {cut}"
            );
            dt.wait_for(
                &me,
                &format!(
                    "{EVENTS}.filter(e => e.endsWith('resubscribed: missed messages recovered')).length === {}",
                    cut + 1
                ),
                "the resubscribe after a cut",
            )
            .await;
            send(api_addr, publish(5), &mut expected).await;
        }
        let total = expected.len();
        dt.wait_for(
            &me,
            &format!("{MESSAGES}.length >= {total}"),
            "every publication shown",
        )
        .await;
        // Anything duplicated would arrive with or right after the rest.
        sleep(Duration::from_millis(300)).await;
        let shown = dt.eval(&me, MESSAGES).await;
        assert_eq!(shown, json!(expected), "every publication once, in order");
        let events = dt.eval(&me, EVENTS).await;
        assert_eq!(
            events_ending(&events, "resubscribed: missed messages recovered"),
            CUTS,
            "{events:#}"
        );
        assert_eq!(
            events_ending(&events, "could not be recovered"),
            0,
            "{events:#}"
        );
        assert_eq!(
            events_ending(
                &events,
                "connection lost (3001 test: reconnect); reconnecting"
            ),
            CUTS,
            "{events:#}"
        );

        // A late joiner sees the room's last 20 messages, from history.
        let (_, carol) = dt
            .open(&format!(
                "http://127.0.0.1:{page_port}/?user=carol&room=lobby"
            ))
            .await;
        dt.wait_for(
            &carol,
            &format!("{MESSAGES}.length >= 20"),
            "the late joiner's history",
        )
        .await;
        sleep(Duration::from_millis(300)).await;
        let shown = dt.eval(&carol, MESSAGES).await;
        assert_eq!(shown, json!(expected[total - 20..]), "the last 20, once");
    };
    timeout(Duration::from_secs(150), run)
        .await
        .expect("the chat page test took over 150 s");
    drop(browser);
    drop(pages);
    drop(weir);
    let _ = std::fs::remove_dir_all(&dir);
}
