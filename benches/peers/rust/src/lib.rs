//! Shared by the Rust peer servers: the listen address, the runtime (one
//! thread, to compare with `weir serve --workers 1` on one pinned core), and
//! the relay lobby that pairs connections in arrival order.

use std::sync::Mutex;
use tokio::sync::oneshot;

/// Largest message the peers accept: the benchmarks send up to 2 MiB; the
/// comparison asks for at least 32 MiB so no peer rejects a large payload.
pub const MAX_MESSAGE_BYTES: usize = 64 << 20;

/// `127.0.0.1:PORT`, PORT from the first argument, else `$PORT`, else 9001.
pub fn listen_addr() -> String {
    let port = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("PORT").ok())
        .unwrap_or_else(|| "9001".into());
    format!("127.0.0.1:{port}")
}

/// A current-thread tokio runtime: the peer gets exactly one core, like weir with one worker.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Pairs relay connections in arrival order: the first waits, the second
/// takes it. Each side hands over the handle its partner writes to.
pub struct Lobby<T> {
    waiting: Mutex<Option<(T, oneshot::Sender<T>)>>,
}

impl<T> Default for Lobby<T> {
    fn default() -> Self {
        Lobby {
            waiting: Mutex::new(None),
        }
    }
}

impl<T> Lobby<T> {
    /// Returns the partner's handle once paired; `None` if the process is shutting down.
    pub async fn pair(&self, mut mine: T) -> Option<T> {
        let rx = {
            let mut w = self.waiting.lock().unwrap();
            if let Some((theirs, tx)) = w.take() {
                match tx.send(mine) {
                    Ok(()) => return Some(theirs),
                    // The waiting side is gone: wait in its place.
                    Err(back) => mine = back,
                }
            }
            let (tx, rx) = oneshot::channel();
            *w = Some((mine, tx));
            rx
        };
        rx.await.ok()
    }
}
