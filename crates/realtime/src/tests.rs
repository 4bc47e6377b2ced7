//! The core over real topic namespaces: offsets, recovery and the
//! exactly-once hand-over between a subscribe's reply and live delivery.

use super::*;
use crate::here::SWEEP_WHEN_FULL_EVERY;
use weir_pubsub::{Fanout, LocalBroker};
use weir_reactor::outbound::OutMsg;
use weir_reactor::registry::conn_id;

/// Frames a publication as its offset and data, so tests can read them back.
struct Plain;

impl Framer for Plain {
    fn publication(&self, _: &str, p: &Publication) -> Bytes {
        Bytes::from(format!("{}:{}", p.offset, String::from_utf8_lossy(&p.data)))
    }
    fn join_leave(&self, _: &str, info: &ClientInfo, join: bool) -> Option<Bytes> {
        Some(Bytes::from(format!(
            "{}:{}",
            if join { "join" } else { "leave" },
            info.client
        )))
    }
}

fn hub(options: NamespaceOptions) -> (Arc<Realtime>, Arc<Topics>) {
    let hub = Realtime::new(Namespaces::new(HashMap::from([(
        "chat".to_string(),
        options,
    )])));
    let topics = Topics::new("rt", Arc::new(Fanout::new(1)), Arc::new(LocalBroker));
    hub.attach(&topics, Arc::new(Plain));
    (hub, topics)
}

fn history_options() -> NamespaceOptions {
    NamespaceOptions {
        history_size: 3,
        history_ttl: Duration::from_secs(60),
        force_recovery: true,
        presence: true,
        join_leave: true,
        presence_max: 2,
        ..Default::default()
    }
}

fn member(client: &str) -> Arc<ClientInfo> {
    Arc::new(ClientInfo {
        client: client.into(),
        user: "u".into(),
        conn_info: None,
        chan_info: None,
    })
}

fn received(out: &Outbound) -> Vec<String> {
    let mut got = Vec::new();
    while let Some(msg) = out.try_recv() {
        if let OutMsg::Frames(f) = msg {
            got.push(String::from_utf8_lossy(&f).into_owned());
        }
    }
    got
}

fn publish(hub: &Realtime, data: &str) -> StreamPosition {
    hub.publish_here(
        "chat:a",
        Bytes::copy_from_slice(data.as_bytes()),
        None,
        None,
    )
    .unwrap()
}

/// A publish still waiting in a worker's mailbox when a client subscribes
/// with recovery reaches it once (in the reply), not twice; the next
/// publish reaches it live.
#[test]
fn a_recovering_subscriber_gets_each_publication_exactly_once() {
    let (hub, topics) = hub(history_options());
    let (conn, out) = (conn_id(0, 1), Arc::new(Outbound::new(1 << 20)));
    let first = publish(&hub, "p1");
    assert_eq!(first.offset, 1);
    publish(&hub, "p2");
    // A first subscriber makes the topic exist, so deliveries queue up.
    let (other, other_out) = (conn_id(0, 2), Arc::new(Outbound::new(1 << 20)));
    fn join<'a>(
        topics: &'a Arc<Topics>,
        conn: ConnId,
        outbound: &'a Arc<Outbound>,
        client: &str,
        recover: Option<StreamPosition>,
    ) -> Join<'a> {
        Join {
            channel: "chat:a",
            topics,
            conn,
            outbound,
            member: member(client),
            recoverable: true,
            recover,
        }
    }
    hub.subscribe_here(join(&topics, other, &other_out, "c2", None), false, |_| {
        Bytes::from_static(b"reply")
    })
    .unwrap();
    publish(&hub, "p3"); // waits in the mailbox
    hub.subscribe_here(
        join(&topics, conn, &out, "c1", Some(first.clone())),
        false,
        |found| {
            let r = found.recovery.as_ref().unwrap();
            assert!(r.recovered);
            let offsets: Vec<u64> = r.publications.iter().map(|p| p.offset).collect();
            Bytes::from(format!("reply {offsets:?} top {}", found.top.offset))
        },
    )
    .unwrap();
    publish(&hub, "p4");
    topics.fanout().deliver_waiting(0);
    assert_eq!(
        received(&out),
        // Join/leave pushes are not positioned: c2's, still queued when c1
        // subscribed, reaches c1 too.
        ["reply [2, 3] top 3", "join:c2", "join:c1", "4:p4"],
        "p3 came in the reply only"
    );
    assert_eq!(
        received(&other_out),
        ["reply", "join:c2", "3:p3", "join:c1", "4:p4"]
    );
}

