//! One connection on the plane: the task loop's rules (`reactor/conn.rs`)
//! as steps the plane calls on each event, over the same `Conn` state,
//! decoder and behaviour hooks. A write is attempted at once; when the
//! socket is full, what is left waits in the connection (`Writing`) for
//! its next write readiness, and nothing else of the connection happens
//! meanwhile (as the task loop awaits its write). Reads stop while the
//! behaviour says so: the behaviour is then lent to a small task that
//! awaits `Behaviour::unblocked` and hands it back (`lend`), while the
//! connection keeps writing what its producers queue.

use super::uring::{Op, Sent, Uring, BUFFER_BYTES};
use super::{give_back, Cause, Key, Next, Plane, PlaneConn};
use crate::behaviour::{Behaviour, Stop};
use crate::conn::{
    take_queued, Conn, ConnEnv, Flow, CLOSE_DRAIN_MAX_BYTES, SHUTDOWN_CODE, SHUTDOWN_REASON,
};
use crate::idle::IdleWheel;
use crate::outbound::AnySocket;
use crate::transport::Transport;
use bytes::Bytes;
use socket2::SockRef;
use std::any::Any;
use std::future::Future;
use std::io::{ErrorKind, IoSlice, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, Waker};
use tokio::io::AsyncWrite;
use weir_ws::close;
use weir_ws::encode;
use weir_ws::frame::OpCode;

/// Reads one step makes before it lets other connections have a turn.
const READS_PER_STEP: usize = 4;
/// Reads a draining connection makes before its 1012 (as the task loop).
const DRAIN_READS: u8 = 16;
/// Parts handed to one `sendmsg`.
const MAX_PARTS: usize = 64;

/// A plane connection's socket: std's, non-blocking, in the plane's epoll.
pub(crate) struct PlaneTcp(pub Arc<std::net::TcpStream>);

impl Transport for PlaneTcp {
    type Writer<'a> = PlaneWriter<'a>;

    /// Never awaited: the plane's epoll says when.
    fn readable(&mut self) -> impl Future<Output = std::io::Result<()>> {
        std::future::pending()
    }

    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        (&*self.0).read(buf)
    }

    fn writer(&mut self) -> PlaneWriter<'_> {
        PlaneWriter(&self.0)
    }

    fn shutdown_write(&mut self) {
        let _ = self.0.shutdown(std::net::Shutdown::Write);
    }

    fn data_waiting(&mut self) -> impl Future<Output = bool> {
        std::future::pending()
    }

    fn hung_up(&self) -> bool {
        crate::socket::peer_hung_up(&*self.0)
    }

    fn direct_socket(&self) -> Option<Weak<AnySocket>> {
        Some(Arc::downgrade(&self.0) as Weak<AnySocket>)
    }
}

/// Writes that report a full socket as `Pending` without a waker: the
/// plane's edge-triggered epoll wakes the connection when it drains.
pub(crate) struct PlaneWriter<'a>(&'a std::net::TcpStream);

fn pending_if_full<T>(r: std::io::Result<T>) -> Poll<std::io::Result<T>> {
    match r {
        Err(e) if e.kind() == ErrorKind::WouldBlock => Poll::Pending,
        other => Poll::Ready(other),
    }
}

impl AsyncWrite for PlaneWriter<'_> {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        pending_if_full((&*SockRef::from(self.0)).write(buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        pending_if_full((&*SockRef::from(self.0)).write_vectored(bufs))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    Open,
    /// The behaviour is lent to a task waiting for reads to be allowed.
    Lent,
    /// The close is out: reading and discarding until the client's EOF.
    Lingering,
}

/// What to do once a waiting write is out.
enum Done {
    /// A read's batch: keep the leftover from `pos`, then act on `flow`.
    Batch { pos: usize, flow: Flow },
    /// Queued messages: `taken` of them, `total` bytes; then `flow`.
    Deliver {
        taken: usize,
        total: usize,
        flow: Flow,
    },
    /// The idle ping.
    Ping,
    /// (io_uring) The rest of a read's replies a `send` left.
    Rest,
    /// The close frame: FIN, then the linger.
    CloseFrame,
}

