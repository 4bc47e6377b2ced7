//! Fleet deploys (`[cluster] redis`, `server/fleet.rs`): two or three
//! `weir serve` children on one real redis-server. A deploy through one
//! node reaches the others (their open connections kept, switched at
//! their next message), a node started after it serves it from its first
//! upgrade, a broken component is refused everywhere, a component one
//! node cannot take is shown diverged there, a rollback reaches every
//! node, Redis down during a deploy (or failing half-way through one)
//! gives a 503 and changes nothing, a component altered in Redis is
//! refused by its digest, and a node is not ready until it has converged.

mod admin_support;
mod common;
mod guest_support;

use admin_support::Gateway;
use common::redis::{have_redis, Redis};
use common::STEP;
use futures_util::{SinkExt, StreamExt};
use http::Method;
use std::time::Duration;
use tokio::time::{timeout, Instant};
use tokio_tungstenite::tungstenite::Message;

/// `[cluster]` on `redis` and one guest route /g serving echo.wasm, with
/// `extra` settings for the route.
fn routes(redis: &Redis, extra: &str) -> String {
    format!(
        "[cluster]\nredis = \"{}\"\n\n[[route]]\npath = \"/g\"\nguest = \"echo.wasm\"\n{extra}\n",
        redis.url()
    )
}

async fn node(name: &str, redis: &Redis, extra: &str) -> Gateway {
    Gateway::start(name, &["echo"], &routes(redis, extra)).await
}

/// A real redis-server and a node on it for each of `names` (see
/// [`node`]), started in that order; None (the test skips, saying why)
/// without redis-server.
async fn fleet_of<const N: usize>(names: [&str; N]) -> Option<(Redis, [Gateway; N])> {
    if !have_redis() {
        return None;
    }
    let redis = Redis::start(false).await;
    let mut nodes = Vec::with_capacity(N);
    for name in names {
        nodes.push(node(name, &redis, "").await);
    }
    let nodes = nodes.try_into().unwrap_or_else(|_| unreachable!("N nodes"));
    Some((redis, nodes))
}

/// `weir ARGS… --admin <gw>` that must succeed: its stdout.
fn weir_ok(gw: &Gateway, args: &[&str]) -> String {
    let (code, out, err) = gw.weir(args);
    assert_eq!(code, Some(0), "{out}{err}");
    out
}

/// Which component answered `{"number": n}`: echo sends it back, json
/// answers the next even number.
async fn answer(ws: &mut common::Ws, n: u64) -> &'static str {
    let request = format!("{{\"number\": {n}}}");
    ws.send(Message::text(request.clone())).await.unwrap();
    let reply = match timeout(STEP, ws.next()).await {
        Ok(Some(Ok(Message::Text(t)))) => t.to_string(),
        other => panic!("expected a reply to {n}, got {other:?}"),
    };
    if reply == request {
        "echo"
    } else {
        let v: serde_json::Value = serde_json::from_str(&reply).expect("json's reply");
        assert!(v["number"].as_u64().unwrap() > n, "{reply}");
        "json"
    }
}

async fn deploy(gw: &Gateway, name: &str) -> (u16, serde_json::Value) {
    let (status, body) = gw.deploy("/g", name).await;
    (status, serde_json::from_str(&body).unwrap_or_default())
}

async fn fleet(gw: &Gateway) -> (u16, serde_json::Value) {
    let (status, body) = gw.admin(Method::GET, "/fleet", Vec::new()).await;
    (status, serde_json::from_str(&body).unwrap_or_default())
}

