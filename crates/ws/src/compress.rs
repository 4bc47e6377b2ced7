//! The deflate streams of a permessage-deflate connection (RFC 7692 §7.2),
//! over flate2 with the zlib-rs backend: an [`Inflater`] that inflates a
//! message as its bytes arrive and stops the moment it would pass the
//! route's `max_message`, and a [`Deflater`] that compresses whole
//! messages for the encoder.
//!
//! Without context takeover a message is compressed on its own, and
//! libdeflate does that better than a zlib stream: zlib-rs clears its
//! 128 KiB hash table at every reset, and at equal ratio libdeflate spent
//! about half zlib-rs's CPU on 1 KiB JSON-like messages and a quarter on
//! 16 KiB (benches/RESULTS.md, permessage-deflate). Its output ends in a
//! final block (BFINAL = 1) where a zlib sync flush ends in an empty stored
//! block; RFC 7692 §7.2.3.4 allows it, and a receiver without context
//! takeover starts each message afresh anyway.
//!
//! A connection's producers (relay partner, guests, publishers) compress
//! through its [`SendDeflate`](crate::send_deflate::SendDeflate); echo's loop through a [`Deflater`] of its
//! own (never both on one connection).
//!
//! Memory (window 15, zlib's memLevel 8): a compressor holds ~270 KiB, a
//! decompressor ~40 KiB (7 KiB state + the 32 KiB window). With context
//! takeover a connection keeps its decompressor, and its compressor from
//! the first compressed message it sends on. With `compression_context = "none"` both
//! are borrowed from the worker's pool for one message and returned reset:
//! an idle connection holds none.

use super::deflate::Negotiated;
use super::frame::ProtocolError;
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};
use libdeflater::{CompressionLvl, Compressor};
use std::cell::RefCell;

/// The tail every message's deflate data loses on the wire and regains
/// before inflating (RFC 7692 §7.2.1, §7.2.2).
const SYNC_TAIL: [u8; 4] = [0x00, 0x00, 0xFF, 0xFF];
/// Compressors and decompressors a worker keeps for `"none"` connections.
const POOL_KEEP: usize = 16;
/// First allocation for a message being inflated; it doubles up to
/// `max_message`.
const INFLATE_FIRST_BYTES: usize = 4096;

/// A pooled compressor's window bits and level.
type PoolKey = (u8, u32);

thread_local! {
    // Boxed: the state moves between the pool and connections without a copy.
    #[allow(clippy::vec_box)]
    static FREE_INFLATERS: RefCell<Vec<Box<Decompress>>> = const { RefCell::new(Vec::new()) };
    #[allow(clippy::vec_box)]
    static FREE_DEFLATERS: RefCell<Vec<(PoolKey, Box<Compress>)>> = const { RefCell::new(Vec::new()) };
    /// libdeflate's compressors for whole messages, one per level in use.
    static WHOLE: RefCell<Vec<(u32, Compressor)>> = const { RefCell::new(Vec::new()) };
}

fn take_decompress() -> Box<Decompress> {
    FREE_INFLATERS
        .with_borrow_mut(Vec::pop)
        .unwrap_or_else(|| Box::new(Decompress::new_with_window_bits(false, 15)))
}

fn give_decompress(mut d: Box<Decompress>) {
    d.reset(false);
    FREE_INFLATERS.with_borrow_mut(|free| {
        if free.len() < POOL_KEEP {
            free.push(d);
        }
    });
}

fn new_compress(bits: u8, level: u32) -> Box<Compress> {
    Box::new(Compress::new_with_window_bits(
        Compression::new(level),
        false,
        bits,
    ))
}

/// The connection's inbound stream. The server always inflates with a
/// 15-bit window, which decodes any window the client used.
pub struct Inflater {
    /// Kept between messages with context takeover; with none, held only
    /// while a message is open.
    state: Option<Box<Decompress>>,
    stateless: bool,
}

impl Inflater {
    pub fn new(n: &Negotiated) -> Inflater {
        Inflater {
            state: None,
            stateless: n.inbound_stateless(),
        }
    }

