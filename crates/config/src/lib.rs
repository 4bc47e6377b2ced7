//! The routes file: parse, validate, apply defaults. Sizes are written like
//! `"32MiB"`, durations like `"30s"`; every error names its line and what to
//! write instead.
//!
//! The types below are the contract the server, reactor and guest runner
//! use; [`parse`] reads the file into them and [`units`] reads sizes and
//! durations.

pub mod hosts;
pub mod namespace;
pub mod origin;
pub mod tls;
pub mod url_check;

mod guest;
mod guest_route;
mod oci_ref;
mod parse;
mod proxy;
mod pusher;
mod pusher_webhook;
mod realtime;
mod route_kinds;
mod toml_error;
pub mod units;
mod value;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use guest::GUEST_MEMORY_MAX_BYTES;
pub use guest_route::*;
pub use oci_ref::{check_digest, OciRef, OCI_SCHEME};
pub use pusher::{
    PusherApp, PusherConfig, DEFAULT_PUSHER_CLIENT_EVENTS_PER_SECOND,
    DEFAULT_PUSHER_MAX_CHANNELS_PER_CONNECTION, PUSHER_PATH_TAIL,
};
pub use pusher_webhook::{PusherWebhook, DEFAULT_WEBHOOK_MAX_QUEUE_BYTES, DEFAULT_WEBHOOK_TIMEOUT};
pub use route_kinds::*;

/// Largest message a client may send, assembled (RFC 6455 allows 2^63).
/// 32 MiB fits the biggest payload of the benchmark sweep with room to spare.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 32 << 20;
/// Bytes queued toward one client before the gateway stops reading from
/// whoever is producing them.
pub const DEFAULT_OUTBOUND_BUDGET_BYTES: usize = 4 << 20;
/// Silence after which the server pings; a second silent period closes.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// Time a client has to finish its HTTP upgrade request.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Time open connections get to finish their close handshakes after
/// SIGTERM before the gateway exits anyway: long enough for clients to
/// answer a close, short enough for an orchestrator's grace period (30 s).
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// Default listen address of `weir serve` without a file.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9001";
/// Open connections across all workers before new ones get HTTP 503: a
/// bound on memory and file descriptors that load tests do not reach.
pub const DEFAULT_MAX_CONNECTIONS: usize = 100_000;
/// WebSocket streams (and requests) one HTTP/2 connection may have open at
/// once (`[server] h2_max_streams`). Each holds up to a stream window of
/// unread input (256 KiB), so this bounds what one connection may make the
/// gateway hold; browsers open far fewer per connection.
pub const DEFAULT_H2_MAX_STREAMS: u32 = 100;
/// Highest `h2_max_streams`: the connection's window is the streams'
/// windows together and must stay under HTTP/2's 2^31 - 1.
pub const MAX_H2_STREAMS: u32 = 4096;
/// Open connections per client IP; 0 = no per-IP limit, because load
/// generators and proxies put many clients behind one address.
pub const DEFAULT_MAX_CONNECTIONS_PER_IP: usize = 0;
/// Each listener's accept queue: room for a burst of reconnecting clients
/// (the kernel caps it at `net.core.somaxconn`, 4096 on current Linux).
pub const DEFAULT_LISTEN_BACKLOG: u32 = 4096;
/// Linear memory a guest instance may grow to: room for a JSON handler's
/// parse buffers, small enough that 1024 instances fit in RAM.
pub const DEFAULT_GUEST_MEMORY_BYTES: usize = 64 << 20;
/// CPU deadline per guest call: a batch that takes longer is a stuck guest.
pub const DEFAULT_GUEST_TIMEOUT: Duration = Duration::from_millis(100);
/// Live instances of one guest route across all workers.
pub const DEFAULT_GUEST_INSTANCES: usize = 256;
/// Batches an instance serves before it is replaced, so leaks in a guest
/// stay bounded.
pub const DEFAULT_GUEST_RECYCLE_AFTER: u64 = 10_000;
/// Cap on a connection's durable attachment: state, not a message store.
pub const DEFAULT_ATTACHMENT_MAX_BYTES: usize = 16 << 10;

/// Environment variable the admin API's bearer token is read from when
/// `[admin]` names none.
pub const DEFAULT_ADMIN_TOKEN_ENV: &str = "WEIR_ADMIN_TOKEN";

