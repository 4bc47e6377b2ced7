//! What the code `export!` generates calls: the component's
//! `weir:gateway/handler` and `weir:gateway/state` exports, each one call
//! into the thread's [`Runtime`] of the exported handler type. Not public
//! API (`weir_guest::__private`).

use super::*;

pub use bindings::exports::weir::gateway::handler::Guest;
pub use bindings::exports::weir::gateway::state::Guest as StateGuest;
pub use bindings::weir::gateway::types::{
    Batch as RawBatch, Commands as RawCommands, HttpOutcome as RawHttpOutcome,
    UpgradeRequest as RawUpgradeRequest, UpgradeResponse as RawUpgradeResponse,
};

fn request(raw: UpgradeRequest) -> Request {
    Request {
        path: raw.path,
        query: raw.query,
        headers: raw.headers,
        remote_addr: raw.remote_addr,
        params: raw.params,
    }
}

fn response(answer: UpgradeAnswer) -> UpgradeResponse {
    match answer {
        UpgradeAnswer::Accept {
            protocol,
            attachment,
        } => UpgradeResponse::Accept(Accept {
            protocol,
            attachment,
        }),
        UpgradeAnswer::Reject(status) => UpgradeResponse::Reject(status),
        UpgradeAnswer::Defer { tag, request } => {
            let (method, url, headers, body) = request.into_parts();
            UpgradeResponse::Defer(DeferredUpgrade {
                tag,
                request: RawHttpRequest {
                    method,
                    url,
                    headers,
                    body,
                },
            })
        }
    }
}

/// The `upgrade` export: builds a [`Request`] and asks the handler.
pub fn upgrade<H: Handler>(raw: UpgradeRequest) -> UpgradeResponse {
    let req = request(raw);
    response(with_runtime::<H, _>(|rt| rt.upgrade(&req)))
}

/// The `resume-upgrade` export: a deferred upgrade's outcome.
pub fn resume_upgrade<H: Handler>(raw: UpgradeRequest, outcome: HttpOutcome) -> UpgradeResponse {
    let req = request(raw);
    let head: String;
    let result = match &outcome {
        HttpOutcome::Response(r) => {
            head = r
                .headers
                .iter()
                .map(|(n, v)| format!("{n}: {v}"))
                .collect::<Vec<_>>()
                .join("\n");
            Ok(HttpResponse::new(r.status, &head, &r.body))
        }
        HttpOutcome::Error((code, message)) => Err(HttpError {
            reason: HttpErrorReason::from_code(*code),
            message,
        }),
    };
    response(with_runtime::<H, _>(|rt| rt.resume_upgrade(&req, result)))
}

/// The `check-state` export: whether each attachment decodes as the
/// handler's state ([`ConnState::try_restore`]); nothing is kept.
pub fn check_state<H: Handler>(attachments: Vec<Vec<u8>>) -> Vec<Option<String>> {
    attachments
        .iter()
        .map(|a| {
            if a.is_empty() {
                return None;
            }
            <H::State as ConnState>::try_restore(a)
                .err()
                .map(|e| e.to_string())
        })
        .collect()
}

/// The `handle` export: one hook call per event, one answer per batch.
pub fn handle<H: Handler>(batch: Batch) -> Commands {
    let ctx = with_runtime::<H, _>(|rt| {
        rt.handle(&batch.events, &batch.data, &mut |conn| {
            host::connection(conn)
        })
    });
    Commands {
        commands: ctx.commands,
        data: ctx.data,
    }
}
