//! A channel's presence in memory: who is subscribed (client id, user id,
//! connection and channel info), capped at the namespace's `presence_max`.
//! A Redis store (a hash per channel whose entries expire unless their node
//! refreshes them) answers the same questions across nodes.

use super::ClientInfo;
use std::collections::HashMap;
use std::sync::Arc;

/// Why a member is not added.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PresenceError {
    /// The channel already holds `presence_max` members (Centrifugo: 106).
    #[error("limit exceeded")]
    PresenceFull,
}

/// Counts of a channel's presence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PresenceStats {
    pub num_clients: usize,
    pub num_users: usize,
}

/// One channel's members, by client id.
#[derive(Debug, Default)]
pub struct Presence {
    members: HashMap<Arc<str>, Arc<ClientInfo>>,
}

impl Presence {
    /// Adds `info` unless the channel is full (`max` 0: no cap); a client
    /// already there is replaced, not counted twice.
    pub fn add(&mut self, info: Arc<ClientInfo>, max: usize) -> Result<(), PresenceError> {
        let known = self.members.contains_key(info.client.as_str());
        if !known && max != 0 && self.members.len() >= max {
            return Err(PresenceError::PresenceFull);
        }
        self.members.insert(info.client.as_str().into(), info);
        Ok(())
    }

    /// The member that left, if it was there.
    pub fn remove(&mut self, client: &str) -> Option<Arc<ClientInfo>> {
        self.members.remove(client)
    }

    pub fn members(&self) -> impl Iterator<Item = &Arc<ClientInfo>> {
        self.members.values()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    pub fn stats(&self) -> PresenceStats {
        stats_of(self.members.values())
    }
}

/// Clients and distinct users among `members`.
pub(crate) fn stats_of<'a>(members: impl Iterator<Item = &'a Arc<ClientInfo>>) -> PresenceStats {
    let mut users: Vec<&str> = Vec::new();
    let mut clients = 0;
    for m in members {
        clients += 1;
        users.push(&m.user);
    }
    users.sort_unstable();
    users.dedup();
    PresenceStats {
        num_clients: clients,
        num_users: users.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(client: &str, user: &str) -> Arc<ClientInfo> {
        Arc::new(ClientInfo {
            client: client.into(),
            user: user.into(),
            conn_info: None,
            chan_info: None,
        })
    }

    #[test]
    fn presence_counts_clients_and_users_and_keeps_its_cap() {
        let mut p = Presence::default();
        p.add(member("c1", "alice"), 2).unwrap();
        p.add(member("c2", "alice"), 2).unwrap();
        assert_eq!(
            p.add(member("c3", "bob"), 2),
            Err(PresenceError::PresenceFull)
        );
        p.add(member("c2", "alice"), 2)
            .expect("a known client is not a new member");
        assert_eq!(
            p.stats(),
            PresenceStats {
                num_clients: 2,
                num_users: 1
            }
        );
        assert!(p.remove("c1").is_some());
        p.add(member("c3", "bob"), 2).unwrap();
        assert_eq!(p.stats().num_users, 2);
        assert!(p.remove("nobody").is_none());
    }
}
