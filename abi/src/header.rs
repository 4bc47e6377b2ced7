//! One header at a time: sizes, kind numbers, and pack/unpack between the
//! wire bytes and the field structs (layout tables in the crate doc).
//! Unpacking is total: any bytes give a struct, checks come in the parsers.

use crate::error::AbiError;
use crate::ConnectionId;

/// Bytes of one packed event header.
pub const EVENT_HEADER_BYTES: usize = 20;

/// Bytes of one packed command header.
pub const COMMAND_HEADER_BYTES: usize = 28;

/// What happened on a connection (`event-kind` in the WIT; the value is the
/// case index, byte 8 of an event header).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum EventKind {
    Open = 0,
    Text = 1,
    Binary = 2,
    Close = 3,
    /// 0.4.0: an `http-request`'s answer (bytes: [`crate::io`]).
    HttpResponse = 4,
    /// 0.4.0: an `http-request` that got no answer (code: [`crate::io::HttpErrorReason`]).
    HttpError = 5,
    /// 0.4.0: a `set-timer` came due (bytes: its tag).
    Timer = 6,
    /// 0.4.0, proxy filters: a text message on its way through a proxy
    /// route; byte 9 is its [`Direction`].
    ProxyText = 7,
    /// 0.4.0, proxy filters: a binary message on its way through a proxy
    /// route; byte 9 is its [`Direction`].
    ProxyBinary = 8,
    /// 0.4.0, after 0.4.0's first release: a `kv-set` or `kv-delete` the
    /// host refused (code: [`crate::io::KvErrorReason`], bytes: the key).
    /// Packed layout only, like the proxy kinds: a guest that does not know
    /// it skips it.
    KvError = 9,
    /// The answer to a `history-read` (code: 0 or a
    /// [`crate::io::ReadErrorReason`], bytes: [`crate::io`]). Packed layout
    /// only, like kv-error.
    History = 10,
    /// The answer to a `presence-read` (code: 0 or a
    /// [`crate::io::ReadErrorReason`], bytes: [`crate::io`]). Packed layout
    /// only.
    Presence = 11,
    /// Packed layout only, real-time namespaces with a `guest`: a client
    /// asks to subscribe (bytes: [`crate::realtime`]); the guest answers
    /// with [`CommandKind::RtSubscribeVerdict`].
    RtSubscribe = 12,
    /// Packed layout only: a client publishes into a channel of the
    /// namespace (bytes: [`crate::realtime`], the publication last); the
    /// guest answers with [`CommandKind::RtPublishVerdict`].
    RtPublish = 13,
    /// Packed layout only, a Pusher app's guest: a connection of the app
    /// opens (bytes: [`crate::pusher`]); the guest answers with
    /// [`CommandKind::RtSubscribeVerdict`].
    PusherConnect = 14,
    /// Packed layout only: a client of the app subscribes (bytes:
    /// [`crate::pusher`]); answered with [`CommandKind::RtSubscribeVerdict`].
    PusherSubscribe = 15,
    /// Packed layout only: a client of the app sends a client event (bytes:
    /// [`crate::pusher`]); answered with [`CommandKind::RtPublishVerdict`].
    PusherClientEvent = 16,
}

/// Which way a proxied message travels: byte 9 of a proxy event and of a
/// forward command (the reserved byte of every other kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Direction {
    /// From the client toward the upstream server.
    ToUpstream = 0,
    /// From the upstream server toward the client.
    ToClient = 1,
}

impl Direction {
    /// The direction a header byte names, None for any other value.
    pub const fn from_byte(b: u8) -> Option<Self> {
        match b {
            0 => Some(Direction::ToUpstream),
            1 => Some(Direction::ToClient),
            _ => None,
        }
    }
}

impl EventKind {
    /// The kind a header byte names, None for a number this crate does not
    /// know (a newer host).
    pub const fn from_byte(b: u8) -> Option<Self> {
        Some(match b {
            0 => EventKind::Open,
            1 => EventKind::Text,
            2 => EventKind::Binary,
            3 => EventKind::Close,
            4 => EventKind::HttpResponse,
            5 => EventKind::HttpError,
            6 => EventKind::Timer,
            7 => EventKind::ProxyText,
            8 => EventKind::ProxyBinary,
            9 => EventKind::KvError,
            10 => EventKind::History,
            11 => EventKind::Presence,
            12 => EventKind::RtSubscribe,
            13 => EventKind::RtPublish,
            14 => EventKind::PusherConnect,
            15 => EventKind::PusherSubscribe,
            16 => EventKind::PusherClientEvent,
            _ => return None,
        })
    }
}

