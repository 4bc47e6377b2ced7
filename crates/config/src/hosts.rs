//! Which names the gateway answers to (`[server] allowed_hosts`): a request
//! whose `Host` (HTTP/1.1) or `:authority` (HTTP/2) is not one of them gets
//! 421, so a page on a domain that points its DNS at the gateway (DNS
//! rebinding) cannot reach a loopback or intranet gateway with the page's
//! own origin. See docs/architecture.md, "Host names".
//!
//! - Entries are names or IP literals without a port (`gw.example.com`,
//!   `10.0.0.5`, `[::1]`), or `*.example.com`: one or more labels under
//!   example.com, not example.com itself. Case-insensitive; the request's
//!   port is not compared (the listener's port is the one it came in on).
//! - `localhost`, `127.0.0.1`, `[::1]` and the listener's own address are
//!   always accepted: a browser sends them only for a page it loaded from
//!   that address, never for a rebinding domain.
//! - Unset: a gateway listening on loopback only accepts just those; one
//!   listening on any other address accepts every name.

use std::net::{IpAddr, SocketAddr};

/// Names a loopback gateway answers to without a list.
const LOOPBACK_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

/// One `allowed_hosts` entry, lower case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostRule {
    Exact(String),
    /// `*.suffix`: names ending in `.suffix` (kept with its dot).
    Subdomains(String),
}

impl HostRule {
    /// An `allowed_hosts` entry, or why it is not one.
    pub fn parse(text: &str) -> Result<HostRule, &'static str> {
        let text = text.trim().to_ascii_lowercase();
        if let Some(suffix) = text.strip_prefix("*.") {
            if suffix.is_empty() || suffix.contains('*') || !suffix.contains('.') {
                return Err(
                    "a wildcard covers subdomains of a domain with a dot, e.g. *.example.com",
                );
            }
            if !is_name(suffix) {
                return Err("not a host name (letters, digits, '-' and '.')");
            }
            return Ok(HostRule::Subdomains(format!(".{suffix}")));
        }
        if text.contains('*') {
            return Err("a wildcard may only be the first label: *.example.com");
        }
        if let Some(v6) = text.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
            return match v6.parse::<std::net::Ipv6Addr>() {
                Ok(_) => Ok(HostRule::Exact(text)),
                Err(_) => Err("not an IPv6 address in brackets"),
            };
        }
        if text.contains(':') {
            return Err("a name without a port (the port is not compared): gw.example.com");
        }
        if !is_name(&text) {
            return Err("not a host name (letters, digits, '-' and '.')");
        }
        Ok(HostRule::Exact(text))
    }

    fn allows(&self, host: &str) -> bool {
        match self {
            HostRule::Exact(name) => name == host,
            HostRule::Subdomains(suffix) => host.len() > suffix.len() && host.ends_with(suffix),
        }
    }
}

fn is_name(text: &str) -> bool {
    !text.is_empty()
        && !text.starts_with('.')
        && !text.ends_with('.')
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
}

/// The names one listener answers to.
#[derive(Debug, Clone)]
pub struct AllowedHosts {
    /// None: every name (a gateway on a non-loopback address, no list).
    rules: Option<Vec<HostRule>>,
    /// The listener's own address as a `Host` names it (`10.0.0.5`, `[fd00::1]`).
    own: Option<String>,
}

impl AllowedHosts {
    /// The names a listener on `listen` answers to, from `allowed_hosts`
    /// (each already checked by [`HostRule::parse`]).
    pub fn new(configured: Option<&[String]>, listen: SocketAddr) -> AllowedHosts {
        let rules = match configured {
            Some(list) => Some(
                list.iter()
                    .filter_map(|h| HostRule::parse(h).ok())
                    .collect(),
            ),
            None if listen.ip().is_loopback() => Some(Vec::new()),
            None => None,
        };
        let own = (!listen.ip().is_unspecified()).then(|| match listen.ip() {
            IpAddr::V4(ip) => ip.to_string(),
            IpAddr::V6(ip) => format!("[{ip}]"),
        });
        AllowedHosts { rules, own }
    }

