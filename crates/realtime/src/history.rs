//! A channel's stream in memory: its position (offset of the last
//! publication, and the epoch those offsets count in) and the publications
//! still within `history_size`, `history_max_bytes` and `history_ttl`.
//! Recovery from a client's (offset, epoch) answers either every missed
//! publication in order, or "not recovered" when the window is gone or the
//! epoch differs. A Redis Streams store (XADD with MAXLEN and a TTL, the
//! epoch in a key beside it) answers the same questions across nodes.

use super::Publication;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Bytes a publication costs in history besides its data: the entry, its
/// offset and time, so a flood of empty publications is bounded too.
const ENTRY_OVERHEAD_BYTES: usize = 64;

/// A position in a channel's stream.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StreamPosition {
    pub offset: u64,
    pub epoch: String,
}

/// What a recovery found.
#[derive(Debug, Clone)]
pub struct Recovery {
    /// Every publication after the client's offset, in order (empty when
    /// not recovered: continuity cannot be promised).
    pub publications: Vec<Publication>,
    /// The client's position was still covered by history.
    pub recovered: bool,
    /// The stream's position now.
    pub top: StreamPosition,
}

/// A history query (Centrifugo's `history` command).
#[derive(Debug, Clone, Default)]
pub struct HistoryQuery {
    /// Most publications to return; None: all (0 returns only the position).
    pub limit: Option<usize>,
    /// Only publications after this position (its epoch must match).
    pub since: Option<StreamPosition>,
    /// Newest first.
    pub reverse: bool,
}

/// Why a history query has no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HistoryError {
    /// `since` names another epoch, or a position history no longer covers
    /// (Centrifugo: 112 unrecoverable position).
    #[error("unrecoverable position")]
    UnrecoverablePosition,
}

/// One channel's stream.
#[derive(Debug)]
pub struct Stream {
    epoch: String,
    /// Offset of the last publication (0: none yet in this epoch).
    top: u64,
    entries: VecDeque<Publication>,
    /// Bytes `entries` cost (data plus [`ENTRY_OVERHEAD_BYTES`] each).
    bytes: usize,
}

impl Stream {
    /// A stream in a fresh epoch: history that existed before (a restart, a
    /// channel that aged out) is gone, and positions from then no longer
    /// recover.
    pub fn new() -> Stream {
        Stream {
            epoch: new_epoch(),
            top: 0,
            entries: VecDeque::new(),
            bytes: 0,
        }
    }

    pub fn position(&self) -> StreamPosition {
        StreamPosition {
            offset: self.top,
            epoch: self.epoch.clone(),
        }
    }

    pub fn epoch(&self) -> &str {
        &self.epoch
    }

    /// Nothing is kept: the stream may go (a new one starts a new epoch).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The next offset: assigned here only, under the channel's lock, so
    /// history order is delivery order.
    pub(crate) fn next_offset(&mut self) -> u64 {
        self.top += 1;
        self.top
    }

    /// Keeps `publication` (its offset from [`next_offset`](Self::next_offset)),
    /// then trims to `size` publications and `max_bytes`.
    pub fn append(&mut self, publication: Publication, size: usize, max_bytes: usize) {
        self.bytes += cost(&publication);
        self.entries.push_back(publication);
        while self.entries.len() > size || (self.bytes > max_bytes && self.entries.len() > 1) {
            self.pop_oldest();
        }
        if self.bytes > max_bytes {
            // One publication larger than the whole budget is not kept.
            self.pop_oldest();
        }
    }

    /// Drops publications older than `ttl`.
    pub fn expire(&mut self, now: Instant, ttl: Duration) {
        while let Some(first) = self.entries.front() {
            if now.saturating_duration_since(first.time) < ttl {
                break;
            }
            self.pop_oldest();
        }
    }

    fn pop_oldest(&mut self) {
        if let Some(gone) = self.entries.pop_front() {
            self.bytes -= cost(&gone);
        }
    }

    /// Publications after `since` if history still holds all of them
    /// (call [`expire`](Self::expire) first). An empty `since.epoch` means
    /// "any epoch", as Centrifugo's clients send before they know one.
    pub fn recover(&self, since: &StreamPosition) -> Recovery {
        let top = self.position();
        let same_epoch = since.epoch.is_empty() || since.epoch == self.epoch;
        let missed = self.after(since.offset);
        let covered = since.offset == self.top
            || (since.offset < self.top
                && missed.first().is_some_and(|p| p.offset == since.offset + 1));
        if same_epoch && covered {
            return Recovery {
                publications: missed,
                recovered: true,
                top,
            };
        }
        Recovery {
            publications: Vec::new(),
            recovered: false,
            top,
        }
    }

    /// Publications with offsets above `offset`, oldest first.
    fn after(&self, offset: u64) -> Vec<Publication> {
        let start = self.entries.partition_point(|p| p.offset <= offset);
        self.entries.range(start..).cloned().collect()
    }

    /// Answers a history query (call [`expire`](Self::expire) first).
    pub fn query(&self, q: &HistoryQuery) -> Result<Vec<Publication>, HistoryError> {
        let mut pubs = match &q.since {
            Some(since) => {
                let r = self.recover(since);
                if !r.recovered {
                    return Err(HistoryError::UnrecoverablePosition);
                }
                r.publications
            }
            None => self.entries.iter().cloned().collect(),
        };
        if q.reverse {
            pubs.reverse();
        }
        if let Some(limit) = q.limit {
            pubs.truncate(limit);
        }
        Ok(pubs)
    }

