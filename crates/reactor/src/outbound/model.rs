//! A loom model of the outbound queue's write turn (issue 42, item 6):
//! producers writing straight into the consumer's socket or queueing, and
//! the consumer writing what they queued and bytes of its own, through
//! every interleaving loom explores (within a preemption bound) and every
//! reordering their memory orderings allow. The consumer here is the
//! connection loop's use of the queue, written again without tokio (conn.rs
//! `deliver`, `flush`, `write_own`, `close_and_linger`): keep them in step.
//! The socket is a [`DirectSocket`] that records the bytes, cuts every other
//! write short and fails the model when two writers are in it at once.
//!
//! Checked in each execution:
//! 1. never two writers on the socket at once;
//! 2. the wire is whole frames, each producer's in the order it sent them,
//!    its close frame last (a direct write's remainder goes out before
//!    anything else);
//! 3. every frame a producer was told was accepted reaches the wire exactly
//!    once, unless the connection closed first (then a producer's frames on
//!    the wire are the first of those it sent, none missing between); the
//!    budget counts nothing that reached the wire;
//! 4. the consumer is woken whenever something is left for it.
//!
//! Run (about 40 s in release once built; the cfg rebuilds every dependency,
//! so give it a `CARGO_TARGET_DIR` of its own; LOOM_MAX_PREEMPTIONS widens
//! the search, the default here is 2):
//! `RUSTFLAGS="--cfg weir_loom" cargo test --release -p weir-reactor --lib outbound::model`

use super::{DirectSocket, OutMsg, Outbound};
use bytes::Bytes;
use loom::sync::atomic::AtomicBool;
use loom::sync::Mutex;
use loom::thread;
use std::future::Future;
use std::io::IoSlice;
use std::pin::pin;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use std::task::{Context, Wake, Waker};

/// Every frame on the model's wire is `[kind, who, seq, END]`, printable.
const FRAME_BYTES: usize = 4;
const END: u8 = b'.';
/// A producer's frame.
const DATA: u8 = b'F';
/// The consumer's own reply.
const OWN: u8 = b'R';
/// The consumer's close frame.
const CLOSE: u8 = b'C';
/// conn.rs's `OUTBOUND_BATCH`, small here so one `deliver` can leave
/// messages behind.
const BATCH: usize = 2;

fn frame(kind: u8, who: u8, seq: u8) -> [u8; FRAME_BYTES] {
    [kind, who, seq, END]
}

/// The consumer's socket: what reached it, and whether someone is writing.
struct Wire {
    writing: AtomicBool,
    /// What each send took, in order.
    sends: Mutex<Vec<Vec<u8>>>,
    /// Every other send (the first, the third…) takes at most
    /// `FRAME_BYTES - 1` bytes: a direct write leaves a remainder.
    cut: bool,
}

impl Wire {
    fn new(cut: bool) -> Wire {
        Wire {
            writing: AtomicBool::new(false),
            sends: Mutex::new(Vec::new()),
            cut,
        }
    }
}

impl DirectSocket for Wire {
    fn send_now(&self, bytes: &[u8]) -> usize {
        assert!(
            !self.writing.swap(true, SeqCst),
            "two writers on the socket at once"
        );
        let mut sends = self.sends.lock().unwrap();
        let take = match self.cut && sends.len().is_multiple_of(2) {
            true => bytes.len().min(FRAME_BYTES - 1),
            false => bytes.len(),
        };
        sends.push(bytes[..take].to_vec());
        drop(sends);
        self.writing.store(false, SeqCst);
        take
    }

    fn send_vectored_now(&self, parts: &[IoSlice<'_>]) -> usize {
        let all: Vec<u8> = parts.iter().flat_map(|p| p.iter().copied()).collect();
        self.send_now(&all)
    }
}

/// The consumer's waker: notes the wake-up (the consumer yields until it
/// sees one: loom's park and unpark misbehave with a waker).
struct Woken {
    woke: AtomicBool,
}

impl Wake for Woken {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // A swap, not a store: loom orders a plain store after the
        // consumer's swaps only by causality, and could lose it.
        self.woke.swap(true, SeqCst);
    }
}

