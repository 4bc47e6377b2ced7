//! Guest routes as a worker runs them: connections queue their events
//! (open, message, close) into their route's pending batches on this worker
//! ([`GuestSlot`]), and the worker's [`Scheduler`] runs them, one call per
//! batch, on the worker thread outside its tokio runtime (wasmtime-wasi's
//! synchronous bindings block on a runtime of their own) — unless a call of
//! the route has just held the worker too long (`offload`): then the
//! route's calls go to a guest thread of the route's own (`thread`) for a
//! while, so a slow or hostile handler stalls the reactor at most once per
//! period and never stalls another route.

use crate::kind::offload::Offload;
use crate::kind::route::GuestRoute;
use crate::kind::thread::{GuestThread, Job};
use crate::kind::turn::{run_turn, Turn, UpgradeCall, Work};
use crate::services::io::{Inbox, IoEvent};
use crate::{Batch, Fault, Runner, UpgradeRequest, UpgradeResponse};
use std::cell::{Cell, RefCell};
use std::rc::{Rc, Weak};
use std::sync::Arc;
use tokio::sync::{oneshot, Notify};
use tracing::warn;
use weir_abi::{Direction, EventKind};
use weir_reactor::attached::AttachedSlot;
use weir_reactor::behaviour::LocalFuture;

/// The guests of one worker: every guest route's slot, and the signal that
/// work is pending (from connections, or from a guest thread when a job is
/// done).
pub struct Scheduler {
    work: Arc<Notify>,
    slots: RefCell<Vec<Rc<GuestSlot>>>,
    /// The worker's index, for the guest threads' names.
    worker: usize,
}

impl Scheduler {
    /// The scheduler of worker `worker`.
    pub fn new(worker: usize) -> Scheduler {
        Scheduler {
            work: Arc::default(),
            slots: RefCell::default(),
            worker,
        }
    }

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

    /// Runs every inline route's pending work and hands every offloaded
    /// route's to the guest thread. Called by the worker outside its
    /// runtime.
    pub fn run_pending(&self) {
        for slot in self.slots.borrow().iter() {
            slot.run_pending(self);
        }
    }

    /// Stops the guest threads once they have finished their queues.
    pub fn stop(&self) {
        for slot in self.slots.borrow().iter() {
            drop(slot.offload.thread.borrow_mut().take());
        }
    }
}

/// Share of a guest's memory one batch may fill: the guest holds the batch,
/// its own answer (an echo doubles it) and its heap at once.
const BATCH_SHARE_OF_MEMORY: usize = 4;
/// Bounds on a batch's payload bytes, whatever the memory limit.
const BATCH_MIN_BYTES: usize = 64 * 1024;
const BATCH_MAX_BYTES: usize = 16 << 20;
/// Events per batch at most: a well-behaved handler (a few µs a message)
/// answers a batch well within `offload::SLICE`, so only a slow one is moved off
/// the worker (the JSON example at 200 × 8 ran 256-event calls past 1 ms).
/// 64 is where the packed ABI was measured to cost 100–185 ns a message.
const BATCH_MAX_EVENTS: usize = 64;
/// Batches' worth of events a route may have waiting on one worker (while
/// its previous job runs on the guest thread) before its connections stop
/// being read.
const BACKLOG_BATCHES: usize = 2;

/// One guest route on one worker: its instance, the work its connections
/// queued, and where the route's calls run.
pub(crate) struct GuestSlot {
    pub(crate) route: Arc<GuestRoute>,
    /// The slot itself, for the connections it accepts.
    pub(super) me: Weak<GuestSlot>,
    scheduler: Weak<Scheduler>,
    /// The worker's index.
    worker: usize,
    /// What the connections queued since the last turn.
    pending: Pending,
    /// Where the route's instance is.
    runner: RefCell<RunnerHome>,
    /// Whether the route's calls run on its guest thread, and that thread.
    offload: Offload,
    /// Answers of the route's I/O for this worker (0.4.0 guests).
    inbox: Arc<Inbox>,
    /// Connections whose reads wait for the backlog to shrink.
    backlog_shrank: Notify,
    /// The route was removed and this worker's connections of it were
    /// asked to close.
    retired_closed: Cell<bool>,
    /// The last census generation this slot answered (`kind::census`).
    census_seen: Cell<u64>,
}

