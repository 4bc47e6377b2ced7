//! The one map of live WebSocket connections: id → route, outbound queue and
//! topic subscriptions. Shutdown closes connections through it, guests send
//! to connections of their route through it, topic subscriptions are dropped
//! through it when a connection ends, and `/metrics` reads it.
//!
//! A connection id carries the worker that runs it (and, later, the node):
//! the map is sharded by worker, so a lookup locks only the owning worker's
//! shard, taken by that worker once per open and close and by guests per
//! run of sends. No lock is shared by every worker on the message path.

use crate::outbound::Outbound;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Identifies one connection: unique per process, never reused while it
/// runs, never 0 (0 means "no connection" to guests).
pub type ConnId = u64;

/// The close reason (with 1001) of connections on a route a reload removed
/// ([`Registry::close_route`]).
pub const ROUTE_REMOVED: &str = "route removed";

/// Bits of an id that count connections within one worker.
const SEQ_BITS: u32 = 40;
/// Bits that name the worker (up to 4096 workers).
const WORKER_BITS: u32 = 12;
/// The node's bits, above the worker's: 0 until weir runs as a cluster,
/// when a node id keeps ids unique across gateway processes.
pub const NODE_SHIFT: u32 = SEQ_BITS + WORKER_BITS;

/// The id of `worker`'s `seq`-th connection (`seq` starts at 1).
pub fn conn_id(worker: usize, seq: u64) -> ConnId {
    debug_assert!(seq > 0 && seq < 1 << SEQ_BITS);
    ((worker as u64) << SEQ_BITS) | seq
}

/// The worker that runs connection `id`.
pub fn worker_of(id: ConnId) -> usize {
    ((id >> SEQ_BITS) & ((1 << WORKER_BITS) - 1)) as usize
}

/// What the gateway knows of one live connection.
struct Entry {
    /// Index of the connection's route: a guest may reach only its own.
    route: usize,
    outbound: Arc<Outbound>,
    /// The client's address (for a guest route's back-off).
    ip: IpAddr,
    /// Topics the connection subscribed to, unsubscribed when it ends.
    topics: Vec<Box<str>>,
}

/// What the open connections' outbound queues hold, for `/metrics`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct QueueStats {
    pub connections: usize,
    pub queued_bytes: usize,
    /// The most any one connection has queued.
    pub max_queued_bytes: usize,
}

pub struct Registry {
    /// One map per worker, indexed by [`worker_of`].
    shards: Vec<Mutex<HashMap<ConnId, Entry>>>,
    /// Shutdown began: connections that open now are drained at once.
    closing: AtomicBool,
}

impl Registry {
    pub fn new(workers: usize) -> Registry {
        assert!(workers < 1 << WORKER_BITS, "at most 4095 workers");
        Registry {
            shards: (0..workers.max(1)).map(|_| Mutex::default()).collect(),
            closing: AtomicBool::new(false),
        }
    }

