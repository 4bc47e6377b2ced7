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
mod parse;
mod proxy;
mod pusher;
mod realtime;
mod toml_error;
pub mod units;
mod value;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use guest::GUEST_MEMORY_MAX_BYTES;
pub use pusher::{
    PusherApp, PusherConfig, DEFAULT_PUSHER_CLIENT_EVENTS_PER_SECOND,
    DEFAULT_PUSHER_MAX_CHANNELS_PER_CONNECTION, PUSHER_PATH_TAIL,
};

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

/// Centrifugo's server ping interval: the `centrifuge` client waits this
/// plus its `maxServerPingDelay` (10 s) before it declares the connection
/// dead.
pub const DEFAULT_CENTRIFUGO_PING_INTERVAL: Duration = Duration::from_secs(25);
/// Time a client has to answer a server ping (Centrifugo's default).
pub const DEFAULT_CENTRIFUGO_PONG_TIMEOUT: Duration = Duration::from_secs(8);
/// Grace after a token expires before its connection is closed
/// (Centrifugo's default `client_expired_close_delay`).
pub const DEFAULT_CENTRIFUGO_EXPIRED_CLOSE_DELAY: Duration = Duration::from_secs(25);
/// Channels one connection may be subscribed to (Centrifugo's
/// `client_channel_limit`).
pub const DEFAULT_CENTRIFUGO_MAX_SUBSCRIPTIONS: usize = 128;
/// Largest publication a client may publish (its `data` as JSON text).
pub const DEFAULT_CENTRIFUGO_MAX_PUBLICATION_BYTES: usize = 64 << 10;
/// Largest command frame (Centrifugo's 64 KiB WebSocket read limit).
pub const DEFAULT_CENTRIFUGO_MAX_COMMAND_BYTES: usize = 64 << 10;
/// Environment variable the HMAC secret of tokens is read from.
pub const DEFAULT_TOKEN_HMAC_SECRET_ENV: &str = "WEIR_TOKEN_HMAC_SECRET";

/// A centrifugo route's keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CentrifugoConfig {
    /// Environment variable holding the HS256 secret tokens are signed with.
    pub token_hmac_secret_env: String,
    /// `aud` a token must carry (not checked when None).
    pub token_audience: Option<String>,
    /// `iss` a token must carry (not checked when None).
    pub token_issuer: Option<String>,
    /// A JWK set (JSON) of the public keys RS/PS/ES-signed tokens are
    /// checked with; read at start and on each reload. With it, the HMAC
    /// secret is optional.
    pub token_jwks_file: Option<PathBuf>,
    /// A PEM public key (RSA or EC, Centrifugo's `token_rsa_public_key` /
    /// `token_ecdsa_public_key` in a file) for RS/PS/ES-signed tokens that
    /// name no `kid` of the JWKS file; read at start and on each reload.
    pub token_public_key_file: Option<PathBuf>,
    pub ping_interval: Duration,
    pub pong_timeout: Duration,
    /// Grace after a token's expiry before the connection is closed with
    /// 3005: the client refreshes when the ttl runs out, so its refresh
    /// must have time to arrive (Centrifugo's `client_expired_close_delay`).
    pub expired_close_delay: Duration,
    pub max_subscriptions: usize,
    pub max_publication_bytes: usize,
    pub max_command_bytes: usize,
}

impl Default for CentrifugoConfig {
    fn default() -> Self {
        CentrifugoConfig {
            token_hmac_secret_env: DEFAULT_TOKEN_HMAC_SECRET_ENV.into(),
            token_audience: None,
            token_issuer: None,
            token_jwks_file: None,
            token_public_key_file: None,
            ping_interval: DEFAULT_CENTRIFUGO_PING_INTERVAL,
            pong_timeout: DEFAULT_CENTRIFUGO_PONG_TIMEOUT,
            expired_close_delay: DEFAULT_CENTRIFUGO_EXPIRED_CLOSE_DELAY,
            max_subscriptions: DEFAULT_CENTRIFUGO_MAX_SUBSCRIPTIONS,
            max_publication_bytes: DEFAULT_CENTRIFUGO_MAX_PUBLICATION_BYTES,
            max_command_bytes: DEFAULT_CENTRIFUGO_MAX_COMMAND_BYTES,
        }
    }
}

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
    /// Where precompiled guest components are cached; None = the guest
    /// runner's default. Relative paths resolve against the routes file.
    pub cache_dir: Option<PathBuf>,
    /// Where persistent state lives (the guests' key-value stores); None:
    /// `weir-state` beside the routes file. Relative paths resolve against
    /// the routes file.
    pub state_dir: Option<PathBuf>,
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
}

