//! `native = "centrifugo"`: Centrifugo's bidirectional client protocol over
//! WebSocket (JSON encoding), so applications written for Centrifugo's
//! clients (`centrifuge` for JavaScript and its siblings) run unchanged. The
//! route is an adapter over the real-time core (`realtime`): it parses
//! commands, checks tokens and permissions, and frames replies and pushes;
//! the core owns channels, positions, history, presence and delivery.
//!
//! [`protocol`] holds the wire types and codes, [`token`] the JWT check,
//! [`conn`] one connection's behaviour.

pub mod conn;
pub mod protocol;
pub mod token;

use crate::config::CentrifugoConfig;
use crate::pubsub::Topics;
use crate::reactor::behaviour::LocalFuture;
use crate::realtime::{ClientInfo, Framer, Publication, Realtime};
use crate::routes::{Accepted, Refusal, RouteKind, Upgrade, WorkerRoute, WorkerSetup};
use bytes::Bytes;
use std::rc::Rc;
use std::sync::Arc;
use token::Verifier;
use weir_ws::encode;
use weir_ws::frame::OpCode;

/// What the connect reply names as the server's version.
pub const SERVER_VERSION: &str = concat!("weir ", env!("CARGO_PKG_VERSION"));

/// A centrifugo route, shared by workers.
pub struct CentrifugoRoute {
    pub config: Arc<CentrifugoConfig>,
    pub realtime: Arc<Realtime>,
    /// The route's topic namespace: its connections subscribe here, and the
    /// core publishes pushes framed by [`PushFramer`] into it.
    pub topics: Arc<Topics>,
    pub verifier: Verifier,
}

impl CentrifugoRoute {
    /// Reads the HMAC secret from the environment variable the route names.
    pub fn new(
        config: Arc<CentrifugoConfig>,
        realtime: &Arc<Realtime>,
        topics: &Arc<Topics>,
    ) -> Result<CentrifugoRoute, String> {
        let name = &config.token_hmac_secret_env;
        let secret = std::env::var(name).map_err(|_| {
            format!(
                "the environment variable {name} (token_hmac_secret_env) is not set; \
                 export the HMAC secret connection tokens are signed with"
            )
        })?;
        if secret.is_empty() {
            return Err(format!("the environment variable {name} is empty"));
        }
        let verifier = Verifier::hs256(
            secret.as_bytes(),
            config.token_audience.as_deref(),
            config.token_issuer.as_deref(),
        );
        realtime.attach(topics, Arc::new(PushFramer));
        Ok(CentrifugoRoute {
            config,
            realtime: realtime.clone(),
            topics: topics.clone(),
            verifier,
        })
    }
}

/// Shared by every worker.
pub struct CentrifugoKind(pub Arc<CentrifugoRoute>);

impl RouteKind for CentrifugoKind {
    fn on_worker(&self, _: &WorkerSetup) -> Rc<dyn WorkerRoute> {
        Rc::new(CentrifugoKind(self.0.clone()))
    }
}

impl WorkerRoute for CentrifugoKind {
    fn upgrade<'a>(&'a self, _: Upgrade<'a>) -> LocalFuture<'a, Result<Accepted, Refusal>> {
        let conn = conn::Centrifugo::new(self.0.clone());
        Box::pin(std::future::ready(Ok(Accepted::with(conn))))
    }
}

/// Frames the core's events as Centrifugo pushes in WebSocket text frames.
pub struct PushFramer;

impl Framer for PushFramer {
    fn publication(&self, channel: &str, publication: &Publication) -> Bytes {
        let json = protocol::push(channel, "pub", |o| {
            protocol::write_publication(o, publication)
        });
        Bytes::from(encode::frame(OpCode::Text, &json))
    }

    fn join_leave(&self, channel: &str, info: &ClientInfo, join: bool) -> Option<Bytes> {
        let kind = if join { "join" } else { "leave" };
        let json = protocol::push(channel, kind, |o| {
            o.extend_from_slice(b"{\"info\":");
            protocol::write_client_info(o, info);
            o.push(b'}');
        });
        Some(Bytes::from(encode::frame(OpCode::Text, &json)))
    }

    fn discontinuity(&self) -> Option<(u16, &'static str)> {
        let d = protocol::DISCONNECT_INSUFFICIENT_STATE;
        Some((d.code, d.reason))
    }
}
