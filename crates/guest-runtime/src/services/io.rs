//! Guest I/O (weir:gateway 0.4.0): outbound HTTP (`http`) and timers
//! (`timers`), asked for by commands and answered by events in a later
//! batch, so a guest call never waits for the network. Requests and timers
//! run on `weir-outbound`'s process-wide thread (its own current-thread
//! tokio runtime, hyper's pooled HTTP/1 client); an answer is queued in the
//! [`Inbox`] of the worker that should see it (the connection's worker, or
//! for a route's own request or timer, the worker whose batch asked) and
//! wakes that worker's scheduler. https goes through rustls (`weir-outbound`'s connector), its
//! servers checked against webpki-roots or the route's `outbound_ca`. A URL
//! is checked as its server will read it (`request`: path normalised and
//! matched on segment boundaries, no Host of the guest's choosing) and sent
//! exactly as checked; a host name's addresses are checked where they are
//! resolved, once, by the connector. [`RouteIo`] is one route's share:
//! where its answers go, its requests in flight, its timers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::sync::Notify;
use weir_abi::HttpErrorReason;

use crate::services::timers::Timers;
use crate::ConnectionId;
use weir_reactor::registry::worker_of;

/// An answer on its way to a guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum IoEvent {
    Response {
        conn: ConnectionId,
        tag: u64,
        status: u16,
        /// `name: value` lines (values that are not UTF-8 left out).
        head: String,
        body: Bytes,
    },
    Error {
        conn: ConnectionId,
        tag: u64,
        reason: HttpErrorReason,
        message: String,
    },
    Timer {
        conn: ConnectionId,
        tag: u64,
    },
    /// A key-value write of the route that was refused (always for the
    /// route, conn 0).
    KvError {
        key: Vec<u8>,
        reason: weir_abi::KvErrorReason,
    },
    /// The answer to a history-read (`presence` false) or presence-read
    /// of a `realtime = true` route: code 0 or a read error, and the
    /// event's bytes, tag first (`services::realtime`).
    RealtimeRead {
        conn: ConnectionId,
        presence: bool,
        code: u16,
        bytes: Vec<u8>,
    },
}

impl IoEvent {
    /// The connection the event is for (0: the route).
    pub fn conn(&self) -> ConnectionId {
        match self {
            IoEvent::Response { conn, .. }
            | IoEvent::Error { conn, .. }
            | IoEvent::Timer { conn, .. }
            | IoEvent::RealtimeRead { conn, .. } => *conn,
            IoEvent::KvError { .. } => 0,
        }
    }
}

/// A request's outcome: status, head lines and body, or why there is none.
pub(crate) type Outcome = Result<(u16, String, Bytes), (HttpErrorReason, String)>;

/// kv-error events one inbox holds at most: a guest that keeps writing
/// into a full store learns of the first refusals of each turn; the rest
/// are only counted (`weir_kv_writes_refused_total`), so the refusals
/// themselves cannot grow the inbox.
pub(crate) const KV_ERRORS_PENDING_MAX: usize = 256;

/// Events waiting for one worker's next turn on one route.
#[derive(Default)]
pub struct Inbox {
    events: Mutex<Vec<IoEvent>>,
    /// kv-error events among `events`.
    kv_errors: AtomicUsize,
    /// The worker's scheduler signal.
    wake: Arc<Notify>,
}

impl Inbox {
    pub(crate) fn new(wake: Arc<Notify>) -> Self {
        Inbox {
            events: Mutex::default(),
            kv_errors: AtomicUsize::new(0),
            wake,
        }
    }

    /// A kv-error event, unless [`KV_ERRORS_PENDING_MAX`] are waiting.
    fn push_kv_error(&self, event: IoEvent) {
        if self.kv_errors.fetch_add(1, Ordering::AcqRel) >= KV_ERRORS_PENDING_MAX {
            self.kv_errors.fetch_sub(1, Ordering::AcqRel);
            return;
        }
        self.push(event);
    }

