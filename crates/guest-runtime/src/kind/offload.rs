//! When a guest route's calls leave the worker: one call past
//! [`HARD_SLICE`], or two past [`SLICE`] within [`WINDOW`], send the
//! route's next turns to its guest thread (`thread`) for [`OFFLOAD_FOR`];
//! a route that behaves comes back. The worker's side of the slice check
//! that `turn` is given as its `stop`.

use crate::kind::thread::GuestThread;
use std::cell::{Cell, RefCell};
use std::time::{Duration, Instant};
use tracing::info;

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

    /// Whether a call that ran for `took` (its instance's `first`) moves
    /// the route to its guest thread for [`OFFLOAD_FOR`]: past
    /// [`HARD_SLICE`] ([`FIRST_CALL_SLICE`] for a first call), past
    /// [`SLICE`] for the second time within [`WINDOW`]. Instantiating is
    /// not counted: it happens once per instance.
    pub(super) fn passed_slice(&self, (took, first): (Duration, bool), route: &str) -> bool {
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
