//! One Centrifugo connection: commands in (newline-separated JSON, several
//! per frame), replies out (one frame per read, newline-separated), pushes
//! from the real-time core through the connection's outbound queue, and the
//! connection's clocks: a connect within [`STALE_CLOSE_DELAY`], a server
//! ping every `ping_interval` answered within `pong_timeout`, and the
//! token's expiry unless the client refreshes it.

use super::hook::{Question, WorkerHooks};
use super::protocol::{self as p, Command, Disconnect, ErrorReply};
use super::token::{unix_now, TokenError};
use super::{CentrifugoRoute, SERVER_VERSION};
use bytes::Bytes;
use futures_util::FutureExt;
use std::collections::HashMap;
use std::future::Future;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use weir_reactor::behaviour::{Behaviour, Stop};
use weir_reactor::buffer::Output;
use weir_reactor::decode::DataPiece;
use weir_reactor::outbound::Outbound;
use weir_reactor::registry::ConnId;
use weir_realtime::clients::Inbox;
use weir_realtime::verdict::RtAnswer;
use weir_realtime::HISTORY_MAX_PUBLICATION_LIMIT;
use weir_realtime::{
    ClientInfo, HistoryQuery, RealtimeError, StreamPosition, Subscribe, Subscription, UserCommand,
};
use weir_ws::encode;
use weir_ws::frame::OpCode;

/// Time a client has to send its connect command (Centrifugo's
/// `client_stale_close_delay`): an open socket that never connects is
/// closed with 3502.
pub(crate) const STALE_CLOSE_DELAY: Duration = Duration::from_secs(10);

/// Calls waiting on Redis (with `[cluster]`) one connection may have; at
/// this many its reads pause until one answers. Each holds at most a
/// command (`max_command`), so this bounds what a client can queue.
pub const MAX_PENDING_CALLS: usize = 64;

/// A connection's calls in flight on the core's runtime.
#[derive(Default)]
struct Pending {
    count: std::sync::atomic::AtomicUsize,
    done: tokio::sync::Notify,
}

/// A connected client.
struct Session {
    client: String,
    user: String,
    conn_info: Option<Bytes>,
    /// When the connection closes unless it refreshes its token: the
    /// token's expiry plus `expired_close_delay`.
    expires: Option<Instant>,
    /// Subscribed channels (or being subscribed, with `[cluster]`), with
    /// the member each is known by.
    subs: HashMap<String, Sub>,
}

/// One of the connection's subscriptions.
struct Sub {
    member: Arc<ClientInfo>,
    state: Arc<Subscription>,
    /// When the subscription ends unless refreshed (`sub_refresh`): its
    /// token's expiry plus `expired_close_delay`.
    expires: Option<Instant>,
}

impl Session {
    /// The channel's subscription, unless there is none or it was refused.
    fn sub(&self, channel: &str) -> Option<&Sub> {
        self.subs.get(channel).filter(|s| !s.state.failed())
    }
}

/// The behaviour of one connection on a centrifugo route.
pub struct Centrifugo {
    route: Arc<CentrifugoRoute>,
    id: ConnId,
    outbound: Option<Arc<Outbound>>,
    /// The message being received.
    message: Vec<u8>,
    /// The message went over `max_command_bytes` and is being dropped.
    oversized: bool,
    /// Reply lines of this read, sent as one frame.
    replies: Vec<u8>,
    /// A disconnect was queued: nothing more is read or answered.
    closing: bool,
    session: Option<Session>,
    opened: Instant,
    next_ping: Instant,
    /// A ping was sent and its pong is due by then.
    pong_due: Option<Instant>,
    pending: Arc<Pending>,
    /// The server API's commands for this connection (`realtime::clients`).
    inbox: Arc<Inbox>,
    /// The route's namespace guests on this worker.
    hooks: Rc<WorkerHooks>,
}

impl Centrifugo {
    pub fn new(route: Arc<CentrifugoRoute>, hooks: Rc<WorkerHooks>) -> Centrifugo {
        let now = Instant::now();
        let next_ping = now + route.config.ping_interval;
        Centrifugo {
            route,
            id: 0,
            outbound: None,
            message: Vec::new(),
            oversized: false,
            replies: Vec::new(),
            closing: false,
            session: None,
            opened: now,
            next_ping,
            pong_due: None,
            pending: Arc::default(),
            inbox: Arc::default(),
            hooks,
        }
    }

    fn outbound(&self) -> &Arc<Outbound> {
        self.outbound.as_ref().expect("set in on_open")
    }

