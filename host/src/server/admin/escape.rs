//! Percent-escapes in admin request targets (RFC 3986 section 2.1): every
//! `%` starts `%XX` with two hex digits, or the request gets 400; route
//! paths in `/routes/{path}/…` and the console's `path=` are decoded here.

/// `%2Fjson` → `/json`; None for a `%` not followed by two hex digits
/// (RFC 3986 section 2.1: `%+e`, `%4`) or bytes that are not UTF-8.
pub fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let high = hex_digit(*bytes.get(i + 1)?)?;
            let low = hex_digit(*bytes.get(i + 2)?)?;
            out.push((high << 4) | low);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The value of one hex digit; None for anything else (a sign included,
/// which `u8::from_str_radix` would take).
fn hex_digit(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

/// Whether every `%` in `text` starts a `%XX` escape with two hex digits.
pub fn percent_encoding_valid(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.iter().enumerate().all(|(i, b)| {
        *b != b'%'
            || bytes
                .get(i + 1..i + 3)
                .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_need_two_hex_digits() {
        assert_eq!(percent_decode("%2Fjson").as_deref(), Some("/json"));
        assert_eq!(
            percent_decode("%2Fchat%2F%7Broom%7D").as_deref(),
            Some("/chat/{room}")
        );
        assert_eq!(percent_decode("%2"), None);
        assert_eq!(percent_decode("%ff"), None);
        // Issue 35: `%+e` decoded to 0x0e through from_str_radix's sign.
        assert_eq!(percent_decode("%+e"), None);
        assert_eq!(percent_decode("%-1x"), None);
        assert_eq!(percent_decode("% f"), None);
        assert!(percent_encoding_valid("/routes/%2Fecho/component"));
        assert!(percent_encoding_valid("/a%2f%C3%A9"));
        assert!(!percent_encoding_valid("/%+e"));
        assert!(!percent_encoding_valid("/%4"));
        assert!(!percent_encoding_valid("/a%"));
        assert!(!percent_encoding_valid("/%g0"));
    }
}
