//! With `[cluster]`: a node's copy of a watched presence channel's members
//! on every node, so a join answers the member list without reading the
//! whole list from Redis (one read per join made a storm of N joins read
//! N²/2 members). Seeded by one read once the channel is watched, kept in
//! step by the presence messages every node's adds, refreshes and removes
//! publish, and aged like Redis's entries: each expires
//! [`PRESENCE_TTL`](crate::redis::PRESENCE_TTL) after its last write
//! reached this node. See "The real-time core" in docs/architecture.md.

use super::ClientInfo;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A change to a channel's members, as Redis announced it.
#[derive(Debug, Clone)]
pub(crate) enum Change {
    /// Added or refreshed (until the given unix second).
    Present(Arc<ClientInfo>, u64),
    /// Removed, by client id.
    Absent(Arc<str>),
}

/// Tells reads apart: a read installs its answer only if no reset (the
/// last subscriber leaving, the link going down or up) came between its
/// start and its answer.
static READS: AtomicU64 = AtomicU64::new(1);

/// Changes a read in flight may log. A read answers within
/// [`REDIS_TIMEOUT`](crate::redis::REDIS_TIMEOUT), so its log holds a few
/// seconds of changes; a longer one is a read whose caller went away (a
/// dropped call): it is given up, so the log does not grow for ever.
const READ_LOG_MAX: usize = 1 << 16;

/// One channel's members as this node knows them.
#[derive(Debug, Default)]
pub(crate) struct Roster {
    /// Members by client id, with the unix second each expires.
    members: HashMap<Arc<str>, (Arc<ClientInfo>, u64)>,
    /// `members` follows Redis: a read was installed since the last reset.
    seeded: bool,
    /// A read in flight: its id and the changes received since it began,
    /// replayed over its answer (they may be newer than what it read).
    reading: Option<(u64, Vec<Change>)>,
}

impl Roster {
    /// The live members at unix second `now`, if the copy follows Redis
    /// (expired ones are dropped on the way).
    pub(crate) fn members(&mut self, now: u64) -> Option<Vec<Arc<ClientInfo>>> {
        if !self.seeded {
            return None;
        }
        self.members.retain(|_, (_, until)| *until > now);
        Some(self.members.values().map(|(m, _)| m.clone()).collect())
    }

    /// A read of the channel's members is about to be sent (after the
    /// channel's watch is in place): its id for [`install`](Self::install).
    /// Reads that overlap share the first one's log.
    pub(crate) fn begin_read(&mut self) -> u64 {
        match &self.reading {
            Some((id, _)) => *id,
            None => {
                let id = READS.fetch_add(1, Ordering::Relaxed);
                self.reading = Some((id, Vec::new()));
                id
            }
        }
    }

    /// Makes read `id`'s answer the copy, with the changes received since
    /// it began applied over it; gives the answer back when a reset (or an
    /// overlapping read that was first) came in between.
    pub(crate) fn install(
        &mut self,
        id: u64,
        read: Vec<(Arc<ClientInfo>, u64)>,
    ) -> Result<(), Vec<(Arc<ClientInfo>, u64)>> {
        let log = match self.reading.take() {
            Some((current, log)) if current == id => log,
            other => {
                self.reading = other;
                return Err(read);
            }
        };
        self.members = read
            .into_iter()
            .map(|(m, until)| (Arc::from(m.client.as_str()), (m, until)))
            .collect();
        self.seeded = true;
        for change in log {
            self.apply_to_members(change);
        }
        Ok(())
    }

    /// A change announced through Redis: applied to the copy, and logged
    /// for a read in flight.
    pub(crate) fn apply(&mut self, change: Change) {
        if let Some((_, log)) = &mut self.reading {
            if log.len() < READ_LOG_MAX {
                log.push(change.clone());
            } else {
                self.reading = None;
            }
        }
        if self.seeded {
            self.apply_to_members(change);
        }
    }

