//! Topics across gateway nodes over Redis: standalone PUBLISH/SUBSCRIBE, or
//! Redis Cluster's sharded SPUBLISH/SSUBSCRIBE (a message travels only to
//! the shard that owns its channel's slot; the client follows MOVED and
//! re-subscribes when slots move).
//!
//! One thread per process owns the Redis connection. Workers never wait on
//! it: a publish is offered to a queue bounded in messages and bytes, and
//! one that does not fit, or that arrives while Redis is unreachable, is
//! counted as lost (pub/sub across nodes is at-most-once). Other nodes'
//! messages wait in a receive queue bounded in bytes; past it they are
//! dropped and counted. The node subscribes in Redis only to the
//! topics it has local subscribers for, and tags what it publishes with its
//! node id so its own messages, coming back, are not delivered twice. When
//! the link fails, local delivery goes on; the thread reconnects with
//! backoff and subscribes again to every topic still wanted.
//!
//! A message on the wire is `w`, the publishing node's id (8 bytes), then
//! the whole server frames, framed once by the publishing node.

mod link;
mod realtime;
mod topics;

use super::{Broker, Topics};
use crate::backoff::Backoff;
use bytes::Bytes;
use link::{timed, BoundedPushes, Link};
use redis::aio::MultiplexedConnection;
use redis::cluster_async::ClusterConnection;
use redis::{PushInfo, PushKind, RedisResult, Value};
use std::collections::HashMap;
use std::collections::HashSet;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::sync::{mpsc, watch};
use tracing::{info, warn};
use weir_config::ClusterConfig;
use weir_ws::frame::whole_server_frames;

/// Publishes waiting for the link: a burst while Redis is slow fits; past
/// this they are lost and counted rather than buffered without bound.
pub(crate) const PUBLISH_QUEUE: usize = 16_384;
/// And at most this many bytes of them: 16,384 publishes of a large
/// `max_message` would otherwise be gigabytes (the frames are shared with
/// local delivery, but the queue keeps them alive after it).
pub(crate) const PUBLISH_QUEUE_MAX_BYTES: usize = 64 << 20;
/// Bytes of other nodes' messages received from Redis and not yet handed
/// to local subscribers: a burst that the cluster thread cannot keep up
/// with fits; past it, messages are dropped and counted
/// (`weir_cluster_received_dropped_total`, at-most-once like the rest of
/// cross-node pub/sub) rather than queued without bound.
pub(crate) const RECEIVE_QUEUE_MAX_BYTES: usize = 32 << 20;
/// Publishes sent to Redis in one pipeline.
const PUBLISH_BATCH: usize = 256;
/// A connect or a reply slower than this counts as a failed link.
const REDIS_TIMEOUT: Duration = Duration::from_secs(2);
/// Marks a weir message (the first byte of the payload).
const TAG: u8 = b'w';
const HEADER_BYTES: usize = 9;
/// What the namespace of a wanted real-time channel starts with (then the
/// core's scope): no route path or `topics` name can, it starts with NUL.
const REALTIME_MARK: &str = "\0realtime";

/// The real-time core's end of the link: the channels it watches
/// ([`RedisBroker::watch_realtime`]) are handed to it as they come, every
/// node's included (the core delivers its own publications from Redis
/// too, so one channel's positions reach it in one order).
pub trait RealtimeSink: Send + Sync {
    fn receive(&self, channel: &str, payload: Bytes);
    /// The link is up (again) and subscribed to every watched channel:
    /// what was published while it was down never arrives.
    fn link_up(&self);
    /// The link is down: until it is up again, nothing published reaches
    /// this node.
    fn link_down(&self) {}
}

