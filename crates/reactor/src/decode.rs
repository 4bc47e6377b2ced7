//! The streaming decoder: turns the bytes of one read into pieces — whole
//! frames when they fit the buffer, successive slices of a frame when it does
//! not — unmasked in place, with message-level rules (fragmentation, UTF-8,
//! size) checked as bytes arrive, not when the message ends.

use std::ops::Range;
use weir_ws::close::parse_close_payload;
use weir_ws::frame::{
    parse_header, FrameHeader, OpCode, ProtocolError, RESERVED_BITS, RESERVED_BITS_WITH_DEFLATE,
};
use weir_ws::mask::unmask;
use weir_ws::utf8::Utf8Validator;

/// A run of unmasked payload bytes in the buffer, or a whole control frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Data(DataPiece),
    /// A complete ping; `payload` is unmasked in place.
    Ping {
        payload: Range<usize>,
    },
    /// A complete pong; `payload` is unmasked in place.
    Pong {
        payload: Range<usize>,
    },
    /// A valid close frame. `code` is 1005 when the frame had no body.
    Close {
        code: u16,
        payload: Range<usize>,
    },
}

/// Payload of a data frame. A frame that fits the buffer comes as one piece
/// (`frame_start && frame_end`); a larger one comes as several.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataPiece {
    /// The frame's own opcode: Text, Binary or Continuation.
    pub opcode: OpCode,
    /// The message's opcode (Text or Binary), also for continuations.
    pub message: OpCode,
    /// The frame's FIN bit: the message ends with this frame.
    pub fin: bool,
    /// The frame's total payload length (for headers of streamed replies).
    pub frame_len: u64,
    /// This piece starts the frame; the bytes just before `payload.start`
    /// (the client's header, or the buffer's headroom) are free to overwrite.
    pub frame_start: bool,
    /// This piece ends the frame.
    pub frame_end: bool,
    pub payload: Range<usize>,
    /// The message is compressed (RSV1 on its first frame): these are
    /// deflate bytes for the connection loop to inflate. A piece handed to
    /// a behaviour with this set is instead the whole inflated message, in
    /// a buffer of its own (not the read buffer: no room before it).
    pub compressed: bool,
}

impl DataPiece {
    /// This piece completes the message.
    pub fn message_end(&self) -> bool {
        self.fin && self.frame_end
    }
}

/// The frame whose payload is being received.
#[derive(Debug, Clone)]
struct Current {
    header: FrameHeader,
    /// Payload bytes handed out as pieces.
    emitted: u64,
    /// Payload bytes unmasked and UTF-8 checked (≥ emitted): a frame waiting
    /// for its tail is checked as it arrives, to fail fast.
    checked: u64,
    /// Too big for the buffer: hand out each run of bytes as it arrives.
    streamed: bool,
}

/// Per-connection decoding state; it lives across reads.
#[derive(Debug)]
pub struct Decoder {
    max_message: u64,
    /// Frames with payloads above this are streamed in pieces.
    stream_above: u64,
    current: Option<Current>,
    /// The open message's opcode, between its first and its final frame.
    message: Option<OpCode>,
    message_len: u64,
    /// The open message is compressed: its UTF-8 is checked after
    /// inflating, and its wire size has the slack of [`wire_cap`].
    compressed: bool,
    /// Header bits that fail a frame: RSV1-3, or RSV2-3 once
    /// permessage-deflate was negotiated.
    reserved: u8,
    utf8: Utf8Validator,
    /// A close frame has started: the client's side of the closing
    /// handshake is done, valid or not.
    peer_closed: bool,
    /// The first protocol error. The loop keeps decoding after one while it
    /// waits for the client's close (`Conn::await_close`); every later call
    /// repeats it instead of decoding from a half-checked frame.
    failed: Option<ProtocolError>,
}

