//! `native = "centrifugo"`: Centrifugo's bidirectional client protocol over
//! WebSocket (JSON encoding), so applications written for Centrifugo's
//! clients (`centrifuge` for JavaScript and its siblings) run unchanged. The
//! route is an adapter over the real-time core (`realtime`): it parses
//! commands, checks tokens and permissions, and frames replies and pushes;
//! the core owns channels, positions, history, presence and delivery.
//!
//! [`protocol`] holds the wire types and codes, [`token`] the JWT check,
//! [`conn`] one connection's behaviour, [`hook`] the namespaces' guests
//! (subscribe authorisation and publication filtering).

pub mod conn;
pub mod hook;
pub mod protocol;
pub mod token;

use bytes::Bytes;
use std::rc::Rc;
use std::sync::Arc;
use token::Verifier;
use weir_config::CentrifugoConfig;
use weir_pubsub::Topics;
use weir_reactor::behaviour::LocalFuture;
use weir_reactor::kind::{Accepted, Refusal, RouteKind, Upgrade, WorkerRoute, WorkerSetup};
use weir_realtime::{ClientInfo, Framer, Publication, Realtime};
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
    /// Replaced by a reload (the secret and the JWKS file are read again).
    pub verifier: arc_swap::ArcSwap<Verifier>,
    /// The guests of namespaces that name one, by namespace (`hook`).
    pub hooks: std::collections::HashMap<String, hook::NamespaceHook>,
}

impl CentrifugoRoute {
    /// Reads the token keys (see [`verifier`]).
    pub fn new(
        config: Arc<CentrifugoConfig>,
        realtime: &Arc<Realtime>,
        topics: &Arc<Topics>,
    ) -> Result<CentrifugoRoute, KeysError> {
        let verifier = verifier(&config)?;
        realtime.attach(topics, Arc::new(PushFramer));
        Ok(CentrifugoRoute {
            config,
            realtime: realtime.clone(),
            topics: topics.clone(),
            verifier: arc_swap::ArcSwap::from_pointee(verifier),
            hooks: Default::default(),
        })
    }

    /// The route with its namespaces' guests.
    pub fn with_hooks(
        mut self,
        hooks: std::collections::HashMap<String, hook::NamespaceHook>,
    ) -> Self {
        self.hooks = hooks;
        self
    }
}

/// The route's token checker: the HMAC secret from the environment
/// variable the route names, the public keys of its JWKS file and its PEM
/// public key file. One of them is needed; the secret may be missing only
/// when there is a key file.
pub(crate) fn verifier(config: &CentrifugoConfig) -> Result<Verifier, KeysError> {
    let name = &config.token_hmac_secret_env;
    let secret = std::env::var(name).ok().filter(|s| !s.is_empty());
    let (aud, iss) = (
        config.token_audience.as_deref(),
        config.token_issuer.as_deref(),
    );
    let (jwks, pem) = (&config.token_jwks_file, &config.token_public_key_file);
    let mut verifier = match secret {
        Some(secret) => Verifier::hs256(secret.as_bytes(), aud, iss),
        None if jwks.is_some() || pem.is_some() => Verifier::public_only(aud, iss),
        None => return Err(KeysError::NoSecret(name.clone())),
    };
    type AddKeys = fn(Verifier, &[u8]) -> Result<Verifier, token::KeyError>;
    let files: [(&str, _, AddKeys); 2] = [
        ("token_jwks_file", jwks, Verifier::with_jwks),
        ("token_public_key_file", pem, Verifier::with_pem),
    ];
    for (setting, file, add) in files {
        let Some(path) = file else { continue };
        let bytes = std::fs::read(path).map_err(|source| KeysError::Unreadable {
            setting,
            path: path.clone(),
            source,
        })?;
        verifier = add(verifier, &bytes).map_err(|source| KeysError::Bad {
            setting,
            path: path.clone(),
            source,
        })?;
    }
    Ok(verifier)
}

/// Why a centrifugo route's token keys cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum KeysError {
    #[error(
        "the environment variable {0} (token_hmac_secret_env) is not set or empty; \
         export the HMAC secret connection tokens are signed with, or name a \
         token_jwks_file or token_public_key_file"
    )]
    NoSecret(String),
    #[error("{setting} {}: {source}", path.display())]
    Unreadable {
        setting: &'static str,
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("{setting} {}: {source}", path.display())]
    Bad {
        setting: &'static str,
        path: std::path::PathBuf,
        source: token::KeyError,
    },
}

/// Shared by every worker.
pub struct CentrifugoKind(pub Arc<CentrifugoRoute>);

impl RouteKind for CentrifugoKind {
    fn on_worker(&self, worker: &WorkerSetup) -> Rc<dyn WorkerRoute> {
        Rc::new(CentrifugoWorker {
            hooks: Rc::new(hook::WorkerHooks::on_worker(&self.0, worker)),
            route: self.0.clone(),
        })
    }

    /// A reload reads the token keys again (a rotated JWKS file, a new
    /// secret): new connections and refreshes use them.
    fn reload(&self, behaviour: &weir_config::Behaviour) -> Result<(), String> {
        let weir_config::Behaviour::Native(weir_config::NativeKind::Centrifugo(config)) = behaviour
        else {
            return Ok(());
        };
        // The route-kind interface reports a reload's refusal as text.
        let verifier = verifier(config).map_err(|e| e.to_string())?;
        self.0.verifier.store(Arc::new(verifier));
        Ok(())
    }
}

/// A centrifugo route on one worker: with its namespaces' guests' slots.
struct CentrifugoWorker {
    route: Arc<CentrifugoRoute>,
    hooks: Rc<hook::WorkerHooks>,
}

impl WorkerRoute for CentrifugoWorker {
    fn upgrade<'a>(&'a self, _: Upgrade<'a>) -> LocalFuture<'a, Result<Accepted, Refusal>> {
        let conn = conn::Centrifugo::new(self.route.clone(), self.hooks.clone());
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
