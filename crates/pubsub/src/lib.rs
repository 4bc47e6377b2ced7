//! Topics: who is subscribed to what, and delivery of a published message
//! to every subscriber, on every worker and (through a [`Broker`]) every
//! node. Each route has a namespace ([`Topics`]) of its own unless routes
//! name a shared one (`topics = "name"`, see `routes`): a client or guest
//! cannot publish into another route's sockets by using the same topic name.
//!
//! A published message is framed once (`ws::encode`) into one shared
//! buffer; every subscriber's queue holds that buffer, not a copy.
//! Subscribers that negotiated permessage-deflate get it compressed: once
//! per publish and form for those without context takeover, shared the
//! same way, and with its own compressor for each of the others
//! ([`compressed`]). A topic
//! keeps one subscriber list per worker, and each worker writes its own
//! subscribers ([`fanout`]): publishing takes no lock that all workers
//! share, only a read lock on one of the namespace's shards to find the
//! topic (native pubsub connections keep their topic and skip even that),
//! and each worker's mailbox lock to post the delivery.
//!
//! A subscriber whose queue cannot take a message within its budget is
//! closed with 1008 or skipped and counted, per route (`slow_subscriber`):
//! a fan-out never buffers without a bound.

pub mod backoff;
pub mod broker;
pub mod cluster;
pub mod compressed;
pub mod fanout;

pub use broker::{Broker, LocalBroker};
pub use fanout::Fanout;

use compressed::Forms;

use bytes::Bytes;
use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::io::IoSlice;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use weir_config::SlowSubscriber;
use weir_reactor::outbound::Outbound;
use weir_reactor::registry::{worker_of, ConnId};
use weir_reactor::stats::DeliveryStats;
use weir_ws::close;

/// Shards of a namespace's topic map: subscribes and unsubscribes on
/// different topics rarely wait for each other.
const SHARDS: usize = 16;

/// The reason a slow subscriber's 1008 carries.
pub(crate) const TOO_SLOW: &str = "subscriber too slow";

/// One connection's subscription.
#[derive(Clone)]
pub struct Subscriber {
    pub conn: ConnId,
    pub outbound: Arc<Outbound>,
    pub slow: SlowSubscriber,
    /// Positioned publishes (`Topics::publish_positioned`) at or below this
    /// position are not for this subscriber: it joined with everything up
    /// to here already in hand (a real-time subscribe that recovered from
    /// history). 0 for every other subscriber.
    pub since: u64,
    /// It follows the topic's positions (a real-time subscriber that knows
    /// offsets), so a break in them must end its subscription.
    pub positioned: bool,
}

impl Subscriber {
    /// Delivery `d` is not for this subscriber: its own publish, or a
    /// position it already has.
    #[inline]
    fn skips(&self, d: &fanout::Delivery) -> bool {
        Some(self.conn) == d.exclude || (d.position != 0 && d.position <= self.since)
    }
}

/// One topic: its subscribers, one list per worker.
pub struct Topic {
    name: Arc<str>,
    workers: Box<[WorkerSubscribers]>,
    /// The namespace's delivery counters.
    delivered: Arc<DeliveryStats>,
    /// Subscribers that share compressed forms of a publish
    /// (permessage-deflate without context takeover): while there are
    /// any, a publish carries a place for those forms.
    sharing: AtomicUsize,
}

/// A topic's subscribers on one worker, written by that worker.
#[derive(Default)]
struct WorkerSubscribers {
    /// Read without the lock, so a publish skips workers with nobody there.
    count: AtomicUsize,
    list: Mutex<Vec<Subscriber>>,
}

impl Topic {
    fn new(name: &str, workers: usize, delivered: Arc<DeliveryStats>) -> Topic {
        Topic {
            name: name.into(),
            workers: (0..workers).map(|_| WorkerSubscribers::default()).collect(),
            delivered,
            sharing: AtomicUsize::new(0),
        }
    }

    /// Some subscriber takes shared compressed forms of publishes.
    pub(crate) fn shares_compressed(&self) -> bool {
        self.sharing.load(Ordering::Relaxed) > 0
    }

    /// Counts `messages` deliveries of `bytes` on `worker` (its thread).
    fn count(&self, worker: usize, messages: u64, bytes: u64) {
        if messages != 0 {
            let c = self.delivered.worker(worker);
            c.messages.add_owned(messages);
            c.bytes.add_owned(bytes);
        }
    }

