//! The gateway process: binds one `SO_REUSEPORT` listener per worker, builds
//! the route table and the connection registry, and runs the workers
//! ([`worker`]) until shutdown. [`http`] answers each request: health,
//! metrics, refusals, or the upgrade that hands the socket to the
//! connection loop. `admin` is the admin API on a listener of its own,
//! `reload` the deploys, rollbacks and reloads it (and SIGHUP) makes.
//!
//! Thread per core: each worker has its own listener (the kernel spreads
//! connections), its own current-thread runtime and buffer pool. After the
//! 101 the raw `TcpStream` (and its TLS session) is taken back from hyper
//! so the connection loop runs with no layer in between; a WebSocket over
//! HTTP/2 stays a stream of hyper's connection (`reactor::transport`).
//!
//! Shutdown drains: every request gets 503 (`/healthz` too, so a load
//! balancer stops sending clients), idle HTTP connections are closed, every
//! WebSocket connection is sent a 1001 close, and the workers wait for the
//! close handshakes up to `drain_timeout` before they stop.

mod admin;
mod api;
mod head_scan;
mod http;
mod live;
mod reload;
mod upgrade;
mod worker;

pub use admin::{percent_decode, MAX_COMPONENT_BYTES, MIN_TOKEN_BYTES};
pub use api::MIN_API_KEY_BYTES;
pub use reload::{ChangeError, Changes, ReloadReport};

use crate::admission::{self, Admission, Summary};
use crate::metrics::Snapshot;
use crate::routes::Routes;
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

/// Why the gateway could not start.
/// What the public listener answers a path no route matches; `weir deploy`
/// pointed at the public port instead of the admin one recognises it.
pub const NO_ROUTE_BODY: &str = "no route for this path\n";

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
    #[error("[server] tls: {0}")]
    Tls(#[from] weir_config::tls::CertError),
    #[error("[admin] tls: {0}")]
    AdminTls(weir_config::tls::CertError),
    #[error("cannot start worker thread: {0}")]
    Worker(std::io::Error),
    #[error("[admin]: the environment variable {var} must hold the admin token (at least {MIN_TOKEN_BYTES} bytes), e.g. export {var}=$(openssl rand -hex 32)")]
    AdminToken { var: String },
    #[error("[api]: the environment variable {var} must hold the server API key (at least {MIN_API_KEY_BYTES} bytes, not the admin token), e.g. export {var}=$(openssl rand -hex 32)")]
    ApiKey { var: String },
}

/// What all workers share: routes, the registry, limits and counters.
struct Shared {
    /// The route table; a reload swaps in the next one (`reload`).
    routes: arc_swap::ArcSwap<Routes>,
    /// Open WebSocket connections of every worker.
    registry: Arc<Registry>,
    /// Each worker's receive-buffer pool, by worker index.
    pools: Vec<Arc<PoolStats>>,
    /// What the public listener's HTTP front reads for every request.
    front: Front,
    /// Refusals and failures: counted for `/metrics`, summarised for the log.
    counts: Counts,
    /// The drain at shutdown.
    drain: Drain,
    /// What deploys, rollbacks and reloads hold.
    change: ChangeState,
}

/// The public listener's settings, read by `http.rs` and `upgrade.rs`.
struct Front {
    handshake_timeout: Duration,
    admission: Arc<Admission>,
    /// `[server] trusted_proxies`, for the same-origin check.
    trusted_proxies: Vec<weir_config::origin::Cidr>,
    /// TLS termination, when `[server] tls` is set.
    tls: Option<weir_config::tls::Tls>,
    /// Whether the public listener answers `/metrics`.
    public_metrics: bool,
    /// The names the public listener answers to (421 otherwise).
    hosts: weir_config::hosts::AllowedHosts,
    /// `[server] h2_max_streams`.
    h2_max_streams: u32,
    /// How long an HTTP/2 connection may stay without a stream once it has
    /// had one: the server's `idle_timeout`.
    h2_idle_timeout: Duration,
}