/// A whole routes file, validated, with defaults applied.
#[derive(Debug, Clone)]
pub struct Config {
    pub server: ServerConfig,
    /// The admin API (deploys, rollback, reload, metrics); off unless the
    /// file has an `[admin]` section.
    pub admin: Option<AdminConfig>,
    pub routes: Vec<RouteConfig>,
    /// The `[cluster]` section: the Redis that nodes share topics through;
    /// None runs one process on its own (in-process topics only).
    pub cluster: Option<ClusterConfig>,
    /// Channel namespaces of the real-time core (`[[namespaces]]`); the
    /// default one ("") is always there.
    pub namespaces: crate::namespace::Namespaces,
    /// The guests of namespaces that name one (`guest = "x.wasm"`): read
    /// at start like the namespaces, and kept by a reload.
    pub namespace_guests: Vec<NamespaceGuest>,
    /// The server API (`[api]`); off unless the file has the section.
    pub api: Option<ApiConfig>,
    /// Where the file was read from (None for the built-in default).
    pub source: Option<PathBuf>,
}

/// Environment variable the server API's key is read from when `[api]`
/// names none.
pub const DEFAULT_API_KEY_ENV: &str = "WEIR_API_KEY";

/// `[api]`: Centrifugo's HTTP server API on a listener of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiConfig {
    pub listen: SocketAddr,
    /// Environment variable holding the key requests carry in
    /// `X-API-Key` (or `Authorization: apikey …`); distinct from the admin
    /// token, and the gateway will not start without it.
    pub key_env: String,
    /// Largest request body (a publication with its JSON envelope).
    pub max_body: usize,
    /// Connections open at once; one more is answered 503 and closed. With
    /// `max_body` it bounds what API clients can make the gateway hold.
    pub max_connections: usize,
}

/// Server API connections open at once when `[api]` names no
/// `max_connections`.
pub const DEFAULT_API_MAX_CONNECTIONS: usize = 1024;

/// Largest server API request body: Centrifugo's default client message
/// limit (64 KiB) with room for the JSON envelope.
pub const DEFAULT_API_MAX_BODY_BYTES: usize = 1 << 20;

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    /// Worker threads; already resolved (0 in the file = one per core).
    pub workers: usize,
    pub handshake_timeout: Duration,
    /// How long shutdown waits for connections to close (see [`DEFAULT_DRAIN_TIMEOUT`]).
    pub drain_timeout: Duration,
    /// Server-wide defaults; each route's `limits` starts from these.
    pub limits: Limits,
    /// Global connection limit (0 = none); over it, upgrades get HTTP 503.
    pub max_connections: usize,
    /// Per-client-IP connection limit (0 = none); over it, HTTP 503.
    pub max_connections_per_ip: usize,
    /// Upgrades per second the whole gateway takes (0 = no cap); past it,
    /// 503 with `Retry-After`, answered before the upgrade's work.
    pub max_upgrade_rate: u32,
    /// Where precompiled guest components are cached; None = the guest
    /// runner's default. Relative paths resolve against the routes file.
    pub cache_dir: Option<PathBuf>,
    /// Where persistent state lives (the guests' key-value stores); None:
    /// `weir-state` beside the routes file. Relative paths resolve against
    /// the routes file.
    pub state_dir: Option<PathBuf>,
    /// Where components pulled from OCI registries are kept, by digest
    /// (`oci://` guests); None: `oci` in the state directory. Relative
    /// paths resolve against the routes file.
    pub oci_cache: Option<PathBuf>,
    /// Let other processes listen on the same address (`SO_REUSEPORT`
    /// across processes: the kernel splits new connections between them,
    /// e.g. an old and a new gateway during a hand-over). Off by default: a
    /// second gateway on an address in use fails to start instead of
    /// silently sharing it (and serving old handler code to some clients).
    pub reuse_port: bool,
    /// Connections each listener's accept queue holds before the kernel
    /// drops new SYNs (`listen(2)`'s backlog; the kernel caps it at
    /// `net.core.somaxconn`).
    pub listen_backlog: u32,
    /// Whether the public listener answers `/metrics`. Default: yes without
    /// `[admin]` (nothing else would serve it), no with it (the figures
    /// name routes and versions: operators' business, not clients').
    pub public_metrics: bool,
    /// Peers whose `X-Forwarded-Host` / `Forwarded: host=` stand for the
    /// request's host in the same-origin check (`trusted_proxies`).
    pub trusted_proxies: Vec<crate::origin::Cidr>,
    /// `tls = { cert, key }`: serve TLS (wss://) with this certificate;
    /// None serves plain TCP.
    pub tls: Option<crate::tls::TlsFiles>,
    /// `allowed_hosts`: the names requests may give as `Host` /
    /// `:authority` (see [`crate::hosts`]); None: loopback names on a
    /// loopback listener, any name otherwise. Lower case, each checked by
    /// [`crate::hosts::HostRule::parse`].
    pub allowed_hosts: Option<Vec<String>>,
    /// Streams one HTTP/2 connection may have open (`h2_max_streams`).
    pub h2_max_streams: u32,
    /// Which loop serves upgraded connections (`io`).
    pub io: Io,
}