impl Decoder {
    pub fn new(max_message: usize, stream_above: usize) -> Decoder {
        Decoder {
            max_message: max_message as u64,
            stream_above: stream_above as u64,
            current: None,
            message: None,
            message_len: 0,
            compressed: false,
            reserved: RESERVED_BITS,
            utf8: Utf8Validator::default(),
            peer_closed: false,
            failed: None,
        }
    }

    /// The connection negotiated permessage-deflate: RSV1 marks the first
    /// frame of a compressed message (RFC 7692 §6).
    pub(crate) fn allow_compression(&mut self) {
        self.reserved = RESERVED_BITS_WITH_DEFLATE;
    }

    /// The client has sent a close frame (even an invalid one), so it will
    /// send nothing more: after answering, the server closes TCP at once.
    pub(crate) fn peer_closed(&self) -> bool {
        self.peer_closed
    }

    /// Whether a frame is partly received (its header consumed).
    pub fn mid_frame(&self) -> bool {
        self.current.is_some()
    }

    /// Payload bytes still to come of a frame being streamed (0 otherwise).
    pub(crate) fn streamed_remaining(&self) -> u64 {
        self.current
            .as_ref()
            .filter(|c| c.streamed)
            .map_or(0, |c| c.header.payload_len - c.emitted)
    }

    /// Decodes the next piece from `buf[*pos..end]`. `Ok(None)` means more
    /// bytes are needed; `buf[*pos..end]` must then be kept, in order, at the
    /// front of the next read's data. After an error, every call returns it.
    ///
    /// Inlined into the connection loop: the common frame (see
    /// [`whole_message`](Self::whole_message)) is decoded there without a
    /// call; every other goes to the general path.
    #[inline(always)]
    pub fn next(
        &mut self,
        buf: &mut [u8],
        pos: &mut usize,
        end: usize,
    ) -> Result<Option<Piece>, ProtocolError> {
        if self.current.is_none() && self.message.is_none() && self.failed.is_none() {
            match self.whole_message(buf, pos, end) {
                Some(Ok(piece)) => return Ok(Some(piece)),
                Some(Err(e)) => {
                    self.failed = Some(e);
                    return Err(e);
                }
                None => {}
            }
        }
        self.next_general(buf, pos, end)
    }

