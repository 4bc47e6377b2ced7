//! Native relay: connections on a route pair up in arrival order; each frame
//! goes to the partner only. When one side ends, the other is closed with 1001.
//! An unpaired connection is not read from until it has a partner, so nothing
//! it sends is lost or reordered.

use crate::reactor::decode::DataPiece;
use crate::reactor::outbound::Outbound;
use crate::ws::frame::encode_server_header;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// The route's pairing point, shared by all workers. Its lock is taken once
/// per connection, at pairing time, never per message.
#[derive(Default)]
pub struct RelayHub {
    waiting: Mutex<Option<Waiter>>,
}

struct Waiter {
    conn: u64,
    outbound: Arc<Outbound>,
    notify: oneshot::Sender<Arc<Outbound>>,
}

/// Result of joining the hub.
pub enum Join {
    Paired(Arc<Outbound>),
    Waiting(oneshot::Receiver<Arc<Outbound>>),
}

impl RelayHub {
    /// Pairs `conn` with the waiting connection, or makes it the one waiting.
    pub fn join(&self, conn: u64, me: Arc<Outbound>) -> Join {
        let mut waiting = self.waiting.lock().expect("relay hub lock");
        while let Some(w) = waiting.take() {
            if w.notify.send(me.clone()).is_ok() {
                return Join::Paired(w.outbound);
            }
            // That connection left while waiting; try the next state.
        }
        let (notify, rx) = oneshot::channel();
        *waiting = Some(Waiter {
            conn,
            outbound: me,
            notify,
        });
        Join::Waiting(rx)
    }

    /// Removes `conn` from the waiting slot if it is there.
    pub fn leave(&self, conn: u64) {
        let mut waiting = self.waiting.lock().expect("relay hub lock");
        if waiting.as_ref().is_some_and(|w| w.conn == conn) {
            *waiting = None;
        }
    }
}

/// Relay state of one connection.
pub struct Relay {
    pub partner: Option<Arc<Outbound>>,
    /// Server frames built from this read batch; only whole frames are sent,
    /// since the partner's own control replies must never land inside one.
    pending: Vec<u8>,
    /// Bytes of `pending` that form complete frames.
    complete: usize,
}

impl Relay {
    pub fn new() -> Relay {
        Relay {
            partner: None,
            pending: Vec::new(),
            complete: 0,
        }
    }

    /// Copies a piece of a client frame into the partner-bound server frame.
    #[inline]
    pub fn take_piece(&mut self, buf: &[u8], piece: &DataPiece) {
        if piece.frame_start {
            // One allocation for the whole frame, not a growth series.
            self.pending.reserve(10 + piece.frame_len as usize);
            let mut header = [0u8; 10];
            let n = encode_server_header(&mut header, piece.fin, piece.opcode, piece.frame_len);
            self.pending.extend_from_slice(&header[..n]);
        }
        self.pending.extend_from_slice(&buf[piece.payload.clone()]);
        if piece.frame_end {
            self.complete = self.pending.len();
        }
    }

    /// Hands the complete frames to the partner. False if the partner is gone.
    pub fn flush(&mut self) -> bool {
        if self.complete == 0 {
            return true;
        }
        let Some(partner) = &self.partner else {
            return false;
        };
        let ok = partner.send_direct(&self.pending[..self.complete]);
        // Keep the allocation for the next batch; a frame still arriving
        // moves to the front.
        self.pending.drain(..self.complete);
        self.complete = 0;
        ok
    }

    /// The partner holds more than its budget: stop reading until it drains.
    pub fn partner_over_budget(&self) -> bool {
        self.partner.as_ref().is_some_and(|p| p.over_budget())
    }
}

impl Default for Relay {
    fn default() -> Self {
        Relay::new()
    }
}
