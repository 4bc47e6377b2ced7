//! A guest key-value store on Redis, for gateways whose `[cluster]` names
//! one Redis server: shared by every node. Each node reads from a mirror
//! of the store in its own memory, so `kv.get` stays a synchronous import
//! that never waits for the network; writes are applied to the mirror at
//! once (a node reads its own writes) and go to Redis, each in one
//! MULTI with a PUBLISH on the store's channel that every node applies to
//! its mirror. A node loads the whole store (SCAN) when it connects, and
//! again after a reconnect; writes accepted while Redis is unreachable
//! wait and are sent when it is back. Other nodes see a write once its
//! PUBLISH reaches them (a round trip on a LAN).
//!
//! Keys in Redis: `weir:kv:<store>:<key>`, `<store>` being `route-<path>`
//! or `shared-<name>` with every byte but letters and digits escaped (so
//! no store's prefix is another's, and no glob character reaches SCAN's
//! MATCH). Expiry is absolute (`PXAT`), the same instant in Redis and in
//! every mirror. The channel message: `s` or `d`, expiry (ms, u64 LE),
//! key length (u32 LE), key, value.
//!
//! Bounded (issue 35): a node checks a write against the store's quota as
//! its mirror counts it (other nodes' writes included, so the bound holds
//! per store, give or take the writes in flight between nodes), and the
//! writes waiting for Redis (all of them while it is unreachable) hold at
//! most [`KV_QUEUE_MAX_BYTES`](crate::services::kv::quota::KV_QUEUE_MAX_BYTES): past
//! it a write is refused (`queue-full`) and not applied to the mirror.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{PushKind, Value};
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::services::kv::quota::{fits, now_ms, queued_cost, KvErrorReason, QueueBudget};
use weir_config::KvQuota;
use weir_pubsub::backoff::Backoff;

/// A connect or a reply slower than this counts as a failed link.
const REDIS_TIMEOUT: Duration = Duration::from_secs(2);
/// Writes sent in one MULTI.
const WRITE_BATCH: usize = 256;
/// How often expired values leave the mirror (reads skip them anyway).
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// A value and its expiry (ms since the Unix epoch, 0: none).
struct Entry {
    expires_ms: u64,
    value: Vec<u8>,
}

/// A write, queued for the store's Redis thread.
pub(super) enum Op {
    Set {
        key: Vec<u8>,
        value: Vec<u8>,
        expires_ms: u64,
    },
    Delete {
        key: Vec<u8>,
    },
    /// Answered once every write queued before it is in Redis.
    Flush(std::sync::mpsc::Sender<()>),
}

impl Op {
    /// What the write holds of the queue's budget until Redis has it.
    fn cost(&self) -> usize {
        match self {
            Op::Set { key, value, .. } => queued_cost(key, value),
            Op::Delete { key } => queued_cost(key, &[]),
            Op::Flush(_) => 0,
        }
    }
}

/// The node's copy of the store, and its size for the quota.
#[derive(Default)]
struct Mirror {
    entries: HashMap<Vec<u8>, Entry>,
    /// Key plus value bytes of `entries`.
    bytes: u64,
}

impl Mirror {
    fn insert(&mut self, key: Vec<u8>, entry: Entry) {
        let key_len = key.len() as u64;
        self.bytes += key_len + entry.value.len() as u64;
        if let Some(old) = self.entries.insert(key, entry) {
            self.bytes -= key_len + old.value.len() as u64;
        }
    }

    fn remove(&mut self, key: &[u8]) {
        if let Some(old) = self.entries.remove(key) {
            self.bytes -= (key.len() + old.value.len()) as u64;
        }
    }

    /// Drop the values expired at `now`.
    fn sweep(&mut self, now: u64) {
        let mut freed = 0;
        self.entries.retain(|key, e| {
            let live = e.expires_ms == 0 || e.expires_ms > now;
            if !live {
                freed += (key.len() + e.value.len()) as u64;
            }
            live
        });
        self.bytes -= freed;
    }
}