/// The link's figures for `/metrics`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ClusterStats {
    pub connected: bool,
    /// Channels subscribed in Redis now (topics with local subscribers).
    pub subscribed: usize,
    /// Publishes handed to Redis.
    pub sent: u64,
    /// Other nodes' publishes received.
    pub received: u64,
    /// Publishes that could not cross to other nodes (queue full, Redis
    /// unreachable or failing).
    pub lost: u64,
    /// Times the link failed.
    pub link_failures: u64,
    /// Subscriptions a shard ended because their slot moved, made again.
    pub resubscribed: u64,
    /// Other nodes' messages dropped because the receive queue was over
    /// [`RECEIVE_QUEUE_MAX_BYTES`].
    pub received_dropped: u64,
}

/// A publish on its way to Redis.
struct Outgoing {
    namespace: Arc<str>,
    topic: Arc<str>,
    frames: Bytes,
}

/// Channels the node wants, by name: the namespace and topic each is for.
type Wanted = HashMap<String, (Arc<str>, Arc<str>)>;

/// The Redis broker: what workers see of it (the link runs on its thread).
pub struct RedisBroker {
    node: u64,
    queue: mpsc::Sender<Outgoing>,
    wanted: Mutex<Wanted>,
    wanted_changed: Notify,
    namespaces: RwLock<HashMap<Arc<str>, Weak<Topics>>>,
    connected: AtomicBool,
    subscribed: AtomicUsize,
    /// The real-time cores' control channels (Redis names), once watched:
    /// not topics, so not counted in `subscribed`.
    control: Mutex<HashSet<String>>,
    sent: AtomicU64,
    received: AtomicU64,
    lost: AtomicU64,
    link_failures: AtomicU64,
    resubscribed: AtomicU64,
    /// Bytes of the publishes in `queue`.
    queued_bytes: AtomicUsize,
    /// Bytes of received messages not yet handled ([`BoundedPushes`]).
    received_queued: Arc<AtomicUsize>,
    received_dropped: Arc<AtomicU64>,
    /// The real-time cores, by scope: the gateway's (scope "") and those a
    /// route keeps for itself (a pusher route's), whose channels are named
    /// in Redis with their scope first so cores never share a channel.
    realtime: RwLock<HashMap<Arc<str>, Weak<dyn RealtimeSink>>>,
    /// Why each real-time channel (Redis name) is watched: the cores'
    /// subscribes and the adapters' topics with local subscribers, counted.
    realtime_watch: Mutex<HashMap<String, usize>>,
    /// Topic namespaces whose topics are real-time channels (adapters), and
    /// the scope of the core they belong to.
    realtime_adapters: RwLock<Vec<(Arc<str>, Arc<str>)>>,
    /// Redis channels subscribed now, and a count that moves whenever the
    /// set does (what [`wait_subscribed`](Self::wait_subscribed) watches).
    active: Mutex<HashSet<String>>,
    active_changed: watch::Sender<u64>,
}

impl RedisBroker {
    /// Starts the link's thread; connecting happens there (a Redis that is
    /// down at start is retried like one that went down later).
    pub fn start(config: ClusterConfig) -> std::io::Result<Arc<RedisBroker>> {
        let (queue, rx) = mpsc::channel(PUBLISH_QUEUE);
        let broker = Arc::new(RedisBroker {
            node: node_id(),
            queue,
            wanted: Mutex::default(),
            wanted_changed: Notify::new(),
            namespaces: RwLock::default(),
            connected: AtomicBool::new(false),
            subscribed: AtomicUsize::new(0),
            control: Mutex::default(),
            sent: AtomicU64::new(0),
            received: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            link_failures: AtomicU64::new(0),
            resubscribed: AtomicU64::new(0),
            queued_bytes: AtomicUsize::new(0),
            received_queued: Arc::default(),
            received_dropped: Arc::default(),
            realtime: RwLock::default(),
            realtime_watch: Mutex::default(),
            realtime_adapters: RwLock::default(),
            active: Mutex::default(),
            active_changed: watch::Sender::new(0),
        });
        let link = broker.clone();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        std::thread::Builder::new()
            .name("weir-cluster".into())
            .spawn(move || runtime.block_on(link.run(config, rx)))?;
        Ok(broker)
    }

