//! Which browser pages may open a route (cross-site WebSocket hijacking:
//! browsers send cookies on upgrades and the same-origin policy does not
//! apply to WebSockets). Checked once per upgrade, before anything else
//! about it (a guest's upgrade hook included).
//!
//! - No `Origin` (not a browser): allowed unless `require_origin = true`.
//! - The default is the same origin: scheme, host and port equal to the
//!   request's own: the scheme is the listener's (`http` plain, `https`
//!   with TLS), the host and port those the request names (`Host`, or over
//!   HTTP/2 `:authority`; a missing port is the scheme's default, 80 for
//!   `http`, 443 for `https`). `X-Forwarded-Host` / `Forwarded: host=`
//!   count instead only from `[server] trusted_proxies`; with them the
//!   scheme is `X-Forwarded-Proto` / `Forwarded: proto=` when sent, and is
//!   not compared when not (the proxy may have terminated TLS; a host
//!   without a port then has the listener's default port).
//! - `origins` lists allowed origins exactly (scheme, host, port);
//!   `https://*.example.com` matches one or more labels under example.com,
//!   not example.com itself; `"*"` allows every origin; `Origin: null`
//!   only when `"null"` is listed. No substring or prefix matching.

use http::HeaderMap;
use std::net::IpAddr;

/// An origin: `scheme://host[:port]`, lower case, the port made explicit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub https: bool,
    pub host: String,
    pub port: u16,
}

fn default_port(https: bool) -> u16 {
    if https {
        443
    } else {
        80
    }
}

/// `host[:port]` (IPv6 in brackets) into its host and port, if well formed.
fn split_authority(authority: &str) -> Option<(&str, Option<u16>)> {
    if authority.is_empty() || authority.contains(['/', '?', '#', ' ', '@']) {
        return None;
    }
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let end = rest.find(']')?;
        let after = &rest[end + 1..];
        let host = &authority[..end + 2];
        match after {
            "" => (host, None),
            _ => (host, Some(after.strip_prefix(':')?)),
        }
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return None;
    }
    let port = match port {
        Some(p) => Some(p.parse::<u16>().ok().filter(|p| *p != 0)?),
        None => None,
    };
    Some((host, port))
}

impl Origin {
    /// An `Origin` header's value or an allow-list entry; None when it is
    /// not `http(s)://host[:port]`.
    pub fn parse(text: &str) -> Option<Origin> {
        let text = text.trim().to_ascii_lowercase();
        let (https, authority) = if let Some(a) = text.strip_prefix("https://") {
            (true, a)
        } else {
            (false, text.strip_prefix("http://")?)
        };
        let (host, port) = split_authority(authority)?;
        Some(Origin {
            https,
            host: host.to_string(),
            port: port.unwrap_or(default_port(https)),
        })
    }
}

/// One entry of an allow-list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rule {
    Any,
    Null,
    Exact(Origin),
    /// `scheme://*.suffix[:port]`: hosts ending in `.suffix`.
    Subdomains {
        https: bool,
        suffix: String,
        port: u16,
    },
}

impl Rule {
    /// An `origins` entry, or why it is not one.
    pub fn parse(text: &str) -> Result<Rule, &'static str> {
        match text {
            "*" => return Ok(Rule::Any),
            "null" => return Ok(Rule::Null),
            _ => {}
        }
        let Some(origin) = Origin::parse(text) else {
            return Err("not an origin (scheme://host[:port], no path)");
        };
        if let Some(suffix) = origin.host.strip_prefix("*.") {
            if suffix.is_empty() || suffix.contains('*') || !suffix.contains('.') {
                return Err("a wildcard covers subdomains of a domain with a dot, e.g. https://*.example.com");
            }
            return Ok(Rule::Subdomains {
                https: origin.https,
                suffix: format!(".{suffix}"),
                port: origin.port,
            });
        }
        if origin.host.contains('*') {
            return Err("a wildcard may only be the first label: https://*.example.com");
        }
        Ok(Rule::Exact(origin))
    }

    fn allows(&self, origin: &Origin) -> bool {
        match self {
            Rule::Any => true,
            Rule::Null => false,
            Rule::Exact(o) => o == origin,
            Rule::Subdomains {
                https,
                suffix,
                port,
            } => {
                *https == origin.https
                    && *port == origin.port
                    && origin.host.len() > suffix.len()
                    && origin.host.ends_with(suffix.as_str())
            }
        }
    }
}

