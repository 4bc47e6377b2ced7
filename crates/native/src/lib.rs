//! Declared behaviours that reply without a guest, one module each, and the
//! route kinds the routes file's `native = "…"` keywords name.
//!
//! Adding one: a module with a [`Behaviour`](weir_reactor::behaviour::Behaviour)
//! (what a connection does) and a [`RouteKind`] (what the route shares, and
//! how an upgrade is answered), its keyword in `config::NativeKind`, and its
//! line in [`route_kind`]. The connection loop does not change.

pub mod centrifugo;
pub mod echo;
pub mod proxy;
pub mod pubsub;
pub mod pusher;
pub mod relay;

use std::rc::Rc;
use std::sync::Arc;
use weir_config::NativeKind;
use weir_pubsub::Topics;
use weir_reactor::behaviour::LocalFuture;
use weir_reactor::kind::{Accepted, Refusal, RouteKind, Upgrade, WorkerRoute, WorkerSetup};
use weir_realtime::Realtime;

/// The route kind a `native = "…"` keyword names, for the route at `path`
/// whose topic namespace is `topics` (Err: why its settings are unusable);
/// `realtime` is the gateway's real-time core.
pub fn route_kind(
    kind: NativeKind,
    path: &str,
    topics: &Arc<Topics>,
    realtime: &Arc<Realtime>,
) -> Result<Arc<dyn RouteKind>, KindError> {
    Ok(match kind {
        NativeKind::Echo => Arc::new(EchoRoute),
        NativeKind::Relay => Arc::new(RelayRoute(Arc::default())),
        NativeKind::PubSub(config) => {
            if config.realtime {
                realtime.attach(topics, Arc::new(pubsub::PlainFramer));
            }
            Arc::new(pubsub::PubSubKind(Arc::new(pubsub::PubSubRoute::new(
                path,
                topics.clone(),
                config,
            ))))
        }
        NativeKind::Centrifugo(config) => Arc::new(centrifugo::CentrifugoKind(Arc::new(
            centrifugo::CentrifugoRoute::new(config, realtime, topics)?,
        ))),
        NativeKind::Proxy(config) => Arc::new(proxy::ProxyRoute::new(config)?),
        NativeKind::Pusher(config) => Arc::new(pusher::PusherKind(Arc::new(
            pusher::PusherRoute::new(&config, topics, realtime, path)?,
        ))),
    })
}

/// Why a native route's settings cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum KindError {
    #[error("upstream_ca {0}")]
    UpstreamCa(#[from] weir_config::tls::CaError),
    #[error(transparent)]
    TokenKeys(#[from] centrifugo::KeysError),
    #[error(transparent)]
    Pusher(#[from] pusher::PusherError),
}

/// `native = "echo"`: nothing shared, every upgrade accepted.
struct EchoRoute;

impl RouteKind for EchoRoute {
    fn on_worker(&self, _: &WorkerSetup) -> Rc<dyn WorkerRoute> {
        Rc::new(EchoRoute)
    }
}

impl WorkerRoute for EchoRoute {
    fn upgrade<'a>(&'a self, _: Upgrade<'a>) -> LocalFuture<'a, Result<Accepted, Refusal>> {
        Box::pin(std::future::ready(Ok(
            Accepted::with(echo::Echo::default()),
        )))
    }
}

/// `native = "relay"`: the route's hub, shared by all workers.
struct RelayRoute(Arc<relay::RelayHub>);

impl RouteKind for RelayRoute {
    fn on_worker(&self, _: &WorkerSetup) -> Rc<dyn WorkerRoute> {
        Rc::new(RelayRoute(self.0.clone()))
    }
}

impl WorkerRoute for RelayRoute {
    fn upgrade<'a>(&'a self, up: Upgrade<'a>) -> LocalFuture<'a, Result<Accepted, Refusal>> {
        // Joined before the 101: relay connections pair in the order their
        // upgrades are answered, whichever worker runs them.
        let relay = self.0.join(up.id, up.outbound.clone());
        Box::pin(std::future::ready(Ok(Accepted::with(relay))))
    }
}
