//! A guest route's state shared by all workers: its program, its topic
//! namespace, how its guests' commands are applied to connections of the
//! route on any worker (found through the [`Registry`]), and the back-off
//! for client addresses whose messages keep tripping the deadline. The
//! worker side (batches, connections) is `slot`; calls run on each
//! worker's guest thread (`thread`).

use crate::kind::deploy::Versions;
use crate::kind::slot::{GuestSlot, Scheduler};
use crate::services::io::RouteIo;
use crate::services::kv::quota::KvRefusals;
use crate::services::kv::KvStore;
use crate::services::realtime::GuestRealtime;
use crate::{Batch, Fault, Program, Runner};
use std::collections::HashMap;
use std::net::IpAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tracing::warn;
use weir_pubsub::Topics;
use weir_reactor::attached::{AttachedGuest, AttachedSlot, FilterSink};
use weir_reactor::kind::{RouteKind, WorkerRoute, WorkerSetup};
use weir_reactor::registry::Registry;
use weir_realtime::verdict::RtCalls;

/// Deadline trips by one client address, within [`TRIP_WINDOW`], after which
/// it is refused new upgrades on the route.
pub(crate) const TRIPS_BEFORE_BACKOFF: u32 = 3;
/// Trips older than this are forgotten.
pub(crate) const TRIP_WINDOW: Duration = Duration::from_secs(60);
/// How long a repeat offender is refused (429 with Retry-After).
pub(crate) const BACKOFF: Duration = Duration::from_secs(30);
/// Addresses tracked per route at most: an attacker with many addresses
/// cannot grow the map without bound (past it, new addresses go untracked).
const OFFENDERS_MAX: usize = 10_000;

/// A guest route's state shared by all workers.
pub struct GuestRoute {
    /// The route's index: the registry lets its guest reach only its own
    /// connections.
    pub(crate) index: usize,
    /// The route path, for logs.
    pub(crate) path: Arc<str>,
    /// The program serving now and the ones kept for rollback.
    pub(crate) versions: Versions,
    /// The route's topic namespace (its own unless the routes file names a
    /// shared one).
    pub(crate) topics: Arc<Topics>,
    pub(crate) registry: Arc<Registry>,
    offenders: Mutex<HashMap<IpAddr, Offender>>,
    /// Batches that ran into the deadline.
    deadline_trips: AtomicU64,
    /// Upgrades refused to addresses in back-off.
    backoff_refused: AtomicU64,
    /// A reload removed the route: its instances are dropped once idle.
    retired: AtomicBool,
    /// Each worker's scheduler signal, once the route has a slot there: a
    /// removal wakes them so each closes its connections of the route.
    wakers: Mutex<Vec<Arc<Notify>>>,
    /// The route's outbound HTTP and timers (0.4.0 guests).
    pub(crate) io: Arc<RouteIo>,
    /// Where workers report their connections' state when a deploy asks
    /// (`kind::inherit`).
    pub(crate) census: crate::kind::census::Census,
    /// The route's key-value store (`kv`), if it has one.
    pub(crate) kv: Option<Arc<KvStore>>,
    /// Its writes refused (over quota, queue full, ...), by reason.
    pub(crate) kv_refusals: KvRefusals,
    /// The route is a proxy route's filter: its connections' links, for
    /// forwards toward the upstream and settling (`native::proxy::filter`).
    pub(crate) filter_links: Option<Arc<dyn FilterSink>>,
    /// The route is a real-time namespace's guest: where its verdicts go
    /// (`native::centrifugo::hook`). Its batches carry only questions of
    /// centrifugo connections; a failed batch answers them 100 and closes
    /// nothing, and commands other than verdicts are ignored.
    pub(crate) rt_calls: Option<Arc<RtCalls>>,
    /// `realtime = true`: the route's topics are the real-time core's
    /// channels (`services::realtime`).
    pub(crate) realtime: Option<Arc<GuestRealtime>>,
}

/// One client address's recent deadline trips.
struct Offender {
    trips: u32,
    first: Instant,
    refused_until: Option<Instant>,
}

