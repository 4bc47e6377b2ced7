//! A pusher route's keys in the routes file: its path (`…/app/{key}`, the
//! URL pusher-js builds) and its apps (`[[route.apps]]`), each checked
//! against its line; and their refusal on other routes.

use std::collections::HashSet;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::parse::RawRoute;
use super::value::{Field, Item, Source};
use super::*;

/// The tail every pusher route's path ends in: pusher-js connects to
/// `{wsHost}/app/{key}?protocol=7…` and nothing else.
pub const PUSHER_PATH_TAIL: &str = "/app/{key}";

/// Client events one connection may send per second when the app names no
/// `client_events_per_second`: Pusher's documented limit ("Client events",
/// rate limited to 10 per second per client).
pub const DEFAULT_PUSHER_CLIENT_EVENTS_PER_SECOND: u32 = 10;

/// Channels one connection may be subscribed to when the app names no
/// `max_channels_per_connection`: each subscription holds a topic entry and
/// maybe a presence member, so a client cannot hold without bound.
pub const DEFAULT_PUSHER_MAX_CHANNELS_PER_CONNECTION: usize = 100;

/// Most apps one route may carry: each app's channels are namespaces of
/// the route's own core, a few per app.
const MAX_APPS_PER_ROUTE: usize = 1000;

/// One `[[route.apps]]` table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPusherApp {
    id: Field,
    key: Field,
    secret_env: Field,
    client_events: Field,
    user_authentication: Field,
    max_connections: Field,
    client_events_per_second: Field,
    max_presence_members: Field,
    max_channels_per_connection: Field,
    max_payload: Field,
    activity_timeout: Field,
    /// `[[route.apps.webhooks]]` (`pusher_webhook.rs`).
    webhooks: Option<Vec<Spanned<super::pusher_webhook::RawWebhook>>>,
    guest: Field,
    timeout: Field,
    memory: Field,
    instances: Field,
}

/// A pusher route's apps.
#[derive(Debug, Clone, PartialEq)]
pub struct PusherConfig {
    pub apps: Vec<PusherApp>,
}

/// One app: what its clients connect with (`key`), what the HTTP API names
/// (`id`), and its limits.
#[derive(Debug, Clone, PartialEq)]
pub struct PusherApp {
    /// Named in `/apps/{id}/…` HTTP API paths.
    pub id: String,
    /// Public: named in the connection URL and in every `auth` value.
    pub key: String,
    /// The NAME of the environment variable holding the app's secret (read
    /// when the route is built; a secret never sits in the file).
    pub secret_env: String,
    /// The line of the app's table, for errors found when the route is built.
    pub line: usize,
    /// Subscribers of private and presence channels may send `client-*`
    /// events (Pusher's per-app setting, off by default there too).
    pub client_events: bool,
    /// `pusher:signin` is accepted (user authentication).
    pub user_authentication: bool,
    /// Connections the app may hold on this node at once (None: no limit
    /// beyond the server's); one more is refused with 4004.
    pub max_connections: Option<usize>,
    pub client_events_per_second: u32,
    /// Members one presence channel may hold.
    pub max_presence_members: usize,
    pub max_channels_per_connection: usize,
    /// Largest client message and largest event `data` the HTTP API takes.
    pub max_payload: usize,
    /// Seconds of client silence before the server pings it (sent to the
    /// client in `pusher:connection_established`, which pings on its own
    /// after the same silence).
    pub activity_timeout: Duration,
    /// Where the app's events are POSTed (`[[route.apps.webhooks]]`).
    pub webhooks: Vec<super::PusherWebhook>,
    /// The app's guest (`guest = "x.wasm"` with `timeout`, `memory`,
    /// `instances`): asked about each of the app's connections,
    /// subscriptions and client events (`native/pusher/hook.rs`).
    pub guest: Option<GuestConfig>,
}

