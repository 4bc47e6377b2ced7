//! The `storm` mode: C clients connect at once and upgrade, as after a
//! restart or a network blip when every client reconnects together.
//!
//! All C connects are issued back to back (non-blocking, from `sources`
//! loopback addresses so the ports of one address are not the limit),
//! then one epoll loop sends each upgrade request as soon as its connect
//! completes and reads each response. Every client must get its 101: a
//! refused or reset connect, a non-101 status (503) or a connection closed
//! before its response is an error, never a slower figure. The server's
//! CPU is read from /proc over the whole storm (first connect to last 101)
//! and divided by the upgrades; each client's time from connect to 101 is
//! its upgrade latency, which on a small machine mostly measures the
//! listen backlog (SYNs past it wait for the client's retransmission).

use crate::conn::Target;
use crate::hist::Histogram;
use crate::sys::{self, Epoll};
use crate::ws::{self, Rng};
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// How long the storm may take before the clients still waiting count as
/// failed: a SYN dropped by a full backlog is retried after 1, 3, 7, 15 s.
const STORM_DEADLINE: Duration = Duration::from_secs(60);

pub struct StormResult {
    /// Clients whose upgrade got its 101.
    pub upgraded: usize,
    /// First connect to last 101 (or to the deadline).
    pub window: Duration,
    pub server_cpu_ns: Option<u64>,
    pub client_cpu_ns: u64,
    /// Connect → 101, per upgraded client, in nanoseconds.
    pub latency: Histogram,
    /// Counts by kind of failure, then the first few in full.
    pub refused: usize,
    pub reset: usize,
    pub rejected: usize,
    pub timed_out: usize,
    pub errors: Vec<String>,
}

enum State {
    Connecting,
    /// The request is out; the response head is being read.
    Reading {
        head: Vec<u8>,
    },
    Upgraded,
    Failed,
}

struct Client {
    sock: TcpStream,
    key: String,
    started: Instant,
    state: State,
}

enum Failure {
    Refused(String),
    Reset(String),
    Rejected(String),
}

/// Runs one storm of `count` clients against `target` (plain `ws://`).
pub fn run(
    target: &Target,
    count: usize,
    sources: usize,
    server_pid: Option<u32>,
) -> Result<StormResult, String> {
    if target.secure {
        return Err("storm: wss:// is not supported (plain ws:// only)".into());
    }
    let addr = target.resolve()?;
    sys::raise_nofile();
    let epoll = Epoll::new().map_err(|e| format!("epoll: {e}"))?;
    let mut rng = Rng::new(0x570a);
    let mut clients = Vec::with_capacity(count);
    let mut r = StormResult {
        upgraded: 0,
        window: Duration::ZERO,
        server_cpu_ns: None,
        client_cpu_ns: 0,
        latency: Histogram::default(),
        refused: 0,
        reset: 0,
        rejected: 0,
        timed_out: 0,
        errors: Vec::new(),
    };

    let server_before = server_pid.and_then(|p| sys::proc_cpu_ns(p).ok());
    let client_before = sys::self_cpu_ns();
    let started = Instant::now();
    for i in 0..count {
        let source = Ipv4Addr::new(127, 0, 0, 1 + (i % sources.max(1)) as u8);
        let sock = connect_from(addr, source.into())
            .map_err(|e| format!("client {i}: connect from {source}: {e}"))?;
        epoll
            .add(
                sock.as_raw_fd(),
                i as u64,
                sys::IN | sys::OUT | sys::ET | sys::RDHUP,
            )
            .map_err(|e| format!("epoll add: {e}"))?;
        clients.push(Client {
            sock,
            key: ws::new_key(&mut rng),
            started: Instant::now(),
            state: State::Connecting,
        });
    }

    let request_for = |key: &str| ws::handshake_request(&target.host, &target.path, key);
    let mut pending = count;
    let mut events = sys::empty_events(1024);
    let mut buf = vec![0u8; 4096];
    let deadline = started + STORM_DEADLINE;
    while pending > 0 && Instant::now() < deadline {
        let n = epoll.wait(&mut events, 100);
        for ev in &events[..n] {
            let (i, bits) = (ev.u64 as usize, ev.events);
            let c = &mut clients[i];
            let outcome = step(c, bits, &request_for, &mut buf);
            match outcome {
                Ok(false) => {}
                Ok(true) => {
                    r.latency.record(c.started.elapsed().as_nanos() as u64);
                    r.upgraded += 1;
                    pending -= 1;
                }
                Err(failure) => {
                    c.state = State::Failed;
                    pending -= 1;
                    let text = match failure {
                        Failure::Refused(t) => {
                            r.refused += 1;
                            t
                        }
                        Failure::Reset(t) => {
                            r.reset += 1;
                            t
                        }
                        Failure::Rejected(t) => {
                            r.rejected += 1;
                            t
                        }
                    };
                    if r.errors.len() < 10 {
                        r.errors.push(format!("client {i}: {text}"));
                    }
                }
            }
        }
    }
    r.window = started.elapsed();
    r.client_cpu_ns = sys::self_cpu_ns() - client_before;
    r.server_cpu_ns = server_before.and_then(|b| {
        server_pid
            .and_then(|p| sys::proc_cpu_ns(p).ok())
            .map(|a| a.saturating_sub(b))
    });
    r.timed_out = pending;
    if pending > 0 {
        r.errors.push(format!(
            "{pending} clients had no response within {} s",
            STORM_DEADLINE.as_secs()
        ));
    }
    Ok(r)
}