    pub(super) fn push(&self, event: IoEvent) {
        self.push_all(std::iter::once(event));
    }

    /// Several events under one lock and one wake-up.
    pub(super) fn push_all(&self, events: impl IntoIterator<Item = IoEvent>) {
        self.events.lock().expect("inbox lock").extend(events);
        self.wake.notify_one();
    }

    /// The events queued so far, oldest first.
    pub(crate) fn take(&self) -> Vec<IoEvent> {
        let mut events = self.events.lock().expect("inbox lock");
        self.kv_errors.store(0, Ordering::Release);
        std::mem::take(&mut *events)
    }
}

/// One guest route's I/O: where its answers go, its requests in flight and
/// its timers.
pub struct RouteIo {
    /// The route path, for logs.
    pub(super) route: Arc<str>,
    /// Each worker's inbox, once the route has a slot there.
    pub(super) inboxes: Mutex<HashMap<usize, Arc<Inbox>>>,
    /// Requests in flight, against `outbound_max_concurrent`.
    pub(super) in_flight: Arc<AtomicUsize>,
    /// Pending timers, and the task that fires them.
    pub(super) timers: Arc<Timers>,
    /// Numbers timers, so a replaced or cancelled one is told apart.
    pub(super) generation: AtomicU64,
    /// Requests answered, errors, timers fired (for tests and `/metrics`).
    pub(crate) counts: IoCounts,
}

/// What a route's I/O has done.
#[derive(Default)]
pub struct IoCounts {
    pub requests: AtomicU64,
    pub errors: AtomicU64,
    pub timers: AtomicU64,
}

impl RouteIo {
    pub fn new(route: Arc<str>) -> Arc<RouteIo> {
        Arc::new(RouteIo {
            route,
            inboxes: Mutex::default(),
            in_flight: Arc::default(),
            timers: Arc::default(),
            generation: AtomicU64::new(0),
            counts: IoCounts::default(),
        })
    }

    /// Worker `worker`'s inbox for this route.
    pub(crate) fn register(&self, worker: usize, inbox: Arc<Inbox>) {
        self.inboxes
            .lock()
            .expect("inboxes lock")
            .insert(worker, inbox);
    }

    /// Queue `event` for its worker ([`worker_for`]).
    pub(super) fn deliver(
        inboxes: &Mutex<HashMap<usize, Arc<Inbox>>>,
        asker: usize,
        event: IoEvent,
    ) {
        let worker = worker_for(asker, &event);
        let inbox = inboxes.lock().expect("inboxes lock").get(&worker).cloned();
        if let Some(inbox) = inbox {
            inbox.push(event);
        }
    }

    /// Queue `event`, an answer to a batch that ran on worker `asker`.
    pub(crate) fn deliver_event(&self, asker: usize, event: IoEvent) {
        Self::deliver(&self.inboxes, asker, event);
    }

    /// A key-value write of a batch that ran on worker `asker` was
    /// refused: the route's instance there gets a kv-error event.
    pub(crate) fn kv_refused(&self, asker: usize, key: &[u8], reason: weir_abi::KvErrorReason) {
        let inbox = self
            .inboxes
            .lock()
            .expect("inboxes lock")
            .get(&asker)
            .cloned();
        if let Some(inbox) = inbox {
            inbox.push_kv_error(IoEvent::KvError {
                key: key.to_vec(),
                reason,
            });
        }
    }
}

impl Drop for RouteIo {
    fn drop(&mut self) {
        self.timers.closed.store(true, Ordering::Release);
        self.timers.wake.notify_one();
    }
}

/// The worker an event goes to: the connection's, or for the route's own
/// (connection 0) the worker whose batch asked.
pub(super) fn worker_for(asker: usize, event: &IoEvent) -> usize {
    match event.conn() {
        0 => asker,
        conn => worker_of(conn),
    }
}
