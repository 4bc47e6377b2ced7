//! Connected real-time clients by user, so the server API can reach a
//! user's connections (`disconnect`, `subscribe`, `unsubscribe`) and count
//! them (`info`). One entry per connection from its connect to its close:
//! bounded by the gateway's connection limit. A connection's [`Inbox`]
//! carries the commands its behaviour must run itself (subscriptions are
//! its state); a disconnect goes straight to its outbound queue.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;
use weir_reactor::outbound::Outbound;
use weir_reactor::registry::ConnId;

/// Commands one connection may have waiting: past it, more are dropped
/// (and counted as not delivered).
pub(crate) const INBOX_MAX: usize = 256;

/// What the server API asks of a user's connections.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum UserCommand {
    /// Subscribe the connection to `channel` (a server-side subscription,
    /// announced with a subscribe push).
    Subscribe { channel: String },
    /// End the connection's subscription to `channel`, client- or
    /// server-side (an unsubscribe push, code 2000).
    Unsubscribe { channel: String },
    /// Close the connection with `code` and `reason`.
    Disconnect { code: u16, reason: String },
}

/// A connection's waiting commands, and the wake-up of its behaviour.
#[derive(Default)]
pub struct Inbox {
    queue: Mutex<VecDeque<UserCommand>>,
    ready: Notify,
}

impl Inbox {
    fn push(&self, command: UserCommand) -> bool {
        let mut queue = self.queue.lock().expect("inbox lock");
        if queue.len() >= INBOX_MAX {
            return false;
        }
        queue.push_back(command);
        drop(queue);
        self.ready.notify_one();
        true
    }

    /// Every waiting command, oldest first.
    pub fn take(&self) -> VecDeque<UserCommand> {
        std::mem::take(&mut *self.queue.lock().expect("inbox lock"))
    }

    /// Resolves once a command was pushed since the last wake-up (at once
    /// if one was pushed while nobody waited).
    pub async fn wait(&self) {
        self.ready.notified().await
    }
}

/// One connected client.
struct Entry {
    client: String,
    conn: ConnId,
    outbound: Arc<Outbound>,
    inbox: Arc<Inbox>,
}

/// Connected clients, by user id ("" for anonymous ones).
#[derive(Default)]
pub struct Clients {
    by_user: Mutex<HashMap<String, Vec<Entry>>>,
}

impl Clients {
    pub fn add(
        &self,
        user: &str,
        client: &str,
        conn: ConnId,
        outbound: &Arc<Outbound>,
        inbox: &Arc<Inbox>,
    ) {
        let mut by_user = self.by_user.lock().expect("clients lock");
        by_user.entry(user.to_string()).or_default().push(Entry {
            client: client.to_string(),
            conn,
            outbound: outbound.clone(),
            inbox: inbox.clone(),
        });
    }

    pub fn remove(&self, user: &str, conn: ConnId) {
        let mut by_user = self.by_user.lock().expect("clients lock");
        if let Some(list) = by_user.get_mut(user) {
            list.retain(|e| e.conn != conn);
            if list.is_empty() {
                by_user.remove(user);
            }
        }
    }

    /// Runs `command` on `user`'s connections on this node (only
    /// `client`'s, when given); how many took it.
    pub fn command(&self, user: &str, client: Option<&str>, command: &UserCommand) -> usize {
        let by_user = self.by_user.lock().expect("clients lock");
        let Some(list) = by_user.get(user) else {
            return 0;
        };
        list.iter()
            .filter(|e| client.is_none_or(|c| c == e.client))
            .filter(|e| match command {
                UserCommand::Disconnect { code, reason } => e.outbound.close(*code, reason),
                other => e.inbox.push(other.clone()),
            })
            .count()
    }

    /// (connected clients, distinct users).
    pub fn counts(&self) -> (usize, usize) {
        let by_user = self.by_user.lock().expect("clients lock");
        (by_user.values().map(Vec::len).sum(), by_user.len())
    }
}
