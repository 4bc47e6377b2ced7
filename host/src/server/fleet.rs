//! Fleet deploys (`[cluster] redis`): a deploy or rollback through any
//! node's admin API becomes the route's desired version in Redis
//! ([`store`]), and every node converges on it as a local deploy would
//! (fetch, check the SHA-256, compile, trial-start, read the live state,
//! swap), then reports what it serves under a lease.
//!
//! A node converges at start before it listens (`Server::bind`), on each
//! change notification and every [`RECONCILE_EVERY`] (a missed
//! notification, a Redis that was down). `/readyz` is 503 until the first
//! reconcile succeeded. A version a node cannot take is refused there
//! once (it keeps its previous one) and reported with the error, so the
//! fleet's view shows it diverged; the next desired version is tried anew.

mod apply;
pub mod store;
mod view;

use super::reload::Changes;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};
use store::{NodeReport, RouteReport, Store, StoreError};
use tracing::warn;

/// Every node reads the desired versions this often even without a
/// notification, and renews its report (whose lease is three times this).
pub const RECONCILE_EVERY: Duration = Duration::from_secs(5);
/// The environment variable that names this node in the fleet's view;
/// unset, the host name and the public port.
pub const NODE_ENV: &str = "WEIR_NODE";
/// Longest `X-Weir-Who` kept with a deploy.
const MAX_WHO_BYTES: usize = 128;

/// What this node did with a route's desired version.
#[derive(Debug, Clone, Default)]
struct Applied {
    /// The fleet version it serves (its digest is the program's hash).
    serving: Option<u64>,
    /// A fleet version it refused, and why.
    refused: Option<(u64, String)>,
}

/// This node's part in the fleet (`Shared::change.fleet`).
pub struct Fleet {
    store: Store,
    node: String,
    routes: Mutex<HashMap<String, Applied>>,
    /// Set once a reconcile succeeded: `/readyz` waits for it.
    converged: AtomicBool,
}

/// Why a fleet deploy or rollback did not happen.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// A deploy or rollback that stopped before it was recorded.
    #[error("{0}; nothing was changed, on any node")]
    NotChanged(StoreError),
    #[error("{0}")]
    Store(StoreError),
    #[error("this gateway has no [cluster] redis, so it belongs to no fleet (without --cluster, deploy to or list this gateway alone)")]
    NotClustered,
}

impl FleetError {
    pub fn status(&self) -> http::StatusCode {
        use http::StatusCode as S;
        match self {
            FleetError::NotClustered => S::CONFLICT,
            FleetError::NotChanged(e) | FleetError::Store(e) => match e {
                StoreError::Unavailable { .. } | StoreError::Unconfirmed { .. } => {
                    S::SERVICE_UNAVAILABLE
                }
                StoreError::NoEarlierVersion { .. } | StoreError::Damaged { .. } => S::CONFLICT,
                StoreError::TooLarge { .. } => S::PAYLOAD_TOO_LARGE,
            },
        }
    }

    /// A deploy's or rollback's failure: nothing changed, unless Redis
    /// stopped answering while it was recording it (then nobody knows
    /// until Redis answers again, and every node converges on what it holds).
    fn refused(e: StoreError) -> FleetError {
        match e {
            StoreError::Unconfirmed { .. } => FleetError::Store(e),
            e => FleetError::NotChanged(e),
        }
    }
}

impl From<StoreError> for FleetError {
    fn from(e: StoreError) -> Self {
        FleetError::Store(e)
    }
}

/// The name this node reports under: `$WEIR_NODE`, else `host:port`.
pub fn node_name(port: u16) -> String {
    if let Some(name) = std::env::var(NODE_ENV).ok().filter(|n| !n.is_empty()) {
        return name;
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into());
    format!("{host}:{port}")
}

/// Who asked for a change: the `X-Weir-Who` header (printable, capped),
/// else the node that took it.
pub fn who(header: Option<&str>, node: &str) -> String {
    match header.map(str::trim).filter(|w| !w.is_empty()) {
        Some(w) => w
            .chars()
            .filter(|c| !c.is_control())
            .take(MAX_WHO_BYTES)
            .collect(),
        None => format!("admin API of {node}"),
    }
}

impl Fleet {
    pub fn new(url: &str, node: String) -> Result<Fleet, StoreError> {
        Ok(Fleet {
            store: Store::new(url)?,
            node,
            routes: Mutex::new(HashMap::new()),
            converged: AtomicBool::new(false),
        })
    }

    pub fn node(&self) -> &str {
        &self.node
    }

    /// Whether this node has taken the fleet's desired versions once.
    pub fn converged(&self) -> bool {
        self.converged.load(Ordering::Acquire)
    }

    /// Whether the fleet decides `route`'s component (a reload leaves it).
    pub fn governs(&self, route: &str) -> bool {
        self.routes.lock().expect("fleet lock").contains_key(route)
    }

    fn note(&self, route: &str, applied: Applied) {
        self.routes
            .lock()
            .expect("fleet lock")
            .insert(route.to_string(), applied);
    }

    /// What this node serves on each guest route, for its report.
    fn report(&self, changes: &Changes) -> NodeReport {
        let applied = self.routes.lock().expect("fleet lock").clone();
        let table = changes.shared.routes.load();
        let mut routes: Vec<RouteReport> = table
            .live_routes()
            .filter_map(|(_, r)| {
                let guest = r.guest.as_ref()?;
                let program = guest.program();
                let a = applied.get(&r.path).cloned().unwrap_or_default();
                Some(RouteReport {
                    route: r.path.clone(),
                    local_version: program.version(),
                    digest: program.hash().to_string(),
                    fleet_version: a.serving,
                    refused: a.refused,
                })
            })
            .collect();
        // Fleet routes this node does not serve at all.
        for (route, a) in applied {
            if !routes.iter().any(|r| r.route == route) {
                routes.push(RouteReport {
                    route,
                    refused: a.refused,
                    ..RouteReport::default()
                });
            }
        }
        routes.sort_by(|a, b| a.route.cmp(&b.route));
        NodeReport {
            node: self.node.clone(),
            at: store::unix_now(),
            routes,
        }
    }

