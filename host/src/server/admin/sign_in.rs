//! Failed sign-ins on the admin listener, per client address: a wrong
//! bearer token or a wrong token POSTed to `/session` counts one. Past
//! [`MAX_FAILURES_PER_WINDOW`] in a [`WINDOW`], every attempt from that
//! address is refused with 429 until the window ends, and the failures are
//! logged as one summary line per address per [`SUMMARY_EVERY`] instead of
//! one line per attempt.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Wrong tokens one address may try in a [`WINDOW`]: an operator who
/// mistypes a few times is never limited, a guesser gets 10 a minute.
pub const MAX_FAILURES_PER_WINDOW: u32 = 10;
/// Length of the fixed window counted from an address's first failure; a
/// limited address (operator or not) is let in again when it ends.
pub const WINDOW: Duration = Duration::from_secs(60);
/// How often the failures of each address are logged as one line.
pub const SUMMARY_EVERY: Duration = Duration::from_secs(60);
/// Addresses tracked at once; past this the one whose window started
/// first is forgotten, so a flood from many addresses costs bounded memory.
pub const MAX_TRACKED_ADDRESSES: usize = 1024;

/// One address's failures in its current window.
struct Failures {
    /// When the window began (the first failure in it).
    since: Instant,
    /// Wrong tokens in this window.
    count: u32,
    /// Wrong tokens since the last log line.
    unlogged_wrong: u64,
    /// Attempts refused with 429, unchecked, since the last log line.
    unlogged_refused: u64,
}

/// The failed sign-ins of every address (IPv6 by /64, what one host holds).
#[derive(Default)]
pub struct SignIns {
    by_address: Mutex<HashMap<IpAddr, Failures>>,
}

/// What a limited address is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limited {
    /// Whole seconds until its window ends (at least 1), for `Retry-After`.
    pub retry_after_secs: u64,
}

/// The key an address is counted under (IPv6 by its /64): the same as
/// the upgrade rates'.
pub use crate::overload::client_key;

fn describe(key: IpAddr) -> String {
    match key {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("{v6}/64"),
    }
}

impl SignIns {
    /// Whether `ip` may try a token now (`now` passed in, for tests). An
    /// attempt that is refused counts toward the next summary.
    pub fn check(&self, ip: IpAddr, now: Instant) -> Result<(), Limited> {
        let mut map = self.by_address.lock().expect("sign-in lock");
        let Some(f) = map.get_mut(&client_key(ip)) else {
            return Ok(());
        };
        let ends = f.since + WINDOW;
        if f.count < MAX_FAILURES_PER_WINDOW || now >= ends {
            return Ok(());
        }
        f.unlogged_refused += 1;
        let left = ends - now;
        Err(Limited {
            retry_after_secs: left.as_secs() + u64::from(left.subsec_nanos() > 0),
        })
    }

    /// Counts a wrong token from `ip`. The first failure of an address not
    /// seen recently is logged at once; the rest go to [`SignIns::summarize`].
    pub fn failed(&self, ip: IpAddr, now: Instant) {
        let key = client_key(ip);
        let mut map = self.by_address.lock().expect("sign-in lock");
        if !map.contains_key(&key) && map.len() >= MAX_TRACKED_ADDRESSES {
            if let Some(oldest) = map.iter().min_by_key(|(_, f)| f.since).map(|(k, _)| *k) {
                if let Some(f) = map.remove(&oldest) {
                    log(oldest, &f, "forgotten to make room");
                }
            }
        }
        match map.get_mut(&key) {
            Some(f) => {
                if now >= f.since + WINDOW {
                    f.since = now;
                    f.count = 0;
                }
                f.count += 1;
                f.unlogged_wrong += 1;
            }
            None => {
                tracing::warn!(
                    "admin: failed sign-in from {} (wrong token); more from it are summed every {} s, and past {MAX_FAILURES_PER_WINDOW} in {} s it gets 429",
                    describe(key),
                    SUMMARY_EVERY.as_secs(),
                    WINDOW.as_secs(),
                );
                map.insert(
                    key,
                    Failures {
                        since: now,
                        count: 1,
                        unlogged_wrong: 0,
                        unlogged_refused: 0,
                    },
                );
            }
        }
    }