/// `[server] io`: the loop that serves upgraded connections.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Io {
    /// One tokio task per connection (the default).
    #[default]
    Tasks,
    /// Each worker's plane: connections in a slab, woken by the worker's
    /// own epoll instance, no task per connection. Plain TCP connections
    /// of the echo, relay, pubsub and guest kinds run there; TLS, HTTP/2
    /// streams and kinds with work beside their socket (proxy,
    /// centrifugo, pusher) stay on tasks.
    Epoll,
    /// The plane on io_uring: a connection's bytes land in a worker-wide
    /// buffer ring without a read of its own (`reactor/plane/uring.rs`).
    /// The gateway refuses to start where io_uring is missing or
    /// forbidden.
    Uring,
    /// The plane on io_uring where the kernel allows it, else on epoll;
    /// the choice is made at start and logged.
    Auto,
}

/// `[admin]`: the admin listener, separate from the public one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminConfig {
    pub listen: SocketAddr,
    /// Environment variable holding the bearer token every request must
    /// carry (`Authorization: Bearer …`); the gateway will not start
    /// without it.
    pub token_env: String,
    /// `tls = { cert, key }`: serve the admin API and dashboard over HTTPS
    /// with this certificate (the session cookie is then `Secure`); None
    /// serves plain HTTP.
    pub tls: Option<crate::tls::TlsFiles>,
}

/// Per-connection limits: `[server]` gives defaults, a route may override.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    pub max_message: usize,
    pub outbound_budget: usize,
    pub idle_timeout: Duration,
    /// Subprotocols offered, in server preference order.
    pub subprotocols: Vec<String>,
    /// Browser origins allowed besides the gateway's own (see
    /// [`crate::origin`]): `scheme://host[:port]`, `scheme://*.domain`,
    /// `"null"`, or `"*"` for any; lower case, each checked by
    /// [`crate::origin::Rule::parse`].
    pub origins: Vec<String>,
    /// permessage-deflate (`compression`, `compression_min`,
    /// `compression_context`, `compression_level`); off by default.
    pub compression: weir_ws::deflate::Compression,
    /// Refuse upgrades without an `Origin` (non-browser clients).
    pub require_origin: bool,
    /// Overload controls (`max_upgrade_rate_per_ip`, `max_message_rate`,
    /// `max_byte_rate`, `rate_exceeded`); all off by default.
    pub rates: Rates,
}

/// A route's rate limits (see docs/architecture.md, "Overload controls").
/// 0 turns a limit off; each bucket holds one second of its rate, so a
/// client may burst that much at once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rates {
    /// Upgrades per second from one client address (IPv6 by /64) on this
    /// route; past it, 429 with `Retry-After`.
    pub upgrades_per_ip: u32,
    /// Data messages per second one connection may send.
    pub messages: u32,
    /// Payload bytes per second one connection may send (as received:
    /// compressed bytes when compressed).
    pub bytes: u64,
    /// What happens to a message over either rate.
    pub exceeded: RateExceeded,
}

impl Rates {
    /// Whether a connection's messages are limited at all.
    pub fn limits_messages(&self) -> bool {
        self.messages > 0 || self.bytes > 0
    }
}

/// `rate_exceeded`: what a connection's message over its rate gets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RateExceeded {
    /// Discarded and counted; the connection stays open.
    #[default]
    Drop,
    /// The connection is closed with 1008.
    Close,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_message: DEFAULT_MAX_MESSAGE_BYTES,
            outbound_budget: DEFAULT_OUTBOUND_BUDGET_BYTES,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            subprotocols: Vec::new(),
            origins: Vec::new(),
            compression: weir_ws::deflate::Compression::default(),
            require_origin: false,
            rates: Rates::default(),
        }
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: DEFAULT_LISTEN.parse().expect("valid default address"),
            workers: default_workers(),
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
            limits: Limits::default(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_ip: DEFAULT_MAX_CONNECTIONS_PER_IP,
            max_upgrade_rate: 0,
            cache_dir: None,
            state_dir: None,
            oci_cache: None,
            reuse_port: false,
            listen_backlog: DEFAULT_LISTEN_BACKLOG,
            public_metrics: true,
            trusted_proxies: Vec::new(),
            tls: None,
            allowed_hosts: None,
            h2_max_streams: DEFAULT_H2_MAX_STREAMS,
            io: Io::default(),
        }
    }
}

/// One worker per core the process may run on.
pub fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

