//! The byte layouts of weir:gateway 0.4.0's I/O commands and events
//! (outbound HTTP, timers, key-value writes), shared by the host and the
//! SDK. Commands carry their fixed fields in the header's topic range
//! ("meta"); events carry a tag first in their bytes.
//!
//! | command        | meta (topic range)                  | payload |
//! |----------------|-------------------------------------|---------|
//! | http-request   | tag u64, then the head (UTF-8)      | body    |
//! | set-timer      | tag u64, delay in ms u64            | empty   |
//! | cancel-timer   | tag u64                             | empty   |
//! | kv-set         | ttl in ms u64 (0: none), then key   | value   |
//! | kv-delete      | key                                 | empty   |
//! | history-read   | tag u64, limit u32, reverse u8 (0   | empty   |
//! |                | or 1), then the channel (UTF-8)     |         |
//! | presence-read  | tag u64, then the channel (UTF-8)   | empty   |
//!
//! A request head is `METHOD URL` then one `name: value` per line, lines
//! separated by `\n` (HTTP forbids line breaks in names and values).
//! A command's `conn` is the connection its answer goes to, 0 for the
//! route (the answer then reaches the route's instance on the worker that
//! asked, whatever the connection).
//!
//! | event          | code                     | bytes                                     |
//! |----------------|--------------------------|-------------------------------------------|
//! | http-response  | HTTP status              | tag u64, head len u32, head, body         |
//! | http-error     | [`HttpErrorReason`]      | tag u64, message (UTF-8)                  |
//! | timer          | 0                        | tag u64                                   |
//! | kv-error       | [`KvErrorReason`]        | the key                                   |
//! | history        | 0, or [`ReadErrorReason`] | tag u64; when 0: the stream's offset u64, |
//! |                |                          | epoch len u32, epoch, then publications:  |
//! |                |                          | offset u64, len u32, data (JSON text)     |
//! | presence       | 0, or [`ReadErrorReason`] | tag u64; when 0, members: client len u32, |
//! |                |                          | client, user len u32, user, info len u32, |
//! |                |                          | info (JSON text, empty: none)             |
//!
//! A response head is one `name: value` per line, `\n`-separated.
//!
//! history-read and presence-read (commands 15, 16) and their answers
//! (events 10, 11) read the real-time core's channels from a guest route
//! with `realtime = true`. Packed layout only, like kv-error: the WIT world
//! stays 0.4.0. A history-read's `limit` is cut to the host's cap; 0 asks
//! for the position alone. `reverse` 1 reads newest first.

/// A `#[repr(u16)]` enum of event codes, each variant written once with its
/// code and its word: `ALL` (in code order), `from_code` and `as_str`.
macro_rules! event_codes {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $($(#[$doc:meta])* $variant:ident = $code:literal => $word:literal,)+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u16)]
        pub enum $name {
            $($(#[$doc])* $variant = $code,)+
        }

        impl $name {
            /// Every code, in code order (for counters by reason).
            pub const ALL: [$name; [$($code),+].len()] = [$($name::$variant),+];

            /// The reason an event code names, None for one this crate does
            /// not know.
            pub const fn from_code(code: u16) -> Option<Self> {
                match code {
                    $($code => Some($name::$variant),)+
                    _ => None,
                }
            }

            /// The reason as one word (what the SDKs, logs and metrics show).
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $word,)+
                }
            }
        }
    };
}

event_codes! {
    /// Why an `http-request` got no response: the `code` of an http-error
    /// event.
    pub enum HttpErrorReason {
        /// The route's `allow_outbound` does not allow the URL (deny by default).
        Refused = 1 => "refused",
        /// No complete response within the route's `outbound_timeout`.
        Timeout = 2 => "timeout",
        /// The connection to the server failed (refused, reset, DNS).
        Connect = 3 => "connect",
        /// The response body is over the route's `outbound_max_response`.
        TooLarge = 4 => "too-large",
        /// The route already has `outbound_max_concurrent` requests in flight.
        Busy = 5 => "busy",
        /// The request is not one the host can send (method, URL, header).
        Invalid = 6 => "invalid",
    }
}

