//! `weir-load`: a WebSocket load generator that verifies every reply byte
//! for byte. A fast wrong answer is a failure, not a result: mismatches are
//! counted, printed, and make the exit code non-zero. The modules are in the
//! library (`src/lib.rs`); this is the command line.

use clap::{Parser, ValueEnum};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use weir_load::conn::{self, Conn, Target};
use weir_load::engine::{self, Control, Load, ThreadResult, DONE, MEASURE};
use weir_load::payload::{Expect, Source, Template};
use weir_load::stream::{self as tls, Trust};
use weir_load::units::{parse_duration, parse_size};
use weir_load::{api, connect, failover, heartbeat, idle, over_h2, pusher, rooms, storm, sys, ws};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// C connections × P in flight, payload S, replies must equal requests.
    Echo,
    /// C pairs through a relay route, one message in flight per pair.
    Relay,
    /// Handshake + close handshake, as fast as C workers can.
    Connect,
    /// {"number": n} → {"number": n+1 (odd) / n+2 (even)}.
    Json,
    /// Int32 LE n → n+1 (odd) / n+2 (even).
    Binary,
    /// One publisher, C subscribers on one room; every subscriber gets every message, in order.
    Fanout,
    /// Open C connections and report the server's RSS growth per connection.
    Idle,
    /// C idle connections answer the server's pings for --duration:
    /// the server's CPU per ping and pong.
    Heartbeat,
    /// C clients connect at once (from --sources addresses) and upgrade;
    /// every one must get its 101: the server's CPU per upgrade.
    Storm,
    /// Chat rooms: C connections in rooms of --room-size on `{room}` in
    /// the URL's path (a pubsub topic each); every member publishes -p
    /// messages per round and receives the others'. Server CPU per delivery.
    Rooms,
    /// Echo of JSON-like text with permessage-deflate: C connections × P
    /// per round, -s bytes per message; bytes on the wire each way.
    Deflate,
    /// Fan-out with permessage-deflate: one plain publisher, C compressing
    /// subscribers on one topic (--url, e.g. /zpub/bench), P per round.
    DeflateFanout,
    /// Fan-out published through the server API: C subscribers on --url (a
    /// `realtime = true` pubsub route, e.g. /rt/bench) and one HTTP client
    /// POSTing /api/publish to --api for --channel, -p messages ahead of
    /// the slowest subscriber. Every subscriber gets every message, in order.
    ApiFanout,
    /// Pusher: C subscribers of one channel (--channel) on a Pusher server
    /// (--url ws://host:port), events triggered through its signed HTTP API
    /// -p ahead of the slowest subscriber; server CPU per delivered event.
    PusherFanout,
    /// Pusher: C members of a presence channel each send client events to
    /// the others, -p ahead; server CPU per client event and per delivery.
    PusherClientEvents,
    /// Pusher: C idle connections subscribed to channels of --room-size;
    /// server RSS growth per connection.
    PusherIdle,
    /// Pusher: C connected clients subscribe to one presence channel at
    /// once; time and server CPU until every one knows every member.
    PusherStorm,
    /// C idle connections to --url (node A); each one A closes reconnects
    /// at once to --failover-url (node B). The peak reconnects per second
    /// B answers (a drain of A, driven from outside: `FAILOVER_READY`).
    Failover,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Echo => "echo",
            Mode::Relay => "relay",
            Mode::Connect => "connect",
            Mode::Json => "json",
            Mode::Binary => "binary",
            Mode::Fanout => "fanout",
            Mode::Idle => "idle",
            Mode::Heartbeat => "heartbeat",
            Mode::Storm => "storm",
            Mode::Rooms => "rooms",
            Mode::Deflate => "deflate",
            Mode::DeflateFanout => "deflate-fanout",
            Mode::ApiFanout => "api-fanout",
            Mode::PusherFanout => "pusher-fanout",
            Mode::PusherClientEvents => "pusher-client-events",
            Mode::PusherIdle => "pusher-idle",
            Mode::PusherStorm => "pusher-storm",
            Mode::Failover => "failover",
        }
    }

    fn default_path(self) -> &'static str {
        match self {
            Mode::Relay => "/relay",
            Mode::Json => "/json",
            Mode::Binary => "/binary",
            Mode::Fanout => "/chat/bench",
            Mode::ApiFanout => "/rt/bench",
            _ => "/echo",
        }
    }
}

