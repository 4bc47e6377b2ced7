//! Per-route counters, kept per worker and summed when `/metrics` is read:
//! nothing on the message path contends on a line another worker writes.
//! [`RouteStats`] is a route's connections (accepted, closed by code) and
//! messages in; [`GuestStats`] is one version of a guest route (calls, call
//! duration and batch size histograms, messages out, faults by cause).
//!
//! A connection's counters are written only by its worker thread, once per
//! read batch (plain load + store, no locked instruction). A guest
//! version's counters are written once per batch by whoever holds the
//! route's runner (the worker or its guest thread), with a relaxed
//! `fetch_add` on the worker's own shard.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Close codes counted on their own; the rest go under "other". 1005 is a
/// client's close without a code; 1006, a connection that ended without a
/// close frame either way.
pub const CLOSE_CODES: [u16; 13] = [
    1000, 1001, 1002, 1003, 1005, 1006, 1007, 1008, 1009, 1011, 1012, 1013, 1014,
];

/// What the overload controls refused on a route, as `/metrics` labels it
/// (`weir_route_overload_total{reason}`); indexes of
/// [`ConnCounters::overload`].
pub const OVERLOAD_REASONS: [&str; 7] = [
    "upgrade_rate_per_ip",
    "upgrade_rate_global",
    "route_drained",
    "message_rate_dropped",
    "byte_rate_dropped",
    "message_rate_closed",
    "byte_rate_closed",
];

/// Indexes into [`OVERLOAD_REASONS`].
pub mod overload {
    /// Upgrades answered 429 over the route's `max_upgrade_rate_per_ip`.
    pub const UPGRADE_RATE_PER_IP: usize = 0;
    /// Upgrades answered 503 over `[server] max_upgrade_rate`.
    pub const UPGRADE_RATE_GLOBAL: usize = 1;
    /// Upgrades answered 503 while the route is drained.
    pub const ROUTE_DRAINED: usize = 2;
    /// Messages dropped over `max_message_rate`, `max_byte_rate`.
    pub const MESSAGE_RATE_DROPPED: usize = 3;
    pub const BYTE_RATE_DROPPED: usize = 4;
    /// Connections closed 1008 over `max_message_rate`, `max_byte_rate`.
    pub const MESSAGE_RATE_CLOSED: usize = 5;
    pub const BYTE_RATE_CLOSED: usize = 6;
}

/// Upper bounds (µs) of the guest call duration histogram: from a bare
/// call (~1 µs) to the longest default deadline (100 ms).
pub const CALL_MICROS_BUCKETS: [u64; 12] = [
    10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 100_000,
];

/// Upper bounds of the batch size histogram (events per call; a batch
/// holds at most 64).
pub const BATCH_EVENTS_BUCKETS: [u64; 7] = [1, 2, 4, 8, 16, 32, 64];

/// Why a guest version lost an instance, as `/metrics` labels it.
pub const FAULT_CAUSES: [&str; 6] = [
    "trap",
    "deadline",
    "memory",
    "invalid_output",
    "instantiate",
    "overloaded",
];

/// Shards a guest version's counters are spread over when the gateway did
/// not say how many workers it runs (a program loaded on its own).
static SHARDS: AtomicUsize = AtomicUsize::new(0);

/// The server sets this to its worker count before loading routes.
pub fn set_workers(workers: usize) {
    SHARDS.store(workers.max(1), Ordering::Relaxed);
}

fn shards() -> usize {
    match SHARDS.load(Ordering::Relaxed) {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    }
}

/// One counter written by a single thread at a time.
#[derive(Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds `n`; only the shard's owner thread calls this (no locked
    /// instruction: a load and a store).
    #[inline]
    pub fn add_owned(&self, n: u64) {
        self.0
            .store(self.0.load(Ordering::Relaxed) + n, Ordering::Relaxed);
    }

    /// Adds `n` when more than one thread may write the shard (rarely).
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// One worker's counters of one route, on cache lines of their own.
#[repr(align(128))]
#[derive(Default)]
pub struct ConnCounters {
    pub accepted: Counter,
    pub closed: Counter,
    pub messages_in: Counter,
    pub bytes_in: Counter,
    /// Messages (and their payload bytes) a native behaviour sent on: an
    /// echo's replies, a relay's forwards. Guests count theirs in
    /// [`GuestStats`], topic deliveries in [`DeliveryStats`].
    pub messages_out: Counter,
    pub bytes_out: Counter,
    /// Upgrades refused for their `Origin` (never labelled by origin).
    pub refused_origin: Counter,
    /// Refusals of the overload controls, by [`OVERLOAD_REASONS`] index.
    pub overload: [Counter; OVERLOAD_REASONS.len()],
    /// By [`CLOSE_CODES`] index; the last one is "other".
    pub closes: [Counter; CLOSE_CODES.len() + 1],
}

