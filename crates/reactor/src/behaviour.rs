//! What a route does with a connection: the [`Behaviour`] trait, one
//! implementation per route kind (`weir_native`'s echo, relay, pubsub,
//! centrifugo and proxy; `weir_guest_runtime`'s `GuestConn`). The connection loop (`conn`) is generic over it, so each
//! kind's hooks are compiled into its own loop with no dispatch per message,
//! and a new kind is a new implementation, not an edit to the loop.

use super::buffer::Output;
use super::decode::DataPiece;
use super::outbound::Outbound;
use std::future::Future;
use std::ops::Range;
use std::pin::Pin;
use std::sync::Arc;
use weir_ws::frame::OpCode;

/// Why a behaviour ends its connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// The connection is over; drop it without a close frame.
    Gone,
    /// Send this close (code, reason) and end the connection.
    Close(u16, &'static str),
}

/// A route kind's per-connection state and hooks, in the order the loop
/// calls them: `on_open`, then per read `on_data` for each data piece and
/// `end_of_read`, and `on_close` once at the end (or `abandon` when the
/// upgrade never completed).
pub trait Behaviour: 'static {
    /// Producers (a relay partner, the guest runner) may write straight
    /// into this connection's socket (see `outbound`).
    const DIRECT_WRITES: bool = false;

    /// Every message read is sent on whole, once (an echo, a relay): the
    /// route's messages out are its messages in, counted without a look
    /// at the replies.
    const SENDS_EACH_MESSAGE_ON: bool = false;

    /// The loop compresses this behaviour's own replies
    /// (`Output::push_message`: echo) on a connection that negotiated
    /// permessage-deflate. Every other kind's messages come from
    /// producers, which compress through the connection's `Outbound`;
    /// a connection never has both, so with context takeover one
    /// compressor sees every compressed message it sends.
    const COMPRESSES_REPLIES: bool = false;

    /// The socket is the connection's; nothing has been read yet.
    fn on_open(&mut self, _id: u64, _outbound: &Arc<Outbound>) {}

    /// Reading must wait: for a relay partner, or while a queue this
    /// connection's messages feed is over its budget (`own` is this
    /// connection's outbound queue). Checked before every read.
    #[inline]
    fn reads_blocked(&self, _own: &Outbound) -> bool {
        false
    }

    /// Resolves once reads may go on (only awaited while `reads_blocked`).
    fn unblocked(&mut self, _own: &Outbound) -> impl Future<Output = Result<(), Stop>> {
        std::future::ready(Ok(()))
    }

    /// The behaviour has work of its own beside the client's socket
    /// ([`beside`](Self::beside)), which the loop polls.
    const HAS_BESIDE: bool = false;

    /// Work the behaviour does beside the client's socket in the
    /// connection's own task (a proxy's upstream socket), so that readiness
    /// of either wakes the one task: the loop polls it with the client's
    /// socket and queue whenever it waits for them (while reads are blocked,
    /// `unblocked` carries it instead). Resolves when the loop must act:
    /// `Ok` goes on (the loop polls a fresh one), `Err` ends the
    /// connection. It is dropped whenever the client's side is ready first,
    /// so it keeps its state in the behaviour, never across an await.
    fn beside(&mut self) -> impl Future<Output = Result<(), Stop>> {
        std::future::pending()
    }

    /// A piece of a data frame, unmasked in `buf`. Replies in place go to
    /// `out`, written once per read.
    fn on_data(&mut self, buf: &mut [u8], piece: &DataPiece, out: &mut Output);

    /// A ping or pong from the client, unmasked in `buf[payload]`: true when
    /// the behaviour took it (a proxy carries it on), false to leave it to
    /// the loop (which answers a ping with a pong in place).
    #[inline]
    fn on_control(&mut self, _buf: &mut [u8], _opcode: OpCode, _payload: Range<usize>) -> bool {
        false
    }

    /// The client sent a close with `code` (1005 when it gave none) and
    /// `reason` (valid UTF-8, checked by the decoder).
    fn on_peer_close(&mut self, _code: u16, _reason: &str) {}

    /// Every piece of one read was handed over.
    #[inline]
    fn end_of_read(&mut self) -> Result<(), Stop> {
        Ok(())
    }

    /// [`end_of_read`](Self::end_of_read) for a behaviour that sends the
    /// pieces on from where they are: `buf` still holds them (a proxy
    /// writes them to its upstream with no copy).
    #[inline]
    fn end_of_read_in(&mut self, _buf: &[u8]) -> Result<(), Stop> {
        self.end_of_read()
    }

    /// A reply frame is half written: no close frame can follow it.
    #[inline]
    fn mid_frame(&self) -> bool {
        false
    }

    /// On shutdown, what the client already sent is read and answered before
    /// the 1001 (false when the answer could not come before it).
    fn answers_before_drain(&self) -> bool {
        true
    }

    /// The connection ended (after `on_peer_close` if the client sent a
    /// close).
    fn on_close(&mut self, _id: u64) {}

    /// The upgrade never completed: undo what was set up before the 101.
    fn abandon(self, _id: u64)
    where
        Self: Sized,
    {
    }
}

/// A boxed future run on the worker's local task set.
pub type LocalFuture<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;
