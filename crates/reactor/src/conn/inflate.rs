//! permessage-deflate's inbound side of the connection loop (RFC 7692):
//! a compressed message inflated piece by piece, bounded by `max_message`,
//! and handed to the behaviour whole. Out of line, so the loop over
//! uncompressed pieces stays tight.

use crate::behaviour::Behaviour;
use crate::buffer::Output;
use crate::decode::DataPiece;
use weir_ws::compress::Inflater;
use weir_ws::frame::{OpCode, ProtocolError};

/// A compressed message being inflated.
pub(super) struct Inflating {
    pub(super) inflater: Inflater,
    /// The message so far, inflated; at most `max_message + 1` bytes.
    pub(super) message: Vec<u8>,
}

/// Inflates a piece of a compressed message (RFC 7692 §7.2.2); at the
/// message's end, checks its UTF-8 and hands the whole inflated message
/// to the behaviour as one piece (or to none: a message dropped over its
/// rate is still inflated, so the stream's context stays whole). Fails with `MessageTooBig` the moment
/// the message would pass `max_message`, before inflating more. Kept out
/// of line: the loop over uncompressed pieces stays tight.
#[inline(never)]
pub(super) fn inflate_piece<B: Behaviour>(
    inflating: &mut Inflating,
    input: &[u8],
    piece: &DataPiece,
    max_message: usize,
    behaviour: Option<&mut B>,
    out: &mut Output,
) -> Result<(), ProtocolError> {
    let Inflating { inflater, message } = inflating;
    inflater.feed(input, message, max_message)?;
    if !piece.message_end() {
        return Ok(());
    }
    inflater.finish(message, max_message)?;
    if piece.message == OpCode::Text && simdutf8::basic::from_utf8(message).is_err() {
        return Err(ProtocolError::InvalidUtf8);
    }
    let len = message.len();
    let whole = DataPiece {
        opcode: piece.message,
        message: piece.message,
        fin: true,
        frame_len: len as u64,
        frame_start: true,
        frame_end: true,
        payload: 0..len,
        compressed: true,
    };
    if let Some(behaviour) = behaviour {
        behaviour.on_data(message, &whole, out);
    }
    // Freed, not kept: an idle connection holds no message buffer.
    *message = Vec::new();
    Ok(())
}
