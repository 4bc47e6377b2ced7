//! What the real-time core asks of the cluster link: the channels it
//! watches (its own Redis channel per real-time channel, and the control
//! channel), and waiting until a watch is in place.

use super::*;

impl RedisBroker {
    /// The real-time core receives the channels it watches.
    pub fn attach_realtime(&self, sink: Weak<dyn RealtimeSink>) {
        *self.realtime.write().expect("cluster lock") = Some(sink);
    }

    /// `namespace`'s topics are real-time channels: while one has local
    /// subscribers, its channel's messages come to this node.
    pub fn realtime_adapter(&self, namespace: &Arc<str>) {
        let mut adapters = self.realtime_adapters.write().expect("cluster lock");
        if !adapters.contains(namespace) {
            adapters.push(namespace.clone());
        }
    }

    pub(super) fn is_realtime_adapter(&self, namespace: &str) -> bool {
        self.realtime_adapters
            .read()
            .expect("cluster lock")
            .iter()
            .any(|n| &**n == namespace)
    }

    /// Watches the real-time core's control channel for the life of the
    /// process (not counted among the subscribed topics).
    pub fn watch_control(&self, channel: &str) {
        let _ = self.control.set(realtime_channel(channel));
        self.watch_realtime(channel);
    }

    /// The real-time core wants `channel`'s messages on this node (until
    /// as many [`unwatch_realtime`](Self::unwatch_realtime) calls).
    pub fn watch_realtime(&self, channel: &str) {
        let mut watch = self.realtime_watch.lock().expect("cluster lock");
        let count = watch.entry(channel.to_string()).or_insert(0);
        *count += 1;
        if *count == 1 {
            let mut wanted = self.wanted.lock().expect("cluster lock");
            wanted.insert(
                realtime_channel(channel),
                (self.realtime_namespace.clone(), channel.into()),
            );
            drop(wanted);
            self.wanted_changed.notify_one();
        }
    }

    pub fn unwatch_realtime(&self, channel: &str) {
        let mut watch = self.realtime_watch.lock().expect("cluster lock");
        let Some(count) = watch.get_mut(channel) else {
            return;
        };
        *count -= 1;
        if *count == 0 {
            watch.remove(channel);
            let mut wanted = self.wanted.lock().expect("cluster lock");
            wanted.remove(&realtime_channel(channel));
            drop(wanted);
            self.wanted_changed.notify_one();
        }
    }

    /// Waits until Redis confirms this node's subscription to the real-time
    /// `channel` (watched before), or fails after `within`: what is
    /// published from then on reaches this node.
    pub async fn wait_subscribed(&self, channel: &str, within: Duration) -> bool {
        let name = realtime_channel(channel);
        let mut changes = self.active_changed.subscribe();
        let wait = async {
            loop {
                changes.borrow_and_update();
                if self.active.lock().expect("cluster lock").contains(&name) {
                    return;
                }
                if changes.changed().await.is_err() {
                    return std::future::pending().await;
                }
            }
        };
        tokio::time::timeout(within, wait).await.is_ok()
    }
}
