//! Frame headers (RFC 6455 §5.2): parse a client header, and the flat list of
//! protocol violations with their close codes. Encoding is in [`super::encode`].

/// Largest header a client can send: 2 bytes, 8 of extended length, 4 of mask.
pub const MAX_HEADER_BYTES: usize = 14;
/// Control frames carry at most 125 bytes of payload (RFC 6455 §5.5).
pub(crate) const MAX_CONTROL_PAYLOAD_BYTES: u64 = 125;

/// Frame opcodes (RFC 6455 §5.2); the others are reserved and fail the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum OpCode {
    Continuation = 0x0,
    Text = 0x1,
    Binary = 0x2,
    Close = 0x8,
    Ping = 0x9,
    Pong = 0xA,
}

impl OpCode {
    fn from_bits(bits: u8) -> Result<OpCode, ProtocolError> {
        Ok(match bits {
            0x0 => OpCode::Continuation,
            0x1 => OpCode::Text,
            0x2 => OpCode::Binary,
            0x8 => OpCode::Close,
            0x9 => OpCode::Ping,
            0xA => OpCode::Pong,
            other => return Err(ProtocolError::ReservedOpcode(other)),
        })
    }

    /// Control frames have the high opcode bit set (RFC 6455 §5.5).
    #[inline]
    pub fn is_control(self) -> bool {
        (self as u8) & 0x8 != 0
    }
}

/// A parsed frame header. The payload follows at `header_len`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    pub fin: bool,
    pub opcode: OpCode,
    /// The masking key; every client frame has one (RFC 6455 §5.3).
    pub mask: [u8; 4],
    pub payload_len: u64,
    pub header_len: usize,
    /// RSV1: the message is compressed (permessage-deflate, RFC 7692
    /// §6); only ever set when the connection negotiated it.
    pub rsv1: bool,
}

/// Every way a peer can break the protocol. The close code follows from the
/// variant (RFC 6455 §7.4.1), and no variant allocates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    #[error("reserved bits set without a negotiated extension")]
    ReservedBitsSet,
    #[error("reserved opcode {0:#x}")]
    ReservedOpcode(u8),
    #[error("client frame is not masked")]
    UnmaskedClientFrame,
    #[error("server frame is masked")]
    MaskedServerFrame,
    #[error("64-bit payload length has its most significant bit set")]
    PayloadLengthTopBitSet,
    #[error("control frame payload longer than 125 bytes")]
    ControlFrameTooLong,
    #[error("control frame is fragmented")]
    FragmentedControlFrame,
    #[error("continuation frame without a message to continue")]
    UnexpectedContinuation,
    #[error("new data frame while a fragmented message is open")]
    ExpectedContinuation,
    #[error("close frame with a 1-byte payload")]
    CloseFrameTooShort,
    #[error("close code {0} may not be sent on the wire")]
    InvalidCloseCode(u16),
    #[error("invalid UTF-8 in a text message or close reason")]
    InvalidUtf8,
    #[error("message larger than the route's max_message")]
    MessageTooBig,
    #[error("RSV1 on a control or continuation frame")]
    CompressedControlOrContinuation,
    #[error("invalid deflate data in a compressed message")]
    InvalidCompressedData,
}

/// Parses a client frame header from the start of `buf`. `Ok(None)` means more
/// bytes are needed. Checks everything the header alone can tell (RFC 6455
/// §5.2): reserved bits, opcode, mask bit, length form, control frame rules.
#[inline]
pub fn parse_client_header(buf: &[u8]) -> Result<Option<FrameHeader>, ProtocolError> {
    parse_header(buf, RESERVED_BITS)
}

/// RSV1-3: set only by a negotiated extension (RFC 6455 §5.2).
pub const RESERVED_BITS: u8 = 0x70;
/// RSV2-3: what stays reserved once permessage-deflate owns RSV1.
pub const RESERVED_BITS_WITH_DEFLATE: u8 = 0x30;

