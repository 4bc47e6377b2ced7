//! A guest route with `realtime = true` (issue 37): its topics are the
//! real-time core's channels, as a pubsub route's with the same key
//! (`realtime::Realtime::attach` with `native::pubsub::PlainFramer`, so
//! publications reach the guest's subscribers as plain text frames, data
//! only). This module owns what the guest's commands do there: a subscribe
//! is checked as the core checks a channel name, a publish goes through
//! [`Realtime::publish`] (offsets, history, centrifugo subscribers, other
//! nodes), and history-read / presence-read run [`Realtime::history`] and
//! [`Realtime::presence`], answered by events in a later batch through the
//! route's I/O inboxes (`services::io`). A refused subscribe or publish is
//! logged at warn (the first few, then now and then) and counted.

use crate::services::io::{IoEvent, RouteIo};
use crate::ConnectionId;
use bytes::Bytes;
use futures_util::FutureExt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use tracing::warn;
use weir_abi::ReadErrorReason;
use weir_realtime::StreamPosition;
use weir_realtime::{ClientInfo, HistoryQuery, Publication, Realtime, RealtimeError};

/// History and presence reads of one route waiting on the core at once
/// (with `[cluster]`, on Redis); past it a read is answered `busy` at once,
/// so a guest cannot pile up tasks or answers.
pub(crate) const MAX_READS_PENDING_PER_ROUTE: usize = 256;
/// Publications one history read returns at most, whatever the guest asks:
/// the centrifugo route's and the server API's cap.
pub(crate) const HISTORY_READ_MAX_PUBLICATIONS: usize =
    weir_realtime::HISTORY_MAX_PUBLICATION_LIMIT;
/// Members one presence read returns at most (the first ones the core
/// lists): one answer stays bounded in a channel of any size.
pub(crate) const PRESENCE_READ_MAX_MEMBERS: usize = 1000;
/// Runs of publishes of one route waiting on Redis at once (with
/// `[cluster]`); past it a run's publishes are refused and counted.
pub(crate) const MAX_PUBLISH_BATCHES_PENDING: usize = 1024;
/// Refusals logged one by one before only every [`LOG_EVERY`]th is.
const LOG_FIRST: u64 = 16;
const LOG_EVERY: u64 = 1024;

/// One realtime guest route's side of the core.
pub struct GuestRealtime {
    core: Arc<Realtime>,
    /// The route path, for logs.
    route: Arc<str>,
    /// Subscribes and publishes refused (bad channel, not JSON, Redis).
    refused: AtomicU64,
    /// Reads waiting on the core.
    reads: AtomicUsize,
    /// Publish batches waiting on the core (with `[cluster]`).
    publishing: AtomicUsize,
}

impl GuestRealtime {
    pub fn new(core: Arc<Realtime>, route: Arc<str>) -> Arc<GuestRealtime> {
        Arc::new(GuestRealtime {
            core,
            route,
            refused: AtomicU64::new(0),
            reads: AtomicUsize::new(0),
            publishing: AtomicUsize::new(0),
        })
    }

