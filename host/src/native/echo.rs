//! Native echo: every frame goes back to its sender with the same opcode and
//! FIN bit, byte for byte. The reply header is written over the tail of the
//! client's header (or the buffer headroom), so the reply is the received
//! bytes themselves; a frame too large for the buffer streams back as it
//! arrives, with the full length announced up front.

use crate::reactor::buffer::Output;
use crate::reactor::decode::DataPiece;
use crate::ws::frame::{encode_server_header, server_header_len};

/// Echo state between reads.
#[derive(Debug, Default)]
pub struct Echo {
    /// A streamed reply frame is half written: a protocol error now cannot be
    /// answered with a close frame, only by dropping the connection.
    pub mid_frame: bool,
}

impl Echo {
    /// Adds the reply for `piece` to `out`, in place in `buf`.
    #[inline]
    pub fn reply(&mut self, buf: &mut [u8], piece: &DataPiece, out: &mut Output) {
        let start = if piece.frame_start {
            let len = server_header_len(piece.frame_len);
            let at = piece.payload.start - len;
            encode_server_header(&mut buf[at..], piece.fin, piece.opcode, piece.frame_len);
            at
        } else {
            piece.payload.start
        };
        self.mid_frame = !piece.frame_end;
        out.push(buf, start..piece.payload.end);
    }
}
