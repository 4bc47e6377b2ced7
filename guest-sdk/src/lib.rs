//! `weir-guest`: write a weir WebSocket handler as a plain Rust trait.
//!
//! The gateway calls a guest once per *batch* of events (opens, messages,
//! closes of many connections) through the `weir:gateway` WIT ABI. This crate
//! hides that: it walks the batch's packed event headers (read and checked
//! by `weir-abi`, the codec it shares with the gateway), calls your
//! [`Handler`] once per event, and packs every reply into one header buffer
//! and one byte buffer, so a message costs no guest allocation of its own.
//! It also keeps your typed per-connection
//! [`Handler::State`], and restores it from the host-held *attachment* when an
//! instance meets a connection it does not know (the gateway replaced the
//! instance that did: recycling, a trap elsewhere, `isolation = "batch"`).
//!
//! # Example: an echo handler
//!
//! `Cargo.toml`:
//!
//! ```toml
//! [lib]
//! crate-type = ["cdylib"]
//!
//! [dependencies]
//! weir-guest = { path = "../guest-sdk" }
//! ```
//!
//! `src/lib.rs`:
//!
//! ```no_run
//! use weir_guest::{ConnectionId, Context, Handler, Message};
//!
//! #[derive(Default)]
//! struct Echo;
//!
//! impl Handler for Echo {
//!     type State = ();
//!     fn on_message(&mut self, ctx: &mut Context, conn: ConnectionId, _: &mut (), msg: Message<'_>) {
//!         ctx.send(conn, msg);
//!     }
//! }
//!
//! weir_guest::export!(Echo);
//! ```
//!
//! Build it with `cargo build --release --target wasm32-wasip2` (the result is
//! a component) and point a route at the `.wasm`. Add
//! `-C link-arg=-zstack-size=65536` to `RUSTFLAGS` (as examples/.cargo does)
//! so the route's `memory` limit is not spent on a 1 MiB stack.
//!
//! These examples are compile-checked (`cargo test --doc` in guest-sdk).
//!
//! # Example: durable per-connection state
//!
//! ```no_run
//! use weir_guest::{ConnState, ConnectionId, Context, Handler, Message};
//!
//! #[derive(Default)]
//! struct Count(u64);
//!
//! impl ConnState for Count {
//!     fn restore(bytes: &[u8]) -> Self {
//!         Count(bytes.try_into().map(u64::from_le_bytes).unwrap_or(0))
//!     }
//!     fn persist(&self, out: &mut Vec<u8>) {
//!         out.extend_from_slice(&self.0.to_le_bytes());
//!     }
//! }
//!
//! #[derive(Default)]
//! struct Counter;
//!
//! impl Handler for Counter {
//!     type State = Count;
//!     fn on_message(&mut self, ctx: &mut Context, conn: ConnectionId, n: &mut Count, _: Message<'_>) {
//!         n.0 += 1;
//!         ctx.save(conn, n); // survives instance replacement
//!         ctx.send_text_fmt(conn, format_args!("{}", n.0));
//!     }
//! }
//!
//! weir_guest::export!(Counter);
//! ```
//!
//! # What the gateway guarantees
//!
//! - Events of one connection arrive in order; `on_open` comes first and
//!   `on_close` last. Text messages are valid UTF-8.
//! - Commands are applied in the order they were issued.
//! - A panic, an endless loop or running out of memory ends the *batch*: the
//!   gateway closes that batch's connections with 1011 and starts a fresh
//!   instance. Keep what must survive in an attachment ([`Context::save`]).

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};

mod request;

pub use request::{Request, Upgrade};

/// The bindings generated from `wit/weir.wit`. Public so the [`export!`]
/// macro can reach them from your crate; you should not need them.
#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        world: "gateway-handler",
        path: "../wit",
        pub_export_macro: true,
        export_macro_name: "__export_gateway_handler",
        default_bindings_module: "weir_guest::bindings",
    });
}

use bindings::weir::gateway::host;
use bindings::weir::gateway::types::{
    Batch, CommandKind, Commands, EventKind, UpgradeRequest, UpgradeResponse,
};
use weir_abi::{CommandHeader, Event, COMMAND_HEADER_BYTES, EVENT_HEADER_BYTES};

