//! The `failover` mode: C connections to `--url` (node A) held idle; when
//! A closes one (a drain), the client answers the close and reconnects at
//! once to `--failover-url` (node B), as a client without back-off would.
//! The figure is the reconnect rate B sees: the peak number of upgrades B
//! answered in any 100 ms window (per second: × 10) and in any 1 s window,
//! counted from the moment each 101 arrived, and how long the closes and
//! reconnects took from the first close to the last.
//!
//! After opening every connection it prints `FAILOVER_READY n` and waits
//! (up to `wait`) for A to close them: the script drives the drain.

use crate::conn::{self, Target};
use crate::payload::MASK_KEY;
use crate::stream::Stream;
use crate::sys::{self, Epoll};
use crate::ws::{self, Parser, Rng, Sink, OP_CLOSE};
use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

pub struct FailoverResult {
    pub opened: usize,
    /// Connections A closed (a close frame or EOF).
    pub closed: usize,
    /// Reconnected to B (a valid 101).
    pub reconnected: usize,
    /// A's close codes (0: EOF without a close frame).
    pub codes: BTreeMap<u16, usize>,
    /// Reconnects in the busiest 100 ms, and in the busiest second.
    pub peak_100ms: usize,
    pub peak_1s: usize,
    /// From the first close to the last close, and to the last reconnect.
    pub closes_span: Duration,
    pub reconnects_span: Duration,
    pub errors: Vec<String>,
}

/// What a connection to A sees: the close's code, or EOF.
#[derive(Default)]
struct CloseSink {
    code: Option<u16>,
}

impl Sink for CloseSink {
    fn data(&mut self, _: &[u8]) {}
    fn end(&mut self, _: u8, _: u64) {}
    fn control(&mut self, op: u8, p: &[u8]) {
        if op == OP_CLOSE {
            self.code = Some(if p.len() >= 2 {
                u16::from_be_bytes([p[0], p[1]])
            } else {
                1005
            });
        }
    }
}

/// One thread's share: its connections to A, and what it saw.
struct Share {
    /// None once closed: a descriptor is not held past its close (the
    /// process would need twice the connections' descriptors).
    conns: Vec<Option<Stream>>,
    closes: Vec<(Instant, u16)>,
    reconnects: Vec<Instant>,
    /// B's connections, held open for the rest of the run.
    held: Vec<Stream>,
    errors: Vec<String>,
}

