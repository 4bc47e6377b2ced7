//! Connected real-time clients by user, so the server API can reach a
//! user's connections (`disconnect`) and count them (`info`). One entry
//! per connection from its connect to its close: bounded by the gateway's
//! connection limit.

use crate::reactor::outbound::Outbound;
use crate::registry::ConnId;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// One connected client.
struct Entry {
    client: String,
    conn: ConnId,
    outbound: Arc<Outbound>,
}

/// Connected clients, by user id ("" for anonymous ones).
#[derive(Default)]
pub struct Clients {
    by_user: Mutex<HashMap<String, Vec<Entry>>>,
}

impl Clients {
    pub fn add(&self, user: &str, client: &str, conn: ConnId, outbound: &Arc<Outbound>) {
        let mut by_user = self.by_user.lock().expect("clients lock");
        by_user.entry(user.to_string()).or_default().push(Entry {
            client: client.to_string(),
            conn,
            outbound: outbound.clone(),
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

    /// Closes `user`'s connections (only `client`'s, when given) with
    /// `code` and `reason`; how many were closed.
    pub fn disconnect(&self, user: &str, client: Option<&str>, code: u16, reason: &str) -> usize {
        let by_user = self.by_user.lock().expect("clients lock");
        let Some(list) = by_user.get(user) else {
            return 0;
        };
        list.iter()
            .filter(|e| client.is_none_or(|c| c == e.client))
            .filter(|e| e.outbound.close(code, reason))
            .count()
    }

    /// (connected clients, distinct users).
    pub fn counts(&self) -> (usize, usize) {
        let by_user = self.by_user.lock().expect("clients lock");
        (by_user.values().map(Vec::len).sum(), by_user.len())
    }
}
