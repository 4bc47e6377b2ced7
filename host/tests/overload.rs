//! Overload controls and the paced drain (issue 41), against a real
//! gateway over loopback with tokio-tungstenite clients: upgrades past a
//! route's rate per client address get 429 with `Retry-After` and pass
//! again once the bucket refills; past `[server] max_upgrade_rate`, 503;
//! messages and bytes past a connection's rate are dropped and counted
//! (the connection kept) or close it with 1008; every refusal shows in
//! `/metrics`; a shutdown and a route drain close connections in slices
//! spread over the drain window, with 1012 and 1001.

mod common;

use common::{client, next, Gateway, STEP};
use futures_util::{SinkExt, StreamExt};
use std::time::Duration;
use tokio::time::{sleep, timeout, Instant};
use tokio_tungstenite::tungstenite::{self, Message};
use weir_config::{Config, RateExceeded};

/// One echo route at `path` with `rates` on top of the defaults.
fn echo_config(rates: weir_config::Rates) -> Config {
    let mut config = Config::builtin_default();
    config.server.workers = 2;
    config.routes[0].limits.rates = rates;
    config
}

fn rates(
    upgrades_per_ip: u32,
    messages: u32,
    bytes: u64,
    exceeded: RateExceeded,
) -> weir_config::Rates {
    weir_config::Rates {
        upgrades_per_ip,
        messages,
        bytes,
        exceeded,
    }
}

/// An upgrade that must be refused: its status and `Retry-After`.
async fn refused(url: &str) -> (u16, u64) {
    match timeout(STEP, tokio_tungstenite::connect_async(url))
        .await
        .expect("an answer in time")
    {
        Err(tungstenite::Error::Http(resp)) => {
            let retry = resp
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no Retry-After in {resp:?}"));
            (resp.status().as_u16(), retry)
        }
        Ok(_) => panic!("{url}: upgraded, expected a refusal"),
        Err(e) => panic!("{url}: {e}"),
    }
}