    pub fn name(&self) -> &Arc<str> {
        &self.name
    }

    /// Workers that have subscribers now.
    fn has_subscribers_on(&self, worker: usize) -> bool {
        self.workers[worker].count.load(Ordering::Acquire) > 0
    }

    fn total(&self) -> usize {
        self.workers
            .iter()
            .map(|w| w.count.load(Ordering::Acquire))
            .sum()
    }

    /// Writes a delivery to `worker`'s subscribers but the one it
    /// excludes.
    fn deliver_on(&self, worker: usize, d: &fanout::Delivery, stats: &fanout::WorkerStats) {
        let mut forms = Forms::new(std::slice::from_ref(d));
        let list = self.workers[worker].list.lock().expect("topic lock");
        let mut reached = 0;
        for sub in list.iter() {
            if !sub.skips(d) {
                reached += u64::from(offer(sub, &d.frames, 0, &mut forms, stats));
            }
        }
        drop(list);
        self.count(worker, reached, reached * d.frames.len() as u64);
    }

    /// Writes a run of deliveries to this topic to `worker`'s subscribers,
    /// each subscriber's share (all but its own publishes) in one write.
    fn deliver_all_on(
        &self,
        worker: usize,
        group: &[fanout::Delivery],
        stats: &fanout::WorkerStats,
    ) {
        let all: Vec<Bytes> = group.iter().map(|d| d.frames.clone()).collect();
        let all_slices: Vec<IoSlice<'_>> = all.iter().map(|b| IoSlice::new(b)).collect();
        let every: Vec<usize> = (0..group.len()).collect();
        let mut forms = Forms::new(group);
        let list = self.workers[worker].list.lock().expect("topic lock");
        let (mut reached, mut bytes) = (0, 0);
        for sub in list.iter() {
            let (m, b) = if group.iter().any(|d| sub.skips(d)) {
                let mine: Vec<usize> = every
                    .iter()
                    .copied()
                    .filter(|&i| !sub.skips(&group[i]))
                    .collect();
                offer_all(sub, &all, &mine, None, &mut forms, stats)
            } else {
                offer_all(sub, &all, &every, Some(&all_slices), &mut forms, stats)
            };
            (reached, bytes) = (reached + m, bytes + b);
        }
        drop(list);
        self.count(worker, reached, bytes);
    }
}

