//! The `deflate` mode: echo of JSON-like text with permessage-deflate
//! (RFC 7692). Each connection offers the extension, compresses what it
//! sends (one frame, RSV1, sync tail dropped), inflates what comes back
//! and compares it with what it sent; bytes on the wire are counted each
//! way. The loop is simple on purpose (blocking sockets, rounds of `-p`
//! messages per connection): the figure that matters is the server's CPU
//! per message and the bytes on the wire, not the generator's speed.

use crate::engine::{Control, ThreadResult, DONE, MEASURE};
use crate::ws::{self, Rng};
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress};
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// The tail a message's deflate data loses on the wire (§7.2.1).
const SYNC_TAIL: [u8; 4] = [0, 0, 0xFF, 0xFF];
const MASK: [u8; 4] = [0x5a, 0x17, 0xc3, 0x81];

const NAMES: [&str; 12] = [
    "alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy", "mallory",
    "oscar",
];
const EVENTS: [&str; 5] = ["trade", "quote", "cancel", "fill", "heartbeat"];
const SYMBOLS: [&str; 6] = ["BTC-USD", "ETH-USD", "SOL-USD", "EUR-USD", "AAPL", "MSFT"];

/// A JSON-like message of `size` bytes: an array of event records whose
/// ids, timestamps, names, prices and sizes vary (repetitive in shape, not
/// constant), as a market-data or chat feed sends them.
pub fn json_message(rng: &mut Rng, size: usize, ts: &mut u64) -> Vec<u8> {
    let mut s = String::with_capacity(size + 256);
    s.push('[');
    while s.len() < size {
        let r = rng.next_u64();
        *ts += r % 50;
        let name = NAMES[(r >> 8) as usize % NAMES.len()];
        s.push_str(&format!(
            "{{\"id\":{},\"ts\":{},\"user\":\"{}_{}\",\"event\":\"{}\",\"symbol\":\"{}\",\"price\":{}.{:02},\"qty\":{}}},",
            (r >> 16) % 10_000_000,
            *ts,
            name,
            (r >> 40) % 100,
            EVENTS[(r >> 20) as usize % EVENTS.len()],
            SYMBOLS[(r >> 24) as usize % SYMBOLS.len()],
            100 + (r >> 28) % 900,
            (r >> 36) % 100,
            1 + (r >> 44) % 500,
        ));
    }
    s.truncate(size);
    s.into_bytes()
}

/// What the server answered in `Sec-WebSocket-Extensions`.
#[derive(Debug, Clone, Copy)]
struct Agreed {
    server_no_context: bool,
    client_no_context: bool,
}

/// One compressing connection.
struct ZConn {
    s: TcpStream,
    compress: Compress,
    decompress: Decompress,
    agreed: Agreed,
    sent: VecDeque<(Vec<u8>, Instant)>,
    rbuf: Vec<u8>,
}

/// Opens a connection offering permessage-deflate (`none`: asking for no
/// context takeover both ways).
fn open(addr: &str, path: &str, none: bool, rng: &mut Rng) -> Result<ZConn, String> {
    open_with(addr, path, Some(none), rng)
}

