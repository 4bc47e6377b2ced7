//! What keeps a guest's key-value store bounded (issue 35): the quota check
//! (`kv_max_bytes`, `kv_max_keys`; bytes are key plus value lengths), the
//! byte budget of the write queue toward redb or Redis, and the per-route
//! count of refused writes with its rate-limited log line.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

pub use weir_abi::KvErrorReason;

use weir_config::KvQuota;

/// Milliseconds since the Unix epoch: the clock entry expiry is kept in,
/// read by both backends (redb here, Redis mirrors in `kv::redis_kv`).
pub(super) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Bytes the write queue toward one store's disk (redb's writer) or Redis
/// may hold: a disk that stalls or a Redis that is down fills it, and
/// writes past it are refused (`queue-full`) instead of growing the
/// gateway's memory. 8 MiB is a few seconds of a busy store's writes.
pub const KV_QUEUE_MAX_BYTES: usize = 8 << 20;
/// What a queued write costs beyond its key and value (its record and its
/// channel slot), so that a flood of empty writes is bounded too.
const QUEUED_WRITE_OVERHEAD_BYTES: usize = 64;
/// A route's refused writes are logged at most once per this interval
/// (with how many there were), not once per write.
pub(crate) const KV_REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Whether a store holding `keys` keys and `bytes` bytes may take a write
/// of `new` bytes (key plus value) under a key that now holds `old` bytes
/// (None: a new key). A write that does not grow the store always fits, so
/// a guest can shrink a store that is over a quota lowered since.
pub(super) fn fits(
    quota: &KvQuota,
    keys: usize,
    bytes: u64,
    old: Option<u64>,
    new: u64,
) -> Result<(), KvErrorReason> {
    if old.is_none() && keys as u64 >= quota.max_keys {
        return Err(KvErrorReason::OverMaxKeys);
    }
    let old = old.unwrap_or(0);
    if new > old && bytes - old.min(bytes) + new > quota.max_bytes {
        return Err(KvErrorReason::OverMaxBytes);
    }
    Ok(())
}

/// What one write costs in the queue.
pub(super) fn queued_cost(key: &[u8], value: &[u8]) -> usize {
    key.len() + value.len() + QUEUED_WRITE_OVERHEAD_BYTES
}

/// The bytes a store's write queue holds: taken when a write is queued,
/// given back once it is committed (redb) or Redis has it.
#[derive(Default)]
pub(super) struct QueueBudget {
    queued: AtomicUsize,
}

impl QueueBudget {
    /// Room for `cost` more bytes, or `queue-full`.
    pub(super) fn take(&self, cost: usize) -> Result<(), KvErrorReason> {
        self.queued
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |now| {
                (now + cost <= KV_QUEUE_MAX_BYTES).then_some(now + cost)
            })
            .map(drop)
            .map_err(|_| KvErrorReason::QueueFull)
    }

    pub(super) fn give_back(&self, cost: usize) {
        self.queued.fetch_sub(cost, Ordering::AcqRel);
    }

    /// Bytes queued now.
    pub(super) fn queued(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }
}

/// One route's refused key-value writes: counted by reason, logged at
/// most once per [`KV_REFUSAL_LOG_INTERVAL`].
#[derive(Default)]
pub struct KvRefusals {
    /// By [`KvErrorReason`] code - 1.
    counts: [AtomicU64; KvErrorReason::ALL.len()],
    /// When the last line was logged (ms since the Unix epoch).
    logged_ms: AtomicU64,
    /// Refusals since that line.
    unlogged: AtomicU64,
}

impl KvRefusals {
    /// Count a refusal of a write of `key` on `route`; log it if the route
    /// logged none within the interval.
    pub(crate) fn note(&self, route: &str, key: &[u8], reason: KvErrorReason) {
        self.counts[reason as usize - 1].fetch_add(1, Ordering::Relaxed);
        let unlogged = self.unlogged.fetch_add(1, Ordering::Relaxed) + 1;
        let now = now_ms();
        let last = self.logged_ms.load(Ordering::Relaxed);
        let interval = KV_REFUSAL_LOG_INTERVAL.as_millis() as u64;
        if (last == 0 || now.saturating_sub(last) >= interval)
            && self
                .logged_ms
                .compare_exchange(last, now.max(1), Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            self.unlogged.fetch_sub(unlogged, Ordering::Relaxed);
            tracing::warn!(
                route,
                reason = reason.as_str(),
                key = %String::from_utf8_lossy(&key[..key.len().min(64)]),
                refused = unlogged,
                "key-value writes refused (the guest gets kv-error events); \
                 logged at most once per {KV_REFUSAL_LOG_INTERVAL:?}"
            );
        }
    }

    /// Refusals so far, by reason (in [`KvErrorReason::ALL`] order).
    pub fn counts(&self) -> [u64; KvErrorReason::ALL.len()] {
        std::array::from_fn(|i| self.counts[i].load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_fits_unless_it_grows_the_store_past_a_bound() {
        let q = KvQuota {
            max_bytes: 100,
            max_keys: 2,
        };
        assert_eq!(fits(&q, 0, 0, None, 100), Ok(()));
        assert_eq!(fits(&q, 1, 60, None, 41), Err(KvErrorReason::OverMaxBytes));
        assert_eq!(fits(&q, 2, 10, None, 1), Err(KvErrorReason::OverMaxKeys));
        // Replacing a value: only the growth counts.
        assert_eq!(fits(&q, 2, 100, Some(50), 50), Ok(()));
        assert_eq!(
            fits(&q, 2, 100, Some(50), 51),
            Err(KvErrorReason::OverMaxBytes)
        );
        // Over a quota lowered since: shrinking is allowed.
        assert_eq!(fits(&q, 2, 500, Some(300), 10), Ok(()));
    }

    #[test]
    fn the_queue_refuses_past_its_byte_budget_and_takes_again_once_given_back() {
        let budget = QueueBudget::default();
        assert_eq!(budget.take(KV_QUEUE_MAX_BYTES - 10), Ok(()));
        assert_eq!(budget.take(11), Err(KvErrorReason::QueueFull));
        assert_eq!(budget.take(10), Ok(()));
        budget.give_back(KV_QUEUE_MAX_BYTES);
        assert_eq!(budget.queued(), 0);
        assert_eq!(budget.take(11), Ok(()));
    }
}