    /// Publishes of `bytes` left the queue.
    fn dequeued(&self, bytes: usize) {
        self.queued_bytes.fetch_sub(bytes, Ordering::AcqRel);
    }

    fn lose(&self, count: u64) {
        self.lost.fetch_add(count, Ordering::Relaxed);
    }

    /// Keeps a link up for the life of the process.
    async fn run(self: Arc<Self>, config: ClusterConfig, mut queue: mpsc::Receiver<Outgoing>) {
        let mut backoff = Backoff::default();
        let mut lost_before = 0;
        loop {
            let (tx, mut push_rx) = mpsc::unbounded_channel();
            // A new link: what the old one left queued is gone with it.
            self.received_queued.store(0, Ordering::Release);
            let push_tx = BoundedPushes {
                tx,
                queued: self.received_queued.clone(),
                dropped: self.received_dropped.clone(),
            };
            match tokio::time::timeout(REDIS_TIMEOUT, Link::open(&config, push_tx)).await {
                Ok(Ok(mut link)) => {
                    backoff.reset();
                    let lost = self.lost.load(Ordering::Relaxed) - lost_before;
                    info!(node = self.node, lost, "cluster: connected to Redis");
                    self.connected.store(true, Ordering::Release);
                    let why = self.serve(&mut link, &mut queue, &mut push_rx).await;
                    self.connected.store(false, Ordering::Release);
                    self.subscribed.store(0, Ordering::Release);
                    self.set_active(|active| active.clear());
                    for sink in self.realtime_sinks() {
                        sink.link_down();
                    }
                    self.link_failures.fetch_add(1, Ordering::Relaxed);
                    lost_before = self.lost.load(Ordering::Relaxed);
                    warn!(error = %why, "cluster: Redis link lost; local delivery goes on, \
                          publishes to other nodes are lost until it is back");
                }
                Ok(Err(e)) => {
                    warn!(error = %e, retry_in = ?backoff.current(), "cluster: cannot connect to Redis")
                }
                Err(_) => {
                    warn!(retry_in = ?backoff.current(), "cluster: connecting to Redis timed out")
                }
            }
            // What is published meanwhile cannot cross: count it, never
            // let the queue hold workers back.
            let waited = backoff
                .wait(
                    async || queue.recv().await,
                    |outgoing: Outgoing| {
                        self.dequeued(outgoing.frames.len());
                        self.lose(1);
                    },
                )
                .await;
            if !waited {
                return;
            }
        }
    }

    /// The real-time cores still alive.
    fn realtime_sinks(&self) -> Vec<Arc<dyn RealtimeSink>> {
        self.realtime
            .read()
            .expect("cluster lock")
            .values()
            .filter_map(Weak::upgrade)
            .collect()
    }

    /// Runs one link until it fails: publishes go out in pipelines, other
    /// nodes' messages come in, and subscriptions follow the wanted set.
    async fn serve(
        &self,
        link: &mut Link,
        queue: &mut mpsc::Receiver<Outgoing>,
        pushes: &mut mpsc::UnboundedReceiver<(usize, PushInfo)>,
    ) -> String {
        let mut subscribed = Wanted::new();
        if let Err(e) = timed(self.follow_wanted(link, &mut subscribed)).await {
            return e.to_string();
        }
        for sink in self.realtime_sinks() {
            sink.link_up();
        }
        let mut batch = Vec::with_capacity(PUBLISH_BATCH);
        loop {
            tokio::select! {
                push = pushes.recv() => match push {
                    Some((size, push)) => match push.kind {
                        PushKind::Message | PushKind::SMessage => {
                            self.received_queued.fetch_sub(size, Ordering::AcqRel);
                            self.receive(&subscribed, push.data)
                        }
                        PushKind::Disconnection => return "disconnected".into(),
                        PushKind::SUnsubscribe if self.dropped(&mut subscribed, &push.data) => {
                            if let Err(e) = timed(self.follow_wanted(link, &mut subscribed)).await {
                                return e.to_string();
                            }
                        }
                        _ => {}
                    },
                    None => return "connection closed".into(),
                },
                count = queue.recv_many(&mut batch, PUBLISH_BATCH) => {
                    if count == 0 {
                        return "shutting down".into();
                    }
                    self.dequeued(batch.iter().map(|o| o.frames.len()).sum());
                    let sent = timed(self.send(link, &batch)).await;
                    batch.clear();
                    if let Err(e) = sent {
                        self.lose(count as u64);
                        return e.to_string();
                    }
                    self.sent.fetch_add(count as u64, Ordering::Relaxed);
                }
                _ = self.wanted_changed.notified() => {
                    if let Err(e) = timed(self.follow_wanted(link, &mut subscribed)).await {
                        return e.to_string();
                    }
                }
            }
        }
    }

