//! HTTP on an accepted connection (hyper), after the TLS handshake when
//! `[server] tls` is set: HTTP/1.1, or HTTP/2 when ALPN chose `h2` (or a
//! plaintext client sent the HTTP/2 preface: h2c with prior knowledge).
//! Host-name refusals (421, `weir_config::hosts`; 400 for two `Host` headers or
//! a bare-LF head, `head_scan`), `/healthz`, `/readyz`, `/metrics`,
//! admission and drain refusals (a place per WebSocket, and the deadline of
//! a connection that carries none, `live`), and the route match; a matched
//! request's handshake and handoff are `upgrade.rs`'s.

use super::head_scan::{HeadScan, HeadState};
use super::live::{serve_until, Busy, Live};
use super::upgrade::{plain_request, upgrade, Matched};
use super::worker::Worker;
use super::{Shared, Shutdown};
use crate::admission::RETRY_AFTER_SECS;
use bytes::Bytes;
use http::{header, HeaderValue, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::net::TcpStream;
use tracing::{debug, warn};

/// Cap on an HTTP request head; past it hyper answers 431. (hyper's minimum.)
const MAX_REQUEST_HEAD_BYTES: usize = 16 * 1024;
/// What a client may send on one HTTP/2 stream before the loop has read
/// it: a stream whose loop stops reading (its client not reading replies,
/// a relay partner's queue full) holds at most this much.
const H2_STREAM_WINDOW_BYTES: u32 = 256 << 10;
/// HTTP/2's largest window (RFC 9113 §6.9.1).
const H2_MAX_WINDOW_BYTES: u32 = (1 << 31) - 1;
/// What an HTTP/2 client with prior knowledge sends first (RFC 9113 §3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Runs hyper's HTTP/2 stream tasks on the worker's `LocalSet`: they hold
/// the worker's `Rc`s, like every task of a worker.
#[derive(Clone, Copy)]
struct LocalExec;

impl<F: std::future::Future + 'static> hyper::rt::Executor<F> for LocalExec {
    fn execute(&self, task: F) {
        tokio::task::spawn_local(task);
    }
}

/// The connection's window covers every stream's (`h2_max_streams` of
/// them), so one stream that stops being read never closes the window of
/// the others.
fn h2_connection_window_bytes(max_streams: u32) -> u32 {
    H2_STREAM_WINDOW_BYTES
        .saturating_mul(max_streams)
        .min(H2_MAX_WINDOW_BYTES)
}

/// Serves a new connection: the TLS handshake first when TLS is on, then
/// HTTP/1.1 until it upgrades or ends.
pub(super) async fn serve_http(
    stream: TcpStream,
    peer: SocketAddr,
    worker: Rc<Worker>,
    stop: Shutdown,
) {
    // Replies are small and latency matters more than packet count; batching
    // already happens in the reactor (one write per read batch).
    let _ = stream.set_nodelay(true);
    let live = Rc::new(Live::new(worker.shared.clone(), peer.ip()));
    let timeout = worker.shared.front.handshake_timeout;
    let Some(tls) = worker
        .shared
        .front
        .tls
        .as_ref()
        .map(|tls| tokio_rustls::TlsAcceptor::from(tls.server_config().clone()))
    else {
        return match tokio::time::timeout(timeout, sends_h2_preface(&stream)).await {
            // Boxed, like TLS below: this task is allocated for every
            // connection and freed at its upgrade, and the rarer paths'
            // room in it would be a hole of several KiB in the worker's heap
            // per upgraded connection (freed memory the next connection's
            // small allocations split up, so it stays resident).
            Ok(true) => Box::pin(serve_http2(TokioIo::new(stream), peer, worker, stop, live)).await,
            Ok(false) => serve_http1(stream, peer, worker, stop, live).await,
            Err(_) => debug!(%peer, ?timeout, "nothing sent within handshake_timeout"),
        };
    };
    Box::pin(serve_tls(stream, peer, worker, stop, live, tls, timeout)).await
}

