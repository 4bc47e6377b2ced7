//! The real-time core's store across nodes, on the `[cluster]` Redis (one
//! server or a Redis Cluster). Per channel, under one hash tag so a Redis
//! Cluster keeps them on one shard and a script writes them together:
//!
//! - `weir:rt:{ch}:m`, a hash: `s` the channel's top offset, `e` its epoch;
//! - `weir:rt:{ch}:s`, a stream: one entry per kept publication, its id
//!   `<offset>-0`, fields `d` (data) and `i` (publisher info), trimmed by
//!   `MAXLEN history_size`; both expire `history_ttl` after the last publish
//!   (then the next publish starts a new epoch, as on one node);
//! - `weir:rt:{ch}:p` and `:z`, presence: a hash of members by client id
//!   and a sorted set of when each expires. Each node writes its members
//!   again every [`PRESENCE_REFRESH`]; a member its node stopped refreshing
//!   (the node died) is gone [`PRESENCE_TTL`] later. Each add, refresh and
//!   remove is also sent to the nodes that watch the channel, which keep
//!   a copy of the members (`roster.rs`);
//! - `weir:rt:{ch}:i:<key>`, a publish's idempotency key.
//!
//! A publish is one script: next offset, XADD, and the message to every
//! node that watches the channel (`weir:rt:{ch}`), so offsets reach every
//! node in the order they were given. Presence and history are scripts too.
//! Nothing here waits longer than [`REDIS_TIMEOUT`]: a Redis that does not
//! answer is an error for the caller, never a stuck connection.

mod scripts;
mod wire;

use super::{ClientInfo, Publication, RealtimeError, StreamPosition};
use bytes::Bytes;
use redis::aio::MultiplexedConnection;
use redis::cluster_async::ClusterConnection;
use redis::{RedisResult, Value};
use scripts::{PRESENCE_ADD, PRESENCE_GET, PRESENCE_REMOVE, PUBLISH, READ};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use weir_config::ClusterConfig;
use weir_pubsub::cluster::realtime_channel;
use wire::parse_read;
pub use wire::Message;
pub(crate) use wire::{decode_info, decode_message, encode_info};

/// How long one Redis call may take before it counts as failed.
pub const REDIS_TIMEOUT: Duration = Duration::from_secs(2);
/// A presence entry lives this long unless its node writes it again.
pub const PRESENCE_TTL: Duration = Duration::from_secs(30);
/// How often a node writes its members' presence again.
pub(crate) const PRESENCE_REFRESH: Duration = Duration::from_secs(10);

/// A connection to one Redis server or to a Redis Cluster.
#[derive(Clone)]
enum Conn {
    Server(MultiplexedConnection),
    Cluster(ClusterConnection),
}

/// What the core asks of Redis.
pub struct RedisStore {
    config: ClusterConfig,
    /// Shared by the stores of every scope (one connection per process).
    conn: Arc<tokio::sync::Mutex<Option<Conn>>>,
    /// Put before every channel name in Redis: "" for the gateway's core,
    /// a route's own for a core it keeps ([`scoped`](Self::scoped)).
    scope: String,
    /// Where the core's Redis work runs (connections' tasks, presence
    /// refresh, and the client commands that wait on Redis).
    runtime: tokio::runtime::Handle,
    /// The last failure, for the log (one line per outage, not per call).
    failing: Arc<Mutex<Option<Instant>>>,
    /// Whole member lists read ([`presence`](Self::presence)): a join
    /// answered from the node's copy reads none (the tests count them).
    presence_reads: AtomicU64,
}

/// One channel's keys.
struct Keys {
    meta: String,
    stream: String,
    presence: String,
    expiry: String,
    channel: String,
}

impl Keys {
    fn of(channel: &str) -> Keys {
        let tag = realtime_channel(channel);
        Keys {
            meta: format!("{tag}:m"),
            stream: format!("{tag}:s"),
            presence: format!("{tag}:p"),
            expiry: format!("{tag}:z"),
            channel: tag,
        }
    }
}

/// Where a read starts.
#[derive(Debug, Clone, Copy)]
pub enum ReadFrom {
    After(u64),
    PositionOnly,
    Start,
}

/// A channel's stream as Redis has it.
pub struct Read {
    pub top: StreamPosition,
    pub publications: Vec<Publication>,
}

