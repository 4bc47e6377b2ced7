//! Guest I/O (weir:gateway 0.4.0): outbound HTTP and timers, asked for by
//! commands and answered by events in a later batch, so a guest call never
//! waits for the network. Requests and timers run on one process-wide
//! thread (`weir-guest-io`, its own current-thread tokio runtime, hyper's
//! pooled HTTP/1 client); an answer is queued in the [`Inbox`] of the
//! worker that should see it (the connection's worker, or for a route's own
//! request or timer, the worker whose batch asked) and wakes that worker's
//! scheduler. https goes through rustls ([`https`](crate::services::https)), its
//! servers checked against webpki-roots or the route's `outbound_ca`.
//! A URL is checked as its server will read it ([`check_request`](crate::services::request::check_request): path
//! normalised and matched on segment boundaries, no Host of the guest's
//! choosing) and sent exactly as checked; a host name's addresses are
//! checked where they are resolved, once, by the connector.
//! [`RouteIo`] is one route's share: its policy check, its
//! requests in flight, its timers (held here, not in an instance, so a
//! route's timers survive instance replacement and deploys).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::sync::Notify;
use tokio::time::Instant;
use weir_abi::HttpErrorReason;

use crate::services::https::{Connector, PrivateAddress};
use crate::services::request::{build_request, check_request};
use crate::ConnectionId;
use weir_config::OutboundPolicy;
use weir_reactor::registry::worker_of;

/// Timers one route may have pending at once: past it, a set-timer is
/// dropped (and logged), so a guest cannot grow the host's timer map
/// without bound.
pub const MAX_TIMERS_PER_ROUTE: usize = 100_000;

/// An answer on its way to a guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IoEvent {
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
pub type Outcome = Result<(u16, String, Bytes), (HttpErrorReason, String)>;

/// kv-error events one inbox holds at most: a guest that keeps writing
/// into a full store learns of the first refusals of each turn; the rest
/// are only counted (`weir_kv_writes_refused_total`), so the refusals
/// themselves cannot grow the inbox.
pub const KV_ERRORS_PENDING_MAX: usize = 256;

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

    fn push(&self, event: IoEvent) {
        self.push_all(std::iter::once(event));
    }

    /// Several events under one lock and one wake-up.
    fn push_all(&self, events: impl IntoIterator<Item = IoEvent>) {
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

/// The I/O thread's HTTP client (one per set of trusted roots).
type HttpClient = Client<Connector, Full<Bytes>>;

/// Which client a route's requests go through: its `outbound_ca` (None:
/// webpki-roots) and its `allow_private`.
type ClientKey = (Option<PathBuf>, bool);

/// The process's I/O thread: its runtime and HTTP clients.
struct IoThread {
    handle: tokio::runtime::Handle,
    /// By trusted roots and `allow_private`, made on first use; each pools
    /// its connections (so a connection checked under one route's
    /// `allow_private` never serves a route without it).
    clients: Mutex<HashMap<ClientKey, HttpClient>>,
}

impl IoThread {
    /// The client for `policy`, or why it cannot be made (an unreadable or
    /// empty CA file).
    fn client(&self, policy: &OutboundPolicy) -> Result<HttpClient, String> {
        let key = (policy.ca.clone(), policy.allow_private);
        let mut clients = self.clients.lock().expect("clients lock");
        if let Some(client) = clients.get(&key) {
            return Ok(client.clone());
        }
        let connector = Connector::new(policy.ca.as_deref(), policy.allow_private)?;
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        clients.insert(key, client.clone());
        Ok(client)
    }
}

/// The I/O thread, started on first use.
fn io_thread() -> &'static IoThread {
    static IO: OnceLock<IoThread> = OnceLock::new();
    IO.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("the guest I/O runtime starts");
        let handle = runtime.handle().clone();
        std::thread::Builder::new()
            .name("weir-guest-io".into())
            .spawn(move || runtime.block_on(std::future::pending::<()>()))
            .expect("the guest I/O thread starts");
        IoThread {
            handle,
            clients: Mutex::default(),
        }
    })
}

