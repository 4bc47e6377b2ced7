//! The encoder: the one place a message becomes wire bytes. Echo replies,
//! pongs and close replies (headers written into room the receive buffer
//! already has), relay frames, guest sends, publishes, pings and server
//! closes are all built here, so an extension that changes how a message is
//! framed (permessage-deflate: RSV1 and a compressor per connection) hooks in
//! here and nowhere else. See `docs/architecture.md`.
//!
//! Servers never mask (RFC 6455 §5.1). A compressed message (RFC 7692) is
//! one frame with RSV1 set, built by [`append_message`]; every other frame
//! has RSV1-3 clear.

use super::close;
use super::compress::Deflater;
use super::frame::{parse_server_header, OpCode};
use std::ops::Range;

/// Longest server header: 2 bytes plus an 8-byte extended length.
pub const MAX_SERVER_HEADER_BYTES: usize = 10;

/// The opcode of a data message.
#[inline]
pub fn message_opcode(text: bool) -> OpCode {
    if text {
        OpCode::Text
    } else {
        OpCode::Binary
    }
}

/// Length of a server header for a payload of `len` bytes (RFC 6455 §5.2:
/// 7-bit, 16-bit or 64-bit length form).
#[inline]
pub fn header_len(len: u64) -> usize {
    match len {
        0..=125 => 2,
        126..=0xFFFF => 4,
        _ => 10,
    }
}

/// Writes a server frame header into the front of `out` and returns its
/// length (2, 4 or 10 bytes).
#[inline]
pub fn write_header(out: &mut [u8], fin: bool, opcode: OpCode, len: u64) -> usize {
    out[0] = (u8::from(fin) << 7) | opcode as u8;
    match len {
        0..=125 => {
            out[1] = len as u8;
            2
        }
        126..=0xFFFF => {
            out[1] = 126;
            out[2..4].copy_from_slice(&(len as u16).to_be_bytes());
            4
        }
        _ => {
            out[1] = 127;
            out[2..10].copy_from_slice(&len.to_be_bytes());
            10
        }
    }
}

/// Writes a header for a frame of `frame_len` payload bytes so that it ends
/// at `payload_start`, in room the caller guarantees is free (the client's
/// own header, which is always at least as long, or the buffer's headroom).
/// Returns where the frame now starts: the reply is `buf[start..]` up to the
/// payload's end, with no copy of the payload.
#[inline]
pub fn header_before(
    buf: &mut [u8],
    payload_start: usize,
    fin: bool,
    opcode: OpCode,
    frame_len: u64,
) -> usize {
    let at = payload_start - header_len(frame_len);
    write_header(&mut buf[at..], fin, opcode, frame_len);
    at
}

/// Appends a header for a frame of `len` payload bytes (the payload follows).
#[inline]
pub fn append_header(out: &mut Vec<u8>, fin: bool, opcode: OpCode, len: u64) {
    let mut header = [0u8; MAX_SERVER_HEADER_BYTES];
    let n = write_header(&mut header, fin, opcode, len);
    out.extend_from_slice(&header[..n]);
}

/// Appends one whole unfragmented frame.
#[inline]
pub fn append_frame(out: &mut Vec<u8>, opcode: OpCode, payload: &[u8]) {
    out.reserve(MAX_SERVER_HEADER_BYTES + payload.len());
    append_header(out, true, opcode, payload.len() as u64);
    out.extend_from_slice(payload);
}

/// Appends one whole message for a connection that negotiated
/// permessage-deflate: compressed, in one frame with RSV1 set (RFC 7692
/// §6), when it is at least the route's `compression_min`; else as a
/// plain frame. `scratch` holds the deflate output before its header is
/// known; it keeps its allocation for the next message.
#[inline]
pub fn append_message(
    out: &mut Vec<u8>,
    opcode: OpCode,
    payload: &[u8],
    deflater: &mut Deflater,
    scratch: &mut Vec<u8>,
) {
    if !deflater.wants(payload.len()) {
        append_frame(out, opcode, payload);
        return;
    }
    scratch.clear();
    deflater.compress(payload, scratch);
    let mut header = [0u8; MAX_SERVER_HEADER_BYTES];
    let n = write_header(&mut header, true, opcode, scratch.len() as u64);
    header[0] |= RSV1;
    out.reserve(n + scratch.len());
    out.extend_from_slice(&header[..n]);
    out.extend_from_slice(scratch);
}