impl GuestRoute {
    pub fn new(
        index: usize,
        program: Arc<Program>,
        topics: Arc<Topics>,
        registry: Arc<Registry>,
    ) -> GuestRoute {
        GuestRoute {
            index,
            io: RouteIo::new(program.route.clone()),
            kv: None,
            kv_refusals: KvRefusals::default(),
            path: program.route.clone(),
            versions: Versions::new(program),
            topics,
            registry,
            offenders: Mutex::default(),
            deadline_trips: AtomicU64::new(0),
            backoff_refused: AtomicU64::new(0),
            retired: AtomicBool::new(false),
            wakers: Mutex::default(),
            census: Default::default(),
            filter_links: None,
            rt_calls: None,
            realtime: None,
        }
    }

    /// The route as a real-time namespace's guest.
    pub fn with_rt_calls(mut self, calls: Arc<RtCalls>) -> Self {
        self.rt_calls = Some(calls);
        self
    }

    /// The route with its topics the real-time core's channels.
    pub fn with_realtime(mut self, realtime: Option<Arc<GuestRealtime>>) -> Self {
        self.realtime = realtime;
        self
    }

    /// The route's side of the real-time core, if it is `realtime = true`.
    pub fn realtime(&self) -> Option<&Arc<GuestRealtime>> {
        self.realtime.as_ref()
    }

    /// The route as a proxy route's filter.
    pub fn with_filter_links(mut self, links: Arc<dyn FilterSink>) -> Self {
        self.filter_links = Some(links);
        self
    }

    /// The route with key-value store `kv`.
    pub fn with_kv(mut self, kv: Option<Arc<KvStore>>) -> Self {
        self.kv = kv;
        self
    }

    /// The route's outbound HTTP and timers.
    /// The route's path, as the routes file names it.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The route's key-value store, when it has one.
    pub fn kv(&self) -> Option<&Arc<KvStore>> {
        self.kv.as_ref()
    }

    pub fn io(&self) -> &Arc<RouteIo> {
        &self.io
    }

    /// The program serving now.
    pub fn program(&self) -> Arc<Program> {
        self.versions.current()
    }

    /// The route's versions: deploy, rollback, list.
    pub fn versions(&self) -> &Versions {
        &self.versions
    }

    /// The route's refused key-value writes.
    pub fn kv_refusals(&self) -> &KvRefusals {
        &self.kv_refusals
    }

    /// Batches that ran into the deadline so far.
    pub fn deadline_trips(&self) -> u64 {
        self.deadline_trips.load(Ordering::Relaxed)
    }

    /// A reload removed the route: each worker with a slot for it closes
    /// its connections of the route (1001) at its next turn, after the
    /// batches already pending there, and drops its instance.
    pub fn retire(&self) {
        self.retired.store(true, Ordering::Release);
        for waker in self.wakers.lock().expect("wakers lock").iter() {
            waker.notify_one();
        }
    }

    /// A worker's scheduler signal, for [`GuestRoute::retire`].
    pub(crate) fn add_waker(&self, waker: Arc<Notify>) {
        self.wakers.lock().expect("wakers lock").push(waker);
    }

    /// Every worker's scheduler signal (one per slot of the route).
    pub(crate) fn wakers(&self) -> Vec<Arc<Notify>> {
        self.wakers.lock().expect("wakers lock").clone()
    }

