//! The `weir:gateway` ABI on the host side: bindings generated from
//! `wit/weir.wit`, the [`Batch`] the reactor fills (packed event headers plus
//! one shared byte buffer, both reused across batches), and the validated
//! [`Commands`] a guest answers with (packed command headers plus bytes).
//!
//! Headers travel as `list<u8>` rather than typed records because wasmtime
//! lowers and lifts a record field by field: with `list<event>` that was
//! ~40% of a 64-message call. A byte list is one copy each way. The header
//! layouts are documented in `wit/weir.wit`; [`EventHeader`] and
//! [`CommandHeader`] are their only readers and writers here.

use super::error::Fault;
use super::ConnectionId;

/// Generated host bindings (sync calls, owned types).
pub(crate) mod bindings {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "gateway-handler",
        additional_derives: [PartialEq, Eq],
    });
}

use bindings::weir::gateway::types::{
    Batch as RawBatch, CommandKind, Commands as RawCommands, EventKind,
};

pub use bindings::weir::gateway::types::{UpgradeRequest, UpgradeResponse};

/// Largest answer (command headers plus bytes) accepted from one guest call.
/// A fixed cap rather than one derived from the route's memory: it bounds
/// what the host copies and queues per batch whatever the guest is allowed.
pub const MAX_OUTPUT_BYTES: usize = 64 << 20;

/// Bytes of one packed event header (layout: `wit/weir.wit`).
pub const EVENT_HEADER_BYTES: usize = 20;

/// Bytes of one packed command header (layout: `wit/weir.wit`).
pub const COMMAND_HEADER_BYTES: usize = 28;

/// Longest close reason RFC 6455 §5.5 allows (125-byte control payload minus
/// the 2-byte code).
const MAX_CLOSE_REASON_BYTES: usize = 123;

/// `kind` bytes: a WIT enum case travels as its index, so the generated enums
/// give the numbers (and a reordered WIT enum changes them in one place).
const EVENT_OPEN: u8 = EventKind::Open as u8;
const EVENT_TEXT: u8 = EventKind::Text as u8;
const EVENT_BINARY: u8 = EventKind::Binary as u8;
const EVENT_CLOSE: u8 = EventKind::Close as u8;
const SEND_TEXT: u8 = CommandKind::SendText as u8;
const SEND_BINARY: u8 = CommandKind::SendBinary as u8;
const CLOSE: u8 = CommandKind::Close as u8;
const PUBLISH_TEXT: u8 = CommandKind::PublishText as u8;
const PUBLISH_BINARY: u8 = CommandKind::PublishBinary as u8;
const SUBSCRIBE: u8 = CommandKind::Subscribe as u8;
const UNSUBSCRIBE: u8 = CommandKind::Unsubscribe as u8;
const SET_ATTACHMENT: u8 = CommandKind::SetAttachment as u8;

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

/// One event header, unpacked (`conn u64, kind u8, reserved u8, code u16,
/// offset u32, len u32`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EventHeader {
    pub conn: ConnectionId,
    pub kind: u8,
    pub code: u16,
    pub offset: u32,
    pub len: u32,
}

impl EventHeader {
    fn encode(&self) -> [u8; EVENT_HEADER_BYTES] {
        let mut h = [0u8; EVENT_HEADER_BYTES];
        h[0..8].copy_from_slice(&self.conn.to_le_bytes());
        h[8] = self.kind;
        h[10..12].copy_from_slice(&self.code.to_le_bytes());
        h[12..16].copy_from_slice(&self.offset.to_le_bytes());
        h[16..20].copy_from_slice(&self.len.to_le_bytes());
        h
    }

    /// `h` is exactly one header (from `chunks_exact`).
    #[cfg(test)]
    fn decode(h: &[u8]) -> Self {
        EventHeader {
            conn: u64_at(h, 0),
            kind: h[8],
            code: u16_at(h, 10),
            offset: u32_at(h, 12),
            len: u32_at(h, 16),
        }
    }
}

