//! A real-time namespace's guest (`guest = "x.wasm"` on a `[[namespaces]]`
//! table): asked about each client subscribe (rt-subscribe) and each client
//! publication (rt-publish) of the namespace's channels, in its route's
//! batches like a proxy filter's messages (`guest::slot`). The question
//! carries a call id; the guest's verdict names it and is handed to the
//! waiting connection through [`RtCalls`]. A batch that ran settles its
//! questions: one the guest left unanswered, or that was in a batch that
//! failed (trap, deadline), is answered [`RtAnswer::Failed`], which the
//! client gets as error 100. The client's connection stays up.

use super::CentrifugoRoute;
use crate::guest::slot::GuestSlot;
use crate::guest::GuestRoute;
use bytes::Bytes;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;
use weir_abi::{RtRequest, RtVerdict};
use weir_reactor::kind::WorkerSetup;

/// What the guest answered one question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RtAnswer {
    /// rt-subscribe: code 0.
    Allow,
    /// rt-subscribe: the Centrifugo error code the client gets.
    Refuse(u16),
    /// rt-publish: publish the data received.
    Pass,
    /// rt-publish: publish this instead.
    Replace(Bytes),
    /// rt-publish: publish nothing; the client's error code.
    Drop(u16),
    /// No verdict: the batch failed or the guest did not answer.
    Failed,
}

/// The questions waiting for a namespace guest's verdict, by call id.
/// Each waits for a connection that counts it among its
/// `MAX_PENDING_CALLS`, so the map holds at most that many per connection.
#[derive(Default)]
pub struct RtCalls {
    next: AtomicU64,
    waiting: Mutex<HashMap<u64, oneshot::Sender<RtAnswer>>>,
}

impl RtCalls {
    /// A fresh call id and where its answer arrives.
    pub fn ask(&self) -> (u64, oneshot::Receiver<RtAnswer>) {
        let call = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.waiting.lock().expect("rt calls lock").insert(call, tx);
        (call, rx)
    }

    /// A verdict command: the waiting connection gets it (a second verdict
    /// for one call, or one for no call, is ignored).
    pub fn answer_subscribe(&self, call: u64, code: u16) {
        self.send(
            call,
            match code {
                0 => RtAnswer::Allow,
                code => RtAnswer::Refuse(code),
            },
        );
    }

    pub fn answer_publish(&self, call: u64, verdict: RtVerdict<'_>) {
        self.send(
            call,
            match verdict {
                RtVerdict::Pass => RtAnswer::Pass,
                RtVerdict::Replace(data) => RtAnswer::Replace(Bytes::copy_from_slice(data)),
                RtVerdict::Drop(code) => RtAnswer::Drop(code),
            },
        );
    }

    fn send(&self, call: u64, answer: RtAnswer) {
        let waiting = self.waiting.lock().expect("rt calls lock").remove(&call);
        if let Some(tx) = waiting {
            let _ = tx.send(answer);
        }
    }

    /// A batch has run: its questions still waiting get
    /// [`RtAnswer::Failed`].
    pub fn settle(&self, calls: impl Iterator<Item = u64>) {
        for call in calls {
            self.send(call, RtAnswer::Failed);
        }
    }
}

/// A namespace's guest on a centrifugo route (shared by workers).
pub struct NamespaceHook {
    pub guest: Arc<GuestRoute>,
    pub calls: Arc<RtCalls>,
}

/// The route's namespace guests on one worker, by namespace name.
#[derive(Default)]
pub struct WorkerHooks(HashMap<String, WorkerHook>);

/// One namespace guest on one worker: its slot there.
pub struct WorkerHook {
    slot: Rc<GuestSlot>,
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
                    let slot = GuestSlot::new(
                        hook.guest.clone(),
                        &worker
                            .service()
                            .expect("every worker runs a guest scheduler"),
                    );
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A verdict reaches its own call once; what a batch left unanswered
    /// fails when the batch settles, and a late or stray verdict is
    /// ignored.
    #[test]
    fn verdicts_reach_their_call_and_settling_fails_the_rest() {
        let calls = RtCalls::default();
        let (a, mut got_a) = calls.ask();
        let (b, mut got_b) = calls.ask();
        let (c, mut got_c) = calls.ask();
        calls.answer_subscribe(a, 0);
        calls.answer_publish(b, RtVerdict::Replace(b"{}"));
        calls.settle([a, b, c].into_iter());
        calls.answer_subscribe(c, 0);
        calls.answer_subscribe(99, 0);
        assert_eq!(got_a.try_recv(), Ok(RtAnswer::Allow));
        assert_eq!(
            got_b.try_recv(),
            Ok(RtAnswer::Replace(Bytes::from_static(b"{}")))
        );
        assert_eq!(got_c.try_recv(), Ok(RtAnswer::Failed));
        assert!(calls.waiting.lock().unwrap().is_empty());
    }
}
