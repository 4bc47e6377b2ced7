//! Guest routes as a worker runs them: connections queue their events
//! (open, message, close) into the route's batch on this worker; the worker
//! hands the batch to the guest in one call and applies the commands it
//! returns, in order, to connections on any worker.
//!
//! Guest calls run on the worker thread but outside its tokio runtime (the
//! worker leaves `block_on` to run them): wasmtime-wasi's synchronous WASI
//! bindings block on a runtime of their own for stdio, which panics when
//! called from inside another runtime.

use super::decode::DataPiece;
use super::outbound::Outbound;
use crate::guest::{
    Batch, Command, Commands, Fault, Program, Runner, UpgradeRequest, UpgradeResponse,
};
use crate::pubsub::Topics;
use crate::ws::frame::{encode_server_header, server_frame, server_header_len, OpCode};
use bytes::Bytes;
use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use tokio::sync::{oneshot, Notify};
use tracing::warn;

/// A guest route's state shared by all workers.
pub struct GuestRoute {
    pub program: Arc<Program>,
    /// Every open connection of the route, on any worker: a guest may send
    /// to any of them. Looked up only when the connection is not local.
    conns: Mutex<HashMap<u64, Arc<Outbound>>>,
    /// Topics each connection subscribed to, dropped when it closes.
    subscriptions: Mutex<HashMap<u64, Vec<String>>>,
    topics: Arc<Topics>,
}

