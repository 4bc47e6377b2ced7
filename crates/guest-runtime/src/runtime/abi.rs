//! The `weir:gateway` ABI on the host side: bindings generated from
//! `wit/weir.wit`, the [`Batch`] the reactor fills (packed event headers plus
//! one shared byte buffer, both reused across batches), and the [`Commands`]
//! a guest answers with, parsed once into a validated view.
//!
//! The layout, the kind numbers and the rules an answer must follow are the
//! `weir-abi` crate's (abi/src/lib.rs, shared with the guest SDK); this
//! module adapts them to the generated bindings and to what the reactor
//! applies.

use weir_abi::header::event_conn;
use weir_abi::{encode_conn_info, CommandBuf, EventHeader, EventKind};

use crate::runtime::error::Fault;
use crate::ConnectionId;

/// Generated host bindings (sync calls, owned types).
pub(crate) mod bindings {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "gateway-handler",
        additional_derives: [PartialEq, Eq],
    });
}

/// The bindings of weir:gateway 0.3.0 (wit/0.3.0), whose components the
/// host still runs: the same batch shape, no I/O, no deferred upgrade.
pub(crate) mod bindings_v3 {
    wasmtime::component::bindgen!({
        path: "../../wit/0.3.0",
        world: "gateway-handler",
        additional_derives: [PartialEq, Eq],
    });
}

use bindings::weir::gateway::types::{self as wit, Batch as RawBatch, Commands as RawCommands};
use bindings_v3::weir::gateway::types as wit_v3;

pub use bindings::weir::gateway::types::{
    Accept, DeferredUpgrade, HttpOutcome, HttpResponse, UpgradeRequest, UpgradeResponse,
};

/// The WIT package this host implements (wit/weir.wit); named in the error
/// for a component built against another version.
pub(crate) const WIT_PACKAGE: &str = "weir:gateway@0.4.0";
/// The earlier version it still runs (wit/0.3.0/weir.wit).
pub(crate) const WIT_PACKAGE_V3: &str = "weir:gateway@0.3.0";
/// The optional interface a component exports to have its state checked
/// (`kind::inherit`).
pub(crate) const STATE_INTERFACE: &str = "weir:gateway/state@0.4.0";
pub use weir_abi::{Command, COMMAND_HEADER_BYTES, EVENT_HEADER_BYTES};

/// Largest answer (command headers plus bytes) accepted from one guest call.
/// A fixed cap rather than one derived from the route's memory: it bounds
/// what the host copies and queues per batch whatever the guest is allowed.
pub(crate) const MAX_OUTPUT_BYTES: usize = 64 << 20;

/// A kind travels as its WIT enum case index; weir-abi numbers them by hand,
/// so a reordered WIT enum fails the build here instead of mislabelling
/// every event.
const _: () = {
    use weir_abi::CommandKind as K;
    use wit::{CommandKind as W, EventKind as E};
    assert!(EventKind::Open as u8 == E::Open as u8);
    assert!(EventKind::Text as u8 == E::Text as u8);
    assert!(EventKind::Binary as u8 == E::Binary as u8);
    assert!(EventKind::Close as u8 == E::Close as u8);
    assert!(K::SendText as u8 == W::SendText as u8);
    assert!(K::SendBinary as u8 == W::SendBinary as u8);
    assert!(K::Close as u8 == W::Close as u8);
    assert!(K::PublishText as u8 == W::PublishText as u8);
    assert!(K::PublishBinary as u8 == W::PublishBinary as u8);
    assert!(K::Subscribe as u8 == W::Subscribe as u8);
    assert!(K::Unsubscribe as u8 == W::Unsubscribe as u8);
    assert!(K::SetAttachment as u8 == W::SetAttachment as u8);
    assert!(K::HttpRequest as u8 == W::HttpRequest as u8);
    assert!(K::SetTimer as u8 == W::SetTimer as u8);
    assert!(K::CancelTimer as u8 == W::CancelTimer as u8);
    assert!(K::KvSet as u8 == W::KvSet as u8);
    assert!(K::KvDelete as u8 == W::KvDelete as u8);
    assert!(EventKind::HttpResponse as u8 == E::HttpResponse as u8);
    assert!(EventKind::HttpError as u8 == E::HttpError as u8);
    assert!(EventKind::Timer as u8 == E::Timer as u8);
    // 0.3.0 numbers its kinds the same; it just has fewer.
    assert!(K::SetAttachment as u8 == wit_v3::CommandKind::SetAttachment as u8);
    assert!(EventKind::Close as u8 == wit_v3::EventKind::Close as u8);
};

