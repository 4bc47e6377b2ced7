//! The codec's three tables (issue 23, item 7): weir's codec against
//! sockudo-ws, fastwebsockets and tokio-tungstenite, each running the server
//! side over a 1 MiB `tokio::io::duplex` on a current-thread runtime,
//! uncompressed, all facing the same hand-written client
//! (`codec_servers.rs`):
//!
//! 1. round-trip text latency, client send → whole echo received, at 64 B,
//!    512 B, 4 KiB and 64 KiB: p50/p95/p99/p99.9 of 50,000 after 1,000
//!    warm-up;
//! 2. one-way binary burst latency at 512 B: 50,000 messages written back to
//!    back, each stamped with its send time; arrival − send as the server's
//!    receive loop sees it (queueing in the pipe and backpressure included);
//! 3. text throughput at 512 B, messages/s: receives (10,000 pre-encoded
//!    client frames), sends (10,000 into a discarding sink), round trips
//!    (10,000 sequential echoes), each after 1,000 untimed (the pipe's and
//!    the server's buffers grown, pages touched). Client and server share
//!    one thread, so the verdict's rate is per second of that thread's CPU
//!    time: a 10,000-message run lasts milliseconds, and on a shared machine
//!    wall-clock time mostly says whether another process held the core
//!    meanwhile. The wall-clock rates are printed too.
//!
//! Three rounds, the libraries' order rotating each round; every cell is
//! the median of the rounds, shown with its ratio to the best *other*
//! library. Goal for weir: ahead at p50 and p99 in every latency cell and
//! in every throughput cell, p99.9 ≤ 1.1× the best.
//!
//! `cargo bench -p weir-micro --bench codec_tables`; `-- --quick` (or
//! `CODEC_TABLES_QUICK=1`) runs one short round, for a look, as does
//! `cargo test --benches`.

#[path = "../codec_servers.rs"]
mod codec_servers;

use codec_servers::{burst, echo_rate, receive_rate, round_trips, send_rate, Server, SERVERS};

/// Message sizes of the round-trip table.
const ROUND_TRIP_BYTES: [usize; 4] = [64, 512, 4096, 64 * 1024];
/// Message size of the burst and throughput tables.
const SMALL_BYTES: usize = 512;
/// Percentiles of the latency tables.
const PERCENTILES: [(f64, &str); 4] = [
    (0.50, "p50"),
    (0.95, "p95"),
    (0.99, "p99"),
    (0.999, "p99.9"),
];
/// p99.9 may be this much above the best other library.
const P999_SLACK: f64 = 1.1;

struct Plan {
    rounds: usize,
    warm: usize,
    round_trips: usize,
    burst: usize,
    throughput: usize,
}

const FULL: Plan = Plan {
    rounds: 3,
    warm: 1_000,
    round_trips: 50_000,
    burst: 50_000,
    throughput: 10_000,
};

const QUICK: Plan = Plan {
    rounds: 1,
    warm: 100,
    round_trips: 5_000,
    burst: 5_000,
    throughput: 2_000,
};

/// One measurement per server per round: `[server][round][value]`.
type Samples = Vec<Vec<Vec<f64>>>;

fn new_samples() -> Samples {
    vec![Vec::new(); SERVERS.len()]
}

fn percentiles(sorted: &[u64]) -> Vec<f64> {
    PERCENTILES
        .iter()
        .map(|(p, _)| sorted[((p * sorted.len() as f64) as usize).min(sorted.len() - 1)] as f64)
        .collect()
}

/// The median over rounds of each value: `[server][value]`.
fn medians(samples: &Samples) -> Vec<Vec<f64>> {
    samples
        .iter()
        .map(|rounds| {
            (0..rounds[0].len())
                .map(|v| {
                    let mut xs: Vec<f64> = rounds.iter().map(|r| r[v]).collect();
                    xs.sort_by(f64::total_cmp);
                    xs[xs.len() / 2]
                })
                .collect()
        })
        .collect()
}

/// Each cell over the best other server's: lower is better for latency
/// (`min`), higher for throughput (`max`).
fn ratios(cells: &[Vec<f64>], lower_is_better: bool) -> Vec<Vec<f64>> {
    (0..cells.len())
        .map(|s| {
            (0..cells[s].len())
                .map(|v| {
                    let others = (0..cells.len()).filter(|&o| o != s).map(|o| cells[o][v]);
                    let best = if lower_is_better {
                        others.fold(f64::INFINITY, f64::min)
                    } else {
                        others.fold(0.0, f64::max)
                    };
                    cells[s][v] / best
                })
                .collect()
        })
        .collect()
}

/// Weir's verdict on one latency row: p50 and p99 ahead, p99.9 within slack.
fn latency_verdict(what: &str, weir: &[f64], misses: &mut Vec<String>, meets: &mut usize) {
    for (i, (_, name)) in PERCENTILES.iter().enumerate() {
        let (ok, rule) = match *name {
            "p50" | "p99" => (weir[i] < 1.0, "< 1.00"),
            "p99.9" => (weir[i] <= P999_SLACK, "≤ 1.10"),
            _ => continue,
        };
        if ok {
            *meets += 1;
        } else {
            misses.push(format!("{what} {name}: {:.2}× (goal {rule})", weir[i]));
        }
    }
}