/// Waits until the fleet's view of /g, as `gw` reads it, has `nodes`
/// nodes and satisfies `done`; returns it.
async fn await_fleet(
    gw: &Gateway,
    nodes: usize,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + STEP;
    loop {
        let (status, view) = fleet(gw).await;
        let route = view["routes"]
            .as_array()
            .and_then(|r| r.iter().find(|r| r["route"] == "/g"))
            .cloned();
        if let Some(route) = route.filter(|r| {
            status == 200 && r["nodes"].as_array().map_or(0, Vec::len) == nodes && done(r)
        }) {
            return route;
        }
        assert!(
            Instant::now() < deadline,
            "the fleet did not get there: {view}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn agrees_on(version: u64) -> impl Fn(&serde_json::Value) -> bool {
    move |r| r["agrees"] == true && r["desired"]["version"] == version
}

/// A deploy through A reaches B: B's open connection is kept and its next
/// messages are answered by the new version; both nodes report it, and
/// `weir routes --cluster` says every node agrees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deploy_through_one_node_reaches_the_other_with_its_connections_kept() {
    let Some((_redis, [a, b])) = fleet_of(["fleet-a", "fleet-b"]).await else {
        return;
    };
    let mut on_b = common::client(&b.url("/g")).await;
    assert_eq!(answer(&mut on_b, 1).await, "echo");
    let (status, body) = deploy(&a, "json").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["fleet"]["version"], 1, "{body}");
    assert_eq!(body["fleet"]["digest"], body["hash"], "{body}");
    // A serves it as soon as the deploy is answered.
    let mut on_a = common::client(&a.url("/g")).await;
    assert_eq!(answer(&mut on_a, 1).await, "json");
    let route = await_fleet(&a, 2, agrees_on(1)).await;
    for n in route["nodes"].as_array().unwrap() {
        assert_eq!(n["state"], "serving", "{route}");
        assert_eq!(n["hash"], body["hash"], "{route}");
    }
    // The connection opened on B before the deploy: same socket, new
    // version from its next batch.
    let mut n = 2;
    let deadline = Instant::now() + STEP;
    while answer(&mut on_b, n).await == "echo" {
        assert!(Instant::now() < deadline, "B never switched");
        n += 2;
    }
    assert_eq!(answer(&mut on_b, n + 2).await, "json");
    assert_eq!(b.version("/g").await, 2, "B's own version number");
    // The CLI's view.
    let text = weir_ok(&b, &["routes", "--cluster"]);
    assert!(text.contains("2 nodes reporting"), "{text}");
    assert!(text.contains("/g  fleet version 1 (deploy by"), "{text}");
    assert!(text.contains("every node agrees"), "{text}");
    assert_eq!(text.matches(" serving").count(), 2, "{text}");
    // A reload cannot take the route back from the fleet.
    let (status, body) = b.admin(Method::POST, "/reload", Vec::new()).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("is the fleet's"), "{body}");
    assert_eq!(answer(&mut on_b, 1001).await, "json");
}

/// A node started after the deploy takes it before it listens: its first
/// upgrade is served by the new version, and its /readyz is ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_started_after_the_deploy_serves_it_from_its_first_upgrade() {
    let Some((redis, [a])) = fleet_of(["late-a"]).await else {
        return;
    };
    let (status, body) = deploy(&a, "json").await;
    assert_eq!(status, 200, "{body}");
    let c = node("late-c", &redis, "").await;
    let mut first = common::client(&c.url("/g")).await;
    assert_eq!(answer(&mut first, 1).await, "json");
    let (_raw, status) = common::Raw::request(
        c.addr,
        &format!("GET /readyz HTTP/1.1\r\nhost: {}\r\n\r\n", c.addr),
    )
    .await;
    assert_eq!(status, 200);
    await_fleet(&a, 2, agrees_on(1)).await;
}

