//! One Centrifugo connection: commands in (newline-separated JSON, several
//! per frame), replies out (one frame per read, newline-separated), pushes
//! from the real-time core through the connection's outbound queue, and the
//! connection's clocks: a connect within [`STALE_CLOSE_DELAY`], a server
//! ping every `ping_interval` answered within `pong_timeout`, and the
//! token's expiry unless the client refreshes it.

mod behaviour;
mod channels;
mod subscriptions;

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
}

impl Centrifugo {
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
        RtAnswer::Refuse(code, _) | RtAnswer::Drop(code) => match code {
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
