//! One worker thread: its runtime, its listener's accept loop, the paced
//! drain at shutdown, and the turns it gives its guests outside the runtime (or
//! hands to its guest thread, see `guest/kind/slot.rs`).

use super::http::serve_http;
use super::{Shared, Shutdown};
use crate::routes::Routes;
use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tracing::{info, warn};
use weir_guest_runtime::Scheduler;
use weir_reactor::buffer::BufPool;
use weir_reactor::idle::IdleWheel;
use weir_reactor::kind::{WorkerRoute, WorkerSetup};
use weir_reactor::plane::{Plane, PlaneIo};
use weir_reactor::rate::Pace;
use weir_reactor::registry::conn_id;

/// Pause after a failed accept (e.g. out of file descriptors) so the worker
/// does not spin while the condition lasts.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(20);
/// How often a draining worker checks whether every connection has closed.
const DRAIN_POLL: Duration = Duration::from_millis(10);

/// One worker's state, shared by its tasks (single thread: `Rc`, no locks).
pub(super) struct Worker {
    pub shared: Arc<Shared>,
    pub index: usize,
    pub pool: Rc<BufPool>,
    /// The idle deadlines of this worker's connections.
    pub idle: Rc<IdleWheel>,
    /// The worker's plane (`[server] io = "epoll"`).
    pub plane: Option<Rc<Plane>>,
    /// Each route on this worker, by route index (routes a reload added
    /// are set up here at their first request).
    routes: RefCell<Vec<Rc<dyn WorkerRoute>>>,
    setup: WorkerSetup,
    /// Connections this worker has opened: the sequence in their ids.
    opened: Cell<u64>,
}

impl Worker {
    /// The id of the next connection this worker runs.
    pub fn next_conn_id(&self) -> u64 {
        let seq = self.opened.get() + 1;
        self.opened.set(seq);
        conn_id(self.index, seq)
    }

    /// Route `index` of `table` on this worker.
    pub fn route(&self, index: usize, table: &Routes) -> Rc<dyn WorkerRoute> {
        let mut routes = self.routes.borrow_mut();
        while routes.len() <= index {
            let route = &table.routes[routes.len()];
            routes.push(route.kind.on_worker(&self.setup));
        }
        routes[index].clone()
    }
}

