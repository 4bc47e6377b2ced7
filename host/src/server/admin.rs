//! The admin API, on a listener of its own (`[admin] listen`), never on the
//! public one: `GET /routes`, `PUT /routes/{path}/component`,
//! `POST /routes/{path}/rollback`, `POST /reload`, `GET /metrics`. Every
//! request carries `Authorization: Bearer <token>` (the token from the
//! environment variable `[admin] token_env`) or gets 401. One thread with
//! its own runtime: a deploy compiles there, never on a worker.

use super::reload::{ChangeError, Changes, ReloadReport};
use super::{Shared, Shutdown};
use crate::guest::Program;
use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::json;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};
use tracing::{info, warn};

/// Largest component a deploy may upload: guests are a few hundred KiB to
/// a few MiB; this leaves room for big toolchains (a JS engine) and stops
/// an upload from filling the gateway's memory.
pub const MAX_COMPONENT_BYTES: usize = 64 << 20;
/// Bodies of other requests are empty; anything sent is capped at this.
const MAX_OTHER_BODY_BYTES: usize = 4096;
/// Time a client has to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Shortest token accepted: a bearer token is a secret, not a password
/// someone types.
pub const MIN_TOKEN_BYTES: usize = 16;

/// Runs the admin listener until `shutdown` (on the calling thread).
pub(super) fn run(
    listener: std::net::TcpListener,
    changes: Changes,
    token: Arc<str>,
    shutdown: Shutdown,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            warn!(error = %e, "admin runtime failed to start");
            return;
        }
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
            info!(%addr, "admin API listening");
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
                    let (changes, token) = (changes.clone(), token.clone());
                    tokio::spawn(async move {
                        let service = service_fn(move |req| {
                            let (changes, token) = (changes.clone(), token.clone());
                            async move { Ok::<_, Infallible>(answer(req, &changes, &token).await) }
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

/// Compares in time that depends only on the lengths, so the token cannot
/// be guessed a byte at a time from response times.
fn same_token(given: &[u8], token: &[u8]) -> bool {
    if given.len() != token.len() {
        return false;
    }
    let diff = given
        .iter()
        .zip(token)
        .fold(0u8, |acc, (a, b)| acc | (a ^ b));
    std::hint::black_box(diff) == 0
}

fn authorized(req: &Request<Incoming>, token: &str) -> bool {
    req.headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
        .is_some_and(|given| same_token(given, token.as_bytes()))
}

async fn answer(req: Request<Incoming>, changes: &Changes, token: &str) -> Response<Full<Bytes>> {
    if !authorized(&req, token) {
        let mut resp = error(
            StatusCode::UNAUTHORIZED,
            "missing or wrong bearer token (Authorization: Bearer <token from the admin token_env>)",
        );
        resp.headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return resp;
    }
    let method = req.method().clone();
    let path = req.uri().path().to_string();
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
    let shared = &changes.shared;
    match (&method, path.as_str()) {
        (&Method::GET, "/metrics") => reply(
            StatusCode::OK,
            crate::metrics::CONTENT_TYPE,
            shared.snapshot().render(),
        ),
        (&Method::GET, "/routes") => json_reply(StatusCode::OK, routes(shared)),
        (&Method::POST, "/reload") => {
            let changes = changes.clone();
            match tokio::task::spawn_blocking(move || changes.reload()).await {
                Ok(Ok(report)) => json_reply(StatusCode::OK, report_json(&report)),
                Ok(Err(e)) => error(e.status(), e),
                Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
            }
        }
        _ => route_action(&method, &path, body, changes).await,
    }
}

/// `PUT /routes/{path}/component` and `POST /routes/{path}/rollback`.
async fn route_action(
    method: &Method,
    path: &str,
    body: Bytes,
    changes: &Changes,
) -> Response<Full<Bytes>> {
    let not_found = || {
        error(StatusCode::NOT_FOUND, "no such admin endpoint; see GET /routes, PUT /routes/{path}/component, POST /routes/{path}/rollback, POST /reload, GET /metrics")
    };
    let Some(rest) = path.strip_prefix("/routes/") else {
        return not_found();
    };
    let (encoded, action) = match rest.rsplit_once('/') {
        Some(split) => split,
        None => return not_found(),
    };
    let Some(route) = percent_decode(encoded) else {
        return error(
            StatusCode::BAD_REQUEST,
            "the route path is not valid percent-encoded UTF-8",
        );
    };
    let changes = changes.clone();
    let done: Result<Result<Arc<Program>, ChangeError>, _> = match (method, action) {
        (&Method::PUT, "component") => {
            tokio::task::spawn_blocking(move || changes.deploy(&route, &body)).await
        }
        (&Method::POST, "rollback") => {
            tokio::task::spawn_blocking(move || changes.rollback(&route)).await
        }
        _ => return not_found(),
    };
    match done {
        Ok(Ok(program)) => json_reply(
            StatusCode::OK,
            json!({ "route": program.route(), "version": program.version(), "hash": program.hash() }),
        ),
        Ok(Err(e)) => error(e.status(), e),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

/// `%2Fjson` → `/json`; None for a bad escape or bytes that are not UTF-8.
pub fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// `GET /routes`: every route, with its guest versions.
fn routes(shared: &Shared) -> serde_json::Value {
    let secs = |t: std::time::SystemTime| t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let table = shared.routes.load();
    let list: Vec<_> = table
        .live_routes()
        .map(|(_, r)| {
            let c = r.stats.sum();
            let mut entry = json!({
                "path": r.path,
                "behaviour": r.behaviour,
                "connections": c.accepted.saturating_sub(c.closed),
            });
            if let Some(guest) = &r.guest {
                let (current, kept) = guest.versions().list();
                let p = &current.program;
                entry["version"] = json!(p.version());
                entry["hash"] = json!(p.hash());
                entry["deployed_at"] = json!(secs(current.since));
                entry["source"] = json!(current.source);
                entry["kept_versions"] = json!(kept
                    .iter()
                    .map(|d| json!({ "version": d.program.version(), "hash": d.program.hash() }))
                    .collect::<Vec<_>>());
            }
            entry
        })
        .collect();
    json!({ "routes": list })
}

fn report_json(report: &ReloadReport) -> serde_json::Value {
    json!({
        "added": report.added,
        "removed": report.removed,
        "deployed": report.deployed.iter().map(|(route, version)| json!({ "route": route, "version": version })).collect::<Vec<_>>(),
        "limits_changed": report.limits,
        "not_applied": report.not_applied,
        "certificate": report.certificate,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_whole_and_paths_decode() {
        assert!(same_token(b"0123456789abcdef", b"0123456789abcdef"));
        assert!(!same_token(b"0123456789abcdeF", b"0123456789abcdef"));
        assert!(!same_token(b"0123456789abcde", b"0123456789abcdef"));
        assert_eq!(percent_decode("%2Fjson").as_deref(), Some("/json"));
        assert_eq!(
            percent_decode("%2Fchat%2F%7Broom%7D").as_deref(),
            Some("/chat/{room}")
        );
        assert_eq!(percent_decode("%2"), None);
        assert_eq!(percent_decode("%ff"), None);
    }
}
