//! The admin API and the dashboard, on a listener of their own (`[admin]
//! listen`), never on the public one: `GET /routes`, `PUT
//! /routes/{path}/component`, `POST /routes/{path}/rollback` (which pins
//! the version against reloads) and `/unpin`, `POST
//! /routes/{path}/drain` and `/resume`, `POST /reload`, `GET /fleet` (with
//! `[cluster] redis`: deploys and rollbacks then go to every node,
//! `server/fleet.rs`), `GET /metrics`,
//! `GET /api/overview`, the console WebSocket `GET /console?path=…`, and
//! the dashboard page at `/` ([`dashboard`]).
//!
//! Every API request carries `Authorization: Bearer <token>` (the token
//! from the environment variable `[admin] token_env`) or the session
//! cookie the page got by POSTing that token to `/session` ([`session`]);
//! otherwise 401. A wrong token counts against the client's address
//! ([`sign_in`]): past 10 a minute it gets 429 with `Retry-After`. A
//! state-changing request made with the cookie also needs `X-Weir-Admin: 1`
//! (403 without). The page and its assets need nothing: they hold no data.
//! With `[admin] tls` the listener speaks HTTPS only. One thread with its
//! own runtime: a deploy compiles there, never on a worker. A request
//! naming a host the gateway does not answer to (`weir_config::hosts`, `[server]
//! allowed_hosts`) gets 421 first. This module serves the listener and
//! dispatches; [`auth`] decides who may ask, [`actions`] changes routes.

mod actions;
mod auth;
mod console;
mod dashboard;
mod escape;
mod session;
mod sign_in;

use super::reload::Changes;
use super::Shutdown;
use actions::{report_json, route_action, routes};
use auth::{authorized, session_request, too_many_sign_ins, Auth};
use bytes::Bytes;
use dashboard::History;
pub use escape::percent_decode;
use escape::percent_encoding_valid;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::json;
use session::Sessions;
use sign_in::SignIns;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// Largest component a deploy may upload: guests are a few hundred KiB to
/// a few MiB; this leaves room for big toolchains (a JS engine) and stops
/// an upload from filling the gateway's memory.
pub const MAX_COMPONENT_BYTES: usize = 64 << 20;
/// The header a deploy or rollback names its author with (`weir deploy`
/// sends `$USER@host`); the fleet records it.
pub const WHO_HEADER: &str = "x-weir-who";
/// Bodies of other requests are empty; anything sent is capped at this.
const MAX_OTHER_BODY_BYTES: usize = 4096;
/// Time a client has to send its request head (and, with `[admin] tls`,
/// to finish its TLS handshake before that).
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Shortest token accepted: a bearer token is a secret, not a password
/// someone types.
pub const MIN_TOKEN_BYTES: usize = 16;

/// Runs the admin listener until `shutdown` (on the calling thread).
pub(super) fn run(
    listener: std::net::TcpListener,
    changes: Changes,
    token: Arc<str>,
    hosts: weir_config::hosts::AllowedHosts,
    public: SocketAddr,
    shutdown: Shutdown,
) {
    let Some(runtime) = crate::server::thread_runtime("admin") else {
        return;
    };
    runtime.block_on(async move {
        let listener = match tokio::net::TcpListener::from_std(listener) {
            Ok(l) => l,
            Err(e) => {
                warn!(error = %e, "admin listener failed");
                return;
            }
        };
        if let Ok(addr) = listener.local_addr() {
            info!(%addr, "admin API and dashboard listening");
        }
        let tls = changes
            .shared
            .change
            .admin_tls
            .as_ref()
            .map(|t| tokio_rustls::TlsAcceptor::from(t.server_config().clone()));
        let admin = Arc::new(Admin {
            changes,
            token,
            hosts,
            public: reachable(public),
            sessions: Sessions::default(),
            history: History::default(),
            sign_ins: SignIns::default(),
            secure: tls.is_some(),
        });
        let summarizer = admin.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(sign_in::SUMMARY_EVERY);
            every.tick().await;
            loop {
                every.tick().await;
                summarizer.sign_ins.summarize(Instant::now());
            }
        });
        let sampler = admin.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(dashboard::SAMPLE_EVERY);
            loop {
                every.tick().await;
                sampler.history.sample(&sampler.changes.shared);
            }
        });
        let mut stop = shutdown;
        loop {
            tokio::select! {
                changed = stop.wait_for(|s| *s) => { let _ = changed; break }
                accepted = listener.accept() => {
                    let Ok((stream, peer)) = accepted else {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    };
                    tokio::spawn(connection(stream, peer, tls.clone(), admin.clone()));
                }
            }
        }
    });
}

