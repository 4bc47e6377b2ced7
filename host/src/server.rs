//! Listeners, worker threads, HTTP/1.1 via hyper, upgrade, route match, the
//! non-WebSocket endpoints (`/healthz`, `/metrics`) and the drain on shutdown.
//!
//! Thread per core: each worker has its own `SO_REUSEPORT` listener (the
//! kernel spreads connections), its own current-thread runtime and buffer
//! pool. After the 101 the raw `TcpStream` is taken back from hyper so the
//! connection loop runs with no layer in between.
//!
//! Shutdown drains: every request gets 503 (`/healthz` too, so a load
//! balancer stops sending clients), idle HTTP connections are closed, every
//! WebSocket connection is sent a 1001 close, and the workers wait for the
//! close handshakes up to `drain_timeout` before they stop.

use crate::admission::{Admission, Ticket, RETRY_AFTER_SECS};
use crate::config::{Behaviour, Config, Limits, NativeKind};
use crate::guest::{GuestEngine, GuestError, UpgradeRequest, UpgradeResponse};
use crate::metrics::Snapshot;
use crate::native::echo::Echo;
use crate::native::relay::{Relay, RelayHub};
use crate::pubsub::Topics;
use crate::reactor::buffer::{BufPool, PoolStats};
use crate::reactor::conn::{self, ConnEnv, Mode, OpenConns};
use crate::reactor::guest::{GuestConn, GuestRoute, GuestSlot};
use crate::reactor::outbound::Outbound;
use crate::ws::handshake::{self, HandshakeError};
use bytes::Bytes;
use http::{header, HeaderValue, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tracing::{debug, info, warn};

/// Flips to true when the gateway should drain and stop (see the module
/// docs). A dropped sender also means stop.
pub type Shutdown = tokio::sync::watch::Receiver<bool>;

/// Pending connections the kernel queues per listener before refusing.
const LISTEN_BACKLOG: i32 = 4096;
/// Cap on an HTTP request head; past it hyper answers 431. (hyper's minimum.)
const MAX_REQUEST_HEAD_BYTES: usize = 16 * 1024;
/// Pause after a failed accept (e.g. out of file descriptors) so the worker
/// does not spin while the condition lasts.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(20);
/// How often a draining worker checks whether every connection has closed.
const DRAIN_POLL: Duration = Duration::from_millis(10);

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("route {path} (line {line}): {reason}")]
    Route {
        path: String,
        line: usize,
        reason: String,
    },
    #[error(transparent)]
    Guest(#[from] GuestError),
    #[error("cannot start worker thread: {0}")]
    Worker(std::io::Error),
}

/// A route as the workers run it.
struct RouteRuntime {
    path: String,
    limits: Arc<Limits>,
    kind: RouteKind,
}

enum RouteKind {
    Echo,
    Relay(Arc<RelayHub>),
    Guest(Arc<GuestRoute>),
}

/// What all workers share: routes, connection ids, limits and counters.
struct Shared {
    router: matchit::Router<usize>,
    routes: Vec<RouteRuntime>,
    handshake_timeout: Duration,
    drain_timeout: Duration,
    next_conn: AtomicU64,
    admission: Arc<Admission>,
    /// Open WebSocket connections of every worker.
    open: Arc<OpenConns>,
    /// Open TCP connections (HTTP or WebSocket), so the drain can wait for them.
    tcp_open: AtomicUsize,
    /// Each worker's receive-buffer pool, by worker index.
    pools: Vec<Arc<PoolStats>>,
    draining: AtomicBool,
    upgrades: AtomicU64,
    refused_over_limit: AtomicU64,
    refused_draining: AtomicU64,
}

/// A bound gateway, ready to run. Binding first lets callers (tests, `--listen
/// 127.0.0.1:0`) learn the address before serving.
pub struct Server {
    listeners: Vec<std::net::TcpListener>,
    shared: Arc<Shared>,
    local_addr: SocketAddr,
}

