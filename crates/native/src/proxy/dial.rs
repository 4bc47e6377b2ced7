//! The upstream side of a proxied upgrade: the TCP connection, TLS for a
//! `wss://` upstream, and the opening handshake as a client (RFC 6455
//! §4.1), done before the client
//! gets its answer, so an upstream that is down, slow or refuses shows up
//! as an HTTP status (502, 504) instead of a 101 followed by a close.

use super::upstream::UpstreamIo;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use http::{header, HeaderMap};
use std::cell::RefCell;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use weir_config::url_check::{encode_param, PathError};
use weir_config::ProxyConfig;
use weir_ws::handshake;

/// Cap on the upstream's response head: the same as on a client's request.
const MAX_RESPONSE_HEAD_BYTES: usize = 16 * 1024;
/// Response headers parsed at most.
const MAX_RESPONSE_HEADERS: usize = 64;

/// An upstream that answered the upgrade with a valid 101.
pub struct Dialed {
    pub stream: UpstreamIo,
    /// The subprotocol the upstream chose (one the client offered).
    pub protocol: Option<String>,
    /// Bytes the upstream sent after its response head: its first frames.
    pub early: Vec<u8>,
}

/// Why the upstream could not be used (each is a 502 to the client).
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    #[error("cannot connect: {0}")]
    Connect(std::io::Error),
    #[error("TLS handshake failed: {0}")]
    Tls(std::io::Error),
    #[error("connection lost during the handshake: {0}")]
    Io(std::io::Error),
    #[error("closed the connection before answering")]
    NoAnswer,
    #[error("response head is not HTTP or larger than 16 KiB")]
    BadResponse,
    #[error("answered {0} instead of 101")]
    Status(u16),
    #[error("101 without a valid WebSocket handshake: {0}")]
    BadHandshake(&'static str),
}

/// What the upstream request carries from the client's.
pub struct UpstreamRequest {
    /// Path and query, parameters substituted, the client's query appended.
    pub target: String,
    pub head: String,
    /// The `Sec-WebSocket-Key` sent, to check the accept.
    key: String,
    /// Subprotocols the client offered: the upstream must pick one of these.
    offered: Vec<String>,
}

/// `template` with each `{name}` replaced by the route parameter of that
/// name, then the client's query. A value is substituted as one path
/// segment, percent-encoded (a `{*rest}` wildcard's as segments), and one
/// that would change the upstream path's shape (`.`, `..`, a slash or
/// backslash, raw or encoded, a control character) is refused
/// (`url_check::encode_param`): the client gets 400 and nothing is dialled.
pub fn upstream_target(
    template: &str,
    params: &[(&str, &str)],
    query: Option<&str>,
) -> Result<String, PathError> {
    let mut out = String::with_capacity(template.len() + 32);
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let close = after.find('}').expect("placeholders were checked");
        let wildcard = after.starts_with('*');
        let name = after[..close].trim_start_matches('*');
        let value = params
            .iter()
            .find(|(n, _)| n.trim_start_matches('*') == name)
            .map_or("", |(_, v)| *v);
        out.push_str(&encode_param(value, wildcard)?);
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    if let Some(query) = query.filter(|q| !q.is_empty()) {
        out.push(if out.contains('?') { '&' } else { '?' });
        out.push_str(query);
    }
    Ok(out)
}

impl UpstreamRequest {
    /// The request head for `target`: the handshake headers, the
    /// subprotocols the client offered, the route's `forward_headers` and
    /// `X-Forwarded-For` (the client's address: an edge gateway does not
    /// pass on what a client claims) and `X-Forwarded-Proto` (`https` when
    /// the client came over TLS: `secure`).
    pub fn new(
        config: &ProxyConfig,
        target: String,
        client: &HeaderMap,
        peer: SocketAddr,
        secure: bool,
        key: [u8; 16],
    ) -> UpstreamRequest {
        let key = BASE64.encode(key);
        let offered: Vec<String> = client
            .get_all(header::SEC_WEBSOCKET_PROTOCOL)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(|p| p.trim().to_string())
            .filter(|p| !p.is_empty())
            .collect();
        let mut head = String::with_capacity(256);
        let _ = write!(
            head,
            "GET {target} HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n",
            config.authority
        );
        if !offered.is_empty() {
            let _ = write!(head, "Sec-WebSocket-Protocol: {}\r\n", offered.join(", "));
        }
        for name in &config.forward_headers {
            for value in client.get_all(name.as_str()) {
                // Header values hyper accepted hold no CR or LF.
                if let Ok(value) = value.to_str() {
                    let _ = write!(head, "{name}: {value}\r\n");
                }
            }
        }
        let proto = if secure { "https" } else { "http" };
        let _ = write!(
            head,
            "X-Forwarded-For: {}\r\nX-Forwarded-Proto: {proto}\r\n\r\n",
            peer.ip()
        );
        UpstreamRequest {
            target,
            head,
            key,
            offered,
        }
    }
}

