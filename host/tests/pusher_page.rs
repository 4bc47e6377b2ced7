//! The pusher example as a person uses it: `weir serve` on
//! examples/pusher/routes.toml (its ports moved to free loopback ones, the
//! secret from the environment), the example's own backend
//! (`node examples/pusher/server.mjs`: the `pusher` server library's
//! `authorizeChannel`, `authenticateUser`, `trigger` and `sendToUser`
//! against weir's HTTP API), and examples/pusher/index.html in headless
//! Chromium, where the real laravel-echo runs over the real pusher-js. Two
//! users log in from two browser contexts (cookies apart) and the test
//! reads what each page shows: both in the other's presence list (Echo's
//! `here` and `joining`), a message one posts shown on the other (backend →
//! HTTP API → the private channel) and once on the sender (its socket
//! excluded), the typing indicator from a whisper (a client event on the
//! presence channel), a direct message through user authentication, and
//! the other leaving when one page closes (`leaving`).
//!
//! Needs Chromium (`chromium` on PATH, or `WEIR_CHROMIUM`), node, and the
//! example's pinned packages in examples/pusher/node_modules;
//! scripts/test.sh installs all three.

mod browser_support;
mod common;

use browser_support::{free_port, repo, wait_listening, DevTools, Killed};
use common::STEP;
use serde_json::json;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{sleep, timeout};

const SECRET: &str = "pusher-page-test-secret";

/// examples/pusher/routes.toml with its gateway and page ports replaced;
/// each must be found, so the test follows the example.
fn example_routes(gw: u16, page: u16) -> String {
    let mut text = std::fs::read_to_string(repo().join("examples/pusher/routes.toml")).unwrap();
    for (from, to) in [
        ("\"127.0.0.1:8080\"", format!("\"127.0.0.1:{gw}\"")),
        ("http://127.0.0.1:3000", format!("http://127.0.0.1:{page}")),
        ("http://localhost:3000", format!("http://localhost:{page}")),
    ] {
        assert!(
            text.contains(from),
            "examples/pusher/routes.toml names {from}"
        );
        text = text.replace(from, &to);
    }
    text
}

/// What the page shows: `from: text` per line of the chat (notices have
/// no `from`), who is online, who is typing, the connection state.
const MESSAGES: &str = "[...document.querySelectorAll('#messages li')].map(li => \
    (li.querySelector('.from')?.textContent ?? '') + ': ' + li.querySelector('.text').textContent)";
const ONLINE: &str = "[...document.querySelectorAll('#online .user')].map(e => e.textContent)";
const SHOWN: &str = "({ state: document.getElementById('state').textContent, \
    online: [...document.querySelectorAll('#online .user')].map(e => e.textContent), \
    typing: document.getElementById('typing').textContent, \
    messages: [...document.querySelectorAll('#messages li')].map(li => li.textContent) })";

/// Opens the page in a browser context of its own and logs in as `name`;
/// the tab's target and session once the page is connected.
async fn log_in(dt: &mut DevTools, url: &str, name: &str) -> (String, String) {
    let (target, session) = dt.open_private(url).await;
    dt.wait_for(
        &session,
        "!document.getElementById('login').classList.contains('hidden')",
        "the login form",
    )
    .await;
    dt.eval(
        &session,
        &format!(
            "document.getElementById('name').value = '{name}'; \
             document.getElementById('login').requestSubmit(); true"
        ),
    )
    .await;
    dt.wait_for(
        &session,
        &format!("document.getElementById('state').textContent === 'connected as {name}'"),
        &format!("{name} connected"),
    )
    .await;
    (target, session)
}

/// Types `text` in the page's message box (firing `input`, which whispers
/// "typing") and, if `send`, submits it.
async fn type_text(dt: &mut DevTools, session: &str, text: &str, send: bool) {
    let submit = if send {
        "document.getElementById('say').requestSubmit();"
    } else {
        ""
    };
    dt.eval(
        session,
        &format!(
            "{{ const t = document.getElementById('text'); t.value = {text}; \
               t.dispatchEvent(new Event('input')); {submit} }} true",
            text = json!(text)
        ),
    )
    .await;
}

async fn wait_shows(dt: &mut DevTools, session: &str, list: &str, line: &str) {
    dt.wait_for(
        session,
        &format!("{list}.includes({})", json!(line)),
        &format!("{line:?} in {list}"),
    )
    .await;
}

