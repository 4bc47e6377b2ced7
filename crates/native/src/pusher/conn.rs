//! One pusher connection: `pusher:connection_established` at open, client
//! messages in (one JSON object per text frame, at most the app's
//! `max_payload`), answers and events out through the connection's
//! outbound queue, and the activity clock: after `activity_timeout` of
//! silence the server sends `pusher:ping` and closes with 4201 when no
//! message comes back within [`PONG_TIMEOUT`]. An app with a guest is
//! asked at each decision (connect, subscribe, client event) and the
//! connection waits for its verdict (`conn/verdicts.rs`); signin and
//! client events are `conn/events.rs`.

mod events;
mod verdicts;

use super::hook::{self, EventQuestion, SubscribeQuestion, WorkerHook};
use super::membership::{self, Joining, LIMIT};
use super::{App, PusherRoute};
use bytes::Bytes;
use serde_json::value::RawValue;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use weir_pusher::auth::{self, AuthError, PresenceMember, SigninUser};
use weir_pusher::client::{ClientEvent, ClientMessage, MessageError, Subscribe};
use weir_pusher::connect::ConnectError;
use weir_pusher::webhook::{WebhookEvent, WebhookKind};
use weir_pusher::{codes, server, Channel, SocketId};
use weir_reactor::behaviour::{Behaviour, Stop};
use weir_reactor::buffer::Output;
use weir_reactor::decode::DataPiece;
use weir_reactor::outbound::Outbound;
use weir_reactor::registry::ConnId;
use weir_realtime::{ClientInfo, Subscription};
use weir_ws::encode;
use weir_ws::frame::OpCode;

/// Time a pinged client has to answer: pusher-js's own `pongTimeout`
/// (30 s), capped by the app's `activity_timeout` so a short one (tests,
/// fast failure detection) is not outlived by its pong wait.
pub const PONG_TIMEOUT: Duration = Duration::from_secs(30);

/// `pusher:subscription_error` type of a refused signature or user (what
/// pusher-js emits itself when its auth endpoint fails); a limit's is
/// [`LIMIT`].
const AUTH: &str = "AuthError";

/// One of the connection's subscriptions.
struct Sub {
    channel: Channel,
    /// The core's name of the channel.
    core: String,
    member: Arc<ClientInfo>,
    state: Arc<Subscription>,
    /// Whether the join was counted ([`membership::join`]).
    joined: oneshot::Receiver<bool>,
}

/// The behaviour of one connection on a pusher route.
pub struct Pusher {
    route: Option<Arc<PusherRoute>>,
    /// The app's index in the route.
    app: usize,
    /// Why the connection is refused (sent at open, then closed).
    refused: Option<ConnectError>,
    socket_id: SocketId,
    id: ConnId,
    outbound: Option<Arc<Outbound>>,
    /// The message being received.
    message: Vec<u8>,
    /// The message went over `max_payload` and is being dropped.
    oversized: bool,
    closing: bool,
    subs: HashMap<String, Sub>,
    /// The signed-in user (`pusher:signin`).
    user: Option<String>,
    /// When the client last sent anything.
    last_heard: Instant,
    /// A ping was sent and an answer is due by then.
    pong_due: Option<Instant>,
    /// Client events sent in the current one-second window.
    events_window: (Instant, u32),
    /// The app's guest on this worker, if the app has one.
    hook: Option<Rc<WorkerHook>>,
    /// The upgrade's request target and header lines, for the guest's
    /// connect question (taken at open).
    upgrade: (String, String),
    /// The question the guest is deciding; reads wait meanwhile.
    waiting: Option<verdicts::Waiting>,
    /// Messages read while it decides.
    held: verdicts::Held,
}

