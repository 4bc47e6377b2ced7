//! Native pubsub over real loopback sockets, with tokio-tungstenite and raw
//! clients: who receives what (others only, echo_self), order per
//! publisher, text and binary kept, slow subscribers closed or skipped,
//! topics isolated between routes, and 10,000 subscribers on one topic.

mod common;
mod guest_support;

use common::{client, frame, metric, next, Gateway, Raw, WeirProcess, STEP};
use futures_util::{SinkExt, StreamExt};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::Message;
use weir_config::Config;

/// A gateway with 2 workers serving `routes` (routes-file text).
fn gateway(routes: &str) -> Gateway {
    let text = format!("[server]\nworkers = 2\n\n{routes}");
    Gateway::start(Config::parse(&text, Path::new(".")).expect("routes file"))
}

const PUBSUB: &str = "[[route]]\npath = \"/topic/{topic}\"\nnative = \"pubsub\"\n";

/// Nothing arrives on `ws` within a short wait.
async fn silent(ws: &mut common::Ws, what: &str) {
    if let Ok(got) = timeout(Duration::from_millis(300), ws.next()).await {
        panic!("{what}: got {got:?}");
    }
}

/// Every subscriber gets every other publisher's messages, in each
/// publisher's order, text as text and binary as binary; never its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn others_receive_every_message_in_publisher_order() {
    const PUBLISHERS: usize = 4;
    const EACH: usize = 300;
    let gw = gateway(PUBSUB);
    let mut conns = Vec::new();
    for _ in 0..PUBLISHERS {
        conns.push(client(&gw.url("/topic/room")).await);
    }
    let mut other_topic = client(&gw.url("/topic/elsewhere")).await;
    let (mut sinks, mut streams): (Vec<_>, Vec<_>) = conns.into_iter().map(|c| c.split()).unzip();
    let send = async {
        for i in 0..EACH {
            for (p, sink) in sinks.iter_mut().enumerate() {
                let msg = if i % 2 == 0 {
                    Message::text(format!("{p}:{i}"))
                } else {
                    Message::binary(format!("{p}:{i}").into_bytes())
                };
                sink.send(msg).await.unwrap();
            }
        }
    };
    let receive = async {
        for (me, stream) in streams.iter_mut().enumerate() {
            let mut next_from = [0usize; PUBLISHERS];
            for _ in 0..EACH * (PUBLISHERS - 1) {
                let msg = timeout(STEP, stream.next())
                    .await
                    .unwrap()
                    .unwrap()
                    .unwrap();
                let (text, binary) = match msg {
                    Message::Text(t) => (t.to_string(), false),
                    Message::Binary(b) => (String::from_utf8(b.to_vec()).unwrap(), true),
                    other => panic!("unexpected {other:?}"),
                };
                let (p, i) = text.split_once(':').unwrap();
                let (p, i): (usize, usize) = (p.parse().unwrap(), i.parse().unwrap());
                assert_ne!(p, me, "a publisher received its own message");
                assert_eq!(i, next_from[p], "publisher {p}'s order broke at {me}");
                assert_eq!(binary, i % 2 == 1, "the opcode changed");
                next_from[p] += 1;
            }
        }
    };
    tokio::join!(send, receive);
    silent(&mut other_topic, "another topic heard the room").await;
    gw.stop();
}

/// `echo_self = true`: the publisher gets its own messages too; fragments
/// arrive as the one message they make.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_self_and_fragmented_messages() {
    let gw = gateway(&format!("{PUBSUB}echo_self = true\n"));
    let mut sub = client(&gw.url("/topic/t")).await;
    let mut raw = Raw::connect(gw.addr, "/topic/t").await;
    // A text message in three fragments, a ping between two of them.
    let mut bytes = frame(0x01, b"hel");
    bytes.extend(frame(0x89, b"p"));
    bytes.extend(frame(0x00, b"lo "));
    bytes.extend(frame(0x80, b"world"));
    raw.send(&bytes).await;
    assert_eq!(next(&mut sub).await, Message::text("hello world"));
    // The publisher hears its own message (after its pong).
    let mut own = Vec::new();
    while own.len() < 3 {
        let (first, payload) = raw.next_frame().await.expect("frame");
        if first & 0x0F != 0xA {
            own.push((first, payload));
        }
    }
    assert_eq!(own[0], (0x01, b"hel".to_vec()));
    assert_eq!(own[2], (0x80, b"world".to_vec()));
    sub.send(Message::binary(vec![1, 2, 3])).await.unwrap();
    assert_eq!(next(&mut sub).await, Message::binary(vec![1, 2, 3]));
    gw.stop();
}