/// Opens a connection; `deflate`: None offers no extension, else as
/// [`open`].
fn open_with(
    addr: &str,
    path: &str,
    deflate: Option<bool>,
    rng: &mut Rng,
) -> Result<ZConn, String> {
    let mut s = TcpStream::connect(addr).map_err(|e| format!("connect {addr}: {e}"))?;
    s.set_nodelay(true).ok();
    s.set_read_timeout(Some(Duration::from_secs(10))).ok();
    let key = ws::new_key(rng);
    let offer = match deflate {
        None => String::new(),
        Some(true) => "Sec-WebSocket-Extensions: permessage-deflate; \
                       server_no_context_takeover; client_no_context_takeover\r\n"
            .into(),
        Some(false) => {
            "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n".into()
        }
    };
    let req = ws::handshake_request(addr, path, &key);
    let req = format!("{}{offer}\r\n", &req[..req.len() - 2]);
    s.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while ws::head_end(&head).is_none() {
        match s.read(&mut b) {
            Ok(1) => head.push(b[0]),
            _ => return Err("closed during the handshake".into()),
        }
        if head.len() > 16 << 10 {
            return Err("response head too long".into());
        }
    }
    let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
    if !text.starts_with("http/1.1 101") {
        return Err(format!("no 101: {}", text.lines().next().unwrap_or("")));
    }
    let ext = text
        .lines()
        .find_map(|l| l.strip_prefix("sec-websocket-extensions:"))
        .unwrap_or("");
    if deflate.is_some() != ext.contains("permessage-deflate") {
        return Err(format!("offered {deflate:?}, negotiated {ext:?}"));
    }
    let agreed = Agreed {
        server_no_context: ext.contains("server_no_context_takeover"),
        client_no_context: ext.contains("client_no_context_takeover"),
    };
    Ok(ZConn {
        s,
        compress: Compress::new_with_window_bits(Compression::new(1), false, 15),
        decompress: Decompress::new_with_window_bits(false, 15),
        agreed,
        sent: VecDeque::new(),
        rbuf: Vec::new(),
    })
}

impl ZConn {
    /// Appends `msg` as one compressed masked text frame to `out`.
    fn frame(&mut self, msg: &[u8], out: &mut Vec<u8>, scratch: &mut Vec<u8>) {
        scratch.clear();
        scratch.reserve(msg.len() + 64);
        let mut input = msg;
        loop {
            let before = self.compress.total_in();
            self.compress
                .compress_vec(input, scratch, FlushCompress::Sync)
                .expect("deflate");
            input = &input[(self.compress.total_in() - before) as usize..];
            if input.is_empty() && scratch.len() < scratch.capacity() {
                break;
            }
            scratch.reserve(scratch.capacity());
        }
        scratch.truncate(scratch.len() - SYNC_TAIL.len());
        if self.agreed.client_no_context {
            self.compress.reset();
        }
        let mut h = ws::client_header(0x1, scratch.len(), MASK);
        h[0] |= 0x40;
        out.extend_from_slice(&h);
        let at = out.len();
        out.extend_from_slice(scratch);
        ws::mask(&mut out[at..], MASK, 0);
    }

