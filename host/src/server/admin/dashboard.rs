//! The dashboard's data: a sampler that records every route's counters
//! once a second for the last minutes, and `GET /api/overview`, which
//! the page polls (the page itself is `assets/`, embedded in the binary:
//! no CDN, nothing fetched from the network).

use super::super::Shared;
use serde_json::{json, Map, Value};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use weir_reactor::stats::{CLOSE_CODES, FAULT_CAUSES, OVERLOAD_REASONS};

/// How often the sampler runs.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(1);
/// Samples kept: five minutes at one a second.
const KEPT_SAMPLES: usize = 300;

/// The page and its assets: (path, content type, body).
pub const ASSETS: [(&str, &str, &str); 3] = [
    (
        "/",
        "text/html; charset=utf-8",
        include_str!("assets/index.html"),
    ),
    (
        "/dashboard.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/dashboard.js"),
    ),
    (
        "/dashboard.css",
        "text/css; charset=utf-8",
        include_str!("assets/dashboard.css"),
    ),
];

/// A route's cumulative counters at one instant.
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
struct Counts {
    connections: u64,
    messages_in: u64,
    messages_out: u64,
    bytes_in: u64,
    bytes_out: u64,
}

struct Sample {
    at: Instant,
    unix_ms: u64,
    routes: Vec<(String, Counts)>,
}

/// The last minutes of samples.
#[derive(Default)]
pub struct History {
    samples: Mutex<VecDeque<Sample>>,
}

