//! Unmasking bandwidth: `weir_ws::mask::unmask` against a plain memcpy of
//! the same size (both read and write every byte once), from 64 B to 1 MiB.
//! After criterion's runs it prints its own ratio table (unmask / memcpy
//! bandwidth, median of timed batches), since criterion does not compare two
//! functions; the target is unmask ≥ 50% of memcpy.
//! (`unmask` itself picks its AVX2 build at run time where the CPU has it.)

use criterion::{black_box, BenchmarkId, Criterion, Throughput};
use std::time::{Duration, Instant};
use weir_ws::mask::unmask;

const SIZES: [usize; 5] = [64, 1024, 16 * 1024, 64 * 1024, 1024 * 1024];
const KEY: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];

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
    println!("\n| size | memcpy GiB/s | unmask GiB/s | unmask/memcpy | unaligned GiB/s | unaligned/memcpy |");
    println!("|---|---|---|---|---|---|");
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
        black_box((&dst, &buf, &odd));
        println!(
            "| {} | {:.2} | {:.2} | {:.0}% | {:.2} | {:.0}% |",
            label(size),
            gib(copy),
            gib(xor),
            100.0 * copy / xor,
            gib(xor_odd),
            100.0 * copy / xor_odd,
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