/// A write that waits for the socket, and what follows it.
struct Writing {
    /// Written first, in order: `parts[0]` from byte `sent`.
    parts: Vec<Bytes>,
    sent: usize,
    /// A direct write's remainder at the front of `parts`: its bytes.
    remainder: usize,
    /// Then the batch's replies in `out` (the receive buffer is held).
    batch: bool,
    done: Done,
    /// The write turn is held (direct writes are on).
    turn: bool,
    /// The idle wheel's tick when the write first waited.
    since: Option<u32>,
}

/// What only some connections need, some of the time: boxed, so an idle
/// connection does not carry it.
#[derive(Default)]
struct Rare {
    prefix: Option<Bytes>,
    writing: Option<Writing>,
    /// Dropped to call a lent behaviour back.
    cancel: Option<tokio::sync::oneshot::Sender<()>>,
    /// What to do once the lent behaviour is back.
    after_lend: Option<Flow>,
    discarded: usize,
}

pub(crate) struct Entry<B> {
    c: Conn<PlaneTcp>,
    behaviour: Option<B>,
    key: Key,
    waker: Waker,
    rare: Option<Box<Rare>>,
    state: State,
    /// Readable by the last edge and not read dry since.
    readable: bool,
    /// The client's side is closed (or the socket failed).
    hup: bool,
    /// Reads left before a draining connection's 1001 (0: not draining).
    draining: u8,
    /// The waker is registered in the queue and no wake has taken it
    /// since (a wake always ends in a `Woken` step): a look at the queue
    /// needs no new registration.
    armed: bool,
    /// (io_uring) The operations armed on the ring (`Op::bit`s).
    ops: u8,
    /// (io_uring) A `recv`'s bytes were copied into the read buffer and
    /// wait to be decoded.
    fresh: bool,
    /// (io_uring) The armed `recv`'s length: a completion that fills it
    /// may have left more in the socket.
    recv_len: u16,
    /// (io_uring) A read's replies are out as a `send` (where its bytes
    /// are), and whether the write turn is held: the connection writes
    /// nothing else until the completion.
    sending: Option<(Sent, bool)>,
}

impl<B: Behaviour> Entry<B> {
    /// An opened connection (counted, registered, its behaviour opened).
    pub(crate) fn new(
        stream: PlaneTcp,
        env: ConnEnv,
        mut behaviour: B,
        key: Key,
        waker: Waker,
        prefix: Bytes,
    ) -> Entry<B> {
        let mut c = Conn::new::<B>(stream, env);
        c.open(&mut behaviour);
        let rare = (!prefix.is_empty()).then(|| {
            Box::new(Rare {
                prefix: Some(prefix),
                ..Rare::default()
            })
        });
        Entry {
            c,
            behaviour: Some(behaviour),
            key,
            waker,
            rare,
            state: State::Open,
            readable: true,
            hup: false,
            draining: 0,
            armed: false,
            ops: 0,
            fresh: false,
            recv_len: 0,
            sending: None,
        }
    }

    fn rare(&mut self) -> &mut Rare {
        self.rare.get_or_insert_with(Box::default)
    }

    /// Frees what only a moment needed.
    fn tidy(&mut self) {
        if let Some(r) = &self.rare {
            if r.prefix.is_none()
                && r.writing.is_none()
                && r.cancel.is_none()
                && r.after_lend.is_none()
                && self.state != State::Lingering
            {
                self.rare = None;
            }
        }
    }

    /// The behaviour came back from its lend.
    pub(crate) fn returned(&mut self, behaviour: B, result: Result<(), Stop>) {
        self.behaviour = Some(behaviour);
        self.state = State::Open;
        let rare = self.rare();
        rare.cancel = None;
        if let Err(stop) = result {
            if rare.after_lend.is_none() {
                rare.after_lend = Some(stop.into());
            }
        }
    }

