//! What a guest costs per language, inside the host (no sockets): the echo
//! and json examples in Rust, JavaScript (QuickJS) and Python, each measured
//! for
//!
//! - cold start: `Program::load` with an empty component cache (Cranelift
//!   compiles the component; what `weir check` or the first `weir serve`
//!   after a change pays),
//! - a new handler of the same toolchain: the other example of the
//!   language (echo ↔ json) compiled by a fresh engine after this one,
//!   with Cranelift's compiled functions kept (`FunctionCache`),
//! - warm start: `Program::load` again with the artifact cached,
//! - first batch: a fresh instance (instantiate + the first call),
//! - call: guest time per message in a 64 × 64 B batch (best of 9 rounds),
//! - memory: resident memory per live instance after one 64-message batch
//!   (VmRSS delta over 16 instances).
//!
//! `cargo bench -p weir-micro --bench guest_langs` (needs
//! scripts/build-guests.sh). One core, one language at a time; the machine
//! is shared, so compare rows of one run. `WEIR_GUEST_LANGS_WASM=DIR` takes
//! the components from DIR instead of examples/wasm (to compare two SDK
//! builds, each row under the same names); `WEIR_GUEST_LANGS_CACHE=DIR`
//! keeps the compiled components in DIR (cold start is then not measured).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use weir::config::{GuestConfig, Isolation};
use weir::guest::{Batch, GuestEngine, Program, Runner};

const BATCH: usize = 64;
const INSTANCES: usize = 16;

fn wasm(name: &str) -> PathBuf {
    let path = std::env::var_os("WEIR_GUEST_LANGS_WASM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/wasm"))
        .join(format!("{name}.wasm"));
    assert!(
        path.exists(),
        "{} is missing: run scripts/build-guests.sh first",
        path.display()
    );
    path
}

fn config(wasm: PathBuf) -> GuestConfig {
    GuestConfig {
        wasm,
        oci: None,
        isolation: Isolation::Worker,
        memory: 64 << 20,
        timeout: Duration::from_secs(5),
        instances: 256,
        recycle_after: u64::MAX,
        attachment_max: 16 << 10,
        env: BTreeMap::new(),
        log: Default::default(),
        cpu_share: 100,
        outbound: Default::default(),
        kv: None,
        kv_quota: Default::default(),
        realtime: false,
    }
}

fn rss_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("statm");
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// A batch that opens `BATCH` connections, then one of 64 messages.
fn batches(json: bool) -> (Batch, Batch) {
    let mut open = Batch::new();
    let mut msgs = Batch::new();
    for conn in 1..=BATCH as u64 {
        open.push_open(conn, "/bench", &[], &[]);
        if json {
            msgs.push_message(conn, true, format!("{{\"number\": {conn}}}").as_bytes());
        } else {
            msgs.push_message(conn, true, &[b'x'; 64]);
        }
    }
    (open, msgs)
}

fn measure(label: &str, name: &str, json: bool, cache: &Path, keep_cache: bool) {
    if !keep_cache {
        let _ = std::fs::remove_dir_all(cache);
    }
    let cfg = config(wasm(name));
    let engine = GuestEngine::new(Some(cache.to_path_buf())).expect("engine");
    let t = Instant::now();
    let program = Program::load(&engine, "/bench", &cfg).expect("load");
    let cold = t.elapsed();
    drop(program);
    let t = Instant::now();
    let program = Program::load(&engine, "/bench", &cfg).expect("load cached");
    let warm = t.elapsed();
    let beside = (!keep_cache).then(|| beside_sibling(name, cache));

    let (mut open, mut msgs) = batches(json);
    let mut runner = Runner::new(program.clone());
    let t = Instant::now();
    runner.handle(&mut open).expect("open batch");
    let first = t.elapsed();
    let mut best = Duration::MAX;
    for _ in 0..9 {
        let t = Instant::now();
        for _ in 0..10 {
            let out = runner.handle(&mut msgs).expect("message batch");
            assert_eq!(out.len(), BATCH, "{label}: one reply per message");
        }
        best = best.min(t.elapsed() / 10);
    }
    let per_msg_us = best.as_secs_f64() * 1e6 / BATCH as f64;

    let before = rss_bytes();
    let mut runners = Vec::new();
    for _ in 0..INSTANCES {
        let mut r = Runner::new(program.clone());
        r.handle(&mut open).expect("open batch");
        r.handle(&mut msgs).expect("message batch");
        runners.push(r);
    }
    let per_instance = rss_bytes().saturating_sub(before) / INSTANCES;
    drop(runners);

    let size = std::fs::metadata(&cfg.wasm).map(|m| m.len()).unwrap_or(0);
    println!(
        "| {label} | {:.1} MB | {:.0} | {} | {:.1} | {:.2} | {:.2} | {} |",
        size as f64 / 1e6,
        ms(cold),
        beside.map_or("-".to_string(), |b| format!("{:.0}", ms(b))),
        ms(warm),
        ms(first),
        per_msg_us,
        per_instance / 1024,
    );
}

/// A new handler of the same toolchain after `name` compiled: the other
/// example of its language (echo ↔ json), loaded by a fresh engine with
/// no artifact of it cached but the compiled functions `name` left (see
/// `FunctionCache`): what a deploy of a new Python or JS handler pays.
fn beside_sibling(name: &str, cache: &Path) -> Duration {
    let sibling = if name.contains("echo") {
        name.replace("echo", "json")
    } else {
        name.replace("json", "echo")
    };
    for entry in std::fs::read_dir(cache).expect("cache dir").flatten() {
        if entry.path().extension().is_some_and(|e| e == "cwasm") {
            std::fs::remove_file(entry.path()).expect("remove artifact");
        }
    }
    let engine = GuestEngine::new(Some(cache.to_path_buf())).expect("engine");
    let t = Instant::now();
    let program = Program::load(&engine, "/bench", &config(wasm(&sibling))).expect("sibling");
    let took = t.elapsed();
    drop(program);
    took
}

fn main() {
    // `cargo bench ... --bench guest_langs -- js` measures only the rows
    // whose label contains "js" (case-insensitive).
    let filter = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .map(|f| f.to_lowercase());
    // WEIR_GUEST_LANGS_CACHE=DIR keeps compiled components in DIR from run
    // to run (cold start is then not measured): for A/B runs of the call.
    let kept = std::env::var_os("WEIR_GUEST_LANGS_CACHE").map(PathBuf::from);
    let keep_cache = kept.is_some();
    let cache = kept.unwrap_or_else(|| {
        std::env::temp_dir().join(format!("weir-guest-langs-{}", std::process::id()))
    });
    println!(
        "| guest | .wasm | cold start: compile + load, ms | a new handler of the same toolchain after it, ms | warm start: cached load, ms | first batch on a fresh instance, ms | call, µs per message (64 × 64 B) | memory per instance, KiB |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (label, name, json) in [
        ("Rust echo", "echo", false),
        ("JS echo", "js-echo", false),
        ("Python echo", "py-echo", false),
        ("Rust json", "json", true),
        ("JS json", "js-json", true),
        ("Python json", "py-json", true),
    ] {
        if filter
            .as_ref()
            .is_some_and(|f| !label.to_lowercase().contains(f.as_str()))
        {
            continue;
        }
        measure(label, name, json, &cache, keep_cache);
    }
    if !keep_cache {
        let _ = std::fs::remove_dir_all(&cache);
    }
}
