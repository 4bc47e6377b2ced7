//! Where topics cross gateway processes. A [`Broker`] hears which topics
//! have local subscribers (`watch`/`unwatch`) and every local publish, and
//! hands other nodes' publishes to the namespace ([`Topics::deliver_remote`]).
//! [`LocalBroker`], the default, crosses nothing: one process needs no
//! external service. `cluster::RedisBroker` carries them over Redis.

use super::Topics;
use bytes::Bytes;
use std::sync::Arc;

/// How the node's topics meet other nodes'. Called on the message path:
/// implementations must never block (queue, drop and count instead).
pub trait Broker: Send + Sync {
    /// A namespace was made (the broker delivers other nodes' publishes to it).
    fn register(&self, _namespace: &Arc<Topics>) {}
    /// `topic` got its first local subscriber.
    fn watch(&self, namespace: &Arc<str>, topic: &str);
    /// `topic`'s last local subscriber left.
    fn unwatch(&self, namespace: &Arc<str>, topic: &str);
    /// A local publish of `frames` (whole server frames) to `topic`.
    fn publish(&self, namespace: &Arc<str>, topic: &Arc<str>, frames: &Bytes);
    /// Resolves once other nodes' publishes to `topic` (watched) reach this
    /// node, false if that did not happen within `within`; at once where
    /// nothing crosses nodes. What a subscribe waits for before it tells a
    /// client it is subscribed.
    fn wait_watched<'a>(
        &'a self,
        _namespace: &'a str,
        _topic: &'a str,
        _within: std::time::Duration,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send + 'a>> {
        Box::pin(std::future::ready(true))
    }
    /// The link's figures for `/metrics` (None: no link).
    fn stats(&self) -> Option<super::cluster::ClusterStats> {
        None
    }
}

/// A single node: topics live in this process only.
pub struct LocalBroker;

impl Broker for LocalBroker {
    fn watch(&self, _: &Arc<str>, _: &str) {}
    fn unwatch(&self, _: &Arc<str>, _: &str) {}
    fn publish(&self, _: &Arc<str>, _: &Arc<str>, _: &Bytes) {}
}
