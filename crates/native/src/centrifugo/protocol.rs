//! Centrifugo's bidirectional client protocol (v2), JSON encoding: the
//! commands a client sends (one JSON object per line, several per frame),
//! the replies and pushes it gets, and the protocol's error and disconnect
//! codes, as the `centrifuge` JavaScript client (5.x) and the `centrifuge`
//! Go server library use them. Replies carry the command's `id`; pushes
//! and the server's ping (`{}`) carry none.

use serde::Deserialize;
use serde_json::Value;
use std::collections::HashMap;
use weir_realtime::{ClientInfo, Publication, StreamPosition};

/// An error reply's code and message (Centrifugo's `errors.go`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorReply {
    pub code: u32,
    pub message: &'static str,
}

pub const INTERNAL: ErrorReply = ErrorReply {
    code: 100,
    message: "internal server error",
};
pub const UNAUTHORIZED: ErrorReply = ErrorReply {
    code: 101,
    message: "unauthorized",
};
pub const UNKNOWN_CHANNEL: ErrorReply = ErrorReply {
    code: 102,
    message: "unknown channel",
};
pub(crate) const PERMISSION_DENIED: ErrorReply = ErrorReply {
    code: 103,
    message: "permission denied",
};
pub const METHOD_NOT_FOUND: ErrorReply = ErrorReply {
    code: 104,
    message: "method not found",
};
pub(crate) const ALREADY_SUBSCRIBED: ErrorReply = ErrorReply {
    code: 105,
    message: "already subscribed",
};
pub const LIMIT_EXCEEDED: ErrorReply = ErrorReply {
    code: 106,
    message: "limit exceeded",
};
pub const BAD_REQUEST: ErrorReply = ErrorReply {
    code: 107,
    message: "bad request",
};
pub const NOT_AVAILABLE: ErrorReply = ErrorReply {
    code: 108,
    message: "not available",
};
pub(crate) const TOKEN_EXPIRED: ErrorReply = ErrorReply {
    code: 109,
    message: "token expired",
};
pub const UNRECOVERABLE_POSITION: ErrorReply = ErrorReply {
    code: 112,
    message: "unrecoverable position",
};

/// A disconnect: the WebSocket close code and reason (Centrifugo's
/// `disconnect.go`). Codes 3500-3999 tell the client not to reconnect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Disconnect {
    pub code: u16,
    pub reason: &'static str,
}

pub(crate) const DISCONNECT_EXPIRED: Disconnect = Disconnect {
    code: 3005,
    reason: "connection expired",
};
/// The connection's positions in a channel broke on this node (with
/// `[cluster]`): the client reconnects and recovers.
pub(crate) const DISCONNECT_INSUFFICIENT_STATE: Disconnect = Disconnect {
    code: 3010,
    reason: "insufficient state",
};
pub(crate) const DISCONNECT_NO_PONG: Disconnect = Disconnect {
    code: 3012,
    reason: "no pong",
};
pub(crate) const DISCONNECT_INVALID_TOKEN: Disconnect = Disconnect {
    code: 3500,
    reason: "invalid token",
};
pub(crate) const DISCONNECT_BAD_REQUEST: Disconnect = Disconnect {
    code: 3501,
    reason: "bad request",
};
pub(crate) const DISCONNECT_STALE: Disconnect = Disconnect {
    code: 3502,
    reason: "stale",
};
pub const DISCONNECT_FORCE: Disconnect = Disconnect {
    code: 3503,
    reason: "force disconnect",
};
/// A command frame over the route's `max_command_bytes` (the client maps
/// WebSocket's 1009 to "message size limit" and does not reconnect).
pub(crate) const DISCONNECT_MESSAGE_SIZE: Disconnect = Disconnect {
    code: 1009,
    reason: "message size limit exceeded",
};

/// `subscribe.flag` bit: the client wants an error (112) rather than a
/// subscription that did not recover.
pub(crate) const FLAG_REJECT_UNRECOVERED: u64 = 2;

