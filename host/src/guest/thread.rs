//! One worker's guest thread: it runs every guest call of its worker
//! (upgrade hooks and batches) and applies the commands they return, so
//! guest code never runs on the thread that reads and writes sockets. A
//! slow or hostile handler holds its own thread up to its deadline; the
//! worker keeps serving every connection, native or guest, meanwhile.
//!
//! The worker hands a route's pending batches over as one job and hands the
//! next only when that job is done; while one is running, the route's
//! connections keep filling the next batches up to a bound, then stop being
//! read (see `GuestConn::reads_blocked`). Routes' jobs are taken in the
//! order they were handed over, so each route gets a turn between two calls
//! of another.
//!
//! wasmtime-wasi's synchronous WASI bindings block on a runtime of their
//! own for stdio: this thread has no tokio runtime, so that is allowed here.

use super::route::GuestRoute;
use super::{Batch, Fault, Runner, UpgradeRequest, UpgradeResponse};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use tokio::sync::{oneshot, Notify};

/// What a worker-side slot and the guest thread share about one route.
#[derive(Default)]
pub(crate) struct SlotShared {
    /// A job of this route is queued or running: the next waits for it.
    pub busy: AtomicBool,
    /// Emptied batches, back for reuse (their buffers keep their capacity).
    pub spare: Mutex<Vec<Batch>>,
}

/// Work for the guest thread, by the index of the route's slot.
pub(crate) enum Job {
    Upgrade {
        slot: usize,
        req: UpgradeRequest,
        reply: oneshot::Sender<Result<UpgradeResponse, Fault>>,
    },
    /// Batches to run in order; then forget the connections of `closed`.
    Batches {
        slot: usize,
        batches: Vec<Batch>,
        closed: Vec<u64>,
    },
}

/// The guest thread of one worker; dropping it lets the thread finish its
/// queue and waits for it.
pub(crate) struct GuestThread {
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// One route as the guest thread runs it.
struct Slot {
    route: Arc<GuestRoute>,
    runner: Runner,
    shared: Arc<SlotShared>,
}

impl GuestThread {
    /// Starts the thread for `routes` (slot index order); `done` is
    /// signalled after every job, so the worker can hand over the next.
    pub fn start(
        worker: usize,
        routes: Vec<(Arc<GuestRoute>, Arc<SlotShared>)>,
        done: Arc<Notify>,
    ) -> std::io::Result<GuestThread> {
        let (jobs, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name(format!("weir-guest-{worker}"))
            .spawn(move || {
                let mut slots: Vec<Slot> = routes
                    .into_iter()
                    .map(|(route, shared)| Slot {
                        runner: Runner::new(route.program.clone()),
                        route,
                        shared,
                    })
                    .collect();
                while let Ok(job) = rx.recv() {
                    run(&mut slots, job);
                    done.notify_one();
                }
            })?;
        Ok(GuestThread {
            jobs: Some(jobs),
            thread: Some(thread),
        })
    }

    pub fn send(&self, job: Job) {
        if let Some(jobs) = &self.jobs {
            // Fails only once the thread is gone (at exit): the job's reply
            // channel then tells its waiter.
            let _ = jobs.send(job);
        }
    }
}

impl Drop for GuestThread {
    fn drop(&mut self) {
        drop(self.jobs.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run(slots: &mut [Slot], job: Job) {
    match job {
        Job::Upgrade { slot, req, reply } => {
            let _ = reply.send(slots[slot].runner.upgrade(&req));
        }
        Job::Batches {
            slot,
            mut batches,
            closed,
        } => {
            let s = &mut slots[slot];
            for batch in &mut batches {
                if !batch.is_empty() {
                    s.route.run_batch(&mut s.runner, batch);
                }
                batch.clear();
            }
            for conn in closed {
                s.runner.forget(conn);
            }
            s.shared
                .spare
                .lock()
                .expect("spare batches lock")
                .extend(batches);
            s.shared.busy.store(false, Ordering::Release);
        }
    }
}