#[derive(Parser, Debug)]
#[command(
    name = "weir-load",
    about = "WebSocket load generator that verifies every reply"
)]
struct Args {
    mode: Mode,
    /// Server URL, ws:// or wss://; the default path depends on the mode (/echo, /relay, /json, /binary, /chat/bench).
    #[arg(long)]
    url: Option<String>,
    /// wss://: trust the certificate(s) in this PEM file (a CA, or the server's self-signed certificate).
    #[arg(long, value_name = "FILE")]
    ca: Option<String>,
    /// wss://: accept any server certificate (loopback benchmarks with a throwaway certificate).
    #[arg(long, conflicts_with = "ca")]
    insecure: bool,
    /// wss://: offer only these TLS 1.3 suites, in this order (aes128,
    /// aes256, chacha20), so every server compared uses the same cipher.
    #[arg(long, value_delimiter = ',')]
    tls_suites: Vec<String>,
    /// WebSockets over HTTP/2 (RFC 8441 extended CONNECT): h2c with prior
    /// knowledge for ws://, ALPN h2 for wss://. echo, json and binary only.
    #[arg(long)]
    h2: bool,
    /// --h2: WebSocket streams per TCP connection (-c counts streams).
    #[arg(long, default_value_t = 1)]
    streams: usize,
    /// Connections (echo, json, binary, connect workers, idle), pairs (relay), subscribers (fanout).
    #[arg(short = 'c', long, default_value_t = 50)]
    connections: usize,
    /// Messages in flight per connection (echo, json/binary --async), publisher window (fanout).
    #[arg(short = 'p', long)]
    pipeline: Option<usize>,
    /// Payload size: 64, 4KiB, 1MiB ...
    #[arg(short = 's', long, default_value = "64", value_parser = parse_size)]
    size: usize,
    /// Send text frames (payload is printable ASCII).
    #[arg(long, conflicts_with = "binary")]
    text: bool,
    /// Send binary frames (the default).
    #[arg(long)]
    binary: bool,
    /// json/binary: one request in flight per connection.
    #[arg(long = "sync", conflicts_with = "pipelined")]
    sync: bool,
    /// json/binary: keep -p requests in flight per connection (default 32).
    #[arg(long = "async")]
    pipelined: bool,
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    warmup: Duration,
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    duration: Duration,
    /// Worker threads of the generator.
    #[arg(short = 'T', long, default_value_t = 1)]
    threads: usize,
    /// Pin the generator to these CPUs (e.g. 1 or 2-3).
    #[arg(long)]
    pin: Option<String>,
    /// fanout: the subscribers connect here (another node of a cluster);
    /// the publisher connects to --url.
    #[arg(long)]
    sub_url: Option<String>,
    /// fanout, api-fanout: publish at most this many messages per second
    /// (latency or CPU at a given load rather than at saturation).
    #[arg(long)]
    rate: Option<u64>,
    /// deflate: offer no context takeover either way ("none") or the
    /// default ("takeover"; the server may still refuse it).
    #[arg(long, default_value = "takeover")]
    context: String,
    /// Report this process's CPU time per message (and RSS in idle mode);
    /// fanout and api-fanout take a comma list (two nodes, Redis) and report
    /// the sum, and each one in `cpu_ns_per_msg_by_pid`.
    #[arg(long, value_delimiter = ',')]
    server_pid: Vec<u32>,
    /// fanout: send each message as one JSON string (`"` + hex sequence +
    /// pattern + `"`, text), the bytes api-fanout publishes as `data`.
    #[arg(long)]
    json_string: bool,
    /// api-fanout: the `[api]` listener, host:port (or http://host:port).
    #[arg(long)]
    api: Option<String>,
    /// api-fanout: the API key (default: $WEIR_API_KEY).
    #[arg(long)]
    api_key: Option<String>,
    /// api-fanout: the channel to publish to (the topic --url subscribes to).
    #[arg(long, default_value = "bench")]
    channel: String,
    /// api-fanout: messages per call; above 1 each call is a `/api/batch`
    /// of that many publishes (must not exceed -p, the window).
    #[arg(long, default_value_t = 1)]
    batch: u64,
    /// idle: open the connections only, without one message exchanged on
    /// each before measuring.
    #[arg(long)]
    no_exchange: bool,
    /// idle, rooms: connections per `{room}` of the URL's path.
    #[arg(long, default_value_t = 10)]
    room_size: usize,
    /// idle, heartbeat, storm: connect from this many loopback addresses (127.0.0.1, .2, …).
    #[arg(long, default_value_t = 1)]
    sources: usize,
    /// failover: where a connection node A closed reconnects (node B).
    #[arg(long)]
    failover_url: Option<String>,
    /// pusher-*: the app's id (named in the HTTP API's paths).
    #[arg(long, default_value = "bench")]
    app_id: String,
    /// pusher-*: the app's key (named in the connection URL); the app's
    /// secret is read from $PUSHER_APP_SECRET.
    #[arg(long, default_value = "bench-key")]
    app_key: String,
}

/// CPU clocks and wall time over the measured window.
struct Window {
    secs: f64,
    /// The sum over every `--server-pid`, when all of them could be read.
    server_cpu_ns: Option<u64>,
    /// Each `--server-pid`'s own, in the order given.
    by_pid_ns: Vec<Option<u64>>,
    client_cpu_ns: u64,
}

