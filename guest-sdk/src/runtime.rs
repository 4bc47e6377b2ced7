//! What one instance remembers between batches, and how a batch becomes
//! hook calls: the same code runs in the component (called by the
//! [`export!`](crate::export) glue) and in [`testing`](crate::testing).

use std::collections::hash_map::Entry as MapEntry;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use weir_abi::{Event, ProxyMessage, COMMAND_HEADER_BYTES, EVENT_HEADER_BYTES};

use crate::conn::{Context, Entry};
use crate::{
    ChannelRequest, ClientEventRequest, Conn, ConnState, ConnectRequest, ConnectionId, Handler,
    Level, Message, PublishRequest, Request, SubscribeRequest, Upgrade, Verdict,
};

/// Connection ids are handed out sequentially, so a multiplicative hash is
/// enough and avoids std's randomly seeded hasher (a WASI random call).
#[derive(Default)]
pub(crate) struct IdHasher(u64);

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

/// An upgrade decision as the ABI carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum UpgradeAnswer {
    Accept {
        protocol: Option<String>,
        attachment: Vec<u8>,
    },
    Reject(u16),
    Defer {
        tag: crate::Tag,
        request: crate::HttpRequest,
    },
}

/// One instance's handler and what it knows of each connection.
pub(crate) struct Runtime<H: Handler> {
    handler: H,
    conns: Conns<H::State>,
    /// What a route's own I/O answer is handled with: no parameters, a
    /// `Default` state that is never saved.
    route: Entry<H::State>,
    /// Output sizes of the last batch (header bytes, data bytes), to size
    /// the next one's buffers.
    last_commands: usize,
    last_data: usize,
}

impl<H: Handler> Default for Runtime<H> {
    fn default() -> Self {
        Runtime {
            handler: H::default(),
            conns: HashMap::default(),
            route: Entry::from_bytes(None),
            last_commands: 0,
            last_data: 0,
        }
    }
}

type Conns<S> = HashMap<ConnectionId, Entry<S>, BuildHasherDefault<IdHasher>>;

/// The entry of `conn`, restored from what the host knows of it if this
/// instance has not seen it (it replaced the instance that had).
fn known<'c, S: ConnState>(
    conns: &'c mut Conns<S>,
    conn: ConnectionId,
    lookup: &mut dyn FnMut(ConnectionId) -> Option<Vec<u8>>,
) -> &'c mut Entry<S> {
    conns
        .entry(conn)
        .or_insert_with(|| Entry::from_bytes(lookup(conn).as_deref()))
}

/// Save the state of `conn` if the hook changed it. A state that persists
/// to nothing while nothing is stored costs no command.
fn settle<S: ConnState>(ctx: &mut Context, conn: ConnectionId, entry: &mut Entry<S>) {
    if !std::mem::take(&mut entry.dirty) || std::mem::size_of::<S>() == 0 {
        return;
    }
    let (commands, data) = (ctx.commands.len(), ctx.data.len());
    let wrote = ctx.save(conn, &entry.state);
    if !wrote && !entry.stored {
        ctx.commands.truncate(commands);
        ctx.data.truncate(data);
    }
    entry.stored = wrote;
}

