//! Overload controls at the upgrade: a route's upgrades per second per
//! client address ([`AddressRates`], a bounded table; 429 past it), the
//! gateway's upgrades per second ([`GlobalRate`], one atomic; 503 past
//! it), and the `Retry-After` each refusal carries (jittered while
//! draining, so refused clients do not come back together). The
//! per-connection message rates are the loop's (`weir_reactor::rate`).
//! See docs/architecture.md, "Overload controls".

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use weir_reactor::rate::Gcra;

/// Client addresses one route tracks at once. An entry is an address and
/// the time its next upgrade is due (32 bytes; with the hash table's
/// slack about 0.5 MiB when full). Past it, addresses whose bucket has
/// refilled are forgotten first (they would pass anyway), then the one
/// closest to refilled: an attacker with more addresses than this can
/// only make a limited address look a little less limited, never use
/// more memory.
pub const MAX_TRACKED_ADDRESSES: usize = 8192;

/// The longest `Retry-After` (seconds) a refused upgrade gets while the
/// gateway or its route drains: refused clients retry uniformly between
/// 1 s and this, not all at the same second.
pub const DRAIN_RETRY_AFTER_MAX_SECS: u64 = 10;

/// Nanoseconds since `epoch` (the state the cell-rate check keeps).
fn nanos(epoch: Instant, now: Instant) -> u64 {
    u64::try_from(now.saturating_duration_since(epoch).as_nanos()).unwrap_or(u64::MAX)
}

/// The key an address is limited under: IPv4 (also IPv4-mapped IPv6) as
/// is, IPv6 by its /64, since one host is usually given a whole /64.
pub fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !u128::from(u64::MAX)).into()),
        },
    }
}

/// One route's upgrades per client address (`max_upgrade_rate_per_ip`):
/// a token bucket of one second of the rate per address, kept as the
/// time its next upgrade is due. One lock per upgrade (not per message),
/// held for a map lookup.
pub struct AddressRates {
    epoch: Instant,
    due: Mutex<HashMap<IpAddr, u64>>,
}

impl Default for AddressRates {
    fn default() -> Self {
        AddressRates {
            epoch: Instant::now(),
            due: Mutex::default(),
        }
    }
}

impl AddressRates {
    /// One upgrade from `ip` at `now` under `per_sec` (0: no limit): Ok,
    /// or Err with how long until one would pass.
    pub fn check(&self, ip: IpAddr, per_sec: u32, now: Instant) -> Result<(), Duration> {
        if per_sec == 0 {
            return Ok(());
        }
        let gcra = Gcra::new(per_sec, per_sec);
        let now = nanos(self.epoch, now);
        let key = client_key(ip);
        let mut table = self.due.lock().expect("upgrade rate lock");
        let due = table.get(&key).copied().unwrap_or(0);
        let next = gcra.check(due, now)?;
        if table.len() >= MAX_TRACKED_ADDRESSES && !table.contains_key(&key) {
            make_room(&mut table, &gcra, now);
        }
        table.insert(key, next);
        Ok(())
    }

    /// Addresses tracked now.
    pub fn tracked(&self) -> usize {
        self.due.lock().expect("upgrade rate lock").len()
    }
}

/// Frees at least one place in a full table: every address whose bucket
/// has refilled, or else the one closest to refilled.
fn make_room(table: &mut HashMap<IpAddr, u64>, gcra: &Gcra, now: u64) {
    table.retain(|_, due| !gcra.is_full(*due, now));
    if table.len() < MAX_TRACKED_ADDRESSES {
        return;
    }
    if let Some(soonest) = table.iter().min_by_key(|(_, due)| **due).map(|(k, _)| *k) {
        table.remove(&soonest);
    }
}

/// The gateway's upgrades per second (`[server] max_upgrade_rate`), a
/// burst of one second's worth: one atomic compare-and-swap per upgrade,
/// so a flood is answered 503 for the cost of reading its request head,
/// before any route's work (guest hooks, proxies dialling) and before the
/// workers fall behind their accept queues.
pub struct GlobalRate {
    gcra: Gcra,
    epoch: Instant,
    due: AtomicU64,
}

impl GlobalRate {
    /// None when `per_sec` is 0 (no cap).
    pub fn new(per_sec: u32) -> Option<GlobalRate> {
        (per_sec > 0).then(|| GlobalRate {
            gcra: Gcra::new(per_sec, per_sec),
            epoch: Instant::now(),
            due: AtomicU64::new(0),
        })
    }