/// What a route's connections queued on one worker for its next turn.
struct Pending {
    /// Upgrade hooks, batches and closed connections (`turn::Work`).
    work: RefCell<Work>,
    /// Emptied batches kept for reuse (their buffers keep their capacity).
    spare: RefCell<Vec<Batch>>,
    /// Payload bytes queued since the last turn, for the backlog bound.
    bytes: Cell<usize>,
    /// A batch is full past this many payload bytes, so one call never
    /// carries more than the guest's memory can take.
    batch_max_bytes: usize,
}

/// Where a route's instance is on one worker.
enum RunnerHome {
    /// In the slot, between turns (boxed: it moves to and from the guest
    /// thread whole, and `Away` need not be as large).
    Here(Box<Runner>),
    /// In a job on the guest thread (`thread::Job`), which gives it back.
    Away,
}

impl GuestSlot {
    /// Creates the slot and registers it with the worker's scheduler.
    pub(crate) fn new(route: Arc<GuestRoute>, scheduler: &Rc<Scheduler>) -> Rc<GuestSlot> {
        let inbox = Arc::new(Inbox::new(scheduler.work.clone()));
        route.io.register(scheduler.worker, inbox.clone());
        let runner = Runner::new(route.program()).with_kv(route.kv.clone());
        let slot = Rc::new_cyclic(|me| GuestSlot {
            me: me.clone(),
            scheduler: Rc::downgrade(scheduler),
            worker: scheduler.worker,
            pending: Pending {
                work: RefCell::default(),
                spare: RefCell::default(),
                bytes: Cell::new(0),
                batch_max_bytes: (route.program().config().memory / BATCH_SHARE_OF_MEMORY)
                    .clamp(BATCH_MIN_BYTES, BATCH_MAX_BYTES),
            },
            runner: RefCell::new(RunnerHome::Here(Box::new(runner))),
            offload: Offload::default(),
            inbox,
            backlog_shrank: Notify::new(),
            retired_closed: Cell::new(false),
            census_seen: Cell::new(0),
            route,
        });
        slot.route.add_waker(scheduler.work.clone());
        scheduler.slots.borrow_mut().push(slot.clone());
        slot
    }

