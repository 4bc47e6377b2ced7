//! `native = "pusher"`: the Pusher Channels protocol (pusher-js, Laravel
//! Echo) on `…/app/{key}` and Pusher's HTTP API (the `pusher` server
//! libraries) on `…/apps/{id}/…` of the same listener, so apps written for
//! Pusher run unchanged. An adapter like `centrifugo`: the protocol layer
//! (`weir-pusher`) parses, checks signatures and frames; a real-time core
//! owns channels, presence and the last event of cache channels.
//!
//! The route has a core of its own (`Realtime`), so no other route can
//! name its channels, and inside it each app's channels are namespaces
//! of their own ([`App::core_name`]): `p3:room` is app 3's public
//! channel `room`, `r3:presence-x` a presence channel (presence kept,
//! at most `max_presence_members`), `c3:cache-x` a cache channel (a
//! history of one event). Two apps never share a channel.
//!
//! With `[cluster]` the core is clustered like the gateway's, in a scope
//! of the route's own ([`core_scope`]): presence, cache channels' last
//! event and user commands (`terminate_connections`) cross nodes through
//! Redis, and [`census`] counts subscriptions and members on every node.
//!
//! [`conn`] is one connection's behaviour, [`membership`] a subscription's
//! join and leave, [`census`] who is in each channel (and so when
//! channels are occupied or vacated and presence users added or removed),
//! [`api`] the HTTP API, [`webhooks`] sends an app's events to its
//! receivers, [`metrics`] counts per app, [`hook`] an app's guest.

pub mod api;
pub mod census;
pub mod conn;
pub mod hook;
mod membership;
pub mod metrics;
pub mod webhooks;

use bytes::Bytes;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use weir_config::namespace::{NamespaceOptions, Namespaces};
use weir_config::{PusherApp, PusherConfig};
use weir_pubsub::Topics;
use weir_pusher::connect::{parse_connect_request, ConnectError};
use weir_pusher::webhook::WebhookEvent;
use weir_pusher::{AppKey, Channel};
use weir_reactor::behaviour::LocalFuture;
use weir_reactor::kind::{
    Accepted, HttpAnswer, HttpRequest, Refusal, RouteKind, Upgrade, WorkerRoute, WorkerSetup,
};
use weir_reactor::registry::ConnId;
use weir_realtime::clients::Inbox;
use weir_realtime::{ClientInfo, Framer, Publication, Realtime};
use weir_ws::encode;
use weir_ws::frame::OpCode;

/// How long a cache channel keeps its last event: Pusher's documented 30
/// minutes ("Cache channels": "the cache is kept for 30 minutes").
pub const CACHE_TTL: Duration = Duration::from_secs(30 * 60);

/// Channels of one kind one app may hold on this node: bounds what its
/// clients can make the route keep (the core refuses one more).
pub const MAX_CHANNELS_PER_APP_KIND: usize = 100_000;

/// One app of the route.
pub struct App {
    pub config: PusherApp,
    /// Read from `secret_env` when the route is built.
    pub secret: Vec<u8>,
    /// Its position in the route: names its namespaces in the core.
    pub index: usize,
    /// Connections open now (bounded by `max_connections`: 4004).
    pub connections: AtomicUsize,
    /// Messages, client events, API requests, webhooks.
    pub counters: Arc<metrics::AppCounters>,
    /// Where its events are POSTed (none without `webhooks`).
    pub webhooks: webhooks::Webhooks,
}

impl App {
    pub fn key(&self) -> AppKey<'_> {
        AppKey {
            key: &self.config.key,
            secret: &self.secret,
        }
    }

    /// The core's name for `channel` of this app: the app's namespace for
    /// the channel's kind, `:`, and the Pusher name (which never holds a
    /// `:` before it, so the namespace is always the prefix).
    pub fn core_name(&self, channel: &Channel) -> String {
        let kind = match (channel.is_presence(), channel.is_cache()) {
            (false, false) => "p",
            (true, false) => "r",
            (false, true) => "c",
            (true, true) => "rc",
        };
        format!("{kind}{}:{}", self.index, channel.name())
    }

    /// The Pusher name of a core channel of this app, if it is one.
    pub fn pusher_name<'a>(&self, core: &'a str) -> Option<&'a str> {
        let (ns, name) = core.split_once(':')?;
        let index = ns.trim_start_matches(['r', 'c', 'p']);
        (index == self.index.to_string()).then_some(name)
    }
}

