//! How a guest's commands are applied, in order, to the route's
//! connections on any worker (found through the registry): sends written
//! into one buffer per connection, closes, topic publishes and
//! subscriptions (or the real-time core's, for a `realtime` route), a
//! filter's forwards and a namespace guest's verdicts, and the I/O asked
//! for, handed to `services`.

use crate::kind::route::GuestRoute;
use crate::services::kv::quota::KvErrorReason;
use crate::{Command, Commands, Program};
use bytes::Bytes;
use std::sync::Arc;
use std::time::Duration;
use tracing::warn;
use weir_abi::Direction;
use weir_reactor::outbound::Outbound;
use weir_reactor::stats::GuestCounters;
use weir_ws::encode::{self, message_opcode};

impl GuestRoute {
    /// A key-value write of a batch on `worker` was refused: counted,
    /// logged now and then, and told to the route's guest there.
    fn kv_refused(&self, worker: usize, key: &[u8], reason: KvErrorReason) {
        self.kv_refusals.note(&self.path, key, reason);
        self.io.kv_refused(worker, key, reason);
    }

    /// The queue of `conn` if it is open on this route.
    pub(super) fn lookup(&self, conn: u64) -> Option<Arc<Outbound>> {
        self.registry.outbound(conn, self.index)
    }

    /// Applies a guest's commands in order. Consecutive sends to one
    /// connection are written into one buffer and handed over once,
    /// compressed if the connection negotiated permessage-deflate, straight
    /// into the socket when the connection is not writing itself (see
    /// `Outbound::send_frames`).
    pub(super) fn apply(
        &self,
        commands: &Commands,
        counters: &GuestCounters,
        worker: usize,
        program: &Program,
    ) {
        let (mut messages, mut bytes) = (0, 0);
        // A realtime route's consecutive publishes, handed to the core
        // together (in order) before the next other command.
        let mut rt_publishes = Vec::new();
        let mut pending: Option<u64> = None;
        let mut frames = Vec::new();
        let flush = |pending: &mut Option<u64>, frames: &mut Vec<u8>| {
            if let Some(conn) = pending.take() {
                if let Some(out) = self.lookup(conn) {
                    // Compressed for the connection if it negotiated
                    // permessage-deflate; the guest sent plain payloads.
                    out.send_frames(frames);
                }
                frames.clear();
            }
        };
        for command in commands.iter() {
            if let Some(calls) = &self.rt_calls {
                match command {
                    Command::RtSubscribeVerdict {
                        call,
                        code,
                        authorise,
                        payload,
                        ..
                    } => calls.answer_subscribe(call, code, authorise, payload),
                    Command::RtPublishVerdict { call, verdict, .. } => {
                        calls.answer_publish(call, verdict)
                    }
                    _ => {}
                }
                continue;
            }
            if let Some(rt) = &self.realtime {
                if !matches!(command, Command::Publish { .. }) && !rt_publishes.is_empty() {
                    rt.publish(std::mem::take(&mut rt_publishes));
                }
            }
            // A filter's forward toward the client is a send.
            let command = match command {
                Command::Forward {
                    conn,
                    direction: Direction::ToClient,
                    text,
                    payload,
                } if self.filter_links.is_some() => Command::Send {
                    conn,
                    text,
                    payload,
                },
                other => other,
            };
            if let Command::Send {
                conn,
                text,
                payload,
            } = command
            {
                if pending.is_some_and(|c| c != conn) {
                    flush(&mut pending, &mut frames);
                }
                pending = Some(conn);
                messages += 1;
                bytes += payload.len() as u64;
                encode::append_frame(&mut frames, message_opcode(text), payload);
                continue;
            }
            flush(&mut pending, &mut frames);
            match command {
                Command::Send { .. } => unreachable!("handled above"),
                Command::Close { conn, code, reason } => {
                    if let Some(out) = self.lookup(conn) {
                        out.close(code, reason);
                    }
                }
                Command::Publish {
                    topic,
                    text,
                    payload,
                    exclude,
                } => {
                    messages += 1;
                    bytes += payload.len() as u64;
                    if self.realtime.is_some() {
                        // The core delivers to every subscriber (`exclude`
                        // has no meaning for a channel's publication).
                        let payload = Bytes::copy_from_slice(payload);
                        rt_publishes.push((topic.to_string(), text, payload));
                        continue;
                    }
                    let frame = Bytes::from(encode::frame(message_opcode(text), payload));
                    self.topics.publish(topic, &frame, exclude);
                }
                Command::Subscribe { conn, topic } => {
                    if self
                        .realtime
                        .as_ref()
                        .is_some_and(|rt| !rt.may_subscribe(topic))
                    {
                        continue;
                    }
                    if let Some(out) = self.registry.subscribe(conn, self.index, topic) {
                        self.topics.subscribe(topic, conn, out);
                    }
                }
                // Applied by the runner before the commands reach here.
                Command::SetAttachment { .. } => {}
                Command::Unsubscribe { conn, topic } => {
                    if self.registry.unsubscribe(conn, self.index, topic) {
                        self.topics.unsubscribe(topic, conn);
                    }
                }
                // I/O for a connection is only for one of the route's own
                // that is still open; 0 is the route's own.
                Command::HttpRequest {
                    conn,
                    tag,
                    head,
                    body,
                } => {
                    if conn == 0 || self.lookup(conn).is_some() {
                        let policy = &program.config().outbound;
                        self.io.http(worker, conn, tag, head, body, policy);
                    }
                }
                Command::SetTimer {
                    conn,
                    tag,
                    delay_ms,
                } => {
                    if conn == 0 || self.lookup(conn).is_some() {
                        let delay = Duration::from_millis(delay_ms);
                        self.io.set_timer(worker, conn, tag, delay);
                    }
                }
                Command::CancelTimer { conn, tag } => self.io.cancel_timer(conn, tag),
                Command::KvSet { key, value, ttl_ms } => {
                    let done = match &self.kv {
                        Some(kv) => kv.set(key, value, ttl_ms),
                        None => Err(KvErrorReason::NoStore),
                    };
                    if let Err(reason) = done {
                        self.kv_refused(worker, key, reason);
                    }
                }
                Command::KvDelete { key } => {
                    let done = match &self.kv {
                        Some(kv) => kv.delete(key),
                        None => Err(KvErrorReason::NoStore),
                    };
                    if let Err(reason) = done {
                        self.kv_refused(worker, key, reason);
                    }
                }
                Command::RtSubscribeVerdict { .. } | Command::RtPublishVerdict { .. } => warn!(
                    route = &*self.path,
                    "a real-time verdict on a route that is not a namespace guest; ignored"
                ),
                Command::HistoryRead {
                    conn,
                    tag,
                    limit,
                    reverse,
                    channel,
                } => {
                    if conn == 0 || self.lookup(conn).is_some() {
                        match &self.realtime {
                            Some(rt) => {
                                rt.history(&self.io, worker, conn, tag, channel, limit, reverse)
                            }
                            None => self.io.deliver_event(
                                worker,
                                crate::services::realtime::not_realtime(conn, tag, false),
                            ),
                        }
                    }
                }
                Command::PresenceRead { conn, tag, channel } => {
                    if conn == 0 || self.lookup(conn).is_some() {
                        match &self.realtime {
                            Some(rt) => rt.presence(&self.io, worker, conn, tag, channel),
                            None => self.io.deliver_event(
                                worker,
                                crate::services::realtime::not_realtime(conn, tag, true),
                            ),
                        }
                    }
                }
                Command::Forward {
                    conn,
                    direction,
                    text,
                    payload,
                } => match &self.filter_links {
                    Some(links) if direction == Direction::ToUpstream => {
                        messages += 1;
                        bytes += payload.len() as u64;
                        links.forward_to_upstream(conn, text, payload);
                    }
                    Some(_) => unreachable!("forwards toward the client are sends"),
                    None => warn!(
                        route = &*self.path,
                        "forward on a route that is not a proxy filter; ignored"
                    ),
                },
            }
        }
        flush(&mut pending, &mut frames);
        if let (Some(rt), false) = (&self.realtime, rt_publishes.is_empty()) {
            rt.publish(rt_publishes);
        }
        counters.messages_out.add(messages);
        counters.bytes_out.add(bytes);
    }
}
