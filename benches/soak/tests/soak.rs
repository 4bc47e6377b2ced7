//! Runs the soak for three short cycles against a gateway started in this
//! process (the built-in routes: native /echo and /relay, no guest), and
//! requires every reply verified, every session closed with a handshake and
//! the process's fds back at rest after each cycle. The only test in this
//! binary: the fd count is the whole process's, so nothing else may run
//! beside it.

use std::time::Duration;
use weir::config::Config;
use weir::server::Server;
use weir_soak::{run, Options};

#[test]
fn three_cycles_against_the_builtin_routes() {
    let mut config = Config::builtin_default();
    config.server.listen = "127.0.0.1:0".parse().unwrap();
    config.server.workers = 2;
    let server = Server::bind(config).expect("bind");
    let addr = server.local_addr();
    let (stop, rx) = tokio::sync::watch::channel(false);
    let gateway = std::thread::spawn(move || server.run(rx).expect("serve"));
    // Let the workers start their runtimes, so their fds count as resting.
    std::thread::sleep(Duration::from_millis(300));

    let opts = Options {
        addr: addr.to_string(),
        pid: std::process::id(),
        duration: Duration::from_secs(6),
        cycle: Duration::from_secs(2),
        settle: Duration::from_secs(5),
        guest: false,
        seed: 7,
    };
    let mut lines = Vec::new();
    let summary = run(&opts, |n, at, c| {
        lines.push(weir_soak::report::cycle_line(n, at, c));
        lines.extend(c.errors.iter().cloned());
    });
    let report = format!(
        "{}\n{}{}",
        lines.join("\n"),
        summary.human(),
        summary.json()
    );
    println!("{report}");

    assert_eq!(summary.cycles.len(), 3, "{report}");
    // echo-64 (8) + echo-1k (4) + echo-large (4) + relay (4 pairs).
    assert_eq!(summary.sessions(), 3 * 24, "{report}");
    assert_eq!(summary.mismatches(), 0, "{report}");
    assert_eq!(summary.failures(), 0, "{report}");
    assert!(summary.fds_back_to_rest(), "{report}");
    assert!(
        summary.fds_load_max() >= summary.fds_rest_first() + 24,
        "{report}"
    );
    for (_, c) in &summary.cycles {
        assert!(c.round_trips > 0, "{report}");
        // Scraped from the gateway's /metrics (glibc's figures).
        assert!(c.rest_heap_kib.is_some_and(|h| h > 0), "{report}");
    }
    assert!(summary.ok(), "{report}");

    stop.send(true).unwrap();
    gateway.join().unwrap();
}
