//! The guest's side of a batch: [`parse_events`] checks the host's event
//! headers and data once, and [`EventList::iter`] then yields typed
//! [`Event`]s without further checks.
//!
//! Strict where a broken host would hand out bad data (whole headers, ranges,
//! UTF-8), lenient where a newer host may add meaning: an unknown event kind
//! is skipped and the reserved byte is not looked at.

use crate::error::{AbiError, Field};
use crate::header::{
    checked_str, is_utf8, range, split_headers, Direction, EventHeader, EventKind,
};
use crate::header::{EVENT_HEADER_BYTES as N, EVENT_HEADER_BYTES};
use crate::io::{split_history, split_http_response, split_presence, split_tag};
use crate::io::{HistoryAnswer, Members};
use crate::pusher::{split_subscribe_rest, SignatureCheck};
use crate::realtime::{split_rt_request, RtRequest};

/// A pusher-subscribe's bytes: the request, the signature check, the `auth`.
fn split_pusher_subscribe(bytes: &[u8]) -> Option<(RtRequest<'_>, SignatureCheck, &str)> {
    let (req, rest) = split_rt_request(bytes)?;
    let (check, auth) = split_subscribe_rest(rest)?;
    Some((req, check, auth))
}
use crate::{ConnInfo, ConnectionId};

/// One event of a batch, borrowed from its [`EventList`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event<'a> {
    /// `conn` was upgraded on this route: its request target, route
    /// parameters and the attachment its upgrade was accepted with.
    Open {
        conn: ConnectionId,
        info: ConnInfo<'a>,
    },
    /// A complete text message.
    Text { conn: ConnectionId, text: &'a str },
    /// A complete binary message.
    Binary {
        conn: ConnectionId,
        payload: &'a [u8],
    },
    /// `conn` is gone: the peer's close code (1005 none sent, 1006 dropped)
    /// and reason.
    Close {
        conn: ConnectionId,
        code: u16,
        reason: &'a str,
    },
    /// 0.4.0: the answer to the http-request `tag` (`conn` 0: a route's
    /// request): status, head (`name: value` lines) and body.
    HttpResponse {
        conn: ConnectionId,
        tag: u64,
        status: u16,
        head: &'a str,
        body: &'a [u8],
    },
    /// 0.4.0: the http-request `tag` got no response; `reason` is an
    /// [`HttpErrorReason`](crate::HttpErrorReason) code.
    HttpError {
        conn: ConnectionId,
        tag: u64,
        reason: u16,
        message: &'a str,
    },
    /// 0.4.0: the timer `tag` of `conn` (0: the route's) came due.
    Timer { conn: ConnectionId, tag: u64 },
    /// 0.4.0: a `kv-set` or `kv-delete` of the route (`conn` 0) was
    /// refused and not applied; `reason` is a
    /// [`KvErrorReason`](crate::KvErrorReason) code.
    KvError {
        conn: ConnectionId,
        reason: u16,
        key: &'a [u8],
    },
    /// 0.4.0, a proxy route's filter: a complete message of `conn` on its
    /// way in `direction`. It goes on only if the filter forwards it.
    Proxy {
        conn: ConnectionId,
        direction: Direction,
        msg: ProxyMessage<'a>,
    },
    /// Packed only, a real-time namespace's guest: client `req.client` of
    /// connection `conn` asks to subscribe to `req.channel`.
    RtSubscribe {
        conn: ConnectionId,
        req: RtRequest<'a>,
    },
    /// Packed only: the client publishes `data` (JSON) into `req.channel`.
    RtPublish {
        conn: ConnectionId,
        req: RtRequest<'a>,
        data: &'a [u8],
    },
    /// Packed only, a Pusher app's guest: connection `conn` (socket id
    /// `req.client`) opens with request target `req.channel` and the
    /// upgrade's headers in `req.info` (`name: value` lines).
    PusherConnect {
        conn: ConnectionId,
        req: RtRequest<'a>,
    },
    /// Packed only: a client subscribes to `req.channel`, with the
    /// `channel_data` it sent in `req.info`, its `auth`, and what weir's
    /// signature check made of it.
    PusherSubscribe {
        conn: ConnectionId,
        req: RtRequest<'a>,
        check: SignatureCheck,
        auth: &'a str,
    },
    /// Packed only: a client event `req.info` (its name) with `data`
    /// (JSON) on `req.channel`.
    PusherClientEvent {
        conn: ConnectionId,
        req: RtRequest<'a>,
        data: &'a [u8],
    },
    /// The answer to the history-read `tag` of `conn` (0: the route's):
    /// the stream's position and publications, or a
    /// [`ReadErrorReason`](crate::io::ReadErrorReason) code.
    History {
        conn: ConnectionId,
        tag: u64,
        result: Result<HistoryAnswer<'a>, u16>,
    },
    /// The answer to the presence-read `tag` of `conn` (0: the route's):
    /// the channel's members, or a
    /// [`ReadErrorReason`](crate::io::ReadErrorReason) code.
    Presence {
        conn: ConnectionId,
        tag: u64,
        result: Result<Members<'a>, u16>,
    },
}

