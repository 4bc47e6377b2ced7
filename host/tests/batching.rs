//! One read, one write: k frames that reach the gateway in one read leave
//! as their k replies in one write (on io_uring: neither a read nor a
//! write of their own, the ring's enters carry both). Observed from
//! outside, with `strace` attached to a `weir serve` child: the syscalls
//! on the connection's own socket descriptor are counted, so the gateway
//! carries no test counter.
//! (scripts/test.sh installs strace when it is missing.)

mod common;

use common::{frame, Raw, WeirProcess, STEP};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Frames sent in one write: replies written one by one would be this
/// many writes.
const K: usize = 32;
const PAYLOAD: usize = 20;

/// The server's descriptor for the connection whose client end is
/// `client_port`: its socket inode from /proc/net/tcp, then the fd of
/// `pid` that links to it.
fn server_fd(pid: u32, server_port: u16, client_port: u16) -> u32 {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let want_local = format!("0100007F:{server_port:04X}");
    let want_remote = format!("0100007F:{client_port:04X}");
    let inode = table
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f[1] == want_local && f[2] == want_remote)
        .map(|f| f[9].to_string())
        .expect("the server's end of the connection in /proc/net/tcp");
    let link = format!("socket:[{inode}]");
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| e.ok())
        .find(|e| std::fs::read_link(e.path()).is_ok_and(|t| t.to_string_lossy() == link))
        .and_then(|e| e.file_name().to_str()?.parse().ok())
        .expect("the connection's descriptor in /proc/PID/fd")
}

/// Whether every thread of `pid` is traced.
fn all_traced(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.filter_map(|t| t.ok()).all(|t| {
        std::fs::read_to_string(t.path().join("status")).is_ok_and(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("TracerPid:"))
                .is_some_and(|v| v.trim() != "0")
        })
    })
}

/// (syscall, result) of each completed call on descriptor `fd` in an
/// strace log (`-f`: every line starts with the thread id; a call another
/// thread interrupted is split into `<unfinished ...>` and `resumed>`).
fn calls_on(log: &str, fd: u32) -> Vec<(String, i64)> {
    let open = format!("({fd},");
    let mut pending: std::collections::HashMap<&str, String> = Default::default();
    let mut whole = Vec::new();
    for line in log.lines() {
        let (tid, call) = line.split_once(' ').unwrap_or(("", line));
        let call = call.trim_start();
        if let Some(start) = call.strip_suffix("<unfinished ...>") {
            pending.insert(tid, start.to_string());
        } else if let Some((_, rest)) = call.split_once("resumed>") {
            if let Some(start) = pending.remove(tid) {
                whole.push(start + rest);
            }
        } else {
            whole.push(call.to_string());
        }
    }
    whole
        .iter()
        .filter_map(|call| {
            let (name, args) = call.split_once('(')?;
            if !format!("({args}").starts_with(&open) {
                return None;
            }
            let result = call.rsplit_once(" = ")?.1.split_whitespace().next()?;
            Some((name.to_string(), result.parse().ok()?))
        })
        .collect()
}

/// Entries the traced `io_uring_enter`s submitted (their second argument),
/// summed over the log.
fn submitted(log: &str) -> u64 {
    log.lines()
        .filter_map(|l| l.split_once("io_uring_enter(")?.1.split(", ").nth(1))
        .filter_map(|n| n.parse::<u64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_frames_read_together_are_answered_in_one_write() {
    let weir = WeirProcess::start(
        "workers = 1",
        "[[route]]\npath = \"/echo\"\nnative = \"echo\"\n",
        "warn",
        Stdio::null(),
    )
    .await;
    let pid = weir.child.id();
    let mut raw = Raw::connect(weir.addr, "/echo").await;
    let client_port = raw.stream.local_addr().unwrap().port();
    let fd = server_fd(pid, weir.addr.port(), client_port);

    let log_path =
        std::env::temp_dir().join(format!("weir-batching-{}.strace", std::process::id()));
    let mut strace = Command::new("strace")
        .args(["-f", "-qq", "-e", "signal=none", "-e"])
        .arg("trace=read,recvfrom,recvmsg,readv,write,writev,sendto,sendmsg,io_uring_enter")
        .arg("-o")
        .arg(&log_path)
        .arg("-p")
        .arg(pid.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("strace (scripts/test.sh installs it)");
    let deadline = Instant::now() + STEP;
    while !all_traced(pid) {
        if let Some(status) = strace.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(strace.stderr.as_mut().unwrap(), &mut err).unwrap();
            panic!("strace could not attach ({status}): {err}");
        }
        assert!(Instant::now() < deadline, "strace did not attach");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // K masked frames in one send: they arrive together.
    let payloads: Vec<Vec<u8>> = (0..K)
        .map(|i| (0..PAYLOAD).map(|j| (i * 7 + j) as u8).collect())
        .collect();
    let batch: Vec<u8> = payloads.iter().flat_map(|p| frame(0x82, p)).collect();
    raw.send(&batch).await;
    for want in &payloads {
        let (first, got) = raw.next_frame().await.expect("echo reply");
        assert_eq!(first, 0x82);
        assert_eq!(&got, want, "replies in order, byte-exact");
    }

    // On io_uring the kernel lands the bytes in the plane's buffer ring
    // and sends the replies from the ring: no read or write on the
    // descriptor at all.
    let on_ring = match common::test_io() {
        Some(weir_config::Io::Uring) => true,
        Some(weir_config::Io::Auto) => weir_reactor::plane::probe_uring().is_ok(),
        _ => false,
    };
    // The client can hold the replies before strace has logged the write
    // (or enter) that sent them (it logs at the syscall's exit): wait for
    // it in the log, and a little longer for any after it.
    let is_write = |n: &str| n.starts_with("wr") || n.starts_with("send");
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        if on_ring && submitted(&log) >= 2 {
            break;
        }
        if calls_on(&log, fd).iter().any(|(n, _)| is_write(n)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;

    // SIGTERM: strace detaches and flushes its log.
    // SAFETY: kill(2) on the strace child this test started.
    unsafe { libc::kill(strace.id() as i32, libc::SIGTERM) };
    let _ = tokio::time::timeout(STEP, async {
        while strace.try_wait().unwrap().is_none() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let _ = strace.kill();
    let _ = strace.wait();
    let log = std::fs::read_to_string(&log_path).unwrap();
    let _ = std::fs::remove_file(&log_path);

    let calls = calls_on(&log, fd);
    let reads: Vec<i64> = calls
        .iter()
        .filter(|(n, r)| n.starts_with("re") && *r > 0)
        .map(|(_, r)| *r)
        .collect();
    let writes: Vec<i64> = calls
        .iter()
        .filter(|(n, _)| is_write(n))
        .map(|(_, r)| *r)
        .collect();
    if on_ring {
        assert!(reads.is_empty(), "no read on the ring: {calls:?}");
        assert!(writes.is_empty(), "no write on the ring: {calls:?}");
        // At least the `recv` that took the frames and the `send` that
        // answered them.
        let n = submitted(&log);
        assert!(
            n >= 2,
            "the ring's enters carried the exchange ({n} entries)"
        );
    } else {
        assert_eq!(
            reads,
            vec![batch.len() as i64],
            "the {K} frames were read in one read: {calls:?}"
        );
        assert_eq!(
            writes,
            vec![(K * (PAYLOAD + 2)) as i64],
            "their {K} replies left in one write: {calls:?}"
        );
    }
    drop(weir);
}
