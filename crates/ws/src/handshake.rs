//! The opening handshake, server side (RFC 6455 §4.2): validate the client's
//! request and compute `Sec-WebSocket-Accept`.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use http::{header, HeaderMap, Method, StatusCode, Version};
use sha1::{Digest, Sha1};

/// The GUID every accept key is salted with (RFC 6455 §1.3).
const ACCEPT_GUID: &[u8] = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
/// The only protocol version this server speaks (RFC 6455 §4.4).
pub const SUPPORTED_VERSION: &str = "13";

/// Why an upgrade request is refused, and the HTTP status it gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    #[error("a WebSocket upgrade must use GET")]
    MethodNotGet,
    #[error("a WebSocket upgrade needs HTTP/1.1")]
    NotHttp11,
    #[error("missing `Connection: Upgrade`")]
    MissingConnectionUpgrade,
    #[error("Sec-WebSocket-Version must be 13")]
    UnsupportedVersion,
    #[error("Sec-WebSocket-Key must be 16 bytes in base64")]
    BadKey,
    #[error(
        "a WebSocket over HTTP/2 is an extended CONNECT with :protocol = websocket (RFC 8441)"
    )]
    NotExtendedConnect,
}

impl HandshakeError {
    /// 426 tells the client which version to speak (RFC 6455 §4.4); every
    /// other malformed request is a 400.
    pub fn status(self) -> StatusCode {
        match self {
            HandshakeError::UnsupportedVersion => StatusCode::UPGRADE_REQUIRED,
            HandshakeError::MethodNotGet => StatusCode::BAD_REQUEST,
            _ => StatusCode::BAD_REQUEST,
        }
    }
}

/// `Sec-WebSocket-Accept` for a client key: base64(sha1(key + GUID)) (§4.2.2).
pub fn accept_key(key: &[u8]) -> String {
    let mut sha = Sha1::new();
    sha.update(key);
    sha.update(ACCEPT_GUID);
    BASE64.encode(sha.finalize())
}

/// Whether a header holding a comma-separated token list contains `token`,
/// compared case-insensitively (RFC 7230 §3.2.6, RFC 6455 §4.2.1).
fn has_token(headers: &HeaderMap, name: header::HeaderName, token: &str) -> bool {
    headers.get_all(name).iter().any(|v| {
        v.to_str()
            .is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
    })
}

/// Whether the client asks for a WebSocket at all (`Upgrade: websocket`).
/// A request without it on a WebSocket route gets 426.
pub fn wants_websocket(headers: &HeaderMap) -> bool {
    has_token(headers, header::UPGRADE, "websocket")
}

/// Validates an upgrade request (RFC 6455 §4.2.1) and returns the accept key.
pub fn check_request(
    method: &Method,
    version: Version,
    headers: &HeaderMap,
) -> Result<String, HandshakeError> {
    if method != Method::GET {
        return Err(HandshakeError::MethodNotGet);
    }
    if version != Version::HTTP_11 {
        return Err(HandshakeError::NotHttp11);
    }
    if !has_token(headers, header::CONNECTION, "upgrade") {
        return Err(HandshakeError::MissingConnectionUpgrade);
    }
    if headers
        .get(header::SEC_WEBSOCKET_VERSION)
        .is_none_or(|v| v.as_bytes().trim_ascii() != SUPPORTED_VERSION.as_bytes())
    {
        return Err(HandshakeError::UnsupportedVersion);
    }
    let key = headers
        .get(header::SEC_WEBSOCKET_KEY)
        .ok_or(HandshakeError::BadKey)?
        .as_bytes()
        .trim_ascii();
    match BASE64.decode(key) {
        Ok(raw) if raw.len() == 16 => Ok(accept_key(key)),
        _ => Err(HandshakeError::BadKey),
    }
}

/// Validates a WebSocket request over HTTP/2 (RFC 8441 §4, §5): an
/// extended CONNECT whose `:protocol` is `websocket`, speaking version 13.
/// There is no key to answer: the stream is the connection.
pub fn check_h2_request(
    method: &Method,
    protocol: Option<&str>,
    headers: &HeaderMap,
) -> Result<(), HandshakeError> {
    if method != Method::CONNECT || !protocol.is_some_and(|p| p.eq_ignore_ascii_case("websocket")) {
        return Err(HandshakeError::NotExtendedConnect);
    }
    if headers
        .get(header::SEC_WEBSOCKET_VERSION)
        .is_none_or(|v| v.as_bytes().trim_ascii() != SUPPORTED_VERSION.as_bytes())
    {
        return Err(HandshakeError::UnsupportedVersion);
    }
    Ok(())
}

