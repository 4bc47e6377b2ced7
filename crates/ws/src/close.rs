//! Close codes and the close frame payload (RFC 6455 §5.5.1, §7.4).

use super::frame::ProtocolError;

pub const NORMAL: u16 = 1000;
pub const GOING_AWAY: u16 = 1001;
pub const PROTOCOL_ERROR: u16 = 1002;
pub const UNSUPPORTED_DATA: u16 = 1003;
pub const INVALID_PAYLOAD: u16 = 1007;
pub const POLICY_VIOLATION: u16 = 1008;
pub const MESSAGE_TOO_BIG: u16 = 1009;
pub const INTERNAL_ERROR: u16 = 1011;
/// The server is restarting (IANA registry): sent to every connection a
/// shutting-down gateway closes, so clients reconnect (with back-off).
pub const SERVICE_RESTART: u16 = 1012;
pub const TRY_AGAIN_LATER: u16 = 1013;
/// A gateway's upstream failed (RFC 6455 §7.4.1, IANA registry): the proxy
/// route's upstream went away mid-session.
pub const BAD_GATEWAY: u16 = 1014;
/// Reported, never sent: the peer's close frame carried no code.
pub const NO_STATUS: u16 = 1005;
/// Reported, never sent: the connection ended without a close frame.
pub const ABNORMAL: u16 = 1006;

/// Longest close reason: a control payload is at most 125 bytes, 2 of which
/// are the code (RFC 6455 §5.5). The rule is written once, in weir-abi, which
/// guests' close commands follow too.
pub use weir_abi::MAX_CLOSE_REASON_BYTES as MAX_REASON_BYTES;

/// Whether `code` may appear in a close frame (RFC 6455 §7.4.1-2): the defined
/// codes except 1004-1006 and 1015 (reserved, never sent), the IANA-registered
/// 1012-1014, and 3000-4999 for libraries and applications.
pub(crate) use weir_abi::sendable_close_code as is_valid_close_code;

/// `code` if it may be sent, else 1011: a close the server sends (for itself
/// or for a guest) always carries a valid code.
#[inline]
pub fn sendable(code: u16) -> u16 {
    if is_valid_close_code(code) {
        code
    } else {
        INTERNAL_ERROR
    }
}

/// `reason` cut to [`MAX_REASON_BYTES`] on a character boundary.
pub(crate) use weir_abi::short_reason as fit_reason;

impl ProtocolError {
    /// The close code the server answers with (RFC 6455 §7.4.1).
    #[inline]
    pub fn close_code(self) -> u16 {
        match self {
            ProtocolError::InvalidUtf8 | ProtocolError::InvalidCompressedData => INVALID_PAYLOAD,
            ProtocolError::MessageTooBig => MESSAGE_TOO_BIG,
            _ => PROTOCOL_ERROR,
        }
    }
}

/// Parses a client's close payload: empty, or a valid code followed by a
/// UTF-8 reason. Returns the code (1005 "no status" when absent).
#[inline]
pub fn parse_close_payload(payload: &[u8]) -> Result<(u16, &str), ProtocolError> {
    match payload {
        [] => Ok((NO_STATUS, "")),
        [_] => Err(ProtocolError::CloseFrameTooShort),
        [hi, lo, reason @ ..] => {
            let code = u16::from_be_bytes([*hi, *lo]);
            if !is_valid_close_code(code) {
                return Err(ProtocolError::InvalidCloseCode(code));
            }
            let reason =
                simdutf8::basic::from_utf8(reason).map_err(|_| ProtocolError::InvalidUtf8)?;
            Ok((code, reason))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 6455 §7.4.1: 1004, 1005, 1006 and 1015 are never sent; 0-999 and
    /// 1016-2999 are not defined; 3000-4999 are for applications.
    #[test]
    fn close_code_ranges() {
        for ok in [
            1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 3000, 3999, 4000, 4999,
        ] {
            assert!(is_valid_close_code(ok), "{ok}");
        }
        for bad in [
            0, 999, 1004, 1005, 1006, 1015, 1016, 1100, 2000, 2999, 5000, 65535,
        ] {
            assert!(!is_valid_close_code(bad), "{bad}");
        }
    }

    /// RFC 6455 §5.5.1: a close body is empty or starts with a 2-byte code;
    /// the reason is UTF-8.
    #[test]
    fn close_payload() {
        assert_eq!(parse_close_payload(&[]), Ok((1005, "")));
        assert_eq!(
            parse_close_payload(&[3]),
            Err(ProtocolError::CloseFrameTooShort)
        );
        assert_eq!(
            parse_close_payload(&[0x03, 0xE8, b'o', b'k']),
            Ok((1000, "ok"))
        );
        assert_eq!(
            parse_close_payload(&[0x03, 0xED]),
            Err(ProtocolError::InvalidCloseCode(1005))
        );
        assert_eq!(
            parse_close_payload(&[0x03, 0xE8, 0xFF]),
            Err(ProtocolError::InvalidUtf8)
        );
    }

    #[test]
    fn reasons_are_cut_on_a_character_boundary() {
        let long = "é".repeat(100);
        let cut = fit_reason(&long);
        assert!(cut.len() <= MAX_REASON_BYTES && cut.len() >= MAX_REASON_BYTES - 1);
        assert_eq!(fit_reason("short"), "short");
        assert_eq!(sendable(1005), INTERNAL_ERROR);
        assert_eq!(sendable(4001), 4001);
    }
}
