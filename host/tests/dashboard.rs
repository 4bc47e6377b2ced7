//! The admin listener's dashboard: its session cookie and CSRF header, route
//! drain and resume, the "try a route" console, the overview's counters,
//! and the page itself in headless Chromium (driven over the DevTools
//! protocol, as a user would: typing the token, choosing a file, clicking)
//! against a gateway under load, with a screenshot.
//!
//! Needs Chromium (`chromium` on PATH, or `WEIR_CHROMIUM`); scripts/test.sh
//! installs Debian's package when it is missing.

mod admin_support;
mod common;
mod guest_support;

use admin_support::{request_head, Gateway, TOKEN};
use common::STEP;
use futures_util::SinkExt;
use guest_support::wasm;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{sleep, timeout, Instant};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

const ROUTES: &str = "[[route]]\npath = \"/plain\"\nguest = \"echo.wasm\"\n\n\
                      [[route]]\npath = \"/echo\"\nnative = \"echo\"\n";

/// One HTTP/1.1 exchange with the admin listener: (status, headers, body).
async fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, Vec<(String, String)>, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let head = request_head(method, path, &addr.to_string(), headers, body.len());
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    // Read the head, then the body by its length (DevTools keeps the
    // connection open whatever the request says).
    let mut raw = Vec::new();
    let deadline = Instant::now() + STEP;
    let mut chunk = [0u8; 16384];
    loop {
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok());
            match length {
                Some(n) if raw.len() >= end + 4 + n => break,
                _ => {}
            }
        }
        let n = timeout(deadline - Instant::now(), stream.read(&mut chunk))
            .await
            .expect("an answer in time")
            .unwrap();
        if n == 0 {
            break;
        }
        raw.extend_from_slice(&chunk[..n]);
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP answer");
    let mut lines = head.lines();
    let status = lines.next().unwrap()[9..12].parse().unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    (status, headers, body.to_string())
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// Logs in as the page does; the session cookie (`weir_admin=…`).
async fn login(addr: SocketAddr) -> String {
    let (status, headers, body) = http(addr, "POST", "/session", &[], TOKEN.as_bytes()).await;
    assert_eq!(status, 204, "{body}");
    let set = header(&headers, "set-cookie").expect("a session cookie");
    assert!(set.contains("HttpOnly"), "{set}");
    assert!(set.contains("SameSite=Strict"), "{set}");
    set.split(';').next().unwrap().to_string()
}

async fn overview(addr: SocketAddr, cookie: &str) -> Value {
    let (status, _, body) = http(addr, "GET", "/api/overview", &[("cookie", cookie)], b"").await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

fn route<'a>(overview: &'a Value, path: &str) -> &'a Value {
    overview["routes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["path"] == path)
        .unwrap_or_else(|| panic!("{path} in {overview}"))
}

/// The admin console's WebSocket to `path`, with `cookie`.
async fn console(admin: SocketAddr, path: &str, cookie: &str) -> common::Ws {
    let mut req = format!("ws://{admin}/console?path={}", path.replace('/', "%2F"))
        .into_client_request()
        .unwrap();
    req.headers_mut().insert("cookie", cookie.parse().unwrap());
    let (ws, _) = timeout(STEP, tokio_tungstenite::connect_async(req))
        .await
        .unwrap()
        .expect("console upgrade");
    ws
}

