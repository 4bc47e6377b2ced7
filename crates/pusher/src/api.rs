//! HTTP API bodies (Pusher HTTP API reference): what `POST /events` and
//! `POST /batch_events` carry, checked against the documented limits, and
//! the JSON answers of the channel and user queries. Signature checks are
//! `http_api`'s; these types start after them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::channel::{Channel, ChannelNameError};
use crate::socket_id::{SocketId, SocketIdError};

/// Channels one trigger may name (HTTP API reference, "POST event":
/// "limited to 100 channels"; pusher-http-node refuses more).
pub const MAX_TRIGGER_CHANNELS: usize = 100;

/// Events one batch may hold: Pusher's multi-tenant clusters accept 10
/// (Pusher's announcement of the Batch Events API, "Limits").
pub const DEFAULT_MAX_BATCH_EVENTS: usize = 10;

/// Largest event `data`: "limited to 10KB" (HTTP API reference); larger gets 413.
pub const DEFAULT_MAX_EVENT_DATA_BYTES: usize = 10 * 1024;

/// Longest event name: pusher-http-node refuses names over 200 characters.
pub const MAX_EVENT_NAME_BYTES: usize = 200;

/// Limits applied to trigger and batch bodies.
#[derive(Debug, Clone, Copy)]
pub struct ApiLimits {
    pub max_event_data_bytes: usize,
    pub max_batch_events: usize,
}

impl Default for ApiLimits {
    fn default() -> Self {
        ApiLimits {
            max_event_data_bytes: DEFAULT_MAX_EVENT_DATA_BYTES,
            max_batch_events: DEFAULT_MAX_BATCH_EVENTS,
        }
    }
}