impl RedisStore {
    /// The store and the thread its work runs on; connecting happens on
    /// first use (a Redis that is down at start is an error per call, not
    /// at start, like the broker's link).
    pub fn start(config: ClusterConfig) -> std::io::Result<Arc<RedisStore>> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let handle = runtime.handle().clone();
        std::thread::Builder::new()
            .name("weir-realtime".into())
            .spawn(move || runtime.block_on(std::future::pending::<()>()))?;
        Ok(Arc::new(RedisStore {
            config,
            conn: Arc::default(),
            scope: String::new(),
            runtime: handle,
            failing: Arc::default(),
            presence_reads: AtomicU64::new(0),
        }))
    }

    /// The same store (connection, runtime) naming channels in `scope`:
    /// a route's own core, whose channels never meet the gateway's.
    pub fn scoped(&self, scope: &str) -> Arc<RedisStore> {
        Arc::new(RedisStore {
            config: self.config.clone(),
            conn: self.conn.clone(),
            scope: scope.to_string(),
            runtime: self.runtime.clone(),
            failing: self.failing.clone(),
            presence_reads: AtomicU64::new(0),
        })
    }

    pub fn scope(&self) -> &str {
        &self.scope
    }

    fn keys(&self, channel: &str) -> Keys {
        Keys::of(&format!("{}{channel}", self.scope))
    }

    /// A key of `channel` beside the store's own (`…:{channel}:<suffix>`),
    /// on the same Redis Cluster shard: for an adapter's scripts
    /// ([`script`](Self::script)).
    pub fn channel_key(&self, channel: &str, suffix: &str) -> String {
        format!("{}:{suffix}", self.keys(channel).channel)
    }

    /// Runs an adapter's Lua `script` on `keys` with `args` (one shard: the
    /// keys must share a channel's hash tag, [`channel_key`](Self::channel_key)),
    /// bounded by [`REDIS_TIMEOUT`] like every call here.
    pub async fn script<T: redis::FromRedisValue>(
        &self,
        script: &str,
        keys: &[String],
        args: &[Vec<u8>],
    ) -> Result<T, RealtimeError> {
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let mut call = eval(script, &keys);
        for arg in args {
            call.arg(arg.as_slice());
        }
        self.invoke(call).await
    }

    pub fn runtime(&self) -> &tokio::runtime::Handle {
        &self.runtime
    }

    async fn conn(&self) -> RedisResult<Conn> {
        let mut held = self.conn.lock().await;
        if let Some(conn) = held.as_ref() {
            return Ok(conn.clone());
        }
        let conn = match &self.config {
            ClusterConfig::Redis(url) => {
                let client = redis::Client::open(url.as_str())?;
                let config = redis::AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(REDIS_TIMEOUT))
                    .set_response_timeout(Some(REDIS_TIMEOUT));
                Conn::Server(
                    client
                        .get_multiplexed_async_connection_with_config(&config)
                        .await?,
                )
            }
            ClusterConfig::RedisCluster(urls) => {
                let client = redis::cluster::ClusterClientBuilder::new(urls.clone())
                    .connection_timeout(REDIS_TIMEOUT)
                    .response_timeout(REDIS_TIMEOUT)
                    .retries(2)
                    .build()?;
                Conn::Cluster(client.get_async_connection().await?)
            }
        };
        *held = Some(conn.clone());
        Ok(conn)
    }

    /// Runs `cmd` (a script: [`eval`]); a failure drops the connection
    /// (the next call connects again) and is the caller's
    /// [`RealtimeError::Unavailable`].
    async fn invoke<T: redis::FromRedisValue>(&self, cmd: redis::Cmd) -> Result<T, RealtimeError> {
        let work = async {
            match self.conn().await? {
                Conn::Server(mut c) => cmd.query_async(&mut c).await,
                Conn::Cluster(mut c) => cmd.query_async(&mut c).await,
            }
        };
        let result = match tokio::time::timeout(REDIS_TIMEOUT, work).await {
            Ok(result) => result,
            Err(_) => Err(redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "Redis did not answer in time",
            ))),
        };
        match result {
            Ok(v) => {
                self.failing.lock().expect("store lock").take();
                Ok(v)
            }
            Err(e) => {
                *self.conn.lock().await = None;
                let first = self
                    .failing
                    .lock()
                    .expect("store lock")
                    .replace(Instant::now());
                if first.is_none() {
                    tracing::warn!(error = %e, "realtime: Redis call failed; publishes, history and presence fail until it answers");
                }
                Err(RealtimeError::Unavailable)
            }
        }
    }

    /// Publishes into `channel`: its position, or the first publish's for
    /// a repeated `idempotency_key`. `history` is (size, ttl), or None.
    pub async fn publish(
        &self,
        channel: &str,
        data: &[u8],
        info: Option<&ClientInfo>,
        history: Option<(usize, Duration)>,
        idempotency_key: Option<&str>,
    ) -> Result<StreamPosition, RealtimeError> {
        let keys = self.keys(channel);
        let idem = format!("{}:i:{}", keys.channel, idempotency_key.unwrap_or_default());
        let (size, ttl) = history.unwrap_or((0, Duration::ZERO));
        let mut script = eval(PUBLISH, &[&keys.meta, &keys.stream, &idem]);
        script
            .arg(data)
            .arg(info.map(encode_info).unwrap_or_default())
            .arg(size)
            .arg(ttl.as_secs().max(1))
            .arg(super::history::new_epoch())
            .arg(&keys.channel)
            .arg(self.publish_command())
            .arg(if idempotency_key.is_some() { "1" } else { "0" })
            .arg(super::IDEMPOTENCY_TTL.as_secs());
        let (offset, epoch): (u64, String) = self.invoke(script).await?;
        Ok(StreamPosition { offset, epoch })
    }

    /// Tells every node watching `channel` that `info` joined (or left).
    pub async fn join_leave(&self, channel: &str, info: &ClientInfo, join: bool) {
        // A script, so a Redis Cluster routes it by the channel's keys.
        const SEND: &str = "redis.call(ARGV[1], KEYS[1], ARGV[2]) return 1";
        let keys = self.keys(channel);
        let mut payload = vec![if join { b'j' } else { b'l' }];
        payload.extend_from_slice(&encode_info(info));
        let mut call = eval(SEND, &[&keys.channel]);
        call.arg(self.publish_command()).arg(payload);
        let _: Result<i64, _> = self.invoke(call).await;
    }

    /// Sends `payload` to every node watching `channel` (the core's control
    /// channel: commands for users' connections wherever they are).
    pub async fn send(&self, channel: &str, payload: &[u8]) -> Result<(), RealtimeError> {
        const SEND: &str = "redis.call(ARGV[1], KEYS[1], ARGV[2]) return 1";
        let keys = self.keys(channel);
        let mut call = eval(SEND, &[&keys.channel]);
        call.arg(self.publish_command()).arg(payload);
        self.invoke::<i64>(call).await.map(|_| ())
    }

    fn publish_command(&self) -> &'static str {
        match self.config {
            ClusterConfig::Redis(_) => "PUBLISH",
            ClusterConfig::RedisCluster(_) => "SPUBLISH",
        }
    }

    /// The channel's position and its kept publications: after `since`
    /// ([`ReadFrom::After`]), none, or the first `limit` (the last, `reverse`).
    pub async fn read(
        &self,
        channel: &str,
        from: ReadFrom,
        limit: usize,
        reverse: bool,
        ttl: Duration,
    ) -> Result<Read, RealtimeError> {
        let keys = self.keys(channel);
        let since: i64 = match from {
            ReadFrom::After(offset) => offset.min(i64::MAX as u64 - 1) as i64,
            ReadFrom::PositionOnly => -2,
            ReadFrom::Start => -1,
        };
        let mut script = eval(READ, &[&keys.meta, &keys.stream]);
        script
            .arg(since)
            .arg(limit.max(1))
            .arg(if reverse { "1" } else { "0" })
            .arg(super::history::new_epoch())
            .arg(ttl.as_secs().max(1));
        let value: Value = self.invoke(script).await?;
        parse_read(value).ok_or(RealtimeError::Unavailable)
    }

    /// Forgets `channel`'s publications; its position stays.
    pub async fn history_remove(&self, channel: &str) -> Result<(), RealtimeError> {
        const DEL: &str = "redis.call('del', KEYS[1]) return 1";
        let keys = self.keys(channel);
        let call = eval(DEL, &[&keys.stream]);
        self.invoke::<i64>(call).await.map(|_| ())
    }

    /// Adds (or refreshes) `members` of `channel`, and tells the nodes that
    /// watch it; false when a new member would pass `max` (0: no cap).
    pub(crate) async fn presence_add(
        &self,
        channel: &str,
        members: &[Arc<ClientInfo>],
        max: usize,
    ) -> Result<bool, RealtimeError> {
        if members.is_empty() {
            return Ok(true);
        }
        let keys = self.keys(channel);
        let now = unix_secs();
        let mut script = eval(PRESENCE_ADD, &[&keys.presence, &keys.expiry]);
        script
            .arg(now)
            .arg(now + PRESENCE_TTL.as_secs())
            .arg(max)
            .arg(PRESENCE_TTL.as_secs() * 2)
            .arg(self.publish_command())
            .arg(&keys.channel);
        for m in members {
            script.arg(&m.client).arg(encode_info(m));
        }
        let added: i64 = self.invoke(script).await?;
        Ok(added == 1)
    }

    pub(crate) async fn presence_remove(&self, channel: &str, client: &str) {
        let keys = self.keys(channel);
        let mut script = eval(PRESENCE_REMOVE, &[&keys.presence, &keys.expiry]);
        script
            .arg(client)
            .arg(self.publish_command())
            .arg(&keys.channel);
        let _: Result<i64, _> = self.invoke(script).await;
    }

    /// Every member of `channel` whose node still refreshes it, with the
    /// unix second its entry expires unless written again.
    pub async fn presence(
        &self,
        channel: &str,
    ) -> Result<Vec<(Arc<ClientInfo>, u64)>, RealtimeError> {
        self.presence_reads.fetch_add(1, Ordering::Relaxed);
        let keys = self.keys(channel);
        let mut script = eval(PRESENCE_GET, &[&keys.presence, &keys.expiry]);
        script.arg(unix_secs());
        let flat: Vec<Vec<u8>> = self.invoke(script).await?;
        Ok(flat
            .chunks(3)
            .filter_map(|entry| {
                let info = decode_info(entry.get(1)?)?;
                let until: f64 = std::str::from_utf8(entry.get(2)?).ok()?.parse().ok()?;
                Some((Arc::new(info), until as u64))
            })
            .collect())
    }

    /// How many whole member lists this store read so far.
    pub fn presence_reads(&self) -> u64 {
        self.presence_reads.load(Ordering::Relaxed)
    }
}