/// One command header, unpacked (`conn u64, kind u8, reserved u8, code u16,
/// topic-offset u32, topic-len u32, offset u32, len u32`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CommandHeader {
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
    /// `h` is exactly one header (from `chunks_exact`).
    fn decode(h: &[u8]) -> Self {
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

    fn encode_into(&self, h: &mut [u8]) {
        h[0..8].copy_from_slice(&self.conn.to_le_bytes());
        h[8] = self.kind;
        h[9] = self.reserved;
        h[10..12].copy_from_slice(&self.code.to_le_bytes());
        h[12..16].copy_from_slice(&self.topic_offset.to_le_bytes());
        h[16..20].copy_from_slice(&self.topic_len.to_le_bytes());
        h[20..24].copy_from_slice(&self.offset.to_le_bytes());
        h[24..28].copy_from_slice(&self.len.to_le_bytes());
    }
}

/// One batch of events for one route, built by the reactor and passed to
/// [`Runner::handle`](super::Runner::handle). `clear` keeps the allocations,
/// so a worker reuses one `Batch` for every call.
pub struct Batch {
    pub(crate) raw: RawBatch,
}

impl Default for Batch {
    fn default() -> Self {
        Batch {
            raw: RawBatch {
                events: Vec::new(),
                data: Vec::new(),
            },
        }
    }
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    fn push(&mut self, conn: ConnectionId, kind: u8, code: u16, bytes: &[u8]) {
        let offset = self.raw.data.len();
        let end = offset + bytes.len();
        // The ABI addresses the buffer with u32; the reactor flushes long
        // before (it caps a batch's bytes), so this is a bug, not an input.
        assert!(end <= u32::MAX as usize, "guest batch over 4 GiB");
        self.raw.data.extend_from_slice(bytes);
        let header = EventHeader {
            conn,
            kind,
            code,
            offset: offset as u32,
            len: bytes.len() as u32,
        };
        self.raw.events.extend_from_slice(&header.encode());
    }

    /// `conn` was opened on this route; `target` is its `path?query`.
    pub fn push_open(&mut self, conn: ConnectionId, target: &str) {
        self.push(conn, EVENT_OPEN, 0, target.as_bytes());
    }

    /// A complete message arrived; `text` payloads must be valid UTF-8
    /// (the reactor checks, as RFC 6455 §8.1 requires).
    pub fn push_message(&mut self, conn: ConnectionId, text: bool, payload: &[u8]) {
        let kind = if text { EVENT_TEXT } else { EVENT_BINARY };
        self.push(conn, kind, 0, payload);
    }

    /// `conn` is gone, with the peer's close code (1005 none, 1006 dropped).
    pub fn push_close(&mut self, conn: ConnectionId, code: u16, reason: &str) {
        self.push(conn, EVENT_CLOSE, code, reason.as_bytes());
    }

    /// Forget the events, keep the buffers.
    pub fn clear(&mut self) {
        self.raw.events.clear();
        self.raw.data.clear();
    }

    pub fn is_empty(&self) -> bool {
        self.raw.events.is_empty()
    }

    /// Number of events.
    pub fn len(&self) -> usize {
        self.raw.events.len() / EVENT_HEADER_BYTES
    }

    /// Payload bytes queued so far (to decide when to flush).
    pub fn data_len(&self) -> usize {
        self.raw.data.len()
    }

    /// The connections that have an event in this batch, in event order,
    /// possibly repeated (the caller closes these when the batch faults).
    pub fn connections(&self) -> impl Iterator<Item = ConnectionId> + '_ {
        self.raw
            .events
            .chunks_exact(EVENT_HEADER_BYTES)
            .map(|h| u64_at(h, 0))
    }
}

