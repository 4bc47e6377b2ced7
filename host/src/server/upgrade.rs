//! A request on a route, past the gateway's own checks (`http.rs`): the
//! opening handshake (RFC 6455's GET + Upgrade, or RFC 8441's extended
//! CONNECT on an HTTP/2 stream), the route's `Origin` policy, the route
//! kind's answer, and the handoff of the socket (and TLS session), or the
//! HTTP/2 stream, to the connection loop.

use super::head_scan::HeadScan;
use super::http::text;
use super::live::Place;
use super::worker::Worker;
use crate::routes::Route;
use bytes::Bytes;
use http::{header, HeaderValue, Request, Response, StatusCode, Version};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::net::TcpStream;
use tracing::{debug, warn};
use weir_reactor::conn::ConnEnv;
use weir_reactor::kind::{Upgrade, WorkerRoute};
use weir_reactor::outbound::Outbound;
use weir_reactor::transport::Io;
use weir_ws::handshake::{self, HandshakeError};

/// The route a request's path matched, taken from the table of the moment
/// (a reload may swap the table while the upgrade runs).
pub(super) struct Matched {
    index: usize,
    pub route: Arc<Route>,
    worker_route: Rc<dyn WorkerRoute>,
    /// The route's path parameters, owned.
    params: Vec<(String, String)>,
}

impl Matched {
    pub fn find(path: &str, worker: &Worker) -> Option<Matched> {
        let table = worker.shared.routes.load();
        let matched = table.router.at(path).ok()?;
        let index = *matched.value;
        let params = matched
            .params
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect();
        Some(Matched {
            index,
            route: table.routes[index].clone(),
            worker_route: worker.route(index, &table),
            params,
        })
    }
}

/// A request on a route that is not a WebSocket handshake (no `Upgrade`,
/// not CONNECT), for a kind that answers plain HTTP (a pusher route's HTTP
/// API, `WorkerRoute::http_body_limit`): its body read within that limit
/// (413 past it) and `handshake_timeout` (408), then the kind's answer.
/// Given back when it is a handshake or the kind answers no plain HTTP.
pub(super) async fn plain_request(
    req: Request<Incoming>,
    peer: SocketAddr,
    worker: &Rc<Worker>,
    matched: &Matched,
) -> Result<Response<Full<Bytes>>, Request<Incoming>> {
    use http_body_util::BodyExt;
    let handshake =
        req.method() == http::Method::CONNECT || req.headers().contains_key(header::UPGRADE);
    let Some(limit) = matched
        .worker_route
        .http_body_limit()
        .filter(|_| !handshake)
    else {
        return Err(req);
    };
    let (head, body) = req.into_parts();
    let read = http_body_util::Limited::new(body, limit).collect();
    let body = match tokio::time::timeout(worker.shared.front.handshake_timeout, read).await {
        Ok(Ok(body)) => body.to_bytes(),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            return Ok(text(
                StatusCode::PAYLOAD_TOO_LARGE,
                "request body too large\n",
            ))
        }
        Ok(Err(e)) => {
            debug!(%peer, error = %e, "request body not read");
            return Ok(text(StatusCode::BAD_REQUEST, "request body not read\n"));
        }
        Err(_) => return Ok(text(StatusCode::REQUEST_TIMEOUT, "request body too slow\n")),
    };
    let answer = matched
        .worker_route
        .http(weir_reactor::kind::HttpRequest {
            method: &head.method,
            uri: &head.uri,
            headers: &head.headers,
            body,
            peer,
        })
        .await;
    let mut resp = Response::new(Full::new(answer.body));
    *resp.status_mut() = answer.status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(answer.content_type),
    );
    Ok(resp)
}

