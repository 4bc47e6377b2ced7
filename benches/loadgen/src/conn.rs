//! One open WebSocket connection on a non-blocking socket: the opening
//! handshake, the queue of frames to send (written with one `writev` per
//! flush, so pipelined frames are coalesced), the parser + checker for
//! what comes back, and the closing handshake.

use crate::payload::{Checker, Expect, Source, MASK_KEY};
use crate::stream::{self, Stream};
use crate::ws::{self, Parser, Rng, OP_CLOSE, OP_PONG};
use rustls::ClientConfig;
use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where to connect: `ws://host:port/path` or `wss://host:port/path`.
#[derive(Clone, Debug)]
pub struct Target {
    /// `host:port`, what TCP connects to (and the `Host` header).
    pub addr: String,
    /// The host alone: the TLS server name and the certificate's name.
    pub host: String,
    pub path: String,
    /// `wss://`: the URL asks for TLS.
    pub secure: bool,
    /// The TLS configuration for a `wss://` target (set by the caller,
    /// which knows how to trust the server); `None` for `ws://`.
    pub tls: Option<Arc<ClientConfig>>,
}

impl Target {
    pub fn parse(url: &str) -> Result<Self, String> {
        let (secure, rest) = match (url.strip_prefix("ws://"), url.strip_prefix("wss://")) {
            (Some(rest), _) => (false, rest),
            (_, Some(rest)) => (true, rest),
            _ => return Err(format!("{url:?}: only ws:// and wss:// URLs are supported")),
        };
        let (addr, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if addr.is_empty() {
            return Err(format!("no host in {url:?}"));
        }
        let host = match addr.rsplit_once(':') {
            Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
            _ => addr,
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        Ok(Target {
            addr: addr.to_string(),
            host: host.to_string(),
            path: path.to_string(),
            secure,
            tls: None,
        })
    }

    /// A `ws://` target (the soak test's).
    pub fn plain(addr: &str, path: &str) -> Self {
        Target {
            addr: addr.to_string(),
            host: addr.to_string(),
            path: path.to_string(),
            secure: false,
            tls: None,
        }
    }

    /// The first address `addr` resolves to.
    pub fn resolve(&self) -> Result<std::net::SocketAddr, String> {
        use std::net::ToSocketAddrs;
        self.addr
            .to_socket_addrs()
            .map_err(|e| format!("resolve {}: {e}", self.addr))?
            .next()
            .ok_or_else(|| format!("no address for {}", self.addr))
    }

    /// Wraps a connected (or connecting) socket as this target asks: TLS
    /// for `wss://`.
    pub fn wrap(&self, sock: TcpStream) -> Result<Stream, String> {
        match (&self.tls, self.secure) {
            (_, false) => Ok(Stream::Tcp(sock)),
            (Some(config), true) => Stream::tls(sock, config, stream::server_name(&self.host)?),
            (None, true) => Err("wss:// without a TLS configuration".into()),
        }
    }
}

/// Opens a connection and completes the handshake (TLS, then the upgrade)
/// with blocking I/O; the socket is left non-blocking with TCP_NODELAY
/// (frames are latency-bound).
pub fn open(target: &Target, rng: &mut Rng) -> Result<Stream, String> {
    let sock =
        TcpStream::connect(&target.addr).map_err(|e| format!("connect {}: {e}", target.addr))?;
    handshake(sock, target, &target.path, rng)
}

/// Like [`open`], from a chosen local address (many loopback source
/// addresses give more than one address's ephemeral ports), to `path`.
pub fn open_from(
    target: &Target,
    path: &str,
    source: std::net::IpAddr,
    rng: &mut Rng,
) -> Result<Stream, String> {
    let addr = target.resolve()?;
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )
    .map_err(|e| format!("socket: {e}"))?;
    socket
        .bind(&std::net::SocketAddr::new(source, 0).into())
        .map_err(|e| format!("bind {source}: {e}"))?;
    socket
        .connect(&addr.into())
        .map_err(|e| format!("connect {addr} from {source}: {e}"))?;
    handshake(socket.into(), target, path, rng)
}

fn handshake(
    sock: TcpStream,
    target: &Target,
    path: &str,
    rng: &mut Rng,
) -> Result<Stream, String> {
    sock.set_nodelay(true).ok();
    sock.set_read_timeout(Some(Duration::from_secs(10))).ok();
    let mut s = target.wrap(sock)?;
    s.handshake().map_err(|e| format!("TLS handshake: {e}"))?;
    let key = ws::new_key(rng);
    s.write_all(ws::handshake_request(&target.addr, path, &key).as_bytes())
        .map_err(|e| format!("send handshake: {e}"))?;
    // Read until the head ends; the server sends nothing
    // after the 101 until we do, so bytes past the head are reported as an error.
    let mut head = Vec::with_capacity(256);
    let mut buf = [0u8; 512];
    loop {
        let n = s
            .read(&mut buf)
            .map_err(|e| format!("read handshake: {e}"))?;
        if n == 0 {
            return Err("connection closed during handshake".into());
        }
        head.extend_from_slice(&buf[..n]);
        if let Some(end) = ws::head_end(&head) {
            ws::check_response(&head[..end], &key)?;
            if end != head.len() {
                return Err("server sent data right after the 101 response".into());
            }
            break;
        }
        if head.len() > 16 * 1024 {
            return Err("response head larger than 16 KiB".into());
        }
    }
    s.socket().set_read_timeout(None).ok();
    s.socket()
        .set_nonblocking(true)
        .map_err(|e| e.to_string())?;
    Ok(s)
}

/// Frames waiting to be written; each is `heads[slot] ++ tail`.
pub struct Outbox {
    pub src: Source,
    heads: Vec<Vec<u8>>,
    /// Sequence numbers queued, oldest first.
    queue: VecDeque<u64>,
    /// Bytes of the oldest queued frame already written.
    written: usize,
    /// Control frames (pongs, close) go out before data.
    control: Vec<u8>,
}

/// At most this many iovecs per writev (well under IOV_MAX = 1024).
const MAX_IOV: usize = 256;

impl Outbox {
    /// `slots` must be at least the number of frames that can be queued at once.
    pub fn new(src: Source, slots: usize) -> Self {
        Outbox {
            src,
            heads: vec![Vec::new(); slots.max(1)],
            queue: VecDeque::new(),
            written: 0,
            control: Vec::new(),
        }
    }