/// One thing a guest asked for, borrowed from [`Commands`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command<'a> {
    /// Send one message to `conn`; `text` payloads are valid UTF-8.
    Send {
        conn: ConnectionId,
        text: bool,
        payload: &'a [u8],
    },
    /// Close `conn`; `code` is a valid close code to send (RFC 6455 §7.4),
    /// `reason` at most 123 bytes.
    Close {
        conn: ConnectionId,
        code: u16,
        reason: &'a str,
    },
    /// Deliver to every subscriber of `topic`, except `exclude`.
    Publish {
        topic: &'a str,
        text: bool,
        payload: &'a [u8],
        exclude: Option<ConnectionId>,
    },
    /// Subscribe `conn` to `topic`.
    Subscribe { conn: ConnectionId, topic: &'a str },
    /// Unsubscribe `conn` from `topic`.
    Unsubscribe { conn: ConnectionId, topic: &'a str },
}

/// A guest's validated answer to one batch. Attachment commands have
/// already been applied by the runner and are not yielded.
pub struct Commands {
    raw: RawCommands,
}

impl Commands {
    pub(crate) fn empty() -> Self {
        Commands {
            raw: RawCommands {
                commands: Vec::new(),
                data: Vec::new(),
            },
        }
    }

    /// The commands, in the order the guest issued them.
    pub fn iter(&self) -> impl Iterator<Item = Command<'_>> + '_ {
        self.raw
            .commands
            .chunks_exact(COMMAND_HEADER_BYTES)
            .filter_map(|h| self.view(&CommandHeader::decode(h)))
    }

    /// Number of commands the iterator yields.
    pub fn len(&self) -> usize {
        self.iter().count()
    }

    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }

    /// Bytes of one range; ranges were checked by [`validate`].
    fn bytes(&self, offset: u32, len: u32) -> &[u8] {
        let start = offset as usize;
        self.raw
            .data
            .get(start..start.saturating_add(len as usize))
            .unwrap_or(&[])
    }

    fn text(&self, offset: u32, len: u32) -> &str {
        std::str::from_utf8(self.bytes(offset, len)).unwrap_or("")
    }

    fn view(&self, c: &CommandHeader) -> Option<Command<'_>> {
        let payload = self.bytes(c.offset, c.len);
        let topic = || self.text(c.topic_offset, c.topic_len);
        let exclude = (c.conn != 0).then_some(c.conn);
        Some(match c.kind {
            SEND_TEXT | SEND_BINARY => Command::Send {
                conn: c.conn,
                text: c.kind == SEND_TEXT,
                payload,
            },
            CLOSE => Command::Close {
                conn: c.conn,
                code: c.code,
                reason: self.text(c.offset, c.len),
            },
            PUBLISH_TEXT | PUBLISH_BINARY => Command::Publish {
                topic: topic(),
                text: c.kind == PUBLISH_TEXT,
                payload,
                exclude,
            },
            SUBSCRIBE => Command::Subscribe {
                conn: c.conn,
                topic: topic(),
            },
            UNSUBSCRIBE => Command::Unsubscribe {
                conn: c.conn,
                topic: topic(),
            },
            // Applied by the runner; unknown kinds were refused by validate.
            _ => return None,
        })
    }
}

/// A set-attachment command found while validating, for the runner to apply.
pub(crate) struct AttachmentRequest {
    /// Index of the command, so the runner can turn it into a close.
    pub index: usize,
    pub conn: ConnectionId,
    pub offset: usize,
    pub len: usize,
}

/// Close codes an endpoint may send (RFC 6455 §7.4.1 and §7.4.2: 1004–1006
/// and 1015 are reserved for reports, not for the wire).
fn sendable_close_code(code: u16) -> bool {
    matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999)
}

