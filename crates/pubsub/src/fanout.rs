//! Delivery of published frames on each worker. A topic keeps one
//! subscriber list per worker; a publish posts one delivery (the shared
//! frames and the topic) to each worker that has subscribers, whose fan-out
//! task then writes its own. So every worker writes only its own
//! subscribers' sockets, one wake-up per worker and publish rather than one
//! per subscriber, and no lock is shared by all workers. A fan-out task
//! that finds several deliveries to one topic waiting writes them to each
//! subscriber in one `sendmsg`: the busier the topic, the fewer writes per
//! message.
//!
//! Writes go straight into a subscriber's socket when its queue is empty
//! (`Outbound::send_shared`); only what the socket does not take is queued,
//! as the same buffer. Deliveries waiting for a worker are bounded in bytes
//! ([`FANOUT_BACKLOG_BYTES`]): past it, publishers stop reading.

use super::compressed::Compressed;
use super::Topic;
use atomic_waker::AtomicWaker;
use bytes::Bytes;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use tokio::sync::Notify;
use weir_reactor::registry::ConnId;

/// Bytes of deliveries one worker may have waiting before publishers stop
/// reading: a worker that falls behind slows its publishers instead of
/// growing without bound. A delivery's bytes count once, however many
/// subscribers it has.
pub(crate) const FANOUT_BACKLOG_BYTES: usize = 16 << 20;

/// Deliveries of one topic written to a subscriber in one `sendmsg` (well
/// under the kernel's 1,024 buffers per call).
const MAX_GATHER: usize = 64;

/// A publish waiting for a worker.
pub(super) struct Delivery {
    pub(super) topic: Arc<Topic>,
    pub(super) frames: Bytes,
    pub(super) exclude: Option<ConnId>,
    /// A real-time channel's offset (0: not positioned): subscribers that
    /// joined at or past it skip it.
    pub(super) position: u64,
    /// The publish's compressed forms, when the topic had subscribers
    /// that share them (permessage-deflate without context takeover).
    pub(super) compressed: Option<Arc<Compressed>>,
}

#[derive(Default)]
struct Mailbox {
    queue: Mutex<Vec<Delivery>>,
    /// Bytes of the deliveries queued (0: empty, read without the lock).
    bytes: AtomicUsize,
    waker: AtomicWaker,
}

/// A worker's delivery counters, written by that worker only.
#[derive(Default)]
#[repr(align(128))]
pub struct WorkerStats {
    dropped: AtomicU64,
    closed: AtomicU64,
}

impl WorkerStats {
    pub(super) fn count_dropped(&self) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn count_closed(&self) {
        self.closed.fetch_add(1, Ordering::Relaxed);
    }
}

/// What `/metrics` shows of fan-out.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FanoutStats {
    /// Messages not delivered to `slow_subscriber = "drop"` subscribers.
    pub dropped: u64,
    /// Subscribers closed with 1008 for being too slow.
    pub closed: u64,
}

/// The workers' delivery queues, shared by every namespace.
pub struct Fanout {
    mailboxes: Box<[Mailbox]>,
    stats: Box<[WorkerStats]>,
    /// Wakes publishers waiting for the backlog to go under budget.
    drained: Notify,
}

impl Fanout {
    pub fn new(workers: usize) -> Fanout {
        let workers = workers.max(1);
        Fanout {
            mailboxes: (0..workers).map(|_| Mailbox::default()).collect(),
            stats: (0..workers).map(|_| WorkerStats::default()).collect(),
            drained: Notify::new(),
        }
    }

    pub fn workers(&self) -> usize {
        self.mailboxes.len()
    }

    /// Hands `frames` to every subscriber of `topic` but `exclude`, through
    /// the mailbox of each worker that has subscribers (the publisher's own
    /// too: its fan-out task runs once the worker's ready connections had
    /// their turn, so what they publish meanwhile goes out in the same
    /// writes). Mailboxes are FIFO, so each publisher's order holds.
    pub fn deliver(
        &self,
        topic: &Arc<Topic>,
        frames: &Bytes,
        exclude: Option<ConnId>,
        position: u64,
    ) {
        let compressed = topic.shares_compressed().then(Arc::default);
        for (worker, mailbox) in self.mailboxes.iter().enumerate() {
            if !topic.has_subscribers_on(worker) {
                continue;
            }
            let mut queue = mailbox.queue.lock().expect("fanout lock");
            queue.push(Delivery {
                topic: topic.clone(),
                frames: frames.clone(),
                exclude,
                position,
                compressed: compressed.clone(),
            });
            mailbox.bytes.fetch_add(frames.len(), Ordering::AcqRel);
            drop(queue);
            mailbox.waker.wake();
        }
    }

    /// Some worker's waiting deliveries are over [`FANOUT_BACKLOG_BYTES`].
    pub fn congested(&self) -> bool {
        self.mailboxes
            .iter()
            .any(|m| m.bytes.load(Ordering::Relaxed) > FANOUT_BACKLOG_BYTES)
    }

    /// Delivers what waits for `worker` now (tests: no fan-out task runs).
    pub fn deliver_waiting(&self, worker: usize) {
        self.run_pending(worker, &mut Vec::new());
    }

    /// Waits until no worker is over its backlog.
    pub async fn wait_drained(&self) {
        loop {
            let notified = self.drained.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if !self.congested() {
                return;
            }
            notified.await;
        }
    }

    /// Worker `worker`'s fan-out task: writes what other threads published
    /// to its subscribers. Runs for the life of the worker.
    pub async fn run(self: Arc<Self>, worker: usize) {
        let mailbox = &self.mailboxes[worker];
        let mut batch = Vec::new();
        loop {
            std::future::poll_fn(|cx| {
                if mailbox.bytes.load(Ordering::Acquire) > 0 {
                    return Poll::Ready(());
                }
                mailbox.waker.register(cx.waker());
                if mailbox.bytes.load(Ordering::Acquire) > 0 {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            })
            .await;
            self.run_pending(worker, &mut batch);
        }
    }

    /// Delivers everything waiting for `worker` (on that worker's thread).
    /// Consecutive deliveries to one topic go to each subscriber in one
    /// write: under load a worker catches up with fewer, larger sends.
    fn run_pending(&self, worker: usize, batch: &mut Vec<Delivery>) {
        let mailbox = &self.mailboxes[worker];
        std::mem::swap(&mut *mailbox.queue.lock().expect("fanout lock"), batch);
        let mut bytes = 0;
        let mut start = 0;
        while start < batch.len() {
            let topic = &batch[start].topic;
            let end = batch[start..]
                .iter()
                .take(MAX_GATHER)
                .position(|d| !Arc::ptr_eq(&d.topic, topic))
                .map_or((start + MAX_GATHER).min(batch.len()), |n| start + n);
            let group = &batch[start..end];
            match group {
                [one] => one.topic.deliver_on(worker, one, &self.stats[worker]),
                _ => topic.deliver_all_on(worker, group, &self.stats[worker]),
            }
            bytes += group.iter().map(|d| d.frames.len()).sum::<usize>();
            start = end;
        }
        batch.clear();
        let before = mailbox.bytes.fetch_sub(bytes, Ordering::AcqRel);
        if before > FANOUT_BACKLOG_BYTES && before - bytes <= FANOUT_BACKLOG_BYTES {
            self.drained.notify_waiters();
        }
    }

    pub fn stats(&self) -> FanoutStats {
        let mut stats = FanoutStats::default();
        for w in self.stats.iter() {
            stats.dropped += w.dropped.load(Ordering::Relaxed);
            stats.closed += w.closed.load(Ordering::Relaxed);
        }
        stats
    }
}
