//! The plane's io_uring backend (`[server] io = "uring"`, or `"auto"`
//! where the kernel allows it).
//!
//! What changes against epoll is how a connection learns that its client
//! sent something: instead of an edge from `epoll_wait` and a `read` of
//! its own, a connection with nothing left to read arms one `recv` on the
//! ring, and the kernel lands the bytes in a buffer of the worker's
//! provided-buffer ring when they arrive. The plane takes the completions
//! from the completion queue (shared memory: no system call) and the
//! connection copies the bytes into its own read buffer and hands the
//! ring buffer straight back. The `recv`s a turn arms go to the kernel
//! in one `io_uring_enter` at the turn's end, with the write-readiness
//! polls of connections whose socket was full and the cancellations of
//! connections that ended. A `recv` that filled its buffer means more may
//! wait: the connection then reads directly, as on epoll, until the
//! socket is dry, and only then arms the next `recv` (so a large message
//! costs what it costs on epoll, not one ring round per buffer).
//!
//! Idle connections hold no buffer: a ring buffer is taken only when bytes
//! arrive and is given back within the same turn. When the ring has none
//! left the kernel completes the `recv` with `ENOBUFS` and the connection
//! reads directly instead.
//!
//! A read's replies go out as a `send` on the ring, in the same enter as
//! the turn's `recv`s, when they are one run of at most 16 KiB (an echo's
//! batch, the usual case): the system call a `write` cost per batch is
//! gone. The bytes are copied into one of the worker's two send arenas,
//! so the connection's read buffer goes back to the pool at once (200
//! connections with a `send` each in one turn hold no read buffer for
//! it). The `send` carries `MSG_DONTWAIT`: the kernel copies the bytes
//! into the socket during that enter or completes it with `EAGAIN`, and
//! never parks it holding a pointer into an arena. An arena is reused once
//! the completions of all its `send`s were taken; the turns alternate
//! between the two, and when neither has room the connection writes
//! directly. A short or refused `send` leaves the rest (copied out of the
//! arena) to the direct writes and write-readiness poll of epoll's path;
//! the connection writes nothing else until its `send`'s completion is
//! taken (its next `recv` may be armed meanwhile). Other writes (several
//! runs, queued deliveries, pings, closes) stay direct `write`s, and
//! producers on other threads write straight into the socket too, under
//! the outbound queue's turn.
//!
//! Kernel features: io_uring with `IORING_OP_RECV`, `IORING_OP_SEND`,
//! `IORING_OP_POLL_ADD` and `IORING_OP_ASYNC_CANCEL` (5.6) and registered provided-buffer rings
//! (`IORING_REGISTER_PBUF_RING`, 5.19). `Uring::new` fails where any is
//! missing or where io_uring is forbidden (seccomp, `io_uring_disabled`),
//! and the gateway then serves on epoll (`"auto"`) or refuses to start
//! (`"uring"`).

use io_uring::{cqueue, opcode, squeue, types, IoUring};
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::cell::{Cell, RefCell};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU16, Ordering};
use std::task::Context;
use tokio::io::unix::AsyncFd;

/// Submission queue entries (the completion queue is four times as long).
const RING_ENTRIES: u32 = 1024;
/// Buffers in the provided-buffer ring (a power of two).
const BUFFERS: u16 = 256;
/// Bytes per ring buffer. A `recv` that fills one sends the connection to
/// direct reads, so this sizes the common small batch, not a message.
pub(crate) const BUFFER_BYTES: usize = 4096;
/// The provided-buffer group the `recv`s select from.
const GROUP: u16 = 0;
/// Bytes per send arena (two per worker).
const ARENA_BYTES: usize = 256 * 1024;
/// Replies longer than this are written directly: their write's system
/// call is a small part of their cost, and they would crowd the arena.
const SEND_MAX_BYTES: usize = 16 * 1024;

/// What a completion answers, in bits 29–31 of its user data (the key's
/// index stays below 2^29).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    Recv = 0,
    /// Write readiness after a full socket.
    Writable = 1,
    /// The client hanging up while reads are blocked.
    Hangup = 2,
    /// A read's replies sent.
    Send = 3,
    /// A cancellation's own completion (nothing to do).
    Cancel = 4,
}

const OP_SHIFT: u32 = 29;
const OP_MASK: u64 = 7 << OP_SHIFT;

impl Op {
    /// Its bit in a connection's set of armed operations.
    pub(crate) fn bit(self) -> u8 {
        1 << self as u8
    }

    fn tag(self, key: u64) -> u64 {
        key | (self as u64) << OP_SHIFT
    }

