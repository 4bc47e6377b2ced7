//! The [`Handler`] trait a guest implements: one hook per event the
//! gateway sends (upgrade, open, message, close, I/O answers, real-time and
//! proxy questions), each with a default that does what a route without it
//! would.

use crate::*;

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
