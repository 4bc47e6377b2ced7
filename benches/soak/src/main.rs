//! `weir-soak --addr 127.0.0.1:9311 --pid PID --duration 30m`: the command
//! line over the `weir_soak` library. Exit code 1 on any mismatch, failure
//! or fd not back to rest; 2 on a usage error.

use clap::Parser;
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;
use weir_load::units::parse_duration;
use weir_soak::{report, Options};

#[derive(Parser, Debug)]
#[command(
    name = "weir-soak",
    about = "Soak test: a mixed, verified WebSocket workload in reconnecting cycles, watching the server's RSS and fds"
)]
struct Args {
    /// Gateway address (routes /echo and /relay native, /plain and /json guests).
    #[arg(long, default_value = "127.0.0.1:9311")]
    addr: String,
    /// The gateway's process id (its RSS and open fds are sampled).
    #[arg(long)]
    pid: u32,
    /// Total run time.
    #[arg(long, default_value = "30m", value_parser = parse_duration)]
    duration: Duration,
    /// Length of one cycle (open, load, close, settle).
    #[arg(long, default_value = "20s", value_parser = parse_duration)]
    cycle: Duration,
    /// How long the server's fds may take to return to rest after a cycle.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    settle: Duration,
    /// Leave out the guest routes (/plain, /json): for a gateway without them.
    #[arg(long)]
    no_guest: bool,
    /// Seed for the handshake keys.
    #[arg(long, default_value_t = 0x50a4)]
    seed: u64,
}

fn main() -> ExitCode {
    let a = Args::parse();
    if std::fs::metadata(format!("/proc/{}/fd", a.pid)).is_err() {
        eprintln!("weir-soak: cannot read /proc/{}/fd", a.pid);
        return ExitCode::from(2);
    }
    weir_load::sys::raise_nofile();
    let opts = Options {
        addr: a.addr,
        pid: a.pid,
        duration: a.duration,
        cycle: a.cycle,
        settle: a.settle,
        guest: !a.no_guest,
        seed: a.seed,
    };
    // The start in Unix seconds: cycle times are relative to it, so a
    // problem can be matched with the gateway's log.
    let start_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    println!(
        "weir-soak: {} pid {} for {:?}, cycles of {:?}, guest routes {}, started at Unix time {start_unix:.1}",
        opts.addr,
        opts.pid,
        opts.duration,
        opts.cycle,
        if opts.guest { "on" } else { "off" }
    );
    let summary = weir_soak::run(&opts, |n, at, c| {
        println!("{}", report::cycle_line(n, at, c));
        for e in &c.errors {
            println!("  cycle {n}: {e}");
        }
        std::io::stdout().flush().ok();
    });
    print!("{}", summary.human());
    println!("{}", summary.json());
    if summary.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
