//! Who is in each channel of a pusher route, on every node: subscriptions
//! and, on presence channels, connections per user. Its transitions are
//! the cluster-wide answers webhooks and member events need: a channel is
//! *occupied* at its first subscription anywhere and *vacated* at its last
//! anywhere, a user is *added* to a presence channel at its first
//! connection anywhere and *removed* at its last.
//!
//! On one node the counts are this node's ([`Census::here`]). With
//! `[cluster]` each change is also one Lua script on Redis (atomic on the
//! channel's shard), whose answer is the transition; per channel:
//!
//! - `…{ch}:on`, a hash: node → its subscriptions;
//! - `…{ch}:oz`, a sorted set: node → when its lease ends;
//! - `…{ch}:ou:<node>`, a hash: user → the node's connections (presence).
//!
//! A node holds a lease on each channel it counts in and renews it every
//! [`REFRESH`]; a node that stops (crashed, cut off) has its counts dropped
//! by the next script on the channel once [`NODE_LEASE`] passed. So a count
//! is bounded by the live nodes, and a dead node's subscribers stop
//! counting within the lease. The renewal writes a node's counts only where
//! Redis has none for it (Redis restarted, or the lease lapsed): a renewal
//! racing a join or leave never overwrites what the scripts counted.
//!
//! `GET /channels` lists from `…{scope}:index`, a sorted set: channel →
//! lease end, written by each node for the channels it holds; a listed
//! channel is checked with its counts before it is answered.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use weir_realtime::redis::RedisStore;
use weir_realtime::{Realtime, RealtimeError};

/// How long a node's counts stand without a renewal: three renewals, so a
/// slow Redis call or two does not drop a live node's subscribers.
pub const NODE_LEASE: Duration = Duration::from_secs(30);
/// How often a node renews its leases.
pub const REFRESH: Duration = Duration::from_secs(10);

/// What a subscription's join changed, across nodes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Joined {
    /// The channel's first subscription anywhere.
    pub occupied: bool,
    /// The user's first connection in the (presence) channel anywhere.
    pub member_added: bool,
}

/// What a subscription's end changed, across nodes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Left {
    /// The channel's last subscription anywhere.
    pub vacated: bool,
    /// The user's last connection in the (presence) channel anywhere.
    pub member_removed: bool,
}

/// A channel's counts on this node.
#[derive(Default)]
struct Tally {
    subscriptions: usize,
    /// Connections per user (presence channels).
    users: HashMap<String, usize>,
}

/// A channel this node holds: its name, subscriptions and connections per
/// user, as a renewal writes them.
type Held = (String, usize, Vec<(String, usize)>);

/// The route's census (see the module head).
pub struct Census {
    /// This node's counts, by core channel name: every subscription of
    /// the route's connections, so bounded by them.
    here: Mutex<HashMap<String, Tally>>,
    across: Option<Across>,
}

/// The Redis side, with `[cluster]`.
struct Across {
    store: Arc<RedisStore>,
    /// This node's name in the counts: random per route, so a restarted
    /// node never inherits a dead one's counts.
    node: String,
}

impl Census {
    /// The census of a route whose core is `realtime`: across nodes when
    /// the core is (its store, its scope), renewing its leases on the
    /// core's runtime.
    pub fn new(realtime: &Realtime) -> Result<Arc<Census>, getrandom::Error> {
        let across = match realtime.store() {
            None => None,
            Some(store) => {
                let mut id = [0u8; 8];
                getrandom::fill(&mut id)?;
                Some(Across {
                    store: store.clone(),
                    node: format!("{:016x}", u64::from_be_bytes(id)),
                })
            }
        };
        let census = Arc::new(Census {
            here: Mutex::default(),
            across,
        });
        if let Some(runtime) = realtime.runtime() {
            runtime.spawn(renew(Arc::downgrade(&census)));
        }
        Ok(census)
    }

