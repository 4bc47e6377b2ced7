//! The app server's side of the fan-out: `POST /apps/{id}/events` on one
//! kept-alive HTTP/1.1 connection, each request signed as the `pusher`
//! server libraries sign it (`weir_pusher::http_api::sign_request`: key,
//! timestamp, `body_md5`, HMAC-SHA256), every answer checked for 200.

use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest response head or body taken (a trigger's answer is `{}`).
const MAX_RESPONSE_BYTES: usize = 64 * 1024;

/// One HTTP API connection for one app.
pub struct Trigger {
    tcp: TcpStream,
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
        let tcp = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("HTTP API connect {addr}: {e}"))?;
        tcp.set_nodelay(true).ok();
        Ok(Trigger {
            tcp,
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
        self.tcp
            .write_all(request.as_bytes())
            .await
            .map_err(|e| format!("HTTP API write: {e}"))?;
        let (status, answer) = self.read_response().await?;
        if status != 200 {
            return Err(format!("trigger answered {status}: {answer}"));
        }
        Ok(())
    }

    /// Reads one response (Content-Length framed): its status and body.
    async fn read_response(&mut self) -> Result<(u16, String), String> {
        let mut chunk = [0u8; 4096];
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
                    return Ok((status, body));
                }
            } else if self.buf.len() > MAX_RESPONSE_BYTES {
                return Err("response head over 64 KiB".into());
            }
            let n = self
                .tcp
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
