//! The server API (`[api]`), on a listener of its own: Centrifugo's HTTP
//! API v5 (`POST /api/<method>`, a JSON body, the key in `X-API-Key` or
//! `Authorization: apikey <key>`), so backends publish with `cent` (Python)
//! or `cent.js` unchanged. Methods: `batch`, `publish`, `broadcast`, `presence`,
//! `presence_stats`, `history`, `history_remove`, `channels`, `info`,
//! `disconnect`, `subscribe` and `unsubscribe` of a user (on every node with
//! `[cluster]`). Answers are `{"result": …}` or `{"error":
//! {"code", "message"}}` with status 200, as Centrifugo's; a wrong key is
//! 401, a body over `max_body` 413.

mod methods;

use super::Shutdown;
use bytes::Bytes;
use http::{header, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use methods::{call, params};
use serde::Deserialize;
use serde_json::Value;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};
use subtle::ConstantTimeEq;
use tracing::{info, warn};
use weir_native::centrifugo::protocol as p;
use weir_realtime::{HistoryQuery, Realtime, RealtimeError, StreamPosition, UserCommand};

/// Time a client has to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections over `max_connections` being answered 503 at once; past
/// it they are closed without an answer.
const REFUSALS_IN_FLIGHT: usize = 256;
/// Commands one `batch` call may carry (its body is bounded by `max_body`
/// too).
const MAX_BATCH_COMMANDS: usize = 1000;
/// Shortest API key accepted: a secret, not a password someone types.
pub const MIN_API_KEY_BYTES: usize = 16;

/// What every API request is answered with.
pub(super) struct Api {
    pub(super) realtime: Arc<Realtime>,
    pub(super) key: Arc<str>,
    pub(super) hosts: weir_config::hosts::AllowedHosts,
    pub(super) max_body: usize,
    pub(super) max_connections: usize,
    pub(super) started: Instant,
}

/// The API listener's thread: its own runtime, so a burst of API calls
/// never runs on a worker.
pub(super) fn run(listener: std::net::TcpListener, api: Api, shutdown: Shutdown) {
    let Some(runtime) = super::thread_runtime("API") else {
        return;
    };
    let open = Arc::new(tokio::sync::Semaphore::new(api.max_connections));
    let refusing = Arc::new(tokio::sync::Semaphore::new(REFUSALS_IN_FLIGHT));
    let api = Arc::new(api);
    runtime.block_on(async move {
        let listener = match tokio::net::TcpListener::from_std(listener) {
            Ok(l) => l,
            Err(e) => {
                warn!(error = %e, "API listener failed");
                return;
            }
        };
        if let Ok(addr) = listener.local_addr() {
            info!(%addr, "server API listening");
        }
        let mut stop = shutdown;
        loop {
            tokio::select! {
                changed = stop.wait_for(|s| *s) => { let _ = changed; break }
                accepted = listener.accept() => {
                    let Ok((stream, _)) = accepted else {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    };
                    let Ok(permit) = open.clone().try_acquire_owned() else {
                        // Past the refusals in flight too: just close.
                        if let Ok(refusal) = refusing.clone().try_acquire_owned() {
                            tokio::spawn(async move {
                                refuse(stream).await;
                                drop(refusal);
                            });
                        }
                        continue;
                    };
                    let api = api.clone();
                    tokio::spawn(async move {
                        let _permit = permit;
                        let service = service_fn(move |req| {
                            let api = api.clone();
                            async move { Ok::<_, Infallible>(answer(req, &api).await) }
                        });
                        let _ = http1::Builder::new()
                            .timer(TokioTimer::new())
                            .header_read_timeout(HEAD_TIMEOUT)
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    });
                }
            }
        }
    });
}

/// A connection over `max_connections`: a 503 and the close, within a
/// second whatever the peer does.
async fn refuse(mut stream: tokio::net::TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\n\
        content-length: 48\r\nconnection: close\r\nretry-after: 1\r\n\r\n\
        too many API connections ([api] max_connections)";
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        stream.write_all(BUSY).await?;
        stream.shutdown().await?;
        // Read what the peer sent until it closes, so the close is not a
        // reset that could discard the 503 before the peer reads it.
        let mut sink = [0u8; 4096];
        while stream.read(&mut sink).await? > 0 {}
        Ok::<_, std::io::Error>(())
    })
    .await;
}