fn overload_metric(route: &str, reason: &str) -> String {
    format!(r#"weir_route_overload_total{{route="{route}",reason="{reason}"}}"#)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrades_past_the_per_address_rate_get_429_until_the_bucket_refills() {
    let gw = Gateway::start(echo_config(rates(4, 0, 0, RateExceeded::Drop)));
    let url = gw.url("/echo");
    let (mut open, mut refusals) = (Vec::new(), 0);
    // A second's worth (4) passes at once; then 429 (later ones pass only
    // as the bucket refills, one per 250 ms).
    let (status, retry) = loop {
        match tokio_tungstenite::connect_async(&url).await {
            Ok((ws, _)) => open.push(ws),
            Err(_) => break refused(&url).await,
        }
        assert!(open.len() <= 12, "never refused");
    };
    refusals += 2;
    assert!(open.len() >= 4, "refused after {} upgrades", open.len());
    assert_eq!(
        (status, retry),
        (429, 1),
        "one interval (250 ms) rounds up to 1 s"
    );
    // The relay route has no rate: the same address still gets in there.
    let _other = client(&gw.url("/relay")).await;
    // After a refill the address gets in again, and is refused again.
    sleep(Duration::from_millis(300)).await;
    open.push(client(&url).await);
    loop {
        match tokio_tungstenite::connect_async(&url).await {
            Ok((ws, _)) => open.push(ws),
            Err(tungstenite::Error::Http(resp)) => {
                assert_eq!(resp.status(), 429);
                refusals += 1;
                break;
            }
            Err(e) => panic!("{e}"),
        }
        assert!(open.len() <= 24, "never refused again");
    }
    let ws = &mut open[0];
    ws.send(Message::text("still here")).await.unwrap();
    assert_eq!(next(ws).await, Message::text("still here"));
    let name = overload_metric("/echo", "upgrade_rate_per_ip");
    assert_eq!(common::metric(gw.addr, &name).await, refusals);
    gw.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrades_past_the_gateway_rate_get_503_with_a_retry_after() {
    let mut config = echo_config(Default::default());
    config.server.max_upgrade_rate = 3;
    let gw = Gateway::start(config);
    let url = gw.url("/echo");
    let mut open = Vec::new();
    let refusals_before = loop {
        match tokio_tungstenite::connect_async(&url).await {
            Ok((ws, _)) => open.push(ws),
            Err(tungstenite::Error::Http(resp)) => {
                assert_eq!(resp.status(), 503);
                break 1;
            }
            Err(e) => panic!("{e}"),
        }
        assert!(open.len() <= 10, "never refused");
    };
    assert!(open.len() >= 3, "refused after {}", open.len());
    let (status, retry) = refused(&url).await;
    assert_eq!(status, 503);
    assert!((1..=10).contains(&retry), "jittered 1..=10 s, got {retry}");
    // The cap is the gateway's: another route is refused too.
    for tries in 0.. {
        match tokio_tungstenite::connect_async(&gw.url("/relay")).await {
            Ok((ws, _)) => open.push(ws),
            Err(tungstenite::Error::Http(resp)) => {
                assert_eq!(resp.status(), 503);
                break;
            }
            Err(e) => panic!("{e}"),
        }
        assert!(tries < 5, "/relay never refused");
    }
    sleep(Duration::from_millis(400)).await;
    open.push(client(&url).await);
    assert_eq!(
        common::metric(gw.addr, &overload_metric("/echo", "upgrade_rate_global")).await,
        refusals_before + 1
    );
    assert_eq!(
        common::metric(gw.addr, &overload_metric("/relay", "upgrade_rate_global")).await,
        1
    );
    gw.stop();
}

/// Sends `count` messages of `size` bytes at once, then (after `pause`,
/// long enough for the buckets to refill) a marker; returns how many
/// echoes came back before the marker's.
async fn echoes_before_marker(
    ws: &mut common::Ws,
    count: usize,
    size: usize,
    pause: Duration,
) -> usize {
    for i in 0..count {
        let mut payload = vec![b'x'; size];
        payload[..4].copy_from_slice(&(i as u32).to_be_bytes());
        ws.feed(Message::binary(payload)).await.unwrap();
    }
    ws.flush().await.unwrap();
    sleep(pause).await;
    ws.send(Message::text("marker")).await.unwrap();
    let mut echoed = 0;
    loop {
        match next(ws).await {
            Message::Text(t) if t.as_str() == "marker" => return echoed,
            Message::Binary(b) => {
                assert_eq!(b.len(), size);
                echoed += 1;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_past_the_rate_are_dropped_and_counted_and_the_connection_stays() {
    let gw = Gateway::start(echo_config(rates(0, 5, 0, RateExceeded::Drop)));
    let mut ws = client(&gw.url("/echo")).await;
    let echoed = echoes_before_marker(&mut ws, 20, 16, Duration::from_millis(1200)).await;
    assert!(
        (5..=6).contains(&echoed),
        "a second's worth (5) passes, got {echoed}"
    );
    let dropped = overload_metric("/echo", "message_rate_dropped");
    assert_eq!(common::metric(gw.addr, &dropped).await, 20 - echoed as u64);
    // Echo counts out only what it sent on.
    let out = common::metric(
        gw.addr,
        r#"weir_route_native_messages_out_total{route="/echo"}"#,
    )
    .await;
    assert_eq!(out, echoed as u64 + 1);
    gw.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_past_the_rate_are_dropped_and_counted() {
    let gw = Gateway::start(echo_config(rates(0, 0, 1024, RateExceeded::Drop)));
    let mut ws = client(&gw.url("/echo")).await;
    // 1,024 bytes a second: 400, 400 and 400 pass (the third into debt),
    // the rest wait for the debt to be paid.
    let echoed = echoes_before_marker(&mut ws, 10, 400, Duration::from_millis(1300)).await;
    assert_eq!(echoed, 3);
    let dropped = overload_metric("/echo", "byte_rate_dropped");
    assert_eq!(common::metric(gw.addr, &dropped).await, 7);
    gw.stop();
}

/// Reads until the close; its code and reason.
async fn close_of(ws: &mut common::Ws) -> (u16, String) {
    loop {
        match timeout(STEP, ws.next()).await.expect("a close in time") {
            Some(Ok(Message::Close(Some(f)))) => return (f.code.into(), f.reason.to_string()),
            Some(Ok(Message::Close(None))) | None => panic!("closed without a code"),
            Some(Ok(_)) => {}
            Some(Err(e)) => panic!("{e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_and_bytes_past_the_rate_close_1008_in_close_mode() {
    let mut config = echo_config(rates(0, 5, 0, RateExceeded::Close));
    // /relay becomes a byte-limited echo.
    config.routes[1].behaviour = config.routes[0].behaviour.clone();
    config.routes[1].limits.rates = rates(0, 0, 1024, RateExceeded::Close);
    let gw = Gateway::start(config);

    let mut ws = client(&gw.url("/echo")).await;
    for _ in 0..20 {
        ws.feed(Message::text("m")).await.unwrap();
    }
    ws.flush().await.unwrap();
    assert_eq!(
        close_of(&mut ws).await,
        (1008, "message rate exceeded".to_string())
    );

    let mut ws = client(&gw.url("/relay")).await;
    for _ in 0..4 {
        ws.feed(Message::binary(vec![0u8; 600])).await.unwrap();
    }
    ws.flush().await.unwrap();
    assert_eq!(
        close_of(&mut ws).await,
        (1008, "byte rate exceeded".to_string())
    );

    let closed = |r, reason| overload_metric(r, reason);
    assert_eq!(
        common::metric(gw.addr, &closed("/echo", "message_rate_closed")).await,
        1
    );
    assert_eq!(
        common::metric(gw.addr, &closed("/relay", "byte_rate_closed")).await,
        1
    );
    // Counted when the close handshake ends.
    drop(ws);
    let closes = r#"weir_route_closes_total{route="/echo",code="1008"}"#;
    common::await_metric(gw.addr, closes, 1).await;
    gw.stop();
}

/// `n` open connections to `url`, each watched by a task that records
/// when its close came, with its code and reason (and answers it).
async fn watched(url: &str, n: usize) -> Vec<tokio::task::JoinHandle<(Instant, u16, String)>> {
    let mut tasks = Vec::with_capacity(n);
    for _ in 0..n {
        let mut ws = client(url).await;
        tasks.push(tokio::spawn(async move {
            let (code, reason) = close_of(&mut ws).await;
            let at = Instant::now();
            // Answer the close (tungstenite queued the reply) and see the end.
            while let Ok(Some(_)) = timeout(STEP, ws.next()).await {}
            (at, code, reason)
        }));
    }
    tasks
}

/// The closes' arrival times relative to the first: asserts they are
/// spread (not all in the first slice) and returns the spread.
fn assert_spread(closes: &[(Instant, u16, String)], code: u16, reason: &str) -> Duration {
    let first = closes.iter().map(|c| c.0).min().unwrap();
    let last = closes.iter().map(|c| c.0).max().unwrap();
    for (_, c, r) in closes {
        assert_eq!((*c, r.as_str()), (code, reason));
    }
    let early = closes
        .iter()
        .filter(|c| c.0 - first < Duration::from_millis(150))
        .count();
    assert!(
        early < closes.len() / 2,
        "{early} of {} closes came within 150 ms of the first: not paced",
        closes.len()
    );
    let spread = last - first;
    assert!(
        spread >= Duration::from_millis(300),
        "closes spread over {spread:?} only"
    );
    spread
}

/// SIGTERM's drain (here `stop`): 200 connections, drain_timeout 4 s (a
/// 2 s window; each worker closes 10 per 100 ms slice): the closes are
/// spread over about a second, each 1012, and the gateway is gone well
/// before drain_timeout plus a margin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_closes_connections_in_slices_with_1012() {
    let mut config = echo_config(Default::default());
    config.server.drain_timeout = Duration::from_secs(4);
    let gw = Gateway::start(config);
    let tasks = watched(&gw.url("/echo"), 200).await;
    let started = Instant::now();
    let stopper = std::thread::spawn(move || gw.stop());
    let mut closes = Vec::new();
    for t in tasks {
        closes.push(t.await.unwrap());
    }
    let spread = assert_spread(&closes, 1012, "server restarting");
    assert!(spread < Duration::from_secs(4), "{spread:?}");
    tokio::task::spawn_blocking(move || stopper.join().unwrap())
        .await
        .unwrap();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(4 + 3), "the drain took {took:?}");
}

/// A route drain through the admin API: 200 connections closed 1001 with
/// the reason in slices, the other route's connection untouched, and
/// upgrades refused 503 with a jittered Retry-After (counted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_drain_closes_in_slices_with_1001_and_a_reason() {
    const TOKEN_ENV: &str = "WEIR_OVERLOAD_TEST_TOKEN";
    const TOKEN: &str = "overload-test-admin-token-0123456789";
    // SAFETY (edition 2021: safe): set before the gateway reads it; no
    // other test in this binary reads this variable.
    std::env::set_var(TOKEN_ENV, TOKEN);
    let mut config = echo_config(Default::default());
    config.server.drain_timeout = Duration::from_secs(4);
    if let Some(io) = common::test_io() {
        config.server.io = io;
    }
    config.server.listen = "127.0.0.1:0".parse().unwrap();
    config.admin = Some(weir_config::AdminConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        token_env: TOKEN_ENV.into(),
        tls: None,
    });
    let server = weir::server::Server::bind(config).expect("bind");
    let (addr, admin) = (server.local_addr(), server.admin_addr().unwrap());
    let (stop, rx) = tokio::sync::watch::channel(false);
    let thread = std::thread::spawn(move || server.run(rx).expect("serve"));

    let mut other = client(&format!("ws://{addr}/relay")).await;
    let tasks = watched(&format!("ws://{addr}/echo"), 200).await;
    let (status, body) = weir::client::request(
        &admin.to_string(),
        TOKEN,
        http::Method::POST,
        "/routes/%2Fecho/drain",
        Vec::new(),
    )
    .await
    .expect("admin request");
    assert_eq!(status, 200, "{body}");
    let (status, retry) = refused(&format!("ws://{addr}/echo")).await;
    assert_eq!(status, 503);
    assert!((1..=10).contains(&retry), "{retry}");
    let mut closes = Vec::new();
    for t in tasks {
        closes.push(t.await.unwrap());
    }
    assert_spread(&closes, 1001, "route drained");
    // The relay route's connection was not closed (its partner never came,
    // so it is still waiting: nothing arrives).
    assert!(timeout(Duration::from_millis(100), other.next())
        .await
        .is_err());
    let drained = overload_metric("/echo", "route_drained");
    assert_eq!(common::metric(addr, &drained).await, 1);
    stop.send(true).unwrap();
    tokio::task::spawn_blocking(move || thread.join().unwrap())
        .await
        .unwrap();
}