/// Check that `policy`'s `outbound_ca` can be used (a route with a bad CA
/// file is refused when the routes are built, not at its first request).
pub fn check_outbound_ca(policy: &OutboundPolicy) -> Result<(), String> {
    match &policy.ca {
        Some(_) => io_thread().client(policy).map(drop),
        None => Ok(()),
    }
}

/// A route's timers: one task on the I/O thread sleeps until the earliest
/// is due and fires every due one in one go (setting a timer is a lock and
/// a heap push, no task of its own; timers due together reach a worker as
/// one inbox push and one wake-up).
#[derive(Default)]
struct Timers {
    state: Mutex<TimerState>,
    /// Wakes the task: a timer due before the one it sleeps for, or the
    /// route gone.
    wake: Notify,
    /// The route is gone: the task ends.
    closed: AtomicBool,
}

#[derive(Default)]
struct TimerState {
    /// Pending timers by (connection, tag): the generation of the one set
    /// last (an earlier one with the same key was replaced).
    pending: HashMap<(ConnectionId, u64), u64>,
    /// When each timer is due, earliest first. An entry whose generation
    /// is no longer the pending one was cancelled or replaced, and is
    /// skipped when due (or dropped when the heap is compacted).
    /// The task sleeps until the earliest entry, as it was when it last
    /// looked: only a push can make the earliest sooner.
    due: BinaryHeap<Reverse<Due>>,
    /// The task has been started.
    running: bool,
}

#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Due {
    at: Instant,
    generation: u64,
    conn: ConnectionId,
    tag: u64,
    /// The worker whose batch set it (a route timer's event goes there).
    asker: usize,
}

impl TimerState {
    /// Entries for cancelled or replaced timers are dropped once they are
    /// most of the heap, so set-and-cancel churn cannot grow it.
    fn compact(&mut self) {
        if self.due.len() > 1024 && self.due.len() > 2 * self.pending.len() {
            let pending = &self.pending;
            self.due
                .retain(|Reverse(d)| pending.get(&(d.conn, d.tag)) == Some(&d.generation));
        }
    }
}