/// Connects to the upstream (with TLS under `tls` for `wss://`) and runs
/// the handshake (the caller bounds it with the route's `connect_timeout`).
pub async fn dial(
    config: &ProxyConfig,
    tls: Option<&Arc<rustls::ClientConfig>>,
    req: &UpstreamRequest,
) -> Result<Dialed, DialError> {
    let stream = TcpStream::connect((config.host.as_str(), config.port))
        .await
        .map_err(DialError::Connect)?;
    // Frames are forwarded as they come; batching happens per read.
    let _ = stream.set_nodelay(true);
    let Some(tls) = tls else {
        let mut stream = stream;
        let (protocol, early) = handshake(&mut stream, req).await?;
        return Ok(Dialed {
            stream: UpstreamIo::Tcp(stream),
            protocol,
            early,
        });
    };
    let name = weir_config::tls::server_name(&config.host).map_err(DialError::Tls)?;
    let mut stream = tokio_rustls::TlsConnector::from(tls.clone())
        .connect(name, stream)
        .await
        .map_err(DialError::Tls)?;
    let (protocol, early) = handshake(&mut stream, req).await?;
    // The session goes on synchronously over the socket (`UpstreamIo`);
    // plaintext it already decrypted stays in it.
    let (tcp, session) = stream.into_inner();
    Ok(Dialed {
        stream: UpstreamIo::Tls {
            tcp,
            tls: Box::new(RefCell::new(session)),
        },
        protocol,
        early,
    })
}

/// Sends the upgrade request and reads the answer: the chosen subprotocol
/// and the bytes that came after the response head.
async fn handshake<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    req: &UpstreamRequest,
) -> Result<(Option<String>, Vec<u8>), DialError> {
    stream
        .write_all(req.head.as_bytes())
        .await
        .map_err(DialError::Io)?;
    stream.flush().await.map_err(DialError::Io)?;
    let mut buf = Vec::with_capacity(1024);
    loop {
        if buf.len() >= MAX_RESPONSE_HEAD_BYTES {
            return Err(DialError::BadResponse);
        }
        buf.reserve(1024);
        let n = stream.read_buf(&mut buf).await.map_err(DialError::Io)?;
        if n == 0 {
            return Err(DialError::NoAnswer);
        }
        let mut headers = [httparse::EMPTY_HEADER; MAX_RESPONSE_HEADERS];
        let mut response = httparse::Response::new(&mut headers);
        match response.parse(&buf) {
            Ok(httparse::Status::Partial) => continue,
            Ok(httparse::Status::Complete(len)) => {
                let protocol = check_response(&response, req)?;
                return Ok((protocol, buf.split_off(len)));
            }
            Err(_) => return Err(DialError::BadResponse),
        }
    }
}

/// RFC 6455 §4.1: the client's checks of the server's answer. Returns the
/// chosen subprotocol.
fn check_response(
    response: &httparse::Response,
    req: &UpstreamRequest,
) -> Result<Option<String>, DialError> {
    let status = response.code.unwrap_or(0);
    if status != 101 {
        return Err(DialError::Status(status));
    }
    let get = |name: &'static str| header_values(response, name);
    let has_token = |name: &'static str, token: &str| {
        get(name).any(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
    };
    if !has_token("upgrade", "websocket") {
        return Err(DialError::BadHandshake("no Upgrade: websocket"));
    }
    if !has_token("connection", "upgrade") {
        return Err(DialError::BadHandshake("no Connection: Upgrade"));
    }
    let expected = handshake::accept_key(req.key.as_bytes());
    if get("sec-websocket-accept").next().map(str::trim) != Some(expected.as_str()) {
        return Err(DialError::BadHandshake("wrong Sec-WebSocket-Accept"));
    }
    // Nothing was offered, so nothing may be taken (permessage-deflate
    // would change what the frames mean).
    if get("sec-websocket-extensions").any(|v| !v.trim().is_empty()) {
        return Err(DialError::BadHandshake("an extension nobody offered"));
    }
    let mut chosen = get("sec-websocket-protocol").map(str::trim);
    match (chosen.next(), chosen.next()) {
        (None, _) => Ok(None),
        (Some(p), None) if req.offered.iter().any(|o| o == p) => Ok(Some(p.to_string())),
        _ => Err(DialError::BadHandshake(
            "a subprotocol the client did not offer",
        )),
    }
}

/// The values of every `name` header of `response` (case-insensitive).
fn header_values<'r>(
    response: &'r httparse::Response<'_, '_>,
    name: &'static str,
) -> impl Iterator<Item = &'r str> {
    response
        .headers
        .iter()
        .filter(move |h| h.name.eq_ignore_ascii_case(name))
        .map(|h| std::str::from_utf8(h.value).unwrap_or(""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_substitute_parameters_and_append_the_query() {
        let params = [("room", "lobby"), ("*rest", "a/b")];
        assert_eq!(
            upstream_target("/rooms/{room}", &params, Some("x=1")).unwrap(),
            "/rooms/lobby?x=1"
        );
        assert_eq!(
            upstream_target("/f/{*rest}?v=2", &params, Some("x=1")).unwrap(),
            "/f/a/b?v=2&x=1"
        );
        assert_eq!(upstream_target("/", &params, Some("")).unwrap(), "/");
    }

    /// Issue 35: a parameter cannot change the upstream path's shape.
    #[test]
    fn parameters_stay_one_segment() {
        let target = |room: &str| upstream_target("/rooms/{room}", &[("room", room)], None);
        assert_eq!(target("a b%20c").unwrap(), "/rooms/a%20b%20c");
        for bad in ["..", "%2e%2e", "..%2Fadmin", ".", "a%5cb", "a/b", "%0a"] {
            assert!(target(bad).is_err(), "{bad}");
        }
        // `{rest}` not marked a wildcard: its slash is refused.
        assert!(upstream_target("/f/{rest}", &[("rest", "a/b")], None).is_err());
    }
}
