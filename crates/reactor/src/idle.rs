//! Idle deadlines of one worker's connections: a coarse timer wheel, so a
//! connection keeps no timer of its own (a `tokio::time::Sleep` is 112
//! bytes in every connection's future, and `Instant::now()` a clock read
//! per socket read).
//!
//! A connection stamps its last read in its [`Outbound`] with the wheel's
//! tick (`now`, a plain load); the wheel visits each connection about once
//! per its `idle_timeout` and, when the connection has been silent that
//! long (or as long again since its ping), sets its idle flag and wakes it.
//! The connection decides: a ping after one silent period, a 1001 close
//! after the next (`conn::idle_check`). Deadlines fall where each
//! connection's last read puts them, so pings spread over the interval
//! instead of leaving in one sweep; one visit wakes at most a slot's worth.
//!
//! Resolution is one tick ([`TICK`]): a ping leaves between `idle_timeout`
//! and `idle_timeout + TICK` after the last read.

use super::outbound::Outbound;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The wheel's resolution.
pub(crate) const TICK: Duration = Duration::from_millis(100);
/// Slots in the wheel: deadlines further out than this many ticks are
/// visited once per lap and put back.
const SLOTS: u32 = 64;

/// One connection under watch.
struct Entry {
    outbound: Arc<Outbound>,
    /// The connection's `idle_timeout`, in ticks.
    ticks: u32,
    /// When the wheel last woke it for being idle (0: never).
    fired: u32,
}

pub struct IdleWheel {
    start: Instant,
    /// Ticks since `start`, as of the wheel's last turn.
    now: Cell<u32>,
    slots: RefCell<Vec<Vec<Entry>>>,
    watched: Cell<usize>,
    /// Wakes the wheel's task when the first connection arrives (it does
    /// not tick while no connection is open).
    arrived: tokio::sync::Notify,
}

impl Default for IdleWheel {
    fn default() -> IdleWheel {
        IdleWheel {
            start: Instant::now(),
            now: Cell::new(1),
            slots: RefCell::new((0..SLOTS).map(|_| Vec::new()).collect()),
            watched: Cell::new(0),
            arrived: tokio::sync::Notify::new(),
        }
    }
}

impl IdleWheel {
    /// The current tick: what a connection stamps its reads with.
    #[inline]
    pub fn now(&self) -> u32 {
        self.now.get()
    }

    /// `timeout` in ticks, rounded up (at least one).
    pub fn ticks(timeout: Duration) -> u32 {
        let ticks = timeout.as_nanos().div_ceil(TICK.as_nanos());
        ticks.clamp(1, u128::from(u32::MAX / 2)) as u32
    }

    /// Watches a connection until its outbound queue's consumer is gone.
    pub fn watch(&self, outbound: Arc<Outbound>, timeout: Duration) {
        let now = self.now();
        outbound.touch(now);
        let ticks = Self::ticks(timeout);
        let due = now + ticks.min(SLOTS - 1);
        self.slots.borrow_mut()[(due % SLOTS) as usize].push(Entry {
            outbound,
            ticks,
            fired: 0,
        });
        let watched = self.watched.get();
        self.watched.set(watched + 1);
        if watched == 0 {
            self.arrived.notify_one();
        }
    }

    /// The worker's task: one turn per tick while connections are open.
    pub async fn run(self: Rc<Self>) {
        loop {
            if self.watched.get() == 0 {
                self.arrived.notified().await;
            }
            let next = self.start + TICK * (self.now() + 1);
            tokio::time::sleep_until(next).await;
            let elapsed = (Instant::now() - self.start).as_nanos() / TICK.as_nanos();
            let now = (elapsed as u32).max(self.now() + 1);
            // Late (a long guest batch held the worker): every slot once
            // is enough, deadlines are absolute.
            let first = self.now().max(now.saturating_sub(SLOTS)) + 1;
            self.now.set(now);
            for tick in first..=now {
                self.turn(tick, now);
            }
        }
    }

    /// Visits the slot of `tick`: connections gone are dropped, those
    /// silent past their deadline are woken, the rest go where their
    /// deadline falls.
    fn turn(&self, tick: u32, now: u32) {
        let mut slots = self.slots.borrow_mut();
        let entries = std::mem::take(&mut slots[(tick % SLOTS) as usize]);
        let mut dropped = 0;
        for mut e in entries {
            if e.outbound.is_closed() {
                dropped += 1;
                continue;
            }
            let since = e.outbound.last_read().max(e.fired);
            let mut due = since.saturating_add(e.ticks);
            if due <= now {
                e.fired = now;
                e.outbound.wake_idle();
                due = now + e.ticks;
            }
            // Never the slot being emptied; far deadlines come round again.
            let due = due.clamp(now + 1, now + SLOTS - 1);
            slots[(due % SLOTS) as usize].push(e);
        }
        self.watched.set(self.watched.get() - dropped);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_round_up_to_whole_ticks() {
        assert_eq!(IdleWheel::ticks(Duration::from_millis(1)), 1);
        assert_eq!(IdleWheel::ticks(Duration::from_millis(100)), 1);
        assert_eq!(IdleWheel::ticks(Duration::from_millis(301)), 4);
        assert_eq!(IdleWheel::ticks(Duration::from_secs(60)), 600);
    }

    #[test]
    fn a_silent_connection_is_woken_once_per_timeout_and_a_busy_one_never() {
        let wheel = IdleWheel::default();
        let silent = Arc::new(Outbound::new(1 << 20));
        let busy = Arc::new(Outbound::new(1 << 20));
        let gone = Arc::new(Outbound::new(1 << 20));
        wheel.watch(silent.clone(), Duration::from_millis(300));
        wheel.watch(busy.clone(), Duration::from_millis(300));
        wheel.watch(gone.clone(), Duration::from_secs(100));
        gone.consumer_gone();
        let mut woken = Vec::new();
        for now in 2..=200 {
            wheel.now.set(now);
            busy.touch(now);
            wheel.turn(now, now);
            if silent.take_idle_due() {
                woken.push(now);
            }
            assert!(!busy.take_idle_due(), "woken at {now} though it reads");
        }
        // Stamped at tick 1, 3 ticks of silence: woken at 4, then every 3.
        assert_eq!(woken[..3], [4, 7, 10]);
        assert_eq!(woken.len(), 66);
        assert_eq!(wheel.watched.get(), 2, "the closed connection is dropped");
    }

    #[test]
    fn a_deadline_beyond_one_lap_comes_round_again() {
        let wheel = IdleWheel::default();
        let conn = Arc::new(Outbound::new(1 << 20));
        wheel.watch(conn.clone(), TICK * 150);
        let mut woken = Vec::new();
        for now in 2..=400 {
            wheel.now.set(now);
            wheel.turn(now, now);
            if conn.take_idle_due() {
                woken.push(now);
            }
        }
        assert_eq!(woken, [151, 301]);
    }
}