/// Check a guest's answer against the ABI, normalise close commands (in
/// place, in the header bytes) and collect attachment requests. Everything
/// the iterator later yields is in range and UTF-8 where the kind says text.
pub(crate) fn validate(
    raw: &mut RawCommands,
    attachments: &mut Vec<AttachmentRequest>,
) -> Result<(), Fault> {
    let size = raw.data.len().saturating_add(raw.commands.len());
    if size > MAX_OUTPUT_BYTES {
        return Err(Fault::OutputTooLarge {
            bytes: size,
            cap: MAX_OUTPUT_BYTES,
        });
    }
    if !raw.commands.len().is_multiple_of(COMMAND_HEADER_BYTES) {
        return Err(Fault::InvalidOutput(format!(
            "command headers are {} bytes, not a multiple of {COMMAND_HEADER_BYTES}",
            raw.commands.len()
        )));
    }
    let data = &raw.data;
    let range = |what: &str, i: usize, offset: u32, len: u32| -> Result<&[u8], Fault> {
        let start = offset as usize;
        data.get(start..start.saturating_add(len as usize))
            .ok_or_else(|| {
                Fault::InvalidOutput(format!(
                    "command {i}: {what} range {offset}+{len} is outside the {}-byte buffer",
                    data.len()
                ))
            })
    };
    let utf8 = |what: &str, i: usize, bytes: &[u8]| -> Result<(), Fault> {
        simdutf8::basic::from_utf8(bytes)
            .map(|_| ())
            .map_err(|_| Fault::InvalidOutput(format!("command {i}: {what} is not UTF-8")))
    };
    for (i, h) in raw
        .commands
        .chunks_exact_mut(COMMAND_HEADER_BYTES)
        .enumerate()
    {
        let mut c = CommandHeader::decode(h);
        if c.reserved != 0 {
            return Err(Fault::InvalidOutput(format!(
                "command {i}: reserved byte is {}, not 0",
                c.reserved
            )));
        }
        let payload = range("payload", i, c.offset, c.len)?;
        let topic = range("topic", i, c.topic_offset, c.topic_len)?;
        let has_topic = match c.kind {
            SEND_TEXT => {
                utf8("text payload", i, payload)?;
                false
            }
            PUBLISH_TEXT => {
                utf8("text payload", i, payload)?;
                true
            }
            SEND_BINARY => false,
            PUBLISH_BINARY | SUBSCRIBE | UNSUBSCRIBE => true,
            CLOSE => {
                utf8("close reason", i, payload)?;
                let mut changed = false;
                if !sendable_close_code(c.code) {
                    c.code = 1011;
                    changed = true;
                }
                if payload.len() > MAX_CLOSE_REASON_BYTES {
                    let mut cut = MAX_CLOSE_REASON_BYTES;
                    while payload[cut] & 0xC0 == 0x80 {
                        cut -= 1;
                    }
                    c.len = cut as u32;
                    changed = true;
                }
                if changed {
                    c.encode_into(h);
                }
                false
            }
            SET_ATTACHMENT => {
                attachments.push(AttachmentRequest {
                    index: i,
                    conn: c.conn,
                    offset: c.offset as usize,
                    len: c.len as usize,
                });
                false
            }
            kind => {
                return Err(Fault::InvalidOutput(format!(
                    "command {i}: unknown kind {kind}"
                )))
            }
        };
        if has_topic {
            if topic.is_empty() {
                return Err(Fault::InvalidOutput(format!("command {i}: empty topic")));
            }
            utf8("topic", i, topic)?;
        }
    }
    Ok(())
}

/// Turn the command at `index` into `close(conn, 1011)` (an attachment over
/// the route's cap costs that connection, not the batch).
pub(crate) fn replace_with_close(raw: &mut RawCommands, index: usize) {
    let at = index * COMMAND_HEADER_BYTES;
    let h = &mut raw.commands[at..at + COMMAND_HEADER_BYTES];
    let conn = u64_at(h, 0);
    CommandHeader {
        conn,
        kind: CLOSE,
        reserved: 0,
        code: 1011,
        topic_offset: 0,
        topic_len: 0,
        offset: 0,
        len: 0,
    }
    .encode_into(h);
}

impl Commands {
    pub(crate) fn from_raw(raw: RawCommands) -> Self {
        Commands { raw }
    }

    pub(crate) fn raw_mut(&mut self) -> &mut RawCommands {
        &mut self.raw
    }

