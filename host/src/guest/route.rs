//! Guest routes as a worker runs them: connections queue their events
//! (open, message, close) into the route's batch on this worker; the
//! worker's [`Scheduler`] hands each batch to the guest in one call and
//! applies the commands it returns, in order, to connections of the route
//! on any worker (found through the [`Registry`]).
//!
//! Guest calls run on the worker thread but outside its tokio runtime (the
//! worker leaves `block_on` to run them, see [`Scheduler`]): wasmtime-wasi's
//! synchronous WASI bindings block on a runtime of their own for stdio,
//! which panics when called from inside another runtime.

use super::{Batch, Command, Commands, Fault, Program, Runner, UpgradeRequest, UpgradeResponse};
use crate::pubsub::Topics;
use crate::reactor::behaviour::{Behaviour, LocalFuture, Stop};
use crate::reactor::buffer::Output;
use crate::reactor::decode::DataPiece;
use crate::reactor::outbound::Outbound;
use crate::registry::Registry;
use crate::routes::{Accepted, Refusal, RouteKind, Upgrade, WorkerRoute, WorkerSetup};
use crate::ws::close;
use crate::ws::encode::{self, message_opcode};
use crate::ws::frame::OpCode;
use bytes::Bytes;
use http::StatusCode;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::{Rc, Weak};
use std::sync::Arc;
use tokio::sync::{oneshot, Notify};
use tracing::warn;

/// A guest route's state shared by all workers.
pub struct GuestRoute {
    /// The route's index: the registry lets its guest reach only its own
    /// connections.
    index: usize,
    program: Arc<Program>,
    /// The route's topic namespace (its own unless the routes file names a
    /// shared one).
    topics: Arc<Topics>,
    registry: Arc<Registry>,
}

impl GuestRoute {
    pub fn new(
        index: usize,
        program: Arc<Program>,
        topics: Arc<Topics>,
        registry: Arc<Registry>,
    ) -> GuestRoute {
        GuestRoute {
            index,
            program,
            topics,
            registry,
        }
    }
}

impl RouteKind for GuestRoute {
    fn on_worker(&self, worker: &WorkerSetup) -> Rc<dyn WorkerRoute> {
        let route = Arc::new(GuestRoute {
            index: self.index,
            program: self.program.clone(),
            topics: self.topics.clone(),
            registry: self.registry.clone(),
        });
        let slot = GuestSlot::new(route, worker.guests.work.clone());
        worker.guests.slots.borrow_mut().push(slot.clone());
        slot
    }
}

/// The guests of one worker: the signal that work is pending and every
/// route's slot. The worker's loop waits on [`Scheduler::wait`] inside its
/// runtime, then calls [`Scheduler::run_pending`] outside it.
#[derive(Default)]
pub struct Scheduler {
    work: Rc<Notify>,
    slots: RefCell<Vec<Rc<GuestSlot>>>,
}

impl Scheduler {
    /// Resolves when guest work is pending, after the other ready tasks
    /// had a turn to add their events to the batch.
    pub async fn wait(&self) {
        self.work.notified().await;
        tokio::task::yield_now().await;
    }

    /// Asks for a turn (e.g. at shutdown, so batches already read run
    /// before the 1001s are queued).
    pub fn wake(&self) {
        self.work.notify_one();
    }

    /// Runs every slot's pending upgrade hooks and batches.
    pub fn run_pending(&self) {
        for slot in self.slots.borrow().iter() {
            slot.run_pending();
        }
    }
}

/// An upgrade request waiting for the guest's hook, and where the answer goes.
type PendingUpgrade = (
    UpgradeRequest,
    oneshot::Sender<Result<UpgradeResponse, Fault>>,
);

/// One guest route on one worker: its instance, its pending batch and the
/// connections it serves here.
pub struct GuestSlot {
    route: Arc<GuestRoute>,
    runner: RefCell<Runner>,
    /// Pending batches, oldest first: a new one starts when the newest would
    /// pass `batch_max_bytes`, so one call never carries more than the
    /// guest's memory can take.
    batches: RefCell<VecDeque<Batch>>,
    batch_max_bytes: usize,
    /// Connections whose close event is pending.
    closed: RefCell<Vec<u64>>,
    /// Upgrade requests waiting for the guest's `upgrade` hook.
    upgrades: RefCell<Vec<PendingUpgrade>>,
    /// The worker's signal that guest work is pending (shared by its slots).
    work: Rc<Notify>,
    /// Emptied batches kept for reuse (their buffers keep their capacity).
    spare: RefCell<Vec<Batch>>,
    /// The slot itself, for the connections it accepts.
    me: Weak<GuestSlot>,
}

/// Share of a guest's memory one batch may fill: the guest holds the batch,
/// its own answer (an echo doubles it) and its heap at once.
const BATCH_SHARE_OF_MEMORY: usize = 4;
/// Bounds on a batch's payload bytes, whatever the memory limit.
const BATCH_MIN_BYTES: usize = 64 * 1024;
const BATCH_MAX_BYTES: usize = 16 << 20;

