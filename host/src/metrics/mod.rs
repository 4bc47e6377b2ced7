//! `GET /metrics`: the gateway's state in the Prometheus text format.
//!
//! Only figures that cost the message path nothing are kept: gauges are read
//! from the structures that already exist (the open-connection registry, the
//! outbound queues' byte counts, the buffer pools' single-writer counters),
//! and counters move once per connection, not per message.

mod render;

use weir_reactor::stats::{
    ConnTotals, GuestTotals, BATCH_EVENTS_BUCKETS, CALL_MICROS_BUCKETS, CLOSE_CODES, FAULT_CAUSES,
    OVERLOAD_REASONS,
};

/// `Content-Type` of the text exposition format (version 0.0.4).
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// One reading of the gateway, taken when `/metrics` is asked for.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub websocket_connections: usize,
    pub tcp_connections: usize,
    pub upgrades: u64,
    pub refused_over_limit: u64,
    /// Failed `accept` calls (e.g. out of descriptors).
    pub accept_failures: u64,
    pub refused_draining: u64,
    pub refused_origin: u64,
    /// TLS handshakes that failed or ran out of `handshake_timeout`
    /// (plaintext on the TLS port, bad hellos, stalled clients).
    pub tls_handshake_failures: u64,
    pub outbound_queued_bytes: usize,
    pub outbound_queued_bytes_max: usize,
    pub receive_buffer_bytes_held: usize,
    pub receive_buffer_bytes_pooled: usize,
    /// WebSocket connections on the workers' planes (`[server] io`).
    pub plane_connections: usize,
    pub draining: bool,
    /// The allocator's own figures; `None` where it gives none (not glibc).
    pub heap: Option<Heap>,
    /// Gateway log lines dropped because stderr was not keeping up.
    pub log_lines_lost: u64,
    /// Per guest route figures.
    pub guest_routes: Vec<GuestRouteStats>,
    /// Publishes not delivered to `slow_subscriber = "drop"` subscribers.
    pub pubsub_dropped: u64,
    /// Subscribers closed with 1008 for falling behind.
    pub pubsub_closed_slow: u64,
    /// The Redis link, when the routes file has a `[cluster]`.
    pub cluster: Option<weir_pubsub::cluster::ClusterStats>,
    /// Every route's connection and message counters (and its guest's).
    pub routes: Vec<RouteFigures>,
}

/// One route's counters, summed over workers.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RouteFigures {
    pub route: String,
    pub conns: ConnTotals,
    pub guest: Option<GuestFigures>,
    /// The kind's own figures (a pusher route's per-app counters).
    pub kind: Vec<weir_reactor::kind::KindFigure>,
}

/// A guest route's versions and deploys.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct GuestFigures {
    /// The version serving now.
    pub serving: u64,
    /// The serving and kept versions' counters.
    pub versions: Vec<(u64, GuestTotals)>,
    pub deploys: u64,
    pub failed_deploys: u64,
}

/// One guest route's counters.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct GuestRouteStats {
    pub route: String,
    /// Guest log lines and bytes dropped over the route's budget.
    pub log_dropped_lines: u64,
    pub log_dropped_bytes: u64,
    /// Batches that ran into the route's deadline.
    pub deadline_trips: u64,
    /// Upgrades refused (429) to addresses that kept tripping it.
    pub backoff_refused: u64,
    /// Subscribes and publishes of a `realtime = true` route refused by
    /// the real-time core (bad channel, not JSON, Redis down).
    pub realtime_refused: u64,
    /// Key-value writes refused, by reason (in `KvErrorReason::ALL` order).
    pub kv_refused: [u64; 5],
    /// The route's key-value store, if it has one.
    pub kv: Option<KvUsage>,
}

/// What a key-value store holds, as this node counts it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct KvUsage {
    pub keys: u64,
    /// Key plus value bytes (what `kv_max_bytes` bounds).
    pub bytes: u64,
    /// Bytes of writes not yet committed or sent to Redis.
    pub queued_bytes: u64,
}

/// What the C allocator (glibc malloc, which weir uses) holds: bytes handed
/// out and not yet freed, and free bytes it keeps instead of returning them
/// to the system. When RSS creeps while `in_use` stays flat, the growth is
/// the allocator's retention (fragmentation), not a leak.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Heap {
    pub in_use: u64,
    pub free_retained: u64,
}

