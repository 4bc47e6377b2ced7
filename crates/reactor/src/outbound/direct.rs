//! The write turn and direct writes: a producer (relay partner, guest
//! runner, publisher) writes straight into the consumer's socket when
//! nothing is queued and nobody is writing; a partial write leaves its
//! remainder at the head of the queue for the consumer to write first.
//! `model.rs` checks this protocol under loom.

use super::*;

impl<S: DirectSocket + ?Sized> Outbound<S> {
    /// Lets producers write straight into `socket`, the consumer's.
    /// (A [`Socket`](super::socket::Socket) in the gateway.)
    pub(crate) fn enable_direct(&self, socket: Weak<S>) {
        let _ = self.socket.set(socket);
        self.direct.store(true, Ordering::Release);
    }

    /// Consumer: direct writes stop (before its close frame: nothing may
    /// follow it). Waits out a direct write in progress.
    pub(crate) fn end_direct(&self) {
        if !self.direct.load(Ordering::Acquire) {
            return;
        }
        loop {
            match self.turn.compare_exchange_weak(
                FREE,
                CONSUMER,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    self.direct.store(false, Ordering::Release);
                    self.turn.store(FREE, Ordering::Release);
                    return;
                }
                // The consumer's own turn (its write was cut short): no
                // producer can be writing.
                Err(CONSUMER) => {
                    self.direct.store(false, Ordering::Release);
                    return;
                }
                Err(_) => spin_loop(),
            }
        }
    }

    /// Direct writes are on: the consumer must hold the write turn to write.
    pub fn direct(&self) -> bool {
        self.direct.load(Ordering::Relaxed)
    }

    /// Consumer: takes the write turn until the guard drops. A producer
    /// holds the turn only for one non-blocking `send`, so this spins at
    /// most that long.
    pub(crate) fn write_turn(&self) -> WriteTurn<'_> {
        while self
            .turn
            .compare_exchange_weak(FREE, CONSUMER, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spin_loop();
        }
        WriteTurn(&self.turn)
    }

    /// Consumer: takes the write turn and keeps it past this call (a
    /// plane connection whose write waits for the socket holds it across
    /// loop turns); [`release_turn`](Self::release_turn) gives it back.
    pub(crate) fn hold_turn(&self) {
        std::mem::forget(self.write_turn());
    }

    /// Consumer: gives back a turn taken by [`hold_turn`](Self::hold_turn).
    pub(crate) fn release_turn(&self) {
        self.turn.store(FREE, Ordering::Release);
    }

    /// Consumer, holding the write turn: a direct write left the rest of
    /// a frame at the head of the queue.
    pub(crate) fn has_remainder(&self) -> bool {
        self.remainder.load(Ordering::Acquire)
    }

    /// Consumer, holding the write turn: the rest of a frame a direct write
    /// began, which must go out before anything else (None if there is none).
    pub(crate) fn take_remainder(&self) -> Option<Bytes> {
        if !self.remainder.swap(false, Ordering::AcqRel) {
            return None;
        }
        match self.try_recv() {
            Some(OutMsg::Frames(rest)) => {
                self.delivered(1);
                Some(rest)
            }
            _ => unreachable!("a remainder is queued first, under the write turn"),
        }
    }

    /// Consumer, holding the write turn, about to write messages it took in
    /// order: a remainder among them needs nothing more.
    pub(crate) fn clear_remainder(&self) {
        self.remainder.store(false, Ordering::Release);
    }

    /// Producer: writes `frames` (whole frames) straight to the consumer's
    /// socket if direct writes are on, nothing is queued ahead of them and
    /// nobody else is writing; whatever the socket did not take is queued.
    /// False when the connection is gone.
    pub fn send_direct(&self, frames: &[u8]) -> bool {
        self.write_or_queue(frames, |from| Bytes::copy_from_slice(&frames[from..]))
    }

    /// [`send_direct`](Self::send_direct) for frames shared by many
    /// connections (a publish): what is queued is the same buffer (or a
    /// slice of it), never a copy.
    pub fn send_shared(&self, frames: &Bytes) -> bool {
        self.write_or_queue(frames, |from| frames.slice(from..))
    }

    /// [`send_shared`](Self::send_shared) for several shared buffers in
    /// order (`slices` are the same buffers, ready for one `sendmsg`): one
    /// write instead of one per buffer. What the socket does not take is
    /// queued as the same buffers (the first one cut short, a slice).
    pub fn send_shared_all(&self, parts: &[Bytes], slices: &[IoSlice<'_>]) -> bool {
        if let [one] = parts {
            return self.send_shared(one);
        }
        if self.is_empty() && self.direct() && self.try_producer_turn() {
            let socket = self.socket.get().and_then(Weak::upgrade);
            let mut written = match socket {
                Some(socket) if self.direct() && self.is_empty() => {
                    socket.send_vectored_now(slices)
                }
                _ => 0,
            };
            if written == 0 {
                // Queued behind what is queued (see `write_or_queue`).
                self.turn.store(FREE, Ordering::Release);
                return parts.iter().all(|part| self.send(part.clone()));
            }
            // The rest goes to the head of the queue, in order, before the
            // turn is released (see `write_or_queue`).
            let mut rest = Vec::new();
            for part in parts {
                if written >= part.len() {
                    written -= part.len();
                    continue;
                }
                if written > 0 {
                    self.remainder.store(true, Ordering::Release);
                }
                rest.push(part.slice(written..));
                written = 0;
            }
            let ok = rest.is_empty() || self.send_first_all(rest);
            self.turn.store(FREE, Ordering::Release);
            return ok;
        }
        parts.iter().all(|part| self.send(part.clone()))
    }

    /// Queues `parts` ahead of everything queued, in their order.
    pub(super) fn send_first_all(&self, parts: Vec<Bytes>) -> bool {
        let len: usize = parts.iter().map(Bytes::len).sum();
        self.queued.fetch_add(len, Ordering::Relaxed);
        if self.is_closed() {
            self.queued.fetch_sub(len, Ordering::Relaxed);
            return false;
        }
        let count = parts.len();
        let mut queue = self.queue.lock().expect("outbound lock");
        for part in parts.into_iter().rev() {
            queue.push_front(OutMsg::Frames(part));
        }
        self.len.fetch_add(count, Ordering::Release);
        drop(queue);
        self.consumer.wake();
        true
    }

    /// Writes `frames` directly when it may, else queues `rest(n)`, the
    /// part from byte `n` the socket did not take.
    #[inline]
    pub(super) fn write_or_queue(&self, frames: &[u8], rest: impl FnOnce(usize) -> Bytes) -> bool {
        if self.is_empty() && self.direct() && self.try_producer_turn() {
            // Checked again under the turn: direct writes may have ended,
            // and the socket may be gone (then everything is queued, and
            // dropped with the queue).
            let socket = self.socket.get().and_then(Weak::upgrade);
            let written = match socket {
                Some(socket) if self.direct() && self.is_empty() => socket.send_now(frames),
                _ => 0,
            };
            if written > 0 {
                // The rest of a frame the socket began is queued first,
                // before the turn is released, so it is the next thing the
                // socket gets (a close queued meanwhile must not land
                // inside its frame).
                let ok = written == frames.len() || {
                    self.remainder.store(true, Ordering::Release);
                    self.send_first(rest(written))
                };
                self.turn.store(FREE, Ordering::Release);
                return ok;
            }
            // Nothing written: queued behind what is queued, as any send.
            // The checks under the turn fail when something was queued
            // since the first look (a direct write's remainder, say); put
            // in front of it, these frames would overtake it, or land
            // inside the frame it finishes (the loom model found that).
            self.turn.store(FREE, Ordering::Release);
        }
        self.send(rest(0))
    }

    pub(super) fn try_producer_turn(&self) -> bool {
        self.turn
            .compare_exchange(FREE, PRODUCER, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }
}