/// Call an I/O hook with the connection it is for, or with the route's
/// handle when `conn` is 0 (whose state is not saved).
fn io_hook<S: ConnState>(
    conns: &mut Conns<S>,
    route: &mut Entry<S>,
    ctx: &mut Context,
    conn: ConnectionId,
    lookup: &mut dyn FnMut(ConnectionId) -> Option<Vec<u8>>,
    hook: impl FnOnce(&mut Conn<'_, S>),
) {
    if conn == 0 {
        hook(&mut Conn::new(0, ctx, route));
        route.dirty = false;
        return;
    }
    let entry = known(conns, conn, lookup);
    hook(&mut Conn::new(conn, ctx, entry));
    settle(ctx, conn, entry);
}

impl<H: Handler> Runtime<H> {
    #[cfg(test)]
    pub(crate) fn handler(&self) -> &H {
        &self.handler
    }

    /// Ask the handler about an upgrade; a first state becomes the
    /// connection's attachment.
    pub(crate) fn upgrade(&mut self, req: &Request) -> UpgradeAnswer {
        let answer = self.handler.on_upgrade(req);
        Self::answer(answer)
    }

    /// A deferred upgrade's outcome: the handler decides now.
    pub(crate) fn resume_upgrade(
        &mut self,
        req: &Request,
        result: crate::HttpResult<'_>,
    ) -> UpgradeAnswer {
        let answer = self.handler.on_upgrade_response(req, result);
        Self::answer(answer)
    }

    fn answer(answer: Upgrade<H::State>) -> UpgradeAnswer {
        match answer {
            Upgrade::Accept { protocol, state } => {
                let mut attachment = Vec::new();
                if let Some(state) = state {
                    state.persist(&mut attachment);
                }
                UpgradeAnswer::Accept {
                    protocol,
                    attachment,
                }
            }
            Upgrade::Reject(status) => UpgradeAnswer::Reject(status),
            Upgrade::Defer(request) => UpgradeAnswer::Defer {
                tag: crate::io::next_tag(),
                request,
            },
        }
    }

    /// One hook call per event of the batch (`events` headers, `data`
    /// bytes), one answer. `lookup` is the host's `connection` import: what
    /// it knows of a connection this instance has not seen.
    pub(crate) fn handle(
        &mut self,
        events: &[u8],
        data: &[u8],
        lookup: &mut dyn FnMut(ConnectionId) -> Option<Vec<u8>>,
    ) -> Context {
        let event_count = events.len() / EVENT_HEADER_BYTES;
        let mut ctx = Context::with_capacity(
            self.last_commands.max(event_count * COMMAND_HEADER_BYTES),
            self.last_data.max(data.len()),
        );
        let Runtime {
            handler,
            conns,
            route,
            ..
        } = self;
        // The host checked what it sends; a batch that still breaks the ABI
        // is a host bug, and failing the batch (1011 for its connections)
        // is the honest answer.
        let events = match weir_abi::parse_events(events, data) {
            Ok(events) => events,
            Err(e) => {
                crate::log(
                    Level::Error,
                    &format!("batch breaks the weir:gateway ABI: {e}"),
                );
                panic!("batch breaks the weir:gateway ABI: {e}");
            }
        };
        // Kinds this SDK does not know (a newer host) are skipped.
        for event in &events {
            match event {
                Event::Open { conn, info } => {
                    // A fresh entry even if the id was seen before.
                    let entry = match conns.entry(conn) {
                        MapEntry::Occupied(mut e) => {
                            e.insert(Entry::new(&info));
                            e.into_mut()
                        }
                        MapEntry::Vacant(e) => e.insert(Entry::new(&info)),
                    };
                    handler.on_open(&mut Conn::new(conn, &mut ctx, entry));
                    settle(&mut ctx, conn, entry);
                }
                Event::Text { conn, text } => {
                    let entry = known(conns, conn, lookup);
                    handler.on_message(&mut Conn::new(conn, &mut ctx, entry), Message::Text(text));
                    settle(&mut ctx, conn, entry);
                }
                Event::Binary { conn, payload } => {
                    let entry = known(conns, conn, lookup);
                    let msg = Message::Binary(payload);
                    handler.on_message(&mut Conn::new(conn, &mut ctx, entry), msg);
                    settle(&mut ctx, conn, entry);
                }
                Event::Close { conn, code, reason } => {
                    let entry = known(conns, conn, lookup);
                    handler.on_close(&mut Conn::new(conn, &mut ctx, entry), code, reason);
                    conns.remove(&conn);
                }
                Event::HttpResponse {
                    conn,
                    tag,
                    status,
                    head,
                    body,
                } => {
                    let response = Ok(crate::HttpResponse::new(status, head, body));
                    io_hook(conns, route, &mut ctx, conn, lookup, |c| {
                        handler.on_response(c, tag, response)
                    });
                }
                Event::HttpError {
                    conn,
                    tag,
                    reason,
                    message,
                } => {
                    let error = Err(crate::HttpError {
                        reason: weir_abi::HttpErrorReason::from_code(reason),
                        message,
                    });
                    io_hook(conns, route, &mut ctx, conn, lookup, |c| {
                        handler.on_response(c, tag, error)
                    });
                }
                Event::Timer { conn, tag } => {
                    io_hook(conns, route, &mut ctx, conn, lookup, |c| {
                        handler.on_timer(c, tag)
                    });
                }
                Event::KvError { conn, reason, key } => {
                    let reason = weir_abi::KvErrorReason::from_code(reason);
                    io_hook(conns, route, &mut ctx, conn, lookup, |c| {
                        handler.on_kv_error(c, key, reason)
                    });
                }
                Event::History { conn, tag, result } => {
                    let result = result.map_err(read_error);
                    io_hook(conns, route, &mut ctx, conn, lookup, |c| {
                        handler.on_history(c, tag, result)
                    });
                }
                Event::Presence { conn, tag, result } => {
                    let result = result.map_err(read_error);
                    io_hook(conns, route, &mut ctx, conn, lookup, |c| {
                        handler.on_presence(c, tag, result)
                    });
                }
                Event::Proxy {
                    conn,
                    direction,
                    msg,
                } => {
                    let msg = match msg {
                        ProxyMessage::Text(t) => Message::Text(t),
                        ProxyMessage::Binary(b) => Message::Binary(b),
                    };
                    let entry = known(conns, conn, lookup);
                    let mut c = Conn::new(conn, &mut ctx, entry);
                    match handler.on_proxy_message(&mut c, direction, msg) {
                        Verdict::Forward => c.forward(direction, msg),
                        Verdict::ReplaceText(t) => c.forward(direction, Message::Text(&t)),
                        Verdict::ReplaceBinary(b) => c.forward(direction, Message::Binary(&b)),
                        Verdict::Drop => {}
                        Verdict::Close(code, reason) => c.close(code, &reason),
                    }
                    settle(&mut ctx, conn, entry);
                }
                Event::RtSubscribe { conn, req } => {
                    let decision = handler.on_subscribe(&SubscribeRequest::from_abi(&req));
                    ctx.subscribe_verdict(conn, req.call, decision);
                }
                Event::RtPublish { conn, req, data } => {
                    let decision = handler.on_client_publish(&PublishRequest::from_abi(&req, data));
                    ctx.publish_verdict(conn, req.call, &decision);
                }
                Event::PusherConnect { conn, req } => {
                    let decision = handler.on_pusher_connect(&ConnectRequest::from_abi(&req));
                    ctx.connect_verdict(conn, req.call, &decision);
                }
                Event::PusherSubscribe {
                    conn,
                    req,
                    check,
                    auth,
                } => {
                    let channel = ChannelRequest::from_abi(&req, check, auth);
                    let decision = handler.on_pusher_subscribe(&channel);
                    ctx.channel_verdict(conn, req.call, &decision);
                }
                Event::PusherClientEvent { conn, req, data } => {
                    let event = ClientEventRequest::from_abi(&req, data);
                    let decision = handler.on_pusher_client_event(&event);
                    ctx.publish_verdict(conn, req.call, &decision);
                }
            }
        }
        self.last_commands = ctx.commands.len();
        self.last_data = ctx.data.len();
        ctx
    }
}

/// A read's error code as the SDK names it.
fn read_error(code: u16) -> crate::ReadError {
    crate::ReadError {
        reason: weir_abi::ReadErrorReason::from_code(code),
    }
}