/// The handshake's checks, the route kind's answer, and the 101 (HTTP/1.1)
/// or 200 (HTTP/2) with the socket handed to the connection loop.
pub(super) async fn upgrade(
    mut req: Request<Incoming>,
    peer: SocketAddr,
    worker: &Rc<Worker>,
    matched: Matched,
    place: Place,
) -> Response<Full<Bytes>> {
    let shared = &worker.shared;
    let Matched {
        index,
        route,
        worker_route,
        params,
    } = matched;
    let limits = route.limits();
    let h2 = req.version() == Version::HTTP_2;
    let accept = if h2 {
        let protocol = req
            .extensions()
            .get::<hyper::ext::Protocol>()
            .map(|p| p.as_str());
        match handshake::check_h2_request(req.method(), protocol, req.headers()) {
            Ok(()) => None,
            Err(e) => return refused(e, peer, &route.path),
        }
    } else {
        match websocket_request(&req, peer, &route.path) {
            Ok(accept) => Some(accept),
            Err(resp) => return *resp,
        }
    };
    if let Some(refusal) = refuse_over_rate(peer, worker, &route, &limits) {
        return refusal;
    }
    if let Some(refusal) = refuse_origin(&req, peer, worker, &route, &limits) {
        return refusal;
    }
    let mut protocol = handshake::negotiate_subprotocol(req.headers(), &limits.subprotocols)
        .and_then(|p| HeaderValue::from_str(p).ok());
    let id = worker.next_conn_id();
    let deflate = weir_ws::deflate::negotiate(req.headers(), &limits.compression);
    let outbound = Arc::new(Outbound::new(limits.outbound_budget).with_deflate(deflate.as_ref()));
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
        handshake_timeout: shared.front.handshake_timeout,
        secure: shared.front.tls.is_some(),
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
        idle: worker.idle.clone(),
        live: Rc::new(place),
        plane: worker.plane.clone(),
    };
    shared.counts.upgrades.fetch_add(1, Ordering::Relaxed);
    let upgrade = hyper::upgrade::on(&mut req);
    // The connection's log lines carry its route and id. A debug span: at
    // the default level it is disabled and costs the loop nothing.
    let span = tracing::debug_span!("conn", route = %route.path, conn = id);
    tokio::task::spawn_local(async move {
        match upgrade.await {
            Ok(upgraded) => match into_io(upgraded, h2) {
                Some((io, prefix)) => behaviour.spawn(io, prefix, env, span),
                None => {
                    warn!("upgraded connection is neither TCP nor TLS over TCP");
                    behaviour.abandon(env);
                }
            },
            Err(e) => {
                debug!(%peer, error = %e, "upgrade did not complete");
                behaviour.abandon(env);
            }
        }
    });
    let mut resp = Response::new(Full::new(Bytes::new()));
    // HTTP/2: a 200 opens the stream (RFC 8441 §5); HTTP/1.1: the 101.
    if accept.is_some() {
        *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    }
    let h = resp.headers_mut();
    if let Some(accept) = accept {
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
        h.insert(
            header::SEC_WEBSOCKET_ACCEPT,
            HeaderValue::from_str(&accept).expect("base64 is a valid header value"),
        );
    }
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

/// An upgrade over the route's rate for its client address (429), or over
/// the gateway's (503), each with `Retry-After`. Checked after the
/// handshake's own checks and before the origin's and the route kind's
/// work, so what a flood costs is reading its request heads.
fn refuse_over_rate(
    peer: SocketAddr,
    worker: &Worker,
    route: &Route,
    limits: &weir_config::Limits,
) -> Option<Response<Full<Bytes>>> {
    use crate::overload::{jittered_retry_after, retry_after_secs};
    use weir_reactor::stats::overload;
    let shared = &worker.shared;
    let now = std::time::Instant::now();
    let per_ip = limits.rates.upgrades_per_ip;
    let refused = match route.upgrade_rates.check(peer.ip(), per_ip, now) {
        Err(wait) => Some((
            overload::UPGRADE_RATE_PER_IP,
            StatusCode::TOO_MANY_REQUESTS,
            "too many upgrades from this address; retry later (max_upgrade_rate_per_ip)\n",
            // The one client over its rate: told exactly when.
            retry_after_secs(wait),
        )),
        Ok(()) => match shared.front.upgrade_rate.as_ref().map(|cap| cap.check(now)) {
            Some(Err(_)) => Some((
                overload::UPGRADE_RATE_GLOBAL,
                StatusCode::SERVICE_UNAVAILABLE,
                "the gateway is taking too many upgrades; retry later (max_upgrade_rate)\n",
                // Everyone refused in a burst: spread their returns.
                jittered_retry_after(),
            )),
            _ => None,
        },
    };
    let (reason, status, body, secs) = refused?;
    route.stats.worker(worker.index).overload[reason].add_owned(1);
    if let Some((n, secs)) = shared.counts.rate_refusals.note() {
        warn!(route = %route.path, last = %weir_reactor::stats::OVERLOAD_REASONS[reason],
            "refused {n} upgrades in the last {secs} s over an upgrade rate (max_upgrade_rate_per_ip, max_upgrade_rate)");
    }
    Some(super::http::refuse_for(status, body, secs))
}