/// `EVAL script` on `keys` (a Redis Cluster client routes it by the first
/// key); the caller adds the arguments. The scripts are a few hundred
/// bytes, sent each time rather than cached by digest: simpler, and no
/// NOSCRIPT to handle after a Redis restart.
fn eval(script: &str, keys: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(script).arg(keys.len());
    for key in keys {
        cmd.arg(*key);
    }
    cmd
}

pub(crate) fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_and_messages_read_back_as_written() {
        let info = ClientInfo {
            client: "c:1".into(),
            user: "42".into(),
            conn_info: Some(Bytes::from_static(b"{\"a\":\"x;y\"}")),
            chan_info: None,
        };
        assert_eq!(decode_info(&encode_info(&info)), Some(info.clone()));
        assert_eq!(decode_info(b"3:abc"), None, "fields missing");
        assert_eq!(decode_info(b"9:abc-:-:-:"), None, "length past the end");

        let mut raw = b"p7;ab12;".to_vec();
        let encoded = encode_info(&info);
        raw.extend_from_slice(format!("{};", encoded.len()).as_bytes());
        raw.extend_from_slice(&encoded);
        raw.extend_from_slice(b"{\"n\":\"1;2\"}");
        let Some(Message::Publication {
            position,
            publication,
        }) = decode_message(&Bytes::from(raw))
        else {
            panic!("a publication");
        };
        assert_eq!((position.offset, position.epoch.as_str()), (7, "ab12"));
        assert_eq!(&publication.data[..], b"{\"n\":\"1;2\"}");
        assert_eq!(publication.info.as_deref(), Some(&info));
        assert!(decode_message(&Bytes::from_static(b"p1;e;99;x")).is_none());
        assert!(matches!(
            decode_message(&Bytes::from(
                [b"j".as_slice(), &encode_info(&info)].concat()
            )),
            Some(Message::Join(i)) if i == info
        ));
        // A presence add's message: infos one after another.
        let other = ClientInfo {
            client: "c:2".into(),
            user: "7".into(),
            conn_info: None,
            chan_info: Some(Bytes::from_static(b"{}")),
        };
        let added = [b"a".as_slice(), &encode_info(&info), &encode_info(&other)].concat();
        assert!(matches!(
            decode_message(&Bytes::from(added)),
            Some(Message::Present(m)) if m == [info.clone(), other]
        ));
        assert!(matches!(
            decode_message(&Bytes::from_static(b"rc:1")),
            Some(Message::Absent(c)) if c == "c:1"
        ));
        assert!(decode_message(&Bytes::from_static(b"a3:abc")).is_none());
    }
}
