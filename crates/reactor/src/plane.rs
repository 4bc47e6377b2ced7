//! The plane: one worker's loop over the connections it owns, with no task
//! per connection (`[server] io = "epoll"`, `"uring"` or `"auto"`).
//!
//! A connection handed to the plane (`Start::spawn`, plain TCP, a kind
//! without work beside its socket) is a slot in the worker's slab: its
//! `Conn` state and behaviour, boxed once, and nothing else — no task, no
//! future, no tokio registration of its socket. Its socket is registered,
//! edge-triggered, in the plane's own epoll instance, and the slot's key
//! (index and generation) is the event's token, so readiness goes from
//! `epoll_wait` straight to the connection's code. Producers on any
//! thread wake a connection through its `Outbound`, whose waker puts the
//! key on the plane's wake list. The plane's epoll descriptor is itself
//! one source of the worker's tokio runtime (an `AsyncFd`): hyper's
//! upgrades, the fan-out and the idle wheel keep running beside it on the
//! same thread.
//!
//! What a connection does on each event is `plane/conn.rs`: the same
//! decode and behaviour hooks as the task loop (`conn.rs`), its writes
//! attempted at once and, when the socket is full, finished on its next
//! write readiness.
//!
//! The plane has two backends for learning what the kernel has for it:
//! the epoll instance above, or an io_uring (`plane/uring.rs`) whose
//! `recv`s land a client's bytes in a worker-wide buffer ring, so a
//! connection's read costs no system call of its own. Which one a worker
//! runs is decided once at start (`Plane::new`).

mod conn;
mod uring;

pub use uring::probe as probe_uring;
use uring::{Op, Uring};

use crate::behaviour::Behaviour;
use crate::conn::ConnEnv;
use conn::{Entry, PlaneTcp};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use std::any::Any;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::task::{Context, Wake, Waker};
use std::time::Duration;
use tokio::io::unix::AsyncFd;
use tokio::time::Instant;

/// Events taken from the kernel per `epoll_wait`.
const EVENTS_PER_WAIT: usize = 256;
/// Busy turns in a row before the plane lets the worker's other tasks
/// (upgrades, the fan-out, guest batches) run.
const TURNS_BEFORE_YIELD: u32 = 4;

/// A slot's key: its index in the slab and the slot's generation, so an
/// event or wake for a connection that has gone never reaches the one
/// that took its slot.
type Key = u64;

fn key(index: usize, gen: u32) -> Key {
    (u64::from(gen) << 32) | index as u64
}

fn index_of(key: Key) -> usize {
    (key & 0xffff_ffff) as usize
}

fn gen_of(key: Key) -> u32 {
    (key >> 32) as u32
}

/// What woke a connection.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Cause {
    /// The socket: readable (or at its end), hung up; or only writable
    /// (a waiting write goes on with any event).
    Io { read: bool, hup: bool },
    /// (io_uring) Its `recv` completed: `res` bytes in ring buffer `bid`,
    /// or 0 at the client's end, or an error (`-ENOBUFS`: no ring buffer
    /// was free); a direct read then finds out.
    Recv { res: i32, bid: Option<u16> },
    /// (io_uring) A poll it armed completed: write readiness, or a
    /// hang-up while reads were blocked (`res`: the events, or an error).
    Polled { op: Op, res: i32 },
    /// (io_uring) Its replies' `send` completed: `res` bytes sent, or an
    /// error (`-EAGAIN`: the socket was full).
    Sent { res: i32 },
    /// Its queue has something, or the idle wheel looked at it.
    Woken,
    /// It read a full buffer: more may wait (epoll is edge-triggered).
    Again,
    /// Its close linger ran out.
    LingerOver,
}

/// What the plane does with a connection after an event.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Next {
    Keep,
    /// Read it again in the next turn.
    Again,
    /// It ended: take it out.
    Remove,
}

