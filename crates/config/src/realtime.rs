//! The real-time parts of the routes file: `[[namespaces]]` (Centrifugo's
//! channel options by namespace), `[api]` (the server API's listener) and a
//! centrifugo route's keys, each checked against its line.

use std::collections::HashMap;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::parse::RawRoute;
use super::value::{first_set, refuse_key, Field, Item, Source};
use super::*;
use crate::namespace::{NamespaceOptions, Namespaces};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawNamespace {
    name: Field,
    history_size: Field,
    history_ttl: Field,
    history_max_bytes: Field,
    max_channels: Field,
    force_recovery: Field,
    allow_recovery: Field,
    presence: Field,
    join_leave: Field,
    presence_max: Field,
    allow_subscribe_for_client: Field,
    allow_publish_for_subscriber: Field,
    allow_publish_for_client: Field,
    allow_presence_for_subscriber: Field,
    allow_history_for_subscriber: Field,
    /// A guest that authorises subscribes and filters client publications.
    guest: Field,
    /// The guest's limits (as a guest route's keys of the same names).
    timeout: Field,
    memory: Field,
    instances: Field,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawApi {
    listen: Field,
    key_env: Field,
    max_body: Field,
    max_connections: Field,
}

/// Most publications a channel's history may be configured to keep.
const MAX_HISTORY_SIZE: u64 = 100_000;
/// Longest history ttl worth configuring.
const MAX_HISTORY_TTL: Duration = Duration::from_secs(30 * 24 * 3600);
/// Most bytes of history one channel may be configured to keep.
const MAX_HISTORY_BYTES: u64 = 1 << 30;

/// `[[namespaces]]`: each table's `name` ("" for the default namespace,
/// which exists with every option off unless a table configures it), and
/// the guests of the namespaces that name one (`guest = "x.wasm"`).
pub(super) fn namespaces(
    src: &Source,
    raw: Option<&Vec<Spanned<RawNamespace>>>,
    origin_dir: &std::path::Path,
) -> Result<(Namespaces, Vec<NamespaceGuest>), ConfigError> {
    let mut guests = Vec::new();
    let mut by_name = HashMap::from([(String::new(), NamespaceOptions::default())]);
    let mut seen = std::collections::HashSet::new();
    for spanned in raw.into_iter().flatten() {
        let raw = spanned.get_ref();
        let Some(name_item) = Item::of("name", &raw.name) else {
            return Err(src.error(
                spanned.span(),
                r#"this namespace has no name; add e.g. name = "chat" (name = "" configures channels without a namespace)"#,
            ));
        };
        let name = name_item.string(src, r#""chat""#)?;
        let valid = name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
        if !valid {
            return Err(name_item.fail(
                src,
                "a namespace name is up to 64 letters, digits, '-', '_' or '.' (no ':')",
            ));
        }
        if !seen.insert(name.to_string()) {
            return Err(name_item.fail(src, "this namespace is configured twice"));
        }
        by_name.insert(name.to_string(), options(src, raw)?);
        if let Some(guest) = namespace_guest(src, raw, origin_dir)? {
            guests.push(NamespaceGuest {
                namespace: name.to_string(),
                guest,
                line: src.line(spanned.span().start),
            });
        }
    }
    Ok((Namespaces::new(by_name), guests))
}

/// A namespace's `guest` and its limits (`timeout`, `memory`, `instances`;
/// the rest of a guest route's keys are a guest route's defaults).
fn namespace_guest(
    src: &Source,
    raw: &RawNamespace,
    origin_dir: &std::path::Path,
) -> Result<Option<GuestConfig>, ConfigError> {
    let keys = AttachedGuestKeys {
        guest: &raw.guest,
        timeout: &raw.timeout,
        memory: &raw.memory,
        instances: &raw.instances,
    };
    attached_guest(src, &keys, origin_dir)
}

/// The keys of a guest attached to a native kind's table (a namespace, a
/// pusher app): `guest` and its limits.
pub(super) struct AttachedGuestKeys<'a> {
    pub guest: &'a Field,
    pub timeout: &'a Field,
    pub memory: &'a Field,
    pub instances: &'a Field,
}

/// An attached guest's component and limits (`timeout`, `memory`,
/// `instances`; the rest of a guest route's keys are a guest route's
/// defaults); None without `guest`, an error for a limit without one.
pub(super) fn attached_guest(
    src: &Source,
    raw: &AttachedGuestKeys,
    origin_dir: &std::path::Path,
) -> Result<Option<GuestConfig>, ConfigError> {
    use super::guest::{GUEST_MEMORY_RANGE, MAX_GUEST_TIMEOUT};
    let Some(item) = Item::of("guest", raw.guest) else {
        let limit = Item::of("timeout", raw.timeout)
            .or(Item::of("memory", raw.memory))
            .or(Item::of("instances", raw.instances));
        return match limit {
            Some(item) => Err(item.fail(
                src,
                r#"a guest's limit without a guest; add guest = "hooks/moderate.wasm""#,
            )),
            None => Ok(None),
        };
    };
    let mut config = super::guest::guest_source(src, &item, origin_dir, "hooks/moderate.wasm")?;
    if let Some(item) = Item::of("timeout", raw.timeout) {
        config.timeout = item.duration(src, Duration::from_millis(1), MAX_GUEST_TIMEOUT)?;
    }
    if let Some(item) = Item::of("memory", raw.memory) {
        config.memory = item.size(src, GUEST_MEMORY_RANGE.0, GUEST_MEMORY_RANGE.1)?;
    }
    if let Some(item) = Item::of("instances", raw.instances) {
        config.instances = item.count(src, 1, 1_000_000)? as usize;
    }
    Ok(Some(config))
}

fn options(src: &Source, raw: &RawNamespace) -> Result<NamespaceOptions, ConfigError> {
    let mut o = NamespaceOptions::default();
    if let Some(item) = Item::of("history_size", &raw.history_size) {
        o.history_size = item.count(src, 0, MAX_HISTORY_SIZE)? as usize;
    }
    if let Some(item) = Item::of("history_ttl", &raw.history_ttl) {
        o.history_ttl = item.duration(src, Duration::from_secs(1), MAX_HISTORY_TTL)?;
    }
    if let Some(item) = Item::of("history_max_bytes", &raw.history_max_bytes) {
        o.history_max_bytes = item.size(src, 1024, MAX_HISTORY_BYTES)?;
    }
    if let Some(item) = Item::of("max_channels", &raw.max_channels) {
        o.max_channels = item.count(src, 1, 10_000_000)? as usize;
    }
    if let Some(item) = Item::of("presence_max", &raw.presence_max) {
        o.presence_max = item.count(src, 0, 1 << 20)? as usize;
    }
    let flags: [(&str, &Field, &mut bool); 9] = [
        ("force_recovery", &raw.force_recovery, &mut o.force_recovery),
        ("allow_recovery", &raw.allow_recovery, &mut o.allow_recovery),
        ("presence", &raw.presence, &mut o.presence),
        ("join_leave", &raw.join_leave, &mut o.join_leave),
        (
            "allow_subscribe_for_client",
            &raw.allow_subscribe_for_client,
            &mut o.allow_subscribe_for_client,
        ),
        (
            "allow_publish_for_subscriber",
            &raw.allow_publish_for_subscriber,
            &mut o.allow_publish_for_subscriber,
        ),
        (
            "allow_publish_for_client",
            &raw.allow_publish_for_client,
            &mut o.allow_publish_for_client,
        ),
        (
            "allow_presence_for_subscriber",
            &raw.allow_presence_for_subscriber,
            &mut o.allow_presence_for_subscriber,
        ),
        (
            "allow_history_for_subscriber",
            &raw.allow_history_for_subscriber,
            &mut o.allow_history_for_subscriber,
        ),
    ];
    for (key, field, slot) in flags {
        if let Some(item) = Item::of(key, field) {
            *slot = item.flag(src)?;
        }
    }
    let wants_history = o.force_recovery || o.allow_recovery || o.allow_history_for_subscriber;
    if wants_history && !o.keeps_history() {
        let item = Item::of("force_recovery", &raw.force_recovery)
            .or(Item::of("allow_recovery", &raw.allow_recovery))
            .or(Item::of(
                "allow_history_for_subscriber",
                &raw.allow_history_for_subscriber,
            ))
            .expect("one of them is set");
        return Err(item.fail(
            src,
            "recovery and history need history; add history_size = 100 and history_ttl = \"5m\"",
        ));
    }
    if (o.join_leave || o.presence_max > 0) && !o.presence {
        let item = Item::of("join_leave", &raw.join_leave)
            .or(Item::of("presence_max", &raw.presence_max))
            .expect("one of them is set");
        return Err(item.fail(src, "needs presence; add presence = true"));
    }
    Ok(o)
}

/// `[api]`: where the server API listens and where its key comes from.
pub(super) fn api(src: &Source, spanned: &Spanned<RawApi>) -> Result<ApiConfig, ConfigError> {
    let raw = spanned.get_ref();
    let listen = Item::listen(
        src,
        &raw.listen,
        spanned.span(),
        "[api]",
        r#""127.0.0.1:8000""#,
    )?;
    let key_env = match Item::of("key_env", &raw.key_env) {
        Some(item) => env_name(src, &item, "WEIR_API_KEY")?,
        None => DEFAULT_API_KEY_ENV.to_string(),
    };
    let max_body = match Item::of("max_body", &raw.max_body) {
        Some(item) => item.size(src, 1024, 64 << 20)?,
        None => DEFAULT_API_MAX_BODY_BYTES,
    };
    let max_connections = match Item::of("max_connections", &raw.max_connections) {
        Some(item) => item.count(src, 1, 1_000_000)? as usize,
        None => DEFAULT_API_MAX_CONNECTIONS,
    };
    Ok(ApiConfig {
        listen,
        key_env,
        max_body,
        max_connections,
    })
}

fn env_name(src: &Source, item: &Item, example: &str) -> Result<String, ConfigError> {
    let name = item.string(src, &format!("\"{example}\""))?;
    let valid = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !valid {
        return Err(item.fail(
            src,
            format!("not an environment variable name; write e.g. \"{example}\""),
        ));
    }
    Ok(name.to_string())
}

/// The keys only centrifugo routes take, in the file's field order.
fn centrifugo_fields(raw: &RawRoute) -> [(&'static str, &Field); 11] {
    [
        ("token_hmac_secret_env", &raw.token_hmac_secret_env),
        ("token_audience", &raw.token_audience),
        ("token_issuer", &raw.token_issuer),
        ("token_jwks_file", &raw.token_jwks_file),
        ("token_public_key_file", &raw.token_public_key_file),
        ("ping_interval", &raw.ping_interval),
        ("pong_timeout", &raw.pong_timeout),
        ("expired_close_delay", &raw.expired_close_delay),
        ("max_subscriptions", &raw.max_subscriptions),
        ("max_publication", &raw.max_publication),
        ("max_command", &raw.max_command),
    ]
}

/// A centrifugo route's keys.
pub(super) fn centrifugo_config(
    src: &Source,
    raw: &RawRoute,
    origin_dir: &std::path::Path,
) -> Result<CentrifugoConfig, ConfigError> {
    let mut c = CentrifugoConfig::default();
    if let Some(item) = Item::of("token_jwks_file", &raw.token_jwks_file) {
        let file = item.string(src, r#""keys/jwks.json""#)?;
        if file.is_empty() {
            return Err(item.fail(src, r#"empty; write the JWKS file, e.g. "keys/jwks.json""#));
        }
        c.token_jwks_file = Some(origin_dir.join(file));
    }
    if let Some(item) = Item::of("token_public_key_file", &raw.token_public_key_file) {
        let file = item.string(src, r#""keys/public.pem""#)?;
        if file.is_empty() {
            return Err(item.fail(src, r#"empty; write the PEM file, e.g. "keys/public.pem""#));
        }
        c.token_public_key_file = Some(origin_dir.join(file));
    }
    if let Some(item) = Item::of("token_hmac_secret_env", &raw.token_hmac_secret_env) {
        c.token_hmac_secret_env = env_name(src, &item, DEFAULT_TOKEN_HMAC_SECRET_ENV)?;
    }
    if let Some(item) = Item::of("token_audience", &raw.token_audience) {
        c.token_audience = Some(item.string(src, r#""my-app""#)?.to_string());
    }
    if let Some(item) = Item::of("token_issuer", &raw.token_issuer) {
        c.token_issuer = Some(
            item.string(src, r#""https://login.example.com""#)?
                .to_string(),
        );
    }
    if let Some(item) = Item::of("ping_interval", &raw.ping_interval) {
        c.ping_interval = item.duration(src, Duration::from_secs(1), Duration::from_secs(3600))?;
    }
    if let Some(item) = Item::of("pong_timeout", &raw.pong_timeout) {
        c.pong_timeout = item.duration(src, Duration::from_secs(1), Duration::from_secs(3600))?;
    }
    if c.pong_timeout >= c.ping_interval {
        let item = Item::of("pong_timeout", &raw.pong_timeout)
            .or(Item::of("ping_interval", &raw.ping_interval))
            .expect("a default pair is in order");
        return Err(item.fail(src, "pong_timeout must be shorter than ping_interval"));
    }
    if let Some(item) = Item::of("expired_close_delay", &raw.expired_close_delay) {
        c.expired_close_delay = item.duration(src, Duration::ZERO, Duration::from_secs(3600))?;
    }
    if let Some(item) = Item::of("max_subscriptions", &raw.max_subscriptions) {
        c.max_subscriptions = item.count(src, 1, 1 << 16)? as usize;
    }
    if let Some(item) = Item::of("max_publication", &raw.max_publication) {
        c.max_publication_bytes = item.size(src, 16, 16 << 20)?;
    }
    if let Some(item) = Item::of("max_command", &raw.max_command) {
        c.max_command_bytes = item.size(src, 1024, 16 << 20)?;
    }
    Ok(c)
}

/// Only centrifugo routes take its keys.
pub(super) fn refuse_centrifugo_keys(
    src: &Source,
    raw: &RawRoute,
    kind: &Item,
) -> Result<(), ConfigError> {
    let first = first_set(centrifugo_fields(raw));
    refuse_key(
        src,
        first,
        kind,
        "centrifugo routes",
        "write native = \"centrifugo\"",
    )
}
