//! Guest routes over real loopback sockets, with tokio-tungstenite as the
//! client: every example handler, and the fault fixture's trap, deadline,
//! memory and output-size failures, each closing only the affected
//! connections with 1011 while native and other guest routes keep serving.

mod common;

use common::{client, next, Gateway, Ws, STEP};
use futures_util::{SinkExt, StreamExt};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::Message;
use weir_config::{Behaviour, Config, GuestConfig, Isolation, RouteConfig};

fn wasm(name: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/wasm")
        .join(format!("{name}.wasm"));
    assert!(
        path.exists(),
        "{} is missing: run scripts/build-guests.sh first",
        path.display()
    );
    path
}

fn guest_route(path: &str, guest: GuestConfig) -> RouteConfig {
    let limits = weir_config::Limits::default();
    RouteConfig {
        path: path.to_string(),
        line: 0,
        behaviour: Behaviour::Guest(guest),
        limits,
        topics: None,
    }
}

/// Native /echo and /relay plus the example guests, on one worker so the
/// fault tests know which connections share an instance.
fn gateway() -> Gateway {
    let mut config = Config::builtin_default();
    config.server.workers = 1;
    for name in ["echo", "json", "binary", "counter"] {
        let path = if name == "echo" {
            "/plain".to_string()
        } else {
            format!("/{name}")
        };
        let mut guest = GuestConfig::defaults(wasm(name));
        // The deadline is wall time: on a loaded 2-core CI machine a 16 MiB
        // batch (many_large_messages_...) can take longer than the default
        // 100 ms. Deadlines have their own test on /faulty.
        guest.timeout = Duration::from_secs(2);
        config.routes.push(guest_route(&path, guest));
    }
    config.routes.push(guest_route(
        "/chat/{room}",
        GuestConfig::defaults(wasm("chat")),
    ));
    let mut auth = GuestConfig::defaults(wasm("auth"));
    auth.env.insert("WEIR_AUTH_TOKEN".into(), "sesame".into());
    config.routes.push(guest_route("/auth", auth));
    let mut faulty = GuestConfig::defaults(wasm("faulty"));
    faulty.memory = 16 << 20;
    faulty.timeout = Duration::from_millis(50);
    config.routes.push(guest_route("/faulty", faulty));
    let mut recycled = GuestConfig::defaults(wasm("counter"));
    recycled.recycle_after = 1;
    config
        .routes
        .push(guest_route("/counter-recycled", recycled));
    let mut per_batch = GuestConfig::defaults(wasm("counter"));
    per_batch.isolation = Isolation::Batch;
    config.routes.push(guest_route("/counter-batch", per_batch));
    Gateway::start(config)
}

async fn ask(ws: &mut Ws, msg: Message) -> Message {
    ws.send(msg).await.unwrap();
    next(ws).await
}

