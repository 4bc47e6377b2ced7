//! Verifying a signed HTTP API request (Pusher HTTP API reference,
//! "Authentication"), as pusher-http-node signs it (`lib/requests.js`
//! `createSignedQueryString`): the query gets `auth_key`, `auth_timestamp`
//! (Unix seconds), `auth_version=1.0` and, with a body, `body_md5`; then
//! `auth_signature = hex(HMAC-SHA256(secret, "METHOD\nPATH\nQUERY"))` where
//! QUERY is every other parameter as `key=value`, keys lowercased, sorted by
//! key, joined with `&`, values *not* URL-escaped. PATH is the full request
//! path, `/apps/{id}/events` (any prefix included), as the library had it
//! before its HTTP client escaped it (see `verify_request`). Query values are
//! decoded form-style, `+` as a space; pusher-http-node sends a `+` unescaped,
//! so a value with a literal `+` would not verify (no API parameter has one:
//! channel names and `info` attributes cannot contain it).

use crate::auth::AppKey;
use crate::sign::{md5_hex, verify_hmac_sha256_hex};

/// How far `auth_timestamp` may be from the server's clock, either way:
/// Pusher's 600 s, enough for clock skew, short enough that a captured
/// request cannot be replayed for long.
pub const DEFAULT_TIMESTAMP_WINDOW_SECS: u64 = 600;

/// The only `auth_version` any library sends.
pub const AUTH_VERSION: &str = "1.0";

/// Why a request's signature is refused. [`RequestAuthError::status`] is the
/// HTTP status to answer with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RequestAuthError {
    #[error("query string is not valid percent-encoded UTF-8")]
    QueryMalformed,
    #[error("query parameter given twice")]
    DuplicateParameter,
    #[error("auth_key is missing")]
    AuthKeyMissing,
    #[error("auth_key names another app")]
    AuthKeyMismatch,
    #[error("auth_timestamp is missing or not an integer")]
    TimestampMalformed,
    #[error("auth_timestamp is outside the allowed window")]
    TimestampOutsideWindow,
    #[error("auth_version is missing or not 1.0")]
    AuthVersionUnsupported,
    #[error("body_md5 is missing for a request with a body")]
    BodyMd5Missing,
    #[error("body_md5 does not match the body")]
    BodyMd5Mismatch,
    #[error("auth_signature is missing")]
    SignatureMissing,
    #[error("invalid signature")]
    SignatureMismatch,
}

impl RequestAuthError {
    /// 400 for a request that is malformed, 401 for one that fails
    /// authentication (HTTP API reference, "General").
    pub fn status(self) -> u16 {
        match self {
            RequestAuthError::QueryMalformed | RequestAuthError::DuplicateParameter => 400,
            _ => 401,
        }
    }
}

/// A request as it arrived: `query` is the raw query string without `?`.
#[derive(Debug, Clone, Copy)]
pub struct SignedRequest<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub query: &'a str,
    pub body: &'a [u8],
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Percent-decodes a query component, `+` as a space (form encoding: what
/// PHP's `http_build_query` and Ruby's libraries produce for a space; Node's
/// URL encoder sends `%20`, which decodes the same).
fn decode(component: &str) -> Result<String, RequestAuthError> {
    let bytes = component.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hi = bytes.get(i + 1).copied().and_then(hex_value);
                let lo = bytes.get(i + 2).copied().and_then(hex_value);
                let (Some(hi), Some(lo)) = (hi, lo) else {
                    return Err(RequestAuthError::QueryMalformed);
                };
                out.push(hi << 4 | lo);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| RequestAuthError::QueryMalformed)
}

/// The query's parameters, decoded, keys lowercased, sorted by key.
pub fn query_params(query: &str) -> Result<Vec<(String, String)>, RequestAuthError> {
    let mut params = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        params.push((decode(k)?.to_ascii_lowercase(), decode(v)?));
    }
    params.sort_by(|a, b| a.0.cmp(&b.0));
    if params.windows(2).any(|w| w[0].0 == w[1].0) {
        return Err(RequestAuthError::DuplicateParameter);
    }
    Ok(params)
}

fn param<'p>(params: &'p [(String, String)], key: &str) -> Option<&'p str> {
    params
        .binary_search_by(|(k, _)| k.as_str().cmp(key))
        .ok()
        .map(|i| params[i].1.as_str())
}

/// The string `auth_signature` signs: `METHOD\nPATH\nk=v&k=v` over every
/// parameter but `auth_signature`, in the order `query_params` sorted them.
pub fn string_to_sign(method: &str, path: &str, params: &[(String, String)]) -> String {
    let mut s = String::with_capacity(
        method.len()
            + path.len()
            + 2
            + params
                .iter()
                .map(|(k, v)| k.len() + v.len() + 2)
                .sum::<usize>(),
    );
    s.push_str(&method.to_ascii_uppercase());
    s.push('\n');
    s.push_str(path);
    s.push('\n');
    let mut first = true;
    for (k, v) in params.iter().filter(|(k, _)| k != "auth_signature") {
        if !first {
            s.push('&');
        }
        first = false;
        s.push_str(k);
        s.push('=');
        s.push_str(v);
    }
    s
}