    /// One subscription more in `channel` (a core name), by `user` on a
    /// presence channel.
    pub async fn joined(&self, channel: &str, user: Option<&str>) -> Joined {
        let here = {
            let mut tallies = self.here.lock().expect("census lock");
            let tally = tallies.entry(channel.to_string()).or_default();
            tally.subscriptions += 1;
            let member_added = user.is_some_and(|u| {
                let n = tally.users.entry(u.to_string()).or_default();
                *n += 1;
                *n == 1
            });
            Joined {
                occupied: tally.subscriptions == 1,
                member_added,
            }
        };
        let Some(across) = &self.across else {
            return here;
        };
        let (keys, mut args) = across.call(channel);
        args.push(user.unwrap_or_default().into());
        match across.store.script::<(u8, u8)>(JOIN, &keys, &args).await {
            Ok((occupied, member_added)) => {
                if occupied == 1 {
                    across.index(&[channel]).await;
                }
                Joined {
                    occupied: occupied == 1,
                    member_added: member_added == 1,
                }
            }
            Err(e) => {
                tracing::debug!(channel, error = %e, "pusher: census answered for this node only");
                here
            }
        }
    }

    /// One subscription fewer in `channel` (one [`joined`](Self::joined) made).
    pub async fn left(&self, channel: &str, user: Option<&str>) -> Left {
        let here = {
            let mut tallies = self.here.lock().expect("census lock");
            let Some(tally) = tallies.get_mut(channel) else {
                return Left::default();
            };
            tally.subscriptions = tally.subscriptions.saturating_sub(1);
            let member_removed = user.is_some_and(|u| match tally.users.get_mut(u) {
                Some(n) if *n > 1 => {
                    *n -= 1;
                    false
                }
                Some(_) => tally.users.remove(u).is_some(),
                None => false,
            });
            let vacated = tally.subscriptions == 0;
            if vacated {
                tallies.remove(channel);
            }
            Left {
                vacated,
                member_removed,
            }
        };
        let Some(across) = &self.across else {
            return here;
        };
        let (keys, mut args) = across.call(channel);
        args.push(user.unwrap_or_default().into());
        match across.store.script::<(u8, u8)>(LEAVE, &keys, &args).await {
            Ok((vacated, member_removed)) => Left {
                vacated: vacated == 1,
                member_removed: member_removed == 1,
            },
            Err(e) => {
                tracing::debug!(channel, error = %e, "pusher: census answered for this node only");
                here
            }
        }
    }

    /// `channel`'s subscriptions on this node.
    pub fn subscriptions_here(&self, channel: &str) -> usize {
        let tallies = self.here.lock().expect("census lock");
        tallies.get(channel).map_or(0, |t| t.subscriptions)
    }

    /// `channel`'s subscriptions and its users (presence channels), on
    /// every node.
    pub async fn tally(&self, channel: &str) -> Result<(u64, Vec<String>), RealtimeError> {
        let Some(across) = &self.across else {
            let tallies = self.here.lock().expect("census lock");
            return Ok(tallies.get(channel).map_or((0, Vec::new()), |t| {
                (t.subscriptions as u64, t.users.keys().cloned().collect())
            }));
        };
        let (keys, args) = across.call(channel);
        let (subscriptions, users): (u64, Vec<String>) =
            across.store.script(TALLY, &keys, &args).await?;
        Ok((subscriptions, users))
    }

    /// Channels with a subscription on some node (core names).
    pub async fn occupied(&self) -> Result<Vec<String>, RealtimeError> {
        let Some(across) = &self.across else {
            let tallies = self.here.lock().expect("census lock");
            return Ok(tallies.keys().cloned().collect());
        };
        let now = unix_secs().to_string().into_bytes();
        let listed: Vec<String> = across
            .store
            .script(LISTED, &[across.index_key()], &[now])
            .await?;
        Ok(listed)
    }

    /// This node's channels and counts, for a renewal.
    fn snapshot(&self) -> Vec<Held> {
        let tallies = self.here.lock().expect("census lock");
        tallies
            .iter()
            .map(|(name, t)| {
                let users = t.users.iter().map(|(u, n)| (u.clone(), *n)).collect();
                (name.clone(), t.subscriptions, users)
            })
            .collect()
    }
}