/// One command. Exactly one method field is set; none is a pong.
#[derive(Debug, Default, Deserialize)]
pub struct Command {
    #[serde(default)]
    pub id: u32,
    pub connect: Option<ConnectRequest>,
    pub subscribe: Option<SubscribeRequest>,
    pub unsubscribe: Option<ChannelRequest>,
    pub publish: Option<PublishRequest>,
    pub presence: Option<ChannelRequest>,
    pub presence_stats: Option<ChannelRequest>,
    pub history: Option<HistoryRequest>,
    pub refresh: Option<RefreshRequest>,
    pub ping: Option<Value>,
    pub send: Option<Value>,
    pub rpc: Option<Value>,
    pub sub_refresh: Option<SubRefreshRequest>,
}

/// A subscription token refreshed before it expires.
#[derive(Debug, Default, Deserialize)]
pub struct SubRefreshRequest {
    #[serde(default)]
    pub channel: String,
    #[serde(default)]
    pub token: String,
}

#[derive(Debug, Default, Deserialize)]
pub struct ConnectRequest {
    #[serde(default)]
    pub token: String,
    /// Subscriptions the client had on its last connection (a reconnect
    /// of server-side subscriptions): their positions.
    #[serde(default)]
    pub subs: HashMap<String, SubscribeRequest>,
}

#[derive(Debug, Default, Deserialize)]
pub struct SubscribeRequest {
    #[serde(default)]
    pub channel: String,
    #[serde(default)]
    pub token: String,
    #[serde(default)]
    pub recover: bool,
    #[serde(default)]
    pub epoch: String,
    #[serde(default)]
    pub offset: u64,
    #[serde(default)]
    pub positioned: bool,
    #[serde(default)]
    pub recoverable: bool,
    #[serde(default)]
    pub flag: u64,
}

#[derive(Debug, Default, Deserialize)]
pub struct ChannelRequest {
    #[serde(default)]
    pub channel: String,
}

#[derive(Debug, Deserialize)]
pub struct PublishRequest {
    #[serde(default)]
    pub channel: String,
    #[serde(default)]
    pub data: Value,
}

#[derive(Debug, Default, Deserialize)]
pub struct HistoryRequest {
    #[serde(default)]
    pub channel: String,
    /// Publications wanted: 0 none (the position only), negative all.
    #[serde(default)]
    pub limit: i64,
    pub since: Option<Position>,
    #[serde(default)]
    pub reverse: bool,
}

#[derive(Debug, Default, Deserialize)]
pub struct Position {
    #[serde(default)]
    pub offset: u64,
    #[serde(default)]
    pub epoch: String,
}

#[derive(Debug, Default, Deserialize)]
pub struct RefreshRequest {
    #[serde(default)]
    pub token: String,
}

/// Appends `s` as a JSON string.
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    serde_json::to_writer(&mut *out, s).expect("writing to a Vec");
}

/// Appends a client info object (`client`, `user`, `conn_info`, `chan_info`).
pub fn write_client_info(out: &mut Vec<u8>, info: &ClientInfo) {
    out.extend_from_slice(b"{\"client\":");
    write_str(out, &info.client);
    out.extend_from_slice(b",\"user\":");
    write_str(out, &info.user);
    if let Some(conn_info) = &info.conn_info {
        out.extend_from_slice(b",\"conn_info\":");
        out.extend_from_slice(conn_info);
    }
    if let Some(chan_info) = &info.chan_info {
        out.extend_from_slice(b",\"chan_info\":");
        out.extend_from_slice(chan_info);
    }
    out.push(b'}');
}

/// Appends a publication object (`data` as the JSON it is, `offset` when
/// positioned, `info` when a client published it).
pub(crate) fn write_publication(out: &mut Vec<u8>, p: &Publication) {
    out.extend_from_slice(b"{\"data\":");
    out.extend_from_slice(&p.data);
    if p.offset != 0 {
        out.extend_from_slice(format!(",\"offset\":{}", p.offset).as_bytes());
    }
    if let Some(info) = &p.info {
        out.extend_from_slice(b",\"info\":");
        write_client_info(out, info);
    }
    out.push(b'}');
}