/// Why a trigger or batch body is refused; [`TriggerError::status`] is the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TriggerError {
    #[error("body is not the JSON this endpoint takes")]
    BodyMalformed,
    #[error("event name is missing, empty or longer than {MAX_EVENT_NAME_BYTES} bytes")]
    EventNameInvalid,
    #[error("no channel given")]
    NoChannels,
    #[error("more than {MAX_TRIGGER_CHANNELS} channels")]
    TooManyChannels,
    #[error("{0}")]
    ChannelName(#[from] ChannelNameError),
    #[error("{0}")]
    SocketId(#[from] SocketIdError),
    #[error("event data is larger than the limit")]
    DataTooLarge,
    #[error("batch holds more events than the limit")]
    BatchTooLarge,
    #[error("an encrypted channel can only be triggered on alone")]
    EncryptedChannelAmongMany,
}

impl TriggerError {
    /// 413 for data over the limit (as the reference says), else 400.
    pub fn status(self) -> u16 {
        match self {
            TriggerError::DataTooLarge => 413,
            _ => 400,
        }
    }
}

/// `data` as sent: pusher-http-node always sends a string (`ensureJSON`
/// stringifies objects); other libraries and curl users send objects, which
/// are taken as their JSON text, the string `ensureJSON` would have made.
fn data_text(raw: &RawValue) -> String {
    serde_json::from_str::<String>(raw.get()).unwrap_or_else(|_| raw.get().to_owned())
}

#[derive(Deserialize)]
struct TriggerBody {
    name: Option<String>,
    data: Option<Box<RawValue>>,
    channels: Option<Vec<String>>,
    channel: Option<String>,
    socket_id: Option<String>,
    info: Option<String>,
}

/// A checked event from `POST /events` or one entry of `POST /batch_events`.
#[derive(Debug, Clone)]
pub struct Trigger {
    pub name: String,
    /// The string delivered as the event's `data`.
    pub data: String,
    pub channels: Vec<Channel>,
    /// The sender's connection, which must not receive the event.
    pub socket_id: Option<SocketId>,
    /// Attributes the caller asked to get back (`user_count`,
    /// `subscription_count`), comma-separated as sent.
    pub info: Option<String>,
}

fn check(body: TriggerBody, limits: &ApiLimits) -> Result<Trigger, TriggerError> {
    let name = body
        .name
        .filter(|n| !n.is_empty() && n.len() <= MAX_EVENT_NAME_BYTES)
        .ok_or(TriggerError::EventNameInvalid)?;
    let data = body
        .data
        .as_deref()
        .map(data_text)
        .ok_or(TriggerError::BodyMalformed)?;
    if data.len() > limits.max_event_data_bytes {
        return Err(TriggerError::DataTooLarge);
    }
    let names = match (body.channels, body.channel) {
        (Some(list), None) => list,
        (None, Some(one)) => vec![one],
        _ => return Err(TriggerError::NoChannels),
    };
    if names.is_empty() {
        return Err(TriggerError::NoChannels);
    }
    if names.len() > MAX_TRIGGER_CHANNELS {
        return Err(TriggerError::TooManyChannels);
    }
    let channels = names
        .iter()
        .map(|n| Channel::parse(n))
        .collect::<Result<Vec<_>, _>>()?;
    // The data of an encrypted event is sealed with one channel's key, so it
    // means nothing on another channel: pusher-http-node refuses such a
    // trigger before sending it (lib/events.js), and so does the server.
    if channels.len() > 1 && channels.iter().any(Channel::is_encrypted) {
        return Err(TriggerError::EncryptedChannelAmongMany);
    }
    let socket_id = body
        .socket_id
        .filter(|s| !s.is_empty())
        .map(|s| SocketId::parse(&s))
        .transpose()?;
    Ok(Trigger {
        name,
        data,
        channels,
        socket_id,
        info: body.info,
    })
}

/// Parses and checks a `POST /apps/{id}/events` body.
pub fn parse_trigger(body: &[u8], limits: &ApiLimits) -> Result<Trigger, TriggerError> {
    check(
        serde_json::from_slice(body).map_err(|_| TriggerError::BodyMalformed)?,
        limits,
    )
}

/// Parses and checks a `POST /apps/{id}/batch_events` body,
/// `{"batch":[{name, channel, data, socket_id?, info?}, ..]}`.
pub fn parse_batch(body: &[u8], limits: &ApiLimits) -> Result<Vec<Trigger>, TriggerError> {
    #[derive(Deserialize)]
    struct Batch {
        batch: Vec<TriggerBody>,
    }
    let batch: Batch = serde_json::from_slice(body).map_err(|_| TriggerError::BodyMalformed)?;
    if batch.batch.len() > limits.max_batch_events {
        return Err(TriggerError::BatchTooLarge);
    }
    batch
        .batch
        .into_iter()
        .map(|event| check(event, limits))
        .collect()
}

/// Counts asked for with `info=` (absent fields are not serialised).
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct ChannelCounts {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_count: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subscription_count: Option<u64>,
}

/// `GET /channels` answer and the `POST /events` answer with `info`:
/// `{"channels":{"name":{counts}}}`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ChannelsResponse {
    pub channels: BTreeMap<String, ChannelCounts>,
}

/// `GET /channels/{name}`: `{"occupied":bool, counts..}`.
#[derive(Debug, Clone, Serialize)]
pub struct ChannelResponse {
    pub occupied: bool,
    #[serde(flatten)]
    pub counts: ChannelCounts,
}

/// `GET /channels/{presence-name}/users`: `{"users":[{"id":".."}]}`.
#[derive(Debug, Clone, Serialize)]
pub struct UsersResponse {
    pub users: Vec<UserId>,
}

#[derive(Debug, Clone, Serialize)]
pub struct UserId {
    pub id: String,
}

/// `POST /batch_events` with `info`: one entry per event, in order.
#[derive(Debug, Clone, Serialize)]
pub struct BatchResponse {
    pub batch: Vec<ChannelCounts>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> ApiLimits {
        ApiLimits::default()
    }