#[derive(Debug, Clone)]
pub struct RouteConfig {
    /// matchit syntax: `/echo`, `/chat/{room}`, `/files/{*rest}`.
    /// The file's `/chat/*` form is translated to matchit's `/chat/{*rest}`.
    pub path: String,
    /// Line of the `[[route]]` header in the file, for messages.
    pub line: usize,
    pub behaviour: Behaviour,
    pub limits: Limits,
    /// A shared topic namespace (`topics = "name"`): routes naming the same
    /// one share topics. None: the route's topics are its own.
    pub topics: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Behaviour {
    Native(NativeKind),
    Guest(GuestConfig),
}

#[derive(Debug, Clone, PartialEq)]
pub enum NativeKind {
    Echo,
    Relay,
    /// Every message goes to the other subscribers of the topic the path
    /// names (`native::pubsub`).
    PubSub(PubSubConfig),
    /// Every connection is carried to its own connection to an upstream
    /// WebSocket server (`native::proxy`).
    Proxy(std::sync::Arc<ProxyConfig>),
    /// Centrifugo's client protocol over the real-time core
    /// (`native::centrifugo`).
    Centrifugo(std::sync::Arc<CentrifugoConfig>),
    /// The Pusher Channels protocol and HTTP API over a core of the
    /// route's own (`native::pusher`).
    Pusher(std::sync::Arc<PusherConfig>),
}

/// Time a proxy route gives its upstream to accept the TCP connection and
/// answer the upgrade before the client gets 504: long enough for a
/// backend under load, short enough that a client is not left hanging.
pub const DEFAULT_PROXY_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A proxy route's keys: where its connections go.
#[derive(Debug, Clone, PartialEq)]
pub struct ProxyConfig {
    /// The upstream as written (`ws://127.0.0.1:9100/rooms/{room}`), for messages.
    pub upstream: String,
    /// `host` or `host:port` as the `Host` header carries it.
    pub authority: String,
    /// Host name or address to connect to (IPv6 without brackets).
    pub host: String,
    pub port: u16,
    /// The upstream path (and query) with `{name}` placeholders for the
    /// route's path parameters; the client's query string is appended.
    pub path: String,
    pub connect_timeout: Duration,
    /// Request headers passed on to the upstream (lower case), besides the
    /// subprotocols offered, `X-Forwarded-For` and `X-Forwarded-Proto`.
    pub forward_headers: Vec<String>,
    /// `wss://`: the upstream connection is TLS, its certificate checked
    /// against the web's roots (`webpki-roots`) or `upstream_ca`.
    pub tls: bool,
    /// `upstream_ca = "file.pem"`: the only roots a `wss://` upstream's
    /// certificate is checked against (a private CA), resolved against the
    /// routes file's directory.
    pub upstream_ca: Option<PathBuf>,
    /// `filter = "x.wasm"`: a guest that sees every message either way and
    /// decides what goes on (`native::proxy::filter`); the route's guest
    /// keys (memory, timeout, ...) are its limits.
    pub filter: Option<GuestConfig>,
}

/// A pubsub route's keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PubSubConfig {
    /// A publisher receives its own messages too (default: only the others).
    pub echo_self: bool,
    pub slow_subscriber: SlowSubscriber,
    /// `realtime = true`: the route's topics are the real-time core's
    /// channels, and every publication (from the server API or a
    /// centrifugo client) reaches its subscribers as a plain text frame.
    pub realtime: bool,
}

/// What a publish does to a subscriber whose outbound queue cannot take it
/// within the route's `outbound_budget`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SlowSubscriber {
    /// Close it with 1008: a client that cannot keep up learns it, and
    /// reconnects to a fresh stream (the default).
    #[default]
    Close,
    /// Discard the messages that do not fit and count them: for feeds where
    /// the latest value matters more than every value.
    Drop,
}

/// How gateway nodes share topics (`[cluster]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterConfig {
    /// One Redis server: PUBLISH / SUBSCRIBE.
    Redis(String),
    /// A Redis Cluster (its seed nodes): sharded SPUBLISH / SSUBSCRIBE, so a
    /// message travels only to the shard that owns its channel.
    RedisCluster(Vec<String>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    /// One instance per (worker thread, route), recycled after `recycle_after` batches.
    Worker,
    /// A fresh instance for every batch.
    Batch,
}