    pub(crate) fn data(&self) -> &[u8] {
        &self.raw.data
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(
        kind: u8,
        conn: u64,
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

    fn raw(cmds: &[CommandHeader], data: &[u8]) -> RawCommands {
        let mut commands = vec![0u8; cmds.len() * COMMAND_HEADER_BYTES];
        for (c, h) in cmds
            .iter()
            .zip(commands.chunks_exact_mut(COMMAND_HEADER_BYTES))
        {
            c.encode_into(h);
        }
        RawCommands {
            commands,
            data: data.to_vec(),
        }
    }

    fn invalid(mut raw: RawCommands) -> String {
        match validate(&mut raw, &mut Vec::new()) {
            Err(Fault::InvalidOutput(msg)) => msg,
            Err(other) => panic!("expected invalid output, got {other:?}"),
            Ok(()) => panic!("expected invalid output, got Ok"),
        }
    }

    #[test]
    fn kind_bytes_follow_the_wit_enum_order() {
        assert_eq!(
            [EVENT_OPEN, EVENT_TEXT, EVENT_BINARY, EVENT_CLOSE],
            [0, 1, 2, 3]
        );
        assert_eq!(
            [
                SEND_TEXT,
                SEND_BINARY,
                CLOSE,
                PUBLISH_TEXT,
                PUBLISH_BINARY,
                SUBSCRIBE,
                UNSUBSCRIBE,
                SET_ATTACHMENT
            ],
            [0, 1, 2, 3, 4, 5, 6, 7]
        );
    }

    #[test]
    fn batch_packs_headers_and_ranges_into_two_buffers() {
        let mut b = Batch::new();
        b.push_open(1, "/chat/a");
        b.push_message(0x0102_0304_0506_0708, true, b"hi");
        b.push_close(1, 1000, "bye");
        assert_eq!(b.len(), 3);
        assert_eq!(b.raw.events.len(), 3 * EVENT_HEADER_BYTES);
        assert_eq!(b.data_len(), 7 + 2 + 3);
        // The exact wire bytes of the second header, as wit/weir.wit says.
        assert_eq!(
            &b.raw.events[EVENT_HEADER_BYTES..2 * EVENT_HEADER_BYTES],
            &[8, 7, 6, 5, 4, 3, 2, 1, 1, 0, 0, 0, 7, 0, 0, 0, 2, 0, 0, 0]
        );
        let e = EventHeader::decode(&b.raw.events[2 * EVENT_HEADER_BYTES..]);
        assert_eq!(
            e,
            EventHeader {
                conn: 1,
                kind: EVENT_CLOSE,
                code: 1000,
                offset: 9,
                len: 3
            }
        );
        assert_eq!(&b.raw.data[e.offset as usize..][..e.len as usize], b"bye");
        let conns: Vec<_> = b.connections().collect();
        assert_eq!(conns, vec![1, 0x0102_0304_0506_0708, 1]);
        b.clear();
        assert!(b.is_empty());
        assert_eq!(b.len(), 0);
        assert!(b.raw.data.capacity() >= 12, "clear keeps the buffer");
        assert!(b.raw.events.capacity() >= 60, "clear keeps the headers");
    }

    #[test]
    fn command_header_layout_is_the_documented_one() {
        let mut h = [0u8; COMMAND_HEADER_BYTES];
        cmd(PUBLISH_TEXT, 0x11, 0x0203, (4, 5), (6, 7)).encode_into(&mut h);
        assert_eq!(
            h,
            [
                0x11, 0, 0, 0, 0, 0, 0, 0, 3, 0, 3, 2, 4, 0, 0, 0, 5, 0, 0, 0, 6, 0, 0, 0, 7, 0, 0,
                0
            ]
        );
    }

    #[test]
    fn out_of_range_payload_is_invalid() {
        let msg = invalid(raw(&[cmd(SEND_BINARY, 1, 0, (0, 0), (2, 5))], &[0; 4]));
        assert!(msg.contains("outside"), "{msg}");
        let msg = invalid(raw(&[cmd(SUBSCRIBE, 1, 0, (3, 2), (0, 0))], &[0; 4]));
        assert!(msg.contains("topic range"), "{msg}");
    }

    #[test]
    fn huge_ranges_do_not_overflow() {
        let msg = invalid(raw(
            &[cmd(SEND_BINARY, 1, 0, (0, 0), (u32::MAX, u32::MAX))],
            &[0; 4],
        ));
        assert!(msg.contains("outside"), "{msg}");
    }

    #[test]
    fn text_must_be_utf8_and_topics_non_empty() {
        let msg = invalid(raw(&[cmd(SEND_TEXT, 1, 0, (0, 0), (0, 2))], &[0xff, 0xfe]));
        assert!(msg.contains("not UTF-8"), "{msg}");
        let msg = invalid(raw(&[cmd(SUBSCRIBE, 1, 0, (0, 0), (0, 0))], &[]));
        assert!(msg.contains("empty topic"), "{msg}");
        let msg = invalid(raw(
            &[cmd(PUBLISH_BINARY, 0, 0, (0, 2), (0, 0))],
            &[0xff, 0xfe],
        ));
        assert!(msg.contains("topic is not UTF-8"), "{msg}");
    }

    #[test]
    fn unknown_kind_reserved_byte_and_ragged_headers_are_invalid() {
        let msg = invalid(raw(&[cmd(8, 1, 0, (0, 0), (0, 0))], &[]));
        assert!(msg.contains("unknown kind 8"), "{msg}");
        let mut c = cmd(SEND_BINARY, 1, 0, (0, 0), (0, 0));
        c.reserved = 1;
        let msg = invalid(raw(&[c], &[]));
        assert!(msg.contains("reserved"), "{msg}");
        let mut r = raw(&[cmd(SEND_BINARY, 1, 0, (0, 0), (0, 0))], &[]);
        r.commands.push(0);
        let msg = invalid(r);
        assert!(msg.contains("multiple of 28"), "{msg}");
    }

    #[test]
    fn close_code_and_reason_are_normalised() {
        // RFC 6455 §7.4.1: 1005 must not be sent; §5.5: reason ≤ 123 bytes.
        let reason = "é".repeat(100); // 200 bytes, 2-byte chars
        let mut raw = raw(
            &[cmd(CLOSE, 7, 1005, (0, 0), (0, reason.len() as u32))],
            reason.as_bytes(),
        );
        validate(&mut raw, &mut Vec::new()).unwrap();
        let cmds = Commands::from_raw(raw);
        match cmds.iter().next().unwrap() {
            Command::Close { conn, code, reason } => {
                assert_eq!((conn, code), (7, 1011));
                assert_eq!(reason.len(), 122);
            }
            other => panic!("unexpected {other:?}"),
        };
    }

    #[test]
    fn oversized_output_is_refused() {
        let mut raw = RawCommands {
            commands: vec![],
            data: vec![0; MAX_OUTPUT_BYTES + 1],
        };
        assert!(matches!(
            validate(&mut raw, &mut Vec::new()),
            Err(Fault::OutputTooLarge { .. })
        ));
    }

    #[test]
    fn publish_exclusion_zero_means_none() {
        let mut raw = raw(
            &[
                cmd(PUBLISH_TEXT, 0, 0, (0, 1), (1, 2)),
                cmd(PUBLISH_BINARY, 9, 0, (0, 1), (1, 2)),
                cmd(SET_ATTACHMENT, 9, 0, (0, 0), (1, 2)),
            ],
            b"tok",
        );
        let mut att = Vec::new();
        validate(&mut raw, &mut att).unwrap();
        assert_eq!(att.len(), 1);
        assert_eq!(
            (att[0].index, att[0].conn, att[0].offset, att[0].len),
            (2, 9, 1, 2)
        );
        let mut cmds = Commands::from_raw(raw);
        let all: Vec<_> = cmds.iter().collect();
        assert_eq!(
            all,
            vec![
                Command::Publish {
                    topic: "t",
                    text: true,
                    payload: b"ok",
                    exclude: None
                },
                Command::Publish {
                    topic: "t",
                    text: false,
                    payload: b"ok",
                    exclude: Some(9)
                },
            ]
        );
        replace_with_close(cmds.raw_mut(), 2);
        assert_eq!(
            cmds.iter().nth(2),
            Some(Command::Close {
                conn: 9,
                code: 1011,
                reason: ""
            })
        );
    }

    #[test]
    fn every_command_kind_reads_back() {
        let mut raw = raw(
            &[
                cmd(SEND_TEXT, 1, 0, (0, 0), (0, 2)),
                cmd(SEND_BINARY, 2, 0, (0, 0), (0, 2)),
                cmd(CLOSE, 3, 4000, (0, 0), (0, 2)),
                cmd(SUBSCRIBE, 4, 0, (2, 1), (0, 0)),
                cmd(UNSUBSCRIBE, 5, 0, (2, 1), (0, 0)),
            ],
            b"hit",
        );
        validate(&mut raw, &mut Vec::new()).unwrap();
        let cmds = Commands::from_raw(raw);
        assert_eq!(cmds.len(), 5);
        let all: Vec<_> = cmds.iter().collect();
        assert_eq!(
            all,
            vec![
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
                Command::Subscribe {
                    conn: 4,
                    topic: "t"
                },
                Command::Unsubscribe {
                    conn: 5,
                    topic: "t"
                },
            ]
        );
    }
}