    /// Whether zlib state is held right now (tests: an idle `"none"`
    /// connection holds none).
    pub fn holds_state(&self) -> bool {
        self.state.is_some()
    }

    /// Inflates `input` (a piece of a compressed message) onto `out`.
    /// `out` never grows past `max + 1` bytes: when the message would pass
    /// `max`, this fails with `MessageTooBig` before inflating further.
    pub fn feed(
        &mut self,
        input: &[u8],
        out: &mut Vec<u8>,
        max: usize,
    ) -> Result<(), ProtocolError> {
        let d = self.state.get_or_insert_with(take_decompress);
        let ended = inflate(d, input, out, max)?;
        if ended {
            // A final block (BFINAL) ended the stream: nothing may follow
            // in this context, so start afresh.
            d.reset(false);
        }
        Ok(())
    }

    /// The message's last piece was fed: inflate the sync tail, and with
    /// no context takeover return the state to the pool.
    pub fn finish(&mut self, out: &mut Vec<u8>, max: usize) -> Result<(), ProtocolError> {
        let result = self.feed(&SYNC_TAIL, out, max);
        if self.stateless || result.is_err() {
            if let Some(d) = self.state.take() {
                give_decompress(d);
            }
        }
        result
    }
}

impl Drop for Inflater {
    fn drop(&mut self) {
        if let Some(d) = self.state.take() {
            give_decompress(d);
        }
    }
}

/// Inflates all of `input` onto `out`, whose capacity never passes
/// `max + 1` bytes: that is all zlib may write. Returns whether the
/// deflate stream ended (a final block).
fn inflate(
    d: &mut Decompress,
    mut input: &[u8],
    out: &mut Vec<u8>,
    max: usize,
) -> Result<bool, ProtocolError> {
    let cap = max.saturating_add(1);
    if out.capacity() > cap {
        out.shrink_to(cap);
    }
    loop {
        if out.len() >= cap {
            return Err(ProtocolError::MessageTooBig);
        }
        if out.len() == out.capacity() {
            let grow = out.len().max(INFLATE_FIRST_BYTES).min(cap - out.len());
            out.reserve_exact(grow);
        }
        let (before_in, before_out) = (d.total_in(), out.len());
        let status = d
            .decompress_vec(input, out, FlushDecompress::None)
            .map_err(|_| ProtocolError::InvalidCompressedData)?;
        input = &input[(d.total_in() - before_in) as usize..];
        if out.len() > max {
            return Err(ProtocolError::MessageTooBig);
        }
        let room_left = out.len() < out.capacity();
        match status {
            Status::StreamEnd => return Ok(true),
            _ if input.is_empty() && room_left => return Ok(false),
            // Input left, room left, and zlib moved nothing: it cannot go on.
            _ if room_left && out.len() == before_out && d.total_in() == before_in => {
                return Err(ProtocolError::InvalidCompressedData)
            }
            _ => {}
        }
    }
}

/// What decides the bytes of a compressed message when the server keeps no
/// context (`server_no_context_takeover`): connections that negotiated
/// the same form can share one compressed copy of a publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedForm {
    /// The window the server compresses with.
    pub window_bits: u8,
    /// Messages shorter than this stay plain.
    pub min_bytes: usize,
    /// zlib's level.
    pub level: u32,
}

/// The connection's outbound stream: compresses whole messages of at least
/// `min_bytes` for the encoder.
pub struct Deflater {
    /// With context takeover, made at the first compressed message and
    /// kept; with none, borrowed from the worker's pool per message.
    state: Option<Box<Compress>>,
    stateless: bool,
    window_bits: u8,
    min_bytes: usize,
    level: u32,
}

impl Deflater {
    pub fn new(n: &Negotiated) -> Deflater {
        Deflater {
            state: None,
            stateless: n.outbound_stateless(),
            window_bits: n.deflate_window_bits(),
            min_bytes: n.min_bytes,
            level: n.level,
        }
    }

