//! The route table: paths matched to route kinds, built once from the
//! routes file. A route kind ([`RouteKind`]) is what a `native = "…"` keyword
//! or a `guest = "…"` component becomes; on each worker it answers upgrades
//! ([`WorkerRoute`]) with the connection's [`Behaviour`](crate::reactor::behaviour::Behaviour),
//! or refuses them. Topic namespaces are resolved here: each route has its
//! own unless routes name a shared one (`topics = "name"`).

use crate::config::{Behaviour, Config, Limits};
use crate::guest::{GuestEngine, GuestRoute, Program, Scheduler};
use crate::pubsub::{Broker, Fanout, LocalBroker, Topics};
use crate::reactor::behaviour::{LocalFuture, Start};
use crate::reactor::outbound::Outbound;
use crate::registry::Registry;
use crate::server::ServeError;
use http::{HeaderMap, StatusCode, Uri};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;

/// A route kind, shared by every worker.
pub trait RouteKind: Send + Sync {
    /// The route's state on one worker (e.g. its guest instance).
    fn on_worker(&self, worker: &WorkerSetup) -> Rc<dyn WorkerRoute>;
}

/// A route kind on one worker: answers upgrades.
pub trait WorkerRoute {
    /// Before the 101: the connection's behaviour, or a refusal.
    fn upgrade<'a>(&'a self, up: Upgrade<'a>) -> LocalFuture<'a, Result<Accepted, Refusal>>;
}

/// What a worker offers route kinds when it starts.
pub struct WorkerSetup {
    /// Where guest routes register their instance on this worker.
    pub guests: Rc<Scheduler>,
}

/// An upgrade request, as a route kind sees it.
pub struct Upgrade<'a> {
    /// The connection's id, if it is accepted.
    pub id: u64,
    pub uri: &'a Uri,
    /// The route's path parameters (`/chat/{room}` matched by `/chat/lobby`:
    /// `("room", "lobby")`), in the order the path declares them, not
    /// percent-decoded.
    pub params: &'a [(&'a str, &'a str)],
    pub headers: &'a HeaderMap,
    pub peer: SocketAddr,
    /// The connection's outbound queue, made before the 101 so a route can
    /// hand it to others (a relay partner) at once.
    pub outbound: &'a Arc<Outbound>,
}

/// An accepted upgrade.
pub struct Accepted {
    /// The subprotocol the route chose, overriding the server's pick.
    pub protocol: Option<String>,
    pub behaviour: Box<dyn Start>,
}

impl Accepted {
    pub fn with(behaviour: impl Start + 'static) -> Accepted {
        Accepted {
            protocol: None,
            behaviour: Box::new(behaviour),
        }
    }
}

/// A refused upgrade: the HTTP answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub status: StatusCode,
    pub body: &'static str,
    /// Seconds for a Retry-After header (429, 503).
    pub retry_after: Option<u64>,
}

/// A route as the workers run it.
pub struct Route {
    pub path: String,
    pub limits: Arc<Limits>,
    pub kind: Arc<dyn RouteKind>,
}

pub struct Routes {
    pub router: matchit::Router<usize>,
    pub routes: Vec<Route>,
    /// Every guest route, for `/metrics`.
    pub guest_routes: Vec<Arc<GuestRoute>>,
    /// The workers' publish delivery, shared by every topic namespace.
    pub fanout: Arc<Fanout>,
    /// Where topics meet other nodes' (in-process only without `[cluster]`).
    pub broker: Arc<dyn Broker>,
}

impl Routes {
    /// Builds every route of `config`; guest components are compiled here.
    pub fn build(config: &Config, registry: &Arc<Registry>) -> Result<Routes, ServeError> {
        let mut router = matchit::Router::new();
        let mut routes = Vec::new();
        let mut shared_topics: HashMap<&str, Arc<Topics>> = HashMap::new();
        let fanout = Arc::new(Fanout::new(config.server.workers));
        let broker: Arc<dyn Broker> = match &config.cluster {
            Some(cluster) => crate::pubsub::cluster::RedisBroker::start(cluster.clone())
                .map_err(ServeError::Worker)?,
            None => Arc::new(LocalBroker),
        };
        let mut guest_routes = Vec::new();
        let has_guests = config
            .routes
            .iter()
            .any(|r| matches!(r.behaviour, Behaviour::Guest(_)));
        let engine = if has_guests {
            Some(GuestEngine::new(config.server.cache_dir.clone())?)
        } else {
            None
        };
        for (index, route) in config.routes.iter().enumerate() {
            let route_error = |reason: String| ServeError::Route {
                path: route.path.clone(),
                line: route.line,
                reason,
            };
            router
                .insert(route.path.clone(), index)
                .map_err(|e| route_error(e.to_string()))?;
            // Topics are the route's own unless it names a shared namespace;
            // the names are the same on every node of a cluster.
            let topics = match &route.topics {
                Some(name) => shared_topics
                    .entry(name.as_str())
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
            let kind: Arc<dyn RouteKind> = match &route.behaviour {
                Behaviour::Native(native) => {
                    crate::native::route_kind(*native, &route.path, &topics)
                }
                Behaviour::Guest(guest) => {
                    let engine = engine
                        .as_ref()
                        .expect("engine exists when a route is a guest");
                    let program = Program::load(engine, &route.path, guest)
                        .map_err(|e| e.at_line(route.line))?;
                    let guest = Arc::new(GuestRoute::new(index, program, topics, registry.clone()));
                    guest_routes.push(guest.clone());
                    Arc::new(guest)
                }
            };
            routes.push(Route {
                path: route.path.clone(),
                limits: Arc::new(route.limits.clone()),
                kind,
            });
        }
        Ok(Routes {
            router,
            routes,
            guest_routes,
            fanout,
            broker,
        })
    }
}
