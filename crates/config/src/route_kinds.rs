//! A route as the file describes it: its path, limits and behaviour, and
//! each native kind's settings (proxy, pubsub, centrifugo, and the
//! `[cluster]` that topics cross nodes through).

use super::*;

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
