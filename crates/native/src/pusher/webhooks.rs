//! An app's webhooks: each `[[route.apps.webhooks]]` has a queue bounded
//! in bytes (`max_queue`) and a sender task on `weir-outbound`'s thread,
//! never on a worker. A connection only appends an event's JSON under a
//! short lock ([`Webhooks::push`]); when the queue is full the event is
//! dropped, counted and logged (at most one line per
//! [`DROP_LOG_INTERVAL`]), so a slow or unreachable receiver never slows
//! a connection. The sender waits [`BATCH_WINDOW`] after the first event
//! so events that happen close together go in one POST (at most
//! [`MAX_BATCH_EVENTS`] events and [`MAX_BATCH_BYTES`]), signs it
//! (`X-Pusher-Key`, `X-Pusher-Signature`: `weir_pusher::webhook`) and
//! POSTs it, retrying with back-off up to [`MAX_ATTEMPTS`] times; batches
//! go out one at a time, so a receiver sees events in order.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::Full;
use tokio::sync::Notify;
use weir_config::PusherWebhook;
use weir_pusher::webhook::{self, WebhookEvent, WebhookKind};
use weir_pusher::AppKey;

use super::metrics::{AppCounters, WebhookOutcome};

/// How long the sender gathers events after the first before POSTing:
/// a burst (a page load subscribing to several channels) is one request.
pub const BATCH_WINDOW: Duration = Duration::from_millis(50);

/// Most events in one POST (Pusher's own batches stay small too).
pub const MAX_BATCH_EVENTS: usize = 100;

/// Most bytes of events in one POST: also what a batch being retried
/// holds beside its queue.
pub const MAX_BATCH_BYTES: usize = 256 << 10;

/// Attempts per batch before its events count as failed.
pub const MAX_ATTEMPTS: u32 = 5;

/// The wait after the first failed attempt, doubling up to
/// [`RETRY_MAX`]: a receiver that restarts gets its events within seconds.
pub const RETRY_MIN: Duration = Duration::from_millis(200);
pub const RETRY_MAX: Duration = Duration::from_secs(5);

/// A receiver's answer is read only to see it arrive: more is a failure.
pub const MAX_RESPONSE_BYTES: usize = 64 << 10;

/// At most one "queue full" line per webhook this often.
pub const DROP_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Bytes an event costs in the queue beyond its JSON.
const EVENT_OVERHEAD_BYTES: usize = 32;

/// One queued event: its JSON and when it happened.
struct Queued {
    json: String,
    time_ms: u64,
}

#[derive(Default)]
struct Queue {
    events: VecDeque<Queued>,
    bytes: usize,
    /// Dropped since the last log line, and when that was.
    dropped_unlogged: u64,
    logged_at: Option<Instant>,
}

/// One webhook: its settings, queue and the app's signing key.
struct Target {
    config: PusherWebhook,
    uri: http::Uri,
    key: String,
    secret: Vec<u8>,
    /// Shown in logs.
    app_id: String,
    queue: Mutex<Queue>,
    wake: Notify,
    /// The route is gone: the sender stops.
    closed: AtomicBool,
    counters: Arc<AppCounters>,
}

/// One app's webhooks.
#[derive(Default)]
pub struct Webhooks {
    targets: Vec<Arc<Target>>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Why an app's webhooks cannot be sent.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error("webhook url {url}: {source}")]
    Url {
        url: String,
        source: http::uri::InvalidUri,
    },
    #[error(transparent)]
    Client(#[from] weir_outbound::OutboundCaError),
}

impl Webhooks {
    /// Starts a sender per webhook of the app (Err: a URL the client
    /// cannot take, which the config check should have refused).
    pub fn start(
        app_id: &str,
        key: &AppKey<'_>,
        hooks: &[PusherWebhook],
        counters: &Arc<AppCounters>,
    ) -> Result<Webhooks, WebhookError> {
        let mut targets = Vec::with_capacity(hooks.len());
        for hook in hooks {
            let uri: http::Uri = hook.url.parse().map_err(|e| WebhookError::Url {
                url: hook.url.clone(),
                source: e,
            })?;
            // The operator named this URL: it may be on a private network
            // (the app server beside the gateway).
            let client = weir_outbound::client(None, true)?;
            let target = Arc::new(Target {
                config: hook.clone(),
                uri,
                key: key.key.to_string(),
                secret: key.secret.to_vec(),
                app_id: app_id.to_string(),
                queue: Mutex::default(),
                wake: Notify::new(),
                closed: AtomicBool::new(false),
                counters: counters.clone(),
            });
            weir_outbound::runtime().spawn(send_loop(target.clone(), client));
            targets.push(target);
        }
        Ok(Webhooks { targets })
    }

