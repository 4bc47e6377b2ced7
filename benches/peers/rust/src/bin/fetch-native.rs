//! The fetch-echo guest's logic (examples/fixtures/fetch-echo) as a native
//! tokio server, for benches/guest-io.py: every message is POSTed to the
//! backend (`BACKEND_URL`, hyper's pooled client, `x-kind` header) and the
//! response body goes back to the sender with the kind the backend echoed;
//! `timers N MS` sets N tokio timers and answers `done N` once all fired.
//! One request at a time per connection (the benchmark keeps one message in
//! flight per connection), one thread like `weir serve --workers 1`.

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::Message;
use weir_peers::{listen_addr, runtime};

type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// POST `body` with `kind`; the reply message, or `error REASON`.
async fn call(client: &HttpClient, url: &str, kind: &'static str, body: Bytes) -> Message {
    let request = hyper::Request::post(url)
        .header("x-kind", kind)
        .body(Full::new(body))
        .expect("a valid request");
    let response = match client.request(request).await {
        Ok(r) => r,
        Err(_) => return Message::text("error connect"),
    };
    let text = response
        .headers()
        .get("x-kind")
        .is_some_and(|k| k == "text");
    let Ok(body) = response.into_body().collect().await else {
        return Message::text("error connect");
    };
    let body = body.to_bytes();
    if text {
        match String::from_utf8(body.to_vec()) {
            Ok(t) => Message::text(t),
            Err(_) => Message::text("error not-utf8"),
        }
    } else {
        Message::binary(body)
    }
}

async fn timers(n: u32, ms: u64) -> Message {
    let (fired, mut count) = tokio::sync::mpsc::unbounded_channel();
    for _ in 0..n {
        let fired = fired.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            let _ = fired.send(());
        });
    }
    drop(fired);
    let mut left = n;
    while left > 0 && count.recv().await.is_some() {
        left -= 1;
    }
    Message::text(format!("done {n}"))
}

async fn serve(stream: TcpStream, client: HttpClient, url: String) {
    let Ok(mut ws) = tokio_tungstenite::accept_async(stream).await else {
        return;
    };
    while let Some(Ok(msg)) = ws.next().await {
        let reply = match msg {
            Message::Text(t) if t.starts_with("timers ") => {
                let mut words = t["timers ".len()..].split(' ');
                let n = words.next().and_then(|w| w.parse().ok()).unwrap_or(0);
                let ms = words.next().and_then(|w| w.parse().ok()).unwrap_or(0);
                timers(n, ms).await
            }
            Message::Text(t) => call(&client, &url, "text", Bytes::from(t)).await,
            Message::Binary(b) => call(&client, &url, "binary", b).await,
            _ => continue,
        };
        if ws.send(reply).await.is_err() {
            break;
        }
    }
}

fn main() {
    let addr = listen_addr();
    let url = std::env::var("BACKEND_URL").unwrap_or_else(|_| "http://127.0.0.1:9004/".into());
    runtime().block_on(async move {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client: HttpClient = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        let listener = TcpListener::bind(&addr).await.expect("bind");
        println!("fetch-native peer listening on {addr}, backend {url}");
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            stream.set_nodelay(true).ok();
            tokio::spawn(serve(stream, client.clone(), url.clone()));
        }
    });
}
