//! Deploys never lose a connection's state silently (issue 36): the
//! gateway asks the new version to decode every live connection's
//! attachment first (`check-state`), on every worker. The fixtures
//! state-v1, state-v2 (adds a field) and state-v3 (changes a field's type)
//! answer each message with their version and their state as JSON.

mod admin_support;
mod common;
mod guest_support;

use admin_support::{Gateway, TOKEN};
use common::STEP;
use futures_util::{SinkExt, StreamExt};
use guest_support::wasm;
use http::Method;
use std::process::Command;
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::Message;

type Ws = common::Ws;

const ROUTES: &str = "[[route]]\npath = \"/s\"\nguest = \"state-v1.wasm\"\n";

/// Sends one message and returns the answer (`vN {state}`).
async fn poke(ws: &mut Ws) -> String {
    ws.send(Message::text("x")).await.unwrap();
    match timeout(STEP, ws.next()).await {
        Ok(Some(Ok(Message::Text(t)))) => t.to_string(),
        other => panic!("expected a text message, got {other:?}"),
    }
}

/// `n` clients, `nick{i}`, client i having sent i + 1 messages.
async fn clients(gw: &Gateway, n: usize) -> Vec<Ws> {
    let mut all = Vec::new();
    for i in 0..n {
        let mut ws = common::client(&gw.url(&format!("/s?nick=nick{i}"))).await;
        for sent in 1..=i + 1 {
            let answer = poke(&mut ws).await;
            assert_eq!(
                answer,
                format!("v1 {{\"nick\":\"nick{i}\",\"count\":{sent}}}")
            );
        }
        all.push(ws);
    }
    all
}

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// Issue 36: a deploy whose state type gained a field reset every
/// connection's state to Default. Now the new version reads it (the field
/// from Default), on connections of both workers; and a rollback reads
/// what the newer version wrote (the extra field ignored).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deploy_adding_a_field_keeps_state_and_so_does_its_rollback() {
    const CLIENTS: usize = 6;
    let gw = Gateway::start("add-field", &["state-v1"], ROUTES).await;
    let mut all = clients(&gw, CLIENTS).await;

    let (status, body) = gw.deploy("/s", "state-v2").await;
    assert_eq!(status, 200, "{body}");
    let state = &json(&body)["state"];
    assert_eq!(state["checked"], true, "{body}");
    assert_eq!(state["live"], CLIENTS, "{body}");
    assert_eq!(state["reset"], 0, "{body}");
    for (i, ws) in all.iter_mut().enumerate() {
        let count = i + 2;
        assert_eq!(
            poke(ws).await,
            format!("v2 {{\"nick\":\"nick{i}\",\"count\":{count},\"sent\":10}}")
        );
    }

    let rollback = weir::client::route_endpoint("/s", "rollback");
    let (status, body) = gw.admin(Method::POST, &rollback, Vec::new()).await;
    assert_eq!(status, 200, "{body}");
    let answer = json(&body);
    assert_eq!(answer["version"], 1, "{body}");
    assert_eq!(answer["state"]["checked"], true, "{body}");
    assert_eq!(answer["state"]["reset"], 0, "{body}");
    for (i, ws) in all.iter_mut().enumerate() {
        let count = i + 3;
        assert_eq!(
            poke(ws).await,
            format!("v1 {{\"nick\":\"nick{i}\",\"count\":{count}}}")
        );
    }
}

