//! A connection's outbound queue for frames produced elsewhere (a relay
//! partner, a guest, a publisher, the worker at shutdown), possibly on another
//! worker thread. It counts queued bytes against the route's budget so
//! producers can wait, and allocates nothing until something is queued, so
//! an idle connection pays for it only a few words.
//!
//! A relay or guest connection also lets its producer (the relay partner,
//! the guest runner) write straight into its socket (`send_direct`) when
//! nothing is queued and nobody is writing: that saves the queue, the
//! wake-up of this connection's task and its turn through the loop — most
//! of the user-space cost of forwarding a small message. Whoever writes to
//! the socket holds the write turn; a partial direct write leaves its
//! remainder at the head of the queue, and the consumer writes queued bytes
//! before any of its own. A producer reaches the socket only through a
//! `Weak` it upgrades for one `send` ([`super::socket`]): it can never write
//! into a descriptor that was closed and reused.
//!
//! The write turn is lock-free and hand-written; `model.rs` checks it with
//! loom under every interleaving:
//! `RUSTFLAGS="--cfg weir_loom" cargo test --release -p weir-reactor --lib outbound::model`.

mod direct;
#[cfg(all(test, weir_loom))]
mod model;
mod sync;

use super::socket::{send_now, send_vectored_now};
use bytes::Bytes;
use std::collections::VecDeque;
use std::io::IoSlice;
use std::sync::atomic::Ordering;
use std::sync::{OnceLock, Weak};
use std::task::Poll;
use sync::{spin_loop, AtomicBool, AtomicU32, AtomicU8, AtomicUsize, AtomicWaker, Mutex};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use weir_ws::deflate::Negotiated;
use weir_ws::send_deflate::SendDeflate;

const FREE: u8 = 0;
const CONSUMER: u8 = 1;
const PRODUCER: u8 = 2;

/// The consumer's write turn (`Outbound::turn`); released on drop (also
/// when the connection's task is dropped in the middle of a write).
pub struct WriteTurn<'a>(&'a AtomicU8);

impl Drop for WriteTurn<'_> {
    fn drop(&mut self) {
        self.0.store(FREE, Ordering::Release);
    }
}