/// A 0.3.0 upgrade request, from the 0.4.0 one (the same fields).
pub(crate) fn upgrade_request_v3(req: &UpgradeRequest) -> wit_v3::UpgradeRequest {
    wit_v3::UpgradeRequest {
        path: req.path.clone(),
        query: req.query.clone(),
        headers: req.headers.clone(),
        remote_addr: req.remote_addr.clone(),
        params: req.params.clone(),
    }
}

/// A 0.3.0 guest's upgrade answer as 0.4.0 spells it.
pub(crate) fn upgrade_response_from_v3(r: wit_v3::UpgradeResponse) -> UpgradeResponse {
    match r {
        wit_v3::UpgradeResponse::Accept(a) => UpgradeResponse::Accept(Accept {
            protocol: a.protocol,
            attachment: a.attachment,
        }),
        wit_v3::UpgradeResponse::Reject(status) => UpgradeResponse::Reject(status),
    }
}

/// One batch of events for one route, built by the reactor and passed to
/// [`Runner::handle`](crate::Runner::handle). `clear` keeps the allocations,
/// so a worker reuses one `Batch` for every call.
pub struct Batch {
    pub(crate) raw: RawBatch,
    /// Open events in the batch (the runner records their connection info
    /// before the call only when there are some).
    opens: usize,
}

impl Default for Batch {
    fn default() -> Self {
        Batch {
            raw: RawBatch {
                events: Vec::new(),
                data: Vec::new(),
            },
            opens: 0,
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
        let header = EventHeader {
            conn,
            kind: kind as u8,
            reserved: 0,
            code,
            offset: offset as u32,
            len: bytes.len() as u32,
        };
        self.raw.events.extend_from_slice(&header.encode());
    }

    /// `conn` was opened on this route; `info` is its connection info as
    /// [`encode_conn_info`] packs it (target, route parameters, the
    /// attachment the upgrade accepted it with).
    pub(crate) fn push_open_info(&mut self, conn: ConnectionId, info: &[u8]) {
        self.opens += 1;
        self.push(conn, EventKind::Open, 0, info);
    }

    /// `conn` was opened on this route with request target `target`
    /// (`path?query`), route parameters `params` and first attachment
    /// `attachment` (empty: none).
    pub fn push_open(
        &mut self,
        conn: ConnectionId,
        target: &str,
        params: &[(&str, &str)],
        attachment: &[u8],
    ) {
        let mut info = Vec::new();
        encode_conn_info(&mut info, target, params.iter().copied(), attachment);
        self.push_open_info(conn, &info);
    }

    /// Whether the batch holds open events.
    pub(crate) fn has_opens(&self) -> bool {
        self.opens > 0
    }

    /// The open events: connection and connection info.
    pub(crate) fn opens(&self) -> impl Iterator<Item = (ConnectionId, &[u8])> + '_ {
        let (headers, _) = self.raw.events.as_chunks::<EVENT_HEADER_BYTES>();
        let data = &self.raw.data;
        headers
            .iter()
            .map(EventHeader::decode)
            .filter(|h| h.kind == EventKind::Open as u8)
            .map(move |h| {
                let start = h.offset as usize;
                (h.conn, &data[start..start + h.len as usize])
            })
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

    /// A complete message of proxied connection `conn` on its way in
    /// `direction`, for the route's filter (byte 9 carries the direction).
    pub(crate) fn push_proxy_message(
        &mut self,
        conn: ConnectionId,
        direction: weir_abi::Direction,
        text: bool,
        payload: &[u8],
    ) {
        let kind = if text {
            EventKind::ProxyText
        } else {
            EventKind::ProxyBinary
        };
        self.push(conn, kind, 0, payload);
        let at = self.raw.events.len() - EVENT_HEADER_BYTES + 9;
        self.raw.events[at] = direction as u8;
    }

    /// The proxy messages of the batch: connection and direction, in order.
    pub(crate) fn proxy_messages(
        &self,
    ) -> impl Iterator<Item = (ConnectionId, weir_abi::Direction)> + '_ {
        let (headers, _) = self.raw.events.as_chunks::<EVENT_HEADER_BYTES>();
        headers.iter().map(EventHeader::decode).filter_map(|h| {
            let proxy =
                h.kind == EventKind::ProxyText as u8 || h.kind == EventKind::ProxyBinary as u8;
            proxy
                .then(|| weir_abi::Direction::from_byte(h.reserved).map(|d| (h.conn, d)))
                .flatten()
        })
    }