impl Heap {
    /// Reads glibc's counters over all arenas. `mallinfo2` locks each arena
    /// in turn, so this is for a scrape, never for the message path.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    pub fn read() -> Option<Heap> {
        // SAFETY: mallinfo2 takes no arguments and returns a plain struct.
        let info = unsafe { libc::mallinfo2() };
        Some(Heap {
            // Chunks in use in the arenas, plus blocks mmapped on their own.
            in_use: (info.uordblks + info.hblkhd) as u64,
            free_retained: info.fordblks as u64,
        })
    }

    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    pub fn read() -> Option<Heap> {
        None
    }
}

/// Reads one metric's value out of a `/metrics` body (for tests and tools).
pub fn read(body: &str, name: &str) -> Option<u64> {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_figure_is_rendered_and_read_back() {
        let snap = Snapshot {
            websocket_connections: 3,
            tcp_connections: 4,
            upgrades: 5,
            refused_over_limit: 6,
            accept_failures: 23,
            refused_draining: 7,
            refused_origin: 19,
            tls_handshake_failures: 29,
            outbound_queued_bytes: 8,
            outbound_queued_bytes_max: 9,
            receive_buffer_bytes_held: 10,
            receive_buffer_bytes_pooled: 11,
            plane_connections: 77,
            draining: true,
            heap: Some(Heap {
                in_use: 12,
                free_retained: 13,
            }),
            log_lines_lost: 14,
            guest_routes: vec![GuestRouteStats {
                route: "/say \"hi\"".into(),
                log_dropped_lines: 15,
                log_dropped_bytes: 16,
                deadline_trips: 17,
                backoff_refused: 18,
                realtime_refused: 21,
                kv_refused: [1, 2, 3, 4, 5],
                kv: Some(KvUsage {
                    keys: 6,
                    bytes: 7,
                    queued_bytes: 8,
                }),
            }],
            pubsub_dropped: 20,
            pubsub_closed_slow: 21,
            cluster: Some(weir_pubsub::cluster::ClusterStats {
                connected: true,
                subscribed: 22,
                sent: 23,
                received: 24,
                lost: 25,
                link_failures: 26,
                resubscribed: 27,
                received_dropped: 28,
            }),
            routes: vec![RouteFigures {
                route: "/say \"hi\"".into(),
                conns: ConnTotals {
                    accepted: 30,
                    closed: 10,
                    messages_in: 31,
                    bytes_in: 32,
                    messages_out: 41,
                    bytes_out: 42,
                    refused_origin: 43,
                    overload: [45, 46, 47, 48, 49, 50, 51],
                    closes: [0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
                },
                guest: Some(GuestFigures {
                    serving: 2,
                    versions: vec![
                        (
                            2,
                            GuestTotals {
                                calls: 33,
                                call_micros_sum: 2_000_000,
                                call_micros: [1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
                                messages_out: 34,
                                faults: [0, 35, 0, 0, 0, 0],
                                ..GuestTotals::default()
                            },
                        ),
                        (1, GuestTotals::default()),
                    ],
                    deploys: 36,
                    failed_deploys: 37,
                }),
                kind: vec![weir_reactor::kind::KindFigure {
                    name: "weir_pusher_client_events_total",
                    counter: true,
                    help: "Client events.",
                    labels: vec![("app", "a\"1".into())],
                    value: 44,
                }],
            }],
        };
        let body = snap.clone().render();
        let expect = [
            ("weir_websocket_connections", 3),
            ("weir_tcp_connections", 4),
            ("weir_accept_failures_total", 23),
            ("weir_upgrades_total", 5),
            ("weir_refused_over_limit_total", 6),
            ("weir_refused_draining_total", 7),
            ("weir_refused_origin_total", 19),
            ("weir_tls_handshake_failures_total", 29),
            ("weir_outbound_queued_bytes", 8),
            ("weir_outbound_queued_bytes_max", 9),
            ("weir_receive_buffer_bytes_held", 10),
            ("weir_receive_buffer_bytes_pooled", 11),
            ("weir_plane_connections", 77),
            ("weir_draining", 1),
            ("weir_heap_bytes_in_use", 12),
            ("weir_heap_bytes_free_retained", 13),
            ("weir_log_lines_lost_total", 14),
            ("weir_pubsub_dropped_total", 20),
            ("weir_pubsub_closed_slow_total", 21),
            ("weir_cluster_connected", 1),
            ("weir_cluster_subscribed_channels", 22),
            ("weir_cluster_sent_total", 23),
            ("weir_cluster_received_total", 24),
            ("weir_cluster_lost_total", 25),
            ("weir_cluster_link_failures_total", 26),
            ("weir_cluster_resubscribed_total", 27),
            ("weir_cluster_received_dropped_total", 28),
            (
                r#"weir_guest_log_dropped_lines_total{route="/say \"hi\""}"#,
                15,
            ),
            (
                r#"weir_guest_log_dropped_bytes_total{route="/say \"hi\""}"#,
                16,
            ),
            (
                r#"weir_guest_deadline_trips_total{route="/say \"hi\""}"#,
                17,
            ),
            (
                r#"weir_guest_backoff_refused_total{route="/say \"hi\""}"#,
                18,
            ),
            (
                r#"weir_guest_realtime_refused_total{route="/say \"hi\""}"#,
                21,
            ),
            (
                r#"weir_kv_writes_refused_total{route="/say \"hi\"",reason="max-bytes"}"#,
                1,
            ),
            (
                r#"weir_kv_writes_refused_total{route="/say \"hi\"",reason="no-store"}"#,
                5,
            ),
            (r#"weir_kv_keys{route="/say \"hi\""}"#, 6),
            (r#"weir_kv_bytes{route="/say \"hi\""}"#, 7),
            (r#"weir_kv_queued_bytes{route="/say \"hi\""}"#, 8),
            (r#"weir_route_connections{route="/say \"hi\""}"#, 20),
            (
                r#"weir_pusher_client_events_total{route="/say \"hi\"",app="a\"1"}"#,
                44,
            ),
            (
                r#"weir_route_connections_accepted_total{route="/say \"hi\""}"#,
                30,
            ),
            (r#"weir_route_messages_in_total{route="/say \"hi\""}"#, 31),
            (r#"weir_route_bytes_in_total{route="/say \"hi\""}"#, 32),
            (
                r#"weir_route_native_messages_out_total{route="/say \"hi\""}"#,
                41,
            ),
            (
                r#"weir_route_refused_origin_total{route="/say \"hi\""}"#,
                43,
            ),
            (
                r#"weir_route_native_bytes_out_total{route="/say \"hi\""}"#,
                42,
            ),
            (
                r#"weir_route_closes_total{route="/say \"hi\"",code="1001"}"#,
                9,
            ),
            (
                r#"weir_route_closes_total{route="/say \"hi\"",code="other"}"#,
                1,
            ),
            (
                r#"weir_route_overload_total{route="/say \"hi\"",reason="upgrade_rate_per_ip"}"#,
                45,
            ),
            (
                r#"weir_route_overload_total{route="/say \"hi\"",reason="byte_rate_closed"}"#,
                51,
            ),
            (r#"weir_guest_version{route="/say \"hi\""}"#, 2),
            (r#"weir_guest_deploys_total{route="/say \"hi\""}"#, 36),
            (
                r#"weir_guest_deploys_failed_total{route="/say \"hi\""}"#,
                37,
            ),
            (
                r#"weir_guest_calls_total{route="/say \"hi\"",version="2"}"#,
                33,
            ),
            (
                r#"weir_guest_calls_total{route="/say \"hi\"",version="1"}"#,
                0,
            ),
            (
                r#"weir_guest_messages_out_total{route="/say \"hi\"",version="2"}"#,
                34,
            ),
            (
                r#"weir_guest_faults_total{route="/say \"hi\"",version="2",cause="deadline"}"#,
                35,
            ),
            (
                r#"weir_guest_call_duration_seconds_bucket{route="/say \"hi\"",version="2",le="1e-05"}"#,
                1,
            ),
            (
                r#"weir_guest_call_duration_seconds_bucket{route="/say \"hi\"",version="2",le="+Inf"}"#,
                3,
            ),
            (
                r#"weir_guest_call_duration_seconds_count{route="/say \"hi\"",version="2"}"#,
                3,
            ),
        ];
        for (name, value) in expect {
            assert_eq!(read(&body, name), Some(value), "{name} in\n{body}");
            let family = name.split('{').next().unwrap_or(name);
            let family = ["_bucket", "_count"]
                .iter()
                .find_map(|suffix| family.strip_suffix(suffix))
                .unwrap_or(family);
            assert!(
                body.contains(&format!("# TYPE {family} ")),
                "{name} has a TYPE line"
            );
        }
        assert_eq!(read(&body, "weir_nothing"), None);
        let without_heap = Snapshot { heap: None, ..snap }.render();
        assert_eq!(read(&without_heap, "weir_heap_bytes_in_use"), None);
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn heap_in_use_follows_an_allocation() {
        let before = Heap::read().expect("glibc gives heap figures").in_use;
        // Zeroed: mapped, not touched. Other tests run alongside, so the
        // check leaves them half of it to free meanwhile.
        let block = vec![0u8; 256 << 20];
        let during = Heap::read().unwrap().in_use;
        assert!(
            during >= before + (128 << 20),
            "256 MiB more in use: {before} -> {during}"
        );
        drop(std::hint::black_box(block));
    }
}
