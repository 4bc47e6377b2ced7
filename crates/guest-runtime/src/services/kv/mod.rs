//! Guests' key-value stores (weir:gateway 0.4.0, `kv` in the routes file):
//! embedded and persistent, one redb file per store in the gateway's
//! `state_dir`; on Redis, shared by every node, when `[cluster]` names one
//! Redis server ([`redis_kv`]). Reads are synchronous (`kv.get`,
//! answered from redb's memory-mapped pages in about a microsecond); writes (`kv-set`,
//! `kv-delete` commands) go to the store's writer thread, which commits
//! everything queued in one transaction, so no guest call and no worker
//! waits for a disk. A value carries its expiry (ms since the Unix epoch,
//! 0: none) before its bytes; an expired value reads as absent.
//!
//! Every store is bounded ([`quota`]): a write that
//! would take it past its quota, or that finds its write queue full, is
//! refused with a [`KvErrorReason`] and not applied. An embedded store
//! keeps a ledger of its keys' sizes in memory for that (loaded when it
//! opens); expired keys count until a write needs their room, and then
//! leave the ledger and the file.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, Weak};

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

pub mod quota;
mod redis_kv;

use quota::{fits, now_ms, queued_cost, KvErrorReason, QueueBudget};
use redis_kv::{Op, RedisKv};
use weir_config::{ClusterConfig, KvName, KvQuota};

/// The one table of a store.
const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("kv");
/// Longest key: keys are names, not data.
pub(crate) const MAX_KEY_BYTES: usize = 1024;
/// Largest value: the store is for state, not blobs.
pub(crate) const MAX_VALUE_BYTES: usize = 1 << 20;

/// One write, queued for the store's writer.
#[derive(Debug)]
enum Write {
    Set {
        key: Vec<u8>,
        value: Vec<u8>,
        expires_ms: u64,
    },
    Delete {
        key: Vec<u8>,
    },
    /// Expired keys whose room a write needs (not counted in the queue's
    /// budget: they free room).
    Purge(Vec<Vec<u8>>),
    /// Answered once every write queued before it is committed.
    Flush(mpsc::Sender<()>),
}

impl Write {
    /// What the write holds of the queue's budget.
    fn cost(&self) -> usize {
        match self {
            Write::Set { key, value, .. } => queued_cost(key, value),
            Write::Delete { key } => queued_cost(key, &[]),
            Write::Purge(_) | Write::Flush(_) => 0,
        }
    }
}

/// One key-value store.
pub struct KvStore {
    backend: Backend,
    /// Where the store is (its file, or its Redis prefix), for logs.
    path: PathBuf,
    /// How much it may hold.
    quota: KvQuota,
    /// The bytes its write queue holds.
    budget: Arc<QueueBudget>,
}

/// Where a store's values live.
enum Backend {
    Redb {
        db: Arc<Database>,
        /// The write queue and the ledger, under one lock so that the
        /// ledger's order is the queue's.
        writes: Mutex<RedbWrites>,
    },
    Redis(Arc<RedisKv>),
}

/// An embedded store's queue to its writer and what it holds.
struct RedbWrites {
    queue: mpsc::Sender<Write>,
    /// Each live key's size (key plus value bytes) and expiry.
    sizes: HashMap<Vec<u8>, (u64, u64)>,
    /// The sum of `sizes`.
    bytes: u64,
}

impl RedbWrites {
    /// Drop expired keys from the ledger and queue their removal; whether
    /// any was.
    fn purge_expired(&mut self) -> bool {
        let now = now_ms();
        let mut gone = Vec::new();
        self.sizes.retain(|key, &mut (size, expires)| {
            let live = expires == 0 || expires > now;
            if !live {
                gone.push(key.clone());
                self.bytes -= size;
            }
            live
        });
        let any = !gone.is_empty();
        if any {
            let _ = self.queue.send(Write::Purge(gone));
        }
        any
    }
}

/// Why a store cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("key-value store {path}: {detail}")]
pub struct KvError {
    path: PathBuf,
    detail: String,
}

