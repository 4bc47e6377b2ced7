//! The wait between attempts to reach Redis, shared by every link that
//! keeps one up (the cluster broker here, guests' key-value stores in the
//! guest runtime): from [`BACKOFF_MIN`], doubling to [`BACKOFF_MAX`], back
//! to the start once a link was up. While it waits, what its owner keeps
//! sending is handed to the caller (held, or counted as lost), so a sender
//! never blocks on a link that is down.

use std::time::Duration;

/// First wait before reconnecting.
pub const BACKOFF_MIN: Duration = Duration::from_millis(100);
/// Longest wait between reconnects: a restarted Redis is found within it.
pub const BACKOFF_MAX: Duration = Duration::from_secs(2);

/// A link's current wait.
pub struct Backoff(Duration);

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff(BACKOFF_MIN)
    }
}

impl Backoff {
    /// How long the next wait is (for the log line that announces it).
    pub fn current(&self) -> Duration {
        self.0
    }

    /// The link was up: the next failure waits the least again.
    pub fn reset(&mut self) {
        self.0 = BACKOFF_MIN;
    }

    /// Waits the current backoff, giving each item `recv` yields meanwhile
    /// to `meanwhile`, then doubles the next wait. False when `recv` ends
    /// (the link's owner is gone: stop).
    pub async fn wait<T>(
        &mut self,
        mut recv: impl AsyncFnMut() -> Option<T>,
        mut meanwhile: impl FnMut(T),
    ) -> bool {
        let wake = tokio::time::sleep(self.0);
        tokio::pin!(wake);
        loop {
            tokio::select! {
                _ = &mut wake => break,
                got = recv() => match got {
                    Some(item) => meanwhile(item),
                    None => return false,
                },
            }
        }
        self.0 = (self.0 * 2).min(BACKOFF_MAX);
        true
    }
}