/// What a guest asks for (`command-kind` in the WIT; the value is the case
/// index, byte 8 of a command header).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum CommandKind {
    SendText = 0,
    SendBinary = 1,
    Close = 2,
    PublishText = 3,
    PublishBinary = 4,
    Subscribe = 5,
    Unsubscribe = 6,
    SetAttachment = 7,
    /// 0.4.0: an outbound HTTP request (meta: tag and head, payload: body).
    HttpRequest = 8,
    /// 0.4.0: a timer (meta: tag and delay).
    SetTimer = 9,
    /// 0.4.0: cancel a timer (meta: tag).
    CancelTimer = 10,
    /// 0.4.0: store a value in the route's key-value store (meta: ttl and
    /// key, payload: value).
    KvSet = 11,
    /// 0.4.0: remove a key from the route's key-value store (meta: key).
    KvDelete = 12,
    /// 0.4.0, proxy filters: pass a text message on (the one received or
    /// a replacement); byte 9 is its [`Direction`].
    ForwardText = 13,
    /// 0.4.0, proxy filters: pass a binary message on; byte 9 is its
    /// [`Direction`].
    ForwardBinary = 14,
    /// Guest routes with `realtime = true`: read a channel's history
    /// (meta: tag, limit, reverse, channel). Packed layout only.
    HistoryRead = 15,
    /// Guest routes with `realtime = true`: read a channel's presence
    /// (meta: tag, channel). Packed layout only.
    PresenceRead = 16,
    /// Packed layout only: the answer to an rt-subscribe (meta: the call
    /// id, 8 bytes; code: 0 allow, else the Centrifugo error code the
    /// client gets).
    RtSubscribeVerdict = 17,
    /// Packed layout only: the answer to an rt-publish (meta: the call id;
    /// byte 9: pass 0, replace 1 (payload: the new data), drop 2 (code:
    /// the client's error code, 0 for 103)).
    RtPublishVerdict = 18,
}

/// The last command kind of weir:gateway 0.3.0: a guest built for 0.3.0
/// may not use the kinds after it.
pub const LAST_V3_COMMAND_KIND: u8 = CommandKind::SetAttachment as u8;

impl CommandKind {
    /// The kind a header byte names, None for an unknown number.
    pub const fn from_byte(b: u8) -> Option<Self> {
        Some(match b {
            0 => CommandKind::SendText,
            1 => CommandKind::SendBinary,
            2 => CommandKind::Close,
            3 => CommandKind::PublishText,
            4 => CommandKind::PublishBinary,
            5 => CommandKind::Subscribe,
            6 => CommandKind::Unsubscribe,
            7 => CommandKind::SetAttachment,
            8 => CommandKind::HttpRequest,
            9 => CommandKind::SetTimer,
            10 => CommandKind::CancelTimer,
            11 => CommandKind::KvSet,
            12 => CommandKind::KvDelete,
            13 => CommandKind::ForwardText,
            14 => CommandKind::ForwardBinary,
            15 => CommandKind::HistoryRead,
            16 => CommandKind::PresenceRead,
            17 => CommandKind::RtSubscribeVerdict,
            18 => CommandKind::RtPublishVerdict,
            _ => return None,
        })
    }
}

/// One event header, unpacked. `kind` stays a byte so that unknown kinds
/// survive a round trip.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventHeader {
    pub conn: ConnectionId,
    pub kind: u8,
    pub reserved: u8,
    pub code: u16,
    pub offset: u32,
    pub len: u32,
}

impl EventHeader {
    /// The wire bytes of this header.
    pub fn encode(&self) -> [u8; EVENT_HEADER_BYTES] {
        let mut h = [0u8; EVENT_HEADER_BYTES];
        h[0..8].copy_from_slice(&self.conn.to_le_bytes());
        h[8] = self.kind;
        h[9] = self.reserved;
        h[10..12].copy_from_slice(&self.code.to_le_bytes());
        h[12..16].copy_from_slice(&self.offset.to_le_bytes());
        h[16..20].copy_from_slice(&self.len.to_le_bytes());
        h
    }

    /// The fields of one header's wire bytes.
    pub fn decode(h: &[u8; EVENT_HEADER_BYTES]) -> Self {
        EventHeader {
            conn: u64_at(h, 0),
            kind: h[8],
            reserved: h[9],
            code: u16_at(h, 10),
            offset: u32_at(h, 12),
            len: u32_at(h, 16),
        }
    }
}

