//! An outbound request as a guest asked for it (`http-request`'s head and
//! body) and as it will be sent: built, then checked against the route's
//! `allow_outbound` the way its server will read it (path normalised by
//! [`url_check`](weir_config::url_check), matched on segment boundaries, no
//! user information, no Host of the guest's choosing) and rewritten to
//! exactly what was checked.

use bytes::Bytes;
use http_body_util::Full;
use weir_abi::io::split_request_head;
use weir_abi::HttpErrorReason;

use weir_config::url_check::{normalize_path, path_within};
use weir_config::OutboundPrefix;

/// A request from a command's head and body, or why it cannot be sent.
pub(crate) fn build_request(head: &str, body: &[u8]) -> Result<http::Request<Full<Bytes>>, String> {
    let (method, url, headers) =
        split_request_head(head).ok_or("the request head has no `METHOD URL` line")?;
    let method = http::Method::from_bytes(method.as_bytes())
        .map_err(|_| format!("{method:?} is not an HTTP method"))?;
    let uri: http::Uri = url
        .parse()
        .map_err(|e| format!("{url:?} is not a URL: {e}"))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        _ => {
            return Err(format!(
                "{url:?}: the URL must start with http:// or https://"
            ))
        }
    }
    let mut request = http::Request::builder().method(method).uri(uri);
    for (name, value) in headers {
        let name = http::HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("{name:?} is not a header name"))?;
        let value = http::HeaderValue::from_str(value)
            .map_err(|_| format!("the value of {name} is not a header value"))?;
        request = request.header(name, value);
    }
    request
        .body(Full::new(Bytes::copy_from_slice(body)))
        .map_err(|e| format!("invalid request: {e}"))
}

/// `request` as it will be sent, or why it is refused (`Refused`, counted
/// with the route's errors). Its path is normalised as its server will
/// read it (`url_check::normalize_path`: dot segments resolved, encoded
/// slashes, backslashes, control characters and bad escapes refused),
/// matched against `allow`, and the URI rewritten to exactly what was
/// checked. The guest does not choose the Host header: one it sets must
/// be the URL's authority (and is then left to hyper, which writes Host
/// from the URI), so it cannot reach another virtual host on an allowed
/// address.
pub(crate) fn check_request(
    allow: &[OutboundPrefix],
    mut request: http::Request<Full<Bytes>>,
) -> Result<http::Request<Full<Bytes>>, (HttpErrorReason, String)> {
    let refused = |why: String| (HttpErrorReason::Refused, why);
    let uri = request.uri().clone();
    let (Some(scheme), Some(authority)) = (uri.scheme(), uri.authority()) else {
        return Err(refused(format!("{uri}: no scheme and host")));
    };
    if authority.as_str().contains('@') {
        return Err(refused(format!(
            "{uri}: a URL with user information (user@host) is not sent"
        )));
    }
    let path = normalize_path(uri.path()).map_err(|e| refused(format!("{uri}: {e}")))?;
    if !allowed(allow, &uri, &path) {
        return Err(refused(format!(
            "{uri} (read as {path}) is not in the route's allow_outbound"
        )));
    }
    let hosts = request.headers().get_all(http::header::HOST);
    if hosts.iter().count() > 1
        || hosts.iter().any(|h| {
            !h.as_bytes()
                .eq_ignore_ascii_case(authority.as_str().as_bytes())
        })
    {
        return Err(refused(format!(
            "the Host header is not the URL's authority ({authority}); leave Host out, \
             the gateway writes it from the URL"
        )));
    }
    request.headers_mut().remove(http::header::HOST);
    let path_and_query = match uri.query() {
        Some(query) => format!("{path}?{query}"),
        None => path,
    };
    *request.uri_mut() = http::Uri::builder()
        .scheme(scheme.clone())
        .authority(authority.clone())
        .path_and_query(path_and_query)
        .build()
        .map_err(|e| refused(format!("{uri}: {e}")))?;
    Ok(request)
}