/// One connection's state as the plane sees it, whatever its behaviour.
pub(crate) trait PlaneConn: Any {
    fn step(&mut self, plane: &Rc<Plane>, cause: Cause) -> Next;
    fn socket_fd(&self) -> std::os::fd::RawFd;
    /// (io_uring) The operations it has armed (`Op::bit`s), cancelled when
    /// it ends.
    fn armed(&self) -> u8;
    fn as_any(&mut self) -> &mut dyn Any;
}

/// A turn's kernel events and wakes (see `Plane::scratch`).
type Scratch = (Vec<(Key, Cause)>, Vec<Key>);

struct Slot {
    gen: u32,
    conn: Option<Box<dyn PlaneConn>>,
    /// The connection is being stepped (taken out of the slot).
    busy: bool,
}

/// The wake list, shared with producers on every thread.
#[derive(Default)]
struct Woken {
    keys: Mutex<Vec<Key>>,
    plane: atomic_waker::AtomicWaker,
}

/// A connection's waker: puts its key on the wake list.
struct ConnWaker {
    key: Key,
    woken: Arc<Woken>,
}

impl Wake for ConnWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.keys.lock().expect("wake list").push(self.key);
        self.woken.plane.wake();
    }
}

/// Where the plane learns what the kernel has for its connections.
enum Backend {
    Epoll {
        poll: RefCell<AsyncFd<Poll>>,
        registry: mio::Registry,
        events: RefCell<Events>,
    },
    Uring(Box<Uring>),
}

/// The backend a plane runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlaneIo {
    Epoll,
    Uring,
}

/// One worker's plane (see the module docs).
pub struct Plane {
    backend: Backend,
    slots: RefCell<Vec<Slot>>,
    free: RefCell<Vec<usize>>,
    woken: Arc<Woken>,
    /// Keys to read again in the next turn.
    again: RefCell<Vec<Key>>,
    /// A turn's events and wakes, kept between turns (no allocation per
    /// turn).
    scratch: RefCell<Scratch>,
    /// Connections whose close is out, in the order their linger ends.
    lingering: RefCell<VecDeque<(Instant, Key)>>,
    stats: Arc<PlaneStats>,
}

/// What a worker's plane holds, for `/metrics`: written by the plane's
/// worker only (a load and a store), read by whoever renders.
#[derive(Default, Debug)]
pub struct PlaneStats {
    connections: std::sync::atomic::AtomicUsize,
}

