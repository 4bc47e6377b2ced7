//! Who may use the admin API: the bearer token (compared in constant time
//! over SHA-256 digests), or the dashboard's session cookie made by
//! `POST /session`; wrong tokens count against their address ([`sign_in`](super::sign_in)).

use super::{error, session, sign_in, Admin, MAX_OTHER_BODY_BYTES};
use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use std::net::IpAddr;
use std::time::Instant;
use subtle::ConstantTimeEq;
use tracing::info;

/// Compares in constant time (`subtle`), so the token cannot be guessed a
/// byte at a time from response times; both sides are hashed first, so the
/// time does not depend on the lengths either.
pub(super) fn same_token(given: &[u8], token: &[u8]) -> bool {
    use sha2::{Digest, Sha256};
    Sha256::digest(given).ct_eq(&Sha256::digest(token)).into()
}

/// How a request proved it may use the API.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Auth {
    /// `Authorization: Bearer <token>`: a client that holds the token.
    Bearer,
    /// The dashboard's session cookie: a browser, which sends the cookie
    /// by itself, so changes also need [`session::CSRF_HEADER`].
    Session,
}

/// How `req` proved itself, or None. An `Authorization` header that does
/// not carry the token counts as a failed sign-in of `peer`.
pub(super) fn authorized(req: &Request<Incoming>, admin: &Admin, peer: IpAddr) -> Option<Auth> {
    let headers = req.headers();
    if let Some(given) = headers.get(header::AUTHORIZATION) {
        let bearer = given.as_bytes().strip_prefix(b"Bearer ");
        if bearer.is_some_and(|given| same_token(given, admin.token.as_bytes())) {
            return Some(Auth::Bearer);
        }
        admin.sign_ins.failed(peer, Instant::now());
    }
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| session::from_cookie_header(v.as_bytes()))
        .any(|id| admin.sessions.valid(id))
        .then_some(Auth::Session)
}

/// 429 for an address past its failed sign-ins, with when to come back.
pub(super) fn too_many_sign_ins(limited: sign_in::Limited) -> Response<Full<Bytes>> {
    let mut resp = error(
        StatusCode::TOO_MANY_REQUESTS,
        format!(
            "too many wrong tokens from this address (more than {} in {} s); try again in {} s",
            sign_in::MAX_FAILURES_PER_WINDOW,
            sign_in::WINDOW.as_secs(),
            limited.retry_after_secs
        ),
    );
    resp.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from(limited.retry_after_secs),
    );
    resp
}

/// `POST /session` with the token as the body: a session cookie (204), or
/// 401. `DELETE /session`: the session ends.
pub(super) async fn session_request(
    req: Request<Incoming>,
    admin: &Admin,
    peer: IpAddr,
) -> Response<Full<Bytes>> {
    let method = req.method().clone();
    let cookie_ids: Vec<String> = req
        .headers()
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| session::from_cookie_header(v.as_bytes()).map(str::to_string))
        .collect();
    let body = match Limited::new(req.into_body(), MAX_OTHER_BODY_BYTES)
        .collect()
        .await
    {
        Ok(body) => body.to_bytes(),
        Err(_) => return error(StatusCode::PAYLOAD_TOO_LARGE, "the body is too large"),
    };
    let mut resp = Response::new(Full::new(Bytes::new()));
    *resp.status_mut() = StatusCode::NO_CONTENT;
    match method {
        Method::POST => {
            let given = body.trim_ascii();
            if !same_token(given, admin.token.as_bytes()) {
                // Logged by the sign-in summary, not once per attempt.
                admin.sign_ins.failed(peer, Instant::now());
                return error(StatusCode::UNAUTHORIZED, "wrong token");
            }
            let Some(id) = admin.sessions.open() else {
                return error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "no randomness for a session id",
                );
            };
            info!("dashboard session opened");
            let cookie = HeaderValue::from_str(&session::set_cookie(&id, admin.secure))
                .expect("hex ids make a valid header");
            resp.headers_mut().insert(header::SET_COOKIE, cookie);
        }
        Method::DELETE => {
            for id in &cookie_ids {
                admin.sessions.close(id);
            }
            let cookie =
                HeaderValue::from_str(&session::clear_cookie(admin.secure)).expect("valid header");
            resp.headers_mut().insert(header::SET_COOKIE, cookie);
        }
        _ => {
            return error(
                StatusCode::METHOD_NOT_ALLOWED,
                "POST the token, or DELETE to log out",
            )
        }
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_whole() {
        assert!(same_token(b"0123456789abcdef", b"0123456789abcdef"));
        assert!(!same_token(b"0123456789abcdeF", b"0123456789abcdef"));
        assert!(!same_token(b"0123456789abcde", b"0123456789abcdef"));
    }
}