    /// A question for a real-time namespace's guest (rt-subscribe or
    /// rt-publish; `bytes` laid out as `weir_abi::realtime` says).
    pub(crate) fn push_rt_question(&mut self, conn: ConnectionId, kind: EventKind, bytes: &[u8]) {
        self.push(conn, kind, 0, bytes);
    }

    /// The call ids of the batch's questions for an attached guest (a
    /// namespace's, a Pusher app's).
    pub(crate) fn rt_calls(&self) -> impl Iterator<Item = u64> + '_ {
        let (headers, _) = self.raw.events.as_chunks::<EVENT_HEADER_BYTES>();
        headers.iter().map(EventHeader::decode).filter_map(|h| {
            let rt = matches!(
                EventKind::from_byte(h.kind),
                Some(
                    EventKind::RtSubscribe
                        | EventKind::RtPublish
                        | EventKind::PusherConnect
                        | EventKind::PusherSubscribe
                        | EventKind::PusherClientEvent
                )
            );
            let at = h.offset as usize;
            let call = self.raw.data.get(at..at + 8)?;
            rt.then(|| u64::from_le_bytes(call.try_into().expect("8 bytes")))
        })
    }

    /// `conn` is gone, with the peer's close code (1005 none, 1006 dropped).
    pub(crate) fn push_close(&mut self, conn: ConnectionId, code: u16, reason: &str) {
        self.push(conn, EventKind::Close, code, reason.as_bytes());
    }

    /// An answer of the route's I/O (0.4.0 guests only).
    pub(crate) fn push_io(&mut self, event: &crate::services::io::IoEvent) {
        use crate::services::io::IoEvent;
        let mut bytes = Vec::new();
        match event {
            IoEvent::Response {
                conn,
                tag,
                status,
                head,
                body,
            } => {
                bytes.extend_from_slice(&tag.to_le_bytes());
                bytes.extend_from_slice(&(head.len() as u32).to_le_bytes());
                bytes.extend_from_slice(head.as_bytes());
                bytes.extend_from_slice(body);
                self.push(*conn, EventKind::HttpResponse, *status, &bytes);
            }
            IoEvent::Error {
                conn,
                tag,
                reason,
                message,
            } => {
                bytes.extend_from_slice(&tag.to_le_bytes());
                bytes.extend_from_slice(message.as_bytes());
                self.push(*conn, EventKind::HttpError, *reason as u16, &bytes);
            }
            IoEvent::Timer { conn, tag } => {
                self.push(*conn, EventKind::Timer, 0, &tag.to_le_bytes());
            }
            IoEvent::KvError { key, reason } => {
                self.push(0, EventKind::KvError, *reason as u16, key);
            }
            IoEvent::RealtimeRead {
                conn,
                presence,
                code,
                bytes,
            } => {
                let kind = if *presence {
                    EventKind::Presence
                } else {
                    EventKind::History
                };
                self.push(*conn, kind, *code, bytes);
            }
        }
    }

    /// Forget the events, keep the buffers.
    pub fn clear(&mut self) {
        self.raw.events.clear();
        self.raw.data.clear();
        self.opens = 0;
    }

    pub fn is_empty(&self) -> bool {
        self.raw.events.is_empty()
    }

    /// Number of events.
    pub fn len(&self) -> usize {
        self.raw.events.len() / EVENT_HEADER_BYTES
    }

    /// Payload bytes queued so far (to decide when to flush).
    pub(crate) fn data_len(&self) -> usize {
        self.raw.data.len()
    }

    /// The connections that have an event in this batch, in event order,
    /// possibly repeated (the caller closes these when the batch faults).
    pub fn connections(&self) -> impl Iterator<Item = ConnectionId> + '_ {
        let (headers, _) = self.raw.events.as_chunks::<EVENT_HEADER_BYTES>();
        headers.iter().map(event_conn)
    }
}

/// A guest's answer to one batch, checked once when it arrived
/// ([`Commands::parse`]); walking it cannot fail. Attachment commands are
/// applied by the runner and not yielded.
pub struct Commands {
    buf: CommandBuf,
}

impl Commands {
    pub(crate) fn empty() -> Self {
        Commands {
            buf: CommandBuf::new(),
        }
    }

