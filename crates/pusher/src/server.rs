//! Server → client messages: builders for the exact wire JSON, each one
//! `String` built in one buffer. Pusher Channels Protocol ("Events") and
//! what pusher-js reads (`Protocol.decodeMessage` parses a string `data` as
//! JSON and keeps any other `data` as is, so both shapes reach the app the
//! same way). Where Pusher sends `data` as a JSON string holding JSON
//! (connection_established, presence events, server events), so do these.

use serde::Serialize;
use serde_json::value::RawValue;

use crate::json::{escape_into, finish, push_string, Escaping};
use crate::socket_id::SocketId;

/// Seconds of silence after which the client pings (sent in
/// `pusher:connection_established`): Pusher's 120 s, which pusher-js also
/// uses as its default (`Defaults.activityTimeout`).
pub const DEFAULT_ACTIVITY_TIMEOUT_SECS: u32 = 120;

/// Opens `{"event":"<event>"` and, if given, `,"channel":"<channel>"`.
fn open(capacity: usize, event: &str, channel: Option<&str>) -> Vec<u8> {
    let mut out = Vec::with_capacity(capacity + event.len() + channel.map_or(0, str::len) + 32);
    out.extend_from_slice(b"{\"event\":");
    push_string(&mut out, event);
    if let Some(channel) = channel {
        out.extend_from_slice(b",\"channel\":");
        push_string(&mut out, channel);
    }
    out
}

/// Appends `,"data":"<value as JSON, escaped into a string>"` and closes.
fn data_as_string<T: Serialize + ?Sized>(mut out: Vec<u8>, value: &T) -> String {
    out.extend_from_slice(b",\"data\":\"");
    serde_json::to_writer(Escaping(&mut out), value).expect("serialising to memory cannot fail");
    out.extend_from_slice(b"\"}");
    finish(out)
}

/// Appends `,"data":<value as JSON>` and closes.
fn data_as_json<T: Serialize + ?Sized>(mut out: Vec<u8>, value: &T) -> String {
    out.extend_from_slice(b",\"data\":");
    serde_json::to_writer(&mut out, value).expect("serialising to memory cannot fail");
    out.push(b'}');
    finish(out)
}

/// `pusher:connection_established`: `data` is a string holding
/// `{"socket_id","activity_timeout"}` (pusher-js `processHandshake` refuses
/// the handshake without `activity_timeout`).
pub fn connection_established(socket_id: &SocketId, activity_timeout_secs: u32) -> String {
    #[derive(Serialize)]
    struct Data<'a> {
        socket_id: &'a str,
        activity_timeout: u32,
    }
    let out = open(64, "pusher:connection_established", None);
    data_as_string(
        out,
        &Data {
            socket_id: socket_id.as_str(),
            activity_timeout: activity_timeout_secs,
        },
    )
}

/// `pusher:error` with `{"message","code"}` as an object; `code` is omitted
/// when `None` (the protocol makes it optional). pusher-js hands `data` to
/// the app's error handler and, from a close, acts on the close code.
pub fn error(message: &str, code: Option<u16>) -> String {
    #[derive(Serialize)]
    struct Data<'a> {
        message: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        code: Option<u16>,
    }
    data_as_json(
        open(message.len() + 16, "pusher:error", None),
        &Data { message, code },
    )
}

/// `pusher:ping` (the server checking an idle client).
pub fn ping() -> String {
    r#"{"event":"pusher:ping","data":{}}"#.to_owned()
}

/// `pusher:pong`, the answer to a client's `pusher:ping`.
pub fn pong() -> String {
    r#"{"event":"pusher:pong","data":{}}"#.to_owned()
}

/// `pusher_internal:subscription_succeeded` for a non-presence channel,
/// with `data` `"{}"` (pusher-js emits it to the app as `{}`).
pub fn subscription_succeeded(channel: &str) -> String {
    let mut out = open(16, "pusher_internal:subscription_succeeded", Some(channel));
    out.extend_from_slice(b",\"data\":\"{}\"}");
    finish(out)
}

