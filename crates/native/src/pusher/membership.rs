//! A subscription's join and leave as one unit of work each: the core's
//! subscribe, the census's count, then the answer (`subscription_succeeded`
//! with the presence list, `member_added` to the others, the cache
//! channel's last event or `pusher:cache_miss`); on leave the count again
//! and `member_removed`. On one node the work finishes at its first poll,
//! inline; with `[cluster]` it waits on Redis on the core's runtime
//! ([`PusherRoute::run`]), and a leave waits for its join's outcome, so
//! counts never go below what was joined.

use super::{App, PusherRoute};
use bytes::Bytes;
use serde_json::value::RawValue;
use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::oneshot;
use weir_pusher::webhook::WebhookEvent;
use weir_pusher::{server, Channel};
use weir_reactor::outbound::Outbound;
use weir_reactor::registry::ConnId;
use weir_realtime::{ClientInfo, HistoryQuery, RealtimeError, Subscription};
use weir_ws::encode;
use weir_ws::frame::OpCode;

/// `pusher:subscription_error` type of a limit reached.
pub(super) const LIMIT: &str = "LimitReached";

/// How long a subscribe waits for the node's Redis subscription of its
/// topic (the core's own bound on a Redis call): past it the client is
/// answered anyway, and other nodes' events reach it once the link is up.
const WATCH_TIMEOUT: std::time::Duration = weir_realtime::redis::REDIS_TIMEOUT;

/// A subscribe the connection checked and hands over.
pub(super) struct Joining {
    pub route: Arc<PusherRoute>,
    /// The app's index in the route.
    pub app: usize,
    pub channel: Channel,
    /// The core's name of the channel.
    pub core: String,
    pub conn: ConnId,
    pub outbound: Arc<Outbound>,
    pub member: Arc<ClientInfo>,
    pub state: Arc<Subscription>,
}

/// Sends one message (a JSON text) to the client, counted as `app`'s.
fn send(app: &App, outbound: &Outbound, json: &str) {
    outbound.send_frames(&encode::frame(OpCode::Text, json.as_bytes()));
    app.counters.messages_out.fetch_add(1, Ordering::Relaxed);
}

/// A member event (`member_added`, `member_removed`) to the channel's
/// other subscribers, on every node (through the route's topics).
fn to_others(route: &PusherRoute, app: &App, core: &str, json: &str, conn: ConnId) {
    let frame = Bytes::from(encode::frame(OpCode::Text, json.as_bytes()));
    route.topics.publish(core, &frame, Some(conn));
    route.count_fanout(app, core, true);
}

/// Subscribes on Redis at once per route (with `[cluster]`). A subscribe
/// is a few Redis calls (a presence one's member list comes from the
/// core's copy, read from Redis once per node): a storm of thousands at
/// once would queue them all in Redis, past the deadline of each call
/// ([`weir_realtime::redis::REDIS_TIMEOUT`]), so the rest wait for a turn
/// here.
pub const JOINS_IN_FLIGHT: usize = 32;

/// Tries at a presence channel's members a subscribe makes before it gives
/// up (each bounded by the Redis deadline; only a read from Redis, the
/// seed of the core's copy, can fail).
const PRESENCE_READS: usize = 3;

