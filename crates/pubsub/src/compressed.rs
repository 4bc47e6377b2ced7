//! Publishes for subscribers that negotiated permessage-deflate. A
//! subscriber without context takeover gets the compressed form of a
//! publish its parameters call for ([`SharedForm`]: window bits and
//! `compression_min`), made once per publish by the first worker that
//! needs it and shared by every such subscriber, as the plain frames are
//! shared by the others. A subscriber with context takeover compresses
//! with its own compressor (`Outbound::send_frames`).

use super::fanout::Delivery;
use bytes::Bytes;
use std::sync::Mutex;
use weir_ws::compress::{Deflater, SharedForm};
use weir_ws::encode;

/// A publish's compressed forms, shared by the deliveries of one publish
/// to every worker.
#[derive(Default)]
pub struct Compressed {
    made: Mutex<Vec<(SharedForm, Bytes)>>,
}

impl Compressed {
    /// `frames` in `form`: made under the lock by the first worker that
    /// asks, so the publish is compressed once per form.
    fn form(&self, form: SharedForm, frames: &Bytes) -> Bytes {
        let mut made = self.made.lock().expect("compressed forms lock");
        if let Some((_, bytes)) = made.iter().find(|(f, _)| *f == form) {
            return bytes.clone();
        }
        let bytes = compress(form, frames);
        made.push((form, bytes.clone()));
        bytes
    }
}

/// `frames` (whole plain server frames) re-framed in `form`.
pub fn compress(form: SharedForm, frames: &[u8]) -> Bytes {
    let (mut out, mut scratch) = (Vec::new(), Vec::new());
    encode::append_compressed(
        &mut out,
        frames,
        &mut Deflater::stateless(form),
        &mut scratch,
    );
    Bytes::from(out)
}

/// The compressed forms of a run of deliveries, as one worker's fan-out
/// needs them: asked once per form, not once per subscriber.
pub(super) struct Forms<'a> {
    group: &'a [Delivery],
    /// Per form, one buffer per delivery of `group`.
    made: Vec<(SharedForm, Vec<Bytes>)>,
}

impl<'a> Forms<'a> {
    pub(super) fn new(group: &'a [Delivery]) -> Forms<'a> {
        Forms {
            group,
            made: Vec::new(),
        }
    }

    /// Delivery `index` of the run in `form`.
    pub(super) fn part(&mut self, form: SharedForm, index: usize) -> &Bytes {
        let at = match self.made.iter().position(|(f, _)| *f == form) {
            Some(at) => at,
            None => {
                let parts = self
                    .group
                    .iter()
                    .map(|d| match &d.compressed {
                        Some(shared) => shared.form(form, &d.frames),
                        // The publish saw no such subscriber (one joined
                        // since): made here, for this worker.
                        None => compress(form, &d.frames),
                    })
                    .collect();
                self.made.push((form, parts));
                self.made.len() - 1
            }
        };
        &self.made[at].1[index]
    }
}