/// One accepted connection: its TLS handshake under `[admin] tls`, then
/// its requests.
async fn connection(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    tls: Option<tokio_rustls::TlsAcceptor>,
    admin: Arc<Admin>,
) {
    let Some(acceptor) = tls else {
        return serve(stream, admin, peer.ip()).await;
    };
    // A client that never finishes its handshake holds a task for
    // HEAD_TIMEOUT at most; plaintext on the TLS port fails at once.
    match tokio::time::timeout(HEAD_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(stream)) => serve(stream, admin, peer.ip()).await,
        Ok(Err(e)) => tracing::debug!(%peer, "admin TLS handshake failed: {e}"),
        Err(_) => tracing::debug!(%peer, "admin TLS handshake timed out"),
    }
}

/// Serves the requests of one admin connection (plain or TLS) from `peer`.
async fn serve<S>(stream: S, admin: Arc<Admin>, peer: IpAddr)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |req| {
        let admin = admin.clone();
        async move { Ok::<_, Infallible>(answer(req, &admin, peer).await) }
    });
    let _ = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades()
        .await;
}

/// What every admin request is answered with.
struct Admin {
    changes: Changes,
    token: Arc<str>,
    /// The names admin requests may give as `Host` (421 otherwise), so a
    /// page on a rebinding domain cannot reach the console.
    hosts: weir_config::hosts::AllowedHosts,
    /// Where the console connects to reach a public route.
    public: SocketAddr,
    sessions: Sessions,
    history: History,
    /// Wrong tokens per client address, and who is limited.
    sign_ins: SignIns,
    /// Whether the listener speaks TLS: the session cookie is then `Secure`.
    secure: bool,
}

