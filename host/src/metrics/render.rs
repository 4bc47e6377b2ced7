//! The Prometheus exposition of a [`Snapshot`] through `prometheus-client`:
//! the snapshot (summed from the per-worker shards when `/metrics` is asked
//! for) is the one [`Collector`] of a registry, written in the text format.

use super::*;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{prometheus_text, DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType::{self, Counter, Gauge};
use prometheus_client::registry::Registry;
use std::fmt;

/// A sample's labels, in the order they are written.
type Labels = Vec<(&'static str, String)>;

impl Snapshot {
    /// The whole exposition, in the Prometheus text format (version 0.0.4).
    pub fn render(self) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(self));
        let mut out = String::with_capacity(4096);
        // Writing to a String cannot fail, and every family below is
        // written from plain numbers.
        let _ = prometheus_text::encode(&mut out, &registry);
        out
    }
}

impl Collector for Snapshot {
    fn encode(&self, mut out: DescriptorEncoder) -> fmt::Result {
        self.encode_gateway(&mut out)?;
        self.encode_routes(&mut out)?;
        self.encode_guest_routes(&mut out)?;
        self.encode_kv(&mut out)?;
        self.encode_kind_figures(&mut out)
    }
}

/// Writes one family: its HELP and TYPE lines, then a sample per label set.
/// `name` is the full name: a counter's `_total` is the encoder's to add.
fn family(
    out: &mut DescriptorEncoder,
    name: &str,
    kind: MetricType,
    help: &str,
    samples: impl IntoIterator<Item = (Labels, u64)>,
) -> fmt::Result {
    let base = match kind {
        Counter => name.strip_suffix("_total").unwrap_or(name),
        _ => name,
    };
    let mut metric = out.encode_descriptor(base, help, None, kind)?;
    for (labels, value) in samples {
        let sample = metric.encode_family(&labels)?;
        match kind {
            Counter => ConstCounter::new(value).encode(sample)?,
            _ => ConstGauge::new(value).encode(sample)?,
        }
    }
    Ok(())
}

/// A family of one sample without labels.
fn single(
    out: &mut DescriptorEncoder,
    name: &str,
    kind: MetricType,
    help: &str,
    value: u64,
) -> fmt::Result {
    family(out, name, kind, help, [(Labels::new(), value)])
}

fn route(route: &str) -> Labels {
    vec![("route", route.to_string())]
}

