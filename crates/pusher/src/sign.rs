//! The one HMAC-SHA256 in the crate: every Pusher signature (channel auth,
//! user signin, HTTP API requests, webhooks) is the lowercase hex of
//! HMAC-SHA256 keyed with the app secret, and every check compares in
//! constant time so a forger learns nothing from how fast a guess fails.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// Hex digits of an HMAC-SHA256 (32 bytes).
pub const SIGNATURE_HEX_LEN: usize = 64;

const HEX_DIGITS: &[u8; 16] = b"0123456789abcdef";

/// Lowercase hex of HMAC-SHA256(`secret`, the concatenation of `parts`): the
/// signature every Pusher library sends (pusher-http-node `Token.sign`).
/// Taking parts saves joining `socket_id:channel:data` into a temporary.
pub fn hmac_sha256_hex(secret: &[u8], parts: &[&[u8]]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes keys of any length");
    for part in parts {
        mac.update(part);
    }
    hex(&mac.finalize().into_bytes())
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(HEX_DIGITS[usize::from(b >> 4)] as char);
        out.push(HEX_DIGITS[usize::from(b & 0x0f)] as char);
    }
    out
}

/// Whether `given` is the signature of `parts`: computes the expected hex and
/// compares in constant time (`subtle`). The libraries send lowercase hex;
/// an uppercase signature is a different string and fails, as it does in
/// pusher-http-node's own `secureCompare`.
pub fn verify_hmac_sha256_hex(secret: &[u8], parts: &[&[u8]], given: &str) -> bool {
    let expected = hmac_sha256_hex(secret, parts);
    // Lengths are public (always 64 for a well-formed signature), so the
    // early length check leaks nothing about the secret.
    expected.len() == given.len() && bool::from(expected.as_bytes().ct_eq(given.as_bytes()))
}

/// Lowercase hex MD5 of `body`: the `body_md5` query parameter of a signed
/// HTTP API request (pusher-http-node `util.getMD5`).
pub fn md5_hex(body: &[u8]) -> String {
    use md5::{Digest, Md5};
    hex(&Md5::digest(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    // RFC 4231 test case 2: key "Jefe".
    #[test]
    fn hmac_matches_rfc_4231_case_2() {
        assert_eq!(
            hmac_sha256_hex(b"Jefe", &[b"what do ya want ", b"for nothing?"]),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn verify_rejects_a_changed_digit_and_uppercase() {
        let sig = hmac_sha256_hex(b"s", &[b"x"]);
        assert!(verify_hmac_sha256_hex(b"s", &[b"x"], &sig));
        let mut bad = sig.clone().into_bytes();
        bad[10] = if bad[10] == b'0' { b'1' } else { b'0' };
        assert!(!verify_hmac_sha256_hex(
            b"s",
            &[b"x"],
            std::str::from_utf8(&bad).unwrap()
        ));
        assert!(!verify_hmac_sha256_hex(b"s", &[b"x"], &sig.to_uppercase()));
        assert!(!verify_hmac_sha256_hex(b"s", &[b"x"], ""));
    }

    // RFC 1321 appendix A.5.
    #[test]
    fn md5_matches_rfc_1321() {
        assert_eq!(md5_hex(b""), "d41d8cd98f00b204e9800998ecf8427e");
        assert_eq!(md5_hex(b"abc"), "900150983cd24fb0d6963f7d28e17f72");
    }
}