/// Checks a request's signature, key, version, timestamp (within
/// `window_secs` of `now_unix_secs`) and, for a non-empty body, `body_md5`.
/// The checks that need no secret come first; the signature last.
pub fn verify_request(
    app: &AppKey<'_>,
    request: &SignedRequest<'_>,
    now_unix_secs: u64,
    window_secs: u64,
) -> Result<(), RequestAuthError> {
    let params = query_params(request.query)?;
    match param(&params, "auth_key") {
        None => return Err(RequestAuthError::AuthKeyMissing),
        Some(key) if key != app.key => return Err(RequestAuthError::AuthKeyMismatch),
        Some(_) => {}
    }
    if param(&params, "auth_version") != Some(AUTH_VERSION) {
        return Err(RequestAuthError::AuthVersionUnsupported);
    }
    let timestamp: u64 = param(&params, "auth_timestamp")
        .and_then(|t| t.parse().ok())
        .ok_or(RequestAuthError::TimestampMalformed)?;
    if timestamp.abs_diff(now_unix_secs) > window_secs {
        return Err(RequestAuthError::TimestampOutsideWindow);
    }
    // pusher-http-node adds body_md5 only when there is a body; when it is
    // sent anyway it must match, whatever the body.
    match param(&params, "body_md5") {
        None if !request.body.is_empty() => return Err(RequestAuthError::BodyMd5Missing),
        None => {}
        Some(md5) if md5 != md5_hex(request.body) => return Err(RequestAuthError::BodyMd5Mismatch),
        Some(_) => {}
    }
    let signature = param(&params, "auth_signature").ok_or(RequestAuthError::SignatureMissing)?;
    let signed = string_to_sign(request.method, request.path, &params);
    if verify_hmac_sha256_hex(app.secret, &[signed.as_bytes()], signature) {
        return Ok(());
    }
    // pusher-http-node signs the path before its HTTP client percent-encodes
    // it (`/users/user one/..` goes out as `/users/user%20one/..`), so an
    // escaped path is tried again decoded. Both forms are signed with the
    // secret, so accepting either lets no one forge anything.
    if request.path.contains('%') {
        if let Ok(decoded) = decode_path(request.path) {
            let signed = string_to_sign(request.method, &decoded, &params);
            if verify_hmac_sha256_hex(app.secret, &[signed.as_bytes()], signature) {
                return Ok(());
            }
        }
    }
    Err(RequestAuthError::SignatureMismatch)
}

/// Percent-decodes a path (`+` stays a `+` there, unlike in a query).
fn decode_path(path: &str) -> Result<String, RequestAuthError> {
    // Reuse the query decoder on a copy with `+` escaped.
    decode(&path.replace('+', "%2B"))
}

/// The query string pusher-http-node would send for this request (for tests
/// and for weir's own clients): the auth parameters, then `params`, signed.
pub fn sign_request(
    app: &AppKey<'_>,
    method: &str,
    path: &str,
    params: &[(&str, &str)],
    body: &[u8],
    timestamp: u64,
) -> String {
    let mut all: Vec<(String, String)> = vec![
        ("auth_key".into(), app.key.into()),
        ("auth_timestamp".into(), timestamp.to_string()),
        ("auth_version".into(), AUTH_VERSION.into()),
    ];
    if !body.is_empty() {
        all.push(("body_md5".into(), md5_hex(body)));
    }
    all.extend(
        params
            .iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), (*v).to_owned())),
    );
    all.sort_by(|a, b| a.0.cmp(&b.0));
    let signed = string_to_sign(method, path, &all);
    let signature = crate::sign::hmac_sha256_hex(app.secret, &[signed.as_bytes()]);
    let mut query = signed.splitn(3, '\n').nth(2).unwrap_or_default().to_owned();
    query.push_str("&auth_signature=");
    query.push_str(&signature);
    query
}

#[cfg(test)]
mod tests {
    use super::*;

