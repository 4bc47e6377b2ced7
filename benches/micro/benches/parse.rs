//! Frame header parsing and the streaming decoder's per-frame cost:
//! `parse_client_header` on each of the three payload length forms
//! (RFC 6455 §5.2: 7-bit, 16-bit, 64-bit), and `Decoder::next` walking a
//! read buffer packed with small masked frames, as one read of a pipelining
//! client delivers them.

use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use weir::reactor::buffer::{HEADROOM_BYTES, STREAM_ABOVE_BYTES};
use weir::reactor::decode::{Decoder, Piece};
use weir_ws::encode::encode_client_header;
use weir_ws::frame::{parse_client_header, OpCode, MAX_HEADER_BYTES};
use weir_ws::mask::unmask;

const KEY: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];
/// Frames per decoded buffer.
const FRAMES: usize = 1000;

fn header(len: u64) -> Vec<u8> {
    let mut b = [0u8; MAX_HEADER_BYTES];
    let n = encode_client_header(&mut b, true, OpCode::Binary, KEY, len);
    b[..n].to_vec()
}

fn headers(c: &mut Criterion) {
    let mut group = c.benchmark_group("parse_client_header");
    group.throughput(Throughput::Elements(1));
    for (name, len) in [
        ("7bit_125", 125u64),
        ("16bit_4096", 4096),
        ("64bit_1MiB", 1 << 20),
    ] {
        let h = header(len);
        group.bench_function(name, |b| {
            b.iter(|| {
                let parsed = parse_client_header(black_box(&h)).unwrap().unwrap();
                assert_eq!(parsed.payload_len, len);
                parsed
            })
        });
    }
    group.finish();
}

/// A read buffer (with the reactor's headroom) holding `FRAMES` masked
/// frames of `payload` bytes each; returns it and the end of the data.
fn packed(opcode: OpCode, payload: usize) -> (Vec<u8>, usize) {
    let mut buf = vec![0u8; HEADROOM_BYTES];
    let body: Vec<u8> = (0..payload).map(|i| b'a' + (i % 26) as u8).collect();
    for _ in 0..FRAMES {
        buf.extend_from_slice(&{
            let mut b = [0u8; MAX_HEADER_BYTES];
            let n = encode_client_header(&mut b, true, opcode, KEY, payload as u64);
            b[..n].to_vec()
        });
        let at = buf.len();
        buf.extend_from_slice(&body);
        unmask(&mut buf[at..], KEY, 0);
    }
    let end = buf.len();
    (buf, end)
}

fn decode(c: &mut Criterion) {
    let mut group = c.benchmark_group("decoder_next");
    for (name, opcode, payload) in [
        ("binary_16B", OpCode::Binary, 16usize),
        ("text_16B", OpCode::Text, 16),
        ("binary_125B", OpCode::Binary, 125),
        ("text_125B", OpCode::Text, 125),
    ] {
        let (wire, end) = packed(opcode, payload);
        // Elements = frames, so criterion reports frames/s; ns per frame is
        // its reciprocal. (Bytes would hide the per-frame cost.)
        group.throughput(Throughput::Elements(FRAMES as u64));
        group.bench_function(name, |b| {
            b.iter_batched_ref(
                // Decoding unmasks in place: every iteration gets a fresh copy
                // (made outside the timed part).
                || wire.clone(),
                |buf| {
                    let mut dec = Decoder::new(64 << 20, STREAM_ABOVE_BYTES);
                    let mut pos = HEADROOM_BYTES;
                    let mut frames = 0;
                    while let Some(piece) = dec.next(buf, &mut pos, end).unwrap() {
                        if let Piece::Data(p) = piece {
                            frames += usize::from(p.message_end());
                        }
                    }
                    assert_eq!((frames, pos), (FRAMES, end));
                },
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();
}

criterion_group!(benches, headers, decode);
criterion_main!(benches);