    #[inline(never)]
    fn next_general(
        &mut self,
        buf: &mut [u8],
        pos: &mut usize,
        end: usize,
    ) -> Result<Option<Piece>, ProtocolError> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        let piece = self.decode(buf, pos, end);
        if let Err(e) = piece {
            self.failed = Some(e);
        }
        piece
    }

    fn decode(
        &mut self,
        buf: &mut [u8],
        pos: &mut usize,
        end: usize,
    ) -> Result<Option<Piece>, ProtocolError> {
        if self.current.is_none() {
            // Noted before the header is checked: an invalid close is a close too.
            self.peer_closed |= buf[*pos..end]
                .first()
                .is_some_and(|b| b & 0x0F == OpCode::Close as u8);
            let Some(header) = parse_header(&buf[*pos..end], self.reserved)? else {
                return Ok(None);
            };
            self.start_frame(&header)?;
            *pos += header.header_len;
            self.current = Some(Current {
                // Control frames (at most 125 bytes) always come whole: a
                // piece of one would be handed out as data.
                streamed: !header.opcode.is_control() && header.payload_len > self.stream_above,
                header,
                emitted: 0,
                checked: 0,
            });
        }
        let cur = self.current.as_mut().expect("set above");
        let h = cur.header;
        let available = (end - *pos) as u64;
        let remaining = h.payload_len - cur.emitted;
        let have = available.min(remaining);
        // Unmask and check what arrived since the last call.
        let from = *pos + (cur.checked - cur.emitted) as usize;
        let to = *pos + have as usize;
        if to > from {
            unmask(&mut buf[from..to], h.mask, cur.checked as usize);
            if self.message == Some(OpCode::Text) && !h.opcode.is_control() && !self.compressed {
                self.utf8.feed(&buf[from..to])?;
            }
            cur.checked += (to - from) as u64;
        }
        let complete = have == remaining;
        if !complete && (!cur.streamed || have == 0) {
            return Ok(None);
        }
        let payload = *pos..to;
        *pos = to;
        let frame_start = cur.emitted == 0;
        cur.emitted += have;
        if !complete {
            return Ok(Some(Piece::Data(DataPiece {
                opcode: h.opcode,
                message: self.message.expect("data frame opens a message"),
                fin: h.fin,
                frame_len: h.payload_len,
                frame_start,
                frame_end: false,
                payload,
                compressed: self.compressed,
            })));
        }
        self.current = None;
        match h.opcode {
            OpCode::Ping => Ok(Some(Piece::Ping { payload })),
            OpCode::Pong => Ok(Some(Piece::Pong { payload })),
            OpCode::Close => {
                let (code, _reason) = parse_close_payload(&buf[payload.clone()])?;
                Ok(Some(Piece::Close { code, payload }))
            }
            _ => {
                let message = self.message.expect("data frame opens a message");
                let compressed = self.compressed;
                if h.fin {
                    if message == OpCode::Text && !compressed {
                        self.utf8.finish()?;
                    }
                    self.message = None;
                    self.compressed = false;
                }
                Ok(Some(Piece::Data(DataPiece {
                    opcode: h.opcode,
                    message,
                    fin: h.fin,
                    frame_len: h.payload_len,
                    frame_start,
                    frame_end: true,
                    payload,
                    compressed,
                })))
            }
        }
    }

    /// The common case, decoded without the general path's state: a whole
    /// unfragmented, uncompressed text or binary message (FIN, no RSV bits,
    /// a 7- or 16-bit length) that is all in `buf[*pos..end]` and not long
    /// enough to stream. It opens and closes its message in one step, so no
    /// state between frames changes. `None` when the frame is anything else
    /// (or incomplete): the general path takes it, rules and errors included.
    #[inline(always)]
    fn whole_message(
        &mut self,
        buf: &mut [u8],
        pos: &mut usize,
        end: usize,
    ) -> Option<Result<Piece, ProtocolError>> {
        let at = *pos;
        let (b0, b1) = match buf.get(at..end)? {
            [b0, b1, ..] => (*b0, *b1),
            _ => return None,
        };
        let opcode = match b0 {
            0x81 => OpCode::Text,
            0x82 => OpCode::Binary,
            _ => return None,
        };
        let (len, header_len) = match b1 {
            0x80..=0xFD => (usize::from(b1 & 0x7F), 6),
            0xFE => {
                let ext = buf.get(at + 2..at + 4)?;
                (usize::from(u16::from_be_bytes([ext[0], ext[1]])), 8)
            }
            // Unmasked (an error), or a 64-bit length: the general path.
            _ => return None,
        };
        let start = at + header_len;
        let stop = start.checked_add(len)?;
        if stop > end || len as u64 > self.stream_above || len as u64 > self.max_message {
            return None;
        }
        let mask: [u8; 4] = buf[start - 4..start].try_into().expect("4 bytes");
        unmask(&mut buf[start..stop], mask, 0);
        if opcode == OpCode::Text && simdutf8::basic::from_utf8(&buf[start..stop]).is_err() {
            return Some(Err(ProtocolError::InvalidUtf8));
        }
        *pos = stop;
        Some(Ok(Piece::Data(DataPiece {
            opcode,
            message: opcode,
            fin: true,
            frame_len: len as u64,
            frame_start: true,
            frame_end: true,
            payload: start..stop,
            compressed: false,
        })))
    }

    /// Message-level rules for a new frame (RFC 6455 §5.4): continuations only
    /// inside a fragmented message, no new message inside one, and the size cap.
    fn start_frame(&mut self, h: &FrameHeader) -> Result<(), ProtocolError> {
        // RFC 7692 §6.1: RSV1 only on a message's first frame; control
        // frames are never compressed.
        if h.rsv1 && (h.opcode.is_control() || h.opcode == OpCode::Continuation) {
            return Err(ProtocolError::CompressedControlOrContinuation);
        }
        match (h.opcode, self.message) {
            (op, _) if op.is_control() => return Ok(()),
            (OpCode::Continuation, None) => return Err(ProtocolError::UnexpectedContinuation),
            (OpCode::Continuation, Some(_)) => {}
            (_, Some(_)) => return Err(ProtocolError::ExpectedContinuation),
            (op, None) => {
                self.message = Some(op);
                self.message_len = 0;
                self.compressed = h.rsv1;
            }
        }
        self.message_len += h.payload_len;
        let cap = if self.compressed {
            wire_cap(self.max_message)
        } else {
            self.max_message
        };
        if self.message_len > cap {
            return Err(ProtocolError::MessageTooBig);
        }
        Ok(())
    }
}

