//! The host's side of an answer: [`parse_commands`] checks a guest's command
//! headers and data once, against every rule in the crate doc, and
//! [`CommandList::iter`] then yields typed [`Command`]s that cannot fail.
//! [`CommandBuf`] (feature `alloc`) is the same list owning its buffers.

use crate::error::{AbiError, Field};
use crate::header::{
    checked_str, is_utf8, range, split_headers, CommandHeader, CommandKind, Direction,
};
use crate::header::{COMMAND_HEADER_BYTES as N, COMMAND_HEADER_BYTES};
use crate::pusher::RT_AUTHORISE;
use crate::realtime::{RtVerdict, RT_DROP, RT_PASS, RT_REPLACE};
use crate::ConnectionId;

/// Longest close reason RFC 6455 §5.5 allows: a control frame's 125-byte
/// payload minus the 2-byte code. A longer one is cut, not refused.
pub const MAX_CLOSE_REASON_BYTES: usize = 123;

/// The code a close command gets when the guest's code may not be sent:
/// 1011, internal error (RFC 6455 §7.4.1).
pub const FALLBACK_CLOSE_CODE: u16 = 1011;

/// One thing a guest asked for, borrowed from its [`CommandList`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command<'a> {
    /// Send one message to `conn`; a `text` payload is UTF-8.
    Send {
        conn: ConnectionId,
        text: bool,
        payload: &'a [u8],
    },
    /// Close `conn`. `code` may be sent (RFC 6455 §7.4; the guest's code or
    /// 1011), `reason` is at most [`MAX_CLOSE_REASON_BYTES`].
    Close {
        conn: ConnectionId,
        code: u16,
        reason: &'a str,
    },
    /// Deliver to every subscriber of `topic` (not empty) except `exclude`.
    Publish {
        topic: &'a str,
        text: bool,
        payload: &'a [u8],
        exclude: Option<ConnectionId>,
    },
    /// Subscribe `conn` to `topic` (not empty).
    Subscribe { conn: ConnectionId, topic: &'a str },
    /// Unsubscribe `conn` from `topic` (not empty).
    Unsubscribe { conn: ConnectionId, topic: &'a str },
    /// Store `attachment` for `conn` (empty: forget it).
    SetAttachment {
        conn: ConnectionId,
        attachment: &'a [u8],
    },
    /// 0.4.0: send an HTTP request; its answer (http-response or
    /// http-error with `tag`) goes to `conn`, or to the route when 0.
    /// `head` is `METHOD URL` and header lines ([`crate::io`]).
    HttpRequest {
        conn: ConnectionId,
        tag: u64,
        head: &'a str,
        body: &'a [u8],
    },
    /// 0.4.0: a timer event with `tag` for `conn` (0: the route) after
    /// `delay_ms` milliseconds.
    SetTimer {
        conn: ConnectionId,
        tag: u64,
        delay_ms: u64,
    },
    /// 0.4.0: forget the timer `tag` of `conn` (0: the route's).
    CancelTimer { conn: ConnectionId, tag: u64 },
    /// 0.4.0: store `value` under `key` (not empty) in the route's store,
    /// for `ttl_ms` milliseconds (0: until deleted).
    KvSet {
        key: &'a [u8],
        value: &'a [u8],
        ttl_ms: u64,
    },
    /// 0.4.0: remove `key` (not empty) from the route's store.
    KvDelete { key: &'a [u8] },
    /// 0.4.0, a proxy route's filter: pass one message of `conn` on in
    /// `direction` (the message received, or what replaces it); a `text`
    /// payload is UTF-8.
    Forward {
        conn: ConnectionId,
        direction: Direction,
        text: bool,
        payload: &'a [u8],
    },
    /// Packed only, a real-time namespace's guest: the answer to the
    /// rt-subscribe `call` of `conn`: `code` 0 allows, any other refuses
    /// with that Centrifugo error code.
    /// For a Pusher app's guest (pusher-connect, pusher-subscribe):
    /// `authorise` (byte 9 [`RT_AUTHORISE`]) says the guest answered a
    /// subscription's authorisation itself, with `payload` the presence
    /// channel data (or empty); with a refusal, `payload` is its message.
    RtSubscribeVerdict {
        conn: ConnectionId,
        call: u64,
        code: u16,
        authorise: bool,
        payload: &'a str,
    },
    /// Packed only: the answer to the rt-publish `call` of `conn`.
    RtPublishVerdict {
        conn: ConnectionId,
        call: u64,
        verdict: RtVerdict<'a>,
    },
    /// A `realtime = true` route: read up to `limit` publications of
    /// `channel` (newest first when `reverse`); the answer (a history event
    /// with `tag`) goes to `conn`, or to the route when 0.
    HistoryRead {
        conn: ConnectionId,
        tag: u64,
        limit: u32,
        reverse: bool,
        channel: &'a str,
    },
    /// A `realtime = true` route: read `channel`'s presence; the answer (a
    /// presence event with `tag`) goes to `conn`, or to the route when 0.
    PresenceRead {
        conn: ConnectionId,
        tag: u64,
        channel: &'a str,
    },
}

/// A guest's answer whose every command header passed [`parse_commands`].
#[derive(Debug, Clone, Copy)]
pub struct CommandList<'a> {
    headers: &'a [[u8; N]],
    data: &'a [u8],
    set_attachments: usize,
}

/// Check a guest's answer (`commands` header bytes, `data` buffer) against
/// the ABI, in the order the crate doc lists the rules; the first violation
/// is the error.
pub fn parse_commands<'a>(commands: &'a [u8], data: &'a [u8]) -> Result<CommandList<'a>, AbiError> {
    let headers = split_headers::<COMMAND_HEADER_BYTES>(commands)?;
    let mut set_attachments = 0;
    for (index, h) in headers.iter().enumerate() {
        if check(index, &CommandHeader::decode(h), data)? == CommandKind::SetAttachment {
            set_attachments += 1;
        }
    }
    Ok(CommandList {
        headers,
        data,
        set_attachments,
    })
}

/// Every rule for one command; its kind when it passes.
fn check(index: usize, c: &CommandHeader, data: &[u8]) -> Result<CommandKind, AbiError> {
    // Byte 9 is a forward's direction, and reserved (0) for the rest.
    // an rt-publish-verdict's decision.
    let reserved_ok = match CommandKind::from_byte(c.kind) {
        Some(CommandKind::ForwardText | CommandKind::ForwardBinary) => {
            Direction::from_byte(c.reserved).is_some()
        }
        Some(CommandKind::RtPublishVerdict) => c.reserved <= RT_DROP,
        Some(CommandKind::RtSubscribeVerdict) => c.reserved <= RT_AUTHORISE,
        _ => c.reserved == 0,
    };
    if !reserved_ok {
        return Err(AbiError::ReservedByteSet {
            index,
            value: c.reserved,
        });
    }
    let out_of_bounds = |field, offset, len| AbiError::RangeOutOfBounds {
        index,
        field,
        offset,
        len,
        data_len: data.len(),
    };
    let payload =
        range(data, c.offset, c.len).ok_or(out_of_bounds(Field::Payload, c.offset, c.len))?;
    let topic = range(data, c.topic_offset, c.topic_len).ok_or(out_of_bounds(
        Field::Topic,
        c.topic_offset,
        c.topic_len,
    ))?;
    let kind = CommandKind::from_byte(c.kind).ok_or(AbiError::UnknownKind {
        index,
        kind: c.kind,
    })?;
    match kind {
        CommandKind::SendText
        | CommandKind::PublishText
        | CommandKind::ForwardText
        | CommandKind::RtSubscribeVerdict
            if !is_utf8(payload) =>
        {
            return Err(AbiError::TextNotUtf8 { index })
        }
        CommandKind::Close if !is_utf8(payload) => return Err(AbiError::ReasonNotUtf8 { index }),
        _ => {}
    }
    let meta_ok = match kind {
        CommandKind::HttpRequest => topic.len() >= 8 && is_utf8(&topic[8..]),
        CommandKind::SetTimer => topic.len() == 16,
        CommandKind::CancelTimer => topic.len() == 8,
        CommandKind::KvSet => topic.len() > 8,
        CommandKind::KvDelete => !topic.is_empty(),
        CommandKind::RtSubscribeVerdict | CommandKind::RtPublishVerdict => topic.len() == 8,
        CommandKind::HistoryRead => crate::io::split_history_read(topic).is_some(),
        CommandKind::PresenceRead => crate::io::split_presence_read(topic).is_some(),
        _ => true,
    };
    if !meta_ok {
        return Err(AbiError::MetaMalformed { index });
    }
    if has_topic(kind) {
        if topic.is_empty() {
            return Err(AbiError::EmptyTopic { index });
        }
        if !is_utf8(topic) {
            return Err(AbiError::TopicNotUtf8 { index });
        }
    }
    Ok(kind)
}

fn has_topic(kind: CommandKind) -> bool {
    matches!(
        kind,
        CommandKind::PublishText
            | CommandKind::PublishBinary
            | CommandKind::Subscribe
            | CommandKind::Unsubscribe
    )
}

/// Close codes an endpoint may send (RFC 6455 §7.4.1 and §7.4.2: 1004–1006
/// and 1015 are reserved for reports, not for the wire).
pub fn sendable_close_code(code: u16) -> bool {
    matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999)
}

