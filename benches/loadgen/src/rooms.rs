//! The `rooms` mode: many small pub/sub topics with many publishers, as in
//! a chat service. C connections join rooms of R (`{room}` in the URL's
//! path is the room number); every member publishes and every member
//! receives each other member's messages (the server leaves the sender
//! out, as weir's pubsub, uWebSockets.js's and Bun's `publish` do).
//!
//! Rooms advance in rounds: each member sends P messages, and when every
//! member has received the P × (R − 1) messages of the others, the room's
//! next round starts. Every message carries its sender, its sequence
//! number and its send time; a receiver checks the sender is another
//! member of its room, the sequence is the next from that sender, the
//! length and filler bytes are exact. The figure is the server's CPU per
//! delivered message (a publish to a room of 10 is 9 deliveries), and the
//! latency from send to each delivery.

use crate::conn::Target;
use crate::hist::Histogram;
use crate::idle::{open_all, IdleOptions};
use crate::payload::MASK_KEY;
use crate::stream::Stream;
use crate::sys::{self, Epoll};
use crate::ws::{self, Parser, Rng, Sink, OP_BINARY};
use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Sender index, sequence number and send time lead every message.
const HEADER: usize = 16;

pub struct RoomsOptions {
    pub room_size: usize,
    /// Messages each member sends per round.
    pub window: usize,
    /// Bytes per message (at least the 16-byte header).
    pub size: usize,
    pub sources: usize,
}

pub struct RoomsResult {
    pub opened: usize,
    /// Messages delivered in the measured window.
    pub deliveries: u64,
    pub window: Duration,
    pub server_cpu_ns: Option<u64>,
    pub client_cpu_ns: u64,
    /// Send → delivery, nanoseconds, in the measured window.
    pub latency: Histogram,
    pub errors: Vec<String>,
}

/// Collects a connection's data messages as they complete.
#[derive(Default)]
struct Inbox {
    current: Vec<u8>,
    messages: Vec<Vec<u8>>,
    other: bool,
}

impl Sink for Inbox {
    fn data(&mut self, chunk: &[u8]) {
        self.current.extend_from_slice(chunk);
    }
    fn end(&mut self, _: u8, _: u64) {
        self.messages.push(std::mem::take(&mut self.current));
    }
    /// The server sends nothing but the others' messages here.
    fn control(&mut self, _: u8, _: &[u8]) {
        self.other = true;
    }
}

struct Member {
    stream: Stream,
    parser: Parser,
    inbox: Inbox,
    /// Next sequence number this member sends.
    sent: u32,
    /// Next sequence number expected from each member of the room, by
    /// position in the room.
    expect: Vec<u32>,
}

struct Room {
    /// Deliveries the current round still waits for.
    pending: usize,
}

fn filler(sender: u32, seq: u32, at: usize) -> u8 {
    b'a' + ((sender as usize + seq as usize + at) % 26) as u8
}

fn message(sender: u32, seq: u32, sent_ns: u64, size: usize) -> Vec<u8> {
    let mut m = Vec::with_capacity(size.max(HEADER));
    m.extend_from_slice(&sender.to_le_bytes());
    m.extend_from_slice(&seq.to_le_bytes());
    m.extend_from_slice(&sent_ns.to_le_bytes());
    for at in HEADER..size {
        m.push(filler(sender, seq, at));
    }
    m
}

/// Writes all of `bytes` to a non-blocking socket, waiting for room when
/// its send buffer is full.
fn write_fully(s: &mut Stream, mut bytes: &[u8]) -> Result<(), String> {
    while !bytes.is_empty() {
        match s.write(bytes) {
            Ok(0) => return Err("write: closed".into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                let mut p = libc::pollfd {
                    fd: s.socket().as_raw_fd(),
                    events: libc::POLLOUT,
                    revents: 0,
                };
                if unsafe { libc::poll(&mut p, 1, 1000) } <= 0 {
                    return Err("write: no room in the send buffer for 1 s".into());
                }
            }
            Err(e) => return Err(format!("write: {e}")),
        }
    }
    Ok(())
}

