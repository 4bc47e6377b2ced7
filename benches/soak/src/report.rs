//! The figures of a run: a line per cycle while it runs, and at the end a
//! summary for people and one JSON line (`SOAK {...}`) for scripts.

use crate::cycle::CycleStats;
use std::fmt::Write as _;
use std::time::Duration;

/// The cycles of a whole run and the server's state after the last one.
pub struct Summary {
    /// Each cycle with its start, relative to the start of the run.
    pub cycles: Vec<(Duration, CycleStats)>,
    /// Server RSS and fds after the last cycle settled.
    pub end_rss_kib: u64,
    pub end_fds: usize,
    pub elapsed: Duration,
}

/// Share of the cycles treated as warm-up (allocator pools, guest instances
/// and caches fill during the first cycles; growth after that is the signal).
const WARMUP_SHARE: f64 = 0.1;

/// Min and max of a sequence, `None` when empty.
fn span(values: impl Iterator<Item = u64>) -> Option<(u64, u64)> {
    values.fold(None, |acc, v| match acc {
        None => Some((v, v)),
        Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
    })
}

impl Summary {
    fn total(&self, f: impl Fn(&CycleStats) -> u64) -> u64 {
        self.cycles.iter().map(|(_, c)| f(c)).sum()
    }

    pub fn round_trips(&self) -> u64 {
        self.total(|c| c.round_trips)
    }
    pub fn payload_bytes(&self) -> u64 {
        self.total(|c| c.payload_bytes)
    }
    pub fn sessions(&self) -> u64 {
        self.total(|c| c.sessions)
    }
    pub fn mismatches(&self) -> u64 {
        self.total(|c| c.mismatches)
    }
    pub fn failures(&self) -> u64 {
        self.total(|c| c.failures)
    }

    /// Cycles counted as warm-up: the first 10% (at least one when there are two or more).
    pub fn warmup_cycles(&self) -> usize {
        let n = self.cycles.len();
        if n < 2 {
            0
        } else {
            ((n as f64 * WARMUP_SHARE).ceil() as usize).clamp(1, n - 1)
        }
    }

    fn steady(&self) -> impl Iterator<Item = &CycleStats> {
        self.cycles
            .iter()
            .skip(self.warmup_cycles())
            .map(|(_, c)| c)
    }

    pub fn rss_start_kib(&self) -> u64 {
        self.cycles.first().map_or(0, |(_, c)| c.rest_rss_kib)
    }

    pub fn rss_peak_kib(&self) -> u64 {
        self.cycles
            .iter()
            .map(|(_, c)| c.rest_rss_kib.max(c.load_rss_kib))
            .chain([self.end_rss_kib])
            .max()
            .unwrap_or(0)
    }

    /// Min and max RSS at rest (before each cycle) after warm-up, end included.
    pub fn rss_rest_after_warmup(&self) -> Option<(u64, u64)> {
        span(
            self.steady()
                .map(|c| c.rest_rss_kib)
                .chain([self.end_rss_kib]),
        )
    }

    /// Min and max of the highest RSS under load of each cycle after warm-up.
    pub fn rss_load_after_warmup(&self) -> Option<(u64, u64)> {
        span(self.steady().map(|c| c.load_rss_kib))
    }

    /// Least-squares slope of the resting RSS after warm-up, in KiB per hour:
    /// a leak shows as a steady positive slope, noise as a small one of either sign.
    pub fn rss_rest_slope_kib_per_hour(&self) -> Option<f64> {
        self.rest_slope(|c| Some(c.rest_rss_kib))
    }

    /// Min and max of the gateway's heap in use at rest after warm-up.
    pub fn heap_rest_after_warmup(&self) -> Option<(u64, u64)> {
        span(self.steady().filter_map(|c| c.rest_heap_kib))
    }

    /// Min and max of the heap in use at rest outside the receive buffers.
    pub fn heap_outside_buffers_after_warmup(&self) -> Option<(u64, u64)> {
        span(
            self.steady()
                .filter_map(CycleStats::rest_heap_outside_buffers_kib),
        )
    }

    /// Slope of the resting heap in use outside the receive buffers after
    /// warm-up, KiB per hour: growth here is memory still referenced (a
    /// leak); RSS growth without it is the allocator keeping freed pages.
    pub fn heap_rest_slope_kib_per_hour(&self) -> Option<f64> {
        self.rest_slope(CycleStats::rest_heap_outside_buffers_kib)
    }

    fn rest_slope(&self, value: impl Fn(&CycleStats) -> Option<u64>) -> Option<f64> {
        let pts: Vec<(f64, f64)> = self
            .cycles
            .iter()
            .skip(self.warmup_cycles())
            .filter_map(|(at, c)| Some((at.as_secs_f64() / 3600.0, value(c)? as f64)))
            .collect();
        if pts.len() < 3 {
            return None;
        }
        let n = pts.len() as f64;
        let (mx, my) = (
            pts.iter().map(|p| p.0).sum::<f64>() / n,
            pts.iter().map(|p| p.1).sum::<f64>() / n,
        );
        let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
        let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
        (sxx > 0.0).then(|| sxy / sxx)
    }