/// `reason` cut to at most [`MAX_CLOSE_REASON_BYTES`], at a character
/// boundary (the host cuts its own close reasons with it too).
pub fn short_reason(reason: &str) -> &str {
    &reason[..reason.floor_char_boundary(MAX_CLOSE_REASON_BYTES)]
}

impl<'a> CommandList<'a> {
    /// Number of commands, set-attachment included.
    pub fn len(&self) -> usize {
        self.headers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.headers.is_empty()
    }

    /// How many of the commands are set-attachment (the host applies those
    /// itself; it skips the walk when there are none).
    pub fn set_attachments(&self) -> usize {
        self.set_attachments
    }

    /// The commands, in the order the guest issued them.
    pub fn iter(&self) -> CommandIter<'a> {
        CommandIter {
            headers: self.headers.iter(),
            data: self.data,
        }
    }
}

impl<'a> IntoIterator for &CommandList<'a> {
    type Item = Command<'a>;
    type IntoIter = CommandIter<'a>;
    fn into_iter(self) -> CommandIter<'a> {
        self.iter()
    }
}

mod iter;
pub use iter::CommandIter;

#[cfg(feature = "alloc")]
mod buf;
#[cfg(feature = "alloc")]
pub use buf::CommandBuf;

#[cfg(test)]
mod tests {
    extern crate std;
    use std::string::ToString;
    use std::vec::Vec;

