//! The route table: paths matched to route kinds, built from the routes
//! file and replaced whole by a reload (`server::reload`). A route kind ([`RouteKind`]) is what a `native = "…"` keyword
//! or a `guest = "…"` component becomes; on each worker it answers upgrades
//! ([`WorkerRoute`]) with the connection's [`Behaviour`](weir_reactor::behaviour::Behaviour),
//! or refuses them. Topic namespaces are resolved here: each route has its
//! own unless routes name a shared one (`topics = "name"`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use weir_config::{Behaviour, Config, GuestConfig, Limits, NativeKind};
use weir_guest_runtime::{GuestEngine, GuestRoute, Program};
use weir_native::proxy::{FilterLinks, ProxyRoute};
use weir_pubsub::{Broker, Fanout, LocalBroker, Topics};
use weir_reactor::kind::RouteKind;
use weir_reactor::registry::Registry;
use weir_reactor::stats::RouteStats;

/// Why a route cannot be built or served. Routes-level: the server wraps it
/// (`ServeError::Route`), and a reload reports it per route.
#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    /// The route's settings cannot be served (its path, its kind's options).
    #[error("route {path} (line {line}): {reason}")]
    Route {
        path: String,
        line: usize,
        /// Boxed: the reasons' sources are large, and routes are built rarely.
        reason: Box<RouteReason>,
    },
    #[error(transparent)]
    Guest(#[from] weir_guest_runtime::GuestError),
    /// The `[cluster]` broker's thread could not start.
    #[error("cannot start worker thread: {0}")]
    Broker(std::io::Error),
}

