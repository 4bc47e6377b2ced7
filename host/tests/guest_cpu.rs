//! Guest CPU must never stall the reactor (issue 12): on one worker, native
//! echo (and a well-behaved guest route) keep their throughput and latency
//! while another guest route loops to its deadline or computes for
//! milliseconds per message, and a client address that keeps tripping the
//! deadline is refused with 429. Throughput is compared as a ratio against
//! the same run without the attacker, generous enough for a busy 2-core CI
//! machine; the benchmark (benches/neighbours.py) measures the real figures.

mod common;
mod guest_support;

use common::{Gateway, STEP};
use futures_util::{SinkExt, StreamExt};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpSocket;
use tokio::time::{timeout, Instant};
use tokio_tungstenite::tungstenite::Message;
use weir_config::{Behaviour, Config, GuestConfig, Limits, RouteConfig};

/// The tests here compare throughput with and without an attacker: they run
/// one at a time, so one test's load is not another's attacker.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// One worker: native /echo, the echo guest on /plain, the `faulty`
/// fixture on /faulty with a 100 ms deadline.
fn gateway() -> Gateway {
    let mut config = Config::builtin_default();
    config.server.workers = 1;
    let guest = |path: &str, name: &str, timeout: Duration| {
        let mut cfg = GuestConfig::defaults(guest_support::wasm(name));
        cfg.timeout = timeout;
        RouteConfig {
            path: path.to_string(),
            line: 0,
            behaviour: Behaviour::Guest(cfg),
            limits: Limits::default(),
            topics: None,
        }
    };
    config
        .routes
        .push(guest("/plain", "echo", Duration::from_secs(2)));
    config
        .routes
        .push(guest("/faulty", "faulty", Duration::from_millis(100)));
    Gateway::start(config)
}

/// A client connection from loopback address `source` (127.0.0.x).
type Ws = tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>;

async fn connect_from(addr: SocketAddr, path: &str, source: [u8; 4]) -> Result<Ws, u16> {
    let socket = TcpSocket::new_v4().unwrap();
    socket
        .bind(SocketAddr::from((source, 0)))
        .expect("bind a loopback source address");
    let stream = timeout(STEP, socket.connect(addr)).await.unwrap().unwrap();
    let url = format!("ws://{addr}{path}");
    match timeout(STEP, tokio_tungstenite::client_async(url, stream))
        .await
        .expect("handshake timed out")
    {
        Ok((ws, _)) => Ok(ws),
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => Err(resp.status().as_u16()),
        Err(e) => panic!("handshake: {e}"),
    }
}

/// Echo load for `secs`: `conns` connections to `url`, one message in flight
/// each. Returns (messages, p99 latency).
async fn echo_load(url: &str, conns: usize, secs: f64) -> (u64, Duration) {
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for c in 0..conns {
        let (url, stop, count) = (url.to_string(), stop.clone(), count.clone());
        tasks.push(tokio::spawn(async move {
            let mut ws = common::client(&url).await;
            let mut latencies = Vec::new();
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let started = Instant::now();
                let msg = format!("{c}:{i}");
                ws.send(Message::text(msg.clone())).await.unwrap();
                assert_eq!(common::next(&mut ws).await, Message::text(msg));
                latencies.push(started.elapsed());
                count.fetch_add(1, Ordering::Relaxed);
                i += 1;
            }
            latencies
        }));
    }
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all.sort_unstable();
    let p99 = all[all.len() * 99 / 100];
    (count.load(Ordering::Relaxed), p99)
}

/// The attack of issue 12: a connection, "loop", closed 1011 at the
/// deadline, again — from rotating source addresses, so the back-off does
/// not stop it. Runs until `stop`; returns how many calls looped.
async fn attack(addr: SocketAddr, stop: Arc<AtomicBool>, message: &'static str) -> u64 {
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let source = [127, 0, 0, 2 + (n % 200) as u8];
        n += 1;
        let Ok(mut ws) = connect_from(addr, "/faulty", source).await else {
            continue;
        };
        ws.send(Message::text(message)).await.unwrap();
        // Until the reply or the 1011 close.
        let _ = timeout(STEP, ws.next()).await;
    }
    n
}

/// Runs `load` alone, then with `attacker` running, and returns both results.
async fn alone_then_attacked<F, A>(
    load: impl Fn() -> F,
    attacker: impl FnOnce(Arc<AtomicBool>) -> A,
) -> ((u64, Duration), (u64, Duration), u64)
where
    F: std::future::Future<Output = (u64, Duration)>,
    A: std::future::Future<Output = u64> + Send + 'static,
{
    let alone = load().await;
    let stop = Arc::new(AtomicBool::new(false));
    let attacking = tokio::spawn(attacker(stop.clone()));
    // Let the first stall happen before measuring: the route moves to the
    // guest thread after one call that held the worker.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let attacked = load().await;
    stop.store(true, Ordering::Relaxed);
    let calls = timeout(STEP, attacking).await.unwrap().unwrap();
    (alone, attacked, calls)
}