pub(super) fn run(
    index: usize,
    listener: std::net::TcpListener,
    shared: Arc<Shared>,
    shutdown: Shutdown,
) {
    let Some(runtime) = super::thread_runtime("worker") else {
        return;
    };
    let local = tokio::task::LocalSet::new();
    local.spawn_local(shared.routes.load().fanout.clone().run(index));
    let guests = Rc::new(Scheduler::new(index));
    let setup = WorkerSetup::new(index).with(guests.clone());
    let routes = shared
        .routes
        .load()
        .routes
        .iter()
        .map(|r| r.kind.on_worker(&setup))
        .collect();
    let scheduler = guests.clone();
    let idle = Rc::new(IdleWheel::default());
    local.spawn_local(idle.clone().run());
    let (io, plane_stats) = (shared.front.io, shared.planes[index].clone());
    let mut main = local.spawn_local(async move {
        let plane = match io {
            weir_config::Io::Tasks => None,
            // `Auto` was resolved at start (`shared.rs`, `resolve_io`).
            weir_config::Io::Epoll | weir_config::Io::Auto => {
                start_plane(plane_stats, PlaneIo::Epoll)
            }
            weir_config::Io::Uring => start_plane(plane_stats, PlaneIo::Uring),
        };
        let listener = match TcpListener::from_std(listener) {
            Ok(l) => l,
            Err(e) => {
                warn!(error = %e, "worker listener failed");
                return;
            }
        };
        let worker = Rc::new(Worker {
            routes: RefCell::new(routes),
            setup,
            index,
            pool: Rc::new(BufPool::new(shared.pools[index].clone())),
            idle,
            plane,
            opened: Cell::new(0),
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
        let window = weir_reactor::rate::drain_window(shared.drain.drain_timeout);
        if !shared.drain.draining.swap(true, Ordering::AcqRel) {
            info!(
                connections = shared.registry.stats().connections,
                timeout = ?shared.drain.drain_timeout,
                ?window,
                "draining: new requests get 503, open connections are closed with 1012 in slices over the window"
            );
        }
        // Batches of messages already read go to their guests first, so
        // their replies are queued before the 1012.
        scheduler.wake();
        tokio::task::yield_now().await;
        drain_paced(&worker, &listener, &shutdown, window).await;
    });
    // The worker leaves the runtime to run guests (see guest/kind/slot.rs): it
    // returns from block_on when guest work is pending, after the other
    // ready tasks had a turn to add their events to the batch.
    loop {
        let finished = local.block_on(&runtime, async {
            tokio::select! {
                biased;
                _ = &mut main => true,
                _ = guests.wait() => false,
            }
        });
        guests.run_pending();
        if finished {
            break;
        }
    }
    // Lets the guest thread finish its queue, then joins it.
    guests.stop();
}

/// The shutdown's drain on one worker: its open WebSockets are closed
/// (1012) in slices spread over `window` ([`Pace`]: a few close at once,
/// many are spread so their clients do not all reconnect at the same
/// moment), while the listener stays open so health checks and new clients
/// get a 503 rather than a refused connection; it ends when every
/// connection of the gateway has closed, or at `drain_timeout`.
async fn drain_paced(
    worker: &Rc<Worker>,
    listener: &TcpListener,
    shutdown: &Shutdown,
    window: Duration,
) {
    let shared = &worker.shared;
    shared.registry.begin_shutdown();
    let ids = shared.registry.ids_on(worker.index, None);
    let mut pace = Pace::new(ids.len(), window);
    let start = Instant::now();
    let deadline = start + shared.drain.drain_timeout;
    let (mut next_slice, mut closed) = (start, 0);
    loop {
        let now = Instant::now();
        if !pace.done() && now >= next_slice {
            let n = pace.next_slice();
            shared.registry.drain_ids(&ids[closed..closed + n]);
            closed += n;
            next_slice += Pace::SLICE;
        }
        if pace.done() && shared.drain.tcp_open.load(Ordering::Acquire) == 0 {
            return;
        }
        if now >= deadline {
            warn!(
                remaining = shared.drain.tcp_open.load(Ordering::Acquire),
                "drain timeout: dropping the connections still open"
            );
            return;
        }
        let wake = match pace.done() {
            true => now + DRAIN_POLL,
            false => next_slice.min(now + DRAIN_POLL),
        };
        tokio::select! {
            accepted = listener.accept() => accept(accepted, worker, shutdown).await,
            _ = tokio::time::sleep_until(wake) => {}
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
            // Out of descriptors (EMFILE/ENFILE) lasts until connections
            // close: back off, and say so once per interval, not per try.
            if let Some((n, secs)) = worker.shared.counts.accept_failures.note() {
                warn!(error = %e, "accept failed {n} times in the last {secs} s; backing off \
                    (EMFILE: raise `ulimit -n` or lower max_connections)");
            }
            tokio::time::sleep(ACCEPT_BACKOFF).await;
        }
    }
}

/// The calling worker's plane on `io`, its loop spawned; None (connections
/// run as tasks) where it cannot be set up.
fn start_plane(stats: Arc<weir_reactor::plane::PlaneStats>, io: PlaneIo) -> Option<Rc<Plane>> {
    match Plane::new(stats, io) {
        Ok(plane) => {
            tokio::task::spawn_local(plane.clone().run());
            Some(plane)
        }
        Err(e) => {
            warn!(error = %e, ?io, "plane unavailable; connections run as tasks");
            None
        }
    }
}
