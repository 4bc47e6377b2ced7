//! A pusher connection whose app has a guest (`super::super::hook`): the
//! question it waits on, the messages that arrive meanwhile, and what each
//! verdict does. One question at a time: while one waits the connection's
//! reads pause (`reads_blocked`), and messages already read are held and
//! handled in order once it is answered, so a client's subscribes and
//! events keep their order whatever the guest takes.

use super::*;
use std::collections::VecDeque;
use weir_abi::SignatureCheck;
use weir_realtime::verdict::RtAnswer;

/// Bytes of messages one connection may hold while its guest decides: at
/// most what one read brought beside the question (reads pause then), so
/// only a client that packs a read with messages goes past it; those past
/// it are refused with an error.
pub const HELD_MAX_BYTES: usize = 256 * 1024;

/// `pusher:subscription_error` type of a subscribe whose guest failed.
const GUEST_FAILED: &str = "GuestError";

/// What the connection asked its app's guest.
pub(super) enum Asked {
    Connect,
    /// The subscribe (weir's own checks passed) and what weir's signature
    /// check made of it: `Err` with the reason when it did not pass on a
    /// channel that needs one.
    Subscribe {
        req: Subscribe,
        signature: Result<(), AuthError>,
    },
    ClientEvent(ClientEvent),
}

/// The question waiting for its verdict.
pub(super) struct Waiting {
    asked: Asked,
    answer: tokio::sync::oneshot::Receiver<RtAnswer>,
}

/// Messages read while a question waits, in order.
#[derive(Default)]
pub(super) struct Held {
    messages: VecDeque<Vec<u8>>,
    bytes: usize,
}

impl Pusher {
    fn wait_for(&mut self, asked: Asked, answer: tokio::sync::oneshot::Receiver<RtAnswer>) {
        self.waiting = Some(Waiting { asked, answer });
    }

    /// At open: asks the guest about the connection; `connection_established`
    /// waits for its verdict.
    pub(super) fn ask_connect(&mut self, hook: &WorkerHook) {
        let (target, headers) = std::mem::take(&mut self.upgrade);
        let answer = hook.connect(self.id, &target, self.socket_id.as_str(), &headers);
        self.wait_for(Asked::Connect, answer);
    }

    /// A subscribe weir's checks let through, asked of the guest.
    pub(super) fn ask_subscribe(
        &mut self,
        hook: &WorkerHook,
        req: Subscribe,
        signature: Result<(), AuthError>,
    ) {
        let check = match (&req.auth, &signature) {
            (None, _) => SignatureCheck::None,
            (Some(_), Ok(())) => SignatureCheck::Passed,
            (Some(_), Err(_)) => SignatureCheck::Failed,
        };
        let question = SubscribeQuestion {
            channel: req.channel.name(),
            socket_id: self.socket_id.as_str(),
            user: self.user.as_deref().unwrap_or_default(),
            channel_data: req.channel_data.as_deref().unwrap_or_default(),
            auth: req.auth.as_deref().unwrap_or_default(),
            check,
        };
        let answer = hook.subscribe(self.id, &question);
        self.wait_for(Asked::Subscribe { req, signature }, answer);
    }

    /// A client event weir's checks let through, asked of the guest.
    pub(super) fn ask_client_event(&mut self, hook: &WorkerHook, event: ClientEvent, user: &str) {
        let question = EventQuestion {
            channel: event.channel.name(),
            socket_id: self.socket_id.as_str(),
            user,
            event: &event.event,
            data: event.data.get().as_bytes(),
        };
        let answer = hook.client_event(self.id, &question);
        self.wait_for(Asked::ClientEvent(event), answer);
    }

    /// A message read while a question waits: kept for later, within
    /// [`HELD_MAX_BYTES`].
    pub(super) fn hold(&mut self, message: &[u8]) {
        if self.held.bytes + message.len() > HELD_MAX_BYTES {
            return self.error(
                "too many messages while the app's guest decides; message dropped",
                codes::GENERIC_ERROR,
            );
        }
        self.held.bytes += message.len();
        self.held.messages.push_back(message.to_vec());
    }

    /// Whether reads wait for the guest: a question waits, or the guest's
    /// queue is over its budget.
    pub(super) fn guest_blocks(&self) -> bool {
        self.waiting.is_some() || self.hook.as_ref().is_some_and(|h| h.backlogged())
    }

