//! Native relay: connections on a route pair up in arrival order; each frame
//! goes to the partner only. When one side ends, the other is closed with 1001.
//! An unpaired connection is not read from until it has a partner, so nothing
//! it sends is lost or reordered. A partner that negotiated
//! permessage-deflate gets each one-frame message compressed
//! (`Outbound::send_frames`).

use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;
use weir_reactor::behaviour::{Behaviour, Stop};
use weir_reactor::buffer::Output;
use weir_reactor::decode::DataPiece;
use weir_reactor::outbound::Outbound;
use weir_ws::{close, encode};

const PARTNER_LEFT: &str = "relay partner left";

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

impl RelayHub {
    /// Joins the hub before the 101, so connections pair in the order their
    /// upgrades were answered, whichever worker runs them: paired with the
    /// waiting connection, or made the one waiting.
    pub fn join(self: &Arc<Self>, conn: u64, me: Arc<Outbound>) -> Relay {
        let mut waiting = self.waiting.lock().expect("relay hub lock");
        let mut relay = Relay {
            hub: self.clone(),
            partner: None,
            paired: None,
            pending: Vec::new(),
            complete: 0,
        };
        while let Some(w) = waiting.take() {
            if w.notify.send(me.clone()).is_ok() {
                relay.partner = Some(w.outbound);
                return relay;
            }
            // That connection left while waiting; try the next state.
        }
        let (notify, rx) = oneshot::channel();
        *waiting = Some(Waiter {
            conn,
            outbound: me,
            notify,
        });
        relay.paired = Some(rx);
        relay
    }

    /// Removes `conn` from the waiting slot if it is there.
    fn leave(&self, conn: u64) {
        let mut waiting = self.waiting.lock().expect("relay hub lock");
        if waiting.as_ref().is_some_and(|w| w.conn == conn) {
            *waiting = None;
        }
    }
}

/// Relay state of one connection.
pub struct Relay {
    hub: Arc<RelayHub>,
    partner: Option<Arc<Outbound>>,
    /// Where the partner arrives while this connection waits for one.
    paired: Option<oneshot::Receiver<Arc<Outbound>>>,
    /// Server frames built from this read batch; only whole frames are sent,
    /// since the partner's own control replies must never land inside one.
    pending: Vec<u8>,
    /// Bytes of `pending` that form complete frames.
    complete: usize,
}

impl Relay {
    fn end(&mut self, conn: u64) {
        self.hub.leave(conn);
        if let Some(partner) = self.partner.take() {
            partner.close(close::GOING_AWAY, PARTNER_LEFT);
        }
    }
}

impl Behaviour for Relay {
    const DIRECT_WRITES: bool = true;
    const SENDS_EACH_MESSAGE_ON: bool = true;

    /// Not read until paired, nor while the partner holds more than its
    /// budget.
    #[inline]
    fn reads_blocked(&self, _own: &Outbound) -> bool {
        self.partner.as_ref().is_none_or(|p| p.over_budget())
    }

    async fn unblocked(&mut self, _own: &Outbound) -> Result<(), Stop> {
        match (&self.partner, &mut self.paired) {
            (Some(partner), _) => {
                partner.wait_drained().await;
                Ok(())
            }
            (None, Some(paired)) => {
                let partner = paired.await.map_err(|_| Stop::Gone)?;
                self.paired = None;
                self.partner = Some(partner);
                Ok(())
            }
            (None, None) => Err(Stop::Close(close::GOING_AWAY, PARTNER_LEFT)),
        }
    }

    /// Copies a piece of a client frame into the partner-bound server frame.
    #[inline]
    fn on_data(&mut self, buf: &mut [u8], piece: &DataPiece, _out: &mut Output) {
        if piece.frame_start {
            // One allocation for the whole frame, not a growth series.
            self.pending
                .reserve(encode::MAX_SERVER_HEADER_BYTES + piece.frame_len as usize);
            encode::append_header(&mut self.pending, piece.fin, piece.opcode, piece.frame_len);
        }
        self.pending.extend_from_slice(&buf[piece.payload.clone()]);
        if piece.frame_end {
            self.complete = self.pending.len();
        }
    }

    /// Hands the complete frames to the partner.
    #[inline]
    fn end_of_read(&mut self) -> Result<(), Stop> {
        if self.complete == 0 {
            return Ok(());
        }
        let Some(partner) = &self.partner else {
            return Err(Stop::Close(close::GOING_AWAY, PARTNER_LEFT));
        };
        // Compressed for the partner when it negotiated permessage-deflate.
        let ok = partner.send_frames(&self.pending[..self.complete]);
        // Keep the allocation for the next batch; a frame still arriving
        // moves to the front.
        self.pending.drain(..self.complete);
        self.complete = 0;
        if ok {
            Ok(())
        } else {
            Err(Stop::Close(close::GOING_AWAY, PARTNER_LEFT))
        }
    }

    /// An unpaired connection read nothing, so it has nothing to answer.
    fn answers_before_drain(&self) -> bool {
        self.partner.is_some()
    }

    fn on_close(&mut self, conn: u64) {
        self.end(conn);
    }

    fn abandon(mut self, conn: u64) {
        self.end(conn);
    }
}