impl Config {
    /// `weir serve` without a file: native /echo and /relay on 127.0.0.1:9001.
    pub fn builtin_default() -> Config {
        let limits = Limits::default();
        let route = |path: &str, kind| RouteConfig {
            path: path.to_string(),
            line: 0,
            behaviour: Behaviour::Native(kind),
            limits: limits.clone(),
            topics: None,
        };
        Config {
            server: ServerConfig::default(),
            routes: vec![
                route("/echo", NativeKind::Echo),
                route("/relay", NativeKind::Relay),
            ],
            cluster: None,
            admin: None,
            namespaces: crate::namespace::Namespaces::with_default(),
            namespace_guests: Vec::new(),
            api: None,
            source: None,
        }
    }

    /// Reads and validates a routes file; guest paths resolve against its
    /// directory, and each guest component must exist. Messages start with
    /// the file's path.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|err| ConfigError {
            message: format!("{}: cannot read the routes file: {err}", path.display()),
            line: None,
        })?;
        let origin_dir = path.parent().unwrap_or(Path::new(""));
        let in_file = |err: ConfigError| ConfigError {
            message: format!("{}: {}", path.display(), err.message),
            line: err.line,
        };
        let mut config = Config::parse(&text, origin_dir).map_err(in_file)?;
        for route in &config.routes {
            if let Behaviour::Guest(guest) = &route.behaviour {
                // A registry's component is checked when it is pulled.
                if guest.oci.is_none() && !guest.wasm.is_file() {
                    return Err(in_file(ConfigError {
                        message: format!(
                            "line {}: route \"{}\": guest component {} not found; \
                             build it (`weir build DIR` for a project made by `weir new`; \
                             bash scripts/build-guests.sh for this repository's examples) or fix the guest path \
                             (relative paths start at the routes file's directory)",
                            route.line,
                            route.path,
                            guest.wasm.display()
                        ),
                        line: Some(route.line),
                    }));
                }
            }
        }
        config.source = Some(path.to_path_buf());
        Ok(config)
    }

    /// Every guest the file names (guest routes, proxy filters, pusher
    /// apps' and namespaces' guests), with where it is named, for the host
    /// to pull `oci://` components before anything is compiled.
    pub fn guests_mut(&mut self) -> Vec<(String, &mut GuestConfig)> {
        let mut guests = Vec::new();
        for route in &mut self.routes {
            match &mut route.behaviour {
                Behaviour::Guest(g) => guests.push((route.path.clone(), g)),
                Behaviour::Native(NativeKind::Proxy(p)) => {
                    if let Some(g) = &mut std::sync::Arc::make_mut(p).filter {
                        guests.push((format!("{} (filter)", route.path), g));
                    }
                }
                Behaviour::Native(NativeKind::Pusher(p)) => {
                    for app in &mut std::sync::Arc::make_mut(p).apps {
                        if let Some(g) = &mut app.guest {
                            guests.push((format!("{} (app {})", route.path, app.id), g));
                        }
                    }
                }
                Behaviour::Native(_) => {}
            }
        }
        for ns in &mut self.namespace_guests {
            guests.push((format!("namespace {}", ns.namespace), &mut ns.guest));
        }
        guests
    }

    /// Reads the certificate and key `[server] tls` names, so `weir check`
    /// and `weir serve` name a missing file, bad PEM or a key of another
    /// certificate with the file's line. (A reload does not: a bad new
    /// certificate keeps the old one and does not hold up the routes.)
    pub fn check_tls(&self) -> Result<(), ConfigError> {
        let admin = self.admin.as_ref().and_then(|a| a.tls.as_ref());
        for (table, files) in [("[server]", self.server.tls.as_ref()), ("[admin]", admin)] {
            let Some(files) = files else {
                continue;
            };
            crate::tls::load(files).map_err(|e| {
                let file = self
                    .source
                    .as_ref()
                    .map(|p| format!("{}: ", p.display()))
                    .unwrap_or_default();
                ConfigError {
                    message: format!("{file}line {}: {table} tls: {e}", files.line),
                    line: Some(files.line),
                }
            })?;
        }
        Ok(())
    }

    /// Validates routes-file text; relative guest paths and `cache_dir`
    /// resolve against `origin_dir`. Does not touch the file system.
    pub fn parse(text: &str, origin_dir: &Path) -> Result<Config, ConfigError> {
        parse::parse(text, origin_dir)
    }

    /// A matchit router from each route's path to its index in `routes`.
    pub fn router(&self) -> matchit::Router<usize> {
        let mut router = matchit::Router::new();
        for (index, route) in self.routes.iter().enumerate() {
            router
                .insert(route.path.clone(), index)
                .expect("paths were validated together when the config was built");
        }
        router
    }
}

/// A problem in the routes file, with the line it is on and what to write instead.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct ConfigError {
    /// The whole message, starting with `line N:` when it has a line.
    pub message: String,
    /// The 1-based line the problem is on, when there is one.
    pub line: Option<usize>,
}

#[cfg(test)]
mod tests;
