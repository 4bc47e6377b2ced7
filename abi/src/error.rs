//! [`AbiError`]: how a header buffer and its data break the ABI, one variant
//! per rule (the rules are listed in the crate doc). Plain `Copy` data: the
//! host reports a bad answer without allocating.

use core::fmt;

/// Which range of a header was out of bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// `topic-offset` / `topic-len` of a command header.
    Topic,
    /// `offset` / `len`: an event's bytes, a command's payload.
    Payload,
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Field::Topic => "topic",
            Field::Payload => "payload",
        })
    }
}

/// A violation of the ABI. `index` is the position of the offending header
/// in its buffer (0-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AbiError {
    /// The header buffer's length is not a multiple of the header size.
    #[error("headers are {bytes} bytes, not a multiple of {header_bytes}")]
    HeadersNotWhole { bytes: usize, header_bytes: usize },
    /// Byte 9 of a command header is not 0 (kept free for later use).
    #[error("command {index}: reserved byte is {value}, not 0")]
    ReservedByteSet { index: usize, value: u8 },
    /// An `offset`/`len` pair names bytes outside the data buffer.
    #[error("header {index}: {field} range {offset}+{len} is outside the {data_len}-byte buffer")]
    RangeOutOfBounds {
        index: usize,
        field: Field,
        offset: u32,
        len: u32,
        data_len: usize,
    },
    /// A command kind this ABI version does not define.
    #[error("command {index}: unknown kind {kind}")]
    UnknownKind { index: usize, kind: u8 },
    /// A text message (send-text, publish-text, a text event) is not UTF-8.
    #[error("header {index}: text payload is not UTF-8")]
    TextNotUtf8 { index: usize },
    /// A close reason (close command or close event) is not UTF-8.
    #[error("header {index}: close reason is not UTF-8")]
    ReasonNotUtf8 { index: usize },
    /// A publish, subscribe or unsubscribe names the empty topic.
    #[error("command {index}: empty topic")]
    EmptyTopic { index: usize },
    /// A topic is not UTF-8.
    #[error("command {index}: topic is not UTF-8")]
    TopicNotUtf8 { index: usize },
    /// An open event's bytes (or a `host.connection` answer) do not follow
    /// the [`ConnInfo`](crate::ConnInfo) layout, or a string in them is not
    /// UTF-8.
    #[error("event {index}: connection info is malformed")]
    ConnInfoMalformed { index: usize },
    /// An I/O command's meta bytes (the topic range of http-request,
    /// set-timer, cancel-timer, kv-set, kv-delete) are too short for the
    /// kind, or an http-request head is not UTF-8, or a key is empty.
    #[error("command {index}: meta bytes do not follow the layout of its kind")]
    MetaMalformed { index: usize },
    /// An I/O event's bytes (http-response, http-error, timer) do not start
    /// with the 8-byte tag, or an http-response head is out of bounds or not
    /// UTF-8.
    #[error("event {index}: I/O event bytes are malformed")]
    IoEventMalformed { index: usize },
}
