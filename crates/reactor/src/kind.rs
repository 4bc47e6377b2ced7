//! The route-kind interface: what a `native = "…"` keyword or a
//! `guest = "…"` component becomes ([`RouteKind`], shared by workers), what
//! it is on one worker ([`WorkerRoute`]: answers upgrades with the
//! connection's [`Behaviour`](crate::behaviour::Behaviour)), and what a
//! worker offers kinds when it starts ([`WorkerSetup`]). The table that
//! names every kind is the server's (`weir::routes`); kinds never name
//! each other: two that cooperate meet through a trait here.

use crate::behaviour::LocalFuture;
use crate::outbound::Outbound;
use crate::start::Start;
use http::{HeaderMap, StatusCode, Uri};
use std::any::Any;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;

/// A route kind, shared by every worker.
pub trait RouteKind: Send + Sync {
    /// The route's state on one worker (e.g. its guest instance).
    fn on_worker(&self, worker: &WorkerSetup) -> Rc<dyn WorkerRoute>;

    /// A reload kept the route: take what of `behaviour` (the file's
    /// settings now) applies to a running route, or say why not.
    fn reload(&self, _behaviour: &weir_config::Behaviour) -> Result<(), String> {
        Ok(())
    }

    /// Figures the kind keeps of its own, for `/metrics` (a pusher
    /// route's per-app counters); read at each scrape.
    fn figures(&self) -> Vec<KindFigure> {
        Vec::new()
    }
}

/// One sample of a kind's own metric family; the server adds the `route`
/// label and writes each family's HELP and TYPE once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KindFigure {
    /// The family (`weir_pusher_…`).
    pub name: &'static str,
    /// A counter (else a gauge).
    pub counter: bool,
    pub help: &'static str,
    /// Labels besides `route`, in order.
    pub labels: Vec<(&'static str, String)>,
    pub value: u64,
}

/// A route kind on one worker: answers upgrades, and for the few kinds
/// that serve an HTTP API beside their sockets (pusher), plain requests.
pub trait WorkerRoute {
    /// Before the 101: the connection's behaviour, or a refusal.
    fn upgrade<'a>(&'a self, up: Upgrade<'a>) -> LocalFuture<'a, Result<Accepted, Refusal>>;

    /// The largest body this route reads from a request on its paths that
    /// is not a WebSocket handshake, or None when it answers none (the
    /// default: the server refuses such a request as a bad handshake). The
    /// server reads the body up to this many bytes (413 past it) before
    /// calling [`http`](Self::http), so a kind never holds an unbounded body.
    fn http_body_limit(&self) -> Option<usize> {
        None
    }

    /// A plain HTTP request on the route's paths (only called when
    /// [`http_body_limit`](Self::http_body_limit) is Some).
    fn http<'a>(&'a self, _req: HttpRequest<'a>) -> LocalFuture<'a, HttpAnswer> {
        Box::pin(std::future::ready(HttpAnswer::text(
            StatusCode::NOT_FOUND,
            "not found\n",
        )))
    }
}

/// A plain HTTP request on a route's path, its body read whole (within the
/// route's [`WorkerRoute::http_body_limit`]).
pub struct HttpRequest<'a> {
    pub method: &'a http::Method,
    pub uri: &'a Uri,
    pub headers: &'a HeaderMap,
    pub body: bytes::Bytes,
    pub peer: SocketAddr,
}

/// A route kind's answer to a plain HTTP request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpAnswer {
    pub status: StatusCode,
    pub content_type: &'static str,
    pub body: bytes::Bytes,
}

impl HttpAnswer {
    /// `body` as `application/json`.
    pub fn json(status: StatusCode, body: impl Into<bytes::Bytes>) -> HttpAnswer {
        HttpAnswer {
            status,
            content_type: "application/json",
            body: body.into(),
        }
    }

    /// `body` as UTF-8 text.
    pub fn text(status: StatusCode, body: impl Into<bytes::Bytes>) -> HttpAnswer {
        HttpAnswer {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.into(),
        }
    }
}

/// What a worker offers route kinds when it starts.
///
/// Besides its index, a worker holds per-worker services that the kinds
/// above this crate define and the server starts (the guest scheduler, say):
/// a kind asks for one by type, so this layer never names it.
pub struct WorkerSetup {
    /// The worker's index (0-based).
    pub index: usize,
    services: Vec<Rc<dyn Any>>,
}

impl WorkerSetup {
    pub fn new(index: usize) -> WorkerSetup {
        WorkerSetup {
            index,
            services: Vec::new(),
        }
    }

    /// Offers `service` to the kinds on this worker.
    pub fn with<T: Any>(mut self, service: Rc<T>) -> WorkerSetup {
        self.services.push(service);
        self
    }

    /// The worker's service of type `T`, if the server started one.
    pub fn service<T: Any>(&self) -> Option<Rc<T>> {
        self.services
            .iter()
            .find_map(|s| s.clone().downcast::<T>().ok())
    }
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
    /// How long the upgrade may take (`[server] handshake_timeout`): what
    /// bounds a guest's deferred upgrade.
    pub handshake_timeout: std::time::Duration,
    /// The client came over TLS (a proxy tells its upstream).
    pub secure: bool,
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