/// What is wrong with one route's settings.
#[derive(Debug, thiserror::Error)]
pub enum RouteReason {
    /// Its path (or its HTTP API's) clashes with another route's.
    #[error(transparent)]
    Path(#[from] matchit::InsertError),
    #[error(
        "the filter {} is a weir:gateway 0.3.0 component; a proxy filter needs 0.4.0 \
         (rebuild it with the current SDK)",
        .0.display()
    )]
    OldFilter(std::path::PathBuf),
    /// A namespace's or a pusher app's guest built for the old world.
    #[error(
        "the guest {} is a weir:gateway 0.3.0 component; an attached guest (a namespace's, \
         a pusher app's) needs 0.4.0 (rebuild it with the current SDK)",
        .0.display()
    )]
    OldAttachedGuest(std::path::PathBuf),
    #[error(transparent)]
    Kind(#[from] weir_native::KindError),
    #[error(transparent)]
    TokenKeys(#[from] weir_native::centrifugo::KeysError),
    #[error(transparent)]
    OutboundCa(#[from] weir_guest_runtime::OutboundCaError),
    #[error(transparent)]
    Kv(#[from] weir_guest_runtime::kv::KvError),
}

/// The error of the route at `path` (`line` of the routes file).
fn refused<E: Into<RouteReason>>(path: &str, line: usize) -> impl FnOnce(E) -> RouteError + '_ {
    move |reason| RouteError::Route {
        path: path.to_string(),
        line,
        reason: Box::new(reason.into()),
    }
}

/// A route as the workers run it.
pub struct Route {
    pub path: String,
    /// Read at each upgrade; a reload replaces them for new connections.
    limits: RwLock<Arc<Limits>>,
    pub kind: Arc<dyn RouteKind>,
    /// What the route's behaviour is, for `GET /routes` ("echo", "guest").
    pub behaviour: String,
    /// The guest route behind `kind`, when it is one (deploys, metrics).
    pub guest: Option<Arc<GuestRoute>>,
    /// Connections and messages, per worker.
    pub stats: Arc<RouteStats>,
    /// The route's topic namespace (its own, or a shared one).
    pub topics: Arc<Topics>,
    /// A second path the route answers plain HTTP requests on (a pusher
    /// route's HTTP API, `…/apps/{*rest}`), served with `path`.
    pub api_path: Option<String>,
    /// Drained from the admin API: upgrades are answered 503 until it is
    /// resumed.
    draining: AtomicBool,
    /// Upgrades per client address (`max_upgrade_rate_per_ip`); empty
    /// (and unallocated) while the route sets no such rate.
    pub upgrade_rates: crate::overload::AddressRates,
}

impl Route {
    /// The limits new connections get.
    pub fn limits(&self) -> Arc<Limits> {
        self.limits.read().expect("limits lock").clone()
    }

    /// New connections get `limits` from now on (open ones keep theirs).
    pub fn set_limits(&self, limits: Limits) {
        *self.limits.write().expect("limits lock") = Arc::new(limits);
    }

    /// Whether upgrades are refused (the route was drained).
    pub fn draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// Refuse upgrades from now on (`true`), or take them again.
    pub fn set_draining(&self, draining: bool) {
        self.draining.store(draining, Ordering::Relaxed);
    }
}

/// The route table. Immutable once built; a reload builds the next one
/// and swaps it in (`server::reload`).
pub struct Routes {
    /// Paths served now, to their route's index.
    pub router: matchit::Router<usize>,
    /// Every route this gateway has served, by index. A removed route keeps
    /// its index and only leaves the router: the registry and topics know
    /// routes by index, so an index never names another route.
    pub routes: Vec<Arc<Route>>,
    /// Indices of the routes served now, in the file's order.
    pub live: Vec<usize>,
    /// Shared topic namespaces by name (`topics = "name"`).
    shared_topics: HashMap<String, Arc<Topics>>,
    /// The workers' publish delivery, shared by every topic namespace.
    pub fanout: Arc<Fanout>,
    /// The real-time core: channels, history and presence, shared by
    /// centrifugo routes, pubsub routes with `realtime = true` and the
    /// server API. A reload keeps it (namespaces are read at start).
    pub realtime: Arc<weir_realtime::Realtime>,
    /// Where topics meet other nodes' (in-process only without `[cluster]`).
    pub broker: Arc<dyn Broker>,
    /// The guest engine, once a route needed it.
    engine: Option<Arc<GuestEngine>>,
    cache_dir: Option<std::path::PathBuf>,
    /// Where guests' key-value stores live.
    state_dir: std::path::PathBuf,
    /// The `[cluster]` section: its Redis server holds the key-value
    /// stores when it names one.
    cluster: Option<weir_config::ClusterConfig>,
    workers: usize,
    /// The namespaces' guests (read at start with the namespaces; each
    /// centrifugo route compiles its own instances of them).
    namespace_guests: Vec<weir_config::NamespaceGuest>,
}

impl Routes {
    /// Builds every route of `config`; guest components are compiled here.
    pub fn build(config: &Config, registry: &Arc<Registry>) -> Result<Routes, RouteError> {
        let (broker, realtime): (Arc<dyn Broker>, _) = match &config.cluster {
            Some(cluster) => {
                let broker = weir_pubsub::cluster::RedisBroker::start(cluster.clone())
                    .map_err(RouteError::Broker)?;
                let store = weir_realtime::redis::RedisStore::start(cluster.clone())
                    .map_err(RouteError::Broker)?;
                let realtime = weir_realtime::Realtime::clustered(
                    config.namespaces.clone(),
                    store,
                    broker.clone(),
                );
                (broker, realtime)
            }
            None => (
                Arc::new(LocalBroker),
                weir_realtime::Realtime::new(config.namespaces.clone()),
            ),
        };
        let mut routes = Routes {
            router: matchit::Router::new(),
            routes: Vec::new(),
            live: Vec::new(),
            shared_topics: HashMap::new(),
            fanout: Arc::new(Fanout::new(config.server.workers)),
            realtime,
            broker,
            engine: None,
            cache_dir: config.server.cache_dir.clone(),
            state_dir: state_dir(config),
            cluster: config.cluster.clone(),
            workers: config.server.workers,
            namespace_guests: config.namespace_guests.clone(),
        };
        for route in &config.routes {
            let index = routes.add(route, registry)?;
            routes.serve(&route.path, index, route.line)?;
        }
        Ok(routes)
    }

    /// The next table: the same routes, none served yet (a reload then
    /// serves the ones the file keeps, and adds new ones).
    pub fn next(&self) -> Routes {
        Routes {
            router: matchit::Router::new(),
            routes: self.routes.clone(),
            live: Vec::new(),
            shared_topics: self.shared_topics.clone(),
            fanout: self.fanout.clone(),
            realtime: self.realtime.clone(),
            broker: self.broker.clone(),
            engine: self.engine.clone(),
            cache_dir: self.cache_dir.clone(),
            state_dir: self.state_dir.clone(),
            cluster: self.cluster.clone(),
            workers: self.workers,
            namespace_guests: self.namespace_guests.clone(),
        }
    }

    /// Serves the route at `index` on `path`.
    pub fn serve(&mut self, path: &str, index: usize, line: usize) -> Result<(), RouteError> {
        let api_path = self.routes.get(index).and_then(|r| r.api_path.clone());
        for path in std::iter::once(path.to_string()).chain(api_path) {
            self.router
                .insert(path.clone(), index)
                .map_err(refused(&path, line))?;
        }
        self.live.push(index);
        Ok(())
    }

    /// The route served on exactly `path`, if any.
    pub fn live_route(&self, path: &str) -> Option<(usize, &Arc<Route>)> {
        self.live_routes().find(|(_, r)| r.path == path)
    }

    /// The routes served now, with their indices, in the file's order.
    pub fn live_routes(&self) -> impl Iterator<Item = (usize, &Arc<Route>)> {
        self.live.iter().map(|&i| (i, &self.routes[i]))
    }

    /// Makes the route `route` describes (compiling its component) under
    /// the next index, not served yet; returns the index.
    pub fn add(
        &mut self,
        route: &weir_config::RouteConfig,
        registry: &Arc<Registry>,
    ) -> Result<usize, RouteError> {
        let index = self.routes.len();
        // Topics are the route's own unless it names a shared namespace;
        // the names are the same on every node of a cluster.
        let (fanout, broker) = (&self.fanout, &self.broker);
        let topics = match &route.topics {
            Some(name) => self
                .shared_topics
                .entry(name.clone())
                .or_insert_with(|| {
                    Topics::new(&format!("shared:{name}"), fanout.clone(), broker.clone())
                })
                .clone(),
            None => Topics::new(
                &format!("route:{}", route.path),
                fanout.clone(),
                broker.clone(),
            ),
        };
        let mut guest_route = None;
        let kind: Arc<dyn RouteKind> = match &route.behaviour {
            Behaviour::Native(NativeKind::Proxy(proxy)) if proxy.filter.is_some() => {
                let filter = proxy.filter.as_ref().expect("matched");
                let links = Arc::new(FilterLinks::new(self.workers));
                let guest = self.guest_route(index, route, filter, &topics, registry)?;
                if guest.program().is_v3() {
                    return Err(RouteError::Route {
                        path: route.path.clone(),
                        line: route.line,
                        reason: Box::new(RouteReason::OldFilter(filter.wasm.clone())),
                    });
                }
                let guest = Arc::new(guest.with_filter_links(links.clone()));
                guest_route = Some(guest.clone());
                let guest = Arc::new(weir_guest_runtime::GuestKind(guest));
                let proxy =
                    ProxyRoute::new(proxy.clone()).map_err(refused(&route.path, route.line))?;
                Arc::new(proxy.with_filter(guest, links))
            }
            Behaviour::Native(NativeKind::Centrifugo(config))
                if !self.namespace_guests.is_empty() =>
            {
                let mut hooks = std::collections::HashMap::new();
                for ns in self.namespace_guests.clone() {
                    let (guest, calls) =
                        self.attached_guest(index, route, &ns.guest, ns.line, &topics, registry)?;
                    hooks.insert(
                        ns.namespace,
                        weir_native::centrifugo::hook::NamespaceHook { guest, calls },
                    );
                }
                let centrifugo = weir_native::centrifugo::CentrifugoRoute::new(
                    config.clone(),
                    &self.realtime,
                    &topics,
                )
                .map_err(refused(&route.path, route.line))?
                .with_hooks(hooks);
                Arc::new(weir_native::centrifugo::CentrifugoKind(Arc::new(
                    centrifugo,
                )))
            }
            Behaviour::Native(NativeKind::Pusher(config))
                if config.apps.iter().any(|app| app.guest.is_some()) =>
            {
                let mut hooks = Vec::with_capacity(config.apps.len());
                for app in &config.apps {
                    let hook = match &app.guest {
                        Some(guest) => {
                            let (guest, calls) = self
                                .attached_guest(index, route, guest, app.line, &topics, registry)?;
                            Some(weir_native::pusher::hook::AppHook { guest, calls })
                        }
                        None => None,
                    };
                    hooks.push(hook);
                }
                let pusher = weir_native::pusher::PusherRoute::new(
                    config,
                    &topics,
                    &self.realtime,
                    &route.path,
                )
                .map_err(weir_native::KindError::from)
                .map_err(refused(&route.path, route.line))?
                .with_hooks(hooks);
                Arc::new(weir_native::pusher::PusherKind(Arc::new(pusher)))
            }
            Behaviour::Native(native) => {
                weir_native::route_kind(native.clone(), &route.path, &topics, &self.realtime)
                    .map_err(refused(&route.path, route.line))?
            }
            Behaviour::Guest(guest) => {
                let guest = Arc::new(self.guest_route(index, route, guest, &topics, registry)?);
                guest_route = Some(guest.clone());
                Arc::new(weir_guest_runtime::GuestKind(guest))
            }
        };
        self.routes.push(Arc::new(Route {
            path: route.path.clone(),
            limits: RwLock::new(Arc::new(route.limits.clone())),
            kind,
            behaviour: behaviour_name(&route.behaviour),
            guest: guest_route,
            stats: Arc::new(RouteStats::new(self.workers)),
            topics,
            api_path: api_path(route),
            draining: AtomicBool::new(false),
            upgrade_rates: Default::default(),
        }));
        Ok(index)
    }
}

impl Routes {
    /// A guest attached to a native kind (a namespace's, a Pusher app's,
    /// declared at `line`): its guest route, answering questions through
    /// the returned calls; its other commands are ignored.
    fn attached_guest(
        &mut self,
        index: usize,
        route: &weir_config::RouteConfig,
        config: &GuestConfig,
        line: usize,
        topics: &Arc<Topics>,
        registry: &Arc<Registry>,
    ) -> Result<
        (
            Arc<dyn weir_reactor::attached::AttachedGuest>,
            Arc<weir_realtime::verdict::RtCalls>,
        ),
        RouteError,
    > {
        let guest = self.guest_route(index, route, config, topics, registry)?;
        if guest.program().is_v3() {
            return Err(RouteError::Route {
                path: route.path.clone(),
                line,
                reason: Box::new(RouteReason::OldAttachedGuest(config.wasm.clone())),
            });
        }
        let calls = Arc::new(weir_realtime::verdict::RtCalls::default());
        let guest = Arc::new(guest.with_rt_calls(calls.clone()));
        Ok((Arc::new(weir_guest_runtime::GuestKind(guest)), calls))
    }

    /// The guest route of `route` at `index` running `guest` (a guest
    /// route's component, or a proxy route's filter): compiled here.
    fn guest_route(
        &mut self,
        index: usize,
        route: &weir_config::RouteConfig,
        guest: &GuestConfig,
        topics: &Arc<Topics>,
        registry: &Arc<Registry>,
    ) -> Result<GuestRoute, RouteError> {
        let engine = match &self.engine {
            Some(engine) => engine.clone(),
            None => {
                let engine = GuestEngine::new(self.cache_dir.clone())?;
                self.engine = Some(engine.clone());
                engine
            }
        };
        let program =
            Program::load(&engine, &route.path, guest).map_err(|e| e.at_line(route.line))?;
        weir_guest_runtime::check_outbound_ca(&guest.outbound)
            .map_err(refused(&route.path, route.line))?;
        let kv = match &guest.kv {
            Some(name) => Some(
                weir_guest_runtime::kv::KvStore::open(
                    &self.state_dir,
                    self.cluster.as_ref(),
                    &route.path,
                    name,
                    guest.kv_quota,
                )
                .map_err(refused(&route.path, route.line))?,
            ),
            None => None,
        };
        // `realtime = true`: the topics are the core's channels, framed
        // as a realtime pubsub route's are (plain text frames).
        let realtime = guest.realtime.then(|| {
            self.realtime
                .attach(topics, Arc::new(weir_native::pubsub::PlainFramer));
            weir_guest_runtime::GuestRealtime::new(
                self.realtime.clone(),
                route.path.as_str().into(),
            )
        });
        Ok(
            GuestRoute::new(index, program, topics.clone(), registry.clone())
                .with_kv(kv)
                .with_realtime(realtime),
        )
    }
}

/// `[server] state_dir`, or `weir-state` beside the routes file (the
/// working directory when the config has no file).
pub(crate) fn state_dir(config: &Config) -> std::path::PathBuf {
    config.server.state_dir.clone().unwrap_or_else(|| {
        let dir = config
            .source
            .as_deref()
            .and_then(std::path::Path::parent)
            .unwrap_or(std::path::Path::new(""));
        dir.join("weir-state")
    })
}

/// A route's behaviour as `GET /routes` names it: the native keyword
/// (`echo`, `relay`; `proxy+filter` for a proxy route with a filter, so a
/// reload that adds or removes a filter makes a new route), or `guest`.
/// The HTTP API path of a pusher route: its path with `/app/{key}`
/// replaced by `/apps/{*rest}` (pusher server libraries call
/// `/apps/{id}/events` beside the `/app/{key}` clients connect to).
fn api_path(route: &weir_config::RouteConfig) -> Option<String> {
    match &route.behaviour {
        Behaviour::Native(NativeKind::Pusher(_)) => route
            .path
            .strip_suffix(weir_config::PUSHER_PATH_TAIL)
            .map(|prefix| format!("{prefix}/apps/{{*rest}}")),
        _ => None,
    }
}

pub fn behaviour_name(behaviour: &Behaviour) -> String {
    match behaviour {
        Behaviour::Native(weir_config::NativeKind::Echo) => "echo".into(),
        Behaviour::Native(weir_config::NativeKind::Relay) => "relay".into(),
        Behaviour::Native(weir_config::NativeKind::PubSub(_)) => "pubsub".into(),
        Behaviour::Native(weir_config::NativeKind::Proxy(p)) if p.filter.is_some() => {
            "proxy+filter".into()
        }
        Behaviour::Native(weir_config::NativeKind::Proxy(_)) => "proxy".into(),
        Behaviour::Native(weir_config::NativeKind::Centrifugo(_)) => "centrifugo".into(),
        Behaviour::Native(weir_config::NativeKind::Pusher(_)) => "pusher".into(),
        Behaviour::Guest(_) => "guest".into(),
    }
}
