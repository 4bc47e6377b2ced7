//! Deploying to a running `weir serve` through its admin API and SIGHUP:
//! swaps under load with every reply checked, refused components, rollback,
//! attachments carried across a swap, the bearer token, reloads.

mod admin_support;
mod common;
mod guest_support;

use admin_support::{free_port, Gateway, TOKEN, TOKEN_ENV};
use common::STEP;
use futures_util::{SinkExt, StreamExt};
use guest_support::wasm;
use http::Method;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::{timeout, Instant};
use tokio_tungstenite::tungstenite::Message;

/// Which component answered a `{"number": n}` message: echo sends it back
/// as it is; json answers the next even number above n.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Echo,
    Json,
}

fn request(n: u64) -> String {
    format!("{{\"number\": {n}}}")
}

fn answered_by(n: u64, reply: &str) -> Answer {
    if reply == request(n) {
        return Answer::Echo;
    }
    let value: serde_json::Value = serde_json::from_str(reply)
        .unwrap_or_else(|e| panic!("reply to {n} is not JSON ({e}): {reply}"));
    let m = value["number"].as_u64();
    let next_even = if n % 2 == 1 { n + 1 } else { n + 2 };
    assert_eq!(
        m,
        Some(next_even),
        "reply to {n} is neither version's: {reply}"
    );
    Answer::Json
}

type Ws = common::Ws;

async fn text(ws: &mut Ws) -> String {
    match timeout(STEP, ws.next()).await {
        Ok(Some(Ok(Message::Text(t)))) => t.to_string(),
        other => panic!("expected a text message, got {other:?}"),
    }
}

async fn ask(ws: &mut Ws, n: u64) -> Answer {
    ws.send(Message::text(request(n))).await.unwrap();
    let reply = text(ws).await;
    answered_by(n, &reply)
}

/// Deploys alternate between these; version k (1 = the file's) is echo
/// for odd k, json for even k.
fn kind_of(version: u64) -> Answer {
    if version % 2 == 1 {
        Answer::Echo
    } else {
        Answer::Json
    }
}