    /// Ends the connection (its close, if any, already out).
    fn end(&mut self) -> Next {
        if let Some(w) = self.rare.as_mut().and_then(|r| r.writing.take()) {
            if w.turn {
                self.c.env.outbound.release_turn();
            }
        }
        self.c.env.outbound.end_direct();
        let mut behaviour = self.behaviour.take().expect("not lent");
        self.c.finish(&mut behaviour);
        Next::Remove
    }

    /// Acts on a flow: None to go on stepping, or what the plane does.
    fn act(&mut self, flow: Flow) -> Option<Next> {
        match flow {
            Flow::Continue => None,
            Flow::Done if self.state == State::Lent => self.call_back(Flow::Done),
            Flow::Done => Some(self.end()),
            Flow::Close(..) if self.state == State::Lent => self.call_back(flow),
            Flow::Close(code, reason) => {
                let behaviour = self.behaviour.as_ref().expect("not lent");
                if behaviour.mid_frame() {
                    return Some(self.end());
                }
                self.c.close_code = code;
                // No direct writes after the close frame.
                self.c.env.outbound.end_direct();
                let frame = Bytes::from(encode::close_frame(code, &reason));
                self.write(vec![frame], false, Done::CloseFrame, false);
                None
            }
            Flow::Drain if self.state == State::Lent => {
                // Nothing was read while blocked: nothing to answer.
                self.call_back(Flow::Close(SHUTDOWN_CODE, SHUTDOWN_REASON.into()))
            }
            Flow::Drain => {
                let behaviour = self.behaviour.as_ref().expect("not lent");
                if behaviour.answers_before_drain() {
                    self.draining = DRAIN_READS;
                    self.readable = true;
                    None
                } else {
                    self.act(Flow::Close(SHUTDOWN_CODE, SHUTDOWN_REASON.into()))
                }
            }
        }
    }

    /// Calls the lent behaviour back; `flow` is acted on when it returns.
    fn call_back(&mut self, flow: Flow) -> Option<Next> {
        let rare = self.rare();
        if rare.after_lend.is_none() {
            rare.after_lend = Some(flow);
        }
        rare.cancel = None;
        Some(Next::Keep)
    }

    /// Starts a write: `parts` (after a direct write's remainder), then the
    /// batch's replies if `batch`; `done` once all is out.
    fn write(&mut self, mut parts: Vec<Bytes>, batch: bool, done: Done, held: bool) {
        let outbound = &self.c.env.outbound;
        let turn = held || outbound.direct();
        if turn && !held {
            outbound.hold_turn();
        }
        let mut remainder = 0;
        if matches!(done, Done::Deliver { .. }) {
            outbound.clear_remainder();
        } else if let Some(rest) = outbound.take_remainder() {
            remainder = rest.len();
            parts.insert(0, rest);
        }
        self.rare().writing = Some(Writing {
            parts,
            sent: 0,
            remainder,
            batch,
            done,
            turn,
            since: None,
        });
    }

    /// Pushes the waiting write on: Ok(true) once all is out.
    fn push_write(&mut self) -> std::io::Result<bool> {
        let Some(w) = self.rare.as_mut().and_then(|r| r.writing.as_mut()) else {
            return Ok(true);
        };
        let socket = SockRef::from(&*self.c.stream.0);
        while !w.parts.is_empty() {
            let mut slices = [IoSlice::new(&[]); MAX_PARTS];
            let n = w.parts.len().min(MAX_PARTS);
            slices[0] = IoSlice::new(&w.parts[0][w.sent..]);
            for (i, part) in w.parts[1..n].iter().enumerate() {
                slices[i + 1] = IoSlice::new(part);
            }
            let mut wrote = match (&*socket).write_vectored(&slices[..n]) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(wrote) => wrote,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            while wrote > 0 {
                let left = w.parts[0].len() - w.sent;
                if wrote < left {
                    w.sent += wrote;
                    break;
                }
                wrote -= left;
                w.parts.remove(0);
                w.sent = 0;
            }
        }
        if w.batch {
            let buf = self.c.buf.as_deref().expect("a batch holds its buffer");
            let mut writer = self.c.stream.writer();
            let mut cx = Context::from_waker(Waker::noop());
            match self.c.out.poll_flush(&mut writer, buf, &mut cx) {
                Poll::Ready(Ok(())) => w.batch = false,
                Poll::Ready(Err(e)) => return Err(e),
                Poll::Pending => return Ok(false),
            }
        }
        Ok(true)
    }

