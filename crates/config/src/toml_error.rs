//! Rewrites toml's and serde's messages (syntax errors, unknown keys, wrong
//! table shapes) into ones that name the line and say what to write instead.

use std::ops::Range;

use super::value::Source;
use super::ConfigError;

/// Keys of `[server]`, in the order the messages list them.
pub(super) const SERVER_KEYS: &[&str] = &[
    "listen",
    "workers",
    "max_message",
    "outbound_budget",
    "idle_timeout",
    "handshake_timeout",
    "drain_timeout",
    "subprotocols",
    "origins",
    "compression",
    "compression_min",
    "compression_context",
    "compression_level",
    "require_origin",
    "max_upgrade_rate_per_ip",
    "max_message_rate",
    "max_byte_rate",
    "rate_exceeded",
    "trusted_proxies",
    "max_connections",
    "max_connections_per_ip",
    "max_upgrade_rate",
    "cache_dir",
    "state_dir",
    "oci_cache",
    "reuse_port",
    "listen_backlog",
    "public_metrics",
    "tls",
    "allowed_hosts",
    "h2_max_streams",
    "io",
];

/// Keys of a `[[route]]`, in the order the messages list them.
pub(super) const ADMIN_KEYS: &[&str] = &["listen", "token_env", "tls"];

pub(super) const ROUTE_KEYS: &[&str] = &[
    "path",
    "native",
    "guest",
    "max_message",
    "outbound_budget",
    "idle_timeout",
    "subprotocols",
    "origins",
    "compression",
    "compression_min",
    "compression_context",
    "compression_level",
    "require_origin",
    "max_upgrade_rate_per_ip",
    "max_message_rate",
    "max_byte_rate",
    "rate_exceeded",
    "isolation",
    "memory",
    "timeout",
    "instances",
    "recycle_after",
    "attachment_max",
    "env",
    "topics",
    "log",
    "log_rate",
    "log_bytes",
    "log_burst",
    "cpu_share",
    "echo_self",
    "slow_subscriber",
    "upstream",
    "connect_timeout",
    "forward_headers",
    "upstream_ca",
    "filter",
    "allow_outbound",
    "outbound_timeout",
    "outbound_max_concurrent",
    "outbound_max_response",
    "outbound_ca",
    "allow_private",
    "kv",
    "kv_max_bytes",
    "kv_max_keys",
    "realtime",
    "token_hmac_secret_env",
    "token_audience",
    "token_issuer",
    "token_jwks_file",
    "token_public_key_file",
    "ping_interval",
    "pong_timeout",
    "expired_close_delay",
    "max_subscriptions",
    "max_publication",
    "max_command",
    "apps",
];

/// Keys of a pusher route's `[[route.apps]]` table.
pub(super) const PUSHER_APP_KEYS: &[&str] = &[
    "id",
    "key",
    "secret_env",
    "client_events",
    "user_authentication",
    "max_connections",
    "client_events_per_second",
    "max_presence_members",
    "max_channels_per_connection",
    "max_payload",
    "activity_timeout",
    "webhooks",
    "guest",
    "timeout",
    "memory",
    "instances",
];

/// Keys of a pusher app's `[[route.apps.webhooks]]` table.
pub(super) const PUSHER_WEBHOOK_KEYS: &[&str] = &["url", "events", "timeout", "max_queue"];

/// Keys of a `[[namespaces]]` table.
pub(super) const NAMESPACE_KEYS: &[&str] = &[
    "name",
    "history_size",
    "history_ttl",
    "history_max_bytes",
    "max_channels",
    "force_recovery",
    "allow_recovery",
    "presence",
    "join_leave",
    "presence_max",
    "allow_subscribe_for_client",
    "allow_publish_for_subscriber",
    "allow_publish_for_client",
    "allow_presence_for_subscriber",
    "allow_history_for_subscriber",
    "guest",
    "timeout",
    "memory",
    "instances",
];

/// Keys of `[api]`.
pub(super) const API_KEYS: &[&str] = &["listen", "key_env", "max_body", "max_connections"];