/// Under load (8 connections, 16 messages in flight each, every reply
/// checked in order), 20 deploys alternating two components: no
/// connection fails, no reply is lost or repeated, each reply is from one
/// of the two versions — and from the serving one for a message sent after
/// its deploy was answered, unless a later deploy had begun by the time the
/// reply came — and an idle connection's next message after each deploy is
/// answered by the new version.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deploys_under_load_lose_no_reply_and_take_effect_at_once() {
    const CONNS: usize = 8;
    const IN_FLIGHT: usize = 16;
    const DEPLOYS: u64 = 20;
    let gw = Gateway::start(
        "load",
        &["echo"],
        "[[route]]\npath = \"/g\"\nguest = \"echo.wasm\"\n",
    )
    .await;
    // Even: version phase/2 + 1 serves and no deploy is under way; odd: a
    // deploy is under way.
    let phase = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut load = Vec::new();
    for c in 0..CONNS {
        let (url, phase, stop) = (gw.url("/g"), phase.clone(), stop.clone());
        load.push(tokio::spawn(async move {
            let mut ws = common::client(&url).await;
            let mut in_flight = std::collections::VecDeque::new();
            let (mut next, mut replies, mut seen) = (c as u64 * 1_000_000_000, 0u64, [0u64; 2]);
            loop {
                while in_flight.len() < IN_FLIGHT && !stop.load(Ordering::Acquire) {
                    let sent_phase = phase.load(Ordering::Acquire);
                    ws.send(Message::text(request(next))).await.expect("send");
                    in_flight.push_back((next, sent_phase));
                    next += 1;
                }
                let Some((n, sent_phase)) = in_flight.pop_front() else {
                    break;
                };
                let reply = text(&mut ws).await;
                let answer = answered_by(n, &reply);
                seen[answer as usize] += 1;
                replies += 1;
                if sent_phase % 2 == 0 && answer != kind_of(sent_phase / 2 + 1) {
                    assert!(
                        phase.load(Ordering::Acquire) > sent_phase,
                        "message {n} sent after version {} was deployed got an older version's reply",
                        sent_phase / 2 + 1
                    );
                }
            }
            ws.close(None).await.expect("close");
            (next - c as u64 * 1_000_000_000, replies, seen)
        }));
    }
    let mut probe = common::client(&gw.url("/g")).await;
    assert_eq!(ask(&mut probe, 1).await, Answer::Echo);
    for k in 1..=DEPLOYS {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let version = k + 1;
        let name = if kind_of(version) == Answer::Echo {
            "echo"
        } else {
            "json"
        };
        phase.fetch_add(1, Ordering::AcqRel);
        let (status, body) = gw.deploy("/g", name).await;
        assert_eq!(status, 200, "deploy {k}: {body}");
        assert!(body.contains(&format!("\"version\":{version}")), "{body}");
        phase.fetch_add(1, Ordering::AcqRel);
        assert_eq!(
            ask(&mut probe, 2 * k + 1).await,
            kind_of(version),
            "the first message after deploy {k} is answered by version {version}"
        );
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.store(true, Ordering::Release);
    let (mut sent, mut replied, mut seen) = (0, 0, [0; 2]);
    for conn in load {
        let (s, r, by) = timeout(STEP, conn)
            .await
            .expect("load ends")
            .expect("load conn");
        sent += s;
        replied += r;
        seen[0] += by[0];
        seen[1] += by[1];
    }
    eprintln!("{sent} messages, {replied} replies (echo, json): {seen:?}");
    assert_eq!(sent, replied, "every message got exactly one reply");
    assert!(
        seen[0] > 0 && seen[1] > 0,
        "both versions answered: {seen:?}"
    );
    assert_eq!(
        gw.metric("weir_guest_deploys_total{route=\"/g\"}").await,
        Some(DEPLOYS)
    );
    assert_eq!(
        gw.metric("weir_guest_version{route=\"/g\"}").await,
        Some(DEPLOYS + 1)
    );
    assert_eq!(
        gw.metric("weir_route_closes_total{route=\"/g\",code=\"1011\"}")
            .await,
        Some(0),
        "no connection failed"
    );
}

/// A file that is not a component, a component of another world and one
/// that needs more memory than the route allows are each refused with the
/// cause (422), counted, and the serving version keeps answering on an
/// open connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_components_are_refused_and_the_old_version_keeps_serving() {
    let gw = Gateway::start(
        "broken",
        &["echo"],
        "[[route]]\npath = \"/small\"\nguest = \"echo.wasm\"\nmemory = \"1MiB\"\n",
    )
    .await;
    let mut ws = common::client(&gw.url("/small")).await;
    assert_eq!(ask(&mut ws, 1).await, Answer::Echo);
    let endpoint = weir::client::route_endpoint("/small", "component");
    let (status, body) = gw
        .admin(Method::PUT, &endpoint, b"not a component".to_vec())
        .await;
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("not a WebAssembly file"), "{body}");
    let (status, body) = gw.deploy("/small", "wrong-world").await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body.contains("does not fit this gateway's guest ABI"),
        "{body}"
    );
    let (status, body) = gw.deploy("/small", "big-memory").await;
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("memory limit"), "{body}");
    for n in 2..5 {
        assert_eq!(ask(&mut ws, n).await, Answer::Echo);
    }
    assert_eq!(gw.version("/small").await, 1);
    assert_eq!(
        gw.metric("weir_guest_deploys_failed_total{route=\"/small\"}")
            .await,
        Some(3)
    );
    assert_eq!(
        gw.metric("weir_guest_deploys_total{route=\"/small\"}")
            .await,
        Some(0)
    );
    // A route that does not exist is 404.
    let (status, body) = gw.deploy("/nope", "echo").await;
    assert_eq!(status, 404, "{body}");
}

