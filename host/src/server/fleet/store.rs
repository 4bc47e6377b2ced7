//! The fleet's state in Redis: components by SHA-256 (chunked, size-capped),
//! each route's desired version and its last deploys, and each node's
//! report under a lease. Every key shares the hash tag `{weir-fleet}`, so a
//! change that touches several is one `MULTI` (and would stay in one slot).
//!
//! Keys (`<route>` is the route's path as written, `<digest>` hex SHA-256):
//! - `{weir-fleet}:routes`: set of the routes that have a desired version;
//! - `{weir-fleet}:desired:<route>`: hash `version digest size who at
//!   action reset_state`, written only by [`Store::set_desired`];
//! - `{weir-fleet}:history:<route>`: list of the last deploys (JSON),
//!   newest first, at most [`HISTORY`]; a rollback pops its head;
//! - `{weir-fleet}:blob:<route>:<digest>`: hash of `c0`…`cN` (chunks of
//!   [`CHUNK_BYTES`]), `size` and `chunks` written last; it expires after
//!   [`UNRECORDED_TTL`] unless a desired version records it;
//! - `{weir-fleet}:node:<node>`: a node's report (JSON), expiring after
//!   [`LEASE`]; `{weir-fleet}:nodes`: set of node names that reported;
//! - channel `{weir-fleet}:changes`: a route's path, published after each
//!   change.

use redis::{Connection, RedisResult};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// A component is stored in pieces of this size: one Redis command stays
/// small (Redis's default `proto-max-bulk-len` is 512 MiB, but a big
/// command blocks the server for every other client while it is copied).
pub const CHUNK_BYTES: usize = 512 << 10;
/// The largest component the fleet stores: the admin API's upload cap.
pub const MAX_BLOB_BYTES: usize = crate::server::MAX_COMPONENT_BYTES;
/// Chunks of the largest component.
pub const MAX_CHUNKS: usize = MAX_BLOB_BYTES.div_ceil(CHUNK_BYTES);
/// Deploys remembered per route (the serving one and what a rollback can
/// go back to: as many as a node keeps, `guest/kind/deploy.rs`).
pub const HISTORY: usize = 4;
/// A node's report lives this long unless renewed (every reconcile, 5 s):
/// a node that died leaves the fleet's view within it.
pub const LEASE: Duration = Duration::from_secs(15);
/// Connecting to Redis, and each command, gives up after this: a deploy
/// answers 503 rather than hang on a Redis that does not answer.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// A component stored but not (yet) recorded as a desired version expires
/// after this: a deploy that failed half-way leaves nothing behind for
/// long. Recording it (`PERSIST` in the same `MULTI`) keeps it.
pub const UNRECORDED_TTL: Duration = Duration::from_secs(600);
/// Where nodes hear of a change.
pub const CHANGES_CHANNEL: &str = "{weir-fleet}:changes";

const ROUTES: &str = "{weir-fleet}:routes";
const NODES: &str = "{weir-fleet}:nodes";

fn desired_key(route: &str) -> String {
    format!("{{weir-fleet}}:desired:{route}")
}
fn history_key(route: &str) -> String {
    format!("{{weir-fleet}}:history:{route}")
}
fn blob_key(route: &str, digest: &str) -> String {
    format!("{{weir-fleet}}:blob:{route}:{digest}")
}
fn node_key(node: &str) -> String {
    format!("{{weir-fleet}}:node:{node}")
}

/// Why the fleet's store did not answer as it should.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("the fleet's Redis ({url}) failed: {source}")]
    Unavailable {
        url: String,
        source: redis::RedisError,
    },
    #[error("the fleet's Redis ({url}) stopped answering while the change was being recorded ({source}): it may have been recorded; every node converges on what Redis holds (weir routes --cluster shows it once Redis answers)")]
    Unconfirmed {
        url: String,
        source: redis::RedisError,
    },
    #[error("the fleet's copy of {route}'s component {digest} is damaged: {why}")]
    Damaged {
        route: String,
        digest: String,
        why: String,
    },
    #[error("route {route}: the fleet remembers no earlier version to roll back to (it keeps the last {HISTORY} deploys)")]
    NoEarlierVersion { route: String },
    #[error("the component is {size} bytes; the fleet stores at most {MAX_BLOB_BYTES}")]
    TooLarge { size: usize },
}

