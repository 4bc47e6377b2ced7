//! Listeners, worker threads, HTTP/1.1 via hyper, upgrade, route match and the
//! non-WebSocket endpoints.

use crate::config::Config;

/// Resolves when the gateway should stop: stop accepting, close open
/// connections with 1001, return.
pub type Shutdown = tokio::sync::watch::Receiver<bool>;

/// Runs the gateway until `shutdown` flips to true.
pub fn serve(_config: Config, _shutdown: Shutdown) -> std::io::Result<()> {
    todo!("server")
}