/// A component no node can take is refused by the node it was sent to
/// (422) and stored nowhere: the fleet's desired version does not move
/// and every node serves on. One that only some nodes can take (B's route
/// allows 1 MiB of memory, the component needs 4) is served where it can
/// be, refused on B, which keeps its version and is shown diverged, with
/// the cause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_component_is_refused_everywhere_and_a_refusing_node_is_shown_diverged() {
    let Some((redis, [a])) = fleet_of(["broken-a"]).await else {
        return;
    };
    let b = node("broken-b", &redis, "memory = \"1MiB\"").await;
    let endpoint = weir::client::route_endpoint("/g", "component");
    let (status, body) = a
        .admin(Method::PUT, &endpoint, b"not a component".to_vec())
        .await;
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("not a WebAssembly file"), "{body}");
    let (status, body) = deploy(&b, "wrong-world").await;
    assert_eq!(status, 422, "{body}");
    let (status, view) = fleet(&b).await;
    assert_eq!(status, 200, "{view}");
    assert_eq!(
        view["routes"],
        serde_json::json!([]),
        "nothing recorded: {view}"
    );
    for gw in [&a, &b] {
        let mut ws = common::client(&gw.url("/g")).await;
        assert_eq!(answer(&mut ws, 1).await, "echo");
        assert_eq!(gw.version("/g").await, 1);
    }
    // Taken by A, refused by B.
    let (status, body) = deploy(&a, "big-memory").await;
    assert_eq!(status, 200, "{body}");
    let route = await_fleet(&a, 2, |r| {
        r["desired"]["version"] == 1
            && r["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|n| n["state"].as_str().unwrap().starts_with("diverged"))
    })
    .await;
    assert_eq!(route["agrees"], false, "{route}");
    let states: Vec<&str> = route["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["state"].as_str().unwrap())
        .collect();
    assert!(states.contains(&"serving"), "{route}");
    assert!(
        states
            .iter()
            .any(|s| s.starts_with("diverged: refused version 1") && s.contains("memory")),
        "{route}"
    );
    let mut on_b = common::client(&b.url("/g")).await;
    assert_eq!(answer(&mut on_b, 3).await, "echo");
    assert_eq!(b.version("/g").await, 1, "B keeps its version");
    assert_eq!(a.version("/g").await, 2);
    let (_, text, _) = a.weir(&["routes", "--cluster"]);
    assert!(text.contains("DIVERGED"), "{text}");
    assert!(text.contains("diverged: refused version 1"), "{text}");
}

/// A rollback through any node reaches every node: three nodes, two
/// deploys through A, a rollback through C.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_reaches_every_node() {
    let Some((_redis, [a, b, c])) = fleet_of(["rb-a", "rb-b", "rb-c"]).await else {
        return;
    };
    // Nothing to go back to yet.
    let (status, body) = c
        .admin(
            Method::POST,
            &weir::client::route_endpoint("/g", "rollback"),
            Vec::new(),
        )
        .await;
    assert_eq!(status, 409, "{body}");
    // json, then big-memory (an echo, so its replies are echo's).
    assert_eq!(deploy(&a, "json").await.0, 200);
    assert_eq!(deploy(&a, "big-memory").await.0, 200);
    await_fleet(&a, 3, agrees_on(2)).await;
    let mut conns = Vec::new();
    for gw in [&a, &b, &c] {
        let mut ws = common::client(&gw.url("/g")).await;
        assert_eq!(answer(&mut ws, 1).await, "echo");
        conns.push(ws);
    }
    let (status, body) = c
        .admin(
            Method::POST,
            &weir::client::route_endpoint("/g", "rollback"),
            Vec::new(),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["fleet"]["version"], 3, "{body}");
    assert_eq!(body["fleet"]["action"], "rollback", "{body}");
    let json = weir::guest::hex_sha256(&std::fs::read(guest_support::wasm("json")).unwrap());
    assert_eq!(body["fleet"]["digest"], json.as_str(), "{body}");
    let route = await_fleet(&b, 3, agrees_on(3)).await;
    assert_eq!(route["desired"]["digest"], json.as_str(), "{route}");
    // The connections opened before the rollback switch to json.
    for ws in &mut conns {
        assert_eq!(answer(ws, 3).await, "json");
    }
    // Back past the first fleet deploy: nothing is remembered there.
    let (status, body) = a
        .admin(
            Method::POST,
            &weir::client::route_endpoint("/g", "rollback"),
            Vec::new(),
        )
        .await;
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("no earlier version"), "{body}");
}

