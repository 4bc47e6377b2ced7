//! Connection limits: a global cap and an optional per-IP cap on open TCP
//! connections. Over either, the request is answered with 503 and
//! `Retry-After` instead of being upgraded.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Seconds a refused client is told to wait before retrying.
pub const RETRY_AFTER_SECS: u32 = 1;

pub struct Admission {
    max_total: usize,
    /// 0 = no per-IP limit (the per-IP map is then never touched).
    max_per_ip: usize,
    total: AtomicUsize,
    per_ip: Mutex<HashMap<IpAddr, usize>>,
}

/// An admitted connection; dropping it frees its place.
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
