//! The synchronization types of the outbound queue. In every build but one
//! they are std's atomics and mutex and the `atomic-waker` crate's waker,
//! re-exported: the same code as naming them directly. In the loom model
//! (`RUSTFLAGS="--cfg weir_loom"`, test builds only, see `model.rs`) they are
//! loom's, so the model can run producers and the consumer through every
//! interleaving, and every reordering their memory orderings allow.

#[cfg(not(all(test, weir_loom)))]
pub use atomic_waker::AtomicWaker;
#[cfg(not(all(test, weir_loom)))]
pub use std::hint::spin_loop;
#[cfg(not(all(test, weir_loom)))]
pub use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, AtomicUsize};
#[cfg(not(all(test, weir_loom)))]
pub use std::sync::Mutex;

#[cfg(all(test, weir_loom))]
pub use loom::hint::spin_loop;
#[cfg(all(test, weir_loom))]
pub use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, AtomicUsize};
#[cfg(all(test, weir_loom))]
pub use loom::sync::Mutex;

/// The consumer's waker cell under loom: a waker behind a mutex. It keeps
/// `atomic-waker`'s contract (`wake` wakes the waker last registered, if
/// it was not woken since) without its lock-free inside, which that crate
/// tests itself (loom's own mock prints every call).
#[cfg(all(test, weir_loom))]
pub struct AtomicWaker(loom::sync::Mutex<Option<std::task::Waker>>);

#[cfg(all(test, weir_loom))]
impl AtomicWaker {
    pub fn new() -> AtomicWaker {
        AtomicWaker(loom::sync::Mutex::new(None))
    }

    pub fn register(&self, waker: &std::task::Waker) {
        *self.0.lock().unwrap() = Some(waker.clone());
    }

    pub fn wake(&self) {
        let waker = self.0.lock().unwrap().take();
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}
