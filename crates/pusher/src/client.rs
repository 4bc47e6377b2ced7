//! Client → server messages, protocol 7 (Pusher Channels Protocol, "Events"):
//! one JSON object per text frame, `{"event", "channel"?, "data"?}`. Parsing
//! checks the shape and the channel name; what the connection may do (is it
//! subscribed, is the signature right) is the adapter's and `auth`'s.
//!
//! `data` of a `pusher:*` event is read as an object, or as a JSON string
//! holding that object: pusher-js sends objects (`send_event` stringifies the
//! whole message once) and the protocol doc shows objects, but the doc's
//! "Double encoding" section has the server send strings, and a client
//! library that mirrors it would send `data` that way, so both are accepted.
//! A client event's `data` is any JSON value ("String / Object" in the doc),
//! kept as its raw text; it is relayed as a string (`server::client_event`).

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::channel::{Channel, ChannelNameError};
use crate::codes;

/// The default limit on one client message, in bytes: Pusher's documented
/// 10 KB limit on an event's data (HTTP API reference, "POST event"; client
/// events share it), applied here to the whole frame so the parser never
/// reads more than that.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 10 * 1024;

/// A message a client sent.
#[derive(Debug, Clone)]
pub enum ClientMessage {
    /// `pusher:ping`: answer with `pusher:pong`.
    Ping,
    /// `pusher:pong`: the answer to the server's ping.
    Pong,
    Subscribe(Subscribe),
    /// `pusher:unsubscribe`.
    Unsubscribe {
        channel: Channel,
    },
    /// `pusher:signin`: user authentication.
    Signin {
        auth: String,
        user_data: String,
    },
    /// A `client-*` event to relay to the channel's other subscribers.
    ClientEvent(ClientEvent),
}

/// `pusher:subscribe`.
#[derive(Debug, Clone)]
pub struct Subscribe {
    pub channel: Channel,
    /// `key:signature`; `None` when absent or empty (pusher-js sends
    /// `"auth": ""` for public channels).
    pub auth: Option<String>,
    /// For presence channels: the JSON text the signature covers, exactly as
    /// sent (it is signed byte for byte, so it is never re-serialised).
    pub channel_data: Option<String>,
}

/// A `client-*` event.
#[derive(Debug, Clone)]
pub struct ClientEvent {
    pub event: String,
    pub channel: Channel,
    /// The sender's `data`, any JSON value, as raw JSON text.
    pub data: Box<RawValue>,
}

impl ClientEvent {
    /// `data` as the string Pusher relays (Pusher Channels Protocol, "Double
    /// encoding": the server "tries to send the data field as a string"): a
    /// string as itself, anything else as its JSON text. For webhooks;
    /// `server::client_event` does the same without this allocation.
    pub fn data_string(&self) -> std::borrow::Cow<'_, str> {
        data_string(&self.data)
    }
}

/// [`ClientEvent::data_string`] of any event data (a guest may have
/// replaced the client's).
pub fn data_string(data: &RawValue) -> std::borrow::Cow<'_, str> {
    match as_string(data) {
        Some(s) => std::borrow::Cow::Owned(s),
        None => std::borrow::Cow::Borrowed(data.get()),
    }
}

/// Why a client message is refused. None of these closes the connection:
/// the server answers with `pusher:error` carrying [`MessageError::code`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MessageError {
    #[error("message is larger than the limit")]
    MessageTooLarge,
    #[error("message is not a JSON object")]
    MessageNotJsonObject,
    #[error("message has no string \"event\"")]
    EventMissing,
    #[error("unknown event")]
    UnknownEvent,
    #[error("\"data\" is missing or not the object this event needs")]
    DataMalformed,
    #[error("message has no string \"channel\"")]
    ChannelMissing,
    #[error("{0}")]
    ChannelName(#[from] ChannelNameError),
    #[error("\"auth\" is not a string")]
    AuthNotString,
    #[error("\"channel_data\" is not a string")]
    ChannelDataNotString,
    #[error("client events are only allowed on private and presence channels")]
    ClientEventForbiddenOnChannel,
}

impl MessageError {
    /// The `code` of the `pusher:error` to answer with (see `codes`).
    pub fn code(self) -> u16 {
        match self {
            MessageError::ClientEventForbiddenOnChannel => codes::CLIENT_EVENT_REJECTED,
            _ => codes::GENERIC_ERROR,
        }
    }
}