    /// Waits for the verdict (or the backlog to shrink), acts on it, then
    /// handles the held messages until one asks again. Cancel-safe: the
    /// verdict is taken only once it is there.
    pub(super) async fn wait_guest(&mut self) {
        if let Some(waiting) = self.waiting.as_mut() {
            let answer = tokio::time::timeout(hook::VERDICT_WAIT_MAX, &mut waiting.answer).await;
            let answer = match answer {
                Ok(Ok(answer)) => answer,
                // Timed out, or the guest route dropped the question.
                _ => RtAnswer::Failed,
            };
            let asked = self.waiting.take().expect("waiting").asked;
            self.on_verdict(asked, answer);
            self.replay_held();
        } else if let Some(hook) = self.hook.clone() {
            hook.wait_backlog().await;
        }
    }

    fn replay_held(&mut self) {
        while self.waiting.is_none() && !self.closing {
            let Some(message) = self.held.messages.pop_front() else {
                return;
            };
            self.held.bytes -= message.len();
            self.message = message;
            self.on_message();
        }
    }

    fn on_verdict(&mut self, asked: Asked, answer: RtAnswer) {
        if self.closing {
            return;
        }
        match asked {
            Asked::Connect => self.on_connect_verdict(answer),
            Asked::Subscribe { req, signature } => {
                self.on_subscribe_verdict(req, signature, answer)
            }
            Asked::ClientEvent(event) => self.on_event_verdict(event, answer),
        }
    }

    fn on_connect_verdict(&mut self, answer: RtAnswer) {
        let (code, message) = match answer {
            RtAnswer::Allow | RtAnswer::Authorise(_) => return self.established(),
            RtAnswer::Refuse(code, message) => {
                // Only the "do not reconnect" family closes for good.
                let code = if (4000..=4099).contains(&code) {
                    code
                } else {
                    codes::UNAUTHORIZED
                };
                (
                    code,
                    text_or(&message, "connection refused by the app's guest"),
                )
            }
            // The guest could not decide: pusher-js tries again in a second.
            _ => (
                codes::OVER_CAPACITY,
                "the app's guest failed; try again".to_string(),
            ),
        };
        self.closing = true;
        self.error(&message, code);
        self.outbound().close(code, "refused");
    }

    fn on_subscribe_verdict(
        &mut self,
        req: Subscribe,
        signature: Result<(), AuthError>,
        answer: RtAnswer,
    ) {
        let name = req.channel.name().to_string();
        match answer {
            RtAnswer::Allow => match signature {
                Ok(()) => self.join(req, None),
                Err(e) => self.auth_failed(&name, e),
            },
            RtAnswer::Authorise(data) => {
                let data = (!data.is_empty()).then(|| String::from_utf8_lossy(&data).into_owned());
                self.join(req, data)
            }
            RtAnswer::Refuse(status, message) => {
                let message = text_or(&message, "subscription refused by the app's guest");
                self.subscription_error(&name, AUTH, &message, status)
            }
            _ => self.subscription_error(&name, GUEST_FAILED, "the app's guest failed", 500),
        }
    }

    fn on_event_verdict(&mut self, event: ClientEvent, answer: RtAnswer) {
        let max = self.app().config.max_payload;
        let data = match answer {
            RtAnswer::Pass => event.data,
            RtAnswer::Replace(new) => {
                let json = std::str::from_utf8(&new)
                    .ok()
                    .filter(|_| new.len() <= max)
                    .and_then(|s| RawValue::from_string(s.to_string()).ok());
                match json {
                    Some(data) => data,
                    None => {
                        tracing::warn!(
                            channel = event.channel.name(),
                            "a pusher app's guest replaced a client event's data with bytes that \
                             are not JSON or over max_payload; dropped"
                        );
                        return self.error(
                            "the app's guest answered with invalid data",
                            codes::CLIENT_EVENT_REJECTED,
                        );
                    }
                }
            }
            RtAnswer::Drop(0) => return,
            RtAnswer::Drop(code) => {
                return self.error("client event dropped by the app's guest", code)
            }
            _ => {
                return self.error(
                    "the app's guest failed; client event dropped",
                    codes::CLIENT_EVENT_REJECTED,
                )
            }
        };
        self.relay_event(event.channel.name(), &event.event, &data);
    }
}

/// The guest's message, or `default` when it gave none.
fn text_or(message: &[u8], default: &str) -> String {
    match std::str::from_utf8(message) {
        Ok(text) if !text.is_empty() => text.to_string(),
        _ => default.to_string(),
    }
}
