//! The `idle` mode: open C connections, exchange one message on each (an
//! echo round trip; in a chat room, one broadcast received), hold them, and
//! report how much the server's resident memory grew per connection; then
//! ping every connection and require its pong, so a server that dropped
//! idle sockets cannot look small.
//!
//! `{room}` in the URL's path is replaced by the connection's room number
//! (`index / room_size`); connections come from `sources` loopback
//! addresses (127.0.0.1, .2, …), each with its own ephemeral ports.

use crate::conn::{self, Target};
use crate::payload::MASK_KEY;
use crate::stream::Stream;
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

/// How the idle connections are opened.
pub struct IdleOptions {
    /// Send one message on each connection and wait for a data frame back
    /// before measuring.
    pub exchange: bool,
    /// Connections per `{room}`.
    pub room_size: usize,
    /// Loopback source addresses to connect from (1: the kernel's choice).
    pub sources: usize,
}

#[derive(Default)]
struct DataSink {
    messages: usize,
    /// Pings to answer: the server may ping a connection before its one
    /// message is read back, when connecting them all took longer than
    /// its idle timeout.
    pings: Vec<Vec<u8>>,
    /// Any other control frame (a close) before the message.
    other: bool,
}

impl Sink for DataSink {
    fn data(&mut self, _: &[u8]) {}
    fn end(&mut self, _: u8, _: u64) {
        self.messages += 1;
    }
    fn control(&mut self, op: u8, p: &[u8]) {
        if op == OP_PING {
            self.pings.push(p.to_vec());
        } else {
            self.other = true;
        }
    }
}

#[derive(Default)]
struct PongSink {
    pong: Option<Vec<u8>>,
    other: bool,
}

impl Sink for PongSink {
    fn data(&mut self, _: &[u8]) {}
    /// Data messages may still arrive (a room's later broadcasts).
    fn end(&mut self, _: u8, _: u64) {}
    fn control(&mut self, op: u8, p: &[u8]) {
        if op == OP_PONG {
            self.pong = Some(p.to_vec());
        } else {
            self.other = true;
        }
    }
}

/// Opens up to `count` connections as `opts` asks (stops at the first
/// failure, which goes to `errors`), then exchanges one message on each
/// unless `opts.exchange` is off.
pub fn open_all(
    target: &Target,
    count: usize,
    opts: &IdleOptions,
    rng: &mut Rng,
    errors: &mut Vec<String>,
) -> Vec<Stream> {
    let mut conns = Vec::with_capacity(count);
    for i in 0..count {
        let path = target
            .path
            .replace("{room}", &(i / opts.room_size.max(1)).to_string());
        let opened = if opts.sources > 1 {
            let source = std::net::Ipv4Addr::new(127, 0, 0, 1 + (i % opts.sources) as u8);
            conn::open_from(target, &path, source.into(), rng)
        } else if path != target.path {
            let t = Target {
                path,
                ..target.clone()
            };
            conn::open(&t, rng)
        } else {
            conn::open(target, rng)
        };
        match opened {
            Ok(s) => conns.push(s),
            Err(e) => {
                errors.push(e);
                break;
            }
        }
    }
    if opts.exchange {
        exchange(&mut conns, errors);
    }
    conns
}

/// One message out on every connection, then at least one data message
/// back on each (its echo, or a room's broadcast), within 30 s in all.
fn exchange(conns: &mut [Stream], errors: &mut Vec<String>) {
    let msg = ws::client_frame(
        ws::OP_TEXT,
        b"{\"idle\":\"one message before the silence\"}",
        MASK_KEY,
    );
    for (i, s) in conns.iter_mut().enumerate() {
        s.socket().set_nonblocking(false).ok();
        if let Err(e) = s.write_all(&msg) {
            if errors.len() < 20 {
                errors.push(format!("conn {i}: send: {e}"));
            }
        }
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut buf = [0u8; 4096];
    for (i, s) in conns.iter_mut().enumerate() {
        let mut parser = Parser::default();
        let mut sink = DataSink::default();
        while sink.messages == 0 {
            let left = deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1));
            s.socket().set_read_timeout(Some(left)).ok();
            match s.read(&mut buf) {
                Ok(n) if n > 0 && parser.feed(&buf[..n], &mut sink).is_ok() && !sink.other => {
                    for ping in sink.pings.drain(..) {
                        let pong = ws::client_frame(OP_PONG, &ping, MASK_KEY);
                        if let Err(e) = s.write_all(&pong) {
                            if errors.len() < 20 {
                                errors.push(format!("conn {i}: pong: {e}"));
                            }
                        }
                    }
                }
                _ => {
                    if errors.len() < 20 {
                        errors.push(format!("conn {i}: no message back"));
                    }
                    break;
                }
            }
        }
    }
    // Later replies (the rest of a room's broadcasts) are left unread in
    // the kernel: they cost the client's socket, not the server.
}

/// `hold` is how long the connections stay open before RSS is read again.
pub fn run(
    target: &Target,
    count: usize,
    hold: Duration,
    server_pid: Option<u32>,
    opts: &IdleOptions,
) -> IdleResult {
    let mut rng = Rng::new(7);
    let rss = || server_pid.and_then(|p| crate::sys::proc_rss_kib(p).ok());
    let mut r = IdleResult {
        opened: 0,
        rss_before_kib: rss(),
        rss_after_kib: None,
        pongs: 0,
        errors: Vec::new(),
    };
    let mut conns = open_all(target, count, opts, &mut rng, &mut r.errors);
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