/// A route's desired version: what every node should serve.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Desired {
    pub route: String,
    /// Grows by one with each deploy or rollback of the route, fleet-wide.
    pub version: u64,
    /// The component's SHA-256 (hex).
    pub digest: String,
    pub size: u64,
    /// Who asked (the `X-Weir-Who` header, or the node that took it).
    pub who: String,
    /// When (Unix seconds).
    pub at: u64,
    /// "deploy" or "rollback".
    pub action: String,
    /// Whether connections whose state the version cannot read start
    /// from Default instead of refusing it (`--reset-state`).
    pub reset_state: bool,
}

impl Desired {
    fn from_hash(route: &str, h: &HashMap<String, String>) -> Option<Desired> {
        let get = |k: &str| h.get(k).cloned();
        Some(Desired {
            route: route.to_string(),
            version: get("version")?.parse().ok()?,
            digest: get("digest")?,
            size: get("size")?.parse().ok()?,
            who: get("who").unwrap_or_default(),
            at: get("at").and_then(|a| a.parse().ok()).unwrap_or(0),
            action: get("action").unwrap_or_else(|| "deploy".into()),
            reset_state: get("reset_state").as_deref() == Some("1"),
        })
    }
}

/// One entry of a route's deploy history.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Past {
    digest: String,
    size: u64,
    who: String,
    at: u64,
}

/// A node's state for one route, as it reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteReport {
    pub route: String,
    /// The node's own version number of what it serves.
    pub local_version: u64,
    /// SHA-256 of what it serves.
    pub digest: String,
    /// The fleet version it serves, when it serves one.
    pub fleet_version: Option<u64>,
    /// A fleet version it refused, and why (it keeps serving `digest`).
    pub refused: Option<(u64, String)>,
}

/// What a node reports under its lease.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeReport {
    pub node: String,
    /// When it wrote this (Unix seconds).
    pub at: u64,
    pub routes: Vec<RouteReport>,
}

/// The fleet's Redis, over one blocking connection (reopened after an
/// error). Used from the admin thread's blocking pool and the fleet thread.
pub struct Store {
    client: redis::Client,
    url: String,
    con: Mutex<Option<Connection>>,
}

pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Store {
    pub fn new(url: &str) -> Result<Store, StoreError> {
        let client = redis::Client::open(url).map_err(|source| StoreError::Unavailable {
            url: url.to_string(),
            source,
        })?;
        Ok(Store {
            client,
            url: url.to_string(),
            con: Mutex::new(None),
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// A connection of its own (the change notifications' subscriber).
    pub fn connect(&self) -> RedisResult<Connection> {
        let con = self.client.get_connection_with_timeout(IO_TIMEOUT)?;
        con.set_read_timeout(Some(IO_TIMEOUT))?;
        con.set_write_timeout(Some(IO_TIMEOUT))?;
        Ok(con)
    }

    /// Runs `f` on the shared connection (opened if needed); a Redis or
    /// I/O error drops it, so the next call connects afresh.
    fn with<T>(&self, f: impl FnOnce(&mut Connection) -> RedisResult<T>) -> Result<T, StoreError> {
        let mut slot = self.con.lock().expect("fleet store lock");
        let unavailable = |source| StoreError::Unavailable {
            url: self.url.clone(),
            source,
        };
        if slot.is_none() {
            *slot = Some(self.connect().map_err(unavailable)?);
        }
        let con = slot.as_mut().expect("just connected");
        f(con).map_err(|e| {
            *slot = None;
            unavailable(e)
        })
    }

    /// `e`, as [`StoreError::Unconfirmed`] when Redis failed after the
    /// `MULTI … EXEC` was sent (`sent`): whether it ran is unknown.
    fn unconfirmed_if(&self, sent: bool, e: StoreError) -> StoreError {
        match e {
            StoreError::Unavailable { url, source } if sent => {
                StoreError::Unconfirmed { url, source }
            }
            e => e,
        }
    }

    /// Stores `wasm` (whose SHA-256 is `digest`) for `route`, chunks first
    /// and its size last, so a reader never takes a partial copy for whole.
    pub fn put_blob(&self, route: &str, digest: &str, wasm: &[u8]) -> Result<(), StoreError> {
        if wasm.len() > MAX_BLOB_BYTES {
            return Err(StoreError::TooLarge { size: wasm.len() });
        }
        let key = blob_key(route, digest);
        let chunks = wasm.len().div_ceil(CHUNK_BYTES);
        self.with(|con| {
            let stored: Option<usize> = redis::cmd("HGET").arg(&key).arg("size").query(con)?;
            if stored == Some(wasm.len()) {
                return Ok(());
            }
            for (i, chunk) in wasm.chunks(CHUNK_BYTES).enumerate() {
                redis::cmd("HSET")
                    .arg(&key)
                    .arg(format!("c{i}"))
                    .arg(chunk)
                    .exec(con)?;
                if i == 0 {
                    redis::cmd("PEXPIRE")
                        .arg(&key)
                        .arg(UNRECORDED_TTL.as_millis() as u64)
                        .exec(con)?;
                }
            }
            redis::cmd("HSET")
                .arg(&key)
                .arg("chunks")
                .arg(chunks)
                .arg("size")
                .arg(wasm.len())
                .exec(con)
        })
    }

    /// `route`'s component `digest`, checked: its size within the cap, its
    /// chunks as many as its size needs, and its SHA-256 `digest`.
    pub fn get_blob(&self, route: &str, digest: &str) -> Result<Vec<u8>, StoreError> {
        let key = blob_key(route, digest);
        let damaged = |why: String| StoreError::Damaged {
            route: route.to_string(),
            digest: digest.to_string(),
            why,
        };
        let (size, chunks): (Option<usize>, Option<usize>) = self.with(|con| {
            redis::cmd("HMGET")
                .arg(&key)
                .arg("size")
                .arg("chunks")
                .query(con)
        })?;
        let (Some(size), Some(chunks)) = (size, chunks) else {
            return Err(damaged("it is missing".into()));
        };
        if size > MAX_BLOB_BYTES || chunks != size.div_ceil(CHUNK_BYTES) || chunks > MAX_CHUNKS {
            return Err(damaged(format!(
                "{size} bytes in {chunks} chunks (at most {MAX_BLOB_BYTES} bytes in chunks of {CHUNK_BYTES})"
            )));
        }
        let mut wasm = Vec::with_capacity(size);
        for i in 0..chunks {
            let chunk: Option<Vec<u8>> =
                self.with(|con| redis::cmd("HGET").arg(&key).arg(format!("c{i}")).query(con))?;
            let chunk = chunk.ok_or_else(|| damaged(format!("chunk {i} is missing")))?;
            if chunk.len() > CHUNK_BYTES || wasm.len() + chunk.len() > size {
                return Err(damaged(format!("chunk {i} is {} bytes", chunk.len())));
            }
            wasm.extend_from_slice(&chunk);
        }
        if wasm.len() != size {
            return Err(damaged(format!("{} bytes, not {size}", wasm.len())));
        }
        let actual = weir_guest_runtime::hex_sha256(&wasm);
        if actual != digest {
            return Err(damaged(format!("its SHA-256 is {actual}")));
        }
        Ok(wasm)
    }

    /// Every route's desired version.
    pub fn desired_all(&self) -> Result<Vec<Desired>, StoreError> {
        self.with(|con| {
            let routes: Vec<String> = redis::cmd("SMEMBERS").arg(ROUTES).query(con)?;
            let mut all = Vec::with_capacity(routes.len());
            for route in routes {
                let h: HashMap<String, String> =
                    redis::cmd("HGETALL").arg(desired_key(&route)).query(con)?;
                all.extend(Desired::from_hash(&route, &h));
            }
            all.sort_by(|a, b| a.route.cmp(&b.route));
            Ok(all)
        })
    }

    /// Makes `digest` (stored by [`Store::put_blob`]) `route`'s desired
    /// version, one above the last, in one `MULTI` watched on the route's
    /// keys: it happens whole or not at all. Returns the new record.
    pub fn set_desired(
        &self,
        route: &str,
        digest: &str,
        size: u64,
        who: &str,
        reset_state: bool,
    ) -> Result<Desired, StoreError> {
        let (desired, history, blob) = (
            desired_key(route),
            history_key(route),
            blob_key(route, digest),
        );
        let at = unix_now();
        let past = serde_json::to_string(&Past {
            digest: digest.to_string(),
            size,
            who: who.to_string(),
            at,
        })
        .expect("plain struct");
        let mut sent = false;
        let route_missing = self.with(|con| {
            redis::transaction(con, &[&desired, &history, &blob], |con, pipe| {
                let stored: Option<u64> = redis::cmd("HGET").arg(&blob).arg("size").query(con)?;
                if stored != Some(size) {
                    redis::cmd("UNWATCH").exec(con)?;
                    return Ok(Some(None));
                }
                let last: Option<u64> =
                    redis::cmd("HGET").arg(&desired).arg("version").query(con)?;
                let version = last.unwrap_or(0) + 1;
                // The deploys that leave the history take their
                // components with them (unless one is still in it).
                let kept: Vec<String> = redis::cmd("LRANGE")
                    .arg(&history)
                    .arg(0)
                    .arg(-1)
                    .query(con)?;
                let mut digests: Vec<String> = kept
                    .iter()
                    .filter_map(|p| serde_json::from_str::<Past>(p).ok())
                    .map(|p| p.digest)
                    .collect();
                digests.insert(0, digest.to_string());
                pipe.cmd("HSET")
                    .arg(&desired)
                    .arg("version")
                    .arg(version)
                    .arg("digest")
                    .arg(digest)
                    .arg("size")
                    .arg(size)
                    .arg("who")
                    .arg(who)
                    .arg("at")
                    .arg(at)
                    .arg("action")
                    .arg("deploy")
                    .arg("reset_state")
                    .arg(if reset_state { "1" } else { "0" })
                    .ignore()
                    .cmd("SADD")
                    .arg(ROUTES)
                    .arg(route)
                    .ignore()
                    .cmd("PERSIST")
                    .arg(&blob)
                    .ignore()
                    .cmd("LPUSH")
                    .arg(&history)
                    .arg(&past)
                    .ignore()
                    .cmd("LTRIM")
                    .arg(&history)
                    .arg(0)
                    .arg(HISTORY as i64 - 1)
                    .ignore();
                for gone in digests.iter().skip(HISTORY) {
                    if !digests[..HISTORY].contains(gone) {
                        pipe.cmd("DEL").arg(blob_key(route, gone)).ignore();
                    }
                }
                pipe.cmd("HGET").arg(&desired).arg("version");
                sent = true;
                let done: Option<(u64,)> = pipe.query(con)?;
                Ok(done.map(|(v,)| Some(v)))
            })
        });
        let route_missing = route_missing.map_err(|e| self.unconfirmed_if(sent, e))?;
        let Some(version) = route_missing else {
            return Err(StoreError::Damaged {
                route: route.to_string(),
                digest: digest.to_string(),
                why: "it was not stored (or was removed) before the deploy was recorded".into(),
            });
        };
        let record = Desired {
            route: route.to_string(),
            version,
            digest: digest.to_string(),
            size,
            who: who.to_string(),
            at,
            action: "deploy".into(),
            reset_state,
        };
        self.publish(route);
        Ok(record)
    }

    /// The deploy a fleet-wide rollback of `route` goes back to: the one
    /// before the head of its history.
    pub fn rollback_target(&self, route: &str) -> Result<(Desired, Desired), StoreError> {
        let (desired, history) = (desired_key(route), history_key(route));
        let (h, kept): (HashMap<String, String>, Vec<String>) = self.with(|con| {
            let h = redis::cmd("HGETALL").arg(&desired).query(con)?;
            let kept = redis::cmd("LRANGE")
                .arg(&history)
                .arg(0)
                .arg(1)
                .query(con)?;
            Ok((h, kept))
        })?;
        let no_earlier = || StoreError::NoEarlierVersion {
            route: route.to_string(),
        };
        let current = Desired::from_hash(route, &h).ok_or_else(no_earlier)?;
        let past: Past = kept
            .get(1)
            .and_then(|p| serde_json::from_str(p).ok())
            .ok_or_else(no_earlier)?;
        let target = Desired {
            version: current.version + 1,
            digest: past.digest,
            size: past.size,
            action: "rollback".into(),
            at: unix_now(),
            ..current.clone()
        };
        Ok((current, target))
    }

    /// Records `target` (from [`Store::rollback_target`]) as `route`'s
    /// desired version and pops the rolled-back deploy off its history,
    /// if the route's desired version is still `from`'s; else the fleet
    /// moved meanwhile and nothing changes.
    pub fn set_rollback(
        &self,
        from: &Desired,
        target: &Desired,
        who: &str,
    ) -> Result<Desired, StoreError> {
        let (desired, history) = (desired_key(&from.route), history_key(&from.route));
        let mut sent = false;
        let moved = self.with(|con| {
            redis::transaction(con, &[&desired, &history], |con, pipe| {
                let last: Option<u64> =
                    redis::cmd("HGET").arg(&desired).arg("version").query(con)?;
                if last != Some(from.version) {
                    redis::cmd("UNWATCH").exec(con)?;
                    return Ok(Some(true));
                }
                // The deploy rolled back from leaves the history; its
                // component goes with it unless an older entry is the same.
                let kept: Vec<String> = redis::cmd("LRANGE")
                    .arg(&history)
                    .arg(0)
                    .arg(-1)
                    .query(con)?;
                let digests: Vec<String> = kept
                    .iter()
                    .filter_map(|p| serde_json::from_str::<Past>(p).ok())
                    .map(|p| p.digest)
                    .collect();
                if let Some((head, rest)) = digests.split_first() {
                    if !rest.contains(head) {
                        pipe.cmd("DEL").arg(blob_key(&from.route, head)).ignore();
                    }
                }
                pipe.cmd("HSET")
                    .arg(&desired)
                    .arg("version")
                    .arg(target.version)
                    .arg("digest")
                    .arg(&target.digest)
                    .arg("size")
                    .arg(target.size)
                    .arg("who")
                    .arg(who)
                    .arg("at")
                    .arg(target.at)
                    .arg("action")
                    .arg("rollback")
                    .arg("reset_state")
                    .arg(if target.reset_state { "1" } else { "0" })
                    .ignore()
                    .cmd("LPOP")
                    .arg(&history)
                    .ignore()
                    .cmd("HGET")
                    .arg(&desired)
                    .arg("version");
                sent = true;
                let done: Option<(u64,)> = pipe.query(con)?;
                Ok(done.map(|_| false))
            })
        });
        let moved = moved.map_err(|e| self.unconfirmed_if(sent, e))?;
        if moved {
            return Err(StoreError::Damaged {
                route: from.route.clone(),
                digest: from.digest.clone(),
                why: "another deploy or rollback of the route came first; nothing was rolled back, look again (weir routes --cluster)".into(),
            });
        }
        self.publish(&from.route);
        Ok(Desired {
            who: who.to_string(),
            ..target.clone()
        })
    }

    /// Tells every node that `route` changed (best effort: a node that
    /// misses it converges at its next periodic reconcile).
    pub fn publish(&self, route: &str) {
        let _ = self.with(|con| {
            redis::cmd("PUBLISH")
                .arg(CHANGES_CHANNEL)
                .arg(route)
                .exec(con)
        });
    }

    /// Writes `report` under its node's lease.
    pub fn report(&self, report: &NodeReport) -> Result<(), StoreError> {
        let json = serde_json::to_string(report).expect("plain struct");
        self.with(|con| {
            redis::pipe()
                .cmd("SET")
                .arg(node_key(&report.node))
                .arg(json)
                .arg("PX")
                .arg(LEASE.as_millis() as u64)
                .ignore()
                .cmd("SADD")
                .arg(NODES)
                .arg(&report.node)
                .ignore()
                .exec(con)
        })
    }

    /// Takes `node`'s report out at once (a node that stops).
    pub fn withdraw(&self, node: &str) {
        let _ = self.with(|con| {
            redis::pipe()
                .cmd("DEL")
                .arg(node_key(node))
                .ignore()
                .cmd("SREM")
                .arg(NODES)
                .arg(node)
                .ignore()
                .exec(con)
        });
    }

    /// The reports of the nodes whose lease runs (a node whose lease
    /// ran out is forgotten).
    pub fn reports(&self) -> Result<Vec<NodeReport>, StoreError> {
        self.with(|con| {
            let nodes: Vec<String> = redis::cmd("SMEMBERS").arg(NODES).query(con)?;
            let mut reports = Vec::new();
            for node in nodes {
                let json: Option<String> = redis::cmd("GET").arg(node_key(&node)).query(con)?;
                match json.and_then(|j| serde_json::from_str::<NodeReport>(&j).ok()) {
                    Some(report) => reports.push(report),
                    None => redis::cmd("SREM").arg(NODES).arg(&node).exec(con)?,
                }
            }
            reports.sort_by(|a, b| a.node.cmp(&b.node));
            Ok(reports)
        })
    }
}
