//! A Pusher app's guest (`guest = "x.wasm"` on a `[[route.apps]]` entry):
//! asked about each of the app's connections (pusher-connect), its
//! subscriptions (pusher-subscribe) and its client events
//! (pusher-client-event), in its route's batches like a namespace guest
//! (`weir_guest_runtime`'s slot). This module encodes the questions
//! (layouts in `weir_abi::pusher`) and queues them in the app guest's slot
//! on the connection's worker; the answer comes back through [`RtCalls`]
//! (`weir_realtime::verdict`), and `conn/verdicts.rs` acts on it. The guest
//! is an [`AttachedGuest`]: this module never names the guest crate. A
//! guest sees its own app's questions only: each app has a guest route of
//! its own, and the channel it is asked about is the Pusher name within
//! that app.

use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;
use weir_abi::{EventKind, RtRequest, SignatureCheck};
use weir_reactor::attached::{AttachedGuest, AttachedSlot};
use weir_reactor::kind::WorkerSetup;
use weir_realtime::verdict::{RtAnswer, RtCalls};

/// Longest a connection waits for its app guest's verdict before taking it
/// as failed: a batch's own deadline (`timeout`) ends far sooner; this
/// bounds a question that never reached a batch (a worker stopping).
pub const VERDICT_WAIT_MAX: Duration = Duration::from_secs(10);

/// An app's guest, shared by workers.
pub struct AppHook {
    pub guest: Arc<dyn AttachedGuest>,
    pub calls: Arc<RtCalls>,
}

/// An app's guest on one worker: its slot there.
pub struct WorkerHook {
    slot: Rc<dyn AttachedSlot>,
    calls: Arc<RtCalls>,
}

/// What a connection asks its app's guest about a subscribe.
pub struct SubscribeQuestion<'a> {
    pub channel: &'a str,
    pub socket_id: &'a str,
    /// The signed-in user (`pusher:signin`), or empty.
    pub user: &'a str,
    /// The `channel_data` the client sent, or empty.
    pub channel_data: &'a str,
    pub auth: &'a str,
    pub check: SignatureCheck,
}

/// What a connection asks its app's guest about a client event.
pub struct EventQuestion<'a> {
    pub channel: &'a str,
    pub socket_id: &'a str,
    /// The sender's presence `user_id`, or signed-in user, or empty.
    pub user: &'a str,
    pub event: &'a str,
    /// The event's `data`, JSON text.
    pub data: &'a [u8],
}

impl AppHook {
    /// The guest's slot on this worker.
    pub fn on_worker(&self, worker: &WorkerSetup) -> WorkerHook {
        WorkerHook {
            slot: self.guest.on_worker(worker),
            calls: self.calls.clone(),
        }
    }
}

impl WorkerHook {
    /// Queues one question for the next batch; its answer arrives on the
    /// receiver once the batch has run.
    fn ask(
        &self,
        conn: u64,
        kind: EventKind,
        (channel, client, user, info): (&str, &str, &str, &[u8]),
        rest: &[&[u8]],
    ) -> oneshot::Receiver<RtAnswer> {
        let (call, answer) = self.calls.ask();
        let req = RtRequest {
            call,
            channel,
            client,
            user,
            info,
        };
        let mut bytes = Vec::new();
        weir_abi::encode_rt_request(&mut bytes, &req, &[]);
        for part in rest {
            bytes.extend_from_slice(part);
        }
        self.slot.rt_question(conn, kind, &bytes);
        answer
    }

    /// pusher-connect: the request target and the upgrade's headers.
    pub fn connect(
        &self,
        conn: u64,
        target: &str,
        socket_id: &str,
        headers: &str,
    ) -> oneshot::Receiver<RtAnswer> {
        let fields = (target, socket_id, "", headers.as_bytes());
        self.ask(conn, EventKind::PusherConnect, fields, &[])
    }

    /// pusher-subscribe.
    pub fn subscribe(&self, conn: u64, q: &SubscribeQuestion<'_>) -> oneshot::Receiver<RtAnswer> {
        let fields = (q.channel, q.socket_id, q.user, q.channel_data.as_bytes());
        let check = [q.check as u8];
        self.ask(
            conn,
            EventKind::PusherSubscribe,
            fields,
            &[&check, q.auth.as_bytes()],
        )
    }

    /// pusher-client-event.
    pub fn client_event(&self, conn: u64, q: &EventQuestion<'_>) -> oneshot::Receiver<RtAnswer> {
        let fields = (q.channel, q.socket_id, q.user, q.event.as_bytes());
        self.ask(conn, EventKind::PusherClientEvent, fields, &[q.data])
    }

    /// More questions wait than the guest's route may hold.
    pub fn backlogged(&self) -> bool {
        self.slot.backlogged()
    }

    /// Resolves once the backlog has shrunk.
    pub async fn wait_backlog(&self) {
        self.slot.wait_backlog().await
    }
}

/// The upgrade's headers as the guest sees them: `name: value` lines
/// joined by `\n` (values that are not visible ASCII are left out; the
/// request head is at most 16 KiB, so this is too).
pub fn header_lines(headers: &http::HeaderMap) -> String {
    let mut out = String::new();
    for (name, value) in headers {
        let Ok(value) = value.to_str() else { continue };
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(name.as_str());
        out.push_str(": ");
        out.push_str(value);
    }
    out
}