/// The connection's side of the queue, as conn.rs uses it.
struct Consumer {
    out: Arc<Outbound<Wire>>,
    wire: Arc<Wire>,
    woken: Arc<Woken>,
    waker: Waker,
}

impl Consumer {
    /// On the consumer's thread.
    fn new(out: Arc<Outbound<Wire>>, wire: Arc<Wire>) -> Consumer {
        let woken = Arc::new(Woken {
            woke: AtomicBool::new(false),
        });
        let waker = Waker::from(woken.clone());
        Consumer {
            out,
            wire,
            woken,
            waker,
        }
    }

    /// A blocking write (the loop's `write_all`: short writes go on).
    fn write_all(&self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let n = self.wire.send_now(bytes);
            bytes = &bytes[n..];
        }
    }

    /// Waits as the loop does (`Outbound::ready`): true once something is
    /// queued; false once the producers are `done` and nothing woke the
    /// consumer, after checking that nothing is left for it (the gateway's
    /// consumer would sleep on it for good).
    fn ready(&self, done: &AtomicBool) -> bool {
        let mut cx = Context::from_waker(&self.waker);
        loop {
            if pin!(self.out.ready()).poll(&mut cx).is_ready() {
                return true;
            }
            loop {
                if self.woken.woke.swap(false, SeqCst) {
                    break;
                }
                if done.load(SeqCst) {
                    if self.woken.woke.swap(false, SeqCst) {
                        break;
                    }
                    assert!(
                        self.out.is_empty(),
                        "something is left for the consumer and nothing woke it"
                    );
                    return false;
                }
                thread::yield_now();
            }
        }
    }

    /// conn.rs `flush`: the connection's own bytes (a reply), after the
    /// rest of a frame a direct write began.
    fn flush(&self, own: &[u8]) {
        let out = &self.out;
        let direct = out.direct() && !own.is_empty();
        let _turn = direct.then(|| out.write_turn());
        if let Some(rest) = direct.then(|| out.take_remainder()).flatten() {
            self.write_all(&rest);
            out.written(rest.len());
        }
        self.write_all(own);
    }

    /// conn.rs `deliver`: writes what producers queued; true when it took
    /// a close.
    fn deliver(&self) -> bool {
        let out = &self.out;
        let _turn = out.direct().then(|| out.write_turn());
        out.clear_remainder();
        let (mut frames, mut closing, mut taken) = (Vec::new(), false, 0);
        while frames.len() < BATCH {
            let Some(msg) = out.try_recv() else {
                break;
            };
            taken += 1;
            match msg {
                OutMsg::Frames(f) => frames.push(f),
                OutMsg::Close(..) | OutMsg::Drain => {
                    closing = true;
                    break;
                }
            }
        }
        let total = frames.iter().map(Bytes::len).sum();
        self.write_all(&frames.concat());
        out.written(total);
        out.delivered(taken);
        closing
    }

    /// conn.rs `write_own`: a ping, its close frame.
    fn write_own(&self, bytes: &[u8]) {
        let out = &self.out;
        let _turn = out.direct().then(|| out.write_turn());
        if let Some(rest) = out.take_remainder() {
            self.write_all(&rest);
            out.written(rest.len());
        }
        self.write_all(bytes);
    }

    /// conn.rs `close_and_linger`, then the end of `run`.
    fn close(&self) {
        self.out.end_direct();
        self.write_own(&frame(CLOSE, b'0', b'0'));
        self.out.consumer_gone();
    }
}

/// What a producer does, in order.
#[derive(Clone, Copy, Debug)]
enum Op {
    /// `send_direct` of frame `seq`.
    Direct(u8),
    /// `send_shared` of frame `seq`.
    Shared(u8),
    /// `send_shared_all` of frames `seq` and `seq + 1` (one answer for
    /// both: only where the connection outlives the producers).
    Pair(u8),
    /// `close`.
    Close,
}