/// Wire bytes a compressed message may take: its inflated size is held to
/// `max_message` as it inflates, but deflate can make incompressible data
/// a little longer (5 bytes per stored block of up to 64 KiB), and an
/// endless run of empty blocks must not keep a message open for ever.
fn wire_cap(max_message: u64) -> u64 {
    max_message + max_message / 64 + 1024
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_ws::encode::encode_client_header;

    const KEY: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];

    fn frame(fin: bool, op: OpCode, payload: &[u8]) -> Vec<u8> {
        let mut h = [0u8; 14];
        let n = encode_client_header(&mut h, fin, op, KEY, payload.len() as u64);
        let mut out = h[..n].to_vec();
        let start = out.len();
        out.extend_from_slice(payload);
        unmask(&mut out[start..], KEY, 0);
        out
    }

    /// Decodes `wire` delivered in reads of `chunk` bytes, keeping leftovers
    /// the way the reactor does; returns pieces with their payload bytes.
    fn run(
        wire: &[u8],
        chunk: usize,
        stream_above: usize,
    ) -> Result<Vec<(Piece, Vec<u8>)>, ProtocolError> {
        let mut d = Decoder::new(1 << 20, stream_above);
        let mut out = Vec::new();
        let mut buf: Vec<u8> = Vec::new();
        for part in wire.chunks(chunk.max(1)) {
            buf.extend_from_slice(part);
            let mut pos = 0;
            let end = buf.len();
            while let Some(p) = d.next(&mut buf, &mut pos, end)? {
                let bytes = match &p {
                    Piece::Data(d) => buf[d.payload.clone()].to_vec(),
                    Piece::Ping { payload } | Piece::Close { payload, .. } => {
                        buf[payload.clone()].to_vec()
                    }
                    Piece::Pong { payload } => buf[payload.clone()].to_vec(),
                };
                out.push((p, bytes));
            }
            buf.drain(..pos);
        }
        Ok(out)
    }

    #[test]
    fn whole_frames_in_any_chunking() {
        let mut wire = frame(true, OpCode::Text, b"hello");
        wire.extend(frame(true, OpCode::Binary, &[7; 300]));
        for chunk in [1, 2, 3, 7, 64, 1000] {
            let pieces = run(&wire, chunk, 1 << 16).unwrap();
            assert_eq!(pieces.len(), 2, "chunk {chunk}");
            assert_eq!(pieces[0].1, b"hello");
            assert_eq!(pieces[1].1, vec![7; 300]);
            let Piece::Data(d) = &pieces[1].0 else {
                panic!()
            };
            assert!(d.frame_start && d.frame_end && d.fin && d.message == OpCode::Binary);
        }
    }

    /// Whole frames in one read take the short path; what it does not
    /// handle (over the cap, bad UTF-8, a message inside a fragmented one)
    /// must come out exactly as the general path decides.
    #[test]
    fn whole_messages_in_one_read_follow_the_same_rules() {
        let text: String = "héllo wörld ".repeat(20); // 16-bit length
        let mut wire = frame(true, OpCode::Text, text.as_bytes());
        wire.extend(frame(true, OpCode::Binary, &[]));
        wire.extend(frame(true, OpCode::Binary, &[9; 125]));
        // Byte by byte, every frame takes the general path.
        let fields = |pieces: &[(Piece, Vec<u8>)]| -> Vec<_> {
            pieces
                .iter()
                .map(|(p, bytes)| match p {
                    Piece::Data(d) => (d.opcode, d.message, d.fin, d.frame_len, bytes.clone()),
                    other => panic!("not data: {other:?}"),
                })
                .collect()
        };
        let whole = run(&wire, wire.len(), 1 << 16).unwrap();
        let byte_by_byte = run(&wire, 1, 1 << 16).unwrap();
        assert_eq!(fields(&whole), fields(&byte_by_byte));
        assert!(whole
            .iter()
            .all(|(p, _)| matches!(p, Piece::Data(d) if d.frame_start && d.frame_end)));
        assert_eq!(whole[0].1, text.as_bytes());
        assert_eq!(whole[2].1, vec![9; 125]);

        // Over max_message (1 MiB in `run`) is refused by its header alone.
        let mut d = Decoder::new(100, 1 << 16);
        let mut big = frame(true, OpCode::Binary, &[0; 101]);
        let end = big.len();
        assert_eq!(
            d.next(&mut big, &mut 0, end),
            Err(ProtocolError::MessageTooBig)
        );
        // Invalid UTF-8 in a whole text frame.
        let bad = frame(true, OpCode::Text, &[b'a', 0xC3, 0x28]);
        assert_eq!(
            run(&bad, bad.len(), 1 << 16),
            Err(ProtocolError::InvalidUtf8)
        );
        // A whole message inside a fragmented one is an error, not a message.
        let mut inside = frame(false, OpCode::Text, b"a");
        inside.extend(frame(true, OpCode::Binary, b"b"));
        assert_eq!(
            run(&inside, inside.len(), 1 << 16),
            Err(ProtocolError::ExpectedContinuation)
        );
    }

    /// RFC 6455 §5.4: a fragmented message with a ping between its fragments.
    #[test]
    fn fragments_with_interleaved_control() {
        let mut wire = frame(false, OpCode::Text, b"fra");
        wire.extend(frame(true, OpCode::Ping, b"p"));
        wire.extend(frame(true, OpCode::Continuation, "gmént".as_bytes()));
        let pieces = run(&wire, 4, 1 << 16).unwrap();
        assert_eq!(pieces.len(), 3);
        assert!(matches!(pieces[1].0, Piece::Ping { .. }));
        let Piece::Data(last) = &pieces[2].0 else {
            panic!()
        };
        assert_eq!(
            (last.opcode, last.message, last.fin),
            (OpCode::Continuation, OpCode::Text, true)
        );
    }

    #[test]
    fn large_frames_stream_in_pieces() {
        let payload: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
        let wire = frame(true, OpCode::Binary, &payload);
        let pieces = run(&wire, 1000, 1024).unwrap();
        assert!(pieces.len() >= 5);
        let joined: Vec<u8> = pieces.iter().flat_map(|p| p.1.clone()).collect();
        assert_eq!(joined, payload);
        let Piece::Data(first) = &pieces[0].0 else {
            panic!()
        };
        let Piece::Data(last) = &pieces.last().unwrap().0 else {
            panic!()
        };
        assert!(first.frame_start && !first.frame_end && last.frame_end && !last.frame_start);
    }

    /// RFC 6455 §5.4: continuation without a message, or a new message inside one.
    #[test]
    fn fragmentation_rules() {
        assert_eq!(
            run(&frame(true, OpCode::Continuation, b"x"), 64, 1 << 16),
            Err(ProtocolError::UnexpectedContinuation)
        );
        let mut wire = frame(false, OpCode::Text, b"a");
        wire.extend(frame(true, OpCode::Text, b"b"));
        assert_eq!(
            run(&wire, 64, 1 << 16),
            Err(ProtocolError::ExpectedContinuation)
        );
    }

    /// Autobahn 6.4.x: invalid UTF-8 fails before the frame's tail arrives.
    #[test]
    fn invalid_utf8_fails_before_the_frame_completes() {
        let mut payload = "κόσμε".as_bytes().to_vec();
        payload.extend_from_slice(&[0xED, 0xA0, 0x80]);
        payload.extend_from_slice(b"more text after the bad bytes");
        let wire = frame(true, OpCode::Text, &payload);
        let mut d = Decoder::new(1 << 20, 1 << 16);
        let mut buf = wire[..wire.len() - 10].to_vec();
        let end = buf.len();
        assert_eq!(
            d.next(&mut buf, &mut 0, end),
            Err(ProtocolError::InvalidUtf8)
        );
    }

    #[test]
    fn message_size_cap_counts_all_fragments() {
        let mut d = Decoder::new(100, 1 << 16);
        let mut wire = frame(false, OpCode::Binary, &[0; 60]);
        wire.extend(frame(true, OpCode::Continuation, &[0; 60]));
        let end = wire.len();
        let mut pos = 0;
        assert!(d.next(&mut wire, &mut pos, end).unwrap().is_some());
        assert_eq!(
            d.next(&mut wire, &mut pos, end),
            Err(ProtocolError::MessageTooBig)
        );
    }

    /// Fuzz regression (frame_stream): after a protocol error the decoder
    /// went on decoding. A bad close had already been consumed, so the next
    /// call parsed the following frame; a text frame failing UTF-8 had been
    /// unmasked in place but not marked checked, so the next call (the loop
    /// keeps calling while it waits for the client's close) unmasked it again
    /// and handed out the re-masked bytes as a valid message.
    #[test]
    fn fuzz_regression_decoder_recovers_after_error() {
        let mut wire = frame(true, OpCode::Close, &[0x03]);
        wire.extend(frame(true, OpCode::Text, b"after"));
        let mut d = Decoder::new(1 << 20, 1 << 16);
        let (mut pos, end) = (0, wire.len());
        for _ in 0..2 {
            assert_eq!(
                d.next(&mut wire, &mut pos, end),
                Err(ProtocolError::CloseFrameTooShort)
            );
        }

        let mut wire = frame(true, OpCode::Text, b"a\xFF");
        let mut d = Decoder::new(1 << 20, 1 << 16);
        let (mut pos, end) = (0, wire.len());
        for _ in 0..2 {
            assert_eq!(
                d.next(&mut wire, &mut pos, end),
                Err(ProtocolError::InvalidUtf8)
            );
        }
    }

    /// Fuzz regression (frame_stream): with `stream_above` under 125 bytes a
    /// ping that had only partly arrived was streamed like a data frame, and
    /// the decoder panicked on "data frame opens a message" (or, inside a
    /// fragmented message, handed the ping's bytes out as message data).
    #[test]
    fn fuzz_regression_control_frame_streamed_below_125_bytes() {
        let wire = frame(true, OpCode::Ping, &[9; 17]);
        let mut d = Decoder::new(1 << 20, 3);
        let mut buf = wire[..10].to_vec();
        let end = buf.len();
        assert_eq!(d.next(&mut buf, &mut 0, end), Ok(None));
        let pieces = run(&wire, 5, 3).unwrap();
        assert_eq!(pieces.len(), 1);
        assert_eq!(pieces[0].1, vec![9; 17]);
        assert!(matches!(pieces[0].0, Piece::Ping { .. }));
    }

    /// Fuzz regression (frame_stream): when a read ended on a frame boundary,
    /// the byte just past `end` (stale data from an earlier read or a pooled
    /// buffer) was taken for the next frame's first byte; a stale 0x88 made
    /// `peer_closed` true, and the server would then skip waiting for the
    /// client's close after sending its own.
    #[test]
    fn fuzz_regression_peer_closed_read_past_end() {
        let mut buf = frame(true, OpCode::Binary, b"ab");
        let end = buf.len();
        buf.push(0x88);
        let mut d = Decoder::new(1 << 20, 1 << 16);
        let mut pos = 0;
        assert!(d.next(&mut buf, &mut pos, end).unwrap().is_some());
        assert_eq!(d.next(&mut buf, &mut pos, end), Ok(None));
        assert!(!d.peer_closed());
    }

    #[test]
    fn close_frames_are_validated() {
        let good = frame(true, OpCode::Close, &[0x03, 0xE8]);
        assert!(matches!(
            run(&good, 64, 1 << 16).unwrap()[0].0,
            Piece::Close { code: 1000, .. }
        ));
        let bad = frame(true, OpCode::Close, &[0x03, 0xEC]);
        assert_eq!(
            run(&bad, 64, 1 << 16),
            Err(ProtocolError::InvalidCloseCode(1004))
        );
    }

    /// RFC 7692 §6: RSV1 fails the frame unless permessage-deflate was
    /// negotiated; then it marks the message's pieces compressed, and is
    /// refused on continuations and control frames (§6.1).
    #[test]
    fn rsv1_only_when_negotiated_and_only_on_first_frames() {
        let mut wire = frame(false, OpCode::Text, b"ab");
        wire[0] |= 0x40;
        wire.extend(frame(true, OpCode::Continuation, b"cd"));
        let end = wire.len();
        let mut d = Decoder::new(1 << 20, 1 << 16);
        assert_eq!(
            d.next(&mut wire.clone(), &mut 0, end),
            Err(ProtocolError::ReservedBitsSet)
        );
        let mut d = Decoder::new(1 << 20, 1 << 16);
        d.allow_compression();
        let mut pos = 0;
        for _ in 0..2 {
            match d.next(&mut wire, &mut pos, end).unwrap() {
                Some(Piece::Data(p)) => assert!(p.compressed),
                other => panic!("{other:?}"),
            }
        }
        for (first, op) in [(0xC0u8, OpCode::Continuation), (0xC0, OpCode::Ping)] {
            let mut d = Decoder::new(1 << 20, 1 << 16);
            d.allow_compression();
            let mut wire = frame(false, OpCode::Binary, b"x");
            let mut second = frame(true, op, b"y");
            second[0] |= first & 0x40;
            wire.extend(second);
            let end = wire.len();
            let mut pos = 0;
            assert!(d.next(&mut wire, &mut pos, end).unwrap().is_some());
            assert_eq!(
                d.next(&mut wire, &mut pos, end),
                Err(ProtocolError::CompressedControlOrContinuation)
            );
        }
        let mut wire = frame(true, OpCode::Text, b"a");
        wire[0] |= 0x20;
        let end = wire.len();
        let mut d = Decoder::new(1 << 20, 1 << 16);
        d.allow_compression();
        assert_eq!(
            d.next(&mut wire, &mut 0, end),
            Err(ProtocolError::ReservedBitsSet),
            "RSV2 stays reserved"
        );
    }

    /// Invalid UTF-8 in a compressed text message is the loop's to find
    /// (after inflating): the decoder passes the deflate bytes through.
    #[test]
    fn compressed_text_is_not_utf8_checked_raw() {
        let mut wire = frame(true, OpCode::Text, &[0xFF, 0xFE]);
        wire[0] |= 0x40;
        let end = wire.len();
        let mut d = Decoder::new(1 << 20, 1 << 16);
        d.allow_compression();
        assert!(d.next(&mut wire, &mut 0, end).unwrap().is_some());
    }
}