/// Echo load on `path` alone, then while the attacker sends `message` to
/// /faulty: throughput keeps over 0.4 of itself and p99 under 50 ms
/// (generous for a busy 2-core CI machine; benches/neighbours.py measures).
/// Returns the gateway and the attacker's calls.
async fn keeps_serving(path: &str, message: &'static str) -> (Gateway, u64) {
    let gw = gateway();
    let url = gw.url(path);
    let addr = gw.addr;
    let (alone, attacked, calls) = alone_then_attacked(
        || echo_load(&url, 10, 1.5),
        move |stop| attack(addr, stop, message),
    )
    .await;
    let ratio = attacked.0 as f64 / alone.0 as f64;
    eprintln!(
        "{path} alone {alone:?}, beside {message:?} {attacked:?} ({ratio:.2}), {calls} calls"
    );
    assert!(ratio > 0.4, "{path} fell to {ratio:.2} of its throughput");
    assert!(
        attacked.1 < Duration::from_millis(50),
        "{path} p99 {:?} under attack",
        attacked.1
    );
    (gw, calls)
}

/// Native echo on the worker a looping guest route shares: before, every
/// looped call held the worker for the whole deadline (−95 % throughput,
/// p99 106 ms); now the route's calls run on its own thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_looping_guest_does_not_stall_native_echo() {
    let _serial = SERIAL.lock().await;
    let (gw, calls) = keeps_serving("/echo", "loop").await;
    assert!(calls >= 5, "the attacker made only {calls} calls");
    gw.stop();
}

/// A CPU-heavy but legal handler (5 ms per message) beside native echo:
/// echo keeps going, and every message of the heavy route is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cpu_heavy_guest_does_not_stall_native_echo() {
    let _serial = SERIAL.lock().await;
    let (gw, _) = keeps_serving("/echo", "spin 5").await;
    let mut ws = connect_from(gw.addr, "/faulty", [127, 0, 0, 1])
        .await
        .unwrap();
    for _ in 0..3 {
        ws.send(Message::text("spin 5")).await.unwrap();
        let reply = timeout(STEP, ws.next()).await.unwrap().unwrap().unwrap();
        assert_eq!(reply, Message::text("spun"));
    }
    gw.stop();
}

/// Two guest routes on one worker, one hostile: the other keeps its share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_looping_guest_does_not_stall_another_guest_route() {
    let _serial = SERIAL.lock().await;
    let (gw, _) = keeps_serving("/plain", "loop").await;
    gw.stop();
}

/// A client address whose messages trip the deadline three times is refused
/// new upgrades on that route (429, Retry-After), counted in /metrics;
/// other addresses are not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeat_offenders_get_429_with_retry_after() {
    let _serial = SERIAL.lock().await;
    let gw = gateway();
    let offender = [127, 0, 0, 77];
    for _ in 0..3 {
        let mut ws = connect_from(gw.addr, "/faulty", offender).await.unwrap();
        ws.send(Message::text("loop")).await.unwrap();
        match timeout(STEP, ws.next()).await.expect("no close in time") {
            Some(Ok(Message::Close(Some(frame)))) => assert_eq!(u16::from(frame.code), 1011),
            other => panic!("expected a 1011 close, got {other:?}"),
        }
    }
    assert_eq!(
        connect_from(gw.addr, "/faulty", offender).await.err(),
        Some(429)
    );
    // The raw answer carries Retry-After.
    let (_, status) = common::Raw::request(
        gw.addr,
        "GET /faulty HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
    )
    .await;
    assert_eq!(status, 101, "127.0.0.1 did nothing wrong");
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from((offender, 0))).unwrap();
    let mut raw = socket.connect(gw.addr).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    raw.write_all(
        b"GET /faulty HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
          Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
    )
    .await
    .unwrap();
    let mut head = vec![0u8; 1024];
    let n = timeout(STEP, raw.read(&mut head)).await.unwrap().unwrap();
    let head = String::from_utf8_lossy(&head[..n]).to_lowercase();
    assert!(head.starts_with("http/1.1 429"), "{head}");
    assert!(head.contains("retry-after: "), "{head}");
    // Other addresses still get in, and the native route never noticed.
    assert!(connect_from(gw.addr, "/faulty", [127, 0, 0, 78])
        .await
        .is_ok());
    let body = common::metrics(gw.addr).await;
    let refused = weir::metrics::read(&body, "weir_guest_backoff_refused_total{route=\"/faulty\"}");
    assert!(refused >= Some(2), "{body}");
    let trips = weir::metrics::read(&body, "weir_guest_deadline_trips_total{route=\"/faulty\"}");
    assert!(trips >= Some(3), "{body}");
    gw.stop();
}

/// One worker with only the `faulty` fixture on /faulty at `cpu_share`, and
/// a client connected to it.
async fn faulty_at_share(cpu_share: u32) -> (Gateway, Ws) {
    let mut config = Config::builtin_default();
    config.server.workers = 1;
    let mut cfg = GuestConfig::defaults(guest_support::wasm("faulty"));
    cfg.cpu_share = cpu_share;
    config.routes.push(RouteConfig {
        path: "/faulty".into(),
        line: 0,
        behaviour: Behaviour::Guest(cfg),
        limits: Limits::default(),
        topics: None,
    });
    let gw = Gateway::start(config);
    let ws = connect_from(gw.addr, "/faulty", [127, 0, 0, 1])
        .await
        .unwrap();
    (gw, ws)
}