/// The status of one plain HTTP request to the backend.
async fn status(addr: SocketAddr, head: &str, body: &str) -> u16 {
    let request = format!(
        "{head}\r\nhost: {addr}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
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
    .expect("the backend answered in time");
    String::from_utf8_lossy(&answer)[9..12].parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pusher_example_chats_with_presence_whispers_and_leaves_in_chromium() {
    let example = repo().join("examples/pusher");
    for package in ["pusher", "pusher-js", "laravel-echo"] {
        assert!(
            example.join("node_modules").join(package).exists(),
            "examples/pusher/node_modules/{package} missing: run scripts/test.sh \
             (or npm ci in examples/pusher)"
        );
    }
    let (gw_port, page_port) = (free_port(), free_port());
    let dir = std::env::temp_dir().join(format!("weir-pusher-page-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let routes = dir.join("routes.toml");
    std::fs::write(&routes, example_routes(gw_port, page_port)).unwrap();

    let mut weir = Killed {
        child: Command::new(env!("CARGO_BIN_EXE_weir"))
            .arg("serve")
            .arg(&routes)
            .env("PUSHER_APP_SECRET", SECRET)
            .env("RUST_LOG", "warn")
            .env("WEIR_CACHE_DIR", dir.join("cache"))
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
        group: false,
    };
    let gw_addr: SocketAddr = format!("127.0.0.1:{gw_port}").parse().unwrap();
    wait_listening(gw_addr, &mut weir.child, "weir serve").await;

    let mut backend = Killed {
        child: Command::new("node")
            .arg(example.join("server.mjs"))
            .env("PORT", page_port.to_string())
            .env("WEIR_HOST", "127.0.0.1")
            .env("WEIR_PORT", gw_port.to_string())
            .env("PUSHER_APP_SECRET", SECRET)
            .stdout(Stdio::null())
            .spawn()
            .expect("node (scripts/test.sh installs it)"),
        group: false,
    };
    let page_addr: SocketAddr = format!("127.0.0.1:{page_port}").parse().unwrap();
    wait_listening(page_addr, &mut backend.child, "server.mjs").await;

    // The backend signs nothing for a visitor who has not logged in.
    assert_eq!(
        status(
            page_addr,
            "POST /broadcasting/auth HTTP/1.1\r\ncontent-type: application/x-www-form-urlencoded",
            "socket_id=1.2&channel_name=presence-chat",
        )
        .await,
        403
    );

    let (browser, mut dt) = browser_support::chromium(&dir.join("chromium")).await;
    dt.set_shown(SHOWN);
    let url = format!("http://127.0.0.1:{page_port}/");

    let run = async {
        // Alice alone, then Bob: each sees both (Bob from `here`, Alice
        // from `joining`).
        let (_, alice) = log_in(&mut dt, &url, "alice").await;
        let only_alice = format!("JSON.stringify({ONLINE}) === '[\"alice\"]'");
        dt.wait_for(&alice, &only_alice, "alice online").await;
        let (bob_tab, bob) = log_in(&mut dt, &url, "bob").await;
        let both = format!("JSON.stringify({ONLINE}) === '[\"alice\",\"bob\"]'");
        dt.wait_for(&bob, &both, "both online on bob's page").await;
        dt.wait_for(&alice, &both, "both online on alice's page")
            .await;
        wait_shows(&mut dt, &alice, MESSAGES, ": bob joined").await;

        // A message Bob posts reaches Alice through the backend's trigger
        // on the private channel; Bob's own socket is excluded, so his page
        // shows it once, from his own post.
        type_text(&mut dt, &bob, "hello alice", true).await;
        wait_shows(&mut dt, &alice, MESSAGES, "bob: hello alice").await;
        wait_shows(&mut dt, &bob, MESSAGES, "bob: hello alice").await;

        // Alice types: a whisper (client event) shows on Bob's page.
        type_text(&mut dt, &alice, "hi b", false).await;
        dt.wait_for(
            &bob,
            "document.getElementById('typing').textContent === 'alice is typing…'",
            "alice typing on bob's page",
        )
        .await;
        // ...and her message arrives too; then a direct one, to Bob alone
        // through his signed-in user channel.
        type_text(&mut dt, &alice, "hi bob", true).await;
        wait_shows(&mut dt, &bob, MESSAGES, "alice: hi bob").await;
        type_text(&mut dt, &alice, "@bob just you", true).await;
        wait_shows(&mut dt, &bob, MESSAGES, "alice → you: just you").await;
        wait_shows(&mut dt, &alice, MESSAGES, "you → bob: just you").await;

        // Nothing came twice, and nobody saw the sender's own copy
        // through the channel.
        sleep(Duration::from_millis(300)).await;
        let on_alice = dt.eval(&alice, MESSAGES).await;
        let on_bob = dt.eval(&bob, MESSAGES).await;
        assert_eq!(
            on_alice,
            json!([
                ": bob joined",
                "bob: hello alice",
                "alice: hi bob",
                "you → bob: just you"
            ])
        );
        assert_eq!(
            on_bob,
            json!(["bob: hello alice", "alice: hi bob", "alice → you: just you"])
        );

        // Bob closes his page: Alice sees him leave.
        dt.close(&bob_tab).await;
        wait_shows(&mut dt, &alice, MESSAGES, ": bob left").await;
        dt.wait_for(&alice, &only_alice, "bob gone from the list")
            .await;
    };
    timeout(Duration::from_secs(120), run)
        .await
        .expect("the pusher page test took over 120 s");
    drop(browser);
    drop(backend);
    drop(weir);
    let _ = std::fs::remove_dir_all(&dir);
}