/// The scope a pusher route's core names its channels in with
/// `[cluster]` (`Realtime::sibling`): the same on every node (the route's
/// path), and no channel of another core can start with it (the part
/// before its first `:` is no namespace name: those have no `!`).
pub fn core_scope(path: &str) -> String {
    format!("pusher!:{path}:")
}

/// A pusher route, shared by workers.
pub struct PusherRoute {
    pub apps: Vec<App>,
    /// The route's own core (see the module head).
    pub realtime: Arc<Realtime>,
    /// The route's topic namespace (topic = core channel name).
    pub topics: Arc<Topics>,
    /// Live connections by socket id: what a trigger's `socket_id`
    /// excludes. Entries are added at connect and removed at close.
    pub sockets: Mutex<HashMap<String, ConnId>>,
    /// Who is in each channel, on every node.
    pub census: Arc<census::Census>,
    /// Given to the core with each signed-in connection (its clients by
    /// user are what `terminate_connections` closes, on every node); never
    /// read: pusher connections take only disconnects.
    pub inbox: Arc<Inbox>,
    /// Bodies of the HTTP API are read up to this.
    pub max_body: usize,
    /// Each app's guest, by app index (None: the app has none).
    pub hooks: Vec<Option<hook::AppHook>>,
    /// Joins in flight on Redis at once (with `[cluster]`,
    /// [`membership::JOINS_IN_FLIGHT`]): the rest wait here, not in
    /// Redis's queue where their calls would pass their deadline.
    pub joins: tokio::sync::Semaphore,
}

/// Why a pusher route's apps cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum PusherError {
    #[error(
        "line {line}: the environment variable {var} (secret_env of app \"{app}\") is not set \
         or empty; export the app's secret there"
    )]
    Secret {
        line: usize,
        var: String,
        app: String,
    },
    #[error("line {line}: {source}")]
    Webhook {
        line: usize,
        source: webhooks::WebhookError,
    },
    #[error("no randomness for the cluster's node id: {0}")]
    Random(getrandom::Error),
}

impl PusherRoute {
    /// Reads each app's secret from the environment variable it names;
    /// the route's core is a sibling of the gateway's `gateway` core (so
    /// across nodes when it is), scoped by the route's `path`.
    pub fn new(
        config: &PusherConfig,
        topics: &Arc<Topics>,
        gateway: &Realtime,
        path: &str,
    ) -> Result<PusherRoute, PusherError> {
        let mut apps = Vec::with_capacity(config.apps.len());
        let mut namespaces = HashMap::new();
        for (index, app) in config.apps.iter().enumerate() {
            let name = &app.secret_env;
            let secret = std::env::var(name).ok().filter(|s| !s.is_empty());
            let Some(secret) = secret else {
                return Err(PusherError::Secret {
                    line: app.line,
                    var: name.clone(),
                    app: app.id.clone(),
                });
            };
            let base = NamespaceOptions {
                max_channels: MAX_CHANNELS_PER_APP_KIND,
                ..Default::default()
            };
            let presence = NamespaceOptions {
                presence: true,
                presence_max: app.max_presence_members,
                ..base.clone()
            };
            let cache = |o: &NamespaceOptions| NamespaceOptions {
                history_size: 1,
                history_ttl: CACHE_TTL,
                // The one event, framed: at most the payload and its envelope.
                history_max_bytes: (app.max_payload * 2 + 1024).max(1024),
                ..o.clone()
            };
            namespaces.insert(format!("p{index}"), base.clone());
            namespaces.insert(format!("r{index}"), presence.clone());
            namespaces.insert(format!("c{index}"), cache(&base));
            namespaces.insert(format!("rc{index}"), cache(&presence));
            let counters = Arc::<metrics::AppCounters>::default();
            let key = AppKey {
                key: &app.key,
                secret: secret.as_bytes(),
            };
            let webhooks = webhooks::Webhooks::start(&app.id, &key, &app.webhooks, &counters)
                .map_err(|source| PusherError::Webhook {
                    line: app.line,
                    source,
                })?;
            apps.push(App {
                config: app.clone(),
                secret: secret.into_bytes(),
                index,
                connections: AtomicUsize::new(0),
                counters,
                webhooks,
            });
        }
        let realtime = gateway.sibling(Namespaces::new(namespaces), &core_scope(path));
        realtime.attach(topics, Arc::new(EventFramer));
        let census = census::Census::new(&realtime).map_err(PusherError::Random)?;
        let max_payload = apps.iter().map(|a| a.config.max_payload).max().unwrap_or(0);
        Ok(PusherRoute {
            apps,
            realtime,
            topics: topics.clone(),
            sockets: Mutex::default(),
            census,
            inbox: Arc::default(),
            // A batch of events, each at most max_payload of data, whose
            // JSON escaping may double it, and the envelopes.
            max_body: (max_payload * 2 + 1024) * (weir_pusher::api::DEFAULT_MAX_BATCH_EVENTS + 1),
            hooks: Vec::new(),
            joins: tokio::sync::Semaphore::new(membership::JOINS_IN_FLIGHT),
        })
    }