    /// Subscribes and publishes of the guest refused so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    fn refuse(&self, what: &str, channel: &str, why: &dyn std::fmt::Display) {
        let n = self.refused.fetch_add(1, Ordering::Relaxed) + 1;
        if n <= LOG_FIRST || n.is_multiple_of(LOG_EVERY) {
            warn!(
                route = &*self.route,
                channel,
                refused_total = n,
                "guest {what} refused: {why}"
            );
        }
    }

    /// Whether the guest may subscribe to `channel`: the core's name check
    /// (the namespace must exist, the name not be too long).
    pub(crate) fn may_subscribe(&self, channel: &str) -> bool {
        match self.core.options(channel) {
            Ok(_) => true,
            Err(e) => {
                self.refuse("subscribe", channel, &e);
                false
            }
        }
    }

    /// Publishes a run of a batch's publications (channel, text, payload)
    /// through the core, in order: at once on one node, on the core's runtime with
    /// `[cluster]`. Only text that is JSON is published (the core's
    /// publications are JSON, as a centrifugo client reads them).
    pub fn publish(self: &Arc<Self>, publishes: Vec<(String, bool, Bytes)>) {
        let mut checked = Vec::with_capacity(publishes.len());
        for (channel, text, payload) in publishes {
            if !text || serde_json::from_slice::<serde::de::IgnoredAny>(&payload).is_err() {
                self.refuse("publish", &channel, &"the payload is not JSON text");
                continue;
            }
            if let Err(e) = self.core.options(&channel) {
                self.refuse("publish", &channel, &e);
                continue;
            }
            checked.push((channel, payload));
        }
        if checked.is_empty() {
            return;
        }
        let me = self.clone();
        let publish_all = async move {
            for (channel, data) in checked {
                let done = me
                    .core
                    .clone()
                    .publish(channel.clone(), data, None, None)
                    .await;
                if let Err(e) = done {
                    me.refuse("publish", &channel, &e);
                }
            }
        };
        match self.core.runtime() {
            None => publish_all
                .now_or_never()
                .expect("one node's real-time calls finish at once"),
            Some(runtime) => {
                if self.publishing.fetch_add(1, Ordering::AcqRel) >= MAX_PUBLISH_BATCHES_PENDING {
                    self.publishing.fetch_sub(1, Ordering::AcqRel);
                    self.refuse("publish", "*", &"too many publishes waiting on Redis");
                    return;
                }
                let me = self.clone();
                runtime.spawn(async move {
                    publish_all.await;
                    me.publishing.fetch_sub(1, Ordering::AcqRel);
                });
            }
        }
    }

    /// A history-read of a batch on worker `asker`: up to `limit`
    /// publications (cut to [`HISTORY_READ_MAX_PUBLICATIONS`]), answered by
    /// a history event for `conn` with `tag`.
    #[allow(clippy::too_many_arguments)]
    pub fn history(
        self: &Arc<Self>,
        io: &Arc<RouteIo>,
        asker: usize,
        conn: ConnectionId,
        tag: u64,
        channel: &str,
        limit: u32,
        reverse: bool,
    ) {
        let query = HistoryQuery {
            limit: Some((limit as usize).min(HISTORY_READ_MAX_PUBLICATIONS)),
            since: None,
            reverse,
        };
        let call = self.core.clone().history(channel.to_string(), query);
        self.read(
            io,
            asker,
            conn,
            false,
            call,
            move |found| match found {
                Ok((pubs, top)) => Ok(history_bytes(tag, &pubs, &top)),
                Err(e) => Err(read_error(e, ReadErrorReason::HistoryOff)),
            },
            tag,
        );
    }

    /// A presence-read of a batch on worker `asker`: the channel's members
    /// (at most [`PRESENCE_READ_MAX_MEMBERS`]), answered by a presence
    /// event for `conn` with `tag`.
    pub fn presence(
        self: &Arc<Self>,
        io: &Arc<RouteIo>,
        asker: usize,
        conn: ConnectionId,
        tag: u64,
        channel: &str,
    ) {
        let call = self.core.clone().presence(channel.to_string());
        self.read(
            io,
            asker,
            conn,
            true,
            call,
            move |found| match found {
                Ok(members) => Ok(presence_bytes(tag, &members)),
                Err(e) => Err(read_error(e, ReadErrorReason::PresenceOff)),
            },
            tag,
        );
    }

    /// Runs a read (bounded by [`MAX_READS_PENDING_PER_ROUTE`]) and queues
    /// its answer for the worker that should see it.
    #[allow(clippy::too_many_arguments)]
    fn read<T: Send + 'static>(
        self: &Arc<Self>,
        io: &Arc<RouteIo>,
        asker: usize,
        conn: ConnectionId,
        presence: bool,
        call: impl Future<Output = T> + Send + 'static,
        answer: impl FnOnce(T) -> Result<Vec<u8>, ReadErrorReason> + Send + 'static,
        tag: u64,
    ) {
        let event = move |result: Result<Vec<u8>, ReadErrorReason>| {
            let (code, bytes) = match result {
                Ok(bytes) => (0, bytes),
                Err(reason) => (reason as u16, tag.to_le_bytes().to_vec()),
            };
            IoEvent::RealtimeRead {
                conn,
                presence,
                code,
                bytes,
            }
        };
        if self.reads.fetch_add(1, Ordering::AcqRel) >= MAX_READS_PENDING_PER_ROUTE {
            self.reads.fetch_sub(1, Ordering::AcqRel);
            return io.deliver_event(asker, event(Err(ReadErrorReason::Busy)));
        }
        match self.core.runtime() {
            None => {
                let done = call
                    .now_or_never()
                    .expect("one node's real-time calls finish at once");
                self.reads.fetch_sub(1, Ordering::AcqRel);
                io.deliver_event(asker, event(answer(done)));
            }
            Some(runtime) => {
                let (me, io) = (self.clone(), io.clone());
                runtime.spawn(async move {
                    let done = call.await;
                    me.reads.fetch_sub(1, Ordering::AcqRel);
                    io.deliver_event(asker, event(answer(done)));
                });
            }
        }
    }
}

/// The answer to a read on a route without `realtime = true`.
pub(crate) fn not_realtime(conn: ConnectionId, tag: u64, presence: bool) -> IoEvent {
    IoEvent::RealtimeRead {
        conn,
        presence,
        code: ReadErrorReason::NotRealtime as u16,
        bytes: tag.to_le_bytes().to_vec(),
    }
}

/// The read error a core error means (`off`: what a namespace without the
/// feature answers).
fn read_error(e: RealtimeError, off: ReadErrorReason) -> ReadErrorReason {
    match e {
        RealtimeError::ChannelName(_) => ReadErrorReason::BadChannel,
        RealtimeError::NotAvailable => off,
        // The namespace holds `max_channels` already: try again later.
        RealtimeError::TooManyChannels => ReadErrorReason::Busy,
        RealtimeError::Unavailable | RealtimeError::History(_) | RealtimeError::Presence(_) => {
            ReadErrorReason::Unavailable
        }
    }
}

fn history_bytes(tag: u64, pubs: &[Publication], top: &StreamPosition) -> Vec<u8> {
    // The ABI carries publications as UTF-8 (they are JSON text): data
    // that is not (a foreign writer's, through Redis) is mended, not
    // allowed to break the guest's batch.
    let data: Vec<_> = pubs
        .iter()
        .map(|p| (p.offset, String::from_utf8_lossy(&p.data)))
        .collect();
    let mut out = Vec::new();
    weir_abi::io::encode_history(
        &mut out,
        tag,
        top.offset,
        &top.epoch,
        data.iter().map(|(offset, data)| (*offset, data.as_bytes())),
    );
    out
}

fn presence_bytes(tag: u64, members: &[Arc<ClientInfo>]) -> Vec<u8> {
    let mut out = Vec::new();
    weir_abi::io::encode_presence(
        &mut out,
        tag,
        members.iter().take(PRESENCE_READ_MAX_MEMBERS).map(|m| {
            let info = m
                .conn_info
                .as_deref()
                .filter(|info| std::str::from_utf8(info).is_ok())
                .unwrap_or_default();
            (m.client.as_str(), m.user.as_str(), info)
        }),
    );
    out
}
