//! Webhooks (Pusher docs, "Webhooks"): the body weir POSTs to an app,
//! `{"time_ms":..,"events":[{"name":..,"channel":..,..}]}`, and its signature
//! headers: `X-Pusher-Key` (the app key) and `X-Pusher-Signature`, hex
//! HMAC-SHA256 of the exact body with the app secret (pusher-http-node's
//! `WebHook.isValid` checks both, and the content type `application/json`).

use serde::Serialize;

use crate::auth::AppKey;
use crate::sign::{hmac_sha256_hex, verify_hmac_sha256_hex};

pub const KEY_HEADER: &str = "X-Pusher-Key";
pub const SIGNATURE_HEADER: &str = "X-Pusher-Signature";
/// pusher-http-node only parses a webhook whose content type is exactly this.
pub const CONTENT_TYPE: &str = "application/json";

/// The kinds of webhook event, as a webhook's `events` list names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WebhookKind {
    ChannelOccupied,
    ChannelVacated,
    MemberAdded,
    MemberRemoved,
    ClientEvent,
    CacheMiss,
}

impl WebhookKind {
    pub const ALL: [WebhookKind; 6] = [
        WebhookKind::ChannelOccupied,
        WebhookKind::ChannelVacated,
        WebhookKind::MemberAdded,
        WebhookKind::MemberRemoved,
        WebhookKind::ClientEvent,
        WebhookKind::CacheMiss,
    ];

    /// The `name` the event carries in a webhook body.
    pub fn name(self) -> &'static str {
        match self {
            WebhookKind::ChannelOccupied => "channel_occupied",
            WebhookKind::ChannelVacated => "channel_vacated",
            WebhookKind::MemberAdded => "member_added",
            WebhookKind::MemberRemoved => "member_removed",
            WebhookKind::ClientEvent => "client_event",
            WebhookKind::CacheMiss => "cache_miss",
        }
    }

    pub fn from_name(name: &str) -> Option<WebhookKind> {
        WebhookKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// One webhook event; `name` is the tag.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "name", rename_all = "snake_case")]
pub enum WebhookEvent<'a> {
    /// A channel got its first subscriber.
    ChannelOccupied { channel: &'a str },
    /// A channel lost its last subscriber.
    ChannelVacated { channel: &'a str },
    /// A user joined a presence channel (first connection of that user).
    MemberAdded { channel: &'a str, user_id: &'a str },
    /// A user left a presence channel (last connection of that user).
    MemberRemoved { channel: &'a str, user_id: &'a str },
    /// A client event: `data` as a string ("data associated with the
    /// event" in the docs' example; `ClientEvent::data_string` makes it),
    /// the sender's socket, and on presence channels its user.
    ClientEvent {
        channel: &'a str,
        event: &'a str,
        data: &'a str,
        socket_id: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        user_id: Option<&'a str>,
    },
    /// A cache channel had nothing to replay to a new subscriber.
    CacheMiss { channel: &'a str },
}

impl WebhookEvent<'_> {
    pub fn kind(&self) -> WebhookKind {
        match self {
            WebhookEvent::ChannelOccupied { .. } => WebhookKind::ChannelOccupied,
            WebhookEvent::ChannelVacated { .. } => WebhookKind::ChannelVacated,
            WebhookEvent::MemberAdded { .. } => WebhookKind::MemberAdded,
            WebhookEvent::MemberRemoved { .. } => WebhookKind::MemberRemoved,
            WebhookEvent::ClientEvent { .. } => WebhookKind::ClientEvent,
            WebhookEvent::CacheMiss { .. } => WebhookKind::CacheMiss,
        }
    }
}

/// The webhook body.
#[derive(Debug, Clone, Serialize)]
pub struct WebhookBody<'a> {
    /// When the events happened, Unix milliseconds.
    pub time_ms: u64,
    pub events: &'a [WebhookEvent<'a>],
}

