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
mod hook;
mod io;
pub mod pusher;
pub mod realtime;
mod request;
mod runtime;
mod state;
pub mod testing;

pub use conn::{Conn, Context};
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

/// A WebSocket handler. One value of it lives in each guest instance
/// (created with `Default` on first use) and serves every connection of the
/// route that the instance's gateway worker holds.
pub trait Handler: Default + 'static {
    /// Typed state kept per connection: `Default` on open unless the upgrade
    /// gave one ([`Upgrade::accept_with`]); saved after every hook that
    /// changed it (see [`ConnState`]). `()` for none.
    type State: ConnState;

    /// Decide on an HTTP upgrade request, before the connection exists.
    /// Default: accept, no subprotocol, `Default` state.
    ///
    /// ```no_run
    /// # use weir_guest::{Request, Upgrade};
    /// fn on_upgrade(req: &Request) -> Upgrade {
    ///     match req.header("authorization") {
    ///         Some("Bearer let-me-in") => Upgrade::accept(),
    ///         _ => Upgrade::unauthorized(),
    ///     }
    /// }
    /// ```
    fn on_upgrade(&mut self, req: &Request) -> Upgrade<Self::State> {
        let _ = req;
        Upgrade::accept()
    }

    /// The connection opened: a place to subscribe it to topics or greet it.
    ///
    /// ```no_run
    /// # use weir_guest::Conn;
    /// fn on_open(conn: &mut Conn<()>) {
    ///     let room = conn.param("room").unwrap_or("lobby").to_string();
    ///     conn.subscribe(&room);
    ///     conn.send_text("welcome");
    /// }
    /// ```
    fn on_open(&mut self, conn: &mut Conn<'_, Self::State>) {
        let _ = conn;
    }

    /// A complete message arrived on `conn`.
    ///
    /// ```no_run
    /// # use weir_guest::{Conn, Message};
    /// fn on_message(conn: &mut Conn<()>, msg: Message) {
    ///     match msg {
    ///         Message::Text(t) => conn.send_text(&t.to_uppercase()),
    ///         Message::Binary(_) => conn.close(1003, "text only"),
    ///     }
    /// }
    /// ```
    fn on_message(&mut self, conn: &mut Conn<'_, Self::State>, msg: Message<'_>);

    /// `conn` is gone (`code` 1005: the peer sent no code, 1006: the TCP
    /// connection dropped). Commands for `conn` itself have no effect any
    /// more (publishing to others does); its state is dropped after this.
    ///
    /// ```no_run
    /// # use weir_guest::{Conn, Message};
    /// fn on_close(conn: &mut Conn<()>, code: u16, _reason: &str) {
    ///     let msg = format!("{} left ({code})", conn.id());
    ///     conn.publish("lobby", Message::Text(&msg));
    /// }
    /// ```
    fn on_close(&mut self, conn: &mut Conn<'_, Self::State>, code: u16, reason: &str) {
        let _ = (conn, code, reason);
    }

    /// The answer to a request ([`Conn::fetch`], [`Context::fetch`]), or
    /// why there is none (refused by `allow_outbound`, timeout, connect
    /// failure, too large, busy). `conn` is the connection the request was
    /// for, with its state, or the route's handle ([`Conn::is_route`]).
    ///
    /// ```no_run
    /// # use weir_guest::{Conn, HttpResult, Tag};
    /// fn on_response(conn: &mut Conn<()>, _tag: Tag, result: HttpResult) {
    ///     match result {
    ///         Ok(r) if r.is_success() => conn.send_text(r.text().unwrap_or("")),
    ///         Ok(r) => conn.send_fmt(format_args!("backend said {}", r.status)),
    ///         Err(e) => conn.send_fmt(format_args!("backend: {}", e.reason_str())),
    ///     }
    /// }
    /// ```
    fn on_response(&mut self, conn: &mut Conn<'_, Self::State>, tag: Tag, result: HttpResult<'_>) {
        let _ = (conn, tag, result);
    }

    /// A timer came due ([`Conn::set_timer`], [`Context::set_timer`]).
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use weir_guest::{Conn, Message, Tag};
    /// fn on_timer(conn: &mut Conn<()>, _tag: Tag) {
    ///     conn.publish("clock", Message::Text("tick"));
    ///     conn.ctx().set_timer(Duration::from_secs(1));
    /// }
    /// ```
    fn on_timer(&mut self, conn: &mut Conn<'_, Self::State>, tag: Tag) {
        let _ = (conn, tag);
    }

    /// A key-value write of an earlier batch ([`Context::kv_set`],
    /// [`Context::kv_delete`]) was refused and not applied: the store is at
    /// its quota (`kv_max_bytes`, `kv_max_keys`), its write queue is full
    /// (its disk or Redis is not keeping up), the key or value is over its
    /// cap, or the route has no `kv`. `route` is the route's handle
    /// ([`Conn::is_route`]); `reason` is None for a reason this SDK does not
    /// know. Default: nothing (the gateway counts and logs refusals).
    ///
    /// ```no_run
    /// # use weir_guest::{Conn, KvErrorReason, Message};
    /// fn on_kv_error(route: &mut Conn<()>, key: &[u8], reason: Option<KvErrorReason>) {
    ///     let why = reason.map_or("unknown", KvErrorReason::as_str);
    ///     route.publish("admin", Message::Text(&format!("store refused a write: {why}")));
    /// }
    /// ```
    fn on_kv_error(
        &mut self,
        route: &mut Conn<'_, Self::State>,
        key: &[u8],
        reason: Option<KvErrorReason>,
    ) {
        let _ = (route, key, reason);
    }

    /// The answer to a history read ([`Conn::history`], [`Context::history`];
    /// a `realtime = true` route): the channel's position (offset, epoch)
    /// and publications (offset, data as JSON text), or why there is none
    /// (bad channel, history off, unavailable, busy, not a realtime route).
    ///
    /// ```no_run
    /// # use weir_guest::{Conn, HistoryResult, Tag};
    /// fn on_history(conn: &mut Conn<()>, _tag: Tag, result: HistoryResult) {
    ///     match result {
    ///         Ok(h) => h.publications.for_each(|(_, data)| conn.send_text(data)),
    ///         Err(e) => conn.send_fmt(format_args!("no history: {}", e.reason_str())),
    ///     }
    /// }
    /// ```
    fn on_history(
        &mut self,
        conn: &mut Conn<'_, Self::State>,
        tag: Tag,
        result: HistoryResult<'_>,
    ) {
        let _ = (conn, tag, result);
    }

    /// The answer to a presence read ([`Conn::presence`],
    /// [`Context::presence`]): the channel's members (client id, user,
    /// connection info as JSON text), or why there are none.
    ///
    /// ```no_run
    /// # use weir_guest::{Conn, PresenceResult, Tag};
    /// fn on_presence(conn: &mut Conn<()>, _tag: Tag, result: PresenceResult) {
    ///     if let Ok(members) = result {
    ///         conn.send_fmt(format_args!("{} here", members.count()));
    ///     }
    /// }
    /// ```
    fn on_presence(
        &mut self,
        conn: &mut Conn<'_, Self::State>,
        tag: Tag,
        result: PresenceResult<'_>,
    ) {
        let _ = (conn, tag, result);
    }

    /// The outcome of the request an upgrade was deferred with
    /// ([`Upgrade::defer`]): accept or reject now. Default: 500.
    ///
    /// ```no_run
    /// # use weir_guest::{HttpRequest, HttpResult, Request, Upgrade};
    /// fn on_upgrade(req: &Request) -> Upgrade {
    ///     let token = req.query_param("token").unwrap_or("");
    ///     Upgrade::defer(HttpRequest::get(&format!("http://127.0.0.1:9000/auth?token={token}")))
    /// }
    /// fn on_upgrade_response(_req: &Request, result: HttpResult) -> Upgrade {
    ///     match result {
    ///         Ok(r) if r.status == 200 => Upgrade::accept(),
    ///         Ok(_) => Upgrade::unauthorized(),
    ///         Err(_) => Upgrade::reject(503),
    ///     }
    /// }
    /// ```
    fn on_upgrade_response(
        &mut self,
        req: &Request,
        result: HttpResult<'_>,
    ) -> Upgrade<Self::State> {
        let _ = (req, result);
        Upgrade::reject(500)
    }

    /// A proxy route's filter (`filter = "x.wasm"` on a `native = "proxy"`
    /// route): a complete message on its way through `conn`, from the
    /// client to the upstream ([`Direction::ToUpstream`]) or back
    /// ([`Direction::ToClient`]). The verdict decides what goes on; messages
    /// of one direction go on in the order they came. On a filter,
    /// `on_message` is never called. Default: forward everything.
    ///
    /// ```no_run
    /// # use weir_guest::{Conn, Direction, Message, Verdict};
    /// fn on_proxy_message(_conn: &mut Conn<()>, _dir: Direction, msg: Message) -> Verdict {
    ///     match msg {
    ///         Message::Text(t) if t.contains("secret") => Verdict::Drop,
    ///         Message::Text(t) => Verdict::ReplaceText(t.replace("colour", "color")),
    ///         Message::Binary(_) => Verdict::Forward,
    ///     }
    /// }
    /// ```
    fn on_proxy_message(
        &mut self,
        conn: &mut Conn<'_, Self::State>,
        direction: Direction,
        msg: Message<'_>,
    ) -> Verdict {
        let _ = (conn, direction, msg);
        Verdict::Forward
    }

    /// A real-time namespace's guest (`guest = "x.wasm"` on a
    /// `[[namespaces]]` entry of a centrifugo route): a client asks to
    /// subscribe to one of the namespace's channels, after the namespace's
    /// own checks passed. The subscribe waits for the answer. Default:
    /// allow.
    ///
    /// ```no_run
    /// # use weir_guest::{SubDecision, SubscribeRequest};
    /// fn on_subscribe(req: &SubscribeRequest) -> SubDecision {
    ///     if req.channel.starts_with("chat:secret") {
    ///         SubDecision::Refuse(103)
    ///     } else {
    ///         SubDecision::Allow
    ///     }
    /// }
    /// ```
    fn on_subscribe(&mut self, req: &SubscribeRequest<'_>) -> SubDecision {
        let _ = req;
        SubDecision::Allow
    }

    /// A real-time namespace's guest: a client publishes into one of the
    /// namespace's channels; only what the answer passes is published
    /// (server API publishes do not come here). Default: pass.
    fn on_client_publish(&mut self, req: &PublishRequest<'_>) -> PubDecision {
        let _ = req;
        PubDecision::Pass
    }

    /// A Pusher app's guest (`guest = "x.wasm"` on a pusher route's
    /// `[[route.apps]]` entry): a connection of the app opens;
    /// `pusher:connection_established` waits for the answer. Default: allow.
    fn on_pusher_connect(&mut self, req: &ConnectRequest<'_>) -> ConnectDecision {
        let _ = req;
        ConnectDecision::Allow
    }

    /// A Pusher app's guest: a client subscribes. Allow leaves private and
    /// presence channels to weir's signature check; authorise subscribes
    /// whatever the signature (the guest checked the client's `auth`
    /// itself, e.g. a JWT). Default: allow.
    ///
    /// ```no_run
    /// # use weir_guest::{ChannelDecision, ChannelRequest};
    /// fn on_pusher_subscribe(req: &ChannelRequest) -> ChannelDecision {
    ///     if req.channel.starts_with("private-admin-") {
    ///         ChannelDecision::Refuse(403, "admins only".into())
    ///     } else {
    ///         ChannelDecision::Allow
    ///     }
    /// }
    /// ```
    fn on_pusher_subscribe(&mut self, req: &ChannelRequest<'_>) -> ChannelDecision {
        let _ = req;
        ChannelDecision::Allow
    }

    /// A Pusher app's guest: a client event; only what the answer passes
    /// reaches the channel's other subscribers. Default: pass.
    fn on_pusher_client_event(&mut self, req: &ClientEventRequest<'_>) -> PubDecision {
        let _ = req;
        PubDecision::Pass
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
pub mod __private {
    use super::*;

    pub use bindings::exports::weir::gateway::handler::Guest;
    pub use bindings::exports::weir::gateway::state::Guest as StateGuest;
    pub use bindings::weir::gateway::types::{
        Batch as RawBatch, Commands as RawCommands, HttpOutcome as RawHttpOutcome,
        UpgradeRequest as RawUpgradeRequest, UpgradeResponse as RawUpgradeResponse,
    };

    fn request(raw: UpgradeRequest) -> Request {
        Request {
            path: raw.path,
            query: raw.query,
            headers: raw.headers,
            remote_addr: raw.remote_addr,
            params: raw.params,
        }
    }

    fn response(answer: UpgradeAnswer) -> UpgradeResponse {
        match answer {
            UpgradeAnswer::Accept {
                protocol,
                attachment,
            } => UpgradeResponse::Accept(Accept {
                protocol,
                attachment,
            }),
            UpgradeAnswer::Reject(status) => UpgradeResponse::Reject(status),
            UpgradeAnswer::Defer { tag, request } => {
                let (method, url, headers, body) = request.into_parts();
                UpgradeResponse::Defer(DeferredUpgrade {
                    tag,
                    request: RawHttpRequest {
                        method,
                        url,
                        headers,
                        body,
                    },
                })
            }
        }
    }

    /// The `upgrade` export: builds a [`Request`] and asks the handler.
    pub fn upgrade<H: Handler>(raw: UpgradeRequest) -> UpgradeResponse {
        let req = request(raw);
        response(with_runtime::<H, _>(|rt| rt.upgrade(&req)))
    }

    /// The `resume-upgrade` export: a deferred upgrade's outcome.
    pub fn resume_upgrade<H: Handler>(
        raw: UpgradeRequest,
        outcome: HttpOutcome,
    ) -> UpgradeResponse {
        let req = request(raw);
        let head: String;
        let result = match &outcome {
            HttpOutcome::Response(r) => {
                head = r
                    .headers
                    .iter()
                    .map(|(n, v)| format!("{n}: {v}"))
                    .collect::<Vec<_>>()
                    .join("\n");
                Ok(HttpResponse::new(r.status, &head, &r.body))
            }
            HttpOutcome::Error((code, message)) => Err(HttpError {
                reason: HttpErrorReason::from_code(*code),
                message,
            }),
        };
        response(with_runtime::<H, _>(|rt| rt.resume_upgrade(&req, result)))
    }

    /// The `check-state` export: whether each attachment decodes as the
    /// handler's state ([`ConnState::try_restore`]); nothing is kept.
    pub fn check_state<H: Handler>(attachments: Vec<Vec<u8>>) -> Vec<Option<String>> {
        attachments
            .iter()
            .map(|a| {
                if a.is_empty() {
                    return None;
                }
                <H::State as ConnState>::try_restore(a)
                    .err()
                    .map(|e| e.to_string())
            })
            .collect()
    }

    /// The `handle` export: one hook call per event, one answer per batch.
    pub fn handle<H: Handler>(batch: Batch) -> Commands {
        let ctx = with_runtime::<H, _>(|rt| {
            rt.handle(&batch.events, &batch.data, &mut |conn| {
                host::connection(conn)
            })
        });
        Commands {
            commands: ctx.commands,
            data: ctx.data,
        }
    }
}

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