event_codes! {
    /// Why a `kv-set` or `kv-delete` was refused: the `code` of a kv-error
    /// event (kind 9, conn 0). The write was not applied.
    pub enum KvErrorReason {
        /// The store would go over its `kv_max_bytes` (keys plus values).
        OverMaxBytes = 1 => "max-bytes",
        /// The store would go over its `kv_max_keys`.
        OverMaxKeys = 2 => "max-keys",
        /// The store's write queue is full (its disk or Redis is not keeping
        /// up, or Redis is unreachable).
        QueueFull = 3 => "queue-full",
        /// The key is over 1 KiB or the value over 1 MiB.
        TooLarge = 4 => "too-large",
        /// The route has no `kv`.
        NoStore = 5 => "no-store",
    }
}

event_codes! {
    /// Why a `history-read` or `presence-read` has no answer: the `code` of
    /// a history or presence event (0 there means the read succeeded).
    pub enum ReadErrorReason {
        /// The channel's name is refused (no such namespace, too long, ...).
        BadChannel = 1 => "bad-channel",
        /// The channel's namespace keeps no history.
        HistoryOff = 2 => "history-off",
        /// The channel's namespace keeps no presence.
        PresenceOff = 3 => "presence-off",
        /// The core could not answer (with `[cluster]`: Redis did not).
        Unavailable = 4 => "unavailable",
        /// The route already has its cap of reads pending, or the
        /// channel's namespace holds its `max_channels`.
        Busy = 5 => "busy",
        /// The route is not `realtime = true`.
        NotRealtime = 6 => "not-realtime",
    }
}

/// The leading 8-byte tag of `bytes` and what follows it.
pub fn split_tag(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let (tag, rest) = bytes.split_first_chunk::<8>()?;
    Some((u64::from_le_bytes(*tag), rest))
}

/// A request head's method, URL and header lines (`name: value`), None when
/// its first line is not `METHOD URL`.
pub fn split_request_head(head: &str) -> Option<(&str, &str, HeaderLines<'_>)> {
    let (first, rest) = head.split_once('\n').unwrap_or((head, ""));
    let (method, url) = first.split_once(' ')?;
    if method.is_empty() || url.is_empty() {
        return None;
    }
    Some((method, url, HeaderLines { rest }))
}

/// The `name: value` lines of a head; a line without `:` is yielded with
/// an empty value (the host refuses it as an invalid header).
#[derive(Debug, Clone)]
pub struct HeaderLines<'a> {
    rest: &'a str,
}

impl<'a> HeaderLines<'a> {
    /// The lines of a response head.
    pub fn new(head: &'a str) -> Self {
        HeaderLines { rest: head }
    }
}

impl<'a> Iterator for HeaderLines<'a> {
    type Item = (&'a str, &'a str);

    fn next(&mut self) -> Option<(&'a str, &'a str)> {
        loop {
            if self.rest.is_empty() {
                return None;
            }
            let (line, rest) = self.rest.split_once('\n').unwrap_or((self.rest, ""));
            self.rest = rest;
            if line.is_empty() {
                continue;
            }
            let (name, value) = line.split_once(':').unwrap_or((line, ""));
            return Some((name.trim(), value.trim()));
        }
    }
}

/// An http-response event's bytes: tag, head (UTF-8) and body; None when
/// they do not follow the layout.
pub fn split_http_response(bytes: &[u8]) -> Option<(u64, &str, &[u8])> {
    let (tag, rest) = split_tag(bytes)?;
    let (len, rest) = rest.split_first_chunk::<4>()?;
    let len = u32::from_le_bytes(*len) as usize;
    if len > rest.len() {
        return None;
    }
    let (head, body) = rest.split_at(len);
    Some((tag, core::str::from_utf8(head).ok()?, body))
}

#[cfg(feature = "alloc")]
pub use owned::*;

mod reads;
pub use reads::*;

#[cfg(feature = "alloc")]
mod owned {
    use alloc::vec::Vec;

    /// Append an http-request's meta: `tag`, then the head
    /// (`METHOD URL`, then `name: value` lines).
    pub fn encode_request_meta<'h>(
        out: &mut Vec<u8>,
        tag: u64,
        method: &str,
        url: &str,
        headers: impl IntoIterator<Item = (&'h str, &'h str)>,
    ) {
        out.extend_from_slice(&tag.to_le_bytes());
        out.extend_from_slice(method.as_bytes());
        out.push(b' ');
        out.extend_from_slice(url.as_bytes());
        for (name, value) in headers {
            out.push(b'\n');
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value.as_bytes());
        }
    }

    /// Append an http-response event's bytes.
    pub fn encode_http_response<'h>(
        out: &mut Vec<u8>,
        tag: u64,
        headers: impl IntoIterator<Item = (&'h str, &'h str)>,
        body: &[u8],
    ) {
        out.extend_from_slice(&tag.to_le_bytes());
        let len_at = out.len();
        out.extend_from_slice(&[0; 4]);
        let start = out.len();
        for (name, value) in headers {
            if out.len() > start {
                out.push(b'\n');
            }
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value.as_bytes());
        }
        let len = (out.len() - start) as u32;
        out[len_at..len_at + 4].copy_from_slice(&len.to_le_bytes());
        out.extend_from_slice(body);
    }
}