    /// The operation and key a completion's user data names.
    pub(crate) fn untag(data: u64) -> (Op, u64) {
        let op = match (data & OP_MASK) >> OP_SHIFT {
            0 => Op::Recv,
            1 => Op::Writable,
            2 => Op::Hangup,
            3 => Op::Send,
            _ => Op::Cancel,
        };
        (op, data & !OP_MASK)
    }
}

/// Highest slab index a key may carry on this backend.
pub(crate) const MAX_INDEX: usize = (1 << OP_SHIFT) - 1;

/// The provided-buffer ring: the entries the kernel reads (page-aligned,
/// shared with it) and the buffers they point to.
struct BufRing {
    entries: *mut types::BufRingEntry,
    layout: Layout,
    buffers: Box<[u8]>,
    /// Our copy of the ring's tail (the kernel reads the shared one).
    tail: Cell<u16>,
}

impl BufRing {
    fn new() -> std::io::Result<BufRing> {
        let layout = Layout::from_size_align(
            usize::from(BUFFERS) * std::mem::size_of::<types::BufRingEntry>(),
            4096,
        )
        .map_err(std::io::Error::other)?;
        // SAFETY: a non-zero size, a valid alignment.
        let entries = unsafe { alloc_zeroed(layout) }.cast::<types::BufRingEntry>();
        if entries.is_null() {
            return Err(std::io::ErrorKind::OutOfMemory.into());
        }
        let ring = BufRing {
            entries,
            layout,
            buffers: vec![0u8; usize::from(BUFFERS) * BUFFER_BYTES].into_boxed_slice(),
            tail: Cell::new(0),
        };
        for bid in 0..BUFFERS {
            ring.put(bid);
        }
        Ok(ring)
    }

    /// Offers buffer `bid` to the kernel again.
    fn put(&self, bid: u16) {
        let tail = self.tail.get();
        let index = usize::from(tail & (BUFFERS - 1));
        // SAFETY: `index` is inside the ring; the kernel reads only entries
        // between its head and the published tail, and this one is past it.
        let entry = unsafe { &mut *self.entries.add(index) };
        entry.set_addr(self.buffers[usize::from(bid) * BUFFER_BYTES..].as_ptr() as u64);
        entry.set_len(BUFFER_BYTES as u32);
        entry.set_bid(bid);
        let tail = tail.wrapping_add(1);
        self.tail.set(tail);
        // SAFETY: the ring's tail field lives in its first entry, aligned
        // for an atomic u16; the kernel reads it with acquire ordering.
        unsafe {
            let shared = types::BufRingEntry::tail(self.entries).cast_mut();
            (*shared.cast::<AtomicU16>()).store(tail, Ordering::Release);
        }
    }

    fn bytes(&self, bid: u16, len: usize) -> &[u8] {
        let at = usize::from(bid) * BUFFER_BYTES;
        &self.buffers[at..at + len.min(BUFFER_BYTES)]
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout. Dropped only by
        // `probe`, whose ring never had an operation (`Uring` keeps its
        // buffers for good).
        unsafe { dealloc(self.entries.cast(), self.layout) }
    }
}

/// Bytes of `send`s between their push and their completion's taking.
struct Arena {
    /// `ARENA_BYTES` bytes, never reallocated: submitted `send`s point
    /// into them.
    base: *mut u8,
    used: Cell<usize>,
    /// Its `send`s whose completion is not taken yet.
    sends: Cell<u32>,
}

impl Arena {
    fn new() -> Arena {
        let bytes = vec![0u8; ARENA_BYTES].into_boxed_slice();
        Arena {
            base: Box::into_raw(bytes).cast::<u8>(),
            used: Cell::new(0),
            sends: Cell::new(0),
        }
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: made by `new` from a boxed slice of this length; the
        // ring (a field before the arenas) is gone, and every `send` was
        // done with its bytes within its enter.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(self.base, ARENA_BYTES)) });
    }
}

/// Where a `send`'s bytes are: the arena (top bit) and the offset.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sent {
    at: u32,
    len: u32,
}

/// One worker's ring (see the module docs).
pub(crate) struct Uring {
    ring: RefCell<AsyncFd<IoUring>>,
    /// Never freed: the kernel tears a ring down in the background after
    /// its descriptor closes, and a `recv` it completes meanwhile may
    /// still write into a buffer. A worker's ring lives as long as the
    /// worker, so this is 1 MiB per worker once, at exit.
    bufs: std::mem::ManuallyDrop<BufRing>,
    /// Entries pushed since the last submission.
    queued: Cell<u32>,
    /// The send arenas, and the one new `send`s go to.
    arenas: [Arena; 2],
    current: Cell<usize>,
}

/// A completion, as the plane hands it on.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Completion {
    pub op: Op,
    pub key: u64,
    pub res: i32,
    /// The ring buffer a `recv` filled.
    pub bid: Option<u16>,
}

