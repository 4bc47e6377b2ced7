//! Unmasking (RFC 6455 §5.3): XOR the payload with the 4-byte key.
//!
//! Payloads up to 64 bytes are unmasked inline, one 16-, 8-, 4-, 2- or
//! 1-byte step per set bit of the length: for them a call into a vector
//! build costs more than the work. Longer ones go to the best of three
//! builds the CPU has, chosen at run time:
//! - AVX-512 (F + BW): 64 bytes per instruction, with the bytes before the
//!   first 64-byte boundary and after the last whole block on the short path;
//! - AVX2: the word loop below compiled for 32-byte vectors;
//! - portable: a machine word at a time, which the compiler vectorises with
//!   SSE2 (35–41% of memcpy's bandwidth at 16 KiB; benches/micro unmask.rs).

/// Payloads shorter than this stay on the portable loop when only AVX2 is
/// there: the vector width buys nothing on a few words.
const WIDE_MIN_BYTES: usize = 128;

/// Payloads up to this size are unmasked inline, without a loop: for
/// them the feature check and the call into a vector build cost more than
/// the work (most frames of a chat or a game are this small).
const SHORT_MAX_BYTES: usize = 64;

/// XORs `buf` in place with `key`. `offset` is the position of `buf[0]` in the
/// frame's payload, so a payload that arrives in pieces unmasks piece by piece.
#[inline]
pub fn unmask(buf: &mut [u8], key: [u8; 4], offset: usize) {
    if buf.len() <= SHORT_MAX_BYTES {
        unmask_short(buf, rotated(key, offset));
    } else {
        unmask_long(buf, key, offset);
    }
}

/// Longer payloads: the best build this CPU has.
#[inline]
fn unmask_long(buf: &mut [u8], key: [u8; 4], offset: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512bw") {
            // SAFETY: the CPU supports AVX-512 BW (and so F), checked just above.
            return unsafe { unmask_avx512(buf, key, offset) };
        }
        if buf.len() >= WIDE_MIN_BYTES && std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2, checked just above.
            return unsafe { unmask_avx2(buf, key, offset) };
        }
    }
    unmask_words(buf, key, offset);
}

/// `unmask_words` compiled with AVX2 enabled.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn unmask_avx2(buf: &mut [u8], key: [u8; 4], offset: usize) {
    unmask_words(buf, key, offset);
}

/// Payloads from this size on are unmasked from a 64-byte boundary.
#[cfg(target_arch = "x86_64")]
const ALIGN_MIN_BYTES: usize = 256;

/// The bytes up to the first 64-byte boundary (a frame's payload rarely
/// starts on one, and loads that straddle cache lines run at about half
/// speed), then aligned 64-byte blocks four per turn, then the rest. The
/// start and the rest (under 64 bytes each) take the inline short path:
/// plain loads and stores, which a later load of the same bytes picks up
/// from the store buffer, where a masked store makes it wait.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn unmask_avx512(buf: &mut [u8], key: [u8; 4], offset: usize) {
    use std::arch::x86_64::*;
    let key = rotated(key, offset);
    // Short payloads skip the aligned start: the extra step costs more than
    // the straddling loads it saves.
    let head = if buf.len() >= ALIGN_MIN_BYTES {
        buf.as_ptr().align_offset(64).min(buf.len())
    } else {
        0
    };
    let (start, rest) = buf.split_at_mut(head);
    unmask_short(start, key);
    // Every block from here starts a multiple of 4 bytes after `head`, so
    // one key pattern serves them all, and the rest after them.
    let key = rotated(key, head);
    let (blocks, tail) = rest.split_at_mut(rest.len() & !63);
    let pattern = _mm512_set1_epi32(i32::from_ne_bytes(key));
    let len = blocks.len();
    let p = blocks.as_mut_ptr();
    let mut at = 0;
    // SAFETY (every access below): `len` is a multiple of 64 and each block
    // is `blocks[at..at + 64]` with `at + 64 <= len` (loadu/storeu: any
    // alignment).
    unsafe {
        while at + 256 <= len {
            let a = _mm512_loadu_si512(p.add(at).cast());
            let b = _mm512_loadu_si512(p.add(at + 64).cast());
            let c = _mm512_loadu_si512(p.add(at + 128).cast());
            let d = _mm512_loadu_si512(p.add(at + 192).cast());
            _mm512_storeu_si512(p.add(at).cast(), _mm512_xor_si512(a, pattern));
            _mm512_storeu_si512(p.add(at + 64).cast(), _mm512_xor_si512(b, pattern));
            _mm512_storeu_si512(p.add(at + 128).cast(), _mm512_xor_si512(c, pattern));
            _mm512_storeu_si512(p.add(at + 192).cast(), _mm512_xor_si512(d, pattern));
            at += 256;
        }
        while at < len {
            let v = _mm512_loadu_si512(p.add(at).cast());
            _mm512_storeu_si512(p.add(at).cast(), _mm512_xor_si512(v, pattern));
            at += 64;
        }
    }
    unmask_short(tail, key);
}