fn plain(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(Full::new(Bytes::from_static(body.as_bytes())))
        .expect("a valid response")
}

fn json(body: Value) -> Response<Full<Bytes>> {
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("a valid response")
}

/// The key the request carries, if any.
fn key_of(req: &Request<Incoming>) -> Option<&[u8]> {
    if let Some(v) = req.headers().get("x-api-key") {
        return Some(v.as_bytes());
    }
    let auth = req.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, key) = auth.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("apikey")
        .then_some(key.trim().as_bytes())
}

async fn answer(req: Request<Incoming>, api: &Api) -> Response<Full<Bytes>> {
    if weir_config::hosts::repeated_host(req.headers()) {
        return plain(StatusCode::BAD_REQUEST, "more than one Host header");
    }
    if !api
        .hosts
        .allows(weir_config::hosts::request_authority(&req))
    {
        return plain(
            StatusCode::MISDIRECTED_REQUEST,
            "this API listener does not answer to that host name (see [server] allowed_hosts)",
        );
    }
    let authorized = key_of(&req).is_some_and(|k| bool::from(k.ct_eq(api.key.as_bytes())));
    if !authorized {
        return plain(StatusCode::UNAUTHORIZED, "a valid X-API-Key is required");
    }
    let Some(method) = req.uri().path().strip_prefix("/api/").map(str::to_string) else {
        return plain(StatusCode::NOT_FOUND, "the API is at POST /api/<method>");
    };
    if req.method() != Method::POST {
        return plain(StatusCode::METHOD_NOT_ALLOWED, "API methods are POSTed");
    }
    let body = match Limited::new(req.into_body(), api.max_body).collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => return plain(StatusCode::PAYLOAD_TOO_LARGE, "body over [api] max_body"),
    };
    let params: Value = if body.is_empty() {
        Value::Object(Default::default())
    } else {
        match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(_) => return plain(StatusCode::BAD_REQUEST, "the body is not JSON"),
        }
    };
    if method == "batch" {
        return json(match batch(api, params).await {
            Ok(replies) => serde_json::json!({ "replies": replies }),
            Err(e) => error_json(e),
        });
    }
    json(match call(api, &method, params).await {
        Ok(result) => serde_json::json!({ "result": result }),
        Err(e) => error_json(e),
    })
}

fn error_json(e: p::ErrorReply) -> Value {
    serde_json::json!({ "error": { "code": e.code, "message": e.message } })
}

/// Centrifugo's `batch`: `{"commands": [{"<method>": {…}}, …]}`, each
/// run in order (`parallel` is accepted and changes nothing: in order is
/// what a publisher wants), answered `{"replies": [{"<method>": result} or
/// {"error": …}, …]}`. At most [`MAX_BATCH_COMMANDS`]; no batch inside a
/// batch.
async fn batch(api: &Api, v: Value) -> Result<Vec<Value>, p::ErrorReply> {
    #[derive(Deserialize)]
    struct BatchParams {
        #[serde(default)]
        commands: Vec<serde_json::Map<String, Value>>,
    }
    let req: BatchParams = params(v)?;
    if req.commands.len() > MAX_BATCH_COMMANDS {
        return Err(p::LIMIT_EXCEEDED);
    }
    let mut replies = Vec::with_capacity(req.commands.len());
    for command in req.commands {
        let mut entries = command.into_iter();
        let reply = match (entries.next(), entries.next()) {
            (Some((method, _)), None) if method == "batch" => error_json(p::BAD_REQUEST),
            (Some((method, params)), None) => match call(api, &method, params).await {
                Ok(result) => serde_json::json!({ method: result }),
                Err(e) => error_json(e),
            },
            _ => error_json(p::BAD_REQUEST),
        };
        replies.push(reply);
    }
    Ok(replies)
}