/// Whether `uri`, its path normalised to `path`, lies under one of the
/// `allow` prefixes (scheme, host and port equal, path under the prefix on
/// a segment boundary).
fn allowed(allow: &[OutboundPrefix], uri: &http::Uri, path: &str) -> bool {
    let (Some(scheme), Some(host)) = (uri.scheme_str(), uri.host()) else {
        return false;
    };
    let port = uri
        .port_u16()
        .unwrap_or(if scheme == "https" { 443 } else { 80 });
    allow.iter().any(|p| {
        p.scheme == scheme
            && p.host.eq_ignore_ascii_case(host)
            && p.port == port
            && path_within(&p.path, path)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefix(host: &str, port: u16, path: &str) -> OutboundPrefix {
        OutboundPrefix {
            scheme: "http".into(),
            host: host.into(),
            port,
            path: path.into(),
        }
    }

    fn get(url: &str, headers: &str) -> http::Request<Full<Bytes>> {
        build_request(&format!("GET {url}{headers}"), b"").unwrap()
    }

    #[test]
    fn allow_outbound_matches_scheme_host_port_and_path_prefix() {
        let allow = [
            prefix("127.0.0.1", 8080, "/"),
            prefix("api.internal", 80, "/v1/"),
        ];
        let ok = |u: &str| check_request(&allow, get(u, "")).is_ok();
        assert!(ok("http://127.0.0.1:8080/anything?q=1"));
        assert!(ok("http://API.internal/v1/users"));
        assert!(!ok("http://127.0.0.1:8081/"), "another port");
        assert!(!ok("http://127.0.0.2:8080/"), "another host");
        assert!(!ok("http://api.internal/v2/users"), "another path");
        assert!(!ok("http://api.internal:8080/v1/"), "another port");
        assert!(!ok("https://127.0.0.1:8080/"), "another scheme");
        assert!(
            check_request(&[], get("http://127.0.0.1/", "")).is_err(),
            "deny by default"
        );
    }

    /// Issue 35: the path a backend resolves is the one matched, and the
    /// one sent.
    #[test]
    fn urls_are_matched_and_sent_as_normalised() {
        let allow = [prefix("b", 80, "/api/"), prefix("b", 80, "/v1")];
        let sent = |u: &str| {
            check_request(&allow, get(u, ""))
                .map(|r| r.uri().to_string())
                .map_err(|(reason, why)| {
                    assert_eq!(reason, HttpErrorReason::Refused);
                    why
                })
        };
        assert_eq!(
            sent("http://b/api/./x/../y?q=1").unwrap(),
            "http://b/api/y?q=1"
        );
        assert_eq!(sent("http://b/v1").unwrap(), "http://b/v1");
        assert_eq!(sent("http://b/v1/%2e/u").unwrap(), "http://b/v1/u");
        for bad in [
            "http://b/api/../secret",
            "http://b/api/%2e%2e/secret",
            "http://b/api/%2E%2E/secret",
            "http://b/api/..%2fsecret",
            "http://b/api%2f..",
            "http://b/api/..\\secret",
            "http://b/v1-admin",
            "http://b/v1/../../x",
            "http://u@b/api/x",
        ] {
            assert!(sent(bad).is_err(), "{bad}");
        }
    }

    /// Issue 35: a guest cannot pick another virtual host on an allowed
    /// address; a Host equal to the URL's authority is left to hyper.
    #[test]
    fn the_guest_does_not_choose_the_host_header() {
        let allow = [prefix("127.0.0.1", 8080, "/")];
        let url = "http://127.0.0.1:8080/x";
        let (reason, why) = check_request(&allow, get(url, "\nhost: admin.internal")).unwrap_err();
        assert_eq!(reason, HttpErrorReason::Refused);
        assert!(why.contains("Host"), "{why}");
        assert!(check_request(&allow, get(url, "\nhost: a\nhost: 127.0.0.1:8080")).is_err());
        let same = check_request(&allow, get(url, "\nHost: 127.0.0.1:8080")).unwrap();
        assert!(same.headers().get(http::header::HOST).is_none());
    }

    #[test]
    fn a_request_head_builds_or_says_why_not() {
        let r = build_request("POST http://a:1/x\ncontent-type: text/plain", b"hi").unwrap();
        assert_eq!(r.method(), http::Method::POST);
        assert_eq!(r.headers()["content-type"], "text/plain");
        for (head, why) in [
            ("GET", "METHOD URL"),
            ("G@T http://a/", "method"),
            ("GET ftp://a/", "http:// or https://"),
            ("GET http://a/\nbad name: x", "header name"),
        ] {
            let e = build_request(head, b"").unwrap_err();
            assert!(e.contains(why), "{head}: {e}");
        }
    }
}