/// The TLS handshake, then HTTP/2 if ALPN chose it, else HTTP/1.1.
async fn serve_tls(
    stream: TcpStream,
    peer: SocketAddr,
    worker: Rc<Worker>,
    stop: Shutdown,
    live: Rc<Live>,
    tls: tokio_rustls::TlsAcceptor,
    timeout: std::time::Duration,
) {
    // The whole handshake within handshake_timeout: a client that stalls
    // in it, sends plaintext or garbage costs a task and its socket for at
    // most that long, like a slow HTTP request head.
    match tokio::time::timeout(timeout, tls.accept(stream)).await {
        Ok(Ok(stream)) if stream.get_ref().1.alpn_protocol() == Some(weir_config::tls::ALPN_H2) => {
            serve_http2(TokioIo::new(stream), peer, worker, stop, live).await
        }
        Ok(Ok(stream)) => serve_http1(stream, peer, worker, stop, live).await,
        Ok(Err(e)) => {
            worker
                .shared
                .counts
                .tls_handshake_failures
                .fetch_add(1, Ordering::Relaxed);
            debug!(%peer, error = %e, "TLS handshake failed");
        }
        Err(_) => {
            worker
                .shared
                .counts
                .tls_handshake_failures
                .fetch_add(1, Ordering::Relaxed);
            debug!(%peer, ?timeout, "TLS handshake did not finish within handshake_timeout");
        }
    }
}

/// Serves HTTP/1.1 until the connection upgrades or ends. On shutdown an
/// idle keep-alive connection is closed; one in the middle of a request
/// gets its answer first.
async fn serve_http1<I>(
    io: I,
    peer: SocketAddr,
    worker: Rc<Worker>,
    mut stop: Shutdown,
    live: Rc<Live>,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let head = Arc::new(HeadState::default());
    let io = TokioIo::new(HeadScan::new(io, head.clone()));
    let service = {
        let worker = worker.clone();
        let live = live.clone();
        service_fn(move |req| {
            let worker = worker.clone();
            let live = live.clone();
            let head = head.clone();
            async move {
                if head.bare_lf() {
                    debug!(%peer, "refused: a request head line ended in a bare LF");
                    let mut resp = text(
                        StatusCode::BAD_REQUEST,
                        "request head lines must end in CRLF, not a bare LF\n",
                    );
                    resp.headers_mut()
                        .insert(header::CONNECTION, HeaderValue::from_static("close"));
                    return Ok::<_, Infallible>(resp);
                }
                let resp = handle_request(req, peer, worker, live).await;
                if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
                    head.next_head();
                }
                Ok(resp)
            }
        })
    };
    let timeout = worker.shared.front.handshake_timeout;
    let http = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(timeout)
        .max_buf_size(MAX_REQUEST_HEAD_BYTES)
        .serve_connection(io, service)
        .with_upgrades();
    // An idle keep-alive connection gets handshake_timeout again.
    let deadlines = (timeout, timeout);
    let ended = serve_until(std::pin::pin!(http), &mut stop, &live, deadlines, |http| {
        http.graceful_shutdown()
    })
    .await;
    match ended {
        Some(Err(e)) => debug!(%peer, error = %e, "http connection ended"),
        None => debug!(%peer, "http connection closed at its deadline"),
        Some(Ok(())) => {}
    }
}

