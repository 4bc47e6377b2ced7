//! A proxy route's keys in the routes file: the upstream URL (checked
//! against the route's path parameters), `connect_timeout` and
//! `forward_headers`, and their refusal on other routes.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use toml::Value;

use super::guest::guest_config;
use super::parse::RawRoute;
use super::value::{first_set, refuse_key, Item, Source};
use super::*;

/// Longest wait for an upstream worth configuring: past it a client has
/// long given up.
const MAX_CONNECT_TIMEOUT: Duration = Duration::from_secs(300);

/// Headers weir writes itself on the upstream request; forwarding the
/// client's would let it speak for the gateway (or break the handshake).
const HEADERS_WEIR_SETS: &[&str] = &[
    "host",
    "connection",
    "upgrade",
    "content-length",
    "transfer-encoding",
    "x-forwarded-for",
    "x-forwarded-proto",
];

pub(super) fn proxy_config(
    src: &Source,
    raw: &RawRoute,
    native: &Item,
    route_path: &str,
    origin_dir: &Path,
) -> Result<Arc<ProxyConfig>, ConfigError> {
    if let Some(item) = Item::of("subprotocols", &raw.subprotocols) {
        return Err(item.fail(
            src,
            "a proxy route offers the upstream the client's subprotocols and returns the one \
             the upstream chose; remove subprotocols",
        ));
    }
    let Some(item) = Item::of("upstream", &raw.upstream) else {
        return Err(native.fail(
            src,
            r#"a proxy route needs its upstream; add e.g. upstream = "ws://127.0.0.1:9100/rooms/{room}""#,
        ));
    };
    let upstream = item.string(src, r#""ws://127.0.0.1:9100/""#)?;
    let (rest, tls) = if let Some(rest) = upstream.strip_prefix("ws://") {
        (rest, false)
    } else if let Some(rest) = upstream.strip_prefix("wss://") {
        (rest, true)
    } else {
        return Err(item.fail(
            src,
            r#"an upstream is a ws:// or wss:// URL; write e.g. "ws://127.0.0.1:9100/rooms/{room}""#,
        ));
    };
    let (authority, path) = match rest.find(['/', '?']) {
        Some(at) if rest.as_bytes()[at] == b'/' => (&rest[..at], rest[at..].to_string()),
        Some(at) => (&rest[..at], format!("/{}", &rest[at..])),
        None => (rest, "/".to_string()),
    };
    let default_port = if tls { 443 } else { 80 };
    let (host, port) = split_authority(authority, default_port).ok_or_else(|| {
        item.fail(
            src,
            "no host:port after ws:// or wss://; write e.g. \"ws://127.0.0.1:9100/\"",
        )
    })?;
    if path.contains(['#', ' ']) {
        return Err(item.fail(src, "an upstream path has no fragment or spaces"));
    }
    check_placeholders(&path, route_path).map_err(|why| item.fail(src, why))?;
    let path = mark_wildcards(&path, route_path);
    let mut config = ProxyConfig {
        upstream: upstream.to_string(),
        authority: authority.to_string(),
        host,
        port,
        path,
        connect_timeout: DEFAULT_PROXY_CONNECT_TIMEOUT,
        forward_headers: Vec::new(),
        tls,
        upstream_ca: None,
        filter: None,
    };
    if let Some(item) = Item::of("connect_timeout", &raw.connect_timeout) {
        config.connect_timeout =
            item.duration(src, Duration::from_millis(1), MAX_CONNECT_TIMEOUT)?;
    }
    if let Some(item) = Item::of("forward_headers", &raw.forward_headers) {
        config.forward_headers = forward_headers(src, &item)?;
    }
    if let Some(item) = Item::of("upstream_ca", &raw.upstream_ca) {
        if !tls {
            return Err(item.fail(
                src,
                "upstream_ca is for wss:// upstreams; remove it, or write the upstream as wss://",
            ));
        }
        let file = item.string(src, r#""certs/upstream-ca.pem""#)?;
        if file.is_empty() {
            return Err(item.fail(src, r#"empty; write the CA file, e.g. "certs/ca.pem""#));
        }
        config.upstream_ca = Some(origin_dir.join(file));
    }
    if let Some(item) = Item::of("filter", &raw.filter) {
        config.filter = Some(guest_config(src, raw, &item, origin_dir)?);
    }
    Ok(Arc::new(config))
}

/// `host[:port]` (`[v6]:port` for IPv6); the port defaults to
/// `default_port` (80 for ws://, 443 for wss://).
fn split_authority(authority: &str, default_port: u16) -> Option<(String, u16)> {
    if authority.is_empty() || authority.contains(['@', ' ']) {
        return None;
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6.split_once(']')?;
        match after {
            "" => (host, None),
            _ => (host, Some(after.strip_prefix(':')?)),
        }
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    let port = match port {
        Some(p) => p.parse::<u16>().ok().filter(|&p| p != 0)?,
        None => default_port,
    };
    (!host.is_empty()).then(|| (host.to_string(), port))
}

/// What is wrong with the placeholders of an upstream path.
#[derive(Debug, thiserror::Error)]
enum PlaceholderError {
    #[error("a \"}}\" without its \"{{\"")]
    UnopenedBrace,
    #[error("a \"{{\" without its \"}}\"")]
    UnclosedBrace,
    #[error("a parameter is a name in braces, e.g. {{room}}")]
    BadName,
    /// `{name}` is not among the route's parameters (`known` says which it has).
    #[error("{{{name}}} is not a parameter of this route's path ({known})")]
    NotAParameter { name: String, known: String },
}

/// Every `{name}` in the upstream path must be a parameter of the route's
/// path (`{*rest}` is named `rest`).
fn check_placeholders(upstream_path: &str, route_path: &str) -> Result<(), PlaceholderError> {
    let params = placeholders(route_path)?;
    for name in placeholders(upstream_path)? {
        let name = name.trim_start_matches('*');
        if !params.iter().any(|p| p.trim_start_matches('*') == name) {
            let known = if params.is_empty() {
                "the route's path has none".to_string()
            } else {
                format!(
                    "the route's path has {}",
                    params
                        .iter()
                        .map(|p| format!("{{{}}}", p.trim_start_matches('*')))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            return Err(PlaceholderError::NotAParameter {
                name: name.to_string(),
                known,
            });
        }
    }
    Ok(())
}

/// `upstream_path` with each placeholder of a `{*rest}` wildcard written
/// `{*rest}`: the proxy lets a wildcard's value keep its slashes (each
/// segment checked), and no other parameter's (`url_check::encode_param`).
fn mark_wildcards(upstream_path: &str, route_path: &str) -> String {
    let mut out = upstream_path.to_string();
    for param in placeholders(route_path).unwrap_or_default() {
        if let Some(name) = param.strip_prefix('*') {
            out = out.replace(&format!("{{{name}}}"), &format!("{{*{name}}}"));
        }
    }
    out
}

/// The names in braces of a path template.
fn placeholders(template: &str) -> Result<Vec<&str>, PlaceholderError> {
    let mut names = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find(['{', '}']) {
        if rest.as_bytes()[open] == b'}' {
            return Err(PlaceholderError::UnopenedBrace);
        }
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else {
            return Err(PlaceholderError::UnclosedBrace);
        };
        let name = &after[..close];
        if name.is_empty() || name.contains(['{', '/']) {
            return Err(PlaceholderError::BadName);
        }
        names.push(name);
        rest = &after[close + 1..];
    }
    Ok(names)
}

/// Header names, checked and lower-cased.
fn forward_headers(src: &Source, item: &Item) -> Result<Vec<String>, ConfigError> {
    const HINT: &str = r#"write e.g. ["cookie", "authorization"]"#;
    let Value::Array(items) = item.value else {
        return Err(item.fail(src, format!("not a list of header names; {HINT}")));
    };
    let mut names: Vec<String> = Vec::with_capacity(items.len());
    for value in items {
        let Value::String(name) = value else {
            return Err(item.fail(src, format!("{value} is not a string; {HINT}")));
        };
        let lower = name.to_ascii_lowercase();
        if http::HeaderName::from_bytes(lower.as_bytes()).is_err() {
            return Err(item.fail(src, format!("{value} is not a header name; {HINT}")));
        }
        if HEADERS_WEIR_SETS.contains(&lower.as_str()) || lower.starts_with("sec-websocket-") {
            return Err(item.fail(
                src,
                format!("{value} is written by weir itself on the upstream request; remove it"),
            ));
        }
        if !names.contains(&lower) {
            names.push(lower);
        }
    }
    Ok(names)
}

/// Only proxy routes take `upstream`, `connect_timeout`, `forward_headers`,
/// `upstream_ca` and `filter`.
pub(super) fn refuse_proxy_keys(
    src: &Source,
    raw: &RawRoute,
    kind: &Item,
) -> Result<(), ConfigError> {
    let first = first_set([
        ("upstream", &raw.upstream),
        ("connect_timeout", &raw.connect_timeout),
        ("forward_headers", &raw.forward_headers),
        ("upstream_ca", &raw.upstream_ca),
        ("filter", &raw.filter),
    ]);
    refuse_key(src, first, kind, "proxy routes", "write native = \"proxy\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authorities() {
        assert_eq!(
            split_authority("127.0.0.1:9100", 80),
            Some(("127.0.0.1".into(), 9100))
        );
        assert_eq!(split_authority("backend", 80), Some(("backend".into(), 80)));
        assert_eq!(split_authority("[::1]:81", 80), Some(("::1".into(), 81)));
        assert_eq!(split_authority("[::1]", 80), Some(("::1".into(), 80)));
        assert_eq!(split_authority("host:0", 80), None);
        assert_eq!(split_authority("host:x", 80), None);
        assert_eq!(split_authority("user@host", 80), None);
        assert_eq!(split_authority("", 80), None);
    }

    #[test]
    fn placeholders_must_be_route_parameters() {
        assert!(check_placeholders("/rooms/{room}", "/r/{room}").is_ok());
        assert!(check_placeholders("/files/{rest}", "/f/{*rest}").is_ok());
        assert!(check_placeholders("/x/{user}", "/r/{room}").is_err());
        assert!(check_placeholders("/x/{user", "/r/{room}").is_err());
        assert!(check_placeholders("/x/}", "/r").is_err());
        let unopened = check_placeholders("/x/}", "/r").unwrap_err().to_string();
        assert_eq!(unopened, r#"a "}" without its "{""#);
        let unknown = check_placeholders("/x/{user}", "/r/{room}")
            .unwrap_err()
            .to_string();
        assert_eq!(
            unknown,
            "{user} is not a parameter of this route's path (the route's path has {room})"
        );
    }

    #[test]
    fn wildcard_placeholders_are_marked() {
        assert_eq!(mark_wildcards("/f/{rest}", "/f/{*rest}"), "/f/{*rest}");
        assert_eq!(mark_wildcards("/f/{*rest}", "/f/{*rest}"), "/f/{*rest}");
        assert_eq!(mark_wildcards("/r/{room}", "/r/{room}"), "/r/{room}");
    }
}
