//! Rates and pacing: a connection's message and byte rates ([`ConnRate`],
//! judged by the loop once per message, its buckets refilled once per read
//! batch), the cell-rate check the server's upgrade limits use ([`Gcra`]),
//! and the slices a paced drain closes connections in ([`Pace`]). Pure
//! arithmetic over the times handed in: no clock is read here.

use crate::decode::DataPiece;
use std::time::{Duration, Instant};
use weir_config::{RateExceeded, Rates};
use weir_ws::frame::OpCode;

/// Why a message went over its connection's rate (metrics label it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Over {
    Messages,
    Bytes,
}

impl Over {
    /// The close reason a connection over this rate gets (with 1008).
    pub fn reason(self) -> &'static str {
        match self {
            Over::Messages => "message rate exceeded",
            Over::Bytes => "byte rate exceeded",
        }
    }
}

/// What the loop does with a data piece.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Hand it to the behaviour.
    Pass,
    /// Discard it (its message is over a rate, `rate_exceeded = "drop"`).
    Drop,
    /// Close the connection with 1008 (`rate_exceeded = "close"`).
    Close(Over),
}

/// A token bucket of one second of its rate: tokens are whole messages or
/// bytes, kept as `f64` so a slow rate refilled by many short batches
/// keeps its fractions.
#[derive(Debug, Clone)]
struct Bucket {
    per_sec: f64,
    tokens: f64,
}

impl Bucket {
    fn new(per_sec: f64) -> Bucket {
        Bucket {
            per_sec,
            tokens: per_sec,
        }
    }

    fn refill(&mut self, secs: f64) {
        self.tokens = (self.tokens + secs * self.per_sec).min(self.per_sec);
    }
}

/// One connection's message and byte rates (`max_message_rate`,
/// `max_byte_rate`), boxed in the connection only when its route sets
/// one. A message is judged at its first piece: it passes while both
/// buckets have room (a message token, bytes not in debt), and its bytes
/// are charged as its pieces arrive, so a message larger than a second's
/// bytes passes whole and the ones after it wait until the debt is paid.
/// A message over a rate is dropped whole (every piece) or closes the
/// connection, by the route's `rate_exceeded`.
#[derive(Debug, Clone)]
pub struct ConnRate {
    messages: Option<Bucket>,
    bytes: Option<Bucket>,
    exceeded: RateExceeded,
    /// When the buckets were last refilled.
    at: Instant,
    /// The message being received is being dropped, and why.
    dropping: Option<Over>,
    /// Dropped since the loop last took the counts: messages over the
    /// message rate, over the byte rate, and their payload bytes.
    dropped: [u64; 2],
    dropped_bytes: u64,
}

impl ConnRate {
    /// The rates of `rates`, or None when it limits no messages.
    pub fn new(rates: &Rates, now: Instant) -> Option<ConnRate> {
        if !rates.limits_messages() {
            return None;
        }
        let bucket = |rate: u64| (rate > 0).then(|| Bucket::new(rate as f64));
        Some(ConnRate {
            messages: bucket(u64::from(rates.messages)),
            bytes: bucket(rates.bytes),
            exceeded: rates.exceeded,
            at: now,
            dropping: None,
            dropped: [0; 2],
            dropped_bytes: 0,
        })
    }

    /// Adds what the time since the last refill earned (once per batch).
    pub fn refill(&mut self, now: Instant) {
        let secs = now.saturating_duration_since(self.at).as_secs_f64();
        self.at = now;
        for bucket in [&mut self.messages, &mut self.bytes].into_iter().flatten() {
            bucket.refill(secs);
        }
    }

    /// The verdict on one data piece (a compressed message's pieces are
    /// charged as they came on the wire).
    pub fn admit(&mut self, piece: &DataPiece) -> Admit {
        let len = piece.payload.len() as f64;
        if piece.opcode != OpCode::Continuation && piece.frame_start {
            self.dropping = None;
            let over = if self.messages.as_ref().is_some_and(|b| b.tokens < 1.0) {
                Some(Over::Messages)
            } else if self.bytes.as_ref().is_some_and(|b| b.tokens < 0.0) {
                Some(Over::Bytes)
            } else {
                None
            };
            if let Some(over) = over {
                if self.exceeded == RateExceeded::Close {
                    return Admit::Close(over);
                }
                self.dropping = Some(over);
            } else if let Some(b) = &mut self.messages {
                b.tokens -= 1.0;
            }
        }
        if let Some(over) = self.dropping {
            self.dropped_bytes += len as u64;
            // Counted where the loop counts messages: at their end.
            self.dropped[over as usize] += u64::from(piece.message_end());
            return Admit::Drop;
        }
        if let Some(b) = &mut self.bytes {
            b.tokens -= len;
        }
        Admit::Pass
    }