/// Appends `"publications":[...]`.
pub fn write_publications(out: &mut Vec<u8>, pubs: &[Publication]) {
    out.extend_from_slice(b"\"publications\":[");
    for (i, p) in pubs.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_publication(out, p);
    }
    out.push(b']');
}

/// Appends `"offset":N,"epoch":"E"`.
pub fn write_position(out: &mut Vec<u8>, at: &StreamPosition) {
    out.extend_from_slice(format!("\"offset\":{},\"epoch\":", at.offset).as_bytes());
    write_str(out, &at.epoch);
}

/// Appends an error reply line.
pub(crate) fn write_error(out: &mut Vec<u8>, id: u32, e: ErrorReply) {
    out.extend_from_slice(
        format!(
            "{{\"id\":{id},\"error\":{{\"code\":{},\"message\":\"{}\"}}}}",
            e.code, e.message
        )
        .as_bytes(),
    );
}

/// Appends a reply line `{"id":N,"<method>":<result>}`; `result` writes
/// the result object.
pub(crate) fn write_reply(
    out: &mut Vec<u8>,
    id: u32,
    method: &str,
    result: impl FnOnce(&mut Vec<u8>),
) {
    out.extend_from_slice(format!("{{\"id\":{id},\"{method}\":").as_bytes());
    result(out);
    out.push(b'}');
}

/// A push: `{"push":{"channel":"C","<kind>":<body>}}`.
pub fn push(channel: &str, kind: &str, body: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + channel.len());
    out.extend_from_slice(b"{\"push\":{\"channel\":");
    write_str(&mut out, channel);
    out.extend_from_slice(format!(",\"{kind}\":").as_bytes());
    body(&mut out);
    out.extend_from_slice(b"}}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use std::time::Instant;

    /// Several commands in one frame, one per line, as the JS client's
    /// `JsonCodec.encodeCommands` joins them; `{}` is a pong.
    #[test]
    fn commands_parse_one_per_line() {
        let frame = "{\"id\":1,\"connect\":{\"token\":\"t\",\"name\":\"js\"}}\n\
                     {\"id\":2,\"subscribe\":{\"channel\":\"chat:a\",\"recover\":true,\"offset\":5,\"epoch\":\"ab\",\"flag\":1}}\n{}";
        let cmds: Vec<Command> = frame
            .split('\n')
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(cmds[0].connect.as_ref().unwrap().token, "t");
        let sub = cmds[1].subscribe.as_ref().unwrap();
        assert_eq!(
            (sub.offset, sub.epoch.as_str(), sub.recover),
            (5, "ab", true)
        );
        assert!(cmds[2].connect.is_none() && cmds[2].id == 0);
    }

    #[test]
    fn publications_are_written_as_centrifugo_shows_them() {
        let p = Publication {
            offset: 7,
            data: Bytes::from_static(b"{\"text\":\"hi\"}"),
            info: Some(std::sync::Arc::new(ClientInfo {
                client: "c".into(),
                user: "42".into(),
                conn_info: Some(Bytes::from_static(b"{\"name\":\"A\"}")),
                chan_info: None,
            })),
            time: Instant::now(),
        };
        let frame = push("chat:a", "pub", |o| write_publication(o, &p));
        let v: Value = serde_json::from_slice(&frame).unwrap();
        assert_eq!(v["push"]["channel"], "chat:a");
        assert_eq!(v["push"]["pub"]["offset"], 7);
        assert_eq!(v["push"]["pub"]["data"]["text"], "hi");
        assert_eq!(v["push"]["pub"]["info"]["conn_info"]["name"], "A");
        let mut out = Vec::new();
        write_error(&mut out, 3, PERMISSION_DENIED);
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["error"]["code"], 103);
    }
}
