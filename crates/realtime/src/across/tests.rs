//! Two cores on one real Redis, as two nodes (skipped without
//! redis-server; scripts/redis.sh installs it): a presence join answers
//! from the node's copy of the members, which follows the other node's
//! joins and leaves.

use crate::*;
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use weir_config::ClusterConfig;
use weir_pubsub::{Fanout, LocalBroker};
use weir_reactor::registry::conn_id;

const CHANNEL: &str = "room:x";

/// A redis-server child on a free loopback port, killed when dropped.
struct Redis(Child, u16);

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn redis() -> Option<Redis> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .ok()?
        .local_addr()
        .ok()?
        .port();
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let Ok(child) = child else {
        eprintln!("\n*** SKIPPED: redis-server not found; run scripts/redis.sh ***\n");
        return None;
    };
    let redis = Redis(child, port);
    for _ in 0..100 {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Some(redis);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("redis-server did not listen on {port}");
}

/// Frames nothing the test reads.
struct Quiet;

impl Framer for Quiet {
    fn publication(&self, _: &str, _: &Publication) -> Bytes {
        Bytes::new()
    }
    fn join_leave(&self, _: &str, _: &ClientInfo, _: bool) -> Option<Bytes> {
        None
    }
}

/// A node: its own store and link on `redis`, a presence namespace `room`.
fn node(redis: &Redis) -> (Arc<Realtime>, Arc<Topics>) {
    let config = ClusterConfig::Redis(format!("redis://127.0.0.1:{}", redis.1));
    let store = RedisStore::start(config.clone()).unwrap();
    let broker = RedisBroker::start(config).unwrap();
    let options = NamespaceOptions {
        presence: true,
        ..Default::default()
    };
    let namespaces = Namespaces::new(HashMap::from([("room".to_string(), options)]));
    let core = Realtime::clustered(namespaces, store, broker);
    let topics = Topics::new("rt", Arc::new(Fanout::new(1)), Arc::new(LocalBroker));
    core.attach(&topics, Arc::new(Quiet));
    (core, topics)
}

fn member(client: &str) -> Arc<ClientInfo> {
    Arc::new(ClientInfo {
        client: client.into(),
        user: format!("user-{client}"),
        conn_info: None,
        chan_info: None,
    })
}

/// One subscriber of [`CHANNEL`] on `core`, as an adapter makes it.
struct Joined {
    conn: ConnId,
    member: Arc<ClientInfo>,
    subscription: Arc<Subscription>,
}

async fn join(core: &Arc<Realtime>, topics: &Arc<Topics>, seq: u64, client: &str) -> Joined {
    let joined = Joined {
        conn: conn_id(0, seq),
        member: member(client),
        subscription: Arc::new(Subscription::default()),
    };
    let req = Subscribe {
        channel: CHANNEL.into(),
        topics: topics.clone(),
        conn: joined.conn,
        outbound: Arc::new(Outbound::new(1 << 20)),
        member: joined.member.clone(),
        recoverable: false,
        recover: None,
        subscription: joined.subscription.clone(),
    };
    let call = core
        .clone()
        .subscribe(req, false, Box::new(|_| Bytes::new()));
    core.runtime().unwrap().spawn(call).await.unwrap().unwrap();
    joined
}

/// The clients `core` answers a presence call with, sorted.
async fn present(core: &Arc<Realtime>) -> Vec<String> {
    let call = core.clone().presence(CHANNEL.into());
    let members = core.runtime().unwrap().spawn(call).await.unwrap().unwrap();
    let mut clients: Vec<String> = members.iter().map(|m| m.client.clone()).collect();
    clients.sort();
    clients
}

/// Asks `core` until it answers `want` (other nodes' changes arrive
/// through Redis a moment later).
async fn await_present(core: &Arc<Realtime>, want: &[&str]) {
    let mut got = Vec::new();
    for _ in 0..100 {
        got = present(core).await;
        if got == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("presence {got:?}, wanted {want:?}");
}

fn reads(core: &Realtime) -> u64 {
    core.store().unwrap().presence_reads()
}

/// Linear presence joins (issue 38's storm): with a subscriber on the
/// node, its presence answers come from its copy of the members, seeded by
/// one read; members that join or leave on another node reach the copy
/// through Redis, with no read of the whole list again.
#[tokio::test]
async fn presence_answers_from_the_nodes_copy_which_follows_other_nodes() {
    let Some(redis) = redis() else {
        return;
    };
    let (a, topics_a) = node(&redis);
    let (b, topics_b) = node(&redis);
    join(&a, &topics_a, 1, "a1").await;
    let b1 = join(&b, &topics_b, 1, "b1").await;
    assert_eq!(present(&a).await, ["a1", "b1"]);
    assert_eq!(reads(&a), 1, "the first answer seeds the copy");

    join(&b, &topics_b, 2, "b2").await;
    await_present(&a, &["a1", "b1", "b2"]).await;
    join(&a, &topics_a, 2, "a2").await;
    assert_eq!(
        present(&a).await,
        ["a1", "a2", "b1", "b2"],
        "a join here is in the copy at once"
    );
    b.leave(CHANNEL, &topics_b, b1.conn, &b1.member, &b1.subscription);
    await_present(&a, &["a1", "a2", "b2"]).await;
    assert_eq!(reads(&a), 1, "no answer read the whole list again");

    // B's copy was seeded when B first answered; A's joins reach it too.
    await_present(&b, &["a1", "a2", "b2"]).await;
    assert_eq!(reads(&b), 1);
}

/// A node with no subscriber of the channel keeps no copy: it reads
/// Redis each time, and its last subscriber's leave drops its copy.
#[tokio::test]
async fn a_node_without_subscribers_reads_redis() {
    let Some(redis) = redis() else {
        return;
    };
    let (a, topics_a) = node(&redis);
    let (b, topics_b) = node(&redis);
    join(&b, &topics_b, 1, "b1").await;
    assert_eq!(present(&a).await, ["b1"]);
    assert_eq!(present(&a).await, ["b1"]);
    assert_eq!(reads(&a), 2, "no copy without a subscriber here");

    let a1 = join(&a, &topics_a, 1, "a1").await;
    assert_eq!(present(&a).await, ["a1", "b1"]);
    assert_eq!(present(&a).await, ["a1", "b1"]);
    assert_eq!(reads(&a), 3, "one read seeds the copy");
    a.leave(CHANNEL, &topics_a, a1.conn, &a1.member, &a1.subscription);
    await_present(&a, &["b1"]).await;
    assert!(reads(&a) > 3, "the copy went with the last subscriber");
}