/// A presence member: the id and the raw `user_info` JSON from its
/// `channel_data` (`None` when the app sent none).
#[derive(Debug, Clone, Copy)]
pub struct Member<'a> {
    pub user_id: &'a str,
    pub user_info: Option<&'a RawValue>,
}

/// `pusher_internal:subscription_succeeded` for a presence channel: `data`
/// is a string holding `{"presence":{"ids":[..],"hash":{id:info},"count":n}}`
/// (pusher-js `Members.onSubscription` reads `presence.hash` and
/// `presence.count`). `members` must hold each user once.
pub fn presence_subscription_succeeded(channel: &str, members: &[Member<'_>]) -> String {
    struct Ids<'a>(&'a [Member<'a>]);
    impl Serialize for Ids<'_> {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.collect_seq(self.0.iter().map(|m| m.user_id))
        }
    }
    struct Hash<'a>(&'a [Member<'a>]);
    impl Serialize for Hash<'_> {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.collect_map(self.0.iter().map(|m| (m.user_id, m.user_info)))
        }
    }
    #[derive(Serialize)]
    struct Presence<'a> {
        ids: Ids<'a>,
        hash: Hash<'a>,
        count: usize,
    }
    #[derive(Serialize)]
    struct Data<'a> {
        presence: Presence<'a>,
    }
    let out = open(
        members.len() * 32,
        "pusher_internal:subscription_succeeded",
        Some(channel),
    );
    let data = Data {
        presence: Presence {
            ids: Ids(members),
            hash: Hash(members),
            count: members.len(),
        },
    };
    data_as_string(out, &data)
}

/// `pusher_internal:member_added`: `data` a string holding
/// `{"user_id","user_info"}` (pusher-js `Members.addMember`).
pub fn member_added(channel: &str, member: Member<'_>) -> String {
    #[derive(Serialize)]
    struct Data<'a> {
        user_id: &'a str,
        user_info: Option<&'a RawValue>,
    }
    let out = open(64, "pusher_internal:member_added", Some(channel));
    data_as_string(
        out,
        &Data {
            user_id: member.user_id,
            user_info: member.user_info,
        },
    )
}

/// `pusher_internal:member_removed`: `data` a string holding `{"user_id"}`.
pub fn member_removed(channel: &str, user_id: &str) -> String {
    #[derive(Serialize)]
    struct Data<'a> {
        user_id: &'a str,
    }
    data_as_string(
        open(32, "pusher_internal:member_removed", Some(channel)),
        &Data { user_id },
    )
}

/// `pusher_internal:subscription_count`: `data` a string holding
/// `{"subscription_count":n}` (pusher-js `handleSubscriptionCountEvent`).
pub fn subscription_count(channel: &str, count: u64) -> String {
    #[derive(Serialize)]
    struct Data {
        subscription_count: u64,
    }
    data_as_string(
        open(32, "pusher_internal:subscription_count", Some(channel)),
        &Data {
            subscription_count: count,
        },
    )
}

/// `pusher:cache_miss`: a cache channel had no event to replay to a new
/// subscriber (docs, "Cache channels").
pub fn cache_miss(channel: &str) -> String {
    let mut out = open(0, "pusher:cache_miss", Some(channel));
    out.push(b'}');
    finish(out)
}

/// `pusher:signin_success` with `{"user_data"}`: pusher-js
/// `_onSigninSuccess` parses `data.user_data` and needs a string `id`.
pub fn signin_success(user_data: &str) -> String {
    #[derive(Serialize)]
    struct Data<'a> {
        user_data: &'a str,
    }
    data_as_json(
        open(user_data.len() + 16, "pusher:signin_success", None),
        &Data { user_data },
    )
}

