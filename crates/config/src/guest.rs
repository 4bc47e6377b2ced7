//! A guest route's keys in the routes file: the component and its limits,
//! environment, log budget and CPU share, and their refusal on native routes.

use std::path::{Path, PathBuf};
use std::time::Duration;

use toml::Value;

use super::parse::RawRoute;
use super::value::{first_set, refuse_key, Item, Source};
use super::*;

/// Largest linear memory any guest may have: a route's `memory` must not
/// exceed it (the routes file refuses more, README says so); the engine
/// sizes its instance pool's slots by it. A ceiling on
/// the pool, not a reservation: slots are virtual address space and only
/// touched pages cost RAM. 1 GiB rather than wasm32's 4 GiB: `memory` is
/// per instance and a route may run hundreds of them, so one instance
/// wanting more than this is far more likely a leak than a workload.
pub const GUEST_MEMORY_MAX_BYTES: usize = 1 << 30;
/// A guest call longer than this is a stuck guest, not a slow one.
pub(super) const MAX_GUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// One wasm page (64 KiB) up to the engine's pool ceiling (1 GiB).
pub(super) const GUEST_MEMORY_RANGE: (u64, u64) = (64 << 10, GUEST_MEMORY_MAX_BYTES as u64);
/// Attachments are meant to be small state blobs kept by the host.
const MAX_ATTACHMENT_BYTES: u64 = 1 << 20;

/// A native route may not carry guest keys: each is named with the fix.
pub(super) fn refuse_guest_keys(
    src: &Source,
    raw: &RawRoute,
    native: &Item,
    takes_topics: bool,
) -> Result<(), ConfigError> {
    let topics = if takes_topics { &None } else { &raw.topics };
    let guest_fields = [
        ("isolation", &raw.isolation),
        ("memory", &raw.memory),
        ("timeout", &raw.timeout),
        ("instances", &raw.instances),
        ("recycle_after", &raw.recycle_after),
        ("attachment_max", &raw.attachment_max),
        ("topics", topics),
        ("log", &raw.log),
        ("log_rate", &raw.log_rate),
        ("log_bytes", &raw.log_bytes),
        ("log_burst", &raw.log_burst),
        ("cpu_share", &raw.cpu_share),
        ("allow_outbound", &raw.allow_outbound),
        ("outbound_timeout", &raw.outbound_timeout),
        ("outbound_max_concurrent", &raw.outbound_max_concurrent),
        ("outbound_max_response", &raw.outbound_max_response),
        ("outbound_ca", &raw.outbound_ca),
        ("allow_private", &raw.allow_private),
        ("kv", &raw.kv),
        ("kv_max_bytes", &raw.kv_max_bytes),
        ("kv_max_keys", &raw.kv_max_keys),
    ];
    let env_span = raw.env.as_ref().map(|env| ("env", env.span()));
    let first = first_set(guest_fields)
        .into_iter()
        .chain(env_span)
        .min_by_key(|(_, span)| span.start);
    refuse_key(
        src,
        first,
        native,
        "guest routes",
        "replace native with guest = \"file.wasm\"",
    )
}

/// A `guest` value: a file (resolved against the routes file's directory)
/// or an `oci://` reference, whose `wasm` the host sets once it has pulled
/// the component into its cache (`host/src/oci/`).
pub(super) fn guest_source(
    src: &Source,
    guest: &Item,
    origin_dir: &Path,
    example: &str,
) -> Result<GuestConfig, ConfigError> {
    let file = guest.string(src, &format!("\"{example}\""))?;
    if file.is_empty() {
        return Err(guest.fail(
            src,
            format!(
                "empty; write the component's file, e.g. \"{example}\", or an oci:// reference"
            ),
        ));
    }
    if OciRef::is_oci(file) {
        let oci = OciRef::parse(file).map_err(|why| guest.fail(src, why))?;
        let mut config = GuestConfig::defaults(PathBuf::new());
        config.oci = Some(Box::new(oci));
        return Ok(config);
    }
    Ok(GuestConfig::defaults(origin_dir.join(file)))
}