    /// Sends the reply lines gathered so far, as one text frame.
    fn flush(&mut self) {
        if self.replies.is_empty() {
            return;
        }
        let frame = encode::frame(OpCode::Text, &self.replies);
        self.replies.clear();
        self.outbound().send_frames(&frame);
    }

    /// Queues a reply line.
    fn line(&mut self) -> &mut Vec<u8> {
        if !self.replies.is_empty() {
            self.replies.push(b'\n');
        }
        &mut self.replies
    }

    fn error(&mut self, id: u32, e: ErrorReply) {
        p::write_error(self.line(), id, e);
    }

    /// Runs a call into the core and writes its answer with `write`: at
    /// once on one node (the answer joins this read's replies), or, with
    /// `[cluster]`, on the core's runtime once Redis answers (in a frame of
    /// its own; the client matches replies by id).
    fn answer<T: Send + 'static>(
        &mut self,
        call: impl Future<Output = T> + Send + 'static,
        write: impl FnOnce(&mut Vec<u8>, T) + Send + 'static,
    ) {
        match self.route.realtime.runtime() {
            None => {
                let done = call
                    .now_or_never()
                    .expect("one node's real-time calls finish at once");
                let mut line = Vec::new();
                write(&mut line, done);
                if !line.is_empty() {
                    self.line().extend_from_slice(&line);
                }
            }
            Some(runtime) => {
                let outbound = self.outbound().clone();
                let pending = self.pending.clone();
                pending.count.fetch_add(1, Ordering::AcqRel);
                runtime.spawn(async move {
                    let done = call.await;
                    let mut line = Vec::new();
                    write(&mut line, done);
                    if !line.is_empty() {
                        outbound.send_frames(&encode::frame(OpCode::Text, &line));
                    }
                    pending.count.fetch_sub(1, Ordering::AcqRel);
                    pending.done.notify_one();
                });
            }
        }
    }

    /// Runs a call that waits on a namespace guest's verdict (and then,
    /// maybe, on the core), as [`answer`](Self::answer) runs a call on
    /// Redis: spawned (on the core's runtime with `[cluster]`, on this
    /// worker's otherwise), counted among the connection's
    /// [`MAX_PENDING_CALLS`], its reply written in a frame of its own.
    /// The worker thread never waits for the guest.
    fn answer_later<T: Send + 'static>(
        &mut self,
        call: impl Future<Output = T> + Send + 'static,
        write: impl FnOnce(&mut Vec<u8>, T) + Send + 'static,
    ) {
        let outbound = self.outbound().clone();
        let pending = self.pending.clone();
        pending.count.fetch_add(1, Ordering::AcqRel);
        let task = async move {
            let done = call.await;
            let mut line = Vec::new();
            write(&mut line, done);
            if !line.is_empty() {
                outbound.send_frames(&encode::frame(OpCode::Text, &line));
            }
            pending.count.fetch_sub(1, Ordering::AcqRel);
            pending.done.notify_one();
        };
        match self.route.realtime.runtime() {
            Some(runtime) => drop(runtime.spawn(task)),
            None => drop(tokio::spawn(task)),
        }
    }

    /// The question about `channel` for its namespace's guest.
    fn question<'a>(&'a self, channel: &'a str) -> Question<'a> {
        let s = self.session.as_ref().expect("connected");
        Question {
            channel,
            client: &s.client,
            user: &s.user,
            info: s.conn_info.as_deref().unwrap_or_default(),
        }
    }

    /// Sends what is gathered, then closes with Centrifugo's code.
    fn disconnect(&mut self, d: Disconnect) {
        self.flush();
        self.closing = true;
        self.outbound().close(d.code, d.reason);
    }

    /// Handles one received message: its commands, one per line.
    fn on_message(&mut self) {
        let message = std::mem::take(&mut self.message);
        for line in message.split(|&b| b == b'\n') {
            if self.closing {
                break;
            }
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match serde_json::from_slice::<Command>(line) {
                Ok(cmd) => self.on_command(cmd),
                Err(_) => self.disconnect(p::DISCONNECT_BAD_REQUEST),
            }
        }
        self.message = message;
        self.message.clear();
    }

    fn on_command(&mut self, cmd: Command) {
        let id = cmd.id;
        if let Some(req) = cmd.connect {
            return self.connect(id, req);
        }
        if self.session.is_none() {
            // Centrifugo: anything before connect is a bad request.
            return self.disconnect(p::DISCONNECT_BAD_REQUEST);
        }
        if let Some(req) = cmd.subscribe {
            self.subscribe(id, req);
        } else if let Some(req) = cmd.unsubscribe {
            self.unsubscribe(id, &req.channel);
        } else if let Some(req) = cmd.publish {
            self.publish(id, req);
        } else if let Some(req) = cmd.presence {
            self.presence(id, &req.channel, false);
        } else if let Some(req) = cmd.presence_stats {
            self.presence(id, &req.channel, true);
        } else if let Some(req) = cmd.history {
            self.history(id, req);
        } else if let Some(req) = cmd.refresh {
            self.refresh(id, &req.token);
        } else if let Some(req) = cmd.sub_refresh {
            self.sub_refresh(id, &req);
        } else if cmd.rpc.is_some() {
            self.error(id, p::NOT_AVAILABLE);
        } else if cmd.send.is_some() || cmd.ping.is_some() {
            // Asynchronous messages have no handler here; nothing to answer.
        } else if id == 0 {
            // `{}`: the client's pong.
            self.pong_due = None;
        } else {
            self.error(id, p::METHOD_NOT_FOUND);
        }
    }

    fn connect(&mut self, id: u32, req: p::ConnectRequest) {
        if self.session.is_some() {
            return self.disconnect(p::DISCONNECT_BAD_REQUEST);
        }
        let identity = match self.route.verifier.load().connection(&req.token) {
            Ok(identity) => identity,
            Err(TokenError::Expired) => return self.error(id, p::TOKEN_EXPIRED),
            Err(TokenError::Invalid) => return self.disconnect(p::DISCONNECT_INVALID_TOKEN),
        };
        let client = client_id();
        let ttl = identity.expires_at.map(|at| at.saturating_sub(unix_now()));
        self.route.realtime.clients.add(
            &identity.user,
            &client,
            self.id,
            self.outbound(),
            &self.inbox,
        );
        self.session = Some(Session {
            client: client.clone(),
            user: identity.user,
            conn_info: identity.info,
            expires: ttl.map(|s| {
                Instant::now() + Duration::from_secs(s) + self.route.config.expired_close_delay
            }),
            subs: HashMap::new(),
        });
        let ping = self.route.config.ping_interval.as_secs();
        self.next_ping = Instant::now() + self.route.config.ping_interval;
        p::write_reply(self.line(), id, "connect", |o| {
            o.extend_from_slice(b"{\"client\":");
            p::write_str(o, &client);
            o.extend_from_slice(b",\"version\":");
            p::write_str(o, SERVER_VERSION);
            if let Some(ttl) = ttl {
                o.extend_from_slice(format!(",\"expires\":true,\"ttl\":{ttl}").as_bytes());
            }
            o.extend_from_slice(format!(",\"ping\":{ping},\"pong\":true}}").as_bytes());
        });
        // Server-side subscriptions (the token's `channels`): announced
        // with subscribe pushes after the connect reply.
        for channel in identity.channels {
            self.server_subscribe(&channel);
        }
    }

    fn server_subscribe(&mut self, channel: &str) {
        if self.route.realtime.options(channel).is_err() {
            return;
        }
        let member = self.member(None);
        self.flush();
        let name = channel.to_string();
        let call = self.join(channel, member, false, None, false, move |found| {
            p::push(&name, "subscribe", |o| {
                o.push(b'{');
                p::write_position(o, &found.top);
                if found.positioned {
                    o.extend_from_slice(b",\"positioned\":true");
                }
                if found.recoverable {
                    o.extend_from_slice(b",\"recoverable\":true");
                }
                o.push(b'}');
            })
        });
        let channel = channel.to_string();
        self.answer(call, move |_, joined| {
            if let Err(e) = joined {
                tracing::debug!(channel, error = %e, "server-side subscription refused");
            }
        });
    }

    /// Runs the server API's commands for this connection: subscribe (as a
    /// server-side subscription; a channel already subscribed, or one past
    /// `max_subscriptions`, is skipped) and unsubscribe (an unsubscribe
    /// push, code 2000, as Centrifugo's).
    fn on_user_commands(&mut self) {
        for command in self.inbox.take() {
            if self.closing {
                return;
            }
            let Some(session) = self.session.as_mut() else {
                return;
            };
            match command {
                UserCommand::Subscribe { channel } => {
                    session.subs.retain(|_, s| !s.state.failed());
                    let full = session.subs.len() >= self.route.config.max_subscriptions;
                    if !full && !session.subs.contains_key(&channel) {
                        self.server_subscribe(&channel);
                    }
                }
                UserCommand::Unsubscribe { channel } => {
                    let Some(sub) = session.subs.remove(&channel) else {
                        continue;
                    };
                    let route = &self.route;
                    route
                        .realtime
                        .leave(&channel, &route.topics, self.id, &sub.member, &sub.state);
                    let push = p::push(&channel, "unsubscribe", |o| {
                        o.extend_from_slice(br#"{"code":2000,"reason":"server unsubscribe"}"#)
                    });
                    self.line().extend_from_slice(&push);
                }
                // The clients' table closes the connection itself.
                UserCommand::Disconnect { .. } => {}
            }
        }
        self.flush();
    }

    /// The member this connection is in a channel (with a subscription
    /// token's `info` as `chan_info`).
    fn member(&self, chan_info: Option<Bytes>) -> Arc<ClientInfo> {
        let s = self.session.as_ref().expect("connected");
        Arc::new(ClientInfo {
            client: s.client.clone(),
            user: s.user.clone(),
            conn_info: s.conn_info.clone(),
            chan_info,
        })
    }

    /// Subscribes through the core (the subscription counts from now);
    /// `reply` frames the answer (a JSON line, wrapped here in a text
    /// frame). The call is for [`answer`](Self::answer).
    fn join(
        &mut self,
        channel: &str,
        member: Arc<ClientInfo>,
        recoverable: bool,
        recover: Option<StreamPosition>,
        reject_unrecovered: bool,
        reply: impl FnOnce(&weir_realtime::Subscribed) -> Vec<u8> + Send + 'static,
    ) -> impl Future<Output = Result<(), RealtimeError>> + Send + 'static {
        let route = self.route.clone();
        let state = Arc::new(Subscription::default());
        let session = self.session.as_mut().expect("connected");
        session.subs.insert(
            channel.to_string(),
            Sub {
                member: member.clone(),
                state: state.clone(),
                expires: None,
            },
        );
        route.realtime.clone().subscribe(
            Subscribe {
                channel: channel.to_string(),
                topics: route.topics.clone(),
                conn: self.id,
                outbound: self.outbound().clone(),
                member,
                recoverable,
                recover,
                subscription: state,
            },
            reject_unrecovered,
            Box::new(move |found| Bytes::from(encode::frame(OpCode::Text, &reply(found)))),
        )
    }

    fn subscribe(&mut self, id: u32, req: p::SubscribeRequest) {
        let channel = req.channel.as_str();
        let options = match self.route.realtime.options(channel) {
            Ok(options) => options.clone(),
            Err(e) => return self.error(id, channel_error(e)),
        };
        let session = self.session.as_mut().expect("connected");
        session.subs.retain(|_, s| !s.state.failed());
        if session.subs.contains_key(channel) {
            return self.error(id, p::ALREADY_SUBSCRIBED);
        }
        if session.subs.len() >= self.route.config.max_subscriptions {
            return self.error(id, p::LIMIT_EXCEEDED);
        }
        let mut ttl = None;
        let chan_info = if req.token.is_empty() {
            if !options.allow_subscribe_for_client {
                return self.error(id, p::PERMISSION_DENIED);
            }
            None
        } else {
            match self.route.verifier.load().subscription(&req.token) {
                Ok(grant) if grant.channel == channel && grant.user == session.user => {
                    ttl = grant.expires_at.map(|at| at.saturating_sub(unix_now()));
                    grant.info
                }
                Ok(_) | Err(TokenError::Invalid) => {
                    return self.disconnect(p::DISCONNECT_INVALID_TOKEN)
                }
                Err(TokenError::Expired) => return self.error(id, p::TOKEN_EXPIRED),
            }
        };
        let member = self.member(chan_info);
        let recover = req.recover.then(|| StreamPosition {
            offset: req.offset,
            epoch: req.epoch.clone(),
        });
        let asked_offset = req.offset;
        let reject = req.flag & p::FLAG_REJECT_UNRECOVERED != 0;
        let recoverable = req.recoverable || options.allow_recovery && req.recover;
        let recoverable = recoverable && (options.allow_recovery || options.force_recovery);
        self.flush();
        // The namespace's guest, if it has one, is asked first; the join
        // runs once it allows.
        let verdict = self
            .hooks
            .of(channel)
            .map(|hook| hook.ask(self.id, self.question(channel), None));
        let call = self.join(
            channel,
            member,
            recoverable,
            recover,
            reject,
            move |found| {
                let mut line = Vec::new();
                p::write_reply(&mut line, id, "subscribe", |o| {
                    o.push(b'{');
                    let mut at = found.top.clone();
                    if let Some(r) = found.recovery.as_ref().filter(|r| r.recovered) {
                        // Centrifugo answers a recovery with the client's own
                        // offset; the recovered publications move it on.
                        at.offset = asked_offset;
                        p::write_publications(o, &r.publications);
                        o.extend_from_slice(b",\"recovered\":true,");
                    }
                    p::write_position(o, &at);
                    if found.recovery.is_some() {
                        o.extend_from_slice(b",\"was_recovering\":true");
                    }
                    if found.positioned {
                        o.extend_from_slice(b",\"positioned\":true");
                    }
                    if found.recoverable {
                        o.extend_from_slice(b",\"recoverable\":true");
                    }
                    if let Some(ttl) = ttl {
                        o.extend_from_slice(format!(",\"expires\":true,\"ttl\":{ttl}").as_bytes());
                    }
                    o.push(b'}');
                });
                line
            },
        );
        let grace = self.route.config.expired_close_delay;
        if let Some(sub) = self.session.as_mut().and_then(|s| s.subs.get_mut(channel)) {
            sub.expires = ttl.map(|s| Instant::now() + Duration::from_secs(s) + grace);
        }
        let Some(verdict) = verdict else {
            return self.answer(call, move |line, joined| {
                if let Err(e) = joined {
                    p::write_error(line, id, core_error(e));
                }
            });
        };
        let state = self.session.as_ref().expect("connected").subs[channel]
            .state
            .clone();
        let call = async move {
            match verdict.await.unwrap_or(RtAnswer::Failed) {
                RtAnswer::Allow => call.await.map_err(core_error),
                answer => {
                    // Refused before the core saw it: the channel may be
                    // subscribed again.
                    state.fail();
                    Err(refusal(answer))
                }
            }
        };
        self.answer_later(call, move |line, joined| {
            if let Err(e) = joined {
                p::write_error(line, id, e);
            }
        });
    }

    /// A subscription token refreshed: the subscription's new expiry (an
    /// expired token: 109; another user's or channel's: disconnect 3500).
    fn sub_refresh(&mut self, id: u32, req: &p::SubRefreshRequest) {
        let grant = match self.route.verifier.load().subscription(&req.token) {
            Ok(grant) => grant,
            Err(TokenError::Expired) => return self.error(id, p::TOKEN_EXPIRED),
            Err(TokenError::Invalid) => return self.disconnect(p::DISCONNECT_INVALID_TOKEN),
        };
        let session = self.session.as_mut().expect("connected");
        if grant.channel != req.channel || grant.user != session.user {
            return self.disconnect(p::DISCONNECT_INVALID_TOKEN);
        }
        let Some(sub) = session
            .subs
            .get_mut(&req.channel)
            .filter(|s| !s.state.failed())
        else {
            return self.error(id, p::PERMISSION_DENIED);
        };
        let ttl = grant.expires_at.map(|at| at.saturating_sub(unix_now()));
        let grace = self.route.config.expired_close_delay;
        sub.expires = ttl.map(|s| Instant::now() + Duration::from_secs(s) + grace);
        p::write_reply(self.line(), id, "sub_refresh", |o| match ttl {
            Some(ttl) => {
                o.extend_from_slice(format!("{{\"expires\":true,\"ttl\":{ttl}}}").as_bytes())
            }
            None => o.extend_from_slice(b"{}"),
        });
    }

    /// Ends the subscriptions whose token expired without a refresh, with
    /// an unsubscribe push (2501: the client subscribes again, with a new
    /// token).
    fn expire_subscriptions(&mut self, now: Instant) {
        let Some(session) = self.session.as_mut() else {
            return;
        };
        let expired: Vec<String> = session
            .subs
            .iter()
            .filter(|(_, s)| !s.state.failed() && s.expires.is_some_and(|at| at <= now))
            .map(|(channel, _)| channel.clone())
            .collect();
        for channel in expired {
            let Some(sub) = session.subs.remove(&channel) else {
                continue;
            };
            let route = &self.route;
            route
                .realtime
                .leave(&channel, &route.topics, self.id, &sub.member, &sub.state);
            let push = p::push(&channel, "unsubscribe", |o| {
                o.extend_from_slice(br#"{"code":2501,"reason":"subscription expired"}"#)
            });
            if !self.replies.is_empty() {
                self.replies.push(b'\n');
            }
            self.replies.extend_from_slice(&push);
        }
        self.flush();
    }

    fn unsubscribe(&mut self, id: u32, channel: &str) {
        let session = self.session.as_mut().expect("connected");
        if let Some(sub) = session.subs.remove(channel) {
            let route = &self.route;
            route
                .realtime
                .leave(channel, &route.topics, self.id, &sub.member, &sub.state);
        }
        p::write_reply(self.line(), id, "unsubscribe", |o| {
            o.extend_from_slice(b"{}")
        });
    }

    fn publish(&mut self, id: u32, req: p::PublishRequest) {
        let options = match self.route.realtime.options(&req.channel) {
            Ok(options) => options.clone(),
            Err(e) => return self.error(id, channel_error(e)),
        };
        let session = self.session.as_ref().expect("connected");
        let member = session.sub(&req.channel).map(|s| s.member.clone());
        let allowed = options.allow_publish_for_client
            || (member.is_some() && options.allow_publish_for_subscriber);
        if !allowed {
            return self.error(id, p::PERMISSION_DENIED);
        }
        let data = serde_json::to_vec(&req.data).expect("a JSON value serialises");
        if data.len() > self.route.config.max_publication_bytes {
            return self.error(id, p::LIMIT_EXCEEDED);
        }
        let info = member.unwrap_or_else(|| self.member(None));
        let realtime = self.route.realtime.clone();
        let Some(hook) = self.hooks.of(&req.channel) else {
            let call = realtime.publish(req.channel, Bytes::from(data), Some(info), None);
            return self.answer(call, move |line, published| match published {
                Ok(_) => p::write_reply(line, id, "publish", |o| o.extend_from_slice(b"{}")),
                Err(e) => p::write_error(line, id, core_error(e)),
            });
        };
        // Only what the namespace's guest passes is published.
        let verdict = hook.ask(self.id, self.question(&req.channel), Some(&data));
        let max = self.route.config.max_publication_bytes;
        let call = async move {
            let data = match verdict.await.unwrap_or(RtAnswer::Failed) {
                RtAnswer::Pass => Bytes::from(data),
                RtAnswer::Replace(new) if is_json(&new) && new.len() <= max => new,
                RtAnswer::Replace(_) => {
                    tracing::warn!(
                        channel = %req.channel,
                        "a namespace guest replaced a publication with bytes that are not \
                         JSON or over max_publication_bytes; refused"
                    );
                    return Err(p::INTERNAL);
                }
                answer => return Err(refusal(answer)),
            };
            realtime
                .publish(req.channel, data, Some(info), None)
                .await
                .map_err(core_error)
        };
        self.answer_later(call, move |line, published| match published {
            Ok(_) => p::write_reply(line, id, "publish", |o| o.extend_from_slice(b"{}")),
            Err(e) => p::write_error(line, id, e),
        });
    }

    /// `presence` (or `presence_stats`): subscribers of namespaces that allow it.
    fn presence(&mut self, id: u32, channel: &str, stats: bool) {
        if let Err(e) = self.may_read(channel, |o| o.allow_presence_for_subscriber) {
            return self.error(id, e);
        }
        let realtime = self.route.realtime.clone();
        if stats {
            let call = realtime.presence_stats(channel.to_string());
            return self.answer(call, move |line, stats| match stats {
                Ok(s) => p::write_reply(line, id, "presence_stats", |o| {
                    o.extend_from_slice(
                        format!(
                            "{{\"num_clients\":{},\"num_users\":{}}}",
                            s.num_clients, s.num_users
                        )
                        .as_bytes(),
                    )
                }),
                Err(e) => p::write_error(line, id, core_error(e)),
            });
        }
        let call = realtime.presence(channel.to_string());
        self.answer(call, move |line, members| match members {
            Ok(members) => p::write_reply(line, id, "presence", |o| {
                o.extend_from_slice(b"{\"presence\":{");
                for (i, m) in members.iter().enumerate() {
                    if i > 0 {
                        o.push(b',');
                    }
                    p::write_str(o, &m.client);
                    o.push(b':');
                    p::write_client_info(o, m);
                }
                o.extend_from_slice(b"}}");
            }),
            Err(e) => p::write_error(line, id, core_error(e)),
        });
    }

    fn history(&mut self, id: u32, req: p::HistoryRequest) {
        if let Err(e) = self.may_read(&req.channel, |o| o.allow_history_for_subscriber) {
            return self.error(id, e);
        }
        let limit = match req.limit {
            n if n < 0 => HISTORY_MAX_PUBLICATION_LIMIT,
            n => (n as usize).min(HISTORY_MAX_PUBLICATION_LIMIT),
        };
        let query = HistoryQuery {
            limit: Some(limit),
            since: req.since.map(|s| StreamPosition {
                offset: s.offset,
                epoch: s.epoch,
            }),
            reverse: req.reverse,
        };
        let call = self.route.realtime.clone().history(req.channel, query);
        self.answer(call, move |line, history| match history {
            Ok((pubs, top)) => p::write_reply(line, id, "history", |o| {
                o.push(b'{');
                p::write_publications(o, &pubs);
                o.push(b',');
                p::write_position(o, &top);
                o.push(b'}');
            }),
            Err(e) => p::write_error(line, id, core_error(e)),
        });
    }

    /// Presence and history are for subscribers of namespaces that allow them.
    fn may_read(
        &self,
        channel: &str,
        allowed: impl Fn(&weir_realtime::NamespaceOptions) -> bool,
    ) -> Result<(), ErrorReply> {
        let options = self
            .route
            .realtime
            .options(channel)
            .map_err(channel_error)?;
        let session = self.session.as_ref().expect("connected");
        if session.sub(channel).is_none() || !allowed(options) {
            return Err(p::PERMISSION_DENIED);
        }
        Ok(())
    }

    fn refresh(&mut self, id: u32, token: &str) {
        let identity = match self.route.verifier.load().connection(token) {
            Ok(identity) => identity,
            Err(TokenError::Expired) => return self.error(id, p::TOKEN_EXPIRED),
            Err(TokenError::Invalid) => return self.disconnect(p::DISCONNECT_INVALID_TOKEN),
        };
        let session = self.session.as_mut().expect("connected");
        if identity.user != session.user {
            return self.disconnect(p::DISCONNECT_INVALID_TOKEN);
        }
        let ttl = identity.expires_at.map(|at| at.saturating_sub(unix_now()));
        let grace = self.route.config.expired_close_delay;
        session.expires = ttl.map(|s| Instant::now() + Duration::from_secs(s) + grace);
        let client = session.client.clone();
        p::write_reply(self.line(), id, "refresh", |o| {
            o.extend_from_slice(b"{\"client\":");
            p::write_str(o, &client);
            o.extend_from_slice(b",\"version\":");
            p::write_str(o, SERVER_VERSION);
            if let Some(ttl) = ttl {
                o.extend_from_slice(format!(",\"expires\":true,\"ttl\":{ttl}").as_bytes());
            }
            o.push(b'}');
        });
    }

    /// The next moment a clock needs looking at.
    fn next_deadline(&self) -> Instant {
        match &self.session {
            None => self.opened + STALE_CLOSE_DELAY,
            Some(s) => {
                let mut at = self.pong_due.unwrap_or(self.next_ping);
                if let Some(expires) = s.expires {
                    at = at.min(expires);
                }
                s.subs
                    .values()
                    .filter_map(|sub| sub.expires)
                    .fold(at, Instant::min)
            }
        }
    }
}

