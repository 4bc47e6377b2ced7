//! URL paths and addresses checked as their receiver will read them: a
//! guest's outbound URL path normalised (RFC 3986 §5.2.4 and §6.2.2) and
//! matched against `allow_outbound` prefixes on segment boundaries, a
//! proxy's path parameter turned into one safe segment, and which
//! addresses are not on the public internet. Pure functions, no I/O; see
//! docs/architecture.md (Guest I/O, Proxy).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why a path, or a path parameter, cannot be read one way only: each is
/// a refusal, since the backend may read it another way than the check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("the path does not start with /")]
    NotAbsolute,
    #[error("the path holds an encoded slash (%2F)")]
    EncodedSlash,
    #[error("the path holds a backslash (\\ or %5C)")]
    Backslash,
    #[error("a .. segment climbs above the root")]
    AboveRoot,
    #[error("a % is not followed by two hex digits")]
    MalformedEscape,
    #[error("the path holds a control character (raw or percent-encoded)")]
    ControlCharacter,
    #[error("a dot segment carries parameters (e.g. ..;x)")]
    DotSegmentWithParameters,
    #[error("a path parameter is . or .. (in some encoding)")]
    DotSegment,
    #[error("a path parameter holds a slash")]
    Slash,
}

/// RFC 3986 §2.3: characters whose percent-encoding means the same as the
/// character itself (decoded by §6.2.2.2 normalisation).
fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

fn is_control(b: u8) -> bool {
    b < 0x20 || b == 0x7f
}

/// One segment in normal form (RFC 3986 §6.2.2: escapes of unreserved
/// characters decoded, other escapes in upper case), or why it has none:
/// a backslash, control character or encoded slash, raw or encoded, or a
/// `%` without two hex digits.
fn normal_segment(segment: &str) -> Result<String, PathError> {
    let bytes = segment.as_bytes();
    let mut out = String::with_capacity(segment.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b != b'%' {
            check_byte(b)?;
            // A `char` boundary: non-ASCII bytes are copied whole below.
            let len = utf8_len(b);
            out.push_str(&segment[i..i + len]);
            i += len;
            continue;
        }
        let (Some(hi), Some(lo)) = (
            bytes.get(i + 1).copied().and_then(hex_value),
            bytes.get(i + 2).copied().and_then(hex_value),
        ) else {
            return Err(PathError::MalformedEscape);
        };
        let decoded = (hi << 4) | lo;
        match decoded {
            b'/' => return Err(PathError::EncodedSlash),
            _ => check_byte(decoded)?,
        }
        if is_unreserved(decoded) {
            out.push(decoded as char);
        } else {
            out.push('%');
            out.push_str(&segment[i + 1..i + 3].to_ascii_uppercase());
        }
        i += 3;
    }
    Ok(out)
}

/// Bytes of the UTF-8 sequence that starts with `b` (1 for ASCII).
fn utf8_len(b: u8) -> usize {
    match b {
        0xf0..=0xff => 4,
        0xe0..=0xef => 3,
        0xc0..=0xdf => 2,
        _ => 1,
    }
}

fn check_byte(b: u8) -> Result<(), PathError> {
    if b == b'\\' {
        Err(PathError::Backslash)
    } else if is_control(b) {
        Err(PathError::ControlCharacter)
    } else {
        Ok(())
    }
}

/// `path` as a backend that decodes and resolves it will read it: RFC 3986
/// §5.2.4 (remove_dot_segments) over segments in §6.2.2 normal form, so
/// `%2e%2e` is `..` too; repeated slashes collapse into one (nginx's
/// `merge_slashes`, so `/a//../b` cannot resolve differently there).
/// Refused rather than guessed: an encoded slash, a backslash, a control
/// character, a malformed escape, a `..` above the root and a dot segment
/// with parameters (`..;x`, which Tomcat reads as `..`).
pub fn normalize_path(path: &str) -> Result<String, PathError> {
    let rest = path.strip_prefix('/').ok_or(PathError::NotAbsolute)?;
    let mut kept: Vec<String> = Vec::new();
    let mut trailing_slash = false;
    let mut segments = rest.split('/').peekable();
    while let Some(raw) = segments.next() {
        let last = segments.peek().is_none();
        let segment = normal_segment(raw)?;
        let head = segment.split(';').next().unwrap_or_default();
        if matches!(head, "." | "..") && head.len() != segment.len() {
            return Err(PathError::DotSegmentWithParameters);
        }
        match segment.as_str() {
            "" => {}
            "." => {}
            ".." => {
                kept.pop().ok_or(PathError::AboveRoot)?;
            }
            _ => {
                kept.push(segment);
                continue;
            }
        }
        // An empty or dot last segment leaves the path ending in `/`
        // (§5.2.4: `/a/b/..` is `/a/`).
        trailing_slash = last;
    }
    let mut out = String::with_capacity(path.len());
    for segment in &kept {
        out.push('/');
        out.push_str(segment);
    }
    if trailing_slash || kept.is_empty() {
        out.push('/');
    }
    Ok(out)
}

