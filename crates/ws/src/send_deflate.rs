//! permessage-deflate on the sending side for producers outside a
//! connection's loop (relay partner, guest runners, publishes): one
//! connection's compressor behind a lock, and the re-framing of whole plain
//! frames into compressed ones. Apart from `compress` (zlib streams) because
//! it frames through `encode`, which itself compresses through `compress`.

use crate::compress::{Deflater, SharedForm};
use crate::deflate::Negotiated;
use crate::encode::append_compressed;
use std::cell::RefCell;
use std::sync::Mutex;

/// permessage-deflate for the messages other threads send a connection
/// (its relay partner, guest runners, publishes), which do not pass
/// through its loop. Built at the upgrade, so the first message a
/// producer sends is compressed already.
pub struct SendDeflate {
    form: SharedForm,
    /// With context takeover: the connection's one compressor. It is
    /// locked from compressing a message until that message's bytes are
    /// written or queued, so messages reach the wire in the order they
    /// were compressed in, whichever thread sends them (the client's
    /// inflater follows that order). None without context takeover.
    takeover: Option<Mutex<Deflater>>,
}

thread_local! {
    /// The encoded bytes of one hand-over and the deflate scratch, kept
    /// per thread between messages (dropped past [`KEEP_ENCODED_BYTES`]).
    static ENCODED: RefCell<(Vec<u8>, Vec<u8>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// Largest encode buffer a thread keeps between hand-overs.
const KEEP_ENCODED_BYTES: usize = 256 << 10;

impl SendDeflate {
    pub fn new(n: &Negotiated) -> SendDeflate {
        let form = SharedForm {
            window_bits: n.deflate_window_bits(),
            min_bytes: n.min_bytes,
            level: n.level,
        };
        SendDeflate {
            form,
            takeover: (!n.outbound_stateless()).then(|| Mutex::new(Deflater::new(n))),
        }
    }

    /// The form this connection can share compressed publishes in; None
    /// with context takeover (it compresses with its own context).
    pub fn shared_form(&self) -> Option<SharedForm> {
        self.takeover.is_none().then_some(self.form)
    }

    /// Whether zlib state is held right now (tests: none before the
    /// first compressed message, none ever without context takeover).
    pub fn holds_state(&self) -> bool {
        self.takeover
            .as_ref()
            .is_some_and(|d| d.lock().expect("deflater lock").holds_state())
    }

    /// Re-frames `parts` (whole plain server frames, in order) for this
    /// connection (`encode::append_compressed`) and hands the bytes to
    /// `send`; with context takeover, under the compressor's lock.
    pub fn encode<R>(&self, parts: &[&[u8]], send: impl FnOnce(&[u8]) -> R) -> R {
        let (mut out, mut scratch) = ENCODED.with_borrow_mut(std::mem::take);
        out.clear();
        let result = match &self.takeover {
            Some(deflater) => {
                let mut deflater = deflater.lock().expect("deflater lock");
                for part in parts {
                    append_compressed(&mut out, part, &mut deflater, &mut scratch);
                }
                send(&out)
            }
            None => {
                let mut deflater = Deflater::stateless(self.form);
                for part in parts {
                    append_compressed(&mut out, part, &mut deflater, &mut scratch);
                }
                send(&out)
            }
        };
        if out.capacity() <= KEEP_ENCODED_BYTES && scratch.capacity() <= KEEP_ENCODED_BYTES {
            ENCODED.with_borrow_mut(|kept| *kept = (out, scratch));
        }
        result
    }
}