impl Behaviour for Centrifugo {
    /// Pushes from publishers on any worker write straight into this socket.
    const DIRECT_WRITES: bool = true;
    /// The connection's clocks (`beside`).
    const HAS_BESIDE: bool = true;

    fn on_open(&mut self, id: u64, outbound: &Arc<Outbound>) {
        self.id = id;
        self.outbound = Some(outbound.clone());
    }

    /// Not read while a worker's fan-out backlog is over its budget, or
    /// while [`MAX_PENDING_CALLS`] of this connection's calls wait on Redis.
    #[inline]
    fn reads_blocked(&self, _own: &Outbound) -> bool {
        self.route.topics.congested()
            || self.pending.count.load(Ordering::Acquire) >= MAX_PENDING_CALLS
    }

    async fn unblocked(&mut self, _own: &Outbound) -> Result<(), Stop> {
        if self.route.topics.congested() {
            self.route.topics.fanout().wait_drained().await;
        }
        loop {
            let answered = self.pending.done.notified();
            tokio::pin!(answered);
            answered.as_mut().enable();
            if self.pending.count.load(Ordering::Acquire) < MAX_PENDING_CALLS {
                return Ok(());
            }
            answered.await;
        }
    }

    async fn beside(&mut self) -> Result<(), Stop> {
        let inbox = self.inbox.clone();
        tokio::select! {
            () = tokio::time::sleep_until(self.next_deadline().into()) => {}
            () = inbox.wait() => {
                self.on_user_commands();
                return Ok(());
            }
        }
        let now = Instant::now();
        let Some(session) = &self.session else {
            if self.closing {
                // The close is queued; the loop ends the connection.
                return std::future::pending().await;
            }
            self.closing = true;
            return Err(Stop::Close(
                p::DISCONNECT_STALE.code,
                p::DISCONNECT_STALE.reason,
            ));
        };
        if session.expires.is_some_and(|at| at <= now) {
            self.closing = true;
            return Err(Stop::Close(
                p::DISCONNECT_EXPIRED.code,
                p::DISCONNECT_EXPIRED.reason,
            ));
        }
        if self.pong_due.is_some_and(|at| at <= now) {
            self.closing = true;
            return Err(Stop::Close(
                p::DISCONNECT_NO_PONG.code,
                p::DISCONNECT_NO_PONG.reason,
            ));
        }
        self.expire_subscriptions(now);
        if self.next_ping <= now {
            self.outbound()
                .send_frames(&encode::frame(OpCode::Text, b"{}"));
            self.next_ping = now + self.route.config.ping_interval;
            if self.pong_due.is_none() {
                self.pong_due = Some(now + self.route.config.pong_timeout);
            }
        }
        Ok(())
    }

