//! Issue 35, item 4: nothing a client drives grows without a bound. A
//! guest that stores client-chosen keys (the `io-probe` fixture's `fill`)
//! hits its store's quota (`kv_max_keys`, `kv_max_bytes`) or its write
//! queue's byte bound (Redis unreachable); the writes past it are refused,
//! the guest hears of each (`on_kv_error`, published to its clients as
//! `kv-error REASON KEY`), `/metrics` counts them, and memory stays bounded.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use tokio_tungstenite::tungstenite::Message;

/// Send `command`, then `ping`, and read until the echo of `ping` and
/// `want` kv-error messages have come: the kv-error texts seen.
async fn refusals(ws: &mut Ws, command: &str, want: usize) -> Vec<String> {
    send_text(ws, command).await;
    send_text(ws, "ping").await;
    let mut seen = Vec::new();
    let mut pinged = false;
    while !pinged || seen.len() < want {
        match next(ws).await {
            Message::Text(t) if t.as_str() == "ping" => pinged = true,
            Message::Text(t) if t.starts_with("kv-error ") => seen.push(t.to_string()),
            other => panic!("unexpected {other:?}"),
        }
    }
    seen
}

fn refused(reason: &str) -> String {
    format!("weir_kv_writes_refused_total{{route=\"/io\",reason=\"{reason}\"}}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_past_the_quota_are_refused_and_the_guest_hears_of_each() {
    let state = std::env::temp_dir().join(format!("weir-kv-bounds-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    let server = format!("workers = 1\nstate_dir = \"{}\"", state.display());
    let keys = "kv = \"route\"\nkv_max_keys = 100\nkv_max_bytes = \"256KiB\"";
    let weir = io_probe(&server, keys, "").await;
    let mut ws = client(&weir.url("/io")).await;
    // Bytes: two 100,000-byte values fit in 256 KiB, the third does not.
    let seen = refusals(&mut ws, "fill 3 100000 b", 1).await;
    assert_eq!(seen, ["kv-error max-bytes b-2"]);
    // Keys: 98 more fit (100 in all); the 22 after them do not.
    let seen = refusals(&mut ws, "fill 120 10 a", 22).await;
    let want: BTreeSet<String> = (98..120)
        .map(|i| format!("kv-error max-keys a-{i}"))
        .collect();
    assert_eq!(seen.into_iter().collect::<BTreeSet<_>>(), want);
    assert_eq!(metric(weir.addr, &refused("max-bytes")).await, 1);
    assert_eq!(metric(weir.addr, &refused("max-keys")).await, 22);
    assert_eq!(metric(weir.addr, "weir_kv_keys{route=\"/io\"}").await, 100);
    let bytes = metric(weir.addr, "weir_kv_bytes{route=\"/io\"}").await;
    assert!((200_000..=256 << 10).contains(&bytes), "{bytes}");
    // A refused write was not applied; one that fits still is.
    send_text(&mut ws, "get-kv a-119").await;
    assert_eq!(text(&mut ws).await, "a-119?");
    send_text(&mut ws, "del a-0").await;
    send_text(&mut ws, "fill 1 10 z").await;
    let deadline = tokio::time::Instant::now() + STEP;
    loop {
        send_text(&mut ws, "get-kv z-0").await;
        if text(&mut ws).await == "z-0=xxxxxxxxxx" {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "z-0 never landed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(metric(weir.addr, &refused("max-keys")).await, 22);
    drop(ws);
    drop(weir);
    let _ = std::fs::remove_dir_all(&state);
}

async fn text(ws: &mut Ws) -> String {
    loop {
        match next(ws).await {
            Message::Text(t) if t.starts_with("kv-error ") => continue,
            Message::Text(t) => return t.to_string(),
            other => panic!("expected text, got {other:?}"),
        }
    }
}

/// The regression of the review: `[cluster] redis` down, two clients
/// making the guest store 100 KiB values under new keys took the gateway
/// from 18 MiB to 1.9 GiB in 4 s. Now the writes waiting for Redis hold at
/// most the queue's bound (8 MiB) and the rest are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_unreachable_the_write_queue_stays_bounded() {
    // A port where nothing listens.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let cluster = format!("[cluster]\nredis = \"redis://127.0.0.1:{port}\"\n");
    let weir = io_probe("workers = 2", "kv = \"route\"", &cluster).await;
    let mut clients = vec![
        client(&weir.url("/io")).await,
        client(&weir.url("/io")).await,
    ];
    const ROUNDS: usize = 10;
    const EACH: usize = 10;
    const VALUE_BYTES: usize = 100 << 10;
    let mut heard = 0;
    for round in 0..ROUNDS {
        for (c, ws) in clients.iter_mut().enumerate() {
            let command = format!("fill {EACH} {VALUE_BYTES} c{c}r{round}");
            heard += refusals(ws, &command, 0).await.len();
        }
    }
    let total = (2 * ROUNDS * EACH) as u64;
    let queue_max = weir::guest::kv::quota::KV_QUEUE_MAX_BYTES as u64;
    // Every write is either held (in the mirror and the queue) or refused.
    let deadline = tokio::time::Instant::now() + STEP;
    let (held, full) = loop {
        let held = metric(weir.addr, "weir_kv_keys{route=\"/io\"}").await;
        let full = metric(weir.addr, &refused("queue-full")).await;
        if held + full == total {
            break (held, full);
        }
        assert!(tokio::time::Instant::now() < deadline, "{held} + {full}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        held * VALUE_BYTES as u64 <= queue_max,
        "{held} writes of {VALUE_BYTES} B held past the queue's {queue_max} B"
    );
    assert!(
        held >= 60,
        "the queue holds about 80 such writes, not {held}"
    );
    let queued = metric(weir.addr, "weir_kv_queued_bytes{route=\"/io\"}").await;
    assert!(queued <= queue_max, "{queued}");
    assert_eq!(metric(weir.addr, &refused("max-bytes")).await, 0);
    // The guest heard of refusals (the clients got its kv-error messages;
    // more may still be on their way).
    for ws in &mut clients {
        heard += refusals(ws, "ping", 0).await.len();
    }
    assert!(heard > 0, "no kv-error reached the guest's clients");
    // Loosely, the process: far below what 20 MiB of values queued twice
    // over would take, let alone the 1.9 GiB of the review.
    let status = std::fs::read_to_string(format!("/proc/{}/status", weir.child.id())).unwrap();
    let rss_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    assert!(rss_kib < 200 << 10, "RSS {rss_kib} KiB");
    eprintln!("held {held}, refused {full}, queued {queued} B, RSS {rss_kib} KiB");
}