/// The envelope; `data` is kept raw and read according to `event`.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow)]
    event: Option<&'a RawValue>,
    channel: Option<&'a RawValue>,
    data: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct SubscribeData {
    channel: Option<serde_json::Value>,
    auth: Option<serde_json::Value>,
    channel_data: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct SigninData {
    auth: String,
    user_data: String,
}

/// A JSON string's value, or `None` if `raw` is another type.
fn as_string(raw: &RawValue) -> Option<String> {
    serde_json::from_str::<String>(raw.get()).ok()
}

/// The data object of a `pusher:*` event: the object itself, or an object
/// inside a JSON string (module head says why both).
fn data_object<T: for<'de> Deserialize<'de>>(data: Option<&RawValue>) -> Result<T, MessageError> {
    let raw = data.ok_or(MessageError::DataMalformed)?;
    let parsed = match as_string(raw) {
        Some(inner) => serde_json::from_str(&inner),
        None => serde_json::from_str(raw.get()),
    };
    parsed.map_err(|_| MessageError::DataMalformed)
}

fn channel_from(value: Option<serde_json::Value>) -> Result<Channel, MessageError> {
    match value {
        Some(serde_json::Value::String(name)) => Ok(Channel::parse(&name)?),
        _ => Err(MessageError::ChannelMissing),
    }
}

/// An optional string field: absent, `null` and `""` are `None`.
fn optional_string(
    value: Option<serde_json::Value>,
    err: MessageError,
) -> Result<Option<String>, MessageError> {
    match value {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(s)) if s.is_empty() => Ok(None),
        Some(serde_json::Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(err),
    }
}

/// Parses one text frame from a client, refusing it unread when it is over
/// `max_bytes` (use [`DEFAULT_MAX_MESSAGE_BYTES`] unless configured).
pub fn parse_client_message(text: &str, max_bytes: usize) -> Result<ClientMessage, MessageError> {
    if text.len() > max_bytes {
        return Err(MessageError::MessageTooLarge);
    }
    let envelope: Envelope =
        serde_json::from_str(text).map_err(|_| MessageError::MessageNotJsonObject)?;
    let event = envelope
        .event
        .and_then(as_string)
        .ok_or(MessageError::EventMissing)?;
    match event.as_str() {
        "pusher:ping" => Ok(ClientMessage::Ping),
        "pusher:pong" => Ok(ClientMessage::Pong),
        "pusher:subscribe" => {
            let data: SubscribeData = data_object(envelope.data)?;
            Ok(ClientMessage::Subscribe(Subscribe {
                channel: channel_from(data.channel)?,
                auth: optional_string(data.auth, MessageError::AuthNotString)?,
                channel_data: optional_string(
                    data.channel_data,
                    MessageError::ChannelDataNotString,
                )?,
            }))
        }
        "pusher:unsubscribe" => {
            let data: SubscribeData = data_object(envelope.data)?;
            Ok(ClientMessage::Unsubscribe {
                channel: channel_from(data.channel)?,
            })
        }
        "pusher:signin" => {
            let data: SigninData = data_object(envelope.data)?;
            Ok(ClientMessage::Signin {
                auth: data.auth,
                user_data: data.user_data,
            })
        }
        _ if event.starts_with("client-") => {
            let name = envelope
                .channel
                .and_then(as_string)
                .ok_or(MessageError::ChannelMissing)?;
            let channel = Channel::parse(&name)?;
            if !channel.allows_client_events() {
                return Err(MessageError::ClientEventForbiddenOnChannel);
            }
            // pusher-js's `trigger(name)` without data sends no `data`
            // field (JSON.stringify drops `undefined`); relay it as `null`.
            let data = envelope.data.map_or_else(
                || RawValue::from_string("null".to_owned()).expect("null is JSON"),
                |raw| raw.to_owned(),
            );
            Ok(ClientMessage::ClientEvent(ClientEvent {
                event,
                channel,
                data,
            }))
        }
        _ => Err(MessageError::UnknownEvent),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channel::ChannelKind;

    fn parse(text: &str) -> Result<ClientMessage, MessageError> {
        parse_client_message(text, DEFAULT_MAX_MESSAGE_BYTES)
    }

    // pusher-js src/core/connection/connection.ts ping(): `send_event('pusher:ping', {})`.
    #[test]
    fn ping_and_pong() {
        assert!(matches!(
            parse(r#"{"event":"pusher:ping","data":{}}"#),
            Ok(ClientMessage::Ping)
        ));
        assert!(matches!(
            parse(r#"{"event":"pusher:pong","data":{}}"#),
            Ok(ClientMessage::Pong)
        ));
        assert!(matches!(
            parse(r#"{"event":"pusher:ping"}"#),
            Ok(ClientMessage::Ping)
        ));
    }

    // pusher-js src/core/channels/channel.ts subscribe(): {auth, channel_data, channel}.
    #[test]
    fn subscribe_as_object_and_as_string() {
        let public =
            parse(r#"{"event":"pusher:subscribe","data":{"auth":"","channel":"news"}}"#).unwrap();
        let ClientMessage::Subscribe(s) = public else {
            panic!()
        };
        assert_eq!(
            (s.channel.name(), s.auth, s.channel_data),
            ("news", None, None)
        );

        let presence = r#"{"event":"pusher:subscribe","data":"{\"channel\":\"presence-a\",\"auth\":\"k:s\",\"channel_data\":\"{\\\"user_id\\\":\\\"1\\\"}\"}"}"#;
        let ClientMessage::Subscribe(s) = parse(presence).unwrap() else {
            panic!()
        };
        assert_eq!(s.channel.kind(), ChannelKind::Presence);
        assert_eq!(s.auth.as_deref(), Some("k:s"));
        assert_eq!(s.channel_data.as_deref(), Some(r#"{"user_id":"1"}"#));
    }

    #[test]
    fn unsubscribe_and_signin() {
        let ClientMessage::Unsubscribe { channel } =
            parse(r#"{"event":"pusher:unsubscribe","data":{"channel":"private-x"}}"#).unwrap()
        else {
            panic!()
        };
        assert_eq!(channel.name(), "private-x");
        // pusher-js src/core/user.ts _onAuthorize: {auth, user_data}.
        let ClientMessage::Signin { auth, user_data } = parse(
            r#"{"event":"pusher:signin","data":{"auth":"k:s","user_data":"{\"id\":\"1\"}"}}"#,
        )
        .unwrap() else {
            panic!()
        };
        assert_eq!(
            (auth.as_str(), user_data.as_str()),
            ("k:s", r#"{"id":"1"}"#)
        );
    }

    // pusher-js channel.ts trigger(): send_event(event, data, this.name).
    #[test]
    fn client_events_keep_data_raw() {
        let ClientMessage::ClientEvent(e) =
            parse(r#"{"event":"client-typing","data":{"a": [1, "x"]},"channel":"private-chat"}"#)
                .unwrap()
        else {
            panic!()
        };
        assert_eq!(
            (e.event.as_str(), e.channel.name(), e.data.get()),
            ("client-typing", "private-chat", r#"{"a": [1, "x"]}"#)
        );
        let ClientMessage::ClientEvent(e) =
            parse(r#"{"event":"client-x","channel":"presence-r"}"#).unwrap()
        else {
            panic!()
        };
        assert_eq!(e.data.get(), "null");
        assert_eq!(e.data_string(), "null");
        let ClientMessage::ClientEvent(e) =
            parse(r#"{"event":"client-x","channel":"private-r","data":"a \"q\""}"#).unwrap()
        else {
            panic!()
        };
        assert_eq!(e.data_string(), "a \"q\"");
    }

    #[test]
    fn bad_messages_map_to_errors_and_codes() {
        use MessageError::*;
        let cases: &[(&str, MessageError)] = &[
            ("", MessageNotJsonObject),
            ("[1]", MessageNotJsonObject),
            ("{\"event\":1}", EventMissing),
            ("{}", EventMissing),
            (r#"{"event":"pusher:nope"}"#, UnknownEvent),
            (r#"{"event":"hello"}"#, UnknownEvent),
            (r#"{"event":"pusher:subscribe"}"#, DataMalformed),
            (
                r#"{"event":"pusher:subscribe","data":"nojson"}"#,
                DataMalformed,
            ),
            (r#"{"event":"pusher:subscribe","data":{}}"#, ChannelMissing),
            (
                r#"{"event":"pusher:subscribe","data":{"channel":7}}"#,
                ChannelMissing,
            ),
            (
                r#"{"event":"pusher:subscribe","data":{"channel":"a b"}}"#,
                ChannelName(ChannelNameError::ChannelNameForbiddenCharacter),
            ),
            (
                r#"{"event":"pusher:subscribe","data":{"channel":"a","auth":1}}"#,
                AuthNotString,
            ),
            (
                r#"{"event":"pusher:subscribe","data":{"channel":"a","channel_data":{}}}"#,
                ChannelDataNotString,
            ),
            (
                r#"{"event":"pusher:signin","data":{"auth":"x"}}"#,
                DataMalformed,
            ),
            (r#"{"event":"client-a","data":{}}"#, ChannelMissing),
            (
                r#"{"event":"client-a","channel":"news","data":{}}"#,
                ClientEventForbiddenOnChannel,
            ),
            (
                r#"{"event":"client-a","channel":"private-encrypted-x","data":{}}"#,
                ClientEventForbiddenOnChannel,
            ),
            (
                r##"{"event":"client-a","channel":"#server-to-user-1","data":{}}"##,
                ClientEventForbiddenOnChannel,
            ),
        ];
        for (text, want) in cases {
            assert_eq!(parse(text).err(), Some(*want), "{text}");
        }
        assert_eq!(
            ClientEventForbiddenOnChannel.code(),
            codes::CLIENT_EVENT_REJECTED
        );
        assert_eq!(UnknownEvent.code(), codes::GENERIC_ERROR);
    }

    #[test]
    fn the_size_limit_is_checked_first() {
        let big = format!(
            r#"{{"event":"client-a","channel":"private-a","data":"{}"}}"#,
            "x".repeat(DEFAULT_MAX_MESSAGE_BYTES)
        );
        assert_eq!(parse(&big).err(), Some(MessageError::MessageTooLarge));
        assert!(parse_client_message(&big, big.len()).is_ok());
    }
}