/// The key as seen from `at` bytes into the payload: `key` turned left by
/// `at % 4`. One rotate of a 32-bit word (`<[u8]>::rotate_left` is a
/// general-purpose routine and a call).
#[inline(always)]
fn rotated(key: [u8; 4], at: usize) -> [u8; 4] {
    // Little-endian: byte i is bits 8i..8i+8, so turning the bytes left
    // turns the word right.
    u32::from_le_bytes(key)
        .rotate_right(8 * (at % 4) as u32)
        .to_le_bytes()
}

/// One step per set bit of the length, from 64 bytes down to 1: a load, an
/// XOR and a store of that width, with no loop and no overlap between steps
/// (a payload of a given size always takes the same branches). Every step
/// before the last two is a multiple of 4 bytes, so the key needs no turn
/// until then. Correct for any length under 128 (the sum of all the steps).
#[inline(always)]
fn unmask_short(buf: &mut [u8], key: [u8; 4]) {
    let len = buf.len();
    debug_assert!(len < 128);
    let p = buf.as_mut_ptr();
    let k4 = u32::from_ne_bytes(key);
    let mut at = 0;
    // SAFETY (every access below): the widths taken are distinct set bits of
    // `len`, highest first, so each step's `at + width <= len`: all reads and
    // writes lie within `buf` (unaligned loads and stores: any alignment).
    unsafe {
        if len & 64 != 0 {
            xor16(p, k4);
            xor16(p.add(16), k4);
            xor16(p.add(32), k4);
            xor16(p.add(48), k4);
            at = 64;
        }
        if len & 32 != 0 {
            xor16(p.add(at), k4);
            xor16(p.add(at + 16), k4);
            at += 32;
        }
        if len & 16 != 0 {
            xor16(p.add(at), k4);
            at += 16;
        }
        if len & 8 != 0 {
            let w = p.add(at).cast::<u64>();
            w.write_unaligned(w.read_unaligned() ^ (u64::from(k4) | (u64::from(k4) << 32)));
            at += 8;
        }
        if len & 4 != 0 {
            let w = p.add(at).cast::<u32>();
            w.write_unaligned(w.read_unaligned() ^ k4);
            at += 4;
        }
        // From here `at` is a multiple of 4: the key starts again at key[0].
        if len & 2 != 0 {
            let w = p.add(at).cast::<u16>();
            w.write_unaligned(w.read_unaligned() ^ u16::from_ne_bytes([key[0], key[1]]));
            at += 2;
        }
        if len & 1 != 0 {
            *p.add(at) ^= key[at % 4];
        }
    }
}

/// XORs the 16 bytes at `p` with the key repeated four times: one SSE2
/// load, XOR and store (SSE2 is part of every x86-64 CPU).
///
/// # Safety
/// `p..p + 16` must be valid for reads and writes.
#[inline(always)]
unsafe fn xor16(p: *mut u8, k4: u32) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::*;
        // SAFETY: the caller guarantees the 16 bytes; loadu/storeu take any
        // alignment.
        unsafe {
            let v = _mm_loadu_si128(p.cast());
            _mm_storeu_si128(p.cast(), _mm_xor_si128(v, _mm_set1_epi32(k4 as i32)));
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let k8 = u64::from(k4) | (u64::from(k4) << 32);
        // SAFETY: the caller guarantees the 16 bytes; unaligned accesses.
        unsafe {
            let w = p.cast::<u64>();
            w.write_unaligned(w.read_unaligned() ^ k8);
            let w = p.add(8).cast::<u64>();
            w.write_unaligned(w.read_unaligned() ^ k8);
        }
    }
}

