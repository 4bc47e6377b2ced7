//! `weir-abi`: the byte layout of the `weir:gateway` batch ABI, written down
//! once and implemented once, for the gateway (host/) and the guest SDK
//! (guest-sdk/). `no_std`, no allocation unless the `alloc` feature asks for
//! the owned [`CommandBuf`].
//!
//! - [`header`]: header sizes, kind numbers, pack/unpack of one header.
//! - [`events`]: [`parse_events`], what a guest does with the host's batch.
//! - [`commands`]: [`parse_commands`], what the host does with a guest's
//!   answer; validation happens there once, walking the result cannot fail.
//! - [`error`]: [`AbiError`], one variant per way an answer breaks the ABI.
//! - [`io`]: 0.4.0's I/O commands and events (outbound HTTP, timers,
//!   key-value writes, real-time history and presence reads): their meta
//!   and byte layouts.
//!
//! Test vectors for SDKs in other languages are in `abi/vectors/` (format in
//! its README); `tests/vectors.rs` holds this crate to them.
//!
//! # Layout
//!
//! The WIT (`wit/weir.wit`) passes a batch as two `list<u8>`: packed
//! fixed-size headers and one data buffer with every header's bytes back to
//! back; a guest answers with the same shape. Byte lists instead of typed
//! records because wasmtime lowers a record field by field: with
//! `list<event>` that was ~40% of a 64-message call, a byte list is one copy.
//!
//! Headers are little-endian, unaligned, back to back, no padding between
//! them; a header buffer's length is a multiple of the header size.
//!
//! Event header ([`EVENT_HEADER_BYTES`] = 20), host to guest:
//!
//! | bytes  | field    | meaning                                               |
//! |--------|----------|-------------------------------------------------------|
//! | 0..8   | conn     | connection id, u64, never 0                           |
//! | 8      | kind     | [`EventKind`]: open 0, text 1, binary 2, close 3;     |
//! |        |          | 0.4.0: http-response 4, http-error 5, timer 6,        |
//! |        |          | proxy-text 7, proxy-binary 8, kv-error 9, history 10, |
//! |        |          | presence 11, rt-subscribe 12, rt-publish 13,          |
//! |        |          | pusher-connect 14, pusher-subscribe 15,               |
//! |        |          | pusher-client-event 16                                |
//! | 9      | reserved | 0; for proxy kinds the [`Direction`]: 0 client to     |
//! |        |          | upstream, 1 upstream to client                        |
//! | 10..12 | code     | close code for `close`, 0 otherwise, u16              |
//! | 12..16 | offset   | start of the event's bytes in the data buffer, u32    |
//! | 16..20 | len      | length of the event's bytes, u32                      |
//!
//! An event's bytes: for open, a [`ConnInfo`] (request target, route
//! parameters, the attachment the upgrade was accepted with; layout in
//! [`conn_info`]); the payload for text (UTF-8) and binary; the close reason
//! (UTF-8) for close.
//!
//! Command header ([`COMMAND_HEADER_BYTES`] = 28), guest to host:
//!
//! | bytes  | field        | meaning                                           |
//! |--------|--------------|---------------------------------------------------|
//! | 0..8   | conn         | connection id, u64; for publish the one to leave  |
//! |        |              | out, 0 for none                                   |
//! | 8      | kind         | [`CommandKind`]: send-text 0, send-binary 1,      |
//! |        |              | close 2, publish-text 3, publish-binary 4,        |
//! |        |              | subscribe 5, unsubscribe 6, set-attachment 7;     |
//! |        |              | 0.4.0: http-request 8, set-timer 9,               |
//! |        |              | cancel-timer 10, kv-set 11, kv-delete 12,         |
//! |        |              | forward-text 13, forward-binary 14,               |
//! |        |              | history-read 15, presence-read 16,                |
//! |        |              | rt-subscribe-verdict 17, rt-publish-verdict 18    |
//! | 9      | reserved     | must be 0; for forward kinds the [`Direction`]    |
//! | 10..12 | code         | close code for `close`, 0 otherwise, u16          |
//! | 12..16 | topic-offset | start of the topic in the data buffer, u32        |
//! | 16..20 | topic-len    | length of the topic, u32 (0: the kind has none)   |
//! | 20..24 | offset       | start of the payload (message, close reason,      |
//! |        |              | attachment) in the data buffer, u32               |
//! | 24..28 | len          | length of the payload, u32                        |
//!
//! Kind numbers are the case indices of the WIT enums `event-kind` and
//! `command-kind`; the host and the SDK assert at compile time that their
//! generated bindings agree. The proxy kinds (events 7 and 8, commands 13
//! and 14) and the kv-error event (9: a key-value write the host refused,
//! code a [`KvErrorReason`], bytes the key, conn 0) live in the packed
//! layout only: they travel in the same byte lists, so the WIT world stays
//! 0.4.0 and a guest that does not know them skips them. So do the
//! real-time reads of a guest route with `realtime = true`: commands 15
//! history-read and 16 presence-read, answered by events 10 history and
//! 11 presence (code 0 or a [`ReadErrorReason`]; layouts in [`io`]).
//!
//! A proxy route with a `filter` sends its guest every message in either
//! direction as a proxy event (after an open event, before a close event,
//! like any guest route's connections); a message goes on only as a
//! forward command of the filter's answer, with the received bytes or a
//! replacement, in the direction the command names. No forward drops it;
//! a close command closes the client (and the upstream with it).
//!
//! A real-time namespace with a `guest` (the centrifugo route) asks its
//! guest about each client subscribe (rt-subscribe, 12) and each client
//! publication (rt-publish, 13) of the namespace's channels: `conn` is the
//! client's connection, the bytes a request ([`realtime`]: call id,
//! channel, client, user, token info, then the publication). The guest
//! answers each with a verdict naming the call id in its 8-byte meta:
//! rt-subscribe-verdict (17; code 0 allows, else the Centrifugo error code
//! the client gets) or rt-publish-verdict (18; byte 9 pass 0, replace 1
//! with the payload as new data, drop 2 with code as the client's error,
//! 0 for 103). A question left unanswered by a batch, or a batch that
//! fails, is answered 100 (internal) by the host. Like the proxy kinds they
//! travel in the packed layout only.
//!
//! A Pusher app with a `guest` (the pusher route) asks it about each of the
//! app's connections (pusher-connect, 14), subscriptions (pusher-subscribe,
//! 15) and client events (pusher-client-event, 16): the same request
//! layout, fields as [`pusher`] gives them, answered with the same two
//! verdicts; an rt-subscribe-verdict's byte 9 may be [`pusher::RT_AUTHORISE`]
//! (1: the guest answered authorisation, the payload the presence channel
//! data), and its payload (a refusal's message) must be UTF-8.
//!
//! # Rules a guest's answer must follow
//!
//! Every `offset`/`len` pair names `data[offset .. offset + len]` and must lie
//! inside the data buffer (the topic pair too, even for kinds without a
//! topic). The host rejects the whole answer ([`parse_commands`] returns the
//! [`AbiError`] named in brackets) when
//!
//! - the header buffer is not a whole number of headers \[`HeadersNotWhole`\],
//! - a reserved byte is not 0 (a forward's direction not 0 or 1, an
//!   rt-publish-verdict's decision not 0–2, an rt-subscribe-verdict's not
//!   0–1) \[`ReservedByteSet`\],
//! - a range falls outside the data buffer \[`RangeOutOfBounds`\],
//! - a kind is unknown \[`UnknownKind`\],
//! - a text payload (send-text, publish-text, forward-text,
//!   rt-subscribe-verdict) is not UTF-8 \[`TextNotUtf8`\],
//! - a close reason is not UTF-8 \[`ReasonNotUtf8`\],
//! - a publish, subscribe or unsubscribe has an empty topic \[`EmptyTopic`\]
//!   or one that is not UTF-8 \[`TopicNotUtf8`\],
//! - an I/O command's meta does not follow its layout (layouts in [`io`])
//!   \[`MetaMalformed`\];
//!
//! checked in that order per command, commands in order; the first violation
//! is reported. The gateway then closes every connection of the batch with
//! 1011. Two things are repaired rather than refused: a close code an
//! endpoint may not send (RFC 6455 §7.4) becomes 1011, and a close reason
//! over [`MAX_CLOSE_REASON_BYTES`] is cut at the last character boundary
//! before that length (RFC 6455 §5.5).
//!
//! [`AbiError`]: error::AbiError

