//! The gateway process: binds one `SO_REUSEPORT` listener per worker, builds
//! the route table and the connection registry, and runs the workers
//! ([`worker`]) until shutdown. [`http`] answers each request: health,
//! metrics, refusals, or the upgrade that hands the socket to the
//! connection loop. `admin` is the admin API on a listener of its own,
//! `reload` the deploys, rollbacks and reloads it (and SIGHUP) makes;
//! [`fleet`] takes deploys and rollbacks to every node with `[cluster]
//! redis`.
//!
//! Thread per core: each worker has its own listener (the kernel spreads
//! connections), its own current-thread runtime and buffer pool. After the
//! 101 the raw `TcpStream` (and its TLS session) is taken back from hyper
//! so the connection loop runs with no layer in between; a WebSocket over
//! HTTP/2 stays a stream of hyper's connection (`reactor::transport`).
//!
//! Shutdown drains: every request gets 503 (`/healthz` and `/readyz` too,
//! so a load balancer stops sending clients), idle HTTP connections are
//! closed, every WebSocket connection is sent a 1012 close, in slices spread
//! over `drain_timeout` (`worker::drain_paced`), and the workers wait for the
//! close handshakes up to `drain_timeout` before they stop.

mod admin;
mod api;
pub mod fleet;
mod head_scan;
mod http;
mod live;
mod reload;
mod shared;
mod upgrade;
mod worker;

pub use admin::{percent_decode, MAX_COMPONENT_BYTES, MIN_TOKEN_BYTES, WHO_HEADER};
pub use api::MIN_API_KEY_BYTES;
pub use reload::{ChangeError, Changes, ReloadReport};

use crate::admission::{self, Admission, Summary};
use crate::metrics::Snapshot;
use crate::routes::Routes;
use shared::Shared;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::{debug, info, warn};
use weir_config::Config;
use weir_guest_runtime::GuestError;
use weir_reactor::buffer::PoolStats;
use weir_reactor::registry::Registry;

/// Flips to true when the gateway should drain and stop (see the module
/// docs). A dropped sender also means stop.
pub type Shutdown = tokio::sync::watch::Receiver<bool>;

/// How often a repeated event (refusals, failed accepts) is summarised in
/// the log.
const SUMMARY_EVERY: Duration = Duration::from_secs(10);