/// A rollback puts the previous version back for open connections; with
/// nothing kept it is refused (409) and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_puts_the_previous_version_back() {
    let gw = Gateway::start(
        "rollback",
        &["echo"],
        "[[route]]\npath = \"/g\"\nguest = \"echo.wasm\"\n\n[[route]]\npath = \"/e\"\nnative = \"echo\"\n",
    )
    .await;
    let mut ws = common::client(&gw.url("/g")).await;
    let (status, body) = gw.deploy("/g", "json").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(ask(&mut ws, 1).await, Answer::Json);
    let rollback = weir::client::route_endpoint("/g", "rollback");
    let (status, body) = gw.admin(Method::POST, &rollback, Vec::new()).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"version\":1"), "{body}");
    assert_eq!(ask(&mut ws, 3).await, Answer::Echo);
    assert_eq!(gw.version("/g").await, 1);
    let (status, body) = gw.admin(Method::POST, &rollback, Vec::new()).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(ask(&mut ws, 5).await, Answer::Echo);
    // A native route takes no component.
    let (status, body) = gw.deploy("/e", "echo").await;
    assert_eq!(status, 409, "{body}");
}

/// Issue 36: after `weir rollback`, a reload re-deployed the newer component
/// because the routes file points at the file the build overwrote. A
/// rollback now pins the version: a reload leaves it (and says so) until
/// the next deploy or an unpin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_pins_the_version_against_reloads_until_unpinned() {
    let gw = Gateway::start(
        "pin",
        &["echo>v"],
        "[[route]]\npath = \"/g\"\nguest = \"v.wasm\"\n",
    )
    .await;
    let mut ws = common::client(&gw.url("/g")).await;
    // A new build overwrites v.wasm and is reloaded: version 2 (json).
    std::fs::copy(wasm("json"), gw.dir.join("v.wasm")).unwrap();
    let (status, body) = gw.admin(Method::POST, "/reload", Vec::new()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(ask(&mut ws, 1).await, Answer::Json);
    let (status, body) = gw
        .admin(
            Method::POST,
            &weir::client::route_endpoint("/g", "rollback"),
            Vec::new(),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"pinned\":true"), "{body}");
    assert_eq!(ask(&mut ws, 3).await, Answer::Echo);
    // The file still holds the newer build: a reload keeps version 1 and says why.
    let (status, body) = gw.admin(Method::POST, "/reload", Vec::new()).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("pinned to version 1 by a rollback"), "{body}");
    assert_eq!(ask(&mut ws, 5).await, Answer::Echo);
    assert_eq!(gw.version("/g").await, 1);
    let (_, routes) = gw.admin(Method::GET, "/routes", Vec::new()).await;
    assert!(routes.contains("\"pinned\":true"), "{routes}");
    // Unpinned, the next reload deploys the file again.
    let unpin = weir::client::route_endpoint("/g", "unpin");
    let (status, body) = gw.admin(Method::POST, &unpin, Vec::new()).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"unpinned\":true"), "{body}");
    let (status, body) = gw.admin(Method::POST, "/reload", Vec::new()).await;
    assert_eq!(status, 200, "{body}");
    assert!(!body.contains("pinned"), "{body}");
    assert_eq!(ask(&mut ws, 7).await, Answer::Json);
}

/// The counter example keeps its count in the connection's attachment: a
/// swap (here to a new version of the same component) keeps counting where
/// the old version stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attachments_carry_over_a_swap() {
    let gw = Gateway::start(
        "attach",
        &["counter"],
        "[[route]]\npath = \"/count\"\nguest = \"counter.wasm\"\n",
    )
    .await;
    let mut ws = common::client(&gw.url("/count")).await;
    for expect in ["1", "2", "3"] {
        ws.send(Message::text("x")).await.unwrap();
        assert_eq!(text(&mut ws).await, expect);
    }
    let (status, body) = gw.deploy("/count", "counter").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(gw.version("/count").await, 2);
    for expect in ["4", "5"] {
        ws.send(Message::text("x")).await.unwrap();
        assert_eq!(text(&mut ws).await, expect);
    }
}

