//! `GET /metrics`: the gateway's state in the Prometheus text format.
//!
//! Only figures that cost the message path nothing are kept: gauges are read
//! from the structures that already exist (the open-connection registry, the
//! outbound queues' byte counts, the buffer pools' single-writer counters),
//! and counters move once per connection, not per message.

use std::fmt::Write;

/// `Content-Type` of the text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

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
    pub outbound_queued_bytes: usize,
    pub outbound_queued_bytes_max: usize,
    pub receive_buffer_bytes_held: usize,
    pub receive_buffer_bytes_pooled: usize,
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
    pub cluster: Option<crate::pubsub::cluster::ClusterStats>,
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

impl Snapshot {
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(1536);
        let mut metric = |name: &str, kind: &str, help: &str, value: u64| {
            // Writing to a String cannot fail.
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
            );
        };
        metric(
            "weir_websocket_connections",
            "gauge",
            "WebSocket connections open now.",
            self.websocket_connections as u64,
        );
        metric(
            "weir_tcp_connections",
            "gauge",
            "TCP connections open now, before and after their upgrade.",
            self.tcp_connections as u64,
        );
        metric(
            "weir_upgrades_total",
            "counter",
            "Upgrade requests answered with 101.",
            self.upgrades,
        );
        metric(
            "weir_refused_over_limit_total",
            "counter",
            "Requests answered 503 for being over max_connections or max_connections_per_ip.",
            self.refused_over_limit,
        );
        metric(
            "weir_accept_failures_total",
            "counter",
            "Failed accept calls (e.g. EMFILE: out of file descriptors); the worker backs off.",
            self.accept_failures,
        );
        metric(
            "weir_refused_draining_total",
            "counter",
            "Requests answered 503 because the gateway was shutting down.",
            self.refused_draining,
        );
        metric(
            "weir_refused_origin_total",
            "counter",
            "Upgrades answered 403 because the browser's Origin is not allowed on the route.",
            self.refused_origin,
        );
        metric(
            "weir_outbound_queued_bytes",
            "gauge",
            "Bytes queued toward clients by relay partners, guests and publishers, not yet written.",
            self.outbound_queued_bytes as u64,
        );
        metric(
            "weir_outbound_queued_bytes_max",
            "gauge",
            "The most bytes queued toward any one client.",
            self.outbound_queued_bytes_max as u64,
        );
        metric(
            "weir_receive_buffer_bytes_held",
            "gauge",
            "Bytes of receive buffers held by connections with bytes in flight.",
            self.receive_buffer_bytes_held as u64,
        );
        metric(
            "weir_receive_buffer_bytes_pooled",
            "gauge",
            "Bytes of free receive buffers kept for reuse.",
            self.receive_buffer_bytes_pooled as u64,
        );
        metric(
            "weir_draining",
            "gauge",
            "1 while the gateway is shutting down.",
            u64::from(self.draining),
        );
        if let Some(heap) = self.heap {
            metric(
                "weir_heap_bytes_in_use",
                "gauge",
                "Bytes allocated from the C heap and not yet freed (wasm memories are not on it).",
                heap.in_use,
            );
            metric(
                "weir_heap_bytes_free_retained",
                "gauge",
                "Free bytes the C allocator keeps in its arenas instead of returning them.",
                heap.free_retained,
            );
        }
        metric(
            "weir_log_lines_lost_total",
            "counter",
            "Gateway log lines dropped because stderr was not taking them fast enough.",
            self.log_lines_lost,
        );
        metric(
            "weir_pubsub_dropped_total",
            "counter",
            "Published messages not delivered to subscribers over their outbound_budget (slow_subscriber = \"drop\").",
            self.pubsub_dropped,
        );
        metric(
            "weir_pubsub_closed_slow_total",
            "counter",
            "Subscribers closed with 1008 for being over their outbound_budget (slow_subscriber = \"close\").",
            self.pubsub_closed_slow,
        );
        if let Some(c) = &self.cluster {
            metric(
                "weir_cluster_connected",
                "gauge",
                "1 while the link to Redis is up.",
                u64::from(c.connected),
            );
            metric(
                "weir_cluster_subscribed_channels",
                "gauge",
                "Redis channels subscribed now: the topics with local subscribers.",
                c.subscribed as u64,
            );
            metric(
                "weir_cluster_sent_total",
                "counter",
                "Publishes handed to Redis for the other nodes.",
                c.sent,
            );
            metric(
                "weir_cluster_received_total",
                "counter",
                "Other nodes' publishes received and delivered here.",
                c.received,
            );
            metric(
                "weir_cluster_lost_total",
                "counter",
                "Publishes that could not cross to other nodes (Redis unreachable or failing, or the queue to it full).",
                c.lost,
            );
            metric(
                "weir_cluster_link_failures_total",
                "counter",
                "Times the link to Redis failed (each followed by reconnecting with backoff).",
                c.link_failures,
            );
        }
        type Figure = fn(&GuestRouteStats) -> u64;
        let per_route: [(&str, &str, Figure); 4] = [
            (
                "weir_guest_log_dropped_lines_total",
                "Guest log lines dropped for being over the route's log_rate or log_bytes.",
                |d| d.log_dropped_lines,
            ),
            (
                "weir_guest_log_dropped_bytes_total",
                "Bytes of guest log lines dropped over the route's budget.",
                |d| d.log_dropped_bytes,
            ),
            (
                "weir_guest_deadline_trips_total",
                "Guest batches that ran into the route's timeout (their connections closed 1011).",
                |d| d.deadline_trips,
            ),
            (
                "weir_guest_backoff_refused_total",
                "Upgrades refused with 429 to client addresses that kept tripping the route's timeout.",
                |d| d.backoff_refused,
            ),
        ];
        for (name, help, value) in per_route {
            if self.guest_routes.is_empty() {
                break;
            }
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for d in &self.guest_routes {
                let route = d.route.replace('\\', "\\\\").replace('"', "\\\"");
                let _ = writeln!(out, "{name}{{route=\"{route}\"}} {}", value(d));
            }
        }
        out
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
            outbound_queued_bytes: 8,
            outbound_queued_bytes_max: 9,
            receive_buffer_bytes_held: 10,
            receive_buffer_bytes_pooled: 11,
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
            }],
            pubsub_dropped: 20,
            pubsub_closed_slow: 21,
            cluster: Some(crate::pubsub::cluster::ClusterStats {
                connected: true,
                subscribed: 22,
                sent: 23,
                received: 24,
                lost: 25,
                link_failures: 26,
            }),
        };
        let body = snap.render();
        let expect = [
            ("weir_websocket_connections", 3),
            ("weir_tcp_connections", 4),
            ("weir_accept_failures_total", 23),
            ("weir_upgrades_total", 5),
            ("weir_refused_over_limit_total", 6),
            ("weir_refused_draining_total", 7),
            ("weir_refused_origin_total", 19),
            ("weir_outbound_queued_bytes", 8),
            ("weir_outbound_queued_bytes_max", 9),
            ("weir_receive_buffer_bytes_held", 10),
            ("weir_receive_buffer_bytes_pooled", 11),
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
        ];
        for (name, value) in expect {
            assert_eq!(read(&body, name), Some(value), "{name} in\n{body}");
            let family = name.split('{').next().unwrap_or(name);
            assert!(
                body.contains(&format!("# TYPE {family} ")),
                "{name} has a TYPE line"
            );
        }
        assert_eq!(read(&body, "weir_nothing"), None);
        let without_heap = Snapshot {
            heap: None,
            ..snap.clone()
        }
        .render();
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
