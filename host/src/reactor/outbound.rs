//! A connection's outbound queue for frames produced elsewhere (a relay
//! partner, a guest, a publisher), possibly on another worker thread. It
//! counts queued bytes against the route's budget so producers can wait.

use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::{mpsc, Notify};

/// What other connections or the guest runner ask a connection to write.
pub enum OutMsg {
    /// One or more complete server frames.
    Frames(Vec<u8>),
    /// Close with this code and reason, then end the connection.
    Close(u16, String),
}

/// The producer side; shared through `Arc`.
pub struct Outbound {
    tx: mpsc::UnboundedSender<OutMsg>,
    queued: AtomicUsize,
    drained: Notify,
    budget: usize,
}

impl Outbound {
    pub fn new(budget: usize) -> (Outbound, mpsc::UnboundedReceiver<OutMsg>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let out = Outbound {
            tx,
            queued: AtomicUsize::new(0),
            drained: Notify::new(),
            budget,
        };
        (out, rx)
    }

    /// Queues frames; false when the connection is gone.
    pub fn send(&self, frames: Vec<u8>) -> bool {
        let len = frames.len();
        self.queued.fetch_add(len, Ordering::Relaxed);
        if self.tx.send(OutMsg::Frames(frames)).is_err() {
            self.queued.fetch_sub(len, Ordering::Relaxed);
            return false;
        }
        true
    }

    pub fn close(&self, code: u16, reason: &str) {
        let _ = self.tx.send(OutMsg::Close(code, reason.to_string()));
    }

    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// More than the budget is queued: producers should stop reading.
    pub fn over_budget(&self) -> bool {
        self.queued.load(Ordering::Relaxed) > self.budget
    }

    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    /// The consumer wrote `len` bytes; wakes producers once under budget.
    pub fn written(&self, len: usize) {
        let before = self.queued.fetch_sub(len, Ordering::Relaxed);
        if before > self.budget && before - len <= self.budget {
            self.drained.notify_waiters();
        }
    }

    /// The consumer ended: wake producers so they stop waiting on it.
    pub fn consumer_gone(&self) {
        self.drained.notify_waiters();
    }

    /// Waits until the queue is at or under budget (or the consumer is gone).
    pub async fn wait_drained(&self) {
        loop {
            let notified = self.drained.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if !self.over_budget() || self.is_closed() {
                return;
            }
            notified.await;
        }
    }
}
