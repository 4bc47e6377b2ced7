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

use super::units::{self, SizeError};
use super::*;

/// Any single value: its type is checked by hand so that the message can name
/// the key and give an example of what to write.
type Field = Option<Spanned<Value>>;

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
}

/// Keys of `[server]`, in the order the messages list them.
const SERVER_KEYS: &[&str] = &[
    "listen",
    "workers",
    "max_message",
    "outbound_budget",
    "idle_timeout",
    "handshake_timeout",
    "subprotocols",
    "max_connections",
    "max_connections_per_ip",
    "cache_dir",
];

/// Keys of a `[[route]]`, in the order the messages list them.
const ROUTE_KEYS: &[&str] = &[
    "path",
    "native",
    "guest",
    "max_message",
    "outbound_budget",
    "idle_timeout",
    "subprotocols",
    "isolation",
    "memory",
    "timeout",
    "instances",
    "recycle_after",
    "attachment_max",
    "env",
];

/// The text being parsed, to turn byte offsets into line numbers.
struct Source<'a> {
    text: &'a str,
}

impl Source<'_> {
    fn line(&self, offset: usize) -> usize {
        let end = offset.min(self.text.len());
        self.text.as_bytes()[..end]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1
    }

    fn line_text(&self, line: usize) -> &str {
        self.text.lines().nth(line - 1).unwrap_or("").trim()
    }

    fn error(&self, span: Range<usize>, message: impl std::fmt::Display) -> ConfigError {
        let line = self.line(span.start);
        ConfigError {
            message: format!("line {line}: {message}"),
            line: Some(line),
        }
    }
}

/// A key, its value and where the value is: what every check needs to report.
struct Item<'a> {
    key: &'a str,
    value: &'a Value,
    span: Range<usize>,
}

