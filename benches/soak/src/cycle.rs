//! One cycle: open every session of the mix, run the groups at the same time
//! while sampling the server, drain (every reply due must arrive), close each
//! connection with a closing handshake, then wait until the server's open
//! fds are back to the resting count.

use crate::mix::{Group, Mix};
use std::thread;
use std::time::{Duration, Instant};
use weir_load::engine::{self, Control, ThreadResult, DONE, DRAIN, MEASURE};
use weir_load::sys;
use weir_load::ws::Rng;

/// What a cycle needs to know.
pub struct CycleSetup<'a> {
    pub addr: &'a str,
    pub pid: u32,
    /// How long the workload runs.
    pub load: Duration,
    /// How long the fds may take to return to `rest_fds` after the last close.
    pub settle: Duration,
    /// The server's fds before the first cycle: every cycle must return to it.
    pub rest_fds: usize,
}

/// Replies still due when draining must arrive within this (above the
/// engine's 3 s stall limit, so a late reply is reported as a stall).
const DRAIN_WAIT: Duration = Duration::from_secs(5);
/// A closing handshake (our close, the server's close, its FIN) must finish within this.
const CLOSE_WAIT: Duration = Duration::from_secs(5);
/// How often the server is sampled under load.
const SAMPLE_EVERY: Duration = Duration::from_millis(500);
/// Keep this many problem descriptions per cycle.
const KEEP_ERRORS: usize = 20;

/// What one cycle saw.
#[derive(Clone, Debug, Default)]
pub struct CycleStats {
    pub sessions: u64,
    /// Echo/guest replies and relay round trips (A→B→A), all verified.
    pub round_trips: u64,
    /// Payload bytes of every verified message received.
    pub payload_bytes: u64,
    pub mismatches: u64,
    /// Failed opens, dead or stalled connections, failed closing handshakes,
    /// fds not back at rest.
    pub failures: u64,
    /// Server RSS (KiB) and fds before the cycle.
    pub rest_rss_kib: u64,
    pub rest_fds: usize,
    /// The gateway's C heap in use (KiB) before the cycle, from its
    /// `/metrics`; `None` for a server that does not report it.
    pub rest_heap_kib: Option<u64>,
    /// Of that, receive buffers held or kept in the pools (KiB). The pools
    /// keep up to a fixed number of buffers, so they can grow by a buffer
    /// when more connections than ever before read at the same moment.
    pub rest_buffers_kib: Option<u64>,
    /// Highest samples under load.
    pub load_rss_kib: u64,
    pub load_fds: usize,
    /// fds after the last close, and how long they took to get there.
    pub after_fds: usize,
    pub settle: Duration,
    pub errors: Vec<String>,
}

impl CycleStats {
    /// Heap in use at rest outside the receive buffers: what a leak would grow.
    pub fn rest_heap_outside_buffers_kib(&self) -> Option<u64> {
        Some(
            self.rest_heap_kib?
                .saturating_sub(self.rest_buffers_kib.unwrap_or(0)),
        )
    }

    fn problem(&mut self, failure: bool, why: String) {
        if failure {
            self.failures += 1;
        }
        if self.errors.len() < KEEP_ERRORS {
            self.errors.push(why);
        }
    }
}

/// Server RSS in KiB and open fds; 0 when unreadable (the server is gone).
pub fn sample(pid: u32) -> (u64, usize) {
    (
        sys::proc_rss_kib(pid).unwrap_or(0),
        sys::proc_fd_count(pid).unwrap_or(0),
    )
}

/// The C heap in use (KiB) that weir's `GET /metrics` reports
/// (`weir_heap_bytes_in_use`), and how much of it is receive buffers (held
/// and pooled). Beside RSS it tells a leak (heap in use outside the buffer
/// pools grows) from the allocator keeping freed memory (RSS grows, heap
/// does not). `None` when the server has no such figure.
pub fn heap_kib(addr: &str) -> Option<(u64, u64)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut response = String::new();
    s.read_to_string(&mut response).ok()?;
    let metric = |name: &str| {
        response.lines().find_map(|l| {
            let bytes: u64 = l
                .strip_prefix(name)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()?;
            Some(bytes / 1024)
        })
    };
    let heap = metric("weir_heap_bytes_in_use")?;
    let buffers = metric("weir_receive_buffer_bytes_held").unwrap_or(0)
        + metric("weir_receive_buffer_bytes_pooled").unwrap_or(0);
    Some((heap, buffers))
}