/// Every admin endpoint wants the bearer token: none or a wrong one (even
/// one byte off) gets 401 and changes nothing; `/metrics` moved to the
/// admin listener (the public one no longer serves it by default).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_requests_without_the_token_get_401() {
    let gw = Gateway::start(
        "auth",
        &["echo"],
        "[[route]]\npath = \"/g\"\nguest = \"echo.wasm\"\n",
    )
    .await;
    let wrong = {
        let mut t = TOKEN.to_string();
        t.pop();
        t.push('X');
        t
    };
    let endpoint = weir::client::route_endpoint("/g", "component");
    let json = std::fs::read(wasm("json")).unwrap();
    for token in ["", wrong.as_str()] {
        for (method, path, body) in [
            (Method::GET, "/routes", Vec::new()),
            (Method::GET, "/metrics", Vec::new()),
            (Method::POST, "/reload", Vec::new()),
            (Method::PUT, endpoint.as_str(), json.clone()),
        ] {
            let (status, body) = gw.admin_as(token, method.clone(), path, body).await;
            assert_eq!(status, 401, "{method} {path}: {body}");
        }
    }
    assert_eq!(gw.version("/g").await, 1);
    let (_, status) = common::Raw::request(
        gw.addr,
        "GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status, 404, "public /metrics is off when [admin] serves it");
}

/// SIGHUP re-reads the routes file: a changed component serves open
/// connections from their next message, changed limits apply to new
/// connections; a file that does not parse, or names a broken component,
/// changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_components_and_limits_and_refuses_bad_files() {
    let routes = |max: &str| {
        format!(
            "[[route]]\npath = \"/g\"\nguest = \"v.wasm\"\n\n\
             [[route]]\npath = \"/e\"\nnative = \"echo\"\nmax_message = \"{max}\"\n"
        )
    };
    let gw = Gateway::start("sighup", &["echo>v"], &routes("1KiB")).await;
    let mut ws = common::client(&gw.url("/g")).await;
    assert_eq!(ask(&mut ws, 1).await, Answer::Echo);
    let mut small = common::client(&gw.url("/e")).await;

    // The component changes; the limit goes up to 64 KiB.
    std::fs::copy(wasm("json"), gw.dir.join("v.wasm")).unwrap();
    gw.rewrite(&routes("64KiB"));
    gw.sighup();
    let deadline = Instant::now() + STEP;
    while gw.version("/g").await != 2 {
        assert!(Instant::now() < deadline, "SIGHUP did not deploy v.wasm");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        ask(&mut ws, 3).await,
        Answer::Json,
        "the open connection's next message"
    );
    let big = "x".repeat(4096);
    let mut fresh = common::client(&gw.url("/e")).await;
    fresh.send(Message::text(big.clone())).await.unwrap();
    assert_eq!(
        text(&mut fresh).await,
        big,
        "a new connection has the new max_message"
    );
    small.send(Message::text(big)).await.unwrap();
    match timeout(STEP, small.next()).await {
        Ok(Some(Ok(Message::Close(Some(frame))))) => assert_eq!(u16::from(frame.code), 1009),
        other => panic!("the connection opened before keeps its 1 KiB limit: {other:?}"),
    }

    // A file that does not parse changes nothing.
    std::fs::copy(wasm("echo"), gw.dir.join("v.wasm")).unwrap();
    gw.rewrite("[[route]]\npath = 42\n");
    gw.sighup();
    // A broken component changes nothing either, not even the other
    // route's limit in the same file.
    tokio::time::sleep(Duration::from_millis(300)).await;
    std::fs::write(gw.dir.join("v.wasm"), b"broken").unwrap();
    gw.rewrite(&routes("1KiB"));
    gw.sighup();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(gw.version("/g").await, 2);
    assert_eq!(ask(&mut ws, 5).await, Answer::Json);
    let mut after = common::client(&gw.url("/e")).await;
    let big = "y".repeat(4096);
    after.send(Message::text(big.clone())).await.unwrap();
    assert_eq!(
        text(&mut after).await,
        big,
        "the refused reload left the limit alone"
    );
    // POST /reload answers what SIGHUP only logs.
    let (status, body) = gw.admin(Method::POST, "/reload", Vec::new()).await;
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("not a WebAssembly file"), "{body}");
}

