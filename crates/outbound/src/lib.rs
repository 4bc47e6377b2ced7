//! weir's outbound HTTP client, shared by what the gateway sends on its own
//! initiative: guests' `http-request` (weir-guest-runtime, which checks
//! each request against the route's policy first) and the pusher route's
//! webhooks (weir-native). Everything runs on one process-wide thread
//! (`weir-outbound`: a current-thread tokio runtime), so no request ever
//! runs on a worker; clients are hyper-util's pooled HTTP/1 client, one
//! per set of trusted roots and `allow_private` ([`client`]), over the
//! [`connector`] (resolved addresses checked once, rustls for https).
//! [`send`] reads a response up to a size limit within a deadline.

pub mod connector;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

pub use connector::{Connector, OutboundCaError, PrivateAddress};

/// A pooled client (one per set of trusted roots and `allow_private`).
pub type HttpClient = Client<Connector, Full<Bytes>>;

/// How long an idle pooled connection is kept for the next request to its
/// origin: long enough for a burst of webhooks or guest calls, short
/// enough that a quiet origin does not hold sockets.
pub const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// The process's outbound thread: its runtime and clients.
struct Outbound {
    handle: tokio::runtime::Handle,
    /// By trusted roots and `allow_private`, made on first use; each pools
    /// its connections (so a connection checked under one route's
    /// `allow_private` never serves a route without it).
    clients: Mutex<HashMap<(Option<PathBuf>, bool), HttpClient>>,
}

fn outbound() -> &'static Outbound {
    static IO: OnceLock<Outbound> = OnceLock::new();
    IO.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("the outbound runtime starts");
        let handle = runtime.handle().clone();
        std::thread::Builder::new()
            .name("weir-outbound".into())
            .spawn(move || runtime.block_on(std::future::pending::<()>()))
            .expect("the outbound thread starts");
        Outbound {
            handle,
            clients: Mutex::default(),
        }
    })
}

/// The outbound thread's runtime (started on first use): requests, guest
/// timers and webhook senders are tasks on it.
pub fn runtime() -> &'static tokio::runtime::Handle {
    &outbound().handle
}

/// The client whose https servers are checked against `ca` (PEM; None:
/// webpki-roots) and whose host names may resolve to non-global addresses
/// only with `allow_private`; or why it cannot be made (an unreadable or
/// empty CA file).
pub fn client(ca: Option<&Path>, allow_private: bool) -> Result<HttpClient, OutboundCaError> {
    let key = (ca.map(Path::to_path_buf), allow_private);
    let mut clients = outbound().clients.lock().expect("clients lock");
    if let Some(client) = clients.get(&key) {
        return Ok(client.clone());
    }
    let connector = Connector::new(ca, allow_private)?;
    let client = Client::builder(TokioExecutor::new())
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .build(connector);
    clients.insert(key, client.clone());
    Ok(client)
}

/// Why a request got no usable response.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The host name resolved to a non-global address ([`PrivateAddress`]).
    #[error("{0}")]
    PrivateAddress(String),
    /// No connection, or it broke before the response was read.
    #[error("{0}")]
    Connect(String),
    /// The response body is over the limit (declared or read).
    #[error("the response body is over {0} bytes")]
    ResponseTooLarge(usize),
    /// No whole response within the deadline.
    #[error("no response within {0:?}")]
    Timeout(Duration),
}

/// A response read whole.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: http::StatusCode,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

/// Sends `request` through `client`: the whole exchange (connect to the
/// last body byte) within `timeout`, a body of at most `max` bytes. Runs
/// wherever it is awaited; callers spawn it on [`runtime`].
pub async fn send(
    client: &HttpClient,
    request: http::Request<Full<Bytes>>,
    max: usize,
    timeout: Duration,
) -> Result<Response, SendError> {
    match tokio::time::timeout(timeout, exchange(client, request, max)).await {
        Ok(outcome) => outcome,
        Err(_) => Err(SendError::Timeout(timeout)),
    }
}

async fn exchange(
    client: &HttpClient,
    request: http::Request<Full<Bytes>>,
    max: usize,
) -> Result<Response, SendError> {
    let response = client
        .request(request)
        .await
        .map_err(|e| match private_address(&e) {
            Some(refused) => SendError::PrivateAddress(refused.to_string()),
            None => SendError::Connect(format!("{e:#}")),
        })?;
    let declared = response
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return Err(SendError::ResponseTooLarge(max));
    }
    let (parts, body) = response.into_parts();
    let body = Limited::new(body, max)
        .collect()
        .await
        .map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                SendError::ResponseTooLarge(max)
            } else {
                SendError::Connect(format!("reading the response: {e}"))
            }
        })?
        .to_bytes();
    Ok(Response {
        status: parts.status,
        headers: parts.headers,
        body,
    })
}

/// The connector's refusal of a resolved address, if that is why `err`
/// happened (it comes wrapped in hyper's and the connector's errors).
fn private_address<'e>(err: &'e (dyn std::error::Error + 'static)) -> Option<&'e PrivateAddress> {
    let mut next = Some(err);
    while let Some(err) = next {
        if let Some(found) = err.downcast_ref::<PrivateAddress>() {
            return Some(found);
        }
        next = match err.downcast_ref::<std::io::Error>() {
            Some(io) => io
                .get_ref()
                .map(|e| e as &(dyn std::error::Error + 'static)),
            None => err.source(),
        };
    }
    None
}