    // pusher-http-node lib/events.js trigger: {name, data: ensureJSON(data), channels, ...params}.
    #[test]
    fn trigger_bodies() {
        let t = parse_trigger(br#"{"name":"e","data":"{\"a\":1}","channels":["a","private-b"],"socket_id":"1.2","info":"user_count"}"#, &limits()).unwrap();
        assert_eq!(
            (t.name.as_str(), t.data.as_str(), t.channels.len()),
            ("e", r#"{"a":1}"#, 2)
        );
        assert_eq!(t.socket_id.unwrap().as_str(), "1.2");
        let t = parse_trigger(br#"{"name":"e","data":{"a": 1},"channel":"x"}"#, &limits()).unwrap();
        assert_eq!(
            (t.data.as_str(), t.channels[0].name()),
            (r#"{"a": 1}"#, "x")
        );
    }

    #[test]
    fn trigger_limits() {
        use TriggerError::*;
        let many: Vec<String> = (0..=MAX_TRIGGER_CHANNELS)
            .map(|i| format!("c{i}"))
            .collect();
        let body = serde_json::json!({"name": "e", "data": "x", "channels": many}).to_string();
        assert_eq!(
            parse_trigger(body.as_bytes(), &limits()).err(),
            Some(TooManyChannels)
        );
        let big = serde_json::json!({"name": "e", "data": "x".repeat(DEFAULT_MAX_EVENT_DATA_BYTES + 1), "channel": "a"}).to_string();
        assert_eq!(
            parse_trigger(big.as_bytes(), &limits()).err(),
            Some(DataTooLarge)
        );
        assert_eq!(DataTooLarge.status(), 413);
        let cases: &[(&[u8], TriggerError)] = &[
            (b"{", BodyMalformed),
            (br#"{"data":"x","channel":"a"}"#, EventNameInvalid),
            (br#"{"name":"e","channel":"a"}"#, BodyMalformed),
            (br#"{"name":"e","data":"x"}"#, NoChannels),
            (br#"{"name":"e","data":"x","channels":[]}"#, NoChannels),
            (
                br#"{"name":"e","data":"x","channels":["a"],"channel":"b"}"#,
                NoChannels,
            ),
            (
                br#"{"name":"e","data":"x","channel":"a b"}"#,
                ChannelName(ChannelNameError::ChannelNameForbiddenCharacter),
            ),
            (
                br#"{"name":"e","data":"x","channel":"a","socket_id":"x"}"#,
                SocketId(SocketIdError::NotDigitsDotDigits),
            ),
            (
                br#"{"name":"e","data":"x","channels":["a","private-encrypted-b"]}"#,
                EncryptedChannelAmongMany,
            ),
        ];
        for (body, want) in cases {
            assert_eq!(
                parse_trigger(body, &limits()).err(),
                Some(*want),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    // pusher-http-node lib/events.js triggerBatch: {batch: [{name, channel, data}]}.
    #[test]
    fn batches() {
        let b = parse_batch(br#"{"batch":[{"name":"a","channel":"c","data":"1"},{"name":"b","channel":"d","data":"2","socket_id":"3.4"}]}"#, &limits()).unwrap();
        assert_eq!(b.len(), 2);
        let eleven: Vec<_> = (0..11)
            .map(|_| serde_json::json!({"name": "a", "channel": "c", "data": "1"}))
            .collect();
        let body = serde_json::json!({ "batch": eleven }).to_string();
        assert_eq!(
            parse_batch(body.as_bytes(), &limits()).err(),
            Some(TriggerError::BatchTooLarge)
        );
        assert!(parse_batch(
            body.as_bytes(),
            &ApiLimits {
                max_batch_events: 11,
                ..limits()
            }
        )
        .is_ok());
    }

    // HTTP API reference: GET channels / channel / users answer shapes.
    #[test]
    fn response_shapes() {
        let mut list = ChannelsResponse::default();
        list.channels.insert(
            "presence-a".into(),
            ChannelCounts {
                user_count: Some(2),
                subscription_count: None,
            },
        );
        list.channels.insert("b".into(), ChannelCounts::default());
        assert_eq!(
            serde_json::to_string(&list).unwrap(),
            r#"{"channels":{"b":{},"presence-a":{"user_count":2}}}"#
        );
        let one = ChannelResponse {
            occupied: true,
            counts: ChannelCounts {
                user_count: None,
                subscription_count: Some(3),
            },
        };
        assert_eq!(
            serde_json::to_string(&one).unwrap(),
            r#"{"occupied":true,"subscription_count":3}"#
        );
        let users = UsersResponse {
            users: vec![UserId { id: "1".into() }],
        };
        assert_eq!(
            serde_json::to_string(&users).unwrap(),
            r#"{"users":[{"id":"1"}]}"#
        );
    }
}
