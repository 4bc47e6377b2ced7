//! The `idle` mode: open C connections, hold them, and report how much the
//! server's resident memory grew per connection; then ping every connection
//! and require its pong, so a server that dropped idle sockets cannot look small.

use crate::conn::{self, Target};
use crate::payload::MASK_KEY;
use crate::ws::{self, Parser, Rng, Sink, OP_PING, OP_PONG};
use std::io::{Read, Write};
use std::time::{Duration, Instant};

pub struct IdleResult {
    pub opened: usize,
    pub rss_before_kib: Option<u64>,
    pub rss_after_kib: Option<u64>,
    pub pongs: usize,
    pub errors: Vec<String>,
}

#[derive(Default)]
struct PongSink {
    pong: Option<Vec<u8>>,
    other: bool,
}

impl Sink for PongSink {
    fn data(&mut self, _: &[u8]) {}
    fn end(&mut self, _: u8, _: u64) {
        self.other = true;
    }
    fn control(&mut self, op: u8, p: &[u8]) {
        if op == OP_PONG {
            self.pong = Some(p.to_vec());
        } else {
            self.other = true;
        }
    }
}

/// `hold` is how long the connections stay open before RSS is read again.
pub fn run(target: &Target, count: usize, hold: Duration, server_pid: Option<u32>) -> IdleResult {
    let mut rng = Rng::new(7);
    let rss = || server_pid.and_then(|p| crate::sys::proc_rss_kib(p).ok());
    let mut r = IdleResult {
        opened: 0,
        rss_before_kib: rss(),
        rss_after_kib: None,
        pongs: 0,
        errors: Vec::new(),
    };
    let mut conns = Vec::with_capacity(count);
    for _ in 0..count {
        match conn::open(target, &mut rng) {
            Ok(s) => conns.push(s),
            Err(e) => {
                r.errors.push(e);
                break;
            }
        }
    }
    r.opened = conns.len();
    std::thread::sleep(hold);
    r.rss_after_kib = rss();
    println!("IDLE_READY {}", conns.len());

    // Liveness: ping everyone, then collect the pongs.
    for (i, s) in conns.iter_mut().enumerate() {
        s.socket().set_nonblocking(false).ok();
        let ping = ws::client_frame(OP_PING, &(i as u32).to_le_bytes(), MASK_KEY);
        if let Err(e) = s.write_all(&ping) {
            if r.errors.len() < 20 {
                r.errors.push(format!("conn {i}: ping: {e}"));
            }
        }
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut buf = [0u8; 256];
    for (i, s) in conns.iter_mut().enumerate() {
        let mut parser = Parser::default();
        let mut sink = PongSink::default();
        let ok = loop {
            let left = deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1));
            s.socket().set_read_timeout(Some(left)).ok();
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break false,
                Ok(n) => {
                    if parser.feed(&buf[..n], &mut sink).is_err() || sink.other {
                        break false;
                    }
                    if let Some(p) = sink.pong.take() {
                        break p == (i as u32).to_le_bytes();
                    }
                }
            }
        };
        if ok {
            r.pongs += 1;
        } else if r.errors.len() < 20 {
            r.errors.push(format!("conn {i}: no matching pong"));
        }
    }
    r
}