/// Appends `frames` (whole plain server frames, as relays, guests and
/// publishers build them) re-framed for a connection that negotiated
/// permessage-deflate: each one-frame data message through
/// [`append_message`] (compressed from `compression_min` on), fragments
/// of a fragmented message and control frames unchanged (a fragmented
/// message may go plain, RFC 7692 §6.1).
pub fn append_compressed(
    out: &mut Vec<u8>,
    mut frames: &[u8],
    deflater: &mut Deflater,
    scratch: &mut Vec<u8>,
) {
    out.reserve(frames.len());
    while !frames.is_empty() {
        let header = match parse_server_header(frames) {
            Ok(Some(h)) if h.header_len as u64 + h.payload_len <= frames.len() as u64 => h,
            // Our own frames always parse; anything else goes as it is.
            _ => {
                debug_assert!(false, "producers hand over whole server frames");
                out.extend_from_slice(frames);
                return;
            }
        };
        let end = header.header_len + header.payload_len as usize;
        if header.fin && matches!(header.opcode, OpCode::Text | OpCode::Binary) {
            let payload = &frames[header.header_len..end];
            append_message(out, header.opcode, payload, deflater, scratch);
        } else {
            out.extend_from_slice(&frames[..end]);
        }
        frames = &frames[end..];
    }
}

/// The RSV1 bit of a frame's first byte: "compressed" under
/// permessage-deflate.
pub const RSV1: u8 = 0x40;

/// One whole unfragmented frame (publishes, pings).
pub fn frame(opcode: OpCode, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    append_frame(&mut out, opcode, payload);
    out
}

/// A server close frame: `code` (an unsendable one becomes 1011) and the
/// reason cut to fit a control frame.
pub fn close_frame(code: u16, reason: &str) -> Vec<u8> {
    let reason = close::fit_reason(reason);
    let mut payload = [0u8; 2 + close::MAX_REASON_BYTES];
    payload[..2].copy_from_slice(&close::sendable(code).to_be_bytes());
    payload[2..2 + reason.len()].copy_from_slice(reason.as_bytes());
    frame(OpCode::Close, &payload[..2 + reason.len()])
}

/// The pong answering a ping whose (unmasked) payload is `buf[payload]`,
/// built in place: the header goes where the ping's was (RFC 6455 §5.5.3).
#[inline]
pub fn pong_in_place(buf: &mut [u8], payload: Range<usize>) -> Range<usize> {
    let at = header_before(buf, payload.start, true, OpCode::Pong, payload.len() as u64);
    at..payload.end
}

/// The close answering a client's close whose payload is `buf[payload]`,
/// built in place over the client's header: it echoes the client's code
/// (1000 when it gave none) without the reason (RFC 6455 §5.5.1).
#[inline]
pub fn close_reply_in_place(buf: &mut [u8], payload: Range<usize>, code: u16) -> Range<usize> {
    let code = if code == close::NO_STATUS {
        close::NORMAL
    } else {
        code
    };
    let at = payload.start - 4;
    write_header(&mut buf[at..], true, OpCode::Close, 2);
    buf[at + 2..payload.start].copy_from_slice(&code.to_be_bytes());
    at..payload.start
}

/// Writes a masked (client) header for a frame of `frame_len` payload bytes
/// so that it ends at `payload_start`, over a client header that was there
/// (a masked header of the same length form is as long). A proxy sends the
/// client's frames on this way, the payload masked again in place with
/// `mask`. Returns where the frame now starts.
#[inline]
pub fn masked_header_before(
    buf: &mut [u8],
    payload_start: usize,
    fin: bool,
    opcode: OpCode,
    frame_len: u64,
    mask: [u8; 4],
) -> usize {
    let at = payload_start - header_len(frame_len) - 4;
    encode_client_header(&mut buf[at..], fin, opcode, mask, frame_len);
    at
}

/// A masked close frame, as a client sends it (a proxy toward its
/// upstream): `code` (an unsendable one becomes 1011) and the reason cut to
/// fit a control frame.
pub fn client_close_frame(code: u16, reason: &str, mask: [u8; 4]) -> Vec<u8> {
    let reason = close::fit_reason(reason);
    let mut out = vec![0u8; 6 + 2 + reason.len()];
    let at = encode_client_header(&mut out, true, OpCode::Close, mask, 2 + reason.len() as u64);
    out[at..at + 2].copy_from_slice(&close::sendable(code).to_be_bytes());
    out[at + 2..].copy_from_slice(reason.as_bytes());
    super::mask::unmask(&mut out[at..], mask, 0);
    out
}

/// Appends one masked client frame (`fin` set) carrying `payload`: what a
/// proxy filter forwards toward the upstream.
pub fn append_client_frame(out: &mut Vec<u8>, opcode: OpCode, payload: &[u8], mask: [u8; 4]) {
    let start = out.len();
    out.resize(start + header_len(payload.len() as u64) + 4, 0);
    encode_client_header(&mut out[start..], true, opcode, mask, payload.len() as u64);
    let at = out.len();
    out.extend_from_slice(payload);
    super::mask::unmask(&mut out[at..], mask, 0);
}

