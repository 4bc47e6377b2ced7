//! What is sent and what must come back: prebuilt masked frame templates with
//! a sequence number patched into each message, and the [`Checker`] that
//! verifies every reply byte for byte against the expected message.

use crate::ws::{self, Rng, Sink, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG, OP_TEXT};

/// The mask key of every frame we send. RFC 6455 wants it unpredictable (a
/// defence for proxies); servers cannot check that, and a fixed key lets a
/// payload be masked once and reused, so the generator stays cheap.
pub const MASK_KEY: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];

/// Bytes of the payload that carry the sequence number (fewer if smaller).
const SEQ_BYTES: usize = 8;
/// A JSON-string template's sequence region: the opening quote and the digits.
const JSON_SEQ_BYTES: usize = SEQ_BYTES + 1;

/// One message shape: opcode, payload pattern, and its masked form.
pub struct Template {
    pub opcode: u8,
    /// Unmasked payload with the sequence bytes zeroed.
    pub plain: Vec<u8>,
    /// Frame header for this payload length, mask key included.
    pub hdr: Vec<u8>,
    /// Masked payload bytes after the sequence bytes (the same for every message).
    pub masked_tail: Vec<u8>,
    /// How many leading payload bytes hold the sequence number.
    pub w: usize,
    /// The payload is one JSON string (`"` + hex sequence + pattern + `"`),
    /// so the server API can publish exactly these bytes as `data` and a
    /// `realtime = true` pubsub route delivers them unchanged.
    pub json: bool,
}

impl Template {
    /// `seed` picks the pattern, so two directions of a relay are told apart.
    pub fn new(size: usize, text: bool, seed: u64) -> &'static Template {
        Self::build(size, text, false, seed)
    }

    /// A text template whose payload is one JSON string of `size` bytes
    /// (quotes included; no `"` or `\\` inside): the same bytes whether a
    /// WebSocket client publishes them or the server API publishes them as
    /// `data`. `size` must be at least 11.
    pub fn json_string(size: usize, seed: u64) -> &'static Template {
        Self::build(size, true, true, seed)
    }

    fn build(size: usize, text: bool, json: bool, seed: u64) -> &'static Template {
        let mut rng = Rng::new(seed + 17);
        let plain: Vec<u8> = (0..size)
            .map(|_| {
                let r = rng.next_u64() as u8;
                if text {
                    b' ' + r % 95
                } else {
                    r
                }
            })
            .collect();
        let mut plain = plain;
        let mut w = size.min(SEQ_BYTES);
        if json {
            assert!(
                size > JSON_SEQ_BYTES + 1,
                "a JSON-string template needs 11 bytes or more"
            );
            for b in plain.iter_mut() {
                if *b == b'"' || *b == b'\\' {
                    *b = b'_';
                }
            }
            plain[0] = b'"';
            plain[size - 1] = b'"';
            w = JSON_SEQ_BYTES;
        }
        let mut masked = plain.clone();
        ws::mask(&mut masked, MASK_KEY, 0);
        let t = Template {
            opcode: if text { OP_TEXT } else { OP_BINARY },
            hdr: ws::client_header(if text { OP_TEXT } else { OP_BINARY }, size, MASK_KEY),
            masked_tail: masked[w..].to_vec(),
            plain,
            w,
            json,
        };
        Box::leak(Box::new(t))
    }

    /// The sequence bytes of message `seq`: little-endian for binary, hex
    /// digits (most significant first) for text so the payload stays UTF-8.
    pub fn seq_bytes(&self, seq: u64) -> [u8; JSON_SEQ_BYTES] {
        let mut b = [0u8; JSON_SEQ_BYTES];
        if self.json {
            b[0] = b'"';
            for (i, out) in b[1..].iter_mut().enumerate() {
                let nib = (seq >> (4 * (SEQ_BYTES - 1 - i))) & 0xf;
                *out = b"0123456789abcdef"[nib as usize];
            }
        } else if self.opcode == OP_TEXT {
            for (i, out) in b[..self.w].iter_mut().enumerate() {
                let nib = (seq >> (4 * (self.w - 1 - i))) & 0xf;
                *out = b"0123456789abcdef"[nib as usize];
            }
        } else {
            b[..self.w].copy_from_slice(&seq.to_le_bytes()[..self.w]);
        }
        b
    }

    /// Inverse of [`Template::seq_bytes`]; `None` if the bytes cannot be ours.
    pub fn parse_seq(&self, b: &[u8]) -> Option<u64> {
        let b = match (self.json, b.split_first()) {
            (false, _) => b,
            (true, Some((b'"', digits))) => digits,
            (true, _) => return None,
        };
        if self.opcode == OP_TEXT {
            b.iter().try_fold(0u64, |acc, c| {
                Some(acc << 4 | (*c as char).to_digit(16)? as u64)
            })
        } else {
            let mut le = [0u8; 8];
            le[..b.len()].copy_from_slice(b);
            Some(u64::from_le_bytes(le))
        }
    }
}

