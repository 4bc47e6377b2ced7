//! The real-time core: channels with positions, history and presence, shared
//! by every wire protocol that serves them (Centrifugo's client protocol and
//! server API, native pubsub routes that opt in). An adapter parses and
//! frames; delivery, history and presence are decided here.
//!
//! Each channel has one lock. A publish takes it to assign the channel's
//! next offset, keep the publication in history and hand it, framed once per
//! adapter ([`Framer`]), to the adapter's topic namespace (`pubsub`'s
//! per-worker fan-out) as a *positioned* delivery. A subscribe takes the same
//! lock to read what the client missed, queue its reply, and join the topic
//! as a subscriber that skips positions up to the one it was answered at:
//! so a subscriber gets every publication exactly once, in offset order,
//! whether it came in the reply or live.
//!
//! Storage is in memory on one node ([`history::Stream`],
//! [`presence::Presence`]). With `[cluster]`, Redis holds positions, history
//! and presence ([`redis::RedisStore`]) and carries every publication, this
//! node's own included, to the nodes that watch its channel; a node's
//! stream is then its copy of the channel's recent publications, kept as
//! they arrive, which joins a subscribe's Redis read to live delivery
//! without a gap or a repeat (see [`Realtime::subscribe`]). A node that
//! sees a channel's positions jump (messages lost between Redis and it, or
//! a new epoch) closes its positioned subscribers of the channel
//! ([`Framer::discontinuity`]): they reconnect and recover, or are told
//! they cannot.
//!
//! Calls that may wait on Redis are `async`; on one node they finish at
//! their first poll, so adapters run them inline ([`Realtime::runtime`]).

pub mod clients;
pub mod history;
pub use weir_config::namespace;
pub mod presence;
pub mod redis;
pub mod verdict;

pub use clients::UserCommand;
pub use history::{HistoryQuery, Recovery, StreamPosition};
pub use namespace::{NamespaceOptions, Namespaces};
pub use presence::PresenceStats;

use bytes::Bytes;
use history::{HistoryError, Stream};
use namespace::ChannelNameError;
use presence::{Presence, PresenceError};
use redis::{Message, ReadFrom, RedisStore};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};
use weir_pubsub::cluster::{RealtimeSink, RedisBroker};
use weir_pubsub::{Subscriber, Topics};
use weir_reactor::outbound::Outbound;
use weir_reactor::registry::ConnId;

/// Most publications one history read returns (Centrifugo's
/// `history_max_publication_limit`): a client's or a guest's.
pub const HISTORY_MAX_PUBLICATION_LIMIT: usize = 300;

/// How long a publish's `idempotency_key` answers a repeat with the first
/// publish's position instead of publishing again (Centrifugo's default).
pub const IDEMPOTENCY_TTL: Duration = Duration::from_secs(300);
/// Idempotency keys remembered per channel: a bound in memory whatever the
/// publish rate.
const IDEMPOTENCY_KEYS_PER_CHANNEL: usize = 1024;
/// Subscribes and publishes between two sweeps of idle channels.
const SWEEP_EVERY_OPS: u64 = 4096;

/// The channel every node watches with `[cluster]` for commands to users'
/// connections: longer than any channel name may be, so no client or API
/// call can publish into it.
fn control_channel() -> &'static str {
    static NAME: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!(
            "\0weir-control{}",
            "-".repeat(namespace::MAX_CHANNEL_NAME_BYTES)
        )
    });
    &NAME
}

/// A [`UserCommand`] on its way to every node.
#[derive(serde::Serialize, serde::Deserialize)]
struct Control {
    user: String,
    client: Option<String>,
    #[serde(flatten)]
    command: UserCommand,
}

/// One publication: what history keeps and adapters frame.
#[derive(Debug, Clone)]
pub struct Publication {
    /// The channel's offset (0 in a channel without history).
    pub offset: u64,
    /// The payload: JSON text (Centrifugo's JSON protocol carries it as is).
    pub data: Bytes,
    /// The publishing client, when a client published.
    pub info: Option<Arc<ClientInfo>>,
    /// When it was published (for `history_ttl`).
    pub time: Instant,
}

/// A subscriber as presence and join/leave name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientInfo {
    /// The connection's client id.
    pub client: String,
    /// The token's `sub` ("" for anonymous).
    pub user: String,
    /// The token's `info` claim, JSON text.
    pub conn_info: Option<Bytes>,
    /// The subscription token's `info` claim, JSON text.
    pub chan_info: Option<Bytes>,
}

/// Frames the core's events for one adapter's clients, once per event.
pub trait Framer: Send + Sync {
    /// Whole server frames carrying `publication` of `channel`.
    fn publication(&self, channel: &str, publication: &Publication) -> Bytes;
    /// A join (true) or leave push, if the adapter's clients get them.
    fn join_leave(&self, channel: &str, info: &ClientInfo, join: bool) -> Option<Bytes>;
    /// The close (code, reason) for a positioned subscriber whose
    /// channel's positions broke on this node: its client reconnects and
    /// recovers from where it was.
    fn discontinuity(&self) -> Option<(u16, &'static str)> {
        None
    }
}