impl Across {
    /// The keys of `channel`'s counts and the arguments every script
    /// starts with: node, now, lease end, keys' time to live, users prefix.
    fn call(&self, channel: &str) -> (Vec<String>, Vec<Vec<u8>>) {
        let now = unix_secs();
        let users = self.store.channel_key(channel, "ou:");
        let keys = vec![
            self.store.channel_key(channel, "on"),
            self.store.channel_key(channel, "oz"),
            format!("{users}{}", self.node),
        ];
        let args = vec![
            self.node.clone().into_bytes(),
            now.to_string().into_bytes(),
            (now + NODE_LEASE.as_secs()).to_string().into_bytes(),
            (NODE_LEASE.as_secs() * 2).to_string().into_bytes(),
            users.into_bytes(),
        ];
        (keys, args)
    }

    fn index_key(&self) -> String {
        self.store.channel_key("", "index")
    }

    /// Lists `channels` in the index until a lease from now, and forgets
    /// those whose lease passed.
    async fn index(&self, channels: &[&str]) {
        let now = unix_secs();
        let mut args = vec![
            now.to_string().into_bytes(),
            (now + NODE_LEASE.as_secs()).to_string().into_bytes(),
            (NODE_LEASE.as_secs() * 2).to_string().into_bytes(),
        ];
        args.extend(channels.iter().map(|c| c.as_bytes().to_vec()));
        let _: Result<u8, _> = self.store.script(INDEX, &[self.index_key()], &args).await;
    }
}

/// Renews this node's leases every [`REFRESH`] while the census lives.
async fn renew(census: Weak<Census>) {
    loop {
        tokio::time::sleep(REFRESH).await;
        let Some(census) = census.upgrade() else {
            return;
        };
        let Some(across) = &census.across else {
            return;
        };
        let held = census.snapshot();
        for (channel, subscriptions, users) in &held {
            let (keys, mut args) = across.call(channel);
            args.push(subscriptions.to_string().into_bytes());
            for (user, n) in users {
                args.push(user.clone().into_bytes());
                args.push(n.to_string().into_bytes());
            }
            let _: Result<u8, _> = across.store.script(RENEW, &keys, &args).await;
        }
        let names: Vec<&str> = held.iter().map(|(c, _, _)| c.as_str()).collect();
        for chunk in names.chunks(512) {
            across.index(chunk).await;
        }
    }
}

fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// What every census script starts with. KEYS: 1 node → subscriptions,
/// 2 node → lease end, 3 this node's user → connections. ARGV: 1 node,
/// 2 now, 3 lease end, 4 time to live of the keys, 5 users' key prefix.
/// Drops the nodes whose lease passed; `total` sums the live nodes'
/// subscriptions, `holders` a user's connections on them.
macro_rules! prelude {
    () => {
        r#"
local gone = redis.call('zrangebyscore', KEYS[2], '-inf', ARGV[2])
for _, n in ipairs(gone) do
  redis.call('hdel', KEYS[1], n)
  redis.call('del', ARGV[5] .. n)
end
redis.call('zremrangebyscore', KEYS[2], '-inf', ARGV[2])
local function total()
  local t = 0
  for _, v in ipairs(redis.call('hvals', KEYS[1])) do t = t + tonumber(v) end
  return t
end
local function holders(user)
  local t = 0
  for _, n in ipairs(redis.call('zrange', KEYS[2], 0, -1)) do
    t = t + tonumber(redis.call('hget', ARGV[5] .. n, user) or '0')
  end
  return t
end
local function lease()
  redis.call('zadd', KEYS[2], ARGV[3], ARGV[1])
  redis.call('expire', KEYS[1], ARGV[4])
  redis.call('expire', KEYS[2], ARGV[4])
end
"#
    };
}

/// ARGV[6]: the user ('' if none). Answers {occupied, member added}.
const JOIN: &str = concat!(
    prelude!(),
    r#"
local before = total()
redis.call('hincrby', KEYS[1], ARGV[1], 1)
lease()
local added = 0
if ARGV[6] ~= '' then
  if holders(ARGV[6]) == 0 then added = 1 end
  redis.call('hincrby', KEYS[3], ARGV[6], 1)
  redis.call('expire', KEYS[3], ARGV[4])
end
return {before == 0 and 1 or 0, added}
"#
);