/// SIGHUP with routes added and removed: the new route serves at once,
/// the removed one's open connection gets 1001 (a guest route's after the
/// reply already due) and its path 404, and the route the file keeps
/// serves on undisturbed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_adds_and_removes_routes() {
    let gw = Gateway::start(
        "routes",
        &["echo", "json"],
        "[[route]]\npath = \"/a\"\nguest = \"echo.wasm\"\n\n\
         [[route]]\npath = \"/b\"\nnative = \"echo\"\n",
    )
    .await;
    let mut a = common::client(&gw.url("/a")).await;
    let mut b = common::client(&gw.url("/b")).await;
    assert_eq!(ask(&mut a, 1).await, Answer::Echo);
    assert_eq!(ask(&mut b, 1).await, Answer::Echo);
    gw.rewrite(
        "[[route]]\npath = \"/a\"\nguest = \"echo.wasm\"\n\n\
         [[route]]\npath = \"/c/{room}\"\nguest = \"json.wasm\"\n",
    );
    gw.sighup();
    match timeout(STEP, b.next()).await {
        Ok(Some(Ok(Message::Close(Some(frame))))) => {
            assert_eq!(u16::from(frame.code), 1001);
            assert_eq!(frame.reason, "route removed");
        }
        other => panic!("the removed route's connection is closed with 1001: {other:?}"),
    }
    let mut c = common::client(&gw.url("/c/lobby")).await;
    assert_eq!(ask(&mut c, 1).await, Answer::Json);
    assert_eq!(ask(&mut a, 3).await, Answer::Echo);
    let (_, status) = common::Raw::request(
        gw.addr,
        "GET /b HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
    )
    .await;
    assert_eq!(status, 404, "a removed route's path is not served");
    let (status, body) = gw.admin(Method::GET, "/routes", Vec::new()).await;
    assert_eq!(status, 200);
    assert!(
        body.contains("/c/{room}") && !body.contains("\"/b\""),
        "{body}"
    );
    // Put /b back, as a guest now: a route of its own, served at once.
    gw.rewrite(
        "[[route]]\npath = \"/a\"\nguest = \"echo.wasm\"\n\n\
         [[route]]\npath = \"/b\"\nguest = \"json.wasm\"\n",
    );
    // A message sent before the reload that removes its (guest) route is
    // answered before the 1001.
    c.send(Message::text(request(7))).await.unwrap();
    let (status, body) = gw.admin(Method::POST, "/reload", Vec::new()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(answered_by(7, &text(&mut c).await), Answer::Json);
    match timeout(STEP, c.next()).await {
        Ok(Some(Ok(Message::Close(Some(frame))))) => {
            assert_eq!(u16::from(frame.code), 1001);
            assert_eq!(frame.reason, "route removed");
        }
        other => panic!("the removed guest route's connection is closed with 1001: {other:?}"),
    }
    assert!(body.contains("\"added\":[\"/b\"]"), "{body}");
    assert!(body.contains("\"removed\":[\"/c/{room}\"]"), "{body}");
    let mut b = common::client(&gw.url("/b")).await;
    assert_eq!(ask(&mut b, 5).await, Answer::Json);
    assert_eq!(ask(&mut a, 5).await, Answer::Echo);
}