    pub(crate) fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }

    /// Upgrades refused to addresses in back-off so far.
    pub fn backoff_refused(&self) -> u64 {
        self.backoff_refused.load(Ordering::Relaxed)
    }

    /// How long `ip` is still refused new upgrades, if it is (and counts the
    /// refusal).
    pub(crate) fn backoff_left(&self, ip: IpAddr) -> Option<Duration> {
        let offenders = self.offenders.lock().expect("offenders lock");
        let until = offenders.get(&ip)?.refused_until?;
        let left = until.checked_duration_since(Instant::now())?;
        self.backoff_refused.fetch_add(1, Ordering::Relaxed);
        Some(left)
    }

    /// A batch carrying a message from `ip` ran into the deadline.
    fn record_trip(&self, ip: IpAddr) {
        let now = Instant::now();
        let mut offenders = self.offenders.lock().expect("offenders lock");
        if offenders.len() >= OFFENDERS_MAX && !offenders.contains_key(&ip) {
            offenders.retain(|_, o| {
                o.first + TRIP_WINDOW > now || o.refused_until.is_some_and(|u| u > now)
            });
            if offenders.len() >= OFFENDERS_MAX {
                return;
            }
        }
        let o = offenders.entry(ip).or_insert(Offender {
            trips: 0,
            first: now,
            refused_until: None,
        });
        if now.duration_since(o.first) > TRIP_WINDOW {
            *o = Offender {
                trips: 0,
                first: now,
                refused_until: None,
            };
        }
        o.trips += 1;
        if o.trips >= TRIPS_BEFORE_BACKOFF {
            warn!(route = &*self.path, %ip, ?BACKOFF, "client keeps tripping the guest deadline; refusing its upgrades");
            *o = Offender {
                trips: 0,
                first: now,
                refused_until: Some(now + BACKOFF),
            };
        }
    }

    /// One guest call, and what follows from its answer, on the serving
    /// version (a deploy takes effect here, between batches). Runs on the
    /// worker or its guest thread for the route.
    pub(crate) fn run_batch(&self, runner: &mut Runner, batch: &mut Batch, worker: usize) {
        self.versions.refresh(runner);
        let result = runner.handle(batch);
        let program = runner.program();
        program
            .stats
            .call(worker, batch.len(), runner.last_call().0.as_micros() as u64);
        match result {
            Ok(commands) => self.apply(&commands, program.stats.shard(worker), worker, program),
            Err(fault) if self.rt_calls.is_some() => {
                // The connections asking are centrifugo clients: their
                // questions are answered 100 below, they stay open.
                program.stats.shard(worker).faults[fault.cause()].add(1);
                if matches!(fault, Fault::Deadline(_)) {
                    self.deadline_trips.fetch_add(1, Ordering::Relaxed);
                }
                warn!(route = &*self.path, cause = %fault, questions = batch.rt_calls().count(),
                    "a namespace guest failed a batch; instance replaced, its questions answered 100");
            }
            Err(fault) => {
                program.stats.shard(worker).faults[fault.cause()].add(1);
                // The instance is gone; the connections whose events it was
                // handling cannot know what was processed: close them.
                let mut affected: Vec<u64> = batch.connections().collect();
                affected.sort_unstable();
                affected.dedup();
                // Ids of the first few closed connections (a batch can
                // carry thousands).
                let shown: Vec<_> = affected.iter().take(8).collect();
                warn!(route = &*self.path, cause = %fault,
                    closed = affected.len(), code = fault.close_code(), ids = ?shown,
                    "guest failed a batch; instance replaced, its connections closed");
                let deadline = matches!(fault, Fault::Deadline(_));
                if deadline {
                    self.deadline_trips.fetch_add(1, Ordering::Relaxed);
                }
                // Trips are counted before any close goes out: a client
                // that reconnects the moment it reads its 1011 must find
                // them (regression: guest_cpu.rs
                // `repeat_offenders_get_429_with_retry_after` failed under
                // load when the guest thread was preempted between the
                // close and the count).
                if deadline {
                    let mut ips: Vec<IpAddr> = affected
                        .iter()
                        .filter_map(|&conn| self.registry.peer_ip(conn))
                        .collect();
                    ips.sort_unstable();
                    ips.dedup();
                    for ip in ips {
                        self.record_trip(ip);
                    }
                }
                for conn in affected {
                    if let Some(out) = self.lookup(conn) {
                        out.close(fault.close_code(), "guest handler failed");
                    }
                }
            }
        }
        // A filter's messages have gone on or been dropped: closes that
        // wait behind them may follow.
        if let Some(links) = &self.filter_links {
            links.settle(&mut batch.proxy_messages());
        }
        // A namespace guest's questions it did not answer fail.
        if let Some(calls) = &self.rt_calls {
            calls.settle(batch.rt_calls());
        }
    }
}

/// A guest route as a route kind: the shared route itself, so every
/// worker's slot points at it, and back-off and counters are the route's,
/// not a worker's.
pub struct GuestKind(pub Arc<GuestRoute>);

impl RouteKind for GuestKind {
    fn on_worker(&self, worker: &WorkerSetup) -> Rc<dyn WorkerRoute> {
        let scheduler = worker
            .service::<Scheduler>()
            .expect("every worker runs a guest scheduler");
        GuestSlot::new(self.0.clone(), &scheduler)
    }
}

/// A guest attached to a native route (a proxy's filter, a namespace's
/// hook): the same slot per worker as a guest route's.
impl AttachedGuest for GuestKind {
    fn on_worker(&self, worker: &WorkerSetup) -> Rc<dyn AttachedSlot> {
        let scheduler = worker
            .service::<Scheduler>()
            .expect("every worker runs a guest scheduler");
        GuestSlot::new(self.0.clone(), &scheduler)
    }
}
