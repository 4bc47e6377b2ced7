//! Native pubsub: a connection to `/topic/X` (the route path's last
//! parameter names the topic) is subscribed to X, and every message it
//! sends goes to the topic's other subscribers (and to itself with
//! `echo_self`), on every worker and every node. Text stays text, binary
//! stays binary, fragments stay as sent, and each publisher's messages
//! arrive in the order it sent them.
//!
//! The messages of one read are framed once (`ws::encode`) into one
//! buffer, published as one delivery and shared by every subscriber's queue
//! (`pubsub`). Only complete messages are published, so two publishers'
//! fragments never interleave at a subscriber. A publisher stops being read
//! while the workers' fan-out backlog is over its budget; a subscriber that
//! cannot keep up is closed with 1008 or skipped and counted
//! (`slow_subscriber`).

use bytes::BytesMut;
use std::rc::Rc;
use std::sync::Arc;
use weir_config::PubSubConfig;
use weir_pubsub::{Subscriber, Topic, Topics};
use weir_reactor::behaviour::{Behaviour, LocalFuture, Stop};
use weir_reactor::buffer::Output;
use weir_reactor::decode::DataPiece;
use weir_reactor::kind::{Accepted, Refusal, RouteKind, Upgrade, WorkerRoute, WorkerSetup};
use weir_reactor::outbound::Outbound;
use weir_ws::encode;

/// Frames the real-time core's publications for a pubsub route that serves
/// its channels (`realtime = true`): the publication's data as one text
/// frame, nothing else (no offsets, no join/leave).
pub struct PlainFramer;

impl weir_realtime::Framer for PlainFramer {
    fn publication(&self, _channel: &str, p: &weir_realtime::Publication) -> bytes::Bytes {
        bytes::Bytes::from(encode::frame(weir_ws::frame::OpCode::Text, &p.data))
    }

    fn join_leave(
        &self,
        _channel: &str,
        _info: &weir_realtime::ClientInfo,
        _join: bool,
    ) -> Option<bytes::Bytes> {
        None
    }
}

/// `native = "pubsub"`: the route's namespace and keys, shared by workers.
pub struct PubSubRoute {
    topics: Arc<Topics>,
    config: PubSubConfig,
    /// The route's own path alone, to read the topic out of a request path.
    path: matchit::Router<()>,
}

impl PubSubRoute {
    pub fn new(path: &str, topics: Arc<Topics>, config: PubSubConfig) -> PubSubRoute {
        let mut router = matchit::Router::new();
        router
            .insert(path, ())
            .expect("the routes file's paths were validated");
        PubSubRoute {
            topics,
            config,
            path: router,
        }
    }

    /// The topic a request path names: its last path parameter, or "" (one
    /// topic for the whole route) when the route's path has none.
    pub(crate) fn topic_of(&self, path: &str) -> String {
        self.path
            .at(path)
            .ok()
            .and_then(|m| m.params.iter().last().map(|(_, v)| v.to_string()))
            .unwrap_or_default()
    }
}

/// Shared by every worker: a route kind is `Arc`, its worker side `Rc`.
pub struct PubSubKind(pub Arc<PubSubRoute>);

impl RouteKind for PubSubKind {
    fn on_worker(&self, _: &WorkerSetup) -> Rc<dyn WorkerRoute> {
        Rc::new(PubSubKind(self.0.clone()))
    }
}

impl WorkerRoute for PubSubKind {
    fn upgrade<'a>(&'a self, up: Upgrade<'a>) -> LocalFuture<'a, Result<Accepted, Refusal>> {
        let conn = PubSub {
            route: self.0.clone(),
            name: self.0.topic_of(up.uri.path()),
            topic: None,
            id: 0,
            pending: BytesMut::new(),
            complete: 0,
        };
        Box::pin(std::future::ready(Ok(Accepted::with(conn))))
    }
}

/// One pubsub connection: a subscriber, and a publisher of what it sends.
pub struct PubSub {
    route: Arc<PubSubRoute>,
    name: String,
    /// The topic, from `on_open` (subscribed) to `on_close`.
    topic: Option<Arc<Topic>>,
    id: u64,
    /// Server frames built from this read; whole messages are published.
    pending: BytesMut,
    /// Bytes of `pending` that form complete messages.
    complete: usize,
}

impl Behaviour for PubSub {
    /// Publishes from other connections write straight into this socket.
    const DIRECT_WRITES: bool = true;

    fn on_open(&mut self, id: u64, outbound: &Arc<Outbound>) {
        self.id = id;
        let sub = Subscriber {
            conn: id,
            outbound: outbound.clone(),
            slow: self.route.config.slow_subscriber,
            since: 0,
            positioned: false,
        };
        self.topic = Some(self.route.topics.join(&self.name, sub));
    }

    /// Not read while a worker's fan-out backlog is over its budget.
    #[inline]
    fn reads_blocked(&self, _own: &Outbound) -> bool {
        self.route.topics.congested()
    }

    async fn unblocked(&mut self, _own: &Outbound) -> Result<(), Stop> {
        self.route.topics.fanout().wait_drained().await;
        Ok(())
    }

    /// Copies a piece of a client frame into the frames to publish.
    #[inline]
    fn on_data(&mut self, buf: &mut [u8], piece: &DataPiece, _out: &mut Output) {
        if piece.frame_start {
            let mut header = [0u8; encode::MAX_SERVER_HEADER_BYTES];
            let n = encode::write_header(&mut header, piece.fin, piece.opcode, piece.frame_len);
            self.pending.reserve(n + piece.frame_len as usize);
            self.pending.extend_from_slice(&header[..n]);
        }
        self.pending.extend_from_slice(&buf[piece.payload.clone()]);
        if piece.message_end() {
            self.complete = self.pending.len();
        }
    }

    /// Publishes the read's complete messages as one shared buffer.
    #[inline]
    fn end_of_read(&mut self) -> Result<(), Stop> {
        if self.complete == 0 {
            return Ok(());
        }
        let frames = self.pending.split_to(self.complete).freeze();
        self.complete = 0;
        let exclude = (!self.route.config.echo_self).then_some(self.id);
        if let Some(topic) = &self.topic {
            self.route.topics.publish_to(topic, &frames, exclude);
        }
        Ok(())
    }

    fn on_close(&mut self, id: u64) {
        if self.topic.take().is_some() {
            self.route.topics.unsubscribe(&self.name, id);
        }
    }
}
