//! RFC 6455 from the client's side: the opening handshake (request and
//! `Sec-WebSocket-Accept` check), masked frame headers, and an incremental
//! parser for server frames that hands payload bytes to a [`Sink`] as they
//! arrive, so large messages are verified without being reassembled.

use base64::Engine as _;
use sha1::{Digest, Sha1};

/// RFC 6455 §1.3: the GUID appended to the client key before hashing.
const ACCEPT_GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

pub const OP_CONT: u8 = 0x0;
pub const OP_TEXT: u8 = 0x1;
pub const OP_BINARY: u8 = 0x2;
pub const OP_CLOSE: u8 = 0x8;
pub const OP_PING: u8 = 0x9;
pub const OP_PONG: u8 = 0xA;

/// The `Sec-WebSocket-Accept` value a server must answer for `key` (§4.2.2).
pub fn accept_key(key: &str) -> String {
    let mut h = Sha1::new();
    h.update(key.as_bytes());
    h.update(ACCEPT_GUID.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(h.finalize())
}

/// A fresh `Sec-WebSocket-Key`: 16 pseudo-random bytes, base64 (§4.1).
pub fn new_key(rng: &mut Rng) -> String {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&rng.next_u64().to_le_bytes());
    b[8..].copy_from_slice(&rng.next_u64().to_le_bytes());
    base64::engine::general_purpose::STANDARD.encode(b)
}

/// The GET request that opens a WebSocket (§4.1). No extensions are offered,
/// so permessage-deflate can never be negotiated.
pub fn handshake_request(host: &str, path: &str, key: &str) -> String {
    format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
}

/// Checks a complete response head (up to and including the blank line):
/// status 101, `Upgrade: websocket`, `Connection: upgrade` and the accept
/// value derived from `key`. Returns why it is wrong otherwise.
pub fn check_response(head: &[u8], key: &str) -> Result<(), String> {
    let text = std::str::from_utf8(head).map_err(|_| "response head is not UTF-8".to_string())?;
    let mut lines = text.split("\r\n");
    let status = lines.next().unwrap_or("");
    let mut parts = status.splitn(3, ' ');
    let (version, code) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if !version.starts_with("HTTP/1.1") || code != "101" {
        return Err(format!("expected 101, got status line {status:?}"));
    }
    let (mut upgrade, mut connection, mut accept, mut extensions) = (false, false, None, None);
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            "upgrade" => upgrade = value.eq_ignore_ascii_case("websocket"),
            "connection" => {
                connection = value
                    .split(',')
                    .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
            }
            "sec-websocket-accept" => accept = Some(value.to_string()),
            "sec-websocket-extensions" => extensions = Some(value.to_string()),
            _ => {}
        }
    }
    if !upgrade || !connection {
        return Err("missing Upgrade: websocket / Connection: Upgrade".into());
    }
    if let Some(ext) = extensions {
        return Err(format!(
            "server negotiated an extension we did not offer: {ext}"
        ));
    }
    let want = accept_key(key);
    match accept {
        Some(got) if got == want => Ok(()),
        Some(got) => Err(format!("Sec-WebSocket-Accept {got:?}, expected {want:?}")),
        None => Err("no Sec-WebSocket-Accept".into()),
    }
}

/// Position of the end of the response head (index after `\r\n\r\n`).
pub fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

/// Header of a final, masked client frame carrying `len` payload bytes (§5.2).
pub fn client_header(opcode: u8, len: usize, key: [u8; 4]) -> Vec<u8> {
    let mut h = Vec::with_capacity(14);
    h.push(0x80 | opcode);
    if len < 126 {
        h.push(0x80 | len as u8);
    } else if len <= u16::MAX as usize {
        h.push(0x80 | 126);
        h.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        h.push(0x80 | 127);
        h.extend_from_slice(&(len as u64).to_be_bytes());
    }
    h.extend_from_slice(&key);
    h
}

/// XORs `data` with the mask; `offset` is the index of `data[0]` in the payload.
pub fn mask(data: &mut [u8], key: [u8; 4], offset: usize) {
    for (i, b) in data.iter_mut().enumerate() {
        *b ^= key[(offset + i) & 3];
    }
}

/// A whole masked client frame (used for close and pong frames).
pub fn client_frame(opcode: u8, payload: &[u8], key: [u8; 4]) -> Vec<u8> {
    let mut f = client_header(opcode, payload.len(), key);
    let start = f.len();
    f.extend_from_slice(payload);
    mask(&mut f[start..], key, 0);
    f
}

/// Receives what the [`Parser`] finds, in order.
pub trait Sink {
    /// Payload bytes of the current data message, continuing where the last call stopped.
    fn data(&mut self, chunk: &[u8]);
    /// The current data message is complete (its first frame's opcode, total length).
    fn end(&mut self, opcode: u8, len: u64);
    /// A complete control frame (ping, pong or close) and its payload.
    fn control(&mut self, opcode: u8, payload: &[u8]);
}

/// Incremental parser of server-to-client frames. Keeps at most a partial
/// header and a control payload; data payload goes straight to the sink.
#[derive(Default)]
pub struct Parser {
    hdr: [u8; 14],
    hdr_len: usize,
    in_frame: bool,
    remaining: u64,
    frame_opcode: u8,
    frame_fin: bool,
    /// Opcode of the data message being received, 0 when between messages.
    msg_opcode: u8,
    msg_len: u64,
    ctrl: Vec<u8>,
}

/// Frame header length implied by its first two bytes, for a server frame.
fn header_len(b1: u8) -> usize {
    2 + match b1 & 0x7f {
        126 => 2,
        127 => 8,
        _ => 0,
    } + if b1 & 0x80 != 0 { 4 } else { 0 }
}