    /// The resting fd count of the first cycle: every later count must equal it.
    pub fn fds_rest_first(&self) -> usize {
        self.cycles.first().map_or(0, |(_, c)| c.rest_fds)
    }

    /// Min and max fds at rest, over every cycle's start and end and the run's end.
    pub fn fds_rest_span(&self) -> (u64, u64) {
        span(
            self.cycles
                .iter()
                .flat_map(|(_, c)| [c.rest_fds as u64, c.after_fds as u64])
                .chain([self.end_fds as u64]),
        )
        .unwrap_or((0, 0))
    }

    pub fn fds_load_max(&self) -> usize {
        self.cycles
            .iter()
            .map(|(_, c)| c.load_fds)
            .max()
            .unwrap_or(0)
    }

    /// Every resting count (before and after each cycle) equals the first.
    pub fn fds_back_to_rest(&self) -> bool {
        let first = self.fds_rest_first() as u64;
        self.fds_rest_span() == (first, first)
    }

    /// No wrong answer, no failure, fds back to rest, and some work done.
    pub fn ok(&self) -> bool {
        self.mismatches() == 0
            && self.failures() == 0
            && self.fds_back_to_rest()
            && self.round_trips() > 0
    }

    /// The human-readable summary.
    pub fn human(&self) -> String {
        let mut s = String::new();
        let gib = self.payload_bytes() as f64 / (1u64 << 30) as f64;
        let _ = writeln!(
            s,
            "soak: {} cycles in {:.0}s, {} sessions, {} round trips, {:.2} GiB payload verified",
            self.cycles.len(),
            self.elapsed.as_secs_f64(),
            self.sessions(),
            self.round_trips(),
            gib
        );
        let _ = writeln!(
            s,
            "mismatches {}, failures {}",
            self.mismatches(),
            self.failures()
        );
        let _ = writeln!(
            s,
            "server RSS: start {} KiB, end {} KiB, peak {} KiB",
            self.rss_start_kib(),
            self.end_rss_kib,
            self.rss_peak_kib()
        );
        let w = self.warmup_cycles();
        if let (Some((rl, rh)), Some((ll, lh))) =
            (self.rss_rest_after_warmup(), self.rss_load_after_warmup())
        {
            let _ = write!(
                s,
                "after warm-up (cycles {}..): at rest {rl}..{rh} KiB, under load {ll}..{lh} KiB",
                w + 1
            );
            match self.rss_rest_slope_kib_per_hour() {
                Some(slope) => {
                    let _ = writeln!(s, ", resting trend {slope:+.0} KiB/h");
                }
                None => s.push('\n'),
            }
        }
        if let (Some((hl, hh)), Some((ol, oh))) = (
            self.heap_rest_after_warmup(),
            self.heap_outside_buffers_after_warmup(),
        ) {
            let _ = write!(
                s,
                "gateway heap in use at rest after warm-up: {hl}..{hh} KiB, \
                 outside receive buffers {ol}..{oh} KiB"
            );
            match self.heap_rest_slope_kib_per_hour() {
                Some(slope) => {
                    let _ = writeln!(s, ", trend {slope:+.0} KiB/h");
                }
                None => s.push('\n'),
            }
        }
        let (lo, hi) = self.fds_rest_span();
        let _ = writeln!(
            s,
            "server fds: at rest {} at the first cycle, {lo}..{hi} over all cycles ({}), under load up to {}",
            self.fds_rest_first(),
            if self.fds_back_to_rest() {
                "back to rest after every cycle"
            } else {
                "NOT back to rest"
            },
            self.fds_load_max()
        );
        s
    }

    /// One machine-readable line.
    pub fn json(&self) -> String {
        let pair = |v: Option<(u64, u64)>| match v {
            Some((a, b)) => format!("[{a},{b}]"),
            None => "null".into(),
        };
        let (lo, hi) = self.fds_rest_span();
        format!(
            "SOAK {{\"cycles\":{},\"secs\":{:.1},\"sessions\":{},\"round_trips\":{},\"payload_bytes\":{},\
             \"mismatches\":{},\"failures\":{},\"rss_start_kib\":{},\"rss_end_kib\":{},\"rss_peak_kib\":{},\
             \"warmup_cycles\":{},\"rss_rest_after_warmup_kib\":{},\"rss_load_after_warmup_kib\":{},\
             \"rss_rest_slope_kib_per_h\":{},\"heap_rest_after_warmup_kib\":{},\"heap_outside_buffers_after_warmup_kib\":{},\
             \"heap_outside_buffers_slope_kib_per_h\":{},\
             \"fds_rest\":{},\"fds_rest_span\":[{lo},{hi}],\"fds_load_max\":{},\
             \"ok\":{}}}",
            self.cycles.len(),
            self.elapsed.as_secs_f64(),
            self.sessions(),
            self.round_trips(),
            self.payload_bytes(),
            self.mismatches(),
            self.failures(),
            self.rss_start_kib(),
            self.end_rss_kib,
            self.rss_peak_kib(),
            self.warmup_cycles(),
            pair(self.rss_rest_after_warmup()),
            pair(self.rss_load_after_warmup()),
            self.rss_rest_slope_kib_per_hour()
                .map_or("null".into(), |v| format!("{v:.1}")),
            pair(self.heap_rest_after_warmup()),
            pair(self.heap_outside_buffers_after_warmup()),
            self.heap_rest_slope_kib_per_hour()
                .map_or("null".into(), |v| format!("{v:.1}")),
            self.fds_rest_first(),
            self.fds_load_max(),
            self.ok()
        )
    }
}

