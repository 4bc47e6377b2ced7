//! `weir-soak`: runs a mixed, verified workload against a running gateway
//! for a long time, in cycles that open and close every session, and watches
//! the server process for growth in memory or open fds.
//!
//! Modules: `mix` (the sessions of a cycle: routes, loads, message shapes),
//! `cycle` (open, load, drain, close handshakes, fds back to rest), `report`
//! (progress lines, the summary). Connections, frames and the byte-for-byte
//! checks are `weir-load`'s (`benches/loadgen`): every reply is compared with
//! the message it answers, sequence number included.

pub mod cycle;
pub mod mix;
pub mod report;

use cycle::CycleSetup;
use mix::Mix;
use report::Summary;
use std::time::{Duration, Instant};
use weir_load::ws::Rng;

/// Settings of a run.
#[derive(Clone, Debug)]
pub struct Options {
    /// Gateway address, `host:port`.
    pub addr: String,
    /// The gateway's process, for /proc/PID/status and /proc/PID/fd.
    pub pid: u32,
    /// Total time: `duration / cycle` cycles run (at least one).
    pub duration: Duration,
    /// Length of a cycle: 90% load, then drain, close, settle, and rest.
    pub cycle: Duration,
    /// How long the server's fds may take to get back to rest after a cycle.
    pub settle: Duration,
    /// Include the guest routes (/plain, /json).
    pub guest: bool,
    pub seed: u64,
}

/// Share of a cycle spent under load; the rest closes, settles and idles,
/// so the resting samples see a quiet server.
const LOAD_SHARE: f64 = 0.9;

/// Runs cycles until `opts.duration` has passed, calling `progress` after each.
pub fn run(
    opts: &Options,
    mut progress: impl FnMut(usize, Duration, &cycle::CycleStats),
) -> Summary {
    let mix = Mix::new(opts.guest);
    let mut rng = Rng::new(opts.seed);
    let start = Instant::now();
    let rest_fds = weir_load::sys::proc_fd_count(opts.pid).unwrap_or(0);
    let setup = CycleSetup {
        addr: &opts.addr,
        pid: opts.pid,
        load: opts.cycle.mul_f64(LOAD_SHARE),
        settle: opts.settle,
        rest_fds,
    };
    // Cycles start on a fixed schedule, duration / cycle of them (at least one).
    let count = ((opts.duration.as_secs_f64() / opts.cycle.as_secs_f64()).floor() as usize).max(1);
    let mut cycles = Vec::with_capacity(count);
    for n in 1..=count {
        let due = opts.cycle.mul_f64((n - 1) as f64);
        std::thread::sleep(due.saturating_sub(start.elapsed()));
        let at = start.elapsed();
        let stats = cycle::run(&mix, &setup, &mut rng);
        progress(n, at, &stats);
        cycles.push((at, stats));
    }
    let (end_rss_kib, end_fds) = cycle::sample(opts.pid);
    Summary {
        cycles,
        end_rss_kib,
        end_fds,
        elapsed: start.elapsed(),
    }
}