    /// The apps' guests, by app index (the route table compiles them).
    pub fn with_hooks(mut self, hooks: Vec<Option<hook::AppHook>>) -> Self {
        self.hooks = hooks;
        self
    }

    pub fn app_by_key(&self, key: &str) -> Option<&App> {
        self.apps.iter().find(|a| a.config.key == key)
    }

    pub fn app_by_id(&self, id: &str) -> Option<&App> {
        self.apps.iter().find(|a| a.config.id == id)
    }

    /// One subscription more in `app`'s `channel` (by `user` on a presence
    /// channel), and what it changed on every node: the first subscription
    /// anywhere occupies the channel, a user's first connection anywhere
    /// adds the member. Where webhooks `channel_occupied` and
    /// `member_added` are decided ([`membership`] calls it once per
    /// subscription that joined).
    pub async fn joined(&self, app: &App, channel: &Channel, user: Option<&str>) -> census::Joined {
        let joined = self.census.joined(&app.core_name(channel), user).await;
        let name = channel.name();
        if joined.occupied {
            app.webhooks
                .push(&WebhookEvent::ChannelOccupied { channel: name });
        }
        if let (true, Some(user_id)) = (joined.member_added, user) {
            app.webhooks.push(&WebhookEvent::MemberAdded {
                channel: name,
                user_id,
            });
        }
        joined
    }

    /// One subscription fewer (one [`joined`](Self::joined) counted): the
    /// last subscription anywhere vacates the channel, a user's last
    /// connection anywhere removes the member (`channel_vacated`,
    /// `member_removed`).
    pub async fn left(&self, app: &App, channel: &Channel, user: Option<&str>) -> census::Left {
        let left = self.census.left(&app.core_name(channel), user).await;
        let name = channel.name();
        if let (true, Some(user_id)) = (left.member_removed, user) {
            app.webhooks.push(&WebhookEvent::MemberRemoved {
                channel: name,
                user_id,
            });
        }
        if left.vacated {
            app.webhooks
                .push(&WebhookEvent::ChannelVacated { channel: name });
        }
        left
    }

    /// Counts frames queued toward `app`'s subscribers of `core` on this
    /// node by one event published there (all of them but `exclude`).
    pub fn count_fanout(&self, app: &App, core: &str, excluded: bool) {
        // An excluded socket not subscribed here makes this one short.
        let n = self
            .census
            .subscriptions_here(core)
            .saturating_sub(usize::from(excluded));
        app.counters
            .messages_out
            .fetch_add(n as u64, Ordering::Relaxed);
    }

    /// The key a signed-in user's connections are under in the core's
    /// clients: the app's index, `:`, the user id.
    pub fn user_key(&self, app: usize, user: &str) -> String {
        format!("{app}:{user}")
    }

