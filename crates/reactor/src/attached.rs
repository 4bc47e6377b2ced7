//! A guest attached to a native route kind: a proxy route's filter, a
//! real-time namespace's hook. The native kind holds these traits and the
//! guest crate implements them, so neither crate names the other; the route
//! table (`weir::routes`) joins the two when it builds the route.

use crate::behaviour::LocalFuture;
use crate::kind::WorkerSetup;
use std::rc::Rc;
use weir_abi::{Direction, EventKind};

/// The attached guest, shared by every worker: what the native kind holds.
pub trait AttachedGuest: Send + Sync {
    /// The guest's slot on one worker, where that worker's connections
    /// queue their events for its batches.
    fn on_worker(&self, worker: &WorkerSetup) -> Rc<dyn AttachedSlot>;
}

/// The attached guest on one worker. Events queue here and run as one
/// batch at the worker's next guest turn (or on the route's guest thread).
pub trait AttachedSlot {
    /// A connection opened; `info` is its open event's connection info.
    fn open(&self, conn: u64, info: &[u8]);
    /// A whole message of `conn` going `direction`, for a filter; the caller
    /// wakes the slot once its read is handled.
    fn proxy_message(&self, conn: u64, direction: Direction, text: bool, payload: &[u8]);
    /// A question for a namespace's hook (rt-subscribe, rt-publish),
    /// encoded as the ABI's real-time request; runs at the next turn.
    fn rt_question(&self, conn: u64, kind: EventKind, bytes: &[u8]);
    /// More events wait than the route may hold: stop reading.
    fn backlogged(&self) -> bool;
    /// Resolves once the backlog has shrunk.
    fn wait_backlog(&self) -> LocalFuture<'_, ()>;
    /// Events were queued: run them once other ready connections had
    /// their turn.
    fn wake(&self);
    /// `conn` closed with `code`.
    fn close(&self, conn: u64, code: u16, reason: &str);
}

/// A proxy route's side of its filter, called by whichever thread runs the
/// filter's batches: the messages the guest forwards toward the upstream,
/// and the messages each batch settled (so a close waits for them).
pub trait FilterSink: Send + Sync {
    /// A forward command toward the upstream of `conn` (ignored when `conn`
    /// is not a connection of the route, or is gone).
    fn forward_to_upstream(&self, conn: u64, text: bool, payload: &[u8]);
    /// A batch has run: its proxy messages (connection, direction) are
    /// settled, answered or failed.
    fn settle(&self, messages: &mut dyn Iterator<Item = (u64, Direction)>);
}