impl Snapshot {
    /// The gateway-wide families, and the Redis link's when there is one.
    fn encode_gateway(&self, out: &mut DescriptorEncoder) -> fmt::Result {
        let figures: [(&str, MetricType, &str, u64); 17] = [
            ("weir_websocket_connections", Gauge, "WebSocket connections open now.", self.websocket_connections as u64),
            ("weir_tcp_connections", Gauge, "TCP connections open now, before and after their upgrade.", self.tcp_connections as u64),
            ("weir_upgrades_total", Counter, "Upgrade requests answered with 101.", self.upgrades),
            ("weir_refused_over_limit_total", Counter, "Requests answered 503 for being over max_connections or max_connections_per_ip.", self.refused_over_limit),
            ("weir_accept_failures_total", Counter, "Failed accept calls (e.g. EMFILE: out of file descriptors); the worker backs off.", self.accept_failures),
            ("weir_refused_draining_total", Counter, "Requests answered 503 because the gateway was shutting down.", self.refused_draining),
            ("weir_refused_origin_total", Counter, "Upgrades answered 403 because the browser's Origin is not allowed on the route.", self.refused_origin),
            ("weir_tls_handshake_failures_total", Counter, "TLS handshakes that failed or did not finish within handshake_timeout; the connection was dropped.", self.tls_handshake_failures),
            ("weir_outbound_queued_bytes", Gauge, "Bytes queued toward clients by relay partners, guests and publishers, not yet written.", self.outbound_queued_bytes as u64),
            ("weir_outbound_queued_bytes_max", Gauge, "The most bytes queued toward any one client.", self.outbound_queued_bytes_max as u64),
            ("weir_receive_buffer_bytes_held", Gauge, "Bytes of receive buffers held by connections with bytes in flight.", self.receive_buffer_bytes_held as u64),
            ("weir_receive_buffer_bytes_pooled", Gauge, "Bytes of free receive buffers kept for reuse.", self.receive_buffer_bytes_pooled as u64),
            ("weir_plane_connections", Gauge, "WebSocket connections served by the workers' planes ([server] io = \"epoll\", \"uring\" or \"auto\"), not as tasks of their own.", self.plane_connections as u64),
            ("weir_draining", Gauge, "1 while the gateway is shutting down.", u64::from(self.draining)),
            ("weir_log_lines_lost_total", Counter, "Gateway log lines dropped because stderr was not taking them fast enough.", self.log_lines_lost),
            ("weir_pubsub_dropped_total", Counter, "Published messages not delivered to subscribers over their outbound_budget (slow_subscriber = \"drop\").", self.pubsub_dropped),
            ("weir_pubsub_closed_slow_total", Counter, "Subscribers closed with 1008 for being over their outbound_budget (slow_subscriber = \"close\").", self.pubsub_closed_slow),
        ];
        for (name, kind, help, value) in figures {
            single(out, name, kind, help, value)?;
        }
        if let Some(heap) = self.heap {
            single(
                out,
                "weir_heap_bytes_in_use",
                Gauge,
                "Bytes allocated from the C heap and not yet freed (wasm memories are not on it).",
                heap.in_use,
            )?;
            single(
                out,
                "weir_heap_bytes_free_retained",
                Gauge,
                "Free bytes the C allocator keeps in its arenas instead of returning them.",
                heap.free_retained,
            )?;
        }
        let Some(c) = &self.cluster else {
            return Ok(());
        };
        let cluster: [(&str, MetricType, &str, u64); 8] = [
            ("weir_cluster_connected", Gauge, "1 while the link to Redis is up.", u64::from(c.connected)),
            ("weir_cluster_subscribed_channels", Gauge, "Redis channels subscribed now: the topics with local subscribers.", c.subscribed as u64),
            ("weir_cluster_sent_total", Counter, "Publishes handed to Redis for the other nodes.", c.sent),
            ("weir_cluster_received_total", Counter, "Other nodes' publishes received and delivered here.", c.received),
            ("weir_cluster_lost_total", Counter, "Publishes that could not cross to other nodes (Redis unreachable or failing, or the queue to it full).", c.lost),
            ("weir_cluster_link_failures_total", Counter, "Times the link to Redis failed (each followed by reconnecting with backoff).", c.link_failures),
            ("weir_cluster_resubscribed_total", Counter, "Subscriptions a Redis Cluster shard ended because the channel's slot moved (resharding), made again on its new shard.", c.resubscribed),
            ("weir_cluster_received_dropped_total", Counter, "Other nodes' publishes dropped because this node's queue of received messages was full.", c.received_dropped),
        ];
        for (name, kind, help, value) in cluster {
            single(out, name, kind, help, value)?;
        }
        Ok(())
    }

    /// The per-route families: labels `route`, and `version` for a guest's.
    fn encode_routes(&self, out: &mut DescriptorEncoder) -> fmt::Result {
        if self.routes.is_empty() {
            return Ok(());
        }
        type Conn = fn(&ConnTotals) -> u64;
        let conn: [(&str, MetricType, &str, Conn); 7] = [
            (
                "weir_route_connections",
                Gauge,
                "WebSocket connections open on the route.",
                |c| c.accepted.saturating_sub(c.closed),
            ),
            (
                "weir_route_connections_accepted_total",
                Counter,
                "WebSocket connections the route accepted.",
                |c| c.accepted,
            ),
            (
                "weir_route_messages_in_total",
                Counter,
                "Messages received from clients.",
                |c| c.messages_in,
            ),
            (
                "weir_route_bytes_in_total",
                Counter,
                "Payload bytes received from clients.",
                |c| c.bytes_in,
            ),
            (
                "weir_route_refused_origin_total",
                Counter,
                "Upgrades refused (403) for an Origin the route does not allow.",
                |c| c.refused_origin,
            ),
            (
                "weir_route_native_messages_out_total",
                Counter,
                "Messages a native echo or relay sent on (guests: weir_guest_messages_out_total).",
                |c| c.messages_out,
            ),
            (
                "weir_route_native_bytes_out_total",
                Counter,
                "Payload bytes a native echo or relay sent on.",
                |c| c.bytes_out,
            ),
        ];
        for (name, kind, help, value) in conn {
            let samples = self
                .routes
                .iter()
                .map(|r| (route(&r.route), value(&r.conns)));
            family(out, name, kind, help, samples)?;
        }
        let closes = self.routes.iter().flat_map(|r| {
            r.conns.closes.iter().enumerate().map(|(i, n)| {
                let code = CLOSE_CODES
                    .get(i)
                    .map_or("other".to_string(), |c| c.to_string());
                (vec![("route", r.route.clone()), ("code", code)], *n)
            })
        });
        family(out, "weir_route_closes_total", Counter, "Connections ended, by close code (1006: without a close frame; other: any code not listed).", closes)?;
        let overload = self.routes.iter().flat_map(|r| {
            OVERLOAD_REASONS
                .iter()
                .zip(r.conns.overload)
                .map(|(reason, n)| {
                    (
                        vec![("route", r.route.clone()), ("reason", reason.to_string())],
                        n,
                    )
                })
        });
        family(out, "weir_route_overload_total", Counter, "Refusals of the overload controls, by reason: upgrades answered 429 over max_upgrade_rate_per_ip, 503 over max_upgrade_rate or while the route is drained; messages dropped, or connections closed 1008, over max_message_rate or max_byte_rate.", overload)?;
        let guests: Vec<(&str, &GuestFigures)> = self
            .routes
            .iter()
            .filter_map(|r| Some((r.route.as_str(), r.guest.as_ref()?)))
            .collect();
        if guests.is_empty() {
            return Ok(());
        }
        encode_guests(out, &guests)
    }

