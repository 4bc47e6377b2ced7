//! Runs the real `weir-load` binary against small WebSocket servers started
//! inside the test (thread per connection, std sockets): correct ones must
//! give 0 mismatches and exit 0; deliberately wrong ones (a corrupted byte,
//! an echo on a relay route, a wrong JSON answer) must be caught and make
//! the exit code non-zero, so the verification can fail. The same servers
//! behind a TLS front and an HTTP/2 front (`fronts/`) check `wss://` and
//! `--h2`.

mod fronts;

use base64::Engine as _;
use sha1::{Digest, Sha1};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::thread;

#[derive(Clone, Copy, PartialEq)]
enum Behaviour {
    /// Echo every message unchanged.
    Echo,
    /// Echo, but flip one payload byte of every 50th message.
    CorruptEvery50,
    /// Pair connections in arrival order and forward to the partner.
    Relay,
    /// Every connection joins one room; a message goes to every other member.
    Chat,
    /// {"number": n} → n+1 if odd, n+2 if even; Int32 likewise.
    Rule,
    /// Always n+1 (wrong for even n).
    WrongRule,
}

/// Reads one client frame: (fin+opcode byte, unmasked payload).
fn read_frame(s: &mut TcpStream) -> Option<(u8, Vec<u8>)> {
    let mut h = [0u8; 2];
    s.read_exact(&mut h).ok()?;
    let len = match h[1] & 0x7f {
        126 => {
            let mut b = [0u8; 2];
            s.read_exact(&mut b).ok()?;
            u16::from_be_bytes(b) as usize
        }
        127 => {
            let mut b = [0u8; 8];
            s.read_exact(&mut b).ok()?;
            u64::from_be_bytes(b) as usize
        }
        n => n as usize,
    };
    assert!(h[1] & 0x80 != 0, "client frames must be masked");
    let mut key = [0u8; 4];
    s.read_exact(&mut key).ok()?;
    let mut p = vec![0u8; len];
    s.read_exact(&mut p).ok()?;
    for (i, b) in p.iter_mut().enumerate() {
        *b ^= key[i % 4];
    }
    Some((h[0], p))
}

fn frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0x80 | opcode];
    if payload.len() < 126 {
        f.push(payload.len() as u8);
    } else if payload.len() <= 0xffff {
        f.push(126);
        f.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    } else {
        f.push(127);
        f.extend_from_slice(&(payload.len() as u64).to_be_bytes());
    }
    f.extend_from_slice(payload);
    f
}

fn handshake(s: &mut TcpStream) -> Option<()> {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut b).ok()?;
        head.push(b[0]);
    }
    let text = String::from_utf8(head).ok()?;
    let key = text
        .lines()
        .find_map(|l| {
            l.strip_prefix("Sec-WebSocket-Key: ")
                .or_else(|| l.strip_prefix("sec-websocket-key: "))
        })?
        .trim();
    let mut h = Sha1::new();
    h.update(key.as_bytes());
    h.update(b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11");
    let accept = base64::engine::general_purpose::STANDARD.encode(h.finalize());
    let resp = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n"
    );
    s.write_all(resp.as_bytes()).ok()
}

type Peer = Arc<Mutex<TcpStream>>;

struct Shared {
    waiting: Option<(Peer, std::sync::mpsc::Sender<Peer>)>,
    room: Vec<Peer>,
}

fn rule_reply(opcode: u8, p: &[u8], wrong: bool) -> Vec<u8> {
    let next = |n: u64| if wrong || n % 2 == 1 { n + 1 } else { n + 2 };
    if opcode & 0x0f == 1 {
        let s = std::str::from_utf8(p).unwrap();
        let digits: String = s.chars().filter(|c| c.is_ascii_digit()).collect();
        frame(
            1,
            format!("{{\"number\":{}}}", next(digits.parse().unwrap())).as_bytes(),
        )
    } else {
        let n = u32::from_le_bytes(p.try_into().unwrap()) as u64;
        frame(2, &(next(n) as u32).to_le_bytes())
    }
}