/// Redis down during a deploy: the deploy is answered 503 with the cause
/// and nothing changes on any node (the node it was sent to keeps its
/// version too); once Redis is back, the next deploy reaches every node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_during_a_deploy_is_a_clear_error_and_changes_nothing() {
    let Some((mut redis, [a, b])) = fleet_of(["down-a", "down-b"]).await else {
        return;
    };
    assert_eq!(deploy(&a, "json").await.0, 200);
    await_fleet(&a, 2, agrees_on(1)).await;
    let versions = (a.version("/g").await, b.version("/g").await);
    redis.kill();
    let (status, body) = deploy(&a, "echo").await;
    assert_eq!(status, 503, "{body}");
    let message = body["error"].as_str().unwrap();
    assert!(message.contains("the fleet's Redis"), "{message}");
    assert!(message.contains("nothing was changed"), "{message}");
    let (status, _) = fleet(&a).await;
    assert_eq!(status, 503);
    assert_eq!((a.version("/g").await, b.version("/g").await), versions);
    for gw in [&a, &b] {
        let mut ws = common::client(&gw.url("/g")).await;
        assert_eq!(answer(&mut ws, 1).await, "json");
    }
    // Back, empty (no persistence): the fleet forgot its desired version,
    // the nodes serve on, and a deploy sets it again everywhere.
    redis.spawn().await;
    let deadline = Instant::now() + STEP;
    let body = loop {
        let (status, body) = deploy(&a, "echo").await;
        if status == 200 {
            break body;
        }
        assert!(Instant::now() < deadline, "{status} {body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(body["fleet"]["version"], 1, "{body}");
    await_fleet(&b, 2, agrees_on(1)).await;
    let mut ws = common::client(&b.url("/g")).await;
    assert_eq!(answer(&mut ws, 1).await, "echo");
}

/// A component whose copy in Redis was altered is never run: a node that
/// fetches it (here one started after the deploy) checks its SHA-256,
/// refuses it, keeps its own version and is shown diverged with the cause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_altered_in_redis_is_refused_by_its_digest() {
    let Some((redis, [a])) = fleet_of(["tamper-a"]).await else {
        return;
    };
    let (status, body) = deploy(&a, "json").await;
    assert_eq!(status, 200, "{body}");
    let digest = body["hash"].as_str().unwrap().to_string();
    let key = format!("{{weir-fleet}}:blob:/g:{digest}");
    // One byte of the first chunk changed, its length kept.
    let client = redis::Client::open(redis.url()).unwrap();
    let mut con = client.get_connection().unwrap();
    let mut c0: Vec<u8> = redis::cmd("HGET")
        .arg(&key)
        .arg("c0")
        .query(&mut con)
        .unwrap();
    let len = c0.len();
    c0[len / 2] ^= 0xff;
    redis::cmd("HSET")
        .arg(&key)
        .arg("c0")
        .arg(c0)
        .exec(&mut con)
        .unwrap();
    let c = node("tamper-c", &redis, "").await;
    let route = await_fleet(&a, 2, |r| r["agrees"] == false).await;
    let refused = route["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["state"].as_str().unwrap().starts_with("diverged"))
        .unwrap_or_else(|| panic!("{route}"));
    let state = refused["state"].as_str().unwrap();
    assert!(
        state.contains("damaged") && state.contains("SHA-256"),
        "{state}"
    );
    let mut ws = common::client(&c.url("/g")).await;
    assert_eq!(answer(&mut ws, 1).await, "echo");
    assert_eq!(c.version("/g").await, 1);
}

/// `GET /readyz` on `gw`: (status, body).
async fn readyz(gw: &Gateway) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    let head = format!(
        "GET /readyz HTTP/1.1\r\nhost: {}\r\nconnection: close\r\n\r\n",
        gw.addr
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = String::new();
    timeout(STEP, stream.read_to_string(&mut answer))
        .await
        .unwrap()
        .unwrap();
    let status = answer[9..12].parse().unwrap();
    (status, answer)
}

/// A node whose Redis is down when it starts serves its routes file's
/// components but is not ready (503, saying why) until it has converged
/// on the fleet; once Redis is back it converges and turns ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_is_not_ready_until_it_has_converged_on_the_fleet() {
    let Some((mut redis, [])) = fleet_of([]).await else {
        return;
    };
    redis.kill();
    let a = node("unready-a", &redis, "").await;
    let (status, text) = readyz(&a).await;
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("not yet converged"), "{text}");
    let mut ws = common::client(&a.url("/g")).await;
    assert_eq!(answer(&mut ws, 1).await, "echo");
    redis.spawn().await;
    let deadline = Instant::now() + STEP;
    while readyz(&a).await.0 != 200 {
        assert!(Instant::now() < deadline, "never ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // And it reports to the fleet.
    let (status, body) = deploy(&a, "json").await;
    assert_eq!(status, 200, "{body}");
    await_fleet(&a, 1, agrees_on(1)).await;
}

/// Redis failing half-way through a deploy — here it stored the
/// component's four chunks, then refused the step that records the
/// desired version (`WATCH` taken from its user by an ACL) — is a 503
/// with Redis's error: the desired version does not move, no node
/// changes, and the copy nobody points to expires. Once Redis takes the
/// step again, the same deploy reaches every node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_failing_half_way_through_a_deploy_leaves_no_half_state() {
    let Some((redis, [a, b])) = fleet_of(["half-a", "half-b"]).await else {
        return;
    };
    await_fleet_nodes(&a, 2).await;
    let client = redis::Client::open(redis.url()).unwrap();
    let mut con = client.get_connection().unwrap();
    let acl = |rule: &str| {
        redis::cmd("ACL")
            .arg("SETUSER")
            .arg("default")
            .arg(rule)
            .clone()
    };
    acl("-watch").exec(&mut con).unwrap();
    let wasm = std::fs::read(guest_support::wasm("js-json")).unwrap();
    assert!(wasm.len() > 3 * 512 * 1024, "a component of several chunks");
    let digest = weir::guest::hex_sha256(&wasm);
    let endpoint = weir::client::route_endpoint("/g", "component");
    let (status, body) = a.admin(Method::PUT, &endpoint, wasm.clone()).await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body.contains("no permissions") && body.contains("nothing was changed"),
        "{body}"
    );
    let key = format!("{{weir-fleet}}:blob:/g:{digest}");
    let fields: u64 = redis::cmd("HLEN").arg(&key).query(&mut con).unwrap();
    let ttl: i64 = redis::cmd("TTL").arg(&key).query(&mut con).unwrap();
    assert_eq!(fields, 4 + 2, "the component was stored whole first");
    assert!(ttl > 0, "an unrecorded copy expires (TTL {ttl})");
    let (status, view) = fleet(&a).await;
    assert_eq!(status, 200, "{view}");
    assert_eq!(
        view["routes"],
        serde_json::json!([]),
        "nothing recorded: {view}"
    );
    for gw in [&a, &b] {
        assert_eq!(gw.version("/g").await, 1);
        let mut ws = common::client(&gw.url("/g")).await;
        assert_eq!(answer(&mut ws, 1).await, "echo");
    }
    acl("+watch").exec(&mut con).unwrap();
    let (status, body) = a.admin(Method::PUT, &endpoint, wasm).await;
    assert_eq!(status, 200, "{body}");
    await_fleet(&b, 2, agrees_on(1)).await;
    let ttl: i64 = redis::cmd("TTL").arg(&key).query(&mut con).unwrap();
    assert_eq!(ttl, -1, "a recorded copy is kept");
    let mut ws = common::client(&b.url("/g")).await;
    assert_eq!(answer(&mut ws, 1).await, "json");
}