/// Joins, counts and answers; `done` says whether the subscription was
/// counted (what its leave then undoes).
pub(super) async fn join(j: Joining, done: oneshot::Sender<bool>) {
    let route = &j.route;
    let name = j.channel.name();
    // On one node the join runs inline and never waits here.
    let _turn = match route.realtime.runtime() {
        Some(_) => Some(route.joins.acquire().await.expect("never closed")),
        None => None,
    };
    let joined = route
        .realtime
        .clone()
        .subscribe(
            weir_realtime::Subscribe {
                channel: j.core.clone(),
                topics: route.topics.clone(),
                conn: j.conn,
                outbound: j.outbound.clone(),
                member: j.member.clone(),
                recoverable: false,
                recover: None,
                subscription: j.state.clone(),
            },
            false,
            // Answered below, once the presence list can be read.
            Box::new(|_| Bytes::new()),
        )
        .await;
    if let Err(e) = joined {
        let why = match e {
            RealtimeError::Presence(_) => "the presence channel is full (max_presence_members)",
            RealtimeError::TooManyChannels => "too many channels on this node (max_channels)",
            RealtimeError::Unavailable => "the cluster's store did not answer; try again",
            _ => "subscription refused",
        };
        send(
            &route.apps[j.app],
            &j.outbound,
            &server::subscription_error(name, LIMIT, why, 400),
        );
        let _ = done.send(false);
        return;
    }
    // With `[cluster]`: what other nodes trigger from now on reaches this
    // one before the client is told it is subscribed.
    if !route.topics.wait_watched(&j.core, WATCH_TIMEOUT).await {
        tracing::debug!(
            channel = name,
            "pusher: the topic's Redis subscription is late"
        );
    }
    if !j.state.active() {
        // The client left while the subscribe waited on Redis.
        let _ = done.send(false);
        return;
    }
    let user = j.channel.is_presence().then_some(j.member.user.as_str());
    let counted = route.joined(&route.apps[j.app], &j.channel, user).await;
    if j.channel.is_presence() {
        let Some(members) = presence(route, &j.core).await else {
            // A list without the members would be a wrong answer:
            // refused instead, and the join undone.
            send(
                &route.apps[j.app],
                &j.outbound,
                &server::subscription_error(
                    name,
                    LIMIT,
                    "the cluster's store did not answer; try again",
                    503,
                ),
            );
            route
                .realtime
                .leave(&j.core, &route.topics, j.conn, &j.member, &j.state);
            route.left(&route.apps[j.app], &j.channel, user).await;
            let _ = done.send(false);
            return;
        };
        let mut seen = HashSet::new();
        let mut list: Vec<server::Member> = members
            .iter()
            .filter(|m| seen.insert(m.user.as_str()))
            .map(|m| server::Member {
                user_id: &m.user,
                user_info: info_of(m),
            })
            .collect();
        if seen.insert(j.member.user.as_str()) {
            list.push(server::Member {
                user_id: &j.member.user,
                user_info: info_of(&j.member),
            });
        }
        send(
            &route.apps[j.app],
            &j.outbound,
            &server::presence_subscription_succeeded(name, &list),
        );
        if counted.member_added {
            let me = server::Member {
                user_id: &j.member.user,
                user_info: info_of(&j.member),
            };
            to_others(
                route,
                &route.apps[j.app],
                &j.core,
                &server::member_added(name, me),
                j.conn,
            );
        }
    } else {
        send(
            &route.apps[j.app],
            &j.outbound,
            &server::subscription_succeeded(name),
        );
    }
    if j.channel.is_cache() {
        replay_cache(route, &route.apps[j.app], name, &j.core, &j.outbound).await;
    }
    let _ = done.send(true);
}

/// A presence channel's members, read again after a failed read; None
/// when every read failed.
async fn presence(route: &PusherRoute, core: &str) -> Option<Vec<Arc<ClientInfo>>> {
    for _ in 0..PRESENCE_READS {
        match route.realtime.clone().presence(core.to_string()).await {
            Ok(members) => return Some(members),
            Err(e) => tracing::debug!(channel = core, error = %e, "pusher: presence read failed"),
        }
    }
    None
}

/// A cache channel's last event, or `pusher:cache_miss`.
async fn replay_cache(route: &PusherRoute, app: &App, name: &str, core: &str, outbound: &Outbound) {
    let query = HistoryQuery {
        limit: Some(1),
        since: None,
        reverse: true,
    };
    let last = route
        .realtime
        .clone()
        .history(core.to_string(), query)
        .await;
    match last {
        Ok((pubs, _)) if !pubs.is_empty() => {
            outbound.send_frames(&encode::frame(OpCode::Text, &pubs[0].data));
            app.counters.messages_out.fetch_add(1, Ordering::Relaxed);
        }
        _ => {
            send(app, outbound, &server::cache_miss(name));
            app.webhooks
                .push(&WebhookEvent::CacheMiss { channel: name });
        }
    }
}

/// Uncounts a subscription the core has left (once its join's outcome is
/// known); `member_removed` to the others when the user has no connection
/// left in the channel on any node.
pub(super) async fn leave(
    route: Arc<PusherRoute>,
    app: usize,
    channel: Channel,
    core: String,
    conn: ConnId,
    member: Arc<ClientInfo>,
    joined: oneshot::Receiver<bool>,
) {
    if joined.await != Ok(true) {
        return;
    }
    let user = channel.is_presence().then_some(member.user.as_str());
    let left = route.left(&route.apps[app], &channel, user).await;
    if left.member_removed {
        let removed = server::member_removed(channel.name(), &member.user);
        to_others(&route, &route.apps[app], &core, &removed, conn);
    }
}

/// A member's `user_info` as raw JSON (it was checked at subscribe).
fn info_of(m: &ClientInfo) -> Option<&RawValue> {
    let bytes = m.conn_info.as_deref()?;
    serde_json::from_slice::<&RawValue>(bytes).ok()
}