    fn shard(&self, id: ConnId) -> MutexGuard<'_, HashMap<ConnId, Entry>> {
        self.shards[worker_of(id) % self.shards.len()]
            .lock()
            .expect("registry lock")
    }

    /// Workers the registry has a shard for.
    pub fn workers(&self) -> usize {
        self.shards.len()
    }

    /// A connection opened on `route`.
    pub fn insert(&self, id: ConnId, route: usize, outbound: Arc<Outbound>, ip: IpAddr) {
        let mut shard = self.shard(id);
        // Checked under the lock: a connection opening while shutdown
        // begins is either drained here or by `close_all`.
        if self.closing.load(Ordering::Acquire) {
            outbound.drain();
        }
        let entry = Entry {
            route,
            outbound,
            ip,
            topics: Vec::new(),
        };
        shard.insert(id, entry);
    }

    /// The connection ended.
    pub fn remove(&self, id: ConnId) {
        self.shard(id).remove(&id);
    }

    /// Takes the topics connection `id` is subscribed to (when it closes:
    /// its route unsubscribes them).
    pub fn take_topics(&self, id: ConnId) -> Vec<Box<str>> {
        let mut shard = self.shard(id);
        shard
            .get_mut(&id)
            .map(|e| std::mem::take(&mut e.topics))
            .unwrap_or_default()
    }

    /// The queue of connection `id` if it is open on `route`; None for a
    /// connection of another route, so no route reaches another's clients.
    pub fn outbound(&self, id: ConnId, route: usize) -> Option<Arc<Outbound>> {
        let shard = self.shard(id);
        let entry = shard.get(&id).filter(|e| e.route == route)?;
        Some(entry.outbound.clone())
    }

    /// The client address of connection `id`, while it is open.
    pub fn peer_ip(&self, id: ConnId) -> Option<IpAddr> {
        self.shard(id).get(&id).map(|e| e.ip)
    }

    /// Records a subscription of connection `id` (of `route`); returns its
    /// queue, or None when the connection is not open on `route`.
    pub fn subscribe(&self, id: ConnId, route: usize, topic: &str) -> Option<Arc<Outbound>> {
        let mut shard = self.shard(id);
        let entry = shard.get_mut(&id).filter(|e| e.route == route)?;
        if !entry.topics.iter().any(|t| &**t == topic) {
            entry.topics.push(topic.into());
        }
        Some(entry.outbound.clone())
    }

    /// Forgets a subscription; false when there was none.
    pub fn unsubscribe(&self, id: ConnId, route: usize, topic: &str) -> bool {
        let mut shard = self.shard(id);
        let Some(entry) = shard.get_mut(&id).filter(|e| e.route == route) else {
            return false;
        };
        let before = entry.topics.len();
        entry.topics.retain(|t| &**t != topic);
        entry.topics.len() != before
    }

    /// Asks every open connection, and every one that opens later, to
    /// close with 1012 at once. Only the first call does anything.
    pub fn close_all(&self) {
        if self.begin_shutdown() {
            for worker in 0..self.shards.len() {
                self.drain_ids(&self.ids_on(worker, None));
            }
        }
    }

    /// Shutdown began: every connection that opens from now on is drained
    /// at once (the ones open now are closed by the caller, in slices:
    /// [`drain_ids`](Self::drain_ids)). True for the first call.
    pub fn begin_shutdown(&self) -> bool {
        // Each shard's lock orders this against `insert`'s check.
        let first = !self.closing.swap(true, Ordering::AcqRel);
        for shard in &self.shards {
            drop(shard.lock().expect("registry lock"));
        }
        first
    }

    /// The ids of `worker`'s open connections (of route `route` only, when
    /// given), for a paced drain to close a slice at a time.
    pub fn ids_on(&self, worker: usize, route: Option<usize>) -> Vec<ConnId> {
        let shard = self.shards[worker % self.shards.len()]
            .lock()
            .expect("registry lock");
        shard
            .iter()
            .filter(|(_, e)| route.is_none_or(|r| e.route == r))
            .map(|(&id, _)| id)
            .collect()
    }

    /// The shutdown's drain for each of `ids` still open (answer what the
    /// client sent, then 1012).
    pub fn drain_ids(&self, ids: &[ConnId]) {
        for &id in ids {
            if let Some(e) = self.shard(id).get(&id) {
                e.outbound.drain();
            }
        }
    }

    /// Closes each of `ids` still open on `route` with `code` and `reason`
    /// (after what is queued for it).
    pub fn close_ids(&self, ids: &[ConnId], route: usize, code: u16, reason: &str) {
        for &id in ids {
            if let Some(e) = self.shard(id).get(&id).filter(|e| e.route == route) {
                e.outbound.close(code, reason);
            }
        }
    }

    /// Asks every open connection of route `route` to close (a reload
    /// removed the route); the close goes after what is already queued.
    pub fn close_route(&self, route: usize, code: u16, reason: &str) {
        for worker in 0..self.shards.len() {
            self.close_route_on(worker, route, code, reason);
        }
    }

    /// [`Registry::close_route`] for the connections of one worker.
    pub fn close_route_on(&self, worker: usize, route: usize, code: u16, reason: &str) {
        let shard = self.shards[worker % self.shards.len()]
            .lock()
            .expect("registry lock");
        for entry in shard.values().filter(|e| e.route == route) {
            entry.outbound.close(code, reason);
        }
    }

    pub fn stats(&self) -> QueueStats {
        let mut stats = QueueStats::default();
        for shard in &self.shards {
            let shard = shard.lock().expect("registry lock");
            stats.connections += shard.len();
            for entry in shard.values() {
                let queued = entry.outbound.queued_bytes();
                stats.queued_bytes += queued;
                stats.max_queued_bytes = stats.max_queued_bytes.max(queued);
            }
        }
        stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOCAL: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    #[test]
    fn ids_carry_their_worker() {
        let id = conn_id(3, 17);
        assert_eq!(worker_of(id), 3);
        assert_ne!(conn_id(0, 1), 0);
        assert_ne!(conn_id(1, 1), conn_id(2, 1));
        assert!(id < 1 << NODE_SHIFT);
    }

    /// Isolation: a connection is reachable only through its own route.
    #[test]
    fn lookups_are_limited_to_the_route() {
        let reg = Registry::new(2);
        let id = conn_id(1, 1);
        reg.insert(id, 0, Arc::new(Outbound::new(1024)), LOCAL);
        assert_eq!(reg.peer_ip(id), Some(LOCAL));
        assert!(reg.outbound(id, 0).is_some());
        assert!(reg.outbound(id, 1).is_none());
        assert!(reg.subscribe(id, 1, "lobby").is_none());
        assert!(reg.subscribe(id, 0, "lobby").is_some());
        assert!(reg.subscribe(id, 0, "lobby").is_some());
        assert_eq!(reg.stats().connections, 1);
        assert_eq!(reg.take_topics(id), vec![Box::<str>::from("lobby")]);
        reg.remove(id);
        assert!(reg.outbound(id, 0).is_none());
    }

    /// A paced drain: ids listed per worker and route, closed a slice at
    /// a time; a connection opening after the drain began is drained at once.
    #[test]
    fn a_paced_drain_closes_the_ids_it_is_given() {
        let reg = Registry::new(2);
        let outs: Vec<_> = (1..=4).map(|_| Arc::new(Outbound::new(1024))).collect();
        for (i, out) in outs.iter().enumerate() {
            reg.insert(conn_id(i % 2, i as u64 + 1), i / 2, out.clone(), LOCAL);
        }
        let mut ids = reg.ids_on(0, None);
        ids.sort();
        assert_eq!(ids, vec![conn_id(0, 1), conn_id(0, 3)]);
        assert_eq!(reg.ids_on(1, Some(1)), vec![conn_id(1, 4)]);
        assert!(reg.begin_shutdown());
        assert!(!reg.begin_shutdown());
        reg.drain_ids(&ids[..1]);
        assert!(matches!(
            outs[0].try_recv(),
            Some(crate::outbound::OutMsg::Drain)
        ));
        assert!(outs[2].try_recv().is_none(), "not in this slice");
        reg.close_ids(&[conn_id(1, 4), conn_id(1, 2)], 1, 1001, "route drained");
        assert!(matches!(
            outs[3].try_recv(),
            Some(crate::outbound::OutMsg::Close(1001, _))
        ));
        assert!(outs[1].try_recv().is_none(), "another route's");
        let late = Arc::new(Outbound::new(1024));
        reg.insert(conn_id(0, 9), 0, late.clone(), LOCAL);
        assert!(matches!(
            late.try_recv(),
            Some(crate::outbound::OutMsg::Drain)
        ));
    }

    #[test]
    fn close_all_drains_open_and_later_connections() {
        let reg = Registry::new(1);
        let early = Arc::new(Outbound::new(1024));
        reg.insert(conn_id(0, 1), 0, early.clone(), LOCAL);
        reg.close_all();
        let late = Arc::new(Outbound::new(1024));
        reg.insert(conn_id(0, 2), 0, late.clone(), LOCAL);
        for out in [early, late] {
            assert!(matches!(
                out.try_recv(),
                Some(crate::outbound::OutMsg::Drain)
            ));
        }
    }
}