#![no_std]
#![deny(unsafe_op_in_unsafe_fn)]

#[cfg(feature = "alloc")]
extern crate alloc;

pub mod commands;
pub mod conn_info;
pub mod error;
pub mod events;
pub mod header;
pub mod io;
pub mod pusher;
pub mod realtime;

#[cfg(feature = "alloc")]
pub use commands::CommandBuf;
pub use commands::{
    parse_commands, sendable_close_code, short_reason, Command, CommandIter, CommandList,
    FALLBACK_CLOSE_CODE, MAX_CLOSE_REASON_BYTES,
};
#[cfg(feature = "alloc")]
pub use conn_info::encode_conn_info;
pub use conn_info::{ConnInfo, Params};
pub use error::{AbiError, Field};
pub use events::{parse_events, Event, EventIter, EventList, ProxyMessage};
pub use header::{
    CommandHeader, CommandKind, Direction, EventHeader, EventKind, COMMAND_HEADER_BYTES,
    EVENT_HEADER_BYTES, LAST_V3_COMMAND_KIND,
};
pub use io::{HistoryAnswer, HttpErrorReason, KvErrorReason, Member, Members, ReadErrorReason};
pub use pusher::SignatureCheck;
#[cfg(feature = "alloc")]
pub use realtime::encode_rt_request;
pub use realtime::{split_rt_request, RtRequest, RtVerdict};

/// Connection id as the ABI carries it: unique per gateway process, never 0
/// (0 means "no connection" in a publish's `conn`).
pub type ConnectionId = u64;