async fn expect_close(ws: &mut Ws, code: u16) {
    loop {
        match next(ws).await {
            Message::Close(Some(frame)) => {
                assert_eq!(
                    u16::from(frame.code),
                    code,
                    "close reason: {}",
                    frame.reason
                );
                return;
            }
            Message::Close(None) => panic!("closed without a code, expected {code}"),
            _ => continue,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_handlers_answer_over_the_network() {
    let gw = gateway();
    let mut plain = client(&gw.url("/plain")).await;
    assert_eq!(
        ask(&mut plain, Message::text("héllo")).await,
        Message::text("héllo")
    );
    assert_eq!(
        ask(&mut plain, Message::binary(vec![0, 1, 255])).await,
        Message::binary(vec![0, 1, 255])
    );

    let mut json = client(&gw.url("/json")).await;
    let reply =
        |m: Message| serde_json::from_str::<serde_json::Value>(m.to_text().unwrap()).unwrap();
    assert_eq!(
        reply(ask(&mut json, Message::text(r#"{"number": 7}"#)).await)["number"],
        8
    );
    assert_eq!(
        reply(ask(&mut json, Message::text(r#"{"number": 10}"#)).await)["number"],
        12
    );
    assert!(reply(ask(&mut json, Message::text("{not json")).await)
        .get("error")
        .is_some());
    // A malformed message is answered, not fatal: the connection still works.
    assert_eq!(
        reply(ask(&mut json, Message::text(r#"{"number": -3}"#)).await)["number"],
        -2
    );

    let mut binary = client(&gw.url("/binary")).await;
    for (n, want) in [(41i32, 42i32), (100, 102), (-1, 0)] {
        let got = ask(&mut binary, Message::binary(n.to_le_bytes().to_vec())).await;
        assert_eq!(got.into_data().as_ref(), want.to_le_bytes());
    }

    let mut counter = client(&gw.url("/counter")).await;
    for n in 1..=3 {
        assert_eq!(
            ask(&mut counter, Message::text("tick")).await,
            Message::text(n.to_string())
        );
    }
    gw.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_rejects_with_401_unless_the_token_matches() {
    let gw = gateway();
    for url in [gw.url("/auth"), gw.url("/auth?token=wrong")] {
        match tokio_tungstenite::connect_async(url.as_str()).await {
            Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
                assert_eq!(resp.status(), 401)
            }
            other => panic!(
                "{url}: expected 401, got {:?}",
                other.map(|(_, r)| r.status())
            ),
        }
    }
    let mut ok = client(&gw.url("/auth?token=sesame")).await;
    assert_eq!(ask(&mut ok, Message::text("in")).await, Message::text("in"));
    gw.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_reaches_every_other_member_of_the_room_only() {
    let gw = gateway();
    let mut a = client(&gw.url("/chat/lobby")).await;
    let mut b = client(&gw.url("/chat/lobby")).await;
    let mut c = client(&gw.url("/chat/lobby")).await;
    let mut other = client(&gw.url("/chat/attic")).await;
    // Let the open events (and their subscriptions) reach the guest first.
    tokio::time::sleep(Duration::from_millis(200)).await;
    a.send(Message::text("hi from a")).await.unwrap();
    assert_eq!(next(&mut b).await, Message::text("hi from a"));
    assert_eq!(next(&mut c).await, Message::text("hi from a"));
    other.send(Message::text("attic only")).await.unwrap();
    b.send(Message::text("b here")).await.unwrap();
    assert_eq!(next(&mut a).await, Message::text("b here"));
    assert_eq!(next(&mut c).await, Message::text("b here"));
    // The sender never hears itself, and other rooms hear nothing.
    assert!(timeout(Duration::from_millis(300), b.next()).await.is_err());
    assert!(timeout(Duration::from_millis(300), other.next())
        .await
        .is_err());
    gw.stop();
}

/// Each fault closes the connection that caused it with 1011; an idle
/// connection of the same route, a second guest route and the native route
/// keep working, and the next batch runs on a fresh instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guest_faults_close_only_the_affected_connections() {
    let gw = gateway();
    let mut bystander = client(&gw.url("/faulty")).await;
    let mut other_guest = client(&gw.url("/plain")).await;
    let mut native = client(&gw.url("/echo")).await;
    assert_eq!(
        ask(&mut bystander, Message::text("warm")).await,
        Message::text("warm")
    );
    for fault in ["trap", "loop", "grow", "flood"] {
        let mut victim = client(&gw.url("/faulty")).await;
        victim.send(Message::text(fault)).await.unwrap();
        expect_close(&mut victim, 1011).await;
        let note = format!("after {fault}");
        assert_eq!(
            ask(&mut bystander, Message::text(note.clone())).await,
            Message::text(note.clone())
        );
        assert_eq!(
            ask(&mut other_guest, Message::text(note.clone())).await,
            Message::text(note.clone())
        );
        assert_eq!(
            ask(&mut native, Message::text(note.clone())).await,
            Message::text(note)
        );
    }
    gw.stop();
}

/// Attachments outlive instances: with an instance replaced after every
/// batch, or a fresh one per batch, the per-connection count continues.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attachments_survive_instance_replacement() {
    let gw = gateway();
    for path in ["/counter-recycled", "/counter-batch"] {
        let mut a = client(&gw.url(path)).await;
        let mut b = client(&gw.url(path)).await;
        for n in 1..=4 {
            assert_eq!(
                ask(&mut a, Message::text("x")).await,
                Message::text(n.to_string()),
                "{path}"
            );
        }
        assert_eq!(
            ask(&mut b, Message::text("x")).await,
            Message::text("1"),
            "{path}"
        );
        assert_eq!(
            ask(&mut a, Message::text("x")).await,
            Message::text("5"),
            "{path}"
        );
    }
    // A trap replaces the counter's instance too; the count survives it.
    let mut c = client(&gw.url("/counter")).await;
    assert_eq!(ask(&mut c, Message::text("x")).await, Message::text("1"));
    let mut victim = client(&gw.url("/faulty")).await;
    victim.send(Message::text("trap")).await.unwrap();
    expect_close(&mut victim, 1011).await;
    assert_eq!(ask(&mut c, Message::text("x")).await, Message::text("2"));
    gw.stop();
}

/// Many connections with many pipelined messages: batches mix connections,
/// and every connection gets its own replies, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_of_many_connections_answer_in_order() {
    let gw = gateway();
    let mut tasks = Vec::new();
    for c in 0..40 {
        let url = gw.url("/plain");
        tasks.push(tokio::spawn(async move {
            let mut ws = client(&url).await;
            for i in 0..50 {
                ws.feed(Message::text(format!("{c}:{i}"))).await.unwrap();
            }
            ws.flush().await.unwrap();
            for i in 0..50 {
                assert_eq!(next(&mut ws).await, Message::text(format!("{c}:{i}")));
            }
        }));
    }
    for t in tasks {
        timeout(STEP, t)
            .await
            .expect("connection timed out")
            .unwrap();
    }
    gw.stop();
}

/// Regression: many large messages arriving at once were handed to the guest
/// in one call that outgrew its memory, and every connection got 1011. A
/// batch is now capped in bytes; the rest goes in the next call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_large_messages_at_once_are_split_across_calls() {
    let gw = gateway();
    let mut clients = Vec::new();
    for _ in 0..64 {
        clients.push(client(&gw.url("/plain")).await);
    }
    let payload = vec![0xA5u8; 1 << 20];
    let start = Arc::new(tokio::sync::Barrier::new(clients.len()));
    let tasks: Vec<_> = clients
        .into_iter()
        .map(|ws| {
            let payload = payload.clone();
            let start = start.clone();
            tokio::spawn(async move {
                let (mut tx, mut rx) = ws.split();
                start.wait().await;
                let send = async {
                    for _ in 0..4 {
                        tx.send(Message::binary(payload.clone())).await.unwrap();
                    }
                };
                let receive = async {
                    for _ in 0..4 {
                        let got = timeout(STEP, rx.next()).await.expect("reply timed out");
                        match got.expect("stream ended").expect("protocol error") {
                            Message::Binary(got) => assert!(got[..] == payload[..], "echo differs"),
                            other => panic!("expected the echo, got {other:?}"),
                        }
                    }
                };
                tokio::join!(send, receive);
            })
        })
        .collect();
    for t in tasks {
        timeout(STEP, t).await.expect("timed out").unwrap();
    }
    gw.stop();
}

/// Fan-out to a subscriber that never reads: once its queue is over the
/// route's outbound budget it is closed with 1008 (after the messages queued
/// before), the publisher and a reading subscriber keep being served, and
/// nothing queued for it exceeds the budget by more than one message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_never_reads_is_closed_with_1008() {
    const BUDGET: usize = 64 << 10;
    let mut config = Config::builtin_default();
    config.server.workers = 1;
    let mut chat = guest_route("/chat/{room}", GuestConfig::defaults(wasm("chat")));
    chat.limits.outbound_budget = BUDGET;
    config.routes.push(chat);
    let gw = Gateway::start(config);
    let mut slow = common::Raw::connect(gw.addr, "/chat/busy").await;
    let mut reader = client(&gw.url("/chat/busy")).await;
    let mut publisher = client(&gw.url("/chat/busy")).await;
    tokio::time::sleep(Duration::from_millis(200)).await;

    let text = |i: u32| format!("{i:08}{}", "x".repeat(32 << 10));
    // 32 MiB: far past the budget and the loopback socket buffers (which
    // grow to several MiB each way).
    const COUNT: u32 = 1000;
    for i in 0..COUNT {
        publisher.send(Message::text(text(i))).await.unwrap();
        assert_eq!(next(&mut reader).await, Message::text(text(i)));
        if i % 50 == 0 {
            let queued = common::metric(gw.addr, "weir_outbound_queued_bytes_max").await;
            assert!(
                queued <= (BUDGET + (33 << 10)) as u64,
                "{queued} bytes queued for one subscriber"
            );
        }
    }
    // The slow subscriber now reads: messages in order, then 1008.
    let mut seen = 0u32;
    let code = loop {
        let (first, payload) = slow.next_frame().await.expect("frames, then a close");
        if first & 0x0F == 0x8 {
            break u16::from_be_bytes([payload[0], payload[1]]);
        }
        assert_eq!(payload, text(seen).as_bytes(), "message {seen}");
        seen += 1;
    };
    assert_eq!(code, 1008);
    assert!(seen < COUNT, "the slow subscriber was never cut off");
    // The publisher and the reader are still served.
    publisher.send(Message::text("still here")).await.unwrap();
    assert_eq!(next(&mut reader).await, Message::text("still here"));
    gw.stop();
}

/// What the SDK's connection handle is given survives a fresh instance per
/// batch (`isolation = "batch"`) over real sockets, on two workers: the
/// route parameter (`/shout/{room}`), the state the upgrade hook accepted
/// with (`?name=`), and the state saved after each message (the count).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn params_upgrade_state_and_saved_state_survive_a_fresh_instance_per_batch() {
    let mut config = Config::builtin_default();
    config.server.workers = 2;
    let mut shout = GuestConfig::defaults(wasm("shout"));
    shout.isolation = Isolation::Batch;
    config.routes.push(guest_route("/shout/{room}", shout));
    let gw = Gateway::start(config);
    let mut ann = client(&gw.url("/shout/red?name=ann")).await;
    let mut bob = client(&gw.url("/shout/red?name=bob")).await;
    let mut eve = client(&gw.url("/shout/blue?name=eve")).await;
    for i in 1..=3 {
        ann.send(Message::text(format!("hi {i}"))).await.unwrap();
        let want = Message::text(format!("ann: HI {i}"));
        assert_eq!(next(&mut ann).await, want);
        assert_eq!(next(&mut bob).await, want);
    }
    assert_eq!(
        ask(&mut ann, Message::text("!count")).await,
        Message::text("3")
    );
    assert_eq!(
        ask(&mut bob, Message::text("!count")).await,
        Message::text("0")
    );
    // The other room heard nothing: its first message is its own.
    assert_eq!(
        ask(&mut eve, Message::text("alone")).await,
        Message::text("eve: ALONE")
    );
    eve.send(Message::binary(vec![1])).await.unwrap();
    expect_close(&mut eve, 1003).await;
    gw.stop();
}
