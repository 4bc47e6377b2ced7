//! Guest routes as a worker runs them: connections queue their events
//! (open, message, close) into their route's pending batches on this worker
//! ([`GuestSlot`]); the worker's [`Scheduler`] hands a route's batches to the
//! worker's guest thread (`thread`) as one job, and the next when that one
//! is done. The worker never runs guest code.

use super::route::GuestRoute;
use super::thread::{GuestThread, Job, SlotShared};
use super::{Batch, Fault, UpgradeRequest, UpgradeResponse};
use crate::reactor::behaviour::{Behaviour, LocalFuture, Stop};
use crate::reactor::buffer::Output;
use crate::reactor::decode::DataPiece;
use crate::reactor::outbound::Outbound;
use crate::routes::{Accepted, Refusal, Upgrade, WorkerRoute};
use crate::ws::close;
use crate::ws::frame::OpCode;
use http::StatusCode;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::{Rc, Weak};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{oneshot, Notify};
use tracing::warn;

/// The guests of one worker: its guest thread, every guest route's slot,
/// and the signal that work is pending (from connections, or from the guest
/// thread when a job is done).
#[derive(Default)]
pub struct Scheduler {
    work: Arc<Notify>,
    slots: RefCell<Vec<Rc<GuestSlot>>>,
    thread: RefCell<Option<GuestThread>>,
}

impl Scheduler {
    /// Starts the worker's guest thread for the slots registered so far
    /// (none: no thread).
    pub fn start(&self, worker: usize) -> std::io::Result<()> {
        let slots = self.slots.borrow();
        if slots.is_empty() {
            return Ok(());
        }
        let routes = slots
            .iter()
            .map(|s| (s.route.clone(), s.shared.clone()))
            .collect();
        let thread = GuestThread::start(worker, routes, self.work.clone())?;
        *self.thread.borrow_mut() = Some(thread);
        Ok(())
    }

    /// The worker's scheduling task: whenever work is pending, after the
    /// other ready connections had a turn to add to the batches, hands every
    /// idle route's batches to the guest thread.
    pub async fn run(self: Rc<Self>) {
        loop {
            self.work.notified().await;
            tokio::task::yield_now().await;
            self.hand_over();
        }
    }

    /// Hands every idle route's pending batches over; true when any route
    /// still has a job running.
    fn hand_over(&self) -> bool {
        let mut busy = false;
        for slot in self.slots.borrow().iter() {
            busy |= slot.hand_over(self);
        }
        busy
    }

    /// Shutdown: runs what was read before the drain, so its replies are
    /// queued before the 1001s (bounded by `limit`).
    pub async fn settle(&self, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        while self.hand_over() {
            if tokio::time::timeout_at(deadline, self.work.notified())
                .await
                .is_err()
            {
                return;
            }
        }
    }

    fn send(&self, job: Job) {
        if let Some(thread) = &*self.thread.borrow() {
            thread.send(job);
        }
    }

    /// Stops the guest thread once it has finished its queue.
    pub fn stop(&self) {
        drop(self.thread.borrow_mut().take());
    }
}

/// Share of a guest's memory one batch may fill: the guest holds the batch,
/// its own answer (an echo doubles it) and its heap at once.
const BATCH_SHARE_OF_MEMORY: usize = 4;
/// Bounds on a batch's payload bytes, whatever the memory limit.
const BATCH_MIN_BYTES: usize = 64 * 1024;
const BATCH_MAX_BYTES: usize = 16 << 20;
/// Batches' worth of events a route may have waiting for the guest thread
/// on one worker before its connections stop being read.
const BACKLOG_BATCHES: usize = 2;

/// One guest route on one worker: the batches its connections fill while
/// the guest thread runs the previous ones.
pub struct GuestSlot {
    /// This slot's index in the worker's scheduler (and guest thread).
    index: usize,
    pub(crate) route: Arc<GuestRoute>,
    /// Pending batches, oldest first: a new one starts when the newest would
    /// pass `batch_max_bytes`, so one call never carries more than the
    /// guest's memory can take.
    batches: RefCell<VecDeque<Batch>>,
    batch_max_bytes: usize,
    /// Payload bytes in `batches`.
    pending_bytes: Cell<usize>,
    /// Connections whose close event is pending.
    closed: RefCell<Vec<u64>>,
    pub(crate) shared: Arc<SlotShared>,
    scheduler: Weak<Scheduler>,
    /// Connections whose reads wait for the backlog to shrink.
    backlog_shrank: Notify,
    /// The slot itself, for the connections it accepts.
    me: Weak<GuestSlot>,
}

impl GuestSlot {
    /// Creates the slot and registers it with the worker's scheduler.
    pub(crate) fn new(route: Arc<GuestRoute>, scheduler: &Rc<Scheduler>) -> Rc<GuestSlot> {
        let index = scheduler.slots.borrow().len();
        let slot = Rc::new_cyclic(|me| GuestSlot {
            index,
            me: me.clone(),
            batches: RefCell::new(VecDeque::new()),
            batch_max_bytes: (route.program.config().memory / BATCH_SHARE_OF_MEMORY)
                .clamp(BATCH_MIN_BYTES, BATCH_MAX_BYTES),
            pending_bytes: Cell::new(0),
            closed: RefCell::default(),
            shared: Arc::default(),
            scheduler: Rc::downgrade(scheduler),
            backlog_shrank: Notify::new(),
            route,
        });
        scheduler.slots.borrow_mut().push(slot.clone());
        slot
    }