impl KvStore {
    /// The store `name` for the route at `route`, bounded by `quota`: on
    /// the Redis server of `cluster` when it names one, else in
    /// `state_dir`. Opened once per process (a second route naming the
    /// same shared store gets the same one, and must give it the same
    /// quota). A Redis Cluster does not hold stores yet: each node keeps
    /// its own in `state_dir` (logged).
    pub fn open(
        state_dir: &Path,
        cluster: Option<&ClusterConfig>,
        route: &str,
        name: &KvName,
        quota: KvQuota,
    ) -> Result<Arc<KvStore>, KvError> {
        static OPEN: Mutex<Vec<(PathBuf, Weak<KvStore>)>> = Mutex::new(Vec::new());
        let store = match name {
            KvName::Route => format!("route-{}", file_safe(route)),
            KvName::Shared(name) => format!("shared-{name}"),
        };
        let path = match cluster {
            Some(ClusterConfig::Redis(url)) => PathBuf::from(format!("{url}#weir:kv:{store}")),
            _ => state_dir.join("kv").join(format!("{store}.redb")),
        };
        let mut open = OPEN.lock().expect("kv stores lock");
        open.retain(|(_, store)| store.strong_count() > 0);
        if let Some(store) = open
            .iter()
            .find(|(p, _)| *p == path)
            .and_then(|(_, s)| s.upgrade())
        {
            if store.quota != quota {
                return Err(KvError {
                    path,
                    detail: format!(
                        "another route gives this shared store kv_max_bytes = {}, \
                         kv_max_keys = {}; give every route that names it the same quota",
                        store.quota.max_bytes, store.quota.max_keys
                    ),
                });
            }
            return Ok(store);
        }
        let fail = |detail: String| KvError {
            path: path.clone(),
            detail,
        };
        let budget = Arc::new(QueueBudget::default());
        if let Some(ClusterConfig::Redis(url)) = cluster {
            let redis = RedisKv::open(url, &store, budget.clone())
                .map_err(|e| fail(format!("cannot start its Redis thread: {e}")))?;
            let store = Arc::new(KvStore {
                backend: Backend::Redis(redis),
                path: path.clone(),
                quota,
                budget,
            });
            open.push((path, Arc::downgrade(&store)));
            return Ok(store);
        }
        if let Some(ClusterConfig::RedisCluster(_)) = cluster {
            tracing::warn!(route, store = %path.display(),
                "key-value stores on a Redis Cluster are not supported yet; this node keeps its own");
        }
        std::fs::create_dir_all(path.parent().expect("a file in a directory"))
            .map_err(|e| fail(format!("cannot create the directory: {e}")))?;
        let db = Database::create(&path).map_err(|e| fail(e.to_string()))?;
        // Make the table so that reads before the first write find it.
        let tx = db.begin_write().map_err(|e| fail(e.to_string()))?;
        tx.open_table(TABLE).map_err(|e| fail(e.to_string()))?;
        tx.commit().map_err(|e| fail(e.to_string()))?;
        let (sizes, bytes) = ledger(&db).map_err(|e| fail(format!("cannot read it: {e}")))?;
        let db = Arc::new(db);
        let (writes, queue) = mpsc::channel();
        let writer_db = db.clone();
        let shown = path.display().to_string();
        let writer_budget = budget.clone();
        std::thread::Builder::new()
            .name("weir-kv".into())
            .spawn(move || write_loop(&writer_db, &queue, &shown, &writer_budget))
            .map_err(|e| fail(format!("cannot start its writer: {e}")))?;
        let store = Arc::new(KvStore {
            backend: Backend::Redb {
                db,
                writes: Mutex::new(RedbWrites {
                    queue: writes,
                    sizes,
                    bytes,
                }),
            },
            path: path.clone(),
            quota,
            budget,
        });
        open.push((path, Arc::downgrade(&store)));
        Ok(store)
    }