fn latency_row(label: &str, server: Server, cells: &[f64], ratio: &[f64]) {
    let cols: Vec<String> = cells
        .iter()
        .zip(ratio)
        .map(|(ns, r)| format!("{:.2} ({r:.2}×)", ns / 1_000.0))
        .collect();
    println!("| {label}{} | {} |", server.name(), cols.join(" | "));
}

fn main() {
    // `cargo bench` passes `--bench`; without it (`cargo test --benches`)
    // the binary is only being checked, so it runs the short plan.
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick")
        || !args.iter().any(|a| a == "--bench")
        || std::env::var("CODEC_TABLES_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
    let plan = if quick { QUICK } else { FULL };
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "codec tables: {} round(s), {} round trips after {} warm-up, burst {}, throughput {}; loadavg {}",
        plan.rounds,
        plan.round_trips,
        plan.warm,
        plan.burst,
        plan.throughput,
        load.trim()
    );

    let mut rt: Vec<Samples> = ROUND_TRIP_BYTES.iter().map(|_| new_samples()).collect();
    let mut bursts = new_samples();
    let mut rates = new_samples();
    for round in 0..plan.rounds {
        // The order rotates each round, so no library always runs first.
        let order: Vec<usize> = (0..SERVERS.len())
            .map(|i| (i + round) % SERVERS.len())
            .collect();
        for (k, &size) in ROUND_TRIP_BYTES.iter().enumerate() {
            for &s in &order {
                let lat = round_trips(SERVERS[s], size, plan.warm, plan.round_trips);
                rt[k][s].push(percentiles(&lat));
            }
        }
        for &s in &order {
            bursts[s].push(percentiles(&burst(SERVERS[s], SMALL_BYTES, plan.burst)));
        }
        for &s in &order {
            let n = plan.throughput;
            let r = [
                receive_rate(SERVERS[s], SMALL_BYTES, plan.warm, n),
                send_rate(SERVERS[s], SMALL_BYTES, plan.warm, n),
                echo_rate(SERVERS[s], SMALL_BYTES, plan.warm, n),
            ];
            // Per CPU-second first (the verdict's), then per wall second.
            let by_cpu = r.iter().map(|r| r.per_cpu_s);
            rates[s].push(by_cpu.chain(r.iter().map(|r| r.per_wall_s)).collect());
        }
        eprintln!("round {} of {} done", round + 1, plan.rounds);
    }

    let weir = SERVERS
        .iter()
        .position(|&s| s == Server::Weir)
        .expect("weir");
    let (mut misses, mut meets) = (Vec::new(), 0);
    let heads: Vec<&str> = PERCENTILES.iter().map(|(_, n)| *n).collect();

    println!(
        "\n1. round-trip text latency, µs (ratio to the best other library), median of {} round(s)",
        plan.rounds
    );
    println!("| size, server | {} µs |", heads.join(" µs | "));
    println!("|---|---|---|---|---|");
    for (k, &size) in ROUND_TRIP_BYTES.iter().enumerate() {
        let cells = medians(&rt[k]);
        let ratio = ratios(&cells, true);
        let label = if size >= 1024 {
            format!("{} KiB, ", size / 1024)
        } else {
            format!("{size} B, ")
        };
        for (s, &server) in SERVERS.iter().enumerate() {
            latency_row(&label, server, &cells[s], &ratio[s]);
        }
        latency_verdict(
            &format!("round trip {}", label.trim_end_matches(", ")),
            &ratio[weir],
            &mut misses,
            &mut meets,
        );
    }

    println!(
        "\n2. one-way binary burst latency at {SMALL_BYTES} B, {} back to back, µs (ratio to the best other library)",
        plan.burst
    );
    println!("| server | {} µs |", heads.join(" µs | "));
    println!("|---|---|---|---|---|");
    let cells = medians(&bursts);
    let ratio = ratios(&cells, true);
    for (s, &server) in SERVERS.iter().enumerate() {
        latency_row("", server, &cells[s], &ratio[s]);
    }
    latency_verdict("burst", &ratio[weir], &mut misses, &mut meets);

    let cells = medians(&rates);
    let ratio = ratios(&cells, false);
    for (clock, cols) in [("CPU", 0..3), ("wall-clock", 3..6)] {
        println!(
            "\n3. text throughput at {SMALL_BYTES} B, {} messages after {} untimed, messages per {clock} second (ratio to the best other library)",
            plan.throughput, plan.warm
        );
        println!("| server | receives | sends | round trips |");
        println!("|---|---|---|---|");
        for (s, &server) in SERVERS.iter().enumerate() {
            let row: Vec<String> = cols
                .clone()
                .map(|v| format!("{:.2}M ({:.2}×)", cells[s][v] / 1e6, ratio[s][v]))
                .collect();
            println!("| {} | {} |", server.name(), row.join(" | "));
        }
    }
    for (i, name) in ["receives", "sends", "round trips"].iter().enumerate() {
        if ratio[weir][i] > 1.0 {
            meets += 1;
        } else {
            misses.push(format!(
                "throughput {name}: {:.2}× (goal > 1.00)",
                ratio[weir][i]
            ));
        }
    }

    println!(
        "\nweir meets {meets} of {} goal cells",
        meets + misses.len()
    );
    for m in &misses {
        println!("missed: {m}");
    }
}
