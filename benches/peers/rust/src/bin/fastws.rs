//! fastwebsockets 0.10 peer (hyper 1 upgrade): /echo replies with each
//! message, /relay forwards each message to the paired connection only and
//! closes the partner with 1001 when one side leaves.

use bytes::Bytes;
use fastwebsockets::{
    upgrade, FragmentCollector, FragmentCollectorRead, Frame, OpCode, WebSocket, WebSocketWrite,
};
use http_body_util::Empty;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::Mutex;
use weir_peers::{listen_addr, runtime, Lobby, MAX_MESSAGE_BYTES};

type Io = TokioIo<hyper::upgrade::Upgraded>;
type Writer = Arc<Mutex<WebSocketWrite<tokio::io::WriteHalf<Io>>>>;

async fn echo(ws: WebSocket<Io>) -> Result<(), fastwebsockets::WebSocketError> {
    let mut ws = FragmentCollector::new(ws);
    loop {
        let frame = ws.read_frame().await?;
        match frame.opcode {
            OpCode::Close => return Ok(()),
            OpCode::Text | OpCode::Binary => ws.write_frame(frame).await?,
            _ => {}
        }
    }
}

async fn relay(ws: WebSocket<Io>, lobby: Arc<Lobby<Writer>>) {
    let (rd, wr) = ws.split(tokio::io::split);
    let mut rd = FragmentCollectorRead::new(rd);
    let mine: Writer = Arc::new(Mutex::new(wr));
    let Some(partner) = lobby.pair(mine.clone()).await else {
        return;
    };
    loop {
        let own = mine.clone();
        let frame = rd
            .read_frame(&mut move |f| {
                let own = own.clone();
                async move { own.lock().await.write_frame(f).await }
            })
            .await;
        match frame {
            Ok(f) if matches!(f.opcode, OpCode::Text | OpCode::Binary) => {
                if partner.lock().await.write_frame(f).await.is_err() {
                    break;
                }
            }
            Ok(f) if f.opcode == OpCode::Close => break,
            Ok(_) => {}
            Err(_) => break,
        }
    }
    // Going away: tell the partner (RFC 6455 §7.4.1, 1001).
    let _ = partner
        .lock()
        .await
        .write_frame(Frame::close(1001, b""))
        .await;
}

async fn handle(
    mut req: Request<Incoming>,
    lobby: Arc<Lobby<Writer>>,
) -> Result<Response<Empty<Bytes>>, hyper::Error> {
    let path = req.uri().path().to_string();
    let status = |s: StatusCode| {
        let mut r = Response::new(Empty::new());
        *r.status_mut() = s;
        Ok(r)
    };
    if path != "/echo" && path != "/relay" {
        return status(StatusCode::NOT_FOUND);
    }
    if !upgrade::is_upgrade_request(&req) {
        return status(StatusCode::UPGRADE_REQUIRED);
    }
    let Ok((resp, fut)) = upgrade::upgrade(&mut req) else {
        return status(StatusCode::BAD_REQUEST);
    };
    tokio::spawn(async move {
        let Ok(mut ws) = fut.await else { return };
        ws.set_max_message_size(MAX_MESSAGE_BYTES);
        if path == "/echo" {
            let _ = echo(ws).await;
        } else {
            relay(ws, lobby).await;
        }
    });
    Ok(resp)
}

fn main() {
    let addr = listen_addr();
    runtime().block_on(async move {
        let listener = TcpListener::bind(&addr).await.expect("bind");
        println!("fastwebsockets peer listening on {addr}");
        let lobby: Arc<Lobby<Writer>> = Arc::default();
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            stream.set_nodelay(true).ok();
            let lobby = lobby.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req| handle(req, lobby.clone()));
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .with_upgrades()
                    .await;
            });
        }
    });
}