/// Waits until `n` nodes report to the fleet.
async fn await_fleet_nodes(gw: &Gateway, n: usize) {
    let deadline = Instant::now() + STEP;
    loop {
        let (status, view) = fleet(gw).await;
        if status == 200 && view["nodes"].as_array().map_or(0, Vec::len) == n {
            return;
        }
        assert!(Instant::now() < deadline, "{view}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `weir deploy --cluster`: to a clustered node it records a fleet
/// version and says so; to a gateway without `[cluster] redis` it is
/// refused (exit 1, 409 naming why) and that gateway keeps its version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weir_deploy_cluster_reaches_the_fleet_or_is_refused() {
    let Some((_redis, [a])) = fleet_of(["cli-a"]).await else {
        return;
    };
    let alone = Gateway::start(
        "cli-alone",
        &["echo"],
        "[[route]]\npath = \"/g\"\nguest = \"echo.wasm\"\n",
    )
    .await;
    let json = guest_support::wasm("json").display().to_string();
    let args = ["deploy", "--cluster", "/g", &json];
    let text = weir_ok(&a, &args);
    assert!(text.contains("fleet version 1 recorded"), "{text}");
    let (code, _, err) = alone.weir(&args);
    assert_ne!(code, Some(0));
    assert!(
        err.contains("409") && err.contains("no [cluster] redis"),
        "{err}"
    );
    assert_eq!(alone.version("/g").await, 1);
    let (status, body) = alone.admin(Method::GET, "/fleet", Vec::new()).await;
    assert_eq!(status, 409, "{body}");
}

/// `weir deploy --cluster --wait` returns once every node serves the new
/// version — a connection opened on B right after it is answered by it —
/// and exits 1 naming the node's refusal when one cannot take it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weir_deploy_wait_returns_once_every_node_serves_it() {
    let Some((redis, [a, b])) = fleet_of(["wait-a", "wait-b"]).await else {
        return;
    };
    await_fleet_nodes(&a, 2).await;
    let deploy_wait = |name: &str| {
        let file = guest_support::wasm(name).display().to_string();
        a.weir(&["deploy", "--cluster", "--wait", "/g", &file])
    };
    let (code, text, err) = deploy_wait("json");
    assert_eq!(code, Some(0), "{text}{err}");
    assert!(
        text.contains("every node serves fleet version 1 (2 nodes"),
        "{text}"
    );
    let mut on_b = common::client(&b.url("/g")).await;
    assert_eq!(answer(&mut on_b, 1).await, "json", "B serves it already");
    // C allows 1 MiB: it cannot take big-memory, and --wait says so.
    let c = node("wait-c", &redis, "memory = \"1MiB\"").await;
    await_fleet_nodes(&a, 3).await;
    let (code, _, err) = deploy_wait("big-memory");
    assert_ne!(code, Some(0), "{err}");
    assert!(
        err.contains("did not take fleet version 2") && err.contains("memory"),
        "{err}"
    );
    let mut on_c = common::client(&c.url("/g")).await;
    assert_eq!(
        answer(&mut on_c, 5).await,
        "json",
        "C keeps fleet version 1"
    );
}
