//! The upgrade request a handler sees, and its answer.

use crate::bindings::weir::gateway::types::UpgradeRequest;

/// The HTTP request asking to open a WebSocket on this route.
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// Request path, e.g. `/chat/lobby` (not percent-decoded).
    pub path: String,
    /// Query string without `?`, empty when there is none.
    pub query: String,
    /// Headers in arrival order, names lower-case.
    pub headers: Vec<(String, String)>,
    /// The peer's `ip:port`.
    pub remote_addr: String,
}

impl Request {
    pub(crate) fn from_raw(raw: UpgradeRequest) -> Self {
        Request {
            path: raw.path,
            query: raw.query,
            headers: raw.headers,
            remote_addr: raw.remote_addr,
        }
    }

    /// The first header called `name` (ASCII case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The first query parameter called `name`, raw (not percent-decoded).
    /// A parameter without `=` has the value `""`.
    pub fn query_param(&self, name: &str) -> Option<&str> {
        self.query.split('&').find_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (k == name).then_some(v)
        })
    }

    /// The subprotocols the client offered, in its order of preference.
    pub fn protocols(&self) -> impl Iterator<Item = &str> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("sec-websocket-protocol"))
            .flat_map(|(_, v)| v.split(','))
            .map(str::trim)
            .filter(|p| !p.is_empty())
    }
}

/// A handler's answer to an upgrade request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upgrade {
    /// Open the WebSocket, optionally with one of the offered subprotocols.
    Accept(Option<String>),
    /// Refuse with this HTTP status (400–599).
    Reject(u16),
}

impl Upgrade {
    /// Accept without a subprotocol.
    pub fn accept() -> Self {
        Upgrade::Accept(None)
    }

    /// Refuse with 401 Unauthorized.
    pub fn unauthorized() -> Self {
        Upgrade::Reject(401)
    }
}
