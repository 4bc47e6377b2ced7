//! A guest route's side of one connection: the upgrade (back-off, then the
//! guest's hook) and the [`Behaviour`] that turns pieces into messages for
//! the route's batches on this worker ([`GuestSlot`]).

use crate::kind::slot::GuestSlot;
use crate::kind::turn::UpgradeCall;
use crate::runtime::abi::{Accept, DeferredUpgrade, HttpOutcome, HttpResponse};
use crate::{Fault, UpgradeRequest, UpgradeResponse};
use http::StatusCode;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tracing::warn;
use weir_reactor::behaviour::{Behaviour, LocalFuture, Stop};
use weir_reactor::buffer::Output;
use weir_reactor::decode::DataPiece;
use weir_reactor::kind::{Accepted, Refusal, Upgrade, WorkerRoute};
use weir_reactor::outbound::Outbound;
use weir_ws::close;
use weir_ws::frame::OpCode;

impl WorkerRoute for GuestSlot {
    /// Runs the guest's `upgrade` hook (accept, pick a subprotocol, or
    /// refuse with a status).
    fn upgrade<'a>(&'a self, up: Upgrade<'a>) -> LocalFuture<'a, Result<Accepted, Refusal>> {
        let req = UpgradeRequest {
            path: up.uri.path().to_string(),
            query: up.uri.query().unwrap_or("").to_string(),
            headers: up
                .headers
                .iter()
                .filter_map(|(k, v)| Some((k.as_str().to_string(), v.to_str().ok()?.to_string())))
                .collect(),
            remote_addr: up.peer.to_string(),
            params: up
                .params
                .iter()
                .map(|&(name, value)| (name.to_string(), value.to_string()))
                .collect(),
        };
        let target = up
            .uri
            .path_and_query()
            .map_or_else(|| up.uri.path(), |pq| pq.as_str());
        // Target and parameters, packed as the open event carries them,
        // before the attachment the hook may add.
        let mut info = Vec::with_capacity(16 + target.len());
        weir_abi::encode_conn_info(&mut info, target, up.params.iter().copied(), &[]);
        let peer = up.peer.ip();
        let up_timeout = up.handshake_timeout;
        Box::pin(async move {
            if let Some(left) = self.route.backoff_left(peer) {
                return Err(Refusal {
                    status: StatusCode::TOO_MANY_REQUESTS,
                    body: "this address keeps tripping the route's deadline; retry later\n",
                    retry_after: Some(left.as_secs().max(1)),
                });
            }
            let answer = match self.run_upgrade_hook(req.clone()).await {
                Ok(UpgradeResponse::Defer(deferred)) => {
                    self.resume_deferred(deferred, req, up_timeout).await
                }
                other => other,
            };
            let protocol = match answer {
                Ok(UpgradeResponse::Accept(Accept {
                    protocol,
                    attachment,
                })) => {
                    info.extend_from_slice(&attachment);
                    protocol
                }
                Ok(UpgradeResponse::Reject(status)) => {
                    return Err(Refusal {
                        status: StatusCode::from_u16(status).unwrap_or(StatusCode::FORBIDDEN),
                        body: "upgrade refused by the route's handler\n",
                        retry_after: None,
                    })
                }
                Ok(UpgradeResponse::Defer(_)) => {
                    return Err(Refusal {
                        status: StatusCode::GATEWAY_TIMEOUT,
                        body: "the route's handler did not decide within the handshake timeout\n",
                        retry_after: None,
                    })
                }
                Err(fault) => {
                    warn!(route = &*self.route.path, cause = %fault, "guest upgrade hook failed");
                    return Err(Refusal {
                        status: StatusCode::INTERNAL_SERVER_ERROR,
                        body: "the route's handler failed\n",
                        retry_after: None,
                    });
                }
            };
            let conn = GuestConn {
                slot: self.me.upgrade().expect("the worker holds its slots"),
                info,
                message: Vec::new(),
                queued: false,
                id: 0,
                peer_close: None,
            };
            Ok(Accepted {
                protocol,
                behaviour: Box::new(conn),
            })
        })
    }
}