/// ARGV[6]: the user ('' if none). Answers {vacated, member removed}; a
/// leave this node has no count for (its lease lapsed) changes nothing.
const LEAVE: &str = concat!(
    prelude!(),
    r#"
local mine = tonumber(redis.call('hget', KEYS[1], ARGV[1]) or '0')
if mine <= 0 then return {0, 0} end
if mine == 1 then
  redis.call('hdel', KEYS[1], ARGV[1])
  redis.call('zrem', KEYS[2], ARGV[1])
else
  redis.call('hincrby', KEYS[1], ARGV[1], -1)
end
local removed = 0
if ARGV[6] ~= '' then
  local c = tonumber(redis.call('hget', KEYS[3], ARGV[6]) or '0')
  if c > 0 then
    if c == 1 then redis.call('hdel', KEYS[3], ARGV[6]) else redis.call('hincrby', KEYS[3], ARGV[6], -1) end
    if holders(ARGV[6]) == 0 then removed = 1 end
  end
end
if mine == 1 then redis.call('del', KEYS[3]) end
return {total() == 0 and 1 or 0, removed}
"#
);

/// Answers {subscriptions, {users}} over the live nodes.
const TALLY: &str = concat!(
    prelude!(),
    r#"
local seen = {}
local users = {}
for _, n in ipairs(redis.call('zrange', KEYS[2], 0, -1)) do
  for _, u in ipairs(redis.call('hkeys', ARGV[5] .. n)) do
    if not seen[u] then
      seen[u] = true
      users[#users + 1] = u
    end
  end
end
return {total(), users}
"#
);

/// ARGV[6]: this node's subscriptions, then user, connections pairs.
/// Renews the lease; writes the counts only where Redis has none.
const RENEW: &str = concat!(
    prelude!(),
    r#"
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  redis.call('hset', KEYS[1], ARGV[1], ARGV[6])
  redis.call('del', KEYS[3])
  for i = 7, #ARGV, 2 do redis.call('hset', KEYS[3], ARGV[i], ARGV[i + 1]) end
end
lease()
if redis.call('exists', KEYS[3]) == 1 then redis.call('expire', KEYS[3], ARGV[4]) end
return 1
"#
);

/// The index (KEYS[1]): ARGV 1 now, 2 lease end, 3 time to live, then
/// channels listed until the lease end.
const INDEX: &str = r#"
redis.call('zremrangebyscore', KEYS[1], '-inf', ARGV[1])
for i = 4, #ARGV do redis.call('zadd', KEYS[1], ARGV[2], ARGV[i]) end
redis.call('expire', KEYS[1], ARGV[3])
return 1
"#;

/// The index's channels whose lease has not passed (ARGV[1]: now).
const LISTED: &str = r#"
return redis.call('zrangebyscore', KEYS[1], '(' .. ARGV[1], '+inf')
"#;

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;
    use std::collections::HashSet;

    /// On one node the transitions are this node's: occupied at the first
    /// subscription, vacated at the last; a user added at its first
    /// connection, removed at its last.
    #[test]
    fn transitions_on_one_node() {
        let census = Census {
            here: Mutex::default(),
            across: None,
        };
        let join = |u| census.joined("r0:presence-a", u).now_or_never().unwrap();
        let leave = |u| census.left("r0:presence-a", u).now_or_never().unwrap();
        assert_eq!(
            join(Some("u1")),
            Joined {
                occupied: true,
                member_added: true
            }
        );
        assert_eq!(
            join(Some("u1")),
            Joined {
                occupied: false,
                member_added: false
            }
        );
        assert!(join(Some("u2")).member_added);
        let (subs, users) = census
            .tally("r0:presence-a")
            .now_or_never()
            .unwrap()
            .unwrap();
        assert_eq!((subs, users.len()), (3, 2));
        assert_eq!(leave(Some("u1")), Left::default());
        assert!(leave(Some("u1")).member_removed);
        assert_eq!(
            leave(Some("u2")),
            Left {
                vacated: true,
                member_removed: true
            }
        );
        assert_eq!(leave(Some("u2")), Left::default(), "nothing left to leave");
        let set: HashSet<String> = census
            .occupied()
            .now_or_never()
            .unwrap()
            .unwrap()
            .into_iter()
            .collect();
        assert!(set.is_empty());
    }
}
