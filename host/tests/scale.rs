//! Connection scale: what an idle connection costs a real `weir serve`
//! process. A guard, not a benchmark (the figures themselves are in
//! benches/RESULTS.md): it catches a change that puts a buffer, a timer or
//! a leftover handshake allocation back into every open connection. It
//! times nothing.

mod common;

use common::*;
use std::process::Stdio;
use std::time::Duration;

const CONNECTIONS: usize = 5_000;
/// This test measures 1,960 bytes per connection (glibc, two workers,
/// steady to a few bytes across runs); the build before the handshake task
/// lost its TLS and HTTP/2 room and the loop its timer and write futures
/// measured 3,074 here. A regression that adds half a KiB per connection
/// fails.
const GUARD_BYTES: u64 = 2560;

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("VmRSS in /proc/PID/status");
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Upgrades, sends one masked text frame and reads its echo: the
/// connection is then idle in the sense (one message exchanged).
async fn open_one(addr: std::net::SocketAddr) -> Raw {
    let mut raw = Raw::connect(addr, "/echo").await;
    raw.send(&frame(0x81, b"one message before the silence"))
        .await;
    let (first, payload) = raw.next_frame().await.expect("the echo");
    assert_eq!(first, 0x81);
    assert_eq!(payload, b"one message before the silence");
    raw
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_echo_connection_costs_the_gateway_under_2_5_kib() {
    let weir = WeirProcess::start(
        "workers = 2\nmax_connections = 20000",
        "[[route]]\npath = \"/echo\"\nnative = \"echo\"\n",
        "warn",
        Stdio::inherit(),
    )
    .await;
    let pid = weir.child.id();
    // Warm the workers' pools and the allocator with a few connections
    // first, so the slope is per connection, not start-up.
    let mut conns = Vec::with_capacity(CONNECTIONS);
    for _ in 0..100 {
        conns.push(open_one(weir.addr).await);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = rss_kib(pid);
    let opened = tokio::time::timeout(Duration::from_secs(120), async {
        for _ in 0..CONNECTIONS {
            conns.push(open_one(weir.addr).await);
        }
    })
    .await;
    assert!(opened.is_ok(), "{CONNECTIONS} connections took over 120 s");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = rss_kib(pid);
    let per_conn = after.saturating_sub(before) * 1024 / CONNECTIONS as u64;
    eprintln!("weir RSS {before} KiB -> {after} KiB: {per_conn} bytes per idle connection");
    assert!(
        per_conn <= GUARD_BYTES,
        "an idle echo connection costs {per_conn} bytes of gateway RSS (guard {GUARD_BYTES})"
    );
    // Still served, every one of them: a ping on each gets its pong.
    for raw in conns.iter_mut() {
        raw.send(&frame(0x89, b"up?")).await;
    }
    for raw in conns.iter_mut() {
        let pong = tokio::time::timeout(Duration::from_secs(10), raw.next_frame())
            .await
            .expect("a pong within 10 s");
        assert_eq!(pong, Some((0x8A, b"up?".to_vec())));
    }
}
