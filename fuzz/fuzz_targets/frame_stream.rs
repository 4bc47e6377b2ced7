//! The streaming frame decoder over arbitrary bytes, delivered in reads the
//! fuzzer splits, the way the connection loop (reactor/conn.rs `process`)
//! feeds it: a fixed receive buffer with headroom, leftovers moved back to
//! the headroom, a large buffer while a big frame streams.
//!
//! Checked: no panic; pieces lie inside the read and never add up to more
//! payload than was fed; each reply header the loop writes in front of a
//! piece fits in bytes already consumed; the buffer never fills up without
//! a piece (the loop would read 0 bytes and drop the client); an error maps
//! to 1002/1007/1009 and stays an error; the decoded frames are the same
//! whatever the read boundaries (against one read of the whole stream) and
//! equal an independent byte-by-byte reference decoder written below.
//! `parse_client_header` is also checked directly against the reference
//! header parser on every prefix of the stream's first header.
//!
//! Input: `[mode, size, max_message, junk, n, chunk_1 .. chunk_n, wire ...]`:
//! - `mode % 3`: 0 = the shipped buffer sizes; 1 = the same layout scaled
//!   down (payload room `125 + 4 * size`, so frames stream at fuzz sizes);
//!   2 = one buffer big enough for everything and any `stream_above`
//!   (`size`), the decoder's API without the loop's sizing.
//! - `max_message`: 255 = the default 32 MiB, else `8 * max_message` bytes.
//! - `junk`: what a fresh buffer holds (pooled buffers keep old bytes).
//! - reads take `chunk_i + 1` bytes in turn (cycling); `n % 16 == 0` means
//!   each read takes all it can.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::ops::Range;
use weir::config::DEFAULT_MAX_MESSAGE_BYTES;
use weir::reactor::buffer::{
    HEADROOM_BYTES, LARGE_READ_BUF_BYTES, READ_BUF_BYTES, STREAM_ABOVE_BYTES,
};
use weir::reactor::decode::{Decoder, Piece};
use weir_ws::encode::header_len as server_header_len;
use weir_ws::frame::{parse_client_header, OpCode, ProtocolError};

fuzz_target!(|data: &[u8]| {
    let Some((p, wire)) = params(data) else {
        return;
    };
    check_header_parser(wire);
    let split = feed(wire, &p, &p.chunks);
    let whole_params = Params {
        small: HEADROOM_BYTES + wire.len(),
        large: HEADROOM_BYTES + wire.len(),
        ..p.clone()
    };
    let whole = feed(wire, &whole_params, &[]);
    let model = reference(wire, p.max_message as u64, p.stream_above as u64);
    same_frames(&split, &whole, "split reads vs one read");
    same_frames(&whole, &model, "decoder vs reference");
});

#[derive(Clone, Debug)]
struct Params {
    /// Receive buffer sizes, headroom included (as in reactor/buffer.rs).
    small: usize,
    large: usize,
    stream_above: usize,
    max_message: usize,
    /// The bytes a buffer from the pool holds before a read fills it.
    junk: u8,
    /// Read sizes, used in turn; empty = read all that fits.
    chunks: Vec<usize>,
}

fn params(data: &[u8]) -> Option<(Params, &[u8])> {
    let [mode, size, max, junk, n, rest @ ..] = data else {
        return None;
    };
    let n = usize::from(n % 16);
    if rest.len() < n {
        return None;
    }
    let (chunk_bytes, wire) = rest.split_at(n);
    let (small, large, stream_above) = match mode % 3 {
        0 => (READ_BUF_BYTES, LARGE_READ_BUF_BYTES, STREAM_ABOVE_BYTES),
        1 => {
            // Same shape as the shipped sizes: the payload room is the stream
            // threshold, and it holds a whole control frame (125 bytes).
            let room = 125 + 4 * usize::from(*size);
            (HEADROOM_BYTES + room, HEADROOM_BYTES + 4 * room, room)
        }
        _ => {
            let all = HEADROOM_BYTES + wire.len();
            (all, all, usize::from(*size))
        }
    };
    let max_message = match max {
        255 => DEFAULT_MAX_MESSAGE_BYTES,
        m => 8 * usize::from(*m),
    };
    let chunks = chunk_bytes.iter().map(|&c| usize::from(c) + 1).collect();
    Some((
        Params {
            junk: *junk,
            small,
            large,
            stream_above,
            max_message,
            chunks,
        },
        wire,
    ))
}