    /// The families of guest routes' budgets and refusals.
    fn encode_guest_routes(&self, out: &mut DescriptorEncoder) -> fmt::Result {
        if self.guest_routes.is_empty() {
            return Ok(());
        }
        type Figure = fn(&GuestRouteStats) -> u64;
        let per_route: [(&str, &str, Figure); 5] = [
            ("weir_guest_log_dropped_lines_total", "Guest log lines dropped for being over the route's log_rate or log_bytes.", |d| d.log_dropped_lines),
            ("weir_guest_log_dropped_bytes_total", "Bytes of guest log lines dropped over the route's budget.", |d| d.log_dropped_bytes),
            ("weir_guest_deadline_trips_total", "Guest batches that ran into the route's timeout (their connections closed 1011).", |d| d.deadline_trips),
            ("weir_guest_backoff_refused_total", "Upgrades refused with 429 to client addresses that kept tripping the route's timeout.", |d| d.backoff_refused),
            ("weir_guest_realtime_refused_total", "Subscribes and publishes of a realtime = true guest route refused by the real-time core (bad channel, data not JSON, Redis down).", |d| d.realtime_refused),
        ];
        for (name, help, value) in per_route {
            let samples = self
                .guest_routes
                .iter()
                .map(|d| (route(&d.route), value(d)));
            family(out, name, Counter, help, samples)?;
        }
        Ok(())
    }

    /// Route kinds' own families (`weir_pusher_…`), labels `route` first.
    fn encode_kind_figures(&self, out: &mut DescriptorEncoder) -> fmt::Result {
        let mut names: Vec<&str> = Vec::new();
        for f in self.routes.iter().flat_map(|r| &r.kind) {
            if !names.contains(&f.name) {
                names.push(f.name);
            }
        }
        for name in names {
            let figures: Vec<(&String, &weir_reactor::kind::KindFigure)> = self
                .routes
                .iter()
                .flat_map(|r| r.kind.iter().map(move |f| (&r.route, f)))
                .filter(|(_, f)| f.name == name)
                .collect();
            let Some((_, first)) = figures.first() else {
                continue;
            };
            let kind = if first.counter { Counter } else { Gauge };
            let samples = figures.iter().map(|(r, f)| {
                let mut labels = route(r);
                labels.extend(f.labels.iter().cloned());
                (labels, f.value)
            });
            family(out, name, kind, first.help, samples)?;
        }
        Ok(())
    }