/// A kind travels as its WIT enum case index; weir-abi numbers them by hand,
/// so a reordered WIT enum fails the build here instead of misreading every
/// event.
const _: () = {
    use weir_abi::{CommandKind as K, EventKind as E};
    assert!(E::Open as u8 == EventKind::Open as u8);
    assert!(E::Text as u8 == EventKind::Text as u8);
    assert!(E::Binary as u8 == EventKind::Binary as u8);
    assert!(E::Close as u8 == EventKind::Close as u8);
    assert!(K::SendText as u8 == CommandKind::SendText as u8);
    assert!(K::SendBinary as u8 == CommandKind::SendBinary as u8);
    assert!(K::Close as u8 == CommandKind::Close as u8);
    assert!(K::PublishText as u8 == CommandKind::PublishText as u8);
    assert!(K::PublishBinary as u8 == CommandKind::PublishBinary as u8);
    assert!(K::Subscribe as u8 == CommandKind::Subscribe as u8);
    assert!(K::Unsubscribe as u8 == CommandKind::Unsubscribe as u8);
    assert!(K::SetAttachment as u8 == CommandKind::SetAttachment as u8);
};

pub use bindings::weir::gateway::host::Level;

/// Identifies one connection; unique within the gateway process, never 0.
pub type ConnectionId = u64;

/// One complete WebSocket message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message<'a> {
    /// A text message (always valid UTF-8).
    Text(&'a str),
    /// A binary message.
    Binary(&'a [u8]),
}

impl<'a> Message<'a> {
    /// The payload bytes, whatever the kind.
    pub fn as_bytes(&self) -> &'a [u8] {
        match *self {
            Message::Text(s) => s.as_bytes(),
            Message::Binary(b) => b,
        }
    }

    /// Whether this is a text message.
    pub fn is_text(&self) -> bool {
        matches!(self, Message::Text(_))
    }
}

/// Per-connection state that can outlive the instance holding it.
///
/// Whatever [`persist`](ConnState::persist) writes is stored by the host when
/// you call [`Context::save`]; [`restore`](ConnState::restore) rebuilds the
/// state from those bytes in a fresh instance. The defaults keep nothing, which
/// suits state you can afford to lose.
pub trait ConnState: Default + 'static {
    /// Rebuild the state from attachment bytes. Called when an instance sees a
    /// connection it does not know and the host holds an attachment for it.
    fn restore(attachment: &[u8]) -> Self {
        let _ = attachment;
        Self::default()
    }

    /// Append the durable part of the state to `out`.
    fn persist(&self, out: &mut Vec<u8>) {
        let _ = out;
    }
}

impl ConnState for () {}

/// A WebSocket handler. One value of it lives in each guest instance (created
/// with `Default` on first use) and serves every connection of the route on
/// that gateway worker.
pub trait Handler: Default + 'static {
    /// Typed state kept per connection, created with `Default` on open.
    type State: ConnState;

    /// Decide on an HTTP upgrade request. Default: accept, no subprotocol.
    fn on_upgrade(&mut self, req: &Request) -> Upgrade {
        let _ = req;
        Upgrade::accept()
    }

    /// A connection opened; `target` is its request target (`/path?query`).
    fn on_open(
        &mut self,
        ctx: &mut Context,
        conn: ConnectionId,
        state: &mut Self::State,
        target: &str,
    ) {
        let _ = (ctx, conn, state, target);
    }

    /// A complete message arrived on `conn`.
    fn on_message(
        &mut self,
        ctx: &mut Context,
        conn: ConnectionId,
        state: &mut Self::State,
        msg: Message<'_>,
    );

    /// `conn` is gone (`code` 1005: the peer sent no code, 1006: the TCP
    /// connection dropped). Commands for `conn` have no effect any more; its
    /// state is dropped after this returns.
    fn on_close(
        &mut self,
        ctx: &mut Context,
        conn: ConnectionId,
        state: &mut Self::State,
        code: u16,
        reason: &str,
    ) {
        let _ = (ctx, conn, state, code, reason);
    }
}

