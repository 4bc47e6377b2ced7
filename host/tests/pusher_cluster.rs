//! The pusher route across two `weir serve` nodes on one Redis (started
//! here; scripts/redis.sh installs redis-server, and these tests say so
//! loudly and pass only when it is absent), driven by pusher-cluster.mjs
//! with the real `pusher-js` and `pusher` server library: a trigger through
//! node B's API and a client event from B reach a subscriber on A; presence
//! members span both nodes (member events once per user, removed only at
//! the user's last connection anywhere); channel queries from either node
//! count both; a channel is occupied while a subscriber remains on any
//! node and vacated after the last anywhere; `terminate_connections`
//! through B closes the user's connection on A; a cache channel's event
//! kept through A is replayed on B; a killed node's subscribers stop
//! counting once its lease ends; both nodes' webhooks to one receiver
//! carry one occupied, one vacated, one member_added and one
//! member_removed for the whole cluster. Every scenario again on a
//! three-master Redis Cluster.

mod common;

use common::node::{node_summary, require_client};
use common::redis::{have_redis, redis_cluster, Redis};
use common::{await_metric, client, WeirProcess, STEP};
use futures_util::{SinkExt, StreamExt};
use std::process::Stdio;
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::Message;

const ROUTES: &str = r#"
[[route]]
path = "/app/{key}"
native = "pusher"

[[route.apps]]
id = "1"
key = "key1"
secret_env = "WEIR_TEST_PUSHER_CLUSTER_SECRET"
client_events = true
user_authentication = true
"#;

/// A node of the cluster `cluster` names (`redis = …` or `redis_cluster = […]`).
async fn node(cluster: &str) -> WeirProcess {
    // Every test sets the same value before its nodes read it.
    std::env::set_var("WEIR_TEST_PUSHER_CLUSTER_SECRET", "secret1");
    let routes = format!("{ROUTES}\n[cluster]\n{cluster}\n");
    let weir = WeirProcess::start("workers = 2", &routes, "info", Stdio::null()).await;
    await_metric(weir.addr, "weir_cluster_connected", 1).await;
    weir
}

/// Runs one scenario of pusher-cluster.mjs against nodes `a` and `b`; its
/// JSON summary.
async fn scenario(a: &WeirProcess, b: &WeirProcess, name: &str) -> serde_json::Value {
    require_client("pusher-js");
    let args = [
        a.addr.ip().to_string(),
        a.addr.port().to_string(),
        b.addr.port().to_string(),
        name.to_string(),
    ];
    let name = name.to_string();
    tokio::task::spawn_blocking(move || {
        let mut argv = vec!["pusher-cluster.mjs"];
        argv.extend(args.iter().map(String::as_str));
        node_summary(&name, &argv)
    })
    .await
    .unwrap()
}

