//! Connection limits: a global cap and an optional per-IP cap on open
//! WebSockets (each HTTP/2 stream one) and connections that carry none yet
//! (who holds a [`Ticket`] when: `server::live`). Over either, the request
//! is answered with 503 and `Retry-After` instead of being upgraded. The global cap is kept below
//! what the process may open (`RLIMIT_NOFILE`), with descriptors held back,
//! so a refused client still gets its 503 rather than a reset.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Raise the soft `RLIMIT_NOFILE` to the hard one (what the process may
/// open without privileges) and return the soft limit then in force; None
/// if it cannot be read.
pub fn raise_descriptor_limit() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit write/read the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return None;
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: as above.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            lim.rlim_cur = lim.rlim_max;
        }
    }
    Some(lim.rlim_cur)
}

/// Descriptors kept from connections for everything else the process
/// opens (listeners, epoll and event fds, the guest cache, logs, Redis)
/// and for accepting a connection only to refuse it.
pub fn descriptor_reserve(limit: u64) -> u64 {
    (limit / 32).max(32).min(limit / 2)
}

/// The global connection cap in force: `configured` (0 = no limit), but
/// never more than the descriptors `limit` leaves after the reserve.
pub fn connection_cap(configured: usize, limit: Option<u64>) -> usize {
    let configured = if configured == 0 {
        usize::MAX
    } else {
        configured
    };
    match limit {
        Some(limit) => {
            let usable = limit.saturating_sub(descriptor_reserve(limit));
            configured.min(usize::try_from(usable).unwrap_or(usize::MAX))
        }
        None => configured,
    }
}

/// Counts something that can happen thousands of times a second (a
/// refusal, a failed accept) and lets it be logged as a summary at most
/// once per `every`: the first occurrence at once, then the count since.
pub struct Summary {
    every: Duration,
    count: AtomicU64,
    total: AtomicU64,
    last: Mutex<Option<Instant>>,
}

impl Summary {
    pub fn new(every: Duration) -> Summary {
        Summary {
            every,
            count: AtomicU64::new(0),
            total: AtomicU64::new(0),
            last: Mutex::new(None),
        }
    }

    /// Count one; returns `Some((n, seconds))` when a summary of `n`
    /// occurrences over the last `seconds` is due.
    pub fn note(&self) -> Option<(u64, u64)> {
        self.count.fetch_add(1, Ordering::Relaxed);
        self.total.fetch_add(1, Ordering::Relaxed);
        let mut last = self.last.try_lock().ok()?;
        let now = Instant::now();
        let due = last.is_none_or(|at| now.duration_since(at) >= self.every);
        if !due {
            return None;
        }
        let secs = last.map_or(0, |at| now.duration_since(at).as_secs());
        *last = Some(now);
        Some((self.count.swap(0, Ordering::Relaxed), secs))
    }

    /// Everything counted so far.
    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }
}

/// Seconds a refused client is told to wait before retrying.
pub const RETRY_AFTER_SECS: u32 = 1;

pub struct Admission {
    max_total: usize,
    /// 0 = no per-IP limit (the per-IP map is then never touched).
    max_per_ip: usize,
    total: AtomicUsize,
    per_ip: Mutex<HashMap<IpAddr, usize>>,
}

/// A place under the limits (a connection's, or a WebSocket's); dropping
/// it frees it.
pub struct Ticket {
    admission: Arc<Admission>,
    ip: IpAddr,
}

impl Admission {
    pub fn new(max_total: usize, max_per_ip: usize) -> Arc<Admission> {
        Arc::new(Admission {
            max_total,
            max_per_ip,
            total: AtomicUsize::new(0),
            per_ip: Mutex::default(),
        })
    }

    /// A place for a connection from `ip`, or None when a limit is reached.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Option<Ticket> {
        if self.total.fetch_add(1, Ordering::AcqRel) >= self.max_total {
            self.total.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        if self.max_per_ip > 0 {
            let mut per_ip = self.per_ip.lock().expect("admission lock");
            let count = per_ip.entry(ip).or_default();
            if *count >= self.max_per_ip {
                drop(per_ip);
                self.total.fetch_sub(1, Ordering::AcqRel);
                return None;
            }
            *count += 1;
        }
        Some(Ticket {
            admission: self.clone(),
            ip,
        })
    }

    /// The global cap in force.
    pub fn max_total(&self) -> usize {
        self.max_total
    }

    pub fn open(&self) -> usize {
        self.total.load(Ordering::Acquire)
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let a = &self.admission;
        if a.max_per_ip > 0 {
            let mut per_ip = a.per_ip.lock().expect("admission lock");
            if let Some(count) = per_ip.get_mut(&self.ip) {
                *count -= 1;
                if *count == 0 {
                    per_ip.remove(&self.ip);
                }
            }
        }
        a.total.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_stays_below_the_descriptor_limit() {
        // 0 is "no limit" (it used to refuse everything).
        assert_eq!(connection_cap(0, None), usize::MAX);
        assert_eq!(connection_cap(0, Some(1024)), 1024 - 32);
        assert_eq!(connection_cap(100_000, Some(20_000)), 20_000 - 625);
        assert_eq!(connection_cap(500, Some(20_000)), 500);
        assert_eq!(connection_cap(100, Some(128)), 128 - 32);
        assert_eq!(connection_cap(100, Some(40)), 20, "half is kept at least");
    }

    #[test]
    fn a_summary_is_due_at_once_then_once_per_interval() {
        let s = Summary::new(Duration::from_millis(200));
        assert_eq!(s.note(), Some((1, 0)));
        assert_eq!(s.note(), None);
        assert_eq!(s.note(), None);
        std::thread::sleep(Duration::from_millis(220));
        let (n, _) = s.note().expect("due again");
        assert_eq!(n, 3, "the two held back and this one");
        assert_eq!(s.total(), 4);
    }

    #[test]
    fn global_and_per_ip_caps_free_on_drop() {
        let a = Admission::new(3, 2);
        let ip1: IpAddr = "127.0.0.1".parse().unwrap();
        let ip2: IpAddr = "127.0.0.2".parse().unwrap();
        let t1 = a.admit(ip1).unwrap();
        let _t2 = a.admit(ip1).unwrap();
        assert!(a.admit(ip1).is_none(), "per-IP cap");
        let _t3 = a.admit(ip2).unwrap();
        assert!(a.admit(ip2).is_none(), "global cap");
        drop(t1);
        let t4 = a.admit(ip1);
        assert!(t4.is_some());
        assert_eq!(a.open(), 3);
        drop(t4);
        assert_eq!(a.open(), 2);
    }
}
