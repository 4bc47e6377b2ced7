//! `weir_ws::mask::unmask` against the byte-by-byte definition (RFC 6455
//! §5.3: octet i of the payload is XORed with key[i % 4]), for any length,
//! any running offset and any alignment: the slice starts at a fuzzer-chosen
//! place inside a larger buffer, so the word loop's unaligned head and tail
//! (and the AVX2 build, from 128 bytes) all get their turn. Unmasking a
//! buffer in fuzzer-chosen pieces with running offsets must equal unmasking
//! it whole, and bytes outside the slice must not change.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use weir_ws::mask::unmask;

#[derive(Arbitrary, Debug)]
struct Input {
    key: [u8; 4],
    /// Where the payload starts inside the buffer (0..32: every alignment).
    start: u8,
    /// Payload position of the first byte, as when a frame arrives in reads.
    offset: u32,
    /// Lengths of the pieces for the piecewise pass.
    cuts: Vec<u16>,
    data: Vec<u8>,
}

fn reference(buf: &mut [u8], key: [u8; 4], offset: usize) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b ^= key[(offset + i) % 4];
    }
}

fuzz_target!(|input: Input| {
    let Input {
        key,
        start,
        offset,
        cuts,
        data,
    } = input;
    let start = usize::from(start % 32);
    let offset = offset as usize;
    let len = data.len();
    // The payload sits at `start`, with guard bytes on both sides.
    let mut backing = vec![0x5Au8; start + len + 32];
    backing[start..start + len].copy_from_slice(&data);
    let mut fast = backing.clone();
    let mut slow = backing.clone();
    unmask(&mut fast[start..start + len], key, offset);
    reference(&mut slow[start..start + len], key, offset);
    assert_eq!(fast, slow, "len {len} start {start} offset {offset}");

    // The same payload in pieces, each with its position in the payload.
    let mut pieces = backing.clone();
    let mut at = 0;
    let mut cuts = cuts.iter().map(|&c| usize::from(c));
    while at < len {
        let n = cuts.next().unwrap_or(len).clamp(1, len - at);
        unmask(&mut pieces[start + at..start + at + n], key, offset + at);
        at += n;
    }
    assert_eq!(
        pieces, slow,
        "in pieces: len {len} start {start} offset {offset}"
    );

    // Unmasking twice gives the input back (XOR is an involution).
    unmask(&mut fast[start..start + len], key, offset);
    assert_eq!(fast, backing);
});
