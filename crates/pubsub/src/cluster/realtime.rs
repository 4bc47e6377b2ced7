//! What the real-time cores ask of the cluster link: the channels they
//! watch (a Redis channel per real-time channel, and each core's control
//! channel), and waiting until a watch is in place. A core has a scope
//! ("" for the gateway's): its channels' Redis names start with it, so two
//! cores never share a channel, and their messages go to that core alone.

use super::*;

impl RedisBroker {
    /// The real-time core of `scope` receives the channels it watches (a
    /// core attached again under the same scope replaces the earlier one).
    pub fn attach_realtime(&self, scope: &str, sink: Weak<dyn RealtimeSink>) {
        let mut cores = self.realtime.write().expect("cluster lock");
        cores.retain(|_, s| s.strong_count() > 0);
        cores.insert(scope.into(), sink);
    }

    /// `namespace`'s topics are real-time channels of the core of `scope`:
    /// while one has local subscribers, its channel's messages come to
    /// this node.
    pub fn realtime_adapter(&self, namespace: &Arc<str>, scope: &str) {
        let mut adapters = self.realtime_adapters.write().expect("cluster lock");
        if !adapters.iter().any(|(n, _)| n == namespace) {
            adapters.push((namespace.clone(), scope.into()));
        }
    }

    /// The scope of the core whose adapter `namespace` is, if it is one.
    pub(super) fn adapter_scope(&self, namespace: &str) -> Option<Arc<str>> {
        self.realtime_adapters
            .read()
            .expect("cluster lock")
            .iter()
            .find(|(n, _)| &**n == namespace)
            .map(|(_, scope)| scope.clone())
    }

    /// Watches a core's control channel for the life of the process (not
    /// counted among the subscribed topics).
    pub fn watch_control(&self, scope: &str, channel: &str) {
        self.control
            .lock()
            .expect("cluster lock")
            .insert(realtime_channel(&format!("{scope}{channel}")));
        self.watch_realtime(scope, channel);
    }

    /// The core of `scope` wants `channel`'s messages on this node (until
    /// as many [`unwatch_realtime`](Self::unwatch_realtime) calls).
    pub fn watch_realtime(&self, scope: &str, channel: &str) {
        let name = realtime_channel(&format!("{scope}{channel}"));
        let mut watch = self.realtime_watch.lock().expect("cluster lock");
        let count = watch.entry(name.clone()).or_insert(0);
        *count += 1;
        if *count == 1 {
            let mut wanted = self.wanted.lock().expect("cluster lock");
            wanted.insert(
                name,
                (Arc::from(format!("{REALTIME_MARK}{scope}")), channel.into()),
            );
            drop(wanted);
            self.wanted_changed.notify_one();
        }
    }

    pub fn unwatch_realtime(&self, scope: &str, channel: &str) {
        let name = realtime_channel(&format!("{scope}{channel}"));
        let mut watch = self.realtime_watch.lock().expect("cluster lock");
        let Some(count) = watch.get_mut(&name) else {
            return;
        };
        *count -= 1;
        if *count == 0 {
            watch.remove(&name);
            let mut wanted = self.wanted.lock().expect("cluster lock");
            wanted.remove(&name);
            drop(wanted);
            self.wanted_changed.notify_one();
        }
    }

    /// Waits until Redis confirms this node's subscription to the real-time
    /// `channel` of the core of `scope` (watched before), or fails after
    /// `within`: what is published from then on reaches this node.
    pub async fn wait_subscribed(&self, scope: &str, channel: &str, within: Duration) -> bool {
        let name = realtime_channel(&format!("{scope}{channel}"));
        self.wait_active(name, within).await
    }

    /// Waits until the Redis channel `name` is subscribed, or `within` passed.
    pub(super) async fn wait_active(&self, name: String, within: Duration) -> bool {
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
