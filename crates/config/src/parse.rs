//! Turns routes-file text into a validated [`Config`]: serde reads the shape
//! (unknown keys are refused), then every value is checked here against its
//! line in the file, and the paths are checked together with matchit.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use toml::{Spanned, Value};

use super::guest::{guest_config, refuse_guest_keys};
use super::proxy::{proxy_config, refuse_proxy_keys};
use super::toml_error::toml_error;
use super::value::{first_set, refuse_key, Field, Item, Source};
use super::*;
use weir_ws::deflate::Context;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    server: Option<RawServer>,
    admin: Option<Spanned<RawAdmin>>,
    route: Option<Vec<Spanned<RawRoute>>>,
    cluster: Option<Spanned<RawCluster>>,
    namespaces: Option<Vec<Spanned<super::realtime::RawNamespace>>>,
    api: Option<Spanned<super::realtime::RawApi>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCluster {
    redis: Field,
    redis_cluster: Field,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAdmin {
    listen: Field,
    token_env: Field,
    tls: Field,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    listen: Field,
    workers: Field,
    max_message: Field,
    outbound_budget: Field,
    idle_timeout: Field,
    handshake_timeout: Field,
    drain_timeout: Field,
    subprotocols: Field,
    origins: Field,
    compression: Field,
    compression_min: Field,
    compression_context: Field,
    compression_level: Field,
    require_origin: Field,
    trusted_proxies: Field,
    max_connections: Field,
    max_connections_per_ip: Field,
    cache_dir: Field,
    state_dir: Field,
    reuse_port: Field,
    listen_backlog: Field,
    public_metrics: Field,
    tls: Field,
    allowed_hosts: Field,
    h2_max_streams: Field,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRoute {
    pub(super) path: Field,
    pub(super) native: Field,
    pub(super) guest: Field,
    pub(super) max_message: Field,
    pub(super) outbound_budget: Field,
    pub(super) idle_timeout: Field,
    pub(super) subprotocols: Field,
    pub(super) origins: Field,
    pub(super) compression: Field,
    pub(super) compression_min: Field,
    pub(super) compression_context: Field,
    pub(super) compression_level: Field,
    pub(super) require_origin: Field,
    pub(super) isolation: Field,
    pub(super) memory: Field,
    pub(super) timeout: Field,
    pub(super) instances: Field,
    pub(super) recycle_after: Field,
    pub(super) attachment_max: Field,
    pub(super) env: Option<Spanned<BTreeMap<String, Spanned<Value>>>>,
    pub(super) topics: Field,
    pub(super) log: Field,
    pub(super) log_rate: Field,
    pub(super) log_bytes: Field,
    pub(super) log_burst: Field,
    pub(super) cpu_share: Field,
    pub(super) echo_self: Field,
    pub(super) slow_subscriber: Field,
    pub(super) upstream: Field,
    pub(super) connect_timeout: Field,
    pub(super) forward_headers: Field,
    pub(super) upstream_ca: Field,
    pub(super) filter: Field,
    pub(super) allow_outbound: Field,
    pub(super) outbound_timeout: Field,
    pub(super) outbound_max_concurrent: Field,
    pub(super) outbound_max_response: Field,
    pub(super) outbound_ca: Field,
    pub(super) allow_private: Field,
    pub(super) kv: Field,
    pub(super) kv_max_bytes: Field,
    pub(super) kv_max_keys: Field,
    pub(super) realtime: Field,
    pub(super) token_hmac_secret_env: Field,
    pub(super) token_audience: Field,
    pub(super) token_issuer: Field,
    pub(super) token_jwks_file: Field,
    pub(super) token_public_key_file: Field,
    pub(super) ping_interval: Field,
    pub(super) pong_timeout: Field,
    pub(super) expired_close_delay: Field,
    pub(super) max_subscriptions: Field,
    pub(super) max_publication: Field,
    pub(super) max_command: Field,
    /// A pusher route's apps (`[[route.apps]]`).
    pub(super) apps: Option<Vec<Spanned<super::pusher::RawPusherApp>>>,
}

/// Largest message the gateway will assemble.
const MAX_MESSAGE_CEILING_BYTES: u64 = 1 << 30;
/// Longest idle timeout or outbound wait worth configuring.
const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 3600);
/// More worker threads than this is a typo, not a machine.
const MAX_WORKERS: u64 = 1024;
/// `listen(2)` takes an int; the kernel caps it at `net.core.somaxconn`.
const MAX_LISTEN_BACKLOG: u32 = 1 << 20;

pub(super) fn parse(text: &str, origin_dir: &Path) -> Result<Config, ConfigError> {
    let src = Source { text };
    let raw: RawFile = toml::from_str(text).map_err(|err| toml_error(&src, err))?;
    let mut server = server(&src, raw.server.as_ref(), origin_dir)?;
    let admin = match &raw.admin {
        Some(raw) => Some(admin(&src, raw, origin_dir)?),
        None => None,
    };
    // /metrics stays public unless an admin listener is there to serve it.
    let public_metrics = raw
        .server
        .as_ref()
        .and_then(|s| Item::of("public_metrics", &s.public_metrics));
    server.public_metrics = match public_metrics {
        Some(item) => item.flag(&src)?,
        None => admin.is_none(),
    };
    let raw_routes = raw.route.unwrap_or_default();
    if raw_routes.is_empty() {
        return Err(ConfigError {
            message: "the file has no routes; add one, e.g.\n\n[[route]]\npath = \"/echo\"\nnative = \"echo\""
                .into(),
            line: None,
        });
    }
    let mut routes = Vec::with_capacity(raw_routes.len());
    let mut router = matchit::Router::new();
    for raw_route in &raw_routes {
        let route = route(&src, raw_route, &server.limits, origin_dir)?;
        if let Err(err) = router.insert(route.path.clone(), routes.len()) {
            return Err(path_conflict(&src, raw_route, &route, &routes, err));
        }
        shared_kv_agrees(&src, raw_route, &route, &routes)?;
        routes.push(route);
    }
    let cluster = match &raw.cluster {
        Some(raw) => Some(cluster(&src, raw)?),
        None => None,
    };
    let (namespaces, namespace_guests) =
        super::realtime::namespaces(&src, raw.namespaces.as_ref(), origin_dir)?;
    let api = match &raw.api {
        Some(raw) => Some(super::realtime::api(&src, raw)?),
        None => None,
    };
    Ok(Config {
        server,
        admin,
        routes,
        cluster,
        namespaces,
        namespace_guests,
        api,
        source: None,
    })
}

/// `[cluster]`: one Redis server or a Redis Cluster's seed nodes.
fn cluster(src: &Source, spanned: &Spanned<RawCluster>) -> Result<ClusterConfig, ConfigError> {
    let raw = spanned.get_ref();
    match (
        Item::of("redis", &raw.redis),
        Item::of("redis_cluster", &raw.redis_cluster),
    ) {
        (Some(item), None) => {
            let url = item.string(src, r#""redis://127.0.0.1:6379""#)?;
            Ok(ClusterConfig::Redis(redis_url(src, &item, url)?))
        }
        (None, Some(item)) => {
            const EXAMPLE: &str = r#"["redis://127.0.0.1:7000", "redis://127.0.0.1:7001"]"#;
            let Value::Array(values) = item.value else {
                return Err(item.fail(src, format!("not a list; write e.g. {EXAMPLE}")));
            };
            let mut urls = Vec::new();
            for value in values {
                let Value::String(url) = value else {
                    return Err(item.fail(src, format!("not a list of strings; write e.g. {EXAMPLE}")));
                };
                urls.push(redis_url(src, &item, url)?);
            }
            if urls.is_empty() {
                return Err(item.fail(src, format!("empty; name at least one node, e.g. {EXAMPLE}")));
            }
            Ok(ClusterConfig::RedisCluster(urls))
        }
        (Some(item), Some(_)) => Err(item.fail(
            src,
            "give either redis (one server) or redis_cluster (a Redis Cluster), not both",
        )),
        (None, None) => Err(src.error(
            src.text.find("[cluster]").map_or(spanned.span(), |at| at..at + 9),
            r#"[cluster] names no Redis; add redis = "redis://127.0.0.1:6379" or redis_cluster = ["redis://127.0.0.1:7000"]"#,
        )),
    }
}

/// A Redis URL the client accepts (checked without connecting), with each
/// `${NAME}` replaced by that environment variable: a password stays out
/// of the file (`redis = "redis://:${REDIS_PASSWORD}@10.0.0.5:6379"`).
/// Messages show the URL as written, never what the variables hold.
fn redis_url(src: &Source, item: &Item, url: &str) -> Result<String, ConfigError> {
    if !url.starts_with("redis://") {
        return Err(item.fail(
            src,
            format!("{url:?} is not a redis:// URL (TLS is not supported yet); write e.g. \"redis://127.0.0.1:6379\""),
        ));
    }
    let mut expanded = String::with_capacity(url.len());
    let mut rest = url;
    while let Some(at) = rest.find("${") {
        expanded.push_str(&rest[..at]);
        let Some(end) = rest[at..].find('}') else {
            return Err(item.fail(
                src,
                format!("{url:?}: an unclosed ${{; write ${{NAME}} for an environment variable"),
            ));
        };
        let name = &rest[at + 2..at + end];
        match std::env::var(name) {
            Ok(value) => expanded.push_str(&value),
            Err(_) => {
                return Err(item.fail(
                    src,
                    format!("{url:?} names the environment variable {name}, which is not set"),
                ))
            }
        }
        rest = &rest[at + end + 1..];
    }
    expanded.push_str(rest);
    redis::Client::open(expanded.as_str()).map_err(|e| {
        item.fail(
            src,
            format!("{url:?} is not a valid Redis URL ({:?})", e.kind()),
        )
    })?;
    Ok(expanded)
}

/// `[admin]`: where the admin API listens, which environment variable
/// holds its bearer token, and its TLS certificate.
fn admin(
    src: &Source,
    raw: &Spanned<RawAdmin>,
    origin_dir: &Path,
) -> Result<AdminConfig, ConfigError> {
    let header = header_span(src, raw.span());
    let raw = raw.get_ref();
    let Some(listen) = Item::of("listen", &raw.listen) else {
        return Err(src.error(
            header,
            r#"[admin] needs listen, e.g. listen = "127.0.0.1:9090""#,
        ));
    };
    let text = listen.string(src, r#""127.0.0.1:9090""#)?;
    let listen = text.parse::<SocketAddr>().map_err(|_| {
        listen.fail(
            src,
            r#"not an IP address and port; write e.g. "127.0.0.1:9090""#,
        )
    })?;
    let token_env = match Item::of("token_env", &raw.token_env) {
        Some(item) => {
            let name = item.string(src, r#""WEIR_ADMIN_TOKEN""#)?;
            let valid = !name.is_empty()
                && !name.starts_with(|c: char| c.is_ascii_digit())
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            if !valid {
                return Err(item.fail(
                    src,
                    r#"not an environment variable name; write e.g. "WEIR_ADMIN_TOKEN""#,
                ));
            }
            name.to_string()
        }
        None => DEFAULT_ADMIN_TOKEN_ENV.to_string(),
    };
    let tls = match Item::of("tls", &raw.tls) {
        Some(item) => Some(tls_files(src, &item, origin_dir)?),
        None => None,
    };
    Ok(AdminConfig {
        listen,
        token_env,
        tls,
    })
}

fn server(
    src: &Source,
    raw: Option<&RawServer>,
    origin_dir: &Path,
) -> Result<ServerConfig, ConfigError> {
    let mut server = ServerConfig::default();
    let Some(raw) = raw else {
        return Ok(server);
    };
    if let Some(item) = Item::of("listen", &raw.listen) {
        let text = item.string(src, r#""127.0.0.1:9001""#)?;
        server.listen = text.parse::<SocketAddr>().map_err(|_| {
            item.fail(
                src,
                r#"not an IP address and port; write e.g. "127.0.0.1:9001", "0.0.0.0:9001" or "[::]:9001""#,
            )
        })?;
    }
    if let Some(item) = Item::of("workers", &raw.workers) {
        server.workers = match item.count(src, 0, MAX_WORKERS)? {
            0 => default_workers(),
            n => n as usize,
        };
    }
    if let Some(item) = Item::of("handshake_timeout", &raw.handshake_timeout) {
        server.handshake_timeout = item.duration(src, Duration::from_millis(1), MAX_TIMEOUT)?;
    }
    if let Some(item) = Item::of("drain_timeout", &raw.drain_timeout) {
        server.drain_timeout = item.duration(src, Duration::ZERO, MAX_TIMEOUT)?;
    }
    if let Some(item) = Item::of("max_connections", &raw.max_connections) {
        server.max_connections = item.count(src, 0, u32::MAX as u64)? as usize;
    }
    if let Some(item) = Item::of("max_connections_per_ip", &raw.max_connections_per_ip) {
        server.max_connections_per_ip = item.count(src, 0, u32::MAX as u64)? as usize;
    }
    if let Some(item) = Item::of("cache_dir", &raw.cache_dir) {
        let dir = item.string(src, r#""/var/cache/weir""#)?;
        if dir.is_empty() {
            return Err(item.fail(src, r#"empty; write a directory, e.g. "/var/cache/weir""#));
        }
        server.cache_dir = Some(origin_dir.join(dir));
    }
    if let Some(item) = Item::of("state_dir", &raw.state_dir) {
        let dir = item.string(src, r#""/var/lib/weir""#)?;
        if dir.is_empty() {
            return Err(item.fail(src, r#"empty; write a directory, e.g. "/var/lib/weir""#));
        }
        server.state_dir = Some(origin_dir.join(dir));
    }
    if let Some(item) = Item::of("reuse_port", &raw.reuse_port) {
        server.reuse_port = item.flag(src)?;
    }
    if let Some(item) = Item::of("listen_backlog", &raw.listen_backlog) {
        server.listen_backlog = item.count(src, 1, MAX_LISTEN_BACKLOG as u64)? as u32;
    }
    if let Some(item) = Item::of("trusted_proxies", &raw.trusted_proxies) {
        server.trusted_proxies = item.address_ranges(src)?;
    }
    if let Some(item) = Item::of("allowed_hosts", &raw.allowed_hosts) {
        server.allowed_hosts = Some(item.host_names(src)?);
    }
    if let Some(item) = Item::of("h2_max_streams", &raw.h2_max_streams) {
        server.h2_max_streams = item.count(src, 1, MAX_H2_STREAMS as u64)? as u32;
    }
    if let Some(item) = Item::of("tls", &raw.tls) {
        server.tls = Some(tls_files(src, &item, origin_dir)?);
    }
    server.limits = limits(
        src,
        &server.limits,
        [
            &raw.max_message,
            &raw.outbound_budget,
            &raw.idle_timeout,
            &raw.subprotocols,
            &raw.origins,
            &raw.require_origin,
            &raw.compression,
            &raw.compression_min,
            &raw.compression_context,
            &raw.compression_level,
        ],
    )?;
    Ok(server)
}

/// `tls = { cert = "...", key = "..." }`: two PEM paths, relative to the
/// routes file. The files are read by `Config::load`.
fn tls_files(
    src: &Source,
    item: &Item,
    origin_dir: &Path,
) -> Result<crate::tls::TlsFiles, ConfigError> {
    const EXAMPLE: &str =
        r#"write e.g. tls = { cert = "certs/fullchain.pem", key = "certs/key.pem" }"#;
    let Some(table) = item.value.as_table() else {
        return Err(item.fail(src, format!("not a table; {EXAMPLE}")));
    };
    if let Some(other) = table.keys().find(|k| *k != "cert" && *k != "key") {
        return Err(item.fail(src, format!("unknown key `{other}`; {EXAMPLE}")));
    }
    let path = |key: &str| match table.get(key) {
        Some(toml::Value::String(p)) if !p.is_empty() => Ok(origin_dir.join(p)),
        Some(_) => Err(item.fail(src, format!("`{key}` is not a file path; {EXAMPLE}"))),
        None => Err(item.fail(src, format!("`{key}` is missing; {EXAMPLE}"))),
    };
    Ok(crate::tls::TlsFiles {
        cert: path("cert")?,
        key: path("key")?,
        line: src.line(item.span.start),
    })
}

/// `[server]`'s limits with the keys given here applied on top.
fn limits(
    src: &Source,
    base: &Limits,
    [max_message, outbound_budget, idle_timeout, subprotocols, origins, require_origin, compression, compression_min, compression_context, compression_level]: [&Field; 10],
) -> Result<Limits, ConfigError> {
    let mut limits = base.clone();
    if let Some(item) = Item::of("max_message", max_message) {
        limits.max_message = item.size(src, 1, MAX_MESSAGE_CEILING_BYTES)?;
    }
    if let Some(item) = Item::of("outbound_budget", outbound_budget) {
        limits.outbound_budget = item.size(src, 1, MAX_MESSAGE_CEILING_BYTES)?;
    }
    if let Some(item) = Item::of("idle_timeout", idle_timeout) {
        limits.idle_timeout = item.duration(src, Duration::from_millis(1), MAX_TIMEOUT)?;
    }
    if let Some(item) = Item::of("subprotocols", subprotocols) {
        limits.subprotocols = item.subprotocols(src)?;
    }
    if let Some(item) = Item::of("origins", origins) {
        limits.origins = item.origins(src)?;
    }
    if let Some(item) = Item::of("compression", compression) {
        limits.compression.enabled = match item.string(src, r#""on" or "off""#)? {
            "on" => true,
            "off" => false,
            _ => {
                return Err(item.fail(
                    src,
                    r#"write compression = "on" (permessage-deflate when the client offers it) or "off""#,
                ))
            }
        };
    }
    if let Some(item) = Item::of("compression_min", compression_min) {
        limits.compression.min_bytes = item.size(src, 0, MAX_MESSAGE_CEILING_BYTES)?;
    }
    if let Some(item) = Item::of("compression_context", compression_context) {
        limits.compression.context = match item.string(src, r#""takeover" or "none""#)? {
            "takeover" => Context::Takeover,
            "none" => Context::None,
            _ => {
                return Err(item.fail(
                    src,
                    r#"write compression_context = "takeover" (a compressor kept per connection) or "none" (no state between messages)"#,
                ))
            }
        };
    }
    if let Some(item) = Item::of("compression_level", compression_level) {
        limits.compression.level = item.count(src, 1, 9)? as u32;
    }
    if let Some(item) = Item::of("require_origin", require_origin) {
        limits.require_origin = item.flag(src)?;
    }
    Ok(limits)
}

fn route(
    src: &Source,
    spanned: &Spanned<RawRoute>,
    server: &Limits,
    origin_dir: &Path,
) -> Result<RouteConfig, ConfigError> {
    let raw = spanned.get_ref();
    let header = header_span(src, spanned.span());
    let line = src.line(header.start);
    let Some(path_item) = Item::of("path", &raw.path) else {
        return Err(src.error(header, r#"this route has no path; add e.g. path = "/echo""#));
    };
    let path = route_path(src, &path_item)?;
    let behaviour = match (
        Item::of("native", &raw.native),
        Item::of("guest", &raw.guest),
    ) {
        (Some(native), None) => {
            let kind = match native.string(
                src,
                r#""echo", "relay", "pubsub", "proxy", "centrifugo" or "pusher""#,
            )? {
                "echo" => NativeKind::Echo,
                "relay" => NativeKind::Relay,
                "pubsub" => NativeKind::PubSub(pubsub_config(src, raw)?),
                "proxy" => NativeKind::Proxy(proxy_config(src, raw, &native, &path, origin_dir)?),
                "centrifugo" => NativeKind::Centrifugo(std::sync::Arc::new(
                    super::realtime::centrifugo_config(src, raw, origin_dir)?,
                )),
                "pusher" => NativeKind::Pusher(std::sync::Arc::new(
                    super::pusher::pusher_config(src, raw, &native, &path)?,
                )),
                _ => {
                    return Err(native.fail(
                        src,
                        r#"unknown native behaviour; write native = "echo", "relay", "pubsub", "proxy", "centrifugo" or "pusher", or use guest = "file.wasm""#,
                    ))
                }
            };
            if !matches!(kind, NativeKind::Centrifugo(_)) {
                super::realtime::refuse_centrifugo_keys(src, raw, &native)?;
            }
            if !matches!(kind, NativeKind::Pusher(_)) {
                super::pusher::refuse_pusher_keys(src, raw, &native)?;
            }
            if !matches!(kind, NativeKind::PubSub(_)) {
                refuse_pubsub_keys(src, raw, &native, false)?;
            }
            if !matches!(kind, NativeKind::Proxy(_)) {
                refuse_proxy_keys(src, raw, &native)?;
            }
            // A proxy route's filter takes the guest keys as its limits.
            let filtered = matches!(&kind, NativeKind::Proxy(p) if p.filter.is_some());
            if !filtered {
                refuse_guest_keys(src, raw, &native, matches!(kind, NativeKind::PubSub(_)))?;
            }
            Behaviour::Native(kind)
        }
        (None, Some(guest)) => {
            refuse_pubsub_keys(src, raw, &guest, true)?;
            super::realtime::refuse_centrifugo_keys(src, raw, &guest)?;
            super::pusher::refuse_pusher_keys(src, raw, &guest)?;
            refuse_proxy_keys(src, raw, &guest)?;
            let mut config = guest_config(src, raw, &guest, origin_dir)?;
            if let Some(item) = Item::of("realtime", &raw.realtime) {
                config.realtime = item.flag(src)?;
            }
            Behaviour::Guest(config)
        }
        (Some(native), Some(_)) => {
            return Err(native.fail(
                src,
                "a route is either native or guest, not both; remove native or guest",
            ))
        }
        (None, None) => {
            return Err(src.error(
                header,
                format!(
                    "route \"{}\" says nothing about what serves it; add native = \"echo\", \
                     native = \"relay\" or guest = \"file.wasm\"",
                    path_item.value.as_str().unwrap_or_default()
                ),
            ))
        }
    };
    let mut limits = limits(
        src,
        server,
        [
            &raw.max_message,
            &raw.outbound_budget,
            &raw.idle_timeout,
            &raw.subprotocols,
            &raw.origins,
            &raw.require_origin,
            &raw.compression,
            &raw.compression_min,
            &raw.compression_context,
            &raw.compression_level,
        ],
    )?;
    if matches!(behaviour, Behaviour::Native(NativeKind::Proxy(_))) {
        // A proxy passes frames between client and upstream as they are
        // (and offers its upstream no extension): no permessage-deflate,
        // whatever [server] says.
        if let Some(item) = Item::of("compression", &raw.compression) {
            if limits.compression.enabled {
                return Err(item.fail(
                    src,
                    "permessage-deflate is not supported on proxy routes (frames pass through \
                     unchanged); remove compression",
                ));
            }
        }
        limits.compression.enabled = false;
    }
    let topics = match Item::of("topics", &raw.topics) {
        Some(item) => Some(topic_namespace(src, &item)?),
        None => None,
    };
    Ok(RouteConfig {
        path,
        line,
        behaviour,
        limits,
        topics,
    })
}

/// A pubsub route's `echo_self` and `slow_subscriber`.
fn pubsub_config(src: &Source, raw: &RawRoute) -> Result<PubSubConfig, ConfigError> {
    let mut config = PubSubConfig::default();
    if let Some(item) = Item::of("echo_self", &raw.echo_self) {
        config.echo_self = item.flag(src)?;
    }
    if let Some(item) = Item::of("slow_subscriber", &raw.slow_subscriber) {
        config.slow_subscriber = match item.string(src, r#""close" or "drop""#)? {
            "close" => SlowSubscriber::Close,
            "drop" => SlowSubscriber::Drop,
            _ => {
                return Err(item.fail(
                    src,
                    r#"write slow_subscriber = "close" (close 1008 when over outbound_budget) or "drop" (discard and count)"#,
                ))
            }
        };
    }
    if let Some(item) = Item::of("realtime", &raw.realtime) {
        config.realtime = item.flag(src)?;
    }
    Ok(config)
}

/// Only pubsub routes take `echo_self` and `slow_subscriber`; pubsub and
/// guest routes (`guest_route`) take `realtime`.
fn refuse_pubsub_keys(
    src: &Source,
    raw: &RawRoute,
    kind: &Item,
    guest_route: bool,
) -> Result<(), ConfigError> {
    let none: Field = None;
    let realtime = if guest_route { &none } else { &raw.realtime };
    let first = first_set([
        ("echo_self", &raw.echo_self),
        ("slow_subscriber", &raw.slow_subscriber),
        ("realtime", realtime),
    ]);
    let applies_to = match first {
        Some(("realtime", _)) => "pubsub routes and guest routes",
        _ => "pubsub routes",
    };
    refuse_key(src, first, kind, applies_to, "write native = \"pubsub\"")
}

/// A shared topic namespace's name: routes that give the same one share
/// their topics.
fn topic_namespace(src: &Source, item: &Item) -> Result<String, ConfigError> {
    let name = item.string(src, r#""shared-room-names""#)?;
    let valid = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if !valid {
        return Err(item.fail(
            src,
            "a topic namespace is 1 to 64 letters, digits, '-', '_' or '.'; e.g. topics = \"chat\"",
        ));
    }
    Ok(name.to_string())
}

/// The line the operator thinks of as "the route" is its `[[route]]` header;
/// the table's span may start there or at its first key.
fn header_span(src: &Source, table: Range<usize>) -> Range<usize> {
    let start = table.start.min(src.text.len());
    if src.text[start..].starts_with("[[") {
        return table;
    }
    match src.text[..start].rfind("[[") {
        Some(header) => header..header + 2,
        None => table,
    }
}

/// The file's path syntax to matchit's: `/chat/*` becomes `/chat/{*rest}`.
fn route_path(src: &Source, item: &Item) -> Result<String, ConfigError> {
    let path = item.string(src, r#""/echo""#)?;
    if !path.starts_with('/') {
        return Err(item.fail(src, format!("a path starts with \"/\"; write \"/{path}\"")));
    }
    if let Some(bad) = path
        .chars()
        .find(|c| c.is_whitespace() || matches!(c, '?' | '#'))
    {
        return Err(item.fail(
            src,
            format!("{bad:?} cannot appear in a route path (queries are not matched); write e.g. \"/chat/{{room}}\""),
        ));
    }
    let path = match path.strip_suffix("/*") {
        Some(prefix) => format!("{prefix}/{{*rest}}"),
        None => path.to_string(),
    };
    if path.replace("{*", "").contains('*') {
        return Err(item.fail(
            src,
            r#"a wildcard is only allowed as the last segment; write e.g. "/chat/*""#,
        ));
    }
    // Checked alone first, so that syntax errors are not reported as conflicts.
    let mut alone = matchit::Router::new();
    if let Err(err) = alone.insert(path.clone(), ()) {
        let why = match err {
            matchit::InsertError::InvalidParamSegment => {
                r#"only one parameter per segment; write e.g. "/rooms/{room}/{user}""#
            }
            matchit::InsertError::InvalidCatchAll => {
                r#"a wildcard is only allowed as the last segment; write e.g. "/chat/*""#
            }
            _ => {
                r#"a parameter is a name in braces; write e.g. "/rooms/{room}" (and "{{" or "}}" for a literal brace)"#
            }
        };
        return Err(item.fail(src, why));
    }
    Ok(path)
}

/// A shared key-value store has one quota: a route naming one that an
/// earlier route named must give it the same `kv_max_bytes` and
/// `kv_max_keys`.
fn shared_kv_agrees(
    src: &Source,
    raw: &Spanned<RawRoute>,
    route: &RouteConfig,
    earlier: &[RouteConfig],
) -> Result<(), ConfigError> {
    let shared = |r: &RouteConfig| match &r.behaviour {
        Behaviour::Guest(g) => match &g.kv {
            Some(KvName::Shared(name)) => Some((name.clone(), g.kv_quota)),
            _ => None,
        },
        _ => None,
    };
    let Some((name, quota)) = shared(route) else {
        return Ok(());
    };
    let other = earlier
        .iter()
        .find(|o| shared(o).is_some_and(|(n, q)| n == name && q != quota));
    match (other, Item::of("kv", &raw.get_ref().kv)) {
        (Some(other), Some(item)) => Err(item.fail(
            src,
            format!(
                "the store shared:{name} has another quota on line {} \
                 (kv_max_bytes, kv_max_keys); give every route that names it the same",
                other.line
            ),
        )),
        _ => Ok(()),
    }
}

/// Names the earlier route a path collides with (matchit only says "conflict").
fn path_conflict(
    src: &Source,
    raw: &Spanned<RawRoute>,
    route: &RouteConfig,
    earlier: &[RouteConfig],
    err: matchit::InsertError,
) -> ConfigError {
    let item = Item::of("path", &raw.get_ref().path).expect("path was checked");
    let other = earlier.iter().find(|other| {
        let mut pair = matchit::Router::new();
        pair.insert(other.path.clone(), ()).is_ok() && pair.insert(route.path.clone(), ()).is_err()
    });
    match other {
        Some(other) if other.path == route.path => item.fail(
            src,
            format!(
                "the same path is already routed on line {}; remove one of the two routes",
                other.line
            ),
        ),
        Some(other) => item.fail(
            src,
            format!(
                "overlaps the route on line {} ({}): both would match the same requests; \
                 make them differ by a fixed segment, e.g. \"/rooms/by-id/{{id}}\"",
                other.line,
                file_path(&other.path)
            ),
        ),
        None => item.fail(src, format!("cannot be routed: {err}")),
    }
}

/// matchit's `/chat/{*rest}` back to the file's `/chat/*`, for messages.
fn file_path(path: &str) -> String {
    match path.strip_suffix("/{*rest}") {
        Some(prefix) => format!("\"{prefix}/*\""),
        None => format!("\"{path}\""),
    }
}

#[cfg(test)]
mod tests {
    use super::super::toml_error::{
        API_KEYS, NAMESPACE_KEYS, PUSHER_APP_KEYS, ROUTE_KEYS, SERVER_KEYS,
    };
    use super::RawFile;

    /// The keys an unknown-key message lists, as serde sees them.
    fn keys_serde_lists(text: &str) -> Vec<String> {
        let err = toml::from_str::<RawFile>(text)
            .err()
            .expect("an unknown key");
        // "unknown field `zzz`, expected one of `a`, `b`, ..."
        err.message()
            .split('`')
            .skip(3)
            .step_by(2)
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn key_lists_in_messages_match_the_structs() {
        assert_eq!(keys_serde_lists("[server]\nzzz = 1\n"), SERVER_KEYS);
        assert_eq!(keys_serde_lists("[[route]]\nzzz = 1\n"), ROUTE_KEYS);
        assert_eq!(
            keys_serde_lists("[[namespaces]]\nzzz = 1\n"),
            NAMESPACE_KEYS
        );
        assert_eq!(keys_serde_lists("[api]\nzzz = 1\n"), API_KEYS);
        assert_eq!(
            keys_serde_lists("[[route]]\n[[route.apps]]\nzzz = 1\n"),
            PUSHER_APP_KEYS
        );
    }
}