/// A subscriber socket that takes little and is never read.
async fn stalled_subscriber(addr: std::net::SocketAddr, path: &str) -> Raw {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let stream = timeout(STEP, socket.connect(addr)).await.unwrap().unwrap();
    Raw::upgrade(stream, path).await
}

/// Publishes `count` binary messages of `size` bytes, each once a reader
/// that keeps up has received the one before.
async fn flood(gw: &Gateway, count: usize, size: usize) {
    let mut publisher = client(&gw.url("/topic/t")).await;
    let mut reader = client(&gw.url("/topic/t")).await;
    for i in 0..count {
        let mut msg = vec![0u8; size];
        msg[..8].copy_from_slice(&(i as u64).to_be_bytes());
        publisher.send(Message::binary(msg)).await.unwrap();
        let got = next(&mut reader).await.into_data();
        assert_eq!(
            got[..8],
            (i as u64).to_be_bytes(),
            "the reader keeping up lost a message"
        );
    }
}

/// `slow_subscriber = "close"` (the default): a subscriber over its budget
/// is closed with 1008, while one keeping up gets everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_subscriber_is_closed_with_1008() {
    let gw = gateway(&format!("{PUBSUB}outbound_budget = \"64KiB\"\n"));
    let mut slow = stalled_subscriber(gw.addr, "/topic/t").await;
    flood(&gw, 1500, 16 << 10).await;
    assert_eq!(slow.close_code().await, Some(1008));
    assert!(metric(gw.addr, "weir_pubsub_closed_slow_total").await >= 1);
    assert_eq!(metric(gw.addr, "weir_pubsub_dropped_total").await, 0);
    gw.stop();
}

/// `slow_subscriber = "drop"`: what does not fit is skipped and counted;
/// the subscriber stays open and gets later messages once it reads again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_subscriber_loses_messages_but_stays_with_drop() {
    const COUNT: usize = 1500;
    let gw = gateway(&format!(
        "{PUBSUB}outbound_budget = \"64KiB\"\nslow_subscriber = \"drop\"\n"
    ));
    let mut slow = stalled_subscriber(gw.addr, "/topic/t").await;
    flood(&gw, COUNT, 16 << 10).await;
    // Read what was kept (in order), then a message published afterwards.
    let mut publisher = client(&gw.url("/topic/t")).await;
    let drain = async {
        let mut kept = 0u64;
        let mut last = None;
        loop {
            let (first, payload) = slow.next_frame().await.expect("the subscriber was closed");
            if first == 0x81 {
                assert_eq!(payload, b"after");
                return kept;
            }
            assert_eq!(first, 0x82);
            let seq = u64::from_be_bytes(payload[..8].try_into().unwrap());
            assert!(last.is_none_or(|l| seq > l), "out of order");
            last = Some(seq);
            kept += 1;
        }
    };
    let after = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        publisher.send(Message::text("after")).await.unwrap();
    };
    let (kept, ()) = tokio::join!(drain, after);
    // Counted now: "after" came through the same mailbox behind every
    // message of the flood, so each was delivered or dropped by then.
    let dropped = metric(gw.addr, "weir_pubsub_dropped_total").await;
    assert!(dropped > 0, "nothing was dropped");
    assert_eq!(
        kept + dropped,
        COUNT as u64,
        "kept and dropped do not add up"
    );
    assert_eq!(metric(gw.addr, "weir_pubsub_closed_slow_total").await, 0);
    gw.stop();
}