    /// The waiting write is out: its accounting, and what follows.
    fn written(&mut self, plane: &Rc<Plane>) -> Option<Next> {
        let w = self.rare().writing.take().expect("a write");
        let outbound = &self.c.env.outbound;
        if w.remainder > 0 {
            outbound.written(w.remainder);
        }
        if w.turn {
            outbound.release_turn();
        }
        match w.done {
            Done::Batch { pos, flow } => {
                self.c.keep_leftover(pos);
                self.act(flow)
            }
            Done::Deliver { taken, total, flow } => {
                outbound.written(total);
                outbound.delivered(taken);
                self.act(flow)
            }
            Done::Ping | Done::Rest => None,
            Done::CloseFrame => {
                self.c.stream.shutdown_write();
                if self.c.decoder.peer_closed() || self.hup {
                    // The client's close came first: it sends nothing more.
                    return Some(self.end());
                }
                self.state = State::Lingering;
                self.readable = true;
                plane.linger(self.key);
                None
            }
        }
    }

    /// Writes what producers queued (as the task loop's `deliver`).
    /// The frames go out in one `sendmsg` when the socket takes them
    /// all (nothing allocated); else the rest waits as a `Writing`.
    fn deliver(&mut self) -> Option<Next> {
        let outbound = self.c.env.outbound.clone();
        // Taken under the write turn (see `write`), so a direct write
        // cannot overtake them.
        let turn = outbound.direct();
        if turn {
            outbound.hold_turn();
        }
        let (frames, taken, flow) = take_queued(&outbound);
        let total: usize = frames.iter().map(Bytes::len).sum();
        if frames.len() <= MAX_PARTS {
            // A remainder among them is written in its place.
            outbound.clear_remainder();
            let mut slices = [IoSlice::new(&[]); MAX_PARTS];
            for (slot, f) in slices.iter_mut().zip(&frames) {
                *slot = IoSlice::new(f);
            }
            let wrote = match total {
                0 => Ok(0),
                _ => (&*SockRef::from(&*self.c.stream.0)).write_vectored(&slices[..frames.len()]),
            };
            match wrote {
                Ok(n) if n == total => {
                    if turn {
                        outbound.release_turn();
                    }
                    outbound.written(total);
                    outbound.delivered(taken);
                    return self.act(flow);
                }
                Ok(n) => {
                    // Cut short: the rest waits for the socket.
                    let (mut rest, mut skip) = (Vec::with_capacity(frames.len()), n);
                    for f in frames {
                        if skip >= f.len() {
                            skip -= f.len();
                            continue;
                        }
                        rest.push(f.slice(skip..));
                        skip = 0;
                    }
                    // `written(total)` counts every byte once it is all out.
                    self.write(rest, false, Done::Deliver { taken, total, flow }, turn);
                    return None;
                }
                Err(e)
                    if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {}
                Err(_) => {
                    if turn {
                        outbound.release_turn();
                    }
                    outbound.written(total);
                    outbound.delivered(taken);
                    return match self.state {
                        State::Lent => self.call_back(Flow::Done),
                        _ => Some(self.end()),
                    };
                }
            }
        }
        self.write(frames, false, Done::Deliver { taken, total, flow }, turn);
        None
    }

    /// The idle wheel woke it: a ping after one silent period, a close
    /// after the second (as the task loop's `idle_check`).
    fn idle_check(&mut self) -> Flow {
        let idle = &self.c.env.idle;
        let silent = idle.now().wrapping_sub(self.c.env.outbound.last_read());
        if silent < IdleWheel::ticks(self.c.env.limits.idle_timeout) {
            return Flow::Continue;
        }
        if self.c.ping_sent {
            return Flow::Close(close::GOING_AWAY, "idle timeout".into());
        }
        self.c.ping_sent = true;
        let ping = Bytes::from(encode::frame(OpCode::Ping, b""));
        self.write(vec![ping], false, Done::Ping, false);
        Flow::Continue
    }

