//! Linux plumbing: epoll, CPU pinning, the open-file limit, and the CPU
//! clocks (our own via getrusage, the server's via /proc/PID/stat), and the
//! server's resident memory and open fds.

use std::io;
use std::os::fd::RawFd;

/// A thin epoll handle; tokens are caller-chosen u64s.
pub struct Epoll(RawFd);

pub const IN: u32 = libc::EPOLLIN as u32;
pub const OUT: u32 = libc::EPOLLOUT as u32;
pub const ET: u32 = libc::EPOLLET as u32;
pub const ERR: u32 = (libc::EPOLLERR | libc::EPOLLHUP) as u32;
/// The peer shut down its side (its FIN arrived), possibly with the last data.
pub const RDHUP: u32 = libc::EPOLLRDHUP as u32;

impl Epoll {
    pub fn new() -> io::Result<Self> {
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Epoll(fd))
    }

    pub fn add(&self, fd: RawFd, token: u64, events: u32) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        if unsafe { libc::epoll_ctl(self.0, libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Waits up to `timeout_ms`; returns how many entries of `events` are filled.
    pub fn wait(&self, events: &mut [libc::epoll_event], timeout_ms: i32) -> usize {
        let n = unsafe {
            libc::epoll_wait(self.0, events.as_mut_ptr(), events.len() as i32, timeout_ms)
        };
        n.max(0) as usize
    }
}

impl Drop for Epoll {
    fn drop(&mut self) {
        unsafe { libc::close(self.0) };
    }
}

pub fn empty_events(n: usize) -> Vec<libc::epoll_event> {
    vec![libc::epoll_event { events: 0, u64: 0 }; n]
}

/// Parses a CPU list such as `1`, `0,2` or `0-3`.
pub fn parse_cpu_list(s: &str) -> Result<Vec<usize>, String> {
    let mut cpus = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        let bad = || format!("bad CPU list {s:?}");
        if let Some((a, b)) = part.split_once('-') {
            let (a, b): (usize, usize) =
                (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
            cpus.extend(a..=b);
        } else {
            cpus.push(part.parse().map_err(|_| bad())?);
        }
    }
    Ok(cpus)
}

/// Pins the calling thread (and the threads it spawns later) to `cpus`.
pub fn pin(cpus: &[usize]) -> io::Result<()> {
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            libc::CPU_SET(c, &mut set);
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Raises the soft open-file limit to the hard one (10,000 idle connections
/// need more than the usual 1024).
pub fn raise_nofile() {
    unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

/// User + system CPU time of this whole process, in nanoseconds.
pub fn self_cpu_ns() -> u64 {
    unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
        tv(u.ru_utime) + tv(u.ru_stime)
    }
}

/// utime + stime of process `pid` (all its threads), in nanoseconds, from
/// /proc/PID/stat fields 14 and 15 (clock ticks, converted with _SC_CLK_TCK).
pub fn proc_cpu_ns(pid: u32) -> io::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name (field 2) may contain spaces: fields start after the last ')'.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state): utime is field 14 → index 11.
    let parse = |i: usize| -> io::Result<u64> {
        f.get(i)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| io::Error::other("unexpected /proc/PID/stat format"))
    };
    let ticks = parse(11)? + parse(12)?;
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Ok(ticks * 1_000_000_000 / hz)
}

/// Resident set size of process `pid` in KiB (VmRSS of /proc/PID/status).
pub fn proc_rss_kib(pid: u32) -> io::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| io::Error::other("no VmRSS"))
}

/// Open file descriptors of process `pid` (entries of /proc/PID/fd): a
/// server that leaks sockets shows it here long before it hits a limit.
pub fn proc_fd_count(pid: u32) -> io::Result<usize> {
    Ok(std::fs::read_dir(format!("/proc/{pid}/fd"))?.count())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_list() {
        assert_eq!(parse_cpu_list("1").unwrap(), vec![1]);
        assert_eq!(parse_cpu_list("0,2-3").unwrap(), vec![0, 2, 3]);
        assert!(parse_cpu_list("x").is_err());
    }

    #[test]
    fn own_stat_is_readable() {
        let pid = std::process::id();
        // Burn 30 ms of CPU (not of wall time: on a busy machine 30 ms of
        // wall time can pass without a clock tick of CPU) so the counters move.
        let start = self_cpu_ns();
        let mut x = 0u64;
        while self_cpu_ns() - start < 30_000_000 {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        assert!(x > 0);
        assert!(proc_cpu_ns(pid).unwrap() > 0);
        assert!(proc_rss_kib(pid).unwrap() > 0);
        assert!(
            proc_fd_count(pid).unwrap() >= 3,
            "stdin, stdout, stderr at least"
        );
    }
}
