//! The real `weir serve` process: graceful drain on SIGTERM, and no leaked
//! task, buffer or file descriptor after clients vanish mid-handshake and
//! mid-frame (open descriptors counted in /proc/PID/fd).

mod common;

use common::*;
use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{timeout, Instant};

type Weir = WeirProcess;

/// The routes every test here serves.
const ROUTES: &str = "[[route]]\npath = \"/echo\"\nnative = \"echo\"\n\n\
                      [[route]]\npath = \"/relay\"\nnative = \"relay\"\n";

impl WeirProcess {
    async fn with(server_keys: &str) -> Weir {
        Weir::start(
            &format!("workers = 2\n{server_keys}"),
            ROUTES,
            "warn",
            Stdio::inherit(),
        )
        .await
    }

    fn open_fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.child.id()))
            .unwrap()
            .count()
    }

    fn sigterm(&self) {
        let pid = libc::pid_t::try_from(self.child.id()).unwrap();
        // SAFETY: kill(2) on the child this test spawned; no memory involved.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    }

    /// Waits for the exit; returns how long it took and whether it was 0.
    async fn exit(&mut self, limit: Duration) -> (Duration, bool) {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return (started.elapsed(), status.success());
            }
            assert!(
                started.elapsed() < limit,
                "weir serve still running after {limit:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// One HTTP request on a new connection; the status and the body.
async fn http(addr: SocketAddr, head: &str) -> (u16, String) {
    let mut s = timeout(STEP, TcpStream::connect(addr))
        .await
        .unwrap()
        .unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    let mut all = Vec::new();
    timeout(STEP, s.read_to_end(&mut all))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&all).to_string();
    (text[9..12].parse().unwrap(), text)
}

const UPGRADE: &str = "GET /echo HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                       Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";

/// SIGTERM drains: replies to messages already sent still arrive, every
/// connection gets a 1012 close (at once: a few are not paced), /healthz and new upgrades get 503 while the
/// close handshakes finish, and the process exits 0 as soon as the last
/// connection is gone — well before the drain timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_connections_then_exits_0() {
    let mut weir = Weir::with("drain_timeout = \"20s\"").await;
    let mut polite = Vec::new();
    for _ in 0..4 {
        polite.push(Raw::connect(weir.addr, "/echo").await);
    }
    let mut pair = (
        Raw::connect(weir.addr, "/relay").await,
        Raw::connect(weir.addr, "/relay").await,
    );
    // A burst in flight when the signal comes: all of it is answered.
    let mut burst = Vec::new();
    for i in 0..200u32 {
        burst.extend(frame(0x82, &i.to_be_bytes()));
    }
    polite[0].send(&burst).await;
    // A keep-alive HTTP connection, idle when the drain starts.
    let mut keep_alive = TcpStream::connect(weir.addr).await.unwrap();
    keep_alive
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut head = [0u8; 256];
    let n = keep_alive.read(&mut head).await.unwrap();
    assert!(head[..n].starts_with(b"HTTP/1.1 200"));

    weir.sigterm();
    for i in 0..200u32 {
        let (first, payload) = polite[0].next_frame().await.expect("echo of the burst");
        assert_eq!((first, payload), (0x82, i.to_be_bytes().to_vec()));
    }
    for c in polite.iter_mut().chain([&mut pair.0, &mut pair.1]) {
        assert_eq!(c.close_code().await, Some(1012));
    }
    // Still draining (the relay pair has not answered yet): 503s.
    let (status, text) = http(
        weir.addr,
        "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n",
    )
    .await;
    assert_eq!(status, 503, "{text}");
    let (status, text) = http(weir.addr, UPGRADE).await;
    assert_eq!(status, 503, "{text}");
    assert!(text.to_ascii_lowercase().contains("retry-after:"), "{text}");
    // The idle keep-alive connection was closed.
    let n = timeout(STEP, keep_alive.read(&mut head))
        .await
        .unwrap()
        .unwrap_or(0);
    assert_eq!(n, 0, "idle HTTP connection left open");

    for c in polite.iter_mut().chain([&mut pair.0, &mut pair.1]) {
        c.send(&frame(0x88, &1001u16.to_be_bytes())).await;
    }
    let (took, success) = weir.exit(STEP).await;
    assert!(success, "exit status not 0");
    assert!(
        took < Duration::from_secs(10),
        "exit took {took:?} after the last close"
    );
}

/// A client that never answers (it does not even read, so the 1012 cannot
/// be written) holds the exit only until `drain_timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_timeout_bounds_the_wait_for_stuck_clients() {
    let mut weir = Weir::with("drain_timeout = \"1s\"").await;
    let stuck = Raw::connect(weir.addr, "/echo").await;
    // Fill both directions so the gateway's write to it blocks.
    let mut wr = second_handle(&stuck.stream);
    let chunk = frame(0x82, &vec![0; 64 << 10]);
    while timeout(Duration::from_millis(300), wr.write_all(&chunk))
        .await
        .is_ok()
    {}
    let started = Instant::now();
    weir.sigterm();
    let (_, success) = weir.exit(STEP).await;
    let took = started.elapsed();
    assert!(success, "exit status not 0");
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(8),
        "exit after {took:?} with a 1 s drain timeout"
    );
    drop(stuck);
}

