//! tokio-tungstenite 0.28 peer: /echo replies with each message (`send`,
//! the idiomatic call, flushes per message), /relay forwards each message to
//! the paired connection only and closes the partner with 1001 when one side leaves.

use futures_util::stream::{SplitSink, StreamExt};
use futures_util::SinkExt;
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;
use weir_peers::{listen_addr, runtime, Lobby, MAX_MESSAGE_BYTES};

type Writer = Arc<Mutex<SplitSink<WebSocketStream<TcpStream>, Message>>>;

async fn serve(stream: TcpStream, lobby: Arc<Lobby<Writer>>) {
    let mut path = String::new();
    // The error type is tungstenite's `Callback` contract, not ours to shrink.
    #[allow(clippy::result_large_err)]
    let route = |req: &Request, resp: Response| -> Result<Response, ErrorResponse> {
        path = req.uri().path().to_string();
        if path == "/echo" || path == "/relay" {
            Ok(resp)
        } else {
            let mut r = ErrorResponse::new(None);
            *r.status_mut() = tokio_tungstenite::tungstenite::http::StatusCode::NOT_FOUND;
            Err(r)
        }
    };
    let config = WebSocketConfig::default()
        .max_message_size(Some(MAX_MESSAGE_BYTES))
        .max_frame_size(Some(MAX_MESSAGE_BYTES));
    let Ok(mut ws) =
        tokio_tungstenite::accept_hdr_async_with_config(stream, route, Some(config)).await
    else {
        return;
    };
    if path == "/echo" {
        // Runs until the close handshake completes (tungstenite answers the close itself).
        while let Some(Ok(msg)) = ws.next().await {
            if (msg.is_text() || msg.is_binary()) && ws.send(msg).await.is_err() {
                break;
            }
        }
        return;
    }
    let (sink, mut stream) = ws.split();
    let mine: Writer = Arc::new(Mutex::new(sink));
    let Some(partner) = lobby.pair(mine.clone()).await else {
        return;
    };
    while let Some(Ok(msg)) = stream.next().await {
        match msg {
            Message::Text(_) | Message::Binary(_) => {
                let sent = partner.lock().await.send(msg).await;
                if sent.is_err() {
                    break;
                }
            }
            Message::Close(_) => {
                // Flush our own close reply, queued by tungstenite.
                let _ = mine.lock().await.flush().await;
                break;
            }
            _ => {}
        }
    }
    let away = CloseFrame {
        code: CloseCode::Away,
        reason: "".into(),
    };
    let _ = partner.lock().await.send(Message::Close(Some(away))).await;
}

fn main() {
    let addr = listen_addr();
    runtime().block_on(async move {
        let listener = TcpListener::bind(&addr).await.expect("bind");
        println!("tokio-tungstenite peer listening on {addr}");
        let lobby: Arc<Lobby<Writer>> = Arc::default();
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            stream.set_nodelay(true).ok();
            tokio::spawn(serve(stream, lobby.clone()));
        }
    });
}