/// Serves HTTP/2 until the client or the drain ends the connection: each
/// request is a stream, and each WebSocket (RFC 8441) a stream the loop
/// runs on like a socket. On shutdown the client gets GOAWAY; the
/// WebSocket streams get their 1001 through the registry.
async fn serve_http2<I>(
    io: TokioIo<I>,
    peer: SocketAddr,
    worker: Rc<Worker>,
    mut stop: Shutdown,
    live: Rc<Live>,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + 'static,
{
    let service = {
        let worker = worker.clone();
        let live = live.clone();
        service_fn(move |req| {
            let worker = worker.clone();
            let live = live.clone();
            async move { Ok::<_, Infallible>(handle_request(req, peer, worker, live).await) }
        })
    };
    let shared = &worker.shared;
    let http = http2::Builder::new(LocalExec)
        .timer(TokioTimer::new())
        .enable_connect_protocol()
        .max_concurrent_streams(shared.front.h2_max_streams)
        .initial_stream_window_size(H2_STREAM_WINDOW_BYTES)
        .initial_connection_window_size(h2_connection_window_bytes(shared.front.h2_max_streams))
        .max_header_list_size(MAX_REQUEST_HEAD_BYTES as u32)
        .serve_connection(io, service);
    // No stream: closed handshake_timeout after it opened, or the idle
    // deadline after its last stream ended.
    let deadlines = (shared.front.handshake_timeout, shared.front.h2_idle_timeout);
    let ended = serve_until(std::pin::pin!(http), &mut stop, &live, deadlines, |http| {
        http.graceful_shutdown()
    })
    .await;
    match ended {
        Some(Err(e)) => debug!(%peer, error = %e, "http/2 connection ended"),
        None => debug!(%peer, "http/2 connection closed at its deadline"),
        Some(Ok(())) => {}
    }
}

/// Whether a plaintext client opens with the HTTP/2 preface (h2c with prior
/// knowledge) rather than an HTTP/1.1 request: a peek, so hyper still
/// reads the bytes. The first byte decides for any HTTP/1.1 method but
/// `PRI`-like ones; those wait (with growing pauses) for the rest.
async fn sends_h2_preface(stream: &TcpStream) -> bool {
    let mut head = [0u8; H2_PREFACE.len()];
    let mut pause = std::time::Duration::from_millis(2);
    loop {
        match stream.peek(&mut head).await {
            Ok(n) if n > 0 && head[..n] == H2_PREFACE[..n] => {
                if n == H2_PREFACE.len() {
                    return true;
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(std::time::Duration::from_millis(200));
            }
            _ => return false,
        }
    }
}

pub(super) fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

/// 503 with Retry-After; the connection closes after it.
pub(super) fn unavailable(body: &'static str) -> Response<Full<Bytes>> {
    refuse_for(
        StatusCode::SERVICE_UNAVAILABLE,
        body,
        RETRY_AFTER_SECS.into(),
    )
}

/// `status` (503, 429) with `Retry-After: secs`; the connection closes
/// after it.
pub(super) fn refuse_for(
    status: StatusCode,
    body: &'static str,
    secs: u64,
) -> Response<Full<Bytes>> {
    let mut resp = text(status, body);
    resp.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    resp.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    resp
}

/// A refusal while draining: 503 with a jittered `Retry-After`, so the
/// clients refused together do not retry together.
fn drained(body: &'static str) -> Response<Full<Bytes>> {
    let secs = crate::overload::jittered_retry_after();
    refuse_for(StatusCode::SERVICE_UNAVAILABLE, body, secs)
}

/// The answer to a request that names its host twice (400), or a host the
/// gateway does not answer to (421, `allowed_hosts`; `/healthz` and
/// `/readyz` are exempt: load balancers and the kubelet probe by address,
/// and they tell nothing).
fn refuse_names(
    req: &Request<Incoming>,
    hosts: &weir_config::hosts::AllowedHosts,
    peer: SocketAddr,
) -> Option<Response<Full<Bytes>>> {
    if weir_config::hosts::repeated_host(req.headers()) {
        debug!(%peer, "refused: two Host headers");
        let mut resp = text(StatusCode::BAD_REQUEST, "more than one Host header\n");
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        return Some(resp);
    }
    if is_probe(req.uri().path()) || hosts.allows(weir_config::hosts::request_authority(req)) {
        return None;
    }
    debug!(%peer, host = ?weir_config::hosts::request_authority(req), "refused: host not in allowed_hosts");
    Some(text(
        StatusCode::MISDIRECTED_REQUEST,
        "this gateway does not answer to that host name (see [server] allowed_hosts)\n",
    ))
}

/// Routes a request: what the gateway answers itself (names, metrics,
/// health, drain, admission), 404, or the route's upgrade
/// ([`super::upgrade`]).
async fn handle_request(
    req: Request<Incoming>,
    peer: SocketAddr,
    worker: Rc<Worker>,
    live: Rc<Live>,
) -> Response<Full<Bytes>> {
    let _busy = Busy::new(&live);
    let shared = &worker.shared;
    if let Some(answer) = answer_itself(&req, peer, shared) {
        return answer;
    }
    // Held by the WebSocket if this request becomes one; given back if not.
    let Some(place) = live.place() else {
        shared
            .counts
            .refused_over_limit
            .fetch_add(1, Ordering::Relaxed);
        if let Some((n, secs)) = shared.counts.refusals.note() {
            warn!(
                cap = shared.front.admission.max_total(),
                "refused {n} requests in the last {secs} s: connection limit (max_connections, or per IP; each WebSocket and each connection without one counts)"
            );
        }
        return unavailable("too many connections; retry later\n");
    };
    let Some(matched) = Matched::find(req.uri().path(), &worker) else {
        return text(StatusCode::NOT_FOUND, super::NO_ROUTE_BODY);
    };
    if matched.route.draining() {
        let counters = matched.route.stats.worker(worker.index);
        counters.overload[weir_reactor::stats::overload::ROUTE_DRAINED].add_owned(1);
        return drained("this route is drained; retry later\n");
    }
    let req = match plain_request(req, peer, &worker, &matched).await {
        Ok(answer) => return answer,
        Err(req) => req,
    };
    upgrade(req, peer, &worker, matched, place).await
}

/// The paths a load balancer or an orchestrator probes.
fn is_probe(path: &str) -> bool {
    path == "/healthz" || path == "/readyz"
}

/// What the gateway answers before any route: a host name it does not
/// answer to, `/metrics` when public, the drain's 503, `/healthz` and
/// `/readyz`.
///
/// `/healthz` says the process answers; `/readyz` says it should be sent
/// new clients: every guest route's component is compiled and it is not
/// draining. The first half holds whenever the listener answers at all:
/// `Server::bind` compiles every guest (and trial-starts it) before the
/// listeners exist, and a deploy or reload swaps a route's program only
/// once the new one compiled, the old one serving meanwhile. So what
/// changes at run time is the drain (SIGTERM), where both answer 503. A
/// route drained from the admin API does not make the gateway unready: it
/// refuses that route's upgrades only, and taking the whole node out of a
/// load balancer would move every other route's clients too.
fn answer_itself(
    req: &Request<Incoming>,
    peer: SocketAddr,
    shared: &Shared,
) -> Option<Response<Full<Bytes>>> {
    let path = req.uri().path();
    if let Some(refusal) = refuse_names(req, &shared.front.hosts, peer) {
        return Some(refusal);
    }
    if path == "/metrics" && shared.front.public_metrics {
        let mut resp = Response::new(Full::new(Bytes::from(shared.snapshot().render())));
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(crate::metrics::CONTENT_TYPE),
        );
        return Some(resp);
    }
    if shared.drain.draining.load(Ordering::Acquire) {
        let body = if is_probe(path) {
            "draining: not taking new connections\n"
        } else {
            shared
                .counts
                .refused_draining
                .fetch_add(1, Ordering::Relaxed);
            "shutting down; retry later\n"
        };
        return Some(drained(body));
    }
    match path {
        "/healthz" => Some(text(StatusCode::OK, "ok\n")),
        "/readyz" if shared.change.fleet.get().is_some_and(|f| !f.converged()) => Some(text(
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: not yet converged on the fleet's desired versions (is its Redis up?)\n",
        )),
        "/readyz" => Some(text(StatusCode::OK, "ready\n")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    /// The size of the future an async fn returns, without calling it.
    fn future_size<A, B, C, D, F: std::future::Future>(_: impl FnOnce(A, B, C, D) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// The handshake task is allocated for every connection and freed at
    /// its upgrade; with TLS's room in it (5.7 KiB) the holes it left in
    /// the worker's heap cost every idle connection 4 KiB of RSS more.
    #[test]
    fn the_handshake_task_is_small() {
        let size = future_size(super::serve_http);
        assert!(
            size <= 1536,
            "serve_http's future is {size} bytes (was 1,224)"
        );
    }
}