/// A real-time namespace's guest: asked about each client subscribe and
/// publication of the namespace's channels on centrifugo routes.
#[derive(Debug, Clone, PartialEq)]
pub struct NamespaceGuest {
    pub namespace: String,
    pub guest: GuestConfig,
    /// The `[[namespaces]]` table's line, for errors.
    pub line: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct GuestConfig {
    /// The component, resolved relative to the routes file's directory.
    pub wasm: PathBuf,
    pub isolation: Isolation,
    /// Max linear memory per instance.
    pub memory: usize,
    /// CPU deadline per guest call.
    pub timeout: Duration,
    /// Max live instances of this route across all workers.
    pub instances: usize,
    /// Batches an instance serves before it is replaced (worker isolation).
    pub recycle_after: u64,
    /// Cap on one connection's attachment.
    pub attachment_max: usize,
    /// Environment variables the guest may see (nothing else is visible).
    pub env: BTreeMap<String, String>,
    /// What the route's guests may write to the gateway log.
    pub log: GuestLog,
    /// Percent of one core the route may use on its guest thread, once its
    /// calls were too slow for the worker thread (`weir_guest_runtime`'s slot, `kind/slot.rs`).
    pub cpu_share: u32,
    /// What the route's guests may reach with `http-request` (nothing by
    /// default) and how far. Boxed: most routes have none, and the
    /// config's route enum stays small.
    pub outbound: Box<OutboundPolicy>,
    /// The route's key-value store, if it has one (`kv`).
    pub kv: Option<KvName>,
    /// How much that store may hold (`kv_max_bytes`, `kv_max_keys`).
    pub kv_quota: KvQuota,
    /// `realtime = true`: the guest's topics are the real-time core's
    /// channels. Its subscribes join channels (API and centrifugo
    /// publications arrive as plain text frames), its publishes go through
    /// the core (offsets, history, centrifugo subscribers, other nodes),
    /// and it may read history and presence (`guest::realtime`).
    pub realtime: bool,
}

/// A guest route's outbound HTTP policy (`allow_outbound`,
/// `outbound_timeout`, `outbound_max_concurrent`, `outbound_max_response`).
#[derive(Debug, Clone, PartialEq)]
pub struct OutboundPolicy {
    /// URL prefixes a request must start with; empty: every request is
    /// refused (deny by default).
    pub allow: Vec<OutboundPrefix>,
    /// Whole request, connect to last body byte.
    pub timeout: Duration,
    /// Requests of the route in flight at once; past it: http-error busy.
    pub max_concurrent: usize,
    /// Largest response body accepted; past it: http-error too-large.
    pub max_response: usize,
    /// The CA certificates (PEM) https servers are checked against
    /// (`outbound_ca`, for private services); None: webpki-roots, the
    /// Mozilla set.
    pub ca: Option<PathBuf>,
    /// `allow_private = true`: an allowed host *name* may resolve to a
    /// loopback, private, link-local or other non-global address. Off by
    /// default, so a name (or a DNS answer an attacker controls) cannot
    /// lead a guest to the gateway's own network; an entry that names an
    /// IP address is the operator's explicit choice and needs no opt-in.
    pub allow_private: bool,
}

/// Long enough for a remote API, short enough that a stuck backend does
/// not hold the route's `outbound_max_concurrent` slots for long.
pub const DEFAULT_OUTBOUND_TIMEOUT: Duration = Duration::from_secs(5);
/// Requests in flight per route by default.
pub const DEFAULT_OUTBOUND_MAX_CONCURRENT: usize = 64;
/// Response bodies are handed to the guest whole: 1 MiB keeps a batch small.
pub const DEFAULT_OUTBOUND_MAX_RESPONSE_BYTES: usize = 1 << 20;

impl Default for OutboundPolicy {
    fn default() -> Self {
        OutboundPolicy {
            allow: Vec::new(),
            timeout: DEFAULT_OUTBOUND_TIMEOUT,
            max_concurrent: DEFAULT_OUTBOUND_MAX_CONCURRENT,
            max_response: DEFAULT_OUTBOUND_MAX_RESPONSE_BYTES,
            ca: None,
            allow_private: false,
        }
    }
}

/// One `allow_outbound` entry: a URL must have this scheme, host and port
/// (the scheme's default when the entry names none) and a path that, once
/// normalised (`url_check::normalize_path`), lies under `path` on a
/// segment boundary (`url_check::path_within`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboundPrefix {
    pub scheme: String,
    /// Lower-case.
    pub host: String,
    pub port: u16,
    /// Normalised; starts with `/`.
    pub path: String,
}