    /// The socket is read dry: an empty read buffer goes back to the pool,
    /// and on io_uring a `recv` is armed for what comes next.
    fn dry(&mut self, plane: &Rc<Plane>) {
        let room = match &self.c.buf {
            Some(_) if self.c.end == self.c.start => {
                let buf = self.c.buf.take().expect("matched");
                self.c.env.pool.give(buf);
                BUFFER_BYTES
            }
            Some(buf) => buf.len() - self.c.end,
            None => BUFFER_BYTES,
        };
        if let Some(u) = plane.uring() {
            self.arm_recv(u, room);
        }
    }

    /// (io_uring) Arms `op`'s poll unless it is armed.
    fn arm(&mut self, u: &Uring, op: Op) {
        if self.ops & op.bit() == 0 {
            self.ops |= op.bit();
            u.poll(self.key, self.c.stream.0.as_raw_fd(), op);
        }
    }

    /// (io_uring) Arms a `recv` of at most `room` bytes unless one is
    /// armed: the socket was read dry.
    fn arm_recv(&mut self, u: &Uring, room: usize) {
        if self.ops & Op::Recv.bit() == 0 {
            let len = room.clamp(1, BUFFER_BYTES);
            self.ops |= Op::Recv.bit();
            self.recv_len = len as u16;
            u.recv(self.key, self.c.stream.0.as_raw_fd(), len);
        }
    }

    /// (io_uring) A `recv`'s bytes: into the read buffer, to be decoded
    /// by the next `read` (discarded after the close). A `recv` that
    /// filled its length may have left more: the socket is read directly
    /// until it is dry.
    fn received(&mut self, bytes: &[u8]) {
        self.readable = bytes.len() >= usize::from(self.recv_len);
        if self.state == State::Lingering {
            self.rare().discarded += bytes.len();
            return;
        }
        if let Some(prefix) = self.rare.as_mut().and_then(|r| r.prefix.as_mut()) {
            // Bytes before these still wait: these go after them.
            *prefix = [&prefix[..], bytes].concat().into();
        } else {
            let large = self.c.wants_large_buffer();
            let pool = self.c.env.pool.clone();
            let buf = self.c.buf.get_or_insert_with(|| pool.take(large));
            let take = bytes.len().min(buf.len() - self.c.end);
            buf[self.c.end..self.c.end + take].copy_from_slice(&bytes[..take]);
            self.c.end += take;
            if take < bytes.len() {
                // No room left (the buffer held a leftover): the rest waits
                // as the connection's prefix, read before the socket.
                self.rare().prefix = Some(Bytes::copy_from_slice(&bytes[take..]));
            }
        }
        self.fresh = true;
        self.c.env.outbound.touch(self.c.env.idle.now());
        self.c.ping_sent = false;
    }

    /// (io_uring) The replies' `send` completed with `res`: what it left
    /// (the socket was full) waits for the socket as a direct write's rest.
    fn sent(&mut self, u: &Uring, res: i32) -> Option<Next> {
        self.ops &= !Op::Send.bit();
        let (sent, turn) = self.sending.take().expect("a send");
        let failed = res < 0 && res != -libc::EAGAIN;
        let rest = (!failed)
            .then(|| u.unsent(sent, res.max(0) as usize))
            .filter(|rest| !rest.is_empty())
            .map(Bytes::copy_from_slice);
        u.taken(sent);
        if let Some(rest) = rest {
            self.write(vec![rest], false, Done::Rest, turn);
            return None;
        }
        if turn {
            self.c.env.outbound.release_turn();
        }
        failed.then(|| self.end())
    }