/// Two nodes on a standalone Redis, and the Redis (kept alive with them).
async fn standalone() -> Option<(Redis, WeirProcess, WeirProcess)> {
    if !have_redis() {
        return None;
    }
    let redis = Redis::start(false).await;
    let cluster = format!("redis = \"{}\"", redis.url());
    let (a, b) = (node(&cluster).await, node(&cluster).await);
    Some((redis, a, b))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trigger_through_node_b_reaches_a_subscriber_on_node_a() {
    let Some((_redis, a, b)) = standalone().await else {
        return;
    };
    let out = scenario(&a, &b, "events").await;
    assert_eq!(
        (out["events"].clone(), out["client_events"].clone()),
        (1.into(), 1.into()),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presence_members_span_both_nodes_once_per_user() {
    let Some((_redis, a, b)) = standalone().await else {
        return;
    };
    let out = scenario(&a, &b, "presence").await;
    assert_eq!(out["members"], 2, "{out}");
    // bob once (on B, then on A too), then bea on B.
    assert_eq!(
        (out["added"].clone(), out["removed"].clone()),
        (2.into(), 1.into()),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_is_vacated_only_when_its_last_subscriber_anywhere_leaves() {
    let Some((_redis, a, b)) = standalone().await else {
        return;
    };
    let out = scenario(&a, &b, "occupancy").await;
    assert_eq!(out["occupied_while_one_left"], true, "{out}");
    assert_eq!(out["vacated"], true, "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminate_connections_through_b_closes_the_users_connection_on_a() {
    let Some((_redis, a, b)) = standalone().await else {
        return;
    };
    let out = scenario(&a, &b, "terminate").await;
    assert_eq!(out["terminated"], true, "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_channels_event_is_replayed_on_the_other_node() {
    let Some((_redis, a, b)) = standalone().await else {
        return;
    };
    let out = scenario(&a, &b, "cache").await;
    assert_eq!(out["replayed"], 2, "{out}");
}

/// A node killed (no leave reaches Redis) with a subscriber: the channel
/// stays occupied on the other node's API until the dead node's lease
/// ends, then is vacated there (counts never outlive their node).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_nodes_subscribers_stop_counting_after_its_lease() {
    let Some((_redis, a, mut b)) = standalone().await else {
        return;
    };
    let mut ws = client(&b.url("/app/key1?protocol=7")).await;
    let subscribe = r#"{"event":"pusher:subscribe","data":{"channel":"room"}}"#;
    ws.send(Message::text(subscribe)).await.unwrap();
    loop {
        let msg = timeout(STEP, ws.next()).await.unwrap().unwrap().unwrap();
        if msg.to_text().unwrap().contains("subscription_succeeded") {
            break;
        }
    }
    let out = scenario(&a, &b, "occupied").await;
    assert_eq!(out["subscription_count"], 1, "{out}");
    b.child.kill().unwrap();
    b.child.wait().unwrap();
    let out = scenario(&a, &b, "vacated").await;
    assert_eq!(out["vacated"], true, "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_scenario_on_a_redis_cluster() {
    if !have_redis() {
        return;
    }
    let nodes = redis_cluster().await;
    let urls: Vec<String> = nodes.iter().map(|n| format!("\"{}\"", n.url())).collect();
    let cluster = format!("redis_cluster = [{}]", urls.join(", "));
    let (a, b) = (node(&cluster).await, node(&cluster).await);
    let out = scenario(&a, &b, "all").await;
    assert_eq!(out["events"]["events"], 1, "{out}");
    assert_eq!(out["presence"]["removed"], 1, "{out}");
    assert_eq!(out["occupancy"]["vacated"], true, "{out}");
    assert_eq!(out["terminate"]["terminated"], true, "{out}");
    assert_eq!(out["cache"]["replayed"], 2, "{out}");
}

/// Webhook events as a receiver got them: (name, channel, user_id).
type Got = std::sync::Arc<std::sync::Mutex<Vec<(String, String, String)>>>;

/// A webhook receiver on 127.0.0.1 (hyper, answering 200): every event of
/// every POST, in arrival order.
async fn webhook_receiver() -> (u16, Got) {
    use http_body_util::BodyExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let got = Got::default();
    let into = got.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let into = into.clone();
            let service =
                hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let into = into.clone();
                    async move {
                        let body = req.into_body().collect().await?.to_bytes();
                        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
                        let mut got = into.lock().unwrap();
                        for e in json["events"].as_array().unwrap() {
                            let field = |k: &str| e[k].as_str().unwrap_or_default().to_string();
                            got.push((field("name"), field("channel"), field("user_id")));
                        }
                        Ok::<_, hyper::Error>(hyper::Response::new(http_body_util::Empty::<
                            bytes::Bytes,
                        >::new(
                        )))
                    }
                });
            tokio::spawn(async move {
                let io = hyper_util::rt::TokioIo::new(tcp);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(io, service)
                    .await;
            });
        }
    });
    (port, got)
}

/// A raw Pusher client on `node`: its socket id once established.
async fn pusher_conn(node: &WeirProcess) -> (common::Ws, String) {
    let mut ws = client(&node.url("/app/key1?protocol=7")).await;
    let msg = timeout(STEP, ws.next()).await.unwrap().unwrap().unwrap();
    let v: serde_json::Value = serde_json::from_str(msg.to_text().unwrap()).unwrap();
    assert_eq!(v["event"], "pusher:connection_established", "{v}");
    let data: serde_json::Value = serde_json::from_str(v["data"].as_str().unwrap()).unwrap();
    (ws, data["socket_id"].as_str().unwrap().to_string())
}

/// Subscribes `ws` to `channel` (signed as the app's auth endpoint would,
/// as `user` on a presence channel) and waits for the answer.
async fn pusher_subscribe(ws: &mut common::Ws, socket: &str, channel: &str, user: &str) {
    let app = weir_pusher::auth::AppKey {
        key: "key1",
        secret: b"secret1",
    };
    let data = channel
        .starts_with("presence-")
        .then(|| serde_json::json!({ "user_id": user }).to_string());
    let mut sub = serde_json::json!({ "channel": channel });
    if channel.starts_with("presence-") || channel.starts_with("private-") {
        let auth = weir_pusher::auth::sign_channel(&app, socket, channel, data.as_deref());
        sub["auth"] = auth.into();
    }
    if let Some(data) = &data {
        sub["channel_data"] = data.clone().into();
    }
    let msg = serde_json::json!({ "event": "pusher:subscribe", "data": sub }).to_string();
    ws.send(Message::text(msg)).await.unwrap();
    loop {
        let msg = timeout(STEP, ws.next()).await.unwrap().unwrap().unwrap();
        let text = msg.to_text().unwrap().to_string();
        assert!(!text.contains("subscription_error"), "{text}");
        if text.contains("subscription_succeeded") {
            return;
        }
    }
}

/// Waits until the receiver holds `n` events; they, sorted by arrival.
async fn webhook_events(got: &Got, n: usize) -> Vec<(String, String, String)> {
    let start = tokio::time::Instant::now();
    loop {
        let events = got.lock().unwrap().clone();
        if events.len() >= n || start.elapsed() > STEP {
            return events;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Both nodes send their webhooks to one receiver (the same routes file):
/// a channel subscribed on A and B is occupied once and vacated once, when
/// its last subscriber anywhere leaves; a presence user connected on both
/// is added once and removed once, at its last connection anywhere (the
/// soketi defect: a vacated while another node still had subscribers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_see_one_occupied_and_one_vacated_for_the_whole_cluster() {
    if !have_redis() {
        return;
    }
    let redis = Redis::start(false).await;
    let (port, got) = webhook_receiver().await;
    let hook = format!(
        "[[route.apps.webhooks]]\nurl = \"http://127.0.0.1:{port}/hooks\"\n\
         events = [\"channel_occupied\", \"channel_vacated\", \"member_added\", \"member_removed\"]\n\
         [cluster]\nredis = \"{}\"\n",
        redis.url()
    );
    std::env::set_var("WEIR_TEST_PUSHER_CLUSTER_SECRET", "secret1");
    let start = |routes: String| async move {
        let weir = WeirProcess::start("workers = 2", &routes, "info", Stdio::null()).await;
        await_metric(weir.addr, "weir_cluster_connected", 1).await;
        weir
    };
    let a = start(format!("{ROUTES}{hook}")).await;
    let b = start(format!("{ROUTES}{hook}")).await;
    let ev = |name: &str, channel: &str, user: &str| {
        (name.to_string(), channel.to_string(), user.to_string())
    };

    let (mut on_a, sa) = pusher_conn(&a).await;
    let (mut on_b, sb) = pusher_conn(&b).await;
    pusher_subscribe(&mut on_a, &sa, "room", "").await;
    pusher_subscribe(&mut on_b, &sb, "room", "").await;
    pusher_subscribe(&mut on_a, &sa, "presence-lobby", "ann").await;
    pusher_subscribe(&mut on_b, &sb, "presence-lobby", "ann").await;
    let joined = webhook_events(&got, 3).await;
    assert_eq!(
        joined,
        [
            ev("channel_occupied", "room", ""),
            ev("channel_occupied", "presence-lobby", ""),
            ev("member_added", "presence-lobby", "ann"),
        ],
        "one occupied per channel and one member_added for the cluster"
    );

    // A leaves: B still holds both channels and the user.
    on_a.close(None).await.unwrap();
    drop(on_a);
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(
        webhook_events(&got, 4).await.len(),
        3,
        "nothing vacated or removed while node B has subscribers: {:?}",
        got.lock().unwrap()
    );

    // B leaves: the last subscriber anywhere.
    on_b.close(None).await.unwrap();
    drop(on_b);
    let all = webhook_events(&got, 6).await;
    let mut left = all[3..].to_vec();
    left.sort();
    assert_eq!(
        left,
        [
            ev("channel_vacated", "presence-lobby", ""),
            ev("channel_vacated", "room", ""),
            ev("member_removed", "presence-lobby", "ann"),
        ],
        "{all:?}"
    );
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(got.lock().unwrap().len(), 6, "no event twice: {got:?}");
}