pub fn run(
    target: &Target,
    count: usize,
    opts: &RoomsOptions,
    warmup: Duration,
    duration: Duration,
    server_pid: Option<u32>,
) -> RoomsResult {
    let r_size = opts.room_size.max(2);
    let count = count - count % r_size;
    let mut rng = Rng::new(13);
    let mut errors = Vec::new();
    let open = IdleOptions {
        exchange: false,
        room_size: r_size,
        sources: opts.sources,
    };
    let streams = open_all(target, count, &open, &mut rng, &mut errors);
    let mut r = RoomsResult {
        opened: streams.len(),
        deliveries: 0,
        window: Duration::ZERO,
        server_cpu_ns: None,
        client_cpu_ns: 0,
        latency: Histogram::default(),
        errors,
    };
    if streams.len() < count {
        return r;
    }
    // Subscriptions may be made after the 101 (an `open` handler): let
    // them settle before the first message, which would be lost to a
    // member not yet subscribed.
    std::thread::sleep(Duration::from_millis(500));

    let epoll = Epoll::new().expect("epoll");
    let mut members: Vec<Member> = Vec::with_capacity(count);
    for (i, stream) in streams.into_iter().enumerate() {
        stream.socket().set_nonblocking(true).ok();
        stream.socket().set_read_timeout(None).ok();
        epoll
            .add(stream.socket().as_raw_fd(), i as u64, sys::IN)
            .expect("epoll add");
        members.push(Member {
            stream,
            parser: Parser::default(),
            inbox: Inbox::default(),
            sent: 0,
            expect: vec![0; r_size],
        });
    }
    let per_round = opts.window.max(1) * r_size * (r_size - 1);
    let mut rooms: Vec<Room> = (0..count / r_size)
        .map(|_| Room { pending: per_round })
        .collect();
    let base = Instant::now();
    let start_round = |members: &mut [Member], room: usize| -> Result<(), String> {
        let now = base.elapsed().as_nanos() as u64;
        let first = room * r_size;
        for (i, m) in members[first..first + r_size].iter_mut().enumerate() {
            let i = first + i;
            let mut out = Vec::new();
            for _ in 0..opts.window.max(1) {
                let payload = message(i as u32, m.sent, now, opts.size);
                out.extend_from_slice(&ws::client_frame(OP_BINARY, &payload, MASK_KEY));
                m.sent += 1;
            }
            write_fully(&mut m.stream, &out).map_err(|e| format!("conn {i}: {e}"))?;
        }
        Ok(())
    };
    for room in 0..rooms.len() {
        if let Err(e) = start_round(&mut members, room) {
            r.errors.push(e);
            return r;
        }
    }

    let mut events = sys::empty_events(1024);
    let mut buf = vec![0u8; 64 << 10];
    let measure_from = base + warmup;
    let end = measure_from + duration;
    let mut measuring = false;
    let (mut server_before, mut client_before) = (None, 0);
    let mut last_progress = Instant::now();
    'run: loop {
        let now = Instant::now();
        if !measuring && now >= measure_from {
            measuring = true;
            server_before = server_pid.and_then(|p| sys::proc_cpu_ns(p).ok());
            client_before = sys::self_cpu_ns();
        }
        if now >= end {
            break;
        }
        if now.duration_since(last_progress) > Duration::from_secs(5) {
            r.errors
                .push("no delivery for 5 s: a message was lost".into());
            break;
        }
        let n = epoll.wait(&mut events, 50);
        for ev in &events[..n] {
            let i = ev.u64 as usize;
            let m = &mut members[i];
            loop {
                match m.stream.read(&mut buf) {
                    Ok(0) => {
                        r.errors.push(format!("conn {i}: closed by the server"));
                        break 'run;
                    }
                    Ok(n) => {
                        if let Err(e) = m.parser.feed(&buf[..n], &mut m.inbox) {
                            r.errors.push(format!("conn {i}: {e}"));
                            break 'run;
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) => {
                        r.errors.push(format!("conn {i}: read: {e}"));
                        break 'run;
                    }
                }
            }
            if m.inbox.other {
                r.errors
                    .push(format!("conn {i}: a control frame (close or ping)"));
                break 'run;
            }
            let room = i / r_size;
            let got = std::mem::take(&mut m.inbox.messages);
            if got.is_empty() {
                continue;
            }
            let at = base.elapsed().as_nanos() as u64;
            for msg in &got {
                if let Err(e) = check(msg, i, r_size, opts.size, &mut m.expect) {
                    r.errors.push(format!("conn {i}: {e}"));
                    break 'run;
                }
                if measuring {
                    r.deliveries += 1;
                    let sent = u64::from_le_bytes(msg[8..16].try_into().expect("8 bytes"));
                    r.latency.record(at.saturating_sub(sent));
                }
            }
            last_progress = Instant::now();
            let room_state = &mut rooms[room];
            room_state.pending -= got.len();
            if room_state.pending == 0 {
                room_state.pending = per_round;
                if let Err(e) = start_round(&mut members, room) {
                    r.errors.push(e);
                    break 'run;
                }
            }
        }
    }
    if measuring {
        r.window = measure_from.elapsed().min(duration);
        r.client_cpu_ns = sys::self_cpu_ns() - client_before;
        r.server_cpu_ns = server_before.and_then(|b| {
            server_pid
                .and_then(|p| sys::proc_cpu_ns(p).ok())
                .map(|a| a.saturating_sub(b))
        });
    }
    r
}

