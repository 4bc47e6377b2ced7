//! Shared by the tests that run an example the way a person does (a
//! `weir serve` child, the example's own Node server, headless Chromium):
//! child processes ended by PID when dropped, free loopback ports, and a
//! DevTools protocol client that opens pages (each in a browser context of
//! its own when it must not share cookies) and reads what they show.
#![allow(dead_code)]

use crate::common::{self, STEP};
use futures_util::SinkExt;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::time::{sleep, Instant};
use tokio_tungstenite::tungstenite::Message;

/// The repository's root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A loopback port nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child process ended (by its PID, or by its own process group when
/// it has one) when the test drops it.
pub struct Killed {
    pub child: Child,
    pub group: bool,
}

impl Drop for Killed {
    fn drop(&mut self) {
        if self.group {
            let pgid = libc::pid_t::try_from(self.child.id()).unwrap();
            // SAFETY: kill(2) on the process group this test created.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
        } else {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// Waits (bounded by `STEP`) until `addr` accepts connections; fails if
/// `child` exits first.
pub async fn wait_listening(addr: SocketAddr, child: &mut Child, what: &str) {
    let deadline = Instant::now() + STEP;
    while TcpStream::connect(addr).await.is_err() {
        assert!(Instant::now() < deadline, "{what} did not listen on {addr}");
        assert!(child.try_wait().unwrap().is_none(), "{what} exited");
        sleep(Duration::from_millis(20)).await;
    }
}

/// Headless Chromium (`chromium` on PATH, or `WEIR_CHROMIUM`) with a fresh
/// profile in `profile`, in a process group of its own (its helpers die
/// with it), and a DevTools client on it.
pub async fn chromium(profile: &Path) -> (Killed, DevTools) {
    let binary = std::env::var("WEIR_CHROMIUM").unwrap_or_else(|_| "chromium".into());
    let mut browser = Killed {
        child: Command::new(&binary)
            .args([
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-extensions",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                // Every tab keeps its timers (clients' pings and
                // reconnects) running at full rate.
                "--disable-background-timer-throttling",
                "--disable-renderer-backgrounding",
                "--disable-backgrounding-occluded-windows",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("about:blank")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start {binary} ({e}); scripts/test.sh installs Debian's chromium")
            }),
        group: true,
    };
    let devtools = DevTools::connect(profile, &mut browser.child).await;
    (browser, devtools)
}

/// A DevTools protocol client over the browser's WebSocket: one
/// connection, pages attached with `flatten` so each call names its session.
pub struct DevTools {
    ws: common::Ws,
    next_id: u64,
    /// The expression whose value a failed `wait_for` reports: what the
    /// page shows.
    shown: String,
}

impl DevTools {
    pub async fn connect(profile: &Path, child: &mut Child) -> DevTools {
        // Chromium writes its port and browser path here once it listens.
        let file = profile.join("DevToolsActivePort");
        let deadline = Instant::now() + STEP;
        let text = loop {
            if let Ok(text) = std::fs::read_to_string(&file) {
                if text.lines().count() >= 2 {
                    break text;
                }
            }
            assert!(
                Instant::now() < deadline,
                "chromium wrote no DevToolsActivePort"
            );
            assert!(child.try_wait().unwrap().is_none(), "chromium exited");
            sleep(Duration::from_millis(50)).await;
        };
        let mut lines = text.lines();
        let port = lines.next().unwrap().trim();
        let path = lines.next().unwrap().trim();
        let ws = common::client(&format!("ws://127.0.0.1:{port}{path}")).await;
        DevTools {
            ws,
            next_id: 0,
            shown: "document.body.innerText".into(),
        }
    }

    /// Sets what a failed `wait_for` reports (default: the page's text).
    pub fn set_shown(&mut self, expression: &str) {
        self.shown = expression.into();
    }

    pub async fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({ "id": id, "method": method, "params": params });
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        self.ws.send(Message::text(msg.to_string())).await.unwrap();
        loop {
            let reply = common::next(&mut self.ws).await;
            let Ok(text) = reply.into_text() else {
                continue;
            };
            let v: Value = serde_json::from_str(&text).unwrap();
            if v["id"] == id {
                assert!(v.get("error").is_none(), "{method}: {v}");
                return v["result"].clone();
            }
        }
    }

    /// Opens `url` in a new tab; its target id and session.
    pub async fn open(&mut self, url: &str) -> (String, String) {
        self.open_in(url, json!({})).await
    }

    /// Opens `url` in a new tab of a browser context of its own (cookies
    /// and storage apart, like a second browser profile); its target id
    /// and session.
    pub async fn open_private(&mut self, url: &str) -> (String, String) {
        let context = self
            .call(None, "Target.createBrowserContext", json!({}))
            .await["browserContextId"]
            .clone();
        self.open_in(url, json!({ "browserContextId": context }))
            .await
    }

    async fn open_in(&mut self, url: &str, mut params: Value) -> (String, String) {
        params["url"] = json!(url);
        let target = self.call(None, "Target.createTarget", params).await["targetId"]
            .as_str()
            .unwrap()
            .to_string();
        let session = self
            .call(
                None,
                "Target.attachToTarget",
                json!({ "targetId": target, "flatten": true }),
            )
            .await["sessionId"]
            .as_str()
            .unwrap()
            .to_string();
        (target, session)
    }

    /// Closes a tab opened by `open` or `open_private`.
    pub async fn close(&mut self, target: &str) {
        self.call(None, "Target.closeTarget", json!({ "targetId": target }))
            .await;
    }

    /// The value of a JavaScript expression in the page, or the exception
    /// it threw.
    pub async fn try_eval(&mut self, session: &str, expression: &str) -> Result<Value, Value> {
        let result = self
            .call(
                Some(session),
                "Runtime.evaluate",
                json!({ "expression": expression, "returnByValue": true, "awaitPromise": true }),
            )
            .await;
        match result.get("exceptionDetails") {
            Some(e) => Err(e.clone()),
            None => Ok(result["result"]["value"].clone()),
        }
    }

    /// The value of a JavaScript expression in the page.
    pub async fn eval(&mut self, session: &str, expression: &str) -> Value {
        self.try_eval(session, expression)
            .await
            .unwrap_or_else(|e| panic!("{expression}: {e}"))
    }

    /// Waits until `expression` is true in the page; on time-out, fails
    /// with what the page shows.
    pub async fn wait_for(&mut self, session: &str, expression: &str, what: &str) {
        let deadline = Instant::now() + STEP;
        loop {
            // Throws while the page is still loading (no elements yet).
            if self.try_eval(session, expression).await == Ok(json!(true)) {
                return;
            }
            if Instant::now() > deadline {
                let shown = self.shown.clone();
                let shown = self.try_eval(session, &shown).await;
                panic!("timed out waiting for {what}; the page shows {shown:#?}");
            }
            sleep(Duration::from_millis(50)).await;
        }
    }
}