/// `pusher:subscription_error` on `channel`, `{"type","error","status"}`.
/// pusher-js routes it to the channel as an ordinary event, so the app's
/// `bind('pusher:subscription_error')` (Laravel Echo's `.error()`) sees the
/// same shape pusher-js emits itself when its auth endpoint fails.
pub fn subscription_error(channel: &str, kind: &str, error: &str, status: u16) -> String {
    #[derive(Serialize)]
    struct Data<'a> {
        #[serde(rename = "type")]
        kind: &'a str,
        error: &'a str,
        status: u16,
    }
    let out = open(error.len() + 48, "pusher:subscription_error", Some(channel));
    data_as_json(
        out,
        &Data {
            kind,
            error,
            status,
        },
    )
}

/// An event triggered through the HTTP API (or `sendToUser`): `data` is the
/// string the app sent, on the wire as a JSON string, as Pusher delivers it;
/// `user_id` is set for events a signed-in presence member sent.
pub fn event(event: &str, channel: &str, data: &str, user_id: Option<&str>) -> String {
    let mut out = open(data.len() + data.len() / 8, event, Some(channel));
    out.extend_from_slice(b",\"data\":\"");
    escape_into(&mut out, data.as_bytes());
    out.push(b'"');
    push_user_id(&mut out, user_id);
    out.push(b'}');
    finish(out)
}

/// A `client-*` event relayed to the channel's other subscribers, with the
/// sender's `user_id` on presence channels (pusher-js passes it to the
/// handler's metadata). `data` goes out as a string, as the protocol's
/// "Channel Events" define it and Pusher does ("Double encoding"): a string
/// the sender sent stays that string (its JSON literal is copied as is), any
/// other value is sent as its JSON text. pusher-js parses a string that holds
/// JSON, so an object reaches the app as the object the sender passed.
pub fn client_event(event: &str, channel: &str, data: &RawValue, user_id: Option<&str>) -> String {
    let raw = data.get();
    let mut out = open(raw.len() + raw.len() / 8, event, Some(channel));
    out.extend_from_slice(b",\"data\":");
    if raw.starts_with('"') {
        out.extend_from_slice(raw.as_bytes());
    } else {
        out.push(b'"');
        escape_into(&mut out, raw.as_bytes());
        out.push(b'"');
    }
    push_user_id(&mut out, user_id);
    out.push(b'}');
    finish(out)
}

