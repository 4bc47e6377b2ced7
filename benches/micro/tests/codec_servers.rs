//! The servers of the codec tables answer correctly: every library's echo,
//! receive loop and send path, checked byte for byte against the
//! hand-written client, through the same functions the bench times (with
//! small counts; nothing here is timed).

#[path = "../codec_servers.rs"]
mod codec_servers;

use bytes::Bytes;
use codec_servers::*;
use weir_ws::frame::OpCode;

/// Each server echoes text of every table size, the header length forms
/// of RFC 6455 §5.2 included (64 KiB takes the 8-byte form); the warm-up
/// round trips compare the whole echo.
#[test]
fn every_server_echoes_each_size() {
    for server in SERVERS {
        for size in [64, 125, 126, 512, 4096, 65535, 64 * 1024] {
            let lat = round_trips(server, size, 20, 5);
            assert_eq!(lat.len(), 5, "{} at {size} B", server.name());
        }
    }
}

/// Each server's receive loop sees every message of a burst, intact (the
/// burst checks each payload and the count).
#[test]
fn every_server_receives_a_whole_burst() {
    for server in SERVERS {
        let lat = burst(server, 512, 3_000);
        assert!(lat.windows(2).all(|w| w[0] <= w[1]), "{}", server.name());
        assert!(
            receive_rate(server, 512, 10, 3_000).per_cpu_s > 0.0,
            "{}",
            server.name()
        );
    }
}

/// Each server's send path writes exactly the expected frames, in order.
#[test]
fn every_server_sends_exact_frames() {
    let text = Bytes::from(payload(512));
    let want = server_frame(OpCode::Text, &text).repeat(100);
    for server in SERVERS {
        let rt = runtime();
        let sink = Discard {
            bytes: 0,
            kept: Some(Vec::new()),
        };
        let (sink, _) = rt.block_on(send_texts(server, sink, &text, 0, 100));
        assert!(
            sink.kept.as_deref() == Some(&want[..]),
            "{} sent other bytes",
            server.name()
        );
        assert!(
            send_rate(server, 512, 10, 100).per_wall_s > 0.0,
            "{}",
            server.name()
        );
    }
}

/// Sequential round trips at the throughput size complete for every
/// server, and the client's frames are masked (RFC 6455 §5.3).
#[test]
fn round_trips_complete_for_every_server() {
    for server in SERVERS {
        assert!(
            echo_rate(server, 512, 10, 500).per_cpu_s > 0.0,
            "{}",
            server.name()
        );
    }
    let frame = client_frame(OpCode::Text, b"abc");
    assert_eq!(frame[0], 0x81);
    assert_eq!(frame[1], 0x80 | 3, "masked, 3 bytes");
    assert!(now_ns() <= now_ns());
    assert!(thread_cpu() <= thread_cpu());
}
