//! Native echo: every frame goes back to its sender with the same opcode and
//! FIN bit, byte for byte. The reply header is written over the tail of the
//! client's header (or the buffer headroom), so the reply is the received
//! bytes themselves; a frame too large for the buffer streams back as it
//! arrives, with the full length announced up front.
//!
//! On a connection that negotiated permessage-deflate, a compressed message
//! (inflated by the loop) and a whole uncompressed one-frame message go back
//! through the encoder (`Output::push_message`: compressed from the route's
//! `compression_min` on); a fragmented or streamed uncompressed message
//! goes back in place as above.

use weir_reactor::behaviour::Behaviour;
use weir_reactor::buffer::Output;
use weir_reactor::decode::DataPiece;
use weir_ws::encode;

/// Echo state between reads.
#[derive(Debug, Default)]
pub struct Echo {
    /// A streamed reply frame is half written: a protocol error now cannot be
    /// answered with a close frame, only by dropping the connection.
    mid_frame: bool,
}

impl Behaviour for Echo {
    const SENDS_EACH_MESSAGE_ON: bool = true;
    const COMPRESSES_REPLIES: bool = true;

    /// Adds the reply for `piece` to `out`, in place in `buf`.
    #[inline]
    fn on_data(&mut self, buf: &mut [u8], piece: &DataPiece, out: &mut Output) {
        if piece.compressed || (out.compresses() && whole_message(piece)) {
            out.push_message(piece.message, &buf[piece.payload.clone()]);
            return;
        }
        let start = if piece.frame_start {
            encode::header_before(
                buf,
                piece.payload.start,
                piece.fin,
                piece.opcode,
                piece.frame_len,
            )
        } else {
            piece.payload.start
        };
        self.mid_frame = !piece.frame_end;
        out.push(buf, start..piece.payload.end);
    }

    fn mid_frame(&self) -> bool {
        self.mid_frame
    }
}

/// A message that arrived as one frame, all in this piece.
#[inline]
fn whole_message(piece: &DataPiece) -> bool {
    piece.frame_start && piece.frame_end && piece.fin && piece.opcode == piece.message
}

#[cfg(test)]
mod tests {
    use super::Echo;
    use weir_reactor::conn::run;
    use weir_reactor::transport::Tcp;

    /// The size of the future `run` returns, without running it.
    fn future_size<A, B, C, D, F: std::future::Future>(_: impl FnOnce(A, B, C, D) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// Every open connection holds this future while it waits: its size is
    /// per-connection memory (docs/architecture.md, "What a connection
    /// costs"). A regression guard: a timer, a write future or a buffer
    /// moved back into the common path shows here first.
    #[test]
    fn an_echo_connections_future_stays_small() {
        let size = future_size(run::<Echo, Tcp>);
        assert!(size <= 960, "run::<Echo, Tcp> is {size} bytes (was 880)");
    }

    /// On the plane the connection is a boxed slot instead of a task and
    /// its future: the same guard for it.
    #[test]
    fn an_echo_connections_plane_slot_stays_small() {
        let size = weir_reactor::plane::slot_bytes::<Echo>();
        eprintln!("plane slot for Echo: {size} bytes");
        assert!(size <= 400, "the plane's Entry<Echo> is {size} bytes");
    }
}