/// Whether normalised `path` lies under normalised `prefix` on a segment
/// boundary: `/v1` admits `/v1` and `/v1/x`, not `/v1-admin`; `/api/`
/// admits `/api/` and `/api/x`.
pub fn path_within(prefix: &str, path: &str) -> bool {
    match path.strip_prefix(prefix) {
        Some(rest) => prefix.ends_with('/') || rest.is_empty() || rest.starts_with('/'),
        None => false,
    }
}

/// A route parameter's raw value (as matched in the request path) as what
/// is substituted into an upstream path: percent-decoded, then encoded
/// again so it stays one segment (only unreserved characters left as
/// they are). A `{*rest}` wildcard (`wildcard`) keeps its slashes, each
/// segment checked alike. Refused: `.` and `..` in any encoding, a slash
/// (raw in a one-segment parameter, or encoded), a backslash, a control
/// character, a malformed escape.
pub fn encode_param(raw: &str, wildcard: bool) -> Result<String, PathError> {
    if !wildcard && raw.contains('/') {
        return Err(PathError::Slash);
    }
    let mut out = String::with_capacity(raw.len() + 8);
    for (i, segment) in raw.split('/').enumerate() {
        if i > 0 {
            out.push('/');
        }
        let decoded = decode_segment(segment)?;
        if matches!(decoded.as_slice(), b"." | b"..") {
            return Err(PathError::DotSegment);
        }
        for &b in &decoded {
            if is_unreserved(b) {
                out.push(b as char);
            } else {
                out.push('%');
                out.push(char::from(b"0123456789ABCDEF"[usize::from(b >> 4)]));
                out.push(char::from(b"0123456789ABCDEF"[usize::from(b & 15)]));
            }
        }
    }
    Ok(out)
}

/// A segment's bytes, percent-decoded, or why it is refused.
fn decode_segment(segment: &str) -> Result<Vec<u8>, PathError> {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let mut b = bytes[i];
        if b == b'%' {
            let (Some(hi), Some(lo)) = (
                bytes.get(i + 1).copied().and_then(hex_value),
                bytes.get(i + 2).copied().and_then(hex_value),
            ) else {
                return Err(PathError::MalformedEscape);
            };
            b = (hi << 4) | lo;
            if b == b'/' {
                return Err(PathError::EncodedSlash);
            }
            i += 2;
        }
        check_byte(b)?;
        out.push(b);
        i += 1;
    }
    Ok(out)
}

/// Whether `ip` is on the public internet: not loopback, private (RFC
/// 1918, ULA fc00::/7), link-local, unspecified, shared (RFC 6598),
/// documentation, benchmarking, multicast, broadcast or reserved; an
/// IPv4-mapped or NAT64 IPv6 address is judged by its IPv4 address.
/// (std's `is_global` is unstable.)
pub fn is_global(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_global_v4(v4),
        IpAddr::V6(v6) => is_global_v6(v6),
    }
}

fn is_global_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(a == 0
        || a == 10
        || a == 127
        || (a == 100 && (64..128).contains(&b))
        || (a == 169 && b == 254)
        || (a == 172 && (16..32).contains(&b))
        || (a == 192 && b == 0 && c == 0)
        || (a == 192 && b == 0 && c == 2)
        || (a == 192 && b == 168)
        || (a == 198 && (18..20).contains(&b))
        || (a == 198 && b == 51 && c == 100)
        || (a == 203 && b == 0 && c == 113)
        || a >= 224)
}

