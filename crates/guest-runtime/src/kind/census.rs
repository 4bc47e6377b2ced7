//! A count of a guest route's live connection state across workers, for a
//! deploy that must know what it will inherit: each worker's slot copies
//! its runner's attachments into the census at its next scheduler turn
//! (attachments live in the runners, which never leave their worker
//! thread or its guest thread). Identical attachments are kept once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Distinct attachment bytes one census keeps at most: it bounds the copy a
/// deploy holds (20,000 connections × a 64 KiB `attachment_max` would be
/// 1.3 GB). Connections past it are counted as unchecked.
pub(crate) const CENSUS_MAX_BYTES: usize = 64 << 20;
/// How long a deploy waits for every worker to answer: a worker answers at
/// its next scheduler turn, or when its guest thread hands the route back
/// (at most one call's deadline later).
pub(crate) const CENSUS_TIMEOUT: Duration = Duration::from_secs(5);

/// The census of one guest route; workers answer when the generation they
/// saw last differs from [`Census::wanted`].
#[derive(Default)]
pub(crate) struct Census {
    /// The generation asked for (0: none yet). Read by every slot at each
    /// scheduler turn: one relaxed load of a word only deploys write.
    wanted: AtomicU64,
    tally: Mutex<Tally>,
    answered: Condvar,
}

#[derive(Default)]
struct Tally {
    generation: u64,
    answers: usize,
    distinct: HashMap<Vec<u8>, usize>,
    bytes: usize,
    live: usize,
    unchecked: usize,
}

/// The live state of a route, gathered from every worker.
#[derive(Debug, Default)]
pub(crate) struct Gathered {
    /// Each distinct attachment once...
    pub attachments: Vec<Vec<u8>>,
    /// ...and how many connections hold it (same order).
    pub holders: Vec<usize>,
    /// Connections with an attachment.
    pub live: usize,
    /// Of those, connections whose attachment did not fit
    /// [`CENSUS_MAX_BYTES`] (not checked).
    pub unchecked: usize,
}

/// Not every worker answered within [`CENSUS_TIMEOUT`].
#[derive(Debug, thiserror::Error)]
#[error(
    "{answered} of {asked} workers reported their connections' state within {CENSUS_TIMEOUT:?}"
)]
pub(crate) struct CensusTimedOut {
    pub answered: usize,
    pub asked: usize,
}

impl Census {
    /// The generation workers should answer.
    #[inline]
    pub(crate) fn wanted(&self) -> u64 {
        self.wanted.load(Ordering::Acquire)
    }

    /// A worker's answer for `generation`: its attachments (empty ones are
    /// no state). An answer to an older generation is dropped.
    pub(crate) fn answer<'a>(&self, generation: u64, attachments: impl Iterator<Item = &'a [u8]>) {
        let mut tally = self.tally.lock().expect("census lock");
        if generation == 0 || tally.generation != generation {
            return;
        }
        for bytes in attachments.filter(|a| !a.is_empty()) {
            tally.live += 1;
            if let Some(n) = tally.distinct.get_mut(bytes) {
                *n += 1;
            } else if tally.bytes + bytes.len() <= CENSUS_MAX_BYTES {
                tally.bytes += bytes.len();
                tally.distinct.insert(bytes.to_vec(), 1);
            } else {
                tally.unchecked += 1;
            }
        }
        tally.answers += 1;
        self.answered.notify_all();
    }

    /// Asks every worker (`wakers`: one per slot of the route) for its
    /// attachments and waits for all answers. Blocks: call it off the
    /// workers (the admin API's blocking pool).
    pub(crate) fn gather(&self, wakers: &[Arc<Notify>]) -> Result<Gathered, CensusTimedOut> {
        let mut tally = self.tally.lock().expect("census lock");
        let generation = tally.generation + 1;
        *tally = Tally {
            generation,
            ..Tally::default()
        };
        self.wanted.store(generation, Ordering::Release);
        drop(tally);
        for waker in wakers {
            waker.notify_one();
        }
        let until = Instant::now() + CENSUS_TIMEOUT;
        let mut tally = self.tally.lock().expect("census lock");
        while tally.answers < wakers.len() {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(CensusTimedOut {
                    answered: tally.answers,
                    asked: wakers.len(),
                });
            }
            tally = self
                .answered
                .wait_timeout(tally, left)
                .expect("census lock")
                .0;
        }
        let (attachments, holders) = std::mem::take(&mut tally.distinct).into_iter().unzip();
        let gathered = Gathered {
            attachments,
            holders,
            live: tally.live,
            unchecked: tally.unchecked,
        };
        // Later answers to this generation are dropped.
        tally.generation += 1;
        tally.bytes = 0;
        Ok(gathered)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identical_attachments_are_kept_once_and_counted() {
        let census = Census::default();
        let wakers = vec![Arc::new(Notify::new()), Arc::new(Notify::new())];
        std::thread::scope(|s| {
            s.spawn(|| {
                while census.wanted() == 0 {
                    std::thread::yield_now();
                }
                let g = census.wanted();
                census.answer(g, [&b"a"[..], b"a", b""].into_iter());
                census.answer(g, [&b"b"[..]].into_iter());
            });
            let gathered = census.gather(&wakers).unwrap();
            assert_eq!(gathered.live, 3);
            assert_eq!(gathered.attachments.len(), 2);
            assert_eq!(gathered.holders.iter().sum::<usize>(), 3);
            assert_eq!(gathered.unchecked, 0);
        });
    }

    #[test]
    fn stale_answers_are_dropped() {
        let census = Census::default();
        census.answer(0, [&b"x"[..]].into_iter());
        assert_eq!(census.tally.lock().unwrap().live, 0);
    }
}