/// Where a handler's replies go: every method appends one command to the
/// batch's answer (no allocation per message once the buffers have grown).
pub struct Context {
    /// Packed command headers.
    commands: Vec<u8>,
    data: Vec<u8>,
}

impl Context {
    fn with_capacity(commands: usize, data: usize) -> Self {
        Context {
            commands: Vec::with_capacity(commands),
            data: Vec::with_capacity(data),
        }
    }

    /// Append `bytes` to the shared buffer and return their range.
    fn put(&mut self, bytes: &[u8]) -> (u32, u32) {
        let offset = self.data.len() as u32;
        self.data.extend_from_slice(bytes);
        (offset, bytes.len() as u32)
    }

    fn push(
        &mut self,
        conn: ConnectionId,
        kind: CommandKind,
        code: u16,
        topic: (u32, u32),
        payload: (u32, u32),
    ) {
        let header = CommandHeader::new(conn, kind as u8, code, topic, payload);
        self.commands.extend_from_slice(&header.encode());
    }

    /// Send a text message to `conn`.
    pub fn send_text(&mut self, conn: ConnectionId, text: &str) {
        let p = self.put(text.as_bytes());
        self.push(conn, CommandKind::SendText, 0, (0, 0), p);
    }

    /// Send a text message formatted straight into the output buffer
    /// (`ctx.send_text_fmt(conn, format_args!("{n}"))`), without a `String`.
    pub fn send_text_fmt(&mut self, conn: ConnectionId, args: fmt::Arguments<'_>) {
        let offset = self.data.len();
        let _ = fmt::Write::write_fmt(&mut ByteWriter(&mut self.data), args);
        let len = self.data.len() - offset;
        self.push(
            conn,
            CommandKind::SendText,
            0,
            (0, 0),
            (offset as u32, len as u32),
        );
    }

    /// Send a binary message to `conn`.
    pub fn send_binary(&mut self, conn: ConnectionId, bytes: &[u8]) {
        let p = self.put(bytes);
        self.push(conn, CommandKind::SendBinary, 0, (0, 0), p);
    }

    /// Send `msg` to `conn` as a message of the same kind.
    pub fn send(&mut self, conn: ConnectionId, msg: Message<'_>) {
        match msg {
            Message::Text(t) => self.send_text(conn, t),
            Message::Binary(b) => self.send_binary(conn, b),
        }
    }

    /// Close `conn` with `code` (1000–4999) and a short UTF-8 `reason`
    /// (at most 123 bytes; the host truncates a longer one).
    pub fn close(&mut self, conn: ConnectionId, code: u16, reason: &str) {
        let p = self.put(reason.as_bytes());
        self.push(conn, CommandKind::Close, code, (0, 0), p);
    }

    /// Deliver `msg` to every subscriber of `topic` on every gateway worker,
    /// except `except` (pass the sender to leave it out).
    pub fn publish(&mut self, topic: &str, msg: Message<'_>, except: Option<ConnectionId>) {
        let kind = if msg.is_text() {
            CommandKind::PublishText
        } else {
            CommandKind::PublishBinary
        };
        let t = self.put(topic.as_bytes());
        let p = self.put(msg.as_bytes());
        self.push(except.unwrap_or(0), kind, 0, t, p);
    }

    /// Publish a text message; see [`publish`](Self::publish).
    pub fn publish_text(&mut self, topic: &str, text: &str, except: Option<ConnectionId>) {
        self.publish(topic, Message::Text(text), except);
    }

    /// Publish a binary message; see [`publish`](Self::publish).
    pub fn publish_binary(&mut self, topic: &str, bytes: &[u8], except: Option<ConnectionId>) {
        self.publish(topic, Message::Binary(bytes), except);
    }

    /// Subscribe `conn` to `topic` (ends by itself when `conn` closes).
    pub fn subscribe(&mut self, conn: ConnectionId, topic: &str) {
        let t = self.put(topic.as_bytes());
        self.push(conn, CommandKind::Subscribe, 0, t, (0, 0));
    }

    /// Unsubscribe `conn` from `topic`.
    pub fn unsubscribe(&mut self, conn: ConnectionId, topic: &str) {
        let t = self.put(topic.as_bytes());
        self.push(conn, CommandKind::Unsubscribe, 0, t, (0, 0));
    }

