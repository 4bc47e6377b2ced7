//! Pusher error codes (Pusher Channels Protocol, "Error Codes", checked
//! against the docs' source, which lists every code here): the `code`
//! of a `pusher:error` and the WebSocket close code the server closes with.
//! The range tells the client what to do next, and pusher-js acts on it
//! (`Protocol.getCloseAction`): 4000-4099 refused (do not reconnect),
//! 4100-4199 back off then reconnect, 4200-4299 reconnect now, anything else
//! from 4000 up is treated as refused when it closes the connection.

/// Only TLS connections are accepted (pusher-js answers with `tls_only`).
pub const SSL_ONLY: u16 = 4000;
/// The app key in the URL names no app.
pub const APP_NOT_FOUND: u16 = 4001;
/// The app exists but is disabled.
pub const APP_DISABLED: u16 = 4003;
/// The app is over its connection quota.
pub const OVER_CONNECTION_QUOTA: u16 = 4004;
/// The connection path is not `/app/{key}`.
pub const PATH_NOT_FOUND: u16 = 4005;
/// The `protocol` query parameter is not an integer.
pub const INVALID_VERSION_FORMAT: u16 = 4006;
/// The `protocol` query parameter names a version this server does not speak.
pub const UNSUPPORTED_PROTOCOL_VERSION: u16 = 4007;
/// No `protocol` query parameter (the docs reserve 4008 for it).
pub const NO_PROTOCOL_VERSION: u16 = 4008;
/// The connection is unauthorized: also what servers send for a failed
/// subscription auth or signin, and for a user terminated through the API.
pub const UNAUTHORIZED: u16 = 4009;
/// Over capacity: reconnect with backoff.
pub const OVER_CAPACITY: u16 = 4100;
/// Generic "reconnect immediately" (a server going away for a restart).
pub const GENERIC_RECONNECT: u16 = 4200;
/// The client did not answer a `pusher:ping` within the pong timeout.
pub const PONG_NOT_RECEIVED: u16 = 4201;
/// The connection was closed after the activity timeout passed in silence.
pub const CLOSED_AFTER_INACTIVITY: u16 = 4202;
/// The 4300-4399 range is "any other type of error"; the docs name 4301 and
/// 4302 in it and leave 4300 unnamed, so weir uses 4300 for a bad message
/// that does not end the connection (malformed JSON, an unknown event, a bad
/// channel name).
pub const GENERIC_ERROR: u16 = 4300;
/// "Client event rejected due to rate limit"; servers reuse it for any
/// refused client event (too large, client events disabled, a channel that
/// does not allow them), and so does weir.
pub const CLIENT_EVENT_REJECTED: u16 = 4301;
/// "Watchlist limit exceeded": a signin's watchlist had more than 100 ids;
/// the first 100 are kept, the signin succeeds, and this error follows
/// `pusher:signin_success`.
pub const WATCHLIST_LIMIT_EXCEEDED: u16 = 4302;

/// What a client does after the connection is closed with a code, as pusher-js
/// decides it (`Protocol.getCloseAction`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseAction {
    /// 4000: reconnect over TLS.
    TlsOnly,
    /// 4001-4099 and 4300 up: do not reconnect.
    Refused,
    /// 4100-4199 (and 1002-1004): reconnect after a backoff.
    Backoff,
    /// 4200-4299: reconnect at once.
    Retry,
}

/// The action a Pusher client takes on close code `code` (from 4000 up).
pub fn close_action(code: u16) -> CloseAction {
    match code {
        SSL_ONLY => CloseAction::TlsOnly,
        4100..=4199 => CloseAction::Backoff,
        4200..=4299 => CloseAction::Retry,
        _ => CloseAction::Refused,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // pusher-js src/core/connection/protocol/protocol.ts getCloseAction.
    #[test]
    fn ranges_map_to_the_actions_pusher_js_takes() {
        assert_eq!(close_action(SSL_ONLY), CloseAction::TlsOnly);
        assert_eq!(close_action(APP_NOT_FOUND), CloseAction::Refused);
        assert_eq!(close_action(UNAUTHORIZED), CloseAction::Refused);
        assert_eq!(close_action(OVER_CAPACITY), CloseAction::Backoff);
        assert_eq!(close_action(GENERIC_RECONNECT), CloseAction::Retry);
        assert_eq!(close_action(PONG_NOT_RECEIVED), CloseAction::Retry);
        assert_eq!(close_action(CLOSED_AFTER_INACTIVITY), CloseAction::Retry);
        assert_eq!(close_action(CLIENT_EVENT_REJECTED), CloseAction::Refused);
    }
}