/// Why an upgrade's origin was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// No `Origin` on a route with `require_origin`.
    Missing,
    /// This origin (the header's text, attacker-chosen) is not allowed.
    NotAllowed(String),
}

/// What the check needs besides the headers.
pub struct Request<'a> {
    pub headers: &'a HeaderMap,
    /// The authority the request names (`:authority` over HTTP/2, else
    /// `Host`; see [`crate::hosts::request_authority`]).
    pub authority: Option<&'a str>,
    /// The TCP peer, to decide whether its forwarded host counts.
    pub peer: IpAddr,
    /// Whether the listener is TLS (a `Host` without a port means 443).
    pub tls: bool,
}

/// The allow-list of a route, and the `[server]` settings the check uses.
pub struct Policy<'a> {
    pub origins: &'a [String],
    pub require_origin: bool,
    pub trusted_proxies: &'a [Cidr],
}

/// Checks `req` against `policy`.
pub fn check(policy: &Policy<'_>, req: &Request<'_>) -> Result<(), Refused> {
    let Some(value) = req.headers.get(http::header::ORIGIN) else {
        return if policy.require_origin {
            Err(Refused::Missing)
        } else {
            Ok(())
        };
    };
    let text = String::from_utf8_lossy(value.as_bytes());
    let rules = || policy.origins.iter().filter_map(|r| Rule::parse(r).ok());
    if text.trim() == "null" {
        return if rules().any(|r| r == Rule::Null || r == Rule::Any) {
            Ok(())
        } else {
            Err(Refused::NotAllowed(text.into_owned()))
        };
    }
    let Some(origin) = Origin::parse(&text) else {
        return if rules().any(|r| r == Rule::Any) {
            Ok(())
        } else {
            Err(Refused::NotAllowed(text.into_owned()))
        };
    };
    if rules().any(|r| r.allows(&origin)) || same_origin(&origin, policy, req) {
        return Ok(());
    }
    Err(Refused::NotAllowed(text.into_owned()))
}

/// Whether `origin` is the request's own scheme, host and port.
fn same_origin(origin: &Origin, policy: &Policy<'_>, req: &Request<'_>) -> bool {
    let trusted = policy.trusted_proxies.iter().any(|c| c.contains(req.peer));
    let forwarded = trusted.then(|| forwarded_host(req.headers)).flatten();
    let (host, scheme) = match forwarded {
        // The proxy's scheme when it says; not compared when it does not.
        Some(h) => (h, forwarded_proto(req.headers)),
        None => match req.authority {
            Some(h) => (h.trim().to_ascii_lowercase(), Some(req.tls)),
            None => return false,
        },
    };
    let Some((host, port)) = split_authority(&host) else {
        return false;
    };
    // A host without a port has its scheme's default (the listener's when
    // a proxy names no scheme).
    let port = port.unwrap_or(default_port(scheme.unwrap_or(req.tls)));
    scheme.is_none_or(|https| https == origin.https) && host == origin.host && port == origin.port
}

/// Whether a trusted proxy says the client spoke https (`X-Forwarded-Proto`,
/// else `Forwarded: proto=`); None when it does not say.
fn forwarded_proto(headers: &HeaderMap) -> Option<bool> {
    let proto = match headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
    {
        Some(v) => v.split(',').next()?.trim().to_ascii_lowercase(),
        None => {
            let forwarded = headers.get("forwarded")?.to_str().ok()?;
            let first = forwarded.split(',').next()?;
            first.split(';').find_map(|pair| {
                let (name, value) = pair.trim().split_once('=')?;
                name.eq_ignore_ascii_case("proto")
                    .then(|| value.trim_matches('"').to_ascii_lowercase())
            })?
        }
    };
    match proto.as_str() {
        "https" | "wss" => Some(true),
        "http" | "ws" => Some(false),
        _ => None,
    }
}