/// How frames are built for one direction of one connection.
#[derive(Clone, Copy)]
pub enum Source {
    /// Template payload with the sequence number patched in.
    Pattern(&'static Template),
    /// `{"number": n}` with n = base + seq (text).
    Json { base: u64 },
    /// n = base + seq as 32-bit little endian (binary).
    Int32 { base: u64 },
}

/// The number carried by request `seq` in the json/binary modes.
pub fn request_number(base: u64, seq: u64) -> u64 {
    (base + seq) % (1 << 30)
}

/// The reply rule of the json and binary examples: odd n → n+1, even n → n+2.
pub fn expected_number(n: u64) -> u64 {
    if n % 2 == 1 {
        n + 1
    } else {
        n + 2
    }
}

impl Source {
    /// Writes the start of frame `seq` into `head`; the rest is [`Source::tail`].
    pub fn build_head(&self, seq: u64, head: &mut Vec<u8>) {
        head.clear();
        match *self {
            Source::Pattern(t) => {
                head.extend_from_slice(&t.hdr);
                let s = t.seq_bytes(seq);
                let start = head.len();
                head.extend_from_slice(&s[..t.w]);
                ws::mask(&mut head[start..], MASK_KEY, 0);
            }
            Source::Json { base } => {
                let body = format!("{{\"number\": {}}}", request_number(base, seq));
                head.extend_from_slice(&ws::client_frame(OP_TEXT, body.as_bytes(), MASK_KEY));
            }
            Source::Int32 { base } => {
                let n = request_number(base, seq) as u32;
                head.extend_from_slice(&ws::client_frame(OP_BINARY, &n.to_le_bytes(), MASK_KEY));
            }
        }
    }

    pub fn tail(&self) -> &'static [u8] {
        match *self {
            Source::Pattern(t) => &t.masked_tail,
            _ => &[],
        }
    }
}

