//! The file's tables besides the routes: `[server]` (with its TLS files),
//! `[admin]` and `[cluster]` (its Redis URL read as the client will).

use super::*;

/// `[cluster]`: one Redis server or a Redis Cluster's seed nodes.
pub(super) fn cluster(
    src: &Source,
    spanned: &Spanned<RawCluster>,
) -> Result<ClusterConfig, ConfigError> {
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
pub(super) fn redis_url(src: &Source, item: &Item, url: &str) -> Result<String, ConfigError> {
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
pub(super) fn admin(
    src: &Source,
    raw: &Spanned<RawAdmin>,
    origin_dir: &Path,
) -> Result<AdminConfig, ConfigError> {
    let header = header_span(src, raw.span());
    let raw = raw.get_ref();
    let listen = Item::listen(src, &raw.listen, header, "[admin]", r#""127.0.0.1:9090""#)?;
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

pub(super) fn server(
    src: &Source,
    raw: Option<&RawServer>,
    origin_dir: &Path,
) -> Result<ServerConfig, ConfigError> {
    let mut server = ServerConfig::default();
    let Some(raw) = raw else {
        return Ok(server);
    };
    if let Some(item) = Item::of("listen", &raw.listen) {
        server.listen =
            item.socket_addr(src, r#""127.0.0.1:9001", "0.0.0.0:9001" or "[::]:9001""#)?;
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
    if let Some(item) = Item::of("max_upgrade_rate", &raw.max_upgrade_rate) {
        server.max_upgrade_rate = item.count(src, 0, MAX_RATE)? as u32;
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
    if let Some(item) = Item::of("oci_cache", &raw.oci_cache) {
        let dir = item.string(src, r#""/var/lib/weir/oci""#)?;
        if dir.is_empty() {
            return Err(item.fail(src, r#"empty; write a directory, e.g. "/var/lib/weir/oci""#));
        }
        server.oci_cache = Some(origin_dir.join(dir));
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
    if let Some(item) = Item::of("io", &raw.io) {
        server.io =
            match item.string(src, r#""epoll""#)? {
                "tasks" => crate::Io::Tasks,
                "epoll" => crate::Io::Epoll,
                "uring" => crate::Io::Uring,
                "auto" => crate::Io::Auto,
                other => return Err(item.fail(
                    src,
                    format!(
                        r#""{other}" is not an I/O loop; write "tasks", "epoll", "uring" or "auto""#
                    ),
                )),
            };
    }
    if let Some(item) = Item::of("tls", &raw.tls) {
        server.tls = Some(tls_files(src, &item, origin_dir)?);
    }
    server.limits = limits(src, &server.limits, limit_fields!(raw))?;
    Ok(server)
}

/// `tls = { cert = "...", key = "..." }`: two PEM paths, relative to the
/// routes file. The files are read by `Config::load`.
pub(super) fn tls_files(
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
