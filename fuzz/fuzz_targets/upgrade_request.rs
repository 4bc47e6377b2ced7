//! The opening handshake (RFC 6455 §4.2.1-2) on arbitrary request heads.
//! The bytes are parsed as an HTTP/1.1 request head with httparse, which is
//! what hyper parses with, and turned into `http` types the way hyper does
//! (a head hyper would refuse with 400 stops here). Then the checks
//! `server::handle_request` makes run in its order: `wants_websocket`,
//! `check_request`, `negotiate_subprotocol`.
//!
//! Checked against an independent reading of the RFC written below: token
//! lists, version, the key (16 bytes in canonical base64), the first check
//! that fails, the accept key (SHA-1 from another crate, base64 by hand),
//! and that a negotiated subprotocol is the server's first choice among
//! those offered.
#![no_main]

use http::{HeaderMap, HeaderName, HeaderValue, Method, Version};
use libfuzzer_sys::fuzz_target;
use weir_ws::handshake::{
    accept_key, check_request, negotiate_subprotocol, wants_websocket, HandshakeError,
};

/// hyper's default limit on request headers.
const MAX_HEADERS: usize = 100;
const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

fuzz_target!(|data: &[u8]| {
    let Some((method, version, headers)) = parse_head(data) else {
        return;
    };
    let wants = wants_websocket(&headers);
    if let Some(expected) = ref_has_token(&headers, "upgrade", "websocket") {
        assert_eq!(wants, expected, "wants_websocket on {headers:?}");
    } else {
        // Values with bytes outside visible ASCII: only say yes when a
        // readable value really has the token.
        assert!(!wants || ref_has_token_lossy(&headers, "upgrade", "websocket"));
    }
    let checked = check_request(&method, version, &headers);
    if let Some(expected) = ref_check(&method, version, &headers) {
        assert_eq!(
            checked.clone().map(|_| ()),
            expected,
            "check_request on {method} {version:?} {headers:?}"
        );
    }
    if let Ok(accept) = &checked {
        // What was accepted really is a version 13 upgrade with a good key.
        assert_eq!(method.as_str(), "GET");
        assert_eq!(version, Version::HTTP_11);
        assert!(ref_has_token_lossy(&headers, "connection", "upgrade"));
        let v = headers.get("sec-websocket-version").expect("version");
        assert_eq!(v.as_bytes().trim_ascii(), b"13");
        let key = headers
            .get("sec-websocket-key")
            .expect("key")
            .as_bytes()
            .trim_ascii();
        assert!(ref_key_ok(key), "accepted key {key:?}");
        assert_eq!(*accept, ref_accept(key), "accept key for {key:?}");
        assert_eq!(*accept, accept_key(key));
    }
    // The route's list, in server preference order, as the config holds it.
    for supported in [
        vec![],
        vec!["chat".to_string()],
        vec![
            "v2.json".to_string(),
            "chat".to_string(),
            "mqtt".to_string(),
        ],
    ] {
        let chosen = negotiate_subprotocol(&headers, &supported);
        let offered = ref_offered(&headers);
        let expected = supported.iter().find(|s| offered.contains(s));
        assert_eq!(chosen, expected.map(String::as_str), "offered {offered:?}");
        if let Some(p) = chosen {
            // The server echoes it in a header: it must be a valid value.
            assert!(HeaderValue::from_str(p).is_ok());
        }
    }
});

/// An HTTP/1.x request head as hyper reads it, or None where hyper would
/// answer 400 (or wait for more bytes).
fn parse_head(data: &[u8]) -> Option<(Method, Version, HeaderMap)> {
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut slots);
    let httparse::Status::Complete(_) = req.parse(data).ok()? else {
        return None;
    };
    let method = Method::from_bytes(req.method?.as_bytes()).ok()?;
    let version = match req.version? {
        0 => Version::HTTP_10,
        1 => Version::HTTP_11,
        _ => return None,
    };
    let _uri: http::Uri = req.path?.parse().ok()?;
    let mut headers = HeaderMap::new();
    for h in req.headers.iter() {
        let name = HeaderName::from_bytes(h.name.as_bytes()).ok()?;
        let value = HeaderValue::from_bytes(h.value).ok()?;
        headers.append(name, value);
    }
    Some((method, version, headers))
}