    fn publish_report(&self, changes: &Changes) {
        if let Err(e) = self.store.report(&self.report(changes)) {
            warn!("fleet: report not written: {e}");
        }
    }
}

/// The first 12 hex digits of a digest, for logs and labels.
pub fn short(digest: &str) -> &str {
    &digest[..12.min(digest.len())]
}

/// Runs this node's part of the fleet until `shutdown`: a reconcile on
/// each change notification (heard by a thread of its own) and every
/// [`RECONCILE_EVERY`]; on shutdown its report is withdrawn.
pub(super) fn run(changes: Changes, shutdown: super::Shutdown) {
    let Some(fleet) = changes.shared.change.fleet.get().cloned() else {
        return;
    };
    let (tx, rx) = mpsc::sync_channel::<()>(1);
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (fleet, stop) = (fleet.clone(), stop.clone());
        std::thread::Builder::new()
            .name("weir-fleet-watch".into())
            .spawn(move || watch(&fleet, &tx, &stop))
    };
    if let Err(e) = watcher {
        warn!("fleet: no notification thread ({e}); converging every {RECONCILE_EVERY:?} only");
    }
    let mut next = Instant::now() + RECONCILE_EVERY;
    while !*shutdown.borrow() {
        let wait = next
            .saturating_duration_since(Instant::now())
            .min(Duration::from_millis(250));
        let heard = matches!(rx.recv_timeout(wait), Ok(()));
        if heard || Instant::now() >= next {
            if let Err(e) = changes.reconcile() {
                warn!("fleet: reconcile failed, trying again in {RECONCILE_EVERY:?}: {e}");
            }
            next = Instant::now() + RECONCILE_EVERY;
        }
    }
    stop.store(true, Ordering::Release);
    fleet.store.withdraw(&fleet.node);
}

/// Subscribes to the change channel and passes each notification on
/// (coalesced: one pending is enough); reconnects after an error. A
/// reconnect is itself a notification: changes made meanwhile were missed.
fn watch(fleet: &Fleet, tx: &mpsc::SyncSender<()>, stop: &AtomicBool) {
    let mut backoff = Duration::from_millis(100);
    while !stop.load(Ordering::Acquire) {
        let subscribed = fleet.store.connect().and_then(|mut con| {
            // Blocks for the next message; the periodic reconcile covers
            // a link that died silently.
            con.set_read_timeout(None)?;
            let mut sub = con.as_pubsub();
            sub.subscribe(store::CHANGES_CHANNEL)?;
            let _ = tx.try_send(());
            backoff = Duration::from_millis(100);
            loop {
                sub.get_message()?;
                if stop.load(Ordering::Acquire) {
                    return Ok(());
                }
                let _ = tx.try_send(());
            }
        });
        if let Err(e) = subscribed {
            tracing::debug!("fleet: change notifications lost ({e}); resubscribing");
        }
        std::thread::sleep(backoff);
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn who_is_the_header_printable_and_capped_else_the_node() {
        assert_eq!(who(Some(" ann@laptop "), "n1:9001"), "ann@laptop");
        assert_eq!(who(Some(""), "n1:9001"), "admin API of n1:9001");
        assert_eq!(who(None, "n1:9001"), "admin API of n1:9001");
        assert_eq!(who(Some("a\u{7}b"), "n"), "ab");
        let long = "x".repeat(1000);
        assert_eq!(who(Some(&long), "n").len(), MAX_WHO_BYTES);
    }

    #[test]
    fn a_redis_that_does_not_answer_is_503_and_nothing_to_go_back_to_409() {
        let unavailable = FleetError::NotChanged(StoreError::Unavailable {
            url: "redis://127.0.0.1:1".into(),
            source: redis::RedisError::from(std::io::Error::from(
                std::io::ErrorKind::ConnectionRefused,
            )),
        });
        assert_eq!(unavailable.status(), http::StatusCode::SERVICE_UNAVAILABLE);
        assert!(unavailable.to_string().contains("nothing was changed"));
        let unconfirmed = FleetError::refused(StoreError::Unconfirmed {
            url: "redis://127.0.0.1:1".into(),
            source: redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut)),
        });
        assert_eq!(unconfirmed.status(), http::StatusCode::SERVICE_UNAVAILABLE);
        assert!(!unconfirmed.to_string().contains("nothing was changed"));
        assert!(unconfirmed.to_string().contains("may have been recorded"));
        let none = FleetError::Store(StoreError::NoEarlierVersion { route: "/g".into() });
        assert_eq!(none.status(), http::StatusCode::CONFLICT);
        assert_eq!(
            FleetError::NotClustered.status(),
            http::StatusCode::CONFLICT
        );
    }

    /// A store on a port nothing listens on answers every call with
    /// `Unavailable` within its timeout, never a hang or a panic.
    #[test]
    fn a_store_without_redis_says_so() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let store = Store::new(&format!("redis://127.0.0.1:{port}")).unwrap();
        assert!(matches!(
            store.put_blob("/g", "ab", b"x"),
            Err(StoreError::Unavailable { .. })
        ));
        assert!(matches!(
            store.desired_all(),
            Err(StoreError::Unavailable { .. })
        ));
        let big = vec![0u8; store::MAX_BLOB_BYTES + 1];
        assert!(matches!(
            store.put_blob("/g", "ab", &big),
            Err(StoreError::TooLarge { .. })
        ));
    }
}
