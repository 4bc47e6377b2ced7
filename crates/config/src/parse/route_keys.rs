//! What a route's keys must agree with: its path (matchit syntax, one
//! parameter per segment, no conflict with another route's), a pubsub
//! route's keys, a shared topic namespace's name, and a shared key-value
//! store's quota across the routes that name it.

use super::*;

/// A pubsub route's `echo_self` and `slow_subscriber`.
pub(super) fn pubsub_config(src: &Source, raw: &RawRoute) -> Result<PubSubConfig, ConfigError> {
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
pub(super) fn refuse_pubsub_keys(
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
pub(super) fn topic_namespace(src: &Source, item: &Item) -> Result<String, ConfigError> {
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
pub(super) fn header_span(src: &Source, table: Range<usize>) -> Range<usize> {
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
pub(super) fn route_path(src: &Source, item: &Item) -> Result<String, ConfigError> {
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
pub(super) fn shared_kv_agrees(
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
pub(super) fn path_conflict(
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
pub(super) fn file_path(path: &str) -> String {
    match path.strip_suffix("/{*rest}") {
        Some(prefix) => format!("\"{prefix}/*\""),
        None => format!("\"{path}\""),
    }
}