/// [`parse_client_header`] with the reserved bits that fail the frame
/// given: [`RESERVED_BITS_WITH_DEFLATE`] lets RSV1 through (the decoder
/// checks where it may appear).
#[inline]
pub fn parse_header(buf: &[u8], reserved: u8) -> Result<Option<FrameHeader>, ProtocolError> {
    let [b0, b1, ..] = *buf else {
        return Ok(None);
    };
    if b0 & reserved != 0 {
        return Err(ProtocolError::ReservedBitsSet);
    }
    let fin = b0 & 0x80 != 0;
    let opcode = OpCode::from_bits(b0 & 0x0F)?;
    if b1 & 0x80 == 0 {
        return Err(ProtocolError::UnmaskedClientFrame);
    }
    let (payload_len, len_bytes) = match b1 & 0x7F {
        126 => {
            let Some(ext) = buf.get(2..4) else {
                return Ok(None);
            };
            (u64::from(u16::from_be_bytes([ext[0], ext[1]])), 2)
        }
        127 => {
            let Some(ext) = buf.get(2..10) else {
                return Ok(None);
            };
            let len = u64::from_be_bytes(ext.try_into().expect("8 bytes"));
            if len >> 63 != 0 {
                return Err(ProtocolError::PayloadLengthTopBitSet);
            }
            (len, 8)
        }
        short => (u64::from(short), 0),
    };
    if opcode.is_control() {
        if !fin {
            return Err(ProtocolError::FragmentedControlFrame);
        }
        if payload_len > MAX_CONTROL_PAYLOAD_BYTES {
            return Err(ProtocolError::ControlFrameTooLong);
        }
    }
    let mask_at = 2 + len_bytes;
    let Some(mask) = buf.get(mask_at..mask_at + 4) else {
        return Ok(None);
    };
    Ok(Some(FrameHeader {
        fin,
        opcode,
        mask: mask.try_into().expect("4 bytes"),
        payload_len,
        header_len: mask_at + 4,
        rsv1: b0 & 0x40 != 0,
    }))
}

/// A server frame header (an upstream's, to a proxy): its fields and
/// length. RFC 6455 §5.1: a server never masks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerHeader {
    pub fin: bool,
    pub opcode: OpCode,
    pub payload_len: u64,
    pub header_len: usize,
}

/// Parses a server frame header from the start of `buf` (`Ok(None)`: more
/// bytes are needed), with the checks the header alone allows: reserved
/// bits, opcode, no mask, length form, control frame rules.
#[inline]
pub fn parse_server_header(buf: &[u8]) -> Result<Option<ServerHeader>, ProtocolError> {
    let [b0, b1, ..] = *buf else {
        return Ok(None);
    };
    if b0 & 0x70 != 0 {
        return Err(ProtocolError::ReservedBitsSet);
    }
    if b1 & 0x80 != 0 {
        return Err(ProtocolError::MaskedServerFrame);
    }
    let fin = b0 & 0x80 != 0;
    let opcode = OpCode::from_bits(b0 & 0x0F)?;
    let (payload_len, header_len) = match b1 & 0x7F {
        126 => match buf.get(2..4) {
            Some(ext) => (u64::from(u16::from_be_bytes([ext[0], ext[1]])), 4),
            None => return Ok(None),
        },
        127 => match buf.get(2..10) {
            Some(ext) => (u64::from_be_bytes(ext.try_into().expect("8 bytes")), 10),
            None => return Ok(None),
        },
        short => (u64::from(short), 2),
    };
    if payload_len >> 63 != 0 {
        return Err(ProtocolError::PayloadLengthTopBitSet);
    }
    if opcode.is_control() {
        if !fin {
            return Err(ProtocolError::FragmentedControlFrame);
        }
        if payload_len > MAX_CONTROL_PAYLOAD_BYTES {
            return Err(ProtocolError::ControlFrameTooLong);
        }
    }
    Ok(Some(ServerHeader {
        fin,
        opcode,
        payload_len,
        header_len,
    }))
}

