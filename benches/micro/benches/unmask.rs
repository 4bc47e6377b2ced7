//! Unmasking bandwidth: `weir::ws::mask::unmask` against a plain memcpy of
//! the same size (both read and write every byte once), from 64 B to 1 MiB.
//! After criterion's runs it prints its own ratio table (unmask / memcpy
//! bandwidth, median of timed batches), since criterion does not compare two
//! functions; the target is unmask ≥ 50% of memcpy.
//!
//! `unmask_avx2` is an experiment, not weir's code: the same word loop
//! compiled with AVX2 enabled (as a runtime-dispatched variant would be),
//! to show how much of the gap to memcpy (which glibc runs with AVX2/AVX-512)
//! is the baseline x86-64 target's 16-byte vectors.

use criterion::{black_box, BenchmarkId, Criterion, Throughput};
use std::time::{Duration, Instant};
use weir::ws::mask::unmask;

const SIZES: [usize; 5] = [64, 1024, 16 * 1024, 64 * 1024, 1024 * 1024];
const KEY: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];

/// `weir::ws::mask::unmask`'s loop, compiled for AVX2 (the experiment above).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn unmask_avx2_inner(buf: &mut [u8], key: [u8; 4], offset: usize) {
    let mut key = key;
    key.rotate_left(offset % 4);
    // SAFETY: every bit pattern is a valid u64.
    let (head, words, tail) = unsafe { buf.align_to_mut::<u64>() };
    for (i, b) in head.iter_mut().enumerate() {
        *b ^= key[i % 4];
    }
    key.rotate_left(head.len() % 4);
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

/// The AVX2 variant when the CPU has AVX2, else weir's.
fn unmask_avx2(buf: &mut [u8], key: [u8; 4], offset: usize) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 is present (checked just above).
        return unsafe { unmask_avx2_inner(buf, key, offset) };
    }
    unmask(buf, key, offset)
}

fn label(size: usize) -> String {
    match size {
        s if s >= 1 << 20 => format!("{} MiB", s >> 20),
        s if s >= 1 << 10 => format!("{} KiB", s >> 10),
        s => format!("{s} B"),
    }
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("unmask");
    for size in SIZES {
        group.throughput(Throughput::Bytes(size as u64));
        let mut buf = vec![0x5au8; size];
        group.bench_with_input(BenchmarkId::new("unmask", label(size)), &size, |b, _| {
            b.iter(|| unmask(black_box(&mut buf), black_box(KEY), 0))
        });
        // A frame's payload starts 6, 8 or 14 bytes into the read buffer, so
        // it is rarely 8-byte aligned: the head/tail loops run every time.
        let mut odd = vec![0x5au8; size + 1];
        group.bench_with_input(
            BenchmarkId::new("unmask_unaligned", label(size)),
            &size,
            |b, _| b.iter(|| unmask(black_box(&mut odd[1..]), black_box(KEY), 0)),
        );
        group.bench_with_input(
            BenchmarkId::new("unmask_avx2_experiment", label(size)),
            &size,
            |b, _| b.iter(|| unmask_avx2(black_box(&mut buf), black_box(KEY), 0)),
        );
        let src = vec![0xa5u8; size];
        let mut dst = vec![0u8; size];
        group.bench_with_input(BenchmarkId::new("memcpy", label(size)), &size, |b, _| {
            b.iter(|| dst.copy_from_slice(black_box(&src)))
        });
    }
    group.finish();
}

/// Median time per call of `f` over `batches` timed batches of `per` calls.
fn median_ns(mut f: impl FnMut(), per: usize, batches: usize) -> f64 {
    let mut times: Vec<f64> = (0..batches)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..per {
                f();
            }
            t.elapsed().as_nanos() as f64 / per as f64
        })
        .collect();
    times.sort_by(|a, b| a.total_cmp(b));
    times[batches / 2]
}

/// The ratio table: GiB/s of each, and unmask / memcpy.
fn ratio_table() {
    println!("\n| size | memcpy GiB/s | unmask GiB/s | unmask/memcpy | unaligned GiB/s | unaligned/memcpy | avx2 experiment GiB/s | avx2/memcpy |");
    println!("|---|---|---|---|---|---|---|---|");
    for size in SIZES {
        // About 2 ms per batch, 31 batches.
        let per = (2_000_000 / size).clamp(4, 100_000);
        let src = vec![0xa5u8; size];
        let mut dst = vec![0u8; size];
        let mut buf = vec![0x5au8; size];
        let mut odd = vec![0x5au8; size + 1];
        let gib = |ns: f64| size as f64 / ns * 1e9 / (1u64 << 30) as f64;
        let copy = median_ns(|| dst.copy_from_slice(black_box(&src)), per, 31);
        let xor = median_ns(|| unmask(black_box(&mut buf), black_box(KEY), 0), per, 31);
        let xor_odd = median_ns(
            || unmask(black_box(&mut odd[1..]), black_box(KEY), 0),
            per,
            31,
        );
        let avx2 = median_ns(
            || unmask_avx2(black_box(&mut buf), black_box(KEY), 0),
            per,
            31,
        );
        black_box((&dst, &buf, &odd));
        println!(
            "| {} | {:.2} | {:.2} | {:.0}% | {:.2} | {:.0}% | {:.2} | {:.0}% |",
            label(size),
            gib(copy),
            gib(xor),
            100.0 * copy / xor,
            gib(xor_odd),
            100.0 * copy / xor_odd,
            gib(avx2),
            100.0 * copy / avx2,
        );
    }
}

fn main() {
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    bench(&mut c);
    c.final_summary();
    if !std::env::args().any(|a| a == "--list") {
        ratio_table();
    }
}
