//! One guest call per batch, echo guest, 64-byte messages, batches of 1, 8
//! and 64: what a guest route costs per message on the host side (batch
//! encoding, the call, output validation), with Throughput::Bytes.
//!
//! Needs examples/wasm/echo.wasm (scripts/build-guests.sh).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use weir::config::{GuestConfig, Isolation};
use weir::guest::{Batch, GuestEngine, Program, Runner};

const MESSAGE_BYTES: usize = 64;

fn echo_runner() -> Runner {
    let wasm = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/wasm/echo.wasm");
    assert!(
        wasm.exists(),
        "{} is missing: run scripts/build-guests.sh first",
        wasm.display()
    );
    let engine = GuestEngine::new(None).expect("engine");
    let cfg = GuestConfig {
        wasm,
        oci: None,
        isolation: Isolation::Worker,
        memory: 16 << 20,
        timeout: Duration::from_secs(1),
        instances: 4,
        recycle_after: u64::MAX,
        attachment_max: 16 << 10,
        env: BTreeMap::new(),
        log: Default::default(),
        cpu_share: 50,
        outbound: Default::default(),
        kv: None,
        kv_quota: Default::default(),
        realtime: false,
    };
    Runner::new(Program::load(&engine, "/echo", &cfg).expect("load echo"))
}

fn guest_call(c: &mut Criterion) {
    let mut runner = echo_runner();
    let payload = [b'x'; MESSAGE_BYTES];
    let mut group = c.benchmark_group("guest_call_echo_64B");
    for size in [1usize, 8, 64] {
        let mut batch = Batch::new();
        for conn in 0..size as u64 {
            batch.push_message(conn + 1, true, &payload);
        }
        group.throughput(Throughput::Bytes((size * MESSAGE_BYTES) as u64));
        group.bench_function(BenchmarkId::from_parameter(size), |b| {
            b.iter(|| {
                let out = runner.handle(&mut batch).expect("echo call");
                assert_eq!(out.len(), size);
                out
            })
        });
    }
    group.finish();
}

criterion_group!(benches, guest_call);
criterion_main!(benches);