    /// The batch to add `bytes` more payload bytes to.
    fn batch_for(&self, bytes: usize) -> std::cell::RefMut<'_, Batch> {
        let pending = &self.pending;
        pending.bytes.set(pending.bytes.get() + bytes);
        let work = pending.work.borrow_mut();
        std::cell::RefMut::map(work, |work| {
            let full = work.batches.back().is_none_or(|b| {
                !b.is_empty()
                    && (b.data_len() + bytes > pending.batch_max_bytes
                        || b.len() >= BATCH_MAX_EVENTS)
            });
            if full {
                let fresh = pending.spare.borrow_mut().pop().unwrap_or_default();
                work.batches.push_back(fresh);
            }
            work.batches.back_mut().expect("a batch exists")
        })
    }

    /// Runs the pending upgrade hooks and batches inline, or hands them to
    /// the guest thread while the route is offloaded.
    fn run_pending(&self, scheduler: &Scheduler) {
        if !self.runner_is_home() {
            // Back from the guest thread?
            let job = self
                .offload
                .thread
                .borrow()
                .as_ref()
                .and_then(GuestThread::take_done);
            let Some(job) = job else { return };
            *self.runner.borrow_mut() = RunnerHome::Here(job.runner);
            self.pending.spare.borrow_mut().extend(job.spare);
        }
        // A deploy asks what state it would inherit: answer with the
        // runner's attachments (it is home here).
        let wanted = self.route.census.wanted();
        if wanted != self.census_seen.get() {
            self.census_seen.set(wanted);
            self.with_runner(|r| self.route.census.answer(wanted, r.attachments()));
        }
        self.take_io();
        let offloaded = self.offload.active();
        // Readers wait only while the backlog is over its bound.
        let readers_wait = self.backlogged();
        let mut work = std::mem::take(&mut *self.pending.work.borrow_mut());
        // Work without a guest call (closed connections to forget, a
        // removed route's instance to give back) runs here even while the
        // route is offloaded.
        if offloaded && work.has_calls() {
            self.hand_over(scheduler, work);
        } else {
            self.run_inline(scheduler, &mut work);
        }
        self.pending.bytes.set(0);
        if readers_wait {
            self.backlog_shrank.notify_waiters();
        }
        // The route was removed: once what its connections here had sent
        // has run (the runner is home, nothing is pending), they get 1001.
        if self.route.is_retired()
            && !self.retired_closed.get()
            && self.runner_is_home()
            && self
                .pending
                .work
                .borrow()
                .batches
                .iter()
                .all(Batch::is_empty)
        {
            self.retired_closed.set(true);
            self.route.registry.close_route_on(
                scheduler.worker,
                self.route.index,
                weir_ws::close::GOING_AWAY,
                weir_reactor::registry::ROUTE_REMOVED,
            );
        }
    }

    /// Queue the answers of the route's I/O that arrived for this worker
    /// (those for a connection that has closed since are dropped).
    fn take_io(&self) {
        let events = self.inbox.take();
        for event in &events {
            let conn = event.conn();
            if conn != 0
                && self
                    .route
                    .registry
                    .outbound(conn, self.route.index)
                    .is_none()
            {
                continue;
            }
            let len = match event {
                IoEvent::Response { head, body, .. } => head.len() + body.len(),
                IoEvent::KvError { key, .. } => key.len(),
                IoEvent::RealtimeRead { bytes, .. } => bytes.len(),
                _ => 0,
            };
            self.batch_for(len).push_io(event);
        }
    }

    /// Runs `work` on this thread (`turn`); after a call that passed
    /// a slice (`offload`), the rest goes to the guest thread.
    fn run_inline(&self, scheduler: &Scheduler, work: &mut Work) {
        // Taken out for the turn, so nothing the guest's commands do on
        // this thread meets a borrow.
        let mut spare = std::mem::take(&mut *self.pending.spare.borrow_mut());
        crate::kind::offload::mark_turn();
        let turn = self.with_runner(|r| {
            run_turn(&self.route, r, self.worker, work, &mut spare, |took| {
                self.offload.passed_slice(took, &self.route.path)
            })
        });
        self.pending.spare.borrow_mut().append(&mut spare);
        if turn == Turn::Stopped {
            self.hand_over(scheduler, std::mem::take(work));
        } else {
            // Keep the emptied queues' capacity for the next turn, behind
            // anything queued meanwhile.
            let mut queued = self.pending.work.borrow_mut();
            let later = std::mem::replace(&mut *queued, std::mem::take(work));
            queued.append(later);
        }
    }

    fn runner_is_home(&self) -> bool {
        matches!(*self.runner.borrow(), RunnerHome::Here(_))
    }

    fn with_runner<T>(&self, f: impl FnOnce(&mut Runner) -> T) -> T {
        match &mut *self.runner.borrow_mut() {
            RunnerHome::Here(runner) => f(runner),
            RunnerHome::Away => unreachable!("the runner is home during a turn"),
        }
    }

    /// Sends the runner and `work` to the guest thread as one job (nothing
    /// when `work` calls no guest: its emptied batches go back to spare).
    fn hand_over(&self, scheduler: &Scheduler, work: Work) {
        if !work.has_calls() && work.closed.is_empty() {
            let mut spare = self.pending.spare.borrow_mut();
            spare.extend(work.batches);
            return;
        }
        if self.offload.thread.borrow().is_none() {
            let name = format!("weir-guest-{}-{}", scheduler.worker, self.route.index);
            let share = self.route.program().config().cpu_share;
            match GuestThread::start(name, share, scheduler.work.clone()) {
                Ok(thread) => *self.offload.thread.borrow_mut() = Some(thread),
                Err(e) => {
                    // Keep running inline rather than not at all.
                    warn!(route = &*self.route.path, error = %e, "guest thread failed to start");
                    self.offload.until.set(None);
                    let mut queued = self.pending.work.borrow_mut();
                    let later = std::mem::replace(&mut *queued, work);
                    queued.append(later);
                    return;
                }
            }
        }
        let RunnerHome::Here(runner) =
            std::mem::replace(&mut *self.runner.borrow_mut(), RunnerHome::Away)
        else {
            unreachable!("hand_over runs with the runner home");
        };
        let job = Job {
            route: self.route.clone(),
            worker: self.worker,
            runner,
            work,
            spare: Vec::new(),
        };
        let sent = self
            .offload
            .thread
            .borrow()
            .as_ref()
            .is_some_and(|t| t.send(job));
        if !sent {
            warn!(
                route = &*self.route.path,
                "guest thread gone; the route stops on this worker"
            );
        }
    }

    /// More events wait than the route may hold (its job is running on the
    /// guest thread).
    pub(crate) fn backlogged(&self) -> bool {
        self.pending.bytes.get() > BACKLOG_BATCHES * self.pending.batch_max_bytes
    }

    pub(crate) async fn wait_backlog(&self) {
        let shrank = self.backlog_shrank.notified();
        if self.backlogged() {
            shrank.await;
        }
    }

    /// The guest's `upgrade` hook, answered before the 101.
    pub(super) async fn run_upgrade_hook(
        &self,
        req: UpgradeRequest,
    ) -> Result<UpgradeResponse, Fault> {
        self.run_upgrade_call(UpgradeCall::Hook(req)).await
    }

    /// One of the upgrade hooks (`upgrade`, `resume-upgrade`), answered
    /// before the 101.
    pub(super) async fn run_upgrade_call(
        &self,
        call: UpgradeCall,
    ) -> Result<UpgradeResponse, Fault> {
        let (reply, answer) = oneshot::channel();
        self.pending
            .work
            .borrow_mut()
            .upgrades
            .push_back((call, reply));
        self.wake();
        answer.await.unwrap_or(Err(Fault::Trap(
            "worker stopped before the upgrade ran".into(),
        )))
    }

    pub(crate) fn open(&self, conn: u64, info: &[u8]) {
        self.batch_for(info.len()).push_open_info(conn, info);
        self.wake();
    }

    pub(super) fn message(&self, conn: u64, text: bool, payload: &[u8]) {
        self.batch_for(payload.len())
            .push_message(conn, text, payload);
    }

    /// A proxied message for the route's filter (`native::proxy::filter`);
    /// the caller wakes the scheduler after its read.
    pub(crate) fn proxy_message(
        &self,
        conn: u64,
        direction: weir_abi::Direction,
        text: bool,
        payload: &[u8],
    ) {
        self.batch_for(payload.len())
            .push_proxy_message(conn, direction, text, payload);
    }

    /// A question for a real-time namespace's guest
    /// (`native::centrifugo::hook`); the worker runs it at its next turn.
    pub(crate) fn rt_question(&self, conn: u64, kind: weir_abi::EventKind, bytes: &[u8]) {
        self.batch_for(bytes.len())
            .push_rt_question(conn, kind, bytes);
        self.wake();
    }

    /// Events were queued: the worker runs the guest once the other ready
    /// connections had their turn.
    pub(crate) fn wake(&self) {
        if let Some(scheduler) = self.scheduler.upgrade() {
            scheduler.work.notify_one();
        }
    }

    pub(crate) fn close(&self, conn: u64, code: u16, reason: &str) {
        let route = &self.route;
        for topic in route.registry.take_topics(conn) {
            route.topics.unsubscribe(&topic, conn);
        }
        self.batch_for(reason.len()).push_close(conn, code, reason);
        self.pending.work.borrow_mut().closed.push(conn);
        self.wake();
    }
}

