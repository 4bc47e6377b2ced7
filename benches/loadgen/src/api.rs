//! The server-API publisher of the `api-fanout` mode: one keep-alive
//! HTTP/1.1 connection that POSTs Centrifugo-style `/api/publish` calls, one
//! in flight, each carrying a JSON-string template message as `data`, at
//! most `window` messages ahead of the slowest subscriber (whose progress
//! the subscribers' `engine` loop publishes in an atomic) and, with a rate,
//! at most that many per second.
//!
//! Every answer must be `200` with a `{"result":…}` body; anything else
//! (an `error` object, another status, a closed connection) is counted and
//! the first few are kept for the report.

use crate::engine::{Control, DONE};
use crate::payload::Template;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long the publisher sleeps when it is a whole window ahead: short
/// against a delivery round (a few hundred µs for 1,000 subscribers), long
/// enough that the wait costs the generator little CPU.
const WINDOW_POLL: Duration = Duration::from_micros(50);
/// An answer slower than this fails the run (the server API stalled).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// Where and what to publish.
pub struct ApiTarget {
    /// `host:port` of the `[api]` listener.
    pub addr: String,
    pub key: String,
    pub channel: String,
    /// Messages per call: 1 POSTs `/api/publish`, more POST `/api/batch`
    /// with that many publishes (a backend's burst in one call).
    pub batch: u64,
}

/// What the publisher did.
#[derive(Default)]
pub struct Published {
    /// Publish calls answered with a result.
    pub ok: u64,
    /// Calls answered otherwise, or lost with the connection.
    pub failed: u64,
    pub errors: Vec<String>,
    /// Mean answer time of the calls, µs.
    pub mean_answer_us: f64,
}

impl Published {
    fn fail(&mut self, why: String) {
        self.failed += 1;
        if self.errors.len() < 4 {
            self.errors.push(why);
        }
    }
}

/// The request for message `seq`: a prebuilt head and body with the
/// sequence bytes patched in place.
struct Request {
    bytes: Vec<u8>,
    /// Offset of the template's sequence bytes in `bytes`.
    seq_at: usize,
}

impl Request {
    fn new(t: &Template, target: &ApiTarget) -> Request {
        let mut body = Vec::new();
        body.extend_from_slice(b"{\"channel\":");
        body.extend_from_slice(json_string(&target.channel).as_bytes());
        body.extend_from_slice(b",\"data\":");
        let data_at = body.len();
        body.extend_from_slice(&t.plain);
        body.push(b'}');
        let head = format!(
            "POST /api/publish HTTP/1.1\r\nHost: {}\r\nX-API-Key: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            target.addr,
            target.key,
            body.len()
        );
        let mut bytes = head.into_bytes();
        let seq_at = bytes.len() + data_at;
        bytes.extend_from_slice(&body);
        Request { bytes, seq_at }
    }

    fn for_seq(&mut self, t: &Template, seq: u64) -> &[u8] {
        self.bytes[self.seq_at..self.seq_at + t.w].copy_from_slice(&t.seq_bytes(seq)[..t.w]);
        &self.bytes
    }
}

/// A `/api/batch` call publishing messages `seq .. seq + n`, into `out`.
fn batch_request(t: &Template, target: &ApiTarget, seq: u64, n: u64, out: &mut Vec<u8>) {
    let channel = json_string(&target.channel);
    let mut body = Vec::with_capacity(16 + n as usize * (40 + t.plain.len()));
    body.extend_from_slice(b"{\"commands\":[");
    for i in 0..n {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(b"{\"publish\":{\"channel\":");
        body.extend_from_slice(channel.as_bytes());
        body.extend_from_slice(b",\"data\":");
        let at = body.len();
        body.extend_from_slice(&t.plain);
        body[at..at + t.w].copy_from_slice(&t.seq_bytes(seq + i)[..t.w]);
        body.extend_from_slice(b"}}");
    }
    body.extend_from_slice(b"]}");
    out.clear();
    out.extend_from_slice(
        format!(
            "POST /api/batch HTTP/1.1\r\nHost: {}\r\nX-API-Key: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            target.addr,
            target.key,
            body.len()
        )
        .as_bytes(),
    );
    out.extend_from_slice(&body);
}