    pub fn push(&mut self, seq: u64) {
        let slot = (seq % self.heads.len() as u64) as usize;
        self.src.build_head(seq, &mut self.heads[slot]);
        self.queue.push_back(seq);
    }

    pub fn push_control(&mut self, frame: &[u8]) {
        self.control.extend_from_slice(frame);
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty() && self.control.is_empty()
    }

    /// Moves every frame waiting (control frames first) to the end of
    /// `out`, for a transport that takes one buffer per write (an HTTP/2
    /// DATA frame).
    pub fn drain_into(&mut self, out: &mut Vec<u8>) {
        out.append(&mut self.control);
        let tail = self.src.tail();
        while let Some(seq) = self.queue.pop_front() {
            let head = &self.heads[(seq % self.heads.len() as u64) as usize];
            let skip = std::mem::take(&mut self.written);
            let in_tail = skip.saturating_sub(head.len());
            out.extend_from_slice(&head[skip.min(head.len())..]);
            out.extend_from_slice(&tail[in_tail..]);
        }
    }

    /// Writes as much as the stream takes. `Ok(true)` when everything went out.
    pub fn flush(&mut self, w: &mut Stream) -> io::Result<bool> {
        if !w.push_pending()? {
            return Ok(false);
        }
        while !self.control.is_empty() {
            match w.write(&self.control) {
                Ok(n) => {
                    self.control.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        let tail = self.src.tail();
        while !self.queue.is_empty() {
            let mut iov: Vec<IoSlice> = Vec::with_capacity(MAX_IOV.min(self.queue.len() * 2));
            let mut skip = self.written;
            for &seq in &self.queue {
                if iov.len() + 2 > MAX_IOV {
                    break;
                }
                let head = &self.heads[(seq % self.heads.len() as u64) as usize];
                for part in [&head[..], tail] {
                    if skip >= part.len() {
                        skip -= part.len();
                    } else {
                        iov.push(IoSlice::new(&part[skip..]));
                        skip = 0;
                    }
                }
            }
            let mut n = match w.write_vectored(&iov) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            };
            drop(iov);
            while n > 0 {
                let seq = self.queue[0];
                let len = self.heads[(seq % self.heads.len() as u64) as usize].len() + tail.len();
                let left = len - self.written;
                if n >= left {
                    n -= left;
                    self.written = 0;
                    self.queue.pop_front();
                } else {
                    self.written += n;
                    n = 0;
                }
            }
        }
        Ok(!w.wants_write())
    }
}

/// A connection in a load loop.
pub struct Conn {
    pub stream: Stream,
    pub parser: Parser,
    pub check: Checker,
    pub out: Outbox,
    /// Next sequence number to send.
    pub send_seq: u64,
    /// Send time of in-flight messages, by `seq % slots`.
    pub sent_at: Vec<Instant>,
    /// Set once the connection failed; it takes no further part.
    pub dead: Option<String>,
}

impl Conn {
    pub fn new(stream: Stream, src: Source, expect: Expect, slots: usize) -> Self {
        let now = Instant::now();
        Conn {
            stream,
            parser: Parser::default(),
            check: Checker::new(expect),
            out: Outbox::new(src, slots),
            send_seq: 0,
            sent_at: vec![now; slots.max(1)],
            dead: None,
        }
    }

    /// Queues message `send_seq` (not yet written) and stamps its send time.
    pub fn queue_next(&mut self, now: Instant) {
        let seq = self.send_seq;
        self.out.push(seq);
        let n = self.sent_at.len() as u64;
        self.sent_at[(seq % n) as usize] = now;
        self.send_seq += 1;
    }

    pub fn sent_time(&self, seq: u64) -> Instant {
        self.sent_at[(seq % self.sent_at.len() as u64) as usize]
    }

    /// Reads until the socket is drained (edge-triggered epoll), feeding the
    /// checker. Returns false on EOF, error or a close frame from the server
    /// (answered with a close frame, §5.5.1); the connection is then dead.
    pub fn read_all(&mut self, buf: &mut [u8]) -> bool {
        loop {
            match self.stream.read(buf) {
                Ok(0) => {
                    self.dead = Some(match self.check.close_code {
                        Some(c) => format!("server closed the connection (close code {c})"),
                        None => "server closed the connection".into(),
                    });
                    return false;
                }
                Ok(n) => {
                    if let Err(e) = self.parser.feed(&buf[..n], &mut self.check) {
                        self.dead = Some(format!("protocol error: {e}"));
                        return false;
                    }
                    for p in std::mem::take(&mut self.check.pings) {
                        self.out
                            .push_control(&ws::client_frame(OP_PONG, &p, MASK_KEY));
                    }
                    if let Some(code) = self.check.close_code {
                        self.out.push_control(&close_frame(code));
                        let _ = self.out.flush(&mut self.stream);
                        self.dead = Some(format!(
                            "server closed the connection with code {code} {:?}",
                            self.check.close_reason
                        ));
                        return false;
                    }
                    if n < buf.len() && self.stream.short_read_drains() {
                        return true;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.dead = Some(format!("read: {e}"));
                    return false;
                }
            }
        }
    }

    /// Whether anything waits to be written (frames, or TLS records).
    pub fn wants_write(&self) -> bool {
        !self.out.is_empty() || self.stream.wants_write()
    }

    /// Flushes the outbox; marks the connection dead on a write error.
    pub fn flush(&mut self) -> bool {
        match self.out.flush(&mut self.stream) {
            Ok(_) => true,
            Err(e) => {
                self.dead = Some(format!("write: {e}"));
                false
            }
        }
    }

    /// Ends the connection with a closing handshake (RFC 6455 §5.5.1, §7.1):
    /// when `initiate`, sends close 1000 first; otherwise waits for the
    /// server's close frame (a relay closes the partner of a leaving
    /// connection) and answers it with the same code. Either way the server's
    /// close frame must arrive and then the server must end the TCP
    /// connection (§7.1.1: the server closes first), all within `wait`. Data
    /// that arrives meanwhile goes through the checker, so a message that
    /// was not due is a mismatch. Returns the server's close code (0: none).
    pub fn close_handshake(&mut self, initiate: bool, wait: Duration) -> Result<u16, String> {
        let deadline = Instant::now() + wait;
        self.stream
            .socket()
            .set_nonblocking(false)
            .map_err(|e| format!("set blocking: {e}"))?;
        let mut sent = false;
        if initiate {
            self.out.push_control(&close_frame(1000));
            sent = true;
        }
        let mut buf = [0u8; 16 * 1024];
        loop {
            if let (Some(code), false) = (self.check.close_code, sent) {
                self.out.push_control(&close_frame(code));
                sent = true;
            }
            if self.wants_write() {
                self.out
                    .flush(&mut self.stream)
                    .map_err(|e| format!("send close: {e}"))?;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let waiting_for = match self.check.close_code {
                None => "the server's close frame",
                Some(_) => "the server to end the connection after the close frames",
            };
            if left.is_zero() {
                return Err(format!("no sign of {waiting_for} within {wait:?}"));
            }
            self.stream.socket().set_read_timeout(Some(left)).ok();
            match self.stream.read(&mut buf) {
                Ok(0) => {
                    return match self.check.close_code {
                        Some(code) if sent => Ok(code),
                        _ => Err("server ended the connection without a close frame".into()),
                    }
                }
                Ok(n) => {
                    self.parser
                        .feed(&buf[..n], &mut self.check)
                        .map_err(|e| format!("protocol error while closing: {e}"))?;
                    // Nothing goes out after our close frame, not even a pong (§5.5.1).
                    for p in std::mem::take(&mut self.check.pings) {
                        if !sent {
                            self.out
                                .push_control(&ws::client_frame(OP_PONG, &p, MASK_KEY));
                        }
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Err(format!("read while closing ({waiting_for}): {e}")),
            }
        }
    }
}

/// A masked close frame with `code` (0: no code, an empty payload).
fn close_frame(code: u16) -> Vec<u8> {
    let payload = match code {
        0 => vec![],
        c => c.to_be_bytes().to_vec(),
    };
    ws::client_frame(OP_CLOSE, &payload, MASK_KEY)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payload::Template;
    use std::net::TcpListener;

    /// A connected pair: our `Conn` (non-blocking) and the raw server side.
    fn pair() -> (Conn, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (server, _) = l.accept().unwrap();
        client.set_nonblocking(true).unwrap();
        let t = Template::new(16, false, 1);
        let c = Conn::new(client.into(), Source::Pattern(t), Expect::Pattern(t), 1);
        (c, server)
    }

    fn server_close(code: u16, reason: &[u8]) -> Vec<u8> {
        let mut f = vec![0x80 | OP_CLOSE, 2 + reason.len() as u8];
        f.extend_from_slice(&code.to_be_bytes());
        f.extend_from_slice(reason);
        f
    }

    /// The close code carried by a masked client close frame of 2 payload bytes.
    fn read_client_close(server: &mut TcpStream) -> u16 {
        let mut f = [0u8; 8];
        server.read_exact(&mut f).unwrap();
        assert_eq!((f[0], f[1]), (0x80 | OP_CLOSE, 0x80 | 2), "{f:?}");
        u16::from_be_bytes([f[6] ^ f[2], f[7] ^ f[3]])
    }

    /// A close frame from the server in the middle of a load ends the
    /// connection at once, with its code and reason in the report, and is
    /// answered with a close frame (§5.5.1), instead of looking like a stall.
    #[test]
    fn server_close_is_answered_and_reported() {
        let (mut c, mut server) = pair();
        server
            .write_all(&server_close(1011, b"guest handler failed"))
            .unwrap();
        let mut buf = [0u8; 1024];
        let deadline = Instant::now() + Duration::from_secs(5);
        while c.read_all(&mut buf) {
            assert!(Instant::now() < deadline, "close frame not seen");
            std::thread::sleep(Duration::from_millis(5));
        }
        let why = c.dead.clone().unwrap();
        assert!(
            why.contains("1011") && why.contains("guest handler failed"),
            "{why}"
        );
        assert_eq!(read_client_close(&mut server), 1011);
    }

    /// Our close 1000, the server's close 1000, then its FIN: a clean end.
    #[test]
    fn close_handshake_initiated_by_us() {
        let (mut c, mut server) = pair();
        let t = std::thread::spawn(move || {
            assert_eq!(read_client_close(&mut server), 1000);
            server.write_all(&server_close(1000, b"")).unwrap();
        });
        assert_eq!(c.close_handshake(true, Duration::from_secs(5)), Ok(1000));
        t.join().unwrap();
    }

    /// A server that never answers our close is reported, not waited on forever.
    #[test]
    fn close_handshake_without_answer_times_out() {
        let (mut c, _server) = pair();
        let err = c
            .close_handshake(true, Duration::from_millis(200))
            .unwrap_err();
        assert!(err.contains("close frame"), "{err}");
    }
}
