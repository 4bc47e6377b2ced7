//! A guest route's timers (`set-timer`, `cancel-timer`): held by the
//! route's I/O, not by an instance, so they survive instance replacement
//! and deploys; one task per route on the I/O thread fires every due one
//! in one go, and a worker gets the events due together in one push.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::services::io::{worker_for, IoEvent, RouteIo};
use crate::ConnectionId;

/// Timers one route may have pending at once: past it, a set-timer is
/// dropped (and logged), so a guest cannot grow the host's timer map
/// without bound.
pub(crate) const MAX_TIMERS_PER_ROUTE: usize = 100_000;

/// A route's timers: one task on the I/O thread sleeps until the earliest
/// is due and fires every due one in one go (setting a timer is a lock and
/// a heap push, no task of its own; timers due together reach a worker as
/// one inbox push and one wake-up).
#[derive(Default)]
pub(super) struct Timers {
    state: Mutex<TimerState>,
    /// Wakes the task: a timer due before the one it sleeps for, or the
    /// route gone.
    pub(super) wake: Notify,
    /// The route is gone: the task ends.
    pub(super) closed: AtomicBool,
}

#[derive(Default)]
struct TimerState {
    /// Pending timers by (connection, tag): the generation of the one set
    /// last (an earlier one with the same key was replaced).
    pending: HashMap<(ConnectionId, u64), u64>,
    /// When each timer is due, earliest first. An entry whose generation
    /// is no longer the pending one was cancelled or replaced, and is
    /// skipped when due (or dropped when the heap is compacted).
    /// The task sleeps until the earliest entry, as it was when it last
    /// looked: only a push can make the earliest sooner.
    due: BinaryHeap<Reverse<Due>>,
    /// The task has been started.
    running: bool,
}

#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Due {
    at: Instant,
    generation: u64,
    conn: ConnectionId,
    tag: u64,
    /// The worker whose batch set it (a route timer's event goes there).
    asker: usize,
}

impl TimerState {
    /// Entries for cancelled or replaced timers are dropped once they are
    /// most of the heap, so set-and-cancel churn cannot grow it.
    fn compact(&mut self) {
        if self.due.len() > 1024 && self.due.len() > 2 * self.pending.len() {
            let pending = &self.pending;
            self.due
                .retain(|Reverse(d)| pending.get(&(d.conn, d.tag)) == Some(&d.generation));
        }
    }
}

impl RouteIo {
    /// A `set-timer` of a batch that ran on worker `asker`; replaces a
    /// pending timer with the same connection and tag.
    pub(crate) fn set_timer(
        self: &Arc<Self>,
        asker: usize,
        conn: ConnectionId,
        tag: u64,
        delay: Duration,
    ) {
        let generation = self.generation.fetch_add(1, Ordering::Relaxed);
        let at = Instant::now() + delay;
        let mut state = self.timers.state.lock().expect("timers lock");
        if state.pending.len() >= MAX_TIMERS_PER_ROUTE && !state.pending.contains_key(&(conn, tag))
        {
            tracing::warn!(
                route = &*self.route,
                conn,
                tag,
                max = MAX_TIMERS_PER_ROUTE,
                "guest set a timer past the route's pending timers cap; dropped"
            );
            return;
        }
        let sooner = state.due.peek().is_none_or(|Reverse(due)| at < due.at);
        state.pending.insert((conn, tag), generation);
        state.due.push(Reverse(Due {
            at,
            generation,
            conn,
            tag,
            asker,
        }));
        state.compact();
        if !state.running {
            state.running = true;
            weir_outbound::runtime().spawn(fire_timers(self.timers.clone(), Arc::downgrade(self)));
        } else if sooner {
            self.timers.wake.notify_one();
        }
    }

    /// A `cancel-timer`: the timer does not fire (unless its event is
    /// already queued).
    pub(crate) fn cancel_timer(&self, conn: ConnectionId, tag: u64) {
        let mut state = self.timers.state.lock().expect("timers lock");
        state.pending.remove(&(conn, tag));
        state.compact();
    }

    /// Queue the fired `events` for their workers: one push per worker.
    fn deliver_fired(&self, fired: Vec<(usize, IoEvent)>) {
        self.counts
            .timers
            .fetch_add(fired.len() as u64, Ordering::Relaxed);
        let mut by_worker: HashMap<usize, Vec<IoEvent>> = HashMap::new();
        for (asker, event) in fired {
            by_worker
                .entry(worker_for(asker, &event))
                .or_default()
                .push(event);
        }
        let inboxes = self.inboxes.lock().expect("inboxes lock");
        for (worker, events) in by_worker {
            if let Some(inbox) = inboxes.get(&worker) {
                inbox.push_all(events);
            }
        }
    }
}

/// A route's timer task (on the I/O thread): sleeps until the earliest
/// timer is due or an earlier one is set, fires what is due, and ends
/// with the route.
async fn fire_timers(timers: Arc<Timers>, route: Weak<RouteIo>) {
    loop {
        let (fired, next) = {
            let mut state = timers.state.lock().expect("timers lock");
            let now = Instant::now();
            let mut fired = Vec::new();
            while let Some(Reverse(due)) = state.due.peek() {
                if due.at > now {
                    break;
                }
                let Reverse(due) = state.due.pop().expect("peeked");
                if state.pending.get(&(due.conn, due.tag)) == Some(&due.generation) {
                    state.pending.remove(&(due.conn, due.tag));
                    let event = IoEvent::Timer {
                        conn: due.conn,
                        tag: due.tag,
                    };
                    fired.push((due.asker, event));
                }
            }
            (fired, state.due.peek().map(|Reverse(due)| due.at))
        };
        if timers.closed.load(Ordering::Acquire) {
            return;
        }
        if !fired.is_empty() {
            match route.upgrade() {
                Some(route) => route.deliver_fired(fired),
                None => return,
            }
        }
        match next {
            Some(at) => {
                tokio::select! {
                    _ = tokio::time::sleep_until(at) => {}
                    _ = timers.wake.notified() => {}
                }
            }
            None => timers.wake.notified().await,
        }
    }
}