/// What the front refused or failed, for `/metrics` and the log.
struct Counts {
    upgrades: AtomicU64,
    refused_over_limit: AtomicU64,
    /// Summaries for the log: refusals over the connection limit, failed
    /// accepts.
    refusals: Summary,
    accept_failures: Summary,
    refused_draining: AtomicU64,
    /// Upgrades refused (403) for a browser origin the route does not allow.
    refused_origin: AtomicU64,
    /// Summaries of those refusals for the log.
    origin_refusals: Summary,
    /// TLS handshakes that failed or timed out.
    tls_handshake_failures: AtomicU64,
}

/// The drain: set once at shutdown, waited on by every worker.
struct Drain {
    draining: AtomicBool,
    drain_timeout: Duration,
    /// Open TCP connections (HTTP or WebSocket), so the drain can wait for them.
    tcp_open: AtomicUsize,
}

/// What a deploy, rollback or reload holds or reads again.
struct ChangeState {
    /// The routes file, for reloads.
    source: Option<PathBuf>,
    /// Held by a deploy, rollback or reload: one change at a time.
    changing: Mutex<()>,
    /// The admin listener's TLS, when `[admin] tls` is set (a reload reads
    /// its certificate again too).
    admin_tls: Option<weir_config::tls::Tls>,
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
    pub fn bind(config: Config) -> Result<Server, ServeError> {
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

/// Binds and runs until `shutdown` flips to true.
pub fn serve(config: Config, shutdown: Shutdown) -> Result<(), ServeError> {
    Server::bind(config)?.run(shutdown)
}

impl Shared {
    fn new(config: &Config, workers: usize) -> Result<Shared, ServeError> {
        weir_reactor::stats::set_workers(workers);
        let registry = Arc::new(Registry::new(workers));
        let descriptors = admission::raise_descriptor_limit();
        let configured = config.server.max_connections;
        let cap = admission::connection_cap(configured, descriptors);
        if let Some(limit) = descriptors.filter(|_| cap < configured || configured == 0) {
            if cap < configured {
                let message = format!(
                    "max_connections = {configured} is more than this process may open \
                     (RLIMIT_NOFILE {limit}); serving at most {cap} connections and keeping {} \
                     descriptors back so refusals still get their 503; raise `ulimit -n` for more",
                    admission::descriptor_reserve(limit)
                );
                // The default is not the operator's choice: nothing to act
                // on unless they asked for more (then it is a warning).
                if configured == weir_config::DEFAULT_MAX_CONNECTIONS {
                    debug!("{message}");
                } else {
                    warn!("{message}");
                }
            } else {
                info!("max_connections = 0: no limit but descriptors; at most {cap} (RLIMIT_NOFILE {limit})");
            }
        }
        Ok(Shared {
            routes: arc_swap::ArcSwap::from_pointee(Routes::build(config, &registry)?),
            registry,
            pools: (0..workers).map(|_| Arc::default()).collect(),
            front: Front {
                handshake_timeout: config.server.handshake_timeout,
                admission: Admission::new(cap, config.server.max_connections_per_ip),
                trusted_proxies: config.server.trusted_proxies.clone(),
                tls: match &config.server.tls {
                    Some(files) => Some(
                        weir_config::tls::Tls::new(
                            files,
                            &[weir_config::tls::ALPN_H2, weir_config::tls::ALPN_HTTP1],
                        )
                        .map_err(ServeError::Tls)?,
                    ),
                    None => None,
                },
                public_metrics: config.server.public_metrics,
                hosts: public_hosts(config),
                h2_max_streams: config.server.h2_max_streams,
                h2_idle_timeout: config.server.limits.idle_timeout,
            },
            counts: Counts {
                upgrades: AtomicU64::new(0),
                refused_over_limit: AtomicU64::new(0),
                refusals: Summary::new(SUMMARY_EVERY),
                accept_failures: Summary::new(SUMMARY_EVERY),
                refused_draining: AtomicU64::new(0),
                refused_origin: AtomicU64::new(0),
                origin_refusals: Summary::new(SUMMARY_EVERY),
                tls_handshake_failures: AtomicU64::new(0),
            },
            drain: Drain {
                draining: AtomicBool::new(false),
                drain_timeout: config.server.drain_timeout,
                tcp_open: AtomicUsize::new(0),
            },
            change: ChangeState {
                source: config.source.clone(),
                changing: Mutex::new(()),
                // HTTP/1.1 only: the admin listener speaks nothing else.
                admin_tls: match config.admin.as_ref().and_then(|a| a.tls.as_ref()) {
                    Some(files) => Some(
                        weir_config::tls::Tls::new(files, &[weir_config::tls::ALPN_HTTP1])
                            .map_err(ServeError::AdminTls)?,
                    ),
                    None => None,
                },
            },
        })
    }

    /// The figures `/metrics` shows.
    fn snapshot(&self) -> Snapshot {
        let queues = self.registry.stats();
        let table = self.routes.load();
        let fanout = table.fanout.stats();
        Snapshot {
            websocket_connections: queues.connections,
            tcp_connections: self.drain.tcp_open.load(Ordering::Relaxed),
            upgrades: self.counts.upgrades.load(Ordering::Relaxed),
            refused_over_limit: self.counts.refused_over_limit.load(Ordering::Relaxed),
            accept_failures: self.counts.accept_failures.total(),
            refused_draining: self.counts.refused_draining.load(Ordering::Relaxed),
            refused_origin: self.counts.refused_origin.load(Ordering::Relaxed),
            tls_handshake_failures: self.counts.tls_handshake_failures.load(Ordering::Relaxed),
            outbound_queued_bytes: queues.queued_bytes,
            outbound_queued_bytes_max: queues.max_queued_bytes,
            receive_buffer_bytes_held: self.pools.iter().map(|p| p.held_bytes()).sum(),
            receive_buffer_bytes_pooled: self.pools.iter().map(|p| p.pooled_bytes()).sum(),
            draining: self.drain.draining.load(Ordering::Relaxed),
            heap: crate::metrics::Heap::read(),
            log_lines_lost: crate::logging::lost_lines(),
            pubsub_dropped: fanout.dropped,
            pubsub_closed_slow: fanout.closed,
            cluster: table.broker.stats(),
            routes: table
                .live_routes()
                .map(|(_, r)| crate::metrics::RouteFigures {
                    route: r.path.clone(),
                    conns: r.stats.sum(),
                    guest: r.guest.as_ref().map(|g| {
                        let (current, kept) = g.versions().list();
                        let (deploys, failed_deploys) = g.versions().deploy_counts();
                        crate::metrics::GuestFigures {
                            serving: current.program.version(),
                            versions: std::iter::once(&current)
                                .chain(&kept)
                                .map(|d| (d.program.version(), d.program.stats()))
                                .collect(),
                            deploys,
                            failed_deploys,
                        }
                    }),
                })
                .collect(),
            guest_routes: table
                .live_routes()
                .filter_map(|(_, r)| r.guest.as_ref())
                .map(|g| crate::metrics::GuestRouteStats {
                    route: g.program().route().to_string(),
                    log_dropped_lines: g.program().log().dropped_lines(),
                    log_dropped_bytes: g.program().log().dropped_bytes(),
                    deadline_trips: g.deadline_trips(),
                    backoff_refused: g.backoff_refused(),
                    realtime_refused: g.realtime().map_or(0, |rt| rt.refused()),
                    kv_refused: g.kv_refusals().counts(),
                    kv: g.kv().map(|kv| {
                        let (keys, bytes) = kv.usage();
                        crate::metrics::KvUsage {
                            keys: keys as u64,
                            bytes,
                            queued_bytes: kv.queued_bytes() as u64,
                        }
                    }),
                })
                .collect(),
        }
    }
}

/// The names the public listener answers to; says so at start when a
/// loopback gateway accepts only loopback names.
fn public_hosts(config: &Config) -> weir_config::hosts::AllowedHosts {
    let hosts = weir_config::hosts::AllowedHosts::new(
        config.server.allowed_hosts.as_deref(),
        config.server.listen,
    );
    if hosts.loopback_only() {
        warn!(
            listen = %config.server.listen,
            "listening on loopback only: requests must name localhost, 127.0.0.1 or [::1] as their \
             Host (others get 421, against DNS rebinding); list other names in [server] allowed_hosts"
        );
    }
    hosts
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