    /// Takes the drop counts since the last call: (over the message rate,
    /// over the byte rate, payload bytes dropped).
    pub fn take_dropped(&mut self) -> ([u64; 2], u64) {
        let counts = (self.dropped, self.dropped_bytes);
        self.dropped = [0; 2];
        self.dropped_bytes = 0;
        counts
    }
}

/// The generic cell rate algorithm: a rate with a burst, in one number per
/// limited key (the time the next request is due, in nanoseconds since
/// `epoch`), so a table of many addresses stays small and the check is
/// one comparison. `burst` requests may come at once; after that one per
/// `1 / rate`.
#[derive(Debug, Clone, Copy)]
pub struct Gcra {
    /// Nanoseconds between requests at the rate.
    interval: u64,
    /// How far ahead of now the due time may run: (burst - 1) intervals.
    tolerance: u64,
}

impl Gcra {
    /// `per_sec` requests a second, `burst` at once (at least 1).
    pub fn new(per_sec: u32, burst: u32) -> Gcra {
        let interval = 1_000_000_000 / u64::from(per_sec.max(1));
        Gcra {
            interval,
            tolerance: interval * u64::from(burst.max(1) - 1),
        }
    }

    /// One request at `now` (nanoseconds) against `due` (the key's state,
    /// 0 for a key never seen): Ok with the new state, or Err with how
    /// long until a request would pass.
    pub fn check(&self, due: u64, now: u64) -> Result<u64, Duration> {
        let due = due.max(now);
        if due - now > self.tolerance {
            return Err(Duration::from_nanos(due - now - self.tolerance));
        }
        Ok(due + self.interval)
    }

    /// Whether a key whose state is `due` is back to a full burst at
    /// `now`: such a key can be forgotten without changing any answer.
    pub fn is_full(&self, due: u64, now: u64) -> bool {
        due <= now
    }
}

/// The slices a paced drain closes connections in: `total` connections
/// over `window`, one slice every [`Pace::SLICE`], each closing what is
/// left divided by the slices left (so the last slice ends the window),
/// but at least [`Pace::MIN_PER_SLICE`] (a few connections close at once;
/// only many are spread).
#[derive(Debug, Clone)]
pub struct Pace {
    slices_left: u32,
    remaining: usize,
}

impl Pace {
    /// Time between two slices.
    pub const SLICE: Duration = Duration::from_millis(100);
    /// Fewest connections a slice closes (100 a second per pacer): below
    /// this a drain is no storm and spreading it would only slow it down.
    pub const MIN_PER_SLICE: usize = 10;

    pub fn new(total: usize, window: Duration) -> Pace {
        let slices = (window.as_millis() / Self::SLICE.as_millis()).max(1);
        Pace {
            slices_left: u32::try_from(slices).unwrap_or(u32::MAX),
            remaining: total,
        }
    }

    /// How many connections the next slice closes (0 once all are).
    pub fn next_slice(&mut self) -> usize {
        if self.remaining == 0 {
            return 0;
        }
        let left = self.slices_left.max(1) as usize;
        let n = self
            .remaining
            .div_ceil(left)
            .max(Self::MIN_PER_SLICE)
            .min(self.remaining);
        self.remaining -= n;
        self.slices_left = self.slices_left.saturating_sub(1);
        n
    }

    /// Every connection has had its close.
    pub fn done(&self) -> bool {
        self.remaining == 0
    }
}

/// The part of `drain_timeout` a paced drain spreads its closes over: all
/// but the last [`DRAIN_TAIL`] (the close handshakes of the last slice,
/// whose linger is `CLOSE_LINGER`), and at least half of it.
pub fn drain_window(drain_timeout: Duration) -> Duration {
    drain_timeout
        .saturating_sub(DRAIN_TAIL)
        .max(drain_timeout / 2)
}