    /// The value under `key`, None when absent or expired (or unreadable:
    /// logged).
    pub fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        let db = match &self.backend {
            Backend::Redb { db, .. } => db,
            Backend::Redis(redis) => return redis.get(key, now_ms()),
        };
        let read = || -> Result<Option<Vec<u8>>, redb::Error> {
            let tx = db.begin_read()?;
            let table = tx.open_table(TABLE)?;
            let Some(stored) = table.get(key)? else {
                return Ok(None);
            };
            let stored = stored.value();
            let (expires, value) = stored.split_at(8);
            let expires = u64::from_le_bytes(expires.try_into().expect("8 bytes"));
            if expires != 0 && expires <= now_ms() {
                return Ok(None);
            }
            Ok(Some(value.to_vec()))
        };
        read().unwrap_or_else(|e| {
            tracing::warn!(store = %self.path.display(), error = %e, "key-value read failed");
            None
        })
    }

    /// Queue a write of `value` under `key` for `ttl_ms` (0: no expiry),
    /// or refuse it: a key or value over its cap (`too-large`), a store
    /// that would go over its quota, a full write queue.
    pub fn set(&self, key: &[u8], value: &[u8], ttl_ms: u64) -> Result<(), KvErrorReason> {
        if key.len() > MAX_KEY_BYTES || value.len() > MAX_VALUE_BYTES {
            return Err(KvErrorReason::TooLarge);
        }
        let expires_ms = if ttl_ms == 0 {
            0
        } else {
            now_ms().saturating_add(ttl_ms)
        };
        let writes = match &self.backend {
            Backend::Redb { writes, .. } => writes,
            Backend::Redis(redis) => {
                return redis.write(
                    Op::Set {
                        key: key.to_vec(),
                        value: value.to_vec(),
                        expires_ms,
                    },
                    &self.quota,
                )
            }
        };
        let mut writes = writes.lock().expect("kv queue lock");
        let new = (key.len() + value.len()) as u64;
        let check = |w: &RedbWrites| {
            let old = w.sizes.get(key).map(|&(size, _)| size);
            fits(&self.quota, w.sizes.len(), w.bytes, old, new)
        };
        if check(&writes).is_err() {
            // Expired keys may make room.
            writes.purge_expired();
        }
        check(&writes)?;
        let write = Write::Set {
            key: key.to_vec(),
            value: value.to_vec(),
            expires_ms,
        };
        self.budget.take(write.cost())?;
        if let Some((old, _)) = writes.sizes.insert(key.to_vec(), (new, expires_ms)) {
            writes.bytes -= old;
        }
        writes.bytes += new;
        let _ = writes.queue.send(write);
        Ok(())
    }

    /// Queue the removal of `key`, or refuse it (a full write queue).
    pub(crate) fn delete(&self, key: &[u8]) -> Result<(), KvErrorReason> {
        let writes = match &self.backend {
            Backend::Redb { writes, .. } => writes,
            Backend::Redis(redis) => {
                return redis.write(Op::Delete { key: key.to_vec() }, &self.quota)
            }
        };
        let mut writes = writes.lock().expect("kv queue lock");
        if !writes.sizes.contains_key(key) {
            // Nothing to remove: no write.
            return Ok(());
        }
        let write = Write::Delete { key: key.to_vec() };
        self.budget.take(write.cost())?;
        if let Some((old, _)) = writes.sizes.remove(key) {
            writes.bytes -= old;
        }
        let _ = writes.queue.send(write);
        Ok(())
    }

    /// Wait until every write queued so far is committed (shutdown, tests;
    /// on Redis: until Redis has it, however long it is unreachable).
    pub fn flush(&self) {
        let (done, wait) = mpsc::channel();
        match &self.backend {
            Backend::Redb { writes, .. } => {
                let _ = writes
                    .lock()
                    .expect("kv queue lock")
                    .queue
                    .send(Write::Flush(done));
            }
            Backend::Redis(redis) => redis.flush(done),
        }
        let _ = wait.recv();
    }

    /// Keys and bytes (key plus value) the store holds, as this node
    /// counts them for its quota.
    pub fn usage(&self) -> (usize, u64) {
        match &self.backend {
            Backend::Redb { writes, .. } => {
                let writes = writes.lock().expect("kv queue lock");
                (writes.sizes.len(), writes.bytes)
            }
            Backend::Redis(redis) => redis.usage(),
        }
    }

    /// Bytes waiting in the store's write queue (bounded by
    /// [`KV_QUEUE_MAX_BYTES`](crate::services::kv::quota::KV_QUEUE_MAX_BYTES)).
    pub fn queued_bytes(&self) -> usize {
        self.budget.queued()
    }
}

/// Each key's size (key plus value bytes) and expiry in `db`, and their sum.
#[allow(clippy::type_complexity)]
fn ledger(db: &Database) -> Result<(HashMap<Vec<u8>, (u64, u64)>, u64), redb::Error> {
    let tx = db.begin_read()?;
    let table = tx.open_table(TABLE)?;
    let mut sizes = HashMap::new();
    let mut bytes = 0;
    for entry in table.iter()? {
        let (key, stored) = entry?;
        let (key, stored) = (key.value(), stored.value());
        let expires = u64::from_le_bytes(stored[..8].try_into().expect("8 bytes"));
        let size = (key.len() + stored.len() - 8) as u64;
        bytes += size;
        sizes.insert(key.to_vec(), (size, expires));
    }
    Ok((sizes, bytes))
}