impl ConnCounters {
    /// Counts a connection's end with the close code it ended with (1006:
    /// none).
    pub(crate) fn closed_with(&self, code: u16) {
        self.closed.add_owned(1);
        let index = CLOSE_CODES
            .iter()
            .position(|&c| c == code)
            .unwrap_or(CLOSE_CODES.len());
        self.closes[index].add_owned(1);
    }
}

/// A route's connection counters, one shard per worker.
pub struct RouteStats {
    workers: Box<[ConnCounters]>,
}

impl RouteStats {
    pub fn new(workers: usize) -> RouteStats {
        RouteStats {
            workers: (0..workers.max(1))
                .map(|_| ConnCounters::default())
                .collect(),
        }
    }

    /// Worker `worker`'s shard; only that worker's thread writes it.
    pub fn worker(&self, worker: usize) -> &ConnCounters {
        &self.workers[worker % self.workers.len()]
    }

    /// Every shard summed.
    pub fn sum(&self) -> ConnTotals {
        let mut t = ConnTotals::default();
        for w in self.workers.iter() {
            t.accepted += w.accepted.get();
            t.closed += w.closed.get();
            t.messages_in += w.messages_in.get();
            t.bytes_in += w.bytes_in.get();
            t.messages_out += w.messages_out.get();
            t.bytes_out += w.bytes_out.get();
            t.refused_origin += w.refused_origin.get();
            for (sum, c) in t.overload.iter_mut().zip(&w.overload) {
                *sum += c.get();
            }
            for (sum, c) in t.closes.iter_mut().zip(&w.closes) {
                *sum += c.get();
            }
        }
        t
    }
}

/// [`RouteStats`] summed over workers.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ConnTotals {
    pub accepted: u64,
    pub closed: u64,
    pub messages_in: u64,
    pub bytes_in: u64,
    pub messages_out: u64,
    pub bytes_out: u64,
    pub refused_origin: u64,
    pub overload: [u64; OVERLOAD_REASONS.len()],
    pub closes: [u64; CLOSE_CODES.len() + 1],
}

/// One worker's counters of one guest version.
#[repr(align(128))]
#[derive(Default)]
pub struct GuestCounters {
    pub calls: Counter,
    pub call_micros_sum: Counter,
    /// By [`CALL_MICROS_BUCKETS`] (not cumulative here); last = over all.
    pub call_micros: [Counter; CALL_MICROS_BUCKETS.len() + 1],
    pub events_sum: Counter,
    pub batch_events: [Counter; BATCH_EVENTS_BUCKETS.len() + 1],
    pub messages_out: Counter,
    pub bytes_out: Counter,
    pub faults: [Counter; FAULT_CAUSES.len()],
}

/// A guest version's counters, sharded by worker.
pub struct GuestStats {
    shards: Box<[GuestCounters]>,
}

impl Default for GuestStats {
    fn default() -> Self {
        GuestStats {
            shards: (0..shards()).map(|_| GuestCounters::default()).collect(),
        }
    }
}

/// Bucket index of `value` in `bounds` (the last index: above them all).
fn bucket(bounds: &[u64], value: u64) -> usize {
    bounds
        .iter()
        .position(|&b| value <= b)
        .unwrap_or(bounds.len())
}

impl GuestStats {
    /// Counts one call of `events` events that ran `micros` µs, on
    /// `worker`'s shard.
    pub fn call(&self, worker: usize, events: usize, micros: u64) {
        let s = self.shard(worker);
        s.calls.add(1);
        s.call_micros_sum.add(micros);
        s.call_micros[bucket(&CALL_MICROS_BUCKETS, micros)].add(1);
        s.events_sum.add(events as u64);
        s.batch_events[bucket(&BATCH_EVENTS_BUCKETS, events as u64)].add(1);
    }

    pub fn shard(&self, worker: usize) -> &GuestCounters {
        &self.shards[worker % self.shards.len()]
    }