/// The progress line of cycle `n` (from 1), started at `at`.
pub fn cycle_line(n: usize, at: Duration, c: &CycleStats) -> String {
    format!(
        "cycle {n:>3} @{:>5.0}s: {} sessions, {} round trips, {:.0} MiB, mismatches {}, failures {}, \
         RSS {} KiB rest / {} KiB load, fds {} rest / {} load / {} after close ({:.2}s){}",
        at.as_secs_f64(),
        c.sessions,
        c.round_trips,
        c.payload_bytes as f64 / (1u64 << 20) as f64,
        c.mismatches,
        c.failures,
        c.rest_rss_kib,
        c.load_rss_kib,
        c.rest_fds,
        c.load_fds,
        c.after_fds,
        c.settle.as_secs_f64(),
        c.rest_heap_kib.map_or(String::new(), |h| format!(
            ", heap {h} KiB rest ({} KiB receive buffers)",
            c.rest_buffers_kib.unwrap_or(0)
        ))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cycle(rest_rss: u64, load_rss: u64, rest_fds: usize, after_fds: usize) -> CycleStats {
        CycleStats {
            sessions: 30,
            round_trips: 100,
            rest_rss_kib: rest_rss,
            load_rss_kib: load_rss,
            rest_fds,
            load_fds: rest_fds + 30,
            after_fds,
            ..Default::default()
        }
    }

    fn summary(cycles: Vec<CycleStats>, end_fds: usize) -> Summary {
        Summary {
            cycles: cycles
                .into_iter()
                .enumerate()
                .map(|(i, c)| (Duration::from_secs(20 * i as u64), c))
                .collect(),
            end_rss_kib: 1000,
            end_fds,
            elapsed: Duration::from_secs(200),
        }
    }

    #[test]
    fn warmup_is_left_out_of_the_steady_figures() {
        let mut cs = vec![cycle(500, 900, 9, 9)];
        cs.extend((0..9).map(|_| cycle(1000, 1400, 9, 9)));
        let s = summary(cs, 9);
        assert_eq!(s.warmup_cycles(), 1);
        assert_eq!(s.rss_start_kib(), 500);
        assert_eq!(s.rss_peak_kib(), 1400);
        assert_eq!(s.rss_rest_after_warmup(), Some((1000, 1000)));
        assert_eq!(s.rss_load_after_warmup(), Some((1400, 1400)));
        assert_eq!(s.rss_rest_slope_kib_per_hour(), Some(0.0));
        assert!(s.ok(), "{}", s.human());
        assert!(s.json().contains("\"ok\":true"));
    }

    #[test]
    fn growth_and_fd_leaks_are_reported() {
        // Resting RSS growing 10 KiB per 20 s cycle: 1800 KiB/h.
        let cs: Vec<_> = (0..10).map(|i| cycle(1000 + 10 * i, 2000, 9, 9)).collect();
        let slope = summary(cs, 9).rss_rest_slope_kib_per_hour().unwrap();
        assert!((slope - 1800.0).abs() < 1.0, "{slope}");

        // Heap in use flat outside the buffer pool (the pool alone moving)
        // while RSS grows: the report tells the three apart.
        let cs: Vec<_> = (0..10)
            .map(|i| CycleStats {
                rest_heap_kib: Some(700 + 64 * (i % 2)),
                rest_buffers_kib: Some(64 * (i % 2)),
                ..cycle(1000 + 10 * i, 2000, 9, 9)
            })
            .collect();
        let s = summary(cs, 9);
        assert_eq!(s.heap_rest_slope_kib_per_hour(), Some(0.0));
        assert_eq!(s.heap_rest_after_warmup(), Some((700, 764)));
        assert_eq!(s.heap_outside_buffers_after_warmup(), Some((700, 700)));
        assert!(s.human().contains(
            "heap in use at rest after warm-up: 700..764 KiB, outside receive buffers 700..700 KiB"
        ));
        assert!(s
            .json()
            .contains("\"heap_outside_buffers_after_warmup_kib\":[700,700]"));

        // One fd not returned after cycle 3: not ok even without a failure counted.
        let mut cs: Vec<_> = (0..5).map(|_| cycle(1000, 2000, 9, 9)).collect();
        cs[3].after_fds = 10;
        let s = summary(cs, 9);
        assert!(!s.fds_back_to_rest());
        assert!(!s.ok());
        assert!(s.human().contains("NOT back to rest"));
    }
}