/// Time a paced drain leaves after its last slice.
pub const DRAIN_TAIL: Duration = Duration::from_secs(3);

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(opcode: OpCode, len: usize, fin: bool) -> DataPiece {
        DataPiece {
            opcode,
            message: OpCode::Binary,
            fin,
            frame_len: len as u64,
            frame_start: true,
            frame_end: true,
            payload: 0..len,
            compressed: false,
        }
    }

    fn rates(messages: u32, bytes: u64, exceeded: RateExceeded) -> Rates {
        Rates {
            upgrades_per_ip: 0,
            messages,
            bytes,
            exceeded,
        }
    }

    #[test]
    fn no_rate_no_state() {
        assert!(ConnRate::new(&Rates::default(), Instant::now()).is_none());
    }

    /// A second's worth passes at once; the next is dropped until the
    /// bucket refills, then passes again.
    #[test]
    fn messages_over_the_rate_are_dropped_until_it_refills() {
        let t0 = Instant::now();
        let mut r = ConnRate::new(&rates(10, 0, RateExceeded::Drop), t0).unwrap();
        let one = piece(OpCode::Binary, 8, true);
        for _ in 0..10 {
            assert_eq!(r.admit(&one), Admit::Pass);
        }
        assert_eq!(r.admit(&one), Admit::Drop);
        assert_eq!(r.take_dropped(), ([1, 0], 8));
        r.refill(t0 + Duration::from_millis(250));
        // 2.5 tokens earned: two pass.
        assert_eq!(r.admit(&one), Admit::Pass);
        assert_eq!(r.admit(&one), Admit::Pass);
        assert_eq!(r.admit(&one), Admit::Drop);
        r.refill(t0 + Duration::from_secs(60));
        for _ in 0..10 {
            assert_eq!(r.admit(&one), Admit::Pass);
        }
    }

    /// A fragmented message is judged at its first frame and dropped whole.
    #[test]
    fn a_dropped_message_loses_all_its_pieces() {
        let t0 = Instant::now();
        let mut r = ConnRate::new(&rates(1, 0, RateExceeded::Drop), t0).unwrap();
        assert_eq!(r.admit(&piece(OpCode::Binary, 4, true)), Admit::Pass);
        assert_eq!(r.admit(&piece(OpCode::Binary, 4, false)), Admit::Drop);
        r.refill(t0 + Duration::from_secs(5));
        // The rest of the dropped message stays dropped.
        assert_eq!(r.take_dropped(), ([0, 0], 4), "counted at its end");
        assert_eq!(r.admit(&piece(OpCode::Continuation, 4, true)), Admit::Drop);
        assert_eq!(r.take_dropped(), ([1, 0], 4));
        assert_eq!(r.admit(&piece(OpCode::Binary, 4, true)), Admit::Pass);
    }

    /// Bytes go into debt within a message; the next message waits for it.
    #[test]
    fn bytes_over_the_rate_close_in_close_mode() {
        let t0 = Instant::now();
        let mut r = ConnRate::new(&rates(0, 100, RateExceeded::Close), t0).unwrap();
        assert_eq!(r.admit(&piece(OpCode::Binary, 150, true)), Admit::Pass);
        assert_eq!(
            r.admit(&piece(OpCode::Binary, 1, true)),
            Admit::Close(Over::Bytes)
        );
        r.refill(t0 + Duration::from_millis(600));
        assert_eq!(r.admit(&piece(OpCode::Binary, 1, true)), Admit::Pass);
    }

    #[test]
    fn gcra_allows_a_burst_then_the_rate() {
        let g = Gcra::new(10, 3);
        let (mut due, now) = (0, 1_000_000_000);
        for _ in 0..3 {
            due = g.check(due, now).expect("within the burst");
        }
        let wait = g.check(due, now).expect_err("past the burst");
        assert_eq!(wait, Duration::from_millis(100));
        due = g.check(due, now + 100_000_000).expect("one interval later");
        assert!(g.check(due, now + 100_000_000).is_err());
        assert!(!g.is_full(due, now + 200_000_000));
        assert!(!g.is_full(due, now + 300_000_000));
        assert!(g.is_full(due, now + 400_000_000));
    }

    /// Many connections are spread over the window, a few close at once.
    #[test]
    fn pace_spreads_many_and_closes_few_at_once() {
        let mut few = Pace::new(6, Duration::from_secs(7));
        assert_eq!(few.next_slice(), 6);
        assert!(few.done());

        let mut many = Pace::new(10_000, Duration::from_secs(7));
        let slices: Vec<usize> = std::iter::from_fn(|| Some(many.next_slice()))
            .take_while(|&n| n > 0)
            .collect();
        assert_eq!(slices.len(), 70);
        assert_eq!(slices.iter().sum::<usize>(), 10_000);
        assert!(
            slices.iter().all(|&n| (142..=143).contains(&n)),
            "{slices:?}"
        );
        assert_eq!(
            drain_window(Duration::from_secs(10)),
            Duration::from_secs(7)
        );
        assert_eq!(drain_window(Duration::from_secs(2)), Duration::from_secs(1));
    }
}
