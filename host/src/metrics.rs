//! `GET /metrics`: the gateway's state in the Prometheus text format.
//!
//! Only figures that cost the message path nothing are kept: gauges are read
//! from the structures that already exist (the open-connection registry, the
//! outbound queues' byte counts, the buffer pools' single-writer counters),
//! and counters move once per connection, not per message.

use std::fmt::Write;
use weir_reactor::stats::{
    ConnTotals, GuestTotals, BATCH_EVENTS_BUCKETS, CALL_MICROS_BUCKETS, CLOSE_CODES, FAULT_CAUSES,
};

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
    /// TLS handshakes that failed or ran out of `handshake_timeout`
    /// (plaintext on the TLS port, bad hellos, stalled clients).
    pub tls_handshake_failures: u64,
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
            "weir_tls_handshake_failures_total",
            "counter",
            "TLS handshakes that failed or did not finish within handshake_timeout; the connection was dropped.",
            self.tls_handshake_failures,
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
            metric(
                "weir_cluster_resubscribed_total",
                "counter",
                "Subscriptions a Redis Cluster shard ended because the channel's slot moved (resharding), made again on its new shard.",
                c.resubscribed,
            );
            metric(
                "weir_cluster_received_dropped_total",
                "counter",
                "Other nodes' publishes dropped because this node's queue of received messages was full.",
                c.received_dropped,
            );
        }
        type Figure = fn(&GuestRouteStats) -> u64;
        let per_route: [(&str, &str, Figure); 5] = [
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
            (
                "weir_guest_realtime_refused_total",
                "Subscribes and publishes of a realtime = true guest route refused by the real-time core (bad channel, data not JSON, Redis down).",
                |d| d.realtime_refused,
            ),
        ];
        self.render_routes(&mut out);
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
        self.render_kv(&mut out);
        out
    }

    /// The key-value families: refusals by route and reason, and each
    /// store's size and queue.
    fn render_kv(&self, out: &mut String) {
        if self.guest_routes.is_empty() {
            return;
        }
        let name = "weir_kv_writes_refused_total";
        family(
            out,
            name,
            "counter",
            "Guest key-value writes refused and not applied (the guest got a kv-error event), by reason.",
        );
        for d in &self.guest_routes {
            for (reason, n) in weir_abi::KvErrorReason::ALL.iter().zip(d.kv_refused) {
                let _ = writeln!(
                    out,
                    "{name}{{route=\"{}\",reason=\"{}\"}} {n}",
                    label(&d.route),
                    reason.as_str()
                );
            }
        }
        type Usage = fn(&KvUsage) -> u64;
        let gauges: [(&str, &str, Usage); 3] = [
            (
                "weir_kv_keys",
                "Keys in the route's key-value store.",
                |u| u.keys,
            ),
            (
                "weir_kv_bytes",
                "Key plus value bytes in the route's key-value store (bounded by kv_max_bytes).",
                |u| u.bytes,
            ),
            (
                "weir_kv_queued_bytes",
                "Bytes of key-value writes not yet committed or in Redis (bounded per store).",
                |u| u.queued_bytes,
            ),
        ];
        if self.guest_routes.iter().all(|d| d.kv.is_none()) {
            return;
        }
        for (name, help, value) in gauges {
            family(out, name, "gauge", help);
            for d in &self.guest_routes {
                if let Some(kv) = &d.kv {
                    let _ = writeln!(out, "{name}{{route=\"{}\"}} {}", label(&d.route), value(kv));
                }
            }
        }
    }
}

/// `"` and `\` escaped for a label value.
fn label(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"")
}

/// Writes a `# HELP` and `# TYPE` line.
fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

