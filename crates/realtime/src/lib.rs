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
//! without a gap or a repeat (see [`Realtime::subscribe`]). Likewise a
//! node's roster (`roster.rs`) is its copy of a presence channel's
//! members, kept from the presence changes Redis sends, which answers
//! presence without reading the whole list each time. A node that sees a
//! channel's positions jump (messages lost between Redis and it, or
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

mod across;
mod here;
mod model;
mod roster;

use across::{recovery_of, refresh_presence};
use here::{Adapter, ChannelState, Channels};
pub use model::*;

pub use clients::UserCommand;
pub use history::{HistoryQuery, Recovery, StreamPosition};
pub use namespace::{NamespaceOptions, Namespaces};
pub use presence::PresenceStats;

use bytes::Bytes;
use history::{HistoryError, Stream};
use namespace::ChannelNameError;
use presence::{Presence, PresenceError};
use redis::{Message, ReadFrom, RedisStore};
use roster::{Change, Roster};
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
pub(crate) const IDEMPOTENCY_TTL: Duration = Duration::from_secs(300);
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
        let cluster = realtime.cluster().expect("clustered");
        cluster.broker.attach_realtime(cluster.scope(), sink);
        runtime.spawn(refresh_presence(Arc::downgrade(&realtime)));
        cluster
            .broker
            .watch_control(cluster.scope(), control_channel());
        realtime
    }

    /// A core of its own for a route (a pusher route's), with `namespaces`:
    /// on one node a new core; with `[cluster]` one on the same Redis
    /// connection and link whose channels, presence and control channel are
    /// named in `scope` (which no channel of another core may start with),
    /// so its clients and this core's never meet.
    pub fn sibling(&self, namespaces: Namespaces, scope: &str) -> Arc<Realtime> {
        match self.cluster() {
            None => Realtime::new(namespaces),
            Some(c) => Realtime::clustered(namespaces, c.store.scoped(scope), c.broker.clone()),
        }
    }

    /// The Redis store, with `[cluster]`: an adapter's own scripts run on
    /// it ([`RedisStore::script`]), in the core's scope.
    pub fn store(&self) -> Option<&Arc<RedisStore>> {
        self.cluster().map(|c| &c.store)
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
            cluster
                .broker
                .realtime_adapter(topics.name(), cluster.scope());
        }
        let mut adapters = self.adapters.write().expect("adapters lock");
        if !adapters.iter().any(|a| Arc::ptr_eq(&a.topics, topics)) {
            adapters.push(Adapter {
                topics: topics.clone(),
                framer,
            });
        }
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
        if state.presence.remove(&member.client).is_some() {
            state
                .roster
                .own(Change::Absent(member.client.as_str().into()));
        }
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

    /// Who is in `channel` (namespaces with `presence` only); with
    /// `[cluster]`, on every node (from the node's copy while it has
    /// subscribers there, see `roster.rs`).
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
        self.presence_across(cluster, &channel).await
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