/// A slow route may use its `cpu_share` of one core on its guest thread,
/// and no more: at 10 %, 5 ms calls run ~20 times a second, not ~200.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_route_is_held_to_its_cpu_share() {
    let _serial = SERIAL.lock().await;
    let (gw, mut ws) = faulty_at_share(10).await;
    let started = Instant::now();
    let mut calls = 0u32;
    while started.elapsed() < Duration::from_secs(2) {
        ws.send(Message::text("spin 5")).await.unwrap();
        let reply = timeout(STEP, ws.next()).await.unwrap().unwrap().unwrap();
        assert_eq!(reply, Message::text("spun"));
        calls += 1;
    }
    eprintln!("{calls} calls of 5 ms in 2 s at cpu_share 10 %");
    // 2 inline calls, then ~20/s; unthrottled it would be ~400. (The low
    // bound is loose: beside the other tests of this file, a nice-10 thread
    // on a busy 2-core machine waits long for each wake-up.)
    assert!(calls <= 100, "{calls} calls: the share was not enforced");
    assert!(calls >= 3, "{calls} calls: the route barely ran");
    gw.stop();
}

/// A route held to its share pauses its guest thread; stopping the gateway
/// does not wait the pause out (here 50 ms calls at 1 %: 5 s per call).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_does_not_wait_out_a_share_pause() {
    let _serial = SERIAL.lock().await;
    let (gw, mut ws) = faulty_at_share(1).await;
    // The first call moves the route off the worker, the second starts a
    // 5 s pause once it is answered.
    for _ in 0..2 {
        ws.send(Message::text("spin 50")).await.unwrap();
        let reply = timeout(STEP, ws.next()).await.unwrap().unwrap().unwrap();
        assert_eq!(reply, Message::text("spun"));
    }
    drop(ws);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    tokio::task::spawn_blocking(move || gw.stop())
        .await
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "stopping took {:?}",
        started.elapsed()
    );
}

/// A call the scheduler stopped is not a slow call (issue 40): a route
/// whose calls take 1 ms of CPU stays on the worker while the whole
/// gateway is stopped (SIGSTOP) for 30 ms again and again, each stop
/// stretching the call it lands in past every wall-time slice; calls that
/// really compute for 15 ms still move it. The gateway runs as a process
/// of its own so the test can stop it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preempted_call_does_not_move_its_route() {
    let _serial = SERIAL.lock().await;
    let dir = std::env::temp_dir().join(format!("weir-preempted-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log_path = dir.join("stderr.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let routes = format!(
        "[[route]]\npath = \"/faulty\"\nguest = \"{}\"\ntimeout = \"2s\"\n",
        guest_support::wasm("faulty").display()
    );
    let weir = common::WeirProcess::start(
        "workers = 1",
        &routes,
        "info,weir_guest_runtime=debug",
        log.into(),
    )
    .await;
    let moved = || {
        std::fs::read_to_string(&log_path)
            .unwrap()
            .contains("move to the guest thread")
    };
    let mut ws = common::client(&weir.url("/faulty")).await;

    // Calls of 1 ms back to back while the gateway is stopped 15 times.
    let pid = weir.child.id() as libc::pid_t;
    let stopper = tokio::spawn(async move {
        for _ in 0..15 {
            // SAFETY: kill(2) on the child this test started.
            unsafe { libc::kill(pid, libc::SIGSTOP) };
            tokio::time::sleep(Duration::from_millis(30)).await;
            unsafe { libc::kill(pid, libc::SIGCONT) };
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
    });
    let mut calls = 0u32;
    while !stopper.is_finished() {
        ws.send(Message::text("spin 1")).await.unwrap();
        let reply = timeout(STEP, ws.next()).await.unwrap().unwrap().unwrap();
        assert_eq!(reply, Message::text("spun"));
        calls += 1;
    }
    stopper.await.unwrap();
    assert!(
        calls >= 50,
        "only {calls} calls while the gateway was stopped"
    );
    assert!(
        !moved(),
        "a call stretched by stops moved the route ({calls} calls)"
    );

    // The control: calls that compute for 15 ms move it (the first alone
    // when the thread had the core for 10 ms of it, else the second: the
    // spin is timed in wall time, and this machine is shared).
    let mut spins = 0;
    while !moved() {
        assert!(
            spins < 10,
            "{spins} calls of 15 ms did not move the route: {}",
            std::fs::read_to_string(&log_path).unwrap()
        );
        ws.send(Message::text("spin 15")).await.unwrap();
        let reply = timeout(STEP, ws.next()).await.unwrap().unwrap().unwrap();
        assert_eq!(reply, Message::text("spun"));
        spins += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(weir);
    let _ = std::fs::remove_dir_all(&dir);
}
