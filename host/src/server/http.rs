//! HTTP/1.1 on an accepted connection (hyper): `/healthz`, `/metrics`,
//! admission and drain refusals, route match, the opening handshake, the
//! route kind's answer, and the handoff of the socket to the connection loop.

use super::worker::Worker;
use super::{Shared, Shutdown};
use crate::admission::{Ticket, RETRY_AFTER_SECS};
use crate::reactor::conn::ConnEnv;
use crate::reactor::outbound::Outbound;
use crate::routes::Upgrade;
use crate::ws::handshake::{self, HandshakeError};
use bytes::Bytes;
use http::{header, HeaderValue, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::net::TcpStream;
use tracing::{debug, warn, Instrument};

/// Cap on an HTTP request head; past it hyper answers 431. (hyper's minimum.)
const MAX_REQUEST_HEAD_BYTES: usize = 16 * 1024;

/// Counts a connection as open for as long as it exists, and holds its
/// place under the connection limits (None: over a limit, refuse).
struct LiveGuard(Arc<Shared>, Option<Ticket>);

impl LiveGuard {
    fn new(shared: Arc<Shared>, ticket: Option<Ticket>) -> LiveGuard {
        shared.tcp_open.fetch_add(1, Ordering::AcqRel);
        LiveGuard(shared, ticket)
    }
}

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.0.tcp_open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Serves HTTP/1.1 on a new connection until it upgrades or ends. On
/// shutdown an idle keep-alive connection is closed; one in the middle of a
/// request gets its answer first.
pub(super) async fn serve_http(
    stream: TcpStream,
    peer: SocketAddr,
    worker: Rc<Worker>,
    mut stop: Shutdown,
) {
    // Replies are small and latency matters more than packet count; batching
    // already happens in the reactor (one write per read batch).
    let _ = stream.set_nodelay(true);
    let ticket = worker.shared.admission.admit(peer.ip());
    let guard = Rc::new(LiveGuard::new(worker.shared.clone(), ticket));
    let service = {
        let worker = worker.clone();
        service_fn(move |req| {
            let worker = worker.clone();
            let guard = guard.clone();
            async move { Ok::<_, Infallible>(handle_request(req, peer, worker, guard).await) }
        })
    };
    let http = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(worker.shared.handshake_timeout)
        .max_buf_size(MAX_REQUEST_HEAD_BYTES)
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades();
    tokio::pin!(http);
    // A connection accepted while draining is answered 503 and closed by
    // its response; only ones open before the drain need closing here.
    let accepted_while_draining = *stop.borrow_and_update();
    let ended = tokio::select! {
        ended = http.as_mut() => ended,
        _ = stop.wait_for(|stop| *stop), if !accepted_while_draining => {
            http.as_mut().graceful_shutdown();
            http.await
        }
    };
    if let Err(e) = ended {
        debug!(%peer, error = %e, "http connection ended");
    }
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

/// 503 with Retry-After; the connection closes after it.
fn unavailable(body: &'static str) -> Response<Full<Bytes>> {
    let mut resp = text(StatusCode::SERVICE_UNAVAILABLE, body);
    resp.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
    resp.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    resp
}

/// Routes a request: health check, 404, refusal, or the 101 and the handoff
/// of the socket to the connection loop.
async fn handle_request(
    mut req: Request<Incoming>,
    peer: SocketAddr,
    worker: Rc<Worker>,
    guard: Rc<LiveGuard>,
) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    let shared = &worker.shared;
    if path == "/metrics" && shared.public_metrics {
        let mut resp = Response::new(Full::new(Bytes::from(shared.snapshot().render())));
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(crate::metrics::CONTENT_TYPE),
        );
        return resp;
    }
    if shared.draining.load(Ordering::Acquire) {
        let body = if path == "/healthz" {
            "draining\n"
        } else {
            shared.refused_draining.fetch_add(1, Ordering::Relaxed);
            "shutting down; retry later\n"
        };
        return unavailable(body);
    }
    if path == "/healthz" {
        return text(StatusCode::OK, "ok\n");
    }
    if guard.1.is_none() {
        shared.refused_over_limit.fetch_add(1, Ordering::Relaxed);
        if let Some((n, secs)) = shared.refusals.note() {
            warn!(
                cap = shared.admission.max_total(),
                "refused {n} connections in the last {secs} s: connection limit (max_connections, or per IP)"
            );
        }
        return unavailable("too many connections; retry later\n");
    }
    let (index, route, worker_route, params) = {
        let table = shared.routes.load();
        let Ok(matched) = table.router.at(path) else {
            return text(StatusCode::NOT_FOUND, "no route for this path\n");
        };
        let index = *matched.value;
        // The route's path parameters, owned: the table may be swapped
        // by a reload while the upgrade runs.
        let params: Vec<(String, String)> = matched
            .params
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect();
        (
            index,
            table.routes[index].clone(),
            worker.route(index, &table),
            params,
        )
    };
    let limits = route.limits();
    if !handshake::wants_websocket(req.headers()) {
        let mut resp = text(
            StatusCode::UPGRADE_REQUIRED,
            "this route speaks WebSocket: send a GET with Upgrade: websocket\n",
        );
        resp.headers_mut()
            .insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        resp.headers_mut().insert(
            header::SEC_WEBSOCKET_VERSION,
            HeaderValue::from_static(handshake::SUPPORTED_VERSION),
        );
        return resp;
    }
    let accept = match handshake::check_request(req.method(), req.version(), req.headers()) {
        Ok(accept) => accept,
        Err(e) => {
            debug!(%peer, path = %route.path, error = %e, "upgrade refused");
            let mut resp = Response::new(Full::new(Bytes::from(format!("{e}\n"))));
            *resp.status_mut() = e.status();
            if e == HandshakeError::UnsupportedVersion {
                resp.headers_mut().insert(
                    header::SEC_WEBSOCKET_VERSION,
                    HeaderValue::from_static(handshake::SUPPORTED_VERSION),
                );
            }
            return resp;
        }
    };
    if !handshake::origin_allowed(req.headers(), &limits.origins) {
        shared.refused_origin.fetch_add(1, Ordering::Relaxed);
        debug!(%peer, path = %route.path, origin = ?req.headers().get(header::ORIGIN), "origin refused");
        return text(
            StatusCode::FORBIDDEN,
            "this origin may not open WebSockets on this route (see the route's origins)\n",
        );
    }
    let mut protocol = handshake::negotiate_subprotocol(req.headers(), &limits.subprotocols)
        .and_then(|p| HeaderValue::from_str(p).ok());
    let id = worker.next_conn_id();
    let outbound = Arc::new(Outbound::new(limits.outbound_budget));
    let params: Vec<(&str, &str)> = params
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    let up = Upgrade {
        id,
        uri: req.uri(),
        params: &params,
        headers: req.headers(),
        peer,
        outbound: &outbound,
    };
    let accepted = match worker_route.upgrade(up).await {
        Ok(accepted) => accepted,
        Err(refusal) => {
            let mut resp = text(refusal.status, refusal.body);
            if let Some(secs) = refusal.retry_after {
                resp.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(secs));
            }
            return resp;
        }
    };
    if let Some(p) = accepted
        .protocol
        .and_then(|p| HeaderValue::from_str(&p).ok())
    {
        protocol = Some(p);
    }
    let behaviour = accepted.behaviour;
    let deflate = crate::ws::deflate::negotiate(req.headers(), &limits.compression);
    let env = ConnEnv {
        id,
        route: index,
        peer: peer.ip(),
        outbound,
        pool: worker.pool.clone(),
        limits,
        registry: shared.registry.clone(),
        stats: route.stats.clone(),
        deflate,
    };
    shared.upgrades.fetch_add(1, Ordering::Relaxed);
    let upgrade = hyper::upgrade::on(&mut req);
    tokio::task::spawn_local(
        async move {
            let _live = guard;
            match upgrade.await {
                Ok(upgraded) => match upgraded.downcast::<TokioIo<TcpStream>>() {
                    Ok(parts) => {
                        behaviour
                            .start(parts.io.into_inner(), parts.read_buf, env)
                            .await
                    }
                    Err(_) => {
                        warn!("upgraded connection is not a TcpStream");
                        behaviour.abandon(env);
                    }
                },
                Err(e) => {
                    debug!(%peer, error = %e, "upgrade did not complete");
                    behaviour.abandon(env);
                }
            }
        }
        // The connection's log lines carry its route and id. A debug span:
        // at the default level it is disabled and costs the loop nothing.
        .instrument(tracing::debug_span!("conn", route = %route.path, conn = id)),
    );
    let mut resp = Response::new(Full::new(Bytes::new()));
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = resp.headers_mut();
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(
        header::SEC_WEBSOCKET_ACCEPT,
        HeaderValue::from_str(&accept).expect("base64 is a valid header value"),
    );
    if let Some(p) = protocol {
        h.insert(header::SEC_WEBSOCKET_PROTOCOL, p);
    }
    if let Some(n) = deflate {
        h.insert(
            header::SEC_WEBSOCKET_EXTENSIONS,
            HeaderValue::from_str(&n.response()).expect("parameters are tokens"),
        );
    }
    resp
}
