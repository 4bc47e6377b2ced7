//! What a route's guests write to the gateway log (stdout, stderr and the
//! `log` import), through one limiter per route shared by all workers: a
//! level filter, then a token bucket on lines and one on bytes. A line over
//! budget is dropped before it is formatted and counted; one summary line
//! per [`SUMMARY_INTERVAL`] says how many were dropped, never line by line.
//!
//! Guest text cannot forge log structure: it is written as a quoted field
//! (`text="…"`, with newlines, quotes and control characters escaped), after
//! the route and stream fields the host sets.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use weir_config::{GuestLog, LogLevel};

/// How often dropped lines are summarised in the log.
pub(crate) const SUMMARY_INTERVAL: Duration = Duration::from_secs(10);

/// Longest log line kept from a guest; the rest is cut (and marked), so one
/// call cannot write a megabyte line.
pub(crate) const MAX_LOG_LINE_BYTES: usize = 4096;

/// Shown at the end of a line that was cut at [`MAX_LOG_LINE_BYTES`].
const CUT_MARKER: &str = "…[cut]";

/// One route's guest log: its settings, budget and counters.
pub struct RouteLog {
    route: std::sync::Arc<str>,
    settings: GuestLog,
    bucket: Mutex<Bucket>,
    /// Lines and bytes dropped since the gateway started (for `/metrics`).
    dropped_lines: AtomicU64,
    dropped_bytes: AtomicU64,
}

/// Token buckets on lines and bytes, refilled by elapsed time.
struct Bucket {
    lines: f64,
    bytes: f64,
    refilled: Instant,
    /// Lines dropped since the last summary, and when that was.
    unreported: u64,
    reported: Instant,
}

impl RouteLog {
    pub fn new(route: std::sync::Arc<str>, settings: GuestLog) -> RouteLog {
        let now = Instant::now();
        RouteLog {
            bucket: Mutex::new(Bucket {
                lines: f64::from(settings.burst),
                bytes: settings.bytes_per_sec as f64,
                refilled: now,
                unreported: 0,
                reported: now,
            }),
            route,
            settings,
            dropped_lines: AtomicU64::new(0),
            dropped_bytes: AtomicU64::new(0),
        }
    }

    pub fn route(&self) -> &str {
        &self.route
    }

    /// Lines dropped so far (over budget; lines below the route's `log`
    /// level are filtered, not dropped).
    pub fn dropped_lines(&self) -> u64 {
        self.dropped_lines.load(Ordering::Relaxed)
    }

    pub fn dropped_bytes(&self) -> u64 {
        self.dropped_bytes.load(Ordering::Relaxed)
    }

    /// Whether a line of `len` bytes at `level` may be written: within the
    /// route's level and budget. Cheap when it may not.
    pub fn admit(&self, level: LogLevel, len: usize) -> bool {
        if level > self.settings.level {
            return false;
        }
        let len = len.min(MAX_LOG_LINE_BYTES);
        let mut b = self.bucket.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let secs = now.duration_since(b.refilled).as_secs_f64();
        b.refilled = now;
        b.lines = (b.lines + secs * f64::from(self.settings.lines_per_sec))
            .min(f64::from(self.settings.burst));
        let bytes_cap = self.settings.bytes_per_sec as f64;
        b.bytes = (b.bytes + secs * bytes_cap).min(bytes_cap);
        let fits = b.lines >= 1.0 && b.bytes >= len as f64;
        if fits {
            b.lines -= 1.0;
            b.bytes -= len as f64;
        } else {
            b.unreported += 1;
            self.dropped_lines.fetch_add(1, Ordering::Relaxed);
            self.dropped_bytes.fetch_add(len as u64, Ordering::Relaxed);
        }
        if b.unreported > 0 && now.duration_since(b.reported) >= SUMMARY_INTERVAL {
            let (count, over) = (b.unreported, now.duration_since(b.reported));
            b.unreported = 0;
            b.reported = now;
            drop(b);
            tracing::warn!(
                target: "weir::guest",
                route = &*self.route,
                dropped = count,
                "guest log lines dropped in the last {}s (over the route's log_rate or log_bytes)",
                over.as_secs()
            );
        }
        fits
    }

    /// Writes one line of guest text at `level` if the route admits it.
    /// `stream` names where it came from (`stdout`, `stderr`, `log`).
    pub fn write(&self, level: LogLevel, stream: &'static str, line: &[u8]) {
        if !self.admit(level, line.len()) {
            return;
        }
        let text = String::from_utf8_lossy(line);
        let text = text.trim_end_matches('\r');
        let (text, cut) = fit_line(text);
        let route = &*self.route;
        // `?` quotes and escapes the guest's text (newlines, quotes, ANSI
        // escapes), so it cannot pose as a field or a line of its own.
        macro_rules! emit {
            ($mac:ident) => {
                if cut {
                    tracing::$mac!(target: "weir::guest", route, stream, text = ?format_args!("{text:?}{CUT_MARKER}"), "guest")
                } else {
                    tracing::$mac!(target: "weir::guest", route, stream, text = ?text, "guest")
                }
            };
        }
        match level {
            LogLevel::Off => {}
            LogLevel::Error => emit!(error),
            LogLevel::Warn => emit!(warn),
            LogLevel::Info => emit!(info),
            LogLevel::Debug => emit!(debug),
        }
    }
}

/// `text` cut to [`MAX_LOG_LINE_BYTES`] on a character boundary, and whether
/// it was cut.
fn fit_line(text: &str) -> (&str, bool) {
    if text.len() <= MAX_LOG_LINE_BYTES {
        return (text, false);
    }
    (&text[..text.floor_char_boundary(MAX_LOG_LINE_BYTES)], true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(lines_per_sec: u32, bytes_per_sec: u64, burst: u32) -> RouteLog {
        RouteLog::new(
            "/loud".into(),
            GuestLog {
                level: LogLevel::Info,
                lines_per_sec,
                bytes_per_sec,
                burst,
            },
        )
    }

    /// The burst passes, the rest of a flood is dropped and counted.
    #[test]
    fn a_flood_is_cut_to_the_burst() {
        let l = log(1, 1 << 20, 50);
        let admitted = (0..10_000).filter(|_| l.admit(LogLevel::Info, 100)).count();
        assert!((50..=52).contains(&admitted), "{admitted}");
        assert_eq!(l.dropped_lines() as usize, 10_000 - admitted);
    }

    #[test]
    fn bytes_are_budgeted_too() {
        let l = log(1_000_000, 10_000, 1_000_000);
        let admitted = (0..100).filter(|_| l.admit(LogLevel::Info, 1000)).count();
        assert!((10..=11).contains(&admitted), "{admitted}");
        assert!(l.dropped_bytes() >= 89_000);
    }

    #[test]
    fn lines_below_the_routes_level_are_filtered_not_counted() {
        let l = log(100, 1 << 20, 100);
        assert!(!l.admit(LogLevel::Debug, 10));
        assert!(l.admit(LogLevel::Warn, 10));
        assert_eq!(l.dropped_lines(), 0);
    }

    #[test]
    fn long_lines_are_cut_on_a_character_boundary() {
        let long = "é".repeat(MAX_LOG_LINE_BYTES);
        let (cut, was_cut) = fit_line(&long);
        assert!(was_cut && cut.len() <= MAX_LOG_LINE_BYTES && cut.len() > 4000);
        assert_eq!(fit_line("short"), ("short", false));
    }
}