/// A relay connection's partner: known at accept (it is the second of its
/// pair), or sent once the second arrives.
enum Partner {
    Known(Peer),
    Later(std::sync::mpsc::Receiver<Peer>),
}

/// Pairs relay connections in accept order, before their handshakes, as
/// weir does: weir-load opens a pair's two connections one after the other,
/// but their threads may reach a shared lock in either order, and pairing
/// there crossed pairs now and then.
fn pair_at_accept(me: &Peer, shared: &Mutex<Shared>) -> Partner {
    let mut sh = shared.lock().unwrap();
    if let Some((other, tx)) = sh.waiting.take() {
        tx.send(me.clone()).unwrap();
        Partner::Known(other)
    } else {
        let (tx, rx) = std::sync::mpsc::channel();
        sh.waiting = Some((me.clone(), tx));
        Partner::Later(rx)
    }
}

fn serve_conn(
    mut s: TcpStream,
    how: Behaviour,
    shared: Arc<Mutex<Shared>>,
    me: Peer,
    paired: Option<Partner>,
) {
    if handshake(&mut s).is_none() {
        return;
    }
    s.set_nodelay(true).ok();
    let partner: Option<Peer> = match how {
        Behaviour::Relay => match paired.expect("relay connections are paired at accept") {
            Partner::Known(p) => Some(p),
            Partner::Later(rx) => Some(rx.recv().unwrap()),
        },
        Behaviour::Chat => {
            shared.lock().unwrap().room.push(me.clone());
            None
        }
        _ => None,
    };
    let mut count = 0u64;
    while let Some((b0, p)) = read_frame(&mut s) {
        let op = b0 & 0x0f;
        let reply = match op {
            0x8 => {
                let _ = me
                    .lock()
                    .unwrap()
                    .write_all(&frame(0x8, &p[..p.len().min(2)]));
                return;
            }
            0x9 => frame(0xA, &p),
            0x1 | 0x2 => {
                count += 1;
                match how {
                    Behaviour::Echo => frame(op, &p),
                    Behaviour::CorruptEvery50 => {
                        let mut p = p;
                        if count.is_multiple_of(50) {
                            let last = p.len() - 1;
                            p[last] ^= 0x01;
                        }
                        frame(op, &p)
                    }
                    Behaviour::Relay => {
                        let _ = partner
                            .as_ref()
                            .unwrap()
                            .lock()
                            .unwrap()
                            .write_all(&frame(op, &p));
                        continue;
                    }
                    Behaviour::Chat => {
                        let f = frame(op, &p);
                        let members = shared.lock().unwrap().room.clone();
                        for m in members.iter().filter(|m| !Arc::ptr_eq(m, &me)) {
                            let _ = m.lock().unwrap().write_all(&f);
                        }
                        continue;
                    }
                    Behaviour::Rule | Behaviour::WrongRule => {
                        rule_reply(op, &p, how == Behaviour::WrongRule)
                    }
                }
            }
            _ => continue,
        };
        if me.lock().unwrap().write_all(&reply).is_err() {
            return;
        }
    }
}

/// Starts a server on a free port; returns its port. Threads end with the test process.
fn start(how: Behaviour) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let shared = Arc::new(Mutex::new(Shared {
        waiting: None,
        room: Vec::new(),
    }));
    thread::spawn(move || {
        for s in l.incoming().flatten() {
            let shared = shared.clone();
            let me: Peer = Arc::new(Mutex::new(s.try_clone().unwrap()));
            let paired = matches!(how, Behaviour::Relay).then(|| pair_at_accept(&me, &shared));
            thread::spawn(move || serve_conn(s, how, shared, me, paired));
        }
    });
    port
}

struct Run {
    ok: bool,
    result: String,
    stdout: String,
}

impl Run {
    /// A numeric field of the RESULT line.
    fn num(&self, key: &str) -> f64 {
        let pat = format!("\"{key}\":");
        let at = self
            .result
            .find(&pat)
            .unwrap_or_else(|| panic!("no {key} in {}", self.result))
            + pat.len();
        let end = self.result[at..].find([',', '}']).unwrap() + at;
        self.result[at..end].parse().unwrap_or(f64::NAN)
    }
}

