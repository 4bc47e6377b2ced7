//! What a hook does things with: [`Conn`], the connection the event is
//! about, and [`Context`], the batch's answer (any connection, any topic).

use std::fmt;
use std::ops::{Deref, DerefMut};

use weir_abi::{CommandHeader, CommandKind, ConnInfo, Direction, Params};

use crate::{ConnState, ConnectionId, Message};

/// The batch's answer: every method appends one command (no allocation per
/// message once the buffers have grown). Reach it from a hook with
/// [`Conn::ctx`] to address a connection other than the event's, by id.
pub struct Context {
    /// Packed command headers.
    pub(crate) commands: Vec<u8>,
    pub(crate) data: Vec<u8>,
}

impl Context {
    pub(crate) fn with_capacity(commands: usize, data: usize) -> Self {
        Context {
            commands: Vec::with_capacity(commands),
            data: Vec::with_capacity(data),
        }
    }

    /// Append `bytes` to the shared buffer and return their range.
    pub(crate) fn put(&mut self, bytes: &[u8]) -> (u32, u32) {
        let offset = self.data.len() as u32;
        self.data.extend_from_slice(bytes);
        (offset, bytes.len() as u32)
    }

    pub(crate) fn push(
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
    /// (`ctx.send_fmt(conn, format_args!("{n}"))`), without a `String`.
    pub fn send_fmt(&mut self, conn: ConnectionId, args: fmt::Arguments<'_>) {
        let offset = self.data.len();
        let _ = fmt::Write::write_fmt(&mut ByteWriter(&mut self.data), args);
        let len = self.data.len() - offset;
        let range = (offset as u32, len as u32);
        self.push(conn, CommandKind::SendText, 0, (0, 0), range);
    }

    /// Send a binary message to `conn`.
    pub fn send_binary(&mut self, conn: ConnectionId, bytes: &[u8]) {
        let p = self.put(bytes);
        self.push(conn, CommandKind::SendBinary, 0, (0, 0), p);
    }

    /// Pass `msg` on through proxied connection `conn` in `direction` (a
    /// proxy route's filter; [`Handler::on_proxy_message`]'s verdicts come
    /// here, and a filter may also add messages of its own). On any other
    /// route the gateway ignores it.
    ///
    /// [`Handler::on_proxy_message`]: crate::Handler::on_proxy_message
    pub fn forward(&mut self, conn: ConnectionId, direction: Direction, msg: Message<'_>) {
        let kind = if msg.is_text() {
            CommandKind::ForwardText
        } else {
            CommandKind::ForwardBinary
        };
        let p = self.put(msg.as_bytes());
        let mut header = CommandHeader::new(conn, kind as u8, 0, (0, 0), p);
        header.reserved = direction as u8;
        self.commands.extend_from_slice(&header.encode());
    }

    /// Send `msg` to `conn` as a message of the same kind.
    pub fn send(&mut self, conn: ConnectionId, msg: Message<'_>) {
        match msg {
            Message::Text(t) => self.send_text(conn, t),
            Message::Binary(b) => self.send_binary(conn, b),
        }
    }

    /// Close `conn` with `code` (1000–4999; the gateway sends 1011 for a
    /// code an endpoint may not send) and a short UTF-8 `reason` (at most
    /// 123 bytes; the gateway cuts a longer one).
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

    /// Store raw bytes as `conn`'s attachment (empty clears it), replacing
    /// what the SDK saved from its state. Only for a connection with an event
    /// in the current batch; capped by the route's `attachment_max` (over
    /// it, the gateway closes `conn` with 1011).
    pub fn set_attachment(&mut self, conn: ConnectionId, bytes: &[u8]) {
        let p = self.put(bytes);
        self.push(conn, CommandKind::SetAttachment, 0, (0, 0), p);
    }

    /// Store `state` (through [`ConnState::persist`]) as `conn`'s
    /// attachment, written straight into the output buffer. Returns whether
    /// it wrote any bytes.
    pub(crate) fn save<S: ConnState>(&mut self, conn: ConnectionId, state: &S) -> bool {
        let offset = self.data.len();
        state.persist(&mut self.data);
        let len = self.data.len() - offset;
        let range = (offset as u32, len as u32);
        self.push(conn, CommandKind::SetAttachment, 0, (0, 0), range);
        len > 0
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

/// What an instance keeps per connection.
pub(crate) struct Entry<S> {
    pub(crate) state: S,
    /// The connection info without its attachment: target and route
    /// parameters, as the host sent them (checked when stored).
    pub(crate) info: Box<[u8]>,
    /// The state was borrowed mutably since it was last saved.
    pub(crate) dirty: bool,
    /// The host holds a non-empty attachment for the connection.
    pub(crate) stored: bool,
}

impl<S: ConnState> Entry<S> {
    /// An entry from a connection's info, its state restored from the
    /// attachment if there is one.
    pub(crate) fn new(info: &ConnInfo<'_>) -> Self {
        let stored = !info.attachment.is_empty();
        Entry {
            state: if stored {
                S::restore(info.attachment)
            } else {
                S::default()
            },
            info: info.fixed().into(),
            dirty: false,
            stored,
        }
    }

    /// An entry from connection info bytes as `host.connection` returns
    /// them; bytes that do not parse, or none (the host does not know the
    /// connection), give an empty target, no parameters and `Default`
    /// state.
    pub(crate) fn from_bytes(bytes: Option<&[u8]>) -> Self {
        let info = bytes.and_then(|b| ConnInfo::parse(b, 0).ok());
        let empty = ConnInfo::parse(&EMPTY_INFO, 0).expect("empty info parses");
        Entry::new(&info.unwrap_or(empty))
    }
}

/// Connection info with an empty target and no parameters.
pub(crate) const EMPTY_INFO: [u8; 8] = [0; 8];

/// One connection, as a hook sees it: its id, request target and route
/// parameters, its typed state (through `Deref`/`DerefMut`: `conn.count +=
/// 1`), and everything a handler can do to it.
///
/// Borrowing the state mutably marks it changed; the SDK then saves it to
/// the connection's attachment when the hook returns, so it survives the
/// instance being replaced. Every method appends to the batch's answer
/// without allocating.
///
/// What it tells about the connection (parameters, target) is borrowed for
/// the whole hook, not from the handle, so it can be passed to the
/// handle's own methods: `let room = conn.param("room").unwrap_or("lobby");
/// conn.publish(room, msg);`.
pub struct Conn<'a, S> {
    id: ConnectionId,
    ctx: &'a mut Context,
    /// Target and parameters, checked when the entry was made.
    info: &'a [u8],
    state: &'a mut S,
    dirty: &'a mut bool,
}

impl<'a, S: ConnState> Conn<'a, S> {
    pub(crate) fn new(id: ConnectionId, ctx: &'a mut Context, entry: &'a mut Entry<S>) -> Self {
        Conn {
            id,
            ctx,
            info: &entry.info,
            state: &mut entry.state,
            dirty: &mut entry.dirty,
        }
    }

    fn conn_info(&self) -> Option<ConnInfo<'a>> {
        ConnInfo::parse(self.info, 0).ok()
    }

    /// The connection's id: unique within the gateway process; 0 only in
    /// a route's own [`on_response`](crate::Handler::on_response) or
    /// [`on_timer`](crate::Handler::on_timer) (see [`Conn::is_route`]).
    pub fn id(&self) -> ConnectionId {
        self.id
    }

    /// Whether this handle stands for the route rather than a connection:
    /// the answer to a [`Context::fetch`] or [`Context::set_timer`]. It has
    /// no parameters and a `Default` state that is not saved; sends to it
    /// go nowhere (publish, or address connections through
    /// [`ctx`](Self::ctx)).
    pub fn is_route(&self) -> bool {
        self.id == 0
    }

    /// Send `req` for this connection: the answer comes to
    /// [`Handler::on_response`](crate::Handler::on_response) with this
    /// connection and its state, in a later batch (dropped if the
    /// connection closed meanwhile).
    ///
    /// ```no_run
    /// # use weir_guest::{Conn, HttpRequest, Message};
    /// fn on_message(conn: &mut Conn<()>, msg: Message) {
    ///     let url = format!("http://127.0.0.1:8080/lookup/{}", msg.as_bytes().len());
    ///     conn.fetch(&HttpRequest::get(&url));
    /// }
    /// ```
    pub fn fetch(&mut self, req: &crate::HttpRequest) -> crate::Tag {
        self.ctx.fetch_for(self.id, req)
    }

    /// A timer for this connection (it ends with the connection):
    /// [`Handler::on_timer`](crate::Handler::on_timer) gets the tag after
    /// `delay`.
    pub fn set_timer(&mut self, delay: std::time::Duration) -> crate::Tag {
        self.ctx.set_timer_for(self.id, delay)
    }

    /// Cancel this connection's timer `tag`.
    pub fn cancel_timer(&mut self, tag: crate::Tag) {
        self.ctx.cancel_timer_for(self.id, tag)
    }

    /// Read up to `limit` publications of `channel` for this connection,
    /// oldest first (a `realtime = true` route; the gateway caps `limit`,
    /// 0 reads the position alone): the answer comes to
    /// [`Handler::on_history`](crate::Handler::on_history) in a later
    /// batch. `channel` must not be empty (like a topic).
    ///
    /// ```no_run
    /// # use weir_guest::{Conn, Message};
    /// fn on_open(conn: &mut Conn<()>) {
    ///     conn.subscribe("chat:room");
    ///     conn.history_newest("chat:room", 20);
    /// }
    /// ```
    pub fn history(&mut self, channel: &str, limit: u32) -> crate::Tag {
        self.ctx.history_for(self.id, channel, limit, false)
    }

    /// The same, newest first: the channel's last `limit` publications.
    pub fn history_newest(&mut self, channel: &str, limit: u32) -> crate::Tag {
        self.ctx.history_for(self.id, channel, limit, true)
    }

    /// Read `channel`'s presence for this connection (a `realtime = true`
    /// route): the answer comes to
    /// [`Handler::on_presence`](crate::Handler::on_presence).
    pub fn presence(&mut self, channel: &str) -> crate::Tag {
        self.ctx.presence_for(self.id, channel)
    }

    /// The route parameter `name` (`conn.param("room")` on a route
    /// `/chat/{room}` opened as `/chat/lobby` is `Some("lobby")`), not
    /// percent-decoded. `None` if the route declares no such parameter.
    pub fn param(&self, name: &str) -> Option<&'a str> {
        self.conn_info()?.param(name)
    }

