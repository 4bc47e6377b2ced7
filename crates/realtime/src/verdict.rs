//! An attached guest's verdicts (a namespace guest's rt-subscribe and
//! rt-publish, a Pusher app guest's connect, subscribe and client event):
//! each question a connection asks carries a call id; the guest's verdict
//! command names it and reaches the waiting connection here. Shared by the
//! adapters that ask (the centrifugo and pusher routes) and the guest
//! route that answers, which meet in this layer rather than naming each
//! other.

use bytes::Bytes;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use tokio::sync::oneshot;
use weir_abi::RtVerdict;

/// What the guest answered one question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RtAnswer {
    /// rt-subscribe: code 0.
    Allow,
    /// A Pusher subscribe the guest authorised itself: the presence
    /// channel data to use (empty: the client's own).
    Authorise(Bytes),
    /// rt-subscribe: the error code the client gets (Centrifugo's, or
    /// Pusher's), and the guest's message (may be empty).
    Refuse(u16, Bytes),
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
    pub fn answer_subscribe(&self, call: u64, code: u16, authorise: bool, payload: &str) {
        let payload = || Bytes::copy_from_slice(payload.as_bytes());
        self.send(
            call,
            match (code, authorise) {
                (0, false) => RtAnswer::Allow,
                (0, true) => RtAnswer::Authorise(payload()),
                (code, _) => RtAnswer::Refuse(code, payload()),
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
        calls.answer_subscribe(a, 0, false, "");
        calls.answer_publish(b, RtVerdict::Replace(b"{}"));
        calls.settle([a, b, c].into_iter());
        calls.answer_subscribe(c, 0, false, "");
        calls.answer_subscribe(99, 0, false, "");
        assert_eq!(got_a.try_recv(), Ok(RtAnswer::Allow));
        assert_eq!(
            got_b.try_recv(),
            Ok(RtAnswer::Replace(Bytes::from_static(b"{}")))
        );
        assert_eq!(got_c.try_recv(), Ok(RtAnswer::Failed));
        assert!(calls.waiting.lock().unwrap().is_empty());
    }
}