/// What a producer was told.
#[derive(Clone, Copy, Debug)]
enum Told {
    /// Frame `seq` accepted (true) or refused.
    Frame(u8, bool),
    /// Its close was queued (true) or an earlier one stands.
    Close(bool),
}

fn produce(out: &Outbound<Wire>, who: u8, ops: &[Op]) -> Vec<Told> {
    let mut told = Vec::new();
    for &op in ops {
        match op {
            Op::Direct(seq) => told.push(Told::Frame(seq, out.send_direct(&frame(DATA, who, seq)))),
            Op::Shared(seq) => {
                let bytes = Bytes::copy_from_slice(&frame(DATA, who, seq));
                told.push(Told::Frame(seq, out.send_shared(&bytes)));
            }
            Op::Pair(seq) => {
                let parts = [seq, seq + 1].map(|s| Bytes::copy_from_slice(&frame(DATA, who, s)));
                let slices = parts.each_ref().map(|p| IoSlice::new(p));
                let ok = out.send_shared_all(&parts, &slices);
                told.extend([Told::Frame(seq, ok), Told::Frame(seq + 1, ok)]);
            }
            Op::Close => told.push(Told::Close(out.close(1000, ""))),
        }
    }
    told
}

/// How the consumer ends.
#[derive(Clone, Copy, PartialEq)]
enum Ending {
    /// It writes what comes until the producers are done, then closes:
    /// every accepted frame must reach the wire.
    WhenDone,
    /// It closes after its first reply, racing the producers (`end_direct`
    /// against a direct write, `consumer_gone` against a send).
    AtOnce,
    /// It writes what comes until it takes a producer's close.
    OnClose,
}

/// Runs `producers` (the first is `a`, the next `b`) against a consumer
/// that sends one reply of its own and ends as `ending` says, under every
/// interleaving, and checks the wire.
fn explore(cut: bool, ending: Ending, producers: &[&[Op]]) {
    let producers: Vec<Vec<Op>> = producers.iter().map(|ops| ops.to_vec()).collect();
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    builder.check(move || {
        let wire = Arc::new(Wire::new(cut));
        let out = Arc::new(Outbound::<Wire>::with_budget(1 << 20));
        out.enable_direct(Arc::downgrade(&wire));
        let done = Arc::new(AtomicBool::new(false));
        let consumer = {
            let (out, wire, done) = (out.clone(), wire.clone(), done.clone());
            thread::spawn(move || {
                let c = Consumer::new(out, wire);
                c.flush(&frame(OWN, b'0', b'1'));
                if ending != Ending::AtOnce {
                    while c.ready(&done) && !c.deliver() {}
                }
                c.close();
            })
        };
        let running: Vec<_> = (b'a'..)
            .zip(producers.clone())
            .map(|(who, ops)| {
                let out = out.clone();
                thread::spawn(move || produce(&out, who, &ops))
            })
            .collect();
        let told: Vec<Vec<Told>> = running.into_iter().map(|p| p.join().unwrap()).collect();
        done.store(true, SeqCst);
        consumer.join().unwrap();
        let sends = wire.sends.lock().unwrap().clone();
        check(&sends, &told, ending, out.queued_bytes());
    });
}

