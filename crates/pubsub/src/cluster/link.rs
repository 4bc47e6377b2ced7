//! The cluster's link to Redis: one server or a Redis Cluster (sharded
//! pub/sub), with the client's pushes bounded in bytes and every call timed
//! out, so a shard that is gone fails the link instead of hanging it.

use super::*;

/// What the Redis client hands the link: a channel unbounded in messages,
/// bounded here in bytes ([`RECEIVE_QUEUE_MAX_BYTES`]). Only messages are
/// dropped at the bound; disconnection and subscription notices always
/// pass (they are small, and the link needs them).
pub(super) struct BoundedPushes {
    pub(super) tx: mpsc::UnboundedSender<(usize, PushInfo)>,
    pub(super) queued: Arc<AtomicUsize>,
    pub(super) dropped: Arc<AtomicU64>,
}

impl redis::aio::AsyncPushSender for BoundedPushes {
    fn send(&self, info: PushInfo) -> Result<(), redis::aio::SendError> {
        let size: usize = info
            .data
            .iter()
            .map(|v| match v {
                Value::BulkString(b) => b.len(),
                _ => 16,
            })
            .sum();
        if !matches!(info.kind, PushKind::Message | PushKind::SMessage) {
            // Not counted: the link handles these without queueing them.
            return self.tx.send((0, info)).map_err(|_| redis::aio::SendError);
        }
        if self.queued.load(Ordering::Acquire) + size > RECEIVE_QUEUE_MAX_BYTES {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        self.queued.fetch_add(size, Ordering::AcqRel);
        self.tx
            .send((size, info))
            .map_err(|_| redis::aio::SendError)
    }
}

/// `work`, failed if Redis takes longer than [`REDIS_TIMEOUT`] (a cluster
/// client may keep retrying a shard that is gone).
pub(super) async fn timed<T>(
    work: impl std::future::Future<Output = RedisResult<T>>,
) -> RedisResult<T> {
    match tokio::time::timeout(REDIS_TIMEOUT, work).await {
        Ok(result) => result,
        Err(_) => Err(redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "Redis did not answer in time",
        ))),
    }
}

/// A connection to one Redis server or to a Redis Cluster.
pub(super) enum Link {
    Server(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl Link {
    pub(super) async fn open(config: &ClusterConfig, pushes: BoundedPushes) -> RedisResult<Link> {
        match config {
            ClusterConfig::Redis(url) => {
                // RESP3: subscriptions and commands share one connection.
                let sep = if url.contains('?') { '&' } else { '?' };
                let client = redis::Client::open(format!("{url}{sep}protocol=resp3"))?;
                let config = redis::AsyncConnectionConfig::new()
                    .set_push_sender(pushes)
                    .set_connection_timeout(Some(REDIS_TIMEOUT))
                    .set_response_timeout(Some(REDIS_TIMEOUT));
                let conn = client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?;
                Ok(Link::Server(conn))
            }
            ClusterConfig::RedisCluster(urls) => {
                let client = redis::cluster::ClusterClientBuilder::new(urls.clone())
                    .use_protocol(redis::ProtocolVersion::RESP3)
                    .push_sender(pushes)
                    .connection_timeout(REDIS_TIMEOUT)
                    .response_timeout(REDIS_TIMEOUT)
                    .retries(2)
                    .build()?;
                Ok(Link::Cluster(client.get_async_connection().await?))
            }
        }
    }

    pub(super) async fn subscribe(&mut self, channels: &[String]) -> RedisResult<()> {
        match self {
            Link::Server(conn) => conn.subscribe(channels).await,
            // One at a time: channels of one SSUBSCRIBE must share a slot.
            Link::Cluster(conn) => {
                for channel in channels {
                    conn.ssubscribe(channel).await?;
                }
                Ok(())
            }
        }
    }

    pub(super) async fn unsubscribe(&mut self, channels: &[String]) -> RedisResult<()> {
        match self {
            Link::Server(conn) => conn.unsubscribe(channels).await,
            Link::Cluster(conn) => {
                for channel in channels {
                    conn.sunsubscribe(channel).await?;
                }
                Ok(())
            }
        }
    }

    /// Sends publishes in order: one pipeline to a server; to a cluster,
    /// one SPUBLISH after another (each goes to its channel's shard).
    pub(super) async fn publish(&mut self, messages: &[(String, Vec<u8>)]) -> RedisResult<()> {
        match self {
            Link::Server(conn) => {
                let mut pipe = redis::pipe();
                for (channel, payload) in messages {
                    pipe.cmd("PUBLISH").arg(channel).arg(payload).ignore();
                }
                pipe.query_async::<()>(conn).await
            }
            Link::Cluster(conn) => {
                for (channel, payload) in messages {
                    redis::cmd("SPUBLISH")
                        .arg(channel)
                        .arg(payload)
                        .query_async::<()>(conn)
                        .await?;
                }
                Ok(())
            }
        }
    }
}