    /// Runs `work` (a call on the core): inline on one node, where it
    /// finishes at its first poll; with `[cluster]` on the core's runtime,
    /// where it may wait on Redis.
    pub fn run(&self, work: impl std::future::Future<Output = ()> + Send + 'static) {
        use futures_util::FutureExt;
        match self.realtime.runtime() {
            Some(runtime) => drop(runtime.spawn(work)),
            None => work
                .now_or_never()
                .expect("a core on one node answers at once"),
        }
    }

    /// `work`'s answer, computed as [`run`](Self::run) does.
    pub async fn ask<T: Send + 'static>(
        &self,
        work: impl std::future::Future<Output = T> + Send + 'static,
    ) -> Option<T> {
        match self.realtime.runtime() {
            Some(runtime) => runtime.spawn(work).await.ok(),
            None => Some(work.await),
        }
    }

    /// Delivers a server event (`server::event` JSON) on `channel`: through
    /// the core for cache channels (which keep it for the next
    /// subscriber), straight to the topic for the others, skipping
    /// `exclude` there (a cache channel's event reaches every subscriber).
    pub fn deliver(&self, app: &App, channel: &Channel, json: String, exclude: Option<ConnId>) {
        let core = app.core_name(channel);
        if channel.is_cache() {
            let call = self
                .realtime
                .clone()
                .publish(core.clone(), Bytes::from(json), None, None);
            let name = channel.name().to_string();
            self.count_fanout(app, &core, false);
            return self.run(async move {
                if let Err(e) = call.await {
                    tracing::debug!(channel = name, error = %e, "cache event not kept");
                }
            });
        }
        let frame = Bytes::from(encode::frame(OpCode::Text, json.as_bytes()));
        self.topics.publish(&core, &frame, exclude);
        self.count_fanout(app, &core, exclude.is_some());
    }

    /// The connection a socket id names, if it is live on this node.
    pub fn socket(&self, socket_id: &str) -> Option<ConnId> {
        self.sockets
            .lock()
            .expect("sockets lock")
            .get(socket_id)
            .copied()
    }
}

/// Shared by every worker.
pub struct PusherKind(pub Arc<PusherRoute>);

impl RouteKind for PusherKind {
    fn on_worker(&self, worker: &WorkerSetup) -> Rc<dyn WorkerRoute> {
        let hooks = self
            .0
            .hooks
            .iter()
            .map(|h| h.as_ref().map(|h| Rc::new(h.on_worker(worker))))
            .collect();
        Rc::new(PusherWorker(self.0.clone(), hooks))
    }

    /// A route's apps and secrets are read when it is built: a reload that
    /// changes them says so (the route serves on as it was) rather than
    /// leaving the operator to believe the change took.
    fn figures(&self) -> Vec<weir_reactor::kind::KindFigure> {
        self.0.figures()
    }

    fn reload(&self, behaviour: &weir_config::Behaviour) -> Result<(), String> {
        let weir_config::Behaviour::Native(weir_config::NativeKind::Pusher(config)) = behaviour
        else {
            return Ok(());
        };
        let unplaced = |app: &PusherApp| PusherApp {
            line: 0,
            ..app.clone()
        };
        let same = config.apps.len() == self.0.apps.len()
            && config
                .apps
                .iter()
                .zip(&self.0.apps)
                .all(|(new, old)| unplaced(new) == unplaced(&old.config));
        if same {
            return Ok(());
        }
        Err(
            "a pusher route's apps are read when it starts; this reload left them as they \
             were (restart weir to change them)"
                .into(),
        )
    }
}

/// The route on one worker, with its apps' guests' slots there (by app
/// index).
struct PusherWorker(Arc<PusherRoute>, Vec<Option<Rc<hook::WorkerHook>>>);

impl PusherWorker {
    /// A connection of app `index`, with what its guest is asked at open.
    fn connection(&self, index: usize, up: &Upgrade<'_>) -> Result<conn::Pusher, getrandom::Error> {
        let hook = self.1.get(index).cloned().flatten();
        let upgrade = match hook {
            Some(_) => (up.uri.to_string(), hook::header_lines(up.headers)),
            None => Default::default(),
        };
        conn::Pusher::new(self.0.clone(), index, hook, upgrade)
    }
}