/// [`offer`] for several deliveries at once (`which` of the run `plain`;
/// `plain_slices`: all of them, ready for one `sendmsg`); (deliveries,
/// bytes) handed over.
fn offer_all(
    sub: &Subscriber,
    plain: &[Bytes],
    which: &[usize],
    plain_slices: Option<&[IoSlice<'_>]>,
    forms: &mut Forms<'_>,
    stats: &fanout::WorkerStats,
) -> (u64, u64) {
    if which.is_empty() {
        return (0, 0);
    }
    let total = which.iter().map(|&i| plain[i].len()).sum();
    let out = &sub.outbound;
    if out.fits_strictly(total) {
        let form = out.deflate().map(|d| d.shared_form());
        let parts: Vec<Bytes> = match form {
            Some(Some(form)) => which.iter().map(|&i| forms.part(form, i).clone()).collect(),
            _ => which.iter().map(|&i| plain[i].clone()).collect(),
        };
        match (form, plain_slices) {
            // Context takeover: compressed with its own compressor.
            (Some(None), _) => {
                out.send_frames_all(&parts);
            }
            (None, Some(slices)) => {
                out.send_shared_all(&parts, slices);
            }
            _ => {
                let slices: Vec<IoSlice<'_>> = parts.iter().map(|b| IoSlice::new(b)).collect();
                out.send_shared_all(&parts, &slices);
            }
        }
        return (which.len() as u64, total as u64);
    }
    // Not all of them fit: one by one, so as many as fit are kept.
    let (mut reached, mut bytes) = (0, 0);
    for &i in which {
        if offer(sub, &plain[i], i, forms, stats) {
            (reached, bytes) = (reached + 1, bytes + plain[i].len() as u64);
        }
    }
    (reached, bytes)
}

/// Hands `frames` (delivery `index` of the run `forms` knows) to one
/// subscriber (true): as they are, in its shared compressed form, or
/// compressed with its own compressor. Applies its route's policy when
/// they do not fit in its budget.
#[inline]
fn offer(
    sub: &Subscriber,
    frames: &Bytes,
    index: usize,
    forms: &mut Forms<'_>,
    stats: &fanout::WorkerStats,
) -> bool {
    let out = &sub.outbound;
    if out.fits(frames.len()) {
        match out.deflate().map(|d| d.shared_form()) {
            None => out.send_shared(frames),
            Some(Some(form)) => out.send_shared(forms.part(form, index)),
            Some(None) => out.send_frames(frames),
        };
        return true;
    }
    match sub.slow {
        SlowSubscriber::Close => {
            if out.close(close::POLICY_VIOLATION, TOO_SLOW) {
                stats.count_closed();
            }
        }
        SlowSubscriber::Drop => stats.count_dropped(),
    }
    false
}

/// The subscriber takes shared compressed forms of publishes.
fn shares_compressed(sub: &Subscriber) -> bool {
    sub.outbound
        .deflate()
        .is_some_and(|d| d.shared_form().is_some())
}

/// One shard of a namespace: topic name → topic.
type Shard = RwLock<HashMap<Arc<str>, Arc<Topic>>>;

/// One topic namespace, shared by all workers.
pub struct Topics {
    /// The namespace's name, the same on every node (the route's path, or
    /// the shared `topics` name): what the broker keys channels by.
    name: Arc<str>,
    shards: Box<[Shard]>,
    hasher: RandomState,
    fanout: Arc<Fanout>,
    broker: Arc<dyn Broker>,
    /// Messages handed to this namespace's subscribers, by worker.
    delivered: Arc<DeliveryStats>,
}

impl Topics {
    /// Resolves once other nodes' publishes to `topic` (which has a local
    /// subscriber) reach this node (false: not within `within`).
    pub async fn wait_watched(&self, topic: &str, within: std::time::Duration) -> bool {
        self.broker.wait_watched(&self.name, topic, within).await
    }

    pub fn new(name: &str, fanout: Arc<Fanout>, broker: Arc<dyn Broker>) -> Arc<Topics> {
        let topics = Arc::new(Topics {
            name: name.into(),
            shards: (0..SHARDS).map(|_| RwLock::default()).collect(),
            hasher: RandomState::new(),
            delivered: Arc::new(DeliveryStats::new(fanout.workers())),
            fanout,
            broker: broker.clone(),
        });
        broker.register(&topics);
        topics
    }

    pub fn name(&self) -> &Arc<str> {
        &self.name
    }

    /// (messages, bytes) handed to subscribers of this namespace so far,
    /// one per subscriber reached.
    pub fn delivered(&self) -> (u64, u64) {
        self.delivered.sum()
    }

    fn shard(&self, topic: &str) -> &Shard {
        &self.shards[self.hasher.hash_one(topic) as usize % SHARDS]
    }

    /// Adds a subscriber (on the worker its id names) and returns the topic,
    /// which the first local subscriber creates (and the broker watches).
    pub fn join(&self, topic: &str, sub: Subscriber) -> Arc<Topic> {
        let worker = worker_of(sub.conn) % self.fanout.workers();
        let mut shard = self.shard(topic).write().expect("topics lock");
        let entry = match shard.get(topic) {
            Some(entry) => entry.clone(),
            None => {
                let entry = Arc::new(Topic::new(
                    topic,
                    self.fanout.workers(),
                    self.delivered.clone(),
                ));
                shard.insert(entry.name.clone(), entry.clone());
                self.broker.watch(&self.name, topic);
                entry
            }
        };
        let subs = &entry.workers[worker];
        let mut list = subs.list.lock().expect("topic lock");
        if !list.iter().any(|s| s.conn == sub.conn) {
            if shares_compressed(&sub) {
                entry.sharing.fetch_add(1, Ordering::Relaxed);
            }
            list.push(sub);
            subs.count.store(list.len(), Ordering::Release);
        }
        drop(list);
        entry
    }

    /// A guest's subscription (slow subscribers are closed with 1008).
    pub fn subscribe(&self, topic: &str, conn: ConnId, outbound: Arc<Outbound>) {
        self.join(
            topic,
            Subscriber {
                conn,
                outbound,
                slow: SlowSubscriber::Close,
                since: 0,
                positioned: false,
            },
        );
    }

    /// Removes a subscriber; the last one's leaving removes the topic (and
    /// the broker stops watching it).
    pub fn unsubscribe(&self, topic: &str, conn: ConnId) {
        let worker = worker_of(conn) % self.fanout.workers();
        let mut shard = self.shard(topic).write().expect("topics lock");
        let Some(entry) = shard.get(topic) else {
            return;
        };
        let subs = &entry.workers[worker];
        let mut list = subs.list.lock().expect("topic lock");
        if let Some(at) = list.iter().position(|s| s.conn == conn) {
            if shares_compressed(&list.remove(at)) {
                entry.sharing.fetch_sub(1, Ordering::Relaxed);
            }
        }
        subs.count.store(list.len(), Ordering::Release);
        drop(list);
        if entry.total() == 0 {
            shard.remove(topic);
            self.broker.unwatch(&self.name, topic);
        }
    }

    /// Publishes `frames` (whole frames, framed once) to every subscriber
    /// of `topic` except `exclude`, here and on other nodes.
    pub fn publish(&self, topic: &str, frames: &Bytes, exclude: Option<ConnId>) {
        let entry = self.lookup(topic);
        match &entry {
            Some(entry) => self.broker.publish(&self.name, &entry.name, frames),
            None => self.broker.publish(&self.name, &Arc::from(topic), frames),
        }
        if let Some(entry) = entry {
            self.fanout.deliver(&entry, frames, exclude, 0);
        }
    }

    /// Publishes `frames` at `position` (a real-time channel's offset) to
    /// the local subscribers of `topic` that joined below it (see
    /// [`Subscriber::since`]). Positions of one topic must be handed over
    /// in increasing order (the real-time core holds the channel's lock).
    pub fn publish_positioned(&self, topic: &str, frames: &Bytes, position: u64) {
        if let Some(entry) = self.lookup(topic) {
            self.fanout.deliver(&entry, frames, None, position);
        }
    }

    /// [`publish`](Self::publish) to a topic the caller holds (a native
    /// pubsub connection keeps the one it subscribed to).
    #[inline]
    pub fn publish_to(&self, topic: &Arc<Topic>, frames: &Bytes, exclude: Option<ConnId>) {
        self.broker.publish(&self.name, &topic.name, frames);
        self.fanout.deliver(topic, frames, exclude, 0);
    }

    /// Frames another node published: delivered to the local subscribers
    /// only (the broker is where they came from).
    pub(crate) fn deliver_remote(&self, topic: &str, frames: &Bytes) {
        if let Some(entry) = self.lookup(topic) {
            self.fanout.deliver(&entry, frames, None, 0);
        }
    }

    /// Closes every local subscriber of `topic` that joined at a position
    /// (a real-time subscriber whose channel lost its continuity: it
    /// reconnects and recovers, or is told it cannot).
    pub fn close_positioned(&self, topic: &str, code: u16, reason: &str) {
        let Some(entry) = self.lookup(topic) else {
            return;
        };
        for worker in entry.workers.iter() {
            for sub in worker.list.lock().expect("topic lock").iter() {
                if sub.positioned {
                    sub.outbound.close(code, reason);
                }
            }
        }
    }

    /// The workers' delivery queues are over their budget: publishers
    /// should stop reading until they drain.
    pub fn congested(&self) -> bool {
        self.fanout.congested()
    }

    pub fn fanout(&self) -> &Arc<Fanout> {
        &self.fanout
    }

    fn lookup(&self, topic: &str) -> Option<Arc<Topic>> {
        let shard = self.shard(topic).read().expect("topics lock");
        shard.get(topic).cloned()
    }

    /// Topics with local subscribers.
    #[cfg(test)]
    fn topic_count(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.read().expect("topics lock").len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_reactor::outbound::OutMsg;
    use weir_reactor::registry::conn_id;
    use weir_ws::deflate::{negotiate, Compression, Context};
    use weir_ws::OpCode;

    fn namespace(workers: usize) -> Arc<Topics> {
        Topics::new("/t", Arc::new(Fanout::new(workers)), Arc::new(LocalBroker))
    }

    fn sub(conn: ConnId, budget: usize, slow: SlowSubscriber) -> Subscriber {
        Subscriber {
            conn,
            outbound: Arc::new(Outbound::new(budget)),
            slow,
            since: 0,
            positioned: false,
        }
    }

    fn frames_of(out: &Outbound) -> Vec<Bytes> {
        let mut got = Vec::new();
        while let Some(msg) = out.try_recv() {
            if let OutMsg::Frames(f) = msg {
                got.push(f);
            }
        }
        got
    }

    /// Every subscriber's queue holds the publisher's buffer itself.
    #[test]
    fn subscribers_share_one_buffer() {
        let topics = namespace(1);
        let subs: Vec<_> = (1..=3)
            .map(|seq| sub(conn_id(0, seq), 1 << 20, SlowSubscriber::Close))
            .collect();
        for s in &subs {
            topics.join("room", s.clone());
        }
        let frames = Bytes::from_static(b"\x81\x02hi");
        topics.publish("room", &frames, Some(subs[0].conn));
        topics.fanout().deliver_waiting(0);
        assert!(
            frames_of(&subs[0].outbound).is_empty(),
            "the publisher was excluded"
        );
        for s in &subs[1..] {
            let got = frames_of(&s.outbound);
            assert_eq!(got.len(), 1);
            assert_eq!(got[0].as_ptr(), frames.as_ptr(), "a copy was queued");
        }
    }

    #[test]
    fn the_last_unsubscribe_removes_the_topic() {
        let topics = namespace(2);
        let (a, b) = (conn_id(0, 1), conn_id(1, 1));
        topics.join("x", sub(a, 64, SlowSubscriber::Close));
        topics.join("x", sub(b, 64, SlowSubscriber::Close));
        topics.unsubscribe("x", a);
        assert_eq!(topics.topic_count(), 1);
        topics.unsubscribe("x", b);
        assert_eq!(topics.topic_count(), 0);
    }

    /// slow_subscriber: "drop" skips what does not fit and counts it;
    /// "close" queues one 1008 and counts the subscriber.
    #[test]
    fn slow_subscribers_are_dropped_from_or_closed() {
        let topics = namespace(1);
        let drop_sub = sub(conn_id(0, 1), 10, SlowSubscriber::Drop);
        let close_sub = sub(conn_id(0, 2), 10, SlowSubscriber::Close);
        topics.join("x", drop_sub.clone());
        topics.join("x", close_sub.clone());
        let frames = Bytes::from_static(b"\x82\x06abcdef");
        for _ in 0..3 {
            topics.publish("x", &frames, None);
        }
        topics.fanout().deliver_waiting(0);
        let stats = topics.fanout().stats();
        assert_eq!(stats.dropped, 2);
        assert_eq!(stats.closed, 1);
        assert_eq!(frames_of(&drop_sub.outbound).len(), 1);
        let mut closes = 0;
        let mut frames_got = 0;
        while let Some(msg) = close_sub.outbound.try_recv() {
            match msg {
                OutMsg::Close(code, _) => {
                    assert_eq!(code, close::POLICY_VIOLATION);
                    closes += 1
                }
                OutMsg::Frames(_) => frames_got += 1,
                OutMsg::Drain => {}
            }
        }
        assert_eq!((frames_got, closes), (1, 1));
    }

    /// Isolation: two namespaces with the same topic name never meet.
    #[test]
    fn namespaces_do_not_share_topics() {
        let fanout = Arc::new(Fanout::new(1));
        let a = Topics::new("/a", fanout.clone(), Arc::new(LocalBroker));
        let b = Topics::new("/b", fanout, Arc::new(LocalBroker));
        let in_b = sub(conn_id(0, 1), 64, SlowSubscriber::Close);
        b.join("room", in_b.clone());
        a.publish("room", &Bytes::from_static(b"\x81\x01x"), None);
        a.fanout().deliver_waiting(0);
        assert!(frames_of(&in_b.outbound).is_empty());
    }

    /// Payload lengths of the (short) server frames in `bytes`.
    fn frame_lens(mut bytes: &[u8]) -> Vec<usize> {
        let mut lens = Vec::new();
        while let [_, b1, rest @ ..] = bytes {
            let (len, at) = match b1 & 0x7F {
                126 => (usize::from(u16::from_be_bytes([rest[0], rest[1]])), 4),
                n => (usize::from(n), 2),
            };
            lens.push(len);
            bytes = &bytes[at + len..];
        }
        lens
    }

    /// A subscriber whose queue takes compressed publishes (RSV1 set).
    fn compressing(conn: ConnId, offer: &'static str, context: Context) -> Subscriber {
        let mut headers = http::HeaderMap::new();
        headers.insert(
            http::header::SEC_WEBSOCKET_EXTENSIONS,
            http::HeaderValue::from_static(offer),
        );
        let route = Compression {
            enabled: true,
            min_bytes: 0,
            context,
            level: 1,
        };
        let n = negotiate(&headers, &route).unwrap();
        Subscriber {
            conn,
            outbound: Arc::new(Outbound::new(1 << 20).with_deflate(Some(&n))),
            slow: SlowSubscriber::Close,
            since: 0,
            positioned: false,
        }
    }

    /// Issue 16: subscribers without context takeover that negotiated the
    /// same parameters share one compressed buffer per publish (made once,
    /// on whichever worker needs it first, runs of deliveries included);
    /// another window gets its own; a takeover subscriber compresses with
    /// its own context; a plain one gets the publisher's buffer.
    #[test]
    fn compressed_forms_are_made_once_and_shared() {
        let topics = namespace(2);
        let shared: Vec<_> = [(0, 1), (1, 1), (0, 2)]
            .into_iter()
            .map(|(w, seq)| compressing(conn_id(w, seq), "permessage-deflate", Context::None))
            .collect();
        let narrow = compressing(
            conn_id(1, 2),
            "permessage-deflate; server_max_window_bits=10",
            Context::None,
        );
        let own = compressing(conn_id(0, 3), "permessage-deflate", Context::Takeover);
        let plain = sub(conn_id(1, 3), 1 << 20, SlowSubscriber::Close);
        for s in shared.iter().chain([&narrow, &own, &plain]) {
            topics.join("room", s.clone());
        }
        let text = "{\"seq\":1,\"px\":100}".repeat(30);
        let frames = Bytes::from(weir_ws::encode::frame(OpCode::Text, text.as_bytes()));
        for _ in 0..2 {
            topics.publish("room", &frames, None);
        }
        topics.fanout().deliver_waiting(0);
        topics.fanout().deliver_waiting(1);
        let got: Vec<Vec<Bytes>> = shared.iter().map(|s| frames_of(&s.outbound)).collect();
        for g in &got {
            assert_eq!(g.len(), 2);
            assert_eq!(g[0][0] & 0x40, 0x40, "RSV1");
            assert!(g[0].len() < frames.len() / 4);
        }
        for ((a, b), c) in got[0].iter().zip(&got[1]).zip(&got[2]) {
            assert_eq!(a.as_ptr(), b.as_ptr(), "across workers");
            assert_eq!(a.as_ptr(), c.as_ptr(), "on one worker");
        }
        let narrow_got = frames_of(&narrow.outbound);
        assert_eq!(narrow_got.len(), 2);
        assert_ne!(narrow_got[0].as_ptr(), got[0][0].as_ptr(), "another form");
        // The takeover subscriber's second publish refers to its first.
        let own_got = frame_lens(&frames_of(&own.outbound).concat());
        assert_eq!(own_got.len(), 2);
        assert!(own_got[1] < own_got[0], "{own_got:?}");
        assert!(own.outbound.deflate().unwrap().holds_state());
        let plain_got = frames_of(&plain.outbound);
        assert_eq!(plain_got.len(), 2);
        assert_eq!(plain_got[0].as_ptr(), frames.as_ptr());
    }

    /// Deliveries to one topic waiting together reach each subscriber in
    /// order, all but its own publishes.
    #[test]
    fn waiting_deliveries_reach_each_subscriber_in_order() {
        let topics = namespace(1);
        let (a, b) = (
            sub(conn_id(0, 1), 1 << 20, SlowSubscriber::Close),
            sub(conn_id(0, 2), 1 << 20, SlowSubscriber::Close),
        );
        topics.join("x", a.clone());
        topics.join("x", b.clone());
        let frames: Vec<Bytes> = (0..4u8).map(|i| Bytes::from(vec![0x82, 1, i])).collect();
        for (i, f) in frames.iter().enumerate() {
            let publisher = if i % 2 == 0 { a.conn } else { b.conn };
            topics.publish("x", f, Some(publisher));
        }
        topics.fanout().deliver_waiting(0);
        assert_eq!(
            frames_of(&a.outbound),
            vec![frames[1].clone(), frames[3].clone()]
        );
        assert_eq!(
            frames_of(&b.outbound),
            vec![frames[0].clone(), frames[2].clone()]
        );
    }
}