    /// The key-value families: refusals by route and reason, and each
    /// store's size and queue.
    fn encode_kv(&self, out: &mut DescriptorEncoder) -> fmt::Result {
        if self.guest_routes.is_empty() {
            return Ok(());
        }
        let refused = self.guest_routes.iter().flat_map(|d| {
            let reasons = weir_abi::KvErrorReason::ALL.iter().zip(d.kv_refused);
            reasons.map(|(reason, n)| {
                let labels = vec![
                    ("route", d.route.clone()),
                    ("reason", reason.as_str().to_string()),
                ];
                (labels, n)
            })
        });
        family(out, "weir_kv_writes_refused_total", Counter, "Guest key-value writes refused and not applied (the guest got a kv-error event), by reason.", refused)?;
        if self.guest_routes.iter().all(|d| d.kv.is_none()) {
            return Ok(());
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
        for (name, help, value) in gauges {
            let samples = self
                .guest_routes
                .iter()
                .filter_map(|d| Some((route(&d.route), value(d.kv.as_ref()?))));
            family(out, name, Gauge, help, samples)?;
        }
        Ok(())
    }
}

/// A guest route's version and deploy families, and each version's calls,
/// faults and histograms.
fn encode_guests(out: &mut DescriptorEncoder, guests: &[(&str, &GuestFigures)]) -> fmt::Result {
    type Route = fn(&GuestFigures) -> u64;
    let per_route: [(&str, MetricType, &str, Route); 3] = [
        (
            "weir_guest_version",
            Gauge,
            "The version of the route's component serving now.",
            |g| g.serving,
        ),
        (
            "weir_guest_deploys_total",
            Counter,
            "Components deployed to the route since start.",
            |g| g.deploys,
        ),
        (
            "weir_guest_deploys_failed_total",
            Counter,
            "Deploys refused (the component did not compile, fit the ABI or start).",
            |g| g.failed_deploys,
        ),
    ];
    for (name, kind, help, value) in per_route {
        family(
            out,
            name,
            kind,
            help,
            guests.iter().map(|(r, g)| (route(r), value(g))),
        )?;
    }
    let versions = || {
        guests.iter().flat_map(|(r, g)| {
            g.versions.iter().map(move |(v, t)| {
                (
                    vec![("route", r.to_string()), ("version", v.to_string())],
                    t,
                )
            })
        })
    };
    type Version = fn(&GuestTotals) -> u64;
    let per_version: [(&str, &str, Version); 3] = [
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
    for (name, help, value) in per_version {
        family(
            out,
            name,
            Counter,
            help,
            versions().map(|(l, t)| (l, value(t))),
        )?;
    }
    let faults = versions().flat_map(|(labels, t)| {
        FAULT_CAUSES.iter().zip(t.faults).map(move |(cause, n)| {
            let mut labels = labels.clone();
            labels.push(("cause", cause.to_string()));
            (labels, n)
        })
    });
    family(out, "weir_guest_faults_total", Counter, "Guest calls that failed, by cause (their connections closed 1011, or 1013 when overloaded).", faults)?;
    let call = |t: &GuestTotals| (t.call_micros.to_vec(), t.call_micros_sum);
    let bounds = CALL_MICROS_BUCKETS.map(|b| b as f64 / 1e6);
    histogram(
        out,
        versions(),
        "weir_guest_call_duration_seconds",
        "Time of one guest call.",
        &bounds,
        1e6,
        call,
    )?;
    let events = |t: &GuestTotals| (t.batch_events.to_vec(), t.events_sum);
    let bounds = BATCH_EVENTS_BUCKETS.map(|b| b as f64);
    histogram(
        out,
        versions(),
        "weir_guest_batch_events",
        "Events (opens, messages, closes) per guest call.",
        &bounds,
        1.0,
        events,
    )
}

/// A histogram per guest route and version: `counts` gives a version's
/// per-bucket counts (the last one past every bound) and its sum, which
/// `divisor` turns into the family's unit as `bounds` are.
fn histogram<'a>(
    out: &mut DescriptorEncoder,
    versions: impl Iterator<Item = (Labels, &'a GuestTotals)>,
    name: &str,
    help: &str,
    bounds: &[f64],
    divisor: f64,
    counts: impl Fn(&GuestTotals) -> (Vec<u64>, u64),
) -> fmt::Result {
    let mut metric = out.encode_descriptor(name, help, None, MetricType::Histogram)?;
    for (labels, totals) in versions {
        let (buckets, sum) = counts(totals);
        let count = buckets.iter().sum();
        let buckets: Vec<(f64, u64)> = buckets
            .iter()
            .enumerate()
            .map(|(i, n)| (bounds.get(i).copied().unwrap_or(f64::INFINITY), *n))
            .collect();
        metric
            .encode_family(&labels)?
            .encode_histogram::<NoLabelSet>(sum as f64 / divisor, count, &buckets, None)?;
    }
    Ok(())
}