/// A proxied message's payload; a text one is UTF-8.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyMessage<'a> {
    Text(&'a str),
    Binary(&'a [u8]),
}

/// A batch whose every event header was checked by [`parse_events`].
#[derive(Debug, Clone, Copy)]
pub struct EventList<'a> {
    headers: &'a [[u8; N]],
    data: &'a [u8],
}

/// Check a batch (`events` header bytes, `data` buffer) against the ABI:
/// whole headers, every range inside `data`, open events' bytes a
/// [`ConnInfo`], text payloads and close reasons UTF-8. Headers of unknown kinds are range-checked only.
pub fn parse_events<'a>(events: &'a [u8], data: &'a [u8]) -> Result<EventList<'a>, AbiError> {
    let headers = split_headers::<EVENT_HEADER_BYTES>(events)?;
    for (index, h) in headers.iter().enumerate() {
        let e = EventHeader::decode(h);
        let bytes = range(data, e.offset, e.len).ok_or(AbiError::RangeOutOfBounds {
            index,
            field: Field::Payload,
            offset: e.offset,
            len: e.len,
            data_len: data.len(),
        })?;
        let utf8 = || is_utf8(bytes);
        match EventKind::from_byte(e.kind) {
            Some(EventKind::Open) => {
                ConnInfo::parse(bytes, index)?;
            }
            Some(EventKind::Text) if !utf8() => return Err(AbiError::TextNotUtf8 { index }),
            Some(EventKind::Close) if !utf8() => return Err(AbiError::ReasonNotUtf8 { index }),
            Some(EventKind::HttpResponse) if split_http_response(bytes).is_none() => {
                return Err(AbiError::IoEventMalformed { index })
            }
            Some(EventKind::HttpError) if !split_tag(bytes).is_some_and(|(_, m)| is_utf8(m)) => {
                return Err(AbiError::IoEventMalformed { index })
            }
            Some(EventKind::Timer) if bytes.len() != 8 => {
                return Err(AbiError::IoEventMalformed { index })
            }
            Some(EventKind::ProxyText | EventKind::ProxyBinary)
                if Direction::from_byte(e.reserved).is_none() =>
            {
                return Err(AbiError::ReservedByteSet {
                    index,
                    value: e.reserved,
                })
            }
            Some(EventKind::ProxyText) if !utf8() => return Err(AbiError::TextNotUtf8 { index }),
            Some(EventKind::RtSubscribe | EventKind::RtPublish)
                if split_rt_request(bytes).is_none() =>
            {
                return Err(AbiError::IoEventMalformed { index })
            }
            Some(EventKind::PusherConnect | EventKind::PusherClientEvent)
                if split_rt_request(bytes).is_none() =>
            {
                return Err(AbiError::IoEventMalformed { index })
            }
            Some(EventKind::PusherSubscribe) if split_pusher_subscribe(bytes).is_none() => {
                return Err(AbiError::IoEventMalformed { index })
            }
            Some(EventKind::History) if split_history(e.code, bytes).is_none() => {
                return Err(AbiError::IoEventMalformed { index })
            }
            Some(EventKind::Presence) if split_presence(e.code, bytes).is_none() => {
                return Err(AbiError::IoEventMalformed { index })
            }
            _ => {}
        }
    }
    Ok(EventList { headers, data })
}

impl<'a> EventList<'a> {
    /// Number of event headers, unknown kinds included.
    pub fn len(&self) -> usize {
        self.headers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.headers.is_empty()
    }

    /// The events in batch order, skipping kinds this crate does not know.
    pub fn iter(&self) -> EventIter<'a> {
        EventIter {
            headers: self.headers.iter(),
            data: self.data,
        }
    }
}

impl<'a> IntoIterator for &EventList<'a> {
    type Item = Event<'a>;
    type IntoIter = EventIter<'a>;
    fn into_iter(self) -> EventIter<'a> {
        self.iter()
    }
}