/// Sleeps through warm-up, flips to MEASURE, sleeps through the window, flips to DONE.
fn measure(ctl: &Control, warmup: Duration, duration: Duration, pids: &[u32]) -> Window {
    std::thread::sleep(warmup);
    let s0: Vec<_> = pids.iter().map(|&p| sys::proc_cpu_ns(p).ok()).collect();
    let c0 = sys::self_cpu_ns();
    let t0 = Instant::now();
    ctl.set(MEASURE);
    std::thread::sleep(duration);
    ctl.set(DONE);
    let secs = t0.elapsed().as_secs_f64();
    let c1 = sys::self_cpu_ns();
    let by_pid_ns: Vec<Option<u64>> = pids
        .iter()
        .zip(s0)
        .map(|(&p, a)| Some(sys::proc_cpu_ns(p).ok()?.saturating_sub(a?)))
        .collect();
    let server_cpu_ns = if pids.is_empty() {
        None
    } else {
        by_pid_ns.iter().copied().sum()
    };
    Window {
        secs,
        server_cpu_ns,
        by_pid_ns,
        client_cpu_ns: c1.saturating_sub(c0),
    }
}

fn json_num(v: Option<f64>) -> String {
    match v {
        Some(x) if x.is_finite() => format!("{x:.1}"),
        _ => "null".into(),
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("weir-load: {e}");
            ExitCode::from(2)
        }
    }
}

fn pusher_scenario(mode: Mode) -> Option<pusher::Scenario> {
    match mode {
        Mode::PusherFanout => Some(pusher::Scenario::Fanout),
        Mode::PusherClientEvents => Some(pusher::Scenario::ClientEvents),
        Mode::PusherIdle => Some(pusher::Scenario::Idle),
        Mode::PusherStorm => Some(pusher::Scenario::Storm),
        _ => None,
    }
}

/// The pusher-* modes: their own client (`weir_load::pusher`), one RESULT line.
fn run_pusher(a: &Args, scenario: pusher::Scenario) -> Result<bool, String> {
    let url = a
        .url
        .as_deref()
        .ok_or("pusher modes need --url ws://HOST:PORT (the server's listener)")?;
    let target = Target::parse(url)?;
    if target.secure {
        return Err("pusher modes speak ws:// only".into());
    }
    let presence = matches!(
        scenario,
        pusher::Scenario::ClientEvents | pusher::Scenario::Storm
    );
    if presence != a.channel.starts_with("presence-") {
        return Err(format!(
            "--channel {:?}: {} needs a {}channel",
            a.channel,
            a.mode.name(),
            if presence {
                "presence-"
            } else {
                "public (not presence-) "
            }
        ));
    }
    let secret = std::env::var("PUSHER_APP_SECRET")
        .map_err(|_| "set PUSHER_APP_SECRET to the app's secret")?;
    let opts = pusher::Options {
        addr: target.resolve()?,
        app_id: a.app_id.clone(),
        key: a.app_key.clone(),
        secret,
        connections: a.connections.max(1),
        window: a.pipeline.unwrap_or(16) as u64,
        size: a.size,
        rate: a.rate,
        warmup: a.warmup,
        duration: a.duration,
        server_pids: a.server_pid.clone(),
        room_size: a.room_size,
        channel: a.channel.clone(),
    };
    let report = pusher::run(scenario, opts)?;
    let ok = report["ok"].as_bool().unwrap_or(false);
    println!("RESULT {report}");
    Ok(ok)
}