impl WorkerRoute for PusherWorker {
    /// Every upgrade is accepted: a refusal (unknown key, protocol, over
    /// quota) is Pusher's `pusher:error` and close code after the 101,
    /// which pusher-js acts on (an HTTP status would only make it retry).
    fn upgrade<'a>(&'a self, up: Upgrade<'a>) -> LocalFuture<'a, Result<Accepted, Refusal>> {
        let route = &self.0;
        let query = up.uri.query().unwrap_or("");
        let refused = |e: ConnectError| Ok(Accepted::with(conn::Pusher::refused(e)));
        let answer = match parse_connect_request(up.uri.path(), query) {
            Err(e) => refused(e),
            Ok(req) => match route.apps.iter().position(|a| a.config.key == req.app_key) {
                None => refused(ConnectError::AppNotFound),
                Some(index) => {
                    let app = &route.apps[index];
                    let max = app.config.max_connections.unwrap_or(usize::MAX);
                    let taken =
                        app.connections
                            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                                (n < max).then_some(n + 1)
                            });
                    match taken {
                        Err(_) => refused(ConnectError::OverConnectionQuota),
                        Ok(_) => match self.connection(index, &up) {
                            Ok(conn) => Ok(Accepted::with(conn)),
                            Err(_) => {
                                app.connections.fetch_sub(1, Ordering::AcqRel);
                                refused(ConnectError::OverCapacity)
                            }
                        },
                    }
                }
            },
        };
        Box::pin(std::future::ready(answer))
    }

    fn http_body_limit(&self) -> Option<usize> {
        Some(self.0.max_body)
    }

    fn http<'a>(&'a self, req: HttpRequest<'a>) -> LocalFuture<'a, HttpAnswer> {
        Box::pin(async move { api::answer(&self.0, &req).await })
    }
}

/// Frames the core's publications for pusher clients: a cache channel's
/// event is kept as its whole `server::event` JSON, so framing is the text
/// frame around it. Pusher has no join/leave pushes in the core's sense
/// (member events are per user, made by [`conn`]).
pub struct EventFramer;

impl Framer for EventFramer {
    fn publication(&self, _channel: &str, publication: &Publication) -> Bytes {
        Bytes::from(encode::frame(OpCode::Text, &publication.data))
    }

    fn join_leave(&self, _channel: &str, _info: &ClientInfo, _join: bool) -> Option<Bytes> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(index: usize) -> App {
        App {
            config: PusherApp {
                id: index.to_string(),
                key: format!("k{index}"),
                secret_env: "S".into(),
                line: 1,
                client_events: false,
                user_authentication: false,
                max_connections: None,
                client_events_per_second: 10,
                max_presence_members: 100,
                max_channels_per_connection: 100,
                max_payload: 10 * 1024,
                activity_timeout: Duration::from_secs(120),
                webhooks: Vec::new(),
                guest: None,
            },
            secret: b"s".to_vec(),
            index,
            connections: AtomicUsize::new(0),
            counters: Arc::default(),
            webhooks: Default::default(),
        }
    }

    /// Each app's channels are its own namespaces in the route's core, by
    /// kind, and map back only to their own app (the isolation of apps).
    #[test]
    fn core_names_keep_apps_and_kinds_apart() {
        let (one, two, eleven) = (app(1), app(2), app(11));
        let cases = [
            ("room", "p1:room"),
            ("private-room", "p1:private-room"),
            ("presence-room", "r1:presence-room"),
            ("cache-room", "c1:cache-room"),
            ("presence-cache-room", "rc1:presence-cache-room"),
            ("#server-to-user-a:b", "p1:#server-to-user-a:b"),
        ];
        for (name, core) in cases {
            let channel = Channel::parse(name).unwrap();
            assert_eq!(one.core_name(&channel), core);
            assert_eq!(one.pusher_name(core), Some(name));
            assert_eq!(two.pusher_name(core), None);
            assert_eq!(eleven.pusher_name(core), None);
            assert_ne!(two.core_name(&channel), core);
        }
        assert_eq!(one.pusher_name("p11:room"), None);
    }
}
