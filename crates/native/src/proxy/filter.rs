//! A proxy route's filter (`filter = "x.wasm"`): a guest that sees every
//! message of the route's connections, either way, as a proxy event in its
//! route's batches (`weir_guest_runtime`'s slot, `kind/slot.rs`), and passes on what it forwards. What
//! the guest's answer forwards toward the client is framed and written by
//! the guest route's `apply` like any send; what it forwards toward the
//! upstream reaches [`FilterLinks`] through the [`FilterSink`] trait and is
//! masked into the connection's [`FilterLink`] here, and its
//! upstream side (`pump`) writes it. Without a filter none of this exists
//! and nothing is copied to a guest.
//!
//! Order and closes: each side counts the messages it gave the filter per
//! direction; a batch that has run (answered, or failed and closed its
//! connections 1011) counts its messages settled. A close goes on only once
//! every message before it in its direction has settled, so what the
//! filter forwarded before a close is delivered before it.

use super::Masks;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;
use weir_abi::Direction;
use weir_reactor::attached::FilterSink;
use weir_reactor::registry::worker_of;
use weir_ws::encode;

/// What a filtered connection shares with whichever thread runs its
/// filter's batches (the worker, or the route's guest thread).
pub struct FilterLink {
    /// Masked client frames the filter forwarded, for the upstream side to
    /// write.
    to_upstream: Mutex<ToUpstream>,
    /// Messages of each direction ([`Direction`] as index) whose batch has
    /// run.
    settled: [AtomicU64; 2],
    /// Wakes the upstream side: frames to write, or messages settled.
    pub(super) wake: Notify,
}

struct ToUpstream {
    frames: Vec<u8>,
    masks: Masks,
}

impl FilterLink {
    pub(super) fn new() -> FilterLink {
        FilterLink {
            to_upstream: Mutex::new(ToUpstream {
                frames: Vec::new(),
                masks: Masks::new(),
            }),
            settled: [AtomicU64::new(0), AtomicU64::new(0)],
            wake: Notify::new(),
        }
    }

    /// Messages of `direction` settled so far.
    pub(super) fn settled(&self, direction: Direction) -> u64 {
        self.settled[direction as usize].load(Ordering::Acquire)
    }

    /// Moves the frames forwarded toward the upstream so far to the end of
    /// `out`.
    pub(super) fn take_frames(&self, out: &mut Vec<u8>) {
        let mut to = self.to_upstream.lock().expect("filter link lock");
        if out.is_empty() {
            std::mem::swap(out, &mut to.frames);
        } else {
            out.append(&mut to.frames);
        }
    }

    /// Frames one message toward the upstream, masked.
    fn forward_to_upstream(&self, text: bool, payload: &[u8]) {
        let mut to = self.to_upstream.lock().expect("filter link lock");
        let mask = to.masks.next();
        encode::append_client_frame(&mut to.frames, encode::message_opcode(text), payload, mask);
        drop(to);
        self.wake.notify_one();
    }
}

/// The filtered connections of one route, by worker: found by the guest
/// route's `apply` (forwards toward the upstream) and after each batch
/// (settling), only for connections of the route itself.
pub struct FilterLinks {
    shards: Box<[Shard]>,
}

/// One worker's filtered connections.
type Shard = Mutex<HashMap<u64, Arc<FilterLink>>>;

impl FilterLinks {
    pub fn new(workers: usize) -> FilterLinks {
        FilterLinks {
            shards: (0..workers.max(1)).map(|_| Mutex::default()).collect(),
        }
    }

    fn shard(&self, conn: u64) -> &Shard {
        &self.shards[worker_of(conn) % self.shards.len()]
    }

    pub(super) fn insert(&self, conn: u64, link: Arc<FilterLink>) {
        self.shard(conn)
            .lock()
            .expect("filter links lock")
            .insert(conn, link);
    }

    pub(super) fn remove(&self, conn: u64) {
        self.shard(conn)
            .lock()
            .expect("filter links lock")
            .remove(&conn);
    }

    fn get(&self, conn: u64) -> Option<Arc<FilterLink>> {
        self.shard(conn)
            .lock()
            .expect("filter links lock")
            .get(&conn)
            .cloned()
    }
}

impl FilterSink for FilterLinks {
    fn forward_to_upstream(&self, conn: u64, text: bool, payload: &[u8]) {
        if let Some(link) = self.get(conn) {
            link.forward_to_upstream(text, payload);
        }
    }

    fn settle(&self, messages: &mut dyn Iterator<Item = (u64, Direction)>) {
        let mut last: Option<(u64, Arc<FilterLink>)> = None;
        for (conn, direction) in messages {
            let link = match &last {
                Some((c, link)) if *c == conn => link.clone(),
                _ => {
                    if let Some((_, link)) = last.take() {
                        link.wake.notify_one();
                    }
                    let Some(link) = self.get(conn) else { continue };
                    last = Some((conn, link.clone()));
                    link
                }
            };
            link.settled[direction as usize].fetch_add(1, Ordering::AcqRel);
        }
        if let Some((_, link)) = last {
            link.wake.notify_one();
        }
    }
}

/// Messages a side assembles for the filter at most (16 MiB: the largest a
/// guest batch takes, `weir_guest_runtime`'s `kind/slot.rs`).
pub(super) const MAX_FILTERED_MESSAGE_BYTES: usize = 16 << 20;