    use proptest::prelude::*;

    use super::*;

    fn cmd(
        kind: u8,
        conn: u64,
        code: u16,
        topic: (u32, u32),
        payload: (u32, u32),
    ) -> CommandHeader {
        CommandHeader::new(conn, kind, code, topic, payload)
    }

    fn headers(cmds: &[CommandHeader]) -> Vec<u8> {
        cmds.iter().flat_map(|c| c.encode()).collect()
    }

    fn parse(cmds: &[CommandHeader], data: &[u8]) -> Result<Vec<Command<'static>>, AbiError> {
        let h = headers(cmds);
        // Leak so the commands can outlive this helper (tests only).
        let (h, d) = (h.leak(), data.to_vec().leak());
        parse_commands(h, d).map(|l| l.iter().collect())
    }

    const SEND_TEXT: u8 = CommandKind::SendText as u8;
    const SEND_BINARY: u8 = CommandKind::SendBinary as u8;
    const CLOSE: u8 = CommandKind::Close as u8;
    const PUBLISH_TEXT: u8 = CommandKind::PublishText as u8;
    const PUBLISH_BINARY: u8 = CommandKind::PublishBinary as u8;
    const SUBSCRIBE: u8 = CommandKind::Subscribe as u8;
    const UNSUBSCRIBE: u8 = CommandKind::Unsubscribe as u8;
    const SET_ATTACHMENT: u8 = CommandKind::SetAttachment as u8;

    #[test]
    fn every_command_kind_reads_back() {
        let all = parse(
            &[
                cmd(SEND_TEXT, 1, 0, (0, 0), (0, 2)),
                cmd(SEND_BINARY, 2, 0, (0, 0), (0, 2)),
                cmd(CLOSE, 3, 4000, (0, 0), (0, 2)),
                cmd(PUBLISH_TEXT, 0, 0, (2, 1), (0, 2)),
                cmd(PUBLISH_BINARY, 9, 0, (2, 1), (0, 2)),
                cmd(SUBSCRIBE, 4, 0, (2, 1), (0, 0)),
                cmd(UNSUBSCRIBE, 5, 0, (2, 1), (0, 0)),
                cmd(SET_ATTACHMENT, 6, 0, (0, 0), (1, 2)),
            ],
            b"hit",
        )
        .unwrap();
        assert_eq!(
            all,
            [
                Command::Send {
                    conn: 1,
                    text: true,
                    payload: b"hi"
                },
                Command::Send {
                    conn: 2,
                    text: false,
                    payload: b"hi"
                },
                Command::Close {
                    conn: 3,
                    code: 4000,
                    reason: "hi"
                },
                // Publish conn 0 means: exclude no one.
                Command::Publish {
                    topic: "t",
                    text: true,
                    payload: b"hi",
                    exclude: None
                },
                Command::Publish {
                    topic: "t",
                    text: false,
                    payload: b"hi",
                    exclude: Some(9)
                },
                Command::Subscribe {
                    conn: 4,
                    topic: "t"
                },
                Command::Unsubscribe {
                    conn: 5,
                    topic: "t"
                },
                Command::SetAttachment {
                    conn: 6,
                    attachment: b"it"
                },
            ]
        );
        let h = headers(&[
            cmd(SET_ATTACHMENT, 6, 0, (0, 0), (1, 2)),
            cmd(SEND_BINARY, 2, 0, (0, 0), (0, 2)),
        ]);
        let list = parse_commands(&h, b"hit").unwrap();
        assert_eq!((list.len(), list.set_attachments()), (2, 1));
        assert_eq!(list.iter().len(), 2);
    }

    #[test]
    fn ragged_headers_are_not_whole() {
        let mut h = headers(&[cmd(SEND_BINARY, 1, 0, (0, 0), (0, 0))]);
        h.push(0);
        let e = parse_commands(&h, &[]).unwrap_err();
        assert_eq!(
            e,
            AbiError::HeadersNotWhole {
                bytes: 29,
                header_bytes: 28
            }
        );
        assert!(e.to_string().contains("multiple of 28"), "{e}");
    }

    #[test]
    fn a_set_reserved_byte_is_refused() {
        let mut c = cmd(SEND_BINARY, 1, 0, (0, 0), (0, 0));
        c.reserved = 1;
        assert_eq!(
            parse(&[c], &[]),
            Err(AbiError::ReservedByteSet { index: 0, value: 1 })
        );
    }

    #[test]
    fn out_of_range_payloads_and_topics_are_refused() {
        assert_eq!(
            parse(&[cmd(SEND_BINARY, 1, 0, (0, 0), (2, 5))], &[0; 4]),
            Err(AbiError::RangeOutOfBounds {
                index: 0,
                field: Field::Payload,
                offset: 2,
                len: 5,
                data_len: 4
            })
        );
        // Checked for every kind, even one that has no topic.
        let e = parse(&[cmd(SEND_BINARY, 1, 0, (3, 2), (0, 0))], &[0; 4]).unwrap_err();
        assert!(matches!(
            e,
            AbiError::RangeOutOfBounds {
                field: Field::Topic,
                ..
            }
        ));
        assert!(e.to_string().contains("topic range 3+2"), "{e}");
        // Regression: offset + len used to be able to wrap around.
        assert!(matches!(
            parse(
                &[cmd(SEND_BINARY, 1, 0, (0, 0), (u32::MAX, u32::MAX))],
                &[0; 4]
            ),
            Err(AbiError::RangeOutOfBounds { .. })
        ));
    }

    #[test]
    fn unknown_kinds_are_refused() {
        let e = parse(&[cmd(255, 1, 0, (0, 0), (0, 0))], &[]).unwrap_err();
        assert_eq!(
            e,
            AbiError::UnknownKind {
                index: 0,
                kind: 255
            }
        );
        assert!(e.to_string().contains("unknown kind 255"), "{e}");
    }

    /// A forward's byte 9 is its direction (0 or 1, nothing else), and a
    /// forwarded text must be UTF-8 like any text the host sends.
    #[test]
    fn forwards_carry_their_direction() {
        let forward = |kind: CommandKind, direction: u8, payload| {
            let mut c = cmd(kind as u8, 7, 0, (0, 0), payload);
            c.reserved = direction;
            c
        };
        let got = parse(
            &[
                forward(CommandKind::ForwardText, 0, (0, 2)),
                forward(CommandKind::ForwardBinary, 1, (2, 1)),
            ],
            b"hi\xff",
        )
        .unwrap();
        assert_eq!(
            got,
            [
                Command::Forward {
                    conn: 7,
                    direction: Direction::ToUpstream,
                    text: true,
                    payload: b"hi"
                },
                Command::Forward {
                    conn: 7,
                    direction: Direction::ToClient,
                    text: false,
                    payload: b"\xff"
                },
            ]
        );
        assert_eq!(
            parse(&[forward(CommandKind::ForwardText, 2, (0, 0))], b""),
            Err(AbiError::ReservedByteSet { index: 0, value: 2 })
        );
        assert_eq!(
            parse(&[forward(CommandKind::ForwardText, 1, (0, 1))], b"\xff"),
            Err(AbiError::TextNotUtf8 { index: 0 })
        );
    }

    /// The real-time verdicts carry their call id as 8 bytes of meta; an
    /// rt-publish-verdict's byte 9 is pass 0, replace 1 or drop 2.
    #[test]
    fn rt_verdicts_read_back_and_their_meta_is_checked() {
        let verdict = |kind: CommandKind, decision: u8, code: u16, meta, payload| {
            let mut c = cmd(kind as u8, 5, code, meta, payload);
            c.reserved = decision;
            c
        };
        let mut data = Vec::new();
        data.extend_from_slice(&9u64.to_le_bytes());
        data.extend_from_slice(b"{}");
        let got = parse(
            &[
                verdict(CommandKind::RtSubscribeVerdict, 0, 0, (0, 8), (0, 0)),
                verdict(CommandKind::RtSubscribeVerdict, 0, 4403, (0, 8), (0, 0)),
                verdict(CommandKind::RtPublishVerdict, 0, 0, (0, 8), (0, 0)),
                verdict(CommandKind::RtPublishVerdict, 1, 0, (0, 8), (8, 2)),
                verdict(CommandKind::RtPublishVerdict, 2, 103, (0, 8), (0, 0)),
            ],
            &data,
        )
        .unwrap();
        assert_eq!(
            got,
            [
                Command::RtSubscribeVerdict {
                    conn: 5,
                    call: 9,
                    code: 0,
                    authorise: false,
                    payload: ""
                },
                Command::RtSubscribeVerdict {
                    conn: 5,
                    call: 9,
                    code: 4403,
                    authorise: false,
                    payload: ""
                },
                Command::RtPublishVerdict {
                    conn: 5,
                    call: 9,
                    verdict: RtVerdict::Pass
                },
                Command::RtPublishVerdict {
                    conn: 5,
                    call: 9,
                    verdict: RtVerdict::Replace(b"{}")
                },
                Command::RtPublishVerdict {
                    conn: 5,
                    call: 9,
                    verdict: RtVerdict::Drop(103)
                },
            ]
        );
        assert_eq!(
            parse(
                &[verdict(CommandKind::RtPublishVerdict, 3, 0, (0, 8), (0, 0))],
                &data
            ),
            Err(AbiError::ReservedByteSet { index: 0, value: 3 })
        );
        assert_eq!(
            parse(
                &[verdict(
                    CommandKind::RtSubscribeVerdict,
                    2,
                    0,
                    (0, 8),
                    (0, 0)
                )],
                &data
            ),
            Err(AbiError::ReservedByteSet { index: 0, value: 2 })
        );
        assert_eq!(
            parse(
                &[verdict(
                    CommandKind::RtSubscribeVerdict,
                    0,
                    0,
                    (0, 7),
                    (0, 0)
                )],
                &data
            ),
            Err(AbiError::MetaMalformed { index: 0 })
        );
    }

    #[test]
    fn io_commands_read_back_and_their_meta_is_checked() {
        let mut data = Vec::new();
        crate::io::encode_request_meta(&mut data, 5, "GET", "http://a:1/", [("x", "y")]);
        let head_len = data.len() as u32;
        data.extend_from_slice(&9u64.to_le_bytes());
        data.extend_from_slice(&250u64.to_le_bytes());
        data.extend_from_slice(b"key");
        let got = parse(
            &[
                cmd(CommandKind::HttpRequest as u8, 3, 0, (0, head_len), (0, 0)),
                cmd(CommandKind::SetTimer as u8, 0, 0, (head_len, 16), (0, 0)),
                cmd(CommandKind::CancelTimer as u8, 3, 0, (head_len, 8), (0, 0)),
                cmd(CommandKind::KvSet as u8, 0, 0, (head_len + 8, 11), (0, 3)),
                cmd(
                    CommandKind::KvDelete as u8,
                    0,
                    0,
                    (head_len + 16, 3),
                    (0, 0),
                ),
            ],
            &data,
        )
        .unwrap();
        assert_eq!(
            got,
            [
                Command::HttpRequest {
                    conn: 3,
                    tag: 5,
                    head: "GET http://a:1/\nx: y",
                    body: b""
                },
                Command::SetTimer {
                    conn: 0,
                    tag: 9,
                    delay_ms: 250
                },
                Command::CancelTimer { conn: 3, tag: 9 },
                Command::KvSet {
                    key: b"key",
                    value: &data[0..3],
                    ttl_ms: 250
                },
                Command::KvDelete { key: b"key" },
            ]
        );
        for (kind, meta) in [
            (CommandKind::HttpRequest, (0, 7)),
            (CommandKind::SetTimer, (0, 8)),
            (CommandKind::CancelTimer, (0, 16)),
            (CommandKind::KvSet, (0, 8)),
            (CommandKind::KvDelete, (0, 0)),
        ] {
            assert_eq!(
                parse(&[cmd(kind as u8, 0, 0, meta, (0, 0))], &data),
                Err(AbiError::MetaMalformed { index: 0 }),
                "{kind:?}"
            );
        }
    }

    /// history-read and presence-read (issue 37): their meta reads back;
    /// one cut short, with no channel, a reverse byte past 1 or a channel
    /// that is not UTF-8 breaks the answer.
    #[test]
    fn realtime_reads_read_back_and_malformed_ones_are_refused() {
        let mut data = Vec::new();
        crate::io::encode_history_read(&mut data, 4, 20, true, "chat:room");
        let history_len = data.len() as u32;
        crate::io::encode_presence_read(&mut data, 5, "chat:room");
        let presence_len = data.len() as u32 - history_len;
        let got = parse(
            &[
                cmd(
                    CommandKind::HistoryRead as u8,
                    7,
                    0,
                    (0, history_len),
                    (0, 0),
                ),
                cmd(
                    CommandKind::PresenceRead as u8,
                    0,
                    0,
                    (history_len, presence_len),
                    (0, 0),
                ),
            ],
            &data,
        )
        .unwrap();
        assert_eq!(
            got,
            [
                Command::HistoryRead {
                    conn: 7,
                    tag: 4,
                    limit: 20,
                    reverse: true,
                    channel: "chat:room"
                },
                Command::PresenceRead {
                    conn: 0,
                    tag: 5,
                    channel: "chat:room"
                },
            ]
        );
        let mut bad_reverse = data.clone();
        bad_reverse[12] = 2;
        let mut bad_utf8 = data.clone();
        bad_utf8[13] = 0xff;
        for (kind, meta, data) in [
            (CommandKind::HistoryRead, (0, 13), &data),
            (CommandKind::HistoryRead, (0, 10), &data),
            (CommandKind::HistoryRead, (0, history_len), &bad_reverse),
            (CommandKind::HistoryRead, (0, history_len), &bad_utf8),
            (CommandKind::PresenceRead, (history_len, 8), &data),
            (CommandKind::PresenceRead, (history_len, 4), &data),
        ] {
            assert_eq!(
                parse(&[cmd(kind as u8, 0, 0, meta, (0, 0))], data),
                Err(AbiError::MetaMalformed { index: 0 }),
                "{kind:?} {meta:?}"
            );
        }
    }

    #[test]
    fn text_reasons_and_topics_must_be_utf8() {
        let bad = [0xff, 0xfe];
        for kind in [SEND_TEXT, PUBLISH_TEXT] {
            assert_eq!(
                parse(&[cmd(kind, 1, 0, (0, 1), (0, 2))], &bad),
                Err(AbiError::TextNotUtf8 { index: 0 }),
                "kind {kind}"
            );
        }
        assert_eq!(
            parse(&[cmd(CLOSE, 1, 1000, (0, 0), (0, 2))], &bad),
            Err(AbiError::ReasonNotUtf8 { index: 0 })
        );
        for kind in [PUBLISH_BINARY, SUBSCRIBE, UNSUBSCRIBE] {
            assert_eq!(
                parse(&[cmd(kind, 1, 0, (0, 2), (0, 0))], &bad),
                Err(AbiError::TopicNotUtf8 { index: 0 }),
                "kind {kind}"
            );
        }
        // Binary payloads and attachments are bytes: no check.
        assert!(parse(&[cmd(SEND_BINARY, 1, 0, (0, 0), (0, 2))], &bad).is_ok());
        assert!(parse(&[cmd(SET_ATTACHMENT, 1, 0, (0, 0), (0, 2))], &bad).is_ok());
    }

    #[test]
    fn topics_must_not_be_empty() {
        for kind in [PUBLISH_TEXT, PUBLISH_BINARY, SUBSCRIBE, UNSUBSCRIBE] {
            assert_eq!(
                parse(&[cmd(kind, 1, 0, (0, 0), (0, 0))], &[]),
                Err(AbiError::EmptyTopic { index: 0 }),
                "kind {kind}"
            );
        }
    }

    #[test]
    fn the_first_violation_is_reported() {
        let ok = cmd(SEND_BINARY, 1, 0, (0, 0), (0, 1));
        let mut both = cmd(9, 1, 0, (0, 0), (5, 1));
        both.reserved = 3;
        assert_eq!(
            parse(&[ok, ok, both], b"x"),
            Err(AbiError::ReservedByteSet { index: 2, value: 3 })
        );
        both.reserved = 0;
        // Ranges come before the kind.
        assert!(matches!(
            parse(&[ok, both], b"x"),
            Err(AbiError::RangeOutOfBounds { index: 1, .. })
        ));
    }

    #[test]
    fn close_code_and_reason_are_repaired() {
        // RFC 6455 §7.4.1: 1005 must not be sent; §5.5: reason ≤ 123 bytes.
        let reason = "é".repeat(100); // 200 bytes of 2-byte characters
        let all = parse(
            &[
                cmd(CLOSE, 7, 1005, (0, 0), (0, reason.len() as u32)),
                cmd(CLOSE, 8, 3000, (0, 0), (0, 124)),
            ],
            reason.as_bytes(),
        )
        .unwrap();
        assert_eq!(
            all[0],
            Command::Close {
                conn: 7,
                code: 1011,
                reason: &reason[..122]
            }
        );
        assert!(matches!(all[1], Command::Close { code: 3000, reason, .. } if reason.len() == 122));
        for (code, ok) in [
            (999, false),
            (1000, true),
            (1004, false),
            (1006, false),
            (1007, true),
            (1014, true),
            (1015, false),
            (2999, false),
            (3000, true),
            (4999, true),
            (5000, false),
        ] {
            assert_eq!(sendable_close_code(code), ok, "{code}");
        }
    }

    #[cfg(feature = "alloc")]
    #[test]
    fn an_owned_answer_walks_without_a_second_parse_and_replaces_in_place() {
        let h = headers(&[
            cmd(SEND_TEXT, 1, 0, (0, 0), (0, 2)),
            cmd(SET_ATTACHMENT, 9, 0, (0, 0), (0, 2)),
        ]);
        let mut buf = CommandBuf::parse(h, b"ok".to_vec()).unwrap();
        assert_eq!((buf.list().len(), buf.list().set_attachments()), (2, 1));
        buf.replace_with_close(1, 1011);
        assert_eq!(buf.list().set_attachments(), 0);
        let all: Vec<_> = buf.list().iter().collect();
        assert_eq!(
            all[1],
            Command::Close {
                conn: 9,
                code: 1011,
                reason: ""
            }
        );
        assert!(CommandBuf::new().list().is_empty());
        assert_eq!(
            CommandBuf::parse(std::vec![0; 3], Vec::new()).unwrap_err(),
            AbiError::HeadersNotWhole {
                bytes: 3,
                header_bytes: 28
            }
        );
    }

    proptest! {
        /// Whatever a guest sends, the parse either refuses it or yields
        /// commands that keep the promises of `Command`'s docs.
        #[test]
        fn arbitrary_answers_never_panic(
            raw in proptest::collection::vec(
                (any::<u64>(), 0u8..10, 0u8..2, any::<u16>(), 0u32..40, 0u32..40, 0u32..40, 0u32..40),
                0..6,
            ),
            data in proptest::collection::vec(any::<u8>(), 0..40),
        ) {
            let cmds: Vec<_> = raw
                .into_iter()
                .map(|(conn, kind, reserved, code, to, tl, o, l)| CommandHeader {
                    conn, kind, reserved, code,
                    topic_offset: to, topic_len: tl, offset: o, len: l,
                })
                .collect();
            let h = headers(&cmds);
            if let Ok(list) = parse_commands(&h, &data) {
                prop_assert_eq!(list.iter().count(), cmds.len());
                for c in list.iter() {
                    match c {
                        Command::Send { text: true, payload, .. }
                        | Command::Publish { text: true, payload, .. } => {
                            prop_assert!(core::str::from_utf8(payload).is_ok());
                        }
                        Command::Close { code, reason, .. } => {
                            prop_assert!(sendable_close_code(code));
                            prop_assert!(reason.len() <= MAX_CLOSE_REASON_BYTES);
                        }
                        _ => {}
                    }
                    if let Command::Publish { topic, .. }
                    | Command::Subscribe { topic, .. }
                    | Command::Unsubscribe { topic, .. } = c
                    {
                        prop_assert!(!topic.is_empty());
                    }
                }
            }
        }
    }
}
