//! A guest route's state shared by all workers: its program, its topic
//! namespace, how its guests' commands are applied to connections of the
//! route on any worker (found through the [`Registry`]), and the back-off
//! for client addresses whose messages keep tripping the deadline. The
//! worker side (batches, connections) is `slot`; calls run on each
//! worker's guest thread (`thread`).

use crate::kind::deploy::Versions;
use crate::kind::slot::{GuestSlot, Scheduler};
use crate::services::io::RouteIo;
use crate::services::kv::quota::{KvErrorReason, KvRefusals};
use crate::services::kv::KvStore;
use crate::services::realtime::GuestRealtime;
use crate::{Batch, Command, Commands, Fault, Program, Runner};
use bytes::Bytes;
use std::collections::HashMap;
use std::net::IpAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tracing::warn;
use weir_abi::Direction;
use weir_pubsub::Topics;
use weir_reactor::attached::{AttachedGuest, AttachedSlot, FilterSink};
use weir_reactor::kind::{RouteKind, WorkerRoute, WorkerSetup};
use weir_reactor::outbound::Outbound;
use weir_reactor::registry::Registry;
use weir_reactor::stats::GuestCounters;
use weir_realtime::verdict::RtCalls;
use weir_ws::encode::{self, message_opcode};

/// Deadline trips by one client address, within [`TRIP_WINDOW`], after which
/// it is refused new upgrades on the route.
pub const TRIPS_BEFORE_BACKOFF: u32 = 3;
/// Trips older than this are forgotten.
pub const TRIP_WINDOW: Duration = Duration::from_secs(60);
/// How long a repeat offender is refused (429 with Retry-After).
pub const BACKOFF: Duration = Duration::from_secs(30);
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

    /// A key-value write of a batch on `worker` was refused: counted,
    /// logged now and then, and told to the route's guest there.
    fn kv_refused(&self, worker: usize, key: &[u8], reason: KvErrorReason) {
        self.kv_refusals.note(&self.path, key, reason);
        self.io.kv_refused(worker, key, reason);
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

    /// The queue of `conn` if it is open on this route.
    fn lookup(&self, conn: u64) -> Option<Arc<Outbound>> {
        self.registry.outbound(conn, self.index)
    }

    /// Applies a guest's commands in order. Consecutive sends to one
    /// connection are written into one buffer and handed over once,
    /// compressed if the connection negotiated permessage-deflate, straight
    /// into the socket when the connection is not writing itself (see
    /// `Outbound::send_frames`).
    fn apply(
        &self,
        commands: &Commands,
        counters: &GuestCounters,
        worker: usize,
        program: &Program,
    ) {
        let (mut messages, mut bytes) = (0, 0);
        // A realtime route's consecutive publishes, handed to the core
        // together (in order) before the next other command.
        let mut rt_publishes = Vec::new();
        let mut pending: Option<u64> = None;
        let mut frames = Vec::new();
        let flush = |pending: &mut Option<u64>, frames: &mut Vec<u8>| {
            if let Some(conn) = pending.take() {
                if let Some(out) = self.lookup(conn) {
                    // Compressed for the connection if it negotiated
                    // permessage-deflate; the guest sent plain payloads.
                    out.send_frames(frames);
                }
                frames.clear();
            }
        };
        for command in commands.iter() {
            if let Some(calls) = &self.rt_calls {
                match command {
                    Command::RtSubscribeVerdict { call, code, .. } => {
                        calls.answer_subscribe(call, code)
                    }
                    Command::RtPublishVerdict { call, verdict, .. } => {
                        calls.answer_publish(call, verdict)
                    }
                    _ => {}
                }
                continue;
            }
            if let Some(rt) = &self.realtime {
                if !matches!(command, Command::Publish { .. }) && !rt_publishes.is_empty() {
                    rt.publish(std::mem::take(&mut rt_publishes));
                }
            }
            // A filter's forward toward the client is a send.
            let command = match command {
                Command::Forward {
                    conn,
                    direction: Direction::ToClient,
                    text,
                    payload,
                } if self.filter_links.is_some() => Command::Send {
                    conn,
                    text,
                    payload,
                },
                other => other,
            };
            if let Command::Send {
                conn,
                text,
                payload,
            } = command
            {
                if pending.is_some_and(|c| c != conn) {
                    flush(&mut pending, &mut frames);
                }
                pending = Some(conn);
                messages += 1;
                bytes += payload.len() as u64;
                encode::append_frame(&mut frames, message_opcode(text), payload);
                continue;
            }
            flush(&mut pending, &mut frames);
            match command {
                Command::Send { .. } => unreachable!("handled above"),
                Command::Close { conn, code, reason } => {
                    if let Some(out) = self.lookup(conn) {
                        out.close(code, reason);
                    }
                }
                Command::Publish {
                    topic,
                    text,
                    payload,
                    exclude,
                } => {
                    messages += 1;
                    bytes += payload.len() as u64;
                    if self.realtime.is_some() {
                        // The core delivers to every subscriber (`exclude`
                        // has no meaning for a channel's publication).
                        let payload = Bytes::copy_from_slice(payload);
                        rt_publishes.push((topic.to_string(), text, payload));
                        continue;
                    }
                    let frame = Bytes::from(encode::frame(message_opcode(text), payload));
                    self.topics.publish(topic, &frame, exclude);
                }
                Command::Subscribe { conn, topic } => {
                    if self
                        .realtime
                        .as_ref()
                        .is_some_and(|rt| !rt.may_subscribe(topic))
                    {
                        continue;
                    }
                    if let Some(out) = self.registry.subscribe(conn, self.index, topic) {
                        self.topics.subscribe(topic, conn, out);
                    }
                }
                // Applied by the runner before the commands reach here.
                Command::SetAttachment { .. } => {}
                Command::Unsubscribe { conn, topic } => {
                    if self.registry.unsubscribe(conn, self.index, topic) {
                        self.topics.unsubscribe(topic, conn);
                    }
                }
                // I/O for a connection is only for one of the route's own
                // that is still open; 0 is the route's own.
                Command::HttpRequest {
                    conn,
                    tag,
                    head,
                    body,
                } => {
                    if conn == 0 || self.lookup(conn).is_some() {
                        let policy = &program.config().outbound;
                        self.io.http(worker, conn, tag, head, body, policy);
                    }
                }
                Command::SetTimer {
                    conn,
                    tag,
                    delay_ms,
                } => {
                    if conn == 0 || self.lookup(conn).is_some() {
                        let delay = Duration::from_millis(delay_ms);
                        self.io.set_timer(worker, conn, tag, delay);
                    }
                }
                Command::CancelTimer { conn, tag } => self.io.cancel_timer(conn, tag),
                Command::KvSet { key, value, ttl_ms } => {
                    let done = match &self.kv {
                        Some(kv) => kv.set(key, value, ttl_ms),
                        None => Err(KvErrorReason::NoStore),
                    };
                    if let Err(reason) = done {
                        self.kv_refused(worker, key, reason);
                    }
                }
                Command::KvDelete { key } => {
                    let done = match &self.kv {
                        Some(kv) => kv.delete(key),
                        None => Err(KvErrorReason::NoStore),
                    };
                    if let Err(reason) = done {
                        self.kv_refused(worker, key, reason);
                    }
                }
                Command::RtSubscribeVerdict { .. } | Command::RtPublishVerdict { .. } => warn!(
                    route = &*self.path,
                    "a real-time verdict on a route that is not a namespace guest; ignored"
                ),
                Command::HistoryRead {
                    conn,
                    tag,
                    limit,
                    reverse,
                    channel,
                } => {
                    if conn == 0 || self.lookup(conn).is_some() {
                        match &self.realtime {
                            Some(rt) => {
                                rt.history(&self.io, worker, conn, tag, channel, limit, reverse)
                            }
                            None => self.io.deliver_event(
                                worker,
                                crate::services::realtime::not_realtime(conn, tag, false),
                            ),
                        }
                    }
                }
                Command::PresenceRead { conn, tag, channel } => {
                    if conn == 0 || self.lookup(conn).is_some() {
                        match &self.realtime {
                            Some(rt) => rt.presence(&self.io, worker, conn, tag, channel),
                            None => self.io.deliver_event(
                                worker,
                                crate::services::realtime::not_realtime(conn, tag, true),
                            ),
                        }
                    }
                }
                Command::Forward {
                    conn,
                    direction,
                    text,
                    payload,
                } => match &self.filter_links {
                    Some(links) if direction == Direction::ToUpstream => {
                        messages += 1;
                        bytes += payload.len() as u64;
                        links.forward_to_upstream(conn, text, payload);
                    }
                    Some(_) => unreachable!("forwards toward the client are sends"),
                    None => warn!(
                        route = &*self.path,
                        "forward on a route that is not a proxy filter; ignored"
                    ),
                },
            }
        }
        flush(&mut pending, &mut frames);
        if let (Some(rt), false) = (&self.realtime, rt_publishes.is_empty()) {
            rt.publish(rt_publishes);
        }
        counters.messages_out.add(messages);
        counters.bytes_out.add(bytes);
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