/// One store on Redis: the node's mirror and the queue to its thread.
pub(super) struct RedisKv {
    mirror: RwLock<Mirror>,
    writes: mpsc::UnboundedSender<Op>,
    /// Bytes of the writes not yet in Redis (the bound of `writes` and of
    /// the link's pending list).
    budget: Arc<QueueBudget>,
}

/// What the Redis thread knows of its store.
struct Link {
    kv: Arc<RedisKv>,
    url: String,
    /// `weir:kv:<store>:`
    prefix: Vec<u8>,
    /// `weir:kv:<store>`
    channel: String,
}

impl RedisKv {
    /// The store `store` (`route-…` or `shared-…`, already escaped) on the
    /// Redis server at `url`; its thread connects in the background.
    pub(super) fn open(
        url: &str,
        store: &str,
        budget: Arc<QueueBudget>,
    ) -> std::io::Result<Arc<RedisKv>> {
        // Unbounded in messages, bounded in bytes by `budget`.
        let (writes, queue) = mpsc::unbounded_channel();
        let kv = Arc::new(RedisKv {
            mirror: RwLock::default(),
            writes,
            budget,
        });
        let link = Link {
            kv: kv.clone(),
            url: url.to_string(),
            prefix: format!("weir:kv:{store}:").into_bytes(),
            channel: format!("weir:kv:{store}"),
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        std::thread::Builder::new()
            .name("weir-kv-redis".into())
            .spawn(move || runtime.block_on(link.run(queue)))?;
        Ok(kv)
    }

    /// The value under `key` in this node's mirror, None when absent or
    /// expired.
    pub(super) fn get(&self, key: &[u8], now_ms: u64) -> Option<Vec<u8>> {
        let mirror = self.mirror.read().expect("kv mirror lock");
        let entry = mirror.entries.get(key)?;
        if entry.expires_ms != 0 && entry.expires_ms <= now_ms {
            return None;
        }
        Some(entry.value.clone())
    }

    /// Apply `op` to the mirror now and queue it for Redis, or refuse it
    /// (over `quota` as the mirror counts, or the queue full).
    pub(super) fn write(&self, op: Op, quota: &KvQuota) -> Result<(), KvErrorReason> {
        let mut mirror = self.mirror.write().expect("kv mirror lock");
        if let Op::Set { key, value, .. } = &op {
            let new = (key.len() + value.len()) as u64;
            let check = |m: &Mirror| {
                let old = m
                    .entries
                    .get(key)
                    .map(|e| (key.len() + e.value.len()) as u64);
                fits(quota, m.entries.len(), m.bytes, old, new)
            };
            if check(&mirror).is_err() {
                mirror.sweep(now_ms());
            }
            check(&mirror)?;
        }
        self.budget.take(op.cost())?;
        Self::apply_to(&mut mirror, &op);
        // Queued under the lock: Redis gets the writes in the mirror's order.
        let _ = self.writes.send(op);
        Ok(())
    }

    /// Queue a flush (answered once Redis has every write before it).
    pub(super) fn flush(&self, done: std::sync::mpsc::Sender<()>) {
        let _ = self.writes.send(Op::Flush(done));
    }

    /// Keys and bytes in this node's mirror.
    pub(super) fn usage(&self) -> (usize, u64) {
        let mirror = self.mirror.read().expect("kv mirror lock");
        (mirror.entries.len(), mirror.bytes)
    }

    fn apply(&self, op: &Op) {
        Self::apply_to(&mut self.mirror.write().expect("kv mirror lock"), op);
    }

    fn apply_to(mirror: &mut Mirror, op: &Op) {
        match op {
            Op::Set {
                key,
                value,
                expires_ms,
            } => {
                mirror.insert(
                    key.clone(),
                    Entry {
                        expires_ms: *expires_ms,
                        value: value.clone(),
                    },
                );
            }
            Op::Delete { key } => {
                mirror.remove(key);
            }
            Op::Flush(_) => {}
        }
    }
}

impl Link {
    /// Connect, load, and carry writes and other nodes' updates until the
    /// store is dropped; reconnect with backoff when the link fails.
    async fn run(self, mut queue: mpsc::UnboundedReceiver<Op>) {
        let mut pending = VecDeque::new();
        let mut backoff = Backoff::default();
        loop {
            let mut up = false;
            match self.session(&mut queue, &mut pending, &mut up).await {
                Ok(()) => return,
                Err(e) => warn!(store = %self.channel, error = %e, retry_in = ?backoff.current(),
                    pending = pending.len(), "key-value store: Redis link failed"),
            }
            if up {
                backoff.reset();
            }
            // Writes keep arriving while we wait: hold them.
            if !backoff
                .wait(async || queue.recv().await, |op| pending.push_back(op))
                .await
            {
                return;
            }
        }
    }