/// Returns Ok(false) when the run found wrong answers or failed connections.
fn run(a: &Args) -> Result<bool, String> {
    sys::raise_nofile();
    if let Some(list) = &a.pin {
        sys::pin(&sys::parse_cpu_list(list)?).map_err(|e| format!("sched_setaffinity: {e}"))?;
    }
    if let Some(scenario) = pusher_scenario(a.mode) {
        return run_pusher(a, scenario);
    }
    let url = a
        .url
        .clone()
        .unwrap_or_else(|| format!("ws://127.0.0.1:9001{}", a.mode.default_path()));
    let mut target = Target::parse(&url)?;
    if target.secure {
        let trust = match (&a.ca, a.insecure) {
            (Some(file), _) => Trust::CaFile(file.clone()),
            (None, true) => Trust::Insecure,
            (None, false) => return Err("wss:// needs --ca FILE or --insecure".into()),
        };
        let alpn: &[&[u8]] = if a.h2 { &[b"h2"] } else { &[b"http/1.1"] };
        target.tls = Some(tls::client_config(&trust, alpn, &a.tls_suites)?);
    } else if a.ca.is_some() || a.insecure {
        return Err("--ca and --insecure are for wss:// URLs".into());
    }
    if a.h2 && !matches!(a.mode, Mode::Echo | Mode::Json | Mode::Binary) {
        return Err("--h2 supports the echo, json and binary modes".into());
    }
    let text = a.text || a.json_string || a.mode == Mode::ApiFanout;
    let threads = a.threads.max(1);
    let c = a.connections.max(1);
    // 'static: HTTP/2 streams are tasks that outlive any borrow.
    let ctl: &'static Control = Box::leak(Box::default());
    let mut rng = ws::Rng::new(0x5eed ^ std::process::id() as u64);

    if a.mode == Mode::Idle {
        let hold = a.warmup;
        let opts = idle::IdleOptions {
            exchange: !a.no_exchange,
            room_size: a.room_size,
            sources: a.sources,
        };
        let r = idle::run(&target, c, hold, a.server_pid.first().copied(), &opts);
        let per_conn = match (r.rss_before_kib, r.rss_after_kib) {
            (Some(b), Some(f)) if r.opened > 0 => {
                Some((f as f64 - b as f64) * 1024.0 / r.opened as f64)
            }
            _ => None,
        };
        println!(
            "idle: opened {} of {c} connections to {url}, {} answered a ping",
            r.opened, r.pongs
        );
        if let (Some(b), Some(f)) = (r.rss_before_kib, r.rss_after_kib) {
            println!(
                "server RSS {b} KiB → {f} KiB: {:.0} bytes per connection",
                per_conn.unwrap_or(0.0)
            );
        }
        for e in &r.errors {
            println!("  error: {e}");
        }
        let ok = r.opened == c && r.pongs == c;
        println!(
            "RESULT {{\"mode\":\"idle\",\"connections\":{},\"pongs\":{},\"rss_before_kib\":{},\"rss_after_kib\":{},\"bytes_per_conn\":{},\"ok\":{ok}}}",
            r.opened,
            r.pongs,
            json_num(r.rss_before_kib.map(|v| v as f64)),
            json_num(r.rss_after_kib.map(|v| v as f64)),
            json_num(per_conn),
        );
        return Ok(ok);
    }

    if a.mode == Mode::Failover {
        let b = a
            .failover_url
            .as_deref()
            .ok_or("failover needs --failover-url ws://HOST:PORT/PATH (node B)")?;
        let b = Target::parse(b)?;
        let r = failover::run(&target, &b, c, a.sources, threads, a.duration);
        let codes: Vec<String> = r
            .codes
            .iter()
            .map(|(c, n)| format!("\"{c}\":{n}"))
            .collect();
        println!(
            "failover: {} opened, {} closed by A (codes {:?}) over {:?}, {} reconnected to B over {:?}; \
             peak {} reconnects in 100 ms ({}/s), {} in 1 s",
            r.opened, r.closed, r.codes, r.closes_span, r.reconnected, r.reconnects_span,
            r.peak_100ms, r.peak_100ms * 10, r.peak_1s
        );
        for e in &r.errors {
            println!("  error: {e}");
        }
        let ok = r.opened == c && r.closed == c && r.reconnected == c;
        println!(
            "RESULT {{\"mode\":\"failover\",\"connections\":{},\"closed\":{},\"reconnected\":{},\"close_codes\":{{{}}},\"closes_span_ms\":{},\"reconnects_span_ms\":{},\"peak_per_100ms\":{},\"peak_per_s_100ms\":{},\"peak_per_1s\":{},\"ok\":{ok}}}",
            r.opened,
            r.closed,
            r.reconnected,
            codes.join(","),
            r.closes_span.as_millis(),
            r.reconnects_span.as_millis(),
            r.peak_100ms,
            r.peak_100ms * 10,
            r.peak_1s,
        );
        return Ok(ok);
    }

    if a.mode == Mode::Heartbeat {
        let opts = idle::IdleOptions {
            exchange: !a.no_exchange,
            room_size: a.room_size,
            sources: a.sources,
        };
        let r = heartbeat::run(
            &target,
            c,
            a.warmup,
            a.duration,
            a.server_pid.first().copied(),
            &opts,
        );
        let secs = r.window.as_secs_f64();
        let per_ping = |ns: u64| (r.pings > 0).then(|| ns as f64 / r.pings as f64);
        println!(
            "heartbeat: {} of {c} connections to {url}, {} pings answered in {secs:.1} s, {} connections pinged",
            r.opened, r.pings, r.pinged
        );
        for e in &r.errors {
            println!("  error: {e}");
        }
        let ok = r.opened == c && r.pinged == r.opened && r.errors.is_empty();
        println!(
            "RESULT {{\"mode\":\"heartbeat\",\"url\":\"{url}\",\"connections\":{},\"secs\":{secs:.3},\"msgs\":{},\"msgs_per_s\":{},\"pinged\":{},\"p50_us\":null,\"p99_us\":null,\"server_cpu_ns_per_msg\":{},\"client_cpu_ns_per_msg\":{},\"ok\":{ok}}}",
            r.opened,
            r.pings,
            json_num(Some(r.pings as f64 / secs)),
            r.pinged,
            json_num(r.server_cpu_ns.and_then(per_ping)),
            json_num(per_ping(r.client_cpu_ns)),
        );
        return Ok(ok);
    }

    if a.mode == Mode::Rooms {
        let opts = rooms::RoomsOptions {
            room_size: a.room_size,
            window: a.pipeline.unwrap_or(4),
            size: a.size,
            sources: a.sources,
        };
        let r = rooms::run(
            &target,
            c,
            &opts,
            a.warmup,
            a.duration,
            a.server_pid.first().copied(),
        );
        let secs = r.window.as_secs_f64();
        let per = |ns: u64| (r.deliveries > 0).then(|| ns as f64 / r.deliveries as f64);
        let us = |q: f64| r.latency.quantile(q) as f64 / 1000.0;
        println!(
            "rooms {url}: {} of {c} connections in rooms of {}, {} per member per round, {} B; {} deliveries in {secs:.2} s",
            r.opened, opts.room_size, opts.window, opts.size, r.deliveries
        );
        println!(
            "latency p50 {:.1} us, p99 {:.1} us, p99.9 {:.1} us",
            us(0.5),
            us(0.99),
            us(0.999)
        );
        for e in &r.errors {
            println!("  error: {e}");
        }
        let ok = r.errors.is_empty() && r.deliveries > 0;
        println!(
            "RESULT {{\"mode\":\"rooms\",\"url\":\"{url}\",\"connections\":{},\"secs\":{secs:.3},\"msgs\":{},\"msgs_per_s\":{},\"p50_us\":{},\"p99_us\":{},\"server_cpu_ns_per_msg\":{},\"client_cpu_ns_per_msg\":{},\"ok\":{ok}}}",
            r.opened,
            r.deliveries,
            json_num((secs > 0.0).then(|| r.deliveries as f64 / secs)),
            json_num(Some(us(0.5))),
            json_num(Some(us(0.99))),
            json_num(r.server_cpu_ns.and_then(per)),
            json_num(per(r.client_cpu_ns)),
        );
        return Ok(ok);
    }

    if a.mode == Mode::Storm {
        let r = storm::run(&target, c, a.sources, a.server_pid.first().copied())?;
        let secs = r.window.as_secs_f64();
        let per_upgrade = |ns: u64| (r.upgraded > 0).then(|| ns as f64 / r.upgraded as f64);
        let ms = |q: f64| r.latency.quantile(q) as f64 / 1e6;
        println!(
            "storm {url}: {} of {c} clients upgraded in {secs:.2} s from {} source address(es); refused {}, reset {}, rejected {}, no response {}",
            r.upgraded,
            a.sources.max(1),
            r.refused,
            r.reset,
            r.rejected,
            r.timed_out
        );
        println!(
            "upgrade latency (connect to 101) p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            ms(0.5),
            ms(0.99),
            ms(1.0)
        );
        if let Some(s) = r.server_cpu_ns.and_then(per_upgrade) {
            println!("server CPU {:.1} us per upgrade", s / 1000.0);
        }
        for e in &r.errors {
            println!("  error: {e}");
        }
        let ok = r.upgraded == c;
        println!(
            "RESULT {{\"mode\":\"storm\",\"url\":\"{url}\",\"connections\":{c},\"secs\":{secs:.3},\"msgs\":{},\"msgs_per_s\":{},\"refused\":{},\"reset\":{},\"rejected\":{},\"timed_out\":{},\"p50_us\":{},\"p99_us\":{},\"server_cpu_ns_per_msg\":{},\"client_cpu_ns_per_msg\":{},\"ok\":{ok}}}",
            r.upgraded,
            json_num(Some(r.upgraded as f64 / secs)),
            r.refused,
            r.reset,
            r.rejected,
            r.timed_out,
            json_num(Some(ms(0.5) * 1000.0)),
            json_num(Some(ms(0.99) * 1000.0)),
            json_num(r.server_cpu_ns.and_then(per_upgrade)),
            json_num(per_upgrade(r.client_cpu_ns)),
        );
        return Ok(ok);
    }

    if matches!(a.mode, Mode::Deflate | Mode::DeflateFanout) {
        return run_deflate(a, &target, &url, c, threads);
    }

    // Open connections (sequentially: relay pairs form in arrival order).
    let depth = match a.mode {
        Mode::Echo => a.pipeline.unwrap_or(1),
        Mode::Json | Mode::Binary if a.pipelined => a.pipeline.unwrap_or(32),
        Mode::Json | Mode::Binary => 1,
        Mode::Fanout | Mode::ApiFanout => a.pipeline.unwrap_or(64),
        _ => 1,
    }
    .max(1);
    let mut groups: Vec<Vec<Conn>> = (0..threads).map(|_| Vec::new()).collect();
    // --h2: what each thread's streams send and expect; they open in the threads.
    let mut h2_ends: Vec<Vec<(Source, Expect)>> = (0..threads).map(|_| Vec::new()).collect();
    let load = match a.mode {
        Mode::Echo | Mode::Json | Mode::Binary => Load::ReqResp { depth },
        Mode::Relay => Load::Relay,
        Mode::Fanout => Load::Fanout {
            window: depth,
            rate: a.rate,
        },
        Mode::ApiFanout => Load::Subscribe {
            progress: Box::leak(Box::default()),
        },
        _ => Load::ReqResp { depth },
    };
    // api-fanout: the publisher (an HTTP client) and its template.
    let mut api_pub: Option<(api::ApiTarget, &'static Template)> = None;
    let setup = Instant::now();
    match a.mode {
        Mode::Echo | Mode::Json | Mode::Binary => {
            let t = Template::new(a.size, text, 1);
            let streams = a.streams.max(1);
            for i in 0..c {
                let base = i as u64 * 1_000_003;
                let (src, exp) = match a.mode {
                    Mode::Json => (Source::Json { base }, Expect::Json { base }),
                    Mode::Binary => (Source::Int32 { base }, Expect::Int32 { base }),
                    _ => (Source::Pattern(t), Expect::Pattern(t)),
                };
                if a.h2 {
                    // Whole connections per thread: streams i..i+streams share one.
                    h2_ends[(i / streams) % threads].push((src, exp));
                    continue;
                }
                let s =
                    conn::open(&target, &mut rng).map_err(|e| format!("connection {i}: {e}"))?;
                if let (0, Some(d)) = (i, s.describe()) {
                    println!("TLS: {d}");
                }
                groups[i % threads].push(Conn::new(s, src, exp, depth));
            }
        }
        Mode::Relay => {
            // Distinct patterns per direction: an echo can never pass as a relay.
            let (ta, tb) = (
                Template::new(a.size, text, 1),
                Template::new(a.size, text, 2),
            );
            for i in 0..c {
                let sa = conn::open(&target, &mut rng).map_err(|e| format!("pair {i} A: {e}"))?;
                let sb = conn::open(&target, &mut rng).map_err(|e| format!("pair {i} B: {e}"))?;
                let g = &mut groups[i % threads];
                g.push(Conn::new(sa, Source::Pattern(ta), Expect::Pattern(tb), 1));
                g.push(Conn::new(sb, Source::Pattern(tb), Expect::Pattern(ta), 1));
            }
        }
        Mode::Fanout => {
            if a.size < 4 {
                return Err(
                    "fanout needs -s 4 or more (the sequence number lives in the payload)".into(),
                );
            }
            if a.json_string && a.size < 11 {
                return Err("--json-string needs -s 11 or more".into());
            }
            let t = if a.json_string {
                Template::json_string(a.size, 3)
            } else {
                Template::new(a.size, text, 3)
            };
            let sub_target = match &a.sub_url {
                Some(url) => Target::parse(url)?,
                None => Target::parse(&url)?,
            };
            let mut all = Vec::with_capacity(c + 1);
            for i in 0..c {
                let s = conn::open(&sub_target, &mut rng)
                    .map_err(|e| format!("subscriber {i}: {e}"))?;
                all.push(Conn::new(s, Source::Pattern(t), Expect::Ordered(t), 1));
            }
            let p = conn::open(&target, &mut rng).map_err(|e| format!("publisher: {e}"))?;
            all.insert(
                0,
                Conn::new(p, Source::Pattern(t), Expect::Pattern(t), depth),
            );
            // Joins may be asynchronous on the server (and, across nodes,
            // wait for a broker's subscription): give them a moment.
            let settle = if a.sub_url.is_some() { 1000 } else { 200 };
            std::thread::sleep(Duration::from_millis(settle));
            groups = vec![all];
        }
        Mode::ApiFanout => {
            if a.size < 11 {
                return Err(
                    "api-fanout needs -s 11 or more (a JSON string with its sequence)".into(),
                );
            }
            let addr = a.api.as_deref().ok_or("api-fanout needs --api host:port")?;
            let addr = addr
                .strip_prefix("http://")
                .unwrap_or(addr)
                .trim_end_matches('/');
            let key = match &a.api_key {
                Some(k) => k.clone(),
                None => std::env::var("WEIR_API_KEY")
                    .map_err(|_| "api-fanout needs --api-key or $WEIR_API_KEY")?,
            };
            let t = Template::json_string(a.size, 3);
            let mut subs = Vec::with_capacity(c);
            for i in 0..c {
                let s =
                    conn::open(&target, &mut rng).map_err(|e| format!("subscriber {i}: {e}"))?;
                subs.push(Conn::new(s, Source::Pattern(t), Expect::Ordered(t), 1));
            }
            // Joins may be asynchronous (across nodes they wait for Redis).
            std::thread::sleep(Duration::from_millis(500));
            groups = vec![subs];
            api_pub = Some((
                api::ApiTarget {
                    addr: addr.to_string(),
                    key,
                    channel: a.channel.clone(),
                    batch: a.batch,
                },
                t,
            ));
        }
        Mode::Connect
        | Mode::Idle
        | Mode::Failover
        | Mode::Heartbeat
        | Mode::Storm
        | Mode::Rooms
        | Mode::Deflate
        | Mode::DeflateFanout
        | Mode::PusherFanout
        | Mode::PusherClientEvents
        | Mode::PusherIdle
        | Mode::PusherStorm => {}
    }
    let setup_secs = setup.elapsed().as_secs_f64();

    h2_ends.retain(|e| !e.is_empty());
    let ready = std::sync::Barrier::new(h2_ends.len() + 1);
    let (res, win, published) = std::thread::scope(|sc| {
        let mut handles = Vec::new();
        let mut publisher = None;
        if let (Some((target, t)), Load::Subscribe { progress }) = (&api_pub, load) {
            let window = depth as u64;
            let rate = a.rate;
            publisher =
                Some(sc.spawn(move || api::publish(target, t, window, rate, progress, ctl)));
        }
        if a.mode == Mode::Connect {
            for t in 0..threads {
                let slots = c / threads + usize::from(t < c % threads);
                let target = &target;
                handles.push(sc.spawn(move || connect::run(target, slots, t as u64 + 1, ctl)));
            }
        } else if a.h2 {
            let ready = &ready;
            for e in h2_ends.drain(..) {
                let target = &target;
                let streams = a.streams.max(1);
                handles.push(sc.spawn(move || over_h2::run(target, e, streams, depth, ctl, ready)));
            }
            // Measure from when every stream is open.
            ready.wait();
        } else {
            for mut g in groups.drain(..).filter(|g| !g.is_empty()) {
                handles.push(sc.spawn(move || engine::run(&mut g, load, ctl)));
            }
        }
        let win = measure(ctl, a.warmup, a.duration, &a.server_pid);
        let mut total = ThreadResult::default();
        for h in handles {
            total.merge(h.join().expect("worker thread panicked"));
        }
        let published = publisher.map(|h| h.join().expect("publisher thread panicked"));
        (total, win, published)
    });

    let msgs = res.msgs;
    let rate = msgs as f64 / win.secs;
    let per_msg = |ns: u64| {
        if msgs > 0 {
            Some(ns as f64 / msgs as f64)
        } else {
            None
        }
    };
    let server = win.server_cpu_ns.and_then(per_msg);
    let client = per_msg(win.client_cpu_ns);
    let us = |q: f64| res.hist.quantile(q) as f64 / 1000.0;
    // api-fanout's send times are in the publisher's thread: no latency.
    let timed = a.mode != Mode::ApiFanout;
    let unit = match a.mode {
        Mode::Connect => "handshakes",
        Mode::Relay => "round trips",
        Mode::Fanout | Mode::ApiFanout => "deliveries",
        _ => "messages",
    };
    let kind = if text { "text" } else { "binary" };
    println!(
        "{} {url}: {c} {}, depth {depth}, {} B {kind}, {threads} thread(s), setup {setup_secs:.2}s",
        a.mode.name(),
        if a.mode == Mode::Relay {
            "pairs"
        } else {
            "connections"
        },
        a.size
    );
    println!("measured {:.2}s: {msgs} {unit}, {rate:.0}/s", win.secs);
    println!(
        "latency p50 {:.1} us, p99 {:.1} us, p99.9 {:.1} us",
        us(0.5),
        us(0.99),
        us(0.999)
    );
    match server {
        Some(s) => print!(
            "server CPU {s:.0} ns/msg ({:.0}% of a core), ",
            win.server_cpu_ns.unwrap() as f64 / win.secs / 1e7
        ),
        None => print!("server CPU n/a, "),
    }
    println!(
        "client CPU {:.0} ns/msg ({:.0}% of a core)",
        client.unwrap_or(0.0),
        win.client_cpu_ns as f64 / win.secs / 1e7
    );
    let client_share = win.client_cpu_ns as f64 / win.secs / 1e9 / threads as f64;
    if client_share > 0.9 {
        println!(
            "  warning: the generator used {:.0}% of its CPU(s): throughput may be client-bound",
            client_share * 100.0
        );
    }
    println!(
        "mismatches {}, lost {}, failed connections {}",
        res.mismatches, res.lost, res.failed_conns
    );
    for e in &res.errors {
        println!("  error: {e}");
    }
    let mut ok = res.mismatches == 0 && res.failed_conns == 0 && msgs > 0;
    let mut extra = String::new();
    if let Some(p) = &published {
        println!(
            "API publishes: {} answered with a result, {} failed, {:.1} us per call",
            p.ok, p.failed, p.mean_answer_us
        );
        for e in &p.errors {
            println!("  error: {e}");
        }
        ok &= p.failed == 0 && p.ok > 0;
        extra = format!(
            ",\"api_publishes\":{},\"api_failed\":{},\"api_call_us\":{}",
            p.ok,
            p.failed,
            json_num(Some(p.mean_answer_us))
        );
    }
    if win.by_pid_ns.len() > 1 {
        let each: Vec<String> = win
            .by_pid_ns
            .iter()
            .map(|ns| json_num(ns.and_then(per_msg)))
            .collect();
        extra.push_str(&format!(",\"cpu_ns_per_msg_by_pid\":[{}]", each.join(",")));
    }
    if msgs == 0 {
        println!("  error: no {unit} completed in the measured window");
    }
    println!(
        "RESULT {{\"mode\":\"{}\",\"url\":\"{url}\",\"connections\":{c},\"depth\":{depth},\"size\":{},\"text\":{text},\"secs\":{:.3},\"msgs\":{msgs},\"msgs_per_s\":{},\"p50_us\":{},\"p99_us\":{},\"p999_us\":{},\"mismatches\":{},\"lost\":{},\"failed_conns\":{},\"server_cpu_ns_per_msg\":{},\"client_cpu_ns_per_msg\":{}{extra},\"ok\":{ok}}}",
        a.mode.name(),
        a.size,
        win.secs,
        json_num(Some(rate)),
        json_num(timed.then(|| us(0.5))),
        json_num(timed.then(|| us(0.99))),
        json_num(timed.then(|| us(0.999))),
        res.mismatches,
        res.lost,
        res.failed_conns,
        json_num(server),
        json_num(client),
    );
    Ok(ok)
}

/// The deflate mode: its own loop (`weir_load::deflate`), one per thread.
fn run_deflate(
    a: &Args,
    target: &Target,
    url: &str,
    c: usize,
    threads: usize,
) -> Result<bool, String> {
    let none = match a.context.as_str() {
        "none" => true,
        "takeover" => false,
        other => return Err(format!("--context {other}: takeover or none")),
    };
    let depth = a.pipeline.unwrap_or(1).max(1);
    let ctl = Control::default();
    let (t, win) = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let n = c / threads + usize::from(i < c % threads);
                let ctl = &ctl;
                sc.spawn(move || {
                    let plan = weir_load::deflate::Plan {
                        c: n,
                        depth,
                        size: a.size,
                        none,
                    };
                    let seed = 7 + i as u64;
                    match a.mode {
                        Mode::DeflateFanout => weir_load::deflate::run_fanout(
                            &target.addr,
                            &target.path,
                            &target.path,
                            plan,
                            ctl,
                            seed,
                        ),
                        _ => weir_load::deflate::run(&target.addr, &target.path, plan, ctl, seed),
                    }
                })
            })
            .collect();
        let win = measure(&ctl, a.warmup, a.duration, &a.server_pid);
        let mut total = weir_load::deflate::Totals::default();
        for h in handles {
            let part = h.join().expect("deflate thread panicked");
            total.result.merge(part.result);
            total.wire_out += part.wire_out;
            total.wire_in += part.wire_in;
            total.payload += part.payload;
            total.compressed_replies += part.compressed_replies;
            if total.agreed.is_empty() {
                total.agreed = part.agreed;
            }
        }
        (total, win)
    });
    let res = &t.result;
    let msgs = res.msgs;
    let per = |v: f64| {
        if msgs > 0 {
            Some(v / msgs as f64)
        } else {
            None
        }
    };
    let server = win.server_cpu_ns.and_then(|ns| per(ns as f64));
    let client = per(win.client_cpu_ns as f64);
    let us = |q: f64| res.hist.quantile(q) as f64 / 1000.0;
    let (out_pm, in_pm, pay_pm) = (
        per(t.wire_out as f64),
        per(t.wire_in as f64),
        per(t.payload as f64),
    );
    println!(
        "{} {url}: {c} connections, {depth} per round, {} B JSON, context {} ({})",
        a.mode.name(),
        a.size,
        a.context,
        t.agreed
    );
    println!(
        "measured {:.2}s: {msgs} messages, {:.0}/s; server CPU {} ns/msg, client CPU {} ns/msg",
        win.secs,
        msgs as f64 / win.secs,
        json_num(server),
        json_num(client)
    );
    println!(
        "wire bytes per message: to server {}, to client {} (payload {}; {} of {msgs} replies compressed)",
        json_num(out_pm),
        json_num(in_pm),
        json_num(pay_pm),
        t.compressed_replies
    );
    println!(
        "mismatches {}, failed connections {}",
        res.mismatches, res.failed_conns
    );
    for e in &res.errors {
        println!("  error: {e}");
    }
    let ok = res.mismatches == 0 && res.failed_conns == 0 && msgs > 0;
    println!(
        "RESULT {{\"mode\":\"{}\",\"url\":\"{url}\",\"connections\":{c},\"depth\":{depth},\"size\":{},\"context\":\"{}\",\"agreed\":\"{}\",\"secs\":{:.3},\"msgs\":{msgs},\"msgs_per_s\":{},\"p50_us\":{},\"p99_us\":{},\"server_cpu_ns_per_msg\":{},\"client_cpu_ns_per_msg\":{},\"wire_to_server_per_msg\":{},\"wire_to_client_per_msg\":{},\"payload_per_msg\":{},\"compressed_replies\":{},\"mismatches\":{},\"failed_conns\":{},\"ok\":{ok}}}",
        a.mode.name(),
        a.size,
        a.context,
        t.agreed,
        win.secs,
        json_num(Some(msgs as f64 / win.secs)),
        json_num(Some(us(0.5))),
        json_num(Some(us(0.99))),
        json_num(server),
        json_num(client),
        json_num(out_pm),
        json_num(in_pm),
        json_num(pay_pm),
        t.compressed_replies,
        res.mismatches,
        res.failed_conns,
    );
    Ok(ok)
}