#[cfg(all(test, feature = "alloc"))]
mod tests {
    extern crate std;
    use super::*;
    use alloc::vec::Vec;

    #[test]
    fn a_request_meta_reads_back() {
        let mut m = Vec::new();
        encode_request_meta(
            &mut m,
            7,
            "POST",
            "http://h:1/x",
            [("a", "1"), ("b", "x y")],
        );
        let (tag, head) = split_tag(&m).unwrap();
        assert_eq!(tag, 7);
        let (method, url, lines) = split_request_head(core::str::from_utf8(head).unwrap()).unwrap();
        assert_eq!((method, url), ("POST", "http://h:1/x"));
        assert_eq!(lines.collect::<Vec<_>>(), [("a", "1"), ("b", "x y")]);
        assert!(split_request_head("GET").is_none());
    }

    #[test]
    fn reads_and_their_answers_read_back() {
        let mut m = Vec::new();
        encode_history_read(&mut m, 9, 50, true, "chat:room");
        assert_eq!(split_history_read(&m), Some((9, 50, true, "chat:room")));
        // Malformed: no channel, reverse not 0 or 1, cut short, not UTF-8.
        assert_eq!(split_history_read(&m[..13]), None);
        let mut bad = m.clone();
        bad[12] = 2;
        assert_eq!(split_history_read(&bad), None);
        assert_eq!(split_history_read(&m[..10]), None);
        let mut bad = m.clone();
        bad[13] = 0xff;
        assert_eq!(split_history_read(&bad), None);
        let mut m = Vec::new();
        encode_presence_read(&mut m, 3, "chat:room");
        assert_eq!(split_presence_read(&m), Some((3, "chat:room")));
        assert_eq!(split_presence_read(&m[..8]), None);

        let mut b = Vec::new();
        encode_history(&mut b, 7, 12, "ep", [(11, &b"\"a\""[..]), (12, &b"{}"[..])]);
        let (tag, answer) = split_history(0, &b).unwrap();
        let answer = answer.unwrap();
        assert_eq!((tag, answer.offset, answer.epoch), (7, 12, "ep"));
        assert_eq!(
            answer.publications.collect::<Vec<_>>(),
            [(11, "\"a\""), (12, "{}")]
        );
        assert!(split_history(0, &b[..b.len() - 1]).is_none());
        assert_eq!(split_history(2, &7u64.to_le_bytes()), Some((7, Err(2))));

        let mut b = Vec::new();
        encode_presence(
            &mut b,
            5,
            [("c1", "u1", &b"{\"n\":1}"[..]), ("c2", "", &b""[..])],
        );
        let (tag, members) = split_presence(0, &b).unwrap();
        assert_eq!(tag, 5);
        let members: Vec<_> = members.unwrap().collect();
        assert_eq!(members.len(), 2);
        assert_eq!(
            (members[0].client, members[0].user, members[0].conn_info),
            ("c1", "u1", "{\"n\":1}")
        );
        assert_eq!((members[1].user, members[1].conn_info), ("", ""));
        assert!(split_presence(0, &b[..b.len() - 2]).is_none());
    }

    #[test]
    fn a_response_reads_back() {
        let mut b = Vec::new();
        encode_http_response(&mut b, u64::MAX, [("content-type", "text/plain")], b"hi");
        let (tag, head, body) = split_http_response(&b).unwrap();
        assert_eq!((tag, body), (u64::MAX, &b"hi"[..]));
        assert_eq!(
            HeaderLines::new(head).collect::<Vec<_>>(),
            [("content-type", "text/plain")]
        );
        assert!(split_http_response(&b[..10]).is_none());
        let mut bad = b.clone();
        bad[8] = 200;
        assert!(split_http_response(&bad).is_none());
    }
}