/// Checks one delivered message against what member `me` expects.
fn check(
    msg: &[u8],
    me: usize,
    r_size: usize,
    size: usize,
    expect: &mut [u32],
) -> Result<(), String> {
    if msg.len() != size.max(HEADER) {
        return Err(format!(
            "a message of {} bytes, sent {}",
            msg.len(),
            size.max(HEADER)
        ));
    }
    let sender = u32::from_le_bytes(msg[0..4].try_into().expect("4 bytes")) as usize;
    let seq = u32::from_le_bytes(msg[4..8].try_into().expect("4 bytes"));
    if sender / r_size != me / r_size {
        return Err(format!("a message from member {sender} of another room"));
    }
    if sender == me {
        return Err("its own message came back".into());
    }
    let want = &mut expect[sender % r_size];
    if seq != *want {
        return Err(format!(
            "from member {sender}: message {seq}, expected {want}"
        ));
    }
    let bad = (HEADER..msg.len()).find(|&at| msg[at] != filler(sender as u32, seq, at));
    if let Some(at) = bad {
        return Err(format!(
            "from member {sender}: byte {at} of message {seq} differs"
        ));
    }
    *want += 1;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_catches_order_room_and_bytes() {
        let mut expect = vec![0; 10];
        let ok = message(3, 0, 7, 64);
        assert!(check(&ok, 5, 10, 64, &mut expect).is_ok());
        assert!(check(&ok, 5, 10, 64, &mut expect).is_err(), "a repeat");
        assert!(
            check(&message(3, 2, 7, 64), 5, 10, 64, &mut expect).is_err(),
            "a gap"
        );
        assert!(
            check(&message(13, 0, 7, 64), 5, 10, 64, &mut expect).is_err(),
            "another room"
        );
        assert!(
            check(&message(5, 0, 7, 64), 5, 10, 64, &mut expect).is_err(),
            "its own"
        );
        let mut bad = message(3, 1, 7, 64);
        bad[40] ^= 1;
        assert!(
            check(&bad, 5, 10, 64, &mut expect).is_err(),
            "a flipped byte"
        );
        assert!(check(&message(3, 1, 7, 64), 5, 10, 64, &mut expect).is_ok());
    }
}
