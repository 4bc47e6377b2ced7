//! Turns routes-file text into a validated [`Config`]: serde reads the shape
//! (unknown keys are refused), then every value is checked here against its
//! line in the file, and the paths are checked together with matchit.

/// The fourteen limit keys `[server]` and a route both take, in the order
/// [`limits`] reads them: written once for both raw sections.
macro_rules! limit_fields {
    ($raw:expr) => {
        [
            &$raw.max_message,
            &$raw.outbound_budget,
            &$raw.idle_timeout,
            &$raw.subprotocols,
            &$raw.origins,
            &$raw.require_origin,
            &$raw.compression,
            &$raw.compression_min,
            &$raw.compression_context,
            &$raw.compression_level,
            &$raw.max_upgrade_rate_per_ip,
            &$raw.max_message_rate,
            &$raw.max_byte_rate,
            &$raw.rate_exceeded,
        ]
    };
}

mod route_keys;
mod sections;

use route_keys::*;
use sections::*;

use std::collections::BTreeMap;
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
    max_upgrade_rate_per_ip: Field,
    max_message_rate: Field,
    max_byte_rate: Field,
    rate_exceeded: Field,
    trusted_proxies: Field,
    max_connections: Field,
    max_connections_per_ip: Field,
    max_upgrade_rate: Field,
    cache_dir: Field,
    state_dir: Field,
    oci_cache: Field,
    reuse_port: Field,
    listen_backlog: Field,
    public_metrics: Field,
    tls: Field,
    allowed_hosts: Field,
    h2_max_streams: Field,
    io: Field,
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
    pub(super) max_upgrade_rate_per_ip: Field,
    pub(super) max_message_rate: Field,
    pub(super) max_byte_rate: Field,
    pub(super) rate_exceeded: Field,
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

/// Highest upgrade or message rate (per second) worth configuring.
pub(super) const MAX_RATE: u64 = 10_000_000;
/// Highest byte rate (per second) worth configuring.
const MAX_BYTE_RATE: u64 = 1 << 40;
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

/// `[server]`'s limits with the keys given here applied on top.
fn limits(
    src: &Source,
    base: &Limits,
    [max_message, outbound_budget, idle_timeout, subprotocols, origins, require_origin, compression, compression_min, compression_context, compression_level, upgrade_rate_per_ip, message_rate, byte_rate, rate_exceeded]: [&Field; 14],
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
    if let Some(item) = Item::of("max_upgrade_rate_per_ip", upgrade_rate_per_ip) {
        limits.rates.upgrades_per_ip = item.count(src, 0, MAX_RATE)? as u32;
    }
    if let Some(item) = Item::of("max_message_rate", message_rate) {
        limits.rates.messages = item.count(src, 0, MAX_RATE)? as u32;
    }
    if let Some(item) = Item::of("max_byte_rate", byte_rate) {
        limits.rates.bytes = item.size(src, 0, MAX_BYTE_RATE)? as u64;
    }
    if let Some(item) = Item::of("rate_exceeded", rate_exceeded) {
        limits.rates.exceeded = match item.string(src, r#""drop" or "close""#)? {
            "drop" => RateExceeded::Drop,
            "close" => RateExceeded::Close,
            _ => {
                return Err(item.fail(
                    src,
                    r#"write rate_exceeded = "drop" (discard the message and count it) or "close" (close the connection with 1008)"#,
                ))
            }
        };
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
                    super::pusher::pusher_config(src, raw, &native, &path, origin_dir)?,
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
    let mut limits = limits(src, server, limit_fields!(raw))?;
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

#[cfg(test)]
mod tests {
    use super::super::toml_error::{
        API_KEYS, NAMESPACE_KEYS, PUSHER_APP_KEYS, PUSHER_WEBHOOK_KEYS, ROUTE_KEYS, SERVER_KEYS,
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
        assert_eq!(
            keys_serde_lists("[[route]]\n[[route.apps]]\n[[route.apps.webhooks]]\nzzz = 1\n"),
            PUSHER_WEBHOOK_KEYS
        );
    }
}