    /// The batch to add `bytes` more payload bytes to.
    fn batch_for(&self, bytes: usize) -> std::cell::RefMut<'_, Batch> {
        self.pending_bytes.set(self.pending_bytes.get() + bytes);
        let mut batches = self.batches.borrow_mut();
        let full = batches
            .back()
            .is_none_or(|b| !b.is_empty() && b.data_len() + bytes > self.batch_max_bytes);
        if full {
            let spare = self.shared.spare.lock().expect("spare batches lock").pop();
            batches.push_back(spare.unwrap_or_default());
        }
        std::cell::RefMut::map(batches, |b| b.back_mut().expect("a batch exists"))
    }

    /// Hands the pending batches to the guest thread unless a job of this
    /// route is still running; true while one is.
    fn hand_over(&self, scheduler: &Scheduler) -> bool {
        if self.shared.busy.load(Ordering::Acquire) {
            return true;
        }
        let closed = std::mem::take(&mut *self.closed.borrow_mut());
        let batches: Vec<Batch> = self.batches.borrow_mut().drain(..).collect();
        if closed.is_empty() && batches.iter().all(Batch::is_empty) {
            self.batches.borrow_mut().extend(batches);
            return false;
        }
        self.pending_bytes.set(0);
        self.shared.busy.store(true, Ordering::Release);
        scheduler.send(Job::Batches {
            slot: self.index,
            batches,
            closed,
        });
        self.backlog_shrank.notify_waiters();
        true
    }

    /// More events wait for the guest thread than the route may hold.
    fn backlogged(&self) -> bool {
        self.pending_bytes.get() > BACKLOG_BATCHES * self.batch_max_bytes
    }

    async fn wait_backlog(&self) {
        let shrank = self.backlog_shrank.notified();
        if self.backlogged() {
            shrank.await;
        }
    }

    /// The guest's `upgrade` hook, run on the guest thread, answered before
    /// the 101.
    async fn run_upgrade_hook(&self, req: UpgradeRequest) -> Result<UpgradeResponse, Fault> {
        let (reply, answer) = oneshot::channel();
        if let Some(scheduler) = self.scheduler.upgrade() {
            scheduler.send(Job::Upgrade {
                slot: self.index,
                req,
                reply,
            });
        }
        answer.await.unwrap_or(Err(Fault::Trap(
            "worker stopped before the upgrade ran".into(),
        )))
    }

    fn open(&self, conn: u64, target: &str) {
        self.batch_for(target.len()).push_open(conn, target);
        self.wake();
    }

    fn message(&self, conn: u64, text: bool, payload: &[u8]) {
        self.batch_for(payload.len())
            .push_message(conn, text, payload);
    }

    /// Events were queued: the scheduler hands them over once the other
    /// ready connections had their turn.
    fn wake(&self) {
        if let Some(scheduler) = self.scheduler.upgrade() {
            scheduler.work.notify_one();
        }
    }

    fn close(&self, conn: u64, code: u16, reason: &str) {
        let route = &self.route;
        for topic in route.registry.take_topics(conn) {
            route.topics.unsubscribe(&topic, conn);
        }
        self.batch_for(reason.len()).push_close(conn, code, reason);
        self.closed.borrow_mut().push(conn);
        self.wake();
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
        let peer = up.peer.ip();
        Box::pin(async move {
            if let Some(left) = self.route.backoff_left(peer) {
                return Err(Refusal {
                    status: StatusCode::TOO_MANY_REQUESTS,
                    body: "this address keeps tripping the route's deadline; retry later\n",
                    retry_after: Some(left.as_secs().max(1)),
                });
            }
            let protocol = match self.run_upgrade_hook(req).await {
                Ok(UpgradeResponse::Accept(chosen)) => chosen,
                Ok(UpgradeResponse::Reject(status)) => {
                    return Err(Refusal {
                        status: StatusCode::from_u16(status).unwrap_or(StatusCode::FORBIDDEN),
                        body: "upgrade refused by the route's handler\n",
                        retry_after: None,
                    })
                }
                Err(fault) => {
                    warn!(route = self.route.program.route(), cause = %fault, "guest upgrade hook failed");
                    return Err(Refusal {
                        status: StatusCode::INTERNAL_SERVER_ERROR,
                        body: "the route's handler failed\n",
                        retry_after: None,
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

    /// Stop reading while the guest's replies to this connection are over
    /// budget, or while the route's events waiting for the guest thread
    /// are (a slow guest must not make the worker buffer without bound).
    #[inline]
    fn reads_blocked(&self, own: &Outbound) -> bool {
        own.over_budget() || self.slot.backlogged()
    }

    async fn unblocked(&mut self, own: &Outbound) -> Result<(), Stop> {
        if own.over_budget() {
            own.wait_drained().await;
        } else {
            self.slot.wait_backlog().await;
        }
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