    /// A shard ended a subscription we still hold: its slot moved to
    /// another shard (resharding), which unsubscribes every client of the
    /// slot's channels. Forget it, so `follow_wanted` subscribes again
    /// (through the moved slot's new owner). An unsubscribe we asked for
    /// is no longer in `subscribed` by the time its answer arrives.
    fn dropped(&self, subscribed: &mut Wanted, data: &[Value]) -> bool {
        let Some(Value::BulkString(channel)) = data.first() else {
            return false;
        };
        let Ok(channel) = std::str::from_utf8(channel) else {
            return false;
        };
        if subscribed.remove(channel).is_none() {
            return false;
        }
        self.set_active(|active| {
            active.remove(channel);
        });
        self.resubscribed.fetch_add(1, Ordering::Relaxed);
        tracing::info!(
            channel,
            "the Redis Cluster moved a subscribed channel's slot; subscribing again"
        );
        true
    }

    /// Subscribes to wanted channels not yet subscribed, and unsubscribes
    /// from those no longer wanted.
    async fn follow_wanted(&self, link: &mut Link, subscribed: &mut Wanted) -> RedisResult<()> {
        let wanted = self.wanted.lock().expect("cluster lock").clone();
        let add: Vec<String> = wanted
            .keys()
            .filter(|c| !subscribed.contains_key(*c))
            .cloned()
            .collect();
        let remove: Vec<String> = subscribed
            .keys()
            .filter(|c| !wanted.contains_key(*c))
            .cloned()
            .collect();
        if !add.is_empty() {
            link.subscribe(&add).await?;
        }
        if !remove.is_empty() {
            link.unsubscribe(&remove).await?;
        }
        *subscribed = wanted;
        let control = self
            .control
            .lock()
            .expect("cluster lock")
            .iter()
            .filter(|c| subscribed.contains_key(*c))
            .count();
        self.subscribed
            .store(subscribed.len() - control, Ordering::Release);
        self.set_active(|active| {
            active.retain(|c| !remove.contains(c));
            active.extend(add);
        });
        Ok(())
    }

    fn set_active(&self, change: impl FnOnce(&mut HashSet<String>)) {
        change(&mut self.active.lock().expect("cluster lock"));
        self.active_changed.send_modify(|n| *n += 1);
    }

    async fn send(&self, link: &mut Link, batch: &[Outgoing]) -> RedisResult<()> {
        let messages: Vec<(String, Vec<u8>)> = batch
            .iter()
            .map(|o| {
                let mut payload = Vec::with_capacity(HEADER_BYTES + o.frames.len());
                payload.push(TAG);
                payload.extend_from_slice(&self.node.to_be_bytes());
                payload.extend_from_slice(&o.frames);
                (channel(&o.namespace, &o.topic), payload)
            })
            .collect();
        link.publish(&messages).await
    }