impl Parser {
    /// Feeds bytes read from the socket. An error is a protocol violation by
    /// the server; the connection cannot be trusted after it.
    pub fn feed<S: Sink>(&mut self, mut data: &[u8], sink: &mut S) -> Result<(), String> {
        while !data.is_empty() {
            if !self.in_frame {
                let consumed =
                    if self.hdr_len == 0 && data.len() >= 2 && data.len() >= header_len(data[1]) {
                        let n = header_len(data[1]);
                        let mut h = [0u8; 14];
                        h[..n].copy_from_slice(&data[..n]);
                        self.start_frame(&h[..n])?;
                        n
                    } else {
                        self.hdr[self.hdr_len] = data[0];
                        self.hdr_len += 1;
                        if self.hdr_len >= 2 && self.hdr_len == header_len(self.hdr[1]) {
                            let h = self.hdr;
                            let n = self.hdr_len;
                            self.hdr_len = 0;
                            self.start_frame(&h[..n])?;
                        }
                        1
                    };
                data = &data[consumed..];
                if self.in_frame && self.remaining == 0 {
                    self.finish_frame(sink);
                }
                continue;
            }
            let take = (self.remaining.min(data.len() as u64)) as usize;
            let (chunk, rest) = data.split_at(take);
            if self.frame_opcode >= 0x8 {
                self.ctrl.extend_from_slice(chunk);
            } else {
                self.msg_len += take as u64;
                sink.data(chunk);
            }
            self.remaining -= take as u64;
            data = rest;
            if self.remaining == 0 {
                self.finish_frame(sink);
            }
        }
        Ok(())
    }

    fn start_frame(&mut self, h: &[u8]) -> Result<(), String> {
        let (b0, b1) = (h[0], h[1]);
        if b0 & 0x70 != 0 {
            return Err(format!(
                "reserved bits set in server frame (byte0 {b0:#04x})"
            ));
        }
        if b1 & 0x80 != 0 {
            return Err("server frame is masked (RFC 6455 §5.1)".into());
        }
        let opcode = b0 & 0x0f;
        let fin = b0 & 0x80 != 0;
        let len = match b1 & 0x7f {
            126 => u16::from_be_bytes([h[2], h[3]]) as u64,
            127 => u64::from_be_bytes(h[2..10].try_into().unwrap()),
            n => n as u64,
        };
        match opcode {
            OP_CLOSE | OP_PING | OP_PONG => {
                if !fin || len > 125 {
                    return Err(format!(
                        "bad control frame opcode {opcode:#x} fin {fin} len {len}"
                    ));
                }
            }
            OP_CONT if self.msg_opcode == 0 => {
                return Err("continuation frame outside a message".into())
            }
            OP_TEXT | OP_BINARY if self.msg_opcode != 0 => {
                return Err("new data frame inside a fragmented message".into())
            }
            OP_CONT | OP_TEXT | OP_BINARY => {
                if opcode != OP_CONT {
                    self.msg_opcode = opcode;
                    self.msg_len = 0;
                }
            }
            _ => return Err(format!("reserved opcode {opcode:#x}")),
        }
        self.in_frame = true;
        self.remaining = len;
        self.frame_opcode = opcode;
        self.frame_fin = fin;
        Ok(())
    }

    fn finish_frame<S: Sink>(&mut self, sink: &mut S) {
        self.in_frame = false;
        if self.frame_opcode >= 0x8 {
            sink.control(self.frame_opcode, &self.ctrl);
            self.ctrl.clear();
        } else if self.frame_fin {
            sink.end(self.msg_opcode, self.msg_len);
            self.msg_opcode = 0;
            self.msg_len = 0;
        }
    }
}

/// xorshift64*: keys and payload patterns need variety, not secrecy.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 6455 §1.3 worked example.
    #[test]
    fn accept_key_matches_rfc_example() {
        assert_eq!(
            accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[derive(Default)]
    struct Collect {
        data: Vec<u8>,
        ends: Vec<(u8, u64)>,
        ctrl: Vec<(u8, Vec<u8>)>,
    }
    impl Sink for Collect {
        fn data(&mut self, c: &[u8]) {
            self.data.extend_from_slice(c)
        }
        fn end(&mut self, op: u8, len: u64) {
            self.ends.push((op, len))
        }
        fn control(&mut self, op: u8, p: &[u8]) {
            self.ctrl.push((op, p.to_vec()))
        }
    }

    /// Fragmented message with an interleaved ping, fed one byte at a time (§5.4).
    #[test]
    fn parser_handles_fragments_and_split_headers() {
        let mut bytes = vec![0x01, 3, b'a', b'b', b'c', 0x89, 1, b'x', 0x80, 126, 0, 200];
        bytes.extend(std::iter::repeat_n(b'z', 200));
        let mut p = Parser::default();
        let mut c = Collect::default();
        for b in &bytes {
            p.feed(std::slice::from_ref(b), &mut c).unwrap();
        }
        assert_eq!(c.ends, vec![(OP_TEXT, 203)]);
        assert_eq!(c.ctrl, vec![(OP_PING, b"x".to_vec())]);
        assert_eq!(&c.data[..3], b"abc");
        // Same bytes in one piece.
        let mut p = Parser::default();
        let mut c2 = Collect::default();
        p.feed(&bytes, &mut c2).unwrap();
        assert_eq!(c2.ends, c.ends);
        assert_eq!(c2.data, c.data);
    }

    #[test]
    fn parser_rejects_masked_and_reserved() {
        let mut c = Collect::default();
        assert!(Parser::default()
            .feed(&[0x81, 0x81, 1, 2, 3, 4, 5], &mut c)
            .is_err());
        assert!(Parser::default().feed(&[0xC1, 0x01, 5], &mut c).is_err());
    }
}
