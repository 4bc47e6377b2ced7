//! The gateway's own log: `tracing` to stderr through a bounded,
//! non-blocking writer (a thread of its own does the writing), so a stderr
//! pipe that nobody reads, or a full disk, never stalls a worker. Lines that
//! do not fit in the writer's queue are dropped and counted; the count is in
//! `/metrics` and reported in the log once the sink takes lines again.

use std::io::IsTerminal;
use std::sync::OnceLock;
use std::time::Duration;
use tracing_appender::non_blocking::{ErrorCounter, NonBlockingBuilder, WorkerGuard};

/// Lines the writer's queue holds before new ones are dropped: a burst of
/// a few seconds of busy logging, a few MiB at most.
const QUEUED_LINES_MAX: usize = 16 * 1024;
/// How often lines lost to a blocked sink are reported.
pub const LOST_REPORT_INTERVAL: Duration = Duration::from_secs(2);

static LOST: OnceLock<ErrorCounter> = OnceLock::new();

/// Keeps the writer thread alive; dropping it flushes what is queued.
pub struct LogGuard(#[allow(dead_code)] WorkerGuard);

/// Installs the global subscriber: `RUST_LOG` filters (default `info`),
/// colours only when a terminal reads stderr; `json`: one JSON object per
/// line (for log shippers), with the event's fields (`route`, `conn`, ...)
/// at the top level. Call once, from the binary.
pub fn init(json: bool) -> LogGuard {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let (writer, guard) = NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(QUEUED_LINES_MAX)
        .thread_name("weir-log")
        .finish(std::io::stderr());
    let _ = LOST.set(writer.error_counter());
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer);
    if json {
        fmt.json().flatten_event(true).init();
    } else {
        fmt.with_ansi(std::io::stderr().is_terminal()).init();
    }
    std::thread::Builder::new()
        .name("weir-log-report".into())
        .spawn(report_lost_lines)
        .ok();
    LogGuard(guard)
}

/// Log lines dropped because the sink was not keeping up.
pub fn lost_lines() -> u64 {
    LOST.get().map_or(0, |c| c.dropped_lines() as u64)
}

/// Reports lost lines now and then. A report that is itself lost counts as
/// a lost line, so the next interval tries again: the report gets through
/// once the sink drains.
fn report_lost_lines() {
    let mut reported = 0;
    loop {
        std::thread::sleep(LOST_REPORT_INTERVAL);
        let lost = lost_lines();
        if lost > reported {
            tracing::warn!(
                lost = lost - reported,
                total = lost,
                "log lines lost: stderr was not taking them fast enough"
            );
            reported = lost;
        }
    }
}