impl<'a> Item<'a> {
    fn of(key: &'a str, field: &'a Field) -> Option<Item<'a>> {
        field.as_ref().map(|spanned| Item {
            key,
            value: spanned.get_ref(),
            span: spanned.span(),
        })
    }

    /// `max_message = "32 megs"` — how the value looks in the file.
    fn shown(&self) -> String {
        format!("{} = {}", self.key, self.value)
    }

    fn fail(&self, src: &Source, why: impl std::fmt::Display) -> ConfigError {
        src.error(self.span.clone(), format!("{}: {why}", self.shown()))
    }

    fn string(&self, src: &Source, example: &str) -> Result<&'a str, ConfigError> {
        match self.value {
            Value::String(s) => Ok(s),
            _ => Err(self.fail(src, format!("not a string; write e.g. {example}"))),
        }
    }

    /// A byte count, written `"32MiB"` or as a plain integer of bytes.
    fn size(&self, src: &Source, min: u64, max: u64) -> Result<usize, ConfigError> {
        const HINT: &str = r#"write e.g. "32MiB", "512KiB" or a number of bytes"#;
        let bytes = match self.value {
            Value::Integer(n) if *n < 0 => {
                return Err(self.fail(src, format!("a size cannot be negative; {HINT}")))
            }
            Value::Integer(n) => *n as u64,
            Value::String(s) => match units::parse_size(s) {
                Ok(bytes) => bytes,
                Err(SizeError::NotASize) => {
                    return Err(self.fail(src, format!("not a size; {HINT}")))
                }
                Err(SizeError::AmbiguousUnit { suggestion }) => {
                    return Err(self.fail(
                        src,
                        format!("sizes use binary units (KiB, MiB, GiB); write \"{suggestion}\""),
                    ))
                }
                Err(SizeError::TooLarge) => u64::MAX,
            },
            _ => return Err(self.fail(src, format!("not a size; {HINT}"))),
        };
        if bytes < min {
            return Err(self.fail(
                src,
                format!("too small; write at least \"{}\"", units::format_size(min)),
            ));
        }
        if bytes > max {
            return Err(self.fail(
                src,
                format!("too large; write at most \"{}\"", units::format_size(max)),
            ));
        }
        usize::try_from(bytes).map_err(|_| self.fail(src, "too large for this machine"))
    }

    /// A duration with its unit: `"30s"`, `"10ms"`, `"2m"`, `"1h"`.
    fn duration(
        &self,
        src: &Source,
        min: Duration,
        max: Duration,
    ) -> Result<Duration, ConfigError> {
        const HINT: &str = r#"write e.g. "30s", "10ms", "2m" or "1h""#;
        let duration = match self.value {
            Value::Integer(n) => {
                return Err(self.fail(
                    src,
                    format!("a duration needs a unit; write e.g. \"{n}s\" or \"{n}ms\""),
                ))
            }
            Value::String(s) => units::parse_duration(s)
                .ok_or_else(|| self.fail(src, format!("not a duration; {HINT}")))?,
            _ => return Err(self.fail(src, format!("not a duration; {HINT}"))),
        };
        if duration < min {
            return Err(self.fail(
                src,
                format!(
                    "too short; write at least \"{}\"",
                    units::format_duration(min)
                ),
            ));
        }
        if duration > max {
            return Err(self.fail(
                src,
                format!(
                    "too long; write at most \"{}\"",
                    units::format_duration(max)
                ),
            ));
        }
        Ok(duration)
    }

    /// A whole number in `min..=max`.
    fn count(&self, src: &Source, min: u64, max: u64) -> Result<u64, ConfigError> {
        let range = format!("write a whole number from {min} to {max}");
        match self.value {
            Value::Integer(n) if (min as i128..=max as i128).contains(&(*n as i128)) => {
                Ok(*n as u64)
            }
            Value::Integer(_) => Err(self.fail(src, format!("out of range; {range}"))),
            Value::String(s) if s.trim().parse::<u64>().is_ok() => Err(self.fail(
                src,
                format!(
                    "a count is written without quotes; write {} = {}",
                    self.key,
                    s.trim()
                ),
            )),
            _ => Err(self.fail(src, format!("not a number; {range}"))),
        }
    }

    /// Subprotocol names, in preference order (RFC 6455 section 4.1: each is
    /// an HTTP token, and they must be unique).
    fn subprotocols(&self, src: &Source) -> Result<Vec<String>, ConfigError> {
        const HINT: &str = r#"write e.g. ["chat.v2", "chat.v1"]"#;
        let Value::Array(items) = self.value else {
            return Err(self.fail(src, format!("not a list of names; {HINT}")));
        };
        let mut names = Vec::with_capacity(items.len());
        for item in items {
            let Value::String(name) = item else {
                return Err(self.fail(src, format!("{item} is not a string; {HINT}")));
            };
            if !is_token(name) {
                return Err(self.fail(
                    src,
                    format!(
                        "{item} is not a valid subprotocol name (letters, digits and \
                         !#$%&'*+-.^_`|~ only, no spaces or commas); {HINT}"
                    ),
                ));
            }
            if names.contains(name) {
                return Err(self.fail(src, format!("{item} is listed twice; list each name once")));
            }
            names.push(name.clone());
        }
        Ok(names)
    }
}

/// RFC 7230 section 3.2.6 `token`, the grammar of a subprotocol name.
fn is_token(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Largest message the gateway will assemble.
const MAX_MESSAGE_CEILING_BYTES: u64 = 1 << 30;
/// Longest idle timeout or outbound wait worth configuring.
const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 3600);
/// A guest call longer than this is a stuck guest, not a slow one.
const MAX_GUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// wasm32 linear memory is at most 4 GiB; one page is 64 KiB.
const GUEST_MEMORY_RANGE: (u64, u64) = (64 << 10, 4 << 30);
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
    Ok(RouteConfig {
        path,
        line,
        behaviour,
        limits,
    })
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

