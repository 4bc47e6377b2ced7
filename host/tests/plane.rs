//! The workers' planes (`[server] io = "epoll"`, `reactor/plane.rs`):
//! which connections run there, and that one leaves it whichever way it
//! ends (its close, its client gone while its reads were blocked). Every
//! other connection-level test runs on the planes too when CI sets
//! `WEIR_TEST_IO=epoll`.

mod common;

use common::{await_metric, client, frame, metric, next, Gateway, Raw};
use futures_util::SinkExt;
use tokio::io::AsyncWriteExt;
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

/// Regression: a client's last data and its end arriving together (one
/// segment: data, then FIN) are reported by one edge of the plane's
/// epoll. The read that takes the data is short, which used to mean
/// "drained": the end was never read, no new edge came for it, and the
/// connection stayed open for its idle timeout (a relay partner waited
/// 30 s for its 1001). The end is now read at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_end_that_comes_with_its_last_data_is_read() {
    let gw = gateway(Io::Epoll);
    for round in 0..10 {
        let mut raw = Raw::connect(gw.addr, "/echo").await;
        // Corked, the frame waits in the client's kernel and leaves with
        // the FIN the shutdown sends.
        socket2::SockRef::from(&raw.stream)
            .set_tcp_cork(true)
            .unwrap();
        let words = format!("last words {round}");
        raw.send(&frame(0x81, words.as_bytes())).await;
        raw.stream.shutdown().await.unwrap();
        let (first, payload) = raw.next_frame().await.expect("the echo");
        assert_eq!((first, payload), (0x81, words.into_bytes()));
        // Then the server's end: `next_frame` fails on a read timeout.
        assert_eq!(
            raw.next_frame().await,
            None,
            "{round}: a frame after the echo"
        );
    }
    await_metric(gw.addr, "weir_plane_connections", 0).await;
    gw.stop();
}