impl Uring {
    /// A ring with its provided buffers, registered with the worker's
    /// tokio runtime; fails where the kernel lacks or forbids any part.
    pub(crate) fn new() -> std::io::Result<Uring> {
        let (ring, bufs) = setup(RING_ENTRIES)?;
        // SAFETY: the `IoUring` owns its descriptor for its whole life and
        // always answers `as_raw_fd` with it; the `AsyncFd` owns the ring.
        let ring = unsafe { AsyncFd::register_with_interest(ring, tokio::io::Interest::READABLE) }?;
        Ok(Uring {
            ring: RefCell::new(ring),
            bufs: std::mem::ManuallyDrop::new(bufs),
            queued: Cell::new(0),
            arenas: [Arena::new(), Arena::new()],
            current: Cell::new(0),
        })
    }

    fn push(&self, entry: squeue::Entry) {
        let mut ring = self.ring.borrow_mut();
        let ring = ring.get_mut();
        loop {
            // SAFETY: a `recv` selects its buffer from the ring, which is
            // never freed; a `send`'s bytes stay untouched until its
            // completion is taken (see `send`); and each entry
            // names a socket that stays open until the entry is submitted
            // (`Plane::after` submits before a connection's socket closes;
            // the kernel then holds the socket until the entry ends).
            if unsafe { ring.submission().push(&entry) }.is_ok() {
                self.queued.set(self.queued.get() + 1);
                return;
            }
            // Full: hand the queue to the kernel and go on.
            if let Err(e) = ring.submit() {
                tracing::warn!(error = %e, "plane: io_uring submission failed");
                return;
            }
            self.queued.set(0);
        }
    }

    /// Arms a `recv` of at most `room` bytes into a ring buffer for `key`.
    pub(crate) fn recv(&self, key: u64, fd: RawFd, room: usize) {
        let len = room.clamp(1, BUFFER_BYTES) as u32;
        let entry = opcode::Recv::new(types::Fd(fd), std::ptr::null_mut(), len)
            .buf_group(GROUP)
            .build()
            .flags(squeue::Flags::BUFFER_SELECT)
            .user_data(Op::Recv.tag(key));
        self.push(entry);
    }

