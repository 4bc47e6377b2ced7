//! Latency histogram: log-linear buckets (64 per power of two, so a
//! reported percentile is within ~1.6% of the true value), mergeable across threads.

/// Sub-buckets per power of two: 2^6 = 64.
const SUB_BITS: u32 = 6;
const SUB: usize = 1 << SUB_BITS;
/// Values up to 2^40 ns (~18 minutes).
const MAX_POW: usize = 40;

pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; (MAX_POW + 1) * SUB],
            total: 0,
        }
    }
}

fn index(v: u64) -> usize {
    if v < SUB as u64 {
        return v as usize;
    }
    let msb = 63 - v.leading_zeros();
    let shift = msb - SUB_BITS;
    let bucket = (shift as usize + 1) * SUB + ((v >> shift) as usize & (SUB - 1));
    bucket.min((MAX_POW + 1) * SUB - 1)
}

/// Lowest value that lands in bucket `i` (upper half-open bound is the next one's).
fn value_at(i: usize) -> u64 {
    if i < SUB {
        return i as u64;
    }
    let shift = (i / SUB - 1) as u32;
    ((SUB + i % SUB) as u64) << shift
}

impl Histogram {
    pub fn record(&mut self, ns: u64) {
        self.counts[index(ns)] += 1;
        self.total += 1;
    }

    pub fn record_n(&mut self, ns: u64, n: u64) {
        self.counts[index(ns)] += n;
        self.total += n;
    }

    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.total += other.total;
    }

    /// The value at quantile `q` (0..=1), in ns; 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return value_at(i);
            }
        }
        value_at(self.counts.len() - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_close() {
        let mut h = Histogram::default();
        for v in 1..=10_000u64 {
            h.record(v * 1000);
        }
        let p50 = h.quantile(0.5) as f64;
        let p99 = h.quantile(0.99) as f64;
        assert!((p50 / 5_000_000.0 - 1.0).abs() < 0.02, "{p50}");
        assert!((p99 / 9_900_000.0 - 1.0).abs() < 0.02, "{p99}");
        for v in [0u64, 1, 63, 64, 65, 1000, 123_456_789] {
            assert!(value_at(index(v)) <= v);
            assert!(index(v + 1) >= index(v));
        }
    }
}