#[test]
fn recovery_past_the_window_or_from_another_epoch_is_not_recovered() {
    let (hub, topics) = hub(history_options());
    let start = publish(&hub, "p1");
    for i in 2..=6 {
        publish(&hub, &format!("p{i}"));
    }
    let out = Arc::new(Outbound::new(1 << 20));
    let mut recovered = None;
    hub.subscribe_here(
        Join {
            channel: "chat:a",
            topics: &topics,
            conn: conn_id(0, 1),
            outbound: &out,
            member: member("c1"),
            recoverable: true,
            recover: Some(start.clone()),
        },
        false,
        |found| {
            recovered = found.recovery.as_ref().map(|r| r.recovered);
            Bytes::new()
        },
    )
    .unwrap();
    assert_eq!(recovered, Some(false), "history holds 4..6 only");
    let refused = hub.subscribe_here(
        Join {
            channel: "chat:a",
            topics: &topics,
            conn: conn_id(0, 2),
            outbound: &out,
            member: member("c2"),
            recoverable: true,
            recover: Some(StreamPosition {
                offset: 5,
                epoch: "elsewhen".into(),
            }),
        },
        true,
        |_| Bytes::new(),
    );
    assert_eq!(
        refused,
        Err(RealtimeError::History(HistoryError::UnrecoverablePosition))
    );
}

#[test]
fn presence_max_join_leave_and_idempotent_publishes() {
    let (hub, topics) = hub(history_options());
    let out = Arc::new(Outbound::new(1 << 20));
    for (seq, client) in [(1, "c1"), (2, "c2")] {
        hub.subscribe_here(
            Join {
                channel: "chat:a",
                topics: &topics,
                conn: conn_id(0, seq),
                outbound: &out,
                member: member(client),
                recoverable: false,
                recover: None,
            },
            false,
            |_| Bytes::new(),
        )
        .unwrap();
    }
    let third = hub.subscribe_here(
        Join {
            channel: "chat:a",
            topics: &topics,
            conn: conn_id(0, 3),
            outbound: &out,
            member: member("c3"),
            recoverable: false,
            recover: None,
        },
        false,
        |_| Bytes::new(),
    );
    assert_eq!(third, Err(PresenceError::PresenceFull.into()));
    assert_eq!(hub.presence_stats_here("chat:a").unwrap().num_clients, 2);
    hub.unsubscribe_here("chat:a", &topics, conn_id(0, 1), "c1");
    assert_eq!(hub.presence_here("chat:a").unwrap().len(), 1);
    assert_eq!(hub.channels(), [("chat:a".to_string(), 1)]);

    let key = Some("order-1");
    let a = hub
        .publish_here("chat:a", Bytes::from_static(b"1"), None, key)
        .unwrap();
    let b = hub
        .publish_here("chat:a", Bytes::from_static(b"1"), None, key)
        .unwrap();
    assert_eq!(a, b, "a repeated idempotency key publishes once");
    let (pubs, top) = hub
        .history_here("chat:a", &HistoryQuery::default())
        .unwrap();
    assert_eq!((pubs.len(), top.offset), (1, 1));
    assert_eq!(
        hub.presence_here("news:x"),
        Err(RealtimeError::ChannelName(
            ChannelNameError::UnknownNamespace
        ))
    );
}

/// A namespace holds at most `max_channels` channels: one more is refused
/// (publish, subscribe or history read alike) until idle channels age out,
/// while the channels it holds keep working.
#[test]
fn a_namespace_holds_at_most_max_channels() {
    let (hub, topics) = hub(NamespaceOptions {
        history_size: 10,
        history_ttl: Duration::from_millis(50),
        max_channels: 3,
        ..Default::default()
    });
    let data = || Bytes::from_static(b"{}");
    for n in 1..=3 {
        hub.publish_here(&format!("chat:{n}"), data(), None, None)
            .unwrap();
    }
    assert_eq!(
        hub.publish_here("chat:4", data(), None, None),
        Err(RealtimeError::TooManyChannels)
    );
    assert_eq!(
        hub.history_here("chat:5", &HistoryQuery::default()).err(),
        Some(RealtimeError::TooManyChannels)
    );
    let out = Arc::new(Outbound::new(1 << 20));
    let join = hub.subscribe_here(
        Join {
            channel: "chat:6",
            topics: &topics,
            conn: conn_id(0, 1),
            outbound: &out,
            member: member("c1"),
            recoverable: false,
            recover: None,
        },
        false,
        |_| Bytes::new(),
    );
    assert_eq!(join, Err(RealtimeError::TooManyChannels));
    let again = hub.publish_here("chat:2", data(), None, None).unwrap();
    assert_eq!(again.offset, 2, "a channel held keeps its stream");
    assert_eq!(hub.counts().0, 3);

    // Their history ages out; the next refusal's sweep (at most one a
    // second) frees them.
    std::thread::sleep(SWEEP_WHEN_FULL_EVERY + Duration::from_millis(100));
    let fresh = hub.publish_here("chat:4", data(), None, None).unwrap();
    assert_eq!(fresh.offset, 1);
    assert_eq!(hub.counts().0, 1);
}