fn push_user_id(out: &mut Vec<u8>, user_id: Option<&str>) {
    if let Some(user_id) = user_id {
        out.extend_from_slice(b",\"user_id\":");
        push_string(out, user_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn v(s: &str) -> Value {
        serde_json::from_str(s).unwrap()
    }

    /// What pusher-js's `Protocol.decodeMessage` makes of a frame: `data`
    /// parsed once more when it is a string holding JSON.
    fn decode_like_pusher_js(s: &str) -> Value {
        let mut m = v(s);
        if let Some(Value::String(inner)) = m.get("data").cloned() {
            if let Ok(parsed) = serde_json::from_str::<Value>(&inner) {
                m["data"] = parsed;
            }
        }
        m
    }

    // Pusher Channels Protocol "pusher:connection_established"; pusher-js processHandshake.
    #[test]
    fn connection_established_wire() {
        let id = SocketId::parse("123.456").unwrap();
        let s = connection_established(&id, 120);
        assert_eq!(
            s,
            r#"{"event":"pusher:connection_established","data":"{\"socket_id\":\"123.456\",\"activity_timeout\":120}"}"#
        );
        assert_eq!(
            decode_like_pusher_js(&s)["data"],
            json!({"socket_id": "123.456", "activity_timeout": 120})
        );
    }

    #[test]
    fn error_ping_pong_wire() {
        assert_eq!(
            error("no \"app\"", Some(4001)),
            r#"{"event":"pusher:error","data":{"message":"no \"app\"","code":4001}}"#
        );
        assert_eq!(
            error("x", None),
            r#"{"event":"pusher:error","data":{"message":"x"}}"#
        );
        assert_eq!(v(&ping()), json!({"event": "pusher:ping", "data": {}}));
        assert_eq!(v(&pong()), json!({"event": "pusher:pong", "data": {}}));
    }

    // pusher-js presence_channel.ts / members.ts: presence.hash, presence.count; member user_id/user_info.
    #[test]
    fn presence_wire() {
        let info = RawValue::from_string(r#"{"name":"Ann \"A\""}"#.to_owned()).unwrap();
        let members = [
            Member {
                user_id: "1",
                user_info: Some(&info),
            },
            Member {
                user_id: "2",
                user_info: None,
            },
        ];
        let s = presence_subscription_succeeded("presence-r", &members);
        assert_eq!(
            decode_like_pusher_js(&s),
            json!({"event": "pusher_internal:subscription_succeeded", "channel": "presence-r",
                   "data": {"presence": {"ids": ["1", "2"], "hash": {"1": {"name": "Ann \"A\""}, "2": null}, "count": 2}}})
        );
        assert!(v(&s)["data"].is_string());
        let s = member_added("presence-r", members[0]);
        assert_eq!(
            decode_like_pusher_js(&s)["data"],
            json!({"user_id": "1", "user_info": {"name": "Ann \"A\""}})
        );
        let s = member_removed("presence-r", "2");
        assert_eq!(
            s,
            r#"{"event":"pusher_internal:member_removed","channel":"presence-r","data":"{\"user_id\":\"2\"}"}"#
        );
    }

    #[test]
    fn channel_messages_wire() {
        assert_eq!(
            subscription_succeeded("news"),
            r#"{"event":"pusher_internal:subscription_succeeded","channel":"news","data":"{}"}"#
        );
        assert_eq!(
            cache_miss("cache-a"),
            r#"{"event":"pusher:cache_miss","channel":"cache-a"}"#
        );
        assert_eq!(
            decode_like_pusher_js(&subscription_count("a", 3))["data"],
            json!({"subscription_count": 3})
        );
        assert_eq!(
            v(&subscription_error(
                "private-a",
                "AuthError",
                "bad sig",
                401
            )),
            json!({"event": "pusher:subscription_error", "channel": "private-a", "data": {"type": "AuthError", "error": "bad sig", "status": 401}})
        );
        assert_eq!(
            v(&signin_success(r#"{"id":"7"}"#)),
            json!({"event": "pusher:signin_success", "data": {"user_data": "{\"id\":\"7\"}"}})
        );
    }

    #[test]
    fn events_wire() {
        let s = event("update", "news", r#"{"n":1,"s":"a\"b\n"}"#, None);
        assert_eq!(
            s,
            r#"{"event":"update","channel":"news","data":"{\"n\":1,\"s\":\"a\\\"b\\n\"}"}"#
        );
        assert_eq!(
            decode_like_pusher_js(&s)["data"],
            json!({"n": 1, "s": "a\"b\n"})
        );
        // A data string that is not JSON reaches the app as that string.
        assert_eq!(
            decode_like_pusher_js(&event("e", "c", "plain text", Some("u1"))),
            json!({"event": "e", "channel": "c", "data": "plain text", "user_id": "u1"})
        );
        let raw = RawValue::from_string(r#"{"typing":true}"#.to_owned()).unwrap();
        assert_eq!(
            client_event("client-typing", "presence-r", &raw, Some("9")),
            r#"{"event":"client-typing","channel":"presence-r","data":"{\"typing\":true}","user_id":"9"}"#
        );
        let quoted = RawValue::from_string(r#""say \"hi\"""#.to_owned()).unwrap();
        assert_eq!(
            client_event("client-a", "private-r", &quoted, None),
            r#"{"event":"client-a","channel":"private-r","data":"say \"hi\""}"#
        );
    }
}