/// A non-blocking connect from `source` (port chosen at connect time, so
/// one source address's ports serve many destinations).
fn connect_from(addr: SocketAddr, source: IpAddr) -> io::Result<TcpStream> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_nonblocking(true)?;
    socket.set_tcp_nodelay(true)?;
    // IP_BIND_ADDRESS_NO_PORT: bind picks the address now and the port at
    // connect, so 19,000 binds do not exhaust the ephemeral range.
    let on: libc::c_int = 1;
    unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_BIND_ADDRESS_NO_PORT,
            &on as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
    socket.bind(&SocketAddr::new(source, 0).into())?;
    match socket.connect(&addr.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return Err(e),
    }
    Ok(socket.into())
}

/// Advances one client on its readiness `bits`: Ok(true) when its 101 has
/// just arrived.
fn step(
    c: &mut Client,
    bits: u32,
    request_for: &dyn Fn(&str) -> String,
    buf: &mut [u8],
) -> Result<bool, Failure> {
    if matches!(c.state, State::Connecting) {
        if bits & (sys::OUT | sys::ERR) == 0 {
            return Ok(false);
        }
        match c.sock.take_error() {
            Ok(None) => {}
            Ok(Some(e)) | Err(e) => return Err(classify("connect", e)),
        }
        let request = request_for(&c.key);
        // A fresh socket's send buffer takes the ~200-byte request whole.
        match c.sock.write(request.as_bytes()) {
            Ok(n) if n == request.len() => {}
            Ok(n) => {
                return Err(Failure::Rejected(format!(
                    "request: short write of {n} bytes"
                )));
            }
            Err(e) => return Err(classify("request", e)),
        }
        c.state = State::Reading { head: Vec::new() };
    }
    let State::Reading { head } = &mut c.state else {
        return Ok(false);
    };
    loop {
        match c.sock.read(buf) {
            Ok(0) => {
                return Err(Failure::Reset(
                    "closed by the server before its response".into(),
                ));
            }
            Ok(n) => {
                head.extend_from_slice(&buf[..n]);
                if let Some(end) = ws::head_end(head) {
                    ws::check_response(&head[..end], &c.key).map_err(Failure::Rejected)?;
                    c.state = State::Upgraded;
                    return Ok(true);
                }
                if head.len() > 16 << 10 {
                    return Err(Failure::Rejected("response head over 16 KiB".into()));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(classify("response", e)),
        }
    }
}

fn classify(what: &str, e: io::Error) -> Failure {
    let text = format!("{what}: {e}");
    match e.kind() {
        io::ErrorKind::ConnectionRefused => Failure::Refused(text),
        io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe => Failure::Reset(text),
        _ => Failure::Rejected(text),
    }
}