    /// Forgets the publications; the position stays, so subscribers keep
    /// counting (Centrifugo's `history_remove`).
    /// A stream that continues another's (a node's copy of what Redis
    /// holds): at `top` in `epoch`, with no publications yet.
    pub fn at(top: StreamPosition) -> Stream {
        Stream {
            epoch: top.epoch,
            top: top.offset,
            entries: VecDeque::new(),
            bytes: 0,
        }
    }

    /// Keeps a publication whose offset was given elsewhere (the next one).
    pub fn record(&mut self, publication: Publication, size: usize, max_bytes: usize) {
        self.top = publication.offset;
        self.append(publication, size, max_bytes);
    }

    /// The publications after `after` up to the top, if all are still here.
    pub fn since(&self, after: u64) -> Option<Vec<Publication>> {
        let missed = self.after(after);
        let covered = after >= self.top || missed.first().is_some_and(|p| p.offset == after + 1);
        covered.then_some(missed)
    }

    pub fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }
}

impl Default for Stream {
    fn default() -> Self {
        Stream::new()
    }
}

fn cost(p: &Publication) -> usize {
    p.data.len() + ENTRY_OVERHEAD_BYTES
}

/// A random epoch: 8 hex digits, so a restarted gateway or a re-created
/// channel never matches a position from before.
pub(crate) fn new_epoch() -> String {
    let mut raw = [0u8; 4];
    getrandom::fill(&mut raw).expect("the OS random source");
    raw.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn publish(s: &mut Stream, data: &str, size: usize, max_bytes: usize) -> u64 {
        let offset = s.next_offset();
        s.append(
            Publication {
                offset,
                data: Bytes::copy_from_slice(data.as_bytes()),
                info: None,
                time: Instant::now(),
            },
            size,
            max_bytes,
        );
        offset
    }

    fn offsets(p: &[Publication]) -> Vec<u64> {
        p.iter().map(|p| p.offset).collect()
    }

    #[test]
    fn offsets_increase_by_one_and_epochs_differ() {
        let mut s = Stream::new();
        assert_eq!(publish(&mut s, "1", 10, 1 << 20), 1);
        assert_eq!(publish(&mut s, "2", 10, 1 << 20), 2);
        assert_eq!(s.position().offset, 2);
        assert_ne!(Stream::new().epoch(), s.epoch());
        assert_eq!(s.epoch().len(), 8);
    }

    #[test]
    fn history_is_bounded_in_messages_and_bytes() {
        let mut s = Stream::new();
        for i in 0..10 {
            publish(&mut s, &i.to_string(), 3, 1 << 20);
        }
        assert_eq!(
            offsets(&s.query(&HistoryQuery::default()).unwrap()),
            [8, 9, 10]
        );
        // Three 100-byte publications cost 3 * 164 bytes: a 400-byte cap keeps two.
        let mut s = Stream::new();
        for _ in 0..5 {
            publish(&mut s, &"x".repeat(100), 100, 400);
        }
        assert_eq!(offsets(&s.query(&HistoryQuery::default()).unwrap()), [4, 5]);
        assert!(s.bytes <= 400);
        // One publication over the whole cap is not kept; the offset still counts.
        publish(&mut s, &"x".repeat(1000), 100, 400);
        assert!(s.is_empty());
        assert_eq!(s.position().offset, 6);
    }

    #[test]
    fn history_ages_out() {
        let mut s = Stream::new();
        publish(&mut s, "a", 10, 1 << 20);
        let later = Instant::now() + Duration::from_secs(61);
        s.expire(later, Duration::from_secs(60));
        assert!(s.is_empty());
        assert_eq!(
            s.position().offset,
            1,
            "the position outlives the publications"
        );
    }

    #[test]
    fn recovery_returns_every_missed_publication_or_says_it_cannot() {
        let mut s = Stream::new();
        for i in 0..5 {
            publish(&mut s, &i.to_string(), 3, 1 << 20);
        }
        // History holds 3, 4, 5.
        let at = |offset| StreamPosition {
            offset,
            epoch: s.epoch().to_string(),
        };
        let r = s.recover(&at(2));
        assert!(r.recovered);
        assert_eq!(offsets(&r.publications), [3, 4, 5]);
        let r = s.recover(&at(5));
        assert!(r.recovered && r.publications.is_empty());
        let r = s.recover(&at(1));
        assert!(!r.recovered, "publication 2 is gone");
        assert!(r.publications.is_empty());
        assert_eq!(r.top.offset, 5);
        let r = s.recover(&at(9));
        assert!(!r.recovered, "a position from the future");
        let r = s.recover(&StreamPosition {
            offset: 4,
            epoch: "other".into(),
        });
        assert!(!r.recovered, "another epoch");
        let r = s.recover(&StreamPosition {
            offset: 4,
            epoch: String::new(),
        });
        assert!(r.recovered, "an empty epoch is any epoch");
    }

    #[test]
    fn history_queries_take_limit_since_and_reverse() {
        let mut s = Stream::new();
        for i in 0..5 {
            publish(&mut s, &i.to_string(), 10, 1 << 20);
        }
        let epoch = s.epoch().to_string();
        let q = |limit, since: Option<u64>, reverse| HistoryQuery {
            limit,
            since: since.map(|offset| StreamPosition {
                offset,
                epoch: epoch.clone(),
            }),
            reverse,
        };
        assert_eq!(offsets(&s.query(&q(Some(2), None, false)).unwrap()), [1, 2]);
        assert_eq!(offsets(&s.query(&q(Some(2), None, true)).unwrap()), [5, 4]);
        assert_eq!(offsets(&s.query(&q(None, Some(3), false)).unwrap()), [4, 5]);
        assert!(s.query(&q(Some(0), None, false)).unwrap().is_empty());
        s.clear();
        assert_eq!(s.position().offset, 5);
        assert!(s.query(&q(None, None, false)).unwrap().is_empty());
    }
}