    /// Lends the behaviour to a task that waits until reads may go on.
    fn lend(&mut self, plane: &Rc<Plane>) {
        let mut behaviour = self.behaviour.take().expect("not lent");
        let outbound = self.c.env.outbound.clone();
        let (cancel, called_back) = tokio::sync::oneshot::channel::<()>();
        self.rare().cancel = Some(cancel);
        self.state = State::Lent;
        if let Some(u) = plane.uring() {
            // A client that hangs up meanwhile calls the behaviour back.
            self.arm(u, Op::Hangup);
        }
        let (plane, key) = (plane.clone(), self.key);
        tokio::task::spawn_local(async move {
            let result = tokio::select! {
                r = behaviour.unblocked(&outbound) => r,
                _ = called_back => Err(Stop::Gone),
            };
            give_back(&plane, key, behaviour, result);
        });
    }

    /// One read and its batch; None to go on stepping.
    fn read(&mut self, plane: &Rc<Plane>) -> Option<Next> {
        let large = self.c.wants_large_buffer();
        let pool = self.c.env.pool.clone();
        let buf = self.c.buf.get_or_insert_with(|| pool.take(large));
        if let Some(prefix) = self.rare.as_mut().and_then(|r| r.prefix.take()) {
            let room = buf.len() - self.c.end;
            let take = prefix.len().min(room);
            buf[self.c.end..self.c.end + take].copy_from_slice(&prefix[..take]);
            self.c.end += take;
            if take < prefix.len() {
                self.rare().prefix = Some(prefix.slice(take..));
            }
        } else if self.fresh {
            // A `recv`'s bytes, already in the buffer.
            self.fresh = false;
        } else {
            let room = buf.len() - self.c.end;
            let got = if self.ops & Op::Recv.bit() != 0 {
                // The ring reads for it: reading here could overtake it.
                Err(ErrorKind::WouldBlock.into())
            } else {
                (&*self.c.stream.0).read(&mut buf[self.c.end..])
            };
            match got {
                Ok(0) => return Some(self.end()),
                Ok(n) => {
                    // A short read drained the socket, unless the client's
                    // end came with the data: edge-triggered epoll reports
                    // that end once, so it is read until its 0 (or error).
                    self.readable = n == room || self.hup;
                    self.c.end += n;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    self.readable = false;
                    self.dry(plane);
                    if self.draining > 0 {
                        let flow = Flow::Close(SHUTDOWN_CODE, SHUTDOWN_REASON.into());
                        return self.act(flow);
                    }
                    return Some(Next::Keep);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => return None,
                Err(_) => return Some(self.end()),
            }
            self.c.env.outbound.touch(self.c.env.idle.now());
            self.c.ping_sent = false;
        }
        let behaviour = self.behaviour.as_mut().expect("not lent");
        let (flow, pos) = self.c.decode_batch(behaviour);
        if self.c.out.is_empty() {
            // Nothing to write (a direct write's remainder goes out with
            // the queue it heads, `deliver`).
            self.c.keep_leftover(pos);
            return self.act(flow);
        }
        let outbound = &self.c.env.outbound;
        let turn = outbound.direct();
        if turn {
            outbound.hold_turn();
            if outbound.has_remainder() {
                // A producer's frame to finish first: the slow path.
                self.write(Vec::new(), true, Done::Batch { pos, flow }, true);
                return None;
            }
        }
        let buf = self.c.buf.as_deref().expect("a batch holds its buffer");
        if let (Some(u), Flow::Continue) = (plane.uring(), &flow) {
            // One short run of bytes: a `send` in the turn's enter, no
            // system call of its own.
            let fd = self.c.stream.0.as_raw_fd();
            let sent = self.c.out.single(buf).and_then(|b| u.send(self.key, fd, b));
            if let Some(sent) = sent {
                self.c.out.finished();
                self.ops |= Op::Send.bit();
                self.sending = Some((sent, turn));
                // The read buffer goes back now if nothing is left in it.
                // The next `recv` is armed once the `send` is out: armed
                // beside it, it finds the client not yet answered and
                // costs the kernel a poll of its own.
                self.c.keep_leftover(pos);
                return Some(Next::Keep);
            }
        }
        // The usual case on epoll: the socket takes the batch now, and
        // nothing is allocated for it.
        let mut writer = self.c.stream.writer();
        let mut cx = Context::from_waker(Waker::noop());
        match self.c.out.poll_flush(&mut writer, buf, &mut cx) {
            Poll::Ready(Ok(())) => {
                if turn {
                    self.c.env.outbound.release_turn();
                }
                self.c.keep_leftover(pos);
                self.act(flow)
            }
            Poll::Ready(Err(_)) => {
                if turn {
                    self.c.env.outbound.release_turn();
                }
                Some(self.end())
            }
            Poll::Pending => {
                // The rest when the socket drains; the turn stays held.
                self.rare().writing = Some(Writing {
                    parts: Vec::new(),
                    sent: 0,
                    remainder: 0,
                    batch: true,
                    done: Done::Batch { pos, flow },
                    turn,
                    since: None,
                });
                None
            }
        }
    }

    /// Reads and discards until the client's EOF after the close.
    fn discard(&mut self, plane: &Rc<Plane>) -> Next {
        if self
            .rare
            .as_ref()
            .is_some_and(|r| r.discarded >= CLOSE_DRAIN_MAX_BYTES)
        {
            return self.end();
        }
        if self.ops & Op::Recv.bit() != 0 {
            // The ring's `recv` takes what comes (counted, not kept).
            self.c.drop_buffer();
            return Next::Keep;
        }
        let pool = self.c.env.pool.clone();
        let buf = self.c.buf.get_or_insert_with(|| pool.take(false));
        loop {
            match (&*self.c.stream.0).read(&mut buf[..]) {
                Ok(0) => return self.end(),
                Ok(n) => {
                    let rare = self.rare.get_or_insert_with(Box::default);
                    rare.discarded += n;
                    if rare.discarded >= CLOSE_DRAIN_MAX_BYTES {
                        return self.end();
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    self.c.drop_buffer();
                    if let Some(u) = plane.uring() {
                        self.arm_recv(u, BUFFER_BYTES);
                    }
                    return Next::Keep;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return self.end(),
            }
        }
    }

    fn run(&mut self, plane: &Rc<Plane>) -> Next {
        if self.sending.is_some() {
            // Its completion steps it on.
            return Next::Keep;
        }
        let mut reads = 0;
        loop {
            if self.rare.as_ref().is_some_and(|r| r.writing.is_some()) {
                match self.push_write() {
                    Err(_) => {
                        // The client is gone: no close can reach it.
                        if self.state == State::Lent {
                            return self.call_back(Flow::Done).expect("kept");
                        }
                        return self.end();
                    }
                    Ok(true) => match self.written(plane) {
                        Some(Next::Keep) => {
                            self.tidy();
                            return Next::Keep;
                        }
                        Some(next) => return next,
                        None => continue,
                    },
                    Ok(false) => return self.stalled(plane),
                }
            }
            match self.state {
                State::Lingering => return self.discard(plane),
                State::Lent => {
                    if self.hup {
                        return self.call_back(Flow::Done).expect("kept");
                    }
                    if self.queue_ready() {
                        let outbound = &self.c.env.outbound;
                        // Reads are blocked: nothing to time out yet.
                        outbound.take_idle_due();
                        if let Some(next) = self.deliver() {
                            return next;
                        }
                        continue;
                    }
                    return Next::Keep;
                }
                State::Open => {}
            }
            if let Some(flow) = self.rare.as_mut().and_then(|r| r.after_lend.take()) {
                if let Some(next) = self.act(flow) {
                    return next;
                }
                continue;
            }
            if self.queue_ready() {
                if self.c.env.outbound.take_idle_due() {
                    let flow = self.idle_check();
                    if let Some(next) = self.act(flow) {
                        return next;
                    }
                } else if let Some(next) = self.deliver() {
                    return next;
                }
                continue;
            }
            let behaviour = self.behaviour.as_ref().expect("not lent");
            if behaviour.reads_blocked(&self.c.env.outbound) {
                if self.hup {
                    return self.end();
                }
                self.lend(plane);
                return Next::Keep;
            }
            let prefix = self.rare.as_ref().is_some_and(|r| r.prefix.is_some());
            if !self.readable && !prefix && !self.fresh {
                if self.draining > 0 {
                    let flow = Flow::Close(SHUTDOWN_CODE, SHUTDOWN_REASON.into());
                    if let Some(next) = self.act(flow) {
                        return next;
                    }
                    continue;
                }
                if plane.uring().is_some() && self.state == State::Open {
                    // A `recv`'s bytes were all there was.
                    self.dry(plane);
                }
                self.tidy();
                return Next::Keep;
            }
            if reads == READS_PER_STEP {
                return Next::Again;
            }
            reads += 1;
            if self.draining > 0 {
                self.draining -= 1;
                if self.draining == 0 {
                    let flow = Flow::Close(SHUTDOWN_CODE, SHUTDOWN_REASON.into());
                    if let Some(next) = self.act(flow) {
                        return next;
                    }
                    continue;
                }
            }
            if let Some(next) = self.read(plane) {
                return next;
            }
        }
    }

    /// Something is queued, or the idle wheel looked; else the waker is
    /// registered (once per wake, see `armed`).
    #[inline]
    fn queue_ready(&mut self) -> bool {
        let outbound = &self.c.env.outbound;
        if self.armed {
            return outbound.is_ready();
        }
        let ready = outbound.ready_or_register(&self.waker);
        self.armed = !ready;
        ready
    }

    /// A write waits for the socket. If the idle wheel finds it still
    /// waiting a whole `idle_timeout` later, the client has stopped
    /// reading: the connection is dropped (as the task loop's stall limit).
    fn stalled(&mut self, plane: &Rc<Plane>) -> Next {
        let now = self.c.env.idle.now();
        let limit = IdleWheel::ticks(self.c.env.limits.idle_timeout);
        let due = self.c.env.outbound.take_idle_due();
        let w = self
            .rare
            .as_mut()
            .and_then(|r| r.writing.as_mut())
            .expect("a write");
        let since = *w.since.get_or_insert(now);
        if due && now.wrapping_sub(since) >= limit {
            tracing::debug!("client stopped reading; dropping the connection");
            if self.state == State::Lent {
                return self.call_back(Flow::Done).expect("kept");
            }
            return self.end();
        }
        // Woken again by the socket's write readiness or the wheel.
        if let Some(u) = plane.uring() {
            self.arm(u, Op::Writable);
        }
        self.c.env.outbound.register_consumer(&self.waker);
        self.armed = true;
        Next::Keep
    }
}

impl<B: Behaviour> PlaneConn for Entry<B> {
    fn step(&mut self, plane: &Rc<Plane>, cause: Cause) -> Next {
        match cause {
            Cause::Io { read, hup, .. } => {
                self.readable |= read;
                self.hup |= hup;
            }
            Cause::Again => self.readable = true,
            Cause::Woken => self.armed = false,
            Cause::Recv { res, bid } => {
                self.ops &= !Op::Recv.bit();
                let u = plane.uring().expect("a ring's completion");
                match bid {
                    Some(bid) => {
                        self.received(u.bytes(bid, res.max(0) as usize));
                        u.give_back(bid);
                    }
                    None if res == 0 => {
                        self.hup = true;
                        self.readable = true;
                    }
                    // No ring buffer was free, or the socket failed: a
                    // direct read takes the bytes or meets the error.
                    None => self.readable = true,
                }
            }
            Cause::Polled { op, res } => {
                self.ops &= !op.bit();
                let gone = (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) as i32;
                if op == Op::Hangup && (res < 0 || res & gone != 0) {
                    self.hup = true;
                    self.readable = true;
                }
            }
            Cause::Sent { res } => {
                let u = plane.uring().expect("a ring's completion");
                if let Some(next) = self.sent(u, res) {
                    return next;
                }
            }
            Cause::LingerOver => {
                if self.state == State::Lingering {
                    return self.end();
                }
                return Next::Keep;
            }
        }
        self.run(plane)
    }

    fn socket_fd(&self) -> RawFd {
        self.c.stream.0.as_raw_fd()
    }

    fn armed(&self) -> u8 {
        self.ops
    }

    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}
