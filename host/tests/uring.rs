//! The planes on io_uring (`[server] io = "uring" | "auto"`,
//! `reactor/plane/uring.rs`): the choice made at start, the fallback to
//! epoll where io_uring is forbidden (a seccomp filter in the gateway's
//! process, as container runtimes install), and the refusal to start when
//! io_uring was demanded. Every other connection-level test runs on the
//! ring too when CI sets `WEIR_TEST_IO=uring`.

mod common;

use common::{await_metric, client, next, STEP};
use futures_util::SinkExt;
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message;

/// `io_uring_setup`'s number on x86_64 and aarch64 alike.
const SYS_IO_URING_SETUP: u32 = 425;

/// Makes `io_uring_setup` fail with EPERM in the calling process and its
/// children, as Docker's default seccomp profile does.
fn forbid_io_uring() -> std::io::Result<()> {
    const RET_ERRNO: u32 = 0x0005_0000;
    const RET_ALLOW: u32 = 0x7fff_0000;
    let filter = [
        // Load the system call's number (seccomp_data.nr, offset 0).
        libc::sock_filter {
            code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
            jt: 0,
            jf: 0,
            k: 0,
        },
        libc::sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
            jt: 0,
            jf: 1,
            k: SYS_IO_URING_SETUP,
        },
        libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: RET_ERRNO | libc::EPERM as u32,
        },
        libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: RET_ALLOW,
        },
    ];
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr().cast_mut(),
    };
    // SAFETY: prctl with a filter that lives through the call; both calls
    // are async-signal-safe (this runs between fork and exec).
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
            || libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &prog) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

struct Served {
    child: Child,
    addr: SocketAddr,
    log: PathBuf,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `weir serve` with `io` on native echo, io_uring forbidden or not, its
/// log in a file.
fn spawn(io: &str, forbidden: bool) -> Served {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = std::env::temp_dir().join(format!("weir-uring-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("routes.toml");
    std::fs::write(
        &file,
        format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\nworkers = 1\nio = \"{io}\"\n\n\
             [[route]]\npath = \"/echo\"\nnative = \"echo\"\n"
        ),
    )
    .unwrap();
    let log = dir.join("log");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_weir"));
    cmd.arg("serve")
        .arg(&file)
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    if forbidden {
        // SAFETY: the closure only calls prctl (see `forbid_io_uring`).
        unsafe { cmd.pre_exec(forbid_io_uring) };
    }
    Served {
        child: cmd.spawn().unwrap(),
        addr: format!("127.0.0.1:{port}").parse().unwrap(),
        log,
    }
}

impl Served {
    /// Waits until it accepts connections; its log then.
    async fn ready(&mut self) -> String {
        let deadline = tokio::time::Instant::now() + STEP;
        while tokio::net::TcpStream::connect(self.addr).await.is_err() {
            assert!(tokio::time::Instant::now() < deadline, "did not listen");
            assert!(self.child.try_wait().unwrap().is_none(), "exited");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        std::fs::read_to_string(&self.log).unwrap()
    }

    /// An echo round trip, on a connection the plane holds.
    async fn echoes_on_the_plane(&self) {
        let mut ws = client(&format!("ws://{}/echo", self.addr)).await;
        for text in ["one", "two", &"x".repeat(100_000)] {
            ws.send(Message::text(text)).await.unwrap();
            assert_eq!(next(&mut ws).await, Message::text(text));
        }
        await_metric(self.addr, "weir_plane_connections", 1).await;
        ws.close(None).await.unwrap();
        await_metric(self.addr, "weir_plane_connections", 0).await;
    }
}

/// The kernel allows io_uring here (else the tests that need it say so
/// and return: CI's machines allow it).
fn ring_allowed() -> bool {
    match weir_reactor::plane::probe_uring() {
        Ok(()) => true,
        Err(e) => {
            eprintln!("skipped: io_uring unavailable on this machine ({e})");
            false
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uring_serves_where_the_kernel_allows_it() {
    if !ring_allowed() {
        return;
    }
    for io in ["uring", "auto"] {
        let mut weir = spawn(io, false);
        let log = weir.ready().await;
        assert!(
            log.contains("planes on io_uring"),
            "io = {io}: the choice is logged: {log}"
        );
        weir.echoes_on_the_plane().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_falls_back_to_epoll_where_io_uring_is_forbidden() {
    let mut weir = spawn("auto", true);
    let log = weir.ready().await;
    assert!(
        log.contains("io_uring unavailable, the workers' planes run on epoll"),
        "the fallback is logged: {log}"
    );
    assert!(!log.contains("planes on io_uring"), "{log}");
    weir.echoes_on_the_plane().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uring_refuses_to_start_where_io_uring_is_forbidden() {
    let mut weir = spawn("uring", true);
    let deadline = std::time::Instant::now() + STEP;
    let status = loop {
        if let Some(status) = weir.child.try_wait().unwrap() {
            break status;
        }
        assert!(std::time::Instant::now() < deadline, "it kept running");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(!status.success());
    let log = std::fs::read_to_string(&weir.log).unwrap();
    assert!(
        log.contains(r#"io = "uring": io_uring cannot be used here"#),
        "the refusal names the setting: {log}"
    );
    assert!(
        tokio::net::TcpStream::connect(weir.addr).await.is_err(),
        "nothing listens"
    );
}

/// Regression: a connection whose first step (taken when the plane adopts
/// it, outside the plane's own task) ends in the server's close — a bad
/// frame sent with the upgrade request itself — lingers for the client's
/// answer and is dropped when the linger runs out. On io_uring nothing
/// woke the waiting plane for that linger (epoll's registration edge did):
/// the connection stayed open until some other event came.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_answered_to_the_upgrades_own_bytes_lingers_and_ends() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut config = weir_config::Config::builtin_default();
    config.server.workers = 1;
    config.server.io = weir_config::Io::Auto;
    let gw = common::Gateway::start_exact(config);
    let mut bytes = b"GET /echo HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\n\
        Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
        Sec-WebSocket-Version: 13\r\n\r\n"
        .to_vec();
    // Opcode 3 is reserved: 1002.
    bytes.extend_from_slice(&common::frame(0x83, b""));
    let mut stream = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    stream.write_all(&bytes).await.unwrap();
    // The 101, the close frame and the server's FIN.
    let mut got = Vec::new();
    tokio::time::timeout(STEP, stream.read_to_end(&mut got))
        .await
        .expect("the close frame and the server's end of writing")
        .unwrap();
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 101"), "{text}");
    let head_end = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let close = &got[head_end..];
    assert_eq!(close[0], 0x88, "a close frame: {close:?}");
    assert_eq!(
        &close[2..4],
        &1002u16.to_be_bytes(),
        "close 1002: {close:?}"
    );
    // The client never answers (its socket stays open): the slot is freed
    // when the linger (2 s) runs out.
    await_metric(gw.addr, "weir_plane_connections", 0).await;
    drop(stream);
    gw.stop();
}