impl PlaneStats {
    /// Connections the plane serves now.
    pub fn connections(&self) -> usize {
        self.connections.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Plane {
    /// The plane of the calling worker on `io`; fails where that backend
    /// cannot be set up.
    pub fn new(stats: Arc<PlaneStats>, io: PlaneIo) -> std::io::Result<Rc<Plane>> {
        let backend = match io {
            PlaneIo::Epoll => {
                let poll = Poll::new()?;
                let registry = poll.registry().try_clone()?;
                // SAFETY: `Poll` owns its epoll descriptor for its whole
                // life and always answers `as_raw_fd` with it; the
                // `AsyncFd` owns the `Poll`.
                let poll = unsafe {
                    AsyncFd::register_with_interest(poll, tokio::io::Interest::READABLE)
                }?;
                Backend::Epoll {
                    poll: RefCell::new(poll),
                    registry,
                    events: RefCell::new(Events::with_capacity(EVENTS_PER_WAIT)),
                }
            }
            PlaneIo::Uring => Backend::Uring(Box::new(Uring::new()?)),
        };
        Ok(Rc::new(Plane {
            backend,
            slots: RefCell::new(Vec::new()),
            free: RefCell::new(Vec::new()),
            woken: Arc::new(Woken::default()),
            again: RefCell::new(Vec::new()),
            scratch: RefCell::new((Vec::new(), Vec::new())),
            lingering: RefCell::new(VecDeque::new()),
            stats,
        }))
    }

    /// The ring, on the io_uring backend.
    #[inline]
    pub(crate) fn uring(&self) -> Option<&Uring> {
        match &self.backend {
            Backend::Uring(u) => Some(u),
            Backend::Epoll { .. } => None,
        }
    }

    /// Counts a connection in (+1) or out (-1) for `/metrics`: only this
    /// worker writes its count, so a load and a store do.
    fn count(&self, delta: isize) {
        let stats = &self.stats.connections;
        let open = stats.load(std::sync::atomic::Ordering::Relaxed);
        stats.store(
            open.wrapping_add_signed(delta),
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// Takes over an upgraded TCP connection: its socket leaves tokio for
    /// the plane's epoll, and its state becomes a slot.
    pub(crate) fn adopt<B: Behaviour>(
        self: &Rc<Self>,
        tcp: tokio::net::TcpStream,
        prefix: bytes::Bytes,
        env: ConnEnv,
        behaviour: B,
    ) {
        let std = match tcp.into_std() {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(error = %e, "plane: socket could not leave tokio");
                behaviour.abandon(env.id);
                env.outbound.consumer_gone();
                return;
            }
        };
        let (index, gen) = self.reserve();
        let key = key(index, gen);
        let fd = std.as_raw_fd();
        let registered = match &self.backend {
            Backend::Epoll { registry, .. } => registry
                .register(
                    &mut SourceFd(&fd),
                    Token(key as usize),
                    Interest::READABLE | Interest::WRITABLE,
                )
                .map_err(|e| e.to_string()),
            // The connection arms its `recv` when it has read what is there.
            Backend::Uring(_) if index > uring::MAX_INDEX => Err("too many connections".into()),
            Backend::Uring(_) => Ok(()),
        };
        if let Err(e) = registered {
            tracing::warn!(error = %e, "plane: the connection could not be registered");
            self.release(index);
            behaviour.abandon(env.id);
            env.outbound.consumer_gone();
            return;
        }
        let waker = Waker::from(Arc::new(ConnWaker {
            key,
            woken: self.woken.clone(),
        }));
        let entry = Entry::new(PlaneTcp(Arc::new(std)), env, behaviour, key, waker, prefix);
        let mut boxed: Box<dyn PlaneConn> = Box::new(entry);
        self.count(1);
        // Its first step: opened, then the prefix and whatever the socket
        // already holds.
        let next = boxed.step(self, Cause::Again);
        self.slots.borrow_mut()[index].conn = Some(boxed);
        self.after(key, next);
        if let Some(u) = self.uring() {
            // Outside a turn: its `recv` goes to the kernel now.
            u.submit();
        }
        // This step ran outside the plane's task, which may be waiting
        // with nothing to wake it for what the step left: a read to go
        // on with (`again`), or a linger whose end needs its timer (a
        // close answered to the prefix). On epoll the registration's
        // first edge wakes it anyway; on io_uring nothing would.
        self.woken.plane.wake();
    }

    fn reserve(&self) -> (usize, u32) {
        let mut slots = self.slots.borrow_mut();
        if let Some(index) = self.free.borrow_mut().pop() {
            let slot = &mut slots[index];
            slot.gen = slot.gen.wrapping_add(1);
            slot.busy = false;
            return (index, slot.gen);
        }
        slots.push(Slot {
            gen: 1,
            conn: None,
            busy: false,
        });
        (slots.len() - 1, 1)
    }

    fn release(&self, index: usize) {
        let mut slots = self.slots.borrow_mut();
        slots[index].conn = None;
        slots[index].gen = slots[index].gen.wrapping_add(1);
        self.free.borrow_mut().push(index);
    }

    /// Steps the connection `key` names, if it is still there (true).
    fn step(self: &Rc<Self>, key: Key, cause: Cause) -> bool {
        let index = index_of(key);
        let mut conn = {
            let mut slots = self.slots.borrow_mut();
            let Some(slot) = slots.get_mut(index) else {
                return false;
            };
            if slot.gen != gen_of(key) || slot.busy {
                return false;
            }
            let Some(conn) = slot.conn.take() else {
                return false;
            };
            slot.busy = true;
            conn
        };
        let next = conn.step(self, cause);
        {
            let mut slots = self.slots.borrow_mut();
            slots[index].busy = false;
            slots[index].conn = Some(conn);
        }
        self.after(key, next);
        true
    }

    /// Gives a behaviour back to its connection (see `conn.rs`, `lend`).
    pub(crate) fn with_conn(self: &Rc<Self>, key: Key, f: impl FnOnce(&mut dyn Any)) {
        let index = index_of(key);
        let mut slots = self.slots.borrow_mut();
        if let Some(slot) = slots.get_mut(index) {
            if slot.gen == gen_of(key) {
                if let Some(conn) = slot.conn.as_mut() {
                    f(conn.as_any());
                }
            }
        }
    }

    fn after(self: &Rc<Self>, key: Key, next: Next) {
        match next {
            Next::Keep => {}
            Next::Again => self.again.borrow_mut().push(key),
            Next::Remove => {
                let index = index_of(key);
                let conn = self.slots.borrow_mut()[index].conn.take();
                if let Some(conn) = conn {
                    match &self.backend {
                        Backend::Epoll { registry, .. } => {
                            let fd = conn.socket_fd();
                            let _ = registry.deregister(&mut SourceFd(&fd));
                        }
                        // Its operations still waiting in the submission
                        // queue go to the kernel now, while their
                        // descriptor is this socket's (once closed, the
                        // number may name another connection's socket);
                        // the socket closes once the kernel lets go of
                        // them (the cancellations go out this turn).
                        Backend::Uring(u) => {
                            let armed = conn.armed();
                            if armed != 0 {
                                u.submit();
                                u.cancel(key, armed);
                            }
                        }
                    }
                    self.release(index);
                    self.count(-1);
                    // Dropped last: the socket closes once producers that
                    // are writing into it let go.
                    drop(conn);
                }
            }
        }
    }

    /// The close of `key` is out: it is dropped at the linger's end if the
    /// client has not hung up by then.
    pub(crate) fn linger(&self, key: Key) {
        let at = Instant::now() + crate::conn::CLOSE_LINGER;
        self.lingering.borrow_mut().push_back((at, key));
    }

    /// Queues a step for `key` in the next turn (a behaviour came back).
    pub(crate) fn wake(&self, key: Key) {
        self.woken.keys.lock().expect("wake list").push(key);
        self.woken.plane.wake();
    }

    /// One turn: the kernel's events, the wake list, the reads to try
    /// again, the lingers that ran out. True when anything was done.
    fn turn(self: &Rc<Self>, cx: &mut Context<'_>) -> bool {
        let mut worked = false;
        let (mut ready, mut woken) = std::mem::take(&mut *self.scratch.borrow_mut());
        match &self.backend {
            Backend::Epoll { poll, events, .. } => {
                let mut poll = poll.borrow_mut();
                let mut events = events.borrow_mut();
                match poll.get_mut().poll(&mut events, Some(Duration::ZERO)) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => tracing::warn!(error = %e, "plane: epoll_wait failed"),
                }
                let mut n = 0;
                for ev in events.iter() {
                    n += 1;
                    ready.push((
                        ev.token().0 as Key,
                        Cause::Io {
                            read: ev.is_readable() || ev.is_read_closed() || ev.is_error(),
                            hup: ev.is_read_closed() || ev.is_error(),
                        },
                    ));
                }
                if n < EVENTS_PER_WAIT {
                    // Drained: let tokio wait for the next edge.
                    if let std::task::Poll::Ready(Ok(mut guard)) = poll.poll_read_ready(cx) {
                        guard.clear_ready();
                    }
                }
            }
            Backend::Uring(u) => u.complete(cx, |c| {
                let cause = match c.op {
                    Op::Recv => Cause::Recv {
                        res: c.res,
                        bid: c.bid,
                    },
                    Op::Send => Cause::Sent { res: c.res },
                    op => Cause::Polled { op, res: c.res },
                };
                if c.op != Op::Cancel {
                    ready.push((c.key, cause));
                }
            }),
        }
        worked |= !ready.is_empty();
        for &(key, cause) in &ready {
            if !self.step(key, cause) {
                // Its connection is gone: the ring buffer goes back here.
                if let (Cause::Recv { bid: Some(bid), .. }, Some(u)) = (cause, self.uring()) {
                    u.give_back(bid);
                }
            }
        }
        std::mem::swap(&mut woken, &mut *self.woken.keys.lock().expect("wake list"));
        worked |= !woken.is_empty();
        for &key in &woken {
            self.step(key, Cause::Woken);
        }
        ready.clear();
        woken.clear();
        *self.scratch.borrow_mut() = (ready, woken);
        let again = std::mem::take(&mut *self.again.borrow_mut());
        worked |= !again.is_empty();
        for key in again {
            self.step(key, Cause::Again);
        }
        let now = Instant::now();
        loop {
            let due = {
                let mut lingering = self.lingering.borrow_mut();
                match lingering.front() {
                    Some(&(at, key)) if at <= now => {
                        lingering.pop_front();
                        Some(key)
                    }
                    _ => None,
                }
            };
            let Some(key) = due else { break };
            worked = true;
            self.step(key, Cause::LingerOver);
        }
        if let Some(u) = self.uring() {
            // Everything this turn armed or cancelled, in one enter.
            u.submit();
        }
        worked
    }

    /// The worker's task: turns while there is work, else waits for the
    /// kernel, a wake or the next linger's end.
    pub async fn run(self: Rc<Self>) {
        let mut busy = 0u32;
        let mut linger_timer: Option<std::pin::Pin<Box<tokio::time::Sleep>>> = None;
        loop {
            let worked = std::future::poll_fn(|cx| std::task::Poll::Ready(self.turn(cx))).await;
            if worked {
                busy += 1;
                if busy >= TURNS_BEFORE_YIELD {
                    busy = 0;
                    tokio::task::yield_now().await;
                }
                continue;
            }
            busy = 0;
            std::future::poll_fn(|cx| {
                self.woken.plane.register(cx.waker());
                if !self.woken.keys.lock().expect("wake list").is_empty()
                    || !self.again.borrow().is_empty()
                {
                    return std::task::Poll::Ready(());
                }
                let kernel = match &self.backend {
                    Backend::Epoll { poll, .. } => poll.borrow().poll_read_ready(cx).is_ready(),
                    Backend::Uring(u) => u.poll_ready(cx),
                };
                if kernel {
                    return std::task::Poll::Ready(());
                }
                if let Some(&(at, _)) = self.lingering.borrow().front() {
                    let timer =
                        linger_timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
                    if timer.deadline() != at {
                        timer.as_mut().reset(at);
                    }
                    if std::future::Future::poll(timer.as_mut(), cx).is_ready() {
                        return std::task::Poll::Ready(());
                    }
                }
                std::task::Poll::Pending
            })
            .await;
        }
    }
}

/// The bytes one connection's slot boxes on the plane for behaviour `B`
/// (what an open connection holds there besides its queue, registry entry
/// and socket), for the tests that keep it small.
pub fn slot_bytes<B: Behaviour>() -> usize {
    std::mem::size_of::<Entry<B>>()
}

/// Hands `behaviour` back to the plane's connection `key` (its lend ended).
pub(crate) fn give_back<B: Behaviour>(
    plane: &Rc<Plane>,
    key: Key,
    behaviour: B,
    result: Result<(), crate::behaviour::Stop>,
) {
    // The connection is there: it cannot end while its behaviour is lent.
    plane.with_conn(key, |conn| {
        if let Some(entry) = conn.downcast_mut::<Entry<B>>() {
            entry.returned(behaviour, result);
        }
    });
    plane.wake(key);
}
