//! The broker as workers see it: watch and unwatch a namespace's topics,
//! publish into them, and the link's figures for `/metrics`.

use super::*;

impl Broker for RedisBroker {
    fn register(&self, namespace: &Arc<Topics>) {
        self.namespaces
            .write()
            .expect("cluster lock")
            .insert(namespace.name().clone(), Arc::downgrade(namespace));
    }

    fn watch(&self, namespace: &Arc<str>, topic: &str) {
        let mut wanted = self.wanted.lock().expect("cluster lock");
        wanted.insert(channel(namespace, topic), (namespace.clone(), topic.into()));
        drop(wanted);
        self.wanted_changed.notify_one();
        if let Some(scope) = self.adapter_scope(namespace) {
            self.watch_realtime(&scope, topic);
        }
    }

    fn unwatch(&self, namespace: &Arc<str>, topic: &str) {
        let mut wanted = self.wanted.lock().expect("cluster lock");
        wanted.remove(&channel(namespace, topic));
        drop(wanted);
        self.wanted_changed.notify_one();
        if let Some(scope) = self.adapter_scope(namespace) {
            self.unwatch_realtime(&scope, topic);
        }
    }

    fn publish(&self, namespace: &Arc<str>, topic: &Arc<str>, frames: &Bytes) {
        let outgoing = Outgoing {
            namespace: namespace.clone(),
            topic: topic.clone(),
            frames: frames.clone(),
        };
        let len = frames.len();
        let room = self
            .queued_bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |now| {
                (now + len <= PUBLISH_QUEUE_MAX_BYTES).then_some(now + len)
            })
            .is_ok();
        if !room {
            return self.lose(1);
        }
        if self.queue.try_send(outgoing).is_err() {
            self.dequeued(len);
            self.lose(1);
        }
    }

    fn wait_watched<'a>(
        &'a self,
        namespace: &'a str,
        topic: &'a str,
        within: Duration,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send + 'a>> {
        Box::pin(self.wait_active(channel(namespace, topic), within))
    }

    fn stats(&self) -> Option<ClusterStats> {
        Some(ClusterStats {
            connected: self.connected.load(Ordering::Acquire),
            subscribed: self.subscribed.load(Ordering::Acquire),
            sent: self.sent.load(Ordering::Relaxed),
            received: self.received.load(Ordering::Relaxed),
            lost: self.lost.load(Ordering::Relaxed),
            link_failures: self.link_failures.load(Ordering::Relaxed),
            resubscribed: self.resubscribed.load(Ordering::Relaxed),
            received_dropped: self.received_dropped.load(Ordering::Relaxed),
        })
    }
}