/// Runs one cycle of `mix` against the server.
pub fn run(mix: &Mix, setup: &CycleSetup, rng: &mut Rng) -> CycleStats {
    let mut st = CycleStats::default();
    (st.rest_rss_kib, st.rest_fds) = sample(setup.pid);
    // After the fd count: the scrape's own connection is closed by the
    // server (Connection: close) before it is read to the end.
    if let Some((heap, buffers)) = heap_kib(setup.addr) {
        st.rest_heap_kib = Some(heap);
        st.rest_buffers_kib = Some(buffers);
    }
    st.load_rss_kib = st.rest_rss_kib;
    st.load_fds = st.rest_fds;

    // Open everything first, so the groups load the server together.
    let mut groups: Vec<Group> = Vec::with_capacity(mix.groups.len());
    let mut open_failed = false;
    for plan in &mix.groups {
        let (g, err) = plan.open(setup.addr, rng);
        st.sessions += g.conns.len() as u64;
        groups.push(g);
        if let Some(why) = err {
            st.problem(true, why);
            open_failed = true;
            break;
        }
    }

    if !open_failed {
        let results = load(&mut groups, setup, &mut st);
        for (g, r) in groups.iter_mut().zip(&results) {
            st.round_trips += r.msgs;
            st.failures += r.failed_conns;
            // Mismatches are counted from the checkers after closing; the
            // thread's error list says which connection failed how.
            for e in &r.errors {
                st.problem(false, format!("{} {e}", g.spec.name));
            }
            close(g, &mut st);
        }
    }
    for g in &groups {
        for c in &g.conns {
            st.mismatches += c.check.mismatches;
            st.payload_bytes += c.check.bytes;
        }
    }
    // Our sockets go now; on a failed open they go without a handshake.
    drop(groups);
    settle(setup, &mut st);
    st
}

/// Runs the groups for `setup.load`, sampling the server, then drains.
fn load(groups: &mut [Group], setup: &CycleSetup, st: &mut CycleStats) -> Vec<ThreadResult> {
    let ctl = Control::default();
    // Everything is counted: a soak has no warm-up inside a cycle.
    ctl.set(MEASURE);
    thread::scope(|sc| {
        let handles: Vec<_> = groups
            .iter_mut()
            .map(|g| {
                let (ctl, load) = (&ctl, g.spec.load);
                sc.spawn(move || engine::run(&mut g.conns, load, ctl))
            })
            .collect();
        let end = Instant::now() + setup.load;
        while Instant::now() < end {
            thread::sleep(SAMPLE_EVERY.min(end.saturating_duration_since(Instant::now())));
            let (rss, fds) = sample(setup.pid);
            st.load_rss_kib = st.load_rss_kib.max(rss);
            st.load_fds = st.load_fds.max(fds);
        }
        ctl.set(DRAIN);
        let drain_end = Instant::now() + DRAIN_WAIT;
        while Instant::now() < drain_end && !handles.iter().all(|h| h.is_finished()) {
            thread::sleep(Duration::from_millis(5));
        }
        ctl.set(DONE);
        handles
            .into_iter()
            .map(|h| h.join().expect("engine thread panicked"))
            .collect()
    })
}

/// Closing handshake on every live connection of a group, in order (a relay's
/// A first: the server then closes its B with 1001).
fn close(g: &mut Group, st: &mut CycleStats) {
    for i in 0..g.conns.len() {
        let by_server = g.closed_by_server(i);
        let name = g.spec.name;
        let c = &mut g.conns[i];
        if c.dead.is_some() {
            continue; // Already counted as a failure by the engine.
        }
        let errors_before = c.check.errors.len();
        let want = if by_server { 1001 } else { 1000 };
        match c.close_handshake(!by_server, CLOSE_WAIT) {
            Ok(code) if code == want => {}
            Ok(code) => st.problem(
                true,
                format!("{name} conn {i}: server closed with code {code}, expected {want}"),
            ),
            Err(e) => st.problem(true, format!("{name} conn {i}: closing handshake: {e}")),
        }
        for e in &c.check.errors[errors_before..] {
            st.problem(false, format!("{name} conn {i} while closing: {e}"));
        }
    }
}

/// Waits until the server's fds are back at the resting count.
fn settle(setup: &CycleSetup, st: &mut CycleStats) {
    let t0 = Instant::now();
    loop {
        let fds = sys::proc_fd_count(setup.pid).unwrap_or(0);
        st.after_fds = fds;
        st.settle = t0.elapsed();
        if fds == setup.rest_fds {
            return;
        }
        if st.settle >= setup.settle {
            st.problem(
                true,
                format!(
                    "server has {fds} fds {:.1}s after the last close, {} at rest",
                    st.settle.as_secs_f64(),
                    setup.rest_fds
                ),
            );
            return;
        }
        thread::sleep(Duration::from_millis(20));
    }
}
