//! Topics across two `weir serve` processes through Redis: a standalone
//! server and a three-master Redis Cluster (sharded pub/sub), both started
//! here on loopback ports from Debian's redis-server (scripts/redis.sh
//! installs it; these tests say so loudly and pass only when it is absent).
//! Every message reaches every other subscriber on both nodes exactly once
//! and in its publisher's order; Redis killed mid-run stops nothing local,
//! what could not cross is counted, and delivery across nodes resumes once
//! Redis is back. Guests' key-value stores on the standalone server: shared
//! by the nodes, expiring, private to their route.

mod common;

use common::redis::{await_cluster_ok, free_port, have_redis, redis_cluster, Redis};
use common::{client, metric, next, WeirProcess, Ws, STEP};
use futures_util::{SinkExt, StreamExt};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::Message;

const PUBSUB: &str = "[[route]]\npath = \"/topic/{topic}\"\nnative = \"pubsub\"\n";

async fn node(cluster: &str) -> WeirProcess {
    let routes = format!("{PUBSUB}\n[cluster]\n{cluster}\n");
    WeirProcess::start("workers = 2", &routes, "info", Stdio::null()).await
}

/// Waits until `/metrics` of `weir` shows `name` at `want`.
async fn await_metric(weir: &WeirProcess, name: &str, want: u64) {
    common::await_metric(weir.addr, name, want).await;
}