    /// Appends `msg` as one plain masked text frame to `out`.
    fn plain_frame(msg: &[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(&ws::client_header(0x1, msg.len(), MASK));
        let at = out.len();
        out.extend_from_slice(msg);
        ws::mask(&mut out[at..], MASK, 0);
    }

    /// One whole server frame from the socket: (first byte, payload).
    fn read_frame(&mut self, wire_in: &mut u64) -> Result<(u8, Vec<u8>), String> {
        loop {
            if self.rbuf.len() >= 2 {
                let (len, at) = match self.rbuf[1] & 0x7f {
                    126 if self.rbuf.len() >= 4 => {
                        (u16::from_be_bytes([self.rbuf[2], self.rbuf[3]]) as usize, 4)
                    }
                    127 if self.rbuf.len() >= 10 => (
                        u64::from_be_bytes(self.rbuf[2..10].try_into().unwrap()) as usize,
                        10,
                    ),
                    126 | 127 => (usize::MAX, 0),
                    n => (n as usize, 2),
                };
                if len != usize::MAX && self.rbuf.len() >= at + len {
                    let first = self.rbuf[0];
                    let payload = self.rbuf[at..at + len].to_vec();
                    self.rbuf.drain(..at + len);
                    *wire_in += (at + len) as u64;
                    return Ok((first, payload));
                }
            }
            let mut chunk = [0u8; 65536];
            match self.s.read(&mut chunk) {
                Ok(0) => return Err("the server closed the connection".into()),
                Ok(n) => self.rbuf.extend_from_slice(&chunk[..n]),
                Err(e) => return Err(format!("read: {e}")),
            }
        }
    }

    fn inflate(&mut self, payload: &[u8], want_len: usize) -> Result<Vec<u8>, String> {
        let mut input = payload.to_vec();
        input.extend_from_slice(&SYNC_TAIL);
        let mut out = Vec::with_capacity(want_len + 64);
        let mut rest = &input[..];
        loop {
            let before = self.decompress.total_in();
            let status = self
                .decompress
                .decompress_vec(rest, &mut out, FlushDecompress::Sync)
                .map_err(|e| format!("inflate: {e}"))?;
            rest = &rest[(self.decompress.total_in() - before) as usize..];
            if status == flate2::Status::StreamEnd {
                // The message ended in a final block (RFC 7692 §7.2.3.4):
                // the appended tail is not read, the next message starts
                // a new stream.
                self.decompress.reset(false);
                break;
            }
            if rest.is_empty() {
                break;
            }
            out.reserve(out.capacity().max(4096));
        }
        if self.agreed.server_no_context {
            self.decompress.reset(false);
        }
        Ok(out)
    }
}

/// Totals of a deflate run.
#[derive(Default)]
pub struct Totals {
    pub result: ThreadResult,
    /// Bytes on the wire in the measured window: client → server (frames
    /// with their headers), server → client; and the messages' own bytes.
    pub wire_out: u64,
    pub wire_in: u64,
    pub payload: u64,
    /// Replies that came back compressed (RSV1) in the window.
    pub compressed_replies: u64,
    pub agreed: String,
}

/// What one thread of a deflate run does.
#[derive(Clone, Copy)]
pub struct Plan {
    /// Connections.
    pub c: usize,
    /// Messages per connection per round.
    pub depth: usize,
    /// Bytes per message.
    pub size: usize,
    /// Ask for no context takeover either way.
    pub none: bool,
}

/// Opens `plan.c` connections and echoes `plan.depth` messages per
/// connection per round until the phase is DONE.
pub fn run(addr: &str, path: &str, plan: Plan, ctl: &Control, seed: u64) -> Totals {
    let Plan {
        c,
        depth,
        size,
        none,
    } = plan;
    let mut t = Totals::default();
    let mut rng = Rng::new(seed);
    let mut conns = Vec::with_capacity(c);
    for i in 0..c {
        match open(addr, path, none, &mut rng) {
            Ok(z) => conns.push(z),
            Err(e) => {
                t.result.failed_conns += 1;
                t.result.errors.push(format!("connection {i}: {e}"));
            }
        }
    }
    if let Some(z) = conns.first() {
        t.agreed = format!(
            "server_no_context={} client_no_context={}",
            z.agreed.server_no_context, z.agreed.client_no_context
        );
    }
    let mut ts = 1_733_140_000_000u64;
    let (mut out, mut scratch) = (Vec::new(), Vec::new());
    'rounds: while ctl.get() != DONE {
        let measuring = ctl.get() == MEASURE;
        for z in conns.iter_mut() {
            out.clear();
            for _ in 0..depth {
                let msg = json_message(&mut rng, size, &mut ts);
                z.frame(&msg, &mut out, &mut scratch);
                z.sent.push_back((msg, Instant::now()));
            }
            if let Err(e) = z.s.write_all(&out) {
                t.result.errors.push(format!("write: {e}"));
                t.result.failed_conns += 1;
                break 'rounds;
            }
            if measuring {
                t.wire_out += out.len() as u64;
            }
        }
        for z in conns.iter_mut() {
            while let Some((want, at)) = z.sent.pop_front() {
                let mut wire_in = 0;
                let (first, payload) = match z.read_frame(&mut wire_in) {
                    Ok(f) => f,
                    Err(e) => {
                        t.result.errors.push(e);
                        t.result.failed_conns += 1;
                        break 'rounds;
                    }
                };
                let got = if first & 0x40 != 0 {
                    match z.inflate(&payload, want.len()) {
                        Ok(m) => m,
                        Err(e) => {
                            t.result.errors.push(e);
                            t.result.mismatches += 1;
                            break 'rounds;
                        }
                    }
                } else {
                    payload
                };
                if first & 0x0f != 0x1 || got != want {
                    t.result.mismatches += 1;
                    if t.result.errors.len() < 5 {
                        t.result.errors.push(format!(
                            "reply differs: first byte {first:#x}, {} bytes for {}",
                            got.len(),
                            want.len()
                        ));
                    }
                }
                if measuring {
                    t.result.msgs += 1;
                    t.result.hist.record(at.elapsed().as_nanos() as u64);
                    t.wire_in += wire_in;
                    t.payload += want.len() as u64;
                    t.compressed_replies += u64::from(first & 0x40 != 0);
                }
            }
        }
    }
    t
}