/// `bytes` are whole unmasked data frames (a server's), nothing cut off
/// and nothing after, RSV bits clear: what a node accepts from another as
/// a publish before writing it to its clients unchanged.
#[inline]
pub fn whole_server_frames(bytes: &[u8]) -> bool {
    let mut at = 0;
    while at < bytes.len() {
        let (Some(&b0), Some(&b1)) = (bytes.get(at), bytes.get(at + 1)) else {
            return false;
        };
        if b0 & 0x70 != 0 || b1 & 0x80 != 0 || b0 & 0x0F > 2 {
            return false;
        }
        let (len, header) = match b1 & 0x7F {
            126 => match bytes.get(at + 2..at + 4) {
                Some(ext) => (u64::from(u16::from_be_bytes([ext[0], ext[1]])), 4),
                None => return false,
            },
            127 => match bytes.get(at + 2..at + 10) {
                Some(ext) => (u64::from_be_bytes(ext.try_into().expect("8 bytes")), 10),
                None => return false,
            },
            short => (u64::from(short), 2),
        };
        let end = len
            .checked_add(header + at as u64)
            .and_then(|end| usize::try_from(end).ok());
        let Some(end) = end else {
            return false;
        };
        at = end;
    }
    at == bytes.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode::{encode_client_header, header_len as server_header_len};
    use proptest::prelude::*;

    fn client(fin: bool, op: OpCode, len: u64) -> Vec<u8> {
        let mut b = [0u8; MAX_HEADER_BYTES];
        let n = encode_client_header(&mut b, fin, op, [1, 2, 3, 4], len);
        b[..n].to_vec()
    }

    /// RFC 6455 §5.2: the three payload length forms, at each boundary.
    #[test]
    fn length_forms_at_boundaries() {
        for (len, header) in [
            (0, 6),
            (125, 6),
            (126, 8),
            (65535, 8),
            (65536, 14),
            (1 << 40, 14),
        ] {
            let h = parse_client_header(&client(true, OpCode::Binary, len))
                .unwrap()
                .unwrap();
            assert_eq!((h.payload_len, h.header_len), (len, header), "len {len}");
            assert_eq!(h.mask, [1, 2, 3, 4]);
        }
    }

    /// RFC 6455 §5.2: "the most significant bit MUST be 0" in the 64-bit form.
    #[test]
    fn rejects_top_bit_of_64_bit_length() {
        let mut b = client(true, OpCode::Binary, 1 << 40);
        b[2] = 0x80;
        assert_eq!(
            parse_client_header(&b),
            Err(ProtocolError::PayloadLengthTopBitSet)
        );
    }

    /// RFC 6455 §5.1: a server MUST close on an unmasked client frame.
    #[test]
    fn rejects_unmasked_frames() {
        assert_eq!(
            parse_client_header(&[0x81, 0x05]),
            Err(ProtocolError::UnmaskedClientFrame)
        );
    }

    /// RFC 6455 §5.2: RSV1-3 must be 0 without an extension; opcodes 3-7, B-F reserved.
    #[test]
    fn rejects_reserved_bits_and_opcodes() {
        for rsv in [0x40, 0x20, 0x10] {
            assert_eq!(
                parse_client_header(&[0x81 | rsv, 0x80]),
                Err(ProtocolError::ReservedBitsSet)
            );
        }
        for op in [3u8, 4, 5, 6, 7, 0xB, 0xC, 0xD, 0xE, 0xF] {
            assert_eq!(
                parse_client_header(&[0x80 | op, 0x80]),
                Err(ProtocolError::ReservedOpcode(op))
            );
        }
    }

    /// RFC 6455 §5.5: control frames are at most 125 bytes and never fragmented.
    #[test]
    fn control_frame_rules() {
        assert_eq!(
            parse_client_header(&client(true, OpCode::Ping, 126)),
            Err(ProtocolError::ControlFrameTooLong)
        );
        assert_eq!(
            parse_client_header(&client(false, OpCode::Close, 0)),
            Err(ProtocolError::FragmentedControlFrame)
        );
        assert!(parse_client_header(&client(true, OpCode::Pong, 125)).is_ok());
    }

    #[test]
    fn incomplete_headers_ask_for_more() {
        let full = client(true, OpCode::Text, 70000);
        for cut in 0..full.len() {
            assert_eq!(parse_client_header(&full[..cut]), Ok(None), "cut {cut}");
        }
    }

    proptest! {
        /// Encode → parse round trip for every length class and opcode.
        #[test]
        fn header_round_trip(
            len in prop_oneof![0u64..=125, 126u64..=65535, 65536u64..(1 << 63)],
            fin in any::<bool>(),
            op in prop::sample::select(vec![OpCode::Continuation, OpCode::Text, OpCode::Binary]),
            mask in any::<[u8; 4]>(),
        ) {
            let mut b = [0u8; MAX_HEADER_BYTES];
            let n = encode_client_header(&mut b, fin, op, mask, len);
            let h = parse_client_header(&b[..n]).unwrap().unwrap();
            prop_assert_eq!(h, FrameHeader { fin, opcode: op, mask, payload_len: len, header_len: n, rsv1: false });
            prop_assert_eq!(n, server_header_len(len) + 4);
        }
    }

    #[test]
    fn whole_server_frames_are_told_from_the_rest() {
        let mut frames = Vec::new();
        crate::encode::append_frame(&mut frames, OpCode::Text, b"hello");
        crate::encode::append_frame(&mut frames, OpCode::Binary, &[7; 300]);
        assert!(whole_server_frames(&frames));
        assert!(!whole_server_frames(&frames[..frames.len() - 1]));
        assert!(!whole_server_frames(&[0x81, 0x85, 0, 0, 0, 0, 1]), "masked");
        assert!(!whole_server_frames(&[0x89, 0]), "a ping is not a publish");
        assert!(!whole_server_frames(&[0xC1, 0]), "RSV1 set");
    }
}