    /// Logs one line per address with failures since the last summary, and
    /// forgets addresses whose window has ended with nothing left to log.
    /// Returns the lines, for tests.
    pub fn summarize(&self, now: Instant) -> Vec<String> {
        let mut map = self.by_address.lock().expect("sign-in lock");
        let mut lines = Vec::new();
        map.retain(|key, f| {
            if f.unlogged_wrong + f.unlogged_refused > 0 {
                let when = format!("in the last {} s", SUMMARY_EVERY.as_secs());
                lines.push(log(*key, f, &when));
                f.unlogged_wrong = 0;
                f.unlogged_refused = 0;
            }
            now < f.since + WINDOW
        });
        lines
    }

    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.by_address.lock().unwrap().len()
    }
}

/// One summary line for `key`'s failures.
fn log(key: IpAddr, f: &Failures, when: &str) -> String {
    let line = format!(
        "admin: {} failed sign-ins from {} {when} ({} more refused with 429 unchecked)",
        f.unlogged_wrong,
        describe(key),
        f.unlogged_refused,
    );
    tracing::warn!("{line}");
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn an_address_is_limited_past_the_count_until_its_window_ends() {
        let s = SignIns::default();
        let t0 = Instant::now();
        let a = ip("192.0.2.1");
        for i in 0..MAX_FAILURES_PER_WINDOW {
            assert_eq!(s.check(a, t0), Ok(()), "attempt {i}");
            s.failed(a, t0);
        }
        let limited = s.check(a, t0 + Duration::from_millis(500)).unwrap_err();
        assert_eq!(limited.retry_after_secs, 60);
        assert!(s.check(ip("192.0.2.2"), t0).is_ok(), "others are not");
        assert!(s.check(a, t0 + WINDOW).is_ok(), "the window ends");
        s.failed(a, t0 + WINDOW);
        assert!(
            s.check(a, t0 + WINDOW).is_ok(),
            "a new window counts afresh"
        );
    }

    #[test]
    fn ipv6_counts_by_64_and_mapped_v4_as_v4() {
        assert_eq!(
            client_key(ip("2001:db8::1:2:3:4")),
            ip("2001:db8::"),
            "the /64"
        );
        assert_eq!(client_key(ip("::ffff:192.0.2.7")), ip("192.0.2.7"));
        let s = SignIns::default();
        let t0 = Instant::now();
        for i in 0..MAX_FAILURES_PER_WINDOW {
            s.failed(ip(&format!("2001:db8::{i}")), t0);
        }
        assert!(s.check(ip("2001:db8::ffff"), t0).is_err());
    }

    #[test]
    fn failures_are_summed_into_one_line_per_address() {
        let s = SignIns::default();
        let t0 = Instant::now();
        let a = ip("192.0.2.1");
        for _ in 0..57 {
            s.failed(a, t0);
        }
        for _ in 0..3 {
            let _ = s.check(a, t0);
        }
        let lines = s.summarize(t0 + Duration::from_secs(1));
        // The first failure was logged on its own; 56 wait for the summary.
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].contains("56 failed sign-ins from 192.0.2.1"),
            "{lines:?}"
        );
        assert!(lines[0].contains("3 more refused"), "{lines:?}");
        assert!(s.summarize(t0 + Duration::from_secs(2)).is_empty());
        s.summarize(t0 + WINDOW);
        assert_eq!(s.tracked(), 0, "an ended window is forgotten");
    }

    #[test]
    fn the_map_is_bounded_and_forgets_the_oldest() {
        let s = SignIns::default();
        let t0 = Instant::now();
        for i in 0..MAX_TRACKED_ADDRESSES + 5 {
            let at = t0 + Duration::from_millis(i as u64);
            let addr = IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + i as u32));
            s.failed(addr, at);
        }
        assert_eq!(s.tracked(), MAX_TRACKED_ADDRESSES);
    }
}
