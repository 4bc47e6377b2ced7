//! The one place that decides whether a subscribe or a leave changed a
//! channel's occupancy: a channel is occupied when its subscriptions go
//! 0 → 1 and vacated at 1 → 0; a presence user is added when its
//! connections in the channel go 0 → 1 and removed at 1 → 0. The answers
//! drive both what clients see (`pusher_internal:member_added` /
//! `member_removed`) and the app's webhooks (`channel_occupied`,
//! `channel_vacated`, `member_added`, `member_removed`).
//!
//! The counts are this node's. With several nodes, "occupied" and
//! "vacated" have to be decided across them (no vacated while another
//! node still has subscribers): that decision replaces [`Occupancy`]'s
//! bodies here, and nothing else needs to change.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Mutex;

use weir_pusher::webhook::WebhookEvent;
use weir_pusher::Channel;

use super::{App, PusherRoute};

/// Subscriptions and presence users of one channel.
#[derive(Default)]
struct Count {
    subscriptions: usize,
    /// Connections per user id (presence channels only).
    users: HashMap<String, usize>,
}

/// What a subscribe or leave changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Change {
    /// The channel became occupied (join) or vacated (leave).
    pub channel: bool,
    /// The user was added to (join) or removed from (leave) the presence
    /// channel.
    pub member: bool,
}

/// Counts of every occupied channel of the route, by core name (which
/// names the app too). An entry lives while the channel has a
/// subscription, so the map is bounded by the core's channel limits.
#[derive(Default)]
pub struct Occupancy(Mutex<HashMap<String, Count>>);

impl Occupancy {
    /// A subscription to `core` was made (by `user`, on a presence channel).
    pub fn join(&self, core: &str, user: Option<&str>) -> Change {
        let mut channels = self.0.lock().expect("occupancy lock");
        let count = channels.entry(core.to_string()).or_default();
        count.subscriptions += 1;
        let member = user.is_some_and(|user| {
            let n = count.users.entry(user.to_string()).or_default();
            *n += 1;
            *n == 1
        });
        Change {
            channel: count.subscriptions == 1,
            member,
        }
    }

    /// A subscription to `core` ended.
    pub fn leave(&self, core: &str, user: Option<&str>) -> Change {
        let mut channels = self.0.lock().expect("occupancy lock");
        let Some(count) = channels.get_mut(core) else {
            return Change::default();
        };
        count.subscriptions = count.subscriptions.saturating_sub(1);
        let member = user.is_some_and(|user| match count.users.get_mut(user) {
            Some(n) if *n > 1 => {
                *n -= 1;
                false
            }
            Some(_) => {
                count.users.remove(user);
                true
            }
            None => false,
        });
        let vacated = count.subscriptions == 0;
        if vacated {
            channels.remove(core);
        }
        Change {
            channel: vacated,
            member,
        }
    }

    /// Subscriptions to `core` on this node.
    pub fn subscriptions(&self, core: &str) -> usize {
        let channels = self.0.lock().expect("occupancy lock");
        channels.get(core).map_or(0, |c| c.subscriptions)
    }
}

impl PusherRoute {
    /// A connection of `app` joined `channel` (as `user` on a presence
    /// channel): the webhooks this causes are queued; true when the
    /// other subscribers should get `member_added`.
    pub fn joined(&self, app: &App, channel: &Channel, user: Option<&str>) -> bool {
        let change = self.occupancy.join(&app.core_name(channel), user);
        let name = channel.name();
        if change.channel {
            app.webhooks
                .push(&WebhookEvent::ChannelOccupied { channel: name });
        }
        if let (true, Some(user_id)) = (change.member, user) {
            app.webhooks.push(&WebhookEvent::MemberAdded {
                channel: name,
                user_id,
            });
        }
        change.member
    }

    /// A connection of `app` left `channel`: the webhooks this causes are
    /// queued; true when the others should get `member_removed`.
    pub fn left(&self, app: &App, channel: &Channel, user: Option<&str>) -> bool {
        let change = self.occupancy.leave(&app.core_name(channel), user);
        let name = channel.name();
        if let (true, Some(user_id)) = (change.member, user) {
            app.webhooks.push(&WebhookEvent::MemberRemoved {
                channel: name,
                user_id,
            });
        }
        if change.channel {
            app.webhooks
                .push(&WebhookEvent::ChannelVacated { channel: name });
        }
        change.member
    }

    /// Counts frames queued toward `app`'s subscribers of `core` by one
    /// event published there (all of them but `exclude`).
    pub fn count_fanout(&self, app: &App, core: &str, excluded: bool) {
        // An excluded socket not subscribed here makes this one short.
        let n = self
            .occupancy
            .subscriptions(core)
            .saturating_sub(usize::from(excluded));
        app.counters
            .messages_out
            .fetch_add(n as u64, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Occupied at the first subscription, vacated at the last; a presence
    /// user added at its first connection and removed at its last.
    #[test]
    fn first_and_last_decide() {
        let o = Occupancy::default();
        let c = |channel, member| Change { channel, member };
        assert_eq!(o.join("p0:a", None), c(true, false));
        assert_eq!(o.join("p0:a", None), c(false, false));
        assert_eq!(o.leave("p0:a", None), c(false, false));
        assert_eq!(o.leave("p0:a", None), c(true, false));
        assert_eq!(o.leave("p0:a", None), c(false, false), "nothing left");

        assert_eq!(o.join("r0:presence-x", Some("u1")), c(true, true));
        assert_eq!(o.join("r0:presence-x", Some("u1")), c(false, false));
        assert_eq!(o.join("r0:presence-x", Some("u2")), c(false, true));
        assert_eq!(o.subscriptions("r0:presence-x"), 3);
        assert_eq!(o.leave("r0:presence-x", Some("u1")), c(false, false));
        assert_eq!(o.leave("r0:presence-x", Some("u1")), c(false, true));
        assert_eq!(o.leave("r0:presence-x", Some("u2")), c(true, true));
        assert_eq!(o.subscriptions("r0:presence-x"), 0);
        assert_eq!(o.subscriptions("r1:presence-x"), 0, "another app's");
    }
}
