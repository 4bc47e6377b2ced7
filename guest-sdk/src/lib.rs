//! `weir-guest`: write a weir WebSocket handler as a plain Rust trait.
//!
//! Implement [`Handler`]: each hook gets a [`Conn`], the connection the
//! event is about — its id, route parameters, typed state, and everything
//! a handler can do (send, close, subscribe, publish). Export it with
//! [`export!`]; build it with `weir build` (a project made by `weir new`)
//! and point a route at the `.wasm`. Test it natively, without a gateway,
//! with [`testing::TestRoute`].
//!
//! # Example: chat rooms
//!
//! A route `path = "/chat/{room}"`; each message reaches every other member
//! of the room:
//!
//! ```no_run
//! use weir_guest::{Conn, Handler, Message};
//!
//! #[derive(Default)]
//! struct Chat;
//!
//! impl Handler for Chat {
//!     type State = ();
//!     fn on_open(&mut self, conn: &mut Conn<()>) {
//!         let room = conn.param("room").unwrap_or("lobby").to_string();
//!         conn.subscribe(&room);
//!     }
//!     fn on_message(&mut self, conn: &mut Conn<()>, msg: Message) {
//!         let room = conn.param("room").unwrap_or("lobby").to_string();
//!         conn.publish(&room, msg);
//!     }
//! }
//!
//! weir_guest::export!(Chat);
//! ```
//!
//! # Example: state that saves itself, and who is behind the upgrade
//!
//! With the `serde` feature, any `Serialize + Deserialize + Default` type
//! is connection state. Changing it (through `DerefMut`: `conn.sent += 1`)
//! marks it; the SDK writes it to the connection's host-held attachment
//! when the hook returns, and a fresh instance (after a fault, a recycle, a
//! deploy) restores it. The upgrade hook can start a connection with a
//! state of its own:
//!
//! ```no_run
//! # #[cfg(feature = "serde")] mod with_serde {
//! use weir_guest::{Conn, Handler, Message, Request, Upgrade};
//!
//! #[derive(Default, serde::Serialize, serde::Deserialize)]
//! struct User {
//!     name: String,
//!     sent: u64,
//! }
//!
//! #[derive(Default)]
//! struct Greeter;
//!
//! impl Handler for Greeter {
//!     type State = User;
//!     fn on_upgrade(&mut self, req: &Request) -> Upgrade<User> {
//!         match req.query_param("user") {
//!             Some(name) => Upgrade::accept_with(User { name: name.into(), sent: 0 }),
//!             None => Upgrade::unauthorized(),
//!         }
//!     }
//!     fn on_message(&mut self, conn: &mut Conn<User>, _: Message) {
//!         conn.sent += 1;
//!         let (name, sent) = (conn.name.clone(), conn.sent);
//!         conn.send_fmt(format_args!("{name}: message {sent}"));
//!     }
//! }
//!
//! weir_guest::export!(Greeter);
//! # }
//! ```
//!
//! Without `serde`, implement [`ConnState`] by hand (`restore`/`persist`
//! over bytes). The examples here are compile-checked (`cargo test --doc`).
//!
//! # What the gateway guarantees
//!
//! - Events of one connection arrive in order; `on_open` comes first and
//!   `on_close` last. Text messages are valid UTF-8.
//! - Commands are applied in the order they were issued.
//! - A panic, an endless loop or running out of memory ends the *batch*:
//!   the gateway closes that batch's connections with 1011 and starts a
//!   fresh instance. Connection state (saved as above) survives that; what
//!   the handler keeps in `self` does not.
//! - `self` is per instance: each gateway worker runs its own instance of
//!   the route, and instances are replaced (after a fault, every
//!   `recycle_after` batches, every batch with `isolation = "batch"`). Keep
//!   nothing there that must be shared or durable; shared fan-out goes
//!   through topics, durable per-connection data through state.
//! - `println!`/`eprintln!` reach the gateway log (info and warn), as does
//!   [`log`]; both are rate-limited per route.

mod conn;
mod handler;
mod hook;
mod io;
pub mod pusher;
pub mod realtime;
mod request;
mod runtime;
mod state;
pub mod testing;

pub use conn::{Conn, Context};
pub use handler::Handler;
pub use hook::{PubDecision, PublishRequest, SubDecision, SubscribeRequest};
pub use io::{HttpError, HttpRequest, HttpResponse, HttpResult, Tag};
pub use pusher::{
    ChannelDecision, ChannelRequest, ClientEventRequest, ConnectDecision, ConnectRequest,
    SignatureCheck,
};
pub use realtime::{HistoryResult, PresenceResult, ReadError, ReadErrorReason};
pub use request::{Request, Upgrade};
/// What [`Migrate::migrate`] reads an older version's state as.
#[cfg(feature = "serde")]
pub use serde_json::Value as StateValue;
pub use state::{ConnState, StateError};
#[cfg(feature = "serde")]
pub use state::{Migrate, Versioned, STATE_FORMAT_TAG};
pub use weir_abi::Direction;
pub use weir_abi::HttpErrorReason;
pub use weir_abi::KvErrorReason;
pub use weir_abi::Params;

use runtime::{Runtime, UpgradeAnswer};