impl GuestSlot {
    /// Creates the slot; `work` is signalled whenever it has work queued.
    fn new(route: Arc<GuestRoute>, work: Rc<Notify>) -> Rc<GuestSlot> {
        Rc::new_cyclic(|me| GuestSlot {
            me: me.clone(),
            runner: RefCell::new(Runner::new(route.program.clone())),
            batches: RefCell::new(VecDeque::from([Batch::new()])),
            batch_max_bytes: (route.program.config().memory / BATCH_SHARE_OF_MEMORY)
                .clamp(BATCH_MIN_BYTES, BATCH_MAX_BYTES),
            closed: RefCell::default(),
            upgrades: RefCell::default(),
            work,
            spare: RefCell::default(),
            route,
        })
    }

    /// The batch to add `bytes` more payload bytes to.
    fn batch_for(&self, bytes: usize) -> std::cell::RefMut<'_, Batch> {
        let mut batches = self.batches.borrow_mut();
        let full = batches
            .back()
            .is_none_or(|b| !b.is_empty() && b.data_len() + bytes > self.batch_max_bytes);
        if full {
            let fresh = self.spare.borrow_mut().pop().unwrap_or_default();
            batches.push_back(fresh);
        }
        std::cell::RefMut::map(batches, |b| b.back_mut().expect("a batch exists"))
    }

    /// The guest's `upgrade` hook, answered before the 101.
    async fn run_upgrade_hook(&self, req: UpgradeRequest) -> Result<UpgradeResponse, Fault> {
        let (tx, rx) = oneshot::channel();
        self.upgrades.borrow_mut().push((req, tx));
        self.work.notify_one();
        rx.await.unwrap_or(Err(Fault::Trap(
            "worker stopped before the upgrade ran".into(),
        )))
    }

    fn open(&self, conn: u64, target: &str) {
        self.batch_for(target.len()).push_open(conn, target);
        self.work.notify_one();
    }

    fn message(&self, conn: u64, text: bool, payload: &[u8]) {
        self.batch_for(payload.len())
            .push_message(conn, text, payload);
    }

    /// Events were queued: the worker runs the guest once the other ready
    /// connections had their turn.
    fn wake(&self) {
        self.work.notify_one();
    }

    fn close(&self, conn: u64, code: u16, reason: &str) {
        let route = &self.route;
        for topic in route.registry.take_topics(conn) {
            route.topics.unsubscribe(&topic, conn);
        }
        self.batch_for(reason.len()).push_close(conn, code, reason);
        self.closed.borrow_mut().push(conn);
        self.work.notify_one();
    }

    /// Runs queued upgrade hooks, then each pending batch in one call.
    /// Called by the worker outside its runtime (see the module head).
    pub fn run_pending(&self) {
        let upgrades = std::mem::take(&mut *self.upgrades.borrow_mut());
        for (req, reply) in upgrades {
            let _ = reply.send(self.runner.borrow_mut().upgrade(&req));
        }
        loop {
            let next = self.batches.borrow_mut().pop_front();
            let Some(mut batch) = next else { break };
            if !batch.is_empty() {
                self.run_batch(&batch);
            }
            batch.clear();
            self.spare.borrow_mut().push(batch);
        }
        let closed = std::mem::take(&mut *self.closed.borrow_mut());
        let mut runner = self.runner.borrow_mut();
        for conn in closed {
            runner.forget(conn);
        }
    }

    /// One guest call, and what follows from its answer.
    fn run_batch(&self, batch: &Batch) {
        let result = self.runner.borrow_mut().handle(batch);
        match result {
            Ok(commands) => self.apply(&commands),
            Err(fault) => {
                // The instance is gone; the connections whose events it was
                // handling cannot know what was processed: close them.
                warn!(route = self.route.program.route(), cause = %fault, "guest failed a batch");
                let mut affected: Vec<u64> = batch.connections().collect();
                affected.sort_unstable();
                affected.dedup();
                for conn in affected {
                    if let Some(out) = self.lookup(conn) {
                        out.close(fault.close_code(), "guest handler failed");
                    }
                }
            }
        }
    }

    /// The queue of `conn` if it is open on this route.
    fn lookup(&self, conn: u64) -> Option<Arc<Outbound>> {
        self.route.registry.outbound(conn, self.route.index)
    }

    /// Applies a guest's commands in order. Consecutive sends to one
    /// connection are written into one buffer and handed over once, straight
    /// into the socket when the connection is not writing itself (see
    /// `Outbound::send_direct`).
    fn apply(&self, commands: &Commands) {
        let mut pending: Option<u64> = None;
        let mut frames = Vec::new();
        let flush = |pending: &mut Option<u64>, frames: &mut Vec<u8>| {
            if let Some(conn) = pending.take() {
                if let Some(out) = self.lookup(conn) {
                    out.send_direct(frames);
                }
                frames.clear();
            }
        };
        for command in commands.iter() {
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
                    let frame = Bytes::from(encode::frame(message_opcode(text), payload));
                    self.route.topics.publish(topic, &frame, exclude);
                }
                Command::Subscribe { conn, topic } => {
                    let route = &self.route;
                    if let Some(out) = route.registry.subscribe(conn, route.index, topic) {
                        route.topics.subscribe(topic, conn, out);
                    }
                }
                // Applied by the runner before the commands reach here.
                Command::SetAttachment { .. } => {}
                Command::Unsubscribe { conn, topic } => {
                    let route = &self.route;
                    if route.registry.unsubscribe(conn, route.index, topic) {
                        route.topics.unsubscribe(topic, conn);
                    }
                }
            }
        }
        flush(&mut pending, &mut frames);
    }
}