    /// Whether any webhook takes `kind` (so callers skip building events
    /// nobody gets).
    pub fn wants(&self, kind: WebhookKind) -> bool {
        self.targets.iter().any(|t| t.config.wants(kind))
    }

    /// Bytes waiting in the app's webhook queues (each at most its
    /// `max_queue`).
    pub fn queued_bytes(&self) -> usize {
        self.targets
            .iter()
            .map(|t| t.queue.lock().expect("webhook queue lock").bytes)
            .sum()
    }

    /// Queues `event` for each webhook that takes its kind; never waits.
    pub fn push(&self, event: &WebhookEvent<'_>) {
        let kind = event.kind();
        if !self.wants(kind) {
            return;
        }
        let json = webhook::event_json(event);
        let time_ms = now_ms();
        for target in self.targets.iter().filter(|t| t.config.wants(kind)) {
            target.push(Queued {
                json: json.clone(),
                time_ms,
            });
        }
    }
}

impl Drop for Webhooks {
    fn drop(&mut self) {
        for target in &self.targets {
            target.closed.store(true, Ordering::Release);
            target.wake.notify_one();
        }
    }
}

impl Target {
    fn push(&self, event: Queued) {
        let size = event.json.len() + EVENT_OVERHEAD_BYTES;
        let mut queue = self.queue.lock().expect("webhook queue lock");
        if queue.bytes + size > self.config.max_queue {
            queue.dropped_unlogged += 1;
            self.counters.webhook_events(WebhookOutcome::Dropped, 1);
            let due = queue
                .logged_at
                .is_none_or(|at| at.elapsed() >= DROP_LOG_INTERVAL);
            if due {
                tracing::warn!(
                    app = %self.app_id,
                    url = %self.config.url,
                    dropped = queue.dropped_unlogged,
                    max_queue = self.config.max_queue,
                    "webhook queue full: events dropped (the receiver is slow or down)"
                );
                queue.dropped_unlogged = 0;
                queue.logged_at = Some(Instant::now());
            }
            return;
        }
        queue.bytes += size;
        queue.events.push_back(event);
        drop(queue);
        self.wake.notify_one();
    }

    /// The next batch: the oldest events, within the batch bounds.
    fn take_batch(&self) -> Vec<Queued> {
        let mut queue = self.queue.lock().expect("webhook queue lock");
        let mut batch = Vec::new();
        let mut bytes = 0;
        while let Some(next) = queue.events.front() {
            let size = next.json.len() + EVENT_OVERHEAD_BYTES;
            let full = batch.len() == MAX_BATCH_EVENTS || bytes + size > MAX_BATCH_BYTES;
            if full && !batch.is_empty() {
                break;
            }
            bytes += size;
            batch.extend(queue.events.pop_front());
        }
        queue.bytes -= bytes;
        batch
    }

    fn is_empty(&self) -> bool {
        self.queue
            .lock()
            .expect("webhook queue lock")
            .events
            .is_empty()
    }