/// Iterator over an [`EventList`].
#[derive(Debug, Clone)]
pub struct EventIter<'a> {
    headers: core::slice::Iter<'a, [u8; N]>,
    data: &'a [u8],
}

impl<'a> Iterator for EventIter<'a> {
    type Item = Event<'a>;

    fn next(&mut self) -> Option<Event<'a>> {
        for h in self.headers.by_ref() {
            let e = EventHeader::decode(h);
            let start = e.offset as usize;
            // In range: checked by parse_events.
            let bytes = &self.data[start..start + e.len as usize];
            // SAFETY (checked_str): parse_events checked these ranges are
            // UTF-8 for text and close, and `data` is borrowed
            // immutably since.
            let conn = e.conn;
            return Some(match EventKind::from_byte(e.kind) {
                Some(EventKind::Open) => match ConnInfo::parse(bytes, 0) {
                    Ok(info) => Event::Open { conn, info },
                    Err(_) => unreachable!("checked by parse_events"),
                },
                Some(EventKind::Text) => Event::Text {
                    conn,
                    text: unsafe { checked_str(bytes) },
                },
                Some(EventKind::Binary) => Event::Binary {
                    conn,
                    payload: bytes,
                },
                Some(EventKind::Close) => Event::Close {
                    conn,
                    code: e.code,
                    reason: unsafe { checked_str(bytes) },
                },
                Some(EventKind::HttpResponse) => match split_http_response(bytes) {
                    Some((tag, head, body)) => Event::HttpResponse {
                        conn,
                        tag,
                        status: e.code,
                        head,
                        body,
                    },
                    None => unreachable!("checked by parse_events"),
                },
                Some(EventKind::HttpError) => match split_tag(bytes) {
                    Some((tag, message)) => Event::HttpError {
                        conn,
                        tag,
                        reason: e.code,
                        message: unsafe { checked_str(message) },
                    },
                    None => unreachable!("checked by parse_events"),
                },
                Some(EventKind::Timer) => match split_tag(bytes) {
                    Some((tag, _)) => Event::Timer { conn, tag },
                    None => unreachable!("checked by parse_events"),
                },
                Some(EventKind::KvError) => Event::KvError {
                    conn,
                    reason: e.code,
                    key: bytes,
                },
                Some(kind @ (EventKind::ProxyText | EventKind::ProxyBinary)) => Event::Proxy {
                    conn,
                    direction: match Direction::from_byte(e.reserved) {
                        Some(direction) => direction,
                        None => unreachable!("checked by parse_events"),
                    },
                    msg: if kind == EventKind::ProxyText {
                        ProxyMessage::Text(unsafe { checked_str(bytes) })
                    } else {
                        ProxyMessage::Binary(bytes)
                    },
                },
                Some(kind @ (EventKind::RtSubscribe | EventKind::RtPublish)) => {
                    match split_rt_request(bytes) {
                        Some((req, _)) if kind == EventKind::RtSubscribe => {
                            Event::RtSubscribe { conn, req }
                        }
                        Some((req, data)) => Event::RtPublish { conn, req, data },
                        None => unreachable!("checked by parse_events"),
                    }
                }
                Some(kind @ (EventKind::PusherConnect | EventKind::PusherClientEvent)) => {
                    match split_rt_request(bytes) {
                        Some((req, _)) if kind == EventKind::PusherConnect => {
                            Event::PusherConnect { conn, req }
                        }
                        Some((req, data)) => Event::PusherClientEvent { conn, req, data },
                        None => unreachable!("checked by parse_events"),
                    }
                }
                Some(EventKind::PusherSubscribe) => match split_pusher_subscribe(bytes) {
                    Some((req, check, auth)) => Event::PusherSubscribe {
                        conn,
                        req,
                        check,
                        auth,
                    },
                    None => unreachable!("checked by parse_events"),
                },
                Some(EventKind::History) => match split_history(e.code, bytes) {
                    Some((tag, result)) => Event::History { conn, tag, result },
                    None => unreachable!("checked by parse_events"),
                },
                Some(EventKind::Presence) => match split_presence(e.code, bytes) {
                    Some((tag, result)) => Event::Presence { conn, tag, result },
                    None => unreachable!("checked by parse_events"),
                },
                None => continue,
            });
        }
        None
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.headers.len()))
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec::Vec;

    use super::*;

    /// A batch as the host's `Batch` builds it: headers plus data back to back.
    fn batch(events: &[(u64, u8, u16, &[u8])]) -> (Vec<u8>, Vec<u8>) {
        let (mut headers, mut data) = (Vec::new(), Vec::new());
        for &(conn, kind, code, bytes) in events {
            let h = EventHeader {
                conn,
                kind,
                reserved: 0,
                code,
                offset: data.len() as u32,
                len: bytes.len() as u32,
            };
            headers.extend_from_slice(&h.encode());
            data.extend_from_slice(bytes);
        }
        (headers, data)
    }

    #[test]
    fn every_event_kind_reads_back_and_unknown_kinds_are_skipped() {
        // Target "/chat/a?x=1", no parameters, no attachment.
        let open = b"\x0b\0\0\0/chat/a?x=1\0\0\0\0";
        let (h, d) = batch(&[
            (1, 0, 0, open),
            (1, 1, 0, "héllo".as_bytes()),
            (2, 200, 0, b"from a newer host"),
            (0, 9, 3, b"user:7"),
            (2, 2, 0, &[0xff, 0]),
            (1, 3, 1001, b"bye"),
        ]);
        let list = parse_events(&h, &d).unwrap();
        assert_eq!(list.len(), 6);
        let all: Vec<_> = list.iter().collect();
        assert_eq!(
            all,
            [
                Event::Open {
                    conn: 1,
                    info: ConnInfo::parse(open, 0).unwrap()
                },
                Event::Text {
                    conn: 1,
                    text: "héllo"
                },
                Event::KvError {
                    conn: 0,
                    reason: 3,
                    key: b"user:7"
                },
                Event::Binary {
                    conn: 2,
                    payload: &[0xff, 0]
                },
                Event::Close {
                    conn: 1,
                    code: 1001,
                    reason: "bye"
                },
            ]
        );
    }

    /// Proxy events carry their direction in byte 9; any other value, or
    /// a text that is not UTF-8, breaks the batch.
    #[test]
    fn proxy_events_carry_their_direction() {
        let (mut h, d) = batch(&[(3, 7, 0, b"up"), (3, 8, 0, &[0xff])]);
        h[EVENT_HEADER_BYTES + 9] = 1;
        let all: Vec<_> = parse_events(&h, &d).unwrap().iter().collect();
        assert_eq!(
            all,
            [
                Event::Proxy {
                    conn: 3,
                    direction: Direction::ToUpstream,
                    msg: ProxyMessage::Text("up")
                },
                Event::Proxy {
                    conn: 3,
                    direction: Direction::ToClient,
                    msg: ProxyMessage::Binary(&[0xff])
                },
            ]
        );
        h[9] = 2;
        assert_eq!(
            parse_events(&h, &d).err(),
            Some(AbiError::ReservedByteSet { index: 0, value: 2 })
        );
        let (h, d) = batch(&[(3, 7, 0, &[0xff])]);
        assert_eq!(
            parse_events(&h, &d).err(),
            Some(AbiError::TextNotUtf8 { index: 0 })
        );
    }

    #[test]
    fn broken_batches_are_refused() {
        let (h, d) = batch(&[(1, 1, 0, b"hi")]);
        assert!(matches!(
            parse_events(&h[..19], &d),
            Err(AbiError::HeadersNotWhole { bytes: 19, .. })
        ));
        assert!(matches!(
            parse_events(&h, &d[..1]),
            Err(AbiError::RangeOutOfBounds {
                index: 0,
                field: Field::Payload,
                ..
            })
        ));
        for (kind, want) in [
            (0, AbiError::ConnInfoMalformed { index: 1 }),
            (1, AbiError::TextNotUtf8 { index: 1 }),
            (3, AbiError::ReasonNotUtf8 { index: 1 }),
        ] {
            let (h, d) = batch(&[(1, 2, 0, &[0xff]), (1, kind, 0, &[0xc3])]);
            assert_eq!(parse_events(&h, &d).err(), Some(want), "kind {kind}");
        }
        // Out-of-range bytes of an unknown kind are still refused.
        let mut h = EventHeader {
            conn: 1,
            kind: 200,
            reserved: 0,
            code: 0,
            offset: 0,
            len: 1,
        }
        .encode();
        assert!(parse_events(&h, &[]).is_err());
        h[9] = 7; // reserved is ignored on this side
        assert_eq!(parse_events(&h, &[0]).map(|l| l.iter().count()), Ok(0));
    }
}