/// Isolation: the same topic name on two pubsub routes, or on a pubsub
/// route and a guest chat route, never meets unless both name one
/// namespace (`topics = "…"`), and then guests' publishes reach native
/// subscribers through the same registry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_are_isolated_between_routes_unless_shared() {
    let chat = guest_support::wasm("chat");
    let chat = chat.display();
    let gw = gateway(&format!(
        "{PUBSUB}\n[[route]]\npath = \"/other/{{topic}}\"\nnative = \"pubsub\"\n\n\
         [[route]]\npath = \"/chat/{{room}}\"\nguest = \"{chat}\"\n\n\
         [[route]]\npath = \"/shared/{{topic}}\"\nnative = \"pubsub\"\ntopics = \"rooms\"\n\n\
         [[route]]\npath = \"/shared-chat/{{room}}\"\nguest = \"{chat}\"\ntopics = \"rooms\"\n"
    ));
    let mut a = client(&gw.url("/topic/lobby")).await;
    let mut a2 = client(&gw.url("/topic/lobby")).await;
    let mut other = client(&gw.url("/other/lobby")).await;
    let mut guest = client(&gw.url("/chat/lobby")).await;
    let mut guest2 = client(&gw.url("/chat/lobby")).await;
    // The guest connections are subscribed once they hear each other.
    let deadline = tokio::time::Instant::now() + STEP;
    loop {
        guest2.send(Message::text("ready?")).await.unwrap();
        if timeout(Duration::from_millis(200), guest.next())
            .await
            .is_ok()
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the chat guest never relayed"
        );
    }
    while timeout(Duration::from_millis(200), guest.next())
        .await
        .is_ok()
    {}
    for i in 0..20 {
        a.send(Message::text(format!("native {i}"))).await.unwrap();
    }
    for i in 0..20 {
        assert_eq!(next(&mut a2).await, Message::text(format!("native {i}")));
    }
    silent(&mut other, "another pubsub route heard the topic").await;
    silent(&mut guest, "a guest route heard a pubsub route's topic").await;

    // A shared namespace: the guest's publish reaches the native subscriber.
    let mut native = client(&gw.url("/shared/hall")).await;
    let mut chatter = client(&gw.url("/shared-chat/hall")).await;
    let deadline = tokio::time::Instant::now() + STEP;
    loop {
        chatter.send(Message::text("from the guest")).await.unwrap();
        if let Ok(got) = timeout(Duration::from_millis(200), native.next()).await {
            assert_eq!(got.unwrap().unwrap(), Message::text("from the guest"));
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the shared namespace did not connect"
        );
    }
    gw.stop();
}

/// 10,000 subscribers on one topic in another process: every one gets
/// every message, and the gateway's memory stays bounded (the published
/// buffers are shared, not copied per subscriber).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_subscribers_on_one_topic() {
    const SUBSCRIBERS: usize = 10_000;
    const MESSAGES: usize = 20;
    let weir = WeirProcess::start("workers = 2", PUBSUB, "warn", Stdio::null()).await;
    let addr = weir.addr;
    let limit = std::sync::Arc::new(tokio::sync::Semaphore::new(256));
    let mut opening = Vec::new();
    for _ in 0..SUBSCRIBERS {
        let limit = limit.clone();
        opening.push(tokio::spawn(async move {
            let _permit = limit.acquire().await.unwrap();
            Raw::connect(addr, "/topic/crowd").await
        }));
    }
    let mut subs = Vec::new();
    for o in opening {
        subs.push(
            timeout(STEP * 3, o)
                .await
                .expect("connecting timed out")
                .unwrap(),
        );
    }
    common::await_metric(addr, "weir_websocket_connections", SUBSCRIBERS as u64).await;
    let rss_before = rss_kib(weir.child.id());
    let mut publisher = client(&weir.url("/topic/crowd")).await;
    let payload = vec![7u8; 1024];
    for _ in 0..MESSAGES {
        publisher
            .send(Message::binary(payload.clone()))
            .await
            .unwrap();
    }
    let mut reading = Vec::new();
    for mut sub in subs {
        reading.push(tokio::spawn(async move {
            for _ in 0..MESSAGES {
                let (first, got) = sub.next_frame().await.expect("a subscriber was closed");
                assert_eq!((first, got.len()), (0x82, 1024));
            }
            sub
        }));
    }
    for r in reading {
        timeout(STEP * 3, r)
            .await
            .expect("delivery timed out")
            .unwrap();
    }
    let grown = rss_kib(weir.child.id()).saturating_sub(rss_before);
    // 20 KiB published, 200 MiB delivered: a copy per subscriber would
    // show; the shared buffers and queue entries do not.
    assert!(
        grown < 64 << 10,
        "the gateway grew by {grown} KiB delivering to 10,000 subscribers"
    );
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}