/// `weir deploy`, `weir rollback` and `weir routes` against a running
/// gateway: clear output, and exit 1 with the gateway's error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_deploys_rolls_back_and_lists() {
    let gw = Gateway::start(
        "cli",
        &["echo"],
        "[[route]]\npath = \"/g\"\nguest = \"echo.wasm\"\n",
    )
    .await;
    let weir = |args: &[&str], token: &str| {
        let admin = gw.admin.to_string();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_weir"));
        cmd.args(
            args.iter()
                .map(|a| if *a == "ADMIN" { admin.as_str() } else { a }),
        )
        .env("WEIR_ADMIN_TOKEN", token)
        .env("RUST_LOG", "off");
        let out = cmd.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let json = wasm("json").display().to_string();
    let (code, out, err) = weir(&["deploy", "--admin", "ADMIN", "/g", &json], TOKEN);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("to /g: version 2 (sha256 "), "{out}");
    let mut ws = common::client(&gw.url("/g")).await;
    assert_eq!(ask(&mut ws, 1).await, Answer::Json);

    let broken = wasm("wrong-world").display().to_string();
    let (code, out, err) = weir(&["deploy", "--admin", "ADMIN", "/g", &broken], TOKEN);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        err.contains("answered 422") && err.contains("guest ABI"),
        "{err}"
    );

    let (code, out, err) = weir(&["routes", "--admin", "ADMIN"], TOKEN);
    assert_eq!(code, Some(0), "{err}");
    let line = out
        .lines()
        .find(|l| l.starts_with("/g "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(line.contains("guest") && line.contains(" 2 "), "{line}");

    let (code, out, err) = weir(&["rollback", "--admin", "ADMIN", "/g"], TOKEN);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("rolled back /g: version 1 serves"), "{out}");
    assert_eq!(ask(&mut ws, 3).await, Answer::Echo);

    let (code, _, err) = weir(&["routes", "--admin", "ADMIN"], "not-the-token-at-all");
    assert_eq!(code, Some(1));
    assert!(err.contains("answered 401"), "{err}");

    // Issue 36's first-hour snags: the address from WEIR_ADMIN as a URL, a
    // deploy time a person can read, the public port named as such, and a
    // missing address explained.
    let empty = gw.dir.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let run_in = |dir: &Path, args: &[&str], admin_env: Option<String>| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_weir"));
        cmd.args(args)
            .env("WEIR_ADMIN_TOKEN", TOKEN)
            .env("RUST_LOG", "off")
            .env_remove("WEIR_ADMIN")
            .current_dir(dir);
        if let Some(admin) = admin_env {
            cmd.env("WEIR_ADMIN", admin);
        }
        let out = cmd.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let run = |args: &[&str], admin_env: Option<String>| run_in(&empty, args, admin_env);
    let (code, out, err) = run(&["routes"], Some(format!("http://{}/", gw.admin)));
    assert_eq!(code, Some(0), "{err}");
    let line = out.lines().find(|l| l.starts_with("/g ")).unwrap();
    assert!(line.ends_with(" GMT"), "deployed at, as a date: {line}");
    // In the gateway's directory, its routes.toml's [admin] listen.
    let (code, out, err) = run_in(&gw.dir, &["routes"], None);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.lines().any(|l| l.starts_with("/g ")), "{out}");
    let (code, _, err) = run(&["routes", "--admin", &gw.addr.to_string()], None);
    assert_eq!(code, Some(1));
    assert!(err.contains("public listener, not its admin one"), "{err}");
    assert_eq!(err.matches("error").count(), 1, "one error line: {err}");
    let (code, _, err) = run(&["routes"], None);
    assert_eq!(code, Some(1));
    assert!(err.contains("pass --admin ADDR"), "{err}");
}

/// With `[admin]` and no token in the environment, `weir serve` refuses to
/// start (an admin API anyone could use is worse than none) and says how to
/// set one.
#[test]
fn serve_refuses_to_start_without_the_admin_token() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("deploy-notoken-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("routes.toml");
    let text = Gateway::routes_file(
        free_port(),
        free_port(),
        "[[route]]\npath = \"/e\"\nnative = \"echo\"\n",
    );
    std::fs::write(&file, text).unwrap();
    for token in [None, Some("short")] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_weir"));
        cmd.arg("serve")
            .arg(&file)
            .env_remove(TOKEN_ENV)
            .env("RUST_LOG", "off");
        if let Some(token) = token {
            cmd.env(TOKEN_ENV, token);
        }
        let mut child = cmd.stderr(Stdio::piped()).spawn().unwrap();
        let deadline = std::time::Instant::now() + STEP;
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "weir serve kept running"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(status.code(), Some(1), "{err}");
        assert!(
            err.contains(TOKEN_ENV) && err.contains("admin token"),
            "{err}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