/// One command header, unpacked; `kind` stays a byte (an unknown one is
/// refused by [`parse_commands`](crate::parse_commands), not here).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CommandHeader {
    pub conn: ConnectionId,
    pub kind: u8,
    pub reserved: u8,
    pub code: u16,
    pub topic_offset: u32,
    pub topic_len: u32,
    pub offset: u32,
    pub len: u32,
}

impl CommandHeader {
    /// A header with the reserved byte 0; `topic` and `payload` are
    /// (offset, len) ranges of the answer's data buffer.
    pub fn new(
        conn: ConnectionId,
        kind: u8,
        code: u16,
        topic: (u32, u32),
        payload: (u32, u32),
    ) -> CommandHeader {
        CommandHeader {
            conn,
            kind,
            reserved: 0,
            code,
            topic_offset: topic.0,
            topic_len: topic.1,
            offset: payload.0,
            len: payload.1,
        }
    }

    /// The wire bytes of this header.
    pub fn encode(&self) -> [u8; COMMAND_HEADER_BYTES] {
        let mut h = [0u8; COMMAND_HEADER_BYTES];
        h[0..8].copy_from_slice(&self.conn.to_le_bytes());
        h[8] = self.kind;
        h[9] = self.reserved;
        h[10..12].copy_from_slice(&self.code.to_le_bytes());
        h[12..16].copy_from_slice(&self.topic_offset.to_le_bytes());
        h[16..20].copy_from_slice(&self.topic_len.to_le_bytes());
        h[20..24].copy_from_slice(&self.offset.to_le_bytes());
        h[24..28].copy_from_slice(&self.len.to_le_bytes());
        h
    }

    /// The fields of one header's wire bytes.
    pub fn decode(h: &[u8; COMMAND_HEADER_BYTES]) -> Self {
        CommandHeader {
            conn: u64_at(h, 0),
            kind: h[8],
            reserved: h[9],
            code: u16_at(h, 10),
            topic_offset: u32_at(h, 12),
            topic_len: u32_at(h, 16),
            offset: u32_at(h, 20),
            len: u32_at(h, 24),
        }
    }
}

/// The connection id of one event header, without unpacking the rest (the
/// host lists a batch's connections this way when the batch faults).
pub fn event_conn(h: &[u8; EVENT_HEADER_BYTES]) -> ConnectionId {
    u64_at(h, 0)
}

/// A header buffer as whole headers, or [`AbiError::HeadersNotWhole`].
pub fn split_headers<const N: usize>(bytes: &[u8]) -> Result<&[[u8; N]], AbiError> {
    match bytes.as_chunks::<N>() {
        (headers, []) => Ok(headers),
        _ => Err(AbiError::HeadersNotWhole {
            bytes: bytes.len(),
            header_bytes: N,
        }),
    }
}

/// `data[offset .. offset + len]`, None when it is not inside `data` (or
/// the end overflows).
pub(crate) fn range(data: &[u8], offset: u32, len: u32) -> Option<&[u8]> {
    let start = offset as usize;
    data.get(start..start.checked_add(len as usize)?)
}

/// Whether `bytes` is UTF-8 (simdutf8: the host checks every text message
/// a guest sends, so this is on the data path).
pub(crate) fn is_utf8(bytes: &[u8]) -> bool {
    simdutf8::basic::from_utf8(bytes).is_ok()
}

/// `bytes` as text, for a range [`is_utf8`] accepted when its list was
/// parsed.
///
/// # Safety
///
/// `bytes` must be valid UTF-8. The lists that call this hold their header
/// and data buffers immutably (or privately, [`CommandBuf`](crate::CommandBuf))
/// from the validating parse on, so the range checked then is the range
/// read now.
pub(crate) unsafe fn checked_str(bytes: &[u8]) -> &str {
    debug_assert!(core::str::from_utf8(bytes).is_ok());
    // SAFETY: the caller's contract above.
    unsafe { core::str::from_utf8_unchecked(bytes) }
}

fn u16_at<const N: usize>(h: &[u8; N], at: usize) -> u16 {
    u16::from_le_bytes([h[at], h[at + 1]])
}

fn u32_at<const N: usize>(h: &[u8; N], at: usize) -> u32 {
    u32::from_le_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]])
}