    fn on_data(&mut self, buf: &mut [u8], piece: &DataPiece, _out: &mut Output) {
        if self.closing {
            return;
        }
        let payload = &buf[piece.payload.clone()];
        if self.message.len() + payload.len() > self.route.config.max_command_bytes {
            self.oversized = true;
        } else if !self.oversized {
            self.message.extend_from_slice(payload);
        }
        if !piece.message_end() {
            return;
        }
        if self.oversized {
            self.message.clear();
            return self.disconnect(p::DISCONNECT_MESSAGE_SIZE);
        }
        if piece.message != OpCode::Text {
            // The JSON protocol is text; Protobuf (binary) is not served yet.
            self.message.clear();
            return self.disconnect(p::DISCONNECT_BAD_REQUEST);
        }
        self.on_message();
    }

    fn end_of_read(&mut self) -> Result<(), Stop> {
        self.flush();
        Ok(())
    }

    fn on_close(&mut self, id: u64) {
        if let Some(session) = self.session.take() {
            let route = &self.route;
            route.realtime.clients.remove(&session.user, id);
            for (channel, sub) in session.subs {
                route
                    .realtime
                    .leave(&channel, &route.topics, id, &sub.member, &sub.state);
            }
        }
    }
}

/// A fresh client id: a random UUID (version 4), as Centrifugo's.
fn client_id() -> String {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).expect("the OS random source");
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// A namespace guest's refusal (or failure) as the client's error: 103 is
/// permission denied, 100 a guest that failed or did not answer, any
/// other code the guest's own (Centrifugo's range for applications is 400
/// and up).
fn refusal(answer: RtAnswer) -> ErrorReply {
    match answer {
        RtAnswer::Refuse(code) | RtAnswer::Drop(code) => match code {
            0 | 103 => p::PERMISSION_DENIED,
            100 => p::INTERNAL,
            code => ErrorReply {
                code: code.into(),
                message: "refused by the namespace's guest",
            },
        },
        _ => p::INTERNAL,
    }
}

