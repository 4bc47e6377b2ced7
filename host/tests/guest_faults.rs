//! The faulty fixture (examples/fixtures/faulty), one test per behaviour:
//! each fault is reported with its cause, the instance is replaced, and the
//! next batch works. Plus the route limits (memory, deadline, instances).

mod guest_support;

use std::time::{Duration, Instant};

use guest_support::*;
use weir::guest::{Batch, Fault, Runner};

/// The faulty route with a test-sized memory and deadline.
fn faulty(edit: impl FnOnce(&mut weir_config::GuestConfig)) -> Runner {
    Runner::new(program_with("faulty", "/faulty", edit))
}

/// After a fault, the same runner serves the next batch on a fresh instance.
fn assert_recovers(r: &mut Runner) {
    assert_eq!(
        send_text(r, 2, "still here").unwrap(),
        vec![Owned::Text(2, "still here".into())]
    );
}

#[test]
fn trap_is_a_fault_and_the_next_batch_runs_on_a_fresh_instance() {
    let mut r = faulty(|_| {});
    assert_eq!(
        send_text(&mut r, 1, "hello").unwrap(),
        vec![Owned::Text(1, "hello".into())]
    );
    let fault = send_text(&mut r, 1, "trap").unwrap_err();
    assert!(matches!(fault, Fault::Trap(_)), "{fault:?}");
    assert_eq!(fault.close_code(), 1011);
    assert_eq!(r.faults(), 1);
    assert_recovers(&mut r);
    assert_eq!(
        r.program().live_instances(),
        1,
        "the trapped instance gave its slot back"
    );
}

#[test]
fn endless_loop_hits_the_deadline() {
    let timeout = Duration::from_millis(50);
    let mut r = faulty(|c| c.timeout = timeout);
    let start = Instant::now();
    let fault = send_text(&mut r, 1, "loop").unwrap_err();
    let took = start.elapsed();
    assert_eq!(fault, Fault::Deadline(timeout));
    assert!(
        took >= timeout - Duration::from_millis(10),
        "interrupted too early: {took:?}"
    );
    assert!(
        took < Duration::from_secs(2),
        "interrupted too late: {took:?}"
    );
    assert_recovers(&mut r);
}

#[test]
fn growing_past_the_memory_limit_is_a_memory_fault() {
    let mut r = faulty(|c| c.memory = 8 << 20);
    let fault = send_text(&mut r, 1, "grow").unwrap_err();
    assert_eq!(fault, Fault::Memory(8 << 20));
    assert_recovers(&mut r);
}

#[test]
fn flooding_output_is_refused_by_the_output_cap() {
    // Enough memory and time that the guest can build its 80 MiB answer on
    // a loaded machine: the cap, not the memory limit or the deadline, must
    // be what stops it (regression: it failed once with Deadline under load).
    let mut r = faulty(|c| {
        c.memory = 512 << 20;
        c.timeout = std::time::Duration::from_secs(10);
    });
    let fault = send_text(&mut r, 1, "flood").unwrap_err();
    assert!(
        matches!(fault, Fault::OutputTooLarge { bytes, cap } if bytes > cap),
        "{fault:?}"
    );
    assert_recovers(&mut r);
}

#[test]
fn a_fault_fails_the_whole_batch_but_not_the_next() {
    let mut r = faulty(|_| {});
    let mut b = Batch::new();
    b.push_message(1, true, b"before");
    b.push_message(2, true, b"trap");
    b.push_message(3, true, b"after");
    assert!(matches!(r.handle(&mut b), Err(Fault::Trap(_))));
    let closed: Vec<u64> = b.connections().collect();
    assert_eq!(
        closed,
        vec![1, 2, 3],
        "the caller closes every connection of the batch"
    );
    assert_recovers(&mut r);
}

#[test]
fn instances_limit_is_shared_by_runners_of_one_route() {
    let program = program_with("echo", "/echo", |c| c.instances = 1);
    let mut first = Runner::new(program.clone());
    let mut second = Runner::new(program.clone());
    assert!(send_text(&mut first, 1, "a").is_ok());
    let fault = send_text(&mut second, 2, "b").unwrap_err();
    assert_eq!(fault, Fault::Overloaded(1));
    assert_eq!(fault.close_code(), 1013);
    drop(first);
    assert_eq!(
        send_text(&mut second, 2, "b").unwrap(),
        vec![Owned::Text(2, "b".into())]
    );
}

#[test]
fn recycle_after_replaces_the_instance_and_frees_its_slot() {
    let program = program_with("echo", "/echo", |c| {
        c.instances = 1;
        c.recycle_after = 2;
    });
    let mut r = Runner::new(program.clone());
    send_text(&mut r, 1, "a").unwrap();
    assert_eq!(program.live_instances(), 1);
    send_text(&mut r, 1, "b").unwrap();
    assert_eq!(program.live_instances(), 0, "retired after 2 batches");
}

#[test]
fn attachment_over_the_cap_closes_only_that_connection() {
    // counter saves its count (1 byte here); a cap of 0 refuses it. Its
    // neighbour in the batch, under no cap issue, is unaffected.
    let mut r = Runner::new(program_with("counter", "/counter", |c| {
        c.attachment_max = 0
    }));
    let mut b = Batch::new();
    b.push_open(1, "/counter", &[], b"");
    b.push_open(2, "/counter", &[], b"");
    b.push_message(1, true, b"x");
    let out = owned(&r.handle(&mut b).unwrap());
    assert_eq!(
        out,
        vec![
            Owned::Text(1, "1".into()),
            Owned::Close(1, 1011, String::new()),
        ]
    );
    assert_eq!(r.attachment(1), None);
    assert_eq!(r.attachment(2), None);
}

/// Collects what the fmt subscriber writes.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn guest_logs_stdout_and_panics_reach_the_gateway_log_with_the_route() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::TRACE)
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        let mut r = faulty(|_| {});
        assert_eq!(
            send_text(&mut r, 1, "log").unwrap(),
            vec![Owned::Text(1, "log".into())]
        );
        assert!(send_text(&mut r, 1, "trap").is_err());
    });
    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let line = |needle: &str| {
        log.lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no {needle:?} in:\n{log}"))
    };
    assert!(line("faulty: via the log import").contains("route=\"/faulty\""));
    assert!(line("faulty: via stdout").contains("route=\"/faulty\""));
    // The panic: one error line (the SDK's panic hook) with where and
    // what, and no hint about RUST_BACKTRACE, which cannot apply to a guest.
    let panic = line("faulty: asked to trap");
    assert!(
        panic.contains("ERROR") && panic.contains("route=\"/faulty\""),
        "{panic}"
    );
    assert!(
        panic.contains("handler panicked at fixtures/faulty/src/lib.rs:"),
        "{panic}"
    );
    assert_eq!(log.matches("panicked").count(), 1, "{log}");
    assert!(!log.contains("RUST_BACKTRACE"), "{log}");
}