/// A version whose state type changed a field's type cannot read live
/// state: the deploy is refused (422, `weir deploy` exits 1) naming how
/// many connections would lose it and the first decode error, and the old
/// version serves on with the state intact; `--reset-state` deploys it and
/// reports the count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deploy_changing_a_fields_type_is_refused_unless_state_is_reset() {
    const CLIENTS: usize = 3;
    let gw = Gateway::start("type-change", &["state-v1"], ROUTES).await;
    let mut all = clients(&gw, CLIENTS).await;

    let (status, body) = gw.deploy("/s", "state-v3").await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body.contains("cannot read the state of 3 of 3 live connections"),
        "{body}"
    );
    assert!(body.contains("invalid type"), "{body}");
    assert!(body.contains("--reset-state"), "{body}");
    assert_eq!(gw.version("/s").await, 1);
    assert_eq!(
        gw.metric("weir_guest_deploys_failed_total{route=\"/s\"}")
            .await,
        Some(1)
    );
    assert_eq!(
        poke(&mut all[0]).await,
        "v1 {\"nick\":\"nick0\",\"count\":2}"
    );

    // A misspelt reset is a 400, not an unchecked deploy.
    let endpoint = weir::client::route_endpoint("/s", "component");
    let v3 = std::fs::read(wasm("state-v3")).unwrap();
    let (status, body) = gw
        .admin(
            Method::PUT,
            &format!("{endpoint}?reset_state=yes"),
            v3.clone(),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = gw
        .admin(Method::PUT, &format!("{endpoint}?reset=true"), v3)
        .await;
    assert_eq!(status, 400, "{body}");

    let weir = |args: &[&str]| {
        let admin = gw.admin.to_string();
        let out = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(
                args.iter()
                    .map(|a| if *a == "ADMIN" { admin.as_str() } else { a }),
            )
            .env("WEIR_ADMIN_TOKEN", TOKEN)
            .env("RUST_LOG", "off")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let file = wasm("state-v3").display().to_string();
    let (code, out, err) = weir(&["deploy", "--admin", "ADMIN", "/s", &file]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        err.contains("answered 422") && err.contains("3 of 3 live connections"),
        "{err}"
    );
    assert_eq!(gw.version("/s").await, 1);

    let (code, out, err) = weir(&["deploy", "--admin", "ADMIN", "/s", &file, "--reset-state"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("state of 3 of 3 live connections reset to Default"),
        "{out}"
    );
    assert_eq!(gw.version("/s").await, 2);
    for ws in &mut all {
        assert_eq!(poke(ws).await, "v3 {\"nick\":0,\"count\":1}");
    }
}

/// A component without the `check-state` export (here a JavaScript one
/// built for weir:gateway 0.3.0, which has no `state` interface) deploys
/// as before, with a warning that the state it inherits was not checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_without_the_export_deploys_with_a_warning() {
    let gw = Gateway::start_with("no-export", &["state-v1"], ROUTES, true).await;
    let _all = clients(&gw, 2).await;
    let (status, body) = gw.deploy("/s", "js-echo-v3").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body)["state"]["checked"], false, "{body}");
    assert_eq!(gw.version("/s").await, 2);
    let log = gw.log();
    assert!(
        log.contains("the state of live connections was not checked"),
        "{log}"
    );
}

/// JavaScript and Python components export `check-state` too: the SDKs
/// check that each attachment is the JSON they save conn.state as, then
/// ask the handler's checkState / check_state. A deploy of the
/// state-check fixture (state `{v: 2, nick, count}`) onto the JavaScript
/// counter's connections (a bare number) is refused with the count and the
/// handler's own reason; one from the JavaScript fixture to the Python one
/// and back goes through, each version carrying on each connection's count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn javascript_and_python_components_check_the_state_they_inherit() {
    const ROUTES: &str = "[[route]]\npath = \"/c\"\nguest = \"js-counter.wasm\"\n\n\
                          [[route]]\npath = \"/s\"\nguest = \"js-state-check.wasm\"\n";
    let gw = Gateway::start("polyglot", &["js-counter", "js-state-check"], ROUTES).await;
    let mut counted = Vec::new();
    for _ in 0..2 {
        let mut ws = common::client(&gw.url("/c")).await;
        assert_eq!(poke(&mut ws).await, "1");
        counted.push(ws);
    }
    for lang in ["js", "py"] {
        let (status, body) = gw.deploy("/c", &format!("{lang}-state-check")).await;
        assert_eq!(status, 422, "{lang}: {body}");
        assert!(
            body.contains("cannot read the state of 2 of 2 live connections"),
            "{lang}: {body}"
        );
        assert!(body.contains("state 1 is not version 2"), "{lang}: {body}");
    }
    assert_eq!(gw.version("/c").await, 1);
    assert_eq!(poke(&mut counted[0]).await, "2", "the counter serves on");

    let mut checked = Vec::new();
    for i in 0..2 {
        let mut ws = common::client(&gw.url(&format!("/s?nick=nick{i}"))).await;
        assert_eq!(
            poke(&mut ws).await,
            format!("js {{\"v\":2,\"nick\":\"nick{i}\",\"count\":1}}")
        );
        checked.push(ws);
    }
    let (status, body) = gw.deploy("/s", "py-state-check").await;
    assert_eq!(status, 200, "{body}");
    let state = &json(&body)["state"];
    assert_eq!(state["checked"], true, "{body}");
    assert_eq!(state["live"], 2, "{body}");
    assert_eq!(state["reset"], 0, "{body}");
    for (i, ws) in checked.iter_mut().enumerate() {
        assert_eq!(
            poke(ws).await,
            format!("py {{\"v\":2,\"nick\":\"nick{i}\",\"count\":2}}")
        );
    }
    // And back: the JavaScript version reads what the Python one saved.
    let (status, body) = gw.deploy("/s", "js-state-check").await;
    assert_eq!(status, 200, "{body}");
    let state = &json(&body)["state"];
    assert_eq!(state["checked"], true, "{body}");
    assert_eq!(state["reset"], 0, "{body}");
    assert_eq!(
        poke(&mut checked[1]).await,
        "js {\"v\":2,\"nick\":\"nick1\",\"count\":3}"
    );
}