/// Picks the subprotocol: the first of the route's list (server preference)
/// that the client offered in `Sec-WebSocket-Protocol` (RFC 6455 §4.2.2).
pub fn negotiate_subprotocol<'a>(headers: &HeaderMap, supported: &'a [String]) -> Option<&'a str> {
    if supported.is_empty() {
        return None;
    }
    let offered: Vec<&str> = headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
    supported
        .iter()
        .find(|s| offered.iter().any(|o| o == s))
        .map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    /// RFC 8441 §4-5: CONNECT with :protocol websocket and version 13;
    /// anything else is refused.
    #[test]
    fn h2_requests_are_extended_connects_with_version_13() {
        let v13 = headers(&[("sec-websocket-version", "13")]);
        assert_eq!(
            check_h2_request(&Method::CONNECT, Some("websocket"), &v13),
            Ok(())
        );
        assert_eq!(
            check_h2_request(&Method::GET, Some("websocket"), &v13),
            Err(HandshakeError::NotExtendedConnect)
        );
        assert_eq!(
            check_h2_request(&Method::CONNECT, None, &v13),
            Err(HandshakeError::NotExtendedConnect)
        );
        assert_eq!(
            check_h2_request(&Method::CONNECT, Some("webtransport"), &v13),
            Err(HandshakeError::NotExtendedConnect)
        );
        let v8 = headers(&[("sec-websocket-version", "8")]);
        assert_eq!(
            check_h2_request(&Method::CONNECT, Some("websocket"), &v8),
            Err(HandshakeError::UnsupportedVersion)
        );
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    fn good() -> HeaderMap {
        headers(&[
            ("upgrade", "websocket"),
            ("connection", "keep-alive, Upgrade"),
            ("sec-websocket-version", "13"),
            ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ])
    }

    /// RFC 6455 §1.3: the worked example of the accept key.
    #[test]
    fn accept_key_example_from_rfc() {
        assert_eq!(
            accept_key(b"dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    /// RFC 6455 §4.2.1: tokens are case-insensitive and may sit in lists.
    #[test]
    fn accepts_tokens_in_lists_any_case() {
        let mut h = good();
        h.insert("upgrade", HeaderValue::from_static("WebSocket"));
        h.insert("connection", HeaderValue::from_static("UPGRADE"));
        assert!(wants_websocket(&h));
        assert_eq!(
            check_request(&Method::GET, Version::HTTP_11, &h).unwrap(),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[test]
    fn rejections_and_their_status() {
        let v11 = Version::HTTP_11;
        assert_eq!(
            check_request(&Method::POST, v11, &good()),
            Err(HandshakeError::MethodNotGet)
        );
        assert_eq!(
            check_request(&Method::GET, Version::HTTP_10, &good()),
            Err(HandshakeError::NotHttp11)
        );
        let mut h = good();
        h.insert("sec-websocket-version", HeaderValue::from_static("8"));
        let e = check_request(&Method::GET, v11, &h).unwrap_err();
        assert_eq!(e.status(), StatusCode::UPGRADE_REQUIRED);
        let mut h = good();
        h.insert("sec-websocket-key", HeaderValue::from_static("c2hvcnQ="));
        assert_eq!(
            check_request(&Method::GET, v11, &h),
            Err(HandshakeError::BadKey)
        );
        let mut h = good();
        h.remove("connection");
        assert_eq!(
            check_request(&Method::GET, v11, &h),
            Err(HandshakeError::MissingConnectionUpgrade)
        );
    }

    /// RFC 6455 §4.2.2: the server picks one of the client's offers, or none.
    #[test]
    fn subprotocol_follows_server_preference() {
        let h = headers(&[
            ("sec-websocket-protocol", "chat, superchat"),
            ("sec-websocket-protocol", "v2"),
        ]);
        let supported = vec!["v2".to_string(), "chat".to_string()];
        assert_eq!(negotiate_subprotocol(&h, &supported), Some("v2"));
        assert_eq!(negotiate_subprotocol(&h, &["mqtt".to_string()]), None);
        assert_eq!(negotiate_subprotocol(&h, &[]), None);
    }
}