/// Encodes a masked client header (tests and benchmarks build client
/// traffic with it); returns its length.
pub fn encode_client_header(
    out: &mut [u8],
    fin: bool,
    opcode: OpCode,
    mask: [u8; 4],
    len: u64,
) -> usize {
    let at = write_header(out, fin, opcode, len);
    out[1] |= 0x80;
    out[at..at + 4].copy_from_slice(&mask);
    at + 4
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 6455 §5.2: each length form at its boundaries.
    #[test]
    fn header_length_forms() {
        for (len, want) in [(0, 2), (125, 2), (126, 4), (65535, 4), (65536, 10)] {
            let mut b = [0u8; MAX_SERVER_HEADER_BYTES];
            assert_eq!(write_header(&mut b, true, OpCode::Binary, len), want);
            assert_eq!(header_len(len), want);
        }
    }

    #[test]
    fn append_frame_is_header_then_payload() {
        let mut out = b"x".to_vec();
        append_frame(&mut out, OpCode::Text, b"hi");
        assert_eq!(out, [b'x', 0x81, 2, b'h', b'i']);
    }

    /// RFC 6455 §5.5: a close payload is at most 125 bytes; the reason is cut
    /// on a character boundary, and an unsendable code becomes 1011.
    #[test]
    fn close_frame_fits_a_control_frame() {
        let long = "é".repeat(100);
        let f = close_frame(1001, &long);
        assert_eq!(f[0], 0x88);
        assert!(usize::from(f[1]) <= 125);
        assert!(std::str::from_utf8(&f[4..]).is_ok());
        let f = close_frame(1005, "");
        assert_eq!(&f[..], &[0x88, 2, 0x03, 0xF3]);
    }

    /// RFC 6455 §5.5.1: the reply to a close without a code carries 1000.
    #[test]
    fn close_reply_echoes_the_code() {
        let mut buf = [0u8; 16];
        let r = close_reply_in_place(&mut buf, 10..10, close::NO_STATUS);
        assert_eq!(&buf[r], &[0x88, 2, 0x03, 0xE8]);
        let r = close_reply_in_place(&mut buf, 10..14, 4001);
        assert_eq!(&buf[r], &[0x88, 2, 0x0F, 0xA1]);
    }

    /// RFC 6455 §5.3: a masked close parses back to its code and reason.
    #[test]
    fn client_close_frame_is_masked() {
        let f = client_close_frame(1001, "bye", [1, 2, 3, 4]);
        let h = crate::frame::parse_client_header(&f).unwrap().unwrap();
        let mut payload = f[h.header_len..].to_vec();
        crate::mask::unmask(&mut payload, h.mask, 0);
        assert_eq!(&payload, &[0x03, 0xE9, b'b', b'y', b'e']);
    }

    #[test]
    fn masked_header_takes_the_clients_place() {
        let mut buf = [0u8; 20];
        let at = masked_header_before(&mut buf, 14, true, OpCode::Binary, 300, [9, 9, 9, 9]);
        assert_eq!(at, 6);
        let h = crate::frame::parse_client_header(&buf[at..])
            .unwrap()
            .unwrap();
        assert_eq!(
            (h.payload_len, h.header_len, h.mask),
            (300, 8, [9, 9, 9, 9])
        );
    }

    /// RFC 7692 §6: a producer's frames re-framed for a compressing
    /// connection: one-frame messages from `compression_min` on become one
    /// RSV1 frame that inflates to the payload; short messages, fragments
    /// and control frames go unchanged.
    #[test]
    fn append_compressed_reframes_whole_messages_only() {
        use crate::compress::SharedForm;
        use flate2::{Decompress, FlushDecompress};
        let long = "{\"id\":1,\"name\":\"weir\"}".repeat(40);
        let mut frames = Vec::new();
        append_frame(&mut frames, OpCode::Text, long.as_bytes());
        append_frame(&mut frames, OpCode::Binary, b"short");
        append_header(&mut frames, false, OpCode::Text, 300);
        frames.extend_from_slice(&[b'a'; 300]);
        append_frame(&mut frames, OpCode::Ping, b"p");
        append_header(&mut frames, true, OpCode::Continuation, 1);
        frames.push(b'b');
        let form = SharedForm {
            window_bits: 15,
            min_bytes: 64,
            level: 1,
        };
        let (mut out, mut scratch) = (Vec::new(), Vec::new());
        append_compressed(
            &mut out,
            &frames,
            &mut Deflater::stateless(form),
            &mut scratch,
        );
        assert_eq!(out[0], 0x80 | RSV1 | OpCode::Text as u8);
        let len = usize::from(out[1]);
        assert!(len < long.len() / 4, "{len} bytes for {}", long.len());
        let mut deflated = out[2..2 + len].to_vec();
        deflated.extend_from_slice(&[0, 0, 0xFF, 0xFF]);
        let mut inflated = Vec::with_capacity(long.len() + 16);
        Decompress::new(false)
            .decompress_vec(&deflated, &mut inflated, FlushDecompress::Sync)
            .unwrap();
        assert_eq!(inflated, long.as_bytes());
        // Everything after the first frame is as it was.
        let first_plain = 4 + long.len();
        assert_eq!(&out[2 + len..], &frames[first_plain..]);
    }

    #[test]
    fn pong_takes_the_pings_place() {
        let mut buf = *b"......abc";
        let r = pong_in_place(&mut buf, 6..9);
        assert_eq!(&buf[r], &[0x8A, 3, b'a', b'b', b'c']);
    }
}