impl GuestSlot {
    /// A deferred upgrade: send the guest's request, then let it decide
    /// (`resume-upgrade`) with the outcome, all within `limit` (the
    /// handshake timeout); past it the answer is a 504.
    async fn resume_deferred(
        &self,
        deferred: DeferredUpgrade,
        req: UpgradeRequest,
        limit: Duration,
    ) -> Result<UpgradeResponse, Fault> {
        let program = self.route.program();
        let DeferredUpgrade { tag, request } = deferred;
        let mut head = format!("{} {}", request.method, request.url);
        for (name, value) in &request.headers {
            head.push('\n');
            head.push_str(name);
            head.push_str(": ");
            head.push_str(value);
        }
        let pending = self
            .route
            .io
            .fetch(&head, &request.body, &program.config().outbound);
        let decide = async {
            let outcome = match pending.await {
                Ok(Ok((status, head, body))) => HttpOutcome::Response(HttpResponse {
                    status,
                    headers: weir_abi::io::HeaderLines::new(&head)
                        .map(|(n, v)| (n.to_string(), v.to_string()))
                        .collect(),
                    body: body.to_vec(),
                }),
                Ok(Err((reason, message))) => HttpOutcome::Error((reason as u16, message)),
                Err(_) => HttpOutcome::Error((
                    weir_abi::HttpErrorReason::Connect as u16,
                    "the gateway's I/O thread stopped".into(),
                )),
            };
            self.run_upgrade_call(UpgradeCall::Resume { tag, req, outcome })
                .await
        };
        match tokio::time::timeout(limit, decide).await {
            Ok(answer) => answer,
            Err(_) => {
                warn!(
                    route = &*self.route.path,
                    ?limit,
                    "deferred upgrade not decided within the handshake timeout; 504"
                );
                Ok(UpgradeResponse::Reject(504))
            }
        }
    }
}

/// A guest connection's side: reassembles messages that span pieces.
pub(crate) struct GuestConn {
    slot: Rc<GuestSlot>,
    /// The connection info for the open event (target, route parameters,
    /// first attachment); emptied once sent.
    info: Vec<u8>,
    message: Vec<u8>,
    queued: bool,
    id: u64,
    /// The client's close code and reason, once it sent a close.
    peer_close: Option<(u16, String)>,
}

/// Messages longer than this release their assembly buffer once delivered.
const KEEP_MESSAGE_BUF_BYTES: usize = 64 * 1024;

impl Behaviour for GuestConn {
    /// The guest runner writes its sends straight into the socket.
    const DIRECT_WRITES: bool = true;

    fn on_open(&mut self, id: u64, _outbound: &Arc<Outbound>) {
        self.id = id;
        self.slot.open(id, &std::mem::take(&mut self.info));
    }

    /// Stop reading while the guest's replies to this connection are over
    /// budget, or while the route's events waiting for the guest thread
    /// are (a slow guest must not make the worker buffer without bound).
    #[inline]
    fn reads_blocked(&self, own: &Outbound) -> bool {
        own.over_budget() || self.slot.backlogged()
    }

    async fn unblocked(&mut self, own: &Outbound) -> Result<(), Stop> {
        if own.over_budget() {
            own.wait_drained().await;
        } else {
            self.slot.wait_backlog().await;
        }
        Ok(())
    }

    /// Queues a message once it is complete; a message that is one whole
    /// frame goes straight from the receive buffer into the batch.
    #[inline]
    fn on_data(&mut self, buf: &mut [u8], piece: &DataPiece, _out: &mut Output) {
        let text = piece.message == OpCode::Text;
        let bytes = &buf[piece.payload.clone()];
        if piece.message_end() && self.message.is_empty() {
            self.slot.message(self.id, text, bytes);
            self.queued = true;
            return;
        }
        self.message.extend_from_slice(bytes);
        if piece.message_end() {
            self.slot.message(self.id, text, &self.message);
            self.queued = true;
            self.message.clear();
            if self.message.capacity() > KEEP_MESSAGE_BUF_BYTES {
                self.message = Vec::new();
            }
        }
    }

    fn on_peer_close(&mut self, code: u16, reason: &str) {
        self.peer_close = Some((code, reason.to_string()));
    }

    /// After a read batch: wake the scheduler if anything was queued.
    #[inline]
    fn end_of_read(&mut self) -> Result<(), Stop> {
        if std::mem::take(&mut self.queued) {
            self.slot.wake();
        }
        Ok(())
    }

    /// Replies would come from a batch that runs after the close.
    fn answers_before_drain(&self) -> bool {
        false
    }

    fn on_close(&mut self, id: u64) {
        // 1006: the connection ended without a close from the client.
        let (code, reason) = self
            .peer_close
            .take()
            .unwrap_or((close::ABNORMAL, String::new()));
        self.slot.close(id, code, &reason);
    }
}