async fn console_event(ws: &mut common::Ws) -> Value {
    match common::next(ws).await {
        Message::Text(t) => serde_json::from_str(&t).unwrap(),
        other => panic!("expected a console event, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_csrf_drain_console_and_counters() {
    let gw = Gateway::start_with("dash-api", &["echo"], ROUTES, true).await;
    let admin = gw.admin;

    // The page needs no credentials and may not be framed or run others' scripts.
    let (status, headers, body) = http(admin, "GET", "/", &[], b"").await;
    assert_eq!(status, 200);
    assert!(body.contains("/dashboard.js"), "{body}");
    let csp = header(&headers, "content-security-policy").unwrap();
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert_eq!(header(&headers, "x-frame-options"), Some("DENY"));

    // Data needs the token or a session.
    let (status, _, _) = http(admin, "GET", "/api/overview", &[], b"").await;
    assert_eq!(status, 401);
    let (status, headers, _) = http(admin, "POST", "/session", &[], b"not-the-token").await;
    assert_eq!(status, 401);
    assert!(header(&headers, "set-cookie").is_none());
    let (status, _, _) = http(
        admin,
        "GET",
        "/api/overview",
        &[("cookie", "weir_admin=0123456789abcdef")],
        b"",
    )
    .await;
    assert_eq!(status, 401, "a made-up session is no session");
    let cookie = login(admin).await;

    // Counters: messages in and out on the native route.
    let mut ws = common::client(&gw.url("/echo")).await;
    for i in 0..50 {
        ws.send(Message::text(format!("m{i}"))).await.unwrap();
        assert_eq!(common::next(&mut ws).await, Message::text(format!("m{i}")));
    }
    let o = overview(admin, &cookie).await;
    let echo = route(&o, "/echo");
    assert_eq!(echo["connections"], 1, "{echo}");
    assert_eq!(echo["totals"]["messages_in"], 50, "{echo}");
    assert_eq!(echo["totals"]["messages_out"], 50, "{echo}");
    assert_eq!(echo["behaviour"], "echo");
    let plain = route(&o, "/plain");
    assert_eq!(plain["version"], 1, "{plain}");
    assert!(plain["call_p99_us"].is_null(), "no calls yet: {plain}");

    // A change made with the cookie needs the custom header.
    let (status, _, body) = http(
        admin,
        "POST",
        "/routes/%2Fecho/drain",
        &[("cookie", &cookie)],
        b"",
    )
    .await;
    assert_eq!(status, 403, "{body}");
    ws.send(Message::text("still open")).await.unwrap();
    assert_eq!(common::next(&mut ws).await, Message::text("still open"));

    // Drain: the open connection is closed with 1001, new ones get 503.
    let (status, _, body) = http(
        admin,
        "POST",
        "/routes/%2Fecho/drain",
        &[("cookie", &cookie), ("x-weir-admin", "1")],
        b"",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    match common::next(&mut ws).await {
        Message::Close(Some(frame)) => assert_eq!(u16::from(frame.code), 1001),
        other => panic!("expected a 1001 close, got {other:?}"),
    }
    let refused = tokio_tungstenite::connect_async(gw.url("/echo")).await;
    match refused {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
            assert_eq!(resp.status(), 503)
        }
        other => panic!("a drained route must answer 503, got {other:?}"),
    }
    assert_eq!(
        route(&overview(admin, &cookie).await, "/echo")["draining"],
        true
    );
    // The bearer token needs no header (it is not sent by browsers on their own).
    let (status, body) = gw
        .admin(http::Method::POST, "/routes/%2Fecho/resume", Vec::new())
        .await;
    assert_eq!(status, 200, "{body}");
    let mut ws = common::client(&gw.url("/echo")).await;
    ws.send(Message::text("back")).await.unwrap();
    assert_eq!(common::next(&mut ws).await, Message::text("back"));

    // The console: bridged to a public route, replies and close codes as events.
    let mut c = console(admin, "/plain", &cookie).await;
    assert_eq!(console_event(&mut c).await["kind"], "open");
    c.send(Message::text("{\"number\": 1}")).await.unwrap();
    let ev = console_event(&mut c).await;
    assert_eq!(ev["kind"], "text");
    assert_eq!(ev["data"], "{\"number\": 1}");
    c.send(Message::Close(None)).await.unwrap();
    assert!(
        matches!(common::next(&mut c).await, Message::Close(_)),
        "the console completes the close handshake"
    );
    // A close from the route is an event with its code.
    let mut c = console(admin, "/echo", &cookie).await;
    assert_eq!(console_event(&mut c).await["kind"], "open");
    let (status, body) = gw
        .admin(http::Method::POST, "/routes/%2Fecho/drain", Vec::new())
        .await;
    assert_eq!(status, 200, "{body}");
    let ev = console_event(&mut c).await;
    assert_eq!(
        ev,
        json!({"kind": "close", "code": 1001, "reason": "route drained"})
    );
    let (status, _) = gw
        .admin(http::Method::POST, "/routes/%2Fecho/resume", Vec::new())
        .await;
    assert_eq!(status, 200);
    let mut c = console(admin, "/nowhere", &cookie).await;
    let ev = console_event(&mut c).await;
    assert_eq!(
        ev,
        json!({"kind": "refused", "status": 404, "body": "no route for this path\n"})
    );
    // The console needs a session, and the dashboard's own origin.
    let unauth =
        tokio_tungstenite::connect_async(format!("ws://{admin}/console?path=%2Fecho")).await;
    assert!(
        matches!(unauth, Err(tokio_tungstenite::tungstenite::Error::Http(ref r)) if r.status() == 401),
        "{unauth:?}"
    );
    let mut req = format!("ws://{admin}/console?path=%2Fecho")
        .into_client_request()
        .unwrap();
    req.headers_mut().insert("cookie", cookie.parse().unwrap());
    req.headers_mut()
        .insert("origin", "http://evil.example".parse().unwrap());
    let cross = tokio_tungstenite::connect_async(req).await;
    assert!(
        matches!(cross, Err(tokio_tungstenite::tungstenite::Error::Http(ref r)) if r.status() == 403),
        "{cross:?}"
    );

    // Logging out ends the session.
    let (status, _, _) = http(admin, "DELETE", "/session", &[("cookie", &cookie)], b"").await;
    assert_eq!(status, 204);
    let (status, _, _) = http(admin, "GET", "/api/overview", &[("cookie", &cookie)], b"").await;
    assert_eq!(status, 401);

    // The token never reaches the log (the log ran at debug level).
    let log = gw.log();
    assert!(log.contains("dashboard session opened"), "{log}");
    assert!(!log.contains(TOKEN), "the admin token was logged");
    assert!(!log.contains(&cookie[11..]), "a session id was logged");
}

/// Chromium with the DevTools protocol on a port of its own, in a process
/// group of its own; killed (by that group) when dropped.
struct Chromium {
    child: std::process::Child,
    profile: std::path::PathBuf,
}

impl Drop for Chromium {
    fn drop(&mut self) {
        let pgid = libc::pid_t::try_from(self.child.id()).unwrap();
        // SAFETY: kill(2) on the process group this test created.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// A DevTools protocol session with one page.
struct Cdp {
    ws: common::Ws,
    next_id: u64,
}

impl Cdp {
    async fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let msg = json!({ "id": id, "method": method, "params": params });
        self.ws.send(Message::text(msg.to_string())).await.unwrap();
        loop {
            let Message::Text(text) = common::next(&mut self.ws).await else {
                continue;
            };
            let answer: Value = serde_json::from_str(&text).unwrap();
            if answer["id"] == id {
                assert!(answer.get("error").is_none(), "{method}: {answer}");
                return answer["result"].clone();
            }
        }
    }

    /// Runs `expression` in the page; its value.
    async fn eval(&mut self, expression: &str) -> Value {
        let result = self
            .call(
                "Runtime.evaluate",
                json!({ "expression": expression, "awaitPromise": true, "returnByValue": true }),
            )
            .await;
        assert!(
            result.get("exceptionDetails").is_none(),
            "{expression}: {result}"
        );
        result["result"]["value"].clone()
    }

    /// Waits until `expression` is true in the page.
    async fn until(&mut self, what: &str, expression: &str) {
        self.until_within(STEP, what, expression).await
    }

    async fn until_within(&mut self, within: Duration, what: &str, expression: &str) {
        let deadline = Instant::now() + within;
        // The page may not have loaded yet: an exception is a "not yet".
        let guarded = format!(
            "(() => {{ try {{ return !!({expression}); }} catch (_) {{ return false; }} }})()"
        );
        while self.eval(&guarded).await != Value::Bool(true) {
            if Instant::now() > deadline {
                let status = self
                    .eval("document.querySelector('#status')?.textContent")
                    .await;
                panic!("the page never showed {what} (its status line: {status})");
            }
            sleep(Duration::from_millis(100)).await;
        }
    }
}

async fn chromium(url: &str) -> (Chromium, Cdp) {
    let binary = std::env::var("WEIR_CHROMIUM").unwrap_or_else(|_| "chromium".into());
    // One profile per browser: the tests of this file run at once.
    static BROWSERS: AtomicU64 = AtomicU64::new(0);
    let profile = std::env::temp_dir().join(format!(
        "weir-dashboard-{}-{}",
        std::process::id(),
        BROWSERS.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&profile);
    let child = Command::new(&binary)
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            "--disable-background-networking",
            "--remote-debugging-port=0",
            "--window-size=1500,1000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(url)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot start {binary} ({e}); scripts/test.sh installs Debian's chromium")
        });
    let browser = Chromium { child, profile };
    // Chromium writes the port it took into the profile.
    let deadline = Instant::now() + STEP;
    let port: u16 = loop {
        let file = browser.profile.join("DevToolsActivePort");
        if let Some(port) = std::fs::read_to_string(&file)
            .ok()
            .and_then(|t| t.lines().next().and_then(|l| l.parse().ok()))
        {
            break port;
        }
        assert!(
            Instant::now() < deadline,
            "Chromium opened no DevTools port"
        );
        sleep(Duration::from_millis(50)).await;
    };
    let devtools: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let page_ws =
        loop {
            let (status, _, body) = http(devtools, "GET", "/json/list", &[], b"").await;
            if status == 200 {
                let list: Value = serde_json::from_str(&body).unwrap();
                if let Some(page) = list.as_array().unwrap().iter().find(|t| {
                    t["type"] == "page" && t["url"].as_str().unwrap_or("").starts_with(url)
                }) {
                    break page["webSocketDebuggerUrl"].as_str().unwrap().to_string();
                }
            }
            assert!(Instant::now() < deadline, "Chromium has no page at {url}");
            sleep(Duration::from_millis(50)).await;
        };
    let (ws, _) = tokio_tungstenite::connect_async(page_ws).await.unwrap();
    (browser, Cdp { ws, next_id: 0 })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_in_headless_chromium_under_load() {
    const LOAD_CONNECTIONS: usize = 24;
    let gw = Gateway::start("dash-browser", &["echo"], ROUTES).await;
    let url = format!("http://{}/", gw.admin);
    let (_browser, mut page) = chromium(&url).await;

    // Sign in as a user would.
    page.until("the login form", "!document.querySelector('#login').hidden")
        .await;
    page.eval(&format!(
        "document.querySelector('#token').value = {}; document.querySelector('#login-form').requestSubmit(); true",
        json!(TOKEN)
    ))
    .await;
    page.until(
        "the routes table",
        "!!document.querySelector('tr[data-route=\"/plain\"]')",
    )
    .await;

    // Load: connections on /plain, each checking every answer: echo.wasm's
    // (the same text) before the deploy, json.wasm's (the next even number)
    // after it; nothing else, nothing lost.
    let stop = Arc::new(AtomicBool::new(false));
    let echoed = Arc::new(AtomicU64::new(0));
    let mut load = Vec::new();
    for _ in 0..LOAD_CONNECTIONS {
        let (url, stop, echoed) = (gw.url("/plain"), stop.clone(), echoed.clone());
        load.push(tokio::spawn(async move {
            let mut ws = common::client(&url).await;
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let text = format!("{{\"number\": {n}}}");
                ws.send(Message::text(text.clone())).await.unwrap();
                let reply = match common::next(&mut ws).await {
                    Message::Text(t) => t.to_string(),
                    other => panic!("{other:?}"),
                };
                if reply != text {
                    let value: Value = serde_json::from_str(&reply).unwrap();
                    let next_even = if n % 2 == 1 { n + 1 } else { n + 2 };
                    assert_eq!(value["number"], next_even, "{reply} answers {text}");
                }
                echoed.fetch_add(1, Ordering::Relaxed);
                n += 1;
                sleep(Duration::from_millis(20)).await;
            }
            ws
        }));
    }
    page.until(
        &format!("{LOAD_CONNECTIONS} connections on /plain"),
        &format!(
            "document.querySelector('tr[data-route=\"/plain\"] .conns').textContent === '{LOAD_CONNECTIONS}'"
        ),
    )
    .await;
    page.until(
        "messages per second on /plain",
        "parseFloat(document.querySelector('tr[data-route=\"/plain\"] .min').textContent) > 0",
    )
    .await;

    // Deploy from the page: choose the file, click deploy.
    let root = page.call("DOM.getDocument", json!({})).await;
    let input = page
        .call(
            "DOM.querySelector",
            json!({ "nodeId": root["root"]["nodeId"], "selector": "input.deploy-file[data-route=\"/plain\"]" }),
        )
        .await;
    // Chromium reads a chosen file by its canonical path.
    let json_wasm = wasm("json").canonicalize().unwrap();
    page.call(
        "DOM.setFileInputFiles",
        json!({ "nodeId": input["nodeId"], "files": [json_wasm.display().to_string()] }),
    )
    .await;
    page.eval("document.querySelector('tr[data-route=\"/plain\"] button.deploy').click(); true")
        .await;
    // A deploy compiles the component (this test's cache is empty): seconds
    // on a busy machine.
    page.until_within(
        4 * STEP,
        "the deploy's result",
        "document.querySelector('#status').textContent.startsWith('deployed /plain: version 2')",
    )
    .await;
    page.until(
        "version 2 in the table",
        "document.querySelector('tr[data-route=\"/plain\"] .version').textContent.startsWith('v2')",
    )
    .await;
    // A new connection gets the new component's answer.
    let mut fresh = common::client(&gw.url("/plain")).await;
    fresh.send(Message::text("{\"number\": 1}")).await.unwrap();
    let reply = match common::next(&mut fresh).await {
        Message::Text(t) => t.to_string(),
        other => panic!("{other:?}"),
    };
    let value: Value = serde_json::from_str(&reply).unwrap();
    assert_eq!(
        value["number"], 2,
        "json.wasm answers the next even number: {reply}"
    );

    // The console from the page, to the native echo route.
    page.eval("document.querySelector('#console-path').value = '/echo'; document.querySelector('#console-form').requestSubmit(); true")
        .await;
    page.until(
        "the console open",
        "!document.querySelector('#console-text').disabled",
    )
    .await;
    page.eval("document.querySelector('#console-text').value = 'hello from the page'; document.querySelector('#console-send-form').requestSubmit(); true")
        .await;
    page.until(
        "the echo in the console",
        "[...document.querySelectorAll('#console-log li')].some(li => li.textContent === '← hello from the page')",
    )
    .await;

    // Let the charts gather a few seconds, then keep a picture.
    sleep(Duration::from_secs(3)).await;
    let shot = page
        .call("Page.captureScreenshot", json!({ "format": "png" }))
        .await;
    use base64::Engine as _;
    let png = base64::engine::general_purpose::STANDARD
        .decode(shot["data"].as_str().unwrap())
        .unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    let out = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard.png");
    std::fs::write(&out, &png).unwrap();
    if let Ok(dir) = std::env::var("WEIR_SCREENSHOT_DIR") {
        std::fs::write(std::path::Path::new(&dir).join("dashboard.png"), &png).unwrap();
    }
    eprintln!("dashboard screenshot: {}", out.display());
    let lines = page
        .eval("document.querySelectorAll('#chart-messages polyline').length")
        .await;
    assert_eq!(lines, 2, "one line per route");

    stop.store(true, Ordering::Relaxed);
    for task in load {
        let mut ws = timeout(STEP, task).await.unwrap().unwrap();
        let _ = ws.close(None).await;
    }
    assert!(echoed.load(Ordering::Relaxed) > LOAD_CONNECTIONS as u64);
}

/// With `[cluster] redis`, the page shows the fleet: each node's version
/// of a fleet route, and a node that refused the desired version (B's
/// route allows 1 MiB of memory, the component needs 4) as diverged, with
/// the cause; the routes table of a node without the fleet has no such
/// section.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_the_fleet_and_a_diverged_node() {
    use common::redis::{have_redis, Redis};
    if !have_redis() {
        return;
    }
    let redis = Redis::start(false).await;
    let routes = |extra: &str| {
        format!(
            "[cluster]\nredis = \"{}\"\n\n[[route]]\npath = \"/g\"\nguest = \"echo.wasm\"\n{extra}\n",
            redis.url()
        )
    };
    let a = Gateway::start("dash-fleet-a", &["echo"], &routes("")).await;
    let _b = Gateway::start("dash-fleet-b", &["echo"], &routes("memory = \"1MiB\"")).await;
    let (status, body) = a.deploy("/g", "big-memory").await;
    assert_eq!(status, 200, "{body}");
    let (_browser, mut page) = chromium(&format!("http://{}/", a.admin)).await;
    page.until("the login form", "!document.querySelector('#login').hidden")
        .await;
    page.eval(&format!(
        "document.querySelector('#token').value = {}; document.querySelector('#login-form').requestSubmit(); true",
        json!(TOKEN)
    ))
    .await;
    page.until(
        "the fleet diverged on /g",
        "!document.querySelector('#fleet').hidden && \
         document.querySelector('#fleet-summary').textContent.includes('DIVERGED: /g')",
    )
    .await;
    page.until(
        "B's row, diverged with its cause",
        "[...document.querySelectorAll('#fleet-routes tr.diverged')].some(tr => \
           tr.textContent.includes('refused version 1') && tr.textContent.includes('memory'))",
    )
    .await;
    let serving = page
        .eval("[...document.querySelectorAll('#fleet-routes tbody tr:not(.diverged)')].map(tr => tr.textContent).join('|')")
        .await;
    assert!(
        serving.as_str().unwrap().contains("1 of 1"),
        "A serves fleet version 1: {serving}"
    );
}
