//! A connection's outbound queue for frames produced elsewhere (a relay
//! partner, a guest, a publisher, the worker at shutdown), possibly on another
//! worker thread. It counts queued bytes against the route's budget so
//! producers can wait, and allocates nothing until something is queued, so
//! an idle connection pays for it only a few words.

use atomic_waker::AtomicWaker;
use bytes::Bytes;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::task::Poll;
use tokio::sync::Notify;

/// What other connections or the guest runner ask a connection to write.
pub enum OutMsg {
    /// One or more complete server frames.
    Frames(Bytes),
    /// Close with this code and reason, then end the connection.
    Close(u16, String),
}

/// Shared through `Arc` between the connection (the only consumer) and its
/// producers.
pub struct Outbound {
    queue: Mutex<VecDeque<OutMsg>>,
    /// Messages in `queue`: the consumer polls this on every turn of its
    /// loop, and an empty queue must cost it no lock.
    len: AtomicUsize,
    /// The consumer's waker: registering it is a compare when unchanged,
    /// unlike a `Notify` waiter list (a lock per poll).
    consumer: AtomicWaker,
    queued: AtomicUsize,
    /// Wakes producers waiting for the queue to drain under budget.
    drained: Notify,
    budget: usize,
    gone: AtomicBool,
    /// A close is queued: later ones are dropped (a publisher would
    /// otherwise queue one per message to a subscriber that stopped reading).
    closing: AtomicBool,
}

impl Outbound {
    pub fn new(budget: usize) -> Outbound {
        Outbound {
            queue: Mutex::new(VecDeque::new()),
            len: AtomicUsize::new(0),
            consumer: AtomicWaker::new(),
            queued: AtomicUsize::new(0),
            drained: Notify::new(),
            budget,
            gone: AtomicBool::new(false),
            closing: AtomicBool::new(false),
        }
    }

    fn push(&self, msg: OutMsg) -> bool {
        if self.is_closed() {
            return false;
        }
        let mut queue = self.queue.lock().expect("outbound lock");
        queue.push_back(msg);
        self.len.fetch_add(1, Ordering::Release);
        drop(queue);
        self.consumer.wake();
        true
    }

    /// Queues frames; false when the connection is gone.
    pub fn send(&self, frames: Bytes) -> bool {
        let len = frames.len();
        self.queued.fetch_add(len, Ordering::Relaxed);
        if !self.push(OutMsg::Frames(frames)) {
            self.queued.fetch_sub(len, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Queues a close after what is already queued; only the first counts.
    pub fn close(&self, code: u16, reason: &str) {
        if !self.closing.swap(true, Ordering::AcqRel) {
            self.push(OutMsg::Close(code, reason.to_string()));
        }
    }

    pub fn is_closed(&self) -> bool {
        self.gone.load(Ordering::Acquire)
    }

    /// Bytes queued and not yet written.
    pub fn queued_bytes(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    /// More than the budget is queued: producers should stop reading.
    pub fn over_budget(&self) -> bool {
        self.queued.load(Ordering::Relaxed) > self.budget
    }

    /// The consumer's next message, waiting for one.
    pub async fn recv(&self) -> OutMsg {
        std::future::poll_fn(|cx| {
            if let Some(msg) = self.try_recv() {
                return Poll::Ready(msg);
            }
            self.consumer.register(cx.waker());
            // A message pushed between the check and the registration.
            self.try_recv().map_or(Poll::Pending, Poll::Ready)
        })
        .await
    }

    pub fn try_recv(&self) -> Option<OutMsg> {
        if self.len.load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut queue = self.queue.lock().expect("outbound lock");
        let msg = queue.pop_front();
        if msg.is_some() {
            self.len.fetch_sub(1, Ordering::Release);
        }
        msg
    }

    /// The consumer wrote `len` bytes; wakes producers once under budget.
    pub fn written(&self, len: usize) {
        let before = self.queued.fetch_sub(len, Ordering::Relaxed);
        if before > self.budget && before - len <= self.budget {
            self.drained.notify_waiters();
        }
    }

    /// The consumer ended: refuse new messages, drop queued ones, and wake
    /// producers so they stop waiting on it.
    pub fn consumer_gone(&self) {
        self.gone.store(true, Ordering::Release);
        let mut queue = self.queue.lock().expect("outbound lock");
        self.len.fetch_sub(queue.len(), Ordering::Release);
        queue.clear();
        drop(queue);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A subscriber that stopped reading is asked to close once per publish;
    /// its queue must not grow by a close message each time.
    #[test]
    fn only_the_first_close_is_queued() {
        let out = Outbound::new(10);
        assert!(out.send(Bytes::from_static(b"0123456789ab")));
        assert!(out.over_budget());
        for _ in 0..1000 {
            out.close(1008, "subscriber too slow");
        }
        assert!(matches!(out.try_recv(), Some(OutMsg::Frames(_))));
        assert!(matches!(out.try_recv(), Some(OutMsg::Close(1008, _))));
        assert!(out.try_recv().is_none());
    }
}