    /// This node's own add or remove, once Redis has it: applied at once
    /// (its message through Redis comes later and changes nothing).
    pub(crate) fn own(&mut self, change: Change) {
        if self.seeded {
            self.apply_to_members(change);
        }
    }

    fn apply_to_members(&mut self, change: Change) {
        match change {
            Change::Present(m, until) => {
                self.members
                    .insert(Arc::from(m.client.as_str()), (m, until));
            }
            Change::Absent(client) => {
                self.members.remove(&client);
            }
        }
    }

    /// The copy no longer follows Redis (nobody here needs it, or messages
    /// may have been lost): forgotten, and a read in flight is not installed.
    pub(crate) fn reset(&mut self) {
        self.members = HashMap::new();
        self.seeded = false;
        self.reading = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(client: &str) -> Arc<ClientInfo> {
        Arc::new(ClientInfo {
            client: client.into(),
            user: format!("user-{client}"),
            conn_info: None,
            chan_info: None,
        })
    }

    fn clients(roster: &mut Roster, now: u64) -> Vec<String> {
        let mut got: Vec<String> = roster
            .members(now)
            .expect("seeded")
            .iter()
            .map(|m| m.client.clone())
            .collect();
        got.sort();
        got
    }

    /// Changes that arrive while the seed read is in flight are replayed
    /// over its answer: a member removed after the read is not kept, one
    /// added after it is not lost.
    #[test]
    fn a_read_is_joined_to_the_changes_that_arrived_meanwhile() {
        let mut roster = Roster::default();
        assert!(roster.members(0).is_none(), "not seeded: no answer");
        roster.apply(Change::Present(member("early"), 100));
        let id = roster.begin_read();
        roster.apply(Change::Absent("a".into()));
        roster.apply(Change::Present(member("c"), 100));
        let read = vec![(member("a"), 100), (member("b"), 100)];
        roster.install(id, read).expect("no reset between");
        assert_eq!(clients(&mut roster, 10), ["b", "c"]);
        roster.apply(Change::Present(member("d"), 100));
        roster.own(Change::Absent("b".into()));
        assert_eq!(clients(&mut roster, 10), ["c", "d"]);
    }

    /// Entries age as in Redis: one not written again since expires.
    #[test]
    fn members_not_refreshed_expire() {
        let mut roster = Roster::default();
        let id = roster.begin_read();
        roster
            .install(id, vec![(member("dead-node"), 30), (member("live"), 30)])
            .unwrap();
        roster.apply(Change::Present(member("live"), 60));
        assert_eq!(clients(&mut roster, 29), ["dead-node", "live"]);
        assert_eq!(clients(&mut roster, 30), ["live"]);
        assert_eq!(clients(&mut roster, 60), Vec::<String>::new());
    }

    /// A read begun before a reset (the last subscriber left, the link
    /// went down) is not installed: it may have missed changes.
    #[test]
    fn a_read_across_a_reset_is_not_installed() {
        let mut roster = Roster::default();
        let id = roster.begin_read();
        assert_eq!(roster.begin_read(), id, "overlapping reads share one");
        roster.reset();
        assert!(roster.install(id, vec![(member("a"), 100)]).is_err());
        assert!(roster.members(0).is_none());
        let again = roster.begin_read();
        assert_ne!(again, id);
        roster.install(again, vec![(member("a"), 100)]).unwrap();
        assert!(
            roster.install(again, Vec::new()).is_err(),
            "an overlapping read's answer is not installed twice"
        );
        assert_eq!(clients(&mut roster, 0), ["a"]);
    }

    /// A read whose caller went away does not log changes for ever.
    #[test]
    fn an_abandoned_read_is_given_up() {
        let mut roster = Roster::default();
        let id = roster.begin_read();
        for i in 0..=READ_LOG_MAX {
            roster.apply(Change::Present(member(&i.to_string()), 100));
        }
        assert!(roster.reading.is_none());
        assert!(roster.install(id, Vec::new()).is_err());
    }
}