/// The consumer's socket as a producer's direct write sees it: one
/// non-blocking send of what it takes now. `Outbound` is generic over it
/// only so the loom model (`model.rs`) can put a socket in its place that
/// records the bytes and cuts writes short; every queue of the gateway is
/// an `Outbound<dyn DirectSocket + Send + Sync>`: the socket is tokio's
/// (a connection on its own task) or std's (a connection on the worker's
/// plane, `reactor::plane`), and either's calls are [`send_now`] and
/// [`send_vectored_now`].
pub trait DirectSocket {
    /// Sends as much of `bytes` as the socket takes now (0 on any error).
    fn send_now(&self, bytes: &[u8]) -> usize;
    /// [`send_now`](Self::send_now) for several buffers in one write.
    fn send_vectored_now(&self, parts: &[IoSlice<'_>]) -> usize;
}

impl DirectSocket for TcpStream {
    #[inline]
    fn send_now(&self, bytes: &[u8]) -> usize {
        send_now(self, bytes)
    }

    #[inline]
    fn send_vectored_now(&self, parts: &[IoSlice<'_>]) -> usize {
        send_vectored_now(self, parts)
    }
}

impl DirectSocket for std::net::TcpStream {
    #[inline]
    fn send_now(&self, bytes: &[u8]) -> usize {
        send_now(self, bytes)
    }

    #[inline]
    fn send_vectored_now(&self, parts: &[IoSlice<'_>]) -> usize {
        send_vectored_now(self, parts)
    }
}

/// The socket of any connection, as its queue's producers see it.
pub type AnySocket = dyn DirectSocket + Send + Sync;

/// What other connections or the guest runner ask a connection to write.
pub enum OutMsg {
    /// One or more complete server frames.
    Frames(Bytes),
    /// Close with this code and reason, then end the connection.
    Close(u16, String),
    /// The gateway is shutting down: answer what the client already sent,
    /// then close with 1001.
    Drain,
}

/// Shared through `Arc` between the connection (the only consumer) and its
/// producers. `S` is the socket direct writes go to ([`DirectSocket`]).
pub struct Outbound<S: ?Sized = AnySocket> {
    queue: Mutex<VecDeque<OutMsg>>,
    /// Messages queued, or taken by the consumer and not yet written
    /// (`delivered` counts those off): the consumer polls this on every turn
    /// of its loop, and an empty queue must cost it no lock; a direct write
    /// must not overtake messages the consumer is about to write.
    len: AtomicUsize,
    /// The consumer's waker: registering it is a compare when unchanged,
    /// unlike a `Notify` waiter list (a lock per poll).
    consumer: AtomicWaker,
    queued: AtomicUsize,
    /// Wakes producers waiting for the queue to drain under budget.
    drained: Notify,
    budget: usize,
    gone: AtomicBool,
    /// A direct write left part of a frame at the head of the queue: the
    /// consumer must write it before anything of its own.
    remainder: AtomicBool,
    /// Who writes to the consumer's socket now: `FREE`, `CONSUMER` or
    /// `PRODUCER` (a direct write).
    turn: AtomicU8,
    /// Direct writes are on (between `enable_direct` and `end_direct`).
    direct: AtomicBool,
    /// The consumer's socket, for direct writes; a `Weak` so a producer keeps
    /// it open only while it writes.
    socket: OnceLock<Weak<S>>,
    /// A close is queued: later ones are dropped (a publisher would
    /// otherwise queue one per message to a subscriber that stopped reading).
    closing: AtomicBool,
    /// The consumer's last read, in ticks of its worker's idle wheel
    /// (`reactor::idle`): the consumer stamps it, the wheel reads it.
    last_read: AtomicU32,
    /// The wheel found the connection silent past its `idle_timeout`:
    /// `ready` returns so the consumer can look.
    idle_due: AtomicBool,
    /// permessage-deflate for what producers send (None: not negotiated).
    /// An echo connection's replies are compressed by its loop instead
    /// (`Behaviour::COMPRESSES_REPLIES`), and it gets no producer data.
    deflate: Option<Box<SendDeflate>>,
}

impl Outbound {
    pub fn new(budget: usize) -> Outbound {
        Outbound::with_budget(budget)
    }
}

impl<S: DirectSocket + ?Sized> Outbound<S> {
    fn with_budget(budget: usize) -> Outbound<S> {
        Outbound {
            queue: Mutex::new(VecDeque::new()),
            len: AtomicUsize::new(0),
            consumer: AtomicWaker::new(),
            queued: AtomicUsize::new(0),
            drained: Notify::new(),
            budget,
            gone: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            turn: AtomicU8::new(FREE),
            remainder: AtomicBool::new(false),
            direct: AtomicBool::new(false),
            socket: OnceLock::new(),
            last_read: AtomicU32::new(0),
            idle_due: AtomicBool::new(false),
            deflate: None,
        }
    }

    /// Consumer: a read at wheel tick `now`.
    #[inline]
    pub fn touch(&self, now: u32) {
        self.last_read.store(now, Ordering::Relaxed);
    }

    /// The wheel tick of the consumer's last read.
    pub(crate) fn last_read(&self) -> u32 {
        self.last_read.load(Ordering::Relaxed)
    }

    /// The idle wheel: the connection has been silent past its deadline.
    pub(crate) fn wake_idle(&self) {
        self.idle_due.store(true, Ordering::Release);
        self.consumer.wake();
    }

    /// Consumer: whether the idle wheel woke it (and clears that).
    pub(crate) fn take_idle_due(&self) -> bool {
        self.idle_due.load(Ordering::Relaxed) && self.idle_due.swap(false, Ordering::AcqRel)
    }

    /// The queue of a connection that negotiated permessage-deflate (when
    /// `deflate` is Some): producers' messages reach it compressed.
    pub fn with_deflate(mut self, deflate: Option<&Negotiated>) -> Self {
        self.deflate = deflate.map(|n| Box::new(SendDeflate::new(n)));
        self
    }

    /// permessage-deflate for what producers send, if negotiated.
    #[inline]
    pub fn deflate(&self) -> Option<&SendDeflate> {
        self.deflate.as_deref()
    }

    /// Producer: whole plain server frames (a relay partner's, a guest's
    /// sends), compressed for this connection when it negotiated
    /// permessage-deflate (`encode::append_compressed`), then as
    /// [`send_direct`](Self::send_direct). With context takeover the
    /// connection's compressor stays locked until the bytes are written
    /// or queued: compression order is wire order.
    pub fn send_frames(&self, frames: &[u8]) -> bool {
        match &self.deflate {
            None => self.send_direct(frames),
            Some(d) => d.encode(&[frames], |bytes| self.send_direct(bytes)),
        }
    }

    /// [`send_frames`](Self::send_frames) for several buffers in order
    /// (publishes a fan-out gathers): one hand-over.
    pub fn send_frames_all(&self, parts: &[Bytes]) -> bool {
        let Some(d) = &self.deflate else {
            return parts.iter().all(|p| self.send_shared(p));
        };
        let slices: Vec<&[u8]> = parts.iter().map(|p| &p[..]).collect();
        d.encode(&slices, |bytes| self.send_direct(bytes))
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

    /// Queues frames ahead of everything queued (a direct write's remainder:
    /// a close queued meanwhile must not land inside its frame).
    fn send_first(&self, frames: Bytes) -> bool {
        let len = frames.len();
        self.queued.fetch_add(len, Ordering::Relaxed);
        if self.is_closed() {
            self.queued.fetch_sub(len, Ordering::Relaxed);
            return false;
        }
        let mut queue = self.queue.lock().expect("outbound lock");
        queue.push_front(OutMsg::Frames(frames));
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

    /// Nothing is queued (or taken and not yet written).
    pub fn is_empty(&self) -> bool {
        self.len.load(Ordering::Acquire) == 0
    }

    /// Queues a close after what is already queued; only the first close
    /// (or drain) counts: true when this call queued it.
    pub fn close(&self, code: u16, reason: &str) -> bool {
        !self.closing.swap(true, Ordering::AcqRel)
            && self.push(OutMsg::Close(code, reason.to_string()))
    }

    /// Queues the shutdown's drain; a close already queued wins.
    pub fn drain(&self) {
        if !self.closing.swap(true, Ordering::AcqRel) {
            self.push(OutMsg::Drain);
        }
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.gone.load(Ordering::Acquire)
    }

    /// The byte budget producers keep to (the route's `outbound_budget`).
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// Bytes queued and not yet written.
    pub fn queued_bytes(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    /// `len` more bytes fit in the budget (anything fits an empty queue, so
    /// a message larger than the budget still goes to a reader keeping up).
    pub fn fits(&self, len: usize) -> bool {
        let queued = self.queued.load(Ordering::Relaxed);
        queued == 0 || queued + len <= self.budget
    }

    /// `len` more bytes fit in the budget, even into an empty queue.
    pub fn fits_strictly(&self, len: usize) -> bool {
        self.queued.load(Ordering::Relaxed) + len <= self.budget
    }

    /// More than the budget is queued: producers should stop reading.
    pub fn over_budget(&self) -> bool {
        self.queued.load(Ordering::Relaxed) > self.budget
    }

    /// [`ready`](Self::ready) without a future: true when something is
    /// queued or the idle wheel woke the consumer; else `waker` is woken
    /// when either happens (the plane's connections, `reactor::plane`).
    pub fn ready_or_register(&self, waker: &std::task::Waker) -> bool {
        let ready = || !self.is_empty() || self.idle_due.load(Ordering::Acquire);
        if ready() {
            return true;
        }
        self.consumer.register(waker);
        ready()
    }

    /// Something is queued, or the idle wheel woke the consumer.
    #[inline]
    pub fn is_ready(&self) -> bool {
        !self.is_empty() || self.idle_due.load(Ordering::Acquire)
    }

    /// Registers the consumer's waker without a look at the queue.
    pub fn register_consumer(&self, waker: &std::task::Waker) {
        self.consumer.register(waker);
    }

    /// Waits until something is queued, or the idle wheel woke the
    /// consumer (`take_idle_due`); the consumer then takes messages with
    /// `try_recv` (under the write turn when direct writes are on).
    pub async fn ready(&self) {
        let ready = || !self.is_empty() || self.idle_due.load(Ordering::Acquire);
        std::future::poll_fn(|cx| {
            if ready() {
                return Poll::Ready(());
            }
            self.consumer.register(cx.waker());
            // A message pushed between the check and the registration.
            if ready() {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await
    }

    /// The next queued message; the consumer calls `delivered` once it is
    /// written. Taking a close ends direct writes (see below).
    pub fn try_recv(&self) -> Option<OutMsg> {
        if self.len.load(Ordering::Acquire) == 0 {
            return None;
        }
        let msg = self.queue.lock().expect("outbound lock").pop_front();
        if let Some(OutMsg::Close(..)) = msg {
            // Nothing may follow a close. The consumer holds the write turn
            // (direct writes are on) and ends them now, not at its
            // `end_direct` before the close frame: a producer's direct
            // write in between would put a frame sent after the close
            // ahead of the close frame (the loom model found that).
            self.direct.store(false, Ordering::Release);
        }
        msg
    }

    /// The consumer wrote (or dropped) `count` messages it took.
    pub fn delivered(&self, count: usize) {
        self.len.fetch_sub(count, Ordering::Release);
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
    pub(crate) fn consumer_gone(&self) {
        self.gone.store(true, Ordering::Release);
        let mut queue = self.queue.lock().expect("outbound lock");
        self.len.store(0, Ordering::Release);
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
    use crate::socket::Socket;
    use std::sync::{Arc, Weak};

    /// A connected loopback pair: the gateway's side as a shared tokio
    /// socket, the client's as a blocking std stream.
    fn socket_pair() -> (Socket, std::net::TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        server.set_nonblocking(true).unwrap();
        (Arc::new(TcpStream::from_std(server).unwrap()), client)
    }

    /// A direct write the socket takes only in part leaves the rest at the
    /// head of the queue, flagged as a remainder; later sends queue behind
    /// it, and the bytes come out whole and in order.
    #[tokio::test]
    async fn a_cut_short_direct_write_queues_its_remainder_first() {
        use std::io::Read;
        let (tx, mut rx) = socket_pair();
        let out = Outbound::new(usize::MAX);
        out.enable_direct(Arc::downgrade(&tx) as Weak<AnySocket>);
        let big: Vec<u8> = (0..64 << 20).map(|i| (i % 251) as u8).collect();
        assert!(out.send_direct(&big));
        out.close(1001, "after the frame");
        assert!(out.send_direct(b"next"));
        // The socket took part of it; the rest waits, ahead of the close.
        let rest = {
            let _turn = out.write_turn();
            out.take_remainder().expect("a remainder")
        };
        assert!(!rest.is_empty() && rest.len() < big.len());
        assert!(matches!(out.try_recv(), Some(OutMsg::Close(1001, _))));
        assert!(matches!(out.try_recv(), Some(OutMsg::Frames(f)) if &f[..] == b"next"));
        out.delivered(2);
        let mut got = vec![0u8; big.len() - rest.len()];
        rx.read_exact(&mut got).unwrap();
        got.extend_from_slice(&rest);
        assert!(got == big, "bytes lost or reordered");
        out.end_direct();
        assert!(!out.direct());
    }

    /// Regression: direct writes used to go to a raw descriptor number, sound
    /// only while the connection ended them before closing its socket. A
    /// socket dropped without `end_direct` must take no more bytes, and a
    /// new connection that reuses its descriptor number must get none.
    #[tokio::test]
    async fn a_dropped_socket_is_never_written_even_if_direct_writes_were_not_ended() {
        use std::io::Read;
        use std::os::fd::AsRawFd;
        let (tx, _old_client) = socket_pair();
        let old_fd = tx.as_raw_fd();
        let out = Outbound::new(usize::MAX);
        out.enable_direct(Arc::downgrade(&tx) as Weak<AnySocket>);
        drop(tx);
        let (reused, mut new_client) = socket_pair();
        assert!(out.send_direct(b"for the old client only"));
        assert!(
            matches!(out.try_recv(), Some(OutMsg::Frames(f)) if &f[..] == b"for the old client only")
        );
        new_client.set_nonblocking(true).unwrap();
        let mut got = [0u8; 64];
        let read = new_client.read(&mut got);
        assert!(
            matches!(&read, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "bytes reached another connection (descriptor {old_fd} reused as {}): {read:?}",
            reused.as_raw_fd()
        );
    }

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
        out.delivered(2);
        assert!(out.is_empty());
    }
}