impl Pusher {
    /// A connection of app `app` (Err: no randomness for a socket id);
    /// `hook` is the app's guest, asked about the upgrade (request target,
    /// header lines) at open.
    pub fn new(
        route: Arc<PusherRoute>,
        app: usize,
        hook: Option<Rc<WorkerHook>>,
        upgrade: (String, String),
    ) -> Result<Pusher, getrandom::Error> {
        let socket_id = SocketId::generate()?;
        let now = Instant::now();
        Ok(Pusher {
            route: Some(route),
            app,
            refused: None,
            socket_id,
            id: 0,
            outbound: None,
            message: Vec::new(),
            oversized: false,
            closing: false,
            subs: HashMap::new(),
            user: None,
            last_heard: now,
            pong_due: None,
            events_window: (now, 0),
            hook,
            upgrade,
            waiting: None,
            held: verdicts::Held::default(),
        })
    }

    /// A connection refused the Pusher way: `pusher:error` with the code,
    /// then a close with the same code (pusher-js reads both).
    pub fn refused(why: ConnectError) -> Pusher {
        let now = Instant::now();
        Pusher {
            route: None,
            app: 0,
            refused: Some(why),
            socket_id: SocketId::from_random([0; weir_pusher::socket_id::SOCKET_ID_RANDOM_BYTES]),
            id: 0,
            outbound: None,
            message: Vec::new(),
            oversized: false,
            closing: true,
            subs: HashMap::new(),
            user: None,
            last_heard: now,
            pong_due: None,
            events_window: (now, 0),
            hook: None,
            upgrade: Default::default(),
            waiting: None,
            held: verdicts::Held::default(),
        }
    }

    fn route(&self) -> &Arc<PusherRoute> {
        self.route.as_ref().expect("an accepted connection")
    }

    fn app(&self) -> &App {
        &self.route().apps[self.app]
    }

    fn outbound(&self) -> &Arc<Outbound> {
        self.outbound.as_ref().expect("set in on_open")
    }