    /// Take a guest's answer: refuse it when it is over
    /// [`MAX_OUTPUT_BYTES`] or breaks the ABI (weir-abi's rules), keep its
    /// buffers otherwise.
    pub(crate) fn parse(raw: RawCommands) -> Result<Self, Fault> {
        let bytes = raw.data.len().saturating_add(raw.commands.len());
        if bytes > MAX_OUTPUT_BYTES {
            return Err(Fault::OutputTooLarge {
                bytes,
                cap: MAX_OUTPUT_BYTES,
            });
        }
        let buf = CommandBuf::parse(raw.commands, raw.data)?;
        Ok(Commands { buf })
    }

    /// A 0.3.0 guest's answer: as [`Commands::parse`], and the kinds 0.4.0
    /// added are unknown to it.
    pub(crate) fn parse_v3(raw: wit_v3::Commands) -> Result<Self, Fault> {
        let (headers, _) = raw.commands.as_chunks::<COMMAND_HEADER_BYTES>();
        if let Some((index, kind)) = headers
            .iter()
            .map(|h| h[8])
            .enumerate()
            .find(|&(_, kind)| kind > weir_abi::LAST_V3_COMMAND_KIND)
        {
            return Err(Fault::InvalidOutput(weir_abi::AbiError::UnknownKind {
                index,
                kind,
            }));
        }
        let raw = RawCommands {
            commands: raw.commands,
            data: raw.data,
        };
        let bytes = raw.data.len().saturating_add(raw.commands.len());
        if bytes > MAX_OUTPUT_BYTES {
            return Err(Fault::OutputTooLarge {
                bytes,
                cap: MAX_OUTPUT_BYTES,
            });
        }
        let buf = CommandBuf::parse(raw.commands, raw.data)?;
        Ok(Commands { buf })
    }

    /// The commands, in the order the guest issued them, without the
    /// set-attachment ones (the runner applied those).
    pub fn iter(&self) -> impl Iterator<Item = Command<'_>> + '_ {
        self.buf
            .list()
            .iter()
            .filter(|c| !matches!(c, Command::SetAttachment { .. }))
    }

    /// Number of commands the iterator yields.
    pub fn len(&self) -> usize {
        let list = self.buf.list();
        list.len() - list.set_attachments()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the answer holds set-attachment commands for the runner.
    pub(crate) fn has_attachments(&self) -> bool {
        self.buf.list().set_attachments() > 0
    }

    /// The set-attachment commands: (index among all commands, connection,
    /// bytes to store; empty clears).
    pub(crate) fn attachments(&self) -> impl Iterator<Item = (usize, ConnectionId, &[u8])> + '_ {
        self.buf
            .list()
            .iter()
            .enumerate()
            .filter_map(|(i, c)| match c {
                weir_abi::Command::SetAttachment { conn, attachment } => {
                    Some((i, conn, attachment))
                }
                _ => None,
            })
    }

    /// Turn the command at `index` into `close(conn, 1011)`: an attachment
    /// over the route's cap costs that connection, not the batch.
    pub(crate) fn replace_with_close(&mut self, index: usize) {
        self.buf
            .replace_with_close(index, weir_abi::FALLBACK_CLOSE_CODE);
    }
}

#[cfg(test)]
mod tests {
    //! The codec itself is tested in weir-abi; these check the host's use
    //! of it: how a `Batch` is filled, and what `Commands` refuses, yields
    //! and lets the runner change.

    use weir_abi::{AbiError, CommandHeader, CommandKind};

