//! A guest cannot flood the gateway's log (issue 26), tested on the real
//! `weir serve` process with its stderr read (or not read) by the test: the
//! route's budget bounds what reaches the log and counts the rest, native
//! echo keeps answering meanwhile, guest text cannot forge log structure,
//! and a stderr that nobody reads never stalls a worker.

mod common;
mod guest_support;

use common::{client, next, WeirProcess, STEP};
use futures_util::SinkExt;
use std::io::{BufRead, BufReader, Read};
use std::process::{ChildStderr, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::{timeout, Instant};
use tokio_tungstenite::tungstenite::Message;

/// A `weir serve` child with native /echo and the `faulty` fixture on
/// /loud, whose route keys are `loud_keys`; stderr is piped to the test.
async fn start(workers: usize, loud_keys: &str) -> (WeirProcess, ChildStderr) {
    let routes = format!(
        "[[route]]\npath = \"/echo\"\nnative = \"echo\"\n\n\
         [[route]]\npath = \"/loud\"\nguest = \"{}\"\ntimeout = \"2s\"\n{loud_keys}\n",
        guest_support::wasm("faulty").display()
    );
    let mut weir = WeirProcess::start(
        &format!("workers = {workers}"),
        &routes,
        "info",
        Stdio::piped(),
    )
    .await;
    let stderr = weir.child.stderr.take().unwrap();
    (weir, stderr)
}

/// Collects stderr lines on a thread of its own.
fn collect(stderr: ChildStderr) -> Arc<Mutex<Vec<String>>> {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = lines.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            sink.lock().unwrap().push(line);
        }
    });
    lines
}

/// One echo round trip; returns how long it took.
async fn echo_once(ws: &mut common::Ws, i: usize) -> Duration {
    let started = Instant::now();
    ws.send(Message::text(format!("ping {i}"))).await.unwrap();
    assert_eq!(next(ws).await, Message::text(format!("ping {i}")));
    started.elapsed()
}

/// The flood of the issue (2,000 lines of 1 KB per message) on a route with
/// a small budget: what reaches the log stays within burst + rate × time,
/// the rest is counted in /metrics, and native echo answers meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooding_guest_is_held_to_its_log_budget() {
    const BURST: usize = 50;
    const RATE: usize = 100;
    let (weir, stderr) = start(
        2,
        &format!("log_rate = \"{RATE}/s\"\nlog_burst = {BURST}\nlog_bytes = \"1MiB/s\""),
    )
    .await;
    let lines = collect(stderr);
    let started = Instant::now();
    let mut echo = client(&weir.url("/echo")).await;
    let mut loud = client(&weir.url("/loud")).await;
    let kilobyte = "k".repeat(1000);
    let mut slowest = Duration::ZERO;
    for round in 0..5 {
        loud.send(Message::text(format!("print 2000 {kilobyte}")))
            .await
            .unwrap();
        for i in 0..20 {
            slowest = slowest.max(echo_once(&mut echo, round * 20 + i).await);
        }
        assert_eq!(next(&mut loud).await, Message::text("printed"));
    }
    let elapsed = started.elapsed().as_secs_f64();
    // Generous for a loaded 2-core CI machine; the benchmark measures p99.
    assert!(
        slowest < Duration::from_millis(500),
        "echo took {slowest:?} during the flood"
    );
    let body = common::metrics(weir.addr).await;
    let dropped = weir::metrics::read(&body, "weir_guest_log_dropped_lines_total{route=\"/loud\"}")
        .unwrap_or_else(|| panic!("no dropped count in\n{body}"));
    // Let the log writer catch up before counting.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let written = lines
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains("weir::guest") && l.contains("text=\"kkk"))
        .count();
    let bound = BURST + (RATE as f64 * (elapsed + 1.0)) as usize;
    assert!(
        written <= bound,
        "{written} guest lines reached the log; the bound is {bound}"
    );
    assert!(
        written >= BURST,
        "only {written} guest lines reached the log"
    );
    assert_eq!(
        written as u64 + dropped,
        10_000,
        "every line is written or counted"
    );
}

/// Guest text with a newline, an ANSI escape, quotes and a fake `route=`
/// field is one escaped, quoted field of one line, after the host's own
/// route field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guest_text_cannot_forge_log_structure() {
    let (weir, stderr) = start(1, "").await;
    let lines = collect(stderr);
    let mut loud = client(&weir.url("/loud")).await;
    let forged = "hello\nroute=/admin \u{1b}[31mred \"quoted\"";
    loud.send(Message::text(format!("say {forged}")))
        .await
        .unwrap();
    next(&mut loud).await;
    let deadline = Instant::now() + STEP;
    let line = loop {
        let found = lines
            .lock()
            .unwrap()
            .iter()
            .find(|l| l.contains("stream=\"log\""))
            .cloned();
        if let Some(line) = found {
            break line;
        }
        assert!(Instant::now() < deadline, "the guest's log line never came");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        line.contains(r#"route="/loud""#) || line.contains("route=/loud"),
        "{line}"
    );
    assert!(
        line.contains(r#"text="hello\nroute=/admin \u{1b}[31mred \"quoted\"""#),
        "{line}"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    for l in lines.lock().unwrap().iter() {
        assert!(!l.starts_with("route="), "a guest forged a line: {l}");
        assert!(!l.contains('\u{1b}'), "a raw escape reached the log: {l}");
    }
}

/// A stderr pipe that nobody reads fills up; the gateway keeps answering
/// echo on the same (single) worker, counts the lines it could not write,
/// and says so in the log once the pipe is read again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stderr_nobody_reads_never_stalls_a_worker() {
    let (weir, mut stderr) = start(
        1,
        "log_rate = \"1000000/s\"\nlog_burst = 1000000\nlog_bytes = \"1000000KiB/s\"",
    )
    .await;
    let mut echo = client(&weir.url("/echo")).await;
    let mut loud = client(&weir.url("/loud")).await;
    let kilobyte = "k".repeat(1000);
    for round in 0..10 {
        loud.send(Message::text(format!("print 5000 {kilobyte}")))
            .await
            .unwrap();
        timeout(STEP, async {
            assert_eq!(next(&mut loud).await, Message::text("printed"));
            echo_once(&mut echo, round).await
        })
        .await
        .expect("a worker stalled on a full stderr");
    }
    let lost = common::metric(weir.addr, "weir_log_lines_lost_total").await;
    assert!(
        lost > 0,
        "50 MB of log through a full pipe, and nothing lost?"
    );
    // Read the pipe again: the loss is reported.
    let reader = std::thread::spawn(move || {
        let mut seen = String::new();
        let mut chunk = [0u8; 1 << 16];
        let deadline = std::time::Instant::now() + STEP;
        while std::time::Instant::now() < deadline {
            let n = stderr.read(&mut chunk).unwrap_or(0);
            if n == 0 {
                break;
            }
            seen.push_str(&String::from_utf8_lossy(&chunk[..n]));
            if seen.contains("log lines lost") {
                return true;
            }
            // Keep only a tail: the flood itself is megabytes.
            if seen.len() > 1 << 16 {
                seen = seen.split_off(seen.len() - 256);
            }
        }
        false
    });
    // Something must be logged for the pipe to carry the report.
    let reported = tokio::task::spawn_blocking(move || reader.join().unwrap())
        .await
        .unwrap();
    assert!(reported, "the lost lines were never reported");
}
