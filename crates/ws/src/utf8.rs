//! Incremental UTF-8 validation of text messages that arrive in pieces
//! (fragments, or one frame over several reads). Fails as soon as the bytes
//! seen so far cannot start a valid string (Autobahn 6.x "fail fast").

use super::frame::ProtocolError;

/// Validation state between pieces: the bytes of a code point cut by a piece
/// boundary (at most 3).
#[derive(Debug, Default, Clone)]
pub struct Utf8Validator {
    pending: [u8; 4],
    pending_len: u8,
}

/// Bytes in the UTF-8 sequence that `lead` starts (0 for a non-lead byte).
#[inline]
fn sequence_len(lead: u8) -> usize {
    match lead {
        0x00..=0x7F => 1,
        0xC2..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF4 => 4,
        _ => 0,
    }
}

impl Utf8Validator {
    /// Validates the next piece of a message.
    #[inline]
    pub fn feed(&mut self, mut bytes: &[u8]) -> Result<(), ProtocolError> {
        if self.pending_len > 0 {
            let have = usize::from(self.pending_len);
            let need = sequence_len(self.pending[0]);
            let take = (need - have).min(bytes.len());
            self.pending[have..have + take].copy_from_slice(&bytes[..take]);
            let filled = have + take;
            match std::str::from_utf8(&self.pending[..filled]) {
                Ok(_) => self.pending_len = 0,
                Err(e) if e.error_len().is_none() => {
                    // Still a valid prefix; the piece ended inside the code point.
                    self.pending_len = filled as u8;
                    return Ok(());
                }
                Err(_) => return Err(ProtocolError::InvalidUtf8),
            }
            bytes = &bytes[take..];
        }
        match simdutf8::compat::from_utf8(bytes) {
            Ok(_) => Ok(()),
            Err(e) if e.error_len().is_none() => {
                let rest = &bytes[e.valid_up_to()..];
                self.pending[..rest.len()].copy_from_slice(rest);
                self.pending_len = rest.len() as u8;
                Ok(())
            }
            Err(_) => Err(ProtocolError::InvalidUtf8),
        }
    }

    /// Ends the message: a code point cut off at the end is an error.
    #[inline]
    pub fn finish(&mut self) -> Result<(), ProtocolError> {
        let complete = self.pending_len == 0;
        self.pending_len = 0;
        if complete {
            Ok(())
        } else {
            Err(ProtocolError::InvalidUtf8)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn validate_in_pieces(bytes: &[u8], cuts: &[usize]) -> bool {
        let mut v = Utf8Validator::default();
        let mut at = 0;
        for &c in cuts {
            let c = c.min(bytes.len()).max(at);
            if v.feed(&bytes[at..c]).is_err() {
                return false;
            }
            at = c;
        }
        v.feed(&bytes[at..]).is_ok() && v.finish().is_ok()
    }

    /// RFC 6455 §8.1: a text message must be valid UTF-8 as a whole, wherever
    /// the fragment boundaries fall.
    #[test]
    fn code_points_split_anywhere() {
        let s = "κόσμε€𝄞 ascii";
        let b = s.as_bytes();
        for i in 0..=b.len() {
            for j in i..=b.len() {
                assert!(validate_in_pieces(b, &[i, j]), "cuts {i} {j}");
            }
        }
    }

    #[test]
    fn fails_fast_on_an_impossible_prefix() {
        let mut v = Utf8Validator::default();
        // 0xF4 0x90 can never start a valid code point (> U+10FFFF).
        assert!(v.feed(&[b'a', 0xF4]).is_ok());
        assert_eq!(v.feed(&[0x90]), Err(ProtocolError::InvalidUtf8));
        let mut v = Utf8Validator::default();
        assert_eq!(
            v.feed(&[0xCE, 0xBA, 0xED, 0xA0]),
            Err(ProtocolError::InvalidUtf8)
        );
    }

    #[test]
    fn truncated_code_point_at_end_fails() {
        let mut v = Utf8Validator::default();
        assert!(v.feed(&[0xE2, 0x82]).is_ok());
        assert_eq!(v.finish(), Err(ProtocolError::InvalidUtf8));
    }

    proptest! {
        #[test]
        fn agrees_with_std(bytes in prop::collection::vec(any::<u8>(), 0..40), a in 0usize..40, b in 0usize..40) {
            let (a, b) = (a.min(b), a.max(b));
            prop_assert_eq!(validate_in_pieces(&bytes, &[a, b]), std::str::from_utf8(&bytes).is_ok());
        }
    }
}