impl WorkerRoute for GuestSlot {
    /// Runs the guest's `upgrade` hook (accept, pick a subprotocol, or
    /// refuse with a status).
    fn upgrade<'a>(&'a self, up: Upgrade<'a>) -> LocalFuture<'a, Result<Accepted, Refusal>> {
        let req = UpgradeRequest {
            path: up.uri.path().to_string(),
            query: up.uri.query().unwrap_or("").to_string(),
            headers: up
                .headers
                .iter()
                .filter_map(|(k, v)| Some((k.as_str().to_string(), v.to_str().ok()?.to_string())))
                .collect(),
            remote_addr: up.peer.to_string(),
        };
        let target = up
            .uri
            .path_and_query()
            .map_or_else(|| up.uri.path().to_string(), |pq| pq.as_str().to_string());
        Box::pin(async move {
            let protocol = match self.run_upgrade_hook(req).await {
                Ok(UpgradeResponse::Accept(chosen)) => chosen,
                Ok(UpgradeResponse::Reject(status)) => {
                    return Err(Refusal {
                        status: StatusCode::from_u16(status).unwrap_or(StatusCode::FORBIDDEN),
                        body: "upgrade refused by the route's handler\n",
                    })
                }
                Err(fault) => {
                    warn!(route = self.route.program.route(), cause = %fault, "guest upgrade hook failed");
                    return Err(Refusal {
                        status: StatusCode::INTERNAL_SERVER_ERROR,
                        body: "the route's handler failed\n",
                    });
                }
            };
            let conn = GuestConn {
                slot: self.me.upgrade().expect("the worker holds its slots"),
                target,
                message: Vec::new(),
                queued: false,
                id: 0,
                peer_close: None,
            };
            Ok(Accepted {
                protocol,
                behaviour: Box::new(conn),
            })
        })
    }
}

/// A guest connection's side: reassembles messages that span pieces.
pub struct GuestConn {
    slot: Rc<GuestSlot>,
    /// The request's `path?query`, for the open event.
    target: String,
    message: Vec<u8>,
    queued: bool,
    id: u64,
    /// The client's close code and reason, once it sent a close.
    peer_close: Option<(u16, String)>,
}

/// Messages longer than this release their assembly buffer once delivered.
const KEEP_MESSAGE_BUF_BYTES: usize = 64 * 1024;

impl Behaviour for GuestConn {
    /// The guest runner writes its sends straight into the socket.
    const DIRECT_WRITES: bool = true;

    fn on_open(&mut self, id: u64, _outbound: &Arc<Outbound>) {
        self.id = id;
        self.slot.open(id, &std::mem::take(&mut self.target));
    }

    /// The guest's replies to this connection are over budget: stop
    /// reading until they drain.
    #[inline]
    fn reads_blocked(&self, own: &Outbound) -> bool {
        own.over_budget()
    }

    async fn unblocked(&mut self, own: &Outbound) -> Result<(), Stop> {
        own.wait_drained().await;
        Ok(())
    }

    /// Queues a message once it is complete; a message that is one whole
    /// frame goes straight from the receive buffer into the batch.
    #[inline]
    fn on_data(&mut self, buf: &mut [u8], piece: &DataPiece, _out: &mut Output) {
        let text = piece.message == OpCode::Text;
        let bytes = &buf[piece.payload.clone()];
        if piece.message_end() && self.message.is_empty() {
            self.slot.message(self.id, text, bytes);
            self.queued = true;
            return;
        }
        self.message.extend_from_slice(bytes);
        if piece.message_end() {
            self.slot.message(self.id, text, &self.message);
            self.queued = true;
            self.message.clear();
            if self.message.capacity() > KEEP_MESSAGE_BUF_BYTES {
                self.message = Vec::new();
            }
        }
    }

    fn on_peer_close(&mut self, code: u16, reason: &str) {
        self.peer_close = Some((code, reason.to_string()));
    }

    /// After a read batch: wake the scheduler if anything was queued.
    #[inline]
    fn end_of_read(&mut self) -> Result<(), Stop> {
        if std::mem::take(&mut self.queued) {
            self.slot.wake();
        }
        Ok(())
    }

    /// Replies would come from a batch that runs after the close.
    fn answers_before_drain(&self) -> bool {
        false
    }

    fn on_close(&mut self, id: u64) {
        // 1006: the connection ended without a close from the client.
        let (code, reason) = self
            .peer_close
            .take()
            .unwrap_or((close::ABNORMAL, String::new()));
        self.slot.close(id, code, &reason);
    }
}