pub(super) fn guest_config(
    src: &Source,
    raw: &RawRoute,
    guest: &Item,
    origin_dir: &Path,
) -> Result<GuestConfig, ConfigError> {
    let mut config = guest_source(src, guest, origin_dir, "wasm/echo.wasm")?;
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
    guest_io(src, raw, &mut config, origin_dir)?;
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

/// Longest `outbound_timeout` worth configuring.
const MAX_OUTBOUND_TIMEOUT: Duration = Duration::from_secs(300);
/// Largest `outbound_max_response`: a response is handed to a guest whole.
const MAX_OUTBOUND_RESPONSE_BYTES: u64 = 64 << 20;

/// `allow_outbound`, `outbound_timeout`, `outbound_max_concurrent`,
/// `outbound_max_response`, `outbound_ca`, `allow_private`, `kv` and its quota.
fn guest_io(
    src: &Source,
    raw: &RawRoute,
    config: &mut GuestConfig,
    origin_dir: &Path,
) -> Result<(), ConfigError> {
    let policy = &mut config.outbound;
    if let Some(item) = Item::of("allow_outbound", &raw.allow_outbound) {
        const HINT: &str = r#"write e.g. ["http://127.0.0.1:8080", "http://api.internal/v1/"]"#;
        let Value::Array(items) = item.value else {
            return Err(item.fail(src, format!("not a list of URL prefixes; {HINT}")));
        };
        for entry in items {
            let Value::String(text) = entry else {
                return Err(item.fail(src, format!("{entry} is not a string; {HINT}")));
            };
            let prefix = outbound_prefix(text).map_err(|why| {
                item.fail(src, format!("{entry} is not a URL prefix ({why}); {HINT}"))
            })?;
            policy.allow.push(prefix);
        }
    }
    if let Some(item) = Item::of("outbound_timeout", &raw.outbound_timeout) {
        policy.timeout = item.duration(src, Duration::from_millis(1), MAX_OUTBOUND_TIMEOUT)?;
    }
    if let Some(item) = Item::of("outbound_max_concurrent", &raw.outbound_max_concurrent) {
        policy.max_concurrent = item.count(src, 1, 1_000_000)? as usize;
    }
    if let Some(item) = Item::of("outbound_max_response", &raw.outbound_max_response) {
        policy.max_response = item.size(src, 0, MAX_OUTBOUND_RESPONSE_BYTES)?;
    }
    if let Some(item) = Item::of("outbound_ca", &raw.outbound_ca) {
        if !policy.allow.iter().any(|p| p.scheme == "https") {
            return Err(item.fail(
                src,
                "outbound_ca is for https:// requests, and allow_outbound lists none; \
                 remove it, or allow an https:// prefix",
            ));
        }
        let file = item.string(src, r#""certs/ca.pem""#)?;
        if file.is_empty() {
            return Err(item.fail(src, r#"empty; write the CA file, e.g. "certs/ca.pem""#));
        }
        policy.ca = Some(origin_dir.join(file));
    }
    if let Some(item) = Item::of("allow_private", &raw.allow_private) {
        policy.allow_private = item.flag(src)?;
        if policy.allow_private && policy.allow.is_empty() {
            return Err(item.fail(
                src,
                "allow_private lets allow_outbound's host names resolve to private addresses, \
                 and allow_outbound lists none; remove it, or add allow_outbound",
            ));
        }
    }
    if let Some(item) = Item::of("kv", &raw.kv) {
        const HINT: &str = r#"write "route" (the route's own store) or "shared:NAME""#;
        let text = item.string(src, r#""route""#)?;
        config.kv = Some(match text.split_once(':') {
            None if text == "route" => KvName::Route,
            Some(("shared", name))
                if !name.is_empty()
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)) =>
            {
                KvName::Shared(name.to_string())
            }
            _ => {
                return Err(item.fail(
                    src,
                    format!("not a store; {HINT} (a name of letters, digits, - _ .)"),
                ))
            }
        });
    }
    kv_quota(src, raw, config)
}

/// Largest `kv_max_bytes`: a Redis-backed store is mirrored whole in each
/// node's memory.
const MAX_KV_BYTES: u64 = 16 << 30;
/// Largest `kv_max_keys`.
const MAX_KV_KEYS: u64 = 100_000_000;

/// `kv_max_bytes` and `kv_max_keys`: only beside a `kv`.
fn kv_quota(src: &Source, raw: &RawRoute, config: &mut GuestConfig) -> Result<(), ConfigError> {
    let quota = &mut config.kv_quota;
    if let Some(item) = Item::of("kv_max_bytes", &raw.kv_max_bytes) {
        quota.max_bytes = item.size(src, 1, MAX_KV_BYTES)? as u64;
    }
    if let Some(item) = Item::of("kv_max_keys", &raw.kv_max_keys) {
        quota.max_keys = item.count(src, 1, MAX_KV_KEYS)?;
    }
    if config.kv.is_none() {
        let first = [
            ("kv_max_bytes", &raw.kv_max_bytes),
            ("kv_max_keys", &raw.kv_max_keys),
        ]
        .into_iter()
        .find_map(|(key, field)| Some((key, field.as_ref()?.span())));
        if let Some((key, span)) = first {
            return Err(src.error(
                span,
                format!(r#"{key} is the quota of the route's key-value store, and the route has none; add kv = "route", or remove {key}"#),
            ));
        }
    }
    Ok(())
}

/// An `allow_outbound` entry: `http[s]://host[:port][/path]`.
fn outbound_prefix(text: &str) -> Result<OutboundPrefix, &'static str> {
    let (scheme, rest) = text.split_once("://").ok_or("no scheme")?;
    let scheme = scheme.to_ascii_lowercase();
    let default_port = match scheme.as_str() {
        "http" => 80,
        "https" => 443,
        _ => return Err("the scheme must be http or https"),
    };
    let (authority, path) = match rest.find('/') {
        Some(at) => rest.split_at(at),
        None => (rest, "/"),
    };
    if authority.is_empty() || authority.contains(['@', '?', '#', ' ']) || path.contains(['?', '#'])
    {
        return Err("write scheme://host[:port][/path]");
    }
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(']') || authority.starts_with('[') => (
            host,
            port.parse::<u16>()
                .map_err(|_| "the port is not a number")?,
        ),
        _ => (authority, default_port),
    };
    if host.is_empty() {
        return Err("no host");
    }
    // Stored normalised, as request paths are before they are matched; a
    // prefix that does not survive normalisation as written is a typo.
    let path = match crate::url_check::normalize_path(path) {
        Ok(normal) if normal == path => normal,
        Ok(_) => return Err("write the path without dot segments, repeated slashes or escapes of letters and digits"),
        Err(_) => return Err("the path has no single reading (an encoded slash, backslash, .. above the root or bad % escape)"),
    };
    Ok(OutboundPrefix {
        scheme,
        host: host.to_ascii_lowercase(),
        port,
        path,
    })
}