/// Clients that vanish mid-handshake, mid-frame (a FIN or a reset), or
/// while their relay partner is sending leave nothing behind: the open
/// descriptors, connections and held buffers return to their resting counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abrupt_disconnects_leak_no_descriptor_task_or_buffer() {
    let weir = Weir::with("").await;
    let addr = weir.addr;
    // Let the workers settle (lazily opened descriptors), then count.
    await_metric(addr, "weir_tcp_connections", 1).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let resting = weir.open_fds();

    for round in 0..20 {
        // Half an upgrade request.
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(&UPGRADE.as_bytes()[..30]).await.unwrap();
        drop(s);
        // A whole upgrade request, gone before the 101 is read.
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(UPGRADE.as_bytes()).await.unwrap();
        drop(s);
        // Mid-frame: a 1 MiB frame's header and 100 KiB of it, then FIN.
        let mut c = Raw::connect(addr, "/echo").await;
        let big = frame(0x82, &vec![round as u8; 1 << 20]);
        c.send(&big[..100 << 10]).await;
        drop(c);
        // Mid-frame with a reset (SO_LINGER 0).
        let mut c = Raw::connect(addr, "/echo").await;
        c.send(&big[..3000]).await;
        let std = c.stream.into_std().unwrap();
        socket2::SockRef::from(&std)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
        drop(std);
        // A relay pair: one side vanishes while the other is mid-message.
        let mut a = Raw::connect(addr, "/relay").await;
        let b = Raw::connect(addr, "/relay").await;
        a.send(&big[..200 << 10]).await;
        drop(b);
        drop(a);
    }
    await_metric(addr, "weir_websocket_connections", 0).await;
    await_metric(addr, "weir_tcp_connections", 1).await;
    assert_eq!(metric(addr, "weir_receive_buffer_bytes_held").await, 0);
    assert_eq!(metric(addr, "weir_outbound_queued_bytes").await, 0);
    // The scrape's own connection may still be closing on the server side.
    let deadline = Instant::now() + STEP;
    while weir.open_fds() > resting {
        assert!(
            Instant::now() < deadline,
            "open descriptors: {} at rest before, {} after",
            resting,
            weir.open_fds()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The status of a WebSocket upgrade of `/echo` on a fresh connection, and
/// the connection (kept open by the caller when upgraded); an error when
/// the gateway reset or closed it before answering.
async fn upgrade_status(addr: SocketAddr) -> std::io::Result<(u16, TcpStream)> {
    let mut s = TcpStream::connect(addr).await?;
    s.write_all(
        b"GET /echo HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
          Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
    )
    .await?;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut byte).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        head.push(byte[0]);
    }
    let status = String::from_utf8_lossy(&head[9..12]).parse().unwrap_or(0);
    Ok((status, s))
}

/// With few descriptors (`ulimit -n 128`) and max_connections far above
/// them (1,000), the gateway caps itself below the limit: a
/// storm of 200 upgrades gets 101 or 503 each — never a reset — the log
/// says why once instead of per refusal, and once connections close it
/// serves new ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn few_descriptors_mean_503s_not_resets_and_serving_goes_on() {
    use std::os::unix::process::CommandExt;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = std::env::temp_dir().join(format!("weir-nofile-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("routes.toml");
    std::fs::write(
        &file,
        format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\nworkers = 1\nmax_connections = 1000\n\n{ROUTES}"
        ),
    )
    .unwrap();
    let log = dir.join("stderr.log");
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_weir"));
    cmd.arg("serve")
        .arg(&file)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    // SAFETY: only async-signal-safe setrlimit between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 128,
                rlim_max: 128,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().unwrap();
    let weir = Weir {
        child,
        addr: format!("127.0.0.1:{port}").parse().unwrap(),
    };
    let deadline = Instant::now() + STEP;
    while TcpStream::connect(weir.addr).await.is_err() {
        assert!(Instant::now() < deadline, "weir serve did not listen");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let storm: Vec<_> = (0..200)
        .map(|_| tokio::spawn(timeout(STEP, upgrade_status(weir.addr))))
        .collect();
    let mut open = Vec::new();
    let mut refused = 0;
    for task in storm {
        let (status, stream) = task
            .await
            .unwrap()
            .expect("an answer within STEP")
            .expect("a status line, not a reset");
        match status {
            101 => open.push(stream),
            503 => refused += 1,
            other => panic!("status {other}"),
        }
    }
    // 128 descriptors, 32 held back: at most 96 connections.
    assert!(open.len() <= 96, "{} upgraded", open.len());
    assert!(open.len() >= 80, "only {} upgraded", open.len());
    assert_eq!(open.len() + refused, 200);
    assert!(metric(weir.addr, "weir_refused_over_limit_total").await >= refused as u64);

    // Close half: new connections are served again.
    open.truncate(open.len() / 2);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, _again) = upgrade_status(weir.addr).await.unwrap();
    assert_eq!(status, 101);

    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains(
            "max_connections = 1000 is more than this process may open (RLIMIT_NOFILE 128)"
        ),
        "{text}"
    );
    let summaries = text.matches("refused").count();
    assert!(
        (1..=3).contains(&summaries),
        "{refused} refusals summarised in {summaries} lines:\n{text}"
    );
    drop(weir);
    let _ = std::fs::remove_dir_all(&dir);
}
