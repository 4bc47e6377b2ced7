//! The upgrade request a handler sees, and its answer.

/// The HTTP request asking to open a WebSocket on this route.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Request {
    /// Request path, e.g. `/chat/lobby` (not percent-decoded).
    pub path: String,
    /// Query string without `?`, empty when there is none.
    pub query: String,
    /// Headers in arrival order, names lower-case.
    pub headers: Vec<(String, String)>,
    /// The peer's `ip:port`.
    pub remote_addr: String,
    /// The route's path parameters, `(name, value)`, in the route's order.
    pub params: Vec<(String, String)>,
}

/// The first parameter called `name` of a query string, raw.
pub(crate) fn query_param<'q>(query: &'q str, name: &str) -> Option<&'q str> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == name).then_some(v)
    })
}

impl Request {
    /// A request for `target` (`path` or `path?query`) from 127.0.0.1,
    /// without headers or parameters: for tests (see
    /// [`testing`](crate::testing), which fills in the parameters).
    pub fn new(target: &str) -> Self {
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        Request {
            path: path.to_string(),
            query: query.to_string(),
            remote_addr: "127.0.0.1:40000".to_string(),
            ..Request::default()
        }
    }

    /// Add a header (the name is lower-cased, as the gateway does).
    pub fn with_header(mut self, name: &str, value: &str) -> Self {
        self.headers
            .push((name.to_ascii_lowercase(), value.to_string()));
        self
    }

    /// The route parameter `name` (`/chat/{room}` requested as
    /// `/chat/lobby`: `req.param("room") == Some("lobby")`), not
    /// percent-decoded.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
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
        query_param(&self.query, name)
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

/// A handler's answer to an upgrade request. `S` is the handler's
/// connection state: accepting can hand the connection a first state (the
/// user behind a token, a tenant), which `on_open` finds in
/// [`Conn`](crate::Conn) and which survives instance replacement like any
/// saved state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upgrade<S = ()> {
    /// Open the WebSocket.
    Accept {
        /// One of the subprotocols the client offered, or none.
        protocol: Option<String>,
        /// The connection's first state; `None` starts from `Default`.
        state: Option<S>,
    },
    /// Refuse with this HTTP status (400–599; the gateway sends 403 for
    /// anything else).
    Reject(u16),
    /// Decide later: the gateway sends this request and calls
    /// [`Handler::on_upgrade_response`](crate::Handler::on_upgrade_response)
    /// with its outcome, all within its `handshake_timeout` (504 past it).
    Defer(crate::HttpRequest),
}

impl<S> Upgrade<S> {
    /// Accept without a subprotocol; the state starts as `Default`.
    pub fn accept() -> Self {
        Upgrade::Accept {
            protocol: None,
            state: None,
        }
    }

    /// Accept, and start the connection with `state`.
    pub fn accept_with(state: S) -> Self {
        Upgrade::Accept {
            protocol: None,
            state: Some(state),
        }
    }

    /// Choose `protocol` (one the client offered; the gateway answers 500
    /// otherwise). No effect on a rejection.
    pub fn with_protocol(mut self, protocol: &str) -> Self {
        if let Upgrade::Accept { protocol: p, .. } = &mut self {
            *p = Some(protocol.to_string());
        }
        self
    }

    /// Refuse with `status`.
    pub fn reject(status: u16) -> Self {
        Upgrade::Reject(status)
    }

    /// Refuse with 401 Unauthorized.
    pub fn unauthorized() -> Self {
        Upgrade::Reject(401)
    }

    /// Decide after `req` has its answer (authentication against a remote
    /// service before the 101).
    pub fn defer(req: crate::HttpRequest) -> Self {
        Upgrade::Defer(req)
    }
}
