//! Guests' key-value stores (weir:gateway 0.4.0, `kv` in the routes file):
//! embedded and persistent, one redb file per store in the gateway's
//! `state_dir`; on Redis, shared by every node, when `[cluster]` names one
//! Redis server ([`kv_redis`](super::kv_redis)). Reads are synchronous (`kv.get`, answered from redb's
//! memory-mapped pages in about a microsecond); writes (`kv-set`,
//! `kv-delete` commands) go to the store's writer thread, which commits
//! everything queued in one transaction, so no guest call and no worker
//! waits for a disk. A value carries its expiry (ms since the Unix epoch,
//! 0: none) before its bytes; an expired value reads as absent.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, Weak};
use std::time::{SystemTime, UNIX_EPOCH};

use redb::{Database, ReadableDatabase, TableDefinition};

use super::kv_redis::{Op, RedisKv};
use crate::config::{ClusterConfig, KvName};

/// The one table of a store.
const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("kv");
/// Longest key: keys are names, not data.
pub const MAX_KEY_BYTES: usize = 1024;
/// Largest value: the store is for state, not blobs.
pub const MAX_VALUE_BYTES: usize = 1 << 20;

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
    /// Answered once every write queued before it is committed.
    Flush(mpsc::Sender<()>),
}

/// One key-value store.
pub struct KvStore {
    backend: Backend,
    /// Where the store is (its file, or its Redis prefix), for logs.
    path: PathBuf,
}

/// Where a store's values live.
enum Backend {
    Redb {
        db: Arc<Database>,
        writes: Mutex<mpsc::Sender<Write>>,
    },
    Redis(Arc<RedisKv>),
}

/// Why a store cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("key-value store {path}: {detail}")]
pub struct KvError {
    path: PathBuf,
    detail: String,
}

impl KvStore {
    /// The store `name` for the route at `route`: on the Redis server of
    /// `cluster` when it names one, else in `state_dir`. Opened once per
    /// process (a second route naming the same shared store gets the same
    /// one). A Redis Cluster does not hold stores yet: each node keeps its
    /// own in `state_dir` (logged).
    pub fn open(
        state_dir: &Path,
        cluster: Option<&ClusterConfig>,
        route: &str,
        name: &KvName,
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
            return Ok(store);
        }
        let fail = |detail: String| KvError {
            path: path.clone(),
            detail,
        };
        if let Some(ClusterConfig::Redis(url)) = cluster {
            let redis = RedisKv::open(url, &store)
                .map_err(|e| fail(format!("cannot start its Redis thread: {e}")))?;
            let store = Arc::new(KvStore {
                backend: Backend::Redis(redis),
                path: path.clone(),
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
        let db = Arc::new(db);
        let (writes, queue) = mpsc::channel();
        let writer_db = db.clone();
        let shown = path.display().to_string();
        std::thread::Builder::new()
            .name("weir-kv".into())
            .spawn(move || write_loop(&writer_db, &queue, &shown))
            .map_err(|e| fail(format!("cannot start its writer: {e}")))?;
        let store = Arc::new(KvStore {
            backend: Backend::Redb {
                db,
                writes: Mutex::new(writes),
            },
            path: path.clone(),
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

    /// Queue a write of `value` under `key` for `ttl_ms` (0: no expiry).
    /// A key or value over its cap is refused (false) and logged.
    pub fn set(&self, key: &[u8], value: &[u8], ttl_ms: u64) -> bool {
        if key.len() > MAX_KEY_BYTES || value.len() > MAX_VALUE_BYTES {
            tracing::warn!(store = %self.path.display(), key = key.len(), value = value.len(),
                "kv-set over the key ({MAX_KEY_BYTES} B) or value ({MAX_VALUE_BYTES} B) cap; refused");
            return false;
        }
        let expires_ms = if ttl_ms == 0 {
            0
        } else {
            now_ms().saturating_add(ttl_ms)
        };
        match &self.backend {
            Backend::Redb { .. } => self.queue(Write::Set {
                key: key.to_vec(),
                value: value.to_vec(),
                expires_ms,
            }),
            Backend::Redis(redis) => redis.write(Op::Set {
                key: key.to_vec(),
                value: value.to_vec(),
                expires_ms,
            }),
        }
        true
    }

    /// Queue the removal of `key`.
    pub fn delete(&self, key: &[u8]) {
        match &self.backend {
            Backend::Redb { .. } => self.queue(Write::Delete { key: key.to_vec() }),
            Backend::Redis(redis) => redis.write(Op::Delete { key: key.to_vec() }),
        }
    }

    /// Wait until every write queued so far is committed (shutdown, tests;
    /// on Redis: until Redis has it, however long it is unreachable).
    pub fn flush(&self) {
        let (done, wait) = mpsc::channel();
        match &self.backend {
            Backend::Redb { .. } => self.queue(Write::Flush(done)),
            Backend::Redis(redis) => redis.write(Op::Flush(done)),
        }
        let _ = wait.recv();
    }

    fn queue(&self, write: Write) {
        if let Backend::Redb { writes, .. } = &self.backend {
            let _ = writes.lock().expect("kv queue lock").send(write);
        }
    }
}

/// The writer thread: everything queued at once goes into one transaction.
fn write_loop(db: &Database, queue: &mpsc::Receiver<Write>, path: &str) {
    while let Ok(first) = queue.recv() {
        let mut writes = vec![first];
        writes.extend(queue.try_iter());
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
        for done in flushed {
            let _ = done.send(());
        }
    }
}

pub(super) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
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
            let store = KvStore::open(&dir, None, "/p", &KvName::Route).unwrap();
            assert!(store.set(b"a", b"1", 0));
            assert!(store.set(b"gone", b"x", 1));
            assert!(store.set(b"b", b"2", 0));
            store.delete(b"b");
            assert!(!store.set(&[0; MAX_KEY_BYTES + 1], b"", 0));
            store.flush();
            std::thread::sleep(std::time::Duration::from_millis(5));
            assert_eq!(store.get(b"a").as_deref(), Some(&b"1"[..]));
            assert_eq!(store.get(b"gone"), None, "expired");
            assert_eq!(store.get(b"b"), None, "deleted");
        }
        // The writer thread holds the database until its queue closes.
        std::thread::sleep(std::time::Duration::from_millis(50));
        let store = KvStore::open(&dir, None, "/p", &KvName::Route).unwrap();
        assert_eq!(store.get(b"a").as_deref(), Some(&b"1"[..]), "persisted");
        assert_eq!(file_safe("/a/{b}"), "_2fa_2f_7bb_7d");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