    fn closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// One signed POST of `body`.
    fn request(&self, body: &str) -> http::Request<Full<Bytes>> {
        let signature = webhook::signature(
            &AppKey {
                key: &self.key,
                secret: &self.secret,
            },
            body.as_bytes(),
        );
        http::Request::post(self.uri.clone())
            .header(http::header::CONTENT_TYPE, webhook::CONTENT_TYPE)
            .header(webhook::KEY_HEADER, &self.key)
            .header(webhook::SIGNATURE_HEADER, signature)
            .body(Full::new(Bytes::from(body.to_string())))
            .expect("a checked URI and plain headers make a request")
    }
}

/// One webhook's sender: a batch at a time, in order, until the route goes.
async fn send_loop(target: Arc<Target>, client: weir_outbound::HttpClient) {
    loop {
        while target.is_empty() && !target.closed() {
            target.wake.notified().await;
        }
        if target.closed() {
            return;
        }
        tokio::time::sleep(BATCH_WINDOW).await;
        let batch = target.take_batch();
        let Some(first) = batch.first() else {
            continue;
        };
        let body = webhook::body_of(first.time_ms, batch.iter().map(|e| e.json.as_str()));
        let n = batch.len() as u64;
        let outcome = if deliver(&target, &client, &body).await {
            WebhookOutcome::Sent
        } else {
            WebhookOutcome::Failed
        };
        target.counters.webhook_events(outcome, n);
    }
}

/// POSTs `body` until a 2xx answer or [`MAX_ATTEMPTS`]; true if it got one.
async fn deliver(target: &Target, client: &weir_outbound::HttpClient, body: &str) -> bool {
    let mut wait = RETRY_MIN;
    for attempt in 1..=MAX_ATTEMPTS {
        let sent = weir_outbound::send(
            client,
            target.request(body),
            MAX_RESPONSE_BYTES,
            target.config.timeout,
        )
        .await;
        let why = match sent {
            Ok(response) if response.status.is_success() => {
                target.counters.webhook_post(true);
                return true;
            }
            Ok(response) => format!("answered {}", response.status),
            Err(e) => e.to_string(),
        };
        target.counters.webhook_post(false);
        if attempt == MAX_ATTEMPTS || target.closed() {
            tracing::warn!(
                app = %target.app_id,
                url = %target.config.url,
                attempts = attempt,
                error = %why,
                "webhook batch given up"
            );
            return false;
        }
        tracing::debug!(app = %target.app_id, url = %target.config.url, error = %why, "webhook attempt failed; retrying");
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(RETRY_MAX);
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(max_queue: usize) -> Target {
        Target {
            config: PusherWebhook {
                url: "http://127.0.0.1:1/h".into(),
                events: WebhookKind::ALL.to_vec(),
                timeout: Duration::from_secs(1),
                max_queue,
            },
            uri: "http://127.0.0.1:1/h".parse().unwrap(),
            key: "k".into(),
            secret: b"s".to_vec(),
            app_id: "a".into(),
            queue: Mutex::default(),
            wake: Notify::new(),
            closed: AtomicBool::new(false),
            counters: Arc::default(),
        }
    }

    fn event(len: usize) -> Queued {
        Queued {
            json: "x".repeat(len),
            time_ms: 1,
        }
    }

    /// The queue holds at most max_queue bytes; past it events are dropped
    /// and counted, and taking a batch gives the room back.
    #[test]
    fn the_queue_is_bounded_in_bytes() {
        let t = target(1000);
        for _ in 0..10 {
            t.push(event(168));
        }
        assert_eq!(t.queue.lock().unwrap().events.len(), 5);
        assert_eq!(t.counters.dropped(), 5);
        assert_eq!(t.take_batch().len(), 5);
        assert_eq!(t.queue.lock().unwrap().bytes, 0);
        t.push(event(168));
        assert_eq!(t.queue.lock().unwrap().events.len(), 1);
    }

    /// A batch stops at MAX_BATCH_EVENTS events or MAX_BATCH_BYTES bytes,
    /// oldest first; one event over the byte bound still goes alone.
    #[test]
    fn batches_are_bounded() {
        let t = target(64 << 20);
        for _ in 0..(MAX_BATCH_EVENTS + 5) {
            t.push(event(10));
        }
        assert_eq!(t.take_batch().len(), MAX_BATCH_EVENTS);
        assert_eq!(t.take_batch().len(), 5);
        t.push(event(MAX_BATCH_BYTES));
        t.push(event(10));
        assert_eq!(t.take_batch().len(), 1);
        assert_eq!(t.take_batch().len(), 1);
        assert!(t.take_batch().is_empty());
    }
}