    /// Whether only the loopback names are accepted (no list, loopback
    /// listener): the start-up log says so.
    pub fn loopback_only(&self) -> bool {
        self.rules.as_ref().is_some_and(|r| r.is_empty())
    }

    /// Whether a request naming `authority` (`host[:port]`; None when it
    /// named none) may be served.
    pub fn allows(&self, authority: Option<&str>) -> bool {
        let Some(rules) = &self.rules else {
            return true;
        };
        let Some(host) = authority.and_then(host_of) else {
            return false;
        };
        let host = host.to_ascii_lowercase();
        LOOPBACK_NAMES.contains(&host.as_str())
            || self.own.as_deref() == Some(host.as_str())
            || rules.iter().any(|r| r.allows(&host))
    }
}

/// The host of `host[:port]` (IPv6 in brackets, kept with them).
fn host_of(authority: &str) -> Option<&str> {
    let authority = authority.trim();
    let host = if authority.starts_with('[') {
        &authority[..=authority.find(']')?]
    } else {
        authority.split_once(':').map_or(authority, |(h, _)| h)
    };
    (!host.is_empty()).then_some(host)
}

/// The authority a request names: the request URI's (HTTP/2's
/// `:authority`, or an absolute-form HTTP/1.1 target, which RFC 9112 §3.2.2
/// puts before `Host`), else its `Host` header.
pub fn request_authority<B>(req: &http::Request<B>) -> Option<&str> {
    if let Some(authority) = req.uri().authority() {
        return Some(authority.as_str());
    }
    req.headers()
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok())
}

/// Whether a request carries more than one `Host` (RFC 9112 §3.2: 400).
pub fn repeated_host(headers: &http::HeaderMap) -> bool {
    headers.get_all(http::header::HOST).iter().nth(1).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(list: Option<&[&str]>, listen: &str) -> AllowedHosts {
        let list: Option<Vec<String>> = list.map(|l| l.iter().map(|s| s.to_string()).collect());
        AllowedHosts::new(list.as_deref(), listen.parse().unwrap())
    }

    #[test]
    fn a_loopback_gateway_answers_only_loopback_names_by_default() {
        let h = hosts(None, "127.0.0.1:9001");
        assert!(h.loopback_only());
        for ok in [
            "localhost:9001",
            "127.0.0.1:9001",
            "[::1]:9001",
            "LOCALHOST",
            "127.0.0.1",
        ] {
            assert!(h.allows(Some(ok)), "{ok}");
        }
        for bad in [
            "evil.example:9001",
            "evil.example",
            "localhost.evil.example",
            "[::2]:1",
            "",
        ] {
            assert!(!h.allows(Some(bad)), "{bad}");
        }
        assert!(!h.allows(None), "no Host");
    }

    #[test]
    fn a_public_gateway_answers_every_name_unless_listed() {
        let h = hosts(None, "0.0.0.0:9001");
        assert!(!h.loopback_only());
        assert!(h.allows(Some("evil.example")) && h.allows(None));
        let h = hosts(Some(&["gw.example.com", "*.example.org"]), "10.0.0.5:9001");
        assert!(h.allows(Some("GW.example.com:9001")));
        assert!(h.allows(Some("a.b.example.org")));
        assert!(!h.allows(Some("example.org")), "not the domain itself");
        assert!(!h.allows(Some("gw.example.com.evil.net")));
        assert!(h.allows(Some("10.0.0.5:9001")), "its own address");
        assert!(h.allows(Some("127.0.0.1:9001")), "loopback names always");
        assert!(!h.allows(Some("10.0.0.6")));
    }

    #[test]
    fn rules_parse() {
        assert_eq!(
            HostRule::parse("GW.example.com"),
            Ok(HostRule::Exact("gw.example.com".into()))
        );
        assert!(HostRule::parse("[::1]").is_ok());
        assert!(HostRule::parse("*.example.com").is_ok());
        assert!(HostRule::parse("*.com").is_err());
        assert!(HostRule::parse("a.*.com").is_err());
        assert!(HostRule::parse("gw.example.com:443").is_err());
        assert!(HostRule::parse("https://gw.example.com").is_err());
        assert!(HostRule::parse("").is_err());
        assert!(HostRule::parse("[nope]").is_err());
    }
}