    /// A deflater without context takeover for `form`: it holds no state
    /// and borrows the worker's pooled compressor per message.
    pub fn stateless(form: SharedForm) -> Deflater {
        Deflater {
            state: None,
            stateless: true,
            window_bits: form.window_bits,
            min_bytes: form.min_bytes,
            level: form.level,
        }
    }

    /// Whether zlib state is held right now (with context takeover: made
    /// at the first compressed message).
    pub fn holds_state(&self) -> bool {
        self.state.is_some()
    }

    /// Whether a message of `len` bytes goes out compressed.
    #[inline]
    pub fn wants(&self, len: usize) -> bool {
        len >= self.min_bytes
    }

    /// Appends `payload` compressed, without the sync tail (§7.2.1).
    pub fn compress(&mut self, payload: &[u8], out: &mut Vec<u8>) {
        let key = (self.window_bits, self.level);
        // libdeflate's window is 32 KiB: a message no longer than the
        // negotiated window cannot reach back past it.
        if self.stateless && payload.len() <= 1 << self.window_bits {
            deflate_whole(self.level, payload, out);
        } else if self.stateless {
            let mut c = FREE_DEFLATERS
                .with_borrow_mut(|free| {
                    let at = free.iter().position(|(k, _)| *k == key)?;
                    Some(free.swap_remove(at).1)
                })
                .unwrap_or_else(|| new_compress(key.0, key.1));
            deflate(&mut c, payload, out);
            c.reset();
            FREE_DEFLATERS.with_borrow_mut(|free| {
                if free.len() < POOL_KEEP {
                    free.push((key, c));
                }
            });
        } else {
            let c = self.state.get_or_insert_with(|| new_compress(key.0, key.1));
            deflate(c, payload, out);
        }
    }
}

/// Compresses `payload` on its own with libdeflate onto `out`: deflate
/// blocks ending in a final one, which the receiver's appended sync tail
/// follows harmlessly (§7.2.3.4).
fn deflate_whole(level: u32, payload: &[u8], out: &mut Vec<u8>) {
    WHOLE.with_borrow_mut(|whole| {
        let at = match whole.iter().position(|(l, _)| *l == level) {
            Some(at) => at,
            None => {
                let lvl = CompressionLvl::new(level as i32).unwrap_or_default();
                whole.push((level, Compressor::new(lvl)));
                whole.len() - 1
            }
        };
        let c = &mut whole[at].1;
        let start = out.len();
        out.resize(start + c.deflate_compress_bound(payload.len()), 0);
        let n = c
            .deflate_compress(payload, &mut out[start..])
            .expect("the bound fits any input");
        out.truncate(start + n);
    });
}