/// The public listener's address as a local client reaches it (a wildcard
/// bind is reached on loopback).
fn reachable(public: SocketAddr) -> SocketAddr {
    let mut addr = public;
    if addr.ip().is_unspecified() {
        addr.set_ip(match addr {
            SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    addr
}

fn reply(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(body.into()));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

fn json_reply(status: StatusCode, value: serde_json::Value) -> Response<Full<Bytes>> {
    reply(status, "application/json", format!("{value}\n"))
}

fn error(status: StatusCode, message: impl std::fmt::Display) -> Response<Full<Bytes>> {
    json_reply(status, json!({ "error": message.to_string() }))
}

/// The page's assets, with headers that keep it from being framed by
/// another site or running anything but its own script.
fn asset(content_type: &'static str, body: &'static str) -> Response<Full<Bytes>> {
    let mut resp = reply(StatusCode::OK, content_type, body);
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    resp
}

async fn answer(req: Request<Incoming>, admin: &Arc<Admin>, peer: IpAddr) -> Response<Full<Bytes>> {
    if weir_config::hosts::repeated_host(req.headers()) {
        return error(StatusCode::BAD_REQUEST, "more than one Host header");
    }
    if !admin
        .hosts
        .allows(weir_config::hosts::request_authority(&req))
    {
        return error(
            StatusCode::MISDIRECTED_REQUEST,
            "this admin listener does not answer to that host name (see [server] allowed_hosts)",
        );
    }
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    if !percent_encoding_valid(&path) || !percent_encoding_valid(&query) {
        return error(
            StatusCode::BAD_REQUEST,
            "the request target has a % not followed by two hex digits",
        );
    }
    // A limited address gets 429 for anything that tries a token, the
    // right one too: otherwise the limit would only slow down which
    // answer a guess gets, not the guessing. A session already open keeps
    // working (its cookie is not a guess).
    let tries_token = req.headers().contains_key(header::AUTHORIZATION)
        || (path == "/session" && method == Method::POST);
    if tries_token {
        if let Err(limited) = admin.sign_ins.check(peer, Instant::now()) {
            return too_many_sign_ins(limited);
        }
    }
    if method == Method::GET {
        if let Some((_, content_type, body)) = dashboard::ASSETS.iter().find(|(p, _, _)| *p == path)
        {
            return asset(content_type, body);
        }
    }
    if path == "/session" {
        return session_request(req, admin, peer).await;
    }
    let Some(auth) = authorized(&req, admin, peer) else {
        let mut resp = error(
            StatusCode::UNAUTHORIZED,
            "missing or wrong bearer token (Authorization: Bearer <token from the admin token_env>), or no dashboard session",
        );
        resp.headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return resp;
    };
    let changes_state = !matches!(method, Method::GET | Method::HEAD);
    if auth == Auth::Session
        && changes_state
        && req
            .headers()
            .get(session::CSRF_HEADER)
            .is_none_or(|v| v.as_bytes() != b"1")
    {
        return error(
            StatusCode::FORBIDDEN,
            "a change made with the dashboard's session cookie needs the header X-Weir-Admin: 1",
        );
    }
    if path == "/console" {
        return console_request(req, admin);
    }
    let who = req
        .headers()
        .get(WHO_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let cap = if method == Method::PUT {
        MAX_COMPONENT_BYTES
    } else {
        MAX_OTHER_BODY_BYTES
    };
    let body = match Limited::new(req.into_body(), cap).collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => {
            return error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the body is over {cap} bytes (or was cut off)"),
            )
        }
    };
    let changes = &admin.changes;
    let shared = &changes.shared;
    match (&method, path.as_str()) {
        (&Method::GET, "/metrics") => reply(
            StatusCode::OK,
            crate::metrics::CONTENT_TYPE,
            shared.snapshot().render(),
        ),
        (&Method::GET, "/routes") => json_reply(StatusCode::OK, routes(shared)),
        (&Method::GET, "/fleet") => fleet_view(changes).await,
        (&Method::GET, "/api/overview") => {
            json_reply(StatusCode::OK, dashboard::overview(shared, &admin.history))
        }
        (&Method::POST, "/reload") => {
            let changes = changes.clone();
            match tokio::task::spawn_blocking(move || changes.reload()).await {
                Ok(Ok(report)) => json_reply(StatusCode::OK, report_json(&report)),
                Ok(Err(e)) => error(e.status(), e),
                Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
            }
        }
        _ => route_action(&method, &path, &query, body, changes, who).await,
    }
}

/// `GET /fleet`: each fleet route's desired version and what every live
/// node serves (`weir routes --cluster`); 409 without `[cluster] redis`,
/// 503 when its Redis does not answer.
async fn fleet_view(changes: &Changes) -> Response<Full<Bytes>> {
    let Some(fleet) = changes.shared.change.fleet.get().cloned() else {
        let e = super::fleet::FleetError::NotClustered;
        return error(e.status(), e);
    };
    match tokio::task::spawn_blocking(move || fleet.view()).await {
        Ok(Ok(view)) => json_reply(StatusCode::OK, view),
        Ok(Err(e)) => error(StatusCode::SERVICE_UNAVAILABLE, e),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

/// `GET /console?path=/echo` upgraded to a WebSocket: the bridge to that
/// route ([`console`]). The page must be the dashboard's own origin.
fn console_request(mut req: Request<Incoming>, admin: &Arc<Admin>) -> Response<Full<Bytes>> {
    use weir_ws::handshake;
    let target = req
        .uri()
        .query()
        .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("path=")))
        .and_then(percent_decode);
    if let Some(pattern) = target.as_deref().filter(|t| t.contains(['{', '}'])) {
        // A route's pattern pasted as is would open a room named "{room}".
        return error(
            StatusCode::BAD_REQUEST,
            format!("{pattern} is a route pattern; fill in its parameters (e.g. /rooms/{{room}} as /rooms/lobby)"),
        );
    }
    let Some(target) = target.filter(|t| console::valid_target(t)) else {
        return error(
            StatusCode::BAD_REQUEST,
            "open /console?path=<a public route's path, percent-encoded>",
        );
    };
    let own_origin = weir_config::origin::Policy {
        origins: &[],
        require_origin: false,
        trusted_proxies: &[],
    };
    let origin_req = weir_config::origin::Request {
        headers: req.headers(),
        authority: weir_config::hosts::request_authority(&req),
        peer: std::net::Ipv4Addr::UNSPECIFIED.into(),
        tls: admin.secure,
    };
    if weir_config::origin::check(&own_origin, &origin_req).is_err() {
        return error(
            StatusCode::FORBIDDEN,
            "the console opens only from the dashboard's own origin",
        );
    }
    let accept = match handshake::check_request(req.method(), req.version(), req.headers()) {
        Ok(accept) => accept,
        Err(e) => return error(e.status(), e),
    };
    let upgrade = hyper::upgrade::on(&mut req);
    let public = admin.public;
    tokio::spawn(async move {
        if let Ok(upgraded) = upgrade.await {
            console::run(upgraded, public, target).await;
        }
    });
    let mut resp = Response::new(Full::new(Bytes::new()));
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = resp.headers_mut();
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(
        header::SEC_WEBSOCKET_ACCEPT,
        HeaderValue::from_str(&accept).expect("base64 is a valid header value"),
    );
    resp
}