/// Sends `probe` from `from` until `to` hears it (the subscriptions across
/// nodes are in place), then drains the copies still in flight.
async fn connected(from: &mut Ws, to: &mut Ws) {
    let deadline = tokio::time::Instant::now() + STEP;
    loop {
        from.send(Message::text("probe")).await.unwrap();
        if let Ok(Some(Ok(_))) = timeout(Duration::from_millis(200), to.next()).await {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no delivery across nodes"
        );
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    for ws in [from, to] {
        while let Ok(Some(Ok(_))) = timeout(Duration::from_millis(100), ws.next()).await {}
    }
}

/// On each topic, two connections on each node publish `each` messages;
/// every connection receives the three others' messages exactly once and
/// in each publisher's order, then nothing more.
async fn exchange(a: &WeirProcess, b: &WeirProcess, topics: &[&str], each: usize, round: usize) {
    for topic in topics {
        let mut conns = Vec::new();
        for node in [a, b, a, b] {
            conns.push(client(&node.url(&format!("/topic/{topic}"))).await);
        }
        // Both nodes subscribe in Redis before the exact count starts.
        let (first, rest) = conns.split_at_mut(1);
        connected(&mut first[0], &mut rest[0]).await;
        let (first, rest) = conns.split_at_mut(2);
        connected(&mut first[1], &mut rest[0]).await;
        for ws in conns.iter_mut() {
            while let Ok(Some(Ok(_))) = timeout(Duration::from_millis(100), ws.next()).await {}
        }
        let (mut sinks, mut streams): (Vec<_>, Vec<_>) =
            conns.into_iter().map(|c| c.split()).unzip();
        let send = async {
            for i in 0..each {
                for (p, sink) in sinks.iter_mut().enumerate() {
                    sink.send(Message::text(format!("{round}:{p}:{i}")))
                        .await
                        .unwrap();
                }
            }
        };
        let receive = async {
            for (me, stream) in streams.iter_mut().enumerate() {
                let mut next_from = [0usize; 4];
                for _ in 0..each * 3 {
                    let msg = timeout(STEP, stream.next())
                        .await
                        .expect("a message was lost")
                        .unwrap()
                        .unwrap();
                    let text = msg.into_text().unwrap();
                    let mut parts = text.split(':').map(|p| p.parse::<usize>().unwrap());
                    let (r, p, i) = (
                        parts.next().unwrap(),
                        parts.next().unwrap(),
                        parts.next().unwrap(),
                    );
                    assert_eq!(r, round, "a message from another round");
                    assert_ne!(p, me, "a publisher received its own message");
                    assert_eq!(
                        i, next_from[p],
                        "{topic}: publisher {p}'s order broke at {me}"
                    );
                    next_from[p] += 1;
                }
                // Nothing twice.
                if let Ok(Some(Ok(extra))) =
                    timeout(Duration::from_millis(300), stream.next()).await
                {
                    panic!("{topic}: connection {me} got an extra message {extra:?}");
                }
            }
        };
        tokio::join!(send, receive);
    }
}

/// A master's every slot moves to `to` (`redis-cli --cluster reshard`);
/// each moved slot's sharded subscriptions end on the old master.
fn reshard(from: &Redis, to: &Redis, slots: usize) {
    let id = |r: &Redis| {
        let out = Command::new("redis-cli")
            .args(["-p", &r.port.to_string(), "cluster", "myid"])
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    let status = Command::new("redis-cli")
        .args(["--cluster", "reshard", &format!("127.0.0.1:{}", from.port)])
        .args(["--cluster-from", &id(from), "--cluster-to", &id(to)])
        .args(["--cluster-slots", &slots.to_string(), "--cluster-yes"])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "redis-cli --cluster reshard failed");
}

/// Resharding while both nodes hold subscriptions: two masters hand all
/// their slots to the third, which ends the subscriptions of the topics
/// that lived there (MOVED); both nodes subscribe again and every topic
/// crosses between them afterwards, both ways.
async fn follow_resharding(a: &WeirProcess, b: &WeirProcess, nodes: &[Redis], topics: &[&str]) {
    let mut pairs = Vec::new();
    for topic in topics {
        let mut on_a = client(&a.url(&format!("/topic/{topic}"))).await;
        let mut on_b = client(&b.url(&format!("/topic/{topic}"))).await;
        connected(&mut on_a, &mut on_b).await;
        pairs.push((on_a, on_b));
    }
    // `redis-cli --cluster create` gives the three masters 5,461, 5,462
    // and 5,461 slots.
    reshard(&nodes[0], &nodes[1], 5461);
    reshard(&nodes[2], &nodes[1], 5461);
    await_cluster_ok(nodes).await;
    for weir in [a, b] {
        let deadline = tokio::time::Instant::now() + STEP;
        while metric(weir.addr, "weir_cluster_resubscribed_total").await == 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no subscription was made again after its slot moved"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    for (on_a, on_b) in pairs.iter_mut() {
        connected(on_a, on_b).await;
        connected(on_b, on_a).await;
    }
}

/// Kills Redis while a publisher on node A keeps going: A's subscribers get
/// everything, B's get what was sent while Redis was up, the lost ones are
/// counted on A, and delivery across nodes resumes after the restart.
async fn survive_restart(a: &WeirProcess, b: &WeirProcess, redis: &mut impl RedisDown) {
    let mut publisher = client(&a.url("/topic/live")).await;
    let mut local = client(&a.url("/topic/live")).await;
    let mut remote = client(&b.url("/topic/live")).await;
    connected(&mut publisher, &mut remote).await;
    while let Ok(Some(Ok(_))) = timeout(Duration::from_millis(100), local.next()).await {}
    let lost_before = metric(a.addr, "weir_cluster_lost_total").await;
    redis.down(a).await;
    // While Redis is down: local delivery goes on.
    for i in 0..50 {
        publisher
            .send(Message::text(format!("down {i}")))
            .await
            .unwrap();
    }
    for i in 0..50 {
        assert_eq!(next(&mut local).await, Message::text(format!("down {i}")));
    }
    // Counted once the link gives up on them (a cluster client retries).
    let deadline = tokio::time::Instant::now() + STEP;
    while metric(a.addr, "weir_cluster_lost_total").await <= lost_before {
        assert!(
            tokio::time::Instant::now() < deadline,
            "publishes that could not cross were not counted"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    redis.up().await;
    // Back: subscriptions are made again and messages cross.
    let deadline = tokio::time::Instant::now() + STEP * 2;
    loop {
        publisher.send(Message::text("back?")).await.unwrap();
        let mut heard = false;
        while let Ok(Some(Ok(msg))) = timeout(Duration::from_millis(200), remote.next()).await {
            let text = msg.into_text().unwrap();
            assert!(
                text == "back?" || text.starts_with("down"),
                "unexpected {text}"
            );
            heard |= text == "back?";
        }
        if heard {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "delivery across nodes did not resume"
        );
    }
    while let Ok(Some(Ok(_))) = timeout(Duration::from_millis(100), local.next()).await {}
    for i in 0..100 {
        publisher
            .send(Message::text(format!("after {i}")))
            .await
            .unwrap();
    }
    for i in 0..100 {
        assert_eq!(next(&mut remote).await, Message::text(format!("after {i}")));
        assert_eq!(next(&mut local).await, Message::text(format!("after {i}")));
    }
}

/// Taking Redis down and bringing it back.
trait RedisDown {
    /// Redis stops serving (node `a` has noticed or will fail its sends).
    async fn down(&mut self, a: &WeirProcess);
    async fn up(&mut self);
}

impl RedisDown for Redis {
    async fn down(&mut self, a: &WeirProcess) {
        self.kill();
        await_metric(a, "weir_cluster_connected", 0).await;
    }

    async fn up(&mut self) {
        self.spawn().await;
    }
}

/// The master that owns topic "live" killed (its channel
/// `weir:route%3A/topic/%7Btopic%7D:live` hashes to slot 550, and
/// `--cluster create` gives slots 0-5460 to the first node): publishes to it
/// cannot cross (other shards' topics still would); restarted, it rejoins
/// from its nodes.conf.
impl RedisDown for Vec<Redis> {
    async fn down(&mut self, _: &WeirProcess) {
        self[0].kill();
        let deadline = tokio::time::Instant::now() + STEP;
        loop {
            let failed = Command::new("redis-cli")
                .args(["-p", &self[1].port.to_string(), "cluster", "info"])
                .output()
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("cluster_state:fail"));
            if failed {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the cluster never noticed"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn up(&mut self) {
        self[0].spawn().await;
        await_cluster_ok(self).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_share_topics_through_standalone_redis() {
    if !have_redis() {
        return;
    }
    let mut redis = Redis::start(false).await;
    let cluster = format!("redis = \"{}\"", redis.url());
    let (mut a, mut b) = (node(&cluster).await, node(&cluster).await);
    await_metric(&a, "weir_cluster_connected", 1).await;
    await_metric(&b, "weir_cluster_connected", 1).await;
    // A node subscribes in Redis to the topics it has subscribers for, and
    // only while it has them.
    let solo = client(&a.url("/topic/solo")).await;
    await_metric(&a, "weir_cluster_subscribed_channels", 1).await;
    assert_eq!(metric(b.addr, "weir_cluster_subscribed_channels").await, 0);
    drop(solo);
    await_metric(&a, "weir_cluster_subscribed_channels", 0).await;
    exchange(&a, &b, &["room"], 200, 1).await;
    survive_restart(&a, &b, &mut redis).await;
    exchange(&a, &b, &["room", "other"], 100, 2).await;
    for weir in [&mut a, &mut b] {
        assert!(weir.child.try_wait().unwrap().is_none(), "a node exited");
        // Every client has gone: so have the node's subscriptions.
        await_metric(weir, "weir_cluster_subscribed_channels", 0).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_share_topics_through_a_redis_cluster() {
    if !have_redis() {
        return;
    }
    let mut nodes = redis_cluster().await;
    let urls: Vec<String> = nodes.iter().map(|n| format!("\"{}\"", n.url())).collect();
    let cluster = format!("redis_cluster = [{}]", urls.join(", "));
    let (mut a, mut b) = (node(&cluster).await, node(&cluster).await);
    await_metric(&a, "weir_cluster_connected", 1).await;
    await_metric(&b, "weir_cluster_connected", 1).await;
    // Topics spread over the three shards.
    exchange(&a, &b, &["alpha", "beta", "gamma", "delta"], 100, 1).await;
    survive_restart(&a, &b, &mut nodes).await;
    exchange(&a, &b, &["alpha", "beta", "gamma", "delta"], 50, 2).await;
    let topics = ["alpha", "beta", "gamma", "delta"];
    follow_resharding(&a, &b, &nodes, &topics).await;
    // Exactly once and in order on the resharded cluster.
    exchange(&a, &b, &topics, 50, 3).await;
    for weir in [&mut a, &mut b] {
        assert!(weir.child.try_wait().unwrap().is_none(), "a node exited");
    }
}

/// Asks `ws` (the io-probe) for `key` until the answer is `want`, within
/// STEP: another node's write arrives through Redis a moment later.
async fn await_kv(ws: &mut Ws, key: &str, want: &str) {
    let deadline = tokio::time::Instant::now() + STEP;
    loop {
        timeout(STEP, ws.send(Message::text(format!("get-kv {key}"))))
            .await
            .unwrap()
            .unwrap();
        let got = match next(ws).await {
            Message::Text(t) => t.to_string(),
            other => panic!("expected text, got {other:?}"),
        };
        if got == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{key}: still {got:?}, want {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn say(ws: &mut Ws, text: &str) {
    timeout(STEP, ws.send(Message::text(text)))
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guests_key_value_stores_live_in_redis_shared_by_the_nodes() {
    if !have_redis() {
        return;
    }
    let redis = Redis::start(false).await;
    let wasm = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/wasm/io-probe.wasm");
    assert!(wasm.exists(), "run scripts/build-guests.sh first");
    let routes = format!(
        "[[route]]\npath = \"/io\"\nguest = \"{w}\"\nkv = \"route\"\n\n\
         [[route]]\npath = \"/other\"\nguest = \"{w}\"\nkv = \"route\"\n\n\
         [[route]]\npath = \"/s1\"\nguest = \"{w}\"\nkv = \"shared:common\"\n\n\
         [[route]]\npath = \"/s2\"\nguest = \"{w}\"\nkv = \"shared:common\"\n\n\
         [cluster]\nredis = \"{}\"\n",
        redis.url(),
        w = wasm.display()
    );
    let a = WeirProcess::start("workers = 2", &routes, "info", Stdio::null()).await;
    let b = WeirProcess::start("workers = 2", &routes, "info", Stdio::null()).await;
    let (mut on_a, mut on_b) = (client(&a.url("/io")).await, client(&b.url("/io")).await);
    // A write on one node is read on the other (and on the writer at once).
    say(&mut on_a, "set colour blue").await;
    await_kv(&mut on_a, "colour", "colour=blue").await;
    await_kv(&mut on_b, "colour", "colour=blue").await;
    say(&mut on_b, "set colour red").await;
    await_kv(&mut on_a, "colour", "colour=red").await;
    say(&mut on_b, "del colour").await;
    await_kv(&mut on_a, "colour", "colour?").await;
    // A ttl expires on every node, and in Redis.
    say(&mut on_a, "set-ttl 300 brief here").await;
    await_kv(&mut on_b, "brief", "brief=here").await;
    tokio::time::sleep(Duration::from_millis(350)).await;
    await_kv(&mut on_a, "brief", "brief?").await;
    await_kv(&mut on_b, "brief", "brief?").await;
    // Another route's store does not see the key; a shared store is shared
    // by the routes that name it, across nodes.
    say(&mut on_a, "set secret 42").await;
    await_kv(&mut on_b, "secret", "secret=42").await;
    let mut other = client(&b.url("/other")).await;
    await_kv(&mut other, "secret", "secret?").await;
    let mut s1 = client(&a.url("/s1")).await;
    let mut s2 = client(&b.url("/s2")).await;
    say(&mut s1, "set room 7").await;
    await_kv(&mut s2, "room", "room=7").await;
    await_kv(&mut on_b, "room", "room?").await;
    // A node started later loads what is there; nothing on disk.
    let c = WeirProcess::start("workers = 1", &routes, "info", Stdio::null()).await;
    let mut on_c = client(&c.url("/io")).await;
    await_kv(&mut on_c, "secret", "secret=42").await;
    await_kv(&mut on_c, "brief", "brief?").await;
    let keys = Command::new("redis-cli")
        .args([
            "-p",
            &redis.port.to_string(),
            "--scan",
            "--pattern",
            "weir:kv:*",
        ])
        .output()
        .unwrap();
    let mut keys: Vec<String> = String::from_utf8_lossy(&keys.stdout)
        .lines()
        .map(String::from)
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        ["weir:kv:route-_2fio:secret", "weir:kv:shared-common:room"],
        "one key per write still alive, under its store's prefix"
    );
}

// ---- The real-time core across nodes (centrifugo routes, the server API) ----

const SECRET: &str = "cluster-centrifugo-secret";
const API_KEY: &str = "cluster-api-key-0123456789abcdef";

const CENTRIFUGO: &str = r#"
[[route]]
path = "/connection/websocket"
native = "centrifugo"
token_hmac_secret_env = "WEIR_TEST_CLUSTER_SECRET"

[[namespaces]]
name = "chat"
history_size = 1000
history_ttl = "5m"
force_recovery = true
presence = true
join_leave = true
allow_subscribe_for_client = true
allow_publish_for_subscriber = true
allow_publish_for_client = true
allow_presence_for_subscriber = true
allow_history_for_subscriber = true
"#;

/// A node serving the centrifugo route, with the server API on its own
/// port (returned).
async fn realtime_node(cluster: &str) -> (WeirProcess, u16) {
    std::env::set_var("WEIR_TEST_CLUSTER_SECRET", SECRET);
    std::env::set_var("WEIR_TEST_CLUSTER_API_KEY", API_KEY);
    let api = free_port();
    let routes = format!(
        "{CENTRIFUGO}\n[api]\nlisten = \"127.0.0.1:{api}\"\nkey_env = \"WEIR_TEST_CLUSTER_API_KEY\"\n\n[cluster]\n{cluster}\n"
    );
    let weir = WeirProcess::start("workers = 2", &routes, "info", Stdio::null()).await;
    (weir, api)
}

fn clients_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/clients")
}

/// centrifuge-client.mjs's `scenario` against node `a`, with `args`;
/// stdin and stdout are the caller's to drive.
fn centrifuge(a: &WeirProcess, scenario: &str, args: &[String]) -> Child {
    assert!(
        clients_dir().join("node_modules/centrifuge").exists(),
        "host/tests/clients/node_modules/centrifuge missing: run scripts/test.sh"
    );
    Command::new("node")
        .arg("centrifuge-client.mjs")
        .arg(a.url("/connection/websocket"))
        .args([SECRET, scenario])
        .args(args)
        .current_dir(clients_dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("node (scripts/test.sh installs the clients)")
}

/// Reads `child`'s stdout lines on a thread of their own.
fn lines_of(child: &mut Child) -> tokio::sync::mpsc::UnboundedReceiver<String> {
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)) {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits for `child` to end well, within `limit`; its last line (JSON).
async fn finished(
    mut child: Child,
    mut lines: tokio::sync::mpsc::UnboundedReceiver<String>,
    limit: Duration,
) -> serde_json::Value {
    let waited = tokio::task::spawn_blocking(move || {
        let status = child.wait().unwrap();
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
        (status, stderr)
    });
    let (status, stderr) = timeout(limit, waited).await.expect("client ended").unwrap();
    let mut last = String::new();
    while let Ok(line) = lines.try_recv() {
        last = line;
    }
    assert!(status.success(), "{status}: {stderr}\n{last}");
    serde_json::from_str(&last).unwrap()
}

/// One server API call over plain HTTP/1.1: the JSON body answered.
async fn api_call(port: u16, method: &str, body: &str) -> serde_json::Value {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let request = format!(
        "POST /api/{method} HTTP/1.1\r\nHost: localhost\r\nX-API-Key: {API_KEY}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    timeout(STEP, stream.read_to_end(&mut response))
        .await
        .unwrap()
        .unwrap();
    let response = String::from_utf8_lossy(&response);
    let (_, body) = response.split_once("\r\n\r\n").expect("a response");
    serde_json::from_str(body).unwrap_or_else(|_| panic!("not JSON: {response}"))
}

/// Clients (by user) in `channel`'s presence, as node `api` answers.
async fn present(api: u16, channel: &str) -> Vec<String> {
    let answer = api_call(api, "presence", &format!("{{\"channel\":\"{channel}\"}}")).await;
    let mut users: Vec<String> = answer["result"]["presence"]
        .as_object()
        .unwrap_or_else(|| panic!("{answer}"))
        .values()
        .map(|c| c["user"].as_str().unwrap().to_string())
        .collect();
    users.sort();
    users
}

/// Publications, presence, join/leave, history and recovery across two
/// nodes (the `across` scenario), then a node killed without a goodbye:
/// its client leaves the channel's presence within the presence ttl.
async fn realtime_across(cluster: &str) {
    let ((mut a, api_a), (b, api_b)) = (realtime_node(cluster).await, realtime_node(cluster).await);
    await_metric(&a, "weir_cluster_connected", 1).await;
    await_metric(&b, "weir_cluster_connected", 1).await;
    let mut run = centrifuge(
        &a,
        "across",
        &[
            b.url("/connection/websocket"),
            format!("http://127.0.0.1:{api_b}/api"),
            API_KEY.to_string(),
        ],
    );
    let lines = lines_of(&mut run);
    let summary = finished(run, lines, Duration::from_secs(60)).await;
    assert!(summary["published"].as_u64().unwrap() > 10, "{summary}");
    assert_eq!(summary["published"], summary["received"], "{summary}");

    // The server API on B subscribes, unsubscribes and disconnects a user
    // connected to A (through Redis).
    let mut run = centrifuge(
        &a,
        "userCommands",
        &[format!("http://127.0.0.1:{api_b}/api"), API_KEY.to_string()],
    );
    let lines = lines_of(&mut run);
    let summary = finished(run, lines, Duration::from_secs(60)).await;
    assert_eq!(summary["serverSubscribed"], "chat:pushed", "{summary}");
    assert_eq!(summary["publication"], 1, "{summary}");
    assert_eq!(summary["ownUnsubscribed"], 2000, "{summary}");
    assert_eq!(summary["disconnected"], 3503, "{summary}");

    // A client on A, seen from B; A killed: gone from presence within
    // PRESENCE_TTL (30 s) of A's last refresh, read on B.
    let channel = "chat:held";
    let mut held = centrifuge(&a, "hold", &[channel.to_string()]);
    let mut lines = lines_of(&mut held);
    let ready = timeout(STEP, lines.recv()).await.unwrap();
    assert_eq!(ready.as_deref(), Some("ready"));
    assert_eq!(present(api_b, channel).await, ["held"]);
    assert_eq!(present(api_a, channel).await, ["held"]);
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    let killed = tokio::time::Instant::now();
    while !present(api_b, channel).await.is_empty() {
        assert!(
            killed.elapsed() < Duration::from_secs(45),
            "a dead node's member stayed in presence"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let _ = held.kill();
    let _ = held.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn realtime_channels_span_nodes_on_standalone_redis() {
    if !have_redis() {
        return;
    }
    let redis = Redis::start(false).await;
    realtime_across(&format!("redis = \"{}\"", redis.url())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn realtime_channels_span_nodes_on_a_redis_cluster() {
    if !have_redis() {
        return;
    }
    let nodes = redis_cluster().await;
    let urls: Vec<String> = nodes.iter().map(|n| format!("\"{}\"", n.url())).collect();
    realtime_across(&format!("redis_cluster = [{}]", urls.join(", "))).await;
}

/// Redis restarted empty: publishing fails plainly (100) while it is down,
/// then the channel has a new epoch, and the subscriber on node A is
/// closed (3010), reconnects and is told it could not recover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restart_is_a_new_epoch_and_subscribers_are_told() {
    if !have_redis() {
        return;
    }
    let mut redis = Redis::start(false).await;
    let cluster = format!("redis = \"{}\"", redis.url());
    let ((a, _), (b, _)) = (realtime_node(&cluster).await, realtime_node(&cluster).await);
    await_metric(&a, "weir_cluster_connected", 1).await;
    await_metric(&b, "weir_cluster_connected", 1).await;
    let mut run = centrifuge(&a, "restart", &[b.url("/connection/websocket")]);
    let mut stdin = run.stdin.take().unwrap();
    let mut lines = lines_of(&mut run);
    let cue = timeout(Duration::from_secs(30), lines.recv())
        .await
        .unwrap();
    assert_eq!(cue.as_deref(), Some("restart-redis"));
    redis.kill();
    await_metric(&a, "weir_cluster_connected", 0).await;
    std::io::Write::write_all(&mut stdin, b"go\n").unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    redis.spawn().await;
    let summary = finished(run, lines, Duration::from_secs(60)).await;
    assert_eq!(summary["recovered"], false, "{summary}");
}

/// A node serving the centrifugo route, a guest route `/g` with
/// `realtime = true` (the rt-probe fixture) and the server API on its own
/// port (returned).
async fn guest_realtime_node(cluster: &str) -> (WeirProcess, u16) {
    std::env::set_var("WEIR_TEST_CLUSTER_SECRET", SECRET);
    std::env::set_var("WEIR_TEST_CLUSTER_API_KEY", API_KEY);
    let wasm = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/wasm/rt-probe.wasm");
    assert!(wasm.exists(), "run scripts/build-guests.sh first");
    let api = free_port();
    let routes = format!(
        "{CENTRIFUGO}\n[[route]]\npath = \"/g\"\nguest = \"{}\"\nrealtime = true\n\n\
         [api]\nlisten = \"127.0.0.1:{api}\"\nkey_env = \"WEIR_TEST_CLUSTER_API_KEY\"\n\n\
         [cluster]\n{cluster}\n",
        wasm.display()
    );
    let weir = WeirProcess::start("workers = 2", &routes, "info", Stdio::null()).await;
    (weir, api)
}

/// The next text message on `ws`, or None within `wait`.
async fn text_within(ws: &mut Ws, wait: Duration) -> Option<String> {
    match timeout(wait, ws.next()).await {
        Ok(Some(Ok(Message::Text(t)))) => Some(t.to_string()),
        Ok(other) => panic!("expected text, got {other:?}"),
        Err(_) => None,
    }
}

/// A guest route with `realtime = true` across two nodes on standalone
/// Redis (issue 37): a publication of node B's server API reaches the
/// guest's subscriber on node A as its data; the guest's publication on A
/// goes through Redis (it comes back to its subscriber, and B's API
/// history has it at the next offset); the guest's history read on A
/// (from Redis) agrees with B's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn realtime_guest_routes_span_nodes_on_standalone_redis() {
    if !have_redis() {
        return;
    }
    let redis = Redis::start(false).await;
    let cluster = format!("redis = \"{}\"", redis.url());
    let (a, _api_a) = guest_realtime_node(&cluster).await;
    let (_b, api_b) = guest_realtime_node(&cluster).await;
    let mut on_a = client(&a.url("/g")).await;
    say(&mut on_a, "sub chat:nodes").await;
    assert_eq!(
        text_within(&mut on_a, STEP).await.as_deref(),
        Some("subscribed chat:nodes")
    );
    // A watches the channel once Redis confirms: publish through B until
    // A hears one.
    let deadline = tokio::time::Instant::now() + STEP;
    let heard = loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "A never heard B's API"
        );
        api_call(
            api_b,
            "publish",
            r#"{"channel":"chat:nodes","data":{"from":"api"}}"#,
        )
        .await;
        if let Some(t) = text_within(&mut on_a, Duration::from_millis(300)).await {
            break t;
        }
    };
    assert_eq!(heard, r#"{"from":"api"}"#);
    // Drain copies of later probes still in flight.
    while text_within(&mut on_a, Duration::from_millis(300))
        .await
        .is_some()
    {}

    say(&mut on_a, r#"pub chat:nodes {"from":"guest"}"#).await;
    assert_eq!(
        text_within(&mut on_a, STEP).await.as_deref(),
        Some("published")
    );
    assert_eq!(
        text_within(&mut on_a, STEP).await.as_deref(),
        Some(r#"{"from":"guest"}"#),
        "the guest's publication came back through Redis"
    );
    let history = api_call(api_b, "history", r#"{"channel":"chat:nodes","limit":1000}"#).await;
    let pubs = history["result"]["publications"].as_array().unwrap();
    let last = pubs.last().unwrap();
    assert_eq!(
        last["data"],
        serde_json::json!({"from": "guest"}),
        "{history}"
    );
    let offset = last["offset"].as_u64().unwrap();
    assert_eq!(offset, pubs.len() as u64, "{history}");

    say(&mut on_a, "history chat:nodes 1000").await;
    let read: serde_json::Value =
        serde_json::from_str(&text_within(&mut on_a, STEP).await.unwrap()).unwrap();
    let h = &read["history"];
    assert_eq!(h["offset"], offset, "{read}");
    assert_eq!(h["epoch"], history["result"]["epoch"], "{read}");
    let read_pubs = h["publications"].as_array().unwrap();
    assert_eq!(read_pubs.len(), pubs.len(), "{read}");
    assert_eq!(read_pubs.last().unwrap()["offset"], offset, "{read}");
}
