//! The admin API's client, for `weir deploy`, `weir rollback` and
//! `weir routes`: one HTTP/1.1 request over a fresh connection, with the
//! bearer token from the environment.

use bytes::Bytes;
use http::{header, Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use std::time::Duration;

/// How long one admin request may take (a deploy compiles: seconds for a
/// big component on a cold cache).
pub const ADMIN_REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// What went wrong talking to the admin API.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot reach the admin API at {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error("admin request failed: {0}")]
    Http(String),
    #[error("the admin API did not answer within {ADMIN_REQUEST_TIMEOUT:?}")]
    Timeout,
}

/// `/routes/{path}/{action}` with the route path percent-encoded.
pub fn route_endpoint(route: &str, action: &str) -> String {
    let mut encoded = String::with_capacity(route.len() * 3);
    for b in route.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            encoded.push(b as char);
        } else {
            encoded.push_str(&format!("%{b:02X}"));
        }
    }
    format!("/routes/{encoded}/{action}")
}

/// Sends one request to the admin API at `addr` (`host:port`); returns the
/// status and the body.
pub async fn request(
    addr: &str,
    token: &str,
    method: Method,
    path: &str,
    body: Vec<u8>,
) -> Result<(u16, String), ClientError> {
    tokio::time::timeout(ADMIN_REQUEST_TIMEOUT, send(addr, token, method, path, body))
        .await
        .map_err(|_| ClientError::Timeout)?
}

async fn send(
    addr: &str,
    token: &str,
    method: Method,
    path: &str,
    body: Vec<u8>,
) -> Result<(u16, String), ClientError> {
    let http = |e: &dyn std::fmt::Display| ClientError::Http(e.to_string());
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|source| ClientError::Connect {
            addr: addr.to_string(),
            source,
        })?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| http(&e))?;
    tokio::spawn(conn);
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header(header::HOST, addr)
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| http(&e))?;
    let resp = sender.send_request(req).await.map_err(|e| http(&e))?;
    let status = resp.status().as_u16();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| http(&e))?
        .to_bytes();
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn route_paths_are_encoded_whole() {
        assert_eq!(
            super::route_endpoint("/chat/{room}", "rollback"),
            "/routes/%2Fchat%2F%7Broom%7D/rollback"
        );
    }
}
