//! The cost of a deploy, as an operator sees it: from the start of
//! `PUT /routes/{path}/component` to the first reply by the new version on
//! a connection that stays open, with a warm and a cold compile cache.
//!
//! A gateway (2 workers, admin API) runs in this process on loopback; one
//! client connection sends `{"number": n}` messages back to back on the
//! guest route (json answers n+1 / n+2, echo answers n) while the route is
//! deployed to alternately echo and json. Cold: each round deploys bytes
//! the cache has never seen (the component with a custom section holding
//! the round number appended, so its hash differs and it is compiled);
//! warm: the same two components again (the artifact is read back).
//!
//! Run: `cargo bench -p weir-micro --bench deploy` (needs examples/wasm,
//! built by scripts/build-guests.sh). Prints a table of medians and p90s.

use futures_util::{SinkExt, StreamExt};
use http::Method;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;
use weir::config::{AdminConfig, Behaviour, Config, GuestConfig, RouteConfig};

const TOKEN_ENV: &str = "WEIR_BENCH_ADMIN_TOKEN";
const TOKEN: &str = "bench-admin-token-0123456789";
/// Deploys measured per cache state.
const ROUNDS: usize = 20;

fn wasm(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/wasm")
        .join(format!("{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; build the guests with scripts/build-guests.sh",
            path.display()
        )
    })
}

/// `component` with a custom section named `weir-bench` holding `round`
/// appended: the same code under a hash the cache has not seen.
fn with_custom_section(component: &[u8], round: u64) -> Vec<u8> {
    let name = b"weir-bench";
    let mut payload = vec![name.len() as u8];
    payload.extend_from_slice(name);
    payload.extend_from_slice(&round.to_le_bytes());
    let mut out = component.to_vec();
    out.push(0); // custom section id
    out.push(payload.len() as u8); // LEB128 size (< 128)
    out.extend_from_slice(&payload);
    out
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    // Single-threaded here: nothing else reads the environment yet.
    std::env::set_var(TOKEN_ENV, TOKEN);
    let cache = std::env::temp_dir().join(format!("weir-deploy-bench-{}", std::process::id()));
    let mut config = Config::builtin_default();
    config.server.listen = "127.0.0.1:0".parse().unwrap();
    config.server.workers = 2;
    config.server.cache_dir = Some(cache.clone());
    config.admin = Some(AdminConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        token_env: TOKEN_ENV.into(),
        tls: None,
    });
    let echo_path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/wasm/echo.wasm");
    config.routes.push(RouteConfig {
        path: "/g".into(),
        line: 0,
        behaviour: Behaviour::Guest(GuestConfig::defaults(echo_path)),
        limits: config.server.limits.clone(),
        topics: None,
    });
    let server = weir::server::Server::bind(config).expect("bind");
    let (addr, admin) = (server.local_addr(), server.admin_addr().expect("admin"));
    let (stop, rx) = tokio::sync::watch::channel(false);
    let gateway = std::thread::spawn(move || server.run(rx));

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/g"))
            .await
            .expect("connect");
        let (echo, json) = (wasm("echo"), wasm("json"));
        let mut n = 0u64;
        let mut version_is_json = false;
        let mut rows = Vec::new();
        for (label, cold) in [("cold cache (compile)", true), ("warm cache", false)] {
            let (mut first_reply, mut put) = (Vec::new(), Vec::new());
            for round in 0..ROUNDS {
                let to_json = !version_is_json;
                let base = if to_json { &json } else { &echo };
                let body = if cold {
                    with_custom_section(base, round as u64 * 2 + u64::from(to_json))
                } else {
                    base.clone()
                };
                let started = Instant::now();
                let (status, text) = weir::client::request(
                    &admin.to_string(),
                    TOKEN,
                    Method::PUT,
                    "/routes/%2Fg/component",
                    body,
                )
                .await
                .expect("deploy");
                assert_eq!(status, 200, "{text}");
                put.push(started.elapsed());
                // Messages until the new version answers.
                loop {
                    n += 1;
                    let request = format!("{{\"number\": {n}}}");
                    ws.send(Message::text(request.clone())).await.unwrap();
                    let reply = match ws.next().await {
                        Some(Ok(Message::Text(t))) => t.to_string(),
                        other => panic!("reply: {other:?}"),
                    };
                    if (reply != request) == to_json {
                        break;
                    }
                }
                first_reply.push(started.elapsed());
                version_is_json = to_json;
            }
            first_reply.sort();
            put.sort();
            rows.push((label, put, first_reply));
        }
        println!("deploy: PUT /routes/%2Fg/component to the first reply by the new version ({ROUNDS} deploys each)");
        println!("| cache | PUT answered, median | p90 | first new reply, median | p90 |");
        println!("|---|---:|---:|---:|---:|");
        for (label, put, first) in rows {
            println!(
                "| {label} | {:.1} ms | {:.1} ms | {:.1} ms | {:.1} ms |",
                percentile(&put, 0.5).as_secs_f64() * 1e3,
                percentile(&put, 0.9).as_secs_f64() * 1e3,
                percentile(&first, 0.5).as_secs_f64() * 1e3,
                percentile(&first, 0.9).as_secs_f64() * 1e3,
            );
        }
        let _ = ws.close(None).await;
    });
    let _ = stop.send(true);
    let _ = gateway.join();
    let _ = std::fs::remove_dir_all(&cache);
}