    /// One upgrade at `now`: Ok, or Err with how long until one would pass.
    pub fn check(&self, now: Instant) -> Result<(), Duration> {
        let now = nanos(self.epoch, now);
        let mut due = self.due.load(Ordering::Relaxed);
        loop {
            let next = self.gcra.check(due, now)?;
            match self
                .due
                .compare_exchange_weak(due, next, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return Ok(()),
                Err(actual) => due = actual,
            }
        }
    }
}

/// Whole seconds for `Retry-After` after waiting `wait` (at least 1).
pub fn retry_after_secs(wait: Duration) -> u64 {
    let secs = wait.as_nanos().div_ceil(1_000_000_000).max(1);
    u64::try_from(secs).unwrap_or(u64::MAX)
}

/// A `Retry-After` for a refusal while draining: uniform in 1 ..=
/// [`DRAIN_RETRY_AFTER_MAX_SECS`].
pub fn jittered_retry_after() -> u64 {
    let mut byte = [0u8; 8];
    // Without randomness the spread is lost, not the answer.
    let _ = getrandom::fill(&mut byte);
    1 + u64::from_le_bytes(byte) % DRAIN_RETRY_AFTER_MAX_SECS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(n: u32) -> IpAddr {
        IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + n))
    }

    /// A second's worth passes, the next waits about one interval, and
    /// another address is not affected.
    #[test]
    fn an_address_over_its_rate_is_told_when_to_come_back() {
        let rates = AddressRates::default();
        let t0 = Instant::now();
        for _ in 0..5 {
            rates.check(ip(1), 5, t0).expect("within a second's worth");
        }
        let wait = rates.check(ip(1), 5, t0).expect_err("over");
        assert!(wait <= Duration::from_millis(200), "{wait:?}");
        assert_eq!(retry_after_secs(wait), 1);
        rates.check(ip(2), 5, t0).expect("another address");
        rates
            .check(ip(1), 5, t0 + Duration::from_millis(200))
            .expect("refilled by one");
        rates.check(ip(1), 0, t0).expect("0 is no limit");
    }

    /// IPv6 addresses of one /64 share a bucket.
    #[test]
    fn ipv6_is_limited_by_its_64() {
        let rates = AddressRates::default();
        let t0 = Instant::now();
        let a: IpAddr = "2001:db8::1".parse().unwrap();
        let b: IpAddr = "2001:db8::2".parse().unwrap();
        rates.check(a, 1, t0).unwrap();
        assert!(rates.check(b, 1, t0).is_err());
    }

    /// The table never holds more than its bound, whatever the number of
    /// addresses, and limited addresses are forgotten last.
    #[test]
    fn the_table_is_bounded() {
        let rates = AddressRates::default();
        let t0 = Instant::now();
        for n in 0..(MAX_TRACKED_ADDRESSES as u32 + 500) {
            let _ = rates.check(ip(n), 1, t0 + Duration::from_micros(u64::from(n)));
        }
        assert_eq!(rates.tracked(), MAX_TRACKED_ADDRESSES);
        // Two seconds later every bucket has refilled: one sweep empties it.
        let later = t0 + Duration::from_secs(3);
        let at = |n: u32| later + Duration::from_micros(u64::from(n));
        let max = MAX_TRACKED_ADDRESSES as u32;
        for n in 0..max {
            rates.check(ip(100_000 + n), 1, at(n)).unwrap();
        }
        assert_eq!(
            rates.tracked(),
            max as usize,
            "the refilled ones were forgotten"
        );
        // Full of limited addresses: the one closest to refilled goes.
        rates.check(ip(999_999), 1, at(max)).unwrap();
        assert_eq!(rates.tracked(), max as usize);
        assert!(rates.check(ip(100_000), 1, at(max)).is_ok(), "forgotten");
        let last = ip(100_000 + max - 1);
        assert!(
            rates.check(last, 1, at(max)).is_err(),
            "kept: still limited"
        );
    }

    #[test]
    fn the_global_cap_refuses_past_a_seconds_worth() {
        let cap = GlobalRate::new(3).unwrap();
        let t0 = Instant::now();
        for _ in 0..3 {
            cap.check(t0).unwrap();
        }
        assert!(cap.check(t0).is_err());
        cap.check(t0 + Duration::from_millis(400)).unwrap();
        assert!(GlobalRate::new(0).is_none());
    }

    #[test]
    fn retry_after_is_whole_seconds_and_jitter_stays_in_range() {
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_secs(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1001)), 2);
        let seen: std::collections::HashSet<u64> =
            (0..200).map(|_| jittered_retry_after()).collect();
        assert!(seen
            .iter()
            .all(|s| (1..=DRAIN_RETRY_AFTER_MAX_SECS).contains(s)));
        assert!(seen.len() > 3, "not jittered: {seen:?}");
    }
}
