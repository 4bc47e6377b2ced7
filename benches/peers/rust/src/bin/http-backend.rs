//! HTTP/1.1 backend for benches/guest-io.py: answers every request with its
//! body and its `x-kind` header, keep-alive, one thread. The guest route
//! (examples/fixtures/fetch-echo) and `fetch-native` both call it, so its
//! CPU is the same work for either and is reported apart.

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use weir_peers::{listen_addr, runtime};

async fn answer(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let kind = req.headers().get("x-kind").cloned();
    let body = match req.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let mut response = Response::new(Full::new(body));
    if let Some(kind) = kind {
        response.headers_mut().insert("x-kind", kind);
    }
    Ok(response)
}

fn main() {
    let addr = listen_addr();
    runtime().block_on(async move {
        let listener = TcpListener::bind(&addr).await.expect("bind");
        println!("http backend listening on {addr}");
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            stream.set_nodelay(true).ok();
            tokio::spawn(async move {
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service_fn(answer))
                    .await;
            });
        }
    });
}
