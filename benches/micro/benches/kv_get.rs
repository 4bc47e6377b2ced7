//! Why a guest's `kv.get` stays a synchronous import on Redis-backed
//! stores (issue 18): the read a guest call makes, from the embedded redb
//! store, from the per-node mirror of a store on Redis, and what a
//! blocking read from Redis itself (a GET over loopback) would cost
//! instead. 1,000 keys of 64-byte values; every read hits.
//!
//! Run: `cargo bench -p weir-micro --bench kv_get -- --warm-up-time 1
//! --measurement-time 3`. The Redis rows need Debian's redis-server
//! (scripts/redis.sh); the bench starts one on a free loopback port and
//! stops it at the end, and leaves them out when it is missing.

use criterion::{criterion_group, criterion_main, Criterion};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use weir::config::{ClusterConfig, KvName, KvQuota};
use weir::guest::kv::KvStore;

const KEYS: usize = 1000;

fn key(i: usize) -> Vec<u8> {
    format!("user:{i:04}").into_bytes()
}

/// A redis-server child on a free loopback port, or None without one.
fn redis() -> Option<(Child, u16)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .ok()?
        .local_addr()
        .ok()?
        .port();
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .spawn()
        .ok()?;
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Some((child, port));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

fn fill(store: &KvStore) {
    for i in 0..KEYS {
        store
            .set(&key(i), &[b'v'; 64], 0)
            .expect("within the default quota");
    }
    store.flush();
}

fn bench(c: &mut Criterion) {
    let dir = std::env::temp_dir().join(format!("weir-kv-bench-{}", std::process::id()));
    let redb = KvStore::open(&dir, None, "/bench", &KvName::Route, KvQuota::default()).unwrap();
    fill(&redb);
    let mut i = 0;
    c.bench_function("kv get: redb (embedded)", |b| {
        b.iter(|| {
            i = (i + 1) % KEYS;
            redb.get(&key(i)).unwrap()
        })
    });
    let Some((mut child, port)) = redis() else {
        eprintln!("kv_get: no redis-server; Redis rows left out (scripts/redis.sh installs it)");
        let _ = std::fs::remove_dir_all(&dir);
        return;
    };
    let url = format!("redis://127.0.0.1:{port}");
    let cluster = ClusterConfig::Redis(url.clone());
    let mirrored = KvStore::open(
        &dir,
        Some(&cluster),
        "/bench",
        &KvName::Route,
        KvQuota::default(),
    )
    .unwrap();
    fill(&mirrored);
    c.bench_function("kv get: Redis store, node mirror", |b| {
        b.iter(|| {
            i = (i + 1) % KEYS;
            mirrored.get(&key(i)).unwrap()
        })
    });
    let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
    c.bench_function("kv get: blocking GET from Redis (loopback)", |b| {
        b.iter(|| {
            i = (i + 1) % KEYS;
            let mut full = b"weir:kv:route-_2fbench:".to_vec();
            full.extend_from_slice(&key(i));
            let value: Vec<u8> = redis::cmd("GET").arg(full).query(&mut conn).unwrap();
            assert_eq!(value.len(), 64);
            value
        })
    });
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, bench);
criterion_main!(benches);