impl AttachedSlot for GuestSlot {
    fn open(&self, conn: u64, info: &[u8]) {
        GuestSlot::open(self, conn, info)
    }

    fn proxy_message(&self, conn: u64, direction: Direction, text: bool, payload: &[u8]) {
        GuestSlot::proxy_message(self, conn, direction, text, payload)
    }

    fn rt_question(&self, conn: u64, kind: EventKind, bytes: &[u8]) {
        GuestSlot::rt_question(self, conn, kind, bytes)
    }

    fn backlogged(&self) -> bool {
        GuestSlot::backlogged(self)
    }

    fn wait_backlog(&self) -> LocalFuture<'_, ()> {
        Box::pin(GuestSlot::wait_backlog(self))
    }

    fn wake(&self) {
        GuestSlot::wake(self)
    }

    fn close(&self, conn: u64, code: u16, reason: &str) {
        GuestSlot::close(self, conn, code, reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::offload::OFFLOAD_FOR;
    use crate::{GuestEngine, Program};
    use std::path::PathBuf;
    use std::time::{Duration, Instant};
    use weir_config::GuestConfig;
    use weir_pubsub::{Fanout, LocalBroker, Topics};
    use weir_reactor::registry::Registry;

    /// Regression: a route removed by a reload while its guest thread held
    /// its runner never gave its instance (memory, pool slot) back; only
    /// the worker's inline turn recycled a retired route's instance, the
    /// guest thread's copy of that turn did not.
    #[test]
    fn a_retired_route_gives_its_instance_back_after_a_turn_on_its_guest_thread() {
        let wasm = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/wasm/echo.wasm");
        assert!(
            wasm.exists(),
            "{} is missing: run scripts/build-guests.sh first",
            wasm.display()
        );
        let cache = std::env::temp_dir().join(format!("weir-slot-test-{}", std::process::id()));
        let engine = GuestEngine::new(Some(cache.clone())).expect("engine");
        let program = Program::load(&engine, "/echo", &GuestConfig::defaults(wasm)).expect("load");
        let topics = Topics::new("/echo", Arc::new(Fanout::new(1)), Arc::new(LocalBroker));
        let registry = Arc::new(Registry::new(1));
        let route = Arc::new(GuestRoute::new(0, program.clone(), topics, registry));
        let scheduler = Rc::new(Scheduler::new(0));
        let slot = GuestSlot::new(route.clone(), &scheduler);
        // The route's calls run on its guest thread (as after a slow call).
        slot.offload.until.set(Some(Instant::now() + OFFLOAD_FOR));
        let mut info = Vec::new();
        weir_abi::encode_conn_info(&mut info, "/echo", std::iter::empty(), &[]);
        slot.open(1, &info);
        route.retire();
        scheduler.run_pending();
        assert!(!slot.runner_is_home(), "the open went to the guest thread");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !slot.runner_is_home() {
            assert!(Instant::now() < deadline, "the job came back");
            std::thread::sleep(Duration::from_millis(5));
            scheduler.run_pending();
        }
        assert!(program.stats().calls > 0, "the guest ran the open");
        assert_eq!(
            program.live_instances(),
            0,
            "the removed route's instance was recycled"
        );
        scheduler.stop();
        let _ = std::fs::remove_dir_all(cache);
    }
}