    /// Sends one message (a JSON text) to this client.
    fn send(&self, json: &str) {
        self.outbound()
            .send_frames(&encode::frame(OpCode::Text, json.as_bytes()));
        // A refused connection (no route) is not any app's.
        if let Some(route) = &self.route {
            let counters = &route.apps[self.app].counters;
            counters.messages_out.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn error(&self, message: &str, code: u16) {
        self.send(&server::error(message, Some(code)));
    }

    /// `pusher:subscription_error` on `channel`, of type [`AUTH`] or [`LIMIT`].
    fn subscription_error(&self, channel: &str, kind: &str, error: &str, status: u16) {
        self.send(&server::subscription_error(channel, kind, error, status));
    }

    fn on_message(&mut self) {
        let message = std::mem::take(&mut self.message);
        if self.waiting.is_some() {
            self.hold(&message);
            self.message = message;
            self.message.clear();
            return;
        }
        let max = self.app().config.max_payload;
        let parsed = std::str::from_utf8(&message)
            .map_err(|_| MessageError::MessageNotJsonObject)
            .and_then(|text| weir_pusher::parse_client_message(text, max));
        self.message = message;
        self.message.clear();
        match parsed {
            Ok(ClientMessage::Ping) => self.send(&server::pong()),
            Ok(ClientMessage::Pong) => {}
            Ok(ClientMessage::Subscribe(sub)) => self.subscribe(sub),
            Ok(ClientMessage::Unsubscribe { channel }) => self.unsubscribe(channel.name()),
            Ok(ClientMessage::Signin { auth, user_data }) => self.signin(&auth, &user_data),
            Ok(ClientMessage::ClientEvent(event)) => self.client_event(event),
            Err(e) => self.error(&e.to_string(), e.code()),
        }
    }

    fn subscribe(&mut self, req: Subscribe) {
        let name = req.channel.name().to_string();
        match self.subs.get(&name) {
            // Refused or undone before: it may be asked again.
            Some(sub) if sub.state.failed() || sub.state.cancelled() => {
                drop(self.subs.remove(&name))
            }
            // pusher-js never subscribes twice; answer as if it were new.
            Some(_) => return self.send(&server::subscription_succeeded(&name)),
            None => {}
        }
        let app = self.app();
        if self.subs.len() >= app.config.max_channels_per_connection {
            return self.subscription_error(
                &name,
                LIMIT,
                "too many channels on this connection (max_channels_per_connection)",
                400,
            );
        }
        if let Some(owner) = req.channel.user_id() {
            if self.user.as_deref() != Some(owner) {
                return self.subscription_error(&name, AUTH, "not signed in as this user", 403);
            }
        }
        let signature = match req.channel.needs_auth() && req.channel.user_id().is_none() {
            true => auth::verify_channel(
                &app.key(),
                self.socket_id.as_str(),
                &name,
                req.channel_data.as_deref(),
                req.auth.as_deref(),
            ),
            false => Ok(()),
        };
        if let Some(hook) = self.hook.clone() {
            return self.ask_subscribe(&hook, req, signature);
        }
        match signature {
            Ok(()) => self.join(req, None),
            Err(e) => self.auth_failed(&name, e),
        }
    }

    /// pusher-js shows a failed subscription as its subscription_error
    /// event; the error names the cause.
    fn auth_failed(&self, name: &str, e: AuthError) {
        self.subscription_error(name, AUTH, &e.to_string(), 401);
        self.error(&e.to_string(), e.code());
    }

    /// Joins the channel for an allowed subscribe; `channel_data`, when
    /// given, replaces the client's (a guest that answered authorisation).
    fn join(&mut self, req: Subscribe, channel_data: Option<String>) {
        let name = req.channel.name().to_string();
        let app = self.app();
        let channel_data = channel_data.or(req.channel_data);
        let member = if req.channel.is_presence() {
            match PresenceMember::parse(channel_data.as_deref()) {
                Ok(m) => ClientInfo {
                    client: self.socket_id.as_str().to_string(),
                    user: m.user_id,
                    conn_info: m.user_info.map(|i| Bytes::from(i.get().to_string())),
                    chan_info: None,
                },
                Err(e) => {
                    self.subscription_error(&name, AUTH, &e.to_string(), 400);
                    return self.error(&e.to_string(), e.code());
                }
            }
        } else {
            ClientInfo {
                client: self.socket_id.as_str().to_string(),
                user: String::new(),
                conn_info: None,
                chan_info: None,
            }
        };
        let member = Arc::new(member);
        let core = app.core_name(&req.channel);
        let state = Arc::new(Subscription::default());
        let (done, joined) = oneshot::channel();
        let joining = Joining {
            route: self.route().clone(),
            app: self.app,
            channel: req.channel.clone(),
            core: core.clone(),
            conn: self.id,
            outbound: self.outbound().clone(),
            member: member.clone(),
            state: state.clone(),
        };
        self.route().run(membership::join(joining, done));
        if state.failed() {
            return;
        }
        self.subs.insert(
            name,
            Sub {
                channel: req.channel,
                core,
                member,
                state,
                joined,
            },
        );
    }

    fn unsubscribe(&mut self, name: &str) {
        if let Some(sub) = self.subs.remove(name) {
            self.leave(sub);
        }
    }

    /// Leaves the core's channel, then uncounts it ([`membership::leave`]).
    fn leave(&self, sub: Sub) {
        let route = self.route();
        route
            .realtime
            .leave(&sub.core, &route.topics, self.id, &sub.member, &sub.state);
        route.run(membership::leave(
            route.clone(),
            self.app,
            sub.channel,
            sub.core,
            self.id,
            sub.member,
            sub.joined,
        ));
    }

    /// `pusher:connection_established` with the socket id.
    fn established(&self) {
        let timeout = self.app().config.activity_timeout.as_secs() as u32;
        self.send(&server::connection_established(&self.socket_id, timeout));
    }

    /// The next moment the activity clock needs looking at.
    fn next_deadline(&self) -> Instant {
        self.pong_due
            .unwrap_or(self.last_heard + self.app().config.activity_timeout)
    }
}

impl Behaviour for Pusher {
    /// Events from publishers on any worker write straight into this socket.
    const DIRECT_WRITES: bool = true;
    /// The activity clock (`beside`).
    const HAS_BESIDE: bool = true;

    fn on_open(&mut self, id: u64, outbound: &Arc<Outbound>) {
        self.id = id;
        self.outbound = Some(outbound.clone());
        if let Some(why) = self.refused {
            self.error(&why.to_string(), why.code());
            outbound.close(why.code(), "refused");
            return;
        }
        self.route()
            .sockets
            .lock()
            .expect("sockets lock")
            .insert(self.socket_id.as_str().to_string(), id);
        match self.hook.clone() {
            Some(hook) => self.ask_connect(&hook),
            None => self.established(),
        }
    }

    /// Not read while a worker's fan-out backlog is over its budget, or
    /// while the app's guest decides (`conn/verdicts.rs`).
    #[inline]
    fn reads_blocked(&self, _own: &Outbound) -> bool {
        self.route.as_ref().is_some_and(|r| r.topics.congested()) || self.guest_blocks()
    }

    async fn unblocked(&mut self, _own: &Outbound) -> Result<(), Stop> {
        if self.guest_blocks() {
            self.wait_guest().await;
            return Ok(());
        }
        if let Some(route) = &self.route {
            route.topics.fanout().wait_drained().await;
        }
        Ok(())
    }

    async fn beside(&mut self) -> Result<(), Stop> {
        if self.closing || self.route.is_none() {
            return std::future::pending().await;
        }
        tokio::time::sleep_until(self.next_deadline().into()).await;
        let now = Instant::now();
        if self.pong_due.is_some_and(|at| at <= now) {
            // The error, then the close, in the queue's order.
            self.closing = true;
            self.error("Pong reply not received", codes::PONG_NOT_RECEIVED);
            self.outbound()
                .close(codes::PONG_NOT_RECEIVED, "Pong reply not received");
            return Ok(());
        }
        if self.pong_due.is_none() && self.next_deadline() <= now {
            self.send(&server::ping());
            let wait = PONG_TIMEOUT.min(self.app().config.activity_timeout);
            self.pong_due = Some(now + wait);
        }
        Ok(())
    }

    fn on_data(&mut self, buf: &mut [u8], piece: &DataPiece, _out: &mut Output) {
        if self.closing {
            return;
        }
        self.last_heard = Instant::now();
        self.pong_due = None;
        let payload = &buf[piece.payload.clone()];
        let max = self.app().config.max_payload;
        if self.message.len() + payload.len() > max {
            self.oversized = true;
            self.message.clear();
        } else if !self.oversized {
            self.message.extend_from_slice(payload);
        }
        if !piece.message_end() {
            return;
        }
        let counters = &self.app().counters;
        counters.messages_in.fetch_add(1, Ordering::Relaxed);
        if std::mem::take(&mut self.oversized) {
            self.message.clear();
            let e = MessageError::MessageTooLarge;
            return self.error(&format!("{e} (max_payload)"), e.code());
        }
        if piece.message != OpCode::Text {
            self.message.clear();
            return self.error("messages are JSON text", codes::GENERIC_ERROR);
        }
        self.on_message();
    }

    /// Any frame, a ping or pong included, shows the client is there.
    fn on_control(
        &mut self,
        _buf: &mut [u8],
        _opcode: OpCode,
        _payload: std::ops::Range<usize>,
    ) -> bool {
        self.last_heard = Instant::now();
        self.pong_due = None;
        false
    }

    fn on_close(&mut self, id: u64) {
        let Some(route) = self.route.clone() else {
            return;
        };
        for (_, sub) in std::mem::take(&mut self.subs) {
            self.leave(sub);
        }
        if let Some(user) = self.user.take() {
            self.forget_user(&user);
        }
        route
            .sockets
            .lock()
            .expect("sockets lock")
            .remove(self.socket_id.as_str());
        let _ = id;
        self.app().connections.fetch_sub(1, Ordering::AcqRel);
        self.route = None;
    }

    fn abandon(self, _id: u64) {
        if let Some(route) = &self.route {
            route.apps[self.app]
                .connections
                .fetch_sub(1, Ordering::AcqRel);
        }
    }
}