fn app_fields(raw: &RawPusherApp) -> [(&'static str, &Field); 15] {
    [
        ("id", &raw.id),
        ("key", &raw.key),
        ("secret_env", &raw.secret_env),
        ("client_events", &raw.client_events),
        ("user_authentication", &raw.user_authentication),
        ("max_connections", &raw.max_connections),
        ("client_events_per_second", &raw.client_events_per_second),
        ("max_presence_members", &raw.max_presence_members),
        (
            "max_channels_per_connection",
            &raw.max_channels_per_connection,
        ),
        ("max_payload", &raw.max_payload),
        ("activity_timeout", &raw.activity_timeout),
        ("guest", &raw.guest),
        ("timeout", &raw.timeout),
        ("memory", &raw.memory),
        ("instances", &raw.instances),
    ]
}

/// An app id or key: what URLs and `auth` values carry, so no separators.
fn name<'a>(src: &Source, item: &Item<'a>, example: &str) -> Result<&'a str, ConfigError> {
    let value = item.string(src, &format!("\"{example}\""))?;
    let valid = !value.is_empty()
        && value.len() <= 64
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if !valid {
        return Err(item.fail(
            src,
            format!("up to 64 letters, digits, '-', '_' or '.'; write e.g. \"{example}\""),
        ));
    }
    Ok(value)
}

fn env_name(src: &Source, item: &Item) -> Result<String, ConfigError> {
    let name = item.string(src, "\"PUSHER_APP_SECRET\"")?;
    let valid = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !valid {
        return Err(item.fail(
            src,
            "not an environment variable name (the secret itself never goes in the file); \
             write e.g. \"PUSHER_APP_SECRET\"",
        ));
    }
    Ok(name.to_string())
}

fn app(
    src: &Source,
    spanned: &Spanned<RawPusherApp>,
    origin_dir: &std::path::Path,
) -> Result<PusherApp, ConfigError> {
    let raw = spanned.get_ref();
    let required = |key: &'static str, example: &str| {
        src.error(
            spanned.span(),
            format!("this app has no {key}; add e.g. {key} = {example}"),
        )
    };
    let id = Item::of("id", &raw.id).ok_or_else(|| required("id", "\"demo\""))?;
    let key = Item::of("key", &raw.key).ok_or_else(|| required("key", "\"demo-key\""))?;
    let secret_env = Item::of("secret_env", &raw.secret_env)
        .ok_or_else(|| required("secret_env", "\"PUSHER_APP_SECRET\""))?;
    let mut app = PusherApp {
        id: name(src, &id, "demo")?.to_string(),
        key: name(src, &key, "demo-key")?.to_string(),
        secret_env: env_name(src, &secret_env)?,
        line: src.line(spanned.span().start),
        client_events: false,
        user_authentication: false,
        max_connections: None,
        client_events_per_second: DEFAULT_PUSHER_CLIENT_EVENTS_PER_SECOND,
        max_presence_members: weir_pusher::auth::DEFAULT_MAX_PRESENCE_MEMBERS,
        max_channels_per_connection: DEFAULT_PUSHER_MAX_CHANNELS_PER_CONNECTION,
        max_payload: weir_pusher::client::DEFAULT_MAX_MESSAGE_BYTES,
        activity_timeout: Duration::from_secs(
            weir_pusher::server::DEFAULT_ACTIVITY_TIMEOUT_SECS.into(),
        ),
        webhooks: super::pusher_webhook::webhooks(src, raw.webhooks.as_ref())?,
        guest: None,
    };
    let keys = super::realtime::AttachedGuestKeys {
        guest: &raw.guest,
        timeout: &raw.timeout,
        memory: &raw.memory,
        instances: &raw.instances,
    };
    app.guest = super::realtime::attached_guest(src, &keys, origin_dir)?;
    if let Some(item) = Item::of("client_events", &raw.client_events) {
        app.client_events = item.flag(src)?;
    }
    if let Some(item) = Item::of("user_authentication", &raw.user_authentication) {
        app.user_authentication = item.flag(src)?;
    }
    if let Some(item) = Item::of("max_connections", &raw.max_connections) {
        app.max_connections = Some(item.count(src, 1, 100_000_000)? as usize);
    }
    if let Some(item) = Item::of("client_events_per_second", &raw.client_events_per_second) {
        app.client_events_per_second = item.count(src, 1, 1_000_000)? as u32;
    }
    if let Some(item) = Item::of("max_presence_members", &raw.max_presence_members) {
        app.max_presence_members = item.count(src, 1, 1 << 20)? as usize;
    }
    if let Some(item) = Item::of(
        "max_channels_per_connection",
        &raw.max_channels_per_connection,
    ) {
        app.max_channels_per_connection = item.count(src, 1, 1 << 16)? as usize;
    }
    if let Some(item) = Item::of("max_payload", &raw.max_payload) {
        app.max_payload = item.size(src, 256, 16 << 20)?;
    }
    if let Some(item) = Item::of("activity_timeout", &raw.activity_timeout) {
        app.activity_timeout =
            item.duration(src, Duration::from_secs(1), Duration::from_secs(3600))?;
        if app.activity_timeout.subsec_nanos() != 0 {
            return Err(item.fail(
                src,
                "whole seconds only (pusher-js reads activity_timeout in seconds); write e.g. \"120s\"",
            ));
        }
    }
    Ok(app)
}

