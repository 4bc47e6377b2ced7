//! What every worker, the admin listener and reloads share: the route
//! table, the registry, the pools, and — split by who reads them — the
//! HTTP front's settings, the refusal counts, the drain and what a change
//! holds; and the `/metrics` snapshot made from them.

use super::*;

/// What all workers share: routes, the registry, limits and counters.
pub(super) struct Shared {
    /// The route table; a reload swaps in the next one (`reload`).
    pub(super) routes: arc_swap::ArcSwap<Routes>,
    /// Open WebSocket connections of every worker.
    pub(super) registry: Arc<Registry>,
    /// Each worker's receive-buffer pool, by worker index.
    pub(super) pools: Vec<Arc<PoolStats>>,
    /// Each worker's plane figures (`[server] io = "epoll"`).
    pub(super) planes: Vec<Arc<weir_reactor::plane::PlaneStats>>,
    /// What the public listener's HTTP front reads for every request.
    pub(super) front: Front,
    /// Refusals and failures: counted for `/metrics`, summarised for the log.
    pub(super) counts: Counts,
    /// The drain at shutdown.
    pub(super) drain: Drain,
    /// What deploys, rollbacks and reloads hold.
    pub(super) change: ChangeState,
}

/// The public listener's settings, read by `http.rs` and `upgrade.rs`.
pub(super) struct Front {
    pub(super) handshake_timeout: Duration,
    pub(super) admission: Arc<Admission>,
    /// `[server] trusted_proxies`, for the same-origin check.
    pub(super) trusted_proxies: Vec<weir_config::origin::Cidr>,
    /// TLS termination, when `[server] tls` is set.
    pub(super) tls: Option<weir_config::tls::Tls>,
    /// Whether the public listener answers `/metrics`.
    pub(super) public_metrics: bool,
    /// The names the public listener answers to (421 otherwise).
    pub(super) hosts: weir_config::hosts::AllowedHosts,
    /// `[server] h2_max_streams`.
    pub(super) h2_max_streams: u32,
    /// How long an HTTP/2 connection may stay without a stream once it has
    /// had one: the server's `idle_timeout`.
    pub(super) h2_idle_timeout: Duration,
    /// `[server] io`: the loop upgraded connections run on.
    pub(super) io: weir_config::Io,
    /// `[server] max_upgrade_rate`: the gateway's upgrades per second.
    pub(super) upgrade_rate: Option<crate::overload::GlobalRate>,
}

/// What the front refused or failed, for `/metrics` and the log.
pub(super) struct Counts {
    pub(super) upgrades: AtomicU64,
    pub(super) refused_over_limit: AtomicU64,
    /// Summaries for the log: refusals over the connection limit, failed
    /// accepts.
    pub(super) refusals: Summary,
    pub(super) accept_failures: Summary,
    pub(super) refused_draining: AtomicU64,
    /// Upgrades refused (403) for a browser origin the route does not allow.
    pub(super) refused_origin: AtomicU64,
    /// Summaries of those refusals for the log.
    pub(super) origin_refusals: Summary,
    /// TLS handshakes that failed or timed out.
    pub(super) tls_handshake_failures: AtomicU64,
    /// Summaries of upgrades refused over an upgrade rate, for the log
    /// (counted per route: `weir_route_overload_total`).
    pub(super) rate_refusals: Summary,
}

/// The drain: set once at shutdown, waited on by every worker.
pub(super) struct Drain {
    pub(super) draining: AtomicBool,
    pub(super) drain_timeout: Duration,
    /// Open TCP connections (HTTP or WebSocket), so the drain can wait for them.
    pub(super) tcp_open: AtomicUsize,
}

/// What a deploy, rollback or reload holds or reads again.
pub(super) struct ChangeState {
    /// The routes file, for reloads.
    pub(super) source: Option<PathBuf>,
    /// Where deploys from a registry (`POST /routes/{path}/pull`) keep
    /// their components (`[server] oci_cache`).
    pub(super) oci_cache: PathBuf,
    /// Held by a deploy, rollback or reload: one change at a time.
    pub(super) changing: Mutex<()>,
    /// The admin listener's TLS, when `[admin] tls` is set (a reload reads
    /// its certificate again too).
    pub(super) admin_tls: Option<weir_config::tls::Tls>,
    /// This node's part in the fleet, with `[cluster] redis` (set by
    /// `Server::bind` once the public port is known: it names the node).
    pub(super) fleet: std::sync::OnceLock<Arc<super::fleet::Fleet>>,
}

impl Shared {
    pub(super) fn new(config: &Config, workers: usize) -> Result<Shared, ServeError> {
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
            planes: (0..workers).map(|_| Arc::default()).collect(),
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
                io: resolve_io(config.server.io)?,
                upgrade_rate: crate::overload::GlobalRate::new(config.server.max_upgrade_rate),
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
                rate_refusals: Summary::new(SUMMARY_EVERY),
            },
            drain: Drain {
                draining: AtomicBool::new(false),
                drain_timeout: config.server.drain_timeout,
                tcp_open: AtomicUsize::new(0),
            },
            change: ChangeState {
                source: config.source.clone(),
                oci_cache: crate::oci::cache_dir(config),
                changing: Mutex::new(()),
                // HTTP/1.1 only: the admin listener speaks nothing else.
                admin_tls: match config.admin.as_ref().and_then(|a| a.tls.as_ref()) {
                    Some(files) => Some(
                        weir_config::tls::Tls::new(files, &[weir_config::tls::ALPN_HTTP1])
                            .map_err(ServeError::AdminTls)?,
                    ),
                    None => None,
                },
                fleet: std::sync::OnceLock::new(),
            },
        })
    }

    /// The figures `/metrics` shows.
    pub(super) fn snapshot(&self) -> Snapshot {
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
            plane_connections: self.planes.iter().map(|p| p.connections()).sum(),
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
                    kind: r.kind.figures(),
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

/// `[server] io` as the workers will run it: `auto` becomes io_uring where
/// a ring with its buffers can be set up here, else epoll (logged either
/// way); `uring` where it cannot is an error.
fn resolve_io(io: weir_config::Io) -> Result<weir_config::Io, super::ServeError> {
    use weir_config::Io;
    match io {
        Io::Tasks | Io::Epoll => Ok(io),
        Io::Uring => match weir_reactor::plane::probe_uring() {
            Ok(()) => {
                info!("I/O loop: the workers' planes on io_uring");
                Ok(Io::Uring)
            }
            Err(e) => Err(super::ServeError::Uring(e)),
        },
        Io::Auto => match weir_reactor::plane::probe_uring() {
            Ok(()) => {
                info!("I/O loop: the workers' planes on io_uring (io = \"auto\")");
                Ok(Io::Uring)
            }
            Err(e) => {
                warn!(error = %e, "I/O loop: io_uring unavailable, the workers' planes run on epoll (io = \"auto\")");
                Ok(Io::Epoll)
            }
        },
    }
}