/// Keys of `[cluster]`.
pub(super) const CLUSTER_KEYS: &[&str] = &["redis", "redis_cluster"];

/// Rewrites serde/toml's messages into ones that say what to write instead.
pub(super) fn toml_error(src: &Source, err: toml::de::Error) -> ConfigError {
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
        .replace("struct RawCluster", "the [cluster] table")
        .replace("struct RawNamespace", "a [[namespaces]] table")
        .replace("struct RawApi", "the [api] table")
        .replace("struct RawFile", "a routes file");
    src.error(span, format!("{message} (in `{line_text}`)"))
}

/// A correct line for `key`, for messages about a line that did not parse.
fn example(key: &str) -> String {
    let value = match key {
        "listen" => r#""127.0.0.1:9001""#,
        "workers" => "0",
        "reuse_port" | "require_origin" => "true",
        "trusted_proxies" => r#"["127.0.0.1", "10.0.0.0/8"]"#,
        "max_message" | "outbound_budget" | "memory" => r#""32MiB""#,
        "attachment_max" => r#""16KiB""#,
        "kv_max_bytes" => r#""64MiB""#,
        "kv_max_keys" => "100000",
        "idle_timeout" | "handshake_timeout" | "drain_timeout" => r#""30s""#,
        "timeout" => r#""100ms""#,
        "subprotocols" => r#"["chat.v1"]"#,
        "origins" => r#"["https://app.example.com"]"#,
        "max_connections" | "max_connections_per_ip" | "instances" | "recycle_after" => "1000",
        "listen_backlog" => "4096",
        "cache_dir" => r#""/var/cache/weir""#,
        "oci_cache" => r#""/var/lib/weir/oci""#,
        "public_metrics" => "false",
        "allowed_hosts" => r#"["gw.example.com", "*.example.com"]"#,
        "h2_max_streams" => "100",
        "io" => r#""epoll""#,
        "token_env" => r#""WEIR_ADMIN_TOKEN""#,
        "tls" => r#"{ cert = "certs/fullchain.pem", key = "certs/key.pem" }"#,
        "path" => r#""/echo""#,
        "native" => r#""echo""#,
        "guest" => r#""wasm/echo.wasm""#,
        "isolation" => r#""worker""#,
        "env" => r#"{ WEIR_AUTH_TOKEN = "let-me-in" }"#,
        "echo_self" => "false",
        "slow_subscriber" => r#""close""#,
        "redis" => r#""redis://127.0.0.1:6379""#,
        _ => r#""value""#,
    };
    format!("{key} = {value}")
}

fn unknown_key(src: &Source, span: Range<usize>, key: &str, message: &str) -> ConfigError {
    // serde lists the valid fields after "expected"; they say which table it is.
    let expected = message.split_once("expected").map_or("", |(_, list)| list);
    let (table, valid): (&str, Vec<&str>) = if expected.contains("`token_env`") {
        ("[admin]", ADMIN_KEYS.to_vec())
    } else if expected.contains("`key_env`") {
        ("[api]", API_KEYS.to_vec())
    } else if expected.contains("`max_queue`") {
        ("[[route.apps.webhooks]]", PUSHER_WEBHOOK_KEYS.to_vec())
    } else if expected.contains("`secret_env`") {
        ("[[route.apps]]", PUSHER_APP_KEYS.to_vec())
    } else if expected.contains("`history_size`") {
        ("[[namespaces]]", NAMESPACE_KEYS.to_vec())
    } else if expected.contains("`listen`") {
        ("[server]", SERVER_KEYS.to_vec())
    } else if expected.contains("`path`") {
        ("[[route]]", ROUTE_KEYS.to_vec())
    } else if expected.contains("`redis`") {
        ("[cluster]", CLUSTER_KEYS.to_vec())
    } else {
        (
            "the top level",
            vec![
                "[server]",
                "[admin]",
                "[[route]]",
                "[cluster]",
                "[[namespaces]]",
                "[api]",
            ],
        )
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
