//! A guest route's outbound HTTP (`http-request`, and a deferred
//! upgrade's request): checked against the route's policy, sent through
//! `weir-outbound` (its thread, a pooled client per set of trusted roots,
//! the response read up to its limit), the outcome queued for the worker
//! that asked.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use weir_abi::HttpErrorReason;
use weir_outbound::SendError;

use crate::services::io::{IoEvent, Outcome, RouteIo};
use crate::services::request::{build_request, check_request};
use crate::ConnectionId;
use weir_config::OutboundPolicy;
use weir_outbound::OutboundCaError;

/// The outbound client for `policy` (its `outbound_ca`, its `allow_private`).
fn client(policy: &OutboundPolicy) -> Result<weir_outbound::HttpClient, OutboundCaError> {
    weir_outbound::client(policy.ca.as_deref(), policy.allow_private)
}

/// Check that `policy`'s `outbound_ca` can be used (a route with a bad CA
/// file is refused when the routes are built, not at its first request).
pub fn check_outbound_ca(policy: &OutboundPolicy) -> Result<(), OutboundCaError> {
    match &policy.ca {
        Some(_) => client(policy).map(drop),
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
        let sendable = refusal.and_then(|request| match client(policy) {
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
        weir_outbound::runtime().spawn(async move {
            let outcome = weir_outbound::send(&client, request, max, timeout)
                .await
                .map(|response| {
                    let mut head = String::new();
                    for (name, value) in &response.headers {
                        if let Ok(value) = value.to_str() {
                            if !head.is_empty() {
                                head.push('\n');
                            }
                            head.push_str(name.as_str());
                            head.push_str(": ");
                            head.push_str(value);
                        }
                    }
                    (response.status.as_u16(), head, response.body)
                })
                .map_err(|e| guest_error(e, max, timeout));
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

/// The guest's `http-error` for a failed exchange, naming the route's keys.
fn guest_error(
    e: SendError,
    max: usize,
    timeout: std::time::Duration,
) -> (HttpErrorReason, String) {
    match e {
        SendError::PrivateAddress(why) => (HttpErrorReason::Refused, why),
        SendError::Connect(why) => (HttpErrorReason::Connect, why),
        SendError::ResponseTooLarge(_) => (
            HttpErrorReason::TooLarge,
            format!("the response body is over outbound_max_response ({max} bytes)"),
        ),
        SendError::Timeout(_) => (
            HttpErrorReason::Timeout,
            format!("no response within outbound_timeout ({timeout:?})"),
        ),
    }
}