/// Compresses `payload` with a sync flush onto `out` and drops the
/// 4-byte sync tail.
fn deflate(c: &mut Compress, payload: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    out.reserve(payload.len() + payload.len() / 1000 + 64);
    let mut input = payload;
    loop {
        let before = c.total_in();
        c.compress_vec(input, out, FlushCompress::Sync)
            .expect("deflate accepts any input");
        input = &input[(c.total_in() - before) as usize..];
        // A sync flush is complete when all input is taken and the output
        // had room to spare.
        if input.is_empty() && out.len() < out.capacity() {
            break;
        }
        out.reserve(out.capacity().max(64));
    }
    debug_assert!(out[start..].ends_with(&SYNC_TAIL));
    out.truncate(out.len() - SYNC_TAIL.len());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deflate::{negotiate, Compression as Route, Context};
    use http::{header, HeaderMap, HeaderValue};

    fn negotiated(offer: &'static str, context: Context) -> Negotiated {
        let mut h = HeaderMap::new();
        h.insert(
            header::SEC_WEBSOCKET_EXTENSIONS,
            HeaderValue::from_static(offer),
        );
        let route = Route {
            enabled: true,
            min_bytes: 0,
            context,
            level: 1,
        };
        negotiate(&h, &route).unwrap()
    }

    fn json(n: usize) -> Vec<u8> {
        let mut s = String::new();
        let mut i = 0;
        while s.len() < n {
            s.push_str(&format!(
                "{{\"id\":{i},\"price\":{},\"side\":\"buy\"}},",
                i * 7 % 1000
            ));
            i += 1;
        }
        s.truncate(n);
        s.into_bytes()
    }

    /// RFC 7692 §7.2: what the Deflater writes (sync tail dropped), the
    /// Inflater restores, with and without context takeover, message after
    /// message.
    #[test]
    fn round_trip_both_contexts() {
        for (offer, context) in [
            ("permessage-deflate", Context::Takeover),
            ("permessage-deflate", Context::None),
            (
                "permessage-deflate; server_max_window_bits=9",
                Context::Takeover,
            ),
            // Whole messages up to the 512-byte window go to libdeflate,
            // longer ones to a zlib stream with the negotiated window.
            (
                "permessage-deflate; server_max_window_bits=9",
                Context::None,
            ),
        ] {
            let n = negotiated(offer, context);
            let (mut d, mut i) = (Deflater::new(&n), Inflater::new(&n));
            let mut sizes = Vec::new();
            for len in [0, 1, 300, 1024, 16384, 200_000] {
                let msg = json(len);
                let mut wire = Vec::new();
                d.compress(&msg, &mut wire);
                sizes.push(wire.len());
                let mut back = Vec::new();
                i.feed(&wire, &mut back, 1 << 20).unwrap();
                i.finish(&mut back, 1 << 20).unwrap();
                assert_eq!(back, msg, "{offer} {context:?} {len}");
                assert_eq!(i.holds_state(), context == Context::Takeover);
            }
            assert!(sizes[4] * 4 < 16384, "JSON compresses: {sizes:?}");
        }
    }

    /// The same message twice: with context takeover the second refers back
    /// to the first and is much shorter; without, both are the same size.
    #[test]
    fn context_takeover_shortens_repeats() {
        let msg = json(2000);
        for (context, shorter) in [(Context::Takeover, true), (Context::None, false)] {
            let mut d = Deflater::new(&negotiated("permessage-deflate", context));
            let (mut a, mut b) = (Vec::new(), Vec::new());
            d.compress(&msg, &mut a);
            d.compress(&msg, &mut b);
            assert_eq!(
                b.len() * 4 < a.len(),
                shorter,
                "{context:?}: {} then {}",
                a.len(),
                b.len()
            );
        }
    }

    /// The decompression bomb: 1 MiB of deflate that would inflate to
    /// ~1 GiB stops at max_message + 1 bytes, never more.
    #[test]
    fn inflating_stops_at_the_bound() {
        let n = negotiated("permessage-deflate", Context::Takeover);
        let mut zeros = Compress::new_with_window_bits(Compression::new(9), false, 15);
        let chunk = vec![0u8; 1 << 20];
        let mut bomb = Vec::with_capacity(2 << 20);
        for _ in 0..1024 {
            zeros
                .compress_vec(&chunk, &mut bomb, FlushCompress::None)
                .unwrap();
            bomb.reserve(64 << 10);
        }
        zeros
            .compress_vec(&[], &mut bomb, FlushCompress::Sync)
            .unwrap();
        assert!(bomb.len() < 2 << 20, "{} bytes of bomb", bomb.len());
        let mut i = Inflater::new(&n);
        let mut out = Vec::new();
        let max = 1 << 20;
        assert_eq!(
            i.feed(&bomb, &mut out, max),
            Err(ProtocolError::MessageTooBig)
        );
        assert!(out.capacity() <= max + 1, "capacity {}", out.capacity());
    }

    #[test]
    fn garbage_is_invalid_compressed_data() {
        let n = negotiated("permessage-deflate", Context::Takeover);
        let mut out = Vec::new();
        assert_eq!(
            Inflater::new(&n).feed(&[0xFF; 64], &mut out, 1 << 20),
            Err(ProtocolError::InvalidCompressedData)
        );
    }
}