/// The writer thread: everything queued at once goes into one transaction.
fn write_loop(db: &Database, queue: &mpsc::Receiver<Write>, path: &str, budget: &QueueBudget) {
    while let Ok(first) = queue.recv() {
        let mut writes = vec![first];
        writes.extend(queue.try_iter());
        let cost = writes.iter().map(Write::cost).sum();
        let mut flushed = Vec::new();
        let mut commit = || -> Result<(), redb::Error> {
            let tx = db.begin_write()?;
            {
                let mut table = tx.open_table(TABLE)?;
                for write in writes.drain(..) {
                    match write {
                        Write::Set {
                            key,
                            value,
                            expires_ms,
                        } => {
                            let mut stored = Vec::with_capacity(8 + value.len());
                            stored.extend_from_slice(&expires_ms.to_le_bytes());
                            stored.extend_from_slice(&value);
                            table.insert(key.as_slice(), stored.as_slice())?;
                        }
                        Write::Delete { key } => {
                            table.remove(key.as_slice())?;
                        }
                        Write::Purge(keys) => {
                            for key in keys {
                                table.remove(key.as_slice())?;
                            }
                        }
                        Write::Flush(done) => flushed.push(done),
                    }
                }
            }
            tx.commit()?;
            Ok(())
        };
        if let Err(e) = commit() {
            tracing::warn!(store = path, error = %e, "key-value writes lost");
        }
        budget.give_back(cost);
        for done in flushed {
            let _ = done.send(());
        }
    }
}

/// A route path as part of a file name: letters and digits kept, every
/// other byte as `_xx` (hex), so two paths never share a file.
fn file_safe(route: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for b in route.bytes() {
        if b.is_ascii_alphanumeric() {
            out.push(b as char);
        } else {
            let _ = write!(out, "_{b:02x}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_persist_expire_and_delete() {
        let dir = std::env::temp_dir().join(format!("weir-kv-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        {
            let store =
                KvStore::open(&dir, None, "/p", &KvName::Route, KvQuota::default()).unwrap();
            assert!(store.set(b"a", b"1", 0).is_ok());
            assert!(store.set(b"gone", b"x", 1).is_ok());
            assert!(store.set(b"b", b"2", 0).is_ok());
            store.delete(b"b").unwrap();
            assert_eq!(
                store.set(&[0; MAX_KEY_BYTES + 1], b"", 0),
                Err(KvErrorReason::TooLarge)
            );
            store.flush();
            std::thread::sleep(std::time::Duration::from_millis(5));
            assert_eq!(store.get(b"a").as_deref(), Some(&b"1"[..]));
            assert_eq!(store.get(b"gone"), None, "expired");
            assert_eq!(store.get(b"b"), None, "deleted");
        }
        // The writer thread holds the database until its queue closes.
        std::thread::sleep(std::time::Duration::from_millis(50));
        let store = KvStore::open(&dir, None, "/p", &KvName::Route, KvQuota::default()).unwrap();
        assert_eq!(store.get(b"a").as_deref(), Some(&b"1"[..]), "persisted");
        assert_eq!(file_safe("/a/{b}"), "_2fa_2f_7bb_7d");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_embedded_store_refuses_writes_past_its_quota_and_counts_after_reopening() {
        let dir = std::env::temp_dir().join(format!("weir-kv-quota-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let quota = KvQuota {
            max_bytes: 1000,
            max_keys: 3,
        };
        {
            let store = KvStore::open(&dir, None, "/q", &KvName::Route, quota).unwrap();
            assert_eq!(store.set(b"k1", &[0; 398], 0), Ok(()));
            assert_eq!(store.set(b"k2", &[0; 398], 0), Ok(()));
            assert_eq!(store.usage(), (2, 800));
            assert_eq!(
                store.set(b"k3", &[0; 299], 0),
                Err(KvErrorReason::OverMaxBytes)
            );
            assert_eq!(store.set(b"k3", &[0; 198], 0), Ok(()));
            assert_eq!(store.set(b"k4", b"", 0), Err(KvErrorReason::OverMaxKeys));
            // Replacing with a smaller value, deleting: room again.
            assert_eq!(store.set(b"k1", b"x", 0), Ok(()));
            assert_eq!(store.set(b"k4", b"", 0), Err(KvErrorReason::OverMaxKeys));
            store.delete(b"k2").unwrap();
            assert_eq!(store.set(b"k4", b"", 0), Ok(()));
            assert_eq!(store.usage(), (3, 3 + 200 + 2));
            store.flush();
            assert_eq!(store.queued_bytes(), 0, "the writer gave the budget back");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        let store = KvStore::open(&dir, None, "/q", &KvName::Route, quota).unwrap();
        assert_eq!(
            store.usage(),
            (3, 205),
            "the ledger is read back from the file"
        );
        // Expired keys make room when a write needs it.
        store.delete(b"k4").unwrap();
        assert_eq!(store.set(b"short", b"lived", 1), Ok(()));
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert_eq!(store.set(b"k5", b"", 0), Ok(()));
        assert_eq!(store.usage(), (3, 205));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