/// One guest route's I/O: where its answers go, its requests in flight and
/// its timers.
pub struct RouteIo {
    /// The route path, for logs.
    route: Arc<str>,
    /// Each worker's inbox, once the route has a slot there.
    inboxes: Mutex<HashMap<usize, Arc<Inbox>>>,
    in_flight: Arc<AtomicUsize>,
    /// Pending timers, and the task that fires them.
    timers: Arc<Timers>,
    generation: AtomicU64,
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
    fn deliver(inboxes: &Mutex<HashMap<usize, Arc<Inbox>>>, asker: usize, event: IoEvent) {
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

    /// Requests of the route in flight now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// An `http-request` command of a batch that ran on worker `asker`:
    /// checked against `policy` here (a refusal is an event too), sent on
    /// the I/O thread; the answer is queued for the worker.
    pub(crate) fn http(
        self: &Arc<Self>,
        asker: usize,
        conn: ConnectionId,
        tag: u64,
        head: &str,
        body: &[u8],
        policy: &OutboundPolicy,
    ) {
        let inboxes = self.clone();
        self.request(head, body, policy, move |outcome| {
            let event = match outcome {
                Ok((status, head, body)) => IoEvent::Response {
                    conn,
                    tag,
                    status,
                    head,
                    body,
                },
                Err((reason, message)) => IoEvent::Error {
                    conn,
                    tag,
                    reason,
                    message,
                },
            };
            Self::deliver(&inboxes.inboxes, asker, event);
        });
    }

    /// A deferred upgrade's request: its outcome, through the I/O thread,
    /// under the same policy as a batch's requests.
    pub(crate) fn fetch(
        self: &Arc<Self>,
        head: &str,
        body: &[u8],
        policy: &OutboundPolicy,
    ) -> tokio::sync::oneshot::Receiver<Outcome> {
        let (done, outcome) = tokio::sync::oneshot::channel();
        self.request(head, body, policy, move |result| {
            let _ = done.send(result);
        });
        outcome
    }

    /// Check a request against `policy` and send it; `done` gets the
    /// outcome (at once for a refusal), on some thread.
    fn request(
        self: &Arc<Self>,
        head: &str,
        body: &[u8],
        policy: &OutboundPolicy,
        done: impl FnOnce(Outcome) + Send + 'static,
    ) {
        let checked = build_request(head, body)
            .map_err(|why| (HttpErrorReason::Invalid, why))
            .and_then(|request| check_request(&policy.allow, request));
        let refusal = match checked {
            Err(refused) => Err(refused),
            Ok(request) => {
                if self.in_flight.fetch_add(1, Ordering::AcqRel) >= policy.max_concurrent {
                    self.in_flight.fetch_sub(1, Ordering::AcqRel);
                    Err((
                        HttpErrorReason::Busy,
                        format!(
                            "the route has outbound_max_concurrent = {} requests in flight",
                            policy.max_concurrent
                        ),
                    ))
                } else {
                    Ok(request)
                }
            }
        };
        let io = io_thread();
        let sendable = refusal.and_then(|request| match io.client(policy) {
            Ok(client) => Ok((request, client)),
            Err(why) => {
                self.in_flight.fetch_sub(1, Ordering::AcqRel);
                Err((HttpErrorReason::Invalid, why))
            }
        });
        let (request, client) = match sendable {
            Ok(sendable) => sendable,
            Err(refused) => {
                self.counts.errors.fetch_add(1, Ordering::Relaxed);
                return done(Err(refused));
            }
        };
        let (timeout, max) = (policy.timeout, policy.max_response);
        let me = self.clone();
        io.handle.spawn(async move {
            let outcome = match tokio::time::timeout(timeout, send(&client, request, max)).await {
                Ok(outcome) => outcome,
                Err(_) => Err((
                    HttpErrorReason::Timeout,
                    format!("no response within outbound_timeout ({timeout:?})"),
                )),
            };
            me.in_flight.fetch_sub(1, Ordering::AcqRel);
            let counter = match outcome {
                Ok(_) => &me.counts.requests,
                Err(_) => &me.counts.errors,
            };
            counter.fetch_add(1, Ordering::Relaxed);
            done(outcome);
        });
    }

    /// A `set-timer` of a batch that ran on worker `asker`; replaces a
    /// pending timer with the same connection and tag.
    pub(crate) fn set_timer(
        self: &Arc<Self>,
        asker: usize,
        conn: ConnectionId,
        tag: u64,
        delay: Duration,
    ) {
        let generation = self.generation.fetch_add(1, Ordering::Relaxed);
        let at = Instant::now() + delay;
        let mut state = self.timers.state.lock().expect("timers lock");
        if state.pending.len() >= MAX_TIMERS_PER_ROUTE && !state.pending.contains_key(&(conn, tag))
        {
            tracing::warn!(
                route = &*self.route,
                conn,
                tag,
                max = MAX_TIMERS_PER_ROUTE,
                "guest set a timer past the route's pending timers cap; dropped"
            );
            return;
        }
        let sooner = state.due.peek().is_none_or(|Reverse(due)| at < due.at);
        state.pending.insert((conn, tag), generation);
        state.due.push(Reverse(Due {
            at,
            generation,
            conn,
            tag,
            asker,
        }));
        state.compact();
        if !state.running {
            state.running = true;
            io_thread()
                .handle
                .spawn(fire_timers(self.timers.clone(), Arc::downgrade(self)));
        } else if sooner {
            self.timers.wake.notify_one();
        }
    }

    /// A `cancel-timer`: the timer does not fire (unless its event is
    /// already queued).
    pub(crate) fn cancel_timer(&self, conn: ConnectionId, tag: u64) {
        let mut state = self.timers.state.lock().expect("timers lock");
        state.pending.remove(&(conn, tag));
        state.compact();
    }

    /// Timers pending now.
    pub fn timers_pending(&self) -> usize {
        self.timers.state.lock().expect("timers lock").pending.len()
    }

    /// Queue the fired `events` for their workers: one push per worker.
    fn deliver_fired(&self, fired: Vec<(usize, IoEvent)>) {
        self.counts
            .timers
            .fetch_add(fired.len() as u64, Ordering::Relaxed);
        let mut by_worker: HashMap<usize, Vec<IoEvent>> = HashMap::new();
        for (asker, event) in fired {
            by_worker
                .entry(worker_for(asker, &event))
                .or_default()
                .push(event);
        }
        let inboxes = self.inboxes.lock().expect("inboxes lock");
        for (worker, events) in by_worker {
            if let Some(inbox) = inboxes.get(&worker) {
                inbox.push_all(events);
            }
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
fn worker_for(asker: usize, event: &IoEvent) -> usize {
    match event.conn() {
        0 => asker,
        conn => worker_of(conn),
    }
}

/// A route's timer task (on the I/O thread): sleeps until the earliest
/// timer is due or an earlier one is set, fires what is due, and ends
/// with the route.
async fn fire_timers(timers: Arc<Timers>, route: Weak<RouteIo>) {
    loop {
        let (fired, next) = {
            let mut state = timers.state.lock().expect("timers lock");
            let now = Instant::now();
            let mut fired = Vec::new();
            while let Some(Reverse(due)) = state.due.peek() {
                if due.at > now {
                    break;
                }
                let Reverse(due) = state.due.pop().expect("peeked");
                if state.pending.get(&(due.conn, due.tag)) == Some(&due.generation) {
                    state.pending.remove(&(due.conn, due.tag));
                    let event = IoEvent::Timer {
                        conn: due.conn,
                        tag: due.tag,
                    };
                    fired.push((due.asker, event));
                }
            }
            (fired, state.due.peek().map(|Reverse(due)| due.at))
        };
        if timers.closed.load(Ordering::Acquire) {
            return;
        }
        if !fired.is_empty() {
            match route.upgrade() {
                Some(route) => route.deliver_fired(fired),
                None => return,
            }
        }
        match next {
            Some(at) => {
                tokio::select! {
                    _ = tokio::time::sleep_until(at) => {}
                    _ = timers.wake.notified() => {}
                }
            }
            None => timers.wake.notified().await,
        }
    }
}

/// The connector's refusal of a resolved address, if that is why `err`
/// happened (it comes wrapped in hyper's and the connector's errors).
fn private_address<'e>(err: &'e (dyn std::error::Error + 'static)) -> Option<&'e PrivateAddress> {
    let mut next = Some(err);
    while let Some(err) = next {
        if let Some(found) = err.downcast_ref::<PrivateAddress>() {
            return Some(found);
        }
        next = match err.downcast_ref::<std::io::Error>() {
            Some(io) => io
                .get_ref()
                .map(|e| e as &(dyn std::error::Error + 'static)),
            None => err.source(),
        };
    }
    None
}

/// Send `request`; status, head lines and a body of at most `max` bytes.
async fn send(client: &HttpClient, request: http::Request<Full<Bytes>>, max: usize) -> Outcome {
    let response = client
        .request(request)
        .await
        .map_err(|e| match private_address(&e) {
            Some(refused) => (HttpErrorReason::Refused, refused.to_string()),
            None => (HttpErrorReason::Connect, format!("{e:#}")),
        })?;
    let too_large = || {
        (
            HttpErrorReason::TooLarge,
            format!("the response body is over outbound_max_response ({max} bytes)"),
        )
    };
    let declared = response
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return Err(too_large());
    }
    let status = response.status().as_u16();
    let mut head = String::new();
    for (name, value) in response.headers() {
        if let Ok(value) = value.to_str() {
            if !head.is_empty() {
                head.push('\n');
            }
            head.push_str(name.as_str());
            head.push_str(": ");
            head.push_str(value);
        }
    }
    let body = Limited::new(response.into_body(), max)
        .collect()
        .await
        .map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                too_large()
            } else {
                (
                    HttpErrorReason::Connect,
                    format!("reading the response: {e}"),
                )
            }
        })?
        .to_bytes();
    Ok((status, head, body))
}