#[inline(always)]
fn unmask_words(buf: &mut [u8], key: [u8; 4], offset: usize) {
    let key = rotated(key, offset);
    // SAFETY: every bit pattern is a valid u64, and align_to_mut only hands
    // out the aligned middle as words.
    let (head, words, tail) = unsafe { buf.align_to_mut::<u64>() };
    for (i, b) in head.iter_mut().enumerate() {
        *b ^= key[i % 4];
    }
    let key = rotated(key, head.len());
    let word = u64::from_ne_bytes([
        key[0], key[1], key[2], key[3], key[0], key[1], key[2], key[3],
    ]);
    for w in words.iter_mut() {
        *w ^= word;
    }
    for (i, b) in tail.iter_mut().enumerate() {
        *b ^= key[i % 4];
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn naive(buf: &mut [u8], key: [u8; 4], offset: usize) {
        for (i, b) in buf.iter_mut().enumerate() {
            *b ^= key[(offset + i) % 4];
        }
    }

    /// Every length the short path takes, at every start alignment and key
    /// turn: each combination of its steps, not a sample.
    #[test]
    fn short_lengths_exhaustive() {
        let data: Vec<u8> = (0..136u8).map(|i| i.wrapping_mul(37) ^ 0x5c).collect();
        let key = [0x12, 0xab, 0x7f, 0xc4];
        for len in 0..=SHORT_MAX_BYTES {
            for start in 0..8 {
                for offset in 0..4 {
                    let mut fast = data[..start + len].to_vec();
                    let mut slow = fast.clone();
                    unmask(&mut fast[start..], key, offset);
                    naive(&mut slow[start..], key, offset);
                    assert_eq!(fast, slow, "len {len} start {start} offset {offset}");
                }
            }
        }
    }

    proptest! {
        /// RFC 6455 §5.3: octet i is XORed with key[i mod 4], whatever the
        /// alignment of the buffer and wherever a piece starts in the payload.
        #[test]
        fn matches_bytewise_definition(
            data in prop::collection::vec(any::<u8>(), 0..1200),
            key in any::<[u8; 4]>(),
            start in 0usize..16,
            offset in 0usize..8,
        ) {
            let start = start.min(data.len());
            let mut fast = data.clone();
            let mut slow = data.clone();
            let mut portable = data.clone();
            unmask(&mut fast[start..], key, offset);
            naive(&mut slow[start..], key, offset);
            unmask_words(&mut portable[start..], key, offset);
            prop_assert_eq!(&fast, &slow);
            prop_assert_eq!(&portable, &slow);
            // Each run-time build, where this CPU has it.
            #[cfg(target_arch = "x86_64")]
            {
                if std::arch::is_x86_feature_detected!("avx2") {
                    let mut wide = data.clone();
                    // SAFETY: AVX2 checked just above.
                    unsafe { unmask_avx2(&mut wide[start..], key, offset) };
                    prop_assert_eq!(&wide, &slow);
                }
                if std::arch::is_x86_feature_detected!("avx512bw") {
                    let mut wide = data.clone();
                    // SAFETY: AVX-512 BW checked just above.
                    unsafe { unmask_avx512(&mut wide[start..], key, offset) };
                    prop_assert_eq!(&wide, &slow);
                }
            }
        }

        /// The inline path for short payloads, past its own size limit too:
        /// every length it is correct for (each combination of steps).
        #[test]
        fn short_path_matches(
            data in prop::collection::vec(any::<u8>(), 0..128),
            key in any::<[u8; 4]>(),
            start in 0usize..9,
            offset in 0usize..8,
        ) {
            let start = start.min(data.len());
            let mut short = data.clone();
            let mut slow = data.clone();
            unmask_short(&mut short[start..], rotated(key, offset));
            naive(&mut slow[start..], key, offset);
            prop_assert_eq!(short, slow);
        }

        /// Unmasking in pieces equals unmasking at once.
        #[test]
        fn pieces_compose(data in prop::collection::vec(any::<u8>(), 0..300), key in any::<[u8; 4]>(), cut in 0usize..300) {
            let cut = cut.min(data.len());
            let mut whole = data.clone();
            unmask(&mut whole, key, 0);
            let mut split = data.clone();
            let (a, b) = split.split_at_mut(cut);
            unmask(a, key, 0);
            unmask(b, key, cut);
            prop_assert_eq!(whole, split);
        }
    }
}