    /// Every route parameter, `(name, value)`, in the route's order.
    pub fn params(&self) -> Params<'a> {
        self.conn_info()
            .map_or_else(Params::default, |i| i.params())
    }

    /// The request target the connection was opened with: `path` or
    /// `path?query`.
    pub fn target(&self) -> &'a str {
        self.conn_info().map_or("", |i| i.target)
    }

    /// The request path, without the query.
    pub fn path(&self) -> &'a str {
        let target = self.target();
        target.split_once('?').map_or(target, |(p, _)| p)
    }

    /// The query parameter `name`, raw (not percent-decoded); `""` for a
    /// parameter without `=`.
    pub fn query_param(&self, name: &str) -> Option<&'a str> {
        let (_, query) = self.target().split_once('?')?;
        crate::request::query_param(query, name)
    }

    /// The connection's state.
    pub fn state(&self) -> &S {
        self.state
    }

    /// The connection's state, to change: it is saved when the hook returns.
    pub fn state_mut(&mut self) -> &mut S {
        *self.dirty = true;
        self.state
    }

    /// The batch's answer, to address other connections by id.
    pub fn ctx(&mut self) -> &mut Context {
        self.ctx
    }

    /// Send `msg` to this connection, as a message of the same kind.
    pub fn send(&mut self, msg: Message<'_>) {
        self.ctx.send(self.id, msg);
    }

    /// Send a text message to this connection.
    pub fn send_text(&mut self, text: &str) {
        self.ctx.send_text(self.id, text);
    }

    /// Send a text message formatted straight into the output buffer:
    /// `conn.send_fmt(format_args!("{n} seen"))`.
    pub fn send_fmt(&mut self, args: fmt::Arguments<'_>) {
        self.ctx.send_fmt(self.id, args);
    }

    /// Send a binary message to this connection.
    pub fn send_binary(&mut self, bytes: &[u8]) {
        self.ctx.send_binary(self.id, bytes);
    }

    /// Close this connection with `code` (1000–4999) and a short `reason`.
    /// Its `on_close` follows, once the client has answered.
    pub fn close(&mut self, code: u16, reason: &str) {
        self.ctx.close(self.id, code, reason);
    }

    /// Pass `msg` on through this proxied connection in `direction` (see
    /// [`Context::forward`]).
    pub fn forward(&mut self, direction: Direction, msg: Message<'_>) {
        self.ctx.forward(self.id, direction, msg);
    }

    /// Subscribe this connection to `topic`. Topics belong to the route
    /// (or to the routes sharing a `topics` namespace): another route's
    /// `room:1` is another topic.
    pub fn subscribe(&mut self, topic: &str) {
        self.ctx.subscribe(self.id, topic);
    }

    /// Unsubscribe this connection from `topic`.
    pub fn unsubscribe(&mut self, topic: &str) {
        self.ctx.unsubscribe(self.id, topic);
    }

    /// Deliver `msg` to every *other* subscriber of `topic`, on every
    /// gateway worker (as uWebSockets' `ws.publish` does).
    pub fn publish(&mut self, topic: &str, msg: Message<'_>) {
        self.ctx.publish(topic, msg, Some(self.id));
    }

    /// Deliver `msg` to every subscriber of `topic`, this connection
    /// included if it is one.
    pub fn broadcast(&mut self, topic: &str, msg: Message<'_>) {
        self.ctx.publish(topic, msg, None);
    }
}

impl<S> Deref for Conn<'_, S> {
    type Target = S;
    fn deref(&self) -> &S {
        self.state
    }
}

/// Borrowing the state mutably marks it for saving.
impl<S> DerefMut for Conn<'_, S> {
    fn deref_mut(&mut self) -> &mut S {
        *self.dirty = true;
        self.state
    }
}