/// What the public listener answers a path no route matches; `weir deploy`
/// pointed at the public port instead of the admin one recognises it.
pub const NO_ROUTE_BODY: &str = "no route for this path\n";

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot listen on {addr}: another process is listening there (another weir?); stop it, or pick a free address with --listen (e.g. --listen 127.0.0.1:9011)")]
    InUse { addr: SocketAddr },
    #[error(transparent)]
    Route(#[from] crate::routes::RouteError),
    #[error(transparent)]
    Guest(#[from] GuestError),
    #[error(transparent)]
    Oci(#[from] crate::oci::OciError),
    #[error("[server] tls: {0}")]
    Tls(#[from] weir_config::tls::CertError),
    #[error("[admin] tls: {0}")]
    AdminTls(weir_config::tls::CertError),
    #[error("cannot start worker thread: {0}")]
    Worker(std::io::Error),
    #[error("[server] io = \"uring\": io_uring cannot be used here ({0}); write io = \"auto\" to fall back to epoll")]
    Uring(std::io::Error),
    #[error("[admin]: the environment variable {var} must hold the admin token (at least {MIN_TOKEN_BYTES} bytes), e.g. export {var}=$(openssl rand -hex 32)")]
    AdminToken { var: String },
    #[error("[api]: the environment variable {var} must hold the server API key (at least {MIN_API_KEY_BYTES} bytes, not the admin token), e.g. export {var}=$(openssl rand -hex 32)")]
    ApiKey { var: String },
}

/// A bound gateway, ready to run. Binding first lets callers (tests, `--listen
/// 127.0.0.1:0`) learn the address before serving.
pub struct Server {
    listeners: Vec<std::net::TcpListener>,
    shared: Arc<Shared>,
    local_addr: SocketAddr,
    /// The admin listener, its token and the names it answers to, when
    /// `[admin]` is configured.
    admin: Option<(
        std::net::TcpListener,
        Arc<str>,
        weir_config::hosts::AllowedHosts,
    )>,
    /// The server API's listener and state, when `[api]` is configured.
    api: Option<(std::net::TcpListener, api::Api)>,
}

impl Server {
    /// Binds one listener per worker on the configured address.
    pub fn bind(mut config: Config) -> Result<Server, ServeError> {
        // `oci://` guests become cached files before anything is compiled.
        crate::oci::resolve_guests(&mut config)?;
        let workers = config.server.workers.max(1);
        let shared = Arc::new(Shared::new(&config, workers)?);
        if !config.server.reuse_port {
            refuse_an_address_in_use(config.server.listen)?;
        }
        let first = listen(config.server.listen, config.server.listen_backlog)?;
        let local_addr = first.local_addr().map_err(|source| ServeError::Bind {
            addr: config.server.listen,
            source,
        })?;
        let mut listeners = vec![first];
        for _ in 1..workers {
            listeners.push(listen(local_addr, config.server.listen_backlog)?);
        }
        join_fleet(&config, &shared, local_addr.port());
        let admin = match &config.admin {
            Some(admin) => {
                let token = std::env::var(&admin.token_env)
                    .ok()
                    .filter(|t| t.len() >= MIN_TOKEN_BYTES)
                    .ok_or_else(|| ServeError::AdminToken {
                        var: admin.token_env.clone(),
                    })?;
                // A plain bind (no SO_REUSEPORT): a second gateway must
                // not share the admin port unnoticed.
                let listener = std::net::TcpListener::bind(admin.listen)
                    .and_then(|l| l.set_nonblocking(true).map(|()| l))
                    .map_err(|source| ServeError::Bind {
                        addr: admin.listen,
                        source,
                    })?;
                // The server's allowed_hosts; unset, a loopback admin
                // listener answers only to loopback names.
                let hosts = weir_config::hosts::AllowedHosts::new(
                    config.server.allowed_hosts.as_deref(),
                    admin.listen,
                );
                Some((listener, Arc::from(token), hosts))
            }
            None => None,
        };
        let api = match &config.api {
            Some(conf) => {
                let key = std::env::var(&conf.key_env)
                    .ok()
                    .filter(|k| k.len() >= MIN_API_KEY_BYTES)
                    .filter(|k| {
                        // The API key must not open the admin API too.
                        let admin_env = config.admin.as_ref().map(|a| a.token_env.as_str());
                        admin_env.is_none_or(|var| std::env::var(var).ok().as_ref() != Some(k))
                    })
                    .ok_or_else(|| ServeError::ApiKey {
                        var: conf.key_env.clone(),
                    })?;
                let listener = std::net::TcpListener::bind(conf.listen)
                    .and_then(|l| l.set_nonblocking(true).map(|()| l))
                    .map_err(|source| ServeError::Bind {
                        addr: conf.listen,
                        source,
                    })?;
                let state = api::Api {
                    realtime: shared.routes.load().realtime.clone(),
                    key: Arc::from(key),
                    hosts: weir_config::hosts::AllowedHosts::new(
                        config.server.allowed_hosts.as_deref(),
                        conf.listen,
                    ),
                    max_body: conf.max_body,
                    max_connections: conf.max_connections,
                    started: std::time::Instant::now(),
                };
                Some((listener, state))
            }
            None => None,
        };
        Ok(Server {
            listeners,
            shared,
            local_addr,
            admin,
            api,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Where the admin API listens, when it does.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin
            .as_ref()
            .and_then(|(l, _, _)| l.local_addr().ok())
    }

    /// Where the server API listens, when it does.
    pub fn api_addr(&self) -> Option<SocketAddr> {
        self.api.as_ref().and_then(|(l, _)| l.local_addr().ok())
    }

    /// Deploys, rollbacks and reloads of this gateway (SIGHUP uses it).
    pub fn changes(&self) -> Changes {
        Changes {
            shared: self.shared.clone(),
        }
    }

    /// Runs the workers until `shutdown`; returns when all have stopped.
    pub fn run(self, shutdown: Shutdown) -> Result<(), ServeError> {
        info!(addr = %self.local_addr, workers = self.listeners.len(), "weir listening");
        let mut threads = Vec::new();
        if let Some((listener, token, hosts)) = self.admin {
            let (changes, shutdown, public) = (
                Changes {
                    shared: self.shared.clone(),
                },
                shutdown.clone(),
                self.local_addr,
            );
            let thread = std::thread::Builder::new()
                .name("weir-admin".into())
                .spawn(move || admin::run(listener, changes, token, hosts, public, shutdown))
                .map_err(ServeError::Worker)?;
            threads.push(thread);
        }
        if let Some((listener, state)) = self.api {
            let shutdown = shutdown.clone();
            let thread = std::thread::Builder::new()
                .name("weir-api".into())
                .spawn(move || api::run(listener, state, shutdown))
                .map_err(ServeError::Worker)?;
            threads.push(thread);
        }
        if self.shared.change.fleet.get().is_some() {
            let changes = Changes {
                shared: self.shared.clone(),
            };
            let shutdown = shutdown.clone();
            let thread = std::thread::Builder::new()
                .name("weir-fleet".into())
                .spawn(move || fleet::run(changes, shutdown))
                .map_err(ServeError::Worker)?;
            threads.push(thread);
        }
        for (index, listener) in self.listeners.into_iter().enumerate() {
            let shared = self.shared.clone();
            let shutdown = shutdown.clone();
            let thread = std::thread::Builder::new()
                .name(format!("weir-worker-{index}"))
                .spawn(move || worker::run(index, listener, shared, shutdown))
                .map_err(ServeError::Worker)?;
            threads.push(thread);
        }
        for t in threads {
            let _ = t.join();
        }
        info!("weir stopped");
        Ok(())
    }
}

/// With `[cluster] redis`, makes this node part of the fleet and takes
/// the fleet's desired versions before any request is served (the
/// listeners are bound but no worker accepts yet). A Redis that does not
/// answer leaves the node serving its routes file's components and
/// `/readyz` at 503 until a reconcile succeeds (the fleet thread retries
/// every `fleet::RECONCILE_EVERY`).
fn join_fleet(config: &Config, shared: &Arc<Shared>, port: u16) {
    let url = match &config.cluster {
        Some(weir_config::ClusterConfig::Redis(url)) => url,
        Some(weir_config::ClusterConfig::RedisCluster(_)) => {
            warn!("fleet deploys need [cluster] redis (one server); with redis_cluster each node's deploys stay its own");
            return;
        }
        None => return,
    };
    let fleet = match fleet::Fleet::new(url, fleet::node_name(port)) {
        Ok(fleet) => Arc::new(fleet),
        Err(e) => {
            warn!("fleet deploys off: {e}");
            return;
        }
    };
    info!(
        node = fleet.node(),
        "joining the fleet: taking its desired versions before serving"
    );
    let _ = shared.change.fleet.set(fleet);
    let changes = Changes {
        shared: shared.clone(),
    };
    if let Err(e) = changes.reconcile() {
        warn!("fleet: not converged at start ({e}); /readyz answers 503 until it is");
    }
}

/// Binds and runs until `shutdown` flips to true.
pub fn serve(config: Config, shutdown: Shutdown) -> Result<(), ServeError> {
    Server::bind(config)?.run(shutdown)
}

/// Fail if another process listens on `addr`. The workers' listeners use
/// `SO_REUSEPORT`, which would let them join another process's listeners
/// on the same address (the kernel would split connections between the two
/// gateways); a socket without it cannot bind while anything listens
/// there, so it is the probe. `SO_REUSEADDR` keeps connections in
/// TIME_WAIT from failing it. Port 0 picks a free port: nothing to probe.
fn refuse_an_address_in_use(addr: SocketAddr) -> Result<(), ServeError> {
    use socket2::{Domain, Protocol, Socket, Type};
    if addr.port() == 0 {
        return Ok(());
    }
    let probe = || -> std::io::Result<()> {
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        socket.set_reuse_address(true)?;
        socket.bind(&addr.into())
    };
    match probe() {
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => Err(ServeError::InUse { addr }),
        Err(source) => Err(ServeError::Bind { addr, source }),
        Ok(()) => Ok(()),
    }
}

/// A listening socket that shares its port with the other workers'.
fn listen(addr: SocketAddr, backlog: u32) -> Result<std::net::TcpListener, ServeError> {
    use socket2::{Domain, Protocol, Socket, Type};
    let bind = || -> std::io::Result<std::net::TcpListener> {
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        socket.set_reuse_address(true)?;
        socket.set_reuse_port(true)?;
        socket.set_nonblocking(true)?;
        socket.bind(&addr.into())?;
        socket.listen(backlog as i32)?;
        Ok(socket.into())
    };
    bind().map_err(|source| ServeError::Bind { addr, source })
}

/// The current-thread runtime of a listener's thread (a worker, the admin
/// listener, the server API), or None once the failure is logged.
fn thread_runtime(what: &str) -> Option<tokio::runtime::Runtime> {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => Some(rt),
        Err(e) => {
            warn!(error = %e, thread = what, "runtime failed to start");
            None
        }
    }
}