    pub fn sum(&self) -> GuestTotals {
        let mut t = GuestTotals::default();
        for s in self.shards.iter() {
            t.calls += s.calls.get();
            t.call_micros_sum += s.call_micros_sum.get();
            for (sum, c) in t.call_micros.iter_mut().zip(&s.call_micros) {
                *sum += c.get();
            }
            t.events_sum += s.events_sum.get();
            for (sum, c) in t.batch_events.iter_mut().zip(&s.batch_events) {
                *sum += c.get();
            }
            t.messages_out += s.messages_out.get();
            t.bytes_out += s.bytes_out.get();
            for (sum, c) in t.faults.iter_mut().zip(&s.faults) {
                *sum += c.get();
            }
        }
        t
    }
}

/// [`GuestStats`] summed over workers.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct GuestTotals {
    pub calls: u64,
    pub call_micros_sum: u64,
    pub call_micros: [u64; CALL_MICROS_BUCKETS.len() + 1],
    pub events_sum: u64,
    pub batch_events: [u64; BATCH_EVENTS_BUCKETS.len() + 1],
    pub messages_out: u64,
    pub bytes_out: u64,
    pub faults: [u64; FAULT_CAUSES.len()],
}

/// One worker's deliveries of one topic namespace, on a cache line of its
/// own: written only by that worker's fan-out.
#[repr(align(128))]
#[derive(Default)]
pub struct DeliveryCounters {
    pub messages: Counter,
    pub bytes: Counter,
}

/// Messages a topic namespace handed to subscribers (one per subscriber
/// reached), one shard per worker.
pub struct DeliveryStats {
    workers: Box<[DeliveryCounters]>,
}

impl DeliveryStats {
    pub fn new(workers: usize) -> DeliveryStats {
        DeliveryStats {
            workers: (0..workers.max(1))
                .map(|_| DeliveryCounters::default())
                .collect(),
        }
    }

    /// Worker `worker`'s shard; only that worker's fan-out writes it.
    pub fn worker(&self, worker: usize) -> &DeliveryCounters {
        &self.workers[worker % self.workers.len()]
    }

    /// (messages, bytes) over every worker.
    pub fn sum(&self) -> (u64, u64) {
        self.workers.iter().fold((0, 0), |(m, b), w| {
            (m + w.messages.get(), b + w.bytes.get())
        })
    }
}

impl GuestTotals {
    /// The call duration below which `q` (0..1) of the calls fell, as the
    /// histogram's bucket bound (µs); None without calls. Calls over the
    /// last bound report that bound.
    pub fn call_micros_quantile(&self, q: f64) -> Option<u64> {
        let total: u64 = self.call_micros.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = ((total as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, n) in self.call_micros.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(CALL_MICROS_BUCKETS[i.min(CALL_MICROS_BUCKETS.len() - 1)]);
            }
        }
        CALL_MICROS_BUCKETS.last().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_sum_and_buckets_take_their_upper_bound() {
        let stats = RouteStats::new(2);
        stats.worker(0).accepted.add_owned(2);
        stats.worker(1).accepted.add_owned(3);
        stats.worker(1).closed_with(1001);
        stats.worker(0).closed_with(4000);
        let t = stats.sum();
        assert_eq!(t.accepted, 5);
        assert_eq!(t.closed, 2);
        assert_eq!(t.closes[1], 1, "1001 is the second code");
        assert_eq!(t.closes[CLOSE_CODES.len()], 1, "4000 is other");

        let g = GuestStats::default();
        g.call(0, 1, 10);
        g.call(7, 64, 11);
        g.call(3, 65, 1_000_000);
        let t = g.sum();
        assert_eq!(t.calls, 3);
        assert_eq!(t.call_micros[0], 1, "10 µs is in the 10 µs bucket");
        assert_eq!(t.call_micros[1], 1, "11 µs is in the 25 µs bucket");
        assert_eq!(t.call_micros[CALL_MICROS_BUCKETS.len()], 1);
        assert_eq!(t.batch_events[0], 1);
        assert_eq!(t.batch_events[6], 1);
        assert_eq!(t.batch_events[7], 1);
        assert_eq!(t.events_sum, 130);
        assert_eq!(t.call_micros_quantile(0.3), Some(10));
        assert_eq!(t.call_micros_quantile(0.5), Some(25));
        assert_eq!(t.call_micros_quantile(0.99), Some(100_000));
        assert_eq!(GuestTotals::default().call_micros_quantile(0.99), None);
    }
}