/// The bindings generated from `wit/weir.wit`. Public so the [`export!`]
/// macro can reach them from your crate; you should not need them.
#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        world: "stateful-handler",
        path: "../wit",
        pub_export_macro: true,
        export_macro_name: "__export_gateway_handler",
        default_bindings_module: "weir_guest::bindings",
    });
}

use bindings::weir::gateway::host;
use bindings::weir::gateway::types::{
    Accept, Batch, CommandKind, Commands, DeferredUpgrade, EventKind, HttpOutcome,
    HttpRequest as RawHttpRequest, UpgradeRequest, UpgradeResponse,
};

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
    assert!(K::HttpRequest as u8 == CommandKind::HttpRequest as u8);
    assert!(K::SetTimer as u8 == CommandKind::SetTimer as u8);
    assert!(K::CancelTimer as u8 == CommandKind::CancelTimer as u8);
    assert!(K::KvSet as u8 == CommandKind::KvSet as u8);
    assert!(K::KvDelete as u8 == CommandKind::KvDelete as u8);
    assert!(E::HttpResponse as u8 == EventKind::HttpResponse as u8);
    assert!(E::HttpError as u8 == EventKind::HttpError as u8);
    assert!(E::Timer as u8 == EventKind::Timer as u8);
};

/// How much a log line matters; mapped to the gateway's log levels.
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

/// What a proxy filter does with one message ([`Handler::on_proxy_message`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Pass the message on unchanged.
    Forward,
    /// Pass this text message on in its place.
    ReplaceText(String),
    /// Pass this binary message on in its place.
    ReplaceBinary(Vec<u8>),
    /// Pass nothing on.
    Drop,
    /// Pass nothing on and close the connection: the client gets this
    /// code and reason, the upstream a close of its own.
    Close(u16, String),
}

/// Write a line to the gateway log (prefixed there with the route). In
/// native builds ([`testing`]) the line goes to stderr.
pub fn log(level: Level, msg: &str) {
    #[cfg(target_arch = "wasm32")]
    host::log(level, msg);
    #[cfg(not(target_arch = "wasm32"))]
    eprintln!("[{level:?}] {msg}");
}

thread_local! {
    /// The instance's runtime. A component instance runs one handler type on
    /// one thread, so the downcast always succeeds.
    static RUNTIME: std::cell::RefCell<Option<Box<dyn std::any::Any>>> =
        const { std::cell::RefCell::new(None) };
}

/// Report a panic as one error line in the gateway log (where it names the
/// route): where, and the message. std's default hook would write several
/// lines to stderr, ending in a `RUST_BACKTRACE` hint that cannot apply to
/// a guest. The gateway then closes the batch's connections with 1011 and
/// logs which.
#[cfg(target_arch = "wasm32")]
fn report_panics() {
    std::panic::set_hook(Box::new(|info| {
        let msg = info.payload_as_str().unwrap_or("(no message)");
        let line = match info.location() {
            Some(at) => format!("handler panicked at {}:{}: {msg}", at.file(), at.line()),
            None => format!("handler panicked: {msg}"),
        };
        log(Level::Error, &line);
    }));
}

fn with_runtime<H: Handler, R>(f: impl FnOnce(&mut Runtime<H>) -> R) -> R {
    RUNTIME.with(|cell| {
        let mut slot = cell.borrow_mut();
        let rt = slot.get_or_insert_with(|| {
            #[cfg(target_arch = "wasm32")]
            report_panics();
            Box::new(Runtime::<H>::default())
        });
        f(rt.downcast_mut::<Runtime<H>>()
            .expect("one handler type per component"))
    })
}

/// Not public API: called by the code [`export!`] generates.
#[doc(hidden)]
#[path = "exports.rs"]
pub mod __private;

/// Export a [`Handler`] type as the component's `weir:gateway/handler`, with
/// `weir:gateway/state` (the check a deploy runs on the state it inherits).
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
            fn resume_upgrade(
                _tag: u64,
                req: $crate::__private::RawUpgradeRequest,
                outcome: $crate::__private::RawHttpOutcome,
            ) -> $crate::__private::RawUpgradeResponse {
                $crate::__private::resume_upgrade::<$handler>(req, outcome)
            }
        }

        impl $crate::__private::StateGuest for __WeirGuestExport {
            fn check_state(attachments: ::std::vec::Vec<::std::vec::Vec<u8>>) -> ::std::vec::Vec<::std::option::Option<::std::string::String>> {
                $crate::__private::check_state::<$handler>(attachments)
            }
        }

        // Only components export the ABI's symbols: their names (with `:`
        // and `@`) cannot go through a native linker's version script, and
        // native builds are for tests (weir_guest::testing).
        #[cfg(target_arch = "wasm32")]
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
        ctx.publish("room", Message::Text("hi all"), None);
        ctx.publish("room", Message::Binary(&[1, 2]), Some(4));
        ctx.subscribe(4, "room");
        ctx.unsubscribe(4, "lobby");
        ctx.set_attachment(4, b"state");
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        assert_eq!(hex(&ctx.commands), case["headers_hex"]);
        assert_eq!(hex(&ctx.data), case["data_hex"]);
    }
}