/// Why the core refuses a request; adapters map these to their codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RealtimeError {
    #[error("{0}")]
    ChannelName(#[from] ChannelNameError),
    #[error("{0}")]
    Presence(#[from] PresenceError),
    #[error("{0}")]
    History(#[from] HistoryError),
    /// Presence or history asked of a namespace that keeps none.
    #[error("not available")]
    NotAvailable,
    /// The channel's namespace holds `max_channels` channels already
    /// (Centrifugo: 106 limit exceeded).
    #[error("limit exceeded")]
    TooManyChannels,
    /// Redis did not answer (with `[cluster]`): nothing was done.
    #[error("internal server error")]
    Unavailable,
}

/// A subscription's state, shared by its connection and the core: with
/// `[cluster]` a subscribe finishes after Redis answers, and the client may
/// leave meanwhile.
#[derive(Debug, Default)]
pub struct Subscription(AtomicU8);

const PENDING: u8 = 0;
const ACTIVE: u8 = 1;
const FAILED: u8 = 2;
const CANCELLED: u8 = 3;

impl Subscription {
    /// The subscribe was refused: the channel may be subscribed again.
    pub fn failed(&self) -> bool {
        self.0.load(Ordering::Acquire) == FAILED
    }

    fn activate(&self) -> bool {
        self.0
            .compare_exchange(PENDING, ACTIVE, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Refused (by the core, or by a namespace's guest before it).
    pub fn fail(&self) {
        let _ = self
            .0
            .compare_exchange(PENDING, FAILED, Ordering::AcqRel, Ordering::Acquire);
    }

    /// Ends it; true if it was active (the caller undoes the join).
    fn cancel(&self) -> bool {
        self.0.swap(CANCELLED, Ordering::AcqRel) == ACTIVE
    }
}

/// A subscribe request, owned (it may outlive the command that made it).
pub struct Subscribe {
    pub channel: String,
    pub topics: Arc<Topics>,
    pub conn: ConnId,
    pub outbound: Arc<Outbound>,
    pub member: Arc<ClientInfo>,
    pub recoverable: bool,
    pub recover: Option<StreamPosition>,
    pub subscription: Arc<Subscription>,
}

/// Frames a subscribe's reply from what it found.
pub type Reply = Box<dyn FnOnce(&Subscribed) -> Bytes + Send>;

/// The Redis side, with `[cluster]`.
struct Cluster {
    store: Arc<RedisStore>,
    broker: Arc<RedisBroker>,
}

/// A client joining a channel through an adapter.
pub struct Join<'a> {
    pub channel: &'a str,
    /// The adapter's topic namespace its clients are subscribed in.
    pub topics: &'a Arc<Topics>,
    pub conn: ConnId,
    pub outbound: &'a Arc<Outbound>,
    pub member: Arc<ClientInfo>,
    /// The client wants its position kept (it asked, or the namespace forces it).
    pub recoverable: bool,
    /// Where the client was, if it asks to recover.
    pub recover: Option<StreamPosition>,
}

/// What a subscribe found, for the adapter's reply.
pub struct Subscribed {
    /// Publications carry offsets in this channel.
    pub positioned: bool,
    /// The client may recover from its position later.
    pub recoverable: bool,
    /// The result of the recovery the client asked for.
    pub recovery: Option<Recovery>,
    /// The channel's position now.
    pub top: StreamPosition,
}

/// One channel's state.
#[derive(Default)]
struct ChannelState {
    stream: Stream,
    /// With `[cluster]`: `stream` follows the channel's positions in Redis
    /// (it is watched, and a subscribe or a message gave it a position).
    seeded: bool,
    /// This node's members (with `[cluster]`, the ones it refreshes).
    presence: Presence,
    /// Subscribers in every adapter: a channel with any is never swept.
    subscribers: usize,
    /// Recent publishes' idempotency keys and their positions.
    idempotent: VecDeque<(String, u64, Instant)>,
}

impl ChannelState {
    /// With `[cluster]`: the node's copy of the stream no longer follows
    /// Redis (nobody here needs it, or what it missed is unknown).
    fn forget_copy(&mut self) {
        self.seeded = false;
        self.stream.clear();
    }
}

/// The channels this node holds, and how many of each namespace (bounded
/// by its `max_channels`).
#[derive(Default)]
struct Channels {
    states: HashMap<Arc<str>, Arc<Mutex<ChannelState>>>,
    held: HashMap<Box<str>, usize>,
}

impl Channels {
    fn full(&self, channel: &str, max: usize) -> bool {
        self.held
            .get(Namespaces::name_of(channel))
            .is_some_and(|&n| n >= max)
    }

    fn insert(&mut self, channel: &str) -> Arc<Mutex<ChannelState>> {
        let state = Arc::<Mutex<ChannelState>>::default();
        self.states.insert(channel.into(), state.clone());
        *self
            .held
            .entry(Namespaces::name_of(channel).into())
            .or_default() += 1;
        state
    }

    fn retain(&mut self, mut keep: impl FnMut(&str, &Arc<Mutex<ChannelState>>) -> bool) {
        let held = &mut self.held;
        self.states.retain(|name, state| {
            let kept = keep(name, state);
            if !kept {
                if let Some(n) = held.get_mut(Namespaces::name_of(name)) {
                    *n -= 1;
                }
            }
            kept
        });
    }
}

/// At most one sweep per this interval is made for a publish or subscribe
/// refused because its namespace is full (a sweep walks every channel).
const SWEEP_WHEN_FULL_EVERY: Duration = Duration::from_secs(1);

/// An adapter's topic namespace and how it frames events.
struct Adapter {
    topics: Arc<Topics>,
    framer: Arc<dyn Framer>,
}

/// The gateway's channels, shared by every route and the server API.
pub struct Realtime {
    namespaces: Namespaces,
    channels: Mutex<Channels>,
    /// When a full namespace last made a sweep.
    swept_when_full: Mutex<Option<Instant>>,
    adapters: RwLock<Vec<Adapter>>,
    /// Subscribes and publishes so far (sweeps idle channels every
    /// [`SWEEP_EVERY_OPS`]).
    ops: AtomicU64,
    /// Publications accepted, for `info`.
    published: AtomicU64,
    /// Connected clients by user (the server API's `disconnect`, `info`).
    pub clients: clients::Clients,
    cluster: Option<Cluster>,
}

impl Realtime {
    pub fn new(namespaces: Namespaces) -> Arc<Realtime> {
        Arc::new(Realtime::with(namespaces, None))
    }

    fn with(namespaces: Namespaces, cluster: Option<Cluster>) -> Realtime {
        Realtime {
            namespaces,
            channels: Mutex::default(),
            swept_when_full: Mutex::default(),
            adapters: RwLock::default(),
            ops: AtomicU64::new(0),
            published: AtomicU64::new(0),
            clients: clients::Clients::default(),
            cluster,
        }
    }

    /// The core across nodes: `store` holds positions, history and
    /// presence, and `broker`'s link brings each watched channel's messages.
    pub fn clustered(
        namespaces: Namespaces,
        store: Arc<RedisStore>,
        broker: Arc<RedisBroker>,
    ) -> Arc<Realtime> {
        let runtime = store.runtime().clone();
        let realtime = Arc::new(Realtime::with(namespaces, Some(Cluster { store, broker })));
        let sink: Weak<dyn RealtimeSink> = Arc::downgrade(&realtime) as Weak<dyn RealtimeSink>;
        realtime
            .cluster()
            .expect("clustered")
            .broker
            .attach_realtime(sink);
        runtime.spawn(refresh_presence(Arc::downgrade(&realtime)));
        realtime
            .cluster()
            .expect("clustered")
            .broker
            .watch_control(control_channel());
        realtime
    }

    /// Runs `command` on `user`'s connections (only `client`'s, when
    /// given): on this node, or with `[cluster]` on every node, through
    /// Redis (an error when Redis does not take it).
    pub async fn user_command(
        self: Arc<Self>,
        user: String,
        client: Option<String>,
        command: UserCommand,
    ) -> Result<(), RealtimeError> {
        let Some(cluster) = self.cluster() else {
            self.clients.command(&user, client.as_deref(), &command);
            return Ok(());
        };
        let message = Control {
            user,
            client,
            command,
        };
        let payload = serde_json::to_vec(&message).expect("a command serialises");
        cluster.store.send(control_channel(), &payload).await
    }

    fn cluster(&self) -> Option<&Cluster> {
        self.cluster.as_ref()
    }

    /// Where calls that wait on Redis run; None on one node, where every
    /// call finishes at its first poll.
    pub fn runtime(&self) -> Option<&tokio::runtime::Handle> {
        self.cluster().map(|c| c.store.runtime())
    }

    pub fn namespaces(&self) -> &Namespaces {
        &self.namespaces
    }

    /// The options of `channel`'s namespace.
    pub fn options(&self, channel: &str) -> Result<&NamespaceOptions, RealtimeError> {
        Ok(self.namespaces.of(channel)?)
    }

    /// Publications of every channel reach `topics` (topic = channel name),
    /// framed by `framer`; attaching the same namespace again does nothing.
    pub fn attach(&self, topics: &Arc<Topics>, framer: Arc<dyn Framer>) {
        if let Some(cluster) = self.cluster() {
            cluster.broker.realtime_adapter(topics.name());
        }
        let mut adapters = self.adapters.write().expect("adapters lock");
        if !adapters.iter().any(|a| Arc::ptr_eq(&a.topics, topics)) {
            adapters.push(Adapter {
                topics: topics.clone(),
                framer,
            });
        }
    }

    /// `channel`'s state, made if this node holds none, unless its
    /// namespace holds `max` channels already and a sweep frees none.
    fn channel(
        &self,
        channel: &str,
        max: usize,
    ) -> Result<Arc<Mutex<ChannelState>>, RealtimeError> {
        let mut channels = self.channels.lock().expect("channels lock");
        if let Some(state) = channels.states.get(channel) {
            return Ok(state.clone());
        }
        if channels.full(channel, max) {
            drop(channels);
            let now = Instant::now();
            {
                let mut last = self.swept_when_full.lock().expect("sweep lock");
                if last.is_some_and(|at| now.duration_since(at) < SWEEP_WHEN_FULL_EVERY) {
                    return Err(RealtimeError::TooManyChannels);
                }
                *last = Some(now);
            }
            self.sweep(now);
            channels = self.channels.lock().expect("channels lock");
            if let Some(state) = channels.states.get(channel) {
                return Ok(state.clone());
            }
            if channels.full(channel, max) {
                return Err(RealtimeError::TooManyChannels);
            }
        }
        Ok(channels.insert(channel))
    }

    fn existing(&self, channel: &str) -> Option<Arc<Mutex<ChannelState>>> {
        self.channels
            .lock()
            .expect("channels lock")
            .states
            .get(channel)
            .cloned()
    }

    /// Publishes `data` (JSON text) into `channel`: its position (offset 0
    /// and no epoch in a channel without history). A repeated
    /// `idempotency_key` within [`IDEMPOTENCY_TTL`] answers the first
    /// publish's position and publishes nothing.
    fn publish_here(
        &self,
        channel: &str,
        data: Bytes,
        info: Option<Arc<ClientInfo>>,
        idempotency_key: Option<&str>,
    ) -> Result<StreamPosition, RealtimeError> {
        let options = self.namespaces.of(channel)?;
        self.tick();
        let now = Instant::now();
        let history = options.keeps_history();
        if !history && idempotency_key.is_none() {
            // Nothing to keep: no channel state, no lock beyond the fan-out's.
            let publication = Publication {
                offset: 0,
                data,
                info,
                time: now,
            };
            self.deliver(channel, &publication);
            return Ok(StreamPosition::default());
        }
        let state = self.channel(channel, options.max_channels)?;
        let mut state = state.lock().expect("channel lock");
        if let Some(key) = idempotency_key {
            while state
                .idempotent
                .front()
                .is_some_and(|(_, _, at)| now.saturating_duration_since(*at) >= IDEMPOTENCY_TTL)
            {
                state.idempotent.pop_front();
            }
            if let Some((_, offset, _)) = state.idempotent.iter().find(|(k, _, _)| k == key) {
                let offset = *offset;
                return Ok(position(history, offset, &state.stream));
            }
        }
        let offset = if history {
            state.stream.expire(now, options.history_ttl);
            state.stream.next_offset()
        } else {
            0
        };
        let publication = Publication {
            offset,
            data,
            info,
            time: now,
        };
        self.deliver(channel, &publication);
        if history {
            state
                .stream
                .append(publication, options.history_size, options.history_max_bytes);
        }
        if let Some(key) = idempotency_key {
            if state.idempotent.len() >= IDEMPOTENCY_KEYS_PER_CHANNEL {
                state.idempotent.pop_front();
            }
            state.idempotent.push_back((key.to_string(), offset, now));
        }
        Ok(position(history, offset, &state.stream))
    }

    /// Hands a publication to every adapter, framed once each.
    fn deliver(&self, channel: &str, publication: &Publication) {
        self.published.fetch_add(1, Ordering::Relaxed);
        for adapter in self.adapters.read().expect("adapters lock").iter() {
            let frames = adapter.framer.publication(channel, publication);
            adapter
                .topics
                .publish_positioned(channel, &frames, publication.offset);
        }
    }

    /// A join or leave push to every adapter that has them.
    fn join_leave(&self, channel: &str, info: &ClientInfo, join: bool) {
        for adapter in self.adapters.read().expect("adapters lock").iter() {
            if let Some(frames) = adapter.framer.join_leave(channel, info, join) {
                adapter.topics.publish_positioned(channel, &frames, 0);
            }
        }
    }

    /// Subscribes a client: recovers what it missed if it asks, queues the
    /// adapter's reply (`reply` frames it from what was found) and joins the
    /// topic, all under the channel's lock (see the module head). Refused
    /// when the channel's presence is full, or (`reject_unrecovered`) when
    /// the recovery failed.
    fn subscribe_here(
        &self,
        join: Join<'_>,
        reject_unrecovered: bool,
        reply: impl FnOnce(&Subscribed) -> Bytes,
    ) -> Result<(), RealtimeError> {
        let options = self.namespaces.of(join.channel)?;
        self.tick();
        let state = self.channel(join.channel, options.max_channels)?;
        let mut state = state.lock().expect("channel lock");
        if options.presence {
            state
                .presence
                .add(join.member.clone(), options.presence_max)?;
        }
        let history = options.keeps_history();
        if history {
            state.stream.expire(Instant::now(), options.history_ttl);
        }
        let recoverable = history && (join.recoverable || options.force_recovery);
        let recovery = match (&join.recover, recoverable) {
            (Some(since), true) => Some(state.stream.recover(since)),
            _ => None,
        };
        if reject_unrecovered && recovery.as_ref().is_some_and(|r| !r.recovered) {
            if options.presence {
                state.presence.remove(&join.member.client);
            }
            return Err(HistoryError::UnrecoverablePosition.into());
        }
        let top = if history {
            state.stream.position()
        } else {
            StreamPosition::default()
        };
        let found = Subscribed {
            positioned: history,
            recoverable,
            recovery,
            top,
        };
        // An adapter that answers after the join (pusher: the presence
        // list) frames nothing here.
        let reply = reply(&found);
        if !reply.is_empty() {
            join.outbound.send_frames(&reply);
        }
        join.topics.join(
            join.channel,
            Subscriber {
                conn: join.conn,
                outbound: join.outbound.clone(),
                slow: weir_config::SlowSubscriber::Close,
                since: found.top.offset,
                positioned: history,
            },
        );
        state.subscribers += 1;
        if options.join_leave {
            self.join_leave(join.channel, &join.member, true);
        }
        Ok(())
    }

    /// Ends a client's subscription (from [`subscribe`](Self::subscribe)).
    fn unsubscribe_here(&self, channel: &str, topics: &Topics, conn: ConnId, client: &str) {
        topics.unsubscribe(channel, conn);
        let Some(state) = self.existing(channel) else {
            return;
        };
        let mut state = state.lock().expect("channel lock");
        state.subscribers = state.subscribers.saturating_sub(1);
        let left = state.presence.remove(client);
        let join_leave = self
            .namespaces
            .of(channel)
            .is_ok_and(|options| options.join_leave);
        if let (Some(info), true) = (left, join_leave) {
            self.join_leave(channel, &info, false);
        }
    }

    /// Who is in `channel` (namespaces with `presence` only).
    fn presence_here(&self, channel: &str) -> Result<Vec<Arc<ClientInfo>>, RealtimeError> {
        if !self.namespaces.of(channel)?.presence {
            return Err(RealtimeError::NotAvailable);
        }
        Ok(match self.existing(channel) {
            Some(state) => {
                let state = state.lock().expect("channel lock");
                state.presence.members().cloned().collect()
            }
            None => Vec::new(),
        })
    }

    fn presence_stats_here(&self, channel: &str) -> Result<PresenceStats, RealtimeError> {
        if !self.namespaces.of(channel)?.presence {
            return Err(RealtimeError::NotAvailable);
        }
        Ok(match self.existing(channel) {
            Some(state) => state.lock().expect("channel lock").presence.stats(),
            None => PresenceStats::default(),
        })
    }

    /// `channel`'s history and its position (namespaces with history only).
    fn history_here(
        &self,
        channel: &str,
        query: &HistoryQuery,
    ) -> Result<(Vec<Publication>, StreamPosition), RealtimeError> {
        let options = self.namespaces.of(channel)?;
        if !options.keeps_history() {
            return Err(RealtimeError::NotAvailable);
        }
        let state = self.channel(channel, options.max_channels)?;
        let mut state = state.lock().expect("channel lock");
        state.stream.expire(Instant::now(), options.history_ttl);
        let pubs = state.stream.query(query)?;
        Ok((pubs, state.stream.position()))
    }

    /// Forgets `channel`'s publications; its position stays.
    fn history_remove_here(&self, channel: &str) -> Result<(), RealtimeError> {
        if !self.namespaces.of(channel)?.keeps_history() {
            return Err(RealtimeError::NotAvailable);
        }
        if let Some(state) = self.existing(channel) {
            state.lock().expect("channel lock").stream.clear();
        }
        Ok(())
    }

    /// Publishes `data` (JSON text) into `channel`: its position (offset 0
    /// and no epoch in a channel without history). A repeated
    /// `idempotency_key` within [`IDEMPOTENCY_TTL`] answers the first
    /// publish's position and publishes nothing.
    pub async fn publish(
        self: Arc<Self>,
        channel: String,
        data: Bytes,
        info: Option<Arc<ClientInfo>>,
        idempotency_key: Option<String>,
    ) -> Result<StreamPosition, RealtimeError> {
        let Some(cluster) = self.cluster() else {
            return self.publish_here(&channel, data, info, idempotency_key.as_deref());
        };
        let options = self.namespaces.of(&channel)?;
        let history = options
            .keeps_history()
            .then_some((options.history_size, options.history_ttl));
        let at = cluster
            .store
            .publish(
                &channel,
                &data,
                info.as_deref(),
                history,
                idempotency_key.as_deref(),
            )
            .await?;
        self.published.fetch_add(1, Ordering::Relaxed);
        Ok(at)
    }

    /// Subscribes a client: recovers what it missed if it asks, queues the
    /// reply `reply` frames and joins the topic, so the client gets every
    /// publication once, in order. Refused when the channel's presence is
    /// full, when the recovery failed and `reject_unrecovered`, or (with
    /// `[cluster]`) when Redis does not answer. A refused or cancelled
    /// subscribe leaves nothing behind.
    pub async fn subscribe(
        self: Arc<Self>,
        req: Subscribe,
        reject_unrecovered: bool,
        reply: Reply,
    ) -> Result<(), RealtimeError> {
        let result = match self.cluster() {
            None => self
                .subscribe_here(
                    Join {
                        channel: &req.channel,
                        topics: &req.topics,
                        conn: req.conn,
                        outbound: &req.outbound,
                        member: req.member.clone(),
                        recoverable: req.recoverable,
                        recover: req.recover.clone(),
                    },
                    reject_unrecovered,
                    reply,
                )
                .map(|()| {
                    req.subscription.activate();
                }),
            Some(_) => {
                self.clone()
                    .subscribe_across(&req, reject_unrecovered, reply)
                    .await
            }
        };
        if result.is_err() {
            req.subscription.fail();
        }
        result
    }

    /// Ends a client's subscription (one [`subscribe`](Self::subscribe)
    /// made); a subscribe still waiting on Redis is called off instead.
    pub fn leave(
        &self,
        channel: &str,
        topics: &Topics,
        conn: ConnId,
        member: &Arc<ClientInfo>,
        subscription: &Subscription,
    ) {
        if !subscription.cancel() {
            return;
        }
        let Some(cluster) = self.cluster() else {
            return self.unsubscribe_here(channel, topics, conn, &member.client);
        };
        let Some(state) = self.existing(channel) else {
            return topics.unsubscribe(channel, conn);
        };
        let mut state = state.lock().expect("channel lock");
        topics.unsubscribe(channel, conn);
        state.presence.remove(&member.client);
        self.release(cluster, channel, &mut state);
        drop(state);
        let Ok(options) = self.namespaces.of(channel) else {
            return;
        };
        let (presence, join_leave) = (options.presence, options.join_leave);
        let (store, channel, member) = (cluster.store.clone(), channel.to_string(), member.clone());
        cluster.store.runtime().spawn(async move {
            if presence {
                store.presence_remove(&channel, &member.client).await;
            }
            if join_leave {
                store.join_leave(&channel, &member, false).await;
            }
        });
    }

    /// One subscriber fewer on this node: the last one's leaving stops the
    /// watch (and the node's copy of the stream, which would go stale).
    fn release(&self, cluster: &Cluster, channel: &str, state: &mut ChannelState) {
        state.subscribers = state.subscribers.saturating_sub(1);
        if state.subscribers == 0 {
            cluster.broker.unwatch_realtime(channel);
            state.forget_copy();
        }
    }

    /// [`subscribe`](Self::subscribe) with `[cluster]`. The channel is
    /// watched first and Redis confirms it, so every publication after the
    /// read below reaches this node; then, under the channel's lock, the
    /// read is joined to what arrived meanwhile (the node's stream has it):
    /// the reply carries everything up to the newest position seen, and
    /// live delivery skips what the reply has.
    async fn subscribe_across(
        self: Arc<Self>,
        req: &Subscribe,
        reject_unrecovered: bool,
        reply: Reply,
    ) -> Result<(), RealtimeError> {
        let cluster = self.cluster().expect("clustered");
        let options = self.namespaces.of(&req.channel)?.clone();
        self.tick();
        let state = self.channel(&req.channel, options.max_channels)?;
        {
            let mut state = state.lock().expect("channel lock");
            state.subscribers += 1;
            if state.subscribers == 1 {
                cluster.broker.watch_realtime(&req.channel);
            }
        }
        let result = self
            .clone()
            .join_across(cluster, &state, &options, req, reject_unrecovered, reply)
            .await;
        let joined = matches!(result, Ok(true));
        if !joined {
            // Refused, failed or called off: undo what this subscribe did.
            {
                let mut locked = state.lock().expect("channel lock");
                self.release(cluster, &req.channel, &mut locked);
            }
            if options.presence && !matches!(result, Err(RealtimeError::Presence(_))) {
                cluster
                    .store
                    .presence_remove(&req.channel, &req.member.client)
                    .await;
            }
        } else if options.join_leave {
            cluster
                .store
                .join_leave(&req.channel, &req.member, true)
                .await;
        }
        result.map(|_| ())
    }

    /// The Redis half of [`subscribe_across`](Self::subscribe_across):
    /// true once joined, false if the client left meanwhile.
    async fn join_across(
        self: Arc<Self>,
        cluster: &Cluster,
        state: &Mutex<ChannelState>,
        options: &NamespaceOptions,
        req: &Subscribe,
        reject_unrecovered: bool,
        reply: Reply,
    ) -> Result<bool, RealtimeError> {
        let channel = req.channel.as_str();
        if !cluster
            .broker
            .wait_subscribed(channel, redis::REDIS_TIMEOUT)
            .await
        {
            return Err(RealtimeError::Unavailable);
        }
        if options.presence {
            let added = cluster
                .store
                .presence_add(
                    channel,
                    std::slice::from_ref(&req.member),
                    options.presence_max,
                )
                .await?;
            if !added {
                return Err(PresenceError::PresenceFull.into());
            }
        }
        let history = options.keeps_history();
        let recoverable = history && (req.recoverable || options.force_recovery);
        let recover = req.recover.as_ref().filter(|_| recoverable);
        // A few tries: a read may find the node's stream ahead of it by
        // more than the stream keeps (a burst between the read and now).
        for _ in 0..3 {
            let read = match (history, recover) {
                (false, _) => None,
                (true, from) => Some(
                    cluster
                        .store
                        .read(
                            channel,
                            from.map_or(ReadFrom::PositionOnly, |p| ReadFrom::After(p.offset)),
                            options.history_size,
                            false,
                            options.history_ttl,
                        )
                        .await?,
                ),
            };
            let mut locked = state.lock().expect("channel lock");
            let mut top = StreamPosition::default();
            let mut later = Vec::new();
            if let Some(read) = &read {
                top = read.top.clone();
                if !locked.seeded {
                    locked.stream = Stream::at(top.clone());
                    locked.seeded = true;
                } else if locked.stream.epoch() != top.epoch {
                    // Redis started a new epoch: this node's subscribers
                    // hold positions of the old one.
                    self.discontinuity(channel);
                    locked.stream = Stream::at(top.clone());
                } else if locked.stream.position().offset > top.offset {
                    match locked.stream.since(top.offset) {
                        Some(missed) => later = missed,
                        None => continue,
                    }
                    top.offset = locked.stream.position().offset;
                }
            }
            let recovery = match (recover, &read) {
                (Some(since), Some(read)) => Some(recovery_of(since, read, later, &top)),
                _ => None,
            };
            if reject_unrecovered && recovery.as_ref().is_some_and(|r| !r.recovered) {
                return Err(HistoryError::UnrecoverablePosition.into());
            }
            if !req.subscription.activate() {
                return Ok(false);
            }
            let found = Subscribed {
                positioned: history,
                recoverable,
                recovery,
                top,
            };
            let reply = reply(&found);
            if !reply.is_empty() {
                req.outbound.send_frames(&reply);
            }
            req.topics.join(
                channel,
                Subscriber {
                    conn: req.conn,
                    outbound: req.outbound.clone(),
                    slow: weir_config::SlowSubscriber::Close,
                    since: found.top.offset,
                    positioned: history,
                },
            );
            if options.presence {
                let _ = locked.presence.add(req.member.clone(), 0);
            }
            return Ok(true);
        }
        Err(RealtimeError::Unavailable)
    }

    /// Closes the positioned subscribers of `channel` on this node (their
    /// positions no longer follow the channel's).
    fn discontinuity(&self, channel: &str) {
        for adapter in self.adapters.read().expect("adapters lock").iter() {
            if let Some((code, reason)) = adapter.framer.discontinuity() {
                adapter.topics.close_positioned(channel, code, reason);
            }
        }
    }

    /// Who is in `channel` (namespaces with `presence` only); with
    /// `[cluster]`, on every node.
    pub async fn presence(
        self: Arc<Self>,
        channel: String,
    ) -> Result<Vec<Arc<ClientInfo>>, RealtimeError> {
        let Some(cluster) = self.cluster() else {
            return self.presence_here(&channel);
        };
        if !self.namespaces.of(&channel)?.presence {
            return Err(RealtimeError::NotAvailable);
        }
        cluster.store.presence(&channel).await
    }

    pub async fn presence_stats(
        self: Arc<Self>,
        channel: String,
    ) -> Result<PresenceStats, RealtimeError> {
        if self.cluster().is_none() {
            return self.presence_stats_here(&channel);
        }
        let members = self.presence(channel).await?;
        Ok(presence::stats_of(members.iter()))
    }

    /// `channel`'s history and its position (namespaces with history only).
    pub async fn history(
        self: Arc<Self>,
        channel: String,
        query: HistoryQuery,
    ) -> Result<(Vec<Publication>, StreamPosition), RealtimeError> {
        let Some(cluster) = self.cluster() else {
            return self.history_here(&channel, &query);
        };
        let options = self.namespaces.of(&channel)?;
        if !options.keeps_history() {
            return Err(RealtimeError::NotAvailable);
        }
        let limit = query.limit.unwrap_or(options.history_size);
        match &query.since {
            Some(since) => {
                let read = cluster
                    .store
                    .read(
                        &channel,
                        ReadFrom::After(since.offset),
                        options.history_size,
                        false,
                        options.history_ttl,
                    )
                    .await?;
                let top = read.top.clone();
                let mut r = recovery_of(since, &read, Vec::new(), &top);
                if !r.recovered {
                    return Err(HistoryError::UnrecoverablePosition.into());
                }
                if query.reverse {
                    r.publications.reverse();
                }
                r.publications.truncate(limit);
                Ok((r.publications, top))
            }
            None => {
                let read = cluster
                    .store
                    .read(
                        &channel,
                        ReadFrom::Start,
                        limit,
                        query.reverse,
                        options.history_ttl,
                    )
                    .await?;
                Ok((read.publications, read.top))
            }
        }
    }

    /// Forgets `channel`'s publications; its position stays.
    pub async fn history_remove(self: Arc<Self>, channel: String) -> Result<(), RealtimeError> {
        let Some(cluster) = self.cluster() else {
            return self.history_remove_here(&channel);
        };
        if !self.namespaces.of(&channel)?.keeps_history() {
            return Err(RealtimeError::NotAvailable);
        }
        cluster.store.history_remove(&channel).await
    }

    /// A message from Redis for a channel this node watches (with
    /// `[cluster]`): publications are kept in the node's stream and
    /// delivered at their positions, in the order Redis gave them.
    fn received(&self, channel: &str, message: Message) {
        let (position, publication) = match message {
            Message::Join(info) => return self.join_leave(channel, &info, true),
            Message::Leave(info) => return self.join_leave(channel, &info, false),
            Message::Publication {
                position,
                publication,
            } => (position, publication),
        };
        if position.offset == 0 {
            return self.deliver(channel, &publication);
        }
        let Ok(options) = self.namespaces.of(channel) else {
            return;
        };
        let Some(state) = self.existing(channel) else {
            // Subscribers that follow no positions (a pubsub route's).
            return self.deliver(channel, &publication);
        };
        let mut state = state.lock().expect("channel lock");
        if state.subscribers == 0 {
            // No positioned subscriber here (the channel is watched for a
            // pubsub route's): no copy to keep, and none left to go stale.
            return self.deliver(channel, &publication);
        }
        let at = state.stream.position();
        if state.seeded && at.epoch == position.epoch && position.offset <= at.offset {
            return; // a subscribe's read already had it
        }
        let follows =
            state.seeded && at.epoch == position.epoch && position.offset == at.offset + 1;
        if !follows {
            if state.seeded {
                // A jump: publications were lost between Redis and here,
                // or Redis started a new epoch.
                tracing::info!(
                    channel,
                    from = at.offset,
                    to = position.offset,
                    "realtime: positions jumped; positioned subscribers reconnect to recover"
                );
                self.discontinuity(channel);
            }
            state.stream = Stream::at(StreamPosition {
                offset: position.offset - 1,
                epoch: position.epoch,
            });
            state.seeded = true;
        }
        self.deliver(channel, &publication);
        state
            .stream
            .record(publication, options.history_size, options.history_max_bytes);
    }

    /// Channels with subscribers, and how many each has.
    pub fn channels(&self) -> Vec<(String, usize)> {
        let channels = self.channels.lock().expect("channels lock");
        channels
            .states
            .iter()
            .filter_map(|(name, state)| {
                let n = state.lock().expect("channel lock").subscribers;
                (n > 0).then(|| (name.to_string(), n))
            })
            .collect()
    }

    /// (channels held, publications accepted) for `info`.
    pub fn counts(&self) -> (usize, u64) {
        let channels = self.channels.lock().expect("channels lock").states.len();
        (channels, self.published.load(Ordering::Relaxed))
    }

    /// Every [`SWEEP_EVERY_OPS`] operations, drops channels nobody is
    /// subscribed to whose history aged out: their memory goes, and their
    /// next publication starts a new epoch.
    fn tick(&self) {
        if self.ops.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY_OPS == SWEEP_EVERY_OPS - 1 {
            self.sweep(Instant::now());
        }
    }

    fn sweep(&self, now: Instant) {
        let mut channels = self.channels.lock().expect("channels lock");
        channels.retain(|name, state| {
            let Ok(mut state) = state.try_lock() else {
                return true;
            };
            if let Ok(options) = self.namespaces.of(name) {
                state.stream.expire(now, options.history_ttl);
            }
            state.subscribers > 0 || !state.presence.is_empty() || !state.stream.is_empty()
        });
    }
}

impl RealtimeSink for Realtime {
    fn receive(&self, channel: &str, payload: Bytes) {
        if channel == control_channel() {
            match serde_json::from_slice::<Control>(&payload) {
                Ok(c) => {
                    self.clients
                        .command(&c.user, c.client.as_deref(), &c.command);
                }
                Err(_) => tracing::warn!("realtime: dropped a control message that is not weir's"),
            }
            return;
        }
        match redis::decode_message(&payload) {
            Some(message) => self.received(channel, message),
            None => tracing::warn!(
                channel,
                "realtime: dropped a message from Redis that is not weir's"
            ),
        }
    }

    /// Publications made while the link was down never reach this node:
    /// every channel it followed loses its continuity, and its positioned
    /// subscribers reconnect and recover from Redis (or are told they
    /// cannot, when Redis came back empty with a new epoch).
    fn link_up(&self) {
        let channels: Vec<(Arc<str>, Arc<Mutex<ChannelState>>)> = self
            .channels
            .lock()
            .expect("channels lock")
            .states
            .iter()
            .map(|(name, state)| (name.clone(), state.clone()))
            .collect();
        for (name, state) in channels {
            let mut state = state.lock().expect("channel lock");
            if state.seeded {
                self.discontinuity(&name);
                state.forget_copy();
            }
        }
    }
}

/// What a recovery from `since` finds in `read` and in the node's `later`
/// publications (those after the read, up to `top`).
fn recovery_of(
    since: &StreamPosition,
    read: &redis::Read,
    later: Vec<Publication>,
    top: &StreamPosition,
) -> Recovery {
    let same_epoch = since.epoch.is_empty() || since.epoch == read.top.epoch;
    let covered = since.offset == read.top.offset
        || (since.offset < read.top.offset
            && read
                .publications
                .first()
                .is_some_and(|p| p.offset == since.offset + 1));
    if !(same_epoch && covered) {
        return Recovery {
            publications: Vec::new(),
            recovered: false,
            top: top.clone(),
        };
    }
    let mut publications = read.publications.clone();
    publications.extend(later);
    Recovery {
        publications,
        recovered: true,
        top: top.clone(),
    }
}

/// Writes this node's members' presence again every
/// [`redis::PRESENCE_REFRESH`], so Redis forgets only the members of a node
/// that stopped ([`redis::PRESENCE_TTL`]).
async fn refresh_presence(realtime: Weak<Realtime>) {
    loop {
        tokio::time::sleep(redis::PRESENCE_REFRESH).await;
        let Some(realtime) = realtime.upgrade() else {
            return;
        };
        let Some(cluster) = realtime.cluster() else {
            return;
        };
        let members: Vec<(Arc<str>, Vec<Arc<ClientInfo>>)> = {
            let channels = realtime.channels.lock().expect("channels lock");
            channels
                .states
                .iter()
                .filter_map(|(name, state)| {
                    let state = state.lock().expect("channel lock");
                    (!state.presence.is_empty())
                        .then(|| (name.clone(), state.presence.members().cloned().collect()))
                })
                .collect()
        };
        for (channel, members) in members {
            let _ = cluster.store.presence_add(&channel, &members, 0).await;
        }
    }
}

/// The position a publish answers with.
fn position(history: bool, offset: u64, stream: &Stream) -> StreamPosition {
    match history {
        true => StreamPosition {
            offset,
            epoch: stream.epoch().to_string(),
        },
        false => StreamPosition::default(),
    }
}

#[cfg(test)]
mod tests;