fn load(args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_weir-load"))
        .args(args)
        .args(["--warmup", "0.2s", "--duration", "0.6s"])
        .output()
        .expect("run weir-load");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let result = stdout
        .lines()
        .find(|l| l.starts_with("RESULT "))
        .unwrap_or("")
        .to_string();
    assert!(
        !result.is_empty(),
        "no RESULT line:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Run {
        ok: out.status.success(),
        result,
        stdout,
    }
}

fn url(port: u16, path: &str) -> String {
    format!("ws://127.0.0.1:{port}{path}")
}

#[test]
fn correct_echo_passes_in_every_shape() {
    let port = start(Behaviour::Echo);
    let pid = std::process::id().to_string();
    for args in [
        vec!["-c", "4", "-p", "8", "-s", "64"],
        vec!["-c", "2", "-p", "2", "-s", "70000", "--text"],
        vec!["-c", "1", "-p", "1", "-s", "3"],
        vec!["-c", "2", "-p", "4", "-s", "1MiB"],
    ] {
        let u = url(port, "/echo");
        let mut a = vec!["echo", "--url", &u, "--server-pid", &pid];
        a.extend(args.iter().copied());
        let r = load(&a);
        assert!(r.ok, "{}", r.stdout);
        assert_eq!(r.num("mismatches"), 0.0);
        assert!(r.num("msgs") > 0.0);
        assert!(r.num("server_cpu_ns_per_msg") > 0.0, "{}", r.result);
    }
}

#[test]
fn corrupted_byte_is_caught() {
    let port = start(Behaviour::CorruptEvery50);
    let u = url(port, "/echo");
    let r = load(&["echo", "--url", &u, "-c", "2", "-p", "4", "-s", "200"]);
    assert!(
        !r.ok,
        "a corrupting server must fail the run:\n{}",
        r.stdout
    );
    assert!(r.num("mismatches") > 0.0);
    assert!(r.stdout.contains("payload differs"), "{}", r.stdout);
}

#[test]
fn relay_passes_and_echo_on_relay_route_is_caught() {
    let port = start(Behaviour::Relay);
    let u = url(port, "/relay");
    let r = load(&["relay", "--url", &u, "-c", "3", "-s", "16"]);
    assert!(r.ok, "{}", r.stdout);
    assert_eq!(r.num("mismatches"), 0.0);
    assert!(r.num("msgs") > 0.0);

    let port = start(Behaviour::Echo);
    let u = url(port, "/relay");
    let r = load(&["relay", "--url", &u, "-c", "2", "-s", "16"]);
    assert!(!r.ok, "an echo must not pass as a relay:\n{}", r.stdout);
    assert!(r.num("mismatches") > 0.0);
}

#[test]
fn json_and_int32_rules_are_checked() {
    let port = start(Behaviour::Rule);
    for mode in ["json", "binary"] {
        for flow in ["--sync", "--async"] {
            let r = load(&[mode, "--url", &url(port, "/x"), "-c", "3", flow]);
            assert!(r.ok, "{mode} {flow}: {}", r.stdout);
            assert_eq!(r.num("mismatches"), 0.0);
        }
    }
    let port = start(Behaviour::WrongRule);
    for mode in ["json", "binary"] {
        let r = load(&[mode, "--url", &url(port, "/x"), "-c", "2", "--sync"]);
        assert!(!r.ok, "{mode}: n+1 for even n must fail:\n{}", r.stdout);
        assert!(r.num("mismatches") > 0.0);
    }
}

#[test]
fn fanout_delivers_in_order() {
    let port = start(Behaviour::Chat);
    let r = load(&[
        "fanout",
        "--url",
        &url(port, "/chat/bench"),
        "-c",
        "3",
        "-s",
        "32",
        "-p",
        "16",
    ]);
    assert!(r.ok, "{}", r.stdout);
    assert_eq!(r.num("mismatches"), 0.0);
    assert_eq!(r.num("lost"), 0.0);
    // An echo server sends the publisher its own messages back: caught.
    let port = start(Behaviour::Echo);
    let r = load(&[
        "fanout",
        "--url",
        &url(port, "/chat/bench"),
        "-c",
        "2",
        "-s",
        "32",
    ]);
    assert!(!r.ok, "{}", r.stdout);
}

