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

use super::toml_error::toml_error;
use super::value::{Field, Item, Source};
use super::*;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    server: Option<RawServer>,
    route: Option<Vec<Spanned<RawRoute>>>,
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
    max_connections: Field,
    max_connections_per_ip: Field,
    cache_dir: Field,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRoute {
    path: Field,
    native: Field,
    guest: Field,
    max_message: Field,
    outbound_budget: Field,
    idle_timeout: Field,
    subprotocols: Field,
    isolation: Field,
    memory: Field,
    timeout: Field,
    instances: Field,
    recycle_after: Field,
    attachment_max: Field,
    env: Option<Spanned<BTreeMap<String, Spanned<Value>>>>,
    topics: Field,
    log: Field,
    log_rate: Field,
    log_bytes: Field,
    log_burst: Field,
    cpu_share: Field,
}

/// Largest message the gateway will assemble.
const MAX_MESSAGE_CEILING_BYTES: u64 = 1 << 30;
/// Longest idle timeout or outbound wait worth configuring.
const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 3600);
/// A guest call longer than this is a stuck guest, not a slow one.
const MAX_GUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// One wasm page (64 KiB) up to the engine's pool ceiling (1 GiB).
const GUEST_MEMORY_RANGE: (u64, u64) =
    (64 << 10, crate::guest::engine::POOL_MAX_MEMORY_BYTES as u64);
/// Attachments are meant to be small state blobs kept by the host.
const MAX_ATTACHMENT_BYTES: u64 = 1 << 20;
/// More worker threads than this is a typo, not a machine.
const MAX_WORKERS: u64 = 1024;

