//! A pusher app's webhooks in the routes file (`[[route.apps.webhooks]]`):
//! where weir POSTs the app's events (`url`), which events (`events`, by
//! Pusher's names), and the sender's bounds (`timeout`, `max_queue`).
//! A bad URL or an unknown event name is refused at load with its line.

use std::time::Duration;

use serde::Deserialize;
use toml::{Spanned, Value};
use weir_pusher::webhook::WebhookKind;

use super::value::{Field, Item, Source};
use super::ConfigError;

/// How long one POST may take when the webhook names no `timeout`:
/// Pusher expects an answer within a few seconds; a slower receiver
/// holds its queue, not a connection.
pub const DEFAULT_WEBHOOK_TIMEOUT: Duration = Duration::from_secs(5);

/// Bytes of events one webhook keeps waiting when it names no
/// `max_queue`: about ten thousand small events, enough to ride out a
/// receiver's restart; past it new events are dropped and counted.
pub const DEFAULT_WEBHOOK_MAX_QUEUE_BYTES: usize = 1 << 20;

/// Most webhooks one app may have (each has a queue and a sender).
const MAX_WEBHOOKS_PER_APP: usize = 10;

/// One `[[route.apps.webhooks]]` table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWebhook {
    url: Field,
    events: Field,
    timeout: Field,
    max_queue: Field,
}

/// One webhook of an app.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PusherWebhook {
    /// `http://` or `https://` (servers checked against webpki-roots); the
    /// operator's choice, so it may name a private or loopback address.
    pub url: String,
    /// The events it gets, each once, in the file's order.
    pub events: Vec<WebhookKind>,
    /// One POST, connect to the last byte of the answer.
    pub timeout: Duration,
    /// Bytes of events waiting to be sent, at most.
    pub max_queue: usize,
}

impl PusherWebhook {
    pub fn wants(&self, kind: WebhookKind) -> bool {
        self.events.contains(&kind)
    }
}

fn names() -> String {
    WebhookKind::ALL
        .iter()
        .map(|k| format!("\"{}\"", k.name()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A webhook's URL: absolute http(s), a host, no user information or
/// fragment (a secret belongs in the signature, not the URL's user part).
fn url(src: &Source, item: &Item) -> Result<String, ConfigError> {
    const HINT: &str = "write e.g. \"https://app.example.com/pusher/webhooks\"";
    let text = item.string(src, "\"https://app.example.com/pusher/webhooks\"")?;
    let uri: http::Uri = text
        .parse()
        .map_err(|e| item.fail(src, format!("not a URL ({e}); {HINT}")))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return Err(item.fail(src, format!("the scheme must be http or https; {HINT}")));
    }
    let Some(authority) = uri.authority().filter(|a| !a.host().is_empty()) else {
        return Err(item.fail(src, format!("no host; {HINT}")));
    };
    if authority.as_str().contains('@') || text.contains('#') {
        return Err(item.fail(
            src,
            format!("no user information (user@host) or #fragment; {HINT}"),
        ));
    }
    Ok(text.to_string())
}

fn events(src: &Source, item: &Item) -> Result<Vec<WebhookKind>, ConfigError> {
    let hint = format!("write a list of some of {}", names());
    let Value::Array(values) = item.value else {
        return Err(item.fail(src, format!("not a list; {hint}")));
    };
    let mut kinds = Vec::with_capacity(values.len());
    for value in values {
        let kind = value.as_str().and_then(WebhookKind::from_name);
        let Some(kind) = kind else {
            return Err(item.fail(src, format!("{value} is not a webhook event; {hint}")));
        };
        if kinds.contains(&kind) {
            return Err(item.fail(src, format!("{value} is listed twice; list each once")));
        }
        kinds.push(kind);
    }
    if kinds.is_empty() {
        return Err(item.fail(src, format!("the list is empty; {hint}")));
    }
    Ok(kinds)
}

fn webhook(src: &Source, spanned: &Spanned<RawWebhook>) -> Result<PusherWebhook, ConfigError> {
    let raw = spanned.get_ref();
    let required = |key: &str, example: &str| {
        src.error(
            spanned.span(),
            format!("this webhook has no {key}; add e.g. {key} = {example}"),
        )
    };
    let url_item = Item::of("url", &raw.url)
        .ok_or_else(|| required("url", "\"https://app.example.com/pusher/webhooks\""))?;
    let events_item = Item::of("events", &raw.events)
        .ok_or_else(|| required("events", "[\"channel_occupied\", \"channel_vacated\"]"))?;
    let mut hook = PusherWebhook {
        url: url(src, &url_item)?,
        events: events(src, &events_item)?,
        timeout: DEFAULT_WEBHOOK_TIMEOUT,
        max_queue: DEFAULT_WEBHOOK_MAX_QUEUE_BYTES,
    };
    if let Some(item) = Item::of("timeout", &raw.timeout) {
        hook.timeout = item.duration(src, Duration::from_millis(100), Duration::from_secs(60))?;
    }
    if let Some(item) = Item::of("max_queue", &raw.max_queue) {
        hook.max_queue = item.size(src, 1024, 256 << 20)?;
    }
    Ok(hook)
}

/// An app's webhooks (none when it lists none).
pub(super) fn webhooks(
    src: &Source,
    raw: Option<&Vec<Spanned<RawWebhook>>>,
) -> Result<Vec<PusherWebhook>, ConfigError> {
    let Some(raw) = raw else {
        return Ok(Vec::new());
    };
    if let Some(extra) = raw.get(MAX_WEBHOOKS_PER_APP) {
        return Err(src.error(
            extra.span(),
            format!("more than {MAX_WEBHOOKS_PER_APP} webhooks on one app"),
        ));
    }
    raw.iter().map(|hook| webhook(src, hook)).collect()
}