fn is_global_v6(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_global_v4(v4);
    }
    // NAT64 (64:ff9b::/96) reaches the IPv4 address it embeds.
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        let [a, b] = s[6].to_be_bytes();
        let [c, d] = s[7].to_be_bytes();
        return is_global_v4(Ipv4Addr::new(a, b, c, d));
    }
    !(ip.is_unspecified()
        || ip.is_loopback()
        // IPv4-compatible (deprecated) ::/96 and discard-only 100::/64.
        || s[..6] == [0; 6]
        || s[..4] == [0x100, 0, 0, 0]
        || (s[0] & 0xfe00) == 0xfc00
        || (s[0] & 0xffc0) == 0xfe80
        || (s[0] & 0xffc0) == 0xfec0
        || (s[0] & 0xff00) == 0xff00
        || (s[0] == 0x2001 && s[1] == 0x0db8))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(path: &str) -> Result<String, PathError> {
        normalize_path(path)
    }

    /// RFC 3986 §5.2.4's own examples and §5.4's normal and abnormal
    /// references (the ones that stay below the root).
    #[test]
    fn remove_dot_segments_as_rfc_3986_5_2_4() {
        assert_eq!(norm("/a/b/c/./../../g").unwrap(), "/a/g");
        assert_eq!(norm("/b/c/./g").unwrap(), "/b/c/g");
        assert_eq!(norm("/b/c/.").unwrap(), "/b/c/");
        assert_eq!(norm("/b/c/./").unwrap(), "/b/c/");
        assert_eq!(norm("/b/c/..").unwrap(), "/b/");
        assert_eq!(norm("/b/c/../").unwrap(), "/b/");
        assert_eq!(norm("/b/c/../g").unwrap(), "/b/g");
        assert_eq!(norm("/b/c/../..").unwrap(), "/");
        assert_eq!(norm("/b/c/g.").unwrap(), "/b/c/g.");
        assert_eq!(norm("/b/c/.g").unwrap(), "/b/c/.g");
        assert_eq!(norm("/b/c/g..").unwrap(), "/b/c/g..");
        assert_eq!(norm("/b/c/..g").unwrap(), "/b/c/..g");
        assert_eq!(norm("/b/c/./../g").unwrap(), "/b/g");
        assert_eq!(norm("/b/c/./g/.").unwrap(), "/b/c/g/");
        assert_eq!(norm("/").unwrap(), "/");
        // Where the RFC keeps going at the root (`/../g` is `/g`), the
        // check refuses: a backend may not agree.
        assert_eq!(norm("/b/c/../../../g"), Err(PathError::AboveRoot));
        assert_eq!(norm("/.."), Err(PathError::AboveRoot));
    }

    /// §6.2.2: escapes of unreserved characters are the characters, so
    /// `%2e%2e` is a `..` segment; other escapes keep their meaning.
    #[test]
    fn encoded_dots_are_dots_as_rfc_3986_6_2_2() {
        assert_eq!(norm("/api/%2e%2e/secret").unwrap(), "/secret");
        assert_eq!(norm("/api/%2E%2E/secret").unwrap(), "/secret");
        assert_eq!(norm("/api/.%2e/secret").unwrap(), "/secret");
        assert_eq!(norm("/api/%2e/x").unwrap(), "/api/x");
        assert_eq!(norm("/%61pi/x%7e").unwrap(), "/api/x~");
        assert_eq!(norm("/a%20b/%3f%c3%a9").unwrap(), "/a%20b/%3F%C3%A9");
        // Slashes merge first, as nginx does: `..` then climbs out of `/api`.
        assert_eq!(norm("/api//../secret").unwrap(), "/secret");
        assert_eq!(norm("//a///b").unwrap(), "/a/b");
        assert_eq!(norm("/é/x").unwrap(), "/é/x");
    }

    #[test]
    fn what_cannot_be_read_one_way_is_refused() {
        for (path, why) in [
            ("/api/..%2fsecret", PathError::EncodedSlash),
            ("/api%2F..", PathError::EncodedSlash),
            ("/api\\..\\secret", PathError::Backslash),
            ("/api/%5c../x", PathError::Backslash),
            ("/api/%zz", PathError::MalformedEscape),
            ("/api/%2", PathError::MalformedEscape),
            ("/api/a\u{1}b", PathError::ControlCharacter),
            ("/api/%0a", PathError::ControlCharacter),
            ("/api/%7F", PathError::ControlCharacter),
            ("/api/..;x/secret", PathError::DotSegmentWithParameters),
            ("/api/%2e;/x", PathError::DotSegmentWithParameters),
            ("api", PathError::NotAbsolute),
            ("", PathError::NotAbsolute),
        ] {
            assert_eq!(norm(path), Err(why), "{path:?}");
        }
    }

    #[test]
    fn normalising_twice_changes_nothing() {
        for path in [
            "/a/./b/../c/",
            "/%2e/x%2Fy",
            "/a%20b/%3f",
            "//x//y/.",
            "/v1/..",
        ] {
            if let Ok(once) = norm(path) {
                assert_eq!(norm(&once).as_ref(), Ok(&once), "{path:?}");
            }
        }
    }

    #[test]
    fn prefixes_match_on_segment_boundaries() {
        assert!(path_within("/v1", "/v1"));
        assert!(path_within("/v1", "/v1/"));
        assert!(path_within("/v1", "/v1/users"));
        assert!(!path_within("/v1", "/v1-admin"));
        assert!(!path_within("/v1", "/v"));
        assert!(path_within("/api/", "/api/x"));
        assert!(path_within("/api/", "/api/"));
        assert!(!path_within("/api/", "/api"));
        assert!(!path_within("/api/", "/apix"));
        assert!(path_within("/", "/anything/at/all"));
    }

    #[test]
    fn a_parameter_stays_one_segment() {
        assert_eq!(encode_param("lobby", false).unwrap(), "lobby");
        assert_eq!(encode_param("a%20b", false).unwrap(), "a%20b");
        assert_eq!(encode_param("a;b=c?d#", false).unwrap(), "a%3Bb%3Dc%3Fd%23");
        assert_eq!(encode_param("%c3%a9", false).unwrap(), "%C3%A9");
        assert_eq!(encode_param("...", false).unwrap(), "...");
        assert_eq!(encode_param("a/b", true).unwrap(), "a/b");
        for (raw, wildcard, why) in [
            ("..", false, PathError::DotSegment),
            (".", false, PathError::DotSegment),
            ("%2e%2e", false, PathError::DotSegment),
            ("%2E.", false, PathError::DotSegment),
            ("..%2Fadmin", false, PathError::EncodedSlash),
            ("a%2fb", true, PathError::EncodedSlash),
            ("a/b", false, PathError::Slash),
            ("a/../b", true, PathError::DotSegment),
            ("a\\b", false, PathError::Backslash),
            ("a%5Cb", false, PathError::Backslash),
            ("a%0d%0aX", false, PathError::ControlCharacter),
            ("a%g0", false, PathError::MalformedEscape),
        ] {
            assert_eq!(encode_param(raw, wildcard), Err(why), "{raw:?}");
        }
    }

    /// The fuzz target's properties (fuzz/fuzz_targets/url_path.rs) over
    /// paths built from the pieces that matter: normalising twice changes
    /// nothing, no dot segment, encoded slash or backslash survives, and a
    /// path a prefix admits starts with it on a segment boundary.
    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn path() -> impl Strategy<Value = String> {
            let piece = prop_oneof![
                Just("/"),
                Just("."),
                Just(".."),
                Just("%2e"),
                Just("%2E"),
                Just("%2f"),
                Just("%5c"),
                Just("\\"),
                Just(";"),
                Just("%"),
                Just("%41"),
                Just("a"),
                Just("v1"),
                Just("-admin"),
            ];
            proptest::collection::vec(piece, 0..12).prop_map(|p| format!("/{}", p.concat()))
        }

        proptest! {
            #[test]
            fn normal_paths_hold_their_properties(raw in path(), prefix in path()) {
                if let Ok(normal) = normalize_path(&raw) {
                    prop_assert_eq!(normalize_path(&normal), Ok(normal.clone()));
                    let lower = normal.to_ascii_lowercase();
                    for bad in ["/../", "/./", "//", "%2f", "\\", "%5c"] {
                        prop_assert!(!lower.contains(bad), "{:?} holds {:?}", normal, bad);
                    }
                    prop_assert!(!normal.ends_with("/..") && !normal.ends_with("/."));
                    if let Ok(prefix) = normalize_path(&prefix) {
                        if path_within(&prefix, &normal) {
                            let rest = &normal[prefix.len()..];
                            prop_assert!(
                                prefix.ends_with('/') || rest.is_empty() || rest.starts_with('/')
                            );
                        }
                    }
                }
                if let Ok(segment) = encode_param(&raw[1..], false) {
                    prop_assert!(!segment.contains(['/', '\\']));
                    prop_assert!(segment != "." && segment != "..");
                }
            }
        }
    }

    #[test]
    fn private_and_special_addresses_are_not_global() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "::",
            "::1",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "2001:db8::1",
        ] {
            assert!(!is_global(ip.parse().unwrap()), "{ip}");
        }
        for ip in [
            "8.8.8.8",
            "1.1.1.1",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
        ] {
            assert!(is_global(ip.parse().unwrap()), "{ip}");
        }
    }
}