fn visible(value: &[u8]) -> bool {
    value
        .iter()
        .all(|&b| b == b'\t' || (b' '..=b'~').contains(&b))
}

/// Whether any `name` header lists `token` (comma-separated, optional
/// whitespace, any case: RFC 7230 §3.2.6, §7). None when a value has bytes
/// outside visible ASCII, where "the token" is a matter of interpretation.
fn ref_has_token(headers: &HeaderMap, name: &str, token: &str) -> Option<bool> {
    let mut found = false;
    for v in headers.get_all(name) {
        let v = v.as_bytes();
        if !visible(v) {
            return None;
        }
        found |= list_has(v, token);
    }
    Some(found)
}

/// Like `ref_has_token` but only reads the values that are visible ASCII.
fn ref_has_token_lossy(headers: &HeaderMap, name: &str, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .any(|v| visible(v.as_bytes()) && list_has(v.as_bytes(), token))
}

fn list_has(value: &[u8], token: &str) -> bool {
    value.split(|&b| b == b',').any(|item| {
        let item = item.trim_ascii();
        item.len() == token.len()
            && item
                .iter()
                .zip(token.bytes())
                .all(|(a, b)| a.to_ascii_lowercase() == b)
    })
}

/// RFC 6455 §4.1: a 16-byte nonce in base64 is 22 characters and `==`; the
/// last character carries 2 data bits, so its low 4 bits are 0 in the
/// canonical form (the `base64` crate's STANDARD engine insists on it).
fn ref_key_ok(key: &[u8]) -> bool {
    key.len() == 24
        && key[22..] == *b"=="
        && key[..22].iter().all(|&c| sextet(c).is_some())
        && sextet(key[21]).is_some_and(|s| s & 0x0F == 0)
}

fn sextet(c: u8) -> Option<u8> {
    Some(match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => return None,
    })
}

/// The first rule of RFC 6455 §4.2.1 the request breaks, in the order
/// weir checks them. None when a header value is not visible ASCII.
fn ref_check(
    method: &Method,
    version: Version,
    headers: &HeaderMap,
) -> Option<Result<(), HandshakeError>> {
    if method.as_str() != "GET" {
        return Some(Err(HandshakeError::MethodNotGet));
    }
    if version != Version::HTTP_11 {
        return Some(Err(HandshakeError::NotHttp11));
    }
    if !ref_has_token(headers, "connection", "upgrade")? {
        return Some(Err(HandshakeError::MissingConnectionUpgrade));
    }
    let version_ok = headers
        .get("sec-websocket-version")
        .is_some_and(|v| v.as_bytes().trim_ascii() == b"13");
    if !version_ok {
        return Some(Err(HandshakeError::UnsupportedVersion));
    }
    let key_ok = headers
        .get("sec-websocket-key")
        .is_some_and(|k| ref_key_ok(k.as_bytes().trim_ascii()));
    Some(if key_ok {
        Ok(())
    } else {
        Err(HandshakeError::BadKey)
    })
}

/// base64(SHA-1(key ++ GUID)) (RFC 6455 §4.2.2), with another SHA-1 crate
/// and base64 by hand.
fn ref_accept(key: &[u8]) -> String {
    let mut sha = sha1_smol::Sha1::new();
    sha.update(key);
    sha.update(GUID.as_bytes());
    let digest = sha.digest().bytes();
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in digest.chunks(3) {
        let n = chunk.len();
        let bits = chunk
            .iter()
            .chain(std::iter::repeat(&0))
            .take(3)
            .fold(0u32, |acc, &b| (acc << 8) | u32::from(b));
        for i in 0..4 {
            if i <= n {
                out.push(ALPHABET[(bits >> (18 - 6 * i) & 0x3F) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Every subprotocol the client offers, over all its
/// `Sec-WebSocket-Protocol` headers (values that are not visible ASCII are
/// skipped, as weir skips them).
fn ref_offered(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all("sec-websocket-protocol")
        .iter()
        .filter(|v| visible(v.as_bytes()))
        .flat_map(|v| v.as_bytes().split(|&b| b == b','))
        .map(|t| String::from_utf8(t.trim_ascii().to_vec()).expect("ascii"))
        .collect()
}