/// Which key-value store a route uses.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum KvName {
    /// `kv = "route"`: a store of the route's own (named by its path).
    Route,
    /// `kv = "shared:NAME"`: shared by every route that names it.
    Shared(String),
}

/// How much a key-value store may hold: a write that would take it past
/// either bound is refused (the guest gets a kv-error event). Bytes are
/// key plus value lengths, summed over the store's live keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvQuota {
    /// `kv_max_bytes`.
    pub max_bytes: u64,
    /// `kv_max_keys`.
    pub max_keys: u64,
}

/// A store is for state (rosters, counters, sessions), not blobs: 64 MiB
/// is generous for that and small next to a gateway's memory, which holds
/// a Redis-backed store whole (its mirror).
pub const DEFAULT_KV_MAX_BYTES: u64 = 64 << 20;
/// A presence roster of 100,000 users fits; a guest that stores a key per
/// message does not grow without end.
pub const DEFAULT_KV_MAX_KEYS: u64 = 100_000;

impl Default for KvQuota {
    fn default() -> Self {
        KvQuota {
            max_bytes: DEFAULT_KV_MAX_BYTES,
            max_keys: DEFAULT_KV_MAX_KEYS,
        }
    }
}

/// Half a core: a slow route keeps making progress, and two of them (or one
/// and the machine's other work) still fit on one core.
pub const DEFAULT_GUEST_CPU_SHARE_PERCENT: u32 = 50;

/// A guest route's log budget (`log`, `log_rate`, `log_bytes`, `log_burst`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuestLog {
    /// Lines above this level are filtered out.
    pub level: LogLevel,
    /// Sustained lines per second, for all the route's instances together.
    pub lines_per_sec: u32,
    /// Sustained bytes per second (also the bytes a burst may hold).
    pub bytes_per_sec: u64,
    /// Lines that may come at once before the rate applies.
    pub burst: u32,
}

/// A route's `log` level: `off` writes nothing, `debug` everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    Off,
    Error,
    Warn,
    Info,
    Debug,
}

/// A developer printing a line per message at moderate load stays under
/// these; a debugging loop printing thousands of lines per message does not.
pub const DEFAULT_GUEST_LOG_LINES_PER_SEC: u32 = 200;
pub const DEFAULT_GUEST_LOG_BYTES_PER_SEC: u64 = 256 << 10;
pub const DEFAULT_GUEST_LOG_BURST: u32 = 1000;

impl Default for GuestLog {
    fn default() -> Self {
        GuestLog {
            level: LogLevel::Info,
            lines_per_sec: DEFAULT_GUEST_LOG_LINES_PER_SEC,
            bytes_per_sec: DEFAULT_GUEST_LOG_BYTES_PER_SEC,
            burst: DEFAULT_GUEST_LOG_BURST,
        }
    }
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
            cache_dir: None,
            state_dir: None,
            reuse_port: false,
            listen_backlog: DEFAULT_LISTEN_BACKLOG,
            public_metrics: true,
            trusted_proxies: Vec::new(),
            tls: None,
            allowed_hosts: None,
            h2_max_streams: DEFAULT_H2_MAX_STREAMS,
        }
    }
}

impl GuestConfig {
    /// A guest route with every optional key at its default.
    pub fn defaults(wasm: PathBuf) -> GuestConfig {
        GuestConfig {
            wasm,
            isolation: Isolation::Worker,
            memory: DEFAULT_GUEST_MEMORY_BYTES,
            timeout: DEFAULT_GUEST_TIMEOUT,
            instances: DEFAULT_GUEST_INSTANCES,
            recycle_after: DEFAULT_GUEST_RECYCLE_AFTER,
            attachment_max: DEFAULT_ATTACHMENT_MAX_BYTES,
            env: BTreeMap::new(),
            log: GuestLog::default(),
            cpu_share: DEFAULT_GUEST_CPU_SHARE_PERCENT,
            outbound: Box::default(),
            kv: None,
            kv_quota: KvQuota::default(),
            realtime: false,
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
                if !guest.wasm.is_file() {
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