/// Watches `share.conns` until all are closed or `deadline`; reconnects
/// each closed one to `b` from the same source address.
fn watch(mut share: Share, b: &Target, sources: usize, deadline: Instant) -> Share {
    let epoll = Epoll::new().expect("epoll");
    for (i, s) in share.conns.iter().enumerate() {
        let Some(s) = s else { continue };
        epoll
            .add(
                s.socket().as_raw_fd(),
                i as u64,
                sys::IN | sys::RDHUP | sys::ET,
            )
            .expect("epoll add");
    }
    let mut parsers: Vec<Parser> = (0..share.conns.len()).map(|_| Parser::default()).collect();
    let mut left = share.conns.len();
    let mut events = sys::empty_events(256);
    let mut buf = vec![0u8; 16 << 10];
    let mut rng = Rng::new(0xfa11 ^ share.conns.len() as u64);
    while left > 0 && Instant::now() < deadline {
        let n = epoll.wait(&mut events, 100);
        for ev in &events[..n] {
            let i = ev.u64 as usize;
            let Some(stream) = share.conns[i].as_mut() else {
                continue;
            };
            let mut sink = CloseSink::default();
            let mut eof = false;
            loop {
                match stream.read(&mut buf) {
                    Ok(0) => {
                        eof = true;
                        break;
                    }
                    Ok(n) => {
                        if let Err(e) = parsers[i].feed(&buf[..n], &mut sink) {
                            share.errors.push(format!("conn {i}: {e}"));
                            eof = true;
                            break;
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(_) => {
                        eof = true;
                        break;
                    }
                }
            }
            if sink.code.is_none() && !eof {
                continue;
            }
            let code = sink.code.unwrap_or(0);
            share.closes.push((Instant::now(), code));
            if let Some(c) = sink.code {
                // Answer the close, as a polite client does; then go.
                let reply = ws::client_frame(OP_CLOSE, &c.to_be_bytes(), MASK_KEY);
                let _ = stream.write_all(&reply);
            }
            share.conns[i] = None;
            left -= 1;
            let source = std::net::Ipv4Addr::new(127, 0, 0, 1 + (i % sources.max(1)) as u8);
            match conn::open_from(b, &b.path, source.into(), &mut rng) {
                Ok(s) => {
                    share.reconnects.push(Instant::now());
                    share.held.push(s);
                }
                Err(e) => {
                    if share.errors.len() < 20 {
                        share.errors.push(format!("reconnect: {e}"));
                    }
                }
            }
        }
    }
    // Drop A's sockets now (B's stay held until the run's end).
    share.conns.clear();
    share
}

/// The most of `times` (sorted) in any window of `width`.
fn peak(times: &[Instant], width: Duration) -> usize {
    let (mut best, mut lo) = (0, 0);
    for hi in 0..times.len() {
        while times[hi] - times[lo] >= width {
            lo += 1;
        }
        best = best.max(hi - lo + 1);
    }
    best
}

pub fn run(
    a: &Target,
    b: &Target,
    count: usize,
    sources: usize,
    threads: usize,
    wait: Duration,
) -> FailoverResult {
    let mut rng = Rng::new(41);
    let mut errors = Vec::new();
    let opts = crate::idle::IdleOptions {
        exchange: false,
        room_size: 1,
        sources,
    };
    let conns = crate::idle::open_all(a, count, &opts, &mut rng, &mut errors);
    let opened = conns.len();
    println!("FAILOVER_READY {opened}");
    let _ = std::io::stdout().flush();
    let deadline = Instant::now() + wait;
    let threads = threads.max(1);
    let mut shares: Vec<Share> = (0..threads)
        .map(|_| Share {
            conns: Vec::new(),
            closes: Vec::new(),
            reconnects: Vec::new(),
            held: Vec::new(),
            errors: Vec::new(),
        })
        .collect();
    for (i, c) in conns.into_iter().enumerate() {
        shares[i % threads].conns.push(Some(c));
    }
    let handles: Vec<_> = shares
        .into_iter()
        .map(|share| {
            let b = b.clone();
            std::thread::spawn(move || watch(share, &b, sources, deadline))
        })
        .collect();
    let shares: Vec<Share> = handles
        .into_iter()
        .map(|h| h.join().expect("thread"))
        .collect();
    let mut closes: Vec<(Instant, u16)> = Vec::new();
    let mut reconnects: Vec<Instant> = Vec::new();
    for s in &shares {
        closes.extend(&s.closes);
        reconnects.extend(&s.reconnects);
        errors.extend(s.errors.iter().take(10).cloned());
    }
    closes.sort();
    reconnects.sort();
    let mut codes = BTreeMap::new();
    for (_, c) in &closes {
        *codes.entry(*c).or_default() += 1;
    }
    let first = closes.first().map(|c| c.0);
    let span = |last: Option<Instant>| match (first, last) {
        (Some(f), Some(l)) => l.saturating_duration_since(f),
        _ => Duration::ZERO,
    };
    FailoverResult {
        opened,
        closed: closes.len(),
        reconnected: reconnects.len(),
        codes,
        peak_100ms: peak(&reconnects, Duration::from_millis(100)),
        peak_1s: peak(&reconnects, Duration::from_secs(1)),
        closes_span: span(closes.last().map(|c| c.0)),
        reconnects_span: span(reconnects.last().copied()),
        errors,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_counts_the_busiest_window() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let times = [at(0), at(10), at(20), at(150), at(160), at(1200)];
        assert_eq!(peak(&times, Duration::from_millis(100)), 3);
        assert_eq!(peak(&times, Duration::from_secs(1)), 5);
        assert_eq!(peak(&[], Duration::from_secs(1)), 0);
    }
}