impl Snapshot {
    /// The per-route families: labels `route`, and `version` for a guest's.
    fn render_routes(&self, out: &mut String) {
        if self.routes.is_empty() {
            return;
        }
        type Conn = fn(&ConnTotals) -> u64;
        let conn: [(&str, &str, &str, Conn); 7] = [
            (
                "weir_route_connections",
                "gauge",
                "WebSocket connections open on the route.",
                |c| c.accepted.saturating_sub(c.closed),
            ),
            (
                "weir_route_connections_accepted_total",
                "counter",
                "WebSocket connections the route accepted.",
                |c| c.accepted,
            ),
            (
                "weir_route_messages_in_total",
                "counter",
                "Messages received from clients.",
                |c| c.messages_in,
            ),
            (
                "weir_route_bytes_in_total",
                "counter",
                "Payload bytes received from clients.",
                |c| c.bytes_in,
            ),
            (
                "weir_route_refused_origin_total",
                "counter",
                "Upgrades refused (403) for an Origin the route does not allow.",
                |c| c.refused_origin,
            ),
            (
                "weir_route_native_messages_out_total",
                "counter",
                "Messages a native echo or relay sent on (guests: weir_guest_messages_out_total).",
                |c| c.messages_out,
            ),
            (
                "weir_route_native_bytes_out_total",
                "counter",
                "Payload bytes a native echo or relay sent on.",
                |c| c.bytes_out,
            ),
        ];
        for (name, kind, help, value) in conn {
            family(out, name, kind, help);
            for r in &self.routes {
                let _ = writeln!(
                    out,
                    "{name}{{route=\"{}\"}} {}",
                    label(&r.route),
                    value(&r.conns)
                );
            }
        }
        let name = "weir_route_closes_total";
        family(out, name, "counter", "Connections ended, by close code (1006: without a close frame; other: any code not listed).");
        for r in &self.routes {
            for (i, n) in r.conns.closes.iter().enumerate() {
                let code = CLOSE_CODES
                    .get(i)
                    .map_or("other".to_string(), |c| c.to_string());
                let _ = writeln!(
                    out,
                    "{name}{{route=\"{}\",code=\"{code}\"}} {n}",
                    label(&r.route)
                );
            }
        }
        let guests: Vec<(&str, &GuestFigures)> = self
            .routes
            .iter()
            .filter_map(|r| Some((r.route.as_str(), r.guest.as_ref()?)))
            .collect();
        if guests.is_empty() {
            return;
        }
        type Route = fn(&GuestFigures) -> u64;
        let route: [(&str, &str, &str, Route); 3] = [
            (
                "weir_guest_version",
                "gauge",
                "The version of the route's component serving now.",
                |g| g.serving,
            ),
            (
                "weir_guest_deploys_total",
                "counter",
                "Components deployed to the route since start.",
                |g| g.deploys,
            ),
            (
                "weir_guest_deploys_failed_total",
                "counter",
                "Deploys refused (the component did not compile, fit the ABI or start).",
                |g| g.failed_deploys,
            ),
        ];
        for (name, kind, help, value) in route {
            family(out, name, kind, help);
            for (r, g) in &guests {
                let _ = writeln!(out, "{name}{{route=\"{}\"}} {}", label(r), value(g));
            }
        }
        type Version = fn(&GuestTotals) -> u64;
        let version: [(&str, &str, Version); 3] = [
            (
                "weir_guest_calls_total",
                "Guest calls (one per batch).",
                |t| t.calls,
            ),
            (
                "weir_guest_messages_out_total",
                "Sends and publishes the guest made.",
                |t| t.messages_out,
            ),
            (
                "weir_guest_bytes_out_total",
                "Payload bytes of the guest's sends and publishes.",
                |t| t.bytes_out,
            ),
        ];
        for (name, help, value) in version {
            family(out, name, "counter", help);
            for (r, g) in &guests {
                for (v, t) in &g.versions {
                    let _ = writeln!(
                        out,
                        "{name}{{route=\"{}\",version=\"{v}\"}} {}",
                        label(r),
                        value(t)
                    );
                }
            }
        }
        let name = "weir_guest_faults_total";
        family(out, name, "counter", "Guest calls that failed, by cause (their connections closed 1011, or 1013 when overloaded).");
        for (r, g) in &guests {
            for (v, t) in &g.versions {
                for (cause, n) in FAULT_CAUSES.iter().zip(t.faults) {
                    let _ = writeln!(
                        out,
                        "{name}{{route=\"{}\",version=\"{v}\",cause=\"{cause}\"}} {n}",
                        label(r)
                    );
                }
            }
        }
        histogram(
            out,
            &guests,
            "weir_guest_call_duration_seconds",
            "Time of one guest call.",
            &CALL_MICROS_BUCKETS,
            seconds,
            |t| (&t.call_micros[..], t.call_micros_sum),
        );
        histogram(
            out,
            &guests,
            "weir_guest_batch_events",
            "Events (opens, messages, closes) per guest call.",
            &BATCH_EVENTS_BUCKETS,
            |n| n.to_string(),
            |t| (&t.batch_events[..], t.events_sum),
        );
    }
}

/// `micros` as seconds, exactly (`10` → `0.00001`).
fn seconds(micros: u64) -> String {
    let text = format!("{}.{:06}", micros / 1_000_000, micros % 1_000_000);
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A histogram per guest route and version; `unit` writes bucket bounds and
/// the sum in the family's unit.
fn histogram(
    out: &mut String,
    guests: &[(&str, &GuestFigures)],
    name: &str,
    help: &str,
    bounds: &[u64],
    unit: fn(u64) -> String,
    counts: fn(&GuestTotals) -> (&[u64], u64),
) {
    family(out, name, "histogram", help);
    for (r, g) in guests {
        let r = label(r);
        for (v, t) in &g.versions {
            let (buckets, sum) = counts(t);
            let mut cumulative = 0;
            for (i, n) in buckets.iter().enumerate() {
                cumulative += n;
                let le = bounds.get(i).map_or("+Inf".to_string(), |b| unit(*b));
                let _ = writeln!(
                    out,
                    "{name}_bucket{{route=\"{r}\",version=\"{v}\",le=\"{le}\"}} {cumulative}"
                );
            }
            let _ = writeln!(
                out,
                "{name}_sum{{route=\"{r}\",version=\"{v}\"}} {}",
                unit(sum)
            );
            let _ = writeln!(
                out,
                "{name}_count{{route=\"{r}\",version=\"{v}\"}} {cumulative}"
            );
        }
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
                    closes: [0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
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
            }],
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
            ("weir_tls_handshake_failures_total", 29),
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
                r#"weir_guest_call_duration_seconds_bucket{route="/say \"hi\"",version="2",le="0.00001"}"#,
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
