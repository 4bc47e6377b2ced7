//! The Prometheus text exposition of a [`Snapshot`]: every family with its
//! HELP and TYPE lines, labels escaped, histograms cumulative.

use super::*;

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
        self.render_kind_figures(&mut out);
        out
    }

    /// Route kinds' own families (`weir_pusher_…`), labels `route` first.
    fn render_kind_figures(&self, out: &mut String) {
        let mut names: Vec<&str> = Vec::new();
        for f in self.routes.iter().flat_map(|r| &r.kind) {
            if !names.contains(&f.name) {
                names.push(f.name);
            }
        }
        for name in names {
            for (i, (route, f)) in self
                .routes
                .iter()
                .flat_map(|r| r.kind.iter().map(move |f| (&r.route, f)))
                .filter(|(_, f)| f.name == name)
                .enumerate()
            {
                if i == 0 {
                    let kind = if f.counter { "counter" } else { "gauge" };
                    family(out, name, kind, f.help);
                }
                let _ = write!(out, "{name}{{route=\"{}\"", label(route));
                for (key, value) in &f.labels {
                    let _ = write!(out, ",{key}=\"{}\"", label(value));
                }
                let _ = writeln!(out, "}} {}", f.value);
            }
        }
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
