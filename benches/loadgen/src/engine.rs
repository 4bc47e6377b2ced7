//! The measuring loop shared by the message modes: one epoll loop per
//! thread over its connections, a warm-up / measure / done phase switched by
//! the main thread, and per-thread results merged at the end.
//!
//! Loads: request/response (echo, json, binary) with a pipeline depth,
//! relay pairs (A→B then B→A is one round trip), and fan-out (one publisher,
//! subscribers checking order, the publisher a bounded window ahead).
//!
//! A run can end in two ways: DONE stops at once (a benchmark does not care
//! about the messages still in flight); DRAIN stops sending and returns once
//! every reply due has arrived, so the caller can close the connections
//! cleanly and know that every message sent was answered (the soak test).

use crate::conn::Conn;
use crate::hist::Histogram;
use crate::sys::{self, Epoll};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::time::{Duration, Instant};

/// Phase 0 (the default) is warm-up: messages flow but are not counted.
pub const MEASURE: u8 = 1;
pub const DONE: u8 = 2;
/// Send nothing new (a relay pair still completes its round trip), return
/// once no reply is due. Messages completed while draining are counted.
pub const DRAIN: u8 = 3;

/// The phase every thread reads once per wake-up.
#[derive(Default)]
pub struct Control {
    phase: AtomicU8,
}

impl Control {
    pub fn get(&self) -> u8 {
        self.phase.load(Ordering::Acquire)
    }
    pub fn set(&self, p: u8) {
        self.phase.store(p, Ordering::Release)
    }
}

