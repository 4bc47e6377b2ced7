//! The `connect` mode: each worker slot repeatedly connects, upgrades
//! (checking Sec-WebSocket-Accept), sends close 1000 and waits for the
//! server's close frame, then drops the socket with an RST (SO_LINGER 0) so
//! the client side does not pile up TIME_WAIT sockets and run out of ports.
//! Over `wss://` each cycle is a full TLS handshake (no session resumption)
//! before the upgrade.

use crate::conn::Target;
use crate::engine::{Control, ThreadResult, DONE, MEASURE};
use crate::payload::{Checker, Expect, Template, MASK_KEY};
use crate::stream::Stream;
use crate::sys::{self, Epoll};
use crate::ws::{self, Parser, Rng, OP_CLOSE};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, FromRawFd};
use std::time::{Duration, Instant};

enum State {
    /// Non-blocking connect issued; the request is written once writable.
    Connecting,
    /// Request sent; reading the response head.
    Upgrading,
    /// Close sent; waiting for the server's close frame.
    Closing,
}

struct Slot {
    stream: Stream,
    state: State,
    key: String,
    head: Vec<u8>,
    parser: Parser,
    check: Checker,
    started: Instant,
    /// Distinguishes this socket's epoll events from a previous one's.
    generation: u32,
}

/// Starts a non-blocking TCP connect.
fn start_connect(addr: &SocketAddr) -> io::Result<TcpStream> {
    let SocketAddr::V4(v4) = addr else {
        return Err(io::Error::other("connect mode supports IPv4 only"));
    };
    unsafe {
        let fd = libc::socket(
            libc::AF_INET,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        );
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let stream = TcpStream::from_raw_fd(fd);
        let sa = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: v4.port().to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from_ne_bytes(v4.ip().octets()),
            },
            sin_zero: [0; 8],
        };
        let r = libc::connect(
            fd,
            &sa as *const _ as *const libc::sockaddr,
            std::mem::size_of_val(&sa) as u32,
        );
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINPROGRESS) {
                return Err(e);
            }
        }
        stream.set_nodelay(true).ok();
        Ok(stream)
    }
}

/// Closes with RST instead of FIN (no TIME_WAIT on our side).
fn reset_close(s: Stream) {
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            &l as *const _ as *const libc::c_void,
            std::mem::size_of_val(&l) as u32,
        );
    }
}

