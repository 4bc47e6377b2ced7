//! The app server's side of the fan-out: `POST /apps/{id}/events` on one
//! kept-alive HTTP/1.1 connection, each request signed as the `pusher`
//! server libraries sign it (`weir_pusher::http_api::sign_request`: key,
//! timestamp, `body_md5`, HMAC-SHA256), every answer checked for 200.

use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest response head or body taken (a trigger's answer is `{}`).
const MAX_RESPONSE_BYTES: usize = 64 * 1024;

/// One HTTP API connection for one app, opened again when the server
/// closes it (a server may answer `Connection: close`, or close an idle
/// keep-alive connection).
pub struct Trigger {
    addr: SocketAddr,
    tcp: Option<TcpStream>,
    host: String,
    app_id: String,
    key: String,
    secret: Vec<u8>,
    buf: Vec<u8>,
}

impl Trigger {
    pub async fn connect(
        addr: SocketAddr,
        app_id: &str,
        key: &str,
        secret: &[u8],
    ) -> Result<Self, String> {
        Ok(Trigger {
            addr,
            tcp: Some(open(addr).await?),
            host: addr.to_string(),
            app_id: app_id.into(),
            key: key.into(),
            secret: secret.into(),
            buf: Vec::with_capacity(4096),
        })
    }

    /// Triggers event `name` on `channel` with `data` (a string) and waits
    /// for the 200.
    pub async fn trigger(&mut self, channel: &str, name: &str, data: &str) -> Result<(), String> {
        let body =
            serde_json::json!({ "name": name, "channels": [channel], "data": data }).to_string();
        let path = format!("/apps/{}/events", self.app_id);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or_default();
        let app = weir_pusher::AppKey {
            key: &self.key,
            secret: &self.secret,
        };
        let query =
            weir_pusher::http_api::sign_request(&app, "POST", &path, &[], body.as_bytes(), now);
        let request = format!(
            "POST {path}?{query} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.host,
            body.len()
        );
        // A kept-alive connection the server closed meanwhile fails before
        // any answer: the request goes again once on a fresh connection.
        let (status, answer, close) = match self.exchange(request.as_bytes()).await {
            Ok(r) => r,
            Err(Failure::Other(e)) => return Err(e),
            Err(Failure::Stale) => {
                self.tcp = Some(open(self.addr).await?);
                self.buf.clear();
                self.exchange(request.as_bytes())
                    .await
                    .map_err(|e| match e {
                        Failure::Stale => "HTTP API connection closed before an answer".to_string(),
                        Failure::Other(e) => e,
                    })?
            }
        };
        if close {
            self.tcp = Some(open(self.addr).await?);
            self.buf.clear();
        }
        if status != 200 {
            return Err(format!("trigger answered {status}: {answer}"));
        }
        Ok(())
    }

    /// Writes a request and reads its response; Stale if the connection
    /// was closed before any byte of an answer.
    async fn exchange(&mut self, request: &[u8]) -> Result<(u16, String, bool), Failure> {
        let tcp = self.tcp.as_mut().ok_or(Failure::Stale)?;
        if tcp.write_all(request).await.is_err() {
            return Err(Failure::Stale);
        }
        self.read_response().await.map_err(|e| {
            if self.buf.is_empty() {
                Failure::Stale
            } else {
                Failure::Other(e)
            }
        })
    }

    /// Reads one response (Content-Length framed): its status, its body,
    /// and whether the server closes the connection after it.
    async fn read_response(&mut self) -> Result<(u16, String, bool), String> {
        let mut chunk = [0u8; 4096];
        let tcp = self.tcp.as_mut().ok_or("no connection")?;
        loop {
            if let Some(end) = crate::ws::head_end(&self.buf) {
                let head = String::from_utf8_lossy(&self.buf[..end]).into_owned();
                let status: u16 = head
                    .split(' ')
                    .nth(1)
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| format!("bad status line in {head:?}"))?;
                let len: usize = head
                    .lines()
                    .find_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        k.eq_ignore_ascii_case("content-length")
                            .then(|| v.trim().parse().ok())?
                    })
                    .ok_or_else(|| format!("response without Content-Length: {head:?}"))?;
                if len > MAX_RESPONSE_BYTES {
                    return Err(format!("response body of {len} bytes"));
                }
                if self.buf.len() >= end + len {
                    let body = String::from_utf8_lossy(&self.buf[end..end + len]).into_owned();
                    self.buf.drain(..end + len);
                    let close = head.lines().any(|l| {
                        l.split_once(':').is_some_and(|(k, v)| {
                            k.eq_ignore_ascii_case("connection")
                                && v.trim().eq_ignore_ascii_case("close")
                        })
                    });
                    return Ok((status, body, close));
                }
            } else if self.buf.len() > MAX_RESPONSE_BYTES {
                return Err("response head over 64 KiB".into());
            }
            let n = tcp
                .read(&mut chunk)
                .await
                .map_err(|e| format!("HTTP API read: {e}"))?;
            if n == 0 {
                return Err("HTTP API connection closed".into());
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// Why an exchange failed: the kept-alive connection was closed before an
/// answer began (worth one retry on a fresh one), or anything else.
enum Failure {
    Stale,
    Other(String),
}

async fn open(addr: SocketAddr) -> Result<TcpStream, String> {
    let tcp = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("HTTP API connect {addr}: {e}"))?;
    tcp.set_nodelay(true).ok();
    Ok(tcp)
}