/// A channel name as a JSON string (names are ASCII without quotes here,
/// but escape anyway).
fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Reads one HTTP/1.1 response (`Content-Length` bodies only, as weir's API
/// answers) into `buf`; returns the status and the body.
fn read_response<'a>(s: &mut TcpStream, buf: &'a mut Vec<u8>) -> io::Result<(u16, &'a [u8])> {
    buf.clear();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the API closed the connection",
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = std::str::from_utf8(&buf[..head_end])
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "response head not UTF-8"))?;
    let status: u16 = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no status"))?;
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no Content-Length"))?;
    while buf.len() < head_end + len {
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the API closed the connection mid-body",
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok((status, &buf[head_end..head_end + len]))
}

/// Publishes messages 0, 1, 2, … until the phase is DONE, never more than
/// `window` ahead of `progress` (the slowest subscriber's next sequence)
/// nor, with `rate`, ahead of `rate` messages per second since the start.
pub fn publish(
    target: &ApiTarget,
    t: &'static Template,
    window: u64,
    rate: Option<u64>,
    progress: &AtomicU64,
    ctl: &Control,
) -> Published {
    let mut out = Published::default();
    let mut s = match TcpStream::connect(&target.addr) {
        Ok(s) => s,
        Err(e) => {
            out.fail(format!("connect to the API at {}: {e}", target.addr));
            return out;
        }
    };
    // One small request per call: do not let Nagle hold it back.
    let _ = s.set_nodelay(true);
    let _ = s.set_read_timeout(Some(ANSWER_TIMEOUT));
    let mut req = Request::new(t, target);
    let mut batch = Vec::new();
    let n = target.batch.max(1);
    let mut buf = Vec::with_capacity(4096);
    let mut seq = 0u64;
    let mut answering = Duration::ZERO;
    let started = Instant::now();
    while ctl.get() != DONE {
        let paced = rate.map_or(u64::MAX, |r| {
            (started.elapsed().as_secs_f64() * r as f64) as u64 + 1
        });
        let last = seq + n - 1;
        if last >= progress.load(Ordering::Acquire).saturating_add(window) || last >= paced {
            std::thread::sleep(WINDOW_POLL);
            continue;
        }
        let sent = Instant::now();
        let request = if n == 1 {
            req.for_seq(t, seq)
        } else {
            batch_request(t, target, seq, n, &mut batch);
            &batch[..]
        };
        if let Err(e) = s.write_all(request) {
            out.fail(format!("publish {seq}: write: {e}"));
            break;
        }
        match read_response(&mut s, &mut buf) {
            Ok((200, body)) if n == 1 && body.starts_with(b"{\"result\"") => out.ok += 1,
            Ok((200, body))
                if n > 1
                    && body.starts_with(b"{\"replies\"")
                    && !body.windows(8).any(|w| w == b"\"error\":") =>
            {
                out.ok += n
            }
            Ok((status, body)) => {
                out.fail(format!(
                    "publish {seq}: {status} {}",
                    String::from_utf8_lossy(&body[..body.len().min(200)])
                ));
                if status != 200 {
                    break;
                }
            }
            Err(e) => {
                out.fail(format!("publish {seq}: {e}"));
                break;
            }
        }
        answering += sent.elapsed();
        seq += n;
    }
    let calls = out.ok + out.failed;
    if calls > 0 {
        out.mean_answer_us = answering.as_secs_f64() * 1e6 / calls as f64;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// The request is valid HTTP with a JSON body whose `data` is the
    /// template message of that sequence number.
    #[test]
    fn request_carries_the_message_as_json_data() {
        let t = Template::json_string(32, 3);
        let target = ApiTarget {
            addr: "127.0.0.1:1".into(),
            key: "k".into(),
            channel: "hist:bench".into(),
            batch: 1,
        };
        let mut r = Request::new(t, &target);
        let bytes = r.for_seq(t, 0x1f).to_vec();
        let text = String::from_utf8(bytes).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("Content-Length: {}", body.len())));
        assert!(body.starts_with("{\"channel\":\"hist:bench\",\"data\":\"0000001f"));
        assert!(body.ends_with("\"}"));
    }

    #[test]
    fn responses_are_read_by_content_length() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut srv, _) = l.accept().unwrap();
        srv.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 13\r\n\r\n{\"result\":{}}HTTP/1.1 401 Unauthorized\r\ncontent-length: 2\r\n\r\nno")
            .unwrap();
        let mut buf = Vec::new();
        let (status, body) = read_response(&mut c, &mut buf).unwrap();
        assert_eq!((status, body), (200, &b"{\"result\":{}}"[..]));
    }
}