pub(super) fn parse(text: &str, origin_dir: &Path) -> Result<Config, ConfigError> {
    let src = Source { text };
    let raw: RawFile = toml::from_str(text).map_err(|err| toml_error(&src, err))?;
    let server = server(&src, raw.server.as_ref(), origin_dir)?;
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
        routes.push(route);
    }
    Ok(Config {
        server,
        routes,
        source: None,
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
    server.limits = limits(
        src,
        &server.limits,
        [
            &raw.max_message,
            &raw.outbound_budget,
            &raw.idle_timeout,
            &raw.subprotocols,
        ],
    )?;
    Ok(server)
}

/// `[server]`'s limits with the keys given here applied on top.
fn limits(
    src: &Source,
    base: &Limits,
    [max_message, outbound_budget, idle_timeout, subprotocols]: [&Field; 4],
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
            let kind = match native.string(src, r#""echo" or "relay""#)? {
                "echo" => NativeKind::Echo,
                "relay" => NativeKind::Relay,
                _ => {
                    return Err(native.fail(
                        src,
                        r#"unknown native behaviour; write native = "echo" or native = "relay", or use guest = "file.wasm""#,
                    ))
                }
            };
            refuse_guest_keys(src, raw, &native)?;
            Behaviour::Native(kind)
        }
        (None, Some(guest)) => Behaviour::Guest(guest_config(src, raw, &guest, origin_dir)?),
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
    let limits = limits(
        src,
        server,
        [
            &raw.max_message,
            &raw.outbound_budget,
            &raw.idle_timeout,
            &raw.subprotocols,
        ],
    )?;
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

/// Most lines or bytes per second a route's guests may log: more is a
/// flood, whatever the route.
const MAX_LOG_PER_SEC: u64 = 1_000_000;

/// `log`, `log_rate = "200/s"`, `log_bytes = "256KiB/s"`, `log_burst = 1000`.
fn guest_log(src: &Source, raw: &RawRoute, log: &mut GuestLog) -> Result<(), ConfigError> {
    if let Some(item) = Item::of("log", &raw.log) {
        let levels = r#""off", "error", "warn", "info" or "debug""#;
        log.level = match item.string(src, levels)? {
            "off" => LogLevel::Off,
            "error" => LogLevel::Error,
            "warn" => LogLevel::Warn,
            "info" => LogLevel::Info,
            "debug" => LogLevel::Debug,
            _ => return Err(item.fail(src, format!("unknown log level; write {levels}"))),
        };
    }
    let per_sec = |item: &Item, example: &str| -> Result<String, ConfigError> {
        let text = item.string(src, example)?;
        match text.strip_suffix("/s") {
            Some(amount) => Ok(amount.trim().to_string()),
            None => Err(item.fail(src, format!("not a rate per second; write e.g. {example}"))),
        }
    };
    if let Some(item) = Item::of("log_rate", &raw.log_rate) {
        let amount = per_sec(&item, r#""200/s""#)?;
        log.lines_per_sec = match amount.parse::<u64>() {
            Ok(n) if (1..=MAX_LOG_PER_SEC).contains(&n) => n as u32,
            _ => {
                return Err(item.fail(
                    src,
                    format!(r#"lines per second from 1 to {MAX_LOG_PER_SEC}; write e.g. "200/s""#),
                ))
            }
        };
    }
    if let Some(item) = Item::of("log_bytes", &raw.log_bytes) {
        let amount = per_sec(&item, r#""256KiB/s""#)?;
        log.bytes_per_sec = match super::units::parse_size(&amount) {
            Ok(n) if (1..=MAX_LOG_PER_SEC * 1024).contains(&n) => n,
            _ => {
                return Err(item.fail(
                    src,
                    r#"a size per second from 1B/s to 1000000KiB/s; write e.g. "256KiB/s""#,
                ))
            }
        };
    }
    if let Some(item) = Item::of("log_burst", &raw.log_burst) {
        log.burst = item.count(src, 1, MAX_LOG_PER_SEC)? as u32;
    }
    Ok(())
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

fn refuse_guest_keys(src: &Source, raw: &RawRoute, native: &Item) -> Result<(), ConfigError> {
    let guest_fields = [
        ("isolation", &raw.isolation),
        ("memory", &raw.memory),
        ("timeout", &raw.timeout),
        ("instances", &raw.instances),
        ("recycle_after", &raw.recycle_after),
        ("attachment_max", &raw.attachment_max),
        ("topics", &raw.topics),
        ("log", &raw.log),
        ("log_rate", &raw.log_rate),
        ("log_bytes", &raw.log_bytes),
        ("log_burst", &raw.log_burst),
        ("cpu_share", &raw.cpu_share),
    ];
    let env_span = raw.env.as_ref().map(|env| ("env", env.span()));
    let first = guest_fields
        .iter()
        .filter_map(|(key, field)| field.as_ref().map(|f| (*key, f.span())))
        .chain(env_span)
        .min_by_key(|(_, span)| span.start);
    match first {
        Some((key, span)) => Err(src.error(
            span,
            format!(
                "{key} only applies to guest routes, and this route is {}; remove {key}, \
                 or replace native with guest = \"file.wasm\"",
                native.shown()
            ),
        )),
        None => Ok(()),
    }
}

fn guest_config(
    src: &Source,
    raw: &RawRoute,
    guest: &Item,
    origin_dir: &Path,
) -> Result<GuestConfig, ConfigError> {
    let file = guest.string(src, r#""wasm/echo.wasm""#)?;
    if file.is_empty() {
        return Err(guest.fail(
            src,
            r#"empty; write the component's file, e.g. "wasm/echo.wasm""#,
        ));
    }
    let mut config = GuestConfig::defaults(origin_dir.join(file));
    if let Some(item) = Item::of("isolation", &raw.isolation) {
        config.isolation = match item.string(src, r#""worker" or "batch""#)? {
            "worker" => Isolation::Worker,
            "batch" => Isolation::Batch,
            _ => {
                return Err(item.fail(
                    src,
                    r#"unknown isolation; write "worker" (one instance per worker thread, recycled) or "batch" (a fresh instance per batch)"#,
                ))
            }
        };
    }
    if let Some(item) = Item::of("memory", &raw.memory) {
        config.memory = item.size(src, GUEST_MEMORY_RANGE.0, GUEST_MEMORY_RANGE.1)?;
    }
    if let Some(item) = Item::of("timeout", &raw.timeout) {
        config.timeout = item.duration(src, Duration::from_millis(1), MAX_GUEST_TIMEOUT)?;
    }
    if let Some(item) = Item::of("instances", &raw.instances) {
        config.instances = item.count(src, 1, 1_000_000)? as usize;
    }
    if let Some(item) = Item::of("recycle_after", &raw.recycle_after) {
        config.recycle_after = item.count(src, 1, i64::MAX as u64)?;
    }
    if let Some(item) = Item::of("attachment_max", &raw.attachment_max) {
        config.attachment_max = item.size(src, 0, MAX_ATTACHMENT_BYTES)?;
    }
    guest_log(src, raw, &mut config.log)?;
    if let Some(item) = Item::of("cpu_share", &raw.cpu_share) {
        let text = item.string(src, r#""50%""#)?;
        config.cpu_share = match text.strip_suffix('%').map(|n| n.trim().parse::<u32>()) {
            Some(Ok(n)) if (1..=100).contains(&n) => n,
            _ => {
                return Err(item.fail(
                    src,
                    r#"a percentage of one core from 1% to 100%; write e.g. "50%""#,
                ))
            }
        };
    }
    if let Some(env) = &raw.env {
        for (name, value) in env.get_ref() {
            let item = Item {
                key: name,
                value: value.get_ref(),
                span: value.span(),
            };
            if name.is_empty() || name.contains(['=', '\0']) {
                return Err(item.fail(
                    src,
                    "not a usable environment variable name; write e.g. WEIR_AUTH_TOKEN = \"...\"",
                ));
            }
            let text = match item.value {
                Value::String(s) => s.clone(),
                Value::Integer(_) | Value::Float(_) | Value::Boolean(_) => {
                    return Err(item.fail(
                        src,
                        format!(
                            "environment values are strings; write {name} = \"{}\"",
                            item.value
                        ),
                    ))
                }
                _ => {
                    return Err(
                        item.fail(src, format!("not a string; write e.g. {name} = \"value\""))
                    )
                }
            };
            config.env.insert(name.clone(), text);
        }
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::super::toml_error::{ROUTE_KEYS, SERVER_KEYS};
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
    }
}