impl WebhookBody<'_> {
    /// The body's bytes: sign exactly these.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("serialising to memory cannot fail")
    }
}

/// A webhook body from events already serialised one by one (what a
/// sender queues: each event's JSON, so its size is known when queued);
/// the same bytes as [`WebhookBody::to_json`] of those events.
pub fn body_of<'a>(time_ms: u64, events: impl IntoIterator<Item = &'a str>) -> String {
    let mut body = format!("{{\"time_ms\":{time_ms},\"events\":[");
    for (i, event) in events.into_iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        body.push_str(event);
    }
    body.push_str("]}");
    body
}

/// One event's JSON, as [`body_of`] takes it.
pub fn event_json(event: &WebhookEvent<'_>) -> String {
    serde_json::to_string(event).expect("serialising to memory cannot fail")
}

/// The `X-Pusher-Signature` value for `body`.
pub fn signature(app: &AppKey<'_>, body: &[u8]) -> String {
    hmac_sha256_hex(app.secret, &[body])
}

/// Why a received webhook is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WebhookError {
    #[error("X-Pusher-Key names another app")]
    WebhookKeyMismatch,
    #[error("X-Pusher-Signature does not match the body")]
    WebhookSignatureMismatch,
}

/// Checks a webhook's headers against the body, as pusher-http-node's
/// `WebHook.isValid` does (for weir relaying or testing webhooks).
pub fn verify(
    app: &AppKey<'_>,
    key_header: &str,
    signature_header: &str,
    body: &[u8],
) -> Result<(), WebhookError> {
    if key_header != app.key {
        return Err(WebhookError::WebhookKeyMismatch);
    }
    if verify_hmac_sha256_hex(app.secret, &[body], signature_header) {
        Ok(())
    } else {
        Err(WebhookError::WebhookSignatureMismatch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Pusher docs, "Webhooks": event shapes per name.
    #[test]
    fn body_shape_and_signature() {
        let data = r#"{"t":1}"#;
        let events = [
            WebhookEvent::ChannelOccupied { channel: "a" },
            WebhookEvent::MemberAdded {
                channel: "presence-a",
                user_id: "1",
            },
            WebhookEvent::ClientEvent {
                channel: "private-a",
                event: "client-x",
                data,
                socket_id: "1.2",
                user_id: None,
            },
            WebhookEvent::CacheMiss { channel: "cache-a" },
        ];
        for event in &events {
            let kind = event.kind();
            let json = serde_json::to_string(event).unwrap();
            assert!(json.contains(&format!("\"name\":\"{}\"", kind.name())));
            assert_eq!(WebhookKind::from_name(kind.name()), Some(kind));
        }
        assert_eq!(WebhookKind::from_name("channel_existence"), None);
        let body = WebhookBody {
            time_ms: 1700000000000,
            events: &events,
        }
        .to_json();
        assert_eq!(
            body,
            r#"{"time_ms":1700000000000,"events":[{"name":"channel_occupied","channel":"a"},{"name":"member_added","channel":"presence-a","user_id":"1"},{"name":"client_event","channel":"private-a","event":"client-x","data":"{\"t\":1}","socket_id":"1.2"},{"name":"cache_miss","channel":"cache-a"}]}"#
        );
        let one_by_one: Vec<String> = events.iter().map(event_json).collect();
        assert_eq!(
            body_of(1700000000000, one_by_one.iter().map(String::as_str)),
            body
        );
        let app = AppKey {
            key: "k",
            secret: b"s",
        };
        let sig = signature(&app, body.as_bytes());
        assert_eq!(verify(&app, "k", &sig, body.as_bytes()), Ok(()));
        assert_eq!(
            verify(&app, "x", &sig, body.as_bytes()),
            Err(WebhookError::WebhookKeyMismatch)
        );
        assert_eq!(
            verify(&app, "k", &sig, b"{}"),
            Err(WebhookError::WebhookSignatureMismatch)
        );
    }
}
