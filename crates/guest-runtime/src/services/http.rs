//! A guest route's outbound HTTP (`http-request`, and a deferred
//! upgrade's request): checked against the route's policy, sent on the I/O
//! thread through a pooled hyper client per set of trusted roots, the
//! response read up to its limit, the outcome queued for the worker that
//! asked.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use weir_abi::HttpErrorReason;

use crate::services::https::{Connector, OutboundCaError, PrivateAddress};
use crate::services::io::{io_thread, IoEvent, IoThread, Outcome, RouteIo};
use crate::services::request::{build_request, check_request};
use crate::ConnectionId;
use weir_config::OutboundPolicy;

/// The I/O thread's HTTP client (one per set of trusted roots).
pub(super) type HttpClient = Client<Connector, Full<Bytes>>;

/// Which client a route's requests go through: its `outbound_ca` (None:
/// webpki-roots) and its `allow_private`.
pub(super) type ClientKey = (Option<PathBuf>, bool);

impl IoThread {
    /// The client for `policy`, or why it cannot be made (an unreadable or
    /// empty CA file).
    pub(super) fn client(&self, policy: &OutboundPolicy) -> Result<HttpClient, OutboundCaError> {
        let key = (policy.ca.clone(), policy.allow_private);
        let mut clients = self.clients.lock().expect("clients lock");
        if let Some(client) = clients.get(&key) {
            return Ok(client.clone());
        }
        let connector = Connector::new(policy.ca.as_deref(), policy.allow_private)?;
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        clients.insert(key, client.clone());
        Ok(client)
    }
}

/// Check that `policy`'s `outbound_ca` can be used (a route with a bad CA
/// file is refused when the routes are built, not at its first request).
pub fn check_outbound_ca(policy: &OutboundPolicy) -> Result<(), OutboundCaError> {
    match &policy.ca {
        Some(_) => io_thread().client(policy).map(drop),
        None => Ok(()),
    }
}

impl RouteIo {
    /// An `http-request` command of a batch that ran on worker `asker`:
    /// checked against `policy` here (a refusal is an event too), sent on
    /// the I/O thread; the answer is queued for the worker.
    pub(crate) fn http(
        self: &Arc<Self>,
        asker: usize,
        conn: ConnectionId,
        tag: u64,
        head: &str,
        body: &[u8],
        policy: &OutboundPolicy,
    ) {
        let inboxes = self.clone();
        self.request(head, body, policy, move |outcome| {
            let event = match outcome {
                Ok((status, head, body)) => IoEvent::Response {
                    conn,
                    tag,
                    status,
                    head,
                    body,
                },
                Err((reason, message)) => IoEvent::Error {
                    conn,
                    tag,
                    reason,
                    message,
                },
            };
            Self::deliver(&inboxes.inboxes, asker, event);
        });
    }

    /// A deferred upgrade's request: its outcome, through the I/O thread,
    /// under the same policy as a batch's requests.
    pub(crate) fn fetch(
        self: &Arc<Self>,
        head: &str,
        body: &[u8],
        policy: &OutboundPolicy,
    ) -> tokio::sync::oneshot::Receiver<Outcome> {
        let (done, outcome) = tokio::sync::oneshot::channel();
        self.request(head, body, policy, move |result| {
            let _ = done.send(result);
        });
        outcome
    }

    /// Check a request against `policy` and send it; `done` gets the
    /// outcome (at once for a refusal), on some thread.
    fn request(
        self: &Arc<Self>,
        head: &str,
        body: &[u8],
        policy: &OutboundPolicy,
        done: impl FnOnce(Outcome) + Send + 'static,
    ) {
        let checked = build_request(head, body)
            .map_err(|why| (HttpErrorReason::Invalid, why))
            .and_then(|request| check_request(&policy.allow, request));
        let refusal = match checked {
            Err(refused) => Err(refused),
            Ok(request) => {
                if self.in_flight.fetch_add(1, Ordering::AcqRel) >= policy.max_concurrent {
                    self.in_flight.fetch_sub(1, Ordering::AcqRel);
                    Err((
                        HttpErrorReason::Busy,
                        format!(
                            "the route has outbound_max_concurrent = {} requests in flight",
                            policy.max_concurrent
                        ),
                    ))
                } else {
                    Ok(request)
                }
            }
        };
        let io = io_thread();
        let sendable = refusal.and_then(|request| match io.client(policy) {
            Ok(client) => Ok((request, client)),
            Err(why) => {
                self.in_flight.fetch_sub(1, Ordering::AcqRel);
                Err((HttpErrorReason::Invalid, why.to_string()))
            }
        });
        let (request, client) = match sendable {
            Ok(sendable) => sendable,
            Err(refused) => {
                self.counts.errors.fetch_add(1, Ordering::Relaxed);
                return done(Err(refused));
            }
        };
        let (timeout, max) = (policy.timeout, policy.max_response);
        let me = self.clone();
        io.handle.spawn(async move {
            let outcome = match tokio::time::timeout(timeout, send(&client, request, max)).await {
                Ok(outcome) => outcome,
                Err(_) => Err((
                    HttpErrorReason::Timeout,
                    format!("no response within outbound_timeout ({timeout:?})"),
                )),
            };
            me.in_flight.fetch_sub(1, Ordering::AcqRel);
            let counter = match outcome {
                Ok(_) => &me.counts.requests,
                Err(_) => &me.counts.errors,
            };
            counter.fetch_add(1, Ordering::Relaxed);
            done(outcome);
        });
    }
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

/// Send `request`; status, head lines and a body of at most `max` bytes.
async fn send(client: &HttpClient, request: http::Request<Full<Bytes>>, max: usize) -> Outcome {
    let response = client
        .request(request)
        .await
        .map_err(|e| match private_address(&e) {
            Some(refused) => (HttpErrorReason::Refused, refused.to_string()),
            None => (HttpErrorReason::Connect, format!("{e:#}")),
        })?;
    let too_large = || {
        (
            HttpErrorReason::TooLarge,
            format!("the response body is over outbound_max_response ({max} bytes)"),
        )
    };
    let declared = response
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return Err(too_large());
    }
    let status = response.status().as_u16();
    let mut head = String::new();
    for (name, value) in response.headers() {
        if let Ok(value) = value.to_str() {
            if !head.is_empty() {
                head.push('\n');
            }
            head.push_str(name.as_str());
            head.push_str(": ");
            head.push_str(value);
        }
    }
    let body = Limited::new(response.into_body(), max)
        .collect()
        .await
        .map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                too_large()
            } else {
                (
                    HttpErrorReason::Connect,
                    format!("reading the response: {e}"),
                )
            }
        })?
        .to_bytes();
    Ok((status, head, body))
}
