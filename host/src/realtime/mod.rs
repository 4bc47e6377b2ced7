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
//! Storage is in memory ([`history::Stream`], [`presence::Presence`]); a
//! Redis store (Streams with MAXLEN and TTL and an epoch key, presence hashes
//! with per-entry expiry) takes their place behind the same calls with
//! `[cluster]` (not built yet).

pub mod clients;
pub mod history;
pub mod namespace;
pub mod presence;

pub use history::{HistoryQuery, Recovery, StreamPosition};
pub use namespace::{NamespaceOptions, Namespaces};
pub use presence::PresenceStats;

use crate::pubsub::{Subscriber, Topics};
use crate::reactor::outbound::Outbound;
use crate::registry::ConnId;
use bytes::Bytes;
use history::{HistoryError, Stream};
use namespace::ChannelNameError;
use presence::{Presence, PresenceError};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// How long a publish's `idempotency_key` answers a repeat with the first
/// publish's position instead of publishing again (Centrifugo's default).
pub const IDEMPOTENCY_TTL: Duration = Duration::from_secs(300);
/// Idempotency keys remembered per channel: a bound in memory whatever the
/// publish rate.
const IDEMPOTENCY_KEYS_PER_CHANNEL: usize = 1024;
/// Subscribes and publishes between two sweeps of idle channels.
const SWEEP_EVERY_OPS: u64 = 4096;

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
    presence: Presence,
    /// Subscribers in every adapter: a channel with any is never swept.
    subscribers: usize,
    /// Recent publishes' idempotency keys and their positions.
    idempotent: VecDeque<(String, u64, Instant)>,
}

/// An adapter's topic namespace and how it frames events.
struct Adapter {
    topics: Arc<Topics>,
    framer: Arc<dyn Framer>,
}

/// The gateway's channels, shared by every route and the server API.
pub struct Realtime {
    namespaces: Namespaces,
    channels: Mutex<HashMap<Arc<str>, Arc<Mutex<ChannelState>>>>,
    adapters: RwLock<Vec<Adapter>>,
    /// Subscribes and publishes so far (sweeps idle channels every
    /// [`SWEEP_EVERY_OPS`]).
    ops: AtomicU64,
    /// Publications accepted, for `info`.
    published: AtomicU64,
    /// Connected clients by user (the server API's `disconnect`, `info`).
    pub clients: clients::Clients,
}

impl Realtime {
    pub fn new(namespaces: Namespaces) -> Arc<Realtime> {
        Arc::new(Realtime {
            namespaces,
            channels: Mutex::default(),
            adapters: RwLock::default(),
            ops: AtomicU64::new(0),
            published: AtomicU64::new(0),
            clients: clients::Clients::default(),
        })
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
        let mut adapters = self.adapters.write().expect("adapters lock");
        if !adapters.iter().any(|a| Arc::ptr_eq(&a.topics, topics)) {
            adapters.push(Adapter {
                topics: topics.clone(),
                framer,
            });
        }
    }

    fn channel(&self, channel: &str) -> Arc<Mutex<ChannelState>> {
        let mut channels = self.channels.lock().expect("channels lock");
        channels.entry(channel.into()).or_default().clone()
    }

    fn existing(&self, channel: &str) -> Option<Arc<Mutex<ChannelState>>> {
        self.channels
            .lock()
            .expect("channels lock")
            .get(channel)
            .cloned()
    }

    /// Publishes `data` (JSON text) into `channel`: its position (offset 0
    /// and no epoch in a channel without history). A repeated
    /// `idempotency_key` within [`IDEMPOTENCY_TTL`] answers the first
    /// publish's position and publishes nothing.
    pub fn publish(
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
        let state = self.channel(channel);
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
    pub fn subscribe(
        &self,
        join: Join<'_>,
        reject_unrecovered: bool,
        reply: impl FnOnce(&Subscribed) -> Bytes,
    ) -> Result<(), RealtimeError> {
        let options = self.namespaces.of(join.channel)?;
        self.tick();
        let state = self.channel(join.channel);
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
        join.outbound.send_frames(&reply(&found));
        join.topics.join(
            join.channel,
            Subscriber {
                conn: join.conn,
                outbound: join.outbound.clone(),
                slow: crate::config::SlowSubscriber::Close,
                since: found.top.offset,
            },
        );
        state.subscribers += 1;
        if options.join_leave {
            self.join_leave(join.channel, &join.member, true);
        }
        Ok(())
    }

    /// Ends a client's subscription (from [`subscribe`](Self::subscribe)).
    pub fn unsubscribe(&self, channel: &str, topics: &Topics, conn: ConnId, client: &str) {
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
    pub fn presence(&self, channel: &str) -> Result<Vec<Arc<ClientInfo>>, RealtimeError> {
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

    pub fn presence_stats(&self, channel: &str) -> Result<PresenceStats, RealtimeError> {
        if !self.namespaces.of(channel)?.presence {
            return Err(RealtimeError::NotAvailable);
        }
        Ok(match self.existing(channel) {
            Some(state) => state.lock().expect("channel lock").presence.stats(),
            None => PresenceStats::default(),
        })
    }

    /// `channel`'s history and its position (namespaces with history only).
    pub fn history(
        &self,
        channel: &str,
        query: &HistoryQuery,
    ) -> Result<(Vec<Publication>, StreamPosition), RealtimeError> {
        let options = self.namespaces.of(channel)?;
        if !options.keeps_history() {
            return Err(RealtimeError::NotAvailable);
        }
        let state = self.channel(channel);
        let mut state = state.lock().expect("channel lock");
        state.stream.expire(Instant::now(), options.history_ttl);
        let pubs = state.stream.query(query)?;
        Ok((pubs, state.stream.position()))
    }

    /// Forgets `channel`'s publications; its position stays.
    pub fn history_remove(&self, channel: &str) -> Result<(), RealtimeError> {
        if !self.namespaces.of(channel)?.keeps_history() {
            return Err(RealtimeError::NotAvailable);
        }
        if let Some(state) = self.existing(channel) {
            state.lock().expect("channel lock").stream.clear();
        }
        Ok(())
    }

    /// Channels with subscribers, and how many each has.
    pub fn channels(&self) -> Vec<(String, usize)> {
        let channels = self.channels.lock().expect("channels lock");
        channels
            .iter()
            .filter_map(|(name, state)| {
                let n = state.lock().expect("channel lock").subscribers;
                (n > 0).then(|| (name.to_string(), n))
            })
            .collect()
    }

    /// (channels held, publications accepted) for `info`.
    pub fn counts(&self) -> (usize, u64) {
        let channels = self.channels.lock().expect("channels lock").len();
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