    /// Another node's publish: delivered to this node's subscribers.
    fn receive(&self, subscribed: &Wanted, data: Vec<Value>) {
        let mut data = data.into_iter();
        let (Some(Value::BulkString(channel)), Some(Value::BulkString(payload))) =
            (data.next(), data.next())
        else {
            return;
        };
        if let Some((scope, topic)) = std::str::from_utf8(&channel)
            .ok()
            .and_then(|c| subscribed.get(c))
            .and_then(|(namespace, topic)| Some((namespace.strip_prefix(REALTIME_MARK)?, topic)))
        {
            let sink = self
                .realtime
                .read()
                .expect("cluster lock")
                .get(scope)
                .cloned();
            if let Some(sink) = sink.and_then(|s| s.upgrade()) {
                self.received.fetch_add(1, Ordering::Relaxed);
                sink.receive(topic, Bytes::from(payload));
            }
            return;
        }
        if payload.len() <= HEADER_BYTES || payload[0] != TAG {
            return;
        }
        let node = u64::from_be_bytes(payload[1..HEADER_BYTES].try_into().expect("8 bytes"));
        if node == self.node {
            // Our own publish, already delivered here.
            return;
        }
        let Some((namespace, topic)) = std::str::from_utf8(&channel)
            .ok()
            .and_then(|c| subscribed.get(c))
        else {
            return;
        };
        let frames = Bytes::from(payload).slice(HEADER_BYTES..);
        if !whole_server_frames(&frames) {
            warn!(channel = %String::from_utf8_lossy(&channel), "cluster: dropped a message that is not whole WebSocket frames");
            return;
        }
        let topics = self
            .namespaces
            .read()
            .expect("cluster lock")
            .get(namespace)
            .and_then(Weak::upgrade);
        if let Some(topics) = topics {
            self.received.fetch_add(1, Ordering::Relaxed);
            topics.deliver_remote(topic, &frames);
        }
    }
}

/// The Redis channel of a namespace's topic: `weir:<namespace>:<topic>`,
/// with `%`, `:`, `{` and `}` percent-encoded so names cannot run into each
/// other and no `{…}` hash tag pins every topic of a route (`/topic/{topic}`)
/// to one cluster slot.
pub fn channel(namespace: &str, topic: &str) -> String {
    let mut out = String::with_capacity(6 + namespace.len() + topic.len());
    out.push_str("weir:");
    escape_into(&mut out, namespace);
    out.push(':');
    escape_into(&mut out, topic);
    out
}

/// The Redis channel of a real-time channel: `weir:rt:{<channel>}`, the
/// channel (escaped as in [`channel`]) as the hash tag, so in a Redis
/// Cluster the channel's keys (`realtime::redis`) and its messages live on
/// one shard and a script can write both.
pub fn realtime_channel(channel: &str) -> String {
    let mut out = String::with_capacity(10 + channel.len());
    out.push_str("weir:rt:{");
    escape_into(&mut out, channel);
    out.push('}');
    out
}

fn escape_into(out: &mut String, name: &str) {
    for c in name.chars() {
        match c {
            '%' => out.push_str("%25"),
            ':' => out.push_str("%3A"),
            '{' => out.push_str("%7B"),
            '}' => out.push_str("%7D"),
            c => out.push(c),
        }
    }
}

/// This process's id among the nodes: random, so restarts get a new one.
fn node_id() -> u64 {
    let seed = (std::process::id(), std::time::SystemTime::now());
    RandomState::new().hash_one(seed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names cannot collide, and no topic name makes a hash tag.
    #[test]
    fn channels_are_unambiguous_and_untagged() {
        assert_eq!(
            channel("/topic/{topic}", "a:b"),
            "weir:/topic/%7Btopic%7D:a%3Ab"
        );
        assert_ne!(channel("a:b", "c"), channel("a", "b:c"));
        assert_ne!(channel("a%3Ab", "c"), channel("a:b", "c"));
        assert!(!channel("/r/{x}", "{room}").contains(['{', '}']));
    }
}