impl GuestRoute {
    pub fn new(program: Arc<Program>, topics: Arc<Topics>) -> GuestRoute {
        GuestRoute {
            program,
            conns: Mutex::default(),
            subscriptions: Mutex::default(),
            topics,
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
    local: RefCell<HashMap<u64, Arc<Outbound>>>,
    /// Upgrade requests waiting for the guest's `upgrade` hook.
    upgrades: RefCell<Vec<PendingUpgrade>>,
    /// The worker's signal that guest work is pending (shared by its slots).
    work: Rc<Notify>,
    /// Emptied batches kept for reuse (their buffers keep their capacity).
    spare: RefCell<Vec<Batch>>,
}

/// Share of a guest's memory one batch may fill: the guest holds the batch,
/// its own answer (an echo doubles it) and its heap at once.
const BATCH_SHARE_OF_MEMORY: usize = 4;
/// Bounds on a batch's payload bytes, whatever the memory limit.
const BATCH_MIN_BYTES: usize = 64 * 1024;
const BATCH_MAX_BYTES: usize = 16 << 20;

impl GuestSlot {
    /// Creates the slot; `work` is signalled whenever it has work queued.
    pub fn new(route: Arc<GuestRoute>, work: Rc<Notify>) -> GuestSlot {
        GuestSlot {
            runner: RefCell::new(Runner::new(route.program.clone())),
            batches: RefCell::new(VecDeque::from([Batch::new()])),
            batch_max_bytes: (route.program.config().memory / BATCH_SHARE_OF_MEMORY)
                .clamp(BATCH_MIN_BYTES, BATCH_MAX_BYTES),
            closed: RefCell::default(),
            local: RefCell::default(),
            upgrades: RefCell::default(),
            work,
            spare: RefCell::default(),
            route,
        }
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
    pub async fn upgrade(&self, req: UpgradeRequest) -> Result<UpgradeResponse, Fault> {
        let (tx, rx) = oneshot::channel();
        self.upgrades.borrow_mut().push((req, tx));
        self.work.notify_one();
        rx.await.unwrap_or(Err(Fault::Trap(
            "worker stopped before the upgrade ran".into(),
        )))
    }

    pub fn open(&self, conn: u64, target: &str, outbound: Arc<Outbound>) {
        self.local.borrow_mut().insert(conn, outbound.clone());
        self.route
            .conns
            .lock()
            .expect("conns lock")
            .insert(conn, outbound);
        self.batch_for(target.len()).push_open(conn, target);
        self.work.notify_one();
    }

    pub fn message(&self, conn: u64, text: bool, payload: &[u8]) {
        self.batch_for(payload.len())
            .push_message(conn, text, payload);
    }

    /// Events were queued: the worker runs the guest once the other ready
    /// connections had their turn.
    pub fn wake(&self) {
        self.work.notify_one();
    }

    pub fn close(&self, conn: u64, code: u16, reason: &str) {
        self.local.borrow_mut().remove(&conn);
        self.route.conns.lock().expect("conns lock").remove(&conn);
        let topics = self
            .route
            .subscriptions
            .lock()
            .expect("subscriptions lock")
            .remove(&conn);
        for topic in topics.unwrap_or_default() {
            self.route.topics.unsubscribe(&topic, conn);
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

    fn lookup(&self, conn: u64) -> Option<Arc<Outbound>> {
        if let Some(out) = self.local.borrow().get(&conn) {
            return Some(out.clone());
        }
        self.route
            .conns
            .lock()
            .expect("conns lock")
            .get(&conn)
            .cloned()
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
                append_frame(&mut frames, text, payload);
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
                    let op = if text { OpCode::Text } else { OpCode::Binary };
                    let frame = Bytes::from(server_frame(op, payload));
                    self.route.topics.publish(topic, &frame, exclude);
                }
                Command::Subscribe { conn, topic } => {
                    if let Some(out) = self.lookup(conn) {
                        self.route.topics.subscribe(topic, conn, out);
                        let mut subs = self.route.subscriptions.lock().expect("subscriptions lock");
                        subs.entry(conn).or_default().push(topic.to_string());
                    }
                }
                Command::Unsubscribe { conn, topic } => {
                    self.route.topics.unsubscribe(topic, conn);
                    let mut subs = self.route.subscriptions.lock().expect("subscriptions lock");
                    if let Some(list) = subs.get_mut(&conn) {
                        list.retain(|t| t != topic);
                    }
                }
            }
        }
        flush(&mut pending, &mut frames);
    }
}

/// Appends one unmasked server frame.
fn append_frame(out: &mut Vec<u8>, text: bool, payload: &[u8]) {
    let op = if text { OpCode::Text } else { OpCode::Binary };
    let at = out.len();
    let header = server_header_len(payload.len() as u64);
    out.resize(at + header, 0);
    encode_server_header(&mut out[at..], true, op, payload.len() as u64);
    out.extend_from_slice(payload);
}

/// A guest connection's side: reassembles messages that span pieces.
pub struct GuestConn {
    pub slot: Rc<GuestSlot>,
    message: Vec<u8>,
    queued: bool,
}

/// Messages longer than this release their assembly buffer once delivered.
const KEEP_MESSAGE_BUF_BYTES: usize = 64 * 1024;

impl GuestConn {
    pub fn new(slot: Rc<GuestSlot>) -> GuestConn {
        GuestConn {
            slot,
            message: Vec::new(),
            queued: false,
        }
    }

    /// Queues a message once it is complete; a message that is one whole
    /// frame goes straight from the receive buffer into the batch.
    #[inline]
    pub fn take_piece(&mut self, conn: u64, buf: &[u8], piece: &DataPiece) {
        let text = piece.message == OpCode::Text;
        let bytes = &buf[piece.payload.clone()];
        if piece.message_end() && self.message.is_empty() {
            self.slot.message(conn, text, bytes);
            self.queued = true;
            return;
        }
        self.message.extend_from_slice(bytes);
        if piece.message_end() {
            self.slot.message(conn, text, &self.message);
            self.queued = true;
            self.message.clear();
            if self.message.capacity() > KEEP_MESSAGE_BUF_BYTES {
                self.message = Vec::new();
            }
        }
    }

    /// After a read batch: wake the flush task if anything was queued.
    pub fn end_of_read(&mut self) {
        if std::mem::take(&mut self.queued) {
            self.slot.wake();
        }
    }
}