    async fn session(
        &self,
        queue: &mut mpsc::UnboundedReceiver<Op>,
        pending: &mut VecDeque<Op>,
        up: &mut bool,
    ) -> Result<(), String> {
        let (push_sender, mut pushes) = mpsc::unbounded_channel();
        let sep = if self.url.contains('?') { '&' } else { '?' };
        let client = redis::Client::open(format!("{}{sep}protocol=resp3", self.url))
            .map_err(|e| e.to_string())?;
        let config = redis::AsyncConnectionConfig::new()
            .set_push_sender(push_sender)
            .set_connection_timeout(Some(REDIS_TIMEOUT))
            .set_response_timeout(Some(REDIS_TIMEOUT));
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|e| e.to_string())?;
        // Subscribe before loading, so no update falls between the two.
        conn.subscribe(&self.channel)
            .await
            .map_err(|e| e.to_string())?;
        // Writes not yet sent are in the mirror; the load replaces it, so
        // gather them first and apply them again after it.
        while let Ok(op) = queue.try_recv() {
            pending.push_back(op);
        }
        let loaded = self.load(&mut conn).await.map_err(|e| e.to_string())?;
        for op in pending.iter() {
            self.kv.apply(op);
        }
        *up = true;
        info!(store = %self.channel, keys = loaded, "key-value store: loaded from Redis");
        let mut sweep = tokio::time::interval(SWEEP_EVERY);
        loop {
            while !pending.is_empty() {
                self.send(&mut conn, pending)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            tokio::select! {
                op = queue.recv() => match op {
                    Some(op) => {
                        pending.push_back(op);
                        while let Ok(op) = queue.try_recv() {
                            pending.push_back(op);
                        }
                    }
                    None => return Ok(()),
                },
                push = pushes.recv() => match push {
                    Some(push) => match push.kind {
                        PushKind::Message => self.receive(&push.data),
                        PushKind::Disconnection => return Err("disconnected".into()),
                        _ => {}
                    },
                    None => return Err("the connection is gone".into()),
                },
                _ = sweep.tick() => {
                    let now = now_ms();
                    self.kv.mirror.write().expect("kv mirror lock").sweep(now);
                }
            }
        }
    }

