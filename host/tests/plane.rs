//! The workers' planes (`[server] io = "epoll"`, `reactor/plane.rs`):
//! which connections run there, and that one leaves it whichever way it
//! ends (its close, its client gone while its reads were blocked). Every
//! other connection-level test runs on the planes too when CI sets
//! `WEIR_TEST_IO=epoll`.

mod common;

use common::{await_metric, client, metric, next, Gateway, Raw};
use futures_util::SinkExt;
use tokio_tungstenite::tungstenite::Message;
use weir_config::{Config, Io};

fn gateway(io: Io) -> Gateway {
    let mut config = Config::builtin_default();
    config.server.workers = 2;
    config.server.io = io;
    Gateway::start_exact(config)
}

/// On `epoll`, echo and relay connections are the planes' while they
/// are open and leave when they close; on `tasks` no connection is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_connections_run_on_the_plane_only_with_epoll() {
    for io in [Io::Epoll, Io::Tasks] {
        let gw = gateway(io);
        let mut echo = client(&gw.url("/echo")).await;
        let mut a = client(&gw.url("/relay")).await;
        let mut b = client(&gw.url("/relay")).await;
        echo.send(Message::text("there and back")).await.unwrap();
        assert_eq!(next(&mut echo).await, Message::text("there and back"));
        a.send(Message::text("across")).await.unwrap();
        assert_eq!(next(&mut b).await, Message::text("across"));
        let want = if io == Io::Epoll { 3 } else { 0 };
        await_metric(gw.addr, "weir_plane_connections", want).await;
        assert_eq!(metric(gw.addr, "weir_websocket_connections").await, 3);
        echo.close(None).await.unwrap();
        a.close(None).await.unwrap();
        await_metric(gw.addr, "weir_plane_connections", 0).await;
        await_metric(gw.addr, "weir_websocket_connections", 0).await;
        drop(b);
        gw.stop();
    }
}

/// A relay connection waits for its partner with its reads blocked (its
/// behaviour lent to a task, see `plane/conn.rs`): a client that hangs
/// up meanwhile is noticed and its slot freed, and it is never paired
/// with the next client, who gets the one after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_gone_while_its_reads_are_blocked_leaves_the_plane() {
    let gw = gateway(Io::Epoll);
    let lonely = Raw::connect(gw.addr, "/relay").await;
    await_metric(gw.addr, "weir_plane_connections", 1).await;
    drop(lonely);
    await_metric(gw.addr, "weir_plane_connections", 0).await;
    await_metric(gw.addr, "weir_websocket_connections", 0).await;
    let mut a = client(&gw.url("/relay")).await;
    let mut b = client(&gw.url("/relay")).await;
    a.send(Message::text("to b")).await.unwrap();
    assert_eq!(next(&mut b).await, Message::text("to b"));
    b.send(Message::binary(vec![7u8; 200_000])).await.unwrap();
    assert_eq!(next(&mut a).await, Message::binary(vec![7u8; 200_000]));
    await_metric(gw.addr, "weir_plane_connections", 2).await;
    a.close(None).await.unwrap();
    await_metric(gw.addr, "weir_plane_connections", 0).await;
    gw.stop();
}