impl Server {
    /// Binds one listener per worker on the configured address.
    pub fn bind(config: Config) -> Result<Server, ServeError> {
        let workers = config.server.workers.max(1);
        let shared = Arc::new(Shared::new(&config, workers)?);
        let first = listen(config.server.listen)?;
        let local_addr = first.local_addr().map_err(|source| ServeError::Bind {
            addr: config.server.listen,
            source,
        })?;
        let mut listeners = vec![first];
        for _ in 1..workers {
            listeners.push(listen(local_addr)?);
        }
        Ok(Server {
            listeners,
            shared,
            local_addr,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Runs the workers until `shutdown`; returns when all have stopped.
    pub fn run(self, shutdown: Shutdown) -> Result<(), ServeError> {
        info!(addr = %self.local_addr, workers = self.listeners.len(), "weir listening");
        let mut threads = Vec::new();
        for (index, listener) in self.listeners.into_iter().enumerate() {
            let shared = self.shared.clone();
            let shutdown = shutdown.clone();
            let thread = std::thread::Builder::new()
                .name(format!("weir-worker-{index}"))
                .spawn(move || run_worker(index, listener, shared, shutdown))
                .map_err(ServeError::Worker)?;
            threads.push(thread);
        }
        for t in threads {
            let _ = t.join();
        }
        info!("weir stopped");
        Ok(())
    }
}

/// Binds and runs until `shutdown` flips to true.
pub fn serve(config: Config, shutdown: Shutdown) -> Result<(), ServeError> {
    Server::bind(config)?.run(shutdown)
}

impl Shared {
    fn new(config: &Config, workers: usize) -> Result<Shared, ServeError> {
        let mut router = matchit::Router::new();
        let mut routes = Vec::new();
        let topics = Arc::new(Topics::default());
        let has_guests = config
            .routes
            .iter()
            .any(|r| matches!(r.behaviour, Behaviour::Guest(_)));
        let engine = if has_guests {
            Some(GuestEngine::new(config.server.cache_dir.clone())?)
        } else {
            None
        };
        for (index, route) in config.routes.iter().enumerate() {
            let route_error = |reason: String| ServeError::Route {
                path: route.path.clone(),
                line: route.line,
                reason,
            };
            router
                .insert(route.path.clone(), index)
                .map_err(|e| route_error(e.to_string()))?;
            let kind = match &route.behaviour {
                Behaviour::Native(NativeKind::Echo) => RouteKind::Echo,
                Behaviour::Native(NativeKind::Relay) => RouteKind::Relay(Arc::default()),
                Behaviour::Guest(guest) => {
                    let engine = engine
                        .as_ref()
                        .expect("engine exists when a route is a guest");
                    let program = crate::guest::Program::load(engine, &route.path, guest)?;
                    RouteKind::Guest(Arc::new(GuestRoute::new(program, topics.clone())))
                }
            };
            routes.push(RouteRuntime {
                path: route.path.clone(),
                limits: Arc::new(route.limits.clone()),
                kind,
            });
        }
        Ok(Shared {
            router,
            routes,
            handshake_timeout: config.server.handshake_timeout,
            drain_timeout: config.server.drain_timeout,
            next_conn: AtomicU64::new(1),
            admission: Admission::new(
                config.server.max_connections,
                config.server.max_connections_per_ip,
            ),
            open: Arc::default(),
            tcp_open: AtomicUsize::new(0),
            pools: (0..workers).map(|_| Arc::default()).collect(),
            draining: AtomicBool::new(false),
            upgrades: AtomicU64::new(0),
            refused_over_limit: AtomicU64::new(0),
            refused_draining: AtomicU64::new(0),
        })
    }

    /// The figures `/metrics` shows.
    fn snapshot(&self) -> Snapshot {
        let queues = self.open.stats();
        Snapshot {
            websocket_connections: queues.connections,
            tcp_connections: self.tcp_open.load(Ordering::Relaxed),
            upgrades: self.upgrades.load(Ordering::Relaxed),
            refused_over_limit: self.refused_over_limit.load(Ordering::Relaxed),
            refused_draining: self.refused_draining.load(Ordering::Relaxed),
            outbound_queued_bytes: queues.queued_bytes,
            outbound_queued_bytes_max: queues.max_queued_bytes,
            receive_buffer_bytes_held: self.pools.iter().map(|p| p.held_bytes()).sum(),
            receive_buffer_bytes_pooled: self.pools.iter().map(|p| p.pooled_bytes()).sum(),
            draining: self.draining.load(Ordering::Relaxed),
            heap: crate::metrics::Heap::read(),
        }
    }
}

/// A listening socket that shares its port with the other workers'.
fn listen(addr: SocketAddr) -> Result<std::net::TcpListener, ServeError> {
    use socket2::{Domain, Protocol, Socket, Type};
    let bind = || -> std::io::Result<std::net::TcpListener> {
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        socket.set_reuse_address(true)?;
        socket.set_reuse_port(true)?;
        socket.set_nonblocking(true)?;
        socket.bind(&addr.into())?;
        socket.listen(LISTEN_BACKLOG)?;
        Ok(socket.into())
    };
    bind().map_err(|source| ServeError::Bind { addr, source })
}

/// One worker's state, shared by its tasks (single thread: `Rc`, no locks).
struct Worker {
    shared: Arc<Shared>,
    pool: Rc<BufPool>,
    /// This worker's instance of each guest route, by route index.
    guests: Vec<Option<Rc<GuestSlot>>>,
}

fn run_worker(
    index: usize,
    listener: std::net::TcpListener,
    shared: Arc<Shared>,
    shutdown: Shutdown,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            warn!(error = %e, "worker runtime failed to start");
            return;
        }
    };
    let local = tokio::task::LocalSet::new();
    let guest_work = Rc::new(tokio::sync::Notify::new());
    let guests: Vec<Option<Rc<GuestSlot>>> = shared
        .routes
        .iter()
        .map(|r| match &r.kind {
            RouteKind::Guest(route) => {
                Some(Rc::new(GuestSlot::new(route.clone(), guest_work.clone())))
            }
            _ => None,
        })
        .collect();
    let slots: Vec<Rc<GuestSlot>> = guests.iter().flatten().cloned().collect();
    let wake_guests = guest_work.clone();
    let mut main = local.spawn_local(async move {
        let listener = match TcpListener::from_std(listener) {
            Ok(l) => l,
            Err(e) => {
                warn!(error = %e, "worker listener failed");
                return;
            }
        };
        let worker = Rc::new(Worker {
            guests,
            pool: Rc::new(BufPool::new(shared.pools[index].clone())),
            shared,
        });
        let mut stop = shutdown.clone();
        while !*stop.borrow() {
            tokio::select! {
                changed = stop.changed() => if changed.is_err() { break },
                accepted = listener.accept() => accept(accepted, &worker, &shutdown).await,
            }
        }
        let shared = &worker.shared;
        if !shared.draining.swap(true, Ordering::AcqRel) {
            info!(
                connections = shared.open.stats().connections,
                timeout = ?shared.drain_timeout,
                "draining: new requests get 503, open connections are closed with 1001"
            );
        }
        // Batches of messages already read go to their guests first, so
        // their replies are queued before the 1001.
        wake_guests.notify_one();
        tokio::task::yield_now().await;
        shared.open.close_all();
        // The listener stays open while draining: health checks and new
        // clients get a 503 rather than a refused connection.
        let deadline = tokio::time::Instant::now() + shared.drain_timeout;
        while shared.tcp_open.load(Ordering::Acquire) > 0 {
            if tokio::time::Instant::now() >= deadline {
                warn!(
                    remaining = shared.tcp_open.load(Ordering::Acquire),
                    "drain timeout: dropping the connections still open"
                );
                break;
            }
            tokio::select! {
                accepted = listener.accept() => accept(accepted, &worker, &shutdown).await,
                _ = tokio::time::sleep(DRAIN_POLL) => {}
            }
        }
    });
    // The worker leaves the runtime to run guests (see reactor::guest): it
    // returns from block_on when guest work is pending, after the other ready
    // tasks had a turn to add their events to the batch.
    loop {
        let finished = local.block_on(&runtime, async {
            tokio::select! {
                biased;
                _ = &mut main => true,
                _ = guest_work.notified() => {
                    tokio::task::yield_now().await;
                    false
                }
            }
        });
        for slot in &slots {
            slot.run_pending();
        }
        if finished {
            break;
        }
    }
}

/// Starts serving an accepted connection, or backs off after a failed accept.
async fn accept(
    accepted: std::io::Result<(TcpStream, SocketAddr)>,
    worker: &Rc<Worker>,
    shutdown: &Shutdown,
) {
    match accepted {
        Ok((stream, peer)) => {
            tokio::task::spawn_local(serve_http(stream, peer, worker.clone(), shutdown.clone()));
        }
        Err(e) => {
            warn!(error = %e, "accept failed");
            tokio::time::sleep(ACCEPT_BACKOFF).await;
        }
    }
}

/// Counts a connection as open for as long as it exists, and holds its
/// place under the connection limits (None: over a limit, refuse).
struct LiveGuard(Arc<Shared>, Option<Ticket>);

impl LiveGuard {
    fn new(shared: Arc<Shared>, ticket: Option<Ticket>) -> LiveGuard {
        shared.tcp_open.fetch_add(1, Ordering::AcqRel);
        LiveGuard(shared, ticket)
    }
}

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.0.tcp_open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Serves HTTP/1.1 on a new connection until it upgrades or ends. On
/// shutdown an idle keep-alive connection is closed; one in the middle of a
/// request gets its answer first.
async fn serve_http(stream: TcpStream, peer: SocketAddr, worker: Rc<Worker>, mut stop: Shutdown) {
    // Replies are small and latency matters more than packet count; batching
    // already happens in the reactor (one write per read batch).
    let _ = stream.set_nodelay(true);
    let ticket = worker.shared.admission.admit(peer.ip());
    let guard = Rc::new(LiveGuard::new(worker.shared.clone(), ticket));
    let service = {
        let worker = worker.clone();
        service_fn(move |req| {
            let worker = worker.clone();
            let guard = guard.clone();
            async move { Ok::<_, Infallible>(handle_request(req, peer, worker, guard).await) }
        })
    };
    let http = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(worker.shared.handshake_timeout)
        .max_buf_size(MAX_REQUEST_HEAD_BYTES)
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades();
    tokio::pin!(http);
    // A connection accepted while draining is answered 503 and closed by
    // its response; only ones open before the drain need closing here.
    let accepted_while_draining = *stop.borrow_and_update();
    let ended = tokio::select! {
        ended = http.as_mut() => ended,
        _ = stop.wait_for(|stop| *stop), if !accepted_while_draining => {
            http.as_mut().graceful_shutdown();
            http.await
        }
    };
    if let Err(e) = ended {
        debug!(%peer, error = %e, "http connection ended");
    }
}

/// What the guest's `upgrade` hook sees of the request.
fn upgrade_request(req: &Request<Incoming>, peer: SocketAddr) -> UpgradeRequest {
    UpgradeRequest {
        path: req.uri().path().to_string(),
        query: req.uri().query().unwrap_or("").to_string(),
        headers: req
            .headers()
            .iter()
            .filter_map(|(k, v)| Some((k.as_str().to_string(), v.to_str().ok()?.to_string())))
            .collect(),
        remote_addr: peer.to_string(),
    }
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

/// 503 with Retry-After; the connection closes after it.
fn unavailable(body: &'static str) -> Response<Full<Bytes>> {
    let mut resp = text(StatusCode::SERVICE_UNAVAILABLE, body);
    resp.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
    resp.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    resp
}

/// Routes a request: health check, 404, refusal, or the 101 and the handoff
/// of the socket to the connection loop.
async fn handle_request(
    mut req: Request<Incoming>,
    peer: SocketAddr,
    worker: Rc<Worker>,
    guard: Rc<LiveGuard>,
) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    let shared = &worker.shared;
    if path == "/metrics" {
        let mut resp = Response::new(Full::new(Bytes::from(shared.snapshot().render())));
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(crate::metrics::CONTENT_TYPE),
        );
        return resp;
    }
    if shared.draining.load(Ordering::Acquire) {
        let body = if path == "/healthz" {
            "draining\n"
        } else {
            shared.refused_draining.fetch_add(1, Ordering::Relaxed);
            "shutting down; retry later\n"
        };
        return unavailable(body);
    }
    if path == "/healthz" {
        return text(StatusCode::OK, "ok\n");
    }
    if guard.1.is_none() {
        shared.refused_over_limit.fetch_add(1, Ordering::Relaxed);
        return unavailable("too many connections; retry later\n");
    }
    let Ok(matched) = shared.router.at(path) else {
        return text(StatusCode::NOT_FOUND, "no route for this path\n");
    };
    let route = &shared.routes[*matched.value];
    if !handshake::wants_websocket(req.headers()) {
        let mut resp = text(
            StatusCode::UPGRADE_REQUIRED,
            "this route speaks WebSocket: send a GET with Upgrade: websocket\n",
        );
        resp.headers_mut()
            .insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        resp.headers_mut().insert(
            header::SEC_WEBSOCKET_VERSION,
            HeaderValue::from_static(handshake::SUPPORTED_VERSION),
        );
        return resp;
    }
    let accept = match handshake::check_request(req.method(), req.version(), req.headers()) {
        Ok(accept) => accept,
        Err(e) => {
            debug!(%peer, path = %route.path, error = %e, "upgrade refused");
            let mut resp = Response::new(Full::new(Bytes::from(format!("{e}\n"))));
            *resp.status_mut() = e.status();
            if e == HandshakeError::UnsupportedVersion {
                resp.headers_mut().insert(
                    header::SEC_WEBSOCKET_VERSION,
                    HeaderValue::from_static(handshake::SUPPORTED_VERSION),
                );
            }
            return resp;
        }
    };
    let mut protocol = handshake::negotiate_subprotocol(req.headers(), &route.limits.subprotocols)
        .and_then(|p| HeaderValue::from_str(p).ok());
    let id = shared.next_conn.fetch_add(1, Ordering::Relaxed);
    let mut early_outbound = None;
    let mode = match &route.kind {
        RouteKind::Echo => Mode::Echo(Echo::default()),
        RouteKind::Relay(hub) => {
            // Joined before the 101: relay connections pair in the order
            // their upgrades are answered, whichever worker runs them.
            let outbound = Arc::new(Outbound::new(route.limits.outbound_budget));
            let join = hub.join(id, outbound.clone());
            early_outbound = Some(outbound);
            Mode::Relay(hub.clone(), Relay::joined(join))
        }
        RouteKind::Guest(_) => {
            let slot = worker.guests[*matched.value]
                .clone()
                .expect("slot per guest route");
            match slot.upgrade(upgrade_request(&req, peer)).await {
                Ok(UpgradeResponse::Accept(chosen)) => {
                    if let Some(p) = chosen.and_then(|p| HeaderValue::from_str(&p).ok()) {
                        protocol = Some(p);
                    }
                }
                Ok(UpgradeResponse::Reject(status)) => {
                    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::FORBIDDEN);
                    return text(status, "upgrade refused by the route's handler\n");
                }
                Err(fault) => {
                    warn!(route = %route.path, cause = %fault, "guest upgrade hook failed");
                    return text(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "the route's handler failed\n",
                    );
                }
            }
            let target = req
                .uri()
                .path_and_query()
                .map_or_else(|| path.to_string(), |pq| pq.as_str().to_string());
            Mode::Guest(GuestConn::new(slot), target)
        }
    };
    let env = ConnEnv {
        id,
        outbound: early_outbound,
        pool: worker.pool.clone(),
        limits: route.limits.clone(),
        open: shared.open.clone(),
    };
    shared.upgrades.fetch_add(1, Ordering::Relaxed);
    let upgrade = hyper::upgrade::on(&mut req);
    tokio::task::spawn_local(async move {
        let _live = guard;
        match upgrade.await {
            Ok(upgraded) => match upgraded.downcast::<TokioIo<TcpStream>>() {
                Ok(parts) => conn::run(parts.io.into_inner(), parts.read_buf, env, mode).await,
                Err(_) => {
                    warn!("upgraded connection is not a TcpStream");
                    conn::abandon(env, mode);
                }
            },
            Err(e) => {
                debug!(%peer, error = %e, "upgrade did not complete");
                conn::abandon(env, mode);
            }
        }
    });
    let mut resp = Response::new(Full::new(Bytes::new()));
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = resp.headers_mut();
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(
        header::SEC_WEBSOCKET_ACCEPT,
        HeaderValue::from_str(&accept).expect("base64 is a valid header value"),
    );
    if let Some(p) = protocol {
        h.insert(header::SEC_WEBSOCKET_PROTOCOL, p);
    }
    resp
}
