//! The `heartbeat` mode: C idle connections (opened as in `idle`, one
//! message exchanged on each) that answer every server ping with its pong
//! and send nothing else. Over the measured window it counts the pings and
//! reads the server's CPU time, so the figure is the server's CPU per ping
//! it sent and the pong it read back: what keeping idle connections alive
//! costs. A connection that is closed, or a data message, is an error; so
//! is a window in which some connection was never pinged.

use crate::conn::Target;
use crate::idle::{open_all, IdleOptions};
use crate::payload::MASK_KEY;
use crate::stream::Stream;
use crate::sys::{self, Epoll};
use crate::ws::{self, Parser, Rng, Sink, OP_CLOSE, OP_PING, OP_PONG};
use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

pub struct HeartbeatResult {
    pub opened: usize,
    /// Pings answered within the measured window.
    pub pings: u64,
    /// Connections pinged at least once in the window.
    pub pinged: usize,
    pub window: Duration,
    pub server_cpu_ns: Option<u64>,
    pub client_cpu_ns: u64,
    pub errors: Vec<String>,
}

#[derive(Default)]
struct PingSink {
    pings: Vec<Vec<u8>>,
    closed: bool,
    data: bool,
}

impl Sink for PingSink {
    fn data(&mut self, _: &[u8]) {}
    fn end(&mut self, _: u8, _: u64) {
        self.data = true;
    }
    fn control(&mut self, op: u8, payload: &[u8]) {
        match op {
            OP_PING => self.pings.push(payload.to_vec()),
            OP_CLOSE => self.closed = true,
            _ => {}
        }
    }
}

struct Idle {
    stream: Stream,
    parser: Parser,
    sink: PingSink,
    /// Pings in the measured window.
    pings: u64,
    dead: bool,
}

/// Opens the connections, answers pings through `warmup` unmeasured, then
/// for `window` measured.
pub fn run(
    target: &Target,
    count: usize,
    warmup: Duration,
    window: Duration,
    server_pid: Option<u32>,
    opts: &IdleOptions,
) -> HeartbeatResult {
    let mut rng = Rng::new(11);
    let mut errors = Vec::new();
    let conns = open_all(target, count, opts, &mut rng, &mut errors);
    let mut r = HeartbeatResult {
        opened: conns.len(),
        pings: 0,
        pinged: 0,
        window,
        server_cpu_ns: None,
        client_cpu_ns: 0,
        errors,
    };
    let epoll = Epoll::new().expect("epoll");
    let mut idle: Vec<Idle> = Vec::with_capacity(conns.len());
    for (i, stream) in conns.into_iter().enumerate() {
        stream.socket().set_nonblocking(true).ok();
        stream.socket().set_read_timeout(None).ok();
        epoll
            .add(stream.socket().as_raw_fd(), i as u64, libc::EPOLLIN as u32)
            .expect("epoll add");
        idle.push(Idle {
            stream,
            parser: Parser::default(),
            sink: PingSink::default(),
            pings: 0,
            dead: false,
        });
    }
    println!("HEARTBEAT_READY {}", idle.len());
    answer_until(&epoll, &mut idle, Instant::now() + warmup, &mut r.errors);
    for c in idle.iter_mut() {
        c.pings = 0;
    }
    let server_before = server_pid.and_then(|p| sys::proc_cpu_ns(p).ok());
    let client_before = sys::self_cpu_ns();
    let started = Instant::now();
    answer_until(&epoll, &mut idle, started + window, &mut r.errors);
    r.window = started.elapsed();
    r.client_cpu_ns = sys::self_cpu_ns() - client_before;
    r.server_cpu_ns = server_before.and_then(|b| {
        server_pid
            .and_then(|p| sys::proc_cpu_ns(p).ok())
            .map(|a| a - b)
    });
    r.pings = idle.iter().map(|c| c.pings).sum();
    r.pinged = idle.iter().filter(|c| c.pings > 0).count();
    let dead = idle.iter().filter(|c| c.dead).count();
    if dead > 0 {
        r.errors
            .push(format!("{dead} connections closed or misbehaved"));
    }
    r
}

/// Reads whatever arrives until `deadline`; every ping gets its pong.
fn answer_until(epoll: &Epoll, idle: &mut [Idle], deadline: Instant, errors: &mut Vec<String>) {
    let mut events = sys::empty_events(1024);
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        let n = epoll.wait(&mut events, 50);
        for ev in &events[..n] {
            let i = ev.u64 as usize;
            let c = &mut idle[i];
            if c.dead {
                continue;
            }
            loop {
                match c.stream.read(&mut buf) {
                    Ok(0) => {
                        c.dead = true;
                        break;
                    }
                    Ok(n) => {
                        if c.parser.feed(&buf[..n], &mut c.sink).is_err() {
                            c.dead = true;
                            break;
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(_) => {
                        c.dead = true;
                        break;
                    }
                }
            }
            if c.sink.closed || c.sink.data {
                c.dead = true;
            }
            for ping in c.sink.pings.drain(..) {
                c.pings += 1;
                let pong = ws::client_frame(OP_PONG, &ping, MASK_KEY);
                // Six bytes into an idle socket's empty send buffer.
                if let Err(e) = c.stream.write_all(&pong) {
                    if errors.len() < 20 {
                        errors.push(format!("conn {i}: pong: {e}"));
                    }
                    c.dead = true;
                }
            }
            if c.dead && errors.len() < 20 {
                errors.push(format!("conn {i}: closed, or sent data or a bad frame"));
            }
        }
    }
}
