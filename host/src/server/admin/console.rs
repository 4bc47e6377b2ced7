//! "Try a route": a WebSocket on the admin listener (authenticated like
//! every admin request) that the gateway bridges to a connection of its
//! own on a public route, so an operator can send text or JSON and watch
//! the replies and the close code from the dashboard. The gateway's
//! connection is a client like any other (no `Origin`, so no route's
//! origins are widened for it); the console never reaches a route the
//! public listener would refuse.
//!
//! Upstream (page → route), messages go as they are. Downstream, every
//! event is one JSON text message: `{"kind":"open","protocol":…}`,
//! `{"kind":"text","data":…}`, `{"kind":"binary","base64":…}`,
//! `{"kind":"close","code":…,"reason":…}`, `{"kind":"refused","status":…,
//! "body":…}` or `{"kind":"error","message":…}`.

use base64::Engine as _;
use futures_util::{SinkExt, StreamExt};
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use serde_json::json;
use std::net::SocketAddr;
use std::time::Duration;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::WebSocketStream;

/// Largest message either side of the console passes on.
pub const MAX_MESSAGE_BYTES: usize = 1 << 20;
/// Time to connect and upgrade to the route.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether `path` is a request path the console may open: absolute, short,
/// printable, no scheme or authority of its own.
pub fn valid_target(path: &str) -> bool {
    path.starts_with('/')
        && !path.starts_with("//")
        && path.len() <= 2048
        && path.bytes().all(|b| b.is_ascii_graphic())
}

fn config() -> WebSocketConfig {
    WebSocketConfig::default()
        .max_message_size(Some(MAX_MESSAGE_BYTES))
        .max_frame_size(Some(MAX_MESSAGE_BYTES))
}

/// Runs one console session: `upgraded` is the page's WebSocket, `public`
/// the gateway's public address, `target` the path to open there.
pub async fn run(upgraded: Upgraded, public: SocketAddr, target: String) {
    let mut page =
        WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, Some(config()))
            .await;
    let url = format!("ws://{public}{target}");
    let route = tokio::time::timeout(CONNECT_TIMEOUT, async {
        let stream = tokio::net::TcpStream::connect(public).await?;
        tokio_tungstenite::client_async_with_config(&url, stream, Some(config()))
            .await
            .map_err(std::io::Error::other)
    })
    .await;
    let mut route = match route {
        Ok(Ok((route, response))) => {
            let protocol = response
                .headers()
                .get("sec-websocket-protocol")
                .and_then(|v| v.to_str().ok());
            let _ = page
                .send(event(json!({ "kind": "open", "protocol": protocol })))
                .await;
            route
        }
        Ok(Err(e)) => {
            let refused = e
                .get_ref()
                .and_then(|inner| inner.downcast_ref::<WsError>())
                .and_then(|ws| match ws {
                    WsError::Http(resp) => Some(json!({
                        "kind": "refused",
                        "status": resp.status().as_u16(),
                        "body": resp.body().as_ref().map(|b| String::from_utf8_lossy(b).into_owned()),
                    })),
                    _ => None,
                });
            let msg = refused.unwrap_or_else(
                || json!({ "kind": "error", "message": format!("cannot open {target}: {e}") }),
            );
            let _ = page.send(event(msg)).await;
            let _ = page.close(None).await;
            return;
        }
        Err(_) => {
            let _ = page
                .send(event(json!({ "kind": "error", "message": format!("{target} did not answer within {CONNECT_TIMEOUT:?}") })))
                .await;
            let _ = page.close(None).await;
            return;
        }
    };
    loop {
        tokio::select! {
            from_page = page.next() => match from_page {
                Some(Ok(Message::Close(frame))) => {
                    // The page closed: so does the route's connection (its
                    // close reply awaited, bounded), then the page's close
                    // handshake completes.
                    let _ = route.close(frame).await;
                    let _ = tokio::time::timeout(CONNECT_TIMEOUT, async {
                        while let Some(Ok(msg)) = route.next().await {
                            if matches!(msg, Message::Close(_)) {
                                break;
                            }
                        }
                    })
                    .await;
                    let _ = page.flush().await;
                    break;
                }
                Some(Ok(msg @ (Message::Text(_) | Message::Binary(_)))) => {
                    if route.send(msg).await.is_err() {
                        break;
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => {
                    let _ = route.close(None).await;
                    break;
                }
            },
            from_route = route.next() => match from_route {
                Some(Ok(Message::Text(text))) => {
                    if page.send(event(json!({ "kind": "text", "data": text.as_str() }))).await.is_err() {
                        break;
                    }
                }
                Some(Ok(Message::Binary(data))) => {
                    let encoded = base64::engine::general_purpose::STANDARD.encode(&data);
                    if page.send(event(json!({ "kind": "binary", "base64": encoded }))).await.is_err() {
                        break;
                    }
                }
                Some(Ok(Message::Close(frame))) => {
                    let _ = page.send(closed(frame.as_ref())).await;
                    let _ = page.close(None).await;
                    break;
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    let _ = page.send(event(json!({ "kind": "error", "message": e.to_string() }))).await;
                    let _ = page.close(None).await;
                    break;
                }
                None => {
                    let _ = page.send(event(json!({ "kind": "close", "code": 1006, "reason": "" }))).await;
                    let _ = page.close(None).await;
                    break;
                }
            },
        }
    }
}

fn event(value: serde_json::Value) -> Message {
    Message::text(value.to_string())
}

fn closed(frame: Option<&CloseFrame>) -> Message {
    let (code, reason) = frame.map_or((1005, ""), |f| (u16::from(f.code), f.reason.as_str()));
    event(json!({ "kind": "close", "code": code, "reason": reason }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_plain_paths() {
        assert!(valid_target("/echo"));
        assert!(valid_target("/chat/lobby?x=1"));
        assert!(!valid_target("echo"));
        assert!(!valid_target("//evil.example/x"));
        assert!(!valid_target("/a b"));
        assert!(!valid_target("/a\r\nHost: x"));
    }
}