fn u64_at<const N: usize>(h: &[u8; N], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&h[at..at + 8]);
    u64::from_le_bytes(x)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn event_header_layout_is_the_documented_one() {
        let h = EventHeader {
            conn: 0x0102_0304_0506_0708,
            kind: 1,
            reserved: 0,
            code: 0x0a0b,
            offset: 7,
            len: 2,
        };
        assert_eq!(
            h.encode(),
            [8, 7, 6, 5, 4, 3, 2, 1, 1, 0, 0x0b, 0x0a, 7, 0, 0, 0, 2, 0, 0, 0]
        );
        assert_eq!(event_conn(&h.encode()), 0x0102_0304_0506_0708);
    }

    #[test]
    fn command_header_layout_is_the_documented_one() {
        let h = CommandHeader {
            conn: 0x11,
            kind: CommandKind::PublishText as u8,
            reserved: 9,
            code: 0x0203,
            topic_offset: 4,
            topic_len: 5,
            offset: 6,
            len: 7,
        };
        assert_eq!(
            h.encode(),
            [
                0x11, 0, 0, 0, 0, 0, 0, 0, 3, 9, 3, 2, 4, 0, 0, 0, 5, 0, 0, 0, 6, 0, 0, 0, 7, 0, 0,
                0
            ]
        );
    }

    #[test]
    fn kind_numbers_are_the_wit_case_indices() {
        let events = [
            EventKind::Open,
            EventKind::Text,
            EventKind::Binary,
            EventKind::Close,
            EventKind::HttpResponse,
            EventKind::HttpError,
            EventKind::Timer,
            EventKind::ProxyText,
            EventKind::ProxyBinary,
            EventKind::KvError,
            EventKind::History,
            EventKind::Presence,
        ];
        for (i, k) in events.into_iter().enumerate() {
            assert_eq!(k as u8, i as u8);
            assert_eq!(EventKind::from_byte(i as u8), Some(k));
        }
        assert_eq!(EventKind::from_byte(10), Some(EventKind::History));
        assert_eq!(EventKind::from_byte(12), Some(EventKind::RtSubscribe));
        assert_eq!(EventKind::from_byte(13), Some(EventKind::RtPublish));
        assert_eq!(EventKind::from_byte(14), Some(EventKind::PusherConnect));
        assert_eq!(EventKind::from_byte(15), Some(EventKind::PusherSubscribe));
        assert_eq!(EventKind::from_byte(16), Some(EventKind::PusherClientEvent));
        assert_eq!(EventKind::from_byte(17), None);
        let commands = [
            CommandKind::SendText,
            CommandKind::SendBinary,
            CommandKind::Close,
            CommandKind::PublishText,
            CommandKind::PublishBinary,
            CommandKind::Subscribe,
            CommandKind::Unsubscribe,
            CommandKind::SetAttachment,
            CommandKind::HttpRequest,
            CommandKind::SetTimer,
            CommandKind::CancelTimer,
            CommandKind::KvSet,
            CommandKind::KvDelete,
            CommandKind::ForwardText,
            CommandKind::ForwardBinary,
            CommandKind::HistoryRead,
            CommandKind::PresenceRead,
        ];
        for (i, k) in commands.into_iter().enumerate() {
            assert_eq!(k as u8, i as u8);
            assert_eq!(CommandKind::from_byte(i as u8), Some(k));
        }
        assert_eq!(CommandKind::from_byte(15), Some(CommandKind::HistoryRead));
        assert_eq!(
            CommandKind::from_byte(17),
            Some(CommandKind::RtSubscribeVerdict)
        );
        assert_eq!(
            CommandKind::from_byte(18),
            Some(CommandKind::RtPublishVerdict)
        );
        assert_eq!(CommandKind::from_byte(19), None);
    }

    #[test]
    fn ragged_header_buffers_are_not_whole() {
        assert_eq!(split_headers::<20>(&[0; 40]).map(<[_]>::len), Ok(2));
        assert_eq!(split_headers::<28>(&[]).map(<[_]>::len), Ok(0));
        assert_eq!(
            split_headers::<28>(&[0; 29]),
            Err(AbiError::HeadersNotWhole {
                bytes: 29,
                header_bytes: 28
            })
        );
    }

    #[test]
    fn ranges_that_overflow_are_outside() {
        assert_eq!(range(b"abcd", 1, 2), Some(&b"bc"[..]));
        assert_eq!(range(b"abcd", 4, 0), Some(&b""[..]));
        assert_eq!(range(b"abcd", 5, 0), None);
        assert_eq!(range(b"abcd", 2, 3), None);
        assert_eq!(range(b"abcd", u32::MAX, u32::MAX), None);
    }

    proptest! {
        #[test]
        fn event_headers_round_trip(b in any::<[u8; EVENT_HEADER_BYTES]>()) {
            prop_assert_eq!(EventHeader::decode(&b).encode(), b);
        }

        #[test]
        fn command_headers_round_trip(b in any::<[u8; COMMAND_HEADER_BYTES]>()) {
            prop_assert_eq!(CommandHeader::decode(&b).encode(), b);
        }
    }
}