/// A browser page the route does not allow (same-origin unless the
/// route's `origins` list it): 403.
fn refuse_origin(
    req: &Request<Incoming>,
    peer: SocketAddr,
    worker: &Worker,
    route: &Route,
    limits: &weir_config::Limits,
) -> Option<Response<Full<Bytes>>> {
    let shared = &worker.shared;
    let policy = weir_config::origin::Policy {
        origins: &limits.origins,
        require_origin: limits.require_origin,
        trusted_proxies: &shared.front.trusted_proxies,
    };
    let origin_req = weir_config::origin::Request {
        headers: req.headers(),
        authority: weir_config::hosts::request_authority(req),
        peer: peer.ip(),
        tls: shared.front.tls.is_some(),
    };
    if let Err(refused) = weir_config::origin::check(&policy, &origin_req) {
        shared.counts.refused_origin.fetch_add(1, Ordering::Relaxed);
        route.stats.worker(worker.index).refused_origin.add_owned(1);
        let shown = match &refused {
            weir_config::origin::Refused::Missing => "none (require_origin)".to_string(),
            // Attacker-chosen text: escaped, and cut.
            weir_config::origin::Refused::NotAllowed(o) => o
                .chars()
                .take(200)
                .collect::<String>()
                .escape_debug()
                .to_string(),
        };
        if let Some((n, secs)) = shared.counts.origin_refusals.note() {
            warn!(route = %route.path, last_origin = %shown,
                "refused {n} upgrades in the last {secs} s: origin not allowed (the route's origins, require_origin)");
        }
        return Some(text(
            StatusCode::FORBIDDEN,
            "this origin may not open WebSockets on this route (see the route's origins)\n",
        ));
    }
    None
}

/// An HTTP/1.1 upgrade request's check (RFC 6455 §4.2.1): its accept key,
/// or the refusal (426 for a plain request on a WebSocket route).
fn websocket_request(
    req: &Request<Incoming>,
    peer: SocketAddr,
    path: &str,
) -> Result<String, Box<Response<Full<Bytes>>>> {
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
        return Err(Box::new(resp));
    }
    handshake::check_request(req.method(), req.version(), req.headers())
        .map_err(|e| Box::new(refused(e, peer, path)))
}

/// The answer to a malformed WebSocket request (over HTTP/2 a stream
/// error's status: the connection and its other streams go on).
fn refused(e: HandshakeError, peer: SocketAddr, path: &str) -> Response<Full<Bytes>> {
    debug!(%peer, path, error = %e, "upgrade refused");
    let mut resp = Response::new(Full::new(Bytes::from(format!("{e}\n"))));
    *resp.status_mut() = e.status();
    if e == HandshakeError::UnsupportedVersion {
        resp.headers_mut().insert(
            header::SEC_WEBSOCKET_VERSION,
            HeaderValue::from_static(handshake::SUPPORTED_VERSION),
        );
    }
    resp
}

/// The socket (and TLS session) hyper upgraded, with the bytes it had
/// read past the request head; an HTTP/2 stream as it is.
fn into_io(upgraded: hyper::upgrade::Upgraded, h2: bool) -> Option<(Io, Bytes)> {
    if h2 {
        return Some((Io::H2(TokioIo::new(upgraded)), Bytes::new()));
    }
    let upgraded = match upgraded.downcast::<TokioIo<HeadScan<TcpStream>>>() {
        Ok(parts) => {
            let tcp = parts.io.into_inner().into_inner();
            return Some((Io::Tcp(tcp), parts.read_buf));
        }
        Err(upgraded) => upgraded,
    };
    type TlsIo = TokioIo<HeadScan<tokio_rustls::server::TlsStream<TcpStream>>>;
    let parts = upgraded.downcast::<TlsIo>().ok()?;
    let (tcp, session) = parts.io.into_inner().into_inner().into_inner();
    Some((Io::Tls(tcp, Box::new(session)), parts.read_buf))
}