    /// Store raw bytes as `conn`'s attachment (empty clears it). Only for a
    /// connection with an event in the current batch; capped by the route's
    /// `attachment_max` (over it, the gateway closes `conn` with 1011).
    pub fn set_attachment(&mut self, conn: ConnectionId, bytes: &[u8]) {
        let p = self.put(bytes);
        self.push(conn, CommandKind::SetAttachment, 0, (0, 0), p);
    }

    /// Store `state` (through [`ConnState::persist`]) as `conn`'s attachment,
    /// written straight into the output buffer.
    pub fn save<S: ConnState>(&mut self, conn: ConnectionId, state: &S) {
        let offset = self.data.len();
        state.persist(&mut self.data);
        let len = self.data.len() - offset;
        self.push(
            conn,
            CommandKind::SetAttachment,
            0,
            (0, 0),
            (offset as u32, len as u32),
        );
    }
}

/// `fmt::Write` over the output buffer.
struct ByteWriter<'a>(&'a mut Vec<u8>);

impl fmt::Write for ByteWriter<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// Write a line to the gateway log (prefixed there with the route).
pub fn log(level: Level, msg: &str) {
    host::log(level, msg);
}

/// Connection ids are handed out sequentially, so a multiplicative hash is
/// enough and avoids std's randomly seeded hasher (a WASI random call).
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (n ^ (n >> 29)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// What one instance remembers between batches.
struct Runtime<H: Handler> {
    handler: H,
    conns: HashMap<ConnectionId, H::State, BuildHasherDefault<IdHasher>>,
    /// Stands in for every connection's state when the state is zero-sized
    /// (`type State = ()`): such state holds nothing, so the map and the
    /// attachment lookups are skipped.
    scratch: H::State,
    /// Output sizes of the last batch (header bytes, data bytes), to size
    /// the next one's buffers.
    last_commands: usize,
    last_data: usize,
}

thread_local! {
    /// The instance's runtime. A component instance runs one handler type on
    /// one thread, so the downcast always succeeds.
    static RUNTIME: RefCell<Option<Box<dyn std::any::Any>>> = const { RefCell::new(None) };
}

fn with_runtime<H: Handler, R>(f: impl FnOnce(&mut Runtime<H>) -> R) -> R {
    RUNTIME.with(|cell| {
        let mut slot = cell.borrow_mut();
        let rt = slot.get_or_insert_with(|| {
            Box::new(Runtime::<H> {
                handler: H::default(),
                conns: HashMap::default(),
                scratch: H::State::default(),
                last_commands: 0,
                last_data: 0,
            })
        });
        f(rt.downcast_mut::<Runtime<H>>()
            .expect("one handler type per component"))
    })
}

/// The state of `conn`, restored from the host's attachment if this instance
/// has not seen it yet.
fn state_of<'a, S: ConnState>(
    conns: &'a mut HashMap<ConnectionId, S, BuildHasherDefault<IdHasher>>,
    scratch: &'a mut S,
    conn: ConnectionId,
) -> &'a mut S {
    if std::mem::size_of::<S>() == 0 {
        return scratch;
    }
    conns
        .entry(conn)
        .or_insert_with(|| match host::attachment(conn) {
            Some(bytes) => S::restore(&bytes),
            None => S::default(),
        })
}

/// Not public API: called by the code [`export!`] generates.
#[doc(hidden)]
pub mod __private {
    use super::*;

    pub use bindings::exports::weir::gateway::handler::Guest;
    pub use bindings::weir::gateway::types::{
        Batch as RawBatch, Commands as RawCommands, UpgradeRequest as RawUpgradeRequest,
        UpgradeResponse as RawUpgradeResponse,
    };

    /// The `upgrade` export: builds a [`Request`] and asks the handler.
    pub fn upgrade<H: Handler>(req: UpgradeRequest) -> UpgradeResponse {
        let req = Request::from_raw(req);
        with_runtime::<H, _>(|rt| match rt.handler.on_upgrade(&req) {
            Upgrade::Accept(protocol) => UpgradeResponse::Accept(protocol),
            Upgrade::Reject(status) => UpgradeResponse::Reject(status),
        })
    }