/// A frame as the application sees it: data pieces joined per frame.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Event {
    Frame {
        opcode: OpCode,
        message: OpCode,
        fin: bool,
        len: u64,
        bytes: Vec<u8>,
        /// False for the streamed start of a frame the input cut short.
        complete: bool,
    },
    Ping(Vec<u8>),
    Pong,
    Close(u16, Vec<u8>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum End {
    /// The input ran out (the decoder wants more).
    Eof {
        mid_frame: bool,
    },
    /// A valid close frame: the loop stops reading.
    Closed,
    Failed(ProtocolError),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Outcome {
    events: Vec<Event>,
    end: End,
    peer_closed: bool,
}

/// Joins data pieces into frames and checks their start/end flags.
#[derive(Default)]
struct Recorder {
    events: Vec<Event>,
    open: Option<Event>,
    payload_bytes: usize,
}

impl Recorder {
    fn piece(&mut self, piece: &Piece, buf: &[u8]) {
        match piece {
            Piece::Data(d) => {
                let bytes = &buf[d.payload.clone()];
                self.payload_bytes += bytes.len();
                assert!(
                    matches!(
                        d.opcode,
                        OpCode::Text | OpCode::Binary | OpCode::Continuation
                    ),
                    "data piece with opcode {:?}",
                    d.opcode
                );
                assert!(matches!(d.message, OpCode::Text | OpCode::Binary));
                if d.frame_start {
                    assert!(self.open.is_none(), "a frame starts inside another");
                    self.open = Some(Event::Frame {
                        opcode: d.opcode,
                        message: d.message,
                        fin: d.fin,
                        len: d.frame_len,
                        bytes: Vec::new(),
                        complete: false,
                    });
                }
                let Some(Event::Frame {
                    opcode,
                    message,
                    fin,
                    len,
                    bytes: so_far,
                    ..
                }) = &mut self.open
                else {
                    panic!("a piece continues a frame that never started");
                };
                assert_eq!(
                    (*opcode, *message, *fin, *len),
                    (d.opcode, d.message, d.fin, d.frame_len),
                    "a frame's pieces disagree on its header"
                );
                so_far.extend_from_slice(bytes);
                assert!(so_far.len() as u64 <= *len, "more bytes than the frame has");
                if d.frame_end {
                    assert_eq!(so_far.len() as u64, *len, "frame ends short");
                    let mut done = self.open.take().expect("open");
                    if let Event::Frame { complete, .. } = &mut done {
                        *complete = true;
                    }
                    self.events.push(done);
                }
            }
            Piece::Ping { payload } => {
                self.control(payload);
                self.events.push(Event::Ping(buf[payload.clone()].to_vec()));
            }
            Piece::Pong => {
                assert!(self.open.is_none(), "a control frame inside a data frame");
                self.events.push(Event::Pong);
            }
            Piece::Close { code, payload } => {
                self.control(payload);
                self.events
                    .push(Event::Close(*code, buf[payload.clone()].to_vec()));
            }
        }
    }

    fn control(&mut self, payload: &Range<usize>) {
        assert!(self.open.is_none(), "a control frame inside a data frame");
        self.payload_bytes += payload.len();
        // The pong's 1-byte length is `payload.len() as u8` in the loop.
        assert!(payload.len() <= 125, "control payload of {}", payload.len());
    }

    fn finish(mut self, end: End, peer_closed: bool) -> Outcome {
        self.events.extend(self.open.take());
        Outcome {
            events: self.events,
            end,
            peer_closed,
        }
    }
}

/// Feeds `wire` to a decoder in reads of `chunks` sizes, exactly as
/// `Conn::read` / `Conn::process` do, checking the buffer invariants.
fn feed(wire: &[u8], p: &Params, chunks: &[usize]) -> Outcome {
    let mut d = Decoder::new(p.max_message, p.stream_above);
    let mut rec = Recorder::default();
    let mut buf: Option<Vec<u8>> = None;
    let (start, mut end) = (HEADROOM_BYTES, HEADROOM_BYTES);
    let mut fed = 0;
    let mut turn = 0;
    while fed < wire.len() {
        let large = d.streamed_remaining() > p.stream_above as u64;
        // Pooled buffers hold old bytes: model that with junk.
        let b = buf.get_or_insert_with(|| vec![p.junk; if large { p.large } else { p.small }]);
        let space = b.len() - end;
        assert!(
            space > 0,
            "receive buffer full with no piece decodable: the loop would read 0 bytes"
        );
        let want = match chunks {
            [] => usize::MAX,
            c => c[turn % c.len()],
        };
        turn += 1;
        let n = want.min(space).min(wire.len() - fed);
        b[end..end + n].copy_from_slice(&wire[fed..fed + n]);
        fed += n;
        end += n;
        let mut pos = start;
        // Bytes below this hold replies queued in this batch; a reply header
        // written in front of a piece must not reach below it.
        let mut floor = 0;
        loop {
            let before = pos;
            match d.next(b, &mut pos, end) {
                Ok(Some(piece)) => {
                    let payload = match &piece {
                        Piece::Data(dp) => dp.payload.clone(),
                        Piece::Ping { payload } | Piece::Close { payload, .. } => payload.clone(),
                        Piece::Pong => pos..pos,
                    };
                    assert!(
                        before <= payload.start && payload.end == pos && pos <= end,
                        "piece {payload:?} outside the read (from {before}, pos {pos}, end {end})"
                    );
                    let header_room = match &piece {
                        Piece::Data(dp) if dp.frame_start => server_header_len(dp.frame_len),
                        Piece::Data(_) | Piece::Pong => 0,
                        Piece::Ping { .. } => 2,
                        Piece::Close { .. } => 4,
                    };
                    assert!(
                        payload.start >= floor + header_room,
                        "reply header of {header_room} bytes at {} overlaps queued replies below {floor}",
                        payload.start
                    );
                    floor = payload.end;
                    rec.piece(&piece, b);
                    assert!(rec.payload_bytes <= fed, "more payload than bytes fed");
                    if matches!(piece, Piece::Close { .. }) {
                        return rec.finish(End::Closed, d.peer_closed());
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    assert!(
                        matches!(e.close_code(), 1002 | 1007 | 1009),
                        "{e:?} maps to close code {}",
                        e.close_code()
                    );
                    // After a failure the loop sends its close and, in
                    // `await_close`, keeps calling `next` on the same
                    // decoder: it must keep failing, not decode garbage.
                    let mut again = pos;
                    assert!(
                        d.next(b, &mut again, end).is_err(),
                        "decoder recovered after {e:?}"
                    );
                    return rec.finish(End::Failed(e), d.peer_closed());
                }
            }
        }
        let left = end - pos;
        if left == 0 {
            buf = None;
        } else if pos != HEADROOM_BYTES {
            b.copy_within(pos..end, HEADROOM_BYTES);
        }
        end = HEADROOM_BYTES + left;
    }
    let mid_frame = d.mid_frame();
    rec.finish(End::Eof { mid_frame }, d.peer_closed())
}

/// Compares two outcomes. A text frame that fails UTF-8 part way may have
/// handed out a valid start in pieces before the bad bytes arrived; that
/// trailing partial frame is compared as a prefix.
fn same_frames(a: &Outcome, b: &Outcome, what: &str) {
    assert_eq!(a.end, b.end, "{what}: different ends\n{a:#?}\n{b:#?}");
    assert_eq!(a.peer_closed, b.peer_closed, "{what}: peer_closed differs");
    if a.end == End::Failed(ProtocolError::InvalidUtf8) {
        let (mut ea, mut eb) = (a.events.clone(), b.events.clone());
        let partial = |e: &Event| {
            matches!(
                e,
                Event::Frame {
                    complete: false,
                    ..
                }
            )
        };
        let pa = ea.last().filter(|e| partial(e)).cloned();
        let pb = eb.last().filter(|e| partial(e)).cloned();
        if pa.is_some() {
            ea.pop();
        }
        if pb.is_some() {
            eb.pop();
        }
        if let (Some(Event::Frame { bytes: x, .. }), Some(Event::Frame { bytes: y, .. })) =
            (&pa, &pb)
        {
            let n = x.len().min(y.len());
            assert_eq!(x[..n], y[..n], "{what}: partial frames differ");
        }
        assert_eq!(ea, eb, "{what}: different frames\n{a:#?}\n{b:#?}");
    } else {
        assert_eq!(
            a.events, b.events,
            "{what}: different frames\n{a:#?}\n{b:#?}"
        );
    }
}

/// A client frame header decoded byte by byte (RFC 6455 §5.2), independent
/// of weir's parser; the checks run in the order weir reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RefHeader {
    fin: bool,
    opcode: u8,
    key: [u8; 4],
    len: u64,
    header_len: usize,
}

fn ref_header(b: &[u8]) -> Result<Option<RefHeader>, ProtocolError> {
    if b.len() < 2 {
        return Ok(None);
    }
    if b[0] & 0b0111_0000 != 0 {
        return Err(ProtocolError::ReservedBitsSet);
    }
    let opcode = b[0] & 0x0F;
    if !matches!(opcode, 0 | 1 | 2 | 8 | 9 | 10) {
        return Err(ProtocolError::ReservedOpcode(opcode));
    }
    if b[1] < 128 {
        return Err(ProtocolError::UnmaskedClientFrame);
    }
    let fin = b[0] >= 128;
    let short = b[1] - 128;
    let ext = match short {
        126 => 2,
        127 => 8,
        _ => 0,
    };
    if b.len() < 2 + ext {
        return Ok(None);
    }
    let mut len = u64::from(short);
    if ext > 0 {
        len = 0;
        for &x in &b[2..2 + ext] {
            len = len * 256 + u64::from(x);
        }
        if ext == 8 && b[2] >= 128 {
            return Err(ProtocolError::PayloadLengthTopBitSet);
        }
    }
    if opcode >= 8 {
        if !fin {
            return Err(ProtocolError::FragmentedControlFrame);
        }
        if len > 125 {
            return Err(ProtocolError::ControlFrameTooLong);
        }
    }
    let header_len = 2 + ext + 4;
    if b.len() < header_len {
        return Ok(None);
    }
    let k = &b[2 + ext..header_len];
    Ok(Some(RefHeader {
        fin,
        opcode,
        key: [k[0], k[1], k[2], k[3]],
        len,
        header_len,
    }))
}

/// `parse_client_header` against the reference on each prefix of the input.
fn check_header_parser(wire: &[u8]) {
    for cut in 0..=wire.len().min(15) {
        let ours = ref_header(&wire[..cut]);
        let weirs = parse_client_header(&wire[..cut]).map(|h| {
            h.map(|h| RefHeader {
                fin: h.fin,
                opcode: h.opcode as u8,
                key: h.mask,
                len: h.payload_len,
                header_len: h.header_len,
            })
        });
        assert_eq!(weirs, ours, "parse_client_header on {:02x?}", &wire[..cut]);
    }
}

fn opcode(bits: u8) -> OpCode {
    match bits {
        0 => OpCode::Continuation,
        1 => OpCode::Text,
        2 => OpCode::Binary,
        8 => OpCode::Close,
        9 => OpCode::Ping,
        _ => OpCode::Pong,
    }
}

/// Close codes a peer may send (RFC 6455 §7.4.1-2, IANA registry).
fn ref_close_code_ok(code: u16) -> bool {
    (1000..=1003).contains(&code) || (1007..=1014).contains(&code) || (3000..5000).contains(&code)
}

/// Whether `bytes` is valid UTF-8, or a valid start of it when `partial`.
fn ref_utf8_ok(bytes: &[u8], partial: bool) -> bool {
    match std::str::from_utf8(bytes) {
        Ok(_) => true,
        Err(e) => partial && e.error_len().is_none(),
    }
}

/// The whole stream decoded frame by frame with the rules of RFC 6455 §5
/// and §8.1, unmasking byte by byte (octet i ^ key[i % 4], §5.3).
fn reference(wire: &[u8], max_message: u64, stream_above: u64) -> Outcome {
    let mut events = Vec::new();
    let mut peer_closed = false;
    let mut at = 0;
    // The open message: its opcode, bytes so far (text), total length.
    let mut message: Option<(u8, Vec<u8>, u64)> = None;
    let fail = |events, e, peer_closed| Outcome {
        events,
        end: End::Failed(e),
        peer_closed,
    };
    loop {
        let rest = &wire[at..];
        if let Some(&b0) = rest.first() {
            peer_closed |= b0 & 0x0F == 8;
        }
        let h = match ref_header(rest) {
            Ok(Some(h)) => h,
            Ok(None) => {
                return Outcome {
                    events,
                    end: End::Eof { mid_frame: false },
                    peer_closed,
                }
            }
            Err(e) => return fail(events, e, peer_closed),
        };
        let control = h.opcode >= 8;
        if !control {
            match (&mut message, h.opcode) {
                (None, 0) => {
                    return fail(events, ProtocolError::UnexpectedContinuation, peer_closed)
                }
                (Some(_), 1 | 2) => {
                    return fail(events, ProtocolError::ExpectedContinuation, peer_closed)
                }
                (None, op) => message = Some((op, Vec::new(), 0)),
                (Some(_), _) => {}
            }
            let m = message.as_mut().expect("open");
            m.2 += h.len;
            if m.2 > max_message {
                return fail(events, ProtocolError::MessageTooBig, peer_closed);
            }
        }
        let body = &rest[h.header_len..];
        let have = (h.len.min(body.len() as u64)) as usize;
        let bytes: Vec<u8> = body[..have]
            .iter()
            .enumerate()
            .map(|(i, x)| x ^ h.key[i % 4])
            .collect();
        let complete = have as u64 == h.len;
        if !control {
            let m = message.as_mut().expect("open");
            if m.0 == 1 {
                m.1.extend_from_slice(&bytes);
                if !ref_utf8_ok(&m.1, !(complete && h.fin)) {
                    return fail(events, ProtocolError::InvalidUtf8, peer_closed);
                }
            }
        }
        if !complete {
            if !control && h.len > stream_above && have > 0 {
                events.push(Event::Frame {
                    opcode: opcode(h.opcode),
                    message: opcode(message.as_ref().expect("open").0),
                    fin: h.fin,
                    len: h.len,
                    bytes,
                    complete: false,
                });
            }
            return Outcome {
                events,
                end: End::Eof { mid_frame: true },
                peer_closed,
            };
        }
        at += h.header_len + have;
        match h.opcode {
            8 => {
                let code = match bytes.len() {
                    0 => 1005,
                    1 => return fail(events, ProtocolError::CloseFrameTooShort, peer_closed),
                    _ => {
                        let code = u16::from(bytes[0]) * 256 + u16::from(bytes[1]);
                        if !ref_close_code_ok(code) {
                            return fail(
                                events,
                                ProtocolError::InvalidCloseCode(code),
                                peer_closed,
                            );
                        }
                        if !ref_utf8_ok(&bytes[2..], false) {
                            return fail(events, ProtocolError::InvalidUtf8, peer_closed);
                        }
                        code
                    }
                };
                events.push(Event::Close(code, bytes));
                return Outcome {
                    events,
                    end: End::Closed,
                    peer_closed,
                };
            }
            9 => events.push(Event::Ping(bytes)),
            10 => events.push(Event::Pong),
            op => {
                let m = message.as_ref().expect("open").0;
                events.push(Event::Frame {
                    opcode: opcode(op),
                    message: opcode(m),
                    fin: h.fin,
                    len: h.len,
                    bytes,
                    complete: true,
                });
                if h.fin {
                    message = None;
                }
            }
        }
    }
}