    /// Replace the mirror with the store as Redis has it; the number of
    /// keys loaded.
    async fn load(&self, conn: &mut MultiplexedConnection) -> redis::RedisResult<usize> {
        let mut pattern = self.prefix.clone();
        pattern.push(b'*');
        let mut loaded = Mirror::default();
        let mut cursor = 0u64;
        loop {
            let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(conn)
                .await?;
            if !keys.is_empty() {
                let mut pipe = redis::pipe();
                for key in &keys {
                    pipe.cmd("GET").arg(key).cmd("PEXPIRETIME").arg(key);
                }
                let values: Vec<(Option<Vec<u8>>, i64)> = pipe.query_async(conn).await?;
                for (key, (value, expires)) in keys.into_iter().zip(values) {
                    if let Some(value) = value {
                        let key = key[self.prefix.len()..].to_vec();
                        let expires_ms = u64::try_from(expires).unwrap_or(0);
                        loaded.insert(key, Entry { expires_ms, value });
                    }
                }
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
        let n = loaded.entries.len();
        *self.kv.mirror.write().expect("kv mirror lock") = loaded;
        Ok(n)
    }

    /// Send up to [`WRITE_BATCH`] pending writes in one MULTI, each with
    /// its PUBLISH; they leave `pending` only once Redis has them.
    async fn send(
        &self,
        conn: &mut MultiplexedConnection,
        pending: &mut VecDeque<Op>,
    ) -> redis::RedisResult<()> {
        let n = pending.len().min(WRITE_BATCH);
        let mut pipe = redis::pipe();
        pipe.atomic();
        let now = now_ms();
        let mut writes = 0;
        for op in pending.iter().take(n) {
            let message = match op {
                Op::Set {
                    key,
                    value,
                    expires_ms,
                } if *expires_ms == 0 || *expires_ms > now => {
                    let full = [&self.prefix[..], key].concat();
                    if *expires_ms == 0 {
                        pipe.cmd("SET").arg(&full).arg(value).ignore();
                    } else {
                        pipe.cmd("SET")
                            .arg(&full)
                            .arg(value)
                            .arg("PXAT")
                            .arg(*expires_ms)
                            .ignore();
                    }
                    encode(b's', *expires_ms, key, value)
                }
                // Expired before it left: a delete.
                Op::Set { key, .. } | Op::Delete { key } => {
                    let full = [&self.prefix[..], key].concat();
                    pipe.cmd("DEL").arg(&full).ignore();
                    encode(b'd', 0, key, &[])
                }
                Op::Flush(_) => continue,
            };
            pipe.cmd("PUBLISH").arg(&self.channel).arg(message).ignore();
            writes += 1;
        }
        if writes > 0 {
            pipe.query_async::<()>(conn).await?;
        }
        for op in pending.drain(..n) {
            self.kv.budget.give_back(op.cost());
            if let Op::Flush(done) = op {
                let _ = done.send(());
            }
        }
        Ok(())
    }

    /// A message on the store's channel: apply it to the mirror.
    fn receive(&self, data: &[Value]) {
        let Some(Value::BulkString(message)) = data.get(1) else {
            return;
        };
        match decode(message) {
            Some(op) => self.kv.apply(&op),
            None => warn!(store = %self.channel, "key-value store: a malformed update; ignored"),
        }
    }
}

/// A channel message (see the module head).
fn encode(op: u8, expires_ms: u64, key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(13 + key.len() + value.len());
    out.push(op);
    out.extend_from_slice(&expires_ms.to_le_bytes());
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(value);
    out
}

fn decode(message: &[u8]) -> Option<Op> {
    let (&op, rest) = message.split_first()?;
    let expires_ms = u64::from_le_bytes(rest.get(..8)?.try_into().ok()?);
    let len = u32::from_le_bytes(rest.get(8..12)?.try_into().ok()?) as usize;
    let key = rest.get(12..12 + len)?.to_vec();
    let value = rest[12 + len..].to_vec();
    match op {
        b's' => Some(Op::Set {
            key,
            value,
            expires_ms,
        }),
        b'd' => Some(Op::Delete { key }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_channel_message_decodes_to_the_write_it_encodes() {
        let m = encode(b's', 42, b"k:1", b"value");
        let Some(Op::Set {
            key,
            value,
            expires_ms,
        }) = decode(&m)
        else {
            panic!("not a set")
        };
        assert_eq!(
            (&key[..], &value[..], expires_ms),
            (&b"k:1"[..], &b"value"[..], 42)
        );
        assert!(
            matches!(decode(&encode(b'd', 0, b"k", b"")), Some(Op::Delete { key }) if key == b"k")
        );
        assert!(decode(&m[..10]).is_none(), "truncated");
        assert!(decode(&encode(b'x', 0, b"k", b"")).is_none(), "unknown op");
    }
}
