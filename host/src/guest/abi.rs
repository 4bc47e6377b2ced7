//! The `weir:gateway` ABI on the host side: bindings generated from
//! `wit/weir.wit`, the [`Batch`] the reactor fills (fixed-size event records
//! plus one shared byte buffer, reused across batches), and the validated
//! [`Commands`] a guest answers with.

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
    Batch as RawBatch, Command as RawCommand, CommandKind, Commands as RawCommands, Event,
    EventKind,
};

pub use bindings::weir::gateway::types::{UpgradeRequest, UpgradeResponse};

/// Largest answer (command records plus bytes) accepted from one guest call.
/// A fixed cap rather than one derived from the route's memory: it bounds
/// what the host copies and queues per batch whatever the guest is allowed.
pub const MAX_OUTPUT_BYTES: usize = 64 << 20;

/// Bytes one command record takes in guest memory (for the output cap).
const COMMAND_RECORD_BYTES: usize = 40;

/// Longest close reason RFC 6455 §5.5 allows (125-byte control payload minus
/// the 2-byte code).
const MAX_CLOSE_REASON_BYTES: usize = 123;

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

    fn push(&mut self, conn: ConnectionId, kind: EventKind, code: u16, bytes: &[u8]) {
        let offset = self.raw.data.len();
        let end = offset + bytes.len();
        // The ABI addresses the buffer with u32; the reactor flushes long
        // before (it caps a batch's bytes), so this is a bug, not an input.
        assert!(end <= u32::MAX as usize, "guest batch over 4 GiB");
        self.raw.data.extend_from_slice(bytes);
        self.raw.events.push(Event {
            conn,
            kind,
            code,
            offset: offset as u32,
            len: bytes.len() as u32,
        });
    }

    /// `conn` was opened on this route; `target` is its `path?query`.
    pub fn push_open(&mut self, conn: ConnectionId, target: &str) {
        self.push(conn, EventKind::Open, 0, target.as_bytes());
    }

    /// A complete message arrived; `text` payloads must be valid UTF-8
    /// (the reactor checks, as RFC 6455 §8.1 requires).
    pub fn push_message(&mut self, conn: ConnectionId, text: bool, payload: &[u8]) {
        let kind = if text {
            EventKind::Text
        } else {
            EventKind::Binary
        };
        self.push(conn, kind, 0, payload);
    }

    /// `conn` is gone, with the peer's close code (1005 none, 1006 dropped).
    pub fn push_close(&mut self, conn: ConnectionId, code: u16, reason: &str) {
        self.push(conn, EventKind::Close, code, reason.as_bytes());
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
        self.raw.events.len()
    }

    /// Payload bytes queued so far (to decide when to flush).
    pub fn data_len(&self) -> usize {
        self.raw.data.len()
    }

    /// The connections that have an event in this batch, in event order,
    /// possibly repeated (the caller closes these when the batch faults).
    pub fn connections(&self) -> impl Iterator<Item = ConnectionId> + '_ {
        self.raw.events.iter().map(|e| e.conn)
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
        self.raw.commands.iter().filter_map(|c| self.view(c))
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
            .get(start..start + len as usize)
            .unwrap_or(&[])
    }

    fn text(&self, offset: u32, len: u32) -> &str {
        std::str::from_utf8(self.bytes(offset, len)).unwrap_or("")
    }

    fn view(&self, c: &RawCommand) -> Option<Command<'_>> {
        let payload = self.bytes(c.offset, c.len);
        let topic = || self.text(c.topic_offset, c.topic_len);
        let exclude = (c.conn != 0).then_some(c.conn);
        Some(match c.kind {
            CommandKind::SendText => Command::Send {
                conn: c.conn,
                text: true,
                payload,
            },
            CommandKind::SendBinary => Command::Send {
                conn: c.conn,
                text: false,
                payload,
            },
            CommandKind::Close => Command::Close {
                conn: c.conn,
                code: c.code,
                reason: self.text(c.offset, c.len),
            },
            CommandKind::PublishText => Command::Publish {
                topic: topic(),
                text: true,
                payload,
                exclude,
            },
            CommandKind::PublishBinary => Command::Publish {
                topic: topic(),
                text: false,
                payload,
                exclude,
            },
            CommandKind::Subscribe => Command::Subscribe {
                conn: c.conn,
                topic: topic(),
            },
            CommandKind::Unsubscribe => Command::Unsubscribe {
                conn: c.conn,
                topic: topic(),
            },
            CommandKind::SetAttachment => return None,
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

/// Check a guest's answer against the ABI, normalise close commands and
/// collect attachment requests. Everything the iterator later yields is in
/// range and UTF-8 where the kind says text.
pub(crate) fn validate(
    raw: &mut RawCommands,
    attachments: &mut Vec<AttachmentRequest>,
) -> Result<(), Fault> {
    let size = raw
        .data
        .len()
        .saturating_add(raw.commands.len().saturating_mul(COMMAND_RECORD_BYTES));
    if size > MAX_OUTPUT_BYTES {
        return Err(Fault::OutputTooLarge {
            bytes: size,
            cap: MAX_OUTPUT_BYTES,
        });
    }
    let data = &raw.data;
    let range = |what: &str, i: usize, offset: u32, len: u32| -> Result<&[u8], Fault> {
        let start = offset as usize;
        data.get(start..start + len as usize).ok_or_else(|| {
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
    for (i, c) in raw.commands.iter_mut().enumerate() {
        let payload = range("payload", i, c.offset, c.len)?;
        let topic = range("topic", i, c.topic_offset, c.topic_len)?;
        match c.kind {
            CommandKind::SendText | CommandKind::PublishText => utf8("text payload", i, payload)?,
            CommandKind::Close => {
                utf8("close reason", i, payload)?;
                if !sendable_close_code(c.code) {
                    c.code = 1011;
                }
                if payload.len() > MAX_CLOSE_REASON_BYTES {
                    let mut cut = MAX_CLOSE_REASON_BYTES;
                    while payload[cut] & 0xC0 == 0x80 {
                        cut -= 1;
                    }
                    c.len = cut as u32;
                }
            }
            CommandKind::SetAttachment => attachments.push(AttachmentRequest {
                index: i,
                conn: c.conn,
                offset: c.offset as usize,
                len: c.len as usize,
            }),
            CommandKind::SendBinary | CommandKind::PublishBinary => {}
            CommandKind::Subscribe | CommandKind::Unsubscribe => {}
        }
        if matches!(
            c.kind,
            CommandKind::PublishText
                | CommandKind::PublishBinary
                | CommandKind::Subscribe
                | CommandKind::Unsubscribe
        ) {
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
    let c = &mut raw.commands[index];
    *c = RawCommand {
        conn: c.conn,
        kind: CommandKind::Close,
        code: 1011,
        topic_offset: 0,
        topic_len: 0,
        offset: 0,
        len: 0,
    };
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
        kind: CommandKind,
        conn: u64,
        code: u16,
        topic: (u32, u32),
        payload: (u32, u32),
    ) -> RawCommand {
        RawCommand {
            conn,
            kind,
            code,
            topic_offset: topic.0,
            topic_len: topic.1,
            offset: payload.0,
            len: payload.1,
        }
    }

    #[test]
    fn batch_records_ranges_into_one_buffer() {
        let mut b = Batch::new();
        b.push_open(1, "/chat/a");
        b.push_message(1, true, b"hi");
        b.push_close(1, 1000, "bye");
        assert_eq!(b.len(), 3);
        let e = &b.raw.events[1];
        assert_eq!(&b.raw.data[e.offset as usize..][..e.len as usize], b"hi");
        b.clear();
        assert!(b.is_empty());
        assert!(b.raw.data.capacity() >= 12, "clear keeps the buffer");
    }

    #[test]
    fn out_of_range_payload_is_invalid() {
        let mut raw = RawCommands {
            commands: vec![cmd(CommandKind::SendBinary, 1, 0, (0, 0), (2, 5))],
            data: vec![0; 4],
        };
        assert!(matches!(
            validate(&mut raw, &mut Vec::new()),
            Err(Fault::InvalidOutput(_))
        ));
    }

    #[test]
    fn text_must_be_utf8_and_topics_non_empty() {
        let mut raw = RawCommands {
            commands: vec![cmd(CommandKind::SendText, 1, 0, (0, 0), (0, 2))],
            data: vec![0xff, 0xfe],
        };
        assert!(matches!(
            validate(&mut raw, &mut Vec::new()),
            Err(Fault::InvalidOutput(_))
        ));
        let mut raw = RawCommands {
            commands: vec![cmd(CommandKind::Subscribe, 1, 0, (0, 0), (0, 0))],
            data: vec![],
        };
        assert!(matches!(
            validate(&mut raw, &mut Vec::new()),
            Err(Fault::InvalidOutput(_))
        ));
    }

    #[test]
    fn close_code_and_reason_are_normalised() {
        // RFC 6455 §7.4.1: 1005 must not be sent; §5.5: reason ≤ 123 bytes.
        let reason = "é".repeat(100); // 200 bytes, 2-byte chars
        let mut raw = RawCommands {
            commands: vec![cmd(
                CommandKind::Close,
                7,
                1005,
                (0, 0),
                (0, reason.len() as u32),
            )],
            data: reason.into_bytes(),
        };
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
        let mut raw = RawCommands {
            commands: vec![
                cmd(CommandKind::PublishText, 0, 0, (0, 1), (1, 2)),
                cmd(CommandKind::PublishBinary, 9, 0, (0, 1), (1, 2)),
                cmd(CommandKind::SetAttachment, 9, 0, (0, 0), (1, 2)),
            ],
            data: b"tok".to_vec(),
        };
        let mut att = Vec::new();
        validate(&mut raw, &mut att).unwrap();
        assert_eq!(att.len(), 1);
        let cmds = Commands::from_raw(raw);
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
    }
}