    /// The `handle` export: one handler call per event, one answer per batch.
    pub fn handle<H: Handler>(batch: Batch) -> Commands {
        with_runtime::<H, _>(|rt| {
            let event_count = batch.events.len() / EVENT_HEADER_BYTES;
            let mut ctx = Context::with_capacity(
                rt.last_commands.max(event_count * COMMAND_HEADER_BYTES),
                rt.last_data.max(batch.data.len()),
            );
            let Runtime {
                handler,
                conns,
                scratch,
                ..
            } = rt;
            // The host checked what it sends; a batch that still breaks the
            // ABI is a host bug, and failing the batch (1011 for its
            // connections) is the honest answer.
            let events = match weir_abi::parse_events(&batch.events, &batch.data) {
                Ok(events) => events,
                Err(e) => {
                    host::log(
                        Level::Error,
                        &format!("batch breaks the weir:gateway ABI: {e}"),
                    );
                    panic!("batch breaks the weir:gateway ABI: {e}");
                }
            };
            // Kinds this SDK does not know (a newer host) are skipped.
            for event in &events {
                match event {
                    Event::Open { conn, target } => {
                        let state = if std::mem::size_of::<H::State>() == 0 {
                            &mut *scratch
                        } else {
                            // A fresh state even if the id was seen before.
                            conns.insert(conn, H::State::default());
                            conns.get_mut(&conn).expect("inserted above")
                        };
                        handler.on_open(&mut ctx, conn, state, target);
                    }
                    Event::Text { conn, text } => {
                        let state = state_of(conns, scratch, conn);
                        handler.on_message(&mut ctx, conn, state, Message::Text(text));
                    }
                    Event::Binary { conn, payload } => {
                        let state = state_of(conns, scratch, conn);
                        handler.on_message(&mut ctx, conn, state, Message::Binary(payload));
                    }
                    Event::Close { conn, code, reason } => {
                        let state = state_of(conns, scratch, conn);
                        handler.on_close(&mut ctx, conn, state, code, reason);
                        conns.remove(&conn);
                    }
                }
            }
            rt.last_commands = ctx.commands.len();
            rt.last_data = ctx.data.len();
            Commands {
                commands: ctx.commands,
                data: ctx.data,
            }
        })
    }
}

/// Export a [`Handler`] type as the component's `weir:gateway/handler`.
///
/// Use it once, at the root of the handler crate: `weir_guest::export!(MyHandler);`
#[macro_export]
macro_rules! export {
    ($handler:ty) => {
        #[doc(hidden)]
        pub struct __WeirGuestExport;

        impl $crate::__private::Guest for __WeirGuestExport {
            fn upgrade(req: $crate::__private::RawUpgradeRequest) -> $crate::__private::RawUpgradeResponse {
                $crate::__private::upgrade::<$handler>(req)
            }
            fn handle(batch: $crate::__private::RawBatch) -> $crate::__private::RawCommands {
                $crate::__private::handle::<$handler>(batch)
            }
        }

        $crate::bindings::__export_gateway_handler!(__WeirGuestExport with_types_in $crate::bindings);
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The commands of the shared vector "every-kind" (abi/vectors/
    /// commands.json), issued through `Context`, pack to its exact bytes:
    /// what this SDK sends is what other SDKs are tested against.
    #[test]
    fn context_packs_answers_as_the_shared_vectors_say() {
        let vectors: serde_json::Value =
            serde_json::from_str(include_str!("../../abi/vectors/commands.json")).unwrap();
        let case = &vectors["valid"][0];
        assert_eq!(case["name"], "every-kind");
        let mut ctx = Context::with_capacity(0, 0);
        ctx.send_text(1, "héllo");
        ctx.send_binary(0x0001_0203_0405_0607, &[0, 0xff]);
        ctx.close(3, 4000, "done");
        ctx.publish_text("room", "hi all", None);
        ctx.publish_binary("room", &[1, 2], Some(4));
        ctx.subscribe(4, "room");
        ctx.unsubscribe(4, "lobby");
        ctx.set_attachment(4, b"state");
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        assert_eq!(hex(&ctx.commands), case["headers_hex"]);
        assert_eq!(hex(&ctx.data), case["data_hex"]);
    }
}