/// Rewrites serde/toml's messages into ones that say what to write instead.
fn toml_error(src: &Source, err: toml::de::Error) -> ConfigError {
    let span = err.span().unwrap_or(0..0);
    let message = err.message().trim();
    let line = src.line(span.start);
    let line_text = src.line_text(line);
    if let Some(rest) = message.strip_prefix("unknown field `") {
        let key = rest.split('`').next().unwrap_or_default();
        return unknown_key(src, span, key, message);
    }
    if line_text.starts_with("[route]") {
        return src.error(
            span,
            "write [[route]] (two brackets) for each route; [route] is a single table",
        );
    }
    if line_text.starts_with("[[server]]") {
        return src.error(
            span,
            "write [server] (one bracket); the file has one server section",
        );
    }
    if message.contains("expected a map") && line_text.starts_with("env") {
        return src.error(
            span,
            r#"env is a table of names to strings; write env = { WEIR_AUTH_TOKEN = "let-me-in" }"#,
        );
    }
    if message.contains("duplicate key") {
        return src.error(
            span,
            format!("{message}; each key may appear once per table"),
        );
    }
    if message.contains("string values must be quoted") {
        let (key, value) = line_text.split_once('=').unwrap_or((line_text, ""));
        let (key, value) = (key.trim(), value.trim());
        let fix = if value.is_empty() {
            format!("`{line_text}` has no value; write e.g. {}", example(key))
        } else {
            format!("`{line_text}`: text values need quotes; write {key} = \"{value}\"")
        };
        return src.error(span, fix);
    }
    let message = message
        .replace("struct RawServer", "the [server] table")
        .replace("struct RawRoute", "a [[route]] table")
        .replace("struct RawFile", "a routes file");
    src.error(span, format!("{message} (in `{line_text}`)"))
}

/// A correct line for `key`, for messages about a line that did not parse.
fn example(key: &str) -> String {
    let value = match key {
        "listen" => r#""127.0.0.1:9001""#,
        "workers" => "0",
        "max_message" | "outbound_budget" | "memory" => r#""32MiB""#,
        "attachment_max" => r#""16KiB""#,
        "idle_timeout" | "handshake_timeout" => r#""30s""#,
        "timeout" => r#""100ms""#,
        "subprotocols" => r#"["chat.v1"]"#,
        "max_connections" | "max_connections_per_ip" | "instances" | "recycle_after" => "1000",
        "cache_dir" => r#""/var/cache/weir""#,
        "path" => r#""/echo""#,
        "native" => r#""echo""#,
        "guest" => r#""wasm/echo.wasm""#,
        "isolation" => r#""worker""#,
        "env" => r#"{ WEIR_AUTH_TOKEN = "let-me-in" }"#,
        _ => r#""value""#,
    };
    format!("{key} = {value}")
}

fn unknown_key(src: &Source, span: Range<usize>, key: &str, message: &str) -> ConfigError {
    // serde lists the valid fields after "expected"; they say which table it is.
    let expected = message.split_once("expected").map_or("", |(_, list)| list);
    let (table, valid): (&str, Vec<&str>) = if expected.contains("`listen`") {
        ("[server]", SERVER_KEYS.to_vec())
    } else if expected.contains("`path`") {
        ("[[route]]", ROUTE_KEYS.to_vec())
    } else {
        ("the top level", vec!["[server]", "[[route]]"])
    };
    let mut hint = match closest(key, &valid) {
        Some(near) => format!("; did you mean {near}?"),
        None => String::new(),
    };
    if table == "the top level" {
        if SERVER_KEYS.contains(&key) {
            hint = format!("; {key} belongs under [server]");
        } else if ROUTE_KEYS.contains(&key) {
            hint = format!("; {key} belongs under a [[route]]");
        }
    }
    src.error(
        span,
        format!(
            "unknown key \"{key}\" in {table}{hint} (valid keys: {})",
            valid.join(", ")
        ),
    )
}

/// The valid key nearest to a misspelt one, if it is a plausible typo.
fn closest<'k>(key: &str, valid: &[&'k str]) -> Option<&'k str> {
    valid
        .iter()
        .map(|candidate| {
            (
                edit_distance(key, candidate.trim_matches(['[', ']'])),
                *candidate,
            )
        })
        .filter(|(distance, _)| *distance <= 2.max(key.len() / 4))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

/// Levenshtein distance, small strings only.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(row[j + 1] + 1);
        }
    }
    row[b.len()]
}