/// Runs `slots` concurrent handshake loops until the phase is DONE.
pub fn run(target: &Target, slots: usize, seed: u64, ctl: &Control) -> ThreadResult {
    let mut res = ThreadResult::default();
    let addr = match target
        .addr
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
    {
        Some(a) => a,
        None => {
            res.errors.push(format!("cannot resolve {}", target.addr));
            res.failed_conns += 1;
            return res;
        }
    };
    let ep = Epoll::new().expect("epoll_create1");
    let mut rng = Rng::new(seed);
    // The Checker is only used for its close-frame handling; nothing else is due.
    let dummy = Template::new(0, false, 0);
    let close_frame = ws::client_frame(OP_CLOSE, &1000u16.to_be_bytes(), MASK_KEY);
    let mut table: Vec<Option<Slot>> = (0..slots).map(|_| None).collect();
    let mut buf = vec![0u8; 16 * 1024];
    let mut events = sys::empty_events(1024);
    let mut generation = 0u32;

    let mut open =
        |i: usize, table: &mut Vec<Option<Slot>>, res: &mut ThreadResult, rng: &mut Rng| loop {
            if ctl.get() == DONE {
                return;
            }
            match start_connect(&addr).and_then(|s| target.wrap(s).map_err(io::Error::other)) {
                Ok(stream) => {
                    generation = generation.wrapping_add(1);
                    let token = (generation as u64) << 32 | i as u64;
                    if let Err(e) = ep.add(stream.as_raw_fd(), token, sys::IN | sys::OUT | sys::ET)
                    {
                        res.errors.push(format!("epoll_ctl: {e}"));
                        return;
                    }
                    table[i] = Some(Slot {
                        stream,
                        state: State::Connecting,
                        key: ws::new_key(rng),
                        head: Vec::new(),
                        parser: Parser::default(),
                        check: Checker::new(Expect::Pattern(dummy)),
                        started: Instant::now(),
                        generation,
                    });
                    return;
                }
                Err(e) => {
                    res.mismatches += 1;
                    if res.errors.len() < 20 {
                        res.errors.push(format!("connect: {e}"));
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        };

    for i in 0..slots {
        open(i, &mut table, &mut res, &mut rng);
    }
    loop {
        let n = ep.wait(&mut events, 10);
        let phase = ctl.get();
        if phase == DONE {
            break;
        }
        for ev in &events[..n] {
            let i = (ev.u64 & 0xffff_ffff) as usize;
            let gen = (ev.u64 >> 32) as u32;
            let Some(slot) = table[i].as_mut() else {
                continue;
            };
            if slot.generation != gen {
                continue; // An event of the socket this slot had before.
            }
            let outcome = step(slot, &mut buf, &target.addr, &target.path, &close_frame);
            match outcome {
                Step::Wait => continue,
                Step::Done => {
                    if phase == MEASURE {
                        res.msgs += 1;
                        res.hist.record(slot.started.elapsed().as_nanos() as u64);
                    }
                }
                Step::Fail(why) => {
                    res.mismatches += 1;
                    if res.errors.len() < 20 {
                        res.errors.push(why);
                    }
                }
            }
            let old = table[i].take().unwrap();
            reset_close(old.stream);
            open(i, &mut table, &mut res, &mut rng);
        }
    }
    res
}

enum Step {
    Wait,
    Done,
    Fail(String),
}

/// Advances one handshake as far as the socket allows.
fn step(s: &mut Slot, buf: &mut [u8], host: &str, path: &str, close_frame: &[u8]) -> Step {
    loop {
        match s.state {
            State::Connecting => {
                let req = ws::handshake_request(host, path, &s.key);
                match s.stream.write(req.as_bytes()) {
                    Ok(n) if n == req.len() => s.state = State::Upgrading,
                    Ok(_) => return Step::Fail("short write of the handshake request".into()),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Step::Wait,
                    Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => return Step::Wait,
                    Err(e) => return Step::Fail(format!("connect/send: {e}")),
                }
            }
            State::Upgrading | State::Closing => {
                // TLS records the socket did not take before (the
                // ClientHello while connecting).
                if let Err(e) = s.stream.push_pending() {
                    return Step::Fail(format!("send: {e}"));
                }
                let n = match s.stream.read(buf) {
                    Ok(0) => return Step::Fail("server closed the connection early".into()),
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Step::Wait,
                    Err(e) => return Step::Fail(format!("read: {e}")),
                };
                let mut data = &buf[..n];
                if let State::Upgrading = s.state {
                    s.head.extend_from_slice(data);
                    let Some(end) = ws::head_end(&s.head) else {
                        if s.head.len() > 16 * 1024 {
                            return Step::Fail("response head over 16 KiB".into());
                        }
                        continue;
                    };
                    if let Err(e) = ws::check_response(&s.head[..end], &s.key) {
                        return Step::Fail(e);
                    }
                    if let Err(e) = s.stream.write_all(close_frame) {
                        return Step::Fail(format!("send close: {e}"));
                    }
                    s.state = State::Closing;
                    let extra = s.head.split_off(end);
                    if extra.is_empty() {
                        continue;
                    }
                    if let Err(e) = s.parser.feed(&extra, &mut s.check) {
                        return Step::Fail(format!("protocol error: {e}"));
                    }
                    data = &[];
                }
                if let Err(e) = s.parser.feed(data, &mut s.check) {
                    return Step::Fail(format!("protocol error: {e}"));
                }
                if s.check.mismatches > 0 {
                    return Step::Fail(format!(
                        "data message instead of close: {:?}",
                        s.check.errors
                    ));
                }
                match s.check.close_code {
                    Some(1000) | Some(0) => return Step::Done,
                    Some(c) => return Step::Fail(format!("close reply code {c}, expected 1000")),
                    None => continue,
                }
            }
        }
    }
}