    const APP: AppKey<'static> = AppKey {
        key: "278d425bdf160c739803",
        secret: b"7ad3773142a6692b25b8",
    };

    // HTTP API reference, "Worked authentication example": trigger `foo` on
    // `project-3` with {"some":"data"} at timestamp 1353088179.
    #[test]
    fn docs_worked_example() {
        let body = br#"{"name":"foo","channels":["project-3"],"data":"{\"some\":\"data\"}"}"#;
        assert_eq!(md5_hex(body), "ec365a775a4cd0599faeb73354201b6f");
        let query = sign_request(&APP, "POST", "/apps/3/events", &[], body, 1353088179);
        assert_eq!(
            query,
            "auth_key=278d425bdf160c739803&auth_timestamp=1353088179&auth_version=1.0&body_md5=ec365a775a4cd0599faeb73354201b6f\
             &auth_signature=da454824c97ba181a32ccc17a72625ba02771f50b50e1e7430e47a1f3f457e6c"
        );
        let req = SignedRequest {
            method: "POST",
            path: "/apps/3/events",
            query: &query,
            body,
        };
        assert_eq!(
            verify_request(&APP, &req, 1353088179, DEFAULT_TIMESTAMP_WINDOW_SECS),
            Ok(())
        );
    }

    #[test]
    fn each_part_is_checked() {
        use RequestAuthError::*;
        let body = br#"{"a":1}"#;
        let q = sign_request(
            &APP,
            "POST",
            "/apps/1/events",
            &[("info", "user_count,subscription_count")],
            body,
            1000,
        );
        let ok = SignedRequest {
            method: "POST",
            path: "/apps/1/events",
            query: &q,
            body,
        };
        let check = |r: SignedRequest<'_>, now| {
            verify_request(&APP, &r, now, DEFAULT_TIMESTAMP_WINDOW_SECS)
        };
        assert_eq!(check(ok, 1000), Ok(()));
        assert_eq!(
            check(
                SignedRequest {
                    method: "post",
                    ..ok
                },
                1000
            ),
            Ok(())
        );
        assert_eq!(check(ok, 1600), Ok(()));
        assert_eq!(check(ok, 1601), Err(TimestampOutsideWindow));
        assert_eq!(check(ok, 399), Err(TimestampOutsideWindow));
        assert_eq!(
            check(
                SignedRequest {
                    method: "GET",
                    ..ok
                },
                1000
            ),
            Err(SignatureMismatch)
        );
        assert_eq!(
            check(
                SignedRequest {
                    path: "/apps/2/events",
                    ..ok
                },
                1000
            ),
            Err(SignatureMismatch)
        );
        assert_eq!(
            check(
                SignedRequest {
                    body: b"{\"a\":2}",
                    ..ok
                },
                1000
            ),
            Err(BodyMd5Mismatch)
        );
        let extra = format!("{q}&x=1");
        assert_eq!(
            check(
                SignedRequest {
                    query: &extra,
                    ..ok
                },
                1000
            ),
            Err(SignatureMismatch)
        );
        let dup = format!("{q}&info=x");
        assert_eq!(
            check(SignedRequest { query: &dup, ..ok }, 1000),
            Err(DuplicateParameter)
        );
        assert_eq!(
            check(
                SignedRequest {
                    query: "auth_key=%zz",
                    ..ok
                },
                1000
            ),
            Err(QueryMalformed)
        );
        assert_eq!(
            check(SignedRequest { query: "", ..ok }, 1000),
            Err(AuthKeyMissing)
        );
        let other = sign_request(
            &AppKey {
                key: "k2",
                secret: b"s",
            },
            "POST",
            "/apps/1/events",
            &[],
            body,
            1000,
        );
        assert_eq!(
            check(
                SignedRequest {
                    query: &other,
                    ..ok
                },
                1000
            ),
            Err(AuthKeyMismatch)
        );
        let no_md5 = sign_request(&APP, "POST", "/apps/1/events", &[], b"", 1000);
        assert_eq!(
            check(
                SignedRequest {
                    query: &no_md5,
                    ..ok
                },
                1000
            ),
            Err(BodyMd5Missing)
        );
        assert_eq!(
            check(
                SignedRequest {
                    query: &q.replace("auth_version=1.0", "auth_version=2.0"),
                    ..ok
                },
                1000
            ),
            Err(AuthVersionUnsupported)
        );
        assert_eq!(QueryMalformed.status(), 400);
        assert_eq!(SignatureMismatch.status(), 401);
    }

    // HTTP API reference: keys lowercased; values signed unescaped, so an
    // escaped value in the URL verifies against its decoded form.
    #[test]
    fn keys_are_lowercased_and_values_decoded() {
        let q = sign_request(
            &APP,
            "GET",
            "/apps/1/channels",
            &[("filter_by_prefix", "presence-"), ("info", "user_count")],
            b"",
            5,
        );
        let escaped = q
            .replace("user_count", "user%5Fcount")
            .replace("filter_by_prefix", "FILTER_BY_PREFIX");
        let req = SignedRequest {
            method: "GET",
            path: "/apps/1/channels",
            query: &escaped,
            body: b"",
        };
        assert_eq!(verify_request(&APP, &req, 5, 600), Ok(()));
    }
}