    use super::*;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
            .collect()
    }

    /// One command header, reserved byte and code 0.
    fn cmd(kind: CommandKind, conn: u64, topic: (u32, u32), payload: (u32, u32)) -> CommandHeader {
        CommandHeader {
            conn,
            kind: kind as u8,
            topic_offset: topic.0,
            topic_len: topic.1,
            offset: payload.0,
            len: payload.1,
            ..CommandHeader::default()
        }
    }

    /// A guest's answer, packed.
    fn answer(cmds: &[CommandHeader], data: &[u8]) -> RawCommands {
        RawCommands {
            commands: cmds.iter().flat_map(CommandHeader::encode).collect(),
            data: data.to_vec(),
        }
    }

    #[test]
    fn a_batch_is_packed_as_the_shared_vectors_say() {
        let vectors: serde_json::Value =
            serde_json::from_str(include_str!("../../../../abi/vectors/events.json")).unwrap();
        let case = &vectors["valid"][0];
        assert_eq!(case["name"], "every-kind");
        let mut b = Batch::new();
        let events = case["events"].as_array().unwrap();
        for e in events {
            let conn = e["conn"].as_u64().unwrap();
            let str_of = |key: &str| e[key].as_str().unwrap().to_string();
            match e["kind"].as_str().unwrap() {
                "open" => {
                    let params: Vec<(String, String)> =
                        serde_json::from_value(e["params"].clone()).unwrap();
                    let params: Vec<(&str, &str)> = params
                        .iter()
                        .map(|(n, v)| (n.as_str(), v.as_str()))
                        .collect();
                    b.push_open(
                        conn,
                        &str_of("target"),
                        &params,
                        &unhex(&str_of("attachment_hex")),
                    )
                }
                "text" => b.push_message(conn, true, str_of("text").as_bytes()),
                "binary" => b.push_message(conn, false, &unhex(&str_of("payload_hex"))),
                "close" => {
                    b.push_close(conn, e["code"].as_u64().unwrap() as u16, &str_of("reason"))
                }
                other => panic!("kind {other}"),
            }
        }
        assert_eq!(hex(&b.raw.events), case["headers_hex"]);
        assert_eq!(hex(&b.raw.data), case["data_hex"]);
        assert_eq!(b.len(), events.len());
        assert_eq!(b.data_len(), case["data_hex"].as_str().unwrap().len() / 2);
        let conns: Vec<_> = b.connections().collect();
        let want: Vec<_> = events.iter().map(|e| e["conn"].as_u64().unwrap()).collect();
        assert_eq!(conns, want);
    }

    #[test]
    fn clear_keeps_the_buffers() {
        let mut b = Batch::new();
        b.push_open(1, "/chat/a", &[], b"");
        b.push_message(1, true, b"hi");
        b.push_close(1, 1000, "bye");
        b.clear();
        assert!(b.is_empty());
        assert_eq!((b.len(), b.data_len()), (0, 0));
        assert!(b.raw.data.capacity() >= 20, "clear keeps the buffer");
        assert!(!b.has_opens());
        assert!(b.raw.events.capacity() >= 60, "clear keeps the headers");
    }

    #[test]
    fn oversized_output_is_refused_before_it_is_parsed() {
        let raw = RawCommands {
            // Not whole headers either: the size is what gets reported.
            commands: vec![0; 3],
            data: vec![0; MAX_OUTPUT_BYTES],
        };
        assert!(matches!(
            Commands::parse(raw),
            Err(Fault::OutputTooLarge { bytes, cap: MAX_OUTPUT_BYTES }) if bytes == MAX_OUTPUT_BYTES + 3
        ));
    }

    #[test]
    fn an_answer_that_breaks_the_abi_is_an_invalid_output_fault() {
        let raw = answer(&[cmd(CommandKind::Subscribe, 1, (0, 0), (0, 0))], b"");
        let fault = Commands::parse(raw).err().unwrap();
        assert_eq!(
            fault,
            Fault::InvalidOutput(AbiError::EmptyTopic { index: 0 })
        );
        assert_eq!(fault.close_code(), 1011);
        assert!(fault.to_string().contains("empty topic"), "{fault}");
    }

    #[test]
    fn attachments_are_for_the_runner_and_not_yielded() {
        let raw = answer(
            &[
                cmd(CommandKind::PublishText, 0, (0, 1), (1, 2)),
                cmd(CommandKind::SetAttachment, 9, (0, 0), (1, 2)),
                cmd(CommandKind::Subscribe, 9, (0, 1), (0, 0)),
            ],
            b"tok",
        );
        let mut cmds = Commands::parse(raw).unwrap();
        assert_eq!(cmds.len(), 2);
        assert!(cmds.has_attachments());
        assert_eq!(
            cmds.iter().collect::<Vec<_>>(),
            [
                Command::Publish {
                    topic: "t",
                    text: true,
                    payload: b"ok",
                    exclude: None
                },
                Command::Subscribe {
                    conn: 9,
                    topic: "t"
                },
            ]
        );
        assert_eq!(cmds.attachments().collect::<Vec<_>>(), [(1, 9, &b"ok"[..])]);
        cmds.replace_with_close(1);
        assert!(!cmds.has_attachments());
        assert_eq!(cmds.len(), 3);
        assert_eq!(
            cmds.iter().nth(1),
            Some(Command::Close {
                conn: 9,
                code: 1011,
                reason: ""
            })
        );
        assert!(Commands::empty().is_empty());
    }
}
