//! A guest route's thread on one worker: where the route's guest calls run
//! once one of them has held the worker longer than a slice (`offload`);
//! started the first time that happens. Each job is one turn (`turn`, the
//! same the worker runs inline); the route's instance (its `Runner`,
//! attachments and all) travels with it and comes back when the job is
//! done, so a route runs in one place at a time, in order, and can return
//! to running inline later.
//!
//! A slow or hostile handler then holds only its own thread, up to its
//! deadline per call: the worker keeps serving every other connection, and
//! every other guest route keeps its own place (inline or on its own
//! thread); the kernel shares the cores between them.
//!
//! wasmtime-wasi's synchronous WASI bindings block on a runtime of their
//! own for stdio: this thread has no tokio runtime, so that is allowed here.

use crate::kind::route::GuestRoute;
use crate::kind::turn::{run_turn, Work};
use crate::{Batch, Runner};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Nice value of guest threads: a route that needed one is slow by
/// definition, and when it competes with a worker for a core the worker
/// (every other connection) should win most of it (nice 10 has about a
/// tenth of the weight of nice 0 in Linux's scheduler). Its calls still end
/// at their deadline, which counts wall time: waiting for the CPU counts.
const GUEST_THREAD_NICE: i32 = 10;

/// One turn of a route's work (`turn`), with the route's runner and
/// spare batches: sent to the guest thread, and given back whole once the
/// turn has run, so the runner is always either home in its slot or in
/// its job.
pub(crate) struct Job {
    pub route: Arc<GuestRoute>,
    /// The worker the slot belongs to (where the route's own I/O answers go).
    pub worker: usize,
    pub runner: Box<Runner>,
    pub work: Work,
    /// Emptied batches, back to the slot for reuse.
    pub spare: Vec<Batch>,
}

/// A route's guest thread on one worker; dropping it lets the thread finish
/// its queue and waits for it.
pub(crate) struct GuestThread {
    jobs: Option<mpsc::Sender<Job>>,
    /// Jobs done, runner and all, for the slot to take back.
    done: mpsc::Receiver<Job>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Set when the worker stops: a pause for the route's share ends early.
    stopping: Arc<AtomicBool>,
}

impl GuestThread {
    /// Starts the thread; `wake` is signalled after every job, so the
    /// worker takes the runner back and hands over what came meanwhile.
    pub fn start(
        name: String,
        share_percent: u32,
        wake: Arc<Notify>,
    ) -> std::io::Result<GuestThread> {
        let (jobs, rx) = mpsc::channel::<Job>();
        let (done_tx, done) = mpsc::channel::<Job>();
        let stopping = Arc::new(AtomicBool::new(false));
        let stop = stopping.clone();
        let thread = std::thread::Builder::new().name(name).spawn(move || {
            lower_priority();
            let mut budget = Budget::new(share_percent);
            while let Ok(mut job) = rx.recv() {
                let started = Instant::now();
                // The same turn the worker runs inline, never stopped early.
                let Job {
                    route,
                    worker,
                    runner,
                    work,
                    spare,
                } = &mut job;
                run_turn(route, runner, *worker, work, spare, |_| false);
                if done_tx.send(job).is_err() {
                    break;
                }
                wake.notify_one();
                // Over the route's share: its next job waits (its
                // connections' reads stop once their backlog is full).
                if let Some(pause) = budget.spend(started, Instant::now()) {
                    let until = Instant::now() + pause;
                    while !stop.load(Ordering::Acquire) {
                        let Some(left) = until.checked_duration_since(Instant::now()) else {
                            break;
                        };
                        std::thread::park_timeout(left);
                    }
                }
            }
        })?;
        Ok(GuestThread {
            jobs: Some(jobs),
            done,
            thread: Some(thread),
            stopping,
        })
    }

    /// Queues a job; false once the thread is gone (at exit).
    pub fn send(&self, job: Job) -> bool {
        self.jobs
            .as_ref()
            .is_some_and(|jobs| jobs.send(job).is_ok())
    }

    /// A job the thread has finished, if one is back.
    pub(crate) fn take_done(&self) -> Option<Job> {
        self.done.try_recv().ok()
    }
}

impl Drop for GuestThread {
    fn drop(&mut self) {
        drop(self.jobs.take());
        self.stopping.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

/// The window a guest thread's `cpu_share` is counted in.
const SHARE_WINDOW: Duration = Duration::from_millis(500);

/// A guest thread's time budget: `share_percent` of each [`SHARE_WINDOW`].
/// Wall time of its calls, like the deadline (the thread does nothing else).
struct Budget {
    share_percent: u32,
    window_start: Instant,
    used: Duration,
}

impl Budget {
    fn new(share_percent: u32) -> Budget {
        Budget {
            share_percent,
            window_start: Instant::now(),
            used: Duration::ZERO,
        }
    }

    /// Counts a job that ran from `started` to `now`; returns how long to
    /// pause when the window's share is spent.
    fn spend(&mut self, started: Instant, now: Instant) -> Option<Duration> {
        if now.duration_since(self.window_start) >= SHARE_WINDOW {
            self.window_start = started;
            self.used = Duration::ZERO;
        }
        self.used += now.duration_since(started);
        let allowed = SHARE_WINDOW * self.share_percent / 100;
        if self.used < allowed {
            return None;
        }
        // Pause so that the time used is the share of the time passed.
        let passed_needed = self.used * 100 / self.share_percent;
        let pause = (self.window_start + passed_needed).checked_duration_since(now)?;
        self.window_start = now + pause;
        self.used = Duration::ZERO;
        Some(pause)
    }
}

/// Gives the calling thread [`GUEST_THREAD_NICE`] (best effort).
fn lower_priority() {
    // SAFETY: plain syscalls on the calling thread's id; no memory involved.
    // On Linux the nice value is per thread.
    let done = unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, GUEST_THREAD_NICE)
    };
    if done != 0 {
        tracing::debug!("could not lower the guest thread's priority");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread at 10 % that runs 100 ms jobs back to back pauses ~900 ms
    /// after each; one well under its share never pauses.
    #[test]
    fn a_route_over_its_share_pauses() {
        let t0 = Instant::now();
        let mut b = Budget::new(10);
        b.window_start = t0;
        let pause = b
            .spend(t0, t0 + Duration::from_millis(100))
            .expect("a pause");
        assert_eq!(pause, Duration::from_millis(900));
        let mut b = Budget::new(50);
        b.window_start = t0;
        for i in 0..10 {
            let start = t0 + Duration::from_millis(40 * i);
            assert_eq!(b.spend(start, start + Duration::from_millis(1)), None);
        }
    }
}