/// A pusher route's keys: the path shape and its apps, ids and keys unique.
pub(super) fn pusher_config(
    src: &Source,
    raw: &RawRoute,
    native: &Item,
    path: &str,
    origin_dir: &std::path::Path,
) -> Result<PusherConfig, ConfigError> {
    if !path.ends_with(PUSHER_PATH_TAIL) {
        return Err(native.fail(
            src,
            format!(
                "a pusher route's path ends in \"{PUSHER_PATH_TAIL}\" (pusher-js connects to \
                 /app/<key>); write path = \"{PUSHER_PATH_TAIL}\" (or \"/prefix{PUSHER_PATH_TAIL}\"), \
                 not \"{path}\""
            ),
        ));
    }
    if let Some(item) = Item::of("topics", &raw.topics) {
        return Err(item.fail(
            src,
            "a pusher route's channels are its own (apps never share a channel with other \
             routes); remove topics",
        ));
    }
    let Some(apps) = raw.apps.as_ref().filter(|a| !a.is_empty()) else {
        return Err(native.fail(
            src,
            "a pusher route needs at least one app; add [[route.apps]] with id, key and secret_env",
        ));
    };
    if apps.len() > MAX_APPS_PER_ROUTE {
        return Err(native.fail(
            src,
            format!("more than {MAX_APPS_PER_ROUTE} apps on one route"),
        ));
    }
    let (mut ids, mut keys) = (HashSet::new(), HashSet::new());
    let mut out = Vec::with_capacity(apps.len());
    for spanned in apps {
        let app = app(src, spanned, origin_dir)?;
        let raw = spanned.get_ref();
        if !ids.insert(app.id.clone()) {
            let item = Item::of("id", &raw.id).expect("checked");
            return Err(item.fail(src, "another app of this route has this id"));
        }
        if !keys.insert(app.key.clone()) {
            let item = Item::of("key", &raw.key).expect("checked");
            return Err(item.fail(src, "another app of this route has this key"));
        }
        out.push(app);
    }
    Ok(PusherConfig { apps: out })
}

/// Only pusher routes take `[[route.apps]]`.
pub(super) fn refuse_pusher_keys(
    src: &Source,
    raw: &RawRoute,
    kind: &Item,
) -> Result<(), ConfigError> {
    let Some(first) = raw.apps.as_ref().and_then(|apps| apps.first()) else {
        return Ok(());
    };
    let span = app_fields(first.get_ref())
        .into_iter()
        .filter_map(|(_, field)| field.as_ref().map(|f| f.span()))
        .min_by_key(|span| span.start)
        .unwrap_or_else(|| first.span());
    Err(src.error(
        span,
        format!(
            "[[route.apps]] only applies to pusher routes, and this route is {}; remove the \
             apps, or write native = \"pusher\"",
            kind.shown()
        ),
    ))
}
