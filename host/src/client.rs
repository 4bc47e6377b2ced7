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
    // The cause is the error's source, shown once by the caller's chain.
    #[error("cannot reach the admin API at {addr}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error("admin request failed: {0}")]
    Http(String),
    #[error("the admin API did not answer within {ADMIN_REQUEST_TIMEOUT:?}")]
    Timeout,
}

/// The `host:port` to connect to for an admin address given as `host:port`
/// or as an `http://host:port[/]` URL (what a browser's address bar shows
/// for the dashboard).
pub fn admin_authority(given: &str) -> Result<String, String> {
    let given = given.trim();
    if given.starts_with("https://") {
        return Err(format!(
            "{given}: the command line speaks plain HTTP to the admin API; \
             give its host:port on a listener without [admin] tls"
        ));
    }
    let rest = given.strip_prefix("http://").unwrap_or(given);
    let authority = rest.trim_end_matches('/');
    if authority.is_empty() || authority.contains(['/', '?', '#', '@']) || !authority.contains(':')
    {
        return Err(format!(
            "{given}: not an admin address; write host:port, e.g. 127.0.0.1:9090"
        ));
    }
    Ok(authority.to_string())
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

/// Who is asking, for the record a fleet deploy keeps: `$USER@host`.
fn who() -> String {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| "someone".into());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into());
    let who = format!("{user}@{host}");
    // A header value must be visible ASCII.
    who.chars().filter(|c| c.is_ascii_graphic()).collect()
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
        .header(crate::server::WHO_HEADER, who())
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
    fn admin_addresses_take_urls_and_refuse_paths() {
        use super::admin_authority;
        assert_eq!(admin_authority("127.0.0.1:9090").unwrap(), "127.0.0.1:9090");
        assert_eq!(
            admin_authority("http://127.0.0.1:9090/").unwrap(),
            "127.0.0.1:9090"
        );
        assert_eq!(admin_authority("http://[::1]:9090").unwrap(), "[::1]:9090");
        assert!(admin_authority("http://127.0.0.1:9090/routes").is_err());
        assert!(admin_authority("127.0.0.1").is_err());
        assert!(admin_authority("https://a:1")
            .unwrap_err()
            .contains("plain HTTP"));
    }

    #[test]
    fn route_paths_are_encoded_whole() {
        assert_eq!(
            super::route_endpoint("/chat/{room}", "rollback"),
            "/routes/%2Fchat%2F%7Broom%7D/rollback"
        );
    }
}
