//! When a guest route's calls leave the worker: one call past
//! [`HARD_SLICE`], or two past [`SLICE`] within [`WINDOW`], send the
//! route's next turns to its guest thread (`thread`) for [`OFFLOAD_FOR`];
//! a route that behaves comes back. The worker's side of the slice check
//! that `turn` is given as its `stop`.
//!
//! Calls are timed in wall time (a clock read costs ~20 ns), and wall time
//! also counts the time the scheduler gave the worker's core to somebody
//! else. So a call that looks slow is checked against the worker thread's
//! own CPU clock (~0.5 µs a read, a system call): [`mark_turn`] reads it at
//! a turn's start when the last reading is over [`MARK_EVERY`] old, and a
//! call counts for no more than the CPU the thread used since that reading
//! ([`on_cpu`]). The reading precedes the call, so the bound is never
//! below the call's own CPU: a slow call is still slow, a preempted one is
//! not.

use crate::kind::thread::GuestThread;
use std::cell::{Cell, RefCell};
use std::time::{Duration, Instant};
use tracing::{debug, info};

/// A call this long moves its route to its own thread at once (a guest
/// looping to its deadline stalls the worker for one call, not two).
pub(crate) const HARD_SLICE: Duration = Duration::from_millis(10);
/// Two calls past this within [`WINDOW`] move their route. Calls are timed
/// in wall time, and on a busy core the kernel's own work (softirqs for
/// loopback traffic) stretches a 100 µs call past 1 ms now and then: this
/// is as low as it goes without moving routes that are not slow.
pub(crate) const SLICE: Duration = Duration::from_millis(3);
/// The window of [`SLICE`]'s rule. (Many short calls are not a stall: the
/// worker serves its other connections between them, so a busy guest route
/// may use most of a worker without moving.)
pub(crate) const WINDOW: Duration = Duration::from_secs(1);
/// The slice of an instance's first call, which touches fresh memory (page
/// faults, the guest's own start-up): a looping guest still passes it.
pub(crate) const FIRST_CALL_SLICE: Duration = Duration::from_millis(20);
/// How long a route runs on the guest thread after a call passed [`SLICE`]
/// (every slow call starts the period again). Inline calls are cheaper (no
/// hand-over between threads): a route that behaves comes back.
pub(crate) const OFFLOAD_FOR: Duration = Duration::from_secs(10);

/// How old the worker thread's CPU reading may be at a turn's start:
/// about 1,000 readings a second on a busy worker (~0.05 % of a core), and
/// at most this much of other work in the bound of a call.
pub(crate) const MARK_EVERY: Duration = Duration::from_millis(1);

thread_local! {
    /// When the worker thread's CPU clock was last read, and what it said.
    static MARK: Cell<Option<(Instant, Duration)>> = const { Cell::new(None) };
}

/// The calling thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`); None where
/// the clock cannot be read.
fn thread_cpu() -> Option<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given, nothing else.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    (r == 0).then(|| Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

/// At a turn's start on a worker: reads the thread's CPU clock if the last
/// reading is over [`MARK_EVERY`] old.
pub(crate) fn mark_turn() {
    let now = Instant::now();
    let stale = MARK
        .get()
        .is_none_or(|(at, _)| now.duration_since(at) >= MARK_EVERY);
    if stale {
        MARK.set(thread_cpu().map(|cpu| (now, cpu)));
    }
}

/// A call's duration `took` (wall time) bounded by the CPU the thread used
/// since the mark before it: what the call can have computed. Only read
/// for calls past [`SLICE`] (the others move nothing).
fn on_cpu(took: Duration) -> Duration {
    if took <= SLICE {
        return took;
    }
    let Some((_, before)) = MARK.get() else {
        return took;
    };
    let Some(now) = thread_cpu() else {
        return took;
    };
    let used = now.saturating_sub(before);
    if used < took {
        debug!(
            ?took,
            ?used,
            "a guest call's wall time was mostly the scheduler's"
        );
    }
    took.min(used)
}

/// A route's calls on its guest thread on one worker: the thread, and
/// until when they go there.
#[derive(Default)]
pub(super) struct Offload {
    /// The route's guest thread on this worker, once it was needed.
    pub(super) thread: RefCell<Option<GuestThread>>,
    /// Calls go to the guest thread until then.
    pub(super) until: Cell<Option<Instant>>,
    /// When a call last passed [`SLICE`].
    last_strike: Cell<Option<Instant>>,
}

impl Offload {
    /// Whether the route's calls go to its guest thread now.
    pub(super) fn active(&self) -> bool {
        self.until.get().is_some_and(|until| Instant::now() < until)
    }

    /// Whether a call that ran for `took` (its instance's `first`; bounded
    /// by the thread's CPU, [`on_cpu`]) moves the route to its guest thread for [`OFFLOAD_FOR`]: past
    /// [`HARD_SLICE`] ([`FIRST_CALL_SLICE`] for a first call), past
    /// [`SLICE`] for the second time within [`WINDOW`]. Instantiating is
    /// not counted: it happens once per instance.
    pub(super) fn passed_slice(&self, (took, first): (Duration, bool), route: &str) -> bool {
        let took = on_cpu(took);
        let now = Instant::now();
        let moves = if first {
            took > FIRST_CALL_SLICE
        } else if took > HARD_SLICE {
            true
        } else if took > SLICE {
            self.last_strike
                .replace(Some(now))
                .is_some_and(|last| now.duration_since(last) < WINDOW)
        } else {
            false
        };
        if !moves {
            return false;
        }
        let already = self
            .until
            .replace(Some(Instant::now() + OFFLOAD_FOR))
            .is_some_and(|until| Instant::now() < until);
        if !already {
            info!(
                route,
                ?took,
                "a guest call held the worker; the route's calls move to the guest thread"
            );
        }
        true
    }
}