/// What a connection must receive next.
#[derive(Clone, Copy)]
pub enum Expect {
    /// Exactly the template message with sequence `next_seq`.
    Pattern(&'static Template),
    /// Template messages carrying increasing sequence numbers (fan-out): a gap
    /// is counted as lost, a repeat or step back is a mismatch.
    Ordered(&'static Template),
    /// `{"number": m}` where m = expected_number(request_number(base, seq)).
    Json { base: u64 },
    /// 4-byte little-endian expected_number(request_number(base, seq)).
    Int32 { base: u64 },
}

/// Verifies incoming messages for one connection. Feed it through
/// [`ws::Parser`]; read the counters afterwards.
pub struct Checker {
    pub expect: Expect,
    /// Sequence number of the next message to arrive.
    pub next_seq: u64,
    /// Messages that may arrive now; one more is a mismatch ("unexpected").
    pub allowed: u64,
    /// Completed messages since the owner last reset this.
    pub done: u64,
    /// Payload bytes of all completed messages (a soak reports the volume verified).
    pub bytes: u64,
    pub mismatches: u64,
    /// Messages skipped in an ordered stream.
    pub lost: u64,
    /// First mismatch descriptions, for printing.
    pub errors: Vec<String>,
    /// Close frame received: its code (0 when it had none).
    pub close_code: Option<u16>,
    /// The close frame's reason text (lossy UTF-8), for reports.
    pub close_reason: String,
    /// Ping payloads to answer with pongs.
    pub pings: Vec<Vec<u8>>,
    pos: usize,
    bad: Option<String>,
    small: Vec<u8>,
}

/// Keep this many mismatch descriptions per connection.
const KEEP_ERRORS: usize = 4;

impl Checker {
    pub fn new(expect: Expect) -> Self {
        Checker {
            expect,
            next_seq: 0,
            allowed: 0,
            done: 0,
            bytes: 0,
            mismatches: 0,
            lost: 0,
            errors: Vec::new(),
            close_code: None,
            close_reason: String::new(),
            pings: Vec::new(),
            pos: 0,
            bad: None,
            small: Vec::new(),
        }
    }

    pub fn fail(&mut self, why: String) {
        self.mismatches += 1;
        if self.errors.len() < KEEP_ERRORS {
            self.errors.push(why);
        }
    }

    fn flag(&mut self, why: impl FnOnce() -> String) {
        if self.bad.is_none() {
            self.bad = Some(why());
        }
    }
}

/// Compares `chunk`, found at payload offset `pos`, with the template whose
/// sequence bytes are `seq`. Returns the first differing offset.
fn diff_pattern(t: &Template, seq: &[u8], pos: usize, chunk: &[u8]) -> Option<usize> {
    let mut off = 0;
    // Sequence region first.
    while off < chunk.len() && pos + off < t.w {
        if chunk[off] != seq[pos + off] {
            return Some(pos + off);
        }
        off += 1;
    }
    let rest = &chunk[off..];
    let p = pos + off;
    if rest != &t.plain[p..p + rest.len()] {
        let i = rest
            .iter()
            .zip(&t.plain[p..])
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        return Some(p + i);
    }
    None
}

impl Sink for Checker {
    fn data(&mut self, chunk: &[u8]) {
        if self.bad.is_some() {
            self.pos += chunk.len();
            return;
        }
        let pos = self.pos;
        self.pos += chunk.len();
        match self.expect {
            Expect::Pattern(t) => {
                if self.pos > t.plain.len() {
                    return self.flag(|| format!("message longer than {} bytes", t.plain.len()));
                }
                let s = t.seq_bytes(self.next_seq);
                if let Some(at) = diff_pattern(t, &s[..t.w], pos, chunk) {
                    let seq = self.next_seq;
                    self.flag(|| format!("seq {seq}: payload differs at byte {at}"));
                }
            }
            Expect::Ordered(t) => {
                if self.pos > t.plain.len() {
                    return self.flag(|| format!("message longer than {} bytes", t.plain.len()));
                }
                // Gather the sequence bytes, then compare the rest.
                let mut off = 0;
                while off < chunk.len() && pos + off < t.w {
                    self.small.push(chunk[off]);
                    off += 1;
                }
                let p = pos + off;
                let rest = &chunk[off..];
                if rest != &t.plain[p..p + rest.len()] {
                    self.flag(|| format!("payload differs after byte {p}"));
                }
            }
            Expect::Json { .. } | Expect::Int32 { .. } => {
                if self.small.len() + chunk.len() > 64 {
                    return self.flag(|| "reply longer than 64 bytes".into());
                }
                self.small.extend_from_slice(chunk);
            }
        }
    }

    fn end(&mut self, opcode: u8, len: u64) {
        let seq = self.next_seq;
        let mut bad = self.bad.take();
        if self.allowed == 0 {
            // Not a reply to anything we sent (an echo on a relay route, a
            // message back to the publisher): count it, do not consume a slot.
            self.fail(format!(
                "unexpected message ({len} bytes, opcode {opcode:#x}) while none was due"
            ));
            self.small.clear();
            self.pos = 0;
            return;
        }
        let (want_op, want_len) = match self.expect {
            Expect::Pattern(t) | Expect::Ordered(t) => (t.opcode, Some(t.plain.len() as u64)),
            Expect::Json { .. } => (OP_TEXT, None),
            Expect::Int32 { .. } => (OP_BINARY, Some(4)),
        };
        if bad.is_none() && opcode != want_op {
            bad = Some(format!(
                "seq {seq}: opcode {opcode:#x}, expected {want_op:#x}"
            ));
        }
        if bad.is_none() && want_len.is_some_and(|w| w != len) {
            bad = Some(format!(
                "seq {seq}: length {len}, expected {}",
                want_len.unwrap()
            ));
        }
        if bad.is_none() {
            match self.expect {
                Expect::Json { base } => {
                    let want = expected_number(request_number(base, seq));
                    match parse_number_reply(&self.small) {
                        Some(n) if n == want => {}
                        _ => {
                            bad = Some(format!(
                                "seq {seq}: reply {:?}, expected number {want}",
                                String::from_utf8_lossy(&self.small)
                            ))
                        }
                    }
                }
                Expect::Int32 { base } => {
                    let want = expected_number(request_number(base, seq)) as u32;
                    let got = u32::from_le_bytes(self.small[..4].try_into().unwrap());
                    if got != want {
                        bad = Some(format!("seq {seq}: int32 {got}, expected {want}"));
                    }
                }
                Expect::Ordered(t) => match t.parse_seq(&self.small) {
                    Some(got) if got >= self.next_seq => {
                        self.lost += got - self.next_seq;
                        self.next_seq = got;
                    }
                    got => {
                        bad = Some(format!(
                            "sequence {got:?} after {}",
                            self.next_seq.wrapping_sub(1)
                        ))
                    }
                },
                Expect::Pattern(_) => {}
            }
        }
        if let Some(why) = bad {
            self.fail(why);
        }
        self.small.clear();
        self.pos = 0;
        self.allowed = self.allowed.saturating_sub(1);
        self.next_seq += 1;
        self.done += 1;
        self.bytes += len;
    }

    fn control(&mut self, opcode: u8, payload: &[u8]) {
        match opcode {
            OP_PING => self.pings.push(payload.to_vec()),
            OP_PONG => {}
            OP_CLOSE => {
                let code = if payload.len() >= 2 {
                    u16::from_be_bytes([payload[0], payload[1]])
                } else {
                    0
                };
                self.close_code = Some(code);
                self.close_reason = String::from_utf8_lossy(payload.get(2..).unwrap_or(&[])).into();
            }
            _ => {}
        }
    }
}

/// Parses `{"number": n}` allowing JSON whitespace and nothing else.
pub fn parse_number_reply(b: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(b).ok()?.trim();
    let s = s.strip_prefix('{')?.strip_suffix('}')?.trim();
    let s = s.strip_prefix("\"number\"")?.trim_start();
    let s = s.strip_prefix(':')?.trim();
    if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server_frame(op: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0x80 | op];
        if payload.len() < 126 {
            f.push(payload.len() as u8);
        } else {
            f.push(126);
            f.extend_from_slice(&(payload.len() as u16).to_be_bytes());
        }
        f.extend_from_slice(payload);
        f
    }

    fn echo_of(t: &Template, seq: u64) -> Vec<u8> {
        let mut p = t.plain.clone();
        p[..t.w].copy_from_slice(&t.seq_bytes(seq)[..t.w]);
        server_frame(t.opcode, &p)
    }

    #[test]
    fn checker_accepts_exact_echo_and_rejects_one_flipped_byte() {
        for text in [false, true] {
            let t = Template::new(300, text, 1);
            let mut c = Checker::new(Expect::Pattern(t));
            c.allowed = 3;
            let mut p = ws::Parser::default();
            p.feed(&echo_of(t, 0), &mut c).unwrap();
            p.feed(&echo_of(t, 1), &mut c).unwrap();
            assert_eq!((c.done, c.mismatches), (2, 0));
            let mut bad = echo_of(t, 2);
            bad[150] ^= 1;
            p.feed(&bad, &mut c).unwrap();
            assert_eq!((c.done, c.mismatches), (3, 1));
        }
    }

    #[test]
    fn checker_rejects_wrong_sequence_and_unexpected_messages() {
        let t = Template::new(64, false, 1);
        let mut c = Checker::new(Expect::Pattern(t));
        c.allowed = 1;
        let mut p = ws::Parser::default();
        p.feed(&echo_of(t, 5), &mut c).unwrap();
        assert_eq!(c.mismatches, 1, "wrong seq");
        p.feed(&echo_of(t, 1), &mut c).unwrap();
        assert_eq!(c.mismatches, 2, "nothing was due");
    }

    #[test]
    fn masked_head_and_tail_unmask_to_the_payload() {
        let t = Template::new(100, true, 3);
        let src = Source::Pattern(t);
        let mut head = Vec::new();
        src.build_head(42, &mut head);
        let mut payload = head[t.hdr.len()..].to_vec();
        payload.extend_from_slice(src.tail());
        ws::mask(&mut payload, MASK_KEY, 0);
        assert_eq!(&payload[..8], b"0000002a");
        assert_eq!(&payload[8..], &t.plain[8..]);
        assert!(std::str::from_utf8(&payload).is_ok());
        assert_eq!(t.parse_seq(&payload[..8]), Some(42));
    }

    #[test]
    fn json_string_template_is_one_json_string_with_the_sequence_inside() {
        let t = Template::json_string(64, 3);
        let mut p = t.plain.clone();
        p[..t.w].copy_from_slice(&t.seq_bytes(0x2a)[..t.w]);
        let s = std::str::from_utf8(&p).unwrap();
        assert!(s.starts_with("\"0000002a") && s.ends_with('"'), "{s}");
        assert!(!s[1..s.len() - 1].contains(['"', '\\']), "{s}");
        assert_eq!(t.parse_seq(&p[..t.w]), Some(0x2a));
        assert_eq!(t.parse_seq(b"x0000002a"), None);
        let mut c = Checker::new(Expect::Ordered(t));
        c.allowed = u64::MAX;
        let mut parser = ws::Parser::default();
        parser.feed(&echo_of(t, 0), &mut c).unwrap();
        parser.feed(&echo_of(t, 2), &mut c).unwrap();
        assert_eq!((c.done, c.mismatches, c.lost), (2, 0, 1));
    }

    #[test]
    fn json_reply_rule() {
        assert_eq!(parse_number_reply(b"{\"number\":12}"), Some(12));
        assert_eq!(parse_number_reply(b" { \"number\" : 7 } "), Some(7));
        assert_eq!(parse_number_reply(b"{\"number\":7,\"x\":1}"), None);
        assert_eq!(expected_number(3), 4);
        assert_eq!(expected_number(4), 6);
    }
}