/// Whether `bytes` are one JSON value (a replacement publication must be,
/// for the JSON protocol).
fn is_json(bytes: &[u8]) -> bool {
    serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_ok()
}

/// A channel name the namespaces refuse.
fn channel_error(e: RealtimeError) -> ErrorReply {
    use weir_realtime::namespace::ChannelNameError;
    match e {
        RealtimeError::ChannelName(ChannelNameError::UnknownNamespace) => p::UNKNOWN_CHANNEL,
        RealtimeError::ChannelName(_) => p::BAD_REQUEST,
        other => core_error(other),
    }
}

/// The core's refusals as Centrifugo's error codes.
fn core_error(e: RealtimeError) -> ErrorReply {
    use weir_realtime::history::HistoryError;
    use weir_realtime::presence::PresenceError;
    match e {
        RealtimeError::ChannelName(_) => channel_error(e),
        RealtimeError::Presence(PresenceError::PresenceFull) => p::LIMIT_EXCEEDED,
        RealtimeError::TooManyChannels => p::LIMIT_EXCEEDED,
        RealtimeError::History(HistoryError::UnrecoverablePosition) => p::UNRECOVERABLE_POSITION,
        RealtimeError::NotAvailable => p::NOT_AVAILABLE,
        RealtimeError::Unavailable => p::INTERNAL,
    }
}
