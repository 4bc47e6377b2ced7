//! Per-app counters of a pusher route, shown on `/metrics` with labels
//! `route` and `app` ([`PusherRoute::figures`]): connections open, client
//! messages in, frames queued out, client events, HTTP API requests by
//! outcome, webhook events by outcome and webhook POSTs by result.
//! Atomics shared by the workers: pusher messages are parsed JSON, so one
//! relaxed add per message is not what bounds the route.

use std::sync::atomic::{AtomicU64, Ordering};

use weir_reactor::kind::KindFigure;

use super::PusherRoute;

/// Outcomes of an HTTP API request, as the `outcome` label names them.
pub const API_OUTCOMES: [&str; 4] = ["ok", "auth_failed", "bad_request", "not_found"];

/// What became of a webhook event (`outcome` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WebhookOutcome {
    /// POSTed and answered 2xx.
    Sent = 0,
    /// Given up after every attempt failed.
    Failed = 1,
    /// Not queued: the webhook's queue was at `max_queue`.
    Dropped = 2,
}

const WEBHOOK_OUTCOMES: [&str; 3] = ["sent", "failed", "dropped"];

/// One app's counters.
#[derive(Default)]
pub struct AppCounters {
    /// Client messages received (each a whole WebSocket message).
    pub messages_in: AtomicU64,
    /// Frames queued toward the app's connections: answers, and one per
    /// local subscriber reached by an event.
    pub messages_out: AtomicU64,
    /// Client events accepted and relayed.
    pub client_events: AtomicU64,
    /// HTTP API requests, by [`API_OUTCOMES`].
    api: [AtomicU64; 4],
    /// Webhook events, by [`WebhookOutcome`].
    webhook_events: [AtomicU64; 3],
    /// Webhook POSTs answered 2xx, and attempts that failed.
    webhook_posts_ok: AtomicU64,
    webhook_posts_failed: AtomicU64,
}

impl AppCounters {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// An API request answered with `status`.
    pub fn api_answered(&self, status: u16) {
        let outcome = match status {
            200..=299 => 0,
            401 | 403 => 1,
            404 => 3,
            _ => 2,
        };
        Self::add(&self.api[outcome], 1);
    }

    pub fn webhook_events(&self, outcome: WebhookOutcome, n: u64) {
        Self::add(&self.webhook_events[outcome as usize], n);
    }

    pub fn webhook_post(&self, ok: bool) {
        let counter = if ok {
            &self.webhook_posts_ok
        } else {
            &self.webhook_posts_failed
        };
        Self::add(counter, 1);
    }

    pub fn dropped(&self) -> u64 {
        self.webhook_events[WebhookOutcome::Dropped as usize].load(Ordering::Relaxed)
    }
}

fn figure(
    name: &'static str,
    counter: bool,
    help: &'static str,
    app: &str,
    extra: Option<(&'static str, &str)>,
    value: u64,
) -> KindFigure {
    let mut labels = vec![("app", app.to_string())];
    if let Some((key, value)) = extra {
        labels.push((key, value.to_string()));
    }
    KindFigure {
        name,
        counter,
        help,
        labels,
        value,
    }
}

impl PusherRoute {
    /// Every app's figures, family by family.
    pub fn figures(&self) -> Vec<KindFigure> {
        let mut out = Vec::new();
        type Plain = fn(&AppCounters) -> u64;
        let plain: [(&str, &str, Plain); 3] = [
            (
                "weir_pusher_messages_received_total",
                "Client messages received by the app's connections.",
                |c| c.messages_in.load(Ordering::Relaxed),
            ),
            (
                "weir_pusher_messages_sent_total",
                "Frames queued toward the app's connections (answers, and one per local subscriber an event reached).",
                |c| c.messages_out.load(Ordering::Relaxed),
            ),
            (
                "weir_pusher_client_events_total",
                "Client events (client-*) accepted and relayed.",
                |c| c.client_events.load(Ordering::Relaxed),
            ),
        ];
        for app in &self.apps {
            let open = app.connections.load(Ordering::Relaxed) as u64;
            out.push(figure(
                "weir_pusher_connections",
                false,
                "Connections of the app open on this node.",
                &app.config.id,
                None,
                open,
            ));
        }
        for app in &self.apps {
            out.push(figure(
                "weir_pusher_webhook_queued_bytes",
                false,
                "Bytes of webhook events waiting to be sent (each webhook's queue holds at most its max_queue).",
                &app.config.id,
                None,
                app.webhooks.queued_bytes() as u64,
            ));
        }
        for (name, help, value) in plain {
            for app in &self.apps {
                out.push(figure(
                    name,
                    true,
                    help,
                    &app.config.id,
                    None,
                    value(&app.counters),
                ));
            }
        }
        for app in &self.apps {
            for (outcome, n) in API_OUTCOMES.iter().zip(&app.counters.api) {
                out.push(figure(
                    "weir_pusher_api_requests_total",
                    true,
                    "HTTP API requests naming the app, by outcome.",
                    &app.config.id,
                    Some(("outcome", outcome)),
                    n.load(Ordering::Relaxed),
                ));
            }
        }
        for app in &self.apps {
            for (outcome, n) in WEBHOOK_OUTCOMES.iter().zip(&app.counters.webhook_events) {
                out.push(figure(
                    "weir_pusher_webhook_events_total",
                    true,
                    "Webhook events: sent (answered 2xx), failed (every attempt failed), dropped (the queue was at max_queue).",
                    &app.config.id,
                    Some(("outcome", outcome)),
                    n.load(Ordering::Relaxed),
                ));
            }
        }
        for app in &self.apps {
            let c = &app.counters;
            for (result, n) in [
                ("ok", &c.webhook_posts_ok),
                ("error", &c.webhook_posts_failed),
            ] {
                out.push(figure(
                    "weir_pusher_webhook_posts_total",
                    true,
                    "Webhook POST attempts: answered 2xx, or failed (error, timeout or another status; retried).",
                    &app.config.id,
                    Some(("result", result)),
                    n.load(Ordering::Relaxed),
                ));
            }
        }
        out
    }
}
