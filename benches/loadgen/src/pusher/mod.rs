//! The Pusher Channels modes of `weir-load` (issue 38's benchmarks), the
//! same client against any Pusher protocol 7 server (weir's `pusher` route,
//! sockudo, soketi): `fanout` (an event triggered through the signed HTTP
//! API into C subscribers of one channel), `client-events` (every member of
//! a presence channel sends `client-*` events to the others), `idle` (the
//! server's resident memory per idle subscribed connection) and `storm` (C
//! connected clients subscribe to one presence channel at once).
//!
//! Every delivery is verified (who sent it, its sequence, its bytes) and
//! what did not arrive is counted as lost; the scenario's report says
//! `ok: false` for any loss or error. The client runs on one tokio thread
//! (`socket`: one connection; `trigger`: the HTTP API caller).

pub mod client_events;
pub mod fanout;
pub mod idle;
pub mod socket;
pub mod storm;
pub mod trigger;

use crate::sys;
use serde_json::Value;
use socket::Socket;
use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Connections opened at once while a scenario sets up (the storm opens
/// its connections this way too; only its subscriptions go at once): a
/// server's accept backlog is not what is measured.
pub const OPEN_AT_ONCE: usize = 256;

/// How long fanout and client-events wait between the last confirmed
/// subscription and the first event: a server may confirm a subscription
/// (sockudo 5.2 does) before its broadcasts reach the new subscriber, and
/// an event sent in between would count as lost though nothing is wrong
/// with the steady state measured.
pub const SETTLE: Duration = Duration::from_secs(1);

/// How long the scenarios wait after the measured window for deliveries
/// still on their way before counting the rest as lost.
pub const DRAIN: Duration = Duration::from_secs(15);

/// The app and server every scenario talks to, and the load's shape.
#[derive(Clone, Debug)]
pub struct Options {
    /// The server's listener (WebSocket and HTTP API on the same port).
    pub addr: SocketAddr,
    pub app_id: String,
    pub key: String,
    pub secret: String,
    /// Subscribers (fanout), members (client-events, storm), connections (idle).
    pub connections: usize,
    /// fanout: events ahead of the slowest subscriber; client-events:
    /// events a member sends ahead of the slowest other member.
    pub window: u64,
    /// Bytes of each event's data.
    pub size: usize,
    /// fanout: at most this many triggers per second.
    pub rate: Option<u64>,
    pub warmup: Duration,
    pub duration: Duration,
    /// The server's processes, whose CPU time (and the first one's RSS) is read.
    pub server_pids: Vec<u32>,
    /// idle: connections per channel.
    pub room_size: usize,
    /// The channel (fanout, idle: a prefix), or the presence channel.
    pub channel: String,
}

impl Options {
    pub fn app(&self) -> weir_pusher::AppKey<'_> {
        weir_pusher::AppKey {
            key: &self.key,
            secret: self.secret.as_bytes(),
        }
    }

    /// The connection path pusher-js uses.
    pub fn path(&self) -> String {
        format!("/app/{}?protocol=7&client=weir-load&version=1", self.key)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    Fanout,
    ClientEvents,
    Idle,
    Storm,
}

/// Runs one scenario on a one-thread runtime; the report is the RESULT
/// line's JSON (with `ok`).
pub fn run(scenario: Scenario, o: Options) -> Result<Value, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    let local = tokio::task::LocalSet::new();
    let o = Rc::new(o);
    local.block_on(&rt, async move {
        match scenario {
            Scenario::Fanout => fanout::run(o).await,
            Scenario::ClientEvents => client_events::run(o).await,
            Scenario::Idle => idle::run(o).await,
            Scenario::Storm => storm::run(o).await,
        }
    })
}

/// The measured phases the tasks look at.
pub const WARMUP: u8 = 0;
pub const MEASURE: u8 = 1;
pub const DONE: u8 = 2;

/// The server's CPU time (sum over its processes), None if one is unreadable.
pub fn server_cpu_ns(pids: &[u32]) -> Option<u64> {
    if pids.is_empty() {
        return None;
    }
    pids.iter().map(|&p| sys::proc_cpu_ns(p).ok()).sum()
}

/// CPU clocks over the measured window.
pub struct Window {
    pub secs: f64,
    pub server_ns: Option<u64>,
    pub client_ns: u64,
}

/// Sleeps through warm-up, flips `phase` to MEASURE for the window, then to DONE.
pub async fn measure(o: &Options, phase: &Cell<u8>) -> Window {
    tokio::time::sleep(o.warmup).await;
    let s0 = server_cpu_ns(&o.server_pids);
    let c0 = sys::self_cpu_ns();
    let t0 = Instant::now();
    phase.set(MEASURE);
    tokio::time::sleep(o.duration).await;
    phase.set(DONE);
    let secs = t0.elapsed().as_secs_f64();
    let s1 = server_cpu_ns(&o.server_pids);
    Window {
        secs,
        server_ns: s0.zip(s1).map(|(a, b)| b.saturating_sub(a)),
        client_ns: sys::self_cpu_ns().saturating_sub(c0),
    }
}

/// What a connection subscribes to as it opens: the message and the channel.
pub type Subscription = fn(&Options, usize, &Socket) -> (String, String);

/// Opens `n` connections, `OPEN_AT_ONCE` at a time, each subscribed as
/// `subscribe` says (confirmed by `subscription_succeeded`) unless None.
pub async fn open_many(
    o: &Rc<Options>,
    n: usize,
    subscribe: Option<Subscription>,
) -> Result<Vec<Socket>, String> {
    let mut out = Vec::with_capacity(n);
    let path = o.path();
    let host = o.addr.to_string();
    for start in (0..n).step_by(OPEN_AT_ONCE) {
        let mut batch = Vec::new();
        for i in start..(start + OPEN_AT_ONCE).min(n) {
            let (o, path, host) = (o.clone(), path.clone(), host.clone());
            batch.push(tokio::task::spawn_local(async move {
                let mut s = Socket::open(o.addr, &host, &path, 0x9e37 + i as u64).await?;
                if let Some(sub) = subscribe {
                    let (msg, channel) = sub(&o, i, &s);
                    s.send(&msg).await?;
                    s.await_subscribed(&channel).await?;
                }
                Ok::<_, String>(s)
            }));
        }
        for (k, h) in batch.into_iter().enumerate() {
            let s = h
                .await
                .map_err(|e| format!("connection {} task: {e}", start + k))?
                .map_err(|e| format!("connection {}: {e}", start + k))?;
            out.push(s);
        }
    }
    Ok(out)
}

/// Per-unit figure, None when there were no units or no reading.
pub fn per(ns: Option<u64>, units: u64) -> Option<f64> {
    (units > 0).then_some(())?;
    Some(ns? as f64 / units as f64)
}

/// Errors kept for the report (the first few of many identical ones).
pub const MAX_ERRORS_KEPT: usize = 8;

pub fn keep_error(errors: &std::cell::RefCell<Vec<String>>, e: String) {
    let mut v = errors.borrow_mut();
    if v.len() < MAX_ERRORS_KEPT {
        v.push(e);
    }
}