#[test]
fn connect_and_idle() {
    let port = start(Behaviour::Echo);
    let r = load(&["connect", "--url", &url(port, "/echo"), "-c", "4"]);
    assert!(r.ok, "{}", r.stdout);
    assert!(r.num("msgs") > 10.0, "{}", r.result);
    let pid = std::process::id().to_string();
    let r = load(&[
        "idle",
        "--url",
        &url(port, "/echo"),
        "-c",
        "40",
        "--server-pid",
        &pid,
    ]);
    assert!(r.ok, "{}", r.stdout);
    assert_eq!(r.num("pongs"), 40.0);
    assert!(r.num("rss_after_kib") > 0.0);
}

/// wss:// and WebSockets over HTTP/2 (h2c, and TLS with ALPN h2, several
/// streams per connection, messages past the default 64 KiB window): a
/// correct echo passes with every byte checked, and a byte corrupted behind
/// the front is caught, so the checks hold on both transports.
#[test]
fn tls_and_h2_echo_are_verified() {
    use fronts::Front;
    for front in [Front::Tls, Front::H2c, Front::H2Tls] {
        for (how, correct) in [(Behaviour::Echo, true), (Behaviour::CorruptEvery50, false)] {
            let (port, cert) = fronts::start(front, start(how));
            let scheme = if cert.is_some() { "wss" } else { "ws" };
            let u = format!("{scheme}://127.0.0.1:{port}/echo");
            let cert = cert.map(|c| c.display().to_string());
            for size in ["200", "70000"] {
                let mut a = vec!["echo", "--url", &u, "-c", "6", "-p", "3", "-s", size];
                if let Some(c) = &cert {
                    a.extend(["--ca", c]);
                }
                if front != Front::Tls {
                    a.extend(["--h2", "--streams", "4"]);
                }
                let r = load(&a);
                let label = format!("front {}, -s {size}", u);
                if correct {
                    assert!(r.ok, "{label}: {}", r.stdout);
                    assert_eq!(r.num("mismatches"), 0.0, "{label}");
                    assert!(r.num("msgs") > 0.0, "{label}");
                } else {
                    assert!(!r.ok, "{label}: a corrupting server must fail the run");
                    assert!(r.num("mismatches") > 0.0, "{label}");
                }
            }
        }
    }
}

/// Over TLS: relay pairs and handshake cycles work, --insecure accepts the
/// throwaway certificate, and a certificate the client does not trust
/// fails the run (so --ca really verifies).
#[test]
fn tls_relay_connect_and_trust() {
    use fronts::Front;
    let (relay, cert) = fronts::start(Front::Tls, start(Behaviour::Relay));
    let cert = cert.unwrap().display().to_string();
    let u = format!("wss://127.0.0.1:{relay}/relay");
    let r = load(&["relay", "--url", &u, "-c", "3", "-s", "16", "--ca", &cert]);
    assert!(r.ok, "{}", r.stdout);
    assert!(r.num("msgs") > 0.0);

    let (echo, other_cert) = fronts::start(Front::Tls, start(Behaviour::Echo));
    let u = format!("wss://127.0.0.1:{echo}/echo");
    let r = load(&["connect", "--url", &u, "-c", "4", "--insecure"]);
    assert!(r.ok, "{}", r.stdout);
    assert!(r.num("msgs") > 10.0, "{}", r.result);
    let r = load(&["echo", "--url", &u, "-c", "2", "--insecure"]);
    assert!(r.ok, "{}", r.stdout);
    // The relay front's certificate is not the echo front's.
    assert_ne!(other_cert.unwrap().display().to_string(), cert);
    let out = Command::new(env!("CARGO_BIN_EXE_weir-load"))
        .args(["echo", "--url", &u, "-c", "1", "--ca", &cert])
        .args(["--warmup", "0.1s", "--duration", "0.1s"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("certificate"), "{err}");
}
