//! The connection URL, `/app/{key}?protocol=7&client=js&version=8.6.0`
//! (Pusher Channels Protocol, "WebSocket connection"): the app key and the
//! protocol version, and the refusals (4001-4008, 4100) a connection can
//! get before `pusher:connection_established`.

use crate::codes;

/// The protocol version pusher-js 8 sends (`Defaults.PROTOCOL`) and the
/// docs describe.
pub const PROTOCOL_VERSION: u32 = 7;

/// The oldest version accepted: 5 is the first whose clients answer
/// `pusher:ping` (docs, CHANGELOG). Versions 5 and 6 differ from 7 only in
/// what the server adds: 7 reads `activity_timeout` (older clients ignore
/// it), and before 6 a close is preceded by `pusher:error`, which the
/// adapter sends before every close anyway (pusher-js handles both).
pub const MIN_PROTOCOL_VERSION: u32 = 5;

/// What a connection URL, `/app/{key}?protocol=7&client=js&version=8.6.0`,
/// names (Pusher Channels Protocol, "WebSocket connection").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectRequest<'a> {
    pub app_key: &'a str,
    pub protocol: u32,
}

/// Why a connection is refused before `pusher:connection_established`. Each
/// is sent as `pusher:error` and then the close code [`ConnectError::code`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ConnectError {
    #[error("path is not /app/{{key}}")]
    PathNotFound,
    #[error("no protocol version supplied")]
    NoProtocolVersion,
    #[error("protocol version is not an integer")]
    InvalidVersionFormat,
    #[error("unsupported protocol version")]
    UnsupportedProtocolVersion,
    #[error("app does not exist")]
    AppNotFound,
    #[error("app is disabled")]
    AppDisabled,
    #[error("app is over its connection quota")]
    OverConnectionQuota,
    #[error("over capacity")]
    OverCapacity,
}

impl ConnectError {
    pub fn code(self) -> u16 {
        match self {
            ConnectError::PathNotFound => codes::PATH_NOT_FOUND,
            ConnectError::NoProtocolVersion => codes::NO_PROTOCOL_VERSION,
            ConnectError::InvalidVersionFormat => codes::INVALID_VERSION_FORMAT,
            ConnectError::UnsupportedProtocolVersion => codes::UNSUPPORTED_PROTOCOL_VERSION,
            ConnectError::AppNotFound => codes::APP_NOT_FOUND,
            ConnectError::AppDisabled => codes::APP_DISABLED,
            ConnectError::OverConnectionQuota => codes::OVER_CONNECTION_QUOTA,
            ConnectError::OverCapacity => codes::OVER_CAPACITY,
        }
    }
}

/// Reads the app key and protocol version from a connection's path and
/// query (`path` without the query, `query` without the `?`). The route's
/// prefix is the caller's to strip: `path` must end in `/app/{key}`. The
/// key is checked against the app table by the caller (`AppNotFound`).
pub fn parse_connect_request<'a>(
    path: &'a str,
    query: &str,
) -> Result<ConnectRequest<'a>, ConnectError> {
    let app_key = path
        .rsplit_once("/app/")
        .map(|(_, key)| key)
        .filter(|key| !key.is_empty() && !key.contains('/'))
        .ok_or(ConnectError::PathNotFound)?;
    let protocol = query
        .split('&')
        .find_map(|pair| pair.strip_prefix("protocol="))
        .ok_or(ConnectError::NoProtocolVersion)?;
    let protocol: u32 = protocol
        .parse()
        .map_err(|_| ConnectError::InvalidVersionFormat)?;
    if !(MIN_PROTOCOL_VERSION..=PROTOCOL_VERSION).contains(&protocol) {
        return Err(ConnectError::UnsupportedProtocolVersion);
    }
    Ok(ConnectRequest { app_key, protocol })
}

#[cfg(test)]
mod tests {
    use super::*;

    // Pusher Channels Protocol, "WebSocket connection": ws://host/app/{key}?protocol=7&client=js&version=...
    #[test]
    fn connection_urls() {
        let ok = parse_connect_request(
            "/app/key1",
            "protocol=7&client=js&version=8.6.0&flash=false",
        );
        assert_eq!(
            ok,
            Ok(ConnectRequest {
                app_key: "key1",
                protocol: 7
            })
        );
        assert_eq!(
            parse_connect_request("/pusher/app/k", "protocol=7").map(|r| r.app_key),
            Ok("k")
        );
        assert_eq!(
            parse_connect_request("/apps/k", "protocol=7"),
            Err(ConnectError::PathNotFound)
        );
        assert_eq!(
            parse_connect_request("/app/", "protocol=7"),
            Err(ConnectError::PathNotFound)
        );
        assert_eq!(
            parse_connect_request("/app/k", "client=js"),
            Err(ConnectError::NoProtocolVersion)
        );
        assert_eq!(
            parse_connect_request("/app/k", "protocol=x"),
            Err(ConnectError::InvalidVersionFormat)
        );
        assert_eq!(
            parse_connect_request("/app/k", "protocol=4"),
            Err(ConnectError::UnsupportedProtocolVersion)
        );
        assert_eq!(
            parse_connect_request("/app/k", "protocol=8"),
            Err(ConnectError::UnsupportedProtocolVersion)
        );
        assert_eq!(
            parse_connect_request("/app/k", "protocol=5").map(|r| r.protocol),
            Ok(5)
        );
        assert_eq!(ConnectError::NoProtocolVersion.code(), 4008);
        assert_eq!(ConnectError::PathNotFound.code(), 4005);
        assert_eq!(ConnectError::OverCapacity.code(), 4100);
    }
}