/// The first `X-Forwarded-Host`, else the first `Forwarded: host=`.
fn forwarded_host(headers: &HeaderMap) -> Option<String> {
    if let Some(v) = headers
        .get("x-forwarded-host")
        .and_then(|v| v.to_str().ok())
    {
        return v.split(',').next().map(|h| h.trim().to_ascii_lowercase());
    }
    let forwarded = headers.get("forwarded")?.to_str().ok()?;
    let first = forwarded.split(',').next()?;
    first.split(';').find_map(|pair| {
        let (name, value) = pair.trim().split_once('=')?;
        name.eq_ignore_ascii_case("host")
            .then(|| value.trim_matches('"').to_ascii_lowercase())
    })
}

/// An address range of trusted proxies: `10.0.0.0/8`, `::1`, `127.0.0.1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    pub fn parse(text: &str) -> Option<Cidr> {
        let (addr, prefix) = match text.split_once('/') {
            Some((a, p)) => (a.parse::<IpAddr>().ok()?, Some(p.parse::<u8>().ok()?)),
            None => (text.parse::<IpAddr>().ok()?, None),
        };
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = prefix.unwrap_or(max);
        (prefix <= max).then_some(Cidr { addr, prefix })
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match (self.addr, ip) {
            // An IPv4 client on a dual-stack listener.
            (IpAddr::V4(_), IpAddr::V6(v6)) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            _ => ip,
        };
        match (self.addr, ip) {
            (IpAddr::V4(a), IpAddr::V4(b)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(a) & mask == u32::from(b) & mask
            }
            (IpAddr::V6(a), IpAddr::V6(b)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(a) & mask == u128::from(b) & mask
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn req(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    fn host(h: &HeaderMap) -> Option<&str> {
        h.get("host").and_then(|v| v.to_str().ok())
    }

    fn allowed(origins: &[&str], headers: &HeaderMap) -> bool {
        let origins: Vec<String> = origins.iter().map(|s| s.to_string()).collect();
        let policy = Policy {
            origins: &origins,
            require_origin: false,
            trusted_proxies: &[],
        };
        let r = Request {
            headers,
            authority: host(headers),
            peer: "127.0.0.1".parse().unwrap(),
            tls: false,
        };
        check(&policy, &r).is_ok()
    }

    #[test]
    fn same_origin_with_default_ports() {
        let h = req(&[("host", "gw.example:80"), ("origin", "http://gw.example")]);
        assert!(allowed(&[], &h));
        let h = req(&[("host", "gw.example"), ("origin", "http://GW.example:80")]);
        assert!(allowed(&[], &h));
        let h = req(&[("host", "gw.example"), ("origin", "https://gw.example")]);
        assert!(!allowed(&[], &h), "https means 443, the listener is on 80");
        let h = req(&[
            ("host", "gw.example:9001"),
            ("origin", "http://gw.example:9002"),
        ]);
        assert!(!allowed(&[], &h));
        let h = req(&[("host", "[::1]:9001"), ("origin", "http://[::1]:9001")]);
        assert!(allowed(&[], &h));
        let h = req(&[("origin", "http://gw.example")]);
        assert!(!allowed(&[], &h), "no Host, no same origin");
    }

    /// Issue 35: the same origin ignored the scheme; a TLS listener's own
    /// origin is https, a plain one's http.
    #[test]
    fn same_origin_compares_the_scheme_of_the_listener() {
        let h = req(&[
            ("host", "gw.example:9001"),
            ("origin", "https://gw.example:9001"),
        ]);
        assert!(!allowed(&[], &h), "https origin, plain listener");
        let policy = Policy {
            origins: &[],
            require_origin: false,
            trusted_proxies: &[],
        };
        let over = |tls| Request {
            headers: &h,
            authority: host(&h),
            peer: "127.0.0.1".parse().unwrap(),
            tls,
        };
        assert!(check(&policy, &over(true)).is_ok());
        let h = req(&[("origin", "https://gw.example")]);
        let r = Request {
            headers: &h,
            authority: Some("gw.example"),
            peer: "127.0.0.1".parse().unwrap(),
            tls: true,
        };
        assert!(check(&policy, &r).is_ok(), "HTTP/2's :authority, no Host");
    }

    #[test]
    fn lists_wildcards_null_and_star() {
        let h = |o: &'static str| req(&[("host", "gw:1"), ("origin", o)]);
        let list = ["https://app.example.com", "https://*.example.org"];
        assert!(allowed(&list, &h("https://app.example.com")));
        assert!(allowed(&list, &h("https://app.example.com:443")));
        assert!(!allowed(&list, &h("http://app.example.com")));
        assert!(!allowed(&list, &h("https://app.example.com.evil.net")));
        assert!(!allowed(&list, &h("https://evilapp.example.com")));
        assert!(allowed(&list, &h("https://a.example.org")));
        assert!(allowed(&list, &h("https://a.b.example.org")));
        assert!(
            !allowed(&list, &h("https://example.org")),
            "not the domain itself"
        );
        assert!(!allowed(&list, &h("https://aexample.org")));
        assert!(!allowed(&list, &h("null")));
        assert!(allowed(&["null"], &h("null")));
        assert!(allowed(&["*"], &h("https://anything.example")));
        assert!(allowed(&["*"], &h("null")));
        assert!(!allowed(&[], &h("not an origin")));
        assert!(!allowed(&[], &h("")));
    }

    #[test]
    fn missing_origin_passes_unless_required() {
        let h = req(&[("host", "gw:1")]);
        assert!(allowed(&[], &h));
        let policy = Policy {
            origins: &[],
            require_origin: true,
            trusted_proxies: &[],
        };
        let r = Request {
            headers: &h,
            authority: host(&h),
            peer: "127.0.0.1".parse().unwrap(),
            tls: false,
        };
        assert_eq!(check(&policy, &r), Err(Refused::Missing));
    }

    #[test]
    fn forwarded_host_only_from_trusted_proxies() {
        let h = req(&[
            ("host", "10.0.0.5:9001"),
            ("x-forwarded-host", "app.example.com"),
            ("origin", "http://app.example.com"),
        ]);
        let trusted = [Cidr::parse("10.0.0.0/8").unwrap()];
        let policy = |t| Policy {
            origins: &[],
            require_origin: false,
            trusted_proxies: t,
        };
        let from = |ip: &str| Request {
            headers: &h,
            authority: host(&h),
            peer: ip.parse().unwrap(),
            tls: false,
        };
        assert!(check(&policy(&trusted), &from("10.1.2.3")).is_ok());
        assert!(check(&policy(&trusted), &from("192.168.1.1")).is_err());
        assert!(check(&policy(&[]), &from("10.1.2.3")).is_err());
        let h = req(&[
            ("host", "10.0.0.5:9001"),
            (
                "forwarded",
                "for=1.2.3.4;host=\"app.example.com:8443\";proto=https",
            ),
            ("origin", "https://app.example.com:8443"),
        ]);
        let r = Request {
            headers: &h,
            authority: host(&h),
            peer: "10.1.2.3".parse().unwrap(),
            tls: false,
        };
        assert!(check(&policy(&trusted), &r).is_ok());
    }

    #[test]
    fn rules_and_ranges_parse() {
        assert!(Rule::parse("https://*.example.com").is_ok());
        assert!(Rule::parse("https://*.com").is_err());
        assert!(Rule::parse("https://a.*.com").is_err());
        assert!(Rule::parse("https://app.example.com/path").is_err());
        assert!(Rule::parse("ftp://x.example").is_err());
        assert!(Rule::parse("https://x.example:0").is_err());
        assert!(Rule::parse("https://x.example:99999").is_err());
        assert!(Cidr::parse("10.0.0.0/33").is_none());
        let c = Cidr::parse("127.0.0.1").unwrap();
        assert!(c.contains("127.0.0.1".parse().unwrap()));
        assert!(c.contains("::ffff:127.0.0.1".parse().unwrap()));
        assert!(!c.contains("127.0.0.2".parse().unwrap()));
        assert!(Cidr::parse("::1").unwrap().contains("::1".parse().unwrap()));
        assert!(Cidr::parse("0.0.0.0/0")
            .unwrap()
            .contains("8.8.8.8".parse().unwrap()));
    }
}