/// Fan-out with compression: one publisher (no extension) sends `depth`
/// JSON-like messages per round to the topic at `pub_path`; `c`
/// subscribers (at `sub_path`, offering permessage-deflate) must each get
/// every message, in order, and inflate it to exactly what was sent. A
/// completed message is one delivery per subscriber.
pub fn run_fanout(
    addr: &str,
    pub_path: &str,
    sub_path: &str,
    plan: Plan,
    ctl: &Control,
    seed: u64,
) -> Totals {
    let mut t = Totals::default();
    let mut rng = Rng::new(seed);
    let mut subs = Vec::with_capacity(plan.c);
    for i in 0..plan.c {
        match open(addr, sub_path, plan.none, &mut rng) {
            Ok(z) => subs.push(z),
            Err(e) => {
                t.result.failed_conns += 1;
                t.result.errors.push(format!("subscriber {i}: {e}"));
                return t;
            }
        }
    }
    let mut publisher = match open_with(addr, pub_path, None, &mut rng) {
        Ok(p) => p,
        Err(e) => {
            t.result.failed_conns += 1;
            t.result.errors.push(format!("publisher: {e}"));
            return t;
        }
    };
    if let Some(z) = subs.first() {
        t.agreed = format!(
            "server_no_context={} client_no_context={}",
            z.agreed.server_no_context, z.agreed.client_no_context
        );
    }
    // Joins may complete after the 101.
    std::thread::sleep(Duration::from_millis(300));
    let mut ts = 1_733_140_000_000u64;
    let mut out = Vec::new();
    'rounds: while ctl.get() != DONE {
        let measuring = ctl.get() == MEASURE;
        out.clear();
        let round: Vec<Vec<u8>> = (0..plan.depth)
            .map(|_| json_message(&mut rng, plan.size, &mut ts))
            .collect();
        for m in &round {
            ZConn::plain_frame(m, &mut out);
        }
        let started = Instant::now();
        if let Err(e) = publisher.s.write_all(&out) {
            t.result.errors.push(format!("publish: {e}"));
            t.result.failed_conns += 1;
            break;
        }
        for z in subs.iter_mut() {
            for want in &round {
                let mut wire_in = 0;
                let (first, payload) = match z.read_frame(&mut wire_in) {
                    Ok(f) => f,
                    Err(e) => {
                        t.result.errors.push(e);
                        t.result.failed_conns += 1;
                        break 'rounds;
                    }
                };
                let got = if first & 0x40 != 0 {
                    match z.inflate(&payload, want.len()) {
                        Ok(m) => m,
                        Err(e) => {
                            t.result.errors.push(e);
                            t.result.mismatches += 1;
                            break 'rounds;
                        }
                    }
                } else {
                    payload
                };
                if first & 0x0f != 0x1 || got != *want {
                    t.result.mismatches += 1;
                    if t.result.errors.len() < 5 {
                        t.result.errors.push(format!(
                            "delivery differs or out of order: {} bytes for {}",
                            got.len(),
                            want.len()
                        ));
                    }
                }
                if measuring {
                    t.result.msgs += 1;
                    t.result.hist.record(started.elapsed().as_nanos() as u64);
                    t.wire_in += wire_in;
                    t.payload += want.len() as u64;
                    t.compressed_replies += u64::from(first & 0x40 != 0);
                }
            }
        }
        if measuring {
            t.wire_out += out.len() as u64;
        }
    }
    t
}