/// Invariants 2 and 3 on what reached the wire.
fn check(sends: &[Vec<u8>], told: &[Vec<Told>], ending: Ending, queued: usize) {
    let wire = sends.concat();
    // The wire with `|` between sends.
    let shown = String::from_utf8_lossy(&sends.join(&b'|')).into_owned();
    assert!(
        wire.len().is_multiple_of(FRAME_BYTES),
        "a torn frame on the wire: {shown} (told {told:?})"
    );
    let frames: Vec<&[u8]> = wire.chunks(FRAME_BYTES).collect();
    for f in &frames {
        assert!(
            f[3] == END && [DATA, OWN, CLOSE].contains(&f[0]),
            "frames interleaved on the wire: {shown} (told {told:?})"
        );
    }
    assert!(
        frames.last() == Some(&&frame(CLOSE, b'0', b'0')[..])
            && frames.iter().filter(|f| f[0] == CLOSE).count() == 1,
        "the close frame is not last, or not alone: {shown} (told {told:?})"
    );
    assert!(
        frames.iter().filter(|f| f[0] == OWN).count() == 1,
        "the consumer's reply lost or doubled: {shown}"
    );
    let mut missing = 0;
    for (who, told) in (b'a'..).zip(told) {
        let on_wire: Vec<u8> = frames
            .iter()
            .filter(|f| f[0] == DATA && f[1] == who)
            .map(|f| f[2])
            .collect();
        let accepted: Vec<u8> = told
            .iter()
            .filter_map(|t| match t {
                Told::Frame(seq, true) => Some(*seq),
                _ => None,
            })
            .collect();
        // What reached the wire is what it was told was accepted, in
        // order, the first of them, none twice.
        assert!(
            accepted.starts_with(&on_wire),
            "producer {}'s frames out of order, twice, or refused yet written: {shown} (told {told:?})",
            who as char
        );
        // Everything accepted before its own close reaches the wire before
        // the close frame; nothing after it does.
        if let Some(at) = told.iter().position(|t| matches!(t, Told::Close(true))) {
            let before = told[..at]
                .iter()
                .filter(|t| matches!(t, Told::Frame(_, true)))
                .count();
            assert!(
                on_wire.len() == before,
                "producer {}'s frames sent before its close: {before}, on the wire before the close frame: {} ({shown}, told {told:?})",
                who as char,
                on_wire.len()
            );
        }
        if ending == Ending::WhenDone {
            assert!(
                on_wire == accepted,
                "producer {}'s accepted frames lost: {shown} (told {told:?})",
                who as char
            );
        }
        missing += accepted.len() - on_wire.len();
    }
    // The budget counts what was queued and not written: nothing once all
    // is written; what the closed connection dropped stays counted.
    assert_eq!(
        queued,
        missing * FRAME_BYTES,
        "queued bytes astray: {shown} (told {told:?})"
    );
}

/// Two producers' direct writes (one of them two frames in one
/// `send_shared_all`), each cut short in turn, race the consumer's own
/// reply and its writes of what they queued: nothing overlaps, nothing is
/// lost or reordered, and the consumer is woken for all that is left.
#[test]
fn direct_writes_and_queued_frames_keep_their_order() {
    explore(
        true,
        Ending::WhenDone,
        &[&[Op::Direct(b'1'), Op::Direct(b'2')], &[Op::Pair(b'1')]],
    );
}

/// The same with whole writes: a direct write that the socket takes whole
/// never overtakes frames queued before it.
#[test]
fn whole_direct_writes_never_overtake_queued_frames() {
    explore(
        false,
        Ending::WhenDone,
        &[
            &[Op::Direct(b'1'), Op::Shared(b'2')],
            &[Op::Direct(b'1'), Op::Direct(b'2')],
        ],
    );
}

/// The consumer ends direct writes and closes while two producers write:
/// `end_direct` waits out a direct write, a remainder goes out before the
/// close frame, nothing after it, and a send after `consumer_gone` is
/// refused.
#[test]
fn end_direct_racing_producers_leaves_whole_frames_before_the_close() {
    explore(
        true,
        Ending::AtOnce,
        &[&[Op::Direct(b'1'), Op::Direct(b'2')], &[Op::Shared(b'1')]],
    );
}

/// A producer closes the connection between two sends while another
/// sends: what it sent before its close reaches the wire before the close
/// frame, what it sent after does not reach it at all.
#[test]
fn a_close_racing_sends_comes_after_what_was_sent_before_it() {
    explore(
        false,
        Ending::OnClose,
        &[
            &[Op::Direct(b'1'), Op::Close, Op::Direct(b'2')],
            &[Op::Direct(b'1')],
        ],
    );
}