/// What the connections of one thread do.
#[derive(Clone, Copy)]
pub enum Load {
    /// Each connection keeps `depth` requests in flight.
    ReqResp { depth: usize },
    /// conns[2i] and conns[2i+1] are a pair; one message in flight per pair.
    Relay,
    /// conns[0] publishes at most `window` messages ahead of the slowest of
    /// conns[1..], which must each receive every message, in order; with a
    /// `rate`, also at most that many messages per second.
    Fanout { window: usize, rate: Option<u64> },
    /// Every connection is a subscriber that must receive every message,
    /// in order, from a publisher elsewhere (`api`: the server API over
    /// HTTP); after each wake-up the slowest live subscriber's next
    /// sequence number is stored in `progress`, which paces that publisher.
    Subscribe { progress: &'static AtomicU64 },
}

/// A connection with an in-flight message older than this has stalled.
const STALL: Duration = Duration::from_secs(3);
/// Read buffer shared by all connections of a thread (parsing is streaming).
const READ_BUF_BYTES: usize = 256 * 1024;

#[derive(Default)]
pub struct ThreadResult {
    /// Completed messages (round trips, deliveries) within the measured window.
    pub msgs: u64,
    pub hist: Histogram,
    pub mismatches: u64,
    pub lost: u64,
    /// First problems seen (mismatch descriptions, dead connections, stalls).
    pub errors: Vec<String>,
    pub failed_conns: u64,
}

impl ThreadResult {
    pub fn merge(&mut self, o: ThreadResult) {
        self.msgs += o.msgs;
        self.hist.merge(&o.hist);
        self.mismatches += o.mismatches;
        self.lost += o.lost;
        self.failed_conns += o.failed_conns;
        for e in o.errors {
            if self.errors.len() < 20 {
                self.errors.push(e);
            }
        }
    }
}

fn ns(d: Duration) -> u64 {
    d.as_nanos() as u64
}

/// Runs `load` over `conns` until the phase is DONE, or until it is DRAIN
/// and nothing is due. The connections stay open.
pub fn run(conns: &mut [Conn], load: Load, ctl: &Control) -> ThreadResult {
    let ep = Epoll::new().expect("epoll_create1");
    for (i, c) in conns.iter().enumerate() {
        use std::os::fd::AsRawFd;
        let events = sys::IN | sys::OUT | sys::ET | sys::RDHUP;
        ep.add(c.stream.as_raw_fd(), i as u64, events)
            .expect("epoll_ctl");
    }
    let mut res = ThreadResult::default();
    let mut buf = vec![0u8; READ_BUF_BYTES];
    let mut events = sys::empty_events(1024);
    let now = Instant::now();

    // Prime the first messages.
    match load {
        Load::ReqResp { depth } => {
            for c in conns.iter_mut() {
                for _ in 0..depth {
                    c.queue_next(now);
                }
                c.check.allowed = depth as u64;
                c.flush();
            }
        }
        Load::Relay => {
            for pair in conns.chunks_mut(2) {
                pair[0].queue_next(now);
                pair[1].check.allowed = 1;
                pair[0].flush();
            }
        }
        Load::Fanout { .. } => {
            for c in &mut conns[1..] {
                c.check.allowed = u64::MAX;
            }
        }
        Load::Subscribe { .. } => {
            for c in conns.iter_mut() {
                c.check.allowed = u64::MAX;
            }
        }
    }
    let mut published_upto = 0u64;
    let started = Instant::now();
    // A paced publisher wakes every millisecond, so its messages go out in
    // small bursts rather than one per 10 ms tick.
    let wait_ms = match load {
        Load::Fanout { rate: Some(_), .. } => 1,
        _ => 10,
    };

    loop {
        if let Load::Fanout { window, rate } = load {
            // Publish while the slowest live subscriber is less than `window` behind.
            let slowest = conns[1..]
                .iter()
                .filter(|c| c.dead.is_none())
                .map(|c| c.check.next_seq)
                .min()
                .unwrap_or(published_upto);
            let publisher = &mut conns[0];
            if publisher.dead.is_none() && ctl.get() != DONE {
                let now = Instant::now();
                let paced = rate.map_or(u64::MAX, |r| {
                    (now.duration_since(started).as_secs_f64() * r as f64) as u64 + 1
                });
                while publisher.send_seq < (slowest + window as u64).min(paced) {
                    publisher.queue_next(now);
                }
                published_upto = publisher.send_seq;
                publisher.flush();
            }
        }
        if let Load::Subscribe { progress } = load {
            let slowest = conns
                .iter()
                .filter(|c| c.dead.is_none())
                .map(|c| c.check.next_seq)
                .min()
                .unwrap_or(u64::MAX);
            progress.store(slowest, Ordering::Release);
        }
        let n = ep.wait(&mut events, wait_ms);
        let phase = ctl.get();
        if phase == DONE || (phase == DRAIN && !anything_due(conns, load)) {
            break;
        }
        let now = Instant::now();
        for ev in &events[..n] {
            let i = ev.u64 as usize;
            if conns[i].dead.is_some() {
                continue;
            }
            if ev.events & (sys::IN | sys::ERR) != 0 {
                // read_all stops at a short read; a FIN that came with the
                // last data gives no further edge, so read on to the EOF.
                if conns[i].read_all(&mut buf) && ev.events & sys::RDHUP != 0 {
                    conns[i].read_all(&mut buf);
                }
                let done = std::mem::take(&mut conns[i].check.done);
                if done > 0 {
                    react(conns, i, done, load, phase, now, &mut res);
                }
            }
            let c = &mut conns[i];
            if c.dead.is_none() && c.wants_write() {
                c.flush();
            }
        }
    }

    // Collect what went wrong.
    let end = Instant::now();
    for (i, c) in conns.iter().enumerate() {
        res.mismatches += c.check.mismatches;
        res.lost += c.check.lost;
        for e in &c.check.errors {
            if res.errors.len() < 20 {
                res.errors.push(format!("conn {i}: {e}"));
            }
        }
        let mut problem = c.dead.clone();
        let in_flight = c.send_seq > c.check.next_seq
            && !matches!(load, Load::Fanout { .. } | Load::Subscribe { .. });
        let waiting = match load {
            // In a relay the pair's outstanding message may be B's to receive.
            Load::Relay if i % 2 == 1 => false,
            Load::Relay => c.send_seq > c.check.next_seq,
            _ => in_flight,
        };
        if problem.is_none() && waiting {
            let oldest = c.sent_time(c.check.next_seq);
            if end.duration_since(oldest) > STALL {
                problem = Some(format!(
                    "no reply for {:.1}s",
                    end.duration_since(oldest).as_secs_f64()
                ));
            }
        }
        if let Some(p) = problem {
            res.failed_conns += 1;
            if res.errors.len() < 20 {
                res.errors.push(format!("conn {i}: {p}"));
            }
        }
    }
    res
}

/// Whether a live connection still waits for a message (fan-out: never, its
/// subscribers take whatever comes).
fn anything_due(conns: &[Conn], load: Load) -> bool {
    match load {
        Load::Fanout { .. } | Load::Subscribe { .. } => false,
        _ => conns
            .iter()
            .any(|c| c.dead.is_none() && c.check.allowed > 0),
    }
}

/// Handles `done` messages just completed on connection `i`.
fn react(
    conns: &mut [Conn],
    i: usize,
    done: u64,
    load: Load,
    phase: u8,
    now: Instant,
    res: &mut ThreadResult,
) {
    let measuring = phase == MEASURE || phase == DRAIN;
    let sending = phase != DRAIN;
    match load {
        Load::ReqResp { .. } => {
            let c = &mut conns[i];
            if measuring {
                res.msgs += done;
                for seq in c.check.next_seq - done..c.check.next_seq {
                    res.hist.record(ns(now.duration_since(c.sent_time(seq))));
                }
            }
            if sending {
                for _ in 0..done {
                    c.queue_next(now);
                }
                c.check.allowed += done;
            }
        }
        Load::Relay => {
            let partner = i ^ 1;
            if i % 2 == 1 {
                // B received A's message: send it back the other way.
                for _ in 0..done {
                    conns[i].queue_next(now);
                }
                conns[partner].check.allowed += done;
                conns[i].flush();
            } else {
                // A received B's reply: one round trip.
                let c = &mut conns[i];
                if measuring {
                    res.msgs += done;
                    let seq = c.check.next_seq - 1;
                    res.hist
                        .record_n(ns(now.duration_since(c.sent_time(seq))), done);
                }
                if sending {
                    for _ in 0..done {
                        c.queue_next(now);
                    }
                    conns[partner].check.allowed += done;
                }
            }
        }
        Load::Fanout { .. } => {
            if i == 0 {
                return; // The publisher's checker already flagged it (nothing is due).
            }
            if measuring {
                res.msgs += done;
                let seq = conns[i].check.next_seq - 1;
                res.hist
                    .record_n(ns(now.duration_since(conns[0].sent_time(seq))), done);
            }
        }
        Load::Subscribe { .. } => {
            // The publisher's send times are in another thread: deliveries
            // are counted, latency is not measured.
            if measuring {
                res.msgs += done;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payload::{Expect, Source, Template};
    use std::io::{Read, Write};
    use std::net::{Shutdown, TcpListener, TcpStream};

    /// Regression: a server that answered and shut down in one go (reply
    /// and FIN in one read) left the connection looking alive and stalled,
    /// because the short read ended the read loop and no further edge came.
    #[test]
    fn reply_and_fin_together_end_the_connection() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut server, _) = l.accept().unwrap();
        client.set_nonblocking(true).unwrap();
        let t = Template::new(16, false, 1);
        let mut conns = vec![Conn::new(
            client.into(),
            Source::Pattern(t),
            Expect::Pattern(t),
            1,
        )];
        let answer = std::thread::spawn(move || {
            // The 16-byte message is 6 header + 16 payload bytes, masked.
            let mut req = [0u8; 22];
            server.read_exact(&mut req).unwrap();
            let mut payload: Vec<u8> = (0..16).map(|i| req[6 + i] ^ req[2 + i % 4]).collect();
            let mut reply = vec![0x82, 16];
            reply.append(&mut payload);
            server.write_all(&reply).unwrap();
            server.shutdown(Shutdown::Write).unwrap();
            std::thread::sleep(Duration::from_millis(500));
        });
        let ctl = Control::default();
        ctl.set(MEASURE);
        let res = std::thread::scope(|sc| {
            let h = sc.spawn(|| run(&mut conns, Load::ReqResp { depth: 1 }, &ctl));
            std::thread::sleep(Duration::from_millis(300));
            ctl.set(DONE);
            h.join().unwrap()
        });
        answer.join().unwrap();
        assert_eq!((res.msgs, res.mismatches), (1, 0), "{:?}", res.errors);
        let dead = conns[0].dead.clone();
        assert!(
            dead.as_deref().is_some_and(|d| d.contains("closed")),
            "{dead:?}"
        );
    }
}