    /// Sends a copy of `bytes` on `key`'s socket at the next submission,
    /// or None (nothing done) when they are too long or no arena has room.
    /// The caller takes the completion with [`Uring::taken`].
    pub(crate) fn send(&self, key: u64, fd: RawFd, bytes: &[u8]) -> Option<Sent> {
        if bytes.len() > SEND_MAX_BYTES {
            return None;
        }
        let index = self.current.get();
        let arena = &self.arenas[index];
        let at = arena.used.get();
        if at + bytes.len() > ARENA_BYTES {
            return None;
        }
        // SAFETY: inside the arena; single-threaded, and the kernel reads
        // only ranges of `send`s below `used`, this is above it.
        let dest = unsafe { std::slice::from_raw_parts_mut(arena.base.add(at), bytes.len()) };
        dest.copy_from_slice(bytes);
        arena.used.set(at + bytes.len());
        arena.sends.set(arena.sends.get() + 1);
        // MSG_DONTWAIT: completed during the enter, never parked on the
        // socket (see the module docs).
        let entry = opcode::Send::new(types::Fd(fd), dest.as_ptr(), bytes.len() as u32)
            .flags(libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
            .build()
            .user_data(Op::Send.tag(key));
        self.push(entry);
        Some(Sent {
            at: (index as u32) << 31 | at as u32,
            len: bytes.len() as u32,
        })
    }

    /// The bytes of `sent` from `from` on (a short `send`'s rest), valid
    /// until [`Uring::taken`].
    pub(crate) fn unsent(&self, sent: Sent, from: usize) -> &[u8] {
        let (arena, at) = self.arena_of(sent);
        let from = from.min(sent.len as usize);
        // SAFETY: inside the arena (`send` put them there); the kernel is
        // done with them (their completion came), and nothing writes below
        // `used` until they are taken.
        unsafe { std::slice::from_raw_parts(arena.base.add(at + from), sent.len as usize - from) }
    }

    /// The arena `sent`'s bytes are in, and their offset there.
    fn arena_of(&self, sent: Sent) -> (&Arena, usize) {
        let index = (sent.at >> 31) as usize;
        (&self.arenas[index], (sent.at & !(1 << 31)) as usize)
    }

    /// `sent`'s completion is taken: its arena is reused once all of its
    /// `send`s are.
    pub(crate) fn taken(&self, sent: Sent) {
        let (arena, _) = self.arena_of(sent);
        let left = arena.sends.get() - 1;
        arena.sends.set(left);
        if left == 0 {
            arena.used.set(0);
        }
    }

    /// Arms a one-shot poll for `op` (write readiness, or a hang-up).
    pub(crate) fn poll(&self, key: u64, fd: RawFd, op: Op) {
        let mask = match op {
            Op::Writable => libc::POLLOUT,
            _ => libc::POLLRDHUP,
        };
        let entry = opcode::PollAdd::new(types::Fd(fd), mask as u32)
            .build()
            .user_data(op.tag(key));
        self.push(entry);
    }

    /// Cancels `key`'s armed operations (the bits of `ops`).
    pub(crate) fn cancel(&self, key: u64, ops: u8) {
        for op in [Op::Recv, Op::Writable, Op::Hangup, Op::Send] {
            if ops & op.bit() != 0 {
                let entry = opcode::AsyncCancel::new(op.tag(key))
                    .build()
                    .user_data(Op::Cancel.tag(key));
                self.push(entry);
            }
        }
    }

    /// Hands what was pushed to the kernel (one `io_uring_enter`), and
    /// has it move completions that found the completion queue full into
    /// it (the kernel keeps them aside until an enter asks: without one,
    /// they would wait for good, since nothing else wakes the plane).
    pub(crate) fn submit(&self) {
        let mut ring = self.ring.borrow_mut();
        let ring = ring.get_mut();
        if self.queued.get() == 0 && !ring.submission().cq_overflow() {
            return;
        }
        self.queued.set(0);
        if let Err(e) = ring.submit() {
            tracing::warn!(error = %e, "plane: io_uring submission failed");
        }
        // The next turn's `send`s go to the other arena once its own
        // were all taken (this turn's complete meanwhile).
        let other = 1 - self.current.get();
        if self.arenas[other].sends.get() == 0 {
            self.current.set(other);
        }
    }

    /// Clears the ring's readiness in tokio, then hands every completion
    /// there is to `each`: clearing first, so one posted meanwhile wakes
    /// the plane again.
    pub(crate) fn complete(&self, cx: &mut Context<'_>, mut each: impl FnMut(Completion)) {
        let mut ring = self.ring.borrow_mut();
        if let std::task::Poll::Ready(Ok(mut guard)) = ring.poll_read_ready(cx) {
            guard.clear_ready();
        }
        for cqe in ring.get_mut().completion() {
            let (op, key) = Op::untag(cqe.user_data());
            each(Completion {
                op,
                key,
                res: cqe.result(),
                bid: cqueue::buffer_select(cqe.flags()),
            });
        }
    }

    /// True when completions wait, or the ring became readable; else the
    /// plane's task is woken when it does.
    pub(crate) fn poll_ready(&self, cx: &mut Context<'_>) -> bool {
        let mut ring = self.ring.borrow_mut();
        if !ring.get_mut().completion().is_empty() {
            return true;
        }
        ring.poll_read_ready(cx).is_ready()
    }

    /// The bytes a `recv` put in ring buffer `bid`.
    pub(crate) fn bytes(&self, bid: u16, len: usize) -> &[u8] {
        self.bufs.bytes(bid, len)
    }

    /// Gives ring buffer `bid` back to the kernel.
    pub(crate) fn give_back(&self, bid: u16) {
        self.bufs.put(bid);
    }
}

/// A ring of `entries` with the operations the plane uses checked and
/// its provided buffers registered. The ring drops before the buffers
/// (the tuple's order).
fn setup(entries: u32) -> std::io::Result<(IoUring, BufRing)> {
    let ring = IoUring::builder()
        .setup_cqsize(entries * 4)
        .setup_submit_all()
        // Completions run when the worker next enters the kernel (it
        // does all the time) or wakes from its wait, never by an
        // interrupt of a running worker.
        .setup_coop_taskrun()
        .setup_single_issuer()
        .build(entries)?;
    let mut probe = io_uring::Probe::new();
    ring.submitter().register_probe(&mut probe)?;
    for code in [
        opcode::Recv::CODE,
        opcode::Send::CODE,
        opcode::PollAdd::CODE,
        opcode::AsyncCancel::CODE,
    ] {
        if !probe.is_supported(code) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                format!("io_uring operation {code} unsupported"),
            ));
        }
    }
    let bufs = BufRing::new()?;
    // SAFETY: the entries stay allocated until the buffers drop, after
    // the ring (see above).
    unsafe {
        ring.submitter()
            .register_buf_ring_with_flags(bufs.entries as u64, BUFFERS, GROUP, 0)?;
    }
    Ok((ring, bufs))
}

/// Whether this kernel and process can run the io_uring plane: a small
/// ring set up as a worker's is, then dropped (no runtime needed).
pub fn probe() -> std::io::Result<()> {
    setup(8).map(drop)
}