impl History {
    /// Records every live route's counters now.
    pub fn sample(&self, shared: &Shared) {
        let routes = route_counts(shared);
        let mut samples = self.samples.lock().expect("history lock");
        if samples.len() == KEPT_SAMPLES {
            samples.pop_front();
        }
        samples.push_back(Sample {
            at: Instant::now(),
            unix_ms: unix_ms(),
            routes,
        });
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Every live route's counters. Out is everything the route sent on: a
/// native behaviour's replies and forwards, a guest's sends (every version
/// it served), and deliveries to subscribers of its topic namespace.
fn route_counts(shared: &Shared) -> Vec<(String, Counts)> {
    let table = shared.routes.load();
    table
        .live_routes()
        .map(|(_, r)| {
            let c = r.stats.sum();
            let (delivered, delivered_bytes) = r.topics.delivered();
            let (mut guest_out, mut guest_bytes) = (0, 0);
            if let Some(guest) = &r.guest {
                let (current, kept) = guest.versions().list();
                for d in std::iter::once(&current).chain(&kept) {
                    let t = d.program.stats();
                    guest_out += t.messages_out;
                    guest_bytes += t.bytes_out;
                }
            }
            let counts = Counts {
                connections: c.accepted.saturating_sub(c.closed),
                messages_in: c.messages_in,
                messages_out: c.messages_out + guest_out + delivered,
                bytes_in: c.bytes_in,
                bytes_out: c.bytes_out + guest_bytes + delivered_bytes,
            };
            (r.path.clone(), counts)
        })
        .collect()
}

/// Per second between two samples.
fn rate(later: u64, earlier: u64, secs: f64) -> f64 {
    if secs <= 0.0 {
        return 0.0;
    }
    later.saturating_sub(earlier) as f64 / secs
}

/// `GET /api/overview`: the gateway, every route now (with its rates over
/// the last sample interval), and the kept history as series per route.
pub fn overview(shared: &Shared, history: &History) -> Value {
    let samples = history.samples.lock().expect("history lock");
    let table = shared.routes.load();
    let now = route_counts(shared);
    let last = samples.back();
    let since = last.map_or(0.0, |s| s.at.elapsed().as_secs_f64());
    let mut routes = Vec::new();
    for ((_, r), (path, counts)) in table.live_routes().zip(&now) {
        let before = last
            .and_then(|s| s.routes.iter().find(|(p, _)| p == path))
            .map(|(_, c)| *c)
            .unwrap_or(*counts);
        // Under a second since the last sample: rates over the sample before
        // it, so a fast poll does not show zeros.
        let (before, secs) = match (since < 0.5, samples.len()) {
            (true, n) if n >= 2 => {
                let s = &samples[n - 2];
                let c = s.routes.iter().find(|(p, _)| p == path).map(|(_, c)| *c);
                (c.unwrap_or(before), s.at.elapsed().as_secs_f64())
            }
            _ => (before, since),
        };
        let c = r.stats.sum();
        let closes: Map<String, Value> = CLOSE_CODES
            .iter()
            .map(|code| code.to_string())
            .chain(std::iter::once("other".to_string()))
            .zip(c.closes)
            .filter(|(_, n)| *n != 0)
            .map(|(code, n)| (code, json!(n)))
            .collect();
        // The overload controls' refusals, by reason (only those seen).
        let overload: Map<String, Value> = OVERLOAD_REASONS
            .iter()
            .zip(c.overload)
            .filter(|(_, n)| *n != 0)
            .map(|(reason, n)| (reason.to_string(), json!(n)))
            .collect();
        let mut entry = json!({
            "path": path,
            "behaviour": r.behaviour,
            "draining": r.draining(),
            "connections": counts.connections,
            "totals": {
                "messages_in": counts.messages_in,
                "messages_out": counts.messages_out,
                "bytes_in": counts.bytes_in,
                "bytes_out": counts.bytes_out,
            },
            "per_second": {
                "messages_in": rate(counts.messages_in, before.messages_in, secs),
                "messages_out": rate(counts.messages_out, before.messages_out, secs),
                "bytes_in": rate(counts.bytes_in, before.bytes_in, secs),
                "bytes_out": rate(counts.bytes_out, before.bytes_out, secs),
            },
            "closes": closes,
            "overload": overload,
        });
        if let Some(guest) = &r.guest {
            let (current, kept) = guest.versions().list();
            let t = current.program.stats();
            let faults: Map<String, Value> = FAULT_CAUSES
                .iter()
                .zip(t.faults)
                .filter(|(_, n)| *n != 0)
                .map(|(cause, n)| (cause.to_string(), json!(n)))
                .collect();
            entry["version"] = json!(current.program.version());
            entry["hash"] = json!(current.program.hash());
            entry["source"] = json!(current.source);
            entry["pinned"] = json!(guest.versions().pinned());
            entry["kept_versions"] =
                json!(kept.iter().map(|d| d.program.version()).collect::<Vec<_>>());
            entry["call_p99_us"] = json!(t.call_micros_quantile(0.99));
            entry["faults"] = Value::Object(faults);
        }
        routes.push(entry);
    }
    // Series: one point per pair of consecutive samples.
    let mut times = Vec::new();
    let mut series: Map<String, Value> = Map::new();
    for (path, _) in &now {
        series.insert(
            path.clone(),
            json!({ "connections": [], "messages_in": [], "messages_out": [] }),
        );
    }
    for pair in samples.iter().collect::<Vec<_>>().windows(2) {
        let (a, b) = (pair[0], pair[1]);
        let secs = b.at.duration_since(a.at).as_secs_f64();
        times.push(json!(b.unix_ms));
        for (path, _) in &now {
            let find = |s: &Sample| s.routes.iter().find(|(p, _)| p == path).map(|(_, c)| *c);
            let (ca, cb) = (find(a), find(b));
            let point = |f: fn(&Counts) -> u64| match (ca, cb) {
                (Some(x), Some(y)) => json!(rate(f(&y), f(&x), secs)),
                _ => Value::Null,
            };
            let s = &mut series[path.as_str()];
            push(
                &mut s["connections"],
                cb.map_or(Value::Null, |c| json!(c.connections)),
            );
            push(&mut s["messages_in"], point(|c| c.messages_in));
            push(&mut s["messages_out"], point(|c| c.messages_out));
        }
    }
    let queues = shared.registry.stats();
    json!({
        "gateway": {
            "connections": queues.connections,
            "upgrades": shared.counts.upgrades.load(Ordering::Relaxed),
            "refused_origin": shared.counts.refused_origin.load(Ordering::Relaxed),
            "refused_over_limit": shared.counts.refused_over_limit.load(Ordering::Relaxed),
            "draining": shared.drain.draining.load(Ordering::Relaxed),
            "outbound_queued_bytes": queues.queued_bytes,
        },
        "routes": routes,
        "history": { "t": times, "routes": series },
        // With `[cluster] redis` the page also reads `GET /fleet`.
        "fleet": shared.change.fleet.get().map(|f| json!({ "node": f.node() })),
    })
}

fn push(array: &mut Value, value: Value) {
    if let Value::Array(a) = array {
        a.push(value);
    }
}
