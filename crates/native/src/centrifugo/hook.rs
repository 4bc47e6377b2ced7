//! A real-time namespace's guest (`guest = "x.wasm"` on a `[[namespaces]]`
//! table): asked about each client subscribe (rt-subscribe) and each client
//! publication (rt-publish) of the namespace's channels, in its route's
//! batches like a proxy filter's messages (`weir_guest_runtime`'s slot, `kind/slot.rs`). The question
//! carries a call id; the guest's verdict names it and is handed to the
//! waiting connection through [`RtCalls`] (`weir_realtime::verdict`). A
//! batch that ran settles its questions: one the guest left unanswered, or
//! that was in a batch that failed (trap, deadline), is answered
//! [`RtAnswer::Failed`], which the client gets as error 100. The client's
//! connection stays up. The guest is an [`AttachedGuest`]: this module
//! never names the guest crate.

use super::CentrifugoRoute;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use tokio::sync::oneshot;
use weir_abi::RtRequest;
use weir_reactor::attached::{AttachedGuest, AttachedSlot};
use weir_reactor::kind::WorkerSetup;
use weir_realtime::verdict::{RtAnswer, RtCalls};

/// A namespace's guest on a centrifugo route (shared by workers).
pub struct NamespaceHook {
    pub guest: Arc<dyn AttachedGuest>,
    pub calls: Arc<RtCalls>,
}

/// The route's namespace guests on one worker, by namespace name.
#[derive(Default)]
pub struct WorkerHooks(HashMap<String, WorkerHook>);

/// One namespace guest on one worker: its slot there.
pub struct WorkerHook {
    slot: Rc<dyn AttachedSlot>,
    calls: Arc<RtCalls>,
}

impl WorkerHooks {
    /// A slot on this worker for each of the route's namespace guests.
    pub fn on_worker(route: &CentrifugoRoute, worker: &WorkerSetup) -> WorkerHooks {
        WorkerHooks(
            route
                .hooks
                .iter()
                .map(|(name, hook)| {
                    let slot = hook.guest.on_worker(worker);
                    (
                        name.clone(),
                        WorkerHook {
                            slot,
                            calls: hook.calls.clone(),
                        },
                    )
                })
                .collect(),
        )
    }

    /// The guest of `channel`'s namespace, if it has one.
    pub fn of(&self, channel: &str) -> Option<&WorkerHook> {
        if self.0.is_empty() {
            return None;
        }
        let namespace = channel.split_once(':').map_or("", |(ns, _)| ns);
        self.0.get(namespace)
    }
}

impl WorkerHook {
    /// Queues a question for the guest (rt-subscribe when `data` is None);
    /// the answer arrives on the receiver once its batch has run.
    pub fn ask(
        &self,
        conn: u64,
        req: Question<'_>,
        data: Option<&[u8]>,
    ) -> oneshot::Receiver<RtAnswer> {
        let (call, answer) = self.calls.ask();
        let mut bytes = Vec::new();
        let abi = RtRequest {
            call,
            channel: req.channel,
            client: req.client,
            user: req.user,
            info: req.info,
        };
        weir_abi::encode_rt_request(&mut bytes, &abi, data.unwrap_or_default());
        let kind = match data {
            None => weir_abi::EventKind::RtSubscribe,
            Some(_) => weir_abi::EventKind::RtPublish,
        };
        self.slot.rt_question(conn, kind, &bytes);
        answer
    }
}

/// The fields of a question, borrowed from the connection.
pub struct Question<'a> {
    pub channel: &'a str,
    pub client: &'a str,
    pub user: &'a str,
    pub info: &'a [u8],
}
